"""Health checks in the Nagios plugin format (``mqctl check``): one verdict, one line, perfdata.

Each check reads what the admin commands already read (consume stats, runtime info, broker config, topic
stats) and turns it into a :class:`Verdict`: a state of the plugin convention (OK, WARNING, CRITICAL,
UNKNOWN with exit codes 0..3) and perfdata that graphing tools read from the part after ``|``.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING

from daemon.broker.clean import WRITE_REFUSED_RUNTIME_KEY
from daemon.broker.loopwatch import CLOCK_RUNTIME_KEY
from daemon.namesrv.routes import CLOCK_FIELD as NAMESRV_CLOCK_FIELD
from daemon.remoting.codes import RequestCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.errors import RemotingCommandError, RemotingError
from mqctl.admin.client import Admin
from mqctl.errors import MqctlError, NotFoundError, is_acl_refusal, translate
from mqctl.services.cluster import BrokerRow, brokers
from mqctl.services.fanout import failures
from mqctl.units import plural, server_float, server_int
from store import dlq_topic

if TYPE_CHECKING:
    from mqctl.services.groups import QueueProgress


class State(IntEnum):
    """The plugin states; the value is the exit code monitoring systems read."""

    OK = 0
    WARNING = 1
    CRITICAL = 2
    UNKNOWN = 3


#: Which of two states a combined verdict takes: a broker down outranks another one we could not judge.
_RANK = {State.OK: 0, State.UNKNOWN: 1, State.WARNING: 2, State.CRITICAL: 3}


def worst(states: list[State]) -> State:
    """The state of a check made of several parts (CRITICAL > WARNING > UNKNOWN > OK)."""
    return max(states, key=_RANK.__getitem__, default=State.OK)


@dataclass(frozen=True)
class Perf:
    """One perfdata item: ``'label'=value[uom];[warn];[crit];[min];[max]``."""

    label: str
    #: None: unknown, ``U`` in the plugin line (Nagios' "could not determine"), null in JSON.
    value: float | None
    uom: str = ""
    warn: float | None = None
    crit: float | None = None
    min: float | None = None
    max: float | None = None

    def text(self) -> str:
        label = f"'{self.label}'" if any(c in self.label for c in " '=") else self.label
        tail = [self.warn, self.crit, self.min, self.max]
        while tail and tail[-1] is None:
            tail.pop()
        cells = ";".join("" if v is None else _num(v) for v in tail)
        value = "U" if self.value is None else f"{_num(self.value)}{self.uom}"
        return f"{label}={value}" + (f";{cells}" if cells else "")


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


@dataclass
class Verdict:
    """A check's result: ``check`` is the command's name, the plugin line's service name in capitals."""

    check: str
    state: State
    summary: str
    perfdata: list[Perf] = field(default_factory=list)
    #: One entry per broker (or part) that is not OK, for the JSON output and the summary.
    problems: list[str] = field(default_factory=list)

    def line(self) -> str:
        """The plugin line. The summary quotes brokers' remarks: its control characters are escaped (a
        newline would start a second line) and a `|` (the perfdata separator) becomes `¦`."""
        from mqctl.output import printable

        perf = " ".join(p.text() for p in self.perfdata)
        summary = printable(self.summary, newlines=False).replace("|", "\u00a6")
        return f"{self.check.upper()} {self.state.name} - {summary}" + (f" | {perf}" if perf else "")

    def as_dict(self) -> dict[str, object]:
        return {
            "check": self.check,
            "state": self.state.name,
            "exit_code": int(self.state),
            "summary": self.summary,
            "problems": self.problems,
            "perfdata": [
                {k: v for k, v in vars(p).items() if k == "value" or (v is not None and v != "")}
                for p in self.perfdata
            ],
        }


def unknown(check: str, exc: BaseException) -> Verdict:
    """What a check says when it could not look: the error as mqctl would report it, state UNKNOWN."""
    return Verdict(check, State.UNKNOWN, str(translate(exc)))


def threshold(value: float, warn: float | None, crit: float | None) -> State:
    """The plugin guidelines' default range: alert when ``value`` is above the threshold."""
    if crit is not None and value > crit:
        return State.CRITICAL
    if warn is not None and value > warn:
        return State.WARNING
    return State.OK


def _refused(exc: BaseException) -> bool:
    return isinstance(exc, RemotingCommandError) and is_acl_refusal(exc.code, exc.remark)


# ------------------------------------------------------------------------------------------------ lag


async def lag(admin: Admin, group: str, *, topic: str | None, warn: int, crit: int) -> Verdict:
    """The group's total lag (broker offset minus committed offset over its queues) against thresholds.

    A queue the group never committed on where its consumer's consumeFromWhere decides the start has no
    lag to count (``group progress``): left out, counted with the other queues of unknown lag in the perf
    entry ``uncounted_queues`` (as ``group list --progress`` counts them), and a WARNING when such a queue
    holds messages (no member consumes it, or none ever started), counted in ``uncounted_holding``; not for
    a BROADCASTING group, whose consumers keep its offsets (every queue reads as never committed on)."""
    from mqctl.services.groups import progress, uncounted_text

    models: set[str] = set()
    try:
        rows = await progress(admin, group, topic=topic, lag_over=None, models=models)
    except NotFoundError as exc:
        return Verdict("lag", State.UNKNOWN, str(exc))
    total = sum(r.lag or 0 for r in rows)
    worst_queue = max(rows, key=lambda r: r.lag or 0, default=None)
    where = f" topic {topic}" if topic else ""
    summary = f"group {group}{where} lag {total}"
    if not rows:  # a group the brokers hold, created and never consumed
        summary += " (no offsets yet)"
    if worst_queue is not None and worst_queue.lag:
        summary += f" (most on {worst_queue.topic} {worst_queue.broker_name}:{worst_queue.queue_id}: {worst_queue.lag})"
    uncounted = [r for r in rows if r.lag is None]
    if uncounted:  # where consumeFromWhere decides the start, there is no lag to count (group progress)
        unread = {f["broker_name"] for f in failures()}
        unknown = sum(r.broker_name in unread for r in uncounted)
        summary += "; " + uncounted_text(len(uncounted), unknown) + ", not counted"
    holding = 0
    if uncounted and models == {"BROADCASTING"}:
        # (as its online consumers say) they keep its offsets: every queue reads as never committed on
        summary += " (BROADCASTING: its consumers keep its offsets)"
    elif uncounted:
        holding = await _holding_messages(admin, uncounted)
        if holding:
            summary += f", {holding} of them holding messages"
    perf = [
        Perf("lag", total, "", warn, crit, 0),
        Perf("queues", len(rows), "", min=0),
        Perf("uncounted_queues", len(uncounted), "", min=0),  # (as group list --progress counts them)
        Perf("uncounted_holding", holding, "", 0, None, 0),
    ]
    state = worst([threshold(total, warn, crit), State.WARNING if holding else State.OK])
    return Verdict("lag", state, summary, perf)


async def _holding_messages(admin: Admin, queues: list[QueueProgress]) -> int:
    """How many of ``queues`` hold messages (max offset above min; max above 0 where the range cannot be
    read): messages no lag counts."""
    from mqctl.services.topics import queue_offsets

    ranges: dict[tuple[str, str, int], tuple[int, int]] = {}
    for name in sorted({q.topic for q in queues}):
        try:
            found = await queue_offsets(admin, name, reads=True, partial=True)
        except (MqctlError, RemotingError):  # (the broker that could not be read is recorded)
            continue
        ranges.update({(name, b, qid): (off.min_offset, off.max_offset) for b, _, qid, off in found})
    held = 0
    for q in queues:
        low, high = ranges.get((q.topic, q.broker_name, q.queue_id), (0, q.max_offset))
        held += high > low
    return held


# ------------------------------------------------------------------------------------------------ dlq


async def dlq(admin: Admin, group: str, *, warn: int, crit: int) -> Verdict:
    """Dead letters of ``group`` not yet re-sent by ``mqctl msg resend`` (held minus re-sent)."""
    from mqctl.services.messages import resent_record
    from mqctl.services.topics import queue_offsets

    topic = dlq_topic(group)
    held = 0
    resent = 0
    listed = await admin.topic_list()
    if topic not in listed and not await _known_group(admin, group):
        return Verdict(
            "dlq",
            State.UNKNOWN,
            f"group {group!r} is not known: no master holds its subscription group, offsets or dead letters",
        )
    if topic in listed:
        held = sum(
            off.max_offset - off.min_offset for *_, off in await queue_offsets(admin, topic, reads=True)
        )
        resent = len(await resent_record(admin, group))
    pending = max(0, held - resent)
    summary = f"group {group} has {plural(pending, 'dead letter')} not re-sent ({held} held in {topic}, {resent} re-sent)"
    perf = [
        Perf("dead_letters", pending, "", warn, crit, 0),
        Perf("held", held, "", min=0),
        Perf("resent", resent, "", min=0),
    ]
    return Verdict("dlq", threshold(pending, warn, crit), summary, perf)


async def _known_group(admin: Admin, group: str) -> bool:
    """Whether any master (that answers) holds ``group``'s subscription group, or it has offsets or an
    online consumer: a name no broker knows (a typo) has no dead letters to count, not zero of them."""
    from mqctl.services.groups import list_groups, progress

    if any(row["group"] == group for row in await list_groups(admin, cluster=None, system=True)):
        return True
    try:
        await progress(admin, group, topic=None, lag_over=None)
    except NotFoundError:
        return False
    return True


# -------------------------------------------------------------------------------------------- cluster


@dataclass(frozen=True)
class Skew:
    """A peer's clock against ours, from one request's round trip: the peer read its clock between our
    ``sent`` and ``answered`` (seconds since the epoch), so it is off by ``skew`` (its time minus the
    round trip's midpoint) give or take ``uncertainty`` (half the round trip)."""

    skew: float
    uncertainty: float

    @classmethod
    def measure(cls, peer_ms: int, sent: float, answered: float) -> Skew:
        return cls(peer_ms / 1000 - (sent + answered) / 2, (answered - sent) / 2)


#: ``check cluster``'s default clock-skew threshold in seconds. NTP keeps hosts within milliseconds, so a
#: clock off by more has lost its time source; a skew of seconds already moves what reads store times
#: across brokers: a timer message fires that much early or late after a failover, ``offset reset
#: --to-time`` and ``msg query --since`` pick other messages, a new master stamps messages before its old
#: master's. Two seconds keeps a loaded host's round trip (the uncertainty) from raising it.
CLOCK_SKEW_WARN = 2.0


#: 4.9.8's osPageCacheBusyTimeOutMills default: a CommitLog lock held longer answers puts OS_PAGECACHE_BUSY.
PAGE_CACHE_BUSY_MS = 1000


def write_refusal(info: dict[str, str], busy_ms: float = PAGE_CACHE_BUSY_MS) -> str | None:
    """Why a broker's store refuses puts, from its runtime info: our broker says so
    (``storeWriteRefused``); of a RocketMQ broker, a CommitLog lock held past ``busy_ms``
    (``pageCacheLockTimeMills``: OS_PAGECACHE_BUSY) is seen here, a full disk by ``check disk``."""
    said = info.get(WRITE_REFUSED_RUNTIME_KEY)
    if said:
        return said
    held = server_int(info.get("pageCacheLockTimeMills"), least=0) or 0
    if busy_ms < held < 10_000_000:  # 4.9.8's isOSPageCacheBusy (a larger figure is no lock at all)
        return f"OS page cache busy: the CommitLog lock held {held} ms, puts answered OS_PAGECACHE_BUSY"
    return None


async def _runtime(admin: Admin, row: BrokerRow) -> tuple[dict[str, str] | BaseException, float, float]:
    """The broker's runtime info (or why not), and our clock before the request and after its answer."""
    sent = time.time()
    try:
        answer: dict[str, str] | BaseException = await admin.broker_runtime_info(row.addr)
    except RemotingError as exc:
        answer = exc
    return answer, sent, time.time()


def _clock_problems(
    rows: list[BrokerRow], skews: list[Skew | None], warn: float
) -> tuple[list[State], list[str], float]:
    """Each answering broker's clock against ours (``None``: it does not report it, a RocketMQ broker:
    UNKNOWN), and the members of each broker group against each other (a failover moves the store's clock
    to the new master's; this part holds even when our own clock is off): WARNING beyond ``warn``
    seconds, counting the measurement's uncertainty in the broker's favour (a round trip slowed by a
    loaded host raises nothing: monitoring must not flap). Returns the states, the problems and the
    largest skew seen."""
    states: list[State] = []
    problems: list[str] = []
    for row, skew in zip(rows, skews, strict=True):
        if skew is None:
            states.append(State.UNKNOWN)
            problems.append(
                f"{_name(row)} does not report its clock (a RocketMQ broker): its skew is unknown"
            )
        elif abs(skew.skew) - skew.uncertainty > warn:
            states.append(State.WARNING)
            problems.append(
                f"{_name(row)} clock is {_signed(skew.skew)} this host's (±{skew.uncertainty:.3f} s; "
                f"threshold {warn:g} s)"
            )
    for name in sorted({r.broker_name for r in rows}):
        members = [
            (r, s) for r, s in zip(rows, skews, strict=True) if r.broker_name == name and s is not None
        ]
        if len(members) < 2:
            continue
        (lo_row, lo), (hi_row, hi) = (
            min(members, key=lambda m: m[1].skew),
            max(members, key=lambda m: m[1].skew),
        )
        if hi.skew - lo.skew - lo.uncertainty - hi.uncertainty > warn:
            states.append(State.WARNING)
            problems.append(
                f"{name}: its members' clocks differ by {hi.skew - lo.skew:.3f} s "
                f"({hi_row.addr} ahead of {lo_row.addr}; threshold {warn:g} s)"
            )
    largest = max((abs(s.skew) for s in skews if s is not None), default=0.0)
    return states, problems, largest


async def _namesrv_clocks(admin: Admin, warn: float) -> tuple[list[State], list[str], float]:
    """Each NameServer's clock against ours, as a broker's (GET_BROKER_CLUSTER_INFO's ``mqctlClockMs``;
    a RocketMQ NameServer sends none: UNKNOWN). One that does not answer is left to the rest of the check."""

    async def one(addr: str) -> tuple[str, Skew | None] | None:
        request = RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO, {NAMESRV_CLOCK_FIELD: "now"})
        sent = time.time()
        try:
            response = await admin.client.invoke_checked(addr, request, admin.timeout)
        except RemotingError:
            return None
        clock = response.ext_fields.get(NAMESRV_CLOCK_FIELD, "")
        return addr, Skew.measure(int(clock), sent, time.time()) if clock.isdigit() else None

    states: list[State] = []
    problems: list[str] = []
    largest = 0.0
    for answer in await asyncio.gather(*(one(addr) for addr in admin.namesrv)):
        if answer is None:
            continue
        addr, skew = answer
        if skew is None:
            states.append(State.UNKNOWN)
            problems.append(
                f"NameServer {addr} does not report its clock (a RocketMQ NameServer): its skew is unknown"
            )
            continue
        largest = max(largest, abs(skew.skew))
        if abs(skew.skew) - skew.uncertainty > warn:
            states.append(State.WARNING)
            problems.append(
                f"NameServer {addr} clock is {_signed(skew.skew)} this host's (±{skew.uncertainty:.3f} s; "
                f"threshold {warn:g} s)"
            )
    return states, problems, largest


def _signed(seconds: float) -> str:
    return f"{abs(seconds):.3f} s " + ("ahead of" if seconds > 0 else "behind")


def _name(row: BrokerRow) -> str:
    return f"{row.broker_name}/{row.broker_id}@{row.addr}"


async def cluster(admin: Admin, *, cluster_name: str | None, clock_warn: float = CLOCK_SKEW_WARN) -> Verdict:
    """Every broker the NameServer lists answers its runtime info; each broker group has a master; a
    broker holding quarantined data (set aside by recovery or replication) is a WARNING until removed, and
    so are members of a group whose ACL (accounts, secrets, whitelist, aclEnable) differs, and a broker or
    NameServer whose clock is off ours, or a group's members' off each other's, by more than ``clock_warn``
    seconds (0: clocks are not checked; see :func:`_clock_problems` and :func:`_namesrv_clocks`).

    A broker group with fewer DLedger members registered than its leader is configured with is a WARNING
    (a dead member expires from the route; the group serves on, one loss nearer to stopping).

    A broker that refuses (ACL) is UNKNOWN, not down: it answered, we may not look."""
    from mqctl.services.ha import dledger_members, members_missing

    rows = await brokers(admin, cluster_name, known=False)
    if not rows:
        where = f"cluster {cluster_name}" if cluster_name else "the NameServer"
        return Verdict(
            "cluster", State.CRITICAL, f"no broker registered with {where}", [Perf("brokers", 0, min=0)]
        )
    timed = await asyncio.gather(*(_runtime(admin, r) for r in rows))
    answers = [answer for answer, _sent, _answered in timed]
    states: list[State] = []
    problems: list[str] = []
    set_aside = 0
    refusing = 0
    clocked: list[BrokerRow] = []
    skews: list[Skew | None] = []
    for row, (answer, sent, answered) in zip(rows, timed, strict=True):
        if not isinstance(answer, BaseException):
            states.append(State.OK)
            clocked.append(row)
            clock = answer.get(CLOCK_RUNTIME_KEY, "")
            skews.append(Skew.measure(int(clock), sent, answered) if clock.isdigit() else None)
            refusal = write_refusal(answer)
            if refusal is not None:
                refusing += 1
                states.append(State.CRITICAL)
                problems.append(f"{_name(row)} refuses writes: {refusal}")
            quarantines = server_int(answer.get("storeQuarantines"), least=0) or 0
            if quarantines:  # it serves, but recovery or replication set data aside for the operator
                records = server_int(answer.get("storeQuarantinedRecords"), least=0) or 0
                set_aside += records
                states.append(State.WARNING)
                problems.append(
                    f"{_name(row)} holds {plural(quarantines, 'quarantine')} with {plural(records, 'record')} set aside "
                    "('mqctl store verify' lists them, 'store salvage' re-sends them; then remove them)"
                )
        elif _refused(answer):
            states.append(State.UNKNOWN)
            problems.append(f"{_name(row)} refused (ACL): {translate(answer)}")
        else:
            states.append(State.CRITICAL)
            problems.append(f"{_name(row)} down: {translate(answer)}")
    names = {r.broker_name for r in rows}
    answering_rows = [r for r, a in zip(rows, answers, strict=True) if not isinstance(a, BaseException)]
    views = await asyncio.gather(*(_acl_view(admin, r.addr) for r in answering_rows))
    for name in sorted(names):
        seen = [(r, v) for r, v in zip(answering_rows, views, strict=True) if r.broker_name == name and v]
        differ = sorted({k for _, v in seen for k in v if any(v.get(k) != o.get(k) for _, o in seen)})
        if differ:  # a client the master admits is refused by the member that takes its place, or the reverse
            states.append(State.WARNING)
            problems.append(
                f"{name}: ACL differs between its members ({', '.join(r.addr for r, _ in seen)}): "
                + ", ".join(differ)
            )
    largest_skew = 0.0
    if clock_warn > 0:
        clock_states, clock_problems, largest_skew = _clock_problems(clocked, skews, clock_warn)
        ns_states, ns_problems, ns_largest = await _namesrv_clocks(admin, clock_warn)
        states += clock_states + ns_states
        problems += clock_problems + ns_problems
        largest_skew = max(largest_skew, ns_largest)
    headless = sorted(names - {r.broker_name for r in rows if r.broker_id == 0})
    for name in headless:
        states.append(State.CRITICAL)
        problems.append(f"{name} has no master registered")
    configured_of: dict[str, int] = {}
    for row, answer in zip(rows, answers, strict=True):
        configured = None if isinstance(answer, BaseException) else dledger_members(answer)
        if configured is not None:  # the leader's count; a group is reported once, however many answer
            configured_of[row.broker_name] = max(configured, configured_of.get(row.broker_name, 0))
    for name, configured in sorted(configured_of.items()):
        registered = sum(r.broker_name == name for r in rows)
        if registered < configured:
            # a dead member is no longer registered: counted by the leader's view, as check ha does
            states.append(State.WARNING)
            problems.append(members_missing(name, registered, configured))
    answering = sum(1 for a in answers if not isinstance(a, BaseException))
    summary = (
        f"{answering} of {plural(len(rows), 'broker')} answering in {plural(len(names), 'broker group')}"
    )
    if problems:
        summary += ": " + "; ".join(problems)
    perf = [
        Perf("brokers", len(rows), min=0),
        Perf("answering", answering, "", None, None, 0, len(rows)),
        Perf("masters_missing", len(headless), min=0),
        Perf("quarantined_records", set_aside, min=0),
        Perf("refusing_writes", refusing, min=0),
    ]
    if clock_warn > 0:
        perf.append(Perf("clock_skew_max", round(largest_skew, 3), "s", clock_warn, None, 0))
    return Verdict("cluster", worst(states), summary, perf, problems)


async def _acl_view(admin: Admin, addr: str) -> dict[str, str] | None:
    """A broker's ACL as comparable entries: the global whitelist and each account (its secret as a
    digest, never shown); ``aclEnable`` false from a broker saying so; None when it cannot be read."""
    import hashlib
    import json

    from mqctl.services.acl import acl_off, config_of

    try:
        body = await config_of(admin, addr)
    except RemotingCommandError as exc:
        return {"aclEnable": "false"} if acl_off(exc) else None
    except (RemotingError, MqctlError):
        return None
    view = {"globalWhiteRemoteAddresses": json.dumps(sorted(body.get("globalWhiteAddrs") or []))}
    for account in body.get("plainAccessConfigs") or []:
        entry: dict[str, object] = dict(account)
        entry["secretKey"] = hashlib.sha256(str(entry.get("secretKey") or "").encode()).hexdigest()
        view[f"account {account.get('accessKey')}"] = json.dumps(entry, sort_keys=True)
    return view


# ----------------------------------------------------------------------------------------------- disk


@dataclass(frozen=True)
class Watermarks:
    """A broker's disk watermarks as ratios: retention deletes unexpired files above ``max_used``, cleans
    forcibly above ``clean_forcibly``, refuses puts above ``warning_level``."""

    max_used: float
    clean_forcibly: float
    warning_level: float

    @classmethod
    def of(cls, config: dict[str, str]) -> Watermarks:
        """From GET_BROKER_CONFIG; a 4.9.8 broker keeps the last two as JVM properties: their defaults."""

        def number(key: str, default: float) -> float:
            value = server_float(config.get(key))
            return default if value is None else value

        # diskMaxUsedSpaceRatio is clamped to 10..95 as DefaultMessageStore#CleanCommitLogService does.
        max_used = min(max(number("diskMaxUsedSpaceRatio", 75), 10), 95) / 100
        forcibly = number("diskSpaceCleanForciblyRatio", 85)
        level = number("diskSpaceWarningLevelRatio", 90)
        # a ratio given as 0.85 (the JVM property's form) or as 85 (ours) means the same
        return cls(
            max_used, forcibly if forcibly <= 1 else forcibly / 100, level if level <= 1 else level / 100
        )


async def _disk_of(admin: Admin, row: BrokerRow) -> tuple[float, Watermarks, str | None] | BaseException:
    """The CommitLog partition's used ratio, the watermarks, and why the store refuses puts (None: it
    takes them): as the broker says, else a ratio past diskSpaceWarningLevelRatio (a RocketMQ broker)."""
    try:
        info, config = await asyncio.gather(
            admin.broker_runtime_info(row.addr), admin.broker_config(row.addr)
        )
    except RemotingError as exc:
        return exc
    text = info.get("commitLogDiskRatio")
    ratio = server_float(text)
    if ratio is None or ratio > 1:  # a usage is a fraction: NaN, words, infinities and 2^70 are none
        said = f" but {text!r}"[:80] if text is not None else ""
        return MqctlError(f"{row.addr} reports no commitLogDiskRatio{said}")
    if ratio < 0:  # UtilAll#getDiskPartitionSpaceUsedPercent's -1: a path it cannot measure, not a usage
        return MqctlError(
            f"{row.addr} reports commitLogDiskRatio {ratio:g}: its CommitLog path cannot be measured"
        )
    marks = Watermarks.of(config)
    busy = server_int(config.get("osPageCacheBusyTimeOutMills"))
    refusal = write_refusal(info, PAGE_CACHE_BUSY_MS if busy is None else busy)
    if refusal is None and ratio > marks.warning_level:
        refusal = f"disk full: {ratio:.0%} used, above diskSpaceWarningLevelRatio {marks.warning_level:.0%}"
    return ratio, marks, refusal


async def disk(
    admin: Admin, *, cluster_name: str | None, broker: str | None, warn: float | None, crit: float | None
) -> Verdict:
    """Each broker's CommitLog partition usage against its watermarks (or ``warn``/``crit`` ratios):
    WARNING above diskMaxUsedSpaceRatio (retention deletes unexpired files), CRITICAL above
    diskSpaceCleanForciblyRatio (forced cleaning; puts are refused above diskSpaceWarningLevelRatio)."""
    rows = [r for r in await brokers(admin, cluster_name, known=False) if broker is None or r.addr == broker]
    if not rows:
        return Verdict(
            "disk", State.UNKNOWN, f"no broker {broker} registered" if broker else "no broker registered"
        )
    answers = await asyncio.gather(*(_disk_of(admin, r) for r in rows))
    states: list[State] = []
    problems: list[str] = []
    perf: list[Perf] = []
    fullest: tuple[float, str] | None = None
    for row, answer in zip(rows, answers, strict=True):
        if isinstance(answer, BaseException):
            states.append(State.UNKNOWN)
            problems.append(f"{_name(row)}: {translate(answer)}")
            continue
        ratio, marks, refusal = answer
        w = marks.max_used if warn is None else warn
        c = marks.clean_forcibly if crit is None else crit
        state = threshold(ratio, w, c)
        if refusal is not None:  # whatever the thresholds: its producers' sends fail now
            state = State.CRITICAL
            problems.append(f"{_name(row)} at {ratio:.0%} refuses writes: {refusal}")
        elif state is not State.OK:
            problems.append(f"{_name(row)} at {ratio:.0%} > {(c if state is State.CRITICAL else w):.0%}")
        states.append(state)
        if fullest is None or ratio > fullest[0]:
            fullest = (ratio, _name(row))
        perf.append(
            Perf(f"{row.broker_name}/{row.broker_id}", round(ratio * 100, 2), "%", w * 100, c * 100, 0, 100)
        )
    summary = f"fullest CommitLog disk {fullest[0]:.0%} on {fullest[1]}" if fullest else "no disk figures"
    if problems:
        summary += ": " + "; ".join(problems)
    return Verdict("disk", worst(states), summary, perf, problems)


# ------------------------------------------------------------------------------------------------- ha


async def ha(
    admin: Admin,
    *,
    cluster_name: str | None,
    min_slaves: int,
    warn_bytes: int,
    crit_bytes: int,
    warn_seconds: float,
    crit_seconds: float,
) -> Verdict:
    """Per broker group: the slaves the NameServer lists are connected to their master, and how far
    behind the slowest one is in bytes and in seconds (from ``broker ha status``'s figures)."""
    from mqctl.services.ha import ha_status, members_missing

    states_of = await ha_status(admin, cluster_name)
    if not states_of:
        return Verdict("ha", State.UNKNOWN, "no broker registered")
    verdicts: list[State] = []
    problems: list[str] = []
    max_bytes = 0
    max_seconds = 0.0
    slaves_total = 0
    #: A slave not connected (or not answering): the largest lag is not known, whatever the others say.
    lag_unknown = False
    for name in sorted({s.broker_name for s in states_of}):
        members = [s for s in states_of if s.broker_name == name]
        master = next((s for s in members if s.broker_id == 0), None)
        slaves = [s for s in members if s.broker_id != 0]
        slaves_total += len(slaves)
        if master is None:
            verdicts.append(State.CRITICAL)
            problems.append(f"{name} has no master registered")
        elif master.error is not None:
            verdicts.append(State.UNKNOWN)
            problems.append(f"{name} master {master.addr}: {master.error}")
        if master is not None and master.members is not None and len(members) < master.members:
            # a Raft group serves on with a member gone, but one loss nearer to stopping
            verdicts.append(State.WARNING)
            problems.append(members_missing(name, len(members), master.members))
        if len(slaves) < min_slaves:
            verdicts.append(State.CRITICAL)
            problems.append(f"{name} has {plural(len(slaves), 'slave')} registered, {min_slaves} wanted")
        if master is not None and master.error is None and slaves and not master.connected:
            verdicts.append(State.CRITICAL)
            problems.append(f"{name} master {master.addr} has no slave connected")
            lag_unknown = True
        elif master is not None and master.members is None and master.role == "SYNC_MASTER" and not slaves:
            # its slave stopped cleanly and unregistered: nothing above sees it, yet every send answers
            # SLAVE_NOT_AVAILABLE (stored, never copied), which producers that want SEND_OK count as failed
            verdicts.append(State.CRITICAL)
            problems.append(
                f"{name} master {master.addr} is a SYNC_MASTER with no slave: every send answers "
                "SLAVE_NOT_AVAILABLE"
            )
        for s in members:
            if s.abstains is not None:
                # it would not help elect a leader: the group is one loss nearer to electing none
                verdicts.append(State.WARNING)
                problems.append(f"{name} member {s.member} ({s.addr}) abstains from elections: {s.abstains}")
        for s in slaves:
            if s.error is not None:
                verdicts.append(State.UNKNOWN)
                problems.append(f"{name} slave {s.addr}: {s.error}")
                lag_unknown = True
                continue
            if not s.connected:
                verdicts.append(State.CRITICAL)
                problems.append(f"{name} slave {s.addr} not connected to its master")
                lag_unknown = True  # what it reports is where it stopped, not how far behind it is now
            if s.held_back_bytes:  # (it restarted while its master was down: docs/replication.md)
                verdicts.append(State.WARNING)
                problems.append(
                    f"{name} slave {s.addr} holds back {s.held_back_bytes} bytes past its replica mark "
                    "until its master has checked them"
                )
            if s.connected and s.lag_bytes is not None:
                max_bytes = max(max_bytes, s.lag_bytes)
                state = threshold(s.lag_bytes, warn_bytes, crit_bytes)
                verdicts.append(state)
                if state is not State.OK:
                    problems.append(f"{name} slave {s.addr} {s.lag_bytes} bytes behind")
        if master is not None and master.lag_seconds is not None:
            max_seconds = max(max_seconds, master.lag_seconds)
            state = threshold(master.lag_seconds, warn_seconds, crit_seconds)
            verdicts.append(state)
            if state is not State.OK:
                problems.append(f"{name} slowest slave {master.lag_seconds:g} s behind")
    groups = len({s.broker_name for s in states_of})
    lag = "unknown (a slave not connected)" if lag_unknown else f"{max_bytes} bytes, {max_seconds:g} s"
    summary = f"{plural(slaves_total, 'slave')} in {plural(groups, 'broker group')}, max lag {lag}"
    if problems:
        summary += ": " + "; ".join(problems)
    perf = [
        Perf("slaves", slaves_total, min=0),
        Perf("lag_bytes", None if lag_unknown else max_bytes, "B", warn_bytes, crit_bytes, 0),
        Perf("lag_seconds", None if lag_unknown else max_seconds, "s", warn_seconds, crit_seconds, 0),
    ]
    return Verdict("ha", worst(verdicts), summary, perf, problems)
