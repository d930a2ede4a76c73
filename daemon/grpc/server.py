"""The grpc.aio server of the front, on the broker's event loop, plaintext or TLS (enforcing mode)."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

import grpc
from rocketmq.grpc_protocol import service_pb2_grpc

from daemon.grpc.arrival import Arrivals
from daemon.grpc.guard import ConnectionGuard
from daemon.grpc.service import CLIENT_EXPIRY_S, MessagingService
from daemon.lifecycle import cancel_tasks, every, supervise
from daemon.protect import binds_beyond_loopback
from daemon.remoting.tls import TlsSettings, cert_pem, default_sans, key_pem, make_certificate, new_key

if TYPE_CHECKING:
    from daemon.broker.context import BrokerContext

log = logging.getLogger(__name__)

#: How often a PushConsumer's received messages are looked at for renewal (daemon.grpc.leases).
RENEW_PERIOD_S = 1.0
#: What an answer may carry (the Proxy's `grpcMaxInboundMessageSize`).
MAX_MESSAGE_BYTES = 130 * 1024 * 1024
#: What a request may carry beyond `maxMessageSize`: the message's properties and the request's other
#: fields. gRPC reads a request whole before any handler (the ACL check included) sees it, so a larger
#: one, which no message the broker takes needs, is refused by its length, unread.
REQUEST_HEADROOM = 1024 * 1024


#: Streams one connection may have open at once (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS; grpc sets no
#: limit): each long-polled receive holds tasks and buffers on the broker, so one client opening
#: streams without end would grow its memory without bound. A client's further streams wait.
MAX_STREAMS_PER_CONNECTION = 1_000
#: Seconds a connection has to send HTTP/2's preface and SETTINGS (and finish TLS) after its accept, as a
#: remoting listener's TLS handshake has (grpc's default is 120 s: a host's silent connections held the
#: front's places that long each).
HANDSHAKE_TIMEOUT_S = 10


def server_credentials(settings: TlsSettings) -> grpc.ServerCredentials:
    """The remoting listener's key material as a gRPC credential (a fresh self-signed pair in test
    mode, as the remoting listener makes one)."""
    if settings.server_cert:
        from cryptography.hazmat.primitives import serialization

        with open(settings.server_key, "rb") as f:
            raw_key = f.read()
        with open(settings.server_cert, "rb") as f:
            chain = f.read()
        password = settings.server_key_password.encode() or None
        key = serialization.load_pem_private_key(raw_key, password)
        pair = (key_pem(key), chain + issuers(chain, settings.server_trust))
    else:
        key = new_key()
        cert = make_certificate(key, "mqctl test mode", issuer=None, sans=default_sans(), ca=False)
        pair = (key_pem(key), cert_pem(cert))
    trust = None
    if settings.server_trust:
        with open(settings.server_trust, "rb") as f:
            trust = f.read()
    return grpc.ssl_server_credentials(
        [pair],
        root_certificates=trust,
        require_client_auth=bool(trust) and settings.need_client_auth == "require",
    )


def issuers(chain: bytes, trust_file: str) -> bytes:
    """The certificates of ``trust_file`` that ``chain`` (PEM) lacks up to its root, in order, as PEM.

    The remoting listener's OpenSSL completes a one-certificate file from its trust store when it sends
    it (`check cert --connect` saw the CA there); grpc sends the file as it is, so a client that trusts
    the root alone could not verify a certificate an intermediate CA issued."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    if not trust_file:
        return b""
    try:
        with open(trust_file, "rb") as f:
            known = x509.load_pem_x509_certificates(f.read())
        have = x509.load_pem_x509_certificates(chain)
    except (OSError, ValueError):
        return b""
    out: list[bytes] = []
    last = have[-1]
    while last.issuer != last.subject and len(out) < len(known):
        parent = next((c for c in known if c.subject == last.issuer and c not in have), None)
        if parent is None:
            break
        have.append(parent)
        out.append(parent.public_bytes(serialization.Encoding.PEM))
        last = parent
    return b"".join(out)


def bind_address(host: str, port: int) -> str:
    if host in ("", "0.0.0.0", "::"):
        return f"[::]:{port}"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class GrpcFront:
    """Start after the remoting port serves, stop before it closes."""

    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker
        self.port = 0
        self.tls = False
        self.service: MessagingService | None = None
        self._server: grpc.aio.Server | None = None
        self._tasks: list[asyncio.Task[None]] = []
        #: Per-host fairness of the front's connections (a front beyond loopback on Linux), else None.
        self.guard: ConnectionGuard | None = None
        #: The limits on calls whose request has not arrived whole yet.
        self.arrivals = Arrivals()

    async def start(self) -> int:
        config = self.broker.config
        largest = self.broker.store.config.max_message_size + REQUEST_HEADROOM
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", largest),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                ("grpc.so_reuseport", 0),
                ("grpc.max_concurrent_streams", MAX_STREAMS_PER_CONNECTION),
                # grpc's server otherwise counts a stream against that limit until it has freed it,
                # after it ended on the wire: a client that waits for an end before it opens one more
                # stream, as HTTP/2 asks, is refused it (REFUSED_STREAM), and the official 5.x Python
                # client, which turns gRPC's retries off, fails the call. Off, the limit counts the
                # streams open on the wire, as HTTP/2 does.
                ("grpc.http.overload_protection", 0),
                ("grpc.max_allowed_incoming_connections", config.grpc_max_connections),
                ("grpc.server_handshake_timeout_ms", HANDSHAKE_TIMEOUT_S * 1000),
                *_idle_option(config.server_channel_max_idle_time_seconds),
            ]
        )
        address = bind_address(config.listen_host, config.grpc_listen_port)
        settings = self.broker.tls_settings
        self.tls = settings.mode == "enforcing"  # permissive: the 5.x clients speak plaintext by default
        if self.tls:
            port = server.add_secure_port(address, server_credentials(settings))
        else:
            port = server.add_insecure_port(address)
        if not port:
            raise OSError(f"cannot bind gRPC port {address}")
        self.port = port
        self.service = MessagingService(self.broker, port)
        server.add_generic_rpc_handlers((self.arrivals.handler(_generic_handler(self.service)),))
        await server.start()
        self._server = server
        service = self.service
        self._tasks += [
            supervise(lambda: every(CLIENT_EXPIRY_S / 4, service.expire), "grpc-clients"),
            supervise(lambda: every(RENEW_PERIOD_S, service.leases.renew_due), "grpc-renew"),
        ]
        if binds_beyond_loopback(config.listen_host):
            guard = ConnectionGuard(port, config.grpc_max_connections)
            if await asyncio.to_thread(guard.start):
                self.guard = guard
                self._tasks.append(supervise(lambda: _guarding(guard), "grpc-guard"))
        return port

    async def stop(self) -> None:
        await cancel_tasks(self._tasks)
        self._tasks = []
        if self._server is not None:
            await self._server.stop(grace=1.0)
            self._server = None
        if self.guard is not None:
            self.guard.stop()
            self.guard = None


class _Handlers:
    """Takes what the generated code adds to a server: the service's generic handler."""

    def __init__(self) -> None:
        self.handlers: tuple[grpc.GenericRpcHandler, ...] = ()

    def add_generic_rpc_handlers(self, handlers: tuple[grpc.GenericRpcHandler, ...]) -> None:
        self.handlers += tuple(handlers)


def _generic_handler(service: MessagingService) -> grpc.GenericRpcHandler:
    """The generated code's handler of `service` (its method table, deserializers and serializers)."""
    taken = _Handlers()
    service_pb2_grpc.add_MessagingServiceServicer_to_server(service, taken)
    (handler,) = taken.handlers
    return handler


def _idle_option(idle_seconds: int) -> list[tuple[str, int]]:
    """A connection without a call for ``serverChannelMaxIdleTimeSeconds`` is sent GOAWAY and closed, as
    the remoting port closes an idle one (0 or less: never). A 5.x client holds its Telemetry stream
    open, so its connection is never idle; one that is reconnects at its next call."""
    return [("grpc.max_connection_idle_ms", idle_seconds * 1000)] if idle_seconds > 0 else []


async def _guarding(guard: ConnectionGuard) -> None:
    while True:
        await asyncio.sleep(guard.period)
        await asyncio.to_thread(guard.scan)
