"""``mqctl check cluster`` sees a broker whose clock is off: the broker reports the clock its store stamps
messages with (runtime info ``brokerClockMs``), the check measures it against this host's with the
request's round trip, and compares a broker group's members with each other. The brokers' clocks are
shifted through the store's clock seam (:class:`store.clock.ShiftedClock`)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

from daemon.broker.broker import Broker
from daemon.broker.config import BrokerConfig
from daemon.broker.loopwatch import CLOCK_RUNTIME_KEY
from daemon.namesrv.controller import NamesrvController
from daemon.namesrv.processor import NamesrvProcessor
from daemon.namesrv.routes import wall_clock_ms
from daemon.remoting.command import RemotingCommand
from daemon.remoting.connection import Connection
from mqctl.services.checks import Skew
from store.api import MessageStore
from store.clock import ShiftedClock
from store.config import SLAVE
from store.engine import DefaultMessageStore
from tests.broker.test_ha import SMALL
from tests.cli.test_check import plugin
from tests.daemons import local_cluster
from tests.support.broker import broker_config
from tests.support.cli import RunCli
from tests.support.namesrv import namesrv_config
from tests.support.waiting import wait_until


def shifted(offset_ms: int) -> Any:
    """The broker's default store, its clock ``offset_ms`` off the real one."""

    def factory(config: BrokerConfig) -> MessageStore:
        return DefaultMessageStore(
            config.store_config(),
            store_host=(config.broker_ip1, config.listen_port),
            clock=ShiftedClock(offset_ms),
        )

    return factory


def seconds(pattern: str, line: str) -> float:
    found = re.search(pattern, line)
    assert found is not None, (pattern, line)
    return float(found.group(1))


def near(value: float) -> Any:
    """A measured skew: the shift, give or take what a round trip on a loaded host and ms rounding add."""
    return pytest.approx(value, abs=1.0)


def test_the_skew_is_the_peer_time_minus_the_round_trip_midpoint() -> None:
    skew = Skew.measure(1_000_500, sent=1000.0, answered=1000.2)
    assert (skew.skew, skew.uncertainty) == (pytest.approx(0.4), pytest.approx(0.1))


def test_a_broker_whose_clock_is_ten_minutes_ahead_is_a_warning(cli: RunCli, tmp_path: Path) -> None:
    """It said OK: nothing in the runtime info told the broker's clock."""
    with local_cluster(tmp_path, store_factory=shifted(600_000)) as c:
        ns = ("-n", c.namesrv_addr)
        line = plugin(cli("check", "cluster", *ns), "WARNING")
        assert seconds(rf"broker-a/0@{c.broker_addr} clock is ([\d.]+) s ahead of this host's", line) == near(
            600
        )
        assert seconds(r"clock_skew_max=([\d.]+)s;2;;0", line) == near(600)
        plugin(cli("check", "cluster", *ns, "--clock-warn", "900"), "OK")
        off = plugin(cli("check", "cluster", *ns, "--clock-warn", "0"), "OK")
        assert "clock_skew_max" not in off


def test_a_broker_in_step_is_ok_and_one_without_a_clock_is_unknown(
    cli: RunCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A RocketMQ broker answers no clock: its skew is UNKNOWN, never OK (``--clock-warn 0`` skips it)."""
    with local_cluster(tmp_path) as c:
        ns = ("-n", c.namesrv_addr)
        line = plugin(cli("check", "cluster", *ns), "OK")
        assert "clock_skew_max=" in line
        answer = c.broker.runtime_info

        def like_rocketmq() -> dict[str, str]:
            info = answer()
            del info[CLOCK_RUNTIME_KEY]
            return info

        monkeypatch.setattr(c.broker, "runtime_info", like_rocketmq)
        line = plugin(cli("check", "cluster", *ns), "UNKNOWN")
        assert "does not report its clock" in line, line
        plugin(cli("check", "cluster", *ns, "--clock-warn", "0"), "OK")


async def test_members_of_a_group_whose_clocks_differ_are_a_warning_even_when_both_are_off_ours(
    cli: RunCli, tmp_path: Path
) -> None:
    """A master 100 s ahead and its slave 130 s ahead: each is off this host's, and the members are 30 s
    apart, which a failover would carry into the store's times (this part holds when our clock is the
    one that is off)."""
    namesrv = NamesrvController(namesrv_config(tmp_path))
    await namesrv.start()
    ns = f"127.0.0.1:{namesrv.port}"
    master = Broker(
        broker_config(tmp_path / "master", namesrv_addr=ns, **SMALL), store_factory=shifted(100_000)
    )
    slave = Broker(
        broker_config(tmp_path / "slave", namesrv_addr=ns, broker_id=1, broker_role=SLAVE, **SMALL),
        store_factory=shifted(130_000),
    )

    async def check(*args: str) -> str:
        result = await asyncio.to_thread(cli, "check", "cluster", *args, env={"NAMESRV_ADDR": ns})
        return result.stdout

    try:
        await master.start()
        await slave.start()
        await wait_until(lambda: slave.ha_slave is not None and slave.ha_slave.connected, timeout=20)
        line = await check()
        assert line.startswith("CLUSTER WARNING"), line
        assert seconds(rf"broker-a/0@{master.addr} clock is ([\d.]+) s ahead", line) == near(100)
        assert seconds(rf"broker-a/1@{slave.addr} clock is ([\d.]+) s ahead", line) == near(130)
        assert seconds(r"broker-a: its members' clocks differ by ([\d.]+) s", line) == near(30)
        assert f"({slave.addr} ahead of {master.addr}; threshold 2 s)" in line, line
        assert (await check("--clock-warn", "200")).startswith("CLUSTER OK")
    finally:
        await slave.stop()
        await master.stop()
        await namesrv.stop()


def test_a_name_server_whose_clock_is_off_is_a_warning(cli: RunCli, tmp_path: Path) -> None:
    """The NameServer answers its clock on GET_BROKER_CLUSTER_INFO (``mqctlClockMs``), from the clock its
    route table keeps (here shifted a minute back; its liveness reads the same clock)."""
    with local_cluster(tmp_path) as c:
        c.namesrv.routes.clock = lambda: wall_clock_ms() - 60_000
        line = plugin(cli("check", "cluster", "-n", c.namesrv_addr), "WARNING")
        assert seconds(rf"NameServer {c.namesrv_addr} clock is ([\d.]+) s behind this host's", line) == near(
            60
        )
        assert "broker-a/0" not in line, line  # the broker's clock is right


def test_a_name_server_without_a_clock_is_unknown(
    cli: RunCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A RocketMQ NameServer sends no clock: UNKNOWN, never OK."""

    def like_rocketmq(self: NamesrvProcessor, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        return req.make_response(body=self.routes.cluster_info().dumps(bare_int_keys=True))

    monkeypatch.setattr(NamesrvProcessor, "get_cluster_info", like_rocketmq)
    with local_cluster(tmp_path) as c:
        line = plugin(cli("check", "cluster", "-n", c.namesrv_addr), "UNKNOWN")
        assert f"NameServer {c.namesrv_addr} does not report its clock" in line, line
        plugin(cli("check", "cluster", "-n", c.namesrv_addr, "--clock-warn", "0"), "OK")
