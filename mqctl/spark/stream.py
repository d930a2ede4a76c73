"""``spark.readStream.format("rocketmq")``: micro-batches over the new offsets of every queue.

An offset, as Spark checkpoints it, is Kafka's shape: ``{"TOPIC": {"BROKER:QUEUE": next offset}}``.
Each micro-batch reads ``[start, end)`` of every queue, planned into input partitions by the batch
planner (:func:`mqctl.spark.cluster.split`), so the same batch id always reads the same messages and
a file sink's metadata log makes a restarted query write each message once.

Spark keeps no start for the first batch: after a driver dies between writing a batch's offsets and
committing it, it asks :meth:`initialOffset` again. So where a queue starts is pinned in the end
offset of the batch that first sees the queue, under ``"@from"`` (no topic can be named so): the
first batch pins every queue's ``startingOffsets`` (or the group's offsets), later ones each new
queue's earliest offset (as Kafka's source starts new partitions), and a replayed batch reads from the
pinned offsets whatever the cluster says by then.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from mqctl.errors import NotFoundError, UsageError
from mqctl.spark.cluster import (
    FileSizes,
    QueueInfo,
    QueueRange,
    ReadSpec,
    covered,
    discover,
    in_session,
    read_range,
    split,
    start_of,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Ranges(InputPartition):
    """Queue ranges of one broker group read one after the other by one task: a micro-batch of a few
    messages a queue is a task (and a file in a file sink) per broker group, not one per queue."""

    ranges: tuple[QueueRange, ...]


def pack(ranges: list[QueueRange], max_messages: int) -> list[Ranges]:
    """``ranges`` as tasks of one broker group each, of at most ``max_messages`` messages (a range is
    never cut here); the groups' tasks run side by side."""
    out: list[Ranges] = []
    for broker in sorted({r.broker_name for r in ranges}):
        group: list[QueueRange] = []
        count = 0
        for r in (r for r in ranges if r.broker_name == broker):
            if group and count + (r.end - r.start) > max_messages:
                out.append(Ranges(tuple(group)))
                group, count = [], 0
            group.append(r)
            count += r.end - r.start
        if group:
            out.append(Ranges(tuple(group)))
    return out


FROM = "@from"
"""The key of an end offset that pins where newly seen queues start (not a legal topic name)."""

Offsets = dict[str, dict[str, int]]
"""``{topic: {"BROKER:QUEUE": offset}}``."""


def max_per_trigger(options: Mapping[str, str]) -> int | None:
    """The ``maxOffsetsPerTrigger`` option: at most this many messages a micro-batch, over all queues."""
    value = {k.lower(): v for k, v in options.items()}.get("maxoffsetspertrigger")
    if value is None:
        return None
    try:
        limit = int(value)
    except ValueError:
        limit = 0
    if limit < 1:
        raise UsageError(f"option maxOffsetsPerTrigger {value!r}: expected a positive number of messages")
    return limit


def queues_of(offset: Mapping[str, Any]) -> Offsets:
    """An offset without its ``@from``."""
    return {t: dict(q) for t, q in offset.items() if t != FROM}


def starts_of(start: Mapping[str, Any], end: Mapping[str, Any]) -> Offsets:
    """Where each queue of a batch ``(start, end]`` starts: ``start``, then what ``end`` pinned."""
    out = queues_of(start)
    for topic, pinned in end.get(FROM, {}).items():
        out.setdefault(topic, {}).update(pinned)
    return out


def rate_limit(starts: Offsets, latest: Offsets, limit: int) -> Offsets:
    """``latest``, cut to about ``limit`` messages in all, each queue's share in proportion to what it has
    waiting, and at least one message for a queue that has any (Kafka's ``KafkaMicroBatchStream#rateLimit``)."""
    sizes = {
        (t, k): end - starts[t][k]
        for t, queues in latest.items()
        for k, end in queues.items()
        if end - starts.get(t, {}).get(k, end) > 0
    }
    total = sum(sizes.values())
    if total <= limit:
        return latest
    out: Offsets = {}
    for topic, queues in latest.items():
        out[topic] = {}
        for key, end in queues.items():
            size = sizes.get((topic, key))
            if size is None:
                out[topic][key] = end
                continue
            share = limit * size / total
            out[topic][key] = min(
                end, starts[topic][key] + (math.ceil(share) if share < 1 else math.floor(share))
            )
    return out


def _sorted(offsets: Offsets) -> Offsets:
    """Topics and queues in a stable order, so equal offsets are equal JSON in the checkpoint."""
    return {
        t: dict(sorted(q.items(), key=lambda kv: _queue_order(kv[0]))) for t, q in sorted(offsets.items())
    }


def _queue_order(key: str) -> tuple[str, int]:
    broker, _, queue = key.rpartition(":")
    return broker, int(queue)


def sink_files(out: str | Path) -> dict[str, int]:
    """The files a Structured Streaming file sink at ``out`` committed, each with the first batch id whose
    entry in its ``_spark_metadata`` log lists it (a compacted entry repeats earlier ones). Files of a
    batch the driver died in are on disk but not listed: read these, as Spark does, for exactly once."""
    log_dir = Path(out) / "_spark_metadata"
    found: dict[str, int] = {}
    entries = [p for p in log_dir.iterdir() if p.name.split(".")[0].isdigit()] if log_dir.is_dir() else []
    for entry in sorted(entries, key=lambda p: int(p.name.split(".")[0])):
        if entry.name.endswith(".tmp"):
            continue
        for line in entry.read_text().splitlines()[1:]:  # the first line is the log's version
            record = json.loads(line)
            if record.get("action", "add") == "add":
                found.setdefault(record["path"].removeprefix("file://"), int(entry.name.split(".")[0]))
    return found


class ClusterStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets from the cluster on the driver (Spark's planning worker keeps this object between calls);
    tasks pull their ranges as the batch reader's do."""

    def __init__(self, spec: ReadSpec, limit: int | None) -> None:
        self.spec = spec
        self.limit = limit
        self.sizes = FileSizes()
        self.target: Offsets | None = None
        """Trigger.AvailableNow: what the cluster held when the query started; nothing after it is read."""

    def initialOffset(self) -> dict[str, Any]:
        return {}  # nothing pinned yet: the first latestOffset pins every queue's start

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadAllAvailable() if self.limit is None else ReadMaxRows(self.limit)

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = in_session(self.spec.connection, self._latest_now)

    async def _latest_now(self, admin: Any) -> Offsets:
        latest: Offsets = {}
        for q in await discover(admin, self.spec, partial=True):
            latest.setdefault(q.topic, {})[q.key] = q.max_offset
        return latest

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        return in_session(self.spec.connection, lambda admin: self._latest(admin, start, limit))

    async def _latest(self, admin: Any, start: Mapping[str, Any], limit: ReadLimit) -> dict[str, Any]:
        first = not start
        found = await discover(admin, self.spec, partial=True)
        if first:
            self.spec.starting.check("startingOffsets", covered(found))
        starts = queues_of(start)
        pinned: Offsets = {}
        latest: Offsets = {t: dict(q) for t, q in starts.items()}  # a group that does not answer stays put
        for q in found:
            if q.key not in starts.get(q.topic, {}):
                if self.target is not None and q.key not in self.target.get(q.topic, {}):
                    continue  # appeared after an AvailableNow query started
                begin = await start_of(admin, self.spec, q) if first else q.min_offset
                pinned.setdefault(q.topic, {})[q.key] = begin
                starts.setdefault(q.topic, {})[q.key] = begin
            end = max(q.max_offset, starts[q.topic][q.key])
            if self.target is not None:
                goal = self.target.get(q.topic, {}).get(q.key, starts[q.topic][q.key])
                end = min(end, max(goal, starts[q.topic][q.key]))
            latest.setdefault(q.topic, {})[q.key] = end
        if isinstance(limit, ReadMaxRows):
            latest = rate_limit(starts, latest, limit.max_rows)
        if not pinned and latest == queues_of(start):
            return dict(start)  # nothing new: Spark plans no batch
        out: dict[str, Any] = dict(_sorted(latest))
        if pinned:
            out[FROM] = _sorted(pinned)
        return out

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        ranges = in_session(self.spec.connection, lambda admin: self._plan(admin, start, end))
        return list(pack(ranges, self.spec.max_messages))

    async def _plan(self, admin: Any, start: Mapping[str, Any], end: Mapping[str, Any]) -> list[QueueRange]:
        import dataclasses

        starts, ends = starts_of(start, end), queues_of(end)
        todo = {
            (t, k): (starts.get(t, {}).get(k), e)
            for t, queues in ends.items()
            for k, e in queues.items()
            if e > starts.get(t, {}).get(k, e)
        }
        if not todo:
            return []
        spec = dataclasses.replace(self.spec, topics=tuple(sorted({t for t, _ in todo})), pattern=None)
        found = await discover(admin, spec, partial=True)
        where: dict[tuple[str, str], QueueInfo] = {(q.topic, q.key): q for q in found}
        out: list[QueueRange] = []
        for (topic, key), (begin, stop) in sorted(todo.items()):
            q = where.get((topic, key))
            if q is None:
                raise NotFoundError(
                    f"{topic} queue {key}: no broker of its group answers (or the topic left it); "
                    f"offsets {begin}..{stop - 1} cannot be read now"
                )
            assert begin is not None
            if begin < q.min_offset:
                log.warning(
                    "%s %s: messages %d..%d are gone (retention); reading from %d",
                    topic,
                    key,
                    begin,
                    q.min_offset - 1,
                    q.min_offset,
                )
                begin = q.min_offset
            size = await self.sizes.of(admin, q.addrs[0])
            out.extend(split(q, begin, stop, self.spec.max_messages, size))
        return out

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, Ranges)
        for r in partition.ranges:
            yield from read_range(r, self.spec.connection, with_body=self.spec.with_body)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: offsets live in Spark's checkpoint, not in a consumer group (as Kafka's source)."""
