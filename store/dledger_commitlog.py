"""4.9.8's ``DLedgerCommitLog``: CommitLog records as the bodies of DLedger entries.

Each message is one entry (a batch: one entry per message, as ``BatchAppendEntryRequest`` carries
them). A record's offset, its PHYSICALOFFSET field, its ConsumeQueue unit, its IndexFile entry and its
msgId all say the position of the entry plus :data:`store.dledger.BODY_OFFSET` (the append hook
``DLedgerCommitLog`` registers with ``DLedgerMmapFileStore``), so every reader by offset reads the
record where it lies in the data files. :attr:`max_offset` is the end of the last *committed* entry
(``DLedgerCommitLog#getMaxOffset``): dispatch to ConsumeQueue and IndexFile and every read stop there.

Without a Raft driver (:attr:`auto_commit`, a group of one) an entry is committed as it is appended,
and at load every entry recovery kept (the checkpoint's committed index may lag a crash). A Raft driver
sets ``auto_commit = False`` before the store is opened.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from store.commitlog import (
    CommitLog,
    KeyedRecords,
    PartlyAppended,
    RecordWalk,
    UnitRuns,
    appended,
    encode_checked,
)
from store.dledger import (
    BODY_OFFSET,
    DATA_FILE_SIZE,
    INDEX_FILE_SIZE,
    DLedgerError,
    Entry,
    load_term,
    unpack_header,
)
from store.dledger_log import DLedgerLog, dledger_dir
from store.errors import CorruptRecordError, StoreFormatError
from store.message import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_TYPE_MASK,
    HostAddress,
    Message,
)
from store.record import RecordInfo, body_crc_problem, encode_record_parts, read_header, read_record_info

log = logging.getLogger(__name__)

#: MessageDecoder#PHY_POS_POSITION: TOTALSIZE MAGIC BODYCRC QUEUEID FLAG (4 each), QUEUEOFFSET (8).
PHY_POS_POSITION = 28
_c_parse_entries: Callable[[memoryview, int, int, int, dict[int, RecordInfo], type[RecordInfo]], int] | None
#: (buf, off, end, expect, limit, units, indexed) -> (off, expect, count, store timestamp): see _cparse.c
_c_dispatch_entries: (
    Callable[[memoryview, int, int, int, int, UnitRuns, KeyedRecords | None], tuple[int, int, int, int]]
    | None
)
try:  # the compiled build's parse of a pushed run's records (_cparse.c); the loop of _parse_pushed without it
    from store import _cparse

    _c_parse_entries = _cparse.parse_entries
    _c_dispatch_entries = getattr(_cparse, "dispatch_entries", None)  # (a build older than this source: None)
except ImportError:
    _c_parse_entries = None
    _c_dispatch_entries = None

#: How many records a leader appended and has not dispatched yet it keeps parsed (past that, dispatch parses).
PARSED_MAX = 65536
#: Bytes of binary pushes a follower keeps for dispatch to parse (past it, the walk reads them back).
PUSHED_MAX_BYTES = 64 * 1024 * 1024
#: How far ahead of the writer the store's warm-up thread zero-fills the data file (``prefault``): a few
#: flush intervals' worth at most, since every zero page a flush finds ahead of the data is written to disk
#: and then again with the data (the CommitLog's window is wider: it is warmed only when asked for).
WARM_AHEAD_BYTES = 1024 * 1024


def stamp_physical_offset(pos: int, entry: bytearray) -> None:
    """``DLedgerCommitLog``'s append hook: the record's PHYSICALOFFSET is the entry's pos + BODY_OFFSET."""
    at = BODY_OFFSET + PHY_POS_POSITION
    entry[at : at + 8] = (pos + BODY_OFFSET).to_bytes(8, "big", signed=True)


def record_problem(pos: int, body: memoryview) -> str | None:
    """Recovery's check of an entry body: one whole record that names its own offset, body CRC sound."""
    if len(body) < 8:
        return "no record in the entry"
    size, _magic = read_header(body, 0)
    if size != len(body):
        return f"record of {size} bytes in an entry body of {len(body)}"
    try:
        info = read_record_info(body, 0, len(body))
    except CorruptRecordError as e:
        return e.reason
    if info.commit_log_offset != pos + BODY_OFFSET:
        return f"record names offset {info.commit_log_offset}, not {pos + BODY_OFFSET}"
    return body_crc_problem(body, 0, size)


class DLedgerCommitLog(CommitLog):
    """The CommitLog of a broker in DLedger mode, on a :class:`store.dledger_log.DLedgerLog`."""

    def __init__(
        self,
        store_root: str,
        self_id: str,
        *,
        data_dir: str = "",
        file_size: int = DATA_FILE_SIZE,
        index_file_size: int = INDEX_FILE_SIZE,
        max_message_size: int,
        read_only: bool = False,
        prefault: bool = False,
    ) -> None:
        """``prefault``: the store's warm-up thread zero-fills the data file ahead of the writer
        (:meth:`warm_ahead`), as a CommitLog's with ``warmMapedFileEnable``."""
        self.directory = dledger_dir(store_root, self_id)
        self.data_dir = data_dir or os.path.join(self.directory, "data")
        super().__init__(
            self.data_dir,
            file_size,
            max_message_size=max_message_size,
            read_only=read_only,
            prefault=prefault and not read_only,
        )
        self.entry_header = BODY_OFFSET
        self.store_root = store_root
        self.index_file_size = index_file_size
        self.read_only = read_only
        self.log: DLedgerLog | None = None
        #: Commit each entry as it is appended (a group of one); a Raft driver turns it off and commits.
        self.auto_commit = True
        #: The term a leader appends in (the Raft driver sets it; alone: the persisted term, at least 1).
        self.term = 1
        #: (a Raft driver's leader) what dispatch needs of each record appended and not dispatched yet, by
        #: offset, as a single broker's put dispatches it: committed, it is dispatched without parsing the
        #: record back (:class:`store.commitlog.RecordWalk`'s ``parsed``). Filled under the log's lock and
        #: replaced by an empty one when entries are cut (also under it), so that it never names a record
        #: a cut removed.
        self.parsed: dict[int, RecordInfo] = {}
        #: (a follower) runs of entries binary pushes appended, as the pushes' own bytes with each run's
        #: extent: parsed into :attr:`parsed` when dispatch comes for them (after the push was answered)
        self.pushed: list[tuple[memoryview, int, int]] = []
        self._pushed_bytes = 0
        #: Committed entries dispatched by the C walk over the data files (:meth:`file_units`) where no push
        #: kept them, so a leader keeps nothing of its puts for dispatch (without C it keeps :attr:`parsed`).
        self.walks_in_c = _c_dispatch_entries is not None

    @property
    def dispatch_on_put(self) -> bool:
        return self.auto_commit

    def warm_ahead(self, nbytes: int) -> int:
        """The data file's next pages zero-filled by the store's warm-up thread, at most `WARM_AHEAD_BYTES`
        ahead of the writer: a store into a page of the fallocated file that was never written faults and
        has the file system zero it first, a page at a time on the event loop."""
        if self.log is None:
            return 0
        return super().warm_ahead(min(nbytes, WARM_AHEAD_BYTES))

    @property
    def dlog(self) -> DLedgerLog:
        if self.log is None:
            raise StoreFormatError("the DLedger CommitLog is not loaded")
        return self.log

    def load(self, on_bad_file: Callable[[StoreFormatError], None] | None = None) -> None:
        """Load and recover the DLedger log (``DLedgerCommitLog#recover`` runs ``DLedgerMmapFileStore``'s)."""
        self.log = DLedgerLog(
            self.directory,
            data_dir=self.data_dir,
            store_root=self.store_root,
            data_file_size=self.file_size,
            index_file_size=self.index_file_size,
            read_only=self.read_only,
            append_hook=stamp_physical_offset,
            body_check=record_problem,
        )
        self.files = self.log.data
        self.log.on_damaged = self._damaged
        self.log.on_cut = self._cut
        self.log.on_raw_appended = self._keep_pushed
        self.term = max(1, load_term(self.directory)[0], self.log.last_term)
        if self.auto_commit and not self.read_only:  # alone, every entry that survived recovery is committed
            self.log.set_committed(self.log.last_index)
        if self.log.last_index >= 0:
            last = self.log.get(self.log.last_index)
            self.last_store_timestamp = read_record_info(last.body, 0).store_timestamp

    def _damaged(self, entry: Entry) -> None:
        """An entry found damaged since it was written: its record is never served again (a pull skips it,
        logged at ERROR), as a record recovery set aside in place."""
        self.set_aside[entry.pos + BODY_OFFSET] = entry.size - BODY_OFFSET

    def _keep_pushed(self, run: memoryview, start: int, end: int) -> None:
        """(a follower) The entries a binary push just appended (``run[start:end]``), kept to be parsed at
        dispatch from the push's own bytes (:meth:`_parse_pushed`), not walked back out of the data file."""
        if not self.auto_commit and self._pushed_bytes + end - start <= PUSHED_MAX_BYTES:
            self.pushed.append((run, start, end))
            self._pushed_bytes += end - start

    def _parse_pushed(self) -> None:
        """Their records parsed for dispatch into :attr:`parsed`, as a leader keeps what its puts parsed. A
        record that does not parse, or that does not fill its entry and name its own offset, and those
        after it, are left to the walk (which judges them as before)."""
        with self.dlog.lock:
            runs, self.pushed, self._pushed_bytes = self.pushed, [], 0
        parsed = self.parsed
        for run, start, end in runs:
            off = start
            while off < end and len(parsed) < PARSED_MAX:
                if _c_parse_entries is not None:  # (as far as C takes them; the entry it stops at below)
                    off = _c_parse_entries(run, off, end, PARSED_MAX - len(parsed), parsed, RecordInfo)
                    if off >= end or len(parsed) >= PARSED_MAX:
                        break
                _magic, size, _index, _term, pos, _ch, _chain, _crc, _body_len = unpack_header(run, off)
                try:
                    info = read_record_info(run, off + BODY_OFFSET, off + size)
                except CorruptRecordError:
                    return
                if info.commit_log_offset != pos + BODY_OFFSET or info.size != size - BODY_OFFSET:
                    return
                parsed[info.commit_log_offset] = info
                off += size

    def _cut(self, pos: int) -> None:
        """Entries cut from data offset ``pos`` (an uncommitted tail): what is appended there next is not
        the damaged record once found there, nor what was parsed of the records cut (a dispatch walk may
        be taking from the old one: it never reaches past the committed end, and no committed entry is cut)."""
        self.parsed = {}
        self.pushed, self._pushed_bytes = [], 0
        for phys in [p for p in self.set_aside if p >= pos]:
            del self.set_aside[phys]

    # ------------------------------------------------------------------ append

    def append(
        self, msgs: list[Message], store_host: HostAddress, now_ms: int, queue_offset: int
    ) -> list[RecordInfo]:
        """One entry per message, each record encoded where its entry goes (its offset in place, as the append
        hook would stamp it: the record is the entry's body as it is, copied once, into the data file)."""
        encoded = [(m, *encode_checked(m, store_host, self.max_message_size, self.file_size)) for m in msgs]
        dlog = self.dlog
        out: list[RecordInfo] = []
        next_offset = queue_offset
        for m, props, born, store, topic, size in encoded:
            counted = m.sys_flag & TRANSACTION_TYPE_MASK in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE)
            qoff = next_offset if counted else 0
            with dlog.lock:
                try:
                    pos = dlog.leader_pos(BODY_OFFSET + size)
                    record = encode_record_parts(
                        m, props, born, store, topic, qoff, pos + BODY_OFFSET, now_ms
                    )
                    entry = dlog.append_leader_placed(record, self.term, pos)
                except OSError as err:
                    if out:  # (the entries before it are in the log: they commit, their offsets are taken)
                        raise PartlyAppended(err, out) from err
                    raise
                info = appended(m, pos + BODY_OFFSET, size, qoff, now_ms)
                if not self.walks_in_c and not self.auto_commit and len(self.parsed) < PARSED_MAX:
                    self.parsed[info.commit_log_offset] = info
            if self.auto_commit:
                dlog.set_committed(entry.index)
            if counted:
                next_offset += 1
            out.append(info)
        self.last_store_timestamp = now_ms
        return out

    def tail_queue_end(self, topic: str, queue_id: int) -> int:
        """One past the queue offset of the last uncommitted entry of the queue (-1: none): a new leader's
        first record continues the queue past what its tail holds, which commits before it."""
        dlog = self.dlog
        for index in range(dlog.last_index, dlog.committed_index, -1):
            try:
                info = read_record_info(dlog.get(index).body, 0)
            except (CorruptRecordError, DLedgerError):  # (recovery set damaged entries aside; damaged since)
                continue
            if info.topic == topic and info.queue_id == queue_id:
                return info.queue_offset + 1
        return -1

    # ------------------------------------------------------------------ reads

    @property
    def max_offset(self) -> int:
        """``DLedgerCommitLog#getMaxOffset``: the committed end, else the first data file's start."""
        committed = self.log.committed_pos if self.log is not None else 0
        return committed if committed > 0 else self.files.min_offset

    def read_record(self, offset: int) -> memoryview | None:
        """``DLedgerCommitLog#getData``: nothing at or past the committed end."""
        if offset >= self.max_offset:
            return None
        return super().read_record(offset)

    # ------------------------------------------------------------------ recovery and dispatch

    def scan_end(self) -> int:
        """Recovery dispatches (``on_record``) the committed records only."""
        return self.max_offset

    def scan_stop(self, walk: RecordWalk) -> int:
        """The DLedger log recovered its own files already (damage set aside there): nothing to cut."""
        return self.files.max_offset

    def abnormal_start_index(self, limit_ts: int) -> int:
        """Newest data file whose first record was stored at or before ``limit_ts``."""
        files = self.files.files
        for idx in range(len(files) - 1, -1, -1):
            try:
                ts = read_record_info(files[idx].view, BODY_OFFSET, self.file_size).store_timestamp
            except (CorruptRecordError, ValueError, IndexError):
                continue
            if ts != 0 and ts <= limit_ts:
                return idx
        return 0

    def truncate(self, offset: int) -> None:
        """Entries are cut only by the Raft log (``truncate_after``); a cut here is a bug, refused."""
        if offset < self.files.max_offset:
            log.error(
                "[BUG] refusing to cut the DLedger CommitLog at %d (it ends at %d)",
                offset,
                self.files.max_offset,
            )

    def parsed_run(self, offset: int, end: int) -> tuple[list[RecordInfo], int]:
        """The committed records a leader's puts appended from entry position ``offset``, one after another
        below ``end`` (the committed end: an entry starting below it is committed whole), taken from
        :attr:`parsed`; it stops where a record is not there (a file's blank filler, a record appended
        before this leadership), and the walk goes on from there. None while any record is set aside: the
        walk steps over those. (A follower's: what its binary pushes brought, parsed now.)"""
        if self.pushed:
            self._parse_pushed()
        parsed = self.parsed
        out: list[RecordInfo] = []
        if self.set_aside or not parsed:
            return out, offset
        while offset < end:
            info = parsed.pop(offset + BODY_OFFSET, None)
            if info is None:
                break
            out.append(info)
            offset = info.commit_log_offset + info.size
        return out, offset

    def pushed_units(
        self, offset: int, end: int, units: UnitRuns, indexed: KeyedRecords | None
    ) -> tuple[int, int, int]:
        """(a follower) The committed entries from position ``offset`` (each starting below ``end``) that
        binary pushes brought, dispatched by one C walk a run (``_cparse.dispatch_entries``) from the pushes'
        own bytes: no :class:`RecordInfo`, no properties map a record. Only while the first run starts at
        ``offset`` with nothing parsed there and nothing set aside; a record the walk does not take (a
        transaction's prepared or rolled-back state, the delay topic, an IPv6 host, a damaged one) ends it:
        the rest of the runs are then parsed as before (:meth:`parsed_run`). The run the walk ends in keeps
        what it did not take."""
        if (
            _c_dispatch_entries is None
            or not self.pushed
            or self.set_aside
            or (self.parsed and offset + BODY_OFFSET in self.parsed)
        ):
            return 0, offset, 0
        count, timestamp = 0, 0
        with self.dlog.lock:
            runs = self.pushed
            taken = 0  # the runs walked to their end
            while taken < len(runs) and offset < end:
                run, start, stop = runs[taken]
                off, offset, n, last = _c_dispatch_entries(run, start, stop, offset, end, units, indexed)
                if n:
                    count += n
                    timestamp = last
                self._pushed_bytes -= off - start
                if off < stop:
                    runs[taken] = (run, off, stop)
                    break
                taken += 1
            del runs[:taken]
        return count, offset, timestamp

    def file_units(
        self, offset: int, end: int, units: UnitRuns, indexed: KeyedRecords | None
    ) -> tuple[int, int, int]:
        """(a leader, or a follower's entries no binary push kept) The committed entries from position
        ``offset`` (each starting below ``end``) dispatched by the C walk of :meth:`pushed_units` over the data
        file that holds them, as the log wrote them: a leader keeps no :class:`RecordInfo` a put for its
        dispatch. Only with nothing pushed or parsed waiting (those are taken from where they are) and
        nothing set aside; the walk ends at a record it does not take, a file's blank end included: the
        Python walk takes that one."""
        if not self.walks_in_c or self.pushed or self.parsed or self.set_aside or _c_dispatch_entries is None:
            return 0, offset, 0
        mf = self.files.find_file(offset)
        if mf is None:
            return 0, offset, 0
        base = mf.file_from_offset
        _off, after, count, timestamp = _c_dispatch_entries(
            mf.view, offset - base, mf.wrote_position, offset, end, units, indexed
        )
        return count, after, timestamp

    def walk(self, offset: int, end: int) -> RecordWalk:
        """Dispatch walks no further than the committed end, taking what a leader's puts parsed already."""
        if self.pushed:
            self._parse_pushed()
        walk = super().walk(offset, min(end, self.max_offset))
        walk.parsed = self.parsed
        return walk

    def first_files_deleted(self) -> None:
        """Retention removed data files: the ledger now begins at the first remaining entry."""
        self.dlog.revise_begin()

    def flush(self) -> int:
        self.dlog.flush()
        return self.files.flushed_offset

    def close(self) -> None:
        if self.log is not None:
            self.log.close()
