"""The timer progress files: a snapshot plus done logs, read back after every crash point."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from store.errors import StoreError
from store.timer_state import LOG_PREFIX, PendingTimer, TimerProgress, TimerSnapshot


def timer(offset: int) -> PendingTimer:
    return PendingTimer(offset, 1_000 + offset, offset * 100, 100, 500, "T", f"K{offset}")


def test_nothing_on_disk_is_an_empty_start(tmp_path: Path) -> None:
    snapshot, done = TimerProgress(str(tmp_path / "timer")).load()
    assert snapshot == TimerSnapshot() and done == set()


def test_done_offsets_after_the_snapshot_are_read_back(tmp_path: Path) -> None:
    p = TimerProgress(str(tmp_path))
    p.load()
    gen = p.rotate()
    p.write_snapshot(TimerSnapshot(gen, 3, [timer(0), timer(1), timer(2)]))
    p.record_done(1)
    p.record_done(5)  # read from the queue after the snapshot, delivered too
    p.close()
    snapshot, done = TimerProgress(str(tmp_path)).load()
    assert snapshot.enqueued == 3 and snapshot.pending == [timer(0), timer(1), timer(2)]
    assert done == {1, 5}


def test_a_crash_before_the_snapshot_is_written_keeps_the_old_one_and_every_log(tmp_path: Path) -> None:
    p = TimerProgress(str(tmp_path))
    p.load()
    p.write_snapshot(TimerSnapshot(p.rotate(), 2, [timer(0), timer(1)]))
    p.record_done(0)
    p.rotate()  # a snapshot began: a new log, then the crash before its file replaced the old one
    p.record_done(1)
    p.close()
    snapshot, done = TimerProgress(str(tmp_path)).load()
    assert snapshot.generation == 1 and done == {0, 1}


def test_logs_older_than_the_snapshot_are_ignored_and_go_with_the_next_one(tmp_path: Path) -> None:
    p = TimerProgress(str(tmp_path))
    p.load()
    p.record_done(7)  # generation 0's log
    p.write_snapshot(TimerSnapshot(p.rotate(), 9, [timer(8)]))
    p.close()
    snapshot, done = TimerProgress(str(tmp_path)).load()
    assert snapshot.pending == [timer(8)] and done == set()
    assert (tmp_path / f"{LOG_PREFIX}0").exists()  # the .bak (generation 0) still needs it
    again = TimerProgress(str(tmp_path))
    again.load()
    again.write_snapshot(TimerSnapshot(again.rotate(), 9, [timer(8)]))
    again.close()
    assert not (tmp_path / f"{LOG_PREFIX}0").exists()


def test_a_damaged_snapshot_falls_back_to_the_one_before_and_its_logs(tmp_path: Path) -> None:
    p = TimerProgress(str(tmp_path))
    p.load()
    p.write_snapshot(TimerSnapshot(p.rotate(), 3, [timer(0), timer(1), timer(2)]))
    p.record_done(0)
    p.write_snapshot(TimerSnapshot(p.rotate(), 4, [timer(1), timer(2), timer(3)]))
    p.record_done(1)
    p.close()
    (tmp_path / "pending.json").write_bytes(b'{"version": 1, "gener')
    snapshot, done = TimerProgress(str(tmp_path)).load()
    assert snapshot.enqueued == 3 and snapshot.pending == [timer(0), timer(1), timer(2)]
    assert done == {0, 1}  # everything since the .bak's generation: offset 3 is read from the queue again


def test_no_readable_snapshot_at_all_is_a_store_error(tmp_path: Path) -> None:
    for name in ("pending.json", "pending.json.bak"):
        (tmp_path / name).write_bytes(b"[")
    with pytest.raises(StoreError, match="no readable timer snapshot"):
        TimerProgress(str(tmp_path)).load()


def test_concurrent_snapshot_writes_leave_the_newest_whole(tmp_path: Path) -> None:
    p = TimerProgress(str(tmp_path))
    p.load()
    big = [timer(i) for i in range(20_000)]
    first = TimerSnapshot(p.rotate(), 20_000, big)
    second = TimerSnapshot(p.rotate(), 20_001, big[1:])
    writers = [threading.Thread(target=p.write_snapshot, args=(s,)) for s in (first, second)]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    p.close()
    snapshot, _ = TimerProgress(str(tmp_path)).load()
    assert snapshot.generation == second.generation and snapshot.enqueued == 20_001


def test_a_torn_last_entry_is_ignored(tmp_path: Path) -> None:
    p = TimerProgress(str(tmp_path))
    p.load()
    p.record_done(4)
    p.close()
    with open(tmp_path / f"{LOG_PREFIX}0", "ab") as f:
        f.write(b"\x00\x00\x00")
    assert TimerProgress(str(tmp_path)).load()[1] == {4}


def test_appends_continue_in_the_newest_log_after_a_start(tmp_path: Path) -> None:
    p = TimerProgress(str(tmp_path))
    p.load()
    p.rotate()
    p.rotate()
    p.close()
    again = TimerProgress(str(tmp_path))
    again.load()
    again.record_done(3)
    again.close()
    assert (tmp_path / f"{LOG_PREFIX}2").read_bytes() == (3).to_bytes(8, "big")
