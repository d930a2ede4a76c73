"""A NameServer's answers are the peer's word: a broker name, an address or a remark carrying a terminal's
control sequences must reach the terminal escaped, on stderr's diagnostics as in tables and error lines."""

from __future__ import annotations

from pathlib import Path

from daemon.remoting.client import RemotingClient
from tests.daemons import LocalCluster, local_cluster
from tests.support.cli import RunCli
from tests.support.namesrv import Namesrv

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
