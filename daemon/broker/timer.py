"""Timer messages: any delivery time up to ``timerMaxDelaySec``, as RocketMQ 5.x has them
(docs/store-format.md §timer-messages).

A send carrying ``TIMER_DELIVER_MS``, ``TIMER_DELAY_SEC`` or ``TIMER_DELAY_MS`` is parked as 5.x's
``HookUtils.handleScheduleMessage`` does: stored in queue 0 of ``rmq_sys_wheel_timer`` with
``TIMER_OUT_MS`` (the due time) and ``REAL_TOPIC``/``REAL_QID``. A time already past is stored in its
topic at once; a ``DELAY`` level wins over the timer properties; beyond ``timerMaxDelaySec`` the send is
refused (``MESSAGE_ILLEGAL``, 5.x's ``WHEEL_TIMER_MSG_ILLEGAL``).

The service reads the timer queue as it grows into a heap of due times and re-puts each message into
its real topic when due (5.x's ``TimerMessageStore#convertMessage``: ``REAL_TOPIC``/``REAL_QID``
dropped, ``TIMER_OUT_MS`` kept so the copy is never parked again, ``UNIQ_KEY`` and keys kept so the
message is found by its id). Each delivery is then logged in ``store.timer_state``; the window between
the re-put and that one ``write()`` is where a SIGKILL delivers a message twice (at-least-once).

Progress files are this broker's own, not replicated: when they are missing, or may be older than the
timer queue (a DLedger member elected leader: another leader may have delivered since), each timer parked
before that start is checked before its delivery: a copy already in its real topic (same ``UNIQ_KEY`` and
``TIMER_OUT_MS``, found through the IndexFile) means delivered, nothing is put again; likewise a roll copy
in the timer queue for a timer due to be rolled.

A recall is logged too, as 5.x logs it: a marker record in the timer queue (``TIMER_DEL_UNIQKEY`` = the
unique key, ``REAL_TOPIC``), held by a DLedger quorum before the recall is answered, so every member that
reads the queue (a leader elected later) cancels the timer as the one that answered did.

Work on the event loop comes in slices of at most ``BATCH`` messages with a yield between them.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from daemon.broker.processors import fail
from daemon.broker.schedule import copy_to
from daemon.lifecycle import cancel_tasks, supervise
from daemon.remoting.bodies import PermName
from daemon.remoting.codes import ResponseCode
from store.errors import StoreError
from store.message import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TIMER_DEQUEUE_MS,
    PROPERTY_TIMER_ENQUEUE_MS,
    PROPERTY_TIMER_OUT_MS,
    PROPERTY_TIMER_ROLL_TIMES,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT_STORE_MSG_OK,
    Message,
    StoredMessage,
)
from store.names import TIMER_GROUP, TIMER_TOPIC
from store.record import RecordInfo, read_record_info
from store.results import GetMessageStatus
from store.timer_state import PendingTimer, TimerProgress, TimerSnapshot

if TYPE_CHECKING:
    from daemon.broker.context import BrokerContext

log = logging.getLogger(__name__)

#: How often the timer queue is read for new messages when nothing falls due sooner.
TICK = 0.1
#: Timer messages read or re-put per slice of event-loop time (each slice well under a millisecond).
BATCH = 16
#: Seconds before a failed re-put (disk full, store shut down) is tried again.
RETRY_AFTER = 1.0
#: mqctl's GET_BROKER_RUNTIME_INFO keys: the pending total and the earliest due time, plus one
#: ``timerPending_<topic>`` = ``count,next due ms`` per real topic.
TIMER_RUNTIME_KEYS = frozenset({"timerPendingMessages", "timerNextDueMs"})
PENDING_KEY_PREFIX = "timerPending_"
#: A recall's marker in the timer queue: the unique key of the timer it cancels (5.x's MessageConst name).
PROPERTY_TIMER_DEL_UNIQKEY: Final = "TIMER_DEL_UNIQKEY"
TIMER_PROPS = (PROPERTY_TIMER_DELIVER_MS, PROPERTY_TIMER_DELAY_SEC, PROPERTY_TIMER_DELAY_MS)


@dataclass(frozen=True, slots=True)
class TopicBacklog:
    """The timers pending for one real topic."""

    topic: str
    pending: int
    next_due_ms: int


_JAVA_LONG: Final = re.compile(r"[+-]?[0-9]{1,19}")


def java_long(text: str) -> int:
    """``Long.parseLong`` of what clients write: ASCII decimal digits with an optional sign, within a
    long; ValueError else (Python's ``int`` would also take spaces and ``_``)."""
    if not _JAVA_LONG.fullmatch(text):
        raise ValueError(f"{text!r} is no long")
    value = int(text)
    if not -(2**63) <= value < 2**63:
        raise ValueError(f"{text!r} is out of a long's range")
    return value


def due_time(props: dict[str, str], now_ms: int) -> int | None:
    """The wanted delivery time of a send's properties (5.x precedence: delay in seconds, in ms, then
    the instant), None without timer properties; ValueError when the value is no long."""
    if PROPERTY_TIMER_DELAY_SEC in props:
        return now_ms + java_long(props[PROPERTY_TIMER_DELAY_SEC]) * 1000
    if PROPERTY_TIMER_DELAY_MS in props:
        return now_ms + java_long(props[PROPERTY_TIMER_DELAY_MS])
    if PROPERTY_TIMER_DELIVER_MS in props:
        return java_long(props[PROPERTY_TIMER_DELIVER_MS])
    return None


def delivered_timer(old: StoredMessage, now_ms: int) -> tuple[str, int, dict[str, str]]:
    """Where a due timer message goes and the properties it carries there."""
    props = dict(old.properties)
    topic = props.pop(PROPERTY_REAL_TOPIC, old.topic)
    queue_id = int(props.pop(PROPERTY_REAL_QUEUE_ID, "0"))
    props[PROPERTY_TIMER_ENQUEUE_MS] = str(old.store_timestamp)
    props[PROPERTY_TIMER_DEQUEUE_MS] = str(now_ms)
    props[PROPERTY_WAIT_STORE_MSG_OK] = "false"
    return topic, queue_id, props


class TimerMessageService:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker
        store = broker.store
        directory = store.configs.directory
        self.progress = TimerProgress(
            os.path.join(store.config.store_path_root_dir, "timer") if directory is not None else None
        )
        self._pending: dict[int, PendingTimer] = {}
        #: Taken from `_pending` while their re-put runs (a recall cannot take them; a snapshot keeps them).
        self._in_flight: dict[int, PendingTimer] = {}
        self._heap: list[tuple[int, int]] = []
        self._by_key: dict[tuple[str, str], int] = {}
        #: Per real topic: how many are pending, and a heap of (due, queue offset) whose top is pending
        #: (older entries below it are dropped lazily), so the backlog costs O(topics), not O(timers).
        self._topics: dict[str, tuple[list[int], list[tuple[int, int]]]] = {}
        self._enqueued = 0
        #: Offsets logged as done before this start: skipped while the queue is read up to its end.
        self._done_before: set[int] | None = None
        #: Timer queue offsets below this were parked before a start whose progress may be stale: each is
        #: delivered only when no delivered copy of it is found (see _delivered_before).
        self._verify_below = 0
        #: Timers found delivered already (by another broker) and not put again.
        self.found = 0
        self._changed = False
        self._retry_at = 0.0
        self.delivered = 0
        self._roll_ms = broker.config.timer_roll_window_sec * 1000
        self._tasks: list[asyncio.Task[None]] = []

    # ------------------------------------------------------------------ lifecycle

    def load(self, *, takeover: bool = False) -> None:
        """Read the snapshot and done logs (at store open, in a worker thread). `takeover`: the progress may
        be older than the timer queue (another broker delivered meanwhile), as when it is missing."""
        snapshot, done = self.progress.load()
        if self.progress.created or takeover:
            self._verify_below = self.broker.store.get_max_offset(TIMER_TOPIC, 0)
        self._enqueued = snapshot.enqueued
        # one pass with plain locals: a start pays this per pending timer
        pending, wakes, by_key = self._pending, self._heap, self._by_key
        per_topic: dict[str, list[tuple[int, int]]] = {}
        roll = self._roll_ms
        for p in snapshot.pending:
            offset, due, _phys, _size, stored, topic, key = p
            if offset in done:
                continue
            pending[offset] = p
            wakes.append((min(due, stored + roll), offset))
            if key:
                by_key[(topic, key)] = offset
            dues = per_topic.get(topic)
            if dues is None:
                dues = per_topic[topic] = []
            dues.append((due, offset))
        heapq.heapify(wakes)
        for topic, dues in per_topic.items():
            heapq.heapify(dues)
            self._topics[topic] = ([len(dues)], dues)
        self._done_before = done

    def start(self) -> None:
        self._tasks = [supervise(self._run, "timer-delivery"), supervise(self._snapshots, "timer-snapshot")]

    async def stop(self) -> None:
        await cancel_tasks(self._tasks)
        if self._tasks and self._done_before is None:
            await self._snapshot()
        self._tasks = []
        self.progress.close()

    # ------------------------------------------------------------------ sends

    def park(self, topic: str, queue_id: int, props: dict[str, str]) -> tuple[str, int]:
        """Where a send with these properties is stored, rewriting ``props`` for a timer message as
        5.x's ``HookUtils#transformTimerMessage`` does; raises for a time beyond ``timerMaxDelaySec``."""
        if topic == TIMER_TOPIC or PROPERTY_TIMER_OUT_MS in props:
            return topic, queue_id  # a timer message already (5.x's double check)
        if props.get(PROPERTY_DELAY_TIME_LEVEL, "0") not in ("", "0"):
            for key in TIMER_PROPS:  # the delay level wins
                props.pop(key, None)
            return topic, queue_id
        now = int(time.time() * 1000)
        try:
            due = due_time(props, now)
        except ValueError:
            raise fail(
                ResponseCode.MESSAGE_ILLEGAL, "timer message illegal: the delivery time is no decimal long"
            ) from None
        if due is None or due <= now:
            return topic, queue_id
        config = self.broker.config
        if not config.timer_wheel_enable:
            raise fail(
                ResponseCode.SYSTEM_ERROR, "accurate timer message is not enabled, timerWheelEnable is false"
            )
        max_ms = config.timer_max_delay_sec * 1000
        if due - now > max_ms:
            raise fail(
                ResponseCode.MESSAGE_ILLEGAL,
                f"timer message illegal, the delay time should not be bigger than the max delay {max_ms}ms",
            )
        props[PROPERTY_TIMER_OUT_MS] = str(due)
        props[PROPERTY_REAL_TOPIC] = topic
        props[PROPERTY_REAL_QUEUE_ID] = str(queue_id)
        self.broker.topics.create_system_like(TIMER_TOPIC, 1, PermName.READ_WRITE)
        return TIMER_TOPIC, 0

    async def recall(self, topic: str, unique_key: str) -> bool:
        """Cancel a pending timer message of `topic` by its unique key; False when none is pending
        (unknown, already delivered or being delivered; or this broker does not deliver timers). The
        recall's marker is stored first (held by a DLedger quorum), so a leader elected later cancels it
        too; raises (SYSTEM_ERROR) when the marker could not be stored, and then nothing is cancelled here
        unless the marker is read from the queue later (it was stored after all)."""
        if not self._tasks:
            return False
        self._read_new(limit=None)
        offset = self._by_key.get((topic, unique_key))
        if offset is None or offset not in self._pending:
            return False
        marker = Message(
            TIMER_TOPIC,
            b"",
            0,
            properties={PROPERTY_TIMER_DEL_UNIQKEY: unique_key, PROPERTY_REAL_TOPIC: topic},
            born_timestamp=int(time.time() * 1000),
        )
        result = await self.broker.put(marker)
        if not result.ok:
            raise fail(
                ResponseCode.SYSTEM_ERROR,
                f"timer message {unique_key} of {topic} not recalled: its marker was not stored"
                f" ({result.status.value})",
            )
        return self._cancel(topic, unique_key)

    def _cancel(self, topic: str, unique_key: str) -> bool:
        """Take the pending timer of (topic, unique key) out; False when none is pending (or its re-put
        is running)."""
        offset = self._by_key.get((topic, unique_key))
        if offset is None:
            return False
        entry = self._pending.pop(offset, None)
        if entry is None:
            return False  # its re-put is running
        del self._by_key[(topic, unique_key)]
        self._forget(entry)
        self.progress.record_done(offset)
        self._changed = True
        log.info("timer message %s of %s recalled (due %d)", unique_key, topic, entry.due_ms)
        return True

    # ------------------------------------------------------------------ what is pending

    def backlog(self, *, fresh: bool = False) -> list[TopicBacklog]:
        """Pending timers per real topic, sorted by topic; `fresh` (on the event loop only) first takes a
        batch of what was sent since the last read. Safe from another thread without it. A broker that
        does not deliver timers (a slave) reports none."""
        if not self._tasks:
            return []
        if fresh:
            self._read_new()
        rows = []
        for topic, (count, heap) in sorted(list(self._topics.items())):
            with contextlib.suppress(IndexError):  # emptied meanwhile (another thread's read)
                rows.append(TopicBacklog(topic, count[0], heap[0][0]))
        return rows

    def runtime_info(self) -> dict[str, str]:
        """The backlog as GET_BROKER_RUNTIME_INFO reports it (see TIMER_RUNTIME_KEYS)."""
        backlog = self.backlog(fresh=True)
        info = {
            "timerPendingMessages": str(sum(b.pending for b in backlog)),
            "timerNextDueMs": str(min((b.next_due_ms for b in backlog), default=0)),
        }
        for b in backlog:
            info[PENDING_KEY_PREFIX + b.topic] = f"{b.pending},{b.next_due_ms}"
        return info

    @property
    def pending(self) -> int:
        return len(self._pending) + len(self._in_flight)

    # ------------------------------------------------------------------ the work

    def _add(self, entries: Iterable[PendingTimer]) -> None:
        for p in entries:
            self._pending[p.queue_offset] = p
            heapq.heappush(self._heap, (self._wake(p), p.queue_offset))
            count, heap = self._topic_row(p.topic)
            count[0] += 1
            heapq.heappush(heap, (p.due_ms, p.queue_offset))
            if p.unique_key:
                self._by_key[(p.topic, p.unique_key)] = p.queue_offset

    def _topic_row(self, topic: str) -> tuple[list[int], list[tuple[int, int]]]:
        row = self._topics.get(topic)
        if row is None:
            row = self._topics[topic] = ([0], [])
        return row

    def _forget(self, entry: PendingTimer) -> None:
        """Count `entry` (no longer pending nor in flight) out of its topic's backlog."""
        count, heap = self._topics[entry.topic]
        count[0] -= 1
        if count[0] == 0:
            del self._topics[entry.topic]
            return
        while heap and heap[0][1] not in self._pending and heap[0][1] not in self._in_flight:
            heapq.heappop(heap)

    def _read_new(self, limit: int | None = BATCH) -> int:
        """Take up to `limit` new timer messages from the queue; returns how many offsets were read."""
        store = self.broker.store
        read = 0
        while limit is None or read < limit:
            result = store.get_messages(TIMER_GROUP, TIMER_TOPIC, 0, self._enqueued, BATCH)
            if result.status in (
                GetMessageStatus.OFFSET_TOO_SMALL,
                GetMessageStatus.OFFSET_OVERFLOW_BADLY,
                GetMessageStatus.OFFSET_FOUND_NULL,
                GetMessageStatus.MESSAGE_WAS_REMOVING,
            ):
                if result.next_begin_offset == self._enqueued:
                    return read  # nothing to skip to (a queue being removed): try again next tick
                self._enqueued = result.next_begin_offset
                continue
            if not result.messages:
                if self._done_before is not None:  # caught up: nothing older than this start remains
                    self._done_before = None
                    self._caught_up()
                return read
            for selected in result.messages:  # properties only: no hosts, body copy or CRC
                self._take(selected.queue_offset, read_record_info(selected.raw, 0))
            read += len(result.messages)
            self._enqueued = result.next_begin_offset
            self._changed = True
        return read

    def _caught_up(self) -> None:
        if self._verify_below:
            log.info(
                "timer progress missing or taken over: timers parked below queue offset %d are checked"
                " against their real topic before delivery",
                self._verify_below,
            )

    def _take(self, queue_offset: int, info: RecordInfo) -> None:
        """Take one parked record as pending (unless logged done before this start)."""
        if self._done_before is not None and queue_offset in self._done_before:
            return
        props = info.properties
        recalled = props.get(PROPERTY_TIMER_DEL_UNIQKEY)
        if recalled is not None:  # a recall's marker (see recall): a no-op where it was answered
            self._cancel(props.get(PROPERTY_REAL_TOPIC, ""), recalled)
            return
        try:
            due = int(props[PROPERTY_TIMER_OUT_MS])
            topic = props[PROPERTY_REAL_TOPIC]
        except (KeyError, ValueError):
            log.warning("timer queue offset %d has no due time or real topic: skipped", queue_offset)
            return
        key = props.get(PROPERTY_UNIQ_KEY, "")
        pending = PendingTimer(
            queue_offset, due, info.commit_log_offset, info.size, info.store_timestamp, topic, key
        )
        self._add([pending])

    def _wake(self, p: PendingTimer) -> int:
        """When the service must act on `p`: its due time, or sooner to roll it (see _deliver)."""
        return min(p.due_ms, p.stored_ms + self._roll_ms)

    async def _run(self) -> None:
        while True:
            try:
                while self._read_new() >= BATCH:
                    await asyncio.sleep(0)
                await self._deliver_due()
            except Exception:
                log.exception("timer delivery failed")
                self._retry_at = time.monotonic() + RETRY_AFTER
            await asyncio.sleep(self._wait())

    def _wait(self) -> float:
        delay = TICK
        if self._heap:
            delay = min(delay, max(0.0, self._heap[0][0] / 1000 - time.time()))
        return max(delay, self._retry_at - time.monotonic(), 0.0)

    async def _deliver_due(self) -> int:
        """Re-put every due timer message into its real topic (and roll those parked too long); returns
        how many moved."""
        if time.monotonic() < self._retry_at:
            return 0
        moved = 0
        heap = self._heap
        while heap and heap[0][0] <= time.time() * 1000:
            wake, offset = heapq.heappop(heap)
            entry = self._pending.pop(offset, None)
            if entry is None:
                continue  # recalled, or delivered already
            if self._wake(entry) != wake:  # not this timer's current heap entry
                self._pending[offset] = entry
                heapq.heappush(heap, (self._wake(entry), offset))
                continue
            self._in_flight[offset] = entry
            outcome = None
            try:
                outcome = await self._deliver(entry)
            except Exception:
                log.exception("timer re-put of %d failed", offset)
            finally:  # not done (failed, raised, or cancelled by a stop): pending again, still counted
                del self._in_flight[offset]
                if outcome is None:
                    self._pending[offset] = entry
                    heapq.heappush(heap, (self._wake(entry), offset))
            if outcome is None:
                self._retry_at = time.monotonic() + RETRY_AFTER
                return moved
            self._done(entry, delivered=outcome == "delivered")
            moved += 1
            if moved % BATCH == 0:
                await asyncio.sleep(0)
        return moved

    async def _deliver(self, entry: PendingTimer) -> str | None:
        """One re-put: ``delivered``; ``rolled`` for a timer not due yet (re-put into the timer topic as
        it is with ``TIMER_ROLL_TIMES`` one higher; the reader takes the copy as a new pending timer);
        ``dropped`` when its record or its topic is gone for good; ``found`` when another broker delivered
        it already (see _delivered_before); None when the put failed (tried again later)."""
        try:
            selected = self.broker.store.look_message_by_offset(entry.phys_offset)
        except StoreError as e:
            log.error("timer message at %d unreadable, dropped: %s", entry.phys_offset, e)
            return "dropped"
        if selected is None:
            log.error("timer message at %d is gone from the CommitLog, dropped", entry.phys_offset)
            return "dropped"
        now = int(time.time() * 1000)
        roll = entry.due_ms > now
        if roll:
            topic, queue_id, props = TIMER_TOPIC, 0, dict(selected.stored.properties)
            rolls = int(props.get(PROPERTY_TIMER_ROLL_TIMES, "0"))
            if entry.queue_offset < self._verify_below and self._delivered_before(entry, rolled_from=rolls):
                return "found"  # rolled already: the copy is a pending timer of its own
            props[PROPERTY_TIMER_ROLL_TIMES] = str(rolls + 1)
            props[PROPERTY_WAIT_STORE_MSG_OK] = "false"
        else:
            if entry.queue_offset < self._verify_below and self._delivered_before(entry):
                return "found"
            topic, queue_id, props = delivered_timer(selected.stored, now)
            if self.broker.topics.get(topic) is None:
                # deleted while it waited: its queue must not hold it for a topic of that name made later
                log.warning(
                    "timer message at %d is for topic %s, deleted since: dropped", entry.phys_offset, topic
                )
                return "dropped"
        result = await self.broker.put(copy_to(selected.stored, topic, queue_id, props))
        if not result.ok:
            log.warning("timer re-put of %d to %s failed: %s", entry.queue_offset, topic, result.status.value)
            return None
        if roll:
            return "rolled"
        self.broker.stats.on_put(topic, 1, result.wrote_bytes)
        return "delivered"

    def _delivered_before(self, entry: PendingTimer, *, rolled_from: int | None = None) -> bool:
        """Whether the real topic holds this timer's delivered copy: its unique key (the IndexFile's
        ``topic#key``) with the same due time (a producer's retry of the send is another timer).
        `rolled_from`: whether the timer topic holds a roll copy of it rolled more times than that."""
        if not entry.unique_key:
            return False
        due = str(entry.due_ms)
        topic = entry.topic if rolled_from is None else TIMER_TOPIC
        # the copy is stored after the parked record; the index keeps times to the second only
        begin = entry.stored_ms - 1000
        result = self.broker.store.query_message(topic, entry.unique_key, 32, begin, 2**62)
        for selected in result.messages:
            m = selected.stored
            if m.uniq_key != entry.unique_key or m.properties.get(PROPERTY_TIMER_OUT_MS) != due:
                continue
            if rolled_from is None or int(m.properties.get(PROPERTY_TIMER_ROLL_TIMES, "0")) > rolled_from:
                log.info(
                    "timer message %s of %s (due %d) was %s already: not put again",
                    entry.unique_key,
                    entry.topic,
                    entry.due_ms,
                    "delivered" if rolled_from is None else "rolled",
                )
                self.found += 1
                return True
        return False

    def _done(self, entry: PendingTimer, *, delivered: bool) -> None:
        self.progress.record_done(entry.queue_offset)
        self._forget(entry)
        key = (entry.topic, entry.unique_key)
        if entry.unique_key and self._by_key.get(key) == entry.queue_offset:  # not a rolled copy's
            del self._by_key[key]
        self.delivered += delivered
        self._changed = True

    async def _snapshots(self) -> None:
        while True:
            await asyncio.sleep(self.broker.config.timer_snapshot_interval / 1000)
            if self._changed and self._done_before is None:
                try:
                    await self._snapshot()
                except Exception:
                    log.exception("timer snapshot failed")
                    self._changed = True  # try again at the next interval

    async def _snapshot(self) -> None:
        """Start a new done log and write what is pending now as its base (the write off the loop)."""
        self._changed = False
        generation = self.progress.rotate()
        pending = [*self._pending.values(), *self._in_flight.values()]
        await asyncio.to_thread(
            self.progress.write_snapshot, TimerSnapshot(generation, self._enqueued, pending)
        )
