"""The compiled build's C parses (``store/_cparse.c``) against the Python ones. A record for dispatch:
the same fields from every record it takes, and None (the Python parse then raises, or takes it itself)
wherever a check fails: a record damaged anywhere in its header, lengths or properties is never read
differently because the build is there. Skipped without the build (read_record_info is the Python one)."""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest

from store import dledger as dl, record
from store.dledger_log import DLedgerLog
from store.errors import CorruptRecordError
from store.message import BORNHOST_V6_FLAG, MESSAGE_MAGIC_CODE_V2, Message

c = pytest.importorskip("store._cparse")

BORN_V4, BORN_V6 = ("10.0.0.2", 40000), ("fe80::1", 40000)


def python_info(buf: bytes, pos: int, limit: int) -> tuple[object, ...]:
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
    view: bytes, off: int, start: int, at: int, base: int, file_size: int, pi: int, pt: int
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
