"""The timer service's progress on disk: which timer messages are still pending
(docs/store-format.md §timer-messages).

Timer messages wait in queue 0 of ``rmq_sys_wheel_timer`` in the order they were sent, but fall due in
any order, so one consumed offset cannot say what was delivered. Files in ``<storePathRootDir>/timer``
do:

- ``pending.json``: a snapshot, written now and then (temporary file, fsync, rename; the one before it
  kept as ``pending.json.bak``): the queue offset the service had read up to (``enqueued``), and every
  timer still pending below it with what the service needs to deliver it and to count it per topic
  (due time, CommitLog offset, size and store time, real topic, unique key). A start reads this file
  and the timer queue from ``enqueued`` on, not the whole queue.
- ``done.<generation>``: an append-only log of the queue offsets delivered or recalled since the
  snapshot of that generation was begun, 8 bytes each (big-endian). One ``write()`` per delivery: in
  the page cache at once, so a SIGKILL loses none; a snapshot fsyncs what it replaces.

A snapshot starts a new generation's log first, and once written removes the logs only the snapshot
before it needed, so the ``.bak`` and the logs since its generation still read back when the newest
snapshot cannot be read. A crash at any step leaves a snapshot and every log since its generation.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import struct
import threading
from dataclasses import dataclass, field
from typing import NamedTuple

from store.errors import StoreError

log = logging.getLogger(__name__)

SNAPSHOT = "pending.json"
BACKUP = SNAPSHOT + ".bak"
LOG_PREFIX = "done."
_OFFSET = struct.Struct(">q")


class PendingTimer(NamedTuple):
    """One timer message still to deliver (a tuple: a start builds one per pending timer)."""

    #: Its offset in the timer queue (unique for the life of the store).
    queue_offset: int
    due_ms: int
    phys_offset: int
    size: int
    #: When the parked record was stored (it is re-put before retention could remove it).
    stored_ms: int
    #: The real topic, and the producer's unique key (empty if none): what a recall names.
    topic: str
    unique_key: str


@dataclass(slots=True)
class TimerSnapshot:
    generation: int = 0
    #: The next timer queue offset the service has not read.
    enqueued: int = 0
    pending: list[PendingTimer] = field(default_factory=list)


def encode_snapshot(snapshot: TimerSnapshot) -> bytes:
    """The snapshot as JSON: one row per pending timer, its fields in PendingTimer's order."""
    doc = {
        "version": 1,
        "generation": snapshot.generation,
        "enqueued": snapshot.enqueued,
        "pending": snapshot.pending,
    }
    return json.dumps(doc, separators=(",", ":")).encode()


def decode_snapshot(data: bytes) -> TimerSnapshot:
    doc = json.loads(data)
    new = tuple.__new__  # PendingTimer(*row) without the generated __new__'s cost, per pending timer
    pending = [new(PendingTimer, row) for row in doc["pending"]]
    if pending and set(map(len, pending)) != {len(PendingTimer._fields)}:
        raise ValueError("a pending timer row of another shape")
    return TimerSnapshot(int(doc["generation"]), int(doc["enqueued"]), pending)


def decode_log(data: bytes) -> list[int]:
    """The offsets of a done log; a torn last entry (a crash mid-write) is ignored."""
    whole = len(data) - len(data) % _OFFSET.size
    return [v for (v,) in _OFFSET.iter_unpack(data[:whole])]


class TimerProgress:
    """The files of one store (``directory=None``: nothing is kept, for in-memory stores)."""

    def __init__(self, directory: str | None) -> None:
        self.directory = directory
        self.generation = 0
        self._fd: int | None = None
        #: Whether `load` found no directory: the store never had our timer progress (a new store, or
        #: one a RocketMQ 5.x broker wrote, whose timer queue may hold messages delivered long ago).
        self.created = False
        #: The generation of the snapshot on disk (what the next one turns into the ``.bak``).
        self._on_disk = 0
        #: One snapshot write at a time (a stop's final one may start while a periodic one still runs).
        self._writing = threading.Lock()

    def _path(self, name: str) -> str:
        assert self.directory is not None
        return os.path.join(self.directory, name)

    def _generations(self) -> list[int]:
        assert self.directory is not None
        found = []
        for name in os.listdir(self.directory):
            if name.startswith(LOG_PREFIX) and name[len(LOG_PREFIX) :].isdigit():
                found.append(int(name[len(LOG_PREFIX) :]))
        return sorted(found)

    def _read_snapshot(self) -> TimerSnapshot:
        """The newest readable snapshot: ``pending.json``, else the ``.bak`` (a crash between the two
        renames, or a damaged file), else none at all."""
        problems = []
        for name in (SNAPSHOT, BACKUP):
            try:
                with open(self._path(name), "rb") as f:
                    snapshot = decode_snapshot(f.read())
            except FileNotFoundError:
                continue
            except (ValueError, KeyError, TypeError, IndexError) as e:
                problems.append(f"{name}: {e}")
                log.error("timer snapshot %s unreadable (%s); trying the one before it", self._path(name), e)
                continue
            return snapshot
        if problems:
            raise StoreError(f"no readable timer snapshot in {self.directory}: {'; '.join(problems)}")
        return TimerSnapshot()

    def load(self) -> tuple[TimerSnapshot, set[int]]:
        """The last snapshot and the offsets logged as done since; appends go to the newest log."""
        if self.directory is None:
            return TimerSnapshot(), set()
        self.created = not os.path.isdir(self.directory)
        os.makedirs(self.directory, exist_ok=True)
        snapshot = self._read_snapshot()
        self._on_disk = snapshot.generation
        done: set[int] = set()
        generations = self._generations()
        for gen in generations:
            if gen >= snapshot.generation:  # older ones name only offsets the snapshot no longer holds
                with open(self._path(f"{LOG_PREFIX}{gen}"), "rb") as f:
                    done.update(decode_log(f.read()))
        self._open(max([snapshot.generation, *generations]))
        return snapshot, done

    def _open(self, generation: int) -> None:
        assert self.directory is not None
        old = self._fd
        self._fd = os.open(
            self._path(f"{LOG_PREFIX}{generation}"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644
        )
        self.generation = generation
        if old is not None:
            os.close(old)

    def record_done(self, queue_offset: int) -> None:
        """Log one delivered or recalled timer (one small write, no fsync)."""
        if self._fd is not None:
            os.write(self._fd, _OFFSET.pack(queue_offset))

    def record_done_many(self, queue_offsets: list[int]) -> None:
        """Log several offsets in one write."""
        if self._fd is not None and queue_offsets:
            os.write(self._fd, b"".join(_OFFSET.pack(o) for o in queue_offsets))

    def rotate(self) -> int:
        """Start the next generation's log (what a snapshot taken now is the base of)."""
        if self.directory is not None:
            self._open(self.generation + 1)
        return self.generation

    def write_snapshot(self, snapshot: TimerSnapshot) -> None:
        """Replace the snapshot durably (the old one becomes the ``.bak``), then drop the logs only the
        old ``.bak`` needed. For a worker thread; writes are serialized."""
        if self.directory is None:
            return
        with self._writing:
            if snapshot.generation <= self._on_disk:
                return  # a newer one was written meanwhile
            tmp = self._path(SNAPSHOT + ".tmp")
            with open(tmp, "wb") as f:
                f.write(encode_snapshot(snapshot))
                f.flush()
                os.fsync(f.fileno())
            with contextlib.suppress(FileNotFoundError):
                os.replace(self._path(SNAPSHOT), self._path(BACKUP))
            os.replace(tmp, self._path(SNAPSHOT))
            dir_fd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
            kept_from, self._on_disk = self._on_disk, snapshot.generation
            for gen in self._generations():
                if gen < kept_from:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(self._path(f"{LOG_PREFIX}{gen}"))

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
