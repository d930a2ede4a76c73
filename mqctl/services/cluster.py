"""Clusters and brokers as the NameServer and each broker's runtime info describe them."""

from __future__ import annotations

import asyncio
import itertools
import logging
from dataclasses import dataclass
from typing import TypedDict

from daemon.remoting.errors import RemotingError
from mqctl.admin.client import Admin
from mqctl.errors import NotFoundError
from mqctl.output import Rows
from mqctl.units import server_float, server_int

log = logging.getLogger(__name__)


@dataclass
class BrokerRow:
    cluster: str
    broker_name: str
    broker_id: int
    addr: str


@dataclass
class BrokerListRow(BrokerRow):
    """A ``cluster list`` row: the broker and its role (from its id, no call to the broker)."""

    role: str = ""


@dataclass
class BrokerStatus(BrokerRow):
    """A broker with its runtime figures; ``error`` says why figures are missing."""

    version: str | None = None
    put_tps: float | None = None
    get_tps: float | None = None
    disk_ratio: float | None = None
    commitlog_max_offset: int | None = None
    #: brokerRole as the broker reports it, and a slave's replication lag behind its master in bytes.
    broker_role: str | None = None
    ha_lag_bytes: int | None = None
    #: POP (5.x) messages popped and not yet acked, all groups (None from a broker without POP).
    pop_in_flight: int | None = None
    error: str | None = None


async def brokers(admin: Admin, cluster: str | None = None, *, known: bool = True) -> list[BrokerRow]:
    """Every broker address the NameServer knows, by cluster, broker name and id.

    A ``cluster`` the NameServer does not list is NotFoundError (a typo read as an empty cluster),
    unless ``known`` is False: a health check calls a cluster whose brokers all left CRITICAL."""
    info = await admin.cluster_info()
    if known and cluster is not None and cluster not in info.cluster_addr_table:
        listed = ", ".join(sorted(info.cluster_addr_table)) or "none"
        raise NotFoundError(f"cluster {cluster!r} not found (the NameServer lists: {listed})")
    rows = []
    for cluster_name, broker_names in sorted(info.cluster_addr_table.items()):
        if cluster is not None and cluster_name != cluster:
            continue
        for broker_name in sorted(broker_names):
            data = info.broker_addr_table.get(broker_name)
            for broker_id, addr in sorted((data.broker_addrs if data else {}).items()):
                rows.append(BrokerRow(cluster_name, broker_name, broker_id, addr))
    return rows


async def masters(admin: Admin, cluster: str | None = None) -> list[str]:
    """The master address of every broker group (of ``cluster``), in :func:`brokers` order."""
    return [row.addr for row in await brokers(admin, cluster) if row.broker_id == 0]


async def readers(admin: Admin, cluster: str | None = None) -> list[str]:
    """Where reads go in each broker group: its master, else (master down) its first slave, with a WARNING."""
    out: list[str] = []
    for name, rows in itertools.groupby(
        await brokers(admin, cluster), key=lambda r: (r.cluster, r.broker_name)
    ):
        group = list(rows)
        first = group[0]  # brokers() sorts by id: the master when it is there
        if first.broker_id != 0:
            log.warning(
                "%s: the master is down; reading from slave %d at %s", name[1], first.broker_id, first.addr
            )
        out.append(first.addr)
    return out


def stall_split(table: dict[str, str]) -> dict[str, float] | None:
    """The loop's stall lateness by cause (ms) from an mqctl broker's runtime info; None from another."""
    from daemon.broker.loopwatch import CAUSES, STALL_KEYS

    if STALL_KEYS[0] not in table:
        return None
    return {
        cause: server_float(table.get(key), least=0) or 0.0
        for cause, key in zip(CAUSES, STALL_KEYS, strict=True)
    }


def first_float(text: str | None) -> float | None:
    """RocketMQ's TPS fields hold 'last10s last60s last600s' (or blanks before any traffic); a rate,
    latency or pause below 0 is none."""
    parts = (text or "").split()
    return server_float(parts[0], least=0) if parts else None


async def status_of(admin: Admin, row: BrokerRow) -> BrokerStatus:
    try:
        table = await admin.broker_runtime_info(row.addr)
    except RemotingError as exc:
        return BrokerStatus(**vars(row), error=str(exc))
    max_offset = table.get("commitLogMaxOffset")
    return BrokerStatus(
        **vars(row),
        version=table.get("brokerVersionDesc"),
        put_tps=first_float(table.get("putTps")),
        get_tps=first_float(table.get("getTransferedTps")),
        disk_ratio=server_float(table.get("commitLogDiskRatio"), least=0),
        commitlog_max_offset=server_int(max_offset, least=0),
        broker_role=table.get("brokerRole"),
        pop_in_flight=server_int(table.get("popInFlightTotal"), least=0),
    )


def none_registered(admin: Admin, rows: list[BrokerRow]) -> None:
    """One warning when the NameServers list no broker: the table is its header alone (as mqadmin's
    clusterList prints it), JSON an empty list, and the exit 0 (a read that found nothing, as kcat -L)."""
    if not rows:
        import shlex

        where = ";".join(admin.namesrv)
        log.warning(
            "no broker is registered with NameServer %s (start one: mqctl broker start -n %s)",
            where,
            shlex.quote(where),
        )


async def cluster_status(admin: Admin, cluster: str | None = None) -> list[BrokerStatus]:
    """Each broker's runtime info, asked of all brokers at once; an unreachable one is shown, not fatal."""
    rows = await brokers(admin, cluster)
    none_registered(admin, rows)
    states = list(await asyncio.gather(*(status_of(admin, row) for row in rows)))
    master_end = {s.broker_name: s.commitlog_max_offset for s in states if s.broker_id == 0}
    for s in states:
        end = master_end.get(s.broker_name)
        if s.broker_id != 0 and end is not None and s.commitlog_max_offset is not None:
            s.ha_lag_bytes = max(0, end - s.commitlog_max_offset)
    return Rows.of(BrokerStatus, states)


async def broker_list(admin: Admin, cluster: str | None = None) -> list[BrokerListRow]:
    """``cluster list``: :func:`brokers` with each one's role."""
    rows = await brokers(admin, cluster)
    none_registered(admin, rows)
    for name in sorted({r.broker_name for r in rows} - {r.broker_name for r in rows if r.broker_id == 0}):
        log.warning(  # a group without its master row reads as a smaller group, not as one down
            "%s: no master registered (down, or its group is electing one); its slaves take no sends "
            "(see 'mqctl broker ha status')",
            name,
        )
    return Rows.of(
        BrokerListRow,
        (BrokerListRow(**vars(r), role="MASTER" if r.broker_id == 0 else "SLAVE") for r in rows),
    )


class WritePermRow(TypedDict):
    """What ``broker wipe-write-perm``/``add-write-perm`` changed on one NameServer."""

    namesrv: str
    broker_name: str
    write: bool
    topics: int


async def set_write_perm(admin: Admin, broker_name: str, *, allow: bool) -> list[WritePermRow]:
    """Take away (or give back, ``allow``) the write permission of every topic of broker group
    ``broker_name`` in every NameServer's routes; a name no NameServer registers is not found (the
    NameServers would answer 0 topics, as for a typo)."""
    info = await admin.cluster_info()
    if broker_name not in info.broker_addr_table:
        listed = ", ".join(sorted(info.broker_addr_table)) or "none"
        raise NotFoundError(f"broker {broker_name!r} not found (the NameServer lists: {listed})")
    changed = await admin.write_perm_of_broker(broker_name, allow=allow)
    return [
        {"namesrv": addr, "broker_name": broker_name, "write": allow, "topics": count}
        for addr, count in changed.items()
    ]
