"""Timer messages waiting in the brokers: how many per topic and when the next falls due.

Each master reports its backlog in GET_BROKER_RUNTIME_INFO (mqctl's broker adds ``timerPending_<topic>``
= ``count,next due ms``); brokers without timer messages (RocketMQ 4.x) report none.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TypedDict

from daemon.broker.timer import PENDING_KEY_PREFIX
from daemon.remoting.errors import RemotingError
from mqctl.admin.client import Admin
from mqctl.errors import MqctlError
from mqctl.output import Rows
from mqctl.services.cluster import brokers
from mqctl.services.fanout import each_broker
from mqctl.services.messages import Sent
from mqctl.units import when
from store import SCHEDULE_TOPIC, TIMER_TOPIC, StoreError


@dataclass
class HeldSent(Sent):
    """``msg send``'s answer. A message the broker holds until it falls due (a timer or a delay level) is
    stored first in ``held_by``, the timer's or the delay levels' topic: ``msg_id`` and ``queue_offset``
    are that record's, as 4.9.8 and 5.x answer (``queue_id`` is the one the send asked for); the copy
    delivered to ``topic`` once due is found by ``unique_key`` (docs/json-fields.md §messages)."""

    held_by: str | None = None


async def held(admin: Admin, sent: Sent) -> HeldSent:
    """``sent`` with ``held_by``: the topic of the record ``msg_id`` names when it is the timer's or the
    delay levels' (one VIEW_MESSAGE_BY_ID at the broker the id names, or a slave of it, as ``msg query
    --id`` reads it; a send due already is stored in its topic at once). When the record cannot be read,
    what the send asked for tells: a delay level, or a delivery time still ahead."""
    holder: str | None = None
    if sent.delay_level or sent.deliver_time_ms:
        from mqctl.services.messages import _view, locate

        stored: str | None = None
        try:
            addr, offset = locate(sent.msg_id)
            stored = (await _view(admin, sent.msg_id, addr, offset)).topic
        except (MqctlError, RemotingError, StoreError, OSError, ValueError):
            stored = None
        if stored is not None:
            holder = stored if stored in (TIMER_TOPIC, SCHEDULE_TOPIC) else None
        elif sent.delay_level:
            holder = SCHEDULE_TOPIC
        elif sent.deliver_time_ms > time.time() * 1000:
            holder = TIMER_TOPIC
    fields = {f: getattr(sent, f) for f in Sent.__dataclass_fields__}
    return HeldSent(**fields, held_by=holder)


class TimerBacklog(TypedDict):
    """A row of ``timer ls``: one topic's pending timer messages on one broker."""

    broker_name: str
    broker: str
    topic: str
    pending: int
    next_due: str | None
    next_due_ms: int


def backlog_rows(broker_name: str, addr: str, table: dict[str, str]) -> list[TimerBacklog]:
    """The rows a broker's runtime info holds (none for a broker without timer messages)."""
    rows: list[TimerBacklog] = []
    for key, value in sorted(table.items()):
        if not key.startswith(PENDING_KEY_PREFIX):
            continue
        count, _, due = value.partition(",")
        if not count.isdigit() or not due.isdigit():
            continue
        rows.append(
            {
                "broker_name": broker_name,
                "broker": addr,
                "topic": key[len(PENDING_KEY_PREFIX) :],
                "pending": int(count),
                "next_due": when(int(due)),
                "next_due_ms": int(due),
            }
        )
    return rows


async def timer_backlog(
    admin: Admin, topic: str | None = None, cluster: str | None = None
) -> list[TimerBacklog]:
    """Pending timer messages per master broker and real topic (of ``topic`` only, when given)."""
    names = {row.addr: row.broker_name for row in await brokers(admin, cluster) if row.broker_id == 0}
    tables = await each_broker(admin, names, admin.broker_runtime_info)
    rows = [r for addr, table in tables.items() for r in backlog_rows(names[addr], addr, table)]
    return Rows.of(TimerBacklog, (r for r in rows if topic is None or r["topic"] == topic))
