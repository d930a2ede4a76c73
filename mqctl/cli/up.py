"""``mqctl up``: a local NameServer and broker groups (a master, optionally with slaves) on embedded defaults,
in the foreground.

Every listener (NameServer, broker, metrics) binds loopback unless ``--listen`` widens it: the
broker has no authentication, so a development command must not offer it to the network.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from mqctl.errors import DaemonError, UsageError

if TYPE_CHECKING:
    import asyncio

    from daemon.broker.broker import Broker
    from daemon.namesrv.controller import NamesrvController

app = typer.Typer()  # its help: NOUNS in mqctl.cli.app


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


class DLedgerGroup:
    """``up --dledger N``: the NameServer in this process, each member of the Raft group a ``broker start``
    child process (so one can be killed alone, the group going on); children stopped with SIGTERM."""

    def __init__(self, namesrv: NamesrvController, confs: list[Path], addrs: list[str], host: str) -> None:
        self.namesrv = namesrv
        self.host = host
        self.confs = confs
        self.addrs = addrs
        self.procs: list[subprocess.Popen[bytes]] = []
        self._watch: asyncio.Task[None] | None = None

    async def start(self) -> None:
        import asyncio
        import sys

        from mqctl.cli.broker import ADDR_FILE, noted_address
        from mqctl.services.processes import port_open

        await self.namesrv.start()
        try:
            for conf in self.confs:
                (conf.parent / ADDR_FILE).unlink(missing_ok=True)  # a killed run's: not this member's
                text = conf.read_text().splitlines(keepends=True)
                text = [line for line in text if not line.startswith("namesrvAddr=")]
                conf.write_text("".join(text) + f"namesrvAddr={self.host}:{self.namesrv.port}\n")
                with (conf.parent / "broker.log").open("ab") as out:
                    argv = [sys.executable, "-m", "mqctl", "broker", "start", "-c", str(conf)]
                    self.procs.append(subprocess.Popen(argv, stdout=out, stderr=out))
            for proc, addr, conf in zip(self.procs, self.addrs, self.confs, strict=True):
                host, _, port = addr.rpartition(":")
                for _ in range(600):
                    if proc.poll() is not None:
                        raise DaemonError(
                            f"member {addr} exited (code {proc.returncode}): see {conf.parent}/broker.log"
                        )
                    # listening, and its address file names its other listeners (metrics, gRPC)
                    if noted_address(conf.parent) is not None and await asyncio.to_thread(
                        port_open, host, int(port)
                    ):
                        break
                    await asyncio.sleep(0.1)
                else:
                    raise DaemonError(
                        f"member {addr} did not listen within 60 s: see {conf.parent}/broker.log"
                    )
            await self._elected()
        except BaseException:
            await self.stop()
            raise
        self._watch = asyncio.create_task(watch_members(self.procs, self.addrs, self.confs))

    async def _elected(self) -> None:
        """Ready only when the group can take sends: a member registered as its master. A new group's
        members first ask each other whether it has a history (docs/dledger.md), so its first election
        can take a few vote rounds after every member listens."""
        import asyncio

        for _ in range(600):
            for proc, addr, conf in zip(self.procs, self.addrs, self.confs, strict=True):
                if proc.poll() is not None:
                    raise DaemonError(
                        f"member {addr} exited (code {proc.returncode}): see {conf.parent}/broker.log"
                    )
            table = self.namesrv.routes.broker_addr_table
            if any(b.broker_addrs.get(0) in self.addrs for b in table.values()):
                return
            await asyncio.sleep(0.1)
        raise DaemonError("the group elected no master within 60 s: see the members' broker.log")

    async def stop(self) -> None:
        import asyncio

        from daemon.lifecycle import cancel_tasks

        await cancel_tasks([self._watch])  # the members this stop ends are not news
        self._watch = None
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            for _ in range(300):  # a member that has not stopped in 30 s is killed
                if proc.poll() is not None:
                    break
                await asyncio.sleep(0.1)
            else:
                proc.kill()
                proc.wait()
        self.procs = []
        await asyncio.to_thread(stop_restarted, self.confs)
        await self.namesrv.stop()


def stop_restarted(confs: list[Path], timeout: float = 30.0) -> None:
    """Stop each member that runs on its store though not as up's child: one restarted by hand with
    'broker start -c CONF --daemon', as the warning of its exit says to. Ctrl-C stops all: left running,
    it would hold the group's ports and store, and the next 'up' would find them taken."""
    import logging

    from daemon.config import ConfigError
    from mqctl.cli.broker import LOG_FILE, load, stop_running
    from mqctl.errors import MqctlError

    log = logging.getLogger(__name__)
    for conf in confs:
        if not conf.exists():  # (nothing was ever started on it)
            continue
        try:
            cfg = load(conf, {})
            stopped = stop_running(cfg, timeout)
        except (MqctlError, ConfigError, OSError) as exc:  # (another process on its port: not ours to stop)
            log.warning("member %s: not stopped: %s", conf, exc)
            continue
        if stopped is not None:
            log.warning(
                "stopped the member restarted outside up (pid %s, %s; its log %s)",
                stopped.pid,
                conf,
                Path(cfg.store_path_root_dir) / LOG_FILE,
            )


def member_listeners(store: Path) -> str:
    """``, metrics URL, gRPC HOST:PORT``: a member's other listeners, as its address file names them."""
    from mqctl.cli.broker import noted_address

    noted = noted_address(store)
    listeners = noted[1] if noted is not None else {}
    metrics = f", metrics {listeners['metrics']}" if "metrics" in listeners else ""
    return metrics + (f", gRPC (5.x clients) {listeners['grpc']}" if "grpc" in listeners else "")


async def watch_members(
    procs: list[subprocess.Popen[bytes]], addrs: list[str], confs: list[Path], interval: float = 1.0
) -> None:
    """Say once, at WARNING, that a member exited while the group runs (killed, or stopped on a fatal
    failure), and whether the rest still make a majority: nothing else tells whoever watches ``up``'s
    output (the group goes on without it while they do)."""
    import asyncio
    import logging
    import signal

    from mqctl.cli.broker import LOG_FILE

    told: set[int] = set()
    while True:
        for i, (proc, addr, conf) in enumerate(zip(procs, addrs, confs, strict=True)):
            code = proc.poll()
            if code is None or i in told:
                continue
            told.add(i)
            how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
            alive, majority = sum(p.poll() is None for p in procs), len(procs) // 2 + 1
            goes_on = (
                f"the group goes on with {alive} of {len(procs)}"
                if alive >= majority
                else f"{alive} of {len(procs)} left, no majority ({majority}): the group elects no master "
                "and takes no writes until members come back"
            )
            logging.getLogger(__name__).warning(
                "DLedger member n%d %s (pid %d) exited (%s); %s: see %s; start it again with "
                "'mqctl broker start -c %s --daemon' (it then logs in %s)",
                i,
                addr,
                proc.pid,
                how,
                goes_on,
                conf.parent / "broker.log",
                conf,
                conf.parent / LOG_FILE,  # up's conf puts the store beside it: --daemon logs in the store
            )
        await asyncio.sleep(interval)


def dledger_confs(
    root: Path,
    name: str,
    members: int,
    host: str,
    listen: str,
    broker_port: int,
    metrics_port: int | None,
    grpc_port: int = 0,
    tls: dict[str, Any] | None = None,
    acl: dict[str, Any] | None = None,
) -> tuple[list[Path], list[str]]:
    """broker.conf of each member of a DLedger group (4.9.8's keys) in ``<root>/store-<name>-n<i>``: member i
    listens on broker port + 4i and its DLedger port one above (a master/slave broker's HA port), its gRPC
    front on `grpc_port` + i (every member runs one: the role follows the election); port 0 picks a free
    block laid out the same way (the peers must know each other's ports) below the kernel's ephemeral range,
    where no connection on the host takes one before its member binds it. /metrics on `metrics_port` + i (0:
    a free port each, as a master/slave `up` does; None: none). `tls` (`up --tls`'s settings, by
    field name) go in as 4.9.8's keys, with `tls.enable` and `haTls`: clients, registration and the DLedger channel on TLS;
    `acl` (`up --acl`'s) likewise, its secret making the file owner-only."""
    import dataclasses

    from daemon.broker.config import BrokerConfig
    from daemon.config import property_key
    from mqctl.auth import write_secret
    from mqctl.services.ports import free_block

    keys_of = {f.name: property_key(f) for f in dataclasses.fields(BrokerConfig)}
    tls_keys = {
        keys_of[k]: str(v).lower() if isinstance(v, bool) else v
        for k, v in {**(tls or {}), **(acl or {})}.items()
    }
    if tls:
        tls_keys.update({keys_of["tls_enable"]: "true", keys_of["ha_tls"]: "true"})
    first = broker_port or free_block(4 * members + 2) + 2
    ports = [(first + 4 * i, first + 4 * i + 1) for i in range(members)]
    peers = ";".join(f"n{i}-{host}:{raft}" for i, (_, raft) in enumerate(ports))
    confs, addrs = [], []
    for i, (port, _) in enumerate(ports):
        store = root / f"store-{name}-n{i}"
        store.mkdir(parents=True, exist_ok=True)
        keys = {
            "brokerClusterName": "DefaultCluster",
            "brokerName": name,
            "brokerIP1": host,
            "listenHost": listen,
            "listenPort": port,
            "storePathRootDir": store,
            "enableDLegerCommitLog": "true",
            "dLegerGroup": name,
            "dLegerPeers": peers,
            "dLegerSelfId": f"n{i}",
            "metricsEnable": str(metrics_port is not None).lower(),
            "metricsPort": metrics_port + i if metrics_port else 0,
            "grpcListenPort": grpc_port + i if grpc_port and broker_port else 0,
            **tls_keys,
        }
        conf = store / "broker.conf"
        write_secret(
            conf, "".join(f"{k}={v}\n" for k, v in keys.items()).rstrip("\n")
        )  # (0600: acl's secret)
        confs.append(conf)
        addrs.append(f"{host}:{port}")
    return confs, addrs


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
    dledger: Annotated[
        int,
        typer.Option(
            "--dledger",
            min=0,
            max=9,
            help="Run broker-a as a DLedger (Raft) group of this many members instead (3 or 5 survive a loss), "
            "each a child process: member i listens on broker port + 4i, its DLedger port one above, data in "
            "<DIR>/store-broker-a-n<i>; the elected one is the master.",
        ),
    ] = 0,
    tls: Annotated[
        bool,
        typer.Option(
            "--tls",
            help="Serve TLS only (tls.server.mode=enforcing), with a CA and certificates 'mqctl tls init' writes "
            "once in <DIR>/tls; brokers register and replicate over TLS too (mutual TLS: haTls, a --dledger "
            "group's channel included).",
        ),
    ] = False,
    acl: Annotated[
        bool,
        typer.Option(
            "--acl",
            help="Turn ACL on (aclEnable=true) with one admin account in <DIR>/acl/plain_acl.yml, its secret "
            "generated once, alone in the owner-only file <DIR>/acl/admin.secret; prints the context to add. "
            "Slaves and DLedger members sign their requests to the master with it "
            "(innerClientAuthenticationCredentials).",
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
    from mqctl.cli.common import check_port_flags
    from mqctl.cli.daemons import note_up
    from mqctl.cli.namesrv import ADDR_FILE
    from mqctl.config import data_dir
    from mqctl.output import stderr_console

    ports_given = {
        "--namesrv-port": namesrv_port,
        "--broker-port": broker_port,
        "--metrics-port": metrics_port,
    }
    check_port_flags({**ports_given, "--grpc-port": grpc_port})
    listen, namesrv_port, namesrv_flag = _split_listen(listen, namesrv_port)
    root = data or data_dir()
    root_logger = logging.getLogger()
    if root_logger.level > logging.INFO:
        root_logger.setLevel(logging.INFO)
    wildcard = listen in ("0.0.0.0", "::", "")
    # where clients (and the broker, registering) connect: this host's address when listening everywhere
    host = local_ip(ipv6=listen == "::") if wildcard else listen
    tls_keys = _tls_settings(root / "tls") if tls else {}
    acl_keys = _acl_settings(root / "acl") if acl else {}
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
                    **acl_keys,
                },
            )
        )

    noted: list[Path] = []  # the address files this run wrote: a start refused (already running) removes none
    if dledger:
        if slaves or groups > 1:
            raise UsageError("--dledger runs one group of its own members: no --slaves or --brokers")
        confs, addrs = dledger_confs(
            root,
            "broker-a",
            dledger,
            host,
            listen,
            broker_port,
            None if no_metrics else metrics_port,
            grpc_port if grpc_port is not None else load_config(BrokerConfig).grpc_listen_port,
            tls_keys,
            acl_keys,
        )
        group = DLedgerGroup(namesrv, confs, addrs, host)

        def group_started() -> None:
            (root / "namesrv" / ADDR_FILE).write_text(f"{host}:{namesrv.port}\n")
            noted.append(root / "namesrv" / ADDR_FILE)
            members = ", ".join(
                f"n{i} {addr} (pid {p.pid}{member_listeners(conf.parent)})"
                for i, (addr, p, conf) in enumerate(zip(addrs, group.procs, confs, strict=True))
            )
            stderr_console().print(
                f"ready: NameServer {host}:{namesrv.port}, DLedger group broker-a: {members}; logs in "
                f"{root}/store-broker-a-n<i>/broker.log{_signed(root, acl)}. Ctrl-C stops all."
            )
            # the DLedger channel admits members only: 'broker ha transfer' presents a member's pair
            _context_hint(root, f"{host}:{namesrv.port}", tls=tls, acl=acl, member=tls)
            hosts = [f"NameServer {host}:{namesrv.port}"] + [
                f"DLedger member n{i} {addr} (pid {p.pid})"
                for i, (addr, p) in enumerate(zip(addrs, group.procs, strict=True))
            ]
            noted.append(note_up(root, hosts))

        from daemon.lifecycle import PidFile
        from mqctl.cli.daemons import busy_ports
        from mqctl.cli.namesrv import PID_FILE as NAMESRV_PID

        try:
            with busy_ports({namesrv_flag: namesrv_port}), PidFile(root / "namesrv" / NAMESRV_PID):
                run(serve(group, on_started=group_started))
        finally:
            for path in noted:
                path.unlink(missing_ok=True)
        return

    # the flag, else MQCTL_GRPC_LISTEN_PORT, else 8081
    grpc_base = grpc_port if grpc_port is not None else load_config(BrokerConfig).grpc_listen_port
    brokers = [member(g, i) for g in range(groups) for i in range(slaves + 1)]
    broker = brokers[0]
    cluster = LocalCluster(namesrv, brokers, host)

    def started() -> None:
        (root / "namesrv" / ADDR_FILE).write_text(f"{host}:{namesrv.port}\n")  # for 'namesrv status'
        noted.append(root / "namesrv" / ADDR_FILE)
        for each in brokers:
            note_address(each)  # for 'broker status --store DIR'
            noted.append(Path(each.config.store_path_root_dir) / BROKER_ADDR)
        served = [b for b in brokers if b.metrics_port]
        urls = [
            f"http://{host}:{b.metrics_port}/metrics"
            + (
                f" ({'slave' if b.config.broker_id else b.config.broker_name} {b.addr})"
                if len(brokers) > 1
                else ""
            )
            for b in served
        ]
        metrics = f", metrics {', '.join(urls)}" if urls else ""
        front = broker.grpc
        metrics += f", gRPC (5.x clients) {host}:{front.port}" if front is not None else ""
        everywhere = f" (listening on all interfaces; {broker.protection.describe()})" if wildcard else ""
        extra = "".join(
            f", {'slave' if b.config.broker_id else b.config.broker_name} {b.addr}" for b in brokers[1:]
        )
        stderr_console().print(
            f"ready: NameServer {host}:{namesrv.port}, broker {broker.addr}{extra}{metrics}{everywhere}; "
            f"data in {root}{_signed(root, acl)}. Ctrl-C stops {'both' if len(brokers) == 1 else 'all'}."
        )
        _context_hint(root, f"{host}:{namesrv.port}", tls=tls, acl=acl)
        hosts = [f"NameServer {host}:{namesrv.port}"] + [
            f"{'slave' if b.config.broker_id else 'broker'} {b.config.broker_name} {b.addr}" for b in brokers
        ]
        noted.append(note_up(root, hosts))

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
        for path in noted:
            path.unlink(missing_ok=True)


#: The one account of ``up --acl``, and the file beside its plain_acl.yml that holds its secret alone.
ACL_ADMIN = "mqctl-admin"
ACL_SECRET = "admin.secret"


def _signed(root: Path, acl: bool) -> str:
    """What the ready line says of ``--acl``: the account and the file that holds its secret."""
    return f"; ACL on: access key {ACL_ADMIN}, secret in {root / 'acl' / ACL_SECRET}" if acl else ""


def _context_hint(
    root: Path, namesrv: str, *, tls: bool = False, acl: bool = False, member: bool = False
) -> None:
    """The `context add` line for the cluster `up` started, at the address it bound (a port 0 asked is a
    free one, which no other line named), unless commands reach it as they are (the default address, no
    TLS or ACL): the CA to trust (with `member` the members' pair too: 'broker ha transfer' speaks on the
    DLedger channel, which admits members only), the account to sign as. Paths are shell-quoted: the
    line is pasted as it is, again after each `up` (`--force`: the context `up` names follows its cluster,
    as kind's and minikube's do; with port 0 the port differs from run to run)."""
    from shlex import quote

    from mqctl.config import DEFAULT_NAMESRV
    from mqctl.output import stderr_console

    if namesrv == DEFAULT_NAMESRV and not (tls or acl):
        return

    certs = root / "tls"
    pair = f" --cert {quote(str(certs / 'server.pem'))} --key {quote(str(certs / 'server.key'))}"
    trust = f" --ca {quote(str(certs / 'ca.pem'))}{pair if member else ''}" if tls else ""
    secret = quote(str(root / "acl" / ACL_SECRET))
    sign = f" --access-key {ACL_ADMIN} --secret-key-file {secret}" if acl else ""
    name = "local" + ("-tls" if tls else "") + ("-acl" if acl else "")
    said = "".join(f"{part}; " for part in ["TLS only"] * tls + ["ACL on"] * acl)
    stderr_console().print(
        f"{said}connect with: mqctl context add {name} -n {namesrv}{trust}{sign} --use --force"
    )


def _acl_settings(directory: Path) -> dict[str, Any]:
    """The brokers' ACL settings for `up --acl`: aclEnable on `directory`/plain_acl.yml, one admin account
    whose secret is generated the first time (both files owner-only; the secret alone in its own, which
    mqctl signs with); a later run keeps them. The brokers sign their own requests with it too
    (innerClientAuthenticationCredentials): a slave's sync and tail check, a DLedger member's copy of the
    master's metadata. White-listing their address instead would let in every process of this host."""
    import json
    import secrets

    from mqctl.auth import read_secret, write_secret

    acl, secret = directory / "plain_acl.yml", directory / ACL_SECRET
    if not (acl.exists() and secret.exists()):
        key = secrets.token_hex(16)
        write_secret(secret, key)
        write_secret(acl, f'accounts:\n  - accessKey: {ACL_ADMIN}\n    secretKey: "{key}"\n    admin: true')
    inner = json.dumps({"accessKey": ACL_ADMIN, "secretKey": read_secret(secret)})
    return {"acl_enable": True, "acl_file_path": str(acl), "inner_client_authentication_credentials": inner}


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

    if listen.startswith("[") or listen.count(":") == 1:
        host, port = parse_listen(listen)
        if namesrv_port is not None and namesrv_port != port:
            raise UsageError(f"--listen {listen} and --namesrv-port {namesrv_port} name different ports")
        return host, port, "--listen"
    return bindable(listen), 9876 if namesrv_port is None else namesrv_port, "--namesrv-port"
