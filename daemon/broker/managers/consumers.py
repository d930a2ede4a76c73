"""Live consumer groups: members (connections), their settings and subscriptions
(docs/wire-protocol.md §heartbeats).

A group changes membership when a connection joins, leaves, closes or stops heart-beating for 120 s;
`on_ids_changed(group)` is then called so the broker can send NOTIFY_CONSUMER_IDS_CHANGED.
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from daemon.broker.bodies import ConnectionInfo, ConsumerConnection, ConsumerData, SubscriptionData
from daemon.remoting.connection import Connection
from daemon.remoting.limits import shown

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
            return f"consumer group {shown(group)} subscribes {topics} topics; a group subscribes {MAX_CLIENT_GROUPS} at most"
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
    """A live consumer group. Each member's subscriptions are its own (its last heartbeat's, merged as
    4.9.8 merges a group's); ``subscriptions``, what admin commands and rebalance read, is their union,
    each topic's entry the newest a live member lists.
    4.9.8 keeps one table for the group, which any heartbeat rewrites: one naming an existing group with
    a filter matching nothing and the highest ``subVersion`` made every member's pulls match nothing,
    and one that left a topic out took it from the group."""

    group: str
    consume_type: str
    message_model: str
    consume_from_where: str
    #: topic -> the subscription of the highest ``subVersion`` a member listing the topic holds
    subscriptions: dict[str, SubscriptionData] = field(default_factory=dict)
    channels: dict[Connection, ClientChannel] = field(default_factory=dict)
    #: each member connection's own subscriptions, by topic
    members: dict[Connection, dict[str, SubscriptionData]] = field(default_factory=dict)
    #: topic -> how many members list it
    listing: dict[str, int] = field(default_factory=dict)

    def client_ids(self) -> list[str]:
        return [c.client_id for c in self.channels.values()]

    def own_subscription(self, conn: Connection, topic: str) -> SubscriptionData | None:
        """The subscription to ``topic`` that ``conn`` registered itself; the group's when ``conn``
        registered none for this group (a pull from a connection that sent no heartbeat)."""
        own = self.members.get(conn)
        if own is None:
            return self.subscriptions.get(topic)
        return own.get(topic)

    def update_subscriptions(self, conn: Connection, subs: list[SubscriptionData]) -> bool:
        """Merge a heartbeat's subscriptions into its connection's own, as 4.9.8 merges a group's (a
        topic is added, replaced by a higher ``subVersion``, dropped when not listed); True when the
        group's topics changed."""
        own = self.members.get(conn)
        if own is None:
            own = self.members[conn] = {}
        changed = False
        listed = set()
        for sub in subs:
            listed.add(sub.topic)
            old = own.get(sub.topic)
            if old is None or sub.sub_version > old.sub_version:
                own[sub.topic] = sub
                changed = self._took(sub, old is None) or changed
        for topic in [t for t in own if t not in listed]:
            changed = self._gave_up(own.pop(topic)) or changed
        return changed

    def drop_member(self, conn: Connection) -> None:
        """Forget a member's subscriptions: the group keeps the topics its other members list."""
        for sub in (self.members.pop(conn, None) or {}).values():
            self._gave_up(sub)

    def _took(self, sub: SubscriptionData, new: bool) -> bool:
        """A member now lists ``sub`` (``new``: a topic it did not list): the group's view takes it when
        it is newer; True for a topic no member listed."""
        if new:
            self.listing[sub.topic] = self.listing.get(sub.topic, 0) + 1
        held = self.subscriptions.get(sub.topic)
        if held is None or sub.sub_version > held.sub_version:
            self.subscriptions[sub.topic] = sub
        return held is None

    def _gave_up(self, sub: SubscriptionData) -> bool:
        """A member no longer lists ``sub``'s topic (its own entry already gone); True when no member does,
        and the view drops it. While others list it and the view held ``sub``, the view takes the newest of
        theirs: a departed member's filter stayed the group's (what a pull without its own subscription
        matched) until every other member left too. Only then are the members walked, not at each
        departure."""
        topic = sub.topic
        left = self.listing.get(topic, 0) - 1
        if left > 0:
            self.listing[topic] = left
            if self.subscriptions.get(topic) is sub:
                newest = self._newest(topic)
                if newest is not None:
                    self.subscriptions[topic] = newest
            return False
        self.listing.pop(topic, None)
        self.subscriptions.pop(topic, None)
        return True

    def _newest(self, topic: str) -> SubscriptionData | None:
        """The members' entry of ``topic`` of the highest ``subVersion`` (of equals, the first member's)."""
        newest: SubscriptionData | None = None
        for own in self.members.values():
            sub = own.get(topic)
            if sub is not None and (newest is None or sub.sub_version > newest.sub_version):
                newest = sub
        return newest

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
        #: Called with (group, client id) when a member leaves by UNREGISTER_CLIENT or expires.
        self.on_member_left: Callable[[str, str, Connection], None] = lambda group, client_id, conn: None

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
        topics_changed = info.update_subscriptions(channel.conn, data.subscription_data_set)
        if joined or topics_changed:
            self.on_ids_changed(info)

    def unregister(self, conn: Connection, group: str) -> None:
        info = self.groups.get(group)
        groups_of(conn, CONSUMER_GROUPS).discard(group)
        left = info.channels.pop(conn, None) if info is not None else None
        if info is not None and left is not None:
            info.drop_member(conn)
            self._left(info)
            if left.client_id not in info.client_ids():  # (the same client on another connection)
                self.on_member_left(group, left.client_id, conn)

    def connection_closed(self, conn: Connection) -> None:
        groups_of(conn, CONSUMER_GROUPS).clear()
        for info in list(self.groups.values()):
            if info.channels.pop(conn, None) is not None:
                info.drop_member(conn)
                self._left(info)

    def scan_expired(self) -> None:
        deadline = now_ms() - CHANNEL_EXPIRED_MS
        for info in list(self.groups.values()):
            expired = [c for c, ch in info.channels.items() if ch.last_update < deadline]
            # (counted once: asking each expiry whether its client is still there walked every member)
            ids = collections.Counter(info.client_ids()) if expired else None
            for conn in expired:
                assert ids is not None
                client_id = info.channels[conn].client_id
                log.warning("consumer %s of group %s expired", client_id, info.group)
                del info.channels[conn]
                ids[client_id] -= 1
                if ids[client_id] <= 0:  # (not the same client on another connection)
                    self.on_member_left(info.group, client_id, conn)
                info.drop_member(conn)
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
