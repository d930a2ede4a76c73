"""DefaultMessageStore behaviour: puts, reads, index queries, flush modes, recovery and faults."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

import store.engine as engine_module
import store.supervise as supervise_module
from store.checkpoint import RECOVERY_POINT_AT, StoreCheckpoint
from store.clock import FakeClock
from store.commitlog import PutMessageStatus
from store.config import SYNC_FLUSH
from store.consumequeue import ConsumeQueue
from store.engine import DefaultMessageStore, GetMessageStatus
from store.errors import CorruptRecordError, DamagedRecordError, StoreFormatError, StoreLockedError
from store.javahash import tags_code
from store.mapped_file import MappedFileQueue
from store.message import (
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    Message,
)
from store.names import SCHEDULE_TOPIC
from store.quarantine import list_quarantines
from tests.support.stores import kill_writer, small_config
from tests.support.waiting import wait_for

FAR = 2**62


def _msg(i: int, topic: str = "T", queue_id: int = 0, **props: str) -> Message:
    p = {"TAGS": f"tag{i % 3}", "KEYS": f"k-{i} shared-{i % 5}"}
    p.update(props)
    return Message(topic=topic, body=f"body-{i}-".encode() * 20, queue_id=queue_id, properties=p)


def _open(root: Path, clock: FakeClock | None = None, **cfg: object) -> DefaultMessageStore:
    store = DefaultMessageStore(small_config(root, **cfg), clock=clock)
    store.open()
    store.start()
    return store


def test_put_and_read_across_rolled_files(tmp_path: Path) -> None:
    store = _open(tmp_path)
    results = [store.put_message(_msg(i, queue_id=i % 2)) for i in range(600)]
    assert all(r.ok for r in results)
    assert [r.queue_offset for r in results[:6]] == [0, 0, 1, 1, 2, 2]
    assert len(os.listdir(tmp_path / "commitlog")) > 2  # 64 KiB files rolled
    assert len(os.listdir(tmp_path / "consumequeue" / "T" / "0")) == 6  # 50 units per file
    got: list[bytes] = []
    offset = 0
    while True:
        res = store.get_messages("g", "T", 0, offset, 32)
        if res.status is not GetMessageStatus.FOUND:
            assert res.status is GetMessageStatus.OFFSET_OVERFLOW_ONE
            break
        got.extend(s.message.body for s in res.messages)
        assert res.max_offset == 300 and res.min_offset == 0
        offset = res.next_begin_offset
    assert got == [_msg(i).body for i in range(0, 600, 2)]
    for r in results[::37]:
        sel = store.look_message_by_msg_id(r.msg_id)
        assert sel is not None and sel.phys_offset == r.phys_offset
        assert bytes(sel.raw[28:36]) == r.phys_offset.to_bytes(8, "big")
    store.shutdown()
    for name in os.listdir(tmp_path / "commitlog"):
        assert os.path.getsize(tmp_path / "commitlog" / name) == 64 * 1024
        assert int(name) % (64 * 1024) == 0 and len(name) == 20


def test_get_message_statuses_and_tag_filter(tmp_path: Path) -> None:
    store = _open(tmp_path)
    for i in range(10):
        store.put_message(_msg(i))
    assert store.get_messages("g", "T", 0, 10, 5).status is GetMessageStatus.OFFSET_OVERFLOW_ONE
    over = store.get_messages("g", "T", 0, 11, 5)
    assert over.status is GetMessageStatus.OFFSET_OVERFLOW_BADLY and over.next_begin_offset == 0
    assert store.get_messages("g", "T", 7, 0, 5).status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
    res = store.get_messages("g", "T", 0, 0, 32, tag_filter={tags_code("tag1")})
    assert [s.queue_offset for s in res.messages] == [1, 4, 7]
    assert res.next_begin_offset == 10
    none = store.get_messages("g", "T", 0, 0, 32, tag_filter={tags_code("nope")})
    assert none.status is GetMessageStatus.NO_MATCHED_MESSAGE and none.next_begin_offset == 10
    capped = store.get_messages("g", "T", 0, 0, 3)
    assert len(capped.messages) == 3 and capped.next_begin_offset == 3
    store.shutdown()


def test_batch_put(tmp_path: Path) -> None:
    store = _open(tmp_path)
    store.put_message(_msg(0, queue_id=3))
    r = store.put_messages([_msg(i, queue_id=3) for i in range(1, 11)])
    assert r.ok and r.msg_num == 10 and r.queue_offset == 1
    ids = r.msg_id.split(",")
    assert len(ids) == 10
    res = store.get_messages("g", "T", 3, 1, 32)
    assert [s.queue_offset for s in res.messages] == list(range(1, 11))
    assert [s.message.msg_id for s in res.messages] == ids
    assert (
        store.put_messages([_msg(1, queue_id=0), _msg(2, queue_id=1)]).status
        is PutMessageStatus.MESSAGE_ILLEGAL
    )
    store.shutdown()


def test_refused_messages_write_nothing(tmp_path: Path) -> None:
    store = _open(tmp_path, max_message_size=1000)
    end = store.max_phy_offset
    big = Message(topic="T", body=b"x" * 1001)
    assert store.put_message(big).status is PutMessageStatus.MESSAGE_ILLEGAL
    props = Message(topic="T", body=b"x", properties={"P": "v" * 40000})
    assert store.put_message(props).status is PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
    assert store.put_message(Message(topic="T" * 128, body=b"x")).status is PutMessageStatus.MESSAGE_ILLEGAL
    assert store.max_phy_offset == end
    assert store.put_message(Message(topic="T", body=b"x" * 1000)).ok
    store.shutdown()
    assert store.put_message(_msg(1)).status is PutMessageStatus.SERVICE_NOT_AVAILABLE


def test_delay_and_transactions(tmp_path: Path) -> None:
    clock = FakeClock(1_700_000_000_123)
    store = _open(tmp_path, clock)
    r = store.put_message(_msg(1, DELAY="3"))
    assert r.ok
    sel = store.get_messages("g", SCHEDULE_TOPIC, 2, 0, 1).messages[0]
    assert sel.tags_code == 1_700_000_010_123  # delivery time (docs/store-format.md §tags-code)
    m = sel.message
    assert (m.properties["REAL_TOPIC"], m.properties["REAL_QID"], m.properties["DELAY"]) == ("T", "0", "3")
    assert store.get_max_offset("T", 0) == 0
    prepared = Message(topic="T", body=b"half", sys_flag=TRANSACTION_PREPARED_TYPE, properties={"KEYS": "tx"})
    rp = store.put_message(prepared)
    assert rp.ok and rp.queue_offset == 0 and store.get_max_offset("T", 0) == 0  # not in the ConsumeQueue
    assert [s.phys_offset for s in store.query_message("T", "tx", 4, 0, FAR).messages] == [rp.phys_offset]
    rollback = Message(topic="T", body=b"rb", sys_flag=TRANSACTION_ROLLBACK_TYPE, properties={"KEYS": "rb"})
    assert store.put_message(rollback).ok
    assert store.query_message("T", "rb", 4, 0, FAR).messages == []  # rollback records are not indexed
    store.shutdown()


def test_query_by_key_time_range_and_index_roll(tmp_path: Path) -> None:
    clock = FakeClock(1_700_000_000_000)
    store = _open(tmp_path, clock)
    offsets = {}
    for i in range(300):  # 3 keys per message (2 KEYS + UNIQ) against 399 entries per index file
        clock.advance(1000)
        r = store.put_message(_msg(i, UNIQ_KEY=f"U{i:031d}"))
        offsets[i] = r.phys_offset
    assert len(store.index.files) >= 2
    found = store.query_message("T", "k-7", 64, 0, FAR).messages
    assert [s.phys_offset for s in found] == [offsets[7]]
    assert [s.phys_offset for s in store.query_message("T", f"U{250:031d}", 64, 0, FAR).messages] == [
        offsets[250]
    ]
    shared = store.query_message("T", "shared-2", 64, 0, FAR).messages
    assert [s.phys_offset for s in shared] == [offsets[i] for i in range(2, 300, 5)][-len(shared) :]
    assert len(shared) == 60
    t100 = 1_700_000_000_000 + 101 * 1000
    window = store.query_message("T", "shared-2", 64, t100, t100 + 50_000).messages
    assert {s.message.store_timestamp for s in window} <= set(range(t100, t100 + 50_001))
    assert len(window) == 10
    assert store.query_message("T", "shared-2", 3, 0, FAR).messages.__len__() == 3
    assert store.query_message("Other", "k-7", 64, 0, FAR).messages == []
    full_end = store.index.files[-2].end_timestamp
    store.shutdown()  # waits for the background flush of full index files
    assert StoreCheckpoint(str(tmp_path / "checkpoint"), read_only=True).index_msg_timestamp == full_end


def test_search_offset_by_timestamp_and_earliest_time(tmp_path: Path) -> None:
    clock = FakeClock(1000)
    store = _open(tmp_path, clock)
    for ts in (1000, 2000, 2000, 3000):
        clock.set(ts)
        store.put_message(_msg(0))
    assert store.get_earliest_message_time() == 1000
    assert store.get_earliest_message_time("T", 0) == 1000
    search = store.search_offset_by_timestamp
    assert [search("T", 0, t) for t in (500, 1000, 2000, 2400, 2600, 3000, 9000)] == [0, 0, 1, 2, 3, 3, 3]
    assert search("Nope", 0, 1) == 0
    store.shutdown()


def test_arrival_listener_sees_dispatched_offsets(tmp_path: Path) -> None:
    store = _open(tmp_path)
    seen: list[tuple[str, int, int]] = []
    store.add_arrival_listener(lambda t, q, off: seen.append((t, q, off)))
    store.put_message(_msg(0, queue_id=1))
    store.put_messages([_msg(1, queue_id=1), _msg(2, queue_id=1)])
    assert seen == [("T", 1, 1), ("T", 1, 3)]
    assert store.get_messages("g", "T", 1, 0, 32).messages[-1].queue_offset == 2
    store.shutdown()


def test_reopen_after_clean_shutdown_continues(tmp_path: Path) -> None:
    store = _open(tmp_path)
    for i in range(100):
        store.put_message(_msg(i, queue_id=i % 3))
    end = store.max_phy_offset
    store.shutdown()
    assert not (tmp_path / "abort").exists()
    again = _open(tmp_path)
    assert again.last_exit_ok and again.max_phy_offset == end
    assert again.topic_queue_table() == {("T", 0): 34, ("T", 1): 33, ("T", 2): 33}
    assert again.put_message(_msg(100, queue_id=0)).queue_offset == 34
    assert [s.phys_offset for s in again.query_message("T", "k-5", 4, 0, FAR).messages]
    again.shutdown()


def test_rebuild_consume_queues_and_index_from_commitlog(tmp_path: Path) -> None:
    store = _open(tmp_path)
    for i in range(400):
        store.put_message(_msg(i, topic=f"T{i % 2}", queue_id=i % 4))
    store.shutdown()
    cq_root = tmp_path / "consumequeue"
    before = {p.relative_to(cq_root): p.read_bytes() for p in cq_root.rglob("*") if p.is_file()}
    shutil.rmtree(cq_root)
    shutil.rmtree(tmp_path / "index")
    again = _open(tmp_path)
    after = {p.relative_to(cq_root): p.read_bytes() for p in cq_root.rglob("*") if p.is_file()}
    assert after == before  # the reput rebuilds byte-identical ConsumeQueues
    assert [s.message.body for s in again.query_message("T1", "k-301", 4, 0, FAR).messages] == [
        _msg(301).body
    ]
    again.shutdown()


def _record_offsets(store: DefaultMessageStore, n: int) -> list[int]:
    return [store.put_message(_msg(i)).phys_offset for i in range(n)]


def _damage_record_30(root: Path, damage: str, abort: bool) -> tuple[list[int], int, Path]:
    """50 records in one file, record 30 damaged (``abort``: then a crash without our recovery point, as
    RocketMQ leaves the checkpoint, so recovery re-dispatches the file its timestamps pick)."""
    store = _open(root, mapped_file_size_commit_log=1024 * 1024)
    offsets = _record_offsets(store, 50)
    end = store.max_phy_offset
    store.shutdown()
    bad = offsets[30]
    path = root / "commitlog" / "00000000000000000000"
    data = bytearray(path.read_bytes())
    if damage == "crc":
        data[bad + 100] ^= 0xFF
    elif damage == "magic":
        data[bad + 4 : bad + 8] = b"\x01\x02\x03\x04"
    elif damage == "body-length":
        data[bad + 84 : bad + 88] = (1 << 30).to_bytes(4, "big")
    elif damage == "topic-length":  # after the body: its CRC still passes
        data[bad + 88 + int.from_bytes(data[bad + 84 : bad + 88], "big")] = 0x7F
    elif damage == "size":
        data[bad : bad + 4] = (offsets[31] - bad + 16).to_bytes(4, "big")  # the boundaries are lost
    else:
        data[bad + 20 :] = bytes(len(data) - bad - 20)  # torn write: the tail of the log is gone
    path.write_bytes(bytes(data))
    if abort:
        (root / "abort").touch()
        with open(root / "checkpoint", "r+b") as f:
            f.seek(RECOVERY_POINT_AT)
            f.write(bytes(128))
        shutil.rmtree(root / "consumequeue")  # every unit comes from the re-dispatch
    return offsets, end, path


@pytest.mark.parametrize("damage", ["crc", "magic", "body-length", "topic-length"])
@pytest.mark.parametrize("abort", [False, True])
def test_a_damaged_record_of_known_extent_is_set_aside_alone(
    tmp_path: Path, damage: str, abort: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Its TOTALSIZE leads to the next record: recovery keeps every later record in the CommitLog, in
    its ConsumeQueue (at its own queue offset) and in the index; reads skip the damaged one."""
    offsets, end, _path = _damage_record_30(tmp_path, damage, abort)
    bad = offsets[30]
    with caplog.at_level(logging.ERROR):
        again = _open(tmp_path, mapped_file_size_commit_log=1024 * 1024)
    assert again.recovery_corruption is None
    assert (again.max_phy_offset, again.get_max_offset("T", 0)) == (end, 50)
    assert again.commit_log.set_aside == {bad: offsets[31] - bad}
    assert any("set aside 1 damaged record alone" in r.getMessage() for r in caplog.records)
    got = []
    offset = 0
    while offset < 50:
        res = again.get_messages("g", "T", 0, offset, 32)
        got.extend(res.messages)
        offset = res.next_begin_offset
    assert [m.queue_offset for m in got] == [q for q in range(50) if q != 30]
    assert [m.phys_offset for m in got] == offsets[:30] + offsets[31:]
    with pytest.raises(CorruptRecordError):
        again.look_message_by_offset(bad)
    assert [s.phys_offset for s in again.query_message("T", "k-31", 4, 0, FAR).messages] == [offsets[31]]
    assert again.put_message(_msg(99)).queue_offset == 50
    again.shutdown()
    caplog.clear()
    with caplog.at_level(logging.ERROR):  # a later start knows it: no second quarantine
        again = _open(tmp_path, mapped_file_size_commit_log=1024 * 1024)
    assert again.get_max_offset("T", 0) == 51 and again.commit_log.set_aside == {bad: offsets[31] - bad}
    again.shutdown()
    assert len(os.listdir(tmp_path / "quarantine")) == 1
    assert not [r for r in caplog.records if "set aside" in r.getMessage()]


@pytest.mark.parametrize("damage", ["size", "truncated"])
@pytest.mark.parametrize("abort", [False, True])
def test_corrupt_record_stops_recovery_and_is_truncated(tmp_path: Path, damage: str, abort: bool) -> None:
    """Damage that loses the record boundaries: the log is cut there (the rest set aside)."""
    offsets, _end, path = _damage_record_30(tmp_path, damage, abort)
    bad = offsets[30]
    again = _open(tmp_path, mapped_file_size_commit_log=1024 * 1024)
    err = again.recovery_corruption
    assert err is not None and err.path == str(path) and err.offset == bad
    assert again.last_exit_ok is not abort
    assert again.max_phy_offset == bad
    assert again.get_max_offset("T", 0) == 30
    assert again.look_message_by_offset(bad) is None  # beyond the end now
    assert again.query_message("T", "k-31", 4, 0, FAR).messages == []
    assert [s.phys_offset for s in again.query_message("T", "k-29", 4, 0, FAR).messages] == [offsets[29]]
    r = again.put_message(_msg(99))
    assert r.phys_offset == bad and r.queue_offset == 30
    again.shutdown()


def _rot_queue_offset_3(tmp_path: Path) -> tuple[int, Path]:
    """1,200 records in 5 files of 64 KiB (normal recovery checks only the last 3), then a body byte of
    queue offset 3's, in the first file, flipped: its offset and file."""
    store = _open(tmp_path)
    offsets = _record_offsets(store, 1200)
    store.shutdown()
    victim = offsets[3]
    path = tmp_path / "commitlog" / "00000000000000000000"
    data = bytearray(path.read_bytes())
    data[victim + 100] ^= 0xFF
    path.write_bytes(bytes(data))
    return victim, path


def test_corrupt_record_in_an_old_file_is_reported_not_returned(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    victim, path = _rot_queue_offset_3(tmp_path)
    again = _open(tmp_path)
    with caplog.at_level(logging.ERROR):
        res = again.get_messages("g", "T", 0, 3, 2)
    # the pull skips the damaged record (never served as good), says where it is and sets it aside
    assert [(m.queue_offset, m.message.body) for m in res.messages] == [(4, _msg(4).body), (5, _msg(5).body)]
    assert res.next_begin_offset == 6
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 2 and f"{path}@{victim}" in errors[1] and "CRC" in errors[1]
    assert "a read set aside 1 damaged record alone" in errors[0] and str(victim) in errors[0]
    with pytest.raises(DamagedRecordError) as ei:  # a lookup by offset finds it set aside
        again.look_message_by_offset(victim)
    assert (ei.value.path, ei.value.offset, ei.value.quarantined) == (str(path), victim, True)
    only = again.get_messages("g", "T", 0, 3, 1)  # nothing but the damaged one before the next: moves on
    assert [m.queue_offset for m in only.messages] == [4]
    again.shutdown()


def test_a_lookup_by_offset_sets_a_damaged_record_aside_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A lookup (a msgId, an index hit) that meets a record whose body CRC fails where recovery did not
    check puts it in a quarantine as a pull does (it raised and nothing was set aside); an offset that is
    no record's start is no damage."""
    victim, path = _rot_queue_offset_3(tmp_path)
    again = _open(tmp_path)
    try:
        with caplog.at_level(logging.ERROR):
            with pytest.raises(CorruptRecordError) as inside:
                again.look_message_by_offset(victim + 40)
            assert not isinstance(inside.value, DamagedRecordError)
            assert not list_quarantines(str(tmp_path))
            with pytest.raises(DamagedRecordError) as first:
                again.look_message_by_offset(victim)
            assert (first.value.path, first.value.offset, first.value.quarantined) == (
                str(path),
                victim,
                True,
            )
            assert "CRC" in first.value.reason
            with pytest.raises(DamagedRecordError, match="set aside earlier"):
                again.look_message_by_offset(victim)
        [m] = list_quarantines(str(tmp_path))
        assert (m.recovery, [p.from_offset for p in m.files]) == ("read", [victim])
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1 and "a read set aside 1 damaged record alone" in errors[0], errors
        res = again.get_messages("g", "T", 0, 3, 2)
        assert [m.queue_offset for m in res.messages] == [4, 5]
    finally:
        again.shutdown()


@pytest.mark.slow  # a second interpreter tries the lock
def test_lock_excludes_a_second_store(tmp_path: Path) -> None:
    store = _open(tmp_path)
    with pytest.raises(StoreLockedError):
        DefaultMessageStore(small_config(tmp_path)).open()
    code = textwrap.dedent(
        f"""
        from store.engine import DefaultMessageStore
        from store.errors import StoreLockedError
        from tests.support.stores import small_config
        try:
            DefaultMessageStore(small_config({str(tmp_path)!r})).open()
        except StoreLockedError:
            raise SystemExit(7)
        """
    )
    other = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parents[2], check=False)
    assert other.returncode == 7
    ro = DefaultMessageStore(small_config(tmp_path), read_only=True)
    ro.open()  # readers do not take the lock
    ro.shutdown()
    store.shutdown()
    _open(tmp_path).shutdown()


@pytest.mark.pure_python
@pytest.mark.parametrize(("queues", "one_sync"), [(70, True), (3, False)])
def test_consume_queue_flush_syncs_the_file_system_once_when_many_queues_are_due(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, queues: int, one_sync: bool
) -> None:
    synced: list[str] = []
    real = engine_module.sync_filesystem
    monkeypatch.setattr(engine_module, "sync_filesystem", lambda path: synced.append(path) or real(path))
    # no periodic flush during the test: the thorough flush at shutdown sees every queue due
    store = _open(tmp_path, flush_interval_consume_queue=3_600_000)
    for q in range(queues):
        assert store.put_message(_msg(q, topic=f"T{q}")).status == PutMessageStatus.PUT_OK
    cqs = [store.get_consume_queue(f"T{q}", 0) for q in range(queues)]
    assert all(cq is not None and cq.files.dirty_bytes() > 0 for cq in cqs)
    store.shutdown()
    assert all(cq is not None and cq.files.dirty_bytes() == 0 for cq in cqs)
    assert synced == ([store.config.consume_queue_dir] if one_sync else [])


@pytest.mark.pure_python
def test_consume_queue_flush_visits_only_the_queues_written_since_it_last_ran(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _open(tmp_path, flush_consume_queue_least_pages=0)
    try:
        for q in range(100):
            assert store.put_message(_msg(q, topic=f"T{q}")).status == PutMessageStatus.PUT_OK
        cqs = [store.get_consume_queue(f"T{q}", 0) for q in range(100)]
        wait_for(lambda: all(cq is not None and cq.files.dirty_bytes() == 0 for cq in cqs), "the first flush")
        visited: list[str] = []
        real = MappedFileQueue.dirty_bytes

        def counted(files: MappedFileQueue) -> int:
            visited.append(files.directory)
            return real(files)

        monkeypatch.setattr(MappedFileQueue, "dirty_bytes", counted)
        assert store.put_message(_msg(0, topic="T7")).status == PutMessageStatus.PUT_OK
        t7 = store.get_consume_queue("T7", 0)
        assert t7 is not None
        wait_for(lambda: t7.files.dirty_bytes() == 0, "T7 flushed")
        assert set(visited) == {t7.files.directory}  # the other 99 queues were not looked at
    finally:
        store.shutdown()


@pytest.mark.pure_python
def test_the_flushes_between_thorough_ones_visit_only_the_queues_past_the_least_pages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Thousands of topics written a few times a second each stay below flushConsumeQueueLeastPages until
    the thorough flush: the flushes in between must not look at them at all (10,000 of them cost a GIL hold
    and the put lock every second)."""
    store = _open(tmp_path, flush_consume_queue_thorough_interval=3_600_000)
    visited: list[str] = []
    real = MappedFileQueue.dirty_bytes

    def counted(files: MappedFileQueue) -> int:
        visited.append(files.directory)
        return real(files)

    def put(topic: str) -> ConsumeQueue:
        assert store.put_message(_msg(0, topic=topic)).status == PutMessageStatus.PUT_OK
        cq = store.get_consume_queue(topic, 0)
        assert cq is not None
        return cq

    try:
        monkeypatch.setattr(MappedFileQueue, "dirty_bytes", counted)
        below = [put(f"T{q}") for q in range(100)]
        t7 = below.pop(7)
        while t7.files.directory not in visited:  # past the least pages (2 pages of 20-byte units)
            put("T7")
            time.sleep(0.001)
        wait_for(lambda: real(t7.files) < 2 * 4096, "T7 flushed")
        # the flush that took T7 began after the other 99 were written: it did not look at them
        assert set(visited) == {t7.files.directory}
        assert all(real(cq.files) for cq in below)  # below the least pages: left to the thorough flush
    finally:
        store.shutdown()


def test_the_thorough_flush_flushes_the_queues_held_below_the_least_pages(tmp_path: Path) -> None:
    store = _open(tmp_path, flush_consume_queue_thorough_interval=300)
    try:
        for q in range(20):
            assert store.put_message(_msg(0, topic=f"T{q}")).status == PutMessageStatus.PUT_OK
        cqs = [store.get_consume_queue(f"T{q}", 0) for q in range(20)]
        wait_for(
            lambda: all(cq is not None and cq.files.dirty_bytes() == 0 for cq in cqs), "the thorough flush"
        )
    finally:
        store.shutdown()


@pytest.mark.pure_python
def test_a_flush_of_many_queues_pauses_between_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scan is compiled code that keeps the GIL: over 10,000 queues it would hold the event loop for
    all of it, so it lets the GIL go every chunk of queues."""
    store = _open(tmp_path, flush_interval_consume_queue=3_600_000)
    paused: list[int] = []

    def pause() -> None:
        paused.append(1)

    try:
        for q in range(1_000):
            assert store.put_message(_msg(0, topic=f"T{q}")).status == PutMessageStatus.PUT_OK
        monkeypatch.setattr(engine_module, "_pause", pause)
        store._checkpoint()  # what start, stop and the thorough flush run
        assert all(cq.files.dirty_bytes() == 0 for cq in store._cqs.values())
        assert len(paused) >= 1_000 // engine_module._FLUSH_SCAN_CHUNK - 1
    finally:
        store.shutdown()


@pytest.mark.pure_python
def test_a_consume_queue_whose_flush_failed_is_flushed_by_the_next_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _open(tmp_path, flush_consume_queue_least_pages=0)
    failures: list[str] = []
    real = MappedFileQueue.flush

    def failing_once(files: MappedFileQueue) -> int:
        if not failures:
            failures.append(files.directory)
            raise OSError(5, "Input/output error")
        return real(files)

    try:
        monkeypatch.setattr(MappedFileQueue, "flush", failing_once)
        assert store.put_message(_msg(0)).status == PutMessageStatus.PUT_OK
        cq = store.get_consume_queue("T", 0)
        assert cq is not None
        wait_for(
            lambda: cq.files.dirty_bytes() == 0, "the queue flushed"
        )  # written once, never again: still flushed
        assert failures == [cq.files.directory]
    finally:
        store.shutdown()


def test_clean_expired_consume_queues_checks_each_candidate_again_under_the_put_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _open(tmp_path)
    try:
        assert store.put_message(_msg(0)).status == PutMessageStatus.PUT_OK
        live = store.get_consume_queue("T", 0)
        # as if the queue was listed as expired just before this put reached it
        monkeypatch.setattr(store.cleaner, "expired_consume_queues", lambda: [live])
        assert store.clean_expired_consume_queues() == 0
        assert store.get_consume_queue("T", 0) is live
        assert store.put_message(_msg(1)).queue_offset == 1
    finally:
        store.shutdown()


def test_sync_flush_group_commit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = _open(tmp_path, flush_disk_type=SYNC_FLUSH)
    threads, per_thread = 8, 25
    gate = threading.Barrier(threads)
    results = []
    lock = threading.Lock()
    fdatasync = os.fdatasync

    def gated_fdatasync(fd: int) -> None:
        # hold the first fsync until every thread has appended once, so they must share it (patched at
        # the os module: the store's own methods may be compiled, see store/native.py)
        if store.flush_count == 0:
            pause = threading.Event()
            for _ in range(10_000):  # bounded: a bug must fail the assertions below, not hang
                if store.get_max_offset("T", 0) >= threads:
                    break
                pause.wait(0.001)
        fdatasync(fd)

    monkeypatch.setattr(os, "fdatasync", gated_fdatasync)

    def worker(t: int) -> None:
        gate.wait()
        for i in range(per_thread):
            r = store.put_message(_msg(t * 1000 + i))
            # the put returned, so its bytes must already be flushed
            assert store.flushed_phy_offset >= r.phys_offset + r.wrote_bytes
            with lock:
                results.append(r)

    pool = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    assert len(results) == threads * per_thread and all(r.ok for r in results)
    assert store.flush_count < threads * per_thread
    no_wait = Message(topic="T", body=b"x", wait_store_msg_ok=False)
    assert store.put_message(no_wait).ok
    store.shutdown()


WRITER = """
import sys
from store.config import SYNC_FLUSH
from store.engine import DefaultMessageStore
from store.message import Message
from tests.support.stores import small_config
store = DefaultMessageStore(small_config(sys.argv[1], flush_disk_type=SYNC_FLUSH))
store.open(); store.start()
i = 0
while True:
    r = store.put_message(Message(topic="K", body=b"payload-%d" % i * 30, queue_id=i % 3,
                                  properties={"KEYS": "key-%d" % i, "TAGS": "t"}))
    assert r.ok, r
    print(i, r.queue_offset, r.phys_offset, flush=True)
    i += 1
"""


@pytest.mark.slow
def test_sigkill_during_sync_writes_loses_no_acknowledged_message(tmp_path: Path) -> None:
    root = tmp_path / "store"
    acked = kill_writer(WRITER, root)
    assert (root / "abort").exists()
    store = _open(root)
    assert not store.last_exit_ok
    for i, qoff, phys in acked:
        res = store.get_messages("g", "K", i % 3, qoff, 1)
        assert res.status is GetMessageStatus.FOUND, i
        assert res.messages[0].phys_offset == phys
        assert res.messages[0].message.body == b"payload-%d" % i * 30
        assert phys in {s.phys_offset for s in store.query_message("K", f"key-{i}", 4, 0, FAR).messages}
    # nothing beyond the last valid record: every unit points at a valid record and the log ends there
    last_end = 0
    units = 0
    for q in range(3):
        offset = 0
        while (res := store.get_messages("g", "K", q, offset, 32)).status is GetMessageStatus.FOUND:
            for s in res.messages:
                assert s.message.queue_offset == s.queue_offset
                last_end = max(last_end, s.phys_offset + s.size)
                units += 1
            offset = res.next_begin_offset
    assert store.max_phy_offset == last_end
    assert units >= len(acked)
    assert sum(store.topic_queue_table().values()) == units
    store.shutdown()


def test_async_flush_reaches_disk_without_waiting_puts(tmp_path: Path) -> None:
    store = _open(tmp_path, flush_commit_log_least_pages=0)
    r = store.put_message(_msg(1))
    assert r.ok  # returned without a flush
    done = threading.Event()
    for _ in range(1000):  # the 50 ms flush thread gets there; poll instead of sleeping a fixed time
        if store.flushed_phy_offset >= r.phys_offset + r.wrote_bytes:
            done.set()
            break
        done.wait(0.01)
    assert done.is_set()
    store.shutdown()


class FailsOnceIn:
    """The wall clock, but it raises, once, what no loop expects when the thread ``name`` reads it (not a
    subclass: the compiled build's clocks cannot be subclassed)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.raised = False

    def now_ms(self) -> int:
        if not self.raised and threading.current_thread().name == self.name:
            self.raised = True
            raise KeyError("a bug in the loop")
        return time.time_ns() // 1_000_000

    def now(self) -> float:
        return time.time()


def test_a_flush_thread_that_raised_is_logged_and_flushes_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An exception the flush loop does not handle ended the thread (its traceback on stderr, past the
    logs), and nothing written after it was flushed until shutdown: it is logged and the loop runs again."""
    monkeypatch.setattr(supervise_module, "RESTART_DELAY", 0.02)
    clock = FailsOnceIn("store-flush-commitlog")
    store = DefaultMessageStore(small_config(tmp_path, flush_commit_log_least_pages=0), clock=clock)
    store.open()
    store.start()
    try:
        wait_for(lambda: clock.raised, "the flush thread's failure")
        r = store.put_message(_msg(1))
        assert r.ok
        wait_for(lambda: store.flushed_phy_offset >= r.phys_offset + r.wrote_bytes, "the flush after it")
    finally:
        store.shutdown()
    failures = [
        r for r in caplog.records if r.levelname == "ERROR" and "store-flush-commitlog" in r.getMessage()
    ]
    assert [r.exc_info[0] for r in failures if r.exc_info] == [KeyError]


def test_abnormal_recovery_starts_at_the_checkpoint_file(tmp_path: Path) -> None:
    clock = FakeClock(1_700_000_000_000)
    store = _open(tmp_path, clock, message_index_safe=False)
    for i in range(1200):
        clock.advance(100)
        store.put_message(_msg(i))
    files = store.commit_log.files.files
    assert len(files) >= 5
    store.shutdown()  # writes the checkpoint: physic = logics = last store time
    (tmp_path / "abort").touch()
    again = DefaultMessageStore(small_config(tmp_path, message_index_safe=False), clock=clock)
    again.open()
    assert again.checkpoint is not None
    limit = again.checkpoint.recovery_limit(index_safe=False)
    assert limit == clock.now_ms() - 3000
    start = again.commit_log.abnormal_start_index(limit)
    assert (
        start == len(again.commit_log.files.files) - 1
    )  # the newest file starts more than 3 s before the end
    again.start()
    assert again.get_max_offset("T", 0) == 1200
    assert again.get_messages("g", "T", 0, 1199, 1).messages[0].message.body == _msg(1199).body
    again.shutdown()


def test_preallocated_empty_file_is_removed_and_junk_is_refused(tmp_path: Path) -> None:
    store = _open(tmp_path)
    for i in range(10):
        store.put_message(_msg(i))
    store.shutdown()
    extra = tmp_path / "commitlog" / f"{64 * 1024:020d}"
    extra.write_bytes(bytes(64 * 1024))  # what RocketMQ's allocate service leaves behind
    again = _open(tmp_path)
    assert not extra.exists() and again.get_max_offset("T", 0) == 10
    again.shutdown()
    (tmp_path / "commitlog" / ".DS_Store").write_bytes(b"x")
    with pytest.raises(StoreFormatError):
        DefaultMessageStore(small_config(tmp_path)).open()
    # a failed open releases the lock
    (tmp_path / "commitlog" / ".DS_Store").unlink()
    _open(tmp_path).shutdown()


def test_filtered_pull_scans_at_most_800_units(tmp_path: Path) -> None:
    store = _open(tmp_path, mapped_file_size_consume_queue=6_000_000)
    store.put_messages([_msg(i) for i in range(100)])
    for i in range(900):
        store.put_message(_msg(i))
    res = store.get_messages("g", "T", 0, 0, 32, tag_filter={tags_code("no-such-tag")})
    assert res.status is GetMessageStatus.NO_MATCHED_MESSAGE
    assert res.next_begin_offset == 800  # max(16000 bytes, 32 * 20) of ConsumeQueue per pull
    store.shutdown()


def test_a_queue_file_that_cannot_be_created_refuses_the_message_before_it_is_stored(tmp_path: Path) -> None:
    """No descriptor or no space for a new ConsumeQueue file: the put fails and nothing is half-stored."""
    store = DefaultMessageStore(small_config(tmp_path))
    with store:
        store.put_message(Message(topic="Ok", body=b"a"))
        end = store.max_phy_offset
        (tmp_path / "consumequeue" / "Blocked").write_text("")  # a file where the topic's directory goes
        refused = store.put_message(Message(topic="Blocked", body=b"b"))
        assert refused.status == PutMessageStatus.CREATE_MAPEDFILE_FAILED
        assert store.max_phy_offset == end
        (tmp_path / "consumequeue" / "Blocked").unlink()
        stored = store.put_message(Message(topic="Blocked", body=b"c"))
        assert (stored.status, stored.queue_offset) == (PutMessageStatus.PUT_OK, 0)
        assert store.get_max_offset("Blocked", 0) == 1


@pytest.mark.parametrize("which", ["last-of-its-file", "first-of-its-file"])
@pytest.mark.parametrize("damage", ["crc", "magic"])
def test_a_damaged_record_at_a_file_boundary_is_set_aside_alone(
    tmp_path: Path, which: str, damage: str
) -> None:
    """The last record of a file is followed by the blank filler, the first one opens the file: either
    way its extent is known and it costs only itself."""
    store = _open(tmp_path)
    offsets = _record_offsets(store, 600)  # three 64 KiB files
    sizes = {o: store.commit_log.read_record(o).nbytes for o in offsets}  # type: ignore[union-attr]
    store.shutdown()
    size = 64 * 1024
    i = next(n for n, o in enumerate(offsets) if o >= size)  # the first record of the second file
    victim = offsets[i - 1] if which == "last-of-its-file" else offsets[i]
    path = tmp_path / "commitlog" / f"{victim - victim % size:020d}"
    data = bytearray(path.read_bytes())
    at = victim % size
    if damage == "crc":
        data[at + 100] ^= 0xFF
    else:
        data[at + 4 : at + 8] = b"\x01\x02\x03\x04"
    path.write_bytes(bytes(data))
    again = _open(tmp_path)
    try:
        assert again.recovery_corruption is None and again.commit_log.set_aside == {victim: sizes[victim]}
        got = []
        offset = 0
        while offset < 600:
            res = again.get_messages("g", "T", 0, offset, 32)
            got.extend(m.phys_offset for m in res.messages)
            offset = res.next_begin_offset
        assert got == [o for o in offsets if o != victim]
    finally:
        again.shutdown()
