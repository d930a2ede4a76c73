"""What the event loop does besides requests, made visible: its lag and the cyclic GC's pauses.

One event loop serves every request, so anything else that runs on it (a periodic task, a collection
of the cyclic GC walking long-lived tables) delays every request behind it. `LoopWatch` samples that
delay cheaply: a callback asks to run every `SAMPLE_PERIOD` seconds and records how late it ran — a
few wake-ups a second, nothing per request. A stall of S seconds shows as a lag between S - period
and S (a stall that covers no wake-up is not seen; one longer than the period always is).

The GC's pauses come from `gc.callbacks`: each collection is timed from its "start" to its "stop"
call, per generation (counts, total and longest). Collections run in whatever thread allocated, so a
pause of a worker thread's collection is counted too: the GIL holds the loop for it all the same.

A full collection walks every tracked object, long-lived tables included: what start-up built is frozen
out of its reach when the daemon starts serving (`daemon.lifecycle.serve`), but tables that grow while
serving (thousands of topics created, their queues and stats items: hundreds of thousands of objects
for a full collection to walk) are not. So the sampler watches the tables' sizes (``table_size``, a few ``len()``s):
once they grew by `FREEZE_ENTRIES` or more since the last freeze, everything is frozen (`gc.freeze()`, a
constant-time move of the generations' lists) before a full collection comes to walk it; during a burst
of creations, every `FREEZE_ENTRIES` entries. Cyclic garbage frozen with it is never collected (reference
counting still frees the rest): a freeze needs that much growth first, so it does not happen per request.
A full collection that took `FREEZE_AFTER` seconds or more all the same (growth the sizes do not show)
has the next sample freeze what survived it: what a full collection leaves is reachable.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable
from typing import Any, Final

from daemon.broker.stats import LatencyHistogram

log = logging.getLogger(__name__)

#: Seconds between the lag sampler's wake-ups.
SAMPLE_PERIOD: Final = 0.2
#: Seconds a percentile window lasts (the one before it is kept too: p50/p99 cover one to two of them).
WINDOW: Final = 60.0
#: A full collection this long (seconds of its thread's CPU) has what survived it frozen.
FREEZE_AFTER: Final = 0.005
#: Entries the watched tables grow by before a freeze (a topic brings some 20 tracked objects).
FREEZE_ENTRIES: Final = 1_000
#: The Prometheus histogram's upper bounds, in seconds (+Inf follows).
BUCKETS: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


#: The keys `LoopWatch.runtime_info` adds to 4.9.8's GET_BROKER_RUNTIME_INFO table.
LOOP_RUNTIME_KEYS = frozenset(
    {"loopLagP50", "loopLagP99", "loopLagMax", "gcCollections", "gcPauseTotal", "gcPauseMax"}
)


#: mqctl's GET_BROKER_RUNTIME_INFO key for the broker's wall clock when it answered, in ms since the epoch:
#: the clock its store stamps messages with, which timers, retention and time-based offset resets read.
#: ``mqctl check cluster`` measures the broker's clock skew from it; a RocketMQ broker lacks it.
CLOCK_RUNTIME_KEY: Final = "brokerClockMs"


class GcPauses:
    """Collections of the cyclic GC per generation: how many, seconds in all and the longest."""

    def __init__(self) -> None:
        self.count = [0, 0, 0]
        self.total_s = [0.0, 0.0, 0.0]
        self.max_s = [0.0, 0.0, 0.0]
        #: A full collection took FREEZE_AFTER or more since the last freeze.
        self.slow_full = False
        self.slow_full_s = 0.0
        self._started = 0.0
        self._cpu_started = 0.0

    def callback(self, phase: str, info: dict[str, Any]) -> None:
        """For `gc.callbacks`: collections never overlap (the GC holds the GIL and refuses to nest)."""
        if phase == "start":
            self._started = time.perf_counter()
            if info["generation"] == 2:  # full ones are rare: their CPU time too, which a busy host's
                self._cpu_started = time.thread_time()  # scheduler does not inflate
            return
        if not self._started:  # installed during a collection: its start was not seen
            return
        elapsed = time.perf_counter() - self._started
        self._started = 0.0
        gen = info["generation"]
        self.count[gen] += 1
        self.total_s[gen] += elapsed
        if elapsed > self.max_s[gen]:
            self.max_s[gen] = elapsed
        if gen == 2 and time.thread_time() - self._cpu_started >= FREEZE_AFTER:
            self.slow_full = True
            self.slow_full_s = elapsed

    def install(self) -> None:
        gc.callbacks.append(self.callback)

    def uninstall(self) -> None:
        if self.callback in gc.callbacks:
            gc.callbacks.remove(self.callback)


class LoopWatch:
    """The loop-lag sampler and histogram plus the GC pauses of one broker process."""

    def __init__(self, period: float = SAMPLE_PERIOD, table_size: Callable[[], int] | None = None) -> None:
        self.period = period
        #: The long-lived tables' entries in all (topics, stats items, ...), cheap to call every sample.
        self.table_size = table_size
        self._size_frozen = 0
        #: The last minute or two, for p50/p99 (and the longest since start) in the runtime info.
        self.recent = LatencyHistogram()
        #: Since start, for the Prometheus histogram: counts per BUCKETS bound (+Inf last) and the sum.
        self.counts = [0] * (len(BUCKETS) + 1)
        self.sum_s = 0.0
        self.samples = 0
        self.gc = GcPauses()
        #: Freezes (after a growth of the tables or a slow full collection). The objects frozen are not
        #: counted: `gc.get_freeze_count()` walks them all, on the loop.
        self.freezes = 0
        #: Loop time the next sample is due at (a test may schedule a stall just before it).
        self.next_due = 0.0
        self._rotated = 0.0
        self._handle: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        """Sample the running loop from now on; install the GC callback."""
        self._loop = asyncio.get_running_loop()
        self._rotated = self._loop.time()
        if self.table_size is not None:  # what start-up loaded was frozen when serving began
            self._size_frozen = self.table_size()
        self.gc.install()
        self._schedule(self._rotated)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self.gc.uninstall()

    def _schedule(self, now: float) -> None:
        assert self._loop is not None
        self.next_due = now + self.period
        self._handle = self._loop.call_at(self.next_due, self._tick)

    def _tick(self) -> None:
        assert self._loop is not None
        now = self._loop.time()
        lag = max(0.0, now - self.next_due)
        # first: a tick that raises (the loop logs it at ERROR, with its traceback) does not end the samples
        self._schedule(now)
        self.record(lag)
        if self.gc.slow_full:
            self.freeze()
        elif self.table_size is not None:
            grown = self.table_size() - self._size_frozen
            if grown >= FREEZE_ENTRIES:
                self.freeze(f"the tables grew by {grown} entries")
        if now - self._rotated >= WINDOW:
            self.recent.rotate()
            self._rotated = now

    def freeze(self, why: str = "") -> None:
        """Move every object the GC tracks into the permanent generation (not from inside the callback:
        a collection is still unwinding there)."""
        why = why or f"a full collection took {self.gc.slow_full_s * 1000:.1f} ms"
        self.gc.slow_full = False
        gc.freeze()
        if self.table_size is not None:
            self._size_frozen = self.table_size()
        self.freezes += 1
        log.info("%s: what the cyclic GC tracks is frozen (freeze %d)", why, self.freezes)

    def record(self, lag_s: float) -> None:
        """One sample of `lag_s` seconds."""
        self.samples += 1
        self.sum_s += lag_s
        self.recent.record(int(lag_s * 1_000_000))
        i = 0
        while i < len(BUCKETS) and lag_s > BUCKETS[i]:
            i += 1
        self.counts[i] += 1

    def histogram(self) -> tuple[list[tuple[str, int]], float]:
        """Cumulative (bound, count) pairs ending with +Inf, and the sum: Prometheus' histogram."""
        out = []
        total = 0
        for bound, n in zip((*(repr(b) for b in BUCKETS), "+Inf"), self.counts, strict=True):
            total += n
            out.append((bound, total))
        return out, self.sum_s

    def runtime_info(self) -> dict[str, str]:
        """mqctl's GET_BROKER_RUNTIME_INFO keys: lag percentiles in ms over the last minute or two, the
        longest lag and GC pause since start, and the collections and their time in all (ms)."""
        gcs = self.gc
        return {
            "loopLagP50": f"{self.recent.percentile_ms(0.5):.2f}",
            "loopLagP99": f"{self.recent.percentile_ms(0.99):.2f}",
            "loopLagMax": f"{self.recent.max_us / 1000:.2f}",
            "gcCollections": str(sum(gcs.count)),
            "gcPauseTotal": f"{sum(gcs.total_s) * 1000:.2f}",
            "gcPauseMax": f"{max(gcs.max_s) * 1000:.2f}",
        }
