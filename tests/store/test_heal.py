"""Derived files heal themselves: damaged ConsumeQueue units and IndexFile headers are
found at start-up or by a read and rebuilt from the CommitLog, logged at ERROR; nothing acked is skipped."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from store import DefaultMessageStore
from store.consumequeue import CQ_STORE_UNIT_SIZE, decode_unit
from store.indexfile import HEADER
from store.message import Message
from tests.support.stores import keyed_store, small_config, store_a_config

TOPIC, QID = "FixA_Orders", 1


def read_all(store: DefaultMessageStore, topic: str, queue_id: int) -> list[int]:
    """Every message of a queue through the store's pull path, in order; asserts each record is the
    queue's own and at its offset. Returns the queue offsets read."""
    seen: list[int] = []
    offset = store.get_min_offset(topic, queue_id)
    while True:
        res = store.get_messages("G", topic, queue_id, offset, 32)
        if not res.messages:
            break
        for sel in res.messages:
            msg = sel.message
            assert (msg.topic, msg.queue_id, msg.queue_offset) == (topic, queue_id, sel.queue_offset)
            seen.append(sel.queue_offset)
        offset = res.next_begin_offset
    return seen


def flip(path: Path, pos: int, mask: int) -> None:
    data = bytearray(path.read_bytes())
    data[pos] ^= mask
    path.write_bytes(bytes(data))


def cq_file(root: Path, topic: str = TOPIC, queue_id: int = QID, start: int = 0) -> Path:
    return root / "consumequeue" / topic / str(queue_id) / f"{start:020d}"


def test_store_a_starts_without_a_rebuild(store_a_copy: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The start-up check finds nothing wrong with a healthy store (no false alarm, no rebuild)."""
    with caplog.at_level(logging.INFO, "store.heal"), DefaultMessageStore(store_a_config(store_a_copy)) as s:
        assert s.healer.rebuilds == 0
        assert read_all(s, TOPIC, QID) == list(range(700))
    assert any("checked 15 consume queues" in r.getMessage() for r in caplog.records)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize(
    ("field", "pos", "mask"),
    [("offset", 7, 0x10), ("size", 11, 0x01), ("offset-sign", 0, 0x80)],
)
@pytest.mark.slow
@pytest.mark.parametrize("unit", [10, 200, 299])
def test_flipped_unit_is_healed_and_nothing_is_skipped(
    store_a_copy: Path, caplog: pytest.LogCaptureFixture, field: str, pos: int, mask: int, unit: int
) -> None:
    """A flipped offset or size field of one unit: every message of the queue is still read, in order,
    once each, and the queue is rebuilt (at start-up when the check reaches the unit, else on the read
    that meets it), logged at ERROR naming the queue and what was wrong."""
    flip(cq_file(store_a_copy), unit * CQ_STORE_UNIT_SIZE + pos, mask)
    with caplog.at_level(logging.INFO), DefaultMessageStore(store_a_config(store_a_copy)) as s:
        assert read_all(s, TOPIC, QID) == list(range(700))
        assert s.healer.rebuilds == 1
        assert s.get_max_offset(TOPIC, QID) == 700
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and re.search(
        f"consume queue {TOPIC}/{QID} (rebuilt|repaired) from the CommitLog", errors[0]
    )
    with DefaultMessageStore(store_a_config(store_a_copy)) as s:  # the rebuilt queue is on disk
        assert s.healer.rebuilds == 0
        assert read_all(s, TOPIC, QID) == list(range(700))


def test_last_unit_of_a_file_is_checked_at_start(
    store_a_copy: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The start-up check covers each file's first and last unit: the rebuild happens before any read."""
    flip(cq_file(store_a_copy, start=6000), 299 * CQ_STORE_UNIT_SIZE + 11, 0x04)
    with caplog.at_level(logging.ERROR, "store.heal"), DefaultMessageStore(store_a_config(store_a_copy)) as s:
        assert s.healer.rebuilds == 1
        assert "unit at queue offset 599" in caplog.text and "TOTALSIZE" in caplog.text
        assert read_all(s, TOPIC, QID) == list(range(700))


def test_crash_recovery_finds_a_flipped_unit_it_re_dispatches(
    store_a_copy: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """After a crash, recovery re-dispatches records whose units exist; a unit that says otherwise than
    its record (here one in the middle of a file, which the samples do not reach) is rebuilt at start."""
    path = cq_file(store_a_copy, start=6000)
    flip(path, 50 * CQ_STORE_UNIT_SIZE + 7, 0x10)
    (store_a_copy / "abort").touch()
    with caplog.at_level(logging.ERROR, "store.heal"), DefaultMessageStore(store_a_config(store_a_copy)) as s:
        assert s.healer.rebuilds == 1
        assert f"{path}: unit at queue offset 350" in caplog.text
        assert read_all(s, TOPIC, QID) == list(range(700))


@pytest.mark.parametrize(
    ("unit", "healed"),
    [
        (
            7,
            "repaired from the CommitLog (units 7..7 rewritten",
        ),  # intact units around it: rewritten in place
        (59, "rebuilt from the CommitLog (1 units from queue offset 59"),  # the last unit: refilled after 58
    ],
)
def test_unit_corrupted_while_running_heals_on_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, unit: int, healed: str
) -> None:
    """A unit damaged under a running store (here through its mapping) to point at another record of its
    queue: the next read repairs it from the CommitLog between its intact neighbours rather than serving
    the wrong record, skipping, or walking the whole log."""
    with DefaultMessageStore(small_config(tmp_path)) as s:
        for i in range(120):
            assert s.put_message(Message("T", f"m{i:03d}".encode(), queue_id=i % 2)).ok
        cq = s.get_consume_queue("T", 0)
        assert cq is not None
        mf = cq.files.find_file(unit * CQ_STORE_UNIT_SIZE)
        assert mf is not None
        pos = unit * CQ_STORE_UNIT_SIZE - mf.file_from_offset
        phys, size, tags = decode_unit(mf.view, pos)
        other = cq.get_unit(unit - 1)
        assert other is not None and other[1] == size  # same length: only the queue offset tells them apart
        mf.mm[pos : pos + 20] = (
            other[0].to_bytes(8, "big") + size.to_bytes(4, "big") + tags.to_bytes(8, "big")
        )
        with caplog.at_level(logging.ERROR, "store.heal"):
            assert read_all(s, "T", 0) == list(range(60))
        assert s.healer.rebuilds == 1
        assert f"consume queue T/0 {healed}" in caplog.text
        healed_cq = s.get_consume_queue("T", 0)
        assert healed_cq is not None and healed_cq.get_unit(unit) == (phys, size, tags)
        assert s.put_message(Message("T", b"after", queue_id=0)).queue_offset == 60
        assert read_all(s, "T", 0) == list(range(61))


def found(s: DefaultMessageStore, key: str) -> bool:
    return any(m.message.keys == [key] for m in s.query_message("K", key, 4, 0, 2**62).messages)


@pytest.mark.slow
@pytest.mark.parametrize(("which", "byte"), [(-1, 0), (-1, 36 + 2), (1, 8 + 1), (1, 24 + 7), (0, 33)])
def test_flipped_index_header_is_rebuilt(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, which: int, byte: int
) -> None:
    """One flipped byte in an index header (timestamps, offsets, counts; newest, middle or oldest file):
    after start every key is found in every file again, and the rebuild is logged at ERROR."""
    keys = keyed_store(tmp_path)
    index = sorted((tmp_path / "index").iterdir())
    flip(index[which], byte, 0x40)
    with caplog.at_level(logging.ERROR, "store.heal"), DefaultMessageStore(small_config(tmp_path)) as s:
        missing = [k for k in keys if not found(s, k)]
        assert missing == []
    assert f"index file {index[which]} had a bad header" in caplog.text
    assert "header rebuilt from its" in caplog.text
    with DefaultMessageStore(small_config(tmp_path)) as s:  # the repaired header is on disk
        assert [f.name for f in s.index.files] == [p.name for p in index]
        assert all(found(s, k) for k in keys[::25])


def test_index_file_whose_entries_are_damaged_too_is_rebuilt_from_the_commit_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Header and first entry damaged: the header cannot be trusted to be recomputed from the entries,
    so the file (and the later ones) are rebuilt from the CommitLog; every key is found."""
    keys = keyed_store(tmp_path)
    index = sorted((tmp_path / "index").iterdir())
    flip(index[1], 36 + 3, 0x40)  # indexCount
    flip(index[1], 40 + 64 * 4 + 20 + 4 + 6, 0x80)  # entry 1's CommitLog offset
    with caplog.at_level(logging.ERROR, "store.heal"), DefaultMessageStore(small_config(tmp_path)) as s:
        assert [k for k in keys if not found(s, k)] == []
    assert f"index file {index[1]} has a bad header" in caplog.text
    assert "and the 1 later index file from the CommitLog" in caplog.text


def test_empty_index_file_with_a_flipped_header_is_dropped(tmp_path: Path) -> None:
    """A file without entries yet (begin = end = the previous file's end): a begin time flipped back
    would stop every key query at it; start drops it and the older file's keys are found."""
    with DefaultMessageStore(small_config(tmp_path)) as s:
        for i in range(199):  # 398 keys: one short of the first file's capacity
            assert s.put_message(Message("K", b"x", properties={"KEYS": f"k{i} j{i}"})).ok
        assert s.put_message(Message("K", b"x", properties={"KEYS": "last"})).ok  # fills the file
        s.index._writable_file(s.clock.now_ms)  # the next file exists, empty
        s.index.write_header()
        assert [f.index_count for f in s.index.files] == [400, 1]
    newest = sorted((tmp_path / "index").iterdir())[-1]
    flip(newest, 2, 0x01)  # beginTimestamp minus 2**40 ms
    with DefaultMessageStore(small_config(tmp_path)) as s:
        assert len(s.query_message("K", "k5", 4, s.clock.now_ms() - 3_600_000, 2**62).messages) == 1


def test_healthy_index_headers_pass_the_check(tmp_path: Path) -> None:
    keys = keyed_store(tmp_path)
    names = sorted(p.name for p in (tmp_path / "index").iterdir())
    with DefaultMessageStore(small_config(tmp_path)) as s:
        assert [f.name for f in s.index.files] == names  # nothing rebuilt
        assert found(s, keys[0]) and found(s, keys[-1])
        for f in s.index.files:
            assert HEADER.unpack_from(f.mm, 0)[5] == f.index_count


def test_a_rebuilt_queue_is_on_disk_before_the_read_is_answered(tmp_path: Path) -> None:
    """A rebuild replaces units below the checkpoint's recovery point, which abnormal recovery trusts to
    be on disk (it re-dispatches only what follows the point): they must reach the disk before the store
    goes on, not at the next 60-s checkpoint."""
    cfg = small_config(tmp_path, flush_interval_consume_queue=3_600_000)  # no background flush meanwhile
    with DefaultMessageStore(cfg) as s:
        for i in range(40):
            assert s.put_message(Message("T", f"m{i:03d}".encode(), queue_id=0)).ok
        cq = s.get_consume_queue("T", 0)
        assert cq is not None
        s._checkpoint()  # everything flushed; the recovery point is past the queue
        mf = cq.files.find_file(39 * CQ_STORE_UNIT_SIZE)
        assert mf is not None
        pos = 39 * CQ_STORE_UNIT_SIZE - mf.file_from_offset
        mf.mm[pos : pos + 8] = (10**9).to_bytes(8, "big")  # the last unit points past the CommitLog
        assert read_all(s, "T", 0) == list(range(40))
        assert s.healer.rebuilds == 1
        healed = s.get_consume_queue("T", 0)
        assert healed is not None and healed.files.dirty_bytes() == 0
