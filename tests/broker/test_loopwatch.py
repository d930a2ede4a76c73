"""The broker's event-loop lag and GC pauses: sampled, exported in /metrics and the runtime info."""

from __future__ import annotations

import asyncio
import gc
import itertools
import os
import re
import signal
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from daemon.broker.broker import Broker
from daemon.broker.config import BrokerConfig
from daemon.broker.loopwatch import (
    CAUSES,
    FREEZE_ENTRIES,
    IDLE_SHARE,
    LOOP_RUNTIME_KEYS,
    STALL_KEYS,
    GcPauses,
    LoopWatch,
    classify,
)
from daemon.config import ConfigError
from daemon.lifecycle import SERVING_GC_THRESHOLD, serve
from tests.support.broker import BrokerHandle, broker_config
from tests.support.turns import LoopTurns

LABELS = 'broker="broker-a",cluster="DefaultCluster"'


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        return resp.read().decode()


def _value(text: str, name: str, labels: str = LABELS) -> float:
    found = re.search(rf"^{re.escape(name)}{{{re.escape(labels)}}} (\S+)$", text, re.M)
    assert found is not None, f"{name}{{{labels}}} not in /metrics"
    return float(found.group(1))


async def _samples(watch: LoopWatch, n: int) -> None:
    """Wait until the sampler has woken `n` more times."""
    target = watch.samples + n
    while watch.samples < target:
        await asyncio.sleep(watch.period / 4)


@pytest.mark.slow
async def test_metrics_carry_loop_lag_histogram_and_gc_pauses(broker: BrokerHandle) -> None:
    b = broker.broker
    await _samples(b.loop_watch, 3)
    gc.collect()  # a full collection of this process: counted, with its time
    assert b.metrics_port is not None
    text = await asyncio.to_thread(_scrape, b.metrics_port)
    count = _value(text, "rocketmq_broker_loop_lag_seconds_count")
    assert count >= 3
    assert _value(text, "rocketmq_broker_loop_lag_seconds_bucket", LABELS + ',le="+Inf"') == count
    # (no bound on how late: an idle loop wakes when the host's scheduler lets it, seconds on a loaded one;
    # the buckets are cumulative)
    assert _value(text, "rocketmq_broker_loop_lag_seconds_sum") >= 0
    assert 0 <= _value(text, "rocketmq_broker_loop_lag_seconds_bucket", LABELS + ',le="1.0"') <= count
    gen2 = LABELS + ',generation="2"'
    assert _value(text, "rocketmq_broker_gc_collections_total", gen2) >= 1
    assert _value(text, "rocketmq_broker_gc_pause_seconds_total", gen2) > 0
    assert 0 < _value(text, "rocketmq_broker_gc_pause_max_seconds", gen2) < 5
    info = b.runtime_info()
    assert set(info) >= LOOP_RUNTIME_KEYS
    assert int(info["gcCollections"]) >= 1 and float(info["gcPauseMax"]) > 0
    assert 0 <= float(info["loopLagP50"]) <= float(info["loopLagP99"]) <= float(info["loopLagMax"]) < 1000


async def test_blocked_loop_shows_in_the_lag_max(broker: BrokerHandle) -> None:
    b = broker.broker
    watch = b.loop_watch
    loop = asyncio.get_running_loop()  # the broker's own loop: these tests run on it
    before, _ = watch.histogram()
    # a callback that blocks the loop for 0.2 s, due just before the sampler's next wake-up
    loop.call_at(watch.next_due - 0.001, time.sleep, 0.2)
    await _samples(watch, 1)
    assert 190 <= float(b.runtime_info()["loopLagMax"]) < 1000
    after, total = watch.histogram()
    late = (dict(after)["+Inf"] - dict(after)["0.1"]) - (dict(before)["+Inf"] - dict(before)["0.1"])
    assert late >= 1 and total >= 0.19  # a sample over 100 ms in the Prometheus histogram too


def test_gc_callbacks_time_each_collection_per_generation() -> None:
    pauses = GcPauses()
    pauses.install()
    try:
        gc.collect(1)
        gc.collect(1)
        gc.collect(2)
    finally:
        pauses.uninstall()
    assert pauses.callback not in gc.callbacks
    assert pauses.count[1] >= 2 and pauses.count[2] >= 1
    assert pauses.total_s[2] >= pauses.max_s[2] > 0
    assert pauses.total_s[1] >= pauses.max_s[1] > 0
    gc.collect(2)  # uninstalled: no longer counted
    assert pauses.count[2] == 1


def test_a_stop_without_its_start_is_ignored() -> None:
    pauses = GcPauses()
    pauses.callback("stop", {"generation": 2, "collected": 0, "uncollectable": 0})
    assert pauses.count == [0, 0, 0] and pauses.max_s == [0.0, 0.0, 0.0]


async def test_a_daemon_broker_s_first_request_meets_its_start_up_heap_frozen_and_the_serving_thresholds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # start() goes on after the port opens (the gRPC front, the first registration, up to its timeout when
    # a NameServer does not answer): requests served meanwhile must not meet CPython's default thresholds
    # and the unfrozen start-up heap, whose full collection takes tens of milliseconds
    broker = Broker(broker_config(tmp_path))
    opened = broker.server.serve
    seen: list[tuple[tuple[int, ...], int]] = []

    async def serve_port() -> None:
        seen.append((gc.get_threshold(), gc.get_freeze_count()))
        await opened()

    monkeypatch.setattr(broker.server, "serve", serve_port)
    threshold = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    frozen = gc.get_freeze_count()
    try:
        await asyncio.wait_for(serve(broker, on_started=lambda: os.kill(os.getpid(), signal.SIGTERM)), 30)
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)
    ((at_open, frozen_at_open),) = seen
    assert at_open == SERVING_GC_THRESHOLD
    assert frozen_at_open > frozen  # the broker's start-up objects: out of every collection already


async def test_a_broker_started_outside_a_daemon_leaves_the_process_s_collector_alone(tmp_path: Path) -> None:
    threshold, frozen = gc.get_threshold(), gc.get_freeze_count()
    broker = Broker(broker_config(tmp_path))
    await broker.start()
    try:
        assert gc.get_threshold() == threshold and gc.get_freeze_count() == frozen
    finally:
        await broker.stop()


async def test_a_slow_full_collection_freezes_what_survived_it() -> None:
    watch = LoopWatch(period=0.01)
    watch.start()
    table = [[i] for i in range(300_000)]  # a long-lived table grown while serving: tracked lists
    try:
        gc.collect()
        assert watch.gc.slow_full, f"a full collection over {len(table):,} lists took {watch.gc.max_s[2]}s"
        await _samples(watch, 1)
        assert watch.freezes == 1 and not watch.gc.slow_full
        assert gc.get_freeze_count() >= len(table)
        gc.collect()  # the next full collection walks none of it
        assert not watch.gc.slow_full
        await _samples(watch, 1)
        assert watch.freezes == 1
    finally:
        watch.stop()
        gc.unfreeze()


async def test_tables_grown_while_serving_are_frozen_before_a_full_collection_walks_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A growing topic table would be walked by the next full collection: it is frozen as it grows, with
    no full collection needed to notice."""
    table: list[list[int]] = []
    watch = LoopWatch(period=0.01, table_size=lambda: len(table))
    count = gc.get_freeze_count
    counted: list[int] = []

    def counting() -> int:
        counted.append(1)
        return count()

    monkeypatch.setattr(gc, "get_freeze_count", counting)
    watch.start()
    try:
        table.extend([i] for i in range(FREEZE_ENTRIES - 1))  # less than worth a freeze
        await _samples(watch, 3)
        assert watch.freezes == 0
        table.append([0])
        await _samples(watch, 2)
        assert watch.freezes == 1
        assert count() >= len(table)
        assert not counted  # a freeze is a constant-time move; counting walks every frozen object
        table.extend([i] for i in range(FREEZE_ENTRIES - 1))  # counted from the last freeze
        await _samples(watch, 3)
        assert watch.freezes == 1
    finally:
        watch.stop()
        gc.unfreeze()


async def test_a_sample_that_raised_is_logged_and_the_samples_go_on(caplog: pytest.LogCaptureFixture) -> None:
    """The sampler reschedules itself from each sample: one that raised ended the samples for good, and
    /metrics showed the loop's lag as it was then."""
    raised: list[bool] = []

    def table_size() -> int:
        if len(raised) < 1 and watch.samples >= 2:
            raised.append(True)
            raise KeyError("a bug in a sample")
        return 0

    watch = LoopWatch(period=0.01, table_size=table_size)
    watch.start()
    try:
        await asyncio.wait_for(_samples(watch, 6), 10)
    finally:
        watch.stop()
    assert raised
    assert [r.exc_info[0] for r in caplog.records if r.levelname == "ERROR" and r.exc_info] == [KeyError]


async def test_the_broker_watches_its_tables_sizes(broker: BrokerHandle) -> None:
    size = broker.broker.loop_watch.table_size
    assert size is not None
    before = size()
    broker.broker.stats.on_put("NewTopic", 1, 10)
    assert size() > before
    before = size()
    broker.broker.offsets.commit_offset("G", "NewTopic", 0, 1)  # an offset map per topic and group
    assert size() == before + 1


async def test_offsets_are_formatted_on_the_loop_in_slices_and_written_only_when_changed(
    broker: BrokerHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The periodic consumerOffset.json persist makes its text on the loop in pieces, other work running
    between them (a worker thread formatting it held the GIL against the loop throughout), gives a
    worker thread only the write, and writes nothing while no offset changed."""
    offsets = broker.broker.store.configs.consumer_offsets
    for i in range(1000):
        offsets.commit_offset("G", f"T{i}", 0, i)
    turns = LoopTurns()
    pieces: list[tuple[int, int]] = []  # (thread, turn of the other task) as each piece is made
    slices = offsets.text_slices

    def spied(size: int) -> Iterator[str]:
        for piece in slices(size):
            pieces.append((threading.get_ident(), turns.count))
            yield piece

    monkeypatch.setattr(offsets, "text_slices", spied)
    written: list[str] = []
    write = offsets._write

    def recorded(text: str) -> None:
        written.append(text)
        write(text)

    monkeypatch.setattr(offsets, "_write", recorded)
    async with turns:
        await broker.broker._persist_offsets()
        assert len(pieces) >= 5 and {thread for thread, _ in pieces} == {threading.get_ident()}
        assert all(b > a for (_, a), (_, b) in itertools.pairwise(pieces))  # the loop ran between
        assert written == [offsets.text()]
        pieces.clear()
        await broker.broker._persist_offsets()
        offsets.commit_offset("G", "T1", 0, 1)  # the same offset again
        await broker.broker._persist_offsets()
        assert pieces == [] and len(written) == 1
        offsets.commit_offset("G", "T1", 0, 2)
        await broker.broker._persist_offsets()
    assert len(written) == 2 and '"T1@G":{0:2' in written[1]


def _spun_on_the_loop(cpu_s: float) -> None:
    """Run Python on the loop's thread for ``cpu_s`` seconds of its CPU (however long a busy host makes
    that in wall time)."""
    end = time.thread_time() + cpu_s
    while time.thread_time() < end:
        pass


async def _stalled(watch: LoopWatch, stall: Callable[[], None]) -> list[float]:
    """Seconds of lateness per cause that ``stall`` (called on the loop right after a probe) added."""
    before, count = list(watch.stalls.seconds), watch.stalls.count
    await _at_work(watch)
    await _probes(watch, 3)
    loop = asyncio.get_running_loop()
    loop.call_soon(stall)
    await _probes(watch, 3)
    assert watch.stalls.count > count
    return [a - b for a, b in zip(watch.stalls.seconds, before, strict=True)]


async def _at_work(watch: LoopWatch) -> None:
    """The probes every probe period again, as on a loop at work (an idle one is probed once a sample
    period: a stall shorter than that, right after a probe, would end before the next one)."""
    while watch.spaced:
        _spun_on_the_loop(2 * IDLE_SHARE * watch.period)
        await _probes(watch, 1)


async def test_an_idle_loop_is_probed_once_a_sample_period_until_it_works() -> None:
    """A loop that did little but probe for ``idle_after`` seconds wakes once a sample period, not every
    probe period; the first probe that finds work brings the probe period back, next probe included."""
    watch = LoopWatch(idle_after=0.1)
    loop = asyncio.get_running_loop()
    watch.start()
    try:
        assert not watch.spaced
        for _ in range(300):  # idle: one sleep at a time, long enough to leave the loop's CPU to the probes
            if watch.spaced:
                break
            await asyncio.sleep(0.1)
        assert watch.spaced, "an idle loop kept its probes a probe period apart"
        # a busy host's lag can bring the probe period back for a while (a probe finds the loop late): a
        # second of it is measured again, up to a few times; never spaced, each second has ~50
        for _ in range(5):
            before = watch.probes
            await asyncio.sleep(1.0)
            if watch.probes - before <= 1.0 / watch.period + 2:
                break
        assert watch.probes - before <= 1.0 / watch.period + 2  # 50 a second before
        await _spaced(watch)
        _spun_on_the_loop(2 * IDLE_SHARE * watch.period)
        await _probes(watch, 1)
        assert not watch.spaced
        assert watch._handle is not None and watch._handle.when() - loop.time() <= watch.probe
        # and the stall classification sees a short stall again, as on a loop that works
        split = await _stalled(watch, lambda: _spun_on_the_loop(0.05))
        assert sum(split) > 0
    finally:
        watch.stop()


async def _spaced(watch: LoopWatch) -> None:
    for _ in range(300):
        if watch.spaced:
            return
        await asyncio.sleep(0.1)
    raise AssertionError("the idle loop's probes did not stay spaced")


async def _probes(watch: LoopWatch, n: int) -> None:
    target = watch.probes + n
    while watch.probes < target:
        await asyncio.sleep(watch.probe / 4)


async def test_a_callback_that_spins_is_a_stall_that_ran() -> None:
    watch = LoopWatch()
    watch.start()
    try:
        spun = 0.1
        split = dict(zip(CAUSES, await _stalled(watch, lambda: _spun_on_the_loop(spun)), strict=True))
    finally:
        watch.stop()
    # the loop's own CPU: counted as ran whatever the host's load made of its wall time (a wait for a core
    # is split off as "core"; the window reaches back to the probe before, at most 20 ms)
    assert split["ran"] >= 0.6 * spun, split
    assert split["other"] < split["ran"], split


async def test_a_thread_holding_the_gil_is_a_stall_the_loop_did_not_run() -> None:
    watch = LoopWatch()
    held: list[float] = []
    running = threading.Event()

    def hold() -> None:  # one C call: the GIL stays with this thread until it returns
        cpu = time.thread_time()
        running.set()
        sum(range(30_000_000))
        held.append(time.thread_time() - cpu)

    def start_holder() -> None:
        # the stall is the loop's from here: on a busy host the new thread may wait for a core until after
        # the probes that measure it (the whole hold then fell outside them: "other" 0)
        threading.Thread(target=hold).start()
        running.wait()

    watch.start()
    try:
        split = dict(zip(CAUSES, await _stalled(watch, start_holder), strict=True))
        while not held:
            await asyncio.sleep(0.01)
    finally:
        watch.stop()
    assert held[0] > 0.02, f"the holder's call took {held[0]}s of CPU: too short to stall the loop"
    # the loop's thread slept on the GIL (neither on a core nor waiting for one) for as long as the holder
    # ran, at least
    assert split["other"] >= 0.5 * held[0], (split, held)
    assert split["ran"] < 0.25 * held[0], (split, held)


def test_a_stall_s_lateness_is_split_between_its_causes() -> None:
    # running and waiting first, scaled to the lateness when the window held more of them
    assert classify(0.01, 0.015, 0.005, 0.0, 0.0, 0.0) == pytest.approx((0.0075, 0.0025, 0, 0, 0))
    # steal covers what they leave; the loop thread's collections are of its running, other threads' of
    # what is left; the rest is "other"
    assert classify(0.02, 0.004, 0.002, 0.01, 0.001, 0.0) == pytest.approx((0.003, 0.002, 0.01, 0.001, 0.004))
    assert classify(0.02, 0.0, 0.0, 0.0, 0.0, 0.005) == pytest.approx((0, 0, 0, 0.005, 0.015))
    # less than the usual rate: nothing of it counted
    assert classify(0.01, -0.002, -0.001, 0.0, 0.0, 0.0) == pytest.approx((0, 0, 0, 0, 0.01))


async def test_the_watchdog_names_what_ran_while_the_loop_was_overdue() -> None:
    watch = LoopWatch(stack_after=0.005)
    watch.start()
    try:
        await _stalled(watch, lambda: _spun_on_the_loop(0.1))
        stacks = watch.runtime_info()["loopStallStacks"]
    finally:
        watch.stop()
    assert watch.stack_watch is not None and watch.stack_watch._thread is None  # stopped with the watch
    assert "_spun_on_the_loop (test_loopwatch.py:" in stacks, stacks


async def test_the_watchdog_is_off_by_default(broker: BrokerHandle) -> None:
    watch = broker.broker.loop_watch
    assert watch.stack_watch is None and watch.runtime_info()["loopStallStacks"] == ""
    assert not any(t.name == "loop-stack-watch" for t in threading.enumerate())


def test_loop_stack_millis_is_not_negative() -> None:
    with pytest.raises(ConfigError, match="loopStackMillis"):
        BrokerConfig(loop_stack_millis=-1)


@pytest.mark.slow
async def test_stalls_are_in_the_metrics_and_the_runtime_info_by_cause(broker: BrokerHandle) -> None:
    b = broker.broker
    await _stalled(b.loop_watch, lambda: _spun_on_the_loop(0.05))
    assert b.metrics_port is not None
    text = await asyncio.to_thread(_scrape, b.metrics_port)

    def by_cause(c: str) -> str:  # the exposition sorts the labels
        return f'broker="broker-a",cause="{c}",cluster="DefaultCluster"'

    ran = _value(text, "rocketmq_broker_loop_stall_seconds_total", by_cause("ran"))
    counted = sum(_value(text, "rocketmq_broker_loop_stalls_total", by_cause(c)) for c in CAUSES)
    info = b.runtime_info()
    assert int(info["loopStalls"]) >= counted >= 1
    assert float(info["loopStallRan"]) >= ran * 1000 - 0.01 and ran > 0
    assert all(float(info[k]) >= 0 for k in STALL_KEYS)
    # the last stalls, each with its end (ms since the epoch), lateness and split (ms)
    last = info["loopStallRecent"].split(";")[-1].split()
    end, late, split = float(last[0]), float(last[1]), [float(v) for v in last[2].split("/")]
    assert abs(end / 1000 - time.time()) < 60 and late >= 2 and len(split) == len(CAUSES)
    assert sum(split) == pytest.approx(late, abs=0.1 * len(CAUSES))
