"""The replica mark in the checkpoint: how far a slave's CommitLog is known to be its master's
(docs/replication.md §the-replica-mark), what an older store gets, and that a crash never leaves it past what
the CommitLog holds."""

from __future__ import annotations

import os
import shutil
import struct
import threading
import zlib
from pathlib import Path

import pytest

from store.checkpoint import (
    DAMAGED_KEPT,
    REPLICA_MARK_AT,
    UNKNOWN_FOLLOWING,
    UNPROVEN_INCARNATION,
    Incarnation,
    StoreCheckpoint,
    begin_incarnation,
    incarnation_end,
    keep_master_history,
    master_history,
    parse_incarnations,
    read_incarnations,
)
from store.config import SLAVE
from store.engine import DefaultMessageStore
from store.inspect import layout, verify
from store.message import Message
from tests.support.cli import RunCli
from tests.support.stores import small_config
from tests.support.waiting import wait_for

FILE = 256 * 1024


def put(store: DefaultMessageStore, n: int, topic: str = "T") -> None:
    for i in range(n):
        assert store.put_message(Message(topic, f"record-{i}".encode() * 30, queue_id=0)).ok


def wipe_mark(root: Path) -> None:
    """The checkpoint as a store from before the mark has it."""
    with open(root / "checkpoint", "r+b") as f:
        f.seek(REPLICA_MARK_AT)
        f.write(bytes(32))


def an_older_stores(root: Path, n: int) -> int:
    """``n`` records put by a master, its checkpoint then as a store from before the mark has it: the end."""
    with DefaultMessageStore(small_config(root)) as master:
        put(master, n)
        end = master.max_phy_offset
    wipe_mark(root)
    return end


def mark_on_disk(root: Path) -> int | None:
    return StoreCheckpoint(str(root / "checkpoint"), read_only=True).replica_mark


def test_a_masters_own_puts_never_move_the_mark_and_an_old_store_is_a_slaves_to_its_end(
    tmp_path: Path,
) -> None:
    """Without a mark (a store from before it) a store opened as a slave is taken as its master's to its
    end, as it was served before; opened as a master, none of it is (its own records are nobody's)."""
    root = tmp_path / "s"
    with DefaultMessageStore(small_config(root)) as store:
        put(store, 5)
        end = store.max_phy_offset
        assert store.replica_mark == 0
    assert mark_on_disk(root) == 0
    wipe_mark(root)
    with DefaultMessageStore(small_config(root, broker_role=SLAVE)) as slave:
        assert (slave.replica_mark, slave.held_back) == (end, 0)
        assert slave.get_max_offset("T", 0) == 5
    assert mark_on_disk(root) == end
    wipe_mark(root)
    with DefaultMessageStore(small_config(root)) as master:
        assert master.replica_mark == 0
    with DefaultMessageStore(small_config(root, broker_role=SLAVE)) as slave:
        assert (slave.replica_mark, slave.held_back) == (0, end)
        assert slave.get_max_offset("T", 0) == 0  # nothing served until checked
        assert slave.look_message_by_offset(0) is None
        with slave._put_lock:  # a queue healed from the CommitLog meanwhile gets no unit past the mark
            slave.healer.rebuild_queues({("T", 0): "a test's"})
        assert slave.get_max_offset("T", 0) == 0
        slave.replica_checked(end)
        slave.dispatch()
        assert (slave.replica_mark, slave.held_back, slave.get_max_offset("T", 0)) == (end, 0, 5)
    assert mark_on_disk(root) == end


def test_a_mark_a_broker_that_does_not_know_it_outlived_is_void(tmp_path: Path) -> None:
    """A 4.9.8 broker rewrites the checkpoint's longs and knows nothing of the mark: it may have written
    records of its own past it, so the mark is void and nothing is taken as the master's."""
    root = tmp_path / "s"
    end = an_older_stores(root, 4)
    with DefaultMessageStore(small_config(root, broker_role=SLAVE)) as slave:
        assert slave.replica_mark == end
    with open(root / "checkpoint", "r+b") as f:  # as RocketMQ's StoreCheckpoint#flush writes it
        f.write(struct.pack(">qqq", 1, 2, 3))
    checkpoint = StoreCheckpoint(str(root / "checkpoint"), read_only=True)
    assert checkpoint.replica_mark is None and checkpoint.replica_mark_found
    with DefaultMessageStore(small_config(root, broker_role=SLAVE)) as slave:
        assert (slave.replica_mark, slave.held_back) == (0, end)


def source_log(root: Path, n: int) -> tuple[bytes, list[int]]:
    """A master's CommitLog bytes of ``n`` records and where each record ends."""
    with DefaultMessageStore(small_config(root, mapped_file_size_commit_log=FILE)) as store:
        put(store, n, "Src")
        data = bytes(store.commit_log.files.files[0].view[: store.max_phy_offset])
    ends, pos = [], 0
    while pos < len(data):
        pos += struct.unpack_from(">i", data, pos)[0]
        ends.append(pos)
    return data, ends


def power_loss_image(root: Path, image: Path, store: DefaultMessageStore) -> int | None:
    """What the disk may hold after a power loss now: the checkpoint as written, and the CommitLog as far
    as it was flushed after the checkpoint was read (unflushed pages are lost). Returns the mark in it
    (None: the read met a write of the checkpoint, no image)."""
    checkpoint = (root / "checkpoint").read_bytes()
    flushed = store.commit_log.files.flushed_offset
    os.makedirs(image / "commitlog")
    (image / "checkpoint").write_bytes(checkpoint)
    (image / "abort").write_bytes(b"")
    for mf in store.commit_log.files.files:
        kept = max(0, min(flushed - mf.file_from_offset, mf.file_size))
        with open(image / "commitlog" / os.path.basename(mf.path), "wb") as f:
            f.write(bytes(mf.view[:kept]))
            f.truncate(mf.file_size)
    mark = mark_on_disk(image)
    if mark is None:
        shutil.rmtree(image)
    return mark


@pytest.mark.slow
def test_a_crash_between_a_replicated_write_and_the_marks_write_never_leaves_the_mark_past_the_log(
    tmp_path: Path,
) -> None:
    """A slave takes its master's records while its flush loop writes the mark. At any moment, the mark on
    disk is within what the CommitLog had flushed, so a power loss then leaves a mark the log holds: the
    store recovered from that image serves the records below the mark and holds back the rest."""
    data, ends = source_log(tmp_path / "src", 500)
    root = tmp_path / "slave"
    config = small_config(
        root, broker_role=SLAVE, mapped_file_size_commit_log=FILE, flush_interval_commit_log=20
    )
    store = DefaultMessageStore(config)
    store.open()
    store.start()
    done = threading.Event()
    failure: list[BaseException] = []

    def feed() -> None:
        try:
            at = 0
            for i in range(0, len(ends), 5):
                end = ends[min(i + 4, len(ends) - 1)]
                assert store.append_replica(at, data[at:end])
                store.dispatch_replica()
                at = end
                done.wait(0.01)
        except BaseException as e:
            failure.append(e)
        finally:
            done.set()

    feeder = threading.Thread(target=feed)
    feeder.start()
    images = []
    try:
        while not done.wait(0.002):
            mark = mark_on_disk(root) or 0
            assert mark <= store.commit_log.files.flushed_offset  # never past what the log had flushed
            if len(images) < 3 and 0 < mark < store.max_phy_offset:
                image = tmp_path / f"image{len(images)}"
                imaged = power_loss_image(root, image, store)
                if imaged is not None:
                    images.append((image, imaged))
        feeder.join()
        assert not failure, failure
        wait_for(lambda: mark_on_disk(root) == len(data), "the mark at the log's end")
    finally:
        done.set()
        feeder.join()
        store.shutdown()
    assert images, "no mark was written while records arrived"
    for image, mark in images:
        with DefaultMessageStore(
            small_config(image, broker_role=SLAVE, mapped_file_size_commit_log=FILE)
        ) as crashed:
            assert mark <= crashed.max_phy_offset
            assert crashed.replica_mark == mark
            assert crashed.held_back == crashed.max_phy_offset - mark
            assert crashed.get_max_offset("Src", 0) == sum(1 for e in ends if e <= mark)
        shutil.rmtree(image)


def test_store_verify_names_what_a_slave_holds_back_past_its_mark_and_no_problem(tmp_path: Path) -> None:
    """A slave holding records back past its mark has no ConsumeQueue unit for them (it builds them once
    checked): 'store verify' says so in a note, not as problems; a unit missing below the mark still is."""
    root = tmp_path / "s"
    with DefaultMessageStore(small_config(root)) as master:
        put(master, 6)
        end = master.max_phy_offset
    with DefaultMessageStore(small_config(root, broker_role=SLAVE)) as slave:
        assert slave.held_back == end
    report = verify(layout(root))
    assert (report.ok, report.records_without_unit, report.problems_found) == (True, 0, 0), report.problems
    assert any("6 records past the replica mark at offset 0" in note for note in report.notes), report.notes
    with DefaultMessageStore(small_config(root)) as master:  # a master builds every unit at its start
        assert master.get_max_offset("T", 0) == 6
    cq = next((root / "consumequeue" / "T" / "0").iterdir())
    data = bytearray(cq.read_bytes())
    data[3 * 20 : 6 * 20] = bytes(3 * 20)  # its last three lost: the others past the mark have theirs
    cq.write_bytes(bytes(data))
    report = verify(layout(root))
    assert (report.ok, report.records_without_unit) == (False, 3)


def test_the_mark_is_bound_to_its_broker_name_and_a_store_opened_without_one_keeps_it(tmp_path: Path) -> None:
    """The mark counts one broker name's master's records: under another name it counts none. A tool that
    opens the store knowing no name (store clean) keeps the name it was written with; a mark written
    before marks were named is read as it was."""
    root = tmp_path / "s"
    with DefaultMessageStore(small_config(root), broker_name="a") as master:
        put(master, 3)
        end = master.max_phy_offset
    wipe_mark(root)
    with DefaultMessageStore(small_config(root, broker_role=SLAVE), broker_name="a") as slave:
        assert slave.replica_mark == end
    with DefaultMessageStore(small_config(root)):
        pass
    with DefaultMessageStore(small_config(root, broker_role=SLAVE), broker_name="a") as slave:
        assert slave.replica_mark == end
    with DefaultMessageStore(small_config(root, broker_role=SLAVE), broker_name="b") as slave:
        assert (slave.replica_mark, slave.held_back) == (0, end)
    checkpoint = StoreCheckpoint(str(root / "checkpoint"))
    checkpoint.replica_mark, checkpoint.replica_owner = end, None  # as marks were first written
    checkpoint.flush()
    with DefaultMessageStore(small_config(root, broker_role=SLAVE), broker_name="c") as slave:
        assert (slave.replica_mark, slave.held_back) == (end, 0)


def test_store_clean_with_its_recovery_leaves_the_mark_as_it_found_it(tmp_path: Path, cli: RunCli) -> None:
    """'store clean --execute --allow-recovery' starts the store knowing not its broker's role: it wrote a
    master's mark (0) into a store from before the mark, and the slave it was then served nothing with its
    master down, where it is taken as its master's to its end. The mark stays as found, absent or not."""
    root = tmp_path / "s"
    with DefaultMessageStore(small_config(root), broker_name="a") as master:
        put(master, 4)
        end = master.max_phy_offset
    wipe_mark(root)
    for found in (None, end // 2):
        if found is not None:
            checkpoint = StoreCheckpoint(str(root / "checkpoint"))
            checkpoint.replica_mark = found
            checkpoint.flush()
            checkpoint.close()
        (root / "abort").touch()  # a crash: the clean runs the recovery, a store start
        done = cli("store", "clean", "--store", str(root), "--execute", "--allow-recovery", "--yes")
        assert done.code == 0, done.stderr
        checkpoint = StoreCheckpoint(str(root / "checkpoint"), read_only=True)
        assert checkpoint.replica_mark == found
    with DefaultMessageStore(small_config(root, broker_role=SLAVE), broker_name="a") as slave:
        assert slave.replica_mark == end // 2


def test_a_store_makes_its_identity_once_and_the_mark_keeps_its_masters(tmp_path: Path) -> None:
    """A store's identity is made at its first start and kept (a read-only open makes none); the mark
    keeps the identity of the master's store it was checked against, under its broker name only."""
    root = tmp_path / "s"
    with DefaultMessageStore(small_config(root), broker_name="a") as master:
        put(master, 3)
        end = master.max_phy_offset
        identity = master.identity
    assert len(bytes.fromhex(identity)) == 16 and (root / "identity").read_bytes().hex() == identity
    os.rename(root / "identity", tmp_path / "kept")
    with DefaultMessageStore(small_config(root), read_only=True) as viewed:
        assert viewed.identity == "" and not (root / "identity").exists()
    os.rename(tmp_path / "kept", root / "identity")
    with DefaultMessageStore(small_config(root), broker_name="a") as master:
        assert master.identity == identity
    with DefaultMessageStore(small_config(root, broker_role=SLAVE), broker_name="a") as slave:
        assert (slave.identity, slave.replica_master) == (identity, "")
        slave.name_replica_master("ab" * 16)
        slave.replica_checked(end)
    assert StoreCheckpoint(str(root / "checkpoint"), read_only=True).replica_master == bytes.fromhex(
        "ab" * 16
    )
    with DefaultMessageStore(small_config(root, broker_role=SLAVE), broker_name="a") as slave:
        assert (slave.replica_mark, slave.replica_master) == (end, "ab" * 16)
        slave.name_replica_master("")  # a master that says none
    with DefaultMessageStore(small_config(root, broker_role=SLAVE), broker_name="a") as slave:
        assert (slave.replica_mark, slave.replica_master) == (end, "")
        slave.name_replica_master("ab" * 16)
    with DefaultMessageStore(small_config(root, broker_role=SLAVE), broker_name="b") as slave:
        assert (slave.replica_mark, slave.replica_master) == (0, "")


def test_each_start_as_a_master_begins_an_incarnation_and_the_mark_keeps_the_one_it_copied_from(
    tmp_path: Path,
) -> None:
    """A store keeps its incarnations beside its identity, a new one at its log's end each time it starts
    as a master (the broker begins it; an offline open does not); a slave's mark keeps the master's
    incarnation it was checked against with the master's identity, and a mark written before incarnations
    (naming the identity alone) is still read."""
    root = tmp_path / "s"
    with DefaultMessageStore(small_config(root), broker_name="a") as master:
        master.begin_incarnation()
        put(master, 3)
        end = master.max_phy_offset
    with DefaultMessageStore(small_config(root), broker_name="a") as master:
        master.begin_incarnation()
        history = master.incarnations
    assert [i.start for i in history] == [0, end] and history[0].id != history[1].id
    assert read_incarnations(str(root)) == history
    with DefaultMessageStore(small_config(root), read_only=True) as viewed:
        assert viewed.incarnations == history
    report = verify(layout(root))
    assert (report.identity, report.incarnation) == (master.identity, str(history[-1]))

    with DefaultMessageStore(small_config(root, broker_role=SLAVE), broker_name="a") as slave:
        slave.name_replica_master("ab" * 16, "cd" * 16)
        slave.replica_checked(end)
    assert StoreCheckpoint(str(root / "checkpoint"), read_only=True).replica_incarnation == bytes.fromhex(
        "cd" * 16
    )
    with DefaultMessageStore(small_config(root, broker_role=SLAVE), broker_name="a") as slave:
        assert (slave.replica_master, slave.replica_incarnation) == ("ab" * 16, "cd" * 16)
        slave.name_replica_master("ab" * 16)  # a master that shows no history: the identity's layout
    with open(root / "checkpoint", "rb") as f:
        f.seek(REPLICA_MARK_AT)
        assert f.read(8) == b"mqctlRM3"
    with DefaultMessageStore(small_config(root, broker_role=SLAVE), broker_name="a") as slave:
        assert (slave.replica_mark, slave.replica_master, slave.replica_incarnation) == (end, "ab" * 16, "")


def test_a_start_begins_its_incarnation_at_the_logs_first_change_with_the_id_it_announced(
    tmp_path: Path,
) -> None:
    """A start of a store that keeps incarnations begins none until its log first changes (a put, an append
    from its master): then the one it announced meanwhile, at the log's end. Starts that change nothing (a
    crash loop) leave the history as it was; a store without one begins one at once. The mark keeps the
    master's next incarnation beside the one it names."""
    root = tmp_path / "s"
    with DefaultMessageStore(small_config(root, mapped_file_size_commit_log=FILE), broker_name="a") as master:
        master.begin_incarnation(at_first_change=True)
        assert (master.next_incarnation, len(master.incarnations)) == ("", 1)
        put(master, 3)
        end = master.max_phy_offset
    first = read_incarnations(str(root))
    for _ in range(3):
        with DefaultMessageStore(
            small_config(root, mapped_file_size_commit_log=FILE), broker_name="a"
        ) as master:
            master.begin_incarnation(at_first_change=True)
            assert len(master.next_incarnation) == 32
    assert read_incarnations(str(root)) == first
    with DefaultMessageStore(small_config(root, mapped_file_size_commit_log=FILE), broker_name="a") as master:
        master.begin_incarnation(at_first_change=True)
        following = master.next_incarnation
        put(master, 1)
        put(master, 1)
        assert master.next_incarnation == ""
        assert [(i.id.hex(), i.start) for i in master.incarnations] == [
            *((i.id.hex(), i.start) for i in first),
            (following, end),
        ]

    data, ends = source_log(tmp_path / "src", 4)
    slave_root = tmp_path / "slave"
    config = small_config(slave_root, mapped_file_size_commit_log=FILE, broker_role=SLAVE)
    with DefaultMessageStore(config, broker_name="a") as slave:
        slave.begin_incarnation(at_first_change=True)
        assert slave.append_replica(0, data[: ends[1]])
        slave.name_replica_master("ab" * 16, "cd" * 16, "ef" * 16)
        slave.replica_checked(ends[1])
    with DefaultMessageStore(config, broker_name="a") as slave:
        assert (slave.replica_incarnation, slave.replica_following) == ("cd" * 16, "ef" * 16)
        before = slave.incarnations
        slave.begin_incarnation(at_first_change=True)
        following = slave.next_incarnation
        assert slave.append_replica(ends[1], data[ends[1] :])
        assert slave.incarnations == [*before, Incarnation(bytes.fromhex(following), ends[1])]


def test_an_incarnation_ends_at_the_earliest_later_start_and_a_history_going_back_is_kept() -> None:
    """A log recovered shorter than it was after a restart (a power loss within the writeback window), or
    cut as a slave, begins an incarnation below an earlier one's start: it is kept, and it ends every
    earlier incarnation there; read as the end of the history, a slave's mark naming an earlier one was
    credited past records the master replaced."""
    a, b, c = (bytes([n]) * 16 for n in (1, 2, 3))
    history = parse_incarnations(f"{a.hex()}@0;{b.hex()}@5000;{c.hex()}@3000")
    assert [(h.id, h.start) for h in history] == [(a, 0), (b, 5000), (c, 3000)]
    assert incarnation_end(history, 0) == 3000
    assert incarnation_end(history, 1) == 3000
    assert incarnation_end(history, 2) is None
    # a start no long can hold leaves none (int() of thousands of digits raises)
    assert parse_incarnations(f"{a.hex()}@0;{b.hex()}@{'9' * 5000}") == []


def test_a_history_that_does_not_parse_reads_as_none_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A store's incarnations file with a line that does not parse (a damaged block) was read up to that line,
    silently: its last incarnation then ended at a later start than the one dropped, and vouched for more.
    It reads as none now, at ERROR naming the file; bytes that are no ASCII too. A slave's copy of its
    master's (replica-incarnations) that does not parse, or cannot be read, reads as none at WARNING."""
    a, b = (bytes([n]) * 16 for n in (1, 2))
    path = tmp_path / "incarnations"
    path.write_text(f"{a.hex()}@0\n{b.hex()}@40x0\n")
    with caplog.at_level("WARNING", logger="store.checkpoint"):
        assert read_incarnations(str(tmp_path)) == []
    assert [(r.levelname, str(path) in r.getMessage()) for r in caplog.records] == [("ERROR", True)]
    path.write_bytes(f"{a.hex()}@0\n".encode() + b"\xff@1\n")
    caplog.clear()
    assert read_incarnations(str(tmp_path)) == []
    assert [r.levelname for r in caplog.records] == ["ERROR"]

    copy = tmp_path / "replica-incarnations"
    keep_master_history(str(tmp_path), "ab" * 16, [Incarnation(a, 0), Incarnation(b, 4096)])
    assert master_history(str(tmp_path)) == ("ab" * 16, [Incarnation(a, 0), Incarnation(b, 4096)])
    for damaged in (f"{'ab' * 16}\n{a.hex()}@0\n{b.hex()[:-2]}@4096\n", f"ab\n{a.hex()}@0\n"):
        copy.write_text(damaged)
        caplog.clear()
        assert master_history(str(tmp_path)) == ("", [])
        assert [(r.levelname, str(copy) in r.getMessage()) for r in caplog.records] == [("WARNING", True)]
    copy.unlink()
    copy.mkdir()
    caplog.clear()
    assert master_history(str(tmp_path)) == ("", [])
    assert [r.levelname for r in caplog.records] == ["WARNING"]


def damaged_copies(root: Path, name: str) -> list[bytes]:
    """The copies kept beside ``name`` of it when it did not parse, oldest first."""
    return [p.read_bytes() for p in sorted(root.glob(f"{name}.damaged-*"))]


def test_a_damaged_incarnations_file_is_kept_beside_it_before_the_store_writes_it_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A store's incarnations file that does not parse reads as none, and the store's next change writes it
    again: what damaged it was lost. Opened by a store that writes, it is copied beside it first, named in
    the ERROR, once however often it is read or written before it parses again; the newest few copies are
    kept. A read-only open copies nothing."""
    root = tmp_path / "s"
    with DefaultMessageStore(small_config(root)) as store:
        store.begin_incarnation(at_first_change=True)  # (as the broker does at its start)
    damaged = [b"%d garbage \xff\n" % n for n in range(DAMAGED_KEPT + 2)]
    for n, raw in enumerate(damaged):
        (root / "incarnations").write_bytes(raw)
        with DefaultMessageStore(small_config(root), read_only=True):
            pass
        assert damaged_copies(root, "incarnations") == damaged[max(0, n - DAMAGED_KEPT) : n]
        caplog.clear()
        with DefaultMessageStore(small_config(root)) as store:
            [error] = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
            [copy] = sorted(root.glob("incarnations.damaged-*"))[-1:]
            assert f"(kept as {copy})" in error and copy.read_bytes() == raw
            store.begin_incarnation(at_first_change=True)  # none read: begun now, the file written again
        assert len(read_incarnations(str(root))) == 1
        assert damaged_copies(root, "incarnations") == damaged[max(0, n + 1 - DAMAGED_KEPT) : n + 1]


def test_a_damaged_copy_just_made_is_kept_whatever_the_older_copies_are_dated(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Copies dated later than now (a clock stepped back, a store from a host whose clock was ahead): the newest
    few were told by their names, so the copy just made went at once, the ERROR naming a file that was gone,
    and the next write replaced the damaged file. Now the copy just made stays, the others go oldest by
    their mtimes, and damaged bytes kept in any copy (not only the newest) are named, not copied again."""
    later = [tmp_path / f"incarnations.damaged-2{n}991231T000000.000Z" for n in range(DAMAGED_KEPT)]
    for n, old in enumerate(later):
        old.write_bytes(b"%d earlier garbage\n" % n)
        os.utime(old, ns=(2**62 + n, 2**62 + n))  # (the oldest of them the first)

    def damaged(raw: bytes) -> tuple[Path, set[Path]]:
        """``raw`` read as the store's incarnations: the copy the ERROR names, and all copies kept."""
        (tmp_path / "incarnations").write_bytes(raw)
        caplog.clear()
        assert read_incarnations(str(tmp_path), keep_damaged=True) == []
        [error] = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
        copies = set(tmp_path.glob("incarnations.damaged-*"))
        [copy] = [c for c in copies if f"(kept as {c})" in error]
        assert copy.read_bytes() == raw
        return copy, copies

    copy, copies = damaged(b"garbage \xff\n")
    assert copies == {copy, *later[1:]}
    assert damaged(later[1].read_bytes()) == (later[1], copies)


def test_a_slaves_damaged_copy_of_its_masters_incarnations_is_kept_beside_it_before_it_is_written_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A slave's replica-incarnations that does not parse reads as none, and its next check writes it again:
    it is copied beside it first, named in the WARNING, once however often it is read before."""
    a = Incarnation(bytes([1]) * 16, 0)
    copy = tmp_path / "replica-incarnations"
    raw = f"{'ab' * 16}\n{a.id.hex()[:-2]}@0\n".encode()
    copy.write_bytes(raw)
    for _ in range(2):
        caplog.clear()
        assert master_history(str(tmp_path)) == ("", [])
        [kept] = sorted(tmp_path.glob("replica-incarnations.damaged-*"))
        assert [r.getMessage() for r in caplog.records if f"(kept as {kept})" in r.getMessage()]
    keep_master_history(str(tmp_path), "ab" * 16, [a])
    assert master_history(str(tmp_path)) == ("ab" * 16, [a])
    assert damaged_copies(tmp_path, "replica-incarnations") == [raw]
    assert damaged_copies(tmp_path, "incarnations") == []  # (a name of its own)


# The mark as an mqctl that knows its identity layout (RM3) and not incarnations reads and writes it: at byte
# 160 a magic, the offset, the CRC32 of the broker name, the master's store identity, then the CRC32 of the
# checkpoint's three longs and those; its writes keep the rest of the first 256 bytes as it read them.
_OLD_MARK = struct.Struct(">8sqI16s")
# and what the mqctl between that one and the incarnation slot wrote there: the incarnation after the identity
_RM4 = struct.Struct(">8sqI16s16s")


def old_mark(root: Path) -> tuple[int, int, bytes] | None:
    """The mark as that older mqctl reads it (None: it finds none, and takes a slave's whole log as its master's)."""
    page = (root / "checkpoint").read_bytes()[:256]
    fields = page[REPLICA_MARK_AT : REPLICA_MARK_AT + _OLD_MARK.size]
    magic, offset, owner, master = _OLD_MARK.unpack(fields)
    crc = struct.unpack_from(">I", page, REPLICA_MARK_AT + _OLD_MARK.size)[0]
    if magic != b"mqctlRM3" or crc != zlib.crc32(page[:24] + fields):
        return None
    return offset, owner, master


def write_as_older_mqctl(root: Path, fields: bytes) -> None:
    """The checkpoint written as an mqctl before the slot writes it: the page as read, later longs and the mark
    ``fields`` (its CRC added) in one write."""
    with open(root / "checkpoint", "r+b") as f:
        page = bytearray(f.read(256))
        header = struct.pack(">qqq", *(t + 1000 for t in struct.unpack_from(">qqq", page)))
        page[:24] = header
        page[REPLICA_MARK_AT : REPLICA_MARK_AT + len(fields) + 4] = fields + struct.pack(
            ">I", zlib.crc32(header + fields)
        )
        f.seek(0)
        f.write(page)


def rolled_back(root: Path) -> None:
    """The slave's store started once by an mqctl that knows the mark's RM3 and not incarnations: it writes
    the mark as it read it, with its own longs."""
    mark = old_mark(root)
    assert mark is not None
    write_as_older_mqctl(root, _OLD_MARK.pack(b"mqctlRM3", *mark))


def test_an_older_mqctl_reads_the_mark_and_a_mark_it_wrote_since_proves_no_incarnation(
    tmp_path: Path,
) -> None:
    """Both directions of a rollback. The mark stays where an mqctl that knows RM3 and not incarnations reads
    it, with the same offset, name and master (in RM4 it found no mark and took a slave's whole log as its
    master's); the incarnation has a slot after it, which that mqctl keeps as it read it. Once it wrote the
    mark (a rollback, then this version again) the slot no longer matches, as the rest of an RM4 under its
    RM3 does not: the mark names the unproven incarnation, in no master's history, and keeps its offset and
    master. A mark from before incarnations names none, as before; an RM4 is read as written."""
    root = tmp_path / "s"
    with DefaultMessageStore(small_config(root), broker_name="a") as master:
        put(master, 3)
        end = master.max_phy_offset
    named = ("ab" * 16, "cd" * 16)
    with DefaultMessageStore(small_config(root, broker_role=SLAVE), broker_name="a") as slave:
        slave.name_replica_master(*named)
        slave.replica_checked(end)
    assert old_mark(root) == (end, zlib.crc32(b"a"), bytes.fromhex(named[0]))

    def reopened() -> tuple[int, str, str]:
        with DefaultMessageStore(small_config(root, broker_role=SLAVE), broker_name="a") as slave:
            return slave.replica_mark, slave.replica_master, slave.replica_incarnation

    assert reopened() == (end, *named)
    assert old_mark(root) == (end, zlib.crc32(b"a"), bytes.fromhex(named[0]))  # (written again at the stop)
    rolled_back(root)
    assert (
        StoreCheckpoint(str(root / "checkpoint"), read_only=True).replica_incarnation == UNPROVEN_INCARNATION
    )
    assert reopened() == (end, named[0], UNPROVEN_INCARNATION.hex())
    assert reopened() == (end, named[0], UNPROVEN_INCARNATION.hex())  # (kept so until a check names one)

    with DefaultMessageStore(small_config(root, broker_role=SLAVE), broker_name="a") as slave:
        slave.name_replica_master(*named)
    owner = zlib.crc32(b"a")
    write_as_older_mqctl(root, _RM4.pack(b"mqctlRM4", end, owner, *map(bytes.fromhex, named)))
    assert old_mark(root) is None  # what the older mqctl made of an RM4
    assert reopened() == (end, *named)  # read as written, written back as RM3 and its slot
    assert old_mark(root) == (end, owner, bytes.fromhex(named[0]))
    # (which run of its master an RM4 named cannot be told, and stays so: see the slave's `_vouched`)
    assert StoreCheckpoint(str(root / "checkpoint"), read_only=True).replica_following == UNKNOWN_FOLLOWING
    write_as_older_mqctl(root, _RM4.pack(b"mqctlRM4", end, owner, *map(bytes.fromhex, named)))
    rolled_back_over_rm4 = _OLD_MARK.pack(b"mqctlRM3", end, owner, bytes.fromhex(named[0]))
    write_as_older_mqctl(root, rolled_back_over_rm4)
    assert reopened() == (end, named[0], UNPROVEN_INCARNATION.hex())

    with open(root / "checkpoint", "r+b") as f:  # a store from before incarnations: nothing past its RM3
        f.seek(REPLICA_MARK_AT + 40)
        f.write(bytes(56))
    write_as_older_mqctl(root, rolled_back_over_rm4)
    assert reopened() == (end, named[0], "")


def test_an_incarnation_begun_again_after_its_file_was_replaced_is_not_appended_twice(tmp_path: Path) -> None:
    """The history's directory sync failed after the file was replaced: the store still has the incarnation
    due, and begins it again at its next change; the history holds it once (twice, it ended itself there)."""
    root = str(tmp_path)
    begin_incarnation(root, 0)
    ident = bytes([7]) * 16
    assert begin_incarnation(root, 4096, ident) == begin_incarnation(root, 4096, ident)
    assert [i.id for i in read_incarnations(root)][1:] == [ident]


def test_a_tail_a_check_holds_back_is_served_by_no_read_until_a_check_and_stays_held_at_a_restart(
    tmp_path: Path,
) -> None:
    """A check found the slave's log not its master's from its third record on and could not cut it yet:
    nothing from there is served (no unit, no look-up), a connection to a master it cannot ask does not
    release it, the mark comes down to the cut on disk too, so a restart holds it back from there, and a
    check that passes serves it again. Not a CommitLog byte changes."""
    root = tmp_path / "s"
    end = an_older_stores(root, 5)
    with DefaultMessageStore(small_config(root, broker_role=SLAVE)) as slave:
        unit = slave.get_consume_queue("T", 0).get_unit(2)  # type: ignore[union-attr]
        assert unit is not None and slave.replica_mark == end
        cut = unit[0]
        slave.hold_back(cut)
        assert (slave.replica_mark, slave.held_back, slave.max_phy_offset) == (cut, end - cut, end)
        assert slave.get_max_offset("T", 0) == 2
        assert slave.look_message_by_offset(cut) is None and slave.look_message_by_offset(0) is not None
        slave.serve_unchecked()
        assert not slave.dispatch_replica()
        assert (slave.held_back, slave.get_max_offset("T", 0)) == (end - cut, 2)
    assert mark_on_disk(root) == cut
    with DefaultMessageStore(small_config(root, broker_role=SLAVE)) as slave:
        assert (slave.replica_mark, slave.held_back, slave.get_max_offset("T", 0)) == (cut, end - cut, 2)
        slave.replica_checked(end)
        while slave.dispatch_replica():
            pass
        assert (slave.held_back, slave.get_max_offset("T", 0)) == (0, 5)
        assert slave.look_message_by_offset(cut) is not None
