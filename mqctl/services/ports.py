"""Free loopback ports chosen now for daemons that bind them later, in other processes (``mqctl up``'s
members, which must know each other's ports before any starts; the test suite's daemons).

A port the kernel hands out for ``bind(0)`` comes from its ephemeral range, the one every outgoing
connection's local port comes from too: between this process releasing it and the daemon binding it, any
client connection on the host could take it, and the daemon then fails with "already in use". So the
ports come from just below that range, which only explicit binds use, each checked free by a bind.

A port checked free is still free for any other process that picks before the daemon binds (two
``mqctl up`` at once, a test suite's workers): each pick is also reserved on this host for a minute or
two, by a file created exclusively in a directory of the temporary directory, so no other picker of
this module hands it out meanwhile.
"""

from __future__ import annotations

import os
import random
import socket
import tempfile
import time
from pathlib import Path

#: How far below the kernel's ephemeral range ports are drawn from.
_SPAN = 12_000
#: A reservation lasts the minute it was made in and the next (the daemon binds well within it).
_BUCKET_S = 60


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


def _reservations() -> Path | None:
    path = Path(tempfile.gettempdir()) / f"mqctl-ports-{os.getuid()}"
    try:
        path.mkdir(mode=0o700, exist_ok=True)
    except OSError:
        return None
    return path


def reserve(port: int, span: int = 1) -> bool:
    """Reserve ``port`` and the ``span - 1`` after it for this host's other pickers, unless one of them
    holds any of them (reserved this minute or the last): whether this call got them all."""
    where = _reservations()
    if where is None:
        return True  # no place to keep reservations: the bind check alone decides, as before
    bucket = int(time.time()) // _BUCKET_S
    taken: list[Path] = []
    for p in range(port, port + span):
        if (where / f"{p}-{bucket - 1}").exists():
            break
        try:
            os.close(os.open(where / f"{p}-{bucket}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        except FileExistsError:
            break
        except OSError:
            return True
        taken.append(where / f"{p}-{bucket}")
    else:
        if random.random() < 0.02:
            _forget_old(where, bucket)
        return True
    for f in taken:
        f.unlink(missing_ok=True)
    return False


def _forget_old(where: Path, bucket: int) -> None:
    for f in where.iterdir():
        try:
            if int(f.name.rpartition("-")[2]) < bucket - 1:
                f.unlink(missing_ok=True)
        except (ValueError, OSError):
            continue


def free_port(span: int = 1) -> int:
    """A loopback port nothing listens on right now (and the ``span - 1`` after it, unchecked), outside
    the kernel's ephemeral range where the machine allows it, else one the kernel picks; reserved with
    the ``span - 1`` after it (see the module's docstring)."""
    high = ephemeral_low() - span
    low = max(1024, high - _SPAN)
    if high - low >= 1000:
        for _ in range(200):
            port = random.randrange(low, high)
            if bindable(port) and reserve(port, span):
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
