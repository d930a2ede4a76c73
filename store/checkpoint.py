"""The ``checkpoint`` file: three big-endian longs at the start of a 4 KiB file
(docs/store-format.md §checkpoint), and our recovery point further into the page.

The recovery point (an mqctl extension at byte 64, which RocketMQ 4.x ignores and 5.x does not use: its fields
end at byte 40) is the CommitLog offset up to which every record was on disk *and* dispatched into
ConsumeQueue units and index entries that were on disk too when the checkpoint was written, with the active
index file's header as it was then. Abnormal recovery re-dispatches from that offset instead of from the start
of a 1 GiB CommitLog file (RocketMQ's file-granular rule, docs/store-format.md §abnormal-recovery), and keeps
the active index file instead of deleting it for being newer than ``indexMsgTimestamp``.

The replica mark (another mqctl extension, at byte 160) is the CommitLog offset up to which the store is
known to hold its master's records (docs/replication.md §the-replica-mark): a slave that cannot reach its master
serves nothing past it. It is written in the same ``pwrite`` of the first sector as the longs it is checked
against, never past what the CommitLog had flushed before, so neither a killed process nor a power loss
leaves a mark that claims more than the log holds. The master's incarnation its records were last copied from
has a slot of its own after it (at byte 200), which an mqctl that knows the mark and not incarnations keeps as
it read it.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import time
import zlib
from dataclasses import dataclass

from store.durability import sync_directory, write_durably

log = logging.getLogger(__name__)

CHECKPOINT_FILE_SIZE = 4096
_LAYOUT = struct.Struct(">qqq")
RECOVERY_POINT_AT = 64
_RECOVERY_MAGIC = b"mqctlRP2"
# magic, offset, index file name (its 17 digits as a number; 0: none), begin/end timestamp, begin/end
# physical offset, hash slot count, index count; then the CRC32 of the three longs at byte 0 and all that:
# a RocketMQ broker that ran on the store since rewrote those longs and so voids the point (it knows
# nothing of what that broker wrote, nor of a recovery of its that cut below it)
_RECOVERY = struct.Struct(">8sqqqqqqii")
_CRC = struct.Struct(">I")
REPLICA_MARK_AT = 160
_MARK_MAGIC = b"mqctlRM1"
# magic, offset; then the CRC32 of the three longs at byte 0 and both: a broker that does not know the mark
# and rewrote the longs since (a 4.9.8 one) voids it, for it may have written records of its own past it
_MARK = struct.Struct(">8sq")
_OWNED_MAGIC = b"mqctlRM2"
# the same with the CRC32 of the broker name whose master's records the mark counts, after the offset
_OWNED = struct.Struct(">8sqI")
_MASTERED_MAGIC = b"mqctlRM3"
# the same with the identity of the master's store whose records the mark counts, after the name's CRC32
_MASTERED = struct.Struct(">8sqI16s")
_INCARNATED_MAGIC = b"mqctlRM4"
# read, never written: the same with the master's incarnation it copied from last after the identity
# (docs/replication.md §incarnations). An mqctl that knows RM3 and not this read it as no mark at all (a
# slave's whole log taken as its master's), and wrote RM3 over it: the incarnation now has a slot of its own
_INCARNATED = struct.Struct(">8sqI16s16s")
_LAYOUTS = {
    _MARK_MAGIC: _MARK,
    _OWNED_MAGIC: _OWNED,
    _MASTERED_MAGIC: _MASTERED,
    _INCARNATED_MAGIC: _INCARNATED,
}
#: A store's identity (see :func:`store_identity`): the file in its root directory, and its size in bytes.
IDENTITY_FILE = "identity"
IDENTITY_SIZE = 16
#: The master's incarnation an RM3 mark's records were last copied from, in a slot of its own right after
#: the mark (docs/replication.md §the-replica-mark): an mqctl that writes RM3 and knows no incarnation
#: never writes there and keeps what it read, so its RM3 keeps the mark's meaning for it.
INCARNATION_AT = REPLICA_MARK_AT + _MASTERED.size + _CRC.size
_SLOT_MAGIC = b"mqctlRI1"
# magic, incarnation, the master's next one then (zeros: none); then the CRC32 of the three longs, the RM3
# mark's bytes and those: a mark an older mqctl wrote since (a rollback, then forward again) leaves a slot
# that no longer matches it
_SLOT = struct.Struct(">8s16s16s")
_SLOT_SIZE = _SLOT.size + _CRC.size
#: The incarnation a mark names when the one its records were copied from cannot be proven (an mqctl that
#: does not keep it wrote the mark since): in no master's history, so it vouches for nothing.
UNPROVEN_INCARNATION = bytes(IDENTITY_SIZE)
#: The master's next incarnation a mark names when it cannot be told (an RM4 mark: that mqctl named the
#: newest incarnation begun, which a master that begins its next at its first write had not begun yet):
#: the run of the master its records were copied from is unknown, and a promoted master's mark vouches for
#: none of them (docs/replication.md §the-replica-mark).
UNKNOWN_FOLLOWING = b"\xff" * IDENTITY_SIZE
#: A store's incarnations as a master (see :func:`begin_incarnation`): the file beside the identity.
INCARNATIONS_FILE = "incarnations"
#: A slave's copy of its master's incarnations at its last check: the master's store identity (hex) on the
#: first line, then its history as in :data:`INCARNATIONS_FILE`.
REPLICA_INCARNATIONS_FILE = "replica-incarnations"
#: The most incarnations a store keeps (the newest): a slave whose mark names an older one vouches for
#: nothing, and sets aside rather than deletes.
INCARNATIONS_KEPT = 64
#: The most copies kept of an incarnations file that did not parse (the newest): each is what an operator
#: looks at to learn what damaged it, and the file itself is written again at the store's next change.
DAMAGED_KEPT = 3
#: What one write covers: the longs, RocketMQ 5.x's fields after them (kept as read), the recovery point and
#: the replica mark, all in the first sector, which a disk writes whole.
_PAGE = 256


@dataclass(frozen=True, slots=True)
class IndexSnapshot:
    """The active index file's header at a checkpoint: entries below ``index_count`` were on disk."""

    name: str
    begin_timestamp: int
    end_timestamp: int
    begin_phy_offset: int
    end_phy_offset: int
    hash_slot_count: int
    index_count: int


@dataclass(frozen=True, slots=True)
class RecoveryPoint:
    """Where abnormal recovery can start (see the module): a record boundary in the CommitLog."""

    offset: int
    index: IndexSnapshot | None


def _encode_recovery(point: RecoveryPoint, header: bytes) -> bytes:
    idx = point.index
    fields = _RECOVERY.pack(
        _RECOVERY_MAGIC,
        point.offset,
        int(idx.name) if idx else 0,
        idx.begin_timestamp if idx else 0,
        idx.end_timestamp if idx else 0,
        idx.begin_phy_offset if idx else 0,
        idx.end_phy_offset if idx else 0,
        idx.hash_slot_count if idx else 0,
        idx.index_count if idx else 0,
    )
    return fields + _CRC.pack(zlib.crc32(header + fields))


def _decode_recovery(data: bytes, header: bytes) -> RecoveryPoint | None:
    """The recovery point, None when absent (older stores, RocketMQ), damaged, or written before
    ``header`` (the three longs) last changed."""
    if len(data) < _RECOVERY.size + _CRC.size:
        return None
    fields = data[: _RECOVERY.size]
    if _CRC.unpack_from(data, _RECOVERY.size)[0] != zlib.crc32(header + fields):
        return None
    magic, offset, name, bts, ets, bphy, ephy, slots, count = _RECOVERY.unpack(fields)
    if magic != _RECOVERY_MAGIC or offset < 0:
        return None
    index = IndexSnapshot(f"{name:017d}", bts, ets, bphy, ephy, slots, count) if name else None
    return RecoveryPoint(offset, index)


def _encode_mark(offset: int, owner: int | None, master: bytes, header: bytes) -> bytes:
    if owner is None:
        fields = _MARK.pack(_MARK_MAGIC, offset)
    elif master:
        fields = _MASTERED.pack(_MASTERED_MAGIC, offset, owner, master)
    else:
        fields = _OWNED.pack(_OWNED_MAGIC, offset, owner)
    return fields + _CRC.pack(zlib.crc32(header + fields))


def _encode_slot(incarnation: bytes, following: bytes, header: bytes, mark: bytes) -> bytes:
    """The incarnation slot of an RM3 ``mark`` (its bytes as written); zeros, read as none, without one."""
    if not (incarnation and mark[:8] == _MASTERED_MAGIC):
        return bytes(_SLOT_SIZE)
    fields = _SLOT.pack(_SLOT_MAGIC, incarnation, following or bytes(IDENTITY_SIZE))
    return fields + _CRC.pack(zlib.crc32(header + mark + fields))


def _decode_slot(data: bytes, header: bytes, mark: bytes) -> tuple[bytes, bytes]:
    """The incarnation of the RM3 ``mark`` and the master's next one then: none (empty) when the slot is
    zeros (a mark from before incarnations, or written against a master that shows none);
    :data:`UNPROVEN_INCARNATION` when an mqctl that does not keep it wrote the mark since (the slot's CRC no
    longer matches it, or the rest of an RM4 lies under the RM3 written over it)."""
    slot = bytes(data[:_SLOT_SIZE]).ljust(_SLOT_SIZE, b"\0")  # (a file that ends before it: never written)
    if not any(slot):
        return b"", b""
    magic, incarnation, following = _SLOT.unpack_from(slot)
    if magic != _SLOT_MAGIC or _CRC.unpack_from(slot, _SLOT.size)[0] != zlib.crc32(
        header + mark + slot[: _SLOT.size]
    ):
        return UNPROVEN_INCARNATION, b""
    return bytes(incarnation), bytes(following) if any(following) else b""


@dataclass(frozen=True, slots=True)
class _Mark:
    offset: int | None
    owner: int | None
    master: bytes
    found: bool
    incarnation: bytes = b""
    following: bytes = b""


def _decode_mark(data: bytes, header: bytes) -> _Mark:
    """The replica mark, its owner (the CRC32 of its broker name; None: not named), the identity of the
    master's store it counts (empty: not known) with the incarnation it last copied from (see
    :func:`_decode_slot`), and whether one was there: no offset and not found when
    absent (a store from before it, or RocketMQ's), no offset and found when void (damaged, or the longs
    were rewritten since it was)."""
    layout = _LAYOUTS.get(bytes(data[:8]))
    if layout is None or len(data) < layout.size + _CRC.size:
        return _Mark(None, None, b"", False)
    fields = data[: layout.size]
    values = layout.unpack(fields)
    if _CRC.unpack_from(data, layout.size)[0] != zlib.crc32(header + fields) or values[1] < 0:
        return _Mark(None, None, b"", True)
    owner = values[2] if len(values) > 2 else None
    master = values[3] if len(values) > 3 else b""
    following = b""
    if layout is _MASTERED:
        end = layout.size + _CRC.size
        incarnation, following = _decode_slot(
            data[INCARNATION_AT - REPLICA_MARK_AT :], header, bytes(data[:end])
        )
    else:
        incarnation = values[4] if len(values) > 4 else b""
        following = UNKNOWN_FOLLOWING if incarnation else b""
    return _Mark(values[1], owner, master, True, incarnation, following)


def store_identity(root: str, *, create: bool, renew: bool = False) -> bytes:
    """This store's identity: random bytes made once, kept in ``root``'s :data:`IDENTITY_FILE` (empty when
    there is none and ``create`` is off). A slave's replica mark names the identity of the master's store
    whose records it counts, so a slave switched to another master of its broker name (another store)
    does not take its old master's records for the new one's (docs/replication.md §the-replica-mark).
    ``renew``: a new one, the store's log having begun again (its old records no longer its word)."""
    path = os.path.join(root, IDENTITY_FILE)
    if not renew:
        try:
            with open(path, "rb") as f:
                data = f.read(IDENTITY_SIZE + 1)
            if len(data) == IDENTITY_SIZE:
                return data
        except FileNotFoundError:
            pass
    if not create:
        return b""
    # a file that is not one (torn by a crash while made: never used yet) is made again
    identity = os.urandom(IDENTITY_SIZE)
    write_durably(path, identity)
    if renew:  # the old identity's incarnations vouch for nothing of the new one's
        _write_incarnations(root, [])
    return identity


@dataclass(frozen=True, slots=True)
class Incarnation:
    """One start of a store as a master: a random id, and the CommitLog offset its log ended at then (where
    its own records begin). It ends where the next one in the store's history begins."""

    id: bytes
    start: int

    def __str__(self) -> str:
        return f"{self.id.hex()}@{self.start}"


def read_incarnations(root: str, *, keep_damaged: bool = False) -> list[Incarnation]:
    """The store's incarnations as a master, oldest first (none: a store that never started as one since it
    was made, or one from before them). Lines of ``ID@START``; a file that does not parse reads as none, at
    ERROR: a master then vouches for none of its slaves' records below its first offset (they are set aside,
    not deleted) and begins a new history at its start. ``keep_damaged`` (a store that writes it): such a
    file is copied beside it first (:func:`_keep_damaged`), as the store's next change writes it again."""
    path = os.path.join(root, INCARNATIONS_FILE)
    try:
        parsed = _parsed(path, with_identity=False)
    except FileNotFoundError:
        return []
    if parsed is None:
        copy = _keep_damaged(path) if keep_damaged else ""
        log.error(
            "%s does not parse%s: read as no incarnations; a master on this store vouches for none of its "
            "slaves' records below its first offset (set aside, not deleted) and begins a new history",
            path,
            f" (kept as {copy})" if copy else "",
        )
        return []
    return parsed[1]


def _parsed(path: str, *, with_identity: bool) -> tuple[str, list[Incarnation]] | None:
    """An incarnations file's history, after the master's store identity on its first line
    (``with_identity``: a slave's copy of its master's); None when it does not parse. Raises OSError
    (FileNotFoundError: there is none)."""
    with open(path, "rb") as f:
        raw = f.read()
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        return None
    identity = ""
    if with_identity:
        identity, _, text = text.partition("\n")
        try:
            if len(bytes.fromhex(identity)) != IDENTITY_SIZE:
                return None
        except ValueError:
            return None
    history = _parse_incarnations(text.replace("\n", ";"))
    return None if history is None else (identity, history)


def _keep_damaged(path: str) -> str:
    """Copy ``path``, a file that does not parse, beside it as ``NAME.damaged-<UTC>`` before it is written
    again: read as none, it is replaced at the store's next change, and what damaged it (a torn block, a
    hand's edit) could no longer be looked into. A copy of the same bytes kept already is named instead, and
    only the newest :data:`DAMAGED_KEPT` are kept, the one just made always among them: older by their
    mtimes, not their names (a clock stepped back, or a store from a host whose clock was ahead, dates
    the older ones later). Returns the copy's path ("" when none could be made: at ERROR, the file is
    written all the same, as the store's change needs it)."""
    root, name = os.path.split(path)
    prefix = f"{name}.damaged-"
    try:
        with open(path, "rb") as f:
            data = f.read()
        kept = [os.path.join(root, entry) for entry in os.listdir(root) if entry.startswith(prefix)]
        for old in kept:
            if os.path.getsize(old) == len(data):
                with open(old, "rb") as f:
                    if f.read() == data:
                        return old
        now = time.time()
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now)) + f".{int(now * 1000) % 1000:03d}Z"
        copy, n = os.path.join(root, prefix + stamp), 1
        while os.path.exists(copy):
            n += 1
            copy = os.path.join(root, f"{prefix}{stamp}-{n}")
        write_durably(copy, data, tmp=f"{path}.damaged.tmp")
    except OSError as exc:
        log.error("%s does not parse and no copy of it could be kept beside it: %s", path, exc)
        return ""
    try:
        kept.sort(key=lambda old: (os.stat(old).st_mtime_ns, old))
        for old in kept[: max(len(kept) + 1 - DAMAGED_KEPT, 0)]:
            os.unlink(old)
    except OSError as exc:  # (the copy is made and durable: only more copies than the newest few stay)
        log.warning("older copies of %s beside it could not be deleted: %s", path, exc)
    return copy


@dataclass(frozen=True)
class DamagedCopy:
    """A copy :func:`_keep_damaged` kept beside the store: its name, size and when it was made (epoch ms)."""

    name: str
    size: int
    mtime_ms: int


def damaged_copies(root: str) -> list[DamagedCopy]:
    """The copies kept beside the store of its incarnations files that did not parse, oldest first: each
    one means such a file was found damaged (and has been written again since)."""
    prefixes = tuple(f"{name}.damaged-" for name in (INCARNATIONS_FILE, REPLICA_INCARNATIONS_FILE))
    try:
        names = [entry for entry in os.listdir(root) if entry.startswith(prefixes)]
    except OSError:
        return []
    found = []
    for name in names:
        try:
            st = os.stat(os.path.join(root, name))
        except OSError:  # deleted since it was listed
            continue
        found.append(DamagedCopy(name, st.st_size, st.st_mtime_ns // 1_000_000))
    return sorted(found, key=lambda c: (c.mtime_ms, c.name))


def parse_incarnations(text: str) -> list[Incarnation]:
    """``ID@START`` joined by ``;`` (as a master shows them, ``haIncarnations``), oldest first; none when an
    item does not parse."""
    return _parse_incarnations(text) or []


def _parse_incarnations(text: str) -> list[Incarnation] | None:
    """See :func:`parse_incarnations`; None when an item does not parse. Not the items before it: the last of
    them would end at a later start than the dropped one's (a log cut or back shorter), and vouch for more."""
    out: list[Incarnation] = []
    for item in filter(None, text.split(";")):
        ident, _, start = item.strip().partition("@")
        try:
            raw = bytes.fromhex(ident)
        except ValueError:
            return None
        if len(raw) != IDENTITY_SIZE or not (start.isascii() and start.isdigit()) or len(start) > 19:
            return None
        # a start below an earlier one is kept: a log cut, or recovered shorter than it was (a power loss
        # after a restart), ends every earlier incarnation there (see the slave's `_incarnation_end`)
        out.append(Incarnation(raw, int(start)))
    return out


def incarnation_end(history: list[Incarnation], index: int) -> int | None:
    """Where ``history[index]`` ended: the earliest start of those after it (a later one that begins lower,
    a log cut or recovered shorter, ends it there too), None for the newest, which has not ended."""
    later = history[index + 1 :]
    return min(h.start for h in later) if later else None


def _write_incarnations(
    root: str, history: list[Incarnation], name: str = INCARNATIONS_FILE, head: str = ""
) -> None:
    path = os.path.join(root, name)
    try:
        damaged = _parsed(path, with_identity=bool(head)) is None
    except OSError:  # (none, or not readable: nothing to keep)
        damaged = False
    if damaged:
        copy = _keep_damaged(path)
        if copy:
            log.warning("%s did not parse: kept as %s before it is written again", path, copy)
    write_durably(path, (head + "".join(f"{i}\n" for i in history)).encode("ascii"))


def keep_master_history(root: str, identity: str, history: list[Incarnation]) -> None:
    """A slave keeps its master's incarnations as its check read them (:data:`REPLICA_INCARNATIONS_FILE`):
    a master that no longer holds the one its mark names (a restore, a copy) may still hold an earlier one,
    up to whose end the slave's records are its own (docs/replication.md §incarnations)."""
    _write_incarnations(root, history, REPLICA_INCARNATIONS_FILE, f"{identity}\n")


def master_history(root: str) -> tuple[str, list[Incarnation]]:
    """What :func:`keep_master_history` kept: the master's store identity (hex) and its history; ("", [])
    when there is none, or (at WARNING) it cannot be read or does not parse: it only ever vouches for
    records its mark's incarnation alone would not, so without it the slave vouches for less. One that does
    not parse is copied beside it first (:func:`_keep_damaged`): the slave's next check writes it again."""
    path = os.path.join(root, REPLICA_INCARNATIONS_FILE)
    try:
        parsed = _parsed(path, with_identity=True)
        if parsed is not None:
            return parsed
        copy = _keep_damaged(path)
        problem = f"does not parse{f' (kept as {copy})' if copy else ''}"
    except FileNotFoundError:
        return "", []
    except OSError as exc:
        problem = f"cannot be read ({exc})"
    log.warning(
        "%s %s: this slave's copy of its master's incarnations vouches for none of its records below the "
        "master's first offset (set aside, not deleted) until its next check keeps it again",
        path,
        problem,
    )
    return "", []


def begin_incarnation(root: str, start: int, ident: bytes = b"") -> list[Incarnation]:
    """A store begins a new incarnation at ``start`` (its log's end), ``ident`` (random when empty: the id it
    announced as its next, see :attr:`StoreCheckpoint.replica_following`): appended to its history, on disk
    before its log changes. A slave's mark names the incarnation it copied from; a store restored from an
    older copy, or copied to seed another broker, keeps the identity but not the history written since, so
    no slave takes records of an incarnation it lacks for its own. Returns the history."""
    history = read_incarnations(root, keep_damaged=True)
    if not (ident and history and history[-1].id == ident):  # (on disk already: its directory's sync failed)
        history = [*history, Incarnation(ident or os.urandom(IDENTITY_SIZE), start)][-INCARNATIONS_KEPT:]
    _write_incarnations(root, history)
    return history


class StoreCheckpoint:
    """Timestamps recovery uses to pick where abnormal recovery starts
    (docs/store-format.md §abnormal-recovery), and our recovery point.

    RocketMQ maps the page; writing it with ``pwrite`` + ``fdatasync`` gives the same bytes and
    releases the GIL during the disk wait (the flush can happen on the put path when an index file
    fills up).
    """

    def __init__(self, path: str, *, read_only: bool = False) -> None:
        self.path = path
        self.read_only = read_only
        self.physic_msg_timestamp = 0
        self.logics_msg_timestamp = 0
        self.index_msg_timestamp = 0
        self.recovery_point: RecoveryPoint | None = None
        #: The replica mark (see the module); None: none to write, or none read (see ``replica_mark_found``).
        self.replica_mark: int | None = None
        #: Whether the file held a mark when read, valid or void.
        self.replica_mark_found = False
        #: The CRC32 of the broker name whose master's records the mark counts (None: not named).
        self.replica_owner: int | None = None
        #: The identity of the master's store whose records the mark counts (empty: not known).
        self.replica_master = b""
        #: The master's incarnation the mark's records were last copied from (empty: not known), and the one
        #: it was to begin at its next change then (empty: none).
        self.replica_incarnation = b""
        self.replica_following = b""
        self._fd: int | None = None
        self._page = bytearray(_PAGE)
        self._lock = threading.Lock()  # one composer of the page at a time: its fields agree with each other
        if read_only and not os.path.exists(path):
            return
        fd = os.open(path, os.O_RDONLY if read_only else os.O_RDWR | os.O_CREAT, 0o644)
        page = os.pread(fd, _PAGE, 0)
        self._page[: len(page)] = page
        data = page[: _LAYOUT.size]
        self.recovery_point = _decode_recovery(page[RECOVERY_POINT_AT:], data)
        mark = _decode_mark(page[REPLICA_MARK_AT:], data)
        self.replica_mark, self.replica_owner, self.replica_master = mark.offset, mark.owner, mark.master
        self.replica_mark_found = mark.found
        self.replica_incarnation = mark.incarnation if mark.master else b""
        self.replica_following = mark.following if mark.master else b""
        if read_only:
            os.close(fd)
        else:
            if os.fstat(fd).st_size < CHECKPOINT_FILE_SIZE:
                os.posix_fallocate(fd, 0, CHECKPOINT_FILE_SIZE)  # allocated: a full disk cannot fail a flush
                os.fsync(fd)
                sync_directory(os.path.dirname(os.path.abspath(path)))
            self._fd = fd
        if len(data) == _LAYOUT.size:
            self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp = _LAYOUT.unpack(
                data
            )

    def flush(self) -> None:
        """Write the fields (and the recovery point and replica mark, those there are) and force them to
        disk."""
        self.write()
        self.sync()

    def write(self) -> None:
        """The fields, in one ``pwrite`` of the first sector (to the page cache: :meth:`sync` forces it)."""
        fd = self._fd
        if fd is None:
            return
        with self._lock:
            page = self._page
            header = _LAYOUT.pack(
                self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp
            )
            page[: _LAYOUT.size] = header
            point = self.recovery_point
            if point is not None:
                recovery = _encode_recovery(point, header)
                page[RECOVERY_POINT_AT : RECOVERY_POINT_AT + len(recovery)] = recovery
            if self.replica_mark is not None:
                mark = _encode_mark(self.replica_mark, self.replica_owner, self.replica_master, header)
                page[REPLICA_MARK_AT : REPLICA_MARK_AT + len(mark)] = mark
                slot = _encode_slot(self.replica_incarnation, self.replica_following, header, mark)
                page[INCARNATION_AT : INCARNATION_AT + len(slot)] = slot
            os.pwrite(fd, page, 0)

    def sync(self) -> None:
        if self._fd is not None:
            os.fdatasync(self._fd)

    def recovery_limit(self, *, index_safe: bool) -> int:
        """Newest store timestamp abnormal recovery may trust: min of the fields minus 3 s
        (docs/store-format.md §abnormal-recovery)."""
        limit = min(self.physic_msg_timestamp, self.logics_msg_timestamp) - 3000
        if index_safe:
            limit = min(limit, self.index_msg_timestamp)
        return max(limit, 0)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
