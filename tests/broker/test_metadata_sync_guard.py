"""A metadata sync takes nothing in once its ``may_apply`` says no: a DLedger member elected while its sync
from a deposed leader (still answering) was under way must not take that leader's offset table, whose POP
ack watermark may stand past a message whose ack the quorum never held."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import cast

import pytest

from daemon.broker import ha
from daemon.broker.ha import END_LOOKUP_BUDGET, END_LOOKUPS_AT_ONCE, sync_metadata
from daemon.remoting.client import Transport
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.errors import RemotingTimeoutError
from store import fastjson
from store.config_files import ConfigFiles
from store.models import SubscriptionGroupConfig, TopicConfig


class OldLeader:
    """Answers each table request with its tables; this member is elected while the offsets are asked for."""

    def __init__(self, offsets: ConfigFiles, elected: list[bool]) -> None:
        self.offsets = offsets
        self.elected = elected
        self.asked: list[int] = []

    async def invoke(self, addr: str, request: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        self.asked.append(request.code)
        if request.code != RequestCode.GET_ALL_CONSUMER_OFFSET:
            return request.make_response(ResponseCode.SYSTEM_ERROR, "only offsets here")
        self.elected[0] = True  # the answer is on its way when this member wins the election
        return request.make_response(body=fastjson.dumps(self.offsets.consumer_offsets.encode()))


async def test_a_member_elected_during_a_sync_keeps_its_own_offset_table() -> None:
    theirs = ConfigFiles(None)
    theirs.consumer_offsets.commit_offset("G", "Ft", 0, 64)  # an ack the quorum never held moved it here
    mine = ConfigFiles(None)
    mine.consumer_offsets.commit_offset("G", "Ft", 0, 63)
    elected = [False]
    old_leader = OldLeader(theirs, elected)
    changed = await sync_metadata(
        cast(Transport, old_leader), "old-leader", mine, may_apply=lambda: not elected[0]
    )
    assert changed == []
    assert mine.consumer_offsets.query_offset("G", "Ft", 0) == 63  # the message is lent again from here
    assert RequestCode.GET_ALL_CONSUMER_OFFSET in old_leader.asked
    # not elected: the same answer is taken in (the guard is what kept it out above)
    elected[0] = False
    changed = await sync_metadata(cast(Transport, old_leader), "old-leader", mine)
    assert "ConsumerOffsetManager" in changed
    assert mine.consumer_offsets.query_offset("G", "Ft", 0) == 64


class Leader:
    """Answers the topic, group and offset requests with its tables (``tables`` of them), the others with
    an error."""

    TABLES = (
        RequestCode.GET_ALL_TOPIC_CONFIG,
        RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
        RequestCode.GET_ALL_CONSUMER_OFFSET,
    )

    def __init__(self, configs: ConfigFiles, tables: tuple[int, ...] = TABLES) -> None:
        self.configs = configs
        self.tables = tables

    async def invoke(self, addr: str, request: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        if request.code not in self.tables:
            return request.make_response(ResponseCode.SYSTEM_ERROR, "not here")
        table = {
            RequestCode.GET_ALL_TOPIC_CONFIG: self.configs.topics,
            RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: self.configs.subscription_groups,
            RequestCode.GET_ALL_CONSUMER_OFFSET: self.configs.consumer_offsets,
        }[request.code]
        return request.make_response(body=fastjson.dumps(table.encode()))


def _leader(groups: tuple[str, ...] = ("G", "H"), topic: str = "T") -> ConfigFiles:
    """A leader with ``topic``, the subscription ``groups`` and their offsets of queue 0 at 7."""
    leader = ConfigFiles(None)
    leader.topics.update(TopicConfig(topic, 1, 1), persist=False)
    for g in groups:
        leader.subscription_groups.update(SubscriptionGroupConfig(g), persist=False)
        leader.consumer_offsets.commit_offset(g, topic, 0, 7)
    return leader


async def test_offsets_deleted_on_the_leader_stay_deleted_on_a_follower_elected_after_a_failover() -> None:
    """A DLedger group: the leader deletes a group's offsets; a follower that synced before and after
    leads next with the leader's table, not with the deleted entries (4.9.8's ``putAll`` kept them)."""
    leader, follower, third = _leader(), ConfigFiles(None), ConfigFiles(None)
    for member in (follower, third):
        await sync_metadata(cast(Transport, Leader(leader)), "n0", member)
        assert member.consumer_offsets.query_offset("G", "T", 0) == 7
    leader.subscription_groups.delete("G")  # group delete --remove-offset
    leader.consumer_offsets.delete_group("G")
    await sync_metadata(cast(Transport, Leader(leader)), "n0", follower)
    assert follower.consumer_offsets.query_offset("G", "T", 0) == -1
    assert follower.consumer_offsets.query_offset("H", "T", 0) == 7
    # n0 dies; the follower is elected and the third member syncs from it: G is gone there too
    await sync_metadata(cast(Transport, Leader(follower)), "n1", third)
    assert third.consumer_offsets.snapshot() == leader.consumer_offsets.snapshot()


async def test_offsets_of_a_topic_deleted_on_the_master_are_dropped_on_its_slave(
    caplog: pytest.LogCaptureFixture,
) -> None:
    master, slave = _leader(), ConfigFiles(None)
    await sync_metadata(cast(Transport, Leader(master)), "m", slave)
    master.topics.delete("T")  # topic delete: its offsets with it
    master.consumer_offsets.delete_topic("T")
    caplog.set_level(logging.WARNING, logger="daemon.broker.ha")
    assert "ConsumerOffsetManager" in await sync_metadata(cast(Transport, Leader(master)), "m", slave)
    assert slave.consumer_offsets.snapshot() == {}
    (line,) = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    assert "2 consumer offset entries" in line and "T@G, T@H" in line


async def test_a_master_that_lost_its_offsets_does_not_wipe_its_slaves_copy(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A master restored from an older copy, or whose consumerOffset.json and .bak were unreadable (it
    loads nothing), still has the groups and topics: the slave held the only copy of their offsets, and
    the sync dropped it silently. It is kept, said once at WARNING; a deletion later still drops it."""
    master, slave = _leader(), ConfigFiles(None)
    await sync_metadata(cast(Transport, Leader(master)), "m", slave)
    master.consumer_offsets.table.clear()
    caplog.set_level(logging.WARNING, logger="daemon.broker.ha")
    for _ in range(2):
        assert await sync_metadata(cast(Transport, Leader(master)), "m", slave) == []
        assert slave.consumer_offsets.query_offset("G", "T", 0) == 7
        assert slave.consumer_offsets.query_offset("H", "T", 0) == 7
    (line,) = [r.getMessage() for r in caplog.records if "keeping" in r.getMessage()]
    assert "2 consumer offset entries" in line and "T@G, T@H" in line
    master.subscription_groups.delete("G")
    await sync_metadata(cast(Transport, Leader(master)), "m", slave)
    assert slave.consumer_offsets.query_offset("G", "T", 0) == -1
    assert slave.consumer_offsets.query_offset("H", "T", 0) == 7


@pytest.mark.parametrize(
    "lacking", [RequestCode.GET_ALL_TOPIC_CONFIG, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG]
)
async def test_nothing_is_dropped_without_the_masters_topic_and_group_tables_of_the_sync(
    lacking: int,
) -> None:
    """An offset entry is dropped by what this sync read of the master: a table it could not read (a
    timeout) judges nothing, and the slave's own copy may be older than the master's."""
    master, slave = _leader(), ConfigFiles(None)
    await sync_metadata(cast(Transport, Leader(master)), "m", slave)
    master.subscription_groups.delete("G")
    master.consumer_offsets.delete_group("G")
    tables = tuple(c for c in Leader.TABLES if c != lacking)
    await sync_metadata(cast(Transport, Leader(master, tables)), "m", slave)
    assert slave.consumer_offsets.query_offset("G", "T", 0) == 7
    await sync_metadata(cast(Transport, Leader(master)), "m", slave)  # judged at the next full sync
    assert slave.consumer_offsets.query_offset("G", "T", 0) == -1


class RestoredMaster:
    """A master whose queue ``Back``/0 ends at ``end``, offset table ``BG`` at 1; records the commits."""

    def __init__(self, end: int) -> None:
        self.end = end
        self.commits: list[dict[str, str]] = []

    async def invoke(self, addr: str, request: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        if request.code == RequestCode.GET_ALL_CONSUMER_OFFSET:
            return request.make_response(body=fastjson.dumps({"offsetTable": {"Back@BG": {0: 1}}}))
        if request.code == RequestCode.GET_MAX_OFFSET:
            return request.make_response(ext_fields={"offset": str(self.end)})
        if request.code == RequestCode.UPDATE_CONSUMER_OFFSET:
            self.commits.append(dict(request.ext_fields))
            return request.make_response()
        return request.make_response(ResponseCode.SYSTEM_ERROR, "not here")


@pytest.mark.parametrize("end", [2, 6], ids=["restored-older", "caught-up"])
async def test_an_offset_committed_to_the_slave_past_the_masters_queue_end_is_not_handed_on(end: int) -> None:
    """A master restored from an older copy whose queue ends before what the slave's consumers acknowledged
    took that offset, and the messages it was sent next were skipped up to it by a consumer starting later."""
    mine = ConfigFiles(None)
    mine.consumer_offsets.commit_offset(
        "BG", "Back", 0, 4
    )  # committed to the slave while the master was down
    commits = {("BG", "Back", 0): 4}
    master = RestoredMaster(end)
    await sync_metadata(cast(Transport, master), "master", mine, commits)
    assert commits == {}
    if end < 4:
        assert master.commits == []
        assert mine.consumer_offsets.query_offset("BG", "Back", 0) == 1  # the master's stands
    else:
        assert [c["commitOffset"] for c in master.commits] == ["4"]
        assert mine.consumer_offsets.query_offset("BG", "Back", 0) == 4


class SlowMaster:
    """A master holding no offsets whose queues of ``Slow`` end at 100: it answers GET_MAX_OFFSET once
    ``together`` of them are in flight (at most ``patience`` seconds), never for the queues ``mute``."""

    def __init__(self, together: int, mute: frozenset[int] = frozenset(), patience: float = 0.5) -> None:
        self.together, self.mute, self.patience = together, mute, patience
        self.in_flight = self.most_in_flight = 0
        self.all_in = asyncio.Event()
        self.timeouts: list[float] = []
        self.commits: list[str] = []

    async def invoke(self, addr: str, request: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        if request.code == RequestCode.GET_ALL_CONSUMER_OFFSET:
            return request.make_response(body=fastjson.dumps({"offsetTable": {}}))
        if request.code == RequestCode.UPDATE_CONSUMER_OFFSET:
            self.commits.append(request.ext_fields["queueId"])
            return request.make_response()
        if request.code != RequestCode.GET_MAX_OFFSET:
            return request.make_response(ResponseCode.SYSTEM_ERROR, "not here")
        self.timeouts.append(timeout)
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if self.in_flight >= self.together:
                self.all_in.set()
            if int(request.ext_fields["queueId"]) in self.mute:
                await asyncio.sleep(timeout)
                raise RemotingTimeoutError(addr, timeout, request.code)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(timeout, self.patience)):
                    await self.all_in.wait()
            return request.make_response(ext_fields={"offset": "100"})
        finally:
            self.in_flight -= 1


def _committed_to_the_slave(queues: int) -> tuple[ConfigFiles, dict[tuple[str, str, int], int]]:
    mine = ConfigFiles(None)
    for q in range(queues):
        mine.consumer_offsets.commit_offset("SG", "Slow", q, 5)
    return mine, {("SG", "Slow", q): 5 for q in range(queues)}


async def test_the_queue_ends_are_asked_for_at_once() -> None:
    """One GET_MAX_OFFSET at a time, each with its own 3 s timeout, stretched a sync with many offsets
    committed to the slave by a timeout per queue when the master was slow."""
    mine, commits = _committed_to_the_slave(20)
    master = SlowMaster(together=END_LOOKUPS_AT_ONCE)
    await sync_metadata(cast(Transport, master), "master", mine, commits)
    assert master.most_in_flight == END_LOOKUPS_AT_ONCE
    assert sorted(master.commits, key=int) == [str(q) for q in range(20)] and commits == {}
    assert max(master.timeouts) <= END_LOOKUP_BUDGET


async def test_an_offset_whose_queue_end_the_master_did_not_tell_in_time_waits_for_the_next_sync(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """All of a sync's lookups share one time budget: one the master does not answer within it is not
    handed on unchecked (it may be past a restored master's queue end), and is kept to be handed on."""
    monkeypatch.setattr(ha, "END_LOOKUP_BUDGET", 0.2)
    mine, commits = _committed_to_the_slave(2)
    master = SlowMaster(together=1, mute=frozenset({1}))
    await sync_metadata(cast(Transport, master), "master", mine, commits)
    assert master.commits == ["0"] and commits == {("SG", "Slow", 1): 5}
    assert mine.consumer_offsets.query_offset("SG", "Slow", 1) == 5
    master.mute = frozenset()
    await sync_metadata(cast(Transport, master), "master", mine, commits)
    assert master.commits == ["0", "1"] and commits == {}
