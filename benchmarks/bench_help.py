"""Median wall time of ``mqctl --help`` (target <= 0.25 s) and of a trivial online command, ``mqctl topic
list`` against a local NameServer + broker (target <= 0.3 s), each a fresh process per run, next to a bare
``python -c pass`` and ``python -c 'import typer'`` measured in the same rounds: the machine's own floor,
and the floor of any ``mqctl`` command (Python, click and typer), as figures swing between machines. Each
case's CPU per run (user + system of the child) is printed too: on a busy host it moves less than wall time.

    python benchmarks/bench_help.py [--runs 9] [--namesrv HOST:PORT]

Without ``--namesrv`` a cluster is started with ``mqctl up`` on free loopback ports in a temporary directory
and stopped afterwards. Rounds are interleaved (bare, typer, help, topic list, bare, ...), so load drifts hit them all.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from benchlib import summary  # run as a script: benchmarks/ is on sys.path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def _local_cluster(exe: str) -> Iterator[str]:
    """``mqctl up`` on free ports (the broker's three consecutive ones free too); its NameServer address."""
    with tempfile.TemporaryDirectory(prefix="bench-help-") as data:
        while True:
            ns, broker = _free_port(), _free_port()
            if ns not in range(broker - 2, broker + 3):
                break
        proc = subprocess.Popen(
            [
                exe,
                "up",
                "--data",
                data,
                "--namesrv-port",
                str(ns),
                "--broker-port",
                str(broker),
                "--no-metrics",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        addr = f"127.0.0.1:{ns}"
        try:
            deadline = time.monotonic() + 60
            while subprocess.run([exe, "topic", "list", "-n", addr], capture_output=True).returncode != 0:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit(f"mqctl up did not serve on {addr}")
                time.sleep(0.5)
            yield addr
        finally:
            os.killpg(proc.pid, signal.SIGINT)
            proc.wait(timeout=30)


def _timed(argv: list[str]) -> tuple[float, float]:
    """Wall time and CPU time (user + system) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument(
        "--namesrv", help="HOST:PORT of a running NameServer (default: start one with mqctl up)"
    )
    args = parser.parse_args()
    exe = shutil.which("mqctl", path=str(Path(sys.executable).parent)) or "mqctl"
    with _local_cluster(exe) if args.namesrv is None else _given(args.namesrv) as addr:
        cases = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "import typer": [sys.executable, "-c", "import typer"],
            "mqctl --help": [exe, "--help"],
            "mqctl topic list": [exe, "topic", "list", "-n", addr],
        }
        times: dict[str, list[float]] = {name: [] for name in cases}
        cpu: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(args.runs):
            for name, argv in cases.items():
                wall, used = _timed(argv)
                times[name].append(wall)
                cpu[name].append(used)
    load = os.getloadavg()[0]
    for name, runs in times.items():
        print(
            f"{name:18} median {statistics.median(runs) * 1000:5.0f} ms, max {max(runs) * 1000:5.0f} ms,"
            f" CPU median {statistics.median(cpu[name]) * 1000:4.0f} ms over {len(runs)} runs"
            f" (load average {load:.2f})"
        )
    help_ms, list_ms, bare_ms, typer_ms = (
        statistics.median(times[k]) * 1000
        for k in ("mqctl --help", "mqctl topic list", "python -c pass", "import typer")
    )
    summary(
        __file__,
        f"mqctl --help {help_ms:.0f} ms",
        f"target 250 ms; topic list {list_ms:.0f} ms, target 300; python -c pass {bare_ms:.0f} ms, "
        f"import typer {typer_ms:.0f} ms; median of {args.runs}",
    )


@contextmanager
def _given(addr: str) -> Iterator[str]:
    yield addr


if __name__ == "__main__":
    main()
