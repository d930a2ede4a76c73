"""``mqctl top --once``: one frame of a screen as a document, for a script, a log or a ticket.

The table form has the screen's own cells (the same functions draw them); JSON, YAML and CSV carry
the raw figures under the glossary's names (rates per second, sizes in bytes, ages in ms, the time
of the frame as ``taken_at``/``taken_at_ms``); CSV as one table, a row per item of the screen.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from mqctl import units
from mqctl.output import Rows, shown_time
from mqctl.services.topics import hidden_note
from mqctl.top import format as fmt
from mqctl.top.model import BrokerView, GroupRow, Snapshot, StoreView, TopicRow, TopSource

#: Screens whose rates the source works out from two refreshes (the Topics' put TPS).
RATES_NEED_TWO = frozenset({"topics"})


async def take(make_source: Callable[[], TopSource], screen: str, interval: float) -> Snapshot:
    """One snapshot of ``screen``; of one whose rates need two refreshes, the second, ``interval`` s after."""
    source = make_source()
    try:
        views = frozenset({screen})
        snap = await source.snapshot(views)
        if screen in RATES_NEED_TWO:
            await asyncio.sleep(interval)
            snap = await source.snapshot(views)
        return snap
    finally:
        await source.close()


def _ms(seconds: float | None) -> int | None:
    return None if seconds is None else int(seconds * 1000)


def _broker(b: BrokerView) -> dict[str, Any]:
    return {
        "cluster": b.cluster,
        "broker_name": b.name,
        "broker_id": b.broker_id,
        "addr": b.addr,
        "version": b.version,
        "raft": b.raft,
        "put_tps": b.put_tps,
        "get_tps": b.get_tps,
        "disk_ratio": b.disk_ratio,
        "commitlog_bytes": b.commitlog_bytes,
        "commitlog_files": b.commitlog_files,
        "ha_slaves": b.ha_slaves,
        "ha_connected": b.ha_connected,
        "ha_lag_bytes": b.ha_lag_bytes,
        "metrics": b.metrics,
        "pop_in_flight": b.pop_in_flight,
        "timer_pending": b.timer_pending,
        "loop_lag_p99_ms": b.loop_lag_p99_ms,
        "error": b.error,
        "state": b.unread_as if b.error is not None else "up",
    }


def _topic(t: TopicRow) -> dict[str, Any]:
    return {
        "topic": t.name,
        "queues": t.queues,
        "messages": t.messages,
        "put_tps": t.put_tps,
        "bytes": t.bytes,
        "kind": t.kind,
    }


def _group(g: GroupRow) -> dict[str, Any]:
    return {
        "group": g.name,
        "lag": g.lag,
        "uncounted_queues": g.uncounted,
        "consumers": g.consumers,
        "consume_tps": g.consume_tps,
        "oldest_age_ms": _ms(g.oldest_age),
        "never_consumed": g.never_consumed,
    }


def _store(s: StoreView, now: float) -> dict[str, Any]:
    doomed = s.deletable(now)
    return {
        "broker_name": s.broker,
        "min_offset": s.min_offset,
        "max_offset": s.max_offset,
        "file_size": s.file_size,
        "file_reserved_hours": s.file_reserved_hours,
        "disk_ratio": s.disk_ratio,
        "planned": s.planned,
        "deletable_files": len(doomed),
        "deletable_bytes": sum(f.written for f in doomed),
        "note": s.note,
        "files": [
            {
                "file": f.name,
                "written_bytes": f.written,
                "first_write_age_ms": None if f.first_write is None else _ms(now - f.first_write),
                "last_write_age_ms": None if f.last_write is None else _ms(now - f.last_write),
                "active": f.active,
                "reason": f.reason,
                "unconsumed": f.unconsumed,
            }
            for f in s.files
        ],
    }


_STORE_FIELDS = _store(StoreView("", 0, 0, 0, None, None), 0.0)
#: A store's columns then its files' (``-o csv``: a row per file).
_FILE_CSV_COLUMNS = (
    "file",
    "written_bytes",
    "first_write_age_ms",
    "last_write_age_ms",
    "active",
    "reason",
    "unconsumed",
)
_STORE_CSV_COLUMNS = (*(k for k in _STORE_FIELDS if k != "files"), *_FILE_CSV_COLUMNS)


def _cells(columns: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[dict[str, str]] | str:
    """The rows as a table of the screen's columns; ``none`` in the summary when there are none."""
    return [dict(zip(columns, row, strict=True)) for row in rows] or "none"


def document(snap: Snapshot, screen: str, now: float) -> dict[str, Any]:
    """The frame as data (``-o json|yaml|csv``): the overview always, and ``screen``'s rows."""
    taken = int(snap.taken_at * 1000)
    doc: dict[str, Any] = {
        "screen": screen,
        "taken_at": units.iso(taken),
        "taken_at_ms": taken,
        "put_tps": snap.overview.put_tps,
        "get_tps": snap.overview.get_tps,
        "namesrvs": [{"addr": n.addr, "up": n.up, "error": n.error} for n in snap.overview.namesrvs],
        "brokers": [_broker(b) for b in snap.overview.brokers],
    }
    if screen == "topics":
        doc["topics"] = [
            _topic(t) for t in fmt.select(list(snap.topics or ()), _name, "", fmt.TOPIC_SORTS[0])
        ]
    elif screen == "groups":
        doc["groups"] = [
            _group(g) for g in fmt.select(list(snap.groups or ()), _name, "", fmt.GROUP_SORTS[0])
        ]
    elif screen == "store":
        doc["stores"] = [_store(s, now) for s in snap.stores or ()]
    if snap.hidden_topics:
        doc["hidden_topics"] = dict(snap.hidden_topics)
    if snap.missing:
        doc["missing"] = sorted(snap.missing)
    if snap.errors:
        doc["errors"] = list(snap.errors)
    return doc


#: The columns of each screen's CSV rows after ``taken_at``/``taken_at_ms`` (an empty frame's header too).
_CSV_COLUMNS = {
    "overview": tuple(_broker(BrokerView("", "", 0, "")).keys()),
    "topics": tuple(_topic(TopicRow("", 0, 0)).keys()),
    "groups": tuple(_group(GroupRow("", 0, 0, 0.0)).keys()),
}


def csv_rows(snap: Snapshot, screen: str, now: float) -> Rows:
    """The frame as one table (``-o csv``): a row per item of ``screen`` (broker, topic, group, or
    CommitLog file with its store's figures beside it), each led by the frame's time; no cell holds a
    list or a record, so a spreadsheet opens it as it is. The NameServers and totals are JSON's and YAML's."""
    doc = document(snap, screen, now)
    stamp = {"taken_at": doc["taken_at"], "taken_at_ms": doc["taken_at_ms"]}
    if screen == "store":
        columns = [*stamp, *_STORE_CSV_COLUMNS]
        rows = [
            stamp | {k: v for k, v in store.items() if k != "files"} | file | {"unconsumed": _per_group(file)}
            for store in doc["stores"]
            for file in store["files"] or [dict.fromkeys(_FILE_CSV_COLUMNS)]
        ]
        return Rows(rows, columns=columns)
    key = {"overview": "brokers", "topics": "topics", "groups": "groups"}[screen]
    return Rows([stamp | row for row in doc[key]], columns=[*stamp, *_CSV_COLUMNS[screen]])


def _per_group(file: dict[str, Any]) -> str | None:
    """A file's unconsumed messages per group as one cell: ``G1=5, G2=3``."""
    unconsumed = file.get("unconsumed")
    return ", ".join(f"{g}={n}" for g, n in unconsumed.items()) if unconsumed else None


def _name(row: TopicRow | GroupRow) -> str:
    return row.name


def table(snap: Snapshot, screen: str, now: float) -> dict[str, Any]:
    """The frame as the screen draws it (``-o table``): a summary, then the screen's table in its cells,
    whole numbers exact as in every other table (the live screen groups their thousands)."""
    ov = snap.overview
    doc: dict[str, Any] = {
        "taken at": shown_time(int(snap.taken_at * 1000)),
        "namesrvs": "  ".join(f"{n.addr} {'up' if n.up else 'DOWN'}" for n in ov.namesrvs),
        "put": fmt.rate(ov.put_tps),
        "get": fmt.rate(ov.get_tps),
    }
    brokers = fmt.select(list(ov.brokers), lambda b: b.name, "", fmt.BY_BROKER)
    if screen == "overview":
        doc["brokers"] = _cells(fmt.BROKER_COLUMNS, [fmt.broker_cells(b, exact=True) for b in brokers])
    elif screen == "topics":
        rows = fmt.select(list(snap.topics or ()), _name, "", fmt.TOPIC_SORTS[0])
        doc["topics"] = _cells(fmt.TOPIC_COLUMNS, [fmt.topic_cells(t, exact=True) for t in rows])
        hidden = hidden_note(dict(snap.hidden_topics), "shows")
        if hidden:
            doc["hidden"] = hidden.removeprefix("hidden: ")
    elif screen == "groups":
        rows_g = fmt.select(list(snap.groups or ()), _name, "", fmt.GROUP_SORTS[0])
        doc["groups"] = _cells(fmt.GROUP_COLUMNS, [fmt.group_cells(g, exact=True) for g in rows_g])
    else:
        doc["stores"] = (
            "\n".join(fmt.store_summary(s, now, exact=True) for s in snap.stores or ())
            or "no master answered"
        )
        doc["files"] = _cells(
            fmt.STORE_COLUMNS, [r for s in snap.stores or () for r in fmt.store_rows(s, now, exact=True)]
        )
    if snap.missing:
        doc["missing"] = ", ".join(sorted(snap.missing))
    if snap.errors:
        doc["errors"] = "; ".join(snap.errors)
    return doc
