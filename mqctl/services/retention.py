"""Retention plans: which CommitLog files a cleanup deletes, why, and whose unconsumed messages go with them.

The plan itself is computed by the store (:func:`store.cleanup.make_plan`), the same function the broker's
clean service acts on, so ``mqctl store clean`` (offline), ``mqctl broker clean`` (online, through the
broker's :data:`~daemon.broker.clean.CLEAN_PLAN` dry run) and the broker never disagree. This module only
opens the store or asks the broker, applies the plan when told to, and shapes the report.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from daemon.broker.clean import CLEAN_PLAN, PlanBody
from daemon.broker.headers import DeleteExpiredCommitLogHeader
from daemon.remoting.codes import RequestCode, ResponseCode
from mqctl.admin import messaging
from mqctl.admin.client import Admin, read_answer
from mqctl.errors import StoreError
from mqctl.output import Rows
from mqctl.services import store_inspect as si
from mqctl.units import plural, size_text
from store import (
    WATERMARK,
    CleanPlan,
    CommittedOffset,
    DefaultMessageStore,
    LogFile,
    Removal,
    StoreConfig,
    ensure_unlocked,
    held_lock,
    make_plan,
    plan_removals,
    remove_files,
    total_losses,
    unconsumed_per_file,
)

log = logging.getLogger(__name__)

_MAX_PULLS = 8


@dataclass
class FileRow:
    """One CommitLog file of a plan."""

    file: str
    from_offset: int
    size: int
    age_ms: int  # tables show it as "3d04h"
    expired: bool
    action: str  # delete / keep
    why: str | None  # expired / watermark
    unconsumed: dict[str, int]  # per group: messages in this file it has not consumed


@dataclass
class RemovalRow:
    """One file an offline cleanup removes (or removed), relative to the store root."""

    file: str
    kind: str  # commitlog / consumequeue / index
    size: int
    why: str


@dataclass
class CleanReport:
    """A plan (and, with ``executed``, its outcome)."""

    target: str
    disk_ratio: float
    reserved_hours: int
    trigger: str
    files: list[FileRow]
    delete_files: int
    reclaimable_bytes: int
    min_offset_after: int | None
    losses: dict[str, int]  # groups that lose unconsumed messages, with counts
    executed: bool = False
    deleted: list[str] = field(default_factory=list)
    note: str | None = None
    recovery: str | None = None  # offline: the recovery step (part of the plan only with --allow-recovery)
    removes: list[RemovalRow] = field(default_factory=list)  # offline: every file --execute removes
    removed: list[RemovalRow] = field(default_factory=list)  # offline, executed: every file removed

    def summary(self) -> str:
        text = (
            f"{self.target}: disk {self.disk_ratio:.0%}, fileReservedTime {self.reserved_hours} h, {self.trigger}; "
            f"{plural(self.delete_files, 'file')} deletable, {size_text(self.reclaimable_bytes)}"
        )
        kept = sum(1 for f in self.files if f.expired and f.action == "keep")
        if kept and self.trigger != "no trigger":  # EXPIRED yes, ACTION keep, and WHY blank said nothing
            text += (
                f"; {plural(kept, 'expired file')} kept: the newest file (being written) is never deleted, nor "
                "any after a file kept (deletion goes oldest first)"
            )
        return text + (f"; deleted {len(self.deleted)}" if self.executed else "")


def _trigger(body: PlanBody) -> str:
    if body.forcibly:
        return f"above the force watermark {body.force_watermark}%: unexpired files too"
    if body.disk_ratio > body.watermark / 100 or body.disk_ratio < 0:
        return (
            f"above the watermark {body.watermark}%: expired files, the broker would not wait for deleteWhen"
        )
    if body.delete:
        return (
            f"expired files (below the watermark {body.watermark}%, the broker waits for deleteWhen "
            "or 'mqctl broker clean --execute')"
        )
    return "no trigger"


def report(target: str, body: PlanBody) -> CleanReport:
    """Shape a plan (from the store or the broker) into the report every command prints."""
    rows = [
        FileRow(
            f.name,
            f.from_offset,
            f.size,
            f.age_ms,
            f.expired,
            "delete" if f.reason else "keep",
            f.reason,
            {g: n for g, n in sorted(f.unconsumed.items()) if n},
        )
        for f in body.files
    ]
    doomed = [f for f in body.files if f.reason]
    kept = [f for f in body.files if not f.reason]
    return CleanReport(
        target,
        body.disk_ratio,
        body.file_reserved_time,
        _trigger(body),
        rows,
        len(doomed),
        sum(f.size for f in doomed),
        kept[0].from_offset if kept else None,
        total_losses(f.unconsumed for f in doomed),
    )


# ------------------------------------------------------------------------------------- offline


def offline_config(
    root: Path, *, reserved_hours: int | None, watermark: int | None, force_watermark: int | None
) -> StoreConfig:
    """The store's file sizes (read from its files) with the retention settings of this run."""
    cfg = si.layout(root).config()
    if reserved_hours is not None:
        cfg.file_reserved_time = reserved_hours
    if watermark is not None:
        cfg.disk_max_used_space_ratio = watermark
    if force_watermark is not None:
        cfg.disk_space_clean_forcibly_ratio = force_watermark
    return cfg


@dataclass(frozen=True)
class RecoveryStep:
    """What the recovery a broker start runs would do to a store, seen from a read-only open: where it
    cuts the CommitLog and which later files it deletes."""

    cause: str
    cut_offset: int
    cut_file: str | None  # None: nothing to cut (no damaged record, no CommitLog file)
    later_files: list[str]
    later_records: int

    def describe(self) -> str:
        if self.cut_file is None:
            return (
                f"store needs recovery: {self.cause}; recovery would rebuild ConsumeQueues and index files "
                f"and keep the CommitLog up to offset {self.cut_offset}"
            )
        at = f"cut the CommitLog at offset {self.cut_offset} (the rest of {self.cut_file})"
        if self.later_files:
            at += (
                f" and delete {plural(len(self.later_files), 'later file')} ({', '.join(self.later_files)}: "
                f"{plural(self.later_records, 'record')})"
            )
        return f"store needs recovery: {self.cause}; recovery would {at}"


@dataclass(frozen=True)
class _OfflineView:
    """A stopped broker's store as a read-only open sees it: the plan, the files applying it removes, and
    the recovery a broker start would run first (None: the store is clean)."""

    plan: CleanPlan
    removals: list[Removal]
    recovery: RecoveryStep | None


def _offline_view(root: Path, config: StoreConfig) -> _OfflineView:
    store = DefaultMessageStore(config, read_only=True)
    store.open()
    try:
        plan = store.cleanup_plan(manual=True)
        queues = [store.get_consume_queue(t, q) for t, q in store.topic_queue_table()]
        removals = plan_removals(plan, [cq for cq in queues if cq is not None], store.index.files)
        return _OfflineView(plan, removals, _recovery_step(root, store))
    finally:
        store.shutdown()


def _recovery_step(root: Path, store: DefaultMessageStore) -> RecoveryStep | None:
    """The recovery a read-only open skipped: an ``abort`` file, a damaged record or a torn tail."""
    corruption = store.recovery_corruption
    if store.last_exit_ok and corruption is None:
        return None
    causes = [] if store.last_exit_ok else ["the broker did not shut down cleanly (abort file present)"]
    if corruption is not None:
        where = os.path.basename(corruption.path or "?")
        causes.append(f"a bad record at offset {corruption.offset} in {where} ({corruption.reason})")
    files = store.commit_log.files.files
    if corruption is None or not files:
        return RecoveryStep("; ".join(causes), store.max_phy_offset, None, [], 0)
    cut_file = files[-1]  # the read-only open stopped where recovery would cut
    later = [scan for scan in si.commitlog_ls(root) if scan["from_offset"] > cut_file.file_from_offset]
    return RecoveryStep(
        "; ".join(causes),
        store.max_phy_offset,
        os.path.basename(cut_file.path),
        [scan["file"] for scan in later],
        sum(scan["records"] for scan in later),
    )


def _rows(root: Path, removals: Iterable[Removal]) -> list[RemovalRow]:
    return [RemovalRow(os.path.relpath(r.path, root), r.kind, r.size, r.why) for r in removals]


def _store_files(root: Path) -> dict[str, int]:
    """Every CommitLog, ConsumeQueue and index file under ``root`` with its size (what recovery may remove)."""
    out = {}
    for sub in ("commitlog", "consumequeue", "index"):
        for dirpath, _dirs, names in os.walk(root / sub):
            for name in names:
                path = os.path.join(dirpath, name)
                out[os.path.relpath(path, root)] = os.stat(path).st_size
    return out


Confirm = Callable[[CleanReport], None]


def store_clean(
    root: Path,
    config: StoreConfig,
    *,
    execute: bool,
    allow_recovery: bool = False,
    confirm: Confirm | None = None,
) -> CleanReport:
    """Plan (and with ``execute`` apply exactly) a cleanup of a stopped broker's store, as if an operator had
    triggered it (expired files whatever the hour; unexpired ones only above the force watermark).

    The plan comes from a read-only open and names every file it removes: CommitLog files and the
    ConsumeQueue and index files below the new minimum. Executing deletes exactly those, with the store's
    lock held and without running recovery. A store that needs recovery (``abort`` file, damaged record,
    torn tail) is refused (``StoreError``) unless ``allow_recovery``: then the plan shows the recovery step
    and executing runs it (one store start, as a broker's) before the same deletions. ``confirm`` sees the
    plan before anything changes. Refuses (``StoreLockedError``) when a broker holds the lock, even to plan.
    """
    ensure_unlocked(str(root))
    view = _offline_view(root, config)  # read-only, so the ages shown are the files' own, not our open's
    rep = report(str(root), PlanBody.of(view.plan, disk_full=False))
    rep.removes = _rows(root, view.removals)
    if view.recovery is not None:
        needs = view.recovery.describe()
        if execute and not allow_recovery:
            raise StoreError(f"{needs}; nothing deleted: start the broker once or pass --allow-recovery")
        rep.recovery = needs if allow_recovery else None
        rep.note = (
            "--execute runs this recovery first, then the plan"
            if allow_recovery
            else f"{needs}; --execute refuses unless --allow-recovery"
        )
    if not execute or not (view.removals or view.recovery):
        return rep
    if confirm is not None:
        confirm(rep)
    if view.recovery is not None:
        return _execute_with_recovery(root, config, view, rep)
    with held_lock(str(root)):  # no broker starts meanwhile; the plan is checked again under it
        again = _offline_view(root, config)
        if again.recovery is not None or [r.path for r in again.removals] != [r.path for r in view.removals]:
            raise StoreError("the store changed since the plan was made; nothing deleted: plan again")
        removed = remove_files(view.removals)
    return _executed(rep, root, removed, min_offset=view.plan.new_min_offset)


def _executed(rep: CleanReport, root: Path, removed: list[Removal], *, min_offset: int) -> CleanReport:
    rep.executed = True
    rep.removed = _rows(root, removed)
    rep.deleted = [os.path.basename(r.path) for r in removed if r.kind == "commitlog"]
    rep.min_offset_after = min_offset
    log.info("removed %s (%d CommitLog) from %s", plural(len(removed), "file"), len(rep.deleted), root)
    return rep


def _execute_with_recovery(
    root: Path, config: StoreConfig, view: _OfflineView, rep: CleanReport
) -> CleanReport:
    """The recovery a broker start runs (the store's own lock held throughout), then the plan's deletions if
    recovery left the plan as shown; what left the disk is read back from the disk."""
    before = _store_files(root)
    planned = {os.path.relpath(r.path, root): r for r in view.removals}
    store = DefaultMessageStore(config, keep_replica_mark=True)  # (whether it is a slave's is not known)
    store.open()  # takes the lock and recovers
    try:
        store.start()  # dispatches what the ConsumeQueues miss; a clean shutdown then clears ``abort``
        plan = store.cleanup_plan(manual=True)
        same = [r.file.path for r in plan.deletable] == [r.file.path for r in view.plan.deletable]
        if same:
            store.apply_cleanup_plan(plan)
        min_offset = store.min_phy_offset
    finally:
        store.shutdown()
    after = _store_files(root)
    gone = [
        planned.get(path) or Removal(str(root / path), _kind(path), size, "recovery")
        for path, size in sorted(before.items())
        if path not in after
    ]
    _executed(rep, root, gone, min_offset=min_offset)
    rep.note = (
        None if same else "recovery changed the plan: only recovery ran, nothing else deleted; plan again"
    )
    return rep


def _kind(relpath: str) -> str:
    return relpath.split(os.sep, 1)[0]


def _offline_plan(config: StoreConfig) -> CleanPlan:
    store = DefaultMessageStore(config, read_only=True)
    store.open()
    try:
        return store.cleanup_plan(manual=True)
    finally:
        store.shutdown()


class FileRetention(TypedDict, total=False):
    """A CommitLog file's retention, as a cleanup triggered now would see it (none for a file it skips)."""

    age_ms: int
    expired: bool
    reclaimable: int
    consumed_by_all_groups: bool


class CommitLogRetention(si.CommitLogFile, FileRetention):
    """A row of ``store retention files``: the file's scan, then its retention."""


def commitlog_files(
    root: Path, *, reserved_hours: int | None, progress: si.Progress | None = None
) -> list[CommitLogRetention]:
    """Each CommitLog file's scan (:func:`store_inspect.commitlog_ls`) with its retention: age, expired,
    reclaimable bytes (what a cleanup triggered now would free) and whether every group has consumed all
    of its messages. Read-only; safe on a running broker's store."""
    scans = si.commitlog_ls(root, progress=progress)
    config = offline_config(root, reserved_hours=reserved_hours, watermark=None, force_watermark=None)
    retention: dict[str, FileRetention] = {
        r.file.name: {
            "age_ms": r.age_ms,
            "expired": r.expired,
            "reclaimable": r.file.size if r.deletable and r.reason != WATERMARK else 0,
            "consumed_by_all_groups": r.consumed_by_all,
        }
        for r in _offline_plan(config).rows
    }
    return Rows.of(CommitLogRetention, ({**scan, **retention.get(scan["file"], {})} for scan in scans))


# -------------------------------------------------------------------------------------- online


def _broker_store_config(props: dict[str, str]) -> StoreConfig:
    """The retention settings GET_BROKER_CONFIG shows (the force watermark is a JVM property: default)."""
    cfg = StoreConfig()
    cfg.mapped_file_size_commit_log = int(
        props.get("mappedFileSizeCommitLog", cfg.mapped_file_size_commit_log)
    )
    cfg.file_reserved_time = int(props.get("fileReservedTime", cfg.file_reserved_time))
    cfg.disk_max_used_space_ratio = int(props.get("diskMaxUsedSpaceRatio", cfg.disk_max_used_space_ratio))
    cfg.clean_file_forcibly_enable = props.get("cleanFileForciblyEnable", "true").lower() == "true"
    cfg.delete_when = props.get("deleteWhen", cfg.delete_when)
    return cfg


async def _first_offset_at(admin: Admin, addr: str, topic: str, queue_id: int, phys: int, guess: int) -> int:
    """The first queue offset whose message is at CommitLog offset ``phys`` or later, found by pulling (never
    committing) around ``guess``: a timestamp search lands near it, but messages stored in the same
    millisecond make it ambiguous. A few pulls at most; the guess if they do not settle it."""
    start = max(0, guess - 8)
    for _ in range(_MAX_PULLS):
        res = await messaging.pull(admin, addr, topic, queue_id, start, max_nums=32)
        if not res.found:
            if res.next_begin_offset > start:  # below the queue's min offset: moved there
                start = res.next_begin_offset
                continue
            return start  # nothing at or after start
        first = res.messages[0]
        if first.commit_log_offset >= phys:
            if first.queue_offset <= res.min_offset:
                return first.queue_offset
            start = max(res.min_offset, first.queue_offset - 32)  # went too far: step back
            continue
        hit = next((m for m in res.messages if m.commit_log_offset >= phys), None)
        if hit is not None:
            return hit.queue_offset
        start = res.messages[-1].queue_offset + 1
    return guess


async def estimated_plan(admin: Admin, addr: str, info: dict[str, str]) -> PlanBody:
    """:func:`store.cleanup.make_plan` fed from standard 4.x requests only (runtime info, broker config,
    VIEW_MESSAGE_BY_ID, GET_ALL_CONSUMER_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP, PULL_MESSAGE, GET_MAX_OFFSET), for brokers
    that expose no file list. A file's mtime is taken as the store time of the next file's first message
    (the moment it filled up); the newest file, never deleted, gets "now"."""
    config = _broker_store_config(await admin.broker_config(addr))
    size = config.mapped_file_size_commit_log
    lo, hi = int(info.get("commitLogMinOffset", "0")), int(info.get("commitLogMaxOffset", "0"))
    starts = list(range(lo - lo % size, hi, size)) if hi > lo else []
    firsts = [
        m.store_timestamp for m in await asyncio.gather(*(messaging.view(admin, addr, s) for s in starts))
    ]
    now = int(time.time() * 1000)
    files = [
        LogFile(f"{s:020d}", s, size, firsts[i + 1] if i + 1 < len(starts) else now)
        for i, s in enumerate(starts)
    ]
    ratio = float(info.get("commitLogDiskRatio", "-1"))
    plan = make_plan(files, now_ms=now, ratio=ratio, config=config, delete_hour=False, manual=True)
    doomed = len(plan.deletable)
    if doomed:  # counts only where they matter: the deletable files and the first one kept
        committed = [
            CommittedOffset(group, topic, queue_id, offset)
            for (group, topic, queue_id), offset in (await admin.all_consumer_offsets(addr)).items()
        ]
        # queue offset at each boundary: the first message stored at or after the boundary's first message
        stamps = {f.from_offset: firsts[i] for i, f in enumerate(files[: doomed + 2])}
        end = files[doomed].from_offset + size  # the first kept file's end; past the data if it is the newest

        async def offsets_at(topic: str, queue_id: int) -> tuple[tuple[str, int], dict[int, int]]:
            out = {}
            for b, ts in stamps.items():
                guess = await admin.search_offset(addr, topic, queue_id, ts)
                out[b] = await _first_offset_at(admin, addr, topic, queue_id, b, guess)
            if end not in out:
                out[end] = await admin.max_offset(addr, topic, queue_id)
            return (topic, queue_id), out

        table = dict(
            await asyncio.gather(*(offsets_at(t, q) for t, q in {(c.topic, c.queue_id) for c in committed}))
        )
        considered = files[: doomed + 1]
        per_file = unconsumed_per_file(considered, committed, lambda t, q, phys: table[(t, q)][phys])
        per_file += [{} for _ in files[doomed + 1 :]]
        plan = make_plan(
            files, now_ms=now, ratio=ratio, config=config, delete_hour=False, manual=True, unconsumed=per_file
        )
    return PlanBody.of(plan, disk_full=ratio > config.disk_space_warning_level_ratio / 100)


async def broker_plan(admin: Admin, addr: str) -> PlanBody | None:
    """The broker's own dry-run cleanup plan (mqctl's CLEAN_PLAN request), or None from a broker without
    it (RocketMQ answers REQUEST_CODE_NOT_SUPPORTED)."""
    response = await admin.call(
        addr, CLEAN_PLAN, expect=(ResponseCode.SUCCESS, ResponseCode.REQUEST_CODE_NOT_SUPPORTED)
    )
    return (
        read_answer(PlanBody.loads, response, CLEAN_PLAN) if response.code == ResponseCode.SUCCESS else None
    )


async def broker_clean(admin: Admin, addr: str, *, execute: bool, wait: float) -> CleanReport:
    """The broker's own plan (dry run), then with ``execute`` a manual trigger (329) and the outcome seen
    through runtime info (``commitLogMinOffset``) within ``wait`` seconds: the broker deletes at its next
    cleanup runs (every 10 s; the first one 60 s after it started)."""
    plan = await broker_plan(admin, addr)
    info = await admin.broker_runtime_info(addr)
    min_before = int(info.get("commitLogMinOffset", "0"))
    if plan is not None:
        rep = report(addr, plan)
    else:  # a RocketMQ broker: the same plan from what it exposes, with estimated file ages
        rep = report(addr, await estimated_plan(admin, addr, info))
        rep.note = (
            "estimated: this broker does not answer mqctl's plan request (a RocketMQ broker?), so file ages "
            "are the store time of the next file's first message; counts come from offset searches and pulls"
        )
    if not execute:
        return rep
    # the trigger's runs last about 200 s: what they delete only because of it is bounded to the plan
    # shown (an mqctl broker reads the bound; a RocketMQ broker ignores the field)
    doomed = [f for f in rep.files if f.action == "delete"]
    up_to = doomed[-1].from_offset + doomed[-1].size if doomed else min_before
    await admin.call(addr, RequestCode.DELETE_EXPIRED_COMMITLOG, DeleteExpiredCommitLogHeader(up_to))
    rep.executed = True
    target = rep.min_offset_after if rep.delete_files else None
    deadline = time.monotonic() + wait
    min_after = min_before
    while target is not None and min_after < target and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        min_after = int((await admin.broker_runtime_info(addr)).get("commitLogMinOffset", "0"))
    rep.min_offset_after = min_after
    rep.deleted = [
        f.file for f in rep.files if f.from_offset + f.size <= min_after and f.from_offset >= min_before
    ]
    if target is not None and min_after < target:
        rep.note = (
            f"after {wait:g} s the broker has deleted {len(rep.deleted)} of {plural(rep.delete_files, 'file')}; "
            "it goes on at its next cleanup runs (every 10 s, for about 200 s after the trigger)"
        )
    return rep
