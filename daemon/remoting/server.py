"""Asyncio remoting server: accepts connections and runs a processor table over them.

Used by the NameServer and the broker alike; everything protocol-specific lives in the processors.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping

from daemon.remoting.connection import Connection, Processor, ReplyBatch, RequestDispatcher, peer_name
from daemon.remoting.frame import MAX_FRAME_LENGTH
from daemon.remoting.limits import BufferBudget, RemotingLimits, WarningGate

log = logging.getLogger(__name__)


class _Refused(asyncio.Protocol):
    """What a connection past `remotingMaxConnections` gets: closed as soon as it is accepted."""

    def __init__(self, on_made: Callable[[asyncio.BaseTransport], None]) -> None:
        self.on_made = on_made

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.on_made(transport)
        transport.close()


class RemotingServer:
    """Listens on host:port (port 0 picks a free one) and serves the registered processors.

    Unknown request codes are answered with REQUEST_CODE_NOT_SUPPORTED; unparseable frames close only
    the connection they arrived on. Connections without traffic for `idle_timeout` seconds are
    closed, as Java does after `serverChannelMaxIdleTimeSeconds`. `limits` (the daemon's config, read
    live) caps the connections and the bytes of incomplete frames they hold; `budget` counts those.
    """

    def __init__(
        self,
        processors: Mapping[int, Processor] | None = None,
        *,
        host: str = "0.0.0.0",
        port: int = 0,
        default_processor: Processor | None = None,
        max_frame_length: int = MAX_FRAME_LENGTH,
        idle_timeout: float = 120.0,
        limits: RemotingLimits | None = None,
    ) -> None:
        self.dispatcher = RequestDispatcher(processors, default_processor)
        self.host = host
        self.port = port
        self.max_frame_length = max_frame_length
        self.idle_timeout = idle_timeout
        self.limits = limits or RemotingLimits()
        self.budget = BufferBudget(self.limits)
        #: Connections closed on accept because `remotingMaxConnections` were open.
        self.refused_connections = 0
        self._refusals = WarningGate(log)
        self.connections: set[Connection] = set()
        self._close_listeners: list[Callable[[Connection], None]] = []
        self._server: asyncio.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._batch: ReplyBatch | None = None

    def register(self, code: int, processor: Processor) -> None:
        self.dispatcher.register(code, processor)

    def on_connection_closed(self, listener: Callable[[Connection], None]) -> None:
        """Call `listener(conn)` whenever a client connection goes away (for any reason)."""
        self._close_listeners.append(listener)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def start(self, *, serve: bool = True) -> None:
        """Bind and start accepting; `self.port` holds the bound port afterwards. With `serve=False`
        the socket is bound but not listening (connections are refused) until `serve()`."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self.accept, self.host, self.port, reuse_address=True, start_serving=serve
        )
        sock = self._server.sockets[0]
        self.port = sock.getsockname()[1]
        self._sweeper = asyncio.create_task(self._sweep_idle(), name="remoting-idle-sweeper")
        log.info("remoting server listening on %s:%d", self.host, self.port)

    async def serve(self) -> None:
        """Start accepting on the socket `start(serve=False)` bound."""
        assert self._server is not None, "start() first"
        await self._server.start_serving()

    def accept(self) -> asyncio.Protocol:
        """The protocol for one new client connection (the listener's factory; `memory` uses it too)."""
        if len(self.connections) >= self.limits.connection_cap():
            return _Refused(self._refuse)
        loop = asyncio.get_running_loop()
        if self._batch is None or self._batch.loop is not loop:  # (a server restarted on another loop)
            self._batch = ReplyBatch(loop)
        conn = Connection(
            self.dispatcher,
            max_frame_length=self.max_frame_length,
            on_close=self._closed,
            budget=self.budget,
            batch=self._batch,
        )
        self.connections.add(conn)
        return conn

    def _refuse(self, transport: asyncio.BaseTransport) -> None:
        self.refused_connections += 1
        self._refusals.warning(
            "closing connection from %s: %d connections open, remotingMaxConnections allows %d",
            peer_name(transport),
            len(self.connections),
            self.limits.connection_cap(),
        )

    def _closed(self, conn: Connection) -> None:
        self.connections.discard(conn)
        for listener in self._close_listeners:
            try:
                listener(conn)
            except Exception:
                log.exception("connection-closed listener failed for %s", conn.peer)

    async def _sweep_idle(self) -> None:
        loop = asyncio.get_running_loop()
        period = max(0.05, min(self.idle_timeout / 4, 10.0))
        while True:
            await asyncio.sleep(period)
            deadline = loop.time() - self.idle_timeout
            for conn in list(self.connections):
                if conn.last_active < deadline:
                    log.info("closing idle connection from %s", conn.peer)
                    conn.close()

    async def stop(self, grace: float = 5.0) -> None:
        """Stop accepting, let in-flight processors finish (up to `grace` s), close every connection."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        if self._server is not None:
            self._server.close()
        conns = list(self.connections)
        if conns:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.gather(*(c.drain_tasks() for c in conns)), grace)
        for conn in conns:
            conn.close()
        if conns:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.gather(*(c.wait_closed() for c in conns)), grace)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
        log.info("remoting server on port %d stopped", self.port)

    async def __aenter__(self) -> RemotingServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
