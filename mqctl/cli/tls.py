"""``mqctl tls``: key material for a TLS cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mqctl.cli.common import OutputOpt

app = typer.Typer(no_args_is_help=True)  # its help: NOUNS in mqctl.cli.app


@app.command("init")
def init(
    directory: Annotated[Path, typer.Argument(help="Directory for the PEM files (created).")],
    san: Annotated[
        list[str] | None,
        typer.Option(
            "--san",
            help="Name or IP address of the server certificate (repeatable; default: 127.0.0.1, localhost, "
            "::1 and this host's name).",
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace existing files.")] = False,
    member_ca: Annotated[
        bool,
        typer.Option(
            "--member-ca",
            help="Also write a CA of the replication members' own and a member certificate it signs "
            "(member-ca.pem/.key, member.pem/.key), for tls.member.trustCertPath.",
        ),
    ] = False,
    output: OutputOpt = "table",
) -> None:
    """Write a CA, a server certificate and a client certificate signed by it (keys mode 600).

    The server certificate is a replication member's (OU=mqctl-member): under haTls the HA port and the
    DLedger channel admit it and refuse the client certificate.

    Daemons: tls.server.certPath=server.pem, tls.server.keyPath=server.key, tls.server.trustCertPath=ca.pem
    (and tls.client.trustCertPath=ca.pem with tls.enable=true). mqctl: --ca ca.pem [--cert client.pem
    --key client.key].

    With --member-ca, the members trust one another by their own CA instead of the mark:
    tls.member.trustCertPath=member-ca.pem, tls.member.certPath=member.pem, tls.member.keyPath=member.key
    (haTls=true), and the CA that signs clients signs no member."""
    from mqctl.output import render

    paths = write_certificates(directory, san or None, force=force, member_ca=member_ca)
    render([{"role": role, "file": str(path)} for role, path in paths.items()], output)


def write_certificates(
    directory: Path, sans: list[str] | None, *, force: bool, member_ca: bool = False
) -> dict[str, Path]:
    """`daemon.remoting.tls.write_local_ca` (and `write_member_ca`) into `directory`, refusing to replace
    files unless `force`."""
    from daemon.remoting.tls import LOCAL_FILES, MEMBER_FILES, write_local_ca, write_member_ca
    from mqctl.errors import ConflictError

    names = [*LOCAL_FILES.values(), *(MEMBER_FILES.values() if member_ca else ())]
    existing = [name for name in names if (directory / name).exists()]
    if existing and not force:
        raise ConflictError(
            f"{directory} already holds {', '.join(existing)}", hint="use --force to replace them"
        )
    paths = write_local_ca(directory, sans=sans)
    return {**paths, **write_member_ca(directory, sans=sans)} if member_ca else paths


Roles = Annotated[
    list[str] | None,
    typer.Argument(
        help="Which certificates: server (the NameServers' and brokers'), client, member (default: each "
        "of them DIR holds).",
        show_default=False,
    ),
]


@app.command("renew")
def renew(
    directory: Annotated[
        Path, typer.Argument(help="Directory 'mqctl tls init' wrote (its CA signs the new ones).")
    ],
    roles: Roles = None,
    days: Annotated[int, typer.Option("--days", min=1, help="Days the new certificates are valid.")] = 825,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", help="Write the new certificates and keys here (default: DIR, which needs --force)."
        ),
    ] = None,
    reuse_key: Annotated[
        bool, typer.Option("--reuse-key", help="Keep each certificate's private key (default: a new one).")
    ] = False,
    force: Annotated[bool, typer.Option("--force", help="Replace existing files.")] = False,
    output: OutputOpt = "table",
) -> None:
    """Issue certificates again from the existing CA: the same names, SANs and member mark, a new expiry.

    The CA stays, so clients and members that trust ca.pem (or member-ca.pem) trust the new ones; restart
    each daemon on its new files (a daemon reads them at start)."""
    from mqctl.output import render

    rows = renew_certificates(directory, roles or None, days=days, out=out, reuse_key=reuse_key, force=force)
    render(rows, output)


def renew_certificates(
    directory: Path, roles: list[str] | None, *, days: int, out: Path | None, reuse_key: bool, force: bool
) -> list[dict[str, object]]:
    """`daemon.remoting.tls.reissue` of each role's certificate in ``directory``, written into ``out``."""
    from daemon.remoting.tls import (
        RENEWABLE,
        CertificateError,
        cert_pem,
        key_pem,
        load_certificate,
        load_key,
        new_key,
        reissue,
        write_pem,
    )
    from mqctl.errors import ConflictError, NotFoundError, UsageError
    from mqctl.services.certs import epoch_ms
    from mqctl.units import time_fields

    unknown = sorted(set(roles or ()) - set(RENEWABLE))
    if unknown:
        raise UsageError(f"no certificate role {', '.join(unknown)}: choose from {', '.join(RENEWABLE)}")
    chosen = roles or [r for r, files in RENEWABLE.items() if (directory / files[0]).is_file()]
    if not chosen:
        raise NotFoundError(
            f"{directory} holds no certificate of mqctl tls init ({', '.join(f[0] for f in RENEWABLE.values())})"
        )
    target = out or directory
    planned = []
    for role in dict.fromkeys(chosen):
        cert_file, key_file, ca_file, ca_key_file = RENEWABLE[role]
        missing = [n for n in (cert_file, ca_file, ca_key_file) if not (directory / n).is_file()]
        if reuse_key and not (directory / key_file).is_file():
            missing.append(key_file)
        if missing:
            raise NotFoundError(f"{directory}: no {', '.join(missing)} (the {role} certificate and its CA)")
        planned.append((role, cert_file, key_file, ca_file, ca_key_file))
    existing = [
        str(target / name) for _, cert, key, *_ in planned for name in (cert, key) if (target / name).exists()
    ]
    if existing and not force:
        raise ConflictError(
            f"renewing would replace {', '.join(existing)}",
            hint="use --force to replace them, the CA kept, or --out DIR to write the new ones elsewhere",
        )
    issued = []
    try:
        for role, cert_file, key_file, ca_file, ca_key_file in planned:
            ca_cert = load_certificate(directory / ca_file)
            key = load_key(directory / key_file) if reuse_key else new_key()
            try:
                cert = reissue(
                    load_certificate(directory / cert_file),
                    key,
                    (ca_cert, load_key(directory / ca_key_file)),
                    days,
                )
            except CertificateError as exc:
                raise CertificateError(f"{directory / cert_file}: {exc}") from None
            issued.append((role, cert_file, key_file, cert, key, ca_cert))
    except CertificateError as exc:
        raise UsageError(str(exc)) from None
    target.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, object]] = []
    for role, cert_file, key_file, cert, key, ca_cert in issued:
        write_pem(target / key_file, key_pem(key))
        write_pem(target / cert_file, cert_pem(cert), private=False)
        ends = epoch_ms(cert.not_valid_after_utc)
        if epoch_ms(ca_cert.not_valid_after_utc) < ends:
            _warn(
                f"{role}: its CA ends before it does, on {ca_cert.not_valid_after_utc:%Y-%m-%d}: a new CA (tls init) is due"
            )
        rows.append(
            {
                "role": role,
                "file": str(target / cert_file),
                "key": str(target / key_file),
                **time_fields("not_after", ends),
            }
        )
    return rows


@app.command("show")
def show(
    paths: Annotated[
        list[Path], typer.Argument(help="PEM certificate files, or directories: each *.pem in them.")
    ],
    warn_days: Annotated[
        int, typer.Option("--warn-days", min=0, help="Warn of certificates that end within this many days.")
    ] = 30,  # daemon.remoting.tls.WARN_DAYS, as a daemon's start warns
    output: OutputOpt = "table",
) -> None:
    """Each certificate's names, issuer and validity; a warning line on stderr for each one that has
    ended, is not valid yet or ends within --warn-days (mqctl tls renew issues it again)."""
    from mqctl.output import Rows, render
    from mqctl.services.certs import NARROW, CertRow, describe, trouble

    rows = describe(paths, warn_days)
    for row in rows:
        if (why := trouble(row)) is not None:
            _warn(why)
    render(Rows.of(CertRow, rows, narrow=NARROW), output)


def _warn(text: str) -> None:
    import sys

    from mqctl.output import printable

    sys.stderr.write(f"mqctl: warning: {printable(text, newlines=False)}\n")
