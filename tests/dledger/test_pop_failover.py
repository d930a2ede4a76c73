"""POP consumption across a DLedger failover (``mqctl up --dledger 3``): messages popped from the leader
and not acked are lent again by the member elected after its SIGKILL. The history (every SEND_OK, every
delivery, every confirmed ack) is checked afterwards: each acknowledged send is received and acked at
least once, and no message whose ack was answered SUCCESS is lent again."""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.errors import RemotingError
from store import fastjson
from tests.dledger.test_group import elected_master, member_pid
from tests.dledger.test_roles import member_addrs, new_master, raft_group, topic_everywhere
from tests.support.broker import BrokerClient
from tests.support.pop import PopClient, Popped
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

TOPIC = "PopFo"
GROUP = "GPopFo"
FIFO_GROUP = "GPopFoFifo"
QUEUES = 2
#: Longer than a slave sync and the kill: on the old leader nothing expires into the retry topic.
INVISIBLE_MS = 40_000


@dataclass
class History:
    sent: set[bytes] = field(default_factory=set)  # SEND_OK
    delivered: list[tuple[bytes, str]] = field(default_factory=list)  # (body, broker address)
    acked: set[bytes] = field(default_factory=set)  # an ack answered SUCCESS

    def missing(self) -> set[bytes]:
        return self.sent - self.acked


async def group_offsets(on: BrokerClient) -> dict[str, dict[int, int]]:
    """The member's consumer offset table for both groups on TOPIC (what followers take from the
    leader)."""
    r = await on.call(RequestCode.GET_ALL_CONSUMER_OFFSET)
    assert r.code == ResponseCode.SUCCESS, r.remark
    table = fastjson.loads(r.body).get("offsetTable", {})
    return {
        g: {int(q): int(o) for q, o in table.get(f"{TOPIC}@{g}", {}).items()} for g in (GROUP, FIFO_GROUP)
    }


async def send(on: BrokerClient, history: History, body: bytes, queue: int) -> None:
    r = await on.send(TOPIC, body, queue_id=queue)
    assert r.code == ResponseCode.SUCCESS, r.remark
    history.sent.add(body)


async def ack(c: PopClient, history: History, p: Popped) -> None:
    try:
        r = await c.ack(TOPIC, p)
    except RemotingError:
        return
    if r.code == ResponseCode.SUCCESS:
        history.acked.add(p.body)


async def test_popped_and_unacked_messages_are_lent_again_by_the_new_leader(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    async with raft_group(tmp_path, cli_env) as (data, ns, client):
        old = BrokerClient(await elected_master(client, ns), client)
        await old.create_topic(TOPIC, QUEUES)
        await topic_everywhere(client, data, TOPIC)
        history = History()
        for i in range(20):
            await send(old, history, f"m{i}".encode(), i % QUEUES)
        consumer = PopClient(old, GROUP)
        lent: list[Popped] = []
        popped_at = time.monotonic()
        while len(lent) < 20:
            got = await consumer.pop(TOPIC, max_nums=8, invisible_ms=INVISIBLE_MS, poll_ms=500)
            assert got or len(lent) == 20, f"only {len(lent)} of 20 popped"
            lent += got
        for p in lent:
            history.delivered.append((p.body, old.addr))
        # acked out of order, every other one: each queue keeps unacked messages below acked ones
        for p in reversed(lent):
            if int(p.body[1:]) % 4 in (1, 2):
                await ack(consumer, history, p)
        assert len(history.acked) == 10
        unacked = {p.body for p in lent} - history.acked
        # a FIFO group holds queue 0 (its order lock): m2 acked, m0 and m4 not
        fifo = PopClient(old, FIFO_GROUP)
        held = await fifo.pop(TOPIC, queue_id=0, max_nums=3, order=True, invisible_ms=INVISIBLE_MS)
        assert [p.body for p in held] == [b"m0", b"m2", b"m4"]
        assert (await fifo.ack(TOPIC, held[1])).code == ResponseCode.SUCCESS

        # followers take the leader's offsets every 10 s: wait until both hold what the leader holds
        leader_table = await group_offsets(old)
        assert sorted(leader_table[GROUP]) == list(range(QUEUES)) and leader_table[FIFO_GROUP] == {0: 0}
        followers = [BrokerClient(a, client) for a in member_addrs(data) if a != old.addr]

        async def synced() -> bool:
            return all([await group_offsets(f) == leader_table for f in followers])

        await wait_until(synced, 40)
        print("offsets taken by the followers:", leader_table)
        assert time.monotonic() - popped_at < INVISIBLE_MS / 1000 - 5  # nothing revived by the old leader
        os.kill(member_pid(data, old.addr), signal.SIGKILL)
        new = BrokerClient(await new_master(client, ns, old.addr), client)
        for i in range(20, 26):
            await send(new, history, f"m{i}".encode(), i % QUEUES)

        # the FIFO group's lending of queue 0 was logged: the new leader keeps the queue lent until it
        # runs out (no second consumer gets m0 or anything after it meanwhile)
        fifo = PopClient(new, FIFO_GROUP)
        assert await fifo.pop(TOPIC, queue_id=0, max_nums=32, order=True, invisible_ms=30_000) == []

        consumer = PopClient(new, GROUP)
        deadline = popped_at + INVISIBLE_MS / 1000 + 30
        while history.missing() and time.monotonic() < deadline:
            got = await consumer.pop(TOPIC, max_nums=16, invisible_ms=30_000, poll_ms=1000)
            for p in got:
                history.delivered.append((p.body, new.addr))
                await ack(consumer, history, p)

        # then the same lending again, in order, less m2 (its ack was answered once the group's quorum
        # held its record), its attempt counted; once acked, the rest of the queue
        deadline = popped_at + INVISIBLE_MS / 1000 + 30
        again_fifo: list[Popped] = []
        while not again_fifo and time.monotonic() < deadline:
            again_fifo = await fifo.pop(TOPIC, queue_id=0, max_nums=32, order=True, poll_ms=1000)
        assert [(p.body, p.attempt) for p in again_fifo] == [(b"m0", 2), (b"m4", 2)]
        for p in again_fifo:
            assert (await fifo.ack(TOPIC, p)).code == ResponseCode.SUCCESS
        rest = await fifo.pop(TOPIC, queue_id=0, max_nums=32, order=True, invisible_ms=30_000)
        assert [p.body for p in rest] == [f"m{i}".encode() for i in range(6, 26, 2)]

    again = {b for b, addr in history.delivered if addr == new.addr}
    duplicates = sorted(b for b in again if b in {p.body for p in lent} - unacked)
    print(f"{len(history.sent)} sent, {len(history.delivered)} deliveries, duplicates after the failover:")
    print(b" ".join(duplicates).decode() or "none")
    assert not history.missing(), sorted(history.missing())
    assert unacked <= again  # each unacked one came back from the new leader
    assert not duplicates  # and no acked one
