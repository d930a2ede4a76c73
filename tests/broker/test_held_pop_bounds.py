"""Long-polling POPs waiting for messages are bounded as held pulls are (daemon.broker.polls): a connection
holds `maxHeldPullsPerConnection` waiting pops at most, a host beyond loopback `maxHeldPullsPerHost`; past
either a pop reads once and, finding nothing, is answered POLLING_FULL (209) as 5.x's broker answers when
its polling is full. Before, a waiting pop was bounded only by the requests a connection may have awaiting
answers: one host's connections held gigabytes of them.

And a host is an IPv6 /64, not an address: a peer with a /64 speaks from any of its 2^64 addresses, each
of which counted as a host of its own (its held pulls, its pops, its TLS handshakes, its share of the
connections)."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest

from daemon.broker.headers import PopMessageRequestHeader
from daemon.broker.polls import POLLING_FULL
from daemon.protect import budget_host
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from store.models import SubscriptionGroupConfig, TopicConfig
from tests.broker.test_held_pull_bounds import _scrape, _until
from tests.support.broker import BrokerHandle, start_broker
from tests.support.netns import peer_namespace

POLLING_TIMEOUT = 210


def _pop(topic: str, poll_ms: int = 50_000) -> RemotingCommand:
    header = PopMessageRequestHeader("GPop", topic, -1, 8, 30_000, poll_ms, int(time.time() * 1000), 1)
    return RemotingCommand.request(RequestCode.POP_MESSAGE, header.to_ext_fields())


async def test_a_connections_pops_past_its_bound_do_not_wait(broker: BrokerHandle) -> None:
    b = broker.broker
    b.config.max_held_pulls_per_connection = 3
    await broker.create_topic("Popped", 2)
    b.groups.put(SubscriptionGroupConfig("GPop"))
    calls = [
        asyncio.create_task(broker.client.invoke(broker.addr, _pop("Popped", 8_000), 90)) for _ in range(5)
    ]
    await _until(
        "three wait, two answered", lambda: b.polls.waiting == 3 and sum(c.done() for c in calls) == 2
    )
    for answer in (c.result() for c in calls if c.done()):
        assert answer.code == POLLING_FULL and answer.remark == "polling full"
        # the header 5.x's client decodes with every answer (its required fields)
        assert {"popTime", "invisibleTime", "reviveQid", "restNum"} <= set(answer.ext_fields)
    assert b.polls.refused_owner == 2 and b.polls.refused_host == 0  # (loopback: no host budget)
    refusals = await asyncio.to_thread(_scrape, b.metrics_port)
    assert refusals["held_pops_connection"] == 2 and refusals["held_pops_host"] == 0
    # the waiting ones are served by the next message; then the connection may wait again
    assert (await broker.send("Popped", b"m", queue_id=0)).code == ResponseCode.SUCCESS
    await _until("a waiting pop served", lambda: b.polls.waiting < 3)
    answers = await asyncio.wait_for(asyncio.gather(*(c for c in calls if not c.done())), 90)
    assert sorted(a.code for a in answers) == [ResponseCode.SUCCESS, POLLING_TIMEOUT, POLLING_TIMEOUT]
    assert b.polls.waiting == 0
    short = await broker.client.invoke(broker.addr, _pop("Popped", poll_ms=100), 30)
    assert short.code == POLLING_TIMEOUT  # waited its poll time: room again


async def test_pops_of_every_host_together_are_bounded(broker: BrokerHandle) -> None:
    """Many hosts, each within its bound, held as many pops as their connections carried: all hosts
    together wait `MAX_WAITING_POPS` at most (5.x's maxPopPollingSize), the rest answered polling full."""
    b = broker.broker
    b.config.max_held_pulls_per_connection = 0
    b.polls.limit = 2
    await broker.create_topic("Everyone", 1)
    b.groups.put(SubscriptionGroupConfig("GPop"))
    calls = [
        asyncio.create_task(broker.client.invoke(broker.addr, _pop("Everyone", 8_000), 90)) for _ in range(4)
    ]
    await _until("two wait, two answered", lambda: b.polls.waiting == 2 and sum(c.done() for c in calls) == 2)
    assert [c.result().code for c in calls if c.done()] == [POLLING_FULL, POLLING_FULL]
    assert b.polls.refused_total == 2 and b.polls.refused_owner == b.polls.refused_host == 0
    assert (await asyncio.to_thread(_scrape, b.metrics_port))["held_pops_total"] == 2
    for c in calls:
        c.cancel()


#: From the namespace, against [argv[1]]:argv[2]: from each source address of argv[3] (comma-separated),
#: one connection pipelining argv[4] long-polling pulls and as many POPs of topic argv[5]; says "sent",
#: then keeps them open until a line on stdin.
_FLOOD = """
import socket, sys, threading, time
from daemon.broker.headers import PopMessageRequestHeader, PullMessageRequestHeader
from daemon.remoting.command import RemotingCommand
from daemon.remoting.frame import encode_command

host, port, sources, per, topic = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(","), int(sys.argv[4]), sys.argv[5]
pulls = [RemotingCommand.request(11, PullMessageRequestHeader(
    "GFlood", topic, i % 8, 0, 32, 0x6, 0, 60_000, 0, "*", "TAG").to_ext_fields()) for i in range(per)]
pops = [RemotingCommand.request(200050, PopMessageRequestHeader(
    "GFlood", topic, -1, 8, 30_000, 60_000, int(time.time() * 1000), 1).to_ext_fields()) for i in range(per)]
frames = b"".join(encode_command(c) for c in pulls + pops)
socks = []
for source in sources:
    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    s.bind((source, 0))
    s.connect((host, port))
    socks.append(s)

def drain(s):
    while s.recv(65536):
        pass

for s in socks:
    threading.Thread(target=drain, args=(s,), daemon=True).start()
for s in socks:
    s.sendall(frames)
print("sent", flush=True)
sys.stdin.readline()
"""


@pytest.mark.slow
async def test_one_hosts_addresses_of_a_64_share_its_budgets(tmp_path: Path) -> None:
    """A peer speaking from four addresses of its /64 holds its host's bound of pulls and of pops, not
    four times it; a consumer of this host (another /64) is held all along."""
    sources, per, bound = 4, 30, 40
    with peer_namespace(ipv6_peers=sources) as peer:
        broker = await start_broker(
            tmp_path / "store", listen_host=peer.host_ip6, broker_ip1=peer.host_ip6, metrics_host="127.0.0.1"
        )
        broker.config.max_held_pulls_per_host = bound
        host = budget_host(peer.peer_ip6s[0])
        try:
            broker.topics.file.update(TopicConfig("Flooded", 8, 8))
            broker.groups.put(SubscriptionGroupConfig("GFlood"))
            argv = ["ip", "netns", "exec", peer.name, sys.executable, "-c", _FLOOD]
            process = await asyncio.create_subprocess_exec(
                *argv, peer.host_ip6, str(broker.server.port), ",".join(peer.peer_ip6s), str(per), "Flooded",
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            )  # fmt: skip
            try:
                assert process.stdout is not None and process.stdin is not None
                assert await asyncio.wait_for(process.stdout.readline(), 120) == b"sent\n"
                total = sources * per
                await _until(
                    "every flooded pull and pop held or refused",
                    lambda: (
                        broker.hold.held_by(host) + broker.hold.refused_host == total
                        and broker.polls.held_by(host) + broker.polls.refused_host == total
                    ),
                    timeout=180,
                )
                held_pulls, held_pops = broker.hold.held_by(host), broker.polls.held_by(host)
                refusals = await asyncio.to_thread(_scrape, broker.metrics_port)
                process.stdin.write(b"done\n")
                await process.stdin.drain()
                assert await asyncio.wait_for(process.wait(), 60) == 0
            finally:
                if process.returncode is None:
                    process.kill()
                    await process.wait()
            await _until(
                "the flood's waits dropped with their connections", lambda: broker.polls.waiting == 0
            )
        finally:
            await broker.stop()
    assert held_pulls == bound and held_pops == bound
    assert broker.hold.refused_host == broker.polls.refused_host == sources * per - bound
    assert refusals["held_pulls_host"] == refusals["held_pops_host"] == sources * per - bound
