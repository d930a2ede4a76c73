"""The one cleanup plan (pure functions) and the clean service's per-run rules, on the store directly."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import given, strategies as st

from store import DefaultMessageStore, FakeClock, Message, StoreConfig
from store.cleanup import (
    DELETE_FILES_BATCH_MAX,
    EXPIRED,
    MANUAL_DELETE_RUNS,
    WATERMARK,
    CommittedOffset,
    FakeDiskUsage,
    LogFile,
    make_plan,
    select_files,
    unconsumed_per_file,
)
from tests.support.stores import small_config

H = 3_600_000
NOW = 1_800_000_000_000


def _files(ages_h: list[float], size: int = 100) -> list[LogFile]:
    return [LogFile(f"/cl/{i * size:020d}", i * size, size, int(NOW - a * H)) for i, a in enumerate(ages_h)]


def test_select_files_stops_at_the_first_young_file_and_keeps_the_newest() -> None:
    files = _files([100, 80, 10, 90, 200])
    assert select_files(files, NOW, 72, forcibly=False) == [EXPIRED, EXPIRED, None, None, None]
    assert select_files(files, NOW, 72, forcibly=True) == [EXPIRED, EXPIRED, WATERMARK, EXPIRED, None]
    assert select_files(files[:1], NOW, 0, forcibly=True) == [None]  # the only file is the newest
    assert select_files([], NOW, 0, forcibly=True) == []


@given(st.lists(st.integers(0, 200), min_size=1, max_size=12), st.integers(0, 100), st.booleans())
def test_select_files_invariants(ages: list[int], reserved: int, forcibly: bool) -> None:
    reasons = select_files(_files([float(a) for a in ages]), NOW, reserved, forcibly=forcibly)
    assert reasons[-1] is None
    n = sum(r is not None for r in reasons)
    assert all(r is not None for r in reasons[:n])  # a prefix: nothing after the first kept file
    assert all((r == EXPIRED) == (a >= reserved) for r, a in zip(reasons[:n], ages, strict=False))


def test_unconsumed_counts_per_file_from_committed_offsets() -> None:
    files = _files([1, 1, 1])  # [0,100) [100,200) [200,300)
    # queue T/0: queue offset q is at CommitLog offset 10 * q (30 messages, 10 per file)
    first_at = lambda topic, qid, phys: min(30, -(-phys // 10))  # noqa: E731
    offsets = [
        CommittedOffset("behind", "T", 0, 5),
        CommittedOffset("middle", "T", 0, 15),
        CommittedOffset("done", "T", 0, 30),
        CommittedOffset("never", "T", 0, -1),
    ]
    per_file = unconsumed_per_file(files, offsets, first_at)
    assert per_file == [
        {"behind": 5, "middle": 0, "done": 0},
        {"behind": 10, "middle": 5, "done": 0},
        {"behind": 10, "middle": 10, "done": 0},
    ]
    plan = make_plan(
        files,
        now_ms=NOW,
        ratio=0.5,
        config=StoreConfig(file_reserved_time=0),
        delete_hour=False,
        manual=True,
        unconsumed=per_file,
    )
    assert [r.reason for r in plan.rows] == [EXPIRED, EXPIRED, None]
    assert plan.losses() == {"behind": 15, "middle": 5}
    assert plan.new_min_offset == 200 and plan.reclaimable_bytes == 200
    assert [r.consumed_by_all for r in plan.rows] == [False, False, False]


def test_plan_triggers_follow_the_watermarks() -> None:
    files = _files([100, 1, 1])
    cfg = StoreConfig()
    quiet = make_plan(files, now_ms=NOW, ratio=0.5, config=cfg, delete_hour=False, manual=False)
    assert not quiet.deletable and not quiet.decision.delete
    space = make_plan(files, now_ms=NOW, ratio=0.76, config=cfg, delete_hour=False, manual=False)
    assert [r.reason for r in space.rows] == [EXPIRED, None, None]
    force = make_plan(files, now_ms=NOW, ratio=0.86, config=cfg, delete_hour=False, manual=False)
    assert [r.reason for r in force.rows] == [EXPIRED, WATERMARK, None] and not force.decision.disk_full
    full = make_plan(files, now_ms=NOW, ratio=0.91, config=cfg, delete_hour=False, manual=False)
    assert full.decision.disk_full and (full.watermark, full.force_watermark) == (75, 85)


def _store(root: Path, disk: FakeDiskUsage, clock: FakeClock, *, start: bool = True) -> DefaultMessageStore:
    cfg = small_config(root, delete_commit_log_files_interval=0, delete_when="99")
    store = DefaultMessageStore(cfg, clock=clock, disk_usage=disk, clean_start_delay_ms=3_600_000)
    store.open()
    if start:
        store.start()
    return store


def test_at_most_10_files_per_run_and_the_manual_counter(tmp_path: Path) -> None:
    clock = FakeClock(NOW)
    disk = FakeDiskUsage(0.30)
    store = _store(tmp_path, disk, clock)
    try:
        for _ in range(450):
            assert store.put_message(Message(topic="T", body=b"x" * 2000)).ok
        files = sorted(os.listdir(tmp_path / "commitlog"))
        assert len(files) >= 13
        store.commit_log.flush()
        for name in files:
            os.utime(tmp_path / "commitlog" / name, ((NOW - 100 * H) / 1000,) * 2)
        assert store.cleaner.run_once(NOW) == 0  # expired, but no trigger
        store.delete_expired_files_manually()
        assert store.cleaner.run_once(NOW) == DELETE_FILES_BATCH_MAX
        assert store.cleaner.manual_runs == MANUAL_DELETE_RUNS - 1
        assert store.cleaner.run_once(NOW) == len(files) - 1 - DELETE_FILES_BATCH_MAX
        assert sorted(os.listdir(tmp_path / "commitlog")) == files[-1:]
        for _ in range(MANUAL_DELETE_RUNS):
            store.cleaner.run_once(NOW)
        assert store.cleaner.manual_runs == 0
    finally:
        store.shutdown()


def test_disk_check_clears_at_90_the_cleanup_run_at_85(tmp_path: Path) -> None:
    disk = FakeDiskUsage(0.91)
    store = _store(tmp_path, disk, FakeClock(NOW), start=False)  # no background disk check racing the test
    try:
        assert store.cleaner.check_disk_space() and store.disk_full
        disk.level = 0.88
        store.cleaner.run_once(NOW)
        assert store.disk_full  # between the watermarks the cleanup run leaves the flag as it is
        assert not store.cleaner.check_disk_space() and not store.disk_full
        disk.level = 0.95
        store.cleaner.run_once(NOW)
        assert store.disk_full
        disk.level = 0.85
        store.cleaner.run_once(NOW)
        assert not store.disk_full
        assert store.disk_ratio() == 0.85
    finally:
        store.shutdown()
