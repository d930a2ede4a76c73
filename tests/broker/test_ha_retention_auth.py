"""Who may have a slave delete its log as its master's expired records (docs/replication.md §who-says-so):
under haTls only a master whose HA port, after its mutual-TLS handshake proves it a member, describes the
same log as its broker port; without haTls only a master on this machine's loopback. An impostor that an
open NameServer lists as the master can show the real master's identity, history and a large first
offset: the slave's records are then set aside, kept, never deleted."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import ssl
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from daemon.broker.ha import HASlave, MasterLog
from daemon.remoting.bodies import KVTable
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.tls import write_local_ca
from store.config import SYNC_MASTER, StoreConfig
from store.ha import DESCRIBE, FRAME_HEADER, encode_report
from tests.broker.test_ha import FILE, SMALL, Group, master_and_slave, scrape, start_slave
from tests.broker.test_ha_mark import TOPIC, everything, fixed_ports, runtime, send_common
from tests.broker.test_ha_retention import served, write_then_expire_all_but_the_newest_file
from tests.broker.test_ha_retention_trust import impostor, set_aside
from tests.support.broker import replicated, start_broker
from tests.support.cli import RunCli
from tests.support.hostile import honest_with, hostile
from tests.support.namesrv import Namesrv
from tests.support.waiting import wait_until


def ha_tls(certs: dict[str, Path]) -> dict[str, Any]:
    """haTls on the test CA's member certificate (`write_local_ca` marks the server's)."""
    return {
        "ha_tls": True,
        "tls_server_mode": "permissive",
        "tls_server_cert_path": str(certs["server_cert"]),
        "tls_server_key_path": str(certs["server_key"]),
        "tls_server_trust_cert_path": str(certs["ca"]),
        "tls_test_mode_enable": False,
    }


@contextlib.asynccontextmanager
async def members(tmp_path: Path, **master: Any) -> AsyncIterator[tuple[Group, dict[str, Any]]]:
    """A NameServer, a master and its slave replicating on mutual TLS (haTls); the config both share."""
    keys = ha_tls(write_local_ca(tmp_path / "certs"))
    async with master_and_slave(tmp_path, slave=keys, **keys, **master) as g:
        yield g, keys


@contextlib.asynccontextmanager
async def no_member() -> AsyncIterator[str]:
    """An HA port that is no member's: it closes every connection at once (no TLS handshake completes)."""

    async def close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    server = await asyncio.start_server(close, "127.0.0.1", 0)
    try:
        yield f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        await server.wait_closed()


async def only_copy(g: Group) -> tuple[str, str]:
    """40 acknowledged records sent and copied by the slave, then the slave stopped; the master's identity
    and incarnations (which anyone may read from its runtime info)."""
    await send_common(g, 40, "only")
    await replicated(g.master, g.slave)
    await g.slave.stop()
    return g.master.store.identity, ";".join(map(str, g.master.store.incarnations))


async def nothing_moves(
    g: Group,
    tmp_path: Path,
    keys: dict[str, Any],
    shown: tuple[str, str],
    ha_addr: str,
    logged: Callable[[], bool],
) -> None:
    """The slave restarted with an impostor as its NameServer and master, which shows ``shown`` (the real
    identity and incarnations), a log starting far past the slave's, and the HA port ``ha_addr``: once
    ``logged`` and asked again, it still holds and serves its 40, and has set none aside."""
    fake = impostor([64 * FILE], 65 * FILE, *shown, ha_addr=ha_addr)
    with hostile(honest_with(fake)) as peer:  # type: ignore[arg-type]
        g.slave = await start_slave(tmp_path / "slave", peer.addr, **keys)
        await wait_until(logged)
        await wait_until(lambda: peer.requests.count(RequestCode.GET_BROKER_RUNTIME_INFO) >= 4)
        assert g.slave.store.min_phy_offset == 0
        assert sum(len(q) for q in await everything(g, g.slave)) == 40
        await g.slave.stop()
    assert set_aside(tmp_path) == []


@pytest.mark.slow
async def test_under_ha_tls_an_impostor_that_is_no_member_cannot_make_a_slave_delete_the_only_copy(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The master is lost; its slave (haTls) holds the only copy of 40 acknowledged records. What its
    NameServer now lists as the master shows the lost master's identity and incarnations (anyone may read
    them) and says its log starts far past the slave's; its HA port completes no member's handshake. The
    slave deletes nothing and sets nothing aside, asks again, and serves its 40 meanwhile: before, the
    broker port's word alone had them deleted."""
    async with members(tmp_path) as (g, keys):
        shown = await only_copy(g)
        await g.master.stop()
        async with no_member() as ha_addr:
            await nothing_moves(
                g,
                tmp_path,
                keys,
                shown,
                ha_addr,
                lambda: "no member's handshake completed at its HA" in caplog.text,
            )


@pytest.mark.slow
async def test_under_ha_tls_an_impostors_broker_port_beside_the_real_members_ha_port_moves_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The impostor lists itself with the real master's HA port (a member's, whose handshake passes):
    that port describes the real log, which starts at 0, not where the impostor's broker port says. The
    slave deletes nothing and sets nothing aside, asks again, and serves its 40 meanwhile. (Its host stays
    listed as a slave at the real NameServer, so the member's gate admits it.)"""
    async with members(tmp_path) as (g, keys):
        shown = await only_copy(g)
        await Namesrv(g.namesrv, g.client).register({}, broker_addr="127.0.0.1:1", broker_id=2)
        assert g.master.ha_master is not None
        ha_addr = f"127.0.0.1:{g.master.ha_master.port}"
        await nothing_moves(
            g, tmp_path, keys, shown, ha_addr, lambda: "describe different logs" in caplog.text
        )


@contextlib.asynccontextmanager
async def member_without_description(keys: dict[str, Any]) -> AsyncIterator[str]:
    """An HA port with a member's certificate that closes at the description request, as an mqctl master
    from before it does (a negative report)."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(keys["tls_server_cert_path"], keys["tls_server_key_path"])
    ctx.load_verify_locations(keys["tls_server_trust_cert_path"])
    ctx.verify_mode = ssl.CERT_REQUIRED

    async def close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            await reader.readexactly(8)
        writer.close()

    server = await asyncio.start_server(close, "127.0.0.1", 0, ssl=ctx)
    try:
        yield f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        await server.wait_closed()


@pytest.mark.slow
async def test_under_ha_tls_a_member_that_gives_no_description_has_the_records_set_aside_not_deleted(
    tmp_path: Path,
) -> None:
    """A member's HA port completes the handshake and closes at the description request (an mqctl master
    from before it, in a rolling upgrade): its broker port's word that its log starts past the slave's is
    not confirmed, so the slave's 40 are set aside at ERROR, kept, not deleted, and its log begins again
    there."""
    async with members(tmp_path) as (g, keys):
        shown = await only_copy(g)
        await g.master.stop()
        async with member_without_description(keys) as ha_addr:
            fake = impostor([64 * FILE], 65 * FILE, *shown, ha_addr=ha_addr)
            with hostile(honest_with(fake)) as peer:  # type: ignore[arg-type]
                g.slave = await start_slave(tmp_path / "slave", peer.addr, **keys)
                await wait_until(lambda: g.slave.store.min_phy_offset == 64 * FILE)
                await g.slave.stop()
    assert set_aside(tmp_path) == [40]


@pytest.mark.slow
async def test_under_ha_tls_a_slave_behind_its_masters_retention_deletes_what_the_member_confirmed(
    tmp_path: Path, cli: RunCli
) -> None:
    """The real master, behind whose retention its slave fell, confirms over its HA port (mutual TLS) what
    its broker port said: the slave's records go as the master's did, none set aside, and it catches up."""
    fixed = fixed_ports()
    async with members(tmp_path, **fixed) as (g, keys):
        await send_common(g, 40, "old")
        await replicated(g.master, g.slave)
        await g.slave.stop()
        await write_then_expire_all_but_the_newest_file(g, tmp_path / "master", cli)
        g.master = await start_broker(
            tmp_path / "master", **{**SMALL, "namesrv_addr": g.ns_addr, **keys, **fixed}
        )
        g.slave = await start_slave(tmp_path / "slave", g.ns_addr, **keys)
        await send_common(g, 8, "after")
        await replicated(g.master, g.slave)
        assert set_aside(tmp_path) == []
        assert g.slave.store.min_phy_offset == g.master.store.min_phy_offset > 0
        assert await served(g, g.slave) == await served(g, g.master)


async def test_without_ha_tls_only_a_master_on_this_machines_loopback_is_taken_at_its_word() -> None:
    """Nothing authenticates a master's broker port without haTls: one beyond this machine saying its log
    starts past the slave's has the slave's records set aside rather than deleted; one on loopback (this
    machine's own user separation) is taken at its word. (No traffic: the decision alone.)"""
    store = SimpleNamespace(replica_master="ab" * 16)
    slave = HASlave(StoreConfig(), store)  # type: ignore[arg-type]
    beyond = MasterLog(64 * FILE, "ab" * 16, addr="192.0.2.7:10911")
    assert "nothing authenticates" in await slave._why_not_delete(beyond)
    assert await slave._why_not_delete(dataclasses.replace(beyond, addr="127.0.0.1:10911")) == ""
    assert "does not name" in await slave._why_not_delete(dataclasses.replace(beyond, identity="cd" * 16))


@pytest.mark.slow
async def test_a_description_asked_at_the_ha_port_is_never_counted_as_a_slave(tmp_path: Path) -> None:
    """A SYNC_MASTER (haTls) whose slave is stopped, and a member's connection to its HA port that has
    begun the description's request (a report of -1) and waits: the master shows no slave
    (``haSlaveCount``, ``haSlaves``, /metrics) and answers a send SLAVE_NOT_AVAILABLE at once. Counted from
    its handshake, it was a slave until it closed: a send waited on it for ``slaveTimeout`` and got
    FLUSH_SLAVE_TIMEOUT. The rest of the request then has the log described, and the connection closed. Nor
    is it asked which registered slave it is (every NameServer asked for a connection that is none)."""
    async with members(tmp_path, broker_role=SYNC_MASTER) as (g, _keys):
        ha, settings = g.master.ha_master, g.master.ha_tls_settings
        assert ha is not None and settings is not None and ha.identify is not None
        await wait_until(lambda: bool(ha.slaves))
        await g.slave.stop()
        await wait_until(lambda: not ha.connections)
        identify, identified = ha.identify, []

        async def counted(addr: str) -> tuple[str, int] | None:
            identified.append(addr)
            return await identify(addr)

        ha.identify = counted
        # the stopped slave unregistered: a host the gate admits, as the describing slave's is
        await Namesrv(g.namesrv, g.client).register({}, broker_addr="127.0.0.1:1", broker_id=2)
        ctx = settings.client_context(verify=True)
        reader, writer = await asyncio.open_connection("127.0.0.1", ha.port, ssl=ctx)
        try:
            request = encode_report(DESCRIBE)
            writer.write(request[:4])
            await writer.drain()
            await wait_until(lambda: len(ha.connections) == 1)
            table = await runtime(g, g.master)
            assert (table["haSlaveCount"], table["haSlaves"]) == ("0", "")
            text = await asyncio.to_thread(scrape, g.master.metrics_port)
            assert 'rocketmq_ha_connected_slaves{broker="broker-a",cluster="DefaultCluster"} 0.0' in text
            sent = await g.on(g.master).send(TOPIC, b"alone", queue_id=0)
            assert sent.code == ResponseCode.SLAVE_NOT_AVAILABLE, sent.remark
            assert identified == []
            writer.write(request[4:])
            await writer.drain()
            offset, size = FRAME_HEADER.unpack(await reader.readexactly(FRAME_HEADER.size))
            assert offset == DESCRIBE
            described = KVTable.loads(await reader.readexactly(size)).table
            assert described["haStoreIdentity"] == g.master.store.identity
            assert await reader.read() == b""
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
