"""RouteInfoManager as a pure state machine with a fake clock
(docs/wire-protocol.md §nameserver-behaviour)."""

from __future__ import annotations

from daemon.namesrv.routes import RouteInfoManager
from daemon.remoting.bodies import DataVersion, TopicConfig, TopicConfigSerializeWrapper


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def topics(version: int, **queues: int) -> TopicConfigSerializeWrapper:
    return TopicConfigSerializeWrapper(
        {t: TopicConfig(t, n, n) for t, n in queues.items()}, DataVersion(version, version)
    )


def test_expiry_is_exactly_after_the_configured_silence() -> None:
    clock = Clock()
    routes = RouteInfoManager(clock, broker_expire_ms=120_000)
    conn = object()
    routes.register_broker("C", "a:1", "b", 0, "a:2", topics(1, T=4), connection=conn)
    clock.now += 120_000
    assert routes.scan_not_active_brokers() == []
    clock.now += 1
    (expired,) = routes.scan_not_active_brokers()
    assert (expired.broker_addr, expired.connection) == ("a:1", conn)
    assert routes.pick_route("T") is None and routes.cluster_info().cluster_addr_table == {}


def test_master_gone_slave_stays_keeps_routes() -> None:
    clock = Clock()
    routes = RouteInfoManager(clock)
    routes.register_broker("C", "m:1", "b", 0, "m:2", topics(1, T=4))
    slave = routes.register_broker("C", "s:1", "b", 1, "s:2", topics(1, T=4))
    assert (slave.master_addr, slave.ha_server_addr) == ("m:1", "m:2")
    routes.unregister_broker("C", "m:1", "b", 0)
    route = routes.pick_route("T")
    assert route is not None and route.broker_datas[0].broker_addrs == {1: "s:1"}


def test_route_cache_follows_changes() -> None:
    routes = RouteInfoManager(Clock())
    routes.register_broker("C", "m:1", "b", 0, "m:2", topics(1, T=4))
    first = routes.route_body("T", standard_json=True)
    assert first is not None and routes.route_body("T", standard_json=True) is first
    routes.register_broker("C", "m:1", "b", 0, "m:2", topics(2, T=8))
    second = routes.route_body("T", standard_json=True)
    assert second is not None and b'"readQueueNums":8' in second
    assert routes.route_body("T", standard_json=False) != second  # bare keys


def test_promoted_slave_on_same_address_replaces_old_id() -> None:
    routes = RouteInfoManager(Clock())
    routes.register_broker("C", "x:1", "b", 1, "x:2", topics(1, T=4))
    routes.register_broker("C", "x:1", "b", 0, "x:2", topics(1, T=4))
    assert routes.broker_addr_table["b"].broker_addrs == {0: "x:1"}


def test_connection_close_falls_back_to_remote_address() -> None:
    routes = RouteInfoManager(Clock())
    routes.register_broker("C", "a:1", "b", 0, "a:2", topics(1, T=4))
    assert routes.on_connection_closed(object(), "elsewhere:5") is None
    assert routes.on_connection_closed(object(), "a:1") == "a:1"
    assert routes.broker_live_table == {}
