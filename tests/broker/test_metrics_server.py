"""The broker's /metrics and /healthz listener: where it binds, and that a stuck client stalls no one."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import struct
import subprocess
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.core import CounterMetricFamily

from daemon.broker import metrics
from daemon.broker.metrics import MAX_CONNECTIONS, SCRAPE_SLICE
from tests.listeners import listening
from tests.support.broker import BrokerHandle, start_broker
from tests.support.netns import peer_namespace
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


def _handler_threads() -> int:
    return sum("process_request_thread" in t.name for t in threading.enumerate())


@pytest.mark.slow
async def test_a_flood_of_idle_connections_holds_a_bounded_number_of_threads(broker: BrokerHandle) -> None:
    """Each metrics connection is served by a thread; a peer opening connections it never uses (a
    network scan, a flood) must not grow the broker's threads without bound, and /healthz answers
    again once the flood is gone."""
    port = broker.broker.metrics_port
    assert port
    before = _handler_threads()
    flood = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(3 * MAX_CONNECTIONS)]
    try:
        await asyncio.sleep(0.5)  # every accepted connection has been handed to its handler
        assert _handler_threads() - before <= MAX_CONNECTIONS
        turned_away = flood[-1].recv(200)  # the ones over the cap are told so and closed at once
        assert turned_away.startswith(b"HTTP/1.1 503")
    finally:
        for s in flood:
            s.close()
    # each handler frees its slot when it reads the close: on a busy host that takes its time
    await wait_until(lambda: _handler_threads() <= before, 30)
    assert (await asyncio.to_thread(fetch, port, "/healthz")).strip() == "serving"


@pytest.mark.slow
async def test_a_request_trickled_a_byte_at_a_time_is_dropped_at_its_deadline(
    broker: BrokerHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slow-loris keeps each read under the socket timeout; the whole request has one deadline (1 s
    here): the trickle, a byte every 0.3 s, is dropped, where without the deadline it went on for ever
    (it is given 10 s: a busy host may run the server's thread late)."""
    monkeypatch.setattr(metrics, "READ_TIMEOUT", 1.0)
    port = broker.broker.metrics_port
    assert port
    with socket.create_connection(("127.0.0.1", port), timeout=3) as slow:
        slow.sendall(b"GET /metrics HTTP/1.1\r\n")
        start = time.monotonic()
        closed = None
        while time.monotonic() - start < 10:
            try:
                slow.sendall(b"X")
            except OSError:
                closed = time.monotonic() - start
                break
            await asyncio.sleep(0.3)
            with contextlib.suppress(BlockingIOError, TimeoutError):
                if slow.recv(1, socket.MSG_DONTWAIT) == b"":
                    closed = time.monotonic() - start
                    break
    assert closed is not None


async def test_scrapes_arriving_during_a_render_share_it(
    broker: BrokerHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A burst of scrapes costs the event loop one render, not one each."""
    renders = []
    real = metrics.render

    async def slow(b: Any) -> bytes:
        renders.append(b)
        await asyncio.sleep(1.0)
        return await real(b)

    monkeypatch.setattr(metrics, "render", slow)
    port = broker.broker.metrics_port
    assert port
    texts = await asyncio.gather(*(asyncio.to_thread(fetch, port, "/metrics") for _ in range(6)))
    assert all("rocketmq_remoting_connections" in t for t in texts)
    assert len(renders) <= 2, len(renders)


#: Opens one silent connection to argv[1] (an IPv6 address) port argv[2] from each address after them,
#: says so, and holds them until its stdin closes.
_HOLD_FROM_EACH = """
import socket, sys
held = []
for source in sys.argv[3:]:
    s = socket.socket(socket.AF_INET6)
    s.bind((source, 0))
    s.connect((sys.argv[1], int(sys.argv[2])))
    held.append(s)
print("held", flush=True)
sys.stdin.read()
"""


@pytest.mark.slow
async def test_one_ipv6_host_speaking_from_many_addresses_keeps_its_share(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host is its /64: one holding every slot from as many of its addresses (re-opened at each
    deadline) answered every other client 503, /healthz too, as if each address were a host of its own."""
    monkeypatch.setattr(metrics, "READ_TIMEOUT", 120.0)  # (the flood holds its slots all through the test)
    with peer_namespace(ipv6_peers=MAX_CONNECTIONS) as peer:
        b = await start_broker(tmp_path / "store", metrics_host="::")
        before = _handler_threads()
        argv = peer.python(_HOLD_FROM_EACH, peer.host_ip6, str(b.metrics_port), *peer.peer_ip6s)
        flood = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert flood.stdout is not None
            assert (await asyncio.to_thread(flood.stdout.readline)).strip() == "held"
            await wait_until(lambda: _handler_threads() - before >= MAX_CONNECTIONS, 30)
            assert (await asyncio.to_thread(fetch, b.metrics_port, "/healthz")).strip() == "serving"
        finally:
            flood.communicate("", timeout=30)
            await b.stop()
