"""The compiled build's C parses (``store/_cparse.c``) against the Python ones. A record for dispatch:
the same fields from every record it takes, and None (the Python parse then raises, or takes it itself)
wherever a check fails: a record damaged anywhere in its header, lengths or properties is never read
differently because the build is there. Skipped without the build (read_record_info is the Python one)."""

from __future__ import annotations

import random
import struct
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from store import dledger as dl, record
from store.dledger_log import DLedgerLog
from store.errors import CorruptRecordError
from store.message import BORNHOST_V6_FLAG, MESSAGE_MAGIC_CODE_V2, Message
from store.record import Buffer
from tests.support.fuzz import FUZZ, exact, leaked, outcome

c = pytest.importorskip("store._cparse")

BORN_V4, BORN_V6 = ("10.0.0.2", 40000), ("fe80::1", 40000)


def python_info(buf: Buffer, pos: int, limit: int) -> tuple[object, ...]:
    """read_record_info's own parse (``_layout``), as its fields."""
    fixed, ts_pos, rc_pos, _bp, _bl, topic_pos, topic_len, props_pos = record._layout(buf, pos, limit, False)
    props_len = fixed[0] - (props_pos - pos)
    if len(fixed) == record._V4_FIELDS:
        store_ts, prepared = fixed[9], fixed[11]
    else:
        store_ts = struct.unpack_from(">q", buf, ts_pos)[0]
        prepared = struct.unpack_from(">q", buf, rc_pos + 4)[0]
    topic = str(buf[topic_pos : topic_pos + topic_len], "utf-8", "replace")
    props = record.decode_properties(buf[props_pos : props_pos + props_len]) if props_len else {}
    return (fixed[6], fixed[0], topic, fixed[3], fixed[5], fixed[7], store_ts, prepared, props)


def encode(topic: str, body: bytes, props: bytes, born: tuple[str, int] = BORN_V4, phys: int = 0) -> bytes:
    msg = Message(topic=topic, body=body, queue_id=3, born_timestamp=1_700_000_000_000, born_host=born)
    return record.encode_record(
        msg,
        queue_offset=77,
        physical_offset=phys,
        store_timestamp=1_700_000_000_123,
        store_host=("127.0.0.1", 10911),
        properties=props,
    )


def as_v2(rec: bytes) -> bytes:
    """The same record with 5.x's magic and its i16 topic length."""
    body_len = struct.unpack_from(">i", rec, 84)[0]
    tp = 88 + body_len
    out = bytearray(rec[:tp]) + struct.pack(">h", rec[tp]) + rec[tp + 1 :]
    struct.pack_into(">ii", out, 0, len(out), MESSAGE_MAGIC_CODE_V2)
    return bytes(out)


PROPS = [
    b"",
    b"TAGS\x01TagA\x02UNIQ_KEY\x010A0000029C406D06D69C000000000001\x02KEYS\x01order-1\x02",
    b"TAGS\x01TagA\x02KEYS\x01k",  # no trailing separator (both styles are read)
    b"\x02\x02a\x01\x02\x01b\x02c\x01d\x01e\x02ab\x02x\x01y\x02x\x01z",  # empty sides, a second \x01, repeats
    "na\u00efve\x01\u00fc\u00f1\u00ee\x02".encode(),
    b"bad\xff\xfe\x01val\xc3\x02k\x01\xe2\x82\x02\xf0\x01v",  # invalid UTF-8 next to the separators
    b"\x01\x01\x01\x02\x02\x01",
]


def same(buf: bytes, pos: int, limit: int) -> None:
    """Either both parses give the same fields, or C declines (None) and Python raises or takes it; and
    read_record_info (C first) gives what the Python parse gives, or raises where it raises."""
    got = c.v4_info(buf, pos, limit)
    try:
        want: tuple[object, ...] | None = python_info(buf, pos, limit)
    except (CorruptRecordError, struct.error, IndexError):
        want = None
    if got is not None:
        assert want is not None, "C took a record the Python parse refuses"
        assert got == want
    elif want is not None:  # (declined: only an IPv6 record, or one too short for the IPv4 head)
        sys_flag = struct.unpack_from(">i", buf, pos + 36)[0]
        assert sys_flag & 0x30 or pos + 88 > limit, "C declined a good all-IPv4 record"
    if want is None:
        with pytest.raises((CorruptRecordError, struct.error, IndexError)):
            record.read_record_info(buf, pos, limit)
    else:
        info = record.read_record_info(buf, pos, limit)
        fields = ["commit_log_offset", "size", "topic", "queue_id", "queue_offset", "sys_flag"]
        fields += ["store_timestamp", "prepared_transaction_offset", "properties"]
        assert tuple(getattr(info, f) for f in fields) == want


@pytest.mark.parametrize("props", PROPS)
@pytest.mark.parametrize("topic", ["T", "Topic-\u00e9\u4e2d", "x" * 127])
@pytest.mark.parametrize("v2", [False, True])
def test_good_records_parse_the_same(props: bytes, topic: str, v2: bool) -> None:
    for body in (b"", b"b", bytes(range(256)) * 5):
        rec = encode(topic, body, props, phys=123_456_789_012)
        rec = as_v2(rec) if v2 else rec
        buf = b"\0" * 13 + rec + b"\0" * 7
        assert c.v4_info(buf, 13, 13 + len(rec)) is not None
        same(buf, 13, 13 + len(rec))
        same(buf, 13, len(buf))  # (a limit past the record: the record's own size ends it)


def test_ipv6_and_short_records_are_left_to_the_python_parse() -> None:
    rec = encode("T", b"body", PROPS[1], born=BORN_V6)
    assert struct.unpack_from(">i", rec, 36)[0] & BORNHOST_V6_FLAG
    assert c.v4_info(rec, 0, len(rec)) is None
    same(rec, 0, len(rec))
    good = encode("T", b"", b"")
    assert c.v4_info(good, 0, 87) is None and c.v4_info(good, 0, len(good) + 1) is None
    assert c.v4_info(good, -1, len(good)) is None


@pytest.mark.parametrize("v2", [False, True])
def test_damaged_records_are_never_read_differently(v2: bool) -> None:
    """Each header byte and length field set to values around its edges, then random damage anywhere."""
    rnd = random.Random(38)
    base = encode("TopicA", b"0123456789" * 3, PROPS[1])
    base = as_v2(base) if v2 else base
    body_len = struct.unpack_from(">i", base, 84)[0]
    tp = 88 + body_len
    fields = [(0, 4), (4, 4), (36, 4), (84, 4), (tp, 2 if v2 else 1), (tp + (2 if v2 else 1) + 6, 2)]
    for at, size in fields:  # TOTALSIZE, MAGIC, SYSFLAG, BODYLEN, the topic's and the properties' lengths
        for value in (0, 1, -1, 0x7F, 0x80, 0xFF, len(base), len(base) + 1, body_len - 1, 6, 7, 200):
            buf = bytearray(base)
            buf[at : at + size] = (value & ((1 << (8 * size)) - 1)).to_bytes(size, "big")
            same(bytes(buf), 0, len(buf))
            same(bytes(buf) + b"\0" * 300, 0, len(buf) + 300)
    for _ in range(3000):
        buf = bytearray(base)
        for _ in range(rnd.randint(1, 3)):
            buf[rnd.randrange(len(buf))] = rnd.randrange(256)
        same(bytes(buf), 0, len(buf))


def test_a_v1_topic_length_over_127_is_refused_as_java_reads_it() -> None:
    """The v1 topic length is a signed byte: 128 reads as -128, a damaged record, however well the 128
    bytes after it would fit."""
    rec = bytearray(encode("x" * 127, b"body", b""))
    tp = 88 + 4
    assert rec[tp] == 127
    rec[tp] = 128
    rec[tp + 1 : tp + 1] = b"x"
    struct.pack_into(">i", rec, 0, len(rec))
    assert c.v4_info(bytes(rec), 0, len(rec)) is None
    same(bytes(rec), 0, len(rec))


def test_names_seen_before_are_the_same_strings_and_others_still_read() -> None:
    """Names are kept once seen (a few dozen): prefixes of each other, more names than are kept, non-ASCII
    names and the same name with other values all read as the Python parse reads them."""
    names = [f"N{i}" for i in range(40)] + ["T", "TA", "TAG", "TAGS", "TAGSX", "\u00fcml", "x" * 40]
    for round_ in range(3):
        for i in range(0, len(names), 4):
            props = "\x02".join(f"{n}\x01v{round_}-{j}" for j, n in enumerate(names[i : i + 4])).encode()
            rec = encode("T", b"b", props)
            same(rec, 0, len(rec))
            assert c.v4_info(rec, 0, len(rec))[8] == record.decode_properties(props)


def python_scan(
    view: Buffer, off: int, start: int, at: int, base: int, file_size: int, pi: int, pt: int
) -> tuple:
    """How far _append_raw_run's loop takes a run before it refuses or rolls, by its own checks."""
    records = bytearray()
    while off < len(view):
        try:
            magic, size, index, term, pos, _ch, _chain, crc, _bl = dl.raw_header(view, off)
        except dl.DLedgerError:
            break
        if index != pi + 1 or term < pt:
            break
        if off > start and dl.needs_roll(file_size, at - base, size):
            break
        if pos != at:
            break
        if off > start and dl.body_crc_problem(index, crc, view[off + dl.BODY_OFFSET : off + size]):
            break
        dl.pack_index_record(records, magic, pos, size, index, term)
        off, at, pi, pt = off + size, at + size, index, term
    return off, at, pi, pt, bytes(records)


def test_a_pushed_run_is_taken_as_far_as_the_python_loop_takes_it(tmp_path: Path) -> None:
    """Entries of 1-300 byte bodies over two terms, then each run damaged at random (headers, bodies, the
    cut), scanned from various starts, positions and file room: the C scan stops where the loop's checks
    stop, with the same index records."""
    rnd = random.Random(38)
    leader = DLedgerLog(str(tmp_path / "dledger-n0"), data_file_size=1 << 20, index_file_size=1 << 16)
    for i in range(40):
        leader.append_leader(bytes([i]) * rnd.randint(1, 300), 1 if i < 25 else 2)
    run = leader.raw_entries(0, 40, 1 << 20)
    assert run is not None
    raw = run[1]
    cases = [(raw, 0, 0, 0, 1 << 20, -1, 0)]
    for _ in range(1500):
        buf = bytearray(raw[: rnd.randrange(len(raw) + 1)] if rnd.random() < 0.2 else raw)
        for _ in range(rnd.randint(0, 3)):
            if buf:
                buf[rnd.randrange(len(buf))] = rnd.randrange(256)
        room = rnd.choice([1 << 20, len(raw), len(raw) // 2, 1000, 60])
        cases.append((bytes(buf), 0, rnd.choice([0, -1]), rnd.choice([0, 8]), room, -1, 0))
    for data, off, start, at, room, pi, pt in cases:  # (start -1: the first entry checked whole too)
        want = python_scan(data, off, start, at, 0, room, pi, pt)
        assert c.scan_run(data, off, start, at, 0, room, pi, pt) == want
    # from the middle: the index and term the entries before left, the position they reached
    mid = dl.entry_size_at(raw, 0)
    assert c.scan_run(raw, mid, mid, mid, 0, 1 << 20, 0, 1) == python_scan(
        raw, mid, mid, mid, 0, 1 << 20, 0, 1
    )
    leader.close()


def _log_state(log_: DLedgerLog) -> tuple[object, ...]:
    """What a follower's log holds: its extent and the bytes of its data and index files."""
    data = b"".join(bytes(mf.view[: mf.wrote_position]) for mf in log_.data.files)
    index = b"".join(bytes(mf.view[: mf.wrote_position]) for mf in log_.index.files)
    return log_.begin_index, log_.last_index, log_.last_term, log_.end_pos, data, index


@pytest.mark.slow  # thousands of pushes
def test_a_push_taken_whole_is_what_the_entry_by_entry_path_takes(tmp_path: Path) -> None:
    """The follower's one-call path (``_append_raw_whole``) against the entry-by-entry one, push after push:
    runs of a leader's log over three terms and small data files (rolls), pushed in order, repeated, from
    ahead, damaged at random. Where the one call takes a push, the other takes the same and leaves the same
    files; where it declines, it wrote nothing."""
    rnd = random.Random(3838)

    def member(path: Path) -> DLedgerLog:
        return DLedgerLog(str(path), data_file_size=2048, index_file_size=32 * 64)

    leader = member(tmp_path / "dledger-n0")
    for i in range(120):
        leader.append_leader(bytes([i]) * rnd.randint(1, 200), 1 if i < 40 else 2 if i < 90 else 3)
    taken = declined = 0
    for round_ in range(40):  # (each round a fresh follower pair, pushed until it holds the leader's log)
        fast, checked = (
            member(tmp_path / f"a{round_}" / "dledger-n1"),
            member(tmp_path / f"b{round_}" / "dledger-n1"),
        )
        pushes = 0
        # (a damaged header may be taken: its term, say, higher than the rest's; then a fresh pair)
        while fast.last_index < leader.last_index and pushes < 60:
            pushes += 1
            first = max(0, min(fast.last_index + rnd.choice([1, 1, 1, 1, 0, -1, 2]), leader.last_index))
            run = leader.raw_entries(first, rnd.randint(1, 12), 1 << 20)
            assert run is not None
            buf = bytearray(run[1])
            if rnd.random() < 0.3:
                for _ in range(rnd.randint(1, 3)):
                    buf[rnd.randrange(len(buf))] = rnd.randrange(256)
            if rnd.random() < 0.1:
                del buf[rnd.randrange(len(buf)) :]
            view = memoryview(bytes(buf))
            before = _log_state(fast)
            with fast.lock:
                got = outcome(fast._append_raw_whole, view)
            if got[0] == "value" and got[1] is not None:
                taken += 1
                assert outcome(checked._append_raw_checked, view) == got
            else:
                declined += 1
                assert got == ("value", None) and _log_state(fast) == before
                with fast.lock:
                    done = outcome(fast._append_raw_checked, view)
                assert outcome(checked._append_raw_checked, view)[:2] == done[:2]
            assert _log_state(fast) == _log_state(checked)
        fast.close()
        checked.close()
    assert taken > 300 and declined > 300
    leader.close()


# ------------------------------------------------------------------ properties: any damage, any bounds
# Hypothesis draws records and runs damaged at their edges (sizes against the buffer, lengths past the
# end, negative and huge values, IPv6 flags, v1/v2 magic, cuts mid-header): the C parse must give what the
# Python one gives (settings and buffers: tests/support/fuzz.py).

I32_EDGES = [0, 1, -1, 2, 0x7F, 0x80, 0xFF, 0x7FFF, 0x8000, 0xFFFF, 2**31 - 1, -(2**31), 2**30, -(2**30)]
I64_EDGES = [*I32_EDGES, 2**63 - 1, -(2**63), 2**32, -(2**32), 2**62]


def same_either_way(buf: Buffer, pos: int, limit: int) -> None:
    """read_record_info gives the same record or the same error with the C parse and without it; and
    whatever the C parse takes, the Python parse takes the same, and it declines only what it must."""
    got = c.v4_info(buf, pos, limit)
    with_c = outcome(record.read_record_info, buf, pos, limit)
    saved, record._c_v4_info = record._c_v4_info, None
    try:
        pure = outcome(record.read_record_info, buf, pos, limit)
    finally:
        record._c_v4_info = saved
    assert with_c == pure
    if got is not None:
        assert pure[0] == "value" and got == python_info(buf, pos, limit)
    elif pure[0] == "value":  # declined: an IPv6 record, or bounds it leaves to the Python parse
        short = pos < 0 or limit > len(buf) or pos + 88 > limit
        assert short or struct.unpack_from(">i", buf, pos + 36)[0] & 0x30, "C declined a good IPv4 record"


def _field_positions(rec: bytes) -> dict[str, tuple[int, int]]:
    """Where each length and flag of a record sits: (offset, width)."""
    sys_flag = struct.unpack_from(">i", rec, 36)[0]
    hosts = (20 if sys_flag & 0x10 else 8) + 8 + (20 if sys_flag & 0x20 else 8)
    bl = 48 + hosts + 12
    tp = bl + 4 + struct.unpack_from(">i", rec, bl)[0]
    v2 = struct.unpack_from(">i", rec, 4)[0] == MESSAGE_MAGIC_CODE_V2
    width = 2 if v2 else 1
    topic_len = int.from_bytes(rec[tp : tp + width], "big")
    return {
        "total": (0, 4),
        "magic": (4, 4),
        "sys_flag": (36, 4),
        "body_len": (bl, 4),
        "topic_len": (tp, width),
        "props_len": (tp + width + topic_len, 2),
    }


#: How much damage a case gets: mostly one kind at a time (each alone finds the edge it is near more often).
EDITS, FLIPS, CUT = st.sampled_from([0, 0, 0, 1, 1, 2, 3]), st.sampled_from([0, 0, 0, 1, 2]), st.booleans()

PROP_PIECES = [b"\x01", b"\x02", b"TAGS", b"KEYS", b"a", b"v", b"\xff", b"\xe2\x82", "\u00e9".encode(), b"\0"]


@st.composite
def damaged_records(draw: st.DrawFn) -> tuple[bytes, int, int]:
    """A record (v1 or v2, IPv4 or IPv6, any topic, body and properties), its fields set to values at
    their edges, bits flipped, cut anywhere, somewhere in a buffer; and a pos and limit around it."""
    topic = draw(st.text(st.characters(codec="utf-8"), min_size=1, max_size=31))
    body = draw(st.binary(max_size=64))
    props = b"".join(draw(st.lists(st.sampled_from(PROP_PIECES), max_size=12)))
    rec = encode(topic, body, props, born=draw(st.sampled_from([BORN_V4, BORN_V6])))
    rec = as_v2(rec) if draw(st.booleans()) else rec
    fields = _field_positions(rec)
    buf = bytearray(rec)
    for _ in range(draw(EDITS)):
        at, width = fields[draw(st.sampled_from(sorted(fields)))]
        near = [len(rec) + d for d in (-2, -1, 0, 1, 2)] + [len(body) + d for d in (-1, 0, 1)]
        near += [len(rec) - (at + width) + d for d in (-2, -1, 0, 1)]  # what it measures reaching the end
        value = draw(st.one_of(st.sampled_from(I32_EDGES + near + [0x10, 0x20, 0x30]), st.integers()))
        buf[at : at + width] = (value % (1 << (8 * width))).to_bytes(width, "big")
    for _ in range(draw(FLIPS)):
        buf[draw(st.integers(0, len(buf) - 1))] ^= 1 << draw(st.integers(0, 7))
    if draw(CUT):  # cut anywhere, most often a byte or two either side of a field's end
        ends = [at + width + d for at, width in fields.values() for d in (-2, -1, 0, 1)] + [
            87,
            88,
            len(rec) - 1,
        ]
        del buf[draw(st.sampled_from(ends) | st.integers(0, len(buf))) :]
    before, after = draw(st.integers(0, 9)), draw(st.integers(0, 9))
    data = bytes(before) + bytes(buf) + bytes(after)
    limit = draw(
        st.sampled_from([before + len(buf), len(data), before + len(rec), before + 87, before + 88])
        | st.integers(-2, len(data) + 2)
    )
    pos = draw(st.sampled_from([before, before, before + 1, before - 1, 0]))
    return data, pos, limit


@pytest.mark.slow  # hundreds of examples
@FUZZ
@given(damaged_records())
def test_any_damaged_record_reads_as_the_python_parse_reads_it(case: tuple[bytes, int, int]) -> None:
    data, pos, limit = case
    same_either_way(exact(data), pos, limit)


@pytest.mark.parametrize(
    "pos", [0, 1, -1, -88, sys.maxsize, sys.maxsize - 87, sys.maxsize - 88, -sys.maxsize - 1, 2**63, -(2**70)]
)
@pytest.mark.parametrize("limit", [0, 87, 88, "len", sys.maxsize, -1, -sys.maxsize - 1, 2**64])
def test_positions_and_limits_anywhere_are_declined_or_refused(pos: int, limit: int | str) -> None:
    """A pos or limit far outside the buffer (the Python parse refuses or reads from the end): the C parse
    reads nothing of it and declines; a pos past the largest size wrapped round to a read at the buffer's
    start minus a little, and the daemon died of it."""
    rec = encode("T", b"body", PROPS[1])
    lim = len(rec) if limit == "len" else int(limit)
    assert c.v4_info(rec, pos, lim) is None or (pos, lim) == (0, len(rec))
    same_either_way(exact(rec), pos, lim)


_ENTRY = struct.Struct(">iiqqqiiii")  # magic size index term pos channel chainCrc bodyCrc bodyLength
_ENTRY_FIELDS = {"magic": (0, 4), "size": (4, 4), "index": (8, 8), "term": (16, 8), "pos": (24, 8)}
_ENTRY_FIELDS |= {"body_crc": (40, 4), "body_len": (44, 4)}


def python_scan_from(view: Buffer, got: tuple, start: int, base: int, file_size: int) -> tuple:
    """The Python loop going on from where the C scan stopped (as _append_raw_run's does)."""
    off, at, pi, pt, records = got
    more = python_scan(view, off, start, at, base, file_size, pi, pt)
    return (*more[:4], records + more[4])


@st.composite
def pushed_runs(draw: st.DrawFn) -> tuple[bytes, int, int, int, int, int, int, int]:
    """A run of entries as a leader pushes it (bodyCrc right, 0 or wrong), damaged: header fields at their
    edges, bits flipped, cut anywhere; and the follower's state around it (room left in its data file,
    the index and term it holds, a start before the run or at it)."""
    prev_index = draw(st.sampled_from([-1, 0, 7, 2**40]))
    prev_term = draw(st.sampled_from([0, 1, 5]))
    at = draw(st.sampled_from([0, 48, 1 << 20, 2**40]))
    base = at - draw(st.sampled_from([0, 8, 1000]))
    raw, offsets, index, term, pos = bytearray(), [], prev_index, prev_term, at
    for _ in range(draw(st.sampled_from([1, 1, 2, 3, 6]))):
        body = draw(st.binary(max_size=40))
        index, term = index + 1, term + draw(st.integers(0, 1))
        crc = draw(st.sampled_from([dl.entry_body_crc(body), 0, dl.entry_body_crc(body) ^ 1]))
        offsets.append(len(raw))
        raw += _ENTRY.pack(1, 48 + len(body), index, term, pos, 0, 0, crc, len(body)) + body
        pos += 48 + len(body)
    for _ in range(draw(EDITS)):
        where = draw(st.sampled_from(offsets))
        at_, width = _ENTRY_FIELDS[draw(st.sampled_from(sorted(_ENTRY_FIELDS)))]
        near = [44, 45, 47, 48, 49, len(raw) - where, len(raw) - where + 1, prev_index + 1, at]
        edges = I64_EDGES if width == 8 else I32_EDGES
        value = draw(st.one_of(st.sampled_from(edges + near), st.integers()))
        raw[where + at_ : where + at_ + width] = (value % (1 << (8 * width))).to_bytes(width, "big")
    for _ in range(draw(FLIPS)):
        raw[draw(st.integers(0, len(raw) - 1))] ^= 1 << draw(st.integers(0, 7))
    if draw(CUT):  # cut anywhere, most often just before or after an entry's header or end
        ends = [o + d for o in [*offsets[1:], len(raw)] for d in (-2, -1, 1)]
        ends += [o + d for o in offsets for d in (1, 44, 47, 48, 49)]
        del raw[max(0, draw(st.sampled_from(ends) | st.integers(0, len(raw)))) :]
    off = draw(st.sampled_from([0, 0, *offsets]))
    start = draw(st.sampled_from([off, off, -1]))
    wrote = at - base
    room = [1 << 30, wrote + len(raw) + 8, wrote + len(raw) + 7, wrote + 56, wrote, 0, 60]
    file_size = draw(st.sampled_from(room) | st.integers(0, 1 << 21))
    return bytes(raw), off, start, at, base, file_size, prev_index, prev_term


@pytest.mark.slow  # hundreds of examples
@FUZZ
@given(pushed_runs())
def test_any_damaged_run_is_scanned_as_the_python_loop_scans_it(case: tuple) -> None:
    raw, off, start, at, base, file_size, pi, pt = case
    view = exact(raw)
    got = c.scan_run(view, off, start, at, base, file_size, pi, pt)
    assert got == python_scan(view, off, start, at, base, file_size, pi, pt)


def _entry(index: int, term: int, pos: int, body: bytes = b"x") -> bytes:
    return _ENTRY.pack(1, 48 + len(body), index, term, pos, 0, 0, dl.entry_body_crc(body), len(body)) + body


MAX, MIN = 2**63 - 1, -(2**63)


@pytest.mark.parametrize(
    ("raw", "args"),
    [
        # the index after the largest: none (C's prev_index + 1 wrapped round to the smallest)
        pytest.param(_entry(MIN, 0, 0), (0, -1, 0, 0, 1 << 20, MAX, 0), id="index-after-max"),
        # an entry ending past the largest position (C's at + size wrapped round, negative)
        pytest.param(
            _entry(0, 0, MAX - 10) + _entry(1, 0, 0),
            (0, 0, MAX - 10, MAX - 100, 1 << 20, -1, 0),
            id="at-past-max",
        ),
        # room left in the file from positions far apart (C's at - base, file_size - wrote wrapped round)
        pytest.param(
            _entry(0, 0, 2**62) + _entry(1, 0, 2**62 + 49),
            (0, 0, 2**62, MIN, 1 << 20, -1, 0),
            id="wrote-past-max",
        ),
        pytest.param(
            _entry(0, 0, MIN + 5) + _entry(1, 0, MIN + 54),
            (0, 0, MIN + 5, MAX, 1 << 20, -1, 0),
            id="wrote-past-min",
        ),
        pytest.param(_entry(0, 0, 0) + _entry(1, 0, 49), (0, 0, 0, 0, MIN, -1, 0), id="room-past-min"),
        pytest.param(_entry(0, 0, 0) + _entry(1, 0, 49), (0, 0, 0, 0, MAX, -1, 0), id="room-max"),
        # arguments past 64 bits (the Python loop's ints have no bound): nothing taken, no OverflowError
        pytest.param(_entry(0, 0, 0), (0, 0, 0, 0, 2**64, -1, 0), id="file-size-2**64"),
        pytest.param(_entry(MIN, 0, 0), (0, -1, 0, 0, 1 << 20, 2**63, 0), id="prev-index-2**63"),
        pytest.param(_entry(0, 0, 0), (0, -1, 2**70, 0, 1 << 20, -1, 0), id="at-2**70"),
    ],
)
def test_a_scan_at_the_edges_of_64_bits_takes_only_what_the_python_loop_takes(
    raw: bytes, args: tuple[int, ...]
) -> None:
    """The C scan may stop early (the Python loop goes on from there), but never takes an entry the loop
    refuses nor reports another position: its sums are checked before they can overflow."""
    off, start, at, base, file_size, pi, pt = args
    view = exact(raw)
    want = python_scan(view, off, start, at, base, file_size, pi, pt)
    got = c.scan_run(view, off, start, at, base, file_size, pi, pt)
    assert python_scan_from(view, got, start, base, file_size) == want


@pytest.mark.parametrize("off", [-1, -48, MIN, 10**30, -(10**30)])
def test_a_scan_from_outside_the_run_takes_nothing(off: int) -> None:
    raw = _entry(0, 0, 0)
    assert c.scan_run(raw, off, 0, 0, 0, 1 << 20, -1, 0) == (off, 0, -1, 0, b"")


@pytest.mark.parametrize("v2", [False, True])
@pytest.mark.parametrize("born", [BORN_V4, BORN_V6])
def test_every_cut_of_a_record_is_read_as_the_python_parse_reads_it(v2: bool, born: tuple[str, int]) -> None:
    """The record cut at every byte (the buffer ending there, and the limit at it or at the full size)."""
    rec = encode("Topic", b"0123456789", PROPS[1], born=born)
    rec = as_v2(rec) if v2 else rec
    for cut in range(len(rec) + 1):
        for limit in {cut, len(rec)}:
            same_either_way(exact(rec[:cut]), 0, limit)


@pytest.mark.parametrize("start", [0, -1])
def test_every_cut_of_a_run_is_scanned_as_the_python_loop_scans_it(start: int) -> None:
    """A run of three entries cut at every byte, scanned with the first entry checked whole or not."""
    raw = _entry(5, 1, 100, b"a") + _entry(6, 1, 149, b"") + _entry(7, 2, 197, b"body" * 5)
    for cut in range(len(raw) + 1):
        view = exact(raw[:cut])
        want = python_scan(view, 0, start, 100, 0, 1 << 20, 4, 1)
        assert c.scan_run(view, 0, start, 100, 0, 1 << 20, 4, 1) == want, cut


@pytest.mark.parametrize("v2", [False, True])
@pytest.mark.parametrize("born", [BORN_V4, BORN_V6])
def test_each_length_ending_just_before_at_or_past_the_records_end(v2: bool, born: tuple[str, int]) -> None:
    """Each length field set so that what it measures ends a few bytes before the record's end, at it, or
    past it, in a buffer that ends with the record (a read past it shows under scripts/sanitize_native.py)
    or a little after it."""
    rec = encode("TopicA", b"0123456789", PROPS[1], born=born)
    rec = as_v2(rec) if v2 else rec
    for at, width in _field_positions(rec).values():
        to_end = len(rec) - (at + width)
        for value in {*range(to_end - 4, to_end + 4), *range(len(rec) - 4, len(rec) + 4), *I32_EDGES}:
            buf = bytearray(rec)
            buf[at : at + width] = (value % (1 << (8 * width))).to_bytes(width, "big")
            for tail in (b"", b"\0\0\0"):
                same_either_way(exact(bytes(buf) + tail), 0, len(buf) + len(tail))
                same_either_way(exact(bytes(buf) + tail), 0, len(buf))


RUN = _entry(5, 1, 100, b"abcd") + _entry(6, 1, 152, b"") + _entry(7, 2, 200, b"body" * 5)


@pytest.mark.parametrize("start", [0, -1])
@pytest.mark.parametrize("where", [0, 52])
def test_each_entry_size_and_body_length_at_their_edges(start: int, where: int) -> None:
    """An entry's size and body length around the header's size, agreeing or not, in a run cut at the
    entry's end or a byte either side (the first entry, checked whole or not, and the second)."""
    for size in range(36, 60):
        for body_len in range(-12, 12):
            raw = bytearray(RUN)
            struct.pack_into(">i", raw, where + 4, size)
            struct.pack_into(">i", raw, where + 44, body_len)
            for cut in {len(raw), where + size - 1, where + size, where + size + 1, where + 48}:
                view = exact(bytes(raw[: max(cut, 0)]))
                want = python_scan(view, 0, start, 100, 0, 1 << 20, 4, 1)
                assert c.scan_run(view, 0, start, 100, 0, 1 << 20, 4, 1) == want, (size, body_len, cut)


@pytest.mark.parametrize("start", [0, -1])
def test_each_room_left_in_the_file(start: int) -> None:
    """The data file's room around each entry's end plus the blank it must leave (a roll due or not)."""
    view = exact(RUN)
    for file_size in range(90, 100 + len(RUN) + 20):
        for base in (0, 60):
            want = python_scan(view, 0, start, 100, base, file_size, 4, 1)
            assert c.scan_run(view, 0, start, 100, base, file_size, 4, 1) == want, (file_size, base)


def test_no_path_keeps_a_reference_or_a_buffer() -> None:
    """Each way out of both calls, the errors included (wrong types, a buffer not contiguous, arguments
    past their range), thousands of times: nothing stays allocated (each call's buffer a new object, so
    that one kept by an unreleased view shows)."""
    rec, rec2 = encode("T", b"body", PROPS[5]), as_v2(encode("T", b"", PROPS[3]))
    calls: list[Callable[[], object]] = [
        lambda: c.v4_info(bytearray(rec), 0, len(rec)),
        lambda: c.v4_info(bytearray(rec2), 0, len(rec2)),
        lambda: c.v4_info(bytearray(rec), 1, len(rec)),
        lambda: c.v4_info(bytearray(rec), 2**80, 1),
        lambda: c.v4_info("str", 0, 1),
        lambda: c.v4_info(rec, "x", 1),
        lambda: c.v4_info(rec),
        lambda: c.v4_info(memoryview(rec)[::2], 0, 5),
        lambda: c.scan_run(bytearray(RUN), 0, -1, 100, 0, 1 << 20, 4, 1),
        lambda: c.scan_run(bytearray(RUN), 2**70, -1, 100, 0, 1 << 20, 4, 1),
        lambda: c.scan_run(RUN, 0, -1, 100, 0, 1 << 20, 4, "x"),
        lambda: c.scan_run("str", 0, -1, 100, 0, 1 << 20, 4, 1),
        lambda: c.scan_run(memoryview(RUN)[::2], 0, -1, 100, 0, 1 << 20, 4, 1),
        lambda: c.scan_run(RUN),
    ]
    assert leaked(calls) < 2000
