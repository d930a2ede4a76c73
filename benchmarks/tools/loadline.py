"""The JSON line every load generator for bench_ab.py ends with, as ons_bench.js prints it.

Shared by mqctl_load.py and cpp_bench.py; plain Python, since cpp_bench.py runs under .venv-interop's
interpreter, which has none of our packages.
"""

from __future__ import annotations


def load_line(rts_ms: list[float], failures: int, seconds: float, cpu_seconds: float) -> dict[str, float]:
    """``{count, failures, seconds, clientCpu (share of one core), p50Ms, p99Ms}`` from the round trips."""
    rts = sorted(rts_ms)

    def at(q: float) -> float:
        return rts[min(len(rts) - 1, int(q * len(rts)))] if rts else 0.0

    return {
        "count": len(rts) - failures,
        "failures": failures,
        "seconds": seconds,
        "clientCpu": cpu_seconds / seconds,
        "p50Ms": at(0.5),
        "p99Ms": at(0.99),
    }
