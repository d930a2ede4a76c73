"""File cleanup (docs/store-format.md §cleanup): expiry by mtime, disk watermarks, manual deletion, and the
ConsumeQueue and index files that point below the new CommitLog minimum.

The decisions are pure functions (unit-tested in tests/store/test_cleanup.py); :class:`Cleaner` applies
them to a store's files. The engine runs :meth:`Cleaner.run_once` from a background thread every
``clean_resource_interval`` ms, first after 60 s, as the broker does.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from store.commitlog import CommitLog
from store.config import StoreConfig
from store.consumequeue import CQ_STORE_UNIT_SIZE, UNIT, ConsumeQueue
from store.indexfile import IndexFile, IndexService
from store.mapped_file import MappedFile
from store.names import SCHEDULE_TOPIC
from store.words import plural

log = logging.getLogger(__name__)

DELETE_FILES_BATCH_MAX = 10
MANUAL_DELETE_RUNS = 20


def disk_usage_ratio(total: int, free: int, usable: int) -> float:
    """The broker's usage of a partition: ``ceil(used * 100 / (used + usable)) / 100``
    (docs/store-format.md §disk-watermarks)."""
    used = total - free
    entire = used + usable
    if entire <= 0:
        return -1.0
    return math.ceil(used * 100 / entire) / 100


class DiskUsage(Protocol):
    """Where the cleanup reads partition usage from: the real file system, or a settable fake in tests
    (86 % or 91 % cannot be produced by filling a test machine's disk)."""

    def ratio(self, path: str) -> float:
        """:func:`disk_usage_ratio` of the partition holding ``path``; -1 if the path does not exist."""
        ...


class PartitionUsage:
    """The real :class:`DiskUsage`: ``statvfs`` of the path, as the broker's ``File.getTotalSpace`` etc."""

    def ratio(self, path: str) -> float:
        try:
            st = os.statvfs(path)
        except OSError:
            return -1.0
        return disk_usage_ratio(
            st.f_blocks * st.f_frsize, st.f_bfree * st.f_frsize, st.f_bavail * st.f_frsize
        )


class FakeDiskUsage:
    """A :class:`DiskUsage` that reports whatever ``level`` a test sets, for every path."""

    def __init__(self, level: float = 0.5) -> None:
        self.level = level

    def ratio(self, path: str) -> float:
        return self.level


def is_delete_hour(now_ms: int, delete_when: str) -> bool:
    """True during any local hour listed in ``delete_when`` (``"04"``, ``"04;16"``)."""
    hour = time.localtime(now_ms / 1000).tm_hour
    return any(part.strip() and int(part) == hour for part in delete_when.split(";"))


def is_expired(mtime_ms: int, now_ms: int, reserved_hours: int) -> bool:
    """A file expires ``file_reserved_time`` hours after its last modification
    (docs/store-format.md §expired-files)."""
    return now_ms >= mtime_ms + reserved_hours * 3_600_000


@dataclass(frozen=True, slots=True)
class CleanupDecision:
    """What one cleanup run does: ``delete`` expired files, ``forcibly`` also unexpired ones, and
    whether the store is ``disk_full`` (puts refused)."""

    delete: bool
    forcibly: bool
    disk_full: bool


def max_used_percent(config: StoreConfig) -> int:
    """``diskMaxUsedSpaceRatio`` as the broker applies it: clamped to 10..95
    (docs/store-format.md §disk-watermarks)."""
    return min(max(config.disk_max_used_space_ratio, 10), 95)


def decide(ratio: float, config: StoreConfig, *, delete_hour: bool, manual: bool) -> CleanupDecision:
    """Apply the watermarks of docs/store-format.md §disk-watermarks to a partition usage ``ratio`` (-1:
    cannot be measured)."""
    max_used = max_used_percent(config) / 100
    warning = config.disk_space_warning_level_ratio / 100
    forcibly_ratio = config.disk_space_clean_forcibly_ratio / 100
    disk_full = ratio > warning
    clean_now = ratio > forcibly_ratio
    space = ratio > max_used or ratio < 0
    return CleanupDecision(
        delete=delete_hour or space or manual or clean_now,
        # never on a DLedger member: its files are the group's log, and a member that dropped entries it
        # acknowledged could still be elected (its log end is current) and then not serve them
        forcibly=clean_now and config.clean_file_forcibly_enable and not config.enable_dleger_commit_log,
        disk_full=disk_full,
    )


# ------------------------------------------------------------------------------------- the plan


@dataclass(frozen=True, slots=True)
class LogFile:
    """A CommitLog file as the plan sees it: where it starts, what deleting it frees, its mtime."""

    path: str
    from_offset: int
    size: int
    mtime_ms: int

    @property
    def name(self) -> str:
        return os.path.basename(self.path)


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    """A consumer group's committed (next-to-consume) offset on one queue."""

    group: str
    topic: str
    queue_id: int
    offset: int


def committed_offsets(table: Mapping[str, Mapping[int, int]]) -> list[CommittedOffset]:
    """Every group's committed offset on every queue of a ``topic@group`` table (``consumerOffset.json``)."""
    out: list[CommittedOffset] = []
    for key, queues in table.items():
        topic, _, group = key.partition("@")
        out.extend(CommittedOffset(group, topic, qid, off) for qid, off in sorted(queues.items()))
    return out


FirstOffsetAt = Callable[[str, int, int], int]
"""``(topic, queue_id, phys) -> `` the first queue offset whose message is at CommitLog offset ``phys`` or
later (the queue's max offset when there is none), found through the ConsumeQueue."""

EXPIRED = "expired"
WATERMARK = "watermark"


@dataclass(frozen=True, slots=True)
class PlanRow:
    """One CommitLog file: its age, whether it is expired, whether (and why) the plan deletes it, and per
    group how many of its messages that group has not consumed yet."""

    file: LogFile
    age_ms: int
    expired: bool
    reason: str | None  # EXPIRED, WATERMARK, or None: kept
    unconsumed: dict[str, int] = field(default_factory=dict)

    @property
    def deletable(self) -> bool:
        return self.reason is not None

    @property
    def consumed_by_all(self) -> bool:
        return not any(self.unconsumed.values())


@dataclass(frozen=True, slots=True)
class CleanPlan:
    """What a cleanup would do now: the usage it saw, the decision, and every file in order."""

    ratio: float
    decision: CleanupDecision
    reserved_hours: int
    watermark: int  # percent: above it expired files go without waiting for deleteWhen
    force_watermark: int  # percent: above it unexpired files go too
    rows: list[PlanRow]

    @property
    def deletable(self) -> list[PlanRow]:
        return [r for r in self.rows if r.deletable]

    @property
    def reclaimable_bytes(self) -> int:
        return sum(r.file.size for r in self.deletable)

    @property
    def new_min_offset(self) -> int:
        """The CommitLog min offset once the plan is applied."""
        kept = [r for r in self.rows if not r.deletable]
        return kept[0].file.from_offset if kept else 0

    def losses(self) -> dict[str, int]:
        """Per group, the unconsumed messages the deletable files hold (groups that lose none are left out)."""
        return total_losses(r.unconsumed for r in self.deletable)


def total_losses(per_file: Iterable[dict[str, int]]) -> dict[str, int]:
    """Sum per-file unconsumed counts by group, leaving out groups that lose nothing."""
    out: dict[str, int] = {}
    for counts in per_file:
        for group, n in counts.items():
            if n:
                out[group] = out.get(group, 0) + n
    return dict(sorted(out.items()))


def select_files(
    files: Sequence[LogFile], now_ms: int, reserved_hours: int, *, forcibly: bool
) -> list[str | None]:
    """The deletion rule of docs/store-format.md §expired-files, per file in name order: ``EXPIRED`` /
    ``WATERMARK`` (deleted although young, because usage is above the force watermark) or ``None`` (kept).
    Never the newest file, and nothing after the first file that is kept."""
    reasons: list[str | None] = [None] * len(files)
    for i, f in enumerate(files[:-1]):
        if is_expired(f.mtime_ms, now_ms, reserved_hours):
            reasons[i] = EXPIRED
        elif forcibly:
            reasons[i] = WATERMARK
        else:
            break
    return reasons


def unconsumed_per_file(
    files: Sequence[LogFile], offsets: Iterable[CommittedOffset], first_offset_at: FirstOffsetAt
) -> list[dict[str, int]]:
    """Per file, per group: messages stored in that file at or after the group's committed offset.

    Queue offsets grow with CommitLog offsets, so a file ``[start, end)`` holds queue offsets
    ``[first_offset_at(start), first_offset_at(end))`` of every queue.
    """
    out: list[dict[str, int]] = [{} for _ in files]
    if not files:
        return out
    bounds = [f.from_offset for f in files] + [files[-1].from_offset + files[-1].size]
    cache: dict[tuple[str, int], list[int]] = {}
    for co in offsets:
        if co.offset < 0:
            continue
        key = (co.topic, co.queue_id)
        qs = cache.get(key)
        if qs is None:
            qs = cache[key] = [first_offset_at(co.topic, co.queue_id, b) for b in bounds]
        for i, counts in enumerate(out):
            n = qs[i + 1] - max(qs[i], co.offset)
            if n > 0:
                counts[co.group] = counts.get(co.group, 0) + n
            else:
                counts.setdefault(co.group, 0)
    return out


def make_plan(
    files: Sequence[LogFile],
    *,
    now_ms: int,
    ratio: float,
    config: StoreConfig,
    delete_hour: bool,
    manual: bool,
    unconsumed: Sequence[dict[str, int]] | None = None,
) -> CleanPlan:
    """The one cleanup plan: the broker's clean service, ``mqctl store clean`` and ``mqctl broker clean``
    all act on (or show) this, so they cannot disagree."""
    decision = decide(ratio, config, delete_hour=delete_hour, manual=manual)
    reasons = (
        select_files(files, now_ms, config.file_reserved_time, forcibly=decision.forcibly)
        if decision.delete
        else [None] * len(files)
    )
    rows = [
        PlanRow(
            f,
            max(0, now_ms - f.mtime_ms),
            is_expired(f.mtime_ms, now_ms, config.file_reserved_time),
            reason,
            dict(unconsumed[i]) if unconsumed is not None else {},
        )
        for i, (f, reason) in enumerate(zip(files, reasons, strict=True))
    ]
    return CleanPlan(
        ratio,
        decision,
        config.file_reserved_time,
        max_used_percent(config),
        config.disk_space_clean_forcibly_ratio,
        rows,
    )


def consume_queue_expired(cq: ConsumeQueue, commit_log_min_offset: int) -> bool:
    """Every message of the queue is below the CommitLog minimum (``SCHEDULE_TOPIC_XXXX`` is kept)."""
    if cq.topic == SCHEDULE_TOPIC:
        return False
    last = cq.get_unit(cq.max_offset - 1)
    return last is not None and last[0] < commit_log_min_offset


def log_files(commit_log: CommitLog) -> list[LogFile]:
    """The plan's view of a CommitLog's files."""
    out = []
    for mf in commit_log.files.files:
        try:
            st = os.stat(mf.path)
        except FileNotFoundError:  # deleted by a cleanup run meanwhile
            continue
        out.append(LogFile(mf.path, mf.file_from_offset, st.st_size, int(st.st_mtime * 1000)))
    return out


def cq_files_below(cq: ConsumeQueue, min_offset: int) -> list[MappedFile]:
    """The queue's oldest files whose every unit points below CommitLog offset ``min_offset`` (never its
    last file: it keeps the queue's offsets)."""
    doomed = []
    for mf in cq.files.files[:-1]:
        if UNIT.unpack_from(mf.view, cq.file_size - CQ_STORE_UNIT_SIZE)[0] >= min_offset:
            break
        doomed.append(mf)
    return doomed


def index_files_below(files: Sequence[IndexFile], min_offset: int) -> list[IndexFile]:
    """The oldest index files that only point below CommitLog offset ``min_offset`` (never the newest)."""
    stale = []
    for f in files[:-1]:
        if f.end_phy_offset >= min_offset:
            break
        stale.append(f)
    return stale


@dataclass(frozen=True, slots=True)
class Removal:
    """One file applying a plan removes: ``kind`` is ``commitlog``, ``consumequeue`` or ``index``."""

    path: str
    kind: str
    size: int
    why: str


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


def plan_removals(
    plan: CleanPlan, consume_queues: Iterable[ConsumeQueue], index_files: Sequence[IndexFile]
) -> list[Removal]:
    """Every file applying ``plan`` removes, in the order to remove them: its CommitLog files oldest first
    (the store stays consistent if it stops half-way), then the ConsumeQueue and index files that only point
    below its new minimum. Read from a store opened read-only, so an offline cleanup can name them all
    before it deletes one."""
    doomed = plan.deletable
    if not doomed:
        return []
    out = [Removal(r.file.path, "commitlog", r.file.size, r.reason or EXPIRED) for r in doomed]
    new_min = plan.new_min_offset
    below = f"below the new min offset {new_min}"
    for cq in sorted(consume_queues, key=lambda q: (q.topic, q.queue_id)):
        out += [Removal(mf.path, "consumequeue", _size(mf.path), below) for mf in cq_files_below(cq, new_min)]
    out += [Removal(f.path, "index", _size(f.path), below) for f in index_files_below(index_files, new_min)]
    return out


def remove_files(removals: Iterable[Removal]) -> list[Removal]:
    """Unlink exactly these files (an offline store, its lock held by the caller); returns those removed
    (one already gone is skipped: the caller reports what really left the disk)."""
    done = []
    for r in removals:
        try:
            os.unlink(r.path)
        except FileNotFoundError:
            log.warning("%s is already gone", r.path)
            continue
        log.info("deleted %s file %s (%s)", r.kind, r.path, r.why)
        done.append(r)
    return done


# ------------------------------------------------------------------------------------- the service


class Cleaner:
    """Deletes CommitLog, ConsumeQueue and index files per docs/store-format.md §expired-files.

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
        disk_usage: DiskUsage | None = None,
        stop: threading.Event | None = None,
        unconsumed: Callable[[Sequence[LogFile]], Sequence[dict[str, int]]] | None = None,
    ) -> None:
        self.config = config
        self.unconsumed = unconsumed  # per file, per group: what a forcible run destroys (logged)
        self.commit_log = commit_log
        self.consume_queues = consume_queues
        self.index = index
        self.lock = lock
        self.disk_usage: DiskUsage = disk_usage or PartitionUsage()
        self.stop = stop or threading.Event()
        self.manual_runs = 0
        #: The end of the last file a bounded manual trigger may delete (None: any expired file).
        self.manual_up_to: int | None = None
        self.disk_full = False
        self._last_min_offset = commit_log.min_offset
        #: The retention the store started with: deletions after a change at run time that shortens it
        #: (UPDATE_BROKER_CONFIG) are logged at ERROR with what they destroy, as the watermark's are.
        self._started_policy = self._policy()

    def _policy(self) -> dict[str, int]:
        c = self.config
        return {
            "fileReservedTime": c.file_reserved_time,
            "diskMaxUsedSpaceRatio": max_used_percent(c),
            "diskSpaceCleanForciblyRatio": c.disk_space_clean_forcibly_ratio,
        }

    def shortened(self) -> list[str]:
        """The retention keys lowered since start, as ``key a -> b``."""
        now = self._policy()
        return [f"{k} {v} -> {now[k]}" for k, v in self._started_policy.items() if now[k] < v]

    def request_manual_delete(self, up_to: int | None = None) -> None:
        """``DELETE_EXPIRED_COMMITLOG``: act as if it were ``delete_when`` for the next 20 runs
        (docs/store-format.md §manual-deletion). ``up_to`` (mqctl's ``broker clean --execute``): what only
        the trigger deletes ends at or below this CommitLog offset, the end of the plan the operator saw,
        not a file that expires in the 200 s the runs last."""
        self.manual_runs = MANUAL_DELETE_RUNS
        self.manual_up_to = up_to

    def ratio(self) -> float:
        """Usage that drives the watermarks: the fuller of the CommitLog and ConsumeQueue partitions
        (each is checked in 4.9.8; either one above a watermark triggers); -1 if one cannot be measured."""
        ratios = [
            self.disk_usage.ratio(self.commit_log.files.directory),
            self.disk_usage.ratio(self.config.consume_queue_dir),
        ]
        return -1.0 if min(ratios) < 0 else max(ratios)

    def commit_log_ratio(self) -> float:
        return self.disk_usage.ratio(self.commit_log.files.directory)

    def check_disk_space(self) -> bool:
        """The 10-s disk check of docs/store-format.md §disk-watermarks: full above the warning watermark,
        writable again at or below it."""
        full = self.commit_log_ratio() > self.config.disk_space_warning_level_ratio / 100
        self._set_disk_full(full)
        return full

    def _set_disk_full(self, full: bool) -> None:
        if full != self.disk_full:
            log.warning(
                "disk usage %.2f: store %s",
                self.commit_log_ratio(),
                "full, puts refused" if full else "writable again",
            )
        self.disk_full = full

    def plan(
        self,
        now_ms: int,
        *,
        manual: bool,
        unconsumed: Callable[[Sequence[LogFile]], Sequence[dict[str, int]]] | None = None,
        config: StoreConfig | None = None,
    ) -> CleanPlan:
        """:func:`make_plan` over this store's files and disks (``config`` overrides the policy).

        ``unconsumed`` counts per file of the very list the plan is made of (files read once, so a
        deletion meanwhile cannot shift the counts onto the wrong file)."""
        cfg = config or self.config
        files = log_files(self.commit_log)
        return make_plan(
            files,
            now_ms=now_ms,
            ratio=self.ratio(),
            config=cfg,
            delete_hour=is_delete_hour(now_ms, cfg.delete_when),
            manual=manual,
            unconsumed=unconsumed(files) if unconsumed is not None else None,
        )

    def run_once(self, now_ms: int) -> int:
        """One cleanup run; returns how many CommitLog files were deleted."""
        manual = self.manual_runs > 0
        if manual:
            self.manual_runs -= 1
        plan = self._bounded(self.plan(now_ms, manual=manual), now_ms, manual)
        if plan.decision.disk_full:
            self._set_disk_full(True)
        elif plan.ratio <= self.config.disk_space_clean_forcibly_ratio / 100:  # the run clears it here too
            self._set_disk_full(False)
        forced = any(r.reason == WATERMARK for r in plan.deletable)
        shortened = self.shortened() if plan.deletable else []
        # counted only when unexpired data, or data kept by the retention the store started with, is to go
        if (forced or shortened) and self.unconsumed is not None:
            plan = self._bounded(self.plan(now_ms, manual=manual, unconsumed=self.unconsumed), now_ms, manual)
        deleted = self.delete(plan, batch=DELETE_FILES_BATCH_MAX)
        if forced:
            self._report_forced(plan, plan.deletable[:deleted])
        if shortened:
            self._report_shortened(shortened, plan.deletable[:deleted])
        self.delete_logic_files()
        return deleted

    def _bounded(self, plan: CleanPlan, now_ms: int, manual: bool) -> CleanPlan:
        """A run that deletes only because of a bounded manual trigger keeps every file ending past its
        bound; one the policy runs anyway (deleteWhen's hour, a watermark) is not bounded."""
        up_to = self.manual_up_to
        if not manual or up_to is None:
            return plan
        unprompted = decide(
            plan.ratio, self.config, delete_hour=is_delete_hour(now_ms, self.config.delete_when), manual=False
        )
        if unprompted.delete:
            return plan
        rows = [
            r if r.reason is None or r.file.from_offset + r.file.size <= up_to else replace(r, reason=None)
            for r in plan.rows
        ]
        return replace(plan, rows=rows)

    def _report_shortened(self, shortened: list[str], deleted: Sequence[PlanRow]) -> None:
        """Log at ERROR what a retention lowered at run time deleted (the watermark's rows have their own
        line), with per group how many messages it had not consumed."""
        rows = [r for r in deleted if r.reason != WATERMARK]
        if not rows:
            return
        losses = total_losses(r.unconsumed for r in rows)
        log.error(
            "retention lowered at run time (%s): deleted %s (%s); unconsumed messages "
            "destroyed per group: %s",
            ", ".join(shortened),
            plural(len(rows), "commit log file"),
            ", ".join(r.file.name for r in rows),
            ", ".join(f"{g}={n}" for g, n in losses.items())
            or ("none" if self.unconsumed else "not counted"),
        )

    def _report_forced(self, plan: CleanPlan, deleted: Sequence[PlanRow]) -> None:
        """Log at ERROR what the force watermark destroyed: acknowledged messages not expired yet, and per
        group how many of them it had not consumed (nothing leaves the store silently)."""
        forced = [r for r in deleted if r.reason == WATERMARK]
        if not forced:
            return
        losses = total_losses(r.unconsumed for r in forced)
        log.error(
            "disk usage %.2f above diskSpaceCleanForciblyRatio (%d%%): deleted %s "
            "(%s); unconsumed messages destroyed per group: %s (cleanFileForciblyEnable=false or "
            "diskSpaceCleanForciblyRatio>=100 turns this off)",
            plan.ratio,
            plan.force_watermark,
            plural(len(forced), "unexpired commit log file"),
            ", ".join(r.file.name for r in forced),
            ", ".join(f"{g}={n}" for g, n in losses.items())
            or ("none" if self.unconsumed else "not counted"),
        )

    def delete(self, plan: CleanPlan, *, batch: int | None = None) -> int:
        """Delete the plan's files oldest first, at most ``batch`` of them (``None``: all); never a file
        that is no longer the first one (the plan is stale then)."""
        deleted = 0
        for row in plan.deletable[:batch]:
            with self.lock:
                files = self.commit_log.files.files
                if len(files) < 2 or files[0].path != row.file.path:
                    break
                # a new list: readers holding the old one stay consistent
                self.commit_log.files.files = files[1:]
            log.info("deleting commit log file %s (%s)", row.file.path, row.reason)
            files[0].destroy()
            self.commit_log.first_files_deleted()
            deleted += 1
            if deleted < len(plan.deletable[:batch]) and self.stop.wait(
                self.config.delete_commit_log_files_interval / 1000
            ):
                break
        return deleted

    def delete_logic_files(self) -> None:
        """Drop ConsumeQueue and index files that only point below the CommitLog minimum
        (docs/store-format.md §queue-and-index-cleanup)."""
        min_offset = self.commit_log.min_offset
        if min_offset <= self._last_min_offset:
            return
        self._last_min_offset = min_offset
        for cq in self.consume_queues():
            doomed = cq_files_below(cq, min_offset)
            with self.lock:
                if doomed:
                    cq.files.files = cq.files.files[len(doomed) :]
                    cq.min_logic_offset = max(cq.min_logic_offset, cq.files.files[0].file_from_offset)
                cq.correct_min_offset(min_offset)
            for mf in doomed:
                mf.destroy()
        stale = index_files_below(self.index.files, min_offset)
        if stale:
            with self.lock:
                self.index.files = self.index.files[len(stale) :]
            for f in stale:
                f.destroy()

    def expired_consume_queues(self) -> list[ConsumeQueue]:
        """Queues whose last unit points below the CommitLog minimum: all their messages are gone
        (what ``CLEAN_EXPIRED_CONSUMEQUEUE`` destroys; ``SCHEDULE_TOPIC_XXXX`` is kept)."""
        min_offset = self.commit_log.min_offset
        return [cq for cq in self.consume_queues() if consume_queue_expired(cq, min_offset)]
