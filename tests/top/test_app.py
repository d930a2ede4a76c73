"""The App over fixed data (in-memory source, frozen clock): keys, filter, sort, drill-down, pause,
failures and the stale marker."""

from __future__ import annotations

import dataclasses
import io

import pytest
from rich.console import Console
from rich.text import Text
from textual.pilot import Pilot
from textual.widgets import Static

from mqctl.errors import ConnectError
from mqctl.top.app import HELP, GroupScreen, HelpScreen, Table, TopApp
from mqctl.top.memory import MemorySource
from tests.support.waiting import wait_until
from tests.top.data import DETAIL, NOW, SNAPSHOT, count_idle_paused_ticks, fixed_source

SIZE = (120, 36)


async def settle(pilot: Pilot[None]) -> None:
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


def column(app: TopApp, table_id: str, index: int = 0) -> list[str]:
    table = app.query_one(table_id, Table)
    return [str(table.get_row_at(i)[index]) for i in range(table.row_count)]


def text_of(app: TopApp, widget_id: str) -> str:
    return str(app.query_one(widget_id, Static).render())


@pytest.mark.slow
async def test_switch_views_with_numbers_and_tab() -> None:
    source, clock = fixed_source()
    app = TopApp(source, interval=3600, clock=clock)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert column(app, "#brokers-table") == ["broker-a", "broker-a", "broker-b", "broker-c"]
        await pilot.press("2")
        assert app.view == "topics" and len(column(app, "#topics-table")) == 7
        await pilot.press("tab", "tab")
        assert app.view == "store"
        await pilot.press("tab")
        assert app.view == "overview"


@pytest.mark.slow
async def test_filter_then_escape_clears_it() -> None:
    source, clock = fixed_source()
    app = TopApp(source, interval=3600, clock=clock, screen="topics")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("slash", "o", "r", "d", "enter")
        assert column(app, "#topics-table") == ["orders"]
        assert "1 of 7 topics matching 'ord'" in text_of(app, "#topics-info")
        await pilot.press("escape")
        assert len(column(app, "#topics-table")) == 7


@pytest.mark.slow
async def test_sort_cycles_orders() -> None:
    source, clock = fixed_source()
    app = TopApp(source, interval=3600, clock=clock, screen="topics")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("s")  # put tps, descending
        assert column(app, "#topics-table")[:3] == ["orders", "payments", "audit-log"]
        await pilot.press("s")  # messages, descending
        assert column(app, "#topics-table")[0] == "audit-log"
        await pilot.press("3")
        assert column(app, "#groups-table") == ["analytics", "billing", "search-indexer", "shipping"]


@pytest.mark.slow
async def test_enter_drills_into_a_group_and_escape_returns() -> None:
    source, clock = fixed_source()
    app = TopApp(source, interval=3600, clock=clock, screen="groups")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("down", "enter")  # second row by lag: billing
        await settle(pilot)
        assert isinstance(app.screen, GroupScreen) and app.screen.group == "billing"
        queues = app.screen.query_one("#queues", Table)
        assert queues.row_count == 8
        assert app.screen.query_one("#clients", Table).row_count == 3
        assert f"lag {sum(q.lag for q in DETAIL.queues):,}" in str(
            app.screen.query_one("#group-title", Static).render()
        )
        await pilot.press("escape")
        assert not isinstance(app.screen, GroupScreen) and app.view == "groups"


@pytest.mark.slow
async def test_the_group_title_counts_the_queues_its_lag_leaves_out() -> None:
    """The title summed the known lags alone, as if the never-committed queues were none behind."""
    source, clock = fixed_source()
    unknown = {0, 3}
    queues = tuple(dataclasses.replace(q, lag=None) if q.queue_id in unknown else q for q in DETAIL.queues)
    source = MemorySource(SNAPSHOT, clock, details={"billing": dataclasses.replace(DETAIL, queues=queues)})
    app = TopApp(source, interval=3600, clock=clock, screen="groups")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("down", "enter")
        await settle(pilot)
        known = sum(q.lag or 0 for q in queues)
        assert f"lag {known:,} +2?," in str(app.screen.query_one("#group-title", Static).render())


@pytest.mark.slow
async def test_pause_stops_refreshes_and_r_refreshes_once() -> None:
    source, clock = fixed_source()
    app = TopApp(source, interval=0.05, clock=clock)
    idle_paused_ticks = count_idle_paused_ticks(app)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("p")
        await settle(pilot)
        assert app.paused  # else the wait below could only time out
        paused_at = source.calls
        await wait_until(lambda: len(idle_paused_ticks) >= 3)
        assert source.calls == paused_at
        assert "PAUSED" in text_of(app, "#banner")
        await pilot.press("r")
        await settle(pilot)
        assert source.calls == paused_at + 1
        await pilot.press("p")
        await wait_until(lambda: source.calls > paused_at + 1)  # the next tick refreshes


@pytest.mark.slow
async def test_failure_keeps_data_marked_stale_and_recovers() -> None:
    source, clock = fixed_source()
    app = TopApp(source, interval=2, clock=clock)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        source.failure = ConnectError("no NameServer answers: 10.0.0.1:9876 (refused)")
        clock.set(int((NOW + 5) * 1000))
        await pilot.press("r")
        await settle(pilot)
        app.render_chrome()
        assert "error: no NameServer answers" in text_of(app, "#status")
        assert "STALE: data is 5s old" in text_of(app, "#banner")
        assert app.query_one("#views").has_class("stale")
        assert column(app, "#brokers-table")[0] == "broker-a"  # old rows stay, marked
        source.failure = None
        await pilot.press("r")
        await settle(pilot)
        assert "error" not in text_of(app, "#status")
        assert not app.query_one("#views").has_class("stale")


@pytest.mark.slow
async def test_help_opens_and_closes() -> None:
    source, clock = fixed_source()
    app = TopApp(source, interval=3600, clock=clock)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        # every line fits the box: one 75 columns long wrapped 'endpoint' onto a line of its own
        box = app.screen.query_one(Static)
        assert box.content_size.height == len(Text.from_markup(HELP).plain.splitlines())
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)


@pytest.mark.slow
async def test_timers_due_during_shutdown_do_not_crash() -> None:
    """A timer that fires while the app shuts down (its screens already gone, its timers not yet stopped)
    must not query the removed widgets: under load this raced as ``NoMatches '#tabs'``."""
    source, clock = fixed_source()
    app = TopApp(source, interval=3600, clock=clock)
    fired: list[str] = []
    close_all = app._close_all

    async def close_all_then_fire_timers() -> None:
        await close_all()
        for timer in list(app._timers):  # exactly what a due tick does in this window
            await timer._tick(next_timer=0.0, count=1)
            fired.append(timer.name)

    app._close_all = close_all_then_fire_timers  # type: ignore[method-assign]
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
    assert len(fired) == 2  # both the refresh tick and the chrome tick ran after the screens went
    assert app._exception is None


async def test_the_overview_counts_as_down_only_brokers_that_are_down() -> None:
    """A broker that refused this session (ACL) or timed out is up: the overview line said '2 down' for one
    dead broker and one refusing, while the table and the operations guide say 'ACL denied', not DOWN."""
    import dataclasses

    from tests.top.data import BROKERS, SNAPSHOT

    refusing = dataclasses.replace(BROKERS[2], version=None, error="ACL denied", unread_as="ACL denied")
    overview = dataclasses.replace(SNAPSHOT.overview, brokers=(*BROKERS[:2], refusing, BROKERS[3]))
    source, clock = fixed_source()
    source.data = dataclasses.replace(SNAPSHOT, overview=overview)
    app = TopApp(source, interval=3600, clock=clock)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        info = text_of(app, "#overview-info")
    assert "1 down" in info and "1 not readable" in info, info


def screen_text(app: TopApp) -> list[str]:
    """The screen as a terminal shows it, line by line."""
    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), record=True, legacy_windows=False)
    console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    return console.export_text().splitlines()


def tables(app: TopApp) -> list[Table]:
    return [t for t in app.screen.query(Table) if t.display and t.region.width]


@pytest.mark.slow
async def test_every_screen_at_80_columns_cuts_nothing_mid_number() -> None:
    """At 80x24 a table shows the columns that fit whole (a left-out one is counted on the info line) and
    cuts only a text column, after a word; info lines break between phrases, the tab and status rows
    stay one line each."""
    source, clock = fixed_source()
    app = TopApp(source, interval=3600, clock=clock, target="NameServer 10.0.0.1:9876;10.0.0.2:9876")
    async with app.run_test(size=(80, 24)) as pilot:
        for key in ("1", "2", "3", "4", "3", "enter"):
            await pilot.press(key)
            await settle(pilot)
            for table in tables(app):
                widths = sum(c.get_render_width(table) for c in table.columns.values())
                assert widths <= table.size.width, (table.id, widths, table.size.width)
                for i in range(table.row_count):
                    for cell in map(str, table.get_row_at(i)):
                        assert not cell.endswith("…") or not cell[-2].isdigit(), cell
            lines = screen_text(app)
            assert len(lines) == 24 and all(len(line) <= 80 for line in lines)
            if key != "enter":
                assert lines[0].rstrip().endswith("NameServer 10.0.0.1:9876;…")
                assert lines[-1].startswith(" updated ") and lines[-1].rstrip().endswith("q quit")
        await pilot.press("escape", "1")
        await settle(pilot)
        text = "\n".join(screen_text(app))
        assert "4 brokers," in text and "1 down" in text and "10.0.0.2:9876 DOWN" in text
        assert "3 columns off screen (widen it)" in text
        await pilot.press("4")
        await settle(pilot)
        text = "\n".join(screen_text(app))
        for phrase in (
            "file size 1.0 GiB;",
            "(offsets 0..2,147,483,653),",
            "a clean now deletes 1 file (1.0 GiB)",
        ):
            assert phrase in text, text


@pytest.mark.slow
async def test_names_a_server_sends_are_shown_as_data_never_as_markup_or_escapes() -> None:
    """A DataTable reads a str cell as Rich markup: a topic a server named ``[/x]`` ended mqctl top with
    a MarkupError, ``[link=...]`` made a hyperlink's escape sequence, and an ESC in a name reached the
    terminal. Every cell is now its value as text, control characters escaped."""
    from dataclasses import replace

    from tests.top.data import SNAPSHOT, TOPICS

    hostile = ("[/x]", "[link=https://example.invalid]click[/link]", "\x1b]0;title\x07\x1b[2Jred")
    source, clock = fixed_source()
    source.data = replace(SNAPSHOT, topics=(*TOPICS, *(replace(TOPICS[0], name=n) for n in hostile)))
    app = TopApp(source, interval=3600, clock=clock, screen="topics")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        table = app.query_one("#topics-table", Table)
        cells = [table.get_row_at(i)[0] for i in range(table.row_count)]
        shown = {cell.plain: cell for cell in cells if isinstance(cell, Text)}
        assert len(shown) == len(cells)  # every cell a Text, none a str read as markup
        assert "[/x]" in shown and "[link=https://example.invalid]click[/link]" in shown
        assert "\\x1b]0;title\\x07\\x1b[2Jred" in shown
        assert all(not cell.spans and "\x1b" not in cell.plain for cell in cells)
        rendered = "".join(str(seg.text) for seg in table.render_line(1))  # a row is drawn, no error
        assert "\x1b" not in rendered
