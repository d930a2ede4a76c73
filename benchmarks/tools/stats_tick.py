"""What the stats windows cost a count into one of many topics' items, with and without a tick before.

    PYTHONPATH=TREE python benchmarks/tools/stats_tick.py [--topics 10000] [--rounds 7]

A `BrokerStats` in-process (the tree's build, compiled where it is made) holds TOPICS topics' put items,
each counted into once. Each round first walks a 25 MB array (so that the items are as cold as between
two sends to the same topic of thousands), then takes a tick with the stats clock moved a period on and
the tree's `roll` of it where it has one, then counts once into each topic's items in turn
(`on_put_counts`, as a send does; `on_put_items` in a tree before it); a second round counts without a tick before it. Prints, per topic and
median over the rounds, the loop thread's CPU (``time.thread_time``) of the tick and its roll, of the
counts after it, their sum, and of the counts of a round without a tick. A CPU-time figure, so the host's
load moves it: compare trees interleaved, run by run.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import time

from daemon.broker.stats import BrokerStats
from store.native import describe_build


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--topics", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    clock = [1000.0]
    stats = BrokerStats("C")
    stats._now = lambda: clock[0]
    items = [stats.put_items(f"T{i}") for i in range(args.topics)]
    on_put_items = getattr(stats, "on_put_items", None)  # (a tree before on_put_counts)

    def count(kept: tuple[object, ...]) -> None:
        if on_put_items is not None:
            on_put_items(kept, 1, 1024, 100_000)
        else:
            stats.on_put_counts(kept[0], kept[1], 1, 1024, 100_000)

    for kept in items:
        count(kept)
    cold = bytearray(25 << 20)
    gc.freeze()
    roll = getattr(stats, "roll", None)

    def round_(tick: bool) -> tuple[float, float]:
        cold[::64] = bytes(len(cold[::64]))  # every line written: the items leave the caches
        start = time.thread_time()
        if tick:
            clock[0] += 10.0
            stats.sample()
            while roll is not None and roll(500):
                pass
        ticked = time.thread_time()
        for kept in items:
            count(kept)
        done = time.thread_time()
        return (ticked - start) * 1e6 / len(items), (done - ticked) * 1e6 / len(items)

    round_(True)
    after, alone = [], []
    for _ in range(args.rounds):
        after.append(round_(True))
        alone.append(round_(False)[1])
    med = statistics.median
    print(
        f"{describe_build()}; µs a topic, after a tick: tick and roll {med(a for a, _ in after):.3f}, counts "
        f"{med(c for _, c in after):.3f}, both {med(a + c for a, c in after):.3f}; without a tick: counts "
        f"{med(alone):.3f}; load {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
