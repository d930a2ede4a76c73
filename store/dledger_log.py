"""The file-backed DLedger log: ``DLedgerMmapFileStore``'s files, our quarantine instead of its deletes.

Files as :mod:`store.dledger` describes, so a 4.9.8 DLedger member reads what we write and we read
what it writes. Where ``DLedgerMmapFileStore`` deletes (a follower's divergent tail in ``#truncate``,
what ``#recover`` cannot validate, later files it drops), this moves the bytes under
``<storePathRootDir>/quarantine/`` first and logs at ERROR (:mod:`store.quarantine`); a committed
entry is never cut by a truncation, and one lost to damage is named.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator

from store.dledger import (
    BLANK_MAGIC_CODE,
    BODY_CRC_OFFSET,
    BODY_OFFSET,
    CHECKPOINT_FILE,
    CURRENT_MAGIC,
    DATA_DIR,
    DATA_FILE_SIZE,
    INDEX_DIR,
    INDEX_FILE_SIZE,
    INDEX_UNIT_SIZE,
    CorruptEntryError,
    DamagedEntryError,
    DLedgerCode,
    DLedgerError,
    Entry,
    IndexRecord,
    body_crc_problem,
    check_follower_entry,
    check_header,
    check_held,
    check_truncation,
    decode_checkpoint,
    decode_entry,
    decode_header,
    decode_index,
    encode_blank,
    encode_checkpoint,
    encode_entry,
    encode_index,
    entry_body_crc,
    entry_header_problem,
    index_pos_size,
    needs_roll,
    pack_entries,
    pack_header,
    pack_index,
    pack_index_record,
    raw_header,
    read_small_file,
    stored_body_crc,
    unpack_header,
    write_small_file,
)
from store.mapped_file import MappedFile, MappedFileQueue
from store.quarantine import DIVERGED, Manifest, set_aside

log = logging.getLogger(__name__)

_c_scan_run: (
    Callable[[memoryview, int, int, int, int, int, int, int], tuple[int, int, int, int, bytes]] | None
)
_c_place_entry: Callable[[memoryview, int, int, int, int, bytes], int] | None
try:  # the compiled build's scan of a pushed run (_cparse.c); the loop of _append_raw_run without it
    from store import _cparse

    _c_scan_run = _cparse.scan_run
    _c_place_entry = getattr(_cparse, "place_entry", None)  # (a build older than this source: None)
except ImportError:
    _c_scan_run = _c_place_entry = None

#: ``(entry pos, encoded entry)``: may rewrite the body in place before it is written
#: (``DLedgerMmapFileStore.AppendHook``; 4.9.8's CommitLog stamps each record's physical offset).
AppendHook = Callable[[int, bytearray], None]
#: ``(entry pos, body)``: a reason when the body is damaged (recovery sets it and what follows aside).
BodyCheck = Callable[[int, memoryview], str | None]

#: How many of the entries a leader appended last it keeps to push them without reading them back.
RECENT_ENTRIES = 1024
#: ``DLedgerConfig#checkPointInterval``: the committed index is persisted at most this often by flush.
CHECKPOINT_INTERVAL_MS = 3000


def dledger_dir(store_root: str, self_id: str) -> str:
    """``DLedgerConfig#getDefaultPath``: ``<storeBaseDir>/dledger-<selfId>`` (4.9.8's storePathRootDir)."""
    return os.path.join(store_root, f"dledger-{self_id}")


class DLedgerLog:
    """A :class:`store.dledger.RaftLog` in DLedger's files under ``directory`` (``dledger-<selfId>``).

    ``data_dir`` is ``storePathDLedgerCommitLog`` when set (else ``<directory>/data``); ``store_root``
    holds the quarantine (default: ``directory``'s parent, the broker's ``storePathRootDir``).
    Thread-safe: one lock around every change, reads of written entries need none.
    """

    def __init__(
        self,
        directory: str,
        *,
        data_dir: str | None = None,
        store_root: str | None = None,
        data_file_size: int = DATA_FILE_SIZE,
        index_file_size: int = INDEX_FILE_SIZE,
        read_only: bool = False,
        append_hook: AppendHook | None = None,
        body_check: BodyCheck | None = None,
        now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        if index_file_size % INDEX_UNIT_SIZE:
            raise ValueError(f"index file size {index_file_size} is not a multiple of {INDEX_UNIT_SIZE}")
        self.directory = directory
        self.store_root = store_root or os.path.dirname(os.path.abspath(directory))
        self.read_only = read_only
        self.data = MappedFileQueue(
            data_dir or os.path.join(directory, DATA_DIR),
            data_file_size,
            read_only=read_only,
            random_until_full=True,
        )
        self.index = MappedFileQueue(os.path.join(directory, INDEX_DIR), index_file_size, read_only=read_only)
        self.append_hook = append_hook
        self.body_check = body_check
        self.now_ms = now_ms
        self._lock = threading.RLock()
        self._begin = -1
        self._last = -1
        self._last_term = -1
        self._committed = -1
        self._committed_pos = 0
        self._checkpointed: tuple[int, int] | None = None
        #: one writer of the checkpoint at a time (the flush thread's and close's share its .tmp file); not
        #: ``_lock``, which the loop's appends take: they need not wait for the checkpoint's fsync
        self._checkpoint_lock = threading.Lock()
        self._checkpoint_ms = 0
        #: (leader) the entries appended lately, as written: each is read back at once to push it to the
        #: followers, and a push must not need the files (cleared wherever entries are cut)
        self._recent: dict[int, Entry] = {}
        #: whether a leader's placed appends go in `_recent`: only a push that carries decoded entries (JSON,
        #: to a follower that did not say it reads binary pushes) needs them; a binary push is a slice of the
        #: data file, and what is not kept is read back from there (`RaftLog.keep_recent`)
        self.keep_recent = True
        self.lost_committed = -1  # after recovery: the checkpoint's committed index when damage cut below it
        self.damaged_bodies: list[int] = []  # positions of entries recovery found damaged but kept
        #: told of an entry read back from disk that fails its bodyCrc (the CommitLog stops serving it)
        self.on_damaged: Callable[[Entry], None] | None = None
        #: told of the data offset entries are cut from (a follower appends other entries there)
        self.on_cut: Callable[[int], None] | None = None
        #: told of each run of entries :meth:`append_raw` appended (the bytes and the run's extent in them),
        #: under the lock, once they count as written (the CommitLog parses their records while at hand)
        self.on_raw_appended: Callable[[memoryview, int, int], None] | None = None
        self.crc_damage: tuple[int, str] | None = None  # after recovery: (pos, why) of the entry whose
        # bodyCrc failed, where recovery cut
        self.recover()

    # ------------------------------------------------------------------ state

    @property
    def lock(self) -> threading.RLock:
        """Held around every change (reentrant): a caller keeping state beside an append takes it around both."""
        return self._lock

    @property
    def begin_index(self) -> int:
        return self._begin

    @property
    def last_index(self) -> int:
        return self._last

    @property
    def last_term(self) -> int:
        return self._last_term

    @property
    def committed_index(self) -> int:
        return self._committed

    @property
    def committed_pos(self) -> int:
        """``DLedgerMmapFileStore#getCommittedPos``: the end of the last committed entry (0 when none)."""
        return self._committed_pos

    @property
    def end_pos(self) -> int:
        """Where the next entry goes (before any roll)."""
        return self.data.max_offset

    @property
    def min_pos(self) -> int:
        return self.data.min_offset

    # ------------------------------------------------------------------ reads

    def index_record(self, index: int) -> IndexRecord:
        """The index file's record of entry ``index`` (which must be held)."""
        check_held(self, index)
        off = index * INDEX_UNIT_SIZE
        mf = self.index.find_file(off)
        if mf is None:
            raise DLedgerError(DLedgerCode.DISK_ERROR, f"no index file holds entry {index}")
        return decode_index(mf.view, off - mf.file_from_offset)

    def read(self, pos: int, size: int) -> memoryview | None:
        """``size`` bytes of the data files at ``pos`` (``None`` when they are not all in one file)."""
        mf = self.data.find_file(pos)
        if mf is None:
            return None
        rel = pos - mf.file_from_offset
        if rel + size > mf.wrote_position:
            return None
        return mf.view[rel : rel + size]

    def get(self, index: int) -> Entry:
        recent = self._recent.get(index)
        if recent is not None:
            check_held(self, index)
            return recent
        rec = self.index_record(index)
        view = self.read(rec.pos, rec.size)
        if view is None:
            raise DLedgerError(DLedgerCode.DISK_ERROR, f"no data for entry {index} at {rec.pos}")
        entry = decode_entry(view)
        if entry.pos != rec.pos or entry.index != index:
            raise CorruptEntryError(rec.pos, f"entry {index}: data says index {entry.index} pos {entry.pos}")
        # (read back from disk, where it may have been damaged since: what is served from memory is not)
        damage = body_crc_problem(index, entry.body_crc, entry.body)
        if damage is not None:
            if self.on_damaged is not None:
                self.on_damaged(entry)
            raise DamagedEntryError(index, rec.pos, damage)
        return entry

    def term_at(self, index: int) -> int:
        return self.index_record(index).term

    def _pos_size(self, index: int) -> tuple[int, int]:
        """(pos, size) of held entry ``index`` from its index record, without building the record."""
        off = index * INDEX_UNIT_SIZE
        mf = self.index.find_file(off)
        if mf is None:
            raise DLedgerError(DLedgerCode.DISK_ERROR, f"no index file holds entry {index}")
        return index_pos_size(mf.view, off - mf.file_from_offset)

    def raw_entries(self, first: int, max_count: int, max_bytes: int) -> tuple[int, bytes] | None:
        """(count, bytes) of entries ``first``... as the data file holds them: one slice of the mapped file,
        no entry decoded (a leader's binary push). Two index look-ups while the run fits one data file and
        the limits; else the run is halved until it does."""
        last = min(self._last, first + max_count - 1)
        if first < self._begin or first > last or first < 0:
            return None
        start, first_size = self._pos_size(first)
        mf = self.data.find_file(start)
        if mf is None:
            return None
        base = mf.file_from_offset
        limit = min(base + mf.wrote_position, start + first_size + max_bytes)
        end = self._run_end(last, start, limit)
        if end < 0:  # (the run shorter: the last entry that ends within the limit, by bisection)
            lo, hi = first, last
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if self._run_end(mid, start, limit) >= 0:
                    lo = mid
                else:
                    hi = mid
            last = lo
            end = start + first_size if lo == first else self._run_end(lo, start, limit)
        if end > base + mf.wrote_position:
            return None
        return last - first + 1, bytes(mf.view[start - base : end - base])

    def _run_end(self, last: int, start: int, limit: int) -> int:
        """Where entry ``last`` ends when a run from ``start`` to it stays within ``limit`` (one data
        file), else -1."""
        pos, size = self._pos_size(last)
        return pos + size if start <= pos and pos + size <= limit else -1

    # ------------------------------------------------------------------ writes

    def _writable(self) -> None:
        if self.read_only:
            raise DLedgerError(DLedgerCode.UNEXPECTED_ARGUMENT, f"{self.directory} is open read-only")

    def _place(self, size: int, pos: int = -1, index: int = -1) -> tuple[MappedFile, int]:
        """``MmapFileList#preAppend``: the file and position for an entry of ``size``, rolling with a blank.
        A follower's entry ``index`` that says it goes at ``pos`` is refused before any roll when it would
        land elsewhere: a blank written for it would end this data file where the leader's goes on."""
        if size + 8 > self.data.file_size:
            raise DLedgerError(DLedgerCode.UNEXPECTED_ARGUMENT, f"entry of {size} bytes exceeds a data file")
        mf = self.data.last_file_for_append()
        roll = needs_roll(self.data.file_size, mf.wrote_position, size)
        at = mf.file_from_offset + (self.data.file_size if roll else mf.wrote_position)
        if pos >= 0 and pos != at:
            raise DLedgerError(DLedgerCode.DISK_ERROR, f"entry {index}: leader pos {pos} != {at}")
        if roll:
            start = mf.wrote_position
            mf.prepare(self.data.file_size, populate=False)
            mf.mm[start : self.data.file_size] = encode_blank(self.data.file_size - start)
            mf.wrote_position = self.data.file_size
            mf = self.data.last_file_for_append()
        return mf, mf.file_from_offset + mf.wrote_position

    def _write(self, mf: MappedFile, data: bytes | bytearray, entry: Entry) -> None:
        rel = mf.wrote_position
        if rel + len(data) > mf.prepared_position:
            mf.prepare(rel + len(data), populate=False)
        mf.mm[rel : rel + len(data)] = data
        self._written(mf, rel + len(data), entry)

    def _written(self, mf: MappedFile, end: int, entry: Entry) -> None:
        """``entry`` written up to ``end`` of ``mf``: its index record, and the log's last entry. The data
        counts as written only once its index record is (a full disk refusing the record leaves the entry's
        bytes past the data's end, where the entry appended again goes)."""
        self._write_index(entry)
        mf.wrote_position = end
        self._last = entry.index
        self._last_term = entry.term
        if self._begin == -1:
            self._begin = entry.index

    def _write_index(self, entry: Entry) -> None:
        off = entry.index * INDEX_UNIT_SIZE
        mf = self.index.last_file_for_append(off)
        if mf.file_from_offset + mf.wrote_position != off:
            raise DLedgerError(
                DLedgerCode.DISK_ERROR,
                f"index files end at {mf.file_from_offset + mf.wrote_position}, entry {entry.index} goes at {off}",
            )
        rel = off - mf.file_from_offset
        if rel + INDEX_UNIT_SIZE > mf.prepared_position:
            mf.prepare(rel + INDEX_UNIT_SIZE, populate=False)
        pack_index(mf.view, rel, entry)
        mf.wrote_position = rel + INDEX_UNIT_SIZE

    def append_leader(self, body: bytes, term: int) -> Entry:
        """``DLedgerMmapFileStore#appendAsLeader``: next index, ``term``, pos where it lands; the hook runs
        on the encoded entry before it is written, then (ours) the body's CRC goes in ``bodyCrc``."""
        self._writable()
        with self._lock:
            if term < self._last_term:
                raise DLedgerError(DLedgerCode.INCONSISTENT_TERM, f"term {term} after term {self._last_term}")
            size = BODY_OFFSET + len(body)
            mf, pos = self._place(size)
            # the entry built in place (header packed in, the record copied after it): one copy of the body
            data = bytearray(size)
            pack_header(data, CURRENT_MAGIC, size, self._last + 1, term, pos, len(body))
            data[BODY_OFFSET:] = body
            if self.append_hook is not None:
                self.append_hook(pos, data)
            body = bytes(memoryview(data)[BODY_OFFSET:])
            crc = entry_body_crc(body)
            data[BODY_CRC_OFFSET : BODY_CRC_OFFSET + 4] = crc.to_bytes(4, "big")
            entry = Entry(self._last + 1, term, body, pos, body_crc=crc)
            self._write(mf, data, entry)
            self._keep(entry)
            return entry

    def _keep(self, entry: Entry) -> None:
        """A leader's entry kept as written, to be pushed without reading it back. The oldest goes by its index
        (a leader's entries are consecutive): ``next(iter(...))`` would step over every entry deleted from
        the front since the dict last resized, on every append."""
        recent = self._recent
        recent[entry.index] = entry
        if len(recent) > RECENT_ENTRIES and recent.pop(entry.index - RECENT_ENTRIES, None) is None:
            del recent[next(iter(recent))]  # (a gap: entries of an earlier leadership still kept)

    def leader_pos(self, size: int) -> int:
        """Where a leader's next entry of ``size`` bytes goes, the data file rolled first when it does not
        fit: the caller holds :attr:`lock` until :meth:`append_leader_placed` appends it there, so that a
        body can name its own place before it is encoded (a CommitLog record its offset: no append hook)."""
        self._writable()
        return self._place(size)[1]

    def append_leader_placed(self, body: bytes, term: int, pos: int) -> Entry:
        """:meth:`append_leader` of a body already final for ``pos`` (:meth:`leader_pos`, under the same hold
        of :attr:`lock`): the hook is not run, and the header and the body go straight into the mapped file
        (no entry built in a buffer first, no copy of the body kept: the entry holds ``body`` itself)."""
        with self._lock:
            if term < self._last_term:
                raise DLedgerError(DLedgerCode.INCONSISTENT_TERM, f"term {term} after term {self._last_term}")
            size = BODY_OFFSET + len(body)
            mf, at = self._place(size)
            if at != pos:
                raise DLedgerError(DLedgerCode.DISK_ERROR, f"entry placed at {pos}, the log ends at {at}")
            rel = mf.wrote_position
            end = rel + size
            if end > mf.prepared_position:
                mf.prepare(end, populate=False)
            index = self._last + 1
            view = mf.view
            if _c_place_entry is not None:  # (the CRC, the header and the body's copy in one C call)
                crc = _c_place_entry(view, rel, index, term, pos, body)
            else:
                crc = entry_body_crc(body)
                pack_header(view, CURRENT_MAGIC, size, index, term, pos, len(body), crc, rel)
                view[rel + BODY_OFFSET : end] = body
            entry = Entry(index, term, body, pos, body_crc=crc)
            self._written(mf, end, entry)
            if self.keep_recent:
                self._keep(entry)
            return entry

    def append_follower(self, entry: Entry) -> Entry:
        """``DLedgerMmapFileStore#appendAsFollower``: the leader's entry lands at the leader's pos or not at all."""
        self._writable()
        with self._lock:
            check_follower_entry(self, entry)
            mf, pos = self._place(entry.size, entry.pos, entry.index)
            placed = entry if entry.pos == pos else entry.at(pos)
            self._write(mf, encode_entry(placed), placed)
            return placed

    def append_followers(self, entries: list[Entry]) -> None:
        """:meth:`append_follower` for a push's batch: the entries that go into one data file are written to it
        in one slice and their index records in another (not each entry in two). Those before a refused
        one stay appended."""
        self._writable()
        with self._lock:
            i = 0
            while i < len(entries):
                i = self._append_run(entries, i)

    def _append_run(self, entries: list[Entry], i: int) -> int:
        """Append ``entries[i:]`` as far as the current data file takes them (rolled first when the first does
        not fit); the index of the first not appended. Raises, after writing the ones before it, at a refused one.

        Every entry of the run is checked first (index and term continuity, the body against ``bodyCrc``, the
        leader's pos), then the run is packed straight into the mapped file and its index records into one
        buffer written after it (:func:`pack_entries`)."""
        first = entries[i]
        check_follower_entry(self, first)
        mf, pos = self._place(first.size, first.pos, first.index)
        base, file_size = mf.file_from_offset, self.data.file_size
        refused: DLedgerError | None = None
        at = pos
        prev_index, prev_term = first.index - 1, first.term
        j = i
        while j < len(entries):
            entry = entries[j]
            size = BODY_OFFSET + len(entry.body)
            if j > i:
                if entry.index != prev_index + 1 or entry.term < prev_term:
                    refused = DLedgerError(
                        DLedgerCode.INCONSISTENT_INDEX,
                        f"entry {entry.index} of term {entry.term} after {prev_index} of term {prev_term}",
                    )
                    break
                damage = body_crc_problem(entry.index, entry.body_crc, entry.body)
                if damage:  # (the first is checked by check_follower_entry)
                    refused = DLedgerError(
                        DLedgerCode.UNEXPECTED_ARGUMENT, f"{damage}: the pushed body is damaged"
                    )
                    break
                if needs_roll(file_size, at - base, size):
                    break
            if entry.pos >= 0 and entry.pos != at:
                refused = DLedgerError(
                    DLedgerCode.DISK_ERROR, f"entry {entry.index}: leader pos {entry.pos} != {at}"
                )
                break
            at += size
            prev_index, prev_term = entry.index, entry.term
            j += 1
        if j > i:
            rel = mf.wrote_position
            if rel + at - pos > mf.prepared_position:  # (reserved ahead in chunks: mostly done already)
                mf.prepare(rel + at - pos, populate=False)
            records = bytearray((j - i) * INDEX_UNIT_SIZE)
            pack_entries(mf.mm, rel, entries[i:j], pos, records)
            self._write_index_records(first.index, records)
            mf.wrote_position = rel + at - pos
            self._last, self._last_term = prev_index, prev_term
            if self._begin == -1:
                self._begin = first.index
        if refused is not None:
            raise refused
        return j

    def append_raw(self, data: bytes) -> tuple[int, int]:
        """:meth:`append_followers` of a binary push: entries as the leader's data file holds them. Each
        is checked in one pass over the bytes (header, index and term continuity, the leader's pos, the body
        against ``bodyCrc``), then each run that fits the current data file is copied into it in one slice
        and its index records in one buffer. Entries held already must be the same bytes (a repeat). The
        indexes of the body's first and last entries: what the push's own fields may claim, no more."""
        self._writable()
        view = memoryview(data)
        with self._lock:
            if _c_scan_run is not None:
                whole = self._append_raw_whole(view)
                if whole is not None:
                    return whole
            return self._append_raw_checked(view)

    def _append_raw_checked(self, view: memoryview) -> tuple[int, int]:
        """:meth:`append_raw` entry by entry where it needs judging: repeats skipped, runs rolled, the first
        entry that does not pass refused (the lock held)."""
        first = raw_header(view, 0)[2]  # (an empty body refused: it shows no entry)
        off, last = self._skip_held(view)
        while off < len(view):
            off = self._append_raw_run(view, off)
            last = self._last
        return first, last

    def _append_raw_whole(self, view: memoryview) -> tuple[int, int] | None:
        """The common push in one C pass: every entry of ``view`` continues this log and passes every check
        of :meth:`_append_raw_run`, its first entry's included, in the current data file with no roll due;
        then the run is copied in one slice and its index records in one buffer. None, with nothing
        written, when any entry does not (a repeat, a roll, a refusal): the caller's checks judge it then."""
        assert _c_scan_run is not None
        mf = self.data.last_file_for_append()
        base, rel = mf.file_from_offset, mf.wrote_position
        # (start -1: the first entry is checked as every later one, its bodyCrc and its room included)
        off, at, last, last_term, records = _c_scan_run(
            view, 0, -1, base + rel, base, self.data.file_size, self._last, self._last_term
        )
        if off == 0 or off != len(view):
            return None
        first = self._last + 1
        end = at - base
        if end > mf.prepared_position:  # (reserved ahead in chunks: mostly done already)
            mf.prepare(end, populate=False)
        mf.mm[rel:end] = view
        self._write_index_records(first, records)
        mf.wrote_position = end
        self._last, self._last_term = last, last_term
        if self._begin == -1:
            self._begin = first
        if self.on_raw_appended is not None:
            self.on_raw_appended(view, 0, off)
        return first, last

    def _skip_held(self, view: memoryview) -> tuple[int, int]:
        """Where the entries this log does not hold yet begin in ``view``, and the index of the last held one
        before it (-1: none); raises at a held one that differs."""
        off, last = 0, -1
        while off < len(view):
            _m, size, index, _t, _p, _ch, _chain, _crc, _bl = raw_header(view, off)
            if index > self._last:
                return off, last
            held = self.read(*self._pos_size(index)) if index >= self._begin else None
            if held is None or held != view[off : off + size]:
                raise DLedgerError(DLedgerCode.INCONSISTENT_INDEX, f"entry {index} differs from the one held")
            off += size
            last = index
        return off, last

    def _append_raw_run(self, view: memoryview, off: int) -> int:
        """Append the entries of ``view`` from ``off`` as far as the current data file takes them (rolled
        first when the first does not fit); the offset after the last appended. Raises, after writing the
        ones before it, at a refused one."""
        # the first entry checked whole before a roll is written for it (as check_follower_entry)
        _m, first_size, first_index, first_term, first_pos, _ch, _chain, first_crc, _bl = unpack_header(
            view, off
        )
        if first_index != self._last + 1 or first_term < self._last_term:
            raise DLedgerError(
                DLedgerCode.INCONSISTENT_INDEX,
                f"entry {first_index} of term {first_term} after {self._last} of term {self._last_term}",
            )
        damage = body_crc_problem(first_index, first_crc, view[off + BODY_OFFSET : off + first_size])
        if damage:
            raise DLedgerError(DLedgerCode.UNEXPECTED_ARGUMENT, f"{damage}: the pushed body is damaged")
        mf, at = self._place(first_size, first_pos, first_index)
        base, file_size = mf.file_from_offset, self.data.file_size
        start, start_at = off, at
        prev_index, prev_term = self._last, self._last_term
        records = bytearray()
        refused: DLedgerError | None = None
        if _c_scan_run is not None:
            # the entries that pass every check of the loop below, taken in one call; the loop goes on
            # from the first that does not (or that needs a roll), and judges it as it always did
            off, at, prev_index, prev_term, packed = _c_scan_run(
                view, off, start, at, base, file_size, prev_index, prev_term
            )
            records += packed
        while off < len(view):
            try:
                magic, size, index, term, pos, _ch, _chain, crc, _bl = raw_header(view, off)
            except DLedgerError as exc:
                refused = exc
                break
            if index != prev_index + 1 or term < prev_term:
                refused = DLedgerError(
                    DLedgerCode.INCONSISTENT_INDEX,
                    f"entry {index} of term {term} after {prev_index} of term {prev_term}",
                )
                break
            if off > start and needs_roll(file_size, at - base, size):
                break
            if pos != at:
                refused = DLedgerError(DLedgerCode.DISK_ERROR, f"entry {index}: leader pos {pos} != {at}")
                break
            damage = (
                None if off == start else body_crc_problem(index, crc, view[off + BODY_OFFSET : off + size])
            )
            if damage:
                refused = DLedgerError(
                    DLedgerCode.UNEXPECTED_ARGUMENT, f"{damage}: the pushed body is damaged"
                )
                break
            pack_index_record(records, magic, pos, size, index, term)
            off += size
            at += size
            prev_index, prev_term = index, term
        if off > start:
            rel = mf.wrote_position
            if rel + at - start_at > mf.prepared_position:  # (reserved ahead in chunks: mostly done already)
                mf.prepare(rel + at - start_at, populate=False)
            mf.mm[rel : rel + at - start_at] = view[start:off]
            self._write_index_records(first_index, records)
            mf.wrote_position = rel + at - start_at
            self._last, self._last_term = prev_index, prev_term
            if self._begin == -1:
                self._begin = first_index
            if self.on_raw_appended is not None:
                self.on_raw_appended(view, start, off)
        if refused is not None:
            raise refused
        return off

    def _write_index_records(self, index: int, records: bytes | bytearray) -> None:
        """The index records of entries ``index``, ``index + 1``, ... in as few writes as their files allow;
        all or none (a full disk part way: those written are cut again, and the caller counts the entries'
        data only once this returns)."""
        try:
            self._write_index_run(index, records)
        except BaseException:
            self.index.truncate_dirty_files(index * INDEX_UNIT_SIZE)
            raise

    def _write_index_run(self, index: int, records: bytes | bytearray) -> None:
        off, done = index * INDEX_UNIT_SIZE, 0
        while done < len(records):
            mf = self.index.last_file_for_append(off + done)
            if mf.file_from_offset + mf.wrote_position != off + done:
                raise DLedgerError(
                    DLedgerCode.DISK_ERROR,
                    f"index files end at {mf.file_from_offset + mf.wrote_position}, entry records go at {off + done}",
                )
            rel = mf.wrote_position
            chunk = min(len(records) - done, mf.file_size - rel)
            if rel + chunk > mf.prepared_position:
                mf.prepare(rel + chunk, populate=False)
            mf.mm[rel : rel + chunk] = records[done : done + chunk]
            mf.wrote_position = rel + chunk
            done += chunk

    def truncate_after(self, index: int) -> int:
        """Cut every entry after ``index`` (``DLedgerMmapFileStore#truncate``), the bytes set aside first."""
        self._writable()
        with self._lock:
            check_truncation(self, index)
            if index >= self._last:
                return 0
            first_cut = max(index + 1, self._begin)
            cut = self.index_record(first_cut).pos
            count = self._last - index
            why = (
                f"DLedger entries {first_cut}..{self._last} cut after entry {index} at data offset {cut}: "
                "a divergent, uncommitted tail (never served)"
            )
            self._set_aside(cut, why)
            self._recent.clear()
            if self.on_cut is not None:
                self.on_cut(cut)
            self._truncate_files(cut, index + 1)
            self._last = index if index >= self._begin else -1
            self._last_term = self.term_at(index) if self._last >= 0 else -1
            if self._last == -1:
                self._begin = -1
            log.error("DLedger log %s: %s; set aside in quarantine", self.directory, why)
            return count

    def _set_aside(self, cut: int, why: str) -> Manifest | None:
        return set_aside(
            self.store_root,
            self.data,
            (),
            cut,
            corruption=None,
            recovery=DIVERGED,
            now_ms=self.now_ms(),
            queue_cut=lambda cq: cq.max_offset,
            why=why,
        )

    def _truncate_files(self, cut: int, next_index: int) -> None:
        self.data.truncate_dirty_files(cut)
        self.index.truncate_dirty_files(next_index * INDEX_UNIT_SIZE)

    def revise_begin(self) -> None:
        """``DLedgerMmapFileStore#reviseLedgerBeginIndex`` after retention deleted the oldest data files:
        the first entry of the first data file, and index files wholly before it dropped."""
        with self._lock:
            if not self.data.files or self._last < 0:
                return
            self._begin = decode_header(self.data.files[0].view, 0)[2]
            keep_from = self._begin * INDEX_UNIT_SIZE
            while len(self.index.files) > 1 and self.index.files[0].end_offset <= keep_from:
                doomed = self.index.files[0]
                self.index.files = self.index.files[1:]
                if not self.read_only:
                    doomed.destroy()
            self._committed = max(self._committed, self._begin - 1)

    def set_committed(self, index: int) -> None:
        """``DLedgerMmapFileStore#updateCommittedIndex``: clamped to the last entry, never backwards."""
        with self._lock:
            index = min(index, self._last)
            if index <= self._committed or index < self._begin:
                return
            recent = self._recent.get(index)  # (a leader's: as written, no index record read back)
            if recent is not None:
                self._committed_pos = recent.pos + recent.size
            else:
                pos, size = self._pos_size(index)
                self._committed_pos = pos + size
            self._committed = index

    def flush(self) -> None:
        """Data and index to disk, then the checkpoint (at most every ``checkPointInterval``)."""
        self.data.flush()
        self.index.flush()
        now = self.now_ms()
        if now - self._checkpoint_ms >= CHECKPOINT_INTERVAL_MS:
            self.persist_checkpoint()
            self._checkpoint_ms = now

    def persist_checkpoint(self) -> None:
        """``DLedgerMmapFileStore#persistCheckPoint`` (skipped when nothing changed since the last one)."""
        with self._checkpoint_lock:
            state = (self._last, self._committed)
            if self.read_only or state == self._checkpointed:
                return
            write_small_file(os.path.join(self.directory, CHECKPOINT_FILE), encode_checkpoint(*state))
            self._checkpointed = state

    def close(self) -> None:
        with self._lock:
            if not self.read_only:
                self.data.flush()
                self.index.flush()
                self.persist_checkpoint()
            self.data.close()
            self.index.close()

    # ------------------------------------------------------------------ recovery

    def _first_entry_ok(self, mf: MappedFile) -> bool:
        """``DLedgerMmapFileStore#recover``'s pre-check: the file starts with an entry its index record names."""
        try:
            entry = decode_entry(mf.view[: min(mf.file_size, 64 << 20)])
            check_header(entry.magic, entry.size, len(entry.body), mf.file_from_offset)
            if entry.pos != mf.file_from_offset:
                return False
            off = entry.index * INDEX_UNIT_SIZE
            imf = self.index.find_file(off)
            if imf is None:
                return False
            rec = decode_index(imf.view, off - imf.file_from_offset)
            return (rec.pos, rec.size, rec.index, rec.term) == (
                entry.pos,
                entry.size,
                entry.index,
                entry.term,
            )
        except (DLedgerError, IndexError, ValueError):
            return False

    def recover(self) -> None:
        """``DLedgerMmapFileStore#load`` + ``#recover``: map the files, walk the entries from three files
        before the last, rewrite index records that disagree with the data, and set aside what follows
        the last valid entry; then the committed index from the checkpoint."""
        with self._lock:
            self.data.load()
            self.index.load()
            if not self.data.files:
                self._cut_files(0, 0)
                self._load_checkpoint()
                return
            files = self.data.files
            start = max(0, len(files) - 3)
            while start > 0 and not self._first_entry_ok(files[start]):
                log.warning("DLedger recovery: %s does not start with a valid entry", files[start].path)
                start -= 1
            end, last, last_term, damage = self._scan(start)
            if end < self.data.max_offset and not self.read_only:
                why = f"DLedger recovery: the last valid entry ends at data offset {end}"
                why = f"{why}: {damage}" if damage else why
                if self._set_aside(end, why) is not None:
                    log.error("%s (in %s): what follows it is set aside in quarantine", why, self.directory)
            self._cut_files(end, last + 1)
            self._last, self._last_term = last, last_term
            self._begin = decode_header(files[0].view, 0)[2] if last >= 0 else -1
            self._load_checkpoint()

    def _cut_files(self, end: int, next_index: int) -> None:
        """End the data at ``end`` and the index after ``next_index - 1``; read-only: positions only."""
        if not self.read_only:
            self._truncate_files(end, next_index)
            return
        for queue, stop in ((self.data, end), (self.index, next_index * INDEX_UNIT_SIZE)):
            for mf in queue.files:
                mf.wrote_position = max(0, min(mf.file_size, stop - mf.file_from_offset))

    def _scan(self, start: int) -> tuple[int, int, int, str | None]:
        """Walk entries from file ``start``: (end of the last valid entry, its index, its term, why the walk
        stopped early or ``None`` at a clean end)."""
        files = self.data.files
        last, last_term = -1, -1
        fi = start
        mf = files[fi]
        rel = 0
        end = mf.file_from_offset
        size_limit = self.data.file_size
        while True:
            absolute = mf.file_from_offset + rel
            if rel + 8 > size_limit:
                return end, last, last_term, f"no room for an entry at {absolute}"
            magic = int.from_bytes(mf.view[rel : rel + 4], "big", signed=True)
            size = int.from_bytes(mf.view[rel + 4 : rel + 8], "big", signed=True)
            if magic == BLANK_MAGIC_CODE:
                end = mf.end_offset
                fi += 1
                if fi >= len(files):
                    return end, last, last_term, None
                mf, rel = files[fi], 0
                continue
            if size == 0 and magic == 0:
                return end, last, last_term, None
            try:
                m, size, index, term, pos, body_len = decode_header(mf.view, rel)
                check_header(m, size, body_len, absolute)
                if pos != absolute:
                    raise CorruptEntryError(absolute, f"entry says pos {pos}")
                if rel + size > size_limit:
                    raise CorruptEntryError(absolute, f"entry of {size} bytes runs past its file")
                if last != -1 and index != last + 1:
                    raise CorruptEntryError(absolute, f"index {index} after {last}")
                if term < last_term:
                    raise CorruptEntryError(absolute, f"term {term} after term {last_term}")
                body = mf.view[rel + BODY_OFFSET : rel + size]
                reason = self.body_check(absolute, body) if self.body_check is not None else None
                if reason and not self._sound_next(fi, rel + size, index + 1):
                    raise CorruptEntryError(absolute, f"entry {index}: {reason}")  # a torn tail
                if reason:  # damage inside the log: kept, the CommitLog sets its record aside in place
                    log.error(
                        "DLedger recovery: entry %d at %d: %s (kept: sound entries follow)",
                        index,
                        absolute,
                        reason,
                    )
                    self.damaged_bodies.append(absolute)
                elif damage := body_crc_problem(index, stored_body_crc(mf.view, rel), body):
                    # what the record check cannot see (its properties, topic, header fields): the
                    # member restarts from the entry before, the leader's push fills the rest in
                    self.crc_damage = absolute, damage
                    raise CorruptEntryError(absolute, damage)
            except CorruptEntryError as e:
                return end, last, last_term, str(e)
            if not self.read_only:
                self._repair_index(IndexRecord(m, pos, size, index, term))
            last, last_term = index, term
            rel += size
            end = mf.file_from_offset + rel

    def body_crc_problems(self) -> Iterator[tuple[int, str]]:
        """(pos, why) of every held entry whose body fails its non-zero ``bodyCrc`` (recovery checks only
        the last files), after the one that ended recovery: for offline checks (``store verify``)."""
        if self.crc_damage is not None:
            yield self.crc_damage
        for index in range(self._begin, self._last + 1) if self._begin >= 0 else ():
            rec = self.index_record(index)
            view = self.read(rec.pos, rec.size)
            if view is None:
                continue  # not in the files recovery kept: reported by the record walk
            damage = body_crc_problem(index, stored_body_crc(view), view[BODY_OFFSET:])
            if damage:
                yield rec.pos, damage

    def _sound_next(self, fi: int, rel: int, index: int) -> bool:
        """Whether a sound entry ``index`` follows at ``rel`` of file ``fi`` (or after its blank, in the next
        file): what tells damage inside the log from a torn write at its end."""
        files = self.data.files
        mf = files[fi]
        head = entry_header_problem(
            mf.view, rel, self.data.file_size, self.data.file_size, mf.file_from_offset
        )
        if head == "blank-filler" and fi + 1 < len(files):
            mf, rel = files[fi + 1], 0
            head = entry_header_problem(
                mf.view, 0, self.data.file_size, self.data.file_size, mf.file_from_offset
            )
        return head == "" and decode_header(mf.view, rel)[2] == index

    def _repair_index(self, entry: IndexRecord) -> None:
        """Recovery's data-to-index comparison: a record that disagrees is rewritten from the data."""
        off = entry.index * INDEX_UNIT_SIZE
        mf = self.index.find_file(off)
        want = encode_index(entry)
        if (
            mf is not None
            and mf.view[off - mf.file_from_offset : off - mf.file_from_offset + INDEX_UNIT_SIZE] == want
        ):
            return
        log.warning("DLedger recovery: index record of entry %d rewritten from the data", entry.index)
        if mf is None:
            self.index.truncate_dirty_files(off)
            mf = self.index.last_file_for_append(off)
        rel = off - mf.file_from_offset
        mf.prepare(rel + INDEX_UNIT_SIZE, populate=False)
        mf.mm[rel : rel + INDEX_UNIT_SIZE] = want
        mf.wrote_position = max(mf.wrote_position, rel + INDEX_UNIT_SIZE)

    def _load_checkpoint(self) -> None:
        text = read_small_file(os.path.join(self.directory, CHECKPOINT_FILE))
        committed = decode_checkpoint(text)[1] if text is not None else None
        if committed is None or committed < 0:
            return
        if committed > self._last:
            self.lost_committed = committed
            log.error(
                "DLedger log %s: the checkpoint says entries up to %d are committed but the log ends at %d; "
                "what recovery cut is in quarantine, the rest must come back from the leader",
                self.directory,
                committed,
                self._last,
            )
        self.set_committed(committed)
        self._checkpointed = (self._last, self._committed)
