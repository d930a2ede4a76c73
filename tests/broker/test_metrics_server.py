"""The broker's /metrics and /healthz listener: where it binds, and that a stuck client stalls no one."""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import threading
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.core import CounterMetricFamily

from daemon.broker.metrics import SCRAPE_SLICE
from tests.listeners import listening
from tests.support.broker import BrokerHandle, start_broker
from tests.support.waiting import budget_holds, wait_until


def fetch(port: int, path: str) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=3) as resp:
        return resp.read().decode()


async def test_healthz_answers_while_another_client_sends_half_a_request(broker: BrokerHandle) -> None:
    port = broker.broker.metrics_port
    assert port
    with socket.create_connection(("127.0.0.1", port), timeout=3) as stuck:
        stuck.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # no blank line: never finished
        assert (await asyncio.to_thread(fetch, port, "/healthz")).strip() == "serving"


@pytest.mark.parametrize(
    ("overrides", "bound"),
    [({}, "127.0.0.1"), ({"metrics_host": "127.0.0.2"}, "127.0.0.2")],
    ids=["listenHost", "metricsHost"],
)
async def test_metrics_listen_where_the_broker_listens(
    tmp_path: Path, overrides: dict[str, str], bound: str
) -> None:
    b = await start_broker(tmp_path / "store", listen_host="127.0.0.1", **overrides)
    try:
        ports = {port: addr for addr, port in listening(os.getpid())}
        assert ports[b.metrics_port] == bound
        assert ports[b.server.port] == "127.0.0.1"
    finally:
        await b.stop()


async def test_metrics_report_what_clients_make_the_broker_hold(broker: BrokerHandle) -> None:
    port = broker.broker.metrics_port
    _, writer = await asyncio.open_connection("127.0.0.1", broker.broker.server.port)
    writer.write(
        struct.pack(">ii", 4096, 64) + bytes(996)
    )  # a frame (JSON header word) announced, a quarter sent
    await writer.drain()
    try:
        await wait_until(budget_holds(broker.broker.server, 1004), timeout=5)
        text = await asyncio.to_thread(fetch, port, "/metrics")
    finally:
        writer.close()
    labels = '{broker="broker-a",cluster="DefaultCluster"}'
    assert f"rocketmq_remoting_buffered_bytes{labels} 1004.0" in text
    assert f"rocketmq_remoting_connections{labels} 1.0" in text


async def test_a_scrape_renders_on_the_event_loop_in_slices_serving_requests_between_them(
    broker: BrokerHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    b = broker.broker
    for i in range(2000):  # 4,000 per-topic samples: put messages and bytes
        b.stats.on_put(f"T{i}", 1, 10)
    turns = 0
    added: dict[int, int] = {}  # samples added per turn of the other task
    threads: set[int] = set()
    real = CounterMetricFamily.add_metric

    def counted(family: CounterMetricFamily, *args: Any, **kwargs: Any) -> None:
        threads.add(threading.get_ident())
        added[turns] = added.get(turns, 0) + 1
        real(family, *args, **kwargs)

    async def other() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    monkeypatch.setattr(CounterMetricFamily, "add_metric", counted)
    task = asyncio.create_task(other())
    try:
        text = await asyncio.to_thread(fetch, b.metrics_port, "/metrics")
    finally:
        task.cancel()
    assert threads == {threading.get_ident()}  # built on the event loop, not in the HTTP thread
    assert max(added.values()) <= SCRAPE_SLICE  # and never more than a slice between two turns
    assert len(added) >= 4000 // SCRAPE_SLICE
    assert text.count("\nrocketmq_broker_put_messages_total{") == 2000
    assert text.count("# TYPE rocketmq_broker_put_messages_total counter\n") == 1
    assert (
        'rocketmq_broker_put_bytes_total{broker="broker-a",cluster="DefaultCluster",topic="T1999"} 10.0'
        in text
    )
