"""The NameServer's route table under a flood of registrations: registration is open to any peer (protected
mode leaves it open), and a peer registering thousands of invented brokers of thousands of topics each
(a few KiB compressed per broker) filled its memory without bound. `routeMaxQueueDatas` caps the entries."""

from __future__ import annotations

import zlib
from pathlib import Path

import pytest

from daemon.namesrv.controller import NamesrvController
from daemon.namesrv.processor import MAX_FILTER_SERVERS
from daemon.remoting.bodies import (
    RegisterBrokerBody,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicRouteData,
)
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.headers import RegisterBrokerRequestHeader
from store.models import DataVersion
from tests.support.namesrv import Namesrv, count_decodes, namesrv_config, serving


async def _route(namesrv: Namesrv, topic: str) -> TopicRouteData | None:
    answer = await namesrv.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    return TopicRouteData.loads(answer.body) if answer.code == ResponseCode.SUCCESS else None


async def test_registrations_past_the_route_cap_add_no_entries_and_listed_brokers_stay(
    tmp_path: Path,
) -> None:
    controller = NamesrvController(namesrv_config(tmp_path, route_max_queue_datas=10))
    await controller.start()
    try:
        async with RemotingClient() as client:
            ns = Namesrv(controller, client)
            real = {f"Real{i}": 4 for i in range(6)}
            assert (await ns.register(real, compressed=True)).code == ResponseCode.SUCCESS
            # an invented broker whose topics would pass the cap: refused, nothing of it held
            evil = await ns.register(
                {f"Evil{i}": 8 for i in range(6)}, broker_name="evil-1", broker_addr="10.9.9.9:10911"
            )
            assert evil.code == ResponseCode.SYSTEM_ERROR and "routeMaxQueueDatas=10" in (evil.remark or "")
            assert await _route(ns, "Evil0") is None
            assert "evil-1" not in controller.routes.broker_addr_table
            # the listed broker's next table, past the cap: it stays listed with what it had
            grown = {**real, **{f"New{i}": 4 for i in range(6)}}
            again = await ns.register(grown, version=DataVersion(2, 1700000000001))
            assert again.code == ResponseCode.SUCCESS, again.remark
            assert await _route(ns, "New0") is None
            held = await _route(ns, "Real0")
            assert held is not None and [b.broker_name for b in held.broker_datas] == ["broker-a"]
            assert controller.routes.queue_datas == 6
            # room again (a topic deleted): the same table is read whole and added up to the cap
            await ns.call(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "Real5"})
            assert controller.routes.queue_datas == 5
            assert (
                await ns.register(grown, version=DataVersion(2, 1700000000001))
            ).code == ResponseCode.SUCCESS
            assert await _route(ns, "New0") is None  # 5 + 7 is still past 10: left out again
            small = {**real, "New0": 4}
            assert (
                await ns.register(small, version=DataVersion(3, 1700000000002))
            ).code == ResponseCode.SUCCESS
            assert await _route(ns, "New0") is not None and controller.routes.queue_datas == 7
    finally:
        await controller.stop()


async def test_invented_slaves_and_masters_of_no_topic_count_an_entry_each(tmp_path: Path) -> None:
    """A slave's topics are not taken into the routes, nor has a master of no topic any: only topics
    counted, so a peer registering invented slaves (or empty masters) under new addresses was listed
    without bound. Each broker address counts as an entry too."""
    controller = NamesrvController(namesrv_config(tmp_path, route_max_queue_datas=10))
    await controller.start()
    try:
        async with RemotingClient() as client:
            ns = Namesrv(controller, client)
            assert (await ns.register({f"Real{i}": 4 for i in range(4)})).code == ResponseCode.SUCCESS
            codes = []
            for i in range(8):
                slave = await ns.register(
                    {"Real0": 4}, broker_name=f"slave-{i}", broker_addr=f"10.9.9.{i}:10911", broker_id=1
                )
                empty = await ns.register({}, broker_name=f"empty-{i}", broker_addr=f"10.9.8.{i}:10911")
                codes += [slave.code, empty.code]
            # 4 topics and the real broker's address held: 5 more addresses fit, then every one is refused
            assert codes.count(ResponseCode.SUCCESS) == 5
            assert set(codes[5:]) == {ResponseCode.SYSTEM_ERROR}
            assert len(controller.routes.broker_live_table) == 6
            assert controller.routes.queue_datas + len(controller.routes.broker_live_table) == 10
            # a listed address registers again (its liveness kept), and its topics changed are left out
            again = await ns.register(
                {f"Real{i}": 4 for i in range(4)}, version=DataVersion(2, 1700000000001)
            )
            assert again.code == ResponseCode.SUCCESS
            slave = await ns.register(
                {"X": 1}, broker_name="slave-0", broker_addr="10.9.9.0:10911", broker_id=1
            )
            assert slave.code == ResponseCode.SUCCESS
    finally:
        await controller.stop()


async def test_a_registration_listing_too_many_filter_servers_is_refused(namesrv: Namesrv) -> None:
    """The filter server list is kept per address and answered in every route of the broker's topics:
    a peer's 16 MiB of them were held and sent back with each lookup."""
    for servers in ([f"10.0.0.1:{port}" for port in range(MAX_FILTER_SERVERS + 1)], ["x" * 256]):
        wrapper = TopicConfigSerializeWrapper({"F": TopicConfig("F", 4, 4)}, DataVersion(1, 1700000000000))
        header = RegisterBrokerRequestHeader("broker-f", "10.9.7.1:10911", "C", "10.9.7.1:10912", 0)
        body = RegisterBrokerBody(wrapper, servers).encode()
        request = RemotingCommand.request(RequestCode.REGISTER_BROKER, header.to_ext_fields(), body)
        answer = await namesrv.client.invoke(namesrv.addr, request)
        assert answer.code == ResponseCode.SYSTEM_ERROR and "filter servers" in (answer.remark or "")
        assert await _route(namesrv, "F") is None
    listed = RegisterBrokerBody(wrapper, ["10.0.0.1:1"] * MAX_FILTER_SERVERS).encode()
    request = RemotingCommand.request(RequestCode.REGISTER_BROKER, header.to_ext_fields(), listed)
    assert (await namesrv.client.invoke(namesrv.addr, request)).code == ResponseCode.SUCCESS


async def test_a_table_past_the_cap_is_refused_by_its_count_before_it_is_parsed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An invented broker's table of many topics (a small body compressed) was parsed whole, the
    NameServer's CPU busy and every other answer late, before the cap refused it: its count alone now
    refuses it, in either form, and a broker within the cap is still parsed and listed."""
    controller = NamesrvController(namesrv_config(tmp_path, route_max_queue_datas=200))
    await controller.start()
    try:
        async with RemotingClient() as client:
            ns = Namesrv(controller, client)
            assert (await ns.register({f"Real{i}": 4 for i in range(50)}, compressed=True)).code == (
                ResponseCode.SUCCESS
            )
            decoded = count_decodes(monkeypatch)
            flood = {f"Invented{i}": 8 for i in range(5000)}
            for compressed in (True, False):
                for name, addr in (("evil-1", "10.9.9.9:10911"), ("broker-a", "10.9.9.8:10911")):
                    answer = await ns.register(
                        flood, broker_name=name, broker_addr=addr, compressed=compressed
                    )
                    assert answer.code == ResponseCode.SYSTEM_ERROR, answer.remark
                    assert "routeMaxQueueDatas=200" in (answer.remark or "")
            # a new master whose table would pass the cap with what is held, though alone it would not
            near = {f"Near{i}": 4 for i in range(160)}
            answer = await ns.register(
                near, broker_name="evil-2", broker_addr="10.9.9.7:10911", compressed=True
            )
            assert answer.code == ResponseCode.SYSTEM_ERROR and "routeMaxQueueDatas=200" in (
                answer.remark or ""
            )
            assert decoded == []
            assert await _route(ns, "Invented0") is None and await _route(ns, "Near0") is None
            # within the cap: parsed and listed, in either form
            for i, compressed in enumerate((True, False)):
                fits = {f"Fits{i}-{j}": 4 for j in range(20)}
                answer = await ns.register(
                    fits, broker_name=f"broker-{i}", broker_addr=f"10.9.8.{i}:10911", compressed=compressed
                )
                assert answer.code == ResponseCode.SUCCESS, answer.remark
                assert await _route(ns, f"Fits{i}-0") is not None
            assert len(decoded) == 2
    finally:
        await controller.stop()


@pytest.mark.pure_python
async def test_a_slaves_table_is_never_parsed_and_a_listed_address_past_the_cap_is_left_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The routes take no topic of a slave, yet a slave's table was parsed whole, and a listed address's
    table whatever its count: a peer registering as a slave (listed once with a small table) with a
    table of a million invented topics cost the NameServer seconds of CPU at each registration. A
    slave's entries are now stepped over, and a table past the cap is refused by its count from a
    listed address too, which stays listed with what it holds."""
    async with serving(namesrv_config(tmp_path, route_max_queue_datas=200)) as ns:
        routes = ns.controller.routes
        real = {f"Real{i}": 4 for i in range(50)}
        assert (await ns.register(real, compressed=True)).code == ResponseCode.SUCCESS
        decoded = count_decodes(monkeypatch)
        slave = "10.9.9.9:10911"
        for i, compressed in enumerate((True, False)):
            version = DataVersion(2 + i, 1700000000000 + i)
            answer = await ns.register(
                real, version=version, compressed=compressed, broker_addr=slave, broker_id=1
            )
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            assert routes.broker_live_table[slave].data_version == version
        flood = {f"Invented{i}": 8 for i in range(5000)}
        for i, compressed in enumerate((True, False)):
            for addr, broker_id in ((slave, 1), ("127.0.0.1:10911", 0)):
                answer = await ns.register(
                    flood,
                    broker_addr=addr,
                    broker_id=broker_id,
                    version=DataVersion(9 + i, 1700000000009),
                    compressed=compressed,
                )
                assert answer.code == ResponseCode.SUCCESS, answer.remark
        assert decoded == []
        assert routes.broker_addr_table["broker-a"].broker_addrs == {0: "127.0.0.1:10911", 1: slave}
        assert routes.queue_datas == 50 and await _route(ns, "Invented0") is None


def test_a_body_read_without_its_table_keeps_its_version_and_filter_servers() -> None:
    version = DataVersion(7, 1700000000007)
    table = {f"T{i}": TopicConfig(f"T{i}", 4, 4) for i in range(300)}
    body = RegisterBrokerBody(TopicConfigSerializeWrapper(table, version), ["10.0.0.1:1", "10.0.0.2:2"])
    for compressed in (True, False):
        head = RegisterBrokerBody.decode_without_table(body.encode(compressed), compressed)
        assert head.topic_config_serialize_wrapper.data_version == version
        assert head.topic_config_serialize_wrapper.topic_config_table == {}
        assert head.filter_server_list == ["10.0.0.1:1", "10.0.0.2:2"]
    cut = zlib.compress(zlib.decompress(body.encode(True))[:-40])
    with pytest.raises(ValueError, match="truncated"):
        RegisterBrokerBody.decode_without_table(cut, True)
