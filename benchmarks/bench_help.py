"""Median wall time of ``mqctl --help`` (target: <= 0.25 s), a fresh process each run."""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


def main(runs: int = 21) -> None:
    exe = shutil.which("mqctl", path=str(Path(sys.executable).parent)) or "mqctl"
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([exe, "--help"], check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    print(f"mqctl --help: median {statistics.median(times) * 1000:.0f} ms, max {max(times) * 1000:.0f} ms over {runs} runs")


if __name__ == "__main__":
    main()
