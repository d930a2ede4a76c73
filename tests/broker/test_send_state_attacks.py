"""Attacks on the send path's kept topic state (config, queue handles, stats items): whatever changed a
topic between two sends (its permission, queues or order flag, a deletion over the wire, a template it
was auto-created from, retry and DLQ topics made on the fly, half, batch and delayed messages beside
it), every acknowledged message is at the queue and offset it was acknowledged with, reads back, and
counts once in its topic's stats."""

from __future__ import annotations

from typing import Any

from daemon.broker.headers import CreateTopicRequestHeader
from daemon.broker.stats import TOPIC_PUT_NUMS
from daemon.remoting.codes import RequestCode, ResponseCode
from store import fastjson
from store.models import TopicConfig
from tests.support.broker import BrokerHandle, batch_entry, send_fields

Acked = dict[tuple[str, int, int], bytes]


async def _send(
    broker: BrokerHandle, acked: Acked, topic: str, body: bytes, **options: Any
) -> tuple[int, int]:
    """Send; the (queue, offset) acknowledged, noted in ``acked`` under the topic sent to."""
    r = await broker.send(topic, body, **options)
    assert r.code == ResponseCode.SUCCESS, r.remark
    at = int(r.ext_fields["queueId"]), int(r.ext_fields["queueOffset"])
    acked[(topic, *at)] = body
    return at


async def _refused(broker: BrokerHandle, topic: str, **options: Any) -> int:
    r = await broker.send(topic, b"refused", **options)
    assert r.code != ResponseCode.SUCCESS
    return r.code


async def _update(broker: BrokerHandle, topic: str, queues: int, perm: int = 6) -> None:
    header = CreateTopicRequestHeader(topic, "TBW102", queues, queues, perm, "SINGLE_TAG")
    r = await broker.call(RequestCode.UPDATE_AND_CREATE_TOPIC, header.to_ext_fields())
    assert r.code == ResponseCode.SUCCESS, r.remark


async def _delete(broker: BrokerHandle, topic: str) -> None:
    assert (
        await broker.call(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": topic})
    ).code == ResponseCode.SUCCESS


def _read_back(broker: BrokerHandle, acked: Acked) -> None:
    """Every acknowledged message is where it was acknowledged, with its body; nothing else is there."""
    store = broker.broker.store
    for (topic, queue_id, offset), body in acked.items():
        found = [m.message for m in store.get_messages("check", topic, queue_id, offset, 1).messages]
        assert [(m.topic, m.queue_id, m.queue_offset, m.body) for m in found] == [
            (topic, queue_id, offset, body)
        ], (topic, queue_id, offset)
    for topic, queue_id in {(t, q) for t, q, _ in acked}:
        offsets = sorted(o for t, q, o in acked if (t, q) == (topic, queue_id))
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))
        assert store.get_max_offset(topic, queue_id) == offsets[-1] + 1, (topic, queue_id)


async def _puts(broker: BrokerHandle, topic: str) -> int:
    r = await broker.call(
        RequestCode.VIEW_BROKER_STATS_DATA, {"statsName": TOPIC_PUT_NUMS, "statsKey": topic}
    )
    assert r.code == ResponseCode.SUCCESS, r.remark
    return int(fastjson.loads(r.body)["statsDay"]["sum"])


async def test_permission_queue_and_order_changes_between_two_sends(broker: BrokerHandle) -> None:
    acked: Acked = {}
    await _update(broker, "Flip", 2, perm=2)  # write only
    assert await _send(broker, acked, "Flip", b"w0", queue_id=1) == (1, 0)
    await _update(broker, "Flip", 2, perm=4)  # read only
    assert await _refused(broker, "Flip", queue_id=1) == ResponseCode.NO_PERMISSION
    broker.broker.topics.put(TopicConfig("Flip", 3, 3, order=True))  # (only topics.json sets the flag)
    assert await _send(broker, acked, "Flip", b"o0", queue_id=2) == (2, 0)
    assert await _send(broker, acked, "Flip", b"o1", queue_id=1) == (1, 1)
    await _update(broker, "Flip", 1)  # fewer queues: queue 1 is gone for sends, its messages stay
    assert await _refused(broker, "Flip", queue_id=1) == ResponseCode.SYSTEM_ERROR
    assert await _send(broker, acked, "Flip", b"s0", queue_id=0) == (0, 0)
    await _update(broker, "Flip", 3)
    assert await _send(broker, acked, "Flip", b"s1", queue_id=1) == (1, 2)
    _read_back(broker, acked)
    assert await _puts(broker, "Flip") == len(acked)


async def test_an_auto_created_topic_deleted_and_auto_created_again_from_a_changed_template(
    broker: BrokerHandle,
) -> None:
    acked: Acked = {}
    assert await _send(broker, acked, "AutoT", b"a0", queue_id=3) == (3, 0)
    assert broker.broker.topics.get("AutoT").write_queue_nums == 4  # type: ignore[union-attr]
    await _delete(broker, "AutoT")
    del acked[("AutoT", 3, 0)]  # deleted with its topic
    assert await _send(broker, acked, "AutoT", b"a1", queue_id=3) == (3, 0)  # auto-created again
    await _delete(broker, "AutoT")
    del acked[("AutoT", 3, 0)]
    broker.broker.topics.put(TopicConfig("TBW102", 2, 2, 7))  # the template: two queues (a system topic)
    assert await _refused(broker, "AutoT", queue_id=3) == ResponseCode.SYSTEM_ERROR
    assert await _send(broker, acked, "AutoT", b"a2", queue_id=1) == (1, 0)
    assert broker.broker.store.get_max_offset("AutoT", 3) == 0
    _read_back(broker, acked)
    assert await _puts(broker, "AutoT") == 3  # (the deleted topic's put still counted: 4.9.8 keeps it)


async def test_retry_and_dlq_topics_made_on_the_fly(broker: BrokerHandle) -> None:
    acked: Acked = {}
    await _update(broker, "Orig", 1)
    assert (await broker.heartbeat("c1", "G", ["Orig"])).code == ResponseCode.SUCCESS  # makes %RETRY%G
    retry: dict[str, Any] = {"group": "G", "max_reconsume_times": 2}
    assert await _send(broker, acked, "%RETRY%G", b"r0", reconsume_times=1, **retry) == (0, 0)
    dlq = await broker.send("%RETRY%G", b"d0", reconsume_times=3, **retry)  # retries used up: the DLQ
    assert dlq.code == ResponseCode.SUCCESS, dlq.remark
    assert (dlq.ext_fields["queueId"], dlq.ext_fields["queueOffset"]) == ("0", "0")
    acked[("%DLQ%G", 0, 0)] = b"d0"
    assert await _send(broker, acked, "%RETRY%G", b"r1", reconsume_times=1, **retry) == (0, 1)
    await _delete(broker, "%DLQ%G")
    del acked[("%DLQ%G", 0, 0)]
    dlq = await broker.send("%RETRY%G", b"d1", reconsume_times=3, **retry)  # the DLQ made again
    assert dlq.code == ResponseCode.SUCCESS and dlq.ext_fields["queueOffset"] == "0", dlq.remark
    acked[("%DLQ%G", 0, 0)] = b"d1"
    await _delete(broker, "%RETRY%G")
    assert (await broker.heartbeat("c1", "G", ["Orig"])).code == ResponseCode.SUCCESS
    del acked[("%RETRY%G", 0, 0)], acked[("%RETRY%G", 0, 1)]
    assert await _send(broker, acked, "%RETRY%G", b"r2", reconsume_times=1, **retry) == (0, 0)
    _read_back(broker, acked)
    assert await _puts(broker, "%RETRY%G") == 3 and await _puts(broker, "%DLQ%G") == 2


async def test_half_batch_and_delayed_messages_beside_a_kept_state(broker: BrokerHandle) -> None:
    acked: Acked = {}
    await _update(broker, "Mix", 2)
    assert await _send(broker, acked, "Mix", b"p0") == (0, 0)
    half = await broker.send("Mix", b"h0", props={"TRAN_MSG": "true", "PGROUP": "PG"})
    assert half.code == ResponseCode.SUCCESS, half.remark
    assert broker.broker.store.get_max_offset("RMQ_SYS_TRANS_HALF_TOPIC", 0) == 1
    assert await _send(broker, acked, "Mix", b"p1") == (0, 1)
    entries = [batch_entry(f"b{i}".encode(), {"WAIT": "true"}) for i in range(3)]
    r = await broker.call(
        RequestCode.SEND_BATCH_MESSAGE, {**send_fields("Mix", queue_id=1), "batch": "true"}, b"".join(entries)
    )
    assert r.code == ResponseCode.SUCCESS and r.ext_fields["queueOffset"] == "0", r.remark
    acked.update({("Mix", 1, i): f"b{i}".encode() for i in range(3)})
    assert await _send(broker, acked, "Mix", b"p2", queue_id=1) == (1, 3)
    assert await _puts(broker, "Mix") == 6  # the half message counts in the half topic
    later = await broker.send("Mix", b"later", props={"DELAY": "2"})
    assert later.code == ResponseCode.SUCCESS, later.remark
    assert broker.broker.store.get_max_offset("SCHEDULE_TOPIC_XXXX", 1) == 1
    assert await _send(broker, acked, "Mix", b"p3") == (0, 2)
    _read_back(broker, acked)
