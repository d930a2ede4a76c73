"""Asyncio remoting client: one reusable connection per address, requests matched by opaque.

Used by mqctl's admin commands, by brokers registering with NameServers, and by tests. Requests to
the same address share one connection and may be pipelined freely, as RocketMQ clients do.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import ssl as _ssl
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from daemon.remoting.codes import ResponseCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.connection import Connection, Processor, RequestDispatcher
from daemon.remoting.errors import (
    RemotingCommandError,
    RemotingConnectError,
    RemotingProtocolError,
    RemotingTlsError,
)
from daemon.remoting.frame import MAX_FRAME_LENGTH
from daemon.remoting.tls import TlsReadBuffer

log = logging.getLogger(__name__)


def parse_addr(addr: str) -> tuple[str, int]:
    """Split `host:port` (or `[v6]:port`) into its parts; raises ValueError when malformed."""
    host, sep, port = addr.strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"address must be host:port, got {addr!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def peer_host(host: str) -> str:
    """The address a peer connected from, as registered: an IPv4-mapped IPv6 peer as plain IPv4."""
    return host[7:] if host.startswith("::ffff:") and "." in host else host


def met_itself(sockname: object, peername: object) -> bool:
    """Whether a connection reached itself: TCP's simultaneous open, when the kernel picks as the source
    the very port connected to (a free port in the ephemeral range). Nobody listens there, and the socket
    holds the port a daemon restarting on it is about to bind."""
    return sockname is not None and sockname == peername


def connected_to_itself(transport: asyncio.BaseTransport) -> bool:
    """:func:`met_itself` for a transport just connected; ConnectionResetError when it has no names to ask.

    A peer that accepts and resets at once (a master's HA gate, a refusing proxy) can be read before the
    loop reports the connection made: uvloop saves the names then, finds no peer, and once the transport
    has closed it has nothing to ask, so ``get_extra_info("peername")`` raises AttributeError (no socket
    left) or ValueError (a socket object left on a closed descriptor, -1). A transport closing with its
    names saved (a peer that answered and hung up, a refused TLS handshake) is left to the read that
    reports why."""
    try:
        sockname = transport.get_extra_info("sockname")
        peername = transport.get_extra_info("peername")
    except (AttributeError, ValueError):
        raise ConnectionResetError(errno.ECONNRESET, "Connection reset by peer as it opened") from None
    return met_itself(sockname, peername)


#: OpenSSL's reasons for a handshake answered by bytes that are no TLS record (an HTTP reply, an SSH banner).
NOT_TLS = frozenset(
    {"WRONG_VERSION_NUMBER", "UNKNOWN_PROTOCOL", "PACKET_LENGTH_TOO_LONG", "RECORD_LAYER_FAILURE"}
)


def tls_reason(exc: _ssl.SSLError) -> str:
    """One line on why a handshake failed (a certificate's verification message when there is one)."""
    if isinstance(exc, _ssl.SSLCertVerificationError) and exc.verify_message:
        return f"server certificate not trusted: {exc.verify_message}"
    return exc.reason or str(exc)


class Transport(Protocol):
    """What a caller of remote daemons uses: `RemotingClient` over TCP, `memory.MemoryClient` in process.

    `dispatcher` answers the requests daemons send back over the connection (broker callbacks);
    `signer` completes every request before it is sent (ACL credentials).
    """

    dispatcher: RequestDispatcher
    signer: Callable[[RemotingCommand], None] | None

    async def invoke(self, addr: str, request: RemotingCommand, timeout: float = 3.0) -> RemotingCommand: ...

    async def invoke_checked(
        self,
        addr: str,
        request: RemotingCommand,
        timeout: float = 3.0,
        expect: Iterable[int] = (ResponseCode.SUCCESS,),
    ) -> RemotingCommand: ...

    async def invoke_oneway(self, addr: str, request: RemotingCommand) -> None: ...

    def open_connection(self, addr: str) -> Connection | None: ...

    async def close(self) -> None: ...


class RemotingClient:
    """Pool of connections keyed by `host:port`.

    `processors` answer requests the server sends back over the same connection (broker callbacks);
    without them such requests get REQUEST_CODE_NOT_SUPPORTED. `signer` completes every request
    just before it is sent (ACL credentials: `daemon.acl.signature.Signer`). `ssl` puts every connection
    on TLS (the server's name is checked when the context says so). `local_host` binds every connection's
    own end to that address (a DLedger member connects from its address in `dLegerPeers`, which its peers'
    gate checks).
    """

    def __init__(
        self,
        processors: Mapping[int, Processor] | None = None,
        *,
        connect_timeout: float = 3.0,
        max_frame_length: int = MAX_FRAME_LENGTH,
        signer: Callable[[RemotingCommand], None] | None = None,
        ssl: _ssl.SSLContext | None = None,
        local_host: str | None = None,
    ) -> None:
        self.dispatcher = RequestDispatcher(processors)
        self.ssl = ssl
        self.local_host = local_host
        self.signer = signer
        self.connect_timeout = connect_timeout
        self.max_frame_length = max_frame_length
        self._connections: dict[str, Connection] = {}
        self._connecting: dict[str, asyncio.Lock] = {}

    async def connection(self, addr: str) -> Connection:
        """The open connection to `addr`, connecting (once, even under concurrency) if needed."""
        conn = self._connections.get(addr)
        if conn is not None and not conn.is_closed:
            return conn
        lock = self._connecting.setdefault(addr, asyncio.Lock())
        async with lock:
            conn = self._connections.get(addr)
            if conn is not None and not conn.is_closed:
                return conn
            conn = await self._connect(addr)
            self._connections[addr] = conn
            return conn

    def open_connection(self, addr: str) -> Connection | None:
        """The open connection to `addr`, or None (then `connection` connects): for callers that write
        without awaiting while it is up."""
        conn = self._connections.get(addr)
        return conn if conn is not None and not conn.is_closed else None

    async def _connect(self, addr: str) -> Connection:
        try:
            host, port = parse_addr(addr)
        except ValueError as exc:
            raise RemotingConnectError(addr, str(exc)) from None
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout):
                transport, protocol = await loop.create_connection(
                    self._new_connection if self.ssl is None else self._new_tls_connection,
                    host,
                    port,
                    ssl=self.ssl,
                    server_hostname=host if self.ssl is not None else None,
                    local_addr=(self.local_host, 0) if self.local_host else None,
                )
        except TimeoutError:
            raise RemotingConnectError(addr, f"connect timed out after {self.connect_timeout:g}s") from None
        except _ssl.SSLError as exc:
            if exc.reason in NOT_TLS:  # no certificate problem: the peer answered in plain text
                raise RemotingProtocolError(
                    f"{addr} does not speak TLS: it answered with plain bytes ({exc.reason}); a port without TLS?"
                ) from None
            raise RemotingTlsError(addr, f"TLS handshake failed: {tls_reason(exc)}") from None
        except ConnectionResetError as exc:
            if self.ssl is not None:  # a TLS server that refused our certificate (or its absence) resets
                raise RemotingTlsError(addr, f"TLS handshake failed: {exc.strerror or exc}") from None
            raise RemotingConnectError(addr, exc.strerror or str(exc)) from None
        except socket.gaierror as exc:  # the name, not the server: "is it running?" would mislead
            raise RemotingConnectError(
                addr, f"host {host!r} does not resolve ({exc.strerror or exc})"
            ) from None
        except OSError as exc:
            raise RemotingConnectError(addr, exc.strerror or str(exc)) from None
        try:
            looped = connected_to_itself(transport)
        except ConnectionResetError as exc:
            raise RemotingConnectError(addr, exc.strerror or str(exc)) from None
        if looped:
            transport.close()
            raise RemotingConnectError(addr, "Connection refused (the connection met itself)")
        conn = protocol.protocol if isinstance(protocol, TlsReadBuffer) else protocol
        assert isinstance(conn, Connection)
        conn.peer = addr
        log.debug("connected to %s", addr)
        return conn

    def _new_connection(self) -> Connection:
        """The client end of a new connection (the protocol a transport is then attached to)."""
        return Connection(
            self.dispatcher, max_frame_length=self.max_frame_length, on_close=self._forget, requester=True
        )

    def _new_tls_connection(self) -> asyncio.BaseProtocol:
        return TlsReadBuffer(self._new_connection())

    def _forget(self, conn: Connection) -> None:
        if self._connections.get(conn.peer) is conn:
            del self._connections[conn.peer]

    async def invoke(self, addr: str, request: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        """Send `request` to `addr` and return the response (whatever its code)."""
        conn = self.open_connection(addr)  # (the open one without a coroutine of its own: most calls)
        if conn is None:
            conn = await self.connection(addr)
        if self.signer is not None:
            self.signer(request)
        return await conn.invoke(request, timeout)

    async def invoke_checked(
        self,
        addr: str,
        request: RemotingCommand,
        timeout: float = 3.0,
        expect: Iterable[int] = (ResponseCode.SUCCESS,),
    ) -> RemotingCommand:
        """Like `invoke`, but raise RemotingCommandError unless the response code is in `expect`."""
        response = await self.invoke(addr, request, timeout)
        if response.code not in (expect if isinstance(expect, tuple) else tuple(expect)):
            raise RemotingCommandError(response.code, response.remark)
        return response

    async def invoke_oneway(self, addr: str, request: RemotingCommand) -> None:
        """Send `request` marked one-way; no response is expected."""
        conn = await self.connection(addr)
        if self.signer is not None:
            self.signer(request)
        conn.invoke_oneway(request)

    async def close(self) -> None:
        conns = list(self._connections.values())
        self._connections.clear()
        for conn in conns:
            conn.close()
        for conn in conns:
            await conn.wait_closed()

    async def __aenter__(self) -> RemotingClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
