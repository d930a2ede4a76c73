"""Fixed data for the snapshot tests: one cluster with a down broker, a few topics and groups, a store
with expired files, at a frozen time."""

from __future__ import annotations

from dataclasses import replace

from mqctl.top.app import TopApp
from mqctl.top.memory import MemorySource
from mqctl.top.model import (
    BrokerView,
    ClientView,
    CommitLogFile,
    GroupDetail,
    GroupRow,
    NamesrvView,
    Overview,
    QueueOffset,
    Snapshot,
    StoreView,
    TopicRow,
)
from store import FakeClock

NOW = 1_790_000_000.0  # 2026-09-21T14:13:20Z
GIB = 1024**3
HOUR = 3600.0

BROKERS = (
    BrokerView(
        "DefaultCluster",
        "broker-a",
        0,
        "10.0.0.11:10911",
        "V4_9_8",
        1250.0,
        980.5,
        0.62,
        GIB * 3,
        GIB * 7 + 123_456_789,
        GIB,
        metrics=True,
    ),
    BrokerView(
        "DefaultCluster",
        "broker-a",
        1,
        "10.0.0.12:10911",
        "V4_9_8",
        0.0,
        12.0,
        0.61,
        GIB * 3,
        GIB * 7 + 123_000_000,
        GIB,
        metrics=True,
    ),
    BrokerView(
        "DefaultCluster",
        "broker-b",
        0,
        "10.0.0.21:10911",
        "V4_9_8",
        310.2,
        305.0,
        0.87,
        0,
        GIB * 2 + 5,
        GIB,
        metrics=True,
    ),
    BrokerView(
        "DefaultCluster", "broker-c", 0, "10.0.0.31:10911", error="connect to 10.0.0.31:10911: refused"
    ),
)

TOPICS = (
    TopicRow("orders", 16, 8_123_456, 820.0, 5_400_000_000),
    TopicRow("payments", 8, 1_204_220, 310.5, 980_000_000),
    TopicRow("audit-log", 4, 45_000_000, 120.0, 90_000_000_000),
    TopicRow("notifications", 8, 99_120, 0.0, 12_000_000),
    TopicRow("%RETRY%billing", 1, 310, 0.2, 40_000),
    TopicRow("%DLQ%billing", 1, 12, 0.0, 2_000),
    TopicRow("TBW102", 8, 0, 0.0, 0),
)

GROUPS = (
    GroupRow("billing", 152_004, 3, 290.0, 4 * HOUR + 120),
    GroupRow("shipping", 0, 2, 800.1, None),
    GroupRow("analytics", 8_900_000, 1, 55.0, 3 * 86400.0),
    GroupRow("search-indexer", 1_200, 0, 0.0, 600.0, uncounted=2),
)

DETAIL = GroupDetail(
    "billing",
    tuple(
        QueueOffset(
            "payments",
            "broker-a",
            q,
            150_000 + q * 1000,
            130_000 + q * 1000 - q * 7,
            20_000 + q * 7,
            f"10.0.1.{5 + q % 3}@billing-{q % 3}",
        )
        for q in range(8)
    ),
    tuple(
        ClientView(f"10.0.1.{5 + i}@billing-{i}", f"10.0.1.{5 + i}:5{i}123", "JAVA", 409) for i in range(3)
    ),
)


def _files(first: float, starts: range, size: int) -> tuple[CommitLogFile, ...]:
    count = len(starts)
    times = [first + i * 30 * HOUR for i in range(count)]
    return tuple(
        CommitLogFile(
            s,
            size if i < count - 1 else 123_456_789,
            times[i],
            times[i + 1] if i < count - 1 else None,
            active=i == count - 1,
        )
        for i, s in enumerate(starts)
    )


def _planned(files: tuple[CommitLogFile, ...], reserved_hours: float) -> tuple[CommitLogFile, ...]:
    """As the broker's plan says: expired files go, the oldest of them with 1,204 of billing's messages."""
    out = []
    for i, f in enumerate(files):
        expired = not f.active and f.last_write is not None and f.last_write + reserved_hours * HOUR <= NOW
        out.append(
            replace(
                f,
                reason="expired" if expired else None,
                unconsumed={"billing": 1_204 if i == 0 else 0, "shipping": 0},
            )
        )
    return tuple(out)


STORES = (
    StoreView(
        "broker-a",
        GIB * 3,
        GIB * 7 + 123_456_789,
        GIB,
        72,
        0.62,
        _planned(_files(NOW - 130 * HOUR, range(GIB * 3, GIB * 8, GIB), GIB), 72),
        planned=True,
    ),
    StoreView(
        "broker-b",
        0,
        GIB * 2 + 5,
        GIB,
        48,
        0.87,
        _files(NOW - 61 * HOUR, range(0, GIB * 3, GIB), GIB),
        note="no cleanup plan from this broker: last writes and verdicts estimated from the next file's "
        "first message",
    ),
)

SNAPSHOT = Snapshot(
    taken_at=NOW,
    overview=Overview(
        BROKERS, (NamesrvView("10.0.0.1:9876", True), NamesrvView("10.0.0.2:9876", False, "refused"))
    ),
    topics=TOPICS,
    groups=GROUPS,
    stores=STORES,
    errors=("broker-c 10.0.0.31:10911: connect to 10.0.0.31:10911: refused",),
)


def fixed_source() -> tuple[MemorySource, FakeClock]:
    clock = FakeClock(int(NOW * 1000))
    return MemorySource(SNAPSHOT, clock, details={"billing": DETAIL}), clock


def count_idle_paused_ticks(app: TopApp) -> list[None]:
    """Install, before mount (where the timer takes it), a tick that records each tick that would have
    refreshed were the app not paused: a pause test waits for these instead of sleeping."""
    ticks: list[None] = []
    tick = app._tick

    def counting_tick() -> None:
        if app.paused and not app.refreshing:
            ticks.append(None)
        tick()

    app._tick = counting_tick  # type: ignore[method-assign]  # a bound method replaced on purpose
    return ticks
