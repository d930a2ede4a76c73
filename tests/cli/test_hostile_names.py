"""A NameServer's answers are the peer's word: a broker name, an address or a remark carrying a terminal's
control sequences must reach the terminal escaped, on stderr's diagnostics as in tables and error lines."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

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


def test_a_route_of_more_brokers_than_descriptors_asks_them_in_turns(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """A NameServer naming 100 brokers, each silent, to a CLI under an open-file limit of 64: every one is
    asked and times out, none is called down for a lack of descriptors, and the one error line names
    twenty of them and counts the rest."""
    count = 100
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
        argv = [sys.executable, "-m", "mqctl", "group", "list", "-n", namesrv.addr, "--timeout", "1"]
        done = subprocess.run(
            ["sh", "-c", 'ulimit -n 64 && exec "$@"', "sh", *argv],
            capture_output=True,
            text=True,
            env=cli_env,
            timeout=600,
            check=False,
        )
        loop.run(client.close())
    finally:
        loop.run(controller.stop())
        loop.close()
        for sock in silent:
            sock.close()
    assert done.returncode == 14, done.stderr
    assert "Too many open files" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("mqctl: error: no broker could be read: ")
    assert line.count(": timed out: ") == 20 and f"; and {count - 20} more" in line


async def _client() -> RemotingClient:
    return RemotingClient()
