"""A sampled per-send timeline of a DLedger group, off unless ``MQCTL_DLEDGER_TRACE`` names a directory.

A send through a group crosses three processes (producer -> leader -> followers -> leader -> producer); its
latency is the sum of the waits between them, which no profile of one process shows. With the variable
set, every member writes, for the entries whose index is a multiple of ``MQCTL_DLEDGER_TRACE_EVERY``
(default 16), one ``monotonic_ns <tab> member <tab> event <tab> index`` line per step it takes with that
entry to ``<dir>/trace-<pid>.tsv``: all processes of one machine read the same monotonic clock, so
`benchmarks/dledger_timeline.py` lines the files up into the gaps of each step.

Off, the callers test :data:`ENABLED` (read once at import; not ``Final``, which a compiled caller would
take in at its build) and call nothing.
"""

from __future__ import annotations

import atexit
import os
import time
from typing import IO

_DIR = os.environ.get("MQCTL_DLEDGER_TRACE", "")
ENABLED = bool(_DIR)
EVERY = max(1, int(os.environ.get("MQCTL_DLEDGER_TRACE_EVERY", "16") or 16))

_out: list[IO[str]] = []
#: who writes the lines (the member's id, set by its server)
_who = ["?"]


def member(self_id: str) -> None:
    _who[0] = self_id


def _file() -> IO[str]:
    if not _out:
        os.makedirs(_DIR, exist_ok=True)
        f = open(os.path.join(_DIR, f"trace-{os.getpid()}.tsv"), "a", buffering=1 << 16)  # noqa: SIM115
        atexit.register(f.close)
        _out.append(f)
    return _out[0]


def mark(event: str, index: int, at: int = 0) -> None:
    """Entry `index` reached `event` now (or at `at`, a monotonic_ns taken earlier), if it is sampled."""
    if index % EVERY == 0:
        _file().write(f"{at or time.monotonic_ns()}\t{_who[0]}\t{event}\t{index}\n")


def mark_range(event: str, first: int, count: int) -> None:
    """:func:`mark` for the sampled entries among `count` entries from `first` (a push's batch)."""
    if first < 0:
        return
    now = time.monotonic_ns()
    start = -(-first // EVERY) * EVERY
    for index in range(start, first + max(count, 1), EVERY):
        mark(event, index, now)


def flush() -> None:
    for f in _out:
        f.flush()
