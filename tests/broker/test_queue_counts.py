"""Queue counts are bounded (docs/operations.md §queue-counts): refused at creation, clamped where a table
already holds one out of range (a store written before the check, a master that does not check)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from daemon.broker.config import BrokerConfig
from daemon.broker.ha import _apply
from daemon.broker.headers import CreateTopicRequestHeader
from daemon.broker.managers.topics import TopicConfigManager, clamp_queue_counts
from daemon.remoting.bodies import PermName
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode, ResponseCode
from mqctl.admin.client import Admin
from mqctl.services.topics import TopicSpec
from store import fastjson
from store.clock import SystemClock
from store.config_files import TopicConfigFile
from store.models import TopicConfig
from store.names import MAX_HELD_QUEUE_NUMS, MAX_QUEUE_NUMS
from tests.support.broker import BrokerHandle, start_broker


def _create(name: str, read: int, write: int) -> dict[str, str]:
    return CreateTopicRequestHeader(name, "TBW102", read, write, 6, "SINGLE_TAG").to_ext_fields()


async def test_creation_refuses_counts_below_zero_or_above_the_max(broker: BrokerHandle) -> None:
    for read, write in ((99999999999, 8), (8, 2147483648), (-3, 8), (8, -1), (MAX_QUEUE_NUMS + 1, 1)):
        answer = await broker.call(RequestCode.UPDATE_AND_CREATE_TOPIC, _create("Big", read, write))
        assert answer.code == ResponseCode.SYSTEM_ERROR, (read, write)
        assert f"out of range: a topic has 0 to {MAX_QUEUE_NUMS} queues" in (answer.remark or "")
        assert broker.broker.topics.get("Big") is None
    fine = await broker.call(RequestCode.UPDATE_AND_CREATE_TOPIC, _create("Big", MAX_QUEUE_NUMS, 1))
    assert fine.code == ResponseCode.SUCCESS
    assert broker.broker.topics.get("Big").read_queue_nums == MAX_QUEUE_NUMS  # type: ignore[union-attr]


async def test_a_count_of_zero_is_taken_and_sent_back_by_a_later_update(broker: BrokerHandle) -> None:
    """4.9.8 takes ``updateTopic -w 0`` to stop a topic's writes; a later change of its perm alone (``topic
    update -p r``) sends the stored 0 back, which must be taken too."""
    stopped = await broker.call(RequestCode.UPDATE_AND_CREATE_TOPIC, _create("Stopped", 8, 0))
    assert stopped.code == ResponseCode.SUCCESS, stopped.remark
    stored = broker.broker.topics.get("Stopped")
    assert stored is not None and (stored.read_queue_nums, stored.write_queue_nums) == (8, 0)
    async with Admin([]) as admin:  # what `mqctl topic update -t Stopped -p r` sends
        await admin.create_topic(broker.addr, TopicSpec("Stopped", perm="r").apply_to(stored))
    assert broker.broker.topics.get("Stopped") == dataclasses.replace(stored, perm=PermName.READ)


def test_clamping_replaces_only_the_entries_out_of_range() -> None:
    kept = TopicConfig("Kept", 8, 0)  # writes stopped with -w 0, which 4.9.8 took: kept
    wide = TopicConfig("Wide", 20000, 20000)  # 4.9.8 creates it and fills its queues: kept
    table = {
        "Kept": kept,
        "Wide": wide,
        "Huge": TopicConfig("Huge", 99999999999, 8),
        "Neg": TopicConfig("Neg", -3, 4),
        "Deep": TopicConfig("Deep", 2147483648, 2147483648),
    }
    changes = clamp_queue_counts(table, lambda: [("Deep", MAX_HELD_QUEUE_NUMS + 4), ("Deep", 1), ("Wide", 3)])
    assert changes == [
        f"Huge (readQueueNums 99999999999 -> {MAX_HELD_QUEUE_NUMS})",
        "Neg (readQueueNums -3 -> 0)",
        f"Deep (readQueueNums 2147483648 -> {MAX_HELD_QUEUE_NUMS + 5}, writeQueueNums 2147483648 -> "
        f"{MAX_HELD_QUEUE_NUMS + 5})",  # never below the queues the store holds
    ]
    assert table["Kept"] is kept and table["Wide"] is wide
    assert (table["Huge"].read_queue_nums, table["Huge"].write_queue_nums) == (MAX_HELD_QUEUE_NUMS, 8)
    assert table["Neg"].read_queue_nums == 0


def test_a_slave_takes_its_masters_table_with_counts_clamped() -> None:
    mine = TopicConfigFile(None, SystemClock())
    data = {
        "dataVersion": {"counter": 3, "timestamp": 1},
        "topicConfigTable": {
            "T": TopicConfig("T", 2147483648, 4).to_json(),
            "U": TopicConfig("U").to_json(),
            "Wide": TopicConfig("Wide", 20000, 20000).to_json(),  # a 4.9.8 master's: its queues are here
        },
    }
    assert _apply(mine, data, lambda: [("T", MAX_HELD_QUEUE_NUMS)])
    assert (
        mine.table["T"].read_queue_nums == MAX_HELD_QUEUE_NUMS + 1 and mine.table["T"].write_queue_nums == 4
    )
    assert mine.table["U"] == TopicConfig("U")
    assert mine.table["Wide"] == TopicConfig("Wide", 20000, 20000)
    assert not _apply(mine, data, lambda: [("T", MAX_HELD_QUEUE_NUMS)])  # the same again: no change, no ERROR


async def test_a_stored_count_out_of_range_is_clamped_at_start(tmp_path: Path) -> None:
    root = tmp_path / "store"
    b = await start_broker(root)
    await b.stop()
    path = root / "config" / "topics.json"
    data = fastjson.loads(path.read_text())
    data["topicConfigTable"]["Old"] = TopicConfig("Old", 99999999999, 2147483648).to_file_json()
    data["topicConfigTable"]["Wide"] = TopicConfig("Wide", 20000, 20000).to_file_json()  # a 4.9.8 store's
    path.write_bytes(fastjson.dumps(data))
    b = await start_broker(root)
    client = RemotingClient()
    try:
        old = b.topics.get("Old")
        assert old is not None and (old.read_queue_nums, old.write_queue_nums) == (MAX_HELD_QUEUE_NUMS,) * 2
        handle = BrokerHandle(b.addr, client, b)
        # queues past creation's bound stay served
        sent = await handle.send("Wide", b"past the creation bound", queue_id=19999)
        assert sent.code == ResponseCode.SUCCESS, sent.remark
        pulled = await handle.pull("G1", "Wide", 19999, 0)
        assert pulled.code == ResponseCode.SUCCESS, pulled.remark
    finally:
        await client.close()
        await b.stop()
    assert f'"readQueueNums":{MAX_HELD_QUEUE_NUMS}' in path.read_text().replace(" ", "")


def test_a_lost_topic_is_recreated_with_its_queues_up_to_the_bound() -> None:
    """A topic with messages and no config gets its highest queue id + 1 queues; a foreign master's queue id
    past the bound does not give it more (this runs after the start's clamp)."""
    topics = TopicConfigManager(BrokerConfig(), TopicConfigFile(None, SystemClock()))
    held = {("Lost", 3): 1, ("Lost", 19999): 2, ("Far", 0): 1, ("Far", 2147483646): 1, ("Empty", 7): 0}
    assert topics.recreate_lost_topics(held) == ["Far", "Lost"]
    assert topics.table["Lost"] == TopicConfig("Lost", 20000, 20000)
    assert topics.table["Far"] == TopicConfig("Far", MAX_HELD_QUEUE_NUMS, MAX_HELD_QUEUE_NUMS)
