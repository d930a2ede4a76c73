"""QUERY_CONSUME_QUEUE (mqadmin queryCq) against our real broker: the answers of 4.9.8's
AdminBrokerProcessor#queryConsumeQueue for a queue, a missing queue, an index past the end, and a group."""

from __future__ import annotations

from typing import Any

import pytest

from daemon.remoting.codes import RequestCode, ResponseCode
from store import fastjson, tags_code
from store.memory import InMemoryMessageStore
from tests.support.broker import BrokerHandle


async def query(broker: BrokerHandle, **ext: object) -> tuple[int, str | None, dict[str, Any] | None]:
    fields = {
        "topic": "Cq",
        "queueId": "0",
        "index": "0",
        "count": "10",
        **{k: str(v) for k, v in ext.items()},
    }
    r = await broker.call(RequestCode.QUERY_CONSUME_QUEUE, fields)
    return r.code, r.remark, fastjson.loads(r.body) if r.body else None


async def test_units_bounds_and_a_group_subscription(broker: BrokerHandle) -> None:
    sent = [await broker.send("Cq", f"m{i}".encode(), queue_id=0, tags="red") for i in range(3)]
    assert all(r.code == ResponseCode.SUCCESS for r in sent)
    code, _, body = await query(broker, index=1, count=5)
    assert code == ResponseCode.SUCCESS and body is not None
    assert (body["minQueueIndex"], body["maxQueueIndex"]) == (0, 3)
    units = body["queueData"]
    assert isinstance(units, list) and len(units) == 2
    first = broker.broker.store.get_messages("G", "Cq", 0, 1, 1).messages[0]
    assert units[0] == {
        "physicOffset": first.phys_offset,
        "physicSize": first.size,
        "tagsCode": tags_code("red"),
        "eval": False,
    }
    assert "subscriptionData" not in body and "filterData" not in body  # no group asked

    _, _, offline = await query(broker, consumerGroup="CqG")
    assert offline is not None and offline["filterData"] == "CqG@Cq is not online!"
    assert (await broker.heartbeat("c1", "CqG", ["Cq"])).code == ResponseCode.SUCCESS
    _, _, online = await query(broker, consumerGroup="CqG", count=1)
    assert online is not None and online["filterData"] == "null"
    assert online["subscriptionData"]["topic"] == "Cq" and len(online["queueData"]) == 1


async def test_missing_queue_and_index_past_the_end(broker: BrokerHandle) -> None:
    assert (await broker.send("Cq", b"x", queue_id=0)).code == ResponseCode.SUCCESS
    code, remark, body = await query(broker, queueId=7)
    assert (code, remark, body) == (ResponseCode.SYSTEM_ERROR, "7@Cq is not exist!", None)
    code, remark, body = await query(broker, index=5)
    assert (code, remark, body) == (ResponseCode.SUCCESS, "Index 5 of 0@Cq is not exist!", None)


@pytest.mark.parametrize("count", [0, 2])
def test_the_in_memory_store_answers_the_same(count: int) -> None:
    from store.config import StoreConfig
    from store.message import Message

    store = InMemoryMessageStore(StoreConfig())
    store.start()
    try:
        for i in range(3):
            store.put_message(Message("Cq", f"m{i}".encode(), queue_id=0))
        found = store.consume_queue_units("Cq", 0, 1, count)
        assert found is not None and found[:2] == (0, 3) and len(found[2] or []) == count
        assert store.consume_queue_units("Cq", 0, 3, 1) == (0, 3, None)
        assert store.consume_queue_units("Nope", 0, 0, 1) is None
    finally:
        store.shutdown()
