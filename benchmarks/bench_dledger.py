"""A 3-member DLedger group against a single ASYNC_MASTER: produce throughput, broker CPU per send, failover.

Throughput: `bench_broker_produce`'s load (PRODUCERS synchronous senders of 1 KiB bodies for DURATION s) against
the group's leader (`mqctl up --dledger 3`, three broker processes) and against one ASYNC_MASTER process,
in interleaved rounds (A, B, A, B, ...) so that a change in the machine's load hits both alike. CPU per send
is the user + system time of every broker process of the run (the three members summed) over the sends. The
load generator (this process) runs on the same event loop (uvloop, `daemon.remoting.loop.run`) for both
sides, and its own CPU per send is printed beside the brokers': it shares the machine's two cores with them.

Failover: SIGKILL of the leader's process to the first SEND_OK through the new leader (the test suite's
`failover`, which also reads every acknowledged message back), with DLedger's default timings and with
``heartBeatTimeIntervalMs=500``; the median of FAILOVERS runs of each.

Usage: python benchmarks/bench_dledger.py [DURATION] [PRODUCERS] [ROUNDS] [FAILOVERS]
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench_ali_ons import cpu_seconds  # run as a script: benchmarks/ is on sys.path
from bench_broker_produce import bench, free_port
from bench_ha import PIDS, broker
from benchlib import summary

from daemon.remoting.client import RemotingClient
from daemon.remoting.loop import run
from tests.dledger.test_group import elected_master, failover
from tests.support.cli import clean_env
from tests.support.up import mqctl_up

UP_ARGS = ("--dledger", "3", "--broker-port", "0", "--no-metrics")


def group_env(config_root: Path) -> dict[str, str]:
    """The members' environment: clean, but for ``MQCTL_NATIVE`` (``=0``: the pure-Python run, as the single
    broker, which inherits this process's environment, gets it) and the timeline's ``MQCTL_DLEDGER_TRACE``
    (see `daemon.dledger.trace`; `benchmarks/dledger_timeline.py` reads what it writes)."""
    env = clean_env(config_root)
    for key in ("MQCTL_NATIVE", "MQCTL_DLEDGER_TRACE", "MQCTL_DLEDGER_TRACE_EVERY"):
        if key in os.environ:
            env[key] = os.environ[key]
    return env


def member_pids(data: Path) -> list[int]:
    return [int(p.read_text().split()[0]) for p in data.glob("store-broker-a-n*/broker.pid")]


async def group_round(
    tmp: str, name: str, duration: float, producers: int
) -> tuple[float, float, list[float], float]:
    """One produce run against a fresh 3-member group: (sends/s, broker CPU seconds per send, each member's
    CPU seconds per send, the largest, the leader's, first; the load generator's CPU seconds per send)."""
    ns_port = free_port()
    data = Path(tmp) / name
    async with mqctl_up(data, group_env(data.parent / f"{name}-cfg"), ns_port, *UP_ARGS):
        async with RemotingClient() as client:
            leader = await elected_master(client, f"127.0.0.1:{ns_port}")
        pids = member_pids(data)
        cpu0 = [cpu_seconds(p) for p in pids]
        own0 = time.process_time()
        result = await bench(leader, duration, producers)
        own = time.process_time() - own0
        cpu = [cpu_seconds(p) - c0 for p, c0 in zip(pids, cpu0, strict=True)]
    sends = max(1, result.messages)
    return result.tps, sum(cpu) / sends, sorted((c / sends for c in cpu), reverse=True), own / sends


def single_round(tmp: str, name: str, duration: float, producers: int) -> tuple[float, float, float]:
    """One produce run against a fresh single ASYNC_MASTER: (sends/s, broker CPU seconds per send, the load
    generator's CPU seconds per send)."""
    with broker(f"{tmp}/{name}", free_port(), broker_role="ASYNC_MASTER") as addr:
        pid = PIDS[addr]
        cpu0 = cpu_seconds(pid)
        own0 = time.process_time()
        result = run(bench(addr, duration, producers))
        own = time.process_time() - own0
        cpu = cpu_seconds(pid) - cpu0
    sends = max(1, result.messages)
    return result.tps, cpu / sends, own / sends


async def failover_run(tmp: str, name: str, heartbeat_ms: int | None) -> float:
    ns_port = free_port()
    data = Path(tmp) / name
    env = group_env(data.parent / f"{name}-cfg")
    if heartbeat_ms is not None:
        env["MQCTL_HEART_BEAT_TIME_INTERVAL_MS"] = str(heartbeat_ms)
    async with mqctl_up(data, env, ns_port, *UP_ARGS):
        return await failover(data, f"127.0.0.1:{ns_port}")


def main() -> None:
    duration = float(sys.argv[1]) if len(sys.argv) > 1 else 5.0
    producers = int(sys.argv[2]) if len(sys.argv) > 2 else 16
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    failovers = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    group: list[tuple[float, float, list[float], float]] = []
    single: list[tuple[float, float, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(rounds):
            single.append(single_round(tmp, f"single{i}", duration, producers))
            group.append(run(group_round(tmp, f"group{i}", duration, producers)))
            print(
                f"round {i}: single {single[-1][0]:,.0f} sends/s {single[-1][1] * 1e6:.0f} µs CPU/send; "
                f"group {group[-1][0]:,.0f} sends/s {group[-1][1] * 1e6:.0f} µs CPU/send "
                f"({' + '.join(f'{c * 1e6:.0f}' for c in group[-1][2])} µs: leader, followers); "
                f"load generator {single[-1][2] * 1e6:.0f} and {group[-1][3] * 1e6:.0f} µs CPU/send",
                flush=True,
            )
        took: dict[str, list[float]] = {"default": [], "500ms": []}
        for i in range(failovers):
            for label, hb in (("default", None), ("500ms", 500)):
                took[label].append(run(failover_run(tmp, f"fo-{label}-{i}", hb)))
                print(f"failover {label} heartbeats: {took[label][-1]:.2f} s", flush=True)
    ratio = statistics.median(g[0] / s[0] for g, s in zip(group, single, strict=True))
    g_tps, s_tps = statistics.median(g[0] for g in group), statistics.median(s[0] for s in single)
    g_cpu, s_cpu = statistics.median(g[1] for g in group), statistics.median(s[1] for s in single)
    fo = {k: statistics.median(v) for k, v in took.items() if v}
    print(
        f"group {g_tps:,.0f} sends/s vs single ASYNC_MASTER {s_tps:,.0f}: {ratio:.0%}; broker CPU per send "
        f"{g_cpu * 1e6:.0f} µs (3 members) vs {s_cpu * 1e6:.0f} µs"
    )
    if fo:
        print(
            f"failover median: default {fo['default']:.2f} s, heartBeatTimeIntervalMs=500 {fo['500ms']:.2f} s"
        )
    fo_text = f", failover {fo['default']:.1f} s / {fo['500ms']:.1f} s" if fo else ""
    summary(
        __file__,
        f"{ratio:.0%} of ASYNC_MASTER sends/s{fo_text}",
        f"{producers} producers, 1 KiB, {duration:g} s x {rounds}, {g_cpu * 1e6:.0f} vs {s_cpu * 1e6:.0f} µs CPU/send",
    )


if __name__ == "__main__":
    main()
