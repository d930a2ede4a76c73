"""Asyncio remoting server: accepts connections and runs a processor table over them.

Used by the NameServer and the broker alike; everything protocol-specific lives in the processors.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
from collections.abc import Callable, Mapping

from daemon.lifecycle import supervise
from daemon.protect import budget_host, is_loopback
from daemon.remoting.connection import (
    Connection,
    Processor,
    ReplyBatch,
    RequestDispatcher,
    ip_port,
    peer_address,
    peer_name,
)
from daemon.remoting.frame import MAX_FRAME_LENGTH, MAX_REQUEST_HEADER
from daemon.remoting.limits import BufferBudget, RemotingLimits, WarningGate
from daemon.remoting.tls import HANDSHAKE_MAGIC, ServerTls, TlsReadBuffer

#: Seconds a TLS handshake may take before the connection is closed (Netty's default handshake timeout).
TLS_HANDSHAKE_TIMEOUT = 10.0
#: TLS handshakes one host beyond loopback may start a second, after a burst of TLS_HANDSHAKE_BURST: each
#: costs the loop about a millisecond of CPU, and one host starting them without end kept it busy. Past
#: the rate a handshake waits for its turn (its connection open, its first byte unread): a client's
#: reconnects are late, never refused.
TLS_HANDSHAKE_RATE = 50.0
TLS_HANDSHAKE_BURST = 100

log = logging.getLogger(__name__)


class _AtCap(asyncio.Protocol):
    """What a connection arriving at `remotingMaxConnections` gets: served by the protocol `on_made`
    answers once it knows the peer (room made for it), else closed as soon as it is accepted."""

    def __init__(self, on_made: Callable[[asyncio.BaseTransport], asyncio.Protocol | None]) -> None:
        self.on_made = on_made

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        protocol = self.on_made(transport)
        if protocol is None:
            transport.close()
            return
        transport.set_protocol(protocol)
        protocol.connection_made(transport)


class HandshakePacer:
    """Each host's TLS handshakes beyond loopback at `rate` a second after a burst of `burst` (GCRA: a
    host's theoretical arrival time, advanced by one interval per handshake; a host idle since is forgotten)."""

    def __init__(self, rate: float = TLS_HANDSHAKE_RATE, burst: int = TLS_HANDSHAKE_BURST) -> None:
        self.interval = 1.0 / rate
        self.slack = (burst - 1) * self.interval
        self.rate = rate
        self.burst = burst
        self._due: dict[str, float] = {}

    def delay(self, host: str, now: float) -> float:
        """Seconds the next handshake of `host` waits before it starts (0: at once); its turn is taken."""
        if is_loopback(host):
            return 0.0
        host = budget_host(host)  # (an IPv6 peer's /64: one host, 2^64 addresses)
        due = max(self._due.get(host, now), now)
        if len(self._due) > 4096:  # (hosts whose turns all passed hold nothing)
            self._due = {h: t for h, t in self._due.items() if t > now}
        self._due[host] = due + self.interval
        return max(0.0, due - now - self.slack)


class RemotingServer:
    """Listens on host:port (port 0 picks a free one) and serves the registered processors.

    Unknown request codes are answered with REQUEST_CODE_NOT_SUPPORTED; unparseable frames close only
    the connection they arrived on. Connections without traffic for `idle_timeout` seconds are
    closed, as Java does after `serverChannelMaxIdleTimeSeconds` (0 or less: never, as Netty's
    IdleStateHandler takes it). `limits` (the daemon's config, read
    live) caps the connections and the bytes of incomplete frames they hold; `budget` counts those.

    `tls` (mode permissive or enforcing) makes the server look at each connection's first byte before
    anything reads it, as 4.9.8's `NettyRemotingServer#HandshakeHandler` does: a TLS handshake record
    (0x16) gets a TLS transport, anything else the plain one (enforcing closes it instead). Either way
    the connection then runs on an ordinary transport: the look costs one peek per connection, nothing
    per frame. Without `tls` (or `disabled`) a handshake reads as a bad frame and closes, as in 4.9.8.

    `admit(ip)` (the DLedger channel's peer gate) decides on each accepted socket, before a byte of it is
    read or a TLS handshake spent on it: refused, it is closed at once (`admit` logs why).

    A host beyond loopback starts TLS handshakes at TLS_HANDSHAKE_RATE a second after a burst
    (`HandshakePacer`); past it each waits its turn. At the connection cap a socket whose first byte
    never came, or whose handshake is under way, belongs to its host like a connection, and is the
    first of that host's to be closed to serve another host's (it cost at most a handshake).
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
        tls: ServerTls | None = None,
        admit: Callable[[str], bool] | None = None,
        batch_replies: bool = True,
    ) -> None:
        self.dispatcher = RequestDispatcher(processors, default_processor)
        #: Whether replies wait for the end of the loop's round of reads (`ReplyBatch`): not for a server
        #: whose one peer waits on each reply (a DLedger follower's leader), where the round is only a delay.
        self.batch_replies = batch_replies
        self.host = host
        self.port = port
        self.max_frame_length = max_frame_length
        self.idle_timeout = idle_timeout
        self.limits = limits or RemotingLimits()
        self.budget = BufferBudget(self.limits)
        #: Connections closed on accept because `remotingMaxConnections` were open.
        self.refused_connections = 0
        #: Connections of the host holding the most closed at the cap to serve another host's.
        self.evicted_connections = 0
        self._refusals = WarningGate(log)
        self.connections: set[Connection] = set()
        self._close_listeners: list[Callable[[Connection], None]] = []
        self._server: asyncio.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._batch: ReplyBatch | None = None
        self.tls = tls if tls is not None and tls.mode != "disabled" else None
        self.admit = admit
        #: Sockets are accepted here (not by asyncio's server) when each is looked at before it is served.
        self._own_accept = self.tls is not None or admit is not None
        #: Connections `admit` refused.
        self.refused_peers = 0
        #: Accepted sockets whose first byte has not arrived yet (TLS sniffing), with their tasks.
        self._sniffing: dict[socket.socket, asyncio.Task[None]] = {}
        #: Sockets in their TLS handshake (or waiting their host's turn for it), with their tasks; their
        #: connections are in `connections` already, without a transport until the handshake is done.
        self._handshaking: dict[socket.socket, asyncio.Task[None]] = {}
        self.pacer = HandshakePacer()
        #: TLS handshakes that waited for their host's turn (`HandshakePacer`).
        self.tls_paced = 0
        self._paced_warnings = WarningGate(log)
        self._listener: socket.socket | None = None
        self._acceptor: asyncio.Task[None] | None = None
        #: Ports bound by `bind_also` (the broker's VIP port): plain listeners, or sockets a TLS accept
        #: loop serves, with those loops once serving.
        self._also_servers: list[asyncio.Server] = []
        self._also_sockets: dict[socket.socket, asyncio.Task[None] | None] = {}
        #: Connections closed because they spoke plaintext to an enforcing listener, or failed TLS.
        self.tls_refused = 0
        self._tls_warnings = WarningGate(log)

    def register(self, code: int, processor: Processor) -> None:
        self.dispatcher.register(code, processor)

    def on_connection_closed(self, listener: Callable[[Connection], None]) -> None:
        """Call `listener(conn)` whenever a client connection goes away (for any reason)."""
        self._close_listeners.append(listener)

    @property
    def open_connections(self) -> int:
        """Client connections open: those serving or in their TLS handshake, and (TLS listeners) those
        whose first byte is awaited."""
        return len(self.connections) + len(self._sniffing)

    def bound_addresses(self) -> set[tuple[str, int]]:
        """``(host, port)`` of every socket this server listens on (its port and `bind_also`'s)."""
        socks = [*self._also_sockets, *(s for srv in self._also_servers for s in srv.sockets)]
        if self._listener is not None:
            socks.append(self._listener)
        if self._server is not None:
            socks.extend(self._server.sockets)
        return {tuple(s.getsockname()[:2]) for s in socks}  # type: ignore[misc]

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def start(self, *, serve: bool = True) -> None:
        """Bind and start accepting; `self.port` holds the bound port afterwards. With `serve=False`
        the socket is bound but not listening (connections are refused) until `serve()`."""
        loop = asyncio.get_running_loop()
        if not self._own_accept:
            self._server = await loop.create_server(
                self.accept, self.host, self.port, reuse_address=True, start_serving=serve
            )
            sock = self._server.sockets[0]
        else:
            sock = self._listener = bind_listener(self.host, self.port)
        self.port = sock.getsockname()[1]
        if self.idle_timeout > 0:  # 0 (or less) is Netty's IdleStateHandler disabled: no idle close
            self._sweeper = supervise(self._sweep_idle, "remoting-idle-sweeper")
        if self._own_accept and serve:
            await self.serve()
        tls = f", TLS {self.tls.mode}" if self.tls is not None else ""
        log.info("remoting server listening on %s:%d%s", self.host, self.port, tls)

    async def bind_also(self, host: str, port: int) -> None:
        """Bind another port serving exactly what this one serves (the broker's VIP port): the same
        connections, processors, guard, limits and TLS mode. It accepts from `serve()` on and closes at
        `stop()`; call it between `start(serve=False)` and `serve()`."""
        if not self._own_accept:
            server = await asyncio.get_running_loop().create_server(
                self.accept, host, port, reuse_address=True, start_serving=False
            )
            self._also_servers.append(server)
        else:
            self._also_sockets[bind_listener(host, port)] = None

    async def serve(self) -> None:
        """Start accepting on the sockets `start(serve=False)` and `bind_also` bound."""
        for server in self._also_servers:
            await server.start_serving()
        for sock, task in self._also_sockets.items():
            if task is None:
                sock.listen(1024)
                self._also_sockets[sock] = supervise(
                    functools.partial(self._accept_loop, sock), "remoting-accept"
                )
        if self._listener is not None:
            if self._acceptor is None:
                self._listener.listen(1024)
                self._acceptor = supervise(
                    functools.partial(self._accept_loop, self._listener), "remoting-accept"
                )
            return
        assert self._server is not None, "start() first"
        await self._server.start_serving()

    async def _accept_loop(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, _ = await loop.sock_accept(listener)
            except OSError as exc:  # EMFILE and friends: the listener stays, as asyncio's own does
                log.warning("accept on port %d failed: %s", self.port, exc)
                await asyncio.sleep(0.1)
                continue
            if self.admit is not None and not self._admitted(sock):
                continue  # (first: a stranger at the cap must not close anyone's connection)
            if self.open_connections >= self.limits.connection_cap() and not self._make_room(_sock_ip(sock)):
                self._refuse_socket(sock)
                continue
            sock.setblocking(False)
            task = asyncio.create_task(self._sniff(sock), name="remoting-tls-sniff")
            self._sniffing[sock] = task

    def _refuse_socket(self, sock: socket.socket) -> None:
        self.refused_connections += 1
        with contextlib.suppress(OSError):
            peer = sock.getpeername()
            self._refusals.warning(
                "closing connection from %s:%d: %d connections open, remotingMaxConnections allows %d",
                peer[0],
                peer[1],
                self.open_connections,
                self.limits.connection_cap(),
            )
        sock.close()

    def _admitted(self, sock: socket.socket) -> bool:
        try:
            host = ip_port(sock.getpeername())[0]
        except OSError:
            host = ""  # reset before we looked: nobody to serve
        if host and self.admit is not None and self.admit(host):
            return True
        self.refused_peers += 1
        sock.close()
        return False

    async def _sniff(self, sock: socket.socket) -> None:
        """Wait for the first byte without reading it, then hand the socket to a plain or a TLS transport
        (without `tls`: straight to the plain one)."""
        loop = asyncio.get_running_loop()
        try:
            if self.tls is None:
                del self._sniffing[sock]
                await loop.connect_accepted_socket(self.accept, sock)
                return
            async with asyncio.timeout(self.idle_timeout if self.idle_timeout > 0 else None):
                first = await _peek(loop, sock)
            if not first:
                sock.close()  # closed before it said anything
                return
            ssl_context = None
            if first[0] == HANDSHAKE_MAGIC:
                ssl_context = self.tls.context()
            elif self.tls.mode == "enforcing":
                self._tls_refusal(sock, f"plaintext request to a TLS-only listener ({self.tls.why_tls_only})")
                return
            if ssl_context is None:
                del self._sniffing[sock]
                await loop.connect_accepted_socket(self.accept, sock)
                return
            self._handshaking[sock] = self._sniffing.pop(sock)
            host = _sock_ip(sock)
            wait = self.pacer.delay(host, loop.time())
            if wait > 0:
                self.tls_paced += 1
                self._paced_warnings.warning(
                    "TLS handshakes from %s start at %g a second after a burst of %d: the next waits %.2f s",
                    host,
                    self.pacer.rate,
                    self.pacer.burst,
                    wait,
                )
                await asyncio.sleep(wait)
            made: list[asyncio.Protocol] = []

            def protocol() -> asyncio.BaseProtocol:
                made.append(self.accept())
                return TlsReadBuffer(made[-1])

            try:
                await loop.connect_accepted_socket(
                    protocol, sock, ssl=ssl_context, ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT
                )
            except BaseException:
                for conn in made:  # a failed handshake never reaches connection_made/lost
                    self.connections.discard(conn)  # type: ignore[arg-type]
                raise
        except TimeoutError:
            sock.close()  # silent until its first byte: an idle connection, closed as the sweeper would
        except OSError as exc:  # ssl.SSLError and ConnectionError included
            self._tls_refusal(sock, f"TLS handshake failed: {exc}")
        except asyncio.CancelledError:
            sock.close()
            raise
        finally:
            self._sniffing.pop(sock, None)
            self._handshaking.pop(sock, None)

    def _tls_refusal(self, sock: socket.socket, why: str) -> None:
        if why:
            self.tls_refused += 1
            with contextlib.suppress(OSError):
                host, port = sock.getpeername()[:2]
                self._tls_warnings.warning("closing connection from %s:%d: %s", host, port, why)
        sock.close()

    def accept(self) -> asyncio.Protocol:
        """The protocol for one new client connection (the listener's factory; `memory` uses it too)."""
        if len(self.connections) >= self.limits.connection_cap():
            return _AtCap(self._at_cap)
        return self._connection()

    def _at_cap(self, transport: asyncio.BaseTransport) -> asyncio.Protocol | None:
        if self._make_room(peer_address(transport)[0]):
            return self._connection()
        self._refuse(transport)
        return None

    def _make_room(self, ip: str) -> bool:
        """At the connection cap, a new connection from ``ip``: close one of the host holding the most
        connections when it holds more than ``ip`` would with this one, so that one host's flood of
        silent or half-sent connections cannot shut every other host out (it keeps a fair share). The
        one closed is one whose first byte never came, else the longest silent. False: refuse this one.
        A walk of the open connections, only while the cap is reached."""
        hosts: dict[str, list[Connection | socket.socket]] = {}
        for sock in (*self._sniffing, *self._handshaking):  # (silent first, then in their handshake)
            hosts.setdefault(budget_host(_sock_ip(sock)), []).append(sock)
        for conn in self.connections:
            if not conn.is_closed:
                hosts.setdefault(budget_host(conn.address[0]), []).append(conn)
        ip = budget_host(ip)  # (an IPv6 peer's /64 is one host: a host has its 2^64 addresses)
        if not hosts:
            return False
        heavy = max(hosts, key=lambda host: len(hosts[host]))
        held = hosts[heavy]
        if len(held) <= len(hosts.get(ip, ())) + 1:
            return False
        silent = [s for s in held if isinstance(s, socket.socket)]
        if silent:
            sock = silent[0]
            task = self._sniffing.pop(sock, None) or self._handshaking.pop(sock)
            task.cancel()  # (and the socket closed once it ends: a task cancelled unstarted closes nothing)
            task.add_done_callback(lambda _: sock.close())
        else:
            oldest = min((c for c in held if isinstance(c, Connection)), key=lambda c: c.last_active)
            oldest.close()
        self.evicted_connections += 1
        self._refusals.warning(
            "closing a connection of %s (%d open of remotingMaxConnections %d) to serve one from %s: "
            "no host keeps more than a fair share while others wait",
            heavy or "?",
            len(held),
            self.limits.connection_cap(),
            ip or "?",
        )
        return True

    def _connection(self) -> Connection:
        loop = asyncio.get_running_loop()
        if self.batch_replies and (self._batch is None or self._batch.loop is not loop):
            self._batch = ReplyBatch(loop)  # (also when a server restarted on another loop)
        conn = Connection(
            self.dispatcher,
            max_frame_length=self.max_frame_length,
            max_header_length=MAX_REQUEST_HEADER,
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
        for server in self._also_servers:
            server.close()
        if self._listener is not None or self._also_sockets:
            await self._stop_listener()
        conns = list(self.connections)
        if conns:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(grace):
                    await asyncio.gather(*(c.drain_tasks() for c in conns))
        for conn in conns:
            conn.close()
        if conns:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(grace):
                    await asyncio.gather(*(c.wait_closed() for c in conns))
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
        for server in self._also_servers:
            await server.wait_closed()
        self._also_servers.clear()
        log.info("remoting server on port %d stopped", self.port)

    async def _stop_listener(self) -> None:
        acceptors = [t for t in (self._acceptor, *self._also_sockets.values()) if t is not None]
        for task in acceptors:
            task.cancel()
        await asyncio.gather(*acceptors, return_exceptions=True)
        self._acceptor = None
        sniffing = [*self._sniffing.values(), *self._handshaking.values()]
        for task in sniffing:
            task.cancel()
        await asyncio.gather(*sniffing, return_exceptions=True)
        for sock in [self._listener, *self._also_sockets]:
            if sock is not None:
                sock.close()
        self._listener = None
        self._also_sockets.clear()

    async def __aenter__(self) -> RemotingServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


def bind_listener(host: str, port: int) -> socket.socket:
    """A bound (not yet listening) TCP socket, as `loop.create_server` makes one."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, addr = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(addr)
    except OSError as exc:
        sock.close()  # worded as loop.create_server words it (callers read the port from it)
        raise OSError(
            exc.errno, f"error while attempting to bind on address {addr!r}: {exc.strerror}"
        ) from None
    sock.setblocking(False)
    return sock


async def _peek(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> bytes:
    """The first byte the peer sent, left in the socket for whoever reads it next (b"": it closed)."""
    while True:
        try:
            return sock.recv(1, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            pass
        ready = loop.create_future()
        loop.add_reader(sock.fileno(), ready.set_result, None)
        try:
            await ready
        finally:
            loop.remove_reader(sock.fileno())


def _sock_ip(sock: socket.socket) -> str:
    """An accepted socket's peer IP ("" once it was reset)."""
    try:
        return ip_port(sock.getpeername())[0]
    except OSError:
        return ""
