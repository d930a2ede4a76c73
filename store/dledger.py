"""openmessaging DLedger's on-disk format (0.3.1.2, the version RocketMQ 4.9.8 ships) and the log contract.

Pure codecs for what ``DLedgerMmapFileStore`` writes under ``<storePathRootDir>/dledger-<selfId>/``:

* ``data/<20 digits>``: entries back to back (``DLedgerEntryCoder#encode``), a file rolled with a blank
  (``MmapFileList#preAppend``: magic -1, the remaining length, zeros) when the next entry and an 8-byte
  blank no longer fit; 1 GiB files by default, ``mappedFileSizeCommitLog`` under 4.9.8's
  ``DLedgerCommitLog``.
* ``index/<20 digits>``: one 32-byte record per entry at ``index * 32`` (``DLedgerEntryCoder#encodeIndex``),
  160 MiB files (``DLedgerConfig#mappedFileSizeForEntryIndex``), never padded.
* ``checkpoint``: ``endIndex`` and ``committedIndex`` as Java properties
  (``DLedgerMmapFileStore#persistCheckPoint``); ``currterm``: ``currTerm`` and ``voteLeader``
  (``MemberState#persistTerm``). Both written through ``IOUtils#string2File`` (``.tmp`` then rename, the
  previous content kept in ``.bak``).

:class:`RaftLog` is what the Raft layer needs of a log; :class:`MemoryRaftLog` is its in-memory form
(``DLedgerMemoryStore``'s role) and :class:`store.dledger_log.DLedgerLog` the file-backed one.
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from mmap import mmap
from typing import Protocol

from store.durability import sync_directory
from store.errors import StoreError
from store.record import body_crc as _crc31

log = logging.getLogger(__name__)

#: ``DLedgerMmapFileStore#MAGIC_1`` / ``CURRENT_MAGIC``: the only entry magic 0.3.x writes.
MAGIC_1 = 1
CURRENT_MAGIC = MAGIC_1
#: ``MmapFileList#BLANK_MAGIC_CODE`` and ``MIN_BLANK_LEN``: the padding that ends a rolled data file.
BLANK_MAGIC_CODE = -1
MIN_BLANK_LEN = 8
#: ``DLedgerEntry#POS_OFFSET``: magic, size, index, term come before pos.
POS_OFFSET = 4 + 4 + 8 + 8
#: ``DLedgerEntry#HEADER_SIZE``: ... then pos, channel, chain CRC, body CRC.
HEADER_SIZE = POS_OFFSET + 8 + 4 + 4 + 4
#: ``DLedgerEntry#BODY_OFFSET``: the body length comes last; a CommitLog record inside an entry starts here.
BODY_OFFSET = HEADER_SIZE + 4
#: Where the body CRC lies in an entry header (after pos, channel and chain CRC).
BODY_CRC_OFFSET = POS_OFFSET + 8 + 4 + 4
#: ``DLedgerMmapFileStore#INDEX_UNIT_SIZE``.
INDEX_UNIT_SIZE = 32
#: ``DLedgerConfig#mappedFileSizeForEntryData`` and ``#mappedFileSizeForEntryIndex`` defaults.
DATA_FILE_SIZE = 1024 * 1024 * 1024
INDEX_FILE_SIZE = INDEX_UNIT_SIZE * 5 * 1024 * 1024

DATA_DIR = "data"
INDEX_DIR = "index"
CHECKPOINT_FILE = "checkpoint"
END_INDEX_KEY = "endIndex"
COMMITTED_INDEX_KEY = "committedIndex"
TERM_FILE = "currterm"
#: (ours) beside ``currterm``: that the member abstains from elections, and at which stage, until it holds
#: what its group committed (it lost its store, or its vote file); no file: it votes
ABSTAIN_FILE = "abstain"
#: (ours) beside ``currterm``: until when, on this boot's clock, the member refuses every candidate but the
#: leader it last acknowledged (:func:`encode_heard`); read at start, so a restart keeps that promise
HEARD_FILE = "heard"
TERM_KEY = "currTerm"
VOTE_KEY = "voteLeader"

Buf = bytes | bytearray | memoryview
"""What the codecs read: a file's mapping, a copy, a frame."""

_HEADER = struct.Struct(">iiqqqiiii")  # magic size index term pos channel chainCrc bodyCrc bodyLength
_INDEX = struct.Struct(">iqiqq")  # magic pos size index term
_BLANK = struct.Struct(">ii")

_c_pack_header: Callable[[Buf, int, int, int, int, int, int, int, int], None] | None
_c_pack_index: Callable[[Buf, int, int, int, int, int, int], None] | None
try:  # the compiled build's packers (_cparse.c: the same bytes, without struct's slow 64-bit path)
    from store import _cparse

    _c_pack_header, _c_pack_index = _cparse.pack_header, _cparse.pack_index
except ImportError:
    _c_pack_header = _c_pack_index = None
assert _HEADER.size == BODY_OFFSET and _INDEX.size == INDEX_UNIT_SIZE


class DLedgerCode(IntEnum):
    """``DLedgerResponseCode`` values the store raises with (the Raft layer answers peers with them)."""

    INCONSISTENT_TERM = 407
    INCONSISTENT_INDEX = 408
    INDEX_OUT_OF_RANGE = 410
    UNEXPECTED_ARGUMENT = 411
    DISK_ERROR = 414
    DISK_FULL = 415
    INDEX_LESS_THAN_LOCAL_BEGIN = 419


class DLedgerError(StoreError):
    """A log operation refused, keyed on the ``DLedgerResponseCode`` a Java peer would answer with."""

    def __init__(self, code: DLedgerCode, reason: str) -> None:
        self.code = code
        self.reason = reason
        super().__init__(f"{code.name}: {reason}")


class CorruptEntryError(DLedgerError):
    """Bytes that do not decode as the entry (or index record) they should be."""

    def __init__(self, where: int, reason: str) -> None:
        self.where = where
        super().__init__(DLedgerCode.DISK_ERROR, f"at {where}: {reason}")


class DamagedEntryError(CorruptEntryError):
    """An entry read back from disk whose body fails its ``bodyCrc``: damaged after it was written."""

    def __init__(self, index: int, where: int, reason: str) -> None:
        self.index = index
        super().__init__(where, reason)


# ------------------------------------------------------------------------------------ entries


@dataclass(slots=True, init=False)
class Entry:
    """One DLedger entry (``DLedgerEntry``): ``pos`` is the absolute data-file offset of its first byte.

    Never changed once built (:meth:`at` makes a placed copy). Not ``frozen``: a frozen dataclass sets
    each field through ``object.__setattr__``, and one is built for every entry a leader appends and a
    follower is pushed; the ``__init__`` written out is compiled (store/native.py)."""

    index: int
    term: int
    body: bytes
    pos: int = -1
    magic: int = CURRENT_MAGIC
    channel: int = 0
    chain_crc: int = 0  # reserved: 0.3.1.2 never computes it
    body_crc: int = 0  # 0.3.1.2 writes 0 and never reads it; ours: :func:`entry_body_crc`, 0 = not computed

    def __init__(
        self,
        index: int,
        term: int,
        body: bytes,
        pos: int = -1,
        magic: int = CURRENT_MAGIC,
        channel: int = 0,
        chain_crc: int = 0,
        body_crc: int = 0,
    ) -> None:
        self.index = index
        self.term = term
        self.body = body
        self.pos = pos
        self.magic = magic
        self.channel = channel
        self.chain_crc = chain_crc
        self.body_crc = body_crc

    @property
    def size(self) -> int:
        """``DLedgerEntry#computeSizeInBytes``: header, body length and body."""
        return BODY_OFFSET + len(self.body)

    def at(self, pos: int) -> Entry:
        """The same entry placed at ``pos`` (each pushed entry on a follower: no `dataclasses.replace` walk)."""
        return Entry(
            self.index, self.term, self.body, pos, self.magic, self.channel, self.chain_crc, self.body_crc
        )


def encode_entry(entry: Entry) -> bytes:
    """``DLedgerEntryCoder#encode``: big-endian header, body length, body."""
    return (
        _HEADER.pack(
            entry.magic,
            entry.size,
            entry.index,
            entry.term,
            entry.pos,
            entry.channel,
            entry.chain_crc,
            entry.body_crc,
            len(entry.body),
        )
        + entry.body
    )


def pack_entries(data: mmap | bytearray, at: int, entries: list[Entry], pos: int, records: bytearray) -> int:
    """:func:`encode_entry` of each of ``entries`` back to back into ``data`` from ``at``, the first placed at
    data offset ``pos`` (each entry's own ``pos`` is not read: the caller checked it), and
    :func:`encode_index` of each into ``records`` from 0; returns the bytes packed. Each header is packed and
    each body copied where it lands: no entry is encoded to bytes of its own first (a follower writes a
    push's entries straight into the mapped data file)."""
    start = at
    k = 0
    pack_header_into = _HEADER.pack_into
    pack_index_into = _INDEX.pack_into
    for entry in entries:
        body = entry.body
        body_len = len(body)
        size = BODY_OFFSET + body_len
        pack_header_into(
            data,
            at,
            entry.magic,
            size,
            entry.index,
            entry.term,
            pos,
            entry.channel,
            entry.chain_crc,
            entry.body_crc,
            body_len,
        )
        data[at + BODY_OFFSET : at + size] = body
        pack_index_into(records, k, entry.magic, pos, size, entry.index, entry.term)
        at += size
        pos += size
        k += INDEX_UNIT_SIZE
    return at - start


def entry_body_crc(body: Buf) -> int:
    """The ``bodyCrc`` our leaders write: CRC-32 of the whole entry body (the CommitLog record), masked to
    31 bits as the record's BODYCRC is (``UtilAll#crc32``). 0.3.1.2 leaves the field 0 and never reads it,
    so a 4.9.8 member stores and forwards ours untouched; 0 stays "not computed"."""
    return _crc31(body if isinstance(body, bytes | memoryview) else memoryview(body))


def body_crc_problem(index: int, stored: int, body: Buf) -> str | None:
    """Why entry ``index``'s body does not match its ``bodyCrc`` (``None``: it does, or 0 was written)."""
    if stored == 0:
        return None
    crc = entry_body_crc(body)
    return None if crc == stored else f"entry {index}: body crc {crc} != bodyCrc {stored}"


def stored_body_crc(buf: Buf, offset: int = 0) -> int:
    """The ``bodyCrc`` field of the entry header at ``offset``."""
    return int(_BLANK.unpack_from(buf, offset + BODY_CRC_OFFSET)[0])


def pack_header(
    buf: Buf,
    magic: int,
    size: int,
    index: int,
    term: int,
    pos: int,
    body_len: int,
    body_crc: int = 0,
    at: int = 0,
) -> None:
    """:func:`encode_entry`'s header packed into ``buf`` at ``at`` (a mapped data file: the entry written in
    place), channel and ``chainCrc`` 0."""
    if _c_pack_header is not None:
        _c_pack_header(buf, at, magic, size, index, term, pos, body_crc, body_len)
    else:
        _HEADER.pack_into(buf, at, magic, size, index, term, pos, 0, 0, body_crc, body_len)


def decode_header(buf: Buf, offset: int = 0) -> tuple[int, int, int, int, int, int]:
    """(magic, size, index, term, pos, body length) of the entry at ``offset``; raises on a short buffer."""
    if len(buf) - offset < BODY_OFFSET:
        raise CorruptEntryError(offset, f"{len(buf) - offset} bytes left, a header needs {BODY_OFFSET}")
    magic, size, index, term, pos, _ch, _chain, _crc, body_len = _HEADER.unpack_from(buf, offset)
    return magic, size, index, term, pos, body_len


def check_header(magic: int, size: int, body_len: int, where: int) -> None:
    """The checks ``DLedgerMmapFileStore#recover`` applies to every entry header."""
    if not MAGIC_1 <= magic <= CURRENT_MAGIC:
        raise CorruptEntryError(where, f"unknown magic {magic}")
    if size <= HEADER_SIZE:
        raise CorruptEntryError(where, f"size {size} should be > {HEADER_SIZE}")
    if body_len + BODY_OFFSET != size:
        raise CorruptEntryError(where, f"size {size} != {body_len} + {BODY_OFFSET}")


def decode_entry(buf: Buf, offset: int = 0) -> Entry:
    """``DLedgerEntryCoder#decode`` with ``DLedgerMmapFileStore#recover``'s header checks."""
    magic, size, index, term, pos, body_len = decode_header(buf, offset)
    check_header(magic, size, body_len, offset)
    if len(buf) - offset < size:
        raise CorruptEntryError(offset, f"entry of {size} bytes cut at {len(buf) - offset}")
    _m, _s, _i, _t, _p, channel, chain, crc, _bl = _HEADER.unpack_from(buf, offset)
    body = bytes(buf[offset + BODY_OFFSET : offset + size])
    return Entry(index, term, body, pos, magic, channel, chain, crc)


def unpack_header(buf: Buf, offset: int) -> tuple[int, int, int, int, int, int, int, int, int]:
    """Every header field of the entry at ``offset`` in one unpack: (magic, size, index, term, pos, channel,
    chain CRC, body CRC, body length). The caller checked that a header's bytes are there."""
    return _HEADER.unpack_from(buf, offset)  # type: ignore[no-any-return]


def raw_header(buf: Buf, offset: int) -> tuple[int, int, int, int, int, int, int, int, int]:
    """:func:`unpack_header` of the entry at ``offset`` of a run of entries as a data file holds them (a
    binary push), checked to be one whole entry there (the header checks of ``DLedgerMmapFileStore#recover``);
    raises UNEXPECTED_ARGUMENT (damaged on the way) when it is not. One unpack per entry."""
    if len(buf) - offset < BODY_OFFSET:
        raise DLedgerError(
            DLedgerCode.UNEXPECTED_ARGUMENT,
            f"{len(buf) - offset} bytes left at {offset}, a header needs {BODY_OFFSET}",
        )
    header: tuple[int, int, int, int, int, int, int, int, int] = _HEADER.unpack_from(buf, offset)
    magic, size, body_len = header[0], header[1], header[8]
    if magic != CURRENT_MAGIC:
        raise DLedgerError(DLedgerCode.UNEXPECTED_ARGUMENT, f"unknown magic {magic} at {offset}")
    if size <= HEADER_SIZE or body_len + BODY_OFFSET != size:
        raise DLedgerError(
            DLedgerCode.UNEXPECTED_ARGUMENT, f"size {size} with a body of {body_len} at {offset}"
        )
    if len(buf) - offset < size:
        raise DLedgerError(
            DLedgerCode.UNEXPECTED_ARGUMENT, f"entry of {size} bytes cut at {len(buf) - offset}"
        )
    return header


def index_pos_size(buf: Buf, offset: int) -> tuple[int, int]:
    """(pos, size) of the index record at ``offset``: where a run of entries starts and ends."""
    _magic, pos, size, _index, _term = _INDEX.unpack_from(buf, offset)
    return pos, size


def pack_index_record(records: bytearray, magic: int, pos: int, size: int, index: int, term: int) -> None:
    """:func:`encode_index` appended to ``records``."""
    records += _INDEX.pack(magic, pos, size, index, term)


def entry_size_at(buf: Buf, pos: int) -> int:
    """The size field of the entry header at ``pos``."""
    return int(_BLANK.unpack_from(buf, pos)[1])


def entry_header_problem(view: Buf, pos: int, written: int, file_size: int, base: int) -> str:
    """What ends a walk of a data file at ``pos`` ("blank-filler", "zeros", "partial": not all written
    yet) or why the entry header there is damaged (the checks of ``DLedgerMmapFileStore#recover``); ""
    for a sound header of an entry written whole. ``base`` is the file's first offset."""
    return entry_extent(view, pos, written, file_size, base)[0]


def entry_extent(view: Buf, pos: int, written: int, file_size: int, base: int) -> tuple[str, int]:
    """:func:`entry_header_problem` and the entry's size field, from one unpack of the header: what a walk
    over the entries needs of each (dispatch reads every committed entry's header)."""
    if pos + _BLANK.size > written:
        return "partial", 0
    if pos + BODY_OFFSET <= written:
        magic, size, _index, _term, at, _ch, _chain, _crc, body_len = _HEADER.unpack_from(view, pos)
    else:
        magic, size = _BLANK.unpack_from(view, pos)
        at = body_len = -1  # (a header not all written: "partial" below, but for a blank or zeros)
    if magic == BLANK_MAGIC_CODE:
        if size == file_size - pos:
            return "blank-filler", size
        return f"blank of {size} bytes does not fill the file", size
    if magic == 0 and size == 0:
        return "zeros", 0
    if pos + max(size, BODY_OFFSET) > written:
        if pos + max(size, BODY_OFFSET) <= file_size:
            return "partial", size
        return f"entry of {size} bytes past its file", size
    if magic != CURRENT_MAGIC or size <= HEADER_SIZE or body_len + BODY_OFFSET != size:
        try:
            check_header(magic, size, body_len, base + pos)
        except CorruptEntryError as e:
            return e.reason.partition(": ")[2], size
    return ("" if at == base + pos else f"entry says pos {at}"), size


def encode_blank(length: int) -> bytes:
    """The padding ``MmapFileList#preAppend`` writes over a file's last ``length`` bytes."""
    if length < MIN_BLANK_LEN:
        raise ValueError(f"a blank needs {MIN_BLANK_LEN} bytes, not {length}")
    return _BLANK.pack(BLANK_MAGIC_CODE, length) + bytes(length - _BLANK.size)


def needs_roll(file_size: int, wrote: int, entry_size: int) -> bool:
    """``MmapFileList#preAppend``: an entry goes to the next file unless it and a blank still fit."""
    return entry_size + MIN_BLANK_LEN > file_size - wrote


# ------------------------------------------------------------------------------------ index records


@dataclass(slots=True, init=False)
class IndexRecord:
    """One record of the index files: where entry ``index`` lives in the data files (never changed once
    built; the ``__init__`` written out, as :class:`Entry`'s)."""

    magic: int
    pos: int
    size: int
    index: int
    term: int

    def __init__(self, magic: int, pos: int, size: int, index: int, term: int) -> None:
        self.magic = magic
        self.pos = pos
        self.size = size
        self.index = index
        self.term = term


def encode_index(entry: Entry | IndexRecord) -> bytes:
    """``DLedgerEntryCoder#encodeIndex``: magic, pos, size, index, term."""
    return _INDEX.pack(entry.magic, entry.pos, entry.size, entry.index, entry.term)


def pack_index(buf: Buf, at: int, entry: Entry) -> None:
    """:func:`encode_index` of ``entry`` packed into ``buf`` at ``at`` (a mapped index file: no bytes made,
    no slice assigned)."""
    if _c_pack_index is not None:
        _c_pack_index(buf, at, entry.magic, entry.pos, entry.size, entry.index, entry.term)
    else:
        _INDEX.pack_into(buf, at, entry.magic, entry.pos, entry.size, entry.index, entry.term)


def decode_index(buf: Buf, offset: int = 0) -> IndexRecord:
    """Inverse of :func:`encode_index`."""
    if len(buf) - offset < INDEX_UNIT_SIZE:
        raise CorruptEntryError(offset, "index record cut short")
    return IndexRecord(*_INDEX.unpack_from(buf, offset))


def index_matches(rec: IndexRecord, entry: Entry) -> bool:
    """The data-to-index comparison of ``DLedgerMmapFileStore#recover``."""
    return (rec.magic, rec.pos, rec.size, rec.index, rec.term) == (
        entry.magic,
        entry.pos,
        entry.size,
        entry.index,
        entry.term,
    )


# ------------------------------------------------------------------------------------ checkpoint, term


def encode_java_properties(pairs: list[tuple[str, str]]) -> str:
    """``IOUtils#properties2String``: ``key=value`` lines (the order Java 8's ``Hashtable`` iterates)."""
    return "".join(f"{k}={v}\n" for k, v in pairs)


def decode_java_properties(text: str) -> dict[str, str]:
    """Enough of ``Properties#load`` for DLedger's own files (``key=value`` or ``key:value``, ``#`` comments)."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=len(line))
        out[line[:cut].strip()] = line[cut + 1 :].strip()
    return out


def encode_checkpoint(end_index: int, committed_index: int) -> str:
    """``DLedgerMmapFileStore#persistCheckPoint``."""
    return encode_java_properties(
        [(END_INDEX_KEY, str(end_index)), (COMMITTED_INDEX_KEY, str(committed_index))]
    )


def decode_checkpoint(text: str) -> tuple[int | None, int | None]:
    """(endIndex, committedIndex); ``None`` for a key missing or empty (recovery then skips it)."""
    props = decode_java_properties(text)

    def num(key: str) -> int | None:
        value = props.get(key, "")
        return int(value) if value.lstrip("-").isdigit() else None

    return num(END_INDEX_KEY), num(COMMITTED_INDEX_KEY)


def encode_term(term: int, vote_for: str | None) -> str:
    """``MemberState#persistTerm``: an empty ``voteLeader`` means no vote."""
    return encode_java_properties([(VOTE_KEY, vote_for or ""), (TERM_KEY, str(term))])


def decode_term(text: str) -> tuple[int, str | None]:
    """``MemberState#loadTerm``: (currTerm, voteLeader or ``None``)."""
    props = decode_java_properties(text)
    term = props.get(TERM_KEY, "0")
    return (int(term) if term.lstrip("-").isdigit() else 0), (props.get(VOTE_KEY) or None)


def write_small_file(path: str, text: str) -> None:
    """``IOUtils#string2File``, durably: write ``.tmp``, keep the old content as ``.bak``, rename over."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    try:
        with open(path, encoding="utf-8") as old, open(path + ".bak", "w", encoding="utf-8") as bak:
            bak.write(old.read())
    except FileNotFoundError:
        pass
    os.replace(tmp, path)
    sync_directory(os.path.dirname(path) or ".")


def read_small_file(path: str) -> str | None:
    """The file's text, its ``.bak`` when it is missing (a crash between delete and rename), else ``None``."""
    for p in (path, path + ".bak"):
        try:
            with open(p, encoding="utf-8") as f:
                return f.read()
        except FileNotFoundError:
            continue
    return None


def load_term(dledger_dir: str) -> tuple[int, str | None]:
    """The persisted (currTerm, voteLeader) of a DLedger member; (0, None) when it never voted."""
    text = read_small_file(os.path.join(dledger_dir, TERM_FILE))
    return decode_term(text) if text is not None else (0, None)


def persist_term(dledger_dir: str, term: int, vote_for: str | None) -> None:
    """Persist (currTerm, voteLeader) before answering a vote, as ``MemberState#persistTerm`` does."""
    write_small_file(os.path.join(dledger_dir, TERM_FILE), encode_term(term, vote_for))


def term_kept(dledger_dir: str) -> bool:
    """Whether the member's vote file (or its ``.bak``) is there: without it, what it voted is lost."""
    path = os.path.join(dledger_dir, TERM_FILE)
    return os.path.exists(path) or os.path.exists(path + ".bak")


def load_abstention(dledger_dir: str) -> str:
    """The abstention the member kept (see :data:`ABSTAIN_FILE`); "" when it votes."""
    return (read_small_file(os.path.join(dledger_dir, ABSTAIN_FILE)) or "").strip()


def persist_abstention(dledger_dir: str, state: str) -> None:
    """Keep the abstention's stage, durably; "" removes the file (the member votes)."""
    path = os.path.join(dledger_dir, ABSTAIN_FILE)
    if state:
        write_small_file(path, state + "\n")
        return
    for p in (path, path + ".bak"):
        try:
            os.remove(p)
        except FileNotFoundError:
            continue
        sync_directory(dledger_dir)


#: The first line of a `HEARD_FILE` record, and the size it is padded to (rewritten in place, never grown).
#: (Version 1 named no group nor member: read as none.)
HEARD_MAGIC = b"mqctl-heard 2\n"
HEARD_SIZE = 256
#: A `HEARD_FILE` record's fields after the first line, in order (the deadline's last).
HEARD_KEYS = ("bootId", "group", "selfId", "leader", "untilBootMs")

#: (boot id, group, self id, leader, deadline): what a `HEARD_FILE` record holds (:func:`encode_heard`)
Heard = tuple[str, str, str, str, int]


def encode_heard(boot_id: str, group: str, self_id: str, leader: str, until_boot_ms: int) -> bytes:
    """A `HEARD_FILE` record: the boot it counts in, the group and member that wrote it (a directory reused
    by another group, or a member renamed, is not held to it), the leader let through, the deadline
    (CLOCK_BOOTTIME milliseconds), then a CRC-32 of what precedes it; padded with newlines to `HEARD_SIZE`
    so that a rewrite in place leaves nothing of an earlier record behind."""
    values = (boot_id, group, self_id, leader)
    for name, value in zip(HEARD_KEYS[:4], values, strict=True):
        if "\n" in value or "\r" in value:
            raise ValueError(f"{name} holds a line break: {value!r}")
    lines = "".join(f"{k}={v}\n" for k, v in zip(HEARD_KEYS, (*values, str(until_boot_ms)), strict=True))
    head = HEARD_MAGIC + lines.encode()
    record = head + b"crc=%d\n" % zlib.crc32(head)
    return record.ljust(HEARD_SIZE, b"\n")


def decode_heard(data: bytes) -> Heard | None:
    """What a `HEARD_FILE` record holds (:data:`Heard`); None for anything else (short, torn, damaged,
    another version): the member then keeps no promise, as after a reboot."""
    cut = data.find(b"\ncrc=")
    end = data.find(b"\n", cut + 1) if cut >= 0 else -1
    if not data.startswith(HEARD_MAGIC) or end < 0 or data[end:].strip(b"\n"):
        return None
    head = data[: cut + 1]
    try:
        crc = int(data[cut + 5 : end].decode("ascii"))
        lines = head[len(HEARD_MAGIC) :].decode().split("\n")
    except ValueError:  # (UnicodeDecodeError is a ValueError)
        return None
    if crc != zlib.crc32(head) or len(lines) != len(HEARD_KEYS) + 1 or lines[-1]:
        return None
    values: list[str] = []
    for key, line in zip(HEARD_KEYS, lines[:-1], strict=True):
        name, eq, value = line.partition("=")
        if name != key or not eq:
            return None
        values.append(value)
    try:
        until = int(values[4])
    except ValueError:
        return None
    return values[0], values[1], values[2], values[3], until


def load_heard(dledger_dir: str) -> Heard | None:
    """The member's `HEARD_FILE` (:func:`decode_heard`); None when it is missing or unreadable."""
    try:
        with open(os.path.join(dledger_dir, HEARD_FILE), "rb") as f:
            return decode_heard(f.read(1 << 16))  # (far more than any record: one read)
    except OSError:
        return None


def keep_heard(dledger_dir: str, record: bytes) -> None:
    """`record` (:func:`encode_heard`) written over the member's `HEARD_FILE`, in place and not synced: the
    file counts only within the boot that wrote it, and what a process wrote survives its crash (kill -9)
    in the page cache; only a crash of the host loses it, which is a reboot. Written in place, a full disk
    cannot refuse it once the file exists, but on a copy-on-write filesystem (btrfs, ZFS), where every
    rewrite takes new blocks. It blocks on the disk at times (dirty-page throttling, a hung device): never
    called on the event loop, and an answer waits for it only briefly (the DLedger server's)."""
    fd = os.open(os.path.join(dledger_dir, HEARD_FILE), os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, record, 0)
        if os.fstat(fd).st_size > len(record):
            os.ftruncate(fd, len(record))
    finally:
        os.close(fd)


# ------------------------------------------------------------------------------------ the contract


class RaftLog(Protocol):
    """What the Raft layer needs of a replicated log (``DLedgerStore``'s contract).

    Indexes start at 0 and are contiguous; -1 means "none" (an empty log's ``last_index``, a log that
    committed nothing). ``committed_index`` never exceeds ``last_index`` and never goes back, and
    :meth:`truncate_after` refuses to cut a committed entry.
    """

    #: Whether a leader keeps its appended entries in memory for pushes that carry them decoded (a JSON
    #: push); its owner clears it while every follower takes binary pushes (slices of the log's files).
    keep_recent: bool

    @property
    def begin_index(self) -> int:
        """The first index still held (-1 when empty)."""
        ...

    @property
    def last_index(self) -> int:
        """The last index held (-1 when empty)."""
        ...

    @property
    def last_term(self) -> int:
        """The term of the last entry (-1 when empty)."""
        ...

    @property
    def committed_index(self) -> int:
        """The highest index known committed by a quorum (-1 when none)."""
        ...

    def term_at(self, index: int) -> int:
        """The term of entry ``index``; raises :class:`DLedgerError` when it is not held."""
        ...

    def append_leader(self, body: bytes, term: int) -> Entry:
        """Append ``body`` as the next entry of ``term`` (index, term and pos assigned here)."""
        ...

    def append_follower(self, entry: Entry) -> Entry:
        """Append a leader's entry: its index must be ``last_index + 1`` and its term not older."""
        ...

    def append_followers(self, entries: list[Entry]) -> None:
        """:meth:`append_follower` for each of ``entries`` in turn (a push's batch); those before a refused
        one stay appended."""
        ...

    def raw_entries(self, first: int, max_count: int, max_bytes: int) -> tuple[int, bytes] | None:
        """(count, bytes) of entries ``first``, ``first + 1``, ... as the data files hold them, back to back:
        at least one, at most ``max_count`` and ``max_bytes`` past the first, all from one data file (a
        binary push); ``None`` when entry ``first`` is not held. Not checked against their ``bodyCrc``."""
        ...

    def append_raw(self, data: bytes) -> tuple[int, int]:
        """:meth:`append_followers` of entries given as a leader's data file holds them (a binary push):
        each checked as a pushed entry is (header, index and term continuity, pos, ``bodyCrc``); those
        held already must be the same bytes. Those before a refused one stay appended. The indexes of the
        first and last entries ``data`` holds (an empty ``data`` is refused)."""
        ...

    def get(self, index: int) -> Entry:
        """Entry ``index``; raises :class:`DLedgerError` when it is not held."""
        ...

    def truncate_after(self, index: int) -> int:
        """Drop every entry after ``index`` from the log (set aside, not deleted); the count cut."""
        ...

    def set_committed(self, index: int) -> None:
        """Advance the committed index (clamped to ``last_index``; never backwards) and persist it."""
        ...

    def flush(self) -> None:
        """Make every appended entry durable."""
        ...


def check_follower_entry(log_: RaftLog, entry: Entry) -> None:
    """``DLedgerMmapFileStore#appendAsFollower``'s index continuity and term order, and (ours) the body
    against the ``bodyCrc`` the leader wrote: damage on the way is refused, never appended."""
    if entry.index != log_.last_index + 1:
        raise DLedgerError(
            DLedgerCode.INCONSISTENT_INDEX, f"entry {entry.index} does not follow {log_.last_index}"
        )
    if entry.term < log_.last_term:
        raise DLedgerError(
            DLedgerCode.INCONSISTENT_TERM,
            f"entry {entry.index} of term {entry.term} after term {log_.last_term}",
        )
    damage = body_crc_problem(entry.index, entry.body_crc, entry.body)
    if damage:
        raise DLedgerError(DLedgerCode.UNEXPECTED_ARGUMENT, f"{damage}: the pushed body is damaged")


def check_truncation(log_: RaftLog, index: int) -> None:
    """Committed entries are never cut: a leader asking for it is wrong, and the data is kept."""
    if index < log_.committed_index:
        raise DLedgerError(
            DLedgerCode.INCONSISTENT_INDEX,
            f"refusing to cut after {index}: entries up to {log_.committed_index} are committed",
        )


def check_held(log_: RaftLog, index: int) -> None:
    """``DLedgerMmapFileStore#indexCheck``."""
    if index < 0 or index > log_.last_index:
        raise DLedgerError(
            DLedgerCode.INDEX_OUT_OF_RANGE, f"{index} not in {log_.begin_index}..{log_.last_index}"
        )
    if index < log_.begin_index:
        raise DLedgerError(
            DLedgerCode.INDEX_LESS_THAN_LOCAL_BEGIN, f"{index} is before the first held {log_.begin_index}"
        )


class MemoryRaftLog:
    """A :class:`RaftLog` in memory (``DLedgerMemoryStore``): for Raft tests and simulations.

    A leader's ``pos`` advances as in the file store without blanks; a follower keeps the leader's. What :meth:`truncate_after` cuts is kept in :attr:`quarantined`.
    """

    def __init__(self) -> None:
        self._entries: list[Entry] = []
        self._committed = -1
        self.quarantined: list[Entry] = []
        self.keep_recent = True  # (all of it is in memory: nothing to keep or not)

    @property
    def begin_index(self) -> int:
        return 0 if self._entries else -1

    @property
    def last_index(self) -> int:
        return len(self._entries) - 1

    @property
    def last_term(self) -> int:
        return self._entries[-1].term if self._entries else -1

    @property
    def committed_index(self) -> int:
        return self._committed

    def _next_pos(self) -> int:
        last = self._entries[-1] if self._entries else None
        return last.pos + last.size if last else 0

    def term_at(self, index: int) -> int:
        return self.get(index).term

    def append_leader(self, body: bytes, term: int) -> Entry:
        if term < self.last_term:
            raise DLedgerError(DLedgerCode.INCONSISTENT_TERM, f"term {term} after term {self.last_term}")
        entry = Entry(self.last_index + 1, term, bytes(body), self._next_pos(), body_crc=entry_body_crc(body))
        self._entries.append(entry)
        return entry

    def append_follower(self, entry: Entry) -> Entry:
        check_follower_entry(self, entry)
        placed = entry if entry.pos >= 0 else entry.at(self._next_pos())
        self._entries.append(placed)
        return placed

    def append_followers(self, entries: list[Entry]) -> None:
        for entry in entries:
            self.append_follower(entry)

    def raw_entries(self, first: int, max_count: int, max_bytes: int) -> tuple[int, bytes] | None:
        if not self.begin_index <= first <= self.last_index:
            return None
        out = [encode_entry(self._entries[first])]
        size = 0
        for entry in self._entries[first + 1 : first + max_count]:
            size += entry.size
            if size > max_bytes:
                break
            out.append(encode_entry(entry))
        return len(out), b"".join(out)

    def append_raw(self, data: bytes) -> tuple[int, int]:
        first = raw_header(data, 0)[2]
        off = last = 0
        while off < len(data):
            raw_header(data, off)
            entry = decode_entry(data, off)
            if entry.index <= self.last_index:
                if entry.index < 0 or encode_entry(self.get(entry.index)) != data[off : off + entry.size]:
                    raise DLedgerError(
                        DLedgerCode.INCONSISTENT_INDEX, f"entry {entry.index} differs from the one held"
                    )
            else:
                if entry.pos != self._next_pos():
                    raise DLedgerError(
                        DLedgerCode.DISK_ERROR,
                        f"entry {entry.index}: leader pos {entry.pos} != {self._next_pos()}",
                    )
                self.append_follower(entry)
            off += entry.size
            last = entry.index
        return first, last

    def get(self, index: int) -> Entry:
        check_held(self, index)
        return self._entries[index]

    def truncate_after(self, index: int) -> int:
        check_truncation(self, index)
        cut = self._entries[index + 1 :]
        if cut:
            log.error(
                "DLedger log: entries %d..%d set aside in quarantine (not served)",
                cut[0].index,
                cut[-1].index,
            )
        self.quarantined.extend(cut)
        del self._entries[index + 1 :]
        return len(cut)

    def set_committed(self, index: int) -> None:
        self._committed = max(self._committed, min(index, self.last_index))

    def flush(self) -> None:
        return None
