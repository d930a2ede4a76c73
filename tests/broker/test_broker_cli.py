"""`mqctl broker start/stop/status` as a user runs them: a real broker.conf, a daemon, a pid file."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from daemon.broker.loopwatch import CAUSES
from daemon.config import parse_properties
from mqctl.services.processes import process_name
from tests.support.bounded import read_line
from tests.support.cli import RunCli
from tests.support.ports import free_port


@pytest.fixture
def cli(cli_process: RunCli) -> RunCli:
    """Daemons the CLI starts, finds and stops: a real ``mqctl`` process per call (end to end)."""
    return cli_process


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


@pytest.mark.slow
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
        assert status.json()["version"] == "V4_9_8" and status.json()["put_latency_99_ms"] == 0.0
        assert status.json()["detected_by"] == "pid file"
        figures = status.json()
        lag = [figures[f"loop_lag_{k}_ms"] for k in ("p50", "p99", "max")]
        assert all(isinstance(v, float) for v in lag) and lag == sorted(lag) and lag[0] >= 0
        assert isinstance(figures["gc_pause_max_ms"], float) and figures["gc_collections"] >= 0
        assert figures["loop_stalls"] >= 0 and list(figures["loop_stall_ms"]) == list(CAUSES)
        assert figures["loop_stall_stacks"] is None  # the watchdog is off by default
        assert figures["pop_in_flight"] == {}  # POP in flight by group: none popped
    finally:
        stopped = cli("broker", "stop", "-c", str(broker_conf))
    assert stopped.code == 0 and "stopped broker" in stopped.stderr
    assert cli("broker", "status", "-c", str(broker_conf)).code == 3


#: A daemon mqctl did not start (a Java broker, say): it locks the store as RocketMQ does (a POSIX
#: record lock on byte 0 of <store>/lock) and/or listens on a port, and exits on SIGTERM.
FOREIGN = """
import fcntl, os, signal, socket, sys
store, port = sys.argv[1], int(sys.argv[2])
if store:
    os.makedirs(store, exist_ok=True)
    fd = os.open(os.path.join(store, "lock"), os.O_RDWR | os.O_CREAT)
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
sock = socket.socket()
sock.bind(("127.0.0.1", port))
sock.listen()
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
print("ready", flush=True)
signal.pause()
"""


@pytest.fixture
def foreign() -> Iterator[Callable[[str, int], subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []

    def start(store: str, port: int) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, "-c", FOREIGN, store, str(port)], stdout=subprocess.PIPE, text=True
        )
        procs.append(proc)
        assert read_line(proc).strip() == "ready"
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


@pytest.mark.slow
def test_status_and_stop_find_a_broker_we_did_not_start_by_its_store_lock(
    cli: RunCli, broker_conf: Path, foreign: Callable[[str, int], subprocess.Popen[str]]
) -> None:
    conf = parse_properties(broker_conf.read_text())
    proc = foreign(conf["storePathRootDir"], int(conf["listenPort"]))
    status = cli("broker", "status", "-c", str(broker_conf), "-o", "json")
    assert status.code == 0, status.stderr
    found = status.json()
    assert (found["state"], found["pid"], found["detected_by"]) == ("running", proc.pid, "store lock")
    assert found["process"] == process_name(proc.pid) and found["reachable"] is False  # speaks no remoting
    stopped = cli("broker", "stop", "-c", str(broker_conf))
    assert stopped.code == 0 and f"stopped broker (pid {proc.pid}, " in stopped.stderr
    assert proc.wait(timeout=10) == 0  # it got SIGTERM, not SIGKILL
    after = cli("broker", "status", "-c", str(broker_conf), "-o", "json")
    if after.code == 0:  # the freed port was taken by a parallel test's listener: no store lock, not it
        assert after.json()["detected_by"] == "port" and after.json()["pid"] != proc.pid
    else:
        assert after.code == 3, after.stderr


@pytest.mark.slow
def test_status_finds_whatever_listens_on_the_brokers_port(
    cli: RunCli, broker_conf: Path, foreign: Callable[[str, int], subprocess.Popen[str]]
) -> None:
    proc = foreign("", int(parse_properties(broker_conf.read_text())["listenPort"]))
    status = cli("broker", "status", "-c", str(broker_conf), "-o", "json")
    assert status.code == 0, status.stderr
    assert (status.json()["pid"], status.json()["detected_by"]) == (proc.pid, "port")
    refused = cli("broker", "stop", "-c", str(broker_conf))  # a stranger on the port: not ours to stop
    assert refused.code == 4 and "does not look like a broker" in refused.stderr
    assert proc.poll() is None


@pytest.mark.slow
def test_namesrv_status_finds_a_namesrv_by_its_port(
    cli: RunCli, tmp_path: Path, foreign: Callable[[str, int], subprocess.Popen[str]]
) -> None:
    port = free_port()
    proc = foreign("", port)
    env = {"MQCTL_NAMESRV_LISTEN_PORT": str(port), "MQCTL_NAMESRV_LISTEN_HOST": "127.0.0.1"}
    status = cli("namesrv", "status", "--data", str(tmp_path / "ns"), "-o", "json", env=env)
    assert status.code == 0, status.stderr
    found = status.json()
    assert (found["pid"], found["detected_by"], found["address"]) == (proc.pid, "port", f"127.0.0.1:{port}")


@pytest.mark.slow
def test_status_of_an_acl_broker_without_credentials_is_reachable_and_says_it_refused(
    cli: RunCli, broker_conf: Path, tmp_path: Path
) -> None:
    """It answered, with a refusal: it is up. 'reachable: no' sent an operator looking for a hung broker."""
    from tests.support.acl import ADMIN_AK, ADMIN_SK, write_acl

    home = tmp_path / "home"
    write_acl(home)
    broker_conf.write_text(broker_conf.read_text() + f"aclEnable = true\nrocketmqHome = {home}\n")
    assert cli("broker", "start", "-c", str(broker_conf), "--daemon").code == 0
    try:
        unsigned = cli("broker", "status", "-c", str(broker_conf), "-o", "json")
        assert unsigned.code == 0, unsigned.stderr
        status = unsigned.json()
        assert status["reachable"] is True and "version" not in status, status
        assert "ACL" in status["refused"] and "response code 16" in status["refused"], status
        keys = ("--access-key", ADMIN_AK, "--secret-key", ADMIN_SK)
        signed = cli(*keys, "broker", "status", "-c", str(broker_conf), "-o", "json").json()
        assert signed["reachable"] is True and signed["version"] == "V4_9_8" and "refused" not in signed
    finally:
        cli("broker", "stop", "-c", str(broker_conf))


def test_the_command_of_a_command_line_is_matched_by_whole_words() -> None:
    """`stop` signals a process found by the port only when it runs the daemon: 'broker' inside an
    argument (up's --broker-port, a path, a topic) made any process pass for a broker."""
    from mqctl.cli.app import VALUED_OPTIONS
    from mqctl.services.processes import mqctl_words

    def words(line: str) -> tuple[str, ...]:
        return mqctl_words(line.split(), VALUED_OPTIONS)

    assert words("/venv/bin/python -m mqctl broker start -c b.conf") == ("broker", "start")
    assert words("/venv/bin/python /venv/bin/mqctl -n 127.0.0.1:9876 -o json up --broker-port 1") == ("up",)
    assert words("mqctl --context prod namesrv start") == ("namesrv", "start")
    assert words("/venv/bin/python -m mqctl up --data broker") == ("up",)
    assert words("/venv/bin/python -m mqctl msg send -t broker x") == ("msg", "send")
    assert words("python3 serve.py --broker broker start") == ()
    assert words("") == ()
