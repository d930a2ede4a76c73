"""Admin requests (docs/wire-protocol.md §admin-requests): topics, groups, stats, connections, offsets reset,
config."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from daemon.broker.attributes import AttributeRefused, alter_attributes
from daemon.broker.bodies import (
    ConsumeQueueData,
    ConsumeStats,
    GroupList,
    MessageQueue,
    OffsetWrapper,
    ProducerConnection,
    QueryConsumeQueueResponseBody,
    ResetOffsetBody,
    TopicOffset,
    TopicStatsTable,
)
from daemon.broker.clean import CLEAN_PLAN, PlanBody
from daemon.broker.config import check_reserved_time, check_sched_slice, clamped_disk_ratio
from daemon.broker.headers import (
    CloneGroupOffsetRequestHeader,
    ConsumeMessageDirectlyRequestHeader,
    ConsumerGroupHeader,
    ConsumerRunningInfoRequestHeader,
    CreateTopicRequestHeader,
    DeleteExpiredCommitLogHeader,
    DeleteSubscriptionGroupRequestHeader,
    GetBrokerConfigResponseHeader,
    GetConsumeStatsRequestHeader,
    ProducerGroupHeader,
    QueryConsumeQueueRequestHeader,
    ResetOffsetRequestHeader,
    TopicHeader,
    ViewBrokerStatsDataRequestHeader,
)
from daemon.broker.managers.topics import topic_problem
from daemon.broker.processors import fail, system_error
from daemon.config import (
    ConfigError,
    coerce_properties,
    config_file_mode,
    edit_properties_file,
    parse_properties,
    property_key,
    wire_properties,
    write_atomically,
)
from daemon.remoting.bodies import DataVersion, KVTable, TopicList
from daemon.remoting.codes import LanguageCode, RequestCode, ResponseCode, Version
from daemon.remoting.command import RemotingCommand
from daemon.remoting.connection import Connection, Processor
from daemon.remoting.errors import RemotingError, RemotingTimeoutError
from daemon.safe_config import refuse_unsafe
from store import fastjson
from store.config import StoreConfig
from store.errors import CorruptRecordError
from store.models import SubscriptionGroupConfig, TopicConfig
from store.names import (
    DLEDGER_TERM_TOPIC,
    REVIVE_TOPIC_PREFIX,
    SCHEDULE_TOPIC,
    TRANS_OP_HALF_TOPIC,
    new_group_problem,
    queue_nums_problem,
)
from store.record import decode_msg_id

if TYPE_CHECKING:
    from daemon.broker.context import BrokerContext

log = logging.getLogger(__name__)

#: Keys UPDATE_BROKER_CONFIG refuses (Java's default `configBlackList`, plus where the store lives, and the
#: replication identity: a role switched at run time would let a slave's store take puts between the
#: master's bytes, and a new HA port would be registered where nothing listens).
CONFIG_BLACK_LIST = frozenset(
    {
        "configBlackList",
        "brokerConfigPath",
        "storePathRootDir",
        "storePathCommitLog",
        "brokerRole",
        "brokerId",
        "haListenPort",
    }
)
#: How long the broker waits for a client it calls on an admin's behalf (Java: 10 s).
CLIENT_CALL_TIMEOUT = 10.0


#: Queues of a GET_TOPIC_STATS_INFO answer looked up and encoded at a time on the loop.
TOPIC_STATS_SLICE = 64


def processors(broker: BrokerContext) -> dict[int, Processor]:
    p = AdminProcessor(broker)
    R = RequestCode
    return {
        R.UPDATE_AND_CREATE_TOPIC: p.create_topic,
        R.DELETE_TOPIC_IN_BROKER: p.delete_topic,
        R.GET_ALL_TOPIC_CONFIG: p.all_topic_config,
        R.GET_SYSTEM_TOPIC_LIST_FROM_BROKER: p.system_topics,
        R.GET_TOPIC_STATS_INFO: p.topic_stats,
        R.QUERY_TOPIC_CONSUME_BY_WHO: p.consumed_by_who,
        R.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: p.create_group,
        R.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: p.all_groups,
        R.DELETE_SUBSCRIPTIONGROUP: p.delete_group,
        R.GET_CONSUME_STATS: p.consume_stats,
        R.GET_BROKER_CONSUME_STATS: p.broker_consume_stats,
        R.VIEW_BROKER_STATS_DATA: p.view_stats_data,
        R.GET_CONSUMER_CONNECTION_LIST: p.consumer_connections,
        R.GET_PRODUCER_CONNECTION_LIST: p.producer_connections,
        R.QUERY_CONSUME_QUEUE: p.query_consume_queue,
        R.INVOKE_BROKER_TO_RESET_OFFSET: p.reset_offset,
        R.GET_CONSUMER_RUNNING_INFO: p.consumer_running_info,
        R.CONSUME_MESSAGE_DIRECTLY: p.consume_message_directly,
        R.GET_ALL_PRODUCER_INFO: p.all_producers,
        R.CLEAN_UNUSED_TOPIC: p.clean_unused_topic,
        R.CLONE_GROUP_OFFSET: p.clone_group_offset,
        R.GET_BROKER_RUNTIME_INFO: p.runtime_info,
        R.GET_BROKER_CONFIG: p.get_config,
        R.UPDATE_BROKER_CONFIG: p.update_config,
        R.CLEAN_EXPIRED_CONSUMEQUEUE: p.clean_expired_consume_queue,
        R.DELETE_EXPIRED_COMMITLOG: p.delete_expired_commit_log,
        CLEAN_PLAN: p.clean_plan,
    }


class AdminProcessor:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker
        self.config_version = DataVersion(0, int(time.time() * 1000))
        self._stats_orders: dict[int, list[int]] = {}

    def _check_topic(self, topic: str) -> None:
        problem = topic_problem(topic)
        if problem is not None:
            raise system_error(problem)
        if self.broker.topics.is_system_topic(topic):
            raise system_error(f"The topic[{topic}] is conflict with system topic.")

    # ------------------------------------------------------------------ topics

    async def create_topic(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = CreateTopicRequestHeader.from_ext_fields(request.ext_fields)
        if h.topic_filter_type not in ("SINGLE_TAG", "MULTI_TAG"):  # 4.9.8's header check: TopicFilterType
            raise system_error(f"topicFilterType = [{h.topic_filter_type}] value invalid")
        self._check_topic(h.topic)
        # (4.9.8 checks no count: a count of billions made every per-queue loop of the broker freeze it)
        problem = queue_nums_problem(h.read_queue_nums, h.write_queue_nums)
        if problem is not None:
            raise system_error(f"topic[{h.topic}]: {problem}")
        old = self.broker.topics.get(h.topic)
        extra = dict(old.extra) if old is not None else {}  # (a 5.x table's properties kept)
        try:
            attributes = alter_attributes(old.attributes if old is not None else None, h.attributes)
        except AttributeRefused as refused:
            raise fail(refused.code, refused.remark) from None
        if attributes:
            extra["attributes"] = attributes
        else:
            extra.pop("attributes", None)
        config = TopicConfig(
            h.topic,
            h.read_queue_nums,
            h.write_queue_nums,
            h.perm,
            h.topic_filter_type,
            h.topic_sys_flag,
            old.order if old is not None else False,
            extra,
        )
        self.broker.topics.put(config, persist=False)
        # answered once topics.json holds it and the NameServers route it; concurrent creations share both
        persisted = asyncio.ensure_future(self.broker.persist_topics())
        try:
            await asyncio.gather(persisted, self.broker.register_topics())
        except Exception:
            if persisted.done() and persisted.exception() is not None:
                self.broker.topics.revert(config, old)  # refused (a full disk): not in force either
            raise
        return request.make_response(remark="not set any response code")  # what 4.9.8 answers

    def delete_topic(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = TopicHeader.from_ext_fields(request.ext_fields)
        self._check_topic(h.topic)
        self.broker.topics.delete(h.topic)
        self.broker.offsets.delete_topic(h.topic)
        self.broker.store.delete_topics({h.topic})
        return request.make_response()

    def all_topic_config(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        body = self.broker.topics.all_json()
        if body is None:
            raise system_error("No topic in this broker")
        return request.make_response(body=body)

    def system_topics(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        topics = sorted(self.broker.topics.system_topics)
        return request.make_response(body=TopicList(topics).dumps())

    async def topic_stats(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """GET_TOPIC_STATS_INFO: TopicStatsTable's bytes, its entries written a slice of queues at a time
        with the loop serving between them (in one piece, `BenchmarkTest`'s 1,024 queues held it for tens
        of milliseconds)."""
        h = TopicHeader.from_ext_fields(request.ext_fields)
        config = self.broker.topics.get(h.topic)
        if config is None:
            raise fail(ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist")
        store = self.broker.store
        queues = self._stats_order(h.topic, config.write_queue_nums)
        if not queues:
            return request.make_response(body=TopicStatsTable({}).dumps())
        entries = []
        for start in range(0, len(queues), TOPIC_STATS_SLICE):
            if start:
                await asyncio.sleep(0)
            for qid in queues[start : start + TOPIC_STATS_SLICE]:
                mq = self._mq(h.topic, qid)
                max_off = store.get_max_offset(h.topic, qid)
                last = store.get_store_timestamp(h.topic, qid, max_off - 1) if max_off > 0 else 0
                offsets = TopicOffset(store.get_min_offset(h.topic, qid), max_off, max(last, 0))
                entries.append(fastjson.dumps(mq) + b":" + fastjson.dumps(offsets))
        return request.make_response(body=b'{"offsetTable":{' + b",".join(entries) + b"}}")

    def consumed_by_who(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = TopicHeader.from_ext_fields(request.ext_fields)
        groups = self.broker.consumers.groups_subscribing(h.topic) | self.broker.offsets.groups_of(h.topic)
        return request.make_response(body=GroupList(sorted(groups)).dumps())

    def _stats_order(self, topic: str, queues: int) -> list[int]:
        """Queue ids in the order `fastjson.dumps` writes a map keyed by their MessageQueues: by the keys'
        text, which differ in the queue id alone, so the order is the same for every topic of as many
        queues; kept by count (sorting a thousand keys' text took milliseconds)."""
        order = self._stats_orders.get(queues)
        if order is None:
            keys = {self._mq(topic, qid): qid for qid in range(queues)}
            order = self._stats_orders[queues] = [keys[mq] for mq in sorted(keys, key=fastjson.key_order)]
        return order

    def _mq(self, topic: str, queue_id: int) -> MessageQueue:
        return MessageQueue(topic, self.broker.config.broker_name, queue_id)

    # ------------------------------------------------------------------ subscription groups

    def create_group(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        try:
            config = SubscriptionGroupConfig.loads(request.body)
        except (ValueError, TypeError, KeyError) as exc:
            raise system_error(f"bad subscription group body: {exc}") from None
        problem = new_group_problem(config.group_name)
        if problem is not None:
            raise system_error(problem)
        self.broker.groups.put(config)
        return request.make_response()

    def all_groups(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.make_response(body=self.broker.groups.all_json())

    def delete_group(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = DeleteSubscriptionGroupRequestHeader.from_ext_fields(request.ext_fields)
        self.broker.groups.delete(h.group_name)
        if h.remove_offset:
            self.broker.offsets.delete_group(h.group_name)
        return request.make_response()

    # ------------------------------------------------------------------ consumption state

    def consume_stats(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = GetConsumeStatsRequestHeader.from_ext_fields(request.ext_fields)
        return request.make_response(body=self.compute_consume_stats(h.consumer_group, h.topic).dumps())

    def compute_consume_stats(self, group: str, topic: str | None = None) -> ConsumeStats:
        """ConsumeStats of a group over one topic or every topic it has offsets for
        (docs/wire-protocol.md §stats-bodies)."""
        broker = self.broker
        store = broker.store
        topics = [topic] if topic else sorted(broker.offsets.topics_of(group))
        info = broker.consumers.get(group)
        stats = ConsumeStats()
        for t in topics:
            config = broker.topics.get(t)
            if config is None:
                continue
            if info is not None and info.subscriptions and t not in info.subscriptions:
                continue
            for qid in range(config.read_queue_nums):
                broker_offset = max(store.get_max_offset(t, qid), 0)
                consumer_offset = max(broker.offsets.query_offset(group, t, qid), 0)
                last = store.get_store_timestamp(t, qid, consumer_offset - 1) if consumer_offset > 0 else 0
                stats.offset_table[self._mq(t, qid)] = OffsetWrapper(
                    broker_offset, consumer_offset, max(last, 0)
                )
            stats.consume_tps += broker.stats.group_get_tps(group, t)  # Java sums tpsGroupGetNums per topic
        return stats

    def broker_consume_stats(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """GET_BROKER_CONSUME_STATS (317): ConsumeStats of every group and topic with stored offsets;
        with `isOrder=true` only of ordered topics (mqadmin brokerConsumeStats -o)."""
        order_only = request.ext_fields.get("isOrder", "false").lower() == "true"
        offsets = self.broker.offsets
        groups = sorted(offsets.groups())
        entries = []
        total = 0
        for group in groups:
            per_topic = []
            for topic in sorted(offsets.topics_of(group)):
                config = self.broker.topics.get(topic)
                if order_only and (config is None or not config.order):
                    continue
                stats = self.compute_consume_stats(group, topic)
                if stats.offset_table:
                    per_topic.append(stats)
                    total += stats.total_diff()
            if per_topic:
                entries.append({group: per_topic})
        body = {"brokerAddr": self.broker.addr, "consumeStatsList": entries, "totalDiff": total}
        return request.make_response(body=fastjson.dumps(body))

    def view_stats_data(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """VIEW_BROKER_STATS_DATA (315): one stats item's minute/hour/day sums and rates
        (`mqadmin statsAll` reads TOPIC_PUT_NUMS by topic and GROUP_GET_NUMS by `topic@group`)."""
        h = ViewBrokerStatsDataRequestHeader.from_ext_fields(request.ext_fields)
        data = self.broker.stats.view(h.stats_name, h.stats_key)
        if data is None:
            raise system_error(f"The stats <{h.stats_name}> <{h.stats_key}> not exist")
        return request.make_response(body=fastjson.dumps(data))

    def consumer_connections(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = ConsumerGroupHeader.from_ext_fields(request.ext_fields)
        info = self.broker.consumers.get(h.consumer_group)
        if info is None:
            raise fail(ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{h.consumer_group}] not online")
        return request.make_response(body=info.connection().dumps())

    def producer_connections(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = ProducerGroupHeader.from_ext_fields(request.ext_fields)
        channels = self.broker.producers.groups.get(h.producer_group)
        if not channels:
            raise system_error(f"the producer group[{h.producer_group}] not exist")
        return request.make_response(body=ProducerConnection([c.info() for c in channels.values()]).dumps())

    def query_consume_queue(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """mqadmin queryCq, as AdminBrokerProcessor#queryConsumeQueue: the queue's bounds and up to
        ``count`` raw units from ``index``; with a group, its subscription to the topic."""
        h = QueryConsumeQueueRequestHeader.from_ext_fields(request.ext_fields)
        found = self.broker.store.consume_queue_units(h.topic, h.queue_id, h.index, h.count)
        if found is None:
            raise system_error(f"{h.queue_id}@{h.topic} is not exist!")
        min_index, max_index, units = found
        body = QueryConsumeQueueResponseBody(max_queue_index=max_index, min_queue_index=min_index)
        if h.consumer_group is not None:
            info = self.broker.consumers.get(h.consumer_group)
            body.subscription_data = info.subscriptions.get(h.topic) if info is not None else None
            # a tag subscription has no ConsumerFilterData: 4.9.8 prints its null as JSON
            body.filter_data = (
                f"{h.consumer_group}@{h.topic} is not online!" if body.subscription_data is None else "null"
            )
        if units is None:  # 4.9.8 answers SUCCESS with this remark and no body
            return request.make_response(remark=f"Index {h.index} of {h.queue_id}@{h.topic} is not exist!")
        body.queue_data = [ConsumeQueueData(phys, size, tags) for phys, size, tags in units]
        return request.make_response(body=body.dumps())

    def reset_offset(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """Compute the new offsets, commit them, and tell live consumers (docs/wire-protocol.md §offset-reset
        INVOKE_BROKER_TO_RESET_OFFSET).

        Unlike 4.9.8 the broker commits the offsets itself, because ali-ons ignores the callback.
        """
        h = ResetOffsetRequestHeader.from_ext_fields(request.ext_fields)
        broker = self.broker
        config = broker.topics.get(h.topic)
        if config is None:
            raise system_error(
                f"[reset-offset] reset offset failed, no topic in this broker. topic={h.topic}"
            )
        info = broker.consumers.get(h.group)
        if info is None or not info.channels:
            raise fail(
                ResponseCode.CONSUMER_NOT_ONLINE,
                f"Consumer not online, so can not reset offset, Group: {h.group} Topic: {h.topic} "
                f"Timestamp: {h.timestamp}",
            )
        store = broker.store
        table: dict[MessageQueue, int] = {}
        for qid in range(config.write_queue_nums):
            stored = broker.offsets.query_offset(h.group, h.topic, qid)
            if stored < 0:
                raise system_error(f"THe consumer group {h.group} not exist")
            if h.timestamp == -1:
                target = store.get_max_offset(h.topic, qid)
            else:
                target = max(store.search_offset_by_timestamp(h.topic, qid, h.timestamp), 0)
            table[self._mq(h.topic, qid)] = target if h.is_force or target < stored else stored
        for mq, offset in table.items():
            broker.offsets.commit_offset(h.group, h.topic, mq.queue_id, offset)
        body = ResetOffsetBody(table)
        callback = ResetOffsetRequestHeader(h.topic, h.group, h.timestamp, False).to_ext_fields()
        for channel in list(info.channels.values()):
            if channel.version < Version.V3_0_7_SNAPSHOT:
                raise system_error(f"the client does not support this feature. version={channel.version}")
            payload = (
                fastjson.dumps(body.for_cpp()) if channel.language == LanguageCode.CPP.name else body.dumps()
            )
            try:
                channel.conn.invoke_oneway(
                    RemotingCommand.request(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, dict(callback), payload)
                )
            except RemotingError as exc:
                log.warning("reset offset: cannot notify %s: %s", channel.client_id, exc)
        return request.make_response(body=body.dumps())

    async def consumer_running_info(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """Forward to the consumer itself and relay its answer (docs/wire-protocol.md §connections); ali-ons
        never answers."""
        h = ConsumerRunningInfoRequestHeader.from_ext_fields(request.ext_fields)
        return await self._via_consumer(
            request, h.consumer_group, h.client_id, dict(request.ext_fields), request.body
        )

    async def consume_message_directly(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """Hand one stored message to a consumer's listener and relay the result
        (docs/wire-protocol.md §connections)."""
        h = ConsumeMessageDirectlyRequestHeader.from_ext_fields(request.ext_fields)
        try:
            _, phys = decode_msg_id(h.msg_id or "")
        except ValueError as exc:
            raise system_error(str(exc)) from None
        try:
            found = self.broker.store.look_message_by_offset(phys)
        except CorruptRecordError as e:  # a damaged record (set aside, an ERROR said so) is never handed out
            raise system_error(f"can not find message by the offset, {phys}: {e.reason}") from None
        if found is None:
            raise system_error(f"can not find message by the offset, {phys}")
        ext = {**request.ext_fields, "brokerName": self.broker.config.broker_name}
        return await self._via_consumer(request, h.consumer_group, h.client_id or "", ext, bytes(found.raw))

    async def _via_consumer(
        self, request: RemotingCommand, group: str, client_id: str, ext: dict[str, str], body: bytes
    ) -> RemotingCommand:
        """Send `request.code` to the live consumer `client_id` of `group`; its answer is ours."""
        info = self.broker.consumers.get(group)
        channel = next(
            (c for c in (info.channels.values() if info else ()) if c.client_id == client_id), None
        )
        if channel is None:
            raise system_error(f"The Consumer <{group}> <{client_id}> not online")
        if channel.version < Version.V3_1_8_SNAPSHOT:
            raise system_error(f"The Consumer <{group}> Version <{channel.version}> too low to finish")
        try:
            answer = await channel.conn.invoke(
                RemotingCommand.request(request.code, ext, body), CLIENT_CALL_TIMEOUT
            )
        except RemotingTimeoutError:
            raise fail(ResponseCode.CONSUME_MSG_TIMEOUT, f"consumer <{client_id}> timeout") from None
        except RemotingError as exc:
            raise system_error(f"invoke consumer <{client_id}> failed: {exc}") from None
        return request.make_response(answer.code, answer.remark, dict(answer.ext_fields), answer.body)

    def all_producers(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """GET_ALL_PRODUCER_INFO (328): every live producer connection by group."""
        data = {
            group: [
                {
                    "clientId": c.client_id,
                    "remoteIP": c.conn.peer,
                    "language": c.language,
                    "version": c.version,
                    "lastUpdateTimestamp": c.last_update,
                }
                for c in channels.values()
            ]
            for group, channels in list(self.broker.producers.groups.items())
        }
        return request.make_response(body=fastjson.dumps({"data": data}))

    def clean_unused_topic(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """CLEAN_UNUSED_TOPIC (316): drop consume queues of topics that have no config any more."""
        store = self.broker.store
        keep = self.broker.topics.names() | {SCHEDULE_TOPIC, TRANS_OP_HALF_TOPIC, DLEDGER_TERM_TOPIC}
        store.delete_topics(
            {
                topic
                for topic, _ in store.topic_queue_table()
                if topic not in keep and not topic.startswith(REVIVE_TOPIC_PREFIX)  # (POP's, DLedger)
            }
        )
        return request.make_response()

    def clone_group_offset(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = CloneGroupOffsetRequestHeader.from_ext_fields(request.ext_fields)
        offsets = self.broker.offsets
        topics = [h.topic] if h.topic else sorted(offsets.topics_of(h.src_group))
        for topic in topics:
            for qid, off in offsets.offsets_of(h.src_group, topic).items():
                offsets.commit_offset(h.dest_group, topic, qid, off)
        return request.make_response()

    # ------------------------------------------------------------------ runtime and configuration

    def runtime_info(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.make_response(body=KVTable(self.broker.runtime_info()).dumps())

    def get_config(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = GetBrokerConfigResponseHeader(self.config_version.dumps().decode())
        config = self.broker.config
        # what 4.9.8 derives where our empty default means "derive it" (brokerIP2 is brokerIP1's address,
        # ...), and the home is where the ACL files are looked for
        effective = {key: value for key, (value, _) in config.derived().items()}
        effective["rocketmqHome"] = config.rocketmq_home or os.getcwd()
        body = wire_properties(config, request.ext_fields, effective)
        return request.make_response(ext_fields=header.to_ext_fields(), body=body)

    def update_config(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        try:
            updates = parse_properties(request.body.decode("utf-8"))
        except (UnicodeDecodeError, ConfigError):
            raise system_error("string2Properties error") from None
        if CONFIG_BLACK_LIST & updates.keys():
            raise fail(ResponseCode.NO_PERMISSION, "Can not update config in black list.")
        config = self.broker.config
        refuse_unsafe(updates, request.ext_fields, current=config, trusted=self.broker.trusted(conn, request))
        try:
            changed = coerce_properties(config, updates, ignore_unknown=True)
            slice_us = changed.get("sched_slice_micros")
            if isinstance(slice_us, int):  # read at the next start, which would refuse a bad one
                check_sched_slice(slice_us)
            reserved = changed.get("file_reserved_time")
            if isinstance(reserved, int):
                check_reserved_time(reserved)
            ratio = changed.get("disk_max_used_space_ratio")
            if isinstance(ratio, int):  # kept as written, used as 4.9.8 uses it
                changed["disk_max_used_space_ratio"] = clamped_disk_ratio(ratio)
        except ConfigError as exc:
            raise system_error(str(exc)) from None
        if changed:
            known = {property_key(f) for f in dataclasses.fields(config) if f.name in changed}
            inert = changed.get("rocketmq_inert")
            if isinstance(inert, dict):  # RocketMQ keys we accept without acting on them persist too
                known |= updates.keys() & inert.keys()
            self._persist_config({key: raw for key, raw in updates.items() if key in known})
        store_keys = {f.name for f in dataclasses.fields(StoreConfig)}
        for name, value in changed.items():
            setattr(config, name, value)
            if name in store_keys:  # the store reads its own copy (e.g. fileReservedTime at the next cleanup)
                setattr(self.broker.store.config, name, value)
        if changed:
            self.config_version = DataVersion(self.config_version.counter + 1, int(time.time() * 1000))
            log.info("broker config updated: %s", changed)
        if "broker_permission" in changed:  # every route's perm is capped by it: NameServers take the table
            self.broker.topics.new_version()  # again only at a new data version (4.9.8 bumps it here too)
            self.broker.schedule_register()
        return request.make_response()

    def _persist_config(self, updates: dict[str, str]) -> None:
        """Write the changed keys into the broker's config file before applying them, so a change
        that is answered survives a restart (4.9.8 rewrites the whole file; we keep its comments)."""
        path = Path(self.broker.config.config_path)
        try:
            write_atomically(
                path, edit_properties_file(path, updates), config_file_mode(path, self.broker.config)
            )
        except OSError as exc:
            raise system_error(f"cannot write the broker config {path}: {exc.strerror}") from None
        log.info("broker config %s updated: %s", path, ", ".join(sorted(updates)))

    # ------------------------------------------------------------------ store maintenance

    def clean_expired_consume_queue(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """Destroy the consume queues whose every message lies below the CommitLog minimum."""
        n = self.broker.store.clean_expired_consume_queues()
        log.info("clean expired consume queues requested by %s: %d destroyed", conn.peer, n)
        return request.make_response()

    def delete_expired_commit_log(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """The next cleanup runs delete CommitLog files older than fileReservedTime whatever the hour (only
        those ending at or below ``mqctlUpTo`` when the request bounds them)."""
        h = DeleteExpiredCommitLogHeader.from_ext_fields(request.ext_fields)
        self.broker.store.delete_expired_files_manually(h.mqctl_up_to)
        log.info("manual deletion of expired CommitLog files requested by %s", conn.peer)
        return request.make_response()

    def clean_plan(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """mqctl's dry run of 329: what the next cleanup runs would delete after a manual trigger."""
        store = self.broker.store
        body = PlanBody.of(store.cleanup_plan(manual=True), disk_full=store.disk_full)
        return request.make_response(body=body.dumps())
