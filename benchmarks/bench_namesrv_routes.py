"""Route lookups (GET_ROUTEINFO_BY_TOPIC) per second against a real NameServer process (target >= 20,000/s).

The NameServer runs as `mqctl namesrv start` in its own process on 127.0.0.1 with one broker group
registered (100 topics); the load comes from this process over loopback TCP:

* pipelined: one connection, `--window` requests in flight at a time;
* concurrent: `--connections` connections, each with `--window` requests in flight.

Each figure is measured twice: with a lean pipelining protocol that only counts response frames
(what the server sustains), and through `RemotingClient` (what our own tools get, client overhead
included). Both share two cores with the server, so numbers are lower bounds.

    python benchmarks/bench_namesrv_routes.py [--seconds S] [--connections N] [--window W]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import summary  # run as a script: benchmarks/ is on sys.path

from daemon.remoting.bodies import DataVersion, RegisterBrokerBody, TopicConfig, TopicConfigSerializeWrapper
from daemon.remoting.client import RemotingClient, parse_addr
from daemon.remoting.codes import RequestCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.frame import encode_command
from daemon.remoting.headers import GetRouteInfoRequestHeader, RegisterBrokerRequestHeader
from daemon.remoting.loop import run

TOPICS = [f"BenchTopic{i}" for i in range(100)]


def start_namesrv(data: Path) -> tuple[subprocess.Popen[bytes], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "mqctl", "namesrv", "start", "--listen", "127.0.0.1:0", "--data", str(data)],
        stderr=subprocess.DEVNULL,
    )
    addr_file = data / "namesrv.addr"
    deadline = time.monotonic() + 30
    while not (addr_file.exists() and addr_file.read_text().strip()):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("the NameServer did not start")
        time.sleep(0.05)
    return proc, addr_file.read_text().strip()


async def register(client: RemotingClient, addr: str) -> None:
    wrapper = TopicConfigSerializeWrapper({t: TopicConfig(t, 8, 8) for t in TOPICS}, DataVersion(1, 1))
    header = RegisterBrokerRequestHeader(
        "broker-a", "127.0.0.1:10911", "DefaultCluster", "127.0.0.1:10912", 0
    )
    cmd = RemotingCommand.request(
        RequestCode.REGISTER_BROKER, header.to_ext_fields(), RegisterBrokerBody(wrapper).encode()
    )
    await client.invoke_checked(addr, cmd)


async def load(addr: str, connections: int, window: int, seconds: float) -> float:
    """Lookups per second over `connections` connections with `window` requests in flight on each."""
    clients = [RemotingClient() for _ in range(connections)]
    done = 0
    stop_at = 0.0

    async def worker(client: RemotingClient, slot: int) -> None:
        nonlocal done
        i = slot
        while time.perf_counter() < stop_at:
            header = GetRouteInfoRequestHeader(TOPICS[i % len(TOPICS)])
            response = await client.invoke(
                addr, RemotingCommand.request(105, header.to_ext_fields()), timeout=10
            )
            if response.code != 0:
                raise SystemExit(f"lookup failed: {response.code} {response.remark}")
            done += 1
            i += window

    try:
        for client in clients:
            await client.connection(addr)
        stop_at = time.perf_counter() + 0.5  # warm-up
        await asyncio.gather(*(worker(c, s) for c in clients for s in range(window)))
        done = 0
        start = time.perf_counter()
        stop_at = start + seconds
        await asyncio.gather(*(worker(c, s) for c in clients for s in range(window)))
        return done / (time.perf_counter() - start)
    finally:
        for client in clients:
            await client.close()


class Pipeliner(asyncio.Protocol):
    """Keeps `window` lookups in flight on one connection, refilling as response frames arrive."""

    def __init__(self, window: int) -> None:
        self.window = window
        self.frames = [
            encode_command(RemotingCommand(105, opaque=i, ext_fields={"topic": t}))
            for i, t in enumerate(TOPICS)
        ]
        self.sent = 0
        self.received = 0
        self.running = True
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.send(self.window)

    def send(self, n: int) -> None:
        assert self.transport is not None
        self.transport.write(b"".join(self.frames[(self.sent + i) % len(self.frames)] for i in range(n)))
        self.sent += n

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        pos = done = 0
        while len(self.buffer) - pos >= 8:
            (length, header_len) = struct.unpack_from(">iI", self.buffer, pos)
            if len(self.buffer) - pos < 4 + length:
                break
            if b'"code":0,' not in self.buffer[pos + 8 : pos + 8 + (header_len & 0xFFFFFF)]:
                raise SystemExit("a lookup failed")
            pos += 4 + length
            done += 1
        del self.buffer[:pos]
        self.received += done
        if self.running and done:
            self.send(done)


async def lean_load(addr: str, connections: int, window: int, seconds: float) -> float:
    loop = asyncio.get_running_loop()
    host, port = parse_addr(addr)
    pairs = [await loop.create_connection(lambda: Pipeliner(window), host, port) for _ in range(connections)]
    await asyncio.sleep(0.5)  # warm-up
    start_count = sum(p.received for _, p in pairs)
    start = time.perf_counter()
    await asyncio.sleep(seconds)
    count = sum(p.received for _, p in pairs) - start_count
    elapsed = time.perf_counter() - start
    for transport, protocol in pairs:
        protocol.running = False
        transport.close()
    return count / elapsed


async def bench(addr: str, args: argparse.Namespace) -> None:
    c, w, secs = args.connections, args.window, args.seconds
    cases = [
        (f"1 connection, {w} in flight (pipelined)", 1, w),
        (f"{c} connections, {w} in flight each", c, w),
        ("1 connection, 1 in flight (latency bound)", 1, 1),
    ]
    # The registering connection stays open: closing it would unregister the broker.
    async with RemotingClient() as broker_side:
        await register(broker_side, addr)
        print(f"{'route lookups/s':45} {'lean client':>12} {'RemotingClient':>15}")
        best = 0.0
        for label, conns, window in cases:
            lean = await lean_load(addr, conns, window, secs)
            ours = await load(addr, conns, window, secs)
            print(f"{label:45} {lean:>12,.0f} {ours:>15,.0f}")
            best = max(best, lean)
    summary(__file__, f"{best:,.0f} lookups/s", f"target 20,000/s; best case, lean client, {secs:g} s each")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--window", type=int, default=64)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        proc, addr = start_namesrv(Path(tmp))
        try:
            print(
                f"NameServer pid {proc.pid} on {addr}; {os.cpu_count()} CPUs; {len(TOPICS)} topics registered"
            )
            run(bench(addr, args))
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)


if __name__ == "__main__":
    main()
