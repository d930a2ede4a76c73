"""Pure formatting for ``mqctl top``: cells, units, the disk bar, filter and sort orders.

Kept free of Textual so each rule is tested directly and the App stays a thin renderer.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from mqctl.top.model import WATERMARKS, BrokerView, ClientView, GroupRow, QueueOffset, StoreView, TopicRow
from mqctl.units import duration_text, plural

R = TypeVar("R")

NONE = "-"
_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def human_bytes(n: int | None) -> str:
    if n is None:
        return NONE
    value = float(n)
    for unit in _UNITS:
        if abs(value) < 1024 or unit == _UNITS[-1]:
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def rate(tps: float | None) -> str:
    """Messages per second; None (not measured yet, or not available) shows as '-'."""
    if tps is None:
        return NONE
    return f"{tps:,.1f}/s"


def count(n: int | None, exact: bool = False) -> str:
    """A whole number: with thousands separators on the live screen, ``exact`` as the CLI's tables print
    it (a printed frame: an offset or a lag copied from it is one the other commands take)."""
    if n is None:
        return NONE
    return str(n) if exact else f"{n:,}"


def age(seconds: float | None) -> str:
    """A duration in whole seconds as every table writes one (:func:`mqctl.units.duration_text`)."""
    if seconds is None:
        return NONE
    return duration_text(max(0, int(seconds)) * 1000)


def percent(ratio: float | None) -> str:
    return NONE if ratio is None else f"{ratio * 100:.1f}%"


def watermark(ratio: float | None) -> str:
    """Which RocketMQ disk watermark a used-space ratio has crossed ('ok' below 75 %)."""
    if ratio is None:
        return NONE
    for level, label in WATERMARKS:
        if ratio >= level:
            return label
    return "ok"


def disk_bar(ratio: float | None, width: int = 20) -> str:
    """A bar of ``width`` cells, filled to ``ratio``, with the 75/85/90 % watermarks marked '│'."""
    if ratio is None:
        return "?" * width
    filled = round(min(max(ratio, 0.0), 1.0) * width)
    marks = {min(width - 1, int(level * width)) for level, _ in WATERMARKS}
    return "".join("█" if i < filled else ("│" if i in marks else "·") for i in range(width))


def staleness(taken_at: float | None, now: float, interval: float) -> str | None:
    """A marker when the newest data is older than two refresh intervals, else None."""
    if taken_at is None:
        return "no data yet"
    old = now - taken_at
    if old > 2 * interval:
        return f"STALE: data is {age(old)} old"
    return None


# ------------------------------------------------------------------------------------------- cells


def broker_cells(b: BrokerView, exact: bool = False) -> tuple[str, ...]:
    role = "master" if b.broker_id == 0 else f"slave{b.broker_id}"
    if b.raft:
        role += f" [{b.raft}]"
    if b.ha_slaves:
        role += f" ({b.ha_slaves} slave{'s' if b.ha_slaves > 1 else ''})"
    if b.ha_connected is False:
        role += " NOT REPLICATING"
    elif b.ha_lag_bytes is not None:
        role += f" lag {human_bytes(b.ha_lag_bytes)}"
    if b.error is not None:
        return (b.name, role, b.addr, b.unread_as, NONE, NONE, NONE, NONE, NONE, b.error)
    return (
        b.name,
        role,
        b.addr,
        b.version or NONE,
        rate(b.put_tps),
        rate(b.get_tps),
        f"{disk_bar(b.disk_ratio, 8)} {percent(b.disk_ratio)}",
        human_bytes(b.commitlog_bytes),
        count(b.commitlog_files, exact),
        watermark(b.disk_ratio)
        + ("" if b.metrics else ", no metrics")
        + loop_lag(b)
        + pop_in_flight(b)
        + timers(b, exact),
    )


def pop_in_flight(b: BrokerView) -> str:
    """`, pop in flight 12`: POP messages lent out and not acked (nothing when none are)."""
    return f", pop in flight {b.pop_in_flight}" if b.pop_in_flight else ""


def timers(b: BrokerView, exact: bool = False) -> str:
    """`, 12 timers waiting` when an mqctl broker holds timer messages; nothing otherwise."""
    if not b.timer_pending:
        return ""
    return f", {count(b.timer_pending, exact)} timer{'s' if b.timer_pending > 1 else ''} waiting"


def loop_lag(b: BrokerView) -> str:
    """`, loop p50/p99/max 0.1/0.4/12ms, gc max 3.1ms` for an mqctl broker; nothing for a Java one."""
    if b.loop_lag_p99_ms is None:
        return ""
    figures = "/".join(f"{v or 0:g}" for v in (b.loop_lag_p50_ms, b.loop_lag_p99_ms, b.loop_lag_max_ms))
    gc = f", gc max {b.gc_pause_max_ms:g}ms" if b.gc_pause_max_ms is not None else ""
    return f", loop p50/p99/max {figures}ms{gc}{stalls(b)}"


def stalls(b: BrokerView) -> str:
    """`, 12 stalls ran/core/steal/gc/other 31/402/0/4/12ms`: the loop's stalls since start and where their
    lateness went (nothing from a broker that does not say)."""
    if b.loop_stalls is None or b.loop_stall_ms is None:
        return ""
    split = "/".join(f"{v:.0f}" for v in b.loop_stall_ms.values())
    return f", {plural(b.loop_stalls, 'stall')} {'/'.join(b.loop_stall_ms)} {split}ms"


BROKER_COLUMNS = (
    "Broker",
    "Role",
    "Address",
    "Version",
    "Put TPS",
    "Get TPS",
    "Disk",
    "CommitLog",
    "Files",
    "State",
)


def topic_cells(t: TopicRow, exact: bool = False) -> tuple[str, ...]:
    return (t.name, count(t.queues, exact), rate(t.put_tps), count(t.messages, exact), human_bytes(t.bytes))


TOPIC_COLUMNS = ("Topic", "Queues", "Put TPS", "Messages", "Bytes")


def group_cells(g: GroupRow, exact: bool = False) -> tuple[str, ...]:
    if g.oldest_age is not None:
        oldest = "≤" + age(g.oldest_age)
    else:
        oldest = NEVER_CONSUMED if g.never_consumed else NONE
    return (g.name, lag_cell(g, exact), count(g.consumers, exact), rate(g.consume_tps), oldest)


def lag_cell(g: GroupRow, exact: bool = False) -> str:
    """The group's lag (:func:`lag_text`)."""
    return lag_text(g.lag, g.uncounted, exact)


def lag_text(lag: int | None, uncounted: int, exact: bool = False) -> str:
    """A lag, and how many queues of unknown lag it leaves out (``1,204 +3?``; ``- +3?`` when every queue's
    is unknown, not ``-`` as where no master answered): a new group on an old topic counted the topic's
    whole length from offset 0."""
    if not uncounted:
        return count(lag, exact)
    return f"{count(lag, exact)} +{uncounted}?"


#: The oldest unconsumed cell of a group no master holds an offset of: no age to show, and not "-"
#: (nothing waiting), which it is not.
NEVER_CONSUMED = "never consumed"
GROUP_COLUMNS = ("Group", "Lag", "Consumers", "Consume TPS", "Oldest unconsumed")


def queue_cells(q: QueueOffset) -> tuple[str, ...]:
    return (
        q.topic,
        q.broker,
        str(q.queue_id),
        count(q.max_offset),
        count(q.consumer_offset),
        count(q.lag),
        q.client_id or NONE,
    )


QUEUE_COLUMNS = ("Topic", "Broker", "Queue", "Max offset", "Consumer offset", "Lag", "Client")


def client_cells(c: ClientView) -> tuple[str, ...]:
    return (c.client_id, c.addr, c.language, str(c.version))


CLIENT_COLUMNS = ("Client id", "Address", "Language", "Version")


def store_rows(view: StoreView, now: float, exact: bool = False) -> list[tuple[str, ...]]:
    """One row per CommitLog file: written bytes, first and last write ages, expiry, verdict and (with the
    broker's plan) the groups that would lose unconsumed messages."""
    rows: list[tuple[str, ...]] = []
    for f in view.files:
        expires = view.expires_at(f)
        if f.reason is not None:
            verdict = f"DELETE on next clean ({f.reason})"
        elif f.active:
            verdict = "active (never deleted)"
        elif expires is None:
            verdict = "unknown age"
        elif expires <= now and not view.planned:
            verdict = "DELETE on next clean"
        elif expires <= now:
            verdict = "expired, kept (no trigger)"
        else:
            verdict = f"kept {age(expires - now)}"
        rows.append(
            (
                view.broker,
                f.name,
                human_bytes(f.written),
                NONE if f.first_write is None else age(now - f.first_write),
                NONE if f.last_write is None else age(now - f.last_write),
                verdict,
                unconsumed(f.unconsumed, exact),
            )
        )
    return rows


def unconsumed(by_group: dict[str, int] | None, exact: bool = False) -> str:
    """'billing 1,204, search 12' — or '-' when unknown (no plan), 'none' when every group is past it."""
    if by_group is None:
        return NONE
    behind = [(g, n) for g, n in sorted(by_group.items()) if n]
    return ", ".join(f"{g} {count(n, exact)}" for g, n in behind) or "none"


STORE_COLUMNS = (
    "Broker",
    "CommitLog file",
    "Written",
    "First write",
    "Last write",
    "Retention",
    "Unconsumed by",
)


def store_summary(view: StoreView, now: float, exact: bool = False) -> str:
    return " ".join(store_phrases(view, now, exact))


def store_phrases(view: StoreView, now: float, exact: bool = False) -> list[str]:
    """The store's summary as phrases no line break splits (:func:`pack`)."""
    doomed = view.deletable(now)
    reserved = NONE if view.file_reserved_hours is None else f"{view.file_reserved_hours:g}h"
    phrases = [
        f"{view.broker}:",
        f"CommitLog {plural(len(view.files), 'file')},",
        f"{human_bytes(view.max_offset - view.min_offset)}",
        f"(offsets {count(view.min_offset, exact)}..{count(view.max_offset, exact)}),",
        f"file size {human_bytes(view.file_size)};",
        f"disk {percent(view.disk_ratio)} [{watermark(view.disk_ratio)}],",
        f"fileReservedTime {reserved};",
        f"a clean now deletes {plural(len(doomed), 'file')}",
        f"({human_bytes(sum(f.written for f in doomed))})",
        "(the broker's own plan)" if view.planned else "(estimated from file ages)",
    ]
    if view.note:
        phrases[-1] += ";"
        phrases += view.note.split(" ")
    return phrases


def shorten(text: str, width: int, sep: str) -> str:
    """``text`` whole if it fits ``width``, else as many of its ``sep``-separated parts as fit, then an
    ellipsis (a list of addresses is never cut inside one); "" when not even one fits."""
    if len(text) <= width:
        return text
    parts = text.split(sep)
    for n in range(len(parts) - 1, 0, -1):
        head = sep.join(parts[:n]) + sep + "…"
        if len(head) <= width:
            return head
    return ""


# ------------------------------------------------------------------------------------------ fitting

#: The narrowest a text column is cut to (with an ellipsis) rather than left out.
MIN_CUT = 8
#: A cell's padding on each side (DataTable's ``cell_padding``).
PAD = 1


@dataclass(frozen=True)
class Fit:
    """How much of a table a width shows: the first ``count`` columns whole, the last of them cut or
    wrapped to ``cut`` characters when given (only a text column, and never inside a number)."""

    count: int
    cut: int | None = None


def fit_columns(
    labels: Sequence[str], rows: Sequence[Sequence[str]], width: int, cut_from: int | None = None
) -> Fit:
    """The columns that fit ``width`` whole, left to right (the first one always), and a text column
    (index ``cut_from`` or later) that does not, in the room left when that is at least MIN_CUT."""
    used = 0
    for i, label in enumerate(labels):
        need = max([len(label), *(len(r[i]) for r in rows)]) + 2 * PAD
        if used + need <= width or i == 0:
            used += need
            continue
        room = width - used - 2 * PAD
        if cut_from is not None and i >= cut_from and room >= max(MIN_CUT, len(label)):
            return Fit(i + 1, room)
        return Fit(i)
    return Fit(len(labels))


def fitted(values: Sequence[str], fit: Fit, *, wrapped: bool = False) -> tuple[str, ...]:
    """The cells ``fit`` shows: the last one :func:`wrap`-ped when ``wrapped`` (a table of a few rows
    keeps all of it), else :func:`cut` to one line."""
    shown = tuple(values[: fit.count])
    if fit.cut is None:
        return shown
    return (*shown[:-1], (wrap if wrapped else cut)(shown[-1], fit.cut))


def wrap(text: str, width: int) -> str:
    """``text`` in lines of ``width``: broken after a comma, else between words; a word longer than a
    line is :func:`cut`."""
    if len(text) <= width:
        return text
    lines = []
    for line in pack(re.split(r"(?<=,) ", text), width).split("\n"):
        lines += pack(line.split(" "), width).split("\n") if len(line) > width else [line]
    return "\n".join(cut(line, width) for line in lines)


def cut(text: str, width: int) -> str:
    """``text`` in ``width`` characters, an ellipsis for what is left out: cut after a whole word (never
    inside a number such as ``17h05m``), or, in one word, between two characters that are not digits."""
    if len(text) <= width:
        return text
    head = text[: width - 1]
    if " " in head:
        return head[: head.rindex(" ")].rstrip(",;:(") + "…"
    end = len(head)
    while end and (text[end - 1].isdigit() or text[end].isdigit()):
        end -= 1
    return text[:end] + "…"


def pack(phrases: Sequence[str], width: int) -> str:
    """Phrases joined by spaces, a line break only between two of them (never inside a number and its
    unit, or an address): the info lines at a narrow width. Spaces at a line's ends are dropped."""
    lines: list[str] = []
    line = ""
    for phrase in phrases:
        joined = f"{line} {phrase}" if line else phrase.lstrip()
        if line and len(joined.rstrip()) > width:
            lines.append(line.rstrip())
            joined = phrase.lstrip()
        line = joined
    lines.append(line.rstrip())
    return "\n".join(lines)


# ---------------------------------------------------------------------------------- filter and sort


@dataclass(frozen=True)
class SortKey(Generic[R]):
    label: str
    key: Callable[[R], Any]
    descending: bool = False


TOPIC_SORTS: tuple[SortKey[TopicRow], ...] = (
    SortKey("name", lambda t: t.name),
    SortKey("put tps", lambda t: t.put_tps or 0.0, True),
    SortKey("messages", lambda t: t.messages, True),
    SortKey("bytes", lambda t: t.bytes or 0, True),
    SortKey("queues", lambda t: t.queues, True),
)

GROUP_SORTS: tuple[SortKey[GroupRow], ...] = (
    SortKey("lag", lambda g: -1 if g.lag is None else g.lag, True),
    SortKey("name", lambda g: g.name),
    SortKey("consume tps", lambda g: g.consume_tps, True),
    SortKey("oldest", lambda g: g.oldest_age or 0.0, True),
    SortKey("consumers", lambda g: g.consumers, True),
)


#: The Overview's brokers: by cluster, name, then master before its slaves.
BY_BROKER: SortKey[BrokerView] = SortKey("broker", lambda b: (b.cluster, b.name, b.broker_id))


def select(rows: Sequence[R], name: Callable[[R], str], text: str, order: SortKey[R]) -> list[R]:
    """Rows whose name contains ``text`` (case-insensitive), in ``order`` with the name breaking ties."""
    needle = text.casefold()
    kept = [r for r in rows if needle in name(r).casefold()]
    kept.sort(key=name)
    kept.sort(key=order.key, reverse=order.descending)
    return kept
