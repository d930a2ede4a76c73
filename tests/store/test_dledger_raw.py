"""A binary push's two ends on real files: a leader's entries as one slice of its data file
(`DLedgerLog.raw_entries`), a follower's one-pass check and copy of them (`DLedgerLog.append_raw`).
The follower's files must come out byte for byte as a leader's, and every check a pushed entry passes
as a bean (index and term continuity, the leader's pos, the body against its ``bodyCrc``) holds here."""

from __future__ import annotations

from pathlib import Path

import pytest

from store import dledger as dl
from store.dledger_log import DLedgerLog
from store.mapped_file import MappedFile, MappedFileQueue
from tests.store.test_dledger_log import DATA, INDEX, _fill, _tree_bytes


def _open(root: Path) -> DLedgerLog:
    return DLedgerLog(str(root / "dledger-n0"), data_file_size=DATA, index_file_size=INDEX)


def _all_raw(leader: DLedgerLog, first: int, max_count: int = 256, max_bytes: int = 1 << 20) -> list[bytes]:
    """Every run `raw_entries` gives from `first` to the leader's end."""
    runs = []
    while first <= leader.last_index:
        got = leader.raw_entries(first, max_count, max_bytes)
        assert got is not None
        count, raw = got
        runs.append(raw)
        first += count
    return runs


def test_raw_runs_land_byte_for_byte_as_the_leaders_files(tmp_path: Path) -> None:
    """Seven entries over three data files (two rolls) and three index files: each run stops at its data
    file's end, and the follower rolls where the leader did."""
    leader = _open(tmp_path / "leader")
    entries = _fill(leader, 7)
    runs = _all_raw(leader, 0)
    assert [len(r) for r in runs] == [3 * 72, 3 * 72, 72]  # three entries a file
    follower = _open(tmp_path / "follower")
    for raw in runs:
        follower.append_raw(raw)
    assert (follower.last_index, follower.last_term) == (6, 1)
    assert [follower.get(i) for i in range(7)] == entries
    leader.close()
    follower.close()
    assert _tree_bytes(tmp_path / "follower") == _tree_bytes(tmp_path / "leader")


def test_raw_entries_keep_to_the_count_and_byte_limits(tmp_path: Path) -> None:
    leader = _open(tmp_path)
    _fill(leader, 3)
    assert leader.raw_entries(0, 2, 1 << 20) == (2, bytes(leader.data.files[0].view[0:144]))
    assert leader.raw_entries(0, 3, 100)[0] == 2  # type: ignore[index]  # (the first, then 100 bytes more)
    assert leader.raw_entries(0, 3, 0)[0] == 1  # type: ignore[index]  # at least one
    assert leader.raw_entries(3, 3, 1 << 20) is None  # not held


def test_repeats_are_skipped_and_a_different_held_entry_refused(tmp_path: Path) -> None:
    leader = _open(tmp_path / "leader")
    _fill(leader, 3)
    raw = leader.raw_entries(0, 3, 1 << 20)
    assert raw is not None
    follower = _open(tmp_path / "follower")
    follower.append_raw(raw[1][: 2 * 72])
    follower.append_raw(raw[1])  # entries 0 and 1 again (our answer was lost), then 2
    assert follower.last_index == 2
    other = _open(tmp_path / "other")
    _fill(other, 1, term=2)
    with pytest.raises(dl.DLedgerError) as err:
        follower.append_raw(other.raw_entries(0, 1, 1 << 20)[1])  # type: ignore[index]
    assert err.value.code == dl.DLedgerCode.INCONSISTENT_INDEX and "differs" in err.value.reason


def _flip(raw: bytes, at: int) -> bytes:
    return raw[:at] + bytes([raw[at] ^ 1]) + raw[at + 1 :]


@pytest.mark.parametrize("damaged", [0, 1])
def test_a_body_failing_its_crc_is_refused_with_what_follows(tmp_path: Path, damaged: int) -> None:
    """411 (UNEXPECTED_ARGUMENT), the entries before it appended, nothing of it written past the end."""
    leader = _open(tmp_path / "leader")
    entries = _fill(leader, 3)
    raw = leader.raw_entries(0, 3, 1 << 20)
    assert raw is not None
    follower = _open(tmp_path / "follower")
    with pytest.raises(dl.DLedgerError) as err:
        follower.append_raw(_flip(raw[1], damaged * 72 + dl.BODY_OFFSET + 5))
    assert err.value.code == dl.DLedgerCode.UNEXPECTED_ARGUMENT
    assert f"entry {damaged}: body crc" in err.value.reason
    assert (follower.last_index, follower.end_pos) == (damaged - 1, damaged * 72)
    if follower.data.files:  # (none for a refused first entry: no roll, no file)
        assert bytes(follower.data.files[0].view[damaged * 72 : DATA]) == bytes(DATA - damaged * 72)
    follower.append_raw(raw[1])
    assert [follower.get(i) for i in range(3)] == entries


def test_headers_index_term_and_pos_are_checked(tmp_path: Path) -> None:
    leader = _open(tmp_path / "leader")
    _fill(leader, 4)
    raw = leader.raw_entries(0, 3, 1 << 20)
    assert raw is not None
    cases = {
        "magic": (_flip(raw[1], 3), dl.DLedgerCode.UNEXPECTED_ARGUMENT, -1),  # the magic's low byte
        "cut": (raw[1][:-1], dl.DLedgerCode.UNEXPECTED_ARGUMENT, 1),  # the last entry cut short
        "gap": (raw[1][72:], dl.DLedgerCode.INCONSISTENT_INDEX, -1),  # entry 1 first
        "pos": (_flip(raw[1], dl.POS_OFFSET + 7), dl.DLedgerCode.DISK_ERROR, -1),  # entry 0 says pos 1
    }
    for what, (bad, code, kept) in cases.items():
        follower = _open(tmp_path / what)
        with pytest.raises(dl.DLedgerError) as err:
            follower.append_raw(bad)
        assert (err.value.code, follower.last_index) == (code, kept), what
        follower.append_raw(raw[1])
        assert follower.last_index == 2


def test_the_memory_log_takes_the_same_runs(tmp_path: Path) -> None:
    """The in-memory log (the machines' simulations) gives and takes the same bytes."""
    leader = _open(tmp_path)
    entries = _fill(leader, 3)
    raw = leader.raw_entries(0, 3, 1 << 20)
    assert raw is not None
    mem = dl.MemoryRaftLog()
    mem.append_raw(raw[1])
    assert [mem.get(i) for i in range(3)] == entries
    assert mem.raw_entries(0, 3, 1 << 20) == raw
    with pytest.raises(dl.DLedgerError):
        mem.append_raw(_flip(raw[1], 2 * 72 + dl.BODY_OFFSET))


@pytest.mark.parametrize("wire", ["binary", "json"])
def test_an_entry_refused_for_its_pos_rolls_no_data_file(tmp_path: Path, wire: str) -> None:
    """An entry too large for what is left of the follower's data file, whose pos is not where the roll
    would put it, is refused before the roll: no blank written, no file made. Rolled first, the follower's
    data would end where the leader's does not, and every later push of the leader's (its next entry still
    in the same file) would be refused for its pos."""
    leader = _open(tmp_path / "leader")
    entries = _fill(leader, 4)
    raw = leader.raw_entries(0, 3, 1 << 20)
    assert raw is not None
    follower = _open(tmp_path / "follower")
    follower.append_raw(raw[1][: 2 * 72])
    body = b"x" * 100  # (144 + 48 + 100 > DATA: a roll)
    forged = dl.Entry(2, 1, body, 144, body_crc=dl.entry_body_crc(body))
    with pytest.raises(dl.DLedgerError) as err:
        if wire == "binary":
            follower.append_raw(dl.encode_entry(forged))
        else:
            follower.append_followers([forged])
    assert err.value.code == dl.DLedgerCode.DISK_ERROR
    assert (len(follower.data.files), follower.end_pos, follower.last_index) == (1, 144, 1)
    follower.append_raw(raw[1])
    follower.append_raw(leader.raw_entries(3, 1, 0)[1])  # type: ignore[index]
    assert [follower.get(i) for i in range(4)] == entries


def _index_refused_once(log_: DLedgerLog, monkeypatch: pytest.MonkeyPatch) -> None:
    """The next index file of `log_` cannot be made (a full disk), once."""
    make = MappedFileQueue.last_file_for_append

    def full(self: MappedFileQueue, start_offset: int = 0) -> MappedFile:
        if self is log_.index:
            monkeypatch.setattr(MappedFileQueue, "last_file_for_append", make)
            raise OSError(28, "No space left on device")
        return make(self, start_offset)

    monkeypatch.setattr(MappedFileQueue, "last_file_for_append", full)


@pytest.mark.pure_python
@pytest.mark.parametrize("path", ["leader", "binary", "json"])
def test_an_entry_whose_index_record_cannot_be_written_is_not_left_in_the_data_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """Entry 3's data written, its index record refused (the index file for it cannot be made): the append
    fails and leaves nothing counted in the data file, so that the entry appended again lands where the
    leader's does (else every later push is refused for its pos) and the files reopen to the same log."""
    leader = _open(tmp_path / "leader")
    entries = _fill(leader, 3)
    body = b"body-003" * 3
    log_ = leader if path == "leader" else _open(tmp_path / "follower")
    if path != "leader":
        log_.append_raw(leader.raw_entries(0, 3, 1 << 20)[1])  # type: ignore[index]
        entries.append(leader.append_leader(body, 1))
    raw = leader.raw_entries(3, 1, 0)

    def append() -> None:
        if path == "leader":
            log_.append_leader_placed(body, 1, log_.leader_pos(dl.BODY_OFFSET + len(body)))
        elif path == "binary":
            log_.append_raw(raw[1])  # type: ignore[index]
        else:
            log_.append_followers([entries[3]])

    _index_refused_once(log_, monkeypatch)
    with pytest.raises(OSError):
        append()
    assert (log_.last_index, log_.end_pos) == (2, DATA)  # (the blank of the roll kept: the leader's too)
    append()
    if path == "leader":
        entries.append(log_.get(3))
    assert [log_.get(i) for i in range(4)] == entries and entries[3].pos == DATA
    log_.close()
    again = _open(tmp_path / ("leader" if path == "leader" else "follower"))
    assert [again.get(i) for i in range(4)] == entries
    again.close()


def test_a_push_whose_index_file_cannot_be_made_leaves_nothing_counted(tmp_path: Path) -> None:
    """A push that needs no roll of the data file (the compiled build takes it in one call) but a new index
    file, which cannot be made (a directory stands where it goes: no monkeypatching, so the compiled path
    runs): refused with the OSError, nothing of it counted; once the file can be made, the same push lands
    as the leader's files hold it, and the files reopen to the same log."""

    def member(root: Path) -> DLedgerLog:
        return DLedgerLog(str(root / "dledger-n0"), data_file_size=1 << 16, index_file_size=INDEX)

    leader, follower = member(tmp_path / "leader"), member(tmp_path / "follower")
    entries = _fill(leader, 5)
    follower.append_raw(leader.raw_entries(0, 2, 1 << 20)[1])  # type: ignore[index]
    blocked = tmp_path / "follower" / "dledger-n0" / dl.INDEX_DIR / f"{INDEX:020d}"
    blocked.mkdir()  # (entries 3 and 4 go in the second index file)
    run = leader.raw_entries(2, 3, 1 << 20)
    assert run is not None and run[0] == 3
    with pytest.raises(OSError):
        follower.append_raw(run[1])
    assert (follower.last_index, follower.end_pos) == (1, 2 * 72)
    blocked.rmdir()
    assert follower.append_raw(run[1]) == (2, 4)
    assert [follower.get(i) for i in range(5)] == entries
    leader.close()
    follower.close()
    assert _tree_bytes(tmp_path / "follower") == _tree_bytes(tmp_path / "leader")
    again = member(tmp_path / "follower")
    assert [again.get(i) for i in range(5)] == entries
    again.close()
