"""The one bounded gather of the CLI's reads (:func:`~mqctl.services.fanout.gather_limited`) and the
fan-out over brokers built on it (:func:`~mqctl.services.fanout.each_broker`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from mqctl.admin.client import Admin
from mqctl.errors import NothingReadError
from mqctl.services.fanout import collecting, each_broker, gather_limited
from tests.support.silent import silent_server


class InFlight:
    """Awaitables that count how many of them run at once and wait for :meth:`release`."""

    def __init__(self) -> None:
        self.running = 0
        self.most = 0
        self.released = asyncio.Event()

    async def one(self, value: int, fail: bool = False) -> int:
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            await self.released.wait()
            for _ in range(10 - value):  # the first given finishes last
                await asyncio.sleep(0)
            if fail:
                raise ValueError(f"item {value} failed")
            return value
        finally:
            self.running -= 1

    async def settle(self) -> None:
        for _ in range(20):
            await asyncio.sleep(0)


async def test_at_most_limit_in_flight_and_answers_in_the_order_given() -> None:
    work = InFlight()
    gathered = asyncio.create_task(gather_limited((work.one(i) for i in range(10)), 3))
    await work.settle()
    assert work.running == 3  # the other seven wait for a slot
    work.released.set()
    assert await gathered == list(range(10))
    assert work.most == 3


async def test_a_failure_is_raised_or_kept_in_its_place() -> None:
    work = InFlight()
    work.released.set()
    with pytest.raises(ValueError, match="item 4 failed"):
        await gather_limited((work.one(i, fail=i == 4) for i in range(6)), 2)
    await work.settle()  # gather's others run on after the raise
    results = await gather_limited((work.one(i, fail=i == 4) for i in range(6)), 2, return_exceptions=True)
    assert [r if isinstance(r, int) else str(r) for r in results] == [0, 1, 2, 3, "item 4 failed", 5]


@pytest.fixture
async def silent() -> AsyncIterator[str]:
    """A broker hung on its requests."""
    async with silent_server() as addr:
        yield addr


async def test_each_broker_keeps_the_answers_and_closes_a_silent_brokers_connection(silent: str) -> None:
    admin = Admin(["127.0.0.1:1"], timeout=0.5)  # no NameServer: failures are named by address only
    answered = "127.0.0.1:2"

    async def ask(addr: str) -> int:
        if addr == answered:
            return 7
        await admin.topic_configs(addr)
        return 0

    try:
        with collecting() as failed:
            assert await each_broker(admin, [silent, answered, silent], ask) == {answered: 7}
        assert [(f.broker, f.reason) for f in failed] == [(silent, "timed out")]
        assert admin.client.open_connection(silent) is None  # its descriptor freed for the next
        with pytest.raises(NothingReadError, match="timed out"):
            await each_broker(admin, [silent], ask)
    finally:
        await admin.client.close()
