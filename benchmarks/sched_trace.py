"""``bench_broker_tail --sched-trace FILE``: who had each core while the slowest messages were in flight.

``timeline.py`` samples our own threads every 100 ms; a slow message's flight is a few milliseconds, and
what took the cores from our two event loops may be a process outside the benchmark (a kernel thread,
another login's build, the machine's own agents), which it does not watch. This records every context
switch and wake-up on the machine with ``perf record -a`` (``sched:sched_switch``, ``sched:sched_waking``,
on CLOCK_MONOTONIC, the clock messages are stamped with) over the rounds, and then, for the slowest
messages, splits each core's time over the flight between the broker's loop, its other threads, this
client's loop, the NameServer, the competitor, idle, and everything else by command name; and says how
long each loop was runnable without a core, and who held the core it waited on. ``roles`` names our
threads by id; anything else is ``other:COMM``.

Needs ``perf`` and the right to trace the whole machine (root, or ``perf_event_paranoid`` <= -1): where it
is refused the benchmark runs without it and says so.
"""

from __future__ import annotations

import bisect
import re
import shutil
import signal
import subprocess
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

EVENTS = ("sched:sched_switch", "sched:sched_waking")
_SWITCH = re.compile(
    r"\[(\d+)\]\s+([\d.]+):\s+sched:sched_switch: prev_comm=(.*?) prev_pid=(\d+) prev_prio=-?\d+ "
    r"prev_state=(\S+) ==> next_comm=(.*?) next_pid=(\d+)"
)
_WAKING = re.compile(
    r"\[(\d+)\]\s+([\d.]+):\s+sched:sched_waking: comm=(.*?) pid=(\d+) prio=-?\d+ target_cpu=(\d+)"
)
_NUMBERED = re.compile(r"[/:]?\d+")  # kworker/1:2H -> kworkerH, ksoftirqd/0 -> ksoftirqd


@dataclass
class Trace:
    """Each core's occupants in order, and when each thread of interest became runnable."""

    runs: dict[int, list[tuple[float, float, int, str]]] = field(default_factory=lambda: defaultdict(list))
    woken: dict[int, list[float]] = field(default_factory=lambda: defaultdict(list))
    preempted: dict[int, list[float]] = field(default_factory=lambda: defaultdict(list))


class Recorder:
    """``perf record -a`` of the scheduler's events into ``path`` from `start` to `stop` (nothing where perf
    is missing or refused: ``refused`` says why)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.refused: str | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        perf = shutil.which("perf")
        if perf is None:
            self.refused = "no perf on PATH"
            return
        argv = [perf, "record", "-q", "--clockid=monotonic", "-a", "-o", str(self.path)]
        for event in EVENTS:
            argv += ["-e", event]
        self._proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            err = self._proc.communicate(timeout=0.5)[1]
            self.refused = f"perf record exited: {err.decode(errors='replace').strip()[:200]}"
            self._proc = None
        except subprocess.TimeoutExpired:
            pass  # recording

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.send_signal(signal.SIGINT)
            self._proc.communicate(timeout=60)


def read(path: Path) -> Trace:
    """The recording at ``path``, through ``perf script``."""
    script = ["perf", "script", "-i", str(path), "-F", "cpu,time,event,trace"]
    return parse(subprocess.run(script, capture_output=True, text=True, check=True).stdout)


def parse(text: str) -> Trace:
    """``perf script -F cpu,time,event,trace`` lines into runs per core, wake-ups and preemptions per thread."""
    trace = Trace()
    current: dict[int, tuple[float, int, str]] = {}
    for line in text.splitlines():
        if m := _SWITCH.search(line):
            cpu, t, prev, state, nxt = int(m[1]), float(m[2]), int(m[4]), m[5], int(m[7])
            if cpu in current:
                start, tid, comm = current[cpu]
                trace.runs[cpu].append((start, t, tid, comm))
            current[cpu] = (t, nxt, m[6])
            if state.startswith("R"):
                trace.preempted[prev].append(t)
        elif m := _WAKING.search(line):
            trace.woken[int(m[4])].append(float(m[2]))
    return trace


def _who(tid: int, comm: str, roles: dict[int, str]) -> str:
    if tid == 0:
        return "idle"
    return roles.get(tid) or "other:" + _NUMBERED.sub("", comm)


def occupancy(trace: Trace, start: float, end: float, roles: dict[int, str]) -> dict[int, dict[str, float]]:
    """Per core, ms each occupant held it between ``start`` and ``end`` (monotonic seconds)."""
    out: dict[int, dict[str, float]] = {}
    for cpu, runs in trace.runs.items():
        held: dict[str, float] = defaultdict(float)
        for a, b, tid, comm in runs:
            if b > start and a < end:
                held[_who(tid, comm, roles)] += (min(b, end) - max(a, start)) * 1000
        out[cpu] = dict(held)
    return out


def waits(
    trace: Trace, tid: int, start: float, end: float, roles: dict[int, str]
) -> tuple[float, dict[str, float]]:
    """ms ``tid`` was runnable without a core between ``start`` and ``end``, and who held the core meanwhile
    (a wait starts at its wake-up or preemption and ends when it next runs, on the core it runs on)."""
    on = sorted((a, cpu) for cpu, runs in trace.runs.items() for a, _, t, _ in runs if t == tid)
    starts = [a for a, _ in on]
    since: dict[int, float] = {}  # index of the run that ended a wait -> when that wait began
    for r in (*trace.woken[tid], *trace.preempted[tid]):
        i = bisect.bisect_left(starts, r)
        if i < len(on) and on[i][0] < end:
            since[i] = min(since.get(i, r), r)
    total = 0.0
    behind: dict[str, float] = defaultdict(float)
    for i, r in since.items():
        (a, cpu), w0 = on[i], max(r, start)
        w1 = min(a, end)
        if w1 <= w0:
            continue
        total += (w1 - w0) * 1000
        for x, y, t, comm in trace.runs[cpu]:
            if y > w0 and x < w1 and t != tid:
                behind[_who(t, comm, roles)] += (min(y, w1) - max(x, w0)) * 1000
    return total, dict(behind)


def _top(held: dict[str, float], n: int = 4) -> str:
    return ", ".join(f"{k} {v:.1f}" for k, v in sorted(held.items(), key=lambda kv: -kv[1])[:n])


def report(
    trace: Trace,
    messages: list[tuple[str, float, float]],
    roles: dict[int, str],
    loops: dict[str, int],
    limit: int = 12,
) -> list[str]:
    """Lines for the slowest messages (``(round, sent, ms)``, sent in monotonic seconds), one per 50 ms so a
    single stall is named once: each core's occupants over the flight, and each loop's wait for a core
    and who held it meanwhile (ms). ``trace``: `read` of the recording."""
    lines = []
    picked: list[float] = []
    for name, sent, ms in sorted(messages, key=lambda m: -m[2]):
        if len(picked) >= limit:
            break
        if any(abs(sent - p) < 0.05 for p in picked):
            continue
        picked.append(sent)
        end = sent + ms / 1000
        cores = "; ".join(f"cpu{c}: {_top(h)}" for c, h in sorted(occupancy(trace, sent, end, roles).items()))
        lines.append(f"  {name} t={sent:.3f} {ms:.2f} ms: {cores}")
        for loop, tid in loops.items():
            total, behind = waits(trace, tid, sent, end, roles)
            lines.append(f"    {loop} waited {total:.1f} ms for a core, behind {_top(behind) or '-'}")
    return lines
