"""``msg send`` to a topic whose broker group has no master registered (the master is down, or a DLedger
group is electing one): the route lists only slaves. The error said 'its permission or queue counts leave
none', pointing at the topic's config; it is a connection problem that passes, so exit 5 saying so."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.broker.test_ha import master_and_slave
from tests.support.cli import RunCli


@pytest.mark.slow
async def test_a_send_while_the_group_has_no_master_says_so_and_is_retriable(
    cli: RunCli, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with master_and_slave(tmp_path) as g:
        ns = g.ns_addr
        made = await asyncio.to_thread(cli, "topic", "create", "-t", "Orders", "-n", ns)
        assert made.code == 0, made.stderr
        await g.master.stop()  # unregisters: the route keeps the topic's queues and the slave
        route = await asyncio.to_thread(cli, "topic", "route", "-t", "Orders", "-n", ns, "-o", "json")
        assert route.code == 0, route.stderr
        listed = await asyncio.to_thread(cli, "cluster", "list", "-n", ns, "-o", "json")
        result = await asyncio.to_thread(cli, "msg", "send", "-t", "Orders", "body", "-n", ns)
    # cluster list shows the slave alone, and says the group has no master (it read as a group of one)
    assert listed.code == 0 and [r["role"] for r in listed.json()] == ["SLAVE"], listed
    assert "broker-a: no master registered" in caplog.text, caplog.text  # a WARNING on stderr
    assert result.code == 5, result
    [line] = result.stderr.splitlines()
    assert "no master of broker-a" in line and "permission" not in line, line


@pytest.mark.slow
async def test_a_send_stored_without_its_copy_warns(cli: RunCli, tmp_path: Path) -> None:
    """A SYNC_MASTER whose slave stopped stores a send and answers SLAVE_NOT_AVAILABLE: msg send exited 0
    with that status only in its table; it still exits 0 (stored: a retry would store it twice) and says
    on stderr what was not done."""
    async with master_and_slave(tmp_path, broker_role="SYNC_MASTER") as g:
        ns = g.ns_addr
        made = await asyncio.to_thread(cli, "topic", "create", "-t", "Orders", "-n", ns)
        assert made.code == 0, made.stderr
        await g.slave.stop()
        result = await asyncio.to_thread(cli, "msg", "send", "-t", "Orders", "body", "-n", ns, "-o", "json")
    assert result.code == 0 and result.json()["status"] == "SLAVE_NOT_AVAILABLE", result
    [line] = result.stderr.splitlines()
    assert line.startswith("mqctl: warning: stored on broker-a but SLAVE_NOT_AVAILABLE: a SYNC_MASTER"), line
