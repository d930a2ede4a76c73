"""Send throughput over many topics against one topic (goal: TPS with 10,000 topics >= 95 % of one).

Starts two clusters side by side (`mqctl namesrv start` + `mqctl broker start` each, on temporary stores,
benchmarks/bench_ali_ons.py's cluster): broker ONE holds one topic of Q queues, broker MANY holds N topics
of Q queues each, created first (`create_missing`, what `mqctl bench produce --topics` does), and every
queue of MANY gets its first message (that creates its ConsumeQueue file, a one-time cost reported on its
own). The senders are `mqctl bench produce`'s (16 synchronous producers, 1 KiB), their routes looked up
and frames encoded once per broker (`produce_slots`), so a round times sends alone. After a warm-up round
of each, ROUNDS rounds each time COUNT sends to ONE, then COUNT sends round-robin over MANY's N*Q queues.
Prints every round with the broker's CPU per send (utime + stime over the round, divided by its sends)
and the senders' (this process's CPU), which the machine's drift moves far less than TPS, and the broker's
page faults in the round; the median of the rounds' ratios (the figure), the ratio of the median TPS, and
the load average over the rounds. The faults tell a round that paid for writeback: once the kernel has
written a queue's dirty ConsumeQueue page back (30 s after it was first dirtied, or the broker's thorough
flush every 60 s), the next store into it is a write fault, so MANY's first round after that takes one per
queue where ONE's takes a handful; the median of the ratios leaves such rounds out.

The rounds interleave because this machine drifts by more than the difference being measured: one
topic alone, in 2-s rounds over 52 s, ran anywhere from 17,200 to 20,500 sends/s, lower on the whole
towards the end. Measuring one topic first and N topics after it would charge that drift to the topic
count. Which broker goes first alternates from round to round, and the figure is the median of each
round's ratio, over 7 rounds by default (3 before 2026-11-29: one slow round of three moved it by 10 %).
The idle broker costs the measured one little: MANY flushes only the queues past the least pages, syncs
every file every 60 s (mostly waiting for the disk) and re-registers its topics every 30 s (the body's
text kept between encodings; a NameServer that holds its version reads no table).

    python benchmarks/bench_broker_topics.py [--topics 10000] [--queues 1] [--count 50000] [--rounds 7]

Each queue holds one ConsumeQueue file mapped whole and Python's mmap keeps a descriptor per mapping,
so N*Q must stay below `ulimit -n` (20,000 here; RocketMQ needs one per file too).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from contextlib import ExitStack
from dataclasses import dataclass

from bench_ali_ons import cluster, cpu_seconds, stat_fields  # run as a script: benchmarks/ is on sys.path
from benchlib import summary  # run as a script: benchmarks/ is on sys.path

from daemon.remoting.loop import run
from mqctl.admin.client import Admin
from mqctl.errors import NotFoundError
from mqctl.services.bench import BenchResult, Slot, produce_slots, produce_to, topic_names
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
        # routed and encoded once: each round's sends alone are timed, with no 10,000 route queries
        # before them (the NameServer answering them, the sender's heap grown) as produce() does per call
        one_slots = await produce_slots(one_admin, "BenchOne", topics=1, size=1024, queues=queues)
        many_slots = await produce_slots(many_admin, "BenchMany", topics=topics, size=1024, queues=queues)

        async def timed(slots: list[Slot], pid: int, n: int) -> Side:
            """A round, with the broker's and this process's (the senders') CPU µs per send."""
            cpu, own, faults = cpu_seconds(pid), time.process_time(), int(stat_fields(pid)[7])
            result = await produce_to(slots, threads=16, count=n)
            sends = max(result.messages, 1)
            return Side(
                result,
                (cpu_seconds(pid) - cpu) / sends * 1e6,
                (time.process_time() - own) / sends * 1e6,
                int(stat_fields(pid)[7]) - faults,
            )

        await timed(one_slots, one_pid, count)  # warm-up
        first = await timed(many_slots, many_pid, topics * queues)
        print(
            f"{topics:,} topics x {queues} queues: created in {created:.1f} s; first message to each of the "
            f"{topics * queues:,} queues: {first.result.seconds:.1f} s ({first.result.tps:,.0f} sends/s)"
        )
        await timed(many_slots, many_pid, count)  # warm-up: every queue's state touched again
        loads = [os.getloadavg()[0]]
        sides: dict[str, list[Side]] = {"1 topic": [], f"{topics:,} topics": []}
        for r in range(n_rounds):
            # which broker goes first alternates, so what a run leaves behind (dirty pages for the kernel to
            # write back, the sender's heap, a cold cache) is not always charged to MANY
            if r % 2 == 0:
                a = await timed(one_slots, one_pid, count)
                b = await timed(many_slots, many_pid, count)
            else:
                b = await timed(many_slots, many_pid, count)
                a = await timed(one_slots, one_pid, count)
            sides["1 topic"].append(a)
            sides[f"{topics:,} topics"].append(b)
            loads.append(os.getloadavg()[0])
            print(
                f"round {r + 1} ({'1 topic' if r % 2 == 0 else f'{topics:,} topics'} first, load "
                f"{loads[-1]:.1f}): 1 topic {a} | {topics:,} topics {b} | {100 * b.result.tps / a.result.tps:.0f} %"
            )
        medians = {
            label: (
                statistics.median(s.result.tps for s in rs),
                statistics.median(s.broker_us for s in rs),
                statistics.median(s.client_us for s in rs),
            )
            for label, rs in sides.items()
        }
        for label, (tps, cpu, client) in medians.items():
            print(
                f"median {label} x {queues} queues: {tps:,.0f} sends/s, broker {cpu:.1f} CPU-us/send, "
                f"senders {client:.1f} CPU-us/send"
            )
        (one_tps, one_cpu, one_client), (many_tps, many_cpu, many_client) = medians.values()
        print(
            f"ratio of the medians: {100 * many_tps / one_tps:.0f} % of the one-topic TPS ({n_rounds} rounds)"
        )
        paired = [b.result.tps / a.result.tps for a, b in zip(*sides.values(), strict=True)]
        print(
            f"within each round: {', '.join(f'{100 * x:.0f} %' for x in paired)}: "
            f"median {100 * statistics.median(paired):.0f} %"
        )
        print(
            f"CPU-bound capacity: {100 * one_cpu / many_cpu:.0f} % of one topic's (broker CPU per send), "
            f"{100 * (one_cpu + one_client) / (many_cpu + many_client):.0f} % (broker and senders)"
        )
        print(f"load average (1 min) over the rounds: {min(loads):.1f}-{max(loads):.1f}")
        summary(
            __file__,
            f"ratio {statistics.median(paired):.2f}",
            f"{topics:,} topics against 1, median of {n_rounds} rounds' ratios; 1 topic {one_tps:,.0f}/s, "
            f"{topics:,} topics {many_tps:,.0f}/s; broker {one_cpu:.1f} / {many_cpu:.1f} CPU-us per send",
        )


@dataclass
class Side:
    """One broker's round: the result, its broker's CPU µs per send and the senders' (this process), and the
    broker's page faults."""

    result: BenchResult
    broker_us: float
    client_us: float
    broker_faults: int  # page faults of the broker process over the round

    def __str__(self) -> str:
        r = self.result
        return (
            f"{r.tps:,.0f}/s (avg RT {r.avg_rt_ms:.2f} ms, max {r.max_rt_ms:.1f} ms, {r.failures} failures, "
            f"broker {self.broker_us:.1f} CPU-us, {self.broker_faults:,} faults, senders {self.client_us:.1f})"
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
    ap.add_argument(
        "--rounds",
        type=int,
        default=7,
        help="interleaved rounds (the figure is the median of their ratios: one slow round cannot decide it)",
    )
    args = ap.parse_args()
    with ExitStack() as stack:
        one = stack.enter_context(cluster())
        many = stack.enter_context(cluster())
        run(rounds(one, many, args.topics, args.queues, args.count, args.rounds))


if __name__ == "__main__":
    main()
