"""TLS on every listener, with real daemons on 127.0.0.1: permissive serves plaintext and TLS at once,
enforcing refuses plaintext, mutual TLS refuses a client without a trusted certificate, a wrong CA fails
mqctl with its exit code and one line, brokers register and replicate over TLS, and `up --tls` plus a
context with `--ca` make a working cluster in two commands."""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from daemon.broker.broker import Broker
from daemon.broker.config import load_broker_config
from daemon.config import ALL_KEYS_FIELD, ConfigError
from daemon.namesrv.controller import NamesrvController
from daemon.remoting.bodies import ClusterInfo
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.errors import RemotingCommandError, RemotingConnectError, RemotingTlsError
from daemon.remoting.frame import encode_command
from daemon.remoting.tls import (
    cert_pem,
    default_sans,
    key_pem,
    make_certificate,
    new_key,
    write_local_ca,
    write_member_ca,
    write_pem,
)
from daemon.safe_config import refuse_unsafe
from mqctl.errors import ConnectError, NotFoundError, TlsError, UsageError
from store.config import SLAVE
from store.ha import encode_report
from tests.daemons import LocalCluster, local_cluster
from tests.support.broker import BrokerClient, broker_config, replicated, start_broker
from tests.support.cli import RunCli
from tests.support.namesrv import namesrv_config
from tests.support.netns import peer_namespace
from tests.support.ports import free_port
from tests.support.up import mqctl_up
from tests.support.waiting import wait_until


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_local_ca(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def other_ca(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A second CA: its certificates are not trusted by the first one's servers, and the other way round."""
    return write_local_ca(tmp_path_factory.mktemp("other"))


def server_keys(certs: dict[str, Path], mode: str = "enforcing", **more: Any) -> dict[str, Any]:
    """A listener's `tls.*` settings (by field name) on the test CA's server certificate."""
    return {
        "tls_server_mode": mode,
        "tls_server_cert_path": str(certs["server_cert"]),
        "tls_server_key_path": str(certs["server_key"]),
        "tls_server_trust_cert_path": str(certs["ca"]),
        "tls_test_mode_enable": False,
        **more,
    }


def client_context(certs: dict[str, Path] | None, *, client_cert: bool = False) -> ssl.SSLContext:
    """A verifying context for the CA of `certs` (None: trust anything, as for a test-mode certificate)."""
    ctx = ssl.create_default_context(cafile=str(certs["ca"]) if certs else None)
    if certs is None:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    elif client_cert:
        ctx.load_cert_chain(certs["client_cert"], certs["client_key"])
    return ctx


async def cluster_info(addr: str, ssl_context: ssl.SSLContext | None) -> ClusterInfo:
    async with RemotingClient(ssl=ssl_context) as client:
        response = await client.invoke_checked(
            addr, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO, {}), 5.0
        )
    return ClusterInfo.loads(response.body)


async def start_namesrv(tmp_path: Path, **overrides: Any) -> NamesrvController:
    namesrv = NamesrvController(namesrv_config(tmp_path, **overrides))
    await namesrv.start()
    return namesrv


# ------------------------------------------------------------------------------------------ modes


async def test_permissive_default_serves_plaintext_and_tls_at_once(tmp_path: Path) -> None:
    """The default (permissive, test mode) answers a plaintext and a TLS client on one port, concurrently;
    the test-mode certificate is made only when the first TLS client arrives."""
    namesrv = await start_namesrv(tmp_path)
    addr = f"127.0.0.1:{namesrv.port}"
    try:
        await cluster_info(addr, None)
        assert namesrv.server.tls is not None and namesrv.server.tls._context is None  # nobody paid for it
        plain, tls = RemotingClient(), RemotingClient(ssl=client_context(None))
        request = lambda: RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO, {})  # noqa: E731
        answers = await asyncio.gather(
            *(c.invoke(addr, request(), 5.0) for c in (plain, tls, plain, tls) for _ in range(5))
        )
        assert {a.code for a in answers} == {ResponseCode.SUCCESS}
        ciphers = {c.peer: c._transport.get_extra_info("cipher") for c in namesrv.server.connections}  # type: ignore[union-attr]
        assert sorted(cipher is not None for cipher in ciphers.values()) == [False, True], ciphers
        await plain.close()
        await tls.close()
    finally:
        await namesrv.stop()


async def test_enforcing_refuses_plaintext(tmp_path: Path, certs: dict[str, Path]) -> None:
    namesrv = await start_namesrv(tmp_path, **server_keys(certs))
    addr = f"127.0.0.1:{namesrv.port}"
    try:
        with pytest.raises(RemotingConnectError, match="connection closed"):
            await cluster_info(addr, None)
        assert namesrv.server.tls_refused == 1
        await cluster_info(addr, client_context(certs))  # TLS with the right CA: served
        assert not namesrv.server.connections  # (the refused one left nothing behind)
    finally:
        await namesrv.stop()


async def test_disabled_closes_a_tls_handshake(tmp_path: Path) -> None:
    namesrv = await start_namesrv(tmp_path, tls_server_mode="disabled")
    try:
        with pytest.raises(RemotingConnectError):
            await cluster_info(f"127.0.0.1:{namesrv.port}", client_context(None))
        await cluster_info(f"127.0.0.1:{namesrv.port}", None)
    finally:
        await namesrv.stop()


async def test_a_client_of_another_ca_fails_the_handshake(
    tmp_path: Path, certs: dict[str, Path], other_ca: dict[str, Path]
) -> None:
    namesrv = await start_namesrv(tmp_path, **server_keys(certs))
    try:
        with pytest.raises(RemotingTlsError, match="not trusted"):
            await cluster_info(f"127.0.0.1:{namesrv.port}", client_context(other_ca))
    finally:
        await namesrv.stop()


async def test_mutual_tls_refuses_a_client_without_a_trusted_certificate(
    tmp_path: Path, certs: dict[str, Path], other_ca: dict[str, Path]
) -> None:
    namesrv = await start_namesrv(tmp_path, **server_keys(certs, tls_server_need_client_auth="require"))
    addr = f"127.0.0.1:{namesrv.port}"
    try:
        with pytest.raises(RemotingConnectError):  # no certificate at all
            await cluster_info(addr, client_context(certs))
        foreign = client_context(certs)
        foreign.load_cert_chain(other_ca["client_cert"], other_ca["client_key"])
        with pytest.raises(RemotingConnectError):  # one another CA signed
            await cluster_info(addr, foreign)
        assert namesrv.server.tls_refused >= 2
        await cluster_info(addr, client_context(certs, client_cert=True))
    finally:
        await namesrv.stop()


# ------------------------------------------------------------------------------------------ config


def test_keys_load_from_broker_conf_tls_config_file_and_env(
    tmp_path: Path, certs: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    tls_file = tmp_path / "tls.properties"
    tls_file.write_text(
        f"tls.server.need.client.auth=require\ntls.server.trustCertPath={certs['ca']}\n"
        "tls.server.mode=disabled\n"  # 4.9.8 reads neither the mode nor tls.enable from this file
    )
    conf = tmp_path / "broker.conf"
    conf.write_text(
        f"brokerName=broker-a\ntls.server.mode=enforcing\ntls.test.mode.enable=false\n"
        f"tls.server.certPath={certs['server_cert']}\ntls.server.keyPath={certs['server_key']}\n"
        f"tls.config.file={tls_file}\n"
    )
    monkeypatch.setenv("MQCTL_TLS_ENABLE", "true")
    config = load_broker_config(conf, {})
    settings = config.tls_settings()
    assert (settings.mode, settings.need_client_auth, settings.server_trust) == (
        "enforcing",
        "require",
        str(certs["ca"]),
    )
    assert config.tls_enable and not settings.test_mode
    tls_file.write_text("tls.server.need.client.auth=require\n")
    with pytest.raises(ConfigError, match="trustCertPath"):
        config.tls_settings()
    config.tls_server_mode = "strict"
    with pytest.raises(ConfigError, match="disabled, permissive, enforcing"):
        config.tls_settings()


def test_ha_tls_without_a_ca_to_verify_slaves_is_refused_at_start(
    tmp_path: Path, certs: dict[str, Path]
) -> None:
    keys = server_keys(certs, mode="permissive")
    del keys["tls_server_trust_cert_path"]
    with pytest.raises(ConfigError, match="trustCertPath"):
        Broker(broker_config(tmp_path, ha_tls=True, **keys))


async def test_a_key_that_does_not_load_stops_the_daemon_at_start(
    tmp_path: Path, certs: dict[str, Path]
) -> None:
    """A key that is not the certificate's (or a wrong keyPassword) loaded only when the first TLS client
    came: an enforcing NameServer started, listened, and closed every client's handshake."""
    keys = server_keys(certs, tls_server_key_path=str(certs["client_key"]))
    with pytest.raises(ConfigError, match=r"tls\.server\.certPath .* do not load"):
        namesrv = await start_namesrv(tmp_path, **keys)
        await namesrv.stop()


def test_remote_config_updates_cannot_touch_tls() -> None:
    for key in ("tls.server.mode", "tls.server.trustCertPath", "tls.test.mode.enable", "haTls"):
        with pytest.raises(RemotingCommandError, match="black list"):
            refuse_unsafe({key: "disabled"}, {})


# ------------------------------------------------------------------------------------------ brokers


async def test_broker_registers_over_tls_and_serves_tls_only(tmp_path: Path, certs: dict[str, Path]) -> None:
    namesrv = await start_namesrv(tmp_path, **server_keys(certs))
    ns = f"127.0.0.1:{namesrv.port}"
    trusted = {"tls_enable": True, "tls_client_trust_cert_path": str(certs["ca"])}
    broker = await start_broker(tmp_path / "store", namesrv_addr=ns, **server_keys(certs), **trusted)
    try:
        info = await cluster_info(ns, client_context(certs))
        assert info.broker_addr_table["broker-a"].broker_addrs == {0: broker.addr}
        async with RemotingClient(ssl=client_context(certs)) as client:
            sent = await BrokerClient(broker.addr, client).send("TlsTopic", b"over tls")
            assert sent.code == ResponseCode.SUCCESS, sent.remark
        with pytest.raises(RemotingConnectError):
            await cluster_info(broker.addr, None)
    finally:
        await broker.stop()
        await namesrv.stop()


@pytest.mark.slow
async def test_slave_replicates_over_mutual_tls_and_a_plaintext_slave_gets_nothing(
    tmp_path: Path, certs: dict[str, Path]
) -> None:
    namesrv = await start_namesrv(tmp_path)
    ns = f"127.0.0.1:{namesrv.port}"
    ha = {
        "ha_tls": True,
        "ha_listen_port": 0,
        "ha_send_heartbeat_interval": 500,
        "namesrv_addr": ns,
        **server_keys(certs, mode="permissive"),
    }
    master = await start_broker(tmp_path / "master", **ha)
    slave = await start_broker(tmp_path / "slave", broker_id=1, broker_role=SLAVE, **ha)
    try:
        await _sent_and_replicated(master, slave, "HaTlsTopic", 20)
        assert master.ha_master is not None and master.ha_master.connections
        # a raw plaintext "slave" reporting offset 0 (which pulled a whole CommitLog before): nothing back
        reader, writer = await asyncio.open_connection("127.0.0.1", master.ha_master.port)
        writer.write(encode_report(0))
        await writer.drain()
        assert await asyncio.wait_for(reader.read(1 << 16), 5.0) == b""
        writer.close()
        # mqctl's client certificate (the members' CA signed it, but it is no member's) from the slave's
        # host read the CommitLog, bodies included, past the broker's ACL: its handshake now fails
        refused = master.ha_master.refused
        assert await _ha_read(master.ha_master.port, client_context(certs, client_cert=True)) == b""
        assert master.ha_master.refused == refused + 1
    finally:
        await slave.stop()
        await master.stop()
        await namesrv.stop()


async def _sent_and_replicated(master: Broker, slave: Broker, topic: str, count: int) -> None:
    """``count`` messages sent to the master, and the slave caught up with them."""
    async with RemotingClient() as client:
        for i in range(count):
            sent = await BrokerClient(master.addr, client).send(topic, b"m%d" % i)
            assert sent.code == ResponseCode.SUCCESS, sent.remark
    await replicated(master, slave)


async def _ha_read(port: int, ctx: ssl.SSLContext) -> bytes:
    """What a TLS "slave" reporting offset 0 to the HA port is sent (b"": closed, or refused in its handshake)."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
    except (OSError, ssl.SSLError):
        return b""
    try:
        writer.write(encode_report(0))
        await writer.drain()
        return await asyncio.wait_for(reader.read(1 << 16), 5.0)
    except (OSError, ssl.SSLError):
        return b""
    finally:
        writer.close()


def test_ha_tls_on_certificates_without_the_member_mark_warns_that_clients_pass(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A set issued before member certificates were marked cannot tell a client's certificate from a
    member's: the broker starts (its members keep replicating) and says so, naming the fix; a marked set
    admits members only."""
    ca_key, key = new_key(), new_key()
    ca = make_certificate(ca_key, "an older CA", issuer=None, sans=[], ca=True)
    server = make_certificate(key, "an older server", issuer=(ca, ca_key), sans=default_sans(), ca=False)
    write_pem(tmp_path / "ca.pem", cert_pem(ca), private=False)
    write_pem(tmp_path / "server.pem", cert_pem(server), private=False)
    write_pem(tmp_path / "server.key", key_pem(key))
    older = {
        "ca": tmp_path / "ca.pem",
        "server_cert": tmp_path / "server.pem",
        "server_key": tmp_path / "server.key",
    }
    caplog.set_level(logging.WARNING)
    broker = Broker(broker_config(tmp_path / "older", ha_tls=True, **server_keys(older)))
    assert broker.ha_tls_settings is not None and not broker.ha_tls_settings.members_only
    assert "carries no member mark (OU=mqctl-member)" in caplog.text and "mqctl tls init" in caplog.text
    marked = Broker(
        broker_config(tmp_path / "marked", ha_tls=True, **server_keys(write_local_ca(tmp_path / "m")))
    )
    assert marked.ha_tls_settings is not None and marked.ha_tls_settings.members_only


def member_keys(members: dict[str, Path]) -> dict[str, Any]:
    """haTls on a CA of the members' own (`write_member_ca`), by field name."""
    return {
        "ha_tls": True,
        "tls_member_trust_cert_path": str(members["member_ca"]),
        "tls_member_cert_path": str(members["member_cert"]),
        "tls_member_key_path": str(members["member_key"]),
    }


def test_a_member_pair_the_member_ca_did_not_sign_stops_the_broker_at_start(
    tmp_path: Path, certs: dict[str, Path]
) -> None:
    """With `tls.member.trustCertPath` each member verifies the other against it alone: a member pair it
    did not sign (here the clients' CA's server certificate, marked as it is) would fail every
    handshake, so the broker says so at start; the member CA's own pair passes, no mark needed."""
    members = write_member_ca(tmp_path / "members")
    wrong = {**member_keys(members), "tls_member_cert_path": str(certs["server_cert"])}
    wrong["tls_member_key_path"] = str(certs["server_key"])
    with pytest.raises(ConfigError, match=r"tls\.member\.trustCertPath .* do not make a handshake"):
        Broker(broker_config(tmp_path / "wrong", **server_keys(certs), **wrong))
    broker = Broker(broker_config(tmp_path / "right", **server_keys(certs), **member_keys(members)))
    assert broker.ha_tls_settings is not None and broker.ha_tls_settings.member_trust


@pytest.mark.slow
async def test_members_of_their_own_ca_replicate_and_refuse_every_certificate_the_clients_ca_signed(
    tmp_path: Path, certs: dict[str, Path]
) -> None:
    """An operator whose CA marks nothing gives the members a CA of their own: the HA port then admits
    the certificates it signs (unmarked) and refuses every certificate of the clients' CA, the daemons'
    marked server certificate too, as the mark alone could not (that CA signs both)."""
    members = write_member_ca(tmp_path / "members")
    namesrv = await start_namesrv(tmp_path)
    ha = {
        "ha_listen_port": 0,
        "ha_send_heartbeat_interval": 500,
        "namesrv_addr": f"127.0.0.1:{namesrv.port}",
        **server_keys(certs, mode="permissive"),
        **member_keys(members),
    }
    master = await start_broker(tmp_path / "master", **ha)
    slave = await start_broker(tmp_path / "slave", broker_id=1, broker_role=SLAVE, **ha)
    try:
        await _sent_and_replicated(master, slave, "MemberCaTopic", 5)
        assert master.ha_master is not None
        for cert, key in (("client_cert", "client_key"), ("server_cert", "server_key")):
            ctx = ssl.create_default_context(cafile=str(members["member_ca"]))
            ctx.check_hostname = False
            ctx.load_cert_chain(certs[cert], certs[key])
            assert await _ha_read(master.ha_master.port, ctx) == b"", cert
        member = ssl.create_default_context(cafile=str(members["member_ca"]))
        member.check_hostname = False
        member.load_cert_chain(members["member_cert"], members["member_key"])
        assert await _ha_read(master.ha_master.port, member) != b""
    finally:
        await slave.stop()
        await master.stop()
        await namesrv.stop()


def test_tls_init_member_ca_writes_a_separate_ca(cli: RunCli, tmp_path: Path) -> None:
    made = cli("tls", "init", str(tmp_path / "pki"), "--member-ca", "-o", "json")
    assert made.code == 0, made.stderr
    files = {row["role"]: Path(row["file"]) for row in made.json()}
    assert {"ca", "server_cert", "member_ca", "member_cert", "member_key"} <= files.keys()
    assert (files["member_key"].stat().st_mode & 0o077) == 0
    from cryptography import x509

    member = x509.load_pem_x509_certificate(files["member_cert"].read_bytes())
    ca = x509.load_pem_x509_certificate(files["member_ca"].read_bytes())
    member.verify_directly_issued_by(ca)
    assert member.issuer != x509.load_pem_x509_certificate(files["ca"].read_bytes()).subject


@pytest.mark.slow
async def test_ha_tls_refuses_a_slave_whose_certificate_another_ca_signed(
    tmp_path: Path, certs: dict[str, Path], other_ca: dict[str, Path]
) -> None:
    ha = {"ha_tls": True, "ha_listen_port": 0, **server_keys(certs, mode="permissive")}
    master = await start_broker(tmp_path / "master", **ha)
    assert master.ha_master is not None
    addr = f"127.0.0.1:{master.ha_master.port}"
    foreign = {
        **ha,
        **server_keys(other_ca, mode="permissive"),
        "tls_client_trust_cert_path": str(certs["ca"]),
    }
    slave = await start_broker(
        tmp_path / "slave", broker_id=1, broker_role=SLAVE, ha_master_address=addr, **foreign
    )
    try:
        await asyncio.sleep(1.0)  # a few connection attempts
        assert slave.ha_slave is not None and not slave.ha_slave.connected
        assert not master.ha_master.connections
    finally:
        await slave.stop()
        await master.stop()


@pytest.mark.slow
async def test_a_member_slave_refuses_a_master_presenting_a_clients_certificate(
    tmp_path: Path, certs: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    """The HA stream's client checks the other end too: a "master" whose certificate the members' CA
    signed but which is a client's (mqctl's client.pem) is refused in the handshake, so a client's key
    cannot pose as a master to a slave; the slave reports no connection."""
    caplog.set_level(logging.WARNING)
    namesrv = await start_namesrv(tmp_path)
    ha = {
        "ha_tls": True,
        "ha_listen_port": 0,
        "namesrv_addr": f"127.0.0.1:{namesrv.port}",
        **server_keys(certs, mode="permissive"),
    }
    posing = {
        **ha,
        "tls_server_cert_path": str(certs["client_cert"]),
        "tls_server_key_path": str(certs["client_key"]),
    }
    master = await start_broker(tmp_path / "master", **posing)
    slave = await start_broker(tmp_path / "slave", broker_id=1, broker_role=SLAVE, **ha)
    try:
        await wait_until(lambda: "no member's" in caplog.text, 30)
        assert slave.ha_slave is not None and not slave.ha_slave.connected
        assert master.ha_master is not None and not master.ha_master.connections
    finally:
        await slave.stop()
        await master.stop()
        await namesrv.stop()


#: A stranger's TLS handshake with argv[1]:argv[2], without a certificate: prints what it got.
_STRANGER = """
import socket, ssl, sys
ctx = ssl.create_default_context()
ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
try:
    with socket.create_connection((sys.argv[1], int(sys.argv[2])), 10) as raw:
        with ctx.wrap_socket(raw) as tls:
            print("handshake" if tls.getpeercert(binary_form=True) else "no certificate")
except (OSError, ssl.SSLError) as exc:
    print("closed", type(exc).__name__)
"""


@pytest.mark.slow
async def test_the_ha_gate_closes_a_stranger_before_its_tls_handshake(
    tmp_path: Path, certs: dict[str, Path]
) -> None:
    """Under haTls a stranger in a network namespace (no slave the NameServers list) was served a whole
    TLS handshake before the gate closed it: a flood of them spends the broker's loop on handshakes. The
    gate now decides first, as the DLedger channel's does."""
    with peer_namespace() as peer:
        ha = {"ha_tls": True, "ha_listen_port": 0, **server_keys(certs, mode="permissive")}
        master = await start_broker(tmp_path / "m", listen_host=peer.host_ip, broker_ip1=peer.host_ip, **ha)
        try:
            assert master.ha_master is not None
            argv = ["ip", "netns", "exec", peer.name, sys.executable, "-c", _STRANGER]
            done = await asyncio.to_thread(
                subprocess.run,
                [*argv, peer.host_ip, str(master.ha_master.port)],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert done.stdout.startswith("closed"), (done.stdout, done.stderr)
            assert master.ha_master.refused >= 1
        finally:
            await master.stop()


# ------------------------------------------------------------------------------------------ mqctl


@pytest.fixture(scope="module")
def tls_daemons(tmp_path_factory: pytest.TempPathFactory, certs: dict[str, Path]) -> Iterator[LocalCluster]:
    """NameServer and broker both TLS-only; the broker registers over TLS."""
    root = tmp_path_factory.mktemp("tls-cli")
    with local_cluster(
        root,
        namesrv_overrides=server_keys(certs),
        tls_enable=True,
        tls_client_trust_cert_path=str(certs["ca"]),
        **server_keys(certs),
    ) as cluster:
        yield cluster


def test_mqctl_over_tls_with_ca_flags_and_context(
    cli: RunCli, tls_daemons: LocalCluster, certs: dict[str, Path], other_ca: dict[str, Path]
) -> None:
    env = {"NAMESRV_ADDR": tls_daemons.namesrv_addr}
    wrong = cli("--ca", str(other_ca["ca"]), "cluster", "list", env=env)
    assert wrong.code == TlsError.exit_code, wrong.stderr
    assert wrong.stderr.count("\n") == 1 and "not trusted" in wrong.stderr, wrong.stderr
    plain = cli("cluster", "list", env=env)
    assert plain.code == ConnectError.exit_code and "--tls" in plain.stderr, plain.stderr
    listed = cli("--ca", str(certs["ca"]), "cluster", "list", "-o", "json", env=env)
    assert listed.code == 0, listed.stderr
    assert [b["addr"] for b in listed.json()] == [tls_daemons.broker_addr]
    added = cli("context", "add", "secure", "-n", tls_daemons.namesrv_addr, "--ca", str(certs["ca"]), "--use")
    assert added.code == 0, added.stderr
    assert cli("context", "ls", "-o", "json").json()[0]["tls"] is True
    sent = cli("msg", "send", "-t", "TlsCliTopic", "hello over tls", "-o", "json")  # NameServer, then broker
    assert sent.code == 0, sent.stderr
    insecure = cli("--insecure", "cluster", "list", "-n", tls_daemons.namesrv_addr)
    assert insecure.code == 0, insecure.stderr


def test_namesrv_flag_replaces_only_the_context_s_namesrv(
    cli: RunCli, tls_daemons: LocalCluster, certs: dict[str, Path], other_ca: dict[str, Path]
) -> None:
    """A context with TLS, then ``-n HOST:PORT`` (or ``$MQCTL_NAMESRV``): the command talked plaintext and
    a TLS-only cluster closed the connection; the flag replaces the NameServers only, and ``--no-tls``
    says plaintext."""
    added = cli("context", "add", "prod", "-n", "127.0.0.1:1", "--ca", str(certs["ca"]), "--use")
    assert added.code == 0, added.stderr
    listed = cli("-n", tls_daemons.namesrv_addr, "cluster", "list", "-o", "json")
    assert listed.code == 0, listed.stderr
    assert [b["addr"] for b in listed.json()] == [tls_daemons.broker_addr]
    by_env = cli("cluster", "list", "-o", "json", env={"MQCTL_NAMESRV": tls_daemons.namesrv_addr})
    assert by_env.code == 0 and by_env.json() == listed.json(), by_env.stderr
    shown = cli("--print-config", "-n", tls_daemons.namesrv_addr, "-o", "json").json()
    assert (shown["source"], shown["tls_source"]) == ("--namesrv", "context prod"), shown
    plain = cli("--no-tls", "-n", tls_daemons.namesrv_addr, "cluster", "list")
    assert plain.code == ConnectError.exit_code and "--tls" in plain.stderr, plain.stderr
    both = cli("--no-tls", "--ca", str(certs["ca"]), "-n", tls_daemons.namesrv_addr, "cluster", "list")
    assert both.code == 2 and "--no-tls" in both.stderr, both.stderr
    # a handshake that fails on a context's TLS says whose it is
    cli("context", "add", "elsewhere", "-n", "127.0.0.1:1", "--ca", str(other_ca["ca"]))
    foreign = cli("--context", "elsewhere", "-n", tls_daemons.namesrv_addr, "cluster", "list")
    assert foreign.code == TlsError.exit_code, foreign.stderr
    assert "the TLS is context elsewhere's (--no-tls: plaintext)" in foreign.stderr, foreign.stderr


def test_mqctl_bench_produce_over_tls(cli: RunCli, tls_daemons: LocalCluster, certs: dict[str, Path]) -> None:
    env = {"NAMESRV_ADDR": tls_daemons.namesrv_addr}
    run = cli(
        "--ca",
        str(certs["ca"]),
        "bench",
        "produce",
        "-t",
        "TlsBench",
        "--count",
        "200",
        "-o",
        "json",
        env=env,
    )
    assert run.code == 0, run.stderr
    assert run.json()["messages"] == 200 and run.json()["failures"] == 0


def test_tls_init_writes_a_ca_and_refuses_to_overwrite(cli: RunCli, tmp_path: Path) -> None:
    made = cli("tls", "init", str(tmp_path / "pki"), "--san", "broker.internal", "-o", "json")
    assert made.code == 0, made.stderr
    files = {row["role"]: Path(row["file"]) for row in made.json()}
    assert (files["server_key"].stat().st_mode & 0o077) == 0
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(files["server_cert"].read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["broker.internal"]
    again = cli("tls", "init", str(tmp_path / "pki"))
    assert again.code == 4 and again.stderr.count("\n") == 1, again.stderr


@pytest.mark.slow
async def test_up_tls_and_a_context_with_ca_work_in_two_commands(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    ns_port, broker_port = free_port(), free_port()
    data = tmp_path / "data"
    args = ["--tls", "--broker-port", str(broker_port), "--metrics-port", "0"]
    async with mqctl_up(data, cli_env, ns_port, *args) as up:
        up.env.pop("NAMESRV_ADDR")
        await asyncio.to_thread(
            up.mq,
            "context",
            "add",
            "local-tls",
            "-n",
            f"127.0.0.1:{ns_port}",
            "--ca",
            str(data / "tls" / "ca.pem"),
            "--use",
        )

        async def listed() -> bool:
            rows = await asyncio.to_thread(up.mq, "cluster", "list")
            return [r["addr"] for r in rows] == [f"127.0.0.1:{broker_port}"]

        await wait_until(listed, 10)
        with socket.create_connection(("127.0.0.1", ns_port)) as raw:  # and plaintext is refused
            raw.sendall(encode_command(RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO, {})))
            raw.settimeout(5)
            try:
                answer = raw.recv(1)
            except ConnectionResetError:  # closed with our request unread: a reset
                answer = b""
            assert answer == b""
    assert up.code == 0


@pytest.mark.slow
async def test_broker_status_of_up_tls_acl_signs_over_the_contexts_verified_tls(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """With the context of 'up --tls --acl' current, 'broker status --store' said 'reachable: no' and
    'connection closed' of the running broker: its retry over the context's TLS went unsigned, and ACL's
    refusal was reported as the plaintext probe's failure."""
    ns_port = free_port()
    data = tmp_path / "data"
    args = ["--tls", "--acl", "--broker-port", "0", "--no-metrics"]
    async with mqctl_up(data, cli_env, ns_port, *args) as up:
        up.env.pop("NAMESRV_ADDR")
        ns = f"127.0.0.1:{ns_port}"
        tls_flags = ["--ca", str(data / "tls" / "ca.pem")]
        sign = ["--access-key", "mqctl-admin", "--secret-key-file", str(data / "acl" / "admin.secret")]
        await asyncio.to_thread(up.mq, "context", "add", "c1", "-n", ns, *tls_flags, *sign, "--use")
        status = await asyncio.to_thread(up.mq, "broker", "status", "--store", str(data / "store"))
        assert status["reachable"] is True and "refused" not in status, status
        assert status["over"] == "TLS of context c1" and status["version"]
        # without the credentials: the refusal said as one, over the context's TLS
        await asyncio.to_thread(up.mq, "context", "add", "c2", "-n", ns, *tls_flags, "--use")
        refused = await asyncio.to_thread(up.mq, "broker", "status", "--store", str(data / "store"))
        assert refused["reachable"] is True and "unsigned" in refused["refused"], refused
    assert up.code == 0


async def test_config_answers_never_carry_a_key_password(tmp_path: Path) -> None:
    namesrv = await start_namesrv(tmp_path, tls_server_mode="disabled", tls_server_key_password="hunter2")
    try:
        async with RemotingClient() as client:
            plain, everything = [
                await client.invoke_checked(
                    f"127.0.0.1:{namesrv.port}",
                    RemotingCommand.request(RequestCode.GET_NAMESRV_CONFIG, ext),
                    5.0,
                )
                for ext in ({}, {ALL_KEYS_FIELD: "true"})  # 4.9.8's key set; mqctl's keys too
            ]
        assert b"hunter2" not in plain.body and b"tls." not in plain.body
        assert (
            "tls.server.keyPassword=******" in everything.body.decode() and b"hunter2" not in everything.body
        )
    finally:
        await namesrv.stop()


async def test_config_files_rewritten_by_an_update_stay_private(tmp_path: Path) -> None:
    """A key password (from the environment, or an operator's broker.conf kept at 0600) landed in a
    world-readable file: the NameServer rewrote namesrv.properties with every setting, and a broker
    rewrote its broker.conf, both at 0644, at the first config update from anyone allowed one."""
    namesrv = await start_namesrv(
        tmp_path / "n", tls_server_mode="disabled", tls_server_key_password="hunter2"
    )
    conf = tmp_path / "broker.conf"
    conf.write_text("tls.server.keyPassword=hunter2\ntls.server.mode=disabled\n")
    conf.chmod(0o600)
    config = load_broker_config(conf, {"store_path_root_dir": str(tmp_path / "store")})
    broker = Broker(broker_config(tmp_path / "store", broker_config_path=config.broker_config_path))
    await broker.start()
    try:
        async with RemotingClient() as client:
            for addr, code, key in (
                (f"127.0.0.1:{namesrv.port}", RequestCode.UPDATE_NAMESRV_CONFIG, b"orderMessageEnable"),
                (broker.addr, RequestCode.UPDATE_BROKER_CONFIG, b"slaveReadEnable"),
            ):
                update = RemotingCommand.request(code, body=key + b"=true\n")
                assert (await client.invoke(addr, update)).code == ResponseCode.SUCCESS
    finally:
        await broker.stop()
        await namesrv.stop()
    for written in (namesrv.config.config_store_file, conf):
        assert "hunter2" in written.read_text()
        assert written.stat().st_mode & 0o077 == 0, f"{written} is readable by others"


@pytest.fixture(scope="module")
def mutual_daemons(
    tmp_path_factory: pytest.TempPathFactory, certs: dict[str, Path]
) -> Iterator[LocalCluster]:
    """Both daemons require a client certificate; the broker registers with the CA's client certificate."""
    root = tmp_path_factory.mktemp("mtls-cli")
    required = server_keys(certs, tls_server_need_client_auth="require")
    with local_cluster(
        root,
        namesrv_overrides=required,
        tls_enable=True,
        tls_client_trust_cert_path=str(certs["ca"]),
        tls_client_cert_path=str(certs["client_cert"]),
        tls_client_key_path=str(certs["client_key"]),
        **required,
    ) as cluster:
        yield cluster


def test_mqctl_mutual_tls_needs_cert_and_key(
    cli: RunCli, mutual_daemons: LocalCluster, certs: dict[str, Path]
) -> None:
    env = {"NAMESRV_ADDR": mutual_daemons.namesrv_addr}
    anonymous = cli("--ca", str(certs["ca"]), "cluster", "list", env=env)
    assert anonymous.code == ConnectError.exit_code, anonymous.stderr
    assert anonymous.stderr.count("\n") == 1 and "--cert/--key" in anonymous.stderr, anonymous.stderr
    half = cli("--ca", str(certs["ca"]), "--cert", str(certs["client_cert"]), "cluster", "list", env=env)
    assert half.code == 2, half.stderr
    mutual = [
        "--ca",
        str(certs["ca"]),
        "--cert",
        str(certs["client_cert"]),
        "--key",
        str(certs["client_key"]),
    ]
    listed = cli(*mutual, "cluster", "list", "-o", "json", env=env)
    assert listed.code == 0, listed.stderr
    assert [b["addr"] for b in listed.json()] == [
        mutual_daemons.broker_addr
    ]  # it registered with its certificate
    sent = cli(*mutual, "msg", "send", "-t", "MutualTopic", "hello", env=env)
    assert sent.code == 0, sent.stderr


def test_a_tls_file_that_cannot_be_used_is_named_with_its_flag(
    cli: RunCli, certs: dict[str, Path], tmp_path: Path
) -> None:
    """OpenSSL names no file: a missing --ca read "TLS file None: no such file", a non-PEM one listed
    "--cert None --key None". Each is refused before any connection, naming the flag and the file."""
    (tmp_path / "notes.txt").write_text("not a certificate\n")
    missing, text = str(tmp_path / "missing.pem"), str(tmp_path / "notes.txt")
    client = ["--cert", str(certs["client_cert"])]
    for flags, code, said in (
        (["--ca", missing], NotFoundError.exit_code, f"--ca {missing}: no such file"),
        (["--ca", str(tmp_path)], NotFoundError.exit_code, f"--ca {tmp_path}: a directory"),
        (["--ca", text], UsageError.exit_code, f"--ca {text}: no PEM CA certificate"),
        ([*client, "--key", missing], NotFoundError.exit_code, f"--key {missing}: no such file"),
        ([*client, "--key", text], UsageError.exit_code, f"--key {text}: not a PEM certificate"),
    ):
        result = cli(*flags, "cluster", "list", "-n", "127.0.0.1:1")
        assert result.code == code, result.stderr
        assert result.stderr.count("\n") == 1 and said in result.stderr and "None" not in result.stderr


async def test_permissive_with_required_client_certificates_warns_that_plaintext_still_passes(
    tmp_path: Path, certs: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    """4.9.8 serves plaintext clients on a permissive port whatever need.client.auth says: the start says so."""
    with caplog.at_level(logging.WARNING, logger="daemon.remoting.tls"):
        namesrv = await start_namesrv(
            tmp_path, **server_keys(certs, "permissive", tls_server_need_client_auth="require")
        )
    await namesrv.stop()
    assert "plaintext clients are still served" in caplog.text


def test_print_config_shows_no_key_password(tmp_path: Path, cli: RunCli) -> None:
    """--print-config goes to terminals, CI logs and bug reports: a key password set shows as the config
    answers show it; the other keys as they are."""
    conf = tmp_path / "daemon.conf"
    conf.write_text("brokerName=broker-x\ntls.server.keyPassword=hunter2\ntls.client.keyPassword=hunter3\n")
    for daemon in ("broker", "namesrv"):
        shown = cli(daemon, "start", "-c", str(conf), "--print-config")
        assert shown.code == 0, shown.stderr
        assert "hunter" not in shown.stdout, daemon
        lines = shown.stdout.splitlines()
        assert {"tls.server.keyPassword=******", "tls.client.keyPassword=******"} <= set(lines), daemon
    assert "brokerName=broker-x" in cli("broker", "start", "-c", str(conf), "--print-config").stdout


@pytest.mark.parametrize(
    ("host", "ha_tls", "warned"),
    [("0.0.0.0", False, True), ("0.0.0.0", True, False), ("127.0.0.1", False, False)],
    ids=["beyond-loopback", "haTls", "loopback"],
)
async def test_an_enforcing_master_says_when_its_ha_stream_is_plaintext_beyond_loopback(
    tmp_path: Path,
    certs: dict[str, Path],
    caplog: pytest.LogCaptureFixture,
    host: str,
    ha_tls: bool,
    warned: bool,
) -> None:
    """tls.server.mode=enforcing covers the remoting ports only: the HA stream is TLS with haTls alone, so an
    operator who asked for TLS is told when the CommitLog would still leave in plaintext."""
    keys = server_keys(certs, "enforcing", ha_tls=ha_tls)
    with caplog.at_level(logging.WARNING, logger="daemon.broker.broker"):
        broker = await start_broker(tmp_path / "m", listen_host=host, **keys)
    await broker.stop()
    assert ("the HA stream to slaves is plaintext" in caplog.text) == warned, caplog.text
