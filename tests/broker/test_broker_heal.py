"""A broker on a store with damaged derived files serves every acked message: derived files
are repaired from the CommitLog, never trusted over it."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from pathlib import Path

import pytest

from daemon.broker.headers import QueryMessageRequestHeader
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode, ResponseCode
from store.consumequeue import CQ_STORE_UNIT_SIZE
from store.errors import DamagedUnitError
from store.record import decode_records
from tests.support.broker import BrokerClient, start_broker
from tests.support.stores import keyed_store, small_config, unpack_store_a

STORE_A_SIZES = {
    "mapped_file_size_commit_log": 1_048_576,
    "mapped_file_size_consume_queue": 6000,
    "max_hash_slot_num": 5000,
    "max_index_num": 20000,
}


def flip(path: Path, pos: int, mask: int) -> None:
    data = bytearray(path.read_bytes())
    data[pos] ^= mask
    path.write_bytes(bytes(data))


async def test_pull_over_flipped_units_gets_every_message_in_order(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Store-a with one unit's offset and another's size flipped in FixA_Orders/1: a consumer pulling
    the queue from 0 over the wire gets all 700 messages, in order, each once; no PULL_OFFSET_MOVED."""
    root = unpack_store_a(tmp_path)
    cq = root / "consumequeue" / "FixA_Orders" / "1" / f"{0:020d}"
    flip(cq, 10 * CQ_STORE_UNIT_SIZE + 7, 0x10)  # offset field of unit 10
    flip(cq, 200 * CQ_STORE_UNIT_SIZE + 11, 0x01)  # size field of unit 200
    broker = await start_broker(root, **STORE_A_SIZES)
    client = RemotingClient()
    handle = BrokerClient(broker.addr, client)
    try:
        got: list[int] = []
        offset = 0
        with caplog.at_level(logging.ERROR, "store.heal"):
            while True:
                pulled = await handle.pull("HealG", "FixA_Orders", 1, offset)
                if pulled.code == ResponseCode.PULL_NOT_FOUND:
                    break
                assert pulled.code == ResponseCode.SUCCESS, (pulled.code, pulled.remark)
                for m in decode_records(pulled.body):
                    assert (m.topic, m.queue_id) == ("FixA_Orders", 1)
                    got.append(m.queue_offset)
                offset = int(pulled.ext_fields["nextBeginOffset"])
        assert got == list(range(700))
        healed = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert len(healed) == 2 and all(
            "consume queue FixA_Orders/1 repaired from the CommitLog" in m for m in healed
        )
        # the max offset the broker reports is the queue's real one
        answer = await handle.call(RequestCode.GET_MAX_OFFSET, {"topic": "FixA_Orders", "queueId": "1"})
        assert answer.ext_fields["offset"] == "700"
    finally:
        await client.close()
        await broker.stop()


async def test_query_by_key_after_an_index_header_flip_finds_keys_in_every_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Three index files, the newest one's beginTimestamp flipped ~35 years back (a newest-first query
    with a recent begin time stopped there): after start, QUERY_MESSAGE finds keys of all three files."""
    root = tmp_path / "store"
    keys = keyed_store(root)
    newest = sorted((root / "index").iterdir())[-1]
    flip(newest, 2, 0x01)
    cfg = small_config(root)
    sizes = {
        "mapped_file_size_commit_log": cfg.mapped_file_size_commit_log,
        "mapped_file_size_consume_queue": cfg.mapped_file_size_consume_queue,
        "max_hash_slot_num": cfg.max_hash_slot_num,
        "max_index_num": cfg.max_index_num,
    }
    with caplog.at_level(logging.ERROR, "store.heal"):
        broker = await start_broker(root, **sizes)
    client = RemotingClient()
    handle = BrokerClient(broker.addr, client)
    begin = int(time.time() * 1000) - 3_600_000
    try:
        for key in (keys[0], keys[250], keys[-1]):  # oldest, middle and newest file
            ext = QueryMessageRequestHeader("K", key, 64, begin, 2**62).to_ext_fields()
            answer = await handle.call(RequestCode.QUERY_MESSAGE, ext)
            assert answer.code == ResponseCode.SUCCESS, (key, answer.remark)
            assert [m.keys for m in decode_records(answer.body)] == [[key]]
        assert f"index file {newest} had a bad header" in caplog.text
    finally:
        await client.close()
        await broker.stop()


async def test_a_pull_whose_queue_heals_leaves_other_connections_served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The heal a pull starts runs off the event loop: while it is held up, another connection is answered;
    a second pull of the same queue waits for that heal (one heal, not two); both get messages 0..31."""
    root = unpack_store_a(tmp_path)
    flip(root / "consumequeue" / "FixA_Orders" / "1" / f"{0:020d}", 10 * CQ_STORE_UNIT_SIZE + 7, 0x10)
    broker = await start_broker(root, **STORE_A_SIZES)
    healer = broker.store.healer
    heal_read = healer.heal_read
    started, release, healed = threading.Event(), threading.Event(), threading.Event()
    heals: list[str] = []

    def held_up_heal(damage: DamagedUnitError) -> None:  # a heal walking a large CommitLog
        heals.append(str(damage))
        started.set()
        release.wait(10)
        heal_read(damage)
        healed.set()

    monkeypatch.setattr(healer, "heal_read", held_up_heal)
    client, other_client = RemotingClient(), RemotingClient()
    handle, other = BrokerClient(broker.addr, client), BrokerClient(broker.addr, other_client)
    try:
        first = asyncio.ensure_future(handle.pull("HealG", "FixA_Orders", 1, 0, timeout=30))
        assert await asyncio.to_thread(started.wait, 10)
        answer = await other.call(RequestCode.GET_MAX_OFFSET, {"topic": "FixA_Orders", "queueId": "0"})
        assert not healed.is_set()  # answered while the heal was still running
        assert answer.code == ResponseCode.SUCCESS and int(answer.ext_fields["offset"]) > 0
        second = asyncio.ensure_future(other.pull("HealG2", "FixA_Orders", 1, 0, timeout=30))
        # answered after the broker took that pull (one connection's requests are read in order)
        await other.call(RequestCode.GET_MAX_OFFSET, {"topic": "FixA_Orders", "queueId": "0"})
        assert not second.done() and not healed.is_set()  # the second pull waits for the running heal
        release.set()
        for pulled in await asyncio.gather(first, second):
            assert pulled.code == ResponseCode.SUCCESS, (pulled.code, pulled.remark)
            assert [m.queue_offset for m in decode_records(pulled.body)] == list(range(32))
        assert healed.is_set() and len(heals) == 1, heals
    finally:
        release.set()
        await client.close()
        await other_client.close()
        await broker.stop()
