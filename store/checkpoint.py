"""The ``checkpoint`` file: three big-endian longs in a 4 KiB mapped page (spec §6.1)."""

from __future__ import annotations

import mmap
import os
import struct

CHECKPOINT_FILE_SIZE = 4096
_LAYOUT = struct.Struct(">qqq")


class StoreCheckpoint:
    """Timestamps recovery uses to pick where abnormal recovery starts (§6.5)."""

    def __init__(self, path: str, *, read_only: bool = False) -> None:
        self.path = path
        self.read_only = read_only
        self.physic_msg_timestamp = 0
        self.logics_msg_timestamp = 0
        self.index_msg_timestamp = 0
        self._mm: mmap.mmap | None = None
        if read_only:
            if os.path.exists(path):
                with open(path, "rb") as f:
                    data = f.read(_LAYOUT.size)
                if len(data) == _LAYOUT.size:
                    self._set(_LAYOUT.unpack(data))
            return
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size < CHECKPOINT_FILE_SIZE:
                os.ftruncate(fd, CHECKPOINT_FILE_SIZE)
            self._mm = mmap.mmap(fd, CHECKPOINT_FILE_SIZE)
        finally:
            os.close(fd)
        self._set(_LAYOUT.unpack_from(self._mm, 0))

    def _set(self, values: tuple[int, ...]) -> None:
        self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp = values

    def flush(self) -> None:
        """Write the three fields and ``msync`` the page."""
        if self._mm is None:
            return
        _LAYOUT.pack_into(
            self._mm, 0, self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp
        )
        self._mm.flush()

    def recovery_limit(self, *, index_safe: bool) -> int:
        """Newest store timestamp abnormal recovery may trust: min of the fields minus 3 s (§6.5)."""
        limit = min(self.physic_msg_timestamp, self.logics_msg_timestamp) - 3000
        if index_safe:
            limit = min(limit, self.index_msg_timestamp)
        return max(limit, 0)

    def close(self) -> None:
        if self._mm is not None:
            self._mm.close()
            self._mm = None
