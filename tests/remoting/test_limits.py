"""Resource caps of the remoting server: bytes of incomplete frames, per connection and in all, and the
number of connections. Flooders are raw sockets that announce a big frame and send part of it."""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from daemon.namesrv.controller import NamesrvController
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.connection import Connection
from daemon.remoting.limits import RemotingLimits
from daemon.remoting.server import RemotingServer
from tests.support.broker import start_broker
from tests.support.namesrv import namesrv_config
from tests.support.waiting import budget_holds, wait_until

ECHO = 1
#: Announced by every flooder: a frame of 8 MiB, of which it sends only `PART` bytes.
ANNOUNCED = 8 * 1024 * 1024
PART = 300 * 1024
BUDGET = 1024 * 1024
FLOODERS = 8

Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


@dataclass
class Daemon:
    server: RemotingServer
    request: int  # a request the daemon answers with SUCCESS
    stop: Callable[[], Awaitable[None]]


async def start_namesrv(tmp_path: Path) -> Daemon:
    controller = NamesrvController(namesrv_config(tmp_path, remoting_max_buffered_bytes=BUDGET))
    await controller.start()
    return Daemon(controller.server, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, controller.stop)


async def start_broker_daemon(tmp_path: Path) -> Daemon:
    broker = await start_broker(tmp_path / "store", remoting_max_buffered_bytes=BUDGET, metrics_enable=False)
    return Daemon(broker.server, RequestCode.GET_BROKER_RUNTIME_INFO, broker.stop)


@pytest.fixture(params=[start_namesrv, start_broker_daemon], ids=["namesrv", "broker"])
async def daemon(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Daemon]:
    started = await request.param(tmp_path)
    try:
        yield started
    finally:
        await started.stop()


async def half_frame(port: int, sent: int, announced: int = ANNOUNCED) -> Stream:
    """A connection that announced `announced` bytes of frame and sent `sent` of them, starting with a
    header word a JSON header could have (a header word no frame can have is refused at once)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(struct.pack(">ii", announced, 64) + bytes(sent - 4))
    with contextlib.suppress(ConnectionError):  # the server may close it before all was sent
        await writer.drain()
    return reader, writer


async def closed_by_server(reader: asyncio.StreamReader, wait: float = 1.0) -> bool:
    try:
        return await asyncio.wait_for(reader.read(1), wait) == b""
    except ConnectionError:
        return True
    except TimeoutError:
        return False


@pytest.mark.slow
async def test_half_frame_flood_closes_flooders_within_budget_and_others_are_answered(daemon: Daemon) -> None:
    port = daemon.server.port
    flooders = [await half_frame(port, PART) for _ in range(FLOODERS)]
    try:
        async with RemotingClient() as client:
            answer = await client.invoke(f"127.0.0.1:{port}", RemotingCommand.request(daemon.request))
        assert answer.code == ResponseCode.SUCCESS

        closed = await asyncio.gather(*(closed_by_server(reader, wait=2.0) for reader, _ in flooders))
        still_open = FLOODERS - sum(closed)
        held = 4 + PART  # the length prefix and the part of the body that came
        assert still_open <= BUDGET // held  # the rest did not fit in the budget and were closed
        await wait_until(budget_holds(daemon.server, still_open * held), timeout=5)
        budget = daemon.server.budget
        assert budget.peak <= BUDGET
        assert budget.refused == sum(closed)
    finally:
        for _, writer in flooders:
            writer.close()
    await wait_until(budget_holds(daemon.server, 0), timeout=5)  # closing releases what they held


@pytest.fixture
async def small_server() -> AsyncIterator[RemotingServer]:
    def echo(conn: Connection, req: RemotingCommand) -> RemotingCommand:
        return req.make_response(body=req.body)

    limits = RemotingLimits(remoting_max_connection_buffered_bytes=64 * 1024, remoting_max_connections=2)
    async with RemotingServer({ECHO: echo}, host="127.0.0.1", limits=limits) as srv:
        yield srv


async def test_a_connection_holding_more_than_its_cap_is_closed(small_server: RemotingServer) -> None:
    patient = await half_frame(small_server.port, 32 * 1024)
    greedy = await half_frame(small_server.port, 100 * 1024)
    try:
        assert await closed_by_server(greedy[0])
        assert not await closed_by_server(patient[0], wait=0.2)
        assert small_server.budget.refused == 1
        await wait_until(budget_holds(small_server, 4 + 32 * 1024), timeout=5)
    finally:
        patient[1].close()
        greedy[1].close()


async def test_connections_past_the_cap_are_closed_and_the_others_served(
    small_server: RemotingServer,
) -> None:
    async with RemotingClient() as first, RemotingClient() as second:
        addr = f"127.0.0.1:{small_server.port}"
        assert (await first.invoke(addr, RemotingCommand.request(ECHO, body=b"1"))).body == b"1"
        assert (await second.invoke(addr, RemotingCommand.request(ECHO, body=b"2"))).body == b"2"
        reader, writer = await asyncio.open_connection("127.0.0.1", small_server.port)
        try:
            assert await closed_by_server(reader)
        finally:
            writer.close()
        assert small_server.refused_connections == 1
        assert (await first.invoke(addr, RemotingCommand.request(ECHO, body=b"3"))).body == b"3"
