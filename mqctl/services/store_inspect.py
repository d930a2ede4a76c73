"""Offline, read-only inspection of a store directory: CommitLog files, ConsumeQueues, IndexFiles,
key/id lookups and a consistency check, as rows.

What the files hold is read by :mod:`store.inspect` (the storage format stays in ``store``); this module
turns its values into rows (ISO times, message summaries) and missing things into ``NotFoundError``.
Nothing writes to the store or takes the broker's lock, so every command is safe on the store of a
running broker.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from mqctl.errors import NotFoundError
from mqctl.services.messages import Window, detail, locate, summary
from mqctl.timespec import iso
from store import CorruptRecordError, inspect

Progress = inspect.Progress
Layout = inspect.Layout


def layout(root: str | Path) -> Layout:
    """The store's files and their sizes (see :func:`store.inspect.layout`)."""
    try:
        return inspect.layout(root)
    except FileNotFoundError as exc:
        raise NotFoundError(str(exc)) from exc


def _iso(ms: int | None) -> str | None:
    return iso(ms) if ms is not None else None


def _time(ms: int) -> str | None:
    """A header timestamp as ISO 8601; a damaged one as its raw value (it may be past any calendar)."""
    if ms <= 0:
        return None
    try:
        return iso(ms)
    except (ValueError, OverflowError, OSError):
        return f"{ms} (not a time)"


# ---------------------------------------------------------------------------------- commitlog


def _row(stats: Any, times: dict[str, str], fmt: Callable[[Any], str | None]) -> dict[str, Any]:
    """``stats`` (a dataclass) as a row, each ms timestamp field of ``times`` as the pair every time is made
    of: renamed and formatted by ``fmt``, and its ``_ms`` twin (0: none; tables then show local time)."""
    row: dict[str, Any] = {}
    for key, value in asdict(stats).items():
        if key in times:
            row[times[key]] = fmt(value)
            row[f"{times[key]}_ms"] = value or 0
        else:
            row[key] = value
    return row


def commitlog_ls(root: str | Path, *, progress: Progress | None = None) -> list[dict[str, Any]]:
    """Each CommitLog file: offset range, size, data bytes, records, first/last store time (ISO 8601),
    how its data ends (blank-filler, zeros, end-of-file or corrupt), records per topic."""
    return [
        _row(
            stats,
            {"first_store_timestamp": "first_store_time", "last_store_timestamp": "last_store_time"},
            _iso,
        )
        for stats in inspect.commitlog_files(layout(root), progress=progress)
    ]


def commitlog_bytes(root: str | Path) -> int:
    """Total size of the CommitLog files (the progress bar's length)."""
    return layout(root).commitlog_bytes()


# ------------------------------------------------------------------------------- consume queue


def cq_ls(root: str | Path, topic: str | None = None) -> list[inspect.QueueStats]:
    """Every ConsumeQueue (or those of ``topic``): files, offset range and message count."""
    lay = layout(root)
    if topic and not lay.queues(topic):
        raise NotFoundError(f"no ConsumeQueue for topic {topic!r} in {lay.root}")
    return inspect.queues(lay, topic)


def cq_show(
    root: str | Path, topic: str, queue_id: int, *, offset: int | None = None, count: int = 20
) -> list[dict[str, Any]]:
    """Units of one queue from ``offset`` (default: the oldest), each with the record it points at."""
    lay = layout(root)
    if (topic, queue_id) not in lay.queues(topic):
        raise NotFoundError(f"no ConsumeQueue {topic}/{queue_id} in {lay.root}")
    page = inspect.queue_units(lay, topic, queue_id, offset=offset, count=count)
    if not page.min_offset <= page.start < page.max_offset:
        raise NotFoundError(
            f"offset {page.start} is outside {topic}/{queue_id} (it holds {page.min_offset}..{page.max_offset - 1})"
        )
    rows: list[dict[str, Any]] = []
    for unit in page.units:
        row: dict[str, Any] = {
            "queue_offset": unit.queue_offset,
            "commit_log_offset": unit.commit_log_offset,
            "size": unit.size,
            "tags_code": unit.tags_code,
        }
        if unit.error is not None:
            row["error"] = unit.error
        if unit.message is not None:
            row |= {
                k: v
                for k, v in summary(unit.message).items()
                if k not in ("topic", "queue_id", "queue_offset")
            }
        rows.append(row)
    return rows


# ---------------------------------------------------------------------------------- index files


def _index_row(header: inspect.IndexHeader) -> dict[str, Any]:
    """An IndexFile's header as a row; ``problem``: what is wrong with it (the broker rebuilds such a file)."""
    return _row(header, {"begin_timestamp": "begin_time", "end_timestamp": "end_time"}, _time)


def index_ls(root: str | Path) -> list[dict[str, Any]]:
    """Each IndexFile's header: time and CommitLog range, used slots, entries, whether it is full."""
    return [_index_row(h) for h in inspect.index_headers(layout(root))]


def _pick_index(lay: Layout, name: str | None) -> Path:
    files = lay.index_files()
    if not files:
        raise NotFoundError(f"no index files in {lay.index_dir}")
    if name is None:
        return files[-1]
    for p in files:
        if p.name == name:
            return p
    raise NotFoundError(
        f"no index file {name!r} in {lay.index_dir} (have: {', '.join(p.name for p in files)})"
    )


def index_show(root: str | Path, name: str | None = None) -> dict[str, Any]:
    """One IndexFile (default: the newest): header plus hash-chain statistics from its slot table."""
    lay = layout(root)
    header, chains = inspect.index_stats(lay, _pick_index(lay, name))
    return {
        **_index_row(header),
        "entries": chains.entries,
        "used_slots": chains.used_slots,
        "longest_chain": chains.longest_chain,
        "average_chain": round(chains.entries / chains.used_slots, 3) if chains.used_slots else 0.0,
        "slots_pointing_past_count": chains.slots_pointing_past_count,
    }


def index_chain(root: str | Path, topic: str, key: str, name: str | None = None) -> list[dict[str, Any]]:
    """The raw hash chain for ``topic#key`` in one IndexFile: every entry, and whether it is that key's."""
    lay = layout(root)
    full_key = f"{topic}#{key}"
    rows = []
    for e in inspect.key_chain(lay, _pick_index(lay, name), topic, key):
        row: dict[str, Any] = {
            "entry": e.entry,
            "key_hash": e.key_hash,
            "hash_match": e.hash_match,
            "commit_log_offset": e.commit_log_offset,
            "store_time": _time(e.store_timestamp),
            "prev": e.prev,
            "record_has_key": e.record_has_key,
        }
        if e.error is not None:
            row["error"] = e.error
        if e.msg_id is not None:
            row["msg_id"] = e.msg_id
        rows.append(row)
    if not rows:
        raise NotFoundError(f"no index entry chain for {full_key!r}")
    return rows


# ------------------------------------------------------------------------------------ messages


def query_key(
    root: str | Path, topic: str, key: str, window: Window, *, max_num: int = 64
) -> list[dict[str, Any]]:
    """Messages of ``topic`` with ``key`` in KEYS, through the on-disk IndexFiles, each verified against
    its record (the index holds hashes only)."""
    found = inspect.messages_by_key(layout(root), topic, key, window.begin_ms, window.end_ms, max_num=max_num)
    if not found:
        raise NotFoundError(f"no message with key {key!r} in topic {topic!r} stored {window.describe()}")
    return sorted((summary(m) for m in found), key=lambda r: (r["store_time"], r["msg_id"]))


def query_id(root: str | Path, msg_id: str) -> dict[str, Any]:
    """The record an offset message id points at (its address part names the broker, not checked here)."""
    _addr, offset = locate(msg_id)
    try:
        m = inspect.message_at_offset(layout(root), offset)
    except CorruptRecordError as exc:
        raise NotFoundError(f"no message {msg_id}: {exc}") from exc
    if m is None:
        raise NotFoundError(f"no message {msg_id}: offset {offset} is outside the CommitLog")
    return detail(m)


# -------------------------------------------------------------------------------------- verify


def verify(
    root: str | Path, *, max_problems: int | None = None, progress: Progress | None = None
) -> inspect.VerifyReport:
    """CRC of every record, every ConsumeQueue unit and index entry against the CommitLog (see
    :func:`store.inspect.verify`). Ctrl-C ends the walk, not the call: ``interrupted`` says where."""
    return inspect.verify(layout(root), max_problems=max_problems, progress=progress, partial=True)
