"""``broker ha transfer`` against a real DLedger group (one member, so it leads at once)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemons import LocalCluster, local_cluster
from tests.support.cli import RunCli
from tests.support.ports import free_port
from tests.support.waiting import wait_for


@pytest.fixture
def dledger_one(tmp_path: Path) -> Iterator[LocalCluster]:
    keys = {
        "enable_dleger_commit_log": True,
        "dleger_group": "broker-a",
        "dleger_peers": f"n0-127.0.0.1:{free_port()}",
        "dleger_self_id": "n0",
        "metrics_enable": False,
    }
    with local_cluster(tmp_path, **keys) as cluster:
        yield cluster


def test_transfer_to_the_member_that_already_leads_changes_nothing_and_succeeds(
    cli: RunCli, dledger_one: LocalCluster
) -> None:
    """A script that says 'n0 leads' must not fail because n0 already does; DLedger itself answers that
    request UNKNOWN_MEMBER (a leader is not its own peer), which read as a typo in --to."""
    ns = dledger_one.namesrv_addr

    def leads() -> bool:
        rows = cli("broker", "ha", "status", "-n", ns, "-o", "json").json()
        # each row names its member as --to and the peers column do (no row said which member it was)
        return [(r["member"], r["raft_role"]) for r in rows] == [("n0", "LEADER")]

    wait_for(leads, "n0 to lead")
    result = cli("broker", "ha", "transfer", "--to", "n0", "-n", ns, "-o", "json")
    assert result.code == 0, result.stderr
    answer = result.json()
    assert (answer["from_id"], answer["to_id"], answer["result"]) == ("n0", "n0", "ALREADY_LEADER")
    assert leads()
