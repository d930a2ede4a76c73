"""Full disks and power losses: blocks reserved before they are stored into, refusals instead of SIGBUS,
directory entries synced, and the forcible cleanup saying what it destroys."""

from __future__ import annotations

import errno
import logging
import os
import signal
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from store import DefaultMessageStore, FakeClock, Message, PutMessageStatus
from store.checkpoint import RecoveryPoint, StoreCheckpoint
from store.cleanup import FakeDiskUsage
from store.consumequeue import CQ_PREPARE_CHUNK
from store.indexfile import INDEX_ENTRY_SIZE, IndexFile
from store.record import RecordInfo
from tests.support.bounded import read_line
from tests.support.paths import ROOT
from tests.support.stores import small_config


def _allocated(path: Path) -> int:
    return path.stat().st_blocks * 512


def test_a_new_consume_queue_file_has_its_first_blocks_allocated_not_all_of_them(tmp_path: Path) -> None:
    cfg = small_config(tmp_path, mapped_file_size_consume_queue=300_000 * 20)
    with DefaultMessageStore(cfg, clock=FakeClock()) as store:
        assert store.put_message(Message(topic="T", body=b"x")).ok
        cq_file = tmp_path / "consumequeue" / "T" / "0" / f"{0:020d}"
        assert CQ_PREPARE_CHUNK <= _allocated(cq_file) < 300_000 * 20  # 10,000 queues must not take 60 GB


class FailingAllocation:
    """``os.posix_fallocate`` failing with ``code`` while ``failing``, as a full or read-only file system."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, code: int) -> None:
        self.real = os.posix_fallocate
        self.code = code
        self.failing = True
        monkeypatch.setattr(os, "posix_fallocate", self)

    def __call__(self, fd: int, offset: int, length: int) -> None:
        if self.failing:
            raise OSError(self.code, os.strerror(self.code))
        self.real(fd, offset, length)


def test_no_space_refuses_the_put_leaves_no_sparse_file_and_recovers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with DefaultMessageStore(small_config(tmp_path), clock=FakeClock()) as store:
        assert store.put_message(Message(topic="Old", body=b"kept", properties={"KEYS": "k"})).ok
        full = FailingAllocation(monkeypatch, errno.ENOSPC)
        with caplog.at_level(logging.ERROR, logger="store.engine"):
            for _ in range(3):  # a new queue's file cannot be allocated: refused before anything is appended
                r = store.put_message(Message(topic="New", body=b"x" * 100))
                assert r.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
        assert [r.message for r in caplog.records].count(
            "store full: puts refused until space can be allocated again ([Errno 28] No space left on device)"
        ) == 1
        assert not (tmp_path / "consumequeue" / "New" / "0").exists() or not os.listdir(
            tmp_path / "consumequeue" / "New" / "0"
        )
        assert store.max_phy_offset == store.get_consume_queue("Old", 0).max_physic_offset  # nothing appended
        assert store.get_messages("G", "Old", 0, 0, 1).messages  # reads are served
        assert store.write_refusal() == "its files cannot be written: No space left on device"
        full.failing = False
        r = store.put_message(Message(topic="New", body=b"x" * 100))
        assert r.ok and r.queue_offset == 0
        assert store.write_refusal() is None


def test_a_file_system_remounted_read_only_refuses_puts_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After an I/O error the kernel remounts the file system read-only: every put fails, the store
    says why (runtime info ``storeWriteRefused``, which check disk and check cluster alert on)."""
    with DefaultMessageStore(small_config(tmp_path), clock=FakeClock()) as store:
        assert store.write_refusal() is None
        read_only = FailingAllocation(monkeypatch, errno.EROFS)
        r = store.put_message(Message(topic="New", body=b"x"))
        assert r.status is PutMessageStatus.CREATE_MAPEDFILE_FAILED
        assert store.write_refusal() == "its files cannot be written: Read-only file system"
        read_only.failing = False
        assert store.put_message(Message(topic="New", body=b"x")).ok
        assert store.write_refusal() is None
    assert store.write_refusal() == "the store is not running"


def test_new_store_files_directories_are_synced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: set[tuple[int, int]] = set()
    real = os.fsync

    def fsync(fd: int) -> None:
        st = os.fstat(fd)
        synced.add((st.st_dev, st.st_ino))
        real(fd)

    def was_synced(path: Path) -> bool:
        st = path.stat()
        return (st.st_dev, st.st_ino) in synced

    monkeypatch.setattr(os, "fsync", fsync)
    store = DefaultMessageStore(small_config(tmp_path), clock=FakeClock())
    store.open()
    store.start()
    synced.clear()
    assert store.put_message(Message(topic="T", body=b"x", properties={"KEYS": "k"})).ok
    assert not was_synced(tmp_path / "consumequeue" / "T")  # not on the put path
    store.shutdown()  # the first flush of each new file syncs the entries naming it
    for d in ("commitlog", "consumequeue", "consumequeue/T", "consumequeue/T/0", "index", "config", "."):
        assert was_synced(tmp_path / d), d


def _fill(store: DefaultMessageStore, n: int) -> None:
    for i in range(n):
        assert store.put_message(Message(topic="T", body=b"x" * 200, properties={"KEYS": f"k{i}"})).ok


@pytest.mark.parametrize(
    "overrides, destroys",
    [
        ({}, True),
        ({"clean_file_forcibly_enable": False}, False),
        ({"disk_space_clean_forcibly_ratio": 100}, False),
    ],
)
def test_forcible_cleanup_logs_the_unconsumed_messages_it_destroys_and_can_be_disabled(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, overrides: dict[str, object], destroys: bool
) -> None:
    cfg = small_config(
        tmp_path, disk_space_warning_level_ratio=100, delete_commit_log_files_interval=0, **overrides
    )
    usage = FakeDiskUsage(0.5)
    store = DefaultMessageStore(cfg, clock=FakeClock(), disk_usage=usage)
    store.open()
    store.start()
    _fill(store, 600)
    store.configs.consumer_offsets.commit_offset("Slow", "T", 0, 10)
    store.configs.consumer_offsets.commit_offset("Done", "T", 0, 600)
    files = len(store.commit_log.files.files)
    usage.level = 0.88  # above diskSpaceCleanForciblyRatio (85): young files go too
    with caplog.at_level(logging.ERROR, logger="store.cleanup"):
        deleted = store.cleaner.run_once(store.clock.now_ms())
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    if not destroys:
        assert deleted == 0 and errors == [] and len(store.commit_log.files.files) == files
    else:
        assert deleted == files - 1
        lost = store.get_min_offset("T", 0) - 10
        assert lost > 0
        assert len(errors) == 1 and f"Slow={lost}" in errors[0] and "Done" not in errors[0], errors
    store.shutdown()


CRASHER = """
import sys, time
from store import DefaultMessageStore, Message
from tests.support.stores import small_config
store = DefaultMessageStore(small_config(sys.argv[1]))
store.open(); store.start()
for i in range(20):
    assert store.put_message(Message(topic="T", body=b"late-%d" % i, properties={"KEYS": "late-%d" % i})).ok
print("ready", flush=True)
time.sleep(60)
"""


@pytest.mark.slow
@pytest.mark.parametrize("torn", [False, True])
def test_a_crash_seconds_after_start_recovers_from_the_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, torn: bool
) -> None:
    store = DefaultMessageStore(small_config(tmp_path), clock=FakeClock())
    store.open()
    store.start()
    _fill(store, 1000)  # five 64 KiB CommitLog files
    end_before = store.max_phy_offset
    store.shutdown()
    with subprocess.Popen(
        [sys.executable, "-c", CRASHER, str(tmp_path)], stdout=subprocess.PIPE, cwd=ROOT, text=True
    ) as proc:
        assert read_line(proc).strip() == "ready"  # long before the first 60-s checkpoint
        proc.send_signal(signal.SIGKILL)
    assert (tmp_path / "abort").exists()
    late = 20
    if torn:  # the 11th record after the checkpoint is damaged: recovery validates what follows the point
        with DefaultMessageStore(small_config(tmp_path), read_only=True) as view:
            victim = view.get_messages("G", "T", 0, 1010, 1).messages[0].phys_offset
        path = tmp_path / "commitlog" / f"{victim - victim % (64 * 1024):020d}"
        data = bytearray(path.read_bytes())
        at = victim % (64 * 1024)  # its TOTALSIZE: the record boundaries after it are lost
        data[at : at + 4] = (int.from_bytes(data[at : at + 4], "big") + 16).to_bytes(4, "big")
        path.write_bytes(bytes(data))
        late = 10

    dispatched: list[int] = []
    real = DefaultMessageStore._dispatch_one

    def spy(self: DefaultMessageStore, info: RecordInfo, cq: object = None) -> None:
        dispatched.append(info.commit_log_offset)
        real(self, info, cq)  # type: ignore[arg-type]

    monkeypatch.setattr(DefaultMessageStore, "_dispatch_one", spy)
    again = DefaultMessageStore(small_config(tmp_path))  # the crashed process wrote with the real clock
    with caplog.at_level(logging.INFO, logger="store"):
        again.open()
    assert not again.last_exit_ok
    # only the records written after the start's checkpoint were dispatched again, not all 1,020
    assert len(dispatched) == late and min(dispatched) == end_before
    assert not [r for r in caplog.records if "deleting index file" in r.getMessage()]
    if torn:
        assert again.recovery_corruption is not None and again.max_phy_offset == victim
    again.start()
    assert again.get_max_offset("T", 0) == 1000 + late
    # every key of a record kept stays findable: also those sharing a hash slot with the keys of records
    # the recovery did not re-dispatch (set aside, or torn), whose entries lie past the restored header
    for key in [f"k{i}" for i in range(1000)] + [f"late-{i}" for i in range(late)]:
        assert len(again.query_message("T", key, 4, 0, 2**62).messages) == 1, key
    again.shutdown()


def _bodies(store: DefaultMessageStore, offset: int, count: int) -> list[bytes]:
    out: list[bytes] = []
    while len(out) < count:
        got = store.get_messages("G", "T", 0, offset + len(out), count - len(out)).messages
        if not got:
            break
        out.extend(bytes(m.message.body) for m in got)
    return out


def test_a_batch_whose_next_consume_queue_file_cannot_be_allocated_is_dispatched_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The records of an acknowledged put whose units could not all be written (the batch crosses into a
    ConsumeQueue file the full disk cannot take) must not be skipped: not by later puts, not by the
    recovery point, not by a restart."""
    real = os.posix_fallocate
    full = False

    def fallocate(fd: int, offset: int, length: int) -> None:
        if full:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd, offset, length)

    monkeypatch.setattr(os, "posix_fallocate", fallocate)
    store = DefaultMessageStore(small_config(tmp_path), clock=FakeClock())
    store.open()
    store.start()
    for i in range(45):  # 50 units per ConsumeQueue file
        assert store.put_message(Message(topic="T", body=b"m%d" % i)).ok
    full = True
    batch = [Message(topic="T", body=b"b%d" % i) for i in range(10)]
    assert store.put_messages(batch).ok  # stored: acknowledged (a resend would duplicate it)
    full = False
    assert store.put_message(Message(topic="U", body=b"other")).ok  # another queue's put goes on
    assert _bodies(store, 0, 100) == [b"m%d" % i for i in range(45)] + [b"b%d" % i for i in range(10)]
    assert store.put_message(Message(topic="T", body=b"after")).ok
    assert _bodies(store, 45, 11) == [b"b%d" % i for i in range(10)] + [b"after"]
    store.shutdown()


def test_undispatched_records_keep_the_recovery_point_below_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """While a record has no unit yet, neither the checkpoint's recovery point nor a clean shutdown may
    claim it was dispatched: a restart must re-dispatch it."""
    real = os.posix_fallocate
    full = False

    def fallocate(fd: int, offset: int, length: int) -> None:  # only T/0's second file lacks space
        if full and os.readlink(f"/proc/self/fd/{fd}").endswith(f"T/0/{1000:020d}"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd, offset, length)

    monkeypatch.setattr(os, "posix_fallocate", fallocate)
    store = DefaultMessageStore(small_config(tmp_path), clock=FakeClock())
    store.open()
    store.start()
    for i in range(45):
        assert store.put_message(Message(topic="T", body=b"m%d" % i)).ok
    full = True
    first = store.put_messages([Message(topic="T", body=b"b%d" % i) for i in range(10)])
    assert first.ok
    with caplog.at_level(logging.ERROR, logger="store.engine"):
        assert store.put_message(Message(topic="U", body=b"other")).ok  # stored, its unit waits its turn
    assert [r.levelno for r in caplog.records if "not all dispatched" in r.getMessage()] == [logging.ERROR]
    store.shutdown()  # still full: the units past the file boundary cannot be written now
    full = False
    again = DefaultMessageStore(small_config(tmp_path), clock=FakeClock())
    again.open()
    again.start()
    assert _bodies(again, 45, 10) == [b"b%d" % i for i in range(10)]
    assert again.get_max_offset("U", 0) == 1
    again.shutdown()


def test_restored_index_header_keeps_older_keys_of_slots_whose_later_entries_are_lost(tmp_path: Path) -> None:
    """After a power loss the slots may have reached the disk and the entries written after the checkpoint
    not: the restored file must still find every key written before the checkpoint."""
    path = str(tmp_path / "20240101000000000")
    f = IndexFile(path, 8, 200)
    for i in range(40):  # 8 slots: every slot has a chain
        assert f.put_key(f"T#old-{i}", 1000 + i, 1_700_000_000_000 + i)
    f.write_header()
    snap = f.snapshot()
    for i in range(20):
        assert f.put_key(f"T#new-{i}", 2000 + i, 1_700_000_001_000 + i)
    base = f._entries_base + snap.index_count * INDEX_ENTRY_SIZE
    f.mm[base : base + 20 * INDEX_ENTRY_SIZE] = bytes(20 * INDEX_ENTRY_SIZE)  # the later entries: lost
    f.restore(snap)
    for i in range(40):
        out: list[int] = []
        f.select_phy_offsets(f"T#old-{i}", 64, 0, 2**62, out)
        assert 1000 + i in out, i
    f.close()


def test_a_checkpoint_rocketmq_wrote_since_has_no_recovery_point(tmp_path: Path) -> None:
    """RocketMQ maps the checkpoint and writes its three longs, never our recovery point at byte 64: once
    a Java broker has run on the store, the point says nothing about what it wrote (its data past the
    point, a recovery that cut below it), so recovery must fall back to RocketMQ's rule."""
    path = str(tmp_path / "checkpoint")
    cp = StoreCheckpoint(path)
    cp.physic_msg_timestamp = cp.logics_msg_timestamp = 1_700_000_000_000
    cp.recovery_point = RecoveryPoint(4096, None)
    cp.flush()
    cp.close()
    assert StoreCheckpoint(path, read_only=True).recovery_point == RecoveryPoint(4096, None)
    with open(path, "r+b") as f:  # a Java broker's flush: newer timestamps, byte 64 untouched
        f.write(struct.pack(">qqq", 1_700_000_100_000, 1_700_000_100_000, 0))
    assert StoreCheckpoint(path, read_only=True).recovery_point is None


def test_a_consume_queue_unit_read_back_as_zeros_is_healed_not_taken_for_the_end(tmp_path: Path) -> None:
    """A unit of zeros ends a ConsumeQueue at recovery. When units follow it (a lost page, a bad sector)
    the queue is damaged, not shorter: its later units come back from the CommitLog and its queue
    offsets are not handed out again (another queue's later units keep the start-up reput from doing it)."""
    store = DefaultMessageStore(small_config(tmp_path), clock=FakeClock())
    store.open()
    store.start()
    for i in range(40):
        assert store.put_message(Message(topic="T", body=b"m%d" % i)).ok
    assert store.put_message(Message(topic="U", body=b"later")).ok
    store.shutdown()
    path = tmp_path / "consumequeue" / "T" / "0" / f"{0:020d}"
    data = bytearray(path.read_bytes())
    data[10 * 20 : 11 * 20] = bytes(20)
    path.write_bytes(bytes(data))
    again = DefaultMessageStore(small_config(tmp_path), clock=FakeClock())
    again.open()
    again.start()
    assert again.get_max_offset("T", 0) == 40
    assert _bodies(again, 0, 40) == [b"m%d" % i for i in range(40)]
    assert again.put_message(Message(topic="T", body=b"new")).queue_offset == 40
    again.shutdown()
