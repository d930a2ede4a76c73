"""The official RocketMQ C++ client's send load for benchmarks/tools/bench_ab.py (run with .venv-interop's Python).

`cpp_bench.py NAMESRV TOPIC THREADS SECONDS`: THREADS threads share one Producer, each calling `send_sync`
of a 1 KiB body in turn (RocketMQ's benchmark Producer with N threads); 1 s warm-up, then SECONDS timed.
Prints "start" when the timed window opens and one JSON line when it closes, as ons_bench.js does:
{count, failures, seconds, clientCpu (share of one core), p50Ms, p99Ms}.
"""

from __future__ import annotations

import json
import sys
import threading
import time

from loadline import load_line  # run as a script: benchmarks/tools/ is on sys.path
from rocketmq.client import Message, Producer, SendStatus

BODY = b"x" * 1024


def main(namesrv: str, topic: str, threads: int, seconds: float) -> None:
    producer = Producer("MQCTL_CPP_BENCH")
    producer.set_namesrv_addr(namesrv)
    producer.start()
    lock = threading.Lock()

    def loop(deadline: float, rts: list[float], failed: list[int]) -> None:
        local: list[float] = []
        failures = 0
        while time.monotonic() < deadline:
            msg = Message(topic)
            msg.set_tags("bench")
            msg.set_body(BODY)
            begun = time.perf_counter()
            try:
                ok = producer.send_sync(msg).status == SendStatus.OK
            except Exception:
                ok = False
            local.append((time.perf_counter() - begun) * 1000)
            failures += not ok
        with lock:
            rts.extend(local)
            failed.append(failures)

    def run(duration: float) -> tuple[list[float], int]:
        rts: list[float] = []
        failed: list[int] = []
        deadline = time.monotonic() + duration
        workers = [threading.Thread(target=loop, args=(deadline, rts, failed)) for _ in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        return rts, sum(failed)

    try:
        run(1.0)
        print("start", flush=True)
        wall, cpu = time.perf_counter(), time.process_time()
        rts, failures = run(seconds)
        elapsed = time.perf_counter() - wall
        print(json.dumps(load_line(rts, failures, elapsed, time.process_time() - cpu)), flush=True)
    finally:
        producer.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
