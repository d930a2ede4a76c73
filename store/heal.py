"""Derived files heal themselves: ConsumeQueue units and IndexFile headers checked against the CommitLog,
and repaired from it when they do not match.

Why: a unit pointing at garbage made consumers skip a whole ConsumeQueue file or receive a garbled
record, and a damaged IndexFile header hid the keys of every older index file; neither was logged and a
restart did not repair them. The CommitLog is the truth, so both are repaired from it, logged at ERROR
naming the file and what was wrong.

Checking every unit of a large store at start-up would cost about as much as reading the whole
CommitLog, so :meth:`Healer.check_on_start` checks, per ConsumeQueue file, the first and last unit and
a few evenly spaced ones. What a crash can have torn is covered by abnormal recovery: it re-dispatches
every record from the checkpoint on, and a record whose unit exists but says otherwise marks the queue
damaged (:meth:`ConsumeQueue.put_unit`), as does a unit that is garbage rather than empty where
recovery finds the end of the queue. Reads check each unit they serve (:meth:`Healer.reader`), so
damage the sampling misses heals on the first pull that meets it.

Repairs read as little of the CommitLog as they can, under the store's put lock (a pull that meets
damage waits for it; the broker runs that wait in a worker thread, so other requests are served): the
units between the intact units around the damage are rewritten from the records between them; without
an intact unit after it, the queue is refilled after the last intact one; only without either is it
rebuilt from the first CommitLog file. An index header is recomputed from its file's entries; only when
those look damaged too is the file re-indexed from the CommitLog.
"""

from __future__ import annotations

import array
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any, Protocol

from store.clock import Clock
from store.commitlog import CommitLog
from store.consumequeue import PREFILL_UNIT, UNIT, ConsumeQueue, unit_tags_code
from store.errors import CorruptRecordError, DamagedUnitError
from store.indexfile import (
    ENTRY,
    HASH_SLOT_SIZE,
    INDEX_ENTRY_SIZE,
    INDEX_HEADER_SIZE,
    IndexFile,
    IndexService,
)
from store.message import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_TYPE_MASK,
)
from store.reads import LMQ_PREFIX, UnitReader, record_problem
from store.record import record_identity
from store.words import plural

log = logging.getLogger(__name__)

SAMPLES_PER_FILE = 16  # evenly spaced units checked per ConsumeQueue file at start-up, besides first and last
SAMPLE_BUDGET = 20_000  # ... but no more than this many over the whole store (10,000 queues: 2 per file)
ANCHOR_LOOKBACK = 64  # how far from a damaged unit to look for an intact one to repair from
FUTURE_SLACK_MS = 24 * 3600 * 1000  # an index timestamp this far past the clock is garbage, not clock skew
_PREFILL_SIZE = UNIT.unpack(PREFILL_UNIT)[1]
_QUEUED = (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE)

QueueKey = tuple[str, int]


# ------------------------------------------------------------------------------------ pure checks


def _units_to_check(cq: ConsumeQueue, samples: int) -> Iterator[int]:
    """Queue offsets to check: first, last and ``samples`` evenly spaced units of each file."""
    lo, hi = cq.min_offset, cq.max_offset
    for mf in cq.files.files:
        first = max(lo, mf.file_from_offset // UNIT.size)
        last = min(hi, mf.file_from_offset // UNIT.size + mf.wrote_position // UNIT.size) - 1
        if last < first:
            continue
        step = max(1, (last - first) // (samples + 1))
        yield from range(first, last, step) if samples else (first,)
        yield last


def consume_queue_problem(
    cl: CommitLog, cq: ConsumeQueue, samples: int = SAMPLES_PER_FILE
) -> tuple[int, str] | None:
    """``(queue offset, what is wrong)`` with a ConsumeQueue, checked against the CommitLog (see the
    module docstring); ``None`` when the units checked point at their records (or cannot be judged: a
    light queue's units point at records of other topics)."""
    if cq.topic.startswith(LMQ_PREFIX):
        return None
    if cq.damage is not None:
        return cq.damage
    topic = cq.topic.encode()
    for qoff in _units_to_check(cq, samples):
        unit = cq.get_unit(qoff)
        if unit is None or unit[1] == _PREFILL_SIZE:
            continue
        why = record_problem(cl, unit[0], unit[1], topic, cq.queue_id, qoff)
        if why is not None:
            name = cq.files.find_file(qoff * UNIT.size)
            where = name.path if name is not None else f"{cq.topic}/{cq.queue_id}"
            return qoff, f"{where}: unit at queue offset {qoff} (offset {unit[0]}, size {unit[1]}) {why}"
    return None


def index_header_problem(
    f: IndexFile, cl: CommitLog, now_ms: int, *, set_aside: Callable[[int], bool] | None = None
) -> str | None:
    """What is wrong with an IndexFile's header, checked against its own entries and the CommitLog;
    ``None`` when it is sane. Works on read-only files too (the offline ``store index ls``/``verify``).

    ``set_aside(offset)`` tells offsets whose records recovery moved to a quarantine: a header pointing
    there is stale rather than damaged (``store verify``; the broker still rebuilds such a file at start).
    """
    count = f.index_count
    if count > f.index_num:
        return f"indexCount {count} exceeds the file's capacity {f.index_num}"
    entries = count - 1
    if not 0 <= f.hash_slot_count <= min(entries, f.hash_slot_num):
        return f"hashSlotCount {f.hash_slot_count} is not within 0..{min(entries, f.hash_slot_num)}"
    bt, et, bp, ep = f.begin_timestamp, f.end_timestamp, f.begin_phy_offset, f.end_phy_offset
    if bt < 0 or bt > et:
        return f"beginTimestamp {bt} and endTimestamp {et} are out of order"
    if et > now_ms + FUTURE_SLACK_MS:
        return f"endTimestamp {et} is in the future"
    if bp < 0 or bp > ep:
        return f"beginPhyOffset {bp} and endPhyOffset {ep} are out of order"
    # the data's written end, not ``max_offset``: a DLedger log's committed end is its checkpoint's, stale
    # after a crash, and the index holds entries for records committed past it (queries skip those)
    written = cl.files.max_offset
    if ep > written and not (set_aside is not None and set_aside(ep)):
        return f"endPhyOffset {ep} is past the CommitLog's written end {written}"
    # a new file starts with begin = end = the previous file's end (docs/store-format.md §new-index-files)
    if entries == 0:
        return None if (bt, bp) == (et, ep) else "a file without entries has begin and end fields that differ"
    base = INDEX_HEADER_SIZE + f.hash_slot_num * HASH_SLOT_SIZE
    first_phy = ENTRY.unpack_from(f.mm, base + INDEX_ENTRY_SIZE)[1]
    last_phy = ENTRY.unpack_from(f.mm, base + entries * INDEX_ENTRY_SIZE)[1]
    if first_phy != bp:
        return f"beginPhyOffset {bp} is not the first entry's offset {first_phy}"
    if last_phy != ep:
        return f"endPhyOffset {ep} is not the last entry's offset {last_phy} (indexCount {count})"
    for name, phy, ts in (("begin", bp, bt), ("end", ep, et)):
        if phy < cl.min_offset or phy >= cl.max_offset or (set_aside is not None and set_aside(phy)):
            continue
        mf = cl.files.find_file(phy)
        if mf is None:
            continue
        try:
            _s, _q, _o, r_phys, r_ts, _t = record_identity(
                mf.view, phy - mf.file_from_offset, mf.wrote_position
            )
        except CorruptRecordError as e:
            return f"{name}PhyOffset {phy} points at no record ({e.reason})"
        if r_phys != phy:
            return f"{name}PhyOffset {phy} points inside a record"
        if r_ts != ts:
            return f"{name}Timestamp {ts} is not the store time {r_ts} of the record at {name}PhyOffset {phy}"
    return None


def _entry_count(f: IndexFile) -> int:
    """indexCount from the entries themselves: they are written in order from 1, so the first empty
    entry (binary search) ends them."""
    base = INDEX_HEADER_SIZE + f.hash_slot_num * HASH_SLOT_SIZE
    empty = bytes(INDEX_ENTRY_SIZE)
    lo, hi = 1, f.index_num
    while lo < hi:
        mid = (lo + hi) // 2
        at = base + mid * INDEX_ENTRY_SIZE
        if f.mm[at : at + INDEX_ENTRY_SIZE] == empty:
            hi = mid
        else:
            lo = mid + 1
    return lo


def repair_index_header(f: IndexFile, cl: CommitLog, prev: IndexFile | None, now_ms: int) -> bool:
    """Recompute a damaged header from the file's entries (count, first and last offsets), the slot
    table (used slots) and the CommitLog (the first and last records' store times), and write it when
    the result passes :func:`index_header_problem` and sampled entries point at record starts. False
    (nothing written) when that cannot be done: the caller rebuilds the file from the CommitLog."""
    if f.read_only:
        return False
    count = _entry_count(f)
    base = INDEX_HEADER_SIZE + f.hash_slot_num * HASH_SLOT_SIZE
    if count <= 1:
        bp = ep = prev.end_phy_offset if prev is not None else 0
        bt = et = prev.end_timestamp if prev is not None else 0
    else:
        bp = ENTRY.unpack_from(f.mm, base + INDEX_ENTRY_SIZE)[1]
        ep = ENTRY.unpack_from(f.mm, base + (count - 1) * INDEX_ENTRY_SIZE)[1]
        times = [_store_time(cl, phy) for phy in (bp, ep)]
        if None in times:
            return False
        bt, et = times  # type: ignore[assignment]
        step = max(1, (count - 1) // SAMPLES_PER_FILE)
        for n in range(1, count, step):
            h, phy, diff, prev_n = ENTRY.unpack_from(f.mm, base + n * INDEX_ENTRY_SIZE)
            if (
                h < 0
                or diff < 0
                or not 0 <= prev_n < n
                or (phy >= cl.min_offset and _store_time(cl, phy) is None)
            ):
                return False
    slots = array.array("i", f.mm[INDEX_HEADER_SIZE:base])
    old = (
        f.begin_timestamp,
        f.end_timestamp,
        f.begin_phy_offset,
        f.end_phy_offset,
        f.hash_slot_count,
        f.index_count,
    )
    f.begin_timestamp, f.end_timestamp, f.begin_phy_offset, f.end_phy_offset = bt, et, bp, ep
    f.hash_slot_count, f.index_count = len(slots) - slots.count(0), count
    if index_header_problem(f, cl, now_ms) is not None:
        (
            f.begin_timestamp,
            f.end_timestamp,
            f.begin_phy_offset,
            f.end_phy_offset,
            f.hash_slot_count,
            f.index_count,
        ) = old
        return False
    f.flush()
    return True


def _store_time(cl: CommitLog, phy: int) -> int | None:
    """STORETIMESTAMP of the record starting at ``phy``; None when no record starts there."""
    mf = cl.files.find_file(phy)
    if mf is None:
        return None
    try:
        r_phys, r_ts = record_identity(mf.view, phy - mf.file_from_offset, mf.wrote_position)[3:5]
    except CorruptRecordError:
        return None
    return r_ts if r_phys == phy else None


# ------------------------------------------------------------------------------------ healing


class HealedStore(Protocol):
    """What the healer works on of :class:`store.engine.DefaultMessageStore`, which owns it: the log, the
    queues, the index and the put lock (a protocol, so this module does not import the engine back)."""

    @property
    def commit_log(self) -> CommitLog: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def index(self) -> IndexService: ...
    @property
    def _cqs(self) -> dict[QueueKey, ConsumeQueue]: ...
    @property
    def _put_lock(self) -> AbstractContextManager[Any]: ...
    @property
    def _delay_ms(self) -> list[int]: ...
    @property
    def _crc_checked_from(self) -> int: ...
    def _new_cq(self, topic: str, queue_id: int) -> ConsumeQueue: ...
    def set_aside_read(self, path: str, offset: int, size: int, why: str) -> None: ...
    def _queues_replaced(self) -> None: ...
    def _read_end(self) -> int: ...


class Healer:
    """Checks and rebuilds one open, writable store's ConsumeQueues and IndexFiles (part of the engine:
    it works on the store's queues and index under the store's put lock)."""

    def __init__(self, store: HealedStore) -> None:
        self.store = store
        self.rebuilds = 0  # ConsumeQueue repairs and rebuilds done since open
        #: queues a rebuild could not complete: reads skip their damaged units instead of healing again
        self.unhealable: set[QueueKey] = set()

    def check_on_start(self) -> int | None:
        """Check every ConsumeQueue and IndexFile; heal the damaged queues and index headers now, and drop
        an index file that cannot be repaired (with the later ones). Returns the CommitLog offset from
        which the start-up reput has to re-dispatch to re-index the dropped files, or None."""
        store = self.store
        cl = store.commit_log
        started = time.perf_counter()
        bad: list[tuple[ConsumeQueue, int, str]] = []
        queues = list(store._cqs.values())
        files = sum(len(cq.files.files) for cq in queues)
        samples = min(SAMPLES_PER_FILE, SAMPLE_BUDGET // max(1, files))
        for cq in queues:
            problem = consume_queue_problem(cl, cq, samples)
            if problem is not None:
                bad.append((cq, *problem))
        if bad:
            with store._put_lock:
                self._heal(bad)
        reput_from = self._drop_bad_index_files()
        log.info(
            "checked %d consume queues and %d index files against the CommitLog in %.3f s",
            len(store._cqs),
            len(store.index.files),
            time.perf_counter() - started,
        )
        return reput_from

    def _drop_bad_index_files(self) -> int | None:
        """Repair each damaged index header from its file's entries; drop a file whose header cannot be
        repaired, with the later files, and return where the reput has to re-index from."""
        store = self.store
        files = store.index.files
        now = store.clock.now_ms()
        for i, f in enumerate(files):
            why = index_header_problem(f, store.commit_log, now)
            if why is None:
                continue
            prev = files[i - 1] if i else None
            if repair_index_header(f, store.commit_log, prev, now):
                log.error(
                    "index file %s had a bad header: %s; header rebuilt from its %d entries and the CommitLog",
                    f.path,
                    why,
                    f.index_count - 1,
                )
                continue
            doomed = files[i:]
            del files[i:]
            for g in doomed:
                g.destroy()
            later = f", and the {plural(len(doomed) - 1, 'later index file')}" if len(doomed) > 1 else ""
            start = max(prev.end_phy_offset if prev is not None else 0, store.commit_log.min_offset)
            log.error(
                "index file %s has a bad header: %s; rebuilding it%s from the CommitLog from offset %d",
                f.path,
                why,
                later,
                start,
            )
            return start
        return None

    def reader(self, cq: ConsumeQueue, *, strict: bool) -> UnitReader:
        """The record reader for a pull from ``cq`` (:class:`store.reads.UnitReader`): a damaged unit raises
        :class:`DamagedUnitError` (``strict``, unless a rebuild of the queue could not reach it), else it
        is skipped and logged at ERROR."""
        store = self.store
        strict = strict and (cq.topic, cq.queue_id) not in self.unhealable
        return UnitReader(store.commit_log, cq, strict, store._crc_checked_from, store.set_aside_read)

    def heal_read(self, err: DamagedUnitError) -> None:
        """A pull met a damaged unit: heal its queue (see :meth:`_heal`). The broker runs this in a worker
        thread (the walk can take seconds on a large store); puts wait for it, pulls of the queue too."""
        with self.store._put_lock:
            cq = self.store._cqs.get((err.topic, err.queue_id))
            if cq is not None:
                self._heal([(cq, err.queue_offset, f"a read found: {err}")])

    def _heal(self, bad: list[tuple[ConsumeQueue, int, str]]) -> None:
        """Heal each ``(queue, damaged queue offset, why)``, logged at ERROR, under the put lock: rewrite
        the units between the intact units around the damaged one from that CommitLog range; else refill
        the queue after the last intact unit before it; else rebuild it whole. The queues that need a
        walk share one, so the CommitLog is read once and from as late as possible."""
        rebuild: dict[QueueKey, str] = {}
        anchors: dict[QueueKey, tuple[int, int]] = {}
        for cq, qoff, why in bad:
            before = self._anchor(cq, qoff, -1)
            if before is None and qoff <= cq.min_offset:  # the first unit: its record is the queue's first
                before = qoff - 1, -1, self.store.commit_log.min_offset
            if before is not None and self._repair(cq, before, qoff, why):
                continue
            key = (cq.topic, cq.queue_id)
            rebuild[key] = why
            if before is not None:
                anchors[key] = before[0], before[2]
        if rebuild:
            self.rebuild_queues(rebuild, anchors)

    def _repair(self, cq: ConsumeQueue, before: tuple[int, int, int], queue_offset: int, why: str) -> bool:
        """Rewrite the units between ``before`` and the next intact unit after ``queue_offset`` from the
        records of that CommitLog range; False when there is no such unit or the records do not fill
        exactly that gap."""
        after = self._anchor(cq, queue_offset, +1)
        if after is None:
            return False
        (first_q, start), (last_q, end) = (before[0] + 1, before[2]), (after[0], after[1])
        key = (cq.topic, cq.queue_id)
        delay_ms = self.store._delay_ms
        units = []
        for info in self.store.commit_log.walk(start, end):
            if (
                (info.topic, info.queue_id) == key
                and info.queue_offset >= first_q
                and info.sys_flag & TRANSACTION_TYPE_MASK in _QUEUED
            ):
                code = unit_tags_code(info.topic, info.properties, info.store_timestamp, delay_ms)
                units.append((info.queue_offset, info.commit_log_offset, info.size, code))
        if [u[0] for u in units] != list(range(first_q, last_q)):
            return False
        for mf in {cq.overwrite_unit(*unit) for unit in units}:
            mf.sync()
        cq.damage = None
        self.rebuilds += 1
        log.error(
            "consume queue %s/%d repaired from the CommitLog (units %d..%d rewritten from offsets %d..%d): %s",
            cq.topic,
            cq.queue_id,
            first_q,
            last_q - 1,
            start,
            end,
            why,
        )
        return True

    def _anchor(self, cq: ConsumeQueue, queue_offset: int, step: int) -> tuple[int, int, int] | None:
        """``(queue offset, CommitLog offset, CommitLog end)`` of the nearest unit before (``step`` -1) or
        after (+1) ``queue_offset`` that points at its record, a few units away at most; None if none."""
        cl = self.store.commit_log
        topic = cq.topic.encode()
        for i in range(1, ANCHOR_LOOKBACK + 1):
            q = queue_offset + i * step
            unit = cq.get_unit(q)
            if unit is None or unit[1] == _PREFILL_SIZE or unit[0] < cl.min_offset:
                return None
            if record_problem(cl, unit[0], unit[1], topic, cq.queue_id, q) is None:
                return q, unit[0], unit[0] + unit[1]
        return None

    def rebuild_queues(
        self, bad: dict[QueueKey, str], anchors: dict[QueueKey, tuple[int, int]] | None = None
    ) -> None:
        """Rebuild the queues ``bad`` names (with why) from the CommitLog, through the dispatch walk. Call
        under the store's put lock. A queue with an anchor ``(queue offset, CommitLog end)`` keeps its
        units up to that queue offset and is refilled from records after it; the others are rebuilt
        whole, from the CommitLog's first file. If the walk stops at a record it cannot parse, the old
        units past that point are kept and the queue is marked unhealable (its damaged units are then
        skipped with an ERROR log instead of rebuilt again)."""
        store = self.store
        cl = store.commit_log
        delay_ms = store._delay_ms
        anchors = anchors or {}
        found: dict[QueueKey, list[tuple[int, int, int, int]]] = {key: [] for key in bad}
        after = {key: anchors[key][0] if key in anchors else -1 for key in bad}
        start = min(anchors[key][1] if key in anchors else cl.min_offset for key in bad)
        started = time.perf_counter()
        end = store._read_end()  # (a slave's records past its replica mark get no unit until checked)
        walk = cl.walk(start, end)
        for info in walk:
            key = (info.topic, info.queue_id)
            units = found.get(key)
            if (
                units is not None
                and info.queue_offset > after[key]
                and info.sys_flag & TRANSACTION_TYPE_MASK in _QUEUED
            ):
                code = unit_tags_code(info.topic, info.properties, info.store_timestamp, delay_ms)
                units.append((info.queue_offset, info.commit_log_offset, info.size, code))
        complete = walk.offset >= end
        for key, units in found.items():
            old = store._cqs.get(key)
            next_offset = old.next_offset if old is not None and not complete else 0
            if old is not None and not complete:
                units.extend(u for u in _units_from(old, walk.offset) if u[0] > after[key])
                self.unhealable.add(key)
            if old is not None and key in anchors:
                cq = old
                cq.truncate_to(after[key] + 1)
            else:
                if old is not None:  # stays in the table until replaced: a heal may run off the event loop
                    old.destroy()
                cq = store._new_cq(*key)
            for qoff, phys, size, code in units:
                cq.put_unit(phys, size, code, qoff)
            cq.correct_min_offset(cl.min_offset)
            cq.next_offset = max(cq.max_offset, next_offset)
            # on disk now: these units may lie below the recovery point, which a crash recovery trusts
            cq.flush()
            cq.damage = None
            if store._cqs.get(key) is not cq:
                store._cqs[key] = cq
                store._queues_replaced()  # queue handles holding the old one look it up again
            self.rebuilds += 1
            log.error(
                "consume queue %s/%d rebuilt from the CommitLog (%d units from queue offset %d, CommitLog "
                "offset %d on; now %d..%d) in %.3f s: %s%s",
                key[0],
                key[1],
                len(units),
                after[key] + 1,
                start,
                cq.min_offset,
                cq.max_offset,
                time.perf_counter() - started,
                bad[key],
                ""
                if complete
                else f"; the CommitLog cannot be read past offset {walk.offset}, units after it kept",
            )


def _units_from(cq: ConsumeQueue, phys: int) -> list[tuple[int, int, int, int]]:
    """``(queue offset, phys, size, tags)`` of the units of ``cq`` pointing at ``phys`` or later."""
    out = []
    for qoff in range(cq.min_offset, cq.max_offset):
        unit = cq.get_unit(qoff)
        if unit is not None and unit[0] >= phys and unit[1] != _PREFILL_SIZE:
            out.append((qoff, *unit))
    return out
