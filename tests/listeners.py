"""Which TCP addresses a process listens on, read from /proc (Linux), for tests of bind addresses."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

_LISTEN = "0A"


def _address(hex_addr: str, family: socket.AddressFamily) -> str:
    raw = bytes.fromhex(hex_addr)
    if sys.byteorder == "little":  # /proc prints each 32-bit word of the address in host order
        raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return socket.inet_ntop(family, raw)


def listening(pid: int) -> list[tuple[str, int]]:
    """`(address, port)` of every TCP socket process `pid` listens on."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    found = []
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == _LISTEN and inode in inodes:
                hex_addr, hex_port = local.split(":")
                found.append((_address(hex_addr, family), int(hex_port, 16)))
    return found
