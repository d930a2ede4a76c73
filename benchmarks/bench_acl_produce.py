"""What ACL costs a producer: `mqctl bench produce --threads 16 --size 1024` against a cluster with
aclEnable=false and one with aclEnable=true (a non-admin account with a topic permission, so every send
runs the full check: signature over header and body, then the resource rule), in the same run.

Two clusters run side by side, each a NameServer and a broker (`mqctl namesrv start`, `mqctl broker
start`) on a temporary store, one with ACL off and one with it on, and the real CLI sends to them in
rounds: a round runs both modes, in alternating order (off then on, on then off, ...), seconds apart,
so a change in the machine's speed hits both. Prints each round, the median of each mode, their ratio
and the load average.

    python benchmarks/bench_acl_produce.py [--runs 2] [--count 15000] [--rate N]

A round's on/off ratio is the least exposed to the machine's drift (on these shared machines one mode
swings 30 % between rounds: perf finds the same code, every user-space function slower alike, in the
slow phases): the median of those paired ratios is the figure to quote, next to the medians of each
mode. The broker is one loop thread that this load
saturates, so its sends/s is 1 / its CPU per send, and the CPU per send itself falls as rounds of reads
grow (it costs ~87 µs at 5,000 sends/s, ~45 at 22,000). ``--rate N`` paces both modes to N sends/s, which
holds that batching equal and leaves ACL's own CPU per send as the difference.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from bench_broker_produce import local_cluster  # run as a script: benchmarks/ is on sys.path
from benchlib import summary  # run as a script: benchmarks/ is on sys.path

from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.errors import RemotingError

ROOT = Path(__file__).resolve().parent.parent
TICK = os.sysconf("SC_CLK_TCK")
TOPIC = "BenchAcl"
ADMIN = {"MQCTL_ACCESS_KEY": "benchadmin", "MQCTL_SECRET_KEY": "bench-admin-secret"}
USER = {"MQCTL_ACCESS_KEY": "benchuser", "MQCTL_SECRET_KEY": "bench-user-secret"}
PLAIN_ACL = f"""\
accounts:
  - accessKey: benchadmin
    secretKey: bench-admin-secret
    admin: true
  - accessKey: benchuser
    secretKey: bench-user-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms: [{TOPIC}=PUB]
"""


def mqctl(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mqctl", *argv],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
    )


async def wait_up(addr: str) -> None:
    """Until the broker answers at all (with ACL on, an unsigned request is answered NO_PERMISSION)."""
    while True:
        try:
            async with RemotingClient() as client:
                await client.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), 1.0)
                return
        except RemotingError:
            await asyncio.sleep(0.05)


@contextmanager
def cluster(acl: bool) -> Iterator[tuple[str, int]]:
    with tempfile.TemporaryDirectory() as tmp:
        env = {}
        if acl:
            (Path(tmp) / "home" / "conf").mkdir(parents=True)
            (Path(tmp) / "home" / "conf" / "plain_acl.yml").write_text(PLAIN_ACL)
            env = {"MQCTL_ACL_ENABLE": "true", "MQCTL_ROCKETMQ_HOME": f"{tmp}/home"}
        with local_cluster(Path(tmp), env=env, ready=wait_up) as (ns, pid):
            for _ in range(50):  # until the broker's first registration reached the NameServer
                created = mqctl(
                    "topic", "create", "-t", TOPIC, "-w", "4", "-r", "4", "-n", ns, env=ADMIN if acl else {}
                )
                if created.returncode == 0:
                    break
                time.sleep(0.2)
            else:
                raise RuntimeError(f"topic create failed: {created.stderr.strip()}")
            time.sleep(1.0)  # the broker's registration carries the topic to the NameServer
            yield ns, pid


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def started(stack: ExitStack, acl: bool) -> tuple[str, int]:
    """A cluster in `stack`, retried twice when it does not come up (a free port taken meanwhile)."""
    for _ in range(3):
        try:
            return stack.enter_context(cluster(acl))
        except RuntimeError as exc:
            print(f"  retrying: {exc}", file=sys.stderr)
    raise SystemExit("the cluster did not come up three times")


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def bench_row(argv: list[str], env: dict[str, str], what: str) -> dict[str, Any]:
    """The JSON row of one `mqctl ARGV -o json` bench run; exits when it failed or a send did (``what``)."""
    out = mqctl(*argv, "-o", "json", env=env)
    if out.returncode:
        raise SystemExit(f"bench failed: {out.stderr}")
    row = json.loads(out.stdout)
    row = row[0] if isinstance(row, list) else row
    if row["failures"]:
        raise SystemExit(f"{row['failures']} sends failed {what}")
    return row  # type: ignore[no-any-return]


def measure(
    acl: bool, ns: str, broker_pid: int, count: int, rate: float | None
) -> tuple[float, float, float]:
    """(sends/s, broker CPU µs per send, client CPU µs per send): the CPU figures do not depend on what
    else the machine runs. The client's includes its start-up (~0.3 s) and is the same in both modes: its
    senders sign each prepared frame once and resend it, so the gap between the modes is the broker's."""
    cpu, client = cpu_seconds(broker_pid), children_cpu()
    argv = ["bench", "produce", "-t", TOPIC, "--threads", "16", "--size", "1024", "--count", str(count)]
    if rate is not None:
        argv += ["--rate", str(rate)]
    env = USER if acl else {"MQCTL_ACCESS_KEY": "", "MQCTL_SECRET_KEY": ""}
    row = bench_row([*argv, "-n", ns], env, f"with ACL {'on' if acl else 'off'}")
    broker = (cpu_seconds(broker_pid) - cpu) / count * 1e6
    return float(row["tps"]), broker, (children_cpu() - client) / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--count", type=int, default=15_000)
    parser.add_argument(
        "--rate", type=float, help="pace both modes to this many sends/s (ACL's CPU at equal load)"
    )
    args = parser.parse_args()
    figures: dict[bool, list[tuple[float, float, float]]] = {False: [], True: []}
    with ExitStack() as stack:
        clusters = {acl: started(stack, acl) for acl in (False, True)}
        for i in range(args.runs):
            for acl in (False, True) if i % 2 == 0 else (True, False):
                tps, cpu, client = measure(acl, *clusters[acl], args.count, args.rate)
                figures[acl].append((tps, cpu, client))
                print(
                    f"round {i + 1} ACL {'on ' if acl else 'off'}: {tps:,.0f} sends/s, broker {cpu:.1f} "
                    f"CPU-µs/send, client {client:.1f} (load {os.getloadavg()[0]:.2f})"
                )
    off, on = (statistics.median(t for t, _, _ in figures[m]) for m in (False, True))
    cpu_off, cpu_on = (statistics.median(c for _, c, _ in figures[m]) for m in (False, True))
    client_off, client_on = (statistics.median(c for _, _, c in figures[m]) for m in (False, True))
    paired = [b[0] / a[0] for a, b in zip(figures[False], figures[True], strict=True)]
    extra = [b[1] - a[1] for a, b in zip(figures[False], figures[True], strict=True)]
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"median ACL off {off:,.0f} sends/s, ACL on {on:,.0f} sends/s: on/off = {on / off:.1%}")
    print(
        f"on/off sends/s within each round: {', '.join(f'{r:.1%}' for r in paired)}: "
        f"median {statistics.median(paired):.1%}"
    )
    print(
        f"median broker CPU per send: off {cpu_off:.1f} µs, on {cpu_on:.1f} µs: "
        f"CPU-bound capacity on/off = {cpu_off / cpu_on:.1%}; ACL's CPU per send within each round "
        f"median {statistics.median(extra):+.1f} µs (load average {load})"
    )
    print(f"median client CPU per send: off {client_off:.1f} µs, on {client_on:.1f} µs")
    summary(
        __file__,
        f"ACL on/off {statistics.median(paired):.2f}",
        f"median of per-round ratios; off {off:,.0f}/s, on {on:,.0f}/s; {args.runs} rounds of {args.count:,}",
    )


if __name__ == "__main__":
    main()
