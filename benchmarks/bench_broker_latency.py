"""Send-to-receipt latency for a long-polling consumer at a fixed send rate (1 KiB bodies).

Starts a NameServer and `mqctl broker start` in subprocesses on temporary dirs, creates a topic with
4 queues, then runs in this process:

* a producer sending at a fixed RATE msgs/s against an absolute schedule (message i is due at
  t0 + i/RATE, so a late send does not push the rest back), round-robin over the queues, each send
  stamped with ``time.perf_counter_ns()`` in a property just before it goes out (several sends may
  be in flight when the broker is slow, as with several producer threads);
* a consumer long-polling every queue as RocketMQ's push consumer does: PULL_MESSAGE with the
  suspend flag and a 15 s suspend timeout, one pull in flight per queue, the next pull issued as soon
  as a response arrives.

Both share one connection per broker, as the clients of one Java MQClientInstance do, so a send and
the next pull often travel in one TCP segment.

Latency is receipt time minus send start per message, after a 2 s warm-up. Prints p50/p90/p99/p99.9/max,
and beside them what the machine did meanwhile: this process's worst event-loop lag (a probe that
sleeps 5 ms at a time), the share of time some task waited for a CPU (Linux PSI,
/proc/pressure/cpu) and the share of CPU time the hypervisor stole (/proc/stat). On a shared 2-core
machine a busy neighbour shows up there, not as broker work.

    python benchmarks/bench_broker_latency.py [DURATION_S] [RATE] [--tree DIR | --dledger]

``--tree DIR`` runs the NameServer and broker of another source tree (a `git worktree` of an older
commit), against this tree's load generator, so two brokers compare under the same client: alternate
runs of the two, since the hypervisor's steal moves the tail from one minute to the next. A new worktree
has no build/native (`make native` there, where the commit has it): without it its daemons run pure
Python, and the last line says which.

``--dledger`` runs the same load against a 3-member DLedger group's leader instead (started as
``bench_dledger`` starts it, by ``mqctl up`` of the tree the ``tests`` package is imported from: run with
another tree's ``PYTHONPATH`` to measure its group): a message is received once the quorum holds it and the
leader has dispatched it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

# run as a script: benchmarks/ is on sys.path
from bench_broker_produce import ROOT, broker_process, free_port
from benchlib import summary  # run as a script: benchmarks/ is on sys.path

from daemon.remoting.errors import RemotingError
from daemon.remoting.loop import run
from mqctl.admin.client import Admin
from mqctl.admin.messaging import pull, send
from mqctl.services.messages import QueueRef, queues
from mqctl.services.topics import TopicSpec, upsert

TOPIC = "LatencyBench"
GROUP = "LatencyBenchG"
QUEUES = 4
WARM_UP_S = 2.0
SUSPEND_MS = 15_000  # DefaultMQPushConsumer's brokerSuspendMaxTimeMillis
CLIENT_TIMEOUT_S = 30.0  # its consumerTimeoutMillisWhenSuspend
SENT = "benchSent"  # "<index> <perf_counter_ns at send start>"
BODY = os.urandom(1024)


@contextmanager
def namesrv_process(cwd: Path = ROOT) -> Iterator[str]:
    """`mqctl namesrv start` of the tree ``cwd`` on a temporary data dir; yields its address once it answers."""
    with tempfile.TemporaryDirectory() as tmp:
        addr = f"127.0.0.1:{free_port()}"
        argv = [sys.executable, "-m", "mqctl", "namesrv", "start", "--data", tmp, "--listen", addr]
        proc = subprocess.Popen(argv, cwd=cwd, stderr=subprocess.DEVNULL)
        try:
            run(_wait_namesrv(addr))
            yield addr
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)


async def _wait_namesrv(addr: str) -> None:
    async with Admin([addr], timeout=1.0) as admin:
        while True:
            try:
                await admin.cluster_info()
                return
            except RemotingError:
                await asyncio.sleep(0.05)


async def _routed_queues(admin: Admin, broker: str, topic: str) -> list[QueueRef]:
    """Create the topic on the broker and wait until the NameServer routes it (the broker re-registers)."""
    await upsert(
        admin, TopicSpec(topic, QUEUES, QUEUES), cluster=None, broker=broker, mode="create", soft=True
    )
    while True:
        try:
            return queues(await admin.topic_route(topic), write=False)
        except RemotingError:
            await asyncio.sleep(0.05)


@dataclass
class Run:
    latencies_ms: list[float] = field(default_factory=list)  # of the messages sent after the warm-up
    sent_ns: list[int] = field(default_factory=list)  # their send times (perf_counter_ns), in the same order
    sent: int = 0
    received: int = 0
    pulls: int = 0
    loop_lags_ms: list[float] = field(default_factory=list)
    cpu_wait_share: float | None = None  # of the measured wall time, PSI "some"
    steal_share: float | None = None  # of this machine's CPU time, taken by the hypervisor
    #: This process's loop stalls over the round: how many, their lateness per cause in ms, and each one
    #: (its end in ms since the epoch, lateness and split in ms); bench_broker_tail's.
    client_stalls: tuple[int, list[float], list[tuple[float, float, list[float]]]] | None = None


async def bench(namesrv: str, broker: str, duration: float, rate: float, topic: str = TOPIC) -> Run:
    """One run on ``topic`` (a new one per run: the consumer starts at offset 0)."""
    async with Admin([namesrv], timeout=CLIENT_TIMEOUT_S) as admin:
        refs = await _routed_queues(admin, broker, topic)
        out = Run(sent=int((WARM_UP_S + duration) * rate))
        done = asyncio.Event()
        loop = asyncio.get_running_loop()
        t0 = loop.time() + 0.5  # the schedule's start: every consumer has parked its first pull by then
        warm_up = int(WARM_UP_S * rate)

        async def consume(ref: QueueRef) -> None:
            offset = 0
            while not done.is_set():
                result = await pull(
                    admin, ref.addr, topic, ref.queue_id, offset, group=GROUP, suspend_ms=SUSPEND_MS
                )
                now = time.perf_counter_ns()
                out.pulls += 1
                offset = result.next_begin_offset
                for m in result.messages:
                    index, sent = map(int, m.properties[SENT].split())
                    if index >= warm_up:
                        out.latencies_ms.append((now - sent) / 1e6)
                        out.sent_ns.append(sent)
                out.received += len(result.messages)
                if out.received >= out.sent:
                    done.set()

        async def send_one(i: int) -> None:
            ref = refs[i % len(refs)]
            props = {SENT: f"{i} {time.perf_counter_ns()}"}
            await send(admin, ref.addr, topic, BODY, queue_id=ref.queue_id, properties=props)

        consumers = [asyncio.create_task(consume(ref)) for ref in refs]
        probe = asyncio.create_task(loop_lag(out.loop_lags_ms))
        sends: set[asyncio.Task[None]] = set()
        pressure = None
        for i in range(out.sent):
            if i == warm_up:
                pressure, started, ticks = cpu_pressure_us(), time.perf_counter(), cpu_ticks()
                out.loop_lags_ms.clear()
            delay = t0 + i / rate - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            task = asyncio.create_task(send_one(i))
            sends.add(task)
            task.add_done_callback(sends.discard)
        await asyncio.gather(*sends)
        await asyncio.wait_for(done.wait(), 30)
        end, ticks_end = cpu_pressure_us(), cpu_ticks()
        if ticks is not None and ticks_end is not None and sum(ticks_end) > sum(ticks):
            out.steal_share = (ticks_end[1] - ticks[1]) / (sum(ticks_end) - sum(ticks))
        if pressure is not None and end is not None:
            out.cpu_wait_share = (end - pressure) / 1e6 / (time.perf_counter() - started)
        for task in (*consumers, probe):
            task.cancel()
        await asyncio.gather(*consumers, probe, return_exceptions=True)
        return out


def cpu_ticks() -> tuple[int, int] | None:
    """This machine's CPU time since boot, in ticks: (all but steal, steal), or None where not available.
    Steal is time a virtual CPU was ready but the hypervisor ran something else: no PSI inside sees it."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    return sum(fields[:7]), fields[7] if len(fields) > 7 else 0


def cpu_pressure_us() -> int | None:
    """Microseconds some task has waited for a CPU since boot (PSI), or None where not available."""
    try:
        with open("/proc/pressure/cpu") as f:
            return int(f.readline().rsplit("total=", 1)[1])
    except (OSError, IndexError, ValueError):
        return None


async def loop_lag(lags: list[float]) -> None:
    """Record how late each 5 ms sleep of this event loop wakes up (ms)."""
    loop = asyncio.get_running_loop()
    while True:
        due = loop.time() + 0.005
        await asyncio.sleep(0.005)
        lags.append((loop.time() - due) * 1000)


def percentile(sorted_ms: list[float], p: float) -> float:
    return sorted_ms[min(len(sorted_ms) - 1, int(len(sorted_ms) * p / 100))]


async def group_bench(duration: float, rate: float) -> tuple[Run, Path]:
    """:func:`bench` against a fresh 3-member group's leader; with the tree whose daemons ran."""
    from bench_dledger import UP_ARGS, group_env

    from daemon.remoting.client import RemotingClient
    from tests.dledger.test_group import elected_master
    from tests.support.paths import ROOT as UP_ROOT
    from tests.support.up import mqctl_up

    with tempfile.TemporaryDirectory() as tmp:
        ns_port = free_port()
        data = Path(tmp) / "group"
        async with mqctl_up(data, group_env(Path(tmp) / "cfg"), ns_port, *UP_ARGS):
            async with RemotingClient() as client:
                leader = await elected_master(client, f"127.0.0.1:{ns_port}")
            return await bench(f"127.0.0.1:{ns_port}", leader, duration, rate), UP_ROOT


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("duration", nargs="?", type=float, default=10.0, help="seconds after the warm-up")
    parser.add_argument("rate", nargs="?", type=float, default=1000.0, help="msgs/s")
    parser.add_argument(
        "--tree", type=Path, default=ROOT, help="source tree of the daemons (default: this one)"
    )
    parser.add_argument("--dledger", action="store_true", help="against a 3-member DLedger group's leader")
    args = parser.parse_args()
    duration, rate, tree = args.duration, args.rate, args.tree.resolve()
    if args.dledger:
        r, tree = run(group_bench(duration, rate))
    else:
        with namesrv_process(tree) as namesrv, broker_process("--namesrv", namesrv, cwd=tree) as (broker, _):
            r = run(bench(namesrv, broker, duration, rate))
    ms, lags = sorted(r.latencies_ms), sorted(r.loop_lags_ms)
    print(
        f"send-to-receipt latency, {len(ms):,} msgs ({r.sent:,} sent at {rate:,.0f} msgs/s over {QUEUES} queues, "
        f"1 KiB, {duration:g} s after a {WARM_UP_S:g} s warm-up; long polling, {r.received / r.pulls:.2f} msgs per "
        f"pull): p50 {percentile(ms, 50):.2f} ms, p90 {percentile(ms, 90):.2f} ms, p99 {percentile(ms, 99):.2f} ms, "
        f"p99.9 {percentile(ms, 99.9):.1f} ms, "
        f"max {ms[-1]:.1f} ms, mean {statistics.fmean(ms):.2f} ms"
    )
    share = "n/a" if r.cpu_wait_share is None else f"{100 * r.cpu_wait_share:.0f}%"
    steal = "n/a" if r.steal_share is None else f"{100 * r.steal_share:.1f}%"
    print(
        f"meanwhile: load generator loop lag p99 {percentile(lags, 99):.1f} ms, max {lags[-1]:.1f} ms; "
        f"some task waiting for a CPU {share} of the time; the hypervisor's steal {steal} of the CPU time; "
        f"load average {os.getloadavg()[0]:.2f}; {'a DLedger group' if args.dledger else 'daemons'} of {tree} "
        f"({'with' if (tree / 'build' / 'native').is_dir() else 'without'} build/native)"
    )
    summary(
        __file__,
        f"p99 {percentile(ms, 99):.2f} ms",
        f"p50 {percentile(ms, 50):.2f} ms, {rate:,.0f} msgs/s{', a DLedger group' if args.dledger else ''}",
    )


if __name__ == "__main__":
    main()
