"""Queues a group never committed on, in every command that counts its lag: ``group list --progress``,
``top``'s groups, ``check lag`` and the reads behind them agree with ``group progress`` (a lag counted from
where the broker starts a consumer, else unknown and said so), and one broker failing those reads leaves
its figures unknown with a warning naming it instead of failing the command.

A broker is stood in for by an :class:`~mqctl.admin.client.Admin` whose answers are replaced: each
queue's case (committed, never committed on an old queue, on a young one, empty) is set exactly."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any, cast

import pytest

from daemon.broker.bodies import ConsumerConnection, ConsumeStats, MessageQueue, OffsetWrapper, TopicOffset
from daemon.remoting.codes import RequestCode
from daemon.remoting.errors import RemotingTimeoutError
from mqctl.admin.client import Admin
from mqctl.services import checks, fanout, groups, offsets, topics
from mqctl.services.checks import State
from mqctl.services.fanout import collecting
from store import SubscriptionGroupConfig

ADDR = "127.0.0.1:2"
TOPIC = "Old"
GROUP = "NewGroup"
#: queue id -> (max offset, ConsumeStats' consumer offset, committed?, QUERY_CONSUMER_OFFSET's answer)
QUEUES = {
    0: (1000, 990, True, 990),  # committed: 10 behind
    1: (500, 0, False, None),  # never committed on an old queue: where a consumer starts is unknown
    2: (7, 0, False, 0),  # never committed on a young queue: the broker starts a consumer at 0
    3: (0, 0, False, 0),  # empty
}
#: What group progress counts: 10 + 7 (+ 0), queue 1 left out.
KNOWN_LAG, UNCOUNTED = 17, 1


def timed_out(code: int) -> RemotingTimeoutError:
    return RemotingTimeoutError(ADDR, 0.5, code)


@pytest.fixture
async def admin(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Admin]:
    """An Admin whose broker ``ADDR`` answers as :data:`QUEUES` says (no NameServer: failures are named
    by address only)."""
    admin = Admin(["127.0.0.1:1"], timeout=0.5)

    async def consume_stats(addr: str, group: str, topic: str | None = None) -> ConsumeStats:
        table = {
            MessageQueue(TOPIC, "broker-a", q): OffsetWrapper(end, at) for q, (end, at, *_) in QUEUES.items()
        }
        return ConsumeStats(table if group == GROUP else {}, 1.5)

    async def consumer_connections(addr: str, group: str) -> None:
        return None

    async def all_consumer_offsets(addr: str) -> dict[tuple[str, str, int], int]:
        return {(GROUP, TOPIC, q): at for q, (_, at, committed, _) in QUEUES.items() if committed}

    async def consumer_offset(addr: str, group: str, topic: str, queue_id: int) -> int | None:
        return QUEUES[queue_id][3]

    async def group_configs(addr: str) -> dict[str, SubscriptionGroupConfig]:
        return {GROUP: SubscriptionGroupConfig(GROUP)}

    async def readers(admin: Admin, cluster: str | None = None) -> list[str]:
        return [ADDR]

    async def configs(admin: Admin, cluster: str | None, *, partial: bool = False) -> dict[str, Any]:
        return {ADDR: await group_configs(ADDR)}

    async def queue_offsets(admin: Admin, topic: str, **_: Any) -> list[tuple[str, str, int, TopicOffset]]:
        # queue 1's messages expired but its last: it holds one
        return [
            ("broker-a", ADDR, q, TopicOffset(min_offset=end - 1 if q == 1 else 0, max_offset=end))
            for q, (end, *_) in QUEUES.items()
        ]

    for name, fake in [
        ("consume_stats", consume_stats),
        ("consumer_connections", consumer_connections),
        ("all_consumer_offsets", all_consumer_offsets),
        ("consumer_offset", consumer_offset),
        ("group_configs", group_configs),
    ]:
        monkeypatch.setattr(admin, name, fake)
    monkeypatch.setattr(groups, "readers", readers)
    monkeypatch.setattr(groups, "_configs", configs)
    monkeypatch.setattr(topics, "queue_offsets", queue_offsets)
    try:
        yield admin
    finally:
        await admin.client.close()


def fail(monkeypatch: pytest.MonkeyPatch, admin: Admin, name: str, code: int) -> list[object]:
    """Make ``admin.<name>`` time out, as a broker that stopped answering does; returns the calls made."""
    calls: list[object] = []

    async def silent(*args: Any) -> Any:
        calls.append(args)
        raise timed_out(code)

    monkeypatch.setattr(admin, name, silent)
    return calls


# ------------------------------------------------------------------------- the lag every command counts


async def test_group_list_progress_counts_as_group_progress_and_says_what_it_left_out(admin: Admin) -> None:
    """A queue the group never committed on counted its whole length from offset 0 (ConsumeStats' 0): a
    new group on an old topic was the topic's length behind in ``group list --progress``."""
    per_queue = await groups.progress(admin, GROUP, topic=None, lag_over=None)
    assert [(q.queue_id, q.lag) for q in per_queue] == [(0, 10), (1, None), (2, 7), (3, 0)]
    listed = await groups.list_groups(admin, cluster=None, system=False, progress=True)
    [row] = listed
    assert row["lag"] == KNOWN_LAG  # (the queue never committed on counted 500 more)
    assert row["uncounted_queues"] == UNCOUNTED
    assert listed.footer is not None and "1 queue never committed on (a consumer" in listed.footer, (
        listed.footer
    )


async def test_an_empty_queue_never_committed_on_costs_no_query_of_its_start(
    admin: Admin, monkeypatch: pytest.MonkeyPatch
) -> None:
    """group progress (group show, check lag) asked QUERY_CONSUMER_OFFSET of every queue the group never
    committed on, an empty one too, whose lag is 0 wherever a consumer starts; its offset still reads as
    never committed (the broker's offset table says so)."""
    asked: list[int] = []
    start = admin.consumer_offset

    async def counted(addr: str, group: str, topic: str, queue_id: int) -> int | None:
        asked.append(queue_id)
        return await start(addr, group, topic, queue_id)

    monkeypatch.setattr(admin, "consumer_offset", counted)
    assert await by_queue(admin) == {0: (990, 10), 1: (None, None), 2: (None, 7), 3: (None, 0)}
    assert sorted(asked) == [1, 2], asked
    asked.clear()
    await checks.lag(admin, GROUP, topic=None, warn=1000, crit=10000)
    assert sorted(asked) == [1, 2], asked


async def test_top_groups_count_as_group_progress(admin: Admin, monkeypatch: pytest.MonkeyPatch) -> None:
    from mqctl.top import format as fmt
    from mqctl.top.live import LiveSource

    source = LiveSource(["127.0.0.1:1"], timeout=0.5)
    try:
        monkeypatch.setattr(source, "admin", admin)

        async def no_time(*_: Any) -> None:  # (the oldest message's time: not what is tested)
            return None

        monkeypatch.setattr(source, "_earliest_time", no_time)
        [row] = await source._groups(cast(Any, [SimpleNamespace(view=SimpleNamespace(addr=ADDR))]), 0.0)
    finally:
        await source.http.aclose()
    assert (row.lag, row.uncounted) == (KNOWN_LAG, UNCOUNTED)
    assert fmt.group_cells(row)[1] == f"{KNOWN_LAG} +{UNCOUNTED}?"


async def test_top_keeps_the_starts_a_while_and_asks_within_its_limit(
    admin: Admin, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Each refresh (2 s) asked every master's offset table and each never-committed queue's start, beside
    top's concurrency limit; now they go through it and are kept a minute; a broker that fails them is
    logged, where top's other failures go, and asked again on the next refresh."""
    from mqctl.top.live import STARTS_TTL, LiveSource

    source = LiveSource(["127.0.0.1:1"], timeout=0.5)
    source._limit = asyncio.Semaphore(1)  # held while a request runs through the limit
    asked: list[tuple[str, bool]] = []
    table, start = admin.all_consumer_offsets, admin.consumer_offset

    async def counted_table(addr: str) -> Any:
        asked.append(("table", source._limit.locked()))
        return await table(addr)

    async def counted_start(*args: Any) -> Any:
        asked.append(("start", source._limit.locked()))
        return await start(*args)

    monkeypatch.setattr(admin, "all_consumer_offsets", counted_table)
    monkeypatch.setattr(admin, "consumer_offset", counted_start)
    masters = cast(Any, [SimpleNamespace(view=SimpleNamespace(addr=ADDR))])

    async def no_time(*_: Any) -> None:
        return None

    try:
        monkeypatch.setattr(source, "admin", admin)
        monkeypatch.setattr(source, "_earliest_time", no_time)
        rows = [await source._groups(masters, now) for now in (0.0, 2.0, 4.0)]
        assert asked == [("table", True), ("start", True), ("start", True)], asked  # queues 1 and 2, once
        assert all((row.lag, row.uncounted) == (KNOWN_LAG, UNCOUNTED) for [row] in rows)
        await source._groups(masters, STARTS_TTL + 1)
        assert len(asked) == 6  # kept a minute, then read again
        asked.clear()
        fail(monkeypatch, admin, "all_consumer_offsets", RequestCode.GET_ALL_CONSUMER_OFFSET)
        with caplog.at_level(logging.INFO, logger="mqctl.top.live"):
            [row] = await source._groups(masters, 3 * STARTS_TTL)
            [row] = await source._groups(masters, 3 * STARTS_TTL + 2)
        assert (row.lag, row.uncounted) == (KNOWN_LAG, UNCOUNTED)  # (queue 2's start still answered)
        logged = [r.getMessage() for r in caplog.records if ADDR in r.getMessage()]
        assert len(logged) == 2 and "timed out" in logged[0], logged  # not kept: asked and logged again
    finally:
        await source.http.aclose()


async def test_a_group_of_only_uncounted_queues_has_no_lag_to_show(admin: Admin) -> None:
    lags = await groups.queue_lags(admin, [(ADDR, GROUP, await admin.consume_stats(ADDR, GROUP))])
    only = [lag for (_, _, _, q), lag in lags.items() if q == 1]
    assert groups.LagSum.of(only) == groups.LagSum(None, 1)
    assert groups.LagSum.of([]) == groups.LagSum(0, 0)  # nothing to count is no lag, not an unknown one


# ------------------------------------------------------------------------------------------ check lag


async def test_check_lag_warns_of_uncounted_queues_holding_messages(admin: Admin) -> None:
    """They were left out of the lag and counted in the summary only: OK, and nothing to graph."""
    verdict = await checks.lag(admin, GROUP, topic=None, warn=1000, crit=10000)
    assert verdict.state is State.WARNING, verdict.line()
    assert f"lag {KNOWN_LAG}" in verdict.summary and "1 of them holding messages" in verdict.summary
    assert "uncounted_queues=1;;;0 uncounted_holding=1;0;;0" in verdict.line(), verdict.line()


async def test_check_lag_is_ok_when_the_uncounted_queues_hold_nothing(
    admin: Admin, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def expired(admin: Admin, topic: str, **_: Any) -> list[tuple[str, str, int, TopicOffset]]:
        return [("broker-a", ADDR, q, TopicOffset(end, end)) for q, (end, *_) in QUEUES.items()]

    monkeypatch.setattr(topics, "queue_offsets", expired)
    verdict = await checks.lag(admin, GROUP, topic=None, warn=1000, crit=10000)
    assert verdict.state is State.OK, verdict.line()
    assert "never committed on, not counted" in verdict.summary
    assert "uncounted_queues=1;;;0 uncounted_holding=0;0;;0" in verdict.line(), verdict.line()


# ------------------------------------------------------------------ a broker failing the second read


async def by_queue(admin: Admin) -> dict[int, tuple[int | None, int | None]]:
    rows = await groups.progress(admin, GROUP, topic=None, lag_over=None)
    return {q.queue_id: (q.consumer_offset, q.lag) for q in rows}


async def test_an_unread_offset_table_leaves_the_zeros_unknown_not_the_command_failed(
    admin: Admin, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GET_ALL_CONSUMER_OFFSET timing out on the only broker raised NothingReadError out of group
    progress (and offset show, offset reset), whose ConsumeStats had been read; with more brokers its 0s
    were kept as committed ones. Now its 0s are unknown offsets, their lag where the broker starts a
    consumer (QUERY_CONSUMER_OFFSET, still answered), and one warning names the broker."""
    fail(monkeypatch, admin, "all_consumer_offsets", RequestCode.GET_ALL_CONSUMER_OFFSET)
    with collecting() as failed:
        found = await by_queue(admin)
    assert found == {0: (990, 10), 1: (None, None), 2: (None, 7), 3: (None, 0)}
    assert [(f.broker, f.reason) for f in failed] == [(ADDR, "timed out")]


async def test_an_unanswered_start_leaves_its_lag_unknown_not_the_command_failed(
    admin: Admin, monkeypatch: pytest.MonkeyPatch
) -> None:
    """QUERY_CONSUMER_OFFSET timing out raised out of a gather without return_exceptions."""
    asked = fail(monkeypatch, admin, "consumer_offset", RequestCode.QUERY_CONSUMER_OFFSET)
    with collecting() as failed:
        found = await by_queue(admin)
        assert len(asked) < 3  # a broker that did not answer is not asked about its every queue in turn
        listed = await groups.list_groups(admin, cluster=None, system=False, progress=True)
    assert found == {0: (990, 10), 1: (None, None), 2: (None, None), 3: (None, 0)}
    [row] = listed
    assert (row["lag"], row["uncounted_queues"]) == (10, 2)  # the empty queue is not asked about
    assert [(f.broker, f.reason) for f in failed] == [(ADDR, "timed out")]  # one line per broker


async def test_offset_show_degrades_an_unread_table_to_unknown_offsets(
    admin: Admin, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def queue_offsets(admin: Admin, topic: str, **_: Any) -> list[tuple[str, str, int, TopicOffset]]:
        return [("broker-a", ADDR, q, TopicOffset(0, end)) for q, (end, *_) in QUEUES.items()]

    monkeypatch.setattr(offsets, "queue_offsets", queue_offsets)
    fail(monkeypatch, admin, "all_consumer_offsets", RequestCode.GET_ALL_CONSUMER_OFFSET)
    with collecting() as failed:
        rows = await offsets.show(admin, GROUP, TOPIC)
    assert [(r["consumer_offset"], r["lag"]) for r in rows] == [(990, 10), (None, None), (None, 7), (None, 0)]
    assert [f.broker for f in failed] == [ADDR]


async def test_queues_of_a_broker_not_read_are_unknown_not_never_committed_on(
    admin: Admin, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the broker's offset table could not be read, check lag and group list --progress said its
    queues were never committed on, which nobody knew."""

    async def names(admin: Admin) -> dict[str, str]:
        return {ADDR: "broker-a"}

    monkeypatch.setattr(fanout, "broker_names", names)
    fail(monkeypatch, admin, "all_consumer_offsets", RequestCode.GET_ALL_CONSUMER_OFFSET)
    with collecting():
        verdict = await checks.lag(admin, GROUP, topic=None, warn=1000, crit=10000)
        listed = await groups.list_groups(admin, cluster=None, system=False, progress=True)
    assert "1 queue unknown (a broker's offsets unread), not counted" in verdict.summary, verdict.summary
    assert "never committed" not in verdict.summary, verdict.summary
    assert listed.footer is not None and "1 queue unknown" in listed.footer, listed.footer
    assert "never committed" not in listed.footer, listed.footer


async def test_check_lag_of_a_broadcasting_group_is_no_warning(
    admin: Admin, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A BROADCASTING group's consumers keep its offsets: every queue reads as never committed on, and
    check lag warned of it for ever."""

    async def broadcasting(addr: str, group: str) -> ConsumerConnection:
        return ConsumerConnection(message_model="BROADCASTING")

    monkeypatch.setattr(admin, "consumer_connections", broadcasting)
    verdict = await checks.lag(admin, GROUP, topic=None, warn=1000, crit=10000)
    assert verdict.state is State.OK, verdict.line()
    assert "uncounted_queues=1;;;0 uncounted_holding=0;0;;0" in verdict.line(), verdict.line()
    assert "BROADCASTING" in verdict.summary, verdict.summary


async def test_group_delete_deletes_though_no_broker_says_its_consumers(
    admin: Admin, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The online count is said, not a reason to refuse: a broker that cannot list the group's consumers
    (a timeout) failed the whole delete before it deleted anything."""
    fail(monkeypatch, admin, "consumer_connections", RequestCode.GET_CONSUMER_CONNECTION_LIST)
    deleted: list[str] = []

    async def delete_group(addr: str, group: str, *, remove_offsets: bool) -> None:
        deleted.append(addr)

    monkeypatch.setattr(admin, "delete_group", delete_group)
    with collecting():
        result = await groups.delete(admin, GROUP, cluster=None, remove_offsets=False)
    assert (result["action"], result["online_consumers"], deleted) == ("deleted", 0, [ADDR])
