"""What a broker's periodic work costs its event loop with many topics, each written (in-process).

    PYTHONPATH=TREE python benchmarks/tools/periodic_cost.py [--topics 10000] [--idle 35]

A broker runs in this process on a temporary store, filled as ``bench_send_path`` fills it (TOPICS one-queue
topics, each sent to). Every topic is then sent to once more, so that each stats item was counted into since
the last tick and each queue was written, as in `bench_broker_topics`' rounds, and the loop thread's CPU
(``time.thread_time``) is read for each periodic pass that visits the topics: the stats tick and its roll of
the items counted into (three ticks, the stats clock moved a period on each), the registration body (made
once, then kept while the table is unchanged) and consumerOffset.json's persistence. Last, the loop is left
idle for IDLE seconds after one more send to every topic, its periodic tasks running as in a daemon (the
registration's send aside: no NameServer), and its CPU is printed each second with each thread's total.
Run it with ``--topics 1`` for the one-topic broker's figures; a pass's cost over the sends between two
passes is its share of a send.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # benchmarks/

from bench_send_path import _send_round, filled

from store.native import describe_build


def _threads() -> dict[tuple[int, str], int]:
    """(thread id, name) -> nanoseconds on a CPU, for each of this process's threads."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            name = Path(f"/proc/self/task/{tid}/comm").read_text().strip()
            ns = int(Path(f"/proc/self/task/{tid}/schedstat").read_text().split()[0])
        except OSError:
            continue
        out[(int(tid), name)] = ns
    return out


def _ms(since: int) -> float:
    return (time.thread_time_ns() - since) / 1e6


async def measure(topics: int, idle: int) -> None:
    async with filled(topics, 2_000) as (processor, _one, many, body):
        broker = processor.broker
        stats = broker.stats
        real_now = stats._now
        base = real_now()
        for tick in range(3):
            _send_round(processor, many, body, len(many))
            stats._now = lambda at=base + 10.0 * (tick + 1): at
            started = time.thread_time_ns()
            stats.sample()
            slices = 1
            while stats.roll(500):
                slices += 1
            print(
                f"stats tick and roll after a count into every item: {_ms(started):.2f} ms ({slices} slices)"
            )
        stats._now = real_now
        for what in ("made", "kept"):
            started = time.thread_time_ns()
            await broker._registration_body(None, False)
            print(f"registration body, {what}: {_ms(started):.3f} ms")
        started = time.thread_time_ns()
        await broker._persist_offsets()
        print(f"consumer offsets' persistence, nothing changed: {_ms(started):.3f} ms")
        _send_round(processor, many, body, len(many))
        main = os.getpid()
        before = _threads()
        last = next(ns for (tid, _), ns in before.items() if tid == main)
        seconds = []
        for _ in range(idle):
            await asyncio.sleep(1)
            now = next(ns for (tid, _), ns in _threads().items() if tid == main)
            seconds.append((now - last) / 1e6)
            last = now
        print("idle loop, ms of CPU each second:", " ".join(f"{s:.1f}" for s in seconds))
        for (tid, name), ns in sorted(_threads().items()):
            spent = (ns - before.get((tid, name), 0)) / 1e6
            if spent >= 0.5:
                print(
                    f"  thread {tid}{' (loop)' if tid == main else ''} {name}: {spent:.1f} ms over {idle} s"
                )
        print(f"{topics} topics; {describe_build()}; load {os.getloadavg()[0]:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, default=10_000)
    parser.add_argument("--idle", type=int, default=35, help="seconds of the idle loop to read")
    args = parser.parse_args()
    asyncio.run(measure(args.topics, args.idle))


if __name__ == "__main__":
    main()
