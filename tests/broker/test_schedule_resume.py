"""A delay level's offset where its queue has no entry: the takeover pass and the delivery both resume
where 4.9.8's ScheduleMessageService does (the queue's first entry, the next file, or its end)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

import pytest

from daemon.broker.context import BrokerContext
from daemon.broker.schedule import ScheduleMessageService
from store.config_files import DelayOffsetManager
from store.results import GetMessageStatus, GetResult

END = 4


class Level:
    """Level 1's queue, read as the store answers an offset it holds no entry at."""

    def __init__(self, answers: dict[int, GetResult]) -> None:
        self.answers = answers
        self.config = SimpleNamespace(delay_levels_ms=lambda: [1000])
        self.configs = SimpleNamespace(delay_offsets=DelayOffsetManager(None))

    def get_messages(self, group: str, topic: str, queue_id: int, offset: int, max_count: int) -> GetResult:
        end = GetResult(GetMessageStatus.OFFSET_OVERFLOW_ONE, next_begin_offset=END, max_offset=END)
        return self.answers.get(offset, end)


def _service(start: int, answer: GetResult) -> ScheduleMessageService:
    service = ScheduleMessageService(cast(BrokerContext, SimpleNamespace(store=Level({start: answer}))))
    service.offsets.set_offset(1, start)
    return service


HOLES = {
    # expired entries: the queue starts past the offset
    "too-small": (0, GetResult(GetMessageStatus.OFFSET_TOO_SMALL, next_begin_offset=END, min_offset=END)),
    # a ConsumeQueue file gone: the next file
    "found-null": (0, GetResult(GetMessageStatus.OFFSET_FOUND_NULL, next_begin_offset=END)),
    # the CommitLog file under the entries removed
    "was-removing": (0, GetResult(GetMessageStatus.MESSAGE_WAS_REMOVING, next_begin_offset=END)),
    # past the queue's end (a progress synced from a leader whose queue is longer): its end, as 4.9.8's
    # schedule service resumes, not the pull's correction to 0, which would deliver the level again
    "past-the-end": (
        9,
        GetResult(GetMessageStatus.OFFSET_OVERFLOW_BADLY, next_begin_offset=0, max_offset=END),
    ),
}


@pytest.mark.parametrize(("start", "answer"), HOLES.values(), ids=HOLES.keys())
async def test_the_takeover_pass_goes_on_past_entries_the_store_no_longer_has(
    start: int, answer: GetResult
) -> None:
    """The pass stopped at the first read without entries: the delivered entries after it were delivered
    again."""
    service = _service(start, answer)
    assert await service.skip_delivered(1) == 0
    assert service.offsets.offset(1) == END


@pytest.mark.parametrize(("start", "answer"), HOLES.values(), ids=HOLES.keys())
async def test_the_delivery_resumes_where_the_pass_does(start: int, answer: GetResult) -> None:
    service = _service(start, answer)
    assert await service.deliver_due(1) == 0
    assert service.offsets.offset(1) == END


async def test_a_level_past_an_empty_queue_resumes_at_its_start() -> None:
    """A progress past an empty level (synced from a leader, or a store's level queue gone) stayed there: once
    entries came, the read past their end jumped to it, and the first ones were never delivered."""
    service = _service(9, GetResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE, next_begin_offset=0))
    assert await service.deliver_due(1) == 0
    assert service.offsets.offset(1) == 0
