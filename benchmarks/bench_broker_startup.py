"""Broker start-up on a 256 MiB store (SIZE_MIB): process start to the first answer, after a clean and an abnormal exit.

Builds the store once in-process through the store API (1 KiB producer-like messages with a UNIQ_KEY,
over 4 topics x 8 queues; far faster than over the wire) and closes it cleanly. Then, RUNS times each:

* clean: `mqctl broker start` on it, timed until it answers GET_BROKER_RUNTIME_INFO, then SIGTERM
  (a clean shutdown: checkpoint written, ``abort`` removed);
* abnormal: the same after the previous broker was killed with SIGKILL once it answered (``abort``
  left behind, nothing flushed at exit), so the start runs abnormal recovery.

The store's pages stay in the page cache between runs (it was just written): this times the broker's
work, not the disk. Normal recovery validates every record of the last 3 CommitLog files (here all of
them: the files are 1 GiB), CRC included, as RocketMQ does. Abnormal recovery validates and re-dispatches
what follows the checkpoint's recovery point (written at start, every flushConsumeQueueThoroughInterval
and at shutdown; here nothing, the broker is killed idle); without one (RocketMQ's checkpoint) it would
re-dispatch from the start of the file the timestamps pick, and with messageIndexSafe re-index
everything since the last full index file. Usage: python benchmarks/bench_broker_startup.py [SIZE_MIB] [RUNS]
"""

from __future__ import annotations

import os
import signal
import statistics
import sys
import tempfile
import time

# run as a script: benchmarks/ is on sys.path
from bench_broker_produce import free_port, start_broker, wait_ready
from bench_store_append import make_messages
from benchlib import summary  # run as a script: benchmarks/ is on sys.path

from daemon.remoting.loop import run
from store import DefaultMessageStore, StoreConfig

TOPICS = 4
QUEUES = 8
CHUNK = 20_000


def build_store(root: str, size: int) -> int:
    """Append messages until the CommitLog holds ``size`` bytes; returns how many were written."""
    count = 0
    with DefaultMessageStore(StoreConfig(store_path_root_dir=root)) as store:
        while store.max_phy_offset < size:
            topic = f"StartupBench-{(count // CHUNK) % TOPICS}"
            for m in make_messages(CHUNK, 1024, keys=False, start=count, topic=topic, queues=QUEUES):
                store.put_message(m)
            count += CHUNK
    return count


def timed_start(store: str, stop: signal.Signals) -> float:
    """Start a broker on ``store``, return the seconds to its first answer, then stop it with ``stop``."""
    port = free_port()
    started = time.perf_counter()
    proc = start_broker(store, port)
    try:
        return run(wait_ready(f"127.0.0.1:{port}", started))
    finally:
        proc.send_signal(stop)
        proc.wait(60)


def main() -> None:
    size = int(sys.argv[1]) * 1024 * 1024 if len(sys.argv) > 1 else 256 * 1024 * 1024
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    with tempfile.TemporaryDirectory(dir="/tmp", prefix="bench-startup-") as tmp:
        store = os.path.join(tmp, "store")
        t0 = time.perf_counter()
        count = build_store(store, size)
        print(
            f"built {count:,} x 1 KiB messages ({size / 2**20:,.0f} MiB CommitLog) in {time.perf_counter() - t0:.1f} s"
        )
        clean = [timed_start(store, signal.SIGTERM) for _ in range(runs)]
        timed_start(store, signal.SIGKILL)  # leaves the abort file for the first abnormal run
        abnormal = [timed_start(store, signal.SIGKILL) for _ in range(runs)]
        timed_start(store, signal.SIGTERM)  # recover once more so the store is left clean
    for kind, times in (("clean shutdown", clean), ("abnormal exit (SIGKILL)", abnormal)):
        runs_s = ", ".join(f"{t:.2f}" for t in times)
        print(
            f"broker start-up after {kind}: median {statistics.median(times):.2f} s (runs: {runs_s} s), "
            f"{count:,} messages"
        )
    summary(
        __file__,
        f"{statistics.median(abnormal):.2f} s after SIGKILL",
        f"{statistics.median(clean):.2f} s after a clean stop; {size >> 20:,} MiB, median of {runs}",
    )


if __name__ == "__main__":
    main()
