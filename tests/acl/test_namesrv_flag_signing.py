"""A context's access key goes only where the context vouches for the host: its own NameServers, or its
TLS with its own CA. A ``-n`` beyond both is sent unsigned (RocketMQ 4.x signatures replay), with one
warning; ``--sign`` or a key given on the command line signs anyway.

One NameServer with ACL on serves plaintext and TLS (permissive) on loopback: ``127.1:PORT`` reaches it
(the resolver reads it as ``127.0.0.1``) but is a name to mqctl, which resolves none to compare it, so
not the ``127.0.0.1:PORT`` a context lists: a write to it passes only when signed. ``localhost:PORT``,
``[::ffff:127.0.0.1]:PORT`` or ``127.0.0.1:0PORT`` are that address written otherwise, and sign.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from daemon.remoting.tls import write_local_ca
from mqctl.errors import AuthError
from tests.daemons import namesrv_alone
from tests.support.acl import ADMIN_AK, ADMIN_SK, write_acl
from tests.support.cli import CliResult, RunCli

WARNING = "not signing with context prod's access key"


@pytest.fixture(scope="module")
def acl_namesrv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, dict[str, Path]]]:
    """The port of a NameServer with ACL on, TLS permissive on a certificate of the CA returned."""
    root = tmp_path_factory.mktemp("ns-signing")
    certs = write_local_ca(root / "certs")
    write_acl(root / "home")
    home = str(root / "home")
    with namesrv_alone(
        root, certs, tls_server_mode="permissive", acl_enable=True, rocketmq_home=home
    ) as addr:
        yield int(addr.rpartition(":")[2]), certs


def _prod(cli: RunCli, tmp_path: Path, namesrv: str, *tls: str) -> None:
    secret = tmp_path / "admin.secret"
    secret.write_text(ADMIN_SK + "\n")
    secret.chmod(0o600)
    added = cli("context", "add", "prod", "-n", namesrv, *tls, "--access-key", ADMIN_AK,
                "--secret-key-file", str(secret), "--use")  # fmt: skip
    assert added.code == 0, added.stderr


def _kv_set(cli: RunCli, *args: str, env: dict[str, str] | None = None) -> CliResult:
    return cli(*args, "namesrv", "kv", "set", "-N", "SIGNING", "k", "v", env=env or {})


def test_a_namesrv_the_context_does_not_list_gets_no_signature_over_plaintext(
    cli: RunCli, tmp_path: Path, acl_namesrv: tuple[int, dict[str, Path]]
) -> None:
    port, _ = acl_namesrv
    _prod(cli, tmp_path, f"127.0.0.1:{port}")
    stranger = f"127.1:{port}"
    unsigned = _kv_set(cli, "-n", stranger)
    assert unsigned.code == AuthError.exit_code, unsigned.stderr
    assert unsigned.stderr.count(WARNING) == 1 and stranger in unsigned.stderr, unsigned.stderr
    assert "--sign" in unsigned.stderr and ADMIN_SK not in unsigned.stderr
    by_env = _kv_set(cli, env={"MQCTL_NAMESRV": stranger})
    assert by_env.code == AuthError.exit_code and WARNING in by_env.stderr, by_env.stderr
    shown = cli("--print-config", "-n", stranger, "-o", "json").json()
    assert shown["access_key"] is None and "withheld from " + stranger in shown["access_key_source"], shown

    for own_namesrv in (f"127.0.0.1:{port}", f"localhost:{port}", f" [::ffff:127.0.0.1]:0{port} ;"):
        own = _kv_set(cli, "-n", own_namesrv)  # the context's own NameServer, however written
        assert own.code == 0 and WARNING not in own.stderr, (own_namesrv, own.stderr)
    chosen = _kv_set(cli)  # the context chose it
    assert chosen.code == 0 and WARNING not in chosen.stderr, chosen.stderr
    allowed = _kv_set(cli, "--sign", "-n", stranger)
    assert allowed.code == 0 and WARNING not in allowed.stderr, allowed.stderr
    explicit = _kv_set(cli, "--access-key", ADMIN_AK, "--secret-key", ADMIN_SK, "-n", stranger)
    assert explicit.code == 0 and WARNING not in explicit.stderr, explicit.stderr


def test_the_context_s_own_ca_vouches_for_any_namesrv_it_signed(
    cli: RunCli, tmp_path: Path, acl_namesrv: tuple[int, dict[str, Path]]
) -> None:
    port, certs = acl_namesrv
    _prod(cli, tmp_path, "127.0.0.1:1", "--ca", str(certs["ca"]))  # lists another NameServer
    over_tls = _kv_set(cli, "-n", f"localhost:{port}")  # not the 127.0.0.1:1 it lists
    assert over_tls.code == 0 and WARNING not in over_tls.stderr, over_tls.stderr
    # TLS that checks nothing, or plaintext, vouches for nothing
    for flag in ("--insecure", "--no-tls"):
        unchecked = _kv_set(cli, flag, "-n", f"localhost:{port}")
        assert unchecked.code == AuthError.exit_code and WARNING in unchecked.stderr, (flag, unchecked.stderr)
