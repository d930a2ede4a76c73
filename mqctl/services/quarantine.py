"""Quarantined data of a store (what recovery set aside instead of deleting): list it, and salvage its
intact records as JSON lines or by sending them again.

Reading a quarantine never touches the live store (no lock, nothing written there), so every command is
safe next to a running broker; the walking is :mod:`store.quarantine`'s, this module only shapes rows.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from daemon.remoting.codes import ResponseCode
from daemon.remoting.errors import RemotingCommandError
from mqctl.admin.client import Admin
from mqctl.errors import NotFoundError
from mqctl.services.messages import (
    PROPERTY_SALVAGED_FROM,
    SALVAGED_NAMESPACE,
    MessageIdentity,
    body_fields,
    host_text,
    resend_one,
)
from mqctl.timespec import iso
from mqctl.units import when
from store import (
    COMMITLOG,
    INTERNAL_TOPIC_PREFIX,
    PROPERTY_REAL_TOPIC,
    SCHEDULE_TOPIC,
    SYSTEM_TOPIC_PREFIX,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    CorruptRecordError,
    Manifest,
    Piece,
    StoredMessage,
    inspect,
    list_quarantines,
    piece_records,
)


@dataclass
class QuarantineRow:
    """One quarantine as ``store verify`` lists it."""

    name: str
    created: str
    recovery: str
    why: str
    cut_offset: int
    files: int
    records_set_aside: int
    damaged_records: int
    consume_queue_units: int
    resent: str | None  # when 'salvage --resend' last ran on it
    path: str


def quarantine_rows(root: str | Path) -> list[QuarantineRow]:
    """Every quarantine of the store at ``root``, oldest first (-1: unknown, its manifest is missing)."""
    return [
        QuarantineRow(
            m.name,
            m.created,
            m.recovery,
            m.why,
            m.cut_offset,
            len(m.files),
            m.records,
            m.damaged,
            m.units,
            m.resent[-1]["at"] if m.resent else None,
            m.path,
        )
        for m in list_quarantines(str(root))
    ]


def chosen(root: str | Path, names: Iterable[str] = ()) -> list[Manifest]:
    """The quarantines named (default: all, none for a store recovery never cut: nothing to salvage is
    no error); NotFoundError for a directory that is no store or a name that is unknown."""
    found = list_quarantines(str(root))
    wanted = list(names)
    if not wanted:
        if not found and (why := inspect.not_a_store(Path(root))) is not None:
            raise NotFoundError(why)
        return found
    if not found:
        raise NotFoundError(f"no quarantine {', '.join(wanted)} in {root}: nothing was ever set aside")
    by_name = {m.name: m for m in found}
    unknown = [n for n in wanted if n not in by_name]
    if unknown:
        raise NotFoundError(f"no quarantine {', '.join(unknown)} in {root} (have: {', '.join(by_name)})")
    return [by_name[n] for n in wanted]


def _pieces(manifests: list[Manifest]) -> Iterator[tuple[Manifest, Piece]]:
    for m in manifests:
        for p in m.files:
            if p.kind == COMMITLOG:
                yield m, p


def records(
    manifests: list[Manifest],
) -> Iterator[tuple[Manifest, Piece, int, StoredMessage | CorruptRecordError | None]]:
    """Every record of the quarantines' CommitLog pieces: decoded, damaged (an error) or, for a piece
    that is gone, one ``None``."""
    for m, p in _pieces(manifests):
        try:
            for offset, rec in piece_records(m, p):
                yield m, p, offset, rec
        except FileNotFoundError:
            yield m, p, p.from_offset, None


@dataclass
class PlanRow:
    """What salvaging one CommitLog piece gives."""

    quarantine: str
    file: str
    from_offset: int
    to_offset: int
    intact: int
    damaged: int
    missing: bool
    topics: dict[str, int] = field(default_factory=dict)


def plan(manifests: list[Manifest]) -> list[PlanRow]:
    """Per CommitLog piece: intact records (by topic) and damaged ones, counted by walking the piece."""
    rows: dict[tuple[str, str], PlanRow] = {}
    topics: dict[tuple[str, str], Counter[str]] = {}
    for m, p in _pieces(manifests):
        rows[(m.name, p.file)] = PlanRow(m.name, p.file, p.from_offset, p.to_offset, 0, 0, False)
        topics[(m.name, p.file)] = Counter()
    for m, p, _offset, rec in records(manifests):
        row = rows[(m.name, p.file)]
        if rec is None:
            row.missing = True
        elif isinstance(rec, CorruptRecordError):
            row.damaged += 1
        else:
            row.intact += 1
            topics[(m.name, p.file)][rec.topic] += 1
    for key, row in rows.items():
        row.topics = dict(sorted(topics[key].items()))
    return list(rows.values())


class SalvagedRecord(MessageIdentity):
    """A line of ``store salvage --json``: where it was set aside (``quarantine``, ``file``, then
    ``commit_log_offset`` before the message's identity), with what it takes to send it again."""

    quarantine: str
    file: str
    commit_log_offset: int
    properties: dict[str, str]
    sys_flag: int
    flag: int
    reconsume_times: int
    born_time: str | None
    born_time_ms: int
    born_host: str
    store_time: str | None
    store_time_ms: int
    store_host: str
    body_encoding: str
    body: str


def as_json_line(m: Manifest, p: Piece, offset: int, msg: StoredMessage) -> SalvagedRecord:
    """A salvaged record as one JSON object: every field an operator needs to send it again, named as in
    ``msg query``/``dlq export`` (:func:`~mqctl.services.messages.body_fields` for the body)."""
    return {
        "quarantine": m.name,
        "file": p.file,
        "commit_log_offset": offset,
        "msg_id": msg.msg_id,
        "unique_key": msg.uniq_key,
        "topic": msg.topic,
        "queue_id": msg.queue_id,
        "queue_offset": msg.queue_offset,
        "tags": msg.tags,
        "keys": " ".join(msg.keys) or None,
        "properties": dict(msg.properties),
        "sys_flag": msg.sys_flag,
        "flag": msg.flag,
        "reconsume_times": msg.reconsume_times,
        "born_time": when(msg.born_timestamp),
        "born_time_ms": msg.born_timestamp or 0,
        "born_host": host_text(msg.born_host),
        "store_time": when(msg.store_timestamp),
        "store_time_ms": msg.store_timestamp or 0,
        "store_host": host_text(msg.store_host),
        **body_fields(msg.body),
    }


def resend_target(msg: StoredMessage) -> tuple[str | None, str | None]:
    """Where a salvaged record goes when re-sent, or why it is not: ``(topic, None)`` or ``(None, reason)``.

    A delayed record (in SCHEDULE_TOPIC_XXXX) goes to its real topic, now; transaction half and rollback
    records and the broker's own system topics are not messages to deliver.
    """
    if msg.transaction_type in (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE):
        return None, "transaction half or rollback record"
    if msg.topic == SCHEDULE_TOPIC:
        real = msg.properties.get(PROPERTY_REAL_TOPIC)
        return (real, None) if real else (None, "delayed record without REAL_TOPIC")
    if msg.topic.startswith((INTERNAL_TOPIC_PREFIX, SYSTEM_TOPIC_PREFIX)):
        return None, f"system topic {msg.topic}"
    return msg.topic, None


@dataclass
class Salvaged:
    """The outcome of re-sending one salvaged record."""

    quarantine: str
    commit_log_offset: int
    msg_id: str
    unique_key: str | None
    to_topic: str | None
    outcome: str  # RESENT, FAILED, SKIPPED or ALREADY RESENT (by an earlier run: new_msg_id is that copy)
    new_msg_id: str | None = None
    queue_id: int | None = None
    queue_offset: int | None = None
    error: str | None = None


async def resend(
    admin: Admin,
    items: list[tuple[Manifest, int, StoredMessage]],
    *,
    progress: Callable[[int], None] | None = None,
) -> list[Salvaged]:
    """Send each salvaged record again through ``msg resend``'s sender (body, tags, keys, UNIQ_KEY and user
    properties kept; broker-added ones dropped; the original msgId in ``MQCTL_SALVAGED_MSG_ID``); one
    failure does not stop the others. As ``msg resend`` records dead letters, each record sent is recorded
    in the NameServer's KV store (original msgId -> the copy's) right after its send, and a record found
    there is not sent again: a second run, or one after an interrupted run, sends no duplicates."""
    for topic in sorted({t for _, _, msg in items if (t := resend_target(msg)[0]) is not None}):
        try:  # an unreachable NameServer fails here, once, with its own error (a missing topic per record)
            await admin.topic_route(topic)
        except RemotingCommandError as exc:
            if exc.code != ResponseCode.TOPIC_NOT_EXIST:
                raise
    done = await admin.kv_list(SALVAGED_NAMESPACE)
    rr = itertools.count(random.randrange(1 << 16))
    out = []
    for m, offset, msg in items:
        target, why_not = resend_target(msg)
        if target is None:
            out.append(Salvaged(m.name, offset, msg.msg_id, msg.uniq_key, None, "SKIPPED", error=why_not))
        elif msg.msg_id in done:
            out.append(
                Salvaged(m.name, offset, msg.msg_id, msg.uniq_key, target, "ALREADY RESENT", done[msg.msg_id])
            )
        else:
            r = await resend_one(admin, msg, target, rr, mark=PROPERTY_SALVAGED_FROM)
            if r.outcome == "RESENT" and r.new_msg_id is not None:
                await admin.kv_put(SALVAGED_NAMESPACE, msg.msg_id, r.new_msg_id)
            out.append(
                Salvaged(
                    m.name,
                    offset,
                    msg.msg_id,
                    msg.uniq_key,
                    target,
                    r.outcome,
                    r.new_msg_id,
                    r.queue_id,
                    r.queue_offset,
                    r.error,
                )
            )
        if progress is not None:
            progress(1)
    return out


def note_resend(manifests: list[Manifest], outcomes: list[Salvaged], now_ms: int) -> None:
    """Record in each quarantine's manifest that (and how much of) it was re-sent (``store verify`` shows
    when)."""
    for m in manifests:
        mine = [o for o in outcomes if o.quarantine == m.name]
        counts = Counter(o.outcome for o in mine)
        m.resent.append(
            {
                "at": iso(now_ms),
                "records": len(mine),
                "resent": counts["RESENT"],
                "already_resent": counts["ALREADY RESENT"],
                "skipped": counts["SKIPPED"],
                "failed": counts["FAILED"],
            }
        )
        m.save()
