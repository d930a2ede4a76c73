"""The official 5.x Python client against a DLedger group whose leader is cut off its peers by the proxy
(clients still reach it), healed, then the next leader's links stalled and healed: the application of
tests/dledger/test_grpc_fault_pass.py (a Producer of normal, FIFO, timer and transactional messages; two
SimpleConsumers of a group and two of a FIFO group receiving, changing invisible durations, acking),
its history checked the same way: no acknowledged send lost, no rolled-back message delivered, FIFO
order kept in each message group, no FIFO message lent to two consumers at once (a normal one only across
a fault), every timer delivered once and not before its time. A leader cut off must lend nothing past
its lease and answer no ack or send it could not hold on a quorum."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from daemon.remoting.codes import RequestCode
from store.models import SubscriptionGroupConfig
from tests.broker.test_ha import pull_all
from tests.dledger.test_grpc_fault_pass import (
    CALL_TIMEOUT_S,
    FIFO,
    FIFO_GROUP,
    GROUP,
    INVISIBLE_S,
    NORMAL,
    TIMED,
    TX,
    App,
    consume,
    drained,
    produce,
)
from tests.dledger.test_roles import grpc_port
from tests.jepsen.pop_checker import early, lent_twice_at_once, lost, out_of_order
from tests.jepsen.raft import RaftGroup, raft_group
from tests.support.broker import BrokerClient
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

#: The Python client's route refresh (30 s) and a margin: it finds the new leader's front by then.
ROUTE_REFRESH_S = 35


async def held_everywhere(g: RaftGroup) -> None:
    """The topics and both groups (the FIFO one with consumeMessageOrderly) on every member."""
    leader = g.nodes[await g.leader()]
    on = BrokerClient(leader.addr, g.client)
    for topic in (NORMAL, FIFO, TIMED, TX):
        await on.create_topic(topic, 2)
    import json

    for group, extra in ((GROUP, {}), (FIFO_GROUP, {"consumeMessageOrderly": True})):
        body = json.dumps({**json.loads(SubscriptionGroupConfig(group).dumps()), **extra}).encode()
        r = await on.call(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body)
        assert r.code == 0, r.remark

    async def held() -> bool:
        for node in g.nodes:
            b = BrokerClient(node.addr, g.client)
            groups = await b.call(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
            topics = await b.call(RequestCode.GET_ALL_TOPIC_CONFIG)
            if groups.code != 0 or b'"consumeMessageOrderly":true' not in groups.body.replace(b" ", b""):
                return False
            if topics.code != 0 or any(t.encode() not in topics.body for t in (NORMAL, FIFO, TIMED, TX)):
                return False
        return True

    await wait_until(held, 60)


async def test_5x_clients_across_a_leader_cut_off_and_a_stalled_one(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    from rocketmq import FilterExpression, SimpleConsumer, TransactionChecker, TransactionResolution

    from tests.support.grpc5 import ClientConfiguration, Credentials, Producer

    class Checker(TransactionChecker):  # type: ignore[misc]
        def check(self, msg: Any) -> Any:
            rolled_back = msg.body.decode().endswith("-rollback")
            return TransactionResolution.ROLLBACK if rolled_back else TransactionResolution.COMMIT

    env = {**cli_env, "MQCTL_TRANSACTION_CHECK_INTERVAL": "2000", "MQCTL_TRANSACTION_TIME_OUT": "2000"}
    app = App()
    faults: list[float] = []
    async with raft_group(tmp_path, env, grpcListenPort=0) as g:
        await held_everywhere(g)
        first = await g.leader()
        access = next(i for i in range(3) if i != first)
        port = await grpc_port(g.client, g.nodes[access].addr)
        config = ClientConfiguration(f"127.0.0.1:{port}", Credentials("", ""), request_timeout=CALL_TIMEOUT_S)
        producer = Producer(config, (NORMAL, FIFO, TIMED, TX), checker=Checker())
        subscriptions = {
            GROUP: {t: FilterExpression("*") for t in (NORMAL, TIMED, TX)},
            FIFO_GROUP: {FIFO: FilterExpression("*")},
        }
        consumers = [
            (f"{group}-{i}", SimpleConsumer(config, group, subscriptions[group], await_duration=2), group)
            for group in (GROUP, FIFO_GROUP)
            for i in range(2)
        ]
        await asyncio.to_thread(producer.startup)
        for _, consumer, _ in consumers:
            await asyncio.to_thread(consumer.startup)
        threads = [threading.Thread(target=produce, args=(app, producer), daemon=True)]
        threads += [
            threading.Thread(target=consume, args=(app, c, name, group == FIFO_GROUP), daemon=True)
            for name, c, group in consumers
        ]
        for t in threads:
            t.start()
        try:
            await asyncio.sleep(10)
            faults.append(time.time())
            g.isolate(first, "refuse")
            second = await g.leader(other_than=first)
            await asyncio.sleep(5)
            g.heal(first)
            faults.append(time.time())
            await asyncio.sleep(ROUTE_REFRESH_S)
            faults.append(time.time())
            g.isolate(second, "stall")
            third = await g.leader(other_than=second)
            await asyncio.sleep(5)
            g.heal(second)
            faults.append(time.time())
            await asyncio.sleep(ROUTE_REFRESH_S)
            app.stop_sending.set()
            expected = set(app.sent) | set(app.committed)

            def unsettled() -> str:
                with app.lock:
                    missing = lost(expected, app.deliveries, faults, CALL_TIMEOUT_S)
                return f"{len(missing)} of {len(expected)} not acked; errors {app.errors} {app.last_errors}"

            await drained(app, expected, faults, unsettled)
            await asyncio.sleep(INVISIBLE_S + 5)  # what should not come back, were it to come
        finally:
            app.stop_sending.set()
            app.stop_consuming.set()
            for t in threads:
                await asyncio.to_thread(t.join, 30)
            for _, consumer, _ in consumers:
                await asyncio.to_thread(consumer.shutdown)
            await asyncio.to_thread(producer.shutdown)
        leader = g.nodes[await g.leader()]
        timed = [
            b.decode() for q in (0, 1) for b in await pull_all(BrokerClient(leader.addr, g.client), TIMED, q)
        ]
    deliveries = app.deliveries
    fifo = [d for d in deliveries if d.body in app.sequence]
    others = [d for d in deliveries if d.body not in app.sequence]
    print(
        f"{len(app.sent)} sent, {len(app.committed)} transactions to deliver, {len(deliveries)} deliveries;"
        f" leaders n{first} n{second} n{third}; errors {app.errors}"
    )
    assert lost(set(app.sent) | set(app.committed), deliveries, faults, CALL_TIMEOUT_S) == []
    assert [d.body for d in deliveries if d.body in app.rolled_back] == []
    assert out_of_order(fifo, app.sequence) == []
    assert lent_twice_at_once(fifo) == []
    assert lent_twice_at_once(others, faults) == []
    assert early(deliveries, app.due) == []
    assert sorted(b for b in timed if b in app.due) == sorted(app.due)
