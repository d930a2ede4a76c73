"""What every goal benchmark shares: the one line it ends with.

``make bench`` runs each ``benchmarks/bench_*.py`` with no arguments; each prints what it measured as it
goes, then one line that can be compared across runs and machines:

    bench_broker_produce: 14,210 sends/s (16 producers, 1 KiB, 5 s; load 1.4)

The name first (grep for it), the figure the benchmark is about, then what it depends on and the load
average, without which a figure on a shared machine means little.
"""

from __future__ import annotations

import os
from pathlib import Path


def summary(script: str, figure: str, details: str = "") -> None:
    """Print ``NAME: FIGURE (DETAILS; load L)``; ``script`` is the benchmark's ``__file__``."""
    load = f"load {os.getloadavg()[0]:.1f}"
    print(f"{Path(script).stem}: {figure} ({f'{details}; {load}' if details else load})", flush=True)
