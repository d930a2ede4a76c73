"""Transports for tests: one for a `Connection` driven by hand (it records what is written and names the
peer it is given, which loopback sockets cannot vary), and real ones a peer reset as they opened."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import pytest


class RecordingTransport:
    def __init__(self, peername: object = ("127.0.0.1", 40000)) -> None:
        self.peername = peername
        self.writes: list[bytes] = []
        #: each writelines call's buffers as they were given (its joined bytes go to `writes` too)
        self.lines: list[tuple[bytes, ...]] = []
        self.closing = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def writelines(self, parts: Iterable[bytes]) -> None:
        given = tuple(parts)
        self.lines.append(given)
        self.writes.append(b"".join(given))

    def is_closing(self) -> bool:
        return self.closing

    def can_write_eof(self) -> bool:
        return False

    def close(self) -> None:
        self.closing = True

    def get_extra_info(self, name: str, default: object = None) -> object:
        return self.peername if name == "peername" else default


#: What uvloop's ``get_extra_info("peername")`` raises for a transport reset before it was reported made:
#: its socket already gone, or its pseudo-socket left with a closed descriptor (-1).
UVLOOP_NO_PEER = {
    "socket gone": AttributeError("'NoneType' object has no attribute 'getpeername'"),
    "descriptor closed": ValueError("negative file descriptor"),
}


class ResetAsItOpened:
    """A real transport whose peer reset the connection before it was reported made, as uvloop (the
    daemons' loop) leaves it: it saves a connection's names when it reports it made, a reset that came
    first leaves no peer name, and once the transport has closed there is nothing left to ask, so
    ``get_extra_info("peername")`` raises (``raises``, one of :data:`UVLOOP_NO_PEER`). Everything else is
    the real one's."""

    def __init__(self, transport: asyncio.Transport, raises: Exception) -> None:
        self._transport = transport
        self._raises = raises
        transport.abort()

    def get_extra_info(self, name: str, default: object = None) -> object:
        if name == "peername" and self._transport.is_closing():
            raise self._raises
        return self._transport.get_extra_info(name, default)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def reset_as_they_open(
    monkeypatch: pytest.MonkeyPatch, port: int, times: int, no_peer: str = "socket gone"
) -> list[int]:
    """Make the first ``times`` connections the running loop opens to ``port`` come back reset (see
    :class:`ResetAsItOpened`, ``no_peer`` a key of :data:`UVLOOP_NO_PEER`); returns a list whose length
    counts every connection made to ``port``."""
    loop = asyncio.get_running_loop()
    connect = loop.create_connection
    made: list[int] = []

    async def create_connection(factory: Any, host: str, to: int, **kw: Any) -> Any:
        transport, protocol = await connect(factory, host, to, **kw)
        if to == port:
            made.append(to)
            if len(made) <= times:
                return ResetAsItOpened(transport, UVLOOP_NO_PEER[no_peer]), protocol
        return transport, protocol

    monkeypatch.setattr(loop, "create_connection", create_connection)
    return made
