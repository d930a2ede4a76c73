"""Request processors, one module per request family; each exposes `processors(broker)`."""

from __future__ import annotations

from functools import lru_cache

from daemon.remoting.codes import ResponseCode
from daemon.remoting.connection import Connection
from daemon.remoting.errors import RemotingCommandError
from store.message import HostAddress
from store.native import extend

extend(__name__, __path__)  # the compiled build of the hot modules, when it is fresh (store/native.py)

#: Java appends this (`FAQUrl.suggestTodo`) to several remarks; clients show remarks verbatim.
FAQ = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."


def fail(code: int, remark: str) -> RemotingCommandError:
    """The exception a processor raises to answer with `code` and `remark`."""
    return RemotingCommandError(code, remark)


def system_error(remark: str) -> RemotingCommandError:
    return RemotingCommandError(ResponseCode.SYSTEM_ERROR, remark)


def peer_host(conn: Connection) -> HostAddress:
    """The client's socket address as (ip, port), IPv4-mapped IPv6 folded to IPv4 (ali-ons reads v4 only)."""
    return _host_port(conn.peer)


@lru_cache(maxsize=4096)
def _host_port(peer: str) -> HostAddress:
    """(Parsed once per connection, not once per send.)"""
    host, _, port = peer.rpartition(":")
    host = host.strip("[]")
    if host.startswith("::ffff:") and "." in host:
        host = host[7:]
    try:
        return host or "127.0.0.1", int(port)
    except ValueError:
        return "127.0.0.1", 0
