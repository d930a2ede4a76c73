"""The file-backed DLedger log on real files: layout, rolling, truncation, crash recovery."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from store import dledger as dl
from store.dledger_log import RECENT_ENTRIES, DLedgerLog
from store.quarantine import list_quarantines

DATA, INDEX = 256, 96  # three index records a file


def _open(root: Path, **kw: object) -> DLedgerLog:
    return DLedgerLog(str(root / "dledger-n0"), data_file_size=DATA, index_file_size=INDEX, **kw)  # type: ignore[arg-type]


def _fill(log_: DLedgerLog, n: int, term: int = 1) -> list[dl.Entry]:
    return [log_.append_leader(f"body-{i:03d}".encode() * 3, term) for i in range(n)]


def _data_files(root: Path) -> list[str]:
    return sorted(os.listdir(root / "dledger-n0" / "data"))


def test_layout_matches_dledger(tmp_path: Path) -> None:
    log_ = _open(tmp_path)
    entries = _fill(log_, 5)  # 48 + 24 = 72 bytes each: three a file, then a blank of 256 - 216 = 40
    assert [e.pos for e in entries] == [0, 72, 144, 256, 328]
    log_.set_committed(3)
    log_.close()
    d = tmp_path / "dledger-n0"
    assert _data_files(tmp_path) == ["00000000000000000000", "00000000000000000256"]
    assert sorted(os.listdir(d / "index")) == ["00000000000000000000", "00000000000000000096"]
    first = (d / "data" / "00000000000000000000").read_bytes()
    assert first[:72] == dl.encode_entry(entries[0])
    assert first[216:224] == bytes.fromhex("ffffffff00000028")  # MmapFileList's blank: -1, 40
    index = (d / "index" / "00000000000000000000").read_bytes()
    assert index[32:64] == dl.encode_index(entries[1])
    assert (d / "checkpoint").read_text() == "endIndex=4\ncommittedIndex=3\n"


def test_reopen_restores_state(tmp_path: Path) -> None:
    log_ = _open(tmp_path)
    entries = _fill(log_, 7, term=2)
    log_.set_committed(5)
    log_.close()
    again = _open(tmp_path)
    assert (again.begin_index, again.last_index, again.last_term, again.committed_index) == (0, 6, 2, 5)
    assert [again.get(i) for i in range(7)] == entries
    assert again.committed_pos == entries[5].pos + entries[5].size
    assert again.append_leader(b"next", 3).pos == entries[6].pos + entries[6].size


def test_append_hook_rewrites_body_before_write(tmp_path: Path) -> None:
    def stamp(pos: int, buf: bytearray) -> None:
        buf[dl.BODY_OFFSET : dl.BODY_OFFSET + 8] = (pos + dl.BODY_OFFSET).to_bytes(8, "big")

    log_ = _open(tmp_path, append_hook=stamp)
    _fill(log_, 4)
    e = log_.get(3)
    assert int.from_bytes(e.body[:8], "big") == e.pos + dl.BODY_OFFSET == 256 + 48


def test_follower_entry_must_land_at_the_leaders_pos(tmp_path: Path) -> None:
    log_ = _open(tmp_path)
    with pytest.raises(dl.DLedgerError) as err:
        log_.append_follower(dl.Entry(0, 1, b"x", pos=8))
    assert err.value.code == dl.DLedgerCode.DISK_ERROR
    assert log_.last_index == -1


def _tree_bytes(root: Path) -> dict[str, bytes]:
    d = root / "dledger-n0"
    return {
        f"{sub}/{name}": (d / sub / name).read_bytes()
        for sub in ("data", "index")
        for name in os.listdir(d / sub)
    }


def test_a_batch_lands_byte_for_byte_as_its_entries_one_by_one(tmp_path: Path) -> None:
    """Seven entries cross two data-file rolls and two index files: one batch writes what seven appends do."""
    entries = _fill(_open(tmp_path / "leader"), 7)
    one, batch = _open(tmp_path / "one"), _open(tmp_path / "batch")
    for e in entries[:2]:
        one.append_follower(e)
        batch.append_follower(e)
    for e in entries[2:]:
        one.append_follower(e)
    batch.append_followers(entries[2:])
    assert (batch.last_index, batch.last_term) == (6, 1)
    assert [batch.get(i) for i in range(7)] == entries
    one.close()
    batch.close()
    assert _tree_bytes(tmp_path / "batch") == _tree_bytes(tmp_path / "one")


def test_a_batch_keeps_what_comes_before_a_refused_entry(tmp_path: Path) -> None:
    entries = _fill(_open(tmp_path / "leader"), 4)
    log_ = _open(tmp_path)
    with pytest.raises(dl.DLedgerError) as err:
        log_.append_followers([entries[0], entries[1], entries[3]])
    assert err.value.code == dl.DLedgerCode.INCONSISTENT_INDEX
    assert log_.last_index == 1 and log_.get(1) == entries[1]
    with pytest.raises(dl.DLedgerError) as err:
        log_.append_followers([entries[2], dl.Entry(3, 1, entries[3].body, pos=entries[3].pos + 8)])
    assert err.value.code == dl.DLedgerCode.DISK_ERROR
    assert log_.last_index == 2 and log_.get(2) == entries[2]
    log_.append_followers([entries[3]])
    assert [log_.get(i) for i in range(4)] == entries


def test_truncate_sets_the_tail_aside_on_disk(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    log_ = _open(tmp_path)
    entries = _fill(log_, 7)
    log_.set_committed(1)
    with caplog.at_level("ERROR"):
        assert log_.truncate_after(2) == 4
    assert "quarantine" in caplog.text
    [manifest] = list_quarantines(str(tmp_path))
    cut = entries[3].pos
    assert manifest.cut_offset == cut and manifest.recovery == "replication"
    kept = b"".join((Path(manifest.path) / p.file).read_bytes() for p in manifest.files)
    assert dl.encode_entry(entries[3]) in kept and dl.encode_entry(entries[6]) in kept
    assert _data_files(tmp_path) == ["00000000000000000000", "00000000000000000256"]
    new = log_.append_leader(b"new leader", 2)
    assert (new.index, new.pos) == (3, cut)
    log_.close()
    again = _open(tmp_path)
    assert (again.last_index, again.last_term, again.get(3).body) == (3, 2, b"new leader")


def test_truncate_everything_uncommitted(tmp_path: Path) -> None:
    log_ = _open(tmp_path)
    _fill(log_, 3)
    assert log_.truncate_after(-1) == 3
    assert (log_.begin_index, log_.last_index, log_.last_term) == (-1, -1, -1)
    assert log_.append_leader(b"again", 4).pos == 0


def _no_zero_tail(pos: int, body: memoryview) -> str | None:
    """A stand-in for the CommitLog's record check: a torn write leaves the end of the body zero."""
    return "body ends in zeros" if body[-1:] == b"\0" else None


@pytest.mark.parametrize("written", [20, 60], ids=["torn-header", "torn-body"])
def test_crash_with_a_partial_entry(tmp_path: Path, written: int) -> None:
    log_ = _open(tmp_path, body_check=_no_zero_tail)
    entries = _fill(log_, 5)
    log_.close()
    # the process died while writing entry 5: only its first bytes reached the disk
    end = entries[4].pos + entries[4].size
    part = dl.encode_entry(dl.Entry(5, 1, b"x" * 30, end))[:written]
    f = tmp_path / "dledger-n0" / "data" / "00000000000000000256"
    data = bytearray(f.read_bytes())
    data[end - 256 : end - 256 + written] = part
    f.write_bytes(bytes(data))
    again = _open(tmp_path, body_check=_no_zero_tail)
    assert again.last_index == 4
    assert [again.get(i) for i in range(5)] == entries
    [manifest] = list_quarantines(str(tmp_path))  # the partial bytes are set aside, not dropped
    assert manifest.cut_offset == end
    assert (f.read_bytes()[end - 256 : end - 256 + written]) == bytes(written)
    assert again.append_leader(b"after", 1).index == 5


def test_damaged_entry_cuts_there_and_keeps_what_follows(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log_ = _open(tmp_path)
    entries = _fill(log_, 6)
    log_.set_committed(5)
    log_.close()
    f = tmp_path / "dledger-n0" / "data" / "00000000000000000000"
    data = bytearray(f.read_bytes())
    data[entries[1].pos + dl.POS_OFFSET] ^= 0xFF  # entry 1 no longer names its own position
    f.write_bytes(bytes(data))
    with caplog.at_level("ERROR"):
        again = _open(tmp_path)
    assert (again.last_index, again.committed_index, again.lost_committed) == (0, 0, 5)
    assert "committed" in caplog.text and "quarantine" in caplog.text
    [manifest] = list_quarantines(str(tmp_path))
    kept = b"".join((Path(manifest.path) / p.file).read_bytes() for p in manifest.files)
    for e in entries[2:]:
        assert dl.encode_entry(e) in kept  # the committed entries after the damage are kept, not deleted


def test_body_check_rejects_a_damaged_body(tmp_path: Path) -> None:
    log_ = _open(tmp_path)
    entries = _fill(log_, 3)
    log_.close()
    f = tmp_path / "dledger-n0" / "data" / "00000000000000000000"
    data = bytearray(f.read_bytes())
    data[entries[2].pos + dl.BODY_OFFSET] ^= 1
    f.write_bytes(bytes(data))

    def check(pos: int, body: memoryview) -> str | None:
        return None if bytes(body[:5]) == b"body-" else "body damaged"

    assert _open(tmp_path, body_check=check).last_index == 1


def test_lost_index_is_rebuilt_from_data(tmp_path: Path) -> None:
    log_ = _open(tmp_path)
    entries = _fill(log_, 5)
    log_.close()
    for name in os.listdir(tmp_path / "dledger-n0" / "index"):
        os.remove(tmp_path / "dledger-n0" / "index" / name)
    again = _open(tmp_path)
    assert [again.get(i) for i in range(5)] == entries


def test_checkpoint_bak_survives_a_crash_mid_write(tmp_path: Path) -> None:
    log_ = _open(tmp_path)
    _fill(log_, 3)
    log_.set_committed(1)
    log_.persist_checkpoint()
    log_.set_committed(2)
    log_.close()
    os.remove(tmp_path / "dledger-n0" / dl.CHECKPOINT_FILE)  # IOUtils#string2File: deleted, not renamed yet
    assert _open(tmp_path).committed_index == 1


def test_read_only_open_changes_nothing(tmp_path: Path) -> None:
    log_ = _open(tmp_path)
    entries = _fill(log_, 4)
    log_.close()
    f = tmp_path / "dledger-n0" / "data" / "00000000000000000256"
    with open(f, "r+b") as fh:
        fh.seek(entries[3].pos + entries[3].size - 256)
        fh.write(b"\x00\x00\x00\x01garbage")
    before = f.read_bytes()
    ro = _open(tmp_path, read_only=True)
    assert ro.last_index == 3 and ro.get(3) == entries[3]
    ro.close()
    assert f.read_bytes() == before and list_quarantines(str(tmp_path)) == []


def _patch(root: Path, pos: int, new: bytes | None = None) -> None:
    """Write ``new`` at absolute data offset ``pos`` of the log's data files (DATA bytes each), or flip
    the byte there."""
    f = root / "dledger-n0" / "data" / f"{pos - pos % DATA:020d}"
    data = bytearray(f.read_bytes())
    rel = pos % DATA
    data[rel : rel + 1 if new is None else rel + len(new)] = new or bytes([data[rel] ^ 0xFF])
    f.write_bytes(bytes(data))


def test_leader_fills_body_crc_and_the_entry_keeps_it(tmp_path: Path) -> None:
    log_ = _open(tmp_path, append_hook=lambda pos, buf: buf.__setitem__(slice(-4, None), b"tail"))
    entries = _fill(log_, 4)
    log_.close()
    again = _open(tmp_path)
    for e in entries:  # over the body as written, after the hook rewrote it
        assert e.body.endswith(b"tail") and e.body_crc == dl.entry_body_crc(e.body) != 0
        assert again.get(e.index) == e
        assert dl.stored_body_crc(dl.encode_entry(e)) == e.body_crc


def test_an_entry_failing_its_body_crc_is_set_aside_with_what_follows(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log_ = _open(tmp_path)
    entries = _fill(log_, 6)
    log_.close()
    _patch(tmp_path, entries[3].pos + entries[3].size - 2)  # a byte no other check reads
    with caplog.at_level("ERROR"):
        again = _open(tmp_path)
    assert (again.last_index, again.last_term) == (2, 1)
    assert "entry 3: body crc" in caplog.text and "quarantine" in caplog.text
    [manifest] = list_quarantines(str(tmp_path))
    assert manifest.cut_offset == entries[3].pos
    kept = b"".join((Path(manifest.path) / p.file).read_bytes() for p in manifest.files)
    assert all(dl.encode_entry(e) in kept for e in entries[4:])  # set aside, not deleted
    assert again.append_follower(entries[3]) == entries[3]  # the leader fills it in again


def test_body_crc_zero_is_not_checked(tmp_path: Path) -> None:
    log_ = _open(tmp_path)
    entries = _fill(log_, 4)
    log_.close()
    for e in entries:  # as 4.9.8 writes them (and stores written before we filled bodyCrc)
        _patch(tmp_path, e.pos + dl.BODY_CRC_OFFSET, bytes(4))
    _patch(tmp_path, entries[2].pos + entries[2].size - 1)
    again = _open(tmp_path)
    assert again.last_index == 3 and list_quarantines(str(tmp_path)) == []
    assert again.get(2).body_crc == 0 and again.get(2).body != entries[2].body


def test_a_follower_refuses_a_body_failing_its_crc(tmp_path: Path) -> None:
    log_ = _open(tmp_path)
    good = dl.Entry(0, 1, b"pushed body", 0, body_crc=dl.entry_body_crc(b"pushed body"))
    with pytest.raises(dl.DLedgerError) as err:
        log_.append_follower(dl.Entry(0, 1, b"pushed bodY", 0, body_crc=good.body_crc))
    assert err.value.code == dl.DLedgerCode.UNEXPECTED_ARGUMENT and "entry 0: body crc" in err.value.reason
    assert log_.last_index == -1 and log_.end_pos == 0  # nothing appended
    assert log_.append_follower(good) == good
    assert log_.append_follower(dl.Entry(1, 1, b"from a 4.9.8 leader", good.size)).body_crc == 0
    log_.close()
    assert _open(tmp_path).get(0).body_crc == good.body_crc


def test_a_push_with_a_damaged_body_inside_keeps_only_what_comes_before_it(tmp_path: Path) -> None:
    """A batch is checked whole before its bytes are written: the entry whose body fails its ``bodyCrc``
    (411) and what follows it are never written, not even to the mapped file past its end."""
    entries = _fill(_open(tmp_path / "leader"), 3)
    damaged = dl.Entry(1, 1, entries[1].body[:-1] + b"X", entries[1].pos, body_crc=entries[1].body_crc)
    log_ = _open(tmp_path)
    with pytest.raises(dl.DLedgerError) as err:
        log_.append_followers([entries[0], damaged, entries[2]])
    assert err.value.code == dl.DLedgerCode.UNEXPECTED_ARGUMENT and "entry 1: body crc" in err.value.reason
    assert (log_.last_index, log_.end_pos) == (0, entries[1].pos)
    assert bytes(log_.data.files[0].view[entries[1].pos : DATA]) == bytes(DATA - entries[1].pos)
    log_.append_followers(entries[1:])
    assert [log_.get(i) for i in range(3)] == entries


def test_a_leader_keeps_its_newest_entries_in_memory_across_a_follower_stint(tmp_path: Path) -> None:
    """The entries a leader appended lately are served from memory, the newest RECENT_ENTRIES of them: the
    oldest goes as each new one comes, also when entries it appended as a follower lie between."""
    log_ = DLedgerLog(str(tmp_path / "dledger-n0"))
    for i in range(RECENT_ENTRIES + 5):
        log_.append_leader(b"a%d" % i, 1)
    assert sorted(log_._recent) == list(range(5, RECENT_ENTRIES + 5))
    follower = dl.Entry(log_.last_index + 1, 2, b"pushed", log_.end_pos)
    log_.append_follower(follower)
    for i in range(RECENT_ENTRIES):
        log_.append_leader(b"b%d" % i, 3)
    first = follower.index + 1
    assert sorted(log_._recent) == list(range(first, first + RECENT_ENTRIES))
    assert log_.get(first).body == b"b0" and log_.get(follower.index).body == b"pushed"
    log_.close()


def test_a_leader_that_keeps_nothing_serves_its_entries_and_commits_from_its_files(tmp_path: Path) -> None:
    """``keep_recent`` off (every follower takes binary pushes): the placed appends are not kept in memory;
    each is read back from the data file as it was written, and the committed end is the same."""
    kept, bare = _open(tmp_path / "kept"), _open(tmp_path / "bare")
    bare.keep_recent = False
    for log_ in (kept, bare):
        for i in range(5):
            body = f"body-{i:03d}".encode() * 3
            log_.append_leader_placed(body, 1, log_.leader_pos(dl.BODY_OFFSET + len(body)))
        log_.set_committed(3)
    assert sorted(kept._recent) == list(range(5)) and not bare._recent
    assert [bare.get(i) for i in range(5)] == [kept.get(i) for i in range(5)]
    assert (bare.committed_index, bare.committed_pos) == (kept.committed_index, kept.committed_pos)
    assert bare.raw_entries(0, 5, 1 << 20) == kept.raw_entries(0, 5, 1 << 20)


def test_checkpoint_writers_take_turns(tmp_path: Path) -> None:
    """The flush thread's checkpoint and close's (or another flush's) write the same ``.tmp`` file: two at
    once lost a rename (FileNotFoundError, 'consume queue flush failed'). Each write is one at a time."""
    import threading

    log_ = _open(tmp_path)
    _fill(log_, 40)
    failures: list[BaseException] = []
    start = threading.Barrier(2)

    def writer(parity: int) -> None:
        start.wait()
        for i in range(parity, 40, 2):
            try:
                log_.set_committed(i)
                log_.persist_checkpoint()
            except BaseException as exc:  # the race's FileNotFoundError, from either thread
                failures.append(exc)

    threads = [threading.Thread(target=writer, args=(p,)) for p in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    log_.close()
    assert (tmp_path / "dledger-n0" / "checkpoint").read_text() == "endIndex=39\ncommittedIndex=39\n"
