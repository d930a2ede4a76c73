"""One host against the gRPC front's connection cap: grpc core accepts and counts the connections itself,
so a peer in a network namespace that held `grpcMaxConnections` of them (and opened them again as they
closed) kept the front from every other host, and a silent one held its place for grpc's 120 s handshake
deadline. The guard beside grpc (daemon.grpc.guard) holds such a host back and keeps room for others."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from daemon.grpc.guard import ConnectionGuard, drop_filter, front_sockets, parse_sockets
from daemon.grpc.server import HANDSHAKE_TIMEOUT_S
from tests.support.bounded import finish, read_line
from tests.support.grpc5 import MessagingServiceStub, create_topic, grpc_cluster, pb, spb
from tests.support.netns import peer_namespace
from tests.support.waiting import wait_for

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the guard reads Linux's socket tables")

#: The HTTP/2 client preface and an empty SETTINGS frame: what makes grpc's handshake complete.
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"

#: Holds argv[3] connections to argv[1]:argv[2] (each sends the preface, then nothing), opening one again
#: as one closes, until a line on stdin; then prints how many connects it made.
_FLOOD = """
import select, socket, sys, time
H2 = b"PRI * HTTP/2.0\\r\\n\\r\\nSM\\r\\n\\r\\n" + b"\\x00\\x00\\x00\\x04\\x00\\x00\\x00\\x00\\x00"
host, port, want = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
held, made = [], 0
print("flooding", flush=True)
while not select.select([sys.stdin], [], [], 0)[0]:
    alive = []
    for s in held:
        try:
            s.setblocking(False)
            if s.recv(65536) == b"":
                s.close()
                continue
        except BlockingIOError:
            pass
        except OSError:
            s.close()
            continue
        alive.append(s)
    held = alive
    while len(held) < want:
        try:
            s = socket.create_connection((host, port), 0.3)
            s.sendall(H2)
        except OSError:
            break
        held.append(s)
        made += 1
    time.sleep(0.1)
print(made, flush=True)
"""


def _served(port: int) -> bool:
    request = spb.QueryRouteRequest(topic=pb.Resource(name="Fair"))
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        try:
            reply = MessagingServiceStub(channel).QueryRoute(request, timeout=3)
        except grpc.RpcError:
            return False
    return reply.status.code == pb.OK


@pytest.mark.slow
def test_a_host_holding_every_grpc_connection_gives_way_to_another_host(tmp_path: Path) -> None:
    """The peer holds all 20 connections the front allows and opens one again whenever one closes; a
    client of this machine is served all the same (before: every call of it failed UNAVAILABLE for as
    long as the peer kept at it). The peer is held: its new connections are dropped, its most silent
    ones closed to keep room."""
    with (
        peer_namespace() as peer,
        grpc_cluster(tmp_path, listen_host="0.0.0.0", grpc_max_connections=20) as cluster,
    ):
        front = cluster.broker.grpc
        assert front is not None and front.guard is not None
        create_topic(cluster, "Fair")
        flood = subprocess.Popen(
            ["ip", "netns", "exec", peer.name, sys.executable, "-c", _FLOOD, peer.host_ip, str(front.port), "40"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert read_line(flood) == "flooding\n"
            wait_for(
                lambda: _held_by(front.port, peer.peer_ip) >= 20, "the peer holding every connection", 30
            )
            wait_for(lambda: _served(front.port), "a client of this machine served", 60)
            assert front.guard.held == {peer.peer_ip}
            assert front.guard.evicted >= 1
            assert 0 < _held_by(front.port, peer.peer_ip) < 20
        finally:
            assert flood.stdin is not None
            flood.stdin.write("stop\n")
            out, _ = finish(flood, 30)
        assert int(out) > 20  # it did open connections again as they closed


def _held_by(port: int, host: str) -> int:
    return sum(1 for s in front_sockets(port) if s.host == host)


def test_a_silent_connection_is_closed_at_the_handshake_deadline(tmp_path: Path) -> None:
    """A connection that never sends HTTP/2's preface holds a place of grpcMaxConnections: grpc closed it
    after its default 120 s; the front closes it after HANDSHAKE_TIMEOUT_S."""
    with grpc_cluster(tmp_path) as cluster:
        assert cluster.broker.grpc is not None
        with socket.create_connection(("127.0.0.1", cluster.broker.grpc.port), timeout=10) as sock:
            sock.settimeout(HANDSHAKE_TIMEOUT_S * 4)
            received = b"x"
            try:
                while received:  # the server's SETTINGS first, then the end of the stream
                    received = sock.recv(100)
            except ConnectionResetError:
                pass
            # (before: the recv timed out, the connection still held: grpc's deadline is longer)


def test_a_front_on_loopback_runs_no_guard(tmp_path: Path) -> None:
    """On loopback every peer is this machine: no host to be fair between."""
    with grpc_cluster(tmp_path) as cluster:
        assert cluster.broker.grpc is not None and cluster.broker.grpc.guard is None


def _connects(src: str, port: int, family: socket.AddressFamily = socket.AF_INET) -> bool:
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((src, 0))
        sock.settimeout(1.5)  # a dropped SYN is sent again after 1 s: 1.5 s sees it dropped once
        try:
            sock.connect(("::1" if family == socket.AF_INET6 else "127.0.0.1", port))
        except TimeoutError:
            return False
        return True


@pytest.mark.parametrize("held", [["127.0.0.2"], ["127.0.0.2", "127.0.0.4"], ["::1"], ["::1", "127.0.0.2"]])
def test_the_drop_filter_drops_the_held_hosts_syns_only(held: list[str]) -> None:
    """The filter the guard attaches to grpc's listener: SYNs from a held address are dropped, every
    other address connects (IPv4 on a dual-stack listener, IPv6 alike)."""
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as listener:
        listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        listener.bind(("::", 0))
        listener.listen(16)
        port = listener.getsockname()[1]
        guard = ConnectionGuard(port, 10)
        assert guard.start()  # it finds the listener among this process's descriptors
        try:
            guard.held = set(held)
            guard._filter()
            for src in ("127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4"):
                assert _connects(src, port) == (src not in held), src
            if socket.has_ipv6:
                assert _connects("::1", port, socket.AF_INET6) == ("::1" not in held)
            guard.held = set()
            guard._filter()
            assert _connects("127.0.0.2", port)
        finally:
            guard.stop()


def test_the_guard_holds_the_heaviest_host_near_the_cap_and_closes_its_most_silent() -> None:
    """Near the cap the host holding the most is held and its connections silent the longest are shut
    down to keep a tenth of the cap free; below half the cap it is let go."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        port = listener.getsockname()[1]
        guard = ConnectionGuard(port, 10)
        assert guard.start()
        clients: list[socket.socket] = []
        served: list[socket.socket] = []
        try:
            for src in ["127.0.0.2"] * 8 + ["127.0.0.3"]:
                client = socket.socket()
                client.bind((src, 0))
                client.connect(("127.0.0.1", port))
                clients.append(client)
                served.append(listener.accept()[0])
            time.sleep(0.05)
            clients[0].sendall(b"x")  # the most recent data: kept
            wait_for(lambda: served[0].recv(1) == b"x", "the byte read")
            guard.scan()  # 9 of 10, over the cap less its reserve (1)
            assert guard.held == {"127.0.0.2"} and guard.evicted == 0  # 9 = cap - reserve: none over
            extra = socket.socket()
            extra.bind(("127.0.0.3", 0))
            extra.connect(("127.0.0.1", port))
            clients.append(extra)
            served.append(listener.accept()[0])
            guard.scan()  # 10: one over
            assert guard.evicted == 1
            shut = [s for s in served[1:8] if _at_eof(s)]
            assert len(shut) == 1 and not _at_eof(served[0]) and not _at_eof(served[8])
            for s in served[:6]:
                s.close()
            guard.scan()  # 4 left: under half the cap
            assert guard.held == set()
        finally:
            for s in clients + served:
                s.close()
            guard.stop()


def _at_eof(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        sock.setblocking(True)


def test_a_socket_listing_is_read_as_the_kernel_writes_it() -> None:
    """/proc/net/tcp6 writes v4-mapped peers of a dual-stack listener; TIME_WAIT and inode 0 hold no
    descriptor and are left out."""
    text = (
        "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        "   0: 00000000000000000000000000000000:1F91 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1\n"
        "   1: 0000000000000000FFFF00000100007F:1F91 0000000000000000FFFF00000200C80A:A1B2 01 00000000:00000000 00:00000000 00000000     0        0 222 1\n"
        "   2: 00000000000000000000000001000000:1F91 00000000000000000000000001000000:C000 01 00000000:00000000 00:00000000 00000000     0        0 333 1\n"
        "   3: 0000000000000000FFFF00000100007F:1F91 0000000000000000FFFF00000200C80A:A1B3 06 00000000:00000000 00:00000000 00000000     0        0 0 1\n"
        "   4: 0000000000000000FFFF00000100007F:1F92 0000000000000000FFFF00000200C80A:A1B4 01 00000000:00000000 00:00000000 00000000     0        0 444 1\n"
    )  # fmt: skip
    parsed = parse_sockets(text, 0x1F91)
    assert [(s.inode, s.host, s.listening) for s in parsed] == [
        (111, "", True),
        (222, "10.200.0.2", False),
        (333, "::1", False),
    ]
    assert os.path.exists("/proc/net/tcp")
    assert drop_filter([]) != drop_filter(["10.0.0.1"])


#: In a namespace whose addresses argv[1:] share a /64: a dual-stack listener, the guard holding that /64
#: (as its scan names an IPv6 host) or nothing; prints whether each address, ::1 and 127.0.0.1 connect (JSON).
_FILTER_64 = """
import json, socket, sys
from daemon.grpc.guard import ConnectionGuard
from daemon.protect import budget_host

def connects(src, dst, port, family):
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((src, 0))
        sock.settimeout(1.5)
        try:
            sock.connect((dst, port))
        except TimeoutError:
            return False
        return True

addresses = sys.argv[1:]
with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as listener:
    listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    listener.bind(("::", 0))
    listener.listen(64)
    port = listener.getsockname()[1]
    guard = ConnectionGuard(port, 10)
    assert guard.start()
    out = {}
    for held in ([budget_host(addresses[0])], []):
        guard.held = set(held)
        guard._filter()
        seen = {a: connects(a, addresses[-1], port, socket.AF_INET6) for a in addresses}
        seen["::1"] = connects("::1", "::1", port, socket.AF_INET6)
        seen["127.0.0.1"] = connects("127.0.0.1", "127.0.0.1", port, socket.AF_INET)
        out["held" if held else "free"] = seen
    guard.stop()
print(json.dumps(out))
"""


def test_the_drop_filter_holds_an_ipv6_hosts_whole_64() -> None:
    """An IPv6 host is its /64 (it may speak from any of its addresses): held, none of them connects; the
    other hosts do, and every one once it is let go."""
    with peer_namespace(ipv6_peers=3) as peer:
        argv = ["ip", "netns", "exec", peer.name, sys.executable, "-c", _FILTER_64, *peer.peer_ip6s]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["held"] == {**{a: False for a in peer.peer_ip6s}, "::1": True, "127.0.0.1": True}
    assert all(seen["free"].values()), seen["free"]
