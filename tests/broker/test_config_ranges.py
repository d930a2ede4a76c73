"""Values a socket or 4.9.8 would not take as written: ports outside 0..65535 (a socket takes them modulo
65536, so listenPort=70000 listened on 4464 unsaid), refused as a configuration error, exit 2."""

from __future__ import annotations

import logging
import re
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
    BrokerConfig(**{field: 65535, "ha_listen_port": 1}) if field == "listen_port" else BrokerConfig(
        **{field: 0}
    )


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
    with pytest.raises(ConfigError, match=r"the HA port is a port, 0\.\.65535, not 65536 .*haListenPort"):
        BrokerConfig(listen_port=65535)
    assert BrokerConfig(listen_port=65535, ha_listen_port=20000).ha_port == 20000


def test_dledger_peer_ports_are_ports() -> None:
    config = BrokerConfig(
        enable_dleger_commit_log=True,
        dleger_group="g",
        dleger_self_id="n0",
        dleger_peers="n0-127.0.0.1:40911;n1-127.0.0.1:70000",
    )
    with pytest.raises(ConfigError, match=re.escape("n1-127.0.0.1:70000: the port is 1..65535")):
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


def _started(**fields: object) -> BrokerConfig:
    """A config as ``broker start`` takes it: read, then its start-up rules applied."""
    config = BrokerConfig(**fields)  # type: ignore[arg-type]
    config.check_store_roles()
    return config


def test_a_slave_with_id_0_is_refused_as_4_9_8_refuses(tmp_path: Path) -> None:
    """It started and registered as id 0: listed as the MASTER, refusing topic creation as a slave."""
    conf = tmp_path / "broker.conf"
    for broker_id in ("0", "-3"):
        conf.write_text(f"brokerRole=SLAVE\nbrokerId={broker_id}\n")
        with pytest.raises(ConfigError, match="Slave's brokerId must be > 0"):
            load_config(BrokerConfig, conf, environ={}).check_store_roles()
    conf.write_text("brokerRole=SLAVE\nbrokerId=2\n")
    assert _started(broker_role="SLAVE", broker_id=2).broker_id == 2


def test_the_start_up_rules_are_checked_at_broker_start_only(cli: RunCli, tmp_path: Path) -> None:
    """'broker status|stop -c' of a slave with id 0 (which an earlier version started) exited 2, and a
    master's id said a WARNING at every read."""
    slave = tmp_path / "slave0.conf"
    slave.write_text(f"brokerRole=SLAVE\nbrokerId=0\nstorePathRootDir={tmp_path / 's0'}\nlistenPort=0\n")
    master = tmp_path / "master3.conf"
    master.write_text(
        f"brokerRole=ASYNC_MASTER\nbrokerId=3\nstorePathRootDir={tmp_path / 'm3'}\nlistenPort=0\n"
    )
    for conf in (slave, master):
        for verb in ("status", "stop"):
            result = cli("broker", verb, "-c", str(conf))
            assert result.code in (0, 3), (verb, result.stderr)  # not running: said, no refusal
            assert "brokerId" not in result.stderr, result.stderr
    refused = cli("broker", "start", "-c", str(slave), "--print-config")
    assert refused.code == UsageError.exit_code and "Slave's brokerId must be > 0" in refused.stderr
    printed = cli("broker", "start", "-c", str(master), "--print-config")
    assert printed.code == 0 and "brokerId=0" in printed.stdout.splitlines(), printed.stdout


def test_a_masters_id_is_0_as_4_9_8_sets_it(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING"):
        config = _started(broker_role="SYNC_MASTER", broker_id=-3)
    assert config.broker_id == 0
    assert any("brokerId=-3 with brokerRole=SYNC_MASTER: 0" in r.getMessage() for r in caplog.records)


def test_disk_ratio_is_clamped_and_a_negative_reserved_time_refused(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING"):
        assert _started(disk_max_used_space_ratio=150).disk_max_used_space_ratio == 95
        assert _started(disk_max_used_space_ratio=3).disk_max_used_space_ratio == 10
    said = [r.getMessage() for r in caplog.records]
    assert any("diskMaxUsedSpaceRatio=150: 95, as 4.9.8 clamps it to 10..95" in m for m in said), said
    assert _started(disk_max_used_space_ratio=80).disk_max_used_space_ratio == 80
    with pytest.raises(ConfigError, match=r"fileReservedTime is hours .* not -1"):
        _started(file_reserved_time=-1)
    assert _started(file_reserved_time=0).file_reserved_time == 0


def test_a_latin_1_broker_conf_loads_as_javas_properties_load_reads_it(tmp_path: Path) -> None:
    """A byte that is no UTF-8 (a Latin-1 comment of a 4.9.8 broker.conf): exit 1, a UnicodeDecodeError."""
    conf = tmp_path / "broker.conf"
    conf.write_bytes(
        "# r\xe9plica du cluster\nbrokerName=broker-\xe9\nbrokerClusterName=C\\u00e9\n".encode("latin-1")
    )
    config = load_config(BrokerConfig, conf, environ={})
    assert (config.broker_name, config.broker_cluster_name) == ("broker-\xe9", "C\xe9")
    conf.write_text("brokerName=broker-\u00e9\n", encoding="utf-8")  # UTF-8 stays UTF-8
    assert load_config(BrokerConfig, conf, environ={}).broker_name == "broker-\u00e9"


def test_a_config_update_keeps_every_line_it_does_not_update_byte_for_byte(tmp_path: Path) -> None:
    from daemon.config import edit_properties_file

    conf = tmp_path / "broker.conf"
    conf.write_bytes(b"# caf\xe9\nbrokerClusterName=Cl\xc3\xbcster\nfileReservedTime=72\n")
    assert edit_properties_file(conf, {"fileReservedTime": "48", "brokerName": "b-\u00e9"}) == (
        b"# caf\xe9\nbrokerClusterName=Cl\xc3\xbcster\nfileReservedTime=48\nbrokerName=b-\\u00e9\n"
    )
    assert edit_properties_file(tmp_path / "new.conf", {"brokerName": "b"}) == b"brokerName=b\n"


def test_one_latin_1_line_is_read_as_latin_1_alone_and_named(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """One Latin-1 byte in a comment decoded the whole file as ISO-8859-1: brokerClusterName 'Clüster'
    (UTF-8) became 'ClÃ¼ster', and the broker registered in another cluster unsaid."""
    conf = tmp_path / "broker.conf"
    conf.write_bytes("# r\xe9seau\n".encode("latin-1") + "brokerClusterName=Cl\u00fcster\n".encode())
    with caplog.at_level(logging.WARNING):
        config = load_config(BrokerConfig, conf, environ={})
    assert config.broker_cluster_name == "Cl\u00fcster"
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert said == [f"{conf}:1 is not UTF-8: read as ISO-8859-1"], said
