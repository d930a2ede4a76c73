"""Free loopback ports for daemons started as subprocesses, which cannot be given port 0."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A loopback port nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_block(n: int) -> int:
    """A port whose next ``n - 1`` ports are free too (``mqctl up`` takes ports in sequence)."""
    while True:
        base = free_port()
        socks = []
        try:
            for port in range(base, base + n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
