"""Per-host fairness for the gRPC front's connections (docs/security.md, the gRPC front's connections).

grpc core accepts the front's connections itself and holds at most ``grpcMaxConnections``: one host that
opened them all (silent, or re-opened as they closed) kept the front from every other host. grpc's
Python server offers no per-host limit and no way to hand it a socket we accepted, so this guard works
beside it, on Linux: every few seconds it counts the front's connections per peer host from
``/proc/net/tcp`` and ``tcp6`` (the sockets on the front's port), and when they near the cap

- the host holding the most is *held*: a classic BPF filter on grpc's listening socket drops the SYNs
  from its address, so it opens no new connection while it is held (its clients retry, as after a
  lost SYN), and the free places go to other hosts;
- while the front is over the cap less a reserve, the held hosts' most silent connections (by the
  kernel's time since their last data) are shut down, so the reserve stays free for other hosts.

A host is held until the front holds fewer than half its cap. The guard runs only on a front that
listens beyond loopback: on loopback every peer is this machine. Its scans read the kernel's tables in
a thread, never on the loop.
"""

from __future__ import annotations

import contextlib
import ctypes
import ipaddress
import logging
import os
import socket
import struct
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from daemon.protect import budget_host

log = logging.getLogger(__name__)

_SO_ATTACH_FILTER = getattr(socket, "SO_ATTACH_FILTER", 26)
_SO_DETACH_FILTER = getattr(socket, "SO_DETACH_FILTER", 27)
#: Offset of the network header in a classic BPF load (SKF_NET_OFF).
_NET = -0x100000
_LISTEN = "0A"
_TIME_WAIT = "06"
#: struct tcp_info: tcpi_last_data_recv (ms since the peer's last data) and the struct's length read.
_LAST_DATA_RECV = 52
_TCP_INFO_LEN = 104


@dataclass(frozen=True, slots=True)
class FrontSocket:
    """One socket on the front's port as the kernel lists it."""

    inode: int
    host: str  # the peer's address ("" for a listener)
    listening: bool


def _address(hex_addr: str) -> str:
    """``/proc/net/tcp`` writes an address as 32-bit words in the host's byte order."""
    raw = bytes.fromhex(hex_addr)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    ip = ipaddress.ip_address(words)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


def parse_sockets(text: str, port: int) -> list[FrontSocket]:
    """The sockets of a ``/proc/net/tcp`` or ``tcp6`` listing on local ``port`` that hold a descriptor
    (TIME_WAIT and half-open ones have none: inode 0)."""
    out = []
    suffix = f":{port:04X}"
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or not fields[1].endswith(suffix) or fields[3] == _TIME_WAIT:
            continue
        inode = int(fields[9])
        if inode == 0:
            continue
        listening = fields[3] == _LISTEN
        out.append(FrontSocket(inode, "" if listening else _address(fields[2].rsplit(":", 1)[0]), listening))
    return out


def front_sockets(port: int) -> list[FrontSocket]:
    out: list[FrontSocket] = []
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as f:
                out += parse_sockets(f.read(), port)
        except OSError:
            continue  # (no IPv6 here)
    return out


def descriptors(inodes: Iterable[int]) -> dict[int, int]:
    """This process's descriptor of each socket inode wanted that it holds."""
    wanted = set(inodes)
    found: dict[int, int] = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:[") and int(target[8:-1]) in wanted:
            found[int(target[8:-1])] = int(name)
    return found


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k & 0xFFFFFFFF)


_LD_B, _LD_W, _RSH, _JEQ, _RET = 0x30, 0x20, 0x74, 0x15, 0x06


def drop_filter(hosts: Iterable[str]) -> bytes:
    """A classic BPF program that drops packets from ``hosts`` (IPv4 addresses, IPv6 addresses or IPv6
    networks such as ``2001:db8::/64``, as :func:`daemon.protect.budget_host` names a host) and passes
    the rest. Jumps are relative: a branch taken goes ``offset`` instructions past the next one."""
    v4 = sorted({struct.unpack(">I", ipaddress.IPv4Address(h).packed)[0] for h in hosts if ":" not in h})
    v6 = sorted({_words(h) for h in hosts if ":" in h})
    accept, drop = _insn(_RET, 0, 0, 0xFFFFFFFF), _insn(_RET, 0, 0, 0)
    # IPv4: load the source address; a match jumps to the `drop` after `accept`
    four = [_insn(_LD_W, 0, 0, _NET + 12)]
    four += [_insn(_JEQ, len(v4) - i, 0, k) for i, k in enumerate(v4)]
    four += [accept, drop]
    # IPv6: two instructions a word of each address or network (a /64: its first two words); a
    # mismatch goes on to the next one, the last word's match to `drop`
    starts = [sum(2 * len(w) for w in v6[:b]) for b in range(len(v6) + 1)]
    end = starts[-1]  # where `accept` is, `drop` after it
    six: list[bytes] = []
    for b, words in enumerate(v6):
        for j, word in enumerate(words):
            at = starts[b] + 2 * j + 1
            matched = 0 if j < len(words) - 1 else end - at
            six += [_insn(_LD_W, 0, 0, _NET + 8 + 4 * j), _insn(_JEQ, matched, starts[b + 1] - at - 1, word)]
    six += [accept, drop]
    head = [_insn(_LD_B, 0, 0, _NET), _insn(_RSH, 0, 0, 4), _insn(_JEQ, 0, len(four), 4)]
    return b"".join([*head, *four, *six])


def _words(host: str) -> tuple[int, ...]:
    """The 32-bit words an IPv6 address (all four) or network (those its prefix covers) is matched by."""
    network = ipaddress.IPv6Network(host)
    return struct.unpack(">4I", network.network_address.packed)[: max(1, network.prefixlen // 32)]


def _attach(fd: int, program: bytes) -> None:
    count = len(program) // 8
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = struct.pack("HL", count, ctypes.addressof(buffer))
    with socket.socket(fileno=os.dup(fd)) as sock:
        sock.setsockopt(socket.SOL_SOCKET, _SO_ATTACH_FILTER, fprog)


def _detach(fd: int) -> None:
    with socket.socket(fileno=os.dup(fd)) as sock, contextlib.suppress(OSError):  # (none attached)
        sock.setsockopt(socket.SOL_SOCKET, _SO_DETACH_FILTER, 0)


class ConnectionGuard:
    """Keeps one host from holding the front's every connection (see the module docstring). ``scan``
    runs in a thread; ``period`` says when to run it next (sooner while the front is busy)."""

    QUIET_PERIOD = 5.0
    BUSY_PERIOD = 1.0

    def __init__(self, port: int, cap: int) -> None:
        self.port = port
        self.cap = cap
        #: Places kept free for other hosts while a host is held.
        self.reserve = max(1, cap // 10)
        self.held: set[str] = set()
        #: Connections shut down to keep the reserve free (what /metrics and the tests count).
        self.evicted = 0
        self.last_total = 0
        self._listeners: list[int] = []
        self._filtered: frozenset[str] = frozenset()

    def start(self) -> bool:
        """Find grpc's listening sockets; False (the guard stays off) where the kernel's tables or the
        process's descriptors cannot be read (not Linux)."""
        try:
            listening = [s.inode for s in front_sockets(self.port) if s.listening]
            fds = descriptors(listening)
        except OSError as exc:
            log.info("gRPC front: no per-host connection guard here: %s", exc)
            return False
        self._listeners = [os.dup(fd) for fd in fds.values()]
        if not self._listeners:
            log.info("gRPC front: no per-host connection guard: its listening socket was not found")
            return False
        return True

    def stop(self) -> None:
        for fd in self._listeners:
            os.close(fd)
        self._listeners = []

    @property
    def period(self) -> float:
        return self.BUSY_PERIOD if self.held or self.last_total >= self.cap // 4 else self.QUIET_PERIOD

    def scan(self) -> None:
        sockets = [s for s in front_sockets(self.port) if not s.listening]
        hosts = Counter(budget_host(s.host) for s in sockets)  # (an IPv6 peer's /64 is one host)
        total = self.last_total = sum(hosts.values())
        if total < self.cap // 2:
            self.held.clear()
        elif total >= self.cap - self.reserve and hosts:
            heavy, count = hosts.most_common(1)[0]
            if heavy not in self.held:
                self.held.add(heavy)
                log.warning(
                    "gRPC front: %s holds %d of the %d connections open (grpcMaxConnections %d): its new "
                    "connections are dropped until the front holds fewer than %d, and its most silent "
                    "ones are closed to keep %d free for other hosts",
                    heavy,
                    count,
                    total,
                    self.cap,
                    self.cap // 2,
                    self.reserve,
                )
        self._filter()
        excess = total - (self.cap - self.reserve)
        if excess > 0 and self.held:
            self._evict([s for s in sockets if budget_host(s.host) in self.held], excess)

    def _filter(self) -> None:
        held = frozenset(self.held)
        if held == self._filtered:
            return
        for fd in self._listeners:
            if held:
                _attach(fd, drop_filter(held))
            else:
                _detach(fd)
        self._filtered = held

    def _evict(self, sockets: list[FrontSocket], count: int) -> None:
        """Shut down the ``count`` connections of ``sockets`` silent the longest: grpc reads the end of
        the stream and closes its side."""
        fds = descriptors(s.inode for s in sockets)
        ranked: list[tuple[int, socket.socket]] = []
        try:
            for inode, fd in fds.items():
                try:
                    sock = socket.socket(fileno=os.dup(fd))
                except OSError:
                    continue  # closed meanwhile
                if os.fstat(sock.fileno()).st_ino != inode:
                    sock.close()  # the number was reused meanwhile
                    continue
                info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_LEN)
                ranked.append((struct.unpack_from("I", info, _LAST_DATA_RECV)[0], sock))
            ranked.sort(key=lambda pair: pair[0], reverse=True)
            for _silent, sock in ranked[:count]:
                with contextlib.suppress(OSError):  # (gone meanwhile)
                    sock.shutdown(socket.SHUT_RDWR)
                    self.evicted += 1
        finally:
            for _silent, sock in ranked:
                sock.close()
