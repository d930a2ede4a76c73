"""HA codec (docs/replication.md §the-byte-protocol) and the file store's replica append: byte-identical
files, whole-record dispatch."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from store.commitlog import PutMessageStatus, RecordWalk
from store.config import SLAVE
from store.engine import DefaultMessageStore
from store.errors import CorruptRecordError
from store.ha import (
    HEADER_SIZE,
    HAProtocolError,
    ReplicaRecordError,
    ReplicaRecords,
    ReplicaStore,
    decode_frames,
    encode_frame,
    encode_frame_header,
    encode_report,
    frame_extent,
    latest_report,
    max_record_size,
    record_spans,
    transfer_start,
)
from store.memory import InMemoryMessageStore
from store.message import Message
from store.quarantine import list_quarantines
from tests.support.stores import all_bodies, ha_frames, small_config

FILE = 64 * 1024


def test_spec_vectors() -> None:
    assert encode_report(0) == b"\x00" * 8
    assert encode_report(0x0102030405060708) == bytes(range(1, 9))
    assert encode_frame_header(1024, 0) == b"\x00\x00\x00\x00\x00\x00\x04\x00" + b"\x00\x00\x00\x00"
    assert encode_frame(7, b"ab") == b"\x00" * 7 + b"\x07" + b"\x00\x00\x00\x02ab"
    assert HEADER_SIZE == 12


@given(st.lists(st.integers(0, 2**63 - 1), min_size=1, max_size=5), st.binary(max_size=7))
def test_report_round_trip_keeps_the_newest(offsets: list[int], tail: bytes) -> None:
    buf = b"".join(encode_report(o) for o in offsets) + tail
    value, used = latest_report(buf)
    assert value == offsets[-1]
    assert used == 8 * len(offsets)


def test_partial_report_waits() -> None:
    assert latest_report(b"\x00" * 7) == (None, 0)
    with pytest.raises(HAProtocolError):
        latest_report(b"\xff" * 8)


frames_st = st.lists(st.tuples(st.integers(0, 2**62), st.binary(max_size=300)), max_size=6)


@pytest.mark.slow
@given(frames_st, st.integers(0, 400))
def test_frames_round_trip_and_torn_tail(frames: list[tuple[int, bytes]], cut: int) -> None:
    stream = b"".join(encode_frame(o, d) for o, d in frames)
    got, used = decode_frames(stream, 1 << 20)
    assert [(o, bytes(d)) for o, d in got] == frames
    assert used == len(stream)
    torn = stream[: max(0, len(stream) - cut)]
    got, used = decode_frames(torn, 1 << 20)
    assert used <= len(torn)
    assert [(o, bytes(d)) for o, d in got] == frames[: len(got)]  # only whole frames come out
    assert b"".join(encode_frame(o, d) for o, d in got) == torn[:used]


def test_bad_frame_header_is_a_protocol_error() -> None:
    with pytest.raises(HAProtocolError):
        decode_frames(encode_frame_header(0, -1), 1 << 20)
    with pytest.raises(HAProtocolError):
        decode_frames(encode_frame_header(0, 100_000), 32 * 1024)


def test_transfer_positions() -> None:
    assert transfer_start(0, 3 * FILE + 17, FILE) == 3 * FILE  # empty slave: the master's last file
    assert transfer_start(FILE + 5, 3 * FILE, FILE) == FILE + 5
    assert frame_extent(FILE - 10, 5 * FILE, FILE, 32768) == 10  # never across a file boundary
    assert frame_extent(0, 100, FILE, 32768) == 100
    assert frame_extent(0, 5 * FILE, FILE, 32768) == 32768
    assert frame_extent(100, 100, FILE, 32768) == 0


# ---------------------------------------------------------------------- replica append


def _msg(i: int) -> Message:
    return Message(
        topic=f"T{i % 2}",
        body=os.urandom(50 + i % 700),
        queue_id=i % 3,
        properties={"TAGS": f"t{i % 4}", "KEYS": f"key-{i}"},
    )


def _master(root: Path, n: int) -> DefaultMessageStore:
    store = DefaultMessageStore(small_config(root))
    store.open()
    store.start()
    for i in range(n):
        assert store.put_message(_msg(i)).ok
    return store


def _slave(root: Path) -> DefaultMessageStore:
    store = DefaultMessageStore(small_config(root, broker_role=SLAVE))
    store.open()
    store.start()
    return store


def _files(root: Path) -> dict[str, bytes]:
    d = root / "commitlog"
    return {name: (d / name).read_bytes() for name in sorted(os.listdir(d))}


@pytest.mark.parametrize("batch", [32 * 1024, 977])
def test_replica_is_byte_identical_and_dispatched(tmp_path: Path, batch: int) -> None:
    master = _master(tmp_path / "m", 400)
    slave = _slave(tmp_path / "s")
    try:
        for offset, data in ha_frames(master, 0, batch):
            assert slave.append_replica(offset, data)
            if batch < 1000:
                slave.dispatch_replica()
        while slave.dispatch_replica(300):  # in slices smaller than a record: each still moves on
            pass
        master.commit_log.flush()
        slave.commit_log.flush()
        assert len(_files(tmp_path / "m")) > 2  # rolled with fillers
        assert _files(tmp_path / "s") == _files(tmp_path / "m")
        for topic in ("T0", "T1"):
            for q in range(3):
                assert all_bodies(slave, topic, q) == all_bodies(master, topic, q)
        assert [m.message.body for m in slave.query_message("T1", "key-7", 4, 0, 2**62).messages] == [
            m.message.body for m in master.query_message("T1", "key-7", 4, 0, 2**62).messages
        ]
        assert slave.put_message(_msg(0)).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    finally:
        master.shutdown()
        slave.shutdown()


def test_split_record_is_invisible_until_whole(tmp_path: Path) -> None:
    master = _master(tmp_path / "m", 3)
    slave = _slave(tmp_path / "s")
    try:
        data = ha_frames(master, 0, 1 << 20)[0][1]
        first = slave.get_consume_queue("T0", 0)
        assert first is None
        cut = 30  # inside the first record
        assert slave.append_replica(0, data[:cut])
        assert not slave.dispatch_replica()
        assert slave.get_max_offset("T0", 0) == 0 and slave.reput_from_offset == 0
        assert not slave.append_replica(cut + 1, data[cut + 1 :])  # not at the slave's end: refused
        assert slave.append_replica(cut, data[cut:])
        assert slave.dispatch_replica()
        assert not slave.dispatch_replica()  # nothing left
        assert all_bodies(slave, "T0", 0) == all_bodies(master, "T0", 0)
        assert slave.reput_from_offset == master.commit_log.max_offset
    finally:
        master.shutdown()
        slave.shutdown()


def test_empty_slave_starts_at_the_masters_last_file(tmp_path: Path) -> None:
    master = _master(tmp_path / "m", 400)
    slave = _slave(tmp_path / "s")
    try:
        cl = master.commit_log
        start = transfer_start(0, cl.max_offset, cl.file_size)
        assert start > 0
        assert not slave.append_replica(start + 1, b"x")  # an empty slave only starts at a file boundary
        for offset, data in ha_frames(master, start, 32 * 1024):
            assert slave.append_replica(offset, data)
            slave.dispatch_replica()
        name = f"{start:020d}"
        assert list(_files(tmp_path / "s")) == [name]
        assert _files(tmp_path / "s")[name] == _files(tmp_path / "m")[name]
        assert slave.commit_log.max_offset == cl.max_offset
        for topic in ("T0", "T1"):
            for q in range(3):  # queues start mid-way, at the first record of that file
                low = slave.get_min_offset(topic, q)
                assert 0 < low < slave.get_max_offset(topic, q) == master.get_max_offset(topic, q)
                assert master.get_messages("g", topic, q, low, 32).messages[0].raw == (
                    slave.get_messages("g", topic, q, low, 32).messages[0].raw
                )
    finally:
        master.shutdown()
        slave.shutdown()


def test_slave_restart_with_a_torn_tail_recovers_to_a_whole_record(tmp_path: Path) -> None:
    master = _master(tmp_path / "m", 300)
    slave = _slave(tmp_path / "s")
    frames = ha_frames(master, 0, 1000)
    rng = random.Random(5)
    stop = rng.randrange(len(frames) // 2, len(frames))
    for offset, data in frames[:stop]:
        assert slave.append_replica(offset, data)
        slave.dispatch_replica()
    slave.shutdown()
    slave = _slave(tmp_path / "s")
    try:
        resume = slave.commit_log.max_offset
        assert resume <= frames[stop][0]
        for offset, data in ha_frames(master, resume, 32 * 1024):
            assert slave.append_replica(offset, data)
            slave.dispatch_replica()
        master.commit_log.flush()
        slave.commit_log.flush()
        assert _files(tmp_path / "s") == _files(tmp_path / "m")
        assert all_bodies(slave, "T1", 2) == all_bodies(master, "T1", 2)
    finally:
        master.shutdown()
        slave.shutdown()


@pytest.mark.pure_python
def test_a_dispatch_whose_parse_overlaps_shutdown_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The records are parsed without the store's lock: if shutdown began meanwhile (its checkpoint may
    be on disk already), nothing parsed is written and the cursor stays."""
    master = _master(tmp_path / "m", 20)
    slave = _slave(tmp_path / "s")
    try:
        for offset, data in ha_frames(master, 0, 1 << 20):
            assert slave.append_replica(offset, data)
        walk = slave.commit_log.walk

        def walk_then_stop(offset: int, end: int) -> RecordWalk:
            records = walk(offset, end)
            assert list(records)  # parsed (a second iteration yields nothing: the walk is at its end)
            slave._stop.set()  # what shutdown() does first
            return records

        monkeypatch.setattr(slave.commit_log, "walk", walk_then_stop)
        assert not slave.dispatch_replica()
        assert slave.reput_from_offset == 0 and slave.get_consume_queue("T0", 0) is None
        slave._stop.clear()
    finally:
        master.shutdown()
        slave.shutdown()


def test_a_slave_does_not_zero_fill_ahead_of_its_replica(tmp_path: Path) -> None:
    """The replica appends with pwrite, which needs no pre-faulted pages: zeros written first would
    double the page-cache work of a catch-up (the warm-up thread is the master's)."""
    slave = DefaultMessageStore(small_config(tmp_path / "s", broker_role=SLAVE, warm_maped_file_enable=True))
    master = DefaultMessageStore(small_config(tmp_path / "m", warm_maped_file_enable=True))
    try:
        assert not slave.commit_log.prefault and master.commit_log.prefault
    finally:
        master.shutdown()
        slave.shutdown()


# ---------------------------------------------------------------------- the slave's record check


def _master_bytes(tmp_path: Path, n: int = 700) -> tuple[DefaultMessageStore, list[tuple[int, bytes]]]:
    """A master holding ``n`` records over a few files (fillers included), and its HA frames from 0."""
    master = _master(tmp_path / "m", n)
    return master, ha_frames(master, 0, 1000)


def test_replica_records_take_whole_checked_records_across_cut_frames(tmp_path: Path) -> None:
    """Frames of 1,000 bytes cut records anywhere; every record and filler comes out whole, at its offset."""
    master, frames = _master_bytes(tmp_path)
    try:
        records = ReplicaRecords(0, FILE, max_record_size(master.config))
        out = bytearray()
        for offset, data in frames:
            records.feed(offset, data)
            at, whole = records.take()
            assert at == len(out)
            if whole:  # each take ends on a record boundary: the next header follows in the master's log
                end = at + len(whole)
                assert end == master.max_phy_offset or master.read_commit_log(end, 8) is not None
            out += whole
        assert bytes(out) == b"".join(d for _o, d in frames) and not records.pending
        assert len(master.commit_log.files.files) > 2  # fillers were crossed
    finally:
        master.shutdown()


def test_replica_records_refuse_garbage_wrong_offsets_and_bad_crcs(tmp_path: Path) -> None:
    master, frames = _master_bytes(tmp_path, 20)
    try:
        raw = b"".join(d for _o, d in frames)
        size = int.from_bytes(raw[:4], "big")
        cap = max_record_size(master.config)
        cases = {
            "garbage": (0, os.urandom(4096)),
            "zeros": (0, bytes(4096)),
            "moved": (FILE, raw[: 3 * size]),  # sound records, but they name offset 0
            "moved, body damaged": (FILE, raw[:100] + bytes([raw[100] ^ 1]) + raw[101:size]),
            "bad magic": (0, raw[:4] + bytes([raw[4] ^ 1]) + raw[5:size] + bytes(64)),  # then no record
            "bad magic, moved": (FILE, raw[:4] + bytes([raw[4] ^ 1]) + raw[5 : 3 * size]),
        }
        for name, (offset, data) in cases.items():
            records = ReplicaRecords(offset, FILE, cap)
            records.feed(offset, data)
            with pytest.raises(ReplicaRecordError):
                records.take()
            assert records.start == offset and records.pending == data, name  # nothing handed out
        records = ReplicaRecords(0, FILE, cap)
        with pytest.raises(HAProtocolError):
            records.feed(8, raw[:100])  # not where the slave's bytes end
    finally:
        master.shutdown()


def _in_memory_pair(tmp_path: Path, n: int) -> tuple[InMemoryMessageStore, InMemoryMessageStore]:
    """An in-memory master holding ``n`` records and an empty in-memory slave, both running."""
    master = InMemoryMessageStore(small_config(tmp_path / "m"))
    slave = InMemoryMessageStore(small_config(tmp_path / "s", broker_role=SLAVE))
    for store in (master, slave):
        store.open()
        store.start()
    for i in range(n):
        assert master.put_message(_msg(i)).ok
    return master, slave


def _damaged_body(store: DefaultMessageStore | InMemoryMessageStore, offset: int) -> tuple[bytes, bytes]:
    """The record at ``offset`` with one body byte flipped (as a master's recovery finds it and sets it
    aside in place), and its body."""
    found = store.look_message_by_offset(offset)
    assert found is not None
    raw, body = bytearray(found.raw), found.message.body
    raw[bytes(raw).index(body) + 3] ^= 0x01
    return bytes(raw), body


@pytest.mark.parametrize("kind", ["file", "memory"])
def test_a_body_damaged_record_is_taken_and_set_aside_in_place(tmp_path: Path, kind: str) -> None:
    """A record whose only fault is its body CRC is one its master set aside in place: the slave takes it
    byte for byte (its CommitLog stays the master's), sets it aside, never serves it, and its unit keeps the
    queue offsets after it right; a file store keeps it set aside across a restart."""
    if kind == "file":
        master: DefaultMessageStore | InMemoryMessageStore = _master(tmp_path / "m", 40)
        slave: DefaultMessageStore | InMemoryMessageStore = _slave(tmp_path / "s")
    else:
        master, slave = _in_memory_pair(tmp_path, 40)
    try:
        end = master.max_phy_offset
        spans = record_spans(master, 0, end)
        at, size = spans[7]  # T1, queue 1, queue offset 1
        damaged, body = _damaged_body(master, at)
        log = master.read_commit_log(0, end)
        assert log is not None
        log = log[:at] + damaged + log[at + size :]
        records = ReplicaRecords(0, FILE if kind == "file" else 1 << 62, max_record_size(master.config))
        records.feed(0, log)
        taken_at, whole = records.take()
        assert (taken_at, whole) == (0, log)  # all of it: the damaged one too
        [(offset, n, why)] = records.damaged
        assert (offset, n) == (at, size) and "body CRC" in why
        assert slave.append_replica(0, whole)
        where = slave.set_aside_replica_records(records.damaged)
        while slave.dispatch_replica():
            pass
        want = [b for b in all_bodies(master, "T1", 1) if b != body]
        assert all_bodies(slave, "T1", 1) == want and slave.get_max_offset("T1", 1) == len(want) + 1
        with pytest.raises(CorruptRecordError):
            slave.look_message_by_offset(at)
        if isinstance(slave, DefaultMessageStore):
            assert slave.read_commit_log(0, end) == log  # byte for byte
            [manifest] = list_quarantines(str(tmp_path / "s"))
            assert (manifest.recovery, manifest.in_place, manifest.damaged, manifest.path) == (
                "replicated",
                True,
                1,
                where,
            )
            slave.shutdown()
            slave = _slave(tmp_path / "s")  # recovery finds it again, and knows it was set aside
            assert slave.commit_log.set_aside == {at: size}
            assert len(list_quarantines(str(tmp_path / "s"))) == 1
            assert all_bodies(slave, "T1", 1) == want
    finally:
        master.shutdown()
        slave.shutdown()


@pytest.mark.parametrize("damage", ["magic", "topic-length"])
def test_a_record_its_master_set_aside_with_damage_beyond_its_body_is_taken_too(
    tmp_path: Path, damage: str
) -> None:
    """A master's recovery sets aside in place any damaged record whose TOTALSIZE leads to an intact record,
    not only one whose body CRC fails: refusing its bytes stopped the slave there for good. The slave takes
    it when the record after it decides as the master's recovery did, and sets it aside likewise; frame
    by frame it waits for that record."""
    master = _master(tmp_path / "m", 40)
    at, size = record_spans(master, 0, master.max_phy_offset)[7]  # T1, queue 1, queue offset 1
    body = master.look_message_by_offset(at).message.body  # type: ignore[union-attr]
    master.shutdown()
    path = tmp_path / "m" / "commitlog" / f"{0:020d}"
    data = bytearray(path.read_bytes())
    if damage == "magic":
        data[at + 4 : at + 8] = b"\x01\x02\x03\x04"
    else:  # the byte after the body: its CRC still passes
        data[at + 88 + int.from_bytes(data[at + 84 : at + 88], "big")] = 0x7F
    path.write_bytes(bytes(data))
    master = _master(tmp_path / "m", 0)
    slave = _slave(tmp_path / "s")
    try:
        assert master.commit_log.set_aside == {at: size}
        log = master.read_commit_log(0, master.max_phy_offset)
        assert log is not None
        records = ReplicaRecords(0, FILE, max_record_size(master.config))
        records.feed(0, log[: at + size + 20])  # the record after it still arriving
        assert records.take() == (0, log[:at])
        records.feed(at + size + 20, log[at + size + 20 :])
        assert records.take() == (at, log[at:])
        assert [(o, n) for o, n, _ in records.damaged] == [(at, size)]
        assert slave.append_replica(0, log[:at]) and slave.append_replica(at, log[at:])
        slave.set_aside_replica_records(records.damaged)
        while slave.dispatch_replica():
            pass
        assert slave.read_commit_log(0, len(log)) == log
        assert all_bodies(slave, "T1", 1) == [b for b in all_bodies(master, "T1", 1) if b != body]
        assert slave.get_max_offset("T1", 1) == master.get_max_offset("T1", 1)
        garbage = ReplicaRecords(0, FILE, max_record_size(master.config))
        garbage.feed(0, log[:at] + bytes(data[at : at + 8]) + bytes(size - 8) + bytes(64))
        with pytest.raises(ReplicaRecordError):  # what follows is no record: the boundaries are lost
            garbage.take()
    finally:
        master.shutdown()
        slave.shutdown()


def test_a_replicas_tail_set_aside_leaves_a_store_that_replicates_on(tmp_path: Path) -> None:
    """The cut runs on a live slave store: its CommitLog, ConsumeQueues and dispatch cursor go back to the
    cut, the tail and its units are in a quarantine, and the master's records take the offsets."""
    master = _master(tmp_path / "m", 700)
    slave = _slave(tmp_path / "s")
    try:
        for offset, data in ha_frames(master, 0, 32 * 1024):
            assert slave.append_replica(offset, data)
        while slave.dispatch_replica():
            pass
        end = slave.max_phy_offset
        assert end > 3 * FILE
        cut = record_spans(slave, FILE, end)[3][0]  # three records into the second file
        tail = [
            span for f in range(FILE, end, FILE) for span in record_spans(slave, f, end) if span[0] >= cut
        ]
        before = {(t, q): slave.get_max_offset(t, q) for t in ("T0", "T1") for q in range(3)}
        records, where = slave.set_aside_replica_tail(cut, "a test's cut")
        assert slave.max_phy_offset == cut and slave.reput_from_offset == cut
        assert records == len(tail) and where
        [manifest] = list_quarantines(str(tmp_path / "s"))
        assert manifest.why == "a test's cut" and manifest.recovery == "replication"
        assert manifest.records == records and manifest.units == sum(before.values()) - sum(
            slave.get_max_offset(t, q) for t, q in before
        )
        for offset, data in ha_frames(master, cut, 32 * 1024):  # the master's own records at those offsets
            assert slave.append_replica(offset, data)
        while slave.dispatch_replica():
            pass
        for t, q in before:
            assert all_bodies(slave, t, q) == all_bodies(master, t, q)
    finally:
        master.shutdown()
        slave.shutdown()


def test_an_in_memory_replicas_tail_set_aside(tmp_path: Path) -> None:
    """The in-memory store drops its tail, units and index entries alike (it has nowhere to keep them)."""
    master, slave = _in_memory_pair(tmp_path, 50)
    end = master.max_phy_offset
    data = master.read_commit_log(0, end)
    assert data is not None and slave.append_replica(0, data)
    while slave.dispatch_replica():
        pass
    cut = record_spans(slave, 0, end)[20][0]
    assert slave.set_aside_replica_tail(cut, "a test's cut") == (30, "")
    assert slave.max_phy_offset == cut
    assert sum(slave.get_max_offset(f"T{t}", q) for t in range(2) for q in range(3)) == 20
    tail = master.read_commit_log(cut, end - cut)
    assert tail is not None and slave.append_replica(cut, tail)
    while slave.dispatch_replica():
        pass
    for t, q in [(f"T{t}", q) for t in range(2) for q in range(3)]:
        assert slave.get_max_offset(t, q) == master.get_max_offset(t, q)
    assert slave.query_message("T1", "key-49", 4, 0, 2**62).messages


@pytest.mark.parametrize("kind", ["file", "memory"])
def test_a_hold_back_serves_nothing_from_the_cut_on_and_changes_no_byte_of_the_log(
    tmp_path: Path, kind: str
) -> None:
    """:meth:`ReplicaStore.hold_back`, the same on both stores: a check found the slave's log not its master's
    from its twentieth record on and could not cut it yet. The queue units from there go, no read serves a
    record there (by queue offset, physical offset or key), dispatch stops there, the mark comes down to the
    cut, and not a byte of the log changes (nor a file of the file store's). A second hold-back at a higher
    cut changes nothing; a check that finds the log the master's serves all of it again, the mark where the
    check said (the memory store's went to its log's end whatever it was told)."""
    if kind == "file":
        master: DefaultMessageStore | InMemoryMessageStore = _master(tmp_path / "m", 40)
        slave: DefaultMessageStore | InMemoryMessageStore = _slave(tmp_path / "s")
        frames = ha_frames(master, 0, 32 * 1024)
    else:
        master, slave = _in_memory_pair(tmp_path, 40)
        frames = [(0, master.read_commit_log(0, master.max_phy_offset) or b"")]
    queues = [(f"T{t}", q) for t in range(2) for q in range(3)]
    try:
        assert isinstance(slave, ReplicaStore)
        for offset, data in frames:
            assert slave.append_replica(offset, data)
        while slave.dispatch_replica():
            pass
        end = slave.max_phy_offset
        spans = record_spans(slave, 0, end)
        assert len(spans) == 40 and slave.replica_mark == end
        cut, higher = spans[20][0], spans[30][0]
        log = slave.read_commit_log(0, end)
        files = _files(tmp_path / "s") if kind == "file" else {}

        def held_from_the_cut() -> None:
            assert (slave.replica_mark, slave.held_back, slave.max_phy_offset) == (cut, end - cut, end)
            for topic, q in queues:
                before = sum((f"T{i % 2}", i % 3) == (topic, q) for i in range(20))
                assert slave.get_max_offset(topic, q) == before
                assert all_bodies(slave, topic, q) == all_bodies(master, topic, q)[:before]
            assert slave.look_message_by_offset(cut) is None and slave.look_message_by_offset(higher) is None
            assert slave.look_message_by_offset(spans[19][0]) is not None
            assert not slave.query_message("T0", "key-20", 4, 0, 2**62).messages
            assert slave.query_message("T1", "key-19", 4, 0, 2**62).messages
            assert not slave.dispatch_replica()
            assert slave.read_commit_log(0, end) == log
            if kind == "file":
                assert _files(tmp_path / "s") == files

        slave.hold_back(cut)
        held_from_the_cut()
        slave.hold_back(higher)
        held_from_the_cut()
        checked = spans[25][0]
        for up_to in (checked, cut):  # (the mark where the check found the log the master's, never lower)
            slave.replica_checked(up_to)
            assert (slave.replica_mark, slave.held_back) == (checked, 0)
        slave.replica_checked(end + FILE)  # (never past the log's end)
        while slave.dispatch_replica():
            pass
        assert (slave.replica_mark, slave.held_back) == (end, 0)
        for topic, q in queues:
            assert all_bodies(slave, topic, q) == all_bodies(master, topic, q)
        assert slave.query_message("T0", "key-20", 4, 0, 2**62).messages
    finally:
        master.shutdown()
        slave.shutdown()
