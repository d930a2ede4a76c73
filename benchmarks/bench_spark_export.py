"""Spark export throughput on a generated store of 1 KiB messages (96 MiB by default) (local[2], no bodies).

Prints, separately: Spark start-up (JVM + session + data source registration), export throughput
inside the running session (first run, which also starts the Python workers, then warm runs),
a scan-only figure (Spark's ``noop`` sink: decode + transfer, no Parquet encoding), and a
fresh-process end-to-end ``mqctl spark-export`` run with the figures it printed itself (wall from
process start, Spark start-up apart). MB/s is CommitLog data bytes (1e6) per second.

With ``--remote sc://HOST:PORT`` the same runs go through an existing Spark Connect server (which
must see the store's path and import mqctl) instead of a local JVM.

    python benchmarks/bench_spark_export.py [--size-mib 96] [--runs 2] [--store DIR] [--keep]
                                            [--master local[2] | --remote sc://127.0.0.1:15002]

The store is written with ``store.record.encode_record`` into 1 GiB CommitLog files (the last
one sparse, as a broker preallocates it) in a temporary directory that is deleted afterwards
unless ``--keep`` or ``--store`` is given.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import summary  # run as a script: benchmarks/ is on sys.path

from store.message import Message
from store.record import encode_blank, encode_record

FILE_SIZE = 1 << 30
BODY_SIZE = 1024


def generate(root: Path, size_mib: int) -> int:
    """Write ``size_mib`` MiB of records (1 KiB bodies, 8 topics x 4 queues) and return the data bytes."""
    commitlog = root / "commitlog"
    commitlog.mkdir(parents=True)
    bodies = [bytes((i * 7 + j) % 94 + 33 for j in range(BODY_SIZE)) for i in range(16)]
    hosts = [(f"10.0.{i}.{i + 10}", 40000 + i) for i in range(6)]
    target = size_mib << 20
    written = seq = 0
    queue_offsets: dict[tuple[str, int], int] = {}
    base = 0
    t0 = 1_795_000_000_000
    while written < target:
        path = commitlog / f"{base:020d}"
        with open(path, "wb") as f:
            f.truncate(FILE_SIZE)
            pos = 0
            while written < target:
                topic, queue = f"BenchTopic{seq % 8}", seq % 4
                qoff = queue_offsets.get((topic, queue), 0)
                msg = Message(
                    topic=topic,
                    body=bodies[seq % 16],
                    queue_id=queue,
                    properties={
                        "KEYS": f"order-{seq} customer-{seq % 1009}",
                        "TAGS": f"tag{seq % 5}",
                        "UNIQ_KEY": f"0A000001{seq:024X}",
                        "CLUSTER": "BenchCluster",
                    },
                    born_timestamp=t0 + seq,
                    born_host=hosts[seq % len(hosts)],
                )
                record = encode_record(
                    msg, queue_offset=qoff, physical_offset=base + pos, store_timestamp=t0 + seq + 3,
                    store_host=("10.0.0.1", 10911),
                )  # fmt: skip
                if pos + len(record) + 8 > FILE_SIZE:
                    f.write(encode_blank(FILE_SIZE - pos))
                    written += FILE_SIZE - pos
                    break
                f.write(record)
                queue_offsets[(topic, queue)] = qoff + 1
                pos += len(record)
                written += len(record)
                seq += 1
        base += FILE_SIZE
    return written


def _line(name: str, seconds: float, data_bytes: int | None = None, extra: str = "") -> None:
    rate = f"  {data_bytes / seconds / 1e6:7.1f} MB/s" if data_bytes else ""
    print(f"{name:<44} {seconds:8.2f} s{rate}{extra}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=96, help="data to generate")
    parser.add_argument("--runs", type=int, default=2, help="in-session export runs (the first one is cold)")
    parser.add_argument("--store", type=Path, help="use (or create and keep) this store")
    parser.add_argument("--keep", action="store_true", help="keep the generated store and outputs")
    parser.add_argument("--master", default=None, help="Spark master (default local[2])")
    parser.add_argument("--remote", default=None, help="a Spark Connect server, sc://HOST:PORT")
    args = parser.parse_args()
    if args.master is None and args.remote is None:
        args.master = "local[2]"
    where = ["--remote", args.remote] if args.remote else ["--master", args.master]

    work = Path(tempfile.mkdtemp(prefix="mqctl-bench-spark-", dir="/tmp"))
    store = args.store or work / "store"
    try:
        if not (store / "commitlog").is_dir():
            free = shutil.disk_usage(store.parent if store.parent.exists() else work).free
            if free < (args.size_mib << 20) * 3:
                sys.exit(f"not enough free disk for a {args.size_mib} MiB store: {free >> 20} MiB free")
            t = time.perf_counter()
            data = generate(store, args.size_mib)
            _line(f"generate {data / 2**30:.2f} GiB of 1 KiB messages", time.perf_counter() - t, data)
        print(
            f"load average before Spark: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores"
        )
        from mqctl.spark.export import export, load
        from mqctl.spark.session import spark_session

        t = time.perf_counter()
        with spark_session(args.master, remote=args.remote, app_name="mqctl-bench") as spark:
            _line(f"Spark start-up ({' '.join(where)}, session + data source)", time.perf_counter() - t)
            walls = []
            for run in range(1, args.runs + 1):
                result = export(spark, store, work / "out.parquet", overwrite=True)
                _line(
                    f"export run {run} in session (parquet, no body)", result.wall_seconds, result.data_bytes,
                    f"  {result.rows:,} rows, {result.splits} splits",
                )  # fmt: skip
                walls.append(result.wall_seconds)
            warm = walls[1:] or walls
            _line("in-session export, best warm run", min(warm), result.data_bytes)
            _line("in-session export, median warm run", statistics.median(warm), result.data_bytes)
            t = time.perf_counter()
            load(spark, store).write.format("noop").mode("overwrite").save()
            _line("scan only in session (noop sink)", time.perf_counter() - t, result.data_bytes)
        t = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "mqctl", "spark-export", "--store", str(store), "--out", str(work / "e2e.parquet"),
             *where, "-o", "json"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if proc.returncode:
            sys.exit(f"end-to-end run failed: {proc.stderr.strip().splitlines()[-1:]}")
        _line("fresh process end to end (mqctl spark-export)", time.perf_counter() - t, result.data_bytes)
        printed = json.loads(proc.stdout)
        _line("  as printed: wall_seconds", printed["wall_seconds"], printed["data_bytes"])
        _line("  as printed: spark_start_seconds", printed["spark_start_seconds"])
        _line("  as printed: job_seconds", printed["job_seconds"], printed["data_bytes"])
        summary(
            __file__,
            f"{result.data_bytes / 1e6 / min(warm):,.1f} MB/s in session",
            f"best warm run, {result.data_bytes >> 20:,} MiB; end to end {printed['wall_seconds']:.1f} s wall "
            f"of which Spark start {printed['spark_start_seconds']:.1f} s",
        )
    finally:
        if args.keep:
            print(f"kept {work}" + ("" if args.store else f" (store {store})"))
        else:
            shutil.rmtree(work, ignore_errors=True)
            if args.store is None:
                shutil.rmtree(store, ignore_errors=True)


if __name__ == "__main__":
    main()
