"""Per-(group, queue) locks for orderly consumers, expiring 60 s after their last refresh
(docs/wire-protocol.md §orderly-locks)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from daemon.broker.bodies import MessageQueue
from daemon.remoting.limits import WarningGate

log = logging.getLogger(__name__)

LOCK_MAX_LIVE_MS = 60_000
#: Locks one group holds at most (its members' queues: a few thousand for a group of many topics). The
#: queues a lock may name are this broker's, of existing topics; past this a new one is not granted.
MAX_LOCKS_PER_GROUP = 16384


@dataclass(slots=True)
class _Lock:
    """Who holds a queue: a client id, and the host that took the lock under it (see `try_lock_batch`)."""

    client_id: str
    last_update: float
    host: str | None = None


class RebalanceLockManager:
    def __init__(self, max_live_ms: int = LOCK_MAX_LIVE_MS, max_per_group: int = MAX_LOCKS_PER_GROUP) -> None:
        self.max_live_ms = max_live_ms
        self.max_per_group = max_per_group
        self._locks: dict[str, dict[MessageQueue, _Lock]] = {}
        self._full = WarningGate(log)

    def try_lock_batch(
        self, group: str, mqs: list[MessageQueue], client_id: str, host: str | None = None
    ) -> list[MessageQueue]:
        """Lock what is free, expired or already ours; return the queues the client now holds. A group
        at `max_per_group` takes a new queue only once its expired locks are gone. ``host``, when given
        (a peer off the broker's machine in protected mode), is bound to the locks taken: a lock is
        ours only if it was taken from that host too (`_ours`)."""
        now = time.monotonic() * 1000
        table = self._locks.setdefault(group, {})
        granted = []
        swept = False
        for mq in mqs:
            lock = table.get(mq)
            if lock is None and len(table) >= self.max_per_group:
                if not swept:
                    swept = True
                    self._sweep(table, now)
                if len(table) >= self.max_per_group:  # (its orderly consumer logs "lock failed" only)
                    self._full.warning(
                        "group %s holds %d queue locks, the most a group may: %s of %s not locked",
                        group,
                        self.max_per_group,
                        mq.queue_id,
                        mq.topic,
                    )
                    continue
            if lock is None or _ours(lock, client_id, host) or now - lock.last_update > self.max_live_ms:
                table[mq] = _Lock(client_id, now, host)
                granted.append(mq)
        if not table:
            del self._locks[group]
        return granted

    def unlock_batch(
        self, group: str, mqs: list[MessageQueue], client_id: str, host: str | None = None
    ) -> None:
        """Release the queues ``client_id`` holds (from ``host``, when given: see `try_lock_batch`)."""
        table = self._locks.get(group, {})
        for mq in mqs:
            lock = table.get(mq)
            if lock is not None and _ours(lock, client_id, host):
                del table[mq]
        if not table:
            self._locks.pop(group, None)

    def drop_client(self, group: str, client_id: str, host: str | None = None) -> None:
        """Release every lock ``client_id`` holds in ``group`` (taken from ``host``, when given: see
        `try_lock_batch`): it left the group (unregistered, or expired). A closed connection keeps its
        locks until they expire, as in 4.9.8: a client that reconnects still holds its queues."""
        table = self._locks.get(group)
        if table is None:
            return
        for mq in [mq for mq, lock in table.items() if _ours(lock, client_id, host)]:
            del table[mq]
        if not table:
            del self._locks[group]

    def sweep(self) -> None:
        """Forget every expired lock (run with the client scan): a lock nobody renews is only memory."""
        now = time.monotonic() * 1000
        for group, table in list(self._locks.items()):
            self._sweep(table, now)
            if not table:
                del self._locks[group]

    def _sweep(self, table: dict[MessageQueue, _Lock], now: float) -> None:
        for mq in [mq for mq, lock in table.items() if now - lock.last_update > self.max_live_ms]:
            del table[mq]

    def count(self) -> int:
        """Locks held, all groups together."""
        return sum(len(table) for table in self._locks.values())


def _ours(lock: _Lock, client_id: str, host: str | None) -> bool:
    """Whether ``client_id`` (from ``host``; None: this machine, or no protected mode) holds ``lock``. A
    peer off the machine may name any client id on its own connection: one that heartbeat as a member's
    id unlocked the member's queues and locked them as itself. Its locks are the ones it took."""
    return lock.client_id == client_id and (host is None or lock.host == host)
