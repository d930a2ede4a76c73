"""TLS handshakes against a listener's limits: each costs the loop CPU, and one in progress holds a place
among the connections. A host beyond loopback starts them at a bounded rate (its excess waits, never
refused); at the connection cap a handshake under way belongs to its host, and is the first of the
heaviest host's to be closed for another host's connection, never one of a lighter host's."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from daemon.protect import budget_host
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import ResponseCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.connection import Connection
from daemon.remoting.limits import RemotingLimits
from daemon.remoting.server import HandshakePacer, RemotingServer
from daemon.remoting.tls import ServerTls, TlsSettings
from tests.support.netns import peer_namespace
from tests.support.waiting import wait_until

ECHO = 1


def _insecure() -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


@contextmanager
def _stalled_handshakes(source: str, port: int, count: int) -> Iterator[list[socket.socket]]:
    """`count` connections from `source` that send a ClientHello and nothing more: each holds the
    server in its handshake until the handshake's timeout."""
    socks = []
    try:
        for _ in range(count):
            hello = ssl.MemoryBIO()
            tls = _insecure().wrap_bio(ssl.MemoryBIO(), hello)
            with pytest.raises(ssl.SSLWantReadError):
                tls.do_handshake()
            sock = socket.socket()
            socks.append(sock)
            sock.bind((source, 0))
            sock.connect(("127.0.0.1", port))
            sock.sendall(hello.read())
        yield socks
    finally:
        for sock in socks:
            sock.close()


def _plain(source: str, port: int) -> socket.socket:
    sock = socket.socket()
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", port))
    return sock


def _server(cap: int) -> RemotingServer:
    def echo(conn: Connection, req: RemotingCommand) -> RemotingCommand:
        return req.make_response()

    return RemotingServer(
        {ECHO: echo},
        host="127.0.0.1",
        limits=RemotingLimits(remoting_max_connections=cap),
        tls=ServerTls(TlsSettings()),
    )


def test_a_host_beyond_loopback_starts_handshakes_at_a_bounded_rate() -> None:
    """A burst at once, then one each interval: each later handshake's wait is its turn; a host idle
    since starts afresh, hosts do not share turns, and loopback is never paced."""
    pacer = HandshakePacer(rate=10, burst=3)
    waits = [pacer.delay("10.0.0.9", 0.0) for _ in range(5)]
    assert waits == pytest.approx([0, 0, 0, 0.1, 0.2])
    assert pacer.delay("10.0.0.8", 0.0) == 0  # another host: its own burst
    assert all(pacer.delay("127.0.0.1", 0.0) == 0 for _ in range(10))
    assert pacer.delay("10.0.0.9", 0.05) == pytest.approx(0.25)  # its turns run on: the sixth at 0.3
    assert pacer.delay("10.0.0.9", 10.0) == 0  # idle since: a burst again


async def test_at_the_cap_a_heavy_hosts_handshake_is_closed_for_another_host() -> None:
    """Handshakes under way had their connections in the count but belonged to no host (no transport
    yet), so a host holding the whole cap with stalled ClientHellos shut everyone else out: 'closing
    connection ...: 6 connections open'. They count as their host's now, and are closed first."""
    srv = _server(6)
    await srv.start()
    try:
        with _stalled_handshakes("127.0.0.2", srv.port, 6):
            await wait_until(lambda: len(srv._handshaking) == 6, timeout=20)
            assert srv.open_connections == 6
            async with RemotingClient(ssl=_insecure()) as client:
                answer = await client.invoke(f"127.0.0.1:{srv.port}", RemotingCommand.request(ECHO), 10)
            assert answer.code == ResponseCode.SUCCESS
            assert srv.evicted_connections == 1 and len(srv._handshaking) == 5
    finally:
        await srv.stop(grace=0)


async def test_a_lighter_hosts_handshake_is_not_the_one_closed() -> None:
    """The other side: a handshake under way is cheap to close, but only as its host's share: at the cap a
    newcomer closes a connection of the host holding the most, not a lighter host's handshake."""
    srv = _server(4)
    await srv.start()
    heavy = []
    try:
        heavy = [_plain("127.0.0.2", srv.port) for _ in range(3)]
        for sock in heavy:
            sock.sendall(b"\x00")  # a first byte: each a connection of 127.0.0.2
        await wait_until(lambda: len(srv.connections) == 3 and not srv._sniffing, timeout=20)
        with _stalled_handshakes("127.0.0.3", srv.port, 1):
            await wait_until(lambda: len(srv._handshaking) == 1, timeout=20)
            assert srv.open_connections == 4
            async with RemotingClient(ssl=_insecure()) as client:
                answer = await client.invoke(f"127.0.0.1:{srv.port}", RemotingCommand.request(ECHO), 10)
            assert answer.code == ResponseCode.SUCCESS
            assert srv.evicted_connections == 1
            assert len(srv._handshaking) == 1  # 127.0.0.3's handshake goes on
            assert sorted(c.address[0] for c in srv.connections if not c.is_closed).count("127.0.0.2") == 2
    finally:
        for sock in heavy:
            sock.close()
        await srv.stop(grace=0)


#: Opens argv[3] TLS connections to argv[1]:argv[2] at once, each a whole handshake; prints how many did.
_BURST = """
import asyncio, ssl, sys

async def main():
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    async def one():
        try:
            _, writer = await asyncio.open_connection(sys.argv[1], int(sys.argv[2]), ssl=ctx, ssl_handshake_timeout=60)
        except OSError:
            return None
        return writer
    writers = await asyncio.gather(*(one() for _ in range(int(sys.argv[3]))))
    print(sum(w is not None for w in writers), flush=True)
    for w in writers:
        if w is not None:
            w.close()

asyncio.run(main())
"""


@pytest.mark.slow
async def test_a_burst_of_handshakes_from_a_peer_waits_its_turns_and_all_complete() -> None:
    """A peer in a network namespace starting handshakes at once, past the burst: the ones past it wait
    their host's turn (one handshake's CPU at a time, paced) and every one completes, none refused, as a
    client's reconnects must."""
    count = 40
    with peer_namespace() as peer:
        srv = RemotingServer({}, host=peer.host_ip, tls=ServerTls(TlsSettings()))
        srv.pacer = HandshakePacer(
            rate=10, burst=10
        )  # (the default's burst, 100 at once, in a busy test run)
        await srv.start()
        try:
            proc = await asyncio.create_subprocess_exec(
                "ip", "netns", "exec", peer.name, sys.executable, "-c", _BURST, peer.host_ip,
                str(srv.port), str(count), stdout=asyncio.subprocess.PIPE, env=dict(os.environ),
            )  # fmt: skip
            out, _ = await asyncio.wait_for(proc.communicate(), 120)
            assert int(out) == count
            assert srv.tls_paced >= 1 and srv.tls_refused == 0
        finally:
            await srv.stop(grace=0)


def test_a_host_is_an_ipv6_64() -> None:
    assert budget_host("10.1.2.3") == "10.1.2.3"
    assert budget_host("::ffff:10.1.2.3") == "10.1.2.3"
    assert budget_host("2001:db8:1:2::5") == budget_host("2001:db8:1:2:ffff:1:2:3") == "2001:db8:1:2::/64"
    assert budget_host("2001:db8:1:3::5") != budget_host("2001:db8:1:2::5")
    assert budget_host("") == ""
    # TLS handshakes: the addresses of one /64 take their turns as one host
    pacer = HandshakePacer(rate=1.0, burst=2)
    assert pacer.delay("2001:db8:1:2::1", 100.0) == 0.0
    assert pacer.delay("2001:db8:1:2::2", 100.0) == 0.0
    assert pacer.delay("2001:db8:1:2::3", 100.0) > 0.5  # the third of the host's burst of two waits
    assert pacer.delay("2001:db8:9:9::1", 100.0) == 0.0  # another host does not


#: In a namespace whose addresses argv[1:] share a /64: a server capped at 4 connections; three from that
#: /64 (one an address), one from ::1 (another host), then ::1's second: prints whether it was answered,
#: how many were closed to serve it, and the /64's connections left open (JSON).
_FAIR_64 = """
import asyncio, json, socket, sys
from daemon.remoting.client import RemotingClient
from daemon.remoting.command import RemotingCommand
from daemon.remoting.limits import RemotingLimits
from daemon.remoting.server import RemotingServer

async def main():
    srv = RemotingServer({1: lambda conn, req: req.make_response()}, host="::",
                         limits=RemotingLimits(remoting_max_connections=4))
    await srv.start()
    heavy = []
    for source in sys.argv[1:4]:
        sock = socket.socket(socket.AF_INET6)
        sock.bind((source, 0))
        sock.connect(("::1", srv.port))
        heavy.append(sock)
    async with RemotingClient() as first, RemotingClient() as second:
        addr = f"[::1]:{srv.port}"
        await first.invoke(addr, RemotingCommand.request(1), 10)
        while len([c for c in srv.connections if not c.is_closed]) < 4:
            await asyncio.sleep(0.01)
        try:
            answer = (await second.invoke(addr, RemotingCommand.request(1), 5)).code
        except Exception as exc:
            answer = repr(exc)
        left = sum(1 for c in srv.connections if not c.is_closed and c.address[0] != "::1")
    print(json.dumps({"answer": answer, "evicted": srv.evicted_connections, "left": left}))
    for sock in heavy:
        sock.close()
    await srv.stop(grace=0)

asyncio.run(main())
"""


def test_at_the_cap_an_ipv6_hosts_addresses_count_as_one_host() -> None:
    """Three connections from three addresses of one /64 are one host holding three: at the cap another
    host's connection is served by closing one of them. Counted by address, each held one, as the
    newcomer's host did, and the newcomer was refused."""
    with peer_namespace(ipv6_peers=3) as peer:
        argv = ["ip", "netns", "exec", peer.name, sys.executable, "-c", _FAIR_64, *peer.peer_ip6s]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"answer": ResponseCode.SUCCESS, "evicted": 1, "left": 2}
