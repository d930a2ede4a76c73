"""Event loop selection: uvloop when importable, the stdlib loop otherwise."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop
    return uvloop.new_event_loop


def run(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run` on the fastest available loop, where Ctrl-C always ends in KeyboardInterrupt.

    The runner turns Ctrl-C into a cancellation of the main task, and raises KeyboardInterrupt only
    when that task then ends cancelled. Work that swallows the cancellation (Python 3.11's
    ``asyncio.wait_for`` does when the awaited future finished just before it, e.g. a connection)
    would return normally and the key press would be lost: a ``--watch`` loop would go on refreshing.
    A main task that ends with a cancellation still requested was interrupted, whatever it returned.
    """
    tasks: list[asyncio.Task[Any]] = []

    async def main_task() -> T:
        task = asyncio.current_task()
        assert task is not None
        tasks.append(task)
        return await main

    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        result = runner.run(main_task())
    if tasks and tasks[0].cancelling():
        raise KeyboardInterrupt
    return result
