"""The ``MessageStore`` protocol the broker sees, and the read-path logic that both implementations
share (offset checks, the ConsumeQueue unit walk, search by time). What puts and reads return lives in
:mod:`store.results`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Container, Iterable
from typing import Protocol, runtime_checkable

from store.cleanup import CleanPlan
from store.commitlog import PutMessageStatus
from store.config import StoreConfig
from store.config_files import ConfigFiles
from store.errors import CorruptRecordError, DamagedUnitError
from store.ha import ReplicaStore
from store.message import TRANSACTION_TYPE_MASK, Message
from store.results import GetMessageStatus, GetResult, PutResult, QueryResult, SelectedMessage

log = logging.getLogger(__name__)

__all__ = [
    "ArrivalListener",
    "MessageStore",
    "PutMessageStatus",
    "batch_is_legal",
    "check_offset",
    "search_by_timestamp",
    "select_units",
]


ArrivalListener = Callable[[str, int, int], None]
"""``callback(topic, queue_id, max_offset)`` after new units were dispatched (long polling)."""


@runtime_checkable
class MessageStore(ReplicaStore, Protocol):
    """What the broker needs from a store: every store it runs on also replicates (HA,
    docs/replication.md §replication)."""

    config: StoreConfig
    configs: ConfigFiles

    def open(self) -> None: ...
    def start(self) -> None: ...
    def shutdown(self) -> None: ...
    def put_message(self, msg: Message) -> PutResult: ...
    def put_messages(self, batch: list[Message]) -> PutResult: ...
    def get_messages(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        tag_filter: Container[int] | None = None,
        *,
        defer_heal: bool = False,
    ) -> GetResult: ...
    def heal(self, damage: DamagedUnitError) -> None: ...
    def get_min_offset(self, topic: str, queue_id: int) -> int: ...
    def get_max_offset(self, topic: str, queue_id: int) -> int: ...
    def search_offset_by_timestamp(self, topic: str, queue_id: int, timestamp: int) -> int: ...
    def get_earliest_message_time(self, topic: str | None = None, queue_id: int = 0) -> int: ...
    def look_message_by_offset(self, phys_offset: int) -> SelectedMessage | None: ...
    def look_message_by_msg_id(self, msg_id: str) -> SelectedMessage | None: ...
    def query_message(
        self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int
    ) -> QueryResult: ...
    def get_store_timestamp(self, topic: str, queue_id: int, offset: int) -> int: ...
    @property
    def flushed_phy_offset(self) -> int: ...
    @property
    def max_phy_offset(self) -> int: ...
    @property
    def min_phy_offset(self) -> int: ...
    def topic_queue_table(self) -> dict[tuple[str, int], int]: ...
    def add_arrival_listener(self, listener: ArrivalListener) -> None: ...
    # retention (docs/store-format.md §expired-files): a store without files answers with the same shapes and
    # nothing to delete
    def delete_expired_files_manually(self) -> None: ...
    def cleanup_plan(self, *, manual: bool = True, config: StoreConfig | None = None) -> CleanPlan: ...
    def clean_expired_consume_queues(self) -> int: ...
    def delete_topics(self, topics: Container[str]) -> int: ...
    def disk_ratio(self) -> float: ...
    @property
    def disk_full(self) -> bool: ...


def batch_is_legal(batch: list[Message]) -> bool:
    """A batch is one (topic, queue), neither delayed nor transactional (docs/store-format.md §batches); else
    MESSAGE_ILLEGAL."""
    if not batch:
        return False
    first = batch[0]
    return not any(
        m.topic != first.topic
        or m.queue_id != first.queue_id
        or m.delay_level > 0
        or m.sys_flag & TRANSACTION_TYPE_MASK
        for m in batch
    )


def check_offset(offset: int, min_offset: int, max_offset: int) -> tuple[GetMessageStatus, int] | None:
    """Status and next offset when ``offset`` cannot be read from a queue holding [min, max); else None.

    The next offsets are the master's corrections in ``DefaultMessageStore.getMessage`` (4.9.8).
    """
    if max_offset == 0:
        return GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0
    if offset < min_offset:
        return GetMessageStatus.OFFSET_TOO_SMALL, min_offset
    if offset == max_offset:
        return GetMessageStatus.OFFSET_OVERFLOW_ONE, offset
    if offset > max_offset:
        return GetMessageStatus.OFFSET_OVERFLOW_BADLY, min_offset if min_offset == 0 else max_offset
    return None


RecordReader = Callable[[int, int, int], "tuple[memoryview, str] | None"]
"""``read(phys_offset, size, queue_offset)`` → (raw record view, file path), or None when the log no longer
has it (the queue offset lets a reader check that the unit points at its own record); raises
:class:`CorruptRecordError` (naming file and offset) for a record that fails validation."""


def select_units(
    res: GetResult,
    units: Iterable[tuple[int, int, int]],
    offset: int,
    max_count: int,
    tag_filter: Container[int] | None,
    read: RecordReader,
    roll_next_file: Callable[[int], int],
    *,
    max_bytes: int,
    max_messages: int,
) -> None:
    """Walk ConsumeQueue units from ``offset`` as ``getMessage`` does: filter by tags code, stop when
    the batch is full (count or bytes), skip to the next CommitLog file past removed data.
    Fills ``res.messages``, ``res.status`` and ``res.next_begin_offset``.
    """
    max_msgs = min(max_count, max_messages)
    limit = max(16000, max_count * 20) // 20  # Java counts this bound in ConsumeQueue bytes
    messages = res.messages
    total = 0
    next_file_start = -1
    i = 0
    for phys, size, tags in units:
        if i >= limit:
            break
        if next_file_start >= 0 and phys < next_file_start:
            i += 1
            continue
        if messages and (len(messages) >= max_msgs or total + size > max_bytes):
            break
        if tag_filter is not None and tags not in tag_filter:
            i += 1
            continue
        try:
            found = read(phys, size, offset + i)
        except CorruptRecordError as e:
            log.error("pull skips a damaged record: %s", e)
            i += 1
            continue
        if found is None:
            if not messages:
                res.status = GetMessageStatus.MESSAGE_WAS_REMOVING
            next_file_start = roll_next_file(phys)
            i += 1
            continue
        messages.append(SelectedMessage(phys, size, found[0], offset + i, tags, found[1]))
        total += size
        res.status = GetMessageStatus.FOUND
        next_file_start = -1
        i += 1
    res.next_begin_offset = offset + i


def search_by_timestamp(low: int, high: int, store_time_at: Callable[[int], int], timestamp: int) -> int:
    """Queue offset in [low, high] of the first message stored at ``timestamp``, else the nearest one.

    Same choice as RocketMQ's ``getOffsetInQueueByTime`` (exact match, else the closer of the last
    earlier and the first later message, ties to the earlier), over the whole range rather than one
    file picked by its mtime. ``store_time_at`` returns -1 for an unreadable offset.
    """
    if high < low:
        return low
    left = right = target = -1
    left_ts = right_ts = -1
    lo, hi = low, high
    while lo <= hi:
        mid = (lo + hi) // 2
        ts = store_time_at(mid)
        if ts < 0:
            break
        if ts == timestamp:
            target = mid
            hi = mid - 1
        elif ts > timestamp:
            right, right_ts = mid, ts
            hi = mid - 1
        else:
            left, left_ts = mid, ts
            lo = mid + 1
    if target != -1:
        return target
    if left_ts == -1:
        return right if right != -1 else low
    if right_ts == -1:
        return left
    return right if abs(timestamp - left_ts) > abs(timestamp - right_ts) else left
