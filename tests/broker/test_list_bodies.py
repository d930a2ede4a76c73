"""The answers a dashboard polls that list a whole table: each must stay the bytes a from-scratch encoding
gives, while costing the loop little per request (a kept body while the table stands; slices of entries
with other work run between them)."""

from __future__ import annotations

import inspect
from pathlib import Path

from hypothesis import given, settings, strategies as st

from daemon.broker.bodies import MessageQueue, TopicOffset, TopicStatsTable
from daemon.broker.managers.groups import SubscriptionGroupManager
from daemon.broker.processors import admin, offset
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from store import fastjson
from store.clock import SystemClock
from store.config_files import ConsumerOffsetManager, SubscriptionGroupFile
from store.models import SubscriptionGroupConfig
from tests.support.broker import BrokerHandle, broker_config
from tests.support.turns import LoopTurns


async def answer(
    broker: BrokerHandle, code: int, ext: dict[str, str] | None = None
) -> tuple[RemotingCommand, int]:
    """The broker's handler of ``code`` called on the loop, and the turns other tasks had while it ran."""
    b = broker.broker
    handler = {**admin.processors(b), **offset.processors(b)}[code]
    async with LoopTurns() as turns:
        before = turns.count
        result = handler(None, RemotingCommand.request(code, ext or {}))  # type: ignore[arg-type]
        if inspect.isawaitable(result):
            result = await result
        assert result is not None
        return result, turns.count - before


KEYS = st.text(min_size=1, max_size=12)  # any text: non-ASCII, escapes, lone surrogates
TABLES = st.dictionaries(KEYS, st.dictionaries(st.integers(0, 40), st.integers(-1, 2**63 - 1), max_size=5))


@given(table=TABLES, size=st.integers(1, 5), deleted=st.sets(KEYS, max_size=3))
def test_consumer_offsets_body_is_fastjsons_in_any_slices(
    table: dict[str, dict[int, int]], size: int, deleted: set[str]
) -> None:
    offsets = ConsumerOffsetManager(None)
    offsets.table = {k: dict(v) for k, v in table.items()}
    pieces = offsets.wire_slices(size)
    body = next(pieces)
    for key in deleted:  # entries deleted after the names were taken are left out
        offsets.table.pop(key, None)
    body += "".join(pieces)
    expected = fastjson.dumps({"offsetTable": offsets.snapshot()}, bare_int_keys=True)
    assert body.encode("utf-8", "replace") == expected


async def test_all_consumer_offsets_is_encoded_in_slices_between_other_work(broker: BrokerHandle) -> None:
    offsets = broker.broker.offsets
    for i in range(3000):
        offsets.commit_offset("G", f"T{i}", i % 4, i)
    r, turns = await answer(broker, RequestCode.GET_ALL_CONSUMER_OFFSET)
    assert r.code == ResponseCode.SUCCESS
    assert r.body == fastjson.dumps({"offsetTable": offsets.snapshot()}, bare_int_keys=True)
    assert turns >= 5  # the loop ran other work between the slices


OPS = st.lists(
    st.tuples(
        st.sampled_from(["put", "put_equal", "delete", "builtin", "replaced_whole", "read"]),
        st.sampled_from(["G1", "G2", "G3", "CID_ONSAPI_OWNER"]),
        st.integers(0, 16),
    ),
    max_size=30,
)


@settings(max_examples=60)
@given(ops=OPS)
def test_all_groups_body_is_kept_only_while_the_table_stands(ops: list[tuple[str, str, int]]) -> None:
    file = SubscriptionGroupFile(None, SystemClock())
    groups = SubscriptionGroupManager(file, broker_config(Path("unused")))
    for op, name, retries in ops:
        if op == "put":
            groups.put(SubscriptionGroupConfig(name, retry_max_times=retries))
        elif op == "put_equal" and (old := groups.get(name)) is not None:
            groups.put(SubscriptionGroupConfig.from_json(old.to_json()))
        elif op == "delete":
            groups.delete(name)
        elif op == "builtin":
            groups.create_builtin_groups()
        elif op == "replaced_whole":  # a slave's sync: the master's table decoded over this one
            data = file.encode()
            data["subscriptionGroupTable"].pop(name, None)
            with file.lock:
                file.decode(data)
        body = groups.all_json()
        assert body == groups.wrapper().dumps()
        assert groups.all_json() is body  # unchanged: the kept bytes, not a new encoding


async def test_topic_stats_of_many_queues_is_fastjsons_encoded_in_slices(broker: BrokerHandle) -> None:
    """GET_TOPIC_STATS_INFO of topics of 1,024 queues (some written): the body TopicStatsTable's bean
    encoding gives, made a slice of queues at a time with the loop serving between; the second topic
    answered in the queue order kept from the first."""
    store, name = broker.broker.store, broker.broker.config.broker_name

    def expected(topic: str) -> bytes:
        table = {}
        for q in range(1024):
            max_off = store.get_max_offset(topic, q)
            last = store.get_store_timestamp(topic, q, max_off - 1) if max_off > 0 else 0
            table[MessageQueue(topic, name, q)] = TopicOffset(
                store.get_min_offset(topic, q), max_off, max(last, 0)
            )
        return TopicStatsTable(table).dumps()

    for topic in ("ManyQ", "z_9"):
        await broker.create_topic(topic, 1024)
        for qid in (0, 2, 10, 100, 1023):
            assert (await broker.send(topic, b"x", queue_id=qid)).code == ResponseCode.SUCCESS
    processor = admin.AdminProcessor(broker.broker)
    for topic in ("ManyQ", "z_9"):
        async with LoopTurns() as turns:
            before = turns.count
            r = await processor.topic_stats(None, RemotingCommand.request(0, {"topic": topic}))  # type: ignore[arg-type]
            assert turns.count - before >= 4
        assert r.body == expected(topic)
