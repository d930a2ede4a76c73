"""``broker wipe-write-perm`` / ``add-write-perm`` (mqadmin wipeWritePerm / addWritePerm): producers stop
writing to a broker group through the routes, consumers still read it, and the permission comes back."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mqctl.errors import NotFoundError
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
    assert cli("msg", "send", "-t", "Drain", "refused", *ns).code != 0  # no writable queue left
    read = cli("msg", "tail", "-t", "Drain", "--from", "earliest", "--exit", "-o", "json", *ns)
    assert read.code == 0 and '"before"' in read.stdout, read.stderr  # consumers still drain it
    assert cli("broker", "add-write-perm", "broker-a", *ns).code == 0
    [route] = cli("topic", "route", "-t", "Drain", "-o", "json", *ns).json()
    assert route["perm"] == "rw"
    assert cli("msg", "send", "-t", "Drain", "after", *ns).code == 0
    typo = cli("broker", "wipe-write-perm", "broker-z", *ns)
    assert typo.code == NotFoundError.exit_code and "broker-a" in typo.stderr
