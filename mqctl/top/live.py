"""The live ``TopSource``: standard admin request codes, plus the broker's Prometheus endpoint when it has one.

Every request is one of RocketMQ 4.x's, so ``mqctl top`` also watches a real RocketMQ 4.9 cluster;
there the endpoint is missing and per-topic figures come from GET_TOPIC_STATS_INFO instead, without
the bytes column (``MISSING_WITHOUT_METRICS``). One broker failing never fails a snapshot: it shows
as down. Only when no NameServer answers does ``snapshot`` raise.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import Counter
from collections.abc import Awaitable
from dataclasses import dataclass, field, replace
from typing import TypeVar

import httpx
from prometheus_client.parser import text_string_to_metric_families

from daemon.broker.bodies import ConsumerConnection, ConsumeStats
from daemon.broker.clean import PlanBody
from daemon.remoting.bodies import TopicConfig
from daemon.remoting.codes import RequestCode
from daemon.remoting.errors import RemotingError
from mqctl.admin.client import Admin
from mqctl.admin.messaging import view
from mqctl.errors import ConnectError, MqctlError, NotFoundError
from mqctl.services.cluster import BrokerRow, brokers, first_float, stall_split
from mqctl.services.fanout import failure_reason
from mqctl.services.groups import (
    LagSum,
    connections,
    group_on_broker,
    progress,
    queue_lags,
    uncommitted_starts,
)
from mqctl.services.offsets import GroupQueue
from mqctl.services.retention import broker_plan
from mqctl.services.topics import KINDS, topic_kind, topic_offsets
from mqctl.top.model import (
    VIEWS,
    BrokerView,
    ClientView,
    CommitLogFile,
    GroupDetail,
    GroupRow,
    NamesrvView,
    Overview,
    QueueOffset,
    Snapshot,
    StoreView,
    TopicRow,
)
from mqctl.units import server_float, server_int
from store import SYSTEM_GROUPS, Clock, SystemClock

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Columns a broker without the metrics endpoint (e.g. RocketMQ 4.9) cannot fill.
MISSING_WITHOUT_METRICS = frozenset({"Topics: Bytes"})
#: Newest CommitLog files shown per broker on the Store screen.
MAX_FILES = 256
#: Concurrent per-topic or per-group requests to one cluster.
CONCURRENCY = 16
#: Seconds a queue's oldest stored message time is kept: it changes only when retention deletes a file.
EARLIEST_TTL = 60.0
#: Seconds what a queue's 0 offset means is kept (committed, or never and where a consumer starts): a
#: group that never committed on a queue was asked its broker's offset table and start on every refresh.
STARTS_TTL = 60.0


@dataclass
class Scrape:
    """The per-topic counters of one metrics scrape."""

    puts: dict[str, int] = field(default_factory=dict)
    put_bytes: dict[str, int] = field(default_factory=dict)
    max_offsets: dict[str, int] = field(default_factory=dict)


def parse_metrics(text: str) -> Scrape:
    """Per-topic put count, put bytes and summed queue max offsets from the broker's exposition text."""
    scrape = Scrape()
    wanted = {
        "rocketmq_broker_put_messages_total": scrape.puts,
        "rocketmq_broker_put_bytes_total": scrape.put_bytes,
        "rocketmq_queue_max_offset": scrape.max_offsets,
    }
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            table = wanted.get(sample.name)
            topic = sample.labels.get("topic")
            if table is not None and topic is not None and math.isfinite(sample.value):
                table[topic] = table.get(topic, 0) + int(sample.value)
    return scrape


@dataclass(frozen=True)
class BrokerSettings:
    """What a broker's config says about its store and metrics, read once per broker address."""

    file_size: int
    reserved_hours: float | None
    metrics_url: str | None


def _settings(addr: str, config: dict[str, str]) -> BrokerSettings:
    port = config.get("metricsPort", "")
    enabled = config.get("metricsEnable", "false").lower() == "true"
    url = (
        f"http://{addr.rpartition(':')[0]}:{port}/metrics"
        if enabled and port.isdigit() and int(port)
        else None
    )
    reserved = config.get("fileReservedTime")
    return BrokerSettings(
        file_size=server_int(config.get("mappedFileSizeCommitLog"), least=1) or 1024**3,
        reserved_hours=server_float(reserved, least=0),
        metrics_url=url,
    )


def _int(text: str | None) -> int | None:
    """A count or an offset of the runtime info: below 0 none (RocketMQ's -1 "no file" too)."""
    return server_int(text, least=0)


async def _none() -> None:
    return None


@dataclass
class _Broker:
    view: BrokerView
    runtime: dict[str, str]
    settings: BrokerSettings | None
    scrape: Scrape | None


class LiveSource:
    """Snapshots of a running cluster. Keeps what rates need (previous counters) and what never changes
    (broker settings, first-message times of full CommitLog files) between refreshes."""

    def __init__(
        self, namesrv: list[str], *, clock: Clock | None = None, timeout: float = 3.0, system: bool = False
    ) -> None:
        self.namesrv = list(namesrv)
        #: Show RocketMQ's own topics and the groups' retry and DLQ topics too (``topic list --system``).
        self.system = system
        self.clock = clock or SystemClock()
        self.admin = Admin(self.namesrv, timeout=timeout)
        self.http = httpx.AsyncClient(timeout=timeout)
        self._limit = asyncio.Semaphore(CONCURRENCY)
        self._settings: dict[str, BrokerSettings] = {}
        self._counters: dict[tuple[str, str, str], tuple[float, int]] = {}
        self._first_writes: dict[tuple[str, int], float] = {}
        self._earliest: dict[tuple[str, str, int], tuple[float, float | None]] = {}
        #: queue -> (when read, never committed on, where the broker starts a consumer)
        self._starts: dict[GroupQueue, tuple[float, bool, int | None]] = {}
        self._last_views: frozenset[str] = frozenset()

    async def close(self) -> None:
        await self.http.aclose()
        await self.admin.client.close()

    async def _limited(self, work: Awaitable[T]) -> T:
        async with self._limit:
            return await work

    # ----------------------------------------------------------------------------------- snapshot

    async def snapshot(self, views: frozenset[str] = VIEWS) -> Snapshot:
        namesrvs = await asyncio.gather(*(self._ping(addr) for addr in self.namesrv))
        if not any(n.up for n in namesrvs):
            raise ConnectError(
                "no NameServer answers: " + "; ".join(f"{n.addr} ({n.error})" for n in namesrvs)
            )
        rows = await brokers(self.admin)
        found = list(await asyncio.gather(*(self._broker(row) for row in rows)))
        master_end = {
            (b.view.cluster, b.view.name): b.view.commitlog_max for b in found if b.view.broker_id == 0
        }
        for b in found:  # a slave's lag: how far its CommitLog end is behind its master's
            end = master_end.get((b.view.cluster, b.view.name))
            if b.view.broker_id != 0 and end is not None and b.view.commitlog_max is not None:
                b.view = replace(b.view, ha_lag_bytes=max(0, end - b.view.commitlog_max))
        masters = [b for b in found if b.view.broker_id == 0 and b.view.error is None]
        now = self.clock.now()
        errors = [f"{b.view.name} {b.view.addr}: {b.view.error}" for b in found if b.view.error is not None]
        topics, groups, stores = await asyncio.gather(
            self._topics(masters, now) if "topics" in views else _none(),
            self._groups(masters, now) if "groups" in views else _none(),
            self._stores(masters) if "store" in views else _none(),
        )
        self._last_views = views
        hidden: Counter[str] = Counter()
        if topics is not None and not self.system:
            hidden.update(t.kind for t in topics if t.kind != "normal")
            topics = tuple(t for t in topics if t.kind == "normal")
        missing = MISSING_WITHOUT_METRICS if any(b.scrape is None for b in masters) else frozenset()
        return Snapshot(
            taken_at=now,
            overview=Overview(brokers=tuple(b.view for b in found), namesrvs=tuple(namesrvs)),
            topics=topics,
            groups=groups,
            stores=stores,
            missing=missing,
            errors=tuple(errors),
            hidden_topics=tuple((k, hidden[k]) for k in KINDS if hidden[k]),
        )

    async def _ping(self, addr: str) -> NamesrvView:
        try:
            await self.admin.call(addr, RequestCode.GET_BROKER_CLUSTER_INFO)
        except RemotingError as exc:
            return NamesrvView(addr, up=False, error=str(exc))
        return NamesrvView(addr, up=True)

    async def _broker(self, row: BrokerRow) -> _Broker:
        base = BrokerView(row.cluster, row.broker_name, row.broker_id, row.addr)
        try:
            runtime = await self.admin.broker_runtime_info(row.addr)
            settings = self._settings.get(row.addr)
            if settings is None:
                settings = self._settings[row.addr] = _settings(
                    row.addr, await self.admin.broker_config(row.addr)
                )
        except RemotingError as exc:
            self._settings.pop(row.addr, None)  # a restarted broker may come back with another config
            reason, _ = failure_reason(exc)
            unread_as = reason if reason in ("ACL denied", "timed out") else "DOWN"
            return _Broker(replace(base, error=str(exc), unread_as=unread_as), {}, None, None)
        scrape = await self._scrape(settings.metrics_url) if settings.metrics_url else None
        disk = runtime.get("commitLogDiskRatio")
        view_ = replace(
            base,
            version=runtime.get("brokerVersionDesc"),
            put_tps=first_float(runtime.get("putTps")),
            get_tps=first_float(runtime.get("getTransferedTps")),
            disk_ratio=server_float(disk, least=0),
            commitlog_min=_int(runtime.get("commitLogMinOffset")),
            commitlog_max=_int(runtime.get("commitLogMaxOffset")),
            file_size=settings.file_size,
            metrics=scrape is not None,
            ha_slaves=_int(runtime.get("haSlaveCount")),
            ha_connected=(runtime["haMasterConnected"] == "true") if "haMasterConnected" in runtime else None,
            raft=f"{runtime['dledgerRole']} t{runtime.get('dledgerTerm', '?')}"
            if "dledgerRole" in runtime
            else None,
            loop_lag_p50_ms=first_float(runtime.get("loopLagP50")),
            loop_lag_p99_ms=first_float(runtime.get("loopLagP99")),
            loop_lag_max_ms=first_float(runtime.get("loopLagMax")),
            gc_pause_max_ms=first_float(runtime.get("gcPauseMax")),
            loop_stalls=_int(runtime.get("loopStalls")),
            loop_stall_ms=stall_split(runtime),
            pop_in_flight=_int(runtime.get("popInFlightTotal")),
            timer_pending=_int(runtime.get("timerPendingMessages")),
        )
        return _Broker(view_, runtime, settings, scrape)

    async def _scrape(self, url: str) -> Scrape | None:
        try:
            response = await self.http.get(url)
            response.raise_for_status()
        except httpx.HTTPError as exc:
            log.info("metrics at %s unavailable (%s); using admin requests", url, exc)
            return None
        try:
            return parse_metrics(response.text)
        except ValueError as exc:  # not the exposition format: the broker's word, not a failure of ours
            log.info("metrics at %s do not read (%s); using admin requests", url, exc)
            return None

    # ------------------------------------------------------------------------------------- topics

    def _rate(self, key: tuple[str, str, str], now: float, total: int, fresh: bool) -> float | None:
        """Per-second increase of a counter since the previous refresh: None at first sight, after a
        counter reset, or when the previous refresh did not look (``fresh``), as an average over the
        time the view was hidden would pass for a current rate."""
        before = self._counters.get(key)
        self._counters[key] = (now, total)
        if not fresh or before is None or now <= before[0] or total < before[1]:
            return None
        return (total - before[1]) / (now - before[0])

    async def _topics(self, masters: list[_Broker], now: float) -> tuple[TopicRow, ...]:
        configs = await asyncio.gather(*(self._topic_configs(b.view.addr) for b in masters))
        try:
            own = await self.admin.own_topic_names()
        except RemotingError as exc:  # the cluster and broker names then count as normal topics
            log.info("system topic list: %s", exc)
            own = set()
        queues: dict[str, int] = {}
        messages: dict[str, int] = {}
        nbytes: dict[str, int] = {}
        tps: dict[str, float | None] = {}
        for broker, table in zip(masters, configs, strict=True):
            addr = broker.view.addr
            for name, config in table.items():
                queues[name] = queues.get(name, 0) + config.read_queue_nums
            if broker.scrape is not None:
                written, counter, kind = broker.scrape.max_offsets, broker.scrape.puts, "metrics"
            else:
                written = await self._written(addr, table)
                counter, kind = written, "offsets"
            for name in table:
                messages[name] = messages.get(name, 0) + written.get(name, 0)
                if broker.scrape is not None:
                    nbytes[name] = nbytes.get(name, 0) + broker.scrape.put_bytes.get(name, 0)
                rate = self._rate((addr, kind, name), now, counter.get(name, 0), "topics" in self._last_views)
                known = tps.get(name, 0.0)
                tps[name] = None if rate is None or known is None else known + rate
        complete = all(b.scrape is not None for b in masters)  # bytes only when every master reports them
        return tuple(
            TopicRow(
                name,
                queues[name],
                messages[name],
                tps[name],
                nbytes.get(name, 0) if complete else None,
                topic_kind(name, own),
            )
            for name in sorted(queues)
        )

    async def _topic_configs(self, addr: str) -> dict[str, TopicConfig]:
        try:
            return await self.admin.topic_configs(addr)
        except RemotingError as exc:
            log.info("topic configs of %s: %s", addr, exc)
            return {}

    async def _written(self, addr: str, table: dict[str, TopicConfig]) -> dict[str, int]:
        """Summed queue max offsets per topic through GET_TOPIC_STATS_INFO (brokers without metrics), of
        every read queue (:func:`~mqctl.services.topics.topic_offsets`)."""
        names = list(table)

        async def one(name: str) -> int:
            try:
                stats = await self._limited(
                    topic_offsets(self.admin, addr, name, table[name].read_queue_nums)
                )
            except RemotingError:
                return 0
            return sum(o.max_offset for o in stats.offset_table.values())

        return dict(zip(names, await asyncio.gather(*(one(n) for n in names)), strict=True))

    # ------------------------------------------------------------------------------------- groups

    async def _groups(self, masters: list[_Broker], now: float) -> tuple[GroupRow, ...]:
        per_broker = await asyncio.gather(*(self._group_names(b.view.addr) for b in masters))
        names = sorted({g for found in per_broker for g in found})
        asks = [(b.view.addr, g) for b, found in zip(masters, per_broker, strict=True) for g in found]
        answers = await asyncio.gather(*(self._limited(self._group_on(addr, g)) for addr, g in asks))
        tps = dict.fromkeys(names, 0.0)
        oldest: dict[str, float | None] = dict.fromkeys(names)
        clients: dict[str, set[str]] = {g: set() for g in names}
        offsets_held: set[str] = set()  # groups with an offset (a queue in its consume stats) on some master
        unanswered: set[str] = set()  # groups some master did not give its consume stats for
        unread: dict[tuple[str, str, int], list[str]] = {}  # queues with no consumed message left
        # each queue's lag as group progress counts it: a queue never committed on is not counted from 0
        lags = await queue_lags(
            self.admin,
            ((addr, group, stats) for (addr, group), (stats, _) in zip(asks, answers, strict=True) if stats),
            starts=lambda zeros: self._uncommitted_starts(zeros, now),
        )
        per_group: dict[str, list[int | None]] = {g: [] for g in names}
        for (addr, group), (stats, conns) in zip(asks, answers, strict=True):
            if conns is not None:
                clients[group].update(c.client_id for c in conns.connection_set)
            if stats is None:
                unanswered.add(group)
                continue
            tps[group] += stats.consume_tps
            if stats.offset_table:
                offsets_held.add(group)
            for mq, wrapper in stats.offset_table.items():
                behind = lags[(addr, group, mq.topic, mq.queue_id)]
                per_group[group].append(behind)
                if behind is None:  # where a consumer starts is its consumeFromWhere's: no age to count
                    continue
                if behind and wrapper.last_timestamp > 0:
                    seen = now - wrapper.last_timestamp / 1000
                    oldest[group] = max(seen, oldest[group] or 0.0)
                elif behind:
                    unread.setdefault((addr, mq.topic, mq.queue_id), []).append(group)
        if unread:
            # Never consumed (or its last consumed message is gone): the oldest unconsumed message is the
            # queue's oldest stored one, as the dashboard's reset-by-time view would start from.
            keys = list(unread)
            times = await asyncio.gather(*(self._earliest_time(k, now) for k in keys))
            for key, at in zip(keys, times, strict=True):
                if at is None:  # an empty queue, or the broker did not answer
                    continue
                for group in unread[key]:
                    oldest[group] = max(now - at, oldest[group] or 0.0)
        sums = {g: LagSum.of(per_group[g]) for g in names}
        return tuple(
            GroupRow(
                g,
                sums[g].lag,
                len(clients[g]),
                tps[g],
                oldest[g],
                never_consumed=g not in offsets_held and g not in unanswered,
                uncounted=sums[g].uncounted,
            )
            for g in names
        )

    async def _uncommitted_starts(self, zeros: list[GroupQueue], now: float) -> dict[GroupQueue, int | None]:
        """:func:`~mqctl.services.groups.uncommitted_starts`, its requests through the concurrency limit,
        its failures logged, and what it read kept ``STARTS_TTL`` (a broker's unread answers are not)."""
        stale = [k for k in zeros if (c := self._starts.get(k)) is None or now - c[0] >= STARTS_TTL]
        if stale:
            failed: set[str] = set()

            async def run(addr: str, work: Awaitable[T]) -> T:
                try:
                    return await self._limited(work)
                except (RemotingError, MqctlError) as exc:
                    if addr not in failed:
                        log.info("offsets of groups never committed on %s: %s", addr, exc)
                    failed.add(addr)
                    raise

            found = await uncommitted_starts(self.admin, stale, run=run)
            if len(self._starts) >= 1 << 16:
                self._starts.clear()
            for key in stale:
                if key[0] not in failed:
                    self._starts[key] = (now, key in found, found.get(key))
            fresh = {key: start for key, start in found.items() if key[0] in failed}
        else:
            fresh = {}
        for key in zeros:
            cached = self._starts.get(key)
            if cached is not None and cached[1]:
                fresh.setdefault(key, cached[2])
        return fresh

    async def _earliest_time(self, key: tuple[str, str, int], now: float) -> float | None:
        """The store time (s) of a queue's oldest message, asked once a minute at most (GET_EARLIEST_MSG_
        STORETIME): a group that never consumed is asked about on every refresh."""
        cached = self._earliest.get(key)
        if cached is not None and now - cached[0] < EARLIEST_TTL:
            return cached[1]
        addr, topic, queue_id = key
        try:
            ms = await self._limited(self.admin.earliest_time(addr, topic, queue_id))
        except RemotingError as exc:
            log.info("oldest message of %s %s queue %d: %s", addr, topic, queue_id, exc)
            return None
        if len(self._earliest) >= 1 << 16:
            self._earliest.clear()
        at = ms / 1000 if ms > 0 else None
        self._earliest[key] = (now, at)
        return at

    async def _group_names(self, addr: str) -> list[str]:
        try:
            table = await self.admin.group_configs(addr)
        except RemotingError as exc:
            log.info("group configs of %s: %s", addr, exc)
            return []
        return [g for g in table if g not in SYSTEM_GROUPS]

    async def _group_on(self, addr: str, group: str) -> tuple[ConsumeStats | None, ConsumerConnection | None]:
        return await group_on_broker(self.admin, addr, group)

    async def group_detail(self, group: str) -> GroupDetail:
        online = await connections(self.admin, group, known=True)  # listed: it exists
        try:
            queues = await progress(self.admin, group, topic=None, lag_over=None)
        except NotFoundError:
            queues = []
        return GroupDetail(
            group=group,
            queues=tuple(
                QueueOffset(
                    q.topic, q.broker_name, q.queue_id, q.max_offset, q.consumer_offset, q.lag, q.client_id
                )
                for q in queues
            ),
            clients=tuple(
                ClientView(c["client_id"], c["addr"], c["language"], c["version"]) for c in online["clients"]
            ),
        )

    # -------------------------------------------------------------------------------------- store

    async def _stores(self, masters: list[_Broker]) -> tuple[StoreView, ...]:
        return tuple(await asyncio.gather(*(self._store(b) for b in masters)))

    async def _store(self, broker: _Broker) -> StoreView:
        """The CommitLog's files from its min/max offsets; first writes from each file's first message
        (VIEW_MESSAGE_BY_ID at the file's start offset, cached: a file's first message never changes).
        Verdicts and last writes from the broker's own cleanup plan (mqctl's CLEAN_PLAN request) when it
        serves one; a RocketMQ broker does not, and there a file's last write is the next file's first."""
        settings = broker.settings
        assert settings is not None
        addr = broker.view.addr
        lo = broker.view.commitlog_min or 0
        hi = broker.view.commitlog_max or 0
        size = settings.file_size
        starts = list(range(lo - lo % size, hi, size))[-MAX_FILES:] if hi > lo else []
        firsts, plan = await asyncio.gather(
            asyncio.gather(*(self._first_write(addr, s) for s in starts)), self._plan(addr)
        )
        planned = {f.from_offset: f for f in plan.files} if plan is not None else {}
        files = []
        for i, start in enumerate(starts):
            active = i == len(starts) - 1
            row = planned.get(start)
            files.append(
                CommitLogFile(
                    start=start,
                    written=(hi - start) if active else size,
                    first_write=firsts[i],
                    last_write=row.mtime_ms / 1000 if row is not None else None if active else firsts[i + 1],
                    active=active,
                    reason=row.reason if row is not None else None,
                    unconsumed=row.unconsumed if row is not None else None,
                )
            )
        return StoreView(
            broker=broker.view.name,
            min_offset=lo,
            max_offset=hi,
            file_size=size,
            file_reserved_hours=settings.reserved_hours,
            disk_ratio=broker.view.disk_ratio,
            files=tuple(files),
            note=None
            if plan is not None
            else "no cleanup plan from this broker: last writes and verdicts "
            "estimated from the next file's first message",
            planned=plan is not None,
        )

    async def _plan(self, addr: str) -> PlanBody | None:
        """The broker's dry-run cleanup plan, or None from a broker without it (RocketMQ answers
        REQUEST_CODE_NOT_SUPPORTED)."""
        try:
            return await broker_plan(self.admin, addr)
        except RemotingError as exc:
            log.info("cleanup plan of %s: %s", addr, exc)
            return None

    async def _first_write(self, addr: str, start: int) -> float | None:
        cached = self._first_writes.get((addr, start))
        if cached is not None:
            return cached
        try:
            message = await self._limited(view(self.admin, addr, start))
        except (RemotingError, ValueError) as exc:
            log.debug("no message at %s offset %d: %s", addr, start, exc)
            return None
        self._first_writes[(addr, start)] = at = message.store_timestamp / 1000
        return at
