"""The official C++ client (PyPI ``rocketmq==0.4.4``) as a Jepsen client: run with the interop venv's
Python as ``cpp_history.py NAMESRV TOPIC PROCESS``. Sends distinct messages one at a time until stdin
closes, message SEQ to queue SEQ modulo the topic's queues (``send_orderly``, with the client's own
retries), and prints one JSON line per event, as ``ons_history.js`` does: ``ready`` (with the tries one
send may make), ``invoke``, then ``ok`` or ``info``. An ``ok`` says the offset but not the queue: the
selector picks only the first attempt's queue, a retry goes to the next one (``sendAutoRetrySelectImpl``),
and the client's result does not say which attempt was acknowledged. Last, once stopped: ``done``.
Bounded by the harness' deadline (``interop_deadline``), as the other C++ client scripts are."""

from __future__ import annotations

import hashlib
import json
import sys
import threading
import time

from interop_deadline import arm, step
from rocketmq.client import Message, Producer, SendStatus

RETRIES = 2


def emit(event: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def main(namesrv: str, topic: str, process: str) -> int:
    stopping = threading.Event()

    def watch_stdin() -> None:
        sys.stdin.read()
        stopping.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    arm()
    step("producer.start")
    producer = Producer("JEPSEN_CPP_PG", timeout=3000)
    producer.set_namesrv_addr(namesrv)
    producer.start()
    emit({"type": "ready", "tries": 1 + RETRIES})
    seq = 0
    try:
        while not stopping.is_set():
            body = f"{process}:{seq}:".encode() * 8
            value = hashlib.sha1(body).hexdigest()
            msg = Message(topic)
            msg.set_tags("jepsen")
            msg.set_body(body)
            step(f"producer.send of message {seq}")
            emit({"type": "invoke", "value": value})
            try:
                r = producer.send_orderly(msg, seq, retry_times=RETRIES)
            except Exception as exc:  # the client's exceptions carry no "never sent" guarantee
                emit({"type": "info", "value": value, "error": str(exc).splitlines()[0][:200]})
                time.sleep(0.2)
            else:
                where = {"value": value, "offset": r.offset, "msgId": r.msg_id}
                ok = r.status == SendStatus.OK
                emit({"type": "ok", **where} if ok else {"type": "info", "error": r.status.name, **where})
            seq += 1
    finally:
        step("producer.shutdown")
        producer.shutdown()
    emit({"type": "done", "sent": seq})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3]))
