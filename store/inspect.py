"""Read-only inspection of a store directory: what each CommitLog file, ConsumeQueue and IndexFile holds,
hash chains, key and offset lookups and a consistency check, as plain values.

The storage format stays here: the operations layer (``mqctl store ...``) turns these values into rows.
Nothing writes to the store or takes the broker's lock (files are mapped with ``ACCESS_READ``), so every
function is safe on the store of a running broker. File sizes are read from the files themselves, so no
broker configuration is needed. Records are read through the CommitLog's one record iterator
(:class:`store.commitlog.RecordWalk`), as recovery and dispatch read them.
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

from store.checkpoint import DamagedCopy, StoreCheckpoint, damaged_copies, read_incarnations, store_identity
from store.clock import SystemClock
from store.commitlog import CommitLog, RecordWalk
from store.config import StoreConfig
from store.config_files import TopicConfigFile
from store.consumequeue import ConsumeQueue, unit_tags_code
from store.dledger import BODY_OFFSET, DATA_DIR, INDEX_DIR, INDEX_FILE_SIZE
from store.dledger_commitlog import DLedgerCommitLog
from store.errors import CorruptRecordError, DamagedRecordError, StoreError, StoreFormatError
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
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_TYPE_MASK,
    StoredMessage,
)
from store.quarantine import (
    commit_log_ranges,
    data_end,
    kept_in_place,
    list_quarantines,
    quarantine_at,
    walk,
)
from store.record import RecordInfo, decode_record, read_record_info

log = logging.getLogger(__name__)

Progress = Callable[[int], None]
"""Called with the number of bytes just processed (a caller draws a progress bar from it)."""

PREFILL_SIZE = 0x7FFFFFFF  # a ConsumeQueue unit's size in a preallocated, unwritten slot


# ------------------------------------------------------------------------------------- layout


@dataclass
class Layout:
    """Where a store's files are and their sizes, read from the files themselves."""

    root: Path
    commit_log_file_size: int
    consume_queue_file_size: int
    hash_slot_num: int
    index_num: int
    #: A DLedger-mode store (4.9.8's DLedgerCommitLog): its member id, the CommitLog in ``dledger-<id>/data``.
    dledger_self_id: str | None = None
    dledger_index_file_size: int = INDEX_FILE_SIZE

    @property
    def commitlog_dir(self) -> Path:
        if self.dledger_self_id is not None:
            return self.root / f"dledger-{self.dledger_self_id}" / DATA_DIR
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
            enable_dleger_commit_log=self.dledger_self_id is not None,
            dleger_self_id=self.dledger_self_id or "",
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

    def index_files(self) -> list[Path]:
        return sorted(p for p in self.index_dir.iterdir() if p.is_file()) if self.index_dir.is_dir() else []

    def commitlog_bytes(self) -> int:
        """Total size of the CommitLog files (a progress bar's length)."""
        return sum(p.stat().st_size for p in self.commitlog_dir.iterdir() if p.is_file())


def _usual_file_size(directory: Path, pattern: str) -> int | None:
    """The size most files have (ties: the larger), so one truncated file does not set it for all."""
    sizes = Counter(path.stat().st_size for path in directory.glob(pattern) if path.is_file())
    return max(sizes, key=lambda size: (sizes[size], size)) if sizes else None


def layout(root: str | Path) -> Layout:
    """Detect file sizes: CommitLog and ConsumeQueue files are preallocated to their configured size;
    an index file is 40 + 4·slots + 20·entries bytes, and brokers keep entries = 4·slots (the default).

    Raises ``FileNotFoundError`` when ``root`` has no ``commitlog/`` and :class:`StoreFormatError` when
    the index files do not have that shape."""
    path = Path(root)
    if (why := not_a_store(path)) is not None:
        raise FileNotFoundError(why)
    self_id = dledger_member(path)
    defaults = StoreConfig()
    logs = path / "commitlog" if self_id is None else path / f"dledger-{self_id}" / DATA_DIR
    cl = _usual_file_size(logs, "*") or defaults.mapped_file_size_commit_log
    cq = _usual_file_size(path / "consumequeue", "*/*/*") or defaults.mapped_file_size_consume_queue
    slots, entries = defaults.max_hash_slot_num, defaults.max_index_num
    index_size = _usual_file_size(path / "index", "*")
    if index_size is not None:
        body = index_size - INDEX_HEADER_SIZE
        per_slot = HASH_SLOT_SIZE + 4 * INDEX_ENTRY_SIZE
        if body <= 0 or body % per_slot:
            raise StoreFormatError(
                f"index files of {index_size} bytes do not have 4 entries per hash slot; cannot read them"
            )
        slots = body // per_slot
        entries = 4 * slots
    if self_id is None:
        return Layout(path, cl, cq, slots, entries)
    dl_index = _usual_file_size(path / f"dledger-{self_id}" / INDEX_DIR, "*") or INDEX_FILE_SIZE
    return Layout(path, cl, cq, slots, entries, self_id, dl_index)


def not_a_store(path: Path) -> str | None:
    """Why ``path`` is no store directory (it holds no CommitLog of either kind), else None."""
    if dledger_member(path) is None and not (path / "commitlog").is_dir():
        return f"not a store directory (no commitlog/ or dledger-*/data/ in it): {path}"
    return None


def dledger_member(path: Path) -> str | None:
    """The member id of a DLedger-mode store (one ``dledger-<id>/data/`` and no CommitLog file), else None.

    A store holding both is 4.9.8's upgrade in place (``DLedgerCommitLog#recover``: the old CommitLog
    then the DLedger one from ``dividedCommitlogOffset``), which nothing here reads."""
    members = sorted(p.name[len("dledger-") :] for p in path.glob("dledger-*") if (p / DATA_DIR).is_dir())
    if not members:
        return None
    old = path / "commitlog"
    if old.is_dir() and any(p.is_file() for p in old.iterdir()):
        raise StoreFormatError(
            f"{path} holds both commitlog/ files and a DLedger CommitLog: a store upgraded in place to DLedger "
            "mode is not supported"
        )
    if len(members) > 1:
        raise StoreFormatError(f"{path} holds the DLedger logs of several members: {', '.join(members)}")
    return members[0]


@contextlib.contextmanager
def commit_log(lay: Layout, on_bad_file: Callable[[StoreError], None] | None = None) -> Iterator[CommitLog]:
    """The store's CommitLog, read-only; ``on_bad_file`` is told of a file that cannot be mapped."""
    log_ = (
        CommitLog(
            str(lay.commitlog_dir),
            lay.commit_log_file_size,
            max_message_size=lay.config().max_message_size,
            read_only=True,
        )
        if lay.dledger_self_id is None
        else DLedgerCommitLog(
            str(lay.root),
            lay.dledger_self_id,
            file_size=lay.commit_log_file_size,
            index_file_size=lay.dledger_index_file_size,
            max_message_size=lay.config().max_message_size,
            read_only=True,
        )
    )
    try:
        log_.load(on_bad_file)
        yield log_
    finally:
        log_.close()


def message_at(cl: CommitLog, phys: int) -> StoredMessage | None:
    """The decoded (CRC-checked) record at a CommitLog offset; ``None`` outside the log.

    Raises :class:`CorruptRecordError` when no valid record starts there, and its
    :class:`DamagedRecordError` when one does (it names its own offset) but is damaged or set aside.
    """
    mf = cl.files.find_file(phys)
    path = mf.path if mf is not None else None
    if phys in cl.set_aside:
        raise DamagedRecordError(path, phys, "a damaged record set aside in a quarantine", quarantined=True)
    raw = cl.read_record(phys)
    if raw is None:
        return None
    try:
        return decode_record(raw)
    except CorruptRecordError as e:
        if cl.damaged_extent_at(phys) is None:
            raise e.located(path or "", phys) from None
        raise DamagedRecordError(path, phys, e.reason, quarantined=False) from None


def _min_phy(lay: Layout) -> int:
    names = sorted(n for n in os.listdir(lay.commitlog_dir) if n.isdigit())
    return int(names[0]) if names else 0


# ---------------------------------------------------------------------------------- commitlog


@dataclass
class FileStats:
    """One CommitLog file read record by record (timestamps in ms)."""

    file: str
    from_offset: int
    to_offset: int  # end of data (absolute)
    size: int
    data_bytes: int
    records: int
    first_store_timestamp: int | None
    last_store_timestamp: int | None
    tail: str  # blank-filler, zeros, end-of-file or corrupt
    topics: dict[str, int] = field(default_factory=dict)
    error: str | None = None


def scan_file(
    cl: CommitLog,
    mf: MappedFile,
    *,
    check_crc: bool = False,
    on_record: Callable[[RecordInfo], None] | None = None,
    on_crc_error: Callable[[CorruptRecordError], None] | None = None,
    on_set_aside: Callable[[CorruptRecordError, int], None] | None = None,
) -> FileStats:
    """Walk one file's records until the blank filler, zeros or a record that cannot be parsed.

    With ``check_crc`` a body CRC mismatch is passed to ``on_crc_error`` and the walk goes on (the
    record's length fields are sound); a structural error ends the file, unless the record is one recovery
    set aside in place (``cl.set_aside``): that one goes to ``on_set_aside`` and the walk steps over it."""
    walk = RecordWalk(
        cl.files,
        mf.file_from_offset,
        mf.end_offset,
        check_crc=check_crc,
        on_crc_error=on_crc_error,
        on_damaged=on_set_aside,
        known=cl.set_aside,
        search=False,
        entry_header=cl.entry_header,
    )
    first_ts: int | None = None
    topics: dict[str, int] = {}
    for info in walk:
        if on_record is not None:
            on_record(info)
        topics[info.topic] = topics.get(info.topic, 0) + 1
        if first_ts is None:
            first_ts = info.store_timestamp
    tail = "end-of-file" if walk.stop in ("end", "partial") else walk.stop
    return FileStats(
        os.path.basename(mf.path),
        mf.file_from_offset,
        walk.data_end,
        mf.file_size,
        walk.data_end - mf.file_from_offset,
        walk.records,
        first_ts,
        walk.last_store_timestamp if walk.records else None,
        tail,
        dict(sorted(topics.items())),
        str(walk.corruption) if walk.corruption is not None else None,
    )


def commitlog_files(lay: Layout, *, progress: Progress | None = None) -> list[FileStats]:
    """Each CommitLog file: offset range, size, data bytes, records, first/last store time, topics."""
    out = []
    with commit_log(lay) as cl:
        for mf in cl.files.files:
            out.append(scan_file(cl, mf))
            if progress:
                progress(mf.file_size)
    return out


# ------------------------------------------------------------------------------- consume queue


@dataclass
class QueueStats:
    topic: str
    queue_id: int
    files: int
    min_offset: int
    max_offset: int
    messages: int
    first_phys_offset: int | None
    last_phys_offset: int | None


def consume_queue(lay: Layout, topic: str, queue_id: int, min_phy: int | None = None) -> ConsumeQueue:
    """One ConsumeQueue, read-only, recovered and with units below ``min_phy`` (default: the CommitLog's
    first file) counted as expired, as the broker sees it. The caller closes it."""
    cq = ConsumeQueue(
        str(lay.consumequeue_dir), topic, queue_id, lay.config().consume_queue_file_size, read_only=True
    )
    try:
        cq.load()
        cq.recover()
        cq.correct_min_offset(_min_phy(lay) if min_phy is None else min_phy)
    except BaseException:
        cq.close()
        raise
    return cq


def queues(lay: Layout, topic: str | None = None) -> list[QueueStats]:
    """Every ConsumeQueue (or those of ``topic``): files, offset range and message count."""
    min_phy = _min_phy(lay)
    rows = []
    for t, q in lay.queues(topic):
        with contextlib.closing(consume_queue(lay, t, q, min_phy)) as cq:
            first = cq.get_unit(cq.min_offset)
            last = cq.get_unit(cq.max_offset - 1)
            rows.append(
                QueueStats(
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
    return rows


@dataclass
class Unit:
    """A ConsumeQueue unit and the record it points at (``None`` with ``error`` when none is there)."""

    queue_offset: int
    commit_log_offset: int
    size: int
    tags_code: int
    message: StoredMessage | None
    error: str | None = None


@dataclass
class UnitsPage:
    """Units of one queue from ``start``; ``start`` outside ``min_offset..max_offset - 1`` gives none."""

    min_offset: int
    max_offset: int
    start: int
    units: list[Unit]


def queue_units(
    lay: Layout, topic: str, queue_id: int, *, offset: int | None = None, count: int = 20
) -> UnitsPage:
    """Units of one queue from ``offset`` (default: the oldest), each with the record it points at."""
    with contextlib.closing(consume_queue(lay, topic, queue_id)) as cq:
        start = cq.min_offset if offset is None else offset
        page = UnitsPage(cq.min_offset, cq.max_offset, start, [])
        if not cq.min_offset <= start < cq.max_offset:
            return page
        with commit_log(lay) as cl:
            for qoff in range(start, min(start + count, cq.max_offset)):
                unit = cq.get_unit(qoff)
                if unit is None:
                    continue
                phys, size, tags_code = unit
                try:
                    page.units.append(Unit(qoff, phys, size, tags_code, message_at(cl, phys)))
                except CorruptRecordError as exc:
                    page.units.append(Unit(qoff, phys, size, tags_code, None, str(exc)))
    return page


# ---------------------------------------------------------------------------------- index files


@dataclass
class IndexHeader:
    """An IndexFile's header (timestamps in ms) and ``problem``: what is wrong with it, if anything
    (the broker rebuilds such a file at start)."""

    name: str
    size: int
    begin_timestamp: int
    end_timestamp: int
    begin_phy_offset: int
    end_phy_offset: int
    hash_slots: int
    hash_slot_count: int
    index_count: int
    max_index_count: int
    full: bool
    problem: str | None


@dataclass
class ChainStats:
    """Hash-chain statistics of an IndexFile's slot table."""

    entries: int
    used_slots: int
    longest_chain: int
    slots_pointing_past_count: int


@dataclass
class ChainEntry:
    """One entry of a hash chain; ``record_has_key`` when the record it points at holds the key."""

    entry: int
    key_hash: int
    hash_match: bool
    commit_log_offset: int
    store_timestamp: int
    prev: int
    record_has_key: bool = False
    msg_id: str | None = None
    error: str | None = None


def index_file(lay: Layout, path: Path) -> IndexFile:
    """One IndexFile, read-only; the caller closes it."""
    return IndexFile(str(path), lay.hash_slot_num, lay.index_num, read_only=True)


def _header(lay: Layout, f: IndexFile, cl: CommitLog) -> IndexHeader:
    return IndexHeader(
        f.name,
        os.path.getsize(f.path),
        f.begin_timestamp,
        f.end_timestamp,
        f.begin_phy_offset,
        f.end_phy_offset,
        lay.hash_slot_num,
        f.hash_slot_count,
        f.index_count,
        lay.index_num,
        f.is_full,
        index_header_problem(f, cl, int(time.time() * 1000)),
    )


def index_headers(lay: Layout) -> list[IndexHeader]:
    """Each IndexFile's header: time and CommitLog range, used slots, entries, whether it is full."""
    rows = []
    with commit_log(lay) as cl:
        for path in lay.index_files():
            with contextlib.closing(index_file(lay, path)) as f:
                rows.append(_header(lay, f, cl))
    return rows


def _slot(lay: Layout, f: IndexFile, slot: int) -> int:
    return int(SLOT.unpack_from(f.mm, INDEX_HEADER_SIZE + slot * HASH_SLOT_SIZE)[0])


def _entry(lay: Layout, f: IndexFile, n: int) -> tuple[int, int, int, int]:
    """``(key hash, CommitLog offset, time difference in s, previous entry)`` of entry ``n``."""
    base = INDEX_HEADER_SIZE + lay.hash_slot_num * HASH_SLOT_SIZE
    return ENTRY.unpack_from(f.mm, base + n * INDEX_ENTRY_SIZE)  # type: ignore[return-value]


def chain_stats(lay: Layout, f: IndexFile) -> ChainStats:
    """Walk every hash chain of ``f`` (a loop or an out-of-range link ends a chain)."""
    count = min(f.index_count, lay.index_num)
    used = longest = bad = 0
    for slot in range(lay.hash_slot_num):
        n = _slot(lay, f, slot)
        if n <= 0 or n >= count:
            bad += n != 0 and n >= count
            continue
        used += 1
        length = 0
        seen = set()
        while 0 < n < count and n not in seen and length < count:
            seen.add(n)
            length += 1
            n = _entry(lay, f, n)[3]
        longest = max(longest, length)
    return ChainStats(max(count - 1, 0), used, longest, bad)


def index_stats(lay: Layout, path: Path) -> tuple[IndexHeader, ChainStats]:
    """One IndexFile's header and hash-chain statistics."""
    with contextlib.closing(index_file(lay, path)) as f, commit_log(lay) as cl:
        return _header(lay, f, cl), chain_stats(lay, f)


def key_chain(lay: Layout, path: Path, topic: str, key: str) -> list[ChainEntry]:
    """The raw hash chain for ``topic#key`` in one IndexFile: every entry, and whether it is that key's."""
    h = index_key_hash(f"{topic}#{key}")
    rows = []
    with contextlib.closing(index_file(lay, path)) as f, commit_log(lay) as cl:
        n = _slot(lay, f, h % lay.hash_slot_num)
        seen: set[int] = set()
        while 0 < n < f.index_count and n not in seen:
            seen.add(n)
            kh, phy, diff, prev = _entry(lay, f, n)
            entry = ChainEntry(n, kh, kh == h, phy, f.begin_timestamp + diff * 1000, prev)
            if kh == h:
                try:
                    m = message_at(cl, phy)
                except CorruptRecordError as exc:
                    entry.error = str(exc)
                    m = None
                if m is not None:
                    entry.record_has_key = m.topic == topic and (key in m.keys or m.uniq_key == key)
                    entry.msg_id = m.msg_id
            rows.append(entry)
            n = prev
    return rows


def messages_by_key(
    lay: Layout,
    topic: str,
    key: str,
    begin_ms: int,
    end_ms: int,
    *,
    max_num: int = 64,
    damaged: list[int] | None = None,
) -> list[StoredMessage]:
    """Messages of ``topic`` with ``key`` in KEYS, through the IndexFiles (newest first, as the broker
    looks), each verified against its record: the index holds hashes only. An index file with a bad
    header is skipped (it would hide the older files' keys too); an entry past the committed end (a
    DLedger checkpoint's, stale after a crash) finds no record. A damaged record an entry leads to is a
    warning, its offset appended to ``damaged``."""
    index = IndexService(str(lay.index_dir), lay.hash_slot_num, lay.index_num, read_only=True)
    found = []
    with commit_log(lay) as cl:
        try:
            index.load(True, 0)
            now = int(time.time() * 1000)
            for f in list(index.files):
                why = index_header_problem(f, cl, now)
                if why is not None:
                    log.warning("skipping index file %s (bad header: %s)", f.path, why)
                    index.files.remove(f)
                    f.close()
            offsets = sorted(set(index.query(f"{topic}#{key}", max_num, begin_ms, end_ms)))
        finally:
            index.close()
        for phys in offsets:
            try:
                m = message_at(cl, phys)
            except DamagedRecordError as exc:
                log.warning("the index of %r leads to a damaged record (never served): %s", key, exc)
                if damaged is not None:
                    damaged.append(phys)
                continue
            except CorruptRecordError as exc:
                log.warning("index entry points at a bad record: %s", exc)
                continue
            if m is not None and m.topic == topic and key in m.keys:
                found.append(m)
    return found


@dataclass(frozen=True)
class LogSpan:
    """Where a CommitLog's records start and end, and the damage that ended the walk early, if any."""

    min_offset: int
    end_offset: int
    corruption: CorruptRecordError | None


def raw_records(lay: Layout, span: Callable[[LogSpan], None] | None = None) -> Iterator[tuple[int, bytes]]:
    """Every record of the store's CommitLog in order: ``(offset, its bytes as stored)``, stepping over the
    damaged records recovery set aside in place; then ``span`` is told where the records ended."""
    with commit_log(lay, on_bad_file=lambda _exc: None) as cl:
        walk = RecordWalk(
            cl.files,
            cl.min_offset,
            cl.max_offset,
            on_damaged=lambda _error, _size: None,
            known=kept_in_place(list_quarantines(str(lay.root)), cl.files),
            search=False,
            entry_header=cl.entry_header,
        )
        for info in walk:
            mf = cl.files.find_file(info.commit_log_offset)
            assert mf is not None
            pos = info.commit_log_offset - mf.file_from_offset
            yield info.commit_log_offset, bytes(mf.view[pos : pos + info.size])
        if span is not None:
            span(LogSpan(cl.min_offset, walk.offset, walk.corruption))


def message_at_offset(lay: Layout, phys: int) -> StoredMessage | None:
    """The record at a CommitLog offset (``None`` outside the log; :class:`CorruptRecordError` when no
    valid record starts there)."""
    with commit_log(lay) as cl:
        return message_at(cl, phys)


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
    damaged_set_aside: int  # damaged records recovery set aside but left in the CommitLog (never served)
    interrupted: str | None = None  # where Ctrl-C stopped the walk (with ``partial``); later phases are 0
    identity: str = ""  # the store's identity (hex; "": none kept)
    #: The incarnation it last started in as a master, ``ID@START`` ("": it never did since it was made),
    #: and the master's incarnation its replica mark's records were last copied from ("": not known).
    incarnation: str = ""
    replica_incarnation: str = ""
    #: Copies of an incarnations file the store found damaged, kept beside it before it was written again.
    damaged_copies: list[DamagedCopy] = field(default_factory=list)


@dataclass(slots=True)
class _Rec:
    topic: str
    queue_id: int
    queue_offset: int
    size: int
    tags_code: int
    in_queue: bool  # normal and committed records get a ConsumeQueue unit
    has_unit: bool = False


class _Problems:
    """Every problem counted by kind, the first ``limit`` (all when ``None``) kept as text."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.listed: list[str] = []
        self.counts = {
            "crc": 0,
            "corrupt": 0,
            "unit_errors": 0,
            "index_errors": 0,
            "orphans": 0,
            "bad_files": 0,
        }

    def add(self, kind: str, text: str) -> None:
        self.counts[kind] += 1
        if self.limit is None or len(self.listed) < self.limit:
            self.listed.append(text)


@dataclass
class _LogPhase:
    files: int
    min_phy: int
    records: dict[int, _Rec]
    set_aside: dict[int, int]  # damaged records recovery set aside in place: offset -> size
    set_aside_found: list[int]  # ... of them, those still in the CommitLog
    held_back: int = 0  # records past a slave's replica mark, without a unit until checked
    held_from: int = -1  # where they start
    #: Records without a unit of topics deleted (no ConsumeQueue, no config): topic -> records.
    deleted: dict[str, int] = field(default_factory=dict)


def _verify_commitlog(lay: Layout, problems: _Problems, progress: Progress | None) -> _LogPhase:
    """Phase 1: every record's CRC and structure; what each record needs from the derived files. A damaged
    record a quarantine holds and recovery left in place (never served) is a note, not a problem."""
    delay_ms = lay.config().delay_levels_ms()
    records: dict[int, _Rec] = {}
    found: list[int] = []
    record_crc: set[int] = set()

    def on_record(info: RecordInfo) -> None:
        tran = info.sys_flag & TRANSACTION_TYPE_MASK
        records[info.commit_log_offset] = _Rec(
            info.topic,
            info.queue_id,
            info.queue_offset,
            info.size,
            unit_tags_code(info.topic, info.properties, info.store_timestamp, delay_ms),
            tran in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE),
        )

    def on_crc_error(exc: CorruptRecordError) -> None:
        record_crc.add(exc.offset)
        if exc.offset in held:
            found.append(exc.offset)
        else:
            problems.add("crc", str(exc))

    def on_set_aside(exc: CorruptRecordError, _size: int) -> None:
        found.append(exc.offset)

    with commit_log(lay, on_bad_file=lambda exc: problems.add("bad_files", f"{exc}: file skipped")) as cl:
        held = cl.set_aside = kept_in_place(list_quarantines(str(lay.root)), cl.files)
        for mf in cl.files.files:
            scan = scan_file(
                cl,
                mf,
                check_crc=True,
                on_record=on_record,
                on_crc_error=on_crc_error,
                on_set_aside=on_set_aside,
            )
            if scan.error:
                problems.add("corrupt", scan.error)
            if scan.tail in ("zeros", "corrupt"):
                _verify_past_the_stop(mf, scan, problems, on_record, on_crc_error)
            if progress:
                progress(mf.file_size)
        if isinstance(cl, DLedgerCommitLog):  # what the record walk cannot see: the entries' own CRC
            for pos, why in cl.dlog.body_crc_problems():
                if pos + BODY_OFFSET not in record_crc:  # (damage to the message body: listed already)
                    problems.add(
                        "crc", f"DLedger entry at data offset {pos}: {why} (a member sets it aside at start)"
                    )
        return _LogPhase(len(cl.files.files), cl.min_offset, records, held, found)


def _verify_past_the_stop(
    mf: MappedFile,
    scan: FileStats,
    problems: _Problems,
    on_record: Callable[[RecordInfo], None],
    on_crc_error: Callable[[CorruptRecordError], None],
) -> None:
    """Zeros or a record that does not parse end a file's walk, but data after them makes them damage
    inside the file, not its end: the salvage walker (:func:`store.quarantine.walk`) resyncs at each next
    record that names its own offset, so each damaged stretch is reported once (with file and offset) and
    every record after it is checked, and matched by its ConsumeQueue unit and index entries."""
    base = mf.file_from_offset
    start = scan.to_offset - base
    end = data_end(mf, start)
    for found in walk(mf.mm, base, start, end):
        if found.stretch:
            assert found.error is not None
            if found.pos == start and scan.error:
                continue  # the record that ended the walk is already listed
            what = "zeroed record header" if found.pos == start else "bytes that hold no record"
            reason = found.error.reason.replace("bytes that hold no record", what, 1)
            problems.add("corrupt", str(CorruptRecordError(mf.path, base + found.pos, reason)))
            continue
        if found.error is not None:
            on_crc_error(found.error.located(mf.path, base + found.pos))
        on_record(read_record_info(mf.view, found.pos, mf.file_size))


def _verify_queues(lay: Layout, phase: _LogPhase, problems: _Problems) -> tuple[int, int, int, int]:
    """Phase 2: every ConsumeQueue unit against its record (topic, queue, offset, size, tags code), then
    every queued record against a unit. Returns ``(queues, units, units before the CommitLog, orphans)``."""
    units = before = 0
    records = phase.records
    queues = lay.queues()
    for topic, queue_id in queues:
        try:
            opened = consume_queue(lay, topic, queue_id, phase.min_phy)
        except StoreError as exc:
            problems.add("bad_files", f"{exc}: queue {topic}/{queue_id} skipped")
            continue
        with contextlib.closing(opened) as cq:
            for qoff in range(cq.min_offset, cq.max_offset):
                unit = cq.get_unit(qoff)
                if unit is None or unit[1] == PREFILL_SIZE:
                    continue
                units += 1
                phys, size, tags_code = unit
                where = f"consumequeue/{topic}/{queue_id} offset {qoff}"
                if phys < phase.min_phy:
                    before += 1
                    continue
                rec = records.get(phys)
                if rec is None and phase.set_aside.get(phys) == size:
                    continue  # its record is set aside in place: reads skip it
                if rec is None:
                    problems.add("unit_errors", f"{where}: no record starts at CommitLog offset {phys}")
                    continue
                rec.has_unit = True
                if (topic, queue_id, qoff, size, tags_code) != (
                    rec.topic,
                    rec.queue_id,
                    rec.queue_offset,
                    rec.size,
                    rec.tags_code,
                ):
                    problems.add(
                        "unit_errors",
                        f"{where}: unit (offset {phys}, size {size}, tags {tags_code}) does not match the record "
                        f"({rec.topic}/{rec.queue_id} offset {rec.queue_offset}, size {rec.size}, tags {rec.tags_code})",
                    )
    orphans = 0
    held = phase.held_from = _held_back(lay, records)
    configured = _configured_topics(lay)
    with_queues = {topic for topic, _ in queues}
    for phys, rec in records.items():
        if rec.in_queue and not rec.has_unit:
            if phys >= held:
                phase.held_back += 1
                continue
            if configured is not None and rec.topic not in configured and rec.topic not in with_queues:
                # a topic deleted (its units and config gone), its records left until the log is cleaned
                phase.deleted[rec.topic] = phase.deleted.get(rec.topic, 0) + 1
                continue
            orphans += 1
            problems.add(
                "orphans",
                f"record at {phys} ({rec.topic}/{rec.queue_id} offset {rec.queue_offset}) has no unit",
            )
    return len(queues), units, before, orphans


def _configured_topics(lay: Layout) -> set[str] | None:
    """The topics ``config/topics.json`` (with its journal) holds, None when it cannot tell: no file (a
    store copied without its config) or none readable. Only when it can tell are the records of a topic
    without units counted as a deleted topic's."""
    path = os.path.join(lay.config().config_dir, "topics.json")
    if not any(os.path.exists(p) for p in (path, path + ".bak", path + ".journal")):
        return None
    topics = TopicConfigFile(path, SystemClock(), read_only=True)
    try:
        topics.load()
    except (StoreError, OSError):
        return None
    return set(topics.table)


def _held_back(lay: Layout, records: dict[int, _Rec]) -> int:
    """Where the records a slave holds back start: its replica mark, when no record past it has a unit
    (a slave builds them once its log is checked against its master's, a master at its start; see
    docs/replication.md §the-replica-mark); past the log's end when none are held."""
    mark = (
        None
        if lay.dledger_self_id
        else StoreCheckpoint(str(lay.root / "checkpoint"), read_only=True).replica_mark
    )
    if mark is None or any(rec.has_unit for phys, rec in records.items() if phys >= mark):
        return 2**63 - 1
    return mark


def _verify_index(lay: Layout, phase: _LogPhase, problems: _Problems) -> tuple[int, int, dict[str, int]]:
    """Phase 3: every index header, and every index entry against a record start. An entry pointing into
    a quarantine (or past the CommitLog's end) is stale, not damage: its record was set aside after the
    entry was written, and queries skip it. Returns ``(files, entries, stale entries by where they point)``."""
    index_files = index_entries = 0
    ranges = commit_log_ranges(list_quarantines(str(lay.root)))
    stale: dict[str, int] = {}
    with commit_log(lay, on_bad_file=lambda _exc: None) as cl:  # reported by the first phase
        end = cl.max_offset

        def set_aside(phy: int) -> bool:
            return phy >= end or quarantine_at(ranges, phy) is not None

        for path in lay.index_files():
            index_files += 1
            try:
                opened = index_file(lay, path)
            except StoreError as exc:
                problems.add("bad_files", f"{exc}: file skipped")
                continue
            with contextlib.closing(opened) as f:
                why = index_header_problem(f, cl, int(time.time() * 1000), set_aside=set_aside)
                if why is not None:
                    problems.add("index_errors", f"index/{f.name}: bad header: {why}")
                for n, _hash, phy, _diff, _prev in f.entries():
                    index_entries += 1
                    if phy < phase.min_phy or phy in phase.records:
                        continue
                    gone = quarantine_at(ranges, phy)
                    if gone is not None or phy >= end:
                        where = (
                            f"into quarantine {gone}" if gone is not None else f"past the CommitLog end {end}"
                        )
                        stale[where] = stale.get(where, 0) + 1
                        continue
                    problems.add(
                        "index_errors",
                        f"index/{f.name} entry {n}: no record starts at CommitLog offset {phy}",
                    )
    return index_files, index_entries, stale


def verify(
    lay: Layout, *, max_problems: int | None = None, progress: Progress | None = None, partial: bool = False
) -> VerifyReport:
    """CRC of every record, every ConsumeQueue unit against its record, every queued record against a unit,
    and every index entry against a record start.

    Every problem is counted and the first ``max_problems`` (all when ``None``) are listed; a file that
    cannot be opened is one problem and the walk goes on with the next file. Stale index entries (see
    :func:`_verify_index`) are counted in ``notes``, not ``problems``. With ``partial`` a KeyboardInterrupt
    ends the walk instead of the call: the report holds what was checked and ``interrupted`` says where."""
    problems = _Problems(max_problems)
    phase = _LogPhase(0, 0, {}, {}, [])
    ranges: list[tuple[int, int, str]] = []
    queues = units = before = orphans = index_files = index_entries = 0
    stale: dict[str, int] = {}
    stage: str | None = "CommitLog"
    try:
        phase = _verify_commitlog(lay, problems, progress)
        ranges = commit_log_ranges(list_quarantines(str(lay.root)))
        stage = "ConsumeQueue"
        queues, units, before, orphans = _verify_queues(lay, phase, problems)
        stage = "IndexFile"
        index_files, index_entries, stale = _verify_index(lay, phase, problems)
        stage = None
    except KeyboardInterrupt:
        if not partial:
            raise
    counts = problems.counts
    found = sum(counts.values())
    return VerifyReport(
        found == 0 and stage is None,
        phase.files,
        len(phase.records),
        counts["crc"],
        counts["corrupt"],
        queues,
        units,
        counts["unit_errors"],
        before,
        orphans,
        index_files,
        index_entries,
        counts["index_errors"],
        sum(stale.values()),
        counts["bad_files"],
        found,
        problems.listed,
        found - len(problems.listed),
        [f"{n} stale index entries (point {where})" for where, n in stale.items()]
        + [f"records of deleted topic {topic}: {n}" for topic, n in sorted(phase.deleted.items())]
        + (
            [
                f"{phase.held_back} records past the replica mark at offset {phase.held_from} have no "
                "ConsumeQueue unit: a slave serves them once its log is checked against its master's (a "
                "master at its start)"
            ]
            if phase.held_back
            else []
        )
        + [
            f"damaged record at CommitLog offset {o} set aside in quarantine {q} (by recovery or a read); kept "
            "in place, never served"
            for o in phase.set_aside_found
            if (q := quarantine_at(ranges, o)) is not None
        ],
        len(phase.set_aside_found),
        f"during the {stage} check" if stage else None,
        *_identities(lay),
        damaged_copies=damaged_copies(str(lay.root)),
    )


def _identities(lay: Layout) -> tuple[str, str, str]:
    """The store's identity, its newest incarnation and the one its mark names, as the files beside it
    keep them (docs/replication.md §incarnations)."""
    root = str(lay.root)
    history = read_incarnations(root)
    checkpoint = StoreCheckpoint(str(lay.root / "checkpoint"), read_only=True)
    return (
        store_identity(root, create=False).hex(),
        str(history[-1]) if history else "",
        checkpoint.replica_incarnation.hex(),
    )
