"""``mqctl up``: a local NameServer and broker groups (a master, optionally with slaves) on embedded defaults,
in the foreground.

Every listener (NameServer, broker, metrics) binds loopback unless ``--listen`` widens it: the
broker has no authentication, so a development command must not offer it to the network.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from daemon.broker.broker import Broker
    from daemon.namesrv.controller import NamesrvController

app = typer.Typer(
    help="Run a local NameServer and broker groups on embedded defaults (Ctrl-C stops them all)."
)


class LocalCluster:
    """NameServer first, then the brokers registered with it (reaching it at `host`), the master before
    its slaves; stopped in the reverse order."""

    def __init__(self, namesrv: NamesrvController, brokers: list[Broker], host: str) -> None:
        self.namesrv = namesrv
        self.brokers = brokers
        self.host = host
        self._started: list[Broker] = []

    async def start(self) -> None:
        await self.namesrv.start()
        try:
            for broker in self.brokers:
                broker.config.namesrv_addr = f"{self.host}:{self.namesrv.port}"
                await broker.start()
                self._started.append(broker)
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        try:
            while self._started:
                await self._started.pop().stop()  # unregisters from the NameServer first
        finally:
            await self.namesrv.stop()


@app.callback(invoke_without_command=True)
def up(
    data: Annotated[
        Path | None,
        typer.Option("--data", help="Data dir: <DIR>/store and <DIR>/namesrv (default: the user data dir)."),
    ] = None,
    listen: Annotated[
        str,
        typer.Option(
            "--listen",
            help="HOST[:PORT] every listener binds, PORT being the NameServer's, as 'namesrv start --listen' "
            "(0.0.0.0 opens the unauthenticated broker to the network).",
        ),
    ] = "127.0.0.1",
    namesrv_port: Annotated[
        int | None, typer.Option("--namesrv-port", help="NameServer port (default 9876); see --listen.")
    ] = None,
    broker_port: Annotated[int, typer.Option("--broker-port", help="Broker port.")] = 10911,
    metrics_port: Annotated[
        int, typer.Option("--metrics-port", help="Broker /metrics and /healthz port.")
    ] = 5557,
    no_metrics: Annotated[
        bool, typer.Option("--no-metrics", help="Do not serve /metrics and /healthz.")
    ] = False,
    grpc_port: Annotated[
        int | None,
        typer.Option(
            "--grpc-port",
            help="gRPC port of the first master for the official 5.x clients (grpcListenPort, default 8081; "
            "the next groups' masters take the following ports; 0: free ones). Needs the grpc extra.",
        ),
    ] = None,
    slaves: Annotated[
        int,
        typer.Option(
            "--slaves",
            min=0,
            max=16,
            help="Slaves of each broker group: slave i of broker-a listens on broker port + 4i (its HA port "
            "one above, its VIP port two below), metrics port + i, data in <DIR>/store-slave<i>.",
        ),
    ] = 0,
    groups: Annotated[
        int,
        typer.Option(
            "--brokers",
            min=1,
            max=26,
            help="Broker groups broker-a, broker-b, ...: each group's master and slaves take the next ports "
            "in the same sequence; broker-b's data in <DIR>/store-broker-b and <DIR>/store-broker-b-slave<i>.",
        ),
    ] = 1,
    tls: Annotated[
        bool,
        typer.Option(
            "--tls",
            help="Serve TLS only (tls.server.mode=enforcing), with a CA and certificates 'mqctl tls init' writes "
            "once in <DIR>/tls; brokers register and replicate over TLS too.",
        ),
    ] = False,
) -> None:
    """Run a local NameServer and broker groups (cluster DefaultCluster, broker-a, ..., ASYNC_MASTER) until Ctrl-C."""
    import logging

    from daemon.broker.broker import Broker
    from daemon.broker.config import BrokerConfig, load_broker_config, local_ip
    from daemon.config import load_config
    from daemon.lifecycle import serve
    from daemon.namesrv.config import NamesrvConfig
    from daemon.namesrv.controller import NamesrvController
    from daemon.remoting.loop import run
    from mqctl.cli.broker import ADDR_FILE as BROKER_ADDR, note_address
    from mqctl.cli.namesrv import ADDR_FILE
    from mqctl.config import data_dir
    from mqctl.output import stderr_console

    listen, namesrv_port, namesrv_flag = _split_listen(listen, namesrv_port)
    root = data or data_dir()
    root_logger = logging.getLogger()
    if root_logger.level > logging.INFO:
        root_logger.setLevel(logging.INFO)
    wildcard = listen in ("0.0.0.0", "::", "")
    # where clients (and the broker, registering) connect: this host's address when listening everywhere
    host = local_ip() if wildcard else listen
    tls_keys = _tls_settings(root / "tls") if tls else {}
    namesrv = NamesrvController(
        NamesrvConfig(listen_host=listen, listen_port=namesrv_port, data_dir=root / "namesrv", **tls_keys)
    )

    def member(group: int, broker_id: int) -> Broker:
        """Ports in sequence over every group's members (0 stays 0: ephemeral); the master is id 0, slaves
        1..N; broker-a keeps the data dirs it had before there were groups."""
        step = group * (slaves + 1) + broker_id
        name = f"broker-{chr(ord('a') + group)}"
        store = "store" + (f"-{name}" if group else "") + (f"-slave{broker_id}" if broker_id else "")
        return Broker(
            load_broker_config(
                None,
                {
                    "broker_name": name,
                    "broker_id": broker_id,
                    "broker_role": "SLAVE" if broker_id else "ASYNC_MASTER",
                    "broker_ip1": host,
                    "listen_host": listen,
                    # each broker takes listenPort - 2 (VIP), listenPort and listenPort + 1 (HA)
                    "listen_port": broker_port + 4 * step if broker_port else 0,
                    "store_path_root_dir": str(root / store),
                    "metrics_enable": not no_metrics,
                    "metrics_port": metrics_port + step if metrics_port else 0,
                    # masters only serve gRPC (5.x clients read and write masters)
                    "grpc_listen_port": grpc_base + group if grpc_base and broker_port else 0,
                    **tls_keys,
                    **({"tls_enable": True, "ha_tls": True} if tls else {}),
                },
            )
        )

    # the flag, else MQCTL_GRPC_LISTEN_PORT, else 8081
    grpc_base = grpc_port if grpc_port is not None else load_config(BrokerConfig).grpc_listen_port
    brokers = [member(g, i) for g in range(groups) for i in range(slaves + 1)]
    broker = brokers[0]
    cluster = LocalCluster(namesrv, brokers, host)

    def started() -> None:
        (root / "namesrv" / ADDR_FILE).write_text(f"{host}:{namesrv.port}\n")  # for 'namesrv status'
        for each in brokers:
            note_address(each)  # for 'broker status --store DIR'
        metrics = f", metrics http://{host}:{broker.metrics_port}/metrics" if broker.metrics_port else ""
        front = broker.grpc
        metrics += f", gRPC (5.x clients) {host}:{front.port}" if front is not None else ""
        everywhere = f" (listening on all interfaces; {broker.protection.describe()})" if wildcard else ""
        extra = "".join(
            f", {'slave' if b.config.broker_id else b.config.broker_name} {b.addr}" for b in brokers[1:]
        )
        stderr_console().print(
            f"ready: NameServer {host}:{namesrv.port}, broker {broker.addr}{extra}{metrics}{everywhere}; "
            f"data in {root}. Ctrl-C stops {'both' if len(brokers) == 1 else 'all'}."
        )
        if tls:
            stderr_console().print(
                f"TLS only; connect with: mqctl context add local-tls -n {host}:{namesrv.port} "
                f"--ca {root / 'tls' / 'ca.pem'} --use"
            )

    from daemon.lifecycle import PidFile
    from mqctl.cli.broker import PID_FILE as BROKER_PID
    from mqctl.cli.daemons import busy_ports
    from mqctl.cli.namesrv import PID_FILE as NAMESRV_PID

    ports = {namesrv_flag: namesrv_port, "--broker-port": broker_port, "--metrics-port": metrics_port}
    # the pidfiles 'broker status|stop' and 'namesrv status|stop' look for in the same data dir
    try:
        with busy_ports(ports), PidFile(root / "store" / BROKER_PID), PidFile(root / "namesrv" / NAMESRV_PID):
            run(serve(cluster, on_started=started))
    finally:
        (root / "namesrv" / ADDR_FILE).unlink(missing_ok=True)
        for each in brokers:
            (Path(each.config.store_path_root_dir) / BROKER_ADDR).unlink(missing_ok=True)


def _tls_settings(directory: Path) -> dict[str, Any]:
    """The daemons' `tls.*` settings for `up --tls`: enforcing, on the certificates in `directory` (made
    by `mqctl tls init` the first time)."""
    from mqctl.cli.tls import write_certificates

    if not (directory / "server.pem").exists():
        write_certificates(directory, None, force=True)
    return {
        "tls_server_mode": "enforcing",
        "tls_server_cert_path": str(directory / "server.pem"),
        "tls_server_key_path": str(directory / "server.key"),
        "tls_server_trust_cert_path": str(directory / "ca.pem"),
        "tls_client_trust_cert_path": str(directory / "ca.pem"),
        "tls_test_mode_enable": False,
    }


def _split_listen(listen: str, namesrv_port: int | None) -> tuple[str, int, str]:
    """``--listen`` as HOST alone or HOST:PORT (``[v6]:PORT``; a bare IPv6 address is a host) with
    ``--namesrv-port``: (host, NameServer port, the flag that set the port, for a busy-port error)."""
    from mqctl.cli.common import bindable, parse_listen
    from mqctl.errors import UsageError

    if listen.startswith("[") or listen.count(":") == 1:
        host, port = parse_listen(listen)
        if namesrv_port is not None and namesrv_port != port:
            raise UsageError(f"--listen {listen} and --namesrv-port {namesrv_port} name different ports")
        return host, port, "--listen"
    return bindable(listen), 9876 if namesrv_port is None else namesrv_port, "--namesrv-port"
