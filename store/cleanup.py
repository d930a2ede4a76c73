"""File cleanup (spec §8): expiry by mtime, disk watermarks, manual deletion, and the ConsumeQueue
and index files that point below the new CommitLog minimum.

The decisions are pure functions (unit-tested against §15.14); :class:`Cleaner` applies them to a
store's files. The engine runs :meth:`Cleaner.run_once` from a background thread every
``clean_resource_interval`` ms, first after 60 s, as the broker does.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from store.commitlog import CommitLog
from store.config import StoreConfig
from store.consumequeue import CQ_STORE_UNIT_SIZE, UNIT, ConsumeQueue
from store.indexfile import IndexService

log = logging.getLogger(__name__)

DELETE_FILES_BATCH_MAX = 10
MANUAL_DELETE_RUNS = 20


def disk_usage_ratio(total: int, free: int, usable: int) -> float:
    """The broker's usage of a partition: ``ceil(used * 100 / (used + usable)) / 100`` (§8.3)."""
    used = total - free
    entire = used + usable
    if entire <= 0:
        return -1.0
    return math.ceil(used * 100 / entire) / 100


def path_usage_ratio(path: str) -> float:
    """:func:`disk_usage_ratio` of the partition holding ``path``; -1 if the path does not exist."""
    try:
        st = os.statvfs(path)
    except OSError:
        return -1.0
    return disk_usage_ratio(st.f_blocks * st.f_frsize, st.f_bfree * st.f_frsize, st.f_bavail * st.f_frsize)


def is_delete_hour(now_ms: int, delete_when: str) -> bool:
    """True during any local hour listed in ``delete_when`` (``"04"``, ``"04;16"``)."""
    hour = time.localtime(now_ms / 1000).tm_hour
    return any(part.strip() and int(part) == hour for part in delete_when.split(";"))


def is_expired(mtime_ms: int, now_ms: int, reserved_hours: int) -> bool:
    """A file expires ``file_reserved_time`` hours after its last modification (§8.4)."""
    return now_ms >= mtime_ms + reserved_hours * 3_600_000


@dataclass(frozen=True, slots=True)
class CleanupDecision:
    """What one cleanup run does: ``delete`` expired files, ``forcibly`` also unexpired ones, and
    whether the store is ``disk_full`` (puts refused)."""

    delete: bool
    forcibly: bool
    disk_full: bool


def decide(ratio: float, config: StoreConfig, *, delete_hour: bool, manual: bool) -> CleanupDecision:
    """Apply the watermarks of §8.3 to a partition usage ``ratio`` (-1: cannot be measured)."""
    max_used = min(max(config.disk_max_used_space_ratio, 10), 95) / 100
    warning = config.disk_space_warning_level_ratio / 100
    forcibly_ratio = config.disk_space_clean_forcibly_ratio / 100
    disk_full = ratio > warning
    clean_now = ratio > forcibly_ratio
    space = ratio > max_used or ratio < 0
    return CleanupDecision(
        delete=delete_hour or space or manual or clean_now,
        forcibly=clean_now and config.clean_file_forcibly_enable,
        disk_full=disk_full,
    )


class Cleaner:
    """Deletes CommitLog, ConsumeQueue and index files per §8.4–§8.6.

    ``lock`` is the store's put lock: file lists are swapped under it (the writer appends to them),
    but the deletions and the pauses between them happen outside it.
    """

    def __init__(
        self,
        config: StoreConfig,
        commit_log: CommitLog,
        consume_queues: Callable[[], Iterable[ConsumeQueue]],
        index: IndexService,
        lock: threading.Lock,
        *,
        stop: threading.Event | None = None,
    ) -> None:
        self.config = config
        self.commit_log = commit_log
        self.consume_queues = consume_queues
        self.index = index
        self.lock = lock
        self.stop = stop or threading.Event()
        self.manual_runs = 0
        self.disk_full = False
        self._last_min_offset = commit_log.min_offset

    def request_manual_delete(self) -> None:
        """``DELETE_EXPIRED_COMMITLOG``: act as if it were ``delete_when`` for the next 20 runs (§8.7)."""
        self.manual_runs = MANUAL_DELETE_RUNS

    def run_once(self, now_ms: int) -> int:
        """One cleanup run; returns how many CommitLog files were deleted."""
        manual = self.manual_runs > 0
        if manual:
            self.manual_runs -= 1
        ratio = min(
            path_usage_ratio(self.commit_log.files.directory),
            path_usage_ratio(self.config.consume_queue_dir),
            key=lambda r: r if r >= 0 else 2.0,
        )
        decision = decide(
            ratio, self.config, delete_hour=is_delete_hour(now_ms, self.config.delete_when), manual=manual
        )
        if decision.disk_full != self.disk_full:
            log.warning(
                "disk usage %.2f: store %s", ratio, "full, puts refused" if decision.disk_full else "writable"
            )
        self.disk_full = decision.disk_full
        deleted = self.delete_commit_log_files(now_ms, forcibly=decision.forcibly) if decision.delete else 0
        self.delete_logic_files()
        return deleted

    def delete_commit_log_files(self, now_ms: int, *, forcibly: bool) -> int:
        """Oldest first, never the active file, at most 10, stop at the first file to keep (§8.4)."""
        files = self.commit_log.files.files
        deleted = 0
        for mf in files[:-1]:
            mtime_ms = int(os.path.getmtime(mf.path) * 1000)
            if not (forcibly or is_expired(mtime_ms, now_ms, self.config.file_reserved_time)):
                break
            log.info("deleting commit log file %s (%s)", mf.path, "forced" if forcibly else "expired")
            mf.destroy()
            deleted += 1
            if deleted >= DELETE_FILES_BATCH_MAX or self.stop.wait(
                self.config.delete_commit_log_files_interval / 1000
            ):
                break
        if deleted:
            self.commit_log.files.files = files[
                deleted:
            ]  # a new list: readers holding the old one stay consistent
        return deleted

    def delete_logic_files(self) -> None:
        """Drop ConsumeQueue and index files that only point below the CommitLog minimum (§8.5, §8.6)."""
        min_offset = self.commit_log.min_offset
        if min_offset <= self._last_min_offset:
            return
        self._last_min_offset = min_offset
        for cq in self.consume_queues():
            doomed = []
            for mf in cq.files.files[:-1]:
                if UNIT.unpack_from(mf.view, cq.file_size - CQ_STORE_UNIT_SIZE)[0] >= min_offset:
                    break
                doomed.append(mf)
            with self.lock:
                if doomed:
                    cq.files.files = cq.files.files[len(doomed) :]
                    cq.min_logic_offset = max(cq.min_logic_offset, cq.files.files[0].file_from_offset)
                cq.correct_min_offset(min_offset)
            for mf in doomed:
                mf.destroy()
        stale = []
        for f in self.index.files[:-1]:
            if f.end_phy_offset >= min_offset:
                break
            stale.append(f)
        if stale:
            with self.lock:
                self.index.files = self.index.files[len(stale) :]
            for f in stale:
                f.destroy()
