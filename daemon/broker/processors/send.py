"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320), CONSUMER_SEND_MSG_BACK (36).

The hot path does no JSON work: the header is parsed field by field, properties are split once, and the store
encodes the record. See docs/wire-protocol.md §send-processing and docs/wire-protocol.md §retries for the
rules followed here.
"""

from __future__ import annotations

import asyncio
import logging
import random
import struct
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final

from daemon.broker.headers import (
    ConsumerSendMsgBackRequestHeader,
    SendMessageRequestHeader,
    SendMessageRequestHeaderV2,
)
from daemon.broker.managers.topics import (
    topic_problem,
)
from daemon.broker.processors import FAQ, fail, system_error
from daemon.broker.retry import retry_copy
from daemon.broker.stats import StatsItem
from daemon.dledger import trace
from daemon.dledger.protocol import DLedgerResponseCode
from daemon.remoting import fields
from daemon.remoting.bodies import PermName
from daemon.remoting.codes import RequestCode, ResponseCode, Version
from daemon.remoting.command import RemotingCommand
from daemon.remoting.connection import Connection, Processor, error_response
from daemon.remoting.limits import WarningGate
from store.commitlog import PutMessageStatus
from store.consumequeue import QueueHandle, prefetch
from store.errors import CorruptRecordError
from store.message import (
    MULTI_TAGS_FLAG,
    PROPERTY_CLUSTER,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_MSG_REGION,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TRACE_SWITCH,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_WAIT_STORE_MSG_OK,
    TRANSACTION_TYPE_MASK,
    HostAddress,
    Message,
)
from store.models import TOPIC_SYS_FLAG_UNIT, SubscriptionGroupConfig, TopicConfig
from store.names import (
    NOT_ALLOWED_SEND_TOPICS,
    RETRY_GROUP_TOPIC_PREFIX,
    REVIVE_TOPIC_PREFIX,
    TRANS_HALF_TOPIC,
    dlq_topic,
    retry_topic,
)
from store.record import decode_properties
from store.results import PutResult

if TYPE_CHECKING:
    from daemon.broker.context import BrokerContext

log = logging.getLogger(__name__)

_BATCH_HEAD: Final = struct.Struct(">iiiii")  # total size, magic, body crc, flag, body length
_SHORT: Final = struct.Struct(">h")

#: Store outcome → (response code, remark); codes 0/10/11/12 mean "stored"
#: (docs/wire-protocol.md §send-processing step 7).
_PUT_CODES: dict[PutMessageStatus, tuple[int, str | None]] = {
    PutMessageStatus.PUT_OK: (ResponseCode.SUCCESS, None),
    PutMessageStatus.FLUSH_DISK_TIMEOUT: (ResponseCode.FLUSH_DISK_TIMEOUT, None),
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: (ResponseCode.FLUSH_SLAVE_TIMEOUT, None),
    PutMessageStatus.SLAVE_NOT_AVAILABLE: (ResponseCode.SLAVE_NOT_AVAILABLE, None),
    PutMessageStatus.MESSAGE_ILLEGAL: (
        ResponseCode.MESSAGE_ILLEGAL,
        "the message is illegal, maybe msg body or properties length not matched. msg body length limit 4M, "
        "msg properties length limit 32k.",
    ),
    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: (
        ResponseCode.MESSAGE_ILLEGAL,
        "the message is illegal, maybe msg properties length limit 32k.",
    ),
    PutMessageStatus.SERVICE_NOT_AVAILABLE: (
        ResponseCode.SERVICE_NOT_AVAILABLE,
        "service not available now. It may be caused by one of the following reasons: the broker's disk is "
        "full, messages are put to the slave, message store has been shut down, etc.",
    ),
    PutMessageStatus.CREATE_MAPEDFILE_FAILED: (
        ResponseCode.SYSTEM_ERROR,
        "create mapped file failed, server is busy or broken.",
    ),
    PutMessageStatus.OS_PAGECACHE_BUSY: (
        ResponseCode.SYSTEM_ERROR,
        "[PC_SYNCHRONIZED]broker busy, start flow control for a while",
    ),
}
_STORED = (
    ResponseCode.SUCCESS,
    ResponseCode.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE,
)
#: Outcomes a SYNC_MASTER send goes on to replicate (4.9.8 ``handleHA`` after ``handleDiskFlush``).
_REPLICATE = (PutMessageStatus.PUT_OK, PutMessageStatus.FLUSH_DISK_TIMEOUT)
# read on every send (store/native.py: enum members as Final names)
_SEND_MESSAGE: Final = int(RequestCode.SEND_MESSAGE)
_SEND_BATCH_MESSAGE: Final = int(RequestCode.SEND_BATCH_MESSAGE)
_PUT_UNKNOWN: Final[tuple[int, str | None]] = (ResponseCode.SYSTEM_ERROR, None)
#: The born host of a message whose transport names no peer (4.9.8's channel always has one).
_NO_SOCKET: Final[HostAddress] = ("127.0.0.1", 0)


def quorum_status(code: DLedgerResponseCode) -> PutMessageStatus:
    """A DLedger append's outcome as ``DLedgerCommitLog#asyncPutMessage`` reports it to the send."""
    if code == DLedgerResponseCode.SUCCESS:
        return PutMessageStatus.PUT_OK
    if code in (
        DLedgerResponseCode.INCONSISTENT_LEADER,
        DLedgerResponseCode.NOT_LEADER,
        DLedgerResponseCode.LEADER_NOT_READY,
        DLedgerResponseCode.DISK_FULL,
    ):
        return PutMessageStatus.SERVICE_NOT_AVAILABLE
    if code in (DLedgerResponseCode.WAIT_QUORUM_ACK_TIMEOUT, DLedgerResponseCode.LEADER_PENDING_FULL):
        return PutMessageStatus.OS_PAGECACHE_BUSY  # "not FLUSH_SLAVE_TIMEOUT: the ons client ignores it"
    return PutMessageStatus.UNKNOWN_ERROR  # TERM_CHANGED: this member lost its leadership meanwhile


def processors(broker: BrokerContext) -> dict[int, Processor]:
    p = SendProcessor(broker)
    return {
        RequestCode.SEND_MESSAGE: p.send,
        RequestCode.SEND_MESSAGE_V2: p.send,
        RequestCode.SEND_BATCH_MESSAGE: p.send,
        RequestCode.CONSUMER_SEND_MSG_BACK: p.send_back,
    }


def decode_batch(body: bytes) -> list[tuple[int, bytes, dict[str, str]]]:
    """Split a batch body (docs/wire-protocol.md §send-bodies) into (flag, body, properties) per inner
    message."""
    out = []
    pos = 0
    view = memoryview(body)
    while pos < len(body):
        if pos + _BATCH_HEAD.size > len(body):
            raise system_error("bad batch body: truncated message header")
        total, _magic, _crc, flag, body_len = _BATCH_HEAD.unpack_from(view, pos)
        start = pos + _BATCH_HEAD.size
        props_at = start + body_len
        if body_len < 0 or props_at + 2 > len(body):
            raise system_error("bad batch body: truncated message body")
        (props_len,) = _SHORT.unpack_from(view, props_at)
        end = props_at + 2 + props_len
        if props_len < 0 or end > len(body) or total != end - pos:
            raise system_error("bad batch body: inconsistent message sizes")
        out.append((flag, bytes(view[start:props_at]), decode_properties(view[props_at + 2 : end])))
        pos = end
    return out


def max_reconsume_times(group: SubscriptionGroupConfig, version: int, requested: int | None) -> int:
    """Retries before the DLQ: the client's own limit from 3.4.9 on, else the group's."""
    if version >= Version.V3_4_9 and requested is not None:
        return requested
    return group.retry_max_times


#: SEND_MESSAGE's fields and SEND_MESSAGE_V2's one-letter ones, each in its class's order (every send reads them).
_V1_PLAN: Final = SendMessageRequestHeader._plan()
_V2_PLAN: Final = SendMessageRequestHeaderV2._plan()
_V1_ATTRS: Final = SendMessageRequestHeader._attrs()


def parse_send(code: int, ext: dict[str, str]) -> SendMessageRequestHeader:
    """The V1 header of a send's extFields, built once: SEND_MESSAGE (the C++ client's) names the fields,
    V2 and batches give them one letter each, in V1's order except that `m` (batch) comes before `l`
    (maxReconsumeTimes) in V1. (Here, compiled, not the header's classmethod, and built without its
    dataclass ``__init__``: an interpreted frame on this path is paid by every send.)"""
    v1 = code == _SEND_MESSAGE
    args = fields.parse(_V1_PLAN if v1 else _V2_PLAN, ext)
    if args is None:
        raise (SendMessageRequestHeader if v1 else SendMessageRequestHeaderV2)._field_error(ext)
    if not v1:
        args[11], args[12] = args[12], args[11]
    return fields.build(SendMessageRequestHeader, _V1_ATTRS, args)


def stored_fields(msg_id: str, queue_id: int, queue_offset: int) -> dict[str, str]:
    """`SendMessageResponseHeader(msg_id, queue_id, queue_offset).to_ext_fields()`, written out: every
    send answers with it, and building the header first costs as much as the rest of the reply (a test
    pins the two equal)."""
    return {
        "msgId": msg_id,
        "queueId": str(queue_id),
        "queueOffset": str(queue_offset),
        PROPERTY_MSG_REGION: "DefaultRegion",
        PROPERTY_TRACE_SWITCH: "true",
    }


class QueueSlot(QueueHandle):
    """What a send to one queue needs, in one object reached with the one lookup a send does (the slot
    table, by the header's topic): the store's handle of the queue (this object is one: the store keeps
    its queue current and writes its put hints here), the topic's stats items its puts count in, and the
    topic's config as of :attr:`checked` of the topic table, with the fields of it a send reads copied.
    Before, a send to one of thousands of topics went through a topic's slot, its tuple of handles, the
    handle and the stats items' tuple, each a cold object; now one, the queue itself (then the store's
    queue, its file and page, and the two stats items, as before).

    The table holds a topic's slot of queue 0 (its *head*); a send to another queue of the topic checks
    the topic on the head and goes on to that queue's slot (:meth:`queue`: the head's :attr:`queues`).
    The topic's facts are read from the head alone: the other slots' copies are never read (their
    :attr:`checked` stays -1). Each fact keeps its home: the config the topic table (a slot is a view
    checked against its generation at every send), the queue's offset and files the store's queue, the
    counts the stats items (never replaced: kept ones are the ones every reader reads)."""

    __slots__ = (
        "checked",
        "config",
        "multi_tag",
        "nums",
        "queue_limit",
        "queues",
        "retry",
        "sizes",
        "writable",
        "write_queue_nums",
    )

    # Compiled, these fields sit after the handle's (topic, queue_id, cq, generation, the hints), in the
    # order declared here: those every send reads first, so that the object is two or three lines.
    checked: int
    writable: bool
    retry: bool
    multi_tag: bool
    queue_limit: int
    nums: StatsItem
    sizes: StatsItem
    queues: tuple[QueueSlot | None, ...]
    write_queue_nums: int
    config: TopicConfig

    def __init__(
        self, topic: str, queue_id: int, config: TopicConfig, checked: int, nums: StatsItem, sizes: StatsItem
    ) -> None:
        #: ``topic`` is the name its messages carry (the config's interned name, see
        #: ``SendProcessor._destination``) and the head's key in the processor's table: a send's lookup
        #: compares its own string with the object the send goes on to use.
        super().__init__(topic, queue_id)
        #: A retry topic's sends may go to its group's DLQ (see ``SendProcessor._destination``).
        self.retry = topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
        #: The topic's stats items (TOPIC_PUT_NUMS, TOPIC_PUT_SIZE), never replaced.
        self.nums = nums
        self.sizes = sizes
        #: (the head's) By queue id, the topic's slots; None where no send went yet. A tuple, whose items
        #: sit in the object itself.
        self.queues = ()
        self.config = config
        self.checked = -1
        self.writable = False
        self.queue_limit = 0
        self.write_queue_nums = 0
        self.multi_tag = False
        if checked >= 0:
            self.set_config(config, checked)

    def set_config(self, config: TopicConfig, checked: int) -> None:
        """The topic's config as of generation ``checked`` of the topic table, and the fields of it a send
        reads copied here: the config is an interpreted object (an attribute read goes through its type),
        one more cold object per send with thousands of topics. The table replaces a config to change it,
        never edits one."""
        self.config = config
        self.checked = checked
        self.writable = bool(config.perm & PermName.WRITE)
        self.queue_limit = max(config.write_queue_nums, config.read_queue_nums)
        self.write_queue_nums = config.write_queue_nums
        self.multi_tag = config.topic_filter_type == "MULTI_TAG"

    def warm(self, queue_id: int) -> None:
        """Prefetch what the put of a send to queue ``queue_id`` will read, when that is this slot's queue
        and a put went through it before (a topic of one queue, as thousands of topics usually are; sends
        to a topic's queues in turn find these objects in cache, and a call for them would cost more than
        it saves): with thousands of queues each of those objects is a cache miss, and the put meets them
        one after another, each found through the one before; this starts them all at once, at the send's
        start, to overlap each other and the send's own work. A hint: the put goes through the objects
        themselves, so one gone stale (a file rolled, a topic deleted) costs a useless prefetch."""
        if queue_id == self.queue_id and self.file_at and prefetch is not None:
            prefetch(self.cq, self.nums, self.sizes, self.file_at, self.map_at, self.unit_at)

    def queue(self, queue_id: int) -> QueueSlot:
        """(The head's) the slot of this topic's queue ``queue_id`` (a valid id: at least 0)."""
        if queue_id == self.queue_id:
            return self
        queues = self.queues
        if queue_id < len(queues):
            found = queues[queue_id]
            if found is not None:
                return found
        else:
            queues += (None,) * (queue_id + 1 - len(queues))
        slot = QueueSlot(self.topic, queue_id, self.config, -1, self.nums, self.sizes)
        self.queues = (*queues[:queue_id], slot, *queues[queue_id + 1 :])
        return slot


class SendProcessor:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker
        self.store_host = (broker.config.ip1, broker.config.listen_port)
        #: the connection whose send is being processed (None: a 5.x client's, through the gRPC front)
        self._conn: Connection | None = None
        #: DLedger sends answered in this pass, written in the next loop round (`_write_replies`)
        self._replies: list[tuple[Connection, RemotingCommand, RemotingCommand]] = []
        #: Each topic's send state (its queue 0's slot) by the name sends give (see :meth:`_slot`).
        self._slots: dict[str, QueueSlot] = {}
        #: Protected mode's refusals of topics a peer off this machine would create on use, logged
        self._refusals = WarningGate(log)

    # ------------------------------------------------------------------ checks shared by sends

    def _slot(self, h: SendMessageRequestHeader) -> QueueSlot:
        """The topic's send state, checked as :meth:`_topic_config` checks: a kept one while the topic
        table has not changed since it was made (one int compared; any change, of this topic or not,
        sends every topic through the whole check once more), where the checks that depend on the name
        alone passed before and only the permissions and the queue id are checked again."""
        topics = self.broker.topics
        slot = self._slots.get(h.topic)
        if slot is not None and slot.checked == topics.generation:
            self._check_writable()
            if not slot.writable or h.queue_id >= slot.queue_limit:
                self._check_queue(h, slot.config)  # raises what the whole check would
            return slot
        return self._new_slot(h, slot)

    def _new_slot(self, h: SendMessageRequestHeader, old: QueueSlot | None) -> QueueSlot:
        """The whole check, and the state it leaves for the next sends (``old``'s handles and stats items
        kept when its topic is the same)."""
        topics = self.broker.topics
        slots = self._slots
        slots.pop(h.topic, None)  # a send that fails the check keeps nothing
        generation = topics.generation  # (read first: a change made during the check makes it stale)
        config = self._topic_config(h)
        # the config's interned name when it is h.topic (see TopicConfig); a hand-edited topics.json
        # may file a config under another key, and the message then keeps the topic it was sent to
        topic = config.topic_name if config.topic_name == h.topic else h.topic
        if old is not None and old.topic == topic:
            old.set_config(config, generation)
            slot = old
        else:
            if len(slots) >= len(topics.table):  # slots of deleted topics no send asked for again
                for name in [name for name in slots if topics.get(name) is None]:
                    del slots[name]
            nums, sizes, _ = self.broker.stats.put_items(topic)
            slot = QueueSlot(topic, 0, config, generation, nums, sizes)
        # keyed by the slot's own name (equal to h.topic): a send's lookup compares its fresh string with
        # this key, and the key being the name the send goes on to use makes that one cold object, not two
        slots[slot.topic] = slot
        return slot

    def _check_writable(self) -> None:
        if not self.broker.config.broker_permission & PermName.WRITE:
            raise fail(
                ResponseCode.NO_PERMISSION,
                f"the broker[{self.broker.config.broker_ip1}] sending message is forbidden",
            )

    def _check_queue(self, h: SendMessageRequestHeader, config: TopicConfig) -> None:
        if not config.perm & PermName.WRITE:
            raise fail(ResponseCode.NO_PERMISSION, f"the topic[{h.topic}] sending message is forbidden")
        if h.queue_id >= max(config.write_queue_nums, config.read_queue_nums):
            raise system_error(
                f"request queueId[{h.queue_id}] is illegal, {config} Producer: {h.producer_group}"
            )

    def _topic_config(self, h: SendMessageRequestHeader) -> TopicConfig:
        """Validate the topic and find or auto-create its config
        (docs/wire-protocol.md §send-processing steps 1–4)."""
        problem = topic_problem(h.topic)
        if problem is not None:
            raise system_error(problem)
        if h.topic in NOT_ALLOWED_SEND_TOPICS or h.topic.startswith(REVIVE_TOPIC_PREFIX):
            raise fail(ResponseCode.NO_PERMISSION, f"Sending message to topic[{h.topic}] is forbidden.")
        self._check_writable()
        topics = self.broker.topics
        config = topics.get(h.topic)
        if config is None:
            conn = self._conn
            refused = self.broker.creation_refusal(conn, f"topic {h.topic}") if conn is not None else None
            if refused is not None:
                self._refusals.warning("%s", refused)
                raise fail(ResponseCode.TOPIC_NOT_EXIST, refused)
            sys_flag = TOPIC_SYS_FLAG_UNIT if h.unit_mode else 0
            config = topics.create_in_send(h.topic, h.default_topic, h.default_topic_queue_nums, sys_flag)
            if config is None and h.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                config = topics.create_system_like(h.topic, 1, PermName.READ_WRITE, sys_flag)
            if config is None:
                raise fail(
                    ResponseCode.TOPIC_NOT_EXIST,
                    f"topic[{h.topic}] not exist, apply first please!{FAQ}",
                )
        self._check_queue(h, config)
        return config

    def _retry_or_dlq(
        self, h: SendMessageRequestHeader, version: int, props: dict[str, str]
    ) -> tuple[str, int] | None:
        """For a client re-send to `%RETRY%<group>`: the DLQ target once retries are exhausted
        (docs/wire-protocol.md §send-processing step 5)."""
        group_name = h.topic[len(RETRY_GROUP_TOPIC_PREFIX) :]
        group = self.broker.groups.find(group_name, self._conn)
        if group is None:
            raise fail(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {group_name}"
            )
        if (h.reconsume_times or 0) >= max_reconsume_times(group, version, h.max_reconsume_times):
            dlq = dlq_topic(group_name)
            self.broker.topics.create_system_like(dlq, 1, PermName.READ_WRITE)
            props.pop(PROPERTY_DELAY_TIME_LEVEL, None)
            return dlq, 0
        return None

    # ------------------------------------------------------------------ send

    def send(
        self, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand | Awaitable[RemotingCommand] | None:
        """Synchronous unless the put must wait for an fsync: no task per send on the hot path (a DLedger
        send is answered on `conn` once the quorum holds it: None here)."""
        self._conn = conn
        try:
            # the client's socket address, read when it connected
            return self._send_from(conn.address if conn.address[0] else _NO_SOCKET, request)
        finally:
            self._conn = None

    def send_from(
        self, born_host: HostAddress, request: RemotingCommand
    ) -> RemotingCommand | Awaitable[RemotingCommand]:
        """A send from a client at `born_host` with no connection of ours: a 5.x client's (the gRPC front
        hands its SendMessage here as the SEND_MESSAGE_V2 it stands for). Its answer, or what gives it."""
        answer = self._send_from(born_host, request)
        assert answer is not None  # (None only for a connection's send)
        return answer

    def _send_from(
        self, born_host: HostAddress, request: RemotingCommand
    ) -> RemotingCommand | Awaitable[RemotingCommand] | None:
        """A send from a client at `born_host`: a remoting connection's peer, or a 5.x client's."""
        started = time.perf_counter_ns()  # putLatency99/999 measure the whole send
        h = parse_send(request.code, request.ext_fields)
        slot = self._slot(h)
        slot.warm(h.queue_id)
        props = decode_properties(h.properties) if h.properties else {}
        wait = props.pop(PROPERTY_WAIT_STORE_MSG_OK, "true") != "false"
        props[PROPERTY_CLUSTER] = self.broker.config.broker_cluster_name
        topic, queue_id = self._destination(h, request.version, slot, props)
        sys_flag = h.sys_flag
        if slot.multi_tag:
            sys_flag |= MULTI_TAGS_FLAG
        if request.code == _SEND_BATCH_MESSAGE or h.batch:
            return self._send_batch(
                request, h, slot, topic, queue_id, props, sys_flag, wait, born_host, started
            )
        return self._send_one(request, h, slot, topic, queue_id, props, sys_flag, wait, born_host, started)

    def _destination(
        self, h: SendMessageRequestHeader, version: int, slot: QueueSlot, props: dict[str, str]
    ) -> tuple[str, int]:
        """The topic and queue the message goes to (and is answered with): the requested or a random
        queue, or the DLQ of a retry topic whose retries are exhausted."""
        queue_id = h.queue_id if h.queue_id >= 0 else random.randrange(max(1, slot.write_queue_nums))
        topic = slot.topic
        if slot.retry:
            target = self._retry_or_dlq(h, version, props)
            if target is not None:
                return target
        return topic, queue_id

    # Message(...) is built positionally on this path: with keywords a construction costs several times
    # as much, paid per message of every send.

    def _send_batch(
        self,
        request: RemotingCommand,
        h: SendMessageRequestHeader,
        slot: QueueSlot,
        topic: str,
        queue_id: int,
        props: dict[str, str],
        sys_flag: int,
        wait: bool,
        born_host: HostAddress,
        started: int,
    ) -> RemotingCommand | Awaitable[RemotingCommand] | None:
        if (
            props.get(PROPERTY_TRANSACTION_PREPARED) == "true"
            or props.get(PROPERTY_DELAY_TIME_LEVEL, "0") != "0"
        ):
            raise fail(ResponseCode.MESSAGE_ILLEGAL, "batch message does not support transaction or delay")
        msgs = [
            Message(
                topic,
                body,
                queue_id,
                flag,
                {**inner, **props},
                sys_flag,
                h.born_timestamp,
                born_host,
                self.store_host,
                h.reconsume_times or 0,
                0,  # prepared_transaction_offset
                wait,
            )
            for flag, body, inner in decode_batch(request.body)
        ]
        if not msgs:
            raise fail(ResponseCode.MESSAGE_ILLEGAL, "empty batch")
        if wait and self.broker.offloads_puts:
            return self._offloaded(request, self.broker.store.put_messages, msgs, topic, queue_id, started)
        store = self.broker.store
        if topic is slot.topic:  # (not a DLQ's): the queue's slot, its handle and the topic's stats items
            queue = slot.queue(queue_id)
            result = store.put_messages(msgs, queue)
            return self._respond(request, result, topic, queue_id, wait, started, queue)
        result = store.put_messages(msgs)
        return self._respond(request, result, topic, queue_id, wait, started, None)

    def _send_one(
        self,
        request: RemotingCommand,
        h: SendMessageRequestHeader,
        slot: QueueSlot,
        topic: str,
        queue_id: int,
        props: dict[str, str],
        sys_flag: int,
        wait: bool,
        born_host: HostAddress,
        started: int,
    ) -> RemotingCommand | Awaitable[RemotingCommand] | None:
        reply_queue_id = queue_id
        if props.get(PROPERTY_TRANSACTION_PREPARED) == "true":
            if self.broker.config.reject_transaction_message:
                raise fail(
                    ResponseCode.NO_PERMISSION,
                    f"the broker[{self.broker.config.broker_ip1}] sending transaction message is forbidden",
                )
            props[PROPERTY_REAL_TOPIC] = topic
            props[PROPERTY_REAL_QUEUE_ID] = str(queue_id)
            # stored as a plain message of the half topic (Java resets the type): dispatched there,
            # invisible to consumers of the real topic until END_TRANSACTION commits a copy
            sys_flag &= ~TRANSACTION_TYPE_MASK
            self.broker.topics.create_system_like(TRANS_HALF_TOPIC, 1, PermName.READ_WRITE)
            topic, queue_id = TRANS_HALF_TOPIC, 0
        elif (
            PROPERTY_TIMER_DELIVER_MS in props
            or PROPERTY_TIMER_DELAY_SEC in props
            or PROPERTY_TIMER_DELAY_MS in props
        ):
            topic, queue_id = self.broker.timers.park(topic, queue_id, props)
        msg = Message(
            topic,
            request.body,
            queue_id,
            h.flag,
            props,
            sys_flag,
            h.born_timestamp,
            born_host,
            self.store_host,
            h.reconsume_times or 0,
            0,  # prepared_transaction_offset
            wait,
        )
        if wait and self.broker.offloads_puts:
            return self._offloaded(
                request, self.broker.store.put_message, msg, topic, reply_queue_id, started
            )
        store = self.broker.store
        if topic is slot.topic:  # (not a DLQ, half or timer topic's): the queue's slot
            queue = slot.queue(queue_id)
            result = store.put_message(msg, queue)
            return self._respond(request, result, topic, reply_queue_id, wait, started, queue)
        result = store.put_message(msg)
        return self._respond(request, result, topic, reply_queue_id, wait, started, None)

    async def _offloaded(
        self,
        request: RemotingCommand,
        put: Callable[[Any], PutResult],
        arg: Any,
        topic: str,
        queue_id: int,
        started: int,
    ) -> RemotingCommand:
        result = await self.broker.offload(put, arg)
        return await self._replicated(request, result, topic, queue_id, True, started)

    def _respond(
        self,
        request: RemotingCommand,
        result: PutResult,
        topic: str,
        queue_id: int,
        wait: bool,
        started: int,
        slot: QueueSlot | None,
    ) -> RemotingCommand | Awaitable[RemotingCommand] | None:
        """The response now, or once a slave has the record (SYNC_MASTER and the producer waits), or (DLedger
        mode) once a quorum of the group has it, whether or not the producer waits (as 4.9.8): then written
        on the send's connection (None here), or given by a future (a send with no connection)."""
        group = self.broker.dledger
        if group is not None and result.status in _REPLICATE:
            # the put appended its entries just now, on this loop: the last one is the log's last
            answer = QuorumAnswer(self, request, result, topic, queue_id, started, self._conn, slot)
            if trace.ENABLED:
                trace.mark("send-read", group.log.last_index, started)  # (perf_counter: CLOCK_MONOTONIC too)
                trace.mark("appended", group.log.last_index)
                answer.index = group.log.last_index
            group.when_committed(group.log.last_index, answer.committed)
            return answer.future
        ha = self.broker.ha_master
        if wait and ha is not None and ha.sync and result.status in _REPLICATE:
            return self._replicated(request, result, topic, queue_id, wait, started)
        return self.response(request, result, topic, queue_id, started, slot)

    async def _replicated(
        self, request: RemotingCommand, result: PutResult, topic: str, queue_id: int, wait: bool, started: int
    ) -> RemotingCommand:
        ha = self.broker.ha_master
        if wait and ha is not None and ha.sync and result.status in _REPLICATE:
            status = await ha.wait_replicated(result.phys_offset + result.wrote_bytes)
            if status is not PutMessageStatus.PUT_OK:
                result.status = status
        return self.response(request, result, topic, queue_id, started)

    def reply_soon(self, conn: Connection, request: RemotingCommand, response: RemotingCommand) -> None:
        """Write `response` in the next loop round, with every other answered in this pass: when an
        answer's future would have been done (replies written at once bring the next sends in one by one,
        and each push then carries fewer entries), without a future and two callbacks per send."""
        if not self._replies:
            asyncio.get_running_loop().call_soon(self._write_replies)
        self._replies.append((conn, request, response))

    def _write_replies(self) -> None:
        replies, self._replies = self._replies, []
        for conn, request, response in replies:
            try:
                conn.reply(request, response)
            except Exception:  # one broken connection must not strand the others' replies
                log.exception("writing a send's answer to %s failed", conn.peer)

    def response(
        self,
        request: RemotingCommand,
        result: PutResult,
        topic: str,
        queue_id: int,
        started: int,
        slot: QueueSlot | None = None,
    ) -> RemotingCommand:
        """The reply to a send whose put ended; its stats counted in the items ``slot`` holds (the topic's,
        kept by the send's queue slot) or, without one, in ``topic``'s."""
        code, remark = _PUT_CODES.get(result.status, _PUT_UNKNOWN)
        if code not in _STORED:
            self.broker.stats.on_put_failed()
            return request.make_response(code, remark or result.status.value)
        size = result.wrote_bytes or len(request.body)
        elapsed = time.perf_counter_ns() - started
        if slot is not None:
            self.broker.stats.on_put_counts(slot.nums, slot.sizes, result.msg_num, size, elapsed)
        else:
            self.broker.stats.on_put(topic, result.msg_num, size, elapsed)
        fields = stored_fields(result.msg_id, queue_id, result.queue_offset)
        return request.make_response(code, remark, fields)

    # ------------------------------------------------------------------ consumer send-back (retry)

    async def send_back(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = ConsumerSendMsgBackRequestHeader.from_ext_fields(request.ext_fields)
        broker = self.broker
        group = broker.groups.find(h.group, conn)
        if group is None:
            raise fail(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {h.group}")
        if not broker.config.broker_permission & PermName.WRITE:
            raise fail(
                ResponseCode.NO_PERMISSION,
                f"the broker[{broker.config.broker_ip1}] sending message is forbidden",
            )
        if group.retry_queue_nums <= 0:
            return request.make_response()
        retry = broker.topics.create_system_like(
            retry_topic(h.group), group.retry_queue_nums, PermName.READ_WRITE, 1 if h.unit_mode else 0
        )
        if not retry.perm & PermName.WRITE:
            raise fail(
                ResponseCode.NO_PERMISSION, f"the topic[{retry.topic_name}] sending message is forbidden"
            )
        try:
            found = broker.store.look_message_by_offset(h.offset)
        except CorruptRecordError as e:  # a damaged record (set aside, an ERROR said so) is sent back never
            raise system_error(f"look message by offset failed, {h.offset}: {e.reason}") from None
        if found is None:
            raise system_error(f"look message by offset failed, {h.offset}")
        old = found.stored
        parked = broker.parking_refusal(conn, old.topic)
        if parked is not None:  # its copy in the group's retry topic would be the peer's to pull
            raise fail(ResponseCode.NO_PERMISSION, parked)
        max_times = max_reconsume_times(group, request.version, h.max_reconsume_times)
        delay: int | None = h.delay_level
        if old.reconsume_times >= max_times or h.delay_level < 0:
            topic = dlq_topic(h.group)
            dlq = broker.topics.create_system_like(topic, 1, PermName.READ_WRITE)
            if not dlq.perm & PermName.WRITE:
                raise fail(ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden")
            queue_id, delay = 0, None
        else:
            topic = retry.topic_name
            queue_id = random.randrange(max(1, retry.write_queue_nums))
            delay = h.delay_level if h.delay_level > 0 else 3 + old.reconsume_times
        msg = retry_copy(old, topic, queue_id, self.store_host, delay)
        result = await broker.put(msg)
        if not result.ok:
            raise system_error(result.status.value)
        broker.stats.on_put(topic, 1, result.wrote_bytes)
        broker.stats.on_send_back(h.group, msg.properties[PROPERTY_RETRY_TOPIC])
        return request.make_response()


class QuorumAnswer:
    """A DLedger send's answer, made when the group learns whether a quorum holds its entries
    (:meth:`committed`, called in the pass that learns it) and written on `conn` in the next round
    (:meth:`SendProcessor.reply_soon`); with no connection (the gRPC front) given by `future`. A waiting
    send costs no task of its own."""

    def __init__(
        self,
        processor: SendProcessor,
        request: RemotingCommand,
        result: PutResult,
        topic: str,
        queue_id: int,
        started: int,
        conn: Connection | None = None,
        slot: QueueSlot | None = None,
    ) -> None:
        self.conn = conn
        #: the send's queue slot, holding the topic's stats items (None: counted by the topic's name)
        self.slot = slot
        self.future: asyncio.Future[RemotingCommand] | None = (
            None if conn is not None else asyncio.get_running_loop().create_future()
        )
        self.done = False
        self.processor = processor
        self.request = request
        self.result = result
        self.topic = topic
        self.queue_id = queue_id
        self.started = started
        #: the entry's index, kept to mark its reply's write when the timeline is traced
        self.index = -1

    def committed(self, code: DLedgerResponseCode) -> None:
        if self.done:
            return
        self.done = True
        self.result.status = quorum_status(code)
        try:
            response = self.processor.response(
                self.request, self.result, self.topic, self.queue_id, self.started, self.slot
            )
        except Exception as exc:
            if self.future is not None:
                self.future.set_exception(exc)
                return
            log.exception("answering a send from %s failed", self.conn.peer if self.conn else "?")
            response = error_response(self.request, exc)
        if self.conn is not None:
            self.processor.reply_soon(self.conn, self.request, response)
        elif self.future is not None:
            self.future.set_result(response)
        if (
            trace.ENABLED
        ):  # the reply is written in the round this queues (after reply_soon's, or the future's)
            asyncio.get_running_loop().call_soon(trace.mark, "reply-write", self.index)
