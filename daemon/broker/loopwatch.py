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

Where a stall's time went (`Stalls`): a probe every `PROBE_PERIOD` seconds (the histogram's samples are
every tenth of them) reads cheap counters of the loop thread: its CPU time (`time.thread_time`), its time
runnable but waiting for a core (`/proc/thread-self/schedstat`'s run delay, one `pread` of a descriptor
kept open) and the GC pauses timed above, per thread; each histogram sample also reads the machine's
steal (`/proc/stat`). A probe late by `STALL_THRESHOLD` or more is a stall: its lateness is split between
"ran" (the loop thread on a core: a callback, a request, its own collection), "core" (runnable, waiting for
a core: the host's other work), "steal" (the hypervisor's), "gc" (a collection, on the loop or in another
thread while the loop waited for the GIL) and "other" (the rest: the GIL held by another thread of ours,
a page fault on disk, a blocking call) from the counters' differences since the probe before, less what
the loop's recent probes spent at the same rate (what serving the same traffic costs any 20 ms). A probe
costs a few microseconds and runs nothing per request; a stall shorter than a probe period covers a probe
(and is seen) with a probability of its length over the period. A loop that spent under `IDLE_SHARE` of
`IDLE_AFTER` seconds on its thread's CPU (the probes and periodic timers alone, or a trickle of requests)
is probed once a sample period instead, and again every `PROBE_PERIOD` from the first probe whose interval
was busier than that: an idle broker's probes, each a timer's and a context switch's kernel work, were most
of its loop's CPU, and a stall that delays no request matters less (it is still seen with a probability of
its length over the longer period).

With `stack_after` set (``loopStackMillis``), a watchdog thread takes the loop thread's stack
(`sys._current_frames`) while a probe is overdue by that long, every that long, and counts its innermost
frames in a small table: what "ran" when the loop ran. Off by default: the watchdog wakes once a probe and
takes the GIL to look.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Final

from daemon.broker.stats import LatencyHistogram

log = logging.getLogger(__name__)

#: Seconds between the lag sampler's wake-ups.
SAMPLE_PERIOD: Final = 0.2
#: Seconds between the stall probe's wake-ups (every few of them is a sample).
PROBE_PERIOD: Final = 0.02
#: Share of its time a loop's thread spends on a CPU under which the loop counts as idle (an idle broker's
#: timers and probes are well under it; a thousand requests a second are some 25 %).
IDLE_SHARE: Final = 0.02
#: Seconds over which a loop must stay idle before its probes space out to one a sample period.
IDLE_AFTER: Final = 1.0
#: A probe this late (seconds) is a stall, its lateness classified.
STALL_THRESHOLD: Final = 0.002
#: Where a stall's time went: the loop thread on a core, waiting for one, the hypervisor's steal, a
#: collection of the cyclic GC, the rest (the GIL held by another thread, a blocking call or fault).
CAUSES: Final = ("ran", "core", "steal", "gc", "other")
#: The stall causes' GET_BROKER_RUNTIME_INFO keys (ms since start), in CAUSES' order.
STALL_KEYS: Final = ("loopStallRan", "loopStallCore", "loopStallSteal", "loopStallGc", "loopStallOther")
#: Stalls the runtime info lists (``loopStallRecent``), the last ones.
RECENT_STALLS: Final = 64
#: Distinct stacks the watchdog keeps (the least counted one gives way to a new one).
STACK_TABLE: Final = 32
#: Frames of a stack the watchdog keys on, innermost first.
STACK_DEPTH: Final = 3
#: Stacks `runtime_info` names, most counted first.
STACKS_SHOWN: Final = 5
#: Weight of the newest probe interval in the loop's usual rates of CPU and waiting.
RATE_WEIGHT: Final = 0.1
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
    {
        "loopLagP50",
        "loopLagP99",
        "loopLagMax",
        "gcCollections",
        "gcPauseTotal",
        "gcPauseMax",
        "loopStalls",
        "loopStallStacks",
        "loopStallRecent",
        *STALL_KEYS,
    }
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
        #: The event loop's thread (`threading.get_ident`), and seconds of collections in it and in others.
        self.loop_thread = 0
        self.loop_s = 0.0
        self.other_s = 0.0

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
        if threading.get_ident() == self.loop_thread:
            self.loop_s += elapsed
        else:
            self.other_s += elapsed
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


def classify(
    lag: float, ran: float, core: float, steal: float, gc_loop: float, gc_other: float
) -> tuple[float, float, float, float, float]:
    """Split ``lag`` seconds between CAUSES, from what the loop thread did over the stall's window beyond
    its usual (seconds: on a core, waiting for one; the machine's steal; collections on the loop's thread
    and in others). Running and waiting count first (scaled down to ``lag`` together when they cover more:
    the window is longer than the stall); steal then covers what they leave; the loop thread's collections
    are part of its running, other threads' of what is left (the loop waits for their GIL); the rest is
    "other"."""
    ran, core = max(ran, 0.0), max(core, 0.0)
    busy = ran + core
    if busy > lag:
        ran, core = ran * lag / busy, core * lag / busy
    rest = max(lag - ran - core, 0.0)
    stolen = min(max(steal, 0.0), rest)
    rest -= stolen
    gc_ran = min(gc_loop, ran)
    ran -= gc_ran
    gc_waited = min(gc_other, rest)
    rest -= gc_waited
    return ran, core, stolen, gc_ran + gc_waited, rest


def _run_delay(fd: int) -> float:
    """Seconds the thread of ``fd`` (its /proc schedstat) has waited runnable for a core, or 0."""
    try:
        return int(os.pread(fd, 64, 0).split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def _open_schedstat() -> int:
    """This thread's /proc schedstat, kept open (a `pread` at 0 reads it afresh), or -1 where there is none
    (another OS, a kernel without schedstats): its waits then count as "other"."""
    try:
        return os.open("/proc/thread-self/schedstat", os.O_RDONLY)
    except OSError:
        return -1


_TICK_S: Final = 1 / (os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100)


def machine_steal() -> float:
    """Seconds of every CPU's steal since boot (`/proc/stat`: time a virtual CPU was ready while the
    hypervisor ran something else), or 0 where not available. Counted in ticks (10 ms)."""
    try:
        with open("/proc/stat", "rb") as f:
            return int(f.readline().split()[8]) * _TICK_S
    except (OSError, IndexError, ValueError):
        return 0.0


class Stalls:
    """The stalls seen so far: how many, and seconds of lateness per cause (CAUSES' order); each stall
    counted once more under its largest cause."""

    def __init__(self) -> None:
        self.count = 0
        self.seconds = [0.0] * len(CAUSES)
        self.by_cause = [0] * len(CAUSES)
        #: The last RECENT_STALLS stalls: when each ended (seconds since the epoch), its lateness, its split.
        self.recent: deque[tuple[float, float, tuple[float, ...]]] = deque(maxlen=RECENT_STALLS)

    def add(self, lag: float, split: tuple[float, ...]) -> None:
        self.recent.append((time.time(), lag, split))
        self.count += 1
        largest = 0
        for i, v in enumerate(split):
            self.seconds[i] += v
            if v > split[largest]:
                largest = i
        self.by_cause[largest] += 1

    def summary(self) -> str:
        """``12 stalls: ran 3.1, core 40.2, steal 0, gc 0.4, other 1.2 ms``."""
        split = ", ".join(f"{c} {v * 1000:.1f}" for c, v in zip(CAUSES, self.seconds, strict=True))
        return f"{self.count} stalls: {split} ms"

    def recent_text(self) -> str:
        """The recent stalls, oldest first: ``END_MS LATE_MS RAN/CORE/STEAL/GC/OTHER;...`` (ms; END_MS since
        the epoch)."""
        return ";".join(
            f"{end * 1000:.0f} {lag * 1000:.1f} " + "/".join(f"{v * 1000:.1f}" for v in split)
            for end, lag, split in self.recent
        )


class StackWatch:
    """A watchdog thread: while the loop's next probe is overdue by ``after`` seconds, it takes the loop
    thread's stack every ``after`` seconds and counts its innermost frames (a bounded table)."""

    def __init__(self, watch: LoopWatch, after: float) -> None:
        self.watch = watch
        self.after = after
        self.stacks: dict[str, int] = {}
        self.taken = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, loop_thread: int) -> None:
        self._loop_thread = loop_thread
        self._thread = threading.Thread(target=self._run, name="loop-stack-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    def _run(self) -> None:
        watch = self.watch
        while not self._stop.is_set():
            probes, due = watch.probes, watch.probe_due
            if self._stop.wait(max(due + self.after - time.monotonic(), 0.0) + 0.0005):
                return
            while watch.probes == probes and not self._stop.is_set():  # still overdue: look, again later
                self.take()
                if self._stop.wait(self.after):
                    return

    def take(self) -> None:
        """Count the loop thread's innermost frames once."""
        frame = sys._current_frames().get(self._loop_thread)
        if frame is None:
            return
        parts: list[str] = []
        while frame is not None and len(parts) < STACK_DEPTH:
            code = frame.f_code
            parts.append(f"{code.co_name} ({os.path.basename(code.co_filename)}:{frame.f_lineno})")
            frame = frame.f_back
        key = " < ".join(parts)
        self.taken += 1
        stacks = self.stacks
        if key not in stacks and len(stacks) >= STACK_TABLE:
            del stacks[min(stacks, key=stacks.__getitem__)]
        stacks[key] = stacks.get(key, 0) + 1
        log.debug("the loop is overdue; its thread is in %s", key)

    def top(self, n: int = STACKS_SHOWN) -> list[tuple[str, int]]:
        return sorted(self.stacks.items(), key=lambda kv: -kv[1])[:n]


class LoopWatch:
    """The loop-lag sampler and histogram, the stalls' causes, and the GC pauses of one broker process."""

    def __init__(
        self,
        period: float = SAMPLE_PERIOD,
        table_size: Callable[[], int] | None = None,
        probe: float = PROBE_PERIOD,
        stack_after: float = 0.0,
        idle_after: float = IDLE_AFTER,
    ) -> None:
        self.period = period
        #: Seconds between probes (at most the sample period: a sample is a probe).
        self.probe = min(probe, period)
        self.idle_after = idle_after
        #: Probes are a sample period apart: the loop was idle over the last `idle_after` seconds.
        self.spaced = False
        #: Since when (`time.monotonic()`) the loop's CPU is summed to tell whether it is idle, and the sum.
        self._idle_since = self._idle_cpu = 0.0
        #: The long-lived tables' entries in all (topics, stats items, ...), cheap to call every sample.
        self.table_size = table_size
        self._size_frozen = 0
        #: The last minute or two, for p50/p99 (and the longest since start) in the runtime info.
        self.recent = LatencyHistogram()
        #: Since start, for the Prometheus histogram: counts per BUCKETS bound (+Inf last) and the sum.
        self.counts = [0] * (len(BUCKETS) + 1)
        self.sum_s = 0.0
        self.samples = 0
        self.probes = 0
        self.gc = GcPauses()
        self.stalls = Stalls()
        #: Freezes (after a growth of the tables or a slow full collection). The objects frozen are not
        #: counted: `gc.get_freeze_count()` walks them all, on the loop.
        self.freezes = 0
        #: Loop time the next sample is due at (a test may schedule a stall just before it).
        self.next_due = 0.0
        #: `time.monotonic()` the next probe is due at (the watchdog's clock).
        self.probe_due = 0.0
        self.stack_watch = StackWatch(self, stack_after) if stack_after > 0 else None
        self._rotated = 0.0
        self._handle: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._schedstat = -1
        self._sampling = False
        # the counters at the last probe: monotonic time, thread CPU, run delay, GC pauses on the loop and
        # elsewhere; the steal at the last sample; the loop's usual CPU and waiting per second
        self._at = self._cpu = self._waited = self._gc_loop = self._gc_other = 0.0
        self._steal = 0.0
        self._cpu_rate = self._wait_rate = 0.0

    def start(self) -> None:
        """Sample the running loop from now on; install the GC callback."""
        self._loop = asyncio.get_running_loop()
        self._rotated = self._loop.time()
        if self.table_size is not None:  # what start-up loaded was frozen when serving began
            self._size_frozen = self.table_size()
        self.gc.loop_thread = threading.get_ident()
        self.gc.install()
        self._schedstat = _open_schedstat()
        self._steal = machine_steal()
        self._read(time.monotonic())
        self.spaced, self._idle_since, self._idle_cpu = False, time.monotonic(), 0.0
        self.next_due = self._rotated + self.period
        self._schedule(self._rotated)
        if self.stack_watch is not None:
            self.stack_watch.start(self.gc.loop_thread)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self.gc.uninstall()
        if self.stack_watch is not None:
            self.stack_watch.stop()
        if self._schedstat >= 0:
            os.close(self._schedstat)
            self._schedstat = -1

    def _read(self, now: float) -> None:
        self._at = now
        self._cpu = time.thread_time()
        self._waited = _run_delay(self._schedstat) if self._schedstat >= 0 else 0.0
        self._gc_loop, self._gc_other = self.gc.loop_s, self.gc.other_s

    def _schedule(self, now: float) -> None:
        assert self._loop is not None
        # a sample is the probe due at next_due itself (a probe due before it that ran late is none: the
        # sample then runs after whatever held the loop, as it would have without the probes)
        self._sampling = self.spaced or now + self.probe >= self.next_due
        due = self.next_due if self._sampling else now + self.probe
        # a sample due already (a probe before it ran late) is due now: the stall was the late probe's
        self.probe_due = time.monotonic() + max(due - now, 0.0)
        self._handle = self._loop.call_at(due, self._tick)

    def _tick(self) -> None:
        assert self._loop is not None
        now = self._loop.time()
        mono = time.monotonic()
        # how late this probe ran, on the precise clock (uvloop's counts whole milliseconds)
        late = mono - self.probe_due
        self.probes += 1
        sample = self._sampling
        lag = max(0.0, now - self.next_due)
        if sample:
            self.next_due = now + self.period
        # first: a tick that raises (the loop logs it at ERROR, with its traceback) does not end the samples
        self._schedule(now)
        self._probe(mono, late)
        if not sample:
            return
        self.record(lag)
        self._steal = machine_steal()
        if self.gc.slow_full:
            self.freeze()
        elif self.table_size is not None:
            grown = self.table_size() - self._size_frozen
            if grown >= FREEZE_ENTRIES:
                self.freeze(f"the tables grew by {grown} entries")
        if now - self._rotated >= WINDOW:
            self.recent.rotate()
            self._rotated = now

    def _probe(self, mono: float, late: float) -> None:
        """Read the counters; a late probe's lateness classified against the last probe's."""
        at, cpu, waited, gc_loop, gc_other = self._at, self._cpu, self._waited, self._gc_loop, self._gc_other
        self._read(mono)
        span = mono - at
        if span <= 0:
            return
        d_cpu, d_wait = self._cpu - cpu, self._waited - waited
        self._pace(mono, d_cpu, span)
        if late < STALL_THRESHOLD:
            w = RATE_WEIGHT
            self._cpu_rate += w * (d_cpu / span - self._cpu_rate)
            self._wait_rate += w * (d_wait / span - self._wait_rate)
            return
        usual = max(span - late, 0.0)  # the window's part before the probe was due: usual work
        steal = machine_steal()
        split = classify(
            late,
            d_cpu - self._cpu_rate * usual,
            d_wait - self._wait_rate * usual,
            steal - self._steal,
            self._gc_loop - gc_loop,
            self._gc_other - gc_other,
        )
        self._steal = steal
        self.stalls.add(late, split)
        if log.isEnabledFor(logging.DEBUG):
            causes = ", ".join(f"{c} {v * 1000:.1f}" for c, v in zip(CAUSES, split, strict=True))
            log.debug("the loop was %.1f ms late: %s", late * 1000, causes)

    def _pace(self, mono: float, d_cpu: float, span: float) -> None:
        """Space the probes out once the loop was idle over `idle_after` seconds (a whole window: a timer's
        run now and then does not end it); back to every probe period (the next probe rescheduled) from
        the first spaced probe whose interval was busier than idle."""
        if self.spaced:
            if d_cpu > IDLE_SHARE * span and self._handle is not None and self._loop is not None:
                self.spaced = False
                self._idle_since, self._idle_cpu = mono, 0.0
                self._handle.cancel()
                self._schedule(self._loop.time())
            return
        self._idle_cpu += d_cpu
        window = mono - self._idle_since
        if window >= self.idle_after:
            self.spaced = self._idle_cpu <= IDLE_SHARE * window
            self._idle_since, self._idle_cpu = mono, 0.0

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

    def stacks(self) -> str:
        """The watchdog's most counted stacks, ``count×frames; ...`` (empty when it is off or saw none)."""
        if self.stack_watch is None:
            return ""
        return "; ".join(f"{n}x {key}" for key, n in self.stack_watch.top())

    def runtime_info(self) -> dict[str, str]:
        """mqctl's GET_BROKER_RUNTIME_INFO keys: lag percentiles in ms over the last minute or two, the
        longest lag and GC pause since start, the collections and their time in all (ms), the stalls since
        start and their lateness per cause (ms), the last stalls each with its split, and the watchdog's
        stacks."""
        gcs = self.gc
        info = {
            "loopLagP50": f"{self.recent.percentile_ms(0.5):.2f}",
            "loopLagP99": f"{self.recent.percentile_ms(0.99):.2f}",
            "loopLagMax": f"{self.recent.max_us / 1000:.2f}",
            "gcCollections": str(sum(gcs.count)),
            "gcPauseTotal": f"{sum(gcs.total_s) * 1000:.2f}",
            "gcPauseMax": f"{max(gcs.max_s) * 1000:.2f}",
            "loopStalls": str(self.stalls.count),
            "loopStallStacks": self.stacks(),
            "loopStallRecent": self.stalls.recent_text(),
        }
        for key, seconds in zip(STALL_KEYS, self.stalls.seconds, strict=True):
            info[key] = f"{seconds * 1000:.2f}"
        return info
