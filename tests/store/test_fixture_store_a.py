"""Read the real RocketMQ 4.9.8 store ``store-a`` through the engine and check it against its manifest."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from store.checkpoint import StoreCheckpoint
from store.clock import FakeClock
from store.config import StoreConfig
from store.consumequeue import unit_tags_code
from store.engine import DefaultMessageStore, GetMessageStatus
from store.indexfile import IndexFile
from store.javahash import tags_code
from store.message import Message
from store.names import SCHEDULE_TOPIC
from store.record import encode_record
from tests.support.stores import store_a_config

FAR_FUTURE = 2**62
DELAYS = StoreConfig().delay_levels_ms()


def _tree_digest(root: Path) -> dict[str, str]:
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            p = Path(dirpath) / name
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@pytest.fixture(scope="module")
def ro_store(store_a_root: Path):  # type: ignore[no-untyped-def]
    before = _tree_digest(store_a_root)
    store = DefaultMessageStore(store_a_config(store_a_root), read_only=True)
    store.open()
    yield store
    store.shutdown()
    assert _tree_digest(store_a_root) == before, "a read-only open must not change any file"


def _where(msg: dict[str, Any]) -> tuple[str, int, int]:
    stored = msg.get("storedAs")
    if stored:
        return stored["topic"], stored["queueId"], stored["queueOffset"]
    return msg["topic"], msg["queueId"], msg["queueOffset"]


def test_recovery_finds_the_end_and_no_corruption(ro_store: DefaultMessageStore) -> None:
    assert ro_store.last_exit_ok
    assert ro_store.recovery_corruption is None
    assert ro_store.min_phy_offset == 0
    assert ro_store.max_phy_offset == 3 * 1_048_576 + 252_579
    table = ro_store.topic_queue_table()
    assert {q: table[("FixA_Orders", q)] for q in range(4)} == {0: 700, 1: 700, 2: 700, 3: 700}
    assert {q: table[("FixA_Events", q)] for q in range(4)} == {0: 500, 1: 500, 2: 500, 3: 500}
    assert {q: table[("FixA_Mixed", q)] for q in range(4)} == {0: 200, 1: 200, 2: 200, 3: 200}
    assert table[(SCHEDULE_TOPIC, 0)] == 8 and table[(SCHEDULE_TOPIC, 2)] == 2
    assert table[("%RETRY%FixA_CG_Retry", 0)] == 2
    assert sum(table.values()) == 5612


@pytest.mark.slow
def test_every_manifest_message_by_queue_offset(
    ro_store: DefaultMessageStore, manifest: dict[str, Any]
) -> None:
    messages = manifest["messages"]
    assert len(messages) == 5600
    for x in messages:
        topic, qid, qoff = _where(x)
        res = ro_store.get_messages("test", topic, qid, qoff, 1)
        assert res.status is GetMessageStatus.FOUND, x["id"]
        sel = res.messages[0]
        m = sel.message
        assert sel.phys_offset == m.commit_log_offset == x["commitLogOffset"], x["id"]
        assert (m.topic, m.queue_id, m.queue_offset) == (topic, qid, qoff)
        assert m.msg_id == x["offsetMsgId"]
        assert len(m.body) == x["bodyLength"]
        assert hashlib.sha256(m.body).hexdigest() == x["bodySha256"], x["id"]
        assert m.compressed == x["compressed"]
        assert m.sys_flag == x["sysFlag"]
        assert m.born_timestamp == x["bornTimestamp"]
        assert m.keys == x["keys"]
        assert m.tags == x["storedTags"]
        assert m.uniq_key == x["uniqKey"]
        assert m.store_host == ("127.0.0.1", 10911)
        assert bytes(sel.raw) == bytes(ro_store.look_message_by_offset(x["commitLogOffset"]).raw)  # type: ignore[union-attr]


def test_every_manifest_message_by_offset_msg_id(
    ro_store: DefaultMessageStore, manifest: dict[str, Any]
) -> None:
    for x in manifest["messages"]:
        sel = ro_store.look_message_by_msg_id(x["offsetMsgId"])
        assert sel is not None and sel.message.msg_id == x["offsetMsgId"]
        assert hashlib.sha256(sel.message.body).hexdigest() == x["bodySha256"]


@pytest.mark.slow
def test_every_key_and_unique_key_through_the_real_index(
    ro_store: DefaultMessageStore, manifest: dict[str, Any]
) -> None:
    for x in manifest["messages"]:
        # the original record (SCHEDULE_TOPIC_XXXX for delayed ones) and, for delayed messages, the
        # delivered copy in the real topic carry the same keys
        places = [(_where(x)[0], x["commitLogOffset"])]
        if x.get("deliveredCopy"):
            places.append((x["topic"], x["deliveredCopy"]["commitLogOffset"]))
        for topic, offset in places:
            for key in [*x["keys"], *([x["uniqKey"]] if x["uniqKey"] else [])]:
                found = ro_store.query_message(topic, key, 64, 0, FAR_FUTURE).messages
                assert offset in {s.phys_offset for s in found}, (x["id"], topic, key)
                for s in found:  # hash-only index: every returned record really carries the key
                    assert s.message.topic == topic
                    assert key in s.message.keys or s.message.uniq_key == key


def test_shared_key_finds_all_its_messages(ro_store: DefaultMessageStore, manifest: dict[str, Any]) -> None:
    expected = {
        x["commitLogOffset"]
        for x in manifest["messages"]
        if x["topic"] == "FixA_Orders" and "cust-013" in x["keys"]
    }
    assert len(expected) > 5
    found = ro_store.query_message("FixA_Orders", "cust-013", 64, 0, FAR_FUTURE).messages
    assert {s.phys_offset for s in found} == expected
    assert [s.phys_offset for s in found] == sorted(expected)
    assert ro_store.query_message("FixA_Events", "cust-013", 64, 0, FAR_FUTURE).messages == []


def test_delayed_and_retried_copies(ro_store: DefaultMessageStore, manifest: dict[str, Any]) -> None:
    delayed = [x for x in manifest["messages"] if x["delayed"]]
    retried = [x for x in manifest["messages"] if x["retried"]]
    assert len(delayed) == 8 and len(retried) == 2
    for x in delayed:
        stored = ro_store.get_messages("t", SCHEDULE_TOPIC, 0, x["storedAs"]["queueOffset"], 1).messages[0]
        assert stored.message.properties["REAL_TOPIC"] == "FixA_Mixed"
        # SCHEDULE_TOPIC_XXXX units carry the delivery time, not a tag hash
        assert stored.tags_code == stored.message.store_timestamp + 1000
        copy = x["deliveredCopy"]
        got = ro_store.get_messages("t", copy["topic"], copy["queueId"], copy["queueOffset"], 1).messages[0]
        assert got.phys_offset == copy["commitLogOffset"]
        assert got.message.born_timestamp == x["bornTimestamp"]
        assert got.message.properties["DELAY"] == "1"
        assert hashlib.sha256(got.message.body).hexdigest() == x["bodySha256"]
    for x in retried:
        for copy in x["retryCopies"]:
            got = ro_store.get_messages("t", copy["topic"], copy["queueId"], copy["queueOffset"], 1).messages[
                0
            ]
            m = got.message
            assert got.phys_offset == copy["commitLogOffset"]
            assert m.reconsume_times == copy["reconsumeTimes"] == 1
            assert m.properties["RETRY_TOPIC"] == "FixA_Events"
            assert m.properties["ORIGIN_MESSAGE_ID"] == x["offsetMsgId"]


def test_every_consume_queue_unit_points_at_its_record(ro_store: DefaultMessageStore) -> None:
    units = 0
    for (topic, qid), max_offset in ro_store.topic_queue_table().items():
        offset = ro_store.get_min_offset(topic, qid)
        while offset < max_offset:
            res = ro_store.get_messages("t", topic, qid, offset, 32)
            assert res.status is GetMessageStatus.FOUND
            for s in res.messages:
                m = s.message
                assert (m.topic, m.queue_id, m.queue_offset, m.store_size) == (
                    topic,
                    qid,
                    s.queue_offset,
                    s.size,
                )
                # what the real broker wrote equals what our dispatcher computes (delivery time for delays)
                assert s.tags_code == unit_tags_code(topic, m.properties, m.store_timestamp, DELAYS)
                if topic != SCHEDULE_TOPIC:
                    assert s.tags_code == tags_code(m.tags)
                units += 1
            offset = res.next_begin_offset
    assert units == 5612


def test_tag_filter_and_statuses(ro_store: DefaultMessageStore) -> None:
    code = tags_code("TagA")
    res = ro_store.get_messages("t", "FixA_Orders", 0, 0, 32, tag_filter={code})
    assert res.status is GetMessageStatus.FOUND
    assert res.messages and all(s.message.tags == "TagA" for s in res.messages)
    assert res.next_begin_offset > res.messages[-1].queue_offset
    none = ro_store.get_messages("t", "FixA_Orders", 0, 0, 32, tag_filter={12345})
    assert none.status is GetMessageStatus.NO_MATCHED_MESSAGE and none.next_begin_offset > 0
    assert (
        ro_store.get_messages("t", "FixA_Orders", 0, 700, 32).status is GetMessageStatus.OFFSET_OVERFLOW_ONE
    )
    bad = ro_store.get_messages("t", "FixA_Orders", 0, 900, 32)
    assert bad.status is GetMessageStatus.OFFSET_OVERFLOW_BADLY and bad.next_begin_offset == 0
    assert ro_store.get_messages("t", "Nope", 0, 0, 32).status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
    full = ro_store.get_messages("t", "FixA_Orders", 0, 290, 32)
    assert [s.queue_offset for s in full.messages] == list(range(290, 300))  # stops at the CQ file end
    assert full.next_begin_offset == 300


def test_times_and_search_by_timestamp(ro_store: DefaultMessageStore, manifest: dict[str, Any]) -> None:
    first = manifest["messages"][0]
    earliest = ro_store.get_earliest_message_time()
    assert earliest == ro_store.look_message_by_offset(0).message.store_timestamp  # type: ignore[union-attr]
    assert earliest >= first["bornTimestamp"]
    for offset in (0, 123, 456, 699):
        ts = ro_store.get_store_timestamp("FixA_Orders", 2, offset)
        found = ro_store.search_offset_by_timestamp("FixA_Orders", 2, ts)
        assert ro_store.get_store_timestamp("FixA_Orders", 2, found) == ts
        assert found <= offset
    assert ro_store.search_offset_by_timestamp("FixA_Orders", 2, 0) == 0
    assert ro_store.search_offset_by_timestamp("FixA_Orders", 2, FAR_FUTURE) == 699


def test_configs_loaded(ro_store: DefaultMessageStore, manifest: dict[str, Any]) -> None:
    co = ro_store.configs.consumer_offsets
    for group, topics in manifest["consumerOffsets"].items():
        for topic, offsets in topics.items():
            assert co.offsets_of(group, topic) == {int(q): o for q, o in offsets.items()}
    assert len(co.table) == sum(len(t) for t in manifest["consumerOffsets"].values())
    assert co.query_offset("FixA_CG_Retry", "%RETRY%FixA_CG_Retry", 0) == 2
    assert co.query_offset("FixA_CG_Retry", "FixA_Events", 9) == -1
    assert ro_store.configs.delay_offsets.table == {1: 8, 3: 2}
    topics = ro_store.configs.topics
    assert set(topics.table) == set(manifest["topics"])
    for name, t in manifest["topics"].items():
        tc = topics.get(name)
        assert tc is not None and (tc.read_queue_nums, tc.write_queue_nums, tc.perm) == (
            t["readQueueNums"],
            t["writeQueueNums"],
            t["perm"],
        )
    assert topics.data_version.counter == 7
    groups = ro_store.configs.subscription_groups
    assert set(groups.table) == set(manifest["subscriptionGroups"])
    admin = groups.get("FixA_AdminGroup")
    assert admin is not None and admin.retry_max_times == 5 and not admin.consume_broadcast_enable


def test_checkpoint_and_index_header(store_a_root: Path, manifest: dict[str, Any]) -> None:
    cp = StoreCheckpoint(str(store_a_root / "checkpoint"), read_only=True)
    assert (cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp) == (
        manifest["checkpoint"]["physicMsgTimestamp"],
        manifest["checkpoint"]["logicsMsgTimestamp"],
        manifest["checkpoint"]["indexMsgTimestamp"],
    )
    f = IndexFile(str(store_a_root / "index" / "20261121090946582"), 5000, 20000, read_only=True)
    assert (f.index_count, f.hash_slot_count, f.begin_phy_offset, f.end_phy_offset) == (
        9816,
        4442,
        0,
        3397820,
    )
    f.close()


def test_writable_open_continues_the_real_store(store_a_copy: Path) -> None:
    cfg = store_a_config(store_a_copy)
    with DefaultMessageStore(cfg) as store:
        assert store.last_exit_ok and store.recovery_corruption is None
        assert (store_a_copy / "abort").exists()
        end = store.max_phy_offset
        r = store.put_message(
            Message(topic="FixA_Orders", body=b"after the broker", queue_id=0, properties={"KEYS": "ord-new"})
        )
        assert r.ok and r.queue_offset == 700 and r.phys_offset == end
        assert r.msg_id == "7F00000100002A9F" + format(end, "016X")
        got = store.get_messages("t", "FixA_Orders", 0, 700, 4)
        assert [s.message.body for s in got.messages] == [b"after the broker"]
        assert [
            s.phys_offset for s in store.query_message("FixA_Orders", "ord-new", 4, 0, FAR_FUTURE).messages
        ] == [end]
        # the real broker's index file keeps receiving entries
        assert [f.name for f in store.index.files] == ["20261121090946582"]
        assert store.index.files[0].index_count == 9817
    assert not (store_a_copy / "abort").exists()
    assert sorted(os.listdir(store_a_copy / "commitlog")) == [f"{i * 1_048_576:020d}" for i in range(4)]
    assert all(
        os.path.getsize(store_a_copy / "commitlog" / n) == 1_048_576
        for n in os.listdir(store_a_copy / "commitlog")
    )
    with DefaultMessageStore(cfg, read_only=True) as again:
        assert again.get_max_offset("FixA_Orders", 0) == 701


def test_rebuilt_consume_queues_and_index_are_byte_identical_to_the_brokers(store_a_copy: Path) -> None:
    cq_root = store_a_copy / "consumequeue"
    real_cq = {p.relative_to(cq_root): p.read_bytes() for p in cq_root.rglob("*") if p.is_file()}
    (real_index,) = (store_a_copy / "index").iterdir()
    real_index_bytes = real_index.read_bytes()
    shutil.rmtree(cq_root)
    shutil.rmtree(store_a_copy / "index")
    with DefaultMessageStore(store_a_config(store_a_copy)) as store:  # start() re-dispatches the whole log
        assert sum(store.topic_queue_table().values()) == 5612
        ours = {p.relative_to(cq_root): p.read_bytes() for p in cq_root.rglob("*") if p.is_file()}
        assert ours.keys() == real_cq.keys()
        assert all(ours[k] == real_cq[k] for k in real_cq)
        store.index.write_header()
        (our_index,) = (store_a_copy / "index").iterdir()
        assert our_index.read_bytes() == real_index_bytes


def test_every_real_record_re_encodes_to_the_same_bytes(ro_store: DefaultMessageStore) -> None:
    records = 0
    for (topic, qid), max_offset in ro_store.topic_queue_table().items():
        offset = 0
        while offset < max_offset:
            res = ro_store.get_messages("t", topic, qid, offset, 32)
            for s in res.messages:
                m = s.message
                msg = Message(
                    topic=m.topic,
                    body=m.stored_body,
                    queue_id=m.queue_id,
                    flag=m.flag,
                    properties=m.properties,
                    sys_flag=m.sys_flag,
                    born_timestamp=m.born_timestamp,
                    born_host=m.born_host,
                    reconsume_times=m.reconsume_times,
                    prepared_transaction_offset=m.prepared_transaction_offset,
                )
                again = encode_record(
                    msg,
                    queue_offset=m.queue_offset,
                    physical_offset=m.commit_log_offset,
                    store_timestamp=m.store_timestamp,
                    store_host=m.store_host,
                )
                assert again == bytes(s.raw), (topic, qid, s.queue_offset)
                records += 1
            offset = res.next_begin_offset
    assert records == 5612


@pytest.mark.slow
def test_replaying_the_real_log_writes_a_byte_identical_commit_log(
    ro_store: DefaultMessageStore, store_a_root: Path, tmp_path: Path
) -> None:
    """Same inputs (bodies, properties, hosts, times) through our append path give the broker's files:
    same record bytes, queue offsets, blank fillers and roll points."""
    offsets: list[int] = []
    ro_store.commit_log.scan(0, check_crc=True, on_record=lambda info: offsets.append(info.commit_log_offset))
    assert len(offsets) == 5612
    clock = FakeClock()
    with DefaultMessageStore(store_a_config(tmp_path), clock=clock) as ours:
        for off in offsets:
            m = ro_store.look_message_by_offset(off).message  # type: ignore[union-attr]
            clock.set(m.store_timestamp)
            r = ours.put_message(
                Message(
                    topic=m.topic,
                    body=m.stored_body,
                    queue_id=m.queue_id,
                    flag=m.flag,
                    properties=m.properties,
                    sys_flag=m.sys_flag,
                    born_timestamp=m.born_timestamp,
                    born_host=m.born_host,
                    reconsume_times=m.reconsume_times,
                    # delivered and retried copies keep DELAY in their stored properties (4.9.8 quirk)
                    delay_time_level=None if m.topic == SCHEDULE_TOPIC else 0,
                )
            )
            assert (r.phys_offset, r.queue_offset) == (off, m.queue_offset)
    real = store_a_root / "commitlog"
    mine = tmp_path / "commitlog"
    assert sorted(os.listdir(mine)) == sorted(os.listdir(real))
    for name in os.listdir(real):
        assert (mine / name).read_bytes() == (real / name).read_bytes(), name
