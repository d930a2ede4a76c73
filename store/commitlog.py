"""CommitLog: the append-only record log split into fixed-size mapped files
(docs/store-format.md §commitlog-records).

The log itself is single-writer: callers (the engine) serialise appends with their put lock.
Reads take no lock; a reader only looks below the write position, which is advanced after the
bytes are in place.
"""

from __future__ import annotations

import dataclasses
import logging
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import Enum
from typing import cast

from store.dledger import entry_extent
from store.errors import CorruptRecordError, StoreFormatError
from store.mapped_file import MappedFile, MappedFileQueue
from store.message import (
    BLANK_MAGIC_CODE,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_TYPE_MASK,
    HostAddress,
    Message,
)
from store.names import SCHEDULE_TOPIC
from store.record import (
    MAX_PROPERTIES_LENGTH,
    RecordInfo,
    check_record,
    encode_blank,
    encode_host,
    encode_properties,
    encode_record_parts,
    read_header,
    read_record_info,
    topic_field,
)

log = logging.getLogger(__name__)

#: A dispatch's ConsumeQueue units by queue: (commit log offset, size, tags code, queue offset) each.
UnitRuns = dict[tuple[str, int], list[tuple[int, int, int, int]]]
#: A dispatch's records with index keys: (topic, UNIQ_KEY, KEYS, commit log offset, store timestamp).
KeyedRecords = list[tuple[str, str | None, str | None, int, int]]

_MIN_RECORD = 92  # the smallest record: fixed fields, two IPv4 hosts, an empty body, a 1-byte topic
_PHYSICAL_OFFSET = struct.Struct(">q")  # at byte 28 of a record


class PutMessageStatus(Enum):
    """RocketMQ's ``PutMessageStatus`` values that this store can produce."""

    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPEDFILE_FAILED = "CREATE_MAPEDFILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"
    #: A DLedger leader's put the quorum did not acknowledge in time (``DLedgerCommitLog#asyncPutMessage``).
    OS_PAGECACHE_BUSY = "OS_PAGECACHE_BUSY"

    #: Identity, as an Enum's equality is: Enum's own ``__hash__`` runs interpreted, and the broker looks
    #: every put's and pull's status up in a dict.
    __hash__ = object.__hash__


class IllegalMessage(Exception):
    """Internal: a message the log refuses; carries the status to report."""

    def __init__(self, status: PutMessageStatus, reason: str) -> None:
        super().__init__(reason)
        self.status = status


class PartlyAppended(Exception):
    """Internal: a put of several records failed with ``cause`` (a full disk) after ``appended`` of them
    were stored, each on its own (a DLedger entry per message): they stay, and the queue offsets they took
    are not given again."""

    def __init__(self, cause: OSError, appended: list[RecordInfo]) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.appended = appended


@dataclass(slots=True)
class ScanResult:
    """Outcome of a recovery scan: where valid data ends and what stopped it, if not a clean end."""

    process_offset: int
    corruption: CorruptRecordError | None
    records: int
    last_store_timestamp: int


def apply_delay(msg: Message, delay_levels_ms: list[int]) -> Message:
    """Redirect a delayed message to ``SCHEDULE_TOPIC_XXXX`` queue ``level - 1``
    (docs/store-format.md §storing-a-delayed-message).

    Levels above the configured maximum are lowered to it; ``REAL_TOPIC``/``REAL_QID`` keep the
    destination. Transactional half/rollback records and messages already in the schedule topic
    are returned unchanged.
    """
    if msg.delay_time_level is None and PROPERTY_DELAY_TIME_LEVEL not in msg.properties:
        return msg
    level = msg.delay_level
    tran = msg.sys_flag & TRANSACTION_TYPE_MASK
    if (
        level <= 0
        or tran not in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE)
        or msg.topic == SCHEDULE_TOPIC
    ):
        return msg
    level = min(level, len(delay_levels_ms))
    props = dict(msg.properties)
    props[PROPERTY_REAL_TOPIC] = msg.topic
    props[PROPERTY_REAL_QUEUE_ID] = str(msg.queue_id)
    props[PROPERTY_DELAY_TIME_LEVEL] = str(level)
    return dataclasses.replace(msg, topic=SCHEDULE_TOPIC, queue_id=level - 1, properties=props)


def encode_checked(
    msg: Message, store_host: HostAddress, max_message_size: int, file_size: int
) -> tuple[bytes, bytes, bytes, bytes, int]:
    """Encode properties, hosts and topic and apply the size limits (docs/store-format.md §size-limits).

    Returns ``(properties, born_host, store_host, topic_field, total_size)``; raises
    :class:`IllegalMessage` with the status to report.
    """
    try:
        topic = topic_field(msg.topic)
        props = encode_properties(msg.properties) if msg.properties else b""
        born = encode_host(msg.born_host)
        store = encode_host(msg.store_host or store_host)
    except ValueError as e:
        raise IllegalMessage(PutMessageStatus.MESSAGE_ILLEGAL, str(e)) from e
    if len(props) > MAX_PROPERTIES_LENGTH:
        raise IllegalMessage(PutMessageStatus.PROPERTIES_SIZE_EXCEEDED, f"properties {len(props)} bytes")
    body_len = len(msg.body)
    if body_len > max_message_size:
        raise IllegalMessage(PutMessageStatus.MESSAGE_ILLEGAL, f"body {body_len} > maxMessageSize")
    total = 74 + len(born) + len(store) + body_len + len(topic) + len(props)
    if total > max_message_size + 65536 or total + 8 > file_size:
        raise IllegalMessage(PutMessageStatus.MESSAGE_ILLEGAL, f"record of {total} bytes is too large")
    return props, born, store, topic, total


def appended(m: Message, offset: int, size: int, queue_offset: int, now_ms: int) -> RecordInfo:
    """What dispatch needs of a record just appended (no need to parse it back)."""
    return RecordInfo(
        offset,
        size,
        m.topic,
        m.queue_id,
        queue_offset,
        m.sys_flag,
        now_ms,
        m.prepared_transaction_offset,
        m.properties,
    )


class CommitLog:
    """Appends records, rolls files with the blank filler, validates and truncates on recovery."""

    def __init__(
        self,
        directory: str,
        file_size: int,
        *,
        max_message_size: int,
        read_only: bool = False,
        prefault: bool = False,
    ) -> None:
        """``prefault``: also zero-fill the reserved pages ahead of the writer (see ``MappedFile.prepare``)."""
        self.files = MappedFileQueue(directory, file_size, read_only=read_only, random_until_full=True)
        #: Bytes before each record (a DLedger CommitLog's entry header); walks step over them.
        self.entry_header = 0
        self.file_size = file_size
        self.max_message_size = max_message_size
        self.last_store_timestamp = 0
        self.prefault = prefault
        #: Damaged records recovery set aside but left in place (offset -> TOTALSIZE): their extent is known,
        #: so walks step over them and every later record stays in service; reads never serve them.
        self.set_aside: dict[int, int] = {}
        #: Whether :meth:`file_units` can go on after a record the dispatch's Python walk took alone.
        self.walks_in_c = False

    def load(self, on_bad_file: Callable[[StoreFormatError], None] | None = None) -> None:
        """``on_bad_file``: see :meth:`MappedFileQueue.load` (inspection goes on past a bad file)."""
        self.files.load(on_bad_file)

    # ------------------------------------------------------------------ append

    def _file_for(self, size: int) -> MappedFile:
        """The file the next ``size`` bytes go to; writes the blank filler and rolls when they do not fit."""
        files = self.files.files
        mf = (
            files[-1]
            if files and files[-1].wrote_position < self.file_size
            else self.files.last_file_for_append(0)
        )
        pos = mf.wrote_position
        remaining = self.file_size - pos
        if size + 8 > remaining:
            if remaining >= 8:
                mf.mm[pos : pos + 8] = encode_blank(remaining)
            mf.wrote_position = self.file_size
            mf = self.files.last_file_for_append(0)
        if mf.wrote_position + size > mf.prepared_position:
            mf.prepare(mf.wrote_position + size, populate=self.prefault)
        return mf

    def append(
        self, msgs: list[Message], store_host: HostAddress, now_ms: int, queue_offset: int
    ) -> list[RecordInfo]:
        """Append one message, or a batch for one queue (all in one file, docs/store-format.md §batches).

        ``queue_offset`` is the queue offset of the first record that takes one (the next ones follow
        it; transactional prepared and rollback records take 0): the store keeps each queue's next
        offset with its ConsumeQueue, Java's ``topicQueueTable``. Raises :class:`IllegalMessage` before
        anything is written when a message is refused.
        """
        encoded = []
        total = 0
        for m in msgs:
            fields = encode_checked(m, store_host, self.max_message_size, self.file_size)
            encoded.append((m, *fields))
            total += fields[4]
        if len(msgs) > 1 and total + 8 > self.file_size:
            raise IllegalMessage(
                PutMessageStatus.MESSAGE_ILLEGAL, f"batch of {total} bytes does not fit a file"
            )
        mf = self._file_for(total)
        pos = mf.wrote_position
        out = []
        mm = mf.mm
        base = mf.file_from_offset
        next_offset = queue_offset
        for m, props, born, store, topic, size in encoded:
            tran = m.sys_flag & TRANSACTION_TYPE_MASK
            counted = tran in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE)
            qoff = next_offset if counted else 0
            mm[pos : pos + size] = encode_record_parts(m, props, born, store, topic, qoff, base + pos, now_ms)
            if counted:
                next_offset += 1
            out.append(appended(m, base + pos, size, qoff, now_ms))
            pos += size
        mf.wrote_position = pos
        self.last_store_timestamp = now_ms
        return out

    # ------------------------------------------------------------------ reads

    @property
    def min_offset(self) -> int:
        return self.files.min_offset

    @property
    def max_offset(self) -> int:
        return self.files.max_offset

    def read_record(self, offset: int) -> memoryview | None:
        """Raw bytes of the record starting at ``offset`` (size from its TOTALSIZE), validated lightly."""
        mf = self.files.find_file(offset)
        if mf is None:
            return None
        pos = offset - mf.file_from_offset
        if pos + 8 > mf.wrote_position:
            return None
        size, magic = read_header(mf.view, pos)
        if (
            magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2)
            or size <= 0
            or pos + size > mf.wrote_position
        ):
            raise CorruptRecordError(
                mf.path, offset, f"no record here (size {size}, magic 0x{magic & 0xFFFFFFFF:08X})"
            )
        return mf.view[pos : pos + size]

    def damaged_extent_at(self, offset: int) -> int | None:
        """For a lookup by offset that met a record failing validation at ``offset``: ``None`` when the
        record there does not name its own offset (no record starts there: a wrong msgId), else its size
        when its extent is known (it parses but for its body CRC, its field lengths adding up to its
        TOTALSIZE, or its TOTALSIZE leads to what can only follow a record: :func:`damaged_extent`), else 0."""
        mf = self.files.find_file(offset)
        if mf is None:
            return None
        pos = offset - mf.file_from_offset
        written = mf.wrote_position
        if pos + _MIN_RECORD > written or _PHYSICAL_OFFSET.unpack_from(mf.view, pos + 28)[0] != offset:
            return None
        size = read_header(mf.view, pos)[0]
        if size >= _MIN_RECORD and pos + size <= written and _sound_but_crc(mf.view, pos, pos + size):
            return size
        return damaged_extent(mf.view, pos, written, mf.file_size, mf.file_from_offset, None, search=True)

    def store_timestamp_at(self, offset: int) -> int:
        """STORETIMESTAMP of the record at ``offset`` (-1 when it cannot be read)."""
        raw = self.read_record(offset)
        if raw is None:
            return -1
        return read_record_info(raw, 0).store_timestamp

    def roll_next_file(self, offset: int) -> int:
        return offset + self.file_size - offset % self.file_size

    # ------------------------------------------------------------------ recovery

    def scan_from(
        self,
        offset: int,
        *,
        check_crc: bool,
        on_record: Callable[[RecordInfo], None] | None = None,
        on_damaged: Callable[[CorruptRecordError, int], None] | None = None,
    ) -> ScanResult:
        """:meth:`scan` from ``offset``, a record boundary (the end of a file is the next one's start).
        ``on_damaged``: see :class:`RecordWalk` (recovery keeps the records after such a record)."""
        files = self.files.files
        if not files:
            return ScanResult(0, None, 0, 0)
        walk = RecordWalk(
            self.files,
            max(offset, files[0].file_from_offset),
            self.scan_end(),
            check_crc=check_crc,
            on_corruption=lambda e: log.warning("recovery stops at %s", e),
            on_damaged=on_damaged,
            known=self.set_aside,
            entry_header=self.entry_header,
        )
        if on_record is None:  # validation only: decoding is most of a record's cost
            walk.validate()
        else:
            for info in walk:
                on_record(info)
        return ScanResult(
            self.scan_stop(walk),
            walk.corruption,
            walk.records,
            walk.last_store_timestamp or self.last_store_timestamp,
        )

    def verify(
        self,
        offset: int,
        end: int,
        *,
        check_crc: bool,
        on_damaged: Callable[[CorruptRecordError, int], None] | None = None,
    ) -> RecordWalk:
        """Validate (no dispatch) the records from ``offset`` to ``end``, record boundaries: the walk
        says where it stopped and why (:class:`RecordWalk`; ``on_damaged`` as there)."""
        return RecordWalk(
            self.files,
            max(offset, self.files.min_offset),
            end,
            check_crc=check_crc,
            on_damaged=on_damaged,
            known=self.set_aside,
            entry_header=self.entry_header,
        ).validate()

    def tail_queue_end(self, topic: str, queue_id: int) -> int:
        """One past the last queue offset a record stored but not yet dispatchable gives the queue (-1: none;
        a plain CommitLog dispatches each record as it is put)."""
        return -1

    def scan_end(self) -> int:
        """How far recovery walks: the end of the files (the data ends where the walk stops)."""
        files = self.files.files
        return files[-1].end_offset if files else 0

    def scan_stop(self, walk: RecordWalk) -> int:
        """Where recovery found the data to end (the CommitLog is truncated there)."""
        return walk.offset

    def scan(
        self,
        start_index: int,
        *,
        check_crc: bool,
        on_record: Callable[[RecordInfo], None] | None = None,
        on_damaged: Callable[[CorruptRecordError, int], None] | None = None,
    ) -> ScanResult:
        """Walk records from file ``start_index`` until the end of valid data
        (docs/store-format.md §validating-records, :class:`RecordWalk`)."""
        files = self.files.files
        if not files:
            return ScanResult(0, None, 0, 0)
        return self.scan_from(
            files[start_index].file_from_offset,
            check_crc=check_crc,
            on_record=on_record,
            on_damaged=on_damaged,
        )

    def abnormal_start_index(self, limit_ts: int) -> int:
        """Newest file whose first record is a message stored at or before ``limit_ts``
        (docs/store-format.md §abnormal-recovery)."""
        files = self.files.files
        for idx in range(len(files) - 1, -1, -1):
            view = files[idx].view
            _size, magic = read_header(view, 0)
            if magic != MESSAGE_MAGIC_CODE:
                continue
            try:
                ts = read_record_info(view, 0, self.file_size).store_timestamp
            except CorruptRecordError:
                continue
            if ts != 0 and ts <= limit_ts:
                return idx
        return 0

    def truncate(self, offset: int) -> None:
        self.files.truncate_dirty_files(offset)

    def parsed_run(self, offset: int, end: int) -> tuple[list[RecordInfo], int]:
        """The records from ``offset`` (towards ``end``) that this process's puts parsed already, and where
        they end: dispatch takes them without walking the files (a DLedger leader's); here none."""
        return [], offset

    def pushed_units(
        self, offset: int, end: int, units: UnitRuns, indexed: KeyedRecords | None
    ) -> tuple[int, int, int]:
        """The records from ``offset`` (starting below ``end``) dispatched straight into ``units`` and
        ``indexed`` without a record object, as far as that is done (a DLedger follower's pushed runs):
        how many, where they end and the last one's store timestamp; here none."""
        return 0, offset, 0

    def file_units(
        self, offset: int, end: int, units: UnitRuns, indexed: KeyedRecords | None
    ) -> tuple[int, int, int]:
        """As :meth:`pushed_units`, from the data files themselves (a DLedger log's committed entries);
        here none."""
        return 0, offset, 0

    def walk(self, offset: int, end: int) -> RecordWalk:
        """Records from ``offset`` to ``end`` as dispatch reads them: no CRC check, a record that does not
        parse ends the walk, logged at ERROR (see :class:`RecordWalk`)."""
        return RecordWalk(
            self.files,
            offset,
            end,
            on_corruption=lambda e: log.error("dispatch stops at %s", e),
            zeros_end_data=False,
            on_damaged=_passed_set_aside if self.set_aside else None,
            known=self.set_aside,
            search=False,
            entry_header=self.entry_header,
        )

    def warm_ahead(self, nbytes: int) -> int:
        """Pre-fault the next ``nbytes`` of the active file (called from a background thread); the bytes now
        ready ahead of the writer (to the file's end at most: the next file is warmed once it is the last)."""
        last = self.files.last_file()
        if last is None:
            return 0
        if last.prepared_position < last.file_size:
            last.prepare(min(last.wrote_position + nbytes, last.file_size), populate=True)
        return last.prepared_position - last.wrote_position

    @property
    def dispatch_on_put(self) -> bool:
        """A put dispatches its own records (a DLedger CommitLog under a Raft driver: once committed)."""
        return True

    def first_files_deleted(self) -> None:
        """Retention deleted the oldest files (a DLedger CommitLog revises its first index)."""

    def flush(self) -> int:
        return self.files.flush()

    def close(self) -> None:
        self.files.close()


class RecordWalk:
    """The CommitLog's one record iterator: recovery (:meth:`CommitLog.scan`), dispatch (reput,
    docs/store-format.md §dispatch), the rebuild of derived files and read-only inspection
    (:mod:`store.inspect`) all read records through it, so they agree on where records are and where the data
    ends.

    From ``offset`` to ``end``: a blank filler (its size the rest of the file; any other is damage), or a
    file end with no room for a header, jumps to the next file; zeros end the data (unless
    ``zeros_end_data`` is false: dispatch walks only what was written, where zeros are damage); a record that does not parse, or with ``check_crc`` fails its body CRC, ends
    the walk with :attr:`corruption` set and passed to ``on_corruption``; a record whose bytes have not all
    been written yet ends it quietly (a replicating slave receives records split across frames). With
    ``on_crc_error`` a body CRC failure of an otherwise sound record is passed there and the walk goes on
    (inspection counts them). With ``on_damaged`` a damaged record whose extent is still known (its offset is
    in ``known``, else, with ``search``, its TOTALSIZE leads to an intact record that names its own offset or
    to the file's blank filler: :func:`damaged_extent`) is passed there with its size and the walk goes on
    past it, yielding it when it parses without its CRC (its ConsumeQueue unit keeps the queue's offsets
    dense; reads skip it), else nothing. After the walk, :attr:`offset` is where it stands (a later walk goes on from
    there; it starts no lower than the first file), :attr:`stop` why it ended (``end``, ``blank-filler``,
    ``end-of-file``, ``zeros``, ``partial``, ``corrupt``), :attr:`data_end` where the last file's data
    ended, :attr:`records` and :attr:`last_store_timestamp` what it read.

    The one other walker, :func:`store.quarantine.walk`, salvages set-aside pieces: it searches past
    damage for the next record that names its own offset, which none of these readers may do.

    ``parsed`` (a DLedger leader's dispatch) holds records already parsed by offset: the ones its puts
    appended, as a put dispatches them (:func:`appended`); each is taken from there (and dropped) when the
    record there has its size, not parsed back.

    ``entry_header`` (:data:`store.dledger.BODY_OFFSET`) walks a DLedger CommitLog (4.9.8's
    ``DLedgerCommitLog#checkMessageAndReturnSize``): each record is the body of a DLedger entry, whose
    header is checked and stepped over; DLedger's blank (magic -1, the rest of the file) ends a file.
    ``offset`` and ``data_end`` are then entry positions, each record's offset its own.
    """

    __slots__ = (
        "check_crc",
        "corruption",
        "data_end",
        "end",
        "entry_header",
        "files",
        "known",
        "last_store_timestamp",
        "offset",
        "on_corruption",
        "on_crc_error",
        "on_damaged",
        "parsed",
        "records",
        "search",
        "stop",
        "zeros_end_data",
    )

    def __init__(
        self,
        files: MappedFileQueue,
        offset: int,
        end: int,
        *,
        check_crc: bool = False,
        on_corruption: Callable[[CorruptRecordError], None] | None = None,
        on_crc_error: Callable[[CorruptRecordError], None] | None = None,
        zeros_end_data: bool = True,
        on_damaged: Callable[[CorruptRecordError, int], None] | None = None,
        known: dict[int, int] | None = None,
        search: bool = True,
        entry_header: int = 0,
    ) -> None:
        self.files = files
        self.entry_header = entry_header
        self.offset = offset
        self.end = end
        self.check_crc = check_crc
        self.on_corruption = on_corruption
        self.on_crc_error = on_crc_error
        self.zeros_end_data = zeros_end_data
        self.parsed: dict[int, RecordInfo] | None = None
        self.on_damaged = on_damaged
        self.known = known
        self.search = search
        self.corruption: CorruptRecordError | None = None
        self.stop = "end"
        self.data_end = offset
        self.records = 0
        self.last_store_timestamp = 0

    def __iter__(self) -> Iterator[RecordInfo]:
        """Each record, parsed for dispatch (topic, queue, offsets, properties)."""
        return cast(Iterator[RecordInfo], self._walk(decode=True))

    def validate(self) -> RecordWalk:
        """Walk without decoding (recovery's check of the last files: far faster)."""
        for _ in self._walk(decode=False):
            pass
        return self

    def _walk(self, *, decode: bool) -> Iterator[RecordInfo | None]:
        files = self.files
        check_crc = self.check_crc
        on_crc_error = self.on_crc_error
        info: RecordInfo | None = None
        while self.offset < self.end:
            mf = files.find_file(self.offset)
            if mf is None:
                if self.offset < files.min_offset:
                    self.offset = files.min_offset
                    continue
                return
            base = mf.file_from_offset
            file_size = mf.file_size
            pos = self.offset - base
            written = mf.wrote_position
            stop = min(written, self.end - base)
            view = mf.view
            self.stop = "end"
            while pos < stop:
                if pos + 8 > file_size:
                    self.stop = "end-of-file"
                    break
                if pos + 8 > written:
                    self.stop = "partial"  # a replicating slave's record header still arriving
                    break
                entry_end = 0
                if self.entry_header:
                    head, entry_size = entry_extent(view, pos, written, file_size, base)
                    if head == "blank-filler" or (head == "zeros" and self.zeros_end_data):
                        self.stop = head
                        break
                    if head == "partial":
                        self.stop = head
                        break
                    if head:
                        self.corruption = CorruptRecordError(mf.path, base + pos, f"DLedger entry: {head}")
                        self.stop = "corrupt"
                        self.data_end = base + pos
                        if self.on_corruption is not None:
                            self.on_corruption(self.corruption)
                        return
                    entry_end = pos + entry_size
                    pos += self.entry_header
                size, magic = read_header(view, pos)
                # the filler fills the file (docs/store-format.md §end-of-file-filler)
                if magic == BLANK_MAGIC_CODE and size == file_size - pos and not entry_end:
                    self.stop = "blank-filler"
                    break
                if size == 0 and magic == 0 and self.zeros_end_data:
                    self.stop = "zeros"
                    break
                if size > 0 and written < pos + size <= file_size:
                    self.stop = "partial"  # a record still arriving: never dispatch a partial one
                    break
                limit = entry_end or file_size
                try:
                    if entry_end and size != entry_end - pos:
                        raise CorruptRecordError(
                            None, pos, f"record of {size} bytes in an entry body of {entry_end - pos}"
                        )
                    if decode:
                        info = self.parsed.pop(base + pos, None) if self.parsed else None
                        if info is None or info.size != size or check_crc:
                            info = read_record_info(view, pos, limit, check_crc=check_crc)
                        size, ts = info.size, info.store_timestamp
                    else:
                        size, ts = check_record(view, pos, limit, check_crc=check_crc)
                except CorruptRecordError as e:
                    error = e.located(mf.path, base + pos)
                    sound = check_crc and _sound_but_crc(view, pos, limit)
                    extent = 0
                    on_damaged = self.on_damaged
                    if not (sound and on_crc_error is not None) and on_damaged is not None:
                        # in a DLedger entry the record's extent is the entry's
                        extent = (
                            entry_end - pos
                            if entry_end
                            else damaged_extent(
                                view, pos, written, file_size, base, self.known, search=self.search
                            )
                        )
                    if extent and on_damaged is not None:
                        on_damaged(error, extent)  # set aside alone: the walk goes on past it
                        if not sound:
                            pos = entry_end or pos + extent
                            self.offset = base + pos
                            continue
                    elif sound and on_crc_error is not None:
                        on_crc_error(error)  # only the body is damaged: reported, and the walk goes on
                    else:
                        self.corruption = error
                        self.stop = "corrupt"
                        self.data_end = base + pos - (self.entry_header if entry_end else 0)
                        if self.on_corruption is not None:
                            self.on_corruption(error)
                        return
                    if decode:
                        info = read_record_info(view, pos, limit)
                    size, ts = check_record(view, pos, limit, check_crc=False)
                self.records += 1
                self.last_store_timestamp = ts
                yield info
                pos = entry_end or pos + size
                self.offset = base + pos
            self.data_end = base + pos
            if self.stop in ("blank-filler", "end-of-file") or pos >= file_size:
                self.offset = mf.end_offset
            else:
                return  # the end of the data, the end of the walk, or a record still arriving


def damaged_extent(
    view: memoryview,
    pos: int,
    written: int,
    file_size: int,
    base: int,
    known: dict[int, int] | None,
    *,
    search: bool,
) -> int:
    """The size of the damaged record at ``pos`` of a file starting at offset ``base`` when its extent is
    still known, else 0: a record recovery set aside before (``known``), or (``search``) one whose
    TOTALSIZE leads to what can only follow a record: the blank filler that fills the file, or a record
    that parses, passes its body CRC and names its own offset (a damaged TOTALSIZE cannot lead there but by
    chance, and then the record boundaries are lost: recovery cuts the log there instead)."""
    if known:
        size = known.get(base + pos, 0)
        if size:
            return size
    if not search:
        return 0
    size = read_header(view, pos)[0]
    nxt = pos + size
    if size < _MIN_RECORD or nxt + 8 > written:
        return 0
    if read_header(view, nxt) == (file_size - nxt, BLANK_MAGIC_CODE):
        return size
    try:
        check_record(view, nxt, written, check_crc=True)
    except CorruptRecordError:
        return 0
    return size if _PHYSICAL_OFFSET.unpack_from(view, nxt + 28)[0] == base + nxt else 0


def _passed_set_aside(error: CorruptRecordError, size: int) -> None:
    """A dispatch walk steps over a record recovery set aside (its ERROR was logged then)."""


def _sound_but_crc(view: memoryview, pos: int, limit: int) -> bool:
    """Whether the record at ``pos`` parses when its body CRC is not checked (only its body is damaged)."""
    try:
        check_record(view, pos, limit, check_crc=False)
    except CorruptRecordError:
        return False
    return True
