"""The gRPC front's send validator (`daemon.grpc.convert.parse_message`) against vectors: each refusal is
the code the 5.x proxy's `SendMessageActivity` answers, in its order, never an exception of another kind."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb

from daemon.grpc.convert import (
    MAX_MESSAGE_GROUP_BYTES,
    MAX_TRANSACTION_RECOVERY_S,
    MAX_USER_PROPERTY_BYTES,
    RESERVED_PROPERTIES,
    MessageRefused,
    control_character,
    parse_message,
    to_proto,
)
from store.message import Message
from store.record import decode_properties, decode_record, encode_properties, encode_record

NOW = 1_700_000_000_000
MAX_BODY = 4 * 1024 * 1024
MAX_DELAY = 3 * 86_400_000
ID = "01" + "AB" * 16


def message(**system: Any) -> pb.Message:
    msg = pb.Message(topic=pb.Resource(name="T"), body=b"x")
    msg.system_properties.message_id = ID
    msg.system_properties.message_type = system.pop("message_type", pb.NORMAL)
    for key, value in system.items():
        if key == "keys":
            msg.system_properties.keys.extend(value)
        else:
            setattr(msg.system_properties, key, value)
    return msg


def with_user(props: dict[str, str]) -> pb.Message:
    msg = message()
    msg.user_properties.update(props)
    return msg


def with_body(body: bytes) -> pb.Message:
    msg = message()
    msg.body = body
    return msg


def delivered_in(ms: int) -> pb.Message:
    msg = message(message_type=pb.DELAY)
    msg.system_properties.delivery_timestamp.FromMilliseconds(NOW + ms)
    return msg


#: (what, the message, the code it is refused with)
REFUSED: list[tuple[str, Callable[[], pb.Message], int]] = [
    ("empty body", lambda: with_body(b""), pb.MESSAGE_BODY_EMPTY),
    ("body one byte too large", lambda: with_body(b"b" * (MAX_BODY + 1)), pb.MESSAGE_BODY_TOO_LARGE),
    (
        "129 user properties",
        lambda: with_user({f"k{i}": "v" for i in range(129)}),
        pb.MESSAGE_PROPERTIES_TOO_LARGE,
    ),
    ("40000-character property", lambda: with_user({"k": "v" * 40_000}), pb.MESSAGE_PROPERTIES_TOO_LARGE),
    (
        "tag and keys past 16 KiB",
        lambda: message(tag="t" * 9000, keys=["k" * 9000]),
        pb.MESSAGE_PROPERTIES_TOO_LARGE,
    ),
    (
        "system property __BORNHOST",
        lambda: with_user({"__BORNHOST": "1.2.3.4"}),
        pb.ILLEGAL_MESSAGE_PROPERTY_KEY,
    ),
    (
        "system property DLQ_ORIGIN_TOPIC",
        lambda: with_user({"DLQ_ORIGIN_TOPIC": "P"}),
        pb.ILLEGAL_MESSAGE_PROPERTY_KEY,
    ),
    ("system property TRAN_MSG", lambda: with_user({"TRAN_MSG": "true"}), pb.ILLEGAL_MESSAGE_PROPERTY_KEY),
    (
        "\\x02 in a property value",
        lambda: with_user({"k": "v\x02TAGS\x01evil"}),
        pb.ILLEGAL_MESSAGE_PROPERTY_KEY,
    ),
    ("\\x01 in a property key", lambda: with_user({"k\x01x": "v"}), pb.ILLEGAL_MESSAGE_PROPERTY_KEY),
    ("DEL in a property value", lambda: with_user({"k": "a\x7fb"}), pb.ILLEGAL_MESSAGE_PROPERTY_KEY),
    ("C1 control in a property key", lambda: with_user({"k\x85": "v"}), pb.ILLEGAL_MESSAGE_PROPERTY_KEY),
    ("tag a|b", lambda: message(tag="a|b"), pb.ILLEGAL_MESSAGE_TAG),
    ("blank tag", lambda: message(tag="  "), pb.ILLEGAL_MESSAGE_TAG),
    ("\\x02 in a tag", lambda: message(tag="t\x02KEYS\x01k1"), pb.ILLEGAL_MESSAGE_TAG),
    ("newline in a tag", lambda: message(tag="a\nb"), pb.ILLEGAL_MESSAGE_TAG),
    ("blank key", lambda: message(keys=["ok", " "]), pb.ILLEGAL_MESSAGE_KEY),
    ("\\x01 in a key", lambda: message(keys=["k\x01"]), pb.ILLEGAL_MESSAGE_KEY),
    ("300-character message group", lambda: message(message_group="g" * 300), pb.ILLEGAL_MESSAGE_GROUP),
    (
        "64-byte message group",
        lambda: message(message_group="g" * MAX_MESSAGE_GROUP_BYTES),
        pb.ILLEGAL_MESSAGE_GROUP,
    ),
    ("blank message group", lambda: message(message_group="\t"), pb.ILLEGAL_MESSAGE_GROUP),
    (
        "\\x02 in a message group",
        lambda: message(message_group="g\x02TRAN_MSG\x01true"),
        pb.ILLEGAL_MESSAGE_GROUP,
    ),
    ("FIFO without a group", lambda: message(message_type=pb.FIFO), pb.BAD_REQUEST),
    ("delivery past the timer's reach", lambda: delivered_in(MAX_DELAY + 1000), pb.ILLEGAL_DELIVERY_TIME),
    ("DELAY without a delivery time", lambda: message(message_type=pb.DELAY), pb.BAD_REQUEST),
    ("\\x01 in the message id", lambda: message(message_id="01\x01"), pb.ILLEGAL_MESSAGE_ID),
    ("empty message id", lambda: message(message_id=""), pb.ILLEGAL_MESSAGE_ID),
    ("blank message id", lambda: message(message_id="   "), pb.ILLEGAL_MESSAGE_ID),
    ("recovery past the proxy's max", lambda: _recovering(MAX_TRANSACTION_RECOVERY_S + 1), pb.BAD_REQUEST),
    ("\\x02 in the trace context", lambda: message(trace_context="a\x02b"), pb.BAD_REQUEST),
    ("\\x01 in the born host", lambda: message(born_host="h\x01"), pb.BAD_REQUEST),
    # the proxy's order: the body first, then the user properties, then the tag
    ("empty body and a bad tag", lambda: _empty_tagged(), pb.MESSAGE_BODY_EMPTY),
    ("reserved property and a bad tag", lambda: _both(), pb.ILLEGAL_MESSAGE_PROPERTY_KEY),
]


def _empty_tagged() -> pb.Message:
    msg = message(tag="a|b")
    msg.body = b""
    return msg


def _recovering(seconds: int) -> pb.Message:
    msg = message(message_type=pb.TRANSACTION)
    msg.system_properties.orphaned_transaction_recovery_duration.FromSeconds(seconds)
    return msg


def _both() -> pb.Message:
    msg = message(tag="a|b")
    msg.user_properties["KEYS"] = "k"
    return msg


@pytest.mark.parametrize(("what", "build", "code"), REFUSED, ids=[r[0] for r in REFUSED])
def test_a_bad_message_is_refused_with_the_proxys_code(
    what: str, build: Callable[[], pb.Message], code: int
) -> None:
    with pytest.raises(MessageRefused) as refused:
        parse_message(build(), NOW, MAX_BODY, MAX_DELAY)
    assert pb.Code.Name(refused.value.code) == pb.Code.Name(code), (what, str(refused.value))  # type: ignore[arg-type]


def test_a_message_at_every_limit_is_taken() -> None:
    msg = message(
        tag="TagA",
        keys=["k1", "k2"],
        message_group="g" * (MAX_MESSAGE_GROUP_BYTES - 1),
        born_host="10.0.0.1",
        trace_context="00-trace",
    )
    msg.body = b"b" * MAX_BODY
    msg.user_properties.update({f"k{i}": "v" for i in range(127)})
    msg.user_properties["CHECK_IMMUNITY_TIME_IN_SECONDS"] = "60"  # a user property, not a system one
    props, body = parse_message(msg, NOW, MAX_BODY, MAX_DELAY)
    assert len(body) == MAX_BODY
    assert props["TAGS"] == "TagA" and props["KEYS"] == "k1 k2" and props["__SHARDINGKEY"] == "g" * 63
    assert props["CHECK_IMMUNITY_TIME_IN_SECONDS"] == "60" and props["k0"] == "v"
    size = MAX_USER_PROPERTY_BYTES - len("TagA")
    assert parse_message(with_user({"k": "v" * (size - 1)}), NOW, MAX_BODY, MAX_DELAY)[0]["k"]


def test_a_transaction_keeps_its_recovery_duration_as_the_checker_reads_it() -> None:
    msg = message(message_type=pb.TRANSACTION)
    msg.system_properties.orphaned_transaction_recovery_duration.FromSeconds(600)
    props, _ = parse_message(msg, NOW, MAX_BODY, MAX_DELAY)
    assert props["TRAN_MSG"] == "true" and props["CHECK_IMMUNITY_TIME_IN_SECONDS"] == "600"


def test_a_transactions_recovery_duration_overwrites_a_users_immunity_as_the_proxy_does() -> None:
    """`buildMessageProperty` puts the duration's seconds over the user's property whenever the field is
    set (0 too: checked at the next pass); without the field the user's value stays, as there (no
    official client sets the field, a 4.x producer sets the property)."""
    user = {"CHECK_IMMUNITY_TIME_IN_SECONDS": "999999999999"}
    for seconds in (0, MAX_TRANSACTION_RECOVERY_S):
        msg = _recovering(seconds)
        msg.user_properties.update(user)
        assert parse_message(msg, NOW, MAX_BODY, MAX_DELAY)[0]["CHECK_IMMUNITY_TIME_IN_SECONDS"] == str(
            seconds
        )
    msg = message(message_type=pb.TRANSACTION)
    msg.user_properties.update(user)
    assert parse_message(msg, NOW, MAX_BODY, MAX_DELAY)[0]["CHECK_IMMUNITY_TIME_IN_SECONDS"] == "999999999999"


def test_an_empty_key_and_an_empty_property_name_are_taken_as_the_proxy_takes_them() -> None:
    """The proxy refuses neither (`validateMessageKey` and `buildMessageProperty` skip an empty one); the
    Go, Rust and C++ clients send them when asked to (Java's, Python's and C#'s builders refuse them).
    The empty key joins KEYS as the proxy's `setKeys` joins it; the empty name is dropped from the stored
    record as 4.x's `string2messageProperties` drops it."""
    props, _ = parse_message(message(keys=["a", ""]), NOW, MAX_BODY, MAX_DELAY)
    assert props["KEYS"] == "a "
    props, _ = parse_message(with_user({"": "v", "k": "w"}), NOW, MAX_BODY, MAX_DELAY)
    assert props[""] == "v" and decode_properties(encode_properties(props)) == {"k": "w", "UNIQ_KEY": ID}


def test_the_reserved_set_is_javas_string_hash_set() -> None:
    """`MessageConst.STRING_HASH_SET` (51 names), which CHECK_IMMUNITY_TIME_IN_SECONDS is not in."""
    assert len(RESERVED_PROPERTIES) == 51
    assert "CHECK_IMMUNITY_TIME_IN_SECONDS" not in RESERVED_PROPERTIES
    assert {
        "__BORNHOST",
        "MAX_RECONSUME_TIMES",
        "DLQ_ORIGIN_TOPIC",
        "MSG_REGION",
        "TRACE_ON",
    } <= RESERVED_PROPERTIES


def test_javas_control_characters() -> None:
    assert all(control_character(chr(c)) for c in [*range(0x20), *range(0x7F, 0xA0)])
    assert not any(control_character(c) for c in " ~\u00a0é\u2028中")


def test_system_properties_are_not_given_as_user_properties_and_a_timed_fifo_message_is_delay() -> None:
    props = {
        "__BORNHOST": "127.0.0.1",
        "MAX_RECONSUME_TIMES": "3",
        "__SHARDINGKEY": "g",
        "TIMER_DELIVER_MS": str(NOW),
        "TRACE_CONTEXT": "t",
        "CHECK_IMMUNITY_TIME_IN_SECONDS": "60",
        "mine": "kept",
    }
    record = encode_record(
        Message("T", b"x", properties=props),
        queue_offset=0,
        physical_offset=0,
        store_timestamp=NOW,
        store_host=("127.0.0.1", 10911),
    )
    got = to_proto(decode_record(record))
    assert dict(got.user_properties) == {"mine": "kept", "CHECK_IMMUNITY_TIME_IN_SECONDS": "60"}
    assert got.system_properties.message_type == pb.DELAY
    assert got.system_properties.message_group == "g"
