"""Numeric codes of the RocketMQ 4.x remoting protocol (docs/wire-protocol.md §codes).

IntEnums so that values compare equal to the raw ints found in frames, while logs and errors can show
names. Codes absent from these tables still travel as plain ints.
"""

from __future__ import annotations

from enum import IntEnum


class RequestCode(IntEnum):
    """Request codes of RocketMQ 4.9.8 (plus the two legacy Aliyun KV codes ali-ons names)."""

    SEND_MESSAGE = 10
    PULL_MESSAGE = 11
    QUERY_MESSAGE = 12
    QUERY_BROKER_OFFSET = 13
    QUERY_CONSUMER_OFFSET = 14
    UPDATE_CONSUMER_OFFSET = 15
    UPDATE_AND_CREATE_TOPIC = 17
    GET_ALL_TOPIC_CONFIG = 21
    GET_TOPIC_CONFIG_LIST = 22
    GET_TOPIC_NAME_LIST = 23
    UPDATE_BROKER_CONFIG = 25
    GET_BROKER_CONFIG = 26
    TRIGGER_DELETE_FILES = 27
    GET_BROKER_RUNTIME_INFO = 28
    SEARCH_OFFSET_BY_TIMESTAMP = 29
    GET_MAX_OFFSET = 30
    GET_MIN_OFFSET = 31
    GET_EARLIEST_MSG_STORETIME = 32
    VIEW_MESSAGE_BY_ID = 33
    HEART_BEAT = 34
    UNREGISTER_CLIENT = 35
    CONSUMER_SEND_MSG_BACK = 36
    END_TRANSACTION = 37
    GET_CONSUMER_LIST_BY_GROUP = 38
    CHECK_TRANSACTION_STATE = 39
    NOTIFY_CONSUMER_IDS_CHANGED = 40
    LOCK_BATCH_MQ = 41
    UNLOCK_BATCH_MQ = 42
    GET_ALL_CONSUMER_OFFSET = 43
    GET_ALL_DELAY_OFFSET = 45
    CHECK_CLIENT_CONFIG = 46
    UPDATE_AND_CREATE_ACL_CONFIG = 50
    DELETE_ACL_CONFIG = 51
    GET_BROKER_CLUSTER_ACL_INFO = 52
    UPDATE_GLOBAL_WHITE_ADDRS_CONFIG = 53
    GET_BROKER_CLUSTER_ACL_CONFIG = 54
    PUT_KV_CONFIG = 100
    GET_KV_CONFIG = 101
    DELETE_KV_CONFIG = 102
    REGISTER_BROKER = 103
    UNREGISTER_BROKER = 104
    GET_ROUTEINFO_BY_TOPIC = 105
    GET_BROKER_CLUSTER_INFO = 106
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200
    GET_ALL_SUBSCRIPTIONGROUP_CONFIG = 201
    GET_TOPIC_STATS_INFO = 202
    GET_CONSUMER_CONNECTION_LIST = 203
    GET_PRODUCER_CONNECTION_LIST = 204
    WIPE_WRITE_PERM_OF_BROKER = 205
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
    DELETE_SUBSCRIPTIONGROUP = 207
    GET_CONSUME_STATS = 208
    SUSPEND_CONSUMER = 209
    RESUME_CONSUMER = 210
    RESET_CONSUMER_OFFSET_IN_CONSUMER = 211
    RESET_CONSUMER_OFFSET_IN_BROKER = 212
    ADJUST_CONSUMER_THREAD_POOL = 213
    WHO_CONSUME_THE_MESSAGE = 214
    DELETE_TOPIC_IN_BROKER = 215
    DELETE_TOPIC_IN_NAMESRV = 216
    GET_KVLIST_BY_NAMESPACE = 219
    RESET_CONSUMER_CLIENT_OFFSET = 220
    GET_CONSUMER_STATUS_FROM_CLIENT = 221
    INVOKE_BROKER_TO_RESET_OFFSET = 222
    INVOKE_BROKER_TO_GET_CONSUMER_STATUS = 223
    GET_TOPICS_BY_CLUSTER = 224
    QUERY_TOPIC_CONSUME_BY_WHO = 300
    REGISTER_FILTER_SERVER = 301
    REGISTER_MESSAGE_FILTER_CLASS = 302
    QUERY_CONSUME_TIME_SPAN = 303
    GET_SYSTEM_TOPIC_LIST_FROM_NS = 304
    GET_SYSTEM_TOPIC_LIST_FROM_BROKER = 305
    CLEAN_EXPIRED_CONSUMEQUEUE = 306
    GET_CONSUMER_RUNNING_INFO = 307
    QUERY_CORRECTION_OFFSET = 308
    CONSUME_MESSAGE_DIRECTLY = 309
    SEND_MESSAGE_V2 = 310
    GET_UNIT_TOPIC_LIST = 311
    GET_HAS_UNIT_SUB_TOPIC_LIST = 312
    GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST = 313
    CLONE_GROUP_OFFSET = 314
    VIEW_BROKER_STATS_DATA = 315
    CLEAN_UNUSED_TOPIC = 316
    GET_BROKER_CONSUME_STATS = 317
    UPDATE_NAMESRV_CONFIG = 318
    GET_NAMESRV_CONFIG = 319
    SEND_BATCH_MESSAGE = 320
    QUERY_CONSUME_QUEUE = 321
    QUERY_DATA_VERSION = 322
    RESUME_CHECK_HALF_MESSAGE = 323
    SEND_REPLY_MESSAGE = 324
    SEND_REPLY_MESSAGE_V2 = 325
    PUSH_REPLY_MESSAGE_TO_CLIENT = 326
    ADD_WRITE_PERM_OF_BROKER = 327
    GET_ALL_PRODUCER_INFO = 328
    DELETE_EXPIRED_COMMITLOG = 329
    GET_KV_CONFIG_BY_VALUE = 217
    DELETE_KV_CONFIG_BY_VALUE = 218
    # RocketMQ 5.x POP consumption (a 5.x Proxy in cluster mode sends these)
    POP_MESSAGE = 200050
    ACK_MESSAGE = 200051
    CHANGE_MESSAGE_INVISIBLETIME = 200053
    BATCH_ACK_MESSAGE = 200151


class ResponseCode(IntEnum):
    """Response codes of RocketMQ 4.9.8 (`RemotingSysResponseCode` 0-3 included)."""

    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    TRANSACTION_FAILED = 4
    FLUSH_DISK_TIMEOUT = 10
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    VERSION_NOT_SUPPORTED = 15
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    TOPIC_EXIST_ALREADY = 18
    PULL_NOT_FOUND = 19
    PULL_RETRY_IMMEDIATELY = 20
    PULL_OFFSET_MOVED = 21
    QUERY_NOT_FOUND = 22
    SUBSCRIPTION_PARSE_FAILED = 23
    SUBSCRIPTION_NOT_EXIST = 24
    SUBSCRIPTION_NOT_LATEST = 25
    SUBSCRIPTION_GROUP_NOT_EXIST = 26
    FILTER_DATA_NOT_EXIST = 27
    FILTER_DATA_NOT_LATEST = 28
    TRANSACTION_SHOULD_COMMIT = 200
    TRANSACTION_SHOULD_ROLLBACK = 201
    TRANSACTION_STATE_UNKNOW = 202
    TRANSACTION_STATE_GROUP_WRONG = 203
    NO_BUYER_ID = 204
    NOT_IN_CURRENT_UNIT = 205
    CONSUMER_NOT_ONLINE = 206
    CONSUME_MSG_TIMEOUT = 207
    NO_MESSAGE = 208
    UPDATE_AND_CREATE_ACL_CONFIG_FAILED = 209
    DELETE_ACL_CONFIG_FAILED = 210
    UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED = 211
    FLOW_CONTROL = 215


#: 5.x ``INVALID_PARAMETER`` (4.9.8 has no such code): a POP request's or a topic attribute's bad value.
#: Not ``Final``: compiled modules import this module, and would inline a Final (build_native's INLINED).
INVALID_PARAMETER = 29


class LanguageCode(IntEnum):
    """Sender language: a name in JSON headers, a byte in ROCKETMQ binary headers."""

    JAVA = 0
    CPP = 1
    DOTNET = 2
    PYTHON = 3
    DELPHI = 4
    ERLANG = 5
    RUBY = 6
    OTHER = 7
    HTTP = 8
    GO = 9
    PHP = 10
    OMS = 11
    RUST = 12

    @classmethod
    def parse(cls, value: object) -> LanguageCode:
        """Map a header value (name or byte) to a member; unknown languages become OTHER."""
        if isinstance(value, str):
            return LANGUAGES.get(value, cls.OTHER)  # not __members__: a new mapping proxy per call
        if isinstance(value, int) and not isinstance(value, bool):
            try:
                return cls(value)
            except ValueError:
                return cls.OTHER
        return cls.JAVA


#: Names to members, for the parse of every JSON header (the frame codec looks names up here directly).
LANGUAGES: dict[str, LanguageCode] = dict(LanguageCode.__members__)
#: Members to names, for the encode of every JSON header (an enum's ``.name`` runs interpreted).
LANGUAGE_NAMES: dict[LanguageCode, str] = {member: name for name, member in LANGUAGES.items()}


class SerializeType(IntEnum):
    """High byte of a frame's second int: how the header is encoded."""

    JSON = 0
    ROCKETMQ = 1


class Version(IntEnum):
    """Ordinals of Java's `MQVersion.Version` that change server behaviour."""

    V3_0_7_SNAPSHOT = 28
    V3_0_11 = 37
    V3_1_8_SNAPSHOT = 62
    V3_4_9 = 121
    V4_0_0 = 213
    V4_5_0 = 313
    V4_9_0 = 393
    V4_9_4 = 401
    V4_9_7 = 407
    V4_9_8 = 409
    V5_0_0 = 413


#: From V4_0_0 on `MQVersion.Version` has a SNAPSHOT and a release ordinal for every x.y.z (z, y <= 9).
_V4_SNAPSHOT = 212


def version_ordinal(text: str) -> int:
    """A version `5.1.2` (a 5.x client's `x-mq-client-version`) as Java's `MQVersion.Version` ordinal,
    what connection listings carry; 0 when it is none from 4.0.0 on."""
    try:
        major, minor, patch = (int(p) for p in text.split("-")[0].split(".")[:3])
    except ValueError:
        return 0
    if major < 4 or not (0 <= minor <= 9 and 0 <= patch <= 9):
        return 0
    return _V4_SNAPSHOT + 1 + 2 * ((major - 4) * 100 + minor * 10 + patch)


def version_name(ordinal: int) -> str:
    """`MQVersion.getVersionDesc`: `V4_9_8`, `V5_1_2_SNAPSHOT`; the bare number before 4.0.0."""
    if ordinal < _V4_SNAPSHOT:
        return str(ordinal)
    n, release = divmod(ordinal - _V4_SNAPSHOT, 2)
    major, rest = divmod(n, 100)
    minor, patch = divmod(rest, 10)
    return f"V{major + 4}_{minor}_{patch}" + ("" if release else "_SNAPSHOT")


#: The version our servers and clients put in every frame (we speak 4.9.8).
CURRENT_VERSION = Version.V4_9_8

#: Bits of the header `flag` field.
FLAG_RESPONSE = 0x1
FLAG_ONEWAY = 0x2
