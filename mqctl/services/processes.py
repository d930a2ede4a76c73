"""Which process runs a daemon: our pid file, the store's lock, or the listen port.

`mqctl broker status|stop` and `mqctl namesrv status|stop` must see a daemon whoever started it (a
Java broker on the same store, a NameServer started by hand), and say which process it is. The pid
file is ours; the store lock names its holder through the kernel's lock table (F_GETLK); a listening
port is matched to its socket inode in /proc/net/tcp{,6} and that inode to a process's open fds
(found only for processes we may inspect; the port is still reported as taken otherwise).
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NotRequired, TypedDict

from mqctl.units import server_float, server_int

if TYPE_CHECKING:
    from mqctl.admin.client import Admin

_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's `st` column


class RunningFields(TypedDict):
    """What ``status`` says of a running daemon's process."""

    pid: int | None
    detected_by: str
    process: str | None


@dataclass(frozen=True)
class Running:
    """A running daemon: its pid when known, how it was found, and what the process is."""

    pid: int | None
    detected_by: str  # "pid file" | "store lock" | "port"
    process: str | None

    def fields(self) -> RunningFields:
        return {"pid": self.pid, "detected_by": self.detected_by, "process": self.process}

    def stoppable(
        self, main_class: str, commands: Collection[tuple[str, ...]], valued: Collection[str]
    ) -> bool:
        """Whether `stop` may signal it: found by our pid file or the store lock (it is the daemon of
        that store), or found by the port and its command line runs the daemon: Java's ``main_class``
        (``BrokerStartup``) or one of our ``commands`` (``('broker', 'start')``; ``valued``: the root
        options taking a value), matched as whole words. A stranger that happens to hold the port is left
        alone, one with "broker" somewhere in its arguments too."""
        if self.pid is None:
            return False
        if self.detected_by != "port":
            return True
        args = command_line(self.pid)
        if args is None:
            return False
        if any(a.startswith("org.apache.rocketmq.") and a.rsplit(".", 1)[1] == main_class for a in args):
            return True
        words = mqctl_words(args, valued)
        return any(words[: len(c)] == c for c in commands if c)


def command_line(pid: int) -> list[str] | None:
    """The arguments of process ``pid`` (None: gone, or not ours to read)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return (
        raw.decode(errors="replace").split("\0")[:-1]
        if raw.endswith(b"\0")
        else [raw.decode(errors="replace")]
    )


def mqctl_words(args: Sequence[str], valued: Collection[str]) -> tuple[str, ...]:
    """The command an mqctl command line runs (``mqctl``, ``python -m mqctl``), as its words: the first
    argument after the root's options (``valued``: those taking a value), and the next one unless it is an
    option: ``('broker', 'start')``, ``('up', ...)``; () for another program."""
    # the program: a console script (``python .../bin/mqctl``, ``mqctl``) or the package (``-m mqctl``)
    start = next((i + 1 for i, arg in enumerate(args[:3]) if os.path.basename(arg) == "mqctl"), None)
    if start is None:
        return ()
    words: list[str] = []
    skip = False
    for arg in args[start:]:
        if skip:
            skip = False
        elif arg.startswith("-"):
            if words:
                break
            skip = arg in valued
        else:
            words.append(arg)
            if len(words) == 2:
                break
    return tuple(words)


def process_name(pid: int) -> str | None:
    """`comm` of `pid`, plus the main class of a JVM (`java org.apache.rocketmq.broker.BrokerStartup`)."""
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    if comm == "java":
        main = next((a.decode(errors="replace") for a in args if a.startswith(b"org.apache.rocketmq.")), None)
        if main is not None:
            return f"java {main}"
    return comm


def listener_pid(port: int) -> int | None:
    """The pid of the process listening on TCP `port` (any address), if /proc lets us see it."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                cols = line.split()
                if len(cols) > 9 and cols[3] == _LISTEN and int(cols[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(cols[9])
    if not inodes:
        return None
    targets = {f"socket:[{inode}]" for inode in inodes}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in os.scandir(f"/proc/{entry.name}/fd"):
                with contextlib.suppress(OSError):
                    if os.readlink(fd.path) in targets:
                        return int(entry.name)
    return None


def port_open(host: str, port: int, timeout: float = 1.0) -> bool:
    """Whether something accepts TCP connections on host:port (a connection that met itself: nobody).

    A listener that accepts and resets at once (a gate refusing this host, a daemon at its connection cap)
    listens all the same: its reset can land before the connect returns (ECONNRESET, where nobody
    listening is ECONNREFUSED) or before the peer's name is asked (ENOTCONN). A socket that met itself is
    never reset, so either says a listener answered."""
    from daemon.remoting.client import met_itself

    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            local = sock.getsockname()
            try:
                peer = sock.getpeername()
            except OSError:
                return True
            return not met_itself(local, peer)
    except ConnectionResetError:
        return True
    except OSError:
        return False


def find_running(pid_file: Path, *, store_root: str | None, host: str, port: int) -> Running | None:
    """The daemon behind a pid file, a store (its lock) or host:port, first match wins; None if none."""
    from daemon.lifecycle import running_pid

    pid = running_pid(pid_file)
    if pid is not None:
        return Running(pid, "pid file", process_name(pid))
    if store_root is not None:
        from store import lock_holder

        pid = lock_holder(store_root)
        if pid is not None:
            return Running(pid, "store lock", process_name(pid))
    if port_open(host, port):
        pid = listener_pid(port)
        return Running(pid, "port", process_name(pid) if pid is not None else None)
    return None


class BrokerFigures(TypedDict):
    """A broker's runtime figures, as ``broker status`` shows them."""

    version: str | None
    #: Figures as numbers, named as ``cluster status`` names them (they were RocketMQ's text: "0.00", and
    #: an uptime of "[ 0 days, 0 hours, ... ]" no script could compare).
    put_tps: float | None
    get_tps: float | None
    put_latency_99_ms: float | None
    commitlog_max_offset: int | None
    disk_ratio: float | None
    uptime_ms: int | None
    loop_lag_p50_ms: float | None
    loop_lag_p99_ms: float | None
    loop_lag_max_ms: float | None
    gc_collections: int | None
    gc_pause_total_ms: float | None
    gc_pause_max_ms: float | None
    #: The event loop's stalls since start (probes late by 2 ms or more) and their lateness by cause, in ms
    #: (ran, core, steal, gc, other), and the watchdog's stacks (``loopStackMillis``); None from a Java broker.
    loop_stalls: int | None
    loop_stall_ms: dict[str, float] | None
    loop_stall_stacks: str | None
    #: POP (5.x) messages popped and not yet acked, by group (None from a broker without POP).
    pop_in_flight: dict[str, int] | None
    #: DLedger mode: how the member's peer channel is guarded (mutual TLS, or plaintext and where); else None.
    dledger_channel: str | None


class NamesrvFigures(TypedDict):
    """What a NameServer knows, counted, as ``namesrv status`` shows it."""

    clusters: int
    brokers: int
    topics: int


class Probe(TypedDict):
    """``reachable``, then the figures of the daemon that answered (none when it did not)."""

    reachable: bool
    refused: NotRequired[str]
    unreachable: NotRequired[str]
    version: NotRequired[str | None]
    put_tps: NotRequired[float | None]
    get_tps: NotRequired[float | None]
    put_latency_99_ms: NotRequired[float | None]
    commitlog_max_offset: NotRequired[int | None]
    disk_ratio: NotRequired[float | None]
    uptime_ms: NotRequired[int | None]
    loop_lag_p50_ms: NotRequired[float | None]
    loop_lag_p99_ms: NotRequired[float | None]
    loop_lag_max_ms: NotRequired[float | None]
    gc_collections: NotRequired[int | None]
    gc_pause_total_ms: NotRequired[float | None]
    gc_pause_max_ms: NotRequired[float | None]
    loop_stalls: NotRequired[int | None]
    loop_stall_ms: NotRequired[dict[str, float] | None]
    loop_stall_stacks: NotRequired[str | None]
    pop_in_flight: NotRequired[dict[str, int] | None]
    dledger_channel: NotRequired[str | None]
    clusters: NotRequired[int]
    brokers: NotRequired[int]
    topics: NotRequired[int]
    #: How a TLS-only daemon was asked: over the current context's TLS (no flag said TLS).
    over: NotRequired[str]


def probe(addr: str, daemon: Literal["broker", "namesrv"], timeout: float = 3.0) -> Probe:
    """What the daemon listening at ``addr`` says about itself, for ``status``: a broker's runtime figures
    (GET_BROKER_RUNTIME_INFO) or a NameServer's cluster and topic counts, with ``reachable: true``;
    ``reachable: false`` when whatever holds the port does not answer (the process is still reported);
    ``refused`` (and no figures) when it answers with a refusal, such as ACL's to an unsigned request."""
    from daemon.remoting.errors import RemotingCommandError, RemotingError
    from mqctl import tls

    try:
        return _asked(addr, daemon, timeout)
    except RemotingCommandError as exc:  # it answered, refusing (ACL): up, its figures withheld
        refused = f"{(exc.remark or '').strip()} (response code {exc.code})"
        return {"reachable": True, "refused": f"{refused}; {_way_in(daemon)}"}
    except RemotingError as exc:  # a TLS-only daemon closes a plaintext probe: say so, and the way in
        from mqctl.errors import translate

        closed = "connection closed" in str(exc)
        retried = _over_context_tls(addr, daemon, timeout) if closed and tls.chosen() is None else None
        if retried is not None:
            return retried
        return {"reachable": False, "unreachable": f"{translate(exc)}; {_way_in(daemon)}"}


def _asked(addr: str, daemon: Literal["broker", "namesrv"], timeout: float) -> Probe:
    from mqctl.admin.client import run_admin

    if daemon == "broker":  # a broker is asked directly, by address
        broker = run_admin([], lambda admin: _broker_figures(admin, addr), timeout=timeout)
        return {"reachable": True, **broker}
    counts = run_admin([addr], _namesrv_figures, timeout=timeout)
    return {"reachable": True, **counts}


def _over_context_tls(addr: str, daemon: Literal["broker", "namesrv"], timeout: float) -> Probe | None:
    """The probe again over the current context's TLS, when the daemon closed a plaintext one (TLS-only)
    and no flag chose TLS: ``mqctl up --tls`` and its printed ``context add`` line, then ``broker
    status``, said ``reachable: no`` of the broker just started. Signed with the context's credentials
    only when its own CA checks the server (as ``--ca`` with that CA would: a certificate of that CA,
    host name checked, before anything is sent); an ACL refusal is reported as one. None when that does
    not answer either."""
    from contextlib import nullcontext

    from daemon.remoting.errors import RemotingCommandError, RemotingError
    from mqctl import auth, tls
    from mqctl.config import ContextFile

    context = ContextFile.load().current_context()
    if context is None or context.tls is None:
        return None
    over = f"TLS of context {context.name}"
    vouched = bool(context.tls.ca) and not context.tls.insecure
    signing = (
        auth.context_signing(context.name, context.access_key, context.secret_key_file)
        if vouched and context.access_key
        else nullcontext()
    )
    tls.use_context(context.name, context.tls)
    try:
        with signing:
            return {**_asked(addr, daemon, timeout), "over": over}
    except RemotingCommandError as exc:  # it answered over TLS, refusing (ACL): up, its figures withheld
        refused = f"{(exc.remark or '').strip()} (response code {exc.code})"
        signed = "signed with its access key" if vouched and context.access_key else "unsigned"
        return {"reachable": True, "refused": f"{refused}, {signed}; {_way_in(daemon)}", "over": over}
    except (RemotingError, OSError):
        return None
    finally:
        tls.use_context(context.name, None)


def _way_in(daemon: str) -> str:
    """The local form probes with the flags' and variables' TLS and credentials only: a context's go to
    its own cluster, which a daemon found on this host need not be of."""
    way = "the global flags (--ca, --cert/--key, --access-key/--secret-key-file) apply here"
    return f"{way}; -b HOST:PORT asks it with the context's" if daemon == "broker" else way


async def _broker_figures(admin: Admin, addr: str) -> BrokerFigures:
    from daemon.broker.pop import parse_pop_in_flight
    from mqctl.services.cluster import first_float, stall_split

    table = await admin.broker_runtime_info(addr)
    return {
        "version": table.get("brokerVersionDesc"),
        "put_tps": first_float(table.get("putTps")),
        "get_tps": first_float(table.get("getTransferedTps")),
        "put_latency_99_ms": first_float(table.get("putLatency99")),
        "commitlog_max_offset": server_int(table.get("commitLogMaxOffset"), least=0),
        "disk_ratio": server_float(table.get("commitLogDiskRatio"), least=0),
        "uptime_ms": _uptime_ms(table.get("bootTimestamp")),
        # mqctl brokers only (None from a Java broker): the event loop's lag and the cyclic GC's pauses
        "loop_lag_p50_ms": first_float(table.get("loopLagP50")),
        "loop_lag_p99_ms": first_float(table.get("loopLagP99")),
        "loop_lag_max_ms": first_float(table.get("loopLagMax")),
        "gc_collections": server_int(table.get("gcCollections"), least=0),
        "gc_pause_total_ms": first_float(table.get("gcPauseTotal")),
        "gc_pause_max_ms": first_float(table.get("gcPauseMax")),
        "loop_stalls": server_int(table.get("loopStalls"), least=0),
        "loop_stall_ms": stall_split(table),
        "loop_stall_stacks": table.get("loopStallStacks") or None,
        # POP (5.x) messages popped and not acked, by group
        "pop_in_flight": parse_pop_in_flight(table["popInFlight"]) if "popInFlight" in table else None,
        "dledger_channel": table.get("dledgerChannel"),
    }


class WireStatus(BrokerFigures):
    """``broker status -b/--cluster``: the local form's fields that the wire gives (the process's pid,
    ``detected_by`` and ``process`` are facts of the local host: left out), with the broker's identity."""

    state: str
    address: str
    cluster: str | None
    broker_name: str | None
    broker_id: int | None
    #: storePathRootDir, as the broker's config says (a path on its host).
    store: str | None
    #: The listeners its config names a port for (mqctl brokers): the metrics URL and the gRPC address.
    metrics: NotRequired[str]
    grpc: NotRequired[str]
    reachable: bool


async def wire_status(admin: Admin, addr: str) -> WireStatus:
    """A broker's status asked of it (GET_BROKER_RUNTIME_INFO and GET_BROKER_CONFIG), from any host."""
    import asyncio

    figures, config = await asyncio.gather(_broker_figures(admin, addr), admin.broker_config(addr))
    broker_id = config.get("brokerId", "")
    status: WireStatus = {
        "state": "running",
        "address": addr,
        "cluster": config.get("brokerClusterName"),
        "broker_name": config.get("brokerName"),
        "broker_id": int(broker_id) if broker_id.isdigit() else None,
        "store": config.get("storePathRootDir"),
        "reachable": True,
        **figures,
    }
    host = addr.rpartition(":")[0]
    metrics_port, grpc_port = config.get("metricsPort", "0"), config.get("grpcListenPort", "0")
    if config.get("metricsEnable") == "true" and metrics_port.isdigit() and int(metrics_port):
        status["metrics"] = f"http://{host}:{metrics_port}/metrics"
    if grpc_port.isdigit() and int(grpc_port):  # (0: a free port it picked, which no request tells)
        status["grpc"] = f"{host}:{grpc_port}"
    return status


async def masters_status(admin: Admin, cluster: str | None) -> list[WireStatus]:
    """``broker status --cluster``: :func:`wire_status` of every master, as ``cluster status`` reads
    them: from those that answer, each one that does not named on stderr."""
    from mqctl.services.cluster import masters
    from mqctl.services.fanout import each_broker

    addrs = await masters(admin, cluster)
    answers = await each_broker(admin, addrs, lambda addr: wire_status(admin, addr))
    return [answers[addr] for addr in addrs if addr in answers]


def _uptime_ms(boot_ms: str | None) -> int | None:
    """How long the broker has run, from its ``bootTimestamp`` (4.9.8's key too); None without one."""
    if not (boot_ms or "").isdigit():
        return None
    return max(0, int(time.time() * 1000) - int(boot_ms or 0))


async def _namesrv_figures(admin: Admin) -> NamesrvFigures:
    info = await admin.cluster_info()
    return {
        "clusters": len(info.cluster_addr_table),
        "brokers": sum(len(b.broker_addrs) for b in info.broker_addr_table.values()),
        "topics": len(await admin.topic_list()),
    }
