"""The remoting POP codes under attack: a batch ack whose bit set names millions of offsets."""

from __future__ import annotations

import base64
import json
import time

from daemon.broker.pop import ReceiptHandle
from daemon.remoting.codes import RequestCode, ResponseCode
from tests.support.broker import BrokerHandle
from tests.support.pop import PopClient

T = "PopAttackTopic"


async def test_a_batch_ack_naming_more_than_one_pop_is_refused_at_once(broker: BrokerHandle) -> None:
    """One BatchAck is one pop's checkpoint (at most 32 messages): a bit set of 2M offsets is refused
    without walking it, and the lent messages stay lent."""
    await broker.create_topic(T, 1)
    for i in range(4):
        assert (await broker.send(T, f"m{i}".encode(), queue_id=0)).code == 0
    c = PopClient(broker, "GX")
    got = await c.pop(T, max_nums=4)
    h = ReceiptHandle.decode(got[0].handle)
    ack = {"c": "GX", "t": T, "r": "0", "so": 0, "q": 0, "rq": 0, "pt": h.pop_time, "it": h.invisible_ms}
    ack["b"] = base64.b64encode(b"\xff" * (1 << 18)).decode()
    body = json.dumps({"brokerName": "broker-a", "acks": [ack]}).encode()
    started = time.monotonic()
    r = await broker.call(RequestCode.BATCH_ACK_MESSAGE, body=body)
    assert time.monotonic() - started < 1.0
    assert r.code == ResponseCode.MESSAGE_ILLEGAL and "32" in (r.remark or "")
    assert broker.broker.pop.in_flight() == {"GX": 4}


async def test_a_batch_ack_naming_too_many_offsets_in_all_is_refused(broker: BrokerHandle) -> None:
    await broker.create_topic(T, 1)
    ack = {"c": "GY", "t": T, "r": "0", "so": 0, "q": 0, "rq": 0, "pt": 1, "it": 1}
    ack["b"] = base64.b64encode(b"\xff" * 4).decode()  # 32 offsets: one pop's worth
    body = json.dumps({"brokerName": "broker-a", "acks": [ack] * 2000}).encode()
    r = await broker.call(RequestCode.BATCH_ACK_MESSAGE, body=body)
    assert r.code == ResponseCode.MESSAGE_ILLEGAL and "offsets" in (r.remark or "")


async def test_a_negative_or_endless_invisible_time_is_refused(broker: BrokerHandle) -> None:
    """A lending below zero would come back at once (and climb to the DLQ), one of 2^62 ms never."""
    await broker.create_topic(T, 1)
    assert (await broker.send(T, b"m", queue_id=0)).code == 0
    c = PopClient(broker, "GI")
    for invisible in (-1, 12 * 3600 * 1000 + 1, 2**62):
        r = await c.pop_raw(T, invisible_ms=invisible)
        assert r.code == 29 and "invisibleTime" in (r.remark or ""), (invisible, r.code)  # INVALID_PARAMETER
    (got,) = await c.pop(T, invisible_ms=60_000)
    for invisible in (-5, 2**62):
        assert (await c.change_invisible(T, got, invisible)).code == 29
    assert (await c.ack(T, got)).code == 0  # the lending is untouched
