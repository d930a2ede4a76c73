"""Polling for a condition that real daemons reach in their own time."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from daemon.remoting.server import RemotingServer


async def wait_until(
    predicate: Callable[[], bool | Awaitable[bool]],
    timeout: float = 30.0,
    why: Callable[[], str] | None = None,
) -> None:
    """Poll ``predicate`` (plain or async) until it holds; fail the test after ``timeout`` seconds, with
    what ``why`` gathers then (the daemons' logs, a history) as the evidence a rare failure needs."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        got = predicate()
        if not isinstance(got, bool):
            got = await got
        if got:
            return
        assert loop.time() < deadline, "condition not reached in time" + (f":\n{why()}" if why else "")
        await asyncio.sleep(0.05)


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 15.0) -> None:
    """``wait_until`` for a test without an event loop: poll ``condition`` in this thread."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def budget_holds(server: RemotingServer, held: int) -> Callable[[], Awaitable[bool]]:
    """A ``wait_until`` predicate: the server's read budget holds exactly ``held`` bytes."""

    async def check() -> bool:
        return server.budget.used == held

    return check
