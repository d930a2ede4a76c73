"""A metadata sync takes nothing in once its ``may_apply`` says no: a DLedger member elected while its sync
from a deposed leader (still answering) was under way must not take that leader's offset table, whose POP
ack watermark may stand past a message whose ack the quorum never held."""

from __future__ import annotations

from typing import cast

from daemon.broker.ha import sync_metadata
from daemon.remoting.client import Transport
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from store import fastjson
from store.config_files import ConfigFiles


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
    """Answers the offset request with its table, the other requests with an error."""

    def __init__(self, configs: ConfigFiles) -> None:
        self.configs = configs

    async def invoke(self, addr: str, request: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        if request.code != RequestCode.GET_ALL_CONSUMER_OFFSET:
            return request.make_response(ResponseCode.SYSTEM_ERROR, "only offsets here")
        return request.make_response(body=fastjson.dumps(self.configs.consumer_offsets.encode()))


async def test_offsets_deleted_on_the_leader_stay_deleted_on_a_follower_elected_after_a_failover() -> None:
    """A DLedger group: the leader deletes a group's offsets; a follower that synced before and after
    leads next with the leader's table, not with the deleted entries (4.9.8's ``putAll`` kept them)."""
    leader, follower, third = ConfigFiles(None), ConfigFiles(None), ConfigFiles(None)
    for g in ("G", "H"):
        leader.consumer_offsets.commit_offset(g, "T", 0, 7)
    for member in (follower, third):
        await sync_metadata(cast(Transport, Leader(leader)), "n0", member)
        assert member.consumer_offsets.query_offset("G", "T", 0) == 7
    leader.consumer_offsets.delete_group("G")
    await sync_metadata(cast(Transport, Leader(leader)), "n0", follower)
    assert follower.consumer_offsets.query_offset("G", "T", 0) == -1
    assert follower.consumer_offsets.query_offset("H", "T", 0) == 7
    # n0 dies; the follower is elected and the third member syncs from it: G is gone there too
    await sync_metadata(cast(Transport, Leader(follower)), "n1", third)
    assert third.consumer_offsets.snapshot() == leader.consumer_offsets.snapshot()
