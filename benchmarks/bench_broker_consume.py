"""Broker pull throughput: messages/s delivered to 4 consumers pulling 32 at a time from 8 queues.

Starts `mqctl broker start` in a subprocess on a temporary store, fills 8 queues with COUNT messages
of 1 KiB (pipelined sends), then times pulling them all back (one PULL_MESSAGE in flight per queue,
as a push consumer does). Usage: python benchmarks/bench_broker_consume.py [COUNT]
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

from bench_broker_produce import broker_process  # run as a script: benchmarks/ is on sys.path
from benchlib import summary  # run as a script: benchmarks/ is on sys.path

from daemon.broker.headers import PullMessageRequestHeader, SendMessageRequestHeaderV2
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.loop import run

QUEUES = 8
BODY = os.urandom(1024)


async def fill(addr: str, count: int) -> None:
    async with RemotingClient() as client:
        for start in range(0, count, 256):
            batch = []
            for i in range(start, min(count, start + 256)):
                h = SendMessageRequestHeaderV2("P", "PullBench", "TBW102", QUEUES, i % QUEUES, 0, 0, 0, "")
                request = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, h.to_ext_fields(), BODY)
                batch.append(client.invoke(addr, request, 10))
            for r in await asyncio.gather(*batch):
                assert r.code == ResponseCode.SUCCESS, r.remark


async def drain(addr: str, queue_id: int, client: RemotingClient) -> None:
    """Pull a queue from 0 until the broker says there is nothing more."""
    offset = 0
    while True:
        h = PullMessageRequestHeader("PullBenchG", "PullBench", queue_id, offset, 32, 4, 0, 0, 0, "*")
        r = await client.invoke(
            addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, h.to_ext_fields()), 10
        )
        if r.code != ResponseCode.SUCCESS:
            return
        offset = int(r.ext_fields["nextBeginOffset"])


async def consume(addr: str, count: int) -> float:
    clients = [RemotingClient() for _ in range(4)]
    try:
        start = time.perf_counter()
        await asyncio.gather(*(drain(addr, q, clients[q % 4]) for q in range(QUEUES)))
        return count / (time.perf_counter() - start)
    finally:
        for c in clients:
            await c.close()


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    with broker_process() as (addr, _):
        run(fill(addr, count))
        rate = run(consume(addr, count))
    summary(__file__, f"{rate:,.0f} msgs/s", f"{count:,} x 1 KiB over {QUEUES} queues, 32 per pull")


if __name__ == "__main__":
    main()
