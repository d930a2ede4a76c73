"""Brokers on loopback addresses other than 127.0.0.1, standing in for other hosts as an operator's
rehearsal does (docs/security.md §where-the-daemons-listen, docs/replication.md §the-ha-gate): where
they register and where a slave's HA connection comes from."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from daemon.broker.broker import Broker
from daemon.broker.ha import describe_connect_failure
from daemon.namesrv.controller import NamesrvController
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from store.config import SLAVE
from tests.support.broker import start_broker
from tests.support.namesrv import namesrv_config
from tests.support.waiting import wait_until

SMALL = {"mapped_file_size_commit_log": 256 * 1024, "ha_listen_port": 0, "ha_send_heartbeat_interval": 500}


async def test_a_broker_on_another_loopback_address_registers_that_address(tmp_path: Path) -> None:
    """listenHost=127.0.0.3 without brokerIP1 registered 127.0.0.1, where nothing of it listens."""
    broker = await start_broker(tmp_path, listen_host="127.0.0.3", broker_ip1="")
    client = RemotingClient()
    try:
        assert broker.addr == f"127.0.0.3:{broker.config.listen_port}"
        answer = await client.invoke(
            broker.addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO)
        )
        assert answer.code == ResponseCode.SUCCESS
    finally:
        await client.close()
        await broker.stop()


@pytest.mark.slow
async def test_a_slave_on_another_address_connects_from_the_address_it_registered(tmp_path: Path) -> None:
    """The master's HA gate admits the hosts the NameServers list: a slave registered as 127.0.0.3 left
    from 127.0.0.1, the kernel's choice for a loopback destination, and was refused at every try."""
    namesrv = NamesrvController(namesrv_config(tmp_path))
    await namesrv.start()
    ns = f"127.0.0.1:{namesrv.port}"
    brokers: list[Broker] = []
    try:
        master = await start_broker(
            tmp_path / "master", listen_host="127.0.0.2", broker_ip1="127.0.0.2", namesrv_addr=ns, **SMALL
        )
        brokers.append(master)
        slave = await start_broker(
            tmp_path / "slave",
            listen_host="127.0.0.3",
            broker_ip1="127.0.0.3",
            namesrv_addr=ns,
            broker_id=1,
            broker_role=SLAVE,
            **SMALL,
        )
        brokers.append(slave)
        ha_master, ha_slave = master.ha_master, slave.ha_slave
        assert ha_master is not None and ha_slave is not None
        await wait_until(lambda: ha_slave.connected and bool(ha_master.connections), 30)
        assert ha_master.refused == 0
        assert ha_slave.local_addr is not None and ha_slave.local_addr.startswith("127.0.0.3:")
    finally:
        for broker in reversed(brokers):
            await broker.stop()
        await namesrv.stop()


def test_a_failed_ha_connect_is_never_logged_blank() -> None:
    """A connection the master's gate closed in the TLS handshake raised errors whose text is empty: the
    slave logged "HA connect to master ... failed: " and nothing else, at every try."""
    for exc in (ConnectionResetError(), ssl.SSLEOFError(), TimeoutError(), OSError()):
        assert describe_connect_failure(exc).strip()
    assert "master closed the connection" in describe_connect_failure(ConnectionResetError())
