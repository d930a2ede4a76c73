"""The timer service's progress on disk: which timer messages are still pending
(docs/store-format.md §timer-messages).

Timer messages wait in queue 0 of ``rmq_sys_wheel_timer`` in the order they were sent, but fall due in
any order, so one consumed offset cannot say what was delivered. Two files in ``<storePathRootDir>/timer``
do:

- ``pending.json``: a snapshot, written now and then (temporary file, fsync, rename): the queue offset
  the service had read up to (``enqueued``), and every timer still pending below it with what the
  service needs to deliver it and to count it per topic (due time, CommitLog offset, size and store
  time, real topic, unique key). A start reads this file and the timer queue from ``enqueued`` on, not the whole
  queue.
- ``done.<generation>``: an append-only log of the queue offsets delivered or recalled since the
  snapshot of that generation, 8 bytes each (big-endian). One ``write()`` per delivery: in the page
  cache at once, so a SIGKILL loses none; a snapshot fsyncs what it replaces.

A snapshot starts a new generation first; once written it removes the older logs. A crash between the
two leaves logs that only name offsets the snapshot no longer holds, which loading ignores.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
from dataclasses import dataclass, field
from typing import NamedTuple

SNAPSHOT = "pending.json"
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
    if any(len(row) != len(PendingTimer._fields) for row in pending):
        raise ValueError("a pending timer row of another shape")
    return TimerSnapshot(int(doc["generation"]), int(doc["enqueued"]), pending)


def decode_log(data: bytes) -> list[int]:
    """The offsets of a done log; a torn last entry (a crash mid-write) is ignored."""
    whole = len(data) - len(data) % _OFFSET.size
    return [v for (v,) in _OFFSET.iter_unpack(data[:whole])]


class TimerProgress:
    """The two files of one store (``directory=None``: nothing is kept, for in-memory stores)."""

    def __init__(self, directory: str | None) -> None:
        self.directory = directory
        self.generation = 0
        self._fd: int | None = None
        #: Whether `load` found no directory: the store never had our timer progress (a new store, or
        #: one a RocketMQ 5.x broker wrote, whose timer queue may hold messages delivered long ago).
        self.created = False

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

    def load(self) -> tuple[TimerSnapshot, set[int]]:
        """The last snapshot and the offsets logged as done since; appends go to the newest log."""
        if self.directory is None:
            return TimerSnapshot(), set()
        self.created = not os.path.isdir(self.directory)
        os.makedirs(self.directory, exist_ok=True)
        snapshot = TimerSnapshot()
        with contextlib.suppress(FileNotFoundError), open(self._path(SNAPSHOT), "rb") as f:
            snapshot = decode_snapshot(f.read())
        done: set[int] = set()
        generations = self._generations()
        for gen in generations:
            if gen < snapshot.generation:
                os.unlink(self._path(f"{LOG_PREFIX}{gen}"))  # a crash right after its snapshot
                continue
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
        """Replace the snapshot durably, then drop the logs it covers (for a worker thread)."""
        if self.directory is None:
            return
        tmp = self._path(SNAPSHOT + ".tmp")
        with open(tmp, "wb") as f:
            f.write(encode_snapshot(snapshot))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._path(SNAPSHOT))
        dir_fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        for gen in self._generations():
            if gen < snapshot.generation:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self._path(f"{LOG_PREFIX}{gen}"))

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
