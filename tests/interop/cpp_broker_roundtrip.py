"""Produce and push-consume with the official RocketMQ C++ client (PyPI `rocketmq==0.4.4`).

Run with the interop venv's Python: `cpp_broker_roundtrip.py NAMESRV TOPIC GROUP COUNT TIMEOUT_S [PHASES]`.
The topic does not exist yet, so the first send goes through the broker's TBW102 auto-creation.
PHASES is `produce,consume` (the default), or one of them, for a test that changes the cluster between
the two (a master stopped: the consumer must find the slave). Prints one JSON object: the send results
and what the push consumer received. `CPP_TIMER_DELAY_MS` in the environment makes every message a timer
message (property `TIMER_DELAY_MS`).

The producer sends nothing before the client's first heartbeat tick has run. That timer fires 10 ms after
the client's scheduling thread starts (`MQClientFactory::startScheduledTask`), and connects to every broker
its route table holds while it holds the lock of its connection table (`TcpRemotingClient::CreateTransport`);
a send that wants that lock meanwhile gives up at once in this build (its `try_lock_for` does not wait), and
after its retries, all within a millisecond, it throws "No route info of this topic". A first route that
arrives just before that tick loses the first send. A fixed wait only bets on when the thread runs (a loaded
host starts it late), so the producer waits for the tick's own line in the client's log ("sendheartbeat
brokeradd is empty": it found no broker to connect to); the next tick is 30 s away. On failure the client's
own log's errors go to stderr: they say which of its locks or connections failed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import threading
import time
import traceback
from pathlib import Path

from interop_deadline import arm, step
from rocketmq.client import Message, Producer, PushConsumer

#: What the client logs at each heartbeat while its route table names no broker: once from ``start`` itself,
#: then at the timer's first tick.
EMPTY_HEARTBEAT = "sendheartbeat brokeradd is empty"
PRODUCER_GROUP = "MQCTL_CPP_PRODUCER"


def body(i: int) -> bytes:
    return (f"cpp-{i}-".encode() * (1 + i % 50))[: 10 + i * 20]


def main(
    namesrv: str, topic: str, group: str, count: int, timeout: float, phases: str = "produce,consume"
) -> int:
    sent = produce(namesrv, topic, count) if "produce" in phases else []
    received = consume(namesrv, topic, group, count, timeout) if "consume" in phases else {}
    expected = {f"key-{i}": hashlib.sha1(body(i)).hexdigest() for i in range(count)}
    print(json.dumps({"sent": sent, "received": received, "expected": expected}))
    return 0


def produce(namesrv: str, topic: str, count: int) -> list[dict[str, object]]:
    producer = Producer(PRODUCER_GROUP)
    producer.set_namesrv_addr(namesrv)
    if os.environ.get("CPP_ACCESS_KEY"):  # ACL: sign every request (the client's set_session_credentials)
        producer.set_session_credentials(os.environ["CPP_ACCESS_KEY"], os.environ["CPP_SECRET_KEY"], "ALIYUN")
    step("producer.start")
    producer.start()
    step("waiting for the producer's first heartbeat tick")
    wait_for_first_heartbeat_tick(producer_started=f"DefaultMQProducer:{PRODUCER_GROUP} start")
    sent = []
    try:
        for i in range(count):
            step(f"producer.send_sync of message {i}")
            msg = Message(topic)
            msg.set_keys(f"key-{i}")
            msg.set_tags(f"Tag{i % 2}")
            msg.set_body(body(i))
            if os.environ.get("CPP_TIMER_DELAY_MS"):  # a timer message, as a 4.x client can send one
                msg.set_property("TIMER_DELAY_MS", os.environ["CPP_TIMER_DELAY_MS"])
            r = producer.send_sync(msg)
            sent.append({"status": int(r.status), "msgId": r.msg_id, "offset": r.offset})
    finally:
        step("producer.shutdown")
        producer.shutdown()
    return sent


def consume(namesrv: str, topic: str, group: str, count: int, timeout: float) -> dict[str, dict[str, object]]:
    received: dict[str, dict[str, object]] = {}
    lock = threading.Lock()
    all_in = threading.Event()

    def on_message(msg: object) -> None:
        key = msg.keys.decode() if isinstance(msg.keys, bytes) else msg.keys  # type: ignore[attr-defined]
        raw = msg.body if isinstance(msg.body, bytes) else msg.body.encode()  # type: ignore[attr-defined]
        tags = msg.tags.decode() if isinstance(msg.tags, bytes) else msg.tags  # type: ignore[attr-defined]
        with lock:
            entry = received.setdefault(key, {"n": 0})
            entry.update(n=int(entry["n"]) + 1, tags=tags, sha1=hashlib.sha1(raw).hexdigest())
            if len(received) >= count:
                all_in.set()

    consumer = PushConsumer(group)
    consumer.set_namesrv_addr(namesrv)
    if os.environ.get("CPP_ACCESS_KEY"):
        consumer.set_session_credentials(os.environ["CPP_ACCESS_KEY"], os.environ["CPP_SECRET_KEY"], "ALIYUN")
    consumer.subscribe(topic, on_message)
    step("consumer.start")
    consumer.start()
    try:
        step(f"waiting up to {timeout:g} s for {count} messages")
        all_in.wait(timeout)
        step("letting the consumer commit its offsets")
        time.sleep(6)  # let the consumer commit its offsets (every 5 s) before shutting down
    finally:
        step(f"consumer.shutdown ({len(received)} of {count} received)")
        consumer.shutdown()
    return received


def client_log() -> Path:
    """This process's client log: the client writes it under ~/logs/rocketmq-cpp/ as ``PID_rocketmq-cpp.log.N``,
    N the first free number, so that a process with a recycled id writes ``.log.1`` beside the old process's
    ``.log.0``: the one written last is ours."""
    logs = Path.home() / "logs" / "rocketmq-cpp"
    written = {}
    for path in logs.glob(f"{os.getpid()}_rocketmq-cpp.log.*"):
        with contextlib.suppress(FileNotFoundError):  # (the client's collector may remove an old one)
            written[path] = path.stat().st_mtime_ns
    return max(written, key=written.__getitem__) if written else logs / f"{os.getpid()}_rocketmq-cpp.log.0"


def wait_for_first_heartbeat_tick(producer_started: str, timeout: float = 60.0) -> None:
    """Return once the client's log shows its first heartbeat tick after the line ``producer_started``
    (``start`` logs one empty heartbeat itself, the tick the second); the log is written as it goes."""
    deadline = time.monotonic() + timeout
    while True:
        path = client_log()
        text = path.read_text(errors="replace") if path.exists() else ""
        since = text.rfind(producer_started)
        if since >= 0 and text.count(EMPTY_HEARTBEAT, since) >= 2:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"no heartbeat tick of the client in {timeout:.0f} s after its start ({path})")
        time.sleep(0.01)


def client_log_errors(lines: int = 12) -> str:
    """The last error and warning lines of this process's client log, short enough for a test's failure
    message."""
    path = client_log()
    if not path.exists():
        return f"(no client log at {path})"
    text = path.read_text(errors="replace").splitlines()
    kept = [line[:160] for line in text if "(error)" in line or "(warning)" in line]
    return f"{path}:\n" + "\n".join(kept[-lines:])


if __name__ == "__main__":
    arm(client_log_errors)
    try:
        code = main(
            sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5]), *sys.argv[6:7]
        )
    except Exception:
        traceback.print_exc()
        print(client_log_errors(), file=sys.stderr)
        code = 1
    sys.exit(code)
