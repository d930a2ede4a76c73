"""NameServer processors over the in-memory transport: the real codec and dispatcher, no sockets."""

from __future__ import annotations

import asyncio
from pathlib import Path

from daemon.namesrv.kvconfig import KVConfigManager
from daemon.namesrv.processor import NamesrvProcessor
from daemon.namesrv.routes import RouteInfoManager
from daemon.remoting.bodies import DataVersion, RegisterBrokerBody, TopicConfig, TopicConfigSerializeWrapper
from daemon.remoting.codes import RequestCode
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
