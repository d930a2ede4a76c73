"""Who may take a broker's place at a NameServer in protected mode (ACL off, listening beyond loopback),
registration staying open: a peer off the machine registers its own address only, may not take a place
its holder left from another host a moment ago, and a term-less squatter yields to the group's DLedger
leader. What a registration makes the NameServer keep per address goes with the address."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from pathlib import Path

import pytest

from daemon.namesrv.kvconfig import KVConfigManager
from daemon.namesrv.processor import (
    MAX_DLEDGER_HOSTS,
    MAX_DLEDGER_HOSTS_UNGUARDED,
    MAX_TERM_STEP,
    NamesrvProcessor,
)
from daemon.namesrv.routes import RouteInfoManager
from daemon.remoting.bodies import DataVersion, RegisterBrokerBody, TopicConfig, TopicConfigSerializeWrapper
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.connection import Connection, RequestDispatcher
from daemon.remoting.headers import RegisterBrokerRequestHeader, UnregisterBrokerRequestHeader
from daemon.remoting.memory import connect_pair
from tests.support.namesrv import namesrv_config

BODY = RegisterBrokerBody(
    TopicConfigSerializeWrapper({"T": TopicConfig("T", 2, 2)}, DataVersion(1, 1))
).encode()
GROUP = "10.0.0.1,10.0.0.2,10.0.0.3"


class Namesrv:
    """A NameServer's processor on 0.0.0.0 (protected mode unless told otherwise), its clock in hand,
    reached over in-memory connections from any host one names."""

    def __init__(self, tmp_path: Path, **overrides: object) -> None:
        self.now = [1_000_000]
        self.config = namesrv_config(tmp_path, **{"listen_host": "0.0.0.0", **overrides})
        self.routes = RouteInfoManager(
            clock=lambda: self.now[0], broker_expire_ms=self.config.broker_expire_ms
        )
        self.processor = NamesrvProcessor(self.config, self.routes, KVConfigManager(self.config))
        self.dispatcher = RequestDispatcher(self.processor.table())
        self.closed = asyncio.Event()

    def connect(self, host: str) -> Connection:
        def server_closed(conn: Connection) -> None:
            self.routes.on_connection_closed(conn)
            self.closed.set()

        return connect_pair(self.dispatcher, on_server_close=server_closed, hosts=(host, "10.0.0.100"))[0]

    def master(self, name: str = "b") -> str | None:
        broker = self.routes.broker_addr_table.get(name)
        return broker.broker_addrs.get(0) if broker is not None else None


async def register(
    conn: Connection,
    addr: str,
    broker_id: int = 0,
    *,
    ha: str | None = None,
    term: int | None = None,
    hosts: str | None = None,
    name: str = "b",
) -> RemotingCommand:
    host = addr.rpartition(":")[0]
    header = RegisterBrokerRequestHeader(
        name,
        addr,
        "C",
        f"{host}:10912" if ha is None else ha,
        broker_id,
        d_ledger_term=term,
        d_ledger_hosts=hosts,
    )
    return await conn.invoke(
        RemotingCommand.request(RequestCode.REGISTER_BROKER, header.to_ext_fields(), BODY), 1
    )


async def unregister(conn: Connection, addr: str, broker_id: int = 0, name: str = "b") -> int:
    header = UnregisterBrokerRequestHeader(name, addr, "C", broker_id)
    return (
        await conn.invoke(RemotingCommand.request(RequestCode.UNREGISTER_BROKER, header.to_ext_fields()), 1)
    ).code


async def test_what_a_registration_keeps_goes_with_its_address(tmp_path: Path) -> None:
    """A DLedger member's term and group's hosts were kept per broker address for good: registered and
    unregistered again and again under invented addresses, each naming a header's worth of hosts, they
    held it all. They go when the address is unregistered, expires or its connection closes, and a list
    longer than a DLedger group's is refused."""
    ns = Namesrv(tmp_path, listen_host="127.0.0.1")
    kept = ns.processor

    def held() -> list[object]:
        return [kept._terms, kept._member_hosts]

    conn = ns.connect("10.0.0.1")
    assert (await register(conn, "10.0.0.1:10911", term=3, hosts=GROUP)).code == 0
    assert await unregister(conn, "10.0.0.1:10911") == 0
    assert held() == [{}, {}]

    assert (await register(conn, "10.0.0.1:10911", term=3, hosts=GROUP)).code == 0
    ns.now[0] += ns.config.broker_expire_ms + 1
    assert [e.broker_addr for e in ns.routes.scan_not_active_brokers()] == ["10.0.0.1:10911"]
    assert held() == [{}, {}]

    assert (await register(conn, "10.0.0.1:10911", term=3, hosts=GROUP)).code == 0
    conn.close()
    await ns.closed.wait()
    assert held() == [{}, {}]

    other = ns.connect("10.0.0.2")
    many = ",".join(f"10.1.{i // 256}.{i % 256}" for i in range(MAX_DLEDGER_HOSTS_UNGUARDED + 1))
    for hosts in (many, "x" * 65):
        refused = await register(other, "10.0.0.2:10911", term=3, hosts=hosts)
        assert refused.code == ResponseCode.SYSTEM_ERROR and "dLedgerHosts" in refused.remark, refused.remark
    assert held() == [{}, {}] and ns.master() is None
    assert (await register(other, "10.0.0.2:10911", term=3, hosts=GROUP)).code == 0


async def test_a_peer_off_the_machine_registers_its_own_address_only(tmp_path: Path) -> None:
    """In protected mode a peer off the machine registering another host's address (or its own beside
    another's HA address) is refused with the protected-mode remark; its own address passes (its HA
    address on another of its NICs, brokerIP2, too), as does any from loopback, or with protected mode off."""
    ns = Namesrv(tmp_path)
    peer = ns.connect("10.0.0.9")
    for addr, ha in (("10.0.0.1:10911", "10.0.0.9:10912"),):
        refused = await register(peer, addr, ha=ha)
        assert refused.code == ResponseCode.NO_PERMISSION, refused.remark
        for named in (
            "protected mode",
            "from 10.0.0.9",
            "brokerIP1",
            "NAT",
            "aclEnable=true",
            "protectedMode=false",
        ):
            assert named in refused.remark, refused.remark
    assert ns.master() is None
    assert (await register(peer, "10.0.0.9:10911", ha="192.168.7.9:10912")).code == 0
    assert (await register(ns.connect("127.0.0.1"), "10.0.0.1:10911", name="c")).code == 0
    assert (await register(ns.connect("::ffff:10.0.0.5"), "10.0.0.5:10911", name="d")).code == 0

    opened = Namesrv(tmp_path / "open", protected_mode=False)
    assert (await register(opened.connect("10.0.0.9"), "10.0.0.1:10911")).code == 0


@pytest.mark.parametrize("leaves", ["unregisters", "disconnects", "expires"])
async def test_a_place_left_is_not_taken_from_another_host_for_a_while(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, leaves: str
) -> None:
    """A broker's restart unregisters it: a peer that registered its name and id at once (at its own
    address) kept the place over its live connection, the broker refused on its return and its topics
    gone from the routes. Another host may take a place `brokerExpireMs` after its holder left; the
    holder's host, or loopback, at once."""
    ns = Namesrv(tmp_path)
    real = ns.connect("10.0.0.1")
    assert (await register(real, "10.0.0.1:10911")).code == 0
    if leaves == "unregisters":
        assert await unregister(real, "10.0.0.1:10911") == 0
    elif leaves == "disconnects":
        real.close()
        await ns.closed.wait()
        real = ns.connect("10.0.0.1")
    else:
        ns.now[0] += ns.config.broker_expire_ms + 1
        ns.routes.scan_not_active_brokers()
    assert ns.master() is None
    squatter = ns.connect("10.0.0.9")
    with caplog.at_level(logging.WARNING, logger="daemon.namesrv.processor"):
        refused = await register(squatter, "10.0.0.9:10911")
    assert refused.code == ResponseCode.NO_PERMISSION and "brokerExpireMs" in refused.remark, refused.remark
    assert any("10.0.0.9" in r.getMessage() and "10.0.0.1" in r.getMessage() for r in caplog.records)
    assert ns.master() is None and (await register(squatter, "10.0.0.9:10911", 1)).code == 0  # a new place
    assert (await register(real, "10.0.0.1:10911")).code == 0
    assert ns.master() == "10.0.0.1:10911" and ns.routes.route_body("T", True) is not None

    assert await unregister(real, "10.0.0.1:10911") == 0
    ns.now[0] += ns.config.broker_expire_ms
    assert (await register(squatter, "10.0.0.9:10911")).code == 0  # after the window: first come


async def test_a_dledger_leader_takes_the_place_from_a_squatter_without_term(tmp_path: Path) -> None:
    """A DLedger group's new leader, on another host than the old, takes brokerId 0 within the window
    (it registers with a term, from a host the old master named); a peer that took the place term-less
    after the window (a long election gap) yields it to the group's leader, where it kept it for as long
    as its connection lived. A master/slave master (no term, no DLedger master before it) keeps its place."""
    ns = Namesrv(tmp_path)
    leader, follower = ns.connect("10.0.0.1"), ns.connect("10.0.0.2")
    assert (await register(leader, "10.0.0.1:10911", term=3, hosts=GROUP)).code == 0
    assert (await register(follower, "10.0.0.2:10911", 2, term=3, hosts=GROUP)).code == 0
    assert await unregister(leader, "10.0.0.1:10911") == 0
    squatter = ns.connect("10.0.0.9")
    assert (
        await register(squatter, "10.0.0.9:10911", term=99, hosts="10.0.0.9")
    ).code == ResponseCode.NO_PERMISSION
    assert (await register(follower, "10.0.0.2:10911", term=4, hosts=GROUP)).code == 0
    assert ns.master() == "10.0.0.2:10911"

    assert (await register(leader, "10.0.0.1:10911", 1, term=4, hosts=GROUP)).code == 0  # (the name stays)
    assert await unregister(follower, "10.0.0.2:10911") == 0
    ns.now[0] += ns.config.broker_expire_ms
    assert (await register(squatter, "10.0.0.9:10911")).code == 0
    assert ns.master() == "10.0.0.9:10911"
    assert (
        await register(ns.connect("10.0.0.8"), "10.0.0.8:10911", term=9)
    ).code == ResponseCode.NO_PERMISSION
    assert (await register(follower, "10.0.0.2:10911", term=5, hosts=GROUP)).code == 0
    assert ns.master() == "10.0.0.2:10911"

    plain = Namesrv(tmp_path / "ms")
    master, stranger = plain.connect("10.0.0.1"), plain.connect("10.0.0.9")
    assert (await register(master, "10.0.0.1:10911")).code == 0
    assert (await register(stranger, "10.0.0.9:10911", 1, term=9, hosts="10.0.0.9")).code == 0
    assert (
        await register(stranger, "10.0.0.9:10911", term=9, hosts="10.0.0.9")
    ).code == ResponseCode.NO_PERMISSION
    assert plain.master() == "10.0.0.1:10911"


async def test_places_left_are_remembered_within_bounds(tmp_path: Path) -> None:
    """A place left is remembered for `brokerExpireMs`: a peer registering and unregistering invented
    brokers by the thousand has only its last few hundred kept, and none past the window."""
    ns = Namesrv(tmp_path)
    peer = ns.connect("10.0.0.9")
    for i in range(300):
        assert (await register(peer, "10.0.0.9:10911", name=f"ghost{i}")).code == 0
        assert await unregister(peer, "10.0.0.9:10911", name=f"ghost{i}") == 0
    assert len(ns.processor._departed) == 256 and ("ghost299", 0) in ns.processor._departed
    ns.now[0] += ns.config.broker_expire_ms
    assert (await register(peer, "10.0.0.9:10911", name="last")).code == 0
    assert await unregister(peer, "10.0.0.9:10911", name="last") == 0
    assert list(ns.processor._departed) == [("last", 0)]


async def test_a_registration_from_this_machine_takes_a_place_from_an_off_host_holder(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """After a NameServer's restart a peer registered a broker's place at its own address first, and the
    real broker, registering from the NameServer's own machine, was refused for as long as the peer's
    connection lived. A registration from this machine takes the place (a WARNING says so); the peer's
    connection stays, its registration refused the place again, and its close gives nothing back."""
    ns = Namesrv(tmp_path)
    squatter = ns.connect("10.0.0.9")
    assert (await register(squatter, "10.0.0.9:10911")).code == 0
    real = ns.connect("127.0.0.1")
    with caplog.at_level(logging.WARNING, logger="daemon.namesrv.processor"):
        taken = await register(real, "127.0.0.1:10911")
    assert taken.code == 0, taken.remark
    assert ns.master() == "127.0.0.1:10911"
    assert any("takes b id 0 from 10.0.0.9:10911" in r.getMessage() for r in caplog.records)
    assert not squatter.is_closed
    assert (await register(squatter, "10.0.0.9:10911")).code == ResponseCode.NO_PERMISSION
    squatter.close()
    await ns.closed.wait()
    assert ns.master() == "127.0.0.1:10911" and ("b", 0) not in ns.processor._departed

    # a holder from this machine keeps its place against another local registration, as before
    assert (await register(ns.connect("127.0.0.1"), "127.0.0.2:10911")).code == ResponseCode.NO_PERMISSION
    opened = Namesrv(tmp_path / "open", protected_mode=False)
    assert (await register(opened.connect("10.0.0.9"), "10.0.0.9:10911")).code == 0
    assert (await register(opened.connect("127.0.0.1"), "127.0.0.1:10911")).code == ResponseCode.NO_PERMISSION


async def test_refused_registrations_warn_at_a_bounded_rate(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Each REGISTER_BROKER refused for a place held over a live connection logged a WARNING: a peer
    repeating one filled the log. They go through the place refusals' rate-limited gate."""
    ns = Namesrv(tmp_path)
    assert (await register(ns.connect("10.0.0.1"), "10.0.0.1:10911")).code == 0
    peer = ns.connect("10.0.0.9")
    with caplog.at_level(logging.WARNING, logger="daemon.namesrv.processor"):
        for _ in range(50):
            assert (await register(peer, "10.0.0.9:10911")).code == ResponseCode.NO_PERMISSION
    assert 1 <= len([r for r in caplog.records if "holds that place" in r.getMessage()]) < 10


async def test_a_term_claim_far_above_the_held_term_takes_no_place(tmp_path: Path) -> None:
    """A DLedger member that registered a term of 2^62 won brokerId 0 for ever (no real election reaches
    it): a claim more than `MAX_TERM_STEP` above the holder's term is refused; one within it passes."""
    ns = Namesrv(tmp_path)
    leader, member = ns.connect("10.0.0.1"), ns.connect("10.0.0.2")
    assert (await register(leader, "10.0.0.1:10911", term=3, hosts=GROUP)).code == 0
    far = await register(member, "10.0.0.2:10911", term=3 + MAX_TERM_STEP + 1, hosts=GROUP)
    assert far.code == ResponseCode.NO_PERMISSION and ns.master() == "10.0.0.1:10911"
    assert (await register(member, "10.0.0.2:10911", term=3 + MAX_TERM_STEP, hosts=GROUP)).code == 0
    assert ns.master() == "10.0.0.2:10911"


async def test_the_dledger_hosts_cap_is_a_handful_only_off_the_machine(tmp_path: Path) -> None:
    """A large or multi-homed DLedger group registering from this machine, or with protected mode off,
    was refused by the cap meant for peers off the machine in protected mode."""
    many = ",".join(f"10.1.0.{i}" for i in range(MAX_DLEDGER_HOSTS + 1))
    ns = Namesrv(tmp_path)
    refused = await register(ns.connect("10.0.0.1"), "10.0.0.1:10911", term=3, hosts=many)
    assert refused.code == ResponseCode.SYSTEM_ERROR and "dLedgerHosts" in refused.remark
    assert (await register(ns.connect("127.0.0.1"), "127.0.0.1:10911", term=3, hosts=many)).code == 0
    opened = Namesrv(tmp_path / "open", protected_mode=False)
    assert (await register(opened.connect("10.0.0.1"), "10.0.0.1:10911", term=3, hosts=many)).code == 0


async def test_a_restart_reserves_each_known_place_for_its_host(tmp_path: Path) -> None:
    """A NameServer's restart forgot who held what: a peer off the machine that registered a broker's
    place a second in kept it from the real broker. The places and their hosts are kept in the data
    directory, and at start each is reserved for its host for `brokerExpireMs`."""
    before = Namesrv(tmp_path)
    assert (await register(before.connect("10.0.0.1"), "10.0.0.1:10911")).code == 0
    assert (await register(before.connect("10.0.0.2"), "10.0.0.2:10911", 1)).code == 0
    await before.processor.places.close()

    ns = Namesrv(tmp_path)
    ns.processor.reserve_known_places()
    squatter = ns.connect("10.0.0.9")
    for broker_id in (0, 1):
        refused = await register(squatter, "10.0.0.9:10911", broker_id)
        assert refused.code == ResponseCode.NO_PERMISSION and "brokerExpireMs" in refused.remark, (
            refused.remark
        )
    assert (await register(ns.connect("10.0.0.1"), "10.0.0.1:10911")).code == 0
    ns.now[0] += ns.config.broker_expire_ms
    assert (await register(squatter, "10.0.0.9:10911", 1)).code == 0  # after the window: first come
    await ns.processor.places.close()
    assert {(r["brokerId"], r["host"]) for r in json.loads(ns.processor.places.path.read_text())} == {
        (0, "10.0.0.1"),
        (1, "10.0.0.9"),
    }


async def test_a_broker_address_given_as_a_name_resolving_to_the_peer_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`brokerIP1` as a host name (k8s, compose) was compared as text with the peer's IP and refused. The
    name is resolved (off the loop, kept a while) and passes when it stands for the peer; a name that
    does not resolve, or stands for another host, is refused saying so."""
    looked: list[str] = []

    async def getaddrinfo(host: str, *args: object, **kwargs: object) -> list[tuple[object, ...]]:
        looked.append(host)
        known = {"broker-a.svc": "10.0.0.9", "other.svc": "10.0.0.1"}
        if host not in known:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (known[host], 0))]

    monkeypatch.setattr(asyncio.get_running_loop(), "getaddrinfo", getaddrinfo)
    ns = Namesrv(tmp_path)
    peer = ns.connect("10.0.0.9")
    assert (await register(peer, "broker-a.svc:10911")).code == 0
    assert (await register(peer, "broker-a.svc:10911")).code == 0
    assert looked == ["broker-a.svc"]  # (kept a while)
    for name, says in (("nowhere.svc", "does not resolve"), ("other.svc", "not resolving to that peer")):
        refused = await register(peer, f"{name}:10911", 1)
        assert refused.code == ResponseCode.NO_PERMISSION and says in refused.remark, refused.remark
