"""Pure conversions between the v2 protocol's messages and the broker's own: no sockets, no state.

They follow the Java 5.x Proxy: `SendMessageActivity#buildMessageProperty` (proto -> properties),
`GrpcConverter#buildMessage` (stored record -> proto), `ResponseBuilder` (response codes -> `Code`) and
`SendMessageActivity.SendMessageQueueSelector` (a FIFO group's queue: Guava `Hashing.consistentHash`
of the group's Java `hashCode`).
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
import zlib
from typing import Any, Final

from rocketmq.grpc_protocol import definition_pb2 as pb

from daemon.broker.attributes import MESSAGE_TYPE, MESSAGE_TYPES
from daemon.remoting.codes import ResponseCode
from store.javahash import java_hash
from store.message import (
    PROPERTY_CHECK_IMMUNITY_TIME,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_KEYS,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_TOPIC,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_UNIQ_KEY,
    RESERVED_PROPERTIES,
    StoredMessage,
)
from store.models import TopicConfig
from store.names import RETRY_GROUP_TOPIC_PREFIX

#: 5.x message properties the 4.9.8 MessageConst does not name (RocketMQ 5 MessageConst).
PROPERTY_SHARDING_KEY: Final = "__SHARDINGKEY"
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

#: What a consumer is not given as user properties: the reserved ones (Java's `STRING_HASH_SET`) and
#: those it is given as system properties besides (message group, trace context).
_NOT_USER_PROPERTIES: Final = RESERVED_PROPERTIES | {PROPERTY_SHARDING_KEY, PROPERTY_TRACE_CONTEXT}

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


#: The proxy's `ProxyConfig` limits on a message's user properties (their names and values, its tag and
#: keys), and on a message group (in UTF-8 bytes: one of this size or more is refused).
MAX_USER_PROPERTIES: Final = 128
MAX_USER_PROPERTY_BYTES: Final = 16 * 1024
MAX_MESSAGE_GROUP_BYTES: Final = 64
#: The proxy's `maxTransactionRecoverySecond`: the longest `orphaned_transaction_recovery_duration`.
MAX_TRANSACTION_RECOVERY_S: Final = 3600


class MessageRefused(ValueError):
    """A message that cannot be stored: `code` is the v2 status code to answer with."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


#: Guava's `CharMatcher.javaIsoControl()`, which Java's `GrpcValidator#containControlCharacter` uses.
_CONTROL: Final = re.compile("[\x00-\x1f\x7f-\x9f]")


def control_character(text: str) -> bool:
    """Whether `text` holds a control character as the proxy counts them (U+0000-U+001F, U+007F-U+009F;
    among them the 4.x property separators \\x01 and \\x02)."""
    return _CONTROL.search(text) is not None


#: What Java's `Character.isWhitespace` (`StringUtils.isBlank`) does not take for a space.
_NO_BREAK: Final = re.compile("[\u00a0\u2007\u202f]")


def _blank(text: str) -> bool:
    return text.isspace() and _NO_BREAK.search(text) is None


def _text_problem(text: str, what: str, code: int, banned: str = "") -> None:
    """The proxy's check of a tag, key or message group: not blank, no `banned`, no control character."""
    if text and _blank(text):
        raise MessageRefused(code, f"{what} cannot be the char sequence of whitespace")
    if banned and banned in text:
        raise MessageRefused(code, f"{what} cannot contain '{banned}'")
    if control_character(text):
        raise MessageRefused(code, f"{what} cannot contain control character")


def _utf8(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def parse_message(
    msg: pb.Message, now_ms: int, max_body: int, max_delay_ms: int
) -> tuple[dict[str, str], bytes]:
    """One SendMessage entry as the stored properties and body, validated as the proxy's
    `SendMessageActivity#buildMessage` does, in its order; MessageRefused with its code otherwise.
    `max_body` is maxMessageSize, `max_delay_ms` the farthest delivery time the timer service takes."""
    size = len(msg.body)
    if size == 0:
        raise MessageRefused(pb.MESSAGE_BODY_EMPTY, "message body cannot be empty")
    if size > max_body:
        raise MessageRefused(pb.MESSAGE_BODY_TOO_LARGE, f"message body cannot exceed the max {max_body}")
    sys = msg.system_properties
    user = msg.user_properties
    if len(user) > MAX_USER_PROPERTIES:
        raise MessageRefused(
            pb.MESSAGE_PROPERTIES_TOO_LARGE, f"too many user properties, max is {MAX_USER_PROPERTIES}"
        )
    props: dict[str, str] = {}
    total = 0
    for key, value in user.items():
        if key in RESERVED_PROPERTIES:
            raise MessageRefused(pb.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property is used by system: {key}")
        if control_character(key):
            raise MessageRefused(
                pb.ILLEGAL_MESSAGE_PROPERTY_KEY, "the key of property cannot contain control character"
            )
        if control_character(value):
            raise MessageRefused(
                pb.ILLEGAL_MESSAGE_PROPERTY_KEY, "the value of property cannot contain control character"
            )
        total += _utf8(key) + _utf8(value)
        props[key] = value
    tag = sys.tag
    _text_problem(tag, "tag", pb.ILLEGAL_MESSAGE_TAG, "|")
    total += _utf8(tag)
    keys = list(sys.keys)
    for key in keys:
        _text_problem(key, "key", pb.ILLEGAL_MESSAGE_KEY)
        total += _utf8(key)
    if total > MAX_USER_PROPERTY_BYTES:
        raise MessageRefused(
            pb.MESSAGE_PROPERTIES_TOO_LARGE,
            f"the total size of user property is too large, max is {MAX_USER_PROPERTY_BYTES}",
        )
    if tag:
        props[PROPERTY_TAGS] = tag
    if keys:
        props[PROPERTY_KEYS] = " ".join(keys)
    if not sys.message_id or _blank(sys.message_id):  # (every official client sends one)
        raise MessageRefused(pb.ILLEGAL_MESSAGE_ID, "message id cannot be empty")
    if control_character(sys.message_id):
        raise MessageRefused(pb.ILLEGAL_MESSAGE_ID, "message id cannot contain control character")
    props[PROPERTY_UNIQ_KEY] = sys.message_id
    kind = sys.message_type
    if kind == pb.TRANSACTION:
        props[PROPERTY_TRANSACTION_PREPARED] = "true"
        if sys.HasField("orphaned_transaction_recovery_duration"):  # (else a user's own value stays)
            recovery = sys.orphaned_transaction_recovery_duration.seconds  # (Durations.toSeconds)
            if recovery > MAX_TRANSACTION_RECOVERY_S:
                raise MessageRefused(
                    pb.BAD_REQUEST,
                    "the max transaction recovery time of message is too large, max is "
                    f"{MAX_TRANSACTION_RECOVERY_S}",
                )
            props[PROPERTY_CHECK_IMMUNITY_TIME] = str(recovery)
    if kind == pb.DELAY or sys.HasField("delivery_timestamp"):
        deliver_ms = millis(sys.delivery_timestamp)
        if deliver_ms <= 0:
            raise MessageRefused(pb.BAD_REQUEST, "a DELAY message needs a delivery timestamp")
        if deliver_ms - now_ms > max_delay_ms:
            raise MessageRefused(
                pb.ILLEGAL_DELIVERY_TIME, f"the max delay time of message is too large, max is {max_delay_ms}"
            )
        props[PROPERTY_TIMER_DELIVER_MS] = str(deliver_ms)
    if kind == pb.TRANSACTION:
        props[PROPERTY_PRODUCER_GROUP] = msg.topic.name  # the proxy's producer group is the topic
    group = sys.message_group
    if kind == pb.FIFO and not group:
        raise MessageRefused(pb.BAD_REQUEST, "a FIFO message needs a message group")
    if group:
        if _blank(group):
            raise MessageRefused(
                pb.ILLEGAL_MESSAGE_GROUP, "message group cannot be the char sequence of whitespace"
            )
        if _utf8(group) >= MAX_MESSAGE_GROUP_BYTES:
            raise MessageRefused(
                pb.ILLEGAL_MESSAGE_GROUP, f"message group exceed the max size {MAX_MESSAGE_GROUP_BYTES}"
            )
        _text_problem(group, "message group", pb.ILLEGAL_MESSAGE_GROUP)
        props[PROPERTY_SHARDING_KEY] = group
    # (the proxy stores these two as they come; a 4.x separator in them would break the record)
    for name, value in ((PROPERTY_TRACE_CONTEXT, sys.trace_context), (PROPERTY_BORN_HOST, sys.born_host)):
        if control_character(value):
            raise MessageRefused(pb.BAD_REQUEST, f"{name} cannot contain control character")
        if value:
            props[name] = value
    return props, message_body(msg, max_body)


def message_body(msg: pb.Message, limit: int) -> bytes:
    """The body as stored: a GZIP-encoded one inflated (4.x compresses with zlib, not gzip), never past
    `limit` bytes (maxMessageSize: a few KiB of zeros inflate to gigabytes)."""
    if msg.system_properties.body_encoding != pb.GZIP:
        return bytes(msg.body)
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)  # gzip framing
    try:
        body = inflater.decompress(msg.body, limit + 1)
    except zlib.error as exc:
        raise MessageRefused(pb.BAD_REQUEST, f"the GZIP body does not inflate: {exc}") from None
    if len(body) > limit:
        raise MessageRefused(pb.MESSAGE_BODY_TOO_LARGE, f"the GZIP body inflates past maxMessageSize {limit}")
    if not inflater.eof:
        raise MessageRefused(pb.BAD_REQUEST, "the GZIP body is truncated")
    return body


def millis(stamp: Any) -> int:
    """A protobuf Timestamp or Duration in ms; MessageRefused (BAD_REQUEST) for one out of its range."""
    try:
        return int(stamp.ToMilliseconds())
    except ValueError as exc:
        raise MessageRefused(pb.BAD_REQUEST, str(exc)) from None


def message_type(props: dict[str, str]) -> int:
    """A stored message's type as `GrpcConverter#buildSystemProperties` names it: a FIFO message with a
    delivery time is DELAY."""
    if props.get(PROPERTY_TRANSACTION_PREPARED) == "true":
        return pb.TRANSACTION
    if (
        PROPERTY_TIMER_DELIVER_MS in props
        or PROPERTY_TIMER_DELAY_SEC in props
        or props.get(PROPERTY_DELAY_TIME_LEVEL, "0") != "0"
    ):
        return pb.DELAY
    if PROPERTY_SHARDING_KEY in props:
        return pb.FIFO
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
    user = {k: v for k, v in props.items() if k not in _NOT_USER_PROPERTIES}
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
