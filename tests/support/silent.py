"""A server that accepts and never answers: a NameServer or broker hung on its requests."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


@contextlib.asynccontextmanager
async def silent_server() -> AsyncIterator[str]:
    """The ``HOST:PORT`` of a loopback listener that accepts and reads, and never answers."""
    connections: list[asyncio.StreamWriter] = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(writer)
        while await reader.read(65536):
            pass

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    try:
        yield f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        for writer in connections:
            writer.close()
        server.close()
        await server.wait_closed()
