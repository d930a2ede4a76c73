"""The replica mark: a slave that restarts while its master is down serves only what it knows to be its
master's (docs/replication.md §the-replica-mark)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from daemon.broker.broker import Broker
from daemon.broker.headers import QueryMessageRequestHeader
from daemon.remoting.bodies import KVTable
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from store.checkpoint import StoreCheckpoint, read_incarnations
from store.record import decode_msg_id, decode_records
from store.replica_tail import diverged_quarantines
from tests.broker.test_ha import SMALL, Group, master_and_slave, pull_all, start_slave
from tests.broker.test_ha_integrity import FakeMaster, slave_of
from tests.support.broker import BrokerClient, replicated, start_broker
from tests.support.cli import RunCli
from tests.support.ports import free_block, free_port
from tests.support.waiting import wait_until

TOPIC = "Mark"


def fixed_ports() -> dict[str, Any]:
    """A master that comes back where its slave knows it."""
    port = free_block(4) + 2
    return {"listen_port": port, "ha_listen_port": port + 1}


async def restart_master(g: Group, tmp_path: Path, fixed: dict[str, Any]) -> None:
    g.master = await start_broker(tmp_path / "master", **{**SMALL, "namesrv_addr": g.ns_addr, **fixed})


async def runtime(g: Group, broker: Broker) -> dict[str, str]:
    info = await g.client.invoke(broker.addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO))
    return KVTable.loads(info.body).table


async def everything(g: Group, broker: Broker) -> list[list[bytes]]:
    return [await pull_all(g.on(broker), TOPIC, q) for q in range(4)]


async def send_common(g: Group, n: int, what: str) -> None:
    for i in range(n):
        assert (await g.on(g.master).send(TOPIC, f"{what}-{i}".encode() * 20, queue_id=i % 4)).code == 0


async def slave_stopped_after(g: Group, n: int) -> int:
    """``n`` sends to the master, replicated, then the slave stopped: its end, where its mark is."""
    await send_common(g, n, "common")
    await replicated(g.master, g.slave)
    mark = g.slave.store.max_phy_offset
    await g.slave.stop()
    return mark


@pytest.mark.slow
async def test_a_slave_that_ran_as_a_master_serves_none_of_its_own_records_while_its_master_is_down(
    tmp_path: Path, cli: RunCli
) -> None:
    """The slave's store ran as a master on its own (30 records its master never had), then restarted as
    a slave while its master was down: it served those 30 by pull, by offset and by key. Now it serves the
    100 it took from its master, holds the 30 back (shown by 'broker ha status'), and once the master is
    back the check sets them aside and the mark moves to the master's end."""
    fixed = fixed_ports()
    async with master_and_slave(tmp_path, **fixed) as g:
        mark = await slave_stopped_after(g, 100)
        alone = await start_broker(tmp_path / "slave", **SMALL)  # the slave's store, a master on its own
        foreign = []
        for i in range(30):
            r = await g.on(alone).send(TOPIC, f"foreign-{i}".encode() * 20, queue_id=i % 4, keys=f"fk{i}")
            assert r.code == 0
            foreign.append(decode_msg_id(r.ext_fields["msgId"])[1])
        await alone.stop()
        await g.master.stop()  # the master is down when the slave comes back

        g.slave = await start_slave(tmp_path / "slave", g.ns_addr)
        on_slave = g.on(g.slave)
        served = await everything(g, g.slave)
        assert not any(b.startswith(b"foreign") for q in served for b in q)
        assert [len(q) for q in served] == [25, 25, 25, 25]
        viewed = await on_slave.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(foreign[0])})
        assert viewed.code != ResponseCode.SUCCESS and "holds back" in (viewed.remark or "")
        ext = QueryMessageRequestHeader(TOPIC, "fk7", 64, 0, 2**62).to_ext_fields()
        queried = await on_slave.call(RequestCode.QUERY_MESSAGE, ext)
        assert not decode_records(queried.body or b"")
        table = await runtime(g, g.slave)
        assert int(table["haReplicaMark"]) == mark
        held = g.slave.store.max_phy_offset - mark
        assert held > 0 and int(table["haHeldBackBytes"]) == held
        status = await asyncio.to_thread(cli, "broker", "ha", "status", "-n", g.ns_addr, "-o", "json")
        assert status.code == 0, status.stderr
        [row] = [r for r in json.loads(status.stdout) if r["broker_id"] == 1]
        assert (row["replica_mark"], row["held_back_bytes"]) == (mark, held)
        checked = await asyncio.to_thread(cli, "check", "ha", env={"NAMESRV_ADDR": g.ns_addr})
        assert f"slave {g.slave.addr} holds back {held} bytes past its replica mark" in checked.stdout

        await restart_master(g, tmp_path, fixed)
        await send_common(g, 8, "later")
        await replicated(g.master, g.slave)
        [quarantine] = diverged_quarantines(str(tmp_path / "slave"))
        assert quarantine.records == 30
        assert await everything(g, g.slave) == await everything(g, g.master)
        table = await runtime(g, g.slave)
        assert int(table["haReplicaMark"]) == g.master.store.max_phy_offset
        assert table["haHeldBackBytes"] == "0"


@pytest.mark.slow
async def test_a_slave_that_always_was_one_serves_everything_with_its_master_down(tmp_path: Path) -> None:
    """Its whole log came from its master's stream: restarted while the master is down, it serves all of
    it (nothing is held back), and the mark it wrote at its stop is its end."""
    fixed = fixed_ports()
    async with master_and_slave(tmp_path, **fixed) as g:
        await send_common(g, 60, "m")
        await replicated(g.master, g.slave)
        want = await everything(g, g.master)
        end = g.master.store.max_phy_offset
        await g.slave.stop()
        await g.master.stop()
        g.slave = await start_slave(tmp_path / "slave", g.ns_addr)
        assert (g.slave.store.replica_mark, g.slave.store.held_back) == (end, 0)
        assert await everything(g, g.slave) == want
        await restart_master(g, tmp_path, fixed)
        await send_common(g, 4, "after")
        await replicated(g.master, g.slave)
        assert not diverged_quarantines(str(tmp_path / "slave"))
        assert g.slave.store.replica_mark == g.master.store.max_phy_offset


@pytest.mark.slow
@pytest.mark.parametrize("blocked", ["incarnations.tmp", "quarantine"])
async def test_a_slave_whose_first_check_fails_starts_serving_up_to_its_mark_and_checks_again_later(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, blocked: str
) -> None:
    """The slave's store ran as a master on its own (10 records its master never had) and comes back as a
    slave with its master up: the check finds the divergent tail, but the incarnation its cut begins cannot
    be written (a directory where its file's temporary copy goes), or the quarantine that keeps the tail
    cannot be made (a file where its directory goes), as on a full disk. The broker stopped its start on
    that error; now it starts, serves the 20 it took from its master and holds the 10 back, and the HA loop
    checks again, beginning the cut's incarnation once however often the quarantine fails; once they can be
    written, it cuts the 10, with the incarnation begun at the cut, and replicates."""
    fixed = fixed_ports()
    async with master_and_slave(tmp_path, **fixed) as g:
        mark = await slave_stopped_after(g, 20)
        alone = await start_broker(tmp_path / "slave", **SMALL)
        for i in range(10):
            assert (await g.on(alone).send(TOPIC, f"foreign-{i}".encode() * 20, queue_id=i % 4)).code == 0
        await alone.stop()
        # (its first write as a master began one there too)
        before = [i.start for i in read_incarnations(str(tmp_path / "slave"))].count(mark)
        path = tmp_path / "slave" / blocked
        path.mkdir() if blocked.endswith(".tmp") else path.write_bytes(b"")

        g.slave = await start_slave(tmp_path / "slave", g.ns_addr)
        assert (g.slave.store.replica_mark, g.slave.store.max_phy_offset > mark) == (mark, True)
        served = await everything(g, g.slave)
        assert [len(q) for q in served] == [5, 5, 5, 5]
        assert all(b.startswith(b"common") for q in served for b in q)
        await wait_until(lambda: sum("task ha-client failed" in r.getMessage() for r in caplog.records) >= 2)
        begun = [i.start for i in g.slave.store.incarnations].count(mark)
        assert begun == before + (0 if blocked.endswith(".tmp") else 1)
        assert not any(path.parent.glob("quarantine/*"))

        path.rmdir() if blocked.endswith(".tmp") else path.unlink()
        await send_common(g, 4, "after")
        await replicated(g.master, g.slave, timeout=90.0)
        [quarantine] = diverged_quarantines(str(tmp_path / "slave"))
        assert quarantine.records == 10
        assert [i.start for i in g.slave.store.incarnations].count(mark) == before + 1
        assert g.slave.store.incarnations[-1].start == mark
        assert await everything(g, g.slave) == await everything(g, g.master)


@pytest.mark.slow
async def test_a_slave_promoted_and_demoted_back_holds_its_own_records_until_checked(tmp_path: Path) -> None:
    """An operator made the slave a master (its records, the old master's, stay matched), it took sends of
    its own, then was made a slave again with its old master down: the sends it took as a master are held
    back, what it replicated is served."""
    fixed = fixed_ports()
    async with master_and_slave(tmp_path, **fixed) as g:
        mark = await slave_stopped_after(g, 40)
        await g.master.stop()
        promoted = await start_broker(tmp_path / "slave", **{**SMALL, "namesrv_addr": g.ns_addr})
        assert promoted.store.replica_mark == mark  # a master's own puts never move it
        for i in range(12):
            assert (await g.on(promoted).send(TOPIC, f"own-{i}".encode(), queue_id=i % 4)).code == 0
        await promoted.stop()
        g.slave = await start_slave(tmp_path / "slave", g.ns_addr)
        assert g.slave.store.replica_mark == mark and g.slave.store.held_back > 0
        served = await everything(g, g.slave)
        assert [len(q) for q in served] == [10, 10, 10, 10]
        assert all(b.startswith(b"common") for q in served for b in q)


@pytest.mark.slow
async def test_a_slave_whose_master_cannot_be_asked_serves_past_its_mark_once_it_reaches_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """With no NameServer to name its master's broker address the check cannot run: a slave opened past
    its mark holds those records back while its master's HA port does not answer, then serves them
    unchecked once it connects (as before the mark), saying so."""
    root = tmp_path / "slave"
    client = RemotingClient()
    try:
        alone = await start_broker(root, **SMALL)
        for i in range(5):
            assert (
                await BrokerClient(alone.addr, client).send(TOPIC, f"own-{i}".encode(), queue_id=0)
            ).code == 0
        await alone.stop()
        port = free_port()
        slave = await slave_of(root, f"127.0.0.1:{port}")  # nobody listens there yet
        try:
            on_slave = BrokerClient(slave.addr, client)
            assert slave.store.held_back > 0
            assert await pull_all(on_slave, TOPIC, 0) == []
            server = await asyncio.start_server(FakeMaster(b"").serve, "127.0.0.1", port)
            try:
                await wait_until(lambda: slave.store.held_back == 0)
                assert len(await pull_all(on_slave, TOPIC, 0)) == 5
                assert slave.store.replica_mark == 0  # nothing was checked
                assert "unchecked" in caplog.text
            finally:
                server.close()
        finally:
            await slave.stop()
    finally:
        await client.close()


@pytest.mark.slow
async def test_a_slave_re_pointed_at_another_broker_names_master_serves_none_of_the_old_ones_records(
    tmp_path: Path,
) -> None:
    """A slave's store re-pointed at another broker name's master (its brokerName changed), restarted while
    that master is down: its mark counted its old master's records, which the new master never had. It
    serves none of them (it served all 8), and once the new master answers the check sets them aside
    and the slave serves the new master's records alone."""
    fixed = fixed_ports()
    async with master_and_slave(tmp_path) as g:
        await slave_stopped_after(g, 8)
        conf = {**SMALL, "namesrv_addr": g.ns_addr, "broker_name": "broker-b", **fixed}
        other = await start_broker(tmp_path / "other", **conf)
        for i in range(4):
            assert (await g.on(other).send(TOPIC, f"other-{i}".encode(), queue_id=i)).code == 0
        await other.stop()
        g.slave = await start_slave(tmp_path / "slave", g.ns_addr, broker_name="broker-b")
        assert g.slave.store.replica_mark == 0
        assert await everything(g, g.slave) == [[], [], [], []]
        other = await start_broker(tmp_path / "other", **conf)
        try:
            await replicated(other, g.slave)
            assert await everything(g, g.slave) == await everything(g, other)
            [quarantine] = diverged_quarantines(str(tmp_path / "slave"))
            assert quarantine.records == 8
        finally:
            await other.stop()


@pytest.mark.slow
async def test_a_consumer_ahead_of_a_held_slave_keeps_its_offset_and_reads_on_once_released(
    tmp_path: Path,
) -> None:
    """A consumer that pulled from the master to offset 10, then pulls from a slave that holds back all
    past offset 4 (its mark a crash behind), is told to pull again at its own offset (4.9.8's slave answer,
    never an offset moved), and once the master is back reads on from there."""
    fixed = fixed_ports()
    async with master_and_slave(tmp_path, **fixed) as g:
        await send_common(g, 48, "c")
        await replicated(g.master, g.slave)
        unit = g.slave.store._cqs[(TOPIC, 0)].get_unit(4)
        assert unit is not None
        await g.slave.stop()
        checkpoint = StoreCheckpoint(str(tmp_path / "slave" / "checkpoint"))
        checkpoint.replica_mark = unit[0]  # (the records of queue 0 from its fifth on are past it)
        checkpoint.flush()
        checkpoint.close()
        await g.master.stop()
        g.slave = await start_slave(tmp_path / "slave", g.ns_addr)
        on_slave = g.on(g.slave)
        assert g.slave.store.get_max_offset(TOPIC, 0) == 4
        for offset in (4, 5, 10):
            r = await on_slave.pull("G", TOPIC, 0, offset)
            assert r.code in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY), r.remark
            assert int(r.ext_fields["nextBeginOffset"]) == offset
        await restart_master(g, tmp_path, fixed)
        await wait_until(lambda: g.slave is not None and g.slave.store.held_back == 0)
        await wait_until(lambda: g.slave.store.get_max_offset(TOPIC, 0) == 12)
        r = await on_slave.pull("G", TOPIC, 0, 10)
        assert [m.body for m in decode_records(r.body)] == [b"c-40" * 20, b"c-44" * 20]
