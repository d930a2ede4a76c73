"""``check cert --connect HOST:PORT``: the chain a live TLS daemon of ours presents, its days left against
--warn/--crit, and whether it verifies against --ca, the context's CA or the system's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from daemon.remoting.tls import write_local_ca
from tests.daemons import namesrv_alone
from tests.support.cli import RunCli
from tests.support.ports import free_port


@pytest.fixture(scope="module")
def tls_namesrv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, Path], Path]]:
    """A TLS-only NameServer's address, its CA's files, and another CA that signed nothing of it."""
    root = tmp_path_factory.mktemp("check-cert")
    certs = write_local_ca(root / "certs")
    with namesrv_alone(root, certs) as addr:
        yield addr, certs, write_local_ca(root / "other")["ca"]


def test_the_chain_a_server_presents_is_read_and_verified(
    cli: RunCli, tls_namesrv: tuple[str, dict[str, Path], Path]
) -> None:
    addr, certs, other = tls_namesrv
    ok = cli("check", "cert", "--connect", addr, "--ca", str(certs["ca"]))
    assert ok.code == 0, ok.stdout + ok.stderr
    assert ok.stdout.startswith("CERT OK - ") and f"verifies against --ca {certs['ca']}" in ok.stdout, (
        ok.stdout
    )
    assert f"'{addr} leaf days_left'=" in ok.stdout, ok.stdout
    soon = cli(
        "check", "cert", "--connect", addr, "--ca", str(certs["ca"]), "--warn", "100000", "--crit", "1"
    )
    assert soon.code == 1 and "CERT WARNING" in soon.stdout, soon.stdout
    ending = cli(
        "check", "cert", "--connect", addr, "--ca", str(certs["ca"]), "--warn", "100000", "--crit", "99999"
    )
    assert ending.code == 2 and "CERT CRITICAL" in ending.stdout, ending.stdout

    foreign = cli("check", "cert", "--connect", addr, "--ca", str(other), "-o", "json")
    assert foreign.code == 2, foreign.stdout
    verdict = foreign.json()
    assert verdict["state"] == "CRITICAL" and verdict["perfdata"], verdict  # the dates were still read
    assert any(f"does not verify against --ca {other}" in p for p in verdict["problems"]), verdict
    system = cli("check", "cert", "--connect", addr)
    assert system.code == 2 and "does not verify against the system's CAs" in system.stdout, system.stdout


def test_the_context_s_ca_is_the_default(cli: RunCli, tls_namesrv: tuple[str, dict[str, Path], Path]) -> None:
    addr, certs, _ = tls_namesrv
    assert cli("context", "add", "prod", "-n", addr, "--ca", str(certs["ca"]), "--use").code == 0
    ok = cli("check", "cert", "--connect", addr)
    assert ok.code == 0 and f"verifies against context prod's CA {certs['ca']}" in ok.stdout, ok.stdout


def test_what_cannot_be_looked_at_is_unknown(
    cli: RunCli, tls_namesrv: tuple[str, dict[str, Path], Path]
) -> None:
    addr, certs, _ = tls_namesrv
    down = cli("check", "cert", "--connect", f"127.0.0.1:{free_port()}")
    assert down.code == 3 and down.stdout.startswith("CERT UNKNOWN - "), down.stdout
    both = cli("check", "cert", str(certs["server_cert"]), "--connect", addr)
    assert both.code == 3 and "one of the two" in both.stdout, both.stdout
    stray = cli("check", "cert", str(certs["server_cert"]), "--ca", str(certs["ca"]))
    assert stray.code == 3 and "--ca goes with --connect" in stray.stdout, stray.stdout
