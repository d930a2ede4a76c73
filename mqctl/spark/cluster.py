"""The ``rocketmq`` PySpark data source: a running cluster's queues, read over the remoting protocol.

``spark.read.format("rocketmq").option("namesrv", "HOST:9876").option("topic", "Orders").load()``

Planning (on the driver, in Spark's planning worker) asks the cluster through mqctl's admin client:
the route of each topic (broker groups, their readable queues, master and slave addresses), each
queue's stored offsets, and where the start and end options put each queue. It makes one input
partition per (broker, queue, offset range), cutting ranges longer than ``maxMessagesPerPartition``.
Each task then pulls its range with PULL_MESSAGE as the tools group (nothing is committed), from the
master, or a slave of its group while the master does not answer, as RocketMQ's clients read.

A pull answer carries the stored CommitLog records back to back, so the task decodes them with the
same decoder as the ``rocketmq-commitlog`` source (:mod:`mqctl.spark.decode`): both sources give the
same rows, column for column, for the same messages. The ``file`` column is derived from the physical
offset and the broker's ``mappedFileSizeCommitLog``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition

from mqctl.errors import NotFoundError, UsageError
from mqctl.spark import CLUSTER_FORMAT_NAME
from mqctl.spark.connection import Connection, connection_of, flag
from mqctl.spark.decode import batches, scan, spark_ddl
from store import CorruptRecordError

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_MAX_MESSAGES = 100_000
"""Messages per input partition unless ``maxMessagesPerPartition`` says otherwise."""
DEFAULT_FILE_SIZE = 1 << 30
"""RocketMQ's default ``mappedFileSizeCommitLog``, for a broker that does not tell its own."""
_PULL_BATCH = 32  # what a broker answers at most per pull (maxTransferCountOnMessageInMemory)
_PULLS_IN_FLIGHT = 16  # a task's pulls at once: one at a time, a read waits a round trip per 32 messages
_DECODE_BYTES = 8 << 20  # pulled bytes decoded together into one Arrow batch
_EARLIEST, _LATEST = -2, -1  # per-queue JSON values, as Kafka's


@dataclass(frozen=True)
class QueueRange(InputPartition):
    """Queue offsets ``[start, end)`` of one queue; ``addrs`` is the master first, then its slaves."""

    topic: str
    broker_name: str
    queue_id: int
    start: int
    end: int
    addrs: tuple[str, ...]
    file_size: int


@dataclass(frozen=True)
class Bound:
    """Where a read starts or ends in every queue: ``earliest``, ``latest``, a store time (epoch ms:
    the first message stored at or after it), or per-queue offsets (``{topic: {"broker:queue": n}}``,
    -2 earliest, -1 latest; queues left out take ``default``)."""

    kind: str
    at_ms: int = 0
    offsets: Mapping[str, Mapping[str, int]] | None = None
    default: str = "earliest"

    @classmethod
    def parse(cls, text: str | None, default: str, option: str) -> Bound:
        value = (text or default).strip()
        if value in ("earliest", "latest"):
            return cls(value, default=default)
        if value.startswith("{"):
            try:
                raw = json.loads(value)
            except ValueError as exc:
                raise UsageError(f"{option}: not JSON: {exc}") from None
            if not isinstance(raw, dict) or not all(
                isinstance(q, dict) and all(isinstance(n, int) and n >= _EARLIEST for n in q.values())
                for q in raw.values()
            ):
                raise UsageError(f'{option}: expected {{"TOPIC": {{"BROKER:QUEUE": OFFSET, ...}}}}')
            return cls("offsets", offsets=raw, default=default)
        from mqctl.timespec import parse_time

        return cls(
            "time", at_ms=parse_time(value, now_ms=int(time.time() * 1000), flag=option), default=default
        )

    def check(self, option: str, queues: Mapping[str, set[str]]) -> None:
        """Refuse per-queue offsets for a topic or queue the read does not cover (a typo reads nothing)."""
        for topic, wanted in (self.offsets or {}).items():
            if topic not in queues:
                raise UsageError(f"{option} names topic {topic!r}, which this read does not cover")
            unknown = sorted(set(wanted) - queues[topic])
            if unknown:
                known = ", ".join(sorted(queues[topic]))
                raise UsageError(
                    f"{option} names {', '.join(unknown)} of {topic!r}, which has no such queue "
                    f'(its queues: {known}; keys are "BROKER:QUEUE")'
                )


@dataclass(frozen=True)
class ReadSpec:
    """Everything a read plans from, out of the options."""

    connection: Connection
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    group: str | None = None
    starting: Bound = Bound("earliest")
    ending: Bound = Bound("latest", default="latest")
    max_messages: int = DEFAULT_MAX_MESSAGES
    with_body: bool = True


def read_spec(
    options: Mapping[str, str], *, streaming: bool = False, connection: Connection | None = None
) -> ReadSpec:
    """The options of a read (names case-insensitive, as Spark hands them over). A stream starts at
    ``latest`` unless told otherwise and has no end, as Spark's Kafka source. ``connection``: one resolved
    already (the driver's), in place of the options' resolved again."""
    opts = {k.lower(): v for k, v in options.items()}
    if streaming and opts.get("endingoffsets"):
        raise UsageError("option endingOffsets: a stream has no end (it is for spark.read only)")
    topics = tuple(t.strip() for t in opts.get("topic", "").split(",") if t.strip())
    pattern = opts.get("topicpattern") or None
    if bool(topics) == bool(pattern):
        raise UsageError(f"the {CLUSTER_FORMAT_NAME} source wants one of the options topic or topicPattern")
    from store import legal_name

    bad = [t for t in topics if not legal_name(t)]
    if bad:
        raise UsageError(
            f"option topic: {bad[0]!r} is not a topic name (a regular expression goes in topicPattern)"
        )
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise UsageError(f"option topicPattern: {exc}") from None
    try:
        max_messages = int(opts.get("maxmessagesperpartition", DEFAULT_MAX_MESSAGES))
    except ValueError:
        max_messages = 0
    if max_messages < 1:
        raise UsageError("option maxMessagesPerPartition: expected a positive number of messages")
    return ReadSpec(
        connection or connection_of(opts),
        topics,
        pattern,
        opts.get("group") or None,
        Bound.parse(opts.get("startingoffsets"), "latest" if streaming else "earliest", "startingOffsets"),
        Bound.parse(opts.get("endingoffsets"), "latest", "endingOffsets"),
        max_messages,
        flag(opts.get("with_body"), "with_body", True),
    )


# ------------------------------------------------------------------------------------- planning


async def _topics(admin: Any, spec: ReadSpec) -> list[str]:
    """The topics named, or every user topic matching ``topicPattern`` (no retry, DLQ or system topic:
    not the broker's own, nor the ones named after a cluster or broker)."""
    from store import (
        AUTO_CREATE_TOPIC,
        BENCHMARK_TOPIC,
        DLQ_GROUP_TOPIC_PREFIX,
        INTERNAL_TOPIC_PREFIX,
        NOT_ALLOWED_SEND_TOPICS,
        REPLY_TOPIC_SUFFIX,
        RETRY_GROUP_TOPIC_PREFIX,
        SYSTEM_TOPIC_PREFIX,
    )

    if spec.pattern is None:
        return list(spec.topics)
    info = await admin.cluster_info()
    system = {AUTO_CREATE_TOPIC, BENCHMARK_TOPIC, *NOT_ALLOWED_SEND_TOPICS, *info.broker_addr_table}
    system.update(n for c in info.cluster_addr_table for n in (c, c + REPLY_TOPIC_SUFFIX))
    prefixes = (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX, INTERNAL_TOPIC_PREFIX, SYSTEM_TOPIC_PREFIX)
    wanted = re.compile(spec.pattern)
    return sorted(
        t
        for t in await admin.topic_list()
        if t not in system and not t.startswith(prefixes) and wanted.fullmatch(t)
    )


async def _resolve(
    admin: Any, bound: Bound, addr: str, topic: str, queue: str, queue_id: int, lo: int, hi: int
) -> int:
    kind = bound.kind
    if kind == "offsets":
        value = (bound.offsets or {}).get(topic, {}).get(queue)
        if value is None:
            kind = bound.default
        else:
            return lo if value == _EARLIEST else hi if value == _LATEST else value
    if kind == "earliest":
        return lo
    if kind == "latest":
        return hi
    from mqctl.admin.messaging import first_stored_at

    return await first_stored_at(admin, addr, topic, queue_id, bound.at_ms, lo, hi)


async def _file_size(admin: Any, addr: str) -> int:
    from daemon.remoting.errors import RemotingError

    try:
        config = await admin.broker_config(addr)
    except RemotingError as exc:
        log.debug("%s does not tell its CommitLog file size (%s): assuming 1 GiB", addr, exc)
        return DEFAULT_FILE_SIZE
    return int(config.get("mappedFileSizeCommitLog", DEFAULT_FILE_SIZE))


@dataclass(frozen=True)
class QueueInfo:
    """One readable queue as the cluster answers it now: ``addrs`` is the master (or, while it is down, a
    slave) first, then the others of its group."""

    topic: str
    broker_name: str
    queue_id: int
    addrs: tuple[str, ...]
    min_offset: int
    max_offset: int

    @property
    def key(self) -> str:
        """The queue's key in per-queue offset JSON: ``BROKER:QUEUE``."""
        return f"{self.broker_name}:{self.queue_id}"


async def discover(admin: Any, spec: ReadSpec, *, partial: bool = False) -> list[QueueInfo]:
    """Every queue of the topics a read covers, with its stored offsets, in topic, broker and queue order;
    ``partial``: of the broker groups that answer (a stream goes on while one group is down)."""
    from mqctl.services.topics import queue_offsets, route_or_not_found

    topics = await _topics(admin, spec)
    if not topics:
        raise NotFoundError(f"no topic matches topicPattern {spec.pattern!r}")
    found: list[QueueInfo] = []
    for topic in topics:
        route = await route_or_not_found(admin, topic)
        groups = {b.broker_name: b.broker_addrs for b in route.broker_datas}
        for name, addr, queue_id, offsets in await queue_offsets(admin, topic, reads=True, partial=partial):
            others = [a for _, a in sorted(groups.get(name, {}).items()) if a != addr]
            found.append(
                QueueInfo(topic, name, queue_id, (addr, *others), offsets.min_offset, offsets.max_offset)
            )
    return found


async def start_of(admin: Any, spec: ReadSpec, queue: QueueInfo) -> int:
    """Where a read starts in ``queue``: the group's committed offset if it has one, else ``startingOffsets``."""
    if spec.group is not None:
        committed = await admin.consumer_offset(queue.addrs[0], spec.group, queue.topic, queue.queue_id)
        if committed is not None and committed >= 0:
            return max(committed, queue.min_offset)
    return max(await _bound(admin, spec.starting, queue), queue.min_offset)


async def _bound(admin: Any, bound: Bound, queue: QueueInfo) -> int:
    q = queue
    return await _resolve(admin, bound, q.addrs[0], q.topic, q.key, q.queue_id, q.min_offset, q.max_offset)


def covered(queues: list[QueueInfo]) -> dict[str, set[str]]:
    """The ``BROKER:QUEUE`` keys of each topic, for :meth:`Bound.check`."""
    out: dict[str, set[str]] = {}
    for q in queues:
        out.setdefault(q.topic, set()).add(q.key)
    return out


class FileSizes:
    """Each broker's ``mappedFileSizeCommitLog``, asked once per address."""

    def __init__(self) -> None:
        self._sizes: dict[str, int] = {}

    async def of(self, admin: Any, addr: str) -> int:
        if addr not in self._sizes:
            self._sizes[addr] = await _file_size(admin, addr)
        return self._sizes[addr]


def split(queue: QueueInfo, start: int, end: int, max_messages: int, file_size: int) -> list[QueueRange]:
    """``[start, end)`` of ``queue`` as input partitions of at most ``max_messages`` messages each."""
    return [
        QueueRange(
            queue.topic,
            queue.broker_name,
            queue.queue_id,
            a,
            min(a + max_messages, end),
            queue.addrs,
            file_size,
        )
        for a in range(start, end, max_messages)
    ]


async def bounds(admin: Any, spec: ReadSpec) -> list[tuple[QueueInfo, int, int]]:
    """Every queue a read covers with where it starts and ends (``start >= end``: nothing to read)."""
    found = await discover(admin, spec)
    spec.starting.check("startingOffsets", covered(found))
    spec.ending.check("endingOffsets", covered(found))
    return [
        (q, await start_of(admin, spec, q), min(await _bound(admin, spec.ending, q), q.max_offset))
        for q in found
    ]


async def plan(admin: Any, spec: ReadSpec) -> list[QueueRange]:
    """The input partitions of a read, in topic, broker and queue order."""
    sizes = FileSizes()
    out: list[QueueRange] = []
    for q, start, end in await bounds(admin, spec):
        if start < end:
            out.extend(split(q, start, end, spec.max_messages, await sizes.of(admin, q.addrs[0])))
    return out


def in_session(connection: Connection, work: Callable[[Any], Awaitable[T]]) -> T:
    """``work(admin)`` in its own admin session (synchronous, for Spark's planning worker)."""
    from daemon.remoting.loop import run

    async def session() -> T:
        async with connection.admin() as admin:
            return await work(admin)

    return run(session())


def plan_read(spec: ReadSpec) -> list[QueueRange]:
    """:func:`plan` in its own admin session."""
    return in_session(spec.connection, lambda admin: plan(admin, spec))


# --------------------------------------------------------------------------------------- reading


async def _pull_from(admin: Any, part: QueueRange, offset: int, failed: set[str]) -> Any:
    """One pull at ``offset``, from the master, or the next address of the group that answers."""
    from daemon.remoting.errors import RemotingConnectError, RemotingTimeoutError
    from mqctl.admin.messaging import pull

    last: Exception | None = None
    for addr in part.addrs:
        if addr in failed:
            continue
        try:
            return await pull(
                admin, addr, part.topic, part.queue_id, offset,
                max_nums=min(_PULL_BATCH, part.end - offset), decode=False,
            )  # fmt: skip
        except (RemotingConnectError, RemotingTimeoutError) as exc:
            if addr == part.addrs[0] and len(part.addrs) > 1:
                log.warning("%s: %s does not answer (%s); reading from a slave", part.broker_name, addr, exc)
            failed.add(addr)
            last = exc
    assert last is not None
    raise last


async def _pull_round(admin: Any, part: QueueRange, offset: int, failed: set[str]) -> tuple[list[bytes], int]:
    """Up to ``_PULLS_IN_FLIGHT`` pulls at once from ``offset`` on, at the offsets they would follow on at
    when each answers a full batch (queue offsets are contiguous): the answers in order, up to the first
    that ends short (big messages, the broker's byte cap), and the offset after the last one taken."""
    starts = list(range(offset, part.end, _PULL_BATCH))[:_PULLS_IN_FLIGHT]
    answers = await asyncio.gather(*(_pull_from(admin, part, at, failed) for at in starts))
    bodies: list[bytes] = []
    for at, result in zip(starts, answers, strict=True):
        if at != offset:
            break  # the answer before ended short: pull again from where it ended
        if not result.found or result.next_begin_offset <= offset:
            raise NotFoundError(
                f"{part.topic} queue {part.queue_id} on {part.broker_name}: no message at offset "
                f"{offset} (the broker holds {result.min_offset}..{result.max_offset - 1})"
            )
        bodies.append(result.body)
        offset = min(result.next_begin_offset, part.end)
    return bodies, offset


def _decode(chunks: list[bytes], part: QueueRange, with_body: bool) -> Iterator[pa.RecordBatch]:
    buf = np.frombuffer(b"".join(chunks), dtype=np.uint8)
    found = scan(buf)
    if found.reason != "end":
        raise CorruptRecordError(
            None, found.stop, f"pull answer of {part.topic} queue {part.queue_id} ({part.broker_name}): "
            f"{found.reason} {found.detail}".strip(),
        )  # fmt: skip
    yield from batches(buf, found, None, part.file_size, with_body=with_body)


def read_range(part: QueueRange, connection: Connection, *, with_body: bool) -> Iterator[pa.RecordBatch]:
    """Pull ``part`` and decode it, a few MiB at a time; fails if the brokers no longer hold all of it."""
    from daemon.remoting.loop import loop_factory

    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        admin = connection.admin()
        failed: set[str] = set()
        try:
            offset, chunks, size = part.start, [], 0
            while offset < part.end:
                bodies, offset = runner.run(_pull_round(admin, part, offset, failed))
                chunks.extend(bodies)
                size += sum(len(b) for b in bodies)
                if size >= _DECODE_BYTES:
                    yield from _decode(chunks, part, with_body)
                    chunks, size = [], 0
            if chunks:
                yield from _decode(chunks, part, with_body)
        finally:
            runner.run(admin.client.close())


def told(connection: Connection, work: Callable[[], Iterable[T]]) -> Iterator[T]:
    """What ``work()`` yields, a failure in it raised as the :class:`~mqctl.errors.MqctlError` mqctl would
    report (a refusal's hint knowing what signed): the driver finds its class and line at the end of the worker's
    traceback (:func:`mqctl.spark.export.spark_failure`) and exits as the command would have."""
    from mqctl import auth
    from mqctl.errors import MqctlError, translate

    try:
        yield from work()
    except MqctlError:
        raise
    except Exception as exc:
        with auth.signing_as(connection.credentials):
            error = translate(exc)
        raise error from exc


class ClusterReader(DataSourceReader):
    """Partitions planned on the driver; each task pulls its queue range."""

    def __init__(self, spec: ReadSpec) -> None:
        self.spec = spec

    def partitions(self) -> list[InputPartition]:
        return list(told(self.spec.connection, lambda: plan_read(self.spec)))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, QueueRange):  # Spark's single placeholder when nothing is planned
            return iter(())
        spec = self.spec
        return told(spec.connection, lambda: read_range(partition, spec.connection, with_body=spec.with_body))


class RocketMQDataSource(DataSource):
    """``spark.read.format("rocketmq")`` and ``spark.readStream.format("rocketmq")``: see
    docs/operations.md (Spark) for their options."""

    @classmethod
    def name(cls) -> str:
        return CLUSTER_FORMAT_NAME

    def schema(self) -> str:
        opts = {k.lower(): v for k, v in self.options.items()}
        return spark_ddl(flag(opts.get("with_body"), "with_body", True))

    def reader(self, schema: Any) -> DataSourceReader:
        return ClusterReader(read_spec(self.options))

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        from mqctl.spark.stream import ClusterStreamReader, max_per_trigger

        return ClusterStreamReader(read_spec(self.options, streaming=True), max_per_trigger(self.options))


def register(spark: Any) -> None:
    """Make ``spark.read.format("rocketmq")`` (and ``rocketmq-commitlog``) known to a session."""
    from mqctl.spark.session import register_sources

    register_sources(spark)
