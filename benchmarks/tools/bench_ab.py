"""A/B broker speed: brokers built from several git refs, side by side, under the same real clients.

    python benchmarks/tools/bench_ab.py REF [REF ...] [--loads ons,cpp,mqctl] [--rounds 3] [--seconds 10]
                                  [--threads 16] [--profile DIR]

Each REF (a commit, branch or tag; WORKTREE for the working tree as it is, uncommitted changes included;
a directory for the source tree in it, say a ref extracted with `git archive` whose build is made already)
is checked out into a temporary git worktree (its hot modules compiled as `make` does, where the ref has
scripts/build_native.py), and gets a NameServer and a broker of its own, started from
that tree as subprocesses on a temporary store (so a ref's NameServer code is measured with its broker).
The topic ``AbBench`` (8 queues) is created on each. Then every round runs each load against each ref in
turn, rotating the order of the refs each round, so drift over the run (other processes, page cache,
thermal) spreads over all of them instead of favouring whichever ran first.

Loads (each sends 1 KiB bodies synchronously from ``--threads`` concurrent senders for ``--seconds`` after
a 1 s warm-up; each is a separate process that prints "start" when its timed window opens):
- ``ons``: the Node client ali-ons (benchmarks/tools/ons_bench.js), N awaiting loops on one Producer;
- ``cpp``: the official C++ client (the librocketmq.so of PyPI's rocketmq 0.4.4) driven from C
  (benchmarks/tools/cpp_bench.c, compiled here with cc), N threads on one producer, as a C/C++ application uses it;
- ``cpp-py``: the same client through its Python binding (benchmarks/tools/cpp_bench.py), N Python threads on one
  Producer. Their GIL hand-offs around each ctypes call cost the client ~4x the broker's CPU per send, so on
  two cores this load measures mostly the client; ``cpp`` is the one that measures the broker;
- ``mqctl``: `mqctl bench produce`'s senders (benchmarks/tools/mqctl_load.py), N connections, one send in flight each.

Per ref and load it prints the median over rounds of: sends/s, p50 and p99 round trip, the broker's CPU per
message (utime + stime of the broker process over the timed window, divided by the messages sent in it),
the cores the broker used over the window, the load process's own CPU per message (client and broker share
two cores, so a client that spends more than the broker sets the pace), and the ratios of sends/s and CPU
per message to the first ref: of the medians, and the median of each round's ratio (paired); and the sends
that failed over all rounds. Under ``cpp`` a few in 10,000 fail with every broker (0.02-0.06 %, old and new alike): the
client's log (~/logs/rocketmq-cpp/) shows its own TcpRemotingClient giving up on the lock of its connection
table without waiting its 3 s ("GetTransport of:<broker> get timed_mutex timeout") while 16 threads contend
for it, and after its retries it reports "No route info of this topic"; those sends never reach the broker.
The load average is printed before and after, since client and broker share this machine's cores.

``--profile DIR`` adds one round per ref under the first load with py-spy recording the broker, and writes
DIR/flame-REF.svg (py-spy is a dev dependency).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the goal benchmarks' harness
from bench_ali_ons import cpu_seconds, create_topics
from bench_broker_produce import local_cluster

from daemon.remoting.loop import run

ROOT = Path(__file__).resolve().parents[2]
BENCH = Path(__file__).resolve().parent
TOPIC = "AbBench"
INTEROP_PYTHON = ROOT / ".venv-interop" / "bin" / "python"
LOADS = ("ons", "cpp", "cpp-py", "mqctl")
PY_SPY = (
    shutil.which("py-spy", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    or "py-spy"
)


@dataclass
class Target:
    """One ref's tree and its running broker."""

    ref: str
    tree: Path
    namesrv: str = ""
    broker_pid: int = 0
    rounds: dict[str, list[dict[str, float]]] = field(default_factory=dict)


def build_native(tree: Path) -> None:
    """Compile the tree's hot modules as `make` does, for the refs that have the build (store/native.py)."""
    script = tree / "scripts" / "build_native.py"
    if script.exists():
        subprocess.run([sys.executable, str(script)], cwd=tree, check=True)


@contextmanager
def checkout(ref: str, into: Path) -> Iterator[Path]:
    """The tree of ``ref`` as `make` leaves it: a detached worktree under ``into``, or the working tree
    itself for WORKTREE (or the directory given), its hot modules compiled where the ref has that build."""
    if ref == "WORKTREE":
        build_native(ROOT)
        yield ROOT
        return
    if Path(ref).is_dir():  # a source tree as it is (say one extracted with `git archive`), with its build
        build_native(Path(ref))
        yield Path(ref).resolve()
        return
    sha = subprocess.run(
        ["git", "rev-parse", "--verify", f"{ref}^{{commit}}"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    tree = into / f"{len(list(into.iterdir()))}-{sha[:10]}"
    subprocess.run(["git", "worktree", "add", "--detach", "--quiet", str(tree), sha], cwd=ROOT, check=True)
    try:
        build_native(tree)
        yield tree
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False)


@contextmanager
def cluster(target: Target, data: Path) -> Iterator[None]:
    """A NameServer and a broker started from ``target.tree``, with that tree first on the path."""
    with local_cluster(data, env={"PYTHONPATH": str(target.tree)}, cwd=target.tree) as (ns, pid):
        target.namesrv, target.broker_pid = ns, pid
        run(create_topics(ns, [TOPIC], {}))
        yield


def cpp_bench(into: Path, name: str = "cpp_bench") -> Path:
    """benchmarks/tools/NAME.c compiled into ``into`` against the C++ client's librocketmq.so (.venv-interop)."""
    lib = subprocess.run(
        [str(INTEROP_PYTHON), "-c", "import os, rocketmq; print(os.path.dirname(rocketmq.__file__))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    binary = into / name
    link = [f"-L{lib}", "-l:librocketmq.so", f"-Wl,-rpath,{lib}", "-lpthread"]
    subprocess.run(["cc", "-O2", "-o", str(binary), str(BENCH / f"{name}.c"), *link], check=True)
    return binary


def load_argv(load: str, namesrv: str, threads: int, seconds: float, work: Path) -> list[str]:
    args = [namesrv, TOPIC, str(threads), str(seconds)]
    if load == "ons":
        return ["node", str(BENCH / "ons_bench.js"), "produce", *args]
    if load == "cpp":
        return [str(work / "cpp_bench"), *args]
    if load == "cpp-py":
        return [str(INTEROP_PYTHON), str(BENCH / "cpp_bench.py"), *args]
    return [sys.executable, str(BENCH / "mqctl_load.py"), *args]


def measure(target: Target, argv: list[str], profile: Path | None = None) -> dict[str, float]:
    """Run one load process; sample the broker's CPU time over the window the load reports."""
    spy: subprocess.Popen[bytes] | None = None
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, cwd=ROOT) as proc:
        assert proc.stdout is not None
        opened = proc.stdout.readline() == "start\n"
        if opened and profile is not None:
            spy = subprocess.Popen(
                [
                    PY_SPY,
                    "record",
                    "--pid",
                    str(target.broker_pid),
                    "--output",
                    str(profile),
                    "--rate",
                    "250",
                    "--nonblocking",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        cpu, wall = cpu_seconds(target.broker_pid), time.perf_counter()
        line = proc.stdout.readline() if opened else ""
        used, window = cpu_seconds(target.broker_pid) - cpu, time.perf_counter() - wall
    if spy is not None:
        spy.send_signal(signal.SIGINT)  # py-spy writes the flame graph when interrupted
        spy.wait(60)
    if proc.returncode != 0 or not line:
        raise SystemExit(f"{' '.join(argv[:3])} failed ({proc.returncode}) against {target.ref}")
    r = json.loads(line)
    count = max(1, int(r["count"]))
    client = float(r["clientCpu"] if "clientCpu" in r else r["nodeCpu"])  # share of one core, over the window
    return {
        "tps": r["count"] / r["seconds"],
        "p50": float(r["p50Ms"]),
        "p99": float(r["p99Ms"]),
        "cpu_us": used / count * 1e6,
        "client_us": client * float(r["seconds"]) / count * 1e6,
        "cores": used / window,
        "failures": float(r["failures"]),
    }


def median(rounds: list[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in rounds)


def paired(rounds: list[dict[str, float]], base: list[dict[str, float]], key: str) -> float:
    """The median of the per-round ratios: a round runs every ref seconds apart, so the machine's drift
    between rounds (30 % here) cancels out of each ratio."""
    return statistics.median(r[key] / b[key] for r, b in zip(rounds, base, strict=True))


def report(targets: list[Target], loads: list[str]) -> None:
    for load in loads:
        base = targets[0].rounds[load]
        print(
            f"\n{load}: median of {len(base)} rounds (x: ratio of the medians; paired: median of each round's)"
        )
        print(
            f"  {'ref':<24} {'sends/s':>9} {'p50 ms':>7} {'p99 ms':>7} {'CPU us/msg':>10} {'cores':>6} "
            f"{'client us/msg':>13} {'x sends/s':>9} {'paired':>6} {'x CPU/msg':>9} {'paired':>6} {'failures':>8}"
        )
        for t in targets:
            rounds = t.rounds[load]
            tps, cpu = median(rounds, "tps"), median(rounds, "cpu_us")
            print(
                f"  {t.ref:<24} {tps:>9,.0f} {median(rounds, 'p50'):>7.2f} {median(rounds, 'p99'):>7.2f} "
                f"{cpu:>10.1f} {median(rounds, 'cores'):>6.2f} {median(rounds, 'client_us'):>13.1f} "
                f"{tps / median(base, 'tps'):>9.2f} {paired(rounds, base, 'tps'):>6.2f} "
                f"{cpu / median(base, 'cpu_us'):>9.2f} {paired(rounds, base, 'cpu_us'):>6.2f} "
                f"{sum(r['failures'] for r in rounds):>8.0f}"
            )


def loadavg() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "refs",
        nargs="+",
        help="git refs to compare (WORKTREE: the working tree as it is; a directory: that tree)",
    )
    parser.add_argument("--loads", default="ons,cpp,mqctl", help=f"comma-separated: {', '.join(LOADS)}")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument(
        "--profile", type=Path, help="write DIR/flame-REF.svg from one extra py-spy round per ref"
    )
    a = parser.parse_args()
    loads = a.loads.split(",")
    if unknown := set(loads) - set(LOADS):
        parser.error(f"unknown load(s): {', '.join(sorted(unknown))}")
    print(f"load average before: {loadavg()} ({os.cpu_count()} cores)", flush=True)
    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mqctl-ab-")))
        (work / "trees").mkdir()
        if "cpp" in loads:
            cpp_bench(work)
        targets = []
        for i, ref in enumerate(a.refs):
            target = Target(ref, stack.enter_context(checkout(ref, work / "trees")))
            stack.enter_context(cluster(target, work / f"data-{i}"))
            targets.append(target)
        for n in range(a.rounds):
            for load in loads:
                for target in targets[n % len(targets) :] + targets[: n % len(targets)]:
                    r = measure(target, load_argv(load, target.namesrv, a.threads, a.seconds, work))
                    target.rounds.setdefault(load, []).append(r)
                    print(
                        f"round {n + 1} {load:<6} {target.ref:<24} {r['tps']:>9,.0f} sends/s "
                        f"p99 {r['p99']:.2f} ms, {r['cpu_us']:.1f} us CPU/msg, {r['cores']:.2f} cores, "
                        f"client {r['client_us']:.1f} us CPU/msg",
                        flush=True,
                    )
        if a.profile:
            a.profile.mkdir(parents=True, exist_ok=True)
            for target in targets:
                svg = a.profile / f"flame-{target.ref.replace('/', '_')}.svg"
                measure(target, load_argv(loads[0], target.namesrv, a.threads, a.seconds, work), svg)
                print(f"flame graph of {target.ref} under {loads[0]}: {svg}", flush=True)
        report(targets, loads)
    print(f"\nload average after: {loadavg()}")


if __name__ == "__main__":
    main()
