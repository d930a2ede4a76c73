"""Group commit for whole-table work: writing ``topics.json`` or ``kvConfig.json``, registering brokers.

Both cost time proportional to the whole table, so doing them once per change makes creating N
topics cost O(N^2). :class:`Coalesced` runs the work for everyone who asked while the previous run
was under way: a burst of N changes costs two runs, and each caller still returns only after a run
that started after its change, so what a caller acknowledges has been written (or registered).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)


class Coalesced:
    """An async action shared by the callers that arrive while it runs (see module docstring)."""

    def __init__(self, action: Callable[[], Awaitable[object]], name: str) -> None:
        self._action = action
        self._name = name
        self._next: asyncio.Future[None] | None = None
        self._runner: asyncio.Task[None] | None = None

    def request(self) -> asyncio.Future[None]:
        """Ask for a run that starts from now on; the future completes (or fails) with that run."""
        loop = asyncio.get_running_loop()
        if self._next is None:
            self._next = loop.create_future()
        if self._runner is None or self._runner.done():
            self._runner = loop.create_task(self._run(), name=self._name)
        return self._next

    async def __call__(self) -> None:
        """Wait for a run that started after this call (shielded: a cancelled caller does not stop it)."""
        await asyncio.shield(self.request())

    async def _run(self) -> None:
        while self._next is not None:
            done, self._next = self._next, None
            try:
                await self._action()
            except asyncio.CancelledError:
                done.cancel()
                raise
            except Exception as exc:
                log.warning("%s failed: %s", self._name, exc)
                done.set_exception(exc)
                done.exception()  # logged above; callers that wait still get it raised
            else:
                done.set_result(None)

    async def aclose(self) -> None:
        """Shutdown: cancel the run under way and the one asked for; their waiters see CancelledError."""
        if self._next is not None:
            self._next.cancel()
            self._next = None
        if self._runner is not None:
            self._runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._runner
