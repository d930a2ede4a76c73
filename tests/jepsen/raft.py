"""A DLedger broker group of three as processes for the nemesis: every peer-to-peer link runs through
the proxy (node i reaches node j at link ``ni->nj``), so one node can be cut off alone; clients reach the
brokers directly. Roles and terms are observed over DLedger's 50000 METADATA on each node's own port."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from daemon.remoting.bodies import ClusterInfo
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.errors import RemotingError
from tests.jepsen.checker import CheckResult
from tests.jepsen.client import ROUTE_REFRESH, Producer, ScriptProducer, master_of, real_clients, settled
from tests.jepsen.harness import Client, Run, jepsen_run
from tests.jepsen.history import Op
from tests.jepsen.nodes import Node, stop_all
from tests.jepsen.proxy import Mode
from tests.support.broker import BrokerClient
from tests.support.ports import free_port
from tests.support.waiting import wait_until

GROUP = "RaftNode00"
TOPIC = "JepsenRaft"
QUEUES = 4
METADATA = 50000
#: DLedger's answer code for success, inside the JSON body (the remoting code is 200 whatever it says).
DLEDGER_SUCCESS = 200
#: Faster than 4.9.8's defaults (2 s heartbeats, 3 missed) so that each fault fits in seconds.
TIMINGS = {
    "heartBeatTimeIntervalMs": 500,
    "maxHeartBeatLeak": 3,
    "minVoteIntervalMs": 300,
    "maxVoteIntervalMs": 600,
}

#: Set once a group could not start: the other tests skip at once instead of starting three brokers.
_unavailable: list[str] = []


@dataclass
class RaftGroup(Run):
    nodes: list[Node]
    raft_ports: list[int]
    producers: list[Producer | ScriptProducer] = field(default_factory=list)
    #: Seconds the producers may take to look up a moved master: ours look it up again on each failure.
    route_refresh: float = 0.0

    def links_of(self, i: int) -> list[str]:
        """Every proxy link into or out of node ``i``."""
        return [name for j in range(len(self.nodes)) if j != i for name in (f"n{i}->n{j}", f"n{j}->n{i}")]

    def isolate(self, i: int, mode: Mode = "stall") -> Op:
        """Cut node ``i`` off its peers (clients still reach it); the first entry marks the partition."""
        first, *_ = [self.nemesis.partition(self.proxy, link, mode) for link in self.links_of(i)]
        return first

    def heal(self, i: int) -> Op:
        return [self.nemesis.heal(self.proxy, link) for link in self.links_of(i)][-1]

    async def metadata(self, i: int) -> dict[str, object] | None:
        """Node ``i``'s METADATA answer (leaderId, term when it says, peers), None when it does not answer."""
        body = json.dumps({"group": GROUP, "remoteId": f"n{i}"}).encode()
        request = RemotingCommand.request(METADATA, {}, body)
        try:
            r = await self.client.invoke(f"127.0.0.1:{self.raft_ports[i]}", request, 1.0)
        except Exception:
            return None
        if r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
            _unavailable.append(f"n{i} does not support DLedger METADATA: {r.remark}")
            pytest.skip(_unavailable[-1])
        if not r.body:  # DLedger answers with remoting code 200 and its own code inside the body
            return None
        answer = json.loads(r.body)
        return answer if answer.get("code", DLEDGER_SUCCESS) == DLEDGER_SUCCESS else None

    async def observe(self) -> int | None:
        """Record what each running node says of itself; the node that names itself leader, if any
        (the highest term's, should two believe it)."""
        claims: list[tuple[int, int]] = []
        for i, node in enumerate(self.nodes):
            if not node.running:
                continue
            answer = await self.metadata(i)
            if answer is None:
                continue
            term = int(answer.get("term", -1))  # type: ignore[call-overload]
            leads = answer.get("leaderId") == f"n{i}"
            if term >= 0:
                self.history.observe(node.name, "LEADER" if leads else "FOLLOWER", term)
            if leads:
                claims.append((term, i))
        return max(claims)[1] if claims else None

    async def registered_master(self) -> str | None:
        """The address the NameServer lists as the group's brokerId 0 (None: none, or no answer)."""
        try:
            r = await self.client.invoke(
                self.namesrv, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO), 2.0
            )
        except RemotingError:
            return None
        if r.code != ResponseCode.SUCCESS:
            return None
        group = ClusterInfo.loads(r.body).broker_addr_table.get(GROUP)
        return None if group is None else group.master_addr()

    async def leader(self, *, other_than: int | None = None, timeout: float = 60.0) -> int:
        """Wait for a leader (other than ``other_than``) that the NameServer lists as the master; a failure
        shows the :meth:`evidence`."""
        found: list[int] = []

        async def elected() -> bool:
            i = await self.observe()
            if i is None or i == other_than:
                return False
            if await self.registered_master() != self.nodes[i].addr:
                return False
            found[:] = [i]
            return True

        await wait_until(elected, timeout, self.evidence)
        return found[0]

    async def settled(self, i: int) -> CheckResult:
        """Node ``i``'s check once it serves every acknowledged message (see :func:`settled`)."""
        return await settled(self.history, self.client, self.nodes[i].addr, TOPIC, QUEUES)

    def acked(self) -> int:
        return sum(p.sent for p in self.producers)

    def members(self) -> list[Node]:
        return self.nodes


@contextlib.asynccontextmanager
async def raft_group(
    tmp_path: Path,
    env: dict[str, str],
    *,
    stores: dict[int, Path] | None = None,
    clients: str = "ours",
    **keys: object,
) -> AsyncIterator[RaftGroup]:
    """A NameServer (in this process) and three DLedger brokers n0..n2 of one group (subprocesses, their
    peer links through the proxy, ``keys`` added to each broker.conf, node i's store in ``stores[i]``
    when given), a leader elected and the topic created on it, and the producers (not yet running): three
    of ours, or two processes of a real client (``clients="ali-ons"`` or ``"cpp"``) sending to the group's
    broker name with their own retries. Skips when this build has no DLedger mode."""
    if _unavailable:
        pytest.skip(_unavailable[0])
    async with jepsen_run(tmp_path) as run:
        ports = [free_port() for _ in range(3)]
        nodes = [
            Node(f"n{i}", tmp_path / f"n{i}", {}, env, store_dir=(stores or {}).get(i)) for i in range(3)
        ]
        picked = {*ports, *(n.port for n in nodes)}
        for i in range(3):
            peers = [f"n{i}-127.0.0.1:{ports[i]}"]
            for j in range(3):
                if j != i:
                    link = await run.proxy.link(f"n{i}->n{j}", f"127.0.0.1:{ports[j]}", avoid=picked)
                    peers.append(f"n{j}-{link.addr}")
            nodes[i].keys = {
                "brokerName": GROUP,
                "namesrvAddr": run.namesrv,
                "mappedFileSizeCommitLog": 1024 * 1024,
                "enableDLegerCommitLog": "true",
                "dLegerGroup": GROUP,
                "dLegerPeers": ";".join(sorted(peers)),
                "dLegerSelfId": f"n{i}",
                **TIMINGS,
                **keys,
            }
        g = RaftGroup(*run.parts(), nodes, ports)
        if clients == "ours":
            g.producers = [
                Producer(run.history, f"p{i}", run.namesrv, TOPIC, queues=QUEUES, timeout=5.0)
                for i in range(3)
            ]
        else:
            g.producers = [*real_clients(run.history, clients, run.namesrv, TOPIC)]
            g.route_refresh = ROUTE_REFRESH[clients]
        try:
            for node in nodes:
                node.start()
            for node in nodes:
                try:
                    await node.ready(run.client)
                except AssertionError as exc:
                    if node.running or "already in use" in node.log_tail():
                        raise
                    # it exited: it refused the configuration, so no DLedger mode here
                    _unavailable.append(f"a broker with enableDLegerCommitLog=true did not start: {exc}")
                    pytest.skip(_unavailable[-1])
            await _raft_ports_listen(ports)
            leader = await g.leader()
            await BrokerClient(nodes[leader].addr, run.client).create_topic(TOPIC, QUEUES)

            async def routed() -> bool:
                return await master_of(run.client, run.namesrv, TOPIC) == nodes[leader].addr

            await wait_until(routed, 60, g.evidence)

            def every_member_votes() -> bool:
                return all(f"[{node.name}] votes:" in node.log_tail(10**7) for node in nodes)

            # (a new group's member that found the leader's log votes only once it caught up: a schedule
            # that killed or emptied it before then found it abstaining, which is the group's start, not
            # the fault under test)
            await wait_until(every_member_votes, 60, g.evidence)
            yield g
        finally:
            for p in g.producers:
                await p.close()
            await stop_all(nodes)


async def _raft_ports_listen(ports: list[int], timeout: float = 5.0) -> None:
    """Skip unless the brokers, up and answering, listen on their DLedger ports too: a build without
    DLedger mode takes ``enableDLegerCommitLog`` and runs three masters on nothing."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", ports[0])
        except OSError:
            if loop.time() > deadline:
                _unavailable.append("the brokers do not listen on their dLegerPeers ports: no DLedger mode")
                pytest.skip(_unavailable[-1])
            await asyncio.sleep(0.2)
            continue
        writer.close()
        return


def activity(g: RaftGroup) -> list[Client]:
    """What runs during a fault: the producers, and an observer recording every node's role and term."""

    class Observer:
        async def run(self, stop: asyncio.Event) -> None:
            while not stop.is_set():
                await g.observe()
                await asyncio.sleep(0.2)

    return [*g.producers, Observer()]
