"""A transport for a `Connection` driven by hand: it records what is written and names the peer it is
given (a socket's peername tuple, or none), which loopback sockets cannot vary."""

from __future__ import annotations


class RecordingTransport:
    def __init__(self, peername: object = ("127.0.0.1", 40000)) -> None:
        self.peername = peername
        self.writes: list[bytes] = []
        self.closing = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def get_extra_info(self, name: str, default: object = None) -> object:
        return self.peername if name == "peername" else default
