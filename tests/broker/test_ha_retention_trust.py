"""What may make a slave delete its log as its master's expired records (docs/replication.md
§behind-its-masters-retention): only a master whose store the replica mark names, or one promoted from a
slave of that store. Anything else that says its log starts past the slave's whole log (a master that
shows no store identity, an impostor a stale or open NameServer lists) has the slave's records set aside,
never deleted: they may be the group's only copy."""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon.remoting.bodies import KVTable
from daemon.remoting.codes import RequestCode
from daemon.remoting.command import RemotingCommand
from store.replica_tail import diverged_quarantines
from tests.broker.test_ha import FILE, master_and_slave, start_slave
from tests.broker.test_ha_mark import everything, send_common
from tests.support.broker import replicated
from tests.support.hostile import Answer, honest_with, hostile
from tests.support.waiting import wait_until


def impostor(first: int) -> dict[int, object]:
    """A NameServer and master in one that names itself the slave's master and says its log starts at
    ``first`` and holds no record the slave asks of, showing no store identity (as 4.9.8's shows none)."""

    def register(request: RemotingCommand, addr: str) -> Answer:
        return RemotingCommand(0, ext_fields={"masterAddr": addr, "haServerAddr": "127.0.0.1:1"})

    def runtime_info(request: RemotingCommand, addr: str) -> Answer:
        table = {"commitLogMinOffset": str(first), "commitLogMaxOffset": str(first + FILE)}
        return RemotingCommand(0, body=KVTable(table).dumps())

    def no_record(request: RemotingCommand, addr: str) -> Answer:
        return RemotingCommand(1, remark="no message")

    return {
        RequestCode.REGISTER_BROKER: register,
        RequestCode.GET_BROKER_RUNTIME_INFO: runtime_info,
        RequestCode.VIEW_MESSAGE_BY_ID: no_record,
    }


@pytest.mark.slow
async def test_a_master_showing_no_identity_cannot_make_a_slave_delete_the_only_copy(tmp_path: Path) -> None:
    """The master is lost; the slave holds the only copy of 40 acknowledged records, its mark naming the
    lost master's store. What its NameServer now lists as its master shows no identity and says its log
    starts far past the slave's: the 40 are set aside (a quarantine keeps them), not deleted."""
    async with master_and_slave(tmp_path) as g:
        await send_common(g, 40, "only")
        await replicated(g.master, g.slave)
        assert sum(len(q) for q in await everything(g, g.slave)) == 40
        assert g.slave.store.replica_master == g.master.store.identity
        await g.slave.stop()
        await g.master.stop()
        first = 64 * FILE
        with hostile(honest_with(impostor(first))) as fake:  # type: ignore[arg-type]
            g.slave = await start_slave(tmp_path / "slave", fake.addr)
            await wait_until(lambda: g.slave.store.min_phy_offset == first)
            await g.slave.stop()
        assert [q.records for q in diverged_quarantines(str(tmp_path / "slave"))] == [40]


@pytest.mark.slow
@pytest.mark.parametrize(("first", "last"), [(64 * FILE + 1, 65 * FILE), (64 * FILE, 63 * FILE)])
async def test_a_first_offset_no_log_can_have_leaves_the_slave_serving_what_it_holds(
    tmp_path: Path, first: int, last: int
) -> None:
    """What the NameServer lists as the master shows the lost master's identity (anyone may read it) and a
    first offset that no CommitLog has: not a file's start, or past its own end. The slave starts, keeps
    its 40 records and serves them; it does not replicate from that peer. (A first offset not a file's
    start stopped the slave's start with a ValueError.)"""
    async with master_and_slave(tmp_path) as g:
        await send_common(g, 40, "only")
        await replicated(g.master, g.slave)
        identity = g.master.store.identity
        await g.slave.stop()
        await g.master.stop()
        answers = impostor(first)

        def runtime_info(request: RemotingCommand, addr: str) -> Answer:
            table = {
                "commitLogMinOffset": str(first),
                "commitLogMaxOffset": str(last),
                "haStoreIdentity": identity,
            }
            return RemotingCommand(0, body=KVTable(table).dumps())

        answers[RequestCode.GET_BROKER_RUNTIME_INFO] = runtime_info
        with hostile(honest_with(answers)) as fake:  # type: ignore[arg-type]
            g.slave = await start_slave(tmp_path / "slave", fake.addr)
            await wait_until(lambda: fake.requests.count(RequestCode.GET_BROKER_RUNTIME_INFO) >= 2)
            assert sum(len(q) for q in await everything(g, g.slave)) == 40
            assert g.slave.store.min_phy_offset == 0
        assert diverged_quarantines(str(tmp_path / "slave")) == []


@pytest.mark.slow
async def test_the_masters_retention_during_the_check_sets_none_of_its_records_aside(tmp_path: Path) -> None:
    """The master's retention deletes the file holding the slave's 40 records while the slave's check is
    comparing them: it said its log starts at 0, answers 'no record' for them, and then that it starts at
    the next file. They are its expired records, not divergent ones: none is set aside (they were, as
    records that differ from the master's, before the check asked again)."""
    async with master_and_slave(tmp_path) as g:
        await send_common(g, 40, "old")
        await replicated(g.master, g.slave)
        identity = g.master.store.identity
        await g.slave.stop()
        await g.master.stop()
        asked = []
        answers = impostor(0)

        def runtime_info(request: RemotingCommand, addr: str) -> Answer:
            asked.append(1)
            first = 0 if len(asked) == 1 else FILE
            table = {
                "commitLogMinOffset": str(first),
                "commitLogMaxOffset": str(FILE),
                "haStoreIdentity": identity,
            }
            return RemotingCommand(0, body=KVTable(table).dumps())

        answers[RequestCode.GET_BROKER_RUNTIME_INFO] = runtime_info
        with hostile(honest_with(answers)) as fake:  # type: ignore[arg-type]
            g.slave = await start_slave(tmp_path / "slave", fake.addr)
            await wait_until(lambda: g.slave.store.min_phy_offset == FILE)
            await g.slave.stop()
        assert diverged_quarantines(str(tmp_path / "slave")) == []
