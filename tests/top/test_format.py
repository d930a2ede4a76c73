"""The pure formatting rules of ``mqctl top``: units, watermarks, staleness, filter and sort."""

from __future__ import annotations

import dataclasses

from mqctl.top import format as fmt
from mqctl.top.live import parse_metrics
from mqctl.top.model import BrokerView, CommitLogFile, GroupRow, StoreView, TopicRow


def test_units() -> None:
    assert fmt.human_bytes(None) == "-"
    assert fmt.human_bytes(1023) == "1023 B"
    assert fmt.human_bytes(1536) == "1.5 KiB"
    assert fmt.human_bytes(3 * 1024**3) == "3.0 GiB"
    assert fmt.rate(None) == "-" and fmt.rate(1234.56) == "1,234.6/s"
    assert [fmt.age(s) for s in (5, 185, 7260, 2 * 86400 + 3 * 3600)] == ["5s", "3m05s", "2h01m", "2d03h"]


def test_watermarks_and_disk_bar() -> None:
    assert [fmt.watermark(r) for r in (0.5, 0.75, 0.86, 0.95)] == [
        "ok",
        "clean",
        "force clean",
        "writes blocked",
    ]
    bar = fmt.disk_bar(0.5, 20)
    assert bar.startswith("█" * 10) and bar.count("│") == 3 and len(bar) == 20
    assert fmt.disk_bar(0.95, 20).count("█") == 19


def test_staleness_after_two_intervals() -> None:
    assert fmt.staleness(None, 100.0, 2.0) == "no data yet"
    assert fmt.staleness(96.0, 100.0, 2.0) is None
    assert fmt.staleness(95.0, 100.0, 2.0) == "STALE: data is 5s old"


def test_commitlog_files_span_min_to_max() -> None:
    b = BrokerView("c", "b", 0, "a:1", commitlog_min=2048, commitlog_max=2048 * 3 + 1, file_size=2048)
    assert b.commitlog_files == 3 and b.commitlog_bytes == 2048 * 2 + 1
    assert (
        BrokerView("c", "b", 0, "a:1", commitlog_min=0, commitlog_max=0, file_size=2048).commitlog_files == 0
    )


def test_select_filters_by_name_and_sorts_with_name_tiebreak() -> None:
    rows = [TopicRow("b-orders", 4, 10, 1.0), TopicRow("a-orders", 4, 10, 1.0), TopicRow("pay", 8, 99, 5.0)]
    by_messages = fmt.TOPIC_SORTS[2]
    assert [r.name for r in fmt.select(rows, lambda r: r.name, "", by_messages)] == [
        "pay",
        "a-orders",
        "b-orders",
    ]
    assert [r.name for r in fmt.select(rows, lambda r: r.name, "ORD", by_messages)] == [
        "a-orders",
        "b-orders",
    ]


def test_group_cells_mark_oldest_as_upper_bound() -> None:
    assert fmt.group_cells(GroupRow("g", 1200, 2, 3.5, 65.0)) == ("g", "1,200", "2", "3.5/s", "≤1m05s")
    assert fmt.group_cells(GroupRow("g", 0, 0, 0.0, None))[4] == "-"  # nothing waiting
    assert fmt.group_cells(GroupRow("g", 0, 0, 0.0, None, never_consumed=True))[4] == "never consumed"


def test_store_rows_say_what_a_clean_deletes() -> None:
    files = (
        CommitLogFile(0, 100, first_write=0.0, last_write=1000.0, active=False),
        CommitLogFile(100, 100, first_write=1000.0, last_write=90_000.0, active=False),
        CommitLogFile(200, 40, first_write=90_000.0, last_write=None, active=True),
    )
    view = StoreView("broker-a", 0, 240, 100, file_reserved_hours=1, disk_ratio=0.5, files=files)
    now = 91_000.0
    assert view.deletable(now) == [files[0]]
    verdicts = [row[5] for row in fmt.store_rows(view, now)]
    assert verdicts == ["DELETE on next clean", "kept 43m20s", "active (never deleted)"]
    assert "a clean now deletes 1 file (100 B) (estimated from file ages)" in fmt.store_summary(view, now)


def test_the_brokers_plan_beats_the_estimate() -> None:
    """With the broker's plan, a file goes for the reason it gives (watermark: unexpired too), an expired
    file without a trigger stays, and groups that would lose messages are named."""
    files = (
        CommitLogFile(0, 100, 0.0, 1000.0, active=False, reason=None, unconsumed={"a": 0}),
        CommitLogFile(
            100, 100, 1000.0, 90_500.0, active=False, reason="watermark", unconsumed={"b": 3, "a": 0}
        ),
        CommitLogFile(200, 40, 90_500.0, 90_900.0, active=True, reason=None, unconsumed={}),
    )
    view = StoreView(
        "broker-a", 0, 240, 100, file_reserved_hours=1, disk_ratio=0.88, files=files, planned=True
    )
    now = 91_000.0
    assert view.deletable(now) == [files[1]]
    rows = fmt.store_rows(view, now)
    assert [r[5] for r in rows] == [
        "expired, kept (no trigger)",
        "DELETE on next clean (watermark)",
        "active (never deleted)",
    ]
    assert [r[6] for r in rows] == ["none", "b 3", "none"]
    assert "(the broker's own plan)" in fmt.store_summary(view, now)


def test_parse_metrics_sums_queues_per_topic() -> None:
    text = (
        "# TYPE rocketmq_broker_put_messages counter\n"
        'rocketmq_broker_put_messages_total{cluster="c",broker="b",topic="T"} 7.0\n'
        "# TYPE rocketmq_broker_put_bytes counter\n"
        'rocketmq_broker_put_bytes_total{cluster="c",broker="b",topic="T"} 700.0\n'
        "# TYPE rocketmq_queue_max_offset gauge\n"
        'rocketmq_queue_max_offset{cluster="c",broker="b",topic="T",queue="0"} 3.0\n'
        'rocketmq_queue_max_offset{cluster="c",broker="b",topic="T",queue="1"} 4.0\n'
    )
    scrape = parse_metrics(text)
    assert scrape.puts == {"T": 7} and scrape.put_bytes == {"T": 700} and scrape.max_offsets == {"T": 7}


def test_parse_metrics_skips_samples_no_broker_writes() -> None:
    """A broker's /metrics is its word too: a NaN or infinite counter, or one without its topic label,
    ended mqctl top with a traceback's last line ('cannot convert float NaN to integer')."""
    text = (
        'rocketmq_broker_put_messages_total{topic="T"} NaN\n'
        'rocketmq_broker_put_messages_total{topic="U"} +Inf\n'
        'rocketmq_broker_put_messages_total{cluster="c"} 5.0\n'
        'rocketmq_broker_put_bytes_total{topic="T"} 700.0\n'
    )
    scrape = parse_metrics(text)
    assert scrape.puts == {} and scrape.put_bytes == {"T": 700}


def test_broker_state_carries_loop_lag_of_an_mqctl_broker_only() -> None:
    java = BrokerView("C", "broker-a", 0, "h:1", "V4_9_8", disk_ratio=0.1, metrics=True)
    assert fmt.broker_cells(java)[-1] == fmt.watermark(0.1)
    ours = BrokerView(
        "C", "broker-a", 0, "h:1", "V4_9_8", disk_ratio=0.1, metrics=True,
        loop_lag_p50_ms=0.12, loop_lag_p99_ms=0.5, loop_lag_max_ms=201.0, gc_pause_max_ms=3.25,
    )  # fmt: skip
    assert fmt.broker_cells(ours)[-1].endswith(", loop p50/p99/max 0.12/0.5/201ms, gc max 3.25ms")
    waiting = dataclasses.replace(ours, timer_pending=1200)
    assert fmt.broker_cells(waiting)[-1].endswith("gc max 3.25ms, 1,200 timers waiting")
    split = {"ran": 31.2, "core": 402.0, "steal": 0.0, "gc": 4.4, "other": 12.0}
    stalled = dataclasses.replace(ours, loop_stalls=12, loop_stall_ms=split)
    assert fmt.broker_cells(stalled)[-1].endswith(
        "gc max 3.25ms, 12 stalls ran/core/steal/gc/other 31/402/0/4/12ms"
    )


def test_broker_state_shows_pop_in_flight_when_any() -> None:
    idle = BrokerView("C", "broker-a", 0, "h:1", "V4_9_8", disk_ratio=0.1, metrics=True, pop_in_flight=0)
    assert "pop" not in fmt.broker_cells(idle)[-1]
    lent = BrokerView("C", "broker-a", 0, "h:1", "V4_9_8", disk_ratio=0.1, metrics=True, pop_in_flight=12)
    assert fmt.broker_cells(lent)[-1].endswith(", pop in flight 12")


def test_a_dledger_member_shows_its_raft_role_and_term() -> None:
    leader = BrokerView("C", "broker-a", 0, "h:1", "V4_9_8", raft="LEADER t3")
    assert fmt.broker_cells(leader)[1] == "master [LEADER t3]"
    follower = BrokerView("C", "broker-a", 2, "h:2", "V4_9_8", raft="FOLLOWER t3")
    assert fmt.broker_cells(follower)[1] == "slave2 [FOLLOWER t3]"


def test_a_lag_of_only_uncounted_queues_says_how_many() -> None:
    """``-`` alone read as a group no master answered for; ``- +3?``: three queues, each of unknown lag."""
    assert fmt.lag_cell(GroupRow("g", None, 0, 0.0, None, uncounted=3)) == "- +3?"
    assert fmt.lag_cell(GroupRow("g", None, 0, 0.0, None)) == "-"
    assert fmt.lag_cell(GroupRow("g", 1_204, 0, 0.0, None, uncounted=3)) == "1,204 +3?"
