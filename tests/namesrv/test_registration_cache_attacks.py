"""Attacks on the NameServer's skipped parses: a registration it reads no table of (the very bytes this
address last registered, or a table at a data version it already holds) must still leave the routes as
a whole parse would."""

from __future__ import annotations

import pytest

from daemon.remoting.bodies import (
    ClusterInfo,
    DataVersion,
    RegisterBrokerBody,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicRouteData,
)
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.headers import RegisterBrokerRequestHeader
from store import fastjson
from tests.support.namesrv import Namesrv, count_decodes, count_heads

ADDR = "127.0.0.1:10911"


async def _register_body(namesrv: Namesrv, body: bytes, broker_id: int = 0) -> RemotingCommand:
    header = RegisterBrokerRequestHeader("broker-a", ADDR, "DefaultCluster", "127.0.0.1:10912", broker_id)
    request = RemotingCommand.request(RequestCode.REGISTER_BROKER, header.to_ext_fields(), body)
    return await namesrv.client.invoke(namesrv.addr, request)


async def _route(namesrv: Namesrv, topic: str) -> TopicRouteData | None:
    r = await namesrv.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    return TopicRouteData.loads(r.body) if r.code == ResponseCode.SUCCESS else None


def _body(topics: dict[str, int], version: DataVersion, filter_servers: list[str]) -> bytes:
    wrapper = TopicConfigSerializeWrapper({t: TopicConfig(t, n, n) for t, n in topics.items()}, version)
    return RegisterBrokerBody(wrapper, filter_servers).encode()


async def test_filter_servers_are_taken_at_a_held_version_whatever_the_key_order(namesrv: Namesrv) -> None:
    """4.9.8 takes a registration's filter server list at every registration, whatever its data version;
    JSON keys in another order than fastjson's (the list after the table) must not lose it."""
    version = DataVersion(3, 33)
    assert (await _register_body(namesrv, _body({"T": 4}, version, ["10.0.0.1:1"]))).code == 0
    route = await _route(namesrv, "T")
    assert route is not None and route.filter_server_table == {ADDR: ["10.0.0.1:1"]}
    # the same version, another list, in the JSON's sorted layout: read from the part before the table
    assert (await _register_body(namesrv, _body({"T": 4}, version, ["10.0.0.2:2"]))).code == 0
    route = await _route(namesrv, "T")
    assert route is not None and route.filter_server_table == {ADDR: ["10.0.0.2:2"]}
    # the same again with the list after the table (a JSON object's keys in any order are the same body)
    unsorted = (
        b'{"topicConfigSerializeWrapper":{"dataVersion":'
        + fastjson.dumps(version)
        + b',"topicConfigTable":{"T":'
        + fastjson.dumps(TopicConfig("T", 4, 4))
        + b'}},"filterServerList":["10.0.0.3:3"]}'
    )
    assert RegisterBrokerBody.decode(unsorted).filter_server_list == ["10.0.0.3:3"]
    assert (await _register_body(namesrv, unsorted)).code == 0
    route = await _route(namesrv, "T")
    assert route is not None and route.filter_server_table == {ADDR: ["10.0.0.3:3"]}


async def test_a_broker_the_idle_scan_dropped_is_read_whole_when_its_same_bytes_come_back(
    namesrv: Namesrv, monkeypatch: pytest.MonkeyPatch
) -> None:
    decoded = count_decodes(monkeypatch)
    routes = namesrv.controller.routes
    body = _body({"T": 4, "U": 2}, DataVersion(5, 55), [])
    assert (await _register_body(namesrv, body)).code == 0
    assert (await _register_body(namesrv, body)).code == 0
    assert len(decoded) == 1
    routes.broker_live_table[ADDR].last_update_ms = 0
    assert [e.broker_addr for e in routes.scan_not_active_brokers()] == [ADDR]
    assert await _route(namesrv, "T") is None
    cluster = ClusterInfo.loads((await namesrv.call(RequestCode.GET_BROKER_CLUSTER_INFO)).body)
    assert cluster.broker_addr_table == {}
    assert (await _register_body(namesrv, body)).code == 0
    assert len(decoded) == 2  # dropped by the scan: read whole again
    for topic, queues in (("T", 4), ("U", 2)):
        route = await _route(namesrv, topic)
        assert route is not None and [q.read_queue_nums for q in route.queue_datas] == [queues]
        assert route.broker_datas[0].broker_addrs == {0: ADDR}
    cluster = ClusterInfo.loads((await namesrv.call(RequestCode.GET_BROKER_CLUSTER_INFO)).body)
    assert cluster.broker_addr_table["broker-a"].broker_addrs == {0: ADDR}
    # the same bytes from the same address as a slave (a DLedger leader change the other way) are read
    # again, without the table: the routes take no topic of a slave
    heads = count_heads(monkeypatch)
    assert (await _register_body(namesrv, body, broker_id=1)).code == 0
    assert len(decoded) == 2 and len(heads) == 1
    cluster = ClusterInfo.loads((await namesrv.call(RequestCode.GET_BROKER_CLUSTER_INFO)).body)
    assert cluster.broker_addr_table["broker-a"].broker_addrs == {1: ADDR}
