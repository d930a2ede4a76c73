"""CPU cost of ``mqctl top`` idle-refreshing a cluster with 1,000 topics (target <= 10 % of one core).

Our NameServer and Broker (metrics endpoint on) run in this process on 127.0.0.1; 1,000 topics of
8 queues are created through the admin API. ``mqctl top`` then runs as its own process on a
pseudo-terminal (120x40), once per screen, and its user+system CPU time is read from /proc over
the measuring window, after a warm-up that includes the first full refresh.

    python benchmarks/bench_top_cpu.py [--topics N] [--interval S] [--seconds S] [--screens overview,topics]
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import os
import pty
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from benchlib import summary  # run as a script: benchmarks/ is on sys.path

from daemon.broker.broker import Broker
from daemon.broker.config import BrokerConfig
from daemon.namesrv.config import NamesrvConfig
from daemon.namesrv.controller import NamesrvController
from daemon.remoting.bodies import TopicConfig
from mqctl.admin.client import Admin
from mqctl.top.live import LiveSource

T = TypeVar("T")
TICKS = os.sysconf("SC_CLK_TCK")


class LoopThread:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(600)


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (fields 14 and 15 of /proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def measure(argv: list[str], env: dict[str, str], warmup: float, seconds: float, expect: bytes) -> float:
    """Run ``argv`` on a pty, drain its output, and return its CPU share over ``seconds`` after ``warmup``;
    ``expect`` must have been drawn (the App really showed the cluster)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True)
    os.close(slave)

    seen = bytearray()

    def drain() -> None:
        try:
            while chunk := os.read(master, 65536):
                if expect not in seen:
                    seen.extend(chunk)
        except OSError:
            return

    threading.Thread(target=drain, daemon=True).start()
    try:
        time.sleep(warmup)
        if proc.poll() is not None:
            raise RuntimeError(f"mqctl top exited with {proc.returncode}")
        c0, t0 = cpu_seconds(proc.pid), time.monotonic()
        time.sleep(seconds)
        c1, t1 = cpu_seconds(proc.pid), time.monotonic()
    finally:
        os.write(master, b"q")
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        os.close(master)
    if expect not in seen:
        raise RuntimeError(f"mqctl top never drew {expect!r}")
    return (c1 - c0) / (t1 - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--topics", type=int, default=1000)
    ap.add_argument("--interval", type=float, default=2.0)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--screens", default="overview,topics")
    ap.add_argument("--without-metrics", action="store_true", help="broker without /metrics, as RocketMQ 4.9")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        loop = LoopThread()
        namesrv = NamesrvController(
            NamesrvConfig(listen_host="127.0.0.1", listen_port=0, data_dir=base / "namesrv")
        )
        loop.run(namesrv.start())
        ns_addr = f"127.0.0.1:{namesrv.port}"
        broker = Broker(
            BrokerConfig(
                broker_name="bench-a",
                broker_ip1="127.0.0.1",
                listen_host="127.0.0.1",
                listen_port=0,
                namesrv_addr=ns_addr,
                store_path_root_dir=str(base / "store"),
                mapped_file_size_commit_log=64 * 1024 * 1024,
                metrics_enable=not args.without_metrics,
                metrics_port=free_port(),
            )
        )
        loop.run(broker.start())

        async def create_topics() -> tuple[int, float]:
            async with Admin([ns_addr]) as admin:
                for i in range(args.topics):
                    await admin.create_topic(broker.addr, TopicConfig(f"bench-topic-{i:04d}", 8, 8))
                source = LiveSource([ns_addr])
                times = []
                try:
                    for _ in range(5):
                        t0 = time.perf_counter()
                        snap = await source.snapshot()
                        times.append(time.perf_counter() - t0)
                finally:
                    await source.close()
                return len(snap.topics or ()), statistics.median(times)

        topics, snapshot_s = loop.run(create_topics())
        print(
            f"cluster: {topics} topics (incl. system topics), one snapshot takes {snapshot_s * 1000:.0f} ms "
            f"(median of 5, in-process)"
        )

        env = {k: v for k, v in os.environ.items() if not k.startswith("MQCTL_")}
        env.update(MQCTL_CONFIG_DIR=str(base / "cli-config"), TERM="xterm-256color")
        shares = []
        try:
            for screen in args.screens.split(","):
                argv = [
                    sys.executable,
                    "-m",
                    "mqctl",
                    "top",
                    "-n",
                    ns_addr,
                    "--interval",
                    str(args.interval),
                    "--screen",
                    screen,
                ]
                share = measure(
                    argv,
                    env,
                    args.warmup,
                    args.seconds,
                    b"bench-topic-" if screen == "topics" else b"bench-a",
                )
                shares.append(share)
                source = "admin requests only" if args.without_metrics else "metrics endpoint"
                print(
                    f"mqctl top --screen {screen} --interval {args.interval:g} ({source}): {share * 100:.1f} % "
                    f"of one core over {args.seconds:g} s (target <= 10 %)"
                )
        finally:
            loop.run(broker.stop())
            loop.run(namesrv.stop())
    summary(
        __file__,
        f"{max(shares) * 100:.1f} % of one core",
        f"target 10 %; the busier of {args.screens}, {args.topics:,} topics, {args.seconds:g} s",
    )


if __name__ == "__main__":
    main()
