"""`apache.rocketmq.v2.MessagingService` inside the broker: the official 5.x clients' RPCs.

Like the Java 5.x Proxy in local mode (`LocalMessageService`), each RPC becomes the broker's own work
in-process: a send is a SEND_MESSAGE_V2 handed to the send processor, an EndTransaction is the
transaction service's END_TRANSACTION, receive/ack/change-invisible are the broker's POP service.
Every RPC is checked as the remoting request it stands for: ACL 1.0 permissions (the Authorization
header verified with the account's secret key) or, with ACL off, protected mode.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import time
import zlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Final, cast

import grpc
from google.protobuf import duration_pb2
from rocketmq.grpc_protocol import definition_pb2 as pb, service_pb2 as spb, service_pb2_grpc

from daemon.acl.plain import QUERY_ROUTE, PlainAccessValidator
from daemon.broker.bodies import ConsumerData, SubscriptionData
from daemon.broker.headers import EndTransactionRequestHeader, SendMessageRequestHeaderV2
from daemon.broker.managers.consumers import ClientChannel, client_overflow
from daemon.broker.managers.topics import topic_problem
from daemon.broker.pop import MAX_INVISIBLE_MS
from daemon.config import ALL_KEYS_FIELD, parse_properties
from daemon.grpc.clients import CONSUME_TYPES, ClientRegistry, GrpcClient, parse_peer
from daemon.grpc.convert import (
    PROPERTY_SHARDING_KEY,
    MessageRefused,
    accepted_types,
    endpoints,
    fifo_queue,
    grpc_code,
    millis,
    parse_message,
    permission,
    status,
    to_proto,
    type_conflict,
)
from daemon.grpc.leases import Leases
from daemon.protect import RECALL_MESSAGE, is_own_address
from daemon.remoting.bodies import PermName, TopicRouteData
from daemon.remoting.codes import RequestCode, ResponseCode, version_ordinal
from daemon.remoting.command import RemotingCommand
from daemon.remoting.connection import Connection
from daemon.remoting.errors import RemotingCommandError, RemotingError
from store.config import SLAVE
from store.errors import StoreError
from store.message import (
    PROPERTY_TIMER_DELIVER_MS,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
)
from store.names import (
    AUTO_CREATE_TOPIC,
    INTERNAL_TOPIC_PREFIX,
    MAX_GROUP_LENGTH,
    NAME_CHARS,
    SYSTEM_TOPIC_PREFIX,
    TRANS_HALF_TOPIC,
    legal_name,
)
from store.record import decode_msg_id, decode_record, encode_properties

if TYPE_CHECKING:
    from daemon.broker.context import BrokerContext

log = logging.getLogger(__name__)

#: The proxy's defaults (`ProxyConfig`): long polling at most 20 s, a receive batch of 32, 60 s
#: invisible for a PushConsumer's auto-renewed receive.
MAX_LONG_POLLING_MS: Final = 20_000
RECEIVE_BATCH: Final = 32
AUTO_RENEW_INVISIBLE_MS: Final = 60_000
#: ... renewed when less than this is left of it (the Proxy renews every 5 s; this renews once per lending).
RENEW_AHEAD_MS: Final = 20_000
#: A receive's invisibility below this is refused (ILLEGAL_INVISIBLE_TIME).
MIN_INVISIBLE_MS: Final = 1_000
#: (Above the POP service's MAX_INVISIBLE_MS, as any change of invisibility, is refused too.)

#: The producer retry policy the proxy hands out (`GrpcClientSettingsManager`): 10 ms doubling to 1 s.
PRODUCER_BACKOFF: Final = (10, 1_000, 2.0)
#: A consumer's redelivery backoff: the 4.x delay levels 3..18 (`1s 5s ... 2h`) the retry topic uses.
CONSUMER_BACKOFF_S: Final = (
    1,
    5,
    10,
    30,
    60,
    120,
    180,
    240,
    300,
    360,
    420,
    480,
    540,
    600,
    1200,
    1800,
    3600,
    7200,
)
#: Another broker's gRPC port, once learnt, is taken as it is for this long, then asked again: a broker
#: restarted with `grpcListenPort=0` (or reconfigured) serves on another port, and a DLedger member that
#: leads again after such a restart must not be routed to its old one.
PORT_TTL_S: Final = 30.0
#: A client that neither heart-beats nor calls for this long is forgotten (the remoting channel expiry).
CLIENT_EXPIRY_S: Final = 120.0
#: The Authorization header's algorithm (the proxy's `AuthenticationHeader`).
AUTH_ALGORITHM: Final = "MQv2-HMAC-SHA1"


#: Marks the metadata of a Telemetry stream whose signature was fresh when its first Settings came:
#: the client keeps one stream for a year and sends Settings down it every 5 minutes under the
#: signature it opened with. (No header a client sends starts with a colon.)
STREAM_SIGNED: Final = ":stream-signed"

#: Commands a Telemetry stream holds for a client that does not read them; then the stream stops
#: reading the client's (Settings answered) and refuses transaction checks for it.
TELEMETRY_OUTBOX: Final = 64

#: Telemetry streams one host beyond loopback (an IPv6 host: its /64) holds open at once. A 5.x client
#: process keeps one open to each broker; an idle one holds a task, an outbox and grpc's call, and a host's
#: connections carried a thousand streams each.
TELEMETRY_PER_HOST: Final = 4096

#: The born host of a send whose peer address grpc did not tell (a Unix socket).
LOCAL: Final = ("127.0.0.1", 0)


def parse_authorization(value: str) -> tuple[str, str]:
    """`MQv2-HMAC-SHA1 Credential=AK, SignedHeaders=x-mq-date-time, Signature=HEX` -> (AK, HEX); an
    absent or unparsable header is anonymous ("", "")."""
    algorithm, _, rest = value.strip().partition(" ")
    if algorithm != AUTH_ALGORITHM:
        return "", ""
    parts = {}
    for item in rest.split(","):
        key, _, val = item.strip().partition("=")
        parts[key] = val.strip()
    return parts.get("Credential", "").split("/", 1)[0], parts.get("Signature", "")


def signature_matches(secret_key: str, date_time: str, signature_hex: str) -> bool:
    """The header's signature: hex HMAC-SHA1 of `x-mq-date-time` under the secret key (the proxy compares
    its Base64 with ACL 1.0's, the same bytes)."""
    expected = hmac.new(secret_key.encode(), date_time.encode(), hashlib.sha1).hexdigest()
    return bool(signature_hex) and hmac.compare_digest(expected, signature_hex.lower())


def overall(statuses: list[pb.Status], what: str) -> pb.Status:
    """A batch's status (`SendMessageActivity`, `AckMessageActivity#setAckResponseStatus`): the code its
    entries share (the first entry's status), else MULTIPLE_RESULTS."""
    codes = {s.code for s in statuses}
    if not codes:
        return status()
    if len(codes) == 1:
        return statuses[0]
    failed = sum(1 for s in statuses if s.code != pb.OK)
    return status(pb.MULTIPLE_RESULTS, f"{failed} of {len(statuses)} {what} failed")


def _duration(ms: int) -> duration_pb2.Duration:
    d = duration_pb2.Duration()
    d.FromMilliseconds(ms)
    return d


class Refused(Exception):
    """An RPC answered with a non-OK status."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    @classmethod
    def of(cls, exc: RemotingCommandError) -> Refused:
        code = grpc_code(exc.code)
        remark = exc.remark or str(exc)
        if exc.code == ResponseCode.NO_PERMISSION and (
            "signature" in remark or "no account" in remark or "no credential" in remark
        ):
            code = pb.UNAUTHORIZED
        return cls(code, remark)

    def status(self) -> pb.Status:
        return status(self.code, self.message)


def invisible_problem(invisible_ms: int, least: int) -> Refused | None:
    """The refusal of an invisible duration outside [least, MAX_INVISIBLE_MS], else None."""
    if invisible_ms < least:
        return Refused(pb.ILLEGAL_INVISIBLE_TIME, f"invisible duration {invisible_ms} ms is under {least} ms")
    if invisible_ms > MAX_INVISIBLE_MS:
        return Refused(
            pb.ILLEGAL_INVISIBLE_TIME, f"invisible duration {invisible_ms} ms is over {MAX_INVISIBLE_MS} ms"
        )
    return None


def duration_ms(value: duration_pb2.Duration, code: int) -> int:
    """A request's Duration in ms; Refused with `code` for one out of protobuf's range."""
    try:
        return millis(value)
    except MessageRefused as exc:
        raise Refused(code, f"bad duration: {exc}") from None


class MessagingService(service_pb2_grpc.MessagingServiceServicer):
    def __init__(self, broker: BrokerContext, port: int) -> None:
        self.broker = broker
        self.port = port
        self.clients = ClientRegistry(self._forget)
        from daemon.broker.processors.send import SendProcessor

        self.sender = SendProcessor(broker)
        #: Other brokers' gRPC ports, learnt from their config (remoting address -> (port, when learnt);
        #: port 0: none), asked again after PORT_TTL_S.
        self._ports: dict[str, tuple[int, float]] = {}
        #: A PushConsumer's auto-renewed receives (daemon.grpc.leases).
        self.leases = Leases(broker.pop.renew, AUTO_RENEW_INVISIBLE_MS, RENEW_AHEAD_MS)
        #: The address of ours a client's connection counts as reaching (`daemon.protect.is_local`): grpc
        #: cannot tell which one a connection reached, so `brokerIP1` when it is this machine's, else none
        #: (loopback alone is this machine). Behind a NAT or a forwarding load balancer `brokerIP1` is the
        #: device's, and every client it forwards arrives from it.
        ip1 = broker.config.ip1
        self._own_ip = ip1 if is_own_address(ip1) else ""

    # ------------------------------------------------------------------ clients and checks

    def _client(self, context: grpc.aio.ServicerContext) -> tuple[GrpcClient, dict[str, str]]:
        meta = {m.key: m.value for m in context.invocation_metadata() or () if not m.key.startswith(":")}
        address = parse_peer(context.peer())
        client = self.clients.get(meta.get("x-mq-client-id", ""), address, self._own_ip)
        language = meta.get("x-mq-language")
        if language:
            client.language = language
            client.version = meta.get("x-mq-client-version", client.version)
        return client, meta

    def _check(
        self,
        client: GrpcClient,
        meta: dict[str, str],
        code: int,
        fields: dict[str, str],
        body: bytes = b"",
    ) -> None:
        """Run the broker's guard on the remoting request this RPC stands for; raises Refused."""
        guard = self.broker.server.dispatcher.guard
        if guard is None:
            return
        request = RemotingCommand.request(code, fields, body)
        try:
            if isinstance(guard, PlainAccessValidator):
                access_key, signature = parse_authorization(meta.get("authorization", ""))
                date_time = meta.get("x-mq-date-time", "")
                guard.check_v2(
                    client.address[0],
                    access_key,
                    lambda secret: signature_matches(secret, date_time, signature),
                    request,
                    None if STREAM_SIGNED in meta else date_time,
                )
            else:
                guard(cast(Connection, client.channel), request)
        except RemotingCommandError as exc:
            raise Refused.of(exc) from None

    def _names(self, topic: str, group: str | None = None) -> None:
        """The Proxy's name checks (`GrpcValidator`): a legal topic that is no system topic (those hold
        every topic's parked timers, half messages...), a legal group; raises Refused."""
        problem = topic_problem(topic)
        if problem is not None:
            raise Refused(pb.ILLEGAL_TOPIC, f"topic {topic!r}: {problem}")
        if (
            topic in self.broker.topics.system_topics
            or topic.startswith(SYSTEM_TOPIC_PREFIX)
            or topic.startswith(INTERNAL_TOPIC_PREFIX)
        ):
            raise Refused(pb.ILLEGAL_TOPIC, f"topic {topic} is a system topic: no client reads or writes it")
        if group is not None and not (legal_name(group) and len(group) <= MAX_GROUP_LENGTH):
            raise Refused(
                pb.ILLEGAL_CONSUMER_GROUP,
                f"consumer group {group!r} must be 1 to {MAX_GROUP_LENGTH} characters of {NAME_CHARS}",
            )

    def _forget(self, client: GrpcClient) -> None:
        self.leases.drop_client(client.key)
        conn = cast(Connection, client.channel)
        self.broker.producers.connection_closed(conn)
        self.broker.consumers.connection_closed(conn)
        client.channel.close()

    def _channel(self, client: GrpcClient) -> ClientChannel:
        return ClientChannel(
            cast(Connection, client.channel),
            client.client_id,
            client.language,
            version_ordinal(client.version),
        )

    def _register(self, client: GrpcClient, meta: dict[str, str]) -> None:
        """Join (or refresh) the broker's producer groups (topic names, as the proxy's) or consumer group,
        checked as remoting checks a HEART_BEAT's consumer data (SUB on the group and each topic) and a
        producer's topics for PUB: a member of a consumer group is given queues, a producer of a topic
        its orphaned half messages. Raises Refused."""
        settings = client.settings
        if settings is None:
            return
        overflow = client_overflow(
            cast(Connection, client.channel),
            {t.name for t in settings.publishing.topics} if settings.client_type == pb.PRODUCER else (),
            {settings.subscription.group.name: len(settings.subscription.subscriptions)}
            if CONSUME_TYPES.get(settings.client_type) is not None and settings.subscription.group.name
            else {},
        )
        if overflow is not None:
            raise Refused(pb.BAD_REQUEST, f"settings refused: {overflow}")
        if settings.client_type == pb.PRODUCER:
            for topic in settings.publishing.topics:
                self._check(client, meta, RequestCode.SEND_MESSAGE_V2, {"b": topic.name})
            for topic in settings.publishing.topics:
                self.broker.producers.register(topic.name, self._channel(client))
        consume_type = CONSUME_TYPES.get(settings.client_type)
        if consume_type is not None and settings.subscription.group.name:
            group = settings.subscription.group.name
            self._check(client, meta, RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})
            for entry in settings.subscription.subscriptions:
                self._consumer_check(client, meta, group, entry.topic.name)
            now = int(time.time() * 1000)
            subs = [
                SubscriptionData(
                    entry.topic.name,
                    entry.expression.expression or "*",
                    sub_version=now,
                    expression_type="SQL92" if entry.expression.type == pb.SQL else "TAG",
                )
                for entry in settings.subscription.subscriptions
            ]
            data = ConsumerData(settings.subscription.group.name, consume_type, subscription_data_set=subs)
            self.broker.consumers.register(self._channel(client), data)

    def expire(self) -> None:
        self.clients.expire(CLIENT_EXPIRY_S)

    # ------------------------------------------------------------------ settings

    def _settings_reply(self, client: GrpcClient, given: pb.Settings) -> pb.Settings:
        """A complete Settings for the client's type (`GrpcClientSettingsManager`): every limit filled
        in, metrics off (a zero or absent field would switch a client feature off)."""
        reply = pb.Settings()
        reply.CopyFrom(given)
        reply.metric.Clear()
        reply.metric.on = False
        if not reply.HasField("request_timeout"):
            reply.request_timeout.CopyFrom(_duration(3_000))
        if given.client_type == pb.PRODUCER:
            attempts = given.backoff_policy.max_attempts or 3
            initial, most, multiplier = PRODUCER_BACKOFF
            reply.backoff_policy.Clear()
            reply.backoff_policy.max_attempts = attempts
            reply.backoff_policy.exponential_backoff.initial.CopyFrom(_duration(initial))
            reply.backoff_policy.exponential_backoff.max.CopyFrom(_duration(most))
            reply.backoff_policy.exponential_backoff.multiplier = multiplier
            reply.publishing.max_body_size = self.broker.store.config.max_message_size
            reply.publishing.validate_message_type = True
        elif given.client_type in CONSUME_TYPES:
            group = self.broker.groups.find(given.subscription.group.name, client.channel)
            retries = group.retry_max_times if group is not None else 16
            reply.backoff_policy.Clear()
            reply.backoff_policy.max_attempts = retries + 1
            for seconds in CONSUMER_BACKOFF_S:
                reply.backoff_policy.customized_backoff.next.append(_duration(seconds * 1000))
            reply.subscription.fifo = self._orderly(given.subscription.group.name)
            reply.subscription.receive_batch_size = RECEIVE_BATCH
            reply.subscription.long_polling_timeout.CopyFrom(_duration(MAX_LONG_POLLING_MS))
        return reply

    def _orderly(self, group: str) -> bool:
        """5.x's `consumeMessageOrderly` of the group: its consumers receive FIFO (a queue is held while
        a message of it is in flight) and a PushConsumer consumes in order."""
        config = self.broker.groups.get(group)
        return config is not None and config.orderly

    # ------------------------------------------------------------------ route

    async def _grpc_port(self, broker_name: str, addr: str) -> int:
        """A broker's gRPC port: ours, or what its config says (GET_BROKER_CONFIG, asked again after
        PORT_TTL_S; the port learnt before while it does not answer); 0: none. NameServers keep no such
        field (4.9.8's registration body has none), so the brokers are asked."""
        if addr == self.broker.addr:  # (a DLedger group's members share the broker name)
            return self.port
        known = self._ports.get(addr)
        if known is not None and time.monotonic() - known[1] < PORT_TTL_S:
            return known[0]
        port = 0
        try:
            # (our own keys, grpcListenPort among them, come only to a request asking for them all)
            request = RemotingCommand.request(RequestCode.GET_BROKER_CONFIG, {ALL_KEYS_FIELD: "true"})
            response = await self.broker.client.invoke(addr, request, 3.0)
            if response.code == ResponseCode.SUCCESS and response.body:
                props = parse_properties(response.body.decode("utf-8", "replace"))
                if props.get("grpcEnable", "true").lower() == "true":
                    port = int(props.get("grpcListenPort", "0") or 0)
        except (RemotingError, ValueError) as exc:
            log.info("no gRPC port learnt from broker %s (%s): %s", broker_name, addr, exc)
            return known[0] if known is not None else 0
        self._ports[addr] = (port, time.monotonic())
        return port

    async def _route(self, topic: str) -> list[tuple[str, pb.Endpoints, int, int, int]]:
        """(broker name, gRPC endpoints, read queues, write queues, perm) of every master serving
        `topic`: the NameServers' route, else this broker's own topic config."""
        config = self.broker.config
        route: TopicRouteData | None = None
        for namesrv in config.namesrv_addrs:
            request = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
            try:
                response = await self.broker.client.invoke(namesrv, request, 3.0)
            except RemotingError:
                continue
            if response.code == ResponseCode.SUCCESS and response.body:
                route = TopicRouteData.loads(response.body)
                break
        out = []
        if route is not None:
            masters = {b.broker_name: b.master_addr() for b in route.broker_datas}
            for queues in route.queue_datas:
                addr = masters.get(queues.broker_name)
                if not addr:
                    continue
                port = await self._grpc_port(queues.broker_name, addr)
                if port:
                    host = addr.rsplit(":", 1)[0]
                    out.append(
                        (
                            queues.broker_name,
                            endpoints(host, port),
                            queues.read_queue_nums,
                            queues.write_queue_nums,
                            queues.perm,
                        )
                    )
        if not out and self.broker.config.broker_role != SLAVE:  # a DLedger follower points to no one
            own = self.broker.topics.get(topic)
            if own is not None:
                perm = own.perm & config.broker_permission
                here = endpoints(config.ip1, self.port)
                out.append((config.broker_name, here, own.read_queue_nums, own.write_queue_nums, perm))
        return out

    async def QueryRoute(self, request: spb.QueryRouteRequest, context: Any) -> spb.QueryRouteResponse:
        """Checked as 5.x's ACL checks it (the signature, PUB or SUB on the topic): an unsigned peer does
        not learn which topics exist (the NameServer tells a 4.x client, unsigned, as 4.9.8's does)."""
        client, meta = self._client(context)
        topic = request.topic.name
        try:
            self._check(client, meta, QUERY_ROUTE, {"topic": topic})
        except Refused as refused:
            return spb.QueryRouteResponse(status=refused.status())
        queues = []
        types = accepted_types(self.broker.topics.get(topic))  # (every member holds the table)
        for name, where, reads, writes, perm in await self._route(topic):
            broker = pb.Broker(name=name, id=0, endpoints=where)
            for qid in range(max(reads, writes)):
                queue_perm = (perm & PermName.READ if qid < reads else 0) | (
                    perm & PermName.WRITE if qid < writes else 0
                )
                queues.append(
                    pb.MessageQueue(
                        topic=request.topic,
                        id=qid,
                        permission=permission(queue_perm),  # type: ignore[arg-type]
                        broker=broker,
                        accept_message_types=types,
                    )
                )
        if not queues:
            return spb.QueryRouteResponse(status=status(pb.TOPIC_NOT_FOUND, f"topic {topic} not found"))
        return spb.QueryRouteResponse(status=status(), message_queues=queues)

    async def QueryAssignment(
        self, request: spb.QueryAssignmentRequest, context: Any
    ) -> spb.QueryAssignmentResponse:
        """One assignment per master with queue id -1 (every queue of that broker), as the proxy."""
        client, meta = self._client(context)
        try:
            self._check(
                client,
                meta,
                RequestCode.QUERY_CONSUMER_OFFSET,
                {"consumerGroup": request.group.name, "topic": request.topic.name},
            )
        except Refused as refused:
            return spb.QueryAssignmentResponse(status=refused.status())
        assignments = []
        types = accepted_types(self.broker.topics.get(request.topic.name))
        for name, where, reads, _writes, perm in await self._route(request.topic.name):
            if reads and perm & PermName.READ:
                queue = pb.MessageQueue(
                    topic=request.topic,
                    id=-1,
                    permission=pb.READ_WRITE,
                    broker=pb.Broker(name=name, id=0, endpoints=where),
                    accept_message_types=types,
                )
                assignments.append(pb.Assignment(message_queue=queue))
        if not assignments:
            return spb.QueryAssignmentResponse(status=status(pb.TOPIC_NOT_FOUND, "no readable queue"))
        return spb.QueryAssignmentResponse(status=status(), assignments=assignments)

    # ------------------------------------------------------------------ client lifecycle

    async def Heartbeat(self, request: spb.HeartbeatRequest, context: Any) -> spb.HeartbeatResponse:
        """As the Proxy's `ClientActivity#heartbeat`: a client is known by the Settings its Telemetry stream
        brought, so one without them (none sent yet, or sent to another broker) or of a type that neither
        produces nor consumes is answered UNRECOGNIZED_CLIENT_TYPE and registers nothing; the request's
        own client type is not taken (the official clients log the answer and beat again later)."""
        client, meta = self._client(context)
        settings = client.settings
        if settings is None:
            return spb.HeartbeatResponse(
                status=status(pb.UNRECOGNIZED_CLIENT_TYPE, "cannot find client settings for this client")
            )
        if settings.client_type != pb.PRODUCER and settings.client_type not in CONSUME_TYPES:
            name = pb.ClientType.Name(settings.client_type)  # type: ignore[arg-type]
            return spb.HeartbeatResponse(status=status(pb.UNRECOGNIZED_CLIENT_TYPE, name))
        try:
            self._register(client, meta)
        except Refused as refused:
            return spb.HeartbeatResponse(status=refused.status())
        return spb.HeartbeatResponse(status=status())

    async def NotifyClientTermination(
        self, request: spb.NotifyClientTerminationRequest, context: Any
    ) -> spb.NotifyClientTerminationResponse:
        """As the Proxy's `ClientActivity#notifyClientTermination`, checked first as 5.x's ACL checks it
        (the signature, SUB on the request's group), then as the client's own registrations were (SUB on
        a consumer's group, PUB on a producer's topics): a producer names no group, and a consumer's
        request may name another, so a signature alone would let any account of the client's host make
        the broker forget another's client. A client is known by the Settings its Telemetry stream
        brought; one without them (unknown here) is answered UNRECOGNIZED_CLIENT_TYPE and nothing is added
        or removed, one of a type that neither produces nor consumes is forgotten and answered the same
        with its type."""
        meta = {m.key: m.value for m in context.invocation_metadata() or () if not m.key.startswith(":")}
        address = parse_peer(context.peer())
        client_id = meta.get("x-mq-client-id", "")
        known = self.clients.known(client_id, address)
        checked = known or GrpcClient(client_id, address, self._own_ip)
        try:  # (5.x's PlainAccessResource: SUB on the group; a producer names none)
            group = request.group.name
            self._check(
                checked,
                meta,
                RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                {"consumerGroup": group} if group else {},
            )
            settings = known.settings if known is not None else None
            if settings is not None:
                self._check_owner(checked, meta, settings, group)
        except Refused as refused:
            return spb.NotifyClientTerminationResponse(status=refused.status())
        client = known
        if client is None or client.settings is None:
            return spb.NotifyClientTerminationResponse(
                status=status(pb.UNRECOGNIZED_CLIENT_TYPE, "cannot find client settings for this client")
            )
        self.clients.forget(client)
        kind = client.settings.client_type
        if kind != pb.PRODUCER and kind not in CONSUME_TYPES:
            name = pb.ClientType.Name(kind)  # type: ignore[arg-type]
            return spb.NotifyClientTerminationResponse(status=status(pb.UNRECOGNIZED_CLIENT_TYPE, name))
        return spb.NotifyClientTerminationResponse(status=status())

    def _check_owner(
        self, client: GrpcClient, meta: dict[str, str], settings: pb.Settings, named: str
    ) -> None:
        """Whether the request may end what the client's Settings registered (see `_register`): SUB on a
        consumer's group (unless the request named it, checked already), PUB on each of a producer's
        topics. Raises Refused."""
        if settings.client_type == pb.PRODUCER:
            for topic in settings.publishing.topics:
                self._check(client, meta, RequestCode.SEND_MESSAGE_V2, {"b": topic.name})
        group = settings.subscription.group.name
        if CONSUME_TYPES.get(settings.client_type) is not None and group and group != named:
            self._check(client, meta, RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})

    async def Telemetry(self, request_iterator: AsyncIterator[spb.TelemetryCommand], context: Any) -> None:
        """Settings in, the complete Settings out; transaction checks pushed down while it is open. A host
        beyond loopback holds TELEMETRY_PER_HOST streams open at most, all hosts together
        `grpcMaxTelemetryStreams`: a further one is answered TOO_MANY_REQUESTS and ended (its client opens
        it again later)."""
        client, meta = self._client(context)
        streams = self.broker.streams
        streams.limit = self.broker.config.grpc_max_telemetry_streams
        over_host = streams.refused_host
        host = streams.take(
            context.peer(),
            client.address[0],
            0,
            TELEMETRY_PER_HOST,
            f"5.x Telemetry stream of {client.client_id}",
        )
        if host is None:
            if streams.refused_host != over_host:
                why = f"{TELEMETRY_PER_HOST} Telemetry streams of this host open"
            else:
                why = f"{streams.limit} Telemetry streams open (grpcMaxTelemetryStreams)"
            await context.write(spb.TelemetryCommand(status=status(pb.TOO_MANY_REQUESTS, why)))
            return
        try:
            await self._telemetry(client, meta, context)
        finally:
            streams.give(context.peer(), host)

    async def _telemetry(self, client: GrpcClient, meta: dict[str, str], context: Any) -> None:
        outbox: asyncio.Queue[spb.TelemetryCommand | None] = asyncio.Queue(TELEMETRY_OUTBOX)
        client.outbox = outbox
        ended = asyncio.Event()

        async def read() -> None:
            try:
                while True:
                    command = await context.read()
                    if command is grpc.aio.EOF:
                        return
                    client.last_seen = time.monotonic()
                    if command.HasField("settings"):
                        settings = command.settings
                        self.clients.readmit(client)  # (registered below: its heartbeats must find it)
                        client.client_type = settings.client_type
                        client.settings = settings
                        if settings.user_agent.version:
                            client.language = pb.Language.Name(settings.user_agent.language)
                            client.version = settings.user_agent.version
                        try:
                            self._register(client, meta)
                        except Refused as refused:
                            await outbox.put(spb.TelemetryCommand(status=refused.status()))
                            continue
                        meta[STREAM_SIGNED] = "yes"
                        reply = self._settings_reply(client, settings)
                        # (waits while the client reads none of its replies: its commands wait unread)
                        await outbox.put(spb.TelemetryCommand(status=status(), settings=reply))
            except (grpc.aio.AioRpcError, asyncio.CancelledError):
                pass
            finally:
                ended.set()
                with contextlib.suppress(asyncio.QueueFull):
                    outbox.put_nowait(None)

        reader = asyncio.create_task(read(), name=f"telemetry-{client.client_id}")
        try:
            while not (ended.is_set() and outbox.empty()):
                command = await outbox.get()
                if command is None:
                    break
                await context.write(command)
        finally:
            reader.cancel()
            if client.outbox is outbox:
                client.outbox = None

    # ------------------------------------------------------------------ producing

    async def SendMessage(self, request: spb.SendMessageRequest, context: Any) -> spb.SendMessageResponse:
        client, meta = self._client(context)
        entries = [await self._send_one(client, meta, msg) for msg in request.messages]
        if not entries:
            return spb.SendMessageResponse(status=status(pb.BAD_REQUEST, "no message"))
        return spb.SendMessageResponse(
            status=overall([e.status for e in entries], "messages"), entries=entries
        )

    async def _send_one(
        self, client: GrpcClient, meta: dict[str, str], msg: pb.Message
    ) -> spb.SendResultEntry:
        broker = self.broker
        topic = msg.topic.name
        now = int(time.time() * 1000)
        config = broker.topics.get(topic)
        queue_nums = config.write_queue_nums if config is not None else 0
        transactional = msg.system_properties.message_type == pb.TRANSACTION
        header = SendMessageRequestHeaderV2(
            topic,  # the proxy's producer group for a 5.x producer is the topic
            topic,
            AUTO_CREATE_TOPIC,
            queue_nums,
            -1,
            TRANSACTION_PREPARED_TYPE if transactional else 0,
            now,
            0,
        )
        try:
            # ACL first, as the proxy's interceptor: an unsigned peer learns neither which topics exist
            # nor what in its message would be refused
            self._check(client, meta, RequestCode.SEND_MESSAGE_V2, header.to_ext_fields())
            self._names(topic)
            props, body = parse_message(
                msg, now, broker.store.config.max_message_size, broker.config.timer_max_delay_sec * 1000
            )
            header.g = millis(msg.system_properties.born_timestamp) or now
            group = props.get(PROPERTY_SHARDING_KEY)
            if group is not None and queue_nums:
                header.e = fifo_queue(group, queue_nums)
            header.i = encode_properties(props).decode()
            fields = header.to_ext_fields()
            if config is None:
                return spb.SendResultEntry(status=status(pb.TOPIC_NOT_FOUND, f"topic {topic} not found"))
            conflict = type_conflict(config, props)
            if conflict is not None:
                return spb.SendResultEntry(status=status(pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, conflict))
            remoting = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, fields, body)
            answer = self.sender.send_from(client.address if client.address[0] else LOCAL, remoting)
            response = answer if isinstance(answer, RemotingCommand) else await answer
        except Refused as refused:
            return spb.SendResultEntry(status=refused.status())
        except MessageRefused as exc:
            return spb.SendResultEntry(status=status(exc.code, str(exc)))
        except RemotingCommandError as exc:
            return spb.SendResultEntry(status=Refused.of(exc).status())
        if response.code not in (ResponseCode.SUCCESS,):
            return spb.SendResultEntry(
                status=status(grpc_code(response.code), response.remark or "not stored")
            )
        reply = response.ext_fields or {}
        if transactional:  # orphan checks reach this client from now on (producer group = topic)
            broker.producers.register(topic, self._channel(client))
        return spb.SendResultEntry(
            status=status(),
            message_id=msg.system_properties.message_id or reply.get("msgId", ""),
            transaction_id=reply.get("msgId", "") if transactional else "",
            offset=int(reply.get("queueOffset", "0")),
            # a timer message is recalled by its unique key (the timer service's index)
            recall_handle=msg.system_properties.message_id if PROPERTY_TIMER_DELIVER_MS in props else "",
        )

    async def EndTransaction(
        self, request: spb.EndTransactionRequest, context: Any
    ) -> spb.EndTransactionResponse:
        """The transaction id is the half message's offset id: it names its CommitLog offset, so a
        commit needs no table of open transactions and survives a restart."""
        client, meta = self._client(context)
        try:
            _, offset = decode_msg_id(request.transaction_id)
        except ValueError:
            offset = -1
        resolution = {pb.COMMIT: TRANSACTION_COMMIT_TYPE, pb.ROLLBACK: TRANSACTION_ROLLBACK_TYPE}.get(
            request.resolution  # type: ignore[call-overload]
        )
        if resolution is None:
            return spb.EndTransactionResponse(
                status=status(pb.BAD_REQUEST, "resolution must be COMMIT or ROLLBACK")
            )
        header = EndTransactionRequestHeader(
            request.topic.name,
            0,
            offset,
            resolution,
            request.message_id,
            request.source == pb.SOURCE_SERVER_CHECK,
            request.transaction_id,
        )
        try:
            self._check(client, meta, RequestCode.END_TRANSACTION, header.to_ext_fields())
            half = self.broker.indexed_message(offset) if offset >= 0 else None
            if half is None or half.topic != TRANS_HALF_TOPIC:  # the client's id names none
                raise Refused(pb.INVALID_TRANSACTION_ID, f"no transaction {request.transaction_id!r}")
            await self.broker.transactions.end(header)
        except Refused as refused:
            return spb.EndTransactionResponse(status=refused.status())
        except RemotingCommandError as exc:
            return spb.EndTransactionResponse(status=Refused.of(exc).status())
        return spb.EndTransactionResponse(status=status())

    async def RecallMessage(
        self, request: spb.RecallMessageRequest, context: Any
    ) -> spb.RecallMessageResponse:
        """Cancel a pending timer message; the recall handle is its message id (see SendMessage)."""
        client, meta = self._client(context)
        topic, handle = request.topic.name, request.recall_handle
        try:
            # it deletes a message, anyone's: refused off this machine in protected mode (not a send)
            self._check(client, meta, RECALL_MESSAGE, {"topic": topic})
            if self.broker.config.broker_role == SLAVE:  # (a DLedger follower): timers are the master's
                raise Refused(
                    grpc_code(ResponseCode.SERVICE_NOT_AVAILABLE),
                    f"broker {self.broker.addr} is a slave: recall on its master",
                )
            recalled = await self.broker.timers.recall(topic, handle)
        except Refused as refused:
            return spb.RecallMessageResponse(status=refused.status())
        except RemotingCommandError as exc:
            return spb.RecallMessageResponse(status=Refused.of(exc).status())
        if not recalled:
            return spb.RecallMessageResponse(
                status=status(pb.NOT_FOUND, f"no pending timer message {handle} in topic {topic}")
            )
        return spb.RecallMessageResponse(status=status(), message_id=handle)

    # ------------------------------------------------------------------ consuming (the POP service)

    def _consumer_check(self, client: GrpcClient, meta: dict[str, str], group: str, topic: str) -> None:
        self._check(client, meta, RequestCode.PULL_MESSAGE, {"consumerGroup": group, "topic": topic})
        self._names(topic, group)

    async def ReceiveMessage(self, request: spb.ReceiveMessageRequest, context: Any) -> None:
        """Status first, then the messages, then the delivery timestamp (the proxy's
        `ReceiveMessageResponseStreamWriter`); MESSAGE_NOT_FOUND when the long poll ends empty."""
        client, meta = self._client(context)
        group, topic = request.group.name, request.message_queue.topic.name
        # an auto-renewed receive lends for the renewals' own duration, whatever it names (the Proxy's
        # `ReceiveMessageActivity`, which takes its default then)
        renewed = request.auto_renew
        try:
            pop = self.broker.pop
            self._consumer_check(client, meta, group, topic)
            invisible_ms = self.leases.invisible_ms
            if request.HasField("invisible_duration") and not renewed:
                invisible_ms = duration_ms(request.invisible_duration, pb.ILLEGAL_INVISIBLE_TIME)
                problem = invisible_problem(invisible_ms, MIN_INVISIBLE_MS)
                if problem is not None:
                    raise problem
            poll_ms = min(
                duration_ms(request.long_polling_timeout, pb.ILLEGAL_POLLING_TIME), MAX_LONG_POLLING_MS
            )
            remaining = context.time_remaining()
            if remaining is not None:  # answer before the client's deadline
                poll_ms = max(0, min(poll_ms, int(remaining * 1000) - 1_000))
            expression = request.filter_expression
            budget = None  # (the host its wait counts on, once counted)
            connection = context.peer()  # (the HTTP/2 connection: its address and port)
            if poll_ms > 0:
                config = self.broker.config
                budget = self.broker.polls.take(
                    connection,
                    client.address[0],
                    config.max_held_pulls_per_connection,
                    config.max_held_pulls_per_host,
                    f"5.x receive of {topic} for {group}",
                )
            try:
                popped = await pop.pop(
                    group=group,
                    topic=topic,
                    queue_id=-1,
                    max_messages=max(1, min(request.batch_size or RECEIVE_BATCH, RECEIVE_BATCH)),
                    invisible_ms=invisible_ms,
                    poll_ms=poll_ms if budget is not None else 0,  # over its bounds: read once, no wait
                    fifo=self._orderly(group),
                    expression_type="SQL92" if expression.type == pb.SQL else "TAG",
                    expression=expression.expression or "*",
                    attempt_id=request.attempt_id or None,
                    peer=client.channel,
                )
            finally:
                if budget is not None:
                    self.broker.polls.give(connection, budget)
            if not popped and budget is None and poll_ms > 0:  # as the Proxy: its client retries later
                raise Refused(pb.TOO_MANY_REQUESTS, "polling full")
        except Refused as refused:
            await context.write(spb.ReceiveMessageResponse(status=refused.status()))
            return
        except RemotingCommandError as exc:
            await context.write(spb.ReceiveMessageResponse(status=Refused.of(exc).status()))
            return
        answered = False  # (the status comes with the first message a client can be given)
        for item in popped:
            try:
                stored = decode_record(item.record)
            except (StoreError, zlib.error) as exc:
                await self._undeliverable(group, topic, item.receipt_handle, exc)
                continue
            if not answered:
                await context.write(spb.ReceiveMessageResponse(status=status()))
                answered = True
            if renewed:
                self.leases.add(client.key, group, topic, item.receipt_handle)
            message = to_proto(
                stored,
                receipt_handle=item.receipt_handle,
                delivery_attempt=item.delivery_attempt,
                invisible_ms=invisible_ms,
            )
            await context.write(spb.ReceiveMessageResponse(message=message))
        if not answered:
            await context.write(
                spb.ReceiveMessageResponse(status=status(pb.MESSAGE_NOT_FOUND, "no new message"))
            )
            return
        delivered = spb.ReceiveMessageResponse()
        delivered.delivery_timestamp.FromMilliseconds(int(time.time() * 1000))
        await context.write(delivered)

    async def _undeliverable(self, group: str, topic: str, handle: str, exc: Exception) -> None:
        """A popped message no 5.x client can be given (its body inflates past the cap, or in a codec
        not installed here, or not at all): to the group's DLQ at once, alone, as a 5.x consumer does
        with a message it cannot decode; the rest of its batch is delivered. A retry would fail the
        same way, and failing the whole batch held the others back until it reached the DLQ."""
        log.warning("5.x receive of %s for group %s: a message sent to the DLQ: %s", topic, group, exc)
        try:
            await self.broker.pop.forward_to_dlq(group=group, topic=topic, receipt_handle=handle)
        except (RemotingCommandError, StoreError) as failed:  # lent still: revived when it expires
            log.error("5.x receive of %s for group %s: the DLQ put failed: %s", topic, group, failed)

    async def AckMessage(self, request: spb.AckMessageRequest, context: Any) -> spb.AckMessageResponse:
        client, meta = self._client(context)
        group, topic = request.group.name, request.topic.name
        try:
            pop = self.broker.pop
            self._consumer_check(client, meta, group, topic)
        except Refused as refused:
            return spb.AckMessageResponse(status=refused.status())
        results = []
        ended = []
        for entry in request.entries:
            try:
                ended.append(
                    pop.ack_one(
                        group=group,
                        topic=topic,
                        receipt_handle=self.leases.current(entry.receipt_handle, group, topic),
                    )
                )
                self.leases.end(entry.receipt_handle)
                outcome = status()
            except RemotingCommandError as exc:
                outcome = status(pb.INVALID_RECEIPT_HANDLE, exc.remark or str(exc))
            results.append(
                spb.AckMessageResultEntry(
                    message_id=entry.message_id, receipt_handle=entry.receipt_handle, status=outcome
                )
            )
        try:
            logged = pop.log_acks(ended)  # one record per queue and pop, this turn's acks together
            if logged is not None:
                await logged  # the acks answered OK once a DLedger group's quorum holds them
        except RemotingCommandError as exc:
            failed = Refused.of(exc).status()
            for r in results:
                if r.status.code == pb.OK:
                    r.status.CopyFrom(failed)
        return spb.AckMessageResponse(status=overall([r.status for r in results], "acks"), entries=results)

    async def ChangeInvisibleDuration(
        self, request: spb.ChangeInvisibleDurationRequest, context: Any
    ) -> spb.ChangeInvisibleDurationResponse:
        client, meta = self._client(context)
        group, topic = request.group.name, request.topic.name
        try:
            pop = self.broker.pop
            self._consumer_check(client, meta, group, topic)
            invisible_ms = duration_ms(request.invisible_duration, pb.ILLEGAL_INVISIBLE_TIME)
            problem = invisible_problem(invisible_ms, 0)
            if problem is not None:
                raise problem
            handle = await pop.change_invisible(
                group=group,
                topic=topic,
                receipt_handle=self.leases.current(request.receipt_handle, group, topic),
                invisible_ms=invisible_ms,
            )
            self.leases.end(request.receipt_handle)
        except Refused as refused:
            return spb.ChangeInvisibleDurationResponse(status=refused.status())
        except RemotingCommandError as exc:
            return spb.ChangeInvisibleDurationResponse(
                status=status(pb.INVALID_RECEIPT_HANDLE, exc.remark or str(exc))
            )
        return spb.ChangeInvisibleDurationResponse(status=status(), receipt_handle=handle)

    async def ForwardMessageToDeadLetterQueue(
        self, request: spb.ForwardMessageToDeadLetterQueueRequest, context: Any
    ) -> spb.ForwardMessageToDeadLetterQueueResponse:
        client, meta = self._client(context)
        group, topic = request.group.name, request.topic.name
        try:
            pop = self.broker.pop
            self._check(client, meta, RequestCode.CONSUMER_SEND_MSG_BACK, {"group": group})
            self._names(topic, group)
            handle = self.leases.current(request.receipt_handle, group, topic)
            await pop.forward_to_dlq(group=group, topic=topic, receipt_handle=handle)
            self.leases.end(request.receipt_handle)
        except Refused as refused:
            return spb.ForwardMessageToDeadLetterQueueResponse(status=refused.status())
        except RemotingCommandError as exc:
            return spb.ForwardMessageToDeadLetterQueueResponse(
                status=status(pb.INVALID_RECEIPT_HANDLE, exc.remark or str(exc))
            )
        return spb.ForwardMessageToDeadLetterQueueResponse(status=status())
