"""``bench_dledger``'s produce rounds against brokers this tool did not start: sends/s and CPU per send.

    python benchmarks/tools/produce_external.py --side NAME=ADDR[@PID,PID...] [--side ...]
                                                [--seconds 5] [--producers 16] [--rounds 3]

Each ``--side`` names a broker already running (any RocketMQ 4.x remoting broker: ours, or a real 4.9.8
single broker or DLedger group's leader) and the processes whose CPU counts for it (a group's members).
Each round runs every side in turn, the order reversed every other round (A, B, then B, A), so the
machine's drift is not charged to one side: ``bench_broker_produce``'s senders (``mqctl bench produce``'s,
each with its own connection and one SEND_MESSAGE_V2 of 1 KiB to ``BenchTopic`` in flight) for a 1 s
warm-up, then ``--seconds``; the user + system CPU of each PID (``/proc/PID/stat``) over the warm-up and the
round, divided by the round's sends, as ``bench_dledger`` counts its members. A long-lived broker (a JVM
warming up) is best given a round or two first, unrecorded. Prints each side's round with the load
average, then each side's median sends/s and CPU per send, and its median ratio to the first side.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the goal benchmarks' harness
from bench_ali_ons import cpu_seconds
from bench_broker_produce import bench

from daemon.remoting.loop import run


@dataclass
class Side:
    name: str
    addr: str
    pids: list[int]
    tps: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)  # seconds per send, all pids summed


def side(text: str) -> Side:
    """``NAME=HOST:PORT[@PID,PID...]``."""
    name, sep, rest = text.partition("=")
    addr, _, pids = rest.partition("@")
    host, colon, port = addr.rpartition(":")
    if not sep or not name or not host or not colon or not port.isdigit():
        raise argparse.ArgumentTypeError(f"a side is NAME=HOST:PORT[@PID,PID...], not {text!r}")
    try:
        numbers = [int(p) for p in pids.split(",")] if pids else []
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: the pids are numbers, comma-separated") from None
    for pid in numbers:
        if not Path(f"/proc/{pid}").exists():
            raise argparse.ArgumentTypeError(f"{text!r}: no process {pid}")
    return Side(name, addr, numbers)


def one_round(s: Side, seconds: float, producers: int) -> str:
    load0 = os.getloadavg()[0]
    cpu0 = [cpu_seconds(p) for p in s.pids]
    result = run(bench(s.addr, seconds, producers))
    cpu = [cpu_seconds(p) - c for p, c in zip(s.pids, cpu0, strict=True)]
    sends = max(1, result.messages)
    s.tps.append(result.tps)
    s.cpu.append(sum(cpu) / sends)
    each = " + ".join(f"{c / sends * 1e6:.0f}" for c in cpu)
    return (
        f"{s.name}: {result.tps:,.0f} sends/s, {result.failures} failures, "
        f"CPU per send {s.cpu[-1] * 1e6:.0f} µs{f' ({each})' if len(cpu) > 1 else ''}, "
        f"load {load0:.1f}-{os.getloadavg()[0]:.1f}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--side", type=side, action="append", required=True, help="NAME=HOST:PORT[@PID,...]")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--producers", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    sides: list[Side] = args.side
    for r in range(args.rounds):
        for s in sides if r % 2 == 0 else sides[::-1]:
            print(f"round {r}: {one_round(s, args.seconds, args.producers)}", flush=True)
    first = sides[0]
    for s in sides:
        ratio = statistics.median(t / f for t, f in zip(s.tps, first.tps, strict=True) if f > 0)
        print(
            f"{s.name}: median {statistics.median(s.tps):,.0f} sends/s, "
            f"CPU per send {statistics.median(s.cpu) * 1e6:.0f} µs, {ratio:.0%} of {first.name}"
        )


if __name__ == "__main__":
    main()
