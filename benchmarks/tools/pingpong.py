"""The scheduler's floor under a message's round trip: two trivial processes, no broker, beside a busy loop.

What `bench_broker_tail` measures is a chain of wake-ups between two processes (its client and the broker)
beside a CPU-bound competitor. This tool runs the same chain with nothing of ours in it: a "client" process
sends a byte over a socketpair at RATE round trips a second on an absolute schedule (as the benchmark's
producer does), a "server" process spins WORK µs and answers it (the send's reply and the held pull's
answer), the client spins WORK µs on the answer and sends one more byte (the next pull), which the server
reads and spins WORK µs on: three wake-ups a message, as the broker's loop and the client's see at 1,000
msgs/s. The latency is the send's stamp to the answer's receipt, on CLOCK_MONOTONIC.

Rounds of each ARM (``--slices``: the EEVDF slice in µs of both processes, 0 the kernel's default, and
``--polls``: µs each side spins reading its socket before it blocks, 0 none), quiet and beside a
competitor (``while True: pass``, this process's session, as `bench_broker_tail` starts it), are
interleaved (quiet, busy, busy, quiet, ... and the arms in turn), so the host's drift is shared. Prints each
round's p50 / p99 / p99.9 / max and both sides' CPU, wake-ups and preemptions a message (from /proc), then
each arm's median p99.9 quiet and busy.

    python benchmarks/tools/pingpong.py [--rate 1000] [--seconds 10] [--work-us 100] [--rounds 3]
        [--slices 0,100] [--polls 0]
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from daemon.schedslice import set_loop_slice

BUSY_LOOP = "while True: pass"


def spin(us: float) -> None:
    end = time.perf_counter_ns() + int(us * 1000)
    while time.perf_counter_ns() < end:
        pass


def recv1(sock: socket.socket, poll_us: float) -> bytes:
    """One read, spinning on a non-blocking socket for ``poll_us`` µs first (0: block at once)."""
    if poll_us:
        end = time.perf_counter_ns() + int(poll_us * 1000)
        sock.setblocking(False)
        try:
            while time.perf_counter_ns() < end:
                try:
                    return sock.recv(64)
                except BlockingIOError:
                    pass
        finally:
            sock.setblocking(True)
    return sock.recv(64)


def server(sock: socket.socket, work_us: float, poll_us: float) -> None:
    """Answer each message after WORK µs, then read the client's next byte and spin on it."""
    while True:
        data = recv1(sock, poll_us)
        if not data:
            return
        for b in data:
            spin(work_us)
            if b == 0x50:  # "P": a message; "Q", its next pull, is only read
                sock.sendall(b"A")


def costs(pid: int) -> tuple[int, int, int]:
    """CPU ns, voluntary and involuntary switches of a single-threaded process."""
    with open(f"/proc/{pid}/schedstat") as f:
        cpu = int(f.read().split()[0])
    vol = inv = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("voluntary_ctxt_switches"):
                vol = int(line.split()[1])
            elif line.startswith("nonvoluntary_ctxt_switches"):
                inv = int(line.split()[1])
    return cpu, vol, inv


def one_round(rate: float, seconds: float, work_us: float, slice_us: int, poll_us: float, busy: bool) -> dict:
    ours, theirs = socket.socketpair()
    child = os.fork()
    if child == 0:  # the server
        ours.close()
        try:
            if slice_us:
                set_loop_slice(slice_us)
            server(theirs, work_us, poll_us)
        finally:
            os._exit(0)
    theirs.close()
    comp = subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) if busy else None
    try:
        if slice_us:
            set_loop_slice(slice_us)
        else:
            set_loop_slice(0)
        n = int(seconds * rate)
        warm = int(rate)  # a second's warm-up
        lat: list[float] = []
        t0 = time.monotonic_ns() + 50_000_000
        before = None
        for i in range(warm + n):
            if i == warm:
                before = costs(os.getpid()), costs(child)
            due = t0 + int(i * 1e9 / rate)
            delay = due - time.monotonic_ns()
            if delay > 0:
                time.sleep(delay / 1e9)
            sent = time.monotonic_ns()
            ours.sendall(b"P")
            recv1(ours, poll_us)
            got = time.monotonic_ns()
            spin(work_us)
            ours.sendall(b"Q")
            if i >= warm:
                lat.append((got - sent) / 1e6)
        after = costs(os.getpid()), costs(child)
    finally:
        if comp is not None:
            comp.kill()
            comp.wait()
        ours.close()
        os.waitpid(child, 0)
        set_loop_slice(0)
    assert before is not None
    sides = {}
    for name, b, a in (("client", before[0], after[0]), ("server", before[1], after[1])):
        sides[name] = ((a[0] - b[0]) / 1000 / n, (a[1] - b[1]) / n, (a[2] - b[2]) / n)
    lat.sort()
    return {"lat": lat, "sides": sides}


def pct(sorted_ms: list[float], p: float) -> float:
    return sorted_ms[min(len(sorted_ms) - 1, int(len(sorted_ms) * p / 100))]


def ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",")]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=1000.0, help="messages a second")
    ap.add_argument("--seconds", type=float, default=10.0, help="a round's length after its 1 s warm-up")
    ap.add_argument("--work-us", type=float, default=100.0, help="µs each side spins on each byte")
    ap.add_argument("--rounds", type=int, default=3, help="pairs of rounds (quiet, busy) per arm")
    ap.add_argument("--slices", type=ints, default=[0, 100], help="arms: EEVDF slice of both sides, µs")
    ap.add_argument("--polls", type=ints, default=[0], help="arms: µs of polling before a blocking read")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    arms = [(s, p) for s in args.slices for p in args.polls]
    p999: dict[tuple[int, int], dict[str, list[float]]] = {a: {"quiet": [], "busy": []} for a in arms}
    loads = []
    for r in range(args.rounds):
        for k, (slice_us, poll_us) in enumerate(arms):
            for mode in ("quiet", "busy") if (r + k) % 2 == 0 else ("busy", "quiet"):
                out = one_round(args.rate, args.seconds, args.work_us, slice_us, poll_us, mode == "busy")
                loads.append(os.getloadavg()[0])
                lat = out["lat"]
                p999[(slice_us, poll_us)][mode].append(pct(lat, 99.9))
                sides = "; ".join(
                    f"{name} {cpu:.0f} µs, {vol:.2f} wake-ups, {inv:.2f} preemptions"
                    for name, (cpu, vol, inv) in out["sides"].items()
                )
                print(
                    f"round {r + 1} slice {slice_us} poll {poll_us} {mode}: p50 {pct(lat, 50):.3f} p99 "
                    f"{pct(lat, 99):.3f} p99.9 {pct(lat, 99.9):.3f} max {lat[-1]:.2f} ms; a message: {sides}; "
                    f"load {loads[-1]:.1f}",
                    flush=True,
                )
    for (slice_us, poll_us), modes in p999.items():
        quiet, busy = statistics.median(modes["quiet"]), statistics.median(modes["busy"])
        print(
            f"slice {slice_us} µs, poll {poll_us} µs: median p99.9 quiet {quiet:.3f} ms "
            f"({', '.join(f'{v:.2f}' for v in modes['quiet'])}), busy {busy:.3f} ms "
            f"({', '.join(f'{v:.2f}' for v in modes['busy'])}), busy/quiet {busy / quiet:.2f}"
        )
    print(f"load {min(loads):.1f}-{max(loads):.1f}; {args.work_us:g} µs a side, {args.rate:g} msgs/s")


if __name__ == "__main__":
    main()
