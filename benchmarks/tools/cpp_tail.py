"""The official RocketMQ C++ client's producer and push consumer for ``bench_broker_tail.py --client cpp-py``
(run with .venv-interop's Python, whose PyPI ``rocketmq`` 0.4.4 wraps the client's librocketmq.so).

`cpp_tail.py NAMESRV TOPIC GROUP QUEUES RATE COUNT WARM_UP`: a Producer and a PushConsumer (GROUP, new,
subscribed to TOPIC's QUEUES queues) in this one process, as an application holds them (the client shares
one connection per broker between them). It sends probes until the consumer has received one from every
queue (the rebalance is done and every queue's pull is parked), prints "start", then sends COUNT messages of
1 KiB at RATE msgs/s on an absolute schedule (message i is due at t0 + i/RATE), each asynchronously so a
slow reply holds back no later send, each stamped with ``time.monotonic_ns()`` in a user property just
before it goes out; the consumer's callback stamps its receipt on the same clock first thing. Once all are
in (or 30 s after the last send) it prints one JSON line: ``{sent, received, failures, latenciesMs,
sentNs}``, the last two for the messages from index WARM_UP on, and shuts down once its standard input
closes (the caller reads the process's costs from /proc before that). The protocol is ons_bench.js's
``tail``.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time

from rocketmq.client import Message, Producer, PushConsumer

SENT = "benchSent"  # "<index> <CLOCK_MONOTONIC ns at send start>", as bench_broker_latency's property
BODY = b"x" * 1024  # the binding passes the body as a C string: no NUL in it


def main(namesrv: str, topic: str, group: str, queues: int, rate: float, count: int, warm_up: int) -> None:
    lock = threading.Lock()
    probed: set[int] = set()
    latencies_ms: list[float] = []
    sent_ns: list[int] = []
    received = [0]
    failures = [0]
    all_in = threading.Event()

    def on_message(msg: object) -> None:
        now = time.monotonic_ns()
        index, sent = map(int, msg.get_property(SENT).split())  # type: ignore[attr-defined]
        with lock:
            if index < 0:
                probed.add(msg.queue_id)  # type: ignore[attr-defined]
                return
            if index >= warm_up:
                latencies_ms.append((now - sent) / 1e6)
                sent_ns.append(sent)
            received[0] += 1
            if received[0] + failures[0] >= count:
                all_in.set()

    def failed(error: Exception) -> None:
        with lock:
            if not failures[0]:
                print(f"cpp_tail: a send failed: {error}", file=sys.stderr, flush=True)
            failures[0] += 1
            if received[0] + failures[0] >= count:
                all_in.set()

    consumer = PushConsumer(group)
    consumer.set_namesrv_addr(namesrv)
    consumer.subscribe(topic, on_message)
    producer = Producer("MQCTL_CPP_TAIL")
    producer.set_namesrv_addr(namesrv)
    consumer.start()
    producer.start()

    def message(index: int) -> Message:
        msg = Message(topic)
        msg.set_body(BODY)
        msg.set_property(SENT, f"{index} {time.monotonic_ns()}")
        return msg

    try:
        deadline = time.monotonic() + 60
        while len(probed) < queues:  # the client's first sends may fail before its route is in: retried
            if time.monotonic() > deadline:
                raise SystemExit(
                    f"cpp_tail: the consumer received probes from {len(probed)} of {queues} queues"
                )
            with contextlib.suppress(Exception):
                producer.send_sync(message(-1))
            time.sleep(0.02)
        print("start", flush=True)
        t0 = time.monotonic() + 0.1
        for i in range(count):
            delay = t0 + i / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            producer.send_async(message(i), None, failed)
        all_in.wait(30)
        with lock:
            line = {
                "sent": count,
                "received": received[0],
                "failures": failures[0],
                "latenciesMs": latencies_ms,
                "sentNs": sent_ns,
            }
        print(json.dumps(line), flush=True)
        sys.stdin.readline()  # the caller reads this process's costs from /proc before its threads end
    finally:
        producer.shutdown()
        consumer.shutdown()


if __name__ == "__main__":
    a = sys.argv[1:]
    main(a[0], a[1], a[2], int(a[3]), float(a[4]), int(a[5]), int(a[6]))
