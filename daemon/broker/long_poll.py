"""Long polling: park pulls that found nothing until a message for their queue arrives
(docs/wire-protocol.md §pulls-and-long-polling).

A parked pull is a callback plus a timer (:meth:`PullRequestHoldService.hold`): the pull processor's
callback re-runs the read and answers with the original opaque, without a task per held pull. Other
waiters (POP's) await a future (:meth:`PullRequestHoldService.park`). The processor parks in the same step as the read that found nothing, before anything
else runs on the loop, so a message stored right after that read (say, a send in the same TCP read)
still wakes it. Waiters wake when `notify()` reports that their queue grew, or at their deadline (a
re-read that finds only other tags answers PULL_RETRY_IMMEDIATELY, as Java does); a periodic check
also catches notifications from elsewhere that were missed.

The store calls :meth:`PullRequestHoldService.on_arrival` after every put, so this module is compiled
(scripts/build_native.py): as interpreted Python the broker's arrival chain was a measurable share of
every send, even with no pull parked and no slave connected.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from daemon.lifecycle import cancel_tasks, supervise

log = logging.getLogger(__name__)


#: :meth:`PullRequestHoldService.park_all`'s queue id for every queue of a topic.
ANY_QUEUE: Final = -1


@dataclass(eq=False, slots=True)
class _Waiter:
    offset: int
    future: asyncio.Future[None]


class _Held:
    """A held pull: its callback runs once, on the loop, when its queue grows past ``offset`` or at its
    deadline, unless its ``owner`` (the pull's connection) is dropped first (:meth:`PullRequestHoldService.drop`)."""

    __slots__ = ("callback", "host", "key", "offset", "owner", "timer")

    def __init__(
        self, key: tuple[str, int], offset: int, callback: Callable[[], None], owner: object, host: str
    ) -> None:
        self.key = key
        self.offset = offset
        self.callback = callback
        self.owner = owner
        #: The owner's host, whose held pulls count against its budget ("": counted on no host's).
        self.host = host
        self.timer: asyncio.TimerHandle | None = None


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class PullRequestHoldService:
    """Waiters keyed by (topic, queueId), and whatever else waits on the loop for new messages."""

    def __init__(self, max_offset: Callable[[str, int], int], check_interval: float = 5.0) -> None:
        self._max_offset = max_offset
        self.check_interval = check_interval
        self._waiters: dict[tuple[str, int], set[_Waiter]] = {}
        self._held: dict[tuple[str, int], list[_Held]] = {}
        #: The held pulls of each owner that may go away before they are answered (a connection): dropped
        #: with it (:meth:`drop`), not kept until their hold ends.
        self._owned: dict[object, set[_Held]] = {}
        #: The held pulls of each host that has a budget (`room`), by host.
        self._hosts: dict[str, int] = {}
        #: Pulls `room` refused to hold, over their connection's bound and over their host's.
        self.refused_owner = 0
        self.refused_host = 0
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        #: Called on the loop after every arrival besides the parked pulls (the HA transfer loops, while
        #: slaves are connected): none at all costs a send nothing.
        self.wakers: list[Callable[[], None]] = []

    @property
    def parked(self) -> int:
        return sum(len(w) for w in self._waiters.values()) + sum(len(h) for h in self._held.values())

    def room(self, owner: object, host: str, per_owner: int, per_host: int) -> int:
        """Whether `owner` (a connection) may hold one more pull: 0 when it may; 1 when it holds `per_owner`
        already, 2 when its `host` holds `per_host` (counted in `refused_owner`, `refused_host`). A bound of
        0 or less is none; a `host` of "" (loopback) has no budget. A held pull costs its request, a
        callback and a timer for up to a minute: a connection may have thousands of requests awaiting their
        answers, and a host a hundred connections."""
        if per_owner > 0:
            owned = self._owned.get(owner)
            if owned is not None and len(owned) >= per_owner:
                self.refused_owner += 1
                return 1
        if per_host > 0 and host and self._hosts.get(host, 0) >= per_host:
            self.refused_host += 1
            return 2
        return 0

    def held_by(self, host: str) -> int:
        """Pulls held for `host` (one :meth:`room` budgets)."""
        return self._hosts.get(host, 0)

    def hold(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        timeout: float,
        callback: Callable[[], None],
        owner: object = None,
        host: str = "",
    ) -> None:
        """Hold a pull that found nothing at `offset`: `callback` runs once on the loop, soon after the queue
        grows past it (from :meth:`notify`, through ``call_soon``), or after `timeout` s; never, once
        :meth:`drop` dropped its `owner`. Synchronous, as :meth:`park` is; what a future and a task per
        held pull cost is the callback's alone. It counts on `owner` and on `host` (:meth:`room`)."""
        loop = self._loop
        if loop is None:  # (held before start(): a processor driven without the broker's start)
            loop = self._loop = asyncio.get_running_loop()
        key = (topic, queue_id)
        if owner is None:
            host = ""
        held = _Held(key, offset, callback, owner, host)
        waiting = self._held.get(key)
        if waiting is None:
            self._held[key] = [held]
        else:
            waiting.append(held)
        if owner is not None:
            owned = self._owned.get(owner)
            if owned is None:
                self._owned[owner] = {held}
            else:
                owned.add(held)
            if host:
                self._hosts[host] = self._hosts.get(host, 0) + 1
        held.timer = loop.call_later(timeout, self._expire, key, held)

    def _disown(self, held: _Held) -> None:
        owner = held.owner
        if owner is not None:
            owned = self._owned.get(owner)
            if owned is not None:
                owned.discard(held)
                if not owned:
                    del self._owned[owner]
            if held.host:
                self._unhost(held.host, 1)

    def _unhost(self, host: str, n: int) -> None:
        left = self._hosts.get(host, 0) - n
        if left > 0:
            self._hosts[host] = left
        else:
            self._hosts.pop(host, None)

    def _expire(self, key: tuple[str, int], held: _Held) -> None:
        waiting = self._held.get(key)
        if waiting is not None and held in waiting:
            waiting.remove(held)
            if not waiting:
                del self._held[key]
            self._disown(held)
            held.callback()

    def drop(self, owner: object) -> int:
        """Forget the pulls `owner` holds (its connection closed: nobody to answer), their timers and
        callbacks with them, at once; how many. Kept to the end of their hold, a peer that opened
        connections, held thousands of pulls on each and closed them made the broker keep every one (a
        callback, its request and a timer) for up to a minute after."""
        owned = self._owned.pop(owner, None)
        if not owned:
            return 0
        keys: set[tuple[str, int]] = set()
        host, hosted = "", 0
        for one in owned:
            if one.timer is not None:
                one.timer.cancel()
                one.timer = None
            keys.add(one.key)
            if one.host:
                hosted += 1
                host = one.host
        if hosted:
            self._unhost(host, hosted)  # (one connection, one host)
        for key in keys:
            waiting = self._held.get(key)
            if waiting is not None:
                kept = [one for one in waiting if one not in owned]
                if kept:
                    self._held[key] = kept
                else:
                    del self._held[key]
        return len(owned)

    def park(self, topic: str, queue_id: int, offset: int, timeout: float) -> asyncio.Future[None]:
        """Hold a pull that found nothing at `offset`: the future completes when the queue grows past
        it, or after `timeout` s. Parking is synchronous so that the caller can do it in the same step
        as its read (a coroutine would only register once the loop first runs it)."""
        loop = asyncio.get_running_loop()
        key = (topic, queue_id)
        waiter = _Waiter(offset, loop.create_future())
        self._waiters.setdefault(key, set()).add(waiter)
        timer = loop.call_later(timeout, _wake, waiter.future)

        def unpark(_: asyncio.Future[None]) -> None:  # woken, timed out or cancelled
            timer.cancel()
            waiters = self._waiters.get(key)
            if waiters is not None:
                waiters.discard(waiter)
                if not waiters:
                    del self._waiters[key]

        waiter.future.add_done_callback(unpark)
        return waiter.future

    def park_all(self, queues: list[tuple[str, int, int]], timeout: float) -> asyncio.Future[None]:
        """:meth:`park` on every (topic, queue id, offset) of ``queues`` at once: one future, done when the
        first of them grows past its offset, or after `timeout` s. Queue id ANY_QUEUE (its offset unread)
        is every queue of the topic: any arrival on it wakes the future, as 5.x parks a pop of queue -1
        once for its topic. A pop of every queue parked a future, a timer and a done callback on each, a
        held pop's cost and memory growing with the topic's queue count."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        parked = [((topic, queue_id), _Waiter(offset, future)) for topic, queue_id, offset in queues]
        for key, waiter in parked:
            self._waiters.setdefault(key, set()).add(waiter)
        timer = loop.call_later(timeout, _wake, future)

        def unpark(_: asyncio.Future[None]) -> None:  # woken, timed out or cancelled
            timer.cancel()
            for key, waiter in parked:
                waiters = self._waiters.get(key)
                if waiters is not None:
                    waiters.discard(waiter)
                    if not waiters:
                        del self._waiters[key]

        future.add_done_callback(unpark)
        return future

    def on_arrival(self, topic: str, queue_id: int, max_offset: int) -> None:
        """The store's arrival listener, on the thread that put (the flush pool's, for a put that waits
        for an fsync): :meth:`notify` on the loop. Before :meth:`start` nothing can be parked."""
        if threading.get_ident() == self._loop_thread:  # a fifth of asyncio.get_running_loop()'s cost
            self.notify(topic, queue_id, max_offset)
        elif self._loop is not None:
            self._loop.call_soon_threadsafe(self.notify, topic, queue_id, max_offset)

    def notify(self, topic: str, queue_id: int, max_offset: int) -> None:
        """A message was dispatched: `max_offset` is the queue's new max offset (call on the loop)."""
        if self._held:
            key = (topic, queue_id)
            held = self._held.get(key)
            if held is not None:
                self._release(key, held, max_offset)
        if self._waiters:
            waiters = self._waiters.get((topic, queue_id))
            if waiters:
                for waiter in waiters:
                    if max_offset > waiter.offset:
                        _wake(waiter.future)
            anywhere = self._waiters.get((topic, ANY_QUEUE))
            if anywhere:
                for waiter in anywhere:
                    _wake(waiter.future)
        for wake in self.wakers:
            wake()

    def _release(self, key: tuple[str, int], held: list[_Held], max_offset: int) -> None:
        """Schedule the callbacks of the pulls held below ``max_offset`` on ``key``; keep the others."""
        loop = self._loop
        assert loop is not None  # (held pulls exist only after start())
        kept: list[_Held] = []
        for one in held:
            if max_offset > one.offset:
                timer = one.timer
                if timer is not None:
                    timer.cancel()
                if one.owner is not None:
                    self._disown(one)
                loop.call_soon(one.callback)
            else:
                kept.append(one)
        if kept:
            self._held[key] = kept
        else:
            del self._held[key]

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._task = supervise(self._check_loop, "pull-hold-check")

    async def stop(self) -> None:
        await cancel_tasks([self._task])
        held, self._held = self._held, {}
        self._owned.clear()
        self._hosts.clear()
        for waiting in held.values():
            for one in waiting:
                if one.timer is not None:
                    one.timer.cancel()
                one.callback()
        for waiters in self._waiters.values():
            for waiter in waiters:
                _wake(waiter.future)

    async def _check_loop(self) -> None:
        while True:
            await asyncio.sleep(self.check_interval)
            for topic, queue_id in {*self._waiters, *self._held}:
                try:
                    self.notify(topic, queue_id, self._max_offset(topic, queue_id))
                except Exception:
                    log.exception("long-poll check of %s:%d failed", topic, queue_id)
