"""The test-controlled TCP proxy on an echo server: pass, stall and heal, refuse, delay."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tests.jepsen.proxy import Link, Proxy


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(1024):
        writer.write(data)
        await writer.drain()
    writer.close()


@pytest.fixture
async def link() -> AsyncIterator[tuple[Proxy, Link]]:
    server = await asyncio.start_server(_echo, "127.0.0.1", 0)
    proxy = Proxy()
    port = server.sockets[0].getsockname()[1]
    try:
        yield proxy, await proxy.link("echo", f"127.0.0.1:{port}")
    finally:
        await proxy.close()
        server.close()
        await server.wait_closed()


async def _connect(link: Link) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", link.port)


async def test_a_stalled_link_holds_bytes_until_it_heals(link: tuple[Proxy, Link]) -> None:
    proxy, echo = link
    reader, writer = await _connect(echo)
    writer.write(b"one")
    assert await asyncio.wait_for(reader.readexactly(3), 5) == b"one"
    proxy.partition("echo")
    writer.write(b"two")
    late_reader, late_writer = await _connect(echo)  # accepted, but it reaches nothing
    late_writer.write(b"new")
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(reader.readexactly(3), 0.3)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(late_reader.readexactly(3), 0.1)
    proxy.heal("echo")
    assert await asyncio.wait_for(reader.readexactly(3), 5) == b"two"  # delivered late, not lost
    assert await asyncio.wait_for(late_reader.readexactly(3), 5) == b"new"
    writer.close()
    late_writer.close()


async def test_a_refusing_link_resets_open_connections_and_closes_new_ones(link: tuple[Proxy, Link]) -> None:
    proxy, echo = link
    reader, writer = await _connect(echo)
    writer.write(b"one")
    assert await asyncio.wait_for(reader.readexactly(3), 5) == b"one"
    proxy.partition("echo", "refuse")
    with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
        await asyncio.wait_for(reader.readexactly(1), 5)
    new_reader, _ = await _connect(echo)
    with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
        await asyncio.wait_for(new_reader.readexactly(1), 5)
    proxy.heal("echo")
    reader, writer = await _connect(echo)
    writer.write(b"back")
    assert await asyncio.wait_for(reader.readexactly(4), 5) == b"back"
    writer.close()


async def test_a_delayed_link_adds_latency(link: tuple[Proxy, Link]) -> None:
    proxy, echo = link
    proxy.set_delay("echo", 0.2)
    reader, writer = await _connect(echo)
    loop = asyncio.get_running_loop()
    start = loop.time()
    writer.write(b"x")
    assert await asyncio.wait_for(reader.readexactly(1), 5) == b"x"
    assert loop.time() - start >= 0.4  # there and back
    writer.close()
