"""``--context``, ``-o`` and ``--timeout`` are global: taken before the noun (kubectl, nats) or after it,
the command's own flag winning when both are given."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from mqctl.errors import NotFoundError
from tests.daemons import LocalCluster, local_cluster
from tests.support.cli import RunCli


@pytest.fixture(scope="module")
def daemons(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with local_cluster(tmp_path_factory.mktemp("cluster")) as cluster:
        yield cluster


def test_output_before_or_after_the_noun(cli: RunCli, daemons: LocalCluster) -> None:
    env = {"NAMESRV_ADDR": daemons.namesrv_addr}
    before = cli("-o", "json", "cluster", "list", env=env)
    after = cli("cluster", "list", "-o", "json", env=env)
    assert before.code == after.code == 0, before.stderr
    assert before.json() == after.json() and before.json()[0]["broker_name"] == "broker-a"
    assert cli("-o", "yaml", "cluster", "list", "-o", "json", env=env).json() == after.json()  # own flag wins
    # a global flag beats the environment variable, as the command's own flag does
    assert (
        cli("--output", "json", "cluster", "list", env={**env, "MQCTL_OUTPUT": "csv"}).json() == after.json()
    )
    # offline commands take it too
    listed = cli("-o", "json", "context", "ls")
    assert listed.code == 0 and listed.json() == []


def test_context_before_or_after_the_noun(cli: RunCli, daemons: LocalCluster) -> None:
    assert cli("context", "add", "here", "-n", daemons.namesrv_addr).code == 0
    for args in (("--context", "here", "cluster", "list"), ("cluster", "list", "--context", "here")):
        result = cli(*args, "-o", "json")
        assert result.code == 0, result.stderr
        assert result.json()[0]["addr"] == daemons.broker_addr
    missing = cli("--context", "nowhere", "cluster", "list")
    assert missing.code == NotFoundError.exit_code and "nowhere" in missing.stderr


def test_timeout_before_the_noun(cli: RunCli, daemons: LocalCluster) -> None:
    env = {"NAMESRV_ADDR": daemons.namesrv_addr}
    result = cli("-v", "--timeout", "0.7", "topic", "list", env=env)
    assert result.code == 0 and "timeout 0.7s per answer (from --timeout)" in result.stderr
    result = cli("--timeout", "0.7", "-v", "topic", "list", "--timeout", "0.8", env=env)
    assert "timeout 0.8s per answer (from --timeout)" in result.stderr
    refused = cli("--timeout", "0", "topic", "list", env=env)
    assert refused.code == 2 and "--timeout" in refused.stderr


def test_the_root_knows_which_of_its_options_take_a_value() -> None:
    """The fast path builds only the noun a command line names; it must skip a global option's value."""
    from mqctl import output
    from mqctl.cli.app import FORMATS, VALUED_OPTIONS, _noun, command

    root = command()
    valued = {opt for p in root.params if isinstance(p, click.Option) and not p.is_flag for opt in p.opts}
    assert valued == VALUED_OPTIONS
    assert FORMATS == output.FORMATS
    assert _noun(["-o", "json", "--context", "topic", "topic", "list"]) == "topic"
    assert _noun(["--timeout", "3", "-v", "group", "list"]) == "group"
    assert _noun(["--output=json", "msg", "tail"]) == "msg"
    assert _noun(["-n", "ns1:9876;ns2:9876", "cluster", "list"]) == "cluster"


def test_the_full_tree_declares_the_global_options_on_the_root(tmp_path: Path) -> None:
    from mqctl.cli.app import command

    names = {p.name for p in command().params}
    assert {"context", "output", "timeout"} <= names
