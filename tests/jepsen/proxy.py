"""A TCP proxy the test controls, one listener per link: pass, partition, heal, delay.

A partition comes in two kinds, as a real network gives them. ``stall`` blackholes the link: nothing
crosses in either direction, new connections are accepted but reach nothing, and bytes in flight wait
(TCP would retransmit them), so a short partition delays traffic and a long one lets the endpoints' own
timeouts decide. ``refuse`` is a partition the endpoints notice at once: open connections are reset and
new ones are closed on accept. ``heal`` lets everything through again (with ``reset=True`` it first
resets what the stall held, as TCP gives up on a long partition). ``delay`` adds latency to every chunk
without limiting throughput. Everything runs on the test's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Literal

from daemon.lifecycle import cancel_tasks

log = logging.getLogger(__name__)

Mode = Literal["pass", "stall", "refuse"]
_CHUNK = 64 * 1024


@dataclass
class Link:
    """One proxied address: clients connect to ``addr``, the proxy connects on to ``target``."""

    name: str
    target: tuple[str, int]
    server: asyncio.Server
    mode: Mode = "pass"
    delay: float = 0.0
    #: Set while the link passes traffic; pumps wait on it.
    open: asyncio.Event = field(default_factory=asyncio.Event)
    writers: set[asyncio.StreamWriter] = field(default_factory=set)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    accepted: int = 0
    bytes: int = 0

    @property
    def addr(self) -> str:
        host, port = self.server.sockets[0].getsockname()[:2]
        return f"{host}:{port}"

    @property
    def port(self) -> int:
        return int(self.server.sockets[0].getsockname()[1])

    def reset_all(self) -> None:
        """Reset every open connection of this link (both sides see ECONNRESET)."""
        for writer in list(self.writers):
            _abort(writer)
        self.writers.clear()


def _abort(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:  # SO_LINGER 0: close with RST, as a dropped route or a killed peer does
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    writer.transport.abort()


class Proxy:
    """The links of one test; ``close`` stops them all."""

    def __init__(self) -> None:
        self.links: dict[str, Link] = {}

    async def link(self, name: str, target: str, avoid: Collection[int] = ()) -> Link:
        """A new link called ``name`` forwarding a fresh loopback port to ``target`` (host:port); the port
        is none of ``avoid`` (ports picked for daemons that have not bound them yet)."""
        host, _, port = target.rpartition(":")
        holder: list[Link] = []

        async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            # cancelled by close(): end quietly (asyncio's stream server logs a callback task's cancellation)
            with contextlib.suppress(asyncio.CancelledError):
                await self._accept(holder[0], reader, writer)

        server = await asyncio.start_server(accept, "127.0.0.1", 0)
        while server.sockets[0].getsockname()[1] in avoid:
            taken = server
            server = await asyncio.start_server(accept, "127.0.0.1", 0)
            taken.close()
        link = Link(name, (host, int(port)), server)
        link.open.set()
        holder.append(link)
        self.links[name] = link
        return link

    def partition(self, name: str, mode: Mode = "stall") -> None:
        link = self.links[name]
        link.mode = mode
        link.open.clear()
        if mode == "refuse":
            link.reset_all()
        log.info("proxy %s: %s", name, mode)

    def heal(self, name: str, *, reset: bool = False) -> None:
        link = self.links[name]
        if reset:
            link.reset_all()
        link.mode = "pass"
        link.open.set()
        log.info("proxy %s: healed", name)

    def set_delay(self, name: str, seconds: float) -> None:
        self.links[name].delay = seconds

    async def close(self) -> None:
        for link in self.links.values():
            link.server.close()
            link.reset_all()
            await cancel_tasks(list(link.tasks))
            await link.server.wait_closed()
        self.links.clear()

    async def _accept(self, link: Link, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        link.accepted += 1
        if link.mode == "refuse":
            _abort(writer)
            return
        me = asyncio.current_task()
        assert me is not None
        link.tasks.add(me)
        link.writers.add(writer)
        up_writer: asyncio.StreamWriter | None = None
        try:
            await link.open.wait()  # a stalled link accepts, then connects nowhere until it heals
            try:
                up_reader, up_writer = await asyncio.open_connection(*link.target)
            except OSError:
                return
            link.writers.add(up_writer)
            pumps = [
                asyncio.create_task(self._pump(link, reader, writer, up_writer)),
                asyncio.create_task(self._pump(link, up_reader, up_writer, writer)),
            ]
            try:
                await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            finally:  # one side closed (or the proxy stops): the other side goes too
                for task in pumps:
                    task.cancel()
                await asyncio.gather(*pumps, return_exceptions=True)
        finally:
            for w in (writer, up_writer):
                if w is not None:
                    _abort(w)
                    link.writers.discard(w)
            link.tasks.discard(me)

    async def _pump(
        self,
        link: Link,
        reader: asyncio.StreamReader,
        source: asyncio.StreamWriter,
        writer: asyncio.StreamWriter,
    ) -> None:
        """Copy one direction (``source`` is the reader's own connection): wait while the link is cut,
        hold each chunk for the link's delay."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            try:
                while True:
                    due, data = await queue.get()
                    if not data:
                        return
                    if (wait := due - loop.time()) > 0:
                        await asyncio.sleep(wait)
                    await link.open.wait()
                    writer.write(data)
                    link.bytes += len(data)
                    await writer.drain()
            except OSError:
                _abort(source)  # the far side is gone: so is this one, and the read below ends

        sender = asyncio.create_task(deliver())
        try:
            while True:
                await link.open.wait()
                try:
                    data = await reader.read(_CHUNK)
                except OSError:
                    data = b""
                await queue.put((loop.time() + link.delay, data))
                if not data:
                    break
            await sender
        finally:
            sender.cancel()
            await asyncio.gather(sender, return_exceptions=True)
