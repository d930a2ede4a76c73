"""Queue handles: a put through a handle kept from before must land where a put without one lands, whatever
replaced or destroyed the queue object meanwhile (topic deletion, expired-queue cleaning, a heal, a cut tail)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from store import DefaultMessageStore, FakeClock, GetMessageStatus, Message
from store.replica_tail import set_aside_replica_tail
from tests.store.test_cleanup import _fill, _local_ms, _store
from tests.support.stores import small_config


def _open(root: Path) -> DefaultMessageStore:
    store = DefaultMessageStore(small_config(root))
    store.open()
    store.start()
    return store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[DefaultMessageStore]:
    opened = _open(tmp_path)
    try:
        yield opened
    finally:
        opened.shutdown()


def _bodies(store: DefaultMessageStore, topic: str, queue_id: int = 0) -> list[bytes]:
    res = store.get_messages("g", topic, queue_id, store.get_min_offset(topic, queue_id), 64)
    if res.status is not GetMessageStatus.FOUND:
        return []
    return [s.message.body for s in res.messages]


def test_a_handle_follows_its_topic_through_deletion_and_recreation(store: DefaultMessageStore) -> None:
    handle = store.queue_handle("H", 0)
    for i in range(3):
        assert store.put_message(Message("H", b"old%d" % i), handle).queue_offset == i
    assert store.delete_topics({"H"}) == 1
    result = store.put_message(Message("H", b"new"), handle)
    assert result.ok and result.queue_offset == 0  # a re-created topic starts again at 0
    assert _bodies(store, "H") == [b"new"]
    assert store.put_messages([Message("H", b"b1"), Message("H", b"b2")], handle).queue_offset == 1
    assert _bodies(store, "H") == [b"new", b"b1", b"b2"]


def test_a_handle_follows_its_queue_through_a_rebuild(store: DefaultMessageStore) -> None:
    handle = store.queue_handle("H", 0)
    for i in range(3):
        assert store.put_message(Message("H", b"m%d" % i), handle).ok
    before = store.get_consume_queue("H", 0)
    with store._put_lock:
        store.healer.rebuild_queues({("H", 0): "a test rebuilds it whole"})
    assert store.get_consume_queue("H", 0) is not before  # a new queue object, the old destroyed
    assert store.put_message(Message("H", b"m3"), handle).queue_offset == 3
    assert store.put_message(Message("H", b"m4")).queue_offset == 4  # the same queue, without the handle
    assert _bodies(store, "H") == [b"m0", b"m1", b"m2", b"m3", b"m4"]


def test_a_handle_follows_its_queue_through_expired_queue_cleaning(tmp_path: Path) -> None:
    now = _local_ms(2024, 1, 10, 4, 15)
    store = _store(tmp_path, FakeClock(now))
    try:
        handle = store.queue_handle("H", 0)
        assert store.put_message(Message("H", b"expires"), handle).ok
        _fill(store, 1500)  # topic T, rolling the CommitLog past H's only message
        for p in (tmp_path / "commitlog").iterdir():
            os.utime(p, (now / 1000 - 73 * 3600, now / 1000 - 73 * 3600))
        assert store.cleaner.run_once(now) > 0
        assert store.clean_expired_consume_queues() >= 1 and store.get_consume_queue("H", 0) is None
        result = store.put_message(Message("H", b"after"), handle)
        assert result.ok
        assert store.get_consume_queue("H", 0) is not None
        assert _bodies(store, "H") == [b"after"]
    finally:
        store.shutdown()


def test_a_handle_continues_its_queue_after_a_cut_tail(store: DefaultMessageStore) -> None:
    handle = store.queue_handle("H", 0)
    results = [store.put_message(Message("H", b"m%d" % i), handle) for i in range(5)]
    set_aside_replica_tail(store, results[2].phys_offset, "a test cuts the last three")
    assert store.put_message(Message("H", b"again"), handle).queue_offset == 2
    assert _bodies(store, "H") == [b"m0", b"m1", b"again"]


def test_a_handle_is_only_used_for_its_own_queue_and_store(tmp_path: Path) -> None:
    """A handle given with a message of another queue (a delayed message goes to the schedule topic) or to
    another store puts where the message says, in the store it is put to."""
    store = _open(tmp_path / "a")
    other = _open(tmp_path / "b")
    try:
        handle = store.queue_handle("H", 0)
        assert store.put_message(Message("H", b"m0"), handle).ok
        delayed = Message("H", b"later", properties={"DELAY": "1"})
        assert store.put_message(delayed, handle).ok
        assert store.put_message(Message("H", b"q1", queue_id=1), handle).queue_offset == 0
        assert _bodies(store, "H") == [b"m0"] and _bodies(store, "H", 1) == [b"q1"]
        assert store.get_max_offset("SCHEDULE_TOPIC_XXXX", 0) == 1
        assert other.put_message(Message("H", b"elsewhere"), handle).queue_offset == 0
        assert _bodies(other, "H") == [b"elsewhere"] and _bodies(store, "H") == [b"m0"]
        assert store.put_message(Message("H", b"m1"), handle).queue_offset == 1
    finally:
        other.shutdown()
        store.shutdown()
