"""Offline, read-only inspection of a store directory: CommitLog files, ConsumeQueues, IndexFiles,
key/id lookups and a consistency check, as rows.

What the files hold is read by :mod:`store.inspect` (the storage format stays in ``store``); this module
turns its values into rows (ISO times, message summaries) and missing things into ``NotFoundError``.
Nothing writes to the store or takes the broker's lock, so every command is safe on the store of a
running broker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NotRequired, TypedDict

from mqctl.admin import messaging as wire
from mqctl.admin.client import Admin
from mqctl.errors import NotFoundError, StoreError
from mqctl.output import Rows
from mqctl.services.messages import MessageDetail, MessageRow, Window, detail, locate, summary, with_body
from mqctl.timespec import iso
from store import CorruptRecordError, DamagedRecordError, decode_record, inspect

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


class CommitLogFile(TypedDict):
    """A row of ``store commitlog ls``: the fields of ``inspect.FileStats``, each timestamp as the pair
    every time is made of (ISO 8601, and its ``_ms`` twin: 0 for none; tables then show local time)."""

    file: str
    from_offset: int
    to_offset: int
    size: int
    data_bytes: int
    records: int
    first_store_time: str | None
    first_store_time_ms: int
    last_store_time: str | None
    last_store_time_ms: int
    tail: str
    topics: dict[str, int]
    error: str | None


def _commitlog_row(stats: inspect.FileStats) -> CommitLogFile:
    return {
        "file": stats.file,
        "from_offset": stats.from_offset,
        "to_offset": stats.to_offset,
        "size": stats.size,
        "data_bytes": stats.data_bytes,
        "records": stats.records,
        "first_store_time": _iso(stats.first_store_timestamp),
        "first_store_time_ms": stats.first_store_timestamp or 0,
        "last_store_time": _iso(stats.last_store_timestamp),
        "last_store_time_ms": stats.last_store_timestamp or 0,
        "tail": stats.tail,
        "topics": dict(stats.topics),
        "error": stats.error,
    }


def commitlog_ls(root: str | Path, *, progress: Progress | None = None) -> list[CommitLogFile]:
    """Each CommitLog file: offset range, size, data bytes, records, first/last store time (ISO 8601),
    how its data ends (blank-filler, zeros, end-of-file or corrupt), records per topic."""
    return [_commitlog_row(stats) for stats in inspect.commitlog_files(layout(root), progress=progress)]


def commitlog_bytes(root: str | Path) -> int:
    """Total size of the CommitLog files (the progress bar's length)."""
    return layout(root).commitlog_bytes()


# ------------------------------------------------------------------------------- consume queue


def cq_ls(root: str | Path, topic: str | None = None) -> list[inspect.QueueStats]:
    """Every ConsumeQueue (or those of ``topic``): files, offset range and message count."""
    lay = layout(root)
    if topic and not lay.queues(topic):
        raise NotFoundError(f"no ConsumeQueue for topic {topic!r} in {lay.root}")
    return Rows.of(inspect.QueueStats, inspect.queues(lay, topic))


class QueueUnit(TypedDict):
    """A row of ``store cq show``: a unit, what is wrong with it, and the record it points at (the fields
    of :class:`~mqctl.services.messages.MessageSummary` its queue does not already say)."""

    queue_offset: int
    commit_log_offset: int
    size: int
    tags_code: int
    error: NotRequired[str]
    msg_id: NotRequired[str]
    unique_key: NotRequired[str | None]
    tags: NotRequired[str | None]
    keys: NotRequired[str | None]
    store_time: NotRequired[str | None]
    store_time_ms: NotRequired[int]
    body_size: NotRequired[int]


def cq_show(
    root: str | Path, topic: str, queue_id: int, *, offset: int | None = None, count: int = 20
) -> list[QueueUnit]:
    """Units of one queue from ``offset`` (default: the oldest), each with the record it points at."""
    lay = layout(root)
    held = [q for _, q in lay.queues(topic)]
    if queue_id not in held:  # which are here, as the online 'msg show' names a topic's queues
        here = f"its queues here: {', '.join(map(str, held))}" if held else f"no queue of {topic!r} is here"
        raise NotFoundError(f"no ConsumeQueue {topic}/{queue_id} in {lay.root} ({here})")
    page = inspect.queue_units(lay, topic, queue_id, offset=offset, count=count)
    if not page.min_offset <= page.start < page.max_offset:
        raise NotFoundError(
            f"offset {page.start} is outside {topic}/{queue_id} (it holds {page.min_offset}..{page.max_offset - 1})"
        )
    rows = Rows.of(QueueUnit)
    for unit in page.units:
        row: QueueUnit = {
            "queue_offset": unit.queue_offset,
            "commit_log_offset": unit.commit_log_offset,
            "size": unit.size,
            "tags_code": unit.tags_code,
        }
        if unit.error is not None:
            row["error"] = unit.error
        if unit.message is not None:
            found = summary(unit.message)
            row |= {
                "msg_id": found["msg_id"],
                "unique_key": found["unique_key"],
                "tags": found["tags"],
                "keys": found["keys"],
                "store_time": found["store_time"],
                "store_time_ms": found["store_time_ms"],
                "body_size": found["body_size"],
            }
        rows.append(row)
    return rows


# ---------------------------------------------------------------------------------- index files


class IndexFileRow(TypedDict):
    """A row of ``store index ls``: an IndexFile's header, each timestamp as the pair every time is made of;
    ``problem``: what is wrong with it (the broker rebuilds such a file)."""

    name: str
    size: int
    begin_time: str | None
    begin_time_ms: int
    end_time: str | None
    end_time_ms: int
    begin_phy_offset: int
    end_phy_offset: int
    hash_slots: int
    hash_slot_count: int
    index_count: int
    max_index_count: int
    full: bool
    problem: str | None


class IndexFileShow(IndexFileRow):
    """``store index show``: the header, then its slot table's hash-chain statistics."""

    entries: int
    used_slots: int
    longest_chain: int
    average_chain: float
    slots_pointing_past_count: int


class ChainRow(TypedDict):
    """A row of ``store index chain``: one entry of a hash chain."""

    entry: int
    key_hash: int
    hash_match: bool
    commit_log_offset: int
    store_time: str | None
    store_time_ms: int
    prev: int
    record_has_key: bool
    error: NotRequired[str]
    msg_id: NotRequired[str]


def _index_row(header: inspect.IndexHeader) -> IndexFileRow:
    return {
        "name": header.name,
        "size": header.size,
        "begin_time": _time(header.begin_timestamp),
        "begin_time_ms": header.begin_timestamp or 0,
        "end_time": _time(header.end_timestamp),
        "end_time_ms": header.end_timestamp or 0,
        "begin_phy_offset": header.begin_phy_offset,
        "end_phy_offset": header.end_phy_offset,
        "hash_slots": header.hash_slots,
        "hash_slot_count": header.hash_slot_count,
        "index_count": header.index_count,
        "max_index_count": header.max_index_count,
        "full": header.full,
        "problem": header.problem,
    }


def index_ls(root: str | Path) -> list[IndexFileRow]:
    """Each IndexFile's header: time and CommitLog range, used slots, entries, whether it is full."""
    return Rows.of(IndexFileRow, (_index_row(h) for h in inspect.index_headers(layout(root))))


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


def index_show(root: str | Path, name: str | None = None) -> IndexFileShow:
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


def index_chain(root: str | Path, topic: str, key: str, name: str | None = None) -> list[ChainRow]:
    """The raw hash chain for ``topic#key`` in one IndexFile: every entry, and whether it is that key's."""
    lay = layout(root)
    full_key = f"{topic}#{key}"
    rows: list[ChainRow] = []
    for e in inspect.key_chain(lay, _pick_index(lay, name), topic, key):
        row: ChainRow = {
            "entry": e.entry,
            "key_hash": e.key_hash,
            "hash_match": e.hash_match,
            "commit_log_offset": e.commit_log_offset,
            "store_time": _time(e.store_timestamp),
            "store_time_ms": e.store_timestamp or 0,
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


#: What an operator can do about a damaged record found offline.
_DAMAGED_HINT = (
    "never served: the broker sets it aside in a quarantine when it reads it; store verify lists the damage"
)


def query_key(
    root: str | Path, topic: str, key: str, window: Window, *, max_num: int = 64, body: bool = True
) -> list[MessageRow]:
    """Messages of ``topic`` with ``key`` in KEYS, through the on-disk IndexFiles, each verified against
    its record (the index holds hashes only): the rows of the online ``msg query --key`` (``body``: with
    the body)."""
    damaged: list[int] = []
    found = inspect.messages_by_key(
        layout(root), topic, key, window.begin_ms, window.end_ms, max_num=max_num, damaged=damaged
    )
    if not found and damaged:
        raise StoreError(
            f"no intact message with key {key!r} in topic {topic!r}: the index leads only to damaged "
            f"{'record, at CommitLog offset' if len(damaged) == 1 else 'records, at CommitLog offsets'} "
            f"{', '.join(map(str, damaged))}",
            hint=_DAMAGED_HINT,
        )
    if not found:
        raise NotFoundError(f"no message with key {key!r} in topic {topic!r} stored {window.describe()}")
    return [
        with_body(m, summary(m), body) for m in sorted(found, key=lambda m: (m.store_timestamp, m.msg_id))
    ]


def query_id(root: str | Path, msg_id: str, *, body: bool = True) -> MessageDetail:
    """The record an offset message id points at (its address part names the broker, not checked here),
    as the online ``msg query --id`` shows it (``body``: with the body)."""
    _addr, offset = locate(msg_id)
    try:
        m = inspect.message_at_offset(layout(root), offset)
    except DamagedRecordError as exc:
        raise StoreError(f"message {msg_id} is damaged in this store: {exc}", hint=_DAMAGED_HINT) from None
    except CorruptRecordError as exc:
        raise NotFoundError(f"no message {msg_id}: {exc}") from exc
    if m is None:
        raise NotFoundError(f"no message {msg_id}: offset {offset} is outside the CommitLog")
    return {"found_by": "msg_id", **detail(m, body=body)}


# -------------------------------------------------------------------------------------- verify


def verify(
    root: str | Path, *, max_problems: int | None = None, progress: Progress | None = None
) -> inspect.VerifyReport:
    """CRC of every record, every ConsumeQueue unit and index entry against the CommitLog (see
    :func:`store.inspect.verify`). Ctrl-C ends the walk, not the call: ``interrupted`` says where."""
    return inspect.verify(layout(root), max_problems=max_problems, progress=progress, partial=True)


# ---------------------------------------------------------------------------- compare with a broker


@dataclass
class Difference:
    """One CommitLog offset where this store and the broker disagree."""

    commit_log_offset: int
    where: str  # differs, only here (this store), only there (the broker)
    here: str | None  # the record of this store there (topic/queue offset msgId)
    there: str | None  # the broker's


@dataclass
class Comparison:
    """This store's CommitLog against a live broker's, record by record (``store verify --against``)."""

    against: str
    ok: bool  # every record of this store is the broker's, byte for byte, at the same offset
    compared: int
    same: int
    differing: int
    only_here: int  # records of this store past the broker's end
    only_there_bytes: int  # CommitLog bytes the broker holds past this store's end (a slave's lag)
    first_difference: int | None  # the first offset where they differ (or where one of them ends)
    not_compared: int  # records below the broker's first CommitLog offset (expired there)
    here_min_offset: int
    here_end: int
    there_min_offset: int
    there_end: int
    differences: list[Difference] = field(default_factory=list)
    differences_not_listed: int = 0
    notes: list[str] = field(default_factory=list)


#: Records compared per round of concurrent VIEW_MESSAGE_BY_ID requests.
COMPARE_BATCH = 256


def _describe(raw: bytes | None, offset: int) -> str | None:
    if raw is None:
        return None
    try:
        m = decode_record(raw, check_crc=False)
    except CorruptRecordError:
        return f"{len(raw)} bytes that do not parse"
    own = "" if m.commit_log_offset == offset else f", says it is at {m.commit_log_offset}"
    return f"{m.topic}/{m.queue_id} offset {m.queue_offset} ({len(raw)} bytes{own})"


async def compare_with(
    admin: Admin, root: str | Path, addr: str, *, max_listed: int | None = None, concurrency: int = 32
) -> Comparison:
    """Compare the store at ``root`` (a slave's, say) with the live broker at ``addr`` (its master): each
    record of this store against the bytes the broker's VIEW_MESSAGE_BY_ID answers at the same offset
    (which a real 4.9.8 broker serves too), then the broker's records past this store's end. Lists the
    first ``max_listed`` differences (all when None); counts every one."""
    lay = layout(root)
    info = await admin.broker_runtime_info(addr)
    there_min, there_end = int(info["commitLogMinOffset"]), int(info["commitLogMaxOffset"])
    gate = asyncio.Semaphore(concurrency)
    spans: list[inspect.LogSpan] = []
    out = Comparison(addr, True, 0, 0, 0, 0, 0, None, 0, 0, 0, there_min, there_end)

    def differ(offset: int, where: str, here: bytes | None, there: bytes | None) -> None:
        if out.first_difference is None or offset < out.first_difference:
            out.first_difference = offset
        if max_listed is None or len(out.differences) < max_listed:
            out.differences.append(
                Difference(offset, where, _describe(here, offset), _describe(there, offset))
            )
        else:
            out.differences_not_listed += 1

    async def theirs(offset: int) -> bytes | None:
        async with gate:
            return await wire.view_raw(admin, addr, offset)

    async def compare(batch: list[tuple[int, bytes]]) -> None:
        answers = await asyncio.gather(*(theirs(offset) for offset, _ in batch))
        for (offset, mine), there in zip(batch, answers, strict=True):
            out.compared += 1
            if there == mine:
                out.same += 1
            else:
                out.differing += 1
                differ(offset, "differs", mine, there)

    batch: list[tuple[int, bytes]] = []
    for offset, raw in inspect.raw_records(lay, spans.append):
        if offset < there_min:
            out.not_compared += 1
        elif offset >= there_end:
            await compare(batch)  # listed in offset order: those below go first
            batch = []
            out.only_here += 1
            differ(offset, "only here", raw, None)
        else:
            batch.append((offset, raw))
            if len(batch) >= COMPARE_BATCH:
                await compare(batch)
                batch = []
    await compare(batch)
    [span] = spans
    out.here_min_offset, out.here_end = span.min_offset, span.end_offset
    if span.corruption is not None:
        out.notes.append(f"this store's records end early, at damage: {span.corruption}")
    out.only_there_bytes = max(0, there_end - span.end_offset)
    if out.only_there_bytes:
        await _only_there(
            admin, addr, span.end_offset, there_end, lay.commit_log_file_size, differ, max_listed
        )
    out.differences.sort(key=lambda d: d.commit_log_offset)
    out.ok = out.differing == 0 and out.only_here == 0
    return out


async def _only_there(
    admin: Admin,
    addr: str,
    offset: int,
    end: int,
    file_size: int,
    differ: Callable[[int, str, bytes | None, bytes | None], None],
    max_listed: int | None,
) -> None:
    """List the broker's records from ``offset`` (this store's end) on, as far as the listing goes: each
    answer's TOTALSIZE leads to the next; no record where one should be skips to the next file."""
    listed = 0
    while offset < end and (max_listed is None or listed < max_listed):
        raw = await wire.view_raw(admin, addr, offset)
        if raw is None or len(raw) < 4:
            nxt = offset - offset % file_size + file_size  # the blank filler ends a file: the next one
            if nxt >= end or await wire.view_raw(admin, addr, nxt) is None:
                return
            offset = nxt
            continue
        differ(offset, "only there", None, raw)
        listed += 1
        offset += int.from_bytes(raw[:4], "big")
