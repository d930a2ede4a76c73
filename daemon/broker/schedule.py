"""Delivery of delayed messages: the 18 levels of SCHEDULE_TOPIC_XXXX (docs/wire-protocol.md §delay-levels).

The store parks a message with `DELAY=n` in queue n−1 of SCHEDULE_TOPIC_XXXX and writes its due time
into the consume-queue tags code. This service walks each level's queue in order, re-puts due messages
into their `REAL_TOPIC`/`REAL_QID` (keeping `DELAY` as 4.9.8 does, with `WAIT=false`) and records its progress per
level in the store's `delayOffset.json` manager.

That progress is local and written now and then (a DLedger follower takes its leader's every metadata sync,
a broker persists its own every `flushConsumerOffsetInterval`): after an election or an unclean start it
may be behind what was delivered. So a takeover pass (as the timers have) first walks each level from
its stored offset and skips every entry whose delivered copy is in its real topic already (the copy keeps
`UNIQ_KEY`; the IndexFile holds `topic#UNIQ_KEY`), so delivery resumes where it stopped. One level is
delivered in order, so its delivered entries follow its stored offset without a gap: the pass stops at a
level's first entry not delivered, a lookup per entry delivered since the progress was written, in
batches with a yield between them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from daemon.broker.retry import copy_of
from daemon.lifecycle import cancel_tasks, supervise
from store.message import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_WAIT_STORE_MSG_OK,
    Message,
    StoredMessage,
)
from store.names import SCHEDULE_TOPIC
from store.results import GetMessageStatus, GetResult

if TYPE_CHECKING:
    from daemon.broker.context import BrokerContext

log = logging.getLogger(__name__)

SCHEDULE_GROUP = "SCHEDULE_CONSUMER"
TICK = 0.1  # Java re-checks a level 100 ms after finding nothing due
BATCH = 32


def delivered_copy(old: StoredMessage) -> Message:
    """The message as it must reach its real topic.

    As 4.9.8 does, the stored properties keep ``DELAY``, ``REAL_TOPIC`` and ``REAL_QID`` (store-a's
    delivered copies show it); only the in-memory level is 0 so the copy is not parked again.
    """
    props = dict(old.properties)
    props[PROPERTY_WAIT_STORE_MSG_OK] = "false"
    topic = props.get(PROPERTY_REAL_TOPIC, old.topic)
    return copy_to(old, topic, int(props.get(PROPERTY_REAL_QUEUE_ID, "0")), props)


def copy_to(old: StoredMessage, topic: str, queue_id: int, props: dict[str, str]) -> Message:
    """A re-put of a parked message (delay level or timer) into `topic`/`queue_id`, with `props`:
    body, flags, born and store hosts as stored, never waiting for a flush and never delayed again."""
    return copy_of(old, topic, queue_id, props, delay_time_level=0)


class ScheduleMessageService:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker
        self.levels = len(broker.store.config.delay_levels_ms())
        self.offsets = broker.store.configs.delay_offsets
        self._task: asyncio.Task[None] | None = None
        #: Set by take_over: the stored progress may be behind the deliveries (see the module's doc).
        self._verify = False
        #: Entries the takeover pass found delivered already (not put again).
        self.found = 0
        #: CommitLog offsets of the delivered copies the takeover pass matched: one copy, one entry.
        self._claimed: set[int] = set()

    def take_over(self) -> None:
        """Before start: the stored progress may be older than the deliveries (an elected member's synced
        copy, or a broker's own after an unclean exit): check the delivered copies first."""
        self._verify = True

    def start(self) -> None:
        self._task = supervise(self._run, "schedule-delivery")

    async def stop(self) -> None:
        await cancel_tasks([self._task])

    async def _run(self) -> None:
        if self._verify:
            for level in range(1, self.levels + 1):
                try:
                    await self.skip_delivered(level)
                except Exception:
                    log.exception("checking delay level %d for delivered messages failed", level)
            self._verify = False
            self._claimed.clear()
        while True:
            for level in range(1, self.levels + 1):
                try:
                    await self.deliver_due(level)
                except Exception:
                    log.exception("delivering delay level %d failed", level)
            await asyncio.sleep(TICK)

    async def deliver_due(self, level: int) -> int:
        """Deliver what is due in `level`; returns how many messages moved."""
        moved = 0
        while (result := self._read(level)) is not None:
            now = int(time.time() * 1000)
            for selected in result.messages:
                if selected.tags_code > now:  # the tags code holds the due time
                    return moved
                put = await self.broker.put(delivered_copy(selected.stored))
                if not put.ok:
                    log.warning(
                        "delay level %d: re-put of offset %d failed: %s",
                        level,
                        selected.queue_offset,
                        put.status.value,
                    )
                    return moved
                self.offsets.set_offset(level, selected.queue_offset + 1)
                moved += 1
            self.offsets.set_offset(level, max(self.offsets.offset(level), result.next_begin_offset))
        return moved

    async def skip_delivered(self, level: int) -> int:
        """The takeover pass of `level`: move its offset past the entries delivered already; returns how
        many it skipped."""
        skipped = 0
        while (result := self._read(level)) is not None:
            offset = self.offsets.offset(level)
            for selected in result.messages:
                if selected.queue_offset < offset:
                    continue
                if not self._delivered_before(selected.stored):
                    if skipped:
                        log.info(
                            "delay level %d: %d messages were delivered already, not put again",
                            level,
                            skipped,
                        )
                    return skipped
                self.offsets.set_offset(level, selected.queue_offset + 1)
                skipped += 1
                self.found += 1
            await asyncio.sleep(0)  # a batch at a time: requests are served between them
        return skipped

    def _read(self, level: int) -> GetResult | None:
        """The next batch of `level`'s entries at its offset, moved past any the store no longer has
        (:meth:`_moved_past`); None at the queue's end."""
        while True:
            offset = self.offsets.offset(level)
            result = self.broker.store.get_messages(SCHEDULE_GROUP, SCHEDULE_TOPIC, level - 1, offset, BATCH)
            if result.messages:
                return result
            if not self._moved_past(level, offset, result):
                return None

    def _moved_past(self, level: int, offset: int, result: GetResult) -> bool:
        """After a read of `level` at `offset` that returned no entry: move the offset to where 4.9.8's
        ScheduleMessageService resumes (the queue's first entry when it is below it, its end when it is
        past it, 0 past an empty one, the next file past removed or damaged entries); whether it moved."""
        if result.status == GetMessageStatus.OFFSET_OVERFLOW_BADLY:
            resume = result.max_offset  # (a pull's correction to 0 would deliver the level again)
        elif result.status in _NOTHING_THERE:
            resume = result.next_begin_offset
        elif result.status == GetMessageStatus.NO_MESSAGE_IN_QUEUE and offset > 0:
            resume = (
                0  # past an empty queue: its first entries must not be skipped when they come (4.9.8: max)
            )
        else:
            return False  # at the end of the queue, or no queue
        if resume == offset:
            return False
        log.warning(
            "delay level %d: no entry at offset %d (%s): resumes at %d",
            level,
            offset,
            result.status.value,
            resume,
        )
        self.offsets.set_offset(level, resume)
        return True

    def _delivered_before(self, parked: StoredMessage) -> bool:
        """Whether the real topic holds this parked message's delivered copy: one stored after it, with its
        unique key, born time, reconsume times, body and level (the copy keeps ``DELAY``), and not matched to
        another entry by this pass. A consumer's next send-back of the same message is parked again with one
        more reconsume time; a client may set one key on different messages; the same message sent back
        twice is two entries, each delivered."""
        key = parked.uniq_key
        if not key:
            return False  # nothing to find it by: delivered again at worst (at-least-once)
        level = parked.properties.get(PROPERTY_DELAY_TIME_LEVEL)
        topic = parked.properties.get(PROPERTY_REAL_TOPIC, parked.topic)
        begin = parked.store_timestamp - 1000  # the index keeps times to the second only
        found = self.broker.store.query_message(topic, key, 32, begin, 2**62).messages
        for m in sorted((selected.stored for selected in found), key=_in_log_order):
            if (
                m.commit_log_offset > parked.commit_log_offset
                and m.uniq_key == key
                and m.born_timestamp == parked.born_timestamp
                and m.reconsume_times == parked.reconsume_times
                and m.body_crc == parked.body_crc
                and m.properties.get(PROPERTY_DELAY_TIME_LEVEL) == level
                and m.commit_log_offset not in self._claimed
            ):
                self._claimed.add(m.commit_log_offset)  # (the earliest: one level delivers in order)
                return True
        return False


def _in_log_order(m: StoredMessage) -> int:
    return m.commit_log_offset


#: Reads that return no entry at an offset although the queue goes on past it.
_NOTHING_THERE = frozenset(
    {
        GetMessageStatus.OFFSET_TOO_SMALL,
        GetMessageStatus.OFFSET_FOUND_NULL,
        GetMessageStatus.MESSAGE_WAS_REMOVING,
        GetMessageStatus.NO_MATCHED_MESSAGE,  # (damaged records skipped)
    }
)
