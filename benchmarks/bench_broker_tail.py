"""End-to-end p99.9 at a fixed rate on a broker holding many topics, quiet and beside a busy process.

Goal: p99.9 <= 5 ms quiet; with a competing CPU-bound process <= 2x the quiet figure and <= 8 ms.

Starts a NameServer and `mqctl broker start` in subprocesses (benchmarks/bench_broker_latency.py's), creates
TOPICS topics of one queue and sends each its first message (so the broker's tables hold them all: topic
configs, ConsumeQueues, stats items, registration bodies), waits until the broker has dispatched them all
to their ConsumeQueues (a broker that does so after the put may still be at it), then runs ROUNDS pairs of rounds: one quiet, one
with a competitor, a process this benchmark starts that spins in a busy loop for the round's length (one
process: on a 2-core machine it takes a core the broker could have run on). Which goes first alternates
(quiet, busy, busy, quiet, ...), so the machine's drift is not charged to one side. Each round is
bench_broker_latency's: one producer at RATE msgs/s on an absolute schedule, one consumer long-polling the
round's own 4-queue topic as a push consumer does, send-to-receipt latency after a 2 s warm-up.

Prints each round (p50/p99/p99.9/max, the broker's own loop lag p99 and max and longest GC pause over the
last minute or two, from GET_BROKER_RUNTIME_INFO, and this client's loop lag p99 and max over the round:
how late its 5 ms sleeps woke, in ms, a stall of the measuring side), then per message of the round the
CPU, wake-ups and preemptions of the broker's and this client's event-loop threads and their processes'
read and write system calls (from /proc: counts the host's load does not decide, unlike the latencies),
then the round's stalls of the broker's loop and of this client's (a probe every 20 ms late by 2 ms or
more, `daemon.broker.loopwatch`: the broker's from its runtime info before and after the round, this
process's from a `LoopWatch` on its loop) with their lateness split by where it went: "ran" and "gc" the
loop's own, "core" and "steal" the host's, "other" the rest (the GIL, a blocking call); and at the end
the median p99.9 of each side and their ratio.

This process's cyclic GC does not collect during mqctl's rounds (what it holds is collected and frozen
before each, as the broker freezes its tables): its collections ran on the loop that sends and receives,
up to tens of milliseconds for a full one at a busy moment, and counted as the broker's latency.
``--client-gc`` keeps it collecting (earlier figures were taken so).

    python benchmarks/bench_broker_tail.py [--topics 10000] [--duration 10] [--rate 1000] [--rounds 2]
        [--client mqctl|cpp|cpp-py|ons|mqctl,cpp,ons] [--group-offsets] [--tree DIR] [--timeline FILE]
        [--sched-trace FILE] [--competitor-session] [--client-slice-micros N] [--slices ARMS] [--client-gc]
        [--namesrv ADDR --broker ADDR --broker-pid PID]

``--client`` picks the producer and push consumer (default ``mqctl``: this process, as above):

- ``cpp``: the official C++ client (the librocketmq.so of PyPI's ``rocketmq`` 0.4.4 in .venv-interop, which
  `make test` installs) driven from C as a C/C++ application uses it: a producer sending asynchronously
  and a push consumer in one process of its own (benchmarks/tools/cpp_tail.c, compiled here with cc as
  bench_ab.py compiles cpp_bench.c);
- ``cpp-py``: the same through the client's Python binding (benchmarks/tools/cpp_tail.py, under that venv's
  Python), whose ctypes callbacks and GIL hand-offs are the client process's CPU too;
- ``ons``: ali-ons (tests/interop/node_modules), a Producer and a push Consumer in one Node process
  (benchmarks/tools/ons_bench.js ``tail``).

Each runs the same round: the round's new 4-queue topic and a new group, probes until every queue has
delivered one (the rebalance is done), then the absolute schedule and the 2 s warm-up. The send stamp
(a user property) and the receipt are read on CLOCK_MONOTONIC in the client's own process
(``time.monotonic_ns()``, Node's ``process.hrtime``; ``time.perf_counter_ns()`` here is the same clock
on Linux), so every client's latencies are measured the same way. Per message the round prints the
broker loop's costs and the client process's (every thread's CPU, wake-ups, reads and writes, from
/proc over the client's schedule, warm-up included, as the mqctl rounds count from before their topic's
creation). Several clients, comma-separated, take turns within each pair of rounds on the same broker
(``--rounds 2 --client mqctl,cpp,ons``: mqctl quiet and busy, cpp busy and quiet, ons quiet and busy,
then each the other way round), and each gets its own median. A real client's rounds cannot be
followed with ``--timeline`` or ``--sched-trace``, which name mqctl's loop.

``--group-offsets`` commits one group's offset on every topic first, so consumerOffset.json holds an entry
per topic (as on a broker whose topics all have a consumer) and is written every 5 s while the round's
consumer commits.

``--tree DIR`` runs the daemons of another source tree (see bench_broker_latency.py).

``--namesrv ADDR --broker ADDR --broker-pid PID`` starts no daemon: the rounds run against a NameServer and
a broker already running (a real RocketMQ 4.9.8 broker, say; the topics are created on it, each run's
rounds on topics of their own), and the
broker's costs per message are its whole process's (``PID``: every thread, as a real client's are), not its
event loop's; the loop lag and GC pause it reports are "-" where it does not report them. Not with
``--tree``, ``--timeline`` or ``--sched-trace``, which follow our daemons' threads.

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
is. ``--slices ARMS`` runs each pair of rounds once per arm on the same broker, in turn (``0,100``: both
event loops on the kernel's default, then both on 100 µs; ``100:0`` the broker's loop alone): the arm's
slice is put on the broker's loop thread from here (``daemon.schedslice.set_thread_slice``, what
``schedSliceMicros`` sets at start) and on this process's before its rounds, and each arm gets its own
median, so arms compare in the same minutes on one fill. After the fill, what this process holds is frozen out of the cyclic GC's reach, so no full
collection of the client walks it during the rounds.

``--timeline FILE`` writes every message's send time and latency and, every 100 ms, the CPU and the wait
for a core of each thread of the daemons, the competitor and this process (see timeline.py), then names
the threads that ran while the slowest messages were in flight.

``--sched-trace FILE`` records every context switch on the machine over the rounds (``perf record -a``
into FILE, see sched_trace.py) and names, for the slowest messages, who held each core during the flight,
outside the benchmark too, and how long each loop waited for a core behind whom; then, for each kind of
round (quiet or busy, and the arm), the slowest 0.1 % of its messages summed: each loop's time on a core
and its waits over their flights, by who held the core.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Coroutine, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

# run as a script: benchmarks/ is on sys.path
from bench_broker_latency import QUEUES, WARM_UP_S, Run, _routed_queues, bench, namesrv_process, percentile
from bench_broker_produce import ROOT, broker_process
from bench_broker_topics import create
from benchlib import summary
from sched_trace import Recorder, Who, read, report, summaries
from timeline import Timeline, children, loop_costs, per_message, process_costs, slow_report, thread_times

sys.path.insert(0, str(Path(__file__).resolve().parent / "tools"))
from bench_ab import BENCH as TOOLS, INTEROP_PYTHON, cpp_bench

from daemon.broker.loopwatch import CAUSES, STALL_KEYS, LoopWatch
from daemon.remoting.loop import run
from daemon.schedslice import MAX_SLICE_US, MIN_SLICE_US, set_loop_slice, set_thread_slice
from mqctl.admin.client import Admin
from mqctl.services.bench import produce, topic_names

BUSY_LOOP = "while True: pass"
#: What a round counts of the broker, and its label: our broker's event-loop thread, or (a broker this
#: benchmark did not start, a JVM's threads say) its whole process.
Costs = tuple[str, Callable[[int], tuple[int, ...]]]
LOOP: Costs = ("broker loop", loop_costs)
PROCESS: Costs = ("broker process", process_costs)
#: The real clients, each a producer-and-push-consumer process (benchmarks/tools/cpp_tail.py says what it
#: does and prints).
CLIENTS = ("cpp", "cpp-py", "ons")


def client_commands(clients: list[str], work: Path) -> dict[str, list[str]]:
    """The command of each real client in ``clients``, to be given NAMESRV TOPIC GROUP QUEUES RATE COUNT
    WARM_UP; ``cpp``'s driver is compiled into ``work``."""
    commands = {}
    for client in clients:
        if client == "cpp":
            commands[client] = [str(cpp_bench(work, "cpp_tail"))]
        elif client == "cpp-py":
            commands[client] = [str(INTEROP_PYTHON), str(TOOLS / "cpp_tail.py")]
        elif client == "ons":
            commands[client] = ["node", str(TOOLS / "ons_bench.js"), "tail"]
    return commands


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


async def dispatched(namesrv: str, broker: str, timeout: float = 900.0, poll: float = 1.0) -> float:
    """Wait until the broker has dispatched every stored message to its ConsumeQueues (its runtime info's
    ``dispatchBehindBytes`` is 0: a 4.9.8 broker dispatches after the put, creating each new topic's
    ConsumeQueue file as it goes; ours, in the put); returns the seconds it took."""
    started = time.perf_counter()
    async with Admin([namesrv]) as admin:
        while int((await admin.broker_runtime_info(broker)).get("dispatchBehindBytes", "0")) > 0:
            if time.perf_counter() - started > timeout:
                raise SystemExit(f"{broker} still dispatching the fill after {timeout:.0f} s")
            await asyncio.sleep(poll)
    return time.perf_counter() - started


async def _topic(namesrv: str, broker: str, topic: str) -> None:
    async with Admin([namesrv]) as admin:
        await _routed_queues(admin, broker, topic)


def client_round(
    client: str,
    command: list[str],
    namesrv: str,
    broker: str,
    broker_pid: int,
    duration: float,
    rate: float,
    topic: str,
    broker_costs: Costs = LOOP,
) -> tuple[Run, list[str]]:
    """A round of bench_broker_latency's with a real client's process (``command``) on a new 4-queue topic:
    its latencies and send times, and the broker loop's (``broker_costs``: what is counted of the broker,
    and its label) and the client process's costs per message over the client's schedule (from its "start"
    to its result)."""
    run(_topic(namesrv, broker, topic))
    out = Run(sent=int((WARM_UP_S + duration) * rate))
    warm_up = int(WARM_UP_S * rate)
    argv = [
        *command,
        namesrv,
        topic,
        f"{topic}G",
        str(QUEUES),
        f"{rate:g}",
        str(out.sent),
        str(warm_up),
    ]
    with subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        opened = proc.stdout.readline() == "start\n"
        costs = broker_costs[1](broker_pid), process_costs(proc.pid)
        line = proc.stdout.readline() if opened else ""
        after = broker_costs[1](broker_pid), process_costs(proc.pid)
        proc.stdin.close()  # the client shuts down: its threads' counts are read
        proc.wait(60)
    if not line:
        raise SystemExit(f"{client}: {' '.join(argv[:3])} failed ({proc.returncode})")
    result = json.loads(line)
    out.received, out.latencies_ms, out.sent_ns = result["received"], result["latenciesMs"], result["sentNs"]
    if result["failures"] or out.received < out.sent:
        print(f"  {client}: {result['failures']} sends failed, {out.received:,} of {out.sent:,} received")
    spent = [per_message(c, a, out.sent) for c, a in zip(costs, after, strict=True)]
    return out, [f"{broker_costs[0]} {spent[0]}", f"{client} process {spent[1]}"]


def mqctl_round(
    namesrv: str, broker: str, pid: int, duration: float, rate: float, topic: str, broker_costs: Costs = LOOP
) -> tuple[Run, list[str]]:
    """bench_broker_latency's round with mqctl's own client on this process's event loop."""
    me = os.getpid()
    costs = broker_costs[1](pid), loop_costs(me), process_costs(me)
    out, stalls = run(watched(bench(namesrv, broker, duration, rate, topic)))
    after = broker_costs[1](pid), loop_costs(me), process_costs(me)
    spent = [per_message(c, a, out.sent) for c, a in zip(costs, after, strict=True)]
    out.client_stalls = stalls
    return out, [f"{broker_costs[0]} {spent[0]}", f"client loop {spent[1]}", f"client process {spent[2]}"]


async def watched(round_: Coroutine[None, None, Run]) -> tuple[Run, Stalled]:
    """The round, with the broker's stall classification (`LoopWatch`) on this process's loop: its stalls,
    their lateness per cause (ms) and each stall, as the broker counts its own."""
    watch = LoopWatch()
    watch.stalls.recent = deque(maxlen=100_000)  # every stall of the round, for its slowest flights
    watch.start()
    try:
        out = await round_
    finally:
        watch.stop()
    stalls = [(end * 1000, lag * 1000, [v * 1000 for v in split]) for end, lag, split in watch.stalls.recent]
    return out, (watch.stalls.count, [v * 1000 for v in watch.stalls.seconds], stalls)


#: Stalls counted, lateness per cause (ms), and the stalls themselves: (end, ms since the epoch; lateness,
#: ms; split, ms).
Stalled = tuple[int, list[float], list[tuple[float, float, list[float]]]]


async def broker_stalls(namesrv: str, broker: str) -> Stalled:
    """The broker's stalls since its start, their lateness per cause (ms) and its last stalls, from its
    runtime info (nothing from a broker that does not count them)."""
    async with Admin([namesrv]) as admin:
        info = await admin.broker_runtime_info(broker)
    recent = []
    for item in filter(None, info.get("loopStallRecent", "").split(";")):
        end, lag, split = item.split()
        recent.append((float(end), float(lag), [float(v) for v in split.split("/")]))
    return int(info.get("loopStalls", "0")), [float(info.get(k, "0")) for k in STALL_KEYS], recent


def stall_line(who: str, stalls: Stalled) -> str:
    """``broker 12 stalls: ran 3.1, core 40.2, steal 0.0, gc 0.0, other 1.2 ms``."""
    split = ", ".join(f"{c} {v:.1f}" for c, v in zip(CAUSES, stalls[1], strict=True))
    return f"{who} {stalls[0]} stalls: {split} ms"


def flights_line(out: Run, sides: list[tuple[str, Stalled]], n: int = 10) -> str:
    """What the ``n`` slowest flights of the round overlapped of each side's stalls: lateness per cause, ms
    a flight on average (each stall's split in proportion to its overlap with a flight's span). The broker
    lists its last 64 stalls: on a host busy enough to stall it more often, the round's earlier ones are
    not there."""
    if not out.latencies_ms:
        return ""
    epoch_ms = (time.time() - time.perf_counter()) * 1000  # perf_counter is CLOCK_MONOTONIC, as the sends'
    slowest = sorted(zip(out.latencies_ms, out.sent_ns, strict=True), reverse=True)[:n]
    spans = [(sent / 1e6 + epoch_ms, sent / 1e6 + epoch_ms + ms) for ms, sent in slowest]
    parts = []
    for who, (_, _, recent) in sides:
        total = [0.0] * len(CAUSES)
        for end, lag, split in recent:
            start = end - lag
            for a, b in spans:
                overlap = min(b, end) - max(a, start)
                if overlap > 0 and lag > 0:
                    for i, v in enumerate(split):
                        total[i] += v * overlap / lag / len(spans)
        parts.append(f"{who} " + ", ".join(f"{c} {v:.1f}" for c, v in zip(CAUSES, total, strict=True)))
    return (
        f"  the {len(spans)} slowest flights ({slowest[-1][0]:.1f}-{slowest[0][0]:.1f} ms) met stalls of "
        "(ms a flight): " + "; ".join(parts)
    )


def stall_delta(before: Stalled, after: Stalled) -> Stalled:
    """The stalls of ``after`` since ``before``."""
    last = before[2][-1][0] if before[2] else 0.0
    recent = [s for s in after[2] if s[0] > last]
    return after[0] - before[0], [a - b for a, b in zip(after[1], before[1], strict=True)], recent


#: A slice arm: (the broker loop's, the client loop's) µs, 0 the kernel's default.
Arm = tuple[int, int]


def slice_arms(text: str) -> list[Arm]:
    """``0,100,100:0`` -> [(0, 0), (100, 100), (100, 0)]."""
    arms = []
    for item in text.split(","):
        try:
            broker_us, _, client_us = item.partition(":")
            arm = int(broker_us), int(client_us or broker_us)
        except ValueError:
            raise argparse.ArgumentTypeError(f"an arm is N or BROKER:CLIENT (µs), not {item!r}") from None
        if any(v and not MIN_SLICE_US <= v <= MAX_SLICE_US for v in arm):
            raise argparse.ArgumentTypeError(
                f"a slice is 0 or {MIN_SLICE_US}-{MAX_SLICE_US} µs, not {item!r}"
            )
        arms.append(arm)
    return arms


def arm_name(arm: Arm | None) -> str:
    return "" if arm is None else f"slice {arm[0]}:{arm[1]} "


def arm_tag(arm: Arm | None) -> str:
    """The arm in a flight's round tag (``2s100:100busy``)."""
    return "" if arm is None else f"s{arm[0]}:{arm[1]}"


def client_list(text: str) -> list[str]:
    clients = text.split(",")
    if not clients or any(c not in ("mqctl", *CLIENTS) for c in clients):
        raise argparse.ArgumentTypeError(f"clients are mqctl, {', '.join(CLIENTS)}: not {text!r}")
    return clients


async def broker_loop(namesrv: str, broker: str) -> str:
    """The broker's own view: its loop lag and GC pauses (ms, the last minute or two), and the stacks its
    watchdog took since its start (``MQCTL_LOOP_STACK_MILLIS=5``: what its loop thread was in while a probe
    was overdue)."""
    async with Admin([namesrv]) as admin:
        info = await admin.broker_runtime_info(broker)
    stacks = info.get("loopStallStacks")
    return (
        f"broker loop lag p99 {info.get('loopLagP99', '-')} max {info.get('loopLagMax', '-')}, "
        f"GC pause max {info.get('gcPauseMax', '-')}" + (f"; broker loop stacks: {stacks}" if stacks else "")
    )


@contextmanager
def client_collector(on: bool) -> Iterator[None]:
    """This process's cyclic GC through one round of mqctl's client: what the fill and the rounds before
    left is collected and frozen first, then the collector is paused for the round (``on``: it keeps
    collecting); what the round left is collected before the next one. Its collections ran on the loop
    that sends and receives the round's messages: a full one walks every object the round keeps alive (at
    a busy moment, a backlog of sends), and the benchmark would charge the broker with them."""
    gc.collect()
    gc.freeze()
    if not on:
        gc.disable()
    try:
        yield
    finally:
        gc.enable()


def client_lag(out: Run) -> str:
    """This process's own loop lag over the round (its 5 ms sleeps' lateness, after the warm-up), beside the
    broker's: a slow message that waited in the measuring client shows here, not in the broker's figures."""
    if not out.loop_lags_ms:
        return ""
    lags = sorted(out.loop_lags_ms)
    return f"; client loop lag p99 {percentile(lags, 99):.2f} max {lags[-1]:.2f}"


def _roles() -> dict[int, str]:
    """Thread id -> what it is, for the benchmark's processes (sched_trace names everything else by command)."""
    procs = {pid: role for pid, role in children(os.getpid()).items() if role != "python"}
    procs[os.getpid()] = "client"
    out = {}
    for pid, role in procs.items():
        for tid in thread_times(pid):
            out[tid] = f"{role} loop" if tid == pid else f"{role} thread"
    return out


def main(argv: list[str] | None = None) -> None:
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
    ap.add_argument(
        "--client",
        type=client_list,
        default=["mqctl"],
        help="producer and push consumer: mqctl, cpp, cpp-py, ons, or several (mqctl,cpp,ons) in turn",
    )
    ap.add_argument("--client-slice-micros", type=int, default=0, help="EEVDF slice of this process (µs)")
    ap.add_argument(
        "--slices",
        type=slice_arms,
        help="arms, each pair of rounds once per arm: N (both loops' slice, µs) or BROKER:CLIENT, comma-separated",
    )
    ap.add_argument(
        "--competitor-session", action="store_true", help="the busy process in a session of its own"
    )
    ap.add_argument(
        "--client-gc",
        action="store_true",
        help="keep this process's cyclic GC collecting during its rounds (its pauses count as latency)",
    )
    ap.add_argument("--timeline", type=Path, help="JSON lines: messages and per-thread CPU (timeline.py)")
    ap.add_argument("--sched-trace", type=Path, help="perf recording of the rounds' context switches")
    ap.add_argument("--namesrv", help="a running NameServer to use (with --broker and --broker-pid)")
    ap.add_argument("--broker", help="a running broker registered with --namesrv (no daemon is started)")
    ap.add_argument("--broker-pid", type=int, help="--broker's process, whose costs per message are counted")
    args = ap.parse_args(argv)
    external = (args.namesrv, args.broker, args.broker_pid)
    if any(x is not None for x in external):
        if any(x is None for x in external):
            ap.error("--namesrv, --broker and --broker-pid go together")
        if args.tree != ROOT or args.timeline or args.sched_trace or args.slices:
            ap.error(
                "--tree, --timeline, --sched-trace and --slices follow daemons this benchmark starts, not --broker"
            )
        if not Path(f"/proc/{args.broker_pid}").exists():
            ap.error(f"--broker-pid {args.broker_pid}: no such process")
    if args.client_slice_micros:
        if args.slices:
            ap.error("--slices sets the client's slice per arm: not with --client-slice-micros")
        print(set_loop_slice(args.client_slice_micros), "(the benchmark's client)", flush=True)
    arms: list[Arm | None] = list(args.slices) if args.slices else [None]
    tree = args.tree.resolve()
    if args.client != ["mqctl"] and (args.timeline or args.sched_trace):
        ap.error("--timeline and --sched-trace follow mqctl's own client only")
    p999: dict[tuple[str, Arm | None], dict[str, list[float]]] = {
        (client, arm): {"quiet": [], "busy": []} for arm in arms for client in args.client
    }
    loads: list[float] = []
    timeline = Timeline(args.timeline) if args.timeline else None
    broker_costs = LOOP
    run_tag = ""  # a broker of its own is new: the rounds' topics are empty
    with tempfile.TemporaryDirectory() as work, ExitStack() as daemons:
        if args.broker is not None:
            namesrv, broker, broker_pid = args.namesrv, args.broker, args.broker_pid
            broker_costs = PROCESS
            # a running broker keeps an earlier run's rounds' topics, whose consumer would read their
            # messages first: this run's are its own
            run_tag = f"{int(time.time())}x"
        else:
            namesrv = daemons.enter_context(namesrv_process(tree))
            broker, _ = daemons.enter_context(broker_process("--namesrv", namesrv, cwd=tree))
            broker_pid = next(pid for pid, role in children(os.getpid()).items() if role == "broker")
        commands = client_commands(args.client, Path(work))
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
        behind = run(dispatched(namesrv, broker))
        if behind >= 1.0:
            print(f"the broker dispatched them to their ConsumeQueues {behind:.0f} s later", flush=True)
        recorder = Recorder(args.sched_trace) if args.sched_trace else None
        if recorder is not None:
            recorder.start()
            if recorder.refused:
                print(f"--sched-trace: {recorder.refused}; running without it", flush=True)
        roles: dict[int, str] = {}
        flights: list[tuple[str, float, float]] = []
        # which of a pair goes first alternates by round, arm and client, so drift is charged to no one
        plan = [
            (r, a, a + c, arm, client)
            for r in range(args.rounds)
            for a, arm in enumerate(arms)
            for c, client in enumerate(args.client)
        ]
        for r, a, k, arm, client in plan:
            if arm is not None:
                set_thread_slice(broker_pid, arm[0])
                set_loop_slice(arm[1])
            for mode in ("quiet", "busy") if (r + k) % 2 == 0 else ("busy", "quiet"):
                name = f"{r + 1} {arm_name(arm)}{mode}"
                if len(args.client) > 1:
                    name = f"{r + 1} {arm_name(arm)}{client} {mode}"
                with competitor(mode == "busy", args.competitor_session) as busy_pid:
                    if busy_pid is not None:
                        roles[busy_pid] = "competitor"
                    if timeline is not None:
                        for pid, role in children(os.getpid()).items():
                            timeline.watch(pid, role if role != "python" else "competitor")
                        timeline.mark(f"round {r + 1} {mode}")
                    topic = f"TailBench{run_tag}{r}{a}{client}{mode}"
                    stalls_before = run(broker_stalls(namesrv, broker))
                    if client == "mqctl":
                        with client_collector(args.client_gc):
                            out, spent = mqctl_round(
                                namesrv, broker, broker_pid, args.duration, args.rate, topic, broker_costs
                            )
                    else:
                        out, spent = client_round(
                            client,
                            commands[client],
                            namesrv,
                            broker,
                            broker_pid,
                            args.duration,
                            args.rate,
                            topic,
                            broker_costs,
                        )
                    loads.append(os.getloadavg()[0])
                    sides = [("broker", stall_delta(stalls_before, run(broker_stalls(namesrv, broker))))]
                    if out.client_stalls is not None:
                        sides.append(("client loop", out.client_stalls))
                    stalls = [stall_line(who, stalled) for who, stalled in sides]
                if timeline is not None:
                    timeline.messages(f"{r + 1}{arm_tag(arm)}{mode}", out.sent_ns, out.latencies_ms)
                if recorder is not None:
                    roles.update(_roles())
                    flights += [
                        (f"{r + 1}{arm_tag(arm)}{mode}", t / 1e9, ms)
                        for t, ms in zip(out.sent_ns, out.latencies_ms, strict=True)
                    ]
                ms = sorted(out.latencies_ms)
                p999[(client, arm)][mode].append(percentile(ms, 99.9))
                print(
                    f"round {name}: p50 {percentile(ms, 50):.2f} ms, p99 {percentile(ms, 99):.2f} ms, "
                    f"p99.9 {percentile(ms, 99.9):.2f} ms, max {ms[-1]:.1f} ms ({len(ms):,} msgs); "
                    f"{run(broker_loop(namesrv, broker))}{client_lag(out)}; load {loads[-1]:.1f}\n"
                    f"  per message: {'; '.join(spent)}\n"
                    f"  {'; '.join(stalls)}\n{flights_line(out, sides)}",
                    flush=True,
                )
        if recorder is not None and not recorder.refused:
            recorder.stop()
            print("slowest messages: each core's holders over the flight, each loop's wait for a core (ms):")
            loops = {"broker loop": broker_pid, "client loop": os.getpid()}
            trace = read(args.sched_trace)
            print("\n".join(report(trace, flights, roles, loops)), flush=True)
            print("\n".join(summaries(trace, flights, Who(roles, loops))), flush=True)
    if timeline is not None:
        timeline.close()
        print("slowest messages and the threads that ran in their flight (CPU, wait for a core; ms):")
        print("\n".join(slow_report(args.timeline, over_ms=5.0)))
    figures = []
    for (client, arm), rounds in p999.items():
        quiet, busy = statistics.median(rounds["quiet"]), statistics.median(rounds["busy"])
        which = arm_name(arm) + ("" if args.client == ["mqctl"] else f"{client} ")
        print(
            f"median p99.9: {which}quiet {quiet:.2f} ms, busy {busy:.2f} ms, busy/quiet {busy / quiet:.2f} "
            f"(rounds quiet {', '.join(f'{v:.2f}' for v in rounds['quiet'])}; "
            f"busy {', '.join(f'{v:.2f}' for v in rounds['busy'])})"
        )
        figures.append(f"{which}p99.9 quiet {quiet:.2f} ms, busy {busy:.2f} ms ({busy / quiet:.1f}x)")
    summary(
        __file__,
        "; ".join(figures),
        f"{args.topics:,} topics, {args.rate:,.0f} msgs/s, {args.rounds} x 2 rounds of {args.duration:g} s; "
        f"load {min(loads):.1f}-{max(loads):.1f} over the rounds; broker schedSliceMicros "
        f"{os.environ.get('MQCTL_SCHED_SLICE_MICROS', '0')}, client slice {args.client_slice_micros} µs"
        f"{', competitor in its own session' if args.competitor_session else ''}",
    )


if __name__ == "__main__":
    main()
