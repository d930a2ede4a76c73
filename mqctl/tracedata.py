"""RocketMQ 4.x message trace records: the bodies a client with ``enableMsgTrace`` writes to the trace topic.

Pure functions over bytes, in the format of 4.9.8's ``TraceDataEncoder``: one body holds records, each
ended by ``FIELD_SPLITOR`` (``\\x02``), their fields separated by ``CONTENT_SPLITOR`` (``\\x01``), the first
field naming the type (``Pub``, ``SubBefore``, ``SubAfter``, ``EndTransaction``). The field order per type
is ``TraceDataEncoder#encoderFromContextBean``'s; the decoder also reads what
``#decoderFromTraceDataString`` reads (a ``Pub`` without the offset id, or with the older client host;
a ``SubAfter`` without the time and group). The Java client writes an absent tag or key set as the text
``null``; it decodes to ``None`` here and encodes back to ``null``.

A trace message is indexed (its ``KEYS``) by the traced message's client id (``UNIQ_KEY``, called
``msgId`` in the trace) and each of its keys (``TraceTransferBean#transKey``): :func:`trace_keys`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, fields, replace
from typing import Any, TypedDict

from store import SYSTEM_TOPIC_PREFIX, TRACE_TOPIC, StoredMessage

CONTENT_SPLITOR = "\x01"
FIELD_SPLITOR = "\x02"
#: Where a 4.x client on Alibaba Cloud sends traces: this prefix and the region id.
CLOUD_TRACE_TOPIC_PREFIX = SYSTEM_TOPIC_PREFIX + "TRACE_DATA_"
TRACE_TYPES = ("Pub", "SubBefore", "SubAfter", "EndTransaction")
#: ``MessageType`` by ordinal, as ``Pub`` and ``EndTransaction`` records write it.
MESSAGE_TYPES = ("Normal_Msg", "Trans_Msg_Half", "Trans_msg_Commit", "Delay_Msg")
#: ``LocalTransactionState`` names (``UNKNOW`` is spelt as in RocketMQ).
TRANSACTION_STATES = ("COMMIT_MESSAGE", "ROLLBACK_MESSAGE", "UNKNOW")
#: ``ConsumeReturnType`` by ordinal: a ``SubAfter`` record's context code.
CONSUME_RESULTS = ("SUCCESS", "TIME_OUT", "EXCEPTION", "RETURNNULL", "FAILED")
_LONG = re.compile(r"[+-]?[0-9]+")


class TraceFormatError(ValueError):
    """A body that is not a 4.x trace body (a record of a known type with missing or unreadable fields)."""


@dataclass(frozen=True)
class TraceRecord:
    """One decoded record; fields a type does not carry stay ``None`` (see each type in :func:`encode_trace`)."""

    type: str
    unique_key: str  # the traced message's client id: the trace's msgId
    timestamp_ms: int | None = None
    region_id: str | None = None
    group: str | None = None
    request_id: str | None = None  # pairs a SubBefore with its SubAfter
    topic: str | None = None
    tags: str | None = None
    keys: str | None = None
    store_host: str | None = None
    body_size: int | None = None
    cost_ms: int | None = None
    msg_type: str | None = None
    msg_id: str | None = None  # the offset id (Pub from 4.x clients that know it)
    success: bool | None = None
    client_host: str | None = None
    retry_times: int | None = None
    context_code: int | None = None
    transaction_id: str | None = None
    transaction_state: str | None = None
    from_transaction_check: bool | None = None

    def as_row(self) -> dict[str, Any]:
        """The fields this type carries, as JSON output shows them (``time``/``time_ms``, ``result``)."""
        from mqctl.units import time_fields

        row: dict[str, Any] = {"type": self.type}
        if self.timestamp_ms is not None:
            row |= time_fields("time", self.timestamp_ms)
        for f in fields(self):
            if f.name not in ("type", "timestamp_ms") and f.name in _CARRIED[self.type]:
                row[f.name] = getattr(self, f.name)
        if self.context_code is not None:
            row["result"] = consume_result(self.context_code)
        return row


#: The fields each type carries, in 4.9.8's encoder order (timestamp_ms aside).
_CARRIED: dict[str, tuple[str, ...]] = {
    "Pub": (
        "region_id",
        "group",
        "topic",
        "unique_key",
        "tags",
        "keys",
        "store_host",
        "body_size",
        "cost_ms",
        "msg_type",
        "msg_id",
        "success",
        "client_host",
    ),
    "SubBefore": ("region_id", "group", "request_id", "unique_key", "retry_times", "keys"),
    "SubAfter": ("request_id", "unique_key", "cost_ms", "success", "keys", "context_code", "group"),
    "EndTransaction": (
        "region_id",
        "group",
        "topic",
        "unique_key",
        "tags",
        "keys",
        "store_host",
        "msg_type",
        "transaction_id",
        "transaction_state",
        "from_transaction_check",
    ),
}


def consume_result(code: int) -> str:
    """A ``SubAfter`` context code by its ``ConsumeReturnType`` name (the number when it is none)."""
    return CONSUME_RESULTS[code] if 0 <= code < len(CONSUME_RESULTS) else str(code)


# ----------------------------------------------------------------------------------------- decode


def _text(value: str) -> str | None:
    return None if value == "null" else value


def _long(value: str, what: str) -> int:
    if not _LONG.fullmatch(value):
        raise TraceFormatError(f"{what} is not a number: {value!r}")
    return int(value)


def _bool(value: str) -> bool:
    return value.lower() == "true"  # Boolean.parseBoolean


def _enum(names: tuple[str, ...], ordinal: str, what: str) -> str:
    index = _long(ordinal, what)
    if not 0 <= index < len(names):
        raise TraceFormatError(f"{what} {index} is not one of 0..{len(names) - 1}")
    return names[index]


def _sent(kind: str, line: list[str]) -> TraceRecord:
    """The first nine fields ``Pub`` and ``EndTransaction`` share: type, time, region, group, topic,
    client id, tags, keys, store host."""
    return TraceRecord(
        kind,
        line[5],
        timestamp_ms=_long(line[1], "time"),
        region_id=_text(line[2]),
        group=_text(line[3]),
        topic=_text(line[4]),
        tags=_text(line[6]),
        keys=_text(line[7]),
        store_host=_text(line[8]),
    )


def _pub(line: list[str]) -> TraceRecord:
    record = replace(
        _sent("Pub", line),
        body_size=_long(line[9], "body length"),
        cost_ms=_long(line[10], "cost"),
        msg_type=_enum(MESSAGE_TYPES, line[11], "message type"),
        success=True,
    )
    if len(line) == 13:
        return replace(record, success=_bool(line[12]))
    if len(line) >= 14:
        record = replace(record, msg_id=_text(line[12]), success=_bool(line[13]))
    if len(line) >= 15:
        record = replace(record, client_host=_text(line[14]))
    return record


def _sub_before(line: list[str]) -> TraceRecord:
    return TraceRecord(
        "SubBefore",
        line[5],
        timestamp_ms=_long(line[1], "time"),
        region_id=_text(line[2]),
        group=_text(line[3]),
        request_id=line[4],
        retry_times=_long(line[6], "retry times"),
        keys=_text(line[7]),
    )


def _sub_after(line: list[str]) -> TraceRecord:
    record = TraceRecord(
        "SubAfter",
        line[2],
        request_id=line[1],
        cost_ms=_long(line[3], "cost"),
        success=_bool(line[4]),
        keys=_text(line[5]),
    )
    if len(line) >= 7 and line[6]:
        record = replace(record, context_code=_long(line[6], "context code"))
    if len(line) >= 9 and line[7]:
        record = replace(record, timestamp_ms=_long(line[7], "time"), group=_text(line[8]))
    return record


def _end_transaction(line: list[str]) -> TraceRecord:
    if line[11] not in TRANSACTION_STATES:
        raise TraceFormatError(
            f"transaction state {line[11]!r} is not one of {', '.join(TRANSACTION_STATES)}"
        )
    return replace(
        _sent("EndTransaction", line),
        msg_type=_enum(MESSAGE_TYPES, line[9], "message type"),
        transaction_id=_text(line[10]),
        transaction_state=line[11],
        from_transaction_check=_bool(line[12]),
    )


#: type → (fields it needs at least, its reader).
_READERS = {
    "Pub": (12, _pub),
    "SubBefore": (8, _sub_before),
    "SubAfter": (6, _sub_after),
    "EndTransaction": (13, _end_transaction),
}


def decode_trace(body: bytes) -> list[TraceRecord]:
    """Every record of a trace body, in order; a record of an unknown type is skipped (as
    ``TraceDataEncoder#decoderFromTraceDataString`` does). Raises :class:`TraceFormatError` for a body
    that is not UTF-8 or a record of a known type that the Java decoder could not read either."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TraceFormatError(f"not UTF-8 text: {exc}") from None
    out = []
    for index, chunk in enumerate(text.split(FIELD_SPLITOR)):
        line = chunk.split(CONTENT_SPLITOR)
        reader = _READERS.get(line[0])
        if reader is None:
            continue
        need, read = reader
        if len(line) < need:
            raise TraceFormatError(
                f"record {index + 1} ({line[0]}) has {len(line)} fields, fewer than {need}"
            )
        out.append(read(line))
    return out


def looks_like_trace(body: bytes) -> bool:
    """Whether a body starts as a trace body does: a trace type, then ``\\x01``."""
    return any(body.startswith(name.encode() + b"\x01") for name in TRACE_TYPES)


def is_trace_topic(topic: str) -> bool:
    return topic == TRACE_TOPIC or topic.startswith(CLOUD_TRACE_TOPIC_PREFIX)


class TraceField(TypedDict, total=False):
    """What :func:`trace_field` adds to a message's record: its trace records, or why they do not decode."""

    trace: list[dict[str, Any]]
    trace_error: str


def trace_field(m: StoredMessage) -> TraceField:
    """``{"trace": [records]}`` for a message of a trace topic (or one whose body is a trace body), so
    ``msg query``/``msg show`` show what it holds; ``{"trace_error": why}`` when it does not decode;
    ``{}`` for any other message."""
    if not (is_trace_topic(m.topic) or looks_like_trace(m.body)):
        return {}
    try:
        return {"trace": [r.as_row() for r in decode_trace(m.body)]}
    except TraceFormatError as exc:
        return {"trace_error": str(exc)} if is_trace_topic(m.topic) else {}


# ----------------------------------------------------------------------------------------- encode


def _out(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def encode_record(r: TraceRecord) -> str:
    """One record as ``TraceDataEncoder#encoderFromContextBean`` writes it (a SubAfter of a non-cloud
    client, with its time and group), ending in ``FIELD_SPLITOR``; a ``Pub`` with a client host gets it
    as the older clients' 15th field."""
    sent = [r.type, r.timestamp_ms, r.region_id, r.group, r.topic, r.unique_key, r.tags, r.keys, r.store_host]
    if r.type == "Pub":
        values: list[object] = [
            *sent,
            r.body_size,
            r.cost_ms,
            MESSAGE_TYPES.index(r.msg_type or "Normal_Msg"),
            r.msg_id,
            r.success,
            *([r.client_host] if r.client_host is not None else []),
        ]
    elif r.type == "SubBefore":
        values = [
            r.type,
            r.timestamp_ms,
            r.region_id,
            r.group,
            r.request_id,
            r.unique_key,
            r.retry_times,
            r.keys,
        ]
    elif r.type == "SubAfter":
        values = [
            r.type,
            r.request_id,
            r.unique_key,
            r.cost_ms,
            r.success,
            r.keys,
            r.context_code or 0,
            r.timestamp_ms,
            r.group,
        ]
    elif r.type == "EndTransaction":
        values = [
            *sent,
            MESSAGE_TYPES.index(r.msg_type or "Trans_msg_Commit"),
            r.transaction_id,
            r.transaction_state,
            r.from_transaction_check,
        ]
    else:
        raise ValueError(f"unknown trace type {r.type!r}")
    return CONTENT_SPLITOR.join(_out(v) for v in values) + FIELD_SPLITOR


def encode_trace(records: Iterable[TraceRecord]) -> bytes:
    """A trace body holding ``records`` (as ``AsyncTraceDispatcher`` batches them), UTF-8."""
    return "".join(encode_record(r) for r in records).encode("utf-8")


def trace_keys(records: Iterable[TraceRecord]) -> list[str]:
    """The ``KEYS`` of the trace message carrying ``records``: each traced client id and each of its keys
    (``TraceTransferBean#transKey``), once each, in first-seen order."""
    out: dict[str, None] = {}
    for r in records:
        out[r.unique_key] = None
        if r.keys:
            out.update(dict.fromkeys(k for k in r.keys.split(" ") if k))
    return list(out)
