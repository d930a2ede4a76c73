"""Type stub of the ``store`` package: its public names and where each lives. At run time
``store/__init__.py`` loads each from this list on first use (lazy_loader.attach_stub), so importing one
name (``from store import fastjson``) does not import the engine."""

from . import (
    dledger as dledger,
    fastjson as fastjson,
    inspect as inspect,
)
from .api import MessageStore as MessageStore
from .cleanup import (
    WATERMARK as WATERMARK,
    CleanPlan as CleanPlan,
    CommittedOffset as CommittedOffset,
    LogFile as LogFile,
    Removal as Removal,
    make_plan as make_plan,
    plan_removals as plan_removals,
    remove_files as remove_files,
    total_losses as total_losses,
    unconsumed_per_file as unconsumed_per_file,
)
from .clock import (
    Clock as Clock,
    FakeClock as FakeClock,
    SystemClock as SystemClock,
)
from .commitlog import (
    PutMessageStatus as PutMessageStatus,
)
from .config import (
    ASYNC_FLUSH as ASYNC_FLUSH,
    SYNC_FLUSH as SYNC_FLUSH,
    StoreConfig as StoreConfig,
)
from .config_files import (
    ConfigFiles as ConfigFiles,
)
from .durability import sync_directory as sync_directory
from .engine import (
    DefaultMessageStore as DefaultMessageStore,
    ensure_unlocked as ensure_unlocked,
    held_lock as held_lock,
    lock_holder as lock_holder,
)
from .errors import (
    ConfigFileError as ConfigFileError,
    CorruptRecordError as CorruptRecordError,
    DamagedRecordError as DamagedRecordError,
    StoreClosedError as StoreClosedError,
    StoreError as StoreError,
    StoreFormatError as StoreFormatError,
    StoreLockedError as StoreLockedError,
    UnsupportedCompressionError as UnsupportedCompressionError,
)
from .javahash import (
    index_key_hash as index_key_hash,
    java_hash as java_hash,
    tags_code as tags_code,
)
from .memory import (
    InMemoryMessageStore as InMemoryMessageStore,
)
from .message import (
    BLANK_MAGIC_CODE as BLANK_MAGIC_CODE,
    BORNHOST_V6_FLAG as BORNHOST_V6_FLAG,
    MESSAGE_MAGIC_CODE as MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2 as MESSAGE_MAGIC_CODE_V2,
    PROPERTY_CLUSTER as PROPERTY_CLUSTER,
    PROPERTY_CONSUME_START_TIMESTAMP as PROPERTY_CONSUME_START_TIMESTAMP,
    PROPERTY_DELAY_TIME_LEVEL as PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_KEYS as PROPERTY_KEYS,
    PROPERTY_MAX_OFFSET as PROPERTY_MAX_OFFSET,
    PROPERTY_MIN_OFFSET as PROPERTY_MIN_OFFSET,
    PROPERTY_MSG_REGION as PROPERTY_MSG_REGION,
    PROPERTY_ORIGIN_MESSAGE_ID as PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_PRODUCER_GROUP as PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QUEUE_ID as PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC as PROPERTY_REAL_TOPIC,
    PROPERTY_RETRY_TOPIC as PROPERTY_RETRY_TOPIC,
    PROPERTY_TAGS as PROPERTY_TAGS,
    PROPERTY_TIMER_DELAY_MS as PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELAY_SEC as PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS as PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TRACE_SWITCH as PROPERTY_TRACE_SWITCH,
    PROPERTY_TRANSACTION_CHECK_TIMES as PROPERTY_TRANSACTION_CHECK_TIMES,
    PROPERTY_TRANSACTION_PREPARED as PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_UNIQ_KEY as PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT_STORE_MSG_OK as PROPERTY_WAIT_STORE_MSG_OK,
    RESERVED_PROPERTIES as RESERVED_PROPERTIES,
    STOREHOST_V6_FLAG as STOREHOST_V6_FLAG,
    TRANSACTION_PREPARED_TYPE as TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE as TRANSACTION_ROLLBACK_TYPE,
    Message as Message,
    StoredMessage as StoredMessage,
)
from .models import (
    CONSUME_MESSAGE_ORDERLY as CONSUME_MESSAGE_ORDERLY,
    SubscriptionGroupConfig as SubscriptionGroupConfig,
    TopicConfig as TopicConfig,
)
from .names import (
    AUTO_CREATE_TOPIC as AUTO_CREATE_TOPIC,
    BENCHMARK_TOPIC as BENCHMARK_TOPIC,
    DLQ_GROUP_TOPIC_PREFIX as DLQ_GROUP_TOPIC_PREFIX,
    INTERNAL_TOPIC_PREFIX as INTERNAL_TOPIC_PREFIX,
    MAX_GROUP_LENGTH as MAX_GROUP_LENGTH,
    MAX_HELD_QUEUE_NUMS as MAX_HELD_QUEUE_NUMS,
    MAX_QUEUE_NUMS as MAX_QUEUE_NUMS,
    MAX_TOPIC_LENGTH as MAX_TOPIC_LENGTH,
    NOT_ALLOWED_SEND_TOPICS as NOT_ALLOWED_SEND_TOPICS,
    REPLY_TOPIC_SUFFIX as REPLY_TOPIC_SUFFIX,
    RETRY_GROUP_TOPIC_PREFIX as RETRY_GROUP_TOPIC_PREFIX,
    SCHEDULE_TOPIC as SCHEDULE_TOPIC,
    SYS_GROUP_PREFIX as SYS_GROUP_PREFIX,
    SYSTEM_GROUPS as SYSTEM_GROUPS,
    SYSTEM_TOPIC_PREFIX as SYSTEM_TOPIC_PREFIX,
    SYSTEM_TOPICS as SYSTEM_TOPICS,
    TIMER_TOPIC as TIMER_TOPIC,
    TOOLS_CONSUMER_GROUP as TOOLS_CONSUMER_GROUP,
    TRACE_TOPIC as TRACE_TOPIC,
    dlq_topic as dlq_topic,
    legal_name as legal_name,
    new_group_problem as new_group_problem,
    queue_nums_problem as queue_nums_problem,
    reserved_group_prefix as reserved_group_prefix,
    system_topic as system_topic,
)
from .native import describe_build as describe_build
from .quarantine import (
    COMMITLOG as COMMITLOG,
    Manifest as Manifest,
    Piece as Piece,
    list_quarantines as list_quarantines,
    piece_records as piece_records,
)
from .record import (
    NAME_VALUE_SEPARATOR as NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR as PROPERTY_SEPARATOR,
    decode_msg_id as decode_msg_id,
    decode_record as decode_record,
    decode_records as decode_records,
    encode_properties as encode_properties,
    inflate_body as inflate_body,
    read_header as read_header,
)
from .results import (
    GetMessageStatus as GetMessageStatus,
    GetResult as GetResult,
    PutResult as PutResult,
    QueryResult as QueryResult,
    SelectedMessage as SelectedMessage,
)
from .words import plural as plural
