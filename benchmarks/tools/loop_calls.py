"""Interpreted Python calls per message on the broker's event loop: the lone message's path, counted.

The broker of a source tree runs natively (compiled, as it serves) in a subprocess started through this
file, which installs two signal handlers in it before `mqctl broker start` runs: SIGUSR1 puts a
``sys.setprofile`` counter on the main thread (the event loop's), SIGUSR2 takes it off and writes what it
counted to a file. A NameServer and this process's client (`bench_broker_latency.bench`: one producer at a
fixed rate, one consumer long-polling each queue of a new 4-queue topic) run natively too. For each rate
two rounds of different lengths are counted; every round pays the same set-up (its topic, its route, the
consumer's first pulls), so the difference of the two rounds over the difference of their messages is
what one more message costs:

    python benchmarks/tools/loop_calls.py [--tree DIR] [--rates 50,3000] [--seconds 4,16] [--idle 10] [--top 25]

The loop's own timers (the delay levels' polls, the lag sampler, the stats tick) are counted first over
``--idle`` seconds with no traffic, and their calls over the rounds' difference in length left out.

At 50 msgs/s a message arrives alone (a send, the held pull's answer and the next pull's parking: the
line's pulls a message say so, ~1); at 3,000 the consumer's pulls carry many messages each. Each line
gives the loop's interpreted calls (Python functions entered: ``call`` events) and C calls from Python
(``c_call``: builtins and compiled modules called from interpreted code) a message, then the functions
that account for the lone rate's calls. Calls made from compiled code to compiled code are not seen: a
count is of what the interpreter runs, which is what a cold loop turn pays most per call. Counts do not
depend on the host's load; run a tree's `--tree` and this one's side by side to compare.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

OUT_VAR = "MQCTL_LOOP_CALLS_OUT"


def _hook() -> None:
    """In the broker's process: install the handlers, then run ``python -m mqctl ...`` as it was given."""
    calls: Counter[str] = Counter()
    c_calls: Counter[str] = Counter()

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            code = frame.f_code
            calls[f"{Path(code.co_filename).name}:{code.co_qualname}"] += 1
        elif event == "c_call":
            c_calls[getattr(arg, "__qualname__", None) or repr(arg)] += 1

    def on(_signum: int, _frame: object) -> None:
        calls.clear()
        c_calls.clear()
        sys.setprofile(profile)

    def off(_signum: int, _frame: object) -> None:
        sys.setprofile(None)
        path = os.environ[OUT_VAR]
        Path(path + ".tmp").write_text(json.dumps({"calls": calls, "c_calls": c_calls}))
        os.replace(path + ".tmp", path)

    signal.signal(signal.SIGUSR1, on)
    signal.signal(signal.SIGUSR2, off)
    # argv: this file, python, -m, mqctl, broker, start, ...
    rest = sys.argv[sys.argv.index("-m") + 2 :]
    sys.argv = ["mqctl", *rest]
    sys.path[0] = os.getcwd()  # the tree whose broker runs, as `python -m` from it would
    runpy.run_module("mqctl", run_name="__main__", alter_sys=True)


def _counted(proc: subprocess.Popen[bytes], out: Path, body: Any) -> tuple[Any, dict[str, Counter[str]]]:
    """Run ``body()`` with the broker's counter on; returns its result and the counts."""
    out.unlink(missing_ok=True)
    proc.send_signal(signal.SIGUSR1)
    time.sleep(0.2)  # the handler runs when the loop next runs Python: an idle loop's timers do soon
    result = body()
    proc.send_signal(signal.SIGUSR2)
    deadline = time.monotonic() + 30
    while not out.exists():
        if time.monotonic() > deadline:
            raise RuntimeError("the broker wrote no counts")
        time.sleep(0.05)
    counts = json.loads(out.read_text())
    return result, {k: Counter(v) for k, v in counts.items()}


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # benchmarks/
    from bench_broker_latency import bench, namesrv_process
    from bench_broker_produce import free_port, start_broker, wait_ready
    from loop_instructions import parse_rounds

    from daemon.remoting.loop import run

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--top", type=int, default=25, help="functions listed for the first rate")
    args, rates, short_s, long_s, tree = parse_rounds(ap, "50,3000", 10.0, "4,16")
    with namesrv_process(tree) as namesrv, tempfile.TemporaryDirectory() as work:
        out = Path(work) / "counts.json"
        port = free_port()
        addr = f"127.0.0.1:{port}"
        os.environ[OUT_VAR] = str(out)
        proc = start_broker(
            f"{work}/store", port, "--namesrv", namesrv, cwd=tree, wrapper=[sys.executable, __file__]
        )
        try:
            run(wait_ready(addr, time.perf_counter()))
            _, idle = _counted(proc, out, lambda: time.sleep(args.idle))
            part = 0
            for n, rate in enumerate(rates):
                rounds = []
                for seconds in (short_s, long_s):
                    part += 1
                    topic = f"LoopCalls{part}"
                    result, counts = _counted(
                        proc, out, lambda s=seconds, t=topic, r=rate: run(bench(namesrv, addr, s, r, t))
                    )
                    rounds.append((result.sent, result.pulls, counts))
                (n1, p1, c1), (n2, p2, c2) = rounds
                spare = (long_s - short_s) / args.idle  # the idle counts the long round had more of
                per = {
                    kind: {
                        k: (c2[kind][k] - c1[kind].get(k, 0) - idle[kind].get(k, 0) * spare) / (n2 - n1)
                        for k in c2[kind]
                    }
                    for kind in ("calls", "c_calls")
                }
                print(
                    f"{rate:g} msgs/s: {sum(per['calls'].values()):.1f} interpreted calls a message, "
                    f"{sum(per['c_calls'].values()):.1f} C calls from Python; pulls a message "
                    f"{(p2 - p1) / (n2 - n1):.2f} ({n1:,} and {n2:,} messages; load {os.getloadavg()[0]:.1f})",
                    flush=True,
                )
                if n == 0 and args.top:
                    for kind in ("calls", "c_calls"):
                        ranked = sorted(per[kind].items(), key=lambda kv: -kv[1])[: args.top]
                        for name, value in ranked:
                            if abs(value) >= 0.05:
                                print(f"    {kind:7} {value:6.2f}  {name}")
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)


if __name__ == "__main__":
    if os.environ.get(OUT_VAR) and len(sys.argv) > 2 and sys.argv[2] == "-m":
        _hook()
    else:
        main()
