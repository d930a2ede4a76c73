"""What ``mqctl top`` shows, as plain data: one immutable ``Snapshot`` per refresh.

The App only renders snapshots, so every screen can be driven by the live source (Admin requests
plus the broker's metrics endpoint) or by the in-memory one that tests use for fixed pictures.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

#: RocketMQ's disk watermarks: cleanup starts (diskMaxUsedSpaceRatio), forced cleanup
#: (diskSpaceCleanForciblyRatio) and writes refused (diskSpaceWarningLevelRatio).
WATERMARKS: tuple[tuple[float, str], ...] = ((0.90, "writes blocked"), (0.85, "force clean"), (0.75, "clean"))


@dataclass(frozen=True)
class NamesrvView:
    addr: str
    up: bool
    error: str | None = None


@dataclass(frozen=True)
class BrokerView:
    """One broker as its runtime info (and config) describe it; ``error`` when it did not answer."""

    cluster: str
    name: str
    broker_id: int
    addr: str
    version: str | None = None
    put_tps: float | None = None
    get_tps: float | None = None
    disk_ratio: float | None = None
    commitlog_min: int | None = None
    commitlog_max: int | None = None
    file_size: int | None = None
    metrics: bool = False
    #: Replication: a master's connected slaves; a slave's connection to its master and lag in bytes.
    ha_slaves: int | None = None
    ha_connected: bool | None = None
    ha_lag_bytes: int | None = None
    #: DLedger mode: the member's Raft role and term ("LEADER t3").
    raft: str | None = None
    #: An mqctl broker's event loop: lag p50/p99 over the last minute or two and the longest since start,
    #: and its longest GC pause, in ms (None from a Java broker).
    loop_lag_p50_ms: float | None = None
    loop_lag_p99_ms: float | None = None
    loop_lag_max_ms: float | None = None
    gc_pause_max_ms: float | None = None
    #: Its stalls since start and their lateness by cause in ms (ran, core, steal, gc, other).
    loop_stalls: int | None = None
    loop_stall_ms: dict[str, float] | None = None
    #: POP (5.x): messages popped and not yet acked (None from a broker without POP).
    pop_in_flight: int | None = None
    #: Timer messages waiting for their time on an mqctl broker (None from a broker without them).
    timer_pending: int | None = None
    error: str | None = None
    #: With ``error``: what the row says instead of a version (DOWN, or "ACL denied" for a broker that
    #: answered but refused: it is up, this session may not read it).
    unread_as: str = "DOWN"

    @property
    def commitlog_bytes(self) -> int | None:
        if self.commitlog_min is None or self.commitlog_max is None:
            return None
        return self.commitlog_max - self.commitlog_min

    @property
    def commitlog_files(self) -> int | None:
        """Mapped files spanning [min, max): the store never keeps a gap between them."""
        if self.commitlog_min is None or self.commitlog_max is None or not self.file_size:
            return None
        if self.commitlog_max <= 0:
            return 0
        first = self.commitlog_min // self.file_size
        last = max(self.commitlog_max - 1, self.commitlog_min) // self.file_size
        return last - first + 1


@dataclass(frozen=True)
class Overview:
    brokers: tuple[BrokerView, ...]
    namesrvs: tuple[NamesrvView, ...]

    @property
    def put_tps(self) -> float:
        return sum(b.put_tps or 0.0 for b in self.brokers if b.broker_id == 0)

    @property
    def get_tps(self) -> float:
        return sum(b.get_tps or 0.0 for b in self.brokers if b.broker_id == 0)


@dataclass(frozen=True)
class TopicRow:
    """One topic over all masters. ``messages`` is the sum of its queues' max offsets (written so far);
    ``put_tps`` is None until two refreshes were seen, ``bytes`` None without a metrics endpoint."""

    name: str
    queues: int
    messages: int
    put_tps: float | None = None
    bytes: int | None = None
    #: ``normal``, ``system``, ``retry`` or ``dlq`` (``topic list --system``'s kinds).
    kind: str = "normal"


@dataclass(frozen=True)
class GroupRow:
    """One consumer group over all masters; ``oldest_age`` (seconds) is an upper bound: the age of the
    last consumed message on the queue furthest behind (ConsumeStats' lastTimestamp), or on a queue with
    no consumed message left (never consumed) the age of its oldest stored message. ``never_consumed``: no
    master holds an offset of the group for any queue (no consumer ever committed one, none is online),
    each having answered so:
    its lag cannot be counted, and a consumer that starts reads as its consumeFromWhere says. ``lag`` counts
    each queue as ``group progress`` does; ``uncounted``: queues of unknown lag left out of it (never
    committed on where consumeFromWhere decides the start), ``lag`` None when no queue could be counted."""

    name: str
    lag: int | None
    consumers: int
    consume_tps: float
    oldest_age: float | None = None
    never_consumed: bool = False
    uncounted: int = 0


@dataclass(frozen=True)
class QueueOffset:
    topic: str
    broker: str
    queue_id: int
    max_offset: int
    consumer_offset: int | None  # None: never committed on (group progress)
    lag: int | None  # None: where the consumer starts is its consumeFromWhere's
    client_id: str | None


@dataclass(frozen=True)
class ClientView:
    client_id: str
    addr: str
    language: str
    version: int


@dataclass(frozen=True)
class GroupDetail:
    """Enter on a group: its queues with offsets and owners, and its online clients."""

    group: str
    queues: tuple[QueueOffset, ...]
    clients: tuple[ClientView, ...]


@dataclass(frozen=True)
class CommitLogFile:
    """One CommitLog file; times in epoch seconds. ``reason`` and ``unconsumed`` come from the broker's
    own cleanup plan when it serves one (why a clean deletes the file; per group, messages in it not yet
    consumed); without a plan they stay None and the verdict is estimated from the ages."""

    start: int
    written: int
    first_write: float | None
    last_write: float | None
    active: bool
    reason: str | None = None
    unconsumed: dict[str, int] | None = None

    @property
    def name(self) -> str:
        return f"{self.start:020d}"


@dataclass(frozen=True)
class StoreView:
    """A master's CommitLog as seen online, with the retention settings that decide what a clean deletes."""

    broker: str
    min_offset: int
    max_offset: int
    file_size: int
    file_reserved_hours: float | None
    disk_ratio: float | None
    files: tuple[CommitLogFile, ...] = ()
    note: str | None = None
    planned: bool = False  # verdicts are the broker's own plan, not an estimate

    def expires_at(self, f: CommitLogFile) -> float | None:
        """When a clean may delete ``f``: RocketMQ never deletes the file being written."""
        if f.active or f.last_write is None or self.file_reserved_hours is None:
            return None
        return f.last_write + self.file_reserved_hours * 3600

    def deletable(self, now: float) -> list[CommitLogFile]:
        """What a clean run now would delete: the broker's plan, else the files whose last write is older
        than fileReservedTime."""
        if self.planned:
            return [f for f in self.files if f.reason is not None]
        return [f for f in self.files if (at := self.expires_at(f)) is not None and at <= now]


#: The views a snapshot can hold data for; the overview is always fetched.
VIEWS = frozenset({"overview", "topics", "groups", "store"})


@dataclass(frozen=True)
class Snapshot:
    """What one refresh saw. ``topics``, ``groups`` and ``stores`` are None when that view was not
    asked for (a cluster of 1,000 topics costs one request per topic without a metrics endpoint);
    ``missing`` names columns this cluster cannot provide."""

    taken_at: float
    overview: Overview
    topics: tuple[TopicRow, ...] | None = None
    groups: tuple[GroupRow, ...] | None = None
    stores: tuple[StoreView, ...] | None = None
    missing: frozenset[str] = field(default_factory=frozenset)
    errors: tuple[str, ...] = ()
    #: Topics left out of ``topics`` by kind (system, retry, dlq), as ``topic list`` leaves them out.
    hidden_topics: tuple[tuple[str, int], ...] = ()

    def has(self, view: str) -> bool:
        return view == "overview" or getattr(self, "stores" if view == "store" else view) is not None


class TopSource(Protocol):
    """Where snapshots come from: the live cluster or fixed data."""

    async def snapshot(self, views: frozenset[str] = VIEWS) -> Snapshot: ...

    async def group_detail(self, group: str) -> GroupDetail: ...

    async def close(self) -> None: ...
