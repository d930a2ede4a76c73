"""The front on the wire, with a raw grpc stub: Settings replies complete for each client type, errors
as statuses, the RPCs no official client calls."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from daemon.broker.broker import Broker
from store.models import TopicConfig
from tests.daemons import LocalCluster
from tests.support.broker import start_broker
from tests.support.grpc5 import (
    MessagingServiceStub,
    create_group,
    create_topic,
    endpoint,
    grpc_cluster,
    pb,
    spb,
)

pytestmark = pytest.mark.slow

from google.protobuf import duration_pb2  # noqa: E402

META = (("x-mq-client-id", "wire-test@1"), ("x-mq-language", "PYTHON"), ("x-mq-client-version", "5.1.2"))


@pytest.fixture
def stub(tmp_path: Path) -> Iterator[tuple[LocalCluster, MessagingServiceStub]]:
    with grpc_cluster(tmp_path) as cluster, grpc.insecure_channel(endpoint(cluster)) as channel:
        yield cluster, MessagingServiceStub(channel)


def settings_reply(stub: MessagingServiceStub, settings: pb.Settings) -> pb.Settings:
    replies = stub.Telemetry(iter([spb.TelemetryCommand(settings=settings)]), metadata=META, timeout=10)
    first = next(replies)
    assert first.status.code == pb.OK
    return first.settings


def test_a_producer_gets_complete_settings(stub: tuple[LocalCluster, MessagingServiceStub]) -> None:
    _, s = stub
    reply = settings_reply(s, pb.Settings(client_type=pb.PRODUCER, publishing=pb.Publishing()))
    assert reply.publishing.max_body_size == 4 * 1024 * 1024  # maxMessageSize, never 0
    assert reply.publishing.validate_message_type
    assert reply.backoff_policy.max_attempts >= 1
    assert reply.backoff_policy.exponential_backoff.max.ToMilliseconds() > 0
    assert not reply.metric.on and reply.request_timeout.ToMilliseconds() > 0


def test_consumers_get_their_groups_fifo_retries_and_long_polling(
    stub: tuple[LocalCluster, MessagingServiceStub],
) -> None:
    cluster, s = stub
    create_group(cluster, "Ordered", retry_max_times=3, orderly=True)
    for group, fifo, attempts in (("Ordered", True, 4), ("Plain", False, 17)):
        given = pb.Settings(
            client_type=pb.PUSH_CONSUMER, subscription=pb.Subscription(group=pb.Resource(name=group))
        )
        reply = settings_reply(s, given)
        assert reply.subscription.fifo is fifo
        assert reply.backoff_policy.max_attempts == attempts
        assert len(reply.backoff_policy.customized_backoff.next) > 0
        assert reply.subscription.long_polling_timeout.ToMilliseconds() == 20_000
        assert reply.subscription.receive_batch_size == 32 and not reply.metric.on


def test_refusals_are_statuses(stub: tuple[LocalCluster, MessagingServiceStub]) -> None:
    cluster, s = stub
    create_topic(cluster, "Wire")
    route = s.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name="Nope")), metadata=META, timeout=10)
    assert route.status.code == pb.TOPIC_NOT_FOUND
    reserved = pb.Message(topic=pb.Resource(name="Wire"), body=b"x", user_properties={"TRAN_MSG": "true"})
    sent = s.SendMessage(spb.SendMessageRequest(messages=[reserved]), metadata=META, timeout=10)
    assert (
        sent.status.code == pb.ILLEGAL_MESSAGE_PROPERTY_KEY
    )  # no forged transaction through a user property
    end = s.EndTransaction(
        spb.EndTransactionRequest(
            topic=pb.Resource(name="Wire"), transaction_id="nope", resolution=pb.COMMIT
        ),
        metadata=META,
        timeout=10,
    )
    assert end.status.code == pb.INVALID_TRANSACTION_ID
    ack = s.AckMessage(
        spb.AckMessageRequest(
            group=pb.Resource(name="G"),
            topic=pb.Resource(name="Wire"),
            entries=[spb.AckMessageEntry(message_id="x", receipt_handle="not a handle")],
        ),
        metadata=META,
        timeout=10,
    )
    assert ack.status.code == pb.INVALID_RECEIPT_HANDLE
    short = spb.ReceiveMessageRequest(
        group=pb.Resource(name="G"),
        message_queue=pb.MessageQueue(topic=pb.Resource(name="Wire"), id=-1),
        invisible_duration=duration_pb2.Duration(nanos=10_000_000),
    )
    [answer] = list(s.ReceiveMessage(short, metadata=META, timeout=10))
    assert answer.status.code == pb.ILLEGAL_INVISIBLE_TIME
    with pytest.raises(grpc.RpcError) as raised:
        s.GetOffset(spb.GetOffsetRequest(group=pb.Resource(name="G")), metadata=META, timeout=10)
    assert raised.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_a_route_names_every_masters_grpc_endpoint(
    stub: tuple[LocalCluster, MessagingServiceStub], tmp_path: Path
) -> None:
    """Two brokers of one topic: each one's route lists both, each at its own gRPC port."""
    cluster, s = stub
    other = cluster.loop.run(
        start_broker(
            tmp_path / "b", broker_name="broker-b", namesrv_addr=cluster.namesrv_addr, grpc_enable=True
        )
    )
    try:
        for broker in (cluster.broker, other):
            cluster.loop.run(_create(broker, "Both"))
        route = s.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name="Both")), metadata=META, timeout=10)
        assert route.status.code == pb.OK
        seen = {(q.broker.name, q.broker.endpoints.addresses[0].port) for q in route.message_queues}
        assert other.grpc is not None and cluster.broker.grpc is not None
        assert seen == {("broker-a", cluster.broker.grpc.port), ("broker-b", other.grpc.port)}
    finally:
        cluster.loop.run(other.stop())


def test_a_route_follows_a_broker_restarted_on_another_grpc_port(
    stub: tuple[LocalCluster, MessagingServiceStub], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another master restarted at its address with a new gRPC port (grpcListenPort=0, as `up --dledger`
    members with free ports restart): once the learnt port is older than PORT_TTL_S, the route names the
    new one. Learnt once and kept for ever, it routed clients to a closed port (a DLedger member leading
    again after its restart: no 5.x send reached it)."""
    from daemon.grpc import service

    cluster, s = stub

    def start(port: int) -> Broker:
        other = cluster.loop.run(
            start_broker(
                tmp_path / "b",
                broker_name="broker-b",
                namesrv_addr=cluster.namesrv_addr,
                grpc_enable=True,
                listen_port=port,
            )
        )
        cluster.loop.run(_create(other, "Moved"))
        return other

    def port_of_b() -> int:
        route = s.QueryRoute(
            spb.QueryRouteRequest(topic=pb.Resource(name="Moved")), metadata=META, timeout=10
        )
        assert route.status.code == pb.OK
        return {q.broker.name: q.broker.endpoints.addresses[0].port for q in route.message_queues}["broker-b"]

    cluster.loop.run(_create(cluster.broker, "Moved"))
    first = start(0)
    address = first.addr
    try:
        assert first.grpc is not None and port_of_b() == first.grpc.port
    finally:
        cluster.loop.run(first.stop())
    again = start(int(address.rsplit(":", 1)[1]))
    try:
        assert again.addr == address and again.grpc is not None and again.grpc.port != first.grpc.port
        monkeypatch.setattr(service, "PORT_TTL_S", 0.0, raising=False)
        assert port_of_b() == again.grpc.port
    finally:
        cluster.loop.run(again.stop())


async def _create(broker: Broker, topic: str) -> None:
    broker.topics.file.update(TopicConfig(topic, 4, 4))
    await broker.register_all()


def test_a_topics_message_type_is_routed_and_checked_as_5x(
    stub: tuple[LocalCluster, MessagingServiceStub],
) -> None:
    """A topic given a 5.x ``message.type`` (``mqadmin updateTopic -a +message.type=FIFO``) lists that type
    alone in its route, and a send of another type is MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, as the Java
    Proxy's validator answers; a topic without the attribute takes every type (a 4.x topic)."""
    cluster, s = stub

    async def create() -> None:
        fifo = TopicConfig("FifoOnly", 2, 2, extra={"attributes": {"message.type": "FIFO"}})
        cluster.broker.topics.file.update(fifo)
        cluster.broker.topics.file.update(TopicConfig("AnyType", 2, 2))
        await cluster.broker.register_all()

    cluster.loop.run(create())

    def types(topic: str) -> set[int]:
        route = s.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name=topic)), metadata=META, timeout=10)
        assert route.status.code == pb.OK, route.status
        return {t for q in route.message_queues for t in q.accept_message_types}

    assert types("FifoOnly") == {pb.FIFO}
    assert types("AnyType") == {pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION}

    def send(topic: str, **system: object) -> pb.Status:
        sys = pb.SystemProperties(message_id="01" + "0" * 32, **system)  # type: ignore[arg-type]
        msg = pb.Message(topic=pb.Resource(name=topic), body=b"x", system_properties=sys)
        return s.SendMessage(spb.SendMessageRequest(messages=[msg]), metadata=META, timeout=10).status

    refused = send("FifoOnly", message_type=pb.NORMAL)
    assert refused.code == pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    assert (
        refused.message
        == "TopicMessageType validate failed, the expected type is FIFO, but actual type is NORMAL"
    )
    assert send("FifoOnly", message_type=pb.FIFO, message_group="g1").code == pb.OK
    assert send("AnyType", message_type=pb.NORMAL).code == pb.OK
