"""Resolve a topic's route with the official RocketMQ C++ client (PyPI `rocketmq==0.4.4`).

Run with the interop venv's Python: `cpp_route.py NAMESRV TOPIC`. Prints the subscribe queues the
C++ client computed from the NameServer's route data as JSON, one object per queue.
"""

from __future__ import annotations

import ctypes
import json
import sys

from interop_deadline import arm, step
from rocketmq.client import PullConsumer
from rocketmq.ffi import _CMessageQueue, dll


def main(namesrv: str, topic: str) -> int:
    consumer = PullConsumer("MQCTL_INTEROP_CPP")
    consumer.set_namesrv_addr(namesrv)
    step("consumer.start")
    consumer.start()
    step("the subscription's queues")
    queues = ctypes.POINTER(_CMessageQueue)()
    size = ctypes.c_int()
    status = dll.FetchSubscriptionMessageQueues(
        consumer._handle, topic.encode(), ctypes.pointer(queues), ctypes.pointer(size)
    )
    result = [
        {
            "topic": queues[i].topic.decode(),
            "brokerName": queues[i].brokerName.decode(),
            "queueId": queues[i].queueId,
        }
        for i in range(size.value)
    ]
    if size.value:
        dll.ReleaseSubscriptionMessageQueue(queues)
    print(json.dumps({"status": int(status), "queues": result}))
    sys.stdout.flush()
    step("consumer.shutdown")
    consumer.shutdown()
    return 0


if __name__ == "__main__":
    arm()
    sys.exit(main(sys.argv[1], sys.argv[2]))
