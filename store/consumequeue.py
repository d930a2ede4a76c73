"""ConsumeQueue: per (topic, queueId) array of 20-byte units pointing into the CommitLog
(docs/store-format.md §consumequeue)."""

from __future__ import annotations

import logging
import mmap
import os
import struct
from collections.abc import Callable
from typing import Final

from store.javahash import tags_code
from store.mapped_file import MappedFile, MappedFileQueue
from store.message import PROPERTY_DELAY_TIME_LEVEL, PROPERTY_TAGS
from store.names import SCHEDULE_TOPIC

log = logging.getLogger(__name__)

#: ``prefetch(*objects_or_addresses)`` (store/_warm.c): the caches warmed for a put's cold objects before
#: it reads them; None without the compiled build. Stale addresses are harmless: a prefetch never faults.
prefetch: Callable[..., None] | None
try:
    from store import _warm

    prefetch = _warm.prefetch
except ImportError:
    prefetch = None

#: ``pack_units(buf, at, units, start, count)`` (store/_cparse.c): a run of units packed straight into a
#: queue's mapped file; None without the compiled build (a bytearray packed by struct, then copied in).
_c_pack_units: Callable[[mmap.mmap, int, list[tuple[int, int, int, int]], int, int], None] | None
#: ``pack_unit(buf, at, phys, size, tags)``: one unit so; None without the compiled build (struct's pack_into)
_c_pack_unit: Callable[[mmap.mmap, int, int, int, int], None] | None
try:
    from store import _cparse

    _c_pack_units = _cparse.pack_units
    _c_pack_unit = getattr(_cparse, "pack_unit", None)  # (a build older than this source: None)
except ImportError:
    _c_pack_units = None
    _c_pack_unit = None

CQ_STORE_UNIT_SIZE: Final = 20
#: Blocks reserved at a time in a ConsumeQueue file (3,276 units): the file is 6 MB, and reserving it
#: whole would take 60 GB of disk for 10,000 queues where the sparse files RocketMQ writes take 40 MB.
CQ_PREPARE_CHUNK: Final = 64 * 1024
UNIT: Final = struct.Struct(">qiq")  # commit log offset, size, tags code
PREFILL_UNIT: Final = UNIT.pack(0, 0x7FFFFFFF, 0)


def encode_unit(phys_offset: int, size: int, tags_code: int) -> bytes:
    return UNIT.pack(phys_offset, size, tags_code)


def decode_unit(buf: bytes | memoryview, pos: int = 0) -> tuple[int, int, int]:
    """``(commit_log_offset, size, tags_code)``."""
    return UNIT.unpack_from(buf, pos)  # type: ignore[return-value]


def unit_tags_code(
    topic: str, properties: dict[str, str], store_timestamp: int, delay_levels_ms: list[int]
) -> int:
    """The unit's tags code (docs/store-format.md §tags-code): delivery time for a delayed record in
    ``SCHEDULE_TOPIC_XXXX``, otherwise the sign-extended hash of ``TAGS`` (0 without tags)."""
    if topic == SCHEDULE_TOPIC:
        level_s = properties.get(PROPERTY_DELAY_TIME_LEVEL)
        if level_s:
            level = int(level_s)
            if level > 0:
                return store_timestamp + delay_levels_ms[min(level, len(delay_levels_ms)) - 1]
    return tags_code(properties.get(PROPERTY_TAGS))


def unit_location(queue_offset: int, file_size: int) -> tuple[str, int]:
    """Queue offset → (20-digit file name, byte position in that file)
    (docs/store-format.md §queue-offsets-and-files)."""
    byte_offset = queue_offset * CQ_STORE_UNIT_SIZE
    return f"{byte_offset - byte_offset % file_size:020d}", byte_offset % file_size


_ZERO_UNIT: Final = bytes(CQ_STORE_UNIT_SIZE)


def valid_units_end(view: memoryview, length: int) -> int:
    """Byte position of the first invalid unit (commit log offset < 0 or size <= 0) in ``view[:length]``, or
    ``length`` when every unit is valid: where recovery ends a ConsumeQueue file
    (docs/store-format.md §consumequeue-recovery).

    Start-up reads every unit of the last files this way (300,000 per file, 920,000 for a 1 GiB store:
    1 s unit by unit in Python). So: guess the end (binary search for the first all-zero unit, what
    follows the written units in a file), then check in bulk that every unit before it is valid (sign
    bytes and a non-zero size, one strided copy per byte) and that the one at it is not; when the guess
    fails, walk the units one by one.
    """
    step = CQ_STORE_UNIT_SIZE
    lo, hi = 0, length // step
    while lo < hi:
        mid = (lo + hi) // 2
        if view[mid * step : mid * step + step] == _ZERO_UNIT:
            hi = mid
        else:
            lo = mid + 1
    end = lo * step
    if end > 0:
        count = end // step
        signs = bytes(view[0:end:step]) + bytes(view[8:end:step])  # offset and size: not negative
        size_bytes = 0  # per unit, the OR of its size's 4 bytes: zero only for size 0
        for k in range(8, 12):
            size_bytes |= int.from_bytes(bytes(view[k:end:step]), "big")
        if max(signs) >= 0x80 or b"\x00" in size_bytes.to_bytes(count, "big"):
            end = -1
    if end >= 0:
        return end
    pos = 0
    while pos < length:
        off, size, _tags = UNIT.unpack_from(view, pos)
        if off < 0 or size <= 0:
            break
        pos += step
    return pos


def _nonzero_after(mf: MappedFile, start: int) -> bool:
    """Whether any byte from ``start`` to the end of the file is not zero (only the parts that may hold
    data are read: a new file is a sparse hole past its first reserved blocks)."""
    return any(mf.view[a:b] != bytes(b - a) for a, b in mf.data_ranges(start, mf.file_size))


class ConsumeQueue:
    """One queue's units. ``max_physic_offset`` is the CommitLog end of the last unit written."""

    __slots__ = (
        "_last",
        "damage",
        "dirty",
        "due",
        "file_size",
        "files",
        "fill_gap",
        "max_physic_offset",
        "min_logic_offset",
        "next_offset",
        "queue_id",
        "topic",
    )
    # Compiled, the fields sit in the object in the order declared here: first what every put reads and
    # writes, so that with thousands of queues a put finds them in one or two cold cache lines.
    next_offset: int
    _last: MappedFile | None
    max_physic_offset: int
    dirty: bool
    due: bool
    file_size: int
    damage: tuple[int, str] | None
    fill_gap: Callable[[ConsumeQueue, int, int], None] | None

    def __init__(
        self, root: str, topic: str, queue_id: int, file_size: int, *, read_only: bool = False
    ) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.file_size = file_size
        self.files = MappedFileQueue(
            os.path.join(root, topic, str(queue_id)),
            file_size,
            read_only=read_only,
            clear_whole_tail=True,
            keep_fd=False,  # thousands of queues: no descriptor held per file (see FileMapping)
            random_access=True,  # no read-ahead on a new file's first unit (see FileMapping)
            prepare_chunk=CQ_PREPARE_CHUNK,
        )
        self.max_physic_offset = -1
        self.min_logic_offset = 0
        #: Queue offset of the next record appended for this queue (Java's ``topicQueueTable`` entry): the
        #: store sets it from :attr:`max_offset` after recovery and advances it on every append.
        self.next_offset = 0
        self._last = None
        #: ``(queue offset, what is wrong)``, set by :meth:`recover` when the units end in garbage or before
        #: the last file, and by a re-dispatch that finds a unit other than its record: the store heals
        #: the queue from the CommitLog (``store.heal``).
        self.damage = None
        #: ``fill_gap(queue, first missing queue offset, queue offset arriving)``: called when a record's unit
        #: would leave a gap, so the store can put the units of records it set aside unparsed there first.
        self.fill_gap = None
        #: Given units since the store's thorough flush last took it (the store's dirty list holds it once).
        self.dirty = False
        #: In the store's list of queues past ``flushConsumeQueueLeastPages`` (see :meth:`flush_due`).
        self.due = False

    def load(self) -> None:
        self.files.load()
        self._last = None

    # ------------------------------------------------------------------ recovery

    def recover(self) -> None:
        """Find the end of valid units, starting 3 files from the end; drop files after it
        (docs/store-format.md §consumequeue-recovery)."""
        files = self.files.files
        if not files:
            return
        idx = max(0, len(files) - 3)
        end = files[idx].file_from_offset
        max_phys = -1
        while idx < len(files):
            mf = files[idx]
            view = mf.view
            pos = valid_units_end(view, self.file_size)
            if pos < self.file_size:
                qoff = (mf.file_from_offset + pos) // CQ_STORE_UNIT_SIZE
                if view[pos : pos + CQ_STORE_UNIT_SIZE] != _ZERO_UNIT:
                    off, size, _tags = UNIT.unpack_from(view, pos)
                    self.damage = qoff, f"{mf.path}: invalid unit at byte {pos} (offset {off}, size {size})"
                elif idx + 1 < len(files):
                    self.damage = qoff, f"{mf.path}: units end at byte {pos} but later files exist"
                elif _nonzero_after(mf, pos + CQ_STORE_UNIT_SIZE):  # a lost page, not the end
                    self.damage = qoff, f"{mf.path}: units end at byte {pos} but units follow it"
            for back in range(pos - CQ_STORE_UNIT_SIZE, -1, -CQ_STORE_UNIT_SIZE):  # the last real unit
                off, size, _tags = UNIT.unpack_from(view, back)
                if size != 0x7FFFFFFF:
                    max_phys = off + size
                    break
            end = mf.file_from_offset + pos
            if pos < self.file_size:
                break
            idx += 1
        self.max_physic_offset = max_phys
        self.files.truncate_dirty_files(end)
        self._last = None

    def dirty_from(self, phy_offset: int) -> int:
        """Queue offset of the first of the last units that all point at or past ``phy_offset`` (what
        :meth:`truncate_dirty` drops); :attr:`max_offset` when none does. Walks back from the end, so a
        garbage unit further down cannot move it (a binary search through one could)."""
        cut = self._dirty_cut(phy_offset)
        return self.max_offset if cut is None else cut // CQ_STORE_UNIT_SIZE

    def _dirty_cut(self, phy_offset: int) -> int | None:
        files = self.files.files
        cut: int | None = None
        for mf in reversed(files):
            view = mf.view
            pos = mf.wrote_position - CQ_STORE_UNIT_SIZE
            while pos >= 0:
                off, size, _ = UNIT.unpack_from(view, pos)
                if off < phy_offset or size == 0x7FFFFFFF:
                    break
                cut = mf.file_from_offset + pos
                pos -= CQ_STORE_UNIT_SIZE
            if pos >= 0:
                break
        return cut

    def truncate_dirty(self, phy_offset: int) -> None:
        """Drop every unit that points at or past ``phy_offset`` in the CommitLog
        (docs/store-format.md §consumequeue-recovery)."""
        cut = self._dirty_cut(phy_offset)
        if cut is not None:
            self.files.truncate_dirty_files(cut)
            self._last = None
        self.max_physic_offset = self._last_unit_end()

    def overwrite_unit(self, queue_offset: int, phys_offset: int, size: int, tags_code: int) -> MappedFile:
        """Correct a written unit in place (a repair from the CommitLog); returns its file, to sync."""
        byte_offset = queue_offset * CQ_STORE_UNIT_SIZE
        mf = self.files.find_file(byte_offset)
        if mf is None or byte_offset - mf.file_from_offset >= mf.wrote_position:
            raise ValueError(f"{self.topic}/{self.queue_id}: no unit at queue offset {queue_offset}")
        UNIT.pack_into(mf.mm, byte_offset - mf.file_from_offset, phys_offset, size, tags_code)
        return mf

    def truncate_to(self, queue_offset: int) -> None:
        """Drop the units from ``queue_offset`` on (a rebuild refills them from the CommitLog)."""
        self.files.truncate_dirty_files(queue_offset * CQ_STORE_UNIT_SIZE)
        self._last = None
        self.max_physic_offset = self._last_unit_end()

    def _last_unit_end(self) -> int:
        for mf in reversed(self.files.files):
            if mf.wrote_position >= CQ_STORE_UNIT_SIZE:
                off, size, _ = UNIT.unpack_from(mf.view, mf.wrote_position - CQ_STORE_UNIT_SIZE)
                return off + size
        return -1

    def correct_min_offset(self, phy_min_offset: int) -> None:
        """Set the min offset to the first unit (of the first file) whose data is still in the CommitLog."""
        first = self.files.first_file()
        if first is None:
            return
        view = first.view
        for pos in range(0, first.wrote_position, CQ_STORE_UNIT_SIZE):
            off, size, _ = UNIT.unpack_from(view, pos)
            if size != 0x7FFFFFFF and off >= phy_min_offset:
                self.min_logic_offset = first.file_from_offset + pos
                return

    # ------------------------------------------------------------------ writing

    def file_for(self, queue_offset: int) -> MappedFile:
        """The file the unit for ``queue_offset`` goes to, created when missing or when the last is full.

        The store calls it (through :meth:`reserve`) before appending a record too, so a file that cannot
        be created (no space, no descriptor left) refuses the message instead of leaving a stored record
        without its unit.
        """
        mf = self._last
        if mf is None or mf.wrote_position >= self.file_size:
            first_file = not self.files.files
            expected = queue_offset * CQ_STORE_UNIT_SIZE
            mf = self._last = self.files.last_file_for_append(expected)
            if first_file and queue_offset != 0 and mf.wrote_position == 0:
                pos = expected - mf.file_from_offset
                mf.prepare(pos, populate=False)
                mf.mm[0:pos] = PREFILL_UNIT * (pos // CQ_STORE_UNIT_SIZE)
                mf.wrote_position = pos
                self.min_logic_offset = expected
        return mf

    def reserve(self, queue_offset: int, count: int) -> None:
        """Make sure the units for ``count`` records from ``queue_offset`` can be written: their file exists
        and its blocks are allocated (up to the end of that file; a batch crossing into the next file
        gets that file when it is dispatched). Raises ``OSError`` (``ENOSPC``...) when they cannot be."""
        mf = self._last
        if mf is not None and mf.wrote_position + count * CQ_STORE_UNIT_SIZE <= mf.prepared_position:
            return  # the common case, on every put: reserved already
        mf = self.file_for(queue_offset)
        end = min(mf.wrote_position + count * CQ_STORE_UNIT_SIZE, self.file_size)
        if end > mf.prepared_position:
            mf.prepare(end, populate=False)

    def put_unit(self, phys_offset: int, size: int, tags_code: int, queue_offset: int) -> None:
        """Write the unit for a dispatched record at ``queue_offset`` (rules of
        docs/store-format.md §dispatch)."""
        if phys_offset + size <= self.max_physic_offset:
            if self.damage is None:  # already dispatched: a re-dispatch (abnormal recovery) checks the unit
                self._check_unit(phys_offset, size, queue_offset)
            return
        expected = queue_offset * CQ_STORE_UNIT_SIZE
        mf = self.file_for(queue_offset)
        if queue_offset != 0:
            current = mf.file_from_offset + mf.wrote_position
            if expected < current:
                return
            if expected > current and self.fill_gap is not None:
                self.fill_gap(self, current // CQ_STORE_UNIT_SIZE, queue_offset)
                mf = self.file_for(queue_offset)
                current = mf.file_from_offset + mf.wrote_position
            if expected != current:
                log.error(
                    "%s/%d: unit for queue offset %d written at %d (gap)",
                    self.topic,
                    self.queue_id,
                    queue_offset,
                    current // CQ_STORE_UNIT_SIZE,
                )
        pos = mf.wrote_position
        if pos + CQ_STORE_UNIT_SIZE > mf.prepared_position:  # never store into an unallocated page
            mf.prepare(pos + CQ_STORE_UNIT_SIZE, populate=False)
        if _c_pack_unit is not None:
            _c_pack_unit(mf.mm, pos, phys_offset, size, tags_code)
        else:
            UNIT.pack_into(mf.mm, pos, phys_offset, size, tags_code)
        mf.wrote_position = pos + CQ_STORE_UNIT_SIZE
        self.max_physic_offset = phys_offset + size

    def put_units(self, units: list[tuple[int, int, int, int]]) -> None:
        """Write the units ``(phys_offset, size, tags_code, queue_offset)`` of consecutive records, in order:
        as :meth:`put_unit` each, but the common run (new units continuing the queue inside its current
        file) is packed and copied into the file at once."""
        i = 0  # the first unit not written yet (an index: slicing would copy the rest per unit)
        while i < len(units):
            phys, size, tags, first = units[i]
            # the run: new units (the records ascend, so the first one's says it for all) that go where
            # the queue ends, with consecutive queue offsets, within one file
            n = 0
            if phys + size > self.max_physic_offset:
                mf = self.file_for(first)
                pos = mf.wrote_position
                if first * CQ_STORE_UNIT_SIZE == mf.file_from_offset + pos:
                    limit = min(len(units) - i, (self.file_size - pos) // CQ_STORE_UNIT_SIZE)
                    while n < limit and units[i + n][3] == first + n:
                        n += 1
            if n < 2:
                self.put_unit(phys, size, tags, first)  # the rules one by one
                i += 1
                continue
            end = pos + n * CQ_STORE_UNIT_SIZE
            if end > mf.prepared_position:  # never store into an unallocated page
                mf.prepare(end, populate=False)
            if _c_pack_units is not None:
                _c_pack_units(mf.mm, pos, units, i, n)
            else:
                packed = bytearray(n * CQ_STORE_UNIT_SIZE)
                pack_into = UNIT.pack_into
                at = 0
                for unit in units[i : i + n]:
                    pack_into(packed, at, unit[0], unit[1], unit[2])
                    at += CQ_STORE_UNIT_SIZE
                mf.mm[pos:end] = packed
            mf.wrote_position = end
            last = units[i + n - 1]
            self.max_physic_offset = last[0] + last[1]
            i += n

    def _check_unit(self, phys_offset: int, size: int, queue_offset: int) -> None:
        unit = self.get_unit(queue_offset)
        if unit is not None and unit[1] != 0x7FFFFFFF and (unit[0], unit[1]) != (phys_offset, size):
            mf = self.files.find_file(queue_offset * CQ_STORE_UNIT_SIZE)
            self.damage = (
                queue_offset,
                f"{mf.path if mf else self.topic}: unit at queue offset {queue_offset} is (offset {unit[0]}, "
                f"size {unit[1]}) but its record is (offset {phys_offset}, size {size})",
            )

    # ------------------------------------------------------------------ reading

    @property
    def max_offset(self) -> int:
        """Next queue offset to be written."""
        return self.files.max_offset // CQ_STORE_UNIT_SIZE

    @property
    def min_offset(self) -> int:
        return self.min_logic_offset // CQ_STORE_UNIT_SIZE

    def get_unit(self, queue_offset: int) -> tuple[int, int, int] | None:
        if queue_offset < self.min_offset or queue_offset >= self.max_offset:
            return None
        byte_offset = queue_offset * CQ_STORE_UNIT_SIZE
        mf = self.files.find_file(byte_offset)
        if mf is None:
            return None
        return UNIT.unpack_from(mf.view, byte_offset - mf.file_from_offset)  # type: ignore[return-value]

    def units_from(self, queue_offset: int) -> memoryview | None:
        """Units from ``queue_offset`` to the end of written data in its file (a view of whole units)."""
        byte_offset = queue_offset * CQ_STORE_UNIT_SIZE
        mf = self.files.find_file(byte_offset)
        if mf is None:
            return None
        pos = byte_offset - mf.file_from_offset
        end = mf.wrote_position
        if pos >= end:
            return None
        return mf.view[pos:end]

    def roll_next_file(self, queue_offset: int) -> int:
        """First queue offset of the file after the one holding ``queue_offset``."""
        per_file = self.file_size // CQ_STORE_UNIT_SIZE
        return queue_offset + per_file - queue_offset % per_file

    def flush_due(self, least: int) -> bool:
        """4.9.8's ``MappedFile#isAbleToFlush`` for the file the last unit went to: more than ``least`` bytes
        not flushed, or the file full and not flushed. The put asks, on the file it just wrote (no lookup),
        where a flush walking thousands of queues a second to ask each found almost all of them below. (A
        batch that filled one file and went on into the next leaves the full one to the thorough flush.)"""
        mf = self._last
        if mf is None:
            return False
        written, flushed = mf.wrote_position, mf.flushed_position
        return written - flushed > least or (written >= self.file_size and flushed < written)

    def flush(self) -> None:
        self.files.flush()

    def close(self) -> None:
        self.files.close()

    def destroy(self) -> None:
        self.files.destroy()
        self._last = None
        self.max_physic_offset = -1
        self.min_logic_offset = 0


class QueueHandle:
    """A caller's reference to one queue of a store, kept between puts so that a put finds its queue
    without a lookup in the store's table (a send with thousands of topics pays a cold hash lookup for
    it). The store fills it in under its put lock and, when the queue object it names was replaced or
    destroyed since (topic deletion, expired-queue cleaning, a rebuild by a heal), looks the queue up
    again: a put through a handle lands where a put without one would.

    It also remembers where the objects of its last put were, for a caller to prefetch them before its
    next put (:data:`prefetch`): addresses only, never written through, and no reference that would keep a
    rolled or deleted file's mapping alive. A caller may keep its own per-queue state in a subclass (the
    broker's send slot), so that a put reaches the queue's state and the caller's in one object."""

    __slots__ = ("cq", "file_at", "generation", "map_at", "queue_id", "topic", "unit_at")

    # Compiled, the fields sit in the object in the order declared here (a subclass's after them): what
    # the put reads first, then the hints it writes.
    topic: str
    queue_id: int
    cq: ConsumeQueue | None
    generation: int
    file_at: int
    map_at: int
    unit_at: int

    def __init__(self, topic: str, queue_id: int) -> None:
        self.topic = topic
        self.queue_id = queue_id
        #: The queue as of :attr:`generation` of the store's table (None: not looked up yet).
        self.cq = None
        self.generation = 0
        #: As of the last put through this handle: the addresses of the queue's current file object, of
        #: its mapping object and of the line its next unit goes to (0: none yet).
        self.file_at = 0
        self.map_at = 0
        self.unit_at = 0

    def remember(self, cq: ConsumeQueue) -> None:
        """After a put through this handle to ``cq`` (its objects are in cache now): where they are."""
        mf = cq._last
        if mf is not None:
            self.file_at = id(mf)
            self.map_at = id(mf.mm)
            self.unit_at = mf.address + mf.wrote_position if mf.address else 0
