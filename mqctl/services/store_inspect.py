"""Offline, read-only inspection of a store directory: CommitLog files, ConsumeQueues, IndexFiles,
key/id lookups and a consistency check.

Nothing here writes to the store or takes the broker's lock: files are mapped with
``ACCESS_READ`` through the engine's read-only readers (``read_only=True``), so every command is
safe on the store of a running broker. File sizes are read from the files themselves, so no
broker configuration is needed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mqctl.errors import NotFoundError, StoreError
from mqctl.services.messages import Window, detail, locate, summary
from mqctl.timespec import iso
from store.commitlog import CommitLog
from store.config import StoreConfig
from store.consumequeue import ConsumeQueue, unit_tags_code
from store.errors import CorruptRecordError
from store.errors import StoreError as EngineStoreError
from store.heal import index_header_problem
from store.indexfile import (
    ENTRY,
    HASH_SLOT_SIZE,
    INDEX_ENTRY_SIZE,
    INDEX_HEADER_SIZE,
    SLOT,
    IndexFile,
    IndexService,
)
from store.javahash import index_key_hash
from store.mapped_file import MappedFile
from store.message import (
    BLANK_MAGIC_CODE,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_TYPE_MASK,
    StoredMessage,
)
from store.quarantine import commit_log_ranges, list_quarantines, quarantine_at
from store.record import RecordInfo, decode_record, read_header, read_record_info

log = logging.getLogger(__name__)

Progress = Callable[[int], None]
"""Called with the number of bytes just processed (the CLI draws a progress bar from it)."""

PREFILL_SIZE = 0x7FFFFFFF


# ------------------------------------------------------------------------------------- layout


@dataclass
class Layout:
    """Where a store's files are and their sizes, read from the files themselves."""

    root: Path
    commit_log_file_size: int
    consume_queue_file_size: int
    hash_slot_num: int
    index_num: int

    @property
    def commitlog_dir(self) -> Path:
        return self.root / "commitlog"

    @property
    def consumequeue_dir(self) -> Path:
        return self.root / "consumequeue"

    @property
    def index_dir(self) -> Path:
        return self.root / "index"

    def config(self) -> StoreConfig:
        return StoreConfig(
            store_path_root_dir=str(self.root),
            mapped_file_size_commit_log=self.commit_log_file_size,
            mapped_file_size_consume_queue=self.consume_queue_file_size,
            max_hash_slot_num=self.hash_slot_num,
            max_index_num=self.index_num,
        )

    def queues(self, topic: str | None = None) -> list[tuple[str, int]]:
        """Every (topic, queue id) with a ConsumeQueue directory, sorted."""
        out: list[tuple[str, int]] = []
        topics = (
            [topic]
            if topic
            else sorted(os.listdir(self.consumequeue_dir))
            if self.consumequeue_dir.is_dir()
            else []
        )
        for t in topics:
            tdir = self.consumequeue_dir / t
            if not tdir.is_dir():
                continue
            out.extend(
                (t, int(q))
                for q in sorted(os.listdir(tdir), key=lambda q: int(q) if q.isdigit() else -1)
                if q.isdigit()
            )
        return out


def _usual_file_size(directory: Path, pattern: str) -> int | None:
    """The size most files have (ties: the larger), so one truncated file does not set it for all."""
    sizes = Counter(path.stat().st_size for path in directory.glob(pattern) if path.is_file())
    return max(sizes, key=lambda size: (sizes[size], size)) if sizes else None


def layout(root: str | Path) -> Layout:
    """Detect file sizes: CommitLog and ConsumeQueue files are preallocated to their configured size;
    an index file is 40 + 4·slots + 20·entries bytes, and brokers keep entries = 4·slots (the default)."""
    path = Path(root)
    if not (path / "commitlog").is_dir():
        raise NotFoundError(f"not a store directory (no commitlog/ in it): {path}")
    defaults = StoreConfig()
    cl = _usual_file_size(path / "commitlog", "*") or defaults.mapped_file_size_commit_log
    cq = _usual_file_size(path / "consumequeue", "*/*/*") or defaults.mapped_file_size_consume_queue
    slots, entries = defaults.max_hash_slot_num, defaults.max_index_num
    index_size = _usual_file_size(path / "index", "*")
    if index_size is not None:
        body = index_size - INDEX_HEADER_SIZE
        per_slot = HASH_SLOT_SIZE + 4 * INDEX_ENTRY_SIZE
        if body <= 0 or body % per_slot:
            raise StoreError(
                f"index files of {index_size} bytes do not have 4 entries per hash slot; cannot read them"
            )
        slots = body // per_slot
        entries = 4 * slots
    return Layout(path, cl, cq, slots, entries)


@contextlib.contextmanager
def _commit_log(
    lay: Layout, on_bad_file: Callable[[EngineStoreError], None] | None = None
) -> Iterator[CommitLog]:
    log_ = CommitLog(
        str(lay.commitlog_dir),
        lay.commit_log_file_size,
        max_message_size=lay.config().max_message_size,
        read_only=True,
    )
    try:
        log_.load(on_bad_file)
        yield log_
    except EngineStoreError as exc:
        raise StoreError(str(exc)) from exc
    finally:
        log_.files.close()


def _message_at(cl: CommitLog, phys: int) -> StoredMessage | None:
    """The decoded (CRC-checked) record at a CommitLog offset; ``None`` outside the log.

    Raises :class:`CorruptRecordError` when no valid record starts there.
    """
    raw = cl.read_record(phys)
    return decode_record(raw) if raw is not None else None


# ---------------------------------------------------------------------------------- commitlog


@dataclass
class FileScan:
    """One CommitLog file read record by record."""

    file: str
    from_offset: int
    to_offset: int  # end of data (absolute)
    size: int
    data_bytes: int
    records: int
    first_store_time: str | None
    last_store_time: str | None
    tail: str  # blank-filler, zeros, end-of-file or corrupt
    topics: dict[str, int] = field(default_factory=dict)
    error: str | None = None


def scan_file(
    mf: MappedFile,
    *,
    check_crc: bool = False,
    on_record: Callable[[RecordInfo, CorruptRecordError | None], None] | None = None,
) -> FileScan:
    """Walk one file's records until the blank filler, zeros or a record that cannot be parsed.

    With ``check_crc`` a body CRC mismatch is reported to ``on_record`` and the walk goes on (the
    record's length fields are sound); a structural error ends the file.
    """
    view = mf.view
    size = mf.file_size
    pos = 0
    records = 0
    first_ts = last_ts = None
    topics: dict[str, int] = {}
    tail = "end-of-file"
    error = None
    while pos + 8 <= size:
        total, magic = read_header(view, pos)
        if magic == BLANK_MAGIC_CODE and total > 0:
            tail = "blank-filler"
            break
        if magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2):
            if total == 0 and magic == 0:
                tail = "zeros"
            else:
                tail = "corrupt"
                error = str(
                    CorruptRecordError(
                        mf.path, mf.file_from_offset + pos, f"bad magic code 0x{magic & 0xFFFFFFFF:08X}"
                    )
                )
            break
        try:
            info = read_record_info(view, pos, size)
        except CorruptRecordError as exc:
            tail = "corrupt"
            error = str(exc.located(mf.path, mf.file_from_offset + pos))
            break
        crc_error = None
        if check_crc:
            try:
                read_record_info(view, pos, size, check_crc=True)
            except CorruptRecordError as exc:
                crc_error = exc.located(mf.path, mf.file_from_offset + pos)
        if on_record is not None:
            on_record(info, crc_error)
        records += 1
        topics[info.topic] = topics.get(info.topic, 0) + 1
        first_ts = info.store_timestamp if first_ts is None else first_ts
        last_ts = info.store_timestamp
        pos += info.size
    return FileScan(
        os.path.basename(mf.path),
        mf.file_from_offset,
        mf.file_from_offset + pos,
        size,
        pos,
        records,
        iso(first_ts) if first_ts is not None else None,
        iso(last_ts) if last_ts is not None else None,
        tail,
        dict(sorted(topics.items())),
        error,
    )


def commitlog_ls(root: str | Path, *, progress: Progress | None = None) -> list[FileScan]:
    """Each CommitLog file: offset range, size, data bytes, records, first/last store time, topics."""
    lay = layout(root)
    out = []
    with _commit_log(lay) as cl:
        for mf in cl.files.files:
            out.append(scan_file(mf))
            if progress:
                progress(mf.file_size)
    return out


def commitlog_bytes(root: str | Path) -> int:
    """Total size of the CommitLog files (the progress bar's length)."""
    lay = layout(root)
    return sum(p.stat().st_size for p in lay.commitlog_dir.iterdir() if p.is_file())


# ------------------------------------------------------------------------------- consume queue


@dataclass
class QueueRow:
    topic: str
    queue_id: int
    files: int
    min_offset: int
    max_offset: int
    messages: int
    first_phys_offset: int | None
    last_phys_offset: int | None


def _open_cq(lay: Layout, topic: str, queue_id: int, min_phy: int) -> ConsumeQueue:
    cq = ConsumeQueue(
        str(lay.consumequeue_dir), topic, queue_id, lay.config().consume_queue_file_size, read_only=True
    )
    try:
        cq.load()
        cq.recover()
        cq.correct_min_offset(min_phy)
    except EngineStoreError as exc:
        cq.close()
        raise StoreError(str(exc)) from exc
    return cq


def _commitlog_min_offset(lay: Layout) -> int:
    names = sorted(n for n in os.listdir(lay.commitlog_dir) if n.isdigit())
    return int(names[0]) if names else 0


def cq_ls(root: str | Path, topic: str | None = None) -> list[QueueRow]:
    """Every ConsumeQueue (or those of ``topic``): files, offset range and message count."""
    lay = layout(root)
    queues = lay.queues(topic)
    if topic and not queues:
        raise NotFoundError(f"no ConsumeQueue for topic {topic!r} in {lay.root}")
    min_phy = _commitlog_min_offset(lay)
    rows = []
    for t, q in queues:
        cq = _open_cq(lay, t, q, min_phy)
        try:
            first = cq.get_unit(cq.min_offset)
            last = cq.get_unit(cq.max_offset - 1)
            rows.append(
                QueueRow(
                    t,
                    q,
                    len(cq.files.files),
                    cq.min_offset,
                    cq.max_offset,
                    cq.max_offset - cq.min_offset,
                    first[0] if first else None,
                    last[0] if last else None,
                )
            )
        finally:
            cq.close()
    return rows


def cq_show(
    root: str | Path, topic: str, queue_id: int, *, offset: int | None = None, count: int = 20
) -> list[dict[str, Any]]:
    """Units of one queue from ``offset`` (default: the oldest), each with the record it points at."""
    lay = layout(root)
    if (topic, queue_id) not in lay.queues(topic):
        raise NotFoundError(f"no ConsumeQueue {topic}/{queue_id} in {lay.root}")
    cq = _open_cq(lay, topic, queue_id, _commitlog_min_offset(lay))
    rows: list[dict[str, Any]] = []
    try:
        start = cq.min_offset if offset is None else offset
        if not cq.min_offset <= start < cq.max_offset:
            raise NotFoundError(
                f"offset {start} is outside {topic}/{queue_id} (it holds {cq.min_offset}..{cq.max_offset - 1})"
            )
        with _commit_log(lay) as cl:
            for qoff in range(start, min(start + count, cq.max_offset)):
                unit = cq.get_unit(qoff)
                if unit is None:
                    continue
                phys, size, tags_code = unit
                row: dict[str, Any] = {
                    "queue_offset": qoff,
                    "commit_log_offset": phys,
                    "size": size,
                    "tags_code": tags_code,
                }
                try:
                    message = _message_at(cl, phys)
                except CorruptRecordError as exc:
                    row["error"] = str(exc)
                    message = None
                if message is not None:
                    row |= {
                        k: v
                        for k, v in summary(message).items()
                        if k not in ("topic", "queue_id", "queue_offset")
                    }
                rows.append(row)
    finally:
        cq.close()
    return rows


# ---------------------------------------------------------------------------------- index files


@dataclass
class IndexRow:
    name: str
    size: int
    begin_time: str | None
    end_time: str | None
    begin_phy_offset: int
    end_phy_offset: int
    hash_slots: int
    hash_slot_count: int
    index_count: int
    max_index_count: int
    full: bool
    problem: str | None  # what is wrong with the header (the broker rebuilds such a file at start)


def _time(ms: int) -> str | None:
    """A header timestamp as ISO 8601; a damaged one as its raw value (it may be past any calendar)."""
    if ms <= 0:
        return None
    try:
        return iso(ms)
    except (ValueError, OverflowError, OSError):
        return f"{ms} (not a time)"


def _index_files(lay: Layout) -> list[Path]:
    return sorted(p for p in lay.index_dir.iterdir() if p.is_file()) if lay.index_dir.is_dir() else []


def _open_index_file(lay: Layout, path: Path) -> IndexFile:
    try:
        return IndexFile(str(path), lay.hash_slot_num, lay.index_num, read_only=True)
    except EngineStoreError as exc:
        raise StoreError(str(exc)) from exc


@contextlib.contextmanager
def _index_file(lay: Layout, path: Path) -> Iterator[IndexFile]:
    f = _open_index_file(lay, path)
    try:
        yield f
    finally:
        f.close()


def _index_row(lay: Layout, f: IndexFile, cl: CommitLog) -> IndexRow:
    return IndexRow(
        f.name,
        os.path.getsize(f.path),
        _time(f.begin_timestamp),
        _time(f.end_timestamp),
        f.begin_phy_offset,
        f.end_phy_offset,
        lay.hash_slot_num,
        f.hash_slot_count,
        f.index_count,
        lay.index_num,
        f.is_full,
        index_header_problem(f, cl, int(time.time() * 1000)),
    )


def index_ls(root: str | Path) -> list[IndexRow]:
    """Each IndexFile's header: time and CommitLog range, used slots, entries, whether it is full."""
    lay = layout(root)
    rows = []
    with _commit_log(lay) as cl:
        for path in _index_files(lay):
            with _index_file(lay, path) as f:
                rows.append(_index_row(lay, f, cl))
    return rows


def _pick_index(lay: Layout, name: str | None) -> Path:
    files = _index_files(lay)
    if not files:
        raise NotFoundError(f"no index files in {lay.index_dir}")
    if name is None:
        return files[-1]
    for p in files:
        if p.name == name:
            return p
    raise NotFoundError(
        f"no index file {name!r} in {lay.index_dir} (have: {', '.join(p.name for p in files)})"
    )


def index_show(root: str | Path, name: str | None = None) -> dict[str, Any]:
    """One IndexFile (default: the newest): header plus hash-chain statistics from its slot table."""
    lay = layout(root)
    with _index_file(lay, _pick_index(lay, name)) as f, _commit_log(lay) as cl:
        count = min(f.index_count, lay.index_num)
        base = INDEX_HEADER_SIZE + lay.hash_slot_num * HASH_SLOT_SIZE
        used = longest = bad = 0
        for slot in range(lay.hash_slot_num):
            n = SLOT.unpack_from(f.mm, INDEX_HEADER_SIZE + slot * HASH_SLOT_SIZE)[0]
            if n <= 0 or n >= count:
                bad += n != 0 and n >= count
                continue
            used += 1
            length = 0
            seen = set()
            while 0 < n < count and n not in seen and length < count:
                seen.add(n)
                length += 1
                n = ENTRY.unpack_from(f.mm, base + n * INDEX_ENTRY_SIZE)[3]
            longest = max(longest, length)
        entries = max(count - 1, 0)
        return {
            **vars(_index_row(lay, f, cl)),
            "entries": entries,
            "used_slots": used,
            "longest_chain": longest,
            "average_chain": round(entries / used, 3) if used else 0.0,
            "slots_pointing_past_count": bad,
        }


def index_chain(root: str | Path, topic: str, key: str, name: str | None = None) -> list[dict[str, Any]]:
    """The raw hash chain for ``topic#key`` in one IndexFile: every entry, and whether it is that key's."""
    lay = layout(root)
    full_key = f"{topic}#{key}"
    h = index_key_hash(full_key)
    rows = []
    with _index_file(lay, _pick_index(lay, name)) as f, _commit_log(lay) as cl:
        base = INDEX_HEADER_SIZE + lay.hash_slot_num * HASH_SLOT_SIZE
        n = SLOT.unpack_from(f.mm, INDEX_HEADER_SIZE + (h % lay.hash_slot_num) * HASH_SLOT_SIZE)[0]
        seen: set[int] = set()
        while 0 < n < f.index_count and n not in seen:
            seen.add(n)
            kh, phy, diff, prev = ENTRY.unpack_from(f.mm, base + n * INDEX_ENTRY_SIZE)
            row: dict[str, Any] = {
                "entry": n,
                "key_hash": kh,
                "hash_match": kh == h,
                "commit_log_offset": phy,
                "store_time": _time(f.begin_timestamp + diff * 1000),
                "prev": prev,
                "record_has_key": False,
            }
            if kh == h:
                try:
                    m = _message_at(cl, phy)
                except CorruptRecordError as exc:
                    row["error"] = str(exc)
                    m = None
                if m is not None:
                    row["record_has_key"] = m.topic == topic and (key in m.keys or m.uniq_key == key)
                    row["msg_id"] = m.msg_id
            rows.append(row)
            n = prev
    if not rows:
        raise NotFoundError(f"no index entry chain for {full_key!r}")
    return rows


# ------------------------------------------------------------------------------------ messages


def query_key(
    root: str | Path, topic: str, key: str, window: Window, *, max_num: int = 64
) -> list[dict[str, Any]]:
    """Messages of ``topic`` with ``key`` in KEYS, through the on-disk IndexFiles (newest first, as
    the broker looks), each verified against its record: the index holds hashes only."""
    lay = layout(root)
    index = IndexService(str(lay.index_dir), lay.hash_slot_num, lay.index_num, read_only=True)
    rows = []
    with _commit_log(lay) as cl:
        try:
            index.load(True, 0)
            now = int(time.time() * 1000)
            for f in list(index.files):  # a damaged header would hide the older files' keys too
                why = index_header_problem(f, cl, now)
                if why is not None:
                    log.warning("skipping index file %s (bad header: %s)", f.path, why)
                    index.files.remove(f)
                    f.close()
            offsets = sorted(set(index.query(f"{topic}#{key}", max_num, window.begin_ms, window.end_ms)))
        except EngineStoreError as exc:
            raise StoreError(str(exc)) from exc
        finally:
            index.close()
        for phys in offsets:
            try:
                m = _message_at(cl, phys)
            except CorruptRecordError as exc:
                log.warning("index entry points at a bad record: %s", exc)
                continue
            if m is not None and m.topic == topic and key in m.keys:
                rows.append(summary(m))
    if not rows:
        raise NotFoundError(f"no message with key {key!r} in topic {topic!r} stored {window.describe()}")
    return sorted(rows, key=lambda r: (r["store_time"], r["msg_id"]))


def query_id(root: str | Path, msg_id: str) -> dict[str, Any]:
    """The record an offset message id points at (its address part names the broker, not checked here)."""
    _addr, offset = locate(msg_id)
    lay = layout(root)
    with _commit_log(lay) as cl:
        try:
            m = _message_at(cl, offset)
        except CorruptRecordError as exc:
            raise NotFoundError(f"no message {msg_id}: {exc}") from exc
        if m is None:
            raise NotFoundError(f"no message {msg_id}: offset {offset} is outside the CommitLog")
        return detail(m)


# -------------------------------------------------------------------------------------- verify


@dataclass
class VerifyReport:
    ok: bool
    commitlog_files: int
    records: int
    crc_errors: int
    corrupt_files: int
    consume_queues: int
    units: int
    unit_errors: int
    units_before_commitlog: int
    records_without_unit: int
    index_files: int
    index_entries: int
    index_errors: int
    stale_index_entries: int  # entries written before a quarantine that point into it: queries skip them
    bad_files: int  # CommitLog, ConsumeQueue and index files that could not be opened (skipped, reported)
    problems_found: int
    problems: list[str]  # the first ``max_problems`` of them (all by default)
    problems_not_listed: int
    notes: list[str]  # findings that are not problems (stale index entries and where they point)


@dataclass(slots=True)
class _Rec:
    topic: str
    queue_id: int
    queue_offset: int
    size: int
    tags_code: int
    in_queue: bool  # normal and committed records get a ConsumeQueue unit
    has_unit: bool = False


def verify(
    root: str | Path, *, max_problems: int | None = None, progress: Progress | None = None
) -> VerifyReport:
    """CRC of every record, every ConsumeQueue unit against its record (topic, queue, offset, size,
    tags code), every queued record against a unit, and every index entry against a record start.

    Every problem is counted and the first ``max_problems`` (all when ``None``) are listed; a file that
    cannot be opened is one problem and the walk goes on with the next file.

    An index entry pointing into a quarantine (or past the CommitLog's end) is stale, not damage: its
    record was set aside after the entry was written, and queries skip it. Such entries are counted in
    ``notes``, not ``problems``."""
    lay = layout(root)
    delay_ms = lay.config().delay_levels_ms()
    problems: list[str] = []
    counts = {"crc": 0, "corrupt": 0, "unit_errors": 0, "index_errors": 0, "orphans": 0, "bad_files": 0}

    def problem(kind: str, text: str) -> None:
        counts[kind] += 1
        if max_problems is None or len(problems) < max_problems:
            problems.append(text)

    def bad_file(exc: EngineStoreError) -> None:
        problem("bad_files", f"{exc}: file skipped")

    records: dict[int, _Rec] = {}

    def on_record(info: RecordInfo, crc_error: CorruptRecordError | None) -> None:
        tran = info.sys_flag & TRANSACTION_TYPE_MASK
        records[info.commit_log_offset] = _Rec(
            info.topic,
            info.queue_id,
            info.queue_offset,
            info.size,
            unit_tags_code(info.topic, info.properties, info.store_timestamp, delay_ms),
            tran in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE),
        )
        if crc_error is not None:
            problem("crc", str(crc_error))

    with _commit_log(lay, on_bad_file=bad_file) as cl:
        files = len(cl.files.files)
        min_phy = cl.min_offset
        for mf in cl.files.files:
            scan = scan_file(mf, check_crc=True, on_record=on_record)
            if scan.error:
                problem("corrupt", scan.error)
            if progress:
                progress(mf.file_size)

    units = before = 0
    queues = lay.queues()
    for topic, queue_id in queues:
        try:
            cq = _open_cq(lay, topic, queue_id, min_phy)
        except StoreError as exc:
            problem("bad_files", f"{exc}: queue {topic}/{queue_id} skipped")
            continue
        try:
            for qoff in range(cq.min_offset, cq.max_offset):
                unit = cq.get_unit(qoff)
                if unit is None or unit[1] == PREFILL_SIZE:
                    continue
                units += 1
                phys, size, tags_code = unit
                where = f"consumequeue/{topic}/{queue_id} offset {qoff}"
                if phys < min_phy:
                    before += 1
                    continue
                rec = records.get(phys)
                if rec is None:
                    problem("unit_errors", f"{where}: no record starts at CommitLog offset {phys}")
                    continue
                rec.has_unit = True
                expected = (topic, queue_id, qoff, size, tags_code)
                actual = (rec.topic, rec.queue_id, rec.queue_offset, rec.size, rec.tags_code)
                if expected != actual:
                    problem(
                        "unit_errors",
                        f"{where}: unit (offset {phys}, size {size}, tags {tags_code}) does not match the record "
                        f"({rec.topic}/{rec.queue_id} offset {rec.queue_offset}, size {rec.size}, tags {rec.tags_code})",
                    )
        finally:
            cq.close()
    orphans = [phys for phys, rec in records.items() if rec.in_queue and not rec.has_unit]
    for phys in orphans:
        rec = records[phys]
        problem(
            "orphans", f"record at {phys} ({rec.topic}/{rec.queue_id} offset {rec.queue_offset}) has no unit"
        )

    index_files = index_entries = 0
    ranges = commit_log_ranges(list_quarantines(str(lay.root)))
    stale: dict[str, int] = {}  # where stale entries point: a quarantine, or past the CommitLog's end
    with _commit_log(lay, on_bad_file=lambda _exc: None) as cl:  # reported by the first walk
        end = cl.max_offset
        past_end = f"past the CommitLog end {end}"

        def set_aside(phy: int) -> bool:
            return phy >= end or quarantine_at(ranges, phy) is not None

        for path in _index_files(lay):
            index_files += 1
            try:
                opened = _open_index_file(lay, path)
            except StoreError as exc:
                problem("bad_files", f"{exc}: file skipped")
                continue
            with contextlib.closing(opened) as f:
                why = index_header_problem(f, cl, int(time.time() * 1000), set_aside=set_aside)
                if why is not None:
                    problem("index_errors", f"index/{f.name}: bad header: {why}")
                for n, _hash, phy, _diff, _prev in f.entries():
                    index_entries += 1
                    if phy < min_phy or phy in records:
                        continue
                    gone = quarantine_at(ranges, phy)
                    if gone is not None or phy >= end:
                        where = f"into quarantine {gone}" if gone is not None else past_end
                        stale[where] = stale.get(where, 0) + 1
                        continue
                    problem(
                        "index_errors",
                        f"index/{f.name} entry {n}: no record starts at CommitLog offset {phy}",
                    )
    notes = [f"{n} stale index entries (point {where})" for where, n in stale.items()]

    found = sum(counts.values())
    return VerifyReport(
        found == 0,
        files,
        len(records),
        counts["crc"],
        counts["corrupt"],
        len(queues),
        units,
        counts["unit_errors"],
        before,
        len(orphans),
        index_files,
        index_entries,
        counts["index_errors"],
        sum(stale.values()),
        counts["bad_files"],
        found,
        problems,
        found - len(problems),
        notes,
    )
