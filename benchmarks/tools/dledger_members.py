"""Each DLedger member's CPU and syscalls per send over one produce round, optionally one member profiled.

    python benchmarks/tools/dledger_members.py [--seconds 5] [--producers 16] [--rounds 1] [--single]
                                               [--perf leader|follower] [--strace leader|follower] [--sched]
                                               [--syscalls] [--event EVENT] [--machine]

A fresh 3-member group is started as ``bench_dledger`` starts it; after a 1 s warm-up (outside the window),
``bench_broker_produce``'s senders run against the leader for ``--seconds``, and each member's user + system
CPU (``/proc/PID/stat``; also printed apart, user and system, with its minor and major page faults) and its read and write syscalls (``syscr``/``syscw`` of ``/proc/PID/io``) are
divided by the sends: a follower's reads per send are the pushes it took per send (one push a read), its
writes its answers. So are each member's and the load generator's context switches (``/proc/PID/task/*/status``),
voluntary and involuntary, of its event loop's thread and of all its threads: the loop's voluntary ones are
its sleeps in the poll, each a wake-up by another process's write or a timer; involuntary ones, a core taken
from it. ``--syscalls`` counts each member's loop thread's polls, socket reads and writes with ``perf stat``
(tracepoints: cheap beside ``--strace``); ``--event EVENT`` (repeatable) counts any other perf event there
too, such as a compiled function's calls through a uprobe (``perf probe -x build/native/store/compiled__mypyc*.so
NAME=CPyDef_engine___DefaultMessageStore___dispatch_committed`` makes ``probe_compiled__mypyc:NAME``; a
rebuild replaces the library, so make it again after one). The load average is printed with each round: the group shares the machine's cores.
``--machine`` says whether the round was bound by the cores or by its round trips: the CPU of every process
of the run (the members, the NameServer, ``mqctl up``, the load generator) in cores over the window's wall
time, beside the machine's busy and idle cores from ``/proc/stat`` (busy beyond the run's processes: other
work on the host), and how each process's event loop thread spent the window (``schedstat``: on a core,
runnable waiting for one, asleep). The load generator runs on uvloop, as ``bench_dledger``'s does for both
sides. ``--single`` runs the same round against one ASYNC_MASTER (as ``bench_dledger``'s single side starts it)
instead, the broker taking the leader's place for ``--perf``/``--strace`` (``perf-single.data``): the
leader's profile less the single broker's is what DLedger adds to a send.

``--perf`` records the member with kernel stacks (``perf record -g``, ``cpu-clock`` where the machine has no
PMU) into ``perf-ROLE.data``, with ``--dwarf`` its user stacks too (``--call-graph dwarf``: the compiled
modules have no frame pointers); ``--strace`` writes each of its socket reads and writes with its size to
``strace-ROLE.txt`` (slow: for how many syscalls and how many bytes, not for time), ``--strace-count`` every
system call of its threads, counted by name (``strace -c -f``: ``syscalls-ROLE.txt``); ``--sched`` records the
machine's wake-ups and context switches (``perf record -a -e sched:...``) into ``sched.data`` and prints
whom the leader woke and who preempted it. Each goes to ``--out`` (default: the current directory).
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the goal benchmarks' harness
from bench_ali_ons import TICK, cpu_seconds, stat_fields
from bench_broker_produce import BenchResult, bench, free_port
from bench_dledger import UP_ARGS, group_env
from bench_ha import PIDS, broker

from daemon.remoting.client import RemotingClient
from daemon.remoting.loop import run
from tests.dledger.test_group import elected_master
from tests.support.up import mqctl_up


def members(data: Path, leader: str) -> list[int]:
    """The members' pids, the leader's first (each store dir holds its broker's pid and the address it serves)."""
    found = []
    for store in sorted(data.glob("store-broker-a-n*")):
        addr = store / "broker.addr"
        deadline = time.monotonic() + 60
        while not addr.exists() and time.monotonic() < deadline:  # a member still starting on a busy host
            time.sleep(0.1)
        pid = int((store / "broker.pid").read_text().split()[0])
        found.append((addr.read_text().split()[0] != leader, pid))  # its first line
    return [pid for _, pid in sorted(found)]


def usage(pid: int) -> tuple[float, float, int, int]:
    """(user seconds, system seconds, minor page faults, major page faults) of the process so far
    (``/proc/PID/stat``). A store into a page of a mapped file's fallocated (unwritten) blocks, which the
    file system zero-fills first, counts as a major fault though it reads nothing."""
    fields = stat_fields(pid)
    return int(fields[11]) / TICK, int(fields[12]) / TICK, int(fields[7]), int(fields[9])


def syscalls(pid: int) -> tuple[int, int]:
    """(read, write) syscalls the process made so far."""
    fields = dict(line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines())
    return int(fields["syscr"]), int(fields["syscw"])


def switches(pid: int) -> tuple[int, int, int, int]:
    """Context switches so far: (voluntary, involuntary) of the process's main thread (the event loop's:
    a voluntary one is a sleep in the loop's poll, so each is a wake-up later), then of all its threads."""
    out = [0, 0, 0, 0]
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            status = (task / "status").read_text()
        except OSError:  # (a thread that ended meanwhile)
            continue
        vol = int(re.search(r"^voluntary_ctxt_switches:\s+(\d+)", status, re.M)[1])  # type: ignore[index]
        invol = int(re.search(r"^nonvoluntary_ctxt_switches:\s+(\d+)", status, re.M)[1])  # type: ignore[index]
        if task.name == str(pid):
            out[0], out[1] = vol, invol
        out[2] += vol
        out[3] += invol
    return out[0], out[1], out[2], out[3]


#: the system calls ``--syscalls`` counts on each member (perf's tracepoints): the loop's polls, the
#: socket reads and writes whichever call makes them
SYSCALLS = (
    "epoll_wait",
    "epoll_pwait",
    "read",
    "write",
    "writev",
    "recvfrom",
    "sendto",
    "recvmsg",
    "sendmsg",
)


def counted_names(args: argparse.Namespace) -> tuple[str, ...]:
    """What ``--syscalls`` and ``--event`` count: the system calls by name, then the events as given."""
    return (*(SYSCALLS if args.syscalls else ()), *args.event)


def counter(args: argparse.Namespace, pids: list[int]) -> list[subprocess.Popen[str]]:
    """``--syscalls``/``--event``: one ``perf stat`` a member counting :func:`counted_names` on its main thread."""
    names = counted_names(args)
    if not names:
        return []
    events = ",".join(name if ":" in name else f"syscalls:sys_enter_{name}" for name in names)
    return [
        subprocess.Popen(
            ["perf", "stat", "-x", ",", "-e", events, "-t", str(pid)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for pid in pids
    ]


def stat_counts(text: str) -> dict[str, int]:
    """``perf stat -x ,``'s output: the count of each ``syscalls:sys_enter_NAME`` counted, by NAME (any other
    event by its own name)."""
    counts = {}
    for line in text.splitlines():
        parts = line.split(",")
        if len(parts) > 2 and parts[0].isdigit():
            counts[parts[2].removeprefix("syscalls:sys_enter_")] = int(parts[0])
    return counts


def counted(procs: list[subprocess.Popen[str]]) -> list[dict[str, int]]:
    """Each ``perf stat`` stopped: its counts by system call."""
    found = []
    for proc in procs:
        proc.send_signal(2)
        found.append(stat_counts(proc.communicate()[1]))
    return found


def session_pids(pid: int) -> list[int]:
    """Every process in ``pid``'s session (a group's members, its NameServer and ``mqctl up`` share one)."""
    sid = stat_fields(pid)[3]
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if stat_fields(int(entry.name))[3] == sid:
                    found.append(int(entry.name))
            except (OSError, IndexError):  # (a process that ended meanwhile)
                continue
    return found


def process_name(pid: int) -> str:
    """``mqctl``'s command (``namesrv``, ``up``) for one of its processes, else the program's name."""
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    if b"mqctl" in argv:
        return argv[argv.index(b"mqctl") + 1].decode()
    return Path(f"/proc/{pid}/comm").read_text().strip()


def threads_cpu(pid: int) -> dict[int, tuple[float, float]]:
    """Each of ``pid``'s threads' (seconds on a core, seconds runnable waiting for one) so far, by thread id
    (``/proc/PID/task/TID/schedstat``, nanoseconds)."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            ran, waited = (task / "schedstat").read_text().split()[:2]
        except OSError:  # (a thread that ended meanwhile)
            continue
        out[int(task.name)] = (int(ran) / 1e9, int(waited) / 1e9)
    return out


def machine_ticks() -> tuple[int, int]:
    """(busy, idle) jiffies of the whole machine so far (``/proc/stat``'s first line; iowait counts idle)."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields[:8]) - idle, idle


Snapshot = tuple[float, tuple[int, int], dict[int, dict[int, tuple[float, float]]]]


def snapshot(pids: list[int]) -> Snapshot:
    """``--machine``'s reading: the monotonic clock, the machine's ticks, each process's threads' times."""
    return time.monotonic(), machine_ticks(), {p: threads_cpu(p) for p in pids}


def machine_summary(
    before: Snapshot, after: Snapshot, names: dict[int, str], result: BenchResult, producers: int
) -> None:
    """Cores used over the window: each process's, the run's sum, the machine's; and how each process's main
    thread (its event loop's) spent the window: on a core, runnable waiting for one, asleep (waiting for a
    peer or a timer). A thread that is never asleep bounds the round; a round whose threads sleep while the
    machine has idle cores is bound by its round trips."""
    wall = after[0] - before[0]
    busy, idle = (b - a for a, b in zip(before[1], after[1], strict=True))
    cores = (busy + idle) / (wall * TICK)  # (the machine's cores, as /proc/stat counts them)
    parts, loops, ours = [], [], 0.0
    for pid, threads in after[2].items():
        was = before[2].get(pid, {})
        ran = {tid: t[0] - was.get(tid, (0.0, 0.0))[0] for tid, t in threads.items()}
        total = sum(ran.values())
        ours += total
        name = names.get(pid, str(pid))
        parts.append(f"{name} {total / wall:.2f}")
        if pid in threads and total > 0.01 * wall:
            on, waited = (b - a for a, b in zip(was.get(pid, (0.0, 0.0)), threads[pid], strict=True))
            loops.append(
                f"{name} {on / wall:.0%}/{waited / wall:.0%}/{max(0.0, 1 - (on + waited) / wall):.0%}"
            )
    machine = busy / (busy + idle) * cores
    print(
        f"  cores over {wall:.2f} s: {', '.join(parts)}; the run's {ours / wall:.2f}, the machine busy "
        f"{machine:.2f} of {cores:.1f}, idle {cores - machine:.2f}, others {max(0.0, machine - ours / wall):.2f}",
        flush=True,
    )
    print(
        f"  main threads on a core/runnable/asleep: {', '.join(loops)}; mean round trip "
        f"{result.avg_rt_ms * 1000:.0f} µs ({producers} senders over it: {producers / max(result.avg_rt_ms, 1e-9) * 1000:,.0f} sends/s)",
        flush=True,
    )


def role(args: argparse.Namespace, which: str) -> str:
    """The profiled process's name in the output files: the single broker's, or the member's."""
    return "single" if args.single else which


def tracer(args: argparse.Namespace, pids: list[int]) -> subprocess.Popen[bytes] | None:
    out = Path(args.out)
    which = args.perf or args.strace or args.strace_count
    if which:
        name = role(args, which)
        if args.perf:
            dwarf = ["--call-graph", "dwarf,16384"] if args.dwarf else ["-g"]
            tool, file = ["perf", "record", "-F", "2999", *dwarf], f"perf-{name}.data"
        elif args.strace:
            calls = "trace=write,writev,sendmsg,sendto,read,recvfrom,epoll_wait,epoll_pwait"
            tool, file = ["strace", "-f", "-s", "0", "-e", calls], f"strace-{name}.txt"
        else:
            tool, file = ["strace", "-c", "-f"], f"syscalls-{name}.txt"
        pid = pids[0 if which == "leader" or args.single else 1]
        cmd = [*tool, "-p", str(pid), "-o", str(out / file)]
    elif args.sched:
        cmd = [
            "perf",
            "record",
            "-a",
            "-e",
            "sched:sched_wakeup,sched:sched_switch",
            "-o",
            str(out / "sched.data"),
        ]
    else:
        return None
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # (attached before the window opens)
    return proc


def sched_summary(data: Path, leader: int, names: dict[int, str]) -> None:
    """Whom the leader woke, and who ran when it was preempted (switched out still runnable)."""
    text = subprocess.run(
        ["perf", "script", "-i", str(data), "-F", "pid,event,trace"], capture_output=True, text=True
    ).stdout
    woke: collections.Counter[str] = collections.Counter()
    preempted_by: collections.Counter[str] = collections.Counter()
    for line in text.splitlines():
        if (
            line.split(" ", 1)[0].strip().isdigit()
            and int(line.split()[0]) == leader
            and "sched_wakeup" in line
        ):
            target = re.search(r" pid=(\d+)", line)
            if target:
                woke[names.get(int(target[1]), "other")] += 1
        elif f"prev_pid={leader} " in line and "prev_state=R" in line:
            nxt = re.search(r"next_pid=(\d+)", line)
            if nxt:
                preempted_by[names.get(int(nxt[1]), "other")] += 1
    print(f"the leader woke: {dict(woke.most_common())}; preempted by: {dict(preempted_by.most_common())}")


async def measured(
    args: argparse.Namespace, addr: str, pids: list[int]
) -> tuple[BenchResult, list[float], list[tuple[int, ...]], list[tuple[float, ...]]]:
    """The round against `addr` after a warm-up: its result, each of `pids`' CPU seconds over it and the
    load generator's (this process's) last, each of `pids`' and the load generator's (read, write) syscalls (then everyone's context
    switches and, with ``--syscalls``, the members' counted calls), and each of `pids`' (user seconds,
    system seconds, minor faults, major faults)."""
    await bench(addr, 1.0, args.producers)  # warm-up
    proc = tracer(args, pids)
    counters = counter(args, pids)
    if counters:
        time.sleep(1.0)  # (attached before the window opens)
    everyone = [*pids, os.getpid()]
    cpu0, sys0 = [cpu_seconds(p) for p in pids], [syscalls(p) for p in everyone]
    sw0 = [switches(p) for p in everyone]
    use0 = [usage(p) for p in pids]
    group = session_pids(pids[0]) if args.machine and len(pids) > 1 else []  # (a single broker: this session)
    watched = sorted({*group, *pids, os.getpid()}) if args.machine else []
    snap0 = snapshot(watched)
    own0 = time.process_time()
    # (no warm-up of its own: every send the members' counters see is one the result counts)
    result = await bench(addr, args.seconds, args.producers, warm_up_seconds=0)
    own = time.process_time() - own0
    if args.machine:
        names = {pid: process_name(pid) for pid in watched}
        names.update({pids[0]: "leader" if len(pids) > 1 else "single", os.getpid(): "load generator"})
        names.update((pid, f"follower{i}") for i, pid in enumerate(pids[1:], 1))
        machine_summary(snap0, snapshot(watched), names, result, args.producers)
    cpu = [cpu_seconds(p) - c for p, c in zip(pids, cpu0, strict=True)]
    used = [tuple(b - a for a, b in zip(u0, usage(p), strict=True)) for p, u0 in zip(pids, use0, strict=True)]
    calls = [
        tuple(b - a for a, b in zip(s0, syscalls(p), strict=True))
        for p, s0 in zip(everyone, sys0, strict=True)
    ]
    calls += [
        tuple(b - a for a, b in zip(s0, switches(p), strict=True))
        for p, s0 in zip(everyone, sw0, strict=True)
    ]
    for pid, counts in zip(pids, counted(counters), strict=False):  # (none without --syscalls or --event)
        print(f"  {pid}: {', '.join(f'{k} {v:,}' for k, v in counts.items() if v)}", flush=True)
        calls.append(tuple(counts.get(name, 0) for name in counted_names(args)))
    if proc is not None:
        proc.send_signal(2)
        proc.wait()
    return result, [*cpu, own], calls, used


async def group_round(
    args: argparse.Namespace, tmp: str
) -> tuple[list[int], BenchResult, list[float], list[tuple[int, ...]], list[tuple[float, ...]]]:
    ns_port = free_port()
    data = Path(tmp) / "group"
    async with mqctl_up(data, group_env(Path(tmp) / "cfg"), ns_port, *UP_ARGS):
        async with RemotingClient() as client:
            leader = await elected_master(client, f"127.0.0.1:{ns_port}")
        pids = members(data, leader)
        return (pids, *await measured(args, leader, pids))


def round_(args: argparse.Namespace) -> None:
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        if args.single:  # (started outside the round's loop: `broker` runs one of its own to wait for it)
            with broker(f"{tmp}/single", free_port(), broker_role="ASYNC_MASTER") as addr:
                pids = [PIDS[addr]]
                result, cpu, calls, used = run(measured(args, addr, pids))
        else:
            pids, result, cpu, calls, used = run(group_round(args, tmp))
    sends = max(1, result.messages)
    own = cpu.pop()
    per = " + ".join(f"{c / sends * 1e6:.1f}" for c in cpu)
    members_ = len(cpu)
    io = ", ".join(f"{r / sends:.2f}/{w / sends:.2f}" for r, w in calls[: members_ + 1])
    sw = ", ".join(
        f"{v / sends:.3f}/{i / sends:.3f} ({tv / sends:.3f}/{ti / sends:.3f})"
        for v, i, tv, ti in calls[members_ + 1 : 2 * members_ + 2]
    )
    who = "(single broker)" if args.single else "(leader, followers)"
    print(
        f"load {load:.1f}: {result.tps:,.0f} sends/s; CPU per send {per} = {sum(cpu) / sends * 1e6:.1f} µs "
        f"{who}; reads/writes per send {io} (the load generator's last); load generator {own / sends * 1e6:.1f} µs",
        flush=True,
    )
    print(
        f"  context switches per send, voluntary/involuntary, loop thread (all threads), members then the "
        f"load generator: {sw}",
        flush=True,
    )
    split = ", ".join(
        f"{u / sends * 1e6:.1f}/{st / sends * 1e6:.1f} ({f / sends:.2f}/{mf / sends:.2f})"
        for u, st, f, mf in used
    )
    print(f"  user/system µs per send (minor/major faults per send), members: {split}", flush=True)
    for pid, counts in zip(pids, calls[2 * members_ + 2 :], strict=False):
        per = ", ".join(
            f"{name} {n / sends:.3f}" for name, n in zip(counted_names(args), counts, strict=True) if n
        )
        print(f"  {pid} loop thread's system calls (and events) per send: {per}", flush=True)
    if args.sched:
        names = {pids[0]: "leader", os.getpid(): "load generator"}
        names.update((pid, "follower") for pid in pids[1:])
        sched_summary(Path(args.out) / "sched.data", pids[0], names)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--producers", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--single", action="store_true", help="one ASYNC_MASTER instead of a group")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--perf", choices=("leader", "follower"))
    which.add_argument("--strace", choices=("leader", "follower"))
    which.add_argument(
        "--strace-count", choices=("leader", "follower"), help="every system call of the member, counted"
    )
    which.add_argument("--sched", action="store_true")
    parser.add_argument(
        "--syscalls", action="store_true", help="count each member's loop thread's polls, reads and writes"
    )
    parser.add_argument(
        "--machine", action="store_true", help="the run's cores and the machine's idle: CPU- or latency-bound"
    )
    parser.add_argument(
        "--event", action="append", default=[], help="also count this perf event on each member's loop thread"
    )
    parser.add_argument("--dwarf", action="store_true", help="--perf with DWARF stacks (user frames unwound)")
    parser.add_argument("--out", default=".")
    args = parser.parse_args()
    for _ in range(args.rounds):
        round_(args)


if __name__ == "__main__":
    main()
