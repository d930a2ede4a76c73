"""Live producer groups (only used for connection listings; docs/wire-protocol.md §consumer-registry)."""

from __future__ import annotations

from daemon.broker.managers.consumers import (
    CHANNEL_EXPIRED_MS,
    PRODUCER_GROUPS,
    ClientChannel,
    groups_of,
    now_ms,
)
from daemon.remoting.connection import Connection


class ProducerManager:
    def __init__(self) -> None:
        self.groups: dict[str, dict[Connection, ClientChannel]] = {}

    def register(self, group: str, channel: ClientChannel) -> None:
        channels = self.groups.setdefault(group, {})
        old = channels.get(channel.conn)
        if old is None:
            channels[channel.conn] = channel
            groups_of(channel.conn, PRODUCER_GROUPS).add(group)
        else:
            old.last_update = channel.last_update

    def unregister(self, conn: Connection, group: str) -> None:
        groups_of(conn, PRODUCER_GROUPS).discard(group)
        channels = self.groups.get(group)
        if channels is not None:
            channels.pop(conn, None)
            if not channels:
                del self.groups[group]

    def connection_closed(self, conn: Connection) -> None:
        for group in list(self.groups):
            self.unregister(conn, group)

    def scan_expired(self) -> None:
        deadline = now_ms() - CHANNEL_EXPIRED_MS
        for group, channels in list(self.groups.items()):
            for conn in [c for c, ch in channels.items() if ch.last_update < deadline]:
                conn.close()
                self.unregister(conn, group)
