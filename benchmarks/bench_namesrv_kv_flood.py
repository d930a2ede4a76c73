"""Route lookup latency (GET_ROUTEINFO_BY_TOPIC, p50/p99) while a client floods PUT_KV_CONFIG.

The NameServer runs as `mqctl namesrv start` in its own process on 127.0.0.1 with one broker group
registered. One connection sends lookups one at a time and times each; another keeps `--window`
puts in flight. Two floods:

* over the caps: `--puts` values of 64 KiB into one namespace (what took lookups to p99 1.4 s when
  every put rewrote kvConfig.json on the event loop; capped puts are now refused);
* within the caps: 60 KiB values spread over 8 namespaces, 11 MiB in all, every put accepted and
  written: what remains is the cost of the writes themselves.

    python benchmarks/bench_namesrv_kv_flood.py [--puts N] [--window W]
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench_namesrv_routes import TOPICS, register, start_namesrv
from benchlib import summary  # run as a script: benchmarks/ is on sys.path

from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.loop import run


async def flood(addr: str, puts: list[tuple[str, str, str]], window: int) -> tuple[int, int, float]:
    """Send `puts` with `window` in flight; (accepted, refused, seconds)."""
    accepted = refused = 0
    queue = list(reversed(puts))
    start = time.perf_counter()

    async def worker(client: RemotingClient) -> None:
        nonlocal accepted, refused
        while queue:
            ns, key, value = queue.pop()
            fields = {"namespace": ns, "key": key, "value": value}
            response = await client.invoke(
                addr, RemotingCommand.request(RequestCode.PUT_KV_CONFIG, fields), timeout=60
            )
            if response.code == 0:
                accepted += 1
            else:
                refused += 1

    async with RemotingClient() as client:
        await asyncio.gather(*(worker(client) for _ in range(window)))
    return accepted, refused, time.perf_counter() - start


async def lookups_during(addr: str, flooding: asyncio.Task[tuple[int, int, float]]) -> list[float]:
    """Milliseconds of each lookup made while `flooding` runs."""
    latencies = []
    async with RemotingClient() as client:
        i = 0
        while not flooding.done():
            fields = {"topic": TOPICS[i % len(TOPICS)]}
            start = time.perf_counter()
            response = await client.invoke(
                addr, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, fields), timeout=60
            )
            latencies.append((time.perf_counter() - start) * 1000)
            if response.code != 0:
                raise SystemExit(f"lookup failed: {response.code} {response.remark}")
            i += 1
    return latencies


def p(latencies: list[float], q: int) -> float:
    return statistics.quantiles(latencies, n=100)[q - 1] if len(latencies) > 1 else latencies[0]


async def bench(addr: str, args: argparse.Namespace) -> None:
    big = "x" * 64 * 1024
    within = "y" * 60 * 1024
    cases = [
        ("64 KiB values, one namespace", [("FLOOD", str(i), big) for i in range(args.puts)]),
        ("60 KiB values, 8 namespaces, 11 MiB", [(f"NS{i % 8}", str(i), within) for i in range(180)]),
    ]
    async with RemotingClient() as broker_side:  # stays open: closing it would unregister the broker
        await register(broker_side, addr)
        print(
            f"{'flood':38} {'puts ok/refused':>16} {'flood s':>8} {'lookups':>8} {'p50 ms':>8} {'p99 ms':>8}"
        )
        worst = 0.0
        for label, puts in cases:
            flooding = asyncio.create_task(flood(addr, puts, args.window))
            latencies = await lookups_during(addr, flooding)
            accepted, refused, seconds = await flooding
            print(
                f"{label:38} {f'{accepted}/{refused}':>16} {seconds:>8.2f} {len(latencies):>8} "
                f"{p(latencies, 50):>8.1f} {p(latencies, 99):>8.1f}"
            )
            worst = max(worst, p(latencies, 99))
    summary(__file__, f"lookup p99 {worst:.1f} ms", "the worse of the two floods")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--puts", type=int, default=300)
    parser.add_argument("--window", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        proc, addr = start_namesrv(Path(tmp))
        try:
            print(f"NameServer pid {proc.pid} on {addr}", file=sys.stderr)
            run(bench(addr, args))
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)


if __name__ == "__main__":
    main()
