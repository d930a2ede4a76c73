"""Keys that would change where data lives or who takes writes are refused, never silently ignored."""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon.broker.broker import Broker
from daemon.broker.config import SEMANTIC_INERT_KEYS, BrokerConfig, load_broker_config
from daemon.config import ConfigError
from tests.support.cli import RunCli

# 4.9.8's multi-replica broker.conf (docs: "RocketMQ DLedger quick start"), as an operator would copy it
DLEDGER_CONF = (
    "brokerClusterName = RaftCluster\n"
    "brokerName = RaftNode00\n"
    "listenPort = 0\n"
    "enableDLegerCommitLog = true\n"
    "dLegerGroup = RaftNode00\n"
    "dLegerPeers = n0-127.0.0.1:40911;n1-127.0.0.1:40912;n2-127.0.0.1:40913\n"
    "dLegerSelfId = n0\n"
    "sendMessageThreadPoolNums = 16\n"
)


def _conf(tmp_path: Path, text: str) -> Path:
    conf = tmp_path / "broker.conf"
    conf.write_text(text + f"storePathRootDir = {tmp_path / 'store'}\nmetricsEnable = false\n")
    return conf


def test_dledger_conf_is_accepted_now_that_the_mode_works(tmp_path: Path) -> None:
    cfg = load_broker_config(_conf(tmp_path, DLEDGER_CONF), {})
    assert "enableDLegerCommitLog" not in SEMANTIC_INERT_KEYS
    assert Broker(cfg).config.enable_dleger_commit_log


def test_dledger_conf_whose_self_is_not_a_peer_is_refused(tmp_path: Path) -> None:
    cfg = load_broker_config(
        _conf(tmp_path, DLEDGER_CONF.replace("dLegerSelfId = n0", "dLegerSelfId = n7")), {}
    )
    with pytest.raises(ConfigError, match="n7"):
        Broker(cfg)
    assert not (tmp_path / "store").exists()  # refused before the store was touched


@pytest.mark.parametrize(
    "key,value",
    [
        ("readOnlyCommitLogStorePaths", "/mnt/old/commitlog"),
        ("messageStorePlugIn", "com.example.Plugin"),
        ("enableConsumeQueueExt", "true"),
        ("enableLmq", "TRUE"),
        ("enableMultiDispatch", "true"),
        ("fetchNamesrvAddrByAddressServer", "true"),
        ("startAcceptSendRequestTimeStamp", "32503680000000"),  # the year 3000
    ],
)
def test_each_semantic_inert_key_is_refused(tmp_path: Path, key: str, value: str) -> None:
    assert key in SEMANTIC_INERT_KEYS
    cfg = load_broker_config(_conf(tmp_path, f"listenPort = 0\n{key} = {value}\n"), {})
    with pytest.raises(ConfigError, match=key):
        Broker(cfg)


@pytest.mark.parametrize(
    "text",
    [
        "dLegerGroup = g\ndLegerPeers = n0-127.0.0.1:1\ndLegerSelfId = n0\n",  # inert in 4.9.8 too without the switch
        "enableDLegerCommitLog = false\nenableLmq = false\nstartAcceptSendRequestTimeStamp = 1000\n",
        "sendMessageThreadPoolNums = 16\n",
    ],
)
def test_defaults_and_harmless_keys_still_start(tmp_path: Path, text: str) -> None:
    broker = Broker(load_broker_config(_conf(tmp_path, "listenPort = 0\n" + text), {}))
    assert isinstance(broker.config, BrokerConfig)


def test_cli_start_refuses_with_one_line_and_exit_2(tmp_path: Path, cli: RunCli) -> None:
    conf = _conf(tmp_path, "listenPort = 0\nenableLmq = true\n")
    printed = cli("broker", "start", "-c", str(conf), "--print-config")  # still shows what it read
    assert printed.code == 0 and "enableLmq=true" in printed.stdout
    r = cli("broker", "start", "-c", str(conf))
    assert r.code == 2, r.stderr
    assert "enableLmq=true" in r.stderr and len(r.stderr.strip().splitlines()) == 1
