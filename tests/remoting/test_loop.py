"""``daemon.remoting.loop.run``: Ctrl-C during a run always reaches the caller as KeyboardInterrupt."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest

from daemon.remoting.loop import run


async def _connect_as_ctrl_c_arrives() -> str:
    """The window a ``--watch`` refresh can hit: a connection completes and, before the waiting task
    resumes, Ctrl-C cancels it. Python 3.11's ``asyncio.wait_for`` then returns the connection and
    drops the cancellation, so the work goes on as if no key had been pressed."""
    loop = asyncio.get_running_loop()
    connected: asyncio.Future[str] = loop.create_future()

    def complete_then_interrupt() -> None:
        connected.set_result("connected")
        signal.raise_signal(signal.SIGINT)  # the handler runs here, before wait_for's waiter is woken

    loop.call_soon(complete_then_interrupt)
    result = await asyncio.wait_for(connected, 5)
    await asyncio.sleep(0)
    return result


async def _swallows_cancellation() -> str:
    """Work that catches the cancellation Ctrl-C delivers and returns normally."""
    loop = asyncio.get_running_loop()
    loop.call_soon(signal.raise_signal, signal.SIGINT)
    try:
        await asyncio.sleep(5)
    except asyncio.CancelledError:
        return "finished anyway"
    return "slept"


@pytest.fixture(autouse=True)
def default_sigint() -> Iterator[None]:
    """Python's own Ctrl-C handler for each test (what a CLI process starts with): a test run earlier in
    this worker (a SparkContext) may have left its own, under which asyncio installs none."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("work", [_connect_as_ctrl_c_arrives, _swallows_cancellation])
def test_ctrl_c_is_never_lost_when_the_work_swallows_the_cancellation(
    work: Callable[[], Coroutine[Any, Any, str]],
) -> None:
    with pytest.raises(KeyboardInterrupt):
        run(work())
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_ctrl_c_while_waiting_interrupts() -> None:
    async def wait() -> None:
        asyncio.get_running_loop().call_soon(signal.raise_signal, signal.SIGINT)
        await asyncio.sleep(5)

    with pytest.raises(KeyboardInterrupt):
        run(wait())


def test_a_run_without_ctrl_c_returns_its_result() -> None:
    async def work() -> int:
        await asyncio.sleep(0)
        return 42

    assert run(work()) == 42
