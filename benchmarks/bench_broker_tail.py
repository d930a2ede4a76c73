"""End-to-end p99.9 at a fixed rate on a broker holding many topics, quiet and beside a busy process.

Goal: p99.9 <= 5 ms quiet; with a competing CPU-bound process <= 2x the quiet figure and <= 8 ms.

Starts a NameServer and `mqctl broker start` in subprocesses (benchmarks/bench_broker_latency.py's), creates
TOPICS topics of one queue and sends each its first message (so the broker's tables hold them all: topic
configs, ConsumeQueues, stats items, registration bodies), then runs ROUNDS pairs of rounds: one quiet, one
with a competitor, a process this benchmark starts that spins in a busy loop for the round's length (one
process: on a 2-core machine it takes a core the broker could have run on). Which goes first alternates
(quiet, busy, busy, quiet, ...), so the machine's drift is not charged to one side. Each round is
bench_broker_latency's: one producer at RATE msgs/s on an absolute schedule, one consumer long-polling the
round's own 4-queue topic as a push consumer does, send-to-receipt latency after a 2 s warm-up.

Prints each round (p50/p99/p99.9/max, the broker's own loop lag p99 and max and longest GC pause over the
last minute or two, from GET_BROKER_RUNTIME_INFO), then per message of the round the CPU, wake-ups and
preemptions of the broker's and this client's event-loop threads and their processes' read and write
system calls (from /proc: counts the host's load does not decide, unlike the latencies), the median
p99.9 of each side and their ratio.

    python benchmarks/bench_broker_tail.py [--topics 10000] [--duration 10] [--rate 1000] [--rounds 2]
        [--group-offsets] [--tree DIR] [--timeline FILE] [--sched-trace FILE] [--competitor-session]
        [--client-slice-micros N]

``--group-offsets`` commits one group's offset on every topic first, so consumerOffset.json holds an entry
per topic (as on a broker whose topics all have a consumer) and is written every 5 s while the round's
consumer commits.

``--tree DIR`` runs the daemons of another source tree (see bench_broker_latency.py).

``--competitor-session`` starts the busy process with a session of its own. Where the kernel groups
tasks by session (autogroup, ``/proc/sys/kernel/sched_autogroup_enabled``), by default the busy loop,
the broker, the NameServer and this client are one scheduling group, and the loop spends the CPU share of
the group the broker is in; in a session of its own it is a group of its own, as a process of another
login or service would be (a systemd service has its own cgroup, `mqctl broker start --daemon` its own
session).

``--client-slice-micros N`` gives this process's event-loop thread (the producer's and the consumer's) an
EEVDF slice of N µs as mqctl's own ``--sched-slice-micros`` (``$MQCTL_CLIENT_SCHED_SLICE_MICROS``) does
for a command, and ``schedSliceMicros`` for the broker (``MQCTL_SCHED_SLICE_MICROS=N`` sets that): how
much of a busy round's tail is the measuring client's own wait for a core. Off by default, as mqctl's
is. After the fill, what this process holds is frozen out of the cyclic GC's reach, so no full
collection of the client walks it during the rounds.

``--timeline FILE`` writes every message's send time and latency and, every 100 ms, the CPU and the wait
for a core of each thread of the daemons, the competitor and this process (see timeline.py), then names
the threads that ran while the slowest messages were in flight.

``--sched-trace FILE`` records every context switch on the machine over the rounds (``perf record -a``
into FILE, see sched_trace.py) and names, for the slowest messages, who held each core during the flight,
outside the benchmark too, and how long each loop waited for a core behind whom.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# run as a script: benchmarks/ is on sys.path
from bench_broker_latency import bench, namesrv_process, percentile
from bench_broker_produce import ROOT, broker_process
from bench_broker_topics import create
from benchlib import summary
from sched_trace import Recorder, read, report
from timeline import Timeline, children, loop_costs, per_message, slow_report, thread_times

from daemon.remoting.loop import run
from daemon.schedslice import set_loop_slice
from mqctl.admin.client import Admin
from mqctl.services.bench import produce, topic_names

BUSY_LOOP = "while True: pass"


@contextmanager
def competitor(on: bool, own_session: bool = False) -> Iterator[int | None]:
    """A process spinning on a CPU while the block runs (nothing when ``on`` is false); ``own_session``
    starts it in a session of its own, as another user's or service's process would be. Yields its pid."""
    if not on:
        yield None
        return
    proc = subprocess.Popen([sys.executable, "-c", BUSY_LOOP], start_new_session=own_session)
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


async def fill(namesrv: str, broker: str, topics: int, group_offsets: bool) -> float:
    """Create the topics and send each its first message (and with ``group_offsets``, commit one group's
    offset on each: consumerOffset.json then holds an entry per topic); returns the seconds it took."""
    async with Admin([namesrv]) as admin:
        created = await create(admin, "TailMany", topics, 1)
        first = await produce(admin, "TailMany", topics=topics, queues=1, threads=16, size=1024, count=topics)
        started = time.perf_counter()
        if group_offsets:
            names = topic_names("TailMany", topics)
            for start in range(0, len(names), 100):
                await asyncio.gather(
                    *(
                        admin.commit_offset(broker, "TailGroup", name, 0, 1)
                        for name in names[start : start + 100]
                    )
                )
    return created + first.seconds + time.perf_counter() - started


async def broker_loop(namesrv: str, broker: str) -> str:
    """The broker's own view: its loop lag and GC pauses (ms, the last minute or two)."""
    async with Admin([namesrv]) as admin:
        info = await admin.broker_runtime_info(broker)
    return (
        f"broker loop lag p99 {info.get('loopLagP99', '-')} max {info.get('loopLagMax', '-')}, "
        f"GC pause max {info.get('gcPauseMax', '-')}"
    )


def _roles() -> dict[int, str]:
    """Thread id -> what it is, for the benchmark's processes (sched_trace names everything else by command)."""
    procs = {pid: role for pid, role in children(os.getpid()).items() if role != "python"}
    procs[os.getpid()] = "client"
    out = {}
    for pid, role in procs.items():
        for tid in thread_times(pid):
            out[tid] = f"{role} loop" if tid == pid else f"{role} thread"
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--topics", type=int, default=10_000)
    ap.add_argument("--duration", type=float, default=10.0, help="seconds per round after its warm-up")
    ap.add_argument("--rate", type=float, default=1000.0, help="msgs/s")
    ap.add_argument("--rounds", type=int, default=2, help="pairs of rounds (one quiet, one busy each)")
    ap.add_argument(
        "--group-offsets",
        action="store_true",
        help="one group's offset committed on every topic (before the rounds)",
    )
    ap.add_argument("--tree", type=Path, default=ROOT, help="source tree of the daemons (default: this one)")
    ap.add_argument("--client-slice-micros", type=int, default=0, help="EEVDF slice of this process (µs)")
    ap.add_argument(
        "--competitor-session", action="store_true", help="the busy process in a session of its own"
    )
    ap.add_argument("--timeline", type=Path, help="JSON lines: messages and per-thread CPU (timeline.py)")
    ap.add_argument("--sched-trace", type=Path, help="perf recording of the rounds' context switches")
    args = ap.parse_args()
    if args.client_slice_micros:
        print(set_loop_slice(args.client_slice_micros), "(the benchmark's client)", flush=True)
    tree = args.tree.resolve()
    p999: dict[str, list[float]] = {"quiet": [], "busy": []}
    loads: list[float] = []
    timeline = Timeline(args.timeline) if args.timeline else None
    with namesrv_process(tree) as namesrv, broker_process("--namesrv", namesrv, cwd=tree) as (broker, _):
        broker_pid = next(pid for pid, role in children(os.getpid()).items() if role == "broker")
        if timeline is not None:
            timeline.watch(os.getpid(), "bench")
            for pid, role in children(os.getpid()).items():
                timeline.watch(pid, role)
            timeline.start()
            timeline.mark("fill")
        took = run(fill(namesrv, broker, args.topics, args.group_offsets))
        print(
            f"{args.topics:,} topics created and sent one message each"
            f"{' (and a group offset committed on each)' if args.group_offsets else ''} in {took:.1f} s",
            flush=True,
        )
        gc.freeze()  # the fill's survivors: out of every collection of the client during the rounds
        recorder = Recorder(args.sched_trace) if args.sched_trace else None
        if recorder is not None:
            recorder.start()
            if recorder.refused:
                print(f"--sched-trace: {recorder.refused}; running without it", flush=True)
        roles: dict[int, str] = {}
        flights: list[tuple[str, float, float]] = []
        for r in range(args.rounds):
            for mode in ("quiet", "busy") if r % 2 == 0 else ("busy", "quiet"):
                with competitor(mode == "busy", args.competitor_session) as busy_pid:
                    if busy_pid is not None:
                        roles[busy_pid] = "competitor"
                    if timeline is not None:
                        for pid, role in children(os.getpid()).items():
                            timeline.watch(pid, role if role != "python" else "competitor")
                        timeline.mark(f"round {r + 1} {mode}")
                    costs = loop_costs(broker_pid), loop_costs(os.getpid())
                    out = run(bench(namesrv, broker, args.duration, args.rate, f"TailBench{r}{mode}"))
                    spent = [
                        per_message(c, loop_costs(pid), out.sent)
                        for c, pid in zip(costs, (broker_pid, os.getpid()), strict=True)
                    ]
                    loads.append(os.getloadavg()[0])
                if timeline is not None:
                    timeline.messages(f"{r + 1}{mode}", out.sent_ns, out.latencies_ms)
                if recorder is not None:
                    roles.update(_roles())
                    flights += [
                        (f"{r + 1}{mode}", t / 1e9, ms)
                        for t, ms in zip(out.sent_ns, out.latencies_ms, strict=True)
                    ]
                ms = sorted(out.latencies_ms)
                p999[mode].append(percentile(ms, 99.9))
                print(
                    f"round {r + 1} {mode}: p50 {percentile(ms, 50):.2f} ms, p99 {percentile(ms, 99):.2f} ms, "
                    f"p99.9 {percentile(ms, 99.9):.2f} ms, max {ms[-1]:.1f} ms ({len(ms):,} msgs); "
                    f"{run(broker_loop(namesrv, broker))}; load {loads[-1]:.1f}\n"
                    f"  per message: broker loop {spent[0]}; client loop {spent[1]}",
                    flush=True,
                )
        if recorder is not None and not recorder.refused:
            recorder.stop()
            print("slowest messages: each core's holders over the flight, each loop's wait for a core (ms):")
            loops = {"broker loop": broker_pid, "client loop": os.getpid()}
            print("\n".join(report(read(args.sched_trace), flights, roles, loops)), flush=True)
    if timeline is not None:
        timeline.close()
        print("slowest messages and the threads that ran in their flight (CPU, wait for a core; ms):")
        print("\n".join(slow_report(args.timeline, over_ms=5.0)))
    quiet, busy = statistics.median(p999["quiet"]), statistics.median(p999["busy"])
    print(f"median p99.9: quiet {quiet:.2f} ms, busy {busy:.2f} ms, busy/quiet {busy / quiet:.2f}")
    summary(
        __file__,
        f"p99.9 quiet {quiet:.2f} ms, busy {busy:.2f} ms ({busy / quiet:.1f}x)",
        f"{args.topics:,} topics, {args.rate:,.0f} msgs/s, {args.rounds} x 2 rounds of {args.duration:g} s; "
        f"load {min(loads):.1f}-{max(loads):.1f} over the rounds; broker schedSliceMicros "
        f"{os.environ.get('MQCTL_SCHED_SLICE_MICROS', '0')}, client slice {args.client_slice_micros} µs"
        f"{', competitor in its own session' if args.competitor_session else ''}",
    )


if __name__ == "__main__":
    main()
