"""An empty ``-o csv`` result is its header row alone, for every command that lists rows: a script's CSV
reader sees the columns whether or not there is anything to list (a fresh cluster and store list nothing)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemons import LocalCluster, local_cluster
from tests.support.cli import RunCli


@pytest.fixture(scope="module")
def daemons(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with local_cluster(tmp_path_factory.mktemp("empty")) as cluster:
        yield cluster


EMPTY_LISTS = [
    ("dlq", "ls"),
    ("timer", "ls"),
    ("timer", "ls", "-t", "Nothing"),
    ("topic", "list", "--cluster", "Nowhere"),
    ("topic", "apply", "--file", "NO_TOPICS"),
    ("group", "list"),
    ("namesrv", "kv", "list", "--namespace", "nothing_here"),
    ("context", "ls"),
    ("broker", "clean"),
    ("store", "commitlog", "ls", "--store", "STORE"),
    ("store", "cq", "ls", "--store", "STORE"),
    ("store", "index", "ls", "--store", "STORE"),
]


@pytest.mark.parametrize("args", EMPTY_LISTS, ids=" ".join)
def test_an_empty_list_is_its_header_row(
    cli: RunCli, daemons: LocalCluster, tmp_path: Path, args: tuple[str, ...]
) -> None:
    no_topics = tmp_path / "topics.yaml"
    no_topics.write_text("topics: []\n")
    where = {"STORE": str(daemons.broker.config.store_path_root_dir), "NO_TOPICS": str(no_topics)}
    result = cli(*(where.get(a, a) for a in args), "-o", "csv", env={"NAMESRV_ADDR": daemons.namesrv_addr})
    assert result.code == 0, result.stderr
    header, *rows = result.stdout.splitlines()
    assert header and rows == [], result.stdout
