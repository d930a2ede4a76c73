"""A ``TopSource`` over fixed data: deterministic pictures for snapshot tests and demos."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from mqctl.errors import NotFoundError
from mqctl.top.model import VIEWS, GroupDetail, Snapshot
from store import Clock


@dataclass
class MemorySource:
    """Serves ``snapshot`` (stamped with the clock's time) and ``details``; ``failure``, when set,
    is raised instead, as an unreachable cluster would."""

    data: Snapshot
    clock: Clock
    details: dict[str, GroupDetail] = field(default_factory=dict)
    failure: Exception | None = None
    calls: int = 0

    async def snapshot(self, views: frozenset[str] = VIEWS) -> Snapshot:
        self.calls += 1
        if self.failure is not None:
            raise self.failure
        return replace(
            self.data,
            taken_at=self.clock.now(),
            topics=self.data.topics if "topics" in views else None,
            groups=self.data.groups if "groups" in views else None,
            stores=self.data.stores if "store" in views else None,
        )

    async def group_detail(self, group: str) -> GroupDetail:
        if self.failure is not None:
            raise self.failure
        try:
            return self.details[group]
        except KeyError:
            raise NotFoundError(f"group {group!r} not found") from None

    async def close(self) -> None:
        return None
