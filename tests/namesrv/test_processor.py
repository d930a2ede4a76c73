"""NameServer processors over the in-memory transport: the real codec and dispatcher, no sockets."""

from __future__ import annotations

import asyncio
from pathlib import Path

from daemon.namesrv.kvconfig import KVConfigManager
from daemon.namesrv.processor import NamesrvProcessor
from daemon.namesrv.routes import RouteInfoManager
from daemon.remoting.bodies import DataVersion, RegisterBrokerBody, TopicConfig, TopicConfigSerializeWrapper
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.connection import Connection, RequestDispatcher
from daemon.remoting.headers import RegisterBrokerRequestHeader
from daemon.remoting.memory import connect_pair
from tests.support.namesrv import namesrv_config


async def test_broker_connection_loss_drops_its_routes(tmp_path: Path) -> None:
    config = namesrv_config(tmp_path)
    routes = RouteInfoManager()
    processor = NamesrvProcessor(config, routes, KVConfigManager(config))
    dispatcher = RequestDispatcher(processor.table())
    closed = asyncio.Event()

    def server_closed(conn: Connection) -> None:
        routes.on_connection_closed(conn)
        closed.set()

    broker, _ = connect_pair(dispatcher, on_server_close=server_closed)
    client, _ = connect_pair(dispatcher)
    header = RegisterBrokerRequestHeader("b", "10.0.0.1:10911", "C", "10.0.0.1:10912", 0)
    body = RegisterBrokerBody(TopicConfigSerializeWrapper({"T": TopicConfig("T", 2, 2)}, DataVersion(1, 1)))
    reg = RemotingCommand.request(RequestCode.REGISTER_BROKER, header.to_ext_fields(), body.encode())
    assert (await broker.invoke(reg, timeout=1)).code == 0

    lookup = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})
    assert (await client.invoke(lookup, timeout=1)).code == 0
    broker.close()
    await closed.wait()
    lookup = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})
    assert (await client.invoke(lookup, timeout=1)).code == 17


def two_brokers(tmp_path: Path) -> tuple[RouteInfoManager, Connection, Connection]:
    """A NameServer's routes and two brokers' connections to it (the old master's, the new one's)."""
    config = namesrv_config(tmp_path)
    routes = RouteInfoManager()
    dispatcher = RequestDispatcher(NamesrvProcessor(config, routes, KVConfigManager(config)).table())
    return routes, connect_pair(dispatcher)[0], connect_pair(dispatcher)[0]


async def test_a_newer_dledger_term_takes_broker_id_0_from_a_live_master(tmp_path: Path) -> None:
    """A paused DLedger master keeps its connection: the leader elected after it takes brokerId 0 with a
    higher term; a registration without a term, or with a term not above the holder's, is refused."""
    routes, old, new = two_brokers(tmp_path)
    body = RegisterBrokerBody(TopicConfigSerializeWrapper({"T": TopicConfig("T", 2, 2)}, DataVersion(1, 1)))

    async def register(conn: Connection, addr: str, broker_id: int, term: int | None) -> int:
        header = RegisterBrokerRequestHeader("b", addr, "C", "", broker_id, d_ledger_term=term)
        reg = RemotingCommand.request(RequestCode.REGISTER_BROKER, header.to_ext_fields(), body.encode())
        return (await conn.invoke(reg, timeout=1)).code

    assert await register(old, "10.0.0.1:10911", 0, 3) == 0
    assert await register(new, "10.0.0.2:10911", 2, 3) == 0  # a follower
    assert await register(new, "10.0.0.2:10911", 0, None) == ResponseCode.NO_PERMISSION
    assert await register(new, "10.0.0.2:10911", 0, 3) == ResponseCode.NO_PERMISSION
    assert routes.broker_addr_table["b"].broker_addrs[0] == "10.0.0.1:10911"
    assert await register(new, "10.0.0.2:10911", 0, 4) == 0
    assert routes.broker_addr_table["b"].broker_addrs[0] == "10.0.0.2:10911"
    # the old master wakes and registers again before it hears of the new term: refused
    assert await register(old, "10.0.0.1:10911", 0, 3) == ResponseCode.NO_PERMISSION
    assert routes.broker_addr_table["b"].broker_addrs[0] == "10.0.0.2:10911"
    # then steps down and registers as the follower it is
    assert await register(old, "10.0.0.1:10911", 1, 4) == 0


async def test_a_broker_without_a_term_cannot_take_a_live_master_place(tmp_path: Path) -> None:
    """A master registered without a DLedger term (master/slave mode) keeps its place against any term."""
    routes, old, new = two_brokers(tmp_path)
    body = RegisterBrokerBody(TopicConfigSerializeWrapper({}, DataVersion(1, 1))).encode()
    first = RegisterBrokerRequestHeader("b", "10.0.0.1:10911", "C", "", 0)
    reg = RemotingCommand.request(RequestCode.REGISTER_BROKER, first.to_ext_fields(), body)
    assert (await old.invoke(reg, timeout=1)).code == 0
    hijack = RegisterBrokerRequestHeader("b", "10.0.0.9:10911", "C", "", 0, d_ledger_term=99)
    reg = RemotingCommand.request(RequestCode.REGISTER_BROKER, hijack.to_ext_fields(), body)
    assert (await new.invoke(reg, timeout=1)).code == ResponseCode.NO_PERMISSION
    assert routes.broker_addr_table["b"].broker_addrs[0] == "10.0.0.1:10911"


async def test_a_term_takes_a_live_master_place_only_from_a_host_of_its_group(tmp_path: Path) -> None:
    """The term is the registrant's word: a stranger's REGISTER_BROKER of brokerId 0 with a term above the
    master's would put the stranger in every route of that group. A master that names its group's hosts
    (dLegerPeers, resolved) lets only a connection from one of them take its place by term."""
    config = namesrv_config(tmp_path)
    routes = RouteInfoManager()
    dispatcher = RequestDispatcher(NamesrvProcessor(config, routes, KVConfigManager(config)).table())
    old = connect_pair(dispatcher)[0]
    stranger, seen = connect_pair(dispatcher)
    peer = seen.address[0]  # the stranger's address, as the NameServer sees it
    body = RegisterBrokerBody(TopicConfigSerializeWrapper({}, DataVersion(1, 1))).encode()

    async def register(conn: Connection, addr: str, term: int, hosts: str | None = None) -> int:
        header = RegisterBrokerRequestHeader("b", addr, "C", "", 0, d_ledger_term=term, d_ledger_hosts=hosts)
        reg = RemotingCommand.request(RequestCode.REGISTER_BROKER, header.to_ext_fields(), body)
        return (await conn.invoke(reg, timeout=1)).code

    assert await register(old, "10.0.0.1:10911", 3, hosts="10.0.0.1,10.0.0.2,10.0.0.3") == 0
    assert await register(stranger, "10.0.0.9:10911", 99) == ResponseCode.NO_PERMISSION
    assert routes.broker_addr_table["b"].broker_addrs[0] == "10.0.0.1:10911"
    # a member's host (here the master names the stranger's among its group's) takes it
    assert await register(old, "10.0.0.1:10911", 3, hosts=f"10.0.0.1,10.0.0.2,{peer}") == 0
    assert await register(stranger, "10.0.0.9:10911", 4) == 0
    assert routes.broker_addr_table["b"].broker_addrs[0] == "10.0.0.9:10911"


async def test_only_a_brokers_own_connection_keeps_it_listed(tmp_path: Path) -> None:
    """QUERY_DATA_VERSION refreshes a broker's liveness, as a registration does: from another connection
    (anyone, since a wrong version answers the right one) it kept a hung broker, whose own connection
    stays open, in the routes for good. Over its own connection it still does."""
    now = [1_000_000]
    config = namesrv_config(tmp_path)
    routes = RouteInfoManager(clock=lambda: now[0])
    dispatcher = RequestDispatcher(NamesrvProcessor(config, routes, KVConfigManager(config)).table())
    broker, stranger = connect_pair(dispatcher)[0], connect_pair(dispatcher)[0]
    version = DataVersion(1, 1)
    body = RegisterBrokerBody(TopicConfigSerializeWrapper({}, version)).encode()
    header = RegisterBrokerRequestHeader("b", "10.0.0.1:10911", "C", "", 0)
    reg = RemotingCommand.request(RequestCode.REGISTER_BROKER, header.to_ext_fields(), body)
    assert (await broker.invoke(reg, timeout=1)).code == 0

    async def query(conn: Connection) -> int:
        ask = RemotingCommand.request(
            RequestCode.QUERY_DATA_VERSION,
            {"brokerAddr": "10.0.0.1:10911", "brokerName": "b", "clusterName": "C", "brokerId": "0"},
            version.dumps(),
        )
        assert (await conn.invoke(ask, timeout=1)).code == 0
        return routes.broker_live_table["10.0.0.1:10911"].last_update_ms

    now[0] += 60_000
    assert await query(stranger) == 1_000_000
    assert await query(broker) == 1_060_000
