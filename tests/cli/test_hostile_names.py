"""A NameServer's answers are the peer's word: a broker name, an address or a remark carrying a terminal's
control sequences must reach the terminal escaped, on stderr's diagnostics as in tables and error lines."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from daemon.namesrv.controller import NamesrvController
from daemon.remoting.client import RemotingClient
from tests.daemons import LocalCluster, LoopThread, local_cluster
from tests.support.cli import RunCli
from tests.support.namesrv import Namesrv, namesrv_config

HOSTILE = "b\x1b]0;pwned\x07\x1b[2J"


async def _register_slave_only(cluster: LocalCluster) -> None:
    """A broker group named HOSTILE whose route lists its slave alone (the same connection registered its
    master, then the slave in its place): reads go to the slave, said in a WARNING line naming the group."""
    async with RemotingClient() as client:
        namesrv = Namesrv(cluster.namesrv, client)
        for broker_id, addr in ((0, "127.0.0.1:2"), (1, "127.0.0.1:1")):
            answer = await namesrv.register(
                {"Hostile": 1}, broker_name=HOSTILE, broker_addr=addr, broker_id=broker_id
            )
            assert answer.code == 0, answer.remark


def test_a_warning_naming_a_hostile_broker_never_drives_the_terminal(
    tmp_path: Path, cli_process: RunCli
) -> None:
    with local_cluster(tmp_path) as cluster:
        cluster.loop.run(_register_slave_only(cluster))
        result = cli_process(
            "msg", "query", "-t", "Hostile", "-k", "k1", "-n", cluster.namesrv_addr, "--timeout", "5"
        )
    assert "master is down" in result.stderr
    assert "\x1b" not in result.stderr and "\x07" not in result.stderr
    assert "b\\x1b]0;pwned\\x07\\x1b[2J" in result.stderr


def test_a_note_naming_a_hostile_broker_never_drives_the_terminal(tmp_path: Path, cli: RunCli) -> None:
    """A send that created its topic names the broker that did, as its route names it: escaped, and its
    brackets are no markup."""
    with local_cluster(tmp_path, broker_name=HOSTILE + "[/]", auto_create_topic_enable=True) as cluster:
        result = cli("msg", "send", "-t", "Created", "-n", cluster.namesrv_addr, "--timeout", "10", "hello")
    assert result.code == 0, result.stderr
    assert "did not exist" in result.stderr
    assert "\x1b" not in result.stderr and "\x07" not in result.stderr
    assert "b\\x1b]0;pwned\\x07\\x1b[2J[/]" in result.stderr


async def _register_many(namesrv: Namesrv, port: int, count: int) -> None:
    for i in range(count):
        addr = f"127.0.{2 + i // 250}.{1 + i % 250}:{port}"
        answer = await namesrv.register({}, broker_name=f"many-{i}", broker_addr=addr)
        assert answer.code == 0, answer.remark


@contextmanager
def _silent_fleet(tmp_path: Path, count: int) -> Iterator[str]:
    """A NameServer naming ``count`` brokers (many-0, many-1, ...), each accepted by the kernel and never
    answered: its address."""
    silent = [socket.socket() for _ in range(count)]
    loop = LoopThread()
    controller = NamesrvController(namesrv_config(tmp_path))
    try:
        port = 0
        for i, sock in enumerate(silent):  # accepted by the kernel, never answered
            sock.bind((f"127.0.{2 + i // 250}.{1 + i % 250}", port))
            port = sock.getsockname()[1]
            sock.listen(4)
        loop.run(controller.start())
        client = loop.run(_client())
        namesrv = Namesrv(controller, client)
        loop.run(_register_many(namesrv, port, count))
        try:
            yield namesrv.addr
        finally:
            loop.run(client.close())
    finally:
        loop.run(controller.stop())
        loop.close()
        for sock in silent:
            sock.close()


def test_a_route_of_more_brokers_than_descriptors_asks_them_in_turns(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """A NameServer naming 100 brokers, each silent, to a CLI under an open-file limit of 64: every one is
    asked and times out, none is called down for a lack of descriptors, and the one error line names
    twenty of them and counts the rest."""
    count = 100
    with _silent_fleet(tmp_path, count) as namesrv:
        argv = [sys.executable, "-m", "mqctl", "group", "list", "-n", namesrv, "--timeout", "1"]
        done = subprocess.run(
            ["sh", "-c", 'ulimit -n 64 && exec "$@"', "sh", *argv],
            capture_output=True,
            text=True,
            env=cli_env,
            timeout=600,
            check=False,
        )
    assert done.returncode == 14, done.stderr
    assert "Too many open files" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("mqctl: error: no broker could be read: ")
    assert line.count(": timed out: ") == 20 and f"; and {count - 20} more" in line


def test_a_read_of_a_silent_fleet_ends_at_the_commands_deadline(
    tmp_path: Path, cli: RunCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read of many brokers asked a bounded number at a time took a wait per turn (each answer has its
    own --timeout): a fleet of silent brokers held it as long as it had turns. Its one deadline, 4 x
    --timeout, ends it: exit 6, the brokers not answered named (twenty, the rest counted)."""
    import mqctl.admin.client
    import mqctl.services.fanout

    count = 60
    monkeypatch.setattr(mqctl.admin.client, "READ_DEADLINE_FLOOR", 0.0, raising=False)
    monkeypatch.setattr(mqctl.services.fanout, "fanout_width", lambda: 4)  # 15 turns of 1 s each
    with _silent_fleet(tmp_path, count) as namesrv:
        done = cli("group", "list", "-n", namesrv, "--timeout", "1")
    assert done.code == 6, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("mqctl: error: the command's deadline of 4s passed; no answer yet from many-"), (
        line
    )
    assert line.count("(127.0.") == 20, line
    late = int(line.split("; and ")[1].split(" more")[0])
    assert 20 < 20 + late <= count  # (the turns done before the deadline answered: timed out)
    assert "raise --timeout" in line


async def _client() -> RemotingClient:
    return RemotingClient()
