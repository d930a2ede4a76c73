"""A DLedger group of one, in this process: it elects itself, commits alone, and shows its state in the
runtime info and /metrics. A member of a group of three that cannot reach the others takes no sends."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from daemon.broker.broker import Broker
from daemon.broker.processors.send import stored_fields
from daemon.dledger.machines import Role
from daemon.remoting.bodies import KVTable
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from store.record import decode_msg_id
from tests.broker.test_metrics_server import fetch
from tests.support.broker import BrokerClient, broker_config, start_broker
from tests.support.ports import free_port
from tests.support.waiting import wait_until


def dledger_keys(peers: int = 1) -> dict[str, object]:
    ports = [free_port() for _ in range(peers)]
    return {
        "enable_dleger_commit_log": True,
        "dleger_group": "g",
        "dleger_peers": ";".join(f"n{i}-127.0.0.1:{p}" for i, p in enumerate(ports)),
        "dleger_self_id": "n0",
    }


async def test_a_group_of_one_elects_itself_and_takes_sends(tmp_path: Path) -> None:
    broker = await start_broker(tmp_path / "store", **dledger_keys())
    client = RemotingClient()
    try:
        assert broker.dledger is not None
        await wait_until(lambda: broker.config.broker_id == 0 and broker.config.broker_role == "SYNC_MASTER")
        on = BrokerClient(broker.addr, client)
        await on.create_topic("One", 1)
        for i in range(5):
            r = await on.send("One", f"m{i}".encode(), queue_id=0)
            assert r.code == ResponseCode.SUCCESS and r.ext_fields["queueOffset"] == str(i)
        info = await client.invoke(broker.addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO))
        table = KVTable.loads(info.body).table
        assert (
            table["dledgerRole"] == "LEADER" and table["dledgerCommittedIndex"] == table["dledgerLastIndex"]
        )
        assert broker.metrics_port is not None
        text = await asyncio.to_thread(fetch, broker.metrics_port, "/metrics")
        assert (
            'rocketmq_dledger_role{broker="broker-a",cluster="DefaultCluster",role="LEADER",self_id="n0"} 1.0'
            in text
        )
        assert (
            'by="peer_gate",cluster="DefaultCluster"} 0.0' in text
        )  # rocketmq_dledger_channel_refused_total
    finally:
        await client.close()
        await broker.stop()


async def test_a_committed_send_is_answered_and_counted_as_a_single_brokers_put(tmp_path: Path) -> None:
    """The SEND_OK frame a leader makes at the append is the one a single broker's send answers with (its
    stored fields, no remark), and the put is counted when the quorum's answer comes, once."""
    broker = await start_broker(tmp_path / "store", **dledger_keys())
    client = RemotingClient()
    try:
        await wait_until(lambda: broker.config.broker_id == 0 and broker.config.broker_role == "SYNC_MASTER")
        on = BrokerClient(broker.addr, client)
        await on.create_topic("Ok", 2)
        before, offsets = broker.stats.put_size_total, []
        for i in range(4):
            r = await on.send("Ok", b"x" * (i + 1), queue_id=1)
            assert r.code == ResponseCode.SUCCESS and r.remark is None
            assert r.ext_fields == stored_fields(r.ext_fields["msgId"], 1, i)
            offsets.append(decode_msg_id(r.ext_fields["msgId"])[1])
        assert offsets == sorted(set(offsets))  # each answer names its own record
        nums, sizes, _ = broker.stats.put_items("Ok")
        assert (nums.value, nums.times, sizes.times) == (4, 4, 4)
        assert broker.stats.put_size_total > before and broker.stats.put_failed == 0
    finally:
        await client.close()
        await broker.stop()


async def test_a_member_alone_of_three_stays_a_slave_and_refuses_sends(tmp_path: Path) -> None:
    broker = await start_broker(tmp_path / "store", **dledger_keys(3))
    client = RemotingClient()
    try:
        assert broker.dledger is not None
        await asyncio.sleep(1.5)  # votes go unanswered
        assert broker.dledger.node.m.role is Role.CANDIDATE
        assert broker.config.broker_role == "SLAVE" and broker.config.broker_id == 1
        r = await BrokerClient(broker.addr, client).send("Alone", b"x", queue_id=0)
        assert r.code == ResponseCode.SERVICE_NOT_AVAILABLE
        assert broker.dledger.log.last_index == -1  # nothing entered the log
    finally:
        await client.close()
        await broker.stop()


async def test_a_dispatch_that_failed_is_retried_without_another_commit(tmp_path: Path) -> None:
    """The dispatch after a commit raises (a full disk, say) and no send follows: the committed message is
    served once a retry succeeds, not only after the next commit."""
    broker = await start_broker(tmp_path / "store", heart_beat_time_interval_ms=100, **dledger_keys())
    client = RemotingClient()
    try:
        group = broker.dledger
        assert group is not None
        await wait_until(lambda: broker.config.broker_id == 0 and broker.config.broker_role == "SYNC_MASTER")
        on = BrokerClient(broker.addr, client)
        await on.create_topic("Retry", 1)
        dispatch, failures = group.on_commit, [OSError(28, "No space left on device")] * 2

        def failing() -> object:
            if failures:
                raise failures.pop()
            return dispatch()

        group.on_commit = failing
        r = await on.send("Retry", b"kept", queue_id=0)
        assert r.code == ResponseCode.SUCCESS
        await wait_until(lambda: broker.store.get_max_offset("Retry", 0) == 1, 10)
        assert not failures
    finally:
        await client.close()
        await broker.stop()


async def test_the_grpc_front_loads_in_a_thread_before_the_member_joins_its_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gRPC front's modules (grpc, the v2 messages) load off the event loop, before the DLedger member
    starts: imported on the loop once the member answered its group, their CPU (seconds of it on a busy
    host) kept a just-elected leader from its heartbeats, or followers from noticing a leader gone."""
    import daemon.grpc

    found = daemon.grpc.missing
    calls: list[tuple[bool, bool]] = []

    def missing() -> str | None:
        calls.append((threading.current_thread() is threading.main_thread(), broker.dledger is not None))
        return found()

    monkeypatch.setattr(daemon.grpc, "missing", missing)
    broker = Broker(broker_config(tmp_path / "store", grpc_enable=True, **dledger_keys()))
    await broker.start()
    try:
        assert calls == [(False, False)]  # (in a worker thread; no member yet)
        assert broker.grpc is not None and broker.grpc.port > 0
    finally:
        await broker.stop()
