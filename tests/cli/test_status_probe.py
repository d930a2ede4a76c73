"""``broker status`` and ``namesrv status`` ask the daemon they found through one service probe."""

from __future__ import annotations

import errno
import json
import re
import select
import socket
import struct
from pathlib import Path

import pytest

from mqctl import tls
from mqctl.services import processes
from mqctl.services.processes import probe
from tests.daemons import local_cluster
from tests.support.cli import RunCli
from tests.support.ports import free_port


def test_probe_asks_each_daemon_what_it_knows(tmp_path: Path) -> None:
    with local_cluster(tmp_path) as cluster:
        namesrv = probe(cluster.namesrv_addr, "namesrv")
        broker = probe(cluster.broker_addr, "broker")
    assert namesrv["reachable"] is True and namesrv["clusters"] == 1 and namesrv["brokers"] == 1
    assert namesrv["topics"] > 0
    assert broker["reachable"] is True and broker["version"] and broker["commitlog_max_offset"] >= 0
    # numbers, as cluster status has them: RocketMQ's text ("0.00", "[ 0 days, 0 hours, ... ]") no script
    # could compare
    assert isinstance(broker["put_tps"], float) and isinstance(broker["get_tps"], float)
    assert isinstance(broker["put_latency_99_ms"], float)
    assert isinstance(broker["uptime_ms"], int) and broker["uptime_ms"] >= 0


def test_a_duration_is_named_without_ms_in_a_table_and_a_latency_with_it(cli: RunCli, tmp_path: Path) -> None:
    """``broker status`` read "uptime_ms  37m 59s": a field named in milliseconds showing minutes. A table
    names it "uptime" (JSON and YAML keep ``uptime_ms``, the exact number); a latency, shown as the
    number it is, keeps its unit in its name, as a key and as a column ("PUT LATENCY 99" hid it)."""
    with local_cluster(tmp_path) as cluster:

        def run(*args: str) -> str:
            result = cli("broker", "status", *args, env={"NAMESRV_ADDR": cluster.namesrv_addr})
            assert result.code == 0, result.stderr
            return result.stdout

        table = run("-b", cluster.broker_addr)
        as_json = json.loads(run("-b", cluster.broker_addr, "-o", "json"))
        columns = run("--cluster", "DefaultCluster").splitlines()
    keys = {
        key.strip(): value.strip() for key, _, value in (line.partition("│") for line in table.splitlines())
    }
    assert "uptime_ms" not in keys and re.fullmatch(r"\d+ms|\d+s|\d+m\d\ds", keys["uptime"]), table
    assert re.fullmatch(r"\d+(\.\d+)?", keys["put_latency_99_ms"]), table
    assert isinstance(as_json["uptime_ms"], int) and "uptime" not in as_json
    header = next(line for line in columns if "PUT TPS" in line)
    assert "PUT LATENCY 99 MS" in header and "UPTIME" in header and "UPTIME MS" not in header, header


def test_probe_of_a_silent_port_says_unreachable() -> None:
    addr = f"127.0.0.1:{free_port()}"
    for daemon in ("namesrv", "broker"):
        answer = probe(addr, daemon, timeout=1.0)  # type: ignore[arg-type]
        assert answer["reachable"] is False and addr in answer["unreachable"]


def test_a_tls_only_broker_on_this_host_is_said_why_unreachable(tmp_path: Path) -> None:
    """The local form of ``broker status`` probes in plaintext unless the global flags say TLS: an
    enforcing broker closed it and the status said `reachable: no`, nothing more, of a broker that runs."""
    with local_cluster(tmp_path, tls_server_mode="enforcing") as cluster:
        shown = probe(cluster.broker_addr, "broker")
        tls.set_flags(None, None, None, None, True)  # --insecure: the test-mode certificate
        try:
            over_tls = probe(cluster.broker_addr, "broker")
        finally:
            tls.set_flags(None, None, None, None, False)
    assert shown["reachable"] is False
    assert "TLS-only" in shown["unreachable"] and "--ca" in shown["unreachable"], shown
    assert "-b HOST:PORT" in shown["unreachable"]
    assert over_tls["reachable"] is True and over_tls["version"], over_tls


def test_a_tls_only_daemon_is_asked_again_over_the_current_context_s_tls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``mqctl up --tls``, the ``context add`` line it prints, then ``broker status``: the broker just
    started was 'reachable: no'. A closed plaintext probe is tried again over the current context's TLS."""
    from mqctl.config import ContextFile
    from mqctl.tls import TlsOptions

    monkeypatch.setenv("MQCTL_CONFIG_DIR", str(tmp_path / "config"))
    with local_cluster(tmp_path, tls_server_mode="enforcing") as cluster:
        contexts = ContextFile.load()
        contexts.add("local-tls", cluster.namesrv_addr, overwrite=False, tls=TlsOptions(insecure=True))
        contexts.save()
        tls.set_flags(None, None, None, None, False)
        retried = probe(cluster.broker_addr, "broker")
        tls.set_flags(False, None, None, None, False)  # --no-tls: plaintext, as asked
        try:
            plain = probe(cluster.broker_addr, "broker")
        finally:
            tls.set_flags(None, None, None, None, False)
    assert retried["reachable"] is True and retried["over"] == "TLS of context local-tls", retried
    assert plain["reachable"] is False and "over" not in plain, plain
    assert tls.current() is None  # the retry leaves no TLS behind for what the command does next


def test_a_connection_that_meets_itself_is_not_a_listener(monkeypatch: pytest.MonkeyPatch) -> None:
    """TCP's simultaneous open: a socket bound to the port it connects to is connected to itself."""

    def self_connect(address: tuple[str, int], timeout: float) -> socket.socket:
        sock = socket.socket()
        sock.settimeout(timeout)
        sock.bind(address)
        sock.connect(address)
        return sock

    port = free_port()
    monkeypatch.setattr(processes.socket, "create_connection", self_connect)
    assert processes.port_open("127.0.0.1", port) is False


def test_a_listener_that_accepts_and_resets_at_once_is_listening(monkeypatch: pytest.MonkeyPatch) -> None:
    """A gate that refuses this host (or a daemon at its connection cap) accepts, then resets: its reset
    can land before the caller asks the connection's peer, which then has none (ENOTCONN)."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    connect = socket.create_connection

    def connect_then_reset(address: tuple[str, int], timeout: float) -> socket.socket:
        sock = connect(address, timeout)
        accepted, _ = listener.accept()
        accepted.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        accepted.close()  # an RST, not a FIN
        assert select.select([sock], [], [], 5)[0]  # the reset arrived
        return sock

    monkeypatch.setattr(processes.socket, "create_connection", connect_then_reset)
    with listener:
        assert processes.port_open("127.0.0.1", port) is True


def test_a_reset_as_the_connect_returns_is_a_listener_and_a_refusal_is_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A reset can come before the connect returns (ECONNRESET): a handshake was made, so something
    listens; a refused connect (ECONNREFUSED) found nobody."""

    def reset(address: tuple[str, int], timeout: float) -> socket.socket:
        raise ConnectionResetError(errno.ECONNRESET, "Connection reset by peer")

    monkeypatch.setattr(processes.socket, "create_connection", reset)
    assert processes.port_open("127.0.0.1", free_port()) is True
    monkeypatch.undo()
    assert processes.port_open("127.0.0.1", free_port()) is False


def test_broker_status_asks_a_broker_over_the_wire(tmp_path: Path, cli: RunCli) -> None:
    """``broker status`` read only a broker on this host's store; -b HOST:PORT and --cluster ask any
    broker by its address (or every master), with the local form's field names and its identity."""
    with local_cluster(tmp_path) as cluster:
        addr, config = cluster.broker_addr, cluster.broker.config
        local = cli("broker", "status", "--store", config.store_path_root_dir, "-o", "json")
        remote = cli("broker", "status", "-b", addr, "-o", "json")
        every = cli(
            "broker",
            "status",
            "--cluster",
            config.broker_cluster_name,
            "-n",
            cluster.namesrv_addr,
            "-o",
            "json",
        )
        unknown = cli("broker", "status", "--cluster", "NoSuchCluster", "-n", cluster.namesrv_addr)
    assert remote.code == 0, remote.stderr
    shown = remote.json()
    assert (shown["state"], shown["address"], shown["reachable"]) == ("running", addr, True)
    assert (shown["cluster"], shown["broker_name"], shown["broker_id"]) == (
        config.broker_cluster_name,
        config.broker_name,
        0,
    )
    assert shown["store"] == config.store_path_root_dir and shown["version"]
    assert "pid" not in shown and "process" not in shown  # the process is the local host's to see
    # the local form's names: the probe's figures, and what it says of the store and its listeners
    local_fields = processes.Probe.__required_keys__ | processes.Probe.__optional_keys__
    local_fields |= {"state", "store", "address", "metrics", "grpc"}
    assert set(shown) - local_fields == {"cluster", "broker_name", "broker_id"}
    assert local.json()["store"] == shown["store"]
    assert every.code == 0, every.stderr
    assert [row["address"] for row in every.json()] == [addr]
    assert unknown.code == 3 and "NoSuchCluster" in unknown.stderr


def test_broker_status_over_the_wire_is_validated_and_says_an_absent_broker(cli: RunCli) -> None:
    name = cli("broker", "status", "-b", "broker-a")
    assert name.code == 2 and "'broker-a' is not HOST:PORT" in name.stderr, name.stderr
    both = cli("broker", "status", "-b", "127.0.0.1:1", "--store", "/nonexistent")
    assert both.code == 2 and "not both" in both.stderr, both.stderr
    down = cli("broker", "status", "-b", f"127.0.0.1:{free_port()}", "--timeout", "2")
    assert down.code == 5, down.stderr
