"""The broker loop's user-space instructions per message, counted under callgrind: work, apart from misses.

This machine's guest has no hardware counters (``perf stat -e instructions`` answers "not supported"), so
how many instructions a message costs, which no load decides, is counted by valgrind's callgrind instead.
The broker of a source tree runs under callgrind with collection off; a NameServer and this process's
client (`bench_broker_latency.bench`: one producer at a fixed rate, one consumer long-polling a new
4-queue topic) run natively. For each rate, two rounds of different lengths are counted, each alone
(collection on for the round only, a dump per thread at each end); every round pays the same set-up (its topic's
creation and route, the consumer's first pulls), so the difference of the two rounds over the
difference of their messages is what one more message costs, set-up left out:

    python benchmarks/tools/loop_instructions.py [--tree DIR] [--rates 10] [--seconds 8,48] [--idle 20] [--topics N]

At 10 msgs/s (callgrind slows the broker some 50 times, so that is one message a loop turn, as 1,000
msgs/s is natively, unless the host is so busy that the broker falls behind: the line's pulls a message
say which) a message costs a send, the held pull's answer and the next pull's parking. The loop's own
timers are counted first over ``--idle`` seconds with no traffic and left out of the difference. At
these rates they are as many instructions as the messages (the delay levels' and timer wheel's polls,
the lag sampler, the stats sample, the registrations), and not steady from one second to the next: the
longer the long round, the less their unevenness weighs on a message. Compare trees in runs side by
side, and only where their pulls a message agree. At a rate
callgrind's broker cannot keep up with (``--rates 10,150 --seconds 2,6`` on a quiet host) the loop takes
them in batches, and the consumer's pulls carry many messages each; too high a rate or too long a round
and the backlog outlasts the client's 30 s timeout. Instructions per message of each, the ratio, and the loop's CPU per message natively
(`bench_broker_tail`'s figures) tell whether a quiet message's cost is more work or the same work on
cold caches. Prints one line per rate: the loop thread's instructions per message and the other threads'.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # benchmarks/
sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/tools/

from bench_broker_latency import bench, namesrv_process
from bench_broker_produce import ROOT, free_port, start_broker, wait_ready
from send_counts import function_costs

from daemon.remoting.loop import run


def self_cost(text: str) -> int:
    """The first event's total of a callgrind output file: every function's own cost, summed (see
    ``send_counts.function_costs``)."""
    events, costs = function_costs(text)
    return sum(c[0] for c in costs.values()) if events else 0


def thread_costs(directory: Path, pid: int, part: int) -> dict[int, int]:
    """Thread number (1 is the main thread: the event loop's) -> its instructions in dump ``part``."""
    out = {}
    for path in directory.glob(f"cg.{pid}.{part}-*"):
        out[int(path.name.rsplit("-", 1)[1])] = self_cost(path.read_text())
    return out


def per_message(
    short: tuple[int, int], long: tuple[int, int], idle: float = 0.0, seconds: float = 0.0
) -> float:
    """(messages, instructions) of a short and a long round -> instructions per message beyond set-up;
    ``idle`` instructions a second of the loop with no traffic (its timers: the lag sampler, the stats
    sample, registrations) times the ``seconds`` the long round lasted longer are left out too."""
    if long[0] <= short[0]:
        raise ValueError("the long round must carry more messages than the short one")
    return (long[1] - short[1] - idle * seconds) / (long[0] - short[0])


def callgrind_wrapper(out: Path) -> list[str]:
    """A broker's command prefix: callgrind with collection off until ``callgrind_control -i on``, one file
    per thread and dump in ``out`` (``cg.PID.PART-THREAD``)."""
    return [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        "--separate-threads=yes",
        f"--callgrind-out-file={out}/cg.%p",
    ]


def parse_rounds(
    ap: argparse.ArgumentParser, rates: str, idle: float, seconds: str
) -> tuple[argparse.Namespace, list[float], float, float, Path]:
    """The options every counting tool here takes (the tree, the rates, the idle count, the two rounds'
    lengths), added to ``ap`` with these defaults and parsed: (arguments, rates, short, long, tree)."""
    ap.add_argument("--tree", type=Path, default=ROOT, help="source tree of the broker (default: this one)")
    ap.add_argument("--rates", default=rates, help="msgs/s, comma-separated")
    ap.add_argument("--idle", type=float, default=idle, help="seconds of the loop counted with no traffic")
    ap.add_argument("--seconds", default=seconds, help="the short and the long round's length after warm-up")
    args = ap.parse_args()
    short_s, long_s = (float(s) for s in args.seconds.split(","))
    return args, [float(r) for r in args.rates.split(",")], short_s, long_s, args.tree.resolve()


def _control(*args: str) -> None:
    subprocess.run(["callgrind_control", *args], capture_output=True, check=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--topics", type=int, default=0, help="topics created first (slow under callgrind)")
    args, rates, short_s, long_s, tree = parse_rounds(ap, "10", 20.0, "8,48")
    with namesrv_process(tree) as namesrv, tempfile.TemporaryDirectory() as work:
        out = Path(work)
        port = free_port()
        addr = f"127.0.0.1:{port}"
        wrapper = callgrind_wrapper(out)
        proc = start_broker(f"{out}/store", port, "--namesrv", namesrv, cwd=tree, wrapper=wrapper)
        try:
            run(wait_ready(addr, time.perf_counter()))
            if args.topics:
                from bench_broker_tail import fill

                print(
                    f"{args.topics:,} topics filled in {run(fill(namesrv, addr, args.topics, False)):.0f} s"
                )
            _control("-i", "on", str(proc.pid))
            _control("-d", "idle-start", str(proc.pid))
            time.sleep(args.idle)
            _control("-d", "idle-end", str(proc.pid))
            _control("-i", "off", str(proc.pid))
            start, end = thread_costs(out, proc.pid, 1), thread_costs(out, proc.pid, 2)
            idle = (end.get(1, 0) - start.get(1, 0)) / args.idle
            print(f"idle: broker loop {idle:,.0f} instructions a second", flush=True)
            part = 2
            for rate in rates:
                rounds = []
                for seconds in (short_s, long_s):
                    # a dump at each end of the round: whether a dump zeroes the counters or not, the
                    # second less the first is the round (collection is off between rounds)
                    _control("-i", "on", str(proc.pid))
                    _control("-d", "start", str(proc.pid))
                    result = run(bench(namesrv, addr, seconds, rate, f"LoopInstr{part}"))
                    _control("-d", "end", str(proc.pid))
                    _control("-i", "off", str(proc.pid))
                    part += 2
                    start, end = thread_costs(out, proc.pid, part - 1), thread_costs(out, proc.pid, part)
                    costs = {t: end[t] - start.get(t, 0) for t in end}
                    rounds.append((result.sent, result.pulls, costs))
                (n1, p1, c1), (n2, p2, c2) = rounds
                loop = per_message((n1, c1.get(1, 0)), (n2, c2.get(1, 0)), idle, long_s - short_s)
                others = per_message(
                    (n1, sum(v for k, v in c1.items() if k != 1)),
                    (n2, sum(v for k, v in c2.items() if k != 1)),
                )
                print(
                    f"{rate:g} msgs/s: broker loop {loop:,.0f} instructions a message, its other threads "
                    f"{others:,.0f}; pulls a message {(p2 - p1) / (n2 - n1):.2f} "
                    f"({n1:,} and {n2:,} messages; load {os.getloadavg()[0]:.1f})",
                    flush=True,
                )
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(300)


if __name__ == "__main__":
    main()
