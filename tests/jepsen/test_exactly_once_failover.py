"""Exactly-once across a failover or a crash for what a broker re-puts itself: committed transactions
(the committed copy and its op record are two puts) and delay-level deliveries (their progress,
delayOffset.json, is local and written now and then). Each acknowledged message must reach its real
topic exactly once: never lost, never twice."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import Counter
from pathlib import Path

import pytest

from daemon.broker.bodies import HeartbeatData, ProducerData
from daemon.broker.headers import ConsumerSendMsgBackRequestHeader, EndTransactionRequestHeader
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.connection import Connection
from store.record import decode_msg_id
from tests.jepsen.client import Read, digest, master_of, read_topic
from tests.jepsen.harness import jepsen_run
from tests.jepsen.nodes import Node
from tests.jepsen.raft import QUEUES, TOPIC, RaftGroup, raft_group
from tests.support.broker import BrokerClient

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

PG = "TxJepsen"
RETRY_GROUP = "DelayJepsen"


def _once(reads: list[Read], acked: set[str], sent: set[str], path: Path) -> dict[str, int]:
    """Duplicates, losses (of acknowledged ones) and strangers among `reads`; written to `path`."""
    seen = Counter(r.value for r in reads)
    dup = {v: c for v, c in seen.items() if c > 1}
    lost = [v for v in acked if seen[v] == 0]
    foreign = [v for v in seen if v not in sent]
    report = {
        "acked": len(acked),
        "delivered": len(reads),
        "duplicated": len(dup),
        "lost": len(lost),
        "foreign": len(foreign),
    }
    path.write_text(json.dumps({**report, "dup": dup, "lost_ids": lost, "foreign_ids": foreign}))
    return report


async def _kill_the_leader(
    g: RaftGroup, stop: asyncio.Event, tasks: list[asyncio.Task[None]], *, after: float, then: float
) -> int:
    """SIGKILL the leader `after` seconds into the run, let the `tasks` go on `then` seconds under the
    new leader, stop them; returns the new leader."""
    leader = await g.leader()
    await asyncio.sleep(after)
    g.nemesis.kill(g.nodes[leader])
    new = await g.leader(other_than=leader, timeout=90)
    await asyncio.sleep(then)
    stop.set()
    await asyncio.gather(*tasks)
    return new


async def test_transactions_across_a_leader_kill(tmp_path: Path, cli_env: dict[str, str]) -> None:
    """Three producers of one group send halves to the leader and commit them, answering every check
    with COMMIT; the leader is SIGKILLed while ENDs are in flight. A half the old leader committed
    without its op record was checked and committed again by the new leader."""
    async with raft_group(tmp_path, cli_env, transactionTimeOut=1500, transactionCheckInterval=500) as g:

        def on_check(conn: Connection, request: RemotingCommand) -> None:
            fields = request.ext_fields
            h = EndTransactionRequestHeader(
                PG,
                int(fields["tranStateTableOffset"]),
                int(fields["commitLogOffset"]),
                8,
                fields["msgId"],
                True,
            )
            conn.invoke_oneway(RemotingCommand.request(RequestCode.END_TRANSACTION, h.to_ext_fields()))

        client = RemotingClient({RequestCode.CHECK_TRANSACTION_STATE: on_check})
        stop = asyncio.Event()
        tried: set[str] = set()  # (a half whose answer was lost with the leader is stored all the same)
        ended_ok: set[str] = set()

        async def heartbeats() -> None:
            body = HeartbeatData("tx-1", [ProducerData(PG)], []).dumps()
            while not stop.is_set():
                for node in g.nodes:
                    if node.running:
                        with contextlib.suppress(Exception):  # (a killed one refuses)
                            await client.invoke(
                                node.addr, RemotingCommand.request(RequestCode.HEART_BEAT, {}, body), 1.0
                            )
                await asyncio.sleep(0.5)

        async def producer(p: int) -> None:
            n = 0
            while not stop.is_set():
                body = f"tx-{p}-{n}".encode()
                n += 1
                addr = await master_of(client, g.namesrv, TOPIC)
                if addr is None:
                    await asyncio.sleep(0.2)
                    continue
                b = BrokerClient(addr, client)
                props = {"TRAN_MSG": "true", "PGROUP": PG, "UNIQ_KEY": f"TX{p}{n:07d}"}
                tried.add(digest(body))
                try:
                    r = await b.send(TOPIC, body, queue_id=n % QUEUES, group=PG, props=props, timeout=3.0)
                except Exception:
                    await asyncio.sleep(0.2)
                    continue
                if r.code != ResponseCode.SUCCESS:
                    await asyncio.sleep(0.2)
                    continue
                phys = decode_msg_id(r.ext_fields["msgId"])[1]
                h = EndTransactionRequestHeader(PG, 0, phys, 8, r.ext_fields["msgId"], False)
                try:
                    e = await b.call(RequestCode.END_TRANSACTION, h.to_ext_fields(), timeout=3.0)
                except Exception:
                    continue
                if e.code == ResponseCode.SUCCESS:
                    ended_ok.add(digest(body))

        tasks = [asyncio.create_task(heartbeats()), *(asyncio.create_task(producer(p)) for p in range(3))]
        new = await _kill_the_leader(g, stop, tasks, after=8, then=4)
        await asyncio.sleep(10)  # the halves left open are checked and committed
        reads = await read_topic(client, g.nodes[new].addr, TOPIC, QUEUES)
        await client.close()
        report = _once(reads, ended_ok, tried, tmp_path / "tx_report.json")
        assert report["duplicated"] == report["lost"] == report["foreign"] == 0, report


@pytest.mark.parametrize("kind", ["delay", "send_back"])
async def test_delay_levels_across_a_leader_kill(tmp_path: Path, cli_env: dict[str, str], kind: str) -> None:
    """Level-1 messages (a producer's DELAY, or a consumer's CONSUMER_SEND_MSG_BACK into its retry
    topic) sent to the leader while it is SIGKILLed: the new leader delivered again what the old one
    had delivered since the last metadata sync."""
    async with raft_group(tmp_path, cli_env) as g:
        acked: set[str] = set()
        tried: set[str] = set()
        stop = asyncio.Event()

        async def sender() -> None:
            n = 0
            while not stop.is_set():
                body = f"delayed-{n}".encode()
                n += 1
                addr = await master_of(g.client, g.namesrv, TOPIC)
                if addr is None:
                    await asyncio.sleep(0.2)
                    continue
                tried.add(digest(body))
                b = BrokerClient(addr, g.client)
                props = {"UNIQ_KEY": f"UK{n:08d}", "KEYS": f"K{n:08d}"}
                if kind == "delay":
                    props["DELAY"] = "1"
                try:
                    r = await b.send(TOPIC, body, queue_id=n % QUEUES, props=props, timeout=3.0)
                    if r.code == ResponseCode.SUCCESS and kind == "send_back":
                        phys = decode_msg_id(r.ext_fields["msgId"])[1]
                        h = ConsumerSendMsgBackRequestHeader(phys, RETRY_GROUP, 1, None, None, False, None)
                        r = await b.call(RequestCode.CONSUMER_SEND_MSG_BACK, h.to_ext_fields(), timeout=3.0)
                except Exception:
                    await asyncio.sleep(0.2)
                    continue
                if r.code == ResponseCode.SUCCESS:
                    acked.add(digest(body))
                await asyncio.sleep(0.02)

        new = await _kill_the_leader(g, stop, [asyncio.create_task(sender())], after=14, then=5)
        await asyncio.sleep(12)  # every level-1 (1 s) message falls due and is delivered
        topic, queues = (TOPIC, QUEUES) if kind == "delay" else (f"%RETRY%{RETRY_GROUP}", 1)
        reads = await read_topic(g.client, g.nodes[new].addr, topic, queues)
        report = _once(reads, acked, tried, tmp_path / "delay_report.json")
        assert report["duplicated"] == report["lost"] == report["foreign"] == 0, report


async def test_delay_levels_across_a_broker_sigkill(tmp_path: Path, cli_env: dict[str, str]) -> None:
    """One broker SIGKILLed while it delivers level-1 messages and restarted on its store: the deliveries
    made since its delayOffset.json was last persisted were made again."""
    topic = "DelayCrash"
    async with jepsen_run(tmp_path) as run:
        keys = {"brokerName": "b0", "namesrvAddr": run.namesrv, "flushDiskType": "SYNC_FLUSH"}
        node = Node("b0", tmp_path / "b0", keys, cli_env)
        node.start()
        try:
            await node.ready(run.client)
            b = BrokerClient(node.addr, run.client)
            await b.create_topic(topic, QUEUES)
            acked: set[str] = set()
            loop = asyncio.get_running_loop()
            end, n = loop.time() + 8, 0
            while loop.time() < end:
                body = f"delayed-{n}".encode()
                r = await b.send(
                    topic, body, queue_id=n % QUEUES, props={"DELAY": "1", "UNIQ_KEY": f"UK{n:08d}"}
                )
                if r.code == ResponseCode.SUCCESS:
                    acked.add(digest(body))
                n += 1
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.3)  # deliveries still running as it dies
            run.nemesis.kill(node)
            run.nemesis.restart(node)
            await node.ready(run.client)
            await asyncio.sleep(8)
            reads = await read_topic(run.client, node.addr, topic, QUEUES)
            sent = {digest(f"delayed-{i}".encode()) for i in range(n)}
            report = _once(reads, acked, sent, tmp_path / "delay_report.json")
            assert report["duplicated"] == report["lost"] == report["foreign"] == 0, report
        finally:
            node.stop()
