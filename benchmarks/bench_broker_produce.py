"""Broker send throughput and start-up time: 16 concurrent synchronous producers, 1 KiB bodies.

Starts `mqctl broker start` in a subprocess on a temporary store (so the load generator does not share
the broker's event loop), waits for it to answer, then runs 16 producers, each with its own connection
and one SEND_MESSAGE_V2 in flight at a time (like 16 producer threads calling `send()`), for DURATION s.
Prints start-up time and sends/s.  Usage: python benchmarks/bench_broker_produce.py [DURATION] [PRODUCERS]
(`MQCTL_FLUSH_DISK_TYPE=SYNC_FLUSH` in the environment measures group commit instead).
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from daemon.broker.headers import SendMessageRequestHeaderV2
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.frame import decode_frame, encode_command
from daemon.remoting.loop import run

ROOT = Path(__file__).resolve().parent.parent
BODY = os.urandom(1024)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def wait_ready(addr: str, started: float) -> float:
    while True:
        try:
            async with RemotingClient() as client:
                r = await client.invoke(
                    addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), 1.0
                )
                if r.code == ResponseCode.SUCCESS:
                    return time.perf_counter() - started
        except Exception:
            await asyncio.sleep(0.01)


async def producer(addr: str, deadline: float, n: int) -> int:
    """One synchronous producer on its own connection. Frames are pre-encoded and responses only
    length-parsed, so the load generator spends little CPU and the figure is the broker's."""
    host, port = addr.split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    header = SendMessageRequestHeaderV2(
        "BenchPG", "BenchTopic", "TBW102", 8, n % 8, 0, int(time.time() * 1000), 0, "WAIT\x01true"
    )
    frame = encode_command(RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, header.to_ext_fields(), BODY))
    sent = 0
    try:
        while time.perf_counter() < deadline:
            writer.write(frame)
            (length,) = struct.unpack(">i", await reader.readexactly(4))
            response, _ = decode_frame(struct.pack(">i", length) + await reader.readexactly(length), 0) or (
                None,
                0,
            )
            if response is None or response.code != ResponseCode.SUCCESS:
                raise RuntimeError(f"send failed: {response}")
            sent += 1
    finally:
        writer.close()
    return sent


async def bench(addr: str, duration: float, producers: int) -> float:
    warm = time.perf_counter() + 1.0
    await asyncio.gather(*(producer(addr, warm, n) for n in range(producers)))
    start = time.perf_counter()
    counts = await asyncio.gather(*(producer(addr, start + duration, n) for n in range(producers)))
    return sum(counts) / (time.perf_counter() - start)


def main() -> None:
    duration = float(sys.argv[1]) if len(sys.argv) > 1 else 10.0
    producers = int(sys.argv[2]) if len(sys.argv) > 2 else 16
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        addr = f"127.0.0.1:{port}"
        argv = [
            sys.executable,
            "-m",
            "mqctl",
            "broker",
            "start",
            "--store",
            f"{tmp}/store",
            "--port",
            str(port),
            "--no-metrics",
        ]
        started = time.perf_counter()
        proc = subprocess.Popen(
            argv, cwd=ROOT, stderr=subprocess.DEVNULL, env={**os.environ, "MQCTL_BROKER_IP1": "127.0.0.1"}
        )
        try:
            ready = run(wait_ready(addr, started))
            rate = run(bench(addr, duration, producers))
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
    flush = os.environ.get("MQCTL_FLUSH_DISK_TYPE", "ASYNC_FLUSH")
    print(f"broker start-up (process start to first answer, empty store): {ready:.2f} s")
    print(f"produce: {rate:,.0f} sends/s ({producers} producers, 1 KiB bodies, {flush}, {duration:g} s)")


if __name__ == "__main__":
    main()
