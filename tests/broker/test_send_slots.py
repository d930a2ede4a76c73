"""A send finds its queue's state (the topic's config, the store's queue handle, the stats items) in one
object reached with one lookup, kept from the previous send: whatever changed the topic or its queues
since must be in force for the next send."""

from __future__ import annotations

from daemon.broker.processors.send import SendProcessor
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.frame import decode_frame
from mqctl.services.bench import send_frame
from store.consumequeue import QueueHandle
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


class _WatchedConfig(TopicConfig):
    """A config that counts the reads of the fields a send checks."""

    __slots__ = ("reads",)

    def __getattribute__(self, name: str) -> object:
        if name in ("perm", "write_queue_nums", "read_queue_nums", "topic_filter_type"):
            object.__getattribute__(self, "reads").append(name)
        return object.__getattribute__(self, name)


async def test_a_kept_slot_sends_without_reading_the_topic_config(broker: BrokerHandle) -> None:
    """With thousands of topics the config is one more cold object per send (an interpreted one): a send
    on a kept slot checks the fields the slot copied from it."""
    await broker.create_topic("Slot", 4)
    processor = SendProcessor(broker.broker)
    frame = decode_frame(send_frame("Slot", 2, b"x"), 0)
    assert frame is not None
    request = frame[0]

    async def send() -> RemotingCommand:
        answer = processor.send_from(("127.0.0.1", 1), request)
        return answer if isinstance(answer, RemotingCommand) else await answer

    assert (await send()).code == ResponseCode.SUCCESS
    slot = processor._slots["Slot"]
    # the other queues' slots: a tuple (items inline), not a list (its items one more allocation away)
    assert isinstance(slot.queues, tuple) and slot.queues[2] is not None and slot.queues[:2] == (None, None)
    watched = _WatchedConfig("Slot", 4, 4)
    reads: list[str] = []
    object.__setattr__(watched, "reads", reads)
    slot.set_config(watched, slot.checked)
    reads.clear()
    assert (await send()).code == ResponseCode.SUCCESS
    assert reads == []


async def test_the_slot_table_is_keyed_by_the_name_the_send_goes_on_to_use(broker: BrokerHandle) -> None:
    """Each request brings its topic as a new string, which the lookup compares with the table's key; the
    key is the slot's own name (the one its messages carry), so with thousands of topics that comparison
    reads the object the send reads next instead of one more cold one."""
    await broker.create_topic("Slot", 1)
    processor = SendProcessor(broker.broker)
    frame = decode_frame(send_frame("Slot", 0, b"x"), 0)
    assert frame is not None
    answer = processor.send_from(("127.0.0.1", 1), frame[0])
    assert isinstance(answer, RemotingCommand) and answer.code == ResponseCode.SUCCESS
    (key,) = processor._slots
    assert key is processor._slots["Slot"].topic and key is not frame[0].ext_fields["b"]


async def test_a_slot_warms_what_its_last_put_went_through(broker: BrokerHandle) -> None:
    """The slot is its queue's handle: the store writes its last put's queue and addresses there (the file
    object, its mapping object, the next unit's line), prefetched at the next send's start; a topic
    deleted meanwhile leaves them stale, which is harmless (prefetched, never written through), and the
    send after it renews them."""
    await broker.create_topic("Slot", 1)
    processor = SendProcessor(broker.broker)
    frame = decode_frame(send_frame("Slot", 0, b"x"), 0)
    assert frame is not None

    def send() -> int:
        answer = processor.send_from(("127.0.0.1", 1), frame[0])
        assert isinstance(answer, RemotingCommand) and answer.code == ResponseCode.SUCCESS, answer
        return int(answer.ext_fields["queueOffset"])

    def warmed() -> tuple[object, ...]:
        slot = processor._slots["Slot"]
        return slot.cq, slot.file_at, slot.map_at, slot.unit_at

    store = broker.broker.store
    assert send() == 0
    first = warmed()
    assert first[0] is store.get_consume_queue("Slot", 0) and first[1] != 0
    assert send() == 1 and warmed()[3] in (0, first[3] + 20)  # the next unit's line
    deleted = await broker.call(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "Slot"})
    assert deleted.code == ResponseCode.SUCCESS
    await broker.create_topic("Slot", 1)
    assert send() == 0  # warmed from the deleted queue's objects first: harmless
    assert warmed()[0] is store.get_consume_queue("Slot", 0) is not first[0]


async def test_a_send_reaches_its_queue_s_state_in_one_object(broker: BrokerHandle) -> None:
    """The object the slot table gives a send (the topic's queue 0) is the store's handle of that queue and
    holds the topic's stats items; a send to another queue of the topic goes on to that queue's own
    object, kept with the first. Counts and offsets land in their homes (the stats items every reader
    reads, the store's queues)."""
    await broker.create_topic("Slot", 2)
    processor = SendProcessor(broker.broker)
    store = broker.broker.store

    def send(queue_id: int) -> int:
        frame = decode_frame(send_frame("Slot", queue_id, b"x"), 0)
        assert frame is not None
        answer = processor.send_from(("127.0.0.1", 1), frame[0])
        assert isinstance(answer, RemotingCommand) and answer.code == ResponseCode.SUCCESS, answer
        return int(answer.ext_fields["queueOffset"])

    assert [send(0), send(1), send(1), send(0)] == [0, 0, 1, 1]
    head = processor._slots["Slot"]
    assert isinstance(head, QueueHandle) and head.queue_id == 0
    assert head.cq is store.get_consume_queue("Slot", 0)
    other = head.queues[1]
    assert other is not None and other.queue_id == 1 and other.cq is store.get_consume_queue("Slot", 1)
    nums, sizes, _ = broker.broker.stats.put_items("Slot")
    assert (head.nums, head.sizes, other.nums, other.sizes) == (nums, sizes, nums, sizes)
    assert nums.value == 4 and sizes.times == 4
    assert store.get_max_offset("Slot", 0) == 2 and store.get_max_offset("Slot", 1) == 2
