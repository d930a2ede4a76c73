"""File cleanup: the decision vectors of docs/store-format.md §disk-watermarks and the deletion of expired
files."""

from __future__ import annotations

import datetime
import os
from collections.abc import Iterable
from pathlib import Path

import pytest

from store import DefaultMessageStore, FakeClock, GetMessageStatus, Message, PutMessageStatus, StoreConfig
from store.cleanup import decide, disk_usage_ratio, is_delete_hour, is_expired
from store.consumequeue import ConsumeQueue
from tests.support.stores import small_config

GIB = 1024**3


def _local_ms(*args: int) -> int:
    return int(datetime.datetime(*args).timestamp() * 1000)  # naive datetime = the machine's local time


def test_disk_ratio_and_watermarks_15_14() -> None:
    cfg = StoreConfig()
    ratio = disk_usage_ratio(100 * GIB, 20 * GIB, 15 * GIB)
    assert ratio == 0.85
    d = decide(ratio, cfg, delete_hour=False, manual=False)
    assert (d.delete, d.forcibly, d.disk_full) == (True, False, False)
    ratio = disk_usage_ratio(100 * GIB, 10 * GIB, 5 * GIB)
    assert ratio == 0.95
    d = decide(ratio, cfg, delete_hour=False, manual=False)
    assert (d.delete, d.forcibly, d.disk_full) == (True, True, True)
    d = decide(0.30, cfg, delete_hour=False, manual=False)
    assert (d.delete, d.forcibly, d.disk_full) == (False, False, False)
    assert decide(0.30, cfg, delete_hour=False, manual=True).delete
    assert decide(-1, cfg, delete_hour=False, manual=False).delete  # cannot measure: treat as full enough


def test_a_dledger_member_never_deletes_unexpired_files_for_space() -> None:
    """Its files are the group's log: a member that dropped entries it acknowledged keeps a current log
    end, can be elected, and would then not serve them. A full disk refuses its appends instead."""
    cfg = StoreConfig(enable_dleger_commit_log=True)
    assert cfg.clean_file_forcibly_enable
    d = decide(0.95, cfg, delete_hour=False, manual=False)
    assert (d.delete, d.forcibly, d.disk_full) == (True, False, True)


def test_expiry_and_delete_hour_15_14() -> None:
    mtime = _local_ms(2023, 11, 10, 3, 0)
    assert not is_expired(mtime, _local_ms(2023, 11, 13, 2, 59), 72)
    assert is_expired(mtime, _local_ms(2023, 11, 13, 3, 0), 72)
    assert is_delete_hour(_local_ms(2023, 11, 13, 4, 30), "04")
    assert not is_delete_hour(_local_ms(2023, 11, 13, 3, 30), "04")
    assert is_delete_hour(_local_ms(2023, 11, 13, 16, 0), "04;16")


def _store(root: Path, clock: FakeClock) -> DefaultMessageStore:
    # watermarks out of reach so that the real disk's usage cannot trigger deletions here
    cfg = small_config(
        root,
        disk_max_used_space_ratio=95,
        disk_space_clean_forcibly_ratio=100,
        disk_space_warning_level_ratio=100,
        delete_commit_log_files_interval=0,
    )
    store = DefaultMessageStore(cfg, clock=clock)
    store.open()
    store.start()
    return store


def _fill(store: DefaultMessageStore, n: int) -> None:
    for i in range(n):
        assert store.put_message(
            Message(topic="T", body=b"x" * 200, properties={"KEYS": f"k{i} k{i}b", "TAGS": "a"})
        ).ok


def _age(root: Path, when_ms: int) -> None:
    for p in (root / "commitlog").iterdir():
        os.utime(p, (when_ms / 1000, when_ms / 1000))


def test_expired_files_are_deleted_at_delete_time(tmp_path: Path) -> None:
    now = _local_ms(2024, 1, 10, 4, 15)
    clock = FakeClock(now)
    store = _store(tmp_path, clock)
    _fill(store, 1500)
    files = sorted(os.listdir(tmp_path / "commitlog"))
    assert len(files) >= 6
    n_index = len(store.index.files)
    assert n_index >= 3
    _age(tmp_path, now - 73 * 3_600_000)
    assert store.cleaner.run_once(_local_ms(2024, 1, 10, 3, 15)) == 0  # expired, but not delete time
    deleted = store.cleaner.run_once(now)
    assert deleted == len(files) - 1  # everything but the active file
    assert sorted(os.listdir(tmp_path / "commitlog")) == files[-1:]
    min_phy = store.min_phy_offset
    assert min_phy == int(files[-1])
    min_q = store.get_min_offset("T", 0)
    assert min_q > 0
    small = store.get_messages("g", "T", 0, 0, 4)
    assert small.status is GetMessageStatus.OFFSET_TOO_SMALL and small.next_begin_offset == min_q
    first = store.get_messages("g", "T", 0, min_q, 4).messages[0]
    assert first.phys_offset >= min_phy and first.message.body == b"x" * 200
    assert store.get_earliest_message_time() == first.message.store_timestamp
    cq_files = sorted(os.listdir(tmp_path / "consumequeue" / "T" / "0"))
    assert int(cq_files[0]) // 20 <= min_q < int(cq_files[0]) // 20 + 50
    assert len(store.index.files) < n_index
    assert all(f.end_phy_offset >= min_phy for f in store.index.files[:-1])
    assert store.put_message(Message(topic="T", body=b"after")).ok
    store.shutdown()
    again = _store(tmp_path, clock)
    assert again.min_phy_offset == min_phy and again.get_min_offset("T", 0) == min_q
    again.shutdown()


def test_deletion_stops_at_the_first_unexpired_file_and_manual_runs(tmp_path: Path) -> None:
    now = _local_ms(2024, 1, 10, 12, 0)
    clock = FakeClock(now)
    store = _store(tmp_path, clock)
    _fill(store, 1000)
    files = sorted(os.listdir(tmp_path / "commitlog"))
    _age(tmp_path, now - 100 * 3_600_000)
    young = tmp_path / "commitlog" / files[2]
    os.utime(young, (now / 1000, now / 1000))
    assert store.cleaner.run_once(now) == 0  # noon: not delete time
    store.delete_expired_files_manually()
    assert store.cleaner.run_once(now) == 2  # files 0 and 1; file 2 is young, so 3+ stay too
    assert sorted(os.listdir(tmp_path / "commitlog")) == files[2:]
    store.shutdown()


def test_a_bounded_manual_trigger_deletes_no_file_ending_past_its_bound(tmp_path: Path) -> None:
    now = _local_ms(2024, 1, 10, 12, 0)
    store = _store(tmp_path, FakeClock(now))
    _fill(store, 1000)
    files = sorted(os.listdir(tmp_path / "commitlog"))
    assert len(files) >= 4
    _age(tmp_path, now - 100 * 3_600_000)  # every file expired: an unbounded trigger takes all but the newest
    store.delete_expired_files_manually(up_to=int(files[1]))  # the plan shown: file 0
    assert store.cleaner.run_once(now) == 1
    assert store.cleaner.run_once(now + 10_000) == 0  # the trigger's later runs keep the bound
    assert sorted(os.listdir(tmp_path / "commitlog")) == files[1:]
    assert (
        store.cleaner.run_once(_local_ms(2024, 1, 11, 4, 0)) > 0
    )  # deleteWhen's hour: the policy, unbounded
    store.shutdown()


def test_a_run_that_deletes_nothing_looks_at_no_consume_queue(tmp_path: Path) -> None:
    """The clean service runs every 10 s: with 10,000 queues, a run that walked them all would hold the
    broker for as long each time. Only a run that moved the CommitLog's minimum looks at them."""
    now = _local_ms(2024, 1, 10, 12, 0)
    store = _store(tmp_path, FakeClock(now))
    _fill(store, 1000)
    walks: list[int] = []
    queues = store.cleaner.consume_queues

    def counted() -> Iterable[ConsumeQueue]:
        walks.append(1)
        return queues()

    store.cleaner.consume_queues = counted
    _age(tmp_path, now - 100 * 3_600_000)
    for _ in range(5):
        assert store.cleaner.run_once(now) == 0  # noon: expired, but not delete time
    assert walks == []
    store.delete_expired_files_manually()
    assert store.cleaner.run_once(now) > 0
    assert walks == [1]  # the queues' files below the new minimum
    assert store.cleaner.run_once(now + 1) == 0 and walks == [1]
    store.shutdown()


def test_disk_full_refuses_puts(tmp_path: Path) -> None:
    store = _store(tmp_path, FakeClock())
    store.cleaner.disk_full = True
    assert store.disk_full
    assert store.put_message(Message(topic="T", body=b"x")).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    store.cleaner.disk_full = False
    assert store.put_message(Message(topic="T", body=b"x")).ok
    store.shutdown()


@pytest.mark.parametrize("when", ["04", "4", "03;04"])
def test_delete_when_forms(when: str) -> None:
    assert is_delete_hour(_local_ms(2024, 1, 1, 4, 59), when)


def test_a_fresh_store_measures_its_disk_before_the_first_message(tmp_path: Path) -> None:
    """The CommitLog and ConsumeQueue directories come with the store (DefaultMessageStore's constructor
    makes them): a broker without a message reported commitLogDiskRatio -1, and 'check disk' -100%."""
    store = DefaultMessageStore(small_config(tmp_path))
    store.open()
    try:
        assert (tmp_path / "commitlog").is_dir() and (tmp_path / "consumequeue").is_dir()
        assert 0 <= store.disk_ratio() <= 1 and 0 <= store.cleaner.ratio() <= 1
    finally:
        store.shutdown()
