"""``msg tail`` over a master/slave pair: it reads the slave while the master is down, and goes back to the
master once the route names it again (not only when the slave fails), each queue from its position."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from daemon.remoting.codes import ResponseCode
from mqctl.admin.client import Admin
from mqctl.services.messages import MessageRow, tail
from tests.broker.test_ha import SMALL, Group, caught_up, master_and_slave
from tests.support.broker import start_broker
from tests.support.waiting import wait_until


async def test_a_tail_on_the_slave_moves_back_to_the_master_when_it_returns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The tail read on from the slave for as long as the slave answered, however long the master had
    been back: the slave's lag, and the slave's own failure, were the tail's. It now reads the master
    again as soon as the route names it, and says so; nothing is missed or read twice."""
    async with master_and_slave(tmp_path) as g:
        ha = g.master.ha_master
        assert ha is not None
        await wait_until(lambda: bool(ha.slaves))
        rows = await _tail_through_a_restart_of_the_master(g, tmp_path, caplog)
    assert [(r["queue_id"], r["queue_offset"], r["body"]) for r in rows] == [
        (0, 0, "m0"),
        (0, 1, "m1"),
        (0, 2, "m2"),
    ]


async def _tail_through_a_restart_of_the_master(
    g: Group, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> list[MessageRow]:
    assert (await g.on(g.master).send("Back", b"m0", queue_id=0)).code == ResponseCode.SUCCESS
    await wait_until(lambda: caught_up(g))
    await g.slave.sync_from_master()  # the slave knows the topic
    port = int(g.master.addr.rsplit(":", 1)[1])
    await g.master.stop()
    rows: list[MessageRow] = []
    async with Admin([g.ns_addr], timeout=5) as admin:
        reading = asyncio.create_task(tail(admin, "Back", rows.append, start="earliest"))
        try:
            await wait_until(lambda: len(rows) == 1, 30)  # m0, from the slave
            g.master = await start_broker(
                tmp_path / "master", namesrv_addr=g.ns_addr, listen_port=port, **SMALL
            )
            moved = f"the route moved its reads from {g.slave.addr} to {g.master.addr}"
            await wait_until(lambda: moved in caplog.text, 30)
            for body in (b"m1", b"m2"):
                assert (await g.on(g.master).send("Back", body, queue_id=0)).code == ResponseCode.SUCCESS
            await wait_until(lambda: len(rows) == 3, 30)
        finally:
            reading.cancel()
            await asyncio.gather(reading, return_exceptions=True)
    return rows


@pytest.mark.slow
async def test_a_tail_reading_the_master_when_it_dies_reads_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tail whose master died ended quietly (exit 0, nothing more): the route watch cancelled the queue's
    reader while it waited out the outage, a cancel no reroute caught, read as stdout's reader gone. It
    now reads on from the slave, then from the master once back (the watch asked often, so it fires
    inside that wait as it did in the operator's run)."""
    import mqctl.services.messages as messages

    monkeypatch.setattr(messages, "ROUTE_REFRESH_S", 0.2)
    async with master_and_slave(tmp_path) as g:
        ha = g.master.ha_master
        assert ha is not None
        await wait_until(lambda: bool(ha.slaves))
        assert (await g.on(g.master).send("Lost", b"m0", queue_id=0)).code == ResponseCode.SUCCESS
        await wait_until(lambda: caught_up(g))
        await g.slave.sync_from_master()  # the slave knows the topic
        port = int(g.master.addr.rsplit(":", 1)[1])
        rows: list[MessageRow] = []
        async with Admin([g.ns_addr], timeout=5) as admin:
            reading = asyncio.create_task(tail(admin, "Lost", rows.append, start="earliest"))
            try:
                await wait_until(lambda: len(rows) == 1, 30)  # m0, from the master
                await g.master.stop()
                await wait_until(lambda: "reading on once the route names" in caplog.text, 30)
                await asyncio.sleep(1.5)  # the outage's wait, and the route watch inside it
                assert not reading.done(), reading
                g.master = await start_broker(
                    tmp_path / "master", namesrv_addr=g.ns_addr, listen_port=port, **SMALL
                )
                assert (await g.on(g.master).send("Lost", b"m1", queue_id=0)).code == ResponseCode.SUCCESS
                await wait_until(lambda: len(rows) == 2, 30)
            finally:
                reading.cancel()
                await asyncio.gather(reading, return_exceptions=True)
    assert [(r["queue_offset"], r["body"]) for r in rows] == [(0, "m0"), (1, "m1")]
