"""`mqctl bench produce`'s senders as a timed load for benchmarks/tools/bench_ab.py.

`mqctl_load.py NAMESRV TOPIC THREADS SECONDS`: THREADS synchronous senders, each on its own connection with
one SEND_MESSAGE_V2 of a 1 KiB body in flight, round-robin over the topic's writable queues; 1 s warm-up,
then SECONDS timed. Prints "start" when the timed window opens and one JSON line when it closes, as
ons_bench.js does: {count, failures, seconds, clientCpu (share of one core), p50Ms, p99Ms}.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import sys
import time

from loadline import load_line  # run as a script: benchmarks/tools/ is on sys.path

from daemon.remoting.loop import run
from mqctl.admin.client import Admin
from mqctl.services.bench import Run, send_frame, sender, split_frame
from mqctl.services.messages import writable_queues

BODY = os.urandom(1024)


async def load(namesrv: str, topic: str, threads: int, seconds: float) -> dict[str, float]:
    async with Admin([namesrv]) as admin:
        refs = await writable_queues(admin, topic)
    sends = [(ref.addr, *split_frame(send_frame(topic, ref.queue_id, BODY), BODY), None) for ref in refs]

    async def until(run: Run, i: int) -> None:
        await sender(itertools.cycle(sends[i % len(sends) :] + sends[: i % len(sends)]), run)

    warm_up = Run()
    warm_up.deadline = warm_up.started + 1.0
    await asyncio.gather(*(until(warm_up, i) for i in range(threads)))
    print("start", flush=True)
    cpu = time.process_time()
    timed = Run()
    timed.deadline = timed.started + seconds
    await asyncio.gather(*(until(timed, i) for i in range(threads)))
    elapsed = time.perf_counter() - timed.started
    rts_ms = [rt * 1000 for rt in timed.rts]
    return load_line(rts_ms, timed.failures, elapsed, time.process_time() - cpu)


if __name__ == "__main__":
    print(json.dumps(run(load(sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])))), flush=True)
