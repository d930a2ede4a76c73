"""Broker send throughput and start-up time: 16 concurrent synchronous producers, 1 KiB bodies.

Starts `mqctl broker start` in a subprocess on a temporary store (so the load generator does not share
the broker's event loop), waits for it to answer, then runs 16 producers, each with its own connection
and one SEND_MESSAGE_V2 in flight at a time (like 16 producer threads calling `send()`), for DURATION s.
Prints start-up time and sends/s.  Usage: python benchmarks/bench_broker_produce.py [DURATION] [PRODUCERS]
(`MQCTL_FLUSH_DISK_TYPE=SYNC_FLUSH` in the environment measures group commit instead).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from benchlib import summary  # run as a script: benchmarks/ is on sys.path

from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.loop import run
from mqctl.services.bench import BenchResult, Run, result, send_frame, sender, split_frame
from store import native

ROOT = Path(__file__).resolve().parent.parent
BODY = os.urandom(1024)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def wait_ready(addr: str, started: float) -> float:
    while True:
        try:
            async with RemotingClient() as client:
                r = await client.invoke(
                    addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), 1.0
                )
                if r.code == ResponseCode.SUCCESS:
                    return time.perf_counter() - started
        except Exception:
            await asyncio.sleep(0.01)


async def bench(addr: str, duration: float, producers: int, warm_up_seconds: float = 1.0) -> BenchResult:
    """`mqctl bench produce`'s senders, each re-run until ``duration`` is over (after a warm-up of
    ``warm_up_seconds``, none at 0: its sends are not in the result)."""
    # auto-created with 4 queues
    sends = [(addr, *split_frame(send_frame("BenchTopic", q, BODY), BODY), None) for q in range(4)]

    async def until(run: Run, i: int) -> None:
        await sender(itertools.cycle(sends[i % 4 :] + sends[: i % 4]), run)

    if warm_up_seconds > 0:
        warm_up = Run()
        warm_up.deadline = warm_up.started + warm_up_seconds
        await asyncio.gather(*(until(warm_up, i) for i in range(producers)))
    run = Run()
    run.deadline = run.started + duration
    await asyncio.gather(*(until(run, i) for i in range(producers)))
    return result("produce", run.messages, run.failures, time.perf_counter() - run.started, run.rts)


def start_broker(
    store: str, port: int, *flags: str, cwd: Path = ROOT, wrapper: Sequence[str] = (), **settings: str
) -> subprocess.Popen[bytes]:
    """`mqctl broker start` on ``store`` in a subprocess, so the load generator does not share its event loop;
    ``settings`` become MQCTL_* variables (``brokerRole="SLAVE"`` -> ``MQCTL_BROKERROLE``); ``cwd`` is the
    source tree whose broker runs (`python -m` imports from it first); ``wrapper`` runs it (valgrind ...)."""
    argv = [
        *wrapper,
        sys.executable,
        "-m",
        "mqctl",
        "broker",
        "start",
        "--store",
        store,
        "--port",
        str(port),
        "--no-metrics",
    ]
    env = {**os.environ, "MQCTL_BROKER_IP1": "127.0.0.1", "MQCTL_LISTEN_HOST": "127.0.0.1"}
    env.update({f"MQCTL_{k.upper()}": v for k, v in settings.items()})
    return subprocess.Popen([*argv, *flags], cwd=cwd, stderr=subprocess.DEVNULL, env=env)


@contextmanager
def local_cluster(
    data: Path,
    env: dict[str, str] | None = None,
    cwd: Path = ROOT,
    ready: Callable[[str], Awaitable[object]] | None = None,
) -> Iterator[tuple[str, int]]:
    """`mqctl namesrv start` + `mqctl broker start` registered with it, on loopback, stores under ``data``,
    ``env`` added to the environment; yields the NameServer's address and the broker's pid once ``ready``
    (default: the broker answers runtime info) returns."""
    if cwd == ROOT and native.active() is None:  # (a stale build is silent: the broker runs ~2x slower)
        print(
            "bench: build/native is missing or stale, the daemons run pure Python (`make native`)",
            file=sys.stderr,
        )
    ns, port = f"127.0.0.1:{free_port()}", free_port()
    environ = {**os.environ, "MQCTL_BROKER_IP1": "127.0.0.1", "MQCTL_LISTEN_HOST": "127.0.0.1", **(env or {})}
    argvs = [
        ["namesrv", "start", "--data", str(data / "ns"), "--listen", ns],
        [
            "broker",
            "start",
            "--store",
            str(data / "store"),
            "--port",
            str(port),
            "--namesrv",
            ns,
            "--no-metrics",
        ],
    ]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for argv in argvs:
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "mqctl", *argv], cwd=cwd, env=environ, stderr=subprocess.DEVNULL
                )
            )
        addr = f"127.0.0.1:{port}"
        run(ready(addr) if ready is not None else wait_ready(addr, time.perf_counter()))
        yield ns, procs[1].pid
    finally:
        for proc in reversed(procs):
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)


@contextmanager
def broker_process(*flags: str, cwd: Path = ROOT) -> Iterator[tuple[str, float]]:
    """`mqctl broker start` (plus ``flags``) of the tree ``cwd`` on a temporary store; yields its address and
    the seconds to its first answer."""
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        addr = f"127.0.0.1:{port}"
        started = time.perf_counter()
        proc = start_broker(f"{tmp}/store", port, *flags, cwd=cwd)
        try:
            yield addr, run(wait_ready(addr, started))
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)


def main() -> None:
    duration = float(sys.argv[1]) if len(sys.argv) > 1 else 5.0
    producers = int(sys.argv[2]) if len(sys.argv) > 2 else 16
    with broker_process() as (addr, ready):
        rate = run(bench(addr, duration, producers))
    flush = os.environ.get("MQCTL_FLUSH_DISK_TYPE", "ASYNC_FLUSH")
    print(f"broker start-up (process start to first answer, empty store): {ready:.2f} s")
    print(
        f"produce: {rate.tps:,.0f} sends/s, avg RT {rate.avg_rt_ms:.2f} ms, max RT {rate.max_rt_ms:.1f} ms, "
        f"{rate.failures} failures ({producers} producers, 1 KiB bodies, {flush}, {duration:g} s)"
    )
    summary(__file__, f"{rate.tps:,.0f} sends/s", f"{producers} producers, 1 KiB, {flush}, {duration:g} s")


if __name__ == "__main__":
    main()
