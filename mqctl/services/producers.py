"""Producer groups' online clients (``mqctl group producers``, mqadmin's ``producerConnection``)."""

from __future__ import annotations

from typing import TypedDict

from daemon.remoting.codes import version_name
from mqctl.admin.client import Admin
from mqctl.errors import NotFoundError
from mqctl.services.cluster import masters
from mqctl.services.topics import masters_of_topic


class ProducerRow(TypedDict):
    """One producer client of a group and the brokers it keeps a heartbeat with."""

    client_id: str
    addr: str
    language: str
    version: int
    #: The version as Java names it (`V4_9_8`, `V5_1_2` for a 5.x client).
    version_name: str
    brokers: list[str]


async def producers(admin: Admin, group: str, *, topic: str | None = None) -> list[ProducerRow]:
    """The group's producers over every master (or, as mqadmin with ``-t``, the masters of ``topic``'s
    route); a client heartbeating to several brokers is one row naming them all."""
    addrs = sorted((await masters_of_topic(admin, topic)).values()) if topic else await masters(admin)
    rows: dict[str, ProducerRow] = {}
    for addr in addrs:
        found = await admin.producer_connections(addr, group)
        for conn in found.connection_set if found else []:
            row = rows.setdefault(
                conn.client_id,
                {
                    "client_id": conn.client_id,
                    "addr": conn.client_addr,
                    "language": conn.language,
                    "version": conn.version,
                    "version_name": version_name(conn.version),
                    "brokers": [],
                },
            )
            row["brokers"].append(addr)
    if not rows:
        raise NotFoundError(
            f"producer group {group!r} has no online producer", hint="producers show while they heartbeat"
        )
    return sorted(rows.values(), key=lambda r: r["client_id"])
