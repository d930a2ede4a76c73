"""The gRPC front under attack: peers off the ACL whitelist, borrowed client ids, replayed signatures, system
topics, forged receipt handles and out-of-range durations. Each answer must be a clear status."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import importlib.util
import socket
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import grpc
import pytest
from google.protobuf import duration_pb2

from daemon.broker.headers import PopMessageRequestHeader
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.safe_config import locked_keys
from store.message import COMPRESSED_FLAG, COMPRESSION_LZ4
from store.names import TIMER_TOPIC
from store.record import MAX_INFLATED_BODY, decode_record
from tests.daemons import LocalCluster, handle
from tests.support.acl import USER_AK, USER_SK, write_acl
from tests.support.broker import send_fields
from tests.support.cli import RunCli
from tests.support.grpc5 import (
    MessagingServiceStub,
    create_group,
    create_topic,
    endpoint,
    grpc_cluster,
    pb,
    spb,
    stored,
)
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow


class Metadatum(NamedTuple):
    key: str
    value: str


class PeerContext:
    """A grpc.aio servicer context as a peer at `ip` with `metadata` presents it (the service's seam)."""

    def __init__(self, ip: str, metadata: dict[str, str]) -> None:
        self._peer = f"ipv4:{ip}:40000"
        self._metadata = tuple(Metadatum(k, v) for k, v in metadata.items())
        self.written: list[Any] = []

    def peer(self) -> str:
        return self._peer

    def invocation_metadata(self) -> tuple[Metadatum, ...]:
        return self._metadata

    def time_remaining(self) -> float:
        return 10.0

    async def write(self, message: Any) -> None:
        self.written.append(message)


def call(cluster: LocalCluster, rpc: str, request: Any, ip: str, client_id: str) -> Any:
    """One unary RPC of the broker's MessagingService as a peer at `ip` calling with `client_id`."""
    assert cluster.broker.grpc is not None
    service = cluster.broker.grpc.service
    context = PeerContext(ip, {"x-mq-client-id": client_id, "x-mq-language": "PYTHON"})
    return cluster.loop.run(getattr(service, rpc)(request, context))


def send_request(
    topic: str, body: bytes = b"x", user: dict[str, str] | None = None
) -> spb.SendMessageRequest:
    msg = pb.Message(topic=pb.Resource(name=topic), body=body, user_properties=user or {})
    msg.system_properties.message_id = "01" + "ab" * 16
    msg.system_properties.body_encoding = pb.IDENTITY
    msg.system_properties.message_type = pb.NORMAL
    return spb.SendMessageRequest(messages=[msg])


@pytest.fixture
def whitelisted(tmp_path: Path) -> Iterator[LocalCluster]:
    """ACL on; 10.10.103.* is in globalWhiteRemoteAddresses (tests.support.acl)."""
    home = tmp_path / "home"
    write_acl(home)
    with grpc_cluster(tmp_path / "c", acl_enable=True, rocketmq_home=str(home)) as cluster:
        create_topic(cluster, "Guarded")
        yield cluster


def test_a_whitelisted_peer_sends_unsigned_another_does_not(whitelisted: LocalCluster) -> None:
    inside = call(whitelisted, "SendMessage", send_request("Guarded"), "10.10.103.5", "inside@1")
    assert inside.status.code == pb.OK, inside.status
    outside = call(whitelisted, "SendMessage", send_request("Guarded"), "10.9.8.7", "outside@1")
    assert outside.status.code == pb.UNAUTHORIZED and "credential" in outside.status.message
    assert len(stored(whitelisted, "Guarded")) == 1


def test_a_peer_borrowing_a_whitelisted_clients_id_is_not_whitelisted(whitelisted: LocalCluster) -> None:
    """The caller's own address decides, not the one its x-mq-client-id was first seen from."""
    beat = spb.HeartbeatRequest(client_type=pb.PRODUCER)
    seen = call(whitelisted, "Heartbeat", beat, "10.10.103.5", "victim@1")  # (the id seen from there first)
    assert seen.status.code == pb.UNRECOGNIZED_CLIENT_TYPE  # (no Settings sent)
    forged = call(whitelisted, "SendMessage", send_request("Guarded"), "10.9.8.7", "victim@1")
    assert forged.status.code == pb.UNAUTHORIZED, forged.status
    assert stored(whitelisted, "Guarded") == []


def _authorization(ak: str, sk: str, date_time: str) -> dict[str, str]:
    signature = hmac.new(sk.encode(), date_time.encode(), hashlib.sha1).hexdigest().upper()
    return {
        "x-mq-client-id": "replayer@1",
        "x-mq-date-time": date_time,
        "authorization": f"MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, Signature={signature}",
    }


def signed(date_time: str | None = None) -> tuple[tuple[str, str], ...]:
    """Metadata signed as the ACL user at `date_time` (None: now)."""
    now = date_time or time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return tuple(_authorization(USER_AK, USER_SK, now).items())


def test_a_signature_out_of_the_freshness_window_is_refused(
    acl: tuple[LocalCluster, MessagingServiceStub],
) -> None:
    """A captured Authorization header (it signs only x-mq-date-time) stops working."""
    cluster, stub = acl
    fresh = stub.SendMessage(send_request("TopicA"), metadata=signed(), timeout=10)
    assert fresh.status.code == pb.OK, fresh.status
    for stale in ("20200101T000000Z", "not-a-date"):
        old = stub.SendMessage(send_request("TopicA"), metadata=signed(stale), timeout=10)
        assert old.status.code == pb.UNAUTHORIZED, (stale, old.status)
        assert "x-mq-date-time" in old.status.message
    assert len(stored(cluster, "TopicA")) == 1


@pytest.fixture
def stub(tmp_path: Path) -> Iterator[tuple[LocalCluster, MessagingServiceStub]]:
    with grpc_cluster(tmp_path) as cluster, grpc.insecure_channel(endpoint(cluster)) as channel:
        yield cluster, MessagingServiceStub(channel)


META = (("x-mq-client-id", "attacker@1"), ("x-mq-language", "PYTHON"))


def test_no_client_sends_to_the_timer_topic_or_forges_timer_properties(
    stub: tuple[LocalCluster, MessagingServiceStub],
) -> None:
    cluster, s = stub
    create_topic(cluster, "Victim")
    cluster.loop.run(_make_timer_topic(cluster))
    direct = s.SendMessage(send_request(TIMER_TOPIC), metadata=META, timeout=10)
    assert direct.status.code == pb.ILLEGAL_TOPIC, direct.status
    for prop in ("TIMER_OUT_MS", "TIMER_ROLL_TIMES", "TIMER_ENQUEUE_MS", "TIMER_DEL_UNIQKEY"):
        forged = s.SendMessage(send_request("Victim", user={prop: "1"}), metadata=META, timeout=10)
        assert forged.status.code == pb.ILLEGAL_MESSAGE_PROPERTY_KEY, (prop, forged.status)
        assert prop in forged.status.message
    assert stored(cluster, "Victim") == []


async def _make_timer_topic(cluster: LocalCluster) -> None:
    from daemon.remoting.bodies import PermName

    cluster.broker.topics.create_system_like(TIMER_TOPIC, 1, PermName.READ_WRITE)


def _duration(seconds: int) -> duration_pb2.Duration:
    return duration_pb2.Duration(seconds=seconds)


def receive_request(group: str, topic: str, *, invisible_s: int | None = 30, poll_s: int = 1) -> Any:
    """A ReceiveMessageRequest of every queue (invisible_s None: auto-renewed, as a PushConsumer's)."""
    request = spb.ReceiveMessageRequest(
        group=pb.Resource(name=group),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=-1),
        batch_size=32,
        auto_renew=invisible_s is None,
        long_polling_timeout=_duration(poll_s),
    )
    if invisible_s is not None:
        request.invisible_duration.CopyFrom(_duration(invisible_s))
    return request


def _receive(s: MessagingServiceStub, group: str, topic: str, invisible_s: int | None = 30) -> list[Any]:
    return list(
        s.ReceiveMessage(receive_request(group, topic, invisible_s=invisible_s), metadata=META, timeout=10)
    )


def test_invisible_durations_out_of_range_are_refused(
    stub: tuple[LocalCluster, MessagingServiceStub],
) -> None:
    cluster, s = stub
    create_topic(cluster, "Lent", 1)
    create_group(cluster, "G")
    assert s.SendMessage(send_request("Lent"), metadata=META, timeout=10).status.code == pb.OK
    huge = _receive(s, "G", "Lent", 10**11)  # the largest Duration is about 3.2e11 s
    assert [r.status.code for r in huge if r.HasField("status")] == [pb.ILLEGAL_INVISIBLE_TIME]
    got = _receive(s, "G", "Lent", 30)
    handle = next(r.message.system_properties.receipt_handle for r in got if r.HasField("message"))
    for seconds in (-5, 10**11):
        change = spb.ChangeInvisibleDurationRequest(
            group=pb.Resource(name="G"),
            topic=pb.Resource(name="Lent"),
            receipt_handle=handle,
            invisible_duration=_duration(seconds),
        )
        answer = s.ChangeInvisibleDuration(change, metadata=META, timeout=10)
        assert answer.status.code == pb.ILLEGAL_INVISIBLE_TIME, (seconds, answer.status)


def test_an_auto_renewed_receive_naming_a_duration_is_renewed_with_the_default(
    stub: tuple[LocalCluster, MessagingServiceStub],
) -> None:
    """As the Proxy's `ReceiveMessageActivity`: auto-renew takes the default lending and renews it. Before,
    a named duration was used and the lending was never renewed (the message came back while consumed)."""
    cluster, s = stub
    create_topic(cluster, "Renewed", 1)
    create_group(cluster, "G")
    assert s.SendMessage(send_request("Renewed"), metadata=META, timeout=10).status.code == pb.OK
    request = receive_request("G", "Renewed", invisible_s=None)
    request.invisible_duration.CopyFrom(_duration(2))
    got = [r.message for r in s.ReceiveMessage(request, metadata=META, timeout=10) if r.HasField("message")]
    assert len(got) == 1
    assert cluster.broker.grpc is not None
    leases = cluster.broker.grpc.service.leases
    assert got[0].system_properties.invisible_duration.ToMilliseconds() == leases.invisible_ms
    assert got[0].system_properties.receipt_handle in leases.by_handle


def test_a_forged_or_foreign_receipt_handle_acks_nothing(
    stub: tuple[LocalCluster, MessagingServiceStub],
) -> None:
    """A handle of group A's lending is no handle for group B, nor for another topic; garbage is refused."""
    cluster, s = stub
    create_topic(cluster, "Mine", 1)
    create_topic(cluster, "Other", 1)
    for group in ("A", "B"):
        create_group(cluster, group)
    assert s.SendMessage(send_request("Mine"), metadata=META, timeout=10).status.code == pb.OK
    got = _receive(s, "A", "Mine", 30)
    handle = next(r.message.system_properties.receipt_handle for r in got if r.HasField("message"))

    def ack(group: str, topic: str, h: str) -> int:
        request = spb.AckMessageRequest(
            group=pb.Resource(name=group),
            topic=pb.Resource(name=topic),
            entries=[spb.AckMessageEntry(message_id="x", receipt_handle=h)],
        )
        return int(s.AckMessage(request, metadata=META, timeout=10).status.code)

    assert ack("B", "Mine", handle) == pb.INVALID_RECEIPT_HANDLE
    assert ack("A", "Other", handle) == pb.INVALID_RECEIPT_HANDLE
    for garbage in ("", "1 2 3", "a b c d e f g h i", " ".join(["9" * 40] * 9)):
        assert ack("A", "Mine", garbage) == pb.INVALID_RECEIPT_HANDLE
    forward = spb.ForwardMessageToDeadLetterQueueRequest(
        group=pb.Resource(name="B"), topic=pb.Resource(name="Mine"), receipt_handle=handle
    )
    assert s.ForwardMessageToDeadLetterQueue(forward, metadata=META, timeout=10).status.code == (
        pb.INVALID_RECEIPT_HANDLE
    )
    assert ack("A", "Mine", handle) == pb.OK  # still A's to ack
    assert ack("A", "Mine", handle) == pb.INVALID_RECEIPT_HANDLE  # once
    change = spb.ChangeInvisibleDurationRequest(
        group=pb.Resource(name="A"),
        topic=pb.Resource(name="Mine"),
        receipt_handle=handle,
        invisible_duration=_duration(30),
    )
    assert (
        s.ChangeInvisibleDuration(change, metadata=META, timeout=10).status.code == pb.INVALID_RECEIPT_HANDLE
    )


def test_a_foreign_groups_ack_leaves_an_auto_renewed_lending_alone(
    stub: tuple[LocalCluster, MessagingServiceStub],
) -> None:
    """A PushConsumer's receive is renewed by the broker until its client acts on it: another group
    naming the handle ends nothing."""
    cluster, s = stub
    create_topic(cluster, "Renewed", 1)
    for group in ("A", "B"):
        create_group(cluster, group)
    assert s.SendMessage(send_request("Renewed"), metadata=META, timeout=10).status.code == pb.OK
    got = _receive(s, "A", "Renewed", None)
    handle = next(r.message.system_properties.receipt_handle for r in got if r.HasField("message"))
    assert cluster.broker.grpc is not None
    assert cluster.broker.grpc.service is not None
    leases = cluster.broker.grpc.service.leases
    assert handle in leases.by_handle
    foreign = spb.AckMessageRequest(
        group=pb.Resource(name="B"),
        topic=pb.Resource(name="Renewed"),
        entries=[spb.AckMessageEntry(message_id="x", receipt_handle=handle)],
    )
    assert s.AckMessage(foreign, metadata=META, timeout=10).status.code == pb.INVALID_RECEIPT_HANDLE
    assert handle in leases.by_handle  # still renewed for A
    own = spb.AckMessageRequest(
        group=pb.Resource(name="A"),
        topic=pb.Resource(name="Renewed"),
        entries=[spb.AckMessageEntry(message_id="x", receipt_handle=handle)],
    )
    assert s.AckMessage(own, metadata=META, timeout=10).status.code == pb.OK
    assert handle not in leases.by_handle


def test_bad_bodies_and_timestamps_are_statuses_and_a_gzip_bomb_is_not_inflated(
    stub: tuple[LocalCluster, MessagingServiceStub],
) -> None:
    import gzip

    cluster, s = stub
    create_topic(cluster, "Bodies", 1)

    def entry_code(request: spb.SendMessageRequest) -> int:
        return int(s.SendMessage(request, metadata=META, timeout=30).entries[0].status.code)

    not_gzip = send_request("Bodies", b"plain")
    not_gzip.messages[0].system_properties.body_encoding = pb.GZIP
    assert entry_code(not_gzip) == pb.BAD_REQUEST
    bomb = send_request("Bodies", gzip.compress(b"\0" * (64 << 20)))  # 64 KiB on the wire
    bomb.messages[0].system_properties.body_encoding = pb.GZIP
    before = _peak_rss_kib()
    assert entry_code(bomb) == pb.MESSAGE_BODY_TOO_LARGE
    assert _peak_rss_kib() - before < 32 << 10  # inflated no further than maxMessageSize
    for field in ("delivery_timestamp", "born_timestamp"):
        bad_time = send_request("Bodies")
        getattr(bad_time.messages[0].system_properties, field).seconds = 2**62  # no valid Timestamp
        assert entry_code(bad_time) in (pb.BAD_REQUEST, pb.ILLEGAL_DELIVERY_TIME), field
    assert stored(cluster, "Bodies") == []


def _peak_rss_kib() -> int:
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def test_system_topics_and_bad_group_names_are_refused(
    stub: tuple[LocalCluster, MessagingServiceStub],
) -> None:
    """As the Proxy: no 5.x client reads or writes the broker's own topics (parked timer messages of
    every topic, half messages), and a group must be a legal name."""
    cluster, s = stub
    create_topic(cluster, "Plain", 1)
    create_group(cluster, "G")
    parked = send_request("Plain")
    parked.messages[0].system_properties.delivery_timestamp.FromMilliseconds(int(time.time() * 1000) + 60_000)
    assert s.SendMessage(parked, metadata=META, timeout=10).status.code == pb.OK
    for topic in (TIMER_TOPIC, "RMQ_SYS_TRANS_HALF_TOPIC", "TBW102", "SELF_TEST_TOPIC"):
        got = _receive(s, "G", topic)
        assert [r.status.code for r in got if r.HasField("status")] == [pb.ILLEGAL_TOPIC], topic
        assert not any(r.HasField("message") for r in got)
        sent = s.SendMessage(send_request(topic), metadata=META, timeout=10)
        assert sent.status.code == pb.ILLEGAL_TOPIC, (topic, sent.status)
    assert s.SendMessage(send_request("a/b"), metadata=META, timeout=10).status.code == pb.ILLEGAL_TOPIC
    for group in ("", "a/b", "x" * 300):
        got = _receive(s, group, "Plain")
        assert [r.status.code for r in got if r.HasField("status")] == [pb.ILLEGAL_CONSUMER_GROUP], group


def test_invented_client_ids_do_not_grow_the_registry_without_bound(
    stub: tuple[LocalCluster, MessagingServiceStub],
) -> None:
    cluster, s = stub
    assert cluster.broker.grpc is not None
    assert cluster.broker.grpc.service is not None
    registry = cluster.broker.grpc.service.clients
    registry.limit = 50
    beat = spb.HeartbeatRequest(client_type=pb.PRODUCER)
    for i in range(120):
        client_id = f"invented-{i}" if i % 2 else f"{i}" + "x" * 4000
        answer = s.Heartbeat(beat, metadata=(("x-mq-client-id", client_id),), timeout=10)
        assert answer.status.code == pb.UNRECOGNIZED_CLIENT_TYPE  # answered all the same (no Settings)
    assert len(registry.clients) <= 50
    assert all(len(client.client_id) <= 256 for client in registry.clients.values())


def test_a_heartbeat_without_settings_is_an_unrecognized_client(
    stub: tuple[LocalCluster, MessagingServiceStub],
) -> None:
    """As the Proxy's `ClientActivity#heartbeat`: a client is known by the Settings of its Telemetry
    stream; a Heartbeat before them, or after Settings of a type that neither produces nor consumes, is
    answered UNRECOGNIZED_CLIENT_TYPE and registers nothing, whatever type the Heartbeat claims. Before,
    each was answered OK, so a client whose Settings never arrived was told it was registered."""
    cluster, s = stub
    create_topic(cluster, "Beaten", 1)
    beat = spb.HeartbeatRequest(client_type=pb.PRODUCER)
    first = s.Heartbeat(beat, metadata=META, timeout=10)
    assert (first.status.code, first.status.message) == (
        pb.UNRECOGNIZED_CLIENT_TYPE,
        "cannot find client settings for this client",
    )
    assert not cluster.broker.producers.groups.get("Beaten")
    unspecified = pb.Settings(client_type=pb.CLIENT_TYPE_UNSPECIFIED)
    other = (("x-mq-client-id", "unspecified@1"), ("x-mq-language", "PYTHON"))
    replies = s.Telemetry(iter([spb.TelemetryCommand(settings=unspecified)]), metadata=other, timeout=10)
    assert [r.status.code for r in replies] == [pb.OK]
    typeless = s.Heartbeat(beat, metadata=other, timeout=10)
    assert (typeless.status.code, typeless.status.message) == (
        pb.UNRECOGNIZED_CLIENT_TYPE,
        "CLIENT_TYPE_UNSPECIFIED",
    )
    settings = pb.Settings(
        client_type=pb.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name="Beaten")])
    )
    replies = s.Telemetry(iter([spb.TelemetryCommand(settings=settings)]), metadata=META, timeout=10)
    assert [r.status.code for r in replies] == [pb.OK]
    assert s.Heartbeat(beat, metadata=META, timeout=10).status.code == pb.OK
    assert cluster.broker.producers.groups.get("Beaten")


def test_a_termination_of_an_unknown_client_is_unrecognized_and_touches_nothing(
    stub: tuple[LocalCluster, MessagingServiceStub],
) -> None:
    """As the Proxy's `ClientActivity#notifyClientTermination`: a client without Settings is answered
    UNRECOGNIZED_CLIENT_TYPE, and the call neither adds it to the registry nor forgets what another RPC
    left there. Before, it was answered OK (and a never-seen id was registered to be removed)."""
    cluster, s = stub
    assert cluster.broker.grpc is not None and cluster.broker.grpc.service is not None
    registry = cluster.broker.grpc.service.clients
    create_topic(cluster, "Ended", 1)
    stranger = (("x-mq-client-id", "stranger@1"), ("x-mq-language", "PYTHON"))
    before = set(registry.clients)
    bye = s.NotifyClientTermination(spb.NotifyClientTerminationRequest(), metadata=stranger, timeout=10)
    assert (bye.status.code, bye.status.message) == (
        pb.UNRECOGNIZED_CLIENT_TYPE,
        "cannot find client settings for this client",
    )
    assert set(registry.clients) == before
    s.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name="Ended")), metadata=stranger, timeout=10)
    routed = set(registry.clients)
    bye = s.NotifyClientTermination(spb.NotifyClientTerminationRequest(), metadata=stranger, timeout=10)
    assert bye.status.code == pb.UNRECOGNIZED_CLIENT_TYPE
    assert set(registry.clients) == routed
    settings = pb.Settings(
        client_type=pb.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name="Ended")])
    )
    replies = s.Telemetry(iter([spb.TelemetryCommand(settings=settings)]), metadata=META, timeout=10)
    assert [r.status.code for r in replies] == [pb.OK]
    assert s.Heartbeat(spb.HeartbeatRequest(), metadata=META, timeout=10).status.code == pb.OK
    assert cluster.broker.producers.groups.get("Ended")
    bye = s.NotifyClientTermination(spb.NotifyClientTerminationRequest(), metadata=META, timeout=10)
    assert bye.status.code == pb.OK
    assert not cluster.broker.producers.groups.get("Ended")


def test_one_connection_holds_a_bounded_number_of_long_polls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client opening receive streams without end gets at most the per-connection cap served at once
    (the rest wait in its own HTTP/2 stack), not a broker growing with each."""
    import daemon.grpc.server

    monkeypatch.setattr(daemon.grpc.server, "MAX_STREAMS_PER_CONNECTION", 10, raising=False)
    with grpc_cluster(tmp_path) as cluster, grpc.insecure_channel(endpoint(cluster)) as channel:
        s = MessagingServiceStub(channel)
        create_topic(cluster, "Polled", 1)
        create_group(cluster, "G")
        request = receive_request("G", "Polled", poll_s=20)
        pop = cluster.broker.pop
        parked = []
        original = pop.pop

        async def counting(**kwargs: Any) -> Any:
            parked.append(1)
            try:
                return await original(**kwargs)
            finally:
                parked.pop()

        monkeypatch.setattr(pop, "pop", counting)
        calls = [s.ReceiveMessage(request, metadata=META, timeout=25) for _ in range(40)]
        try:
            wait_for(lambda: len(parked) >= 10, "the cap's receives parked", timeout=20)
            time.sleep(1)  # a front without the cap parks the rest meanwhile
            assert len(parked) == 10
        finally:
            for c in calls:
                c.cancel()


def test_calls_over_the_stream_cap_wait_in_the_client_and_are_all_served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client with more calls in flight than the per-connection cap (the official 5.x Python client's
    async sends have no bound, and it turns gRPC's retries off) has the further ones wait in its HTTP/2
    stack and every one answered: the front counts a stream as HTTP/2 does, not until grpc has freed
    it, which refused (REFUSED_STREAM) calls the client opened after it saw another one end."""
    import daemon.grpc.server

    monkeypatch.setattr(daemon.grpc.server, "MAX_STREAMS_PER_CONNECTION", 10, raising=False)
    beat = spb.HeartbeatRequest(client_type=pb.PRODUCER)

    async def bursts() -> list[Any]:
        options = [("grpc.enable_retries", 0)]
        async with grpc.aio.insecure_channel(endpoint(cluster), options=options) as channel:
            s = MessagingServiceStub(channel)
            answers: list[Any] = []
            for _ in range(5):
                calls = (s.Heartbeat(beat, metadata=META, timeout=30) for _ in range(100))
                answers += await asyncio.gather(*calls, return_exceptions=True)
            return answers

    with grpc_cluster(tmp_path) as cluster:
        answers = asyncio.run(bursts())
    failed = [a for a in answers if isinstance(a, Exception)]
    assert not failed, f"{len(failed)} of {len(answers)} failed, the first: {failed[0]}"
    assert all(a.status.code == pb.UNRECOGNIZED_CLIENT_TYPE for a in answers)  # (no Settings sent)


def test_joining_a_consumer_group_or_a_producer_topic_needs_the_accounts_permission(
    acl: tuple[LocalCluster, MessagingServiceStub],
) -> None:
    """As remoting checks a HEART_BEAT: an unsigned 5.x client neither joins a consumer group (it would
    be given queues its 4.x members then leave unconsumed) nor a topic's producers (it would be sent
    the topic's orphaned half messages)."""
    cluster, s = acl
    consumer = pb.Settings(
        client_type=pb.SIMPLE_CONSUMER,
        subscription=pb.Subscription(
            group=pb.Resource(name="G"),
            subscriptions=[pb.SubscriptionEntry(topic=pb.Resource(name="TopicA"))],
        ),
    )
    producer = pb.Settings(
        client_type=pb.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name="TopicA")])
    )
    for settings in (consumer, producer):
        replies = s.Telemetry(iter([spb.TelemetryCommand(settings=settings)]), metadata=META, timeout=10)
        assert next(replies).status.code == pb.UNAUTHORIZED
        beat = s.Heartbeat(spb.HeartbeatRequest(client_type=settings.client_type), metadata=META, timeout=10)
        assert beat.status.code in (pb.OK, pb.UNAUTHORIZED)
    joined = cluster.broker.consumers.get("G")
    assert joined is None or not joined.channels
    assert not cluster.broker.producers.groups.get("TopicA")
    replies = s.Telemetry(iter([spb.TelemetryCommand(settings=consumer)]), metadata=signed(), timeout=10)
    assert next(replies).status.code == pb.OK
    assert cluster.broker.consumers.get("G") is not None


def test_a_recall_needs_pub_on_the_topic_and_names_its_topic(
    acl: tuple[LocalCluster, MessagingServiceStub],
) -> None:
    cluster, s = acl
    timed = send_request("TopicA")
    timed.messages[0].system_properties.delivery_timestamp.FromMilliseconds(int(time.time() * 1000) + 60_000)
    sent = s.SendMessage(timed, metadata=signed(), timeout=10)
    assert sent.status.code == pb.OK
    handle = sent.entries[0].recall_handle

    def recall(topic: str, metadata: Any) -> int:
        request = spb.RecallMessageRequest(topic=pb.Resource(name=topic), recall_handle=handle)
        return int(s.RecallMessage(request, metadata=metadata, timeout=10).status.code)

    assert recall("TopicA", META) == pb.UNAUTHORIZED
    assert recall("TopicDeny", signed()) == pb.FORBIDDEN
    assert recall("TopicA", signed()) == pb.OK  # still pending: the refusals cancelled nothing
    assert cluster.broker.timers.pending == 0


def test_the_grpc_port_follows_listen_host(tmp_path: Path) -> None:
    """Bound on 127.0.0.2 only, the gRPC port is not reachable on the machine's other addresses."""
    import socket

    with grpc_cluster(tmp_path, listen_host="127.0.0.2", broker_ip1="127.0.0.2") as cluster:
        assert cluster.broker.grpc is not None
        port = cluster.broker.grpc.port
        with socket.create_connection(("127.0.0.2", port), timeout=3):
            pass
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=3).close()


class DeafContext(PeerContext):
    """A Telemetry client sending `count` Settings and never reading a reply (its writes never end)."""

    def __init__(self, count: int) -> None:
        super().__init__("127.0.0.1", {"x-mq-client-id": "deaf@1"})
        self.left = count

    async def read(self) -> Any:
        if self.left == 0:
            await asyncio.Event().wait()  # the client sends no more and closes nothing
        self.left -= 1
        return spb.TelemetryCommand(settings=pb.Settings(client_type=pb.PRODUCER, publishing=pb.Publishing()))

    async def write(self, message: Any) -> None:
        await asyncio.Event().wait()


def test_a_telemetry_stream_whose_client_reads_nothing_holds_a_bounded_backlog(
    stub: tuple[LocalCluster, MessagingServiceStub],
) -> None:
    cluster, _ = stub
    assert cluster.broker.grpc is not None and cluster.broker.grpc.service is not None
    service = cluster.broker.grpc.service
    context = DeafContext(5_000)

    async def run() -> int:
        stream = asyncio.create_task(service.Telemetry(iter(()), context))  # type: ignore[arg-type]
        await asyncio.sleep(1)
        (deaf,) = [c for c in service.clients.clients.values() if c.client_id == "deaf@1"]
        backlog = deaf.outbox.qsize() if deaf.outbox is not None else -1
        stream.cancel()
        return backlog

    backlog = cluster.loop.run(run())
    assert 0 < backlog <= 64 and context.left > 0  # it stopped reading the client's commands


def test_an_end_transaction_naming_no_half_message_is_invalid_transaction_id(
    stub: tuple[LocalCluster, MessagingServiceStub],
) -> None:
    cluster, s = stub
    create_topic(cluster, "Tx", 1)
    sent = s.SendMessage(send_request("Tx"), metadata=META, timeout=10)  # a plain message, no half
    plain_id = sent.entries[0].message_id
    offset_id = stored(cluster, "Tx")[0].msg_id
    for transaction_id in ("", "zz", "0" * 32, plain_id, offset_id):
        request = spb.EndTransactionRequest(
            topic=pb.Resource(name="Tx"), transaction_id=transaction_id, resolution=pb.COMMIT
        )
        answer = s.EndTransaction(request, metadata=META, timeout=10)
        assert answer.status.code == pb.INVALID_TRANSACTION_ID, (transaction_id, answer.status)


@pytest.mark.slow
def test_a_request_larger_than_any_message_the_broker_takes_is_refused_unread(
    acl: tuple[LocalCluster, MessagingServiceStub],
) -> None:
    """Unsigned, a 64 MiB send was read whole (and parsed) before the ACL refused it: a few of them at
    once held gigabytes. A request over maxMessageSize plus room for its fields is refused by its
    length; one within it is answered as before."""
    cluster, stub = acl
    limit = cluster.broker.store.config.max_message_size
    with pytest.raises(grpc.RpcError) as refused:
        stub.SendMessage(send_request("TopicA", b"x" * (64 << 20)), timeout=30)
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    within = stub.SendMessage(send_request("TopicA", b"x" * (limit - 1024)), metadata=signed(), timeout=30)
    assert within.status.code == pb.OK, within.status


def test_an_unsigned_send_learns_nothing_of_which_topics_exist(
    acl: tuple[LocalCluster, MessagingServiceStub],
) -> None:
    """With ACL on, an unsigned send to a topic that exists and to one that does not get the same answer
    (remoting's ACL check comes before the processor too)."""
    _cluster, stub = acl
    there = stub.SendMessage(send_request("TopicA"), timeout=10)
    nowhere = stub.SendMessage(send_request("NoSuchTopic"), timeout=10)
    assert there.status.code == nowhere.status.code == pb.UNAUTHORIZED, (there.status, nowhere.status)


#: An HTTP/2 client's preface and an empty SETTINGS frame: what a peer sends before anything is checked.
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def _opened(port: int) -> socket.socket:
    """A raw connection to the gRPC port that sent the HTTP/2 preface and holds on."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(H2_PREFACE)
    return sock


def test_connections_over_the_cap_are_closed_on_accept_and_room_comes_back(tmp_path: Path) -> None:
    """An unauthenticated peer opened connections to the gRPC front without bound, each holding the
    broker's memory and a descriptor. `grpcMaxConnections` caps them: one more is closed as it is accepted
    (a real client's call over it fails UNAVAILABLE), and once one closes a client is served again."""
    with grpc_cluster(tmp_path, grpc_max_connections=3) as cluster:
        create_topic(cluster, "Capped")
        assert cluster.broker.grpc is not None
        port = cluster.broker.grpc.port
        request = spb.QueryRouteRequest(topic=pb.Resource(name="Capped"))
        held = [_opened(port) for _ in range(3)]
        try:
            for sock in held:
                assert sock.recv(9)[3:4] == b"\x04"  # the server's SETTINGS: each one is served
            extra = _opened(port)
            with extra:
                try:  # closed unanswered: a FIN, or a reset where the preface was still unread
                    answer = extra.recv(100)
                except ConnectionResetError:
                    answer = b""
                assert answer == b""
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                with pytest.raises(grpc.RpcError) as refused:
                    MessagingServiceStub(channel).QueryRoute(request, timeout=3)
                assert refused.value.code() in (
                    grpc.StatusCode.UNAVAILABLE,
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                )
        finally:
            held.pop().close()
        try:

            def served() -> bool:
                with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                    try:
                        reply = MessagingServiceStub(channel).QueryRoute(request, timeout=3)
                    except grpc.RpcError:
                        return False
                return reply.status.code == pb.OK and len(reply.message_queues) == 4

            wait_for(served, "a client served once a connection closed", timeout=30)
        finally:
            for sock in held:
                sock.close()


def test_the_grpc_connection_cap_is_a_broker_key(tmp_path: Path, cli: RunCli) -> None:
    """`grpcMaxConnections` is read from broker.conf and shown by `broker start --print-config` (1000 unset);
    below 1 the broker does not start."""
    conf = tmp_path / "broker.conf"
    conf.write_text("grpcMaxConnections=7\n")
    shown = cli("broker", "start", "-c", str(conf), "--store", str(tmp_path / "s"), "--print-config")
    assert shown.code == 0, shown.stderr
    assert "grpcMaxConnections=7\n" in shown.stdout
    default = cli("broker", "start", "--store", str(tmp_path / "s"), "--print-config")
    assert "grpcMaxConnections=1000\n" in default.stdout
    conf.write_text("grpcMaxConnections=0\n")  # grpc would refuse every connection
    refused = cli("broker", "start", "-c", str(conf), "--store", str(tmp_path / "s"), "--print-config")
    assert refused.code == 2 and "grpcMaxConnections is at least 1, not 0" in refused.stderr, refused.stderr


def test_the_telemetry_stream_bound_is_a_broker_key_no_request_changes(tmp_path: Path, cli: RunCli) -> None:
    """`grpcMaxTelemetryStreams` is read from broker.conf and shown by `--print-config` (16384 unset), below
    1 the broker does not start, and UPDATE_BROKER_CONFIG refuses it as the other caps."""
    conf = tmp_path / "broker.conf"
    conf.write_text("grpcMaxTelemetryStreams=9\n")
    shown = cli("broker", "start", "-c", str(conf), "--store", str(tmp_path / "s"), "--print-config")
    assert shown.code == 0 and "grpcMaxTelemetryStreams=9\n" in shown.stdout, shown.stderr
    default = cli("broker", "start", "--store", str(tmp_path / "s"), "--print-config")
    assert "grpcMaxTelemetryStreams=16384\n" in default.stdout
    conf.write_text("grpcMaxTelemetryStreams=0\n")  # every client's stream refused
    refused = cli("broker", "start", "-c", str(conf), "--store", str(tmp_path / "s"), "--print-config")
    assert refused.code == 2 and "grpcMaxTelemetryStreams is at least 1, not 0" in refused.stderr, (
        refused.stderr
    )
    assert locked_keys({"grpcMaxTelemetryStreams": "1000000"}) == ["grpcMaxTelemetryStreams"]


def _store_raw(cluster: LocalCluster, topic: str, body: bytes, sys_flag: int) -> None:
    """A message stored as a 4.x producer sends it: `body` as it is, `sys_flag` as given."""
    client = handle(cluster)
    fields = send_fields(topic)
    fields["f"] = str(sys_flag)
    sent = cluster.loop.run(client.call(RequestCode.SEND_MESSAGE_V2, fields, body))
    assert sent.code == ResponseCode.SUCCESS, sent.remark


UNDELIVERABLE = [
    pytest.param(
        zlib.compress(b"\0" * (MAX_INFLATED_BODY + 1), 9), COMPRESSED_FLAG, "inflates past", id="bomb"
    ),
    pytest.param(b"not zlib at all", COMPRESSED_FLAG, "", id="not-inflatable"),
    pytest.param(
        b"\x04\x22\x4d\x18 an lz4 frame",
        COMPRESSED_FLAG | COMPRESSION_LZ4,
        "lz4",
        id="lz4-not-installed",
        marks=pytest.mark.skipif(importlib.util.find_spec("lz4") is not None, reason="lz4 is installed here"),
    ),
]


@pytest.mark.parametrize(("body", "sys_flag", "why"), UNDELIVERABLE)
def test_a_body_no_client_can_be_given_goes_to_the_dlq_alone(
    stub: tuple[LocalCluster, MessagingServiceStub], body: bytes, sys_flag: int, why: str
) -> None:
    """A stored body that inflates past the cap, or does not inflate, or is in a codec not installed here,
    between two good ones: the receive delivers the two and sends that one to the group's DLQ as stored
    (4.x's bytes, its flag kept). Before, the pop took it for a damaged record and skipped it: never
    delivered, never in the DLQ, the queue's offset moved past it."""
    cluster, s = stub
    create_topic(cluster, "Mixed", 1)
    create_group(cluster, "G")
    for raw, flag in ((b"one", 0), (body, sys_flag), (b"two", 0)):
        _store_raw(cluster, "Mixed", raw, flag)
    got = _receive(s, "G", "Mixed")
    assert [r.status.code for r in got if r.HasField("status")] == [pb.OK]
    assert [r.message.body for r in got if r.HasField("message")] == [b"one", b"two"]
    (dead,) = stored(cluster, "%DLQ%G", inflate=False)
    assert dead.stored_body == body and dead.sys_flag & sys_flag == sys_flag
    assert dead.properties["RETRY_TOPIC"] == "Mixed"
    assert cluster.broker.pop.in_flight() == {"G": 2}  # the two delivered, lent; the bad one's lending ended
    again = _receive(s, "G", "Mixed")  # nothing else: the two are out, the bad one is in the DLQ
    assert [r.status.code for r in again if r.HasField("status")] == [pb.MESSAGE_NOT_FOUND]


def test_a_lent_compressed_bomb_is_revived_not_dropped(tmp_path: Path) -> None:
    """A remoting POP lends the bomb as stored (the consumer's to refuse); unacked, it comes back through
    the retry topic with its bytes. Before, the revive could not read it ('unreadable') and ended its
    lending without a copy: the message was gone."""
    with grpc_cluster(tmp_path) as cluster:
        create_topic(cluster, "Bombed", 1)
        create_group(cluster, "G")
        bomb = zlib.compress(b"\0" * (MAX_INFLATED_BODY + 1), 9)
        _store_raw(cluster, "Bombed", bomb, COMPRESSED_FLAG)
        client = handle(cluster)
        header = PopMessageRequestHeader("G", "Bombed", -1, 32, 1000, 0, 0, 0)
        popped = cluster.loop.run(client.call(RequestCode.POP_MESSAGE, header.to_ext_fields()))
        assert popped.code == ResponseCode.SUCCESS, popped.remark
        lent = decode_record(popped.body, inflate=False)
        assert lent.stored_body == bomb
        wait_for(lambda: stored(cluster, "%RETRY%G", inflate=False), "the bomb revived", timeout=30)
        (revived,) = stored(cluster, "%RETRY%G", inflate=False)
        assert revived.stored_body == bomb and revived.reconsume_times == 1


def test_settings_naming_more_groups_or_topics_than_a_client_holds_are_refused(
    stub: tuple[LocalCluster, MessagingServiceStub],
) -> None:
    """A Telemetry Settings is a 5.x client's heartbeat: one naming 1001 topics a producer publishes to (or
    a consumer group subscribing 1001) registered each one, as a HEART_BEAT naming as many groups did;
    it is refused with BAD_REQUEST and registers nothing. A client within the cap is served."""
    cluster, s = stub
    topics = [pb.Resource(name=f"Invented{i}") for i in range(1001)]
    producer = pb.Settings(client_type=pb.PRODUCER, publishing=pb.Publishing(topics=topics))
    subs = [pb.SubscriptionEntry(topic=t) for t in topics]
    consumer = pb.Settings(
        client_type=pb.SIMPLE_CONSUMER,
        subscription=pb.Subscription(group=pb.Resource(name="G"), subscriptions=subs),
    )
    for settings in (producer, consumer):
        replies = s.Telemetry(iter([spb.TelemetryCommand(settings=settings)]), metadata=META, timeout=10)
        refused = next(replies).status
        assert refused.code == pb.BAD_REQUEST and "1000 at most" in refused.message, refused
    assert not any(g.startswith("Invented") for g in cluster.broker.producers.groups)
    assert cluster.broker.consumers.get("G") is None
    within = pb.Settings(client_type=pb.PRODUCER, publishing=pb.Publishing(topics=topics[:3]))
    replies = s.Telemetry(iter([spb.TelemetryCommand(settings=within)]), metadata=META, timeout=10)
    assert next(replies).status.code == pb.OK


def _h2_frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes((kind, flags)) + stream.to_bytes(4, "big") + payload


def _literal(name: str, value: str) -> bytes:
    """An HPACK header field without indexing, neither string Huffman-coded (each under 127 bytes)."""
    return b"\x00" + bytes((len(name),)) + name.encode() + bytes((len(value),)) + value.encode()


def _call_headers(method: str) -> bytes:
    """The HPACK block of a gRPC call's request headers to the MessagingService's `method`."""
    return b"".join(
        _literal(k, v)
        for k, v in (
            (":method", "POST"),
            (":scheme", "http"),
            (":path", f"/apache.rocketmq.v2.MessagingService/{method}"),
            (":authority", "broker"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        )
    )


def _h2_frames(sock: socket.socket, until: float) -> Iterator[tuple[int, int, int]]:
    """(type, flags, stream id) of each frame the server sends until `until` (time.monotonic) or it closes."""
    buffered = b""
    while time.monotonic() < until:
        sock.settimeout(max(0.1, until - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            return
        if not chunk:
            return
        buffered += chunk
        while len(buffered) >= 9 and len(buffered) >= 9 + int.from_bytes(buffered[:3], "big"):
            size = int.from_bytes(buffered[:3], "big")
            yield buffered[3], buffered[4], int.from_bytes(buffered[5:9], "big") & 0x7FFFFFFF
            buffered = buffered[9 + size :]


def test_calls_whose_request_never_arrives_are_ended_and_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A peer's calls of HTTP/2 headers and 3 bytes of a message, no deadline, were held as long as the
    connection lived (a thousand a connection, tens of MB at ten connections): each now ends when its
    request has not arrived in time, a host's calls waiting for their request are bounded (the others are
    refused at once), and a real client is served meanwhile."""
    from daemon.grpc import arrival

    monkeypatch.setattr(arrival, "REQUEST_ARRIVAL_S", 2.0)
    monkeypatch.setattr(arrival, "ARRIVING_PER_HOST", 40)
    calls = 100
    with grpc_cluster(tmp_path) as cluster:
        create_topic(cluster, "Held")
        front = cluster.broker.grpc
        assert front is not None
        sock = _opened(front.port)
        with sock:
            head = sock.recv(9)
            assert head[3:4] == b"\x04"  # the server's SETTINGS
            sock.recv(int.from_bytes(head[:3], "big"))
            sock.sendall(_h2_frame(4, 1, 0, b""))  # SETTINGS ACK
            fields = _call_headers("SendMessage")
            for i in range(calls):
                stream = 2 * i + 1
                sock.sendall(_h2_frame(1, 0x4, stream, fields) + _h2_frame(0, 0, stream, b"\x00\x00\x00"))
            ended: set[int] = set()
            for kind, flags, stream in _h2_frames(sock, time.monotonic() + 60):
                if kind == 3 or (kind == 1 and flags & 0x1):  # RST_STREAM, or trailers (END_STREAM)
                    ended.add(stream)
                if len(ended) == calls:
                    break
            assert len(ended) == calls, f"{calls - len(ended)} calls still held"
        arrivals = front.arrivals
        wait_for(lambda: arrivals.waiting == 0 and not arrivals.hosts, "no call left waiting", timeout=30)
        assert arrivals.refused >= calls - 40 and arrivals.expired >= 1
        assert arrivals.refused + arrivals.expired + arrivals.crowded == calls
        with grpc.insecure_channel(endpoint(cluster)) as channel:
            reply = MessagingServiceStub(channel).QueryRoute(
                spb.QueryRouteRequest(topic=pb.Resource(name="Held")), timeout=10
            )
        assert reply.status.code == pb.OK and len(reply.message_queues) == 4


def test_a_hosts_calls_whose_large_requests_stay_incomplete_are_ended_past_the_slow_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call waiting for its message buffers what came of it, and grpc opens its window to the whole
    message the prefix announces: a host's thousand calls each announcing 4 MiB and sending all but a byte
    held gigabytes for their 10 s. A host's calls still waiting after a second are now bounded (the oldest
    past the bound ended RESOURCE_EXHAUSTED); those within it wait as before, and a real client is served."""
    from daemon.grpc import arrival

    monkeypatch.setattr(arrival, "REQUEST_ARRIVAL_S", 120.0)  # (no call ends by the time limit here)
    monkeypatch.setattr(arrival, "SLOW_PER_HOST", 5)
    calls, announced = 20, 1 << 20
    with grpc_cluster(tmp_path) as cluster:
        create_topic(cluster, "Held")
        front = cluster.broker.grpc
        assert front is not None
        with _opened(front.port) as sock:
            head = sock.recv(9)
            sock.recv(int.from_bytes(head[:3], "big"))
            sock.sendall(_h2_frame(4, 1, 0, b""))
            fields = _call_headers("SendMessage")
            part = b"\x00" + announced.to_bytes(4, "big") + b"x" * 8000
            for i in range(calls):
                sock.sendall(_h2_frame(1, 0x4, 2 * i + 1, fields) + _h2_frame(0, 0, 2 * i + 1, part))
            ended: set[int] = set()
            for kind, flags, stream in _h2_frames(sock, time.monotonic() + 60):
                if kind == 3 or (kind == 1 and flags & 0x1):
                    ended.add(stream)
                if len(ended) == calls - 5:
                    break
            assert ended == {2 * i + 1 for i in range(calls - 5)}, sorted(ended)  # the oldest
            arrivals = front.arrivals
            assert arrivals.crowded == calls - 5 and arrivals.waiting == 5 and arrivals.expired == 0
            with grpc.insecure_channel(endpoint(cluster)) as channel:
                reply = MessagingServiceStub(channel).QueryRoute(
                    spb.QueryRouteRequest(topic=pb.Resource(name="Held")), timeout=10
                )
            assert reply.status.code == pb.OK


def test_a_request_trickling_in_within_the_limit_is_answered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The arrival limit ends late requests, not slow ones: a call whose request comes in pieces over
    most of the limit is answered as any other (a response message, no reset)."""
    from daemon.grpc import arrival

    monkeypatch.setattr(arrival, "REQUEST_ARRIVAL_S", 3.0)
    with grpc_cluster(tmp_path) as cluster:
        create_topic(cluster, "Slow")
        front = cluster.broker.grpc
        assert front is not None
        message = spb.QueryRouteRequest(topic=pb.Resource(name="Slow")).SerializeToString()
        framed = b"\x00" + len(message).to_bytes(4, "big") + message
        with _opened(front.port) as sock:
            head = sock.recv(9)
            sock.recv(int.from_bytes(head[:3], "big"))
            sock.sendall(_h2_frame(4, 1, 0, b""))
            fields = _call_headers("QueryRoute")
            sock.sendall(_h2_frame(1, 0x4, 1, fields))
            pieces = [framed[:3], framed[3:7], framed[7:]]
            for i, piece in enumerate(pieces):
                time.sleep(0.8)  # (2.4 s in all: past two of the sweeps, within the limit)
                sock.sendall(_h2_frame(0, 0x1 if i == len(pieces) - 1 else 0, 1, piece))
            kinds = set()
            for kind, flags, stream in _h2_frames(sock, time.monotonic() + 30):
                if stream == 1:
                    kinds.add(kind)
                    if kind == 3 or (kind == 1 and flags & 0x1):
                        break
        assert 0 in kinds and 3 not in kinds, kinds  # a response message, and no RST_STREAM
        assert front.arrivals.expired == 0
