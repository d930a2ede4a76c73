"""Messages on a running cluster: send, query by key or id, show by queue offset, tail, resend from a DLQ.

Brokers are found through the NameServer's topic route (masters, as RocketMQ's clients write and
query; reads fall back to a slave while a group's master is down, with a WARNING on stderr); a
message id is decoded locally to find its broker. Services return plain data and never print;
streaming (``tail``) hands each message to a callback.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import random
import string
import time
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

from daemon.broker.bodies import MessageQueue
from daemon.remoting.bodies import PermName, TopicRouteData
from daemon.remoting.codes import ResponseCode
from daemon.remoting.errors import (
    RemotingCommandError,
    RemotingConnectError,
    RemotingError,
    RemotingTimeoutError,
)
from mqctl.admin import messaging as wire
from mqctl.admin.client import Admin, Refused
from mqctl.admin.member import GroupMember
from mqctl.errors import (
    AuthError,
    ConnectError,
    MqctlError,
    NotFoundError,
    NothingReadError,
    StoreError,
    UsageError,
    from_response_code,
)
from mqctl.output import Rows, json_text
from mqctl.services.fanout import each_broker, gather_limited
from mqctl.services.topics import (
    perm_text,
    readers_of_topic,
    route_masters,
    route_or_not_found,
    route_readers,
    topic_meant,
)
from mqctl.timespec import iso, parse_time
from mqctl.tracedata import trace_field
from mqctl.units import plural, server_int, time_fields, when
from store import (
    AUTO_CREATE_TOPIC,
    DLQ_GROUP_TOPIC_PREFIX,
    INTERNAL_TOPIC_PREFIX,
    MAX_HELD_QUEUE_NUMS,
    NAME_VALUE_SEPARATOR,
    PROPERTY_CLUSTER,
    PROPERTY_CONSUME_START_TIMESTAMP,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_KEYS,
    PROPERTY_MAX_OFFSET,
    PROPERTY_MIN_OFFSET,
    PROPERTY_MSG_REGION,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TRACE_SWITCH,
    PROPERTY_TRANSACTION_CHECK_TIMES,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_WAIT_STORE_MSG_OK,
    RESERVED_PROPERTIES,
    SCHEDULE_TOPIC,
    SYSTEM_TOPIC_PREFIX,
    TOOLS_CONSUMER_GROUP,
    DamagedRecordError,
    StoredMessage,
    decode_msg_id,
)

log = logging.getLogger(__name__)

#: Properties the broker or the consumer path added; a re-sent message must not carry them.
BROKER_PROPERTIES = frozenset(
    {
        PROPERTY_CLUSTER,
        PROPERTY_WAIT_STORE_MSG_OK,
        PROPERTY_DELAY_TIME_LEVEL,
        PROPERTY_REAL_TOPIC,
        PROPERTY_REAL_QUEUE_ID,
        PROPERTY_RETRY_TOPIC,
        PROPERTY_ORIGIN_MESSAGE_ID,
        PROPERTY_MIN_OFFSET,
        PROPERTY_MAX_OFFSET,
        PROPERTY_CONSUME_START_TIMESTAMP,
        PROPERTY_TRANSACTION_PREPARED,
        PROPERTY_PRODUCER_GROUP,
        PROPERTY_TRANSACTION_CHECK_TIMES,
        PROPERTY_MSG_REGION,
        PROPERTY_TRACE_SWITCH,
    }
)

#: Property names a producer may not set as user properties: Java's ``MessageConst.STRING_HASH_SET``
#: (``Message#putUserProperty`` throws for them, the 5.x proxy refuses them) and what the broker adds.
#: Set by hand they change what the broker does: ``TRAN_MSG=true`` parks the message as a half message.
SYSTEM_PROPERTIES = BROKER_PROPERTIES | RESERVED_PROPERTIES
#: The flag that sets a system property the way the broker expects it.
_PROPERTY_FLAGS = {
    PROPERTY_KEYS: "--key",
    PROPERTY_TAGS: "--tag",
    PROPERTY_DELAY_TIME_LEVEL: "--delay-level",
    PROPERTY_TIMER_DELIVER_MS: "--deliver-at",
    PROPERTY_TIMER_DELAY_SEC: "--delay",
    PROPERTY_TIMER_DELAY_MS: "--delay",
}

JAVA_LONG_MAX = (1 << 63) - 1

# ----------------------------------------------------------------------------------- time window


@dataclass
class Window:
    """The store-time range a key query searches, inclusive, in epoch ms."""

    begin_ms: int
    end_ms: int

    @classmethod
    def of(cls, since: str | None, until: str | None, *, now_ms: int | None = None) -> Window:
        """Default: from the beginning of time until now (mqadmin's queryMsgByKey does the same)."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        begin = parse_time(since, now_ms=now, flag="--since") if since else 0
        end = parse_time(until, now_ms=now, flag="--until") if until else now
        if begin > end:
            raise UsageError(f"empty time window: --since {since} is after --until {until or 'now'}")
        return cls(begin, end)

    def describe(self) -> str:
        return f"{iso(self.begin_ms)} .. {iso(self.end_ms)}"


# -------------------------------------------------------------------------------- message views


class BodyFields(TypedDict):
    """A message body as a record carries it: ``body_encoding`` (utf-8 or base64), then the text."""

    body_encoding: str
    body: str


class MessageIdentity(TypedDict):
    """What names a stored message and says where it is, in every record of one."""

    msg_id: str
    unique_key: str | None
    topic: str
    queue_id: int
    queue_offset: int
    tags: str | None
    keys: str | None


class MessageSummary(MessageIdentity):
    """One row per message in lists (query, tail, resend)."""

    store_time: str | None
    store_time_ms: int
    body_size: int


class MessageRow(MessageSummary):
    """A list row with its body (not for ``--no-body``) and, for a trace message, its records."""

    body_encoding: NotRequired[str]
    body: NotRequired[str]
    trace: NotRequired[list[dict[str, Any]]]
    trace_error: NotRequired[str]


class MessageDetail(MessageRow):
    """Everything stored about one message; ``found_by``, ``note`` and ``copy_of`` only from an id query."""

    commit_log_offset: int
    store_size: int
    born_time: str | None
    born_time_ms: int
    born_host: str
    store_host: str
    reconsume_times: int
    sys_flag: int
    body_crc: int
    properties: dict[str, str]
    note: NotRequired[str]
    copy_of: NotRequired[str]
    found_by: NotRequired[str]


class DeadLetter(MessageDetail):
    """A line of ``dlq export``: the dead letter, where it is and whether it was re-sent."""

    broker_name: str
    resent: bool


class DlqTopic(TypedDict):
    """A row of ``dlq ls``."""

    group: str
    topic: str
    queues: int
    messages: int
    resent: int


def host_text(host: tuple[str, int]) -> str:
    """A record's born or store host as ``ip:port``."""
    return f"{host[0]}:{host[1]}"


def body_fields(body: bytes) -> BodyFields:
    """The body as UTF-8 text when it decodes, else as base64, with ``body_encoding`` saying which:
    nothing is replaced or lost, and a script can always get the exact bytes back."""
    try:
        return {"body_encoding": "utf-8", "body": body.decode("utf-8")}
    except UnicodeDecodeError:
        import base64

        return {"body_encoding": "base64", "body": base64.b64encode(body).decode("ascii")}


def with_body(m: StoredMessage, row: MessageSummary, body: bool) -> MessageRow:
    """``row`` with the message body (see :func:`body_fields`), or as is for ``--no-body``; a trace
    message's records decoded (``trace``)."""
    if body:
        return {**row, **body_fields(m.body), **trace_field(m)}
    return {**row, **trace_field(m)}


def summary(m: StoredMessage) -> MessageSummary:
    """One row per message in lists (query, tail, resend)."""
    return {
        "msg_id": m.msg_id,
        "unique_key": m.uniq_key,
        "topic": m.topic,
        "queue_id": m.queue_id,
        "queue_offset": m.queue_offset,
        "tags": m.tags,
        "keys": " ".join(m.keys) or None,
        "store_time": when(m.store_timestamp),
        "store_time_ms": m.store_timestamp or 0,
        "body_size": len(m.body),
    }


def detail(m: StoredMessage, *, body: bool = True) -> MessageDetail:
    """Everything stored about one message, with its body (see :func:`body_fields`) unless ``body`` is
    False (``--no-body``)."""
    row: MessageDetail = {
        **summary(m),
        "commit_log_offset": m.commit_log_offset,
        "store_size": m.store_size,
        "born_time": when(m.born_timestamp),
        "born_time_ms": m.born_timestamp or 0,
        "born_host": host_text(m.born_host),
        "store_host": host_text(m.store_host),
        "reconsume_times": m.reconsume_times,
        "sys_flag": m.sys_flag,
        "body_crc": m.body_crc,
        "properties": dict(m.properties),
        **body_fields(m.body),
        **trace_field(m),
    }
    if not body:
        del row["body"], row["body_encoding"]
    return row


# ------------------------------------------------------------------------------------- routing


@dataclass(frozen=True)
class QueueRef:
    broker_name: str
    addr: str
    queue_id: int


def queues(route: TopicRouteData, *, write: bool, said: dict[str, str] | None = None) -> list[QueueRef]:
    """The readable (or writable) queues of a topic by broker name and id: writes go to masters, reads to
    the master or, while it is down, a slave (:func:`route_readers`, with ``said``)."""
    masters = route_masters(route) if write else route_readers(route, said=said)
    perm = PermName.WRITE if write else PermName.READ
    out: list[QueueRef] = []
    for q in sorted(route.queue_datas, key=lambda q: q.broker_name):
        addr = masters.get(q.broker_name)
        if addr is None or not q.perm & perm:
            continue
        # (a route from a broker that does not check counts may say billions: none holds more than this)
        count = min(q.write_queue_nums if write else q.read_queue_nums, MAX_HELD_QUEUE_NUMS)
        out.extend(QueueRef(q.broker_name, addr, i) for i in range(count))
    return out


def _refuse_masterless(route: TopicRouteData, topic: str) -> None:
    """A topic with no writable queue because its groups' masters are gone from the route (down, or a
    DLedger group electing one): a passing connection problem, not the topic's permission or queues."""
    masters = route_masters(route)
    headless = sorted(
        {q.broker_name for q in route.queue_datas if q.perm & PermName.WRITE and q.broker_name not in masters}
    )
    if headless:
        raise ConnectError(
            f"topic {topic!r}: no master of {', '.join(headless)} is registered (down, or its group is "
            "electing one); its slaves take no sends",
            hint="try again shortly; see 'mqctl broker ha status'",
        )


def _refuse_read_only(route: TopicRouteData, topic: str) -> None:
    """A topic whose every queue's permission takes no writes (perm r, or its brokers' write permission
    wiped): a refusal, as the broker's own to such a send (NO_PERMISSION), not a topic not found."""
    if route.queue_datas and not any(q.perm & PermName.WRITE for q in route.queue_datas):
        perms = ", ".join(sorted({f"{q.broker_name} {perm_text(q.perm)}" for q in route.queue_datas}))
        raise AuthError(
            f"topic {topic!r} takes no sends: its permission is read-only ({perms})",
            hint=f"mqctl topic update -t {topic} --perm rw; a broker whose write permission was wiped: "
            "mqctl broker add-write-perm BROKER",
        )


def pick(refs: list[QueueRef], *, broker: str | None, queue: int | None, topic: str) -> list[QueueRef]:
    """Narrow queues to ``--broker`` (address or broker name) and ``--queue``."""
    out = [r for r in refs if broker is None or broker in (r.addr, r.broker_name)]
    if queue is not None:
        out = [r for r in out if r.queue_id == queue]
    if not refs:
        raise NotFoundError(
            f"topic {topic!r} has no queue this can use: its permission or queue counts leave none "
            f"(see 'mqctl topic route -t {topic}')"
        )
    if not out:
        on = [r for r in refs if broker is None or broker in (r.addr, r.broker_name)]
        if not on:  # --broker names a broker that does not serve the topic: say which ones do
            serving = sorted({f"{r.broker_name} {r.addr}" for r in refs})
            raise NotFoundError(f"topic {topic!r} is not on broker {broker} (it is on: {', '.join(serving)})")
        where = f" on broker {broker}" if broker else ""
        ids = sorted({r.queue_id for r in on})
        raise NotFoundError(f"topic {topic!r} has no queue {queue}{where} (queues {ids[0]}..{ids[-1]})")
    return out


# ---------------------------------------------------------------------------------------- send


@dataclass
class Sent:
    """Where a sent message was stored: ``msg_id`` is the offset id (broker address and CommitLog offset,
    what ``msg query --id`` and every other command call msg_id), ``unique_key`` the client id
    (UNIQ_KEY, the Java client's ``SendResult.msgId``)."""

    status: str
    msg_id: str
    unique_key: str
    topic: str
    broker: str
    queue_id: int
    queue_offset: int
    delay_level: int
    auto_created: bool = False
    #: A timer message's delivery time (``TIMER_DELIVER_MS``); None and 0 for none.
    deliver_time: str | None = None
    deliver_time_ms: int = 0


def message_properties(
    *,
    tags: str | None,
    keys: Iterable[str],
    properties: dict[str, str],
    delay_level: int,
    deliver_ms: int | None = None,
) -> dict[str, str]:
    """A send's properties; ``deliver_ms`` makes it a timer message (5.x's ``TIMER_DELIVER_MS``).

    A user property with a system name is refused (UsageError), as RocketMQ's clients refuse it, and so
    is a separator byte of the properties' encoding (``\\x01``, ``\\x02``) in any name or value."""
    given = [("--tag", tags or ""), *(("--key", k) for k in keys)]
    given += [(f"--property {name}", f"{name}={value}") for name, value in properties.items()]
    for flag, text in given:
        if NAME_VALUE_SEPARATOR in text or PROPERTY_SEPARATOR in text:
            raise UsageError(
                f"{flag} holds a \\x01 or \\x02 byte: RocketMQ separates a message's properties with them"
            )
    if tags and "||" in tags:  # a subscription reads it as 'or': no tag filter could select the message
        raise UsageError(
            f"--tag {tags!r} holds '||': a message has one tag, and a subscription reads '||' as 'or'"
        )
    for name in properties:
        if name in SYSTEM_PROPERTIES:
            instead = _PROPERTY_FLAGS.get(name)
            raise UsageError(
                f"--property {name} is a system property, not a user one"
                + (f": use {instead}" if instead else " (RocketMQ's clients refuse it too)")
            )
    props = dict(properties)
    if deliver_ms is not None:
        props[PROPERTY_TIMER_DELIVER_MS] = str(deliver_ms)
    if tags:
        props[PROPERTY_TAGS] = tags
    key_list = [k for k in keys if k]
    if key_list:
        props[PROPERTY_KEYS] = " ".join(key_list)
    if delay_level:
        props[PROPERTY_DELAY_TIME_LEVEL] = str(delay_level)
    return props


DEFAULT_TOPIC_QUEUE_NUMS = 4  # DefaultMQProducer.defaultTopicQueueNums


async def writable_queues(admin: Admin, topic: str) -> list[QueueRef]:
    """Where a producer may send ``topic``: its own route, or TBW102's for a topic still to be auto-created."""
    return (await _send_queues(admin, topic, create=True))[0]


async def _send_queues(admin: Admin, topic: str, *, create: bool) -> tuple[list[QueueRef], bool]:
    """(where to send ``topic``, whether the first send will auto-create it): its own route, else (with
    ``create``) TBW102's, whose brokers create the topic on the first send as they do for RocketMQ's
    producers; without ``create`` a topic the NameServer does not route is NotFoundError."""
    try:
        route = await admin.topic_route(topic)
    except RemotingCommandError as exc:
        if exc.code != ResponseCode.TOPIC_NOT_EXIST:
            raise
    else:
        refs = queues(route, write=True)
        if not refs:
            _refuse_masterless(route, topic)
            _refuse_read_only(route, topic)
        return refs, False
    if not create:
        guess = await topic_meant(admin, topic)
        raise NotFoundError(
            f"topic {topic!r} does not exist",
            hint=f"{guess}create it (mqctl topic create -t {topic}) or drop --no-create",
        )
    try:
        template = await admin.topic_route(AUTO_CREATE_TOPIC)
    except RemotingCommandError as exc:
        if exc.code == ResponseCode.TOPIC_NOT_EXIST:
            guess = await topic_meant(admin, topic)
            raise NotFoundError(
                f"topic {topic!r} does not exist and no broker auto-creates topics",
                hint=f"{guess}create it: mqctl topic create -t {topic}",
            ) from None
        raise
    refs = [ref for ref in queues(template, write=True) if ref.queue_id < DEFAULT_TOPIC_QUEUE_NUMS]
    return refs, True


async def timer_limits(
    admin: Admin, topic: str, *, broker: str | None, queue: int | None, create: bool
) -> dict[str, int]:
    """timerMaxDelaySec (seconds) of each master a send of ``topic`` may go to, by broker name: those that
    answered GET_BROKER_CONFIG (a broker that does not decides on the wire)."""
    refs, _ = await _send_queues(admin, topic, create=create)
    targets = {r.broker_name: r.addr for r in pick(refs, broker=broker, queue=queue, topic=topic)}

    async def limit(addr: str) -> int | None:
        try:
            return server_int((await admin.broker_config(addr)).get("timerMaxDelaySec"), least=0)
        except (RemotingError, MqctlError):
            return None

    found = await asyncio.gather(*(limit(addr) for addr in targets.values()))
    return {name: sec for name, sec in zip(targets, found, strict=True) if sec is not None}


async def send_message(
    admin: Admin,
    topic: str,
    body: bytes,
    *,
    properties: dict[str, str],
    broker: str | None = None,
    queue: int | None = None,
    create: bool = True,
) -> Sent:
    """Send one message to a writable queue of ``topic`` (random unless ``broker``/``queue`` are given).

    A topic the NameServer does not know goes, as with RocketMQ's producers, to the brokers that
    route TBW102: those with autoCreateTopicEnable create it on this first send (``auto_created`` says
    so); without ``create`` such a topic is refused instead.
    """
    refs, auto_created = await _send_queues(admin, topic, create=create)
    ref = random.choice(pick(refs, broker=broker, queue=queue, topic=topic))
    try:
        result = await wire.send(admin, ref.addr, topic, body, queue_id=ref.queue_id, properties=properties)
    except Refused:
        raise
    except RemotingCommandError as exc:  # the line names the broker: with several groups it was a guess
        error = from_response_code(
            exc.code, exc.remark, action=f"broker {ref.broker_name} at {ref.addr} refused it"
        )
        if exc.code == ResponseCode.SERVICE_NOT_AVAILABLE:
            error.hint = (
                "the broker's log says which reason; a full disk shows in 'mqctl check disk', a role in "
                "'mqctl cluster list'"
            )
        raise error from None
    return Sent(
        result.status,
        result.offset_msg_id,
        result.msg_id,
        topic,
        ref.broker_name,
        result.queue_id,
        result.queue_offset,
        int(properties.get(PROPERTY_DELAY_TIME_LEVEL, "0")),
        auto_created,
        **time_fields("deliver_time", int(properties.get(PROPERTY_TIMER_DELIVER_MS, "0"))),
    )


# --------------------------------------------------------------------------------------- query


async def _query_masters(
    admin: Admin,
    topic: str,
    key: str,
    begin_ms: int,
    end_ms: int,
    max_num: int,
    *,
    unique_key: bool,
    damaged: list[tuple[str, int]] | None = None,
) -> list[StoredMessage]:
    """QUERY_MESSAGE on every broker group of ``topic`` at once (its master, or a slave while it is down):
    what the groups that answer hold, each one that does not (down, ACL denied) named
    (:func:`~mqctl.services.fanout.each_broker`); the damaged records met, each a warning line, go to
    ``damaged`` (see :func:`mqctl.admin.messaging.query`)."""
    addrs = sorted(set((await readers_of_topic(admin, topic)).values()))
    if not addrs:
        raise NotFoundError(f"topic {topic!r} has no broker online")
    found = await each_broker(
        admin,
        addrs,
        lambda addr: wire.query(
            admin,
            addr,
            topic,
            key,
            begin_ms=begin_ms,
            end_ms=end_ms,
            max_num=max_num,
            unique_key=unique_key,
            damaged=damaged,
        ),
    )
    return [m for batch in found.values() for m in batch if m.topic == topic]


def _damaged_only(what: str, damaged: list[tuple[str, int]]) -> StoreError:
    """Nothing intact found for ``what``, but the index led to damaged records: the error that says so."""
    where = ", ".join(f"{addr} at CommitLog offset {offset}" for addr, offset in damaged)
    return StoreError(
        f"no intact message {what}: the index led only to {plural(len(damaged), 'damaged record')}, never served: {where}",
        hint="mqctl check cluster lists the quarantines; mqctl store salvage reads them",
    )


async def query_by_key(
    admin: Admin, topic: str, key: str, window: Window, *, max_num: int = 64, body: bool = True
) -> list[MessageRow]:
    """Messages of ``topic`` with ``key`` in their KEYS, on every master, in store-time order.

    The IndexFile holds hashes only, so each hit is checked against the stored topic and keys.
    """
    damaged: list[tuple[str, int]] = []
    found = await _query_masters(
        admin, topic, key, window.begin_ms, window.end_ms, max_num, unique_key=False, damaged=damaged
    )
    hits = [m for m in found if key in m.keys]
    if not hits and damaged:
        raise _damaged_only(f"with key {key!r} in topic {topic!r}", damaged)
    if not hits:
        raise NotFoundError(f"no message with key {key!r} in topic {topic!r} stored {window.describe()}")
    return [with_body(m, summary(m), body) for m in sorted(hits, key=lambda m: (m.store_timestamp, m.msg_id))]


async def query_by_unique_key(
    admin: Admin, topic: str | None, uniq_key: str, *, body: bool = True
) -> MessageDetail:
    """The message of ``topic`` (else of any topic) whose client id (UNIQ_KEY) is ``uniq_key``, over all
    time, as mqadmin's queryMsgByUniqueKey: one record, as ``--id`` prints it (a producer's re-send
    leaves a second copy: the oldest is shown, the others logged)."""
    uniq_key = uniq_key.strip().upper()
    damaged: list[tuple[str, int]] = []
    hits = await _find_unique_key(admin, uniq_key, topic, damaged)
    where = f"topic {topic!r}" if topic else "any topic"
    if not hits and damaged:
        raise _damaged_only(f"with unique key {uniq_key!r} in {where}", damaged)
    if not hits:
        raise NotFoundError(f"no message with unique key {uniq_key!r} in {where}")
    return _oldest_copy(uniq_key, hits, body)


def _oldest_copy(uniq_key: str, copies: list[StoredMessage], body: bool) -> MessageDetail:
    """The first of a client id's stored ``copies`` as one record found by ``unique_key``; the others logged."""
    for other in copies[1:]:
        log.warning("client id %s is stored again as %s (a producer's re-send)", uniq_key, other.msg_id)
    return {"found_by": "unique_key", **detail(copies[0], body=body)}


#: A client id (UNIQ_KEY): 32 hex digits from a RocketMQ 4 client; 34 from the official gRPC clients
#: (rocketmq-clients' `MessageIdCodec`: version byte, MAC, pid, seconds since 2021, sequence), which no
#: offset id can be.
CLIENT_ID_LENGTHS = (32, 34)


def locate(msg_id: str) -> tuple[str, int]:
    """An offset msgId → (broker address, CommitLog offset), decoded locally (no NameServer)."""
    try:
        (ip, port), offset = decode_msg_id(msg_id.strip())
    except ValueError as exc:
        raise UsageError(f"{exc}; an offset message id is 32 (IPv4) or 56 (IPv6) hex digits") from exc
    host = f"[{ip}]" if ":" in ip else ip
    return f"{host}:{port}", offset


def plausible_offset_id(msg_id: str) -> tuple[str, int] | None:
    """(broker address, CommitLog offset) when ``msg_id`` decodes as an offset id naming a real port, else
    None. A client id (UNIQ_KEY) has the same 32 hex digits, but where an offset id holds the port it holds
    the producer's pid and class-loader hash: a number over 65535 (4.9.8's
    ``DefaultMQAdminExtImpl#viewMessage(topic, msgId)`` tells them apart the same way)."""
    try:
        (_ip, port), _offset = decode_msg_id(msg_id.strip())
    except ValueError:
        return None
    return locate(msg_id) if 0 < port <= 0xFFFF else None


async def _view(admin: Admin, msg_id: str, addr: str, offset: int) -> StoredMessage:
    """VIEW_MESSAGE_BY_ID at ``addr``, or at a slave of it while it is down."""
    try:
        return await wire.view(admin, addr, offset)
    except DamagedRecordError as exc:
        raise StoreError(
            f"message {msg_id} at {addr} is damaged in the broker's store: {exc.reason}",
            hint="mqctl check cluster lists the quarantines; mqctl store salvage reads them",
        ) from None
    except RemotingCommandError as exc:
        if exc.code == ResponseCode.SYSTEM_ERROR and not isinstance(exc, Refused):  # a 4.x bad offset
            raise NotFoundError(f"no message {msg_id} at {addr}: {exc.remark}") from exc
        raise
    except RemotingConnectError:
        found = await _view_on_slave(admin, addr, offset)
        if found is None:
            raise
        return found


#: Topics no client message is sent to: a client id is not searched there.
_NOT_MESSAGE_TOPICS = (INTERNAL_TOPIC_PREFIX, SYSTEM_TOPIC_PREFIX, AUTO_CREATE_TOPIC, SCHEDULE_TOPIC)


async def _find_unique_key(
    admin: Admin, uniq_key: str, topic: str | None, damaged: list[tuple[str, int]] | None = None
) -> list[StoredMessage]:
    """Every stored copy of the message whose client id is ``uniq_key``: in ``topic``, or in every topic
    the NameServer lists (a client id names no topic); damaged records met go to ``damaged``."""
    if topic is not None:
        names = [topic]
    else:
        names = sorted(t for t in await admin.topic_list() if not t.startswith(_NOT_MESSAGE_TOPICS))

    async def one(name: str) -> list[StoredMessage]:
        try:
            return await _query_masters(
                admin, name, uniq_key, 0, JAVA_LONG_MAX, 32, unique_key=True, damaged=damaged
            )
        except (RemotingError, NotFoundError, NothingReadError):
            if topic is not None:
                raise
            return []  # a topic without a route or broker: nothing of it to find

    found = await gather_limited((one(name) for name in names), 16)
    return sorted(
        (m for batch in found for m in batch if m.uniq_key == uniq_key), key=lambda m: m.store_timestamp
    )


async def salvaged_copy(admin: Admin, msg_id: str) -> str | None:
    """The msgId of the copy 'store salvage --resend' sent of the record ``msg_id`` (None: none was, or the
    NameServer cannot say: the id is then looked up as it is)."""
    with contextlib.suppress(RemotingError):
        return await admin.kv_get(SALVAGED_NAMESPACE, msg_id.strip().upper())
    return None


async def query_by_id(
    admin: Admin, msg_id: str, *, topic: str | None = None, body: bool = True
) -> MessageDetail:
    """The message ``msg_id`` names (either id kind, see :func:`_query_one_id`); for a record recovery set
    aside that 'store salvage --resend' sent again, its copy, saying so (the original offset may hold
    another message by now)."""
    copy = await salvaged_copy(admin, msg_id)
    if copy is not None and copy != msg_id.strip().upper():
        row = await _query_one_id(admin, copy, topic=None, body=body)  # the copy may be in another topic
        return {
            "note": f"{msg_id} was set aside by recovery; 'store salvage --resend' sent it again as {copy}: "
            "this is that copy",
            "copy_of": msg_id,
            **row,
        }
    return await _query_one_id(admin, msg_id, topic=topic, body=body)


def check_message_id(msg_id: str) -> None:
    """UsageError (exit 2) for what is neither id's form, before any request: ``msg trace ZZ`` said the
    trace topic was missing (exit 3) where ``msg query --id`` said the id was bad."""
    msg_id = msg_id.strip()
    if plausible_offset_id(msg_id) is not None:
        return
    if len(msg_id) not in CLIENT_ID_LENGTHS or not all(c in string.hexdigits for c in msg_id):
        # (it named the offset id's lengths alone, where either id is taken)
        raise UsageError(
            f"not a message id: {msg_id!r}; an offset id (msg_id) is 32 hex digits (56 from an IPv6 broker), "
            "a client id (unique_key) 32 (34 from a 5.x client)"
        )


async def _query_one_id(admin: Admin, msg_id: str, *, topic: str | None, body: bool) -> MessageDetail:
    """The message ``msg_id`` names, whichever id it is, with ``found_by`` saying which.

    As mqadmin's queryMsgById: an id that decodes to a real broker address is an offset id (msg_id) and is
    read there with VIEW_MESSAGE_BY_ID; otherwise, or when that broker has no such message or cannot be
    reached, it is a client id (unique_key, the id ``msg send`` and the Java client print), looked up in
    ``topic``'s index or every topic's. A client id stored twice (a producer's re-send) gives the oldest
    copy; the others are logged.
    """
    msg_id = msg_id.strip()
    located = plausible_offset_id(msg_id)
    failure: Exception | None = None
    if located is not None:
        try:
            return {"found_by": "msg_id", **detail(await _view(admin, msg_id, *located), body=body)}
        except (NotFoundError, RemotingConnectError) as exc:
            failure = exc
    else:
        check_message_id(msg_id)
    damaged: list[tuple[str, int]] = []
    copies = await _find_unique_key(admin, msg_id.upper(), topic, damaged)
    if not copies:
        if isinstance(failure, RemotingConnectError) and located is not None:
            raise ConnectError(
                f"{msg_id} is an offset id, which holds the address of the broker that stored the message: "
                f"{located[0]}, and it does not answer ({failure})",
                hint="for a broker since moved or gone, --id takes the client id (unique_key) too",
            ) from None
        if failure is not None:
            raise failure
        if damaged:
            raise _damaged_only(f"with id {msg_id}", damaged)
        where = f"topic {topic!r}" if topic else "any topic"
        raise NotFoundError(f"no message with id {msg_id}: not an offset id, and no client id in {where}")
    return _oldest_copy(msg_id, copies, body)


async def _view_on_slave(admin: Admin, master: str, offset: int) -> StoredMessage | None:
    """The record at ``offset`` on a slave of the (unreachable) ``master``: the slaves of every group
    without a master are asked, and the one whose record was stored by ``master`` answers."""
    info = await admin.cluster_info()
    for data in info.broker_addr_table.values():
        if data.master_addr() is not None:
            continue
        for slave_id, addr in sorted(data.broker_addrs.items()):
            try:
                message = await wire.view(admin, addr, offset)
            except RemotingError:
                continue
            host, port = message.store_host
            if f"{host}:{port}" == master:
                log.warning(
                    "%s: the master is down; read from slave %d at %s", data.broker_name, slave_id, addr
                )
                return message
    return None


async def show(
    admin: Admin, topic: str, queue: int, offset: int, *, broker: str | None = None, body: bool = True
) -> MessageDetail:
    """The message at ``offset`` of queue ``queue`` (pulled as the tools group, nothing committed)."""
    route = await route_or_not_found(admin, topic)
    refs = pick(queues(route, write=False), broker=broker, queue=queue, topic=topic)
    if len(refs) > 1:
        names = ", ".join(f"{r.broker_name} ({r.addr})" for r in refs)
        raise UsageError(
            f"queue {queue} of {topic!r} exists on several brokers: {names}; choose one with --broker"
        )
    ref = refs[0]
    result = await wire.pull(admin, ref.addr, topic, queue, offset, max_nums=1)
    if not result.messages or result.messages[0].queue_offset != offset:
        held = (
            "the queue is empty"
            if result.max_offset <= result.min_offset
            else f"the queue holds offsets {result.min_offset}..{result.max_offset - 1}"
        )
        raise NotFoundError(f"no message at offset {offset} of {topic!r} queue {queue} ({held})")
    return detail(result.messages[0], body=body)


# ---------------------------------------------------------------------------------------- tail

#: How often ``tail`` asks the route again: a reader that moved with the route is followed within it (the
#: Java client asks every 30 s, and reads on from a deposed master until that one fails).
ROUTE_REFRESH_S = 2.0


async def _start_offset(
    admin: Admin, ref: QueueRef, topic: str, group: str | None, start: str, since_ms: int | None
) -> int:
    if since_ms is not None:
        lo = await admin.min_offset(ref.addr, topic, ref.queue_id)
        hi = await admin.max_offset(ref.addr, topic, ref.queue_id)
        return await wire.first_stored_at(admin, ref.addr, topic, ref.queue_id, since_ms, lo, hi)
    if group is not None:
        committed = await admin.consumer_offset(ref.addr, group, topic, ref.queue_id)
        if committed is not None and committed >= 0:
            return committed
    if start == "earliest":
        return await admin.min_offset(ref.addr, topic, ref.queue_id)
    return await admin.max_offset(ref.addr, topic, ref.queue_id)


async def tail(
    admin: Admin,
    topic: str,
    emit: Callable[[MessageRow], None],
    *,
    group: str | None = None,
    start: str = "latest",
    subscription: str = "*",
    max_messages: int | None = None,
    exit_at_end: bool = False,
    since_ms: int | None = None,
    until_ms: int | None = None,
    hold_ms: int = 3000,
    on_start: Callable[[int], None] | None = None,
) -> int:
    """Stream messages of every readable queue to ``emit`` until ``max_messages`` or (``exit_at_end``)
    the end of every queue; returns how many were emitted.

    Starts at each queue's end (``latest``), its oldest message (``earliest``) or, with ``group``,
    at the group's committed offset, or (``since_ms``) at its first message stored at or after that
    time. With ``until_ms`` a queue ends at its first message stored after that time, or at its end
    (as ``exit_at_end``). Reading never commits an offset. ``on_start`` is told the
    number of queues once every start offset is known (nothing sent after that is missed).

    With ``group`` it reads as a live member of the group (see :class:`GroupMember`): ``group
    connections`` lists it, and an offset reset of the group moves where it reads (the reset's offsets
    are committed, as any member does; its own positions never are).
    """
    route = await route_or_not_found(admin, topic)
    said: dict[str, str] = {}  # the slaves read from while their master is down: said once per broker
    refs = queues(route, write=False, said=said)
    if not refs:
        raise NotFoundError(f"topic {topic!r} has no readable queue on a master broker")
    read_group = group or TOOLS_CONSUMER_GROUP
    first = "CONSUME_FROM_LAST_OFFSET" if start == "latest" else "CONSUME_FROM_FIRST_OFFSET"
    member = (
        GroupMember(
            admin,
            group,
            topic,
            {ref.broker_name: ref.addr for ref in refs},
            consume_from_where=first,
            commit_on_exit=False,
        )
        if group is not None
        else None
    )
    positions = member.offsets if member is not None else {}
    for ref in refs:
        positions[_mq(topic, ref)] = await _start_offset(admin, ref, topic, group, start, since_ms)
    exit_at_end = exit_at_end or until_ms is not None
    out: asyncio.Queue[StoredMessage | QueueRef] = asyncio.Queue(maxsize=256)
    suspend = 0 if exit_at_end else min(hold_ms, max(100, int(admin.timeout * 1000) - 1000))

    lost: set[str] = set()  # brokers whose reader stopped answering: said once per outage, not per queue
    readers = {ref.broker_name: ref.addr for ref in refs}  # where each broker's queues are read now
    pulling: dict[MessageQueue, str] = {}  # a queue's pull under way, and where it was sent
    rerouted: set[MessageQueue] = set()  # pulls the route watch abandoned: sent again to the new reader
    order = {_mq(topic, ref): i for i, ref in enumerate(refs)}
    followers: list[asyncio.Task[None]] = []  # each queue's, in the order of ``refs``

    async def follow(ref: QueueRef) -> None:
        mq = _mq(topic, ref)
        name = ref.broker_name
        while True:
            offset = positions[mq]
            addr = pulling[mq] = readers[name]
            failed: RemotingError | None = None
            try:
                result = await wire.pull(
                    admin,
                    addr,
                    topic,
                    ref.queue_id,
                    offset,
                    group=read_group,
                    max_nums=32,
                    subscription=subscription,
                    suspend_ms=suspend,
                )
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if mq not in rerouted or task is None:
                    raise
                rerouted.discard(mq)  # the route moved: what this pull brought is asked of the new reader
                if task.uncancel():  # the tail itself is stopping too
                    raise
                continue
            except (RemotingConnectError, RemotingTimeoutError) as exc:
                if exit_at_end:  # a read to the end: the queue's end is not known, so fail
                    raise
                failed = exc
            except RemotingCommandError as exc:
                # a slave read while its master is down knows a topic younger than its last metadata sync
                # only once it dispatched the topic's entries (a DLedger follower: once they commit, which
                # a leader killed right after the send leaves to the next one's election): waited out
                if exc.code != ResponseCode.TOPIC_NOT_EXIST or said.get(name) != addr or exit_at_end:
                    raise
                failed = RemotingError(f"the slave at {addr} does not know the topic yet (code {exc.code})")
            finally:
                pulling.pop(mq, None)  # before any wait: the route watch cancels only a pull under way
            if failed is not None:
                if readers[name] == addr:  # not already moved by the route watch or another queue
                    readers[name] = await _reader_again(admin, topic, name, addr, failed, lost, said)
                continue
            if name in lost:
                lost.discard(name)
                log.warning("%s: reading again, from %s", name, addr)
            for m in result.messages:
                if until_ms is not None and m.store_timestamp > until_ms:
                    await out.put(ref)  # this queue is past the window
                    return
                await out.put(m)
            if not result.found and result.next_begin_offset == offset and exit_at_end:
                await out.put(ref)  # this queue is drained
                return
            if member is not None:
                member.advance(mq, offset, result.next_begin_offset)  # unless a reset moved it
            else:
                positions[mq] = result.next_begin_offset

    async def watch_route() -> None:
        """The route asked again every :data:`ROUTE_REFRESH_S`: a broker group whose reader moved (a
        leadership transfer, a master back) is read from the new one at once, each queue from its
        position, and a pull held by the old one is abandoned (what it would bring is asked again)."""
        while True:
            await asyncio.sleep(ROUTE_REFRESH_S)
            try:
                now = await readers_of_topic(admin, topic, quiet=True, said=said)
            except (RemotingError, NotFoundError):
                continue  # the NameServer is away: the pulls' own errors move them if need be
            for name, addr in now.items():
                old = readers.get(name)
                if old is None or old == addr:
                    continue
                log.warning("%s: the route moved its reads from %s to %s; reading on there", name, old, addr)
                readers[name] = addr
                for mq, sent_to in list(pulling.items()):
                    if mq.broker_name == name and sent_to != addr and mq not in rerouted:
                        rerouted.add(mq)
                        followers[order[mq]].cancel()

    async with contextlib.AsyncExitStack() as stack:
        if member is not None:
            await stack.enter_async_context(member)  # on exit: leaves the group, commits nothing
        watcher = asyncio.create_task(watch_route())
        try:
            return await _stream(refs, follow, out, emit, max_messages, on_start, followers)
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher


async def _reader_again(
    admin: Admin,
    topic: str,
    broker_name: str,
    gone: str,
    why: Exception,
    lost: set[str],
    said: dict[str, str],
) -> str:
    """Where to read ``broker_name``'s queues now that ``gone`` stopped answering (killed, a failover): the
    route's master, else a slave, asked again each second; a tail waits out the outage, as kcat does."""
    if broker_name not in lost:
        lost.add(broker_name)
        log.warning("%s: %s; reading on once the route names a broker to read from", broker_name, why)
    await asyncio.sleep(1.0)
    with contextlib.suppress(RemotingError, NotFoundError):
        return (await readers_of_topic(admin, topic, said=said)).get(broker_name, gone)
    return gone


def _mq(topic: str, ref: QueueRef) -> MessageQueue:
    return MessageQueue(topic, ref.broker_name, ref.queue_id)


async def _stream(
    refs: list[QueueRef],
    follow: Callable[[QueueRef], Coroutine[Any, Any, None]],
    out: asyncio.Queue[StoredMessage | QueueRef],
    emit: Callable[[MessageRow], None],
    max_messages: int | None,
    on_start: Callable[[int], None] | None,
    followers: list[asyncio.Task[None]],
) -> int:
    """Run ``follow`` on every queue (its task in ``followers``) and emit what it queues, until
    ``max_messages`` or every queue is drained."""
    tasks = [asyncio.create_task(follow(ref)) for ref in refs]
    followers.extend(tasks)
    if on_start is not None:
        on_start(len(refs))
    emitted = 0
    drained = 0
    try:
        while max_messages is None or emitted < max_messages:
            getter = asyncio.ensure_future(out.get())
            running = [t for t in tasks if not t.done()]
            done, _ = await asyncio.wait([getter, *running], return_when=asyncio.FIRST_COMPLETED)
            for task in done - {getter}:
                task.result()  # a pull failed: raise it (a drained queue's task ends quietly)
            if getter not in done:
                getter.cancel()  # an item not yet taken stays in the queue
                continue
            item = getter.result()
            if isinstance(item, QueueRef):
                drained += 1
                if drained == len(refs) and out.empty():
                    break
                continue
            emit({**summary(item), **body_fields(item.body)})
            emitted += 1
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return emitted


# -------------------------------------------------------------------------------------- resend


async def _read_queue(admin: Admin, ref: QueueRef, topic: str) -> list[StoredMessage]:
    offset = await admin.min_offset(ref.addr, topic, ref.queue_id)
    out: list[StoredMessage] = []
    while True:
        result = await wire.pull(admin, ref.addr, topic, ref.queue_id, offset, max_nums=32)
        out.extend(result.messages)
        if not result.found or result.next_begin_offset <= offset:
            return out
        offset = result.next_begin_offset


@dataclass(frozen=True)
class DlqFilter:
    """Which dead letters a resend considers: ids (offset id or UNIQ_KEY, upper case), a store-time
    window, tag, key."""

    ids: frozenset[str] = frozenset()
    window: Window | None = None
    tag: str | None = None
    key: str | None = None

    def matches(self, m: StoredMessage) -> bool:
        if self.ids and m.msg_id not in self.ids and (m.uniq_key or "").upper() not in self.ids:
            return False
        if self.window and not self.window.begin_ms <= m.store_timestamp <= self.window.end_ms:
            return False
        if self.tag is not None and m.tags != self.tag:
            return False
        return self.key is None or self.key in m.keys


async def dlq_messages(
    admin: Admin, group: str, only: DlqFilter = DlqFilter()
) -> list[tuple[QueueRef, StoredMessage]]:
    """Messages in ``%DLQ%<group>`` that pass ``only``; an id asked for and not found is NotFoundError."""
    topic = DLQ_GROUP_TOPIC_PREFIX + group
    try:
        route = await admin.topic_route(topic)
    except RemotingCommandError as exc:
        if exc.code == ResponseCode.TOPIC_NOT_EXIST:
            raise NotFoundError(f"group {group!r} has no dead-letter queue ({topic})") from exc
        raise
    found: list[tuple[QueueRef, StoredMessage]] = []
    for ref in queues(route, write=False):
        for m in await _read_queue(admin, ref, topic):
            if only.matches(m):
                found.append((ref, m))
    missing = only.ids - {m.msg_id for _, m in found} - {(m.uniq_key or "").upper() for _, m in found}
    if missing:
        raise NotFoundError(f"not in {topic}: {', '.join(sorted(missing))}")
    return found


async def dlq_topics(admin: Admin) -> list[DlqTopic]:
    """Every ``%DLQ%<group>`` topic the NameServer routes: its group, the dead letters it holds (max minus
    min offset over its queues, read from a slave where a master is down) and how many the group's
    record says were re-sent."""
    from mqctl.services.topics import queue_offsets

    rows = Rows.of(DlqTopic)
    for topic in sorted(t for t in await admin.topic_list() if t.startswith(DLQ_GROUP_TOPIC_PREFIX)):
        group = topic[len(DLQ_GROUP_TOPIC_PREFIX) :]
        offsets = await queue_offsets(admin, topic, reads=True)
        rows.append(
            {
                "group": group,
                "topic": topic,
                "queues": len(offsets),
                "messages": sum(off.max_offset - off.min_offset for *_, off in offsets),
                "resent": len(await resent_record(admin, group)),
            }
        )
    return rows


async def dlq_export(admin: Admin, group: str, only: DlqFilter, write: Callable[[str], object]) -> int:
    """Write each dead letter of ``group`` that passes ``only`` as one JSON line: everything stored about
    it with its body (:func:`detail`), and whether it was re-sent. Returns how many."""
    done = await resent_record(admin, group)
    found = await dlq_messages(admin, group, only)
    for ref, m in found:
        resent = (ref.broker_name, ref.queue_id, m.queue_offset) in done
        row: DeadLetter = {**detail(m), "broker_name": ref.broker_name, "resent": resent}
        write(json_text(row) + "\n")
    return len(found)


#: NameServer KV namespace of the per-group record of re-sent dead letters (shared by every mqctl).
RESENT_NAMESPACE = "MQCTL_DLQ_RESENT"
#: Property on a re-sent copy: the offset id of the dead letter it came from.
PROPERTY_RESENT_FROM = "MQCTL_DLQ_MSG_ID"
#: NameServer KV namespace of the records 'store salvage --resend' sent again: original msgId -> the copy's.
SALVAGED_NAMESPACE = "MQCTL_SALVAGE_RESENT"
#: Property on a salvaged record's copy: the original record's offset msgId.
PROPERTY_SALVAGED_FROM = "MQCTL_SALVAGED_MSG_ID"


def _ranges(offsets: Iterable[int]) -> list[list[int]]:
    out: list[list[int]] = []
    for offset in sorted(set(offsets)):
        if out and out[-1][1] + 1 == offset:
            out[-1][1] = offset
        else:
            out.append([offset, offset])
    return out


async def resent_record(admin: Admin, group: str) -> set[tuple[str, int, int]]:
    """(broker name, queue id, queue offset) of every dead letter of ``group`` already re-sent."""
    raw = await admin.kv_get(RESENT_NAMESPACE, group)
    try:
        table = json.loads(raw) if raw else {}
        return {
            (where.rsplit("/", 1)[0], int(where.rsplit("/", 1)[1]), offset)
            for where, spans in table.items()
            for lo, hi in spans
            for offset in range(int(lo), int(hi) + 1)
        }
    except (ValueError, TypeError, IndexError) as exc:
        raise UsageError(f"the record of re-sent dead letters of {group!r} is unreadable: {exc}") from None


async def record_resent(admin: Admin, group: str, done: set[tuple[str, int, int]]) -> None:
    """Save the record as offset ranges per broker/queue: a few bytes for a contiguous resend."""
    per_queue: dict[str, list[int]] = {}
    for broker_name, queue_id, offset in done:
        per_queue.setdefault(f"{broker_name}/{queue_id}", []).append(offset)
    table = {where: _ranges(offsets) for where, offsets in sorted(per_queue.items())}
    await admin.kv_put(RESENT_NAMESPACE, group, json.dumps(table, separators=(",", ":")))


@dataclass
class Resent:
    dlq_msg_id: str
    unique_key: str | None
    to_topic: str | None
    outcome: str  # WOULD RESEND, ALREADY RESENT (previews and runs); RESENT, FAILED, SKIPPED (runs)
    new_msg_id: str | None = None
    queue_id: int | None = None
    queue_offset: int | None = None
    error: str | None = None


async def resend_one(
    admin: Admin,
    m: StoredMessage,
    to_topic: str | None,
    rr: Iterable[int],
    routes: dict[str, list[QueueRef]] | None = None,
    *,
    mark: str = PROPERTY_RESENT_FROM,
) -> Resent:
    """Send a DLQ message again to its original topic (``RETRY_TOPIC``) or ``to_topic``, keeping its
    body, tags, keys, UNIQ_KEY and user properties, marked with its id in property ``mark``; one failure
    does not stop the others. ``routes`` caches each topic's writable queues over a run."""
    target = to_topic or m.properties.get(PROPERTY_RETRY_TOPIC)
    if not target:
        return Resent(
            m.msg_id, m.uniq_key, None, "SKIPPED", error="no original topic (RETRY_TOPIC); use --to-topic"
        )
    props = {k: v for k, v in m.properties.items() if k not in BROKER_PROPERTIES}
    props[mark] = m.msg_id
    try:
        refs = routes.get(target) if routes is not None else None
        if refs is None:
            refs = queues(await admin.topic_route(target), write=True)
            if routes is not None:
                routes[target] = refs
        if not refs:
            raise NotFoundError(f"topic {target!r} has no writable queue")
        ref = refs[next(iter(rr)) % len(refs)]
        result = await wire.send(admin, ref.addr, target, m.body, queue_id=ref.queue_id, properties=props)
    except (RemotingError, NotFoundError) as exc:
        return Resent(m.msg_id, m.uniq_key, target, "FAILED", error=str(exc))
    return Resent(
        m.msg_id, m.uniq_key, target, "RESENT", result.offset_msg_id, result.queue_id, result.queue_offset
    )


#: Dead letters re-sent at once: their sends are in flight together and recorded together.
RESEND_WINDOW = 128


async def resend(
    admin: Admin,
    group: str,
    found: list[tuple[QueueRef, StoredMessage]],
    to_topic: str | None = None,
    *,
    execute: bool,
    progress: Callable[[int], None] | None = None,
    into: list[Resent] | None = None,
) -> list[Resent]:
    """Preview (``execute`` False) or re-send the dead letters ``found`` (see :func:`resend_one`),
    skipping those the group's record says were re-sent before and recording each one re-sent now,
    so that a second run does not send them twice.

    Each outcome is appended to ``into`` (the returned list) as it comes, so an interrupted run still
    has its report. Ctrl-C lets the send in flight finish and be recorded before the run stops: a
    message the broker stored is never left out of the record (a next run would send it again)."""
    done = await resent_record(admin, group)
    rr = itertools.count(random.randrange(1 << 16))
    routes: dict[str, list[QueueRef]] = {}
    out = into if into is not None else []

    async def send_window(window: list[tuple[tuple[str, int, int], StoredMessage]]) -> list[Resent]:
        for target in {to_topic or m.properties.get(PROPERTY_RETRY_TOPIC) for _, m in window} - {
            None,
            *routes,
        }:
            with contextlib.suppress(RemotingError):  # resend_one reports it per message
                routes[str(target)] = queues(await admin.topic_route(str(target)), write=True)
        outcomes = await asyncio.gather(*(resend_one(admin, m, to_topic, rr, routes) for _, m in window))
        sent = {where for (where, _), o in zip(window, outcomes, strict=True) if o.outcome == "RESENT"}
        if sent:
            done.update(sent)
            await record_resent(admin, group, done)  # after each window: an interrupted run stays exact
        return outcomes

    window: list[tuple[tuple[str, int, int], StoredMessage]] = []
    for index, (ref, m) in enumerate(found):
        where = (ref.broker_name, ref.queue_id, m.queue_offset)
        target = to_topic or m.properties.get(PROPERTY_RETRY_TOPIC)
        if where in done:
            out.append(Resent(m.msg_id, m.uniq_key, target, "ALREADY RESENT"))
        elif not execute:
            out.append(
                Resent(
                    m.msg_id,
                    m.uniq_key,
                    target,
                    "WOULD RESEND" if target else "SKIPPED",
                    error=None if target else "no original topic (RETRY_TOPIC); use --to-topic",
                )
            )
        else:
            window.append((where, m))
        if progress is not None and (not window or window[-1][1] is not m):
            progress(1)
        if window and (len(window) == RESEND_WINDOW or index == len(found) - 1):
            step = asyncio.ensure_future(send_window(window))
            try:
                out.extend(await asyncio.shield(step))
            except asyncio.CancelledError:  # Ctrl-C: this window completes and is recorded, then we stop
                out.extend(await step)
                raise
            if progress is not None:
                progress(len(window))
            window = []
    return out
