"""One host's flood of connections against a listener's cap (the remoting port's `remotingMaxConnections`,
the metrics port's 16): a peer in a network namespace that opened them all and left them silent (or
opened them again as each was closed) shut every other host out; at the cap the flooding host gives way."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from daemon.broker.metrics import MAX_CONNECTIONS
from daemon.remoting.codes import RequestCode, ResponseCode
from tests.broker.test_metrics_server import fetch
from tests.support.broker import start_cluster, stop_cluster
from tests.support.netns import PeerNamespace, peer_namespace

pytestmark = pytest.mark.slow

#: Opens argv[3] connections to argv[1]:argv[2] and says so; at a line on stdin, how many are still open.
_HOLD = """
import socket, sys
socks = [socket.create_connection((sys.argv[1], int(sys.argv[2])), 5) for _ in range(int(sys.argv[3]))]
print("open", flush=True)
sys.stdin.readline()
alive = 0
for s in socks:
    s.setblocking(False)
    try:
        alive += s.recv(1, socket.MSG_PEEK) != b""
    except BlockingIOError:
        alive += 1
    except OSError:
        pass
print(alive, flush=True)
"""


async def _holding(peer: PeerNamespace, host: str, port: int, count: int) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        "ip", "netns", "exec", peer.name, sys.executable, "-c", _HOLD, host, str(port), str(count),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env=dict(os.environ),
    )  # fmt: skip
    assert proc.stdout is not None
    assert await asyncio.wait_for(proc.stdout.readline(), 30) == b"open\n"
    return proc


async def _still_open(proc: asyncio.subprocess.Process) -> int:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b"\n")
    line = await asyncio.wait_for(proc.stdout.readline(), 30)
    await proc.wait()
    return int(line)


@pytest.mark.parametrize("tls_mode", ["permissive", "disabled"])
async def test_a_host_holding_every_connection_gives_one_up_to_another_host(
    tmp_path: Path, tls_mode: str
) -> None:
    """The peer holds all 20 connections the broker allows (silent: on a permissive listener they wait
    for their first byte, on a plain one they are connections); a client of this machine is still
    served, by closing one of the peer's (before: closed on accept, 'remotingMaxConnections allows 20')."""
    with peer_namespace() as peer:
        handle = await start_cluster(
            tmp_path, listen_host="0.0.0.0", remoting_max_connections=20, tls_server_mode=tls_mode
        )
        proc = None
        try:
            server = handle.broker.server
            proc = await _holding(peer, peer.host_ip, server.port, 20)
            for _ in range(200):
                if server.open_connections >= 20:
                    break
                await asyncio.sleep(0.05)
            assert server.open_connections == 20
            served = await handle.call(RequestCode.GET_BROKER_RUNTIME_INFO)
            assert served.code == ResponseCode.SUCCESS, served.remark
            assert server.evicted_connections == 1
            assert await _still_open(proc) == 19
        finally:
            if proc is not None and proc.returncode is None:
                proc.kill()
                await proc.wait()
            await stop_cluster(handle)


async def test_a_host_holding_every_metrics_slot_gives_one_up_to_a_health_probe(tmp_path: Path) -> None:
    """The metrics port serves 16 connections at once: a peer holding all 16 silent (each opened again at
    its 10 s deadline) had every other client answered 503, a liveness probe of /healthz too, and an
    orchestrator restarts a broker whose probe fails. The peer's oldest gives way instead."""
    with peer_namespace() as peer:
        handle = await start_cluster(tmp_path, listen_host="0.0.0.0")
        proc = None
        try:
            port = handle.broker.metrics_port
            assert port
            proc = await _holding(peer, peer.host_ip, port, MAX_CONNECTIONS)
            await asyncio.sleep(0.5)  # every one handed to its handler thread
            health = await asyncio.to_thread(fetch, port, "/healthz")
            assert health.strip() == "serving"
            assert await _still_open(proc) == MAX_CONNECTIONS - 1
        finally:
            if proc is not None and proc.returncode is None:
                proc.kill()
                await proc.wait()
            await stop_cluster(handle)
