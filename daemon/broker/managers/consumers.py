"""Live consumer groups: members (connections), their settings and subscriptions
(docs/wire-protocol.md §heartbeats).

A group changes membership when a connection joins, leaves, closes or stops heart-beating for 120 s;
`on_ids_changed(group)` is then called so the broker can send NOTIFY_CONSUMER_IDS_CHANGED.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from daemon.broker.bodies import ConnectionInfo, ConsumerConnection, ConsumerData, SubscriptionData
from daemon.remoting.connection import Connection

log = logging.getLogger(__name__)

CHANNEL_EXPIRED_MS = 120_000


#: Producer groups and consumer groups one client connection may hold, each, and the topics one group's
#: subscription may name in a heartbeat (or a 5.x client's Settings). A client instance names every
#: group of its process, a few; HEART_BEAT is open to any peer, and one of 16 MiB naming invented groups
#: made the broker hold memory and spend loop time on each of them (4.9.8 has no cap).
MAX_CLIENT_GROUPS = 1000
#: `Connection.attributes` keys: the producer and consumer groups the connection is registered in.
PRODUCER_GROUPS = "mqctl.producerGroups"
CONSUMER_GROUPS = "mqctl.consumerGroups"


def groups_of(conn: Connection, key: str) -> set[str]:
    """The groups of ``conn`` a manager holds under ``key`` (PRODUCER_GROUPS or CONSUMER_GROUPS)."""
    held = conn.attributes.get(key)
    if not isinstance(held, set):
        held = conn.attributes[key] = set()
    return held


def client_overflow(conn: Connection, producers: Collection[str], consumers: Mapping[str, int]) -> str | None:
    """Why registering ``producers`` (group names) and ``consumers`` (group name: topics subscribed)
    for ``conn`` would hold more than MAX_CLIENT_GROUPS; None when it would not."""
    for kind, names, key in (
        ("producer", producers, PRODUCER_GROUPS),
        ("consumer", consumers, CONSUMER_GROUPS),
    ):
        held = groups_of(conn, key)
        if len(names) > MAX_CLIENT_GROUPS or len(held) + len(names) > MAX_CLIENT_GROUPS:
            total = len(held | set(names))
            if total > MAX_CLIENT_GROUPS:
                return (
                    f"this connection would be a {kind} of {total} groups; a client connection is one of "
                    f"{MAX_CLIENT_GROUPS} at most"
                )
    for group, topics in consumers.items():
        if topics > MAX_CLIENT_GROUPS:
            return f"consumer group {group[:64]} subscribes {topics} topics; a group subscribes {MAX_CLIENT_GROUPS} at most"
    return None


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True)
class ClientChannel:
    """One client connection as seen by a group."""

    conn: Connection
    client_id: str
    language: str
    version: int
    last_update: int = field(default_factory=now_ms)

    def info(self) -> ConnectionInfo:
        return ConnectionInfo(self.client_id, self.conn.peer, self.language, self.version)


@dataclass(slots=True)
class ConsumerGroupInfo:
    group: str
    consume_type: str
    message_model: str
    consume_from_where: str
    subscriptions: dict[str, SubscriptionData] = field(default_factory=dict)
    channels: dict[Connection, ClientChannel] = field(default_factory=dict)

    def client_ids(self) -> list[str]:
        return [c.client_id for c in self.channels.values()]

    def update_subscriptions(self, subs: list[SubscriptionData]) -> bool:
        """Merge a heartbeat's subscriptions; True when a topic was added or removed."""
        changed = False
        listed = set()
        for sub in subs:
            listed.add(sub.topic)
            old = self.subscriptions.get(sub.topic)
            if old is None:
                self.subscriptions[sub.topic] = sub
                changed = True
            elif sub.sub_version > old.sub_version:
                self.subscriptions[sub.topic] = sub
        for topic in [t for t in self.subscriptions if t not in listed]:
            del self.subscriptions[topic]
            changed = True
        return changed

    def connection(self) -> ConsumerConnection:
        return ConsumerConnection(
            [c.info() for c in self.channels.values()],
            dict(self.subscriptions),
            self.consume_type,
            self.message_model,
            self.consume_from_where,
        )


class ConsumerManager:
    def __init__(self) -> None:
        self.groups: dict[str, ConsumerGroupInfo] = {}
        self.on_ids_changed: Callable[[ConsumerGroupInfo], None] = lambda info: None

    def get(self, group: str) -> ConsumerGroupInfo | None:
        return self.groups.get(group)

    def register(self, channel: ClientChannel, data: ConsumerData) -> None:
        """Apply one ConsumerData of a heartbeat; notifies when membership or topics changed."""
        info = self.groups.get(data.group_name)
        if info is None:
            info = self.groups[data.group_name] = ConsumerGroupInfo(
                data.group_name, data.consume_type, data.message_model, data.consume_from_where
            )
        info.consume_type = data.consume_type
        info.message_model = data.message_model
        info.consume_from_where = data.consume_from_where
        old = info.channels.get(channel.conn)
        joined = old is None or old.client_id != channel.client_id
        if joined:
            info.channels[channel.conn] = channel
            groups_of(channel.conn, CONSUMER_GROUPS).add(info.group)
            log.info("consumer %s joined group %s from %s", channel.client_id, info.group, channel.conn.peer)
        else:
            assert old is not None
            old.last_update = channel.last_update
        topics_changed = info.update_subscriptions(data.subscription_data_set)
        if joined or topics_changed:
            self.on_ids_changed(info)

    def unregister(self, conn: Connection, group: str) -> None:
        info = self.groups.get(group)
        groups_of(conn, CONSUMER_GROUPS).discard(group)
        if info is not None and info.channels.pop(conn, None) is not None:
            self._left(info)

    def connection_closed(self, conn: Connection) -> None:
        groups_of(conn, CONSUMER_GROUPS).clear()
        for info in list(self.groups.values()):
            if info.channels.pop(conn, None) is not None:
                self._left(info)

    def scan_expired(self) -> None:
        deadline = now_ms() - CHANNEL_EXPIRED_MS
        for info in list(self.groups.values()):
            expired = [c for c, ch in info.channels.items() if ch.last_update < deadline]
            for conn in expired:
                log.warning("consumer %s of group %s expired", info.channels[conn].client_id, info.group)
                del info.channels[conn]
                groups_of(conn, CONSUMER_GROUPS).discard(info.group)
                conn.close()
            if expired:
                self._left(info)

    def _left(self, info: ConsumerGroupInfo) -> None:
        if not info.channels:
            del self.groups[info.group]
            log.info("consumer group %s has no member left", info.group)
        else:
            self.on_ids_changed(info)

    def groups_subscribing(self, topic: str) -> set[str]:
        return {g for g, info in self.groups.items() if topic in info.subscriptions}
