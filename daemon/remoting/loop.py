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
    """`asyncio.run` on the fastest available loop."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)
