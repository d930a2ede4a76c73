"""The stats items' windows caught up lazily against the shared record of ticks must answer exactly what
items whose windows all moved at every tick answered: the reference below is that eager item (every
item sampled at every tick), driven beside a `BrokerStats` with the same random touches, ticks, clock
steps and reads; VIEW_BROKER_STATS_DATA's answer (its JSON) and the windows themselves must be equal."""

from __future__ import annotations

from collections import deque

import pytest
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from daemon.broker.stats import (
    BROKER_GET_NUMS,
    BROKER_PUT_NUMS,
    GROUP_GET_LATENCY,
    GROUP_GET_NUMS,
    GROUP_GET_SIZE,
    SAMPLE_PERIOD,
    SNDBCK_PUT_NUMS,
    TOPIC_PUT_NUMS,
    TOPIC_PUT_SIZE,
    BrokerStats,
    StatsItem,
    stats_key,
)
from store import fastjson

_EARLY = 0.5
_WINDOWS = (("statsMinute", 10.0, 7), ("statsHour", 600.0, 7), ("statsDay", 3600.0, 25))


class EagerItem:
    """The reference: an item whose three windows move at every tick."""

    def __init__(self, now: float) -> None:
        self.value = 0
        self.times = 0
        self.windows = [deque([(now, 0, 0)], maxlen=keep) for _, _, keep in _WINDOWS]

    def sample(self, now: float) -> None:
        for (_, period, _), window in zip(_WINDOWS, self.windows, strict=True):
            if now - window[-1][0] >= period - _EARLY:
                window.append((now, self.value, self.times))

    def data(self, now: float) -> dict[str, dict[str, float | int]]:
        out: dict[str, dict[str, float | int]] = {}
        for (name, _, _), window in zip(_WINDOWS, self.windows, strict=True):
            at, value, times = window[0]
            total, calls = self.value - value, self.times - times
            out[name] = {
                "avgpt": total / calls if calls > 0 else 0.0,
                "sum": total,
                "tps": total / max(now - at, 1.0),
            }
        return dict(sorted(out.items()))


TOPICS = st.sampled_from(["A", "B", "C"])
GROUPS = st.sampled_from(["G1", "G2"])
#: Steps of the clock: around each window's period and its early margin, and anything.
STEPS = st.one_of(
    st.sampled_from([0.0, 0.3, 0.5, 9.4, 9.5, 9.500001, 10.0, 10.02, 599.5, 600.0, 3599.5, 3600.0]),
    st.floats(0.0, 4000.0, allow_nan=False),
)


class StatsWindowsMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = 1000.123
        self.stats = BrokerStats("C")
        self.stats._now = lambda: self.clock
        self.eager: dict[tuple[str, str], EagerItem] = {}
        self.kept: dict[str, tuple[StatsItem, StatsItem, StatsItem]] = {}

    @initialize(age=st.sampled_from([None, 1, 3]), slice_=st.integers(1, 4))
    def fold(self, age: int | None, slice_: int) -> None:
        """Sometimes fold idle items every few ticks, a few at a time (the broker's is an hour of ticks)."""
        if age is not None:
            self.stats.fold_age = age
            self.stats.fold_slice = slice_

    def _touch(self, name: str, key: str, value: int, times: int) -> None:
        item = self.eager.get((name, key))
        if item is None:
            item = self.eager[(name, key)] = EagerItem(self.clock)
        item.value += value
        item.times += times

    @rule(step=STEPS)
    def advance(self, step: float) -> None:
        self.clock += step

    @rule()
    def tick(self) -> None:
        self.stats.sample()
        for item in self.eager.values():
            item.sample(self.clock)

    @rule(limit=st.integers(1, 4))
    def roll(self, limit: int) -> None:
        """The broker's roll after a tick, a slice at a time: ticks, counts and reads fall between slices."""
        self.stats.roll(limit)

    @rule(topic=TOPICS, count=st.integers(1, 5), size=st.integers(0, 5000), kept=st.booleans())
    def put(self, topic: str, count: int, size: int, kept: bool) -> None:
        if kept:  # the send path's way: the topic's items kept, counted through on_put_counts
            items = self.kept.get(topic) or self.kept.setdefault(topic, self.stats.put_items(topic))
            self.stats.on_put_counts(items[0], items[1], count, size, 1000)
        else:
            self.stats.on_put(topic, count, size)
        self._touch(TOPIC_PUT_NUMS, topic, count, 1)
        self._touch(TOPIC_PUT_SIZE, topic, size, 1)
        self._touch(BROKER_PUT_NUMS, "C", count, 0)

    @rule(group=GROUPS, topic=TOPICS, count=st.integers(1, 32), size=st.integers(0, 5000))
    def get(self, group: str, topic: str, count: int, size: int) -> None:
        self.stats.on_get(group, topic, 0, count, size, 3_000_000)
        key = stats_key(topic, group)
        self._touch(GROUP_GET_NUMS, key, count, 1)
        self._touch(GROUP_GET_SIZE, key, size, 1)
        self._touch(GROUP_GET_LATENCY, f"0@{key}", 3, 1)
        self._touch(BROKER_GET_NUMS, "C", count, 0)

    @rule(group=GROUPS, topic=TOPICS)
    def send_back(self, group: str, topic: str) -> None:
        self.stats.on_send_back(group, topic)
        self._touch(SNDBCK_PUT_NUMS, stats_key(topic, group), 1, 1)

    @rule(data=st.data())
    def read(self, data: st.DataObject) -> None:
        """VIEW_BROKER_STATS_DATA's answer and the windows behind it, item by item."""
        if not self.eager:
            return
        name, key = data.draw(st.sampled_from(sorted(self.eager)))
        answer = self.stats.view(name, key)
        expected = self.eager[(name, key)].data(self.clock)
        assert fastjson.dumps(answer) == fastjson.dumps(expected)
        assert repr(answer) == repr(expected)  # ints stay ints, floats floats
        item = self.stats.items[name][key]
        windows = [list(w) for w in (item.minute, item.hour, item.day)]
        assert windows == [list(w) for w in self.eager[(name, key)].windows]

    @invariant()
    def same_items_and_values(self) -> None:
        """/metrics reads the items' running values, without catching their windows up."""
        assert {(n, k) for n, table in self.stats.items.items() for k in table} == set(self.eager)
        for (name, key), item in self.eager.items():
            live = self.stats.items[name][key]
            assert (live.value, live.times) == (item.value, item.times)


StatsWindowsMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=50)
test_stats_windows = pytest.mark.slow(StatsWindowsMachine.TestCase)


def test_a_tick_rolls_only_the_items_counted_into_since_the_last_and_a_read_catches_up_the_rest() -> None:
    """The tick's cost is what changed: of 10,001 items, a tick lists for its roll only the 3 a put
    counted into since the tick before; the idle ones are not visited, yet each answers as if its windows
    had moved at every tick, and the busy one's windows kept up without a read."""
    clock = [500.0]
    stats = BrokerStats("C")
    stats._now = lambda: clock[0]
    for i in range(5000):
        stats.on_put(f"T{i}", 1, 10)
    clock[0] += SAMPLE_PERIOD
    stats.sample()
    while stats.roll(700):
        pass
    for _ in range(8):  # a minute and a half of ticks in all, T1 alone counted into between them
        stats.on_put("T1", 1, 10)
        clock[0] += SAMPLE_PERIOD
        stats.sample()
        assert stats.roll(2) and not stats.roll(1)  # T1's two items and the cluster's
    busy = stats.items[TOPIC_PUT_NUMS]["T1"]
    assert busy.minute[-1] == (clock[0], 9, 9)  # rolled: no read, no count since the tick
    idle = stats.items[TOPIC_PUT_NUMS]["T7"]
    assert len(idle.minute) == 2  # its creation and the first tick's roll: untouched by the later ticks
    data = stats.view(TOPIC_PUT_NUMS, "T7")
    assert data is not None and data["statsMinute"]["sum"] == 0 and data["statsHour"]["sum"] == 1
    assert [at for at, _, _ in idle.minute] == [clock[0] - SAMPLE_PERIOD * n for n in range(6, -1, -1)]
    assert len(stats.items[TOPIC_PUT_NUMS]["T8"].minute) == 2  # a read caught up only what it read


def test_idle_items_are_folded_a_slice_a_tick_and_old_ticks_dropped() -> None:
    """The shared record of ticks stays bounded: items idle for `fold_age` ticks are caught up a few per
    tick, and the ticks no item still needs are dropped."""
    clock = [0.0]
    stats = BrokerStats("C")
    stats._now = lambda: clock[0]
    stats.fold_age, stats.fold_slice = 4, 10
    for i in range(25):
        stats.on_put(f"T{i}", 1, 10)
    for _ in range(40):
        clock[0] += SAMPLE_PERIOD
        stats.sample()
    assert stats.pending_ticks() <= stats.fold_age + 2
    assert stats.view(TOPIC_PUT_NUMS, "T3") == {
        "statsDay": {"avgpt": 1.0, "sum": 1, "tps": 1 / 400},
        "statsHour": {"avgpt": 1.0, "sum": 1, "tps": 1 / 400},
        "statsMinute": {"avgpt": 0.0, "sum": 0, "tps": 0.0},
    }


def test_a_count_after_a_tick_whose_roll_has_not_come_keeps_what_the_item_held_at_each_tick() -> None:
    """An item idle for a tick, counted into, then counted into again after the next tick before that
    tick's roll reached it: its note of the value it held still owes a tick to its windows, which take
    it before the new note (a new note first would give that tick the later value)."""
    clock = [100.0]
    stats = BrokerStats("C")
    stats._now = lambda: clock[0]
    eager = EagerItem(clock[0])

    def put(count: int) -> None:
        stats.on_put("T", count, 0)
        eager.value += count
        eager.times += 1

    def tick() -> None:
        clock[0] += SAMPLE_PERIOD
        stats.sample()
        eager.sample(clock[0])

    put(1)
    tick()
    tick()  # T idle through this period; the tick's own start rolls the last period's items
    put(2)  # noted: its windows owe the tick just taken
    tick()
    put(4)  # before this tick's roll: the note is still owed
    tick()
    put(8)
    assert stats.view(TOPIC_PUT_NUMS, "T") == eager.data(clock[0])
    item = stats.items[TOPIC_PUT_NUMS]["T"]
    assert [list(w) for w in (item.minute, item.hour, item.day)] == [list(w) for w in eager.windows]
