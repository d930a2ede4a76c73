"""Per-(group, queue) locks for orderly consumers, expiring 60 s after their last refresh
(docs/wire-protocol.md §orderly-locks)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from daemon.broker.bodies import MessageQueue

LOCK_MAX_LIVE_MS = 60_000


@dataclass(slots=True)
class _Lock:
    client_id: str
    last_update: float


class RebalanceLockManager:
    def __init__(self, max_live_ms: int = LOCK_MAX_LIVE_MS) -> None:
        self.max_live_ms = max_live_ms
        self._locks: dict[str, dict[MessageQueue, _Lock]] = {}

    def try_lock_batch(self, group: str, mqs: list[MessageQueue], client_id: str) -> list[MessageQueue]:
        """Lock what is free, expired or already ours; return the queues the client now holds."""
        now = time.monotonic() * 1000
        table = self._locks.setdefault(group, {})
        granted = []
        for mq in mqs:
            lock = table.get(mq)
            if lock is None or lock.client_id == client_id or now - lock.last_update > self.max_live_ms:
                table[mq] = _Lock(client_id, now)
                granted.append(mq)
        return granted

    def unlock_batch(self, group: str, mqs: list[MessageQueue], client_id: str) -> None:
        table = self._locks.get(group, {})
        for mq in mqs:
            lock = table.get(mq)
            if lock is not None and lock.client_id == client_id:
                del table[mq]
