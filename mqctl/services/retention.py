"""Retention plans: which CommitLog files a cleanup deletes, why, and whose unconsumed messages go with them.

The plan itself is computed by the store (:func:`store.cleanup.make_plan`), the same function the broker's
clean service acts on, so ``mqctl store clean`` (offline), ``mqctl broker clean`` (online, through the
broker's :data:`~daemon.broker.clean.CLEAN_PLAN` dry run) and the broker never disagree. This module only
opens the store or asks the broker, applies the plan when told to, and shapes the report.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from daemon.broker.clean import CLEAN_PLAN, PlanBody
from daemon.remoting.codes import RequestCode, ResponseCode
from mqctl.admin import messaging
from mqctl.admin.client import Admin
from mqctl.services import store_inspect as si
from store.cleanup import (
    WATERMARK,
    CleanPlan,
    CommittedOffset,
    LogFile,
    make_plan,
    total_losses,
    unconsumed_per_file,
)
from store.config import StoreConfig
from store.engine import DefaultMessageStore, ensure_unlocked

log = logging.getLogger(__name__)

_MAX_PULLS = 8


@dataclass
class FileRow:
    """One CommitLog file of a plan."""

    file: str
    from_offset: int
    size: int
    age: str
    expired: bool
    action: str  # delete / keep
    why: str | None  # expired / watermark
    unconsumed: dict[str, int]  # per group: messages in this file it has not consumed


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

    def summary(self) -> str:
        text = (
            f"{self.target}: disk {self.disk_ratio:.0%}, fileReservedTime {self.reserved_hours} h, {self.trigger}; "
            f"{self.delete_files} file(s) deletable, {self.reclaimable_bytes} bytes"
        )
        return text + (f"; deleted {len(self.deleted)}" if self.executed else "")


def age_text(ms: int) -> str:
    """``3d 04h``, ``5h 12m``, ``12m 05s``: an age at a glance."""
    s = ms // 1000
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    if d:
        return f"{d}d {h:02d}h"
    if h:
        return f"{h}h {m:02d}m"
    return f"{m}m {s:02d}s"


def _trigger(body: PlanBody) -> str:
    if body.forcibly:
        return f"above the force watermark {body.force_watermark}%: unexpired files too"
    if body.disk_ratio > body.watermark / 100 or body.disk_ratio < 0:
        return (
            f"above the watermark {body.watermark}%: expired files, the broker would not wait for deleteWhen"
        )
    if body.delete:
        return (
            f"expired files (below the watermark {body.watermark}%, the broker waits for deleteWhen or 329)"
        )
    return "no trigger"


def report(target: str, body: PlanBody) -> CleanReport:
    """Shape a plan (from the store or the broker) into the report every command prints."""
    rows = [
        FileRow(
            f.name,
            f.from_offset,
            f.size,
            age_text(f.age_ms),
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


def store_clean(root: Path, config: StoreConfig, *, execute: bool) -> CleanReport:
    """Plan (and with ``execute`` apply) a cleanup of a stopped broker's store, as if an operator had
    triggered it (expired files whatever the hour; unexpired ones only above the force watermark).

    Refuses (``StoreLockedError``) when a broker holds the store's lock, even for a dry run.
    """
    ensure_unlocked(str(root))
    plan = _offline_plan(config)  # read-only, so the ages shown are the files' own, not our open's
    rep = report(str(root), PlanBody.of(plan, disk_full=False))
    if not execute:
        return rep
    store = DefaultMessageStore(config)  # takes the lock: a broker started meanwhile makes this fail
    store.open()
    try:
        deleted = store.apply_cleanup_plan(plan)  # stops at a file that is no longer first
        rep.min_offset_after = store.min_phy_offset
    finally:
        store.shutdown()
    rep.executed = True
    rep.deleted = [r.file.name for r in plan.deletable[:deleted]]
    log.info("deleted %d CommitLog file(s) from %s", deleted, root)
    return rep


def _offline_plan(config: StoreConfig) -> CleanPlan:
    store = DefaultMessageStore(config, read_only=True)
    store.open()
    try:
        return store.cleanup_plan(manual=True)
    finally:
        store.shutdown()


def commitlog_files(
    root: Path, *, reserved_hours: int | None, progress: si.Progress | None = None
) -> list[dict[str, Any]]:
    """Each CommitLog file's scan (:func:`store_inspect.commitlog_ls`) with its retention: age, expired,
    reclaimable bytes (what a cleanup triggered now would free) and whether every group has consumed all
    of its messages. Read-only; safe on a running broker's store."""
    scans = si.commitlog_ls(root, progress=progress)
    config = offline_config(root, reserved_hours=reserved_hours, watermark=None, force_watermark=None)
    retention = {
        r.file.name: {
            "age": age_text(r.age_ms),
            "expired": r.expired,
            "reclaimable": r.file.size if r.deletable and r.reason != WATERMARK else 0,
            "consumed_by_all_groups": r.consumed_by_all,
        }
        for r in _offline_plan(config).rows
    }
    return [{**asdict(scan), **retention.get(scan.file, {})} for scan in scans]


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
    return PlanBody.loads(response.body) if response.code == ResponseCode.SUCCESS else None


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
    await admin.call(addr, RequestCode.DELETE_EXPIRED_COMMITLOG)
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
            f"after {wait:g} s the broker has deleted {len(rep.deleted)} of {rep.delete_files} file(s); "
            "it goes on at its next cleanup runs (every 10 s, for about 200 s after the trigger)"
        )
    return rep
