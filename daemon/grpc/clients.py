"""The 5.x clients a broker's gRPC front knows: their Settings, their Telemetry stream, and the
connection-like channel under which they join the broker's producer and consumer registries.

A 5.x client has no remoting connection; `GrpcChannel` stands in for one, so the broker's connection
listings (`group connections`, producer connections) show it with its language and version, and the
transaction check loop reaches a 5.x producer: a CHECK_TRANSACTION_STATE it "sends" goes down the
client's Telemetry stream as a `RecoverOrphanedTransactionCommand` (the Java Proxy's
`ClientActivity` / `GrpcClientChannel` do the same).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from rocketmq.grpc_protocol import definition_pb2 as pb, service_pb2 as spb

from daemon.broker.headers import CheckTransactionStateRequestHeader
from daemon.remoting.codes import RequestCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.errors import RemotingConnectError
from daemon.remoting.limits import WarningGate
from store.record import decode_record

log = logging.getLogger(__name__)

#: Client types as the broker's consumer registry names them (the Java Proxy's mapping).
CONSUME_TYPES = {
    pb.SIMPLE_CONSUMER: "CONSUME_ACTIVELY",
    pb.PUSH_CONSUMER: "CONSUME_PASSIVELY",
}


def parse_peer(peer: str) -> tuple[str, int]:
    """grpc's `context.peer()` (`ipv4:127.0.0.1:5000`, `ipv6:[::1]:5000`) as (ip, port)."""
    _, _, rest = peer.partition(":")
    host, _, port = rest.rpartition(":")
    host = host.strip("[]")
    try:
        return host, int(port)
    except ValueError:
        return "", 0


def client_key(client_id: str, ip: str) -> str:
    """A client's registry key: its id as seen from one IP."""
    return f"{client_id} from {ip}"


class GrpcChannel:
    """A 5.x client as the registries see a connection: a peer, an address, a way to be told things."""

    def __init__(self, client: GrpcClient) -> None:
        self.client = client
        self.address = client.address
        self.peer = f"{client.address[0]}:{client.address[1]}"
        self.attributes: dict[str, object] = {}

    def local_ip(self) -> str:
        return self.client.local_ip

    def invoke_oneway(self, request: RemotingCommand) -> None:
        """Only the transaction check travels to a 5.x client (as a Telemetry command)."""
        if request.code != RequestCode.CHECK_TRANSACTION_STATE:
            return
        outbox = self.client.outbox
        if outbox is None:
            raise RemotingConnectError(self.client.client_id, "no Telemetry stream open")
        header = CheckTransactionStateRequestHeader.from_ext_fields(request.ext_fields)
        half = decode_record(request.body)
        from daemon.grpc.convert import to_proto

        command = spb.RecoverOrphanedTransactionCommand(
            message=to_proto(half), transaction_id=header.offset_msg_id or half.msg_id
        )
        try:
            outbox.put_nowait(spb.TelemetryCommand(recover_orphaned_transaction_command=command))
        except asyncio.QueueFull:  # it reads nothing we send: asked again at the next check
            raise RemotingConnectError(self.client.client_id, "Telemetry stream backed up") from None

    def close(self) -> None:
        """The registries close a member that stopped heart-beating: its stream ends."""
        if self.client.outbox is not None:
            with contextlib.suppress(asyncio.QueueFull):  # (then its client has stopped reading it)
                self.client.outbox.put_nowait(None)


@dataclass(eq=False)
class GrpcClient:
    client_id: str
    address: tuple[str, int]
    local_ip: str = ""
    language: str = "OTHER"
    version: str = ""
    client_type: int = pb.CLIENT_TYPE_UNSPECIFIED
    settings: pb.Settings | None = None
    #: Commands for the client's Telemetry stream (None ends it); None: no stream open.
    outbox: asyncio.Queue[spb.TelemetryCommand | None] | None = None
    last_seen: float = field(default_factory=time.monotonic)
    channel: GrpcChannel = field(init=False)

    def __post_init__(self) -> None:
        self.channel = GrpcChannel(self)

    @property
    def key(self) -> str:
        return client_key(self.client_id, self.address[0])


#: The most clients a registry remembers: every call with an unseen `x-mq-client-id` adds one (about
#: a KiB) until it has been silent for the expiry, so a caller inventing ids would otherwise grow it
#: without bound. Beyond it a new client is served but not remembered.
MAX_CLIENTS: Final = 50_000
#: A longer `x-mq-client-id` is not taken as one (the official ids are well under 100 characters).
MAX_CLIENT_ID: Final = 256


class ClientRegistry:
    """Every 5.x client by its `x-mq-client-id` and IP."""

    def __init__(self, on_forget: Callable[[GrpcClient], None], limit: int = MAX_CLIENTS) -> None:
        self.clients: dict[str, GrpcClient] = {}
        self._on_forget = on_forget
        self.limit = limit
        self._warnings = WarningGate(log)

    def get(self, client_id: str, address: tuple[str, int], local_ip: str = "") -> GrpcClient:
        """The client `client_id` calling from `address`. The id is the caller's word: the same id from
        another IP is another client, so no peer borrows the address (whitelists, protected mode),
        Telemetry stream or registrations of a client it names."""
        if not client_id or len(client_id) > MAX_CLIENT_ID:
            client_id = f"{address[0]}:{address[1]}"
        key = client_key(client_id, address[0])
        client = self.clients.get(key)
        if client is None:
            client = GrpcClient(client_id, address, local_ip)
            if len(self.clients) >= self.limit:
                self._warnings.warning(
                    "%d 5.x clients known: %s from %s is served but not remembered",
                    self.limit,
                    client_id,
                    address[0],
                )
                return client
            self.clients[key] = client
        client.last_seen = time.monotonic()
        return client

    def known(self, client_id: str, address: tuple[str, int]) -> GrpcClient | None:
        """The client `client_id` calling from `address` if this registry holds it, else None: unlike
        :meth:`get`, asking adds nothing."""
        if not client_id or len(client_id) > MAX_CLIENT_ID:
            client_id = f"{address[0]}:{address[1]}"
        return self.clients.get(client_key(client_id, address[0]))

    def readmit(self, client: GrpcClient) -> None:
        """Hold `client` again after it was forgotten (a termination, a silence) while its Telemetry stream
        stayed open: Settings arriving on that stream register it, so its heartbeats must find it (they
        found none, or a settings-less stand-in, and were answered UNRECOGNIZED_CLIENT_TYPE)."""
        if self.clients.get(client.key) is not client and len(self.clients) < self.limit:
            self.clients[client.key] = client

    def forget(self, client: GrpcClient) -> None:
        if self.clients.pop(client.key, None) is not None:
            self._on_forget(client)

    def expire(self, idle_seconds: float) -> None:
        deadline = time.monotonic() - idle_seconds
        for client in [c for c in self.clients.values() if c.last_seen < deadline]:
            log.info("5.x client %s went silent: forgotten", client.client_id)
            self.forget(client)

    def counts(self) -> dict[str, int]:
        """Clients by type name (for the start-up and status lines)."""
        out: dict[str, int] = {}
        for client in self.clients.values():
            name = pb.ClientType.Name(client.client_type)  # type: ignore[arg-type]
            out[name] = out.get(name, 0) + 1
        return out
