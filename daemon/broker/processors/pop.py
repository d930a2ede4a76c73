"""RocketMQ 5.x's remoting POP codes over :class:`daemon.broker.pop.PopService`: POP_MESSAGE (200050),
ACK_MESSAGE (200051), BATCH_ACK_MESSAGE (200151), CHANGE_MESSAGE_INVISIBLETIME (200053).

Headers and bodies are 5.x's, so a 5.x Proxy in cluster mode (or a 5.x remoting POP consumer) can use
this broker: a POP_MESSAGE response carries the records as stored plus ``startOffsetInfo`` /
``msgOffsetInfo`` / ``orderCountInfo``, from which the client builds each message's handle
(``MQClientAPIImpl#processPopResponse``); the handle is the ``extraInfo`` of the ack and change.
"""

from __future__ import annotations

import base64
import contextlib
import re
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from daemon.broker.headers import (
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    ChangeInvisibleTimeResponseHeader,
    PopMessageRequestHeader,
    PopMessageResponseHeader,
)
from daemon.broker.polls import POLLING_FULL
from daemon.broker.pop import (
    MAX_POP_BATCH,
    NORMAL_TOPIC,
    ORDER_REVIVE_QUEUE,
    PROPERTY_POP_CK,
    PopError,
    PoppedMessage,
    ReceiptHandle,
)
from daemon.broker.retry import copy_of
from daemon.remoting.codes import INVALID_PARAMETER, RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.connection import Connection, Processor
from store import fastjson
from store.record import decode_records, encode_record

if TYPE_CHECKING:
    from daemon.broker.context import BrokerContext

#: 5.x ``ResponseCode.POLLING_TIMEOUT``: a pop that found nothing in its poll time (4.9.8 has no POP,
#: and gives the number to an ACL code).
POLLING_TIMEOUT = 210
#: A processor's answer: at once, or once what it logged is held (DLedger).
_Answer = RemotingCommand | Awaitable[RemotingCommand]
#: The most offsets one BATCH_ACK_MESSAGE may name (a thousand pops' worth): each costs a lookup on the
#: event loop, and a frame of bit sets names millions.
MAX_BATCH_ACK_OFFSETS = 1024 * MAX_POP_BATCH


def processors(broker: BrokerContext) -> dict[int, Processor]:
    p = PopProcessor(broker)
    return {
        RequestCode.POP_MESSAGE: p.pop,
        RequestCode.ACK_MESSAGE: p.ack,
        RequestCode.BATCH_ACK_MESSAGE: p.batch_ack,
        RequestCode.CHANGE_MESSAGE_INVISIBLETIME: p.change_invisible,
    }


def offset_infos(
    popped: list[tuple[PoppedMessage, ReceiptHandle]], fifo: bool
) -> tuple[str, str, str | None]:
    """``startOffsetInfo``, ``msgOffsetInfo`` and ``orderCountInfo`` of a pop (``ExtraInfoUtil``'s
    ``build*Info``): per (topic type, queue) its checkpoint offset and its messages' offsets, per
    message (FIFO) how often it was delivered before."""
    starts: dict[tuple[str, int], int] = {}
    offsets: dict[tuple[str, int], list[int]] = {}
    counts: list[str] = []
    for m, h in popped:
        key = (h.topic_type, h.queue_id)
        starts.setdefault(key, h.ck_queue_offset)
        offsets.setdefault(key, []).append(h.queue_offset)
        counts.append(f"{h.topic_type} qo{h.queue_id}%{h.queue_offset} {m.delivery_attempt - 1}")
    start_info = ";".join(f"{t} {q} {o}" for (t, q), o in starts.items())
    msg_info = ";".join(f"{t} {q} {','.join(map(str, o))}" for (t, q), o in offsets.items())
    return start_info, msg_info, ";".join(counts) if fifo else None


def as_popped_topic(m: PoppedMessage, h: ReceiptHandle) -> bytes:
    """The record as a POP response carries it: a message from the group's retry topic re-encoded with
    the topic it was sent to and its handle ``h`` in ``POP_CK`` (5.x's default,
    ``popResponseReturnActualRetryTopic=false``), others as stored."""
    if h.topic_type == NORMAL_TOPIC:
        return m.record
    old = decode_records(m.record)[0]
    msg = copy_of(old, m.topic or old.topic, old.queue_id, {**old.properties, PROPERTY_POP_CK: h.extra_info})
    return encode_record(
        msg,
        queue_offset=old.queue_offset,
        physical_offset=old.commit_log_offset,
        store_timestamp=old.store_timestamp,
        store_host=old.store_host,
    )


def bitset_offsets(encoded: str | bytes | list[int] | None, limit: int = MAX_POP_BATCH) -> list[int]:
    """The bit numbers a Java ``BitSet#toByteArray`` (fastjson: Base64) sets, lowest first; at most
    ``limit + 1`` of them (one more than a pop lends says the bit set is no pop's), found without
    walking its zero bytes."""
    if not encoded:
        return []
    raw = bytes(b & 0xFF for b in encoded) if isinstance(encoded, list) else base64.b64decode(encoded)
    out: list[int] = []
    for found in _NONZERO.finditer(raw):
        i, byte = found.start(), raw[found.start()]
        out.extend(i * 8 + bit for bit in range(8) if byte >> bit & 1)
        if len(out) > limit:
            return out[: limit + 1]
    return out


_NONZERO = re.compile(rb"[^\x00]")


def _number(ack: dict[str, Any], short: str, name: str) -> int:
    """A ``BatchAck`` number by its fastjson short name or its full one (``alternateNames``)."""
    value = ack.get(short, ack.get(name))
    return int(value) if isinstance(value, (int, str)) else 0


class PopProcessor:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker

    def pop(self, conn: Connection, request: RemotingCommand) -> Awaitable[RemotingCommand]:
        h = PopMessageRequestHeader.from_ext_fields(request.ext_fields)
        if h.max_msg_nums > MAX_POP_BATCH:  # checked here: the service itself clamps (the gRPC front's)
            ip = self.broker.config.broker_ip1
            raise PopError(
                INVALID_PARAMETER, f"the broker[{ip}] pop message's num is greater than {MAX_POP_BATCH}"
            )
        parked = self.broker.parking_refusal(conn, h.topic)
        if parked is not None:
            raise PopError(ResponseCode.NO_PERMISSION, parked)
        return self._pop(conn, request, h)

    async def _pop(
        self, conn: Connection, request: RemotingCommand, h: PopMessageRequestHeader
    ) -> RemotingCommand:
        broker = self.broker
        config, polls = broker.config, broker.polls
        budget = None  # (the host its wait counts on, once counted)
        if h.poll_time > 0:
            budget = polls.take(
                conn,
                conn.address[0],
                config.max_held_pulls_per_connection,
                config.max_held_pulls_per_host,
                f"pop of {h.topic} for {h.consumer_group}",
            )
        try:
            popped = await broker.pop.pop(
                group=h.consumer_group,
                topic=h.topic,
                queue_id=h.queue_id,
                max_messages=h.max_msg_nums,
                invisible_ms=h.invisible_time,
                poll_ms=h.poll_time if budget is not None else 0,  # over its bounds: read once, no wait
                fifo=h.order,
                expression_type=h.exp_type or "TAG",
                expression=h.exp or "*",
                attempt_id=h.attempt_id,
                init_mode=h.init_mode,
                peer=conn,
                gone=conn.lost,
            )
        except PopError as exc:
            return request.make_response(exc.code, exc.remark)
        finally:
            if budget is not None:
                polls.give(conn, budget)
        revive_qid = ORDER_REVIVE_QUEUE if h.order else 0
        if not popped:
            header = PopMessageResponseHeader(0, h.invisible_time, revive_qid, self._rest(h))
            if budget is None and h.poll_time > 0:  # as 5.x's: its client pops again after a pause
                return request.make_response(POLLING_FULL, "polling full", header.to_ext_fields())
            return request.make_response(POLLING_TIMEOUT, "no new message", header.to_ext_fields())
        handles = [(m, m.handle or ReceiptHandle.decode(m.receipt_handle)) for m in popped]
        first = handles[0][1]
        start_info, msg_info, count_info = offset_infos(handles, h.order)
        header = PopMessageResponseHeader(
            first.pop_time, first.invisible_ms, revive_qid, self._rest(h), start_info, msg_info, count_info
        )
        body = b"".join(as_popped_topic(m, handle) for m, handle in handles)
        return request.make_response(ResponseCode.SUCCESS, None, header.to_ext_fields(), body)

    def _rest(self, h: PopMessageRequestHeader) -> int:
        """Messages of the topic the group has not popped yet (``restNum``)."""
        broker = self.broker
        config = broker.topics.get(h.topic)
        if config is None:
            return 0
        queues = [h.queue_id] if h.queue_id >= 0 else range(config.read_queue_nums)
        rest = 0
        for q in queues:
            done = broker.pop.pop_offset(h.consumer_group, h.topic, q)
            rest += max(0, broker.store.get_max_offset(h.topic, q) - max(done, 0))
        return rest

    def ack(self, conn: Connection, request: RemotingCommand) -> _Answer:
        h = AckMessageRequestHeader.from_ext_fields(request.ext_fields)
        pop = self.broker.pop
        try:
            ended = pop.ack_one(group=h.consumer_group, topic=h.topic, receipt_handle=h.extra_info)
        except PopError as exc:
            return request.make_response(exc.code, exc.remark)
        return self._held(request, pop.log_acks([ended]), request.make_response())

    def _held(
        self, request: RemotingCommand, logged: Awaitable[None] | None, answer: RemotingCommand
    ) -> _Answer:
        """``answer`` at once when there is no revive record to hold (no DLedger group: no task for it),
        else once the group's quorum holds them (``logged``)."""
        return answer if logged is None else self._hold(request, logged, answer)

    async def _hold(
        self, request: RemotingCommand, logged: Awaitable[None], answer: RemotingCommand
    ) -> RemotingCommand:
        try:
            await logged
        except PopError as exc:
            return request.make_response(exc.code, exc.remark)
        return answer

    def batch_ack(self, conn: Connection, request: RemotingCommand) -> _Answer:
        """Each ``BatchAck`` names a checkpoint (queue, start offset, popTime, invisibleTime) and a bit set
        of offsets after its start: every one of them whose lending is still that one is acked."""
        try:
            body = fastjson.loads(request.body or b"{}")
        except (ValueError, UnicodeDecodeError):
            return request.make_response(ResponseCode.MESSAGE_ILLEGAL, "bad BatchAckMessageRequestBody")
        acks: list[Any] = body.get("acks") or [] if isinstance(body, dict) else []
        broker_name = str(body.get("brokerName") or self.broker.config.broker_name)
        named: list[tuple[str, str, ReceiptHandle]] = []  # all checked before any is acked
        for ack in acks:
            if not isinstance(ack, dict):
                continue
            bits = bitset_offsets(ack.get("b", ack.get("bitSet")))
            if len(bits) > MAX_POP_BATCH:
                return request.make_response(
                    ResponseCode.MESSAGE_ILLEGAL,
                    f"a BatchAck names more than {MAX_POP_BATCH} offsets: one pop lends at most that",
                )
            if len(named) + len(bits) > MAX_BATCH_ACK_OFFSETS:
                return request.make_response(
                    ResponseCode.MESSAGE_ILLEGAL,
                    f"a batch ack names more than {MAX_BATCH_ACK_OFFSETS} offsets",
                )
            group = str(ack.get("c") or ack.get("consumerGroup") or "")
            topic = str(ack.get("t") or ack.get("topic") or "")
            retry = str(ack.get("r") or ack.get("retry") or "0")
            start = _number(ack, "so", "startOffset")
            for bit in bits:
                handle = ReceiptHandle(
                    start,
                    _number(ack, "pt", "popTime"),
                    _number(ack, "it", "invisibleTime"),
                    _number(ack, "rq", "reviveQueueId"),
                    retry,
                    broker_name,
                    _number(ack, "q", "queueId"),
                    start + bit,
                )
                named.append((group, topic, handle))
        pop = self.broker.pop
        ended = []
        for group, topic, handle in named:
            with contextlib.suppress(PopError):  # 5.x acks what it can: changed or expired are skipped
                ended.append(pop.ack_one(group=group, topic=topic, receipt_handle=handle))
        return self._held(request, pop.log_acks(ended), request.make_response())

    def change_invisible(self, conn: Connection, request: RemotingCommand) -> _Answer:
        h = ChangeInvisibleTimeRequestHeader.from_ext_fields(request.ext_fields)
        try:
            handle, records = self.broker.pop.change_now(
                group=h.consumer_group,
                topic=h.topic,
                receipt_handle=h.extra_info,
                invisible_ms=h.invisible_time,
            )
        except PopError as exc:
            return request.make_response(exc.code, exc.remark)
        new = ReceiptHandle.decode(handle)
        header = ChangeInvisibleTimeResponseHeader(new.pop_time, new.invisible_ms, new.revive_qid)
        return self._held(
            request,
            self.broker.pop.hold(records) if records else None,
            request.make_response(ResponseCode.SUCCESS, None, header.to_ext_fields()),
        )
