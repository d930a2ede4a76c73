"""``mqctl namesrv``: run, stop and inspect a RocketMQ-compatible NameServer."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from mqctl.cli.common import (
    ExistingPath,
    OutputOpt,
    YesOpt,
    cluster_options,
    confirm,
    online,
    parse_listen,
)
from mqctl.cli.daemons import local_host

if TYPE_CHECKING:
    from daemon.namesrv.config import NamesrvConfig
    from mqctl.services.processes import Running

app = typer.Typer(no_args_is_help=True)  # its help: NOUNS in mqctl.cli.app

ENV_PREFIX = "MQCTL_NAMESRV_"
PID_FILE = "namesrv.pid"
ADDR_FILE = "namesrv.addr"
LOG_FILE = "namesrv.log"

ConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--config",
        "-c",
        help="RocketMQ namesrv.properties file (camelCase keys).",
        click_type=ExistingPath(dir_okay=False),
    ),
]
DataOpt = Annotated[
    Path | None,
    typer.Option("--data", help="State dir: kvConfig.json, pidfile, log (default: <user data dir>/namesrv)."),
]


def _load(config_file: Path | None, data: Path | None, listen: str | None = None) -> NamesrvConfig:
    from daemon.config import load_config
    from daemon.namesrv.config import NamesrvConfig
    from mqctl.config import data_dir

    host, port = parse_listen(listen) if listen is not None else (None, None)
    config = load_config(
        NamesrvConfig,
        config_file,
        env_prefix=ENV_PREFIX,
        overrides={"listen_host": host, "listen_port": port, "data_dir": data},
    )
    if config.data_dir is None:
        config.data_dir = data_dir() / "namesrv"
    return config


@app.command()
def start(
    config_file: ConfigOpt = None,
    data: DataOpt = None,
    listen: Annotated[
        str | None, typer.Option("--listen", help="HOST:PORT to listen on (default 127.0.0.1:9876).")
    ] = None,
    print_config: Annotated[
        bool, typer.Option("--print-config", help="Print the effective settings as properties and exit.")
    ] = False,
    daemon: Annotated[
        bool, typer.Option("--daemon", "-d", help="Run in the background (pidfile and log in the data dir).")
    ] = False,
) -> None:
    """Start a NameServer; runs in the foreground until SIGINT/SIGTERM unless --daemon."""
    from daemon.config import to_properties

    config = _load(config_file, data, listen)
    if print_config:
        typer.echo(to_properties(config, mark_inert=True, mask_secrets=True), nl=False)
        return
    from daemon.namesrv.controller import NamesrvController
    from mqctl.cli.daemons import start_service

    def describe(controller: NamesrvController) -> str:
        host = "127.0.0.1" if config.listen_host in ("0.0.0.0", "") else config.listen_host
        addr = f"{host}:{controller.port}"
        (config.home / ADDR_FILE).write_text(addr + "\n")
        return f"NameServer {controller.listening()}, reached at {addr}"

    start_service(
        lambda: NamesrvController(config),
        what="NameServer",
        state_dir=config.home,
        pid_name=PID_FILE,
        log_name=LOG_FILE,
        detach=daemon,
        describe=describe,
        cleanup=lambda: (config.home / ADDR_FILE).unlink(missing_ok=True),
        port_flags={"--listen": config.listen_port},
    )


@app.command()
def stop(
    config_file: ConfigOpt = None,
    data: DataOpt = None,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for a graceful exit.")] = 15.0,
    whole_up: Annotated[
        bool,
        typer.Option(
            "--whole-up",
            help="The NameServer is 'mqctl up''s: stop that up and every broker it runs "
            "(without it, exit 4 naming them).",
        ),
    ] = False,
) -> None:
    """Stop the NameServer of a data dir or its listen port, whoever started it (SIGTERM, then wait). One
    'mqctl up' runs is refused unless --whole-up."""
    from mqctl.cli.daemons import hosted_by_up, terminate
    from mqctl.errors import NotFoundError
    from mqctl.output import stderr_console

    config = _load(config_file, data)
    running = _running(config)
    if running is None:
        raise NotFoundError(f"no NameServer is running from {config.home}")
    hosted = hosted_by_up(config.home, running, what="NameServer", whole=whole_up)
    terminate(
        running,
        config.listen_port,
        main_class="NamesrvStartup",
        name="namesrv",
        what="NameServer",
        timeout=timeout,
    )
    if hosted is not None:
        stderr_console().print(f"stopped mqctl up (pid {running.pid}): {', '.join(hosted)}")
        return
    stderr_console().print(f"NameServer pid {running.pid} stopped")


def _local_addr(config: NamesrvConfig) -> str:
    return f"{local_host(config.listen_host)}:{config.listen_port}"


def _running(config: NamesrvConfig) -> Running | None:
    """Our pid file's NameServer, else whatever listens on the configured port (a Java NameServer)."""
    from mqctl.services.processes import find_running

    host, _, port = _local_addr(config).rpartition(":")
    return find_running(config.home / PID_FILE, store_root=None, host=host, port=int(port))


@app.command()
def status(
    output: OutputOpt = "table",
    config_file: ConfigOpt = None,
    data: DataOpt = None,
) -> None:
    """Whether the NameServer of a data dir (or its listen port) runs, whoever started it, which
    process it is, and what it knows (exit 3 when stopped)."""
    from mqctl.output import render
    from mqctl.services.processes import probe

    config = _load(config_file, data)
    running = _running(config)
    result: dict[str, Any] = {"state": "stopped", "data_dir": str(config.home)}
    if running is not None:
        addr_file = config.home / ADDR_FILE
        if running.detected_by == "pid file":
            addr = addr_file.read_text().strip() if addr_file.exists() else None
        else:
            addr = _local_addr(config)
        result.update(state="running", **running.fields(), address=addr)
        if addr is not None:
            result.update(probe(addr, "namesrv"))
    render(result, output)
    if running is None:
        raise typer.Exit(3)


kv = typer.Typer(
    help="The NameServers' KV config (e.g. ORDER_TOPIC_CONFIG), written to every NameServer.",
    no_args_is_help=True,
)
app.add_typer(kv, name="kv")

NamespaceOpt = Annotated[
    str, typer.Option("--namespace", "-N", help="KV namespace, e.g. ORDER_TOPIC_CONFIG.")
]
KeyArg = Annotated[str, typer.Argument(help="Key.")]


@kv.command("get")
@cluster_options()
def kv_get(namespace: NamespaceOpt, key: KeyArg) -> None:
    """One value (exit 3 when the key is absent)."""
    from mqctl.services.kv import get

    online(lambda admin: get(admin, namespace, key))


@kv.command("list")
@cluster_options(watch=True)
def kv_list(
    namespace: NamespaceOpt,
) -> None:
    """Every key and value of a namespace."""
    from mqctl.services.kv import list_namespace

    online(lambda admin: list_namespace(admin, namespace))


@kv.command("set")
@cluster_options()
def kv_set(
    namespace: NamespaceOpt,
    key: KeyArg,
    value: Annotated[str, typer.Argument(help="Value.")],
) -> None:
    """Set a value on every NameServer (they never share state)."""
    from mqctl.services.kv import put

    online(lambda admin: put(admin, namespace, key, value), changes=True)


@kv.command("delete")
@cluster_options()
def kv_delete(
    namespace: NamespaceOpt,
    key: KeyArg,
    if_exists: Annotated[bool, typer.Option("--if-exists", help="Succeed when it is already gone.")] = False,
    yes: YesOpt = False,
) -> None:
    """Delete a key from every NameServer (asks first)."""
    from mqctl.services.kv import delete

    confirm(f"Delete {namespace}/{key} from every NameServer?", yes=yes)
    online(lambda admin: delete(admin, namespace, key, if_exists=if_exists), changes=True)
