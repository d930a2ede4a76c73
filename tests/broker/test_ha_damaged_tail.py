"""A slave checks its last record against its master's (VIEW_MESSAGE_BY_ID) before it serves: when the
master's copy is damaged, the master answers that it is (the optional field ``mqctlDamaged``) and the
slave keeps its own, intact copy. It read the answer as 'no record there' and set its tail aside as
divergent, its intact copy into a quarantine."""

from __future__ import annotations

from pathlib import Path

from store.replica_tail import diverged_quarantines
from tests.broker.test_damaged_record_kept import flip
from tests.broker.test_ha import master_and_slave, pull_all, start_slave
from tests.cli.test_quarantine_cmd import records_of
from tests.support.broker import replicated
from tests.support.waiting import wait_until


async def test_a_slave_keeps_its_last_record_when_the_masters_copy_is_damaged(tmp_path: Path) -> None:
    async with master_and_slave(tmp_path) as g:
        on_master = g.on(g.master)
        for i in range(10):
            assert (await on_master.send("Tail", f"message-{i}".encode() * 10, queue_id=0)).code == 0
        await replicated(g.master, g.slave)
        await g.slave.stop()
        last, _message, body_at = records_of(tmp_path / "master" / "commitlog")[-1]
        flip(tmp_path / "master" / "commitlog" / f"{0:020d}", body_at + 5)  # the running master's mapping too

        g.slave = await start_slave(tmp_path / "slave", g.ns_addr)
        ha = g.slave.ha_slave
        assert ha is not None
        await wait_until(lambda: ha.connected, timeout=20)  # it checks its tail before each connection
        assert not diverged_quarantines(str(tmp_path / "slave"))
        bodies = await pull_all(g.on(g.slave), "Tail", 0)
        assert bodies == [f"message-{i}".encode() * 10 for i in range(10)]
        assert g.slave.store.max_phy_offset > last
