"""Consumer groups: configs, online clients, and per-queue progress (lag) from the brokers."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from collections.abc import Awaitable, Callable, Container, Iterable
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

from daemon.broker.bodies import ConsumerConnection, ConsumeStats, MessageQueue, OffsetWrapper
from daemon.broker.pop import parse_pop_in_flight
from daemon.remoting.codes import version_name
from daemon.remoting.errors import RemotingError
from mqctl.admin.client import Admin
from mqctl.errors import ConflictError, MqctlError, NotFoundError
from mqctl.output import Rows
from mqctl.services.cluster import masters, readers
from mqctl.services.fanout import (
    FailureRow,
    Runner,
    direct,
    each_broker,
    failures,
    gather_limited,
    record_failures,
)
from mqctl.services.offsets import GroupQueue, never_committed
from mqctl.services.topics import BrokerChange, apply_to_tables, not_kept, route_or_not_found, target_masters
from mqctl.units import plural, when
from store import CONSUME_MESSAGE_ORDERLY, SYSTEM_GROUPS, SubscriptionGroupConfig

#: A group's settings as mqctl names them everywhere (the flags, ``group show``, the changes of create, update
#: and apply, metadata files) -> the ``SubscriptionGroupConfig`` field (RocketMQ's Java name). ``group show``
#: and the changes spoke the Java names, so an apply plan said ``retry_max_times`` for its file's
#: ``max_retries``. ``GroupSpec`` has the same attribute names.
GROUP_FIELDS = {
    "retry_queues": "retry_queue_nums",
    "max_retries": "retry_max_times",
    "broadcast": "consume_broadcast_enable",
    "consume_from_min": "consume_from_min_enable",
    "enabled": "consume_enable",
    "broker_id": "broker_id",
    "slow_broker_id": "which_broker_when_consume_slowly",
    "notify_ids_changed": "notify_consumer_ids_changed_enable",
}


@dataclass(frozen=True)
class GroupSpec:
    """What an operator asks for; None keeps what the broker has (or RocketMQ's default)."""

    name: str
    retry_queues: int | None = None
    max_retries: int | None = None
    broadcast: bool | None = None
    consume_from_min: bool | None = None
    enabled: bool | None = None
    broker_id: int | None = None
    slow_broker_id: int | None = None
    notify_ids_changed: bool | None = None
    #: 5.x's ``consumeMessageOrderly`` (not in 4.9.8's config): its 5.x consumers receive FIFO
    orderly: bool | None = None

    def apply_to(self, current: SubscriptionGroupConfig | None) -> SubscriptionGroupConfig:
        base = current or SubscriptionGroupConfig(self.name)
        if self.orderly is not None and (self.orderly or CONSUME_MESSAGE_ORDERLY in base.extra):
            base = dataclasses.replace(base, extra={**base.extra, CONSUME_MESSAGE_ORDERLY: self.orderly})
        pairs = {field: getattr(self, name) for name, field in GROUP_FIELDS.items()}
        return dataclasses.replace(base, **{k: v for k, v in pairs.items() if v is not None})


@dataclass
class QueueProgress:
    topic: str
    broker_name: str
    queue_id: int
    max_offset: int  # the queue's end: what RocketMQ's ConsumeStats calls brokerOffset
    consumer_offset: int | None  # None: the group never committed on the queue (ConsumeStats says 0)
    lag: int | None  # from where the broker starts a consumer; None: its consumeFromWhere decides
    last_consumed_store_time: str | None  # ISO; None when nothing was consumed ("never" in tables)
    last_consumed_store_time_ms: int
    client_id: str | None


class GroupWrite(TypedDict):
    """``group create|update``: per master, what changed (none for a soft no-op: exists, missing)."""

    group: str
    action: str
    brokers: list[BrokerChange]
    #: What a master took without keeping it (a 4.9.x broker has no consumeMessageOrderly), read back
    #: after the write, as 'ADDR kept no consumeMessageOrderly=true'.
    not_kept: NotRequired[list[str]]


class GroupDeleted(TypedDict):
    """``group delete``: the masters it was deleted from, and whether its offsets went too."""

    group: str
    action: str
    offsets_removed: bool
    brokers: list[str]
    online_consumers: int  # deleted with its members online, as mqadmin does: said, not refused


class GroupRow(TypedDict):
    """A row of ``group list``."""

    group: str
    brokers: list[str]


class ClientRow(TypedDict):
    """One online client of a group."""

    client_id: str
    addr: str
    language: str
    version: int
    #: The version as Java names it (`V4_9_8`, `V5_1_2` for a 5.x client).
    version_name: str


class ConsumeSettings(TypedDict, total=False):
    """How a group's clients consume, as they registered it (empty when none is online)."""

    consume_type: str | None
    message_model: str | None
    consume_from_where: str | None


class GroupConnections(TypedDict):
    """``group connections``: the online clients and their subscriptions (topic → expression)."""

    group: str
    consume_type: NotRequired[str | None]
    message_model: NotRequired[str | None]
    consume_from_where: NotRequired[str | None]
    clients: list[ClientRow]
    subscriptions: dict[str, str]
    errors: list[FailureRow]


class GroupConfigFields(TypedDict):
    """A subscription group's config, named as :data:`GROUP_FIELDS` (the flags and metadata files) name it;
    ``extra`` holds the 5.x properties (``consumeMessageOrderly``, which is ``orderly`` too)."""

    group: str
    retry_queues: int
    max_retries: int
    broadcast: bool
    consume_from_min: bool
    enabled: bool
    broker_id: int
    slow_broker_id: int
    notify_ids_changed: bool
    orderly: bool
    extra: dict[str, Any]


class GroupShow(GroupConfigFields):
    """``group show``: the config, then where it is, who consumes and how far behind."""

    brokers: int
    online_clients: int
    #: Those clients (4.x and 5.x alike: language, version), and how they consume as they registered it
    #: (a 5.x SimpleConsumer CONSUME_ACTIVELY, a PushConsumer CONSUME_PASSIVELY).
    clients: list[ClientRow]
    consume_type: str | None
    topics: list[str]
    total_lag: int
    #: Queues whose lag is unknown (never committed on where consumeFromWhere decides the start, or a
    #: broker's offsets unread), left out of ``total_lag`` as ``group list --progress`` leaves them out.
    uncounted_queues: int
    #: POP (5.x) messages popped and not yet acked (``total_lag`` counts what is not popped yet).
    pop_in_flight: int
    consume_tps: float
    errors: list[FailureRow]


def config_fields(config: SubscriptionGroupConfig) -> GroupConfigFields:
    """The config as ``group show`` prints it (a copy: the record does not share the config's ``extra``)."""
    return {
        "group": config.group_name,
        "retry_queues": config.retry_queue_nums,
        "max_retries": config.retry_max_times,
        "broadcast": config.consume_broadcast_enable,
        "consume_from_min": config.consume_from_min_enable,
        "enabled": config.consume_enable,
        "broker_id": config.broker_id,
        "slow_broker_id": config.which_broker_when_consume_slowly,
        "notify_ids_changed": config.notify_consumer_ids_changed_enable,
        "orderly": config.orderly,
        "extra": copy.deepcopy(config.extra),
    }


async def _configs(
    admin: Admin, cluster: str | None, *, partial: bool = False
) -> dict[str, dict[str, SubscriptionGroupConfig]]:
    """Every master's group table; ``partial`` (reads): from the masters that answer (:func:`each_broker`)."""
    addrs = await masters(admin, cluster)
    if partial:
        return await each_broker(admin, addrs, admin.group_configs)
    tables = await asyncio.gather(*(admin.group_configs(addr) for addr in addrs))
    return dict(zip(addrs, tables, strict=True))


async def upsert(
    admin: Admin, spec: GroupSpec, *, cluster: str | None, broker: str | None, mode: str, soft: bool = False
) -> GroupWrite:
    """Create ('create'), change ('update') or make equal ('apply') a subscription group on its masters."""
    addrs = await target_masters(admin, cluster, broker)
    tables = await asyncio.gather(*(admin.group_configs(addr) for addr in addrs))
    existing = {addr: table.get(spec.name) for addr, table in zip(addrs, tables, strict=True)}
    exists = any(existing.values())
    if mode == "create" and exists:
        if soft:
            return {"group": spec.name, "action": "exists", "brokers": []}
        raise ConflictError(
            f"group {spec.name!r} already exists", hint="use 'mqctl group update' or --if-not-exists"
        )
    if mode == "update" and not exists:
        if soft:
            return {"group": spec.name, "action": "missing", "brokers": []}
        raise NotFoundError(f"group {spec.name!r} not found", hint="use 'mqctl group create' or --if-exists")
    changes: list[BrokerChange] = []
    dropped: list[str] = []
    for addr in addrs:
        old = existing[addr]
        new = spec.apply_to(old)
        diff = config_diff(old, new)
        if diff:
            await admin.create_group(addr, new)
            if spec.orderly:  # read back: a broker without the 5.x field answers success and drops it
                kept = (await admin.group_configs(addr)).get(spec.name)
                if kept is not None:
                    asked = {CONSUME_MESSAGE_ORDERLY: "true"}
                    dropped += not_kept(addr, asked, {k: str(v).lower() for k, v in kept.extra.items()})
        changes.append(
            {
                "broker": addr,
                "action": "unchanged" if not diff else ("created" if old is None else "updated"),
                "changes": diff,
            }
        )
    result: GroupWrite = {"group": spec.name, "action": mode, "brokers": changes}
    if dropped:
        result["not_kept"] = dropped
    return result


def config_diff(old: SubscriptionGroupConfig | None, new: SubscriptionGroupConfig) -> dict[str, list[Any]]:
    """Changed settings as ``[old, new]``, named as :data:`GROUP_FIELDS` (every one for a new group, and
    ``extra`` when it changed or, for a new group, is not empty)."""
    named = {**GROUP_FIELDS, "extra": "extra"}
    return {
        name: [getattr(old, field) if old else None, getattr(new, field)]
        for name, field in named.items()
        if (getattr(old, field) != getattr(new, field) if old else getattr(new, field) != {})
    }


async def apply_on(
    admin: Admin,
    spec: GroupSpec,
    tables: dict[str, dict[str, SubscriptionGroupConfig]],
    *,
    dry_run: bool,
) -> list[BrokerChange]:
    """Make a group what ``spec`` says on the masters of ``tables`` (address -> group table, read
    already): ``topic apply``'s plan and apply, for subscription groups."""
    return await apply_to_tables(
        tables, spec.name, spec.apply_to, config_diff, admin.create_group, dry_run=dry_run
    )


async def delete(
    admin: Admin,
    group: str,
    *,
    cluster: str | None,
    remove_offsets: bool,
    if_exists: bool = False,
    confirm: Callable[[str], None] | None = None,
) -> GroupDeleted:
    """Delete ``group`` from every master holding it. ``confirm`` is asked (and raises to refuse) once
    the group is found: a typo was asked about, and off a terminal refused for want of --yes, before
    anyone said the group is not there."""
    holders = [addr for addr, table in (await _configs(admin, cluster)).items() if group in table]
    if not holders and if_exists:
        return {
            "group": group,
            "action": "missing",
            "offsets_removed": False,
            "brokers": [],
            "online_consumers": 0,
        }
    if not holders:
        raise NotFoundError(f"group {group!r} not found", hint="see 'mqctl group list'")
    # (said, not refused: a broker that cannot tell its consumers does not stop the delete)
    answers = await each_broker(
        admin, holders, lambda addr: admin.consumer_connections(addr, group), required=False
    )
    online = len({c.client_id for found in answers.values() if found for c in found.connection_set})
    if confirm is not None:
        offsets = " and its offsets" if remove_offsets else ""
        members = f", with {plural(online, 'consumer')} of it online" if online else ""
        confirm(f"Delete group {group!r}{offsets} from {', '.join(holders)}{members}?")
    for addr in holders:
        await admin.delete_group(addr, group, remove_offsets=remove_offsets)
    return {
        "group": group,
        "action": "deleted",
        "offsets_removed": remove_offsets,
        "brokers": holders,
        "online_consumers": online,
    }


class GroupProgressRow(GroupRow):
    """A row of ``group list --progress``: mqadmin consumerProgress without -g, the dashboard's consumer
    list. ``lag`` sums the queues ``group progress`` counts a lag of (:func:`queue_lags`),
    ``uncounted_queues`` counts the others; ``lag`` is None where no broker answered the group's consume
    stats, or no queue's lag is known."""

    clients: int
    consume_type: str | None
    message_model: str | None
    consume_tps: float
    lag: int | None
    uncounted_queues: int


async def group_on_broker(
    admin: Admin, addr: str, group: str
) -> tuple[ConsumeStats | None, ConsumerConnection | None]:
    """A group's consume stats and online clients on one broker; None for either it does not answer (no
    offsets there, no client online, refused)."""
    try:
        stats: ConsumeStats | None = await admin.consume_stats(addr, group)
    except RemotingError:
        stats = None
    try:
        conns = await admin.consumer_connections(addr, group)
    except RemotingError:
        conns = None
    return stats, conns


async def list_groups(admin: Admin, *, cluster: str | None, system: bool, progress: bool = False) -> Rows:
    """Every subscription group on the masters (that answer), with the brokers that know it; ``progress``:
    each one's online clients, consume TPS and lag summed over those brokers too."""
    seen: dict[str, list[str]] = {}
    for addr, table in (await _configs(admin, cluster, partial=True)).items():
        for name in table:
            seen.setdefault(name, []).append(addr)
    rows: list[GroupRow] = [
        {"group": name, "brokers": sorted(addrs)}
        for name, addrs in sorted(seen.items())
        if system or name not in SYSTEM_GROUPS  # a broker's own groups show only with --system
    ]
    hidden = len(seen) - len(rows)
    footer = f"hidden: {hidden} system groups (--system lists them)" if hidden else None
    if not progress:
        return Rows(rows, columns=list(GroupRow.__annotations__), footer=footer)
    asks = [(row["group"], addr) for row in rows for addr in row["brokers"]]
    answers = await gather_limited((group_on_broker(admin, addr, group) for group, addr in asks), 64)
    found: dict[str, list[tuple[ConsumeStats | None, ConsumerConnection | None]]] = {}
    for (group, _), answer in zip(asks, answers, strict=True):
        found.setdefault(group, []).append(answer)
    lags = await queue_lags(
        admin,
        ((addr, group, stats) for (group, addr), (stats, _) in zip(asks, answers, strict=True) if stats),
    )
    per_group: dict[str, list[int | None]] = {}
    for (_, group, _, _), lag in lags.items():
        per_group.setdefault(group, []).append(lag)
    out: list[GroupProgressRow] = []
    for row in rows:
        stats = [s for s, _ in found[row["group"]] if s is not None]
        conns = [c for _, c in found[row["group"]] if c is not None]
        total = LagSum.of(per_group.get(row["group"], [])) if stats else None
        out.append(
            {
                **row,
                "clients": len({c.client_id for conn in conns for c in conn.connection_set}),
                "consume_type": next((c.consume_type for c in conns if c.consume_type), None),
                "message_model": next((c.message_model for c in conns if c.message_model), None),
                "consume_tps": round(sum(s.consume_tps for s in stats), 2),
                "lag": total.lag if total else None,
                "uncounted_queues": total.uncounted if total else 0,
            }
        )
    uncounted = sum(r["uncounted_queues"] for r in out)
    if uncounted:
        # a broker that failed a read behind the lag: its queues' lags are unknown, not never committed on
        unread = {f["broker"] for f in failures()}
        unknown = sum(lag is None and addr in unread for (addr, *_), lag in lags.items())
        left_out = "lag leaves out " + uncounted_text(uncounted, unknown, hint=True)
        footer = f"{footer}; {left_out}" if footer else left_out
    return Rows(out, columns=list(GroupProgressRow.__annotations__), footer=footer)


def allocate_averagely(queues: list[MessageQueue], clients: list[str]) -> dict[MessageQueue, str]:
    """RocketMQ's default AllocateMessageQueueAveragely, seen from every client at once.

    Clients sort both lists and take contiguous slices; the first ``len % n`` clients get one more.
    """
    queues, clients = sorted(queues), sorted(clients)
    owners: dict[MessageQueue, str] = {}
    if not clients:
        return owners
    count = len(clients)
    for index, client in enumerate(clients):
        mod = len(queues) % count
        if len(queues) <= count:
            size = 1
        elif mod > 0 and index < mod:
            size = len(queues) // count + 1
        else:
            size = len(queues) // count
        start = index * size if mod > 0 and index < mod else index * size + mod
        for i in range(min(size, len(queues) - start)):
            owners[queues[(start + i) % len(queues)]] = client
    return owners


async def connections(
    admin: Admin, group: str, *, cluster: str | None = None, known: bool = False
) -> GroupConnections:
    """Online clients of a group over all masters (that answer), and their subscriptions.

    No client anywhere, every master answering and none holding the group (unless ``known``): a group
    that does not exist, NotFoundError, as ``group show`` says (a typo listed no client and exit 0)."""
    rows: dict[str, ClientRow] = {}
    subscriptions: dict[str, str] = {}
    details: ConsumeSettings = {}
    addrs = await masters(admin, cluster)
    answers = await each_broker(admin, addrs, lambda addr: admin.consumer_connections(addr, group))
    if not known and len(answers) == len(addrs) and not any(answers.values()):
        tables = await asyncio.gather(*(admin.group_configs(addr) for addr in addrs))
        if not any(group in table for table in tables):
            raise NotFoundError(f"group {group!r} not found", hint="see 'mqctl group list'")
    for found in answers.values():
        if found is None:
            continue
        details = {
            "consume_type": found.consume_type,
            "message_model": found.message_model,
            "consume_from_where": found.consume_from_where,
        }
        for conn in found.connection_set:
            rows[conn.client_id] = {
                "client_id": conn.client_id,
                "addr": conn.client_addr,
                "language": conn.language,
                "version": conn.version,
                "version_name": version_name(conn.version),
            }
        for topic, sub in found.subscription_table.items():
            subscriptions[topic] = sub.sub_string
    return {
        "group": group,
        **details,
        "clients": sorted(rows.values(), key=lambda r: r["client_id"]),
        "subscriptions": subscriptions,
        "errors": failures(),
    }


async def progress(
    admin: Admin,
    group: str,
    *,
    topic: str | None,
    lag_over: int | None,
    cluster: str | None = None,
    models: set[str] | None = None,
) -> list[QueueProgress]:
    """Per queue: broker offset, committed offset, lag and the owning client; into ``models`` (when given)
    the message models the group's online consumers report (BROADCASTING, CLUSTERING).

    The owner is computed with RocketMQ's default allocation (averagely, per topic, over the
    sorted client ids), which is what Java and Node clients use unless configured otherwise.
    """
    clients: set[str] = set()
    offsets = {}
    where: dict[MessageQueue, str] = {}

    async def read(addr: str) -> tuple[ConsumerConnection | None, ConsumeStats]:
        return await admin.consumer_connections(addr, group), await admin.consume_stats(addr, group, topic)

    addrs = await readers(admin, cluster)
    for addr, (found, stats) in (await each_broker(admin, addrs, read)).items():
        if found is not None:
            clients.update(c.client_id for c in found.connection_set)
            if models is not None and found.message_model:
                models.add(found.message_model)
        offsets.update(stats.offset_table)
        where.update(dict.fromkeys(stats.offset_table, addr))
    if not offsets and not clients:
        if topic is not None:
            await route_or_not_found(admin, topic)  # a typo of the topic is that, not the group's lack
        known = await _known(admin, group, addrs)
        if known is False:
            raise NotFoundError(f"group {group!r} not found", hint="see 'mqctl group list'")
        if known is None:  # no master that answered holds it, and one did not answer: cannot tell
            of = f" of topic {topic!r}" if topic is not None else ""
            raise NotFoundError(f"group {group!r} has no offsets{of} and no online consumer")
        return Rows.of(QueueProgress, ())  # created, never consumed: nothing committed yet, no lag
    starts = await _uncommitted_starts(admin, group, where, offsets)
    owners: dict[MessageQueue, str] = {}
    for name in {mq.topic for mq in offsets}:
        owners.update(allocate_averagely([mq for mq in offsets if mq.topic == name], sorted(clients)))
    rows = [
        QueueProgress(
            topic=mq.topic,
            broker_name=mq.broker_name,
            queue_id=mq.queue_id,
            max_offset=wrapper.broker_offset,
            consumer_offset=None if mq in starts else wrapper.consumer_offset,
            lag=_lag(wrapper.broker_offset, starts.get(mq, wrapper.consumer_offset)),
            last_consumed_store_time=when(wrapper.last_timestamp),
            last_consumed_store_time_ms=wrapper.last_timestamp,
            client_id=owners.get(mq),
        )
        for mq, wrapper in sorted(offsets.items())
    ]
    return Rows.of(
        QueueProgress, (r for r in rows if lag_over is None or (r.lag is not None and r.lag > lag_over))
    )


def _lag(end: int, start: int | None) -> int | None:
    """A queue's lag from ``start`` to its ``end``; None where the start is unknown, but on a queue that
    never held a message, which is no lag wherever a consumer starts."""
    if end <= 0:
        return 0
    return None if start is None else max(end - start, 0)


async def uncommitted_starts(
    admin: Admin,
    zeros: Iterable[GroupQueue],
    *,
    empty: Container[GroupQueue] = frozenset(),
    run: Runner = direct,
) -> dict[GroupQueue, int | None]:
    """Of ``zeros`` (queues whose ConsumeStats say the group's offset is 0), those it is not known to have
    committed on (:func:`~mqctl.services.offsets.never_committed`), each with the offset the broker starts a
    consumer of the group at (QUERY_CONSUMER_OFFSET): 0 on a young queue, else None (consumeFromWhere
    decides). Those of ``empty`` (their end is 0) are not asked: 0, as the broker answers for a queue
    holding nothing. A broker that does not answer leaves its starts None (unknown): recorded, never
    raised, and not asked again (a silent broker's every queue waited its turn and its timeout). ``run``
    runs each request (:class:`~mqctl.services.fanout.Runner`)."""
    doubtful = sorted(await never_committed(admin, zeros, run=run))
    asked = [key for key in doubtful if key not in empty]
    failed: dict[str, Exception] = {}

    async def start(addr: str, group: str, topic: str, queue_id: int) -> int | None:
        if addr in failed:
            return None
        try:
            return await run(addr, admin.consumer_offset(addr, group, topic, queue_id))
        except (RemotingError, MqctlError) as exc:
            failed.setdefault(addr, exc)
            return None

    answers = await gather_limited((start(*key) for key in asked), 16)
    await record_failures(admin, failed.items())
    starts: dict[GroupQueue, int | None] = {key: 0 for key in doubtful if key in empty}
    return starts | dict(zip(asked, answers, strict=True))


async def _uncommitted_starts(
    admin: Admin, group: str, where: dict[MessageQueue, str], offsets: dict[MessageQueue, OffsetWrapper]
) -> dict[MessageQueue, int | None]:
    """:func:`uncommitted_starts` of the queues of ``offsets`` (ConsumeStats, read at ``where``); an empty
    one's start is not asked (no lag wherever a consumer starts), only whether the group committed on it."""
    zeros = {
        (where[mq], group, mq.topic, mq.queue_id): mq for mq, w in offsets.items() if w.consumer_offset == 0
    }
    empty = {key for key, mq in zeros.items() if offsets[mq].broker_offset <= 0}
    found = await uncommitted_starts(admin, zeros, empty=empty)
    return {zeros[key]: start for key, start in found.items()}


@dataclass(frozen=True)
class LagSum:
    """A group's lag over its queues, each counted as ``group progress`` counts it; ``uncounted``: queues
    whose lag is unknown (never committed on where consumeFromWhere decides the start, or not read), left
    out of ``lag`` (None when no queue could be counted)."""

    lag: int | None
    uncounted: int

    @classmethod
    def of(cls, lags: Iterable[int | None]) -> LagSum:
        """The sum of per-queue lags (None: unknown)."""
        given = list(lags)
        known = [lag for lag in given if lag is not None]
        uncounted = len(given) - len(known)
        return cls(sum(known) if known or not uncounted else None, uncounted)


def uncounted_text(uncounted: int, unknown: int, *, hint: bool = False) -> str:
    """Why ``uncounted`` queues have no lag to count, as every command that sums a lag says it: never
    committed on (``hint``: where a consumer starts instead, and what shows them), or, ``unknown`` of them,
    on a broker whose offsets could not be read (:func:`uncommitted_starts` records it)."""
    parts = []
    if uncounted > unknown:
        why = " (a consumer starts where its consumeFromWhere says; 'group progress -g G' shows them)"
        parts.append(f"{plural(uncounted - unknown, 'queue')} never committed on{why if hint else ''}")
    if unknown:
        parts.append(f"{plural(unknown, 'queue')} unknown (a broker's offsets unread)")
    return " and ".join(parts)


#: Where the reads of :func:`uncommitted_starts` come from (top keeps them a while).
Starts = Callable[[list[GroupQueue]], Awaitable[dict[GroupQueue, int | None]]]


async def queue_lags(
    admin: Admin, answers: Iterable[tuple[str, str, ConsumeStats]], *, starts: Starts | None = None
) -> dict[GroupQueue, int | None]:
    """Each queue's lag in the ConsumeStats brokers answered ((address, group, stats)), as ``group progress``
    counts it: on a queue the group never committed on from where the broker starts a consumer (0 on a young
    queue; None, unknown, where consumeFromWhere decides), never from the 0 ConsumeStats says there (a new
    group on an old topic was its whole length behind). ``starts`` reads them (:func:`uncommitted_starts`
    unless given)."""
    read = list(answers)
    # an empty queue is no lag wherever a consumer starts: not asked about
    zeros = [
        (addr, group, mq.topic, mq.queue_id)
        for addr, group, stats in read
        for mq, w in stats.offset_table.items()
        if w.consumer_offset == 0 and w.broker_offset > 0
    ]
    found = await (starts(zeros) if starts else uncommitted_starts(admin, zeros))
    lags: dict[GroupQueue, int | None] = {}
    for addr, group, stats in read:
        for mq, w in stats.offset_table.items():
            key = (addr, group, mq.topic, mq.queue_id)
            lags[key] = _lag(w.broker_offset, found.get(key, w.consumer_offset))
    return lags


async def _known(admin: Admin, group: str, addrs: list[str]) -> bool | None:
    """Whether a broker of ``addrs`` holds ``group``'s subscription config; None if none that answered
    does and one did not answer. A group with neither offsets nor clients was said to have "no offsets"
    even when the name was a typo (mqadmin consumerProgress says such a group is not there), and "not
    found" when it was created and never consumed."""
    tables = await each_broker(admin, addrs, admin.group_configs)
    if any(group in table for table in tables.values()):
        return True
    return None if len(tables) < len(addrs) else False


async def show(admin: Admin, group: str, *, cluster: str | None = None) -> GroupShow:
    """Config (from the first master that has it), online clients and lag totals, from the brokers that
    answer (the others are in ``errors``)."""
    tables = await _configs(admin, cluster, partial=True)
    configs = [table[group] for table in tables.values() if group in table]
    if not configs:
        # clients of a group the brokers do not create on use (autoCreateSubscriptionGroup=false) are
        # registered all the same: "not found" alone sent the operator looking for a typo
        clients = (await connections(admin, group, cluster=cluster))["clients"]
        if not clients:
            raise NotFoundError(f"group {group!r} not found", hint="see 'mqctl group list'")
        raise NotFoundError(
            f"group {group!r} has no subscription config on any master, yet {len(clients)} of its clients"
            " are online",
            hint=f"create it with 'mqctl group create -g {group}'; 'mqctl group connections -g {group}' lists them",
        )
    online = await connections(admin, group, cluster=cluster, known=True)
    try:
        queues = await progress(admin, group, topic=None, lag_over=None, cluster=cluster)
    except NotFoundError:
        queues = []
    # messages/s pulled over the last minute (the brokers' GROUP_GET_NUMS, mqadmin's consumeTps)
    stats = await each_broker(admin, tables, lambda addr: admin.consume_stats(addr, group))
    rates = [s.consume_tps for s in stats.values()]
    runtime = await each_broker(admin, tables, admin.broker_runtime_info)
    lent = sum(parse_pop_in_flight(info.get("popInFlight")).get(group, 0) for info in runtime.values())
    total = LagSum.of(q.lag for q in queues)
    return {
        **config_fields(configs[0]),
        "brokers": len(configs),
        "online_clients": len(online["clients"]),
        "clients": online["clients"],
        "consume_type": online.get("consume_type"),
        "topics": sorted({q.topic for q in queues}),
        "total_lag": total.lag or 0,
        "uncounted_queues": total.uncounted,
        "pop_in_flight": lent,
        "consume_tps": round(sum(rates), 2),
        "errors": failures(),
    }
