"""A tail whose master is down asks the route again for each of its queues: the fallback to a slave is
said once per broker, and again only when it changes (another slave, or the master back and lost again),
not once per queue."""

from __future__ import annotations

import logging

import pytest

from daemon.remoting.bodies import BrokerData, QueueData, TopicRouteData
from mqctl.services.topics import route_readers


def _route(addrs: dict[int, str]) -> TopicRouteData:
    return TopicRouteData(
        queue_datas=[QueueData("b", 8, 8, 6, 0)], broker_datas=[BrokerData("c", "b", addrs)]
    )


def _said(caplog: pytest.LogCaptureFixture) -> list[str]:
    lines = [r.getMessage() for r in caplog.records if "the master is down" in r.getMessage()]
    caplog.clear()
    return lines


def test_the_fallback_to_a_slave_is_said_once_per_broker_and_change(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    said: dict[str, str] = {}
    for _ in range(8):  # (each queue's reader asks again)
        assert route_readers(_route({1: "s1:1", 2: "s2:1"}), said=said) == {"b": "s1:1"}
    assert _said(caplog) == ["b: the master is down; reading from slave 1 at s1:1"]
    for _ in range(8):
        route_readers(_route({2: "s2:1"}), said=said)
    assert _said(caplog) == ["b: the master is down; reading from slave 2 at s2:1"]
    assert route_readers(_route({0: "m:1", 2: "s2:1"}), said=said) == {"b": "m:1"}
    route_readers(_route({2: "s2:1"}), said=said)  # lost again: said again
    assert len(_said(caplog)) == 1
    route_readers(_route({2: "s2:1"}), quiet=True, said=said)
    route_readers(_route({2: "s2:1"}))  # (without ``said``: said each time, as before)
    assert len(_said(caplog)) == 1
