"""The vectorized decoder against ``store.record`` (the per-record reference codec), without Spark."""

from __future__ import annotations

import struct
import zlib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from mqctl.spark.decode import RecordFilter, batches, scan
from store.errors import CorruptRecordError
from store.message import COMPRESSED_FLAG, COMPRESSION_ZLIB, MESSAGE_MAGIC_CODE_V2, Message, StoredMessage
from store.record import decode_record, encode_blank, encode_record


def decode_rows(
    buf: bytes, base: int = 0, *, record_filter: RecordFilter | None = None, batch_rows: int = 64
) -> list[dict[str, Any]]:
    arr = np.frombuffer(buf, dtype=np.uint8)
    found = scan(arr)
    rows: list[dict[str, Any]] = []
    for batch in batches(
        arr, found, base, "f", with_body=True, record_filter=record_filter, batch_rows=batch_rows
    ):
        rows.extend(batch.to_pylist())
    return rows


def ms(value: datetime) -> int:
    return round(value.timestamp() * 1000)


def assert_same(row: dict[str, Any], m: StoredMessage) -> None:
    assert row["topic"] == m.topic
    assert (row["queue_id"], row["queue_offset"], row["physical_offset"]) == (
        m.queue_id,
        m.queue_offset,
        m.commit_log_offset,
    )
    assert row["msg_id"] == m.msg_id
    assert row["unique_key"] == m.uniq_key
    assert row["keys"] == m.keys
    assert row["tags"] == m.tags
    assert (row["flag"], row["sys_flag"], row["reconsume_times"]) == (m.flag, m.sys_flag, m.reconsume_times)
    assert ms(row["born_timestamp"]) == m.born_timestamp
    assert ms(row["store_timestamp"]) == m.store_timestamp
    assert row["born_host"] == f"{m.born_host[0]}:{m.born_host[1]}"
    assert row["store_host"] == f"{m.store_host[0]}:{m.store_host[1]}"
    assert row["body_size"] == len(m.stored_body)
    assert row["record_size"] == m.store_size
    assert dict(row["properties"]) == m.properties
    assert row["body"] == m.body
    assert row["body_inflated_size"] == (len(m.body) if len(m.body) != len(m.stored_body) else None)


@pytest.mark.slow
def test_every_fixture_record_matches_the_reference_codec(store_a: Path) -> None:
    total = 0
    for path in sorted((store_a / "commitlog").iterdir()):
        data = path.read_bytes()
        rows = decode_rows(data, int(path.name), batch_rows=1000)
        assert all(r["file"] == "f" for r in rows)
        for row in rows:
            assert_same(row, decode_record(data, row["physical_offset"] - int(path.name)))
        total += len(rows)
    assert total == 5612


@pytest.mark.slow
def test_batches_respect_the_row_and_byte_budgets(store_a: Path) -> None:
    path = store_a / "commitlog" / "00000000000001048576"  # holds FixA_Mixed records of up to 4311 bytes
    arr = np.fromfile(path, dtype=np.uint8)
    found = scan(arr)
    got = list(batches(arr, found, int(path.name), path.name, batch_rows=100, batch_bytes=2048))
    sizes = [b.column("record_size").to_pylist() for b in got]
    assert sum(len(s) for s in sizes) == len(found.positions) == 1694
    assert all(len(s) <= 100 and (sum(s) <= 2048 or len(s) == 1) for s in sizes)
    assert any(len(s) == 1 and s[0] > 2048 for s in sizes)


def test_scan_stops_at_the_blank_filler_and_at_unwritten_bytes(store_a: Path) -> None:
    files = sorted((store_a / "commitlog").iterdir())
    first = scan(np.fromfile(files[0], dtype=np.uint8))
    last = scan(np.fromfile(files[-1], dtype=np.uint8))
    assert first.reason == "blank"
    assert (last.reason, last.stop) == ("eod", 252_579)


_TEXT = st.text(
    st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), min_size=1, max_size=12
)
_HOST = st.tuples(st.one_of(st.ip_addresses(v=4), st.ip_addresses(v=6)).map(str), st.integers(0, 65535))


@st.composite
def messages(draw: st.DrawFn) -> tuple[Message, int]:
    props = draw(st.dictionaries(_TEXT, _TEXT, max_size=4))
    if draw(st.booleans()):
        props["KEYS"] = " ".join(draw(st.lists(st.text("abc", max_size=3), max_size=4)))
    if draw(st.booleans()):
        props["TAGS"] = draw(_TEXT)
    if draw(st.booleans()):
        props["UNIQ_KEY"] = draw(st.text("0123456789ABCDEF", min_size=32, max_size=32))
    body = draw(st.binary(max_size=300))
    sys_flag = draw(st.sampled_from([0, 0x2, 0x8]))
    if draw(st.booleans()):
        body = zlib.compress(body)
        sys_flag |= COMPRESSED_FLAG | draw(st.sampled_from([0, COMPRESSION_ZLIB]))
    msg = Message(
        topic=draw(st.text("abcXYZ019_-%|", min_size=1, max_size=127)),
        body=body,
        queue_id=draw(st.integers(0, 1023)),
        flag=draw(st.integers(-(2**31), 2**31 - 1)),
        properties=props,
        sys_flag=sys_flag,
        born_timestamp=draw(st.integers(0, 2**42)),
        born_host=draw(_HOST),
        store_host=draw(_HOST),
        reconsume_times=draw(st.integers(0, 16)),
    )
    return msg, draw(st.integers(0, 2**42))


@pytest.mark.slow
@settings(max_examples=60)
@given(st.lists(messages(), min_size=1, max_size=40), st.integers(0, 2**40), st.booleans())
def test_generated_records_match_the_reference_codec(
    generated: list[tuple[Message, int]], base: int, blank_tail: bool
) -> None:
    parts: list[bytes] = []
    pos = 0
    for i, (msg, store_ts) in enumerate(generated):
        record = encode_record(
            msg,
            queue_offset=i,
            physical_offset=base + pos,
            store_timestamp=store_ts,
            store_host=("127.0.0.1", 10911),
        )
        parts.append(record)
        pos += len(record)
    parts.append(encode_blank(64) + bytes(56) if blank_tail else bytes(64))
    buf = b"".join(parts)
    rows = decode_rows(buf, base, batch_rows=7)
    assert len(rows) == len(generated)
    for row in rows:
        assert_same(row, decode_record(buf, row["physical_offset"] - base))


@pytest.mark.slow
@settings(max_examples=40)
@given(st.lists(messages(), min_size=1, max_size=30), st.data())
def test_pushed_filters_keep_exactly_the_matching_rows(
    generated: list[tuple[Message, int]], data: st.DataObject
) -> None:
    buf = b""
    for i, (msg, store_ts) in enumerate(generated):
        buf += encode_record(
            msg,
            queue_offset=i,
            physical_offset=len(buf),
            store_timestamp=store_ts,
            store_host=("10.0.0.1", 10911),
        )
    every = decode_rows(buf)
    topics = data.draw(st.none() | st.frozensets(st.sampled_from([m.topic for m, _ in generated]) | _TEXT))
    lo = data.draw(st.none() | st.integers(0, 2**42 * 1000))
    hi = data.draw(st.none() | st.integers(0, 2**42 * 1000))
    expected = [
        r["physical_offset"]
        for r in every
        if (topics is None or r["topic"] in topics)
        and (lo is None or ms(r["store_timestamp"]) * 1000 >= lo)
        and (hi is None or ms(r["store_timestamp"]) * 1000 <= hi)
    ]
    got = decode_rows(buf, record_filter=RecordFilter(topics, lo, hi))
    assert [r["physical_offset"] for r in got] == expected


def _two_records() -> tuple[bytes, int]:
    msg = Message(topic="T", body=b"hello", born_timestamp=1, properties={"KEYS": "a b"})
    first = encode_record(
        msg, queue_offset=0, physical_offset=0, store_timestamp=2, store_host=("127.0.0.1", 10911)
    )
    second = encode_record(
        msg, queue_offset=1, physical_offset=len(first), store_timestamp=3, store_host=("127.0.0.1", 10911)
    )
    return first + second, len(first)


@pytest.mark.slow
def test_a_5x_record_with_a_two_byte_topic_length_decodes() -> None:
    """MESSAGE_MAGIC_CODE_V2 (5.x): same layout but TOPIC LENGTH is an i16."""
    msg = Message(topic="V2Topic", body=b"body", born_timestamp=5, properties={"TAGS": "t"})
    v1 = encode_record(
        msg, queue_offset=0, physical_offset=0, store_timestamp=6, store_host=("127.0.0.1", 10911)
    )
    topic_at = 88 + len(msg.body)
    v2 = bytearray(v1[:topic_at] + struct.pack(">h", len(msg.topic)) + v1[topic_at + 1 :])
    struct.pack_into(">ii", v2, 0, len(v2), MESSAGE_MAGIC_CODE_V2)
    rows = decode_rows(bytes(v2))
    assert len(rows) == 1
    assert_same(rows[0], decode_record(bytes(v2), 0))
    assert rows[0]["topic"] == "V2Topic"


def test_a_record_whose_lengths_do_not_add_up_ends_the_scan() -> None:
    buf, second = _two_records()
    broken = bytearray(buf)
    broken[second + 88 + 5] = 40  # the second record's topic length now overruns its properties
    found = scan(np.frombuffer(bytes(broken), dtype=np.uint8))
    assert (found.reason, found.stop, found.positions.tolist()) == ("invalid", second, [0])


def test_a_record_that_names_another_offset_is_rejected() -> None:
    buf, _ = _two_records()
    arr = np.frombuffer(buf, dtype=np.uint8)
    with pytest.raises(CorruptRecordError, match="PHYSICALOFFSET"):
        list(batches(arr, scan(arr), 4096, "f"))


@pytest.mark.slow
def test_timestamps_are_utc_instants() -> None:
    buf, _ = _two_records()
    row = decode_rows(buf)[0]
    assert row["store_timestamp"] == datetime(1970, 1, 1, 0, 0, 0, 2000, tzinfo=UTC)
    assert row["keys"] == ["a", "b"]
