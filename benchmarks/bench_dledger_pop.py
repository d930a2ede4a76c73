"""POP on a 3-member DLedger group: the members' CPU per message popped and acked.

A fresh `mqctl up --dledger 3` takes MESSAGES 100-byte sends on 4 queues; then CONSUMERS remoting POP
consumers pop up to 32 at a time and ack what they got, until every message is acked: with one
BATCH_ACK_MESSAGE per pop (a 5.x Proxy's batch ack, one BatchAck per queue) or an ACK_MESSAGE per
message, all of a pop's sent at once (``--single``); FIFO pops with ``--fifo`` (each lending a revive record
held before the pop answers, each queue's next pop waiting for the acks). Every ack is answered once the group's quorum holds
its revive record. The figure is the user + system time of the three member processes over the pop and
ack phase only, divided by the messages acked.

Compare trees A/B by running this same file against each (``PYTHONPATH=TREE``, each with its own native
build), interleaved: ``python benchmarks/bench_dledger_pop.py [MESSAGES] [CONSUMERS] [ROUNDS] [--single]
[--fifo]``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench_ali_ons import cpu_seconds  # run as a script: benchmarks/ is on sys.path
from bench_broker_produce import free_port
from bench_dledger import UP_ARGS, group_env, member_pids
from benchlib import summary

from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode
from tests.dledger.test_group import elected_master
from tests.support.broker import BrokerClient
from tests.support.pop import PopClient, Popped
from tests.support.up import mqctl_up

TOPIC = "BenchPop"
GROUP = "GBenchPop"
QUEUES = 4


def batch_ack_body(popped: list[Popped]) -> bytes:
    """A 5.x Proxy's BATCH_ACK_MESSAGE body for one pop: one BatchAck per queue, a BitSet of offsets."""
    acks = []
    by_queue: dict[int, list[Popped]] = {}
    for p in popped:
        by_queue.setdefault(p.message.queue_id, []).append(p)
    for queue, ps in by_queue.items():
        f = ps[0].handle.split(" ")
        start = int(f[0])
        bits = 0
        for p in ps:
            bits |= 1 << (p.message.queue_offset - start)
        raw = bits.to_bytes((bits.bit_length() + 7) // 8, "little")
        acks.append(
            {
                "c": GROUP,
                "t": TOPIC,
                "r": f[4],
                "so": start,
                "q": queue,
                "rq": int(f[3]),
                "pt": int(f[1]),
                "it": int(f[2]),
                "b": base64.b64encode(raw).decode(),
            }
        )
    return json.dumps({"brokerName": f[5], "acks": acks}).encode()


async def consume(on: BrokerClient, total: int, acked: list[int], single: bool, fifo: bool) -> None:
    c = PopClient(on, GROUP)
    while acked[0] < total:
        got = await c.pop(TOPIC, max_nums=32, invisible_ms=120_000, poll_ms=200, order=fifo)
        if not got:
            continue
        if single:
            answers = await asyncio.gather(*(c.ack(TOPIC, p) for p in got))
            assert all(a.code == 0 for a in answers), [a.remark for a in answers]
        else:
            r = await on.call(RequestCode.BATCH_ACK_MESSAGE, body=batch_ack_body(got))
            assert r.code == 0, r.remark
        acked[0] += len(got)


async def one_round(
    tmp: str, name: str, messages: int, consumers: int, single: bool, fifo: bool
) -> tuple[float, float]:
    """(CPU seconds of the three members per message popped and acked, messages per second)."""
    ns_port = free_port()
    data = Path(tmp) / name
    env = group_env(data.parent / f"{name}-cfg")
    async with mqctl_up(data, env, ns_port, *UP_ARGS), RemotingClient() as client:
        leader = BrokerClient(await elected_master(client, f"127.0.0.1:{ns_port}"), client)
        await leader.create_topic(TOPIC, QUEUES)
        body = b"x" * 100

        async def producer(k: int) -> None:
            for i in range(k, messages, 8):
                assert (await leader.send(TOPIC, body, queue_id=i % QUEUES)).code == 0

        await asyncio.gather(*(producer(k) for k in range(8)))
        pids = member_pids(data)
        cpu0, t0 = [cpu_seconds(p) for p in pids], time.perf_counter()
        acked = [0]
        await asyncio.gather(*(consume(leader, messages, acked, single, fifo) for _ in range(consumers)))
        wall = time.perf_counter() - t0
        cpu = sum(cpu_seconds(p) - c for p, c in zip(pids, cpu0, strict=True))
    return cpu / acked[0], acked[0] / wall


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    single = "--single" in sys.argv
    fifo = "--fifo" in sys.argv
    messages = int(args[0]) if args else 4000
    consumers = int(args[1]) if len(args) > 1 else 4
    rounds = int(args[2]) if len(args) > 2 else 3
    cpu: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(rounds):
            per, rate = asyncio.run(one_round(tmp, f"pop{i}", messages, consumers, single, fifo))
            cpu.append(per)
            print(
                f"round {i}: {per * 1e6:.0f} µs CPU per message popped and acked, {rate:,.0f} msg/s",
                flush=True,
            )
    mode = "an ACK_MESSAGE per message" if single else "a BATCH_ACK_MESSAGE per pop"
    mode += ", FIFO" if fifo else ""
    summary(
        __file__,
        f"{statistics.median(cpu) * 1e6:.0f} µs CPU per message popped and acked (3 members)",
        f"{messages} messages, {consumers} consumers, pops of 32, {mode}, {rounds} rounds",
    )


if __name__ == "__main__":
    main()
