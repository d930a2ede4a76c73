"""Timer messages waiting in the brokers: how many per topic and when the next falls due.

Each master reports its backlog in GET_BROKER_RUNTIME_INFO (mqctl's broker adds ``timerPending_<topic>``
= ``count,next due ms``); brokers without timer messages (RocketMQ 4.x) report none.
"""

from __future__ import annotations

from typing import TypedDict

from daemon.broker.timer import PENDING_KEY_PREFIX
from mqctl.admin.client import Admin
from mqctl.output import Rows
from mqctl.services.cluster import brokers
from mqctl.services.fanout import each_broker
from mqctl.units import when


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
