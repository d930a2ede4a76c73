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

from daemon.broker.broker import Broker
from daemon.namesrv.controller import NamesrvController
from daemon.remoting.errors import RemotingConnectError
from daemon.remoting.memory import MemoryClient
from mqctl.admin import messaging
from mqctl.admin.client import Admin
from mqctl.output import render
from mqctl.services import groups, offsets, topics
from tests.support.broker import broker_config
from tests.support.namesrv import namesrv_config
from tests.support.waiting import wait_until


class SocketOpened(AssertionError):
    """A socket was created while the in-process daemons were meant to be reached in memory."""


@pytest.fixture
async def admin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Admin]:
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

        monkeypatch.setattr(socket, "socket", NoSocket)
        client = MemoryClient({ns_addr: namesrv.server, broker.addr: broker.server})
        async with Admin([ns_addr], timeout=10.0, client=client) as session:
            yield session
        await broker.stop()  # its unregistration goes through memory too
        assert opened == []
    finally:
        monkeypatch.undo()
        await broker.stop()
        await namesrv.stop()


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
            "perm": "RW-",
            "master": broker_addr,
            "slaves": [],
        }
    ]
    table = rendered(rows, "table")
    assert "broker-a" in table and broker_addr in table


async def _listed(admin: Admin, topic: str) -> bool:
    return {"topic": topic} in await topics.topics(admin)


async def test_group_list_and_offset_show(admin: Admin) -> None:
    [addr] = await topics.target_masters(admin, None, None)
    await topics.upsert(admin, topics.TopicSpec("Lagging", 1, 1), cluster=None, broker=None, mode="create")
    await wait_until(lambda: _listed(admin, "Lagging"), timeout=10)
    await groups.upsert(admin, groups.GroupSpec("billing"), cluster=None, broker=None, mode="create")
    assert await groups.list_groups(admin, cluster=None, system=False) == [
        {"group": "billing", "brokers": [addr]}
    ]
    for n in range(3):  # SYNC_FLUSH: each answer comes from the flush pool, after the processor returned
        sent = await messaging.send(admin, addr, "Lagging", b"m%d" % n, queue_id=0, properties={})
        assert (sent.status, sent.queue_offset) == ("SEND_OK", n)
    await admin.commit_offset(addr, "billing", "Lagging", 0, 1)
    rows = await offsets.show(admin, "billing", "Lagging")
    lines = rendered(rows, "csv").splitlines()
    assert lines == [
        "topic,broker_name,queue_id,min_offset,max_offset,committed,lag",
        "Lagging,broker-a,0,0,3,1,2",
    ]


async def test_long_poll_is_answered_when_a_message_arrives(admin: Admin) -> None:
    [addr] = await topics.target_masters(admin, None, None)
    await topics.upsert(admin, topics.TopicSpec("Held", 1, 1), cluster=None, broker=None, mode="create")
    held = asyncio.create_task(messaging.pull(admin, addr, "Held", 0, 0, suspend_ms=8000))
    await asyncio.sleep(0.2)
    assert not held.done()  # the broker holds the pull: nothing to read yet
    await messaging.send(admin, addr, "Held", b"wake", queue_id=0, properties={})
    result = await asyncio.wait_for(held, 5)
    assert result.found and [m.body for m in result.messages] == [b"wake"]


async def test_unknown_address_fails_like_a_refused_connection(admin: Admin) -> None:
    with pytest.raises(RemotingConnectError):
        await admin.broker_runtime_info("127.0.0.1:1")
    other = Admin(["127.0.0.1:1", *admin.namesrv], client=admin.client)  # the next NameServer answers
    assert list((await other.cluster_info()).broker_addr_table) == ["broker-a"]
