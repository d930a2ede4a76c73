"""``mqctl up --dledger N --broker-port 0``: the ports each member is given do not collide with one another,
counting the VIP port (``listenPort - 2``) every member opens besides its own, and come from below the
kernel's ephemeral range, where no client connection on the host takes one before the member binds it."""

from __future__ import annotations

import socket
from pathlib import Path

from daemon.config import parse_properties
from mqctl.cli.up import dledger_confs
from mqctl.services.ports import ephemeral_low

LOOP = ("127.0.0.1", "127.0.0.1")  # the members' host and listen address


def test_port_zero_lays_members_out_as_a_given_port_does_with_each_vip_port_free(tmp_path: Path) -> None:
    confs, addrs = dledger_confs(tmp_path, "broker-a", 5, "127.0.0.1", "127.0.0.1", 0, 0)
    props = [parse_properties(c.read_text()) for c in confs]
    listen = [int(p["listenPort"]) for p in props]
    raft = [int(peer.rpartition(":")[2]) for peer in props[0]["dLegerPeers"].split(";")]
    base = listen[0]
    assert listen == [base + 4 * i for i in range(5)]
    assert base - 2 >= 1024 and max(raft) < ephemeral_low()
    assert raft == [port + 1 for port in listen]
    assert not {port - 2 for port in listen} & set(listen + raft)
    for port in listen:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port - 2))
    assert addrs == [f"127.0.0.1:{port}" for port in listen]


def test_metrics_port_zero_gives_each_member_a_free_port_as_up_without_dledger_does(tmp_path: Path) -> None:
    """'up --dledger 3 --metrics-port 0' served no /metrics at all (0 read as off), where 'up --metrics-port 0'
    serves it on a free port; --no-metrics is what turns it off."""
    free = [
        parse_properties(c.read_text()) for c in dledger_confs(tmp_path / "a", "broker-a", 3, *LOOP, 0, 0)[0]
    ]
    assert [(p["metricsEnable"], p["metricsPort"]) for p in free] == [("true", "0")] * 3
    given = [
        parse_properties(c.read_text())
        for c in dledger_confs(tmp_path / "b", "broker-a", 3, *LOOP, 0, 9100)[0]
    ]
    assert [(p["metricsEnable"], p["metricsPort"]) for p in given] == [
        ("true", str(9100 + i)) for i in range(3)
    ]
    off = [
        parse_properties(c.read_text())
        for c in dledger_confs(tmp_path / "c", "broker-a", 3, *LOOP, 0, None)[0]
    ]
    assert [p["metricsEnable"] for p in off] == ["false"] * 3
