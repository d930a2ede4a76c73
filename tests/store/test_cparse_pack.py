"""The compiled build's C packers and a follower's parse of a pushed run (``store/_cparse.c``) against the
Python they stand for: a DLedger entry's header and index record, an IndexFile entry with its hash slot
(the same bytes as the structs, or an error with nothing written), and the records of a binary push's run
parsed for dispatch (what the C walk takes is what the Python loop takes; where it stops, the loop takes
that entry as before). Skipped without the build."""

from __future__ import annotations

import random
import struct
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from store import dledger as dl, record
from store.consumequeue import UNIT
from store.dledger_commitlog import DLedgerCommitLog
from store.engine import DefaultMessageStore
from store.errors import CorruptRecordError
from store.indexfile import ENTRY, SLOT
from store.message import Message
from tests.support.fuzz import FUZZ, exact, leaked, outcome
from tests.support.stores import dledger_config

c = pytest.importorskip("store._cparse")

I32_EDGES = [0, 1, -1, 0x7FFF, 0x8000, 2**31 - 1, -(2**31), 2**31, -(2**31) - 1]
I64_EDGES = [*I32_EDGES, 2**63 - 1, -(2**63), 2**63, -(2**63) - 1, 2**32]
HEADER = struct.Struct(">iiqqqiiii")  # magic size index term pos channel chainCrc bodyCrc bodyLength
INDEX = struct.Struct(">iqiqq")  # magic pos size index term


def i32s() -> st.SearchStrategy[int]:
    return st.sampled_from(I32_EDGES) | st.integers(-(2**31), 2**31 - 1) | st.integers()


def i64s() -> st.SearchStrategy[int]:
    return st.sampled_from(I64_EDGES) | st.integers(-(2**63), 2**63 - 1) | st.integers()


def same_pack(c_pack: Callable[..., object], struct_pack: Callable[..., object], size: int, at: int) -> None:
    """The C packer writes what the struct writes, or raises where it raises with nothing written; a
    negative ``at`` (struct's count from the end: never passed) is refused."""
    buf_c, buf_s = bytearray(range(size)), bytearray(range(size))
    got, want = outcome(c_pack, buf_c), outcome(struct_pack, buf_s)
    if at < 0:
        assert got[0] == "raised" and buf_c == bytearray(range(size))
    elif want[0] == "value":
        assert got == ("value", None) and buf_c == buf_s
    else:
        assert want[1] is struct.error and got[0] == "raised" and got[1] in (OverflowError, ValueError)
        assert buf_c == bytearray(range(size))


@FUZZ
@given(
    st.lists(i32s(), min_size=2, max_size=2),
    st.lists(i64s(), min_size=3, max_size=3),
    st.lists(i32s(), min_size=2, max_size=2),
    st.sampled_from([0, 1, 7, 48, 60, -1, -48]),
    st.sampled_from([48, 55, 56, 100]),
)
def test_an_entry_header_is_packed_as_the_struct_packs_it(
    i32: list[int], i64: list[int], tail: list[int], at: int, size: int
) -> None:
    magic, esize = i32
    index, term, pos = i64
    crc, body_len = tail
    same_pack(
        lambda b: c.pack_header(b, at, magic, esize, index, term, pos, crc, body_len),
        lambda b: HEADER.pack_into(b, at, magic, esize, index, term, pos, 0, 0, crc, body_len),
        size,
        at,
    )


@FUZZ
@given(i32s(), i64s(), i32s(), i64s(), i64s(), st.sampled_from([0, 1, 8, 32, 33, -1, -32]))
def test_an_index_record_is_packed_as_the_struct_packs_it(
    magic: int, pos: int, size: int, index: int, term: int, at: int
) -> None:
    same_pack(
        lambda b: c.pack_index(b, at, magic, pos, size, index, term),
        lambda b: INDEX.pack_into(b, at, magic, pos, size, index, term),
        64,
        at,
    )


@FUZZ
@given(i64s(), i32s(), i64s(), st.sampled_from([0, 1, 20, 40, 41, -1, -20]))
def test_a_consumequeue_unit_is_packed_as_the_struct_packs_it(
    phys: int, size: int, tags: int, at: int
) -> None:
    """put_unit's unit: what ``UNIT.pack_into`` writes, or an error with nothing written."""
    same_pack(
        lambda b: c.pack_unit(b, at, phys, size, tags),
        lambda b: UNIT.pack_into(b, at, phys, size, tags),
        60,
        at,
    )


def test_the_packers_of_a_log_write_the_structs_bytes() -> None:
    """store.dledger's pack_header and pack_index (C with the build) against encode_entry and
    encode_index of the same entry."""
    entry = dl.Entry(2**40 + 3, 7, b"record" * 9, 2**35 + 11, body_crc=12345)
    buf = bytearray(2 + entry.size)
    dl.pack_header(buf, 1, entry.size, entry.index, entry.term, entry.pos, len(entry.body), 12345, 2)
    assert bytes(buf[2 : 2 + dl.BODY_OFFSET]) == dl.encode_entry(entry)[: dl.BODY_OFFSET]
    records = bytearray(5 + dl.INDEX_UNIT_SIZE)
    dl.pack_index(records, 5, entry)
    assert bytes(records[5:]) == dl.encode_index(entry)


@pytest.mark.parametrize("body_len", [0, 1, 15, 63, 64, 1100, 5000])
@pytest.mark.parametrize("at", [0, 3])
def test_a_placed_entry_is_the_header_the_crc_and_the_body_as_written_apart(body_len: int, at: int) -> None:
    """place_entry writes what pack_header, the body's copy and entry_body_crc write, and returns that
    bodyCrc; an entry that does not fit, a field out of range or a negative ``at`` writes nothing."""
    body = bytes((i * 7 + body_len) % 256 for i in range(body_len))
    index, term, pos = 2**40 + 3, 7, 2**35 + 11
    size = at + dl.BODY_OFFSET + body_len
    want = bytearray(range(256)) * (size // 256 + 2)
    got = bytearray(want)
    crc = dl.entry_body_crc(body)
    HEADER.pack_into(want, at, 1, dl.BODY_OFFSET + body_len, index, term, pos, 0, 0, crc, body_len)
    want[at + dl.BODY_OFFSET : size] = body
    assert c.place_entry(got, at, index, term, pos, body) == crc and got == want
    untouched = bytearray(range(256)) * (size // 256 + 2)
    for args in [
        (bytearray(untouched[: size - 1]), at, index, term, pos, body),
        (bytearray(untouched), -1, index, term, pos, body),
        (bytearray(untouched), at, 2**63, term, pos, body),
        (bytearray(untouched), at, index, term, -(2**63) - 1, body),
    ]:
        buf = args[0]
        before = bytes(buf)
        with pytest.raises((OverflowError, ValueError)):
            c.place_entry(*args)
        assert bytes(buf) == before


def python_pack_units(
    buf: bytearray, at: int, units: list[tuple[int, int, int, int]], start: int, n: int
) -> None:
    """put_units' run as the Python packs it: each unit by the struct, into a copy first (nothing written
    unless all fit), then copied in at ``at``."""
    if at < 0 or start < 0 or len(units) - start < n or len(buf) - at < n * 20:
        raise ValueError("no room")
    packed = bytearray(n * 20)
    for i, unit in enumerate(units[start : start + n]):
        UNIT.pack_into(packed, i * 20, unit[0], unit[1], unit[2])
    buf[at : at + n * 20] = packed


@FUZZ
@given(
    st.lists(st.tuples(i64s(), i32s(), i64s(), st.integers(0, 9)), max_size=6),
    st.sampled_from([0, 1, 3, 6, -1]),
    st.sampled_from([0, 1, 2, 6, 7]),
    st.sampled_from([0, 5, 20, 99, -20]),
    st.sampled_from([100, 139, 140]),
)
def test_a_run_of_units_is_packed_as_the_struct_packs_each(
    units: list[tuple[int, int, int, int]], start: int, n: int, at: int, size: int
) -> None:
    """pack_units writes what put_units' struct packs write for units[start:start + n] at ``at``, or raises
    with nothing written (a field too wide, a run past the list's end or the buffer's)."""
    buf_c, buf_py = bytearray(range(size)), bytearray(range(size))
    got = outcome(c.pack_units, buf_c, at, units, start, n)
    want = outcome(python_pack_units, buf_py, at, units, start, n)
    if want[0] == "value":
        assert got == ("value", None) and buf_c == buf_py
    else:
        assert got[0] == "raised" and got[1] in (OverflowError, ValueError)
        assert want[1] in (struct.error, ValueError) and buf_c == bytearray(range(size))


def test_a_run_of_units_is_refused_whole_when_one_is_not_a_unit() -> None:
    """A unit that is no tuple of ints, or a list that is not one: refused, the buffer untouched."""
    for units in ([(1, 2, 3, 4), (1, 2)], [(1, 2, 3, 4), [5, 6, 7, 8]], [(1, 2, 3, 4), (1, "x", 3, 4)]):
        buf = bytearray(60)
        with pytest.raises((TypeError, OverflowError)):
            c.pack_units(buf, 0, units, 0, 2)
        assert buf == bytearray(60)
    with pytest.raises(TypeError):
        c.pack_units(bytearray(60), 0, ((1, 2, 3, 4),), 0, 1)
    with pytest.raises(BufferError):  # (not writable)
        c.pack_units(bytes(60), 0, [(1, 2, 3, 4)], 0, 1)


def python_index_entry(mm: bytearray, at: int, sp: int, h: int, phy: int, diff: int, n: int) -> int | None:
    """put_keys' steps for one key as the Python writes them (the chain walk after a restore aside: None),
    values and places the structs refuse refused first (put_keys' chain walk packs them too)."""
    scratch = bytearray(mm)
    ENTRY.pack_into(scratch, at, h, phy, diff, 0)
    SLOT.pack_into(scratch, sp, n)
    prev: int = SLOT.unpack_from(mm, sp)[0]
    if prev >= n:
        return None
    prev = max(prev, 0)
    ENTRY.pack_into(mm, at, h, phy, diff, prev)
    SLOT.pack_into(mm, sp, n)
    return prev


@FUZZ
@given(
    st.sampled_from([-1, 0, 1, 5, 6, 7, 2**31 - 1, -(2**31)]),
    st.sampled_from([1, 6, 2**31 - 1]) | st.integers(0, 2**31),
    st.integers(0, 2**31 - 1) | st.sampled_from(I32_EDGES),
    i64s(),
    st.sampled_from([0, 0x7FFFFFFF, -1, 2**31]),
    st.sampled_from([(4, 40), (0, 4), (100, 40), (4, 100), (37, 40), (4, 21), (-4, 40), (4, -20)]),
)
def test_an_index_entry_and_its_slot_are_written_as_put_keys_writes_them(
    slot: int, n: int, h: int, phy: int, diff: int, where: tuple[int, int]
) -> None:
    """The entry and the slot pointed at it, prevIndex what the slot held (0 for a negative one); a slot at
    or past ``n`` (a restore's) is left for the caller's chain walk, nothing written; values or places the
    structs refuse are refused with nothing written."""
    sp, at = where
    mm = bytearray(range(100))
    if 0 <= sp <= 96:
        SLOT.pack_into(mm, sp, slot)
    mm_c, mm_py = bytearray(mm), bytearray(mm)
    got = outcome(c.index_entry, mm_c, at, sp, h, phy, diff, n)
    want = (
        outcome(python_index_entry, mm_py, at, sp, h, phy, diff, n)
        if at >= 0 and sp >= 0
        else ("raised", IndexError, "")
    )
    if want[0] == "value":
        assert got == want and mm_c == mm_py
    else:
        assert got[0] == "raised" and mm_c == mm
    if got == ("value", None):
        assert mm_c == mm


# ------------------------------------------------------------------ a pushed run's records


def _record(topic: str, i: int, pos: int, born: tuple[str, int]) -> bytes:
    msg = Message(
        topic=topic,
        body=b"b%d" % i * (i % 5),
        queue_id=i % 3,
        born_timestamp=1_700_000_000_000 + i,
        born_host=born,
        properties={"TAGS": f"t{i % 3}", "UNIQ_KEY": f"U{i:030d}"} if i % 4 else {},
    )
    return record.encode_record(
        msg,
        queue_offset=i,
        physical_offset=pos + dl.BODY_OFFSET,
        store_timestamp=1_700_000_000_500 + i,
        store_host=("127.0.0.1", 10911),
    )


def pushed_run(rnd: random.Random, count: int, v6_every: int = 0) -> bytes:
    """``count`` entries as a leader's binary push carries them: each a record naming its own offset, some
    topics repeated and some not, every ``v6_every``-th one with an IPv6 born host."""
    raw, pos = bytearray(), rnd.choice([0, 4096, 2**40])
    for i in range(count):
        born = ("fe80::1", 1) if v6_every and i % v6_every == v6_every - 1 else ("10.0.0.2", 40000)
        rec = _record(rnd.choice(["T", "T", "Orders", "t\u00fcpic", f"X{rnd.randrange(99)}"]), i, pos, born)
        size = dl.BODY_OFFSET + len(rec)
        raw += HEADER.pack(1, size, 10 + i, 1, pos, 0, 0, dl.entry_body_crc(rec), len(rec)) + rec
        pos += size
    return bytes(raw)


def fields(info: record.RecordInfo) -> tuple[object, ...]:
    return (
        info.commit_log_offset,
        info.size,
        info.topic,
        info.queue_id,
        info.queue_offset,
        info.sys_flag,
        info.store_timestamp,
        info.prepared_transaction_offset,
        info.properties,
    )


def python_parsed(run: memoryview, off: int, end: int, room: int) -> dict[int, tuple[object, ...]]:
    """_parse_pushed's loop over one run, entry by entry, as the Python does it."""
    parsed: dict[int, tuple[object, ...]] = {}
    while off < end and len(parsed) < room:
        _magic, size, _index, _term, pos, _ch, _chain, _crc, _body_len = dl.unpack_header(run, off)
        try:
            info = record.read_record_info(run, off + dl.BODY_OFFSET, off + size)
        except CorruptRecordError:
            break
        if info.commit_log_offset != pos + dl.BODY_OFFSET or info.size != size - dl.BODY_OFFSET:
            break
        parsed[info.commit_log_offset] = fields(info)
        off += size
    return parsed


def _damaged(rnd: random.Random, raw: bytes) -> bytes:
    buf = bytearray(raw)
    for _ in range(rnd.choice([0, 0, 1, 1, 2, 4])):
        at = rnd.randrange(len(buf))
        buf[at] = rnd.choice([0, 0xFF, buf[at] ^ 1, buf[at] ^ 0x80, rnd.randrange(256)])
    if rnd.random() < 0.2:
        del buf[rnd.randrange(len(buf)) :]
    return bytes(buf)


def test_parse_entries_takes_what_the_python_loop_takes_and_stops_no_later() -> None:
    """Runs with IPv4 and IPv6 records, damaged at random: every record C takes is the loop's, field for
    field, in order; where C stops before the loop, the loop reads a record there that v4_info declines
    (IPv6, or bounds it leaves to the Python parse), or an entry that does not lie within the run."""
    rnd = random.Random(38)
    for case in range(600):
        raw = exact(_damaged(rnd, pushed_run(rnd, rnd.randint(1, 12), rnd.choice([0, 3, 5]))))
        end = len(raw) if rnd.random() < 0.8 else rnd.randrange(len(raw) + 1)
        room = rnd.choice([1 << 16, 1, 3])
        try:
            want = python_parsed(raw, 0, end, room)
        except (struct.error, IndexError):  # (cut short: the loop raises reading past it)
            want = None
        got: dict[int, object] = {}
        stop = c.parse_entries(raw, 0, end, room, got, lambda *f: f)
        taken = list(got.items())
        if want is not None:
            assert taken == list(want.items())[: len(taken)], case
        if want is not None and len(taken) < len(want):  # (stopped where read_record_info's C declines)
            size = struct.unpack_from(">i", raw, stop + 4)[0]
            declined = c.v4_info(raw, stop + dl.BODY_OFFSET, stop + size) is None
            assert declined or not dl.BODY_OFFSET <= size <= end - stop, case
        assert len(taken) <= room and stop <= max(end, 0)


@pytest.fixture()
def follower(tmp_path: Path) -> DLedgerCommitLog:
    store = DefaultMessageStore(dledger_config(tmp_path))
    cl = store.commit_log
    assert isinstance(cl, DLedgerCommitLog)
    cl.auto_commit = False
    store.open()
    yield cl
    store.shutdown()


def python_parse_pushed(runs: list[bytes]) -> dict[int, tuple[object, ...]]:
    """_parse_pushed as the Python does it: each run entry by entry, all given up at the first record
    that does not parse or vouch for its entry."""
    parsed: dict[int, tuple[object, ...]] = {}
    for raw in runs:
        run, off = memoryview(raw), 0
        while off < len(raw):
            _magic, size, _index, _term, pos, _ch, _chain, _crc, _body_len = dl.unpack_header(run, off)
            try:
                info = record.read_record_info(run, off + dl.BODY_OFFSET, off + size)
            except CorruptRecordError:
                return parsed
            if info.commit_log_offset != pos + dl.BODY_OFFSET or info.size != size - dl.BODY_OFFSET:
                return parsed
            parsed[info.commit_log_offset] = fields(info)
            off += size
    return parsed


def test_a_follower_parses_every_pushed_run_as_the_python_loop_does(follower: DLedgerCommitLog) -> None:
    """_parse_pushed (C with the build) over runs of IPv4 records with IPv6 ones among them (C stops at
    each, the loop takes it, C goes on) and damaged ones: what it keeps is what the Python loop keeps,
    or it raises where the loop raises."""
    rnd = random.Random(7)
    for case in range(300):
        runs = [pushed_run(rnd, rnd.randint(1, 10), rnd.choice([0, 2, 4])) for _ in range(rnd.randint(1, 3))]
        if rnd.random() < 0.5:
            runs[rnd.randrange(len(runs))] = _damaged(rnd, runs[-1])
        want = outcome(python_parse_pushed, runs)
        follower.parsed = {}
        follower.pushed = [(memoryview(raw), 0, len(raw)) for raw in runs]

        def parse() -> dict[int, tuple[object, ...]]:
            follower._parse_pushed()
            return {k: fields(v) for k, v in follower.parsed.items()}

        assert outcome(parse) == want, case
        assert follower.pushed == []


def test_no_new_path_keeps_a_reference_or_a_buffer() -> None:
    """Each way out of the new calls, errors included, thousands of times: nothing stays allocated."""
    rnd = random.Random(1)
    run, run6 = pushed_run(rnd, 4), pushed_run(rnd, 4, 2)
    calls: list[Callable[[], object]] = [
        lambda: c.parse_entries(bytearray(run), 0, len(run), 99, {}, lambda *f: f),
        lambda: c.parse_entries(bytearray(run6), 0, len(run6), 99, {}, lambda *f: f),
        lambda: c.parse_entries(bytearray(run), 0, len(run), 99, {}, lambda *f: 1 / 0),
        lambda: c.parse_entries(bytearray(run), 0, len(run), 99, [], lambda *f: f),
        lambda: c.parse_entries(bytearray(run), 0, len(run), 99, {}, None),
        lambda: c.parse_entries(memoryview(run)[::2], 0, 9, 99, {}, lambda *f: f),
        lambda: c.parse_entries(run, 2**70, 9, 99, {}),
        lambda: c.pack_header(bytearray(60), 0, 1, 2, 3, 4, 5, 6, 7),
        lambda: c.pack_header(bytearray(60), 20, 1, 2, 3, 4, 5, 6, 7),
        lambda: c.pack_header(bytes(60), 0, 1, 2, 3, 4, 5, 6, 7),
        lambda: c.pack_header(bytearray(60), 0, 2**31, 2, 3, 4, 5, 6, 7),
        lambda: c.place_entry(bytearray(80), 0, 1, 2, 3, b"body"),
        lambda: c.place_entry(bytearray(50), 0, 1, 2, 3, b"body"),
        lambda: c.place_entry(bytearray(80), 0, 1, 2, 2**64, b"body"),
        lambda: c.place_entry(bytearray(80), 0, 1, 2, 3, "body"),
        lambda: c.place_entry(bytes(80), 0, 1, 2, 3, b"body"),
        lambda: c.pack_index(bytearray(40), 0, 1, 2, 3, 4, 5),
        lambda: c.pack_index(bytearray(40), "x", 1, 2, 3, 4, 5),
        lambda: c.pack_index(bytearray(40), 0, 1, 2, 3, 4, 2**64),
        lambda: c.index_entry(bytearray(64), 20, 0, 1, 2, 3, 4),
        lambda: c.index_entry(bytearray(64), 50, 0, 1, 2, 3, 4),
        lambda: c.index_entry(bytearray(64), 20, 62, 1, 2, 3, 4),
        lambda: c.index_entry(bytearray(64), 20, 0, 1, 2, 3, "x"),
        lambda: c.pack_units(bytearray(64), 0, [(1, 2, 3, 4), (5, 6, 7, 8)], 0, 2),
        lambda: c.pack_units(bytearray(64), 30, [(1, 2, 3, 4), (5, 6, 7, 8)], 0, 2),
        lambda: c.pack_units(bytearray(64), 0, [(1, 2, 3, 4), (5, 2**40, 7, 8)], 0, 2),
        lambda: c.pack_units(bytearray(64), 0, [(1, 2, 3, 4)], 0, 3),
    ]
    assert leaked(calls) < 2000
