"""Failures an operator meets first: each one stderr line and the documented exit code, never a traceback."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from mqctl.errors import ConflictError, UsageError
from tests.daemons import local_cluster
from tests.support.bounded import finish
from tests.support.cli import RunCli
from tests.support.paths import ROOT

NOWHERE = "127.0.0.1:1"  # a command that reached the network would exit 5, not 2


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A loopback port another process (this test) listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_a_busy_port_exits_4_naming_the_flag(cli: RunCli, busy_port: int, tmp_path: Path) -> None:
    up = cli("up", "--data", str(tmp_path / "up"), "--namesrv-port", str(busy_port), "--no-metrics")
    assert up.code == ConflictError.exit_code, up.stderr
    assert f"port {busy_port} is already in use" in up.stderr and "--namesrv-port" in up.stderr
    assert len(up.stderr.strip().splitlines()) == 1 + up.stderr.count("INFO")
    namesrv = cli("namesrv", "start", "--data", str(tmp_path / "ns"), "--listen", f"127.0.0.1:{busy_port}")
    assert namesrv.code == ConflictError.exit_code, namesrv.stderr
    assert "--listen" in namesrv.stderr and "Traceback" not in namesrv.stderr
    broker = cli(
        "broker",
        "start",
        "--store",
        str(tmp_path / "b"),
        "--listen",
        f"127.0.0.1:{busy_port}",
        "--no-metrics",
    )
    assert broker.code == ConflictError.exit_code, broker.stderr
    assert f"port {busy_port}" in broker.stderr and "--listen" in broker.stderr


def test_every_daemon_takes_listen_host_port(cli: RunCli, tmp_path: Path) -> None:
    shown = cli("broker", "start", "--store", str(tmp_path), "--listen", "127.0.0.1:12345", "--print-config")
    assert shown.code == 0, shown.stderr
    assert "listenHost=127.0.0.1" in shown.stdout and "listenPort=12345" in shown.stdout
    both = cli(
        "broker", "start", "--store", str(tmp_path), "--listen", "127.0.0.1:1", "-p", "2", "--print-config"
    )
    assert both.code == UsageError.exit_code
    assert cli("broker", "start", "--listen", "nohost", "--print-config").code == UsageError.exit_code


def test_up_takes_listen_host_port_too(cli: RunCli, busy_port: int, tmp_path: Path) -> None:
    """'up --listen HOST:PORT' as the daemons take it (PORT: the NameServer's); HOST alone still works."""
    up = cli("up", "--data", str(tmp_path / "up"), "--listen", f"127.0.0.1:{busy_port}", "--no-metrics")
    assert up.code == ConflictError.exit_code, up.stderr
    assert f"port {busy_port} is already in use" in up.stderr and "--listen" in up.stderr
    both = cli("up", "--data", str(tmp_path / "up"), "--listen", "127.0.0.1:1", "--namesrv-port", "2")
    assert both.code == UsageError.exit_code and "different ports" in both.stderr
    bad = cli("up", "--data", str(tmp_path / "up"), "--listen", "127.0.0.1:x")
    assert bad.code == UsageError.exit_code and "HOST:PORT" in bad.stderr


def test_a_body_over_max_size_is_refused_before_it_is_read(cli: RunCli, tmp_path: Path) -> None:
    big = tmp_path / "big.bin"
    with big.open("wb") as f:
        f.truncate(5 * 1024 * 1024)  # 5 MiB of zeros, sparse
    refused = cli("msg", "send", "-t", "T", "--file", str(big), "-n", NOWHERE)
    assert refused.code == UsageError.exit_code, refused.stderr
    assert "maxMessageSize" in refused.stderr and "--max-size" in refused.stderr
    small = cli("msg", "send", "-t", "T", "--max-size", "4", "-n", NOWHERE, input="12345")
    assert small.code == UsageError.exit_code and "over 4 bytes" in small.stderr


@pytest.mark.slow
@pytest.mark.parametrize("args", [["--help"], ["context", "ls"]])
def test_a_closed_pipe_exits_0_silently(cli: RunCli, cli_env: dict[str, str], args: list[str]) -> None:
    """``mqctl topic list | head -1``: the reader left; that is not an error."""
    for i in range(3):  # rows to write into the closed pipe
        assert cli("context", "add", f"ctx{i}", "-n", f"10.0.0.{i}:9876").code == 0
    proc = _piped(cli_env, *args)
    assert proc.stdout is not None
    proc.stdout.close()
    _, err = finish(proc, 60)
    assert proc.returncode == 0, err
    assert err == ""


@pytest.mark.slow
def test_a_tail_whose_reader_left_exits_0_though_no_message_comes(
    cli: RunCli, cli_env: dict[str, str], tmp_path: Path
) -> None:
    """``mqctl msg tail -t T | head -1``: the tail learnt that ``head`` had left only at its next write,
    and on a quiet topic none came: it waited as long as the topic stayed quiet."""
    with local_cluster(tmp_path) as local:
        ns = ["-n", local.namesrv_addr]
        assert cli("topic", "create", "-t", "Quiet", *ns).code == 0
        assert cli("msg", "send", "-t", "Quiet", "only", *ns).code == 0  # no later write to fail
        proc = _piped(cli_env, "msg", "tail", "-t", "Quiet", "--from", "earliest", *ns)
        assert proc.stdout is not None
        assert proc.stdout.readline().rstrip().endswith("only")  # what head -1 takes, then it leaves
        proc.stdout.close()
        _, err = finish(proc, 60)
    assert proc.returncode == 0, err
    assert "error" not in err and "Traceback" not in err, err


def _piped(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    """``mqctl ARGS`` in a process of its own, its stdout and stderr pipes to this test."""
    return subprocess.Popen(
        [sys.executable, "-m", "mqctl", *args],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize(
    "args",
    [
        ["topic", "create", "-t", "bad.name"],
        ["topic", "route", "-t", "has space"],
        ["group", "create", "-g", "bad/group"],
        ["offset", "show", "-g", "G", "-t", "x" * 128],
        ["msg", "tail", "-t", "T", "-g", "[g]"],
    ],
)
def test_names_are_checked_locally_with_rocketmqs_rule(cli: RunCli, args: list[str]) -> None:
    result = cli(*args, "-n", NOWHERE)
    assert result.code == UsageError.exit_code, result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_a_typos_hint_is_printed_once(cli: RunCli) -> None:
    for args in (["topci", "list"], ["topic", "lst"]):
        result = cli(*args)
        assert result.code == UsageError.exit_code
        assert result.stderr.count("Did you mean") == 1, result.stderr


def test_another_tools_word_for_a_command_is_answered_with_ours(cli: RunCli) -> None:
    """'context list' got "Did you mean 'ls'?" (a close spelling), 'context show' no suggestion at all."""
    for args, said in (
        (["context", "show"], "Did you mean 'current' or 'ls'?"),
        (["context", "delete"], "Did you mean 'rm'?"),
        (["group", "get"], "Did you mean 'show'?"),
    ):
        result = cli(*args)
        assert result.code == UsageError.exit_code
        assert result.stderr.count("Did you mean") == 1 and said in result.stderr, result.stderr


@pytest.mark.slow
def test_every_online_command_takes_timeout(cli: RunCli, busy_port: int) -> None:
    """A NameServer that never answers (this test's listener): --timeout or $MQCTL_TIMEOUT bounds the wait, exit 6."""
    silent = f"127.0.0.1:{busy_port}"
    for args in (
        ["topic", "list", "--timeout", "0.5"],
        ["group", "list", "--timeout", "0.5"],
        ["offset", "show", "-g", "G", "-t", "T", "--timeout", "0.5"],
    ):
        result = cli(*args, "-n", silent)
        assert result.code == 6, (args, result.stderr)
    assert cli("cluster", "list", "-n", silent, env={"MQCTL_TIMEOUT": "0.5"}).code == 6
    from mqctl.cli.app import command

    missing = []

    def walk(cmd: object, path: str) -> None:
        import click

        if isinstance(cmd, click.Group):
            for name, sub in cmd.commands.items():
                walk(sub, f"{path} {name}")
        elif isinstance(cmd, click.Command):
            names = {p.name for p in cmd.params}
            if {"namesrv", "context"} <= names and "timeout" not in names:
                missing.append(path)

    walk(command(), "mqctl")
    assert missing == []


@pytest.mark.slow
def test_a_background_start_exits_with_the_daemons_own_code(
    cli_process: RunCli, busy_port: int, tmp_path: Path
) -> None:
    """--daemon: the forked daemon's failure (here a busy port, exit 4) is the original process's exit code.
    A real process: --daemon forks, and a fork of the test process would outlive it (a pytest-xdist worker's
    copy waiting for tests forever, holding the run's output pipe open)."""
    data = str(tmp_path / "ns")
    result = cli_process("namesrv", "start", "--daemon", "--listen", f"127.0.0.1:{busy_port}", "--data", data)
    assert result.code == ConflictError.exit_code, result.stderr
    assert f"port {busy_port} is already in use" in result.stderr and "--listen" in result.stderr
    assert "ConflictError" not in result.stderr and len(result.stderr.splitlines()) == 1


@pytest.mark.parametrize(
    "listen", ["bad::host", "bad::1:0", "no-such-host.invalid", "no-such-host.invalid:0", "10.255.255.1:0"]
)
def test_a_listen_address_that_cannot_be_bound_is_bad_input(cli: RunCli, tmp_path: Path, listen: str) -> None:
    """A host that is not an address of this machine (or none at all) is the operator's typo: exit 2,
    naming --listen, before any daemon starts."""
    up = cli("up", "--data", str(tmp_path / "up"), "--listen", listen, "--no-metrics")
    assert up.code == UsageError.exit_code, up.stderr
    assert "--listen" in up.stderr and "Traceback" not in up.stderr
    assert len(up.stderr.strip().splitlines()) == 1, up.stderr
    namesrv = cli(
        "namesrv",
        "start",
        "--data",
        str(tmp_path / "ns"),
        "--listen",
        listen if ":0" in listen else f"{listen}:0",
    )
    assert namesrv.code == UsageError.exit_code, namesrv.stderr


@contextlib.contextmanager
def foreign_server(greeting: bytes, reply: bytes) -> Iterator[str]:
    """A loopback server that is not RocketMQ: it sends ``greeting`` on connect and ``reply`` to what it
    reads, and holds the connection open, as a wrong port might."""
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.sendall(greeting)
                conn.recv(1024)
                conn.sendall(reply)
                conn.recv(1024)

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}"
    finally:
        server.close()


@pytest.fixture
def banner_server() -> Iterator[str]:
    """A server that greets every connection with an SSH-like banner."""
    with foreign_server(b"SSH-2.0-OpenSSH_9.6\r\n", b"") as addr:
        yield addr


def test_a_namesrv_address_that_is_not_a_namesrv_says_so(cli: RunCli, banner_server: str) -> None:
    """-n at something that is not RocketMQ: exit 7 (protocol), one line with a hint, no daemon log line."""
    for args in (["topic", "list"], ["msg", "send", "-t", "T", "x"], ["group", "list"]):
        result = cli(*args, "-n", banner_server)
        assert result.code == 7, (args, result.stderr)
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith("mqctl: error: ") and banner_server in line, line
        assert "not a NameServer" in line and "9876" in line, line


def test_spark_export_checks_its_arguments_before_starting_spark(
    cli: RunCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory that is not a store, or an --out that exists, is refused at once: no JVM start first."""
    from mqctl.spark import session

    def no_spark(*args: object, **kwargs: object) -> None:
        raise AssertionError("Spark was started before the arguments were checked")

    monkeypatch.setattr(session, "spark_session", no_spark)
    monkeypatch.delenv("MQCTL_SPARK_REMOTE", raising=False)
    (tmp_path / "not-a-store").mkdir()
    out = tmp_path / "out"
    not_store = cli("spark-export", "--store", str(tmp_path / "not-a-store"), "--out", str(out))
    assert not_store.code == UsageError.exit_code, not_store.stderr
    assert "commitlog" in not_store.stderr and "Spark was started" not in not_store.stderr
    store = tmp_path / "store"
    (store / "commitlog").mkdir(parents=True)
    out.mkdir()
    existing = cli("spark-export", "--store", str(store), "--out", str(out))
    assert existing.code == ConflictError.exit_code, existing.stderr
    assert "already exists" in existing.stderr and "--overwrite" in existing.stderr
    report = cli("spark-export", "report", "--store", str(tmp_path / "not-a-store"))
    assert report.code == UsageError.exit_code, report.stderr


@pytest.fixture(scope="module")
def metrics_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A broker's Prometheus port: HTTP, which answers nothing until it has read a request line."""
    from tests.daemons import local_cluster

    with local_cluster(tmp_path_factory.mktemp("metrics")) as cluster:
        assert cluster.broker.metrics_port
        yield cluster.broker.metrics_port


def test_a_namesrv_address_that_is_an_http_port_fails_at_once(cli: RunCli, metrics_port: int) -> None:
    """-n at the broker's /metrics port: the HTTP server waited for a line that a RocketMQ frame never
    ends, and the command for its timeout; it now answers 400 at once, and the CLI exits 7 on it."""
    import time

    addr = f"127.0.0.1:{metrics_port}"
    started = time.monotonic()
    result = cli("topic", "list", "-n", addr, "--timeout", "20")
    assert result.code == 7, result.stderr
    assert time.monotonic() - started < 5
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("mqctl: error: ") and addr in line and "not a NameServer" in line, line
    assert "HTTP/1.1 400" in line, line


@pytest.mark.parametrize("port", ["metrics", "ssh"])
def test_tls_to_a_port_that_answers_plain_text_is_a_protocol_error_not_a_certificate_one(
    cli: RunCli, metrics_port: int, port: str
) -> None:
    """--tls at a plain port (the metrics port, an SSH banner): OpenSSL reads its answer as a record of a
    wrong version. That is no certificate problem, so not exit 13 with a hint about --ca: exit 7."""
    with contextlib.ExitStack() as stack:
        addr = (
            f"127.0.0.1:{metrics_port}"
            if port == "metrics"
            else stack.enter_context(foreign_server(b"SSH-2.0-OpenSSH_9.6\r\n", b""))
        )
        result = cli("--insecure", "topic", "list", "-n", addr, "--timeout", "4")
    assert result.code == 7, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert addr in line and "does not speak TLS" in line and "--ca" not in line, line


#: What a gRPC (HTTP/2) port answers a RocketMQ frame with: its SETTINGS frame, whose first word reads as
#: a plausible frame length; the rest never comes.
HTTP2_SETTINGS = bytes.fromhex("00001e040000000000000300000003e8000400400000000500400000000600004000")


def test_a_namesrv_address_that_answers_a_frame_that_never_completes_fails_at_once(cli: RunCli) -> None:
    """A frame whose header word no RocketMQ frame has is refused when it arrives, not at the timeout."""
    import time

    with foreign_server(b"", HTTP2_SETTINGS) as addr:
        started = time.monotonic()
        result = cli("topic", "list", "-n", addr, "--timeout", "4")
        assert time.monotonic() - started < 3, result.stderr
    assert result.code == 7, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("mqctl: error: ") and addr in line and "not a NameServer" in line, line


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("topics:\n  - name: X\n    read_queues: 4\n  bad", "line 4, column 6: could not find expected ':'"),
        ('{"kind": "mqctl-metadata",\n "topics": [}', "line 2, column 13: Expecting value"),
    ],
)
def test_a_file_that_does_not_parse_is_one_line_saying_where(
    cli: RunCli, tmp_path: Path, text: str, where: str
) -> None:
    """YAML's message drew the file's line and a caret over several lines, escaped into one as '\\n', and
    named the file '<unicode string>'."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    for args in (["apply", "-f", str(bad)], ["topic", "apply", "-f", str(bad)]):
        refused = cli(*args, "-n", NOWHERE)
        assert refused.code == UsageError.exit_code, refused.stderr
        assert f"{bad}: " in refused.stderr and where in refused.stderr, refused.stderr
        assert "\\n" not in refused.stderr and "<unicode string>" not in refused.stderr
