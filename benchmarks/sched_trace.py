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
    #: Each wake-up's core, beside ``woken``.
    woken_on: dict[int, list[int]] = field(default_factory=lambda: defaultdict(list))
    #: Each preemption's core, beside ``preempted``.
    preempted_on: dict[int, list[int]] = field(default_factory=lambda: defaultdict(list))


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
    """``perf script -F cpu,time,event,trace`` lines into runs per core, wake-ups and preemptions per thread.

    A switch that leaves a thread other than the one the core's last recorded switch put there means a switch
    went unrecorded (on a KVM guest of this project's, no switch out of the second CPU's idle task ever was):
    the thread switched out is taken to have run from its last wake-up onto that core (the idle task or the
    recorded holder before it), not counted as idle with its wait running on to its next recorded run."""
    trace = Trace()
    current: dict[int, tuple[float, int, str]] = {}
    last_woken: dict[int, tuple[float, int]] = {}  # thread -> its last wake-up's time and core
    for line in text.splitlines():
        if m := _SWITCH.search(line):
            cpu, t, prev, state, nxt = int(m[1]), float(m[2]), int(m[4]), m[5], int(m[7])
            if cpu in current:
                start, tid, comm = current[cpu]
                if tid != prev:
                    when, where = last_woken.get(prev, (start, cpu))
                    began = when if where == cpu and start < when < t else start
                    if began > start:
                        trace.runs[cpu].append((start, began, tid, comm))
                    start, tid, comm = began, prev, m[3]
                trace.runs[cpu].append((start, t, tid, comm))
            current[cpu] = (t, nxt, m[6])
            if state.startswith("R"):
                trace.preempted[prev].append(t)
                trace.preempted_on[prev].append(cpu)
        elif m := _WAKING.search(line):
            tid, t, cpu = int(m[4]), float(m[2]), int(m[5])
            trace.woken[tid].append(t)
            trace.woken_on[tid].append(cpu)
            last_woken[tid] = (t, cpu)
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


def _windows(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The union of ``spans`` as disjoint windows, in order."""
    out: list[tuple[float, float]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def ran(trace: Trace, tid: int, start: float, end: float) -> float:
    """ms ``tid`` held a core between ``start`` and ``end``."""
    return sum(
        (min(b, end) - max(a, start)) * 1000
        for runs in trace.runs.values()
        for a, b, t, _ in runs
        if t == tid and b > start and a < end
    )


#: Kind of round (its tag less the round's number: ``busy``, ``s100:100quiet``) -> round -> its flights
#: (sent, received; monotonic seconds).
Kinds = dict[str, dict[str, list[tuple[float, float]]]]


@dataclass
class Who:
    """Who is who in a recording: our threads' roles by id, and the loops to follow (name -> thread id)."""

    roles: dict[int, str]
    loops: dict[str, int]


#: The share of a round's messages `summaries` takes as its slowest (its p99.9's), and the waits it counts.
SLOWEST = 0.001
LONG_WAIT_MS = 1.0


def summaries(trace: Trace, messages: list[tuple[str, float, float]], who: Who) -> list[str]:
    """Two summaries per kind of round (every round of that kind together), for what a round's tail is made
    of rather than one stall at a time: where the slowest `SLOWEST` of its messages spent their flights
    (`_slowest`), and every wait of each loop for a core by how it began (`_wait_split`)."""
    kinds: Kinds = defaultdict(lambda: defaultdict(list))
    for name, sent, ms in messages:
        kinds[name.lstrip("0123456789")][name].append((sent, sent + ms / 1000))
    return [
        "where the slowest messages' flights went, summed (ms):",
        *_slowest(trace, kinds, who),
        f"each loop's waits for a core by how they began (count; those of {LONG_WAIT_MS:g} ms or more, ms):",
        *_wait_split(trace, kinds, who),
    ]


def _slowest(trace: Trace, kinds: Kinds, who: Who) -> list[str]:
    """The union of the slowest `SLOWEST` of each round's flights (a stall that several of them met counts
    once), split for each loop into its time on a core and its time runnable without one, and behind whom it
    waited (ms)."""
    lines = []
    for kind, rounds in sorted(kinds.items()):
        spans = []
        for flights in rounds.values():
            n = max(1, int(len(flights) * SLOWEST))
            spans += sorted(flights, key=lambda f: f[0] - f[1])[:n]
        windows = _windows(spans)
        span_ms = sum(b - a for a, b in windows) * 1000
        parts = []
        for loop, tid in who.loops.items():
            total, on = 0.0, 0.0
            behind: dict[str, float] = defaultdict(float)
            for a, b in windows:
                w, held = waits(trace, tid, a, b, who.roles)
                total += w
                on += ran(trace, tid, a, b)
                for k, v in held.items():
                    behind[k] += v
            parts.append(f"{loop} ran {on:.1f}, waited {total:.1f} behind {_top(behind, 5) or '-'}")
        lines.append(
            f"  {kind}: the slowest {SLOWEST:.1%} of {len(rounds)} round(s), {len(spans)} flights over "
            f"{span_ms:.1f} ms: " + "; ".join(parts)
        )
    return lines


def _holder(trace: Trace, cpu: int, t: float, starts: dict[int, list[float]]) -> tuple[int, str]:
    """The thread on ``cpu`` at ``t`` and its command (0: idle or not known)."""
    runs = trace.runs.get(cpu, [])
    if cpu not in starts:
        starts[cpu] = [a for a, _, _, _ in runs]
    i = bisect.bisect_right(starts[cpu], t) - 1
    return runs[i][2:] if i >= 0 and runs[i][1] > t else (0, "")


def _wait_split(trace: Trace, kinds: Kinds, who: Who) -> list[str]:
    """Every wait for a core of each loop over each kind of round (the whole round, not only its slow
    messages), by how it began: woken onto a core someone held, or preempted by someone (named); the waits of
    `LONG_WAIT_MS` or more counted and summed, with the longest. Says where a loop's long waits come from: the
    core the scheduler put it on at its wake-up, or who took its core."""
    roles = who.roles
    starts: dict[int, list[float]] = {}
    lines = []
    for kind, rounds in sorted(kinds.items()):
        windows = [(min(a for a, _ in f), max(b for _, b in f)) for f in rounds.values()]
        for loop, tid in who.loops.items():
            on = sorted(a for runs in trace.runs.values() for a, _, t, _ in runs if t == tid)
            events = [
                *(
                    (t, f"woken onto {_who(*_holder(trace, c, t, starts), roles)}")
                    for t, c in zip(trace.woken[tid], trace.woken_on[tid], strict=True)
                ),
                *(
                    (t, f"preempted by {_who(*_holder(trace, c, t, starts), roles)}")
                    for t, c in zip(trace.preempted[tid], trace.preempted_on[tid], strict=True)
                ),
            ]
            found: dict[str, list[float]] = defaultdict(list)
            for t, how in events:
                if not any(a <= t < b for a, b in windows):
                    continue
                i = bisect.bisect_left(on, t)
                if i < len(on):
                    found[how].append((on[i] - t) * 1000)
            parts = []
            for how, each in sorted(
                found.items(), key=lambda kv: -sum(v for v in kv[1] if v >= LONG_WAIT_MS)
            ):
                long = [v for v in each if v >= LONG_WAIT_MS]
                parts.append(
                    f"{how} {len(each)} ({len(long)}, {sum(long):.1f}"
                    + (f", longest {max(long):.1f}" if long else "")
                    + ")"
                )
            lines.append(f"  {kind} {loop}: " + "; ".join(parts))
    return lines


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
