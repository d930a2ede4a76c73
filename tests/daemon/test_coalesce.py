"""Group commit of whole-table work (topics.json, NameServer registration)."""

from __future__ import annotations

import asyncio

import pytest

from daemon.coalesce import Coalesced


async def test_callers_arriving_during_a_run_share_the_next_one_and_wait_for_it() -> None:
    asked = completed = 0
    runs: list[int] = []  # callers that had asked when each run started
    running = asyncio.Event()

    async def action() -> None:
        nonlocal completed
        runs.append(asked)
        running.set()
        await asyncio.sleep(0.02)
        completed += 1

    work = Coalesced(action, "test")

    async def caller() -> int:
        nonlocal asked
        asked += 1
        await work()
        return completed

    first = asyncio.ensure_future(caller())
    await running.wait()
    later = await asyncio.gather(*(caller() for _ in range(49)))
    assert await first >= 1
    assert runs == [1, 50]  # one run for the first caller, one shared by the 49 that came during it
    assert later == [2] * 49  # none returned on the run that started before it asked


async def test_callers_waiting_on_a_failed_run_get_its_error_and_the_next_run_can_succeed() -> None:
    outcomes = iter([OSError("disk full"), None])

    async def action() -> None:
        failure = next(outcomes)
        if failure is not None:
            raise failure

    work = Coalesced(action, "test")
    results = await asyncio.gather(work(), work(), return_exceptions=True)
    assert [type(r) for r in results] == [OSError, OSError]
    await work()


async def test_aclose_cancels_the_run_under_way_and_its_waiters() -> None:
    started = asyncio.Event()

    async def action() -> None:
        started.set()
        await asyncio.sleep(60)

    work = Coalesced(action, "test")
    waiter = asyncio.ensure_future(work())
    await started.wait()
    await work.aclose()
    with pytest.raises(asyncio.CancelledError):
        await waiter
