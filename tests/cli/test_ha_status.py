"""``broker ha status`` as an operator reads it: a table that fits a terminal (the rest with ``-o wide``,
all of it in JSON), and each master's slaves named by the broker address they registered."""

from __future__ import annotations

import dataclasses
import io
import json
import re
from pathlib import Path

import pytest
import yaml

from mqctl.output import Rows, configure, render
from mqctl.services.ha import NARROW, HAStatus, _name_peers
from tests.daemons import local_cluster
from tests.support.cli import RunCli


def _master(peer_ha_addrs: str) -> HAStatus:
    return HAStatus(
        "DefaultCluster",
        "broker-a",
        0,
        "10.0.0.1:10911",
        role="SYNC_MASTER",
        connected=True,
        peers=peer_ha_addrs,
        peer_ha_addrs=peer_ha_addrs,
        commitlog_max_offset=123_456_789_012,
        acked_offset=123_456_789_000,
        lag_seconds=0.25,
    )


def _slave(broker_id: int, addr: str, ha_client: str | None) -> HAStatus:
    slave = HAStatus(
        "DefaultCluster",
        "broker-a",
        broker_id,
        addr,
        role="SLAVE",
        connected=True,
        peers="10.0.0.1:10912",
        peer_ha_addrs="10.0.0.1:10912",
        commitlog_max_offset=123_456_789_000,
        acked_offset=123_456_789_000,
        lag_bytes=12,
    )
    slave._ha_client = ha_client
    return slave


def test_a_masters_slaves_are_named_by_their_broker_address() -> None:
    """Two slaves on one host: the master saw only their source ports, and listed those as its peers."""
    states = [
        _master("10.0.0.2:53412, 10.0.0.2:53498"),
        _slave(1, "10.0.0.2:10911", "10.0.0.2:53498"),
        _slave(2, "10.0.0.2:10921", "10.0.0.2:53412"),
    ]
    _name_peers(states)
    assert states[0].peers == "10.0.0.2:10921 (id 2), 10.0.0.2:10911 (id 1)"
    assert states[0].peer_ha_addrs == "10.0.0.2:53412, 10.0.0.2:53498"  # kept beside, in the same order
    assert [s.peers for s in states[1:]] == ["10.0.0.1:10911 (id 0)"] * 2
    assert [s.peer_ha_addrs for s in states[1:]] == ["10.0.0.1:10912"] * 2


def test_a_slave_that_does_not_say_its_end_is_found_by_host_else_shown_as_the_connection() -> None:
    """A RocketMQ slave has no haClientAddress: the one slave of the group on the connection's host is
    it; two there (or none) cannot be told apart, and the HA connection's address is shown as what it is."""
    one = [_master("10.0.0.2:53412"), _slave(1, "10.0.0.2:10911", None)]
    _name_peers(one)
    assert one[0].peers == "10.0.0.2:10911 (id 1)"
    two = [_master("10.0.0.2:53412"), _slave(1, "10.0.0.2:10911", None), _slave(2, "10.0.0.2:10921", None)]
    _name_peers(two)
    assert two[0].peers == "HA client 10.0.0.2:53412"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_table_fits_a_terminal_and_wide_and_json_keep_every_field(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """It was about 300 columns: every field a column, most of them empty outside DLedger mode. On a
    terminal of 120 columns the default table fits whole (a cell folds between words, never in one)."""
    states = [
        _master("10.0.0.2:53412, 10.0.0.3:53498"),
        _slave(1, "10.0.0.2:10911", "10.0.0.2:53412"),
        _slave(2, "10.0.0.3:10911", "10.0.0.3:53498"),
    ]
    _name_peers(states)
    rows = Rows.of(HAStatus, states, narrow=NARROW)

    def shown(fmt: str) -> str:
        out = io.StringIO()
        render(rows, fmt, out=out)
        return out.getvalue()

    monkeypatch.setenv("COLUMNS", "120")
    monkeypatch.delenv("NO_COLOR", raising=False)
    screen = Terminal()
    monkeypatch.setattr("sys.stdout", screen)
    configure(no_color=True)
    render(rows, "table")
    table = re.sub("\x1b\\[[0-9;]*m", "", screen.getvalue())  # bold headers
    assert max(map(len, table.splitlines())) <= 120, table
    assert "PEERS" in table and "10.0.0.2:10911 (id 1)," in table and "10.0.0.3:10911 (id 2)" in table
    assert "RAFT ROLE" not in table and "COMMITLOG" not in table  # empty everywhere, or -o wide's
    wide = shown("wide")
    headers = wide.splitlines()[0]
    assert all(f.name.upper().replace("_", " ") in headers for f in dataclasses.fields(HAStatus))
    [master, *_] = json.loads(shown("json"))
    assert list(master) == [f.name for f in dataclasses.fields(HAStatus)]
    assert master["peer_ha_addrs"] == "10.0.0.2:53412, 10.0.0.3:53498"


def test_a_master_without_slaves_shows_none_registered_not_connected_no(cli: RunCli, tmp_path: Path) -> None:
    """A lone master read "CONNECTED no", as if cut off from its group: it has no connection of its own to
    show. Its connected is null (the table leaves the column out) and its peers say why, in every format."""
    with local_cluster(tmp_path) as cluster:

        def run(*args: str) -> str:
            result = cli("broker", "ha", "status", *args, env={"NAMESRV_ADDR": cluster.namesrv_addr})
            assert result.code == 0, result.stderr
            return result.stdout

        [as_json] = json.loads(run("-o", "json"))
        [as_yaml] = yaml.safe_load(run("-o", "yaml"))
        table = run()
    for row in (as_json, as_yaml):
        assert (row["role"], row["connected"], row["peers"]) == ("ASYNC_MASTER", None, "no slave registered")
    assert "CONNECTED" not in table and "no slave registered" in table, table


def test_a_master_whose_slave_is_registered_and_not_connected_says_so() -> None:
    master = _master("")
    master.connected, master.peers, master.peer_ha_addrs = False, None, None
    states = [master, _slave(1, "10.0.0.2:10911", None)]
    states[1].connected = False
    _name_peers(states)
    assert (master.connected, master.peers) == (False, "no slave connected")
