"""Topics: routes from the NameServer, configs and offsets from the brokers that hold them."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict, TypeVar

from daemon.broker.attributes import AttributeRefused, alter_attributes
from daemon.broker.bodies import MessageQueue, TopicOffset, TopicStatsTable
from daemon.remoting.bodies import PermName, TopicConfig, TopicRouteData
from daemon.remoting.codes import ResponseCode
from daemon.remoting.errors import RemotingCommandError
from mqctl.admin.client import Admin
from mqctl.errors import ConflictError, NotFoundError, UsageError
from mqctl.output import Rows
from mqctl.services.cluster import brokers
from mqctl.services.fanout import each_broker, gather_limited
from mqctl.units import plural, when
from store import (
    DLQ_GROUP_TOPIC_PREFIX,
    MAX_HELD_QUEUE_NUMS,
    RETRY_GROUP_TOPIC_PREFIX,
    queue_nums_problem,
    system_topic,
)

log = logging.getLogger(__name__)

PERMS = {"r": PermName.READ, "w": PermName.WRITE, "rw": PermName.READ_WRITE}


def perm_text(perm: int) -> str:
    """A permission in the form ``--perm`` and ``topic apply`` take (``rw``, ``r``, ``w``; ``x`` for
    TBW102's inherit bit; ``-`` for none), so every output can be given back as input."""
    return (
        "".join(
            c
            for c, bit in (("r", PermName.READ), ("w", PermName.WRITE), ("x", PermName.INHERIT))
            if perm & bit
        )
        or "-"
    )


@dataclass
class RouteRow:
    broker_name: str
    read_queues: int
    write_queues: int
    perm: str
    master: str | None
    slaves: list[str]


@dataclass
class QueueStatus:
    broker_name: str
    queue_id: int
    min_offset: int
    max_offset: int
    messages: int
    last_updated: str | None  # ISO; None when never written ("never" in tables)
    last_updated_ms: int


@dataclass(frozen=True)
class TopicSpec:
    """What an operator asks for; None means 'keep what the broker has' (or RocketMQ's default)."""

    name: str
    read_queues: int | None = None
    write_queues: int | None = None
    perm: str | int | None = None  # r, w, rw; a number keeps bits those do not name (a metadata file)
    order: bool | None = None
    sysflag: int | None = None
    filter_type: str | None = None
    #: 5.x's attribute changes as ``mqadmin updateTopic -a`` takes them (``+message.type=FIFO,-reserve.time``)
    attribute_changes: str | None = None
    #: the 5.x attributes the topic should have, all of them (a metadata file's); None: as they are
    attributes: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        """The broker's queue-count rule, said before anything is sent (docs/operations.md §queue-counts)."""
        for what, n in (("read_queues", self.read_queues), ("write_queues", self.write_queues)):
            if n is not None and (not isinstance(n, int) or isinstance(n, bool)):
                raise UsageError(f"topic {self.name!r}: {what} {n!r} is not a whole number")
        problem = queue_nums_problem(
            self.read_queues or 0, self.write_queues or 0, names=("read_queues", "write_queues")
        )
        if problem is not None:
            raise UsageError(f"topic {self.name!r}: {problem}")

    def apply_to(self, current: TopicConfig | None) -> TopicConfig:
        base = current or TopicConfig(self.name, read_queue_nums=8, write_queue_nums=8)
        if isinstance(self.perm, str) and self.perm not in PERMS:
            raise UsageError(f"bad --perm {self.perm!r}: use r, w or rw")
        perm = PERMS[self.perm] if isinstance(self.perm, str) else self.perm
        extra = base.extra
        changes = self.attribute_changes
        if self.attributes is not None:
            changes = attribute_changes(base.attributes if current is not None else {}, self.attributes)
        if changes:
            # the broker's own parse and refusals, said before anything is written
            try:
                attributes = alter_attributes(current.attributes if current is not None else None, changes)
            except AttributeRefused as refused:
                raise UsageError(
                    f"topic {self.name!r}: attributes {changes!r} refused: {refused.remark}"
                ) from None
            extra = {k: v for k, v in base.extra.items() if k != "attributes"}
            if attributes:
                extra["attributes"] = attributes
        return dataclasses.replace(
            base,
            extra=extra,
            read_queue_nums=self.read_queues if self.read_queues is not None else base.read_queue_nums,
            write_queue_nums=self.write_queues if self.write_queues is not None else base.write_queue_nums,
            perm=perm if perm is not None else base.perm,
            order=self.order if self.order is not None else base.order,
            topic_sys_flag=self.sysflag if self.sysflag is not None else base.topic_sys_flag,
            topic_filter_type=self.filter_type if self.filter_type is not None else base.topic_filter_type,
        )


def attribute_changes(old: Mapping[str, str], new: Mapping[str, str]) -> str:
    """5.x's change text that turns attributes ``old`` into ``new``: ``+key=value`` for each one added or
    changed, ``-key`` for each one removed, sorted ("" when they are equal)."""
    added = [f"+{k}={v}" for k, v in sorted(new.items()) if old.get(k) != v]
    return ",".join(added + [f"-{k}" for k in sorted(old) if k not in new])


def _writer(
    admin: Admin, tables: dict[str, dict[str, TopicConfig]]
) -> Callable[[str, TopicConfig], Awaitable[None]]:
    """UPDATE_AND_CREATE_TOPIC of a config to a master, with the attribute changes from what its table holds."""

    async def write(addr: str, new: TopicConfig) -> None:
        old = tables[addr].get(new.topic_name)
        changes = attribute_changes(old.attributes if old is not None else {}, new.attributes)
        await admin.create_topic(addr, new, changes or None)

    return write


def topic_kind(topic: str, own: set[str]) -> str:
    """``system`` (4.9.8's system topics, and those named after a cluster or broker in ``own``), ``retry``,
    ``dlq`` or ``normal``: the dashboard's topic kinds."""
    if system_topic(topic, own):
        return "system"
    if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return "retry"
    return "dlq" if topic.startswith(DLQ_GROUP_TOPIC_PREFIX) else "normal"


async def topics(admin: Admin, cluster: str | None = None, *, system: bool = False) -> Rows:
    """The normal topics the NameServer routes, or only those of ``cluster`` (one it does not list is not
    found: a typo read as a cluster without topics); ``system``: every topic, each with its kind. A table
    on a terminal says under it how many it left out (the dashboard too shows normal topics by default)."""
    if cluster is not None:
        await brokers(admin, cluster)
    names = await admin.topic_list(cluster)
    own = await admin.own_topic_names()
    kinds = {name: topic_kind(name, own) for name in names}
    if system:
        return Rows(({"topic": n, "kind": k} for n, k in kinds.items()), columns=["topic", "kind"])
    hidden = Counter(k for k in kinds.values() if k != "normal")
    return Rows(
        ({"topic": n} for n, k in kinds.items() if k == "normal"),
        columns=["topic"],
        footer=hidden_note(hidden, "lists"),
    )


#: The kinds a topic list hides unless --system, in the order its footer counts them.
KINDS = ("system", "retry", "dlq")


def hidden_note(hidden: Mapping[str, int], verb: str) -> str | None:
    """What a topic list left out, by kind (``topic list``'s footer, ``top``'s Topics line)."""
    said = ", ".join(f"{hidden[k]} {k.upper() if k == 'dlq' else k}" for k in KINDS if hidden.get(k))
    return (
        f"hidden: {said} {'topic' if sum(hidden.values()) == 1 else 'topics'} (--system {verb} them)"
        if said
        else None
    )


async def route(admin: Admin, topic: str) -> list[RouteRow]:
    """Where a topic's queues live: one row per broker group."""
    data = await route_or_not_found(admin, topic)
    by_name = {b.broker_name: b for b in data.broker_datas}
    rows = []
    for queue in sorted(data.queue_datas, key=lambda q: q.broker_name):
        broker = by_name.get(queue.broker_name)
        addrs = broker.broker_addrs if broker else {}
        rows.append(
            RouteRow(
                broker_name=queue.broker_name,
                read_queues=queue.read_queue_nums,
                write_queues=queue.write_queue_nums,
                perm=perm_text(queue.perm),
                master=addrs.get(0),
                slaves=[addr for broker_id, addr in sorted(addrs.items()) if broker_id != 0],
            )
        )
    return rows


@dataclass
class TopicConfigRow:
    """``topic show``: the topic's config on one master holding it."""

    broker_name: str
    broker: str
    read_queues: int
    write_queues: int
    perm: str
    order: bool
    #: 5.x's message type (the ``message.type`` attribute; NORMAL without one, as 5.x reads it)
    message_type: str
    #: every 5.x attribute the topic has (none on a 4.9.8 broker)
    attributes: dict[str, str]


async def show(admin: Admin, topic: str) -> list[TopicConfigRow]:
    """The topic's config on each master holding it, read from the broker (the others named on stderr)."""
    masters = await masters_of_topic(admin, topic)
    tables = await each_broker(admin, masters.values(), admin.topic_configs)
    rows = Rows.of(TopicConfigRow)
    for name, addr in sorted(masters.items()):
        config = tables.get(addr, {}).get(topic)
        if config is not None:
            rows.append(
                TopicConfigRow(
                    broker_name=name,
                    broker=addr,
                    read_queues=config.read_queue_nums,
                    write_queues=config.write_queue_nums,
                    perm=perm_text(config.perm),
                    order=config.order,
                    message_type=config.message_type,
                    attributes=config.attributes,
                )
            )
    return rows


async def route_or_not_found(admin: Admin, topic: str) -> TopicRouteData:
    """A topic's route; a topic the NameServer does not know is NotFoundError."""
    try:
        return await admin.topic_route(topic)
    except RemotingCommandError as exc:
        if exc.code == ResponseCode.TOPIC_NOT_EXIST:
            guess = await topic_meant(admin, topic)
            raise NotFoundError(f"topic {topic!r} not found", hint=f"{guess}see 'mqctl topic list'") from None
        raise


async def topic_meant(admin: Admin, topic: str) -> str:
    """ "did you mean 'Orders'? " naming the NameServer's topics a typo of ``topic`` may have meant, to
    begin a not-found hint; '' when none is close or the list cannot be had (it only improves an error)."""
    import difflib

    try:
        names = await admin.topic_list()
    except Exception:
        return ""
    close = difflib.get_close_matches(topic, names, n=3, cutoff=0.75)
    return f"did you mean {' or '.join(repr(name) for name in close)}? " if close else ""


def route_masters(data: TopicRouteData) -> dict[str, str]:
    """broker name -> master address, for every broker group of a route that holds queues of its topic."""
    queue_brokers = {q.broker_name for q in data.queue_datas}
    return {
        b.broker_name: addr
        for b in data.broker_datas
        if b.broker_name in queue_brokers and (addr := b.master_addr())
    }


def route_readers(
    data: TopicRouteData, *, quiet: bool = False, said: dict[str, str] | None = None
) -> dict[str, str]:
    """broker name -> where reads go: the master, else (its master down) the group's first slave, which
    holds a byte-identical CommitLog; the fallback is said on stderr (a WARNING line) unless ``quiet``.
    ``said`` (broker name -> the slave read from), shared by a caller that asks again per queue: each
    fallback is said once per broker and again only when it changes (a ``quiet`` ask, whose caller says
    the move its own way, records it too)."""
    queue_brokers = {q.broker_name for q in data.queue_datas}
    out: dict[str, str] = {}
    for b in data.broker_datas:
        if b.broker_name not in queue_brokers or not b.broker_addrs:
            continue
        addr = b.master_addr()
        if addr is None:
            slave_id = min(b.broker_addrs)
            addr = b.broker_addrs[slave_id]
            if not quiet and (said is None or said.get(b.broker_name) != addr):
                log.warning(
                    "%s: the master is down; reading from slave %d at %s", b.broker_name, slave_id, addr
                )
            if said is not None:
                said[b.broker_name] = addr
        elif said is not None:
            said.pop(b.broker_name, None)  # (a master again: its next loss is said again)
        out[b.broker_name] = addr
    return out


async def readers_of_topic(
    admin: Admin, topic: str, *, quiet: bool = False, said: dict[str, str] | None = None
) -> dict[str, str]:
    """:func:`route_readers` of ``topic``'s route."""
    return route_readers(await route_or_not_found(admin, topic), quiet=quiet, said=said)


async def masters_of_topic(admin: Admin, topic: str) -> dict[str, str]:
    """broker name -> master address, for every broker group holding ``topic``."""
    return route_masters(await route_or_not_found(admin, topic))


async def target_masters(admin: Admin, cluster: str | None, broker: str | None) -> list[str]:
    """The master addresses a write goes to: ``--broker``, else every master of ``--cluster`` (or the only cluster)."""
    if broker is not None:
        return [broker]
    rows = [r for r in await brokers(admin, cluster) if r.broker_id == 0]
    clusters = sorted({r.cluster for r in rows})
    if cluster is None and len(clusters) > 1:
        raise UsageError(f"several clusters ({', '.join(clusters)}): say which with --cluster")
    if not rows:
        raise NotFoundError(
            f"no master broker in cluster {cluster!r}" if cluster else "no master broker registered"
        )
    return [r.addr for r in rows]


class BrokerChange(TypedDict):
    """What a create, update or apply did (or would do) on one master: the changed fields as ``[old, new]``."""

    broker: str
    action: str
    changes: dict[str, list[Any]]


class TopicWrite(TypedDict):
    """``topic create|update``: per master, what changed. A soft no-op (exists, missing) has no ``dry_run``."""

    topic: str
    action: str
    dry_run: NotRequired[bool]
    brokers: list[BrokerChange]
    #: Masters this write (or plan) leaves with more write queues than read queues, as 'ADDR: queues A..B':
    #: what producers send to those queues no consumer reads. Only when there is one.
    unread_queues: NotRequired[list[str]]
    #: What a master took without keeping it (a 4.9.x broker stores no 5.x attributes), read back after
    #: the write, as 'ADDR kept no message.type=FIFO': its 5.x clients see the topic without it.
    not_kept: NotRequired[list[str]]


def not_kept(addr: str, asked: Mapping[str, str], kept: Mapping[str, str]) -> list[str]:
    """'ADDR kept no KEY=VALUE' for each setting of ``asked`` that ``kept`` (read back) lacks or differs in."""
    return [
        f"{addr} kept no {key}={value} (it has {kept[key]})"
        if key in kept
        else f"{addr} kept no {key}={value}"
        for key, value in asked.items()
        if kept.get(key) != value
    ]


class TopicDeleted(TypedDict):
    """``topic delete``: the masters it was deleted from (none when it was already missing)."""

    topic: str
    action: str
    brokers: list[str]


class TopicStats(TypedDict):
    """``topic stats``: one line per topic."""

    topic: str
    brokers: int
    queues: int
    messages: int
    max_offset_total: int
    last_updated: str | None
    last_updated_ms: int
    in_tps: float
    in_msgs_24h: int


class ApplyRow(TypedDict):
    """A row of ``topic apply``: one topic on one master."""

    topic: str
    broker: str
    action: str
    changes: dict[str, list[Any]]
    dry_run: bool


C = TypeVar("C")  # a config bean: TopicConfig or SubscriptionGroupConfig

#: A topic's settings as plans and outputs name them (the flags' and the apply file's names).
TOPIC_FIELDS = {
    "read_queues": "read_queue_nums",
    "write_queues": "write_queue_nums",
    "perm": "perm",
    "order": "order",
    "sysflag": "topic_sys_flag",
    "filter_type": "topic_filter_type",
    "attributes": "attributes",  # 5.x's (message.type...): not in a 4.9.8 topic
}
#: Settings a creation lists only when they are not RocketMQ's defaults.
_RARE: dict[str, Any] = {"sysflag": 0, "filter_type": "SINGLE_TAG", "attributes": {}}


def _setting(config: TopicConfig, name: str) -> Any:
    value = getattr(config, TOPIC_FIELDS[name])
    return perm_text(value) if name == "perm" else value


def _diff(old: TopicConfig | None, new: TopicConfig) -> dict[str, list[Any]]:
    """Changed settings as ``[old, new]``; a creation lists the queue counts, perm and order, and the
    sysflag and filter type only when they are not RocketMQ's defaults."""
    if old is None:
        return {
            f: [None, _setting(new, f)]
            for f in TOPIC_FIELDS
            if f not in _RARE or _setting(new, f) != _RARE[f]
        }
    return {
        f: [_setting(old, f), _setting(new, f)] for f in TOPIC_FIELDS if _setting(old, f) != _setting(new, f)
    }


async def apply_to_tables(
    tables: dict[str, dict[str, C]],
    name: str,
    new_of: Callable[[C | None], C],
    diff_of: Callable[[C | None, C], dict[str, list[Any]]],
    write: Callable[[str, C], Awaitable[None]],
    *,
    dry_run: bool,
) -> list[BrokerChange]:
    """Make ``name``'s config (a topic's or a group's) what ``new_of`` says on each master of
    ``tables`` (address -> table, kept up to date): per master, the action and the changed fields."""
    changes: list[BrokerChange] = []
    for addr, table in tables.items():
        old = table.get(name)
        new = new_of(old)
        diff = diff_of(old, new)
        action = "unchanged" if not diff else ("create" if old is None else "update")
        action = action if action == "unchanged" else (f"would {action}" if dry_run else f"{action}d")
        if diff and not dry_run:
            await write(addr, new)
            table[name] = new
        changes.append({"broker": addr, "action": action, "changes": diff})
    return changes


async def upsert(
    admin: Admin,
    spec: TopicSpec,
    *,
    cluster: str | None,
    broker: str | None,
    mode: str,
    soft: bool = False,
    dry_run: bool = False,
    confirm: Callable[[str], None] | None = None,
) -> TopicWrite:
    """Create or update a topic on its target masters; ``mode`` is 'create', 'update' or 'apply'.

    create refuses an existing topic and update a missing one, unless ``soft`` (--if-not-exists,
    --if-exists) turns that into a no-op; apply does whichever is needed. The result says, per
    broker, what changed. ``confirm`` is asked (and raises to refuse) before fewer read queues leave
    messages where no consumer reads.
    """
    addrs = await target_masters(admin, cluster, broker)
    tables = await asyncio.gather(*(admin.topic_configs(addr) for addr in addrs))
    if confirm is not None and not dry_run and spec.read_queues is not None:
        stranded = await _stranded(admin, spec.name, spec.read_queues, dict(zip(addrs, tables, strict=True)))
        if stranded:
            held = sum(n for _, _, n in stranded)
            where = ", ".join(f"{addr} queue {q}" for addr, q, _ in stranded[:4])
            more = f" and {len(stranded) - 4} more" if len(stranded) > 4 else ""
            confirm(
                f"{plural(held, 'message')} in {where}{more} would be left where no consumer reads "
                f"(--read-queues {spec.read_queues}; scale in with --write-queues first, then read queues "
                "once consumers drained them). Shrink anyway?"
            )
    return await _upsert_on(
        admin, spec, dict(zip(addrs, tables, strict=True)), mode=mode, soft=soft, dry_run=dry_run
    )


async def _stranded(
    admin: Admin, topic: str, read_queues: int, tables: dict[str, dict[str, TopicConfig]]
) -> list[tuple[str, int, int]]:
    """(master, queue id, messages) of each queue at or beyond ``read_queues`` that holds messages, on the
    masters whose read queues would shrink to that count."""
    out: list[tuple[str, int, int]] = []
    for addr, table in tables.items():
        current = table.get(topic)
        if current is None or current.read_queue_nums <= read_queues:
            continue
        stats = await topic_offsets(admin, addr, topic, current.read_queue_nums)
        for mq, off in sorted(stats.offset_table.items(), key=lambda item: item[0].queue_id):
            if read_queues <= mq.queue_id < current.read_queue_nums and off.max_offset > off.min_offset:
                out.append((addr, mq.queue_id, off.max_offset - off.min_offset))
    return out


async def _upsert_on(
    admin: Admin,
    spec: TopicSpec,
    tables: dict[str, dict[str, TopicConfig]],
    *,
    mode: str,
    soft: bool = False,
    dry_run: bool = False,
) -> TopicWrite:
    """`upsert` against the topic tables of its target masters (address → table), kept up to date."""
    existing = {addr: table.get(spec.name) for addr, table in tables.items()}
    exists = any(existing.values())
    if mode == "create" and exists:
        if soft:
            return {"topic": spec.name, "action": "exists", "brokers": []}
        raise ConflictError(
            f"topic {spec.name!r} already exists", hint="use 'mqctl topic update' or --if-not-exists"
        )
    if mode == "update" and not exists:
        if soft:
            return {"topic": spec.name, "action": "missing", "brokers": []}
        raise NotFoundError(f"topic {spec.name!r} not found", hint="use 'mqctl topic create' or --if-exists")
    before = {addr: table.get(spec.name) for addr, table in tables.items()}
    changes = await apply_to_tables(
        tables, spec.name, spec.apply_to, _diff, _writer(admin, tables), dry_run=dry_run
    )
    result: TopicWrite = {"topic": spec.name, "action": mode, "dry_run": dry_run, "brokers": changes}
    written = [c["broker"] for c in changes if "attributes" in c["changes"] and not dry_run]
    if written:  # read back: a broker that does not know the 5.x field answers success and drops it
        kept = await asyncio.gather(*(admin.topic_configs(addr) for addr in written))
        dropped = [
            line
            for addr, table in zip(written, kept, strict=True)
            if (config := table.get(spec.name)) is not None
            for line in not_kept(addr, tables[addr][spec.name].attributes, config.attributes)
        ]
        if dropped:
            result["not_kept"] = dropped
    unread = [
        f"{change['broker']}: queues {new.read_queue_nums}..{new.write_queue_nums - 1}"
        for change in changes
        if {"read_queues", "write_queues"} & set(change["changes"])
        and (new := spec.apply_to(before[change["broker"]])).write_queue_nums > new.read_queue_nums
    ]
    if unread:
        result["unread_queues"] = unread
    return result


async def create_missing(admin: Admin, specs: list[TopicSpec], *, parallel: int = 256) -> int:
    """Create on every master the topics of ``specs`` it lacks; returns how many creations that took.

    For setting up thousands of topics: one table read per master instead of one per topic, and up
    to ``parallel`` creations in flight, which the broker commits to topics.json and registers together.
    """
    addrs = await target_masters(admin, None, None)
    tables = await asyncio.gather(*(admin.topic_configs(addr) for addr in addrs))
    todo = [
        admin.create_topic(addr, config, attribute_changes({}, config.attributes) or None)
        for addr, table in zip(addrs, tables, strict=True)
        for spec in specs
        if spec.name not in table
        for config in (spec.apply_to(None),)
    ]
    await gather_limited(todo, parallel)
    return len(todo)


async def delete(
    admin: Admin,
    topic: str,
    *,
    cluster: str | None,
    if_exists: bool = False,
    confirm: Callable[[str], None] | None = None,
) -> TopicDeleted:
    """Delete a topic from every broker holding it, then from every NameServer (mqadmin's order).

    ``confirm`` is asked (and raises to refuse) once the topic is found: a missing one is reported
    first, not after a question about deleting it."""
    try:
        masters = await masters_of_topic(admin, topic)
    except NotFoundError:
        if if_exists:
            return {"topic": topic, "action": "missing", "brokers": []}
        raise
    if confirm is not None:
        confirm(f"Delete topic {topic!r} from {', '.join(sorted(masters))} and every NameServer?")
    for addr in masters.values():
        await admin.delete_topic_in_broker(addr, topic)
    await admin.delete_topic_in_namesrv(topic, cluster)
    return {"topic": topic, "action": "deleted", "brokers": sorted(masters.values())}


async def topic_offsets(admin: Admin, addr: str, topic: str, read_queues: int) -> TopicStatsTable:
    """GET_TOPIC_STATS_INFO of ``topic`` on ``addr``, with every queue its consumers read: 4.9.8 answers for
    the write queues alone, so a queue scaled out of writes (``topic update -w``) while consumers drain it
    is asked for by GET_MIN_OFFSET, GET_MAX_OFFSET and its last message's store time."""
    stats = await admin.topic_stats(addr, topic)
    have = {mq.queue_id for mq in stats.offset_table}
    if len(have) >= read_queues:
        return stats
    if read_queues > MAX_HELD_QUEUE_NUMS:  # (a broker that does not check counts; three requests a queue)
        log.warning(
            "%s reports %d read queues of topic %s, more than a broker holds: queues from %d on are not read",
            addr,
            read_queues,
            topic,
            MAX_HELD_QUEUE_NUMS,
        )
        read_queues = MAX_HELD_QUEUE_NUMS
    from mqctl.admin.messaging import pull

    name = next((mq.broker_name for mq in stats.offset_table), "")
    for queue_id in sorted(set(range(read_queues)) - have):
        low = await admin.min_offset(addr, topic, queue_id)
        high = await admin.max_offset(addr, topic, queue_id)
        last = 0
        if high > low:
            got = await pull(admin, addr, topic, queue_id, high - 1, max_nums=1)
            last = got.messages[0].store_timestamp if got.messages else 0
        stats.offset_table[MessageQueue(topic, name, queue_id)] = TopicOffset(low, high, last)
    return stats


async def queue_offsets(
    admin: Admin, topic: str, *, reads: bool = False, partial: bool = False
) -> list[tuple[str, str, int, TopicOffset]]:
    """(broker name, master address, queue id, stored offsets) per queue of ``topic`` (read queues too, see
    :func:`topic_offsets`), in broker and queue order; ``reads``: a slave's address stands in for a master
    that is down (:func:`route_readers`); ``partial``: from the brokers that answer
    (:func:`~mqctl.services.fanout.each_broker`)."""
    rows: list[tuple[str, str, int, TopicOffset]] = []
    route = await route_or_not_found(admin, topic)
    brokers = route_readers(route) if reads else route_masters(route)
    counts = {q.broker_name: q.read_queue_nums for q in route.queue_datas}
    per_addr = {addr: counts.get(name, 0) for name, addr in brokers.items()}
    if partial:
        tables = await each_broker(
            admin, brokers.values(), lambda addr: topic_offsets(admin, addr, topic, per_addr[addr])
        )
    else:
        tables = {addr: await topic_offsets(admin, addr, topic, per_addr[addr]) for addr in brokers.values()}
    for name, addr in sorted(brokers.items()):
        if addr in tables:
            offsets = sorted(tables[addr].offset_table.items())
            rows.extend((name, addr, mq.queue_id, off) for mq, off in offsets)
    return rows


async def status(admin: Admin, topic: str) -> list[QueueStatus]:
    """Per queue: min and max offset, message count and last store time, from each broker that answers
    (the others are named on stderr)."""
    return _status_rows(await queue_offsets(admin, topic, reads=True, partial=True))


def _status_rows(offsets: list[tuple[str, str, int, TopicOffset]]) -> list[QueueStatus]:
    return Rows.of(
        QueueStatus,
        (
            QueueStatus(
                broker_name=name,
                queue_id=queue_id,
                min_offset=off.min_offset,
                max_offset=off.max_offset,
                messages=off.max_offset - off.min_offset,
                last_updated=when(off.last_update_timestamp),
                last_updated_ms=off.last_update_timestamp,
            )
            for name, _, queue_id, off in offsets
        ),
    )


async def stats(admin: Admin, topic: str) -> TopicStats:
    """One line per topic: queues, messages held, last write, and the brokers' put rates: the last
    minute's messages/s and the last 24 h's messages (TOPIC_PUT_NUMS, what `mqadmin statsAll` shows as
    InTPS and InMsg24Hour)."""
    offsets = await queue_offsets(admin, topic, reads=True)
    rows = _status_rows(offsets)
    addrs = {addr for _, addr, _, _ in offsets}
    puts = [
        d for d in await asyncio.gather(*(admin.broker_stats(a, "TOPIC_PUT_NUMS", topic) for a in addrs)) if d
    ]
    last_ms = max((r.last_updated_ms for r in rows), default=0)
    return {
        "topic": topic,
        "brokers": len({r.broker_name for r in rows}),
        "queues": len(rows),
        "messages": sum(r.messages for r in rows),
        "max_offset_total": sum(r.max_offset for r in rows),
        "last_updated": when(last_ms),
        "last_updated_ms": last_ms,
        "in_tps": round(sum(d["statsMinute"]["tps"] for d in puts), 2),
        "in_msgs_24h": int(sum(d["statsDay"]["sum"] for d in puts)),
    }


async def apply_file(
    admin: Admin, specs: list[TopicSpec], *, cluster: str | None, broker: str | None, dry_run: bool
) -> list[ApplyRow]:
    """Declarative apply: one row per topic and broker with the action taken (or planned).

    The masters and their tables are read once, not once per topic: 1,000 topics cost 1,000 creations
    (one at a time, as mqadmin updateTopic sends them) instead of 1,000 reads of a growing table too."""
    addrs = await target_masters(admin, cluster, broker)
    tables = dict(
        zip(addrs, await asyncio.gather(*(admin.topic_configs(addr) for addr in addrs)), strict=True)
    )
    return await apply_on(admin, specs, tables, dry_run=dry_run)


async def apply_on(
    admin: Admin, specs: list[TopicSpec], tables: dict[str, dict[str, TopicConfig]], *, dry_run: bool
) -> list[ApplyRow]:
    """:func:`apply_file` against masters whose topic tables (address -> table) were read already."""
    rows = Rows.of(ApplyRow)
    for spec in specs:
        result = await _upsert_on(admin, spec, tables, mode="apply", dry_run=dry_run)
        for change in result["brokers"]:
            rows.append({"topic": spec.name, **change, "dry_run": dry_run})
    return rows
