"""A 4.x pulling consumer's committed offsets across a DLedger failover: the consumer pulls each queue
from the registered master and commits where it is (UPDATE_CONSUMER_OFFSET, as RemoteBrokerOffsetStore
does) while the leader is killed, frozen past the election timeout, or cut off its peers. Then a consumer
started afresh reads the offsets the new leader holds: none past a message the group was not served
(that would skip it), none behind what the new leader held as a follower before the fault (its synced
table is not dropped by its election), and from there every SEND_OK is consumed (at least once)."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from pathlib import Path

import pytest

from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import ResponseCode
from mqctl.admin.client import Admin
from store.record import decode_records
from tests.jepsen.client import digest, master_of
from tests.jepsen.harness import running
from tests.jepsen.raft import QUEUES, TOPIC, RaftGroup, activity, raft_group
from tests.jepsen.test_dledger import assert_consistent, writes_resume
from tests.support.broker import BrokerClient
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

GROUP = "JepsenOffsets"


class OffsetConsumer:
    """Pulls every queue from the master the NameServer lists, commits the next offset after each pull
    that served messages, and records what it was served. ``restart`` forgets where it is: it reads the
    offsets the master holds, as a consumer started afresh does."""

    def __init__(self, g: RaftGroup) -> None:
        self.g = g
        self.client = RemotingClient()
        self.admin = Admin([g.namesrv], client=self.client)
        self.next: dict[int, int] = {}
        self.served: dict[int, set[int]] = defaultdict(set)
        self.values: set[str] = set()
        self.started_at: list[dict[int, int]] = []  # the offsets each (re)start read, from the master
        self.paused = asyncio.Event()

    async def restart(self) -> dict[int, int]:
        """Read the master's committed offsets (QUERY_CONSUMER_OFFSET); where this consumer goes on."""
        addr = await master_of(self.client, self.g.namesrv, TOPIC)
        assert addr is not None
        found = {}
        for q in range(QUEUES):
            offset = await self.admin.consumer_offset(addr, GROUP, TOPIC, q)
            found[q] = 0 if offset is None else offset
        self.next = dict(found)
        self.started_at.append(found)
        return found

    async def _round(self) -> int:
        addr = await master_of(self.client, self.g.namesrv, TOPIC)
        if addr is None:
            return 0
        broker = BrokerClient(addr, self.client)
        got = 0
        for q in range(QUEUES):
            r = await broker.pull(GROUP, TOPIC, q, self.next.get(q, 0), max_nums=32, timeout=1.0)
            if r.code != ResponseCode.SUCCESS:
                continue
            for m in decode_records(r.body):
                self.served[q].add(m.queue_offset)
                self.values.add(digest(m.body))
                got += 1
            self.next[q] = int(r.ext_fields["nextBeginOffset"])
            await self.admin.commit_offset(addr, GROUP, TOPIC, q, self.next[q])
        return got

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            if self.paused.is_set():
                await asyncio.sleep(0.05)
                continue
            try:
                got = await self._round()
            except Exception:  # the master killed, frozen or gone: the next round looks it up again
                got = 0
            if not got:
                await asyncio.sleep(0.2)

    def skipped(self, start: dict[int, int]) -> dict[int, tuple[int, int]]:
        """Queues whose offset ``start`` is past a message never served: {queue: (offset, first unserved)}."""
        out = {}
        for q, offset in start.items():
            unserved = next((o for o in range(offset) if o not in self.served[q]), None)
            if unserved is not None:
                out[q] = (offset, unserved)
        return out

    async def close(self) -> None:
        await self.client.close()


@pytest.mark.parametrize("fault", ["kill", "pause", "cut"])
async def test_a_consumers_committed_offsets_across_a_failover(
    tmp_path: Path, cli_env: dict[str, str], fault: str
) -> None:
    async with raft_group(tmp_path, cli_env) as g:
        consumer = OffsetConsumer(g)
        old = await g.leader()
        try:
            async with running([*activity(g), consumer]):
                await g.acked_at_least(60)
                await wait_until(lambda: sum(map(len, consumer.served.values())) >= 40, 30, g.evidence)
                # what the followers hold (their sync from the master, every 10 s): wait for a synced table
                held: dict[int, dict[int, int]] = {}

                async def synced() -> bool:
                    for i, node in enumerate(g.nodes):
                        if i == old:
                            continue
                        table = await consumer.admin.all_consumer_offsets(node.addr)
                        mine = {q: o for (grp, t, q), o in table.items() if grp == GROUP and t == TOPIC}
                        if not mine:
                            return False
                        held[i] = mine
                    return True

                await wait_until(synced, 40, g.evidence)
                if fault == "kill":
                    g.nemesis.kill(g.nodes[old])
                    mark = g.history.last("kill")
                elif fault == "pause":
                    mark = g.nemesis.pause(g.nodes[old])
                else:
                    mark = g.isolate(old, "refuse")
                new = await g.leader(other_than=old)
                await writes_resume(g, mark)
                consumer.paused.set()
                await asyncio.sleep(0.5)  # (a round in hand ends)
                start = await consumer.restart()
                consumer.paused.clear()
                assert consumer.skipped(start) == {}, f"skips unserved messages: {consumer.skipped(start)}"
                behind = {q: (start[q], o) for q, o in held[new].items() if start[q] < o}
                assert not behind, f"new leader n{new} went back from what it held: {behind}"
                if fault == "kill":
                    g.nemesis.restart(g.nodes[old])
                    await g.nodes[old].ready(g.client)
                    back = g.history.last("restart")
                elif fault == "pause":
                    back = g.nemesis.resume(g.nodes[old])
                else:
                    back = g.heal(old)
                await writes_resume(g, back)
                for p in g.producers:
                    p.resumed.clear()

                def unconsumed() -> set[str]:
                    acked = {op.value for op in g.history.ops if op.f == "send" and op.type == "ok"}
                    return acked - consumer.values

                await wait_until(lambda: not unconsumed(), 60, lambda: f"not consumed: {len(unconsumed())}")
                for p in g.producers:
                    p.resumed.set()
            await assert_consistent(g)
        finally:
            await consumer.close()
