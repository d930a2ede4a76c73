"""Admin services and their rendered output against in-process daemons over `MemoryClient`.

The NameServer and broker are the real ones (file store in tmp_path, SYNC_FLUSH so sends take the
offloaded, asynchronous answer path); `Admin` and the broker's NameServer registration talk to them
through `daemon.remoting.memory.MemoryClient`: real codec, connections and dispatchers, no socket.
The daemons bind their (loopback) listeners at start; from then on every new socket fails the test.
Not covered here: what only TCP has (addresses of peers, resets, partial frames), see the memory
module's docstring; the CLI layer itself (tests/cli runs it against loopback daemons).
"""

from __future__ import annotations

import asyncio
import io
import json
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from daemon.broker.bodies import MessageQueue
from daemon.broker.broker import Broker
from daemon.namesrv.controller import NamesrvController
from daemon.remoting.errors import RemotingConnectError
from daemon.remoting.memory import MemoryClient
from daemon.remoting.server import RemotingServer
from mqctl.admin import messaging
from mqctl.admin.client import Admin
from mqctl.admin.member import GroupMember
from mqctl.output import render
from mqctl.services import groups, offsets, topics
from tests.support.broker import broker_config
from tests.support.namesrv import namesrv_config
from tests.support.waiting import wait_until


class SocketOpened(AssertionError):
    """A socket was created while the in-process daemons were meant to be reached in memory."""


@pytest.fixture
async def daemons(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[str, dict[str, RemotingServer]]]:
    """The NameServer's address and every daemon's server by address; no socket may open meanwhile."""
    namesrv = NamesrvController(namesrv_config(tmp_path))
    await namesrv.start()
    ns_addr = f"127.0.0.1:{namesrv.port}"
    broker = Broker(
        broker_config(
            tmp_path / "broker", namesrv_addr=ns_addr, metrics_enable=False, flush_disk_type="SYNC_FLUSH"
        ),
        client=MemoryClient({ns_addr: namesrv.server}),
    )
    try:
        await broker.start()
        opened: list[tuple[object, ...]] = []

        class NoSocket(socket.socket):
            def __init__(self, *args: object, **kwargs: object) -> None:
                opened.append(args)
                raise SocketOpened(f"socket opened: {args}")

        # asyncio's loops make their sockets through the socket module (uvloop's would not)
        assert isinstance(asyncio.get_running_loop(), asyncio.BaseEventLoop)
        monkeypatch.setattr(socket, "socket", NoSocket)
        yield ns_addr, {ns_addr: namesrv.server, broker.addr: broker.server}
        await broker.stop()  # its unregistration goes through memory too
        assert opened == []
    finally:
        monkeypatch.undo()
        await broker.stop()
        await namesrv.stop()


@pytest.fixture
async def admin(daemons: tuple[str, dict[str, RemotingServer]]) -> AsyncIterator[Admin]:
    ns_addr, servers = daemons
    async with Admin([ns_addr], timeout=10.0, client=MemoryClient(servers)) as session:
        yield session


def rendered(result: object, fmt: str) -> str:
    out = io.StringIO()
    render(result, fmt, out=out)
    return out.getvalue()


async def test_topic_create_list_route(admin: Admin) -> None:
    [broker_addr] = await topics.target_masters(admin, None, None)
    result = await topics.upsert(
        admin, topics.TopicSpec("Orders", 4, 4), cluster=None, broker=None, mode="create"
    )
    assert [b["action"] for b in result["brokers"]] == ["created"]
    # the broker registers the new topic with the NameServer by itself, over its own MemoryClient
    await wait_until(lambda: _listed(admin, "Orders"), timeout=10)
    rows = await topics.route(admin, "Orders")
    assert json.loads(rendered(rows, "json")) == [
        {
            "broker_name": "broker-a",
            "read_queues": 4,
            "write_queues": 4,
            "perm": "rw",
            "master": broker_addr,
            "slaves": [],
        }
    ]
    table = rendered(rows, "table")
    assert "broker-a" in table and broker_addr in table


async def _listed(admin: Admin, topic: str) -> bool:
    return {"topic": topic} in await topics.topics(admin)


async def test_topic_list_counts_the_topics_it_hides(admin: Admin) -> None:
    """A table on a terminal says how many topics of each kind the list hid (the footer)."""
    listed = await topics.topics(admin)
    kinds = [row["kind"] for row in await topics.topics(admin, system=True)]
    assert kinds.count("system") > 0 and kinds.count("normal") == len(listed)
    assert listed.footer == f"hidden: {kinds.count('system')} system topics (--system lists them)"


async def test_group_list_and_offset_show(admin: Admin) -> None:
    [addr] = await topics.target_masters(admin, None, None)
    await topics.upsert(admin, topics.TopicSpec("Lagging", 1, 1), cluster=None, broker=None, mode="create")
    await wait_until(lambda: _listed(admin, "Lagging"), timeout=10)
    await groups.upsert(admin, groups.GroupSpec("billing"), cluster=None, broker=None, mode="create")
    listed = await groups.list_groups(admin, cluster=None, system=False)
    assert listed == [{"group": "billing", "brokers": [addr]}]
    every = await groups.list_groups(admin, cluster=None, system=True)
    assert listed.footer == f"hidden: {len(every) - 1} system groups (--system lists them)"
    assert len(every) > 1
    for n in range(3):  # SYNC_FLUSH: each answer comes from the flush pool, after the processor returned
        sent = await messaging.send(admin, addr, "Lagging", b"m%d" % n, queue_id=0, properties={})
        assert (sent.status, sent.queue_offset) == ("SEND_OK", n)
    await admin.commit_offset(addr, "billing", "Lagging", 0, 1)
    rows = await offsets.show(admin, "billing", "Lagging")
    lines = rendered(rows, "csv").splitlines()
    assert lines == [
        "topic,broker_name,queue_id,min_offset,max_offset,consumer_offset,lag",
        "Lagging,broker-a,0,0,3,1,2",
    ]


async def test_long_poll_is_answered_when_a_message_arrives(admin: Admin) -> None:
    [addr] = await topics.target_masters(admin, None, None)
    await topics.upsert(admin, topics.TopicSpec("Held", 1, 1), cluster=None, broker=None, mode="create")
    held = asyncio.create_task(messaging.pull(admin, addr, "Held", 0, 0, suspend_ms=8000))

    async def parked_or_answered() -> bool:  # the broker's runtime info counts the pulls it holds
        return held.done() or (await admin.broker_runtime_info(addr))["pullThreadPoolQueueSize"] == "1"

    await wait_until(parked_or_answered)
    assert not held.done()  # the broker holds the pull: nothing to read yet
    await messaging.send(admin, addr, "Held", b"wake", queue_id=0, properties={})
    result = await asyncio.wait_for(held, 5)
    assert result.found and [m.body for m in result.messages] == [b"wake"]


async def test_unknown_address_fails_like_a_refused_connection(admin: Admin) -> None:
    with pytest.raises(RemotingConnectError):
        await admin.broker_runtime_info("127.0.0.1:1")
    other = Admin(["127.0.0.1:1", *admin.namesrv], client=admin.client)  # the next NameServer answers
    assert list((await other.cluster_info()).broker_addr_table) == ["broker-a"]


async def test_broker_calls_a_member_back_and_forgets_it_when_its_connection_closes(
    admin: Admin, daemons: tuple[str, dict[str, RemotingServer]]
) -> None:
    ns_addr, servers = daemons
    [addr] = await topics.target_masters(admin, None, None)
    await topics.upsert(admin, topics.TopicSpec("Reset", 2, 2), cluster=None, broker=None, mode="create")
    queues = [MessageQueue("Reset", "broker-a", q) for q in (0, 1)]
    for mq in queues:
        await messaging.send(admin, addr, "Reset", b"m", queue_id=mq.queue_id, properties={})
    member_admin = Admin([ns_addr], client=MemoryClient(servers))
    async with member_admin, GroupMember(member_admin, "CG_Reset", "Reset", {"broker-a": addr}) as member:
        member.offsets.update(dict.fromkeys(queues, 1))
        await member.commit(member.offsets)
        # RESET_CONSUMER_CLIENT_OFFSET goes from the broker to the member over the member's connection
        assert await admin.reset_offset_by_time(addr, "Reset", "CG_Reset", 0) == dict.fromkeys(queues, 0)
        await wait_until(lambda: member.resets == 1, timeout=10)
        assert member.offsets == dict.fromkeys(queues, 0)
        assert await admin.consumer_connections(addr, "CG_Reset") is not None
        await member_admin.client.close()  # the broker's close listener drops the member, as over TCP
        await wait_until(lambda: _offline(admin, addr, "CG_Reset"), timeout=10)
    # leaving, the member committed the reset offsets over a new connection
    assert [await admin.consumer_offset(addr, "CG_Reset", "Reset", mq.queue_id) for mq in queues] == [0, 0]


async def _offline(admin: Admin, addr: str, group: str) -> bool:
    return await admin.consumer_connections(addr, group) is None
