"""A cluster's metadata as one file: ``mqctl export`` writes it, ``mqctl apply -f`` recreates it elsewhere.

The file holds topics and subscription groups (each with the broker names that hold it, one entry per
distinct config), optionally consumer offsets and ACL accounts (never their secrets). Everything is
sorted, with no timestamp, so that two exports of the same metadata are the same file: exporting a
cluster, applying the file to an empty one and exporting that gives the file back.

mqadmin's ``exportMetadata`` JSON (``{"topicConfigTable": ..., "subscriptionGroupTable": ...}``, per broker
or per cluster, as 4.9.8's ``ExportMetadataCommand`` writes it) is read too; it names no brokers, so its
topics and groups go to every master.

Topics and groups are planned and applied by ``topic apply``'s code (:func:`mqctl.services.topics.apply_on`,
:func:`mqctl.services.groups.apply_on`); offsets as ``offset reset`` commits them, only for groups with
no live consumer.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NotRequired, TypedDict, TypeVar

from daemon.remoting.bodies import TopicConfig
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.errors import RemotingCommandError, RemotingError
from mqctl.admin.client import Admin
from mqctl.errors import ConflictError, MqctlError, NotFoundError, UsageError
from mqctl.output import Rows
from mqctl.services import groups, topics
from mqctl.services.acl import AccountPerms, PlainAccount, account_row, acl_off, config_of
from mqctl.services.cluster import brokers
from mqctl.units import plural
from store import (
    CONSUME_MESSAGE_ORDERLY,
    DLQ_GROUP_TOPIC_PREFIX,
    RETRY_GROUP_TOPIC_PREFIX,
    SYS_GROUP_PREFIX,
    SYSTEM_GROUPS,
    SubscriptionGroupConfig,
    fastjson,
)

KIND = "mqctl-metadata"
VERSION = 1
_PERM_NAMES = {bits: name for name, bits in topics.PERMS.items()}
#: A topic entry's keys after ``name`` and ``brokers``: file key -> TopicConfig field.
TOPIC_KEYS = topics.TOPIC_FIELDS
#: A group entry's keys after ``name`` and ``brokers``: file key -> SubscriptionGroupConfig field.
GROUP_KEYS = {
    **groups.GROUP_FIELDS,
    "orderly": "orderly",  # 5.x's consumeMessageOrderly: false in a 4.9.8 group
}
ACL_KEYS = (
    "admin",
    "default_topic_perm",
    "default_group_perm",
    "topic_perms",
    "group_perms",
    "white_remote_address",
)


@dataclass
class Metadata:
    """What a file asks for. ``brokers`` None (mqadmin's files) means every master of the target."""

    topics: list[tuple[topics.TopicSpec, list[str] | None]] = field(default_factory=list)
    groups: list[tuple[groups.GroupSpec, list[str] | None]] = field(default_factory=list)
    offsets: list[dict[str, Any]] = field(default_factory=list)
    acl: list[dict[str, Any]] = field(default_factory=list)
    #: mqadmin's cluster export adds up queue counts over the masters it read.
    summed: bool = False
    #: Such a file's topics' (read, write) sums: their specs keep None until :func:`apply` divides them by
    #: the target's masters, and the queue-count rule is asked of what it divided.
    queue_sums: dict[str, tuple[int, int]] = field(default_factory=dict)


class TopicEntry(TypedDict):
    """A topic's config on one broker, as the file holds it (the keys of :data:`TOPIC_KEYS`)."""

    read_queues: int
    write_queues: int
    perm: str | int
    order: bool
    sysflag: int
    filter_type: str
    #: 5.x's (``message.type``...), only when the topic has some: a file without them keeps the target's
    attributes: NotRequired[dict[str, str]]


class GroupEntry(TypedDict):
    """A group's config on one broker, as the file holds it (the keys of :data:`GROUP_KEYS`)."""

    retry_queues: int
    max_retries: int
    broadcast: bool
    consume_from_min: bool
    enabled: bool
    broker_id: int
    slow_broker_id: int
    notify_ids_changed: bool
    orderly: bool


#: An ACL account on one broker, as the file holds it (the keys of :data:`ACL_KEYS`, no secret).
AclEntry = AccountPerms


class TopicItem(TopicEntry):
    """A topic of the file: its name and the brokers holding this config, then the config."""

    name: str
    brokers: list[str]


class GroupItem(GroupEntry):
    """A group of the file: its name and the brokers holding this config, then the config."""

    name: str
    brokers: list[str]


class AclItem(AclEntry):
    """An ACL account of the file: its access key and the brokers holding it, then the account."""

    name: str
    brokers: list[str]


class OffsetEntry(TypedDict):
    """A group's committed offsets of one topic on one broker: queue id -> offset."""

    group: str
    topic: str
    broker: str
    queues: dict[int, int]


class MetadataDoc(TypedDict):
    """``mqctl export``: the whole file (offsets and acl only when asked for)."""

    kind: str
    version: int
    cluster: str
    topics: list[TopicItem]
    groups: list[GroupItem]
    offsets: NotRequired[list[OffsetEntry]]
    acl: NotRequired[list[AclItem]]


Entry = TypeVar("Entry", TopicEntry, GroupEntry, AclEntry)


class PlanRow(TypedDict):
    """One line of ``apply``: a topic, group, offset set or ACL account on one broker."""

    kind: str
    name: str
    broker: str
    action: str
    changes: dict[str, Any]


# ------------------------------------------------------------------------------------------- export


def _entries(found: dict[str, dict[str, Entry]]) -> list[tuple[str, list[str], Entry]]:
    """name -> broker -> entry, as one (name, brokers holding it, entry) per name and distinct entry."""
    out = []
    for name in sorted(found):
        alike: dict[str, tuple[Entry, list[str]]] = {}
        for broker, entry in sorted(found[name].items()):
            alike.setdefault(json.dumps(entry, sort_keys=True), (entry, []))[1].append(broker)
        for entry, names in sorted(alike.values(), key=lambda pair: pair[1]):
            out.append((name, names, entry))
    return out


def topic_entry(config: TopicConfig) -> TopicEntry:
    entry: TopicEntry = {
        "read_queues": config.read_queue_nums,
        "write_queues": config.write_queue_nums,
        "perm": _PERM_NAMES.get(config.perm, config.perm),
        "order": config.order,
        "sysflag": config.topic_sys_flag,
        "filter_type": config.topic_filter_type,
    }
    if config.attributes:
        entry["attributes"] = dict(sorted(config.attributes.items()))
    return entry


def group_entry(config: SubscriptionGroupConfig) -> GroupEntry:
    return {
        "retry_queues": config.retry_queue_nums,
        "max_retries": config.retry_max_times,
        "broadcast": config.consume_broadcast_enable,
        "consume_from_min": config.consume_from_min_enable,
        "enabled": config.consume_enable,
        "broker_id": config.broker_id,
        "slow_broker_id": config.which_broker_when_consume_slowly,
        "notify_ids_changed": config.notify_consumer_ids_changed_enable,
        "orderly": config.orderly,
    }


def user_topic(name: str, system: set[str], special: bool) -> bool:
    """mqadmin's ``getUserTopicConfig``: no system topic, and retry and DLQ topics only with ``special``."""
    if name in system:
        return False
    return special or not name.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX))


def user_group(name: str) -> bool:
    """mqadmin's ``getUserSubscriptionGroup``: no broker's own group."""
    return name not in SYSTEM_GROUPS and not name.startswith(SYS_GROUP_PREFIX)


async def _system_topics(admin: Admin, addr: str) -> set[str]:
    """GET_SYSTEM_TOPIC_LIST_FROM_BROKER (305), as mqadmin reads it."""
    response = await admin.call(addr, RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_BROKER)
    return set(fastjson.loads(response.body).get("topicList") or []) if response.body else set()


async def masters_by_name(admin: Admin, cluster: str | None) -> tuple[str, dict[str, str]]:
    """The cluster (``--cluster``, else the only one) and its masters: broker name -> address."""
    rows = [r for r in await brokers(admin, cluster) if r.broker_id == 0]
    names = sorted({r.cluster for r in rows})
    if len(names) > 1:
        raise UsageError(f"several clusters ({', '.join(names)}): say which with --cluster")
    if not rows:
        raise NotFoundError(
            f"no master broker in cluster {cluster!r}" if cluster else "no master broker registered"
        )
    return names[0], {r.broker_name: r.addr for r in rows}


async def export(
    admin: Admin,
    *,
    cluster: str | None,
    offsets: bool,
    acl: bool,
    special: bool,
    warn: Callable[[str], None] | None = None,
) -> MetadataDoc:
    """The metadata of a cluster's masters as one deterministic document. ``acl``: a master whose ACL is
    off has no accounts to export, which ``warn`` is told; with ACL off on every one the ``acl`` part is
    left out."""
    name, masters = await masters_by_name(admin, cluster)
    found_topics: dict[str, dict[str, TopicEntry]] = {}
    found_groups: dict[str, dict[str, GroupEntry]] = {}
    offset_rows: list[OffsetEntry] = []
    accounts: dict[str, dict[str, AclEntry]] = {}
    acl_off_on: list[str] = []
    for broker, addr in sorted(masters.items()):
        table, system, group_table = await asyncio.gather(
            admin.topic_configs(addr), _system_topics(admin, addr), admin.group_configs(addr)
        )
        kept = {t for t in table if user_topic(t, system, special)}
        for topic in kept:
            found_topics.setdefault(topic, {})[broker] = topic_entry(table[topic])
        for group, config in group_table.items():
            if user_group(group):
                found_groups.setdefault(group, {})[broker] = group_entry(config)
        if offsets:
            committed: dict[tuple[str, str], dict[int, int]] = {}
            for (group, topic, queue), offset in (await admin.all_consumer_offsets(addr)).items():
                if topic in kept and user_group(group):
                    committed.setdefault((group, topic), {})[queue] = offset
            offset_rows.extend(
                {"group": g, "topic": t, "broker": broker, "queues": dict(sorted(q.items()))}
                for (g, t), q in committed.items()
            )
        if acl:
            try:
                acl_config = await config_of(admin, addr)
            except RemotingCommandError as exc:
                if not acl_off(exc):
                    raise
                acl_off_on.append(broker)
            else:
                for account in acl_config.get("plainAccessConfigs") or []:
                    accounts.setdefault(str(account.get("accessKey")), {})[broker] = _account_entry(account)
    doc: MetadataDoc = {
        "kind": KIND,
        "version": VERSION,
        "cluster": name,
        "topics": [{"name": n, "brokers": b, **e} for n, b, e in _entries(found_topics)],
        "groups": [{"name": n, "brokers": b, **e} for n, b, e in _entries(found_groups)],
    }
    if offsets:
        doc["offsets"] = sorted(offset_rows, key=lambda r: (r["group"], r["topic"], r["broker"]))
    if acl and len(acl_off_on) < len(masters):
        doc["acl"] = [{"name": n, "brokers": b, **e} for n, b, e in _entries(accounts)]
    if acl_off_on and warn is not None:
        warn(
            f"ACL is off on cluster {name} (aclEnable=false): the export has no acl part"
            if len(acl_off_on) == len(masters)
            else f"ACL is off on {'broker' if len(acl_off_on) == 1 else 'brokers'} {', '.join(acl_off_on)} "
            "(aclEnable=false): no accounts from them"
        )
    return doc


def _account_entry(account: PlainAccount) -> AclEntry:
    """An ACL account as ``acl list`` shows it, without broker and secret, its permissions sorted."""
    row = account_row("", account, show_secret=False)
    return {
        "admin": row["admin"],
        "default_topic_perm": row["default_topic_perm"],
        "default_group_perm": row["default_group_perm"],
        "topic_perms": sorted(row["topic_perms"]),
        "group_perms": sorted(row["group_perms"]),
        "white_remote_address": row["white_remote_address"],
    }


# --------------------------------------------------------------------------------------------- load


NameCheck = Callable[[str, str], str | None]


def load(path: Path, name_problem: NameCheck) -> Metadata:
    """Read an ``mqctl export`` file (YAML or JSON) or mqadmin's ``exportMetadata`` JSON; ``name_problem``
    (kind, name) says why a topic or group name is not one RocketMQ takes."""
    import yaml

    try:
        raw = parse_document(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: not a metadata file: {exc}") from None
    except (ValueError, yaml.YAMLError) as exc:
        raise UsageError(f"{path}: not a metadata file: {parse_problem(exc)}") from None
    if not isinstance(raw, dict):
        raise UsageError(f"{path}: expected a mapping ('mqctl export' or mqadmin exportMetadata output)")
    try:
        if "topicConfigTable" in raw or "subscriptionGroupTable" in raw:
            return _from_mqadmin(raw)
        if raw.get("kind") != KIND:
            raise ValueError(f"no 'kind: {KIND}' (write one with 'mqctl export -o yaml')")
        return _from_export(raw, name_problem)
    except (ValueError, TypeError, KeyError) as exc:
        raise UsageError(f"{path}: {exc}") from None


def parse_document(text: str) -> Any:
    """A YAML or JSON file's document: JSON read as JSON (mqadmin's file is fastjson's pretty print,
    indented with tabs, which YAML refuses), else YAML; a YAML flow mapping that is not JSON is YAML, and
    a broken JSON file's error is JSON's (ValueError; YAML's is yaml.YAMLError)."""
    import yaml

    if not text.lstrip().startswith("{"):
        return yaml.safe_load(text)
    try:
        return json.loads(text)
    except ValueError as exc:
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError:
            raise exc from None


def parse_problem(exc: Exception) -> str:
    """Why :func:`parse_document` failed, in one line: where (line, column) and what. YAML's own message
    draws the file's line and a caret over several lines and calls the file ``<unicode string>``."""
    import yaml

    if isinstance(exc, json.JSONDecodeError):
        return f"line {exc.lineno}, column {exc.colno}: {exc.msg}"
    if isinstance(exc, yaml.MarkedYAMLError) and (mark := exc.problem_mark) is not None:
        context = f" ({exc.context})" if exc.context else ""
        return f"line {mark.line + 1}, column {mark.column + 1}: {exc.problem}{context}"
    return " ".join(str(exc).split())


def _from_mqadmin(raw: dict[str, Any]) -> Metadata:
    meta = Metadata(summed="exportTime" in raw and "dataVersion" not in raw)
    for name, obj in sorted((raw.get("topicConfigTable") or {}).items()):
        topic = topic_entry(TopicConfig.from_json({"topicName": name, **obj}))
        values: dict[str, Any] = dict(topic)
        if meta.summed:
            meta.queue_sums[name] = (topic["read_queues"], topic["write_queues"])
            values.update(read_queues=None, write_queues=None)
        meta.topics.append((_topic_spec(name, values), None))
    for name, obj in sorted((raw.get("subscriptionGroupTable") or {}).items()):
        group: dict[str, Any] = dict(
            group_entry(SubscriptionGroupConfig.from_json({"groupName": name, **obj}))
        )
        if CONSUME_MESSAGE_ORDERLY not in obj:  # 4.9.8's: the target's 5.x setting is kept
            del group["orderly"]
        meta.groups.append((_group_spec(name, group), None))
    return meta


def _checked(
    item: Any, kind: str, keys: Iterable[str], name_problem: NameCheck
) -> tuple[str, list[str] | None, dict[str, Any]]:
    if not isinstance(item, dict) or "name" not in item:
        raise ValueError(f"every {kind} needs a name: {item!r}")
    name = str(item["name"])
    problem = name_problem(kind, name)
    if problem is not None:
        raise ValueError(problem)
    unknown = set(item) - {"name", "brokers", *keys}
    if unknown:
        raise ValueError(f"unknown keys {sorted(unknown)} in {kind} {name!r}")
    for key, value in item.items():
        if key in keys and not _typed(value, key):
            raise ValueError(
                f"{kind} {name!r}: {key} {value!r} is not {_TYPE_NAMES.get(key, 'a whole number')}"
            )
    names = item.get("brokers")
    if names is not None and (not isinstance(names, list) or not all(isinstance(n, str) for n in names)):
        raise ValueError(f"{kind} {name!r}: brokers must be a list of broker names")
    return name, names, {k: v for k, v in item.items() if k in keys}


#: What RocketMQ reads as a topic's filter type (TopicFilterType): a 4.9.8 broker refuses any other.
FILTER_TYPES = ("SINGLE_TAG", "MULTI_TAG")

_TYPE_NAMES = {
    "perm": "r, w, rw or a number of PermName's bits (0 to 15)",
    "filter_type": " or ".join(FILTER_TYPES),
    **dict.fromkeys(
        ("order", "broadcast", "consume_from_min", "enabled", "notify_ids_changed", "orderly"),
        "true or false",
    ),
    "attributes": "a mapping of 5.x attribute names to values (message.type: FIFO...)",
}


def _typed(value: Any, key: str) -> bool:
    """Whether a file's value has the type its key takes (YAML's true is no number here)."""
    if key == "perm":
        if isinstance(value, str):
            return value in topics.PERMS
        return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 15
    if key == "filter_type":
        return value in FILTER_TYPES
    if key == "attributes":
        return isinstance(value, dict) and all(isinstance(v, str) for v in (*value, *value.values()))
    if _TYPE_NAMES.get(key) == "true or false":
        return isinstance(value, bool)
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _topic_spec(name: str, values: Mapping[str, Any]) -> topics.TopicSpec:
    return topics.TopicSpec(
        name,
        read_queues=values.get("read_queues"),
        write_queues=values.get("write_queues"),
        perm=values.get("perm"),
        order=values.get("order"),
        sysflag=values.get("sysflag"),
        filter_type=values.get("filter_type"),
        attributes=values.get("attributes"),
    )


def _group_spec(name: str, values: Mapping[str, Any]) -> groups.GroupSpec:
    return groups.GroupSpec(name, **values)


def _queue_offsets(row: dict[str, Any]) -> dict[int, int]:
    """An offsets entry's ``queues``: queue id (a YAML number or JSON's digit string) -> offset, both whole
    numbers >= 0; anything else (a float, true, a negative number) would be committed as a wrong offset."""
    where = f"offsets of {row['group']}@{row['topic']} on {row['broker']}"
    queues = row["queues"]
    if not isinstance(queues, dict):
        raise ValueError(f"{where}: queues must map each queue id to its offset: {queues!r}")
    out: dict[int, int] = {}
    for q, o in queues.items():
        queue = q if isinstance(q, int) and not isinstance(q, bool) else None
        if isinstance(q, str) and q.isascii() and q.isdigit():
            queue = int(q)
        if queue is None or queue < 0:
            raise ValueError(f"{where}: queue id {q!r} is not a whole number")
        if not isinstance(o, int) or isinstance(o, bool) or o < 0:
            raise ValueError(f"{where}: queue {queue} offset {o!r} is not a whole number")
        out[queue] = o
    return out


def _from_export(raw: dict[str, Any], name_problem: NameCheck) -> Metadata:
    if raw.get("version") != VERSION:
        raise ValueError(f"version {raw.get('version')!r}: this mqctl reads version {VERSION}")
    meta = Metadata()
    for item in raw.get("topics") or []:
        name, names, values = _checked(item, "topic", TOPIC_KEYS, name_problem)
        meta.topics.append((_topic_spec(name, values), names))
    for item in raw.get("groups") or []:
        name, names, values = _checked(item, "group", GROUP_KEYS, name_problem)
        meta.groups.append((_group_spec(name, values), names))
    for row in raw.get("offsets") or []:
        if not isinstance(row, dict) or set(row) != {"group", "topic", "broker", "queues"}:
            raise ValueError(f"an offsets entry needs group, topic, broker and queues: {row!r}")
        for kind in ("group", "topic"):
            problem = name_problem(kind, str(row[kind]))
            if problem is not None:
                raise ValueError(problem)
        meta.offsets.append({**row, "queues": _queue_offsets(row)})
    for item in raw.get("acl") or []:
        if not isinstance(item, dict) or "name" not in item or set(item) - {"name", "brokers", *ACL_KEYS}:
            raise ValueError(f"an acl entry needs a name and only {', '.join(ACL_KEYS)}: {item!r}")
        meta.acl.append(item)
    return meta


# -------------------------------------------------------------------------------------------- apply


def _resolve(names: list[str] | None, masters: dict[str, str], renames: dict[str, str]) -> list[str]:
    """Broker names of a file (after ``--map-broker``) -> the target masters' addresses."""
    if names is None:
        return [masters[n] for n in sorted(masters)]
    wanted = [renames.get(n, n) for n in names]
    missing = sorted(n for n in wanted if n not in masters)
    if missing:
        raise NotFoundError(
            f"no master broker named {', '.join(missing)} in the target cluster "
            f"(it has {', '.join(sorted(masters))})",
            hint="map them with --map-broker FILE_NAME=TARGET_NAME",
        )
    return [masters[n] for n in wanted]


async def apply(
    admin: Admin,
    meta: Metadata,
    *,
    cluster: str | None,
    renames: dict[str, str],
    offsets: bool,
    dry_run: bool,
    note: Callable[[str], None] | None = None,
    applied: Callable[[list[PlanRow]], None] | None = None,
) -> list[PlanRow]:
    """Plan (``dry_run``) or apply a file's topics, groups and (``offsets``) offsets; ACL accounts are
    compared only: their secrets are not in the file. Every read that can fail comes before the first
    write; a write failing part-way hands the rows already applied to ``applied``, then raises."""
    _, masters = await masters_by_name(admin, cluster)
    names_of = {addr: name for name, addr in masters.items()}
    addrs = sorted(masters.values())
    # each topic's counts per master, checked before anything is read or written
    specs = [
        (_divided(s, meta.queue_sums[s.name], len(addrs)) if s.name in meta.queue_sums else s, n)
        for s, n in meta.topics
    ]
    topic_tables = dict(
        zip(addrs, await asyncio.gather(*(admin.topic_configs(a) for a in addrs)), strict=True)
    )
    group_tables = dict(
        zip(addrs, await asyncio.gather(*(admin.group_configs(a) for a in addrs)), strict=True)
    )
    system_topics = dict(
        zip(addrs, await asyncio.gather(*(_system_topics(admin, a) for a in addrs)), strict=True)
    )
    if meta.summed and note is not None:
        note(
            "mqadmin's cluster export adds up queue counts over its masters: divided by the "
            f"{plural(len(addrs), 'master')} here"
        )
    rows = Rows.of(PlanRow)
    blocked = await _live_groups(admin, meta, masters, renames) if offsets and meta.offsets else {}
    if blocked and not dry_run:
        listed = "; ".join(f"{g}: {', '.join(c)}" for g, c in sorted(blocked.items()))
        raise ConflictError(
            f"groups with live consumers would overwrite applied offsets: {listed}",
            hint="stop them first, or apply without --offsets",
        )
    # everything that can fail while only reading, before the first write: a refusal then changes nothing
    acl_rows = await _compare_acl(admin, meta, masters, renames)
    # each file topic's read queue count once this apply has written it (created, grown or shrunk)
    after = {
        (addr, spec.name): spec.apply_to(topic_tables[addr].get(spec.name)).read_queue_nums
        for spec, names in specs
        for addr in _resolve(names, masters, renames)
        if spec.name not in system_topics[addr]
    }
    offset_plan = await _plan_offsets(admin, meta, masters, renames, blocked, after) if offsets else []
    try:
        for spec, names in specs:
            chosen = {a: topic_tables[a] for a in _resolve(names, masters, renames)}
            for addr in [a for a in chosen if spec.name in system_topics[a]]:
                # the broker keeps its system topics itself and refuses their creation: the plan says so
                # rather than --execute failing half-way through the file
                del chosen[addr]
                rows.append(_skipped_system_topic(spec.name, names_of[addr]))
            for done in await topics.apply_on(admin, [spec], chosen, dry_run=dry_run) if chosen else []:
                rows.append(_row("topic", spec.name, names_of[done["broker"]], done))
        for gspec, names in meta.groups:
            if meta.summed and gspec.retry_queues:
                gspec = dataclasses.replace(gspec, retry_queues=max(1, gspec.retry_queues // len(addrs)))
            chosen_groups = {a: group_tables[a] for a in _resolve(names, masters, renames)}
            for change in await groups.apply_on(admin, gspec, chosen_groups, dry_run=dry_run):
                rows.append(_row("group", gspec.name, names_of[change["broker"]], change))
        for planned in offset_plan:
            rows.append(await _commit_offsets(admin, planned, dry_run=dry_run))
    except (MqctlError, RemotingError):  # a refusal, a lost connection or a timeout part-way
        if not dry_run and applied is not None:
            applied(list(rows))
        raise
    rows.extend(acl_rows)
    return rows


def _skipped_system_topic(name: str, broker: str) -> PlanRow:
    return {
        "kind": "topic",
        "name": name,
        "broker": broker,
        "action": "skipped: a system topic of this broker",
        "changes": {},
    }


def _row(kind: str, name: str, broker: str, change: topics.BrokerChange | topics.ApplyRow) -> PlanRow:
    return {
        "kind": kind,
        "name": name,
        "broker": broker,
        "action": change["action"],
        "changes": change["changes"],
    }


def _divided(spec: topics.TopicSpec, sums: tuple[int, int], masters: int) -> topics.TopicSpec:
    """A topic of mqadmin's cluster export, whose queue counts ``sums`` are over its masters, per master
    (rounded up; a 0, a topic stopped, stays 0)."""
    read, write = (-(-total // masters) for total in sums)
    return dataclasses.replace(spec, read_queues=read, write_queues=write)


async def _live_groups(
    admin: Admin, meta: Metadata, masters: dict[str, str], renames: dict[str, str]
) -> dict[str, list[str]]:
    """Groups of the file's offsets with consumers online on the target: client ids by group."""
    live: dict[str, set[str]] = {}
    for group in sorted({r["group"] for r in meta.offsets}):
        for addr in sorted(masters.values()):
            found = await admin.consumer_connections(addr, group)
            if found is not None and found.connection_set:
                live.setdefault(group, set()).update(c.client_id for c in found.connection_set)
    return {g: sorted(c) for g, c in live.items()}


@dataclass
class _OffsetPlan:
    """One offsets entry of the file on one master: what is committed there (already clamped)."""

    addr: str
    group: str
    topic: str
    commits: dict[int, int]
    row: PlanRow


async def _plan_offsets(
    admin: Admin,
    meta: Metadata,
    masters: dict[str, str],
    renames: dict[str, str],
    blocked: dict[str, list[str]],
    after: dict[tuple[str, str], int],
) -> list[_OffsetPlan]:
    """The file's offsets per group, topic and broker, as ``offset reset`` would commit them where no
    consumer is online; a group with live consumers is shown as blocked. An offset past its queue's end is
    clamped to that end, as 4.9.8's offset reset does, and said so: another cluster's offsets are not
    positions in this one's queues, and a consumer would skip what arrives up to it. One for a queue id
    the target topic lacks is said so and skipped, and every one of a topic the target lacks (one not in
    the file's topics: ``%RETRY%G`` in a hand-edited file). The file's topics are planned with the read
    queue count this apply leaves them (``after``, by master and name): a queue it adds or creates ends
    at 0."""
    out: list[_OffsetPlan] = []
    current: dict[str, dict[tuple[str, str, int], int]] = {}
    ends: dict[tuple[str, str], dict[int, int] | None] = {}
    for entry in meta.offsets:
        (addr,) = _resolve([entry["broker"]], masters, renames)
        if addr not in current:
            current[addr] = await admin.all_consumer_offsets(addr)
        group, topic = entry["group"], entry["topic"]
        if (addr, topic) not in ends:
            read = await _queue_ends(admin, addr, topic)
            count = after.get((addr, topic))
            ends[addr, topic] = read if count is None else {q: (read or {}).get(q, 0) for q in range(count)}
        end = ends[addr, topic] or {}
        missing = [q for q in sorted(entry["queues"]) if q not in end]
        wanted = {q: min(offset, end[q]) for q, offset in sorted(entry["queues"].items()) if q not in missing}
        commits = {q: o for q, o in wanted.items() if current[addr].get((group, topic, q)) != o}
        notes = [
            f"queue {q} beyond the queue's end (max {end[q]}): {end[q]}, not {entry['queues'][q]}"
            for q in wanted
            if entry["queues"][q] > end[q]
        ] + [f"queue {q}: no such queue, skipped" for q in missing if ends[addr, topic] is not None]
        if ends[addr, topic] is None:
            action = "skipped: no such topic on the target"
        elif not commits:
            action = "unchanged"
        elif group in blocked:
            action = f"blocked: live consumers {', '.join(blocked[group])}"
        else:
            action = "would commit"
        row: PlanRow = {
            "kind": "offsets",
            "name": f"{group}@{topic}",
            "broker": renames.get(entry["broker"], entry["broker"]),
            "action": "; ".join([action, *notes]),
            "changes": {str(q): [current[addr].get((group, topic, q)), o] for q, o in commits.items()},
        }
        out.append(_OffsetPlan(addr, group, topic, commits if action == "would commit" else {}, row))
        for q, o in out[-1].commits.items():
            current[addr][(group, topic, q)] = o
    return out


async def _commit_offsets(admin: Admin, planned: _OffsetPlan, *, dry_run: bool) -> PlanRow:
    """``planned``'s row, its offsets committed unless ``dry_run``."""
    if dry_run or not planned.commits:
        return planned.row
    for q, offset in planned.commits.items():
        await admin.commit_offset(planned.addr, planned.group, planned.topic, q, offset)
    action = planned.row["action"]
    return {**planned.row, "action": "committed" + action[len("would commit") :]}


async def _queue_ends(admin: Admin, addr: str, topic: str) -> dict[int, int] | None:
    """The max offset of each of ``topic``'s queues on the broker at ``addr`` (every queue its route says
    consumers read, see :func:`~mqctl.services.topics.topic_offsets`); None: no such topic there."""
    read_queues = 0
    with contextlib.suppress(RemotingCommandError):
        route = await admin.topic_route(topic)
        names = {b.broker_name for b in route.broker_datas if addr in b.broker_addrs.values()}
        read_queues = max((q.read_queue_nums for q in route.queue_datas if q.broker_name in names), default=0)
    try:
        stats = await topics.topic_offsets(admin, addr, topic, read_queues)
    except RemotingCommandError as exc:
        if exc.code != ResponseCode.TOPIC_NOT_EXIST:
            raise
        return None
    return {mq.queue_id: offset.max_offset for mq, offset in stats.offset_table.items()}


async def _compare_acl(
    admin: Admin, meta: Metadata, masters: dict[str, str], renames: dict[str, str]
) -> list[PlanRow]:
    """ACL accounts are not written (the file holds no secret): each is said to be present and equal,
    different (update it with 'mqctl acl update'), or missing (create it with a secret)."""
    rows: list[PlanRow] = []
    have: dict[str, dict[str, AclEntry] | None] = {}
    for item in meta.acl:
        for addr in _resolve(item.get("brokers"), masters, renames):
            if addr not in have:
                try:
                    accounts = (await config_of(admin, addr)).get("plainAccessConfigs") or []
                except RemotingCommandError as exc:
                    if not acl_off(exc):
                        raise
                    have[addr] = None
                else:
                    have[addr] = {str(a.get("accessKey")): _account_entry(a) for a in accounts}
            wanted = {k: item[k] for k in ACL_KEYS if k in item}
            known = have[addr]
            diff: dict[str, Any]
            there = None if known is None else known.get(str(item["name"]))
            if known is None:
                action, diff = "ACL off on the target (aclEnable=false): not compared", {}
            elif there is None:
                action, diff = "missing: create it with 'mqctl acl create' and its secret", {}
            else:
                diff = {k: [there.get(k), v] for k, v in wanted.items() if there.get(k) != v}
                action = "unchanged" if not diff else "differs: change it with 'mqctl acl update'"
            broker = next(n for n, a in masters.items() if a == addr)
            rows.append(
                {
                    "kind": "acl",
                    "name": str(item["name"]),
                    "broker": broker,
                    "action": action,
                    "changes": diff,
                }
            )
    return rows
