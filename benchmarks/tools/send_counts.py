"""A send's instructions and simulated cache (or page) misses, one topic against many, counted by callgrind.

This guest has no hardware counters, and its load blurs CPU-time A/Bs of a few microseconds; what a send
executes and which lines and pages it misses do not depend on the load. For each side, a broker runs in a
child process under callgrind, filled as ``bench_send_path`` fills it (TOPICS one-queue topics, each sent
to); then, with instrumentation on, a warm-up round of COUNT sends (round-robin over the TOPICS, or to one
topic; each with its own UNIQ_KEY, which the broker indexes) fills the simulated caches, the counters are
zeroed, and the next round of COUNT sends is counted.
Only what runs inside the compiled ``SendProcessor.send_from`` is collected (``--toggle-collect``): the
send itself, not the harness decoding its frame. Prints each side's events per send and, for the events
that differ most, the functions the difference is in (self cost, many less one, per send):

    python benchmarks/tools/send_counts.py [--tree DIR] [--sim none|cache|tlb] [--topics 10000] [--count 20000] [--tick]

``--sim cache``: D1 and LL as this CPU's L1 data and last-level caches (from ``/sys``; ``--ll-level 2``
takes the L2 as LL instead). ``--sim tlb``: the same simulator with 4 KiB lines, a page-granular model of
the data TLBs (``--tlb 64,2048``: a fully associative first level of 64 pages and a 16-way second level of
2,048, AMD Zen's), whose misses count the distinct pages a send meets beyond what the model holds
(instruction fetches share the second level; valgrind has no TLB of its own). Prefetch instructions are
not simulated (a prefetch the send issues counts nothing, and its later load still counts a miss), and
the simulator's caches are not the machine's (no hardware prefetcher, no other process): the misses are
a model, to compare two sides or two trees counted alike. The loop is blocked between the rounds, so no
stats tick falls between them unless ``--tick`` puts one at the counted round's start (the stats clock
moved a period on): every send of that round is then its items' first count after a tick, and the
tick itself (``BrokerStats.sample``, and ``roll`` where the tree has it: the items counted before the
tick taken into their windows) is collected with the sends, so that a tree which moves that work off
the send is charged for it. Natively a tick falls once per item every few sends. The one topic's slot lookup costs what
its name's probe sequence in the slot table costs, which the hash seed decides: every run takes
``PYTHONHASHSEED`` from the environment, 0 unless set. ``--tree`` runs another source tree's broker
(with its own native build) under the same harness; ``--keep DIR`` keeps the dumps for
``callgrind_annotate``. Needs the compiled build: interpreted, there is no ``send_from`` symbol to collect.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SYMBOL = "CPyDef_send___SendProcessor___send_from"
#: What a stats tick runs (``--tick``), collected with the sends; a tree without ``roll`` runs none.
TICK_SYMBOLS = ("CPyDef_stats___BrokerStats___sample", "CPyDef_stats___BrokerStats___roll")
CACHE_DIR = Path("/sys/devices/system/cpu/cpu0/cache")


def function_costs(text: str) -> tuple[list[str], dict[str, list[int]]]:
    """A callgrind dump's event names and each function's self cost of every event, summed over the dump
    (the line after a ``calls=`` line is the call's inclusive cost, which the callee's own lines count;
    missing trailing events are zero). The ``summary:`` line is not used: after collection was toggled or
    zeroed it can wrap below zero."""
    events: list[str] = []
    positions = 1
    names: dict[str, str] = {}
    costs: dict[str, list[int]] = {}
    current: list[int] | None = None
    after_calls = False
    for line in text.splitlines():
        if after_calls:
            after_calls = False
            continue
        if line.startswith("events:"):
            events = line.split()[1:]
        elif line.startswith("positions:"):
            positions = len(line.split()) - 1
        elif line.startswith(("fn=", "cfn=")):  # a name is given once, where its id first appears
            ref, _, name = line.partition("=")[2].partition(" ")
            if name:
                names[ref] = name
            if line.startswith("fn="):
                current = costs.setdefault(names.get(ref, ref), [0] * len(events))
        elif line.startswith("calls="):
            after_calls = True
        elif current is not None and line[:1] and (line[0].isdigit() or line[0] in "+-*"):
            for i, value in enumerate(line.split()[positions:]):
                current[i] += int(value)
    return events, costs


def totals(events: list[str], costs: dict[str, list[int]]) -> dict[str, int]:
    """Each event's sum over every function."""
    return {event: sum(c[i] for c in costs.values()) for i, event in enumerate(events)}


def cache_size(level: int, kind: str) -> str:
    """``SIZE,ASSOC,LINE`` of this CPU's cache of ``level`` and ``kind`` ("Data", "Unified"), for valgrind."""
    for index in sorted(CACHE_DIR.glob("index*")):
        if int((index / "level").read_text()) == level and (index / "type").read_text().strip() == kind:
            size = (index / "size").read_text().strip()
            bytes_ = int(size[:-1]) * 1024 if size.endswith("K") else int(size)
            ways = int((index / "ways_of_associativity").read_text())
            line = int((index / "coherency_line_size").read_text())
            return f"{bytes_},{ways},{line}"
    raise SystemExit(f"send_counts: no level-{level} {kind} cache in {CACHE_DIR}")


def sim_options(sim: str, ll_level: int, tlb: str) -> list[str]:
    if sim == "none":
        return []
    if sim == "cache":
        return ["--cache-sim=yes", f"--D1={cache_size(1, 'Data')}", f"--LL={cache_size(ll_level, 'Unified')}"]
    first, second = (int(n) for n in tlb.split(","))
    page = 4096
    return ["--cache-sim=yes", f"--D1={first * page},{first},{page}", f"--LL={second * page},16,{page}"]


def per_send(
    side: str, tree: Path, topics: int, count: int, sim: list[str], keep: Path | None, tick: bool = False
) -> str:
    """Run one side under callgrind; the dump of its counted round's text."""
    with tempfile.TemporaryDirectory(prefix="send-counts-") as work:
        out = Path(work)
        cmd = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            "--collect-atstart=no",
            f"--toggle-collect={SYMBOL}",
            *(f"--toggle-collect={symbol}" for symbol in (TICK_SYMBOLS if tick else ())),
            f"--callgrind-out-file={out}/cg.%p",
            *sim,
            sys.executable,
            str(Path(__file__).resolve()),
            "--child",
            side,
            "--topics",
            str(topics),
            "--count",
            str(count),
        ]
        # one hash seed for every run (unless given): the tables' probe sequences, the same in both trees
        env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED", "0")}
        proc = subprocess.Popen(
            cmd, cwd=tree, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )
        assert proc.stdin is not None and proc.stdout is not None
        try:
            ready = proc.stdout.readline().split()
            if not ready or ready[0] != "ready":
                raise SystemExit(f"send_counts: the {side} child did not fill its broker")
            pid = ready[1]
            print(f"{side}: {' '.join(ready[2:])}", flush=True)

            def step(*control: str) -> None:
                subprocess.run(["callgrind_control", *control, pid], capture_output=True, check=True)

            def round_() -> None:
                proc.stdin.write("round\n")  # type: ignore[union-attr]
                if proc.stdout.readline().strip() != "done":  # type: ignore[union-attr]
                    raise SystemExit(f"send_counts: the {side} child's round failed")

            step("-i", "on")
            round_()  # the simulated caches filled, the code's translations made
            step("-z")
            if tick:
                proc.stdin.write("tick\n")
                if proc.stdout.readline().strip() != "ticked":
                    raise SystemExit(f"send_counts: the {side} child's tick failed")
            round_()
            step("-d")  # (returns once the dump is written)
            dumps = sorted(out.glob(f"cg.{pid}.1*"))
            if not dumps:
                raise SystemExit(f"send_counts: callgrind wrote no dump for the {side} side")
            text = dumps[0].read_text()
            if keep is not None:
                keep.mkdir(parents=True, exist_ok=True)
                (keep / f"{side}.{tree.name}.callgrind").write_text(text)
            proc.stdin.write("quit\n")
            proc.stdin.flush()
            with contextlib.suppress(subprocess.TimeoutExpired):  # its broker's close, slow under valgrind
                proc.wait(60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        return text


def report(sides: dict[str, tuple[list[str], dict[str, list[int]]]], count: int, top: int) -> None:
    for side, (events, costs) in sides.items():
        sums = totals(events, costs)
        print(f"{side}: " + ", ".join(f"{e} {sums[e] / count:,.1f}" for e in events) + " a send", flush=True)
        if not sums.get("Ir"):
            raise SystemExit(f"send_counts: nothing collected on the {side} side (is the build compiled?)")
    if set(sides) != {"one", "many"}:
        return
    events, one = sides["one"]
    _, many = sides["many"]
    zero = [0] * len(events)
    diff = {
        fn: [(m - o) / count for m, o in zip(many.get(fn, zero), one.get(fn, zero), strict=True)]
        for fn in {*one, *many}
    }
    wanted = [e for e in ("Ir", "D1mr", "D1mw", "DLmr", "DLmw") if e in events]
    for event in wanted:
        i = events.index(event)
        total = sum(d[i] for d in diff.values())
        print(f"many less one, {event}: {total:+,.2f} a send; by function (self):")
        for fn, d in sorted(diff.items(), key=lambda item: -abs(item[1][i]))[:top]:
            if d[i]:
                print(f"  {d[i]:+10,.2f}  {fn}")


async def child(side: str, topics: int, count: int) -> None:
    """Fill a broker, then run a round of ``count`` sends per ``round`` line on stdin, until ``quit``."""
    sys.path.insert(0, str(HERE.parent))  # benchmarks/: bench_send_path, benchlib
    from bench_send_path import _send_round, filled

    from store.native import describe_build

    async with filled(topics, count) as (processor, one, many, body):
        heads = one if side == "one" else many
        print(f"ready {os.getpid()} filled with {topics:,} topics; {describe_build()}", flush=True)
        # Read on the loop's own thread, blocking it: nothing periodic runs between the rounds. A stats
        # tick there (every SAMPLE_PERIOD on the loop) would make every item catch up in the counted
        # round, at its first count, where a native round meets a tick per item only now and then.
        stats = processor.broker.stats
        shift = 0.0
        while (line := sys.stdin.readline().strip()) in ("round", "tick"):
            if line == "tick":  # a tick a period after the last, then its roll where the tree has one
                shift += 10.0
                stats._now = lambda shift=shift: time.monotonic() + shift
                stats.sample()
                roll = getattr(stats, "roll", None)
                while roll is not None and roll(1_000_000):
                    pass
                print("ticked", flush=True)
                continue
            _send_round(processor, heads, body, count)
            print("done", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", type=Path, default=ROOT, help="source tree of the broker (default: this one)")
    ap.add_argument("--sim", choices=("none", "cache", "tlb"), default="cache")
    ap.add_argument("--ll-level", type=int, default=3, help="the cache level simulated as LL (--sim cache)")
    ap.add_argument("--tlb", default="64,2048", help="pages of the first and second level (--sim tlb)")
    ap.add_argument("--topics", type=int, default=10_000)
    ap.add_argument("--count", type=int, default=20_000, help="sends a round (the warm-up's and the counted)")
    ap.add_argument("--sides", default="one,many")
    ap.add_argument("--top", type=int, default=12, help="functions shown per event")
    ap.add_argument("--keep", type=Path, help="keep each side's dump in this directory")
    ap.add_argument("--tick", action="store_true", help="a stats tick at the counted round's start, counted")
    ap.add_argument("--child", choices=("one", "many"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        asyncio.run(child(args.child, args.topics, args.count))
        return
    sim = sim_options(args.sim, args.ll_level, args.tlb)
    tree = args.tree.resolve()
    print(
        f"send_counts: {tree}, {args.topics:,} topics, {args.count:,} sends counted"
        f"{', a stats tick first' if args.tick else ''}, {' '.join(sim) or 'no cache sim'}"
    )
    sides = {}
    for side in args.sides.split(","):
        sides[side] = function_costs(per_send(side, tree, args.topics, args.count, sim, args.keep, args.tick))
    report(sides, args.count, args.top)
    print(f"load {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
