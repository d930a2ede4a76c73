"""``mqctl broker``: run a broker from a RocketMQ ``broker.conf``, stop it, show its status."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from mqctl.cli.common import BrokerAddrOpt, ClusterOpt, ContextOpt, ExecuteOpt, NamesrvOpt, OutputOpt, online

if TYPE_CHECKING:
    from daemon.broker.config import BrokerConfig

app = typer.Typer(
    help="Run and manage a broker (RocketMQ broker.conf files work as they are).", no_args_is_help=True
)

#: Kept in the store root: one broker per store (the store lock enforces it anyway).
PID_FILE = "broker.pid"
LOG_FILE = "logs/broker.log"

ConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--config", "-c", help="RocketMQ broker.conf (properties) file.", exists=True, dir_okay=False
    ),
]
StoreOpt = Annotated[
    Path | None, typer.Option("--store", help="Store root dir (storePathRootDir); beats the config file.")
]


def load(config: Path | None, overrides: dict[str, Any]) -> BrokerConfig:
    """Defaults → broker.conf (else the store's broker.properties) → MQCTL_* environment → flags."""
    from daemon.broker.config import load_broker_config

    return load_broker_config(config, overrides)


@app.command("start")
def start(
    config: ConfigOpt = None,
    namesrv: Annotated[
        str | None, typer.Option("--namesrv", "-n", help="NameServers HOST:PORT[;HOST:PORT] (namesrvAddr).")
    ] = None,
    port: Annotated[
        int | None, typer.Option("--port", "-p", help="Listen port (listenPort, default 10911).")
    ] = None,
    store: StoreOpt = None,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            "--metrics-port", help="Prometheus /metrics and /healthz port (metricsPort, default 5557)."
        ),
    ] = None,
    no_metrics: Annotated[
        bool, typer.Option("--no-metrics", help="Do not serve /metrics and /healthz.")
    ] = False,
    print_config: Annotated[
        bool,
        typer.Option("--print-config", help="Print the effective configuration as broker.conf and exit."),
    ] = False,
    daemon: Annotated[
        bool, typer.Option("--daemon", "-d", help=f"Run in the background; log in <store>/{LOG_FILE}.")
    ] = False,
) -> None:
    """Start a broker in the foreground (Ctrl-C stops it cleanly) or, with --daemon, in the background."""
    from daemon.config import to_properties

    cfg = load(
        config,
        {
            "namesrv_addr": namesrv,
            "listen_port": port,
            "store_path_root_dir": str(store) if store else None,
            "metrics_port": metrics_port,
            "metrics_enable": False if no_metrics else None,
        },
    )
    if print_config:
        typer.echo(to_properties(cfg), nl=False)
        return
    from daemon.broker.broker import Broker
    from mqctl.cli.daemons import start_service

    start_service(
        lambda: Broker(cfg),
        what="broker",
        state_dir=Path(cfg.store_path_root_dir),
        pid_name=PID_FILE,
        log_name=LOG_FILE,
        detach=daemon,
        describe=lambda broker: f"broker {cfg.broker_name} listening on {broker.addr}",
    )


@app.command("stop")
def stop(
    config: ConfigOpt = None,
    store: StoreOpt = None,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for a graceful exit.")] = 30.0,
) -> None:
    """Stop the broker running on a store (SIGTERM, then wait for a clean shutdown)."""
    from daemon.lifecycle import LifecycleError, terminate
    from mqctl.errors import MqctlError
    from mqctl.output import stderr_console

    cfg = load(config, {"store_path_root_dir": str(store) if store else None})
    try:
        pid = terminate(Path(cfg.store_path_root_dir) / PID_FILE, timeout)
    except LifecycleError as exc:
        raise MqctlError(str(exc), hint="send SIGTERM again to force it") from None
    if pid is None:
        stderr_console().print(f"no broker is running on {cfg.store_path_root_dir}")
    else:
        stderr_console().print(f"stopped broker (pid {pid})")


@app.command("status")
def status(config: ConfigOpt = None, store: StoreOpt = None, output: OutputOpt = "table") -> None:
    """Whether a broker runs on a store; its address, version, TPS and offsets when it does (exit 3 when stopped)."""
    from daemon.lifecycle import running_pid
    from mqctl.output import render

    cfg = load(config, {"store_path_root_dir": str(store) if store else None})
    pid = running_pid(Path(cfg.store_path_root_dir) / PID_FILE)
    result: dict[str, Any] = {"state": "stopped", "store": cfg.store_path_root_dir}
    if pid is not None:
        local = cfg.listen_host if cfg.listen_host not in ("0.0.0.0", "") else "127.0.0.1"
        result.update(state="running", pid=pid, address=cfg.broker_addr)
        result.update(_probe(f"{local}:{cfg.listen_port}"))
    render(result, output)
    if pid is None:
        raise typer.Exit(3)


def _probe(addr: str) -> dict[str, Any]:
    """A few GET_BROKER_RUNTIME_INFO figures; `reachable: false` when the broker does not answer."""
    from daemon.remoting.errors import RemotingError
    from mqctl.admin.client import run_admin

    try:
        table = run_admin([], lambda admin: admin.broker_runtime_info(addr), timeout=3.0)
    except RemotingError:
        return {"reachable": False}
    return {
        "reachable": True,
        "version": table.get("brokerVersionDesc"),
        "put_tps": table.get("putTps", "").split(" ")[0],
        "get_tps": table.get("getTransferedTps", "").split(" ")[0],
        "commit_log_max_offset": int(table.get("commitLogMaxOffset", "0")),
        "disk_ratio": float(table.get("commitLogDiskRatio", "0")),
        "uptime": table.get("runtime"),
    }


ha_app = typer.Typer(help="Master/slave replication.", no_args_is_help=True)
app.add_typer(ha_app, name="ha")


@ha_app.command("status")
def ha_status(
    cluster: ClusterOpt = None,
    broker: BrokerAddrOpt = None,
    namesrv: NamesrvOpt = None,
    context: ContextOpt = None,
    output: OutputOpt = "table",
) -> None:
    """Each broker's role and replication: a master's slaves and acked offset, a slave's master and
    offset, and the lag behind the group's master in bytes."""
    from mqctl.services.ha import ha_status as status_of

    online(lambda admin: status_of(admin, cluster, broker), namesrv=namesrv, context=context, output=output)


@app.command("clean")
def clean(
    broker: BrokerAddrOpt = None,
    cluster: ClusterOpt = None,
    execute: ExecuteOpt = False,
    wait: Annotated[
        float,
        typer.Option(
            "--wait", min=0, help="With --execute: seconds to watch the broker delete (it runs every 10 s)."
        ),
    ] = 30.0,
    namesrv: NamesrvOpt = None,
    context: ContextOpt = None,
    output: OutputOpt = "table",
) -> None:
    """Show what the broker's retention would delete now; with --execute trigger it (DELETE_EXPIRED_COMMITLOG).

    The plan comes from the broker itself (a dry run of the same policy its clean service applies): every
    CommitLog file with size, age and why it goes (expired / watermark), and the groups that would lose
    unconsumed messages. The trigger deletes expired files at the broker's next cleanup runs, and unexpired
    ones only above the force watermark. A RocketMQ broker has no plan request: the same plan is then
    estimated from standard requests (file ages from message store times, counts from offset searches).
    """
    from mqctl.admin.client import Admin, run_admin
    from mqctl.cli.store import show_clean_report
    from mqctl.config import resolve_target
    from mqctl.services.retention import CleanReport, broker_clean
    from mqctl.services.topics import target_masters

    async def work(admin: Admin) -> list[CleanReport]:
        return [
            await broker_clean(admin, addr, execute=execute, wait=wait)
            for addr in await target_masters(admin, cluster, broker)
        ]

    target = resolve_target(namesrv_flag=namesrv, context_flag=context)
    for rep in run_admin(target.namesrv, work):
        show_clean_report(rep, output)


config_app = typer.Typer(help="Read and change a running broker's settings (RocketMQ key names).", no_args_is_help=True)
app.add_typer(config_app, name="config")


@config_app.command("get")
def config_get(
    keys: Annotated[list[str] | None, typer.Argument(help="Settings to show, e.g. fileReservedTime (default: all).")] = None,
    cluster: ClusterOpt = None,
    broker: BrokerAddrOpt = None,
    namesrv: NamesrvOpt = None,
    context: ContextOpt = None,
    output: OutputOpt = "table",
) -> None:
    """Show settings of one broker (--broker) or of every master of the cluster."""
    from mqctl.services.broker_config import get

    online(lambda admin: get(admin, cluster=cluster, broker=broker, keys=keys or []),
           namesrv=namesrv, context=context, output=output)


@config_app.command("set")
def config_set(
    settings: Annotated[list[str], typer.Argument(help="key=value pairs, e.g. fileReservedTime=48.")],
    cluster: ClusterOpt = None,
    broker: BrokerAddrOpt = None,
    namesrv: NamesrvOpt = None,
    context: ContextOpt = None,
    output: OutputOpt = "table",
) -> None:
    """Change settings at run time (UPDATE_BROKER_CONFIG); prints old -> new per broker.

    The broker also writes them into its -c file (or <store>/config/broker.properties), so they survive a restart.
    """
    from mqctl.services.broker_config import parse_assignments, set_

    changes = parse_assignments(settings)
    online(lambda admin: set_(admin, cluster=cluster, broker=broker, changes=changes),
           namesrv=namesrv, context=context, output=output)
