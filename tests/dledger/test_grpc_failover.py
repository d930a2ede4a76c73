"""The official 5.x clients' RPCs across a DLedger failover (``mqctl up --dledger 3``, the leader
SIGKILLed): what one leader answered must hold on the next."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from daemon.config import ALL_KEYS_FIELD, parse_properties
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.errors import RemotingConnectError, RemotingTimeoutError
from tests.broker.test_ha import pull_all
from tests.dledger.test_group import elected_master, master_of, member_pid
from tests.dledger.test_roles import grpc_port, member_addrs, new_master, quick, raft_group, topic_everywhere
from tests.support.bounded import Daemon
from tests.support.broker import BrokerClient
from tests.support.paths import ROOT
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
    assert recall(port, topic, handles[ids[0]]) == pb.OK
    return handles


def recall(port: int, topic: str, handle: str) -> int:
    """RecallMessage on a front: its status code."""
    import grpc

    from tests.support.grpc5 import MessagingServiceStub, pb, spb

    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        request = spb.RecallMessageRequest(topic=pb.Resource(name=topic), recall_handle=handle)
        return int(
            MessagingServiceStub(channel).RecallMessage(request, metadata=META, timeout=10).status.code
        )


async def test_a_recalled_timer_stays_recalled_on_the_next_leader(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """Three timers sent through the leader's gRPC front, the first recalled (OK); the leader SIGKILLed
    before any is due. A recall of the third on a follower's front is refused as a send there is (not
    answered NOT_FOUND: the timer is pending on the leader), on the new leader's it is OK; the new leader
    delivers the second only."""
    from tests.support.grpc5 import pb

    async with raft_group(tmp_path, cli_env) as (data, ns, client):
        old = await elected_master(client, ns)
        await BrokerClient(old, client).create_topic("Rc", 1)
        await topic_everywhere(client, data, "Rc")
        due = int(time.time() * 1000) + 15_000
        ids = ["0" * 32 + "01", "0" * 32 + "02", "0" * 32 + "03"]
        handles = await asyncio.to_thread(send_timers, await grpc_port(client, old), "Rc", due, ids)
        await asyncio.sleep(0.5)  # what the leader holds reaches the followers
        os.kill(member_pid(data, old), signal.SIGKILL)
        new = await new_master(client, ns, old)
        follower = next(a for a in member_addrs(data) if a not in (old, new))
        refused = await asyncio.to_thread(recall, await grpc_port(client, follower), "Rc", handles[ids[2]])
        assert refused == pb.INTERNAL_SERVER_ERROR
        assert await asyncio.to_thread(recall, await grpc_port(client, new), "Rc", handles[ids[2]]) == pb.OK
        on_new = BrokerClient(new, client)

        async def delivered() -> bool:
            return len(await pull_all(on_new, "Rc", 0)) >= 1

        await wait_until(delivered, 40)
        await asyncio.sleep(1.5)  # time for a recalled one, were it to come
        assert await pull_all(on_new, "Rc", 0) == [ids[1].encode()]
        assert time.time() * 1000 >= due


async def leader_and_access(client: RemotingClient, data: Path, ns: str, topic: str) -> tuple[str, Any]:
    """The leader, once `topic` (2 queues) is made and held by every member, and a 5.x client
    configuration whose access point is another member's front (it answers QueryRoute after the
    leader's failure)."""
    from tests.support.grpc5 import ClientConfiguration, Credentials

    leader = await elected_master(client, ns)
    await BrokerClient(leader, client).create_topic(topic, 2)
    await topic_everywhere(client, data, topic)
    access = next(a for a in member_addrs(data) if a != leader)
    port = await grpc_port(client, access)
    return leader, ClientConfiguration(f"127.0.0.1:{port}", Credentials("", ""), request_timeout=3)


async def test_a_half_message_sent_to_a_killed_leader_is_checked_back_by_the_next(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """The official Producer (access point: a follower's front) commits one transaction and rolls one back
    on the leader, and leaves a third open; the leader is SIGKILLed. The new leader's transaction check
    reaches the producer over the Telemetry stream it opened to the new leader at its route refresh; the
    committed and the checked-and-committed messages are each in the topic once, the rolled back one never."""
    from rocketmq import TransactionChecker, TransactionResolution

    from tests.support.grpc5 import Producer, message

    class Checker(TransactionChecker):  # type: ignore[misc]
        def __init__(self) -> None:
            self.asked: list[str] = []

        def check(self, msg: object) -> object:
            self.asked.append(getattr(msg, "message_id", ""))
            return TransactionResolution.COMMIT

    env = {**cli_env, "MQCTL_TRANSACTION_CHECK_INTERVAL": "1000", "MQCTL_TRANSACTION_TIME_OUT": "1000"}
    async with raft_group(tmp_path, env) as (data, ns, client):
        old, config = await leader_and_access(client, data, ns, "Tf")
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


async def test_5x_sends_resume_after_a_paused_leader_and_a_transfer_and_each_ok_is_held_once(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """The official Producer (access point: the member that is neither paused nor transferred to) sends
    throughout: the leader SIGSTOPped until another member leads and took sends, then SIGCONTed; then the
    leadership transferred back to it. Every SEND_OK is held by the final leader exactly once; a failed
    send is held at most once (the client may have retried a send that was stored)."""
    from tests.dledger.test_roles import member_id
    from tests.support.grpc5 import Producer, message

    async with raft_group(tmp_path, cli_env) as (data, ns, client):
        env = {**cli_env, "MQCTL_HEART_BEAT_TIME_INTERVAL_MS": "500", "NAMESRV_ADDR": ns}
        first, config = await leader_and_access(client, data, ns, "Gs")
        producer = Producer(config, ("Gs",))
        await asyncio.to_thread(producer.startup)
        oks: list[str] = []
        failed: list[str] = []
        counter = iter(range(10**6))

        def send() -> bool:
            body = f"m-{next(counter)}"
            try:
                producer.send(message("Gs", body.encode()))
            except Exception:
                failed.append(body)
                return False
            oks.append(body)
            return True

        async def sends_ok(count: int, limit: float) -> float:
            """Send until `count` succeed; the seconds that took."""
            began = time.monotonic()
            done = 0
            while done < count:
                assert time.monotonic() - began < limit, f"{done} of {count} sends acknowledged in {limit} s"
                done += await asyncio.to_thread(send)
            return time.monotonic() - began

        pid = member_pid(data, first)
        try:
            await sends_ok(5, 30)
            os.kill(pid, signal.SIGSTOP)
            try:
                paused = await sends_ok(5, 150)
                second = await new_master(client, ns, first)
            finally:
                os.kill(pid, signal.SIGCONT)
            await sends_ok(5, 30)

            def transfer() -> int:
                argv = [
                    sys.executable,
                    "-m",
                    "mqctl",
                    "broker",
                    "ha",
                    "transfer",
                    "--to",
                    member_id(data, first),
                ]
                return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, timeout=60).returncode

            for _ in range(10):  # the paused member catches up first; a racing election refuses it
                if await asyncio.to_thread(transfer) == 0:
                    break
                await asyncio.sleep(1)
            else:
                raise AssertionError("the leadership never went back to the paused member")
            moved = await sends_ok(5, 150)
            print(f"5.x sends: resumed {paused:.1f} s after the SIGSTOP, {moved:.1f} s after the transfer")
        finally:
            await asyncio.to_thread(producer.shutdown)
        assert await master_of(client, ns) == first != second
        held = await bodies(client, first, "Gs")
        assert sorted(b for b in held if b in oks) == sorted(oks), "a SEND_OK lost or held twice"
        assert set(held) <= set(oks) | set(failed)


async def bodies(client: RemotingClient, addr: str, topic: str) -> list[str]:
    """Every body of `topic`'s queues 0 and 1 on `addr`."""
    on = BrokerClient(addr, client)
    return [b.decode() for q in (0, 1) for b in await pull_all(on, topic, q)]


def receive(port: int, topic: str, group: str, invisible_s: int) -> list[tuple[bytes, str]]:
    """One ReceiveMessage on a front: (body, receipt handle) of each message lent."""
    import grpc

    from tests.support.grpc5 import MessagingServiceStub, pb, spb

    request = spb.ReceiveMessageRequest(
        group=pb.Resource(name=group),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=-1),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
        batch_size=32,
        auto_renew=False,
    )
    request.invisible_duration.FromSeconds(invisible_s)
    request.long_polling_timeout.FromSeconds(2)
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        replies = MessagingServiceStub(channel).ReceiveMessage(request, metadata=META, timeout=10)
        return [
            (r.message.body, r.message.system_properties.receipt_handle)
            for r in replies
            if r.HasField("message")
        ]


def settle(port: int, topic: str, group: str, handle: str) -> tuple[int, int]:
    """AckMessage and ChangeInvisibleDuration of `handle` on a front: their status codes."""
    import grpc

    from tests.support.grpc5 import MessagingServiceStub, pb, spb

    resource, where = pb.Resource(name=group), pb.Resource(name=topic)
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = MessagingServiceStub(channel)
        entry = spb.AckMessageEntry(message_id="0" * 34, receipt_handle=handle)
        acked = stub.AckMessage(
            spb.AckMessageRequest(group=resource, topic=where, entries=[entry]), metadata=META, timeout=10
        )
        change = spb.ChangeInvisibleDurationRequest(group=resource, topic=where, receipt_handle=handle)
        change.invisible_duration.FromSeconds(30)
        changed = stub.ChangeInvisibleDuration(change, metadata=META, timeout=10)
    return acked.status.code, changed.status.code


async def test_a_receipt_handle_of_the_killed_leader_gets_a_clear_answer_from_the_next(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """Two messages received from the leader's front, one acked; the leader SIGKILLed. On the new
    leader's front the old handles are INVALID_RECEIPT_HANDLE for ack and change of invisibility (never
    taken for another lending), and the unacked message is received again."""
    from tests.support.grpc5 import pb

    async with raft_group(tmp_path, cli_env) as (data, ns, client):
        old = await elected_master(client, ns)
        on_old = BrokerClient(old, client)
        await on_old.create_topic("Gr", 1)
        await topic_everywhere(client, data, "Gr")
        for body in (b"acked", b"held"):
            assert (await on_old.send("Gr", body, queue_id=0)).code == 0
        lent = dict(await asyncio.to_thread(receive, await grpc_port(client, old), "Gr", "GR", 60))
        assert sorted(lent) == [b"acked", b"held"]
        codes = await asyncio.to_thread(settle, await grpc_port(client, old), "Gr", "GR", lent[b"acked"])
        assert codes == (pb.OK, pb.INVALID_RECEIPT_HANDLE)  # acked: no longer lent
        await asyncio.sleep(11)  # the followers take the ack watermark (every 10 s)
        os.kill(member_pid(data, old), signal.SIGKILL)
        new_port = await grpc_port(client, await new_master(client, ns, old))
        for body in (b"acked", b"held"):
            codes = await asyncio.to_thread(settle, new_port, "Gr", "GR", lent[body])
            assert codes == (pb.INVALID_RECEIPT_HANDLE, pb.INVALID_RECEIPT_HANDLE), body
        again = []
        deadline = time.monotonic() + 30
        while b"held" not in again:
            assert time.monotonic() < deadline, again
            again += [b for b, _ in await asyncio.to_thread(receive, new_port, "Gr", "GR", 60)]
        print("received again from the new leader:", again)


async def acked_up_to(client: RemotingClient, addr: str, group: str, topic: str) -> list[int]:
    """`group`'s committed offset (the ack watermark) of `topic`'s queues 0 and 1 on the member `addr`."""
    offsets = []
    for queue in (0, 1):
        request = RemotingCommand.request(
            RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic, "queueId": str(queue)}
        )
        response = await client.invoke(addr, request)
        offsets.append(int(response.ext_fields["offset"]) if response.code == ResponseCode.SUCCESS else -1)
    return offsets


def restart_member(data: Path, addr: str, grpc: int, env: dict[str, str]) -> Daemon:
    """The member of broker port `addr` of a `raft_group` started again from its broker.conf, its gRPC
    front on `grpc` (where it served before, as a broker given a fixed `grpcListenPort`, 8081 by default,
    does), with the group's heartbeats: on DLedger's 2 s default, once it led, its followers (who give up
    on a leader after three of their 500 ms beats) ran for election every other second until one won, a
    leader change no test had made."""
    port = addr.rpartition(":")[2]
    conf = next(
        c for c in data.glob("store-broker-a-n*/broker.conf") if f"listenPort={port}\n" in c.read_text()
    )
    argv = [sys.executable, "-m", "mqctl", "broker", "start", "-c", str(conf)]
    env = {**quick(env), "MQCTL_GRPC_LISTEN_PORT": str(grpc)}  # (the test env's 0 otherwise)
    member = Daemon(argv, env, conf.parent / "broker.log")
    member.start()
    return member


async def config_keys(client: RemotingClient, addr: str) -> dict[str, str] | None:
    """Every key of the broker at `addr`'s config, or None while it does not answer."""
    request = RemotingCommand.request(RequestCode.GET_BROKER_CONFIG, {ALL_KEYS_FIELD: "true"})
    try:
        response = await client.invoke(addr, request)
    except (RemotingConnectError, RemotingTimeoutError):
        return None
    return parse_properties(response.body.decode()) if response.code == ResponseCode.SUCCESS else None


async def test_a_restarted_member_beats_as_often_as_its_group(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """A follower SIGKILLed and started again by `restart_member` (with the tests' plain environment) runs
    the 500 ms DLedger heartbeats the rest of its `raft_group` runs, not DLedger's 2 s default."""
    async with raft_group(tmp_path, cli_env) as (data, ns, client):
        leader = await elected_master(client, ns)
        follower = next(a for a in member_addrs(data) if a != leader)
        port = await grpc_port(client, follower)
        os.kill(member_pid(data, follower), signal.SIGKILL)
        back = restart_member(data, follower, port, cli_env)
        try:
            seen: dict[str, dict[str, str] | None] = {}

            async def answering() -> bool:
                seen[follower] = await config_keys(client, follower)
                return seen[follower] is not None

            await wait_until(answering, 60)
            restarted, other = seen[follower], await config_keys(client, leader)
            assert restarted is not None and other is not None
            assert other["heartBeatTimeIntervalMs"] == "500"
            assert restarted["heartBeatTimeIntervalMs"] == other["heartBeatTimeIntervalMs"]
        finally:
            await asyncio.to_thread(back.stop)


async def test_a_5x_push_consumer_consumes_every_message_across_a_leader_kill_and_restart(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """The official PushConsumer (access point: a follower's front) consumes 20 messages from the leader and
    holds the last of each queue in its listener; the leader is SIGKILLed once the followers took the ack
    watermark, then the held two are let go. Their acks go to the dead front, and the client retries them
    (every second, until an answer; its shutdown waits for them) until the member is back on its gRPC port,
    whose answer, INVALID_RECEIPT_HANDLE (it lends nothing now), ends them. Every message is consumed:
    the 18 acked before the kill once, the held two again (from the new leader), the 20 sent after it."""
    from rocketmq import ConsumeResult, FilterExpression, MessageListener, PushConsumer

    from tests.support.grpc5 import pb

    held = {b"before-18", b"before-19"}  # the last of queue 0 and of queue 1: above every acked one
    release = threading.Event()

    class Recorder(MessageListener):  # type: ignore[misc]
        def __init__(self) -> None:
            self.seen: list[bytes] = []
            self.handles: dict[bytes, str] = {}

        def consume(self, msg: Any) -> Any:
            if msg.body in held and msg.body not in self.handles:
                self.handles[msg.body] = msg.receipt_handle
                self.seen.append(msg.body)
                release.wait(120)
                return ConsumeResult.SUCCESS
            self.seen.append(msg.body)
            return ConsumeResult.SUCCESS

    async with raft_group(tmp_path, cli_env) as (data, ns, client):
        old, config = await leader_and_access(client, data, ns, "Gc")
        old_grpc = await grpc_port(client, old)
        listener = Recorder()
        consumer = PushConsumer(config, "GC", listener, {"Gc": FilterExpression("*")})
        await asyncio.to_thread(consumer.startup)
        back: Daemon | None = None
        try:
            on_old = BrokerClient(old, client)
            before = [f"before-{i}".encode() for i in range(20)]
            for i, body in enumerate(before):
                assert (await on_old.send("Gc", body, queue_id=i % 2)).code == 0

            async def watermark_everywhere() -> bool:  # 18 acked: 9 of each queue, the held ones above
                return all([await acked_up_to(client, a, "GC", "Gc") == [9, 9] for a in member_addrs(data)])

            await wait_until(lambda: set(before) <= set(listener.seen), 60)
            await wait_until(watermark_everywhere, 60)
            os.kill(member_pid(data, old), signal.SIGKILL)
            release.set()  # their acks go to the dead front
            on_new = BrokerClient(await new_master(client, ns, old), client)
            after = [f"after-{i}".encode() for i in range(20)]
            for i, body in enumerate(after):
                assert (await on_new.send("Gc", body, queue_id=i % 2)).code == 0

            def all_consumed() -> bool:
                return set(after) <= set(listener.seen) and all(listener.seen.count(b) >= 2 for b in held)

            await wait_until(all_consumed, 120)
            back = restart_member(data, old, old_grpc, cli_env)
            for body in sorted(held):  # what the retried acks are answered
                deadline = time.monotonic() + 60
                while True:
                    try:
                        codes = await asyncio.to_thread(settle, old_grpc, "Gc", "GC", listener.handles[body])
                        break
                    except Exception:  # (not listening yet)
                        assert time.monotonic() < deadline, "the restarted member's front did not answer"
                        await asyncio.sleep(0.5)
                assert codes == (pb.INVALID_RECEIPT_HANDLE, pb.INVALID_RECEIPT_HANDLE), body
            # the retried acks are answered now (once the client's channel reconnects): the shutdown,
            # which waits for them, returns (a daemon thread: were it stuck, the test fails, not hangs)
            stopping = threading.Thread(target=consumer.shutdown, daemon=True)
            stopping.start()
            await asyncio.to_thread(stopping.join, 180)
            assert not stopping.is_alive(), "the PushConsumer's shutdown still waits for its acks"
        finally:
            release.set()
            if back is not None:
                await asyncio.to_thread(back.stop)
        for body in before:
            assert listener.seen.count(body) == (1 if body not in held else 2), body
        print(f"5.x PushConsumer: {len(listener.seen)} consumed of {len(before) + len(after)} sent")
