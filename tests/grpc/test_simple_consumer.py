"""The official 5.x SimpleConsumer on the broker's POP service through the gRPC front."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import pytest

from mqctl.services.grpc5_client import on_client_loop
from tests.support.grpc5 import (
    RpcClient,
    create_group,
    create_topic,
    grpc_cluster,
    message,
    producer,
    receive_all,
    simple_consumer,
    stored,
    wait_for,
)

pytestmark = pytest.mark.slow


def test_receive_then_ack_delivers_each_message_once(tmp_path: Path) -> None:
    with grpc_cluster(tmp_path) as cluster:
        create_topic(cluster, "Jobs")
        with producer(cluster, ("Jobs",)) as p:
            sent = {p.send(message("Jobs", f"job-{i}".encode(), tag="t")).message_id for i in range(6)}
        with simple_consumer(cluster, "Workers", "Jobs") as c:
            got = receive_all(c, 6)
            assert {m.message_id for m in got} == sent
            assert {m.body for m in got} == {f"job-{i}".encode() for i in range(6)}
            assert all(m.delivery_attempt == 1 and m.topic == "Jobs" and m.tag == "t" for m in got)
            for m in got:
                c.ack(m)
            assert c.receive(32, 30) == []  # nothing in flight comes back, nothing new
            assert cluster.broker.pop.in_flight().get("Workers", 0) == 0


def test_an_unacked_message_comes_back_after_its_invisibility_with_a_higher_attempt(tmp_path: Path) -> None:
    with grpc_cluster(tmp_path) as cluster:
        create_topic(cluster, "Jobs")
        with producer(cluster, ("Jobs",)) as p:
            sent = p.send(message("Jobs", b"retry me")).message_id
        with simple_consumer(cluster, "Workers", "Jobs") as c:
            first = receive_all(c, 1, invisible=2)[0]
            lent = time.monotonic()
            again = receive_all(c, 1, invisible=30, timeout=20)[0]
            assert time.monotonic() - lent >= 1.5  # not before the invisibility ends
            assert (again.message_id, again.body) == (sent, b"retry me")
            assert (first.delivery_attempt, again.delivery_attempt) == (1, 2)
            c.ack(again)


def test_change_invisible_gives_a_new_handle_and_brings_the_message_back_sooner(tmp_path: Path) -> None:
    with grpc_cluster(tmp_path) as cluster:
        create_topic(cluster, "Jobs")
        with producer(cluster, ("Jobs",)) as p:
            sent = p.send(message("Jobs", b"later")).message_id
        with simple_consumer(cluster, "Workers", "Jobs") as c:
            got = receive_all(c, 1, invisible=60)[0]
            old_handle = got.receipt_handle
            c.change_invisible_duration(got, 1)
            assert got.receipt_handle != old_handle  # the reply's handle replaced the message's
            again = receive_all(c, 1, invisible=30, timeout=20)[0]  # well before the 60 s
            assert again.message_id == sent and again.delivery_attempt == 2
            c.ack(again)


def test_a_message_never_acked_goes_to_the_dlq_after_max_attempts(tmp_path: Path) -> None:
    with grpc_cluster(tmp_path) as cluster:
        create_topic(cluster, "Jobs")
        create_group(cluster, "Workers", retry_max_times=1)  # 2 deliveries, then %DLQ%Workers
        with producer(cluster, ("Jobs",)) as p:
            sent = p.send(message("Jobs", b"poison")).message_id
        with simple_consumer(cluster, "Workers", "Jobs") as c:
            attempts = [m.delivery_attempt for m in receive_all(c, 1, invisible=1)]
            attempts += [m.delivery_attempt for m in receive_all(c, 1, invisible=1, timeout=20)]
            assert attempts == [1, 2]
            dead = wait_for(lambda: stored(cluster, "%DLQ%Workers"), timeout=20)
            assert [m.uniq_key for m in dead] == [sent]
            time.sleep(1.5)
            assert c.receive(32, 30) == []  # not delivered a third time


def replied_first(method: Callable[..., Future[Any]]) -> Callable[..., Future[Any]]:
    """``method`` returning its future only once its reply came: the order a busy host makes by chance."""

    def call(*args: Any, **kwargs: Any) -> Future[Any]:
        future = method(*args, **kwargs)
        wait([future], timeout=30)
        return future

    return call


def test_a_route_reply_that_comes_before_its_callback_still_opens_the_telemetry_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    unguarded = RpcClient.query_topic_route_async.__wrapped__
    monkeypatch.setattr(
        RpcClient,
        "query_topic_route_async",
        on_client_loop(replied_first(unguarded), RpcClient.get_channel_io_loop),
    )
    with grpc_cluster(tmp_path) as cluster:
        create_topic(cluster, "Jobs")
        with producer(cluster, ("Jobs",)) as p:
            sent = p.send(message("Jobs", b"first")).message_id

        def consume() -> None:
            with simple_consumer(cluster, "Workers", "Jobs", listed=True) as c:  # its Settings came
                [got] = receive_all(c, 1)  # its route was kept
                assert got.message_id == sent
                c.ack(got)

        # (in a thread of its own: no asyncio loop there, in whatever state earlier tests left the main one)
        with ThreadPoolExecutor(1) as pool:
            pool.submit(consume).result(timeout=90)
