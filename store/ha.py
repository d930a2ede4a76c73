"""HA replication (docs/replication.md §replication): the master/slave byte protocol and the store surface it
replicates through.

The protocol is two raw big-endian streams with no handshake (docs/replication.md §the-byte-protocol): the
slave sends 8-byte offset reports, the master sends frames of ``offset(8) size(4)`` followed by ``size`` raw
CommitLog bytes. The codecs here are pure functions over bytes; sockets live in the daemon.

:class:`ReplicaStore` is what the daemon's master and slave need of a store, so HA runs on any store
that keeps a CommitLog-format byte log without asking which one it is. A slave store copies the
master's bytes to the same offsets and then dispatches only whole records. Before they reach it,
:class:`ReplicaRecords` lets through only whole records that parse, pass their body CRC (or fail only
that: records the master set aside in place, which the slave sets aside too) and name the offset they
land at, so a frame that ends inside a record (frames are byte ranges) appends nothing of it, and nothing
else the master sends is appended or acknowledged. :func:`is_record_boundary` and
:func:`record_spans` are what a master and a slave check each other's offsets with.
"""

from __future__ import annotations

import struct
from typing import Protocol, runtime_checkable

from store.checkpoint import Incarnation
from store.config import StoreConfig
from store.errors import CorruptRecordError
from store.message import BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2
from store.record import check_record

REPORT = struct.Struct(">q")
FRAME_HEADER = struct.Struct(">qi")
HEADER_SIZE = FRAME_HEADER.size  # 12
#: Bytes of records a slave dispatches per hold of the store's lock (a record starting below it completes).
DISPATCH_CHUNK = 1024 * 1024

Buffer = bytes | bytearray | memoryview


class HAProtocolError(Exception):
    """The peer sent something the protocol does not allow; the connection must be closed."""


class ReplicaRecordError(HAProtocolError):
    """The master sent bytes that are not whole, sound records at the offsets they name: nothing of
    them may be appended or acknowledged."""


# ---------------------------------------------------------------------- slave -> master


def encode_report(offset: int) -> bytes:
    """A slave's offset report: its CommitLog max offset as an i64."""
    return REPORT.pack(offset)


#: Ours: a first "report" asking the master to describe its log (where it starts and ends, its store's
#: identity and incarnations) instead of streaming it. The master answers one frame at this offset whose
#: data is that description (a KVTable's JSON, GET_BROKER_RUNTIME_INFO's keys) and closes. An older mqctl
#: master closes at a negative report. A slave asks it of a master whose broker port named its run (not
#: 4.9.8's, which names none) and under haTls (which 4.9.8 does not speak) before it deletes.
DESCRIBE = -1
#: The most bytes a description may take.
DESCRIPTION_MAX = 64 * 1024


def latest_report(buf: Buffer) -> tuple[int | None, int]:
    """The newest complete report in ``buf`` and the bytes consumed (a multiple of 8).

    The master acts on the newest value only (4.9.8 ``ReadSocketService``); a trailing partial
    report stays in the buffer for the next read.
    """
    whole = len(buf) - len(buf) % REPORT.size
    if whole == 0:
        return None, 0
    (offset,) = REPORT.unpack_from(buf, whole - REPORT.size)
    if offset < 0:
        raise HAProtocolError(f"negative offset report {offset}")
    return offset, whole


# ---------------------------------------------------------------------- master -> slave


def encode_frame_header(offset: int, size: int) -> bytes:
    """The 12-byte header of a data frame (``size`` 0: a heartbeat)."""
    return FRAME_HEADER.pack(offset, size)


def encode_frame(offset: int, data: Buffer) -> bytes:
    return FRAME_HEADER.pack(offset, len(data)) + bytes(data)


def decode_frames(buf: Buffer, max_size: int) -> tuple[list[tuple[int, memoryview]], int]:
    """Split ``buf`` into complete frames ``(offset, data)``; returns them and the bytes consumed.

    A frame whose data has not fully arrived is left for the next read (a torn frame is never
    returned); ``max_size`` bounds the size field so a garbage header cannot make us buffer forever.
    """
    view = memoryview(buf)
    frames: list[tuple[int, memoryview]] = []
    pos = 0
    end = len(view)
    while end - pos >= HEADER_SIZE:
        offset, size = FRAME_HEADER.unpack_from(view, pos)
        if size < 0 or size > max_size or offset < 0:
            raise HAProtocolError(f"bad frame header: offset {offset}, size {size}")
        if end - pos - HEADER_SIZE < size:
            break
        start = pos + HEADER_SIZE
        frames.append((offset, view[start : start + size]))
        pos = start + size
    return frames, pos


def transfer_start(reported: int, master_max: int, file_size: int) -> int:
    """Where the master starts streaming: an empty slave (0) gets the master's last file from its
    start (4.9.8), any other slave its own end."""
    if reported == 0:
        return master_max - master_max % file_size
    return reported


#: 4.9.8's ``haTransferBatchSize`` default.
DEFAULT_TRANSFER_BATCH = 32 * 1024


def frame_extent(offset: int, available_end: int, file_size: int, batch: int) -> int:
    """Bytes the next frame carries from ``offset``: at most ``batch``, never past the written data
    (``available_end``) nor across a file boundary. A ``batch`` of 0 or less (``haTransferBatchSize``
    nothing refuses) means RocketMQ's default: read as it is, no frame would ever carry a byte."""
    if batch <= 0:
        batch = DEFAULT_TRANSFER_BATCH
    file_end = offset - offset % file_size + file_size
    return max(0, min(batch, available_end - offset, file_end - offset))


#: What a record may hold beyond ``maxMessageSize`` of body: hosts, topic, properties (each bounded).
RECORD_OVERHEAD = 64 * 1024
_PHYSICAL_OFFSET = struct.Struct(">q")
_PHYSICAL_OFFSET_POS = 28  # TOTALSIZE MAGIC BODYCRC QUEUEID FLAG (4 each) QUEUEOFFSET (8), then this
_MAGICS = (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2)
_MIN_RECORD = 92  # the smallest record: fixed fields, two IPv4 hosts, an empty body, a 1-byte topic
_SPAN_CHUNK = 1 << 20


def max_record_size(config: StoreConfig) -> int:
    """The largest record (or end-of-file filler) a slave takes from its master: a master whose
    ``maxMessageSize`` is larger than the slave's (or than 4.9.8's default) must not stall it."""
    return max(config.max_message_size, 4 * 1024 * 1024) + RECORD_OVERHEAD


class ReplicaRecords:
    """The slave's check of what its master sends, before a byte of it is appended (or acknowledged).

    HA frames are byte ranges, not records: 4.9.8's ``HAConnection.WriteSocketService`` sends up to
    ``haTransferBatchSize`` bytes and may cut a record anywhere. So the frames' bytes collect here from
    ``start`` (the slave's end) and :meth:`take` hands out only whole records that parse (magic, sizes,
    body CRC) and whose PHYSICALOFFSET field names the offset they land at, plus the end-of-file filler
    (BLANK magic, its size the rest of the file); a record cut by a frame stays until its rest arrives.
    One fault is let through: a record whose only fault is its body CRC is one its master's recovery set
    aside in place (kept in its CommitLog, never served), so the slave takes it too, to keep the two
    CommitLogs identical and replicate past it, and sets it aside likewise (:attr:`damaged`). So is a
    record whose magic or length fields are damaged when its PHYSICALOFFSET holds and its TOTALSIZE leads
    to what the master's recovery set it aside by (:meth:`_extent_known`).
    Anything else raises :class:`ReplicaRecordError` and hands out nothing of what is pending.
    """

    def __init__(self, start: int, file_size: int, max_record: int) -> None:
        self.start = start
        self.file_size = file_size
        #: Neither a record nor a filler is larger (a filler is what was left when a record did not fit).
        self.max_record = max_record
        self.pending = bytearray()
        #: ``(offset, size, why)`` of the damaged records in the last :meth:`take` (see above): the slave
        #: appends them and sets them aside in place (:meth:`ReplicaStore.set_aside_replica_records`).
        self.damaged: list[tuple[int, int, str]] = []

    @property
    def end(self) -> int:
        """Where the next frame must start."""
        return self.start + len(self.pending)

    def feed(self, offset: int, data: Buffer) -> None:
        """Add a frame's bytes; raises when the frame does not continue the bytes held."""
        if offset != self.end:
            raise HAProtocolError(f"frame at {offset} but the slave's bytes end at {self.end}")
        self.pending += data

    def take(self) -> tuple[int, bytes]:
        """``(offset, bytes)``: every whole, checked record pending (``b""`` when none is complete yet)."""
        n, self.damaged = self._whole()
        if n == 0:
            return self.start, b""
        out = bytes(self.pending[:n])
        del self.pending[:n]
        at, self.start = self.start, self.start + n
        return at, out

    def _whole(self) -> tuple[int, list[tuple[int, int, str]]]:
        """The bytes of whole, checked records pending, and the body-damaged ones among them."""
        buf = self.pending
        file_size = self.file_size
        pos = 0
        have = len(buf)
        damaged: list[tuple[int, int, str]] = []
        with memoryview(buf) as view:
            while True:
                at = self.start + pos
                room = file_size - at % file_size
                if room < 8:  # no room for a header: the rest of the file is padding (4.9.8 leaves none)
                    if have - pos < room:
                        return pos, damaged
                    pos += room
                    continue
                if have - pos < 8:
                    return pos, damaged
                size, magic = struct.unpack_from(">ii", view, pos)
                if magic == BLANK_MAGIC_CODE and size == room:
                    if size > self.max_record + 8:
                        raise ReplicaRecordError(f"end-of-file filler of {size} bytes at {at} is too large")
                    if have - pos < size:
                        return pos, damaged
                    pos += size
                    continue
                fault = ""
                if magic not in _MAGICS:
                    fault = f"no record starts at {at}: magic code 0x{magic & 0xFFFFFFFF:08X}"
                if size <= 0 or size > min(self.max_record, room) or (fault and size < _MIN_RECORD):
                    raise ReplicaRecordError(fault or f"record at {at}: total size {size} does not fit")
                if have - pos < size:
                    return pos, damaged  # cut by the frame: the rest is on its way
                if not fault:
                    try:
                        check_record(view, pos, pos + size, check_crc=True)
                    except CorruptRecordError as e:
                        if not _sound_but_body(view, pos, size):
                            fault = f"record at {at}: {e.reason}"
                        else:  # (its offset is checked next, as any record's)
                            damaged.append((at, size, e.reason))
                if fault:  # set aside by its master's recovery only if its extent is known, as there
                    (named,) = _PHYSICAL_OFFSET.unpack_from(view, pos + _PHYSICAL_OFFSET_POS)
                    if named != at:  # (garbage is refused at once, not waited on)
                        raise ReplicaRecordError(fault)
                    known = self._extent_known(view, pos + size, at + size, have)
                    if known is None:
                        return pos, damaged  # what follows it decides, and is still arriving
                    if not known:
                        raise ReplicaRecordError(fault)
                    damaged.append((at, size, fault))
                    pos += size
                    continue
                (named,) = _PHYSICAL_OFFSET.unpack_from(view, pos + _PHYSICAL_OFFSET_POS)
                if named != at:
                    raise ReplicaRecordError(f"record at {at} names physical offset {named}")
                pos += size

    def _extent_known(self, view: memoryview, pos: int, at: int, have: int) -> bool | None:
        """Whether a damaged record ending at ``pos`` (offset ``at``) is followed by what can only follow
        a record: the file's end-of-file filler, or a record that parses, passes its body CRC and names
        its own offset. The rule the master's recovery kept it in place by (``commitlog.damaged_extent``);
        None: those bytes have not all arrived."""
        room = self.file_size - at % self.file_size
        if at % self.file_size == 0 or room < 8:
            return False  # nothing of its file follows it: recovery cuts there
        if have - pos < 8:
            return None
        size, magic = struct.unpack_from(">ii", view, pos)
        if magic == BLANK_MAGIC_CODE and size == room:
            return True
        if magic not in _MAGICS or not 0 < size <= min(self.max_record, room):
            return False
        if have - pos < size:
            return None
        try:
            check_record(view, pos, pos + size, check_crc=True)
        except CorruptRecordError:
            return False
        return bool(_PHYSICAL_OFFSET.unpack_from(view, pos + _PHYSICAL_OFFSET_POS)[0] == at)


def _sound_but_body(view: memoryview, pos: int, size: int) -> bool:
    """Whether the ``size``-byte record at ``pos`` parses when its body CRC is not checked: magic, sizes and
    every length field agree, so only its body is damaged (what recovery sets aside in place)."""
    try:
        check_record(view, pos, pos + size, check_crc=False)
    except CorruptRecordError:
        return False
    return True


def set_aside_in_place(record: bytes, offset: int) -> bool:
    """Whether ``record``, stored at ``offset``, is one a store sets aside in place and never serves: it
    parses and names ``offset``, and only its body CRC fails. A master answers no record there
    (VIEW_MESSAGE_BY_ID), so a slave's divergence check cannot compare it byte for byte."""
    view = memoryview(record)
    size = len(record)
    if size < _PHYSICAL_OFFSET_POS + 8 or not _sound_but_body(view, 0, size):
        return False
    try:
        check_record(view, 0, size, check_crc=True)
    except CorruptRecordError:
        return bool(_PHYSICAL_OFFSET.unpack_from(view, _PHYSICAL_OFFSET_POS)[0] == offset)
    return False


def is_record_boundary(store: ReplicaStore, offset: int) -> bool:
    """Whether ``offset`` is where a record of ``store``'s CommitLog starts or the log ends: a file's
    start, an end-of-file filler, or a record that parses and names ``offset`` as its own. What a master
    checks a slave's first report against: a 4.9.8 slave reports any other offset after a connection cut a
    record (it appends frames raw), ours never does, so the master says so and streams from there."""
    end = store.max_phy_offset
    if offset in (0, end):
        return True  # (0: an empty slave)
    file_size = store.commit_log_file_size
    if offset > end:
        return False
    if offset % file_size == 0:
        return True
    head = store.read_commit_log(offset, 8)
    if head is None:
        return False
    size, magic = struct.unpack(">ii", head)
    room = file_size - offset % file_size
    if magic == BLANK_MAGIC_CODE and size == room:
        return True
    if magic not in _MAGICS or not 0 < size <= room:
        return False
    record = store.read_commit_log(offset, size)
    if record is None:
        return False
    try:
        check_record(record, 0, size, check_crc=False)
    except CorruptRecordError:
        return False
    return bool(_PHYSICAL_OFFSET.unpack_from(record, _PHYSICAL_OFFSET_POS)[0] == offset)


def record_spans(store: ReplicaStore, start: int, end: int) -> list[tuple[int, int]]:
    """``(offset, size)`` of each record from ``start`` (a record boundary: a file's start) up to ``end``
    within that file, as headers say; an end-of-file filler, zeros or a header that does not fit end it.
    What a slave walks back over when its tail differs from its master's (read a MiB at a time)."""
    file_size = store.commit_log_file_size
    stop = min(end, start - start % file_size + file_size)
    out = []
    at = base = start
    chunk = b""
    while at + 8 <= stop:
        if at + 8 > base + len(chunk):
            base, chunk = at, store.read_commit_log(at, min(_SPAN_CHUNK, stop - at)) or b""
            if len(chunk) < 8:
                break
        size, magic = struct.unpack_from(">ii", chunk, at - base)
        if magic not in _MAGICS or not 0 < size <= stop - at:
            break
        out.append((at, size))
        at += size
    return out


# ---------------------------------------------------------------------- the store's side


@runtime_checkable
class ReplicaStore(Protocol):
    """The CommitLog surface HA needs: a master reads its bytes, a slave appends and dispatches them.

    Apart from :class:`store.api.MessageStore`'s record-level API because replication moves raw bytes at
    CommitLog offsets. Appending and dispatching are two steps, as in 4.9.8 (``HAClient`` appends,
    ``ReputMessageService`` dispatches): a slave reports (acks) what is in its CommitLog without waiting
    for its ConsumeQueues and index.
    """

    @property
    def max_phy_offset(self) -> int:
        """Where the CommitLog ends: what a slave reports, and how far a master may send."""
        ...

    @property
    def min_phy_offset(self) -> int:
        """Where the CommitLog starts (older files were cleaned up)."""
        ...

    @property
    def commit_log_file_size(self) -> int:
        """The CommitLog's file size: frames never cross a file, an empty slave starts at a file."""
        ...

    def read_commit_log(self, offset: int, size: int) -> bytes | None:
        """A copy of ``size`` bytes at ``offset`` (within one file), None when the log no longer has them."""
        ...

    def append_replica(self, offset: int, data: Buffer) -> bool:
        """Write the master's ``data`` at ``offset``; ``False`` (nothing written) when it does not continue
        the log. Raises ``OSError`` when the store cannot take the bytes."""
        ...

    def dispatch_replica(self, max_bytes: int = DISPATCH_CHUNK) -> bool:
        """Dispatch the whole records appended after the dispatch cursor (about ``max_bytes`` of them) and
        tell the arrival listeners; whether the cursor moved."""
        ...

    def set_aside_replica_records(self, records: list[tuple[int, int, str]]) -> str:
        """Set aside in place, as recovery does with a damaged record whose extent it knows, the appended
        records ``(offset, size, why)`` whose only fault is their body CRC (their master set them aside): they
        stay in the CommitLog (so it stays identical to the master's and later offsets stay right), are never
        served, and are copied where the store keeps what it sets aside. Call it right after the
        :meth:`append_replica` that wrote them, before the event loop serves another request. Returns where
        they were copied ("" when nowhere)."""
        ...

    @property
    def replica_mark(self) -> int:
        """Where the CommitLog stops being known to hold its master's records: a slave that restarts
        before its master answers serves nothing past it (docs/replication.md §the-replica-mark)."""
        ...

    @property
    def held_back(self) -> int:
        """The bytes past the mark this slave holds and does not serve until they are checked."""
        ...

    def replica_checked(self, end: int) -> None:
        """The divergence check found the log its master's up to ``end``: the mark moves there (on disk
        too) and nothing is held back any longer."""
        ...

    def name_replica_master(self, identity: str, incarnation: str = "", following: str = "") -> None:
        """The mark counts the records of the master's store ``identity`` (hex; "": not known: a master
        that says none, or one the slave replicates from unchecked), copied from its ``incarnation`` (hex;
        "": not known: a master that shows no history) or, once it began, the one ``following`` it (the
        master's next then; "": none), from now on."""
        ...

    @property
    def replica_incarnation(self) -> str:
        """The master's incarnation the mark's records were last copied from ("": not known)."""
        ...

    @property
    def replica_following(self) -> str:
        """The master's next incarnation when the mark's was named ("": none)."""
        ...

    @property
    def next_incarnation(self) -> str:
        """The incarnation this store begins at its log's next change ("": none due)."""
        ...

    @property
    def incarnations(self) -> list[Incarnation]:
        """This store's incarnations as a master, oldest first (none: it keeps none)."""
        ...

    def begin_incarnation(self, *, at_first_change: bool = False, at: int = -1) -> None:
        """A slave cuts its log: a new incarnation at its log's end, or at ``at`` below it (where the cut is
        to be, begun before it); ``at_first_change`` (the store starts): before its log's next change, or
        now when it has none."""
        ...

    @property
    def identity(self) -> str:
        """This store's identity (hex), made once and kept beside it ("": a store that keeps nothing)."""
        ...

    @property
    def replica_master(self) -> str:
        """The identity of the master's store whose records the mark counts ("": not known)."""
        ...

    def hold_back(self, cut: int) -> None:
        """A check found the log not its master's from ``cut`` on: nothing from there is served (what was
        dispatched from it dropped, dispatch stopped there, not a byte of the log changed) until a check
        cuts it or finds it the master's (:meth:`replica_checked`); the mark comes down to it. Never called
        while :meth:`dispatch_replica` runs."""
        ...

    def serve_unchecked(self) -> None:
        """Serve past the mark without a check (the master cannot be asked); the mark stays, and a tail
        :meth:`hold_back` holds stays held."""
        ...

    def restart_replica_log(self, start: int) -> int:
        """Begin the log again, empty, at ``start`` (a file's start past its end): the master's first retained
        offset, when its retention deleted the slave's whole log (the master's records: the mark counted
        them). Its files, and what was dispatched from them, are deleted as the master's were. Returns the
        CommitLog files deleted. Never called while :meth:`dispatch_replica` runs."""
        ...

    def set_aside_replica_tail(self, cut: int, why: str) -> tuple[int, str]:
        """Take everything from ``cut`` on out of service: the CommitLog's bytes and what was dispatched from
        them, kept where the store keeps what it sets aside (a file store: ``quarantine/<UTC>/``). A slave
        does this with a tail its master does not hold. Returns the records set aside and where they are.
        Never called while :meth:`dispatch_replica` runs."""
        ...
