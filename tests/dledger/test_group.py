"""A real DLedger group: ``mqctl up --dledger 3`` (three broker processes and a NameServer on loopback).

One leader is elected and registers as brokerId 0; sends are acknowledged; SIGKILL of the leader's process
brings a new leader that registers under the same broker name and takes sends, and every acknowledged
message is read back from it at the (queue, offset) it was acknowledged at.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from ssl import SSLContext

import pytest

from daemon.remoting.bodies import ClusterInfo, KVTable
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from tests.broker.test_ha import pull_all
from tests.support.ali_ons import expected_body, node
from tests.support.broker import BrokerClient
from tests.support.ports import free_port
from tests.support.up import mqctl_up
from tests.support.waiting import wait_until

TOPIC = "Raft"
QUEUES = 4


async def master_of(client: RemotingClient, ns: str) -> str | None:
    r = await client.invoke(ns, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO))
    group = ClusterInfo.loads(r.body).broker_addr_table.get("broker-a") if r.body else None
    return group.broker_addrs.get(0) if group is not None else None


async def elected_master(client: RemotingClient, ns: str) -> str:
    """The group's master once one is elected and registered (a minute at most)."""

    async def elected() -> bool:
        return await master_of(client, ns) is not None

    await wait_until(elected, 60)
    master = await master_of(client, ns)
    assert master is not None
    return master


def member_pid(data: Path, addr: str) -> int:
    """The pid of the member listening on ``addr`` (its broker.conf names the port, its pidfile the pid)."""
    port = addr.rpartition(":")[2]
    for conf in data.glob("store-broker-a-n*/broker.conf"):
        if f"listenPort={port}\n" in conf.read_text():
            return int((conf.parent / "broker.pid").read_text().split()[0])
    raise AssertionError(f"no member listens on {addr}")


async def send_acked(on: BrokerClient, acked: dict[tuple[int, int], bytes], body: bytes, queue: int) -> bool:
    try:
        r = await on.send(TOPIC, body, queue_id=queue)
    except Exception:
        return False
    if r.code != ResponseCode.SUCCESS:
        return False
    acked[(queue, int(r.ext_fields["queueOffset"]))] = body
    return True


async def failover(data: Path, ns: str, pause: float = 0.0, ssl: SSLContext | None = None) -> float:
    """Acknowledged sends, SIGKILL of the leader (``pause``: SIGSTOP for that long, then SIGCONT), sends
    through the new one: the seconds from the signal to the first SEND_OK through the new leader; every
    acknowledged message is then read back from it (over TLS with `ssl`)."""
    client = RemotingClient(ssl=ssl)
    try:
        old = await elected_master(client, ns)
        on_old = BrokerClient(old, client)
        await on_old.create_topic(TOPIC, QUEUES)
        acked: dict[tuple[int, int], bytes] = {}
        for i in range(40):
            assert await send_acked(on_old, acked, f"before-{i}".encode(), i % QUEUES)
        info = await client.invoke(old, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO))
        table = KVTable.loads(info.body).table
        assert table["dledgerRole"] == "LEADER" and table["brokerRole"] == "SYNC_MASTER"

        pid = member_pid(data, old)
        os.kill(pid, signal.SIGSTOP if pause else signal.SIGKILL)
        killed = time.monotonic()
        first_ok = None
        i = 0
        while time.monotonic() - killed < 60:
            if pause and time.monotonic() - killed > pause:
                os.kill(pid, signal.SIGCONT)
                pause = 0.0
            new = await master_of(client, ns)
            if new is not None and new != old:
                if await send_acked(BrokerClient(new, client), acked, f"after-{i}".encode(), i % QUEUES):
                    first_ok = time.monotonic()
                    break
                i += 1
            await asyncio.sleep(0.05)
        if pause:  # the new leader took over (by its newer term) before the pause ended
            os.kill(pid, signal.SIGCONT)
        logs = "".join(f.read_text()[-1500:] for f in sorted(data.glob("store-broker-a-n*/broker.log")))
        assert first_ok is not None, f"no SEND_OK through a new leader within 60 s (master {new}):\n{logs}"
        new = await master_of(client, ns)
        assert new is not None and new != old
        on_new = BrokerClient(new, client)
        for j in range(40):
            assert await send_acked(on_new, acked, f"later-{j}".encode(), j % QUEUES)
        held = {}
        for q in range(QUEUES):
            for offset, body in enumerate(await pull_all(on_new, TOPIC, q)):
                held[(q, offset)] = body
        lost = {k: v for k, v in acked.items() if held.get(k) != v}
        assert not lost, f"acknowledged but not read back from the new leader: {sorted(lost)[:10]}"
        return first_ok - killed
    finally:
        await client.close()


@pytest.mark.slow
async def test_up_dledger_3_elects_takes_sends_and_survives_kill_of_the_leader(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    ns_port = free_port()
    data = tmp_path / "data"
    args = ("--dledger", "3", "--broker-port", "0", "--no-metrics")
    async with mqctl_up(data, cli_env, ns_port, *args) as up:
        assert "DLedger group broker-a" in up.ready
        took = await failover(data, f"127.0.0.1:{ns_port}")
    # 4.9.8's default timings: three missed 2 s heartbeats, then an election (how long: bench_dledger)
    assert took > 0


@pytest.mark.slow
async def test_failover_with_500ms_heartbeats_loses_nothing(tmp_path: Path, cli_env: dict[str, str]) -> None:
    """The timings are broker keys ($MQCTL_ env here); failover time itself is bench_dledger's to measure."""
    ns_port = free_port()
    data = tmp_path / "data"
    env = {**cli_env, "MQCTL_HEART_BEAT_TIME_INTERVAL_MS": "500"}
    async with mqctl_up(data, env, ns_port, "--dledger", "3", "--broker-port", "0", "--no-metrics"):
        took = await failover(data, f"127.0.0.1:{ns_port}")
    assert took > 0


@pytest.mark.slow
@pytest.mark.interop
async def test_ali_ons_sends_to_the_group_through_the_nameserver(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """A real client (ali-ons) finds the elected master by broker name and every send is acknowledged only
    once the group holds it: all read back from the master."""
    ns_port = free_port()
    ns = f"127.0.0.1:{ns_port}"
    async with mqctl_up(
        tmp_path / "data", cli_env, ns_port, "--dledger", "3", "--broker-port", "0", "--no-metrics"
    ):
        client = RemotingClient()
        try:
            master = await elected_master(client, ns)
            on = BrokerClient(master, client)
            await on.create_topic("OnsRaft", QUEUES)
            await asyncio.sleep(1)  # the topic's registration with the NameServer
            sent = (await node("produce", ns, "OnsRaft", "50"))["sent"]
            assert isinstance(sent, list) and {s["status"] for s in sent} == {"SEND_OK"}
            held = [b for q in range(QUEUES) for b in await pull_all(on, "OnsRaft", q)]
            assert sorted(held) == sorted(expected_body(i, 50) for i in range(50))
        finally:
            await client.close()


@pytest.mark.slow
async def test_a_paused_leader_is_replaced_and_steps_down_when_it_resumes(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """SIGSTOP of the leader longer than the election timeout, then SIGCONT: the others elect a new leader,
    which takes brokerId 0 from the old one (its NameServer connection still open) by its newer term."""
    ns_port = free_port()
    data = tmp_path / "data"
    env = {**cli_env, "MQCTL_HEART_BEAT_TIME_INTERVAL_MS": "500"}
    async with mqctl_up(data, env, ns_port, "--dledger", "3", "--broker-port", "0", "--no-metrics"):
        took = await failover(data, f"127.0.0.1:{ns_port}", pause=5.0)
    assert took > 0  # the new leader took sends (failover asserts it, within 60 s); how fast: bench_dledger
