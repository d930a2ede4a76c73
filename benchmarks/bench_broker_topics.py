"""Send throughput over many topics against one topic (goal: TPS with 10,000 topics >= 90 % of one).

Starts two clusters side by side (`mqctl namesrv start` + `mqctl broker start` each, on temporary stores,
benchmarks/bench_ali_ons.py's cluster): broker ONE holds one topic of Q queues, broker MANY holds N topics
of Q queues each, created first (`create_missing`, what `mqctl bench produce --topics` does), and every
queue of MANY gets its first message (that creates its ConsumeQueue file, a one-time cost reported on its
own). Then, with `mqctl bench produce`'s senders (16 synchronous producers, 1 KiB), ROUNDS rounds each
time COUNT sends to ONE, then COUNT sends round-robin over MANY's N*Q queues. Prints every round, the
ratio of the median TPS, and the ratio of the median broker CPU per send (utime + stime of the broker over
the round, divided by its sends), which the machine's drift moves far less than TPS.

The rounds interleave because this machine drifts by more than the difference being measured: one
topic alone, in 2-s rounds over 52 s, ran anywhere from 17,200 to 20,500 sends/s, lower on the whole
towards the end. Measuring one topic first and N topics after it would charge that drift to the topic
count. Which broker goes first alternates from round to round, and each round's ratio is printed with
their median (the figure least exposed to drift, next to the ratio of the medians). The idle broker costs
the measured one little: MANY flushes only the queues written since its last flush, syncs every file every
60 s (mostly waiting for the disk) and re-registers its topics every 30 s (the body's text kept between
encodings; a NameServer that holds its version reads no table).

    python benchmarks/bench_broker_topics.py [--topics 10000] [--queues 1] [--count 10000] [--rounds 3]

Each queue holds one ConsumeQueue file mapped whole and Python's mmap keeps a descriptor per mapping,
so N*Q must stay below `ulimit -n` (20,000 here; RocketMQ needs one per file too).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from contextlib import ExitStack

from bench_ali_ons import cluster, cpu_seconds  # run as a script: benchmarks/ is on sys.path
from benchlib import summary  # run as a script: benchmarks/ is on sys.path

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


async def rounds(
    one: tuple[str, int], many: tuple[str, int], topics: int, queues: int, count: int, n_rounds: int
) -> None:
    (one_ns, one_pid), (many_ns, many_pid) = one, many
    async with Admin([one_ns]) as one_admin, Admin([many_ns]) as many_admin:
        await create(one_admin, "BenchOne", 1, queues)
        created = await create(many_admin, "BenchMany", topics, queues)

        async def send(admin: Admin, prefix: str, n_topics: int, n: int) -> BenchResult:
            return await produce(
                admin, prefix, topics=n_topics, queues=queues, threads=16, size=1024, count=n
            )

        async def timed(admin: Admin, pid: int, prefix: str, n_topics: int) -> tuple[BenchResult, float]:
            """A round and its broker's CPU µs per send, which the machine's drift moves far less."""
            cpu = cpu_seconds(pid)
            result = await send(admin, prefix, n_topics, count)
            return result, (cpu_seconds(pid) - cpu) / max(result.messages, 1) * 1e6

        await send(one_admin, "BenchOne", 1, count)  # warm-up
        first = await send(many_admin, "BenchMany", topics, topics * queues)
        print(
            f"{topics:,} topics x {queues} queues: created in {created:.1f} s; first message to each of the "
            f"{topics * queues:,} queues: {first.seconds:.1f} s ({first.tps:,.0f} sends/s)"
        )
        results: dict[str, list[tuple[BenchResult, float]]] = {"1 topic": [], f"{topics:,} topics": []}
        for r in range(n_rounds):
            # which broker goes first alternates, so what a run leaves behind (dirty pages for the kernel to
            # write back, the sender's heap, a cold cache) is not always charged to MANY
            if r % 2 == 0:
                a, a_cpu = await timed(one_admin, one_pid, "BenchOne", 1)
                b, b_cpu = await timed(many_admin, many_pid, "BenchMany", topics)
            else:
                b, b_cpu = await timed(many_admin, many_pid, "BenchMany", topics)
                a, a_cpu = await timed(one_admin, one_pid, "BenchOne", 1)
            results["1 topic"].append((a, a_cpu))
            results[f"{topics:,} topics"].append((b, b_cpu))
            print(
                f"round {r + 1} ({'1 topic' if r % 2 == 0 else f'{topics:,} topics'} first): "
                f"1 topic {line(a, a_cpu)} | {topics:,} topics {line(b, b_cpu)} | {100 * b.tps / a.tps:.0f} %"
            )
        medians = {
            label: (statistics.median(r.tps for r, _ in rs), statistics.median(c for _, c in rs))
            for label, rs in results.items()
        }
        for label, (tps, cpu) in medians.items():
            print(f"median {label} x {queues} queues: {tps:,.0f} sends/s, broker {cpu:.1f} CPU-us/send")
        (one_tps, one_cpu), (many_tps, many_cpu) = medians.values()
        print(f"ratio: {100 * many_tps / one_tps:.0f} % of the one-topic TPS (medians of {n_rounds} rounds)")
        paired = [b.tps / a.tps for (a, _), (b, _) in zip(*results.values(), strict=True)]
        print(
            f"within each round: {', '.join(f'{100 * x:.0f} %' for x in paired)}: "
            f"median {100 * statistics.median(paired):.0f} %"
        )
        print(f"CPU-bound capacity: {100 * one_cpu / many_cpu:.0f} % of one topic's (broker CPU per send)")
        summary(
            __file__,
            f"ratio {statistics.median(paired):.2f}",
            f"{topics:,} topics against 1, median of {n_rounds} rounds; 1 topic {one_tps:,.0f}/s, "
            f"{topics:,} topics {many_tps:,.0f}/s",
        )


def line(r: BenchResult, cpu: float) -> str:
    return (
        f"{r.tps:,.0f}/s (avg RT {r.avg_rt_ms:.2f} ms, max {r.max_rt_ms:.1f} ms, {r.failures} failures, "
        f"{cpu:.1f} CPU-us)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--topics", type=int, default=10_000)
    ap.add_argument("--queues", type=int, default=1, help="queues per topic (both brokers)")
    ap.add_argument(
        "--count",
        type=int,
        default=50_000,
        help="timed sends per broker per round (fewer leave the many-topic side cold: each queue sent to once or twice)",
    )
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with ExitStack() as stack:
        one = stack.enter_context(cluster())
        many = stack.enter_context(cluster())
        run(rounds(one, many, args.topics, args.queues, args.count, args.rounds))


if __name__ == "__main__":
    main()
