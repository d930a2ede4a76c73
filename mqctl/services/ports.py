"""Free loopback ports chosen now for daemons that bind them later, in other processes (``mqctl up``'s
members, which must know each other's ports before any starts; the test suite's daemons).

A port the kernel hands out for ``bind(0)`` comes from its ephemeral range, the one every outgoing
connection's local port comes from too: between this process releasing it and the daemon binding it, any
client connection on the host could take it, and the daemon then fails with "already in use". So the
ports come from just below that range, which only explicit binds use, each checked free by a bind.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

#: How far below the kernel's ephemeral range ports are drawn from.
_SPAN = 12_000


def ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port(span: int = 1) -> int:
    """A loopback port nothing listens on right now (and the ``span - 1`` after it, unchecked), outside
    the kernel's ephemeral range where the machine allows it, else one the kernel picks."""
    high = ephemeral_low() - span
    low = max(1024, high - _SPAN)
    if high - low >= 1000:
        for _ in range(200):
            port = random.randrange(low, high)
            if bindable(port):
                return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_block(n: int) -> int:
    """A port whose next ``n - 1`` ports are free too (``mqctl up`` lays members out in sequence)."""
    while True:
        base = free_port(n)
        if all(bindable(port) for port in range(base + 1, base + n)):
            return base
