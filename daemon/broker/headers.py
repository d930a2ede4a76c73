"""Typed extFields of the broker's requests and responses (docs/wire-protocol.md §send-headers and the request
sections after it).

Names follow Java's `*RequestHeader` classes; wire names are the camelCase of the fields unless
`wire()` says otherwise (the one-letter SEND_MESSAGE_V2 names, `clientID`, `isForce`, ...).
"""

from __future__ import annotations

from dataclasses import dataclass

from daemon.remoting.headers import CommandHeader, wire
from store.message import PROPERTY_MSG_REGION, PROPERTY_TRACE_SWITCH


@dataclass(slots=True)
class SendMessageRequestHeader(CommandHeader):
    """SEND_MESSAGE (10); SEND_MESSAGE_V2/SEND_BATCH_MESSAGE are parsed with the V2 class below."""

    JAVA_NAME = "SendMessageRequestHeader"
    producer_group: str
    topic: str
    default_topic: str
    default_topic_queue_nums: int
    queue_id: int
    sys_flag: int
    born_timestamp: int
    flag: int
    properties: str | None = None
    reconsume_times: int | None = None
    unit_mode: bool = False
    batch: bool = False
    max_reconsume_times: int | None = None


@dataclass(slots=True)
class SendMessageRequestHeaderV2(CommandHeader):
    """The one-letter field names of SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320),
    docs/wire-protocol.md §send-headers."""

    JAVA_NAME = "SendMessageRequestHeaderV2"
    a: str
    b: str
    c: str
    d: int
    e: int
    f: int
    g: int
    h: int
    i: str | None = None
    j: int | None = None
    k: bool = False
    l: int | None = None  # noqa: E741 - the wire name
    m: bool = False


@dataclass(slots=True)
class SendMessageResponseHeader(CommandHeader):
    JAVA_NAME = "SendMessageResponseHeader"
    msg_id: str
    queue_id: int
    queue_offset: int
    transaction_id: str | None = None
    msg_region: str = wire(PROPERTY_MSG_REGION, "DefaultRegion")
    trace_on: str = wire(PROPERTY_TRACE_SWITCH, "true")


# PullMessageRequestHeader.sysFlag bits (Java's PullSysFlag)
PULL_FLAG_COMMIT_OFFSET = 0x1
PULL_FLAG_SUSPEND = 0x2
PULL_FLAG_SUBSCRIPTION = 0x4


@dataclass(slots=True)
class PullMessageRequestHeader(CommandHeader):
    JAVA_NAME = "PullMessageRequestHeader"
    consumer_group: str
    topic: str
    queue_id: int
    queue_offset: int
    max_msg_nums: int
    sys_flag: int
    commit_offset: int
    suspend_timeout_millis: int
    sub_version: int
    subscription: str | None = None
    expression_type: str | None = None


@dataclass(slots=True)
class PullMessageResponseHeader(CommandHeader):
    JAVA_NAME = "PullMessageResponseHeader"
    suggest_which_broker_id: int
    next_begin_offset: int
    min_offset: int
    max_offset: int


@dataclass(slots=True)
class UnregisterClientRequestHeader(CommandHeader):
    JAVA_NAME = "UnregisterClientRequestHeader"
    client_id: str = wire("clientID")
    producer_group: str | None = None
    consumer_group: str | None = None


@dataclass(slots=True)
class ConsumerGroupHeader(CommandHeader):
    """GET_CONSUMER_LIST_BY_GROUP (38), GET_CONSUMER_CONNECTION_LIST (203)."""

    JAVA_NAME = "GetConsumerListByGroupRequestHeader"
    consumer_group: str


@dataclass(slots=True)
class QueryConsumerOffsetRequestHeader(CommandHeader):
    JAVA_NAME = "QueryConsumerOffsetRequestHeader"
    consumer_group: str
    topic: str
    queue_id: int


@dataclass(slots=True)
class UpdateConsumerOffsetRequestHeader(CommandHeader):
    JAVA_NAME = "UpdateConsumerOffsetRequestHeader"
    consumer_group: str
    topic: str
    queue_id: int
    commit_offset: int


@dataclass(slots=True)
class QueryConsumeQueueRequestHeader(CommandHeader):
    """QUERY_CONSUME_QUEUE (321): mqadmin queryCq."""

    topic: str
    queue_id: int
    index: int
    count: int
    consumer_group: str | None = None


@dataclass(slots=True)
class QueueHeader(CommandHeader):
    """GET_MAX_OFFSET (30), GET_MIN_OFFSET (31), GET_EARLIEST_MSG_STORETIME (32)."""

    JAVA_NAME = "GetMaxOffsetRequestHeader"
    topic: str
    queue_id: int


@dataclass(slots=True)
class SearchOffsetRequestHeader(CommandHeader):
    JAVA_NAME = "SearchOffsetRequestHeader"
    topic: str
    queue_id: int
    timestamp: int


@dataclass(slots=True)
class OffsetResponseHeader(CommandHeader):
    JAVA_NAME = "QueryConsumerOffsetResponseHeader"
    offset: int


@dataclass(slots=True)
class TimestampResponseHeader(CommandHeader):
    JAVA_NAME = "GetEarliestMsgStoretimeResponseHeader"
    timestamp: int


@dataclass(slots=True)
class ConsumerSendMsgBackRequestHeader(CommandHeader):
    JAVA_NAME = "ConsumerSendMsgBackRequestHeader"
    offset: int
    group: str
    delay_level: int
    origin_msg_id: str | None = None
    origin_topic: str | None = None
    unit_mode: bool = False
    max_reconsume_times: int | None = None


@dataclass(slots=True)
class QueryMessageRequestHeader(CommandHeader):
    JAVA_NAME = "QueryMessageRequestHeader"
    topic: str
    key: str
    max_num: int
    begin_timestamp: int
    end_timestamp: int


@dataclass(slots=True)
class QueryMessageResponseHeader(CommandHeader):
    JAVA_NAME = "QueryMessageResponseHeader"
    index_last_update_timestamp: int
    index_last_update_phyoffset: int


#: mqctl's optional field on QUERY_MESSAGE's answer (either code) and VIEW_MESSAGE_BY_ID's SYSTEM_ERROR: the
#: CommitLog offsets, comma-separated, of the damaged records the lookup met (body CRC failing, or set aside
#: earlier), which the broker set aside in a quarantine and never serves. A RocketMQ client ignores it.
DAMAGED_FIELD = "mqctlDamaged"


@dataclass(slots=True)
class ViewMessageRequestHeader(CommandHeader):
    JAVA_NAME = "ViewMessageRequestHeader"
    offset: int


@dataclass(slots=True)
class DeleteExpiredCommitLogHeader(CommandHeader):
    """DELETE_EXPIRED_COMMITLOG (329): no header in 4.9.8. mqctl's ``broker clean --execute`` adds
    ``mqctlUpTo``, the end of the plan it showed: the trigger's runs delete no file ending past it."""

    JAVA_NAME = "DeleteExpiredCommitLogHeader"
    mqctl_up_to: int | None = None


@dataclass(slots=True)
class CreateTopicRequestHeader(CommandHeader):
    JAVA_NAME = "CreateTopicRequestHeader"
    topic: str
    default_topic: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_filter_type: str
    topic_sys_flag: int = 0
    order: bool = False
    #: 5.x's: attribute changes, ``+message.type=FIFO,-reserve.time`` (daemon/broker/attributes.py)
    attributes: str | None = None


@dataclass(slots=True)
class TopicHeader(CommandHeader):
    """DELETE_TOPIC_IN_BROKER (215), GET_TOPIC_STATS_INFO (202), QUERY_TOPIC_CONSUME_BY_WHO (300)."""

    JAVA_NAME = "DeleteTopicRequestHeader"
    topic: str


@dataclass(slots=True)
class DeleteSubscriptionGroupRequestHeader(CommandHeader):
    JAVA_NAME = "DeleteSubscriptionGroupRequestHeader"
    group_name: str
    remove_offset: bool = False


@dataclass(slots=True)
class GetConsumeStatsRequestHeader(CommandHeader):
    JAVA_NAME = "GetConsumeStatsRequestHeader"
    consumer_group: str
    topic: str | None = None


@dataclass(slots=True)
class ViewBrokerStatsDataRequestHeader(CommandHeader):
    """VIEW_BROKER_STATS_DATA (315)."""

    JAVA_NAME = "ViewBrokerStatsDataRequestHeader"
    stats_name: str
    stats_key: str


@dataclass(slots=True)
class ProducerGroupHeader(CommandHeader):
    JAVA_NAME = "GetProducerConnectionListRequestHeader"
    producer_group: str


@dataclass(slots=True)
class ResetOffsetRequestHeader(CommandHeader):
    """INVOKE_BROKER_TO_RESET_OFFSET (222) and the RESET_CONSUMER_CLIENT_OFFSET callback (220)."""

    JAVA_NAME = "ResetOffsetRequestHeader"
    topic: str
    group: str
    timestamp: int
    is_force: bool = wire("isForce", False)


@dataclass(slots=True)
class CloneGroupOffsetRequestHeader(CommandHeader):
    JAVA_NAME = "CloneGroupOffsetRequestHeader"
    src_group: str
    dest_group: str
    topic: str | None = None
    offline: bool = False


@dataclass(slots=True)
class NotifyConsumerIdsChangedRequestHeader(CommandHeader):
    JAVA_NAME = "NotifyConsumerIdsChangedRequestHeader"
    consumer_group: str


@dataclass(slots=True)
class GetBrokerConfigResponseHeader(CommandHeader):
    JAVA_NAME = "GetBrokerConfigResponseHeader"
    version: str


@dataclass(slots=True)
class EndTransactionRequestHeader(CommandHeader):
    JAVA_NAME = "EndTransactionRequestHeader"
    producer_group: str
    tran_state_table_offset: int
    commit_log_offset: int
    commit_or_rollback: int
    msg_id: str
    from_transaction_check: bool = False
    transaction_id: str | None = None


@dataclass(slots=True)
class ConsumerRunningInfoRequestHeader(CommandHeader):
    JAVA_NAME = "GetConsumerRunningInfoRequestHeader"
    consumer_group: str
    client_id: str
    jstack_enable: bool = False


@dataclass(slots=True)
class ConsumeMessageDirectlyRequestHeader(CommandHeader):
    JAVA_NAME = "ConsumeMessageDirectlyResultRequestHeader"
    consumer_group: str
    client_id: str | None = None
    msg_id: str | None = None
    broker_name: str | None = None


@dataclass(slots=True)
class CheckTransactionStateRequestHeader(CommandHeader):
    JAVA_NAME = "CheckTransactionStateRequestHeader"
    tran_state_table_offset: int
    commit_log_offset: int
    msg_id: str | None = None
    transaction_id: str | None = None
    offset_msg_id: str | None = None


@dataclass(slots=True)
class PopMessageRequestHeader(CommandHeader):
    """POP_MESSAGE (200050), RocketMQ 5.x."""

    JAVA_NAME = "PopMessageRequestHeader"
    consumer_group: str
    topic: str
    queue_id: int
    max_msg_nums: int
    invisible_time: int
    poll_time: int
    born_time: int
    init_mode: int
    exp_type: str | None = None
    exp: str | None = None
    order: bool = False
    attempt_id: str | None = None


@dataclass(slots=True)
class PopMessageResponseHeader(CommandHeader):
    JAVA_NAME = "PopMessageResponseHeader"
    pop_time: int
    invisible_time: int
    revive_qid: int
    rest_num: int
    start_offset_info: str | None = None
    msg_offset_info: str | None = None
    order_count_info: str | None = None


@dataclass(slots=True)
class AckMessageRequestHeader(CommandHeader):
    """ACK_MESSAGE (200051), RocketMQ 5.x: ``extraInfo`` is the receipt handle."""

    JAVA_NAME = "AckMessageRequestHeader"
    consumer_group: str
    topic: str
    queue_id: int
    extra_info: str
    offset: int


@dataclass(slots=True)
class ChangeInvisibleTimeRequestHeader(CommandHeader):
    """CHANGE_MESSAGE_INVISIBLETIME (200053), RocketMQ 5.x."""

    JAVA_NAME = "ChangeInvisibleTimeRequestHeader"
    consumer_group: str
    topic: str
    queue_id: int
    extra_info: str
    offset: int
    invisible_time: int


@dataclass(slots=True)
class ChangeInvisibleTimeResponseHeader(CommandHeader):
    JAVA_NAME = "ChangeInvisibleTimeResponseHeader"
    pop_time: int
    invisible_time: int
    revive_qid: int
