"""A network namespace the test makes itself, joined to this one by a veth pair, as a peer off loopback.

The pair's two addresses (10.x, a /30) exist only inside this machine: the host end in the test's own
namespace, the other end in the new one. A process run in the namespace reaches the host end's address
and nothing else (no route leaves the pair), and the daemon sees it come from the namespace's address,
not from loopback. Making a namespace needs CAP_NET_ADMIN; where the machine refuses, `peer_namespace`
skips the test and says why.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from tests.support.bounded import run_bounded

#: Sends each request of argv[2] (JSON [[code, extFields, body], ...]) to argv[1] and prints the answers.
_CLIENT = """
import asyncio, json, sys
from daemon.remoting.client import RemotingClient
from daemon.remoting.command import RemotingCommand

async def main():
    answers = []
    async with RemotingClient() as client:
        for code, fields, body in json.loads(sys.argv[2]):
            r = await client.invoke(sys.argv[1], RemotingCommand.request(code, fields, body.encode()), 10)
            answers.append([r.code, r.remark or ""])
    print(json.dumps(answers))

asyncio.run(main())
"""


@dataclass(frozen=True)
class PeerNamespace:
    name: str
    host_ip: str  # this namespace's end of the pair
    peer_ip: str  # the namespace's end: where its requests come from
    #: With ``ipv6_peers``: this end's IPv6 address, and the namespace's, all in one /64 (a ULA prefix).
    host_ip6: str = ""
    peer_ip6s: tuple[str, ...] = ()

    def python(self, script: str, *args: str) -> list[str]:
        """The argv that runs Python ``script`` with ``args`` inside the namespace."""
        return ["ip", "netns", "exec", self.name, sys.executable, "-c", script, *args]

    async def send(self, addr: str, requests: list[tuple[int, dict[str, str], str]]) -> list[tuple[int, str]]:
        """Send requests from inside the namespace (a subprocess there, so the caller's loop keeps
        serving); the answers' (code, remark)."""
        argv = self.python(_CLIENT, addr, json.dumps(requests))
        done = await run_bounded(argv, deadline=60, what=f"requests from namespace {self.name}")
        assert done.returncode == 0, done.stderr
        return [(int(code), str(remark)) for code, remark in json.loads(done.stdout)]


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20, check=False)


@contextmanager
def peer_namespace(ipv6_peers: int = 0) -> Iterator[PeerNamespace]:
    """A namespace with a veth pair 10.X.Y.1 (here) / 10.X.Y.2 (there); removed afterwards. With
    ``ipv6_peers``, the pair also has fd6d:X:Y:1::1 here and that many addresses of the same /64 there
    (::2, ::3, ...): one host speaking from many addresses, as any host with a /64 may."""
    tag = f"{os.getpid() % 100_000:05d}"
    name, host_end, peer_end = f"mqctl-peer-{tag}", f"mqh{tag}", f"mqp{tag}"
    octet2, octet3 = 200 + os.getpid() % 50, (os.getpid() // 50) % 256
    host_ip, peer_ip = f"10.{octet2}.{octet3}.1", f"10.{octet2}.{octet3}.2"
    prefix = f"fd6d:{octet2:x}:{octet3:x}:1"
    host_ip6 = f"{prefix}::1" if ipv6_peers else ""
    peer_ip6s = tuple(f"{prefix}::{i + 2:x}" for i in range(ipv6_peers))
    made = _ip("netns", "add", name)
    if made.returncode != 0:
        pytest.skip(f"this machine refuses to make a network namespace: {made.stderr.strip()}")
    try:
        steps: list[tuple[Any, ...]] = [
            ("link", "add", host_end, "type", "veth", "peer", "name", peer_end),
            ("link", "set", peer_end, "netns", name),
            ("addr", "add", f"{host_ip}/30", "dev", host_end),
            ("link", "set", host_end, "up"),
            ("-n", name, "addr", "add", f"{peer_ip}/30", "dev", peer_end),
            ("-n", name, "link", "set", peer_end, "up"),
            ("-n", name, "link", "set", "lo", "up"),
        ]
        if ipv6_peers:  # (nodad: usable at once, no duplicate detection to wait for)
            steps.append(("addr", "add", f"{host_ip6}/64", "dev", host_end, "nodad"))
            steps += [("-n", name, "addr", "add", f"{ip}/64", "dev", peer_end, "nodad") for ip in peer_ip6s]
        for step in steps:
            done = _ip(*step)
            if done.returncode != 0:
                pytest.skip(f"this machine refuses 'ip {' '.join(step)}': {done.stderr.strip()}")
        yield PeerNamespace(name, host_ip, peer_ip, host_ip6, peer_ip6s)
    finally:
        _ip("link", "del", host_end)  # (gone with the namespace too, when it was moved there)
        _ip("netns", "del", name)
