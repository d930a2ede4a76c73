"""Values a socket or 4.9.8 would not take as written: ports outside 0..65535 (a socket takes them modulo
65536, so listenPort=70000 listened on 4464 unsaid), refused as a configuration error, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon.broker.broker import check_dledger
from daemon.broker.config import BrokerConfig
from daemon.config import ConfigError, load_config
from daemon.namesrv.config import NamesrvConfig
from mqctl.errors import UsageError
from tests.support.cli import RunCli


@pytest.mark.parametrize(
    ("key", "field"),
    [
        ("listenPort", "listen_port"),
        ("haListenPort", "ha_listen_port"),
        ("metricsPort", "metrics_port"),
        ("grpcListenPort", "grpc_listen_port"),
    ],
)
def test_every_broker_port_key_is_a_port(key: str, field: str) -> None:
    with pytest.raises(ConfigError, match=f"{key} is a port, 0..65535, not 70000"):
        BrokerConfig(**{field: 70000})
    with pytest.raises(ConfigError, match=key):
        BrokerConfig(**{field: -5})
    BrokerConfig(**{field: 65535, "ha_listen_port": 1}) if field == "listen_port" else BrokerConfig(**{field: 0})


def test_a_port_out_of_range_in_a_file_is_a_config_error(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=broker-a\nlistenPort=70000\n")
    with pytest.raises(ConfigError, match="listenPort is a port"):
        load_config(BrokerConfig, conf)
    props = tmp_path / "namesrv.properties"
    props.write_text("listenPort=99999\n")
    with pytest.raises(ConfigError, match="listenPort is a port"):
        load_config(NamesrvConfig, props)


def test_a_derived_ha_port_past_the_range_is_refused() -> None:
    """listenPort 65535 without haListenPort put the HA listener on listenPort + 1, 65536: port 0."""
    assert BrokerConfig(listen_port=65534).ha_port == 65535
    with pytest.raises(ConfigError, match="the HA port is a port, 0..65535, not 65536 .*haListenPort"):
        BrokerConfig(listen_port=65535)
    assert BrokerConfig(listen_port=65535, ha_listen_port=20000).ha_port == 20000


def test_dledger_peer_ports_are_ports() -> None:
    config = BrokerConfig(
        enable_dleger_commit_log=True,
        dleger_group="g",
        dleger_self_id="n0",
        dleger_peers="n0-127.0.0.1:40911;n1-127.0.0.1:70000",
    )
    with pytest.raises(ConfigError, match="n1-127.0.0.1:70000: the port is 1..65535"):
        check_dledger(config)


@pytest.mark.parametrize(
    "args",
    [
        ("up", "--broker-port", "70000"),
        ("up", "--namesrv-port", "65536"),
        ("up", "--metrics-port", "-1"),
        ("up", "--grpc-port", "70000"),
        ("broker", "start", "--port", "70000"),
        ("broker", "start", "--metrics-port", "70000"),
    ],
)
def test_port_flags_are_range_checked(cli: RunCli, args: tuple[str, ...], tmp_path: Path) -> None:
    result = cli(*args, "--data" if args[0] == "up" else "--store", str(tmp_path / "d"))
    assert result.code == UsageError.exit_code, result.stderr
    assert f"bad {args[-2]} {args[-1]}: a port is 0..65535" in result.stderr
