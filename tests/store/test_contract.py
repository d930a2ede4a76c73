"""The ``MessageStore`` contract, run against the file store and the in-memory store alike."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from store import (
    DefaultMessageStore,
    FakeClock,
    GetMessageStatus,
    Message,
    MessageStore,
    PutMessageStatus,
    StoreConfig,
    tags_code,
)
from store.cleanup import CleanPlan, FakeDiskUsage
from store.config import SLAVE
from store.ha import ReplicaStore
from store.memory import InMemoryMessageStore
from tests.support.stores import ha_frames, small_config

FAR = 2**62


def _started(kind: str, root: Path, clock: FakeClock, **overrides: Any) -> MessageStore:
    cfg = StoreConfig(store_path_root_dir=str(root), max_hash_slot_num=1000, max_index_num=4000, **overrides)
    store: MessageStore
    if kind == "file":
        store = DefaultMessageStore(cfg, clock=clock, disk_usage=FakeDiskUsage(0.5))
    else:
        store = InMemoryMessageStore(cfg, clock=clock)
    store.open()
    store.start()
    return store


@pytest.fixture(params=["file", "memory"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MessageStore]:
    store = _started(request.param, tmp_path, FakeClock(1_700_000_000_000))
    yield store
    store.shutdown()


def _m(i: int, **extra: str) -> Message:
    props = {"TAGS": f"t{i % 2}", "KEYS": f"k{i} common", "UNIQ_KEY": f"{i:032X}", **extra}
    return Message(topic="C", body=b"m%d" % i, queue_id=i % 2, born_timestamp=i, properties=props)


def test_contract(any_store: MessageStore) -> None:
    clock: FakeClock = any_store.clock  # type: ignore[attr-defined]
    assert isinstance(any_store, MessageStore)
    results = []
    for i in range(20):
        clock.advance(1000)
        results.append(any_store.put_message(_m(i)))
    assert [r.queue_offset for r in results[:4]] == [0, 0, 1, 1]
    assert results[1].phys_offset == results[0].phys_offset + results[0].wrote_bytes
    assert any_store.get_max_offset("C", 0) == 10 and any_store.get_min_offset("C", 0) == 0
    res = any_store.get_messages("g", "C", 0, 0, 4)
    assert res.status is GetMessageStatus.FOUND and res.next_begin_offset == 4
    assert [s.message.body for s in res.messages] == [b"m0", b"m2", b"m4", b"m6"]
    assert bytes(res.messages[0].raw) == bytes(any_store.look_message_by_msg_id(results[0].msg_id).raw)  # type: ignore[union-attr]
    filtered = any_store.get_messages("g", "C", 1, 0, 32, tag_filter={tags_code("t1")})
    assert len(filtered.messages) == 10
    assert any_store.get_messages("g", "C", 0, 10, 4).status is GetMessageStatus.OFFSET_OVERFLOW_ONE
    assert any_store.get_messages("g", "C", 0, 12, 4).status is GetMessageStatus.OFFSET_OVERFLOW_BADLY
    assert any_store.get_messages("g", "X", 0, 0, 4).status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
    assert [s.phys_offset for s in any_store.query_message("C", "k3", 8, 0, FAR).messages] == [
        results[3].phys_offset
    ]
    assert len(any_store.query_message("C", "common", 8, 0, FAR).messages) == 8
    assert [s.phys_offset for s in any_store.query_message("C", f"{5:032X}", 8, 0, FAR).messages] == [
        results[5].phys_offset
    ]
    ts = any_store.get_store_timestamp("C", 0, 3)
    assert any_store.search_offset_by_timestamp("C", 0, ts) == 3
    assert any_store.get_earliest_message_time() == 1_700_000_001_000
    batch = any_store.put_messages([_m(100 + 2 * i) for i in range(3)])
    assert batch.ok and batch.msg_num == 3 and batch.queue_offset == 10 and len(batch.msg_id.split(",")) == 3
    assert any_store.put_message(Message(topic="C", body=b"x" * (4 * 1024 * 1024 + 1))).status is (
        PutMessageStatus.MESSAGE_ILLEGAL
    )
    delayed = any_store.put_message(_m(7, DELAY="2"))
    assert delayed.ok and any_store.get_max_offset("SCHEDULE_TOPIC_XXXX", 1) == 1
    seen: list[tuple[str, int, int]] = []
    any_store.add_arrival_listener(lambda t, q, o: seen.append((t, q, o)))
    any_store.put_message(_m(1))
    assert seen == [("C", 1, 11)]
    assert any_store.topic_queue_table()[("C", 0)] == 13
    assert sorted(any_store.queue_keys()) == sorted(any_store.topic_queue_table())
    assert any_store.max_phy_offset > results[-1].phys_offset and any_store.min_phy_offset == 0
    any_store.configs.consumer_offsets.commit_offset("g", "C", 0, 5)
    assert any_store.configs.consumer_offsets.query_offset("g", "C", 0) == 5


def test_retention_contract(any_store: MessageStore) -> None:
    """The retention surface has one shape in both stores: a plan that keeps the newest log and counts
    each group's unconsumed messages in it, no expired queue while nothing left the log, topic deletion."""
    clock: FakeClock = any_store.clock  # type: ignore[attr-defined]
    assert any_store.cleanup_plan().rows == []  # nothing written yet: no log file
    for i in range(6):
        clock.advance(1000)
        assert any_store.put_message(_m(i)).ok
    any_store.put_message(Message(topic="D", body=b"d"))
    any_store.configs.consumer_offsets.commit_offset("g", "C", 0, 1)
    plan = any_store.cleanup_plan(manual=True)
    assert isinstance(plan, CleanPlan) and plan.decision.delete and not plan.decision.forcibly
    assert plan.ratio == any_store.disk_ratio() and not any_store.disk_full
    assert [r.reason for r in plan.rows] == [None]  # the newest log is never deleted
    assert plan.rows[0].unconsumed == {"g": 2} and plan.rows[0].file.from_offset == 0
    assert plan.deletable == [] and plan.losses() == {}
    other_hour = f"{(time.localtime(clock.now_ms() / 1000).tm_hour + 12) % 24:02d}"
    quiet = dataclasses.replace(any_store.config, delete_when=other_hour)
    assert any_store.cleanup_plan(manual=False, config=quiet).decision.delete is False
    any_store.delete_expired_files_manually()
    assert any_store.clean_expired_consume_queues() == 0 and any_store.get_max_offset("C", 0) == 3

    assert any_store.delete_topics({"C"}) == 2
    assert ("C", 0) not in any_store.topic_queue_table() and any_store.get_max_offset("C", 1) == 0
    assert any_store.get_messages("g", "C", 0, 0, 4).status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
    assert any_store.get_max_offset("D", 0) == 1 and any_store.delete_topics({"C"}) == 0
    assert any_store.put_message(_m(0)).queue_offset == 0  # a re-created topic starts again at 0


def test_memory_and_file_store_write_identical_records(tmp_path: Path) -> None:
    clock_a, clock_b = FakeClock(), FakeClock()
    file_store = DefaultMessageStore(StoreConfig(store_path_root_dir=str(tmp_path)), clock=clock_a)
    mem_store = InMemoryMessageStore(clock=clock_b)
    for s in (file_store, mem_store):
        s.open()
        s.start()
    for i in range(10):
        a, b = file_store.put_message(_m(i)), mem_store.put_message(_m(i))
        assert (a.phys_offset, a.queue_offset, a.msg_id) == (b.phys_offset, b.queue_offset, b.msg_id)
        assert bytes(file_store.look_message_by_offset(a.phys_offset).raw) == bytes(  # type: ignore[union-attr]
            mem_store.look_message_by_offset(b.phys_offset).raw  # type: ignore[union-attr]
        )
    for s in (file_store, mem_store):
        s.shutdown()


def _bodies(store: MessageStore, topic: str, queue_id: int) -> list[bytes]:
    res = store.get_messages("g", topic, queue_id, 0, 32)
    return [m.message.body for m in res.messages]  # .message checks each record's CRC


@pytest.mark.parametrize("kind", ["file", "memory"])
def test_replica_contract(kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Both stores replicate through one surface (HA, docs/replication.md §replication): a slave of the same
    kind appends the master's frames at their offsets, refuses bytes that do not continue its log, never shows
    a record before all of it arrived, and then serves the same bytes, queues, keys and arrival notices; it
    refuses puts."""
    clock = FakeClock(1_700_000_000_000)
    master = _started(kind, tmp_path / "m", clock)
    slave = _started(kind, tmp_path / "s", clock, broker_role=SLAVE)
    try:
        assert isinstance(master, ReplicaStore) and isinstance(slave, ReplicaStore)
        for i in range(40):
            clock.advance(1000)
            assert master.put_message(_m(i)).ok
        assert master.put_message(_m(40, DELAY="2")).ok
        assert slave.put_message(_m(0)).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
        assert master.read_commit_log(master.max_phy_offset - 1, 2) is None
        seen: list[tuple[str, int, int]] = []
        slave.add_arrival_listener(lambda t, q, o: seen.append((t, q, o)))

        frames = ha_frames(master, 0, 29)  # smaller than any record: each is split
        offset, first = frames[0]
        assert not slave.append_replica(offset + 1, first)  # not at the slave's end: refused
        assert slave.append_replica(offset, first)
        assert not slave.dispatch_replica() and slave.get_max_offset("C", 0) == 0 and seen == []
        for offset, data in frames[1:]:
            assert slave.append_replica(offset, data)
            slave.dispatch_replica(100)
        while slave.dispatch_replica(100):
            pass

        end = master.max_phy_offset
        assert slave.max_phy_offset == end and slave.read_commit_log(0, end) == master.read_commit_log(0, end)
        for q in (0, 1):
            assert _bodies(slave, "C", q) == _bodies(master, "C", q) and len(_bodies(slave, "C", q)) == 20
        assert slave.get_max_offset("SCHEDULE_TOPIC_XXXX", 1) == 1
        assert [m.phys_offset for m in slave.query_message("C", "k7", 4, 0, FAR).messages] == [
            m.phys_offset for m in master.query_message("C", "k7", 4, 0, FAR).messages
        ]
        assert ("C", 0, 20) in seen and ("C", 1, 20) in seen
        assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []  # split records: no damage
    finally:
        master.shutdown()
        slave.shutdown()


def test_memory_store_follows_a_file_master_across_its_fillers(tmp_path: Path) -> None:
    """The in-memory store, one unbounded file, follows a file master from offset 0: the end-of-file
    fillers travel and are skipped, every record is dispatched."""
    master = DefaultMessageStore(small_config(tmp_path / "m"))
    master.open()
    master.start()
    slave = InMemoryMessageStore(StoreConfig(store_path_root_dir="<memory>", broker_role=SLAVE))
    slave.start()
    try:
        for i in range(300):
            assert master.put_message(_m(i, pad="x" * (200 + i % 900))).ok
        assert master.max_phy_offset > 2 * master.commit_log_file_size  # rolled: fillers in between
        for offset, data in ha_frames(master, 0, 32 * 1024):
            assert slave.append_replica(offset, data)
        while slave.dispatch_replica():
            pass
        for q in (0, 1):
            assert slave.get_max_offset("C", q) == master.get_max_offset("C", q) == 150
            assert [m.raw for m in slave.get_messages("g", "C", q, 140, 32).messages] == [
                m.raw for m in master.get_messages("g", "C", q, 140, 32).messages
            ]
    finally:
        master.shutdown()
        slave.shutdown()


def test_every_member_of_the_store_protocol_says_what_it_does() -> None:
    """The protocol is the broker's whole view of a store: each method and property documents its contract."""
    members = [
        name
        for cls in MessageStore.__mro__
        if getattr(cls, "_is_protocol", False)
        for name, value in vars(cls).items()
        if not name.startswith("_") and (callable(value) or isinstance(value, property))
    ]
    assert "put_message" in members and "append_replica" in members
    undocumented = [name for name in members if not (getattr(MessageStore, name).__doc__ or "").strip()]
    assert not undocumented
