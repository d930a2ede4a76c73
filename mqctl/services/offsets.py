"""Consumer offsets: show them, and reset them with a plan first (kafka-consumer-groups style).

A reset computes, per queue, current -> new and changes nothing until executed. Executing writes
the offsets with UPDATE_CONSUMER_OFFSET where the group has no online consumer (mqadmin's fallback,
which works on any 4.x broker); where it has, only time-based resets are possible, through
INVOKE_BROKER_TO_RESET_OFFSET, which makes the broker tell its members (RESET_CONSUMER_CLIENT_OFFSET):
running clients would overwrite offsets committed behind their backs. Other resets are refused
(ConflictError) with the members listed, as ``kafka-consumer-groups --reset-offsets`` refuses on an
active group.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TypedDict

from daemon.broker.bodies import ConnectionInfo, MessageQueue
from daemon.remoting.errors import RemotingError
from mqctl.admin.client import Admin
from mqctl.errors import ConflictError, MqctlError, NotFoundError, NothingReadError, UsageError
from mqctl.services.cluster import brokers
from mqctl.services.fanout import Runner, direct, each_broker
from mqctl.services.topics import queue_offsets
from mqctl.timespec import iso
from mqctl.units import plural
from store import SubscriptionGroupConfig


@dataclass(frozen=True)
class ResetTarget:
    """Exactly one way of choosing the new offsets."""

    kind: str  # earliest | latest | time | offset | shift | file | group
    value: int = 0
    plan_file: Path | None = None
    #: ``group``: the group whose committed offsets are copied (mqadmin cloneGroupOffset).
    source: str | None = None
    #: A plan file made by a time target records it: the broker can then apply the file to live members.
    file_time: int | None = None

    @property
    def time_based(self) -> int | None:
        """The timestamp the broker can apply itself, or None when the plan is per queue."""
        if self.kind == "file":
            return self.file_time
        return {"earliest": 0, "latest": -1}.get(self.kind, self.value if self.kind == "time" else None)


@dataclass
class PlanRow:
    topic: str
    broker_name: str
    broker_addr: str
    queue_id: int
    min_offset: int
    max_offset: int
    consumer_offset: int | None
    new: int

    @property
    def change(self) -> int:
        return self.new - (self.consumer_offset or 0)


class OffsetRow(TypedDict):
    """A row of ``offset show``: a queue's range and the group's committed offset (None: never committed);
    the lag counts from where the broker starts a consumer of the group (None: its consumeFromWhere says)."""

    topic: str
    broker_name: str
    queue_id: int
    min_offset: int
    max_offset: int
    consumer_offset: int | None
    lag: int | None


class QueueReset(TypedDict):
    """One queue of a reset plan."""

    broker_name: str
    queue_id: int
    consumer_offset: int | None
    new: int
    change: int


class ResetResult(TypedDict):
    """``offset reset``: the plan, and how it was applied (or that it was not)."""

    group: str
    topic: str
    executed: bool
    applied: str
    queues: list[QueueReset]


async def show(admin: Admin, group: str, topic: str) -> list[OffsetRow]:
    """Each queue's range and the group's committed offset. A group no broker of the topic knows is
    NotFoundError, as for a reset: QUERY_CONSUMER_OFFSET answers 0 for it, so a typo read "committed 0".

    The lag counts from the offset QUERY_CONSUMER_OFFSET answers, where the broker starts a consumer of
    the group: the committed one, or 0 on a young queue the group never committed on (whatever the
    consumer's consumeFromWhere); elsewhere it is None (consumeFromWhere decides where a consumer starts)."""
    rows = await _queues(admin, group, topic, reads=True)
    if rows and not await _group_known(admin, group, rows, sorted({r.broker_addr for r in rows})):
        raise _unknown(group, topic, hint="check the name ('mqctl group list')")
    fresh = await never_committed(
        admin, [(r.broker_addr, group, r.topic, r.queue_id) for r in rows if r.consumer_offset == 0]
    )
    return [
        {
            "topic": r.topic,
            "broker_name": r.broker_name,
            "queue_id": r.queue_id,
            "min_offset": r.min_offset,
            "max_offset": r.max_offset,
            "consumer_offset": None
            if (r.broker_addr, group, r.topic, r.queue_id) in fresh
            else r.consumer_offset,
            "lag": None if r.consumer_offset is None else r.max_offset - r.consumer_offset,
        }
        for r in rows
    ]


#: A queue as a group's offset on it is asked for: (broker address, group, topic, queue id).
GroupQueue = tuple[str, str, str, int]


async def never_committed(
    admin: Admin, zeros: Iterable[GroupQueue], *, strict: bool = False, run: Runner = direct
) -> set[GroupQueue]:
    """Of ``zeros`` (broker address, group, topic, queue id), queues whose broker answered the group's
    offset as 0, those the group is not known to have committed on. Both answers say 0 for a queue it never
    committed on: GET_CONSUME_STATS on every queue, QUERY_CONSUMER_OFFSET on a young one (where the broker
    starts a new consumer); only the broker's offset table (GET_ALL_CONSUMER_OFFSET, read once per broker
    where a 0 was answered) tells. A broker whose table cannot be read leaves its 0s unknown: they are in
    the set too, and the failure is recorded (one warning naming the broker), never raised; ``strict`` (a
    plan that writes) raises NothingReadError instead: an unknown 0 read as never committed moves offsets.
    ``run`` runs each read (:class:`~mqctl.services.fanout.Runner`)."""
    wanted = list(zeros)
    if not wanted:
        return set()
    addrs = sorted({addr for addr, *_ in wanted})
    tables = await each_broker(
        admin, addrs, lambda addr: run(addr, admin.all_consumer_offsets(addr)), required=False
    )
    unread = [addr for addr in addrs if addr not in tables]
    if strict and unread:
        raise NothingReadError(
            f"cannot plan offsets: the offset table of {', '.join(unread)} could not be read "
            "(GET_ALL_CONSUMER_OFFSET): whether the group committed there is unknown",
            hint="retry once the broker answers",
        )
    return {(a, g, t, q) for a, g, t, q in wanted if a not in tables or (g, t, q) not in tables[a]}


async def _queues(admin: Admin, group: str, topic: str, *, reads: bool = False) -> list[PlanRow]:
    """Each queue's offsets and the group's committed one; ``reads``: from a slave while a master is down
    (a reset plan only ever reads and writes masters)."""
    rows = []
    for name, addr, queue_id, off in await queue_offsets(admin, topic, reads=reads):
        current = await admin.consumer_offset(addr, group, topic, queue_id)
        rows.append(
            PlanRow(topic, name, addr, queue_id, off.min_offset, off.max_offset, current, current or 0)
        )
    return rows


async def _committed_queues(admin: Admin, group: str, topic: str) -> list[PlanRow]:
    """:func:`_queues` with no ``consumer_offset`` where the group never committed: the 0 a young queue's
    broker answers for it is where a consumer starts, not an offset the plan would move from. Strict (see
    :func:`never_committed`): every mode plans a write from it."""
    rows = await _queues(admin, group, topic)
    fresh = await never_committed(
        admin,
        [(r.broker_addr, group, r.topic, r.queue_id) for r in rows if r.consumer_offset == 0],
        strict=True,
    )
    for row in rows:
        if (row.broker_addr, group, row.topic, row.queue_id) in fresh:
            row.consumer_offset = None
    return rows


def _clamp(value: int, row: PlanRow) -> int:
    return max(row.min_offset, min(value, row.max_offset))


PLAN_KIND = "offset-reset"


async def plan(admin: Admin, group: str, topic: str, target: ResetTarget) -> list[PlanRow]:
    """Per queue: where the group is, and where the reset would put it (clamped to what is stored).

    A plan file (``--from-file``) must be this command's plan: its kind, group, topic and cluster are
    checked, and it must name at least one of the topic's queues (else UsageError, exit 2).
    """
    rows = await _committed_queues(admin, group, topic)
    from_file: dict[tuple[str, int], int] = {}
    if target.kind == "file" and target.plan_file:
        from_file, _ = _read_plan(target.plan_file, group, topic, await _clusters(admin, rows))
        if not any((r.broker_name, r.queue_id) in from_file for r in rows):
            raise UsageError(f"plan file {target.plan_file} matches no queue of topic {topic!r}")
    copied: dict[tuple[str, int], int] = {}
    if target.kind == "group" and target.source:
        source = await _committed_queues(admin, target.source, topic)
        if not await _group_known(admin, target.source, source, sorted({r.broker_addr for r in source})):
            raise _unknown(target.source, topic, hint="--from-group names the group whose offsets are copied")
        copied = {
            (r.broker_name, r.queue_id): r.consumer_offset for r in source if r.consumer_offset is not None
        }
    for row in rows:
        if target.kind == "earliest":
            row.new = row.min_offset
        elif target.kind == "latest":
            row.new = row.max_offset
        elif target.kind == "time":
            row.new = await admin.search_offset(row.broker_addr, topic, row.queue_id, target.value)
        elif target.kind == "offset":
            row.new = _clamp(target.value, row)
        elif target.kind == "shift":
            row.new = _clamp((row.consumer_offset or 0) + target.value, row)
        elif target.kind == "file":
            row.new = _clamp(from_file.get((row.broker_name, row.queue_id), row.consumer_offset or 0), row)
        elif target.kind == "group":  # a queue the source never committed on keeps where it is
            row.new = _clamp(copied.get((row.broker_name, row.queue_id), row.consumer_offset or 0), row)
    return rows


async def _clusters(admin: Admin, rows: list[PlanRow]) -> str:
    """The clusters holding the plan's brokers, as a plan file records them."""
    names = {r.broker_name for r in rows}
    return ",".join(sorted({b.cluster for b in await brokers(admin) if b.broker_name in names}))


def plan_target(path: Path) -> tuple[str, str]:
    """The group and topic a plan file was made for: applying one needs no -g/-t, as export's line says."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        group, topic = doc["group"], doc["topic"]
        if doc.get("kind") != PLAN_KIND or not isinstance(group, str) or not isinstance(topic, str):
            raise ValueError("no group and topic")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        raise UsageError(
            f"{path} is not an offset reset plan; export one with 'mqctl offset reset ... --export FILE'"
        ) from None
    return group, topic


def _read_plan(
    path: Path, group: str, topic: str, cluster: str
) -> tuple[dict[tuple[str, int], int], int | None]:
    """The plan's new offset per (broker name, queue id), and the time target it was made by, if one."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(doc, dict) or doc.get("kind") != PLAN_KIND:
            raise UsageError(
                f"{path} is not an offset reset plan (it records no kind {PLAN_KIND!r}); "
                "export one with 'mqctl offset reset ... --export FILE'"
            )
        wanted = {"group": group, "topic": topic, "cluster": cluster}
        wrong = [f"{k} {doc.get(k)!r} (this command: {v!r})" for k, v in wanted.items() if doc.get(k) != v]
        if wrong:
            raise UsageError(f"plan file {path} was made for another target: {', '.join(wrong)}")
        return {(r["broker_name"], int(r["queue_id"])): int(r["new"]) for r in doc["queues"]}, (
            int(doc["target_time_ms"]) if doc.get("target_time_ms") is not None else None
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"cannot use plan file {path}: {exc}") from None


def export(
    rows: list[PlanRow],
    path: Path,
    *,
    group: str,
    topic: str,
    cluster: str,
    target: ResetTarget | None = None,
) -> None:
    """Save a plan in the form --from-file reads back, bound to its group, topic and cluster; a time target
    (``target_time_ms``: 0 earliest, -1 latest) is kept, so that the file applies to live members too."""
    now = time.time()
    doc = {
        "kind": PLAN_KIND,
        "group": group,
        "topic": topic,
        "cluster": cluster,
        "created": iso(int(now * 1000)),
        "created_ms": int(now * 1000),
        "target_time_ms": target.time_based if target is not None else None,
        "queues": [asdict(r) for r in rows],
    }
    path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")


async def execute(admin: Admin, group: str, topic: str, target: ResetTarget, rows: list[PlanRow]) -> str:
    """Apply a plan; returns how it was applied.

    A broker where the group has live members resets through INVOKE_BROKER_TO_RESET_OFFSET, which
    tells the members to adopt the new offsets; a commit of ours would be overwritten by theirs.
    Only a time-based target can be sent that way, so any other plan is refused while members live.
    """
    members: dict[str, list[ConnectionInfo]] = {}
    for addr in sorted({r.broker_addr for r in rows}):
        found = await admin.consumer_connections(addr, group)
        members[addr] = found.connection_set if found else []
    live = sorted({(c.client_id, c.client_addr) for found in members.values() for c in found})
    timestamp = target.time_based
    if live:
        if timestamp is None:
            listed = ", ".join(f"{client} ({addr})" for client, addr in live)
            raise ConflictError(
                f"group {group!r} has live consumers that would overwrite a per-queue reset: {listed}",
                hint="stop them first, or reset with --to-earliest/--to-latest/--to-time/--by-duration",
            )
        for addr in [a for a, found in members.items() if found]:
            await _commit_where_never_committed(
                admin, group, topic, [r for r in rows if r.broker_addr == addr]
            )
            applied = await admin.reset_offset_by_time(addr, topic, group, timestamp)
            for row in rows:  # report what the broker computed, which may differ from the plan
                row.new = applied.get(MessageQueue(topic, row.broker_name, row.queue_id), row.new)
    for row in rows:  # each, unchanged ones too: a group that never committed reads as 0 (see _queues)
        if not members[row.broker_addr]:
            await admin.commit_offset(row.broker_addr, group, topic, row.queue_id, row.new)
    if not live:
        return "offsets committed (no consumer online)"
    return f"broker reset, {plural(len(live), 'online consumer')} told to follow"


async def _commit_where_never_committed(admin: Admin, group: str, topic: str, rows: list[PlanRow]) -> None:
    """Commit the plan's offsets on a broker where the group never committed on ``topic``: a broker resets
    only the offsets it holds (4.9.8's ``Broker2Client#resetOffset`` answers "THe consumer group ... not
    exist" otherwise), and members that never commit (``msg tail -g``, a consumer that just started) hold
    none there. The broker's reset that follows then tells them."""
    if not rows:
        return
    stats = await admin.consume_stats(rows[0].broker_addr, group)
    if any(mq.topic == topic for mq in stats.offset_table):
        return
    for row in rows:
        await admin.commit_offset(row.broker_addr, group, topic, row.queue_id, row.new)


async def _replicas_note(admin: Admin, topic: str, rows: list[PlanRow]) -> str:
    """What an executed reset says of the plan's broker groups that have slaves or DLedger followers: they
    take the offsets at their next metadata sync, and a failover before it serves the old ones (see
    docs/replication.md §a-change-younger-than-a-sync)."""
    from daemon.broker.ha import METADATA_SYNC_INTERVAL

    names = {r.broker_name for r in rows}
    try:
        data = await admin.topic_route(topic)
    except (MqctlError, RemotingError, OSError):  # the reset is done: a route not read says it of every group
        replicated = sorted(names)
    else:
        replicated = sorted(
            b.broker_name for b in data.broker_datas if b.broker_name in names and len(b.broker_addrs) > 1
        )
    if not replicated:
        return ""
    return (
        f"; the slaves or followers of {', '.join(replicated)} take the offsets at their next metadata sync,"
        f" within {METADATA_SYNC_INTERVAL:g} s: a failover before then undoes the reset there"
    )


def _unknown(group: str, topic: str, *, hint: str) -> NotFoundError:
    return NotFoundError(
        f"group {group!r} does not exist on the brokers of {topic!r} (no subscription group, no offsets)",
        hint=hint,
    )


async def _group_known(admin: Admin, group: str, rows: list[PlanRow], addrs: list[str]) -> bool:
    """Whether ``group`` is a subscription group on one of the plan's masters (a live consumer's broker
    creates it on the first heartbeat) or has committed an offset on the plan's topic."""
    tables = await asyncio.gather(*(admin.group_configs(addr) for addr in addrs))
    if any(group in table for table in tables):
        return True
    # QUERY_CONSUMER_OFFSET answers 0 for a group that never committed: ask which topics it committed on
    # (GET_CONSUME_STATS without a topic lists only those, as 4.9.8's whichTopicByConsumer)
    stats = await asyncio.gather(*(admin.consume_stats(addr, group) for addr in addrs))
    return any(mq.topic == rows[0].topic for s in stats for mq in s.offset_table)


def _plan_only(export_to: Path | None) -> str:
    """What a plan that changed nothing says next: a saved plan, how to apply that very file (the plan
    said "add --execute", which plans again at that moment, not what was reviewed)."""
    if export_to is None:
        return "plan only: add --execute to apply"
    import shlex

    return (
        f"plan only, saved to {export_to}: apply it with --from-file {shlex.quote(str(export_to))} --execute"
    )


async def reset(
    admin: Admin,
    group: str,
    topic: str,
    target: ResetTarget,
    *,
    execute_plan: bool,
    export_to: Path | None,
    confirm: Callable[[list[PlanRow]], None] | None = None,
    create_group: bool = False,
) -> ResetResult:
    """Plan, optionally export, and with ``execute_plan`` apply once ``confirm(plan)`` returns.

    A group no master of the topic knows (no subscription group, no committed offset) is refused: it is
    most likely a typo, and a reset would commit offsets for it. ``create_group`` creates it on the
    topic's masters instead (on --execute)."""
    rows = await plan(admin, group, topic, target)
    if not rows:
        raise NotFoundError(f"topic {topic!r} has no queues")
    if target.kind == "file" and target.plan_file is not None:
        _, file_time = _read_plan(target.plan_file, group, topic, await _clusters(admin, rows))
        target = dataclasses.replace(target, file_time=file_time)
    addrs = sorted({r.broker_addr for r in rows})
    missing = not await _group_known(admin, group, rows, addrs)
    if missing and not create_group:
        raise _unknown(
            group, topic, hint="check the name ('mqctl group list'), or add --create-group to create it"
        )
    if export_to is not None:
        export(rows, export_to, group=group, topic=topic, cluster=await _clusters(admin, rows), target=target)
    if execute_plan and confirm is not None:
        confirm(rows)
    if execute_plan and missing:
        for addr in addrs:
            await admin.create_group(addr, SubscriptionGroupConfig(group))
    applied = await execute(admin, group, topic, target, rows) if execute_plan else None
    if applied is not None:
        applied += await _replicas_note(admin, topic, rows)
    return {
        "group": group,
        "topic": topic,
        "executed": execute_plan,
        "applied": applied or _plan_only(export_to),
        "queues": [
            {
                "broker_name": r.broker_name,
                "queue_id": r.queue_id,
                "consumer_offset": r.consumer_offset,
                "new": r.new,
                "change": r.change,
            }
            for r in rows
        ],
    }
