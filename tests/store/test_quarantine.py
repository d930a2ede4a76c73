"""Recovery sets aside what it cuts (quarantine), never deletes it; salvage finds every intact record."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from store.checkpoint import RECOVERY_POINT_AT
from store.engine import DefaultMessageStore
from store.errors import CorruptRecordError
from store.message import Message
from store.quarantine import MANIFEST_NAME, list_quarantines, piece_records, walk
from store.record import body_crc_problem, check_record, encode_record
from store.words import plural
from tests.support.stores import small_config

FILE = 64 * 1024
BODY_AT = 88  # where the body starts in a record with IPv4 hosts (fixed fields, hosts, lengths)


def _msg(i: int) -> Message:
    return Message(
        topic="T",
        body=f"body-{i}-".encode() * 20,
        queue_id=i % 2,
        properties={"TAGS": f"tag{i % 3}", "KEYS": f"k-{i}"},
    )


def _open(root: Path) -> DefaultMessageStore:
    store = DefaultMessageStore(small_config(root, max_index_num=256))
    store.open()
    store.start()
    return store


def _write(root: Path, n: int = 1200, sizes: dict[int, int] | None = None) -> dict[int, bytes]:
    """``n`` messages over 5 or 6 CommitLog files of 64 KiB: {CommitLog offset: body} (``sizes``: their sizes)."""
    store = _open(root)
    sent = {}
    for i in range(n):
        r = store.put_message(_msg(i))
        sent[r.phys_offset] = _msg(i).body
        if sizes is not None:
            sizes[r.phys_offset] = r.wrote_bytes
    store.shutdown()
    return sent


def _all_served(store: DefaultMessageStore) -> dict[int, bytes]:
    out = {}
    for (topic, qid), end in store.topic_queue_table().items():
        offset = store.get_min_offset(topic, qid)
        while offset < end:
            res = store.get_messages("g", topic, qid, offset, 32)
            out.update({m.phys_offset: m.message.body for m in res.messages})
            assert res.next_begin_offset > offset
            offset = res.next_begin_offset
    return out


def _salvaged(root: Path) -> tuple[dict[int, bytes], list[int]]:
    intact: dict[int, bytes] = {}
    damaged = []
    for m in list_quarantines(str(root)):
        for piece in m.files:
            if piece.kind == "commitlog":
                for offset, rec in piece_records(m, piece):
                    if isinstance(rec, Exception):
                        damaged.append(offset)
                    else:
                        intact[offset] = rec.body
    return intact, damaged


def _grow_total_size(data: bytearray, at: int) -> None:
    """Damage a record's TOTALSIZE: it no longer leads to the next record (the boundaries are lost)."""
    data[at : at + 4] = (int.from_bytes(data[at : at + 4], "big") + 16).to_bytes(4, "big")


@pytest.mark.parametrize(
    ("abort", "point"),
    [(False, False), (True, False), (True, True)],
    ids=["normal", "abnormal", "abnormal-below-the-recovery-point"],
)
def test_a_damaged_total_size_in_the_second_to_last_file_is_quarantined_not_deleted(
    tmp_path: Path, abort: bool, point: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Below the checkpoint's recovery point too: a crash restart checks what RocketMQ's recovery checks
    and cuts (into the quarantine) where it would."""
    sent = _write(tmp_path)
    names = sorted(os.listdir(tmp_path / "commitlog"))
    assert len(names) >= 4
    second = int(names[-2])
    victim = sorted(o for o in sent if second <= o < second + FILE)[10]
    path = tmp_path / "commitlog" / names[-2]
    data = bytearray(path.read_bytes())
    _grow_total_size(data, victim - second)
    path.write_bytes(bytes(data))
    if abort:
        (tmp_path / "abort").touch()
        if not point:  # as RocketMQ writes it: recovery rescans what its timestamps pick
            _forget_recovery_point(tmp_path)

    with caplog.at_level(logging.WARNING):
        store = _open(tmp_path)
    try:
        assert store.recovery_corruption is not None and store.recovery_corruption.offset == victim
        later = sorted(o for o in sent if o > victim)
        # the later file left the CommitLog for the quarantine, with a manifest; nothing was deleted
        assert sorted(os.listdir(tmp_path / "commitlog")) == names[:-1]
        [m] = list_quarantines(str(tmp_path))
        qdir = Path(m.path)
        assert qdir.parent == tmp_path / "quarantine" and (qdir / MANIFEST_NAME).is_file()
        assert (qdir / "commitlog" / names[-1]).stat().st_size == FILE
        manifest = json.loads((qdir / MANIFEST_NAME).read_text())
        assert manifest["cut_offset"] == victim and "total size" in manifest["why"]
        assert manifest["recovery"] == ("abnormal" if abort else "normal")
        assert (manifest["records"], manifest["damaged"]) == (len(later), 1)
        assert manifest["units"] == len(later) + 1  # every cut record had its ConsumeQueue unit
        tail = next(p for p in m.files if p.kind == "commitlog" and not p.whole_file)
        assert (tail.from_offset, tail.source) == (victim, str(path))
        # logged at ERROR with the number of records set aside
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert any(
            f"set aside {plural(len(later), 'intact record')}" in e and str(qdir) in e for e in errors
        ), errors
        # the intact prefix is served, and only it
        assert _all_served(store) == {o: b for o, b in sent.items() if o < victim}
        assert store.put_message(_msg(5000)).phys_offset == victim
    finally:
        store.shutdown()
    # salvage: every intact record of the quarantined data, the damaged one reported
    intact, damaged = _salvaged(tmp_path)
    assert intact == {o: sent[o] for o in later}
    assert damaged == [victim]
    # the cut tail was zeroed when set aside: the next start finds a clean store and quarantines nothing
    _open(tmp_path).shutdown()
    assert len(list_quarantines(str(tmp_path))) == 1


def _forget_recovery_point(root: Path) -> None:
    with open(root / "checkpoint", "r+b") as f:
        f.seek(RECOVERY_POINT_AT)
        f.write(bytes(128))


def test_a_crash_restart_from_the_recovery_point_sets_aside_a_rotten_record_below_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """After a crash, data below the checkpoint's recovery point is not dispatched again but is checked
    with the body CRC from where RocketMQ's abnormal recovery starts (here its timestamps pick the first
    file): a byte rotted there is set aside at start-up (a quarantine, an ERROR), never served, and
    everything else stays in service; the next start finds it set aside already."""
    sent = _write(tmp_path)
    names = sorted(os.listdir(tmp_path / "commitlog"))
    second = int(names[-2])
    victim = sorted(o for o in sent if second <= o < second + FILE)[10]
    path = tmp_path / "commitlog" / names[-2]
    data = bytearray(path.read_bytes())
    data[victim - second + BODY_AT + 5] ^= 0xFF
    path.write_bytes(bytes(data))
    (tmp_path / "abort").touch()

    with caplog.at_level(logging.ERROR):
        store = _open(tmp_path)
        try:
            assert store.recovery_corruption is None
            [m] = list_quarantines(str(tmp_path))
            manifest = json.loads((Path(m.path) / MANIFEST_NAME).read_text())
            assert (manifest["recovery"], manifest["damaged"], manifest["records"]) == ("abnormal", 1, 0)
            assert [(p.from_offset, p.source) for p in m.files] == [(victim, str(path))]
            assert _all_served(store) == {o: b for o, b in sent.items() if o != victim}
            assert store.put_message(_msg(5000)).ok
        finally:
            store.shutdown()
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any("set aside 1 damaged record" in e and str(victim) in e for e in errors), errors
    (tmp_path / "abort").touch()
    _open(tmp_path).shutdown()
    assert len(list_quarantines(str(tmp_path))) == 1


def test_a_pull_that_meets_a_rotten_record_recovery_did_not_check_sets_it_aside(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """After a clean stop recovery checks only the last three files, as RocketMQ's does: a byte rotted in
    an older one is found by the first pull that reads it, which puts the record in a quarantine then (an
    ERROR, listed like recovery's) and skips it; later reads and starts skip it without a second one."""
    sent = _write(tmp_path)
    names = sorted(os.listdir(tmp_path / "commitlog"))
    assert len(names) >= 5
    victim = sorted(o for o in sent if o < FILE)[10]
    path = tmp_path / "commitlog" / names[0]
    data = bytearray(path.read_bytes())
    data[victim + BODY_AT + 5] ^= 0xFF
    path.write_bytes(bytes(data))

    with caplog.at_level(logging.ERROR):
        store = _open(tmp_path)
        try:
            assert not list_quarantines(str(tmp_path))  # not checked at start
            assert _all_served(store) == {o: b for o, b in sent.items() if o != victim}
            [m] = list_quarantines(str(tmp_path))
            assert (m.recovery, [(p.from_offset, p.source) for p in m.files]) == (
                "read",
                [(victim, str(path))],
            )
            assert _all_served(store) == {o: b for o, b in sent.items() if o != victim}
        finally:
            store.shutdown()
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert sum("a read set aside 1 damaged record" in e and str(victim) in e for e in errors) == 1, errors
    _open(tmp_path).shutdown()
    assert len(list_quarantines(str(tmp_path))) == 1


def test_salvage_skips_garbage_and_finds_the_records_after_it(tmp_path: Path) -> None:
    sizes: dict[int, int] = {}
    sent = _write(tmp_path, sizes=sizes)
    names = sorted(os.listdir(tmp_path / "commitlog"))
    second = int(names[-2])
    offsets = sorted(o for o in sent if second <= o < second + FILE)
    garbage_at = offsets[20] + 30  # inside a record's header: it and the next ones it covers are lost
    path = tmp_path / "commitlog" / names[-2]
    data = bytearray(path.read_bytes())
    data[garbage_at - second : garbage_at - second + 600] = b"\xde\xad\xbe\xef" * 150
    path.write_bytes(bytes(data))
    _open(tmp_path).shutdown()
    hit = {o for o in sent if o < garbage_at + 600 and o + sizes[o] > garbage_at}
    intact, _damaged = _salvaged(tmp_path)
    assert intact == {o: sent[o] for o in sent if o >= offsets[20] and o not in hit}
    assert len(hit) == 3


def test_walk_takes_only_records_that_name_their_own_offset() -> None:
    msg = Message(topic="T", body=b"x" * 50, properties={})
    first = encode_record(
        msg, queue_offset=0, physical_offset=1000, store_timestamp=1, store_host=("127.0.0.1", 1)
    )
    inner = encode_record(
        msg, queue_offset=1, physical_offset=5, store_timestamp=1, store_host=("127.0.0.1", 1)
    )
    # a record whose body holds a whole record: the inner one does not name its position, so it is not taken
    outer_msg = Message(topic="T", body=inner, properties={})
    outer = encode_record(
        outer_msg,
        queue_offset=2,
        physical_offset=1000 + len(first) + 7,
        store_timestamp=1,
        store_host=("127.0.0.1", 1),
    )
    buf = first + b"\x00" * 7 + outer
    found = list(walk(buf, 1000))
    assert [(f.pos, f.error) for f in found if not f.stretch] == [(0, None), (len(first) + 7, None)]
    # the zeros between them are where a record should be: reported once, with where the next one starts
    [gap] = [f for f in found if f.stretch]
    assert (gap.pos, gap.size) == (len(first), 7) and gap.error is not None
    assert str(1000 + len(first) + 7) in gap.error.reason


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_body_crc_problem_agrees_with_the_full_check(host: str) -> None:
    msg = Message(topic="T", body=b"payload" * 9, properties={"TAGS": "a"}, born_host=(host, 5))
    raw = bytearray(
        encode_record(msg, queue_offset=0, physical_offset=0, store_timestamp=1, store_host=(host, 6))
    )
    assert body_crc_problem(raw, 0, len(raw)) is None
    raw[raw.index(b"payload") + 3] ^= 0x01
    problem = body_crc_problem(raw, 0, len(raw))
    assert problem is not None and "CRC" in problem
    with pytest.raises(CorruptRecordError, match="CRC"):
        check_record(raw, 0, len(raw), check_crc=True)
    assert body_crc_problem(raw, 0, 40) is not None  # a unit size that cannot hold the record


def test_data_after_a_zeroed_header_in_the_last_file_is_quarantined_not_overwritten(tmp_path: Path) -> None:
    """A header of zeros reads as the clean end of the CommitLog; a lost page (power loss, a bad sector
    read back as zeros) makes one in the middle of the last file. The records after it were stored and
    acknowledged: they go to a quarantine, not under the next appends."""
    sent = _write(tmp_path)
    names = sorted(os.listdir(tmp_path / "commitlog"))
    last = int(names[-1])
    mine = sorted(o for o in sent if o >= last)
    assert len(mine) > 20
    victim = mine[10]
    path = tmp_path / "commitlog" / names[-1]
    data = bytearray(path.read_bytes())
    data[victim - last : mine[11] - last] = bytes(mine[11] - victim)  # the record reads as zeros
    path.write_bytes(bytes(data))
    store = _open(tmp_path)
    try:
        assert store.max_phy_offset == victim
        [m] = list_quarantines(str(tmp_path))
        assert m.cut_offset == victim and m.records == len(mine) - 11
        store.put_message(_msg(5000))  # writes over the cut
    finally:
        store.shutdown()
    intact, _damaged = _salvaged(tmp_path)
    assert intact == {o: sent[o] for o in mine[11:]}


def test_a_garbage_unit_does_not_move_units_below_the_cut_into_the_quarantine(tmp_path: Path) -> None:
    """Recovery cuts the CommitLog at a damaged record and sets aside the units that point past the cut.
    Which units those are must not hinge on a binary search through a ConsumeQueue with a garbage unit in
    it: whole files of units whose records stay would leave the queue (their messages hidden, their queue
    offsets handed out again)."""
    store = _open(tmp_path)
    offsets = []
    for i in range(160):  # 50 units per ConsumeQueue file: 4 files
        r = store.put_message(Message(topic="Q", body=b"q%03d" % i))
        offsets.append(r.phys_offset)
        if i == 149:  # another queue's unit just below the cut: the start-up reput begins past Q's
            assert store.put_message(Message(topic="R", body=b"r")).ok
    store.shutdown()
    unit = tmp_path / "consumequeue" / "Q" / "0" / f"{50 * 20:020d}"
    data = bytearray(unit.read_bytes())
    data[30 * 20 : 30 * 20 + 8] = (2**40).to_bytes(8, "big")  # queue offset 80: a garbage offset
    unit.write_bytes(bytes(data))
    log = tmp_path / "commitlog" / f"{0:020d}"
    data = bytearray(log.read_bytes())
    _grow_total_size(data, offsets[150])  # the record of Q's queue offset 150: recovery cuts there
    log.write_bytes(bytes(data))
    store = _open(tmp_path)
    try:
        assert store.max_phy_offset == offsets[150]
        assert store.get_max_offset("Q", 0) == 150
        served = []
        offset = 0
        while offset < 150:
            res = store.get_messages("g", "Q", 0, offset, 32)
            served.extend(bytes(m.message.body) for m in res.messages)
            offset = res.next_begin_offset
        assert served == [b"q%03d" % i for i in range(150)]
    finally:
        store.shutdown()


def test_a_zeroed_header_of_the_last_record_is_set_aside_at_error_its_unit_says_it_was_stored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Zeros where the last record's TOTALSIZE and MAGICCODE were look like the end of the data to recovery
    (as to RocketMQ), and salvage finds no record that names its offset: but the record's ConsumeQueue unit
    says it was stored (and answered), so setting its bytes aside is a loss reported at ERROR."""
    sent = _write(tmp_path, 300)
    last = max(sent)
    names = sorted(os.listdir(tmp_path / "commitlog"))
    path = tmp_path / "commitlog" / names[-1]
    data = bytearray(path.read_bytes())
    data[last - int(names[-1]) : last - int(names[-1]) + 8] = bytes(8)
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING):
        store = _open(tmp_path)
    try:
        [m] = list_quarantines(str(tmp_path))
        assert (m.cut_offset, m.units) == (last, 1)
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert any("set aside" in e and "1 ConsumeQueue unit)" in e for e in errors), caplog.text
        assert last not in _all_served(store)
    finally:
        store.shutdown()


def test_units_past_a_commit_log_that_lost_its_last_record_entirely_are_set_aside_at_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A crash that kept the ConsumeQueue's page but not the CommitLog's (the record reads back as zeros):
    nothing follows the end of the data, but a unit names a record that was stored and answered."""
    sent = _write(tmp_path, 300)
    last = max(sent)
    names = sorted(os.listdir(tmp_path / "commitlog"))
    path = tmp_path / "commitlog" / names[-1]
    data = bytearray(path.read_bytes())
    data[last - int(names[-1]) :] = bytes(len(data) - (last - int(names[-1])))
    path.write_bytes(bytes(data))
    (tmp_path / "abort").touch()
    _forget_recovery_point(tmp_path)
    with caplog.at_level(logging.WARNING):
        store = _open(tmp_path)
    try:
        [m] = list_quarantines(str(tmp_path))
        assert (m.cut_offset, m.units, m.records) == (last, 1, 0)
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert any("1 ConsumeQueue unit)" in e and str(last) in e for e in errors), caplog.text
        assert _all_served(store) == {o: b for o, b in sent.items() if o < last}
    finally:
        store.shutdown()
