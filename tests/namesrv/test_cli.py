"""`mqctl namesrv start/stop/status` as real processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode
from daemon.remoting.command import RemotingCommand
from mqctl.services.processes import process_name
from tests.support.cli import RunCli
from tests.support.paths import ROOT
from tests.support.ports import free_port


@pytest.fixture
def cli(cli_process: RunCli) -> RunCli:
    """Daemons the CLI starts, finds and stops: a real ``mqctl`` process per call (end to end)."""
    return cli_process


pytestmark = pytest.mark.slow


def wait_for_file(path: Path, proc: subprocess.Popen[str] | None = None, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        if proc is not None and proc.poll() is not None:
            pytest.fail(
                f"namesrv exited early ({proc.returncode}): {proc.stderr.read() if proc.stderr else ''}"
            )
        time.sleep(0.05)
    pytest.fail(f"{path} did not appear within {timeout}s")


async def test_foreground_start_serves_and_stops_gracefully_on_sigterm(
    tmp_path: Path, cli_env: dict[str, str], cli: RunCli
) -> None:
    data = tmp_path / "ns"
    proc = subprocess.Popen(
        [sys.executable, "-m", "mqctl", "namesrv", "start", "--listen", "127.0.0.1:0", "--data", str(data)],
        env=cli_env,
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        addr = wait_for_file(data / "namesrv.addr", proc)
        async with RemotingClient() as client:
            put = {"namespace": "NS", "key": "k", "value": "v"}
            assert (
                await client.invoke(addr, RemotingCommand.request(RequestCode.PUT_KV_CONFIG, put))
            ).code == 0
        status = cli("namesrv", "status", "--data", str(data), "-o", "json")
        assert status.code == 0, status.stderr
        assert status.json() == {
            "state": "running",
            "data_dir": str(data),
            "pid": proc.pid,
            "detected_by": "pid file",
            "process": process_name(proc.pid),
            "address": addr,
            "reachable": True,
            "clusters": 0,
            "brokers": 0,
            "topics": 0,
        }
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.stderr is not None
    log = proc.stderr.read()
    assert f"NameServer listening on 127.0.0.1:{addr.rsplit(':', 1)[1]}" in log
    assert "shutting down gracefully" in log
    assert not (data / "namesrv.pid").exists() and not (data / "namesrv.addr").exists()
    assert json.loads((data / "kvConfig.json").read_text()) == {"configTable": {"NS": {"k": "v"}}}


def test_daemon_start_status_stop(tmp_path: Path, cli: RunCli) -> None:
    data = str(tmp_path / "ns")
    started = cli("namesrv", "start", "--daemon", "--listen", "127.0.0.1:0", "--data", data)
    assert started.code == 0, started.stderr
    assert "NameServer started in the background: NameServer listening on" in started.stderr
    try:
        pid = int((tmp_path / "ns" / "namesrv.pid").read_text())
        assert os.getpgid(pid) != os.getpgid(0)  # detached into its own session
        status = cli("namesrv", "status", "--data", data, "-o", "json")
        assert status.code == 0 and status.json()["pid"] == pid
        again = cli("namesrv", "start", "--daemon", "--listen", "127.0.0.1:0", "--data", data)
        assert again.code == 4 and f"already running from {data} (pid {pid})" in again.stderr
    finally:
        stopped = cli("namesrv", "stop", "--data", data)
    assert stopped.code == 0 and f"NameServer pid {pid} stopped" in stopped.stderr
    closed = {"MQCTL_NAMESRV_LISTEN_PORT": str(free_port())}  # the port probe must find nothing either
    gone = cli("namesrv", "status", "--data", data, "-o", "json", env=closed)
    assert gone.code == 3 and gone.json() == {"state": "stopped", "data_dir": data}
    again = cli("namesrv", "stop", "--data", data, env=closed)
    assert again.code == 3 and "no NameServer is running" in again.stderr
    assert "NameServer listening on 127.0.0.1:" in (tmp_path / "ns" / "namesrv.log").read_text()


def test_print_config_reads_rocketmq_properties(tmp_path: Path, cli: RunCli) -> None:
    conf = tmp_path / "namesrv.properties"
    conf.write_text("listenPort=19876\norderMessageEnable=true\nkvConfigPath=/srv/kv.json\n")
    shown = cli("namesrv", "start", "-c", str(conf), "--print-config")
    assert shown.code == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert {"listenPort=19876", "orderMessageEnable=true", "kvConfigPath=/srv/kv.json"} <= set(lines)
    flagged = cli("namesrv", "start", "-c", str(conf), "--listen", "127.0.0.1:0", "--print-config")
    assert (
        "listenPort=0" in flagged.stdout.splitlines()
        and "listenHost=127.0.0.1" in flagged.stdout.splitlines()
    )


def test_bad_listen_is_a_usage_error(cli: RunCli) -> None:
    result = cli("namesrv", "start", "--listen", "nowhere", "--print-config")
    assert result.code == 2 and "bad --listen 'nowhere'" in result.stderr
