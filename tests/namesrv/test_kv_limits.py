"""The NameServer's KV store under a flood: capped puts, and route lookups that never wait for
kvConfig.json to be written."""

from __future__ import annotations

import asyncio
import threading
import tracemalloc
from pathlib import Path

import pytest

from daemon.namesrv import kvconfig
from daemon.namesrv.controller import NamesrvController
from daemon.namesrv.kvconfig import encode_table
from daemon.remoting.bodies import TopicRouteData
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode, ResponseCode
from store import fastjson
from tests.support.namesrv import Namesrv, namesrv_config, serving


def put(namespace: str, key: str, value: str) -> dict[str, str]:
    return {"namespace": namespace, "key": key, "value": value}


async def test_puts_over_a_cap_are_refused_and_not_stored(tmp_path: Path) -> None:
    config = namesrv_config(
        tmp_path,
        kv_config_max_value_bytes=100,
        kv_config_max_namespace_bytes=1000,
        kv_config_max_total_bytes=1500,
    )
    controller = NamesrvController(config)
    await controller.start()
    try:
        async with RemotingClient() as client:
            ns = Namesrv(controller, client)
            big = await ns.call(RequestCode.PUT_KV_CONFIG, put("A", "big", "x" * 101))
            assert big.code == ResponseCode.SYSTEM_ERROR
            assert big.remark == "KV value of 101 bytes is over kvConfigMaxValueBytes=100"
            # the name and 6 entries of 1 + 90 bytes, each counted with ENTRY_OVERHEAD (64): 995 of 1000
            for i in range(6):
                assert (await ns.call(RequestCode.PUT_KV_CONFIG, put("A", str(i), "a" * 90))).code == 0
            full = await ns.call(RequestCode.PUT_KV_CONFIG, put("A", "x", "a" * 90))
            assert full.code == ResponseCode.SYSTEM_ERROR
            assert full.remark == "KV namespace A would hold 1150 bytes, over kvConfigMaxNamespaceBytes=1000"
            replaced = await ns.call(RequestCode.PUT_KV_CONFIG, put("A", "0", "b" * 90))
            assert replaced.code == 0  # replacing a value by one as long does not grow the namespace
            for i in range(2):  # 375 more with the name: 1370 of the 1500 in all
                assert (await ns.call(RequestCode.PUT_KV_CONFIG, put("B", str(i), "a" * 90))).code == 0
            over = await ns.call(RequestCode.PUT_KV_CONFIG, put("B", "x", "a" * 90))
            assert over.code == ResponseCode.SYSTEM_ERROR
            assert over.remark == "KV store would hold 1525 bytes, over kvConfigMaxTotalBytes=1500"
    finally:
        await controller.stop()
    stored = fastjson.loads(config.kv_config_file.read_bytes())["configTable"]
    assert stored["A"] == {"0": "b" * 90, **{str(i): "a" * 90 for i in range(1, 6)}}
    assert stored["B"] == {str(i): "a" * 90 for i in range(2)}


async def test_the_caps_count_what_the_file_holds(tmp_path: Path) -> None:
    """A control character is one byte in a value and six in kvConfig.json (\\u0001): values of them
    wrote a file six times kvConfigMaxTotalBytes."""
    config = namesrv_config(tmp_path, kv_config_max_total_bytes=100_000)
    async with serving(config) as ns:
        for i in range(50):
            answer = await ns.call(RequestCode.PUT_KV_CONFIG, put("A", str(i), "\x01" * 10_000))
            if answer.code != ResponseCode.SUCCESS:
                assert "kvConfigMax" in (answer.remark or "")
                break
    written = len(config.kv_config_file.read_bytes())
    assert written <= 100_000 + 1_000  # the cap, and JSON's punctuation


async def test_a_flood_of_tiny_entries_holds_no_more_than_a_few_times_the_cap(tmp_path: Path) -> None:
    manager = kvconfig.KVConfigManager(
        namesrv_config(tmp_path, kv_config_max_total_bytes=64 * 1024, kv_config_max_namespace_bytes=64 * 1024)
    )

    async def unwritten() -> None:
        pass

    manager._writer = unwritten  # type: ignore[assignment,method-assign]
    tracemalloc.start()
    try:
        with pytest.raises(kvconfig.KVLimitError):
            for n in range(1_000_000):
                await manager.put("A", format(n, "x"), "")
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held < 4 * 64 * 1024


async def test_route_lookups_are_answered_while_kv_puts_wait_for_their_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first write of kvConfig.json is held until the lookups were answered: a NameServer that
    wrote on its event loop could not answer them before the write finished."""
    release = threading.Event()
    started = threading.Event()
    writes: list[bytes] = []
    write = kvconfig.write_atomically

    def held_write(path: Path, data: bytes) -> None:
        if not writes:  # only the first: a NameServer that writes on its loop then stalls just once
            started.set()
            release.wait(5)
        write(path, data)
        writes.append(data)

    monkeypatch.setattr(kvconfig, "write_atomically", held_write)
    config = namesrv_config(tmp_path)
    controller = NamesrvController(config)
    await controller.start()
    try:
        async with RemotingClient() as client:
            ns = Namesrv(controller, client)
            await ns.register({"T": 4})
            puts = [
                asyncio.create_task(ns.call(RequestCode.PUT_KV_CONFIG, put("FLOOD", str(i), "v" * 8192)))
                for i in range(20)
            ]
            assert await asyncio.to_thread(started.wait, 5)
            lookups = [await ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"}) for _ in range(5)]
            answered_during_write = not writes
            release.set()
            answers = await asyncio.gather(*puts)
        assert answered_during_write
        assert [r.code for r in lookups] == [ResponseCode.SUCCESS] * 5
        assert {TopicRouteData.loads(r.body).broker_datas[0].broker_name for r in lookups} == {"broker-a"}
        assert [r.code for r in answers] == [ResponseCode.SUCCESS] * 20
        assert len(writes) <= 2  # group commit: the held write, then one for the puts that came meanwhile
    finally:
        release.set()
        await controller.stop()
    stored = fastjson.loads(config.kv_config_file.read_bytes())["configTable"]
    assert stored == {"FLOOD": {str(i): "v" * 8192 for i in range(20)}}


def test_kv_config_file_is_written_as_fastjson_writes_it() -> None:
    table = {"b": {"k": "v", "ü": 'quote " and \\'}, "ORDER_TOPIC_CONFIG": {"T": "broker-a:4"}, "e": {}}
    assert encode_table(table) == fastjson.dumps({"configTable": table})
    assert encode_table({}) == fastjson.dumps({"configTable": {}})


async def test_a_flood_of_namespace_names_is_held_by_the_caps(tmp_path: Path) -> None:
    """The attack: namespace names were not counted, so puts of a tiny value under long names grew
    kvConfig.json far past kvConfigMaxTotalBytes. Names count now, are capped like a value, and no
    remote request raises a cap."""
    config = namesrv_config(tmp_path, kv_config_max_total_bytes=200_000)
    async with serving(config) as ns:
        # (a header past MAX_REQUEST_HEADER never reaches the KV: its connection is closed at its length)
        huge = await ns.call(RequestCode.PUT_KV_CONFIG, put("N" * 200_000, "k", "v"))
        assert huge.code == ResponseCode.SYSTEM_ERROR
        assert "namespace name of 200000 bytes is over kvConfigMaxValueBytes" in (huge.remark or "")
        long_key = await ns.call(RequestCode.PUT_KV_CONFIG, put("N", "k" * 70_000, "v"))
        assert long_key.code == ResponseCode.SYSTEM_ERROR and "KV key of 70000 bytes" in (
            long_key.remark or ""
        )
        codes = [
            (await ns.call(RequestCode.PUT_KV_CONFIG, put(f"{i:02d}" + "N" * 60_000, "k", "v"))).code
            for i in range(40)
        ]
        assert codes[:3] == [ResponseCode.SUCCESS] * 3
        assert set(codes[3:]) == {ResponseCode.SYSTEM_ERROR}
        raised = await ns.call(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"kvConfigMaxTotalBytes=1000000000\n")
        assert raised.code == ResponseCode.NO_PERMISSION and "kvConfigMaxTotalBytes" in (raised.remark or "")
        assert config.kv_config_max_total_bytes == 200_000
    assert config.kv_config_file.stat().st_size < 200_000
