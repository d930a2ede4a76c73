"""CPU time of ``render`` for a big listing (``topic list`` of a broker with ``--rows`` topics, a ``msg
query`` returning that many rows), into a pipe: the table as mqctl lays it out past ``FAST_TABLE_ROWS``,
next to ``-o json`` and ``-o csv`` of the same rows, and per row the table as rich lays it out (measured on
``--rich-rows`` rows only: rich takes minutes for the whole listing). Rounds are interleaved, so load drifts
hit every case; the figure is the median of ``--runs``.

    python benchmarks/bench_big_table.py [--rows 100000] [--rich-rows 2000] [--runs 3]
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchlib import summary  # run as a script: benchmarks/ is on sys.path

import mqctl.output as output


def listing(rows: int) -> list[dict[str, Any]]:
    """Rows shaped as ``topic list -o json``'s and ``msg query``'s: names, numbers, a size, a time."""
    return [
        {
            "topic": f"Orders-{i:06d}",
            "broker": "broker-a",
            "queue_id": i % 8,
            "max_offset": i * 37,
            "body_bytes": 1024 + i % 4096,
            "keys": f"order-{i} [paid]",
            "store_time": "2026-01-02T03:04:05+00:00",
            "store_time_ms": 1767323045000 + i,
        }
        for i in range(rows)
    ]


def cpu(data: list[dict[str, Any]], fmt: str, *, fast: bool = True) -> float:
    """CPU seconds (user + system) of one ``render(data, fmt)`` into a pipe-like stream."""
    output.FAST_TABLE_ROWS = 500 if fast else 1 << 40
    out = io.StringIO()
    before = os.times()
    output.render(data, fmt, out=out)
    after = os.times()
    return (after.user - before.user) + (after.system - before.system)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--rich-rows", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    big, small = listing(args.rows), listing(args.rich_rows)
    times: dict[str, list[float]] = {"table": [], "json": [], "csv": [], "rich table": []}
    for _ in range(args.runs):
        for fmt in ("table", "json", "csv"):
            times[fmt].append(cpu(big, fmt))
        times["rich table"].append(cpu(small, "table", fast=False) * args.rows / args.rich_rows)
    load = os.getloadavg()[0]
    for name, runs in times.items():
        print(
            f"{name:10} median {statistics.median(runs):7.2f} s CPU for {args.rows} rows (load average {load:.2f})"
        )
    table, rich = statistics.median(times["table"]), statistics.median(times["rich table"])
    summary(
        __file__,
        f"table of {args.rows} rows {table:.2f} s CPU",
        f"json {statistics.median(times['json']):.2f} s, csv {statistics.median(times['csv']):.2f} s, "
        f"rich's layout {rich:.0f} s (from {args.rich_rows} rows); median of {args.runs}",
    )


if __name__ == "__main__":
    main()
