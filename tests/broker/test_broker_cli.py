"""`mqctl broker start/stop/status` as a user runs them: a real broker.conf, a daemon, a pid file."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.conftest import RunCli


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def broker_conf(tmp_path: Path) -> Path:
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "brokerClusterName = DefaultCluster\n"
        "brokerName = broker-cli\n"
        "brokerId = 0\n"
        "deleteWhen = 04\n"
        "fileReservedTime = 48\n"
        "brokerRole = ASYNC_MASTER\n"
        "flushDiskType = ASYNC_FLUSH\n"
        f"storePathRootDir = {tmp_path / 'store'}\n"
        f"listenPort = {free_port()}\n"
        "brokerIP1 = 127.0.0.1\n"
        "mappedFileSizeCommitLog = 4194304\n"
        "mapedFileSizeCommitLog = 1073741824\n"
        f"metricsPort = {free_port()}\n"
    )
    return conf


def test_print_config_reads_rocketmq_keys(cli: RunCli, broker_conf: Path) -> None:
    r = cli("broker", "start", "-c", str(broker_conf), "--print-config")
    assert r.code == 0, r.stderr
    assert "brokerName=broker-cli\n" in r.stdout and "fileReservedTime=48\n" in r.stdout
    assert "mappedFileSizeCommitLog=4194304\n" in r.stdout  # the old `maped...` spelling is ignored


@pytest.mark.slow
def test_daemon_start_status_stop(cli: RunCli, broker_conf: Path) -> None:
    started = cli("broker", "start", "-c", str(broker_conf), "--daemon")
    assert started.code == 0, started.stderr
    assert "broker started in the background" in started.stderr
    try:
        again = cli("broker", "start", "-c", str(broker_conf), "--daemon")
        assert again.code == 4 and "already running" in again.stderr
        status = cli("broker", "status", "-c", str(broker_conf), "-o", "json")
        assert status.code == 0, status.stderr
        assert status.json()["state"] == "running" and status.json()["reachable"] is True
        assert status.json()["version"] == "V4_9_8"
    finally:
        stopped = cli("broker", "stop", "-c", str(broker_conf))
    assert stopped.code == 0 and "stopped broker" in stopped.stderr
    assert cli("broker", "status", "-c", str(broker_conf)).code == 3
