"""A DLedger member keeps its send path's topic state (config, queue handles) through a change of role:
a leader that hands leadership over, follows the new leader's log, and is handed it back takes the next
send at the offset after the other leader's, in the queue object its store holds."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from daemon.broker.broker import Broker
from daemon.dledger.protocol import DLedgerResponseCode
from daemon.remoting.codes import ResponseCode
from tests.broker.test_ha import pull_all
from tests.dledger.test_rejoin import elected, leader_of, members, running
from tests.support.broker import BrokerClient
from tests.support.waiting import wait_until


async def _sent(on: BrokerClient, body: bytes, queue_id: int) -> int:
    r = await on.send("K", body, queue_id=queue_id)
    assert r.code == ResponseCode.SUCCESS, r.remark
    assert int(r.ext_fields["queueId"]) == queue_id
    return int(r.ext_fields["queueOffset"])


async def _hand_over(leader: Broker, to: Broker, brokers: list[Broker | None]) -> None:
    """Hand leadership to ``to``; a transferee not caught up yet refuses it (TAKE_LEADERSHIP_FAILED)."""
    assert leader.dledger is not None and to.dledger is not None
    for _ in range(100):
        answer = await leader.dledger.transfer(to.config.dleger_self_id)
        if answer.code == DLedgerResponseCode.SUCCESS:
            break
        await asyncio.sleep(0.1)
    assert answer.code == DLedgerResponseCode.SUCCESS, answer
    await wait_until(lambda: leader_of(brokers) is to, 20)


@pytest.mark.slow
async def test_a_leader_handed_leadership_back_continues_each_queue_after_the_other_leaders_sends(
    tmp_path: Path,
) -> None:
    async with running(members(tmp_path)) as (brokers, client):
        first = await elected(brokers)
        on_first = BrokerClient(first.addr, client)
        await on_first.create_topic("K", 2)
        assert [await _sent(on_first, f"a{i}".encode(), 0) for i in range(3)] == [0, 1, 2]
        assert await _sent(on_first, b"a-q1", 1) == 0
        second = next(b for b in brokers if b is not None and b is not first)
        await _hand_over(first, second, brokers)
        on_second = BrokerClient(second.addr, client)
        await on_second.create_topic("K", 2)  # (the follower's table may not have synced it yet)
        assert [await _sent(on_second, f"b{i}".encode(), 0) for i in range(2)] == [3, 4]
        await _hand_over(second, first, brokers)
        await on_first.create_topic("K", 2)  # (a table change: the kept state is checked once more)
        assert await _sent(on_first, b"c0", 0) == 5
        assert await _sent(on_first, b"c-q1", 1) == 1
        expected = [b"a0", b"a1", b"a2", b"b0", b"b1", b"c0"]
        assert await pull_all(on_first, "K", 0) == expected
        assert await pull_all(on_first, "K", 1) == [b"a-q1", b"c-q1"]
