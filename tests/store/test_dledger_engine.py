"""The engine in DLedger mode: 4.9.8's DLedgerCommitLog layout, reads by offset, dispatch and recovery."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from store import dledger as dl, inspect
from store.config import ASYNC_FLUSH, SYNC_FLUSH
from store.dledger_commitlog import WARM_AHEAD_BYTES, DLedgerCommitLog
from store.dledger_log import DLedgerLog
from store.engine import (
    WARM_MAX_DELAY_S,
    WARM_MIN_DELAY_S,
    DefaultMessageStore,
    GetMessageStatus,
    warm_delay,
)
from store.mapped_file import PREPARE_CHUNK
from store.message import TRANSACTION_PREPARED_TYPE, Message
from store.record import decode_record
from tests.support.stores import all_bodies, dledger_config, dledger_store, kill_writer
from tests.support.waiting import wait_for


def _open(root: Path, **cfg: object) -> DefaultMessageStore:
    store = DefaultMessageStore(dledger_config(root, **cfg))
    store.open()
    store.start()
    return store


def test_records_live_in_dledger_entries(tmp_path: Path) -> None:
    store = _open(tmp_path)
    results = [
        store.put_message(Message("D", b"x" * 100, queue_id=0, properties={"KEYS": f"k{i}"}))
        for i in range(3)
    ]
    store.shutdown()
    assert not (tmp_path / "commitlog").exists() or not os.listdir(tmp_path / "commitlog")
    data = tmp_path / "dledger-n0" / "data" / "00000000000000000000"
    raw = data.read_bytes()
    pos = 0
    for i, r in enumerate(results):
        entry = dl.decode_entry(raw, pos)
        assert (entry.index, entry.term, entry.pos) == (i, 1, pos)
        # DLedgerCommitLog: the offset everyone uses is the entry's pos + BODY_OFFSET, stamped in the record
        assert r.phys_offset == pos + dl.BODY_OFFSET == decode_record(entry.body).commit_log_offset
        assert r.msg_id.endswith(format(pos + dl.BODY_OFFSET, "016X"))
        pos += entry.size
    assert (tmp_path / "dledger-n0" / dl.CHECKPOINT_FILE).read_text() == "endIndex=2\ncommittedIndex=2\n"


def test_pull_query_and_lookup_across_rolled_files(tmp_path: Path) -> None:
    msgs = dledger_store(tmp_path, 400)
    assert len(os.listdir(tmp_path / "dledger-n0" / "data")) >= 2  # 64 KiB data files rolled with blanks
    store = _open(tmp_path)
    try:
        for q in (0, 1):
            assert all_bodies(store, "D", q) == [m.body for m in msgs if m.queue_id == q]
        [hit] = store.query_message("D", "dk-357", 32, 0, 2**62).messages
        assert hit.message.body == msgs[357].body
        by_id = store.look_message_by_msg_id(hit.message.msg_id)
        assert by_id is not None and by_id.message.body == msgs[357].body
        res = store.put_message(Message("D", b"after reopen", queue_id=0))
        assert res.ok and all_bodies(store, "D", 0)[-1] == b"after reopen"
    finally:
        store.shutdown()


def test_dispatch_stops_at_the_committed_index(tmp_path: Path) -> None:
    store = _open(tmp_path)
    try:
        cl = store.commit_log
        assert isinstance(cl, DLedgerCommitLog)
        cl.auto_commit = False  # a Raft driver commits when a quorum has the entries
        for i in range(5):
            store.put_message(Message("D", f"m{i}".encode(), queue_id=0))
        assert cl.dlog.last_index == 4 and cl.dlog.committed_index == -1
        assert store.dispatch_committed() == 0
        assert all_bodies(store, "D", 0) == []
        cl.dlog.set_committed(2)
        assert store.dispatch_committed() == 3
        assert all_bodies(store, "D", 0) == [b"m0", b"m1", b"m2"]
        assert store.put_message(Message("D", b"m5", queue_id=0)).queue_offset == 5  # offsets run ahead
        assert store.look_message_by_offset(cl.dlog.get(3).pos + dl.BODY_OFFSET) is None  # not committed
    finally:
        store.shutdown()


def test_the_flush_loop_leaves_what_a_raft_driver_commits_to_its_dispatch(tmp_path: Path) -> None:
    """A Raft driver's ``dispatch_committed`` dispatches what it committed and tells the arrival listeners of
    each queue that grew: the ConsumeQueue flush loop's dispatch retry, run between the commit and that call,
    leaves the records to it (taken there, they would reach their queues with no waiting pull told)."""
    store = _open(tmp_path)
    heard: list[tuple[str, int, int]] = []
    store.add_arrival_listener(
        lambda topic, queue_id, max_offset: heard.append((topic, queue_id, max_offset))
    )
    try:
        cl = store.commit_log
        assert isinstance(cl, DLedgerCommitLog)
        cl.auto_commit = False
        for i in range(5):
            assert store.put_message(Message("D", f"m{i}".encode(), queue_id=i % 2)).ok
        cl.dlog.set_committed(cl.dlog.last_index)
        store._retry_dispatch_in_chunks(store.reput_from_offset)  # the flush loop's step, as it may run now
        assert store.dispatch_committed() == 5
        assert sorted(heard) == [("D", 0, 3), ("D", 1, 2)]
        assert all_bodies(store, "D", 0) == [b"m0", b"m2", b"m4"]
    finally:
        store.shutdown()


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_follower_dispatching_pushes_derives_what_the_leader_did(tmp_path: Path) -> None:
    """A follower's store, pushed the leader's entries in batches of several sizes and committing behind
    them, then a burst of more than a dispatch chunk (1 MiB) committed at once, writes the ConsumeQueues
    the leader wrote as it put each message (byte for byte) and serves every queue and key alike."""
    msgs = [
        Message("D", f"m{i}-".encode() * 200, queue_id=i % 3, properties={"KEYS": f"dk-{i}", "TAGS": "t"})
        for i in range(1500)
    ]
    leader = _open(tmp_path / "leader")
    for m in msgs:
        assert leader.put_message(m).ok
    ldlog = leader.commit_log.dlog  # type: ignore[attr-defined]
    entries = [ldlog.get(i) for i in range(ldlog.last_index + 1)]
    follower = DefaultMessageStore(dledger_config(tmp_path / "follower"))
    fcl = follower.commit_log
    assert isinstance(fcl, DLedgerCommitLog)
    fcl.auto_commit = False
    follower.open()
    follower.start()
    try:
        at, sizes = 0, [1, 5, 16, 2, 40]
        while at < 500:
            batch = entries[at : at + sizes[at % len(sizes)]]
            fcl.dlog.append_followers(batch)
            at += len(batch)
            fcl.dlog.set_committed(batch[-1].index - 3)  # the leader's commit index lags its pushes
            follower.dispatch_committed()
        fcl.dlog.append_followers(entries[at:])
        assert fcl.dlog.end_pos - fcl.dlog.committed_pos > 1024 * 1024
        fcl.dlog.set_committed(entries[-1].index)
        assert follower.dispatch_committed() == len(entries) - at + 3
        for q in range(3):
            assert all_bodies(follower, "D", q) == all_bodies(leader, "D", q) == [m.body for m in msgs[q::3]]
        for i in (0, 499, 500, 1499):
            [hit] = follower.query_message("D", f"dk-{i}", 32, 0, 2**62).messages
            assert hit.message.body == msgs[i].body
    finally:
        follower.shutdown()
        leader.shutdown()
    assert _tree(tmp_path / "follower" / "consumequeue") == _tree(tmp_path / "leader" / "consumequeue")


@pytest.mark.parametrize("in_c", [True, False])
def test_a_leader_dispatches_what_its_puts_parsed_and_never_a_record_cut_since(
    tmp_path: Path, in_c: bool
) -> None:
    """A leader's committed records are dispatched by the C walk over its data file, or without it from
    what its puts parsed (as a single broker's put dispatches); entries cut after it lost the leadership
    are forgotten with them: the new leader's entries, pushed to the same offsets with the same sizes, are
    dispatched as they are."""
    store = _open(tmp_path / "old")
    cl = store.commit_log
    assert isinstance(cl, DLedgerCommitLog)
    cl.auto_commit = False
    if in_c and not cl.walks_in_c:
        pytest.skip("no C walk in this build")
    cl.walks_in_c = in_c
    for i in range(3):
        assert store.put_message(Message("D", f"old-{i}".encode(), queue_id=0)).ok
    assert len(cl.parsed) == (0 if in_c else 3)  # (the C walk reads the records where they lie)
    cl.dlog.set_committed(0)
    assert store.dispatch_committed() == 1 and len(cl.parsed) == (0 if in_c else 2)  # taken, not parsed back
    new = _open(tmp_path / "new")
    for i, q in ((0, 0), (1, 1), (2, 1)):
        assert new.put_message(Message("D", f"new-{i}".encode(), queue_id=q)).ok
    ndlog = new.commit_log.dlog  # type: ignore[attr-defined]
    pushed = [ndlog.get(i) for i in (1, 2)]
    try:
        assert [e.pos for e in pushed] == [cl.dlog.get(i).pos for i in (1, 2)]
        cl.dlog.truncate_after(0)  # the old leader's uncommitted tail, set aside
        cl.dlog.append_followers(pushed)
        cl.dlog.set_committed(2)
        assert store.dispatch_committed() == 2
        assert all_bodies(store, "D", 0) == [b"old-0"]
        assert all_bodies(store, "D", 1) == [b"new-1", b"new-2"]
    finally:
        new.shutdown()
        store.shutdown()


def _leader_message(i: int) -> Message:
    """The i-th of a leader's puts: most of them the common kind, now and then one the C walk leaves to the
    Python walk (a prepared transaction half, a delayed message, an IPv6 producer), keys indexed."""
    props = {"TAGS": f"t{i % 5}", "KEYS": f"lk-{i}"}
    if i % 61 == 5:
        props["DELAY"] = "2"
    return Message(
        "D",
        f"leader-{i}-".encode() * (i % 7 + 1),
        queue_id=i % 3,
        properties=props,
        sys_flag=TRANSACTION_PREPARED_TYPE if i % 53 == 11 else 0,
        born_host=("fe80::1", 4000) if i % 47 == 9 else ("10.0.0.2", 4000),
    )


def test_a_leader_dispatching_by_the_c_walk_or_its_parsed_records_builds_the_queues_a_walk_builds(
    tmp_path: Path,
) -> None:
    """Committed records a leader's puts appended are dispatched by the C walk over its data files (the
    compiled build) or from what its puts parsed, across data files rolled with blanks, commits that end
    mid-file and records the C walk leaves to Python: the ConsumeQueues and the IndexFile's answers come out
    as a walk of the same records builds them (a third leader, whose parsed records are dropped before each
    dispatch)."""
    names = ("filed", "parsed", "walked")
    stores = [_open(tmp_path / name) for name in names]
    if not stores[0].commit_log.walks_in_c:  # type: ignore[attr-defined]
        stores.pop(0).shutdown()  # (no C walk in this build)
        names = names[1:]
    try:
        for name, store in zip(names, stores, strict=True):
            cl = store.commit_log
            assert isinstance(cl, DLedgerCommitLog)
            cl.auto_commit = False
            cl.walks_in_c = name == "filed"
            dispatched = 0
            for i in range(600):
                assert store.put_message(_leader_message(i)).ok
                if i % 37 == 36 or i == 599:
                    cl.dlog.set_committed(cl.dlog.last_index - i % 2)  # (now and then one stays behind)
                    if name == "walked":
                        cl.parsed.clear()
                    dispatched += store.dispatch_committed()
                    assert store.reput_from_offset == cl.max_offset  # all committed, nothing more
            cl.dlog.set_committed(cl.dlog.last_index)
            dispatched += store.dispatch_committed()
            assert dispatched == 600 and not cl.parsed
        assert len(os.listdir(tmp_path / "parsed" / "dledger-n0" / "data")) >= 2  # rolled
        for q in range(3):
            assert all_bodies(stores[0], "D", q) == all_bodies(stores[-1], "D", q) != []
        for i in (0, 9, 11, 64, 370, 599):  # (a common one, an IPv6 one, a prepared half, ...)
            found = [
                [m.phys_offset for m in s.query_message("D", f"lk-{i}", 8, 0, 2**62).messages] for s in stores
            ]
            assert found[0] != [] and all(f == found[0] for f in found), i
    finally:
        for store in stores:
            store.shutdown()
    trees = [_tree(tmp_path / name / "consumequeue" / "D") for name in names]  # (the delay topic's units
    assert trees[0] and all(t == trees[0] for t in trees)  # carry each store's own delivery times)


def test_alone_a_lagging_checkpoint_loses_no_committed_entry(tmp_path: Path) -> None:
    msgs = dledger_store(tmp_path, 30)
    # a crash before the checkpoint (persisted every few seconds) caught up with the appends
    (tmp_path / "dledger-n0" / dl.CHECKPOINT_FILE).write_text("endIndex=29\ncommittedIndex=3\n")
    store = _open(tmp_path)
    try:
        assert all_bodies(store, "D", 0) == [m.body for m in msgs if m.queue_id == 0]
        [hit] = store.query_message("D", "dk-20", 32, 0, 2**62).messages  # read by offset: committed only
        assert hit.message.body == msgs[20].body
    finally:
        store.shutdown()


def test_offline_tools_agree_on_a_store_whose_checkpoint_lags(tmp_path: Path) -> None:
    """A SIGKILLed member's checkpoint lags what it committed, and its index covers records past that:
    the index header is judged against the written data, so ``index ls``, ``verify`` and a key query
    agree, and only the entries past the committed end find nothing."""
    msgs = dledger_store(tmp_path, 30)
    (tmp_path / "dledger-n0" / dl.CHECKPOINT_FILE).write_text("endIndex=29\ncommittedIndex=3\n")
    lay = inspect.layout(tmp_path)
    [header] = inspect.index_headers(lay)
    assert header.problem is None
    [hit] = inspect.messages_by_key(lay, "D", "dk-2", 0, 2**62)
    assert hit.body == msgs[2].body
    assert inspect.messages_by_key(lay, "D", "dk-20", 0, 2**62) == []  # (not committed, as far as it knows)
    report = inspect.verify(lay)
    assert report.ok and report.index_errors == 0


@pytest.mark.slow
def test_the_data_file_is_zero_filled_ahead_of_the_writer(tmp_path: Path) -> None:
    """The store's warm-up thread keeps the DLedger data file written ahead of the appends (a fresh page
    faulted by a store into the mapping is zeroed on the event loop): the reservation runs past the first
    chunk while the writer is still inside it, which only the thread does; the entries read back whole."""
    store = _open(tmp_path, mapped_file_size_commit_log=8 * 1024 * 1024)
    try:
        log = store.commit_log
        assert isinstance(log, DLedgerCommitLog) and log.prefault
        # past WARM_AHEAD_BYTES, inside the first chunk
        bodies = [bytes([i % 251]) * 1024 for i in range(1200)]
        for i, body in enumerate(bodies):
            assert store.put_message(Message("D", body, queue_id=0, properties={"KEYS": f"w{i}"})).ok
        mf = log.files.last_file()
        assert mf is not None and WARM_AHEAD_BYTES < mf.wrote_position < PREPARE_CHUNK
        wait_for(lambda: mf.prepared_position > PREPARE_CHUNK, "the data file zero-filled ahead")
        assert mf.wrote_position < PREPARE_CHUNK
        assert all_bodies(store, "D", 0) == bodies
    finally:
        store.shutdown()
    for read_only, flush in ((True, ASYNC_FLUSH), (False, SYNC_FLUSH)):
        cold = DefaultMessageStore(dledger_config(tmp_path, flush_disk_type=flush), read_only=read_only)
        assert not cold.commit_log.prefault  # (every fsync would write the zeros too; nothing to write)


def test_the_warm_up_thread_sleeps_by_the_writers_pace(tmp_path: Path) -> None:
    """The warm-up thread wakes about twice before the writer could reach the end of what is zero-filled:
    an idle store's (or a slow writer's) the least often, one whose window a writer would cross within a
    wake as often as it always did; ``warm_ahead`` says how wide the window is."""
    mib = 1024 * 1024
    assert warm_delay(mib, 0.0) == WARM_MAX_DELAY_S
    assert warm_delay(mib, 1000.0) == WARM_MAX_DELAY_S
    assert warm_delay(mib, 20.0 * mib) == pytest.approx(1 / 40)  # (a twentieth of a second to cross it)
    assert warm_delay(0, 20.0 * mib) == WARM_MIN_DELAY_S
    assert warm_delay(mib, 1e6 * mib) == WARM_MIN_DELAY_S
    store = _open(tmp_path, mapped_file_size_commit_log=8 * 1024 * 1024)
    try:
        log = store.commit_log
        assert isinstance(log, DLedgerCommitLog)
        for i in range(100):
            assert store.put_message(Message("D", bytes(1024), queue_id=0, properties={"KEYS": f"w{i}"})).ok
        mf = log.files.last_file()
        assert mf is not None
        ahead = log.warm_ahead(WARM_AHEAD_BYTES)
        assert ahead == mf.prepared_position - mf.wrote_position >= WARM_AHEAD_BYTES
    finally:
        store.shutdown()


def test_consume_queues_are_rebuilt_past_the_last_dispatched(tmp_path: Path) -> None:
    msgs = dledger_store(tmp_path, 200)
    shutil.rmtree(tmp_path / "consumequeue")
    shutil.rmtree(tmp_path / "index")
    store = _open(tmp_path)
    try:
        assert all_bodies(store, "D", 1) == [m.body for m in msgs if m.queue_id == 1]
        assert store.query_message("D", "dk-7", 32, 0, 2**62).messages
    finally:
        store.shutdown()


def test_crash_tail_is_set_aside_and_queues_follow(tmp_path: Path) -> None:
    msgs = dledger_store(tmp_path, 60)
    log_ = DLedgerLog(str(tmp_path / "dledger-n0"), data_file_size=64 * 1024, read_only=True)
    last = log_.get(log_.last_index)
    log_.close()
    # a torn write: the end of the last record zeroed (its entry header and index record survived)
    data = tmp_path / "dledger-n0" / "data" / dl_name(last.pos, 64 * 1024)
    raw = bytearray(data.read_bytes())
    rel = last.pos % (64 * 1024)
    raw[rel + dl.BODY_OFFSET + 100 : rel + last.size] = bytes(last.size - dl.BODY_OFFSET - 100)
    data.write_bytes(bytes(raw))
    store = _open(tmp_path)
    try:
        got = all_bodies(store, "D", 0) + all_bodies(store, "D", 1)
        assert sorted(got) == sorted(m.body for m in msgs[:-1])  # the damaged record is never served
        assert os.listdir(tmp_path / "quarantine")
    finally:
        store.shutdown()


def test_damage_inside_the_log_is_set_aside_in_place(tmp_path: Path) -> None:
    msgs = dledger_store(tmp_path, 40)
    data = tmp_path / "dledger-n0" / "data" / "00000000000000000000"
    raw = bytearray(data.read_bytes())
    third = dl.decode_entry(raw, 0).size * 2  # every entry of this store has the same size
    raw[third + dl.BODY_OFFSET + 100] ^= 0xFF  # a body byte of entry 2 (queue 0, offset 1)
    data.write_bytes(bytes(raw))
    store = _open(tmp_path)
    try:
        assert store.commit_log.set_aside == {third + dl.BODY_OFFSET: len(dl.decode_entry(raw, third).body)}
        want = [m.body for i, m in enumerate(msgs) if m.queue_id == 0 and i != 2]
        assert all_bodies(store, "D", 0) == want  # every later record stays in service
        assert os.listdir(tmp_path / "quarantine")
        assert store.put_message(Message("D", b"next", queue_id=0)).ok
    finally:
        store.shutdown()


def test_damage_the_record_check_misses_is_found_by_the_entry_crc(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    msgs = dledger_store(tmp_path, 40)
    data = tmp_path / "dledger-n0" / "data" / "00000000000000000000"
    raw = bytearray(data.read_bytes())
    end = 0
    for _ in msgs:
        end += dl.decode_entry(raw, end).size
    raw[end - 8] ^= 0xFF  # in the last record's properties: its BODYCRC does not cover them
    data.write_bytes(bytes(raw))
    with caplog.at_level("ERROR"):
        store = _open(tmp_path)
    try:
        assert "entry 39: body crc" in caplog.text
        assert isinstance(store.commit_log, DLedgerCommitLog) and store.commit_log.dlog.last_index == 38
        got = all_bodies(store, "D", 0) + all_bodies(store, "D", 1)
        assert sorted(got) == sorted(m.body for m in msgs[:-1])  # the damaged record is never served
        assert os.listdir(tmp_path / "quarantine")
    finally:
        store.shutdown()


WRITER = """
import sys
from store.config import SYNC_FLUSH
from store.engine import DefaultMessageStore
from store.message import TRANSACTION_PREPARED_TYPE, Message
from tests.support.stores import dledger_config
store = DefaultMessageStore(dledger_config(sys.argv[1], flush_disk_type=SYNC_FLUSH))
store.open(); store.start()
i = 0
while True:
    r = store.put_message(Message("K", b"payload-%d" % i * 30, queue_id=i % 3, properties={"KEYS": "key-%d" % i}))
    assert r.ok, r
    print(i, r.queue_offset, r.phys_offset, flush=True)
    i += 1
"""


@pytest.mark.slow
def test_sigkill_mid_write_loses_no_acknowledged_message(tmp_path: Path) -> None:
    root = tmp_path / "store"
    acked = kill_writer(WRITER, root)
    store = _open(root)
    try:
        assert not store.last_exit_ok
        for i, qoff, phys in acked:
            res = store.get_messages("g", "K", i % 3, qoff, 1)
            assert res.status is GetMessageStatus.FOUND, i
            assert (res.messages[0].phys_offset, res.messages[0].message.body) == (
                phys,
                b"payload-%d" % i * 30,
            )
            assert phys in {m.phys_offset for m in store.query_message("K", f"key-{i}", 4, 0, 2**62).messages}
        dlog = store.commit_log.dlog  # type: ignore[attr-defined]
        # the log, its committed index and the queues agree: every entry a unit, nothing past the last
        units = sum(store.topic_queue_table().values())
        assert units == dlog.last_index + 1 == dlog.committed_index + 1 >= len(acked)
        assert store.put_message(Message("K", b"after", queue_id=0)).ok
    finally:
        store.shutdown()


def dl_name(pos: int, file_size: int) -> str:
    return f"{pos - pos % file_size:020d}"


@pytest.mark.pure_python
def test_a_batch_a_full_disk_refuses_part_way_gives_no_queue_offset_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A leader's batch put writes one entry per message. A full disk refusing the third fails the put
    after two are in the log: they commit and are served (a failed send may be stored, as a timed-out one),
    and the next put is not given their queue offsets again (two records at one ConsumeQueue offset: the
    acknowledged one was never served)."""
    store = _open(tmp_path)
    cl = store.commit_log
    assert isinstance(cl, DLedgerCommitLog)
    cl.auto_commit = False
    assert store.put_message(Message("D", b"first", queue_id=0)).ok
    placed = DLedgerLog.append_leader_placed
    calls: list[int] = []

    def full_at_third(self: DLedgerLog, body: bytes, term: int, pos: int) -> dl.Entry:
        calls.append(pos)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        return placed(self, body, term, pos)

    monkeypatch.setattr(DLedgerLog, "append_leader_placed", full_at_third)
    batch = [Message("D", f"failed-{i}".encode(), queue_id=0) for i in range(3)]
    assert not store.put_messages(batch).ok
    monkeypatch.undo()
    assert cl.dlog.last_index == 2
    result = store.put_messages([Message("D", f"later-{i}".encode(), queue_id=0) for i in range(2)])
    assert result.ok and result.queue_offset == 3
    cl.dlog.set_committed(cl.dlog.last_index)
    store.dispatch_committed()
    assert all_bodies(store, "D", 0) == [b"first", b"failed-0", b"failed-1", b"later-0", b"later-1"]
    store.shutdown()
