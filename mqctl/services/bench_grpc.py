"""``mqctl bench produce|consume --grpc``: the same load through a broker's gRPC front, driven by the
official RocketMQ 5.x Python client (the `grpc` extra), as an application using that client sees it.

The client is synchronous and runs its own threads: each sender is a thread doing blocking sends, the
consumer one thread receiving batches and acking them; the figures are those of `mqctl bench`.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from mqctl.admin.client import Admin
from mqctl.errors import NotFoundError
from mqctl.services.bench import BenchResult, Run, Ticker, result, running
from mqctl.services.grpc5_client import official_client
from mqctl.services.topics import masters_of_topic

#: The broker config keys that say where its gRPC front listens (daemon.broker.config).
GRPC_PORT_KEY = "grpcListenPort"
GRPC_ENABLE_KEY = "grpcEnable"


async def grpc_endpoint(admin: Admin, topic: str) -> str:
    """The gRPC address of the first master of ``topic`` that serves gRPC (its config names the port)."""
    for _, addr in sorted((await masters_of_topic(admin, topic)).items()):
        config = await admin.broker_config(addr)
        port = int(config.get(GRPC_PORT_KEY) or 0)
        if config.get(GRPC_ENABLE_KEY, "true").lower() == "true" and port > 0:
            host = addr.rsplit(":", 1)[0]
            return f"{host}:{port}"
    raise NotFoundError(
        f"no master of topic {topic!r} serves gRPC (grpcEnable, grpcListenPort, the grpc extra)"
    )


def _configuration(rocketmq: Any, endpoint: str) -> Any:
    from mqctl import auth

    credentials = auth.current()
    ak, sk = (credentials.access_key, credentials.secret_key) if credentials is not None else ("", "")
    return rocketmq.ClientConfiguration(endpoint, rocketmq.Credentials(ak, sk), request_timeout=10)


class _Tally:
    """The workers' counts, kept under a lock (threads), into the benchmark's `Run`."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.lock = threading.Lock()

    def ok(self, rt_ms: float, messages: int = 1) -> None:
        with self.lock:
            self.run.messages += messages
            self.run.rts.append(rt_ms)

    def failed(self) -> None:
        with self.lock:
            self.run.failures += 1


async def _in_threads(workers: list[Callable[[], None]]) -> None:
    """Run the blocking workers until they return; Ctrl-C (`run.stop`) makes them stop after their call."""
    await asyncio.gather(*(asyncio.to_thread(w) for w in workers))


async def produce_grpc(
    admin: Admin,
    topic: str,
    *,
    threads: int,
    size: int,
    count: int | None,
    duration: float | None = None,
    rate: float | None = None,
    tick: Ticker | None = None,
) -> BenchResult:
    """``threads`` senders sharing one official Producer, ``count`` messages or ``duration`` seconds."""
    rocketmq = official_client()
    endpoint = await grpc_endpoint(admin, topic)
    producer = rocketmq.Producer(_configuration(rocketmq, endpoint), (topic,))
    await asyncio.to_thread(producer.startup)
    body = os.urandom(size)
    run = Run(interval=threads / rate if rate else 0.0)
    run.deadline = run.started + duration if duration else None
    tally = _Tally(run)
    left = [count if count else -1]

    def claim() -> bool:
        with tally.lock:
            if left[0] == 0:
                return False
            left[0] -= 1
            return True

    def sender() -> None:
        while not run.over() and claim():
            message = rocketmq.Message()
            message.topic, message.body = topic, body
            started = time.perf_counter()
            try:
                producer.send(message)
            except Exception:  # counted as a failure, the run goes on (as `mqctl bench produce`)
                tally.failed()
            else:
                tally.ok((time.perf_counter() - started) * 1000)
            if run.interval:
                time.sleep(run.interval)

    try:
        async with running("produce", run, tick):
            await _in_threads([sender] * threads)
    finally:
        await asyncio.to_thread(producer.shutdown)
    seconds = time.perf_counter() - run.started
    return result("produce", run.messages, run.failures, seconds, run.rts, interrupted=run.interrupted)


async def consume_grpc(
    admin: Admin, topic: str, *, group: str, count: int | None, idle_s: float, tick: Ticker | None = None
) -> BenchResult:
    """One official SimpleConsumer of ``group`` receiving batches of 32 and acking each message, until
    ``count`` messages or ``idle_s`` seconds without one; RT is each receive call's."""
    rocketmq = official_client()
    endpoint = await grpc_endpoint(admin, topic)
    consumer = rocketmq.SimpleConsumer(
        _configuration(rocketmq, endpoint),
        group,
        {topic: rocketmq.FilterExpression("*")},
        await_duration=max(1, min(20, int(idle_s))),
    )
    await asyncio.to_thread(consumer.startup)
    run = Run()
    tally = _Tally(run)

    def receiver() -> None:
        last = time.perf_counter()
        while not run.over() and (count is None or run.messages < count):
            started = time.perf_counter()
            want = 32 if count is None else max(1, min(32, count - run.messages))
            try:
                batch = consumer.receive(want, 60)
            except Exception:
                tally.failed()
                continue
            if not batch:
                if time.perf_counter() - last >= idle_s:
                    return
                continue
            for message in batch:
                consumer.ack(message)
            tally.ok((time.perf_counter() - started) * 1000, len(batch))
            last = time.perf_counter()

    try:
        async with running("consume", run, tick):
            await _in_threads([receiver])
    finally:
        await asyncio.to_thread(consumer.shutdown)
    seconds = time.perf_counter() - run.started
    return result("consume", run.messages, run.failures, seconds, run.rts, interrupted=run.interrupted)
