"""``bench_broker_tail --timeline FILE``: what ran on the machine when a message was slow.

A thread of the benchmark reads, every `PERIOD` seconds, each watched process's threads from /proc:
time on a CPU and time spent runnable but waiting for one (``schedstat``'s first two fields), and
writes the threads that ran as JSON lines beside each message's send time and latency. Times are
``time.perf_counter`` seconds (CLOCK_MONOTONIC, the clock the benchmark stamps messages with), so the
lines of every process fall on one axis. A line for the whole machine (``host``: every process's CPU,
ours and others') says when processes outside the benchmark had the cores. Threads are named after
their Python names where ``py-spy`` is installed (a dump of each process when a new thread appears),
else by id (the main thread is the loop).

`slow_report` lines each slow message up with the threads that ran over its flight: the attribution.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

#: Seconds between samples.
PERIOD = 0.1
_TICK = os.sysconf("SC_CLK_TCK")


def children(pid: int) -> dict[int, str]:
    """Child processes of ``pid``: pid -> the mqctl noun they run (``namesrv``, ``broker``) or ``python``."""
    out: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) != pid:
            continue
        words = [a.decode(errors="replace") for a in argv]
        out[int(entry)] = next((w for w in ("namesrv", "broker") if w in words), "python")
    return out


def thread_times(pid: int) -> dict[int, tuple[int, int]]:
    """tid -> (ns on a CPU, ns waited for one) of every thread of ``pid`` from ``schedstat`` (``stat``'s
    utime and stime count whole clock ticks, 10 ms); empty once it is gone."""
    out: dict[int, tuple[int, int]] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            cpu, wait = Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[:2]
        except (OSError, ValueError):
            continue
        out[int(tid)] = (int(cpu), int(wait))
    return out


def loop_costs(pid: int) -> tuple[int, ...]:
    """What the main thread of ``pid`` (the event loop's, in our daemons and this benchmark) has spent: ns
    on a CPU, voluntary context switches (its wake-ups: it slept in epoll or on a lock), involuntary ones
    (preemptions: it was runnable and lost its core, and then waited on that core's queue, where a
    sleeping thread's wake-up may be placed on an idle one), the process's read and write system calls
    (``/proc/PID/io``: every thread's), and the thread's page faults, minor and major (a major one waited
    for a read from the disk: a page the kernel had dropped from its cache, or never read). Counts, not
    times, so the host's load does not decide them (which thread preempts whom does depend on what else
    runs); zeros once the process is gone."""
    try:
        cpu = int(Path(f"/proc/{pid}/task/{pid}/schedstat").read_text().split()[0])
        return (cpu, *_switches(pid, [pid]), *_io(pid), *_faults(f"/proc/{pid}/task/{pid}/stat"))
    except (OSError, ValueError, KeyError):
        return 0, 0, 0, 0, 0, 0, 0


def process_costs(pid: int) -> tuple[int, ...]:
    """`loop_costs` of the whole process ``pid``, every thread: what a client with threads of its own (the
    C++ client's, Node's) spends. The CPU and the faults from ``stat`` (threads that ended count too; CPU
    in clock ticks, 10 ms), the switches summed over the threads alive at the time."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) * 1_000_000_000 // _TICK  # utime + stime
        switches = _switches(pid, [int(t) for t in os.listdir(f"/proc/{pid}/task")])
        return (cpu, *switches, *_io(pid), int(fields[7]), int(fields[9]))
    except (OSError, ValueError, KeyError):
        return 0, 0, 0, 0, 0, 0, 0


def _faults(stat: str) -> tuple[int, int]:
    """Minor and major page faults from a ``stat`` file of /proc (a process's or one thread's)."""
    fields = Path(stat).read_text().rsplit(")", 1)[1].split()
    return int(fields[7]), int(fields[9])


def _switches(pid: int, tids: list[int]) -> tuple[int, int]:
    """Voluntary and involuntary context switches of the threads ``tids`` of ``pid``, summed."""
    wakes = preempted = 0
    for tid in tids:
        try:
            status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
        except FileNotFoundError:  # a thread that ended since the listing
            continue
        counts = {
            k: int(v) for k, v in (ln.split(":") for ln in status.splitlines() if "ctxt_switches" in ln)
        }
        wakes += counts["voluntary_ctxt_switches"]
        preempted += counts["nonvoluntary_ctxt_switches"]
    return wakes, preempted


def _io(pid: int) -> tuple[int, int]:
    """The read and write system calls of the process ``pid`` (every thread's, ended ones' too)."""
    io = dict(line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines())
    return int(io["syscr"]), int(io["syscw"])


def per_message(before: tuple[int, ...], after: tuple[int, ...], messages: int) -> str:
    """`loop_costs` over a round, per message: µs of the loop's CPU, its wake-ups and preemptions, reads
    and writes; then its page faults over the round, minor and major, in all."""
    cpu, wakes, preempted, reads, writes, minor, major = (b - a for a, b in zip(before, after, strict=True))
    return (
        f"{cpu / 1000 / messages:.0f} µs CPU, {wakes / messages:.2f} wake-ups, "
        f"{preempted / messages:.2f} preemptions, {reads / messages:.2f} reads, {writes / messages:.2f} writes; "
        f"{minor:,} minor and {major:,} major faults"
    )


def host_busy_ms() -> float:
    """CPU time the whole machine has spent busy since boot (every process, ours and others'), in ms;
    ``/proc/stat`` counts clock ticks, so a 100 ms sample resolves 10 ms."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:9]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields) - idle) * 1000 / _TICK


def _py_spy() -> str | None:
    here = Path(sys.executable).with_name("py-spy")
    return str(here) if here.exists() else shutil.which("py-spy")


def thread_names(pid: int, spy: str | None) -> dict[int, str]:
    """tid -> Python thread name from a non-blocking ``py-spy dump`` (empty without py-spy)."""
    if spy is None:
        return {}
    try:
        dump = subprocess.run(
            [spy, "dump", "--nonblocking", "--pid", str(pid)], capture_output=True, text=True, timeout=10
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    names = {}
    for line in dump.splitlines():  # Thread 20905 (idle): "store-flush-cq"
        if line.startswith("Thread ") and '"' in line:
            head, name = line.split('"', 2)[:2]
            tid = head.split()[1]
            names[int(tid, 16) if tid.startswith("0x") else int(tid)] = name
    return names


class Timeline:
    """The sampler thread and the JSON-lines file it writes (one object per line, ``kind`` first)."""

    def __init__(self, path: Path, period: float = PERIOD) -> None:
        self.file: IO[str] = path.open("w")
        self.period = period
        self.procs: dict[int, str] = {}  # pid -> role
        self._last: dict[tuple[int, int], tuple[int, int]] = {}
        self._names: dict[tuple[int, int], str] = {}
        self._spy = _py_spy()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="timeline", daemon=True)

    def watch(self, pid: int, role: str) -> None:
        with self._lock:
            self.procs[pid] = role

    def unwatch(self, pid: int) -> None:
        with self._lock:
            self.procs.pop(pid, None)

    def write(self, **line: Any) -> None:
        with self._lock:
            self.file.write(json.dumps(line) + "\n")

    def mark(self, what: str) -> None:
        self.write(kind="mark", t=round(time.perf_counter(), 4), what=what)

    def messages(self, round_name: str, sent_ns: list[int], latencies_ms: list[float]) -> None:
        for sent, ms in zip(sent_ns, latencies_ms, strict=True):
            self.write(kind="msg", t=round(sent / 1e9, 4), round=round_name, ms=round(ms, 3))

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.file.close()

    def _run(self) -> None:
        host = host_busy_ms()
        while not self._stop.wait(self.period):
            with self._lock:
                procs = dict(self.procs)
            now = round(time.perf_counter(), 4)
            host, host_before = host_busy_ms(), host
            self.write(
                kind="cpu", t=now, proc="host", thread="all", cpu_ms=round(host - host_before, 1), wait_ms=0.0
            )
            for pid, role in procs.items():
                times = thread_times(pid)
                if any((pid, tid) not in self._names for tid in times):
                    named = thread_names(pid, self._spy)
                    for tid in times:
                        self._names[(pid, tid)] = named.get(tid) or ("main" if tid == pid else str(tid))
                for tid, (cpu, wait) in times.items():
                    before = self._last.get((pid, tid))
                    self._last[(pid, tid)] = (cpu, wait)
                    if before is None or (cpu == before[0] and wait == before[1]):
                        continue
                    self.write(
                        kind="cpu",
                        t=now,
                        proc=role,
                        thread=self._names[(pid, tid)],
                        cpu_ms=round((cpu - before[0]) / 1e6, 2),
                        wait_ms=round((wait - before[1]) / 1e6, 2),
                    )


def slow_report(path: Path, over_ms: float, top: int = 4, limit: int = 20) -> list[str]:
    """For the slowest message over ``over_ms`` of each sample period (at most ``limit``, slowest first): the threads that used
    the most CPU, or waited longest for a core, in the samples covering its flight."""
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    cpu = [x for x in lines if x["kind"] == "cpu"]
    slowest: dict[int, dict[str, Any]] = {}  # the slowest message of each sample period
    for x in lines:
        if x["kind"] == "msg" and x["ms"] > over_ms:
            period = int(x["t"] / PERIOD)
            if period not in slowest or x["ms"] > slowest[period]["ms"]:
                slowest[period] = x
    out = []
    for m in sorted(slowest.values(), key=lambda x: -x["ms"])[:limit]:
        start, end = m["t"], m["t"] + m["ms"] / 1000 + PERIOD
        who: dict[str, list[float]] = {}
        for x in cpu:
            if start <= x["t"] <= end:
                acc = who.setdefault(f"{x['proc']}/{x['thread']}", [0.0, 0.0])
                acc[0] += x["cpu_ms"]
                acc[1] += x["wait_ms"]
        busiest = sorted(who.items(), key=lambda kv: -(kv[1][0] + kv[1][1]))[:top]
        ran = ", ".join(f"{k} cpu {c:.1f} wait {w:.1f}" for k, (c, w) in busiest)
        out.append(f"  {m['round']} t={m['t']:.3f} {m['ms']:.2f} ms: {ran}")
    return out
