"""A 5.x remoting POP client for tests: POP_MESSAGE / ACK_MESSAGE / BATCH_ACK_MESSAGE /
CHANGE_MESSAGE_INVISIBLETIME as RocketMQ 5.x's ``MQClientAPIImpl`` sends them, with each message's
receipt handle built from the response headers as ``MQClientAPIImpl#processPopResponse`` builds it."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest

from daemon.broker.headers import (
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    PopMessageRequestHeader,
)
from daemon.remoting.codes import RequestCode
from daemon.remoting.command import RemotingCommand
from store.message import Message, StoredMessage
from store.names import RETRY_GROUP_TOPIC_PREFIX
from store.record import decode_records
from store.results import PutMessageStatus, PutResult
from tests.support.broker import BrokerClient

if TYPE_CHECKING:
    from daemon.broker.broker import Broker


@dataclass
class Popped:
    message: StoredMessage
    handle: str  # the extraInfo: ckQueueOffset popTime invisibleTime reviveQid type broker queue offset
    #: How often it was delivered before: reconsumeTimes, or the order count of a FIFO pop.
    reconsume_times: int

    @property
    def attempt(self) -> int:
        return self.reconsume_times + 1

    @property
    def body(self) -> bytes:
        return self.message.body


def _infos(text: str | None) -> dict[str, str]:
    """``type queue value;...`` as ``ExtraInfoUtil#parse*Info`` reads it: key ``type@queue``."""
    out: dict[str, str] = {}
    for one in (text or "").split(";"):
        parts = one.split(" ")
        if len(parts) == 3:
            out[f"{parts[0]}@{parts[1]}"] = parts[2]
    return out


def parse_pop(response: RemotingCommand, broker_name: str) -> list[Popped]:
    """The messages of a POP_MESSAGE response with the handles a 5.x client would build."""
    if response.code != 0:
        return []
    f = response.ext_fields or {}
    starts = _infos(f.get("startOffsetInfo"))
    counts = _infos(f.get("orderCountInfo"))
    out = []
    for msg in decode_records(response.body):
        kind = "1" if msg.topic.startswith(RETRY_GROUP_TOPIC_PREFIX) else "0"
        handle = msg.properties.get("POP_CK")  # a retry re-encoded with its own topic carries it
        if handle is not None:
            kind = handle.split(" ")[4]
        else:
            start = starts[f"{kind}@{msg.queue_id}"]
            fields = (f["popTime"], f["invisibleTime"], f["reviveQid"], kind, broker_name)
            handle = " ".join((start, *fields, str(msg.queue_id), str(msg.queue_offset)))
        count = counts.get(f"{kind}@qo{msg.queue_id}%{msg.queue_offset}")
        out.append(Popped(msg, handle, int(count) if count is not None else msg.reconsume_times))
    return out


@dataclass
class PopClient:
    """POP for one consumer group through ``client``."""

    client: BrokerClient
    group: str
    broker_name: str = "broker-a"

    async def pop_raw(
        self,
        topic: str,
        *,
        queue_id: int = -1,
        max_nums: int = 32,
        invisible_ms: int = 60_000,
        poll_ms: int = 0,
        order: bool = False,
        exp: str = "*",
        attempt_id: str | None = None,
    ) -> RemotingCommand:
        header = PopMessageRequestHeader(
            self.group,
            topic,
            queue_id,
            max_nums,
            invisible_ms,
            poll_ms,
            int(time.time() * 1000),
            1,
            "TAG",
            exp,
            order,
            attempt_id,
        )
        return await self.client.call(
            RequestCode.POP_MESSAGE, header.to_ext_fields(), timeout=poll_ms / 1000 + 5
        )

    async def pop(self, topic: str, **options: object) -> list[Popped]:
        return parse_pop(await self.pop_raw(topic, **options), self.broker_name)  # type: ignore[arg-type]

    async def ack(self, topic: str, p: Popped) -> RemotingCommand:
        m = p.message
        header = AckMessageRequestHeader(self.group, topic, m.queue_id, p.handle, m.queue_offset)
        return await self.client.call(RequestCode.ACK_MESSAGE, header.to_ext_fields())

    async def change_invisible(self, topic: str, p: Popped, invisible_ms: int) -> RemotingCommand:
        """CHANGE_MESSAGE_INVISIBLETIME; on success ``p.handle`` becomes the new one (as the proxy
        builds it from the response header)."""
        m = p.message
        header = ChangeInvisibleTimeRequestHeader(
            self.group, topic, m.queue_id, p.handle, m.queue_offset, invisible_ms
        )
        response = await self.client.call(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, header.to_ext_fields())
        if response.code == 0:
            f = response.ext_fields or {}
            parts = p.handle.split(" ")
            parts[1:4] = [f["popTime"], f["invisibleTime"], f["reviveQid"]]
            p.handle = " ".join(parts)
        return response


def first_put_answered(
    broker: Broker, monkeypatch: pytest.MonkeyPatch, status: PutMessageStatus
) -> list[str]:
    """The broker's internal puts (a revive's copy) recorded by topic, the first one stored and answered
    ``status`` (its wait for the disk or the quorum run out): the list of their topics."""
    put = broker.put
    puts: list[str] = []

    async def missed_once(msg: Message) -> PutResult:
        result = await put(msg)
        puts.append(msg.topic)
        if len(puts) == 1:
            result.status = status
        return result

    monkeypatch.setattr(broker, "put", missed_once)
    return puts
