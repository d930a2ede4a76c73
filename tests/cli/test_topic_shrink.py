"""``topic update -r N`` below the read queues a broker has: consumers stop reading the queues beyond N, so
the messages in them are left unread (mqadmin updateTopic does it silently; scale-in is write queues
first, then read queues once consumers drained them). With messages there it asks first; off a terminal
it needs --yes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.daemons import LocalCluster, local_cluster
from tests.support.cli import RunCli


@pytest.fixture(scope="module")
def daemons(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with local_cluster(tmp_path_factory.mktemp("shrink")) as cluster:
        yield cluster


def test_shrinking_read_queues_that_hold_messages_asks_first(cli: RunCli, daemons: LocalCluster) -> None:
    ns = ("-n", daemons.namesrv_addr)
    assert cli("topic", "create", "-t", "Shrink", "-r", "4", "-w", "4", *ns).code == 0
    assert cli("msg", "send", "-t", "Shrink", "-q", "3", "held", *ns).code == 0
    refused = cli("topic", "update", "-t", "Shrink", "-r", "2", *ns)
    assert refused.code == 2, refused
    [line] = refused.stderr.splitlines()
    assert "1 message in" in line and "queue 3" in line and "--yes" in line, line
    assert daemons.broker.topics.get("Shrink").read_queue_nums == 4  # nothing changed
    done = cli("topic", "update", "-t", "Shrink", "-r", "2", "--yes", *ns)
    assert done.code == 0, done.stderr
    assert daemons.broker.topics.get("Shrink").read_queue_nums == 2


def test_shrinking_empty_read_queues_needs_no_confirmation(cli: RunCli, daemons: LocalCluster) -> None:
    ns = ("-n", daemons.namesrv_addr)
    assert cli("topic", "create", "-t", "ShrinkEmpty", "-r", "4", "-w", "4", *ns).code == 0
    assert cli("msg", "send", "-t", "ShrinkEmpty", "-q", "0", "kept", *ns).code == 0
    done = cli("topic", "update", "-t", "ShrinkEmpty", "-r", "1", "-w", "1", *ns)
    assert done.code == 0, done.stderr
    assert daemons.broker.topics.get("ShrinkEmpty").read_queue_nums == 1


def test_the_documented_scale_in_still_asks_at_its_read_queue_step(
    cli: RunCli, daemons: LocalCluster
) -> None:
    """Write queues first, then read queues: GET_TOPIC_STATS_INFO answers for write queues alone (4.9.8),
    so once -w had shrunk, the queues being drained were invisible and -r stranded them without a word;
    `topic status` and `offset show` left them out too."""
    ns = ("-n", daemons.namesrv_addr)
    assert cli("topic", "create", "-t", "ScaleIn", "-r", "4", "-w", "4", *ns).code == 0
    assert cli("msg", "send", "-t", "ScaleIn", "-q", "3", "draining", *ns).code == 0
    assert cli("topic", "update", "-t", "ScaleIn", "-w", "2", *ns).code == 0
    status = cli("topic", "status", "-t", "ScaleIn", "-o", "json", *ns)
    assert status.code == 0, status.stderr
    assert [(r["queue_id"], r["messages"]) for r in status.json()] == [(0, 0), (1, 0), (2, 0), (3, 1)]
    assert status.json()[3]["last_updated_ms"] > 0
    planned = cli(
        "offset",
        "reset",
        "-g",
        "CG_ScaleIn",
        "-t",
        "ScaleIn",
        "--to-latest",
        "--create-group",
        "-o",
        "json",
        *ns,
    )
    assert planned.code == 0, planned.stderr
    assert [q["queue_id"] for q in planned.json()["queues"]] == [0, 1, 2, 3]
    refused = cli("topic", "update", "-t", "ScaleIn", "-r", "2", *ns)
    assert refused.code == 2 and "queue 3" in refused.stderr, refused
    assert daemons.broker.topics.get("ScaleIn").read_queue_nums == 4
