"""``mqctl context``: named NameServer lists, like kubectl and nats contexts."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from mqctl.cli.common import OutputOpt
from mqctl.completion import complete_context

if TYPE_CHECKING:
    from mqctl.tls import TlsOptions

#: The name of a saved context; TAB lists them.
ExistingContextArg = Annotated[str, typer.Argument(help="Context name.", autocompletion=complete_context)]

app = typer.Typer(no_args_is_help=True)  # its help: NOUNS in mqctl.cli.app

CaOpt = Annotated[
    Path | None, typer.Option("--ca", help="PEM file of the CA that signed its servers (implies --tls).")
]
CertOpt = Annotated[
    Path | None, typer.Option("--cert", help="Client certificate PEM for mutual TLS (with --key).")
]
KeyOpt = Annotated[Path | None, typer.Option("--key", help="Private key PEM of --cert.")]

# A context's own NameServers (required by add, optional for set): not the shared online --namesrv.
_NAMESRV = typer.Option("--namesrv", "-n", help="NameServer list HOST:PORT[;HOST:PORT].")
SparkRemoteOpt = Annotated[
    str | None,
    typer.Option(
        "--spark-remote", help="Spark Connect server (sc://HOST:PORT) for spark-export on this cluster."
    ),
]
ContextTimeoutOpt = Annotated[
    float | None,
    typer.Option(
        "--timeout",
        min=0.1,
        help="Seconds to wait for each answer from this cluster (--timeout, $MQCTL_TIMEOUT beat it).",
    ),
]


@app.command("add")
def add(
    name: Annotated[str, typer.Argument(help="Context name.")],
    namesrv: Annotated[str, _NAMESRV],
    use: Annotated[
        bool,
        typer.Option(
            "--use", help="Make it the current context (the first context added becomes current without it)."
        ),
    ] = False,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing context of that name.")] = False,
    access_key: Annotated[
        str | None, typer.Option("--access-key", help="ACL access key to sign with.")
    ] = None,
    secret_key_file: Annotated[
        Path | None, typer.Option("--secret-key-file", help="File holding the ACL secret key (mode 600).")
    ] = None,
    secret_key: Annotated[
        str | None, typer.Option("--secret-key", help="ACL secret key, stored in an owner-only file.")
    ] = None,
    spark_remote: SparkRemoteOpt = None,
    timeout: ContextTimeoutOpt = None,
    tls: Annotated[bool, typer.Option("--tls", help="Connect to this cluster over TLS.")] = False,
    ca: CaOpt = None,
    cert: CertOpt = None,
    key: KeyOpt = None,
    insecure: Annotated[
        bool, typer.Option("--insecure", help="TLS without checking its certificates (test mode only).")
    ] = False,
    output: OutputOpt = "table",
) -> None:
    """Save a context (with ACL credentials when its cluster runs aclEnable=true, TLS with --tls)."""
    from mqctl.auth import read_secret, write_secret
    from mqctl.config import ContextFile, config_dir
    from mqctl.errors import UsageError
    from mqctl.output import render

    if bool(access_key) != bool(secret_key or secret_key_file):
        raise UsageError("--access-key needs --secret-key or --secret-key-file (and the other way round)")
    if secret_key and secret_key_file:
        raise UsageError("give --secret-key or --secret-key-file, not both")
    contexts = ContextFile.load()
    if name in contexts.contexts and not force:
        contexts.add(name, namesrv, overwrite=False)  # raises the usual ConflictError
    stored: Path | None = None
    if secret_key_file is not None:
        read_secret(secret_key_file)  # refused now rather than at the first command
        stored = secret_key_file.resolve()
    elif secret_key:
        from urllib.parse import quote

        # the name is the user's text, not a path: '../x' or 'a/b' stays one file in secrets/
        stored = config_dir() / "secrets" / f"{quote(name, safe='')}.key"
        write_secret(stored, secret_key)
    tls_options = _tls(ca, cert, key, insecure) if tls or ca or cert or key or insecure else None
    context = contexts.add(
        name,
        namesrv,
        overwrite=force,
        access_key=access_key,
        secret_key_file=str(stored) if stored else None,
        spark_remote=spark_remote,
        timeout=timeout,
        tls=tls_options,
    )
    if use:
        contexts.current = name
    contexts.save()
    row: dict[str, object] = {"added": context.name, "namesrv": context.namesrv, "current": contexts.current}
    if access_key:
        row |= {"access_key": access_key, "secret_key_file": str(stored)}
    if spark_remote:
        row["spark_remote"] = spark_remote
    if timeout is not None:
        row["timeout"] = timeout
    if tls_options is not None:
        row["tls"] = tls_options.as_json() or True
    render(row, output)


def _tls(
    ca: Path | None, cert: Path | None, key: Path | None, insecure: bool, kept: TlsOptions | None = None
) -> TlsOptions:
    """A context's TLS from the files given (absolute; else ``kept``'s), refused now when they do not
    load rather than at the first command."""
    from mqctl.tls import TlsOptions

    ca_path, cert_path, key_path = (str(p.resolve()) if p is not None else None for p in (ca, cert, key))
    kept = kept or TlsOptions()
    options = TlsOptions(ca_path or kept.ca, cert_path or kept.cert, key_path or kept.key, insecure)
    options.context()
    return options


@app.command("set")
def set_(
    name: ExistingContextArg,
    namesrv: Annotated[str | None, _NAMESRV] = None,
    spark_remote: SparkRemoteOpt = None,
    timeout: ContextTimeoutOpt = None,
    tls: Annotated[
        bool | None,
        typer.Option("--tls/--no-tls", help="Connect to this cluster over TLS, or (--no-tls) in plaintext."),
    ] = None,
    ca: CaOpt = None,
    cert: CertOpt = None,
    key: KeyOpt = None,
    insecure: Annotated[
        bool | None,
        typer.Option(
            "--insecure/--verify", help="TLS without checking its certificates (test mode only), or with."
        ),
    ] = None,
    output: OutputOpt = "table",
) -> None:
    """Change settings of a saved context; what is not given (credentials, TLS files not named) stays."""
    from mqctl.config import ContextFile
    from mqctl.errors import UsageError
    from mqctl.output import render
    from mqctl.tls import NO_TLS_WITH_FILES, TlsOptions

    contexts = ContextFile.load()
    old = contexts.get(name).tls or TlsOptions()
    tls_options: TlsOptions | Literal[False] | None = None
    if tls is False:
        if ca or cert or key or insecure:
            raise UsageError(NO_TLS_WITH_FILES)
        tls_options = False
    elif tls or ca or cert or key or insecure is not None:
        tls_options = _tls(ca, cert, key, old.insecure if insecure is None else insecure, kept=old)
    context = contexts.set(name, namesrv=namesrv, timeout=timeout, spark_remote=spark_remote, tls=tls_options)
    contexts.save()
    render(
        {
            "set": context.name,
            "namesrv": context.namesrv,
            "spark_remote": context.spark_remote,
            "timeout": context.timeout,
            "tls": context.tls.as_json() or True if context.tls is not None else False,
        },
        output,
    )


@app.command("use")
def use(name: ExistingContextArg, output: OutputOpt = "table") -> None:
    """Make a context the current one."""
    from mqctl.config import ContextFile
    from mqctl.output import render

    contexts = ContextFile.load()
    previous = contexts.current
    contexts.current = contexts.get(name).name
    contexts.save()
    render({"current": name, "previous": previous}, output)


@app.command("ls")
def ls(output: OutputOpt = "table") -> None:
    """List saved contexts; the current one is marked."""
    from mqctl.config import ContextFile
    from mqctl.output import Rows, render

    contexts = ContextFile.load()
    render(
        Rows(
            (
                {
                    "name": c.name,
                    "namesrv": c.namesrv,
                    "spark_remote": c.spark_remote,
                    "timeout": c.timeout,
                    "tls": c.tls is not None,
                    "current": c.name == contexts.current,
                }
                for c in contexts.contexts.values()
            ),
            columns=["name", "namesrv", "spark_remote", "timeout", "tls", "current"],
        ),
        output,
    )


@app.command("rm")
def rm(
    name: ExistingContextArg,
    if_exists: Annotated[bool, typer.Option("--if-exists", help="Succeed when it is already gone.")] = False,
    output: OutputOpt = "table",
) -> None:
    """Delete a saved context."""
    from mqctl.config import ContextFile
    from mqctl.output import render

    contexts = ContextFile.load()
    if if_exists and name not in contexts.contexts:
        render({"removed": None, "namesrv": None}, output)
        return
    removed = contexts.remove(name)
    contexts.save()
    render({"removed": removed.name, "namesrv": removed.namesrv}, output)


@app.command("current")
def current(output: OutputOpt = "table") -> None:
    """Show where online commands will connect and how long they wait for answers, and why."""
    from mqctl.config import effective_settings
    from mqctl.output import render

    render(effective_settings(), output)
