"""Long polling: park pulls that found nothing until a message for their queue arrives (§9.7 step 8).

A parked pull is an awaiting coroutine, so parking costs one future and a timer; the pull processor
re-runs the read after `wait()` returns, with the original opaque. Waiters wake when `notify()`
reports that their queue grew, or at their deadline (a re-read that finds only other tags answers
PULL_RETRY_IMMEDIATELY, as Java does); a periodic check also catches missed notifications.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger(__name__)


@dataclass(eq=False, slots=True)
class _Waiter:
    offset: int
    future: asyncio.Future[None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class PullRequestHoldService:
    """Waiters keyed by (topic, queueId)."""

    def __init__(self, max_offset: Callable[[str, int], int], check_interval: float = 5.0) -> None:
        self._max_offset = max_offset
        self.check_interval = check_interval
        self._waiters: dict[tuple[str, int], set[_Waiter]] = {}
        self._task: asyncio.Task[None] | None = None

    @property
    def parked(self) -> int:
        return sum(len(w) for w in self._waiters.values())

    async def wait(self, topic: str, queue_id: int, offset: int, timeout: float) -> None:
        """Return when the queue grows past `offset` with a matching message, or after `timeout` s."""
        key = (topic, queue_id)
        waiter = _Waiter(offset)
        self._waiters.setdefault(key, set()).add(waiter)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiter.future, timeout)
        finally:
            waiters = self._waiters.get(key)
            if waiters is not None:
                waiters.discard(waiter)
                if not waiters:
                    del self._waiters[key]

    def notify(self, topic: str, queue_id: int, max_offset: int) -> None:
        """A message was dispatched: `max_offset` is the queue's new max offset."""
        waiters = self._waiters.get((topic, queue_id))
        if not waiters:
            return
        for waiter in waiters:
            if not waiter.future.done() and max_offset > waiter.offset:
                waiter.future.set_result(None)

    def start(self) -> None:
        self._task = asyncio.create_task(self._check_loop(), name="pull-hold-check")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for waiters in self._waiters.values():
            for waiter in waiters:
                if not waiter.future.done():
                    waiter.future.set_result(None)

    async def _check_loop(self) -> None:
        while True:
            await asyncio.sleep(self.check_interval)
            for topic, queue_id in list(self._waiters):
                try:
                    self.notify(topic, queue_id, self._max_offset(topic, queue_id))
                except Exception:
                    log.exception("long-poll check of %s:%d failed", topic, queue_id)
