"""A POP's cost by the topic's queue count: the broker's CPU for one pop of queue -1 (every queue) on an
empty topic, answered at once (poll 0) and held briefly then answered empty (poll 20 ms: parked on every
queue, then read again).

One broker in this process (its own store in a temporary directory); for each queue count in turn, rounds
interleaved: POPS pops, the thread's CPU (``time.thread_time``) divided by them. Compare trees A/B by running
this same file against each (``PYTHONPATH=TREE``, each with its own native build), interleaved:
``python benchmarks/tools/pop_queues.py [POPS] [ROUNDS] [QUEUES,...]``.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from store.models import SubscriptionGroupConfig, TopicConfig
from tests.support.broker import start_broker


async def _pops(broker: object, topic: str, count: int, poll_ms: int) -> float:
    pop = broker.pop  # type: ignore[attr-defined]
    started = time.thread_time()
    for _ in range(count):
        found = await pop.pop(
            group="GBench",
            topic=topic,
            queue_id=-1,
            max_messages=32,
            invisible_ms=30_000,
            poll_ms=poll_ms,
            fifo=False,
            expression_type="TAG",
            expression="*",
        )
        assert not found
    return (time.thread_time() - started) / count


async def main(pops: int, rounds: int, queues: list[int]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        broker = await start_broker(Path(tmp) / "store")
        try:
            broker.groups.put(SubscriptionGroupConfig("GBench"))
            for q in queues:
                broker.topics.file.update(TopicConfig(f"Q{q}", q, q))
            figures: dict[tuple[int, int], list[float]] = {}
            for _ in range(rounds):
                for q in queues:
                    for poll in (0, 20):
                        n = pops if poll == 0 else max(1, pops // 10)
                        figures.setdefault((q, poll), []).append(await _pops(broker, f"Q{q}", n, poll))
            with open("/proc/loadavg") as f:
                load = f.read().split()[:3]
            print(f"load {' '.join(load)}; median of {rounds} rounds, broker thread CPU per pop")
            for (q, poll), values in sorted(figures.items()):
                print(f"queues {q:5d} poll {poll:2d} ms: {statistics.median(values) * 1e6:9.1f} us")
        finally:
            await broker.stop()


if __name__ == "__main__":
    args = sys.argv[1:]
    asyncio.run(
        main(
            int(args[0]) if args else 200,
            int(args[1]) if len(args) > 1 else 5,
            [int(x) for x in args[2].split(",")] if len(args) > 2 else [8, 256, 1024],
        )
    )
