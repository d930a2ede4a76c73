"""Topics on running brokers and messages with known bodies, for tests that read them back (the Spark
``rocketmq`` source): each acknowledged send is recorded by where it was stored and its body's SHA-256."""

from __future__ import annotations

import asyncio
import hashlib
import random
from typing import Any

from daemon.broker.broker import Broker
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import ResponseCode
from mqctl.admin.client import Admin
from store import TopicConfig
from tests.support.broker import BrokerClient
from tests.support.waiting import wait_until

QUEUES = 4

#: (topic, store host, queue id, queue offset) -> SHA-256 of the body, of every acknowledged send.
Sent = dict[tuple[str, str, int, int], str]


def body_of(topic: str, broker: str, queue: int, i: int) -> bytes:
    """A known body of varying length (a few bytes up to 6 KiB), its bytes seeded by its position."""
    rnd = random.Random(f"{topic}/{broker}/{queue}/{i}")
    return f"{topic}|{broker}|{queue}|{i}|".encode() + rnd.randbytes(rnd.choice((0, 17, 300, 6000)))


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def create_topics(namesrv: str, addrs: list[str], topics: tuple[str, ...], signer: Any = None) -> None:
    """Each topic with QUEUES queues on every broker, then wait until the NameServer routes all of them."""
    async with Admin([namesrv], client=RemotingClient(signer=signer)) as admin:
        for addr in addrs:
            for topic in topics:
                await admin.create_topic(addr, TopicConfig(topic, QUEUES, QUEUES))

        async def routed() -> bool:
            for topic in topics:
                try:
                    route = await admin.topic_route(topic)
                except Exception:
                    return False
                if len(route.queue_datas) < len(addrs):
                    return False
            return True

        await wait_until(routed)


async def send_known(
    brokers: dict[str, Broker], topics: tuple[str, ...], numbers: range, out: Sent, signer: Any = None
) -> None:
    """Message ``i`` for every ``i`` in ``numbers`` to every queue of every topic on every broker (the
    queues in parallel), with keys and a tag; recorded in ``out``."""
    client = RemotingClient(signer=signer)
    try:

        async def one_queue(topic: str, name: str, broker: Broker, queue: int) -> None:
            handle = BrokerClient(broker.addr, client)
            for i in numbers:
                data = body_of(topic, name, queue, i)
                r = await handle.send(topic, data, queue_id=queue, keys=f"k{i} q{queue}", tags=f"t{i % 3}")
                assert r.code == ResponseCode.SUCCESS, r.remark
                out[(topic, broker.addr, queue, int(r.ext_fields["queueOffset"]))] = sha(data)

        await asyncio.gather(
            *(
                one_queue(topic, name, broker, q)
                for topic in topics
                for name, broker in brokers.items()
                for q in range(QUEUES)
            )
        )
    finally:
        await client.close()
