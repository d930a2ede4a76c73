"""5.x consumers across a SIGKILL of a real broker process: a recorded history of receives and acks over
gRPC, checked after the restart (nothing acked comes back, nothing received and unacked is lost, and
nothing comes back before its invisibility ran out)."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest

from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode, ResponseCode
from tests.support.bounded import Daemon
from tests.support.broker import BrokerClient
from tests.support.ports import free_port

pytestmark = pytest.mark.slow

from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer  # noqa: E402

from tests.support.grpc5 import message  # noqa: E402

TOPIC = "FiveKill"
INVISIBLE_S = 3


def _start(broker: Daemon, port: int, *, create: bool = False) -> None:
    """Start the broker process; once it answers, create the topic (4 queues) when `create`."""
    broker.start()

    async def ready() -> None:
        client = RemotingClient()
        remoting = BrokerClient(f"127.0.0.1:{port}", client)

        async def up() -> bool:
            try:
                r = await remoting.call(RequestCode.GET_BROKER_RUNTIME_INFO, timeout=1.0)
            except Exception:
                return False
            return r.code == ResponseCode.SUCCESS

        try:
            await broker.serving(up)
            if create:
                await remoting.create_topic(TOPIC, 4)
        finally:
            await client.close()

    asyncio.run(ready())


def test_sigkill_with_received_unacked_messages(tmp_path: Path, cli_env: dict[str, str]) -> None:
    from rocketmq import Producer

    port, grpc_port = free_port(), free_port()
    conf = tmp_path / "broker.conf"
    conf.write_text(
        f"brokerName=broker-a\nbrokerIP1=127.0.0.1\nlistenPort={port}\n"
        f"storePathRootDir={tmp_path / 'store'}\nmappedFileSizeCommitLog=4194304\n"
        "flushConsumerOffsetInterval=60000\nmetricsEnable=false\n"
    )
    argv = [sys.executable, "-m", "mqctl", "broker", "start", "-c", str(conf)]
    cli_env = {**cli_env, "MQCTL_GRPC_LISTEN_PORT": str(grpc_port)}  # (the test env's 0 otherwise)
    config = ClientConfiguration(f"127.0.0.1:{grpc_port}", Credentials(), request_timeout=5)
    broker = Daemon(argv, cli_env, tmp_path / "broker.log")
    _start(broker, port, create=True)
    delivered: list[tuple[bytes, float, str]] = []  # body, when, receipt handle
    acked: set[bytes] = set()
    after: list[tuple[bytes, float]] = []
    bodies = [f"m{i}".encode() for i in range(40)]
    try:
        producer = Producer(config, (TOPIC,))
        producer.startup()
        for body in bodies:
            producer.send(message(TOPIC, body))
        producer.shutdown()
        consumer = SimpleConsumer(config, "FiveKillGroup", {TOPIC: FilterExpression("*")}, await_duration=1)
        consumer.startup()
        bound = time.monotonic() + 60
        while len(delivered) < 24:
            assert time.monotonic() < bound, f"{len(delivered)} of 24 received; broker:\n{broker.log_tail()}"
            for i, m in enumerate(consumer.receive(4, INVISIBLE_S)):
                delivered.append((m.body, time.time(), m.receipt_handle))
                if i % 2 == 0:
                    consumer.ack(m)
                    acked.add(m.body)
        broker.kill()  # offsets and POP state not flushed since the start
        consumer.shutdown()

        _start(broker, port)
        consumer = SimpleConsumer(config, "FiveKillGroup", {TOPIC: FilterExpression("*")}, await_duration=1)
        consumer.startup()
        expected = set(bodies) - acked
        deadline = time.time() + 30
        while time.time() < deadline and not {b for b, _ in after} >= expected:
            for m in consumer.receive(16, 60):
                after.append((m.body, time.time()))
                consumer.ack(m)
        time.sleep(INVISIBLE_S + 1)
        for m in consumer.receive(16, 60):  # anything left would come now
            after.append((m.body, time.time()))
        consumer.shutdown()
    finally:
        broker.stop()

    again = [b for b, _ in after]
    assert not set(again) & acked, sorted(set(again) & acked)  # nothing acked comes back
    assert not expected - set(again), sorted(expected - set(again))  # nothing unacked is lost
    assert len(again) == len(set(again)), "a message delivered twice after the restart"
    lent = {body: handle for body, _, handle in delivered}
    for body, when in after:  # a message lent before the kill comes back only after its invisibility
        if body in lent:
            pop_time, invisible = (int(x) for x in lent[body].split(" ")[1:3])
            assert when * 1000 >= pop_time + invisible - 50, body
