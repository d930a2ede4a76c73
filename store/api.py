"""The ``MessageStore`` protocol the broker sees, and the logic that both implementations share (search by
time here; the offset checks and the ConsumeQueue unit walk in :mod:`store.reads`, compiled, re-exported).
What puts and reads return lives in :mod:`store.results`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Container
from typing import Protocol, runtime_checkable

from store.cleanup import CleanPlan
from store.clock import Clock
from store.commitlog import PutMessageStatus
from store.config import StoreConfig
from store.config_files import ConfigFiles
from store.consumequeue import QueueHandle
from store.errors import DamagedUnitError
from store.ha import ReplicaStore
from store.message import TRANSACTION_TYPE_MASK, Message
from store.reads import RecordReader, check_offset, select_units
from store.results import GetResult, PutResult, QueryResult, SelectedMessage

log = logging.getLogger(__name__)

__all__ = [
    "ArrivalListener",
    "MessageStore",
    "PutMessageStatus",
    "RecordReader",
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
    clock: Clock  # the wall clock the store stamps messages with

    def open(self) -> None:
        """Lock the directory, load every file, recover the CommitLog and the queues; serves nothing yet."""

    def start(self) -> None:
        """Dispatch what the ConsumeQueues miss, mark the store running (``abort``), start its threads."""

    def shutdown(self) -> None:
        """Stop the threads, flush everything, write the checkpoint, clear ``abort`` and release the lock."""

    def queue_handle(self, topic: str, queue_id: int) -> QueueHandle:
        """A handle a caller keeps for puts to one queue (a broker's per-topic send state): a put given it
        finds the queue without looking it up, and still lands where a put without it would."""

    def put_message(self, msg: Message, handle: QueueHandle | None = None) -> PutResult:
        """Append one message, dispatch it to its queue and the index; with SYNC_FLUSH, wait for the fsync.
        ``handle`` is :meth:`queue_handle`'s for the message's queue, or None.

        Refusals (full disk, slave, illegal message) come back as the result's status, not as exceptions."""

    def put_messages(self, batch: list[Message], handle: QueueHandle | None = None) -> PutResult:
        """Append a batch for one (topic, queue) at consecutive queue offsets, all in one file; a batch
        :func:`batch_is_legal` refuses is answered MESSAGE_ILLEGAL."""

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
    ) -> GetResult:
        """Read up to ``max_count`` messages of a queue from ``offset``, as RocketMQ's ``getMessage``.

        ``tag_filter`` holds the tag hash codes a subscription accepts (``None``: all); ``group`` is for
        stats only. With ``defer_heal`` a damaged unit raises :class:`DamagedUnitError` instead of being
        rebuilt inline, so an event loop can run :meth:`heal` in a worker thread and read again."""

    def heal(self, damage: DamagedUnitError) -> None:
        """Rebuild the queue a read found damaged from the CommitLog (puts wait; other reads do not)."""

    def get_min_offset(self, topic: str, queue_id: int) -> int:
        """The queue's first readable offset; 0 for a queue the store does not have."""

    def get_max_offset(self, topic: str, queue_id: int) -> int:
        """The queue's next offset (one past its last message); 0 for a queue the store does not have."""

    def nothing_at(self, topic: str, queue_id: int, offset: int) -> bool:
        """Whether :meth:`get_messages` from ``offset`` would find nothing yet, with a status a pull answers
        PULL_NOT_FOUND for: ``offset`` is the queue's end (or 0 of an empty or absent queue). From the
        queue's offsets alone: a long-polling pull is held on it without a read."""

    def consume_queue_units(
        self, topic: str, queue_id: int, index: int, count: int
    ) -> tuple[int, int, list[tuple[int, int, int]] | None] | None:
        """``(min offset, max offset, units)`` of a queue for QUERY_CONSUME_QUEUE: up to ``count`` units
        (CommitLog offset, size, tags code) from queue offset ``index``, no further than the end of the
        file holding it (as ConsumeQueue#getIndexBuffer reads); units ``None`` for an index the queue does
        not hold. None for a queue the store does not have."""

    def search_offset_by_timestamp(self, topic: str, queue_id: int, timestamp: int) -> int:
        """Queue offset of the first message stored at ``timestamp`` (ms), else the nearest one
        (:func:`search_by_timestamp`)."""

    def get_earliest_message_time(self, topic: str | None = None, queue_id: int = 0) -> int:
        """Store time (ms) of the oldest message in the store, or in one queue; -1 when there is none."""

    def look_message_by_offset(self, phys_offset: int) -> SelectedMessage | None:
        """The record at a CommitLog offset; ``None`` outside the log. Raises :class:`CorruptRecordError`
        when no valid record starts there."""

    def look_message_by_msg_id(self, msg_id: str) -> SelectedMessage | None:
        """The record an offset msgId points at (its address part is not checked against this store)."""

    def query_message(self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int) -> QueryResult:
        """Messages of ``topic`` stored in [``begin_ms``, ``end_ms``] whose KEYS hold ``key`` or whose
        UNIQ_KEY is ``key``, at most ``max_num``; every index hit is read back and compared."""

    def get_store_timestamp(self, topic: str, queue_id: int, offset: int) -> int:
        """Store time (ms) of the message at a queue offset; -1 when there is none."""

    @property
    def flushed_phy_offset(self) -> int:
        """CommitLog offset known to be on disk (SYNC_FLUSH puts wait for it to pass their end)."""

    @property
    def max_phy_offset(self) -> int:
        """Where the CommitLog ends: the offset the next record gets."""

    @property
    def min_phy_offset(self) -> int:
        """Where the CommitLog begins: the first offset retention has not deleted."""

    def topic_queue_table(self) -> dict[tuple[str, int], int]:
        """``(topic, queue_id) → next queue offset`` for every queue the store has."""

    def queue_keys(self) -> list[tuple[str, int]]:
        """``(topic, queue_id)`` of every queue the store has: a copy taken at once, so a caller can read
        their offsets a few at a time (with 10,000 queues :meth:`topic_queue_table` is long)."""

    def add_arrival_listener(self, listener: ArrivalListener) -> None:
        """Call ``listener`` after each put's records are dispatched, on the putting thread (an asyncio
        broker hops to its loop itself)."""

    def remove_arrival_listener(self, listener: ArrivalListener) -> None:
        """Stop calling ``listener`` (one :meth:`add_arrival_listener` registered)."""

    # retention (docs/store-format.md §expired-files): a store without files answers with the same shapes and nothing to delete
    def delete_expired_files_manually(self, up_to: int | None = None) -> None:
        """The admin ``DELETE_EXPIRED_COMMITLOG`` request: expired files go at the next cleanup runs (those
        ending at or below CommitLog offset ``up_to`` only, when given: the plan an operator executed)."""

    def cleanup_plan(self, *, manual: bool = True, config: StoreConfig | None = None) -> CleanPlan:
        """What a cleanup run would delete now and whose unconsumed messages go with it, changing nothing
        (``manual``: as after ``DELETE_EXPIRED_COMMITLOG``; ``config`` overrides the retention settings)."""

    def clean_expired_consume_queues(self) -> int:
        """``CLEAN_EXPIRED_CONSUMEQUEUE``: destroy queues whose every message is below the CommitLog's
        start; how many were destroyed."""

    def delete_topics(self, topics: Container[str]) -> int:
        """``DELETE_TOPIC_IN_BROKER``: destroy the topics' queues and forget their offsets, so a re-created
        topic starts at 0 (their CommitLog records stay until they expire); how many queues went."""

    def disk_ratio(self) -> float:
        """Usage of the CommitLog's partition as the retention watermarks see it (``commitLogDiskRatio``)."""

    def write_refusal(self) -> str | None:
        """Why the store refuses puts now (runtime info ``storeWriteRefused``), or None."""

    @property
    def disk_full(self) -> bool:
        """Usage above the warning watermark: puts are refused until cleanup frees space."""


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
