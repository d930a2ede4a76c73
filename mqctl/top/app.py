"""The Textual App of ``mqctl top``: four views over the latest ``Snapshot``, refreshed by a worker.

The App fetches nothing itself: a ``TopSource`` hands it snapshots and the pure functions of
``mqctl.top.format`` turn them into cells. Refreshes never overlap (a tick while one runs is
skipped), a failure keeps the last data on screen marked stale and is retried on the next tick.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from rich.text import Text
from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen, Screen
from textual.widgets import ContentSwitcher, DataTable, Input, Sparkline, Static

from mqctl.errors import translate
from mqctl.output import printable
from mqctl.services.groups import LagSum
from mqctl.services.topics import hidden_note
from mqctl.top import format as fmt
from mqctl.top.model import BrokerView, GroupDetail, Snapshot, TopSource
from store import Clock, SystemClock

log = logging.getLogger(__name__)

#: The tabs, in order: (view name, label).
VIEW_TABS: tuple[tuple[str, str], ...] = (
    ("overview", "Overview"),
    ("topics", "Topics"),
    ("groups", "Groups"),
    ("store", "Store"),
)
#: Refreshes kept for the TPS sparklines.
HISTORY = 60
VIEW_NAMES = tuple(name for name, _ in VIEW_TABS)

HELP = """\
[b]mqctl top[/b] — live view of a RocketMQ cluster

  [b]1-4[/b], [b]Tab[/b]   Overview, Topics, Groups, Store
  [b]/[/b]          filter the rows by name (Enter keeps, Esc cancels)
  [b]s[/b]          next sort order (Topics, Groups)
  [b]p[/b]          pause / resume refreshing
  [b]r[/b]          refresh now
  [b]Enter[/b]      on a group: per-queue offsets and owning clients
  [b]Esc[/b]        back / clear the filter
  [b]?[/b]          this help        [b]q[/b]  quit

Data: the standard admin request codes, plus the broker's /metrics
endpoint when it has one (put bytes per topic need it; RocketMQ 4.9 has
none).
A view whose data is older than two refresh intervals is marked STALE.
Oldest unconsumed (≤) is an upper bound: the age of the last consumed
message on the group's furthest-behind queue (on a queue it never
consumed from a known start: the queue's oldest message); "never
consumed": no broker holds an offset of the group, so its lag is
unknown. Lag "+3?": three queues of unknown lag are left out, of the
lag and of the age: never committed on, where a consumer starts as its
consumeFromWhere says, or unknown, a broker's offsets unread (Enter
lists them as "-").

Press Esc or ? to close."""


def _height(values: Sequence[str]) -> int:
    return max((v.count("\n") + 1 for v in values), default=1)


def _off_screen(table: Table) -> list[str]:
    """The info line's phrase for the columns a narrow screen leaves out of ``table``."""
    return [f"{fmt.plural(table.hidden, 'column')} off screen (widen it)  "] if table.hidden else []


def _cells(values: Sequence[str], right_from: int) -> list[Text]:
    """Numbers right-aligned: every column from ``right_from`` on. Each cell a ``Text`` of its value with
    control characters escaped: a DataTable reads a ``str`` cell as Rich markup, so a topic a server named
    ``[link=...]`` wrote a hyperlink's escape sequence to the terminal, ``[/x]`` ended mqctl top with a
    MarkupError, and an ESC in a name reached the terminal as it was. A cell's newlines stay: a wrapped
    cell's lines are counted into its row's height."""
    return [Text(printable(v), justify="right" if i >= right_from else "left") for i, v in enumerate(values)]


def _shown(text: str) -> str:
    """What a server sent, as a terminal may show it (see :func:`mqctl.output.printable`)."""
    return printable(text, newlines=False)


class Table(DataTable[Any]):
    """A DataTable that is synced to rows by key: unchanged rows cost nothing, the cursor stays on its row.

    It shows the columns that fit its width whole (:func:`~mqctl.top.format.fit_columns`): a column the
    edge would cut mid-number is left out (``hidden`` counts them), a text column from ``cut_from`` on is
    cut with an ellipsis, or wrapped over lines (``wrap``: a table of a few rows)."""

    def __init__(
        self,
        columns: Sequence[str],
        *,
        right_from: int = 1,
        cut_from: int | None = None,
        wrap: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self.columns_spec = tuple(columns)
        self.right_from = right_from
        self.cut_from = cut_from
        self.wrap = wrap
        self.fit = fmt.Fit(len(self.columns_spec))
        self._rows: list[tuple[str, tuple[str, ...]]] = []
        self._shown: dict[str, tuple[str, ...]] = {}
        self._order: list[str] = []

    @property
    def hidden(self) -> int:
        """Columns left out at this width."""
        return len(self.columns_spec) - self.fit.count

    def on_mount(self) -> None:
        for label in self.columns_spec[: self.fit.count]:
            self.add_column(label, key=label)

    def on_resize(self) -> None:
        before = self.fit
        self.sync(self._rows)
        if self.fit != before and isinstance(self.app, TopApp):  # its info line counts the columns left out
            self.app.call_after_refresh(self.app.render_all)

    def _fit(self, rows: Sequence[tuple[str, ...]]) -> fmt.Fit:
        """The columns shown in the table's width, less a vertical scrollbar's when the lines overflow."""
        width, height = self.region.width, self.region.height
        if not width:  # not laid out yet: a resize follows
            return fmt.Fit(len(self.columns_spec))
        fit = fmt.fit_columns(self.columns_spec, rows, width, self.cut_from)
        lines = 1 + sum(_height(fmt.fitted(r, fit, wrapped=self.wrap)) for r in rows)
        if lines > height:
            fit = fmt.fit_columns(
                self.columns_spec, rows, width - self.styles.scrollbar_size_vertical, self.cut_from
            )
        return fit

    def sync(self, rows: Sequence[tuple[str, tuple[str, ...]]]) -> None:
        self._rows = list(rows)
        fit = self._fit([v for _, v in rows])
        current = self.current_key()
        if fit != self.fit:
            self.fit = fit
            self.clear(columns=True)
            for label in self.columns_spec[: fit.count]:
                self.add_column(label, key=label)
            self._order = []
        rows = [(key, fmt.fitted(values, fit, wrapped=self.wrap)) for key, values in rows]
        order = [key for key, _ in rows]
        if order != self._order or any(_height(v) != _height(self._shown.get(k, ())) for k, v in rows):
            self.clear()
            for key, values in rows:  # (a row's height is set as it is added: a wrapped cell's lines)
                self.add_row(*_cells(values, self.right_from), key=key, height=_height(values))
            if current in order:
                self.move_cursor(row=order.index(current))
        else:
            for key, values in rows:
                old = self._shown.get(key, ())
                for i, value in enumerate(values):
                    if i >= len(old) or old[i] != value:
                        self.update_cell(key, self.columns_spec[i], _cells(values, self.right_from)[i])
        self._order = order
        self._shown = dict(rows)

    def current_key(self) -> str | None:
        if not self._order or not 0 <= self.cursor_row < len(self._order):
            return None
        return self._order[self.cursor_row]


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,question_mark,q", "app.pop_screen", "Close"),
    ]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > Static { width: 80; height: auto; border: round $accent; padding: 1 2; background: $panel; }
    """

    def compose(self) -> ComposeResult:
        yield Static(HELP)


class GroupScreen(Screen[None]):
    """Drill-down of one group: its queues with offsets, lag and owner, and its online clients."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("r", "reload", "Refresh"),
    ]
    DEFAULT_CSS = """
    GroupScreen #queues { height: 2fr; }
    GroupScreen #clients { height: 1fr; }
    GroupScreen .title { background: $boost; text-style: bold; padding: 0 1; }
    """

    def __init__(self, group: str) -> None:
        super().__init__()
        self.group = group
        self.detail: GroupDetail | None = None

    def compose(self) -> ComposeResult:
        yield Static(
            Text(_shown(f"Group {self.group} — loading…  (Esc back, r refresh)")),
            id="group-title",
            classes="title",
        )
        yield Table(fmt.QUEUE_COLUMNS, right_from=2, cut_from=6, id="queues")
        yield Static("Online clients", classes="title")
        yield Table(fmt.CLIENT_COLUMNS, right_from=3, id="clients")

    def on_mount(self) -> None:
        app = self.app
        assert isinstance(app, TopApp)
        self.set_interval(app.interval, lambda: None if app.paused else self.action_reload())
        self.action_reload()

    def action_reload(self) -> None:
        self.run_worker(self._load(), exclusive=True, group="detail", exit_on_error=False)

    async def _load(self) -> None:
        app = self.app
        assert isinstance(app, TopApp)
        title = self.query_one("#group-title", Static)
        try:
            detail = await app.source.group_detail(self.group)
        except Exception as exc:  # shown, never fatal: the group may be gone or the broker down
            title.update(Text(_shown(f"Group {self.group} — error: {translate(exc)}  (Esc back, r retry)")))
            return
        self.detail = detail
        total = LagSum.of(q.lag for q in detail.queues)
        lag = fmt.lag_text(total.lag, total.uncounted)
        title.update(
            Text(
                _shown(
                    f"Group {self.group} — {fmt.plural(len(detail.queues), 'queue')}, lag {lag}, "
                    f"{fmt.plural(len(detail.clients), 'client')}  (Esc back, r refresh)"
                )
            )
        )
        self.query_one("#queues", Table).sync(
            [(f"{q.topic}/{q.broker}/{q.queue_id}", fmt.queue_cells(q)) for q in detail.queues]
        )
        self.query_one("#clients", Table).sync([(c.client_id, fmt.client_cells(c)) for c in detail.clients])


class TopApp(App[None]):
    """``mqctl top``: Overview, Topics, Groups and Store over one ``TopSource``."""

    TITLE = "mqctl top"
    CSS = """
    Screen { overflow: hidden; }
    #views { height: 1fr; }
    #views > Vertical { height: 1fr; }
    Table { height: 1fr; }
    #tabs { height: 1; background: $boost; }
    #banner { height: 1; background: $error; color: $text; text-style: bold; display: none; }
    #banner.on { display: block; }
    .info { height: auto; padding: 0 1; }
    .stale DataTable, .stale Sparkline, .stale .info { opacity: 50%; }
    .spark-row { height: 2; }
    .spark-row > Static { width: 22; padding: 0 1; }
    .spark-row > Sparkline { width: 1fr; height: 2; }
    #filter { dock: bottom; display: none; }
    #filter.on { display: block; }
    #status { dock: bottom; height: 1; background: $panel; padding: 0 1; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("1", "show('overview')", "Overview"),
        Binding("2", "show('topics')", "Topics"),
        Binding("3", "show('groups')", "Groups"),
        Binding("4", "show('store')", "Store"),
        Binding("tab", "next_view", "Next", priority=True),
        Binding("slash", "filter", "Filter"),
        Binding("s", "sort", "Sort"),
        Binding("p", "pause", "Pause"),
        Binding("r", "refresh_now", "Refresh"),
        Binding("question_mark", "help", "Help"),
        Binding("escape", "escape", "Back"),
        Binding("q", "quit", "Quit"),
    ]

    def __init__(
        self,
        source: TopSource,
        *,
        interval: float = 2.0,
        clock: Clock | None = None,
        target: str = "",
        screen: str = "overview",
    ) -> None:
        super().__init__()
        self.source = source
        self.interval = interval
        self.clock = clock or SystemClock()
        self.target = target
        self.view = screen
        self.snapshot: Snapshot | None = None  # the newest
        self.latest: dict[str, Snapshot] = {}  # per view, the newest snapshot holding its data
        self.again = False
        self.error: str | None = None
        self.failures = 0
        self.paused = False
        self.refreshing = False
        self.filters: dict[str, str] = {name: "" for name, _ in VIEW_TABS}
        self.sorts = {"topics": 0, "groups": 0}
        self.put_history: deque[float] = deque(maxlen=HISTORY)
        self.get_history: deque[float] = deque(maxlen=HISTORY)

    # ------------------------------------------------------------------------------------ layout

    def compose(self) -> ComposeResult:
        yield Static(id="tabs")
        yield Static(id="banner")
        with ContentSwitcher(initial=self.view, id="views"):
            with Vertical(id="overview"):
                yield Static(id="overview-info", classes="info")
                with Horizontal(classes="spark-row"):
                    yield Static(id="put-label")
                    yield Sparkline([], id="put-spark")
                with Horizontal(classes="spark-row"):
                    yield Static(id="get-label")
                    yield Sparkline([], id="get-spark")
                yield Table(fmt.BROKER_COLUMNS, right_from=99, cut_from=9, wrap=True, id="brokers-table")
            with Vertical(id="topics"):
                yield Static(id="topics-info", classes="info")
                yield Table(fmt.TOPIC_COLUMNS, id="topics-table")
            with Vertical(id="groups"):
                yield Static(id="groups-info", classes="info")
                yield Table(fmt.GROUP_COLUMNS, id="groups-table")
            with Vertical(id="store"):
                yield Static(id="store-info", classes="info")
                yield Table(fmt.STORE_COLUMNS, right_from=2, cut_from=5, id="store-table")
        yield Input(placeholder="filter by name (Enter keeps, Esc cancels)", id="filter")
        yield Static(id="status")

    def on_mount(self) -> None:
        self.set_interval(self.interval, self._tick)
        self.set_interval(1.0, self.render_chrome)  # the stale marker appears even when nothing arrives
        self._focus_view()
        self.render_all()
        self.action_refresh_now()

    async def on_unmount(self) -> None:
        await self.source.close()

    # ----------------------------------------------------------------------------------- refresh

    def _tick(self) -> None:
        """A timer tick while a refresh still runs is dropped: a cluster slower than the interval is
        refreshed back to back at most, never by piled-up requests."""
        if self.is_running and not self.paused and not self.refreshing:
            self.action_refresh_now()

    def action_refresh_now(self) -> None:
        """Start a refresh; while one runs, only remember to run another after it: they never overlap."""
        if self.refreshing:
            self.again = True
            return
        self.refreshing = True
        self.run_worker(self._refresh(), group="refresh", exit_on_error=False)

    async def _refresh(self) -> None:
        try:
            snapshot = await self.source.snapshot(frozenset({self.view}))
        except Exception as exc:  # a down cluster is shown and retried, never fatal
            self.failures += 1
            self.error = str(translate(exc))
            log.debug("refresh failed", exc_info=True)
        else:
            self.failures = 0
            self.error = None
            self.snapshot = snapshot
            self.latest.update((view, snapshot) for view in VIEW_NAMES if snapshot.has(view))
            self.put_history.append(snapshot.overview.put_tps)
            self.get_history.append(snapshot.overview.get_tps)
        finally:
            self.refreshing = False
        self.render_all()
        if self.again:
            self.again = False
            self.action_refresh_now()

    # ------------------------------------------------------------------------------------ render

    def render_all(self) -> None:
        if not self.is_running:  # shutdown began: Textual prunes the screens before it stops our timers,
            return  # so a tick or a finishing refresh in that window would query widgets that are gone
        self.render_chrome()
        if self.view in self.latest:
            self.render_view()

    def render_chrome(self) -> None:
        """Tabs, stale banner and status bar: everything that depends on time, not on data."""
        if not self.is_running:
            return
        tabs = Text(no_wrap=True, overflow="ellipsis")
        for i, (name, label) in enumerate(VIEW_TABS, 1):
            tabs.append(f" {i} {label} ", style="reverse bold" if name == self.view else "")
        tabs.append(
            fmt.shorten(_shown(f"  {self.target}"), self.size.width - tabs.cell_len, ";"), style="dim"
        )
        self.query_one("#tabs", Static).update(tabs)

        now = self.clock.now()
        shown = self.latest.get(self.view)
        taken = shown.taken_at if shown else None
        stale = fmt.staleness(taken, now, self.interval)
        banner = self.query_one("#banner", Static)
        if self.paused and taken is not None:
            marker = f"PAUSED: showing data from {_clock(taken)} (p resumes)"
        elif stale is not None and (shown is not None or self.error is not None or self.snapshot is not None):
            marker = stale + ("" if shown is None else f", from {_clock(shown.taken_at)}")
        else:
            marker = ""
        banner.update(" " + marker)
        banner.set_class(bool(marker), "on")
        self.query_one("#views").set_class(stale is not None and shown is not None, "stale")

        status = Text(no_wrap=True, overflow="ellipsis")
        if self.error is not None:
            status.append(
                _shown(f"error: {self.error}; retrying every {self.interval:g}s (failed {self.failures}×)"),
                style="bold red",
            )
        elif self.snapshot is None:
            status.append("connecting…")
        else:
            status.append(f"updated {_clock(self.snapshot.taken_at)}")
            down = down_summary(self.snapshot.overview.brokers)
            if down:
                status.append(_shown(f"  {down}"), style="bold yellow")
        status.append(
            f"  every {self.interval:g}s" + ("  PAUSED" if self.paused else "") + "  ? help  q quit",
            style="dim",
        )
        self.query_one("#status", Static).update(status)

    def render_view(self) -> None:
        """Only the visible view is rendered; a switch renders the new one at once."""
        getattr(self, f"_render_{self.view}")(self.latest[self.view])

    def _render_overview(self, snap: Snapshot) -> None:
        ov = snap.overview
        clusters = {
            c: sorted({b.name for b in ov.brokers if b.cluster == c}) for c in {b.cluster for b in ov.brokers}
        }
        listed = "; ".join(f"{c} ({', '.join(names)})" for c, names in sorted(clusters.items()))
        unread = [b for b in ov.brokers if b.error is not None]
        down = [b for b in unread if b.unread_as == "DOWN"]  # one that refused or timed out is up
        masters = [b for b in ov.brokers if b.broker_id == 0]
        brokers = fmt.select(list(ov.brokers), lambda b: b.name, self.filters["overview"], fmt.BY_BROKER)
        table = self.query_one("#brokers-table", Table)
        table.sync([(f"{b.name}/{b.broker_id}/{b.addr}", fmt.broker_cells(b)) for b in brokers])
        width = self._info_width()
        unreadable = len(unread) - len(down)
        counts = [
            f"Cluster {listed or '-'}:",
            f"{fmt.plural(len(ov.brokers), 'broker')},",
            f"{fmt.plural(len(masters), 'master')},",
            f"{len(down)} down" + (f", {unreadable} not readable" if unreadable else "") + "  ",
            "NameServers:",
            *(f"{n.addr} {'up' if n.up else 'DOWN'} " for n in ov.namesrvs),
        ]
        size = sum(b.commitlog_bytes or 0 for b in masters)
        files = sum(b.commitlog_files or 0 for b in masters)
        store = [
            f"CommitLog: {fmt.human_bytes(size)} in {fmt.plural(files, 'file')}  ",
            "disk watermarks:",
            "clean 75%,",
            "force clean 85%,",
            "writes blocked 90%  ",
            *_off_screen(table),
        ]
        info = Text(fmt.pack([_shown(c) for c in counts], width) + "\n" + fmt.pack(store, width))
        self.query_one("#overview-info", Static).update(info)
        self.query_one("#put-label", Static).update(Text(f"Put {fmt.rate(ov.put_tps)}"))
        self.query_one("#get-label", Static).update(Text(f"Get {fmt.rate(ov.get_tps)}"))
        # one point would paint a solid block: the lines start with the second refresh
        self.query_one("#put-spark", Sparkline).data = (
            list(self.put_history) if len(self.put_history) > 1 else []
        )
        self.query_one("#get-spark", Sparkline).data = (
            list(self.get_history) if len(self.get_history) > 1 else []
        )

    def _render_topics(self, snap: Snapshot) -> None:
        order = fmt.TOPIC_SORTS[self.sorts["topics"]]
        topics = snap.topics or ()
        rows = fmt.select(list(topics), lambda t: t.name, self.filters["topics"], order)
        missing = sorted(m.split(": ", 1)[1] for m in snap.missing if m.startswith("Topics: "))
        note = f"not available without the broker metrics endpoint: {', '.join(missing)}" if missing else ""
        hidden = hidden_note(dict(snap.hidden_topics), "shows")
        table = self.query_one("#topics-table", Table)
        table.sync([(t.name, fmt.topic_cells(t)) for t in rows])
        self.query_one("#topics-info", Static).update(
            Text(
                fmt.pack(
                    [
                        *self._list_info(len(rows), len(topics), "topics", order.label, table),
                        hidden or "",
                        note,
                    ],
                    self._info_width(),
                )
            )
        )

    def _render_groups(self, snap: Snapshot) -> None:
        order = fmt.GROUP_SORTS[self.sorts["groups"]]
        groups = snap.groups or ()
        rows = fmt.select(list(groups), lambda g: g.name, self.filters["groups"], order)
        table = self.query_one("#groups-table", Table)
        table.sync([(g.name, fmt.group_cells(g)) for g in rows])
        self.query_one("#groups-info", Static).update(
            Text(
                fmt.pack(
                    [
                        *self._list_info(len(rows), len(groups), "groups", order.label, table),
                        "Enter: queues and clients",
                    ],
                    self._info_width(),
                )
            )
        )

    def _render_store(self, snap: Snapshot) -> None:
        now = self.clock.now()
        stores = [s for s in snap.stores or () if self.filters["store"].casefold() in s.broker.casefold()]
        rows = [row for s in stores for row in fmt.store_rows(s, now)]
        table = self.query_one("#store-table", Table)
        table.sync([(f"{r[0]}/{r[1]}", r) for r in rows])
        width = self._info_width()
        lines = [fmt.pack([_shown(p) for p in fmt.store_phrases(s, now)], width) for s in stores] or [
            "no master broker answered"
        ]
        if table.hidden:
            lines.append(fmt.pack(_off_screen(table), width))
        self.query_one("#store-info", Static).update(Text("\n".join(lines)))

    def _list_info(self, shown: int, total: int, noun: str, order: str, table: Table) -> list[str]:
        """The phrases of a list's info line (for :func:`~mqctl.top.format.pack`)."""
        where = f" matching '{self.filters[self.view]}'" if self.filters[self.view] else ""
        noun = noun.removesuffix("s") if total == 1 else noun
        return [
            f"{shown} of {total} {noun}{where}  ",
            f"sorted by {order} (s)  ",
            "/ filter  ",
            *_off_screen(table),
        ]

    def _info_width(self) -> int:
        """The info lines' width: the screen's, less their padding."""
        return max(20, self.size.width - 2)

    def on_resize(self) -> None:
        self.render_all()

    # ----------------------------------------------------------------------------------- actions

    def action_show(self, name: str) -> None:
        """Switch views; unless paused, the new view's data is fetched at once."""
        self.view = name
        self.query_one("#views", ContentSwitcher).current = name
        self._focus_view()
        self.render_all()
        if not self.paused:
            self.action_refresh_now()

    def action_next_view(self) -> None:
        names = [n for n, _ in VIEW_TABS]
        self.action_show(names[(names.index(self.view) + 1) % len(names)])

    def _focus_view(self) -> None:
        tables = self.query_one(f"#{self.view}").query(Table)
        if tables:
            tables.first().focus()

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.value = self.filters[self.view]
        box.add_class("on")
        box.focus()

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.filters[self.view] = event.value
        if self.view in self.latest:
            self.render_view()

    @on(Input.Submitted, "#filter")
    def _filter_done(self) -> None:
        self.query_one("#filter", Input).remove_class("on")
        self._focus_view()

    def action_escape(self) -> None:
        """Esc: close the filter box, else clear the view's filter."""
        box = self.query_one("#filter", Input)
        if box.has_class("on"):
            box.value = ""
            self._filter_done()
        elif self.filters[self.view]:
            self.filters[self.view] = ""
            self.render_all()

    def action_sort(self) -> None:
        sorts = {"topics": fmt.TOPIC_SORTS, "groups": fmt.GROUP_SORTS}
        if self.view not in sorts:
            self.notify("sorting applies to Topics and Groups")
            return
        self.sorts[self.view] = (self.sorts[self.view] + 1) % len(sorts[self.view])
        self.render_all()

    def action_pause(self) -> None:
        self.paused = not self.paused
        self.render_chrome()

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    @on(DataTable.RowSelected, "#groups-table")
    def _drill_down(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value is not None:
            self.push_screen(GroupScreen(event.row_key.value))


def down_summary(brokers: Sequence[BrokerView]) -> str:
    """The brokers that could not be read, by why: ``DOWN: broker-z  ACL denied: broker-b``."""
    by_reason: dict[str, list[str]] = {}
    for b in brokers:
        if b.error is not None:
            by_reason.setdefault(b.unread_as, []).append(b.name)
    return "  ".join(f"{reason}: {', '.join(names)}" for reason, names in by_reason.items())


def _clock(epoch: float) -> str:
    return time.strftime("%H:%M:%SZ", time.gmtime(epoch))


def run_top(
    namesrv: list[str], *, interval: float, screen: str, make_source: Callable[[], TopSource]
) -> None:
    """Run the App in this terminal until the user quits; log records go to Textual's log, not over the screen."""
    from textual.logging import TextualHandler

    root = logging.getLogger()
    saved = root.handlers[:]
    root.handlers = [TextualHandler()]
    try:
        TopApp(
            make_source(), interval=interval, target="NameServer " + ";".join(namesrv), screen=screen
        ).run()
    finally:
        root.handlers = saved
