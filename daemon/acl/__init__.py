"""RocketMQ ACL 1.0 (plain ACL): request signatures, the plain_acl.yml accounts and the validator.

`signature` is the pure codec both ends share; `plain` holds the accounts and the rules of 4.9.8's
PlainAccessValidator; `admin` answers the ACL admin codes 50-54. Nothing here touches a socket.
"""

from __future__ import annotations

from store.native import extend

extend(__name__, __path__)  # the compiled build of the request guard, when it is fresh (store/native.py)
