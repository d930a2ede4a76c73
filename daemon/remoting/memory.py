"""In-memory transport: two `Connection`s wired back to back, without sockets.

For unit tests of processors (broker or NameServer): requests still go through the real frame
codec and dispatcher, only the TCP layer is replaced by a hand-off on the event loop.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from typing import Any

from daemon.remoting.connection import Connection, RequestDispatcher

_ports = itertools.count(1)


class MemoryTransport(asyncio.Transport):
    """One direction of an in-memory pipe; `write` delivers to the peer protocol on the next loop turn."""

    def __init__(self, loop: asyncio.AbstractEventLoop, protocol: Connection, name: tuple[str, int]) -> None:
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
) -> tuple[Connection, Connection]:
    """Return `(client_side, server_side)` connections; call inside a running event loop.

    `on_server_close` plays the role of `RemotingServer.on_connection_closed`.
    """
    loop = asyncio.get_running_loop()
    client_conn = Connection(client or RequestDispatcher())
    server_conn = Connection(server, on_close=on_server_close)
    port = next(_ports)
    client_tr = MemoryTransport(loop, client_conn, ("memory-client", port))
    server_tr = MemoryTransport(loop, server_conn, ("memory-server", port))
    client_tr.peer, server_tr.peer = server_tr, client_tr
    server_conn.connection_made(server_tr)
    client_conn.connection_made(client_tr)
    return client_conn, server_conn
