"""The ACL 1.0 request signature (docs/acl.md §signing): a pure function of extFields and body.

Signature = Base64(HmacSHA1(secretKey, values of every extField except `Signature`, in ascending
order of their keys, concatenated, followed by the body bytes)). Clients sign what they send
(Java's AclClientRPCHook, ali-ons, the C++ client); the broker recomputes it over what it received.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import operator
import secrets
import time
from collections.abc import Callable, Mapping
from typing import Final

from daemon.remoting.command import RemotingCommand

_c_keyed: Callable[[bytes], bytes] | None
_c_signature: Callable[[bytes, str | tuple[str, ...], bytes], str] | None
_c_verify: Callable[[bytes, dict[str, str], tuple[str, ...], tuple[str, ...], bytes, str], bool | None] | None
try:  # the C HMAC-SHA1 of the compiled build (_hmacsha1.c); hashlib does the same without it
    from daemon.acl import _hmacsha1

    _c_keyed, _c_signature, _c_verify = _hmacsha1.keyed, _hmacsha1.signature, _hmacsha1.verify
except ImportError:
    _c_keyed = _c_signature = _c_verify = None

ACCESS_KEY: Final = "AccessKey"
SECRET_KEY: Final = "SecretKey"
SIGNATURE: Final = "Signature"
SECURITY_TOKEN: Final = "SecurityToken"
ONS_CHANNEL: Final = "OnsChannel"
#: Added by Java clients before signing, but left out by 4.9.8's server when it checks
#: (docs/acl.md §quirks-of-498).
UNIQUE_KEY_QUERY: Final = "_UNIQUE_KEY_QUERY"

#: Signed fields mqctl adds to admin requests against replay (`aclAdminFreshness`, daemon.acl.plain):
#: the time in epoch ms, a random nonce, and the request code the signature is meant for (ACL 1.0 signs
#: no code, so a captured request otherwise replays under any other).
FRESH_TIMESTAMP: Final = "mqctlTimestamp"
FRESH_NONCE: Final = "mqctlNonce"
FRESH_CODE: Final = "mqctlCode"
#: Hex digits of the nonce, exactly: a nonce (or timestamp) of another length would let characters move
#: between mqctlCode, mqctlNonce and mqctlTimestamp (adjacent in the signed concatenation) and turn a
#: captured request's signed bytes into another request code with an unseen nonce.
NONCE_LENGTH: Final = 32


def fresh_code(code: int) -> str:
    """The signed value of mqctlCode: the code behind a letter, so the field signed before it can neither
    take its leading digits nor give it more (327 would otherwise sign the same bytes as 27)."""
    return f"c{code}"


_CLIENT_EXCLUDED: Final = frozenset({SIGNATURE})
_SHA1_BLOCK: Final = 64
_ORDERS_PER_COUNT: Final = 4


def hmac_backend() -> str:
    """Which HMAC-SHA1 checks signatures in this process (the broker's start-up line names it)."""
    return "C over OpenSSL's SHA-1" if _c_signature is not None else "hashlib"


def signing_content(
    fields: Mapping[str, str], body: bytes, exclude: frozenset[str] = _CLIENT_EXCLUDED
) -> bytes:
    """The bytes a signature covers. Keys are ASCII in practice, so Python's code-point order is
    Java's UTF-16 `String` order."""
    text = "".join(fields[key] for key in sorted(fields) if key not in exclude)
    return text.encode("utf-8") + body if body else text.encode("utf-8")


def calculate(secret_key: str, content: bytes) -> str:
    """Base64 of HMAC-SHA1(secret key, content), as Java's AclSigner prints it."""
    digest = hmac.new(secret_key.encode("utf-8"), content, hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


def _no_values(_fields: Mapping[str, str]) -> tuple[str, ...]:
    return ()


#: Picks the signed values of a dict in key order (an itemgetter; of one key: the value itself).
Picker = Callable[[dict[str, str]], str | tuple[str, ...]]


class Verifier:
    """Recomputes signatures for one secret key, cheaply: HMAC-SHA1 (RFC 2104) from two SHA-1 states
    keyed once, and the signed key order remembered (a client sends the same header fields every time).
    With the compiled build the states are C structs and `verify` is one C call that reads the values
    from the dict, hashes them and the body, and compares the digest (_hmacsha1.c: through hashlib, a
    signed send paid more for seven method calls and four EVP context copies than for the hashing, and
    the value tuple, the Base64 str and `compare_digest` were a fifth of the rest); without it, two
    hashlib states (copying those costs less than copying an `hmac` object).

    Orders are remembered per number of fields (the last few of each count: an account's sends and
    pulls may have as many fields), so finding one builds no tuple of names to hash. An order fits a
    request exactly when every key it names is in the request's dict and the fields left over are the
    excluded ones present: then the two key sets are equal. A field in place of an excluded one fails
    that count, so no field goes unsigned."""

    __slots__ = ("_exclude", "_excluded", "_inner", "_orders", "_outer", "_states", "_verify")

    def __init__(self, secret_key: str, exclude: frozenset[str] = _CLIENT_EXCLUDED) -> None:
        key = secret_key.encode("utf-8")
        #: The C check when the build has it, else None: hashlib (read once: a module global costs a
        #: dict lookup per send).
        self._verify = _c_verify if _c_keyed is not None and _c_signature is not None else None
        if self._verify is not None and _c_keyed is not None:  # one keyed copy of the secret, the one used
            self._states = _c_keyed(key)
        else:
            if len(key) > _SHA1_BLOCK:
                key = hashlib.sha1(key).digest()
            key = key.ljust(_SHA1_BLOCK, b"\0")
            self._inner = hashlib.sha1(bytes([b ^ 0x36 for b in key]))
            self._outer = hashlib.sha1(bytes([b ^ 0x5C for b in key]))
        #: field count -> the last orders seen with that many fields: (the signed keys in order, their picker)
        self._orders: dict[int, list[tuple[tuple[str, ...], Picker]]] = {}
        self._exclude = exclude
        self._excluded = tuple(sorted(exclude))

    def signature(self, fields: dict[str, str], body: bytes) -> str:
        if type(fields) is not dict:  # a subclass may answer a missing key (defaultdict): no KeyError
            fields = dict(fields)
        if self._verify is not None and _c_signature is not None:
            return _c_signature(self._states, self._values(fields), body)
        inner = self._inner.copy()
        inner.update("".join(self._values(fields)).encode("utf-8"))
        if body:
            inner.update(body)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return binascii.b2a_base64(outer.digest(), newline=False).decode("ascii")  # half b64encode's cost

    def verify(self, fields: dict[str, str], body: bytes, given: str) -> bool:
        """Whether `given` is the signature of these fields and body (compared in constant time)."""
        if type(fields) is not dict:
            fields = dict(fields)
        c_verify = self._verify
        if c_verify is None:
            # compare_digest raises TypeError on non-ASCII str; a Base64 signature never has any
            return given.isascii() and hmac.compare_digest(self.signature(fields, body), given)
        orders = self._orders.get(len(fields))
        if orders is not None:
            for keys, _ in orders:
                fits = c_verify(self._states, fields, keys, self._excluded, body, given)
                if fits is not None:
                    return fits
        keys, _ = self._learn(fields)
        return c_verify(self._states, fields, keys, self._excluded, body, given) is True

    def _values(self, fields: dict[str, str]) -> str | tuple[str, ...]:
        """The values of the signed fields in the order of their keys (one key's picker answers its value)."""
        count = len(fields)
        excluded = 0
        for key in self._excluded:
            if key in fields:
                excluded += 1
        orders = self._orders.get(count)
        if orders is not None:
            for keys, pick in orders:
                if len(keys) + excluded == count:
                    try:
                        return pick(fields)
                    except KeyError:  # another set of names of the same size
                        pass
        return self._learn(fields)[1](fields)

    def _learn(self, fields: dict[str, str]) -> tuple[tuple[str, ...], Picker]:
        """Remember the order of this request's signed keys (the oldest of its count makes room)."""
        keys = tuple(k for k in sorted(fields) if k not in self._exclude)
        # an itemgetter picks the values in C (one key: the value itself, which joins the same)
        pick: Picker = operator.itemgetter(*keys) if keys else _no_values
        orders = self._orders.get(len(fields))
        if orders is None:
            if len(self._orders) > 256:  # a client sending ever-new field counts must not grow this
                self._orders.clear()
            orders = self._orders[len(fields)] = []
        if len(orders) == _ORDERS_PER_COUNT:
            del orders[0]
        orders.append((keys, pick))
        return keys, pick


class Signer:
    """Signs requests with one account's credentials (a `RemotingClient` signer). It keys its HMAC
    once, as the broker's Verifier does: `hmac.new` per request costs far more than copying the
    keyed states."""

    __slots__ = ("_keyed", "access_key", "fresh_codes", "security_token")

    def __init__(
        self,
        access_key: str,
        secret_key: str,
        security_token: str | None = None,
        fresh_codes: frozenset[int] = frozenset(),
    ) -> None:
        self.access_key = access_key
        self.security_token = security_token
        #: Request codes signed with a timestamp, a nonce and their code (FRESH_*): mqctl's admin codes.
        self.fresh_codes = fresh_codes
        self._keyed = Verifier(secret_key)

    def __call__(self, request: RemotingCommand) -> None:
        if request.code in self.fresh_codes:
            fields = request.ext_fields
            fields[FRESH_TIMESTAMP] = str(time.time_ns() // 1_000_000)
            fields[FRESH_NONCE] = secrets.token_hex(NONCE_LENGTH // 2)
            fields[FRESH_CODE] = fresh_code(request.code)
        self.sign(request.ext_fields, request.body)

    def sign(self, ext_fields: dict[str, str], body: bytes) -> None:
        """Add `AccessKey` (and `SecurityToken`) to `ext_fields`, then the `Signature` over all of them."""
        ext_fields[ACCESS_KEY] = self.access_key
        if self.security_token:
            ext_fields[SECURITY_TOKEN] = self.security_token
        ext_fields.pop(SIGNATURE, None)
        ext_fields[SIGNATURE] = self._keyed.signature(ext_fields, body)

    def __repr__(self) -> str:  # never the secret, not even in a traceback
        return f"Signer(access_key={self.access_key!r})"
