"""In-memory transport: two protocols wired back to back, without sockets.

For tests of processors and of whole in-process daemons: requests still go through the real frame
codec (`encode_command`/`decode_frame`), the real `Connection`s and dispatchers, only the TCP layer
is replaced by a hand-off on the event loop.

* `connect_pair` joins two `Connection`s (processor unit tests).
* `MemoryClient` is a `RemotingClient` (the `client.Transport` seam) whose connections go to the
  `RemotingServer`s of in-process daemons registered under their addresses. The server side is the
  server's own accepted-connection protocol, so its connection cap, idle sweep, close listeners
  (a broker forgetting a closed client's consumers) and `stop()` closing them apply as over TCP;
  asynchronous answers (long polling, SYNC_FLUSH offload) and callbacks to the client work alike.

What it does not model: peer addresses are made up (`memory-client:N` for `connect_pair`;
`127.0.0.1:N` for `MemoryClient`, as a broker stores the born host of each message, so an ACL white
list sees every in-memory client as loopback); no back-pressure (`pause_reading` is a no-op, writes
are delivered whole on the next loop turn); no connect timeout, partial reads or resets; a closed
connection is seen by both ends on the next loop turn, as a clean close. `mqctl bench`'s raw stream
sender opens its own sockets and does not go through a `Transport`.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Mapping
from typing import Any

from daemon.remoting.client import RemotingClient
from daemon.remoting.command import RemotingCommand
from daemon.remoting.connection import Connection, Processor, RequestDispatcher
from daemon.remoting.errors import RemotingConnectError
from daemon.remoting.server import RemotingServer

_ports = itertools.count(1)


class MemoryTransport(asyncio.Transport):
    """One direction of an in-memory pipe; `write` delivers to the peer protocol on the next loop turn."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, protocol: asyncio.Protocol, name: tuple[str, int]
    ) -> None:
        super().__init__()
        self._loop = loop
        self._protocol = protocol
        self._name = name
        self.peer: MemoryTransport | None = None
        self._closing = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "peername":
            return self.peer._name if self.peer is not None else default
        if name == "sockname":
            return self._name
        return default

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self._closing and self.peer is not None and not self.peer._closing:
            self._loop.call_soon(self.peer._protocol.data_received, bytes(data))

    def is_closing(self) -> bool:
        return self._closing

    def can_write_eof(self) -> bool:
        return False  # a close ends both directions at once

    def close(self) -> None:
        """Close both directions, like a TCP close seen from both ends."""
        for side in (self, self.peer):
            if side is not None and not side._closing:
                side._closing = True
                self._loop.call_soon(side._protocol.connection_lost, None)

    def abort(self) -> None:
        self.close()

    def pause_reading(self) -> None:
        """Nothing to pause: writes are delivered as they are made."""

    def resume_reading(self) -> None:
        """See pause_reading."""


def connect_pair(
    server: RequestDispatcher,
    client: RequestDispatcher | None = None,
    on_server_close: Callable[[Connection], None] | None = None,
    hosts: tuple[str, str] = ("memory-client", "memory-server"),
) -> tuple[Connection, Connection]:
    """Return `(client_side, server_side)` connections; call inside a running event loop.

    `on_server_close` plays the role of `RemotingServer.on_connection_closed`; `hosts` name the client's
    and the server's ends (an IP stands for a peer on another host, or on loopback).
    """
    client_conn = Connection(client or RequestDispatcher())
    server_conn = Connection(server, on_close=on_server_close)
    _join(client_conn, server_conn, hosts)
    return client_conn, server_conn


def _join(client: asyncio.Protocol, server: asyncio.Protocol, hosts: tuple[str, str]) -> None:
    """Connect two protocols through a pair of `MemoryTransport`s, the server end first (as accept);
    `hosts` name the client and server ends (a made-up port tells pairs apart)."""
    loop = asyncio.get_running_loop()
    port = next(_ports) % 0xFFFF + 1
    client_tr = MemoryTransport(loop, client, (hosts[0], port))
    server_tr = MemoryTransport(loop, server, (hosts[1], port))
    client_tr.peer, server_tr.peer = server_tr, client_tr
    server.connection_made(server_tr)
    client.connection_made(client_tr)


class MemoryClient(RemotingClient):
    """A `RemotingClient` whose connections reach in-process daemons instead of sockets.

    `servers` maps the addresses callers use (a broker's `addr`, `127.0.0.1:<port>` of a NameServer)
    to those daemons' `RemotingServer`s (a mutable dict). An address with no server fails like a
    refused connection; a stopped server still accepts, so take it out of `servers` to refuse.
    """

    def __init__(
        self,
        servers: Mapping[str, RemotingServer] | None = None,
        processors: Mapping[int, Processor] | None = None,
        *,
        signer: Callable[[RemotingCommand], None] | None = None,
    ) -> None:
        super().__init__(processors, signer=signer)
        self.servers: dict[str, RemotingServer] = dict(servers or {})

    async def _connect(self, addr: str) -> Connection:
        server = self.servers.get(addr)
        if server is None:
            raise RemotingConnectError(addr, "no in-process daemon at this address")
        conn = self._new_connection()
        # loopback names: a broker stores the client's address in each message as its born host
        _join(conn, server.accept(), ("127.0.0.1", "127.0.0.1"))
        conn.peer = addr
        return conn
