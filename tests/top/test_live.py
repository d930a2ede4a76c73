"""``mqctl top`` against our real NameServer and Broker (port 0) with traffic running: the numbers on
screen are the admin API's, and filter, sort, drill-down, pause and connection loss behave."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import Static

from daemon.broker.headers import CreateTopicRequestHeader
from daemon.remoting.codes import RequestCode
from mqctl.admin.client import Admin
from mqctl.services.groups import progress
from mqctl.services.topics import stats
from mqctl.top.app import GroupScreen, Table, TopApp
from mqctl.top.format import group_cells
from mqctl.top.live import LiveSource
from store import FakeClock, SubscriptionGroupConfig
from tests.daemons import LocalCluster, handle, local_cluster
from tests.support.broker import BrokerHandle
from tests.support.waiting import wait_until
from tests.top.data import count_idle_paused_ticks

SIZE = (130, 40)
TOPICS = ("orders", "payments")
GROUP = "billing"


@dataclass
class Traffic:
    """Producers on the daemons' loop, sending until stopped."""

    cluster: LocalCluster
    client: BrokerHandle
    stop_event: asyncio.Event | None = None
    future: Future[int] | None = None

    async def _run(self) -> int:
        self.stop_event = asyncio.Event()
        sent = 0
        while not self.stop_event.is_set():
            await self.client.send(TOPICS[sent % 2], b"x" * 100, queue_id=sent % 4)
            sent += 1
            await asyncio.sleep(0.01)
        return sent

    def start(self) -> None:
        self.future = asyncio.run_coroutine_threadsafe(self._run(), self.cluster.loop.loop)

    def stop(self) -> int:
        assert self.future is not None
        while self.stop_event is None:
            pass
        self.cluster.loop.loop.call_soon_threadsafe(self.stop_event.set)
        return self.future.result(10)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with local_cluster(tmp_path) as running:
        yield running


@pytest.fixture
def traffic(cluster: LocalCluster) -> Iterator[Traffic]:
    client = handle(cluster)
    for topic in TOPICS:  # create both topics before the App looks
        cluster.loop.run(client.send(topic, b"first", queue_id=0))
    cluster.loop.run(client.heartbeat("10.0.0.9@billing-1", GROUP, ["orders"]))
    running = Traffic(cluster, client)
    running.start()
    yield running
    if running.stop_event is not None and not running.stop_event.is_set():
        running.stop()


async def settle(pilot: Pilot[None]) -> None:
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


def rows(table: Table) -> dict[str, list[str]]:
    return {str(r[0]): [str(c) for c in r] for r in (table.get_row_at(i) for i in range(table.row_count))}


@pytest.mark.slow
async def test_numbers_match_the_admin_api(cluster: LocalCluster, traffic: Traffic) -> None:
    source = LiveSource([cluster.namesrv_addr])
    app = TopApp(source, interval=3600, screen="topics")
    async with app.run_test(size=SIZE) as pilot, Admin([cluster.namesrv_addr]) as admin:
        await settle(pilot)
        seen = int(rows(app.query_one("#topics-table", Table))["orders"][3].replace(",", ""))
        await wait_until(
            lambda: sum(cluster.broker.store.get_max_offset("orders", q) for q in range(4)) > seen
        )
        await pilot.press("r")  # more puts since the first look: a rate above 0
        await settle(pilot)
        live = rows(app.query_one("#topics-table", Table))
        assert float(live["orders"][2].removesuffix("/s").replace(",", "")) > 0  # put TPS while sending

        traffic.stop()
        for q in range(4):
            await admin.commit_offset(cluster.broker_addr, GROUP, "orders", q, 1)
        await pilot.press("r")
        await settle(pilot)
        shown = rows(app.query_one("#topics-table", Table))
        for topic in TOPICS:
            expected = await stats(admin, topic)
            assert shown[topic][1] == str(expected["queues"])
            assert shown[topic][3] == f"{expected['max_offset_total']:,}"
            assert shown[topic][4] != "-"  # bytes come from the metrics endpoint

        await pilot.press("3")  # starts the groups view's first fetch, in a worker the press does not await
        await settle(pilot)
        groups = rows(app.query_one("#groups-table", Table))
        queues = await progress(admin, GROUP, topic=None, lag_over=None)
        assert groups[GROUP][1] == f"{sum(q.lag or 0 for q in queues):,}"
        assert groups[GROUP][2] == "1"

        await pilot.press("1")
        await settle(pilot)
        brokers = rows(app.query_one("#brokers-table", Table))
        runtime = await admin.broker_runtime_info(cluster.broker_addr)
        assert (
            brokers["broker-a"][2] == cluster.broker_addr
            and brokers["broker-a"][3] == runtime["brokerVersionDesc"]
        )
        assert brokers["broker-a"][8] == "1"  # CommitLog files: one 4 MiB file so far
        state = " ".join(brokers["broker-a"][9].split())  # (wrapped in its column at this width)
        assert "loop p50/p99/max " in state and "gc max " in state


@pytest.mark.slow
async def test_drill_down_shows_queue_offsets_and_owner(cluster: LocalCluster, traffic: Traffic) -> None:
    traffic.stop()
    async with Admin([cluster.namesrv_addr]) as admin:
        await admin.commit_offset(cluster.broker_addr, GROUP, "orders", 2, 1)
        expected = await progress(admin, GROUP, topic=None, lag_over=None)
    app = TopApp(LiveSource([cluster.namesrv_addr]), interval=3600, screen="groups")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("slash", *GROUP, "enter", "enter")
        await settle(pilot)
        assert isinstance(app.screen, GroupScreen)
        shown = app.screen.query_one("#queues", Table)
        got = [[str(c) for c in shown.get_row_at(i)] for i in range(shown.row_count)]
        assert got == [
            [
                q.topic,
                q.broker_name,
                str(q.queue_id),
                f"{q.max_offset:,}",
                "-" if q.consumer_offset is None else f"{q.consumer_offset:,}",  # never committed on
                "-" if q.lag is None else f"{q.lag:,}",
                q.client_id or "-",
            ]
            for q in expected
        ]
        assert rows(app.screen.query_one("#clients", Table)).keys() == {"10.0.0.9@billing-1"}


@pytest.mark.slow
async def test_filter_sort_and_pause_live(cluster: LocalCluster, traffic: Traffic) -> None:
    source = LiveSource([cluster.namesrv_addr])
    app = TopApp(source, interval=0.5, screen="topics")
    idle_paused_ticks = count_idle_paused_ticks(app)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("slash", *"pay", "enter")
        assert list(rows(app.query_one("#topics-table", Table))) == ["payments"]
        await pilot.press("escape", "s", "s")  # messages, descending: the two busy topics first
        assert set(list(rows(app.query_one("#topics-table", Table)))[:2]) == set(TOPICS)
        await pilot.press("p")
        await settle(pilot)
        assert app.paused  # else the wait below could only time out
        frozen = app.snapshot
        ticked = len(idle_paused_ticks)
        await wait_until(lambda: len(idle_paused_ticks) >= ticked + 2)
        assert app.snapshot is frozen
        await pilot.press("p")
        await wait_until(lambda: app.snapshot is not frozen)  # the next tick refreshes


@pytest.mark.slow
async def test_lost_nameserver_shows_in_status_bar_and_app_lives(cluster: LocalCluster) -> None:
    app = TopApp(LiveSource([cluster.namesrv_addr], timeout=1.0), interval=3600)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert app.error is None and app.snapshot is not None
        cluster.loop.run(cluster.namesrv.stop())
        await pilot.press("r")
        await settle(pilot)
        assert "error: no NameServer answers" in str(app.query_one("#status", Static).render())
        assert app.is_running and app.query_one("#brokers-table", Table).row_count == 1


@pytest.mark.slow
async def test_without_metrics_endpoint_bytes_are_missing(tmp_path: Path) -> None:
    """A broker without /metrics (as RocketMQ 4.9): figures from GET_TOPIC_STATS_INFO, no bytes column; a
    queue consumers still read after a scale-in (-w 1) counts too, though that request leaves it out."""
    with local_cluster(tmp_path, metrics_enable=False) as cluster:
        client = handle(cluster)

        async def topic(write_queues: int) -> None:
            header = CreateTopicRequestHeader("orders", "TBW102", 4, write_queues, 6, "SINGLE_TAG")
            assert (await client.call(RequestCode.UPDATE_AND_CREATE_TOPIC, header.to_ext_fields())).code == 0

        cluster.loop.run(topic(4))
        for i in range(6):
            cluster.loop.run(client.send("orders", b"x", queue_id=i % 3))
        cluster.loop.run(topic(1))
        app = TopApp(LiveSource([cluster.namesrv_addr]), interval=3600, screen="topics")
        async with app.run_test(size=SIZE) as pilot, Admin([cluster.namesrv_addr]) as admin:
            await settle(pilot)
            shown = rows(app.query_one("#topics-table", Table))
            expected = await stats(admin, "orders")
            assert shown["orders"][3] == f"{expected['max_offset_total']:,}" == "6"
            assert shown["orders"][4] == "-"
            assert "not available without the broker metrics endpoint: Bytes" in str(
                app.query_one("#topics-info", Static).render()
            )


@pytest.mark.slow
async def test_store_view_lists_commitlog_files_with_ages(tmp_path: Path) -> None:
    with local_cluster(tmp_path) as cluster:
        client = handle(cluster)
        for _ in range(5):  # 5 MiB into 4 MiB files: two CommitLog files
            cluster.loop.run(client.send("blobs", b"b" * (1024 * 1024), queue_id=0))
        app = TopApp(LiveSource([cluster.namesrv_addr]), interval=3600, screen="store")
        async with app.run_test(size=SIZE) as pilot, Admin([cluster.namesrv_addr]) as admin:
            await admin.commit_offset(cluster.broker_addr, "archiver", "blobs", 0, 1)  # 4 messages behind
            await pilot.press("r")
            await settle(pilot)
            runtime = await admin.broker_runtime_info(cluster.broker_addr)
            table = app.query_one("#store-table", Table)
            files = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
            assert [f[1] for f in files] == [f"{0:020d}", f"{4 * 1024 * 1024:020d}"]
            assert int(runtime["commitLogMaxOffset"]) > 4 * 1024 * 1024
            assert files[0][5].startswith("kept ") and files[1][5] == "active (never deleted)"
            assert files[0][3] != "-" and files[0][4] != "-"  # first and last write known for a full file
            info = str(app.query_one("#store-info", Static).render())
            assert "a clean now deletes 0 files (0 B) (the broker's own plan)" in info
            assert files[0][6] == "archiver 2"  # the broker's plan: the first file holds messages 0..2


@pytest.mark.slow
async def test_unreachable_broker_shows_down_and_the_rest_works(
    cluster: LocalCluster, traffic: Traffic
) -> None:
    """A broker the NameServer still lists but that does not answer (crashed): a DOWN row, no crash."""
    from daemon.remoting.client import RemotingClient
    from tests.support.namesrv import Namesrv

    async def register_ghost() -> RemotingClient:
        registrar = RemotingClient()  # kept open: the NameServer drops a broker whose channel closes
        await Namesrv(cluster.namesrv, registrar).register(
            {"ghost-topic": 4}, broker_name="broker-z", broker_addr="127.0.0.1:1"
        )
        return registrar

    registrar = cluster.loop.run(register_ghost())
    try:
        app = TopApp(LiveSource([cluster.namesrv_addr], timeout=1.0), interval=3600)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            brokers = rows(app.query_one("#brokers-table", Table))
            assert brokers["broker-z"][3] == "DOWN" and brokers["broker-a"][3] == "V4_9_8"
            assert "DOWN: broker-z" in str(app.query_one("#status", Static).render())
            await pilot.press("2")
            await settle(pilot)
            assert "orders" in rows(app.query_one("#topics-table", Table))
    finally:
        cluster.loop.run(registrar.close())


async def test_a_group_that_never_consumed_shows_its_oldest_unconsumed_message(cluster: LocalCluster) -> None:
    """A group at offset 0 with messages waiting had no last consumed message, and top showed '-': its
    oldest unconsumed message is the queue's oldest, whose age it now shows (asked once a minute)."""
    client = handle(cluster)
    for i in range(3):
        assert cluster.loop.run(client.send("orders", f"m{i}".encode(), queue_id=0)).code == 0
    cluster.loop.run(client.client.close())
    stored_ms = cluster.broker.store.get_earliest_message_time("orders", 0)
    clock = FakeClock(stored_ms + 3_600_000)
    source = LiveSource([cluster.namesrv_addr], clock=clock)
    try:
        async with Admin([cluster.namesrv_addr]) as admin:
            for group in ("never", "reading", "idle"):
                await admin.create_group(cluster.broker_addr, SubscriptionGroupConfig(group))
            await admin.commit_offset(cluster.broker_addr, "never", "orders", 0, 0)  # subscribed, unread
            await admin.commit_offset(cluster.broker_addr, "reading", "orders", 0, 1)
        groups = {g.name: g for g in (await source.snapshot(frozenset({"groups"}))).groups or ()}
        assert groups["never"].lag == 3 and groups["never"].oldest_age == 3600.0
        assert groups["reading"].lag == 2 and groups["reading"].oldest_age == 3600.0  # its last read one
        assert group_cells(groups["never"])[4] == "≤1h00m"
        # no offset anywhere (created, never committed, no consumer): not '-' (nothing waiting)
        assert groups["idle"].never_consumed and not groups["never"].never_consumed
        assert (groups["idle"].oldest_age, group_cells(groups["idle"])[4]) == (None, "never consumed")

        asked = len(source._earliest)
        clock.set(stored_ms + 3_610_000)  # a refresh within the minute asks nothing more
        again = {g.name: g for g in (await source.snapshot(frozenset({"groups"}))).groups or ()}
        assert again["never"].oldest_age == 3610.0 and len(source._earliest) == asked == 1
    finally:
        await source.close()


@pytest.mark.slow
async def test_topics_hide_rocketmq_s_own_and_the_groups_topics_unless_system(cluster: LocalCluster) -> None:
    """As ``topic list``: TBW102, SCHEDULE_TOPIC_XXXX, the cluster's and broker's names, %RETRY%/%DLQ%
    topics are hidden and counted under the table; ``--system`` shows them with their kind."""
    client = handle(cluster)
    cluster.loop.run(client.send("orders", b"x", queue_id=0))
    header = CreateTopicRequestHeader("%RETRY%billing", "TBW102", 1, 1, 6, "SINGLE_TAG")
    assert (
        cluster.loop.run(client.call(RequestCode.UPDATE_AND_CREATE_TOPIC, header.to_ext_fields())).code == 0
    )
    app = TopApp(LiveSource([cluster.namesrv_addr]), interval=3600, screen="topics")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert list(rows(app.query_one("#topics-table", Table))) == ["orders"]
        info = str(app.query_one("#topics-info", Static).render())
        assert "hidden: " in info and " system, 1 retry topics (--system shows them)" in info
    source = LiveSource([cluster.namesrv_addr], system=True)
    try:
        snap = await source.snapshot(frozenset({"topics"}))
    finally:
        await source.close()
    kinds = {t.name: t.kind for t in snap.topics or ()}
    assert kinds["orders"] == "normal" and kinds["%RETRY%billing"] == "retry"
    assert kinds["TBW102"] == kinds["SCHEDULE_TOPIC_XXXX"] == kinds["broker-a"] == "system"
    assert snap.hidden_topics == ()
