"""The ``checkpoint`` file: three big-endian longs at the start of a 4 KiB file (spec §6.1)."""

from __future__ import annotations

import os
import struct

from store.durability import sync_directory

CHECKPOINT_FILE_SIZE = 4096
_LAYOUT = struct.Struct(">qqq")


class StoreCheckpoint:
    """Timestamps recovery uses to pick where abnormal recovery starts (§6.5).

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
        self._fd: int | None = None
        if read_only and not os.path.exists(path):
            return
        fd = os.open(path, os.O_RDONLY if read_only else os.O_RDWR | os.O_CREAT, 0o644)
        data = os.pread(fd, _LAYOUT.size, 0)
        if read_only:
            os.close(fd)
        else:
            if os.fstat(fd).st_size < CHECKPOINT_FILE_SIZE:
                os.ftruncate(fd, CHECKPOINT_FILE_SIZE)
                os.fsync(fd)
                sync_directory(os.path.dirname(os.path.abspath(path)))
            self._fd = fd
        if len(data) == _LAYOUT.size:
            self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp = _LAYOUT.unpack(
                data
            )

    def flush(self) -> None:
        """Write the three fields and force them to disk."""
        if self._fd is None:
            return
        os.pwrite(
            self._fd,
            _LAYOUT.pack(self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp),
            0,
        )
        os.fdatasync(self._fd)

    def recovery_limit(self, *, index_safe: bool) -> int:
        """Newest store timestamp abnormal recovery may trust: min of the fields minus 3 s (§6.5)."""
        limit = min(self.physic_msg_timestamp, self.logics_msg_timestamp) - 3000
        if index_safe:
            limit = min(limit, self.index_msg_timestamp)
        return max(limit, 0)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
