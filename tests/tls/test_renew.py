"""``mqctl tls renew`` and ``tls show``: certificates issued again by the CA ``tls init`` made (the same
names, SANs and member mark, a new expiry), and their ends shown and warned of before they come."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509

from daemon.namesrv.controller import NamesrvController
from mqctl.errors import ConflictError, UsageError
from tests.daemons import LoopThread
from tests.support.cli import RunCli
from tests.support.namesrv import namesrv_config


def _cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


@pytest.fixture
def pki(cli: RunCli, tmp_path: Path) -> Path:
    made = cli(
        "tls", "init", str(tmp_path / "pki"), "--member-ca", "--san", "mq.example", "--san", "10.1.2.3"
    )
    assert made.code == 0, made.stderr
    return tmp_path / "pki"


def test_renew_keeps_the_ca_names_and_mark_with_a_new_expiry(cli: RunCli, pki: Path) -> None:
    before = {name: _cert(pki / f"{name}.pem") for name in ("server", "member", "client")}
    ca_bytes, key_bytes = (pki / "ca.pem").read_bytes(), (pki / "server.key").read_bytes()
    refused = cli("tls", "renew", str(pki))
    assert refused.code == ConflictError.exit_code and "--force" in refused.stderr, refused.stderr
    assert (pki / "server.key").read_bytes() == key_bytes  # nothing written
    renewed = cli("tls", "renew", str(pki), "--days", "10", "--force", "-o", "json")
    assert renewed.code == 0, renewed.stderr
    assert [row["role"] for row in renewed.json()] == ["server", "client", "member"]
    assert (pki / "ca.pem").read_bytes() == ca_bytes and (pki / "server.key").read_bytes() != key_bytes
    assert ((pki / "server.key").stat().st_mode & 0o077) == 0
    for name, old in before.items():
        new = _cert(pki / f"{name}.pem")
        new.verify_directly_issued_by(_cert(pki / ("member-ca.pem" if name == "member" else "ca.pem")))
        assert new.subject == old.subject and new.serial_number != old.serial_number
        assert list(new.extensions) == list(old.extensions)  # SANs, usages: as they were
        days = (new.not_valid_after_utc - new.not_valid_before_utc).days
        assert days == 10 and new.not_valid_after_utc < old.not_valid_after_utc
    assert "OU=mqctl-member" in _cert(pki / "server.pem").subject.rfc4514_string()


def _pair(pki: Path, name: str) -> tuple[bytes, bytes]:
    """A certificate's and its key file's bytes, checked to be a pair."""
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat, load_pem_private_key

    cert, key = (pki / f"{name}.pem").read_bytes(), (pki / f"{name}.key").read_bytes()
    public = (
        load_pem_private_key(key, None)
        .public_key()
        .public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    )
    assert (
        x509.load_pem_x509_certificate(cert)
        .public_key()
        .public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
        == public
    ), f"{name}.pem and {name}.key are not a pair"
    return cert, key


def test_a_renewal_that_fails_between_the_key_and_the_certificate_leaves_the_old_pair(
    pki: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each file was written in place: a failure between the two left a new key beside the old
    certificate, and a daemon started on them failed its TLS set-up."""
    import os

    from mqctl.cli.tls import renew_certificates

    old = _pair(pki, "server")
    real = os.replace
    calls = []

    def failing(src: object, dst: object) -> None:
        calls.append(dst)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        real(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "replace", failing)
    with pytest.raises(OSError, match="No space"):
        renew_certificates(pki, ["server"], days=10, out=None, reuse_key=False, force=True)
    monkeypatch.setattr(os, "replace", real)
    assert [Path(str(c)).name for c in calls[:2]] == ["server.key", "server.pem"]  # (the key first)
    assert _pair(pki, "server") == old
    assert sorted(p.name for p in pki.iterdir() if p.name.startswith(".")) == []


def test_a_renewal_a_crash_stopped_between_the_two_renames_is_settled_by_the_next(
    cli: RunCli, pki: Path
) -> None:
    """A crash after the key's rename leaves the new key beside the old certificate; the next renew puts
    the old key back before anything else, says so, then renews."""
    from mqctl.cli.tls import settle_pair

    old_cert, old_key = _pair(pki, "server")
    renewed = cli("tls", "renew", str(pki), "server", "--out", str(pki / "next"))
    assert renewed.code == 0, renewed.stderr
    new_cert, new_key = _pair(pki / "next", "server")
    # what replace_pair leaves when killed between its two renames
    (pki / ".server.key.replaced").write_bytes(old_key)
    (pki / "server.key").write_bytes(new_key)
    (pki / ".server.pem.renewing").write_bytes(new_cert)
    settle_pair(pki / "server.key", pki / "server.pem")
    assert _pair(pki, "server") == (old_cert, old_key)
    assert not [p.name for p in pki.iterdir() if p.name.startswith(".")]

    (pki / ".server.key.replaced").write_bytes(old_key)
    (pki / "server.key").write_bytes(new_key)
    (pki / ".server.pem.renewing").write_bytes(new_cert)
    again = cli("tls", "renew", str(pki), "server", "--force")
    assert again.code == 0 and "stopped between the key and its certificate" in again.stderr, again.stderr
    assert _pair(pki, "server")[1] not in (old_key, new_key)


def test_show_warns_of_a_certificate_near_its_end(cli: RunCli, pki: Path) -> None:
    assert cli("tls", "renew", str(pki), "server", "--days", "5", "--force").code == 0
    shown = cli("tls", "show", str(pki), "-o", "json")
    assert shown.code == 0, shown.stderr
    states = {Path(row["file"]).name: (row["state"], row["days_left"]) for row in shown.json()}
    assert states["server.pem"] == ("expires soon", 4) and states["client.pem"][0] == "valid"
    assert shown.stderr.count("mqctl: warning: ") == 1 and "server.pem: ends in 4 days" in shown.stderr
    server = next(row for row in shown.json() if row["file"].endswith("server.pem"))
    assert server["sans"][-2:] == ["mq.example", "10.1.2.3"] and server["member"] is True
    quiet = cli("tls", "show", str(pki / "server.pem"), "--warn-days", "3")
    assert quiet.code == 0 and not quiet.stderr, quiet.stderr


def test_renew_into_another_directory_and_of_a_foreign_certificate(
    cli: RunCli, pki: Path, tmp_path: Path
) -> None:
    staged = cli("tls", "renew", str(pki), "client", "--out", str(tmp_path / "next"), "--reuse-key")
    assert staged.code == 0, staged.stderr
    assert (tmp_path / "next" / "client.key").read_bytes() == (pki / "client.key").read_bytes()
    assert not (tmp_path / "next" / "server.pem").exists()
    other = tmp_path / "other"
    assert cli("tls", "init", str(other)).code == 0
    (other / "server.pem").write_bytes((pki / "server.pem").read_bytes())  # not its CA's
    foreign = cli("tls", "renew", str(other), "server", "--force")
    assert foreign.code == UsageError.exit_code and "not signed by that CA" in foreign.stderr, foreign.stderr
    assert cli("tls", "renew", str(pki), "broker").code == UsageError.exit_code


@pytest.fixture
def loop() -> Iterator[LoopThread]:
    thread = LoopThread()
    yield thread
    thread.close()


def test_a_daemon_on_a_renewed_certificate_is_trusted_by_the_same_ca(
    cli: RunCli, tmp_path: Path, loop: LoopThread
) -> None:
    pki = tmp_path / "local"  # the default SANs: 127.0.0.1 among them
    assert cli("tls", "init", str(pki)).code == 0
    assert cli("tls", "renew", str(pki), "server", "--force").code == 0
    namesrv = NamesrvController(
        namesrv_config(
            tmp_path,
            tls_server_mode="enforcing",
            tls_server_cert_path=str(pki / "server.pem"),
            tls_server_key_path=str(pki / "server.key"),
            tls_test_mode_enable=False,
        )
    )
    loop.run(namesrv.start())
    try:
        listed = cli(
            "--ca", str(pki / "ca.pem"), "-n", f"127.0.0.1:{namesrv.port}", "cluster", "list", "-o", "json"
        )
    finally:
        loop.run(namesrv.stop())
    assert listed.code == 0 and listed.json() == [], listed.stderr


def test_a_daemon_warns_at_start_of_its_certificate_s_end(
    cli: RunCli, pki: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A certificate's end reached the operator as every client's failed handshake, on the day."""
    from daemon.remoting.tls import TlsSettings

    settings = TlsSettings(
        mode="enforcing", server_cert=str(pki / "server.pem"), server_key=str(pki / "server.key")
    )
    with caplog.at_level(logging.WARNING, logger="daemon.remoting.tls"):
        settings.check()
        assert not caplog.records  # 825 days ahead
        assert cli("tls", "renew", str(pki), "server", "--days", "5", "--force").code == 0
        settings.check()
    (record,) = caplog.records
    assert record.levelno == logging.WARNING and "ends in 4 days" in record.getMessage()
    assert "mqctl tls renew" in record.getMessage()


def test_check_cert_is_a_plugin_of_the_days_left(cli: RunCli, pki: Path) -> None:
    ok = cli("check", "cert", str(pki))
    assert ok.code == 0 and ok.stdout.startswith("CERT OK - 5 certificates"), ok.stdout
    assert cli("tls", "renew", str(pki), "member", "--days", "20", "--force").code == 0
    warning = cli("check", "cert", str(pki))
    assert warning.code == 1 and "member.pem: ends in 19 days" in warning.stdout, warning.stdout
    assert "'member.pem days_left'=19" in warning.stdout.partition(" | ")[2]
    critical = cli("check", "cert", str(pki / "member.pem"), "--warn", "60", "--crit", "20", "-o", "json")
    assert critical.code == 2 and critical.json()["state"] == "CRITICAL", critical.stdout
    assert cli("check", "cert", str(pki / "nothing.pem")).code == 3
    assert cli("check", "cert", str(pki), "--warn", "5", "--crit", "10").code == 3
