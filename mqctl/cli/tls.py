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
