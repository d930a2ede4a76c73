"""The official 5.x Python client against a DLedger group whose leader is cut off its peers by the proxy
(clients still reach it), healed, then the next leader's links stalled and healed: the application of
tests/dledger/test_grpc_fault_pass.py (a Producer of normal, FIFO, timer and transactional messages; two
SimpleConsumers of a group and two of a FIFO group receiving, changing invisible durations, acking),
its history checked the same way: no acknowledged send lost, no rolled-back message delivered, FIFO
order kept in each message group, no FIFO message lent to two consumers at once (a normal one only across
a fault or a leader's start the faults explain, or one of a couple of elections the host's load made:
more excuse nothing), every
timer delivered once and not before its time. A leader cut off must lend nothing past
its lease and answer no ack or send it could not hold on a quorum."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from daemon.remoting.codes import RequestCode
from store.models import SubscriptionGroupConfig
from tests.broker.test_ha import pull_all
from tests.dledger.test_grpc_fault_pass import (
    CHECK_QUICKLY,
    FIFO,
    FIFO_GROUP,
    GROUP,
    INVISIBLE_S,
    NORMAL,
    TIMED,
    TX,
    App,
    check_app,
    drained,
    start_app,
    takeovers,
    unsettled,
)
from tests.dledger.test_roles import grpc_port
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


def leadership(g: RaftGroup) -> str:
    """The members' own account of the run from their logs, in time order: their roles and terms, a
    leader stepping down, their POP hand-overs and revives (what a failure's history needs beside it)."""
    lines = [
        f"{line[:23]} {node.name} {line[24:]}"
        for node in g.nodes
        for line in node.log_tail(10**8).splitlines()
        if " role " in line or "stepping down" in line or "daemon.broker.pop" in line
    ]
    return "\n".join(sorted(lines))


async def test_5x_clients_across_a_leader_cut_off_and_a_stalled_one(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    app = App()
    faults: list[float] = []
    async with raft_group(tmp_path, {**cli_env, **CHECK_QUICKLY}, grpcListenPort=0) as g:
        await held_everywhere(g)
        fronts = {f"127.0.0.1:{await grpc_port(g.client, node.addr)}": node.name for node in g.nodes}
        first = await g.leader()
        access = next(i for i in range(3) if i != first)
        running = await asyncio.to_thread(start_app, app, await grpc_port(g.client, g.nodes[access].addr))
        try:
            await asyncio.sleep(10)
            leaders = [first]
            for mode in ("refuse", "stall"):  # the leader cut off, healed; the next one's links stalled
                faults.append(time.time())
                g.isolate(leaders[-1], mode)
                leaders.append(await g.leader(other_than=leaders[-1]))
                await asyncio.sleep(5)
                g.heal(leaders[-2])
                faults.append(time.time())
                await asyncio.sleep(ROUTE_REFRESH_S)
            app.stop_sending.set()
            expected = set(app.sent) | set(app.committed)
            await drained(app, expected, faults, lambda: unsettled(app, expected, faults))
            await asyncio.sleep(INVISIBLE_S + 5)  # what should not come back, were it to come
        finally:
            await asyncio.to_thread(running.stop)
            print(leadership(g))
        leader = g.nodes[await g.leader()]
        timed = [
            b.decode() for q in (0, 1) for b in await pull_all(BrokerClient(leader.addr, g.client), TIMED, q)
        ]
    # every leader's start (its term record): a change the faults did not make (a member's loop held past
    # its followers' patience on a loaded host) lends a normal message again as a fault's does, a couple at
    # most (the checker's allowance)
    terms = takeovers(node.store for node in g.nodes)
    told = [
        "leaders " + " ".join(f"n{i}" for i in leaders),
        "terms " + ", ".join(f"{term} at {at:.1f}" for at, term in terms),
        "fronts " + ", ".join(f"{name} {front}" for front, name in fronts.items()),
    ]
    check_app(app, faults, timed, "; ".join(told), [at for at, _ in terms])
