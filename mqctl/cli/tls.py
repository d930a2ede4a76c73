"""``mqctl tls``: key material for a TLS cluster."""

from __future__ import annotations

import os
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
    for cert_file, key_file, *_ in RENEWABLE.values():
        settle_pair(target / key_file, target / cert_file)
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
        replace_pair(target / key_file, key_pem(key), target / cert_file, cert_pem(cert))
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


#: Suffixes of a pair's files while ``replace_pair`` writes them: the new ones, and the old key's second name.
_NEW, _OLD = ".renewing", ".replaced"


def _aside(path: Path, suffix: str) -> Path:
    return path.with_name(f".{path.name}{suffix}")


def replace_pair(key_path: Path, key: bytes, cert_path: Path, cert: bytes) -> None:
    """Replace a key and its certificate so that a failure leaves the old pair or the new one, never a
    key beside another key's certificate (a daemon refuses to start on that).

    Both are written to hidden files in the same directory and fsynced before either name changes; the
    old key gets a second name (a hard link); then the key is renamed over the old one, then the
    certificate, and the directory is fsynced. Two renames are never one atomic step, so the state
    between them is made recoverable, in both directions:

    - a failure there (an exception: a full or read-only disk, Ctrl-C) puts the old key back under its
      name: the old pair;
    - a crash there (power loss, SIGKILL) leaves the new key, the old certificate and, still hidden and
      fsynced, the new certificate and the old key's second name. :func:`settle_pair`, which every
      ``tls renew`` runs first, puts the old key back (the old pair); a crash before the key's rename
      leaves the old pair and hidden leftovers it removes.
    """
    from store import sync_directory

    new_key, new_cert, old_key = _aside(key_path, _NEW), _aside(cert_path, _NEW), _aside(key_path, _OLD)
    _write_synced(new_key, key, 0o600)
    _write_synced(new_cert, cert, 0o644)
    old_key.unlink(missing_ok=True)
    had_key = key_path.exists()
    if had_key:
        os.link(key_path, old_key)
    sync_directory(str(key_path.parent))
    os.replace(new_key, key_path)
    try:
        os.replace(new_cert, cert_path)
    except BaseException:
        if had_key:
            os.replace(old_key, key_path)
        else:
            key_path.unlink(missing_ok=True)
        new_cert.unlink(missing_ok=True)
        sync_directory(str(key_path.parent))
        raise
    old_key.unlink(missing_ok=True)
    sync_directory(str(key_path.parent))


def settle_pair(key_path: Path, cert_path: Path) -> None:
    """After a crash inside :func:`replace_pair`: the old pair back, its leftovers gone (nothing when it
    finished or never ran)."""
    from store import sync_directory

    new_key, new_cert, old_key = _aside(key_path, _NEW), _aside(cert_path, _NEW), _aside(key_path, _OLD)
    if not any(p.exists() for p in (new_key, new_cert, old_key)):
        return
    if new_cert.exists() and not new_key.exists() and old_key.exists():
        os.replace(old_key, key_path)  # the key was renamed and the certificate was not: the old key back
        _warn(f"{key_path}: a renewal stopped between the key and its certificate; the old pair is back")
    for leftover in (new_key, new_cert, old_key):
        leftover.unlink(missing_ok=True)
    sync_directory(str(key_path.parent))


def _write_synced(path: Path, data: bytes, mode: int) -> None:
    """A new file (``mode`` from its creation on: a key is never readable by others), on disk at return."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with open(fd, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


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
