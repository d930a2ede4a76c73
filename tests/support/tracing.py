"""A tracing producer and consumer: what a 4.x client with ``enableMsgTrace`` does, over our wire client.

Each send writes a ``Pub`` record, each consume attempt a ``SubBefore`` and a ``SubAfter`` sharing a
request id (with the retry count the broker delivered), each end of a transaction an ``EndTransaction``,
as 4.9.8's SendMessageTraceHookImpl / ConsumeMessageTraceHookImpl / EndTransactionTraceHookImpl fill
them. The records are batched and sent to the trace topic by :meth:`TracingClient.flush` as
``AsyncTraceDispatcher`` sends them: one message per batch, keyed by every traced client id and key,
from a producer group of its own.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field

from mqctl.admin import messaging as wire
from mqctl.admin.client import Admin
from mqctl.services.messages import writable_queues
from mqctl.tracedata import TraceRecord, encode_trace, trace_keys
from store import PROPERTY_KEYS, PROPERTY_TAGS, TRACE_TOPIC, StoredMessage

REGION = "DefaultRegion"  # what the broker's send response carries (MSG_REGION)


@dataclass
class Sent:
    unique_key: str
    msg_id: str
    topic: str
    broker_addr: str
    queue_id: int
    queue_offset: int


@dataclass
class TracingClient:
    """One client's trace dispatcher: records wait in ``pending`` until :meth:`flush`."""

    admin: Admin
    trace_topic: str = TRACE_TOPIC
    pending: list[TraceRecord] = field(default_factory=list)
    _requests: itertools.count[int] = field(default_factory=itertools.count)

    async def send(
        self, topic: str, body: bytes, *, group: str, tags: str | None = None, keys: str | None = None
    ) -> Sent:
        """Send a message to the first writable queue of ``topic`` and record its ``Pub``."""
        ref = (await writable_queues(self.admin, topic))[0]
        props = {k: v for k, v in ((PROPERTY_TAGS, tags), (PROPERTY_KEYS, keys)) if v}
        started = int(time.time() * 1000)
        result = await wire.send(
            self.admin, ref.addr, topic, body, queue_id=ref.queue_id, properties=props, group=group
        )
        self.pending.append(
            TraceRecord(
                "Pub",
                result.msg_id,
                timestamp_ms=started,
                region_id=REGION,
                group=group,
                topic=topic,
                tags=tags,
                keys=keys,
                store_host=ref.addr,
                body_size=len(body),
                cost_ms=int(time.time() * 1000) - started,
                msg_type="Normal_Msg",
                msg_id=result.offset_msg_id,
                success=result.status == "SEND_OK",
            )
        )
        return Sent(
            result.msg_id, result.offset_msg_id, topic, ref.addr, result.queue_id, result.queue_offset
        )

    async def consume(
        self,
        sent: Sent,
        *,
        group: str,
        ok: bool = True,
        retry_times: int = 0,
        result: int | None = None,
        finished: bool = True,
    ) -> StoredMessage:
        """Pull ``sent`` for ``group`` and record the attempt: ``ok`` is what the handler returned,
        ``retry_times`` how often it was delivered before, ``result`` the ConsumeReturnType ordinal
        (SUCCESS when ok, else FAILED); without ``finished`` the handler never returned (no SubAfter)."""
        pulled = await wire.pull(
            self.admin,
            sent.broker_addr,
            sent.topic,
            sent.queue_id,
            sent.queue_offset,
            group=group,
            max_nums=1,
        )
        [m] = pulled.messages
        assert m.uniq_key == sent.unique_key
        request_id = f"{sent.unique_key[:16]}{next(self._requests):016X}"
        began = int(time.time() * 1000)
        keys = " ".join(m.keys) or None
        self.pending.append(
            TraceRecord(
                "SubBefore",
                sent.unique_key,
                timestamp_ms=began,
                region_id=REGION,
                group=group,
                request_id=request_id,
                retry_times=retry_times,
                keys=keys,
            )
        )
        if not finished:
            return m
        self.pending.append(
            TraceRecord(
                "SubAfter",
                sent.unique_key,
                timestamp_ms=int(time.time() * 1000),
                group=group,
                request_id=request_id,
                cost_ms=int(time.time() * 1000) - began,
                success=ok,
                keys=keys,
                context_code=result if result is not None else 0 if ok else 4,
            )
        )
        return m

    async def flush(self) -> Sent:
        """Send every pending record in one trace message (auto-creating the trace topic as a client's
        trace producer does, through TBW102), keyed as AsyncTraceDispatcher keys it."""
        records, self.pending = self.pending, []
        return await send_trace_body(self.admin, encode_trace(records), trace_keys(records), self.trace_topic)


async def send_trace_body(admin: Admin, body: bytes, keys: list[str], trace_topic: str = TRACE_TOPIC) -> Sent:
    """Put a recorded trace body into ``trace_topic`` as a client's trace producer would send it."""
    ref = (await writable_queues(admin, trace_topic))[0]
    result = await wire.send(
        admin,
        ref.addr,
        trace_topic,
        body,
        queue_id=ref.queue_id,
        properties={PROPERTY_KEYS: " ".join(keys)},
        group="_INNER_TRACE_PRODUCER-tests",
    )
    return Sent(
        result.msg_id, result.offset_msg_id, trace_topic, ref.addr, result.queue_id, result.queue_offset
    )
