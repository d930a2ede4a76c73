"""A slave that comes back after its master's retention deleted the files holding its last records
(docs/replication.md §behind-its-masters-retention)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from daemon.broker.broker import Broker
from daemon.remoting.codes import ResponseCode
from store.engine import DefaultMessageStore
from store.ha import encode_report
from store.record import decode_records
from store.replica_tail import diverged_quarantines
from tests.broker.test_ha import SMALL, Group, commitlog_files, master_and_slave, start_slave
from tests.broker.test_ha_mark import TOPIC, fixed_ports, restart_master, runtime, send_common
from tests.support.broker import replicated, start_broker
from tests.support.cli import RunCli


async def served(g: Group, broker: Broker) -> list[list[bytes]]:
    """Every queue of the topic as a consumer reads it from its first retained offset."""
    store = broker.store
    assert isinstance(store, DefaultMessageStore)
    out = []
    for q in range(4):
        bodies: list[bytes] = []
        offset = store.get_min_offset(TOPIC, q)
        while True:
            r = await g.on(broker).pull("G", TOPIC, q, offset, max_nums=32)
            if r.code != ResponseCode.SUCCESS:
                break
            bodies += [m.body for m in decode_records(r.body)]
            offset = int(r.ext_fields["nextBeginOffset"])
        out.append(bodies)
    return out


async def write_then_expire_all_but_the_newest_file(g: Group, root: Path, cli: RunCli) -> None:
    """The master writes past several files; then the operator's retention on it, stopped: every file but
    the newest expired, deleted by 'mqctl store clean --execute' of its store (``root``)."""
    for i in range(300):
        assert (await g.on(g.master).send(TOPIC, b"n" * 4000, queue_id=i % 4)).code == 0
    await g.master.stop()
    done = await asyncio.to_thread(
        cli, "store", "clean", "--store", str(root), "--reserved-hours", "0", "--execute", "--yes"
    )
    assert done.code == 0, done.stderr


async def slave_back(g: Group, root: Path, set_aside: int, **overrides: Any) -> None:
    """The slave (its store ``root``) restarted with its master up: once it caught up, ``set_aside``
    records of it are in a quarantine (none: no quarantine), and it holds and serves what its master does."""
    g.slave = await start_slave(root, g.ns_addr, **overrides)
    await send_common(g, 8, "after")
    await replicated(g.master, g.slave)
    quarantines = diverged_quarantines(str(root))
    assert [q.records for q in quarantines] == ([set_aside] if set_aside else [])
    assert commitlog_files(g.slave) == commitlog_files(g.master)
    assert await served(g, g.slave) == await served(g, g.master)
    assert g.slave.store.replica_mark == g.master.store.max_phy_offset


@pytest.mark.slow
async def test_a_slave_behind_its_masters_retention_sets_nothing_aside_and_catches_up(
    tmp_path: Path, cli: RunCli, caplog: pytest.LogCaptureFixture
) -> None:
    """The slave was down while its master wrote several files and the operator's retention deleted all
    but the newest: every record the slave holds is older than the master's first retained offset. Those
    were the master's (its replica mark counts them all): none is set aside as divergent, and the slave
    then holds exactly what the master holds, serves it, and replicates what follows."""
    fixed = fixed_ports()
    async with master_and_slave(tmp_path, **fixed) as g:
        await send_common(g, 40, "old")
        await replicated(g.master, g.slave)
        slave_end = g.slave.store.max_phy_offset
        await g.slave.stop()
        await write_then_expire_all_but_the_newest_file(g, tmp_path / "master", cli)
        await restart_master(g, tmp_path, fixed)
        assert g.master.store.min_phy_offset > slave_end

        await slave_back(g, tmp_path / "slave", 0)
        assert "not its master's" not in caplog.text
        # a slave that does not ask where the master's log starts (4.9.8's) reporting that old end is closed
        # (4.9.8's master sends it heartbeats for ever)
        reader, writer = await asyncio.open_connection("127.0.0.1", g.master.config.ha_listen_port)
        writer.write(encode_report(slave_end))
        async with asyncio.timeout(10):
            assert await reader.read() == b""
        writer.close()
        assert f"reports offset {slave_end}, below this master's first retained offset" in caplog.text
        await g.slave.stop()  # its store, begun again, is a sound one
        verify = await asyncio.to_thread(
            cli, "store", "verify", "--store", str(tmp_path / "slave"), "-o", "json"
        )
        assert verify.code == 0 and json.loads(verify.stdout)["ok"], verify.stdout


@pytest.mark.slow
async def test_records_past_the_mark_below_the_masters_retention_are_set_aside_the_rest_are_not(
    tmp_path: Path, cli: RunCli
) -> None:
    """The slave's store also ran as a master on its own (30 records past its mark) before its master's
    retention deleted the files that could have told whether those were its master's: they are set
    aside (never served), the 40 its mark counted are not, and the slave catches up as above."""
    fixed = fixed_ports()
    async with master_and_slave(tmp_path, **fixed) as g:
        await send_common(g, 40, "old")
        await replicated(g.master, g.slave)
        await g.slave.stop()
        alone = await start_broker(tmp_path / "slave", **SMALL)  # the slave's store, a master on its own
        for i in range(30):
            assert (await g.on(alone).send(TOPIC, f"foreign-{i}".encode(), queue_id=i % 4)).code == 0
        await alone.stop()
        await write_then_expire_all_but_the_newest_file(g, tmp_path / "master", cli)
        await restart_master(g, tmp_path, fixed)

        await slave_back(g, tmp_path / "slave", 30)


@pytest.mark.slow
async def test_a_slave_switched_to_another_master_of_its_name_takes_none_of_the_old_ones_records_for_its(
    tmp_path: Path, cli: RunCli
) -> None:
    """Two masters of broker-a, two stores: the slave copied 40 records of master A; A is gone and B, of
    the same name, took its place and its retention deleted all but its newest file. The slave's mark
    counts A's records: taken as B's they would have been deleted as B's expired ones. The mark names A's
    store, B says its own (runtime info): the 40 are set aside, not B's; the slave then copies B and its
    mark names B's store."""
    fixed = fixed_ports()
    async with master_and_slave(tmp_path, **fixed) as g:
        await send_common(g, 40, "a")
        await replicated(g.master, g.slave)
        a_identity = g.master.store.identity
        assert g.slave.store.replica_master == a_identity
        await g.slave.stop()
        await g.master.stop()
        conf = {**SMALL, "namesrv_addr": g.ns_addr, **fixed}
        g.master = await start_broker(tmp_path / "b", **conf)  # B: broker-a's master, another store
        await write_then_expire_all_but_the_newest_file(g, tmp_path / "b", cli)
        g.master = await start_broker(tmp_path / "b", **conf)
        b_identity = g.master.store.identity
        assert b_identity != a_identity

        await slave_back(g, tmp_path / "slave", 40)
        table = await runtime(g, g.slave)
        assert table["haReplicaMaster"] == b_identity == (await runtime(g, g.master))["haStoreIdentity"]
        status = await asyncio.to_thread(cli, "broker", "ha", "status", "-n", g.ns_addr, "-o", "json")
        assert status.code == 0, status.stderr
        rows = {r["broker_id"]: r for r in json.loads(status.stdout)}
        assert rows[1]["replica_master"] == rows[0]["store_identity"] == b_identity


@pytest.mark.slow
async def test_a_slave_of_a_master_whose_other_slave_was_promoted_in_its_place_keeps_its_records_aside(
    tmp_path: Path, cli: RunCli
) -> None:
    """Master A with slaves S1 and S2; S2 is down when A is lost and S1 is made the master (its store, its
    identity), whose retention then deletes all but its newest file. S2's mark names A's store, not S1's;
    S1's own mark says it held A's records as far, but not that its retention is why its log starts past
    S2's (a slave that began empty starts at its master's last file): S2's 40 are set aside, kept, not
    deleted, and S2 then holds what S1 holds."""
    fixed = fixed_ports()
    async with master_and_slave(tmp_path, **fixed) as g:
        s2 = await start_slave(tmp_path / "s2", g.ns_addr, broker_id=2)
        try:
            await send_common(g, 40, "a")
            await replicated(g.master, g.slave)
            await replicated(g.master, s2)
        finally:
            await s2.stop()
        await g.slave.stop()
        await g.master.stop()
        promoted = {**SMALL, "namesrv_addr": g.ns_addr, **fixed}
        g.master = await start_broker(tmp_path / "slave", **promoted)  # S1 made the master
        await write_then_expire_all_but_the_newest_file(g, tmp_path / "slave", cli)
        g.master = await start_broker(tmp_path / "slave", **promoted)
        assert g.master.store.replica_master != g.master.store.identity

        await slave_back(g, tmp_path / "s2", 40, broker_id=2)
        assert g.slave.store.replica_master == g.master.store.identity
