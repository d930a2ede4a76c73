"""A pull's read of one queue, shared by both stores: the offset checks, the ConsumeQueue unit walk and
the check of each unit against the record it points at.

A module of its own so that the compiled build (``scripts/build_native.py``) covers them: the compiled
engine calls them on every read (a held pull's wake-up reads once), and an interpreted frame there is
paid per read. :mod:`store.api` (the ``MessageStore`` protocol, which cannot be compiled) re-exports
:func:`check_offset` and :func:`select_units`; :mod:`store.heal` builds its repairs on
:func:`record_problem`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Container, Iterable
from typing import Final

from store.commitlog import CommitLog
from store.consumequeue import ConsumeQueue
from store.errors import CorruptRecordError, DamagedUnitError
from store.mapped_file import MappedFile
from store.message import MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2
from store.record import RECORD_IDENTITY, body_crc_problem, record_identity
from store.results import GetMessageStatus, GetResult, SelectedMessage

# Each line under the logger name it had before these moved here (an operator's filters name them): the
# reader's under store.heal's (it is the read side of healing), a pull's skip under store.api's.
log = logging.getLogger("store.heal")
pull_log = logging.getLogger("store.api")

__all__ = ["LMQ_PREFIX", "RecordReader", "UnitReader", "check_offset", "record_problem", "select_units"]

#: Light message queues (multi-dispatch, docs/store-format.md §properties-and-message-ids): their units
#: point at other topics' records.
LMQ_PREFIX: Final = "%LMQ%"

_ROOM: Final = RECORD_IDENTITY.size

RecordReader = Callable[[int, int, int], "tuple[memoryview, str] | None"]
"""``read(phys_offset, size, queue_offset)`` → (raw record view, file path), or None when the log no longer
has it (the queue offset lets a reader check that the unit points at its own record); raises
:class:`CorruptRecordError` (naming file and offset) for a record that fails validation."""


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
            pull_log.error("pull skips a damaged record: %s", e)
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


def record_problem(
    cl: CommitLog, phys: int, size: int, topic: bytes, queue_id: int, queue_offset: int | None = None
) -> str | None:
    """Why the unit ``(phys, size)`` of queue ``topic``/``queue_id`` (at ``queue_offset`` if given) does
    not point at its record; ``None`` when it does. A unit below the CommitLog's first file is not judged
    (its record expired)."""
    if phys < cl.min_offset or cl.set_aside.get(phys) == size:  # expired, or set aside (reads skip it)
        return None
    if size <= 0 or phys < 0:
        return "is not a valid unit"
    mf = cl.files.find_file(phys)
    if mf is None or phys - mf.file_from_offset >= mf.wrote_position:
        return f"points past the CommitLog end {cl.max_offset}"
    pos = phys - mf.file_from_offset
    try:
        r_size, r_qid, r_qoff, r_phys, _ts, r_topic = record_identity(mf.view, pos, mf.wrote_position)
    except CorruptRecordError as e:
        return f"points at no record ({e.reason})"
    if r_phys != phys:
        return f"points inside a record (the record there says it starts at {r_phys})"
    if r_size != size:
        return f"has size {size} but the record's TOTALSIZE is {r_size}"
    if r_topic != topic or r_qid != queue_id:
        return f"points at a record of {r_topic.decode('utf-8', 'replace')}/{r_qid}"
    if queue_offset is not None and r_qoff != queue_offset:
        return f"at queue offset {queue_offset} points at the record of queue offset {r_qoff}"
    return None


class UnitReader:
    """The record reader for a pull from one queue (:data:`RecordReader`): each unit is checked against
    the header of the record it points at (size, magic, queue id and offset, offset; one unpack, so pulls
    stay fast; the topic is checked at start-up). A damaged unit raises :class:`DamagedUnitError`
    (``strict``), else it is skipped like a removed record and logged at ERROR (after a rebuild that
    could not reach it). A record below ``crc_checked_from`` (recovery did not check its body) is
    checked once read; a damaged one goes to ``set_aside_read`` and is never served."""

    def __init__(
        self,
        cl: CommitLog,
        cq: ConsumeQueue,
        strict: bool,
        crc_checked_from: int,
        set_aside_read: Callable[[str, int, int, str], None],
    ) -> None:
        self.cl = cl
        self.topic = cq.topic
        self.queue_id = cq.queue_id
        self.strict = strict
        self.lmq = cq.topic.startswith(LMQ_PREFIX)
        self.crc_checked_from = crc_checked_from
        self.set_aside_read = set_aside_read

    def __call__(self, phys: int, size: int, queue_offset: int) -> tuple[memoryview, str] | None:
        cl = self.cl
        set_aside = cl.set_aside  # damaged records recovery kept in place: never served
        mf: MappedFile | None = cl.files.find_file(phys)
        if mf is not None:  # the hot path: one unpack of the record's header fields, one compare
            pos = phys - mf.file_from_offset
            if pos + size <= mf.wrote_position and pos + _ROOM <= mf.file_size:
                own = True
                if not self.lmq:
                    fields = RECORD_IDENTITY.unpack_from(mf.view, pos)
                    own = (
                        fields[0] == size
                        and (fields[1] == MESSAGE_MAGIC_CODE or fields[1] == MESSAGE_MAGIC_CODE_V2)
                        and fields[2] == self.queue_id
                        and fields[3] == queue_offset
                        and fields[4] == phys
                    )
                if own:
                    # never served: the pull skips it (a set-aside record's damage may lie outside
                    # its body, where the body CRC cannot see it)
                    if set_aside and phys in set_aside:
                        raise CorruptRecordError(mf.path, phys, "a damaged record recovery set aside")
                    if phys < self.crc_checked_from:
                        bad = body_crc_problem(mf.view, pos, size)
                        if bad:
                            self.set_aside_read(mf.path, phys, size, bad)  # into a quarantine, once
                            raise CorruptRecordError(mf.path, phys, bad)
                    return mf.view[pos : pos + size], mf.path
            if set_aside and phys in set_aside:
                raise CorruptRecordError(mf.path, phys, "a damaged record recovery set aside")
        why = record_problem(cl, phys, size, self.topic.encode(), self.queue_id, queue_offset)
        if why is None:  # expired (below the CommitLog's first file) or left with its file since
            return None
        if self.strict:
            raise DamagedUnitError(self.topic, self.queue_id, queue_offset, phys, size, why)
        log.error(
            "%s/%d: skipping unit (offset %d, size %d) that %s", self.topic, self.queue_id, phys, size, why
        )
        return None
