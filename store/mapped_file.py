"""Fixed-size memory-mapped files named by their 20-digit start offset, and the queue of them
(docs/store-format.md §file-names-and-sizes).

CommitLog and ConsumeQueue files are both a :class:`MappedFileQueue`. Files are created with
``ftruncate`` at their full size and mapped whole, like RocketMQ; the write position is kept in
memory because the file length says nothing about where data ends. Blocks are reserved with
``posix_fallocate`` before the writer stores into them (see :meth:`MappedFile.prepare`): a store into
a hole of a mapping on a full disk kills the process with SIGBUS, a failed ``fallocate`` is an
``OSError`` the put turns into a refusal.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import mmap
import os
import threading
from collections.abc import Callable, Iterator, Sequence

from store.durability import make_dirs, sync_directory
from store.errors import StoreFormatError

log = logging.getLogger(__name__)

_address: Callable[[mmap.mmap], int] | None
try:  # the compiled build's (_warm.c): where a mapping starts, for a put's prefetch (QueueHandle)
    from store import _warm

    _address = _warm.address
except ImportError:
    _address = None

PREPARE_CHUNK = 2 * 1024 * 1024
_ZEROS = bytes(PREPARE_CHUNK)


def offset_to_file_name(offset: int) -> str:
    return f"{offset:020d}"


@functools.cache
def _syncfs() -> Callable[[int], int] | None:
    import ctypes  # lazily: only the flushing thread of a large store gets here

    return getattr(ctypes.CDLL(None, use_errno=True), "syncfs", None)


def sync_filesystem(path: str) -> bool:
    """``syncfs``: write back every dirty page of the file system holding ``path`` in one call, GIL
    released. False where the call is missing (not Linux), for the caller to sync file by file.

    Thousands of ConsumeQueue files each with a page or two dirty take one journal commit this way
    instead of one each (10,000 queue files: 0.3 s instead of 1.2 s), and the flushing thread does not
    take the GIL back 30,000 times from the thread serving sends. The price: it also writes back the
    file system's other dirty pages, and kernels before 5.8 do not report writeback errors from it.
    """
    syncfs = _syncfs()
    if syncfs is None:
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        if syncfs(fd) != 0:
            import ctypes

            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), path)
    finally:
        os.close(fd)
    return True


class FileMapping:
    """A file of a fixed size mapped whole, with a descriptor for ``pwrite``/``fdatasync``.

    Created with ``ftruncate`` when missing (writable mode), its first ``reserve`` bytes allocated
    before it is mapped; when that fails (disk full) the new file is removed and the ``OSError``
    raised. ``sync_dirs`` are the directories whose entries naming the new file (and any directory
    created for it) are not durable yet: the first :meth:`sync` syncs them too, so creating a file
    costs no directory ``fsync`` on the put path, and its data never reaches the disk without its name.

    ``random_access`` turns off read-ahead: the first store into a fresh sparse mapping otherwise makes
    the kernel read ahead and zero-fill a large block of pages, a stall on every new ConsumeQueue or
    index file. ``keep_fd=False`` (ConsumeQueue files, one or more per queue) holds no
    descriptor of its own and opens one per descriptor operation: Python's ``mmap`` keeps a duplicate
    of the descriptor anyway, so 10,000 queues would otherwise cost 20,000 descriptors.

    Descriptor operations are serialised with :meth:`close`/:meth:`destroy`, which other threads
    (cleanup) may call while a flush is running.
    """

    # Slotted, as MappedFile and ConsumeQueue: a send to one of 10,000 queues reads each of these
    # objects cold, and a slot is one read where an instance ``__dict__`` is two more.
    __slots__ = (
        "_fd",
        "_fd_lock",
        "_pending_dirs",
        "_writable",
        "file_size",
        "mm",
        "path",
        "read_only",
        "view",
    )
    # Compiled, the fields sit in the object in the order declared here: ``mm`` last, next to the
    # positions MappedFile adds after it, so that an append reads one or two cache lines of the object.
    path: str
    file_size: int
    read_only: bool
    _pending_dirs: tuple[str, ...]
    _writable: bool
    _fd: int | None
    _fd_lock: threading.Lock
    view: memoryview
    mm: mmap.mmap

    def __init__(
        self,
        path: str,
        file_size: int,
        *,
        read_only: bool = False,
        keep_fd: bool = True,
        random_access: bool = False,
        reserve: int = 0,
        sync_dirs: Sequence[str] = (),
    ) -> None:
        self.path = path
        self.file_size = file_size
        self.read_only = read_only
        self._pending_dirs = ()
        fd = os.open(path, os.O_RDONLY if read_only else os.O_RDWR | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            if size != file_size:
                if read_only or size > file_size:
                    raise StoreFormatError(f"{path}: size {size} != configured {file_size}")
                if size == 0:
                    self._allocate_new(fd, min(reserve, file_size))
                    self._pending_dirs = (os.path.dirname(path), *sync_dirs)
                os.ftruncate(fd, file_size)  # the rest stays sparse until prepared
            self.mm = mmap.mmap(fd, file_size, access=mmap.ACCESS_READ if read_only else mmap.ACCESS_WRITE)
            if random_access and hasattr(mmap, "MADV_RANDOM"):
                self.mm.madvise(mmap.MADV_RANDOM)
        except BaseException:
            os.close(fd)
            raise
        self._writable = not read_only  # descriptor operations allowed (until closed or destroyed)
        self._fd = fd if self._writable and keep_fd else None
        if self._fd is None:
            os.close(fd)
        self.view = memoryview(self.mm)
        self._fd_lock = threading.Lock()

    def advise_normal(self) -> None:
        """Read-ahead back on (after ``random_access``); a mapping already closed is left alone."""
        if hasattr(mmap, "MADV_NORMAL"):
            with contextlib.suppress(ValueError):  # closed meanwhile (cleanup)
                self.mm.madvise(mmap.MADV_NORMAL)

    def _allocate_new(self, fd: int, length: int) -> None:
        """Reserve the first ``length`` bytes of the file just created; remove it when that fails."""
        if length <= 0:
            return
        try:
            os.posix_fallocate(fd, 0, length)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(self.path)
            raise

    @contextlib.contextmanager
    def _descriptor(self, *, seek: bool = False) -> Iterator[int | None]:
        """The file's descriptor for one operation (opened for it when none is kept); None once closed.
        ``seek``: one to ``lseek`` through, opened read-only on a read-only mapping too (it keeps none:
        without one, ``data_ranges`` read a 1 GiB pre-allocated file whole); None once the mapping is
        closed or the file gone."""
        with self._fd_lock:
            if self._fd is not None or not (self._writable or seek):
                yield self._fd
                return
            fd: int | None = None
            if not seek:
                fd = os.open(self.path, os.O_RDWR)
            elif not self.mm.closed:
                try:
                    fd = os.open(self.path, os.O_RDONLY)
                except OSError:
                    fd = None  # (destroyed: unlinked)
            try:
                yield fd
            finally:
                if fd is not None:
                    os.close(fd)

    def sync(self) -> None:
        """``fdatasync``: writes back the mapping's dirty pages like ``msync``, but releases the GIL
        for the disk wait (``mmap.flush`` does not), so appenders keep running and group commit works.

        The disk wait is on a duplicate of the descriptor, outside the descriptor's lock: the writer's
        ``fallocate``/``pwrite`` of its next chunk (`prepare`, on the broker's event loop) takes that lock,
        and held through a flush's sync it stalled the loop for the whole disk wait (tens of milliseconds on
        a busy disk). A close meanwhile leaves the duplicate open until the sync ends."""
        with self._fd_lock:
            if self._fd is not None:
                fd: int | None = os.dup(self._fd)
            elif self._writable:
                fd = os.open(self.path, os.O_RDWR)
            else:
                fd = None
        if fd is not None:
            try:
                os.fdatasync(fd)
            finally:
                os.close(fd)
        self.sync_new_entries()

    def sync_new_entries(self) -> None:
        """Sync the directories naming this new file, once (see the class)."""
        dirs, self._pending_dirs = self._pending_dirs, ()
        for d in dirs:
            sync_directory(d)

    def pwrite(self, data: bytes | memoryview, offset: int) -> int | None:
        """Write through the descriptor (GIL released); the bytes written (fewer on a nearly full disk),
        None once the file is closed."""
        with self._descriptor() as fd:
            if fd is None:
                return None
            return os.pwrite(fd, data, offset)

    def fallocate(self, offset: int, length: int) -> bool:
        """Reserve blocks without writing them (GIL released); False once the file is closed."""
        with self._descriptor() as fd:
            if fd is None:
                return False
            os.posix_fallocate(fd, offset, length)
            return True

    def data_ranges(self, start: int, end: int) -> list[tuple[int, int]]:
        """The parts of ``[start, end)`` that may hold data: holes of the sparse file (never written, so
        zeros) are left out where the file system reports them (``SEEK_DATA``/``SEEK_HOLE``, which
        count dirty pages of the mapping as data); elsewhere the whole range."""
        ranges: list[tuple[int, int]] = []
        with self._descriptor(seek=True) as fd:
            pos = start
            while pos < end:
                if fd is None or not hasattr(os, "SEEK_DATA"):
                    ranges.append((pos, end))
                    break
                try:
                    data = os.lseek(fd, pos, os.SEEK_DATA)
                except OSError as e:
                    if e.errno != errno.ENXIO:  # ENXIO: nothing but a hole up to the end of the file
                        ranges.append((pos, end))
                    break
                if data >= end:
                    break
                hole = min(os.lseek(fd, data, os.SEEK_HOLE), end)
                ranges.append((data, hole))
                pos = hole
        return ranges

    def _close_fd(self) -> None:
        with self._fd_lock:
            self._writable = False
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def close(self) -> None:
        self._close_fd()
        try:
            self.view.release()
            self.mm.close()
        except BufferError:
            # A reader still holds a memoryview slice (raw record bytes); the mapping goes away with it.
            log.debug("mapping of %s still referenced; left to the garbage collector", self.path)

    def destroy(self) -> None:
        """Delete the file. The mapping is not closed here: a concurrent reader may still be slicing
        it (RocketMQ reference-counts files for this); it is unmapped when the last reference goes."""
        self._close_fd()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


class MappedFile(FileMapping):
    """One CommitLog or ConsumeQueue file, named by its start offset.

    ``wrote_position`` is where the next append goes; bytes past it are not data.
    """

    __slots__ = (
        "_prepare_lock",
        "address",
        "file_from_offset",
        "flushed_position",
        "prepare_chunk",
        "prepared_position",
        "wrote_position",
    )
    # In this order after FileMapping's fields (``mm`` last of them): what an append reads, together.
    wrote_position: int
    prepared_position: int
    flushed_position: int
    file_from_offset: int
    address: int
    prepare_chunk: int
    _prepare_lock: threading.Lock

    def __init__(
        self,
        path: str,
        file_size: int,
        *,
        read_only: bool = False,
        keep_fd: bool = True,
        random_access: bool = False,
        prepare_chunk: int = PREPARE_CHUNK,
        sync_dirs: Sequence[str] = (),
    ) -> None:
        existed = read_only or os.path.exists(path)
        super().__init__(
            path,
            file_size,
            read_only=read_only,
            keep_fd=keep_fd,
            random_access=random_access,
            reserve=prepare_chunk,
            sync_dirs=sync_dirs,
        )
        self.file_from_offset = int(os.path.basename(path))
        self.wrote_position = 0
        self.flushed_position = 0
        self.prepare_chunk = prepare_chunk
        # A file this call created has its first chunk reserved; one re-opened is reserved as it is used.
        self.prepared_position = 0 if existed else min(prepare_chunk, file_size)
        self._prepare_lock = threading.Lock()
        #: Where the mapping starts in memory, for prefetching only (0: unknown); never written through.
        self.address = _address(self.mm) if _address is not None and not read_only else 0

    def prepare(self, end: int, *, populate: bool) -> None:
        """Reserve disk blocks up to ``end`` (``prepare_chunk`` steps) before the writer gets there.

        Reserving first means a full disk fails the append with an ``OSError`` instead of killing the process
        with SIGBUS on a store into the mapping. With ``populate`` the blocks are also written with zeros,
        which puts the pages in the page cache: the first write to a page of a sparse shared mapping
        page-faults while holding the GIL (microseconds per page), while ``pwrite`` does that work with the
        GIL released, so a background thread can keep ahead of the writer (RocketMQ's warm-up,
        docs/store-format.md §file-names-and-sizes). Only bytes at or beyond ``prepared_position`` are
        touched, and the writer never writes past it, so this cannot overwrite data.
        """
        if self.read_only:
            return
        with self._prepare_lock:
            while self.prepared_position < end:
                start = self.prepared_position
                length = min(self.prepare_chunk, self.file_size - start)
                if length <= 0:
                    break
                if populate:
                    # A short write is all the space there was: the next one raises ENOSPC.
                    written = self.pwrite(_ZEROS[: min(length, PREPARE_CHUNK)], start)
                    if written is None:
                        break
                    length = written
                elif not self.fallocate(start, length):
                    break
                self.prepared_position = start + length

    @property
    def end_offset(self) -> int:
        return self.file_from_offset + self.file_size

    @property
    def dirty_bytes(self) -> int:
        return self.wrote_position - self.flushed_position

    def flush(self) -> int:
        """Force everything written since the last flush to disk; returns the new flushed position."""
        end = self.wrote_position
        if end > self.flushed_position:
            self.sync()
        self.flushed_position = end
        return end

    def mark_flushed(self, end: int) -> None:
        """Record that ``[.., end)`` reached the disk by other means (:func:`sync_filesystem`, which
        writes back directories too)."""
        self.flushed_position = max(self.flushed_position, end)
        self._pending_dirs = ()


class MappedFileQueue:
    """The ordered files of one CommitLog or one ConsumeQueue; offsets are global byte offsets."""

    __slots__ = (
        "clear_whole_tail",
        "directory",
        "file_size",
        "files",
        "keep_fd",
        "prepare_chunk",
        "random_access",
        "random_until_full",
        "read_only",
    )

    def __init__(
        self,
        directory: str,
        file_size: int,
        *,
        read_only: bool = False,
        clear_whole_tail: bool = False,
        keep_fd: bool = True,
        random_access: bool = False,
        random_until_full: bool = False,
        prepare_chunk: int = PREPARE_CHUNK,
    ) -> None:
        self.directory = directory
        self.file_size = file_size
        self.read_only = read_only
        self.keep_fd = keep_fd  # see FileMapping for both
        self.random_access = random_access
        #: A file created here is mapped without read-around until it is full (see `create_file`).
        self.random_until_full = random_until_full
        self.prepare_chunk = prepare_chunk  # blocks reserved at a time (see MappedFile.prepare)
        # On truncation, zero the whole tail (ConsumeQueue: stale units would look valid) or only the
        # next 8 bytes (CommitLog: enough to end the scan there, docs/store-format.md §truncation).
        self.clear_whole_tail = clear_whole_tail
        self.files: list[MappedFile] = []

    def load(self, on_bad_file: Callable[[StoreFormatError], None] | None = None) -> None:
        """Map every file in name order; all are assumed full until recovery sets the positions.

        ``on_bad_file`` (read-only inspection: ``store verify``) is told of a file that cannot be mapped
        (wrong size, wrong name) and the load goes on without it; without it such a file raises."""
        if not os.path.isdir(self.directory):
            return
        names = sorted(os.listdir(self.directory))
        skipped = False
        for name in names:
            path = os.path.join(self.directory, name)
            try:
                if not name.isdigit() or not os.path.isfile(path):
                    raise StoreFormatError(f"unexpected entry in {self.directory}: {name}")
                size = os.path.getsize(path)
                if size != self.file_size:
                    raise StoreFormatError(f"{path}: size {size} != configured {self.file_size}")
            except StoreFormatError as exc:
                if on_bad_file is None:
                    raise
                on_bad_file(exc)
                skipped = True
                continue
            mf = self._map(path, read_only=self.read_only)
            mf.wrote_position = mf.flushed_position = mf.prepared_position = self.file_size
            self.files.append(mf)
        for a, b in zip(self.files, self.files[1:], strict=False):
            if b.file_from_offset != a.end_offset and not skipped:  # a skipped file's caller knows why
                log.error("[BUG] gap between %s and %s", a.path, b.path)

    def _map(
        self, path: str, *, read_only: bool, sync_dirs: Sequence[str] = (), random_access: bool = False
    ) -> MappedFile:
        return MappedFile(
            path,
            self.file_size,
            read_only=read_only,
            keep_fd=self.keep_fd,
            random_access=self.random_access or random_access,
            prepare_chunk=self.prepare_chunk,
            sync_dirs=sync_dirs,
        )

    def last_file(self) -> MappedFile | None:
        return self.files[-1] if self.files else None

    def first_file(self) -> MappedFile | None:
        return self.files[0] if self.files else None

    def create_file(self, start_offset: int) -> MappedFile:
        """Create (or re-open) the file that starts at ``start_offset`` (a multiple of the file size).

        Raises ``OSError`` (``ENOSPC``...) when the file or its first blocks cannot be created.

        With ``random_until_full`` (a CommitLog's files, written front to back while serving) the new file
        is mapped without read-around until it is full: the writer's first store into each page not yet
        in the page cache faults, and with read-around the kernel then zero-fills the whole read-ahead
        window (``read_ahead_kb``, megabytes on some disks) in that one fault, holding the event loop
        that long every few megabytes written; without it a fault fills its own page."""
        new_dirs = make_dirs(self.directory)
        path = os.path.join(self.directory, offset_to_file_name(start_offset))
        mf = self._map(path, read_only=False, sync_dirs=new_dirs, random_access=self.random_until_full)
        self.files.append(mf)
        return mf

    def last_file_for_append(self, start_offset: int = 0) -> MappedFile:
        """The file to append to: the last one, or a new one when there is none or it is full."""
        last = self.files[-1] if self.files else None
        if last is None:
            return self.create_file(start_offset - start_offset % self.file_size)
        if last.wrote_position >= self.file_size:
            if self.random_until_full and not self.random_access:
                last.advise_normal()  # full: read back with read-ahead, as a file loaded at start is
            return self.create_file(last.end_offset)
        return last

    def find_file(self, offset: int) -> MappedFile | None:
        """The file holding global ``offset``, or ``None`` when it is outside the queue."""
        files = self.files
        if not files:
            return None
        first = files[0].file_from_offset
        if offset < first:
            return None
        idx = (offset - first) // self.file_size
        if idx < len(files):
            mf = files[idx]
            if mf.file_from_offset <= offset < mf.end_offset:
                return mf
        for mf in files:  # after a gap the arithmetic is off; fall back to a scan
            if mf.file_from_offset <= offset < mf.end_offset:
                return mf
        return None

    @property
    def min_offset(self) -> int:
        return self.files[0].file_from_offset if self.files else 0

    @property
    def max_offset(self) -> int:
        """End of written data (next append position)."""
        last = self.files[-1] if self.files else None
        return last.file_from_offset + last.wrote_position if last else 0

    @property
    def flushed_offset(self) -> int:
        for mf in self.files:
            if mf.flushed_position < mf.wrote_position:
                return mf.file_from_offset + mf.flushed_position
        return self.max_offset

    def truncate_dirty_files(self, offset: int) -> None:
        """Drop everything from ``offset`` on: later files are deleted, the file holding it is cut
        (docs/store-format.md §truncation)."""
        keep: list[MappedFile] = []
        for mf in self.files:
            if mf.end_offset <= offset:
                keep.append(mf)
            elif mf.file_from_offset <= offset:
                pos = offset - mf.file_from_offset
                mf.wrote_position = mf.flushed_position = mf.prepared_position = pos
                if not self.read_only:
                    end = self.file_size if self.clear_whole_tail else min(pos + 8, self.file_size)
                    for a, b in mf.data_ranges(pos, end):  # zeroing a hole would allocate it on disk
                        mf.mm[a:b] = bytes(b - a)
                keep.append(mf)
            elif not self.read_only:
                log.info("deleting %s (beyond offset %d)", mf.path, offset)
                mf.destroy()
            else:
                mf.close()
        self.files = keep

    def flush(self) -> int:
        """``msync`` every dirty file; returns the flushed offset."""
        for mf in self.files:
            if mf.flushed_position < mf.wrote_position:
                mf.flush()
        return self.flushed_offset

    def dirty_bytes(self) -> int:
        return sum(mf.dirty_bytes for mf in self.files if mf.flushed_position < mf.wrote_position)

    def dirty_ends(self) -> list[tuple[MappedFile, int]]:
        """Each file with unflushed data and its write position now, to mark flushed after a sync."""
        return [(mf, mf.wrote_position) for mf in self.files if mf.flushed_position < mf.wrote_position]

    def close(self) -> None:
        for mf in self.files:
            mf.close()

    def destroy(self) -> None:
        for mf in self.files:
            mf.destroy()
        self.files = []
        with contextlib.suppress(OSError):
            os.rmdir(self.directory)
