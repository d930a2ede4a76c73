"""Pure conversions between the v2 protocol's messages and the broker's own: no sockets, no state.

They follow the Java 5.x Proxy: `SendMessageActivity#buildMessageProperty` (proto -> properties),
`GrpcConverter#buildMessage` (stored record -> proto), `ResponseBuilder` (response codes -> `Code`) and
`SendMessageActivity.SendMessageQueueSelector` (a FIFO group's queue: Guava `Hashing.consistentHash`
of the group's Java `hashCode`).
"""

from __future__ import annotations

import hashlib
import ipaddress
import zlib
from typing import Any, Final

from rocketmq.grpc_protocol import definition_pb2 as pb

from daemon.broker.attributes import MESSAGE_TYPE, MESSAGE_TYPES
from daemon.remoting.codes import ResponseCode
from store.javahash import java_hash
from store.message import (
    PROPERTY_CLUSTER,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_KEYS,
    PROPERTY_MAX_OFFSET,
    PROPERTY_MIN_OFFSET,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TIMER_DEQUEUE_MS,
    PROPERTY_TIMER_ENQUEUE_MS,
    PROPERTY_TIMER_OUT_MS,
    PROPERTY_TIMER_ROLL_TIMES,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT_STORE_MSG_OK,
    StoredMessage,
)
from store.models import TopicConfig
from store.names import RETRY_GROUP_TOPIC_PREFIX

#: 5.x message properties the 4.9.8 MessageConst does not name (RocketMQ 5 MessageConst).
PROPERTY_SHARDING_KEY: Final = "__SHARDINGKEY"
PROPERTY_CHECK_IMMUNITY_TIME: Final = "CHECK_IMMUNITY_TIME_IN_SECONDS"
PROPERTY_TRACE_CONTEXT: Final = "TRACE_CONTEXT"
PROPERTY_BORN_HOST: Final = "__BORNHOST"
PROPERTY_DLQ_ORIGIN_TOPIC: Final = "DLQ_ORIGIN_TOPIC"
PROPERTY_DLQ_ORIGIN_MESSAGE_ID: Final = "DLQ_ORIGIN_MESSAGE_ID"
_DELAY_PROPERTIES: Final = (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELAY_MS,
)

#: Properties the broker sets itself: a user property of the same name is refused (the proxy's
#: `MessageConst.STRING_HASH_SET` check), so no client can forge a transaction or a delay by them.
RESERVED_PROPERTIES: Final = frozenset(
    {
        PROPERTY_TAGS,
        PROPERTY_KEYS,
        PROPERTY_UNIQ_KEY,
        PROPERTY_WAIT_STORE_MSG_OK,
        PROPERTY_DELAY_TIME_LEVEL,
        PROPERTY_TRANSACTION_PREPARED,
        PROPERTY_PRODUCER_GROUP,
        PROPERTY_SHARDING_KEY,
        PROPERTY_TIMER_DELIVER_MS,
        PROPERTY_CHECK_IMMUNITY_TIME,
        PROPERTY_TIMER_DELAY_SEC,
        PROPERTY_TIMER_DELAY_MS,
        PROPERTY_REAL_TOPIC,
        PROPERTY_REAL_QUEUE_ID,
        PROPERTY_RETRY_TOPIC,
        PROPERTY_MAX_OFFSET,
        PROPERTY_MIN_OFFSET,
        PROPERTY_CLUSTER,
        PROPERTY_ORIGIN_MESSAGE_ID,
        PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET,
        PROPERTY_TIMER_OUT_MS,
        PROPERTY_TIMER_ENQUEUE_MS,
        PROPERTY_TIMER_DEQUEUE_MS,
        PROPERTY_TIMER_ROLL_TIMES,
        "TIMER_DEL_UNIQKEY",
        "RECONSUME_TIME",
        "POP_CK",
    }
)

#: A 5.x message id: `01` + MAC (6 bytes) + pid (2) + seconds since 2021-01-01 (4) + sequence (4), in hex
#: (rocketmq-clients `MessageIdCodec`); 4.x ids are 32 hex characters.
V5_MESSAGE_ID_LENGTH: Final = 34

#: Every message type a route lists when the topic has no `+message.type` attribute (the proxy's MIXED).
ALL_TYPES: Final = (pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION)


def accepted_types(config: TopicConfig | None) -> tuple[int, ...]:
    """The message types a route lists for a topic (the proxy's ``RouteActivity.parseTopicMessageType``):
    the one its 5.x ``message.type`` attribute names, every type for MIXED, and every type for a topic
    without the attribute, where a 5.x broker takes NORMAL (a 4.x topic takes any message here)."""
    kind = config.attributes.get(MESSAGE_TYPE) if config is not None else None
    if kind is None or kind == MESSAGE_TYPES[-1]:  # (MIXED)
        return ALL_TYPES
    if kind in MESSAGE_TYPES[1:-1]:  # NORMAL, FIFO, DELAY, TRANSACTION: the protocol's names too
        return (pb.MessageType.Value(kind),)
    return (pb.MESSAGE_TYPE_UNSPECIFIED,)


def type_conflict(config: TopicConfig, props: dict[str, str]) -> str | None:
    """Why a message with these properties may not go to a topic whose ``message.type`` names another
    type (the proxy's ``DefaultTopicMessageTypeValidator``, the message's type as 5.x's
    ``TopicMessageType.parseFromMessageProperty`` reads it); None when it may."""
    expected = config.attributes.get(MESSAGE_TYPE)
    if expected is None or expected == MESSAGE_TYPES[-1]:
        return None
    if props.get(PROPERTY_TRANSACTION_PREPARED) == "true":
        actual = pb.TRANSACTION
    elif any(k in props for k in _DELAY_PROPERTIES):
        actual = pb.DELAY
    elif PROPERTY_SHARDING_KEY in props:
        actual = pb.FIFO
    else:
        actual = pb.NORMAL
    name = pb.MessageType.Name(actual)
    if name == expected:
        return None
    return f"TopicMessageType validate failed, the expected type is {expected}, but actual type is {name}"


_CODES: Final[dict[int, int]] = {
    ResponseCode.SUCCESS: pb.OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: pb.MASTER_PERSISTENCE_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: pb.SLAVE_PERSISTENCE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: pb.HA_NOT_AVAILABLE,
    ResponseCode.TOPIC_NOT_EXIST: pb.TOPIC_NOT_FOUND,
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: pb.CONSUMER_GROUP_NOT_FOUND,
    ResponseCode.NO_PERMISSION: pb.FORBIDDEN,
    ResponseCode.MESSAGE_ILLEGAL: pb.BAD_REQUEST,
    ResponseCode.SYSTEM_BUSY: pb.TOO_MANY_REQUESTS,
    ResponseCode.SERVICE_NOT_AVAILABLE: pb.INTERNAL_SERVER_ERROR,
    ResponseCode.REQUEST_CODE_NOT_SUPPORTED: pb.NOT_IMPLEMENTED,
}


def status(code: int = pb.OK, message: str = "OK") -> pb.Status:
    return pb.Status(code=code, message=message)  # type: ignore[arg-type]


def grpc_code(response_code: int) -> int:
    """The v2 `Code` of a remoting response code (`ResponseBuilder#buildStatus`)."""
    return _CODES.get(response_code, pb.INTERNAL_SERVER_ERROR)


def consistent_hash(value: int, buckets: int) -> int:
    """Guava `Hashing.consistentHash(long, int)`: the FIFO queue of a message group, as the proxy picks it."""
    state = value & 0xFFFFFFFFFFFFFFFF
    candidate = 0
    while True:
        state = (2862933555777941757 * state + 1) & 0xFFFFFFFFFFFFFFFF
        shifted = state >> 33
        if shifted & 0x80000000:  # (int) of the unsigned shift: Java's sign
            shifted -= 1 << 32
        nxt = int((candidate + 1) / ((shifted + 1) / 2**31))
        if 0 <= nxt < buckets:
            candidate = nxt
        else:
            return candidate


def fifo_queue(group: str, queues: int) -> int:
    return consistent_hash(java_hash(group), max(1, queues))


def message_properties(msg: pb.Message, now_ms: int) -> tuple[dict[str, str], str | None]:
    """The stored properties of one SendMessage entry, or (_, problem) when it must be refused."""
    sys = msg.system_properties
    props: dict[str, str] = {}
    for key, value in msg.user_properties.items():
        if key in RESERVED_PROPERTIES:
            return props, f"property {key} is reserved"
        props[key] = value
    if sys.tag:
        props[PROPERTY_TAGS] = sys.tag
    if sys.keys:
        props[PROPERTY_KEYS] = " ".join(sys.keys)
    if sys.message_id:
        props[PROPERTY_UNIQ_KEY] = sys.message_id
    if sys.trace_context:
        props[PROPERTY_TRACE_CONTEXT] = sys.trace_context
    if sys.born_host:
        props[PROPERTY_BORN_HOST] = sys.born_host
    kind = sys.message_type
    if kind == pb.FIFO or sys.message_group:
        if not sys.message_group:
            return props, "a FIFO message needs a message group"
        props[PROPERTY_SHARDING_KEY] = sys.message_group
    if kind == pb.DELAY or sys.HasField("delivery_timestamp"):
        try:
            deliver_ms = millis(sys.delivery_timestamp)
        except BodyRefused as exc:
            return props, f"bad delivery timestamp: {exc}"
        if deliver_ms <= 0:
            return props, "a DELAY message needs a delivery timestamp"
        props[PROPERTY_TIMER_DELIVER_MS] = str(deliver_ms)
    if kind == pb.TRANSACTION:
        props[PROPERTY_TRANSACTION_PREPARED] = "true"
        props[PROPERTY_PRODUCER_GROUP] = msg.topic.name  # the proxy's producer group is the topic
        recovery = sys.orphaned_transaction_recovery_duration.seconds
        if recovery > 0:
            props[PROPERTY_CHECK_IMMUNITY_TIME] = str(recovery)
    return props, None


class BodyRefused(ValueError):
    """A body that cannot be stored: `code` is the v2 status code to answer with."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def message_body(msg: pb.Message, limit: int) -> bytes:
    """The body as stored: a GZIP-encoded one inflated (4.x compresses with zlib, not gzip), never past
    `limit` bytes (maxMessageSize: a few KiB of zeros inflate to gigabytes)."""
    if msg.system_properties.body_encoding != pb.GZIP:
        return bytes(msg.body)
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)  # gzip framing
    try:
        body = inflater.decompress(msg.body, limit + 1)
    except zlib.error as exc:
        raise BodyRefused(pb.BAD_REQUEST, f"the GZIP body does not inflate: {exc}") from None
    if len(body) > limit:
        raise BodyRefused(pb.MESSAGE_BODY_TOO_LARGE, f"the GZIP body inflates past maxMessageSize {limit}")
    if not inflater.eof:
        raise BodyRefused(pb.BAD_REQUEST, "the GZIP body is truncated")
    return body


def millis(stamp: Any) -> int:
    """A protobuf Timestamp or Duration in ms; BodyRefused (BAD_REQUEST) for one out of its range."""
    try:
        return int(stamp.ToMilliseconds())
    except ValueError as exc:
        raise BodyRefused(pb.BAD_REQUEST, str(exc)) from None


def message_type(props: dict[str, str]) -> int:
    if props.get(PROPERTY_TRANSACTION_PREPARED) == "true":
        return pb.TRANSACTION
    if PROPERTY_SHARDING_KEY in props:
        return pb.FIFO
    if PROPERTY_TIMER_DELIVER_MS in props or props.get(PROPERTY_DELAY_TIME_LEVEL, "0") != "0":
        return pb.DELAY
    return pb.NORMAL


def host_text(host: tuple[str, int]) -> str:
    return f"{host[0]}:{host[1]}"


def to_proto(
    msg: StoredMessage,
    *,
    receipt_handle: str = "",
    delivery_attempt: int = 0,
    invisible_ms: int = 0,
) -> pb.Message:
    """A stored message as the v2 `Message` a consumer (or a transaction checker) receives
    (`GrpcConverter#buildMessage`): MD5 digest in upper-case hex, the 5.x id (UNIQ_KEY) as message id."""
    props = msg.properties
    sys: dict[str, Any] = {
        "message_id": props.get(PROPERTY_UNIQ_KEY) or msg.msg_id,
        "body_digest": pb.Digest(type=pb.MD5, checksum=hashlib.md5(msg.body).hexdigest().upper()),
        "body_encoding": pb.IDENTITY,
        "message_type": message_type(props),
        "born_host": props.get(PROPERTY_BORN_HOST) or host_text(msg.born_host),
        "store_host": host_text(msg.store_host),
        "queue_id": msg.queue_id,
        "queue_offset": msg.queue_offset,
        "delivery_attempt": delivery_attempt or msg.reconsume_times + 1,
    }
    if PROPERTY_TAGS in props:
        sys["tag"] = props[PROPERTY_TAGS]
    keys = msg.keys
    if keys:
        sys["keys"] = keys
    if PROPERTY_SHARDING_KEY in props:
        sys["message_group"] = props[PROPERTY_SHARDING_KEY]
    if PROPERTY_TRACE_CONTEXT in props:
        sys["trace_context"] = props[PROPERTY_TRACE_CONTEXT]
    if receipt_handle:
        sys["receipt_handle"] = receipt_handle
    system = pb.SystemProperties(**sys)
    system.born_timestamp.FromMilliseconds(msg.born_timestamp)
    system.store_timestamp.FromMilliseconds(msg.store_timestamp)
    deliver = props.get(PROPERTY_TIMER_DELIVER_MS, "")
    if deliver.isdigit():
        system.delivery_timestamp.FromMilliseconds(int(deliver))
    if invisible_ms:
        system.invisible_duration.FromMilliseconds(invisible_ms)
    origin = props.get(PROPERTY_DLQ_ORIGIN_TOPIC)
    if origin:
        system.dead_letter_queue.topic = origin
        system.dead_letter_queue.message_id = props.get(PROPERTY_DLQ_ORIGIN_MESSAGE_ID, "")
    user = {k: v for k, v in props.items() if k not in RESERVED_PROPERTIES and k != PROPERTY_TRACE_CONTEXT}
    return pb.Message(
        topic=pb.Resource(name=original_topic(msg)),
        user_properties=user,
        system_properties=system,
        body=msg.body,
    )


def original_topic(msg: StoredMessage) -> str:
    """The topic a consumer subscribed to: a retry's `RETRY_TOPIC`, a re-put copy's `REAL_TOPIC`."""
    props = msg.properties
    if msg.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return props.get(PROPERTY_RETRY_TOPIC) or msg.topic
    return props.get(PROPERTY_REAL_TOPIC) or msg.topic


def endpoints(host: str, port: int) -> pb.Endpoints:
    """One address as the clients' `Endpoints` (IPv4, IPv6 or a name)."""
    try:
        scheme = pb.IPv4 if ipaddress.ip_address(host).version == 4 else pb.IPv6
    except ValueError:
        scheme = pb.DOMAIN_NAME
    return pb.Endpoints(scheme=scheme, addresses=[pb.Address(host=host, port=port)])  # type: ignore[arg-type]


def permission(perm: int) -> int:
    """A 4.x topic perm (2 write, 4 read) as the route's `Permission`."""
    read, write = bool(perm & 4), bool(perm & 2)
    if read and write:
        return pb.READ_WRITE
    return pb.READ if read else pb.WRITE if write else pb.NONE
