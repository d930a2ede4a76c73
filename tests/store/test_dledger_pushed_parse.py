"""A follower's dispatch of what binary pushes brought: the records parsed from the pushes' own bytes when
dispatch comes (into the CommitLog's ``parsed``, as a leader keeps what its puts parsed), so that dispatch
does not walk the data file back; the ConsumeQueues and IndexFile come out as the walk makes them. A record the
parse does not vouch for (not naming its own offset) is left to the walk."""

from __future__ import annotations

from pathlib import Path

from store import dledger as dl
from store.dledger_commitlog import PHY_POS_POSITION, DLedgerCommitLog
from store.engine import DefaultMessageStore
from tests.support.stores import dledger_config, dledger_store


def _follower(root: Path) -> tuple[DefaultMessageStore, DLedgerCommitLog]:
    store = DefaultMessageStore(dledger_config(root))
    cl = store.commit_log
    assert isinstance(cl, DLedgerCommitLog)
    cl.auto_commit = False  # (as its Raft driver: committed by the leader's word)
    store.open()
    store.start()
    return store, cl


def _runs(root: Path, per: int) -> list[bytes]:
    """The leader's entries as its binary pushes carry them, ``per`` a push."""
    leader = DefaultMessageStore(dledger_config(root))
    leader.open()
    dlog = leader.commit_log.dlog  # type: ignore[attr-defined]
    runs, first = [], 0
    while first <= dlog.last_index:
        got = dlog.raw_entries(first, per, 1 << 20)
        assert got is not None
        runs.append(got[1])
        first += got[0]
    leader.shutdown()
    return runs


def _queues(root: Path) -> dict[str, bytes]:
    cq = root / "consumequeue"
    return {
        str(p.relative_to(cq)): p.read_bytes().rstrip(b"\0") for p in sorted(cq.rglob("*")) if p.is_file()
    }


def test_pushed_records_are_dispatched_as_parsed_at_the_append_and_land_as_walked(tmp_path: Path) -> None:
    msgs = dledger_store(tmp_path / "leader", count=120, queues=3)
    runs = _runs(tmp_path / "leader", 16)
    parsed, walked = _follower(tmp_path / "parsed"), _follower(tmp_path / "walked")
    walked[1].dlog.on_raw_appended = None  # (the walk alone, as before)
    walked[1].walks_in_c = False
    try:
        for store, cl in (parsed, walked):
            for raw in runs:
                cl.dlog.append_raw(raw)
            if store is parsed[0]:
                # each push's run kept as it came (the answer waits for no parse), parsed when dispatch comes
                assert len(cl.pushed) == len(runs) and cl.parsed == {}
                cl._parse_pushed()
                assert cl.pushed == [] and sorted(cl.parsed) == [
                    cl.dlog.get(i).pos + dl.BODY_OFFSET for i in range(cl.dlog.last_index + 1)
                ]
            cl.dlog.set_committed(cl.dlog.last_index)
            assert store.dispatch_committed() == len(msgs)
        assert parsed[1].parsed == {}  # (taken by the dispatch)
        assert _queues(tmp_path / "parsed") == _queues(tmp_path / "walked") != {}
        for i in (0, 57, 119):
            found = [
                {m.phys_offset for m in s.query_message("D", f"dk-{i}", 4, 0, 2**62).messages}
                for s in (parsed[0], walked[0])
            ]
            assert found[0] == found[1] and len(found[0]) == 1
    finally:
        parsed[0].shutdown()
        walked[0].shutdown()


def test_a_pushed_record_that_does_not_name_its_own_offset_is_left_to_the_walk(tmp_path: Path) -> None:
    dledger_store(tmp_path / "leader", count=6, queues=1)
    (raw,) = _runs(tmp_path / "leader", 16)
    run = bytearray(raw)
    size = dl.entry_size_at(run, 0)
    third = 2 * size  # (six entries of one size)
    at = third + dl.BODY_OFFSET + PHY_POS_POSITION
    run[at : at + 8] = (12345).to_bytes(8, "big")
    run[third + dl.BODY_CRC_OFFSET : third + dl.BODY_CRC_OFFSET + 4] = bytes(4)  # (its bodyCrc: not computed)
    store, cl = _follower(tmp_path / "follower")
    try:
        cl.dlog.append_raw(bytes(run))
        assert cl.dlog.last_index == 5
        cl._parse_pushed()
        assert sorted(cl.parsed) == [dl.BODY_OFFSET, size + dl.BODY_OFFSET]  # (the two before it)
    finally:
        store.shutdown()
