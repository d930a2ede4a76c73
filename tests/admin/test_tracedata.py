"""The 4.x trace record codec: recorded Java client bodies decode to what the Java decoder reads, and
our encoder round-trips with the decoder for any record (Hypothesis)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, strategies as st

from mqctl.tracedata import (
    CONSUME_RESULTS,
    MESSAGE_TYPES,
    TRANSACTION_STATES,
    TraceFormatError,
    TraceRecord,
    decode_trace,
    encode_record,
    encode_trace,
    trace_keys,
)
from tests.support.paths import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "trace"
U1, U2, U3 = (
    "7F0000014A2C18B4AAC2155C3E1A0000",
    "7F0000014A2C18B4AAC2155C3E1E0001",
    "7F0000014A2C18B4AAC2155C40020002",
)
T = 1764365400000


def recorded(name: str) -> list[TraceRecord]:
    return decode_trace((FIXTURES / name).read_bytes())


def test_a_java_pub_batch_decodes_field_by_field() -> None:
    first, second = recorded("java-4.9.8-pub.bin")
    assert first == TraceRecord(
        "Pub",
        U1,
        timestamp_ms=T,
        region_id="DefaultRegion",
        group="PG_Orders",
        topic="TraceOrders",
        tags="TagA",
        keys="order-1001 cust-7",
        store_host="127.0.0.1:10911",
        body_size=26,
        cost_ms=12,
        msg_type="Normal_Msg",
        msg_id="7F00000100002A9F0000000000001F40",
        success=True,
    )
    assert (second.unique_key, second.tags, second.keys) == (U2, None, None)  # Java wrote "null"


def test_java_consume_records_carry_request_ids_retries_and_results() -> None:
    records = recorded("java-4.9.8-sub.bin")
    assert [r.type for r in records] == [
        "SubBefore",
        "SubBefore",
        "SubAfter",
        "SubAfter",
        "SubBefore",
        "SubAfter",
    ]
    before, after = records[0], records[2]
    assert before.request_id == after.request_id and before.unique_key == after.unique_key == U1
    assert (before.group, before.retry_times, before.timestamp_ms) == ("CG_Billing", 0, T + 40)
    assert (after.success, after.cost_ms, after.context_code, after.timestamp_ms) == (False, 7, 4, T + 55)
    assert CONSUME_RESULTS[after.context_code or 0] == "FAILED"
    assert (records[4].retry_times, records[5].success) == (1, True)


def test_a_java_transaction_decodes_half_message_and_commit() -> None:
    pub, end = recorded("java-4.9.8-transaction.bin")
    assert (pub.msg_type, end.msg_type) == ("Trans_Msg_Half", "Trans_msg_Commit")
    assert (end.transaction_state, end.transaction_id, end.from_transaction_check) == (
        "COMMIT_MESSAGE",
        U3,
        False,
    )


def test_the_older_layouts_the_java_decoder_reads() -> None:
    pub, after = recorded("older-layouts.bin")
    assert (pub.client_host, pub.msg_id, pub.success) == (
        "192.168.0.7",
        "7F00000100002A9F0000000000001F40",
        True,
    )
    assert (after.timestamp_ms, after.group, after.context_code, after.success) == (None, None, 0, True)


@pytest.mark.parametrize("name", ["java-4.9.8-pub.bin", "java-4.9.8-sub.bin", "java-4.9.8-transaction.bin"])
def test_our_encoder_writes_the_java_bytes_back(name: str) -> None:
    body = (FIXTURES / name).read_bytes()
    assert encode_trace(decode_trace(body)) == body


def test_keys_of_a_trace_message_are_the_client_ids_and_keys() -> None:
    assert trace_keys(recorded("java-4.9.8-pub.bin")) == [U1, "order-1001", "cust-7", U2]


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"Pub\x011\x01r\x01g\x02", "fewer than 12"),
        (b"SubBefore\x01soon\x01r\x01g\x01req\x01id\x010\x01k\x02", "time is not a number"),
        (b"Pub\x011\x01r\x01g\x01t\x01id\x01ta\x01k\x01h\x011\x012\x019\x01o\x01true\x02", "message type 9"),
        (
            b"EndTransaction\x011\x01r\x01g\x01t\x01id\x01ta\x01k\x01h\x012\x01tx\x01MAYBE\x01false\x02",
            "MAYBE",
        ),
        (b"Pub\x01\xff\x02", "not UTF-8"),
    ],
)
def test_a_record_the_java_decoder_cannot_read_is_refused(body: bytes, why: str) -> None:
    with pytest.raises(TraceFormatError, match=why):
        decode_trace(body)


def test_unknown_record_types_are_skipped_like_java() -> None:
    assert decode_trace(b"Nope\x01x\x02\x02") == []


# ------------------------------------------------------------------------------------ properties

_text = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x01\x02"), max_size=12).filter(
    lambda s: s != "null"
)
_opt = st.none() | _text
_ms = st.integers(0, 1 << 62)
_int = st.integers(0, 1 << 31)


@st.composite
def records(draw: st.DrawFn) -> TraceRecord:
    kind = draw(st.sampled_from(["Pub", "SubBefore", "SubAfter", "EndTransaction"]))
    common: dict[str, Any] = {"timestamp_ms": draw(_ms), "group": draw(_opt), "keys": draw(_opt)}
    if kind in ("Pub", "EndTransaction"):
        common |= {
            "region_id": draw(_opt),
            "topic": draw(_opt),
            "tags": draw(_opt),
            "store_host": draw(_opt),
            "msg_type": draw(st.sampled_from(MESSAGE_TYPES)),
        }
    if kind == "Pub":
        common |= {
            "body_size": draw(_int),
            "cost_ms": draw(_int),
            "msg_id": draw(_opt),
            "success": draw(st.booleans()),
            "client_host": draw(_opt.filter(lambda s: s != "")),
        }
    elif kind == "EndTransaction":
        common |= {
            "transaction_id": draw(_opt),
            "transaction_state": draw(st.sampled_from(TRANSACTION_STATES)),
            "from_transaction_check": draw(st.booleans()),
        }
    elif kind == "SubBefore":
        common |= {"region_id": draw(_opt), "request_id": draw(_text), "retry_times": draw(_int)}
    else:
        common |= {
            "request_id": draw(_text),
            "cost_ms": draw(_int),
            "success": draw(st.booleans()),
            "context_code": draw(st.integers(0, len(CONSUME_RESULTS) - 1)),
        }
    return TraceRecord(kind, draw(_text), **common)


@given(st.lists(records(), max_size=6))
def test_decode_reads_back_what_encode_wrote(batch: list[TraceRecord]) -> None:
    assert decode_trace(encode_trace(batch)) == batch


@given(st.lists(records(), min_size=1, max_size=4))
def test_every_record_ends_in_the_field_splitor_and_starts_with_its_type(batch: list[TraceRecord]) -> None:
    for r in batch:
        line = encode_record(r)
        assert line.endswith("\x02") and line.startswith(r.type + "\x01") and line.count("\x02") == 1
