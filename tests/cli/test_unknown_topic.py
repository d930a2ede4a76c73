"""A topic the NameServer does not route is 'topic X not found' (exit 3) from every command that reads
one, not the NameServer's raw remark from some of them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

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
        ("group", "progress", "-g", "G", "-t", "NoSuch"),
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


def test_a_misspelt_topic_names_the_topic_meant(cli: RunCli, daemons: LocalCluster) -> None:
    """A typo of a topic that exists (a letter short) is still not found, and the hint names the topic
    the operator most likely meant: readers and a send with auto-creation off alike."""
    created = cli("topic", "create", "-t", "WalkOrders", "-n", daemons.namesrv_addr)
    assert created.code == 0, created
    result = cli("topic", "status", "-t", "WalkOrder", "-n", daemons.namesrv_addr)
    assert result.code == 3, result
    [line] = result.stderr.splitlines()
    assert line == (
        "mqctl: error: topic 'WalkOrder' not found (did you mean 'WalkOrders'? see 'mqctl topic list')"
    ), line
    result = cli("msg", "send", "--no-create", "-t", "WalkOrder", "hi", "-n", daemons.namesrv_addr)
    assert result.code == 3, result
    assert "did you mean 'WalkOrders'? create it" in result.stderr, result.stderr


@pytest.mark.slow
def test_a_send_to_a_misspelt_topic_without_auto_creation_names_the_topic_meant(
    cli: RunCli, tmp_path: Path
) -> None:
    """With autoCreateTopicEnable=false (as production brokers run) a send to a typo is refused, and
    the hint names the topic meant before it offers to create the typo."""
    with local_cluster(tmp_path, auto_create_topic_enable=False) as cluster:
        created = cli("topic", "create", "-t", "WalkOrders", "-n", cluster.namesrv_addr)
        assert created.code == 0, created
        result = cli("msg", "send", "-t", "WalkOrder", "hi", "-n", cluster.namesrv_addr)
    assert result.code == 3, result
    [line] = result.stderr.splitlines()
    assert line == (
        "mqctl: error: topic 'WalkOrder' does not exist and no broker auto-creates topics "
        "(did you mean 'WalkOrders'? create it: mqctl topic create -t WalkOrder)"
    ), line
