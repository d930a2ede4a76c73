"""The official 5.x clients' RPCs across a DLedger failover (``mqctl up --dledger 3``, the leader
SIGKILLed): what one leader answered must hold on the next."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest

from daemon.remoting.client import RemotingClient
from tests.broker.test_ha import pull_all
from tests.dledger.test_group import elected_master, member_pid
from tests.dledger.test_roles import grpc_port, member_addrs, new_master, raft_group, topic_everywhere
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


async def test_a_half_message_sent_to_a_killed_leader_is_checked_back_by_the_next(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """The official Producer (access point: a follower's front) commits one transaction and rolls one back
    on the leader, and leaves a third open; the leader is SIGKILLed. The new leader's transaction check
    reaches the producer over the Telemetry stream it opened to the new leader at its route refresh; the
    committed and the checked-and-committed messages are each in the topic once, the rolled back one never."""
    from rocketmq import TransactionChecker, TransactionResolution

    from tests.support.grpc5 import ClientConfiguration, Credentials, Producer, message

    class Checker(TransactionChecker):  # type: ignore[misc]
        def __init__(self) -> None:
            self.asked: list[str] = []

        def check(self, msg: object) -> object:
            self.asked.append(getattr(msg, "message_id", ""))
            return TransactionResolution.COMMIT

    env = {**cli_env, "MQCTL_TRANSACTION_CHECK_INTERVAL": "1000", "MQCTL_TRANSACTION_TIME_OUT": "1000"}
    async with raft_group(tmp_path, env) as (data, ns, client):
        old = await elected_master(client, ns)
        await BrokerClient(old, client).create_topic("Tf", 2)
        await topic_everywhere(client, data, "Tf")
        follower = next(a for a in member_addrs(data) if a != old)
        config = ClientConfiguration(
            f"127.0.0.1:{await grpc_port(client, follower)}", Credentials("", ""), request_timeout=3
        )
        checker = Checker()
        producer = Producer(config, ("Tf",), checker=checker)
        await asyncio.to_thread(producer.startup)

        def transact() -> tuple[str, str, str]:
            kept, dropped, open_ = (producer.begin_transaction() for _ in range(3))
            ids = [
                producer.send(message("Tf", body), transaction=tx).message_id
                for body, tx in ((b"commit", kept), (b"rollback", dropped), (b"open", open_))
            ]
            kept.commit()
            dropped.rollback()
            return ids[0], ids[1], ids[2]

        try:
            committed, rolled_back, orphan = await asyncio.to_thread(transact)
            await asyncio.sleep(0.5)
            os.kill(member_pid(data, old), signal.SIGKILL)
            new = await new_master(client, ns, old)

            async def checked_and_stored() -> bool:
                return orphan in checker.asked and len(await uniq_keys(client, new, "Tf")) >= 2

            await wait_until(checked_and_stored, 90)
            await asyncio.sleep(2.5)  # another check round, were the commit not kept
            keys = await uniq_keys(client, new, "Tf")
            assert sorted(keys) == sorted([committed, orphan]), (keys, rolled_back)
        finally:
            await asyncio.to_thread(producer.shutdown)


async def uniq_keys(client: RemotingClient, addr: str, topic: str) -> list[str]:
    """The UNIQ_KEY of every message of `topic`'s queues 0 and 1 on `addr`."""
    from daemon.remoting.codes import ResponseCode
    from store.record import decode_records

    on = BrokerClient(addr, client)
    out = []
    for queue in (0, 1):
        offset = 0
        while True:
            r = await on.pull("G", topic, queue, offset, max_nums=32)
            if r.code != ResponseCode.SUCCESS:
                break
            out += [m.properties.get("UNIQ_KEY", "") for m in decode_records(r.body)]
            offset = int(r.ext_fields["nextBeginOffset"])
    return out
