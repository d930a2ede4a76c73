"""Message requests to one broker, as typed async calls over an :class:`Admin` session.

Only RocketMQ 4.x request codes are used (SEND_MESSAGE_V2, PULL_MESSAGE, QUERY_MESSAGE,
VIEW_MESSAGE_BY_ID, GET_MAX/MIN_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP, QUERY_CONSUMER_OFFSET,
CONSUMER_SEND_MSG_BACK), so each call works against a real RocketMQ broker as well as ours.
Bodies that carry stored records are decoded with the store's record codec: the wire format of a
pulled or queried message is the CommitLog record itself.
"""

from __future__ import annotations

import itertools
import logging
import os
import socket
import struct
import time
from dataclasses import dataclass, field
from datetime import datetime

from daemon.broker.headers import (
    DAMAGED_FIELD,
    PULL_FLAG_SUBSCRIPTION,
    PULL_FLAG_SUSPEND,
    ConsumerSendMsgBackRequestHeader,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    QueryMessageRequestHeader,
    SendMessageRequestHeaderV2,
    SendMessageResponseHeader,
    ViewMessageRequestHeader,
)
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.errors import RemotingCommandError
from mqctl.admin.client import Admin, answer_header
from store import (
    AUTO_CREATE_TOPIC,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT_STORE_MSG_OK,
    TOOLS_CONSUMER_GROUP,
    CorruptRecordError,
    DamagedRecordError,
    StoredMessage,
    decode_record,
    decode_records,
    encode_properties,
    read_header,
)

log = logging.getLogger(__name__)

#: The producer group mqctl sends as (like mqadmin's tools groups, never a real application's).
PRODUCER_GROUP = "MQCTL_PRODUCER"


# ------------------------------------------------------------------------------------ UNIQ_KEY

_counter = itertools.count(int.from_bytes(os.urandom(2), "big"))
_UNIQ_TAIL = struct.Struct(">HiIH")


def _local_ip() -> bytes:
    try:
        return socket.inet_aton(socket.gethostbyname(socket.gethostname()))
    except OSError:
        return socket.inet_aton("127.0.0.1")


_IP = _local_ip()
_LOADER_HASH = int.from_bytes(os.urandom(4), "big") & 0x7FFFFFFF  # Java hashes its class loader here


#: [start, next start) of the local month the last key fell in, in ms (MessageClientIDSetter keeps both
#: too): a send's key then needs no calendar arithmetic.
_month = (0, 0)


def _month_start_ms(now_ms: int) -> int:
    global _month
    start, end = _month
    if not start <= now_ms < end:
        now = datetime.fromtimestamp(now_ms / 1000)
        first = datetime(now.year, now.month, 1)
        following = datetime(now.year + now.month // 12, now.month % 12 + 1, 1)
        start, end = int(first.timestamp() * 1000), int(following.timestamp() * 1000)
        _month = start, end
    return start


def new_uniq_key(now_ms: int | None = None) -> str:
    """A client message id as the Java client makes it (MessageClientIDSetter,
    docs/store-format.md §uniq_key): IP, pid, class-loader hash, milliseconds since the start of the month,
    counter."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    since = (now_ms - _month_start_ms(now_ms)) & 0xFFFFFFFF
    tail = _UNIQ_TAIL.pack(os.getpid() & 0xFFFF, _LOADER_HASH, since, next(_counter) & 0xFFFF)
    return (_IP + tail).hex().upper()


# ---------------------------------------------------------------------------------------- send


@dataclass
class SendResult:
    msg_id: str  # the client id (UNIQ_KEY), as the Java client's SendResult.msgId
    offset_msg_id: str
    queue_id: int
    queue_offset: int
    status: str


async def send(
    admin: Admin,
    addr: str,
    topic: str,
    body: bytes,
    *,
    queue_id: int,
    properties: dict[str, str],
    group: str = PRODUCER_GROUP,
    default_queue_nums: int = 4,
) -> SendResult:
    """SEND_MESSAGE_V2 (310) of one message to ``topic``/``queue_id`` on ``addr``.

    A ``UNIQ_KEY`` is added when ``properties`` has none, so the message can be found by its id.
    """
    props = dict(properties)
    props.setdefault(PROPERTY_UNIQ_KEY, new_uniq_key())
    props.setdefault(PROPERTY_WAIT_STORE_MSG_OK, "true")
    header = SendMessageRequestHeaderV2(
        group,
        topic,
        AUTO_CREATE_TOPIC,
        default_queue_nums,
        queue_id,
        0,
        int(time.time() * 1000),
        0,
        encode_properties(props).decode("utf-8"),
    )
    stored = (
        ResponseCode.SUCCESS,
        ResponseCode.FLUSH_DISK_TIMEOUT,
        ResponseCode.FLUSH_SLAVE_TIMEOUT,
        ResponseCode.SLAVE_NOT_AVAILABLE,
    )
    response = await admin.call(addr, RequestCode.SEND_MESSAGE_V2, header, body, expect=stored)
    reply = answer_header(SendMessageResponseHeader, response)
    status = "SEND_OK" if response.code == ResponseCode.SUCCESS else ResponseCode(response.code).name
    return SendResult(props[PROPERTY_UNIQ_KEY], reply.msg_id, reply.queue_id, reply.queue_offset, status)


async def send_back(
    admin: Admin,
    addr: str,
    *,
    group: str,
    phys_offset: int,
    delay_level: int,
    origin_msg_id: str | None = None,
    origin_topic: str | None = None,
    max_reconsume_times: int | None = None,
) -> None:
    """CONSUMER_SEND_MSG_BACK (36): hand a consumed message back for retry (``delay_level`` < 0: the DLQ)."""
    header = ConsumerSendMsgBackRequestHeader(
        phys_offset, group, delay_level, origin_msg_id, origin_topic, False, max_reconsume_times
    )
    await admin.call(addr, RequestCode.CONSUMER_SEND_MSG_BACK, header)


# ---------------------------------------------------------------------------------------- pull


@dataclass
class PullResult:
    found: bool
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[StoredMessage] = field(default_factory=list)
    body: bytes = b""
    """With ``decode=False``: the found records as the broker sent them, CommitLog records back to back."""


async def pull(
    admin: Admin,
    addr: str,
    topic: str,
    queue_id: int,
    offset: int,
    *,
    group: str = TOOLS_CONSUMER_GROUP,
    max_nums: int = 32,
    subscription: str = "*",
    suspend_ms: int = 0,
    decode: bool = True,
) -> PullResult:
    """PULL_MESSAGE (11) with the subscription in the request; never commits an offset.

    ``suspend_ms`` > 0 asks the broker to hold the request until a message arrives (long polling);
    the caller's timeout must then exceed it. ``decode=False`` leaves the records undecoded in
    ``body``, for decoders that take many records at once.
    """
    sys_flag = PULL_FLAG_SUBSCRIPTION | (PULL_FLAG_SUSPEND if suspend_ms > 0 else 0)
    header = PullMessageRequestHeader(
        group, topic, queue_id, offset, max_nums, sys_flag, 0, suspend_ms, 0, subscription, "TAG"
    )
    expect = (
        ResponseCode.SUCCESS,
        ResponseCode.PULL_NOT_FOUND,
        ResponseCode.PULL_RETRY_IMMEDIATELY,
        ResponseCode.PULL_OFFSET_MOVED,
    )
    response = await admin.call(addr, RequestCode.PULL_MESSAGE, header, expect=expect)
    reply = answer_header(PullMessageResponseHeader, response)
    found = response.code == ResponseCode.SUCCESS
    result = PullResult(found, reply.next_begin_offset, reply.min_offset, reply.max_offset)
    if found and decode:
        result.messages = decode_records(response.body)
    elif found:
        result.body = response.body
    return result


async def first_stored_at(
    admin: Admin, addr: str, topic: str, queue_id: int, at_ms: int, lo: int, hi: int
) -> int:
    """The first offset in ``lo..hi`` of a queue whose message was stored at or after ``at_ms`` (``hi``
    when none): SEARCH_OFFSET_BY_TIMESTAMP answers the nearest message, which may be the last one before
    it."""
    if lo >= hi:
        return hi
    found = min(max(await admin.search_offset(addr, topic, queue_id, at_ms), lo), hi)
    if found < hi:
        got = await pull(admin, addr, topic, queue_id, found, max_nums=1)
        if got.messages and got.messages[0].store_timestamp < at_ms:
            found += 1
    return found


# ------------------------------------------------------------------------------- query and view


async def query(
    admin: Admin,
    addr: str,
    topic: str,
    key: str,
    *,
    begin_ms: int,
    end_ms: int,
    max_num: int = 64,
    unique_key: bool = False,
    damaged: list[tuple[str, int]] | None = None,
) -> list[StoredMessage]:
    """QUERY_MESSAGE (12) through the broker's IndexFile; ``[]`` when the broker finds nothing.

    The index stores hashes only and the broker may return records of colliding keys, so callers
    verify the stored key (see :func:`mqctl.services.messages.query_by_key`). Each damaged record the
    lookup met (our broker names them in :data:`DAMAGED_FIELD`; a RocketMQ broker sends them as stored)
    is a warning line and, with ``damaged``, appended there as (broker, CommitLog offset).
    """
    response = await admin.call(
        addr,
        RequestCode.QUERY_MESSAGE,
        QueryMessageRequestHeader(topic, key, max_num, begin_ms, end_ms),
        expect=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND),
        extra={"_UNIQUE_KEY_QUERY": "true"} if unique_key else None,
    )
    for offset in filter(None, response.ext_fields.get(DAMAGED_FIELD, "").split(",")):
        log.warning(
            "%s: the index of %r led to a damaged record at CommitLog offset %s: set aside in a quarantine, "
            "never served (it may be a message sought)",
            addr,
            key,
            offset,
        )
        if damaged is not None:
            damaged.append((addr, int(offset)))
    if response.code != ResponseCode.SUCCESS:
        return []
    out = []
    pos = 0
    body = response.body
    while pos < len(body):  # as decode_records, but a RocketMQ broker's damaged record is skipped, named
        try:
            m = decode_record(body, pos)
        except CorruptRecordError as e:
            size, _magic = read_header(body, pos) if pos + 8 <= len(body) else (0, 0)
            phys = int.from_bytes(body[pos + 28 : pos + 36], "big") if pos + 36 <= len(body) else -1
            log.warning(
                "%s answered a damaged record (CommitLog offset %d): %s; skipped", addr, phys, e.reason
            )
            if damaged is not None:
                damaged.append((addr, phys))
            if size <= 0:
                break  # no next record to find
            pos += size
            continue
        out.append(m)
        pos += m.store_size
    return out


async def view_raw(admin: Admin, addr: str, phys_offset: int) -> bytes | None:
    """The stored bytes of the record VIEW_MESSAGE_BY_ID finds at a CommitLog offset; None when the broker
    has none there (SYSTEM_ERROR: past its end, inside or on a damaged record, expired)."""
    response = await admin.call(
        addr,
        RequestCode.VIEW_MESSAGE_BY_ID,
        ViewMessageRequestHeader(phys_offset),
        expect=(ResponseCode.SUCCESS, ResponseCode.SYSTEM_ERROR),
    )
    return response.body if response.code == ResponseCode.SUCCESS else None


async def view(admin: Admin, addr: str, phys_offset: int) -> StoredMessage:
    """VIEW_MESSAGE_BY_ID (33): the record at a CommitLog offset (the offset part of a msgId).

    A damaged record raises :class:`DamagedRecordError` (``path`` the broker's address): our broker answers
    SYSTEM_ERROR with :data:`DAMAGED_FIELD` (it set the record aside), a RocketMQ broker the record as
    stored, whose body CRC then fails here."""
    response = await admin.call(
        addr,
        RequestCode.VIEW_MESSAGE_BY_ID,
        ViewMessageRequestHeader(phys_offset),
        expect=(ResponseCode.SUCCESS, ResponseCode.SYSTEM_ERROR),
    )
    if response.code != ResponseCode.SUCCESS:
        if DAMAGED_FIELD in response.ext_fields:
            raise DamagedRecordError(addr, phys_offset, response.remark or "damaged", quarantined=True)
        raise RemotingCommandError(response.code, response.remark)
    try:
        return decode_record(response.body)
    except CorruptRecordError as e:  # a RocketMQ broker serves a record as it is stored
        raise DamagedRecordError(
            addr, phys_offset, f"the broker answered it damaged ({e.reason})", quarantined=False
        ) from None
