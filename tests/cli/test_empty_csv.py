"""An empty ``-o csv`` result is its header row alone, for every command that lists rows: a script's CSV
reader sees the columns whether or not there is anything to list (a fresh cluster and store list nothing)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemons import LocalCluster, local_cluster
from tests.support.cli import CliResult, RunCli


@pytest.fixture(scope="module")
def daemons(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with local_cluster(tmp_path_factory.mktemp("empty")) as cluster:
        yield cluster


EMPTY_LISTS = [
    ("dlq", "ls"),
    ("timer", "ls"),
    ("timer", "ls", "-t", "Nothing"),
    ("topic", "apply", "--file", "NO_TOPICS"),
    ("group", "list"),
    ("namesrv", "kv", "list", "--namespace", "nothing_here"),
    ("context", "ls"),
    ("broker", "clean"),
    ("store", "commitlog", "ls", "--store", "STORE"),
    ("store", "cq", "ls", "--store", "STORE"),
    ("store", "index", "ls", "--store", "STORE"),
]


def run_empty(
    cli: RunCli, daemons: LocalCluster, tmp_path: Path, args: tuple[str, ...], fmt: str
) -> CliResult:
    """``args`` (its placeholders filled in) against the fresh cluster and store, in ``fmt``."""
    no_topics = tmp_path / "topics.yaml"
    no_topics.write_text("topics: []\n")
    where = {"STORE": str(daemons.broker.config.store_path_root_dir), "NO_TOPICS": str(no_topics)}
    return cli(*(where.get(a, a) for a in args), "-o", fmt, env={"NAMESRV_ADDR": daemons.namesrv_addr})


@pytest.mark.parametrize("args", EMPTY_LISTS, ids=" ".join)
def test_an_empty_list_is_its_header_row(
    cli: RunCli, daemons: LocalCluster, tmp_path: Path, args: tuple[str, ...]
) -> None:
    result = run_empty(cli, daemons, tmp_path, args, "csv")
    assert result.code == 0, result.stderr
    header, *rows = result.stdout.splitlines()
    assert header and rows == [], result.stdout


@pytest.mark.parametrize("args", EMPTY_LISTS, ids=" ".join)
def test_an_empty_table_is_its_header_line(
    cli: RunCli, daemons: LocalCluster, tmp_path: Path, args: tuple[str, ...]
) -> None:
    """The same lists as a table: the column names alone, not nothing at all, which reads as a hang or a bug."""
    columns = run_empty(cli, daemons, tmp_path, args, "csv").stdout.splitlines()[0].split(",")
    result = run_empty(cli, daemons, tmp_path, args, "table")
    assert result.code == 0, result.stderr
    header = columns[0].replace("_", " ").upper()
    assert any(line.startswith(header) for line in result.stdout.splitlines()), result.stdout  # after a title
