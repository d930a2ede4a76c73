"""``mqctl broker``: run a broker from a RocketMQ ``broker.conf``, stop it, show its status."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from mqctl.cli.common import (
    BrokerAddrOpt,
    ClusterOpt,
    ExecuteOpt,
    ExistingPath,
    YesOpt,
    check_port_flags,
    cluster_options,
    cluster_target,
    confirm,
    flags,
    online,
    parse_listen,
    request_timeout,
)
from mqctl.cli.daemons import local_host
from mqctl.completion import complete_cluster

if TYPE_CHECKING:
    from daemon.broker.broker import Broker
    from daemon.broker.config import BrokerConfig
    from mqctl.services.processes import Running

app = typer.Typer(no_args_is_help=True)  # its help: NOUNS in mqctl.cli.app

#: Kept in the store root: one broker per store (the store lock enforces it anyway).
PID_FILE = "broker.pid"
#: In the store dir while a broker mqctl started serves it: the address it really listens on (a port 0 or
#: 'up --broker-port' is not in any config file), for 'broker status'.
ADDR_FILE = "broker.addr"
LOG_FILE = "logs/broker.log"

ConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--config",
        "-c",
        help="RocketMQ broker.conf (properties) file.",
        click_type=ExistingPath(dir_okay=False),
    ),
]
StoreOpt = Annotated[
    Path | None,
    typer.Option("--store", help="Store root dir (storePathRootDir; default <data dir>/store, as mqctl up)."),
]


def load(config: Path | None, overrides: dict[str, Any]) -> BrokerConfig:
    """Defaults → broker.conf (else the store's broker.properties) → MQCTL_* environment → flags.

    Without a config file, --store or $MQCTL_STORE_PATH_ROOT_DIR the store is ``<data dir>/store``, the
    one ``mqctl up`` uses, so ``broker status``/``stop`` find the broker ``up`` started.
    """
    import os

    from daemon.broker.config import load_broker_config
    from mqctl.config import data_dir

    implicit = config is None and overrides.get("store_path_root_dir") is None
    if implicit and "MQCTL_STORE_PATH_ROOT_DIR" not in os.environ:
        overrides = {**overrides, "store_path_root_dir": str(data_dir() / "store")}
    return load_broker_config(config, overrides)


@app.command("start")
def start(
    config: ConfigOpt = None,
    namesrv: Annotated[
        str | None, typer.Option("--namesrv", "-n", help="NameServers HOST:PORT[;HOST:PORT] (namesrvAddr).")
    ] = None,
    listen: Annotated[
        str | None,
        typer.Option(
            "--listen",
            help="HOST:PORT to listen on (listenHost/listenPort, default 127.0.0.1:10911, or every interface "
            "when brokerIP1 is set).",
        ),
    ] = None,
    port: Annotated[
        int | None,
        typer.Option("--port", "-p", help="Listen port (listenPort, default 10911); see --listen."),
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
    grpc_port: Annotated[
        int | None,
        typer.Option(
            "--grpc-port",
            help="gRPC port for the official 5.x clients (grpcListenPort, default 8081; needs the grpc extra).",
        ),
    ] = None,
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
    from mqctl.errors import UsageError

    check_port_flags({"--port": port, "--metrics-port": metrics_port, "--grpc-port": grpc_port})
    if listen is not None and port is not None:
        raise UsageError("give --listen HOST:PORT or --port, not both")
    host, listen_port = parse_listen(listen) if listen is not None else (None, port)
    cfg = load(
        config,
        {
            "namesrv_addr": namesrv,
            "listen_host": host,
            "listen_port": listen_port,
            "store_path_root_dir": str(store) if store else None,
            "metrics_port": metrics_port,
            "metrics_enable": False if no_metrics else None,
            "grpc_listen_port": grpc_port,
        },
    )
    cfg.check_store_roles()  # only here: 'broker status|stop' read the same file without refusing it
    if print_config:
        typer.echo(to_properties(cfg, mark_inert=True, mask_secrets=True, derived=cfg.derived()), nl=False)
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
        describe=lambda broker: (
            f"broker {cfg.broker_name} {broker.listening()}, registered as {note_address(broker)}"
        ),
        cleanup=lambda: (Path(cfg.store_path_root_dir) / ADDR_FILE).unlink(missing_ok=True),
        port_flags={"--listen" if listen else "--port": cfg.listen_port, "--metrics-port": cfg.metrics_port},
    )


@app.command("stop")
def stop(
    config: ConfigOpt = None,
    store: StoreOpt = None,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for a graceful exit.")] = 30.0,
    whole_up: Annotated[
        bool,
        typer.Option(
            "--whole-up",
            help="The store is one of 'mqctl up''s: stop that up, its NameServer and every broker it runs "
            "(without it, exit 4 naming them).",
        ),
    ] = False,
) -> None:
    """Stop the broker running on a store, whoever started it (found by pid file, store lock or port):
    SIGTERM, then wait for a clean shutdown. A store 'mqctl up' hosts is refused unless --whole-up."""
    from mqctl.output import stderr_console

    cfg = load(config, {"store_path_root_dir": str(store) if store else None})
    hosted: list[str] = []
    running = stop_running(cfg, timeout, whole_up=whole_up, hosted=hosted)
    if running is None:
        stderr_console().print(f"no broker is running on {cfg.store_path_root_dir}")
        return
    if hosted:
        stderr_console().print(f"stopped mqctl up (pid {running.pid}): {', '.join(hosted)}")
        return
    stderr_console().print(f"stopped broker (pid {running.pid}, {running.process or 'unknown process'})")


def stop_running(
    cfg: BrokerConfig, timeout: float, *, whole_up: bool = False, hosted: list[str] | None = None
) -> Running | None:
    """Stop the broker running on ``cfg``'s store, whoever started it: what was stopped, None when none runs.
    A store of 'mqctl up' is refused unless ``whole_up`` (then ``hosted`` gets what that up ran)."""
    from mqctl.cli.daemons import hosted_by_up, terminate

    running = _running(cfg)
    if running is None:
        return None
    up = hosted_by_up(Path(cfg.store_path_root_dir), running, what="broker store", whole=whole_up)
    if up is not None and hosted is not None:
        hosted.extend(up)
    terminate(
        running, cfg.listen_port, main_class="BrokerStartup", name="broker", what="broker", timeout=timeout
    )
    return running


def note_address(broker: Broker) -> str:
    """Record where ``broker`` listens in its store (:data:`ADDR_FILE`: its address, then ``metrics=URL``
    and ``grpc=HOST:PORT`` for the listeners it runs) and return the address."""
    host = broker.addr.rpartition(":")[0]
    lines = [broker.addr]
    if broker.metrics_port:
        lines.append(f"metrics=http://{host}:{broker.metrics_port}/metrics")
    if broker.grpc is not None:
        lines.append(f"grpc={host}:{broker.grpc.port}")
    (Path(broker.config.store_path_root_dir) / ADDR_FILE).write_text("".join(f"{line}\n" for line in lines))
    return broker.addr


def noted_address(store: Path) -> tuple[str, dict[str, str]] | None:
    """What :func:`note_address` recorded in ``store``: the address and the other listeners by name
    (``metrics``, ``grpc``); None while no broker has recorded one."""
    try:
        first, *rest = (store / ADDR_FILE).read_text().splitlines()
    except (FileNotFoundError, ValueError):  # not written yet, or empty: written, not yet flushed
        return None
    pairs = (line.partition("=") for line in rest)
    return first.strip(), {name: value.strip() for name, sep, value in pairs if sep}


def _running(cfg: BrokerConfig) -> Running | None:
    from mqctl.services.processes import find_running

    return find_running(
        Path(cfg.store_path_root_dir) / PID_FILE,
        store_root=cfg.store_path_root_dir,
        host=local_host(cfg.listen_host),
        port=cfg.listen_port,
    )


@app.command("status")
@cluster_options()
def status(
    config: ConfigOpt = None,
    store: StoreOpt = None,
    broker: BrokerAddrOpt = None,
    cluster: Annotated[
        str | None,
        typer.Option(
            "--cluster",
            help="Every master of this cluster, over the wire, as cluster status reads them (-c is "
            "--config here, as mqbroker's).",
            autocompletion=complete_cluster,
        ),
    ] = None,
) -> None:
    """Whether a broker runs on a store, whoever started it (found by pid file, store lock or listen
    port) and which process it is; its address, version, TPS and offsets when it answers (exit 3 when
    stopped).

    With -b HOST:PORT (or --cluster NAME: every master) the broker is asked over the wire instead, from
    any host, signed and over TLS as the other commands: the same fields from its runtime info and
    config, and its cluster, name and id; not the process (pid, detected_by, process), which only its
    own host can see. One that does not answer is an error (exit 5; refused under ACL: 9)."""
    from mqctl.errors import UsageError
    from mqctl.output import render
    from mqctl.services.processes import masters_status, probe, wire_status

    if broker is not None or cluster is not None:
        if config is not None or store is not None:
            raise UsageError(
                "give -b/--cluster (a broker over the wire) or --config/--store (local), not both"
            )
        if broker is not None:
            online(lambda admin: wire_status(admin, broker))
        else:
            online(lambda admin: masters_status(admin, cluster))
        return
    cfg = load(config, {"store_path_root_dir": str(store) if store else None})
    running = _running(cfg)
    result: dict[str, Any] = {"state": "stopped", "store": cfg.store_path_root_dir}
    if running is not None:
        noted = noted_address(Path(cfg.store_path_root_dir))
        listeners: dict[str, str] = {}
        if running.detected_by != "port" and noted is not None:  # the store's own broker: where it listens
            address = probe_at = noted[0]
            listeners = noted[1]
        else:
            address, probe_at = cfg.broker_addr, f"{local_host(cfg.listen_host)}:{cfg.listen_port}"
        result.update(state="running", **running.fields(), address=address, **listeners)
        result.update(probe(probe_at, "broker"))
    render(result, flags().output)
    if running is None:
        raise typer.Exit(3)


ha_app = typer.Typer(help="Replication: master/slave, or a DLedger group.", no_args_is_help=True)
app.add_typer(ha_app, name="ha")


@ha_app.command("status")
@cluster_options()
def ha_status(
    cluster: ClusterOpt = None,
    broker: BrokerAddrOpt = None,
) -> None:
    """Each broker's role and replication: a master's slaves and a slave's master by the broker address
    they registered (a master with none connected says why: no slave connected, or none registered), and
    the lag behind the group's master in bytes and seconds. -o wide adds the offsets, the HA connections'
    addresses and the DLedger fields; JSON and YAML hold every field."""
    from mqctl.services.ha import ha_status as status_of

    online(lambda admin: status_of(admin, cluster, broker))


@ha_app.command("transfer")
@cluster_options()
def ha_transfer(
    to: Annotated[str, typer.Option("--to", help="The DLedger member to lead (n0, n1, ...).")],
    cluster: ClusterOpt = None,
    broker: BrokerAddrOpt = None,
    force: Annotated[
        bool,
        typer.Option("--force", help="Hand over even if --to lacks topics or groups the leader has."),
    ] = False,
    member_ca: Annotated[
        Path | None,
        typer.Option(
            "--member-ca",
            dir_okay=False,
            help="Under haTls: the CA the DLedger channel's certificates are verified with (member-ca.pem "
            "with tls.member.trustCertPath); the NameServers and brokers keep the global --ca.",
        ),
    ] = None,
    member_cert: Annotated[
        Path | None,
        typer.Option(
            "--member-cert",
            dir_okay=False,
            help="Under haTls: a member's certificate for the DLedger channel (server.pem, or member.pem).",
        ),
    ] = None,
    member_key: Annotated[
        Path | None, typer.Option("--member-key", dir_okay=False, help="Its private key.")
    ] = None,
) -> None:
    """DLedger mode: hand the group's leadership (and so its master role) to member --to, once it holds
    the leader's log (DLedger's leadership transfer; the leader refuses sends meanwhile).

    Topics and groups are no part of the Raft log: a member copies them from the master every 10 s. The
    transfer first waits (up to 15 s) until --to holds the leader's; else it is refused (exit 4)."""
    from mqctl.services.ha import transfer
    from mqctl.tls import TlsOptions

    channel = None
    if member_ca or member_cert or member_key:  # the global --ca/--cert/--key stay the cluster's
        channel = TlsOptions(
            str(member_ca) if member_ca else None,
            str(member_cert) if member_cert else None,
            str(member_key) if member_key else None,
        )
    online(
        lambda admin: transfer(admin, to, cluster, broker, force=force, channel=channel),
        timeout=20.0,
        changes=True,
    )


@app.command("clean")
@cluster_options()
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
    yes: YesOpt = False,
) -> None:
    """Show what the broker's retention would delete now; with --execute trigger it (DELETE_EXPIRED_COMMITLOG).

    --execute asks first, showing the plan, on a terminal; off one it needs --yes.

    The plan comes from the broker itself (a dry run of the same policy its clean service applies): every
    CommitLog file with size, age and why it goes (expired / watermark), and the groups that would lose
    unconsumed messages. The trigger deletes expired files at the broker's next cleanup runs, and unexpired
    ones only above the force watermark. A RocketMQ broker has no plan request: the same plan is then
    estimated from standard requests (file ages from message store times, counts from offset searches).
    """
    from mqctl.admin.client import Admin, run_admin
    from mqctl.cli.store import show_clean_report
    from mqctl.services.retention import CleanReport, broker_clean
    from mqctl.services.topics import target_masters

    async def work(admin: Admin, run: bool) -> list[CleanReport]:
        return [
            await broker_clean(admin, addr, execute=run, wait=wait)
            for addr in await target_masters(admin, cluster, broker)
        ]

    target = cluster_target()
    seconds = request_timeout(5.0, target)
    if execute:
        if not yes and sys.stdin.isatty():  # the question comes with the plan it is about
            for rep in run_admin(target.namesrv, lambda admin: work(admin, False), timeout=seconds):
                show_clean_report(rep, "table", to_stderr=True)
        confirm("Trigger the broker's retention (DELETE_EXPIRED_COMMITLOG) now?", yes=yes)
    for rep in run_admin(target.namesrv, lambda admin: work(admin, execute), timeout=seconds):
        show_clean_report(rep, flags().output)


BrokerNameArg = Annotated[str, typer.Argument(help="Broker group name (brokerName), e.g. broker-a.")]


@app.command("wipe-write-perm")
@cluster_options()
def wipe_write_perm(broker_name: BrokerNameArg) -> None:
    """Stop producers writing to a broker group (mqadmin wipeWritePerm), e.g. before taking it down:
    every NameServer takes the write permission off its topics in the routes, so producers send to the
    other groups while consumers still drain it. add-write-perm gives it back.

    The routes change, not the broker: its next registration that carries changed topics (a topic
    created or updated there, a restart) brings its own permissions back. For a lasting read-only broker:
    'mqctl broker config set brokerPermission=4'."""
    from mqctl.services.cluster import set_write_perm

    online(lambda admin: set_write_perm(admin, broker_name, allow=False), changes=True)


@app.command("add-write-perm")
@cluster_options()
def add_write_perm(broker_name: BrokerNameArg) -> None:
    """Let producers write to a broker group again (mqadmin addWritePerm): every NameServer sets its
    topics' permission in the routes to read and write."""
    from mqctl.services.cluster import set_write_perm

    online(lambda admin: set_write_perm(admin, broker_name, allow=True), changes=True)


config_app = typer.Typer(
    help="Read and change a running broker's settings (RocketMQ key names).", no_args_is_help=True
)
app.add_typer(config_app, name="config")


@config_app.command("get")
@cluster_options()
def config_get(
    keys: Annotated[
        list[str] | None, typer.Argument(help="Settings to show, e.g. fileReservedTime (default: all).")
    ] = None,
    cluster: ClusterOpt = None,
    broker: BrokerAddrOpt = None,
) -> None:
    """Show settings of one broker (--broker) or of every master of the cluster."""
    from mqctl.services.broker_config import get

    online(lambda admin: get(admin, cluster=cluster, broker=broker, keys=keys or []))


@config_app.command("set")
@cluster_options()
def config_set(
    settings: Annotated[list[str], typer.Argument(help="key=value pairs, e.g. fileReservedTime=48.")],
    cluster: ClusterOpt = None,
    broker: BrokerAddrOpt = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Allow fileReservedTime under 1 h, diskSpaceCleanForciblyRatio under 85 or maxMessageSize "
            "under 1 KiB (the next cleanup may delete unread files); the broker takes it, and any lower "
            "retention, only admin-signed (ACL on) or from its own host (ACL off).",
        ),
    ] = False,
) -> None:
    """Change settings at run time (UPDATE_BROKER_CONFIG); prints old -> new per broker.

    The broker also writes them into its -c file (or <store>/config/broker.properties), so they survive a restart.
    Keys that move data or listeners (store paths, file sizes, ports, broker identity) or lower the broker's
    defences (protectedMode, namesrvAddr, the remoting caps...) are refused: edit the file.
    """
    from mqctl.services.broker_config import parse_assignments, set_

    changes = parse_assignments(settings)
    online(
        lambda admin: set_(admin, cluster=cluster, broker=broker, changes=changes, force=force), changes=True
    )
