"""A topic the NameServer does not route is 'topic X not found' (exit 3) from every command that reads
one, not the NameServer's raw remark from some of them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.daemons import LocalCluster, local_cluster
from tests.support.cli import RunCli


@pytest.fixture(scope="module")
def daemons(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with local_cluster(tmp_path_factory.mktemp("unknown")) as cluster:
        yield cluster


@pytest.mark.parametrize(
    "args",
    [
        ("msg", "show", "-t", "NoSuch", "-q", "0", "--offset", "0"),
        ("msg", "tail", "-t", "NoSuch", "--exit"),
        ("bench", "consume", "-t", "NoSuch", "-g", "G", "--count", "1"),
        ("topic", "status", "-t", "NoSuch"),
        ("offset", "show", "-g", "G", "-t", "NoSuch"),
    ],
    ids=lambda args: " ".join(args[:2]),
)
def test_every_reader_says_the_topic_is_not_found(
    cli: RunCli, daemons: LocalCluster, args: tuple[str, ...]
) -> None:
    result = cli(*args, "-n", daemons.namesrv_addr)
    assert result.code == 3, result
    [line] = result.stderr.splitlines()
    assert line == "mqctl: error: topic 'NoSuch' not found (see 'mqctl topic list')", line
