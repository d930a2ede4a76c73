"""Message trace: the timeline of one message from the trace records 4.x clients wrote (``msg trace``).

A client with ``enableMsgTrace`` writes records (:mod:`mqctl.tracedata`) to the trace topic, indexed by
the traced message's client id and keys; this finds them with QUERY_MESSAGE on the trace topic (as
mqadmin's ``queryMsgTraceById``), keeps those of the message asked for, pairs each consumer's
``SubBefore`` with its ``SubAfter`` by request id, and reads where the message was stored (its queue
and offset) from the broker the ``Pub`` record's offset id names.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, TypedDict

from daemon.remoting.codes import ResponseCode
from daemon.remoting.errors import RemotingCommandError, RemotingError
from mqctl.admin import messaging as wire
from mqctl.admin.client import Admin, Refused
from mqctl.errors import NotFoundError
from mqctl.services.fanout import broker_names, each_broker
from mqctl.services.messages import JAVA_LONG_MAX, plausible_offset_id
from mqctl.services.topics import readers_of_topic
from mqctl.tracedata import TraceFormatError, TraceRecord, consume_result, decode_trace
from mqctl.units import time_fields, when
from store import DamagedRecordError, StoredMessage

log = logging.getLogger(__name__)

#: Trace messages asked of each broker per key, as mqadmin's queryMsgTraceById asks.
QUERY_MAX = 64
#: At most this many messages are traced for one ``--key``.
KEY_MESSAGES_MAX = 32


@dataclass(frozen=True)
class Carried:
    """A decoded record and the trace message that carried it (whose born host is the client's address)."""

    record: TraceRecord
    born_host: str


#: Where a message is, traced or not: said when there is no trace to show it.
WHERE_STORED = "'mqctl msg query --id ID' (or -t TOPIC -k KEY) shows where it is stored"


async def _trace_records(admin: Admin, trace_topic: str, key: str) -> list[Carried]:
    """Every record of every trace message indexed under ``key``, on every broker of the trace topic that
    answers (each one that does not is named: a message's trace may be on another broker)."""
    try:
        addrs = sorted(set((await readers_of_topic(admin, trace_topic)).values()))
    except NotFoundError:
        raise NotFoundError(
            f"trace topic {trace_topic!r} does not exist: no client has written a trace to this cluster",
            hint=f"clients write traces with enableMsgTrace; --trace-topic names another topic; {WHERE_STORED}",
        ) from None
    now = int(time.time() * 1000)
    batches = await each_broker(
        admin,
        addrs,
        lambda addr: wire.query(admin, addr, trace_topic, key, begin_ms=0, end_ms=now, max_num=QUERY_MAX),
    )
    seen: set[tuple[str, int]] = set()
    out: list[Carried] = []
    for m in (m for batch in batches.values() for m in batch if m.topic == trace_topic):
        where = (f"{m.store_host[0]}:{m.store_host[1]}", m.commit_log_offset)
        if where in seen:
            continue
        seen.add(where)
        try:
            records = decode_trace(m.body)
        except TraceFormatError as exc:
            log.warning("trace message %s does not decode: %s", m.msg_id, exc)
            continue
        out.extend(Carried(r, f"{m.born_host[0]}:{m.born_host[1]}") for r in records)
    return out


async def _view(admin: Admin, addr: str, offset: int) -> StoredMessage | None:
    try:
        return await wire.view(admin, addr, offset)
    except DamagedRecordError as exc:  # the traces still say what happened to it
        log.warning("the stored message at %s is damaged: %s", addr, exc.reason)
        return None
    except RemotingCommandError as exc:
        if exc.code == ResponseCode.SYSTEM_ERROR and not isinstance(exc, Refused):  # not there
            return None
        raise
    except RemotingError as exc:
        log.warning("cannot read the stored message at %s: %s", addr, exc)
        return None


class TraceEvent(TypedDict):
    """One event of a timeline: the fields every event has, and what only its kind has under ``details``."""

    event: str
    time: str | None
    time_ms: int
    group: str | None
    client_host: str | None
    cost_ms: int | None
    status: str | None
    details: dict[str, Any]


class Timeline(TypedDict):
    """``msg trace --key``: what the trace records and, when reachable, the stored message say about one
    message, and its events in time order."""

    unique_key: str
    msg_id: str | None
    topic: str | None
    tags: str | None
    keys: str | None
    producer_group: str | None
    broker_name: str | None
    store_host: str | None
    queue_id: int | None
    queue_offset: int | None
    transaction_state: str | None
    consumer_groups: list[str]
    events: list[TraceEvent]


class TracedMessage(Timeline):
    """``msg trace ID``: the timeline, first saying which kind of id found it (``found_by``)."""

    found_by: str


async def trace_message(
    admin: Admin, message_id: str, *, trace_topic: str, topic: str | None = None
) -> TracedMessage:
    """The timeline of the message ``message_id`` names: its client id (``unique_key``, looked up as
    it is) or its offset id (``msg_id``: the stored message is read for its client id)."""
    wanted = message_id.strip().upper()
    carried = await _trace_records(admin, trace_topic, wanted)
    mine = [c for c in carried if c.record.unique_key.upper() == wanted]
    found_by = "unique_key"
    stored = None
    if not mine:
        located = plausible_offset_id(wanted)
        stored = await _view(admin, *located) if located is not None else None
        if stored is None or not stored.uniq_key:
            raise NotFoundError(f"no trace of message {message_id} in {trace_topic}", hint=WHERE_STORED)
        found_by = "msg_id"
        wanted = stored.uniq_key.upper()
        mine = [
            c
            for c in await _trace_records(admin, trace_topic, wanted)
            if c.record.unique_key.upper() == wanted
        ]
        if not mine:
            raise NotFoundError(
                f"message {message_id} (unique_key {stored.uniq_key}) has no trace in {trace_topic}",
                hint=f"its producer and consumers did not run with message trace on; {WHERE_STORED}",
            )
    timeline = await _timeline(admin, mine, stored, topic)
    if topic is not None and timeline["topic"] not in (topic, None):
        raise NotFoundError(f"message {message_id} is in topic {timeline['topic']!r}, not {topic!r}")
    return {"found_by": found_by, **timeline}


async def trace_key(admin: Admin, key: str, *, trace_topic: str, topic: str | None = None) -> list[Timeline]:
    """The timelines of every traced message with ``key`` among its keys (of ``topic`` when given)."""
    carried = await _trace_records(admin, trace_topic, key)
    ids = list(dict.fromkeys(c.record.unique_key for c in carried if key in (c.record.keys or "").split(" ")))
    out: list[Timeline] = []
    for unique_key in ids[:KEY_MESSAGES_MAX]:
        mine = [
            c
            for c in await _trace_records(admin, trace_topic, unique_key)
            if c.record.unique_key == unique_key
        ]
        timeline = await _timeline(admin, mine, None, topic)
        if topic is None or timeline["topic"] in (topic, None):
            out.append(timeline)
    if not out:
        where = f" of topic {topic!r}" if topic else ""
        raise NotFoundError(f"no trace of a message{where} with key {key!r} in {trace_topic}")
    if len(ids) > KEY_MESSAGES_MAX:
        log.warning("%d messages have key %r; the first %d are shown", len(ids), key, KEY_MESSAGES_MAX)
    return sorted(out, key=lambda t: t["events"][0]["time_ms"] if t["events"] else 0)


# ------------------------------------------------------------------------------------- timeline


def _first(records: list[TraceRecord], name: str) -> Any:
    return next((getattr(r, name) for r in records if getattr(r, name) is not None), None)


def _event(
    kind: str,
    at: int | None,
    *,
    group: str | None = None,
    client_host: str | None = None,
    cost_ms: int | None = None,
    status: str | None = None,
    **details: Any,
) -> TraceEvent:
    """One event with the fields every event has, and what only its kind has under ``details``."""
    return {
        "event": kind,
        "time": when(at),
        "time_ms": at or 0,
        "group": group,
        "client_host": client_host,
        "cost_ms": cost_ms,
        "status": status,
        "details": details,
    }


def _consumes(carried: list[Carried]) -> list[TraceEvent]:
    """One event per consume attempt: a SubBefore and the SubAfter of the same request id, or either alone
    (a consumer that is still running or died shows no result; a SubAfter alone, no start)."""
    attempts: dict[tuple[str, str], dict[str, Carried]] = {}
    for c in carried:
        if c.record.type in ("SubBefore", "SubAfter"):
            attempts.setdefault((c.record.request_id or "", c.record.unique_key), {})[c.record.type] = c
    out = []
    for (request_id, _), pair in attempts.items():
        before, after = pair.get("SubBefore"), pair.get("SubAfter")
        either = before or after
        b = before.record if before else None
        a = after.record if after else None
        out.append(
            _event(
                "consume",
                b.timestamp_ms if b else None,
                group=(b.group if b else None) or (a.group if a else None),
                client_host=either.born_host if either else None,
                cost_ms=a.cost_ms if a else None,
                status="NO RESULT" if a is None else "OK" if a.success else "FAILED",
                attempt=b.retry_times + 1 if b and b.retry_times is not None else None,
                result=consume_result(a.context_code) if a and a.context_code is not None else None,
                **time_fields("finished", a.timestamp_ms if a else None),
                request_id=request_id,
            )
        )
    return out


async def _by_unique_key(admin: Admin, topic: str, unique_key: str) -> StoredMessage | None:
    """The message of ``topic`` with client id ``unique_key`` (the first stored), from its brokers' index."""
    try:
        addrs = sorted(set((await readers_of_topic(admin, topic)).values()))
    except NotFoundError:
        return None
    for addr in addrs:
        found = await wire.query(
            admin, addr, topic, unique_key, begin_ms=0, end_ms=JAVA_LONG_MAX, max_num=32, unique_key=True
        )
        hits = sorted(
            (m for m in found if m.topic == topic and m.uniq_key == unique_key),
            key=lambda m: m.store_timestamp,
        )
        if hits:
            return hits[0]
    return None


async def _timeline(
    admin: Admin, carried: list[Carried], stored: StoredMessage | None, topic: str | None = None
) -> Timeline:
    """The message's summary (what the records and, when reachable, the stored message say) and its
    events in time order: produced, stored, transaction ended, each consume attempt."""
    records = [c.record for c in carried]
    pubs = [c for c in carried if c.record.type == "Pub"]
    offset_id = stored.msg_id if stored is not None else _first(records, "msg_id")
    names = await broker_names(admin)
    located = plausible_offset_id(offset_id) if stored is None and offset_id else None
    if located is not None and located[0] in names:  # trace data never sends us to an unknown address
        stored = await _view(admin, *located)
    traced_topic = topic or _first(records, "topic")
    if stored is None and traced_topic:
        # no Pub (a producer without trace), or its broker is gone (a DLedger leader since failed over, a
        # master moved): the index of the topic's brokers, those the NameServer routes it to
        stored = await _by_unique_key(admin, traced_topic, records[0].unique_key)
        offset_id = stored.msg_id if stored is not None else offset_id
    store_host = f"{stored.store_host[0]}:{stored.store_host[1]}" if stored else _first(records, "store_host")
    events = [
        _event(
            "produce",
            p.record.timestamp_ms,
            group=p.record.group,
            client_host=p.record.client_host or p.born_host,
            cost_ms=p.record.cost_ms,
            status="OK" if p.record.success else "FAILED",
            msg_type=p.record.msg_type,
        )
        for p in pubs
    ]
    if stored is not None:
        events.append(
            _event(
                "store",
                stored.store_timestamp,
                broker_name=names.get(store_host),
                store_host=store_host,
                queue_id=stored.queue_id,
                queue_offset=stored.queue_offset,
            )
        )
    events += [
        _event(
            "end_transaction",
            c.record.timestamp_ms,
            group=c.record.group,
            client_host=c.born_host,
            status=c.record.transaction_state,
            transaction_id=c.record.transaction_id,
            from_transaction_check=c.record.from_transaction_check,
        )
        for c in carried
        if c.record.type == "EndTransaction"
    ]
    events += _consumes(carried)
    events.sort(key=lambda e: e["time_ms"] or e["details"].get("finished_ms") or 0)
    unique_key = records[0].unique_key
    groups = sorted({e["group"] for e in events if e["event"] == "consume" and e["group"]})
    return {
        "unique_key": unique_key,
        "msg_id": offset_id,
        "topic": stored.topic if stored else _first(records, "topic"),
        "tags": stored.tags if stored else _first(records, "tags"),
        "keys": (" ".join(stored.keys) or None) if stored else _first(records, "keys"),
        "producer_group": _first([p.record for p in pubs], "group"),
        "broker_name": names.get(store_host) if store_host else None,
        "store_host": store_host,
        "queue_id": stored.queue_id if stored else None,
        "queue_offset": stored.queue_offset if stored else None,
        "transaction_state": _first(
            [r for r in records if r.type == "EndTransaction"][::-1], "transaction_state"
        ),
        "consumer_groups": groups,
        "events": events,
    }
