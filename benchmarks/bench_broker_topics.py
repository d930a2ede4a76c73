"""Send throughput over many topics against one topic (issue 5: TPS with 10,000 topics >= 90 % of one).

Starts two clusters side by side (`mqctl namesrv start` + `mqctl broker start` each, on temporary stores,
benchmarks/bench_ali_ons.py's cluster): broker ONE holds one topic of Q queues, broker MANY holds N topics
of Q queues each, created first (`create_missing`, what `mqctl bench produce --topics` does), and every
queue of MANY gets its first message (that creates its ConsumeQueue file, a one-time cost reported on its
own). Then, with `mqctl bench produce`'s senders (16 synchronous producers, 1 KiB), ROUNDS rounds each
time COUNT sends to ONE, then COUNT sends round-robin over MANY's N*Q queues. Prints every round and the
ratio of the median TPS.

The rounds interleave because this machine drifts by more than the difference being measured: one
topic alone, in 2-s rounds over 52 s, ran anywhere from 17,200 to 20,500 sends/s, lower on the whole
towards the end. Measuring one topic first and N topics after it would charge that drift to the topic
count. The idle broker costs the measured one little: MANY scans its queues for flushing (2 ms a
second), syncs their files every 60 s (0.24 s, mostly waiting for the disk) and re-registers its
10,000 topics every 30 s (30 ms).

    python benchmarks/bench_broker_topics.py [--topics 10000] [--queues 1] [--count 50000] [--rounds 5]

Each queue holds one ConsumeQueue file mapped whole and Python's mmap keeps a descriptor per mapping,
so N*Q must stay below `ulimit -n` (20,000 here; RocketMQ needs one per file too).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from contextlib import ExitStack

from bench_ali_ons import cluster  # run as a script: benchmarks/ is on sys.path

from daemon.remoting.loop import run
from mqctl.admin.client import Admin
from mqctl.errors import NotFoundError
from mqctl.services.bench import BenchResult, produce, topic_names
from mqctl.services.topics import TopicSpec, create_missing


async def create(admin: Admin, prefix: str, topics: int, queues: int) -> float:
    """Seconds to create the topics (retried until the new broker has registered)."""
    while True:
        try:
            started = time.perf_counter()
            await create_missing(
                admin, [TopicSpec(name, queues, queues) for name in topic_names(prefix, topics)]
            )
            return time.perf_counter() - started
        except NotFoundError:
            await asyncio.sleep(0.1)


async def rounds(one_ns: str, many_ns: str, topics: int, queues: int, count: int, n_rounds: int) -> None:
    async with Admin([one_ns]) as one, Admin([many_ns]) as many:
        await create(one, "BenchOne", 1, queues)
        created = await create(many, "BenchMany", topics, queues)

        async def send(admin: Admin, prefix: str, n_topics: int, n: int) -> BenchResult:
            return await produce(
                admin, prefix, topics=n_topics, queues=queues, threads=16, size=1024, count=n
            )

        await send(one, "BenchOne", 1, count)  # warm-up
        first = await send(many, "BenchMany", topics, topics * queues)
        print(
            f"{topics:,} topics x {queues} queues: created in {created:.1f} s; first message to each of the "
            f"{topics * queues:,} queues: {first.seconds:.1f} s ({first.tps:,.0f} sends/s)"
        )
        results: dict[str, list[BenchResult]] = {"1 topic": [], f"{topics:,} topics": []}
        for r in range(n_rounds):
            a = await send(one, "BenchOne", 1, count)
            b = await send(many, "BenchMany", topics, count)
            results["1 topic"].append(a)
            results[f"{topics:,} topics"].append(b)
            print(
                f"round {r + 1}: 1 topic {line(a)} | {topics:,} topics {line(b)} | {100 * b.tps / a.tps:.0f} %"
            )
        medians = {label: statistics.median(r.tps for r in rs) for label, rs in results.items()}
        for label, tps in medians.items():
            print(f"median {label} x {queues} queues: {tps:,.0f} sends/s")
        one_tps, many_tps = medians.values()
        print(f"ratio: {100 * many_tps / one_tps:.0f} % of the one-topic TPS (medians of {n_rounds} rounds)")


def line(r: BenchResult) -> str:
    return f"{r.tps:,.0f}/s (avg RT {r.avg_rt_ms:.2f} ms, max {r.max_rt_ms:.1f} ms, {r.failures} failures)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--topics", type=int, default=10_000)
    ap.add_argument("--queues", type=int, default=1, help="queues per topic (both brokers)")
    ap.add_argument("--count", type=int, default=50_000, help="timed sends per broker per round")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    with ExitStack() as stack:
        one_ns, _ = stack.enter_context(cluster())
        many_ns, _ = stack.enter_context(cluster())
        run(rounds(one_ns, many_ns, args.topics, args.queues, args.count, args.rounds))


if __name__ == "__main__":
    main()
