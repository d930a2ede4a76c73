"""Send throughput over many topics against one topic (goal: TPS with 10,000 topics >= 95 % of one).

Starts two clusters side by side (`mqctl namesrv start` + `mqctl broker start` each, on temporary stores,
benchmarks/bench_ali_ons.py's cluster): broker ONE holds one topic of Q queues, broker MANY holds N topics
of Q queues each, created first (`create_missing`, what `mqctl bench produce --topics` does), and every
queue of MANY gets its first message (that creates its ConsumeQueue file, a one-time cost reported on its
own). The senders are `mqctl bench produce`'s (16 synchronous producers, 1 KiB), their routes looked up
and frames encoded once per broker (`produce_slots`), so a round times sends alone. Right before the rounds
a warm-up of each side (MANY's touches every queue again), then ROUNDS rounds, each COUNT sends to ONE and
COUNT sends round-robin over MANY's N*Q queues, each side's COUNT in PIECES pieces taken in ABBA BAAB order
(BAAB ABBA in the next round); each side's 16 senders keep their connections from piece to piece, and each
piece goes on round the queues where the side's last one stopped. Prints every round with the broker's CPU
per send (its threads' schedstat over its pieces, divided by their sends; its event loop's thread apart),
the senders' (this process's CPU), which the machine's drift moves far less than TPS, and the broker's page
faults; the median of the rounds' ratios (the figure) with their interquartile range, the same rounds by
CPU a send (one topic's broker and senders' CPU a send over 10,000 topics': the ratio a machine that gave
both sides the same CPU would show, the steadier figure on a shared host), the ratio of the median TPS, all
rounds pooled (each side's sends over its seconds,
and its CPU by where it ran: the broker's loop, its other threads, the senders, whose share of the gap is
the load generator's and not the broker's), and the load average over the rounds. The faults tell a round
that paid for writeback: once the kernel has written a queue's dirty ConsumeQueue page back (30 s after it
was first dirtied, or the broker's thorough flush every 60 s), the next store into it is a write fault, so
MANY's first round after that takes one per queue where ONE's takes a handful. That writeback runs on the
wall clock, so MANY, sent to half the time, meets about as many of them a second as a broker sent to all
the time, over half the sends.

The rounds interleave because this machine drifts by more than the difference being measured: one
topic alone, in 2-s rounds over 52 s, ran anywhere from 17,200 to 20,500 sends/s, lower on the whole
towards the end, and the host's other work comes in bursts of seconds. Measuring one topic first and N
topics after it would charge that drift to the topic count; one block of each side a round (`--pieces 1`,
the method before 2026-12-01) charged a burst to whichever side it fell in, and rounds spread from half to
one and a half times the other side. Pieces of a second or so in ABBA order put both sides in the same
stretch of the host's time, a linear drift cancels within each round, and the figure stays the median of
each round's ratio, over 7 rounds by default (3 before 2026-11-29: one slow round of three moved it by 10 %).
The host's other work also moves a piece's CPU a send (a neighbour's burst evicts MANY's queues from the
shared cache), so the pieces are short by default: 32 a side a round, a tenth of a second or two each, which
needs the kept connections and the queues taken on (before, a piece opened 16 connections and began at the
first queue: a piece shorter than the queues sent to the same ones every time). On a busy host the rounds'
TPS still spread with the CPU the host leaves the benchmark by the second: read the CPU ratio beside the
figure (docs/performance.md, "The 10,000-topics ratio on a busy host").
The idle broker costs the measured one little: MANY flushes only the queues past the least pages, syncs
every file every 60 s (mostly waiting for the disk) and re-registers its topics every 30 s (the body's
text kept between encodings; a NameServer that holds its version reads no table).

    python benchmarks/bench_broker_topics.py [--topics 10000] [--queues 1] [--count 50000] [--rounds 7] [--pieces 32]

Each queue holds one ConsumeQueue file mapped whole and Python's mmap keeps a descriptor per mapping,
so N*Q must stay below `ulimit -n` (20,000 here; RocketMQ needs one per file too).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from bench_ali_ons import cluster, stat_fields  # run as a script: benchmarks/ is on sys.path
from benchlib import summary  # run as a script: benchmarks/ is on sys.path

from daemon.remoting.loop import run
from mqctl.admin.client import Admin
from mqctl.errors import NotFoundError
from mqctl.services.bench import Slot, Streams, close_streams, produce_slots, produce_to, topic_names
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
    one: tuple[str, int],
    many: tuple[str, int],
    topics: int,
    queues: int,
    count: int,
    n_rounds: int,
    pieces: int,
) -> None:
    (one_ns, one_pid), (many_ns, many_pid) = one, many
    async with Admin([one_ns]) as one_admin, Admin([many_ns]) as many_admin:
        await create(one_admin, "BenchOne", 1, queues)
        created = await create(many_admin, "BenchMany", topics, queues)
        # routed and encoded once: each round's sends alone are timed, with no 10,000 route queries
        # before them (the NameServer answering them, the sender's heap grown) as produce() does per call
        one_slots = await produce_slots(one_admin, "BenchOne", topics=1, size=1024, queues=queues)
        many_slots = await produce_slots(many_admin, "BenchMany", topics=topics, size=1024, queues=queues)

        # each side's senders keep their connections from piece to piece, and each piece goes on round the
        # slots where the last one stopped: a piece is then only its sends, however short
        pools: dict[int, list[Streams]] = {
            one_pid: [{} for _ in range(16)],
            many_pid: [{} for _ in range(16)],
        }
        cursors = {one_pid: 0, many_pid: 0}

        async def timed(slots: list[Slot], pid: int, n: int) -> Side:
            """A piece of a round: its sends, the broker's CPU (its loop's and its other threads') and page
            faults, and this process's (the senders') CPU."""
            loop, cpu, own, faults = thread_cpu(pid), threads_cpu(pid), time.process_time(), minflt(pid)
            start, cursors[pid] = cursors[pid], cursors[pid] + n
            result = await produce_to(slots, threads=16, count=n, start=start, pool=pools[pid])
            return Side(
                result.messages,
                result.seconds,
                result.failures,
                result.avg_rt_ms * result.messages,
                result.max_rt_ms,
                threads_cpu(pid) - cpu,
                thread_cpu(pid) - loop,
                time.process_time() - own,
                minflt(pid) - faults,
            )

        first = await timed(many_slots, many_pid, topics * queues)
        print(
            f"{topics:,} topics x {queues} queues: created in {created:.1f} s; first message to each of the "
            f"{topics * queues:,} queues: {first.seconds:.1f} s ({first.tps:,.0f} sends/s)"
        )
        # warm-up, right before the rounds: every queue of MANY sent to again, ONE's queue and both brokers'
        # CommitLog pages written after whatever the first messages' minutes left for the kernel to write back
        await timed(one_slots, one_pid, count)
        await timed(many_slots, many_pid, max(count, topics * queues))
        loads = [os.getloadavg()[0]]
        sides: dict[str, list[Side]] = {"1 topic": [], f"{topics:,} topics": []}
        size = count // pieces
        for r in range(n_rounds):
            # pieces in ABBA BAAB order (BAAB ABBA in the next round): a drift of the host through the round
            # charges both sides alike, and which broker goes first alternates, so what a piece leaves behind
            # (dirty pages for the kernel to write back, the sender's heap, a cold cache) is not always
            # charged to MANY
            a, b = Side.zero(), Side.zero()
            for p in range(pieces):
                one_first = (p % 4 in (0, 3)) == (r % 2 == 0)
                for is_one in (one_first, not one_first):
                    n = size if p < pieces - 1 else count - size * (pieces - 1)
                    if is_one:
                        a += await timed(one_slots, one_pid, n)
                    else:
                        b += await timed(many_slots, many_pid, n)
            sides["1 topic"].append(a)
            sides[f"{topics:,} topics"].append(b)
            loads.append(os.getloadavg()[0])
            print(
                f"round {r + 1} ({'1 topic' if r % 2 == 0 else f'{topics:,} topics'} first, load "
                f"{loads[-1]:.1f}): 1 topic {a} | {topics:,} topics {b} | {100 * b.tps / a.tps:.0f} %, CPU "
                f"{100 * a.cpu_us / b.cpu_us:.0f} %"
            )
        medians = {
            label: (
                statistics.median(s.tps for s in rs),
                statistics.median(s.broker_us for s in rs),
                statistics.median(s.loop_us for s in rs),
                statistics.median(s.client_us for s in rs),
            )
            for label, rs in sides.items()
        }
        for label, (tps, cpu, loop, client) in medians.items():
            print(
                f"median {label} x {queues} queues: {tps:,.0f} sends/s, broker {cpu:.1f} CPU-us/send "
                f"(its loop {loop:.1f}), senders {client:.1f} CPU-us/send"
            )
        (one_tps, one_cpu, _, one_client), (many_tps, many_cpu, _, many_client) = medians.values()
        print(
            f"ratio of the medians: {100 * many_tps / one_tps:.0f} % of the one-topic TPS ({n_rounds} rounds)"
        )
        paired = [b.tps / a.tps for a, b in zip(*sides.values(), strict=True)]
        print(
            f"within each round: {', '.join(f'{100 * x:.0f} %' for x in paired)}: "
            f"median {100 * statistics.median(paired):.0f} %, interquartile {spread(paired)} points"
        )
        # the same rounds by CPU a send (the broker's and the senders': the machine's cost of a send), one
        # topic's over 10,000 topics': what the TPS ratio is on a machine that runs the two as fast, which
        # the host's other work moves far less than a round's seconds
        by_cpu = [a.cpu_us / b.cpu_us for a, b in zip(*sides.values(), strict=True)]
        print(
            f"by CPU a send (broker and senders), within each round: "
            f"{', '.join(f'{100 * x:.0f} %' for x in by_cpu)}: median {100 * statistics.median(by_cpu):.0f} %, "
            f"interquartile {spread(by_cpu)} points"
        )
        one_all, many_all = (sum(rs, Side.zero()) for rs in sides.values())
        print(
            f"all rounds pooled: {100 * many_all.tps / one_all.tps:.0f} % of the one-topic TPS; CPU µs a send "
            f"1 topic / {topics:,}: broker loop {one_all.loop_us:.1f} / {many_all.loop_us:.1f}, its other "
            f"threads {one_all.broker_us - one_all.loop_us:.1f} / {many_all.broker_us - many_all.loop_us:.1f}, "
            f"senders {one_all.client_us:.1f} / {many_all.client_us:.1f}; broker page faults a send "
            f"{one_all.faults / max(one_all.sends, 1):.3f} / {many_all.faults / max(many_all.sends, 1):.3f}"
        )
        print(
            f"CPU gap a send, {topics:,} topics less 1 (pooled): broker loop "
            f"{many_all.loop_us - one_all.loop_us:+.1f}, its other threads "
            f"{(many_all.broker_us - many_all.loop_us) - (one_all.broker_us - one_all.loop_us):+.1f}, "
            f"senders {many_all.client_us - one_all.client_us:+.1f} µs (the senders' is the load generator's)"
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
            f"{topics:,} topics {many_tps:,.0f}/s; broker {one_cpu:.1f} / {many_cpu:.1f} CPU-us per send; "
            f"by CPU a send {statistics.median(by_cpu):.2f}",
        )
        for pool in pools.values():
            for streams in pool:
                close_streams(streams)


def spread(ratios: list[float]) -> int:
    """The interquartile range of round ratios, in points."""
    q1, _, q3 = statistics.quantiles(ratios, n=4)
    return round(100 * (q3 - q1))


def thread_cpu(pid: int) -> float:
    """CPU seconds of the broker's main thread, which runs its event loop (the sends' path), from its
    schedstat in nanoseconds: a piece of a round is too short for the clock ticks of /proc's stat, whose
    floor would move a piece's figure by a tick."""
    return int(Path(f"/proc/{pid}/task/{pid}/schedstat").read_text().split()[0]) / 1e9


def threads_cpu(pid: int) -> float:
    """CPU seconds of all the broker's threads, each from its schedstat (a short piece's share of clock
    ticks would be a tick or two either way)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):  # a thread that ended meanwhile
            total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9


def minflt(pid: int) -> int:
    return int(stat_fields(pid)[7])


@dataclass
class Side:
    """One broker's share of a round, summed over its pieces: sends, seconds, failures, the RTs' sum and
    maximum, the broker's CPU seconds (all threads, and its loop's), the senders' (this process) and the
    broker's page faults."""

    sends: int
    seconds: float
    failures: int
    rt_sum_ms: float
    max_rt_ms: float
    broker_s: float
    loop_s: float
    client_s: float
    faults: int

    @staticmethod
    def zero() -> Side:
        return Side(0, 0.0, 0, 0.0, 0.0, 0.0, 0.0, 0.0, 0)

    def __add__(self, o: Side) -> Side:
        return Side(
            self.sends + o.sends,
            self.seconds + o.seconds,
            self.failures + o.failures,
            self.rt_sum_ms + o.rt_sum_ms,
            max(self.max_rt_ms, o.max_rt_ms),
            self.broker_s + o.broker_s,
            self.loop_s + o.loop_s,
            self.client_s + o.client_s,
            self.faults + o.faults,
        )

    @property
    def tps(self) -> float:
        return self.sends / self.seconds if self.seconds else 0.0

    def _per_send(self, seconds: float) -> float:
        return seconds / max(self.sends, 1) * 1e6

    @property
    def cpu_us(self) -> float:
        """The broker's and the senders' CPU a send."""
        return self._per_send(self.broker_s + self.client_s)

    @property
    def broker_us(self) -> float:
        return self._per_send(self.broker_s)

    @property
    def loop_us(self) -> float:
        return self._per_send(self.loop_s)

    @property
    def client_us(self) -> float:
        return self._per_send(self.client_s)

    def __str__(self) -> str:
        return (
            f"{self.tps:,.0f}/s (avg RT {self.rt_sum_ms / max(self.sends, 1):.2f} ms, max {self.max_rt_ms:.1f} ms, "
            f"{self.failures} failures, broker {self.broker_us:.1f} CPU-us (loop {self.loop_us:.1f}), "
            f"{self.faults:,} faults, senders {self.client_us:.1f})"
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
    ap.add_argument(
        "--pieces",
        type=int,
        default=32,
        help="each side's round split into this many pieces, in ABBA order (1: one piece each, AB or BA)",
    )
    args = ap.parse_args()
    with ExitStack() as stack:
        one = stack.enter_context(cluster())
        many = stack.enter_context(cluster())
        run(rounds(one, many, args.topics, args.queues, args.count, args.rounds, max(args.pieces, 1)))


if __name__ == "__main__":
    main()
