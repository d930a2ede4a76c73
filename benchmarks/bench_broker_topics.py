"""Send throughput over many topics against one topic (issue 5: TPS with 10,000 topics >= 90 % of one).

Starts `mqctl namesrv start` + `mqctl broker start` on a temporary store (benchmarks/bench_ali_ons.py's
cluster), then with `mqctl bench produce`'s senders (16 synchronous producers, 1 KiB):
1. one topic of Q queues: a warm-up pass, then COUNT sends timed;
2. N topics of Q queues each: their creation timed (`create_missing`, what `--topics` does), a first pass
   that writes every queue once (each queue's first message creates its ConsumeQueue file, a one-time
   cost reported on its own), then COUNT sends round-robin over all N*Q queues timed.
Prints both TPS figures and their ratio.

    python benchmarks/bench_broker_topics.py [--topics 10000] [--queues 1] [--count 200000]

Each queue holds one ConsumeQueue file mapped whole and Python's mmap keeps a descriptor per mapping,
so N*Q must stay below `ulimit -n` (20,000 here; RocketMQ needs one per file too).
"""

from __future__ import annotations

import argparse
import asyncio
import time

from bench_ali_ons import cluster  # run as a script: benchmarks/ is on sys.path

from daemon.remoting.loop import run
from mqctl.admin.client import Admin
from mqctl.errors import NotFoundError
from mqctl.services.bench import BenchResult, produce, topic_names
from mqctl.services.topics import TopicSpec, create_missing


async def timed_topics(ns: str, prefix: str, topics: int, queues: int, count: int) -> tuple[float, BenchResult, BenchResult]:
    """Seconds to create the topics, the first pass over every queue, and the timed run."""
    async with Admin([ns]) as admin:
        while True:  # the broker registers just after it starts answering
            try:
                started = time.perf_counter()
                await create_missing(admin, [TopicSpec(name, queues, queues) for name in topic_names(prefix, topics)])
                created = time.perf_counter() - started
                break
            except NotFoundError:
                await asyncio.sleep(0.1)

        async def send(n: int) -> BenchResult:
            return await produce(admin, prefix, topics=topics, queues=queues, threads=16, size=1024, count=n)

        first = await send(topics * queues)
        return created, first, await send(count)


def line(label: str, r: BenchResult) -> str:
    return f"{label}: {r.tps:,.0f} sends/s, avg RT {r.avg_rt_ms:.2f} ms, max RT {r.max_rt_ms:.1f} ms, {r.failures} failures"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--topics", type=int, default=10_000)
    ap.add_argument("--queues", type=int, default=1, help="queues per topic (both runs)")
    ap.add_argument("--count", type=int, default=200_000, help="timed sends per run")
    args = ap.parse_args()
    with cluster() as (ns, _):
        _, _, one = run(timed_topics(ns, "BenchOne", 1, args.queues, args.count))  # first pass: a warm-up
        created, first, many = run(timed_topics(ns, "BenchMany", args.topics, args.queues, args.count))
    queues = args.topics * args.queues
    print(line(f"1 topic x {args.queues} queues", one))
    print(f"{args.topics:,} topics x {args.queues} queues: created in {created:.1f} s; "
          f"first message to each of the {queues:,} queues: {first.seconds:.1f} s ({first.tps:,.0f} sends/s)")
    print(line(f"{args.topics:,} topics x {args.queues} queues", many))
    print(f"ratio: {100 * many.tps / one.tps:.0f} % of the one-topic TPS")


if __name__ == "__main__":
    main()
