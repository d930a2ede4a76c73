"""``broker wipe-write-perm`` / ``add-write-perm`` (mqadmin wipeWritePerm / addWritePerm): producers stop
writing to a broker group through the routes, consumers still read it, and the permission comes back."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mqctl.errors import AuthError, NotFoundError
from tests.daemons import LocalCluster, local_cluster
from tests.support.cli import RunCli


@pytest.fixture(scope="module")
def daemons(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with local_cluster(tmp_path_factory.mktemp("writeperm")) as cluster:
        yield cluster


def test_wipe_then_add_the_write_permission_of_a_broker_group(cli: RunCli, daemons: LocalCluster) -> None:
    ns = ("-n", daemons.namesrv_addr)
    assert cli("topic", "create", "-t", "Drain", "-r", "2", "-w", "2", *ns).code == 0
    assert cli("msg", "send", "-t", "Drain", "before", *ns).code == 0
    wiped = cli("broker", "wipe-write-perm", "broker-a", "-o", "json", *ns)
    assert wiped.code == 0, wiped.stderr
    [row] = wiped.json()
    assert (row["namesrv"], row["write"]) == (daemons.namesrv_addr, False) and row["topics"] >= 1
    [route] = cli("topic", "route", "-t", "Drain", "-o", "json", *ns).json()
    assert route["perm"] == "r"
    refused = cli("msg", "send", "-t", "Drain", "refused", *ns)  # no writable queue left: a refusal
    assert refused.code == AuthError.exit_code and "read-only" in refused.stderr, refused.stderr
    read = cli("msg", "tail", "-t", "Drain", "--from", "earliest", "--exit", "-o", "json", *ns)
    assert read.code == 0 and '"before"' in read.stdout, read.stderr  # consumers still drain it
    assert cli("broker", "add-write-perm", "broker-a", *ns).code == 0
    [route] = cli("topic", "route", "-t", "Drain", "-o", "json", *ns).json()
    assert route["perm"] == "rw"
    assert cli("msg", "send", "-t", "Drain", "after", *ns).code == 0
    typo = cli("broker", "wipe-write-perm", "broker-z", *ns)
    assert typo.code == NotFoundError.exit_code and "broker-a" in typo.stderr


def test_a_send_to_a_read_only_topic_is_a_refusal_not_a_topic_not_found(
    cli: RunCli, daemons: LocalCluster
) -> None:
    """'msg send' to a topic of perm r exited 3 ('has no queue this can use'), the code of a topic that
    does not exist; the broker refuses such a send with NO_PERMISSION: exit 9, saying why and how."""
    ns = ("-n", daemons.namesrv_addr)
    assert cli("topic", "create", "-t", "ReadOnly", "-r", "2", "-w", "2", "--perm", "r", *ns).code == 0
    refused = cli("msg", "send", "-t", "ReadOnly", "x", *ns)
    assert refused.code == AuthError.exit_code, refused
    [line] = refused.stderr.splitlines()
    assert "topic 'ReadOnly' takes no sends: its permission is read-only (broker-a r)" in line
    assert "--perm rw" in line
    assert cli("topic", "update", "-t", "ReadOnly", "--perm", "rw", *ns).code == 0
    assert cli("msg", "send", "-t", "ReadOnly", "x", *ns).code == 0
