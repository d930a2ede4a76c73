"""A member that lost its store (or its vote file) abstains from elections until it has caught up, and
says so: in its runtime info, ``broker ha status`` and doctor's ha check. (The election rules are in
tests/dledger/test_machines.py; the schedule that lost messages without them, tests/jepsen.)"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from daemon.dledger.machines import VOTING
from daemon.remoting.codes import ResponseCode
from mqctl.admin.client import Admin
from mqctl.services.cluster import BrokerRow
from mqctl.services.ha import HAStatus, _one
from store.dledger import ABSTAIN_FILE
from tests.dledger.test_rejoin import STEADY, elected, led, members, running
from tests.support.broker import start_broker
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow


async def _status(addr: str) -> HAStatus:
    async with Admin([]) as admin:
        return await _one(admin, BrokerRow("c", "g", 1, addr))


async def test_ha_status_says_which_member_abstains_and_why(tmp_path: Path) -> None:
    """A member of a new group started alone cannot tell the group from its own loss: it abstains until
    its peers answer with empty logs, then votes and elects with them, and says nothing more. (A member
    whose peers elected before its probes reached them finds the leader's log, and votes once it caught
    up with it.)"""
    keys = members(tmp_path)
    async with running(keys[:1]) as (brokers, _client):
        alone = brokers[0]
        assert alone is not None
        state = await _status(alone.addr)
        assert state.abstains is not None and "started with an empty log" in state.abstains, state
        for k in keys[1:]:
            brokers.append(await start_broker(Path(k["store_path_root_dir"]), **k))
        await elected(brokers)
        for b in brokers:
            assert b is not None

            async def votes(addr: str = b.addr) -> bool:
                return (await _status(addr)).abstains is None

            await wait_until(votes, 30)
            assert b.dledger is not None
            assert not (Path(b.dledger.settings.directory) / ABSTAIN_FILE).exists()


async def test_a_member_restarted_before_it_caught_up_still_abstains(tmp_path: Path) -> None:
    """Its log and vote file are there by then, so only the file it kept says it has not caught up."""
    keys = members(tmp_path)
    k = keys[0]
    first = await start_broker(Path(k["store_path_root_dir"]), **k)
    assert first.dledger is not None
    directory = Path(first.dledger.settings.directory)
    await first.stop()
    (directory / ABSTAIN_FILE).write_text("catching-up\n")
    (directory / "currterm").write_text("currTerm=3\nvoteLeader=\n")
    async with running([k]) as (brokers, _client):
        assert brokers[0] is not None
        state = await _status(brokers[0].addr)
        assert state.abstains is not None and "restarted before it caught up" in state.abstains, state
        assert "an entry of its leader's term" in state.abstains


async def test_a_member_restored_from_an_older_copy_abstains_until_it_caught_up(tmp_path: Path) -> None:
    """A follower's whole store is copied while it is stopped, it acknowledges more sends, then its store is
    put back from the copy: its leader answers its probe with the last entry it acknowledged, so it
    abstains, says why, and votes again once it caught up."""
    keys = [{**k, **STEADY} for k in members(tmp_path)]  # (the leader elected first answers the probe)
    async with running(keys) as (brokers, client):
        leader, on = await led(brokers, client, "R", 5)
        i = next(j for j, b in enumerate(brokers) if b is not None and b is not leader)
        k, follower = keys[i], brokers[i]
        assert follower is not None and follower.dledger is not None
        root, backup = Path(k["store_path_root_dir"]), tmp_path / "backup"
        await follower.stop()
        shutil.copytree(root, backup)
        brokers[i] = follower = await start_broker(root, **k)
        await wait_until(lambda: follower.dledger is not None and follower.dledger.node.abstaining == VOTING)
        for n in range(20):
            assert (await on.send("R", f"later-{n}".encode(), queue_id=0)).code == ResponseCode.SUCCESS
        assert leader.dledger is not None
        node, end = leader.dledger.node, leader.dledger.log.last_index
        # the leader holds its acknowledgement of the last entry, what its probe is answered: the follower's
        # log holding it is not enough (an answer still on its way when it stops never reaches the leader)
        await wait_until(lambda: node.seen_of(k["dleger_self_id"]) == (node.m.term, end))
        await follower.stop()
        brokers[i] = None
        shutil.rmtree(root)
        shutil.copytree(backup, root)
        restored = await start_broker(root, **k)
        brokers[i] = restored
        assert restored.dledger is not None
        said: list[str] = []

        async def abstains() -> bool:
            said[:] = [(await _status(restored.addr)).abstains or ""]
            return "older than its peers saw it" in said[0]

        await wait_until(abstains, 20)
        assert f"{leader.dledger.settings.self_id}, leader of term" in said[0], said
        assert (Path(restored.dledger.settings.directory) / ABSTAIN_FILE).exists()
        # (the leader finds its log shorter than it acknowledged and pushes the rest again)
        await wait_until(
            lambda: restored.dledger is not None and restored.dledger.node.abstaining == VOTING, 20
        )
        assert (await _status(restored.addr)).abstains is None
