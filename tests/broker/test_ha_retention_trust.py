"""What may make a slave delete its log as its master's expired records
(docs/replication.md §behind-its-masters-retention): only the master whose store the replica mark names.
Anything else that says its log starts past the slave's whole log (a master that shows no store identity,
an impostor a stale or open NameServer lists, a slave promoted in the master's place) has the slave's
records set aside, never deleted: they may be the group's only copy."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from daemon.remoting.bodies import KVTable
from daemon.remoting.codes import RequestCode
from daemon.remoting.command import RemotingCommand
from store.replica_tail import diverged_quarantines
from tests.broker.test_ha import FILE, SMALL, Group, master_and_slave, start_slave
from tests.broker.test_ha_mark import TOPIC, everything, fixed_ports, restart_master, send_common
from tests.support.broker import replicated, start_broker
from tests.support.hostile import Answer, honest_with, hostile
from tests.support.waiting import wait_until


def impostor(
    firsts: list[int], end: int, identity: str = "", incarnations: str = "", ha_addr: str = "127.0.0.1:1"
) -> dict[int, object]:
    """A NameServer and master in one that names itself the slave's master, holds no record the slave asks
    of, and says its log starts at each of ``firsts`` in turn (the last one from then on) and ends at
    ``end``, showing store ``identity`` and its ``incarnations`` (none: as 4.9.8's shows none; anyone may
    read a master's), its HA port at ``ha_addr``."""
    asked = [0]

    def register(request: RemotingCommand, addr: str) -> Answer:
        return RemotingCommand(0, ext_fields={"masterAddr": addr, "haServerAddr": ha_addr})

    def runtime_info(request: RemotingCommand, addr: str) -> Answer:
        first = firsts[min(asked[0], len(firsts) - 1)]
        asked[0] += 1
        table = {"commitLogMinOffset": str(first), "commitLogMaxOffset": str(end)}
        if identity:
            table["haStoreIdentity"] = identity
        if incarnations:
            table["haIncarnations"] = incarnations
        return RemotingCommand(0, body=KVTable(table).dumps())

    def no_record(request: RemotingCommand, addr: str) -> Answer:
        return RemotingCommand(1, remark="no message")

    return {
        RequestCode.REGISTER_BROKER: register,
        RequestCode.GET_BROKER_RUNTIME_INFO: runtime_info,
        RequestCode.VIEW_MESSAGE_BY_ID: no_record,
    }


@contextlib.asynccontextmanager
async def slave_of_impostor(
    tmp_path: Path, firsts: list[int], end: int, *, identity: bool
) -> AsyncIterator[Group]:
    """A slave that copied 40 acknowledged records of its master (the only copy once the master is lost),
    restarted with the :func:`impostor` as its NameServer and master, showing the lost master's store
    identity or none."""
    async with master_and_slave(tmp_path) as g:
        await send_common(g, 40, "only")
        await replicated(g.master, g.slave)
        assert sum(len(q) for q in await everything(g, g.slave)) == 40
        lost = g.master.store.identity
        assert g.slave.store.replica_master == lost
        history = ";".join(map(str, g.master.store.incarnations))
        await g.slave.stop()
        await g.master.stop()
        fake = impostor(firsts, end, lost if identity else "", history if identity else "")
        with hostile(honest_with(fake)) as peer:  # type: ignore[arg-type]
            g.slave = await start_slave(tmp_path / "slave", peer.addr)
            yield g
            await wait_until(lambda: peer.requests.count(RequestCode.GET_BROKER_RUNTIME_INFO) >= 2)
            await g.slave.stop()


def set_aside(tmp_path: Path) -> list[int]:
    return [q.records for q in diverged_quarantines(str(tmp_path / "slave"))]


@pytest.mark.slow
async def test_a_master_showing_no_identity_cannot_make_a_slave_delete_the_only_copy(tmp_path: Path) -> None:
    """The master is lost; the slave holds the only copy of 40 acknowledged records, its mark naming the
    lost master's store. What its NameServer now lists as its master shows no identity and says its log
    starts far past the slave's: the 40 are set aside (a quarantine keeps them), not deleted."""
    async with slave_of_impostor(tmp_path, [64 * FILE], 65 * FILE, identity=False) as g:
        await wait_until(lambda: g.slave.store.min_phy_offset == 64 * FILE)
    assert set_aside(tmp_path) == [40]


@pytest.mark.slow
@pytest.mark.parametrize(("first", "end"), [(64 * FILE + 1, 65 * FILE), (64 * FILE, 63 * FILE)])
async def test_a_first_offset_no_log_can_have_leaves_the_slave_serving_what_it_holds(
    tmp_path: Path, first: int, end: int
) -> None:
    """What the NameServer lists as the master shows the lost master's identity and a first offset that
    no CommitLog has: not a file's start, or past its own end. The slave starts, keeps its 40 records and
    serves them; it does not replicate from that peer. (A first offset not a file's start stopped the
    slave's start with a ValueError.)"""
    async with slave_of_impostor(tmp_path, [first], end, identity=True) as g:
        assert sum(len(q) for q in await everything(g, g.slave)) == 40
        assert g.slave.store.min_phy_offset == 0
    assert set_aside(tmp_path) == []


@pytest.mark.slow
async def test_the_masters_retention_during_the_check_sets_none_of_its_records_aside(tmp_path: Path) -> None:
    """The master's retention deletes the file holding the slave's 40 records while the slave's check is
    comparing them: it said its log starts at 0, answers 'no record' for them, and then that it starts at
    the next file. They are its expired records, not divergent ones: none is set aside (they were, as
    records that differ from the master's, before the check asked again)."""
    async with slave_of_impostor(tmp_path, [0, FILE], FILE, identity=True) as g:
        await wait_until(lambda: g.slave.store.min_phy_offset == FILE)
    assert set_aside(tmp_path) == []


@pytest.mark.slow
async def test_a_master_back_on_a_wiped_store_has_the_slaves_only_copy_set_aside_not_deleted(
    tmp_path: Path,
) -> None:
    """The master's disk is lost and it comes back empty (a new store identity) while its slave holds the
    only copy of 40 acknowledged records; 5 are sent to it before the slave is back. The slave's mark names
    the lost store, so none of the 40 counts as the new one's: they are set aside, kept, never deleted."""
    fixed = fixed_ports()
    async with master_and_slave(tmp_path, **fixed) as g:
        await send_common(g, 40, "only")
        await replicated(g.master, g.slave)
        await g.slave.stop()
        await g.master.stop()
        shutil.rmtree(tmp_path / "master")
        await restart_master(g, tmp_path, fixed)
        await send_common(g, 5, "new")
        g.slave = await start_slave(tmp_path / "slave", g.ns_addr)
        await replicated(g.master, g.slave)
        assert await everything(g, g.slave) == await everything(g, g.master)
    assert set_aside(tmp_path) == [40]


@pytest.mark.slow
async def test_a_slave_promoted_after_it_began_at_its_masters_last_file_cannot_have_the_older_records_deleted(
    tmp_path: Path,
) -> None:
    """Master A and slave S, which copied 40 records and went down. A writes several files; a new slave L
    joins empty, so it begins at A's last file (4.9.8's rule), and is promoted when A is lost. S comes
    back: its mark names A, and L's says it holds A's records, but L's log starts at A's last file because
    it never had the older ones, not because a retention deleted them: S's 40 are the only copy, set aside,
    never deleted."""
    fixed = fixed_ports()
    async with master_and_slave(tmp_path, **fixed) as g:
        await send_common(g, 40, "only")
        await replicated(g.master, g.slave)
        await g.slave.stop()
        for i in range(300):
            assert (await g.on(g.master).send(TOPIC, b"n" * 4000, queue_id=i % 4)).code == 0
        late = await start_slave(tmp_path / "late", g.ns_addr, broker_id=2)
        try:
            await send_common(g, 8, "late")
            await replicated(g.master, late)
        finally:
            await late.stop()
        await g.master.stop()  # A is lost
        g.master = await start_broker(tmp_path / "late", **{**SMALL, "namesrv_addr": g.ns_addr, **fixed})
        assert g.master.store.min_phy_offset > 0 and g.master.store.replica_master
        g.slave = await start_slave(tmp_path / "slave", g.ns_addr)
        await replicated(g.master, g.slave)
    assert set_aside(tmp_path) == [40]
