"""Replication state of broker groups (``mqctl broker ha status``), from each broker's runtime info."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from daemon.remoting.errors import RemotingError
from mqctl.admin.client import Admin
from mqctl.services.cluster import BrokerRow, brokers


@dataclass
class HAStatus:
    """One broker's replication state. ``acked_offset``: on a master the highest offset a slave acked,
    on a slave its own CommitLog end; ``lag_bytes``: how far that is behind the group's master."""

    cluster: str
    broker_name: str
    broker_id: int
    addr: str
    role: str | None = None
    connected: bool | None = None
    peers: str | None = None
    commitlog_max_offset: int | None = None
    acked_offset: int | None = None
    lag_bytes: int | None = None
    #: On a master, the slowest slave's age of its oldest unacked byte (as the master sent it).
    lag_seconds: float | None = None
    #: Records this broker set aside because they were not its master's (a divergent tail), and where.
    diverged_records: int | None = None
    quarantine: str | None = None
    error: str | None = None


def _int(text: str | None) -> int | None:
    return int(text) if text and text.lstrip("-").isdigit() else None


async def _one(admin: Admin, row: BrokerRow) -> HAStatus:
    out = HAStatus(row.cluster, row.broker_name, row.broker_id, row.addr)
    try:
        table = await admin.broker_runtime_info(row.addr)
    except RemotingError as exc:
        out.error = str(exc)
        return out
    out.role = table.get("brokerRole")
    out.commitlog_max_offset = _int(table.get("commitLogMaxOffset"))
    out.diverged_records = _int(table.get("haDivergedRecords"))
    out.quarantine = table.get("haDivergedQuarantine")
    if "haMasterAddress" in table:  # a slave
        out.connected = table.get("haMasterConnected") == "true"
        out.peers = table.get("haMasterAddress") or None
        out.acked_offset = out.commitlog_max_offset
    elif "haSlaveCount" in table:
        slaves = [s.split("/") for s in table.get("haSlaves", "").split(";") if s]
        out.connected = bool(slaves)
        out.peers = ", ".join(s[0] for s in slaves) or None
        out.acked_offset = _int(table.get("haPush2SlaveMaxOffset")) if slaves else None
        lags = [float(s[2]) for s in slaves if len(s) > 2]
        out.lag_seconds = max(lags) if lags else None
    return out


async def ha_status(admin: Admin, cluster: str | None = None, broker: str | None = None) -> list[HAStatus]:
    """Every broker of the cluster (or the group of ``broker``, an address), master first in each group."""
    rows = await brokers(admin, cluster)
    if broker is not None:
        names = {r.broker_name for r in rows if r.addr == broker}
        rows = [r for r in rows if r.broker_name in names] or [BrokerRow("", "", 0, broker)]
    states = list(await asyncio.gather(*(_one(admin, r) for r in rows)))
    master_end = {s.broker_name: s.commitlog_max_offset for s in states if s.broker_id == 0}
    for s in states:
        end = master_end.get(s.broker_name)
        if end is not None and s.acked_offset is not None:
            s.lag_bytes = max(0, end - s.acked_offset)
    return states
