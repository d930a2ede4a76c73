"""A send finds its topic's state (config, queue handles, stats items) with one lookup, kept from the
previous send: whatever changed the topic or its queues since must be in force for the next send."""

from __future__ import annotations

from daemon.remoting.codes import RequestCode, ResponseCode
from store.models import TopicConfig
from tests.support.broker import BrokerHandle


async def _sent(broker: BrokerHandle, topic: str, queue_id: int = 0) -> int:
    """Send one message; its queue offset."""
    r = await broker.send(topic, b"x", queue_id=queue_id)
    assert r.code == ResponseCode.SUCCESS, r.remark
    return int(r.ext_fields["queueOffset"])


async def test_an_updated_topic_is_in_force_for_the_next_send(broker: BrokerHandle) -> None:
    await broker.create_topic("Slot", 4)
    assert await _sent(broker, "Slot", 3) == 0
    await broker.create_topic("Slot", 2)  # fewer queues
    r = await broker.send("Slot", b"x", queue_id=3)
    assert r.code == ResponseCode.SYSTEM_ERROR and "queueId[3] is illegal" in (r.remark or "")
    assert await _sent(broker, "Slot", 1) == 0
    await broker.create_topic("Slot", 2, perm=4)  # read only
    r = await broker.send("Slot", b"x", queue_id=1)
    assert r.code == ResponseCode.NO_PERMISSION, r.remark
    await broker.create_topic("Slot", 8)
    assert await _sent(broker, "Slot", 7) == 0 and await _sent(broker, "Slot", 1) == 1


async def test_a_deleted_and_recreated_topic_starts_again_at_offset_zero(broker: BrokerHandle) -> None:
    await broker.create_topic("Slot", 1)
    assert [await _sent(broker, "Slot") for _ in range(3)] == [0, 1, 2]
    deleted = await broker.call(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "Slot"})
    assert deleted.code == ResponseCode.SUCCESS
    await broker.create_topic("Slot", 1)
    assert await _sent(broker, "Slot") == 0
    pulled = await broker.pull("G", "Slot", 0, 0)
    assert pulled.code == ResponseCode.SUCCESS and pulled.ext_fields["maxOffset"] == "1"


async def test_a_table_replaced_whole_is_in_force_for_the_next_send(broker: BrokerHandle) -> None:
    """As a slave takes its master's table (``decode``): no update or delete of the entry is called."""
    await broker.create_topic("Slot", 4)
    assert await _sent(broker, "Slot", 2) == 0
    file = broker.broker.topics.file
    data = file.encode()
    data["topicConfigTable"]["Slot"] = TopicConfig("Slot", 1, 1, 4).to_file_json()
    with file.lock:
        file.decode(data)
    r = await broker.send("Slot", b"x", queue_id=0)
    assert r.code == ResponseCode.NO_PERMISSION, r.remark


async def test_a_queue_rebuilt_by_a_heal_takes_the_next_send(broker: BrokerHandle) -> None:
    await broker.create_topic("Slot", 1)
    assert [await _sent(broker, "Slot") for _ in range(3)] == [0, 1, 2]
    store = broker.broker.store
    with store._put_lock:  # type: ignore[attr-defined]
        store.healer.rebuild_queues({("Slot", 0): "a test rebuilds it whole"})  # type: ignore[attr-defined]
    assert await _sent(broker, "Slot") == 3
    assert store.get_max_offset("Slot", 0) == 4  # in the queue the store now holds
    pulled = await broker.pull("G", "Slot", 0, 3)
    assert pulled.code == ResponseCode.SUCCESS and pulled.ext_fields["maxOffset"] == "4"


async def test_a_delayed_message_leaves_the_topic_queue_alone(broker: BrokerHandle) -> None:
    await broker.create_topic("Slot", 1)
    assert await _sent(broker, "Slot") == 0
    r = await broker.send("Slot", b"later", props={"DELAY": "1"})
    assert r.code == ResponseCode.SUCCESS, r.remark
    assert await _sent(broker, "Slot") == 1
    assert broker.broker.store.get_max_offset("SCHEDULE_TOPIC_XXXX", 0) == 1
