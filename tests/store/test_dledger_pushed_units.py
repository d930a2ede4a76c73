"""A follower's dispatch of its pushed runs straight to ConsumeQueue units (``_cparse.dispatch_entries``, by
``DLedgerCommitLog.pushed_units``): no record object a record, yet the ConsumeQueues and IndexFiles come out
as the Python walk makes them, for every kind of record (tags in and beyond ASCII, keys, transactions, the
delay topic, IPv6 hosts), for commits that end inside a push, and for runs damaged anywhere."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from store import dledger as dl, record
from store.consumequeue import unit_tags_code
from store.dledger_commitlog import DLedgerCommitLog
from store.dledger_log import DLedgerLog
from store.engine import DefaultMessageStore
from store.indexfile import index_keys, record_keys
from store.message import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
    Message,
)
from store.names import SCHEDULE_TOPIC
from tests.store.test_dledger_pushed_parse import _queues
from tests.support.fuzz import FUZZ, leaked
from tests.support.stores import dledger_config

c = pytest.importorskip("store._cparse")

TAGS = ["a", "TagA", "t\u00e9", "\U0001f600x", "\u4e2d\u6587", "x" * 40]
TRANSACTIONS = [
    TRANSACTION_NOT_TYPE,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
]


def _member(root: Path, file_size: int, follower: bool) -> tuple[DefaultMessageStore, DLedgerCommitLog]:
    store = DefaultMessageStore(dledger_config(root, mapped_file_size_commit_log=file_size))
    cl = store.commit_log
    assert isinstance(cl, DLedgerCommitLog)
    cl.auto_commit = not follower  # (a follower as its Raft driver makes it: committed by the leader's word)
    store.open()
    store.start()
    return store, cl


def _runs(root: Path, file_size: int, per: int) -> list[bytes]:
    """The leader's entries as its binary pushes carry them, ``per`` a push."""
    leader, cl = _member(root, file_size, False)
    runs, first = [], 0
    while first <= cl.dlog.last_index:
        got = cl.dlog.raw_entries(first, per, 1 << 20)
        assert got is not None
        runs.append(got[1])
        first += got[0]
    leader.shutdown()
    return runs


def _record(msg: Message, pos: int, queue_offset: int, stored: int, props: bytes | None = None) -> bytes:
    """``msg``'s record as a leader writes it into the entry at ``pos`` (``props``: these bytes instead)."""
    return record.encode_record(
        msg,
        queue_offset=queue_offset,
        physical_offset=pos + dl.BODY_OFFSET,
        store_timestamp=stored,
        store_host=("127.0.0.1", 10911),
        properties=props,
    )


def _leader_run(root: Path, msgs: list[Message]) -> tuple[DLedgerLog, bytes]:
    """A leader's log of ``msgs`` (the i-th at queue offset i, stored at i) and its entries as one push."""
    log_ = DLedgerLog(str(root / "dledger-n0"), data_file_size=1 << 20, index_file_size=1 << 16)
    for i, msg in enumerate(msgs):
        pos = log_.leader_pos(dl.BODY_OFFSET + 600)  # (room enough; the record's own size is what counts)
        log_.append_leader_placed(_record(msg, pos, i, i), 1, pos)
    got = log_.raw_entries(0, len(msgs), 1 << 20)
    assert got is not None
    return log_, got[1]


def _messages(count: int, rnd: random.Random, others: bool) -> list[Message]:
    """Records of two topics over three queues, tags in and beyond ASCII, keys; with ``others`` also a few
    of the kinds the C walk leaves to Python."""
    msgs = []
    for i in range(count):
        props = {"TAGS": rnd.choice(TAGS)} if rnd.random() < 0.8 else {}
        if rnd.random() < 0.3:
            props["KEYS"] = f"k{i} kk{i}"
        if rnd.random() < 0.3:
            props["UNIQ_KEY"] = f"U{i:06d}"
        if others and rnd.random() < 0.05:
            props["DELAY"] = "3"  # (put in the delay topic, its unit's tags code a delivery time)
        sys_flag = rnd.choice(TRANSACTIONS) if others and rnd.random() < 0.1 else 0
        born = ("fe80::1", 4000) if others and rnd.random() < 0.03 else ("10.0.0.2", 4000)
        msgs.append(
            Message(
                rnd.choice(["D", "E"]),
                bytes([i % 256]) * rnd.randint(0, 300),
                queue_id=rnd.randrange(3),
                properties=props,
                sys_flag=sys_flag,
                born_host=born,
            )
        )
    return msgs


@pytest.mark.parametrize(("seed", "others"), [(1, True), (2, True), (3, True), (4, False), (5, False)])
def test_pushed_runs_dispatched_by_the_c_walk_land_as_the_python_walk_lands_them(
    tmp_path: Path, seed: int, others: bool
) -> None:
    rnd = random.Random(seed)
    msgs = _messages(300, rnd, others)
    # (data files of 64 KiB: rolls, whose blank ends a C walk; without the others, one file, none)
    file_size = 64 * 1024 if others else 1 << 20
    leader, _ = _member(tmp_path / "leader", file_size, False)
    for m in msgs:
        assert leader.put_message(m).ok
    leader.shutdown()
    runs = _runs(tmp_path / "leader", file_size, rnd.choice([1, 7, 16]))
    fast = _member(tmp_path / "fast", file_size, True)
    walked = _member(tmp_path / "walked", file_size, True)
    walked[1].dlog.on_raw_appended = None  # (the walk alone, as before pushed runs were kept)
    walked[1].walks_in_c = False  # (nor the C walk over the data file)
    lags = [rnd.randint(0, 20) for _ in runs]  # (a commit that ends inside a push, or behind it)
    try:
        for store, cl in (fast, walked):
            dispatched = 0
            for raw, lag in zip(runs, lags, strict=True):
                cl.dlog.append_raw(raw)
                cl.dlog.set_committed(max(cl.dlog.committed_index, cl.dlog.last_index - lag))
                dispatched += store.dispatch_committed()
                if store is fast[0] and not others:
                    # all taken by the C walk: nothing parsed into records, the uncommitted tail kept as
                    # pushed (the parse would have taken the whole run)
                    assert cl.parsed == {}
                    held = range(cl.dlog.committed_index + 1, cl.dlog.last_index + 1)
                    assert sum(e - s for _r, s, e in cl.pushed) == sum(cl.dlog.get(i).size for i in held)
            cl.dlog.set_committed(cl.dlog.last_index)
            dispatched += store.dispatch_committed()
            assert dispatched == len(msgs)
            assert cl.pushed == [] and cl.parsed == {}
        assert _queues(tmp_path / "fast") == _queues(tmp_path / "walked") != {}
        for i, m in enumerate(msgs):
            for key in index_keys(m.topic, m.properties)[:1]:
                key = key.split("#", 1)[1]
                found = [
                    sorted(x.phys_offset for x in s.query_message(m.topic, key, 8, 0, 2**62).messages)
                    for s in (fast[0], walked[0])
                ]
                assert found[0] == found[1], (i, key)
    finally:
        fast[0].shutdown()
        walked[0].shutdown()


def test_the_c_walk_takes_the_common_records_and_stops_at_the_others(tmp_path: Path) -> None:
    """Which records the walk takes itself: none, commit: yes; prepared, rolled back, the delay topic, an
    IPv6 host: it stops there (the Python dispatch takes them); and never past the commit or an entry other
    than the one expected."""
    kinds = [
        ("D", TRANSACTION_NOT_TYPE, ("10.0.0.2", 1), True),
        ("D", TRANSACTION_COMMIT_TYPE, ("10.0.0.2", 1), True),
        ("D", TRANSACTION_PREPARED_TYPE, ("10.0.0.2", 1), False),
        ("D", TRANSACTION_ROLLBACK_TYPE, ("10.0.0.2", 1), False),
        (SCHEDULE_TOPIC, TRANSACTION_NOT_TYPE, ("10.0.0.2", 1), False),
        ("D", TRANSACTION_NOT_TYPE, ("fe80::1", 1), False),
    ]
    log_, raw = _leader_run(
        tmp_path,
        [
            Message(t, b"body", queue_id=1, properties={"TAGS": "t"}, sys_flag=f, born_host=h)
            for t, f, h, _ in kinds
        ],
    )
    off = 0
    for i, (topic, _flag, _born, taken) in enumerate(kinds):
        size = dl.entry_size_at(raw, off)
        pos = log_.get(i).pos
        units: dict[tuple[str, int], list[tuple[int, int, int, int]]] = {}
        out = c.dispatch_entries(raw, off, off + size, pos, 1 << 40, units, [])
        assert (out[2] == 1) is taken, topic
        if taken:
            assert out[:2] == (off + size, pos + size) and list(units) == [(topic, 1)]
        else:
            assert out == (off, pos, 0, 0) and units == {}
        # never an entry other than the one the dispatch expects, nor one at or past the commit
        assert c.dispatch_entries(raw, off, off + size, pos + 1, 1 << 40, {}, None)[2] == 0
        assert c.dispatch_entries(raw, off, off + size, pos, pos, {}, None)[2] == 0
        off += size
    log_.close()


PROPS = st.lists(
    st.tuples(
        st.sampled_from([b"TAGS", b"KEYS", b"UNIQ_KEY", b"DELAY", b"a", b"", b"TAG", b"TAGS\x01"]),
        st.one_of(
            st.sampled_from([b"", b"t", b"a b  c", "\u00e9\U0001f600".encode(), b"\xff\xfe", b"x\x01y"]),
            st.binary(max_size=12),
        ),
        st.sampled_from([b"\x01", b"", b"\x01\x01"]),
    ),
    max_size=6,
).map(lambda pairs: b"\x02".join(name + sep + value for name, value, sep in pairs))


@FUZZ
@given(
    props=PROPS,
    topic=st.sampled_from(["D", "T\u00e9", SCHEDULE_TOPIC, "x" * 100]),
    tran=st.sampled_from(TRANSACTIONS),
    indexed=st.booleans(),
)
def test_a_record_is_dispatched_as_dispatch_rules_dispatch_it(
    props: bytes, topic: str, tran: int, indexed: bool
) -> None:
    """One entry, any properties' bytes: taken, its unit and index keys are what the Python parse and
    ``dispatch_rules`` make of it; declined, only a record the walk leaves to Python."""
    pos = 4096
    msg = Message(
        topic, b"body", queue_id=2, born_timestamp=1_700_000_000_000, sys_flag=tran, born_host=("10.0.0.2", 1)
    )
    rec = _record(msg, pos, 77, 1_700_000_000_123, props)
    header = bytearray(dl.BODY_OFFSET)
    dl.pack_header(header, dl.CURRENT_MAGIC, dl.BODY_OFFSET + len(rec), 9, 1, pos, len(rec), 0, 0)
    raw = bytes(header) + rec
    units: dict[tuple[str, int], list[tuple[int, int, int, int]]] = {}
    keyed: list[tuple[str, str | None, str | None, int, int]] = []
    out = c.dispatch_entries(raw, 0, len(raw), pos, pos + 1, units, keyed if indexed else None)
    info = record.read_record_info(raw, dl.BODY_OFFSET, len(raw))
    common = info.sys_flag & TRANSACTION_TYPE_MASK in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE)
    if not common or info.topic == SCHEDULE_TOPIC:
        assert out == (0, pos, 0, 0) and units == {} and keyed == []
        return
    assert out == (len(raw), pos + len(raw), 1, info.store_timestamp)
    code = unit_tags_code(info.topic, info.properties, info.store_timestamp, [1000])
    assert units == {(info.topic, 2): [(info.commit_log_offset, info.size, code, 77)]}
    want_keys = index_keys(info.topic, info.properties) if indexed else []
    got_keys = [record_keys(t, u, k) for t, u, k, o, s in keyed]
    assert [k for k in got_keys if k] == ([want_keys] if want_keys else [])
    assert all(o == info.commit_log_offset and s == info.store_timestamp for _t, _u, _k, o, s in keyed)


def test_a_damaged_run_is_taken_no_further_than_the_python_parse_takes_it(tmp_path: Path) -> None:
    """Runs damaged at random: the walk takes a prefix of what ``parse_entries`` (held to the Python parse by
    test_cparse) takes, record for record the same units."""
    rnd = random.Random(3838)
    msgs = [
        Message("D", bytes([i]) * rnd.randint(0, 300), queue_id=i % 2, properties={"TAGS": f"t{i % 3}"})
        for i in range(30)
    ]
    log_, raw = _leader_run(tmp_path, msgs)
    for _ in range(600):
        buf = bytearray(raw[: rnd.randrange(len(raw) + 1)] if rnd.random() < 0.2 else raw)
        for _ in range(rnd.randint(1, 3)):
            if buf:
                buf[rnd.randrange(len(buf))] = rnd.randrange(256)
        data = bytes(buf)
        parsed: dict[int, record.RecordInfo] = {}
        c.parse_entries(data, 0, len(data), 1 << 20, parsed, record.RecordInfo)
        units: dict[tuple[str, int], list[tuple[int, int, int, int]]] = {}
        out = c.dispatch_entries(data, 0, len(data), 0, 1 << 40, units, None)
        took = sorted(u[0] for run in units.values() for u in run)
        assert out[2] == len(took) and took == sorted(parsed)[: len(took)]
        expected = 0
        for offset in took:  # (consecutive from the first entry, each as the Python parse reads it)
            info = parsed[offset]
            assert offset == expected + dl.BODY_OFFSET
            assert (info.commit_log_offset, info.size) in {
                (u[0], u[1]) for u in units[(info.topic, info.queue_id)]
            }
            expected = offset + info.size
        assert out[1] == expected
    log_.close()


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(TypeError):
        c.dispatch_entries(b"", 0, 0, 0, 0, [], None)
    with pytest.raises(TypeError):
        c.dispatch_entries(b"", 0, 0, 0, 0, {}, {})
    with pytest.raises(OverflowError):
        c.dispatch_entries(b"", 0, 0, 1 << 70, 0, {}, None)
    assert c.dispatch_entries(b"\0" * 10, -5, 10, 0, 1, {}, None) == (-5, 0, 0, 0)


def test_no_path_keeps_a_reference_or_a_buffer(tmp_path: Path) -> None:
    """Each way out (taken with keys and non-ASCII tags, declined, the errors), thousands of times: nothing
    stays allocated but what the call handed over (each call's dict and list new and dropped)."""
    msgs = [
        Message("D", b"body", queue_id=i % 2, properties={"TAGS": tags, "KEYS": "a b", "UNIQ_KEY": f"U{i}"})
        for i, tags in enumerate(TAGS)
    ]
    log_, raw = _leader_run(tmp_path, msgs)
    log_.close()
    calls: list[Callable[[], object]] = [
        lambda: c.dispatch_entries(bytearray(raw), 0, len(raw), 0, 1 << 40, {}, []),
        lambda: c.dispatch_entries(bytearray(raw), 0, len(raw), 0, 1 << 40, {}, None),
        lambda: c.dispatch_entries(bytearray(raw), 0, len(raw), 1, 1 << 40, {}, None),
        lambda: c.dispatch_entries(bytearray(raw), 0, len(raw), 0, 1 << 80, {}, None),
        lambda: c.dispatch_entries(bytearray(raw), 0, len(raw), 0, 1, [], None),
        lambda: c.dispatch_entries("str", 0, 3, 0, 1, {}, None),
        lambda: c.dispatch_entries(memoryview(raw)[::2], 0, 5, 0, 1, {}, None),
        lambda: c.dispatch_entries(raw),
    ]
    assert leaked(calls) < 2000
