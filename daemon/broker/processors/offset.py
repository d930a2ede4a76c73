"""Consumer offsets and queue offset lookups: 14, 15, 29, 30, 31, 32, 43, 45
(docs/wire-protocol.md §consumer-offsets)."""

from __future__ import annotations

import asyncio
import logging
import os
from typing import TYPE_CHECKING

from daemon.broker.headers import (
    OffsetResponseHeader,
    QueryConsumerOffsetRequestHeader,
    QueueHeader,
    SearchOffsetRequestHeader,
    TimestampResponseHeader,
    UpdateConsumerOffsetRequestHeader,
)
from daemon.broker.processors import fail
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.connection import Connection, Processor
from daemon.remoting.limits import WarningGate, shown
from store import fastjson
from store.names import MAX_GROUP_LENGTH, MAX_TOPIC_LENGTH, NAME_CHARS, legal_name

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from daemon.broker.context import BrokerContext

#: Entries of GET_ALL_CONSUMER_OFFSET's body encoded at a time on the loop.
OFFSETS_WIRE_SLICE = 300

#: Java's `accessMessageInMemoryMaxRatio`: data within 40 % of RAM of the log's end counts as "hot".
_HOT_RATIO = 0.4


def _memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 8 << 30


def processors(broker: BrokerContext) -> dict[int, Processor]:
    p = OffsetProcessor(broker)
    return {
        RequestCode.QUERY_CONSUMER_OFFSET: p.query_consumer_offset,
        RequestCode.UPDATE_CONSUMER_OFFSET: p.update_consumer_offset,
        RequestCode.GET_MAX_OFFSET: p.max_offset,
        RequestCode.GET_MIN_OFFSET: p.min_offset,
        RequestCode.GET_EARLIEST_MSG_STORETIME: p.earliest_time,
        RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: p.search_by_timestamp,
        RequestCode.GET_ALL_CONSUMER_OFFSET: p.all_consumer_offsets,
        RequestCode.GET_ALL_DELAY_OFFSET: p.all_delay_offsets,
    }


class OffsetProcessor:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker
        self._hot_bytes = int(_memory_bytes() * _HOT_RATIO)
        self._refusals = WarningGate(log)

    def _first_message_hot(self, topic: str, queue_id: int) -> bool:
        """Whether the queue's first message is recent enough to be in memory (Java's residency check)."""
        store = self.broker.store
        result = store.get_messages("", topic, queue_id, 0, 1)
        if not result.messages:
            return True
        return store.max_phy_offset - result.messages[0].phys_offset <= self._hot_bytes

    def query_consumer_offset(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = QueryConsumerOffsetRequestHeader.from_ext_fields(request.ext_fields)
        offset = self.broker.offsets.query_offset(h.consumer_group, h.topic, h.queue_id)
        if offset < 0:
            # a new group on a young queue starts from 0 even with CONSUME_FROM_LAST_OFFSET
            # (docs/wire-protocol.md §consumer-offsets)
            if self.broker.store.get_min_offset(h.topic, h.queue_id) <= 0 and self._first_message_hot(
                h.topic, h.queue_id
            ):
                offset = 0
            else:
                raise fail(
                    ResponseCode.QUERY_NOT_FOUND,
                    "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first",
                )
        return request.make_response(ext_fields=OffsetResponseHeader(offset).to_ext_fields())

    def _commit_problem(
        self, conn: Connection, h: UpdateConsumerOffsetRequestHeader
    ) -> tuple[int, str] | None:
        """Why a commit may not be kept: a new group's name no group may have, a topic this broker lacks, a
        queue past its count, or (protected mode, a peer off this machine) a group that does not exist.
        4.9.8 keeps whatever is named: a peer's commits of invented ~100 KB names grew consumerOffset.json
        (and every slave's copy of it) without bound. A group that exists is committed for whatever its
        name (one created on use, or kept from 4.9.8's files, which take any name): most commits are
        one-way, so a refusal would lose its offsets unseen. A replica (a slave, a DLedger member not
        leading) takes a commit for a topic it has not synced yet when the group exists and the peer may
        create on use: a client that found no master commits there, and the topic may be seconds old."""
        broker, group, topic = self.broker, h.consumer_group, h.topic
        exists = broker.groups.get(group) is not None
        if not exists and (not legal_name(group) or len(group) > MAX_GROUP_LENGTH):
            return (
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                f"consumer group {shown(group)} must be 1 to {MAX_GROUP_LENGTH} characters of {NAME_CHARS}",
            )
        config = broker.topics.get(topic)
        if config is None:
            replica = broker.ha_slave is not None or (
                broker.dledger is not None and not broker.dledger.node.is_leader
            )
            named = legal_name(topic) and len(topic) <= MAX_TOPIC_LENGTH
            if replica and exists and named and broker.creation_refusal(conn, f"topic {topic}") is None:
                return None
            return ResponseCode.TOPIC_NOT_EXIST, f"topic[{shown(topic)}] not exist, apply first please!"
        if not 0 <= h.queue_id < max(config.read_queue_nums, config.write_queue_nums):
            return (
                ResponseCode.SYSTEM_ERROR,
                f"queueId[{h.queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:"
                f"[{config.read_queue_nums}] consumer:[{group}]",
            )
        if not exists:
            why = broker.creation_refusal(conn, f"subscription group {group}")
            if why is not None:
                return ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, why
        return None

    def update_consumer_offset(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = UpdateConsumerOffsetRequestHeader.from_ext_fields(request.ext_fields)
        problem = self._commit_problem(conn, h)
        if problem is not None:
            if request.is_oneway:  # (nobody hears the answer: the operator reads it here)
                self._refusals.warning("offset commit from %s refused: %s", conn.peer, problem[1])
            raise fail(*problem)
        self.broker.offsets.commit_offset(h.consumer_group, h.topic, h.queue_id, h.commit_offset)
        if self.broker.ha_slave is not None:  # a client that found no master: hand it on (see sync_metadata)
            self.broker.slave_commits[(h.consumer_group, h.topic, h.queue_id)] = h.commit_offset
        return request.make_response()

    def max_offset(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = QueueHeader.from_ext_fields(request.ext_fields)
        offset = self.broker.store.get_max_offset(h.topic, h.queue_id)
        return request.make_response(ext_fields=OffsetResponseHeader(offset).to_ext_fields())

    def min_offset(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = QueueHeader.from_ext_fields(request.ext_fields)
        offset = self.broker.store.get_min_offset(h.topic, h.queue_id)
        return request.make_response(ext_fields=OffsetResponseHeader(offset).to_ext_fields())

    def earliest_time(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = QueueHeader.from_ext_fields(request.ext_fields)
        ts = self.broker.store.get_earliest_message_time(h.topic, h.queue_id)
        return request.make_response(ext_fields=TimestampResponseHeader(ts).to_ext_fields())

    def search_by_timestamp(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = SearchOffsetRequestHeader.from_ext_fields(request.ext_fields)
        offset = self.broker.store.search_offset_by_timestamp(h.topic, h.queue_id, h.timestamp)
        return request.make_response(ext_fields=OffsetResponseHeader(offset).to_ext_fields())

    async def all_consumer_offsets(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """Every committed offset (a slave's sync, tools): encoded a slice of entries at a time, the loop
        serving other requests between slices."""
        parts = []
        for piece in self.broker.offsets.wire_slices(OFFSETS_WIRE_SLICE):
            parts.append(piece)
            await asyncio.sleep(0)
        return request.make_response(body="".join(parts).encode("utf-8", "replace"))

    def all_delay_offsets(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        table = self.broker.store.configs.delay_offsets.offsets()
        return request.make_response(body=fastjson.dumps({"offsetTable": table}, bare_int_keys=True))
