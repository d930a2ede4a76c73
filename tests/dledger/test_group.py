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

from daemon.config import parse_properties
from daemon.remoting.bodies import ClusterInfo, KVTable
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.errors import RemotingError
from tests.broker.test_ha import pull_all
from tests.support.ali_ons import expected_body, node
from tests.support.broker import BrokerClient
from tests.support.ports import free_port
from tests.support.up import mqctl_up
from tests.support.waiting import wait_until

TOPIC = "Raft"
QUEUES = 4
#: Seconds a group has to elect a new leader and take a send through it, and each wait of a failover:
#: generous, since on a loaded host a member's event loop may not run for seconds (the failure message
#: gives each member's loop lag)
FAILOVER_LIMIT = 120.0


async def master_of(client: RemotingClient, ns: str) -> str | None:
    r = await client.invoke(ns, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO))
    group = ClusterInfo.loads(r.body).broker_addr_table.get("broker-a") if r.body else None
    return group.broker_addrs.get(0) if group is not None else None


async def master_now(client: RemotingClient, ns: str) -> str | None:
    """:func:`master_of`, None when the NameServer does not answer in time (a loaded host)."""
    try:
        return await master_of(client, ns)
    except RemotingError:
        return None


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


async def member_states(client: RemotingClient, data: Path) -> str:
    """Each member's DLedger role, term and leader and its event loop's lag (GET_BROKER_RUNTIME_INFO; a
    stopped member answers nothing): what a failed failover's message shows, so that it explains itself."""
    lines = []
    for conf in sorted(data.glob("store-broker-a-n*/broker.conf")):
        addr = "127.0.0.1:" + parse_properties(conf.read_text())["listenPort"]
        request = RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO)
        try:
            t = KVTable.loads((await client.invoke(addr, request, timeout=2.0)).body).table
        except Exception as exc:  # (a stopped or dead member: said so, the others still shown)
            lines.append(f"{conf.parent.name} {addr}: no answer ({type(exc).__name__})")
            continue
        lines.append(
            f"{conf.parent.name} {addr}: {t.get('dledgerRole')} in term {t.get('dledgerTerm')} (leader "
            f"{t.get('dledgerLeaderId') or '-'}, {t.get('brokerRole')}), event loop lag p99 "
            f"{t.get('loopLagP99')} ms, max {t.get('loopLagMax')} ms"
        )
    return "\n".join(lines)


async def evidence(client: RemotingClient, data: Path) -> str:
    """:func:`member_states` and the end of each member's log."""
    logs = "".join(f.read_text()[-1500:] for f in sorted(data.glob("store-broker-a-n*/broker.log")))
    return f"{await member_states(client, data)}\n{logs}"


async def sends_acked(
    client: RemotingClient, ns: str, data: Path, acked: dict[tuple[int, int], bytes], prefix: str, count: int
) -> str:
    """`count` sends, each through whichever member is the master then, tried again until it is
    acknowledged (a loaded host may move the leadership meanwhile): the master that took the last one."""
    deadline = time.monotonic() + FAILOVER_LIMIT
    master = None
    for i in range(count):
        body = f"{prefix}-{i}".encode()
        while (master := await master_now(client, ns)) is None or not await send_acked(
            BrokerClient(master, client), acked, body, i % QUEUES
        ):
            if time.monotonic() > deadline:
                raise AssertionError(f"{body!r} not acknowledged:\n{await evidence(client, data)}")
            await asyncio.sleep(0.05)
    assert master is not None
    return master


async def stepped_down(client: RemotingClient, data: Path, addr: str, term: int) -> None:
    """Wait until the member at `addr`, which led `term`, has left that term: resumed, a deposed leader
    hears of its successor's term (a vote, a heartbeat, its own heartbeats' answers) and follows it as a
    slave, or may be elected again in a later term; never does it lead on in its own."""
    request = RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO)

    async def left() -> bool:
        try:
            t = KVTable.loads((await client.invoke(addr, request, timeout=2.0)).body).table
        except Exception:  # (still waking up)
            return False
        if int(t["dledgerTerm"]) <= term:
            return False
        return t["dledgerRole"] == "LEADER" or t["brokerRole"] == "SLAVE"

    deadline = time.monotonic() + FAILOVER_LIMIT
    while not await left():
        if time.monotonic() > deadline:
            raise AssertionError(f"{addr} still leads term {term}:\n{await evidence(client, data)}")
        await asyncio.sleep(0.05)


async def failover(data: Path, ns: str, pause: bool = False, ssl: SSLContext | None = None) -> float:
    """Acknowledged sends, SIGKILL of the leader (``pause``: SIGSTOP until another member is the master and
    took a send, then SIGCONT: it must step down), sends through the new one: the seconds from the signal to
    the first SEND_OK through the new leader; every acknowledged message is then read back from the master
    (over TLS with `ssl`). A failure says each member's role, term and event loop lag, and their logs."""
    client = RemotingClient(ssl=ssl)
    try:
        await BrokerClient(await elected_master(client, ns), client).create_topic(TOPIC, QUEUES)
        acked: dict[tuple[int, int], bytes] = {}
        old = await sends_acked(client, ns, data, acked, "before", 40)
        info = await client.invoke(old, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO))
        table = KVTable.loads(info.body).table
        assert table["dledgerRole"] == "LEADER" and table["brokerRole"] == "SYNC_MASTER", table
        term = int(table["dledgerTerm"])

        pid = member_pid(data, old)
        os.kill(pid, signal.SIGSTOP if pause else signal.SIGKILL)
        killed = time.monotonic()
        first_ok = None
        try:
            while first_ok is None and time.monotonic() - killed < FAILOVER_LIMIT:
                new = await master_now(client, ns)
                if new not in (None, old) and await send_acked(BrokerClient(new, client), acked, b"after", 0):
                    first_ok = time.monotonic()
                await asyncio.sleep(0.05)
            # (while the old leader is still stopped: the others' state during the pause)
            why = "" if first_ok is not None else await evidence(client, data)
        finally:
            if pause:
                os.kill(pid, signal.SIGCONT)
        signal_name = "SIGSTOP" if pause else "SIGKILL"
        assert first_ok is not None, (
            f"no SEND_OK through a new leader within {FAILOVER_LIMIT:.0f} s of the {signal_name} of {old}:\n{why}"
        )
        if pause:
            await stepped_down(client, data, old, term)
        master = await sends_acked(client, ns, data, acked, "later", 40)
        held = {}
        on_master = BrokerClient(master, client)
        for q in range(QUEUES):
            for offset, body in enumerate(await pull_all(on_master, TOPIC, q)):
                held[(q, offset)] = body
        lost = {k: v for k, v in acked.items() if held.get(k) != v}
        assert not lost, f"acknowledged but not read back from the master {master}: {sorted(lost)[:10]}"
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
    """SIGSTOP of the leader until the others elected a new leader, which takes brokerId 0 from the old one
    (its NameServer connection still open) by its newer term and takes sends; then SIGCONT: the old leader
    steps down."""
    ns_port = free_port()
    data = tmp_path / "data"
    env = {**cli_env, "MQCTL_HEART_BEAT_TIME_INTERVAL_MS": "500"}
    async with mqctl_up(data, env, ns_port, "--dledger", "3", "--broker-port", "0", "--no-metrics"):
        took = await failover(data, f"127.0.0.1:{ns_port}", pause=True)
    assert took > 0  # the new leader took sends (failover asserts it); how fast: bench_dledger
