"""A queue handle's put hints: where its last put's objects were, for a caller to prefetch before the next
put. Hints are addresses never written through: whatever rolled, deleted or cut the queue's file since, the
next put lands where a put without a handle lands, the old file keeps its bytes, and prefetching a stale
hint (even into a mapping since unmapped) is harmless."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from store import DefaultMessageStore, Message
from store.consumequeue import CQ_STORE_UNIT_SIZE, QueueHandle, prefetch
from store.mapped_file import MappedFile
from store.replica_tail import set_aside_replica_tail
from tests.store.test_queue_handles import _bodies, _open


@pytest.fixture
def store(tmp_path: Path) -> Iterator[DefaultMessageStore]:
    opened = _open(tmp_path)  # ConsumeQueue files of 50 units: a queue rolls every 50 messages
    try:
        yield opened
    finally:
        opened.shutdown()


def _current(store: DefaultMessageStore, topic: str) -> MappedFile:
    cq = store.get_consume_queue(topic, 0)
    assert cq is not None
    last = cq.files.last_file()
    assert last is not None
    return last


def _hints(handle: QueueHandle) -> tuple[int, int, int]:
    hints = (handle.file_at, handle.map_at, handle.unit_at)
    assert all(type(h) is int for h in hints)  # addresses: no reference keeps a file or its mapping alive
    return hints


def _expect_hints(handle: QueueHandle, mf: MappedFile) -> None:
    """The handle's hints name ``mf`` and the line of its next unit (0 where the build has no addresses)."""
    unit = mf.address + mf.wrote_position if mf.address else 0
    assert _hints(handle) == (id(mf), id(mf.mm), unit)
    if prefetch is not None:  # the compiled build: a writable mapping's address is known
        assert mf.address != 0
        prefetch(handle, handle.cq, *_hints(handle))


def test_a_put_leaves_the_hints_of_the_next_one(store: DefaultMessageStore) -> None:
    handle = store.queue_handle("H", 0)
    assert _hints(handle) == (0, 0, 0)
    for i in range(3):
        assert store.put_message(Message("H", b"m%d" % i), handle).queue_offset == i
        _expect_hints(handle, _current(store, "H"))
    assert _current(store, "H").wrote_position == 3 * CQ_STORE_UNIT_SIZE


def test_a_rolled_file_is_never_written_through_its_hints(store: DefaultMessageStore) -> None:
    handle = store.queue_handle("H", 0)
    for i in range(50):  # the first file full
        assert store.put_message(Message("H", b"m%d" % i), handle).ok
    full = _current(store, "H")
    stale = _hints(handle)
    assert full.wrote_position == full.file_size and stale[2] in (0, full.address + full.file_size)
    before = bytes(full.view)
    assert store.put_message(Message("H", b"m50"), handle).queue_offset == 50
    rolled = _current(store, "H")
    assert rolled is not full and rolled.file_from_offset == full.file_size
    assert bytes(full.view) == before  # the full file untouched; the unit went to the next one
    _expect_hints(handle, rolled)
    if prefetch is not None:
        prefetch(*stale)  # the old file's: harmless
    assert store.get_max_offset("H", 0) == 51


def test_a_deleted_queue_s_hints_are_harmless_and_the_next_put_starts_again(
    store: DefaultMessageStore,
) -> None:
    handle = store.queue_handle("H", 0)
    for i in range(3):
        assert store.put_message(Message("H", b"old%d" % i), handle).ok
    old = _current(store, "H")
    stale = _hints(handle)
    assert store.delete_topics({"H"}) == 1
    old.close()  # its mapping gone (a deleted file's is unmapped once unreferenced): the hint points at nothing
    if prefetch is not None:
        prefetch(*stale)  # a prefetch never faults
    result = store.put_message(Message("H", b"new"), handle)
    assert result.ok and result.queue_offset == 0
    new = _current(store, "H")
    assert new is not old
    _expect_hints(handle, new)
    assert _bodies(store, "H") == [b"new"]


def test_a_cut_tail_is_rewritten_where_the_queue_now_ends(store: DefaultMessageStore) -> None:
    handle = store.queue_handle("H", 0)
    results = [store.put_message(Message("H", b"m%d" % i), handle) for i in range(5)]
    stale = _hints(handle)
    set_aside_replica_tail(store, results[2].phys_offset, "a test cuts the last three")
    mf = _current(store, "H")
    assert mf.wrote_position == 2 * CQ_STORE_UNIT_SIZE and (stale[2] == 0 or stale[2] > mf.address + 40)
    assert store.put_message(Message("H", b"again"), handle).queue_offset == 2
    _expect_hints(handle, mf)
    assert _bodies(store, "H") == [b"m0", b"m1", b"again"]
    cut_rest = bytes(mf.view[3 * CQ_STORE_UNIT_SIZE : 5 * CQ_STORE_UNIT_SIZE])
    assert cut_rest == bytes(2 * CQ_STORE_UNIT_SIZE)  # nothing written at the stale hint's position
