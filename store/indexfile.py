"""IndexFile: hash index from ``topic#key`` to CommitLog offsets (docs/store-format.md §indexfile), and the
service over all files."""

from __future__ import annotations

import array
import contextlib
import logging
import mmap
import os
import struct
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Final

from store.checkpoint import IndexSnapshot
from store.durability import make_dirs
from store.javahash import index_key_hash
from store.mapped_file import FileMapping
from store.message import KEY_SEPARATOR, PROPERTY_KEYS, PROPERTY_UNIQ_KEY

log = logging.getLogger(__name__)

# Final: compiled code reads these as constants, not from the module's dict (every put_keys reads 7)
INDEX_HEADER_SIZE: Final = 40
HASH_SLOT_SIZE: Final = 4
INDEX_ENTRY_SIZE: Final = 20
HEADER: Final = struct.Struct(">qqqqii")  # begin ts, end ts, begin phy, end phy, hashSlotCount, indexCount
ENTRY: Final = struct.Struct(">iqii")  # keyHash, phyOffset, timeDiff (s), prevIndex
SLOT: Final = struct.Struct(">i")
_MAX_DIFF: Final = 0x7FFFFFFF
_c_index_entry: Callable[[mmap.mmap, int, int, int, int, int, int], int | None] | None
try:  # the compiled build's write of an entry and its slot (_cparse.c); struct's packs without it
    from store import _cparse

    _c_index_entry = _cparse.index_entry
except ImportError:
    _c_index_entry = None

#: The page size the hash slots are mapped in where the kernel maps file pages huge (a PMD's on x86-64 and
#: arm64 with 4 KiB pages): the slots in whole such pages from the file's start are advised huge.
HUGE_PAGE: Final = 2 << 20

#: Entries whose blocks are reserved at a time, and kept reserved ahead of the writer by the put path
#: (:meth:`IndexService.reserve`), so a full disk refuses the put before its record is appended.
ENTRIES_CHUNK = 1024


def index_keys(topic: str, properties: dict[str, str]) -> list[str]:
    """The index keys of a record (docs/store-format.md §index-keys-and-hash): ``topic#UNIQ_KEY`` first, then
    ``topic#key`` per KEYS entry."""
    return record_keys(topic, properties.get(PROPERTY_UNIQ_KEY), properties.get(PROPERTY_KEYS))


def record_keys(topic: str, uniq: str | None, keys_prop: str | None) -> list[str]:
    """:func:`index_keys` of a record whose ``UNIQ_KEY`` and ``KEYS`` properties are these."""
    keys = [f"{topic}#{uniq}"] if uniq else []
    if keys_prop:
        keys.extend(f"{topic}#{k}" for k in keys_prop.split(KEY_SEPARATOR) if k)
    return keys


def has_index_keys(properties: dict[str, str]) -> bool:
    """Whether :func:`index_keys` would return any key (cheaper: no list, no split)."""
    return bool(properties.get(PROPERTY_UNIQ_KEY) or properties.get(PROPERTY_KEYS))


def index_file_size(hash_slot_num: int, index_num: int) -> int:
    return INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE + index_num * INDEX_ENTRY_SIZE


def index_file_name(now_ms: int) -> str:
    """``yyyyMMddHHmmssSSS`` in local time, as the broker names index files
    (docs/store-format.md §file-names-and-sizes)."""
    return time.strftime("%Y%m%d%H%M%S", time.localtime(now_ms // 1000)) + f"{now_ms % 1000:03d}"


class IndexFile:
    """One index file. Header fields live in attributes (queries use those) and are copied into the
    mapping periodically, when the file fills up and at shutdown.

    A new file has its header and hash slots (written anywhere) allocated before it is mapped, its
    entries (written in order) a chunk at a time: the default file is 420 MB of which the slots are 20.
    """

    def __init__(
        self,
        path: str,
        hash_slot_num: int,
        index_num: int,
        *,
        read_only: bool = False,
        sync_dirs: Sequence[str] = (),
    ) -> None:
        self.path = path
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.read_only = read_only
        self._entries_base = INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE
        existed = read_only or os.path.exists(path)
        self.file = FileMapping(
            path,
            index_file_size(hash_slot_num, index_num),
            read_only=read_only,
            random_access=True,  # hashed slots
            reserve=self._entries_base + ENTRIES_CHUNK * INDEX_ENTRY_SIZE,
            sync_dirs=sync_dirs,
        )
        self.mm = self.file.mm
        if not read_only:
            self._advise_huge_slots()
        # typed: read from the mapping the fields would be Any, and every put's arithmetic on them generic
        header: tuple[int, int, int, int, int, int] = HEADER.unpack_from(self.mm, 0)
        (
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        ) = header
        if self.index_count <= 0:
            self.index_count = 1
        # Entries below this one have their blocks allocated (a file re-opened: from its next entry on).
        self._reserved_entries = self.index_count if existed else ENTRIES_CHUNK

    def _advise_huge_slots(self) -> None:
        """Ask for the hash slots to be mapped in huge pages (``MADV_HUGEPAGE``: the kernel then caches and
        maps them a huge page at a time where its file systems allow, ext4 among them; elsewhere it is a
        no-op). A key's slot is its hash's, and ``topic#key``'s Java hash is the topic's times a power of 31
        plus the key's: one topic's keys made in turn land in neighbouring slots, but keys of topics sent
        to in turn land anywhere in the table, each send on a 4 KiB page of its own: a TLB miss, and after
        each writeback of the table (the kernel write-protects a page it wrote back) a write fault per
        page. In huge pages the table is a handful of TLB entries and a writeback costs a handful of
        faults. Only whole huge pages from the file's start, which hold slots alone (allocated when the
        file is made here: no store into them meets a hole); the entries, written in order, keep small
        pages.
        The bytes are the same: only how the kernel maps them changes."""
        end = self._entries_base // HUGE_PAGE * HUGE_PAGE
        if end and hasattr(mmap, "MADV_HUGEPAGE"):
            with contextlib.suppress(OSError):  # a kernel without transparent huge pages refuses it
                self.mm.madvise(mmap.MADV_HUGEPAGE, 0, end)

    def reserve_entries(self, count: int) -> None:
        """Allocate the blocks of entries up to ``count`` (whole chunks); ``OSError`` when the disk is full."""
        count = min(count, self.index_num)
        if count <= self._reserved_entries or self.read_only:
            return
        end = -(-count // ENTRIES_CHUNK) * ENTRIES_CHUNK
        end = min(end, self.index_num)
        start = self._entries_base + self._reserved_entries * INDEX_ENTRY_SIZE
        self.file.fallocate(start, self._entries_base + end * INDEX_ENTRY_SIZE - start)
        self._reserved_entries = end

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    @property
    def is_full(self) -> bool:
        return self.index_count >= self.index_num

    def write_header(self) -> None:
        HEADER.pack_into(
            self.mm,
            0,
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        )

    def snapshot(self) -> IndexSnapshot:
        return IndexSnapshot(
            self.name,
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        )

    def restore(self, snap: IndexSnapshot) -> None:
        """Go back to the header of a checkpoint (after a crash): later entries may not have reached the
        disk, re-dispatch from the checkpoint's offset writes them again (see :meth:`put_keys`)."""
        self.begin_timestamp, self.end_timestamp = snap.begin_timestamp, snap.end_timestamp
        self.begin_phy_offset, self.end_phy_offset = snap.begin_phy_offset, snap.end_phy_offset
        self.hash_slot_count, self.index_count = snap.hash_slot_count, max(snap.index_count, 1)
        self._reserved_entries = min(self._reserved_entries, self.index_count)
        self._relink_slots(self.index_count)
        self.write_header()

    def _relink_slots(self, n: int) -> None:
        """Point every hash slot that points at entry ``n`` or later (written after the checkpoint) at its
        newest entry below ``n``. A query stops at a slot past ``indexCount``, so a slot whose later key
        is not dispatched again (its record was set aside or torn) would hide the slot's older keys; and
        where a later entry never reached the disk the chain is found by scanning the entries below."""
        table = array.array("i", self.mm[INDEX_HEADER_SIZE : self._entries_base])
        if sys.byteorder == "little":
            table.byteswap()
        if not table or max(table) < n:
            return
        torn: set[int] = set()
        for slot, entry in enumerate(table):
            if entry >= n:
                below = self._chain_below(slot, entry, n)
                table[slot] = max(below, 0)
                if below < 0:
                    torn.add(slot)
        slots = self.hash_slot_num
        for entry in range(n - 1, 0, -1):
            if not torn:
                break
            slot = ENTRY.unpack_from(self.mm, self._entries_base + entry * INDEX_ENTRY_SIZE)[0] % slots
            if slot in torn:
                table[slot] = entry
                torn.discard(slot)
        if sys.byteorder == "little":
            table.byteswap()
        self.mm[INDEX_HEADER_SIZE : self._entries_base] = table.tobytes()

    def _chain_below(self, slot: int, entry: int, n: int) -> int:
        """The newest entry below ``n`` of a hash slot that points at ``entry`` >= ``n``: a slot updated after
        the checkpoint the header was restored to. Follows the chain through those later entries while they
        are intact (written before the crash); -1 when one is not (it never reached the disk)."""
        mm = self.mm
        slots = self.hash_slot_num
        while entry >= n:
            if entry >= self.index_num:
                return -1
            kh, phy, diff, prev = ENTRY.unpack_from(mm, self._entries_base + entry * INDEX_ENTRY_SIZE)
            if kh % slots != slot or not 0 <= prev < entry or kh == phy == diff == prev == 0:
                return -1  # (all zeros: a page that never reached the disk, not slot 0's chain end)
            entry = prev
        return entry

    def put_key(self, key: str, phy_offset: int, store_timestamp: int) -> bool:
        """Insert one key (docs/store-format.md §index-insert); ``False`` when the file is full. Call
        :meth:`write_header` afterwards."""
        return self.put_keys((key,), phy_offset, store_timestamp) == 1

    def put_keys(self, keys: Sequence[str], phy_offset: int, store_timestamp: int) -> int:
        """Insert keys of one record in order (docs/store-format.md §index-insert); returns how many fit
        before the file filled up."""
        mm = self.mm
        slots = self.hash_slot_num
        base = self._entries_base
        unpack_slot = SLOT.unpack_from
        done = 0
        for key in keys:
            n = self.index_count
            if n >= self.index_num:
                break
            if n >= self._reserved_entries:  # never store into an unallocated page
                self.reserve_entries(n + 1)
            h = index_key_hash(key)
            sp = INDEX_HEADER_SIZE + (h % slots) * HASH_SLOT_SIZE
            begin = self.begin_timestamp
            if begin <= 0:
                diff = 0
            else:
                diff = int((store_timestamp - begin) / 1000)  # Java long division truncates toward zero
                diff = 0 if diff < 0 else _MAX_DIFF if diff > _MAX_DIFF else diff
            at = base + n * INDEX_ENTRY_SIZE
            # (C: the entry and its slot in one call, unless the slot points past the entry: then as below)
            prev = None if _c_index_entry is None else _c_index_entry(mm, at, sp, h, phy_offset, diff, n)
            if prev is None:
                prev = unpack_slot(mm, sp)[0]
                if prev >= n:  # only after restore(): the slot points past the checkpoint
                    prev = max(self._chain_below(h % slots, prev, n), 0)
                elif prev < 0:
                    prev = 0
                ENTRY.pack_into(mm, at, h, phy_offset, diff, prev)
                SLOT.pack_into(mm, sp, n)
            if n <= 1:
                self.begin_phy_offset = phy_offset
                self.begin_timestamp = store_timestamp
            if prev == 0:
                self.hash_slot_count += 1
            self.index_count = n + 1
            done += 1
        if done:
            self.end_phy_offset = phy_offset
            self.end_timestamp = store_timestamp
        return done

    def entries(self) -> Iterator[tuple[int, int, int, int, int]]:
        """``(n, keyHash, phyOffset, timeDiff, prevIndex)`` of each entry the header counts (1..indexCount-1),
        for checks that walk the whole file (``store verify``)."""
        count = min(self.index_count, self.index_num)
        start = self._entries_base + INDEX_ENTRY_SIZE
        for n, entry in enumerate(
            ENTRY.iter_unpack(self.mm[start : start + (count - 1) * INDEX_ENTRY_SIZE]), 1
        ):
            yield (n, *entry)

    def is_time_matched(self, begin: int, end: int) -> bool:
        fb, fe = self.begin_timestamp, self.end_timestamp
        return (begin < fb and end > fe) or fb <= begin <= fe or fb <= end <= fe

    def select_phy_offsets(self, key: str, max_num: int, begin: int, end: int, out: list[int]) -> None:
        """Append to ``out`` the offsets of entries whose hash matches ``key`` within [begin, end]
        (docs/store-format.md §index-query)."""
        if self.index_count <= 1:
            return
        h = index_key_hash(key)
        mm = self.mm
        n = SLOT.unpack_from(mm, INDEX_HEADER_SIZE + (h % self.hash_slot_num) * HASH_SLOT_SIZE)[0]
        count = self.index_count
        if n <= 0 or n > count:
            return
        base_ts = self.begin_timestamp
        while len(out) < max_num:
            kh, phy, diff, prev = ENTRY.unpack_from(mm, self._entries_base + n * INDEX_ENTRY_SIZE)
            if diff < 0:
                break
            time_read = base_ts + diff * 1000
            if kh == h and begin <= time_read <= end:
                out.append(phy)
            if prev <= 0 or prev > count or prev == n or time_read < begin:
                break
            n = prev

    def flush(self) -> None:
        """Write the header and force the file to disk."""
        if not self.read_only:
            self.write_header()
            self.file.sync()

    def close(self) -> None:
        self.file.close()

    def destroy(self) -> None:
        self.file.destroy()


class IndexService:
    """All index files of a store, oldest first; inserts go to the last one, rolling when it is full."""

    def __init__(
        self, directory: str, hash_slot_num: int, index_num: int, *, read_only: bool = False
    ) -> None:
        self.directory = directory
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.read_only = read_only
        self.files: list[IndexFile] = []

    def load(
        self, last_exit_ok: bool, index_msg_timestamp: int, snapshot: IndexSnapshot | None = None
    ) -> None:
        """Map every index file; after a crash drop those newer than the checkpoint
        (docs/store-format.md §index-recovery).

        With the ``snapshot`` of our recovery point, the file it names is kept at that header instead
        (it was on disk up to there), older files are kept (flushed when they filled or by that
        checkpoint) and newer ones dropped: re-dispatch from the recovery point writes the rest again."""
        if not os.path.isdir(self.directory):
            return
        for name in sorted(os.listdir(self.directory)):
            f = IndexFile(
                os.path.join(self.directory, name),
                self.hash_slot_num,
                self.index_num,
                read_only=self.read_only,
            )
            if not last_exit_ok and not self.read_only:
                if snapshot is not None and f.name <= snapshot.name:
                    if f.name == snapshot.name:
                        f.restore(snapshot)
                elif snapshot is not None or f.end_timestamp > index_msg_timestamp:
                    log.info("abnormal recovery: deleting index file %s (newer than checkpoint)", f.name)
                    f.destroy()
                    continue
            self.files.append(f)

    def snapshot(self) -> IndexSnapshot | None:
        """The active file's header, for a checkpoint (take it under the put lock)."""
        return self.files[-1].snapshot() if self.files and not self.read_only else None

    def _writable_file(self, clock: Callable[[], int]) -> tuple[IndexFile, IndexFile | None]:
        """The file to insert into, creating one if needed; also returns the file that just filled up."""
        last = self.files[-1] if self.files else None
        if last is not None and last.index_count < last.index_num:
            return last, None
        new_dirs = make_dirs(self.directory)
        now_ms = clock()
        name = index_file_name(now_ms)
        while os.path.exists(os.path.join(self.directory, name)) or (last and name <= last.name):
            now_ms += 1
            name = index_file_name(now_ms)
        f = IndexFile(
            os.path.join(self.directory, name), self.hash_slot_num, self.index_num, sync_dirs=new_dirs
        )
        if last is not None:
            f.begin_phy_offset = f.end_phy_offset = last.end_phy_offset
            f.begin_timestamp = f.end_timestamp = last.end_timestamp
        f.write_header()
        self.files.append(f)
        return f, last

    def reserve(self, clock: Callable[[], int]) -> IndexFile | None:
        """Before a put appends its record: make sure the active file exists and has ``ENTRIES_CHUNK``
        entries allocated ahead, so indexing the record cannot hit a full disk (a record with more keys
        than that may still; its index entries are then lost, and logged). Raises ``OSError`` when the
        disk is full; returns the file that just filled up, as :meth:`build_index` does."""
        if self.files:  # the common case, on every put: room reserved in the active file
            last = self.files[-1]
            if last.index_count + ENTRIES_CHUNK <= last._reserved_entries:
                return None
        f, full = self._writable_file(clock)
        f.reserve_entries(f.index_count + ENTRIES_CHUNK)
        return full

    def build_index(
        self, keys: Sequence[str], phy_offset: int, store_timestamp: int, clock: Callable[[], int]
    ) -> IndexFile | None:
        """Insert ``keys`` for one record; returns the file that filled up, if any (the caller flushes it in
        the background and records its end time in the checkpoint, docs/store-format.md §new-index-files).

        ``clock`` names a new index file (local time) when one has to be created.
        """
        f, full = self._writable_file(clock)
        if phy_offset < f.end_phy_offset:
            return None  # already indexed (re-dispatch after recovery)
        done = f.put_keys(keys, phy_offset, store_timestamp)
        while done < len(keys):
            f, full = self._writable_file(clock)
            keys = keys[done:]
            done = f.put_keys(keys, phy_offset, store_timestamp)
        return full  # the active file's header is written by write_header() (periodic) and flush()

    def query(self, key: str, max_num: int, begin: int, end: int) -> list[int]:
        """Offsets of entries for ``key`` (already ``topic#key``), newest files first
        (docs/store-format.md §index-query), unsorted."""
        out: list[int] = []
        for f in reversed(self.files):
            if f.is_time_matched(begin, end):
                f.select_phy_offsets(key, max_num, begin, end, out)
            if f.begin_timestamp < begin or len(out) >= max_num:
                break
        return out

    @property
    def last_update(self) -> tuple[int, int]:
        """``(endTimestamp, endPhyOffset)`` of the newest file (carried in query responses)."""
        if not self.files:
            return 0, 0
        return self.files[-1].end_timestamp, self.files[-1].end_phy_offset

    def write_header(self) -> None:
        """Copy the active file's header fields into its mapping (readers in other processes see them)."""
        if self.files and not self.read_only:
            self.files[-1].write_header()

    def flush(self) -> None:
        for f in self.files:
            f.flush()

    def sync(self) -> None:
        """Force every file to disk. The active file's header is written by the caller, under the put
        lock; the older ones no longer change, so their headers are written here (a file that filled up
        has its header written by its background flush, but a sync must not depend on that having run)."""
        if not self.read_only:
            for f in self.files[:-1]:
                f.write_header()
            for f in self.files:
                f.file.sync()

    def close(self) -> None:
        for f in self.files:
            f.close()
