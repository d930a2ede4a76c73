"""The overall deadline of an interop client script that runs in the interop venv's Python (the official
C++ client's scripts), as ``watchdog.js`` is for the Node ones.

``arm(extra)`` once at the start, ``step(name)`` as the script goes. Past ``MQCTL_INTEROP_DEADLINE_MS``
(set by the test harness, ``tests/support/bounded.py``), or on SIGTERM (the harness ending it), the script
prints on stderr the step it is in and for how long, every thread's Python stack, and ``extra()`` (the
client's own log errors), then exits with ``EXIT_DEADLINE``. The C++ client's calls release the interpreter; should one not, faulthandler
dumps the stacks and exits a few seconds later without it."""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading
import time
from collections.abc import Callable

EXIT_DEADLINE = 3
_started = time.monotonic()
_current = ("start", _started)


def step(name: str) -> None:
    """What the script is doing now (the report names it)."""
    global _current
    _current = (name, time.monotonic())


def arm(extra: Callable[[], str] | None = None) -> None:
    ms = int(os.environ.get("MQCTL_INTEROP_DEADLINE_MS", "0"))
    if ms <= 0:
        return

    def expire(why: str = f"deadline of {ms} ms passed") -> None:
        name, since = _current
        now = time.monotonic()
        sys.stderr.write(
            f"interop watchdog: {why} after {(now - _started) * 1000:.0f} ms; "
            f'step "{name}" for {(now - since) * 1000:.0f} ms\n'
        )
        sys.stderr.flush()
        faulthandler.dump_traceback(all_threads=True)
        if extra is not None:
            try:
                sys.stderr.write(extra() + "\n")
            except Exception as exc:  # the report goes on without it
                sys.stderr.write(f"(its log could not be read: {exc})\n")
        sys.stderr.flush()
        os._exit(EXIT_DEADLINE)

    # the harness ends a script that outstayed it (bounded.py's end_reporting): it says why first
    signal.signal(signal.SIGTERM, lambda _sig, _frame: expire("ended by the harness (SIGTERM)"))
    timer = threading.Timer(ms / 1000, expire)
    timer.daemon = True
    timer.start()
    faulthandler.dump_traceback_later(ms / 1000 + 5, exit=True)
