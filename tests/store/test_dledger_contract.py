"""The RaftLog contract, run against every implementation."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from store import dledger as dl
from store.dledger_log import DLedgerLog

Factory = Callable[[Path], dl.RaftLog]


def _memory(_tmp: Path) -> dl.RaftLog:
    return dl.MemoryRaftLog()


def _files(tmp: Path) -> dl.RaftLog:
    # small files, so the contract also runs across rolled data and index files
    return DLedgerLog(str(tmp / "dledger-n0"), data_file_size=160, index_file_size=64)


IMPLEMENTATIONS: dict[str, Factory] = {"memory": _memory, "files": _files}


@pytest.fixture(params=sorted(IMPLEMENTATIONS))
def raft_log(request: pytest.FixtureRequest, tmp_path: Path) -> dl.RaftLog:
    return IMPLEMENTATIONS[request.param](tmp_path)


def test_empty(raft_log: dl.RaftLog) -> None:
    assert (raft_log.begin_index, raft_log.last_index, raft_log.last_term, raft_log.committed_index) == (
        -1,
        -1,
        -1,
        -1,
    )
    with pytest.raises(dl.DLedgerError) as err:
        raft_log.get(0)
    assert err.value.code == dl.DLedgerCode.INDEX_OUT_OF_RANGE


def test_append_leader_assigns_index_term_pos(raft_log: dl.RaftLog) -> None:
    a = raft_log.append_leader(b"one", 1)
    b = raft_log.append_leader(b"two", 2)
    assert (a.index, a.term, a.pos) == (0, 1, 0)
    assert (b.index, b.term, b.pos) == (1, 2, a.size)
    assert raft_log.get(1) == b
    assert (raft_log.begin_index, raft_log.last_index, raft_log.last_term, raft_log.term_at(0)) == (
        0,
        1,
        2,
        1,
    )


def test_append_follower_checks_continuity_and_term(raft_log: dl.RaftLog) -> None:
    leader = dl.MemoryRaftLog()
    e0, e1, e2 = (leader.append_leader(b, 3) for b in (b"a", b"b", b"c"))
    raft_log.append_follower(e0)
    with pytest.raises(dl.DLedgerError) as gap:
        raft_log.append_follower(e2)
    assert gap.value.code == dl.DLedgerCode.INCONSISTENT_INDEX
    raft_log.append_follower(e1)
    with pytest.raises(dl.DLedgerError) as old:
        raft_log.append_follower(dl.Entry(2, 2, b"x", e2.pos))
    assert old.value.code == dl.DLedgerCode.INCONSISTENT_TERM
    assert raft_log.append_follower(e2) == e2
    assert [raft_log.get(i).body for i in range(3)] == [b"a", b"b", b"c"]


def test_commit_is_clamped_and_monotonic(raft_log: dl.RaftLog) -> None:
    for body in (b"a", b"b"):
        raft_log.append_leader(body, 1)
    raft_log.set_committed(9)
    assert raft_log.committed_index == 1
    raft_log.set_committed(0)
    assert raft_log.committed_index == 1


def test_truncate_after_sets_the_tail_aside(raft_log: dl.RaftLog, caplog: pytest.LogCaptureFixture) -> None:
    for body in (b"a", b"b", b"c", b"d"):
        raft_log.append_leader(body, 1)
    raft_log.set_committed(1)
    with pytest.raises(dl.DLedgerError):
        raft_log.truncate_after(0)  # entry 1 is committed: never cut
    with caplog.at_level("ERROR"):
        assert raft_log.truncate_after(1) == 2
    assert "quarantine" in caplog.text
    assert (raft_log.last_index, raft_log.last_term) == (1, 1)
    with pytest.raises(dl.DLedgerError):
        raft_log.get(2)
    again = raft_log.append_leader(b"C", 2)
    assert (again.index, again.term, raft_log.get(2).body) == (2, 2, b"C")
    assert raft_log.truncate_after(raft_log.last_index) == 0
