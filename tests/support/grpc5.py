"""The official RocketMQ 5.x Python client (PyPI `rocketmq-python-client`) against our broker's gRPC front.

The client is synchronous (it runs its own event loop in a thread); the broker runs in the test
process's daemon loop (tests.daemons), so a test drives the client directly and looks at the store.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from mqctl.services.grpc5_client import guard_callbacks
from store.message import StoredMessage
from store.models import TopicConfig
from tests.daemons import LocalCluster, local_cluster

rocketmq = pytest.importorskip(
    "rocketmq", reason="the grpc extra is not installed (pip install -e '.[grpc]')"
)
if not hasattr(rocketmq, "SimpleConsumer"):  # the C++ client's module of the same name
    pytest.skip("the `rocketmq` module here is not the 5.x client", allow_module_level=True)

import rocketmq.grpc_protocol.definition_pb2 as pb  # noqa: E402
import rocketmq.grpc_protocol.service_pb2 as spb  # noqa: E402
from rocketmq import ClientConfiguration, Credentials, Message, Producer  # noqa: E402
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub  # noqa: E402
from rocketmq.v5.client.connection.rpc_client import RpcClient  # noqa: E402
from rocketmq.v5.util.misc import Misc  # noqa: E402

__all__ = [
    "MessagingServiceStub",
    "RpcClient",
    "pb",
    "spb",
]  # the raw v2 API (tests on the wire), the RPC class

# The client learns its own address by "connecting" a UDP socket to a public address (no packet is sent):
# here it is told, so nothing looks beyond this machine.
Misc._Misc__LOCAL_IP = "127.0.0.1"  # type: ignore[attr-defined]
# A route reply that came before the client added its callback was handled in the test's thread, where
# the client cannot open its Telemetry stream (mqctl.services.grpc5_client says how): as `bench --grpc`.
guard_callbacks(RpcClient)


@contextmanager
def grpc_cluster(root: Path, **overrides: Any) -> Iterator[LocalCluster]:
    """A NameServer and a broker with its gRPC front on a free port."""
    with local_cluster(root, grpc_enable=True, **overrides) as cluster:
        assert cluster.broker.grpc is not None, "the gRPC front did not start"
        yield cluster


def endpoint(cluster: LocalCluster) -> str:
    return f"127.0.0.1:{cluster.broker.grpc.port if cluster.broker.grpc else 0}"


def client_config(cluster: LocalCluster, ak: str = "", sk: str = "") -> ClientConfiguration:
    return ClientConfiguration(endpoint(cluster), Credentials(ak, sk), request_timeout=5)


def create_topic(cluster: LocalCluster, topic: str, queues: int = 4) -> None:
    async def create() -> None:
        cluster.broker.topics.file.update(TopicConfig(topic, queues, queues))
        await cluster.broker.register_all()  # routes and topic lists know it at once

    cluster.loop.run(create())


def stored(cluster: LocalCluster, topic: str, *, inflate: bool = True) -> list[StoredMessage]:
    """Every message of `topic`, queue by queue, in queue order (`inflate=False`: bodies as stored)."""

    async def read() -> list[StoredMessage]:
        store = cluster.broker.store
        out = []
        config = cluster.broker.topics.get(topic)
        for queue in range(config.read_queue_nums if config else 0):
            offset = 0
            while True:
                result = store.get_messages("test", topic, queue, offset, 32)
                if not result.messages:
                    break
                out.extend(m.message if inflate else m.stored for m in result.messages)
                offset = result.next_begin_offset
        return out

    return cluster.loop.run(read())


def wait_for(what: Callable[[], Any], timeout: float = 20.0, step: float = 0.1) -> Any:
    """`what()` once it is truthy; fails the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = what()
        if value:
            return value
        assert time.monotonic() < deadline, f"not within {timeout}s: {what}"
        time.sleep(step)


@contextmanager
def producer(cluster: LocalCluster, topics: tuple[str, ...], **options: Any) -> Iterator[Producer]:
    """A started official Producer (`checker=`, `ak=`/`sk=` for ACL); shut down after the block."""
    ak, sk = options.pop("ak", ""), options.pop("sk", "")
    made = Producer(client_config(cluster, ak, sk), topics, **options)
    made.startup()
    try:
        yield made
    finally:
        made.shutdown()


def message(topic: str, body: bytes, **fields: Any) -> Message:
    """A 5.x Message; `fields` are its attributes (tag, keys, message_group, delivery_timestamp...)."""
    made = Message()
    made.topic = topic
    made.body = body
    for name, value in fields.items():
        if name == "keys":
            made.keys = value
        else:
            setattr(made, name, value)
    return made


def create_group(
    cluster: LocalCluster, group: str, *, retry_max_times: int = 16, orderly: bool = False
) -> None:
    """A subscription group; `orderly` is 5.x's consumeMessageOrderly (a PushConsumer then consumes FIFO)."""
    from store.models import SubscriptionGroupConfig

    extra = {"consumeMessageOrderly": True} if orderly else {}

    async def create() -> None:
        cluster.broker.groups.put(
            SubscriptionGroupConfig(group, retry_max_times=retry_max_times, extra=extra)
        )

    cluster.loop.run(create())


@contextmanager
def simple_consumer(
    cluster: LocalCluster, group: str, topic: str, *, listed: bool = False, **options: Any
) -> Iterator[Any]:
    """A started official SimpleConsumer of `topic` (every tag), `await_duration` 2 s unless given.
    `listed`: once the broker lists it in `group` too (its startup returns before its Settings, sent on
    its Telemetry stream, reach the broker: what the broker's connection listings show)."""
    from rocketmq import FilterExpression, SimpleConsumer

    ak, sk = options.pop("ak", ""), options.pop("sk", "")
    options.setdefault("await_duration", 2)
    made = SimpleConsumer(client_config(cluster, ak, sk), group, {topic: FilterExpression("*")}, **options)
    made.startup()
    try:
        if listed:
            wait_for(lambda: joined(cluster, group, made.client_id))
        yield made
    finally:
        made.shutdown()


def joined(cluster: LocalCluster, group: str, client_id: str, *, producer: bool = False) -> bool:
    """Whether the broker lists the client `client_id` among `group`'s consumers (`producer`: among the
    producers of `group`, a topic's name for a 5.x producer), read on its loop."""

    async def listed() -> bool:
        if producer:
            return client_id in {c.client_id for c in cluster.broker.producers.groups.get(group, {}).values()}
        info = cluster.broker.consumers.get(group)
        return info is not None and client_id in info.client_ids()

    return cluster.loop.run(listed())


def receive_all(consumer: Any, count: int, *, invisible: int = 30, timeout: float = 30.0) -> list[Any]:
    """Receive until `count` messages came (no ack); fails after `timeout`."""
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(got) < count:
        assert time.monotonic() < deadline, f"received {len(got)} of {count}"
        got.extend(consumer.receive(32, invisible) or [])
    return got
