"""A DLedger leader whose own stored entry is damaged (a bit flipped in its data file after the append).

Its followers refuse the damaged body (it fails its ``bodyCrc``), so the leader must not go on pushing it
for ever while its heartbeats keep it the leader: it finds the damage when it reads the entry back from
disk for a push, says so at ERROR and gives up the leadership; another member (holding the entry whole) is
elected, writes resume, and the damaged member does not serve the damaged message to consumers.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import store.dledger_log
from daemon.broker.broker import Broker
from daemon.dledger import machines
from daemon.remoting.codes import ResponseCode
from store.engine import DefaultMessageStore
from store.quarantine import list_quarantines
from tests.broker.test_ha import pull_all
from tests.dledger.test_rejoin import (
    commit_known,
    dispatched,
    elected,
    leader_of,
    led,
    members,
    running,
    stop_followers,
)
from tests.support.broker import BrokerClient, start_broker
from tests.support.waiting import wait_until


def flip_body_byte(member: Broker, index: int, needle: bytes) -> None:
    """Flip the first byte of ``needle`` (a message body) inside entry `index` in the member's data file,
    under the running member (its mapped file sees the write)."""
    assert member.dledger is not None
    entry = member.dledger.log.get(index)
    at = entry.pos + 48 + entry.body.index(needle)  # BODY_OFFSET: the entry header and body length
    data = Path(member.config.store_path_root_dir) / f"dledger-{member.config.dleger_self_id}" / "data"
    base = max(int(f.name) for f in data.iterdir() if f.name.isdigit() and int(f.name) <= at)
    with open(data / f"{base:020d}", "r+b") as fh:
        fh.seek(at - base)
        byte = fh.read(1)
        fh.seek(at - base)
        fh.write(bytes([byte[0] ^ 0x01]))


def small_caches(monkeypatch: pytest.MonkeyPatch) -> None:
    """A leader's in-memory entries few, so that an entry it pushes is read back from its data file."""
    monkeypatch.setattr(machines, "WIRE_CACHE_ENTRIES", 4)
    monkeypatch.setattr(store.dledger_log, "RECENT_ENTRIES", 4)


def gave_up(logged: str, index: int) -> bool:
    """Whether the leader said at ERROR that it gives up its leadership for entry `index` (its followers
    name the entry's CRC too, refusing it)."""
    return any(
        "giving up the leadership" in line and f"entry {index}: body crc" in line
        for line in logged.splitlines()
    )


@pytest.mark.slow
async def test_a_leader_whose_stored_entry_is_damaged_gives_up_the_leadership(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    small_caches(monkeypatch)
    keys = members(tmp_path)
    async with running(keys) as (brokers, client):
        old, on_old = await led(brokers, client, "D", 5)
        assert old.dledger is not None
        # a follower stops: what comes now commits with the other one, and waits in the leader's log
        [stopped] = await stop_followers(brokers, old, 1)
        damaged_index = old.dledger.log.last_index + 1
        for i in range(20):
            assert (await on_old.send("D", f"later-{i}".encode(), queue_id=0)).code == ResponseCode.SUCCESS
        flip_body_byte(old, damaged_index, b"later-0")
        # the follower returns: the leader reads the damaged entry back from disk to push it
        with caplog.at_level("ERROR"):
            brokers[stopped] = await start_broker(Path(keys[stopped]["store_path_root_dir"]), **keys[stopped])
            await wait_until(lambda: leader_of(brokers) not in (None, old), 20)
        assert gave_up(caplog.text, damaged_index)
        new = leader_of(brokers)
        assert new is not None and new is not old
        on_new = BrokerClient(new.addr, client)
        await on_new.create_topic("D", 1)
        assert (await on_new.send("D", b"after", queue_id=0)).code == ResponseCode.SUCCESS
        expected = [f"acked-{i}".encode() for i in range(5)] + [f"later-{i}".encode() for i in range(20)]
        assert await pull_all(on_new, "D", 0) == [*expected, b"after"]
        # the damaged member serves no damaged message
        await asyncio.sleep(1)
        served = await pull_all(on_old, "D", 0)
        assert all(m in expected or m == b"after" for m in served), served


@pytest.mark.slow
async def test_a_damaged_uncommitted_tail_is_cut_on_rejoin_and_what_replaces_it_is_served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The damaged entry is in a lone leader's unacknowledged tail: re-elected by a follower that lacks
    the tail, it finds the damage pushing it and leads no more; once the third member is back, the new
    leader cuts that tail (set aside in quarantine) and the member serves what the new leader wrote at the
    same data offsets."""
    small_caches(monkeypatch)
    keys = members(tmp_path)
    async with running(keys) as (brokers, client):
        old, on_old = await led(brokers, client, "D", 3)
        assert old.dledger is not None
        await commit_known(brokers, old)  # (idle commit pushes)
        followers = await stop_followers(brokers, old)
        damaged_index = old.dledger.log.last_index + 1
        lone = await asyncio.gather(*(on_old.send("D", f"lone-{i}".encode(), queue_id=0) for i in range(10)))
        assert all(r.code != ResponseCode.SUCCESS for r in lone)
        flip_body_byte(old, damaged_index, b"lone-0")
        # one follower returns: the old leader's longer log wins the vote, and it pushes the damaged entry
        with caplog.at_level("ERROR"):
            first = followers[0]
            brokers[first] = await start_broker(Path(keys[first]["store_path_root_dir"]), **keys[first])
            await wait_until(lambda: gave_up(caplog.text, damaged_index), 20)
        # the third returns: the two elect one, which cuts the old leader's tail
        second = followers[1]
        brokers[second] = await start_broker(Path(keys[second]["store_path_root_dir"]), **keys[second])
        new = await elected(brokers)
        assert new is not old and new.dledger is not None
        on_new = BrokerClient(new.addr, client)
        await on_new.create_topic("D", 1)
        for i in range(10):
            assert (await on_new.send("D", f"new-{i}".encode(), queue_id=0)).code == ResponseCode.SUCCESS
        expected = [f"acked-{i}".encode() for i in range(3)] + [f"new-{i}".encode() for i in range(10)]
        assert await pull_all(on_new, "D", 0) == expected
        old_log, new_log = old.dledger.log, new.dledger.log
        await wait_until(lambda: old_log.committed_index == new_log.committed_index == new_log.last_index, 20)
        # a follower dispatches what a push commits at its next tick, not within the push's answer
        await wait_until(lambda: dispatched(old), 10)
        assert list_quarantines(old.config.store_path_root_dir)
        assert await pull_all(on_old, "D", 0) == expected
        # (the damaged record was cut: nothing at its offset is kept from serving)
        assert isinstance(old.store, DefaultMessageStore)
        assert old.store.commit_log.set_aside == {}


@pytest.mark.slow
async def test_a_member_whose_disk_is_full_leaves_the_leadership_to_another(tmp_path: Path) -> None:
    """A member whose store refuses puts (its disk over the warning watermark: here, a watermark below
    the disk's use) could win an election, yet never append its term record nor take the master role
    while its heartbeats kept the others following: writes stalled. It runs for leader no more while its
    disk is full, so the member that can write is elected."""
    keys = members(tmp_path)
    slow = {"min_vote_interval_ms": 1500, "max_vote_interval_ms": 2500}
    # (a new group, two of its three members started: the operator's word that it is new, else each waits
    # for the third to answer, as an emptied member would)
    slow = {**slow, "vote_when_emptied": True}
    keys = [{**keys[0], **slow}, {**keys[1], **slow}, keys[2]]
    keys[2] = {**keys[2], "min_vote_interval_ms": 50, "max_vote_interval_ms": 100}
    keys[2]["disk_space_warning_level_ratio"] = 1  # (its disk is "full": any use is above 1 %)
    async with running(keys[:2]) as (brokers, client):
        old, _ = await led(brokers, client, "F", 5)
        full = await start_broker(Path(keys[2]["store_path_root_dir"]), **keys[2])
        brokers.append(full)
        assert full.dledger is not None and old.dledger is not None
        await wait_until(lambda: full.store.disk_full, 10)
        old_log, full_log = old.dledger.log, full.dledger.log
        await wait_until(
            lambda: full_log.committed_index == old_log.committed_index == old_log.last_index, 20
        )
        # the leader goes: the member on the full disk runs first (shorter vote intervals)
        old_index = brokers.index(old)
        await old.stop()
        brokers[old_index] = None
        await wait_until(lambda: leader_of(brokers) is not None, 20)
        new = leader_of(brokers)
        assert new is not None and new is not full
        on_new = BrokerClient(new.addr, client)
        await on_new.create_topic("F", 1)
        assert (await on_new.send("F", b"after", queue_id=0)).code == ResponseCode.SUCCESS
