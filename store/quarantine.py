"""Quarantine: what recovery cuts from the store is set aside, never deleted (docs/design/quarantine.md).

RocketMQ's recovery truncates the CommitLog at the first record it cannot validate and deletes every
later file, acknowledged messages and all. Ours moves all of it under ``<root>/quarantine/<time>/``
first, with a ``manifest.json`` saying what was cut, from where and why:

* ``commitlog/<20 digits>``: a piece of the CommitLog, named (like a CommitLog file) by the absolute
  offset of its first byte: a whole later file moved as is, or the cut tail of the file recovery
  keeps (from the cut to the end of its data, copied before recovery zeroes it).
* ``consumequeue/<topic>/<queue>/<20 digits>``: the ConsumeQueue units that pointed into the cut,
  named by the byte offset of their first unit.

The quarantine sits outside ``commitlog/`` and ``consumequeue/``, so a Java broker still loads the
store. :func:`walk` finds the intact records of a piece (CRC-valid, each naming its own offset) past any
damage, for ``mqctl store salvage``. Functions here return plain values; mqctl formats them.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import mmap
import os
import shutil
import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from store.consumequeue import CQ_STORE_UNIT_SIZE, ConsumeQueue
from store.dledger import BODY_OFFSET, entry_header_problem, entry_size_at
from store.durability import sync_directory
from store.errors import CorruptRecordError
from store.mapped_file import MappedFile, MappedFileQueue, offset_to_file_name
from store.message import BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2, StoredMessage
from store.record import check_record, decode_record
from store.words import plural

log = logging.getLogger(__name__)

QUARANTINE_DIR = "quarantine"
MANIFEST_NAME = "manifest.json"
COMMITLOG = "commitlog"
CONSUMEQUEUE = "consumequeue"

_MAGICS = tuple(struct.pack(">i", m) for m in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2))
_BLANK = struct.pack(">i", BLANK_MAGIC_CODE)
_PHYSICAL_OFFSET = struct.Struct(">q")
_PHYSICAL_OFFSET_POS = 28  # TOTALSIZE MAGIC BODYCRC QUEUEID FLAG (4 each) QUEUEOFFSET (8), then this
_CHUNK = 1 << 20


Searchable = bytes | mmap.mmap
"""What the walker reads: it searches for magic codes with ``find`` at C speed."""


# ------------------------------------------------------------------------------------ manifest


@dataclass
class Piece:
    """One file of a quarantine."""

    file: str  # path inside the quarantine directory
    source: str  # the store file it came from
    kind: str  # "commitlog" or "consumequeue"
    whole_file: bool  # moved as is (else: bytes copied from the cut to the end of the file's data)
    from_offset: int  # CommitLog: offset of the first byte; ConsumeQueue: queue offset of the first unit
    to_offset: int  # exclusive
    records: int  # CommitLog: intact records; ConsumeQueue: units
    damaged: int = 0  # CommitLog: records that parse but fail their body CRC
    topic: str | None = None
    queue_id: int | None = None


#: A manifest's ``recovery`` for a slave's divergent tail (recovery itself writes "normal" or "abnormal").
DIVERGED = "replication"
#: ... for a record the master set aside in place, which its slave takes and sets aside likewise.
REPLICATED = "replicated"
#: The manifest's ``recovery`` of a record set aside when a read found its body CRC failing (below what
#: recovery checked: a disk that damaged it while the broker ran, or in a file recovery trusts).
READ = "read"


@dataclass
class Manifest:
    """What one recovery set aside, and why (``manifest.json``)."""

    name: str
    created_ms: int
    created: str
    why: str
    recovery: str  # "normal", "abnormal", REPLICATED or READ
    cut_offset: int  # the CommitLog now ends here
    records: int  # intact CommitLog records set aside
    damaged: int
    units: int  # ConsumeQueue units set aside
    files: list[Piece] = field(default_factory=list)
    resent: list[dict[str, Any]] = field(default_factory=list)  # each 'salvage --resend' run: when, counts
    in_place: bool = False  # copies of damaged records that stay in the CommitLog (skipped when served)
    path: str = ""  # the quarantine directory (not stored)

    def to_json(self) -> str:
        data = dataclasses.asdict(self)
        data.pop("path")
        return json.dumps(data, indent=2, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str, path: str) -> Manifest:
        data = json.loads(text)
        pieces = [Piece(**p) for p in data.pop("files", [])]
        known = {f.name for f in dataclasses.fields(cls)} - {"files", "path"}
        return cls(**{k: v for k, v in data.items() if k in known}, files=pieces, path=path)

    def save(self) -> None:
        """Write ``manifest.json`` atomically and durably (a crash leaves the old or the new one)."""
        tmp = os.path.join(self.path, MANIFEST_NAME + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(self.to_json())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(self.path, MANIFEST_NAME))
        sync_directory(self.path)


def quarantine_root(store_root: str) -> str:
    return os.path.join(store_root, QUARANTINE_DIR)


def list_quarantines(store_root: str) -> list[Manifest]:
    """Every quarantine of the store, oldest first. A directory whose manifest is missing or unreadable
    (a crash while it was written) is listed with its CommitLog pieces found on disk."""
    top = quarantine_root(store_root)
    if not os.path.isdir(top):
        return []
    out = []
    for name in sorted(os.listdir(top)):
        qdir = os.path.join(top, name)
        if not os.path.isdir(qdir):
            continue
        try:
            with open(os.path.join(qdir, MANIFEST_NAME), encoding="utf-8") as f:
                out.append(Manifest.from_json(f.read(), qdir))
            continue
        except (OSError, ValueError, TypeError) as e:
            why = f"no readable manifest ({e})"
        cdir = os.path.join(qdir, COMMITLOG)
        names = sorted(n for n in os.listdir(cdir) if n.isdigit()) if os.path.isdir(cdir) else []
        pieces = []
        for n in names:
            size = os.path.getsize(os.path.join(cdir, n))
            pieces.append(Piece(f"{COMMITLOG}/{n}", "", COMMITLOG, False, int(n), int(n) + size, -1, -1))
        out.append(Manifest(name, 0, "", why, "", -1, -1, -1, -1, pieces, path=qdir))
    return out


def commit_log_ranges(manifests: Iterable[Manifest]) -> list[tuple[int, int, str]]:
    """``(start, end, quarantine directory)``: the CommitLog offsets each quarantine took out of the store.
    Derived files written before it (IndexFile entries) may still point there: stale, not damage."""
    out: list[tuple[int, int, str]] = []
    for m in manifests:
        pieces = [p for p in m.files if p.kind == COMMITLOG]
        if m.in_place:  # single records: the intact ones between them are still served
            out.extend((p.from_offset, p.to_offset, m.path) for p in pieces)
        elif pieces:
            start = m.cut_offset if m.cut_offset >= 0 else min(p.from_offset for p in pieces)
            out.append((start, max(p.to_offset for p in pieces), m.path))
    return out


def quarantine_at(ranges: Iterable[tuple[int, int, str]], offset: int) -> str | None:
    """The directory of the quarantine whose CommitLog range (:func:`commit_log_ranges`) holds ``offset``."""
    for start, end, path in ranges:
        if start <= offset < end:
            return path
    return None


# ------------------------------------------------------------------------------------- walking


@dataclass(frozen=True, slots=True)
class Found:
    """What the walker found at ``pos`` of a piece: a record, intact or (``error``) failing its body CRC;
    or (``stretch``) ``size`` bytes that hold no record where records should be (a record whose header is
    damaged, zeros or garbage between records, a torn record at the end), ``error`` saying which."""

    pos: int
    size: int
    error: CorruptRecordError | None
    stretch: bool = False


def _no_data(buf: Searchable, start: int, end: int) -> bool:
    """Whether ``buf[start:end]`` ends a file's data: zeros, or the writer's blank filler and zeros."""
    # the blank filler: docs/store-format.md §end-of-file-filler (a DLedger data file's: magic first)
    if start + 8 <= end and _BLANK in (buf[start + 4 : start + 8], buf[start : start + 4]):
        start += 8
    for a in range(start, end, _CHUNK):
        b = min(a + _CHUNK, end)
        if buf[a:b] != bytes(b - a):
            return False
    return True


def walk(buf: Searchable, base: int, start: int = 0, end: int | None = None) -> Iterator[Found]:
    """Every record in ``buf[start:end]``, a piece of the CommitLog whose ``buf[0]`` is at offset ``base``,
    and every stretch of bytes between them that holds none.

    A record counts when it parses (docs/store-format.md §validating-records) and its PHYSICALOFFSET names
    its own position, so a record copied inside another's body or stale bytes that merely look like one are not taken. Past anything
    else (a damaged record, garbage, zeros, a blank filler) the walk searches forward for the next
    magic code where such a record starts, so the damage costs only the records it hit; the bytes it
    skipped are one stretch (a damaged TOTALSIZE, say, is one damaged record), unless they end the data.
    """
    n = len(buf) if end is None else end
    next_magic = [-1] * len(_MAGICS)  # next position of each magic code: one search per match, not per step

    def candidate(after: int) -> int:
        for i, magic in enumerate(_MAGICS):
            if next_magic[i] != n and next_magic[i] < after + 4:
                found = buf.find(magic, after + 4, n)
                next_magic[i] = n if found < 0 else found
        return min(next_magic) - 4

    with memoryview(buf) as view:
        pos = start
        accounted = start  # bytes below this were reported: as records or as a stretch
        while pos + 8 <= n:
            error = None
            try:
                size, _ = check_record(view, pos, n, check_crc=True)
            except CorruptRecordError as e:
                error = e.located("", base + pos)
                try:  # a record whose body alone is damaged is reported; anything else is skipped
                    size, _ = check_record(view, pos, n, check_crc=False)
                except CorruptRecordError:
                    size = 0
            if size and _PHYSICAL_OFFSET.unpack_from(view, pos + _PHYSICAL_OFFSET_POS)[0] == base + pos:
                if _entry_header_of(view, accounted, pos, size, base):
                    accounted = pos  # a DLedger entry's header before its record: no damage
                if accounted < pos:
                    why = f"bytes that hold no record inside the data; the next record starts at {base + pos}"
                    yield Found(
                        accounted, pos - accounted, CorruptRecordError("", base + accounted, why), True
                    )
                yield Found(pos, size, error)
                accounted = pos + size
                if error is None:
                    pos += size
                    continue
            pos = candidate(pos + 1)
        if accounted < n and not _no_data(buf, accounted, n):
            why = f"bytes that hold no record inside the data; no record follows up to {base + n}"
            yield Found(accounted, n - accounted, CorruptRecordError("", base + accounted, why), True)


def _entry_header_of(view: memoryview, at: int, pos: int, size: int, base: int) -> bool:
    """Whether ``view[at:pos]`` is the sound header of the DLedger entry holding the ``size``-byte record
    at ``pos`` (a piece of a DLedger CommitLog)."""
    return (
        pos - at == BODY_OFFSET
        and entry_header_problem(view, at, pos + size, pos + size, base) == ""
        and entry_size_at(view, at) == BODY_OFFSET + size
    )


def _count(buf: Searchable, base: int, start: int = 0, end: int | None = None) -> tuple[int, int]:
    good = bad = 0
    for found in walk(buf, base, start, end):
        if found.error is None:
            good += 1
        else:
            bad += 1
    return good, bad


def piece_records(
    manifest: Manifest, piece: Piece
) -> Iterator[tuple[int, StoredMessage | CorruptRecordError]]:
    """The records of a CommitLog piece: ``(offset, message)`` for each intact one and ``(offset, error)``
    for each damaged one. Raises ``FileNotFoundError`` when the piece is gone."""
    path = os.path.join(manifest.path, piece.file)
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return
        with mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) as mm:
            for found in walk(mm, piece.from_offset):
                offset = piece.from_offset + found.pos
                if found.error is not None:
                    yield offset, found.error.located(path, offset)
                else:
                    yield offset, decode_record(mm[found.pos : found.pos + found.size])


# -------------------------------------------------------------------------------- setting aside


def data_end(mf: MappedFile, start: int) -> int:
    """End of the last non-zero byte at or after ``start`` (``start`` when there is none)."""
    for a, b in reversed(mf.data_ranges(start, mf.file_size)):
        end = b
        while end > a:
            lo = max(a, end - _CHUNK)
            kept = len(mf.mm[lo:end].rstrip(b"\0"))
            if kept:
                return lo + kept
            end = lo
    return start


def _unique_dir(top: str, now_ms: int) -> tuple[str, str]:
    stamp = datetime.fromtimestamp(now_ms / 1000, tz=UTC)
    base = stamp.strftime("%Y%m%dT%H%M%S") + f".{now_ms % 1000:03d}Z"
    name, n = base, 1
    while os.path.exists(os.path.join(top, name)):
        n += 1
        name = f"{base}-{n}"
    return name, stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class _Cut:
    """Collects what one recovery cut, then writes the quarantine (copies, manifest, moves)."""

    def __init__(self, store_root: str) -> None:
        self.store_root = store_root
        self.copies: list[tuple[Piece, MappedFile, int, int]] = []  # piece, file, start, end (file positions)
        self.moves: list[tuple[Piece, MappedFile, MappedFileQueue]] = []

    def take_commit_log(self, files: MappedFileQueue, cut: int) -> None:
        for mf in files.files:
            if mf.file_from_offset > cut:
                if data_end(mf, 0) == 0:
                    continue  # an empty pre-allocated file: nothing to keep, recovery deletes it
                good, bad = _count(mf.mm, mf.file_from_offset)
                name = f"{COMMITLOG}/{offset_to_file_name(mf.file_from_offset)}"
                piece = Piece(name, mf.path, COMMITLOG, True, mf.file_from_offset, mf.end_offset, good, bad)
                self.moves.append((piece, mf, files))
            elif mf.file_from_offset <= cut < mf.end_offset:
                # also without a corrupt record: a header of zeros ends the scan, but a page lost under it
                # (power loss, a sector read back as zeros) leaves stored records after it
                start = cut - mf.file_from_offset
                end = data_end(mf, start)
                if end > start:
                    good, bad = _count(mf.mm, mf.file_from_offset, start, end)
                    name = f"{COMMITLOG}/{offset_to_file_name(cut)}"
                    piece = Piece(name, mf.path, COMMITLOG, False, cut, mf.file_from_offset + end, good, bad)
                    self.copies.append((piece, mf, start, end))

    def take_queue(self, cq: ConsumeQueue, first_queue_offset: int) -> None:
        cut = first_queue_offset * CQ_STORE_UNIT_SIZE
        for mf in cq.files.files:
            start = max(0, cut - mf.file_from_offset)
            if start >= mf.wrote_position:
                continue
            units = (mf.wrote_position - start) // CQ_STORE_UNIT_SIZE
            first = (mf.file_from_offset + start) // CQ_STORE_UNIT_SIZE
            whole = mf.file_from_offset > cut
            name = (
                f"{CONSUMEQUEUE}/{cq.topic}/{cq.queue_id}/{offset_to_file_name(mf.file_from_offset + start)}"
            )
            piece = Piece(
                name, mf.path, CONSUMEQUEUE, whole, first, first + units, units, 0, cq.topic, cq.queue_id
            )
            if whole:
                self.moves.append((piece, mf, cq.files))
            else:
                self.copies.append((piece, mf, start, mf.wrote_position))

    def write(self, manifest: Manifest) -> None:
        """Copies first (fsynced), then the manifest, then the moves: at no point is a byte in neither place."""
        qdir = manifest.path
        dirs = {qdir}
        for piece, mf, start, end in self.copies:
            dest = os.path.join(qdir, piece.file)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            dirs.add(os.path.dirname(dest))
            with open(dest, "wb") as f:
                for a in range(start, end, _CHUNK):
                    f.write(mf.mm[a : min(a + _CHUNK, end)])
                f.flush()
                os.fsync(f.fileno())
        manifest.save()
        for piece, mf, queue in self.moves:
            dest = os.path.join(qdir, piece.file)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            dirs.add(os.path.dirname(dest))
            mf.flush()
            mf.close()
            shutil.move(mf.path, dest)  # a rename on one file system
            dirs.add(os.path.dirname(mf.path))
            queue.files.remove(mf)
        for d in sorted(dirs, key=len, reverse=True):
            sync_directory(d)
        sync_directory(os.path.dirname(qdir))
        for piece, mf, start, end in self.copies:
            if (
                piece.kind == COMMITLOG and not manifest.in_place
            ):  # set aside: zero it, so a later recovery cannot take stale bytes
                for a, b in mf.data_ranges(start, end):
                    for c in range(a, b, _CHUNK):
                        mf.mm[c : min(c + _CHUNK, b)] = bytes(min(_CHUNK, b - c))
                mf.sync()


def kept_in_place(manifests: Iterable[Manifest], files: MappedFileQueue) -> dict[int, int]:
    """``offset -> size`` of the damaged records earlier recoveries set aside but left in the CommitLog
    ``files``: those whose bytes there are still the quarantined copy (not since cut and written over)."""
    out = {}
    for m in manifests:
        for p in m.files if m.in_place else ():
            size = p.to_offset - p.from_offset
            mf = files.find_file(p.from_offset)
            if p.kind != COMMITLOG or mf is None:
                continue
            pos = p.from_offset - mf.file_from_offset
            try:
                with open(os.path.join(m.path, p.file), "rb") as f:
                    copy = f.read(size + 1)
            except OSError:
                continue
            if pos + size <= mf.file_size and copy == mf.view[pos : pos + size]:
                out[p.from_offset] = size
    return out


def set_aside_records(
    store_root: str,
    commit_log: MappedFileQueue,
    damaged: Iterable[tuple[CorruptRecordError, int]],
    *,
    recovery: str,
    now_ms: int,
    who: str = "recovery",
) -> Manifest | None:
    """Copy each damaged record ``(error, size)`` whose extent recovery still knew into a new quarantine, and
    log at ERROR: the records stay where they are in the CommitLog (so every later record keeps its offset
    and stays in service) and are never served. ``None`` when there is none. ``who`` names what set them
    aside in the ERROR (a replicating slave takes its master's set-aside records the same way)."""
    taken = _Cut(store_root)
    reasons = []
    for error, size in damaged:
        mf = commit_log.find_file(error.offset)
        if mf is None:
            continue
        start = error.offset - mf.file_from_offset
        name = f"{COMMITLOG}/{offset_to_file_name(error.offset)}"
        piece = Piece(name, mf.path, COMMITLOG, False, error.offset, error.offset + size, 0, 1)
        taken.copies.append((piece, mf, start, start + size))
        reasons.append(f"offset {error.offset} ({error.reason})")
    if not taken.copies:
        return None
    top = quarantine_root(store_root)
    os.makedirs(top, exist_ok=True)
    name, created = _unique_dir(top, now_ms)
    qdir = os.path.join(top, name)
    os.makedirs(qdir)
    pieces = [p for p, *_ in taken.copies]
    why = (
        f"{plural(len(reasons), 'damaged record')} whose extent is known, at CommitLog {', '.join(reasons)}; "
        "kept in the CommitLog, never served; every later record stays in service"
    )
    manifest = Manifest(
        name, now_ms, created, why, recovery, -1, 0, len(pieces), 0, pieces, in_place=True, path=qdir
    )
    taken.write(manifest)
    log.error(
        "%s set aside %s alone (copied under %s), at CommitLog %s; every "
        "later record stays in service: see 'mqctl store verify' and 'mqctl store salvage'",
        who,
        plural(len(pieces), "damaged record"),
        qdir,
        ", ".join(reasons),
    )
    return manifest


def set_aside(
    store_root: str,
    commit_log: MappedFileQueue,
    queues: Iterable[ConsumeQueue],
    cut: int,
    *,
    corruption: CorruptRecordError | None,
    recovery: str,
    now_ms: int,
    queue_cut: Callable[[ConsumeQueue], int],
    why: str | None = None,
) -> Manifest | None:
    """Move what truncating the CommitLog at ``cut`` would destroy into a new quarantine; ``None`` when
    nothing would be (a clean end: nothing but zeros after it, later files empty, no unit past it).

    Set aside: every later CommitLog file holding data, and the kept file's bytes from the cut to the end
    of its data (after a corrupt record, or after a header of zeros that is not the end of the data), then every ConsumeQueue unit at or past ``queue_cut(cq)`` (the first
    queue offset whose record is at ``cut`` or later). Moved files leave the queues; recovery then
    truncates what remains as before. Logged with the number of intact records set aside: at ERROR when
    it holds a record, a damaged one or a ConsumeQueue unit (its record was stored), else at WARNING.
    ``why`` replaces the reason derived from ``corruption`` (a Raft log cutting a divergent tail).
    """
    taken = _Cut(store_root)
    taken.take_commit_log(commit_log, cut)
    queues = list(queues)
    lost = (
        not taken.copies and not taken.moves
    )  # no CommitLog data follows: units past it are all that is left
    if lost and all(queue_cut(cq) >= cq.max_offset for cq in queues):
        return None
    for cq in queues:
        taken.take_queue(cq, queue_cut(cq))
    top = quarantine_root(store_root)
    os.makedirs(top, exist_ok=True)
    name, created = _unique_dir(top, now_ms)
    qdir = os.path.join(top, name)
    os.makedirs(qdir)
    pieces = sorted(
        [p for p, *_ in taken.copies] + [p for p, *_ in taken.moves],
        key=lambda p: (p.kind, p.topic or "", p.queue_id or 0, p.from_offset),
    )
    logs = [p for p in pieces if p.kind == COMMITLOG]
    why = (
        why
        if why is not None
        else str(corruption)
        if corruption is not None
        else f"valid data ends at offset {cut}; ConsumeQueue units point past it, at records the CommitLog "
        "no longer holds (stored, then lost before they reached the disk?)"
        if lost
        else f"valid data ends at offset {cut}; data follows it"
    )
    manifest = Manifest(
        name,
        now_ms,
        created,
        why,
        recovery,
        cut,
        sum(p.records for p in logs),
        sum(p.damaged for p in logs),
        sum(p.records for p in pieces if p.kind == CONSUMEQUEUE),
        pieces,
        path=qdir,
    )
    taken.write(manifest)
    # a unit set aside names a record that was stored and dispatched (answered), even when salvage finds none
    level = logging.ERROR if manifest.records or manifest.damaged or manifest.units else logging.WARNING
    log.log(
        level,
        "recovery set aside %s (%d damaged, %s) from CommitLog offset %d "
        "in %s under %s: %s; nothing was deleted: see 'mqctl store verify' and 'mqctl store salvage'",
        plural(manifest.records, "intact record"),
        manifest.damaged,
        plural(manifest.units, "ConsumeQueue unit"),
        cut,
        plural(len(pieces), "file"),
        qdir,
        why,
    )
    return manifest
