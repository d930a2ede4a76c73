"""``mqctl group producers`` (mqadmin producerConnection) against our real NameServer and Broker over TCP."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from daemon.broker.bodies import HeartbeatData, ProducerData
from daemon.remoting.codes import RequestCode
from mqctl.errors import NotFoundError
from tests.daemons import LocalCluster, handle, local_cluster
from tests.support.broker import BrokerHandle
from tests.support.cli import RunCli


@pytest.fixture(scope="module")
def daemons(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with local_cluster(tmp_path_factory.mktemp("producers")) as cluster:
        yield cluster


@pytest.fixture
def producer(daemons: LocalCluster) -> Iterator[BrokerHandle]:
    """A producer of group PG_Live heartbeating to the broker; its connection stays open for the test."""
    wire = handle(daemons)

    async def beat() -> None:
        data = HeartbeatData("10.1.2.3@prod-1", [ProducerData("PG_Live")], [])
        assert (await wire.call(RequestCode.HEART_BEAT, body=data.dumps())).code == 0

    daemons.loop.run(beat())
    yield wire
    daemons.loop.run(wire.client.close())


def test_producers_of_a_group_and_of_none(cli: RunCli, daemons: LocalCluster, producer: BrokerHandle) -> None:
    env = {"NAMESRV_ADDR": daemons.namesrv_addr}
    result = cli("group", "producers", "-g", "PG_Live", "-o", "json", env=env)
    assert result.code == 0, result.stderr
    (row,) = result.json()
    assert row["client_id"] == "10.1.2.3@prod-1" and row["brokers"] == [daemons.broker_addr]
    assert row["addr"].startswith("127.0.0.1:") and row["language"] == "JAVA"
    table = cli("group", "producers", "-g", "PG_Live", env=env)
    assert "10.1.2.3@prod-1" in table.stdout
    on_topic = cli("group", "producers", "-g", "PG_Live", "-t", "TBW102", "-o", "json", env=env)
    assert [r["client_id"] for r in on_topic.json()] == ["10.1.2.3@prod-1"]
    missing = cli("group", "producers", "-g", "PG_Nobody", env=env)
    assert missing.code == NotFoundError.exit_code and "no online producer" in missing.stderr
