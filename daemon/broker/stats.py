"""The broker's statistics: RocketMQ 4.9.8's stats items and its store's put/get counters.

`BrokerStatsManager` in Java keeps one `StatsItemSet` per name (`TOPIC_PUT_NUMS`, `GROUP_GET_NUMS`,
...), each a table of `StatsItem`s by key (a topic, `topic@group`, `queueId@topic@group`, the cluster
name). An item holds a running value and a count of calls, snapshotted every 10 s (7 kept: the
minute), every 10 min (7: the hour) and every hour (25: the day); VIEW_BROKER_STATS_DATA (315)
answers the difference between now and the oldest snapshot of each window as `sum`, `tps` and
`avgpt` (value per call). Java measures from the last snapshot; we measure to the live value, so a
rate is visible at once, not 10 s later.

The hot paths only add integers under one lock. `sample()`, which the broker calls every
`SAMPLE_PERIOD` seconds, records the tick's time; the items counted into since the tick before are then
rolled to it (`roll()`, a slice at a time on the loop): a count into an item is all a send does, and the
first count after a tick only notes the item's value and lists it (its own fields, no other object), where
catching its windows up there touched each item's cold windows on the send. An item nobody counted into
has the same value at every tick since, so its windows are caught up from the record of ticks when it is
next counted into or read, and items idle for `FOLD_AGE` ticks a few per tick, so the record stays bounded.
Put latencies go into a fixed array of buckets (no allocation per message), from which
`putLatency99/999` and `putMessageDistributeTime` are read.
"""

from __future__ import annotations

import bisect
import datetime
import threading
import time
from collections import deque
from typing import Final

TOPIC_PUT_NUMS = "TOPIC_PUT_NUMS"
TOPIC_PUT_SIZE = "TOPIC_PUT_SIZE"
GROUP_GET_NUMS = "GROUP_GET_NUMS"
GROUP_GET_SIZE = "GROUP_GET_SIZE"
GROUP_GET_LATENCY = "GROUP_GET_LATENCY"
SNDBCK_PUT_NUMS = "SNDBCK_PUT_NUMS"
BROKER_PUT_NUMS = "BROKER_PUT_NUMS"
BROKER_GET_NUMS = "BROKER_GET_NUMS"
GROUP_GET_FROM_DISK_NUMS = "GROUP_GET_FROM_DISK_NUMS"
GROUP_GET_FROM_DISK_SIZE = "GROUP_GET_FROM_DISK_SIZE"
BROKER_GET_FROM_DISK_NUMS = "BROKER_GET_FROM_DISK_NUMS"
BROKER_GET_FROM_DISK_SIZE = "BROKER_GET_FROM_DISK_SIZE"
#: Every stats name 4.9.8's BrokerStatsManager registers (the commercial ones stay empty here).
STATS_NAMES = (
    TOPIC_PUT_NUMS,
    TOPIC_PUT_SIZE,
    GROUP_GET_NUMS,
    GROUP_GET_SIZE,
    GROUP_GET_LATENCY,
    SNDBCK_PUT_NUMS,
    BROKER_PUT_NUMS,
    BROKER_GET_NUMS,
    GROUP_GET_FROM_DISK_NUMS,
    GROUP_GET_FROM_DISK_SIZE,
    BROKER_GET_FROM_DISK_NUMS,
    BROKER_GET_FROM_DISK_SIZE,
    "COMMERCIAL_SEND_TIMES",
    "COMMERCIAL_SNDBCK_TIMES",
    "COMMERCIAL_RCV_TIMES",
    "COMMERCIAL_RCV_EPOLLS",
    "COMMERCIAL_SEND_SIZE",
    "COMMERCIAL_RCV_SIZE",
    "COMMERCIAL_PERM_FAILURES",
)

#: Seconds between snapshots of the minute window; the hour and day windows move every 10 min / 1 h.
SAMPLE_PERIOD: Final = 10.0
_HOUR_PERIOD: Final = 600.0
_DAY_PERIOD: Final = 3600.0
#: Each window's name in BrokerStatsData, seconds between its snapshots and how many it keeps.
_WINDOWS = (("statsMinute", SAMPLE_PERIOD, 7), ("statsHour", _HOUR_PERIOD, 7), ("statsDay", _DAY_PERIOD, 25))
_EARLY: Final = 0.5  # a sample this early is still its tick
#: Each window's least gap between two snapshots and how many it keeps, in `_WINDOWS`' order.
_GAPS: Final = (SAMPLE_PERIOD - _EARLY, _HOUR_PERIOD - _EARLY, _DAY_PERIOD - _EARLY)
_KEEP: Final = (7, 7, 25)
#: Ticks an item may stay behind before a tick catches it up (an hour), and how many a tick catches up
#: at least: the record of ticks holds about this many.
FOLD_AGE: Final = 360
FOLD_SLICE: Final = 100


def stats_key(topic: str, group: str) -> str:
    """Java's `buildStatsKey`: `topic@group`."""
    return f"{topic}@{group}"


#: (at, value, times): a plain tuple, which compiled code builds and reads natively (a NamedTuple's
#: constructor is an interpreted call: with 10,000 topics `sample()` stalled the loop every 10 s).
_Snapshot = tuple[float, int, int]


class StatsItem:
    """One key's running value and call count with its minute/hour/day snapshots."""

    __slots__ = (
        "day",
        "day_at",
        "hour",
        "hour_at",
        "listed",
        "minute",
        "minute_at",
        "pend_times",
        "pend_value",
        "synced",
        "times",
        "value",
    )

    # Compiled, the fields sit in the object in the order declared here: what a count and a roll touch
    # first, in the object's first lines (cold ones with thousands of topics).
    value: int
    times: int
    synced: int
    listed: int
    pend_value: int
    pend_times: int
    minute_at: float
    hour_at: float
    day_at: float
    minute: deque[_Snapshot]
    hour: deque[_Snapshot]
    day: deque[_Snapshot]

    def __init__(self, now: float, synced: int = 0) -> None:
        self.value = 0
        self.times = 0
        #: How many of `BrokerStats`' ticks the windows have taken (caught up lazily, see the module).
        self.synced = synced
        #: The tick after which it was first counted into last (-1: never), and its value and calls
        #: then: what it held at each tick from `synced` to that one, which its windows may not have
        #: taken yet (see `BrokerStats._mark`).
        self.listed = -1
        self.pend_value = 0
        self.pend_times = 0
        #: Each window's newest snapshot's time, read here instead of in the window.
        self.minute_at = self.hour_at = self.day_at = now
        zero: _Snapshot = (now, 0, 0)
        (_, _, minute), (_, _, hour), (_, _, day) = _WINDOWS
        self.minute = deque([zero], maxlen=minute)
        self.hour = deque([zero], maxlen=hour)
        self.day = deque([zero], maxlen=day)

    def sample(self, now: float) -> None:
        """One tick taken at the running value."""
        self.take(now, self.value, self.times)

    def take(self, now: float, value: int, times: int) -> None:
        """One tick at ``now``, when the item held ``value`` over ``times`` calls: the three windows
        written out, not looped over."""
        if now - self.minute_at >= SAMPLE_PERIOD - _EARLY:
            self.minute.append((now, value, times))
            self.minute_at = now
        if now - self.hour_at >= _HOUR_PERIOD - _EARLY:
            self.hour.append((now, value, times))
            self.hour_at = now
        if now - self.day_at >= _DAY_PERIOD - _EARLY:
            self.day.append((now, value, times))
            self.day_at = now

    def data(self, now: float) -> dict[str, dict[str, float | int]]:
        """BrokerStatsData: `{"statsDay": {"avgpt", "sum", "tps"}, "statsHour": ..., "statsMinute": ...}`."""
        out: dict[str, dict[str, float | int]] = {}
        for (name, _, _), window in zip(_WINDOWS, (self.minute, self.hour, self.day), strict=True):
            at, value, times = window[0]
            total = self.value - value
            calls = self.times - times
            out[name] = {
                "avgpt": total / calls if calls > 0 else 0.0,
                "sum": total,
                "tps": total / max(now - at, 1.0),
            }
        return dict(sorted(out.items()))  # statsDay, statsHour, statsMinute: fastjson's field order


def _first_due(ticks: list[float], lo: int, last: float, gap: float) -> int:
    """The first tick from `lo` on taken `gap` or more after `last` (the window's newest snapshot), by
    the same float compare as `StatsItem.sample` (a binary search: the compare is monotone in the
    tick's time); ``len(ticks)`` when none is."""
    hi = len(ticks)
    while lo < hi:
        mid = (lo + hi) // 2
        if ticks[mid] - last >= gap:
            hi = mid
        else:
            lo = mid + 1
    return lo


class _Chains:
    """The snapshot times a window takes from one tick on, to the newest tick: each next one is the first
    tick `gap` after the last (as `StatsItem.sample` appends them), of which a window keeps its newest
    few. Kept per (window, tick) until the next tick, so idle items caught up together share them."""

    __slots__ = ("_kept", "ticks")

    def __init__(self, ticks: list[float]) -> None:
        self.ticks = ticks
        self._kept: dict[tuple[int, int], list[float]] = {}

    def clear(self) -> None:
        self._kept.clear()

    def times(self, window: int, start: int) -> list[float]:
        """The newest `_KEEP[window]` times of the chain from tick `start` (an index into `ticks`)."""
        kept = self._kept
        ticks = self.ticks
        gap = _GAPS[window]
        path: list[int] = []
        at = start
        tail: list[float] = []
        while True:
            found = kept.get((window, at))
            if found is not None:
                tail = found
                break
            path.append(at)
            at = _first_due(ticks, at + 1, ticks[at], gap)
            if at >= len(ticks):
                break
        keep = _KEEP[window]
        for index in reversed(path):
            if len(tail) < keep:
                tail = [ticks[index], *tail]
            kept[(window, index)] = tail
        return tail


#: TOPIC_PUT_NUMS and TOPIC_PUT_SIZE of a topic, BROKER_PUT_NUMS of the cluster: what a put counts in.
PutItems = tuple[StatsItem, StatsItem, StatsItem]


class _Rate:
    """A total plus one sample per second for the last 10 minutes (the store's putTps windows)."""

    __slots__ = ("samples", "total")

    def __init__(self) -> None:
        self.total = 0
        self.samples: deque[tuple[float, int]] = deque(maxlen=601)

    def add(self, n: int, now: float) -> None:
        if not self.samples or now - self.samples[-1][0] >= 1.0:
            self.samples.append((now, self.total))  # the total before this second's first add
        self.total += n

    def tps(self, window: float, now: float) -> float:
        base = None
        for ts, total in self.samples:
            if now - ts <= window:
                base = (ts, total)
                break
        if base is None or now - base[0] <= 0:
            return 0.0
        return (self.total - base[1]) / max(now - base[0], 1.0)


def _latency_bounds() -> tuple[int, ...]:
    """Bucket upper bounds in µs: fine below 1 ms (where puts are), then 1-10 ms, 10-100 ms, ... 10 s."""
    sub_ms = [10, 20, 50, 100, 200, 500]
    return tuple(
        sub_ms
        + list(range(1_000, 10_001, 1_000))
        + list(range(20_000, 100_001, 10_000))
        + list(range(200_000, 1_000_001, 100_000))
        + list(range(2_000_000, 10_000_001, 1_000_000))
    )


#: A module constant, not a class attribute: a compiled class takes only literals as attribute defaults.
_BOUNDS: Final[tuple[int, ...]] = _latency_bounds()


#: `putMessageDistributeTime`'s ranges as 4.9.8 prints them, by upper bound in µs (Java counts whole ms).
_DISTRIBUTION = (
    ("[<=0ms]", 1_000),
    ("[0~10ms]", 10_000),
    ("[10~50ms]", 50_000),
    ("[50~100ms]", 100_000),
    ("[100~200ms]", 200_000),
    ("[200~500ms]", 500_000),
    ("[500ms~1s]", 1_000_000),
    ("[1~2s]", 2_000_000),
    ("[2~3s]", 3_000_000),
    ("[3~4s]", 4_000_000),
    ("[4~5s]", 5_000_000),
    ("[5~10s]", 10_000_000),
    ("[10s~]", None),
)


class LatencyHistogram:
    """Counts per fixed bucket for the current and the previous minute; percentiles interpolate
    linearly inside a bucket (as 4.9.8's `findPutMessageEntireTimePX` does)."""

    def __init__(self) -> None:
        self.current = [0] * (len(_BOUNDS) + 1)
        self.previous = [0] * (len(_BOUNDS) + 1)
        self.max_us = 0

    def record(self, micros: int) -> None:
        self.current[bisect.bisect_left(_BOUNDS, micros)] += 1
        if micros > self.max_us:
            self.max_us = micros

    def rotate(self) -> None:
        self.previous = self.current
        self.current = [0] * (len(_BOUNDS) + 1)

    def _counts(self) -> list[int]:
        return [a + b for a, b in zip(self.previous, self.current, strict=True)]

    def percentile_ms(self, fraction: float) -> float:
        """The `fraction` quantile in ms over the last one to two minutes (0 without puts)."""
        counts = self._counts()
        total = sum(counts)
        if total == 0:
            return 0.0
        rank = total * fraction
        passed = 0
        for i, n in enumerate(counts):
            if n and rank <= passed + n:
                low = _BOUNDS[i - 1] if i > 0 else 0
                high = _BOUNDS[i] if i < len(_BOUNDS) else max(self.max_us, low)
                return min(low + (high - low) * (rank - passed) / n, self.max_us) / 1000  # never past the max
            passed += n
        return self.max_us / 1000

    def distribution(self) -> str:
        """`[<=0ms]:N [0~10ms]:N ... [10s~]:N ` over the last one to two minutes (Java ends it with a space)."""
        counts = self._counts()
        parts = []
        i = 0
        for label, upper in _DISTRIBUTION:
            n = 0
            while i < len(counts) and (upper is None or (i < len(_BOUNDS) and _BOUNDS[i] <= upper)):
                n += counts[i]
                i += 1
            parts.append(f"{label}:{n} ")
        return "".join(parts)


class BrokerStats:
    """Thread-safe stats of one broker: the 4.9.8 stats items plus the store's put/get counters."""

    def __init__(self, cluster_name: str = "DefaultCluster") -> None:
        self._lock = threading.Lock()
        #: The clock every window reads (a test may substitute its own).
        self._now = time.monotonic
        self.cluster_name = cluster_name
        self.items: dict[str, dict[str, StatsItem]] = {name: {} for name in STATS_NAMES}
        self.put = _Rate()
        self.get = _Rate()
        self.get_found = _Rate()
        self.get_miss = _Rate()
        #: The items each put/pull updates, by topic and by (group, topic, queue): built once.
        self._put_items: dict[str, PutItems] = {}
        #: The broker's put item (BROKER_PUT_NUMS), every topic's third, made with the first topic's.
        self._broker_put: StatsItem | None = None
        self._get_items: dict[tuple[str, str, int], tuple[StatsItem, StatsItem, StatsItem, StatsItem]] = {}
        self.put_size_total = 0
        self.put_failed = 0
        self.get_max_us = 0
        self.put_latency = LatencyHistogram()
        self._last_rotate = self._now()
        #: Totals at the last two local midnights (msgPutTotalTodayMorning, ...); 0 before the first.
        self.put_today_morning = self.put_yesterday_morning = 0
        self.get_today_morning = self.get_yesterday_morning = 0
        self._day = datetime.date.today()
        #: Ticks taken (`sample()`), the times of those an item may still have to catch up with (from
        #: tick number `_tick_base` on: tick number n is ``_ticks[n - _tick_base - 1]``).
        self.tick = 0
        self._ticks: list[float] = []
        self._tick_base = 0
        self._chains = _Chains(self._ticks)
        #: Items counted into since the last tick (`_mark`), and those of earlier ticks still to roll
        #: (`roll()`) from `_roll_at` on.
        self._moved: list[StatsItem] = []
        self._rolling: list[StatsItem] = []
        self._roll_at = 0
        #: Every item in creation order, which the fold sweeps from `_sweep_at`; `_sweep_floor` is the
        #: least tick number the current sweep's visits left (each item's `synced` is at least that
        #: once the sweep ends), and `_floor` the last ended sweep's: no item needs a tick up to it.
        self._all: list[StatsItem] = []
        self._sweep_at = 0
        self._sweep_floor = 0
        self._floor = 0
        self.fold_age = FOLD_AGE
        self.fold_slice = FOLD_SLICE

    def _item(self, name: str, key: str, now: float) -> StatsItem:
        table = self.items[name]
        item = table.get(key)
        if item is None:
            item = table[key] = StatsItem(now, self.tick)
            self._all.append(item)
        return item

    def _sync(self, item: StatsItem) -> None:
        """Catch `item`'s windows up with the ticks taken since they last took one: at those up to its
        `listed` tick it held its `pend_value` (see `_mark`), at the later ones its running value (it was
        not counted into since: a count after a tick lists it anew)."""
        ticks = self._ticks
        base = self._tick_base
        if item.listed > item.synced:  # (a few ticks at most, see _mark)
            value, times = item.pend_value, item.pend_times
            for number in range(item.synced + 1, item.listed + 1):
                item.take(ticks[number - base - 1], value, times)
            item.synced = item.listed
        start = item.synced - base
        if start == len(ticks) - 1:  # one tick behind: the usual case
            item.take(ticks[start], item.value, item.times)
        elif start < len(ticks):
            value, times = item.value, item.times
            for window, snaps in enumerate((item.minute, item.hour, item.day)):
                due = _first_due(ticks, start, snaps[-1][0], _GAPS[window])
                if due < len(ticks):
                    for at in self._chains.times(window, due):
                        snaps.append((at, value, times))
            item.minute_at = item.minute[-1][0]
            item.hour_at = item.hour[-1][0]
            item.day_at = item.day[-1][0]
        item.synced = self.tick

    def _mark(self, item: StatsItem) -> None:
        """Before the first count into `item` after a tick: its value and calls noted (what it held at
        each tick since its windows' last one) and the item listed for the next tick's `roll()`, which
        takes them: the send touches the item's own fields alone. An item whose windows are behind more
        than a couple of ticks, or still owe the ticks of an earlier note (a roll has not reached it),
        catches up here first."""
        if item.listed > item.synced or self.tick - item.synced > 2:
            self._sync(item)
        item.pend_value = item.value
        item.pend_times = item.times
        item.listed = self.tick
        self._moved.append(item)

    def _topic_put_items(self, topic: str, now: float) -> PutItems:
        items = self._put_items.get(topic)
        if items is None:  # once per topic: the hot path formats no key and looks up one dict
            items = self._put_items[topic] = (
                self._item(TOPIC_PUT_NUMS, topic, now),
                self._item(TOPIC_PUT_SIZE, topic, now),
                self._item(BROKER_PUT_NUMS, self.cluster_name, now),
            )
            self._broker_put = items[2]
        return items

    def put_items(self, topic: str) -> PutItems:
        """The items a put of `topic` counts in, for a caller that keeps them per topic (the send path's
        queue slots) and passes them to :meth:`on_put_counts`. Items are never removed nor replaced, so
        kept ones stay the ones VIEW_BROKER_STATS_DATA and /metrics read."""
        with self._lock:
            return self._topic_put_items(topic, self._now())

    def on_put(self, topic: str, count: int = 1, size: int = 0, elapsed_ns: int | None = None) -> None:
        """`count` messages of `topic` stored in one put of `size` bytes, taking `elapsed_ns`."""
        with self._lock:
            now = self._now()
            nums, sizes, broker = self._topic_put_items(topic, now)
            self._count_put(nums, sizes, broker, count, size, elapsed_ns, now)

    def on_put_counts(
        self, nums: StatsItem, sizes: StatsItem, count: int, size: int, elapsed_ns: int
    ) -> None:
        """:meth:`on_put` with the topic's first two items (:meth:`put_items`) instead of its name, kept by
        the caller where it keeps the rest of what a send touches (the send's queue slot): no tuple of
        them to read, one cold object less per send with thousands of topics. The third is the broker's,
        the same for every topic."""
        broker = self._broker_put
        assert broker is not None  # (made with the first topic's items, which the caller's came from)
        with self._lock:
            self._count_put(nums, sizes, broker, count, size, elapsed_ns, self._now())

    def _count_put(
        self,
        nums: StatsItem,
        sizes: StatsItem,
        broker: StatsItem,
        count: int,
        size: int,
        elapsed_ns: int | None,
        now: float,
    ) -> None:
        self.put.add(count, now)
        self.put_size_total += size
        tick = self.tick
        if nums.listed != tick:  # once per item and tick: noted before the count moves
            self._mark(nums)
        if sizes.listed != tick:
            self._mark(sizes)
        if broker.listed != tick:
            self._mark(broker)
        nums.value += count
        nums.times += 1
        sizes.value += size
        sizes.times += 1
        broker.value += count
        if elapsed_ns is not None:
            self.put_latency.record(elapsed_ns // 1000)

    def on_put_failed(self) -> None:
        with self._lock:
            self.put_failed += 1

    def on_get(
        self, group: str, topic: str, queue_id: int, count: int, size: int = 0, elapsed_ns: int = 0
    ) -> None:
        """One pull that found `count` messages (`size` bytes); `elapsed_ns` the read took."""
        with self._lock:
            now = self._now()
            self.get.add(count, now)
            self.get_found.add(1, now)
            self.get_max_us = max(self.get_max_us, elapsed_ns // 1000)
            items = self._get_items.get((group, topic, queue_id))
            if items is None:
                key = stats_key(topic, group)
                items = self._get_items[(group, topic, queue_id)] = (
                    self._item(GROUP_GET_NUMS, key, now),
                    self._item(GROUP_GET_SIZE, key, now),
                    self._item(GROUP_GET_LATENCY, f"{queue_id}@{key}", now),
                    self._item(BROKER_GET_NUMS, self.cluster_name, now),
                )
            nums, sizes, latency, broker = items
            for item in items:
                if item.listed != self.tick:
                    self._mark(item)
            nums.value += count
            nums.times += 1
            sizes.value += size
            sizes.times += 1
            latency.value += elapsed_ns // 1_000_000
            latency.times += 1
            broker.value += count

    def on_get_miss(self) -> None:
        """A pull that found nothing (getMissTps)."""
        with self._lock:
            self.get_miss.add(1, self._now())

    def on_send_back(self, group: str, topic: str) -> None:
        """A consumer sent a message of `topic` back for retry (SNDBCK_PUT_NUMS, key `topic@group`)."""
        with self._lock:
            item = self._item(SNDBCK_PUT_NUMS, stats_key(topic, group), self._now())
            if item.listed != self.tick:
                self._mark(item)
            item.value += 1
            item.times += 1

    def sample(self) -> None:
        """A tick (every `SAMPLE_PERIOD` s): its time recorded, the items counted into since the last
        one listed for `roll()`, the latency minute and the day's totals moved, and the items idle
        longest caught up, a slice a tick, so that the record of ticks stays bounded."""
        with self._lock:
            self._roll(len(self._rolling))  # a roll the last period did not end (the loop held that long)
            now = self._now()
            self._ticks.append(now)
            self.tick += 1
            self._chains.clear()
            self._rolling, self._moved = self._moved, self._rolling
            if now - self._last_rotate >= 60.0:
                self.put_latency.rotate()
                self._last_rotate = now
            today = datetime.date.today()
            if today != self._day:
                self._day = today
                self.put_yesterday_morning, self.put_today_morning = self.put_today_morning, self.put.total
                self.get_yesterday_morning, self.get_today_morning = self.get_today_morning, self.get.total
            self._fold()

    def roll(self, limit: int) -> bool:
        """Take the last tick into the windows of up to `limit` of the items counted into before it (its
        snapshot at the value each holds: not counted into since, or it would have been noted anew);
        whether some are left. The broker calls it after each tick, a slice at a time."""
        with self._lock:
            return self._roll(limit)

    def _roll(self, limit: int) -> bool:
        rolling = self._rolling
        at = self._roll_at
        end = min(at + limit, len(rolling))
        tick = self.tick
        while at < end:
            item = rolling[at]
            at += 1
            if item.synced != tick:
                self._sync(item)
        if at < len(rolling):
            self._roll_at = at
            return True
        rolling.clear()
        self._roll_at = 0
        return False

    def _fold(self) -> None:
        """Catch up the items behind by `fold_age` ticks or more, sweeping every item a slice a tick
        (enough to sweep them all twice in `fold_age` ticks), then drop the ticks no item needs any more."""
        items = self._all
        count = len(items)
        age = max(self.fold_age, 1)
        stale = self.tick - self.fold_age
        at = self._sweep_at
        for _ in range(min(count, max(self.fold_slice, 2 * count // age + 1))):
            if at >= count:  # a sweep ended: every item's windows are past its floor
                self._floor = self._sweep_floor
                self._sweep_floor = self.tick
                at = 0
            item = items[at]
            at += 1
            if item.synced <= stale:
                self._sync(item)
            if item.synced < self._sweep_floor:
                self._sweep_floor = item.synced
        self._sweep_at = at
        needed = self._floor - self._tick_base
        if needed > 0:
            del self._ticks[:needed]
            self._tick_base += needed
            self._chains.clear()  # its ticks are indexed from the base

    def pending_ticks(self) -> int:
        """Ticks kept for items still to catch up with them."""
        with self._lock:
            return len(self._ticks)

    def view(self, name: str, key: str) -> dict[str, dict[str, float | int]] | None:
        """BrokerStatsData of one item; None when no such item exists (Java answers SYSTEM_ERROR)."""
        with self._lock:
            item = self.items.get(name, {}).get(key)
            if item is None:
                return None
            if item.synced != self.tick:
                self._sync(item)
            return item.data(self._now())

    def item_count(self) -> int:
        """Items of every stats name (a few ``len()``s)."""
        with self._lock:
            return sum(len(table) for table in self.items.values())

    def items_of(self, name: str) -> list[tuple[str, StatsItem]]:
        """The items of `name`, copied at once: /metrics reads their values a slice at a time."""
        with self._lock:
            return list(self.items[name].items())

    def group_get_tps(self, group: str, topic: str) -> float:
        """Java's `tpsGroupGetNums`: the minute rate of GROUP_GET_NUMS `topic@group`."""
        data = self.view(GROUP_GET_NUMS, stats_key(topic, group))
        return float(data["statsMinute"]["tps"]) if data is not None else 0.0

    def tps(self, rate: _Rate, window: float) -> float:
        """Average rate over the last `window` seconds."""
        with self._lock:
            return rate.tps(window, self._now())

    def tps_triplet(self, *rates: _Rate) -> str:
        """`putTps`/`getTransferedTps` format: 10 s, 1 min and 10 min averages (of the rates' sum:
        getTotalTps is found + miss, as Java adds them)."""
        return " ".join(f"{sum(self.tps(rate, w) for rate in rates):.2f}" for w in (10, 60, 600))
