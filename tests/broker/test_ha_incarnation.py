"""A master's incarnations (docs/replication.md §incarnations): a store with the same identity as the one a
slave's replica mark names is not therefore the store the slave copied. A master back on an older copy of its
own store (a backup, a disk snapshot), or a copy of it seeding another broker, shares its identity and holds
other records past the copy's end: a slave's mark vouches for its records only up to where the master's
incarnation history says the incarnation it copied from ended."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from daemon.broker.ha import HASlave, MasterLog, MasterRecords, TailUnknown, master_log
from daemon.remoting.bodies import KVTable
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.errors import ACL_EXCEPTION
from store.checkpoint import (
    INCARNATIONS_KEPT,
    UNKNOWN_FOLLOWING,
    UNPROVEN_INCARNATION,
    Incarnation,
    keep_master_history,
    read_incarnations,
)
from store.config import StoreConfig
from store.ha import DESCRIBE, encode_frame_header, encode_report
from store.replica_tail import diverged_quarantines
from tests.broker.test_ha import FILE, SMALL, Group, master_and_slave, start_slave
from tests.broker.test_ha_mark import TOPIC, everything, fixed_ports, restart_master, runtime, send_common
from tests.broker.test_ha_retention import served, slave_back, write_then_expire_all_but_the_newest_file
from tests.store.test_replica_mark import rolled_back
from tests.support.broker import replicated, start_broker
from tests.support.cli import RunCli
from tests.support.waiting import wait_until


def set_aside(root: Path) -> list[int]:
    return [q.records for q in diverged_quarantines(str(root))]


async def copied_after(g: Group, tmp_path: Path, fixed: dict[str, Any], n: int, what: str, copy: str) -> None:
    """``n`` records sent and copied by the slave, then the master's store copied to ``copy`` while it is
    stopped (a backup, or a seed for another broker), and the master started again on its own."""
    await send_common(g, n, what)
    await replicated(g.master, g.slave)
    await g.master.stop()
    shutil.copytree(tmp_path / "master", tmp_path / copy)
    await restart_master(g, tmp_path, fixed)


async def restored(g: Group, tmp_path: Path, fixed: dict[str, Any]) -> None:
    """The slave and the master stopped, the master's store replaced by its backup, the master started."""
    await g.slave.stop()
    await g.master.stop()
    shutil.rmtree(tmp_path / "master")
    shutil.copytree(tmp_path / "backup", tmp_path / "master")
    await restart_master(g, tmp_path, fixed)


async def backed_up_then(g: Group, tmp_path: Path, fixed: dict[str, Any], n: int) -> int:
    """20 records copied by the slave and the master's store backed up (``backup``), then ``n`` more
    ("only") copied by the slave: where the backup's log ends."""
    await copied_after(g, tmp_path, fixed, 20, "early", "backup")
    end = g.master.store.max_phy_offset
    await send_common(g, n, "only")
    await replicated(g.master, g.slave)
    return end


async def serves_only_what_the_backup_kept(g: Group, tmp_path: Path, cut: int) -> None:
    """The slave serves the 20 records the master's backup kept and none of the 20 it replaced once restored,
    by pull or by offset (the cut's), and has set nothing aside yet."""
    queues = await everything(g, g.slave)
    assert [len(q) for q in queues] == [5, 5, 5, 5]
    assert all(b.startswith(b"early") for q in queues for b in q)
    viewed = await g.on(g.slave).call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(cut)})
    assert viewed.code != ResponseCode.SUCCESS and "holds back" in (viewed.remark or "")
    assert not set_aside(tmp_path / "slave")


async def set_aside_once_writable(g: Group, tmp_path: Path, blocked: Path) -> None:
    """The path the cut needs writable again: the slave sets the 20 replaced records aside and serves what
    its master does."""
    blocked.rmdir() if blocked.name.endswith(".tmp") else blocked.unlink()
    await send_common(g, 4, "after")
    await replicated(g.master, g.slave, timeout=90.0)
    assert set_aside(tmp_path / "slave") == [20]
    assert await everything(g, g.slave) == await everything(g, g.master)


@pytest.mark.slow
async def test_a_master_back_on_an_older_copy_of_its_store_cannot_have_the_slave_delete_what_only_it_holds(
    tmp_path: Path, cli: RunCli
) -> None:
    """The master's store is copied (a backup) after 20 records; 40 more are acknowledged and copied by its
    slave, then the master is restored from the backup: its identity, a shorter log. It takes sends and
    its retention deletes all but its newest file, past the slave's whole log. The slave's mark names the
    master's store, but not an incarnation the restored master knows: the 40 it alone holds are set aside,
    never deleted as the master's expired records, and the slave then holds and serves what the master does.
    The 20 before them go as the master's expired records: the last incarnation both the master's history
    and the slave's copy of it hold vouches for them (before the copy, they were set aside too)."""
    fixed = fixed_ports()
    async with master_and_slave(tmp_path, **fixed) as g:
        await backed_up_then(g, tmp_path, fixed, 40)
        identity = g.master.store.identity
        before = (await runtime(g, g.master))["haIncarnations"].split(";")
        assert len(before) == 2
        table = await runtime(g, g.slave)
        named = (table["haReplicaIncarnation"], table.get("haReplicaNextIncarnation"))
        assert before[-1].split("@")[0] in named  # (its next, if the slave checked before it began)
        await restored(g, tmp_path, fixed)
        assert g.master.store.identity == identity
        await write_then_expire_all_but_the_newest_file(g, tmp_path / "master", cli)
        await restart_master(g, tmp_path, fixed)
        after = (await runtime(g, g.master))["haIncarnations"].split(";")
        assert after[0] == before[0] and after[1] != before[1] and len(after) == 2

        g.slave = await start_slave(tmp_path / "slave", g.ns_addr)
        await send_common(g, 8, "after")
        await replicated(g.master, g.slave)
        assert set_aside(tmp_path / "slave") == [40]
        assert await served(g, g.slave) == await served(g, g.master)
    salvaged = await asyncio.to_thread(
        cli, "store", "salvage", "--store", str(tmp_path / "slave"), "--out", str(tmp_path / "salvaged.json")
    )
    assert salvaged.code == 0, salvaged.stderr
    bodies = [json.loads(line)["body"] for line in (tmp_path / "salvaged.json").read_text().splitlines()]
    assert sorted(b for b in bodies if b.startswith("only-")) == sorted(f"only-{i}" * 20 for i in range(40))


@pytest.mark.slow
@pytest.mark.parametrize("blocked", ["incarnations.tmp", "quarantine"])
async def test_a_slave_whose_check_fails_after_finding_the_cut_serves_none_of_what_its_restored_master_replaced(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, blocked: str
) -> None:
    """The master is restored from a backup taken after 20 records, while its slave holds 20 more it copied
    (its mark at its end); the restored master takes 10 new records at the offsets the slave holds. The
    slave starts with its master up, but the cut's incarnation cannot be written (a directory where its
    temporary file goes), or its quarantine made (a file where its directory goes), as on a full disk: the
    check found the cut and failed after it. It served all 20 the master replaced, vouched for by its stale
    mark; now it holds them back from the cut (served neither by pull nor by offset, the mark down to the
    cut), and once the path is writable the HA loop sets them aside and the slave serves what the master
    does."""
    fixed = fixed_ports()
    async with master_and_slave(tmp_path, **fixed) as g:
        cut = await backed_up_then(g, tmp_path, fixed, 20)
        await restored(g, tmp_path, fixed)
        await send_common(g, 10, "new")
        path = tmp_path / "slave" / blocked
        path.mkdir() if blocked.endswith(".tmp") else path.write_bytes(b"")

        g.slave = await start_slave(tmp_path / "slave", g.ns_addr)
        assert (g.slave.store.replica_mark, g.slave.store.held_back > 0) == (cut, True)
        await serves_only_what_the_backup_kept(g, tmp_path, cut)
        await wait_until(lambda: sum("task ha-client failed" in r.getMessage() for r in caplog.records) >= 2)
        await serves_only_what_the_backup_kept(g, tmp_path, cut)
        await set_aside_once_writable(g, tmp_path, path)


@pytest.mark.slow
@pytest.mark.parametrize("blocked", ["incarnations.tmp", "quarantine"])
async def test_a_serving_slave_whose_reconnection_check_fails_after_finding_the_cut_holds_back_what_was_replaced(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, blocked: str
) -> None:
    """The same at run time: the slave serves all 40 records it copied (20 before the master's backup, 20
    after) when its master is stopped, restored from the backup and started again, and takes 10 new records
    at the offsets the slave holds. The slave's check before it reconnects finds the cut, but the cut's
    incarnation cannot be written (a directory where its temporary file goes), or its quarantine made (a
    file where its directory goes), as on a full disk. It went on serving the 20 the master replaced, its
    mark at its end vouching for them; now it holds them back from the cut (served neither by pull nor by
    offset, the mark down to the cut), and once the path is writable it sets them aside and serves what the
    master does."""
    fixed = fixed_ports()
    async with master_and_slave(tmp_path, **fixed) as g:
        cut = await backed_up_then(g, tmp_path, fixed, 20)
        assert [len(q) for q in await everything(g, g.slave)] == [10, 10, 10, 10]
        path = tmp_path / "slave" / blocked
        path.mkdir() if blocked.endswith(".tmp") else path.write_bytes(b"")
        await g.master.stop()
        shutil.rmtree(tmp_path / "master")
        shutil.copytree(tmp_path / "backup", tmp_path / "master")
        await restart_master(g, tmp_path, fixed)
        await send_common(g, 10, "new")

        await wait_until(lambda: sum("task ha-client failed" in r.getMessage() for r in caplog.records) >= 2)
        store = g.slave.store
        assert (store.replica_mark, store.held_back) == (cut, store.max_phy_offset - cut)
        await serves_only_what_the_backup_kept(g, tmp_path, cut)
        await set_aside_once_writable(g, tmp_path, path)


@pytest.mark.slow
async def test_a_store_copied_to_seed_another_master_vouches_for_none_of_the_originals_later_records(
    tmp_path: Path, cli: RunCli
) -> None:
    """Master A's store is copied to seed B, so both show A's identity. A goes on (30 more records, copied
    by the slave); B is then made broker-a's master, takes sends and its retention deletes all but its
    newest file. The slave's mark names A's incarnation, which B's history does not hold (B began its own
    at its first write): none of the 30 is taken for B's expired ones, they are set aside; the 20 the copy
    shares are, as the last incarnation both B's history and the slave's copy of A's hold vouches for them.
    `broker ha status` and `store verify` show each store's incarnation."""
    fixed = fixed_ports()
    async with master_and_slave(tmp_path, **fixed) as g:
        await copied_after(g, tmp_path, fixed, 20, "common", "b")
        await send_common(g, 30, "a")
        await replicated(g.master, g.slave)
        await g.slave.stop()
        await g.master.stop()

        conf = {**SMALL, "namesrv_addr": g.ns_addr, **fixed}
        g.master = await start_broker(tmp_path / "b", **conf)
        await write_then_expire_all_but_the_newest_file(g, tmp_path / "b", cli)
        g.master = await start_broker(tmp_path / "b", **conf)
        b_table = await runtime(g, g.master)
        current = b_table["haIncarnations"].split(";")[-1].split("@")[0]

        g.slave = await start_slave(tmp_path / "slave", g.ns_addr)
        await send_common(g, 8, "after")
        await replicated(g.master, g.slave)
        assert set_aside(tmp_path / "slave") == [30]
        assert await served(g, g.slave) == await served(g, g.master)
        # checked before B's first write since its start: B's incarnation then, and the next it announced
        # (which that write began)
        now = (await runtime(g, g.master))["haIncarnations"].split(";")[-1].split("@")[0]
        assert now == b_table["haNextIncarnation"]
        table = await runtime(g, g.slave)
        assert (table["haReplicaIncarnation"], table["haReplicaNextIncarnation"]) == (current, now)
        status = await asyncio.to_thread(cli, "broker", "ha", "status", "-n", g.ns_addr, "-o", "json")
        assert status.code == 0, status.stderr
        rows = {r["broker_id"]: r for r in json.loads(status.stdout)}
        assert (rows[0]["incarnation"], rows[1]["replica_incarnation"]) == (now, current)
    verify = await asyncio.to_thread(cli, "store", "verify", "--store", str(tmp_path / "b"), "-o", "json")
    assert verify.code == 0, verify.stdout
    assert json.loads(verify.stdout)["incarnation"].split("@")[0] == now


async def send_big(g: Group, n: int, what: bytes) -> None:
    for i in range(n):
        assert (await g.on(g.master).send(TOPIC, what * 4000, queue_id=i % 4)).code == 0


@pytest.mark.slow
async def test_a_slave_reaching_past_a_restored_masters_retention_serves_none_of_the_records_it_replaced(
    tmp_path: Path, cli: RunCli
) -> None:
    """The master is restored from a backup taken after 20 records, while its slave holds 230 more (into a
    fourth file). The restored master writes as many files of other records, and its retention deletes all
    but its newest file, which the slave's log reaches. The slave's files below it were the lost records'
    (different ones from what the master wrote at those offsets): the mark vouched for them as the master's,
    so the slave kept and served them; now the restored master's history says the mark's incarnation ended
    at the backup's end, and the slave holds and serves exactly what the master does."""
    fixed = fixed_ports()
    async with master_and_slave(tmp_path, **fixed) as g:
        await copied_after(g, tmp_path, fixed, 20, "early", "backup")
        await send_big(g, 230, b"o")
        await replicated(g.master, g.slave)
        await restored(g, tmp_path, fixed)
        await send_big(g, 200, b"n")
        await g.master.stop()
        done = await asyncio.to_thread(
            cli,
            "store",
            "clean",
            "--store",
            str(tmp_path / "master"),
            "--reserved-hours",
            "0",
            "--execute",
            "--yes",
        )
        assert done.code == 0, done.stderr
        await restart_master(g, tmp_path, fixed)
        first = g.master.store.min_phy_offset
        assert first == 3 * FILE

        g.slave = await start_slave(tmp_path / "slave", g.ns_addr)
        await send_common(g, 8, "after")
        await replicated(g.master, g.slave)
        assert g.slave.store.min_phy_offset == first
        assert await served(g, g.slave) == await served(g, g.master)
        assert not any(b.startswith(b"ooo") for q in await served(g, g.slave) for b in q)
        assert sum(set_aside(tmp_path / "slave")) == 230  # (not the 20 the backup kept)


@pytest.mark.slow
async def test_a_master_whose_log_came_back_shorter_after_a_restart_vouches_for_none_of_what_it_lost(
    tmp_path: Path, cli: RunCli
) -> None:
    """After 20 records and 40 more copied by its slave, the master restarts and takes a send (an
    incarnation begun at its log's end, on disk at once), then loses power within the writeback window: its
    log comes back as it was after 20 records, its incarnations file as written, and its next write begins
    one more below the last one's start. Its retention then deletes past the slave's whole log. A history
    read only up to where it goes back ended the slave's incarnation at the lost restart's start and the
    slave deleted the 40 it alone held as the master's expired records; now the later, lower start ends
    it: they are set aside, never deleted."""
    fixed = fixed_ports()
    async with master_and_slave(tmp_path, **fixed) as g:
        await backed_up_then(g, tmp_path, fixed, 40)
        await g.slave.stop()
        await g.master.stop()
        await restart_master(g, tmp_path, fixed)
        await send_common(g, 1, "lost")
        await g.master.stop()
        history = (tmp_path / "master" / "incarnations").read_bytes()
        shutil.rmtree(tmp_path / "master")
        shutil.copytree(tmp_path / "backup", tmp_path / "master")
        (tmp_path / "master" / "incarnations").write_bytes(history)
        await restart_master(g, tmp_path, fixed)
        await write_then_expire_all_but_the_newest_file(g, tmp_path / "master", cli)
        await restart_master(g, tmp_path, fixed)
        starts = [int(i.split("@")[1]) for i in (await runtime(g, g.master))["haIncarnations"].split(";")]
        assert len(starts) == 4 and starts[-1] < starts[-2]

        await slave_back(g, tmp_path / "slave", 40)


@pytest.mark.slow
async def test_a_master_that_was_a_slave_in_between_vouches_for_none_of_what_its_cut_took(
    tmp_path: Path, cli: RunCli
) -> None:
    """Master P's store seeds R after 20 records; 40 more are copied by slave Q. With P and Q down, R takes
    broker-a's sends; P comes back as R's slave and sets its 40 aside where R wrote others, copies R's,
    and is made the master again, its retention then deleting past Q's whole log. P's history ended the
    incarnation Q copied from only at P's next start as a master, far past the cut, and Q deleted the 40 it
    alone held as P's expired records; now a start in any role, and the cut, end it there: they are set
    aside, never deleted."""
    fixed = fixed_ports()
    async with master_and_slave(tmp_path, **fixed) as g:
        await copied_after(g, tmp_path, fixed, 20, "early", "r")
        await send_common(g, 40, "only")
        await replicated(g.master, g.slave)
        await g.slave.stop()
        await g.master.stop()

        g.master = await start_broker(tmp_path / "r", **{**SMALL, "namesrv_addr": g.ns_addr, **fixed})
        await send_common(g, 30, "r")
        p = await start_slave(tmp_path / "master", g.ns_addr)
        await replicated(g.master, p)
        assert set_aside(tmp_path / "master") == [40]
        await p.stop()
        await g.master.stop()
        await restart_master(g, tmp_path, fixed)
        await write_then_expire_all_but_the_newest_file(g, tmp_path / "master", cli)
        await restart_master(g, tmp_path, fixed)

        await slave_back(g, tmp_path / "slave", 40)


@pytest.mark.slow
async def test_a_slave_whose_mark_an_older_mqctl_wrote_since_vouches_for_none_of_a_restored_masters_records(
    tmp_path: Path, cli: RunCli
) -> None:
    """The master's store is backed up after 20 records; 40 more are copied by its slave, which is then
    started once by an mqctl that knows the mark and not incarnations (a rollback): it writes its
    checkpoint, the mark as it read it. The master is restored from the backup, writes, and its retention
    deletes past the slave's whole log; the slave is back on this version. Its mark no longer proves which
    incarnation its records came from: the 60 are set aside, never deleted. Read as a mark from before
    incarnations, it vouched for them all and the 40 only the slave held went as the master's expired
    records."""
    fixed = fixed_ports()
    async with master_and_slave(tmp_path, **fixed) as g:
        await backed_up_then(g, tmp_path, fixed, 40)
        await restored(g, tmp_path, fixed)
        rolled_back(tmp_path / "slave")
        await write_then_expire_all_but_the_newest_file(g, tmp_path / "master", cli)
        await restart_master(g, tmp_path, fixed)

        await slave_back(g, tmp_path / "slave", 60)


def test_an_unproven_incarnation_vouches_for_nothing_and_a_begun_next_one_as_far_as_it_ran(
    tmp_path: Path,
) -> None:
    """A mark whose incarnation an older mqctl's write left unproven vouches for none of the slave's records
    below the first offset of the master its mark names, nor of a master promoted in its place; neither
    does a promoted master's own unproven one. A mark named with the master's next incarnation vouches as
    far as that one ran once it began; until then the one it names vouches no further than where the next
    one was to begin, as the slave kept it. (No traffic: the decision alone.)"""
    store = SimpleNamespace(
        replica_master="ab" * 16, replica_mark=5000, replica_incarnation="cd" * 16, replica_following=""
    )
    slave = HASlave(StoreConfig(store_path_root_dir=str(tmp_path)), store)  # type: ignore[arg-type]
    own = MasterLog(0, "ab" * 16, incarnations=(Incarnation(bytes.fromhex("cd" * 16), 0),))
    promoted = MasterLog(0, "ef" * 16, "ab" * 16, 3000, replica_incarnation="cd" * 16)
    assert (slave._vouched(own), slave._vouched(promoted)) == (5000, 3000)
    assert slave._vouched(dataclasses.replace(promoted, replica_incarnation=UNPROVEN_INCARNATION.hex())) == 0
    store.replica_incarnation = UNPROVEN_INCARNATION.hex()
    assert (slave._vouched(own), slave._vouched(promoted)) == (0, 0)
    assert slave._vouched(dataclasses.replace(promoted, replica_incarnation=UNPROVEN_INCARNATION.hex())) == 0
    assert slave._vouched(dataclasses.replace(promoted, replica_incarnation="")) == 0

    # named with the master's next one: once begun it vouches as far as it ran, a promoted slave's mark only
    # when named with the same (the same run of the master)
    store.replica_incarnation, store.replica_following = "cd" * 16, "12" * 16
    nxt, later = Incarnation(bytes.fromhex("12" * 16), 4000), Incarnation(bytes(range(16)), 4500)
    assert slave._vouched(dataclasses.replace(own, incarnations=(*own.incarnations, nxt, later))) == 4500
    assert slave._vouched(dataclasses.replace(own, incarnations=(*own.incarnations, later))) == 0
    keep_master_history(str(tmp_path), "ab" * 16, [*own.incarnations, nxt])
    assert slave._vouched(dataclasses.replace(own, incarnations=(*own.incarnations, later))) == 4000
    assert slave._vouched(dataclasses.replace(own, incarnations=(*own.incarnations, nxt))) == 5000
    assert slave._vouched(dataclasses.replace(promoted, replica_following="12" * 16)) == 3000
    assert slave._vouched(dataclasses.replace(promoted, replica_following="34" * 16)) == 0


@pytest.mark.slow
async def test_a_master_restarted_more_often_than_the_incarnations_kept_still_vouches_for_its_slaves_records(
    tmp_path: Path, cli: RunCli
) -> None:
    """The slave copies 40 records and is stopped; the master is restarted more often than a store keeps
    incarnations, writing nothing (a crash loop), then writes and its retention deletes past the slave's
    whole log. A start that writes nothing begins no incarnation: the slave's mark still names one the
    master holds, and its records go as the master's expired ones, none set aside (each start began one
    before: the slave's was pushed out of the history, and all 40 were set aside). Then the master restarts
    with the slave connected, which checks before the master's first write and copies what that write
    begins (the incarnation the master announced as its next): stopped while the master's retention deletes
    past its whole log again, its mark vouches for those records too, none set aside."""
    fixed = fixed_ports()
    async with master_and_slave(tmp_path, **fixed) as g:
        await send_common(g, 40, "old")
        await replicated(g.master, g.slave)
        await g.slave.stop()
        history = (await runtime(g, g.master))["haIncarnations"]
        for _ in range(INCARNATIONS_KEPT + 1):
            await g.master.stop()
            await restart_master(g, tmp_path, fixed)
        assert (await runtime(g, g.master))["haIncarnations"] == history
        await write_then_expire_all_but_the_newest_file(g, tmp_path / "master", cli)
        await restart_master(g, tmp_path, fixed)
        await slave_back(g, tmp_path / "slave", 0)

        await g.master.stop()
        await restart_master(g, tmp_path, fixed)
        following = g.master.store.next_incarnation
        await wait_until(lambda: g.slave.store.replica_following == following)
        await send_common(g, 8, "next")
        await replicated(g.master, g.slave)
        assert g.master.store.incarnations[-1].id.hex() == following
        await g.slave.stop()
        await write_then_expire_all_but_the_newest_file(g, tmp_path / "master", cli)
        await restart_master(g, tmp_path, fixed)
        await slave_back(g, tmp_path / "slave", 0)


def test_the_last_incarnation_both_histories_hold_vouches_up_to_where_either_ended(tmp_path: Path) -> None:
    """A slave keeps its master's history as its check read it. A master back on a copy taken during an
    earlier incarnation than the one the mark names (a restore) still holds that one: the slave's records
    are its own up to where it ended, in the master's history or in the copy, whichever is lower. A copy
    of another store's history, or not of the mark's incarnation, vouches for nothing. (No traffic.)"""
    a, b, c, restart = (
        Incarnation(bytes([n]) * 16, at) for n, at in ((1, 0), (2, 2000), (3, 4000), (4, 3000))
    )
    root = str(tmp_path)
    keep_master_history(root, "ab" * 16, [a, b, c])
    store = SimpleNamespace(
        replica_master="ab" * 16, replica_mark=5000, replica_incarnation=c.id.hex(), replica_following=""
    )
    slave = HASlave(StoreConfig(store_path_root_dir=root), store)  # type: ignore[arg-type]
    restored = MasterLog(0, "ab" * 16, incarnations=(a, b, restart))
    assert slave._vouched(restored) == 3000
    assert slave._vouched(dataclasses.replace(restored, incarnations=(a, restart))) == 2000
    assert slave._vouched(dataclasses.replace(restored, incarnations=(restart,))) == 0
    keep_master_history(root, "ab" * 16, [a, b, c, Incarnation(bytes([5]) * 16, 4500)])
    assert slave._vouched(restored) == 0
    keep_master_history(root, "cd" * 16, [a, b, c])
    assert slave._vouched(restored) == 0


async def test_the_kept_history_ends_the_incarnations_before_the_announced_next_one_where_the_log_ended(
    tmp_path: Path,
) -> None:
    """A master back shorter after a power loss (its history still ends in one begun past its log's end)
    announces its next incarnation, which begins where its log ends at the check: the slave keeps that one
    too, so a later restore that kept only an earlier incarnation vouches for the slave's records no further
    than where the announced one began (those past it were its records, which only the slave may hold). A
    master that does not say where its log ends leaves nothing kept for that run. (No traffic.)"""
    p, a, g = (Incarnation(bytes([n]) * 16, at) for n, at in ((1, 0), (2, 3000), (4, 2500)))
    kept_a = MasterLog(0, "ab" * 16, incarnations=(p, a, Incarnation(bytes([5]) * 16, 4000)))
    following = "03" * 16
    store = SimpleNamespace(
        replica_master="ab" * 16,
        replica_mark=5000,
        replica_incarnation=a.id.hex(),
        replica_following=following,
    )
    slave = HASlave(StoreConfig(store_path_root_dir=str(tmp_path)), store)  # type: ignore[arg-type]
    checked = MasterLog(0, "ab" * 16, end=1000, incarnations=(p, a), following=following)
    restored = MasterLog(0, "ab" * 16, incarnations=(p, g))
    await slave._keep_history(checked)
    assert slave._vouched(restored) == 1000
    assert slave._vouched(kept_a) == 1000  # (a restore that kept the named one, and wrote past its start)
    # checked again once the announced one began: the same history
    store.replica_incarnation, store.replica_following = following, ""
    began = dataclasses.replace(checked, incarnations=(p, a, Incarnation(bytes.fromhex(following), 1000)))
    await slave._keep_history(dataclasses.replace(began, following=""))
    assert slave._vouched(restored) == 1000

    (tmp_path / "replica-incarnations").unlink()
    store.replica_incarnation, store.replica_following = a.id.hex(), following
    await slave._keep_history(dataclasses.replace(checked, end=-1))
    assert slave._vouched(restored) == 0


def slave_of_a_promoted_master(incarnation: str) -> tuple[SimpleNamespace, HASlave, dict[str, str]]:
    """A slave's mark (to 5000, of store ab, copied from ``incarnation``) and the runtime info of the master
    promoted in its place (ef, its own mark to 4800 of ab; no incarnation named)."""
    store = SimpleNamespace(
        replica_master="ab" * 16, replica_mark=5000, replica_incarnation=incarnation, replica_following=""
    )
    table = {
        "haStoreIdentity": "ef" * 16,
        "haReplicaMaster": "ab" * 16,
        "haReplicaMark": "4800",
        "commitLogMaxOffset": "6000",
    }
    return store, HASlave(StoreConfig(), store), table  # type: ignore[arg-type]


def test_a_promoted_master_vouches_for_a_slaves_records_only_when_both_marks_name_one_run_of_their_master() -> (
    None
):
    """A mark names the run of its master its records were copied from by the next incarnation that run
    announced, else the one it ran in. A mark an older mqctl wrote (RM4: the newest incarnation begun,
    which a master that begins its next at its first write had not begun yet) cannot tell which run, nor
    can a promoted master that shows no next one: neither vouches for the other's records. A slave that
    named the master's next one before its first write and a master promoted from a slave that named it
    after hold the same run. (No traffic.)"""
    a, f = "0a" * 16, "0f" * 16
    store, slave, promoted = slave_of_a_promoted_master(a)
    table = {**promoted, "haReplicaIncarnation": a}
    assert slave._vouched(master_log(table, "")) == 0  # (an older mqctl's: which run, it cannot say)
    none = {**table, "haReplicaNextIncarnation": bytes(16).hex()}
    assert slave._vouched(master_log(none, "")) == 4800
    assert slave._vouched(master_log({**table, "haReplicaNextIncarnation": f}, "")) == 0
    store.replica_following = f
    assert (
        slave._vouched(
            master_log({**table, "haReplicaIncarnation": f, "haReplicaNextIncarnation": bytes(16).hex()}, "")
        )
        == 4800
    )
    assert slave._vouched(master_log({**table, "haReplicaNextIncarnation": f}, "")) == 4800
    assert slave._vouched(master_log(none, "")) == 0
    store.replica_following = UNKNOWN_FOLLOWING.hex()  # (the slave's own mark an RM4)
    assert slave._vouched(master_log(none, "")) == 0
    own = MasterLog(0, "ab" * 16, incarnations=(Incarnation(bytes.fromhex(a), 0),))
    assert slave._vouched(own) == 0


async def test_a_copy_of_the_masters_history_that_cannot_be_kept_or_read_leaves_the_check_safe(
    tmp_path: Path,
) -> None:
    """The slave's copy of its master's history cannot be written (a full disk, here a directory where its
    temporary file goes) or read: the check goes on, and the copy kept for another run vouches for none of
    the records of the run the mark names. (No traffic.)"""
    p, a = Incarnation(bytes([1]) * 16, 0), Incarnation(bytes([2]) * 16, 3000)
    store = SimpleNamespace(
        replica_master="ab" * 16, replica_mark=5000, replica_incarnation=a.id.hex(), replica_following=""
    )
    slave = HASlave(StoreConfig(store_path_root_dir=str(tmp_path)), store)  # type: ignore[arg-type]
    restored = MasterLog(0, "ab" * 16, incarnations=(p, Incarnation(bytes([4]) * 16, 2500)))
    await slave._keep_history(MasterLog(0, "ab" * 16, end=5000, incarnations=(p, a)))
    assert slave._vouched(restored) == 2500
    (tmp_path / "replica-incarnations.tmp").mkdir()
    store.replica_following = "03" * 16
    await slave._keep_history(MasterLog(0, "ab" * 16, end=5000, incarnations=(p, a), following="03" * 16))
    assert slave._vouched(restored) == 0
    (tmp_path / "replica-incarnations").unlink()
    (tmp_path / "replica-incarnations").mkdir()
    assert slave._vouched(restored) == 0


def test_a_promoted_master_and_a_slave_of_which_one_mark_names_no_incarnation_vouch_for_nothing() -> None:
    """One mark names an incarnation of the store both copied, the other none (it was written while that
    store showed none: before its upgrade, a restart, which may have been a restore): which run each copied
    cannot be told, so the promoted master vouches for none of the slave's records below its first offset
    (set aside, not served as its own). Both naming none is the time before incarnations: as it was. (No
    traffic.)"""
    a = "0a" * 16
    store, slave, table = slave_of_a_promoted_master(a)
    assert slave._vouched(master_log(table, "")) == 0
    store.replica_incarnation = ""
    assert slave._vouched(master_log(table, "")) == 4800
    named = {**table, "haReplicaIncarnation": a, "haReplicaNextIncarnation": bytes(16).hex()}
    assert slave._vouched(master_log(named, "")) == 0
    store.replica_incarnation = a
    assert slave._vouched(master_log(named, "")) == 4800


def test_a_masters_history_with_a_line_that_does_not_parse_vouches_for_nothing(tmp_path: Path) -> None:
    """The slave copied 5000 bytes from incarnation P; its master's log came back shorter (a power loss) and
    began G at 1000, which ends P there. The history's line of G is damaged: read up to it, P was the
    newest, had not ended, and vouched for all 5000 (the 4000 past G's start, which only the slave holds,
    deleted as the master's expired records). The history reads as none: the slave's records below the
    master's first offset are set aside. (No traffic.)"""
    p, g = Incarnation(bytes([1]) * 16, 0), Incarnation(bytes([7]) * 16, 1000)
    (tmp_path / "incarnations").write_text(f"{p}\n{str(g).replace('@', '#')}\n")
    store = SimpleNamespace(
        replica_master="ab" * 16, replica_mark=5000, replica_incarnation=p.id.hex(), replica_following=""
    )
    slave = HASlave(StoreConfig(store_path_root_dir=str(tmp_path / "slave")), store)  # type: ignore[arg-type]
    assert slave._vouched(MasterLog(0, "ab" * 16, incarnations=(p, g))) == 1000
    master = MasterLog(0, "ab" * 16, incarnations=tuple(read_incarnations(str(tmp_path))))
    assert slave._vouched(master) == 0


def test_a_shown_history_that_does_not_parse_names_an_unproven_incarnation() -> None:
    """A master (a broken peer) shows its identity and a history that does not parse: read as none, the
    slave's mark named no incarnation and vouched for all it counts at the next check (a mark from before
    incarnations). It names the unproven one, which vouches for nothing, until a check names one again.
    (No traffic.)"""
    good = f"{Incarnation(bytes([1]) * 16, 0)}"
    table = {"haStoreIdentity": "ab" * 16, "commitLogMaxOffset": "6000"}
    assert master_log({**table, "haIncarnations": good}, "").incarnation == "01" * 16
    damaged = master_log({**table, "haIncarnations": f"{good};zz@1"}, "")
    assert (damaged.incarnations, damaged.incarnation) == ((), UNPROVEN_INCARNATION.hex())
    assert master_log(table, "").incarnation == ""  # (one that keeps none: an older mqctl's)


IDENTITY, X = "ab" * 16, Incarnation(bytes([1]) * 16, 0)


async def fake_ha_port(
    described: list[tuple[str, str]], reports: list[tuple[bytes, str]], named: list[str]
) -> tuple[asyncio.Server, str]:
    """A master's HA port (and its address) that describes its log as the next of ``described`` (store, run;
    the last from then on) and adds each other connection's report (b"": closed without one) to ``reports``
    with the run the slave's mark named then (the last of ``named``)."""
    described = list(described)

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        report = await reader.read(8)
        if report == encode_report(DESCRIBE):
            identity, run = described.pop(0) if len(described) > 1 else described[0]
            table = {"haStoreIdentity": identity, "haIncarnations": str(X), "haNextIncarnation": run}
            body = KVTable({**table, "commitLogMaxOffset": "0"}).dumps()
            writer.write(encode_frame_header(DESCRIBE, len(body)) + body)
            await writer.drain()
        else:
            reports.append((report, named[-1]))
        writer.close()

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    return server, f"127.0.0.1:{server.sockets[0].getsockname()[1]}"


def fake_slave(tmp_path: Path, broker_port: object, named: list[str], ha_master_address: str = "") -> HASlave:
    """A slave of an empty fake store whose mark names the runs it is told into ``named``, checking against
    ``broker_port`` (a :class:`MasterRecords`' ``log``)."""
    store = SimpleNamespace(
        max_phy_offset=0,
        commit_log_file_size=FILE,
        held_back=0,
        replica_master="",
        replica_incarnation="",
        replica_following="",
        replica_mark=0,
        name_replica_master=lambda identity, incarnation="", following="": named.append(following),
    )
    config = StoreConfig(store_path_root_dir=str(tmp_path), ha_master_address=ha_master_address)
    return HASlave(config, store, broker_port)  # type: ignore[arg-type]


async def reports_of(
    tmp_path: Path, runs: list[str], described: list[tuple[str, str]]
) -> list[tuple[bytes, str]]:
    """A slave of a fake master run until it reports an offset: its broker port names store ``IDENTITY`` and,
    at each question, the next of ``runs`` (the last one from then on); its HA port describes its log as the
    next of ``described`` (see :func:`fake_ha_port`). Each HA connection's report and the run the slave's
    mark named then."""
    runs = list(runs)

    class Port:
        async def log(self) -> MasterLog:
            following = runs.pop(0) if len(runs) > 1 else runs[0]
            return MasterLog(0, IDENTITY, end=0, incarnations=(X,), following=following)

    reports: list[tuple[bytes, str]] = []
    named: list[str] = []
    server, addr = await fake_ha_port(described, reports, named)
    await until_reported(fake_slave(tmp_path, Port(), named, addr), reports, server)
    return reports


async def until_reported(slave: HASlave, reports: list[tuple[bytes, str]], *ports: asyncio.Server) -> None:
    """``slave`` run until it reports an offset to the fake HA port that adds to ``reports``; the fake
    ``ports`` closed."""
    slave.start()
    try:
        await wait_until(lambda: any(report for report, _ in reports))
    finally:
        await slave.stop()
        for port in ports:
            port.close()


async def test_a_master_restarted_between_the_check_and_the_connection_is_checked_again_first(
    tmp_path: Path,
) -> None:
    """The slave's check asks the master's broker port which run it is (the next incarnation it announced);
    the master restarts before the slave's HA connection is made, and announces another. The slave reported
    its offset at once and copied the new run's records under the run its check named; now it asks again
    once connected, closes without a report, and checks again: the report goes to the connection that
    found the run its check named. (A fake master: its broker port's answers, and a port that counts the
    reports.)"""
    runs = ["02" * 16, "03" * 16]  # checked in one run, connected in the next, which it stays
    reports = await reports_of(tmp_path, runs, [(IDENTITY, runs[-1])])
    assert reports[:2] == [(b"", "02" * 16), (bytes(8), "03" * 16)]


async def test_an_ha_port_naming_another_run_than_the_broker_port_is_closed_before_anything_is_copied(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The check asks the master's broker port which store and run it is; the records come from its HA port,
    which another process may answer (a stale registration, an haMasterAddress naming another broker's). The
    slave copied that process's records under the run its check named. Now it asks the HA port to describe
    its log once connected: one naming another store, or another run of the same store, has the connection
    closed without a report, and the slave reports to the one that names the run its check named. One
    WARNING says so, not one at each retry. (A fake master.)"""
    other = [("cd" * 16, "02" * 16), (IDENTITY, "09" * 16), (IDENTITY, "02" * 16)]
    reports = await reports_of(tmp_path, ["02" * 16], other)
    assert reports[:3] == [(b"", "02" * 16), (b"", "02" * 16), (bytes(8), "02" * 16)]
    assert (
        len([r for r in caplog.records if "HA port" in r.getMessage() and "names store" in r.getMessage()])
        == 1
    )


@pytest.mark.parametrize("moved_at", [0, 1], ids=["during-the-check", "once-connected"])
async def test_the_ha_port_asked_for_its_run_is_the_one_the_connection_reached_when_a_registration_moves_it(
    tmp_path: Path, moved_at: int
) -> None:
    """The slave connects to the HA address it held when its check began; a registration's answer (NameServers
    that disagree: a stale registration) moves that address while the check, or the question asked once
    connected, waits for the broker port. The HA port asked to describe its log was the one the slave held
    then, which named the run: the connection to the other, another broker's, was taken for it and reported
    to. Now a check the address moved under starts over, and the HA port asked is the endpoint the
    connection reached: nothing is reported to the other. (Two fake HA ports and a broker port that moves
    the slave's address as it answers.)"""
    named: list[str] = []
    other: list[tuple[bytes, str]] = []
    reports: list[tuple[bytes, str]] = []
    other_port, other_addr = await fake_ha_port([("cd" * 16, "09" * 16)], other, named)
    port, addr = await fake_ha_port([(IDENTITY, "02" * 16)], reports, named)
    asked = 0

    class Port:
        async def log(self) -> MasterLog:
            nonlocal asked
            if asked == moved_at:  # (the first question is the check's, the second the connected one's)
                slave.set_master(addr)
            asked += 1
            return MasterLog(0, IDENTITY, end=0, incarnations=(X,), following="02" * 16)

    slave = fake_slave(tmp_path, Port(), named)
    slave.set_master(other_addr)
    await until_reported(slave, reports, port, other_port)
    assert not any(report for report, _ in other)
    assert reports[-1] == (bytes(8), "02" * 16)


async def snapshot_after(g: Group, tmp_path: Path, n: int, what: str, name: str) -> None:
    """``n`` records sent and copied by the slave, then the running master's store directory copied file by
    file to ``name``, standing in for a disk snapshot taken now (a backup made so, or what a power loss then
    leaves; not a point-in-time image): its log as far as it was written, its incarnations as they were;
    started, it recovers as after a crash."""
    await send_common(g, n, what)
    await replicated(g.master, g.slave)
    shutil.copytree(tmp_path / "master", tmp_path / name)


async def back_shorter(g: Group, tmp_path: Path, fixed: dict[str, Any], image: str) -> int:
    """As after a power loss: the master, stopped (gracefully), starts on the copy ``image``'s log with its
    incarnations as written since (the history is on disk before the log changes); its slave, connected,
    checks before the master's first write (it names the next incarnation announced) and cuts the records
    it no longer holds. Returns where the master's log ends."""
    await g.master.stop()
    history = (tmp_path / "master" / "incarnations").read_bytes()
    shutil.rmtree(tmp_path / "master")
    shutil.copytree(tmp_path / image, tmp_path / "master")
    (tmp_path / "master" / "incarnations").write_bytes(history)
    await restart_master(g, tmp_path, fixed)
    end, announced = g.master.store.max_phy_offset, g.master.store.next_incarnation
    assert announced
    await wait_until(
        lambda: (g.slave.store.replica_following, g.slave.store.max_phy_offset) == (announced, end)
    )
    return end


async def restored_and_expired(g: Group, tmp_path: Path, fixed: dict[str, Any], cli: RunCli) -> None:
    """The slave stopped, the master's store replaced by its backup; the master writes, and its retention
    deletes all but its newest file, past the slave's whole log."""
    await g.slave.stop()
    await g.master.stop()
    shutil.rmtree(tmp_path / "master")
    shutil.copytree(tmp_path / "backup", tmp_path / "master")
    await restart_master(g, tmp_path, fixed)
    await write_then_expire_all_but_the_newest_file(g, tmp_path / "master", cli)
    await restart_master(g, tmp_path, fixed)


async def only_the_slaves_set_aside(g: Group, tmp_path: Path, cli: RunCli, cut: int, only: int) -> None:
    """The slave back with its master up: the ``cut`` records its check took when the master came back
    shorter and the ``only`` records it alone held are in quarantines, none deleted; it holds and serves
    what its master does, and salvage gets every one of those ``only`` back."""
    g.slave = await start_slave(tmp_path / "slave", g.ns_addr)
    await send_common(g, 8, "after")
    await replicated(g.master, g.slave)
    assert set_aside(tmp_path / "slave") == [cut, only]
    assert await served(g, g.slave) == await served(g, g.master)
    await g.slave.stop()
    salvaged = await asyncio.to_thread(
        cli, "store", "salvage", "--store", str(tmp_path / "slave"), "--out", str(tmp_path / "salvaged.json")
    )
    assert salvaged.code == 0, salvaged.stderr
    bodies = [json.loads(line)["body"] for line in (tmp_path / "salvaged.json").read_text().splitlines()]
    assert sorted(b for b in bodies if b.startswith("only-")) == sorted(f"only-{i}" * 20 for i in range(only))


@pytest.mark.slow
async def test_a_restore_of_the_named_incarnations_run_sets_aside_what_the_slave_copied_of_the_next(
    tmp_path: Path, cli: RunCli
) -> None:
    """Brokers in this process, their store directories copied and swapped (no kill): incarnation X writes
    30 records, a backup is taken of it; the master is stopped and started on a copy of its directory taken
    after 10 (as after a power loss; X still its newest) and announces its next, which its slave, cutting
    the 20 it no longer holds, names. 30 records of that next one follow, copied by the slave alone: the
    master is restored from the backup (X's 30) and its retention deletes past the slave's whole log. The
    mark names X, which the restored history holds: it vouched as far as X ran there, past the next one's start,
    and the slave deleted the records only it held as the master's expired ones. X vouches no further than
    where the next one was to begin: they are set aside, never deleted."""
    fixed = fixed_ports()
    async with master_and_slave(tmp_path, **fixed) as g:
        await snapshot_after(g, tmp_path, 10, "x", "short")
        await snapshot_after(g, tmp_path, 20, "x2", "backup")
        await back_shorter(g, tmp_path, fixed, "short")
        await send_common(g, 30, "only")
        await replicated(g.master, g.slave)
        assert len(g.master.store.incarnations) == 2
        await restored_and_expired(g, tmp_path, fixed, cli)
        assert len(g.master.store.incarnations) == 2  # (X, and the one the restored copy began)
        await only_the_slaves_set_aside(g, tmp_path, cli, 20, 30)


@pytest.mark.slow
async def test_a_restore_of_an_earlier_run_after_a_power_loss_sets_aside_what_the_slave_copied_since(
    tmp_path: Path, cli: RunCli
) -> None:
    """Brokers in this process, their store directories copied and swapped (no kill): incarnation P writes
    30 records (a backup after 25), the master restarts and begins A with 10 more, then is stopped and
    started on a copy of its directory taken after P's tenth (as after a power loss), its history still
    ending in A, and announces its next, which its slave, cutting the 30 it no longer holds, names. 30
    records of that one follow, copied by the slave alone: the master is restored from the backup (P's 25) and its
    retention deletes past the slave's whole log. The last incarnation the restored history and the
    slave's copy of it both hold is P, which ended where the announced one began (the master's log end at
    the check): the 30 are set aside, never deleted (the copy that ended P at A's start only vouched for
    those below the backup's end, and the slave deleted them)."""
    fixed = fixed_ports()
    async with master_and_slave(tmp_path, **fixed) as g:
        await snapshot_after(g, tmp_path, 10, "p", "short")
        await snapshot_after(g, tmp_path, 15, "p2", "backup")
        await send_common(g, 5, "p3")
        await g.master.stop()
        await restart_master(g, tmp_path, fixed)
        await send_common(g, 10, "a")
        await replicated(g.master, g.slave)
        assert len(g.master.store.incarnations) == 2
        end = await back_shorter(g, tmp_path, fixed, "short")
        assert end < g.master.store.incarnations[-1].start
        await send_common(g, 30, "only")
        await replicated(g.master, g.slave)
        await restored_and_expired(g, tmp_path, fixed, cli)
        await only_the_slaves_set_aside(g, tmp_path, cli, 30, 30)


def test_a_mark_naming_no_incarnation_vouches_no_further_than_where_the_masters_history_begins() -> None:
    """The slave's mark was written while its master showed no incarnation (before its upgrade); the master
    now shows a history, begun at its log's end at the start that began it: 3000, where a restore (or a
    power loss) had left its log then, below the slave's mark. The mark vouched for all 5000, and the slave
    deleted the 2000 past 3000, which only it held, as the master's expired records; it vouches up to the
    lowest start in the history. A master that shows none: as before. (No traffic.)"""
    store = SimpleNamespace(
        replica_master="ab" * 16, replica_mark=5000, replica_incarnation="", replica_following=""
    )
    slave = HASlave(StoreConfig(), store)  # type: ignore[arg-type]
    upgraded = MasterLog(0, "ab" * 16, incarnations=(Incarnation(bytes([1]) * 16, 3000),))
    assert slave._vouched(upgraded) == 3000
    later = (*upgraded.incarnations, Incarnation(bytes([2]) * 16, 2500), Incarnation(bytes([3]) * 16, 9000))
    assert slave._vouched(dataclasses.replace(upgraded, incarnations=later)) == 2500
    assert slave._vouched(dataclasses.replace(upgraded, incarnations=())) == 5000


def test_a_master_showing_a_history_that_does_not_parse_vouches_for_none_of_a_mark_naming_no_incarnation() -> (
    None
):
    """A mark naming no incarnation (copied while its master showed none) vouches no further than the lowest
    start in the master's history; a history that does not parse holds no start, and vouched for the whole
    mark. Which run such a master is cannot be told: it vouches for nothing. (No traffic.)"""
    store = SimpleNamespace(
        replica_master="ab" * 16, replica_mark=5000, replica_incarnation="", replica_following=""
    )
    slave = HASlave(StoreConfig(), store)  # type: ignore[arg-type]
    table = {"haStoreIdentity": "ab" * 16, "commitLogMaxOffset": "6000", "haIncarnations": "not a history"}
    assert master_log(table, "").damaged
    assert slave._vouched(master_log(table, "")) == 0
    assert slave._vouched(master_log({**table, "haIncarnations": ""}, "")) == 5000


class Answers:
    """A master's broker port that answers every request with ``answer``."""

    def __init__(self, answer: RemotingCommand) -> None:
        self.answer = answer

    async def invoke(self, addr: str, request: RemotingCommand, timeout: float) -> RemotingCommand:
        return self.answer


async def test_a_runtime_info_the_master_fails_to_answer_is_asked_again_not_read_as_naming_no_store() -> None:
    """A master that fails its runtime info (busy, an error) says nothing of its store: read as naming
    none, the mark stopped naming it and vouched for all it counted at the next check. It is asked again;
    an ACL's refusal (the records check admitted) and a 4.9.8 master's answer (no identity) still name no
    store. (No traffic.)"""

    def records(answer: RemotingCommand) -> MasterRecords:
        return MasterRecords(Answers(answer), lambda: "127.0.0.1:1")  # type: ignore[arg-type]

    with pytest.raises(TailUnknown, match="runtime info"):
        await records(RemotingCommand(1, remark="busy")).log()
    refused = await records(RemotingCommand(1, remark=f"{ACL_EXCEPTION}no permission")).log()
    assert (refused.identity, refused.first_offset) == ("", 0)
    rm4 = KVTable({"commitLogMinOffset": "0", "commitLogMaxOffset": "6000"}).dumps()
    shown = await records(RemotingCommand(0, body=rm4)).log()
    assert (shown.identity, shown.end) == ("", 6000)
