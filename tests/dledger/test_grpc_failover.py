"""The official 5.x clients' RPCs across a DLedger failover (``mqctl up --dledger 3``, the leader
SIGKILLed): what one leader answered must hold on the next."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest

from tests.broker.test_ha import pull_all
from tests.dledger.test_group import elected_master, member_pid
from tests.dledger.test_roles import grpc_port, new_master, raft_group, topic_everywhere
from tests.support.broker import BrokerClient
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

META = (("x-mq-client-id", "failover@1"), ("x-mq-language", "PYTHON"), ("x-mq-client-version", "5.1.2"))


def send_timers(port: int, topic: str, due_ms: int, ids: list[str]) -> dict[str, str]:
    """Timer messages through a front's SendMessage, then RecallMessage of the first; the recall handles."""
    import grpc

    from tests.support.grpc5 import MessagingServiceStub, pb, spb

    handles = {}
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = MessagingServiceStub(channel)
        for message_id in ids:
            props = pb.SystemProperties(message_id=message_id, message_type=pb.DELAY)
            props.delivery_timestamp.FromMilliseconds(due_ms)
            one = pb.Message(topic=pb.Resource(name=topic), body=message_id.encode(), system_properties=props)
            sent = stub.SendMessage(spb.SendMessageRequest(messages=[one]), metadata=META, timeout=10)
            assert sent.status.code == pb.OK, sent.status.message
            handles[message_id] = sent.entries[0].recall_handle
        recall = spb.RecallMessageRequest(topic=pb.Resource(name=topic), recall_handle=handles[ids[0]])
        answer = stub.RecallMessage(recall, metadata=META, timeout=10)
        assert answer.status.code == pb.OK, answer.status.message
    return handles


async def test_a_recalled_timer_stays_recalled_on_the_next_leader(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """Two timers sent through the leader's gRPC front, the first recalled (OK); the leader SIGKILLed
    before either is due: the new leader delivers the second only."""
    async with raft_group(tmp_path, cli_env) as (data, ns, client):
        old = await elected_master(client, ns)
        await BrokerClient(old, client).create_topic("Rc", 1)
        await topic_everywhere(client, data, "Rc")
        port = await grpc_port(client, old)
        due = int(time.time() * 1000) + 8_000
        ids = ["0" * 32 + "01", "0" * 32 + "02"]
        await asyncio.to_thread(send_timers, port, "Rc", due, ids)
        await asyncio.sleep(0.5)  # what the leader holds reaches the followers
        os.kill(member_pid(data, old), signal.SIGKILL)
        on_new = BrokerClient(await new_master(client, ns, old), client)

        async def delivered() -> bool:
            return len(await pull_all(on_new, "Rc", 0)) >= 1

        await wait_until(delivered, 40)
        await asyncio.sleep(1.5)  # time for the recalled one, were it to come
        assert await pull_all(on_new, "Rc", 0) == [ids[1].encode()]
        assert time.time() * 1000 >= due
