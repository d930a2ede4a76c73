"""``mqctl broker``: run a broker from a RocketMQ ``broker.conf``, stop it, show its status."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from mqctl.cli.common import OutputOpt

app = typer.Typer(help="Run and manage a broker (RocketMQ broker.conf files work as they are).", no_args_is_help=True)

ConfigOpt = Annotated[
    Path | None, typer.Option("--config", "-c", help="RocketMQ broker.conf (properties) file.", exists=True, dir_okay=False)
]
StoreOpt = Annotated[Path | None, typer.Option("--store", help="Store root dir (storePathRootDir); beats the config file.")]


def _load(config: Path | None, overrides: dict[str, Any]) -> Any:
    from daemon.broker.config import BrokerConfig
    from daemon.config import load_config

    return load_config(BrokerConfig, config, overrides=overrides)


@app.command("start")
def start(
    config: ConfigOpt = None,
    namesrv: Annotated[str | None, typer.Option("--namesrv", "-n", help="NameServers HOST:PORT[;HOST:PORT] (namesrvAddr).")] = None,
    port: Annotated[int | None, typer.Option("--port", "-p", help="Listen port (listenPort, default 10911).")] = None,
    store: StoreOpt = None,
    metrics_port: Annotated[int | None, typer.Option("--metrics-port", help="Prometheus port (metricsPort, default 5557).")] = None,
    no_metrics: Annotated[bool, typer.Option("--no-metrics", help="Do not serve /metrics and /healthz.")] = False,
    print_config: Annotated[bool, typer.Option("--print-config", help="Print the effective configuration and exit.")] = False,
    daemon: Annotated[bool, typer.Option("--daemon", "-d", help="Detach; logs go to <store>/logs/broker.log.")] = False,
) -> None:
    """Start a broker in the foreground (Ctrl-C stops it cleanly) or, with --daemon, in the background."""
    import logging
    import sys

    from daemon.broker import runner
    from daemon.config import to_properties
    from mqctl.errors import ConflictError, MqctlError
    from mqctl.output import stderr_console

    cfg = _load(
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
        sys.stdout.write(to_properties(cfg))
        return
    pid_path = runner.pid_file(cfg.store_path_root_dir)
    running = runner.read_pid(pid_path)
    if running is not None:
        raise ConflictError(f"a broker (pid {running.pid}, {running.addr}) already runs on {cfg.store_path_root_dir}")
    if daemon:
        log_path = Path(cfg.store_path_root_dir) / "logs" / "broker.log"
        if not runner.daemonize(log_path):
            if not runner.wait_for(lambda: runner.read_pid(pid_path) is not None, 30.0):
                raise MqctlError(f"the broker did not start; see {log_path}")
            info = runner.read_pid(pid_path)
            assert info is not None
            stderr_console().print(f"broker started: pid {info.pid}, listening on {info.addr}, log {log_path}")
            return
    logging.getLogger().setLevel(logging.INFO)
    if daemon:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True)
    runner.run_broker(cfg)


@app.command("stop")
def stop(config: ConfigOpt = None, store: StoreOpt = None) -> None:
    """Stop the broker running on this store (SIGTERM, then wait for a clean shutdown)."""
    from daemon.broker import runner
    from mqctl.errors import MqctlError, NotFoundError
    from mqctl.output import stderr_console

    cfg = _load(config, {"store_path_root_dir": str(store) if store else None})
    info = runner.read_pid(runner.pid_file(cfg.store_path_root_dir))
    if info is None:
        raise NotFoundError(f"no broker is running on {cfg.store_path_root_dir}")
    if not runner.stop_process(info.pid):
        raise MqctlError(f"broker pid {info.pid} did not stop within 30 s")
    stderr_console().print(f"broker pid {info.pid} stopped")


@app.command("status")
def status(config: ConfigOpt = None, store: StoreOpt = None, output: OutputOpt = "table") -> None:
    """Whether a broker runs on this store, and its address, version, TPS and offsets when it does."""
    from daemon.broker import runner
    from mqctl.output import render

    cfg = _load(config, {"store_path_root_dir": str(store) if store else None})
    info = runner.read_pid(runner.pid_file(cfg.store_path_root_dir))
    result: dict[str, Any] = {"state": "stopped", "store": cfg.store_path_root_dir}
    if info is not None:
        result.update(state="running", pid=info.pid, address=info.addr)
        result.update(_runtime(info.addr))
    render(result, output)
    if info is None:
        raise typer.Exit(3)


def _runtime(addr: str) -> dict[str, Any]:
    """A few GET_BROKER_RUNTIME_INFO figures; empty when the broker does not answer."""
    import asyncio

    from daemon.remoting.bodies import KVTable
    from daemon.remoting.client import RemotingClient
    from daemon.remoting.codes import RequestCode
    from daemon.remoting.command import RemotingCommand
    from daemon.remoting.errors import RemotingError

    async def fetch() -> dict[str, str]:
        async with RemotingClient() as client:
            response = await client.invoke_checked(addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), 3.0)
            return KVTable.loads(response.body).table

    try:
        table = asyncio.run(fetch())
    except RemotingError:
        return {"reachable": False}
    return {
        "reachable": True,
        "version": table.get("brokerVersionDesc"),
        "put_tps": table.get("putTps", "").split(" ")[0],
        "get_tps": table.get("getTransferedTps", "").split(" ")[0],
        "commit_log_max_offset": table.get("commitLogMaxOffset"),
        "disk_ratio": table.get("commitLogDiskRatio"),
        "uptime": table.get("runtime"),
    }
