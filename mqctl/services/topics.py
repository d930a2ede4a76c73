"""Topics as the NameServer routes them."""

from __future__ import annotations

from dataclasses import dataclass

from daemon.remoting.bodies import PermName
from mqctl.admin.client import Admin


@dataclass
class RouteRow:
    broker_name: str
    read_queues: int
    write_queues: int
    perm: str
    master: str | None
    slaves: list[str]


async def topics(admin: Admin, cluster: str | None = None) -> list[dict[str, str]]:
    """Every topic the NameServer routes, or only those of ``cluster``."""
    return [{"topic": name} for name in await admin.topic_list(cluster)]


async def route(admin: Admin, topic: str) -> list[RouteRow]:
    """Where a topic's queues live: one row per broker group."""
    data = await admin.topic_route(topic)
    brokers = {b.broker_name: b for b in data.broker_datas}
    rows = []
    for queue in sorted(data.queue_datas, key=lambda q: q.broker_name):
        broker = brokers.get(queue.broker_name)
        addrs = broker.broker_addrs if broker else {}
        rows.append(
            RouteRow(
                broker_name=queue.broker_name,
                read_queues=queue.read_queue_nums,
                write_queues=queue.write_queue_nums,
                perm=PermName.to_string(queue.perm),
                master=addrs.get(0),
                slaves=[addr for broker_id, addr in sorted(addrs.items()) if broker_id != 0],
            )
        )
    return rows
