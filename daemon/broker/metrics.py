"""Prometheus endpoint of the broker: put/get totals and rates per topic, lag per group and queue,
store offsets and disk usage, plus `/healthz`: 200 `serving` once the broker accepts requests, 503
`starting` while its store recovers (the metrics listener opens first) and `stopping` on the way down.

Values are collected at scrape time from the broker's own tables, so the hot paths only bump the
plain counters in `BrokerStats`. The HTTP server (prometheus-client's threaded WSGI server) runs
away from the event loop, one thread per request with a read timeout, so a client that never
finishes its request holds only its own thread and `/healthz` keeps answering.

The text itself is rendered on the event loop, in slices (`render`): a broker with 10,000 queues has
tens of thousands of samples, and building them anywhere holds the GIL. In the HTTP thread that cost
the loop up to a switch interval's wait for the GIL at a time (interpreted code) or the whole walk of a
table (compiled code, which never offers the GIL), so every request queued behind a scrape. On the
loop, a table's rows are copied at once (`list()` of a dict, a C-level copy) and turned into
`SCRAPE_SLICE` samples at a time, the loop serving requests between two slices.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import io
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from daemon.broker.loopwatch import CAUSES
from daemon.broker.stats import GROUP_GET_NUMS, TOPIC_PUT_NUMS, TOPIC_PUT_SIZE, StatsItem
from daemon.protect import budget_host
from store.supervise import supervised

if TYPE_CHECKING:
    from daemon.broker.context import BrokerContext
    from daemon.broker.ha import SlaveState

log = logging.getLogger(__name__)

#: How often the serving thread checks for shutdown: the wait `stop()` (and so every broker stop) pays.
#: socketserver's default of 0.5 s made stopping a broker take half a second.
POLL_INTERVAL = 0.1
#: Seconds a request may take to arrive, all of it: a slower client is dropped (its thread would linger).
READ_TIMEOUT = 10.0
#: Connections served at once, a thread each: one more is answered 503 and closed without a thread, so
#: a peer that opens connections and never uses them cannot grow the broker's threads without bound.
MAX_CONNECTIONS = 16
#: Samples of a per-topic or per-queue family rendered at once on the event loop, which serves
#: requests between two slices (docs/performance.md has what a slice costs).
SCRAPE_SLICE = 50
#: Seconds a scrape waits for the event loop to render it before answering 503.
RENDER_TIMEOUT = 10.0


_Family = CounterMetricFamily | GaugeMetricFamily


class _Table(NamedTuple):
    """A family with a sample per topic, group or queue: `make` gives it empty, `fill` adds the sample of
    one of `rows` (a copy of the broker's table taken when the family's turn comes)."""

    make: Callable[[], _Family]
    rows: Sequence[Any]
    fill: Callable[[_Family, Any], None]


class _Families(Collector):
    """Families already built, for `generate_latest`."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return self.families


async def render(b: BrokerContext) -> bytes:
    """The exposition text, built on the broker's event loop: the per-topic and per-queue families
    `SCRAPE_SLICE` samples at a time with the loop serving between the slices, then the few dozen
    samples of the others at once."""
    labels = ["cluster", "broker"]
    base = [b.config.broker_cluster_name, b.config.broker_name]
    out: list[bytes] = []
    for table in _tables(b, labels, base):
        for start in range(0, max(len(table.rows), 1), SCRAPE_SLICE):
            family = table.make()
            for row in table.rows[start : start + SCRAPE_SLICE]:
                table.fill(family, row)
            text = generate_latest(_Families([family]))
            out.append(text if start == 0 else text.split(b"\n", 2)[2])  # HELP and TYPE once
            await asyncio.sleep(0)
    families: list[Metric] = [
        *_rates(b, labels, base),
        *_commit_log_metrics(b, labels, base),
        *_timer_metrics(b, labels, base),
        *_ha_metrics(b, labels, base),
        *_dledger_metrics(b, labels, base),
        *_remoting_metrics(b, labels, base),
        *_loop_metrics(b, labels, base),
    ]
    out.append(generate_latest(_Families(families)))
    return b"".join(out)


def _tables(b: BrokerContext, labels: list[str], base: list[str]) -> Iterator[_Table]:
    """Puts and gets per topic and group, queue offsets and consumer lag per queue."""
    stats, store = b.stats, b.store
    per_topic = [*labels, "topic"]

    def counter(name: str, doc: str, names: list[str]) -> Callable[[], _Family]:
        return functools.partial(CounterMetricFamily, name, doc, labels=names)

    def gauge(name: str, doc: str, names: list[str]) -> Callable[[], _Family]:
        return functools.partial(GaugeMetricFamily, name, doc, labels=names)

    def by_topic(family: _Family, row: tuple[str, StatsItem]) -> None:
        family.add_metric([*base, row[0]], row[1].value)

    yield _Table(
        counter("rocketmq_broker_put_messages", "Messages stored, per topic", per_topic),
        stats.items_of(TOPIC_PUT_NUMS),
        by_topic,
    )
    yield _Table(
        counter("rocketmq_broker_put_bytes", "Bytes stored (whole records), per topic", per_topic),
        stats.items_of(TOPIC_PUT_SIZE),
        by_topic,
    )

    def by_group(family: _Family, row: tuple[str, StatsItem]) -> None:
        topic, _, group = row[0].partition("@")
        family.add_metric([*base, group, topic], row[1].value)

    yield _Table(
        counter(
            "rocketmq_broker_get_messages", "Messages delivered to consumers", [*labels, "group", "topic"]
        ),
        stats.items_of(GROUP_GET_NUMS),
        by_group,
    )

    def by_queue(family: _Family, key: tuple[str, int]) -> None:
        topic, qid = key
        family.add_metric([*base, topic, str(qid)], store.get_max_offset(topic, qid))

    yield _Table(
        gauge(
            "rocketmq_queue_max_offset", "Next offset to be written, per queue", [*labels, "topic", "queue"]
        ),
        store.queue_keys(),
        by_queue,
    )

    def lag(family: _Family, row: tuple[str, int, int]) -> None:
        key, qid, committed = row
        topic, _, group = key.partition("@")
        family.add_metric(
            [*base, group, topic, str(qid)], max(0, store.get_max_offset(topic, qid) - max(committed, 0))
        )

    yield _Table(
        gauge(
            "rocketmq_consumer_lag",
            "Messages not yet consumed, per group and queue",
            [*labels, "group", "topic", "queue"],
        ),
        [(key, qid, off) for key, queues in b.offsets.snapshot().items() for qid, off in queues.items()],
        lag,
    )


def _rates(b: BrokerContext, labels: list[str], base: list[str]) -> Iterator[Metric]:
    stats = b.stats
    tps = GaugeMetricFamily(
        "rocketmq_broker_tps", "Messages per second over the last 10 s", labels=[*labels, "kind"]
    )
    tps.add_metric([*base, "put"], stats.tps(stats.put, 10))
    tps.add_metric([*base, "get"], stats.tps(stats.get, 10))
    yield tps


def _commit_log_metrics(b: BrokerContext, labels: list[str], base: list[str]) -> Iterator[Metric]:
    """The CommitLog's extent and the disk."""
    store = b.store
    phy = GaugeMetricFamily("rocketmq_commitlog_offset", "CommitLog offsets", labels=[*labels, "end"])
    phy.add_metric([*base, "min"], store.min_phy_offset)
    phy.add_metric([*base, "max"], store.max_phy_offset)
    yield phy

    disk = GaugeMetricFamily(
        "rocketmq_disk_used_ratio",
        "Used fraction of the store's file system, as the cleanup watermarks and commitLogDiskRatio count it",
        labels=labels,
    )
    disk.add_metric(base, b.store.disk_ratio())
    yield disk


def _timer_metrics(b: BrokerContext, labels: list[str], base: list[str]) -> Iterator[Any]:
    """Timer messages waiting per real topic (the backlog), and how many were delivered."""
    pending = GaugeMetricFamily(
        "rocketmq_timer_pending_messages",
        "Timer messages waiting for their delivery time, per real topic",
        labels=[*labels, "topic"],
    )
    next_due = GaugeMetricFamily(
        "rocketmq_timer_next_due_seconds",
        "Unix time the next pending timer message of the topic falls due",
        labels=[*labels, "topic"],
    )
    for row in b.timers.backlog():
        pending.add_metric([*base, row.topic], row.pending)
        next_due.add_metric([*base, row.topic], row.next_due_ms / 1000)
    yield pending
    yield next_due
    delivered = CounterMetricFamily(
        "rocketmq_timer_delivered_messages", "Timer messages re-put to their topic when due", labels=labels
    )
    delivered.add_metric(base, b.timers.delivered)
    yield delivered


def _remoting_metrics(b: BrokerContext, labels: list[str], base: list[str]) -> Iterator[Any]:
    """The listener's buffered bytes, connections, and every refusal of its guard (docs/security.md)."""
    server = b.server
    buffered = GaugeMetricFamily(
        "rocketmq_remoting_buffered_bytes",
        "Bytes of incomplete request frames held for clients (capped by remotingMaxBufferedBytes)",
        labels=labels,
    )
    buffered.add_metric(base, server.budget.used)
    yield buffered
    connections = GaugeMetricFamily("rocketmq_remoting_connections", "Open client connections", labels=labels)
    connections.add_metric(base, server.open_connections)
    yield connections
    closed = CounterMetricFamily(
        "rocketmq_remoting_closed_over_limit",
        "Client connections closed for passing a remotingMax* limit",
        labels=[*labels, "limit"],
    )
    dispatcher = server.dispatcher
    closed.add_metric([*base, "buffered_bytes"], server.budget.refused)
    closed.add_metric([*base, "connections"], server.refused_connections)
    closed.add_metric([*base, "connections_evicted"], server.evicted_connections)
    closed.add_metric([*base, "header_bytes"], dispatcher.headers_refused)
    closed.add_metric([*base, "unread_replies"], dispatcher.unread_dropped)
    yield closed
    refused = CounterMetricFamily(
        "rocketmq_remoting_requests_refused",
        "Requests refused for passing a limit of what one request may carry (json_body: answered "
        "SYSTEM_ERROR unread) or hold (held_pulls_*: a long-polling pull answered at once, not held; "
        "held_pops_*: a POP or 5.x receive that did not wait (past its connection's, host's or all hosts' "
        "bound), answered polling full when it found nothing; "
        "telemetry_streams_host, telemetry_streams_total: a 5.x Telemetry stream past its host's bound or "
        "grpcMaxTelemetryStreams, ended)",
        labels=[*labels, "limit"],
    )
    refused.add_metric([*base, "json_body"], dispatcher.bodies_refused)
    refused.add_metric([*base, "held_pulls_connection"], b.hold.refused_owner)
    refused.add_metric([*base, "held_pulls_host"], b.hold.refused_host)
    refused.add_metric([*base, "held_pops_connection"], b.polls.refused_owner)
    refused.add_metric([*base, "held_pops_host"], b.polls.refused_host)
    refused.add_metric([*base, "held_pops_total"], b.polls.refused_total)
    refused.add_metric([*base, "telemetry_streams_host"], b.streams.refused_host)
    refused.add_metric([*base, "telemetry_streams_total"], b.streams.refused_total)
    yield refused
    for name, doc, value in (
        (
            "rocketmq_remoting_bad_frames",
            "Client connections closed on bytes that cannot be a remoting frame (a header over its cap aside)",
            dispatcher.bad_frames,
        ),
        (
            "rocketmq_remoting_tls_paced",
            "TLS handshakes that waited their host's turn (a host beyond loopback: 50 a second after a burst)",
            server.tls_paced,
        ),
        (
            "rocketmq_remoting_tls_refused",
            "Connections closed for plaintext to a TLS-only listener or a failed TLS handshake",
            server.tls_refused,
        ),
    ):
        yield _single(CounterMetricFamily, name, doc, labels, base, value)


def _loop_metrics(b: BrokerContext, labels: list[str], base: list[str]) -> Iterator[Any]:
    """The event loop's sampled lag and the cyclic GC's pauses per generation."""
    watch = b.loop_watch
    lag = HistogramMetricFamily(
        "rocketmq_broker_loop_lag_seconds",
        "How late the event loop ran a callback due at a known time, sampled a few times a second",
        labels=labels,
    )
    buckets, total = watch.histogram()
    lag.add_metric(base, buckets, total)
    yield lag
    gen_labels = [*labels, "generation"]
    pauses = CounterMetricFamily(
        "rocketmq_broker_gc_pause_seconds", "Seconds the cyclic GC's collections took", labels=gen_labels
    )
    collections = CounterMetricFamily(
        "rocketmq_broker_gc_collections", "Collections of the cyclic GC", labels=gen_labels
    )
    longest = GaugeMetricFamily(
        "rocketmq_broker_gc_pause_max_seconds", "The longest collection since start", labels=gen_labels
    )
    gcs = watch.gc
    for gen in range(len(gcs.count)):
        pauses.add_metric([*base, str(gen)], gcs.total_s[gen])
        collections.add_metric([*base, str(gen)], gcs.count[gen])
        longest.add_metric([*base, str(gen)], gcs.max_s[gen])
    yield pauses
    yield collections
    yield longest
    cause_labels = [*labels, "cause"]
    stall_s = CounterMetricFamily(
        "rocketmq_broker_loop_stall_seconds",
        "Lateness of the loop's stall probes (each late by 2 ms or more), by where it went: ran (the loop's "
        "thread on a core), core (waiting for one), steal (the hypervisor's), gc (a collection), other (the "
        "GIL held by another thread, a blocking call)",
        labels=cause_labels,
    )
    stalls = CounterMetricFamily(
        "rocketmq_broker_loop_stalls",
        "Stalls of the event loop (a probe late by 2 ms or more), each counted under its largest cause",
        labels=cause_labels,
    )
    for cause, seconds, n in zip(CAUSES, watch.stalls.seconds, watch.stalls.by_cause, strict=True):
        stall_s.add_metric([*base, cause], seconds)
        stalls.add_metric([*base, cause], n)
    yield stall_s
    yield stalls
    yield _single(
        CounterMetricFamily,
        "rocketmq_broker_gc_freezes",
        "Times a slow full collection had what survived it frozen out of the next ones (gc.freeze)",
        labels,
        base,
        watch.freezes,
    )


def _single(
    family: type[CounterMetricFamily | GaugeMetricFamily],
    name: str,
    doc: str,
    labels: list[str],
    base: list[str],
    value: float,
) -> CounterMetricFamily | GaugeMetricFamily:
    """A family with this broker's one sample."""
    metric = family(name, doc, labels=labels)
    metric.add_metric(base, value)
    return metric


def _slave_lags(slaves: Sequence[SlaveState], end: int) -> dict[tuple[str, str], int]:
    """Each slave's lag keyed by what stays the same across its reconnects: its registered address and
    brokerId, or its host alone (no id) while the master cannot tell which slave it is; slaves not told
    apart on one host show the largest lag."""
    out: dict[tuple[str, str], int] = {}
    for s in slaves:
        key = (s.registered[0], str(s.registered[1])) if s.registered else (s.addr.rpartition(":")[0], "")
        out[key] = max(out.get(key, 0), max(0, end - max(s.acked_offset, 0)))
    return out


def _ha_metrics(b: BrokerContext, labels: list[str], base: list[str]) -> Iterator[Any]:
    """Replication: a master's slaves and their lag, SYNC_MASTER waits; a slave's connection."""
    master, slave = b.ha_master, b.ha_slave
    if master is not None and slave is None:
        slaves = master.status()
        connected = GaugeMetricFamily(
            "rocketmq_ha_connected_slaves", "Slaves connected to this master", labels=labels
        )
        connected.add_metric(base, len(slaves))
        yield connected
        lag = GaugeMetricFamily(
            "rocketmq_ha_slave_lag_bytes",
            "CommitLog bytes a slave has not acked, by the broker address and brokerId it registered",
            labels=[*labels, "slave", "slave_id"],
        )
        end = b.store.max_phy_offset
        for key, behind in _slave_lags(slaves, end).items():
            lag.add_metric([*base, *key], behind)
        yield lag
        waits = CounterMetricFamily(
            "rocketmq_ha_sync_waits",
            "SYNC_MASTER sends that waited for a slave, by outcome",
            labels=[*labels, "status"],
        )
        for status, n in master.sync_outcomes.items():
            waits.add_metric([*base, status], n)
        yield waits
        yield _single(
            CounterMetricFamily,
            "rocketmq_ha_sync_wait_seconds",
            "Seconds SYNC_MASTER sends waited for a slave in all",
            labels,
            base,
            master.sync_wait_seconds,
        )
    if slave is not None:
        up = GaugeMetricFamily(
            "rocketmq_ha_master_connected", "1 while this slave is connected to its master", labels=labels
        )
        up.add_metric(base, 1 if slave.connected else 0)
        yield up


def _dledger_metrics(b: BrokerContext, labels: list[str], base: list[str]) -> Iterator[Any]:
    """DLedger mode: the member's role, term and indexes; on the leader each follower's lag in entries."""
    group = b.dledger
    if group is None:
        return
    st = group.status()
    role = GaugeMetricFamily(
        "rocketmq_dledger_role", "1 for this member's Raft role", labels=[*labels, "self_id", "role"]
    )
    for name in ("LEADER", "FOLLOWER", "CANDIDATE"):
        role.add_metric([*base, str(st["selfId"]), name], 1 if st["role"] == name else 0)
    yield role
    yield _single(
        GaugeMetricFamily, "rocketmq_dledger_term", "The member's term", labels, base, float(str(st["term"]))
    )
    for key, name in (("lastIndex", "last_index"), ("committedIndex", "committed_index")):
        yield _single(
            GaugeMetricFamily,
            f"rocketmq_dledger_{name}",
            f"The DLedger log's {key}",
            labels,
            base,
            float(str(st[key])),
        )
    peers = st["peers"]
    assert isinstance(peers, dict)
    lag = GaugeMetricFamily(
        "rocketmq_dledger_peer_lag_entries",
        "Entries a follower does not hold (on the leader)",
        labels=[*labels, "peer"],
    )
    for peer, v in peers.items():
        if v["lag"] >= 0:
            lag.add_metric([*base, peer], v["lag"])
    yield lag
    refused = CounterMetricFamily(
        "rocketmq_dledger_channel_refused",
        "DLedger channel connections and requests refused: by the peer gate, or failing mutual TLS",
        labels=[*labels, "by"],
    )
    refused.add_metric([*base, "peer_gate"], group.gate.refused)
    refused.add_metric([*base, "tls"], group.server.tls_refused)
    yield refused


_NOT_HTTP_BODY = b"not an HTTP request: this is a broker's metrics port (GET /metrics, /healthz)\n"
#: What a peer that does not speak HTTP gets at once (see :meth:`_QuietHandler.handle`).
NOT_HTTP = (
    b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nConnection: close\r\n"
    + b"Content-Length: %d\r\n\r\n" % len(_NOT_HTTP_BODY)
    + _NOT_HTTP_BODY
)


_BUSY_BODY = b"too many connections to this broker's metrics port\n"
#: What a connection over `MAX_CONNECTIONS` gets before it is closed.
BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nConnection: close\r\n"
    + b"Content-Length: %d\r\n\r\n" % len(_BUSY_BODY)
    + _BUSY_BODY
)


class _DeadlineReader(io.RawIOBase):
    """A socket's reads with one deadline for them all: each waits only what is left of it, so a client
    sending a byte just before every timeout (a slow-loris) is dropped at the deadline all the same."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock = sock
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request did not arrive in time")
        self._sock.settimeout(left)
        return self._sock.recv_into(buffer)


class _QuietHandler(WSGIRequestHandler):
    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(READ_TIMEOUT)
        # (wsgiref serves one request per connection: the deadline covers all that is ever read; the
        # socket's own reader is closed, or the socket it holds would stay open after the request)
        self.rfile.close()
        self.rfile = io.BufferedReader(_DeadlineReader(self.connection, time.monotonic() + READ_TIMEOUT))

    def handle(self) -> None:
        """A request whose first byte cannot start an HTTP method (a RocketMQ client pointed here: its
        frame starts with its length's high byte, 0) is answered 400 at once: the HTTP parser waits for a
        line end that a binary frame may never send, and the client would wait out its timeout."""
        try:
            first = self.connection.recv(1, socket.MSG_PEEK)
        except OSError:  # reset, or nothing within READ_TIMEOUT
            return
        if first and not first.isalpha():
            with contextlib.suppress(OSError):
                self.connection.sendall(NOT_HTTP)
            return
        with contextlib.suppress(OSError):  # reset, or the request not whole by its deadline
            super().handle()

    def parse_request(self) -> bool:
        parsed = super().parse_request()
        self.connection.settimeout(READ_TIMEOUT)  # the answer is written under the plain timeout
        return parsed

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("metrics: " + format, *args)


class _Server(ThreadingWSGIServer):
    """prometheus-client's threaded server with at most `MAX_CONNECTIONS` handler threads. With every
    slot taken, a connection from a host holding fewer than the host holding the most gets one of
    that host's (its oldest, shut down): one host's slow or silent connections, opened again as each
    reaches its deadline, answered every other client 503, a liveness probe of `/healthz` too. A host is
    an IPv6 peer's /64 (:func:`daemon.protect.budget_host`): each of its addresses counted as a host of
    its own, and one host took every slot from as many of them."""

    def server_activate(self) -> None:
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        #: the connections being served, oldest first, with their peers' hosts
        self._serving: dict[Any, str] = {}
        self._serving_lock = threading.Lock()
        super().server_activate()

    def process_request(self, request: Any, client_address: Any) -> None:
        host = budget_host(str(client_address[0])) if client_address else ""
        if not self._slots.acquire(blocking=False) and not self._make_room(host):
            with contextlib.suppress(OSError):
                request.setblocking(False)  # (a reply this small fits the socket's buffer)
                request.send(BUSY)
            self.shutdown_request(request)
            return
        with self._serving_lock:
            self._serving[request] = host
        try:
            super().process_request(request, client_address)
        except BaseException:  # no thread started: its slot is free again
            self._done(request)
            raise

    def _make_room(self, host: str) -> bool:
        """Shut down the oldest connection of the host holding the most when it holds more than
        ``host`` would with this one, and take the slot it frees (False: none freed)."""
        with self._serving_lock:
            counts: dict[str, int] = {}
            for held in self._serving.values():
                counts[held] = counts.get(held, 0) + 1
            if not counts:
                return False
            heavy = max(counts, key=lambda h: counts[h])
            if counts[heavy] <= counts.get(host, 0) + 1:
                return False
            victim = next(sock for sock, held in self._serving.items() if held == heavy)
        log.warning("metrics: closing a connection of %s (%d of %d) to serve %s", heavy, counts[heavy],
                    MAX_CONNECTIONS, host)  # fmt: skip
        with contextlib.suppress(OSError):
            victim.shutdown(socket.SHUT_RDWR)  # its thread's read ends: the slot comes free
        return self._slots.acquire(timeout=1.0)  # (the serving thread waits no longer for it)

    def _done(self, request: Any) -> None:
        with self._serving_lock:
            self._serving.pop(request, None)
        self._slots.release()

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._done(request)


class _Server6(_Server):
    """IPv6 listener, for a `listenHost` such as `::`."""

    address_family = socket.AF_INET6


def start_metrics_server(broker: BrokerContext, port: int, host: str) -> tuple[int, Callable[[], None]]:
    """Serve `/metrics` and `/healthz` on `host:port` (0 picks one), rendering on the running loop;
    returns the bound port and a stop function."""
    loop = asyncio.get_running_loop()
    inflight: asyncio.Task[bytes] | None = None

    async def shared_render() -> bytes:
        """The render under way, shared by every scrape that arrives while it runs: a burst of scrapes
        (a flood from the network) costs the loop one render at a time, not one each."""
        nonlocal inflight
        if inflight is None or inflight.done():
            inflight = loop.create_task(render(broker), name="metrics-render")
        return await asyncio.shield(inflight)

    def metrics_app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        try:
            body = asyncio.run_coroutine_threadsafe(shared_render(), loop).result(RENDER_TIMEOUT)
        except (concurrent.futures.TimeoutError, RuntimeError):  # a loop stalled, or closed
            start_response("503 Service Unavailable", [("Content-Type", "text/plain")])
            return [b"the broker's event loop did not render the metrics in time\n"]
        start_response("200 OK", [("Content-Type", CONTENT_TYPE_LATEST)])
        return [body]

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == "/healthz":
            serving = broker.state == "serving"
            start_response(
                "200 OK" if serving else "503 Service Unavailable", [("Content-Type", "text/plain")]
            )
            return [f"{broker.state}\n".encode()]
        if broker.state != "serving":  # nothing to collect before the store is open
            start_response("503 Service Unavailable", [("Content-Type", "text/plain")])
            return [f"{broker.state}\n".encode()]
        return metrics_app(environ, start_response)

    server = make_server(host, port, app, _Server6 if ":" in host else _Server, handler_class=_QuietHandler)
    stopped = threading.Event()
    serve = functools.partial(server.serve_forever, POLL_INTERVAL)
    supervised("broker-metrics", serve, stopped).start()  # (a failed serve_forever serves again)
    bound = server.server_address[1]
    log.info("metrics on http://%s:%d/metrics", host, bound)

    def stop() -> None:
        stopped.set()
        server.shutdown()
        server.server_close()

    return int(bound), stop
