"""``cluster list``/``status`` against a NameServer no broker registered with: mqadmin's clusterList
prints its header and exits 0 (kcat -L prints "0 brokers"); mqctl printed nothing at all."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemons import namesrv_alone
from tests.support.cli import RunCli


@pytest.fixture
def lone_namesrv(tmp_path: Path) -> Iterator[str]:
    with namesrv_alone(tmp_path) as addr:
        yield addr


@pytest.mark.parametrize("command", ["list", "status"])
def test_no_broker_is_a_header_an_empty_list_and_one_warning(
    cli: RunCli, lone_namesrv: str, command: str, caplog: pytest.LogCaptureFixture
) -> None:
    table = cli("-n", lone_namesrv, "cluster", command)
    assert table.code == 0, table.stderr
    assert table.stdout.splitlines()[0].split("┃")[:3] == ["CLUSTER ", " BROKER NAME ", " BROKER ID "]
    # (in this process the warning reaches pytest's log capture, not the command's stderr)
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        f"no broker is registered with NameServer {lone_namesrv} "
        f"(start one: mqctl broker start -n {lone_namesrv})"
    ]
    listed = cli("-n", lone_namesrv, "cluster", command, "-o", "json")
    assert listed.code == 0 and listed.json() == []
    csv = cli("-n", lone_namesrv, "cluster", command, "-o", "csv")
    assert csv.stdout.startswith("cluster,broker_name,broker_id,addr,"), csv.stdout
