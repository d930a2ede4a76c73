"""What TLS costs a producer: `mqctl bench produce --threads 16 --size 1024` over TLS and in plaintext,
against the same broker, in the same run.

One NameServer and one broker (`mqctl namesrv start`, `mqctl broker start`) run with
`tls.server.mode=permissive` on a certificate `mqctl tls init` wrote, so one listener serves both modes
and the broker process is the same for both. The real CLI sends to it in rounds: a round runs both
modes, in alternating order (plain then TLS, TLS then plain, ...), so a change in the machine's speed
hits both. Prints each round, the median of each mode, the median of the per-round TLS/plain ratios
(the figure to quote: the least exposed to the machine's drift), the broker's CPU per send each way
and the load average; the last line is the one comparable summary.

    python benchmarks/bench_tls_produce.py [--runs 3] [--count 40000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench_acl_produce import (
    bench_row,
    children_cpu,
    cpu_seconds,
    mqctl,
)  # run as a script: benchmarks/ is on sys.path
from bench_broker_produce import local_cluster
from benchlib import summary

from daemon.remoting.tls import write_local_ca

TOPIC = "BenchTls"


def measure(tls: list[str], ns: str, broker_pid: int, count: int) -> tuple[float, float, float]:
    """(sends/s, broker CPU µs per send, client CPU µs per send) of one `mqctl bench produce` run; ``tls``
    are its TLS flags. The client's includes its start-up (~0.3 s), alike in both modes."""
    cpu, client = cpu_seconds(broker_pid), children_cpu()
    argv = ["bench", "produce", "-t", TOPIC, "--threads", "16", "--size", "1024", "--count", str(count)]
    row = bench_row([*tls, *argv, "-n", ns], {}, "over TLS" if tls else "in plaintext")
    broker = (cpu_seconds(broker_pid) - cpu) / count * 1e6
    return float(row["tps"]), broker, (children_cpu() - client) / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--count", type=int, default=40_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        certs = write_local_ca(Path(tmp) / "tls")
        keys = {
            "TLS_SERVER_MODE": "permissive",
            "TLS_SERVER_CERT_PATH": str(certs["server_cert"]),
            "TLS_SERVER_KEY_PATH": str(certs["server_key"]),
            "TLS_TEST_MODE_ENABLE": "false",
        }  # the broker's MQCTL_ variables, the NameServer's MQCTL_NAMESRV_ ones
        env = {f"{prefix}{k}": v for prefix in ("MQCTL_", "MQCTL_NAMESRV_") for k, v in keys.items()}
        modes = {"plain": [], "tls": ["--ca", str(certs["ca"])]}
        figures: dict[str, list[tuple[float, float, float]]] = {m: [] for m in modes}
        with local_cluster(Path(tmp), env=env) as (ns, pid):
            for _ in range(50):  # until the broker's first registration reached the NameServer
                if (
                    mqctl("topic", "create", "-t", TOPIC, "-w", "4", "-r", "4", "-n", ns, env={}).returncode
                    == 0
                ):
                    break
                time.sleep(0.2)
            time.sleep(1.0)  # the broker's registration carries the topic to the NameServer
            for i in range(args.runs):
                for mode in ("plain", "tls") if i % 2 == 0 else ("tls", "plain"):
                    tps, cpu, client = measure(modes[mode], ns, pid, args.count)
                    figures[mode].append((tps, cpu, client))
                    print(
                        f"round {i + 1} {mode:5}: {tps:,.0f} sends/s, broker {cpu:.1f} CPU-µs/send, "
                        f"client {client:.1f} (load {os.getloadavg()[0]:.2f})",
                        file=sys.stderr,
                    )
    plain, tls = (statistics.median(t for t, _, _ in figures[m]) for m in modes)
    cpu_plain, cpu_tls = (statistics.median(c for _, c, _ in figures[m]) for m in modes)
    client_plain, client_tls = (statistics.median(c for _, _, c in figures[m]) for m in modes)
    paired = statistics.median(b[0] / a[0] for a, b in zip(figures["plain"], figures["tls"], strict=True))
    summary(
        __file__,
        f"tls/plain sends/s {paired:.1%}",
        f"median of {args.runs} paired rounds; medians {tls:,.0f} / {plain:,.0f} sends/s; broker CPU per send "
        f"tls {cpu_tls:.1f} µs, plain {cpu_plain:.1f} µs; client tls {client_tls:.1f}, plain {client_plain:.1f}",
    )


if __name__ == "__main__":
    main()
