"""Message model: what a producer hands to the store and what a decoded CommitLog record holds."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

# --- sysFlag bits (docs/store-format.md §sysflag-and-magic-codes) ---
COMPRESSED_FLAG: Final = 0x1
MULTI_TAGS_FLAG: Final = 0x2
TRANSACTION_TYPE_MASK: Final = 0xC
TRANSACTION_NOT_TYPE: Final = 0x0
TRANSACTION_PREPARED_TYPE: Final = 0x4
TRANSACTION_COMMIT_TYPE: Final = 0x8
TRANSACTION_ROLLBACK_TYPE: Final = 0xC
BORNHOST_V6_FLAG: Final = 0x10
STOREHOST_V6_FLAG: Final = 0x20
NEED_UNWRAP_FLAG: Final = 0x40
INNER_BATCH_FLAG: Final = 0x80
COMPRESSION_TYPE_MASK: Final = 0x700
COMPRESSION_LZ4: Final = 0x100
COMPRESSION_ZSTD: Final = 0x200
COMPRESSION_ZLIB: Final = 0x300

# --- magic codes (docs/store-format.md §sysflag-and-magic-codes) ---
MESSAGE_MAGIC_CODE: Final = -626843481  # 0xDAA320A7
MESSAGE_MAGIC_CODE_V2: Final = -626843477  # 0xDAA320AB (5.x, i16 topic length)
BLANK_MAGIC_CODE: Final = -875286124  # 0xCBD43194

# --- reserved property names, the ones the store reads and the ones the broker adds
#     (docs/store-format.md §properties-and-message-ids) ---
PROPERTY_KEYS: Final = "KEYS"
PROPERTY_TAGS: Final = "TAGS"
PROPERTY_UNIQ_KEY: Final = "UNIQ_KEY"  # Java: MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
PROPERTY_WAIT_STORE_MSG_OK: Final = "WAIT"
PROPERTY_DELAY_TIME_LEVEL: Final = "DELAY"
PROPERTY_REAL_TOPIC: Final = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID: Final = "REAL_QID"
PROPERTY_CLUSTER: Final = "CLUSTER"
PROPERTY_RETRY_TOPIC: Final = "RETRY_TOPIC"
PROPERTY_ORIGIN_MESSAGE_ID: Final = "ORIGIN_MESSAGE_ID"
PROPERTY_TRANSACTION_PREPARED: Final = "TRAN_MSG"
PROPERTY_PRODUCER_GROUP: Final = "PGROUP"
PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET: Final = "TRAN_PREPARED_QUEUE_OFFSET"
PROPERTY_TRANSACTION_CHECK_TIMES: Final = "TRANSACTION_CHECK_TIMES"
#: A producer's "do not check this half before" in seconds (4.x `putUserProperty`, 5.x
#: `orphaned_transaction_recovery_duration`): a user property, read by the transaction checker.
PROPERTY_CHECK_IMMUNITY_TIME: Final = "CHECK_IMMUNITY_TIME_IN_SECONDS"
PROPERTY_MIN_OFFSET: Final = "MIN_OFFSET"
PROPERTY_MAX_OFFSET: Final = "MAX_OFFSET"
PROPERTY_CONSUME_START_TIMESTAMP: Final = "CONSUME_START_TIME"
PROPERTY_MSG_REGION: Final = "MSG_REGION"
PROPERTY_TRACE_SWITCH: Final = "TRACE_ON"
# timer messages (5.x MessageConst): the wanted time, as an instant or a delay from the send
PROPERTY_TIMER_DELIVER_MS: Final = "TIMER_DELIVER_MS"
PROPERTY_TIMER_DELAY_SEC: Final = "TIMER_DELAY_SEC"
PROPERTY_TIMER_DELAY_MS: Final = "TIMER_DELAY_MS"
#: The due time the broker settled on (ms epoch); a message carrying it is never parked again.
PROPERTY_TIMER_OUT_MS: Final = "TIMER_OUT_MS"
PROPERTY_TIMER_ENQUEUE_MS: Final = "TIMER_ENQUEUE_MS"
PROPERTY_TIMER_DEQUEUE_MS: Final = "TIMER_DEQUEUE_MS"
#: How often a long timer was re-put into the timer topic to outlive CommitLog retention.
PROPERTY_TIMER_ROLL_TIMES: Final = "TIMER_ROLL_TIMES"
#: A DLedger term record's term and the member elected in it (mqctl's own keys).
PROPERTY_DLEDGER_TERM: Final = "DLEDGER_TERM"
PROPERTY_DLEDGER_LEADER: Final = "DLEDGER_LEADER"
KEY_SEPARATOR: Final = " "
#: Java's `MessageConst.STRING_HASH_SET` (RocketMQ 5): the properties the system sets. Its clients and
#: proxy refuse a user property of one of these names (so nobody forges a transaction, a delay, a DLQ
#: origin...), and the proxy leaves them out of the user properties a consumer is given.
RESERVED_PROPERTIES: Final = frozenset(
    {
        "TRACE_ON",
        "MSG_REGION",
        "KEYS",
        "TAGS",
        "WAIT",
        "DELAY",
        "RETRY_TOPIC",
        "REAL_TOPIC",
        "REAL_QID",
        "TRAN_MSG",
        "PGROUP",
        "MIN_OFFSET",
        "MAX_OFFSET",
        "BUYER_ID",
        "ORIGIN_MESSAGE_ID",
        "TRANSFER_FLAG",
        "CORRECTION_FLAG",
        "MQ2_FLAG",
        "RECONSUME_TIME",
        "UNIQ_KEY",
        "MAX_RECONSUME_TIMES",
        "CONSUME_START_TIME",
        "POP_CK",
        "POP_CK_OFFSET",
        "1ST_POP_TIME",
        "TRAN_PREPARED_QUEUE_OFFSET",
        "DUP_INFO",
        "EXTEND_UNIQ_INFO",
        "INSTANCE_ID",
        "CORRELATION_ID",
        "REPLY_TO_CLIENT",
        "TTL",
        "ARRIVE_TIME",
        "PUSH_REPLY_TIME",
        "CLUSTER",
        "MSG_TYPE",
        "INNER_MULTI_QUEUE_OFFSET",
        "TIMER_DELAY_MS",
        "TIMER_DELAY_SEC",
        "TIMER_DELIVER_MS",
        "TIMER_ENQUEUE_MS",
        "TIMER_DEQUEUE_MS",
        "TIMER_ROLL_TIMES",
        "TIMER_OUT_MS",
        "TIMER_DEL_UNIQKEY",
        "TIMER_DELAY_LEVEL",
        "__BORNHOST",
        "BORN_TIMESTAMP",
        "DLQ_ORIGIN_TOPIC",
        "DLQ_ORIGIN_MESSAGE_ID",
        "__CRC32#",
    }
)

HostAddress = tuple[str, int]
"""``(ip, port)``; IPv6 addresses make the record use 20-byte host fields."""


@dataclass(slots=True, init=False)
class Message:
    """A message as a producer (or the broker, for retries and delay delivery) hands it to the store.

    ``properties`` are stored verbatim, in insertion order; the broker decides what goes in (for
    example ``CLUSTER``, or dropping ``WAIT``). ``wait_store_msg_ok`` is what the ``WAIT``
    property meant to the producer: in SYNC_FLUSH mode ``put_message`` waits for the fsync only
    when it is true.
    """

    topic: str
    body: bytes
    queue_id: int = 0
    flag: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: HostAddress = ("127.0.0.1", 0)
    store_host: HostAddress | None = None  # None: the store's configured address
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    wait_store_msg_ok: bool = True
    delay_time_level: int | None = None

    def __init__(  # written out: mypyc compiles it (a dataclass's generated one runs interpreted)
        self,
        topic: str,
        body: bytes,
        queue_id: int = 0,
        flag: int = 0,
        properties: dict[str, str] | None = None,
        sys_flag: int = 0,
        born_timestamp: int = 0,
        born_host: HostAddress = ("127.0.0.1", 0),
        store_host: HostAddress | None = None,
        reconsume_times: int = 0,
        prepared_transaction_offset: int = 0,
        wait_store_msg_ok: bool = True,
        delay_time_level: int | None = None,
    ) -> None:
        self.topic = topic
        self.body = body
        self.queue_id = queue_id
        self.flag = flag
        self.properties = {} if properties is None else properties
        self.sys_flag = sys_flag
        self.born_timestamp = born_timestamp
        self.born_host = born_host
        self.store_host = store_host
        self.reconsume_times = reconsume_times
        self.prepared_transaction_offset = prepared_transaction_offset
        self.wait_store_msg_ok = wait_store_msg_ok
        self.delay_time_level = delay_time_level

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> list[str]:
        return split_keys(self.properties.get(PROPERTY_KEYS))

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(PROPERTY_UNIQ_KEY)

    @property
    def delay_level(self) -> int:
        """``delay_time_level`` when set, else the ``DELAY`` property.

        RocketMQ keeps the level in the property map and the stored string separately; 4.9.8's
        schedule service stores delivered copies with ``DELAY`` still in the string but level 0.
        Passing ``delay_time_level=0`` reproduces that (the copy is not delayed again).
        """
        if self.delay_time_level is not None:
            return self.delay_time_level
        v = self.properties.get(PROPERTY_DELAY_TIME_LEVEL)
        return int(v) if v else 0


def split_keys(keys: str | None) -> list[str]:
    """``KEYS`` split on single spaces, empty pieces dropped (what the index does,
    docs/store-format.md §tags-and-keys)."""
    if not keys:
        return []
    return [k for k in keys.split(KEY_SEPARATOR) if k]


@dataclass(slots=True, init=False)
class StoredMessage:
    """A decoded CommitLog record (RocketMQ's ``MessageExt``).

    ``body`` is inflated when the record is compressed; ``stored_body`` is the bytes on disk (the
    BODYCRC covers those). ``msg_id`` is the offset message id derived from the store host and
    physical offset.
    """

    store_size: int
    magic: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    commit_log_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: HostAddress
    store_timestamp: int
    store_host: HostAddress
    reconsume_times: int
    prepared_transaction_offset: int
    stored_body: bytes
    body: bytes
    topic: str
    properties: dict[str, str]
    msg_id: str

    def __init__(  # written out: mypyc compiles it (a dataclass's generated one runs interpreted)
        self,
        store_size: int,
        magic: int,
        body_crc: int,
        queue_id: int,
        flag: int,
        queue_offset: int,
        commit_log_offset: int,
        sys_flag: int,
        born_timestamp: int,
        born_host: HostAddress,
        store_timestamp: int,
        store_host: HostAddress,
        reconsume_times: int,
        prepared_transaction_offset: int,
        stored_body: bytes,
        body: bytes,
        topic: str,
        properties: dict[str, str],
        msg_id: str,
    ) -> None:
        self.store_size = store_size
        self.magic = magic
        self.body_crc = body_crc
        self.queue_id = queue_id
        self.flag = flag
        self.queue_offset = queue_offset
        self.commit_log_offset = commit_log_offset
        self.sys_flag = sys_flag
        self.born_timestamp = born_timestamp
        self.born_host = born_host
        self.store_timestamp = store_timestamp
        self.store_host = store_host
        self.reconsume_times = reconsume_times
        self.prepared_transaction_offset = prepared_transaction_offset
        self.stored_body = stored_body
        self.body = body
        self.topic = topic
        self.properties = properties
        self.msg_id = msg_id

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> list[str]:
        return split_keys(self.properties.get(PROPERTY_KEYS))

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(PROPERTY_UNIQ_KEY)

    @property
    def compressed(self) -> bool:
        return bool(self.sys_flag & COMPRESSED_FLAG)

    @property
    def transaction_type(self) -> int:
        return self.sys_flag & TRANSACTION_TYPE_MASK
