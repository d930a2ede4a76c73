"""Every refusal of the remoting guard shows in /metrics, counted from a peer in a network namespace: a
header over its cap, a frame that cannot be RocketMQ's, a JSON body over its cap, TLS handshakes paced
and a failed one (docs/security.md, "What one request may cost")."""

from __future__ import annotations

import asyncio
import re
import sys
import urllib.request
from pathlib import Path

import pytest

from daemon.remoting.server import HandshakePacer
from tests.support.bounded import run_bounded
from tests.support.broker import start_broker
from tests.support.netns import peer_namespace

#: From the namespace, against argv[1]:argv[2]: a header over 256 KiB and a frame of an unknown serialize
#: type (each closed), a HEART_BEAT of 2 MiB (answered SYSTEM_ERROR), 5 TLS handshakes at once, and a
#: handshake of garbage. Prints the heartbeat's answer code.
_ATTACK = """
import asyncio, socket, ssl, struct, sys
from daemon.remoting.client import RemotingClient
from daemon.remoting.command import RemotingCommand

host, port = sys.argv[1], int(sys.argv[2])

def closed_after(data):
    with socket.create_connection((host, port), timeout=30) as s:
        s.sendall(data)
        assert s.recv(1) == b""

closed_after(struct.pack(">ii", 300_004, 300_000))
closed_after(struct.pack(">ii", 100, (7 << 24) | 10))

async def main():
    async with RemotingClient() as client:
        answer = await client.invoke(f"{host}:{port}", RemotingCommand.request(34, {}, b"[" * (2 << 20)), 30)
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    opened = await asyncio.gather(*(asyncio.open_connection(host, port, ssl=ctx) for _ in range(5)))
    for _, writer in opened:
        writer.close()
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(b"\\x16\\x03\\x01\\x00\\x08not a hello")
    assert await reader.read() == b""
    print(answer.code)

asyncio.run(main())
"""


def _scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    samples = {}
    for line in text.splitlines():
        found = re.match(r'(rocketmq_remoting_\w+?)(?:_total)?\{[^}]*?(?:limit="(\w+)")?\} (\S+)$', line)
        if found:
            name, limit, value = found.groups()
            samples[f"{name}:{limit}" if limit else name] = float(value)
    return samples


@pytest.mark.slow
async def test_the_guards_refusals_from_a_peer_show_in_metrics(tmp_path: Path) -> None:
    with peer_namespace() as peer:
        broker = await start_broker(
            tmp_path / "store", listen_host=peer.host_ip, broker_ip1=peer.host_ip, metrics_host="127.0.0.1"
        )
        broker.server.pacer = HandshakePacer(rate=2, burst=2)  # five at once: some wait their turn
        try:
            before = await asyncio.to_thread(_scrape, broker.metrics_port)
            argv = ["ip", "netns", "exec", peer.name, sys.executable, "-c", _ATTACK]
            done = await run_bounded(
                [*argv, peer.host_ip, str(broker.server.port)], deadline=120, what="attack"
            )
            assert done.returncode == 0, done.stderr
            assert done.stdout.split() == ["1"]  # SYSTEM_ERROR: the heartbeat's body is over its cap
            after = await asyncio.to_thread(_scrape, broker.metrics_port)
        finally:
            await broker.stop()
    assert before["rocketmq_remoting_closed_over_limit:header_bytes"] == 0
    assert after["rocketmq_remoting_closed_over_limit:header_bytes"] == 1
    assert after["rocketmq_remoting_bad_frames"] == before["rocketmq_remoting_bad_frames"] + 1
    assert after["rocketmq_remoting_requests_refused:json_body"] == 1
    assert after["rocketmq_remoting_tls_paced"] >= 1
    assert after["rocketmq_remoting_tls_refused"] == 1
    for limit in ("buffered_bytes", "connections", "connections_evicted", "unread_replies"):
        assert after[f"rocketmq_remoting_closed_over_limit:{limit}"] == 0
