"""GroupMember's heartbeat when a broker of the route does not answer (a hung master mid-failover)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from daemon.remoting.bodies import BrokerData, TopicRouteData
from daemon.remoting.codes import RequestCode
from daemon.remoting.errors import RemotingTimeoutError
from mqctl.admin.member import GroupMember


class _Admin:
    """The two calls a heartbeat makes, against a route of two broker groups whose first master hangs."""

    def __init__(self) -> None:
        self.beaten: list[str] = []
        self.route = TopicRouteData(
            broker_datas=[
                BrokerData("c", "a", {0: "127.0.0.1:1001", 1: "127.0.0.1:1002"}),
                BrokerData("c", "b", {0: "127.0.0.1:2001", 1: "127.0.0.1:2002"}),
            ]
        )

    async def topic_route(self, topic: str) -> TopicRouteData:
        return self.route

    async def call(self, addr: str, code: int, *args: Any, **kwargs: Any) -> None:
        assert code == RequestCode.HEART_BEAT
        if addr == "127.0.0.1:1001":
            raise RemotingTimeoutError(addr, 3.0, code)
        self.beaten.append(addr)


def test_a_master_that_does_not_answer_does_not_keep_the_others_from_the_heartbeat() -> None:
    admin = _Admin()
    member = GroupMember(
        admin,  # type: ignore[arg-type]
        "g",
        "t",
        {"a": "127.0.0.1:1001", "b": "127.0.0.1:2001"},
    )
    with pytest.raises(RemotingTimeoutError):  # the caller still hears of it, and tries again later
        asyncio.run(member.heartbeat())
    # the other group's master and every slave (the next master among them) were told all the same
    assert sorted(admin.beaten) == ["127.0.0.1:1002", "127.0.0.1:2001", "127.0.0.1:2002"]
