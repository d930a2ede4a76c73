"""The NameServer's route tables (docs/wire-protocol.md §nameserver-behaviour) as a pure, clock-injected state
machine.

Concurrency model: the NameServer runs on one event loop, and every method here is synchronous, so a
registration is applied in one step and a lookup can never observe half of it, without any lock
that a lookup would have to wait on. Route bodies are cached per (topic, JSON form) and the cache is
dropped only by changes that alter routes, so the hot path of a lookup is one dict probe.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from daemon.remoting.bodies import (
    BrokerData,
    ClusterInfo,
    DataVersion,
    PermName,
    QueueData,
    TopicConfigSerializeWrapper,
    TopicList,
    TopicRouteData,
)
from store.fastjson import dumps

log = logging.getLogger(__name__)

MASTER_ID = 0


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


#: mqctl's optional field of GET_BROKER_CLUSTER_INFO: a request that carries it (any value) is answered
#: with it, the NameServer's wall clock (ms since the epoch) when it answered, which ``mqctl check cluster``
#: measures its skew from (a NameServer with TLS judges client certificates by it). A RocketMQ NameServer
#: ignores it and sends none; a Java client's answer is 4.9.8's byte for byte.
CLOCK_FIELD = "mqctlClockMs"


@dataclass(slots=True)
class BrokerLiveInfo:
    """Liveness of one registered broker address."""

    last_update_ms: int
    data_version: DataVersion
    ha_server_addr: str
    #: The connection the registration came over (opaque here; used to expire on disconnect).
    connection: object | None = None


@dataclass(slots=True)
class RegisterResult:
    """What REGISTER_BROKER answers a slave: its master's addresses, when the master is live."""

    master_addr: str | None = None
    ha_server_addr: str | None = None


@dataclass(slots=True)
class Expired:
    """A broker address removed by the liveness scan, with the connection to close."""

    broker_addr: str
    connection: object | None


@dataclass
class RouteInfoManager:
    """topic → queue data, broker name → addresses, cluster → broker names, address → liveness."""

    clock: Callable[[], int] = wall_clock_ms
    broker_expire_ms: int = 120_000
    topic_queue_table: dict[str, dict[str, QueueData]] = field(default_factory=dict)
    broker_addr_table: dict[str, BrokerData] = field(default_factory=dict)
    cluster_addr_table: dict[str, set[str]] = field(default_factory=dict)
    broker_live_table: dict[str, BrokerLiveInfo] = field(default_factory=dict)
    filter_server_table: dict[str, list[str]] = field(default_factory=dict)
    _route_cache: dict[tuple[str, bool, str | None], bytes] = field(
        default_factory=dict, init=False, repr=False
    )
    #: Entries of `topic_queue_table` (a topic on a broker), kept as they come and go: the cap
    #: `routeMaxQueueDatas` is checked against it without a walk.
    queue_datas: int = field(default=0, init=False)
    #: Told each broker address the routes drop (unregistered, expired, its connection closed), after
    #: it is dropped: what others keep per address (the NameServer's processor) goes with it.
    on_removed: list[Callable[[str], None]] = field(default_factory=list, init=False, repr=False)

    def added_queue_datas(self, broker_name: str, topics: TopicConfigSerializeWrapper) -> int:
        """How many entries a master's registration of ``topics`` as ``broker_name`` would add."""
        table = self.topic_queue_table
        return sum(
            1
            for topic in topics.topic_config_table
            if (queues := table.get(topic)) is None or broker_name not in queues
        )

    # ------------------------------------------------------------------ registration

    def register_broker(
        self,
        cluster_name: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        ha_server_addr: str,
        topics: TopicConfigSerializeWrapper | None,
        filter_servers: list[str] | None = None,
        connection: object | None = None,
    ) -> RegisterResult:
        """Apply one registration (docs/wire-protocol.md §registration) and return what a slave must be
        told."""
        changed = False
        names = self.cluster_addr_table.setdefault(cluster_name, set())
        if broker_name not in names:
            names.add(broker_name)
            changed = True
        broker = self.broker_addr_table.get(broker_name)
        first = broker is None
        if broker is None:
            broker = self.broker_addr_table[broker_name] = BrokerData(cluster_name, broker_name, {})
        addrs = broker.broker_addrs
        for other_id in [i for i, a in addrs.items() if a == broker_addr and i != broker_id]:
            del addrs[other_id]  # same address re-registering under a new id (slave promoted)
            changed = True
        previous = addrs.get(broker_id)
        first = first or previous is None
        if previous != broker_addr:
            addrs[broker_id] = broker_addr
            changed = True

        version = topics.data_version if topics is not None else DataVersion()
        live = self.broker_live_table.get(broker_addr)
        if (
            topics is not None
            and broker_id == MASTER_ID
            and (first or live is None or live.data_version != version)
        ):
            for config in topics.topic_config_table.values():
                queue = QueueData(
                    broker_name,
                    config.read_queue_nums,
                    config.write_queue_nums,
                    config.perm,
                    config.topic_sys_flag,
                )
                queues = self.topic_queue_table.setdefault(config.topic_name, {})
                old = queues.get(broker_name)
                if old != queue:
                    self.queue_datas += old is None
                    queues[broker_name] = queue
                    changed = True
        if live is None:
            log.info(
                "new broker registered: %s %s (id %d) in %s",
                broker_name,
                broker_addr,
                broker_id,
                cluster_name,
            )
        self.broker_live_table[broker_addr] = BrokerLiveInfo(
            self.clock(), version, ha_server_addr, connection
        )

        if filter_servers:
            if self.filter_server_table.get(broker_addr) != filter_servers:
                self.filter_server_table[broker_addr] = list(filter_servers)
                changed = True  # routes carry the list: a cached one must not keep the old
        elif self.filter_server_table.pop(broker_addr, None) is not None:
            changed = True
        if changed:
            self._route_cache.clear()

        result = RegisterResult()
        if broker_id != MASTER_ID:
            master = addrs.get(MASTER_ID)
            master_live = self.broker_live_table.get(master) if master else None
            if master is not None and master_live is not None:
                result = RegisterResult(master, master_live.ha_server_addr)
        return result

    def unregister_broker(
        self, cluster_name: str, broker_addr: str, broker_name: str, broker_id: int
    ) -> None:
        """Explicit removal at broker shutdown (docs/wire-protocol.md §broker-registration)."""
        self.broker_live_table.pop(broker_addr, None)
        self.filter_server_table.pop(broker_addr, None)
        broker = self.broker_addr_table.get(broker_name)
        if broker is not None and broker.broker_addrs.get(broker_id) == broker_addr:
            del broker.broker_addrs[broker_id]
            if not broker.broker_addrs:
                self._drop_broker_name(broker_name)
        log.info(
            "broker unregistered: %s %s (id %d) from %s", broker_name, broker_addr, broker_id, cluster_name
        )
        self._route_cache.clear()
        self._removed(broker_addr)

    def holds(self, broker_name: str, broker_id: int, broker_addr: str, version: DataVersion) -> bool:
        """The broker at ``broker_addr`` is registered as (``broker_name``, ``broker_id``), live, at
        ``version``: registering it again at that version reads no topic table."""
        broker = self.broker_addr_table.get(broker_name)
        live = self.broker_live_table.get(broker_addr)
        return (
            broker is not None
            and broker.broker_addrs.get(broker_id) == broker_addr
            and live is not None
            and live.data_version == version
        )

    def query_data_version(self, broker_addr: str, version: DataVersion) -> tuple[bool, DataVersion | None]:
        """QUERY_DATA_VERSION (docs/wire-protocol.md §broker-registration): (changed, stored version); an
        unchanged broker is refreshed."""
        live = self.broker_live_table.get(broker_addr)
        if live is None:
            return True, None
        if live.data_version != version:
            return True, live.data_version
        live.last_update_ms = self.clock()
        return False, live.data_version

    # ------------------------------------------------------------------ liveness

    def scan_not_active_brokers(self) -> list[Expired]:
        """Remove brokers silent for longer than `broker_expire_ms`
        (docs/wire-protocol.md §broker-liveness)."""
        deadline = self.clock() - self.broker_expire_ms
        expired = [
            Expired(addr, live.connection)
            for addr, live in self.broker_live_table.items()
            if live.last_update_ms < deadline
        ]
        for item in expired:
            log.warning(
                "broker %s expired: no registration for %d ms", item.broker_addr, self.broker_expire_ms
            )
            self._remove_broker_addr(item.broker_addr)
        return expired

    def on_connection_closed(self, connection: object, remote_addr: str | None = None) -> str | None:
        """Drop the broker that registered over `connection`; returns its address, if any."""
        addr = next((a for a, live in self.broker_live_table.items() if live.connection is connection), None)
        if addr is None and remote_addr in self.broker_live_table:
            addr = remote_addr
        if addr is not None:
            log.info("connection of broker %s closed: removing it", addr)
            self._remove_broker_addr(addr)
        return addr

    def _remove_broker_addr(self, broker_addr: str) -> None:
        self.broker_live_table.pop(broker_addr, None)
        self.filter_server_table.pop(broker_addr, None)
        for name, broker in list(self.broker_addr_table.items()):
            ids = [i for i, a in broker.broker_addrs.items() if a == broker_addr]
            for broker_id in ids:
                del broker.broker_addrs[broker_id]
            if ids and not broker.broker_addrs:
                self._drop_broker_name(name)
        self._route_cache.clear()
        self._removed(broker_addr)

    def _removed(self, broker_addr: str) -> None:
        for forget in self.on_removed:
            forget(broker_addr)

    def _drop_broker_name(self, broker_name: str) -> None:
        broker = self.broker_addr_table.pop(broker_name)
        names = self.cluster_addr_table.get(broker.cluster)
        if names is not None:
            names.discard(broker_name)
            if not names:
                del self.cluster_addr_table[broker.cluster]
        for topic in list(self.topic_queue_table):
            queues = self.topic_queue_table[topic]
            if queues.pop(broker_name, None) is not None:
                self.queue_datas -= 1
                if not queues:
                    del self.topic_queue_table[topic]

    # ------------------------------------------------------------------ lookups

    def pick_route(self, topic: str) -> TopicRouteData | None:
        """Route data of a topic (docs/wire-protocol.md §route-construction), or None when no live broker
        serves it."""
        queues = self.topic_queue_table.get(topic)
        if not queues:
            return None
        brokers = []
        filters: dict[str, list[str]] = {}
        for name in queues:
            broker = self.broker_addr_table.get(name)
            if broker is None:
                continue
            brokers.append(BrokerData(broker.cluster, broker.broker_name, dict(broker.broker_addrs)))
            for addr in broker.broker_addrs.values():
                if addr in self.filter_server_table:
                    filters[addr] = list(self.filter_server_table[addr])
        if not brokers:
            return None
        return TopicRouteData(list(queues.values()), brokers, filters)

    def route_body(
        self, topic: str, standard_json: bool, order_topic_conf: str | None = None
    ) -> bytes | None:
        """The encoded GET_ROUTEINFO_BY_TOPIC body, cached until routes change."""
        key = (topic, standard_json, order_topic_conf)
        body = self._route_cache.get(key)
        if body is None:
            route = self.pick_route(topic)
            if route is None:
                return None
            route.order_topic_conf = order_topic_conf
            body = dumps(route, bare_int_keys=not standard_json, ensure_ascii=standard_json)
            self._route_cache[key] = body
        return body

    def cluster_info(self) -> ClusterInfo:
        return ClusterInfo(
            dict(self.broker_addr_table), {c: set(names) for c, names in self.cluster_addr_table.items()}
        )

    def all_topics(self) -> TopicList:
        return TopicList(list(self.topic_queue_table))

    def topics_by_cluster(self, cluster: str) -> TopicList:
        names = self.cluster_addr_table.get(cluster, set())
        return TopicList([t for t, queues in self.topic_queue_table.items() if not names.isdisjoint(queues)])

    def system_topics(self) -> TopicList:
        """Cluster and broker names (brokers register topics named after them), plus one broker address."""
        topics = list(self.cluster_addr_table)
        for names in self.cluster_addr_table.values():
            topics.extend(names)
        addr = next(
            (a for b in self.broker_addr_table.values() for a in b.broker_addrs.values()),
            None,
        )
        return TopicList(topics, addr)

    def unit_topics(self, predicate: Callable[[int], bool]) -> TopicList:
        """Topics whose first queue data's sysFlag satisfies `predicate` (codes 311-313)."""
        return TopicList(
            [
                t
                for t, queues in self.topic_queue_table.items()
                if queues and predicate(next(iter(queues.values())).topic_sys_flag)
            ]
        )

    # ------------------------------------------------------------------ admin edits

    def delete_topic(self, topic: str, cluster_name: str | None = None) -> None:
        """DELETE_TOPIC_IN_NAMESRV (docs/wire-protocol.md §route-queries): whole topic, or only the named
        cluster's brokers."""
        if cluster_name:
            queues = self.topic_queue_table.get(topic)
            if queues is not None:
                for name in self.cluster_addr_table.get(cluster_name, set()):
                    self.queue_datas -= queues.pop(name, None) is not None
                if not queues:
                    del self.topic_queue_table[topic]
        else:
            self.queue_datas -= len(self.topic_queue_table.pop(topic, {}))
        self._route_cache.clear()

    def wipe_write_perm(self, broker_name: str) -> int:
        """Clear the WRITE bit on every topic of a broker (docs/wire-protocol.md §write-permission); returns
        the topic count."""
        return self._edit_perm(broker_name, lambda perm: perm & ~PermName.WRITE)

    def add_write_perm(self, broker_name: str) -> int:
        """Set perm to READ|WRITE on every topic of a broker (docs/wire-protocol.md §write-permission);
        returns the topic count."""
        return self._edit_perm(broker_name, lambda perm: PermName.READ_WRITE)

    def _edit_perm(self, broker_name: str, edit: Callable[[int], int]) -> int:
        count = 0
        for queues in self.topic_queue_table.values():
            queue = queues.get(broker_name)
            if queue is not None:
                queue.perm = edit(queue.perm)
                count += 1
        self._route_cache.clear()
        return count
