"""A task that counts its turns of the event loop: whether other work ran between a sliced job's slices."""

from __future__ import annotations

import asyncio
from types import TracebackType


class LoopTurns:
    """``async with LoopTurns() as turns``: ``turns.count`` grows by one at each turn of the loop the task
    gets, so a job that yields between its slices (``await asyncio.sleep(0)``) lets it grow meanwhile."""

    def __init__(self) -> None:
        self.count = 0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            self.count += 1
            await asyncio.sleep(0)

    async def __aenter__(self) -> LoopTurns:
        self._task = asyncio.create_task(self._run())
        await asyncio.sleep(0)
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._task is not None
        self._task.cancel()
