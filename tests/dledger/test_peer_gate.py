"""The DLedger channel admits its members only: a group of three brokers in this process (fast timings).

A process on a host that is not in `dLegerPeers` (127.0.0.2 while the peers are 127.0.0.1: Linux routes all
of 127/8 to lo) is closed on connect, so its forged TRUNCATE (a duplicate entry the follower would commit)
and its VOTE of a far term (which would depose the leader) change nothing. A request naming a member whose
host is not the connecting one is refused. With `haTls` the channel is mutual TLS: a plaintext peer and a
peer whose certificate another CA signed are refused, and the group elects, replicates and fails over.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
import subprocess
import sys
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import pytest

from daemon.acl.signature import Signer
from daemon.broker.broker import Broker
from daemon.config import ConfigError, parse_properties
from daemon.dledger.machines import log_entry, wire_entry
from daemon.dledger.protocol import (
    BINARY_PUSH_CODE,
    DLedgerRequestCode,
    DLedgerResponseCode,
    GetEntriesRequest,
    GetEntriesResponse,
    PushEntryRequest,
    PushType,
    RequestOrResponse,
    VoteRequest,
    binary_push_fields,
)
from daemon.namesrv.controller import NamesrvController
from daemon.remoting.bodies import KVTable
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.errors import RemotingError
from daemon.remoting.frame import encode_command
from daemon.remoting.tls import write_local_ca, write_member_ca
from store.dledger import encode_entry
from tests.broker.test_ha import pull_all
from tests.dledger.test_group import failover
from tests.dledger.test_rejoin import STEADY, leader_of, members
from tests.dledger.test_single import dledger_keys
from tests.support.acl import ADMIN_AK, ADMIN_SK, write_acl
from tests.support.broker import BrokerClient, start_broker
from tests.support.namesrv import namesrv_config
from tests.support.netns import peer_namespace
from tests.support.paths import ROOT
from tests.support.ports import free_port
from tests.support.up import mqctl_up
from tests.support.waiting import wait_until
from tests.tls.test_tls import client_context, server_keys

pytestmark = pytest.mark.slow

Snapshot = list[tuple[int, int, int, str | None]]


def on_hosts(keys: list[dict[str, Any]], hosts: list[str]) -> list[dict[str, Any]]:
    """`members`' keys with member i's DLedger address on hosts[i] (its port kept)."""
    peers = keys[0]["dleger_peers"].split(";")
    moved = ";".join(p.replace("127.0.0.1", h) for p, h in zip(peers, hosts, strict=True))
    return [{**k, "dleger_peers": moved} for k in keys]


def steady(tmp_path: Path) -> list[dict[str, Any]]:
    """`members` on STEADY timings: a test here asserts that what it forged changed no member's term,
    leader or log, which an election a loaded host made would change as well."""
    return [{**k, **STEADY} for k in members(tmp_path)]


async def running(keys: list[dict[str, Any]]) -> list[Broker]:
    return [await start_broker(Path(k["store_path_root_dir"]), **k) for k in keys]


async def settled(
    brokers: list[Broker], client: RemotingClient, sends: int = 5
) -> tuple[Broker, BrokerClient]:
    """Wait for a leader, send `sends` messages through it, and wait until every member committed them."""
    await wait_until(lambda: leader_of(list(brokers)) is not None, 30)
    leader = leader_of(list(brokers))
    assert leader is not None
    on = BrokerClient(leader.addr, client)
    await on.create_topic("G", 1)
    for i in range(sends):
        assert (await on.send("G", f"m{i}".encode(), queue_id=0, timeout=60)).code == ResponseCode.SUCCESS
    assert leader.dledger is not None
    last = leader.dledger.log.last_index

    def all_committed() -> bool:
        return all(b.dledger is not None and b.dledger.log.committed_index == last for b in brokers)

    await wait_until(all_committed, 20)
    return leader, on


def snapshot(brokers: list[Broker]) -> Snapshot:
    """Each member's term, last and committed index, and the leader it follows."""
    out = []
    for b in brokers:
        assert b.dledger is not None
        m, lg = b.dledger.node.m, b.dledger.log
        out.append((m.term, lg.last_index, lg.committed_index, m.leader_id))
    return out


def forged(
    leader: Broker, follower: Broker
) -> tuple[tuple[str, RequestOrResponse], tuple[str, RequestOrResponse]]:
    """A TRUNCATE to `follower` in the leader's name that adds a copy of its last entry and commits it, and
    a VOTE to `leader` in the follower's name for a term far ahead: (DLedger address, request) each."""
    assert leader.dledger is not None and follower.dledger is not None
    lm, fm = leader.dledger.node.m, follower.dledger.node.m
    last = follower.dledger.node._get(follower.dledger.log.last_index)
    assert last is not None
    entry = wire_entry(last)
    entry.index, entry.pos = entry.index + 1, entry.pos + entry.size
    push = PushEntryRequest(
        group=fm.group,
        leader_id=lm.self_id,
        local_id=lm.self_id,
        remote_id=fm.self_id,
        term=fm.term,
        type=PushType.TRUNCATE,
        entry=entry,
        commit_index=entry.index,
    )
    vote = VoteRequest(
        group=lm.group,
        leader_id=fm.self_id,
        local_id=fm.self_id,
        remote_id=lm.self_id,
        term=lm.term + 1000,
        ledger_end_index=10**9,
        ledger_end_term=lm.term + 1000,
    )
    return (fm.peers[fm.self_id], push), (lm.peers[lm.self_id], vote)


async def send_forged(client: RemotingClient, addr: str, req: RequestOrResponse) -> int | None:
    """The remoting code a forged request was answered with; None when the connection was refused/closed."""
    code = DLedgerRequestCode.PUSH if isinstance(req, PushEntryRequest) else DLedgerRequestCode.VOTE
    try:
        response = await client.invoke(addr, RemotingCommand.request(int(code), body=req.encode()), 2.0)
    except RemotingError:
        return None
    return response.code


async def test_a_non_member_host_can_neither_truncate_nor_depose(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    brokers = await running(steady(tmp_path))
    attacker = RemotingClient(local_host="127.0.0.2", connect_timeout=1.0)
    client = RemotingClient()
    try:
        leader, on = await settled(brokers, client)
        follower = next(b for b in brokers if b is not leader)
        before = snapshot(brokers)
        caplog.set_level(logging.WARNING)
        answers = [await send_forged(attacker, addr, req) for addr, req in forged(leader, follower)]
        await asyncio.sleep(0.5)
        assert snapshot(brokers) == before
        assert answers == [None, None]  # closed on connect: no answer at all
        assert leader_of(brokers) is leader
        assert "127.0.0.2" in caplog.text and "dLegerPeers" in caplog.text
        # the group still works, and every member holds the five messages once
        assert (await on.send("G", b"after", queue_id=0, timeout=60)).code == ResponseCode.SUCCESS
        for b in brokers:
            await wait_until(functools.partial(_committed, b, before[0][1] + 1))
        assert await pull_all(on, "G", 0) == [b"m0", b"m1", b"m2", b"m3", b"m4", b"after"]
    finally:
        await attacker.close()
        await client.close()
        for b in brokers:
            await b.stop()


async def test_a_member_host_cannot_speak_for_another_member(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Members on 127.0.0.1, .2 and .3: the group elects and replicates (each connects from its own
    address), and a process on one member's host that names another member is refused NO_PERMISSION."""
    hosts = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
    brokers = await running(on_hosts(steady(tmp_path), hosts))
    client = RemotingClient()
    try:
        leader, _on = await settled(brokers, client)
        follower = next(b for b in brokers if b is not leader)
        third = next(b for b in brokers if b is not leader and b is not follower)
        before = snapshot(brokers)
        caplog.set_level(logging.WARNING)
        # from the third member's host, in the leader's and the follower's names
        assert third.dledger is not None
        third_host = third.dledger.settings.peers[third.dledger.settings.self_id].rpartition(":")[0]
        impostor = RemotingClient(local_host=third_host, connect_timeout=1.0)
        try:
            for addr, req in forged(leader, follower):
                assert await send_forged(impostor, addr, req) == ResponseCode.NO_PERMISSION
            # the binary push passes the same gate: its entries, in the leader's name, as its data file holds them
            assert leader.dledger is not None
            (addr, push), _vote = forged(leader, follower)
            assert isinstance(push, PushEntryRequest) and push.entry is not None
            first = push.entry.index
            binary = RemotingCommand.request(
                BINARY_PUSH_CODE,
                binary_push_fields(push, first, 1),
                encode_entry(log_entry(push.entry)),
            )
            assert (await impostor.invoke(addr, binary, 2.0)).code == ResponseCode.NO_PERMISSION
        finally:
            await impostor.close()
        await asyncio.sleep(0.5)
        assert snapshot(brokers) == before
        assert "names member" in caplog.text
    finally:
        await client.close()
        for b in brokers:
            await b.stop()


def tls_keys(certs: dict[str, Path]) -> dict[str, Any]:
    """haTls on the test CA's certificates (a listener's keys, and the CA members verify each other with)."""
    return {"ha_tls": True, **server_keys(certs), "tls_client_trust_cert_path": str(certs["ca"])}


async def test_on_ha_tls_the_channel_is_mutual_tls(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """haTls: the group elects, replicates and fails over on mutual TLS; a plaintext peer, a peer whose
    certificate another CA signed, and one presenting mqctl's client certificate (the members' CA signed it,
    but it carries no member mark), all on a member's host and in a member's name, are refused."""
    certs = write_local_ca(tmp_path / "ca")
    other = write_local_ca(tmp_path / "other")
    keys = [{**k, **tls_keys(certs)} for k in steady(tmp_path)]
    brokers: list[Broker | None] = list(await running(keys))
    client = RemotingClient(ssl=_client_context(certs))
    try:
        live = [b for b in brokers if b is not None]
        leader, _on = await settled(live, client)
        follower = next(b for b in live if b is not leader)
        before = snapshot(live)
        caplog.set_level(logging.WARNING)
        for ctx in (None, _client_context(other, trust=certs), _client_context(certs)):
            intruder = RemotingClient(ssl=ctx, connect_timeout=1.0)
            try:
                for addr, req in forged(leader, follower):
                    assert await send_forged(intruder, addr, req) is None
            finally:
                await intruder.close()
        await asyncio.sleep(0.5)
        assert snapshot(live) == before
        # fail over: the leader goes, the others elect on mutual TLS and keep every acknowledged message
        index = brokers.index(leader)
        await leader.stop()
        brokers[index] = None
        await wait_until(lambda: leader_of(brokers) is not None, 30)
        new = leader_of(brokers)
        assert new is not None and new is not leader
        on = BrokerClient(new.addr, client)
        assert (await on.send("G", b"after", queue_id=0, timeout=60)).code == ResponseCode.SUCCESS
        assert await pull_all(on, "G", 0) == [b"m0", b"m1", b"m2", b"m3", b"m4", b"after"]
    finally:
        await client.close()
        for b in brokers:
            if b is not None:
                await b.stop()


def _two_cas(tmp_path: Path) -> tuple[dict[str, Path], dict[str, Path], dict[str, str]]:
    """The CA that signs the clients and daemons, the members' own, and the member keys (by field name)."""
    own = write_member_ca(tmp_path / "members")
    member_ca = {
        "tls_member_trust_cert_path": str(own["member_ca"]),
        "tls_member_cert_path": str(own["member_cert"]),
        "tls_member_key_path": str(own["member_key"]),
    }
    return write_local_ca(tmp_path / "ca"), own, member_ca


async def test_on_a_members_own_ca_the_channel_refuses_every_certificate_the_clients_ca_signed(
    tmp_path: Path,
) -> None:
    """With `tls.member.trustCertPath` the group elects and replicates on the members' own CA, and a
    peer presenting a certificate of the CA that signs the clients is refused, the daemons' listener
    certificate included (it carries the member mark, which that CA could put on any certificate)."""
    certs, own, member_ca = _two_cas(tmp_path)
    keys = [{**k, "ha_tls": True, **server_keys(certs), **member_ca} for k in steady(tmp_path)]
    brokers = await running(keys)
    client = RemotingClient(ssl=client_context(certs))
    try:
        leader, _on = await settled(brokers, client)
        follower = next(b for b in brokers if b is not leader)
        before = snapshot(brokers)
        for cert, key in (("client_cert", "client_key"), ("server_cert", "server_key")):
            ctx = client_context({"ca": own["member_ca"]})
            ctx.load_cert_chain(certs[cert], certs[key])
            intruder = RemotingClient(ssl=ctx, connect_timeout=1.0)
            try:
                for addr, req in forged(leader, follower):
                    assert await send_forged(intruder, addr, req) is None, cert
            finally:
                await intruder.close()
        await asyncio.sleep(0.5)
        assert snapshot(brokers) == before
    finally:
        await client.close()
        for b in brokers:
            await b.stop()


def _client_context(certs: dict[str, Path], trust: dict[str, Path] | None = None) -> Any:
    """A context presenting `certs`' client certificate and trusting `trust`'s CA (default: its own)."""
    ctx = client_context(trust or certs)
    ctx.load_cert_chain(certs["client_cert"], certs["client_key"])
    return ctx


async def test_up_tls_dledger_3_runs_the_channel_on_mutual_tls(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """`mqctl up --tls --dledger 3`: every member's channel is mutual TLS (status says so), a plaintext
    connection to a DLedger port is closed unanswered, mqctl hands the leadership over with the member
    pair `up` prints (the channel admits members only), and the group fails over a SIGKILL of its leader losing nothing acknowledged."""
    ns_port = free_port()
    data = tmp_path / "data"
    ns = f"127.0.0.1:{ns_port}"
    env = {**cli_env, "MQCTL_HEART_BEAT_TIME_INTERVAL_MS": "500"}
    args = ("--tls", "--dledger", "3", "--broker-port", "0", "--no-metrics")
    async with mqctl_up(data, env, ns_port, *args) as up:
        up.env.pop("NAMESRV_ADDR")
        tls = data / "tls"
        pair = (
            "--ca",
            str(tls / "ca.pem"),
            "--cert",
            str(tls / "server.pem"),
            "--key",
            str(tls / "server.key"),
        )
        await asyncio.to_thread(up.mq, "context", "add", "local-tls", "-n", ns, *pair, "--use")

        async def led() -> list[dict[str, Any]] | None:
            rows = await asyncio.to_thread(up.mq, "broker", "ha", "status")
            roles = sorted(str(r["raft_role"]) for r in rows)
            return rows if len(rows) == 3 and roles == ["FOLLOWER", "FOLLOWER", "LEADER"] else None

        await wait_until(lambda: _true(led()), 60)
        rows = await led()
        assert rows is not None
        assert {str(r["channel"]).split(",")[0] for r in rows} == {"mutual TLS (haTls)"}
        leader = next(str(r["peers"]) for r in rows if r["raft_role"] == "FOLLOWER").split()[-1]
        peers = parse_properties((data / "store-broker-a-n0" / "broker.conf").read_text())["dLegerPeers"]
        dledger_ports = {p.split("-")[0]: int(p.rpartition(":")[2]) for p in peers.split(";")}
        with socket.create_connection(("127.0.0.1", dledger_ports[leader])) as raw:
            raw.sendall(encode_command(RemotingCommand.request(int(DLedgerRequestCode.METADATA), body=b"{}")))
            raw.settimeout(60)  # (the listener closes it once it read the first bytes: late on a loaded host)
            with contextlib.suppress(ConnectionResetError):
                assert raw.recv(1) == b""  # closed (or reset), nothing answered
        to = next(p for p in dledger_ports if p != leader)
        argv = [sys.executable, "-m", "mqctl", "broker", "ha", "transfer", "--to", to, "-o", "json"]
        done = await asyncio.to_thread(
            subprocess.run, argv, cwd=ROOT, env=up.env, capture_output=True, text=True
        )
        # the leader answered over mutual TLS: SUCCESS, or a DLedger refusal when an election raced the
        # handover (the transferee lost it: TAKE_LEADERSHIP_FAILED), never a connection or TLS failure
        assert done.returncode == 0 or ("leadership transfer" in done.stderr and "refused:" in done.stderr), (
            done.stderr
        )
        took = await failover(data, ns, ssl=_client_context({k: tls / v for k, v in _UP_CERTS.items()}))
    assert took > 0 and up.code == 0


_UP_CERTS = {"ca": "ca.pem", "client_cert": "client.pem", "client_key": "client.key"}


async def test_beyond_loopback_without_mutual_tls_the_member_warns_and_admits_no_stranger(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A member on an address off loopback (a veth pair's, inside this machine) without haTls starts, says
    at WARNING what that means, and its status says so; a VOTE from the namespace's address (no member's)
    is closed unanswered. With haTls the same member neither warns nor counts as exposed."""
    with peer_namespace() as peer:
        keys = {
            "enable_dleger_commit_log": True,
            "dleger_group": "g",
            "dleger_peers": f"n0-{peer.host_ip}:{free_port()}",
            "dleger_self_id": "n0",
            "metrics_enable": False,
        }
        caplog.set_level(logging.INFO)
        broker = await start_broker(tmp_path / "plain", **keys)
        try:
            assert broker.dledger is not None
            assert "beyond loopback and the channel is not on mutual TLS" in caplog.text
            await wait_until(lambda: broker.dledger is not None and broker.dledger.node.is_leader, 10)
            term = broker.dledger.node.m.term
            async with RemotingClient() as client:
                info = await client.invoke(
                    broker.addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO)
                )
            channel = KVTable.loads(info.body).table["dledgerChannel"]
            assert channel.startswith("plaintext beyond loopback")
            vote = VoteRequest(group="g", leader_id="n0", remote_id="n0", term=term + 1000)
            with pytest.raises(AssertionError, match="Remoting"):  # the client there sees the close
                await peer.send(broker.dledger.settings.peers["n0"], [(51001, {}, vote.encode().decode())])
            assert broker.dledger.node.m.term == term and broker.dledger.node.is_leader
            assert f"closing the connection from {peer.peer_ip}" in caplog.text
            assert broker.dledger.gate.refused == 1
        finally:
            await broker.stop()
        caplog.clear()
        certs = write_local_ca(tmp_path / "ca")
        mutual = await start_broker(tmp_path / "tls", **keys, **tls_keys(certs))
        try:
            assert mutual.dledger is not None and not mutual.dledger.exposed
            assert mutual.dledger.channel().startswith("mutual TLS")
            assert "not on mutual TLS" not in caplog.text
        finally:
            await mutual.stop()


async def _true(rows: Awaitable[object]) -> bool:
    """A look-up's answer as a condition to wait for."""
    return bool(await rows)


def _committed(b: Broker, index: int) -> bool:
    return b.dledger is not None and b.dledger.log.committed_index == index


async def test_peers_of_both_address_families_are_refused_with_a_clear_error(tmp_path: Path) -> None:
    """A member on ``[::1]`` and two on 127.0.0.1: members connect from their own address, so neither
    family reaches the other; the member was silently unreachable (its peers logged it at DEBUG only)."""
    keys = on_hosts(members(tmp_path), ["127.0.0.1", "127.0.0.1", "[::1]"])
    for k in keys:
        with pytest.raises(ConfigError, match=r"mixes IPv4 members \(n0, n1\) and IPv6 members \(n2\)"):
            await start_broker(Path(k["store_path_root_dir"]), **k)


async def test_the_channel_serves_no_entry_to_a_get_of_the_dledger_client(tmp_path: Path) -> None:
    """DLedger's GET (its client's read of an entry by index) is nothing members send each other. Served,
    it handed any process the gate admits (every local one on loopback) every message of the log, past
    the broker's ACL; it is refused as APPEND is."""
    home = tmp_path / "home"
    write_acl(home)
    broker = await start_broker(
        tmp_path / "store", acl_enable=True, rocketmq_home=str(home), **dledger_keys()
    )
    client = RemotingClient(signer=Signer(ADMIN_AK, ADMIN_SK))
    try:
        assert broker.dledger is not None
        # the master role, not the leadership alone: sends are refused (14) until its term record commits
        await wait_until(lambda: broker.config.broker_role == "SYNC_MASTER", 15)
        sent = await BrokerClient(broker.addr, client).send("Secret", b"the-secret-body")
        assert sent.code == ResponseCode.SUCCESS, sent.remark
        got = []
        async with RemotingClient() as anyone:
            for index in range(3):  # the entry holding the message among them
                ask = GetEntriesRequest(group="g", remote_id="n0", begin_index=index)
                answer = await anyone.invoke(
                    f"127.0.0.1:{broker.dledger.port}",
                    RemotingCommand.request(int(DLedgerRequestCode.GET), body=ask.encode()),
                )
                got.append(GetEntriesResponse.decode(answer.body or b"{}"))
        assert all(g.code == DLedgerResponseCode.UNSUPPORTED and not g.entries for g in got), got
    finally:
        await client.close()
        await broker.stop()


async def test_an_idle_connection_to_the_channel_is_closed_and_the_members_keep_theirs(
    tmp_path: Path,
) -> None:
    """A process on a member's host (127.0.0.1 here) that opens connections to the channel and leaves them
    silent, or stops in the middle of a frame, held them for ever (the channel had no idle timeout): a
    descriptor each, up to the connection cap. They are closed after serverChannelMaxIdleTimeSeconds,
    while the leader's own connections to its followers, busy with heartbeats, stay as they are."""
    keys = [{**k, "server_channel_max_idle_time_seconds": 2} for k in steady(tmp_path)]
    brokers = await running(keys)
    client = RemotingClient()
    idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    try:
        leader, on = await settled(brokers, client)
        assert leader.dledger is not None
        peers = leader.dledger.settings.peers
        followers = [addr for member, addr in peers.items() if member != leader.dledger.settings.self_id]
        held = {addr: leader.dledger.client.open_connection(addr) for addr in followers}
        assert all(held.values())
        for addr in peers.values():
            host, port = addr.rsplit(":", 1)
            for half_frame in (b"", encode_command(RemotingCommand.request(1, {"k": "v"}))[:6]):
                reader, writer = await asyncio.open_connection(host, int(port))
                writer.write(half_frame)
                idle.append((reader, writer))
        frame = encode_command(RemotingCommand.request(1, {"k": "v"}))
        trickles = []
        for addr in peers.values():  # a frame a byte every 0.5 s: never whole within the idle timeout
            host, port = addr.rsplit(":", 1)
            reader, writer = await asyncio.open_connection(host, int(port))
            idle.append((reader, writer))
            trickles.append(asyncio.ensure_future(_trickle(reader, writer, frame, 0.5)))
        for reader, _writer in idle:  # closed by the member: end of stream (before: never)
            assert await asyncio.wait_for(reader.read(), 60) == b""
        for trickle in trickles:
            assert await trickle < len(frame)  # the trickle's frame never became whole
        assert leader_of(brokers) is leader
        assert {addr: leader.dledger.client.open_connection(addr) for addr in followers} == held
        assert (await on.send("G", b"after", queue_id=0, timeout=60)).code == ResponseCode.SUCCESS
        assert await pull_all(on, "G", 0) == [b"m0", b"m1", b"m2", b"m3", b"m4", b"after"]
    finally:
        for _reader, writer in idle:
            writer.close()
        await client.close()
        for b in brokers:
            await b.stop()


async def _trickle(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, frame: bytes, every: float
) -> int:
    """Write ``frame`` a byte every ``every`` seconds until the peer closes; the bytes written. Nothing is
    written once the end of the stream came: the closed socket would answer it with a reset, which a
    second write reports, and the stream's read then raises it in place of the end."""
    for sent, byte in enumerate(frame):
        if reader.at_eof() or writer.is_closing() or writer.transport.get_extra_info("socket") is None:
            return sent
        try:
            writer.write(bytes([byte]))
            await writer.drain()
        except ConnectionError:
            return sent
        await asyncio.sleep(every)
    return len(frame)


async def test_a_transfer_on_a_members_own_ca_takes_the_member_pair_apart_from_the_clusters(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """With `tls.member.trustCertPath` the DLedger channel trusts the members' CA alone, and the
    NameServers and brokers the cluster's: as global flags (as documented) the member CA failed the
    NameServer's handshake, and the cluster's pair failed the channel's, so no transfer could be made."""
    certs, own, member_ca = _two_cas(tmp_path)
    namesrv = NamesrvController(namesrv_config(tmp_path, **server_keys(certs)))
    await namesrv.start()
    ns = f"127.0.0.1:{namesrv.port}"
    on_tls = {"namesrv_addr": ns, "tls_enable": True, "tls_client_trust_cert_path": str(certs["ca"])}
    keys = [{**k, "ha_tls": True, **server_keys(certs), **member_ca, **on_tls} for k in members(tmp_path)]
    brokers = await running(keys)
    try:
        await wait_until(lambda: leader_of(list(brokers)) is not None, 30)
        leader = leader_of(list(brokers))
        assert leader is not None and leader.dledger is not None
        to = next(b.config.dleger_self_id for b in brokers if b is not leader)
        member = ("--member-ca", own["member_ca"], "--member-cert", own["member_cert"])
        argv = [
            *(sys.executable, "-m", "mqctl", "--ca", str(certs["ca"]), "-n", ns),
            *("broker", "ha", "transfer", "--to", to, "--force", "-o", "json"),
            *(str(a) for a in (*member, "--member-key", own["member_key"])),
        ]
        done = await asyncio.to_thread(
            subprocess.run, argv, cwd=ROOT, env=cli_env, capture_output=True, text=True
        )
        # the leader answered: SUCCESS, or a DLedger refusal when an election raced the handover
        assert done.returncode == 0 or "refused:" in done.stderr, done.stderr
    finally:
        for b in brokers:
            await b.stop()
        await namesrv.stop()
