"""JSON bodies the broker reads and writes (docs/wire-protocol.md §json-bodies), as `Bean` dataclasses.

Maps keyed by `MessageQueue` are written in fastjson's object-key form (`{{"brokerName":..}:..}`), which is
what Java tools parse (docs/wire-protocol.md §fastjson); `mq_key_map` reads them back from `fastjson.loads`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from store.fastjson import ObjectKey
from store.models import Bean, DataVersion, SubscriptionGroupConfig


@dataclass(frozen=True, slots=True, order=True)
class MessageQueue(Bean):
    """docs/wire-protocol.md §json-bodies; ordered like Java's compareTo (topic, brokerName, queueId)."""

    topic: str
    broker_name: str
    queue_id: int

    @classmethod
    def from_key(cls, key: Any) -> MessageQueue:
        """A map key as `fastjson.loads` returns it (ObjectKey or a plain dict)."""
        obj = key.as_dict() if isinstance(key, ObjectKey) else key
        return cls.from_json(obj)


def mq_key_map(raw: Any) -> dict[MessageQueue, Any]:
    """`{MessageQueue: value}` from a decoded object-key map."""
    return {MessageQueue.from_key(k): v for k, v in (raw or {}).items()}


@dataclass(slots=True)
class SubscriptionGroupWrapper(Bean):
    """GET_ALL_SUBSCRIPTIONGROUP_CONFIG body and `subscriptionGroup.json`."""

    subscription_group_table: dict[str, SubscriptionGroupConfig] = field(default_factory=dict)
    data_version: DataVersion = field(default_factory=DataVersion)


@dataclass(slots=True)
class SubscriptionData(Bean):
    """docs/wire-protocol.md §client-bodies: one topic subscription of a consumer group."""

    topic: str
    sub_string: str = "*"
    class_filter_mode: bool = False
    tags_set: list[str] = field(default_factory=list)
    code_set: list[int] = field(default_factory=list)
    sub_version: int = 0
    expression_type: str | None = "TAG"


@dataclass(slots=True)
class ConsumerData(Bean):
    group_name: str
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    subscription_data_set: list[SubscriptionData] = field(default_factory=list)
    unit_mode: bool = False


@dataclass(slots=True)
class ProducerData(Bean):
    group_name: str


@dataclass(slots=True)
class HeartbeatData(Bean):
    """HEART_BEAT body; note the capital `ID` in `clientID`."""

    client_id: str = ""
    producer_data_set: list[ProducerData] = field(default_factory=list)
    consumer_data_set: list[ConsumerData] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        out = Bean.to_json(self)
        out["clientID"] = out.pop("clientId")
        return out

    @classmethod
    def from_json(cls, obj: Any) -> HeartbeatData:
        data = dict(obj)
        if "clientID" in data:
            data["clientId"] = data.pop("clientID")
        return super(HeartbeatData, cls).from_json(data)  # type: ignore[misc, no-any-return]


@dataclass(slots=True)
class ConnectionInfo(Bean):
    """Java's `Connection` body (docs/wire-protocol.md §client-bodies)."""

    client_id: str
    client_addr: str
    language: str
    version: int


@dataclass(slots=True)
class ConsumerConnection(Bean):
    connection_set: list[ConnectionInfo] = field(default_factory=list)
    subscription_table: dict[str, SubscriptionData] = field(default_factory=dict)
    consume_type: str | None = None
    message_model: str | None = None
    consume_from_where: str | None = None


@dataclass(slots=True)
class ProducerConnection(Bean):
    connection_set: list[ConnectionInfo] = field(default_factory=list)


@dataclass(slots=True)
class GetConsumerListByGroupResponseBody(Bean):
    consumer_id_list: list[str] = field(default_factory=list)


@dataclass(slots=True)
class OffsetWrapper(Bean):
    broker_offset: int = 0
    consumer_offset: int = 0
    last_timestamp: int = 0


@dataclass(slots=True)
class ConsumeStats(Bean):
    """GET_CONSUME_STATS body (docs/wire-protocol.md §stats-bodies); `offset_table` keys are MessageQueues
    (object keys)."""

    offset_table: dict[MessageQueue, OffsetWrapper] = field(default_factory=dict)
    consume_tps: float = 0.0

    @classmethod
    def from_json(cls, obj: Any) -> ConsumeStats:
        table = {mq: OffsetWrapper.from_json(v) for mq, v in mq_key_map(obj.get("offsetTable")).items()}
        return cls(table, float(obj.get("consumeTps", 0.0)))

    def total_diff(self) -> int:
        return sum(w.broker_offset - w.consumer_offset for w in self.offset_table.values())


@dataclass(slots=True)
class TopicOffset(Bean):
    min_offset: int = 0
    max_offset: int = 0
    last_update_timestamp: int = 0


@dataclass(slots=True)
class TopicStatsTable(Bean):
    """GET_TOPIC_STATS_INFO body (docs/wire-protocol.md §stats-bodies)."""

    offset_table: dict[MessageQueue, TopicOffset] = field(default_factory=dict)

    @classmethod
    def from_json(cls, obj: Any) -> TopicStatsTable:
        return cls({mq: TopicOffset.from_json(v) for mq, v in mq_key_map(obj.get("offsetTable")).items()})


@dataclass(slots=True)
class LockBatchRequestBody(Bean):
    """LOCK_BATCH_MQ and UNLOCK_BATCH_MQ request body (docs/wire-protocol.md §lock-and-reset-bodies)."""

    consumer_group: str = ""
    client_id: str = ""
    mq_set: list[MessageQueue] = field(default_factory=list)


@dataclass(slots=True)
class LockBatchResponseBody(Bean):
    lock_ok_m_q_set: list[MessageQueue] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"lockOKMQSet": self.lock_ok_m_q_set}

    @classmethod
    def from_json(cls, obj: Any) -> LockBatchResponseBody:
        return cls([MessageQueue.from_json(m) for m in obj.get("lockOKMQSet", [])])


@dataclass(slots=True)
class ResetOffsetBody(Bean):
    """docs/wire-protocol.md §lock-and-reset-bodies: the offsets an admin reset computed, keyed by
    MessageQueue."""

    offset_table: dict[MessageQueue, int] = field(default_factory=dict)

    @classmethod
    def from_json(cls, obj: Any) -> ResetOffsetBody:
        return cls({mq: int(v) for mq, v in mq_key_map(obj.get("offsetTable")).items()})

    def for_cpp(self) -> dict[str, Any]:
        """ResetOffsetBodyForC: the list form the C++ client parses."""
        return {
            "offsetTable": [
                {"brokerName": mq.broker_name, "offset": off, "queueId": mq.queue_id, "topic": mq.topic}
                for mq, off in sorted(self.offset_table.items())
            ]
        }


@dataclass(slots=True)
class GroupList(Bean):
    group_list: list[str] = field(default_factory=list)


@dataclass(slots=True)
class ConsumeQueueData(Bean):
    """One ConsumeQueue unit as QUERY_CONSUME_QUEUE shows it; ``eval`` and the ext fields matter only for
    ConsumeQueue ext units, which this broker never writes."""

    physic_offset: int
    physic_size: int
    tags_code: int
    extend_data_json: str | None = None
    bit_map: str | None = None
    eval: bool = False
    msg: str | None = None


@dataclass(slots=True)
class QueryConsumeQueueResponseBody(Bean):
    """QUERY_CONSUME_QUEUE's body (AdminBrokerProcessor#queryConsumeQueue)."""

    subscription_data: SubscriptionData | None = None
    filter_data: str | None = None
    queue_data: list[ConsumeQueueData] | None = None
    max_queue_index: int = 0
    min_queue_index: int = 0
