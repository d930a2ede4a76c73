"""``mqctl msg query --key`` against a broker holding 1,000,000 messages: median wall time of the
whole command, CLI start-up included (target <= 0.5 s), a fresh process each run.

The store is written in-process with the engine (fast), then our NameServer and Broker start on it
(127.0.0.1, port 0) in a background event loop and the CLI queries random keys over TCP.

    python benchmarks/bench_msg_query.py [--count N] [--runs N] [--dir PATH]

With ``--dir`` the store is kept there and reused by later runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from bench_store_append import make_messages
from benchlib import summary  # run as a script: benchmarks/ is on sys.path

from daemon.broker.broker import Broker
from daemon.broker.config import BrokerConfig
from daemon.broker.headers import CreateTopicRequestHeader
from daemon.namesrv.config import NamesrvConfig
from daemon.namesrv.controller import NamesrvController
from daemon.remoting.codes import RequestCode
from daemon.remoting.errors import RemotingCommandError
from mqctl.admin.client import Admin
from store import DefaultMessageStore, StoreConfig

T = TypeVar("T")
TOPIC = "BenchTopic"
QUEUES = 8


def build(root: str, count: int) -> None:
    """Write ``count`` keyed messages (KEYS ``order-<i>``) with the engine, unless already there."""
    with DefaultMessageStore(StoreConfig(store_path_root_dir=root)) as store:
        done = sum(store.topic_queue_table().get((TOPIC, q), 0) for q in range(QUEUES))
        t0 = time.perf_counter()
        for start in range(done, count, 100_000):
            for m in make_messages(min(100_000, count - start), 100, keys=True, start=start, queues=QUEUES):
                store.put_message(m)
        total = sum(store.topic_queue_table().get((TOPIC, q), 0) for q in range(QUEUES))
    print(f"store ready: {total:,} messages ({time.perf_counter() - t0:.1f} s to write {total - done:,})")


class LoopThread:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(600)


async def wait_for_route(namesrv: str) -> None:
    async with Admin([namesrv]) as admin:
        for _ in range(600):
            try:
                await admin.topic_route(TOPIC)
                return
            except RemotingCommandError:
                await asyncio.sleep(0.05)
    raise RuntimeError(f"{TOPIC} never got a route")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--count", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--dir", default=None, help="store directory to build once and reuse")
    args = ap.parse_args()
    tmp = None if args.dir else tempfile.TemporaryDirectory()
    base = Path(args.dir or tmp.name)  # type: ignore[union-attr]
    root = base / "store"
    root.mkdir(parents=True, exist_ok=True)
    build(str(root), args.count)

    loop = LoopThread()
    namesrv = NamesrvController(
        NamesrvConfig(listen_host="127.0.0.1", listen_port=0, data_dir=base / "namesrv")
    )
    loop.run(namesrv.start())
    ns_addr = f"127.0.0.1:{namesrv.port}"
    config = BrokerConfig(
        broker_name="bench-a",
        broker_ip1="127.0.0.1",
        listen_host="127.0.0.1",
        listen_port=0,
        namesrv_addr=ns_addr,
        store_path_root_dir=str(root),
        metrics_enable=False,
    )
    broker = Broker(config)
    t0 = time.perf_counter()
    loop.run(broker.start())
    print(f"broker up on {broker.addr} in {time.perf_counter() - t0:.1f} s")

    async def create_topic() -> None:
        async with Admin([ns_addr]) as admin:
            header = CreateTopicRequestHeader(TOPIC, "TBW102", QUEUES, QUEUES, 6, "SINGLE_TAG")
            await admin.call(broker.addr, RequestCode.UPDATE_AND_CREATE_TOPIC, header)
        await wait_for_route(ns_addr)

    loop.run(create_topic())

    exe = shutil.which("mqctl", path=str(Path(sys.executable).parent)) or "mqctl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MQCTL_")}
    env["MQCTL_CONFIG_DIR"] = str(base / "cli-config")
    rng = random.Random(7)
    times = []
    try:
        for _ in range(args.runs):
            n = rng.randrange(args.count)
            start = time.perf_counter()
            out = subprocess.run(
                [exe, "msg", "query", "-t", TOPIC, "-k", f"order-{n}", "-n", ns_addr, "-o", "json"],
                check=True,
                capture_output=True,
                text=True,
                env=env,
            )
            times.append(time.perf_counter() - start)
            rows = json.loads(out.stdout)
            assert [r["keys"] for r in rows] == [f"order-{n}"], rows
    finally:
        loop.run(broker.stop())
        loop.run(namesrv.stop())
    print(
        f"mqctl msg query --key on {args.count:,} messages: median {statistics.median(times) * 1000:.0f} ms, "
        f"max {max(times) * 1000:.0f} ms over {args.runs} runs (target <= 500 ms)"
    )
    summary(
        __file__,
        f"{statistics.median(times) * 1000:.0f} ms",
        f"target 500 ms; median of {args.runs}, {args.count:,} messages",
    )


if __name__ == "__main__":
    main()
