"""Long-lived work that must not end silently.

A background loop (a flush thread, a daemon's replication or scan task) that meets an exception it does
not handle would otherwise just end: a thread's traceback goes to stderr past the logs, an asyncio task
holds its exception until someone looks, and the loop's work (flushing, replicating, expiring routes)
stops for good while everything else looks healthy. Here such a failure is logged at ERROR with its
traceback and the work runs again after a delay, as RocketMQ's service threads go on after one
(``HAService.HAClient#run`` waits 5 s and connects again; ``CommitLog.FlushRealTimeService#run`` logs it
and flushes on). :func:`supervised` is the store's threads' form; ``daemon.lifecycle.supervise`` the daemons'
asyncio form, which can also stop the daemon for a task it must not go on without.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

#: The first delay before a failed loop runs again.
RESTART_DELAY = 1.0
#: The longest: a loop that fails as soon as it runs logs a traceback this often, not every second.
MAX_RESTART_DELAY = 30.0


class Restarts:
    """When one failing loop runs again: :data:`RESTART_DELAY`, doubled at each failure that follows the
    previous run within :data:`MAX_RESTART_DELAY` of its start (up to that), the first delay again after
    a run that lasted longer."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.count = 0
        self._delay = 0.0

    def failed(self, ran_for: float) -> float:
        """Log the exception being handled (call from an ``except`` block) and return the delay."""
        self.count += 1
        if ran_for > MAX_RESTART_DELAY or self._delay == 0.0:
            self._delay = RESTART_DELAY
        else:
            self._delay = min(self._delay * 2, MAX_RESTART_DELAY)
        log.error("%s failed; running it again in %.0f s", self.name, self._delay, exc_info=True)
        return self._delay


def supervised(name: str, body: Callable[[], None], stop: threading.Event | None = None) -> threading.Thread:
    """A daemon thread named ``name`` that runs ``body`` until it returns, again (after a
    :class:`Restarts` delay) each time it raises; ``stop`` set ends the wait for a new run (the first
    runs whatever it says)."""

    def run() -> None:
        restarts = Restarts(f"thread {name}")
        while True:
            started = time.monotonic()
            try:
                body()
                return
            except Exception:
                delay = restarts.failed(time.monotonic() - started)
            if stop is None:
                time.sleep(delay)
            elif stop.wait(delay):
                return

    return threading.Thread(target=run, name=name, daemon=True)
