"""One DLedger member's (or a single ASYNC_MASTER's) user-space instructions per send, counted under callgrind.

This machine's guest has no hardware counters, and its load moves every CPU figure of a group's round by
a third or more; instructions per send, which no load decides, are counted by valgrind's callgrind:

    python benchmarks/tools/dledger_instructions.py --member leader|follower|single [--tree DIR]
        [--producers 16] [--seconds 20] [--idle 10] [--out DIR]

A NameServer and a 3-member group of the tree ``--tree`` run natively but for the one member measured,
which runs under ``valgrind --tool=callgrind`` with collection off: ``leader`` is n0 (every member's
``preferredLeaderId``, so the leadership comes to it once it has caught up), ``follower`` is n1 under
the native leader n0. ``single`` runs one ASYNC_MASTER under callgrind instead. This process's senders
(`bench_broker_produce.bench`) warm up, then the member's idle loop is counted over ``--idle`` seconds
(its ticks and heartbeats), then a produce round of ``--seconds``. Printed a send: the round's
instructions beyond the idle rate (rough: the idle loop's count a second follows the member's speed, so
the host's load), and the traffic's callbacks' alone (every frame read with the send's processor
in it, the leader's pushes, the committed records' dispatch, the replies' writes), with the pushes, push
rounds and answers the member took (counted calls).

A member under callgrind runs some 50 times slower, so the group's shape differs from a native one: a
measured leader holds up every send (its pushes still carry about as many sends as natively); a
measured follower falls behind the quorum the other two make, and the leader's pushes time out and
repeat what it holds: count a follower in-process instead (``bench_dledger_follower.py --server`` under
callgrind, ``--toggle-collect`` on its frame reads and its dispatch, two ``--batch`` sizes: a push's
cost and an entry's). How many sends a read or a push brings still moves with the host: compare trees
in runs side by side at the same settings, function by function where those differ. The callgrind
files (``--out``, thread 1 is the event loop) give each compiled function's inclusive count:
``callgrind_annotate --inclusive=yes FILE``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/
sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/tools/

from bench_broker_latency import namesrv_process
from bench_broker_produce import ROOT, bench, free_port, start_broker, wait_ready
from loop_instructions import callgrind_wrapper, thread_costs

from daemon.remoting.bodies import KVTable
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode
from daemon.remoting.command import RemotingCommand
from mqctl.cli.up import dledger_confs
from tests.dledger.test_group import master_of

#: the calls counted in the round, per send: a follower's pushes, the leader's push rounds and answers
COUNTED = {
    "pushes": "CPyDef_server___DLedgerServer____serve_binary",
    "push rounds": "CPyDef_server___DLedgerServer____push_now",
    "answers": "CPyDef_machines___Node___raw_push_answered",
}


def call_sites(text: str) -> Iterator[tuple[str, int, int]]:
    """Each call site of a callgrind file: (callee's name, calls, their inclusive cost), from each
    ``calls=`` line, the ``cfn=`` line above it naming the callee (a name is given once, then its ``(id)``
    alone) and the cost line after it."""
    names: dict[str, str] = {}
    callee, count = "", -1
    for line in text.splitlines():
        if count >= 0:
            fields = line.split()
            yield callee, count, int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else 0
            count = -1
        elif line.startswith(("fn=", "cfn=")):
            ref, _, given = line.split("=", 1)[1].partition(" ")
            if given:
                names[ref] = given
            if line.startswith("cfn="):
                callee = names.get(ref, "")
        elif line.startswith("calls="):
            count = int(line[6:].split()[0])


def calls(text: str, name: str) -> int:
    """How often the function ``name`` (or its recursion's ``name'N``) was called."""
    return sum(n for callee, n, _ in call_sites(text) if callee.partition("'")[0] == name)


#: the loop's callbacks that carry the traffic, none run inside another: every frame read (the sends, the
#: followers' answers), the round's pushes, the committed records' dispatch, the replies' writes (a DLedger
#: leader's, a single broker's)
TRAFFIC = (
    "CPyDef_connection___Connection___data_received",
    "CPyDef_server___DLedgerServer____push_now",
    "CPyDef_server___DLedgerServer____dispatch",
    "CPyDef_send___SendProcessor____write_replies",
    "CPyDef_connection___ReplyBatch____release",
)


def inclusive(text: str, name: str) -> int:
    """The instructions spent in the function ``name`` and what it called, summed over its calls. Unlike a
    round's total, this leaves out the loop's timers and ticks, whose count a second depends on how fast
    the member runs, so on the host's load."""
    return sum(cost for callee, _, cost in call_sites(text) if callee == name)


def _control(*args: str) -> None:
    subprocess.run(["callgrind_control", *args], capture_output=True, check=False)


def _io(pid: int) -> tuple[int, int]:
    fields = dict(line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines())
    return int(fields["syscr"]), int(fields["syscw"])


async def _leader(ns: str, want: str, seconds: float) -> None:
    """Wait until the NameServer lists ``want`` as the group's master."""
    deadline = time.monotonic() + seconds
    async with RemotingClient() as client:
        while time.monotonic() < deadline:
            try:
                if await master_of(client, ns) == want:
                    return
            except Exception:
                pass
            await asyncio.sleep(0.5)
    raise SystemExit(f"{want} did not become the master within {seconds:.0f} s")


async def _caught_up(addrs: list[str], measured: int, seconds: float) -> None:
    """Wait until the measured member holds every entry the leader (``addrs[0]``) holds, sends stopped: a
    member under callgrind starts, and catches up after a warm-up, minutes after the others."""
    deadline = time.monotonic() + seconds

    async def last(client: RemotingClient, addr: str) -> int:
        r = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), 10.0)
        return int(KVTable.loads(r.body).table.get("dledgerLastIndex", "-2"))

    async with RemotingClient() as client:
        while time.monotonic() < deadline:
            try:
                if await last(client, addrs[measured]) == await last(client, addrs[0]):
                    return
            except Exception:
                pass
            await asyncio.sleep(1.0)
    raise SystemExit(f"{addrs[measured]} did not catch up within {seconds:.0f} s")


def _start_members(
    tree: Path, root: Path, ns: str, measured: int, wrapper: list[str]
) -> tuple[list[subprocess.Popen[bytes]], list[str]]:
    confs, addrs = dledger_confs(root, "broker-a", 3, "127.0.0.1", "127.0.0.1", 0, None)
    procs = []
    env = {**os.environ, "PYTHONPATH": str(tree)}
    for i, conf in enumerate(confs):
        with conf.open("a") as f:  # (a slow member must not be voted out while it starts)
            f.write(f"namesrvAddr={ns}\npreferredLeaderId=n0\nmaxHeartBeatLeak=30\n")
        argv = [*(wrapper if i == measured else []), sys.executable, "-m", "mqctl", "broker", "start"]
        with (conf.parent / "broker.log").open("ab") as out:
            procs.append(
                subprocess.Popen([*argv, "-c", str(conf)], cwd=tree, env=env, stdout=out, stderr=out)
            )
    return procs, addrs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--member", choices=("leader", "follower", "single"), required=True)
    ap.add_argument("--tree", type=Path, default=ROOT, help="source tree of the brokers (default: this one)")
    ap.add_argument("--producers", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=20.0, help="the measured produce round")
    ap.add_argument("--idle", type=float, default=10.0, help="seconds of the idle loop counted first")
    ap.add_argument("--out", type=Path, default=None, help="keep the callgrind files here")
    args = ap.parse_args()
    tree = args.tree.resolve()
    with namesrv_process(tree) as ns, tempfile.TemporaryDirectory() as work:
        out = args.out.resolve() if args.out else Path(work)
        out.mkdir(parents=True, exist_ok=True)
        wrapper = callgrind_wrapper(out)
        if args.member == "single":
            port = free_port()
            addr = f"127.0.0.1:{port}"
            one = start_broker(
                f"{work}/single", port, "--namesrv", ns, cwd=tree, wrapper=wrapper, brokerRole="ASYNC_MASTER"
            )
            procs, pid = [one], one.pid
            target = addr
            asyncio.run(asyncio.wait_for(wait_ready(addr, time.perf_counter()), 600))
        else:
            measured = 0 if args.member == "leader" else 1
            procs, addrs = _start_members(tree, Path(work) / "group", ns, measured, wrapper)
            pid, target = procs[measured].pid, addrs[0]
            asyncio.run(_leader(ns, target, 600))
        try:
            asyncio.run(bench(target, 5.0, args.producers, warm_up_seconds=0))  # warm-up
            if args.member != "single":
                asyncio.run(_caught_up(addrs, measured, 600))
            _control("-i", "on", str(pid))
            _control("-d", "idle-start", str(pid))
            time.sleep(args.idle)
            _control("-d", "idle-end", str(pid))
            # (each dump holds what was counted since the one before: callgrind zeroes its counters)
            idle = {t: n / args.idle for t, n in thread_costs(out, pid, 2).items()}
            io0 = _io(pid)
            _control("-d", "round-start", str(pid))
            began = time.monotonic()
            result = asyncio.run(bench(target, args.seconds, args.producers, warm_up_seconds=0))
            took = time.monotonic() - began
            _control("-d", "round-end", str(pid))
            io1 = _io(pid)
            _control("-i", "off", str(pid))
            sends = max(1, result.messages)
            counted = thread_costs(out, pid, 4)
            per = {t: (n - idle.get(t, 0.0) * took) / sends for t, n in counted.items()}
            loop, rest = per.get(1, 0.0), sum(v for t, v in per.items() if t != 1)
            reads, writes = ((b - a) / sends for a, b in zip(io0, io1, strict=True))
            text = next(out.glob(f"cg.{pid}.4-01")).read_text()
            counts = ", ".join(f"{k} {calls(text, v) / sends:.3f}" for k, v in COUNTED.items())
            traffic = {name: inclusive(text, name) / sends for name in TRAFFIC}
            parts = ", ".join(f"{name.rsplit('___', 1)[1]} {n:,.0f}" for name, n in traffic.items() if n)
            print(
                f"{args.member} ({tree.name}, {args.producers} producers): {result.messages:,} sends in "
                f"{took:.1f} s; loop thread {loop:,.0f} instructions a send (idle {idle.get(1, 0):,.0f} a "
                f"second left out), other threads {rest:,.0f}; a send: {counts}, reads/writes {reads:.3f}/"
                f"{writes:.3f} (valgrind's own too); the traffic's callbacks {sum(traffic.values()):,.0f} "
                f"instructions a send ({parts}); "
                f"load {os.getloadavg()[0]:.1f}; files cg.{pid}.3/4-*",
                flush=True,
            )
        finally:
            for proc in procs:
                proc.send_signal(signal.SIGTERM)
            for proc in procs:
                try:
                    proc.wait(120)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


if __name__ == "__main__":
    main()
