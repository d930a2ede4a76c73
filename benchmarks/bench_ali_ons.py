"""Broker speed as the real Node.js client ali-ons sees it: sync sends/s and push-consumer drain msgs/s.

Starts `mqctl namesrv start` and `mqctl broker start` as subprocesses on a temporary store, creates the
topics (8 queues) before ali-ons starts (it learns routes at start only), then runs benchmarks/tools/ons_bench.js:
- produce: N async loops sharing one ali-ons Producer, each awaiting `send()` of a 1 KiB body in turn
  (RocketMQ's benchmark Producer with N threads), for each N in --concurrency, SECONDS timed;
- consume: COUNT 1 KiB messages pre-loaded with `mqctl bench produce`'s senders, drained by an ali-ons
  push consumer in a new group from the first offset; timed from its first message to its last.
Each is repeated --runs times; every figure comes with the broker's and node's CPU share (of one core)
over the timed window and the load average, since client and broker share the cores.
Usage: python benchmarks/bench_ali_ons.py [--runs 1] [--concurrency 16] [--seconds 5] [--count 10000]
(needs node and scripts/install-interop-clients.sh).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench_broker_produce import local_cluster  # run as a script: benchmarks/ is on sys.path
from benchlib import summary  # run as a script: benchmarks/ is on sys.path

from daemon.remoting.errors import RemotingError
from daemon.remoting.loop import run
from mqctl.admin.client import Admin
from mqctl.errors import MqctlError
from mqctl.services.bench import produce
from mqctl.services.topics import TopicSpec, upsert

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = Path(__file__).resolve().parent / "tools" / "ons_bench.js"
TICK = os.sysconf("SC_CLK_TCK")


@contextmanager
def cluster() -> Iterator[tuple[str, int]]:
    """A NameServer and a broker registered with it; yields the NameServer address and the broker's pid."""
    with tempfile.TemporaryDirectory() as tmp, local_cluster(Path(tmp)) as (ns, pid):
        yield ns, pid


async def create_topics(ns: str, topics: list[str], preload: dict[str, int]) -> None:
    """Create each topic with 8 queues once the broker is registered, wait for the NameServer to route
    them, then fill the ``preload`` topics with 1 KiB messages."""
    async with Admin([ns]) as admin:
        for topic in topics:
            while True:
                try:
                    await upsert(admin, TopicSpec(topic, 8, 8), cluster=None, broker=None, mode="create")
                    await admin.topic_route(topic)
                    break
                except (MqctlError, RemotingError):
                    await asyncio.sleep(0.1)
        for topic, count in preload.items():
            await produce(admin, topic, topics=1, threads=16, size=1024, count=count)


def stat_fields(pid: int) -> list[str]:
    """/proc/PID/stat's fields after the command name (``fields[7]`` is minflt, 11 and 12 utime and stime)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def cpu_seconds(pid: int) -> float:
    fields = stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime


def ons(broker_pid: int, *args: str) -> dict[str, float]:
    """Run ons_bench.js; add the broker's CPU share over the window it opens ("start") and closes (JSON)."""
    with subprocess.Popen(["node", str(SCRIPT), *args], stdout=subprocess.PIPE, text=True) as proc:
        assert proc.stdout is not None
        opened = proc.stdout.readline() == "start\n"
        cpu, wall = cpu_seconds(broker_pid), time.perf_counter()
        line = proc.stdout.readline() if opened else ""
        broker = (cpu_seconds(broker_pid) - cpu) / (time.perf_counter() - wall)
    if proc.returncode != 0 or not line:
        raise SystemExit(f"ons_bench.js {args[0]} failed ({proc.returncode})")
    return {**json.loads(line), "brokerCpu": broker}


def shares(r: dict[str, float]) -> str:
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"broker CPU {r['brokerCpu']:.0%}, node CPU {r['nodeCpu']:.0%}, load {load}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--concurrency", default="16", help="comma-separated N of concurrent send loops")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--count", type=int, default=10_000, help="messages pre-loaded and drained")
    a = parser.parse_args()
    sends: list[float] = []
    drains: list[float] = []
    with cluster() as (ns, broker):
        run(create_topics(ns, ["OnsSendBench", "OnsDrainBench"], {"OnsDrainBench": a.count}))
        for i in range(a.runs):
            r = ons(broker, "consume", ns, "OnsDrainBench", f"CID_ONS_BENCH_{i}", str(a.count))
            drains.append(r["count"] / r["seconds"])
            print(
                f"ali-ons drain: {r['count'] / r['seconds']:,.0f} msgs/s ({r['count']:,} x 1 KiB, 8 queues, "
                f"first message {r['firstMs']:.0f} ms after client start; {shares(r)})",
                flush=True,
            )
        for _ in range(a.runs):
            for n in map(int, a.concurrency.split(",")):
                r = ons(broker, "produce", ns, "OnsSendBench", str(n), str(a.seconds))
                sends.append(r["count"] / r["seconds"])
                print(
                    f"ali-ons sync send, N={n}: {r['count'] / r['seconds']:,.0f} sends/s, {r['failures']} "
                    f"failures (1 KiB, {a.seconds:g} s; {shares(r)})",
                    flush=True,
                )
    summary(
        __file__,
        f"ali-ons {max(sends):,.0f} sends/s",
        f"N={a.concurrency}, best of {a.runs} x {a.seconds:g} s; drain {max(drains):,.0f} msgs/s",
    )


if __name__ == "__main__":
    main()
