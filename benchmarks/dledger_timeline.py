"""Lines up the timeline files a DLedger group writes with ``MQCTL_DLEDGER_TRACE=DIR`` (see
`daemon.dledger.trace`) into where a send's time goes: for each step (member, event), the time from the
send's frame read on the leader, median / p90 / p99 over the sampled sends, in the order of the medians.

Usage: python benchmarks/dledger_timeline.py DIR [SKIP_SECONDS]
(SKIP_SECONDS, default 1: sends of the first second left out, while connections open and the loop warms.)
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from pathlib import Path


def load(directory: Path) -> dict[int, dict[str, int]]:
    """index -> "member event" -> monotonic ns (its first occurrence)."""
    steps: dict[int, dict[str, int]] = defaultdict(dict)
    for path in sorted(directory.glob("trace-*.tsv")):
        for line in path.read_text().splitlines():
            parts = line.split("\t")
            if len(parts) != 4:
                continue
            at, who, event, index = int(parts[0]), parts[1], parts[2], int(parts[3])
            steps[index].setdefault(f"{who} {event}", at)
    return steps


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def timeline(steps: dict[int, dict[str, int]], skip_s: float) -> list[tuple[str, float, float, float, int]]:
    """(step, median µs, p90 µs, p99 µs, samples) from the leader's read of the send."""
    sends = {i: s for i, s in steps.items() if any(k.endswith(" send-read") for k in s)}
    if not sends:
        return []
    first = min(v for s in sends.values() for k, v in s.items() if k.endswith(" send-read"))
    offsets: dict[str, list[float]] = defaultdict(list)
    for s in sends.values():
        read = next(v for k, v in s.items() if k.endswith(" send-read"))
        if read - first < skip_s * 1e9:
            continue
        for key, at in s.items():
            offsets[key].append((at - read) / 1000)
    rows = [(k, statistics.median(v), pct(v, 0.9), pct(v, 0.99), len(v)) for k, v in offsets.items()]
    return sorted(rows, key=lambda r: r[1])


def main() -> None:
    directory = Path(sys.argv[1])
    skip = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
    rows = timeline(load(directory), skip)
    print(f"{'step (member event)':<28} {'median':>9} {'p90':>9} {'p99':>9}  (µs after the send's read) n")
    previous = 0.0
    for key, med, p90, p99, n in rows:
        print(f"{key:<28} {med:9.0f} {p90:9.0f} {p99:9.0f}  +{med - previous:.0f} {n}")
        previous = med


if __name__ == "__main__":
    main()
