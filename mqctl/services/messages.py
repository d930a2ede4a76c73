"""Messages on a running cluster: send, query by key or id, show by queue offset, tail, resend from a DLQ.

Brokers are found through the NameServer's topic route (masters, as RocketMQ's clients write and
query; reads fall back to a slave while a group's master is down, with a WARNING on stderr); a
message id is decoded locally to find its broker. Services return plain data and never print;
streaming (``tail``) hands each message to a callback.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from daemon.remoting.bodies import PermName, TopicRouteData
from daemon.remoting.codes import ResponseCode
from daemon.remoting.errors import RemotingCommandError, RemotingConnectError, RemotingError
from mqctl.admin import messaging as wire
from mqctl.admin.client import Admin
from mqctl.errors import NotFoundError, UsageError
from mqctl.services.topics import readers_of_topic, route_masters, route_readers
from mqctl.timespec import iso, parse_time
from store.message import (
    DLQ_GROUP_TOPIC_PREFIX,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_KEYS,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TAGS,
    StoredMessage,
)
from store.record import decode_msg_id

log = logging.getLogger(__name__)

#: Properties the broker or the consumer path added; a re-sent message must not carry them.
BROKER_PROPERTIES = frozenset(
    {
        "CLUSTER",
        "WAIT",
        "DELAY",
        "REAL_TOPIC",
        "REAL_QID",
        "RETRY_TOPIC",
        "ORIGIN_MESSAGE_ID",
        "MIN_OFFSET",
        "MAX_OFFSET",
        "CONSUME_START_TIME",
        "TRAN_MSG",
        "PGROUP",
        "TRANSACTION_CHECK_TIMES",
        "MSG_REGION",
        "TRACE_ON",
    }
)

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
        begin = parse_time(since, now_ms=now) if since else 0
        end = parse_time(until, now_ms=now) if until else now
        if begin > end:
            raise UsageError(f"empty time window: --since {since} is after --until {until or 'now'}")
        return cls(begin, end)

    def describe(self) -> str:
        return f"{iso(self.begin_ms)} .. {iso(self.end_ms)}"


# -------------------------------------------------------------------------------- message views


def body_text(body: bytes) -> str:
    return body.decode("utf-8", errors="replace")


def summary(m: StoredMessage) -> dict[str, Any]:
    """One row per message in lists (query, tail, resend)."""
    return {
        "msg_id": m.msg_id,
        "uniq_key": m.uniq_key,
        "topic": m.topic,
        "queue_id": m.queue_id,
        "queue_offset": m.queue_offset,
        "tags": m.tags,
        "keys": " ".join(m.keys) or None,
        "store_time": iso(m.store_timestamp),
        "body_size": len(m.body),
    }


def detail(m: StoredMessage) -> dict[str, Any]:
    """Everything stored about one message, the body decoded as UTF-8."""
    return {
        **summary(m),
        "commit_log_offset": m.commit_log_offset,
        "store_size": m.store_size,
        "born_time": iso(m.born_timestamp),
        "born_host": f"{m.born_host[0]}:{m.born_host[1]}",
        "store_host": f"{m.store_host[0]}:{m.store_host[1]}",
        "reconsume_times": m.reconsume_times,
        "sys_flag": m.sys_flag,
        "body_crc": m.body_crc,
        "properties": dict(m.properties),
        "body": body_text(m.body),
    }


# ------------------------------------------------------------------------------------- routing


@dataclass(frozen=True)
class QueueRef:
    broker_name: str
    addr: str
    queue_id: int


def queues(route: TopicRouteData, *, write: bool) -> list[QueueRef]:
    """The readable (or writable) queues of a topic by broker name and id: writes go to masters, reads to
    the master or, while it is down, a slave (:func:`route_readers`)."""
    masters = route_masters(route) if write else route_readers(route)
    perm = PermName.WRITE if write else PermName.READ
    out: list[QueueRef] = []
    for q in sorted(route.queue_datas, key=lambda q: q.broker_name):
        addr = masters.get(q.broker_name)
        if addr is None or not q.perm & perm:
            continue
        count = q.write_queue_nums if write else q.read_queue_nums
        out.extend(QueueRef(q.broker_name, addr, i) for i in range(count))
    return out


def pick(refs: list[QueueRef], *, broker: str | None, queue: int | None, topic: str) -> list[QueueRef]:
    """Narrow queues to ``--broker`` (address or broker name) and ``--queue``."""
    out = [r for r in refs if broker is None or broker in (r.addr, r.broker_name)]
    if queue is not None:
        out = [r for r in out if r.queue_id == queue]
    if not out:
        where = f" on broker {broker}" if broker else ""
        what = f"queue {queue}" if queue is not None else "a queue"
        raise NotFoundError(f"topic {topic!r} has no {what}{where}")
    return out


# ---------------------------------------------------------------------------------------- send


@dataclass
class Sent:
    status: str
    msg_id: str
    offset_msg_id: str
    topic: str
    broker: str
    queue_id: int
    queue_offset: int
    delay_level: int


def message_properties(
    *, tags: str | None, keys: Iterable[str], properties: dict[str, str], delay_level: int
) -> dict[str, str]:
    props = dict(properties)
    if tags:
        props[PROPERTY_TAGS] = tags
    key_list = [k for k in keys if k]
    if key_list:
        props[PROPERTY_KEYS] = " ".join(key_list)
    if delay_level:
        props[PROPERTY_DELAY_TIME_LEVEL] = str(delay_level)
    return props


AUTO_CREATE_TOPIC = "TBW102"
DEFAULT_TOPIC_QUEUE_NUMS = 4  # DefaultMQProducer.defaultTopicQueueNums


async def writable_queues(admin: Admin, topic: str) -> list[QueueRef]:
    """Where a producer may send ``topic``: its own route, or TBW102's for a topic still to be auto-created."""
    try:
        return queues(await admin.topic_route(topic), write=True)
    except RemotingCommandError as exc:
        if exc.code != ResponseCode.TOPIC_NOT_EXIST:
            raise
    try:
        template = await admin.topic_route(AUTO_CREATE_TOPIC)
    except RemotingCommandError as exc:
        if exc.code == ResponseCode.TOPIC_NOT_EXIST:
            raise NotFoundError(
                f"topic {topic!r} does not exist and no broker auto-creates topics",
                hint=f"create it: mqctl topic create -t {topic}",
            ) from None
        raise
    return [ref for ref in queues(template, write=True) if ref.queue_id < DEFAULT_TOPIC_QUEUE_NUMS]


async def send_message(
    admin: Admin,
    topic: str,
    body: bytes,
    *,
    properties: dict[str, str],
    broker: str | None = None,
    queue: int | None = None,
) -> Sent:
    """Send one message to a writable queue of ``topic`` (random unless ``broker``/``queue`` are given).

    A topic the NameServer does not know goes, as with RocketMQ's producers, to the brokers that
    route TBW102: those with autoCreateTopicEnable create it on this first send.
    """
    refs = await writable_queues(admin, topic)
    ref = random.choice(pick(refs, broker=broker, queue=queue, topic=topic))
    result = await wire.send(admin, ref.addr, topic, body, queue_id=ref.queue_id, properties=properties)
    return Sent(
        result.status,
        result.msg_id,
        result.offset_msg_id,
        topic,
        ref.broker_name,
        result.queue_id,
        result.queue_offset,
        int(properties.get(PROPERTY_DELAY_TIME_LEVEL, "0")),
    )


# --------------------------------------------------------------------------------------- query


async def _query_masters(
    admin: Admin, topic: str, key: str, begin_ms: int, end_ms: int, max_num: int, *, unique_key: bool
) -> list[StoredMessage]:
    """QUERY_MESSAGE on every broker group of ``topic`` at once (its master, or a slave while it is down)."""
    addrs = sorted(set((await readers_of_topic(admin, topic)).values()))
    if not addrs:
        raise NotFoundError(f"topic {topic!r} has no broker online")
    found = await asyncio.gather(
        *(
            wire.query(
                admin,
                addr,
                topic,
                key,
                begin_ms=begin_ms,
                end_ms=end_ms,
                max_num=max_num,
                unique_key=unique_key,
            )
            for addr in addrs
        )
    )
    return [m for batch in found for m in batch if m.topic == topic]


async def query_by_key(
    admin: Admin, topic: str, key: str, window: Window, *, max_num: int = 64
) -> list[dict[str, Any]]:
    """Messages of ``topic`` with ``key`` in their KEYS, on every master, in store-time order.

    The IndexFile holds hashes only, so each hit is checked against the stored topic and keys.
    """
    found = await _query_masters(admin, topic, key, window.begin_ms, window.end_ms, max_num, unique_key=False)
    hits = [m for m in found if key in m.keys]
    if not hits:
        raise NotFoundError(f"no message with key {key!r} in topic {topic!r} stored {window.describe()}")
    return [summary(m) for m in sorted(hits, key=lambda m: (m.store_timestamp, m.msg_id))]


async def query_by_unique_key(admin: Admin, topic: str, uniq_key: str) -> list[dict[str, Any]]:
    """The message(s) of ``topic`` whose client id (UNIQ_KEY) is ``uniq_key``, over all time (as
    mqadmin's queryMsgByUniqueKey); a producer that re-sent after a timeout leaves two."""
    found = await _query_masters(admin, topic, uniq_key, 0, JAVA_LONG_MAX, 32, unique_key=True)
    hits = [m for m in found if m.uniq_key == uniq_key]
    if not hits:
        raise NotFoundError(f"no message with unique key {uniq_key!r} in topic {topic!r}")
    return [detail(m) for m in sorted(hits, key=lambda m: m.store_timestamp)]


def locate(msg_id: str) -> tuple[str, int]:
    """An offset msgId → (broker address, CommitLog offset), decoded locally (no NameServer)."""
    try:
        (ip, port), offset = decode_msg_id(msg_id.strip())
    except ValueError as exc:
        raise UsageError(f"{exc}; an offset message id is 32 (IPv4) or 56 (IPv6) hex digits") from exc
    host = f"[{ip}]" if ":" in ip else ip
    return f"{host}:{port}", offset


async def query_by_id(admin: Admin, msg_id: str) -> dict[str, Any]:
    """VIEW_MESSAGE_BY_ID at the broker the id names."""
    addr, offset = locate(msg_id)
    try:
        message = await wire.view(admin, addr, offset)
    except RemotingCommandError as exc:
        if exc.code == ResponseCode.SYSTEM_ERROR:  # what a 4.x broker answers for a bad offset
            raise NotFoundError(f"no message {msg_id} at {addr}: {exc.remark}") from exc
        raise
    except RemotingConnectError:
        found = await _view_on_slave(admin, addr, offset)
        if found is None:
            raise
        message = found
    return detail(message)


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
                log.warning("%s: the master is down; read from slave %d at %s", data.broker_name, slave_id, addr)
                return message
    return None


async def show(
    admin: Admin, topic: str, queue: int, offset: int, *, broker: str | None = None
) -> dict[str, Any]:
    """The message at ``offset`` of queue ``queue`` (pulled as the tools group, nothing committed)."""
    route = await admin.topic_route(topic)
    refs = pick(queues(route, write=False), broker=broker, queue=queue, topic=topic)
    if len(refs) > 1:
        names = ", ".join(f"{r.broker_name} ({r.addr})" for r in refs)
        raise UsageError(
            f"queue {queue} of {topic!r} exists on several brokers: {names}; choose one with --broker"
        )
    ref = refs[0]
    result = await wire.pull(admin, ref.addr, topic, queue, offset, max_nums=1)
    if not result.messages or result.messages[0].queue_offset != offset:
        raise NotFoundError(
            f"no message at offset {offset} of {topic!r} queue {queue} "
            f"(the queue holds offsets {result.min_offset}..{result.max_offset - 1})"
        )
    return detail(result.messages[0])


# ---------------------------------------------------------------------------------------- tail


async def _start_offset(admin: Admin, ref: QueueRef, topic: str, group: str | None, start: str) -> int:
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
    emit: Callable[[dict[str, Any]], None],
    *,
    group: str | None = None,
    start: str = "latest",
    subscription: str = "*",
    max_messages: int | None = None,
    exit_at_end: bool = False,
    hold_ms: int = 3000,
    on_start: Callable[[int], None] | None = None,
) -> int:
    """Stream messages of every readable queue to ``emit`` until ``max_messages`` or (``exit_at_end``)
    the end of every queue; returns how many were emitted.

    Starts at each queue's end (``latest``), its oldest message (``earliest``) or, with ``group``,
    at the group's committed offset. Reading never commits an offset. ``on_start`` is told the
    number of queues once every start offset is known (nothing sent after that is missed).
    """
    route = await admin.topic_route(topic)
    refs = queues(route, write=False)
    if not refs:
        raise NotFoundError(f"topic {topic!r} has no readable queue on a master broker")
    read_group = group or wire.TOOLS_GROUP
    offsets = {ref: await _start_offset(admin, ref, topic, group, start) for ref in refs}
    out: asyncio.Queue[StoredMessage | QueueRef] = asyncio.Queue(maxsize=256)
    suspend = 0 if exit_at_end else min(hold_ms, max(100, int(admin.timeout * 1000) - 1000))

    async def follow(ref: QueueRef) -> None:
        offset = offsets[ref]
        while True:
            result = await wire.pull(
                admin,
                ref.addr,
                topic,
                ref.queue_id,
                offset,
                group=read_group,
                max_nums=32,
                subscription=subscription,
                suspend_ms=suspend,
            )
            for m in result.messages:
                await out.put(m)
            if not result.found and result.next_begin_offset == offset and exit_at_end:
                await out.put(ref)  # this queue is drained
                return
            offset = result.next_begin_offset

    tasks = [asyncio.create_task(follow(ref)) for ref in refs]
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
            emit(summary(item) | {"body": body_text(item.body)})
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


async def dlq_messages(
    admin: Admin, group: str, ids: Iterable[str] = ()
) -> list[tuple[QueueRef, StoredMessage]]:
    """Messages in ``%DLQ%<group>``, optionally only those whose offset id or UNIQ_KEY is in ``ids``."""
    topic = DLQ_GROUP_TOPIC_PREFIX + group
    try:
        route = await admin.topic_route(topic)
    except RemotingCommandError as exc:
        if exc.code == ResponseCode.TOPIC_NOT_EXIST:
            raise NotFoundError(f"group {group!r} has no dead-letter queue ({topic})") from exc
        raise
    wanted = {i.upper() for i in ids}
    found: list[tuple[QueueRef, StoredMessage]] = []
    for ref in queues(route, write=False):
        for m in await _read_queue(admin, ref, topic):
            if not wanted or m.msg_id in wanted or (m.uniq_key or "").upper() in wanted:
                found.append((ref, m))
    missing = wanted - {m.msg_id for _, m in found} - {(m.uniq_key or "").upper() for _, m in found}
    if missing:
        raise NotFoundError(f"not in {topic}: {', '.join(sorted(missing))}")
    return found


@dataclass
class Resent:
    dlq_msg_id: str
    uniq_key: str | None
    to_topic: str | None
    outcome: str  # RESENT, FAILED or SKIPPED
    new_msg_id: str | None = None
    queue_id: int | None = None
    queue_offset: int | None = None
    error: str | None = None


async def resend_one(admin: Admin, m: StoredMessage, to_topic: str | None, rr: Iterable[int]) -> Resent:
    """Send a DLQ message again to its original topic (``RETRY_TOPIC``) or ``to_topic``, keeping its
    body, tags, keys, UNIQ_KEY and user properties; one failure does not stop the others."""
    target = to_topic or m.properties.get(PROPERTY_RETRY_TOPIC)
    if not target:
        return Resent(
            m.msg_id, m.uniq_key, None, "SKIPPED", error="no original topic (RETRY_TOPIC); use --to-topic"
        )
    props = {k: v for k, v in m.properties.items() if k not in BROKER_PROPERTIES}
    try:
        route = await admin.topic_route(target)
        refs = queues(route, write=True)
        if not refs:
            raise NotFoundError(f"topic {target!r} has no writable queue")
        ref = refs[next(iter(rr)) % len(refs)]
        result = await wire.send(admin, ref.addr, target, m.body, queue_id=ref.queue_id, properties=props)
    except (RemotingError, NotFoundError) as exc:
        return Resent(m.msg_id, m.uniq_key, target, "FAILED", error=str(exc))
    return Resent(
        m.msg_id, m.uniq_key, target, "RESENT", result.offset_msg_id, result.queue_id, result.queue_offset
    )


async def resend(
    admin: Admin,
    messages: list[StoredMessage],
    to_topic: str | None = None,
    *,
    progress: Callable[[int], None] | None = None,
) -> list[Resent]:
    """Re-send each message in turn (see :func:`resend_one`), spreading them over the target's queues."""
    rr = itertools.count(random.randrange(1 << 16))
    out = []
    for m in messages:
        out.append(await resend_one(admin, m, to_topic, rr))
        if progress is not None:
            progress(1)
    return out
