"""The broker's lifecycle: open the store, serve the processors, register with NameServers, shut down.

Everything runs on one asyncio loop. Store reads and ASYNC_FLUSH puts are fast memory operations and
run inline; SYNC_FLUSH puts block on a shared fsync, so they run in a thread pool where concurrent
sends share one flush (group commit).

Why one process: the broker's CPU is the interpreter, not threads waiting on the GIL, so a second core
would need processes (acceptors that encode records for one sequential writer). That split was
prototyped and measured: on machines shared with the clients it costs more CPU per send for no
dependable gain in sends per second, and every other piece of broker state would have to move to the
writer or be shared, so the broker stays one process and CPU per send is cut instead
(docs/design/second-core.md has the design, the prototype and its figures).
"""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import logging
import math
import shutil
import threading
import time
import zlib
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, TypeVar

from daemon.acl.plain import RELOAD_CHECK_INTERVAL, AclFiles, PlainAccessValidator
from daemon.acl.signature import Signer, hmac_backend
from daemon.broker.clean import WRITE_REFUSED_RUNTIME_KEY
from daemon.broker.config import BrokerConfig, refuse_inert_semantics
from daemon.broker.ha import (
    METADATA_SYNC_INTERVAL,
    HAMaster,
    HASlave,
    MasterRecords,
    SlaveGate,
    ha_runtime_info,
    is_slave,
    slave_refusals,
    split_addr,
    sync_metadata,
)
from daemon.broker.headers import NotifyConsumerIdsChangedRequestHeader
from daemon.broker.long_poll import PullRequestHoldService
from daemon.broker.loopwatch import CLOCK_RUNTIME_KEY, LoopWatch
from daemon.broker.managers.consumers import ConsumerGroupInfo, ConsumerManager
from daemon.broker.managers.groups import SubscriptionGroupManager
from daemon.broker.managers.locks import RebalanceLockManager
from daemon.broker.managers.producers import ProducerManager
from daemon.broker.managers.topics import TopicConfigManager
from daemon.broker.polls import PollBudget
from daemon.broker.pop import PopService, pop_runtime_info
from daemon.broker.schedule import ScheduleMessageService
from daemon.broker.stats import SAMPLE_PERIOD, BrokerStats
from daemon.broker.timer import TimerMessageService
from daemon.broker.transaction import TransactionService
from daemon.coalesce import Coalesced
from daemon.config import MAX_PORT, ConfigError
from daemon.dledger.machines import Role, Timings
from daemon.dledger.server import DLedgerServer, DLedgerSettings, dledger_runtime_info, parse_peers
from daemon.lifecycle import cancel_tasks, every, serving_collector, supervise
from daemon.protect import (
    Peer,
    ProtectedModeGuard,
    Protection,
    binds_beyond_loopback,
    creation_refusal,
    is_local,
    is_own_address,
    is_parking_topic,
    listening,
    lock_refusal,
    parking_refusal,
    protection,
)
from daemon.remoting.bodies import (
    ClusterInfo,
    KVTable,
    PermName,
    RegisterBrokerBody,
    TableText,
    TopicConfigSerializeWrapper,
)
from daemon.remoting.client import RemotingClient, Transport, parse_addr, peer_host
from daemon.remoting.codes import RequestCode, ResponseCode, Version
from daemon.remoting.command import RemotingCommand
from daemon.remoting.connection import Connection, Processor
from daemon.remoting.errors import RemotingError
from daemon.remoting.headers import (
    QueryDataVersionRequestHeader,
    QueryDataVersionResponseHeader,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    UnregisterBrokerRequestHeader,
)
from daemon.remoting.limits import MAX_JSON_BODY
from daemon.remoting.server import RemotingServer
from daemon.remoting.tls import ServerTls
from daemon.schedslice import SliceRefused, set_loop_slice
from store import native
from store.api import MessageStore
from store.commitlog import PutMessageStatus
from store.config import SLAVE
from store.config_files import ConsumerOffsetManager
from store.dledger_commitlog import DLedgerCommitLog
from store.engine import DefaultMessageStore
from store.errors import StoreError
from store.message import (
    PROPERTY_DLEDGER_LEADER,
    PROPERTY_DLEDGER_TERM,
    PROPERTY_REAL_TOPIC,
    Message,
    StoredMessage,
)
from store.models import DataVersion, TopicConfig
from store.names import (
    DLEDGER_TERM_TOPIC,
    MAX_HELD_QUEUE_NUMS,
    REVIVE_TOPIC_PREFIX,
    SCHEDULE_TOPIC,
    TIMER_TOPIC,
    TRANS_HALF_TOPIC,
)
from store.quarantine import list_quarantines
from store.results import PutResult
from store.words import plural

if TYPE_CHECKING:
    from daemon.grpc.server import GrpcFront

log = logging.getLogger(__name__)

#: The client codes whose JSON body the broker parses on its loop, the ACL guard first (a heartbeat's groups
#: and topics, a lock's queue set, a batch of acks): held to MAX_JSON_BODY before either reads it.
JSON_BODY_CODES = (
    RequestCode.HEART_BEAT,
    RequestCode.CHECK_CLIENT_CONFIG,
    RequestCode.LOCK_BATCH_MQ,
    RequestCode.UNLOCK_BATCH_MQ,
    RequestCode.BATCH_ACK_MESSAGE,
)

_T = TypeVar("_T")

#: Where the broker re-topics messages until their time (half, delay-level and timer messages): their
#: REAL_TOPIC is the topic they belong to.
_PARKING_TOPICS = frozenset({TRANS_HALF_TOPIC, SCHEDULE_TOPIC, TIMER_TOPIC})


async def encode_sliced(body: RegisterBrokerBody, compressed: bool, kept: TableText | None = None) -> bytes:
    """``body.encode(compressed)`` on the loop, `REGISTER_SLICE` topics at a time with requests served
    between the slices; the compressed form's deflate in a worker thread (zlib lets go of the GIL while it
    works). Encoded in a worker thread, the JSON encoder's C loop over a 10,000-topic table held the GIL
    for tens of milliseconds at once, and the loop waited that long. ``kept``: see `TableText`."""
    parts: list[bytes] = []
    for part in body.encode_parts(compressed, REGISTER_SLICE, kept):
        parts.append(part)
        await asyncio.sleep(0)
    raw = b"".join(parts)
    return await asyncio.to_thread(zlib.compress, raw, 9) if compressed else raw


async def persist_sliced(offsets: ConsumerOffsetManager, size: int) -> None:
    """Write ``offsets`` when it changed: its text made on the loop ``size`` entries at a time, requests
    served between the pieces, and only the write in a worker thread (it fsyncs the file and its
    directory). Made in a worker thread, the text of a large table held the GIL, and the loop waited up to
    CPython's switch interval for it at each of its turns meanwhile (docs/performance.md)."""
    changes = offsets.unwritten_changes()
    if changes is None:
        return
    parts: list[str] = []
    for part in offsets.text_slices(size):
        parts.append(part)
        await asyncio.sleep(0)
    await asyncio.to_thread(offsets.write_text, "".join(parts), changes)


CLIENT_SCAN_INTERVAL = 10.0
#: consumerOffset.json entries formatted at a time on the loop (a few µs each).
OFFSETS_SLICE = 200
#: Topics of a whole-table registration body encoded at a time on the loop.
REGISTER_SLICE = 100
#: Stats items rolled to a tick at a time on the loop (well under a millisecond).
STATS_ROLL_SLICE = 500
#: How long a restarted slave waits for its master to check its tail before it serves anyway.
FIRST_CHECK_TIMEOUT = 5.0


class Broker:
    """One broker process. `await start()`, then `await stop()` (or use `async with`).

    `store_factory` is the store seam: `DefaultMessageStore` by default, `InMemoryMessageStore` in tests.
    `client` is the transport to NameServers and a slave's master: TCP by default, `MemoryClient` in tests.
    """

    def __init__(
        self,
        config: BrokerConfig,
        *,
        store_factory: Callable[[BrokerConfig], MessageStore] | None = None,
        client: Transport | None = None,
    ) -> None:
        config.check_store_roles()  # before any port opens or file is touched
        refuse_inert_semantics(config)
        if config.enable_dleger_commit_log:
            check_dledger(config)
        self.config = config
        self._store_factory = store_factory or _default_store
        #: `tls.*` (checked now: a bad setting fails the start before any port opens); every listener of
        #: the remoting protocol takes `self.tls`, which makes the test-mode certificate once for all.
        self.tls_settings = config.tls_settings()
        #: The replication channels' (HA port and client, DLedger channel) settings under haTls.
        self.ha_tls_settings = self.tls_settings.check_mutual() if config.ha_tls else None
        if self.tls_settings.member_trust and not config.ha_tls:
            log.warning(
                "tls.member.trustCertPath is set but haTls=false: the replication channels are not on TLS "
                "and the members' CA is not used; set haTls=true"
            )
        self.tls = ServerTls(self.tls_settings)
        self.server = RemotingServer(
            host=config.listen_host,
            port=config.listen_port,
            idle_timeout=config.server_channel_max_idle_time_seconds,
            limits=config,
            tls=self.tls,
        )
        self.server.dispatcher.limit_bodies(dict.fromkeys(JSON_BODY_CODES, MAX_JSON_BODY))
        inner = config.inner_credentials()
        self.client: Transport = client or RemotingClient(
            ssl=self.tls_settings.client_context() if config.tls_enable else None,
            signer=Signer(*inner) if inner is not None else None,
        )
        self.store: MessageStore
        self.topics: TopicConfigManager
        self.groups: SubscriptionGroupManager
        self.offsets: ConsumerOffsetManager
        self.consumers = ConsumerManager()
        self.producers = ProducerManager()
        self.locks = RebalanceLockManager()
        # (a peer off the machine that registered under a member's client id and left releases only the
        # locks it took itself, as its unlock would)
        self.consumers.on_member_left = lambda group, client_id, conn: self.locks.drop_client(
            group, client_id, self.lock_host(conn)
        )
        self.stats = BrokerStats(config.broker_cluster_name)
        #: The event loop's lag and the cyclic GC's pauses (runtime info, /metrics).
        self.loop_watch = LoopWatch(table_size=self._table_size, stack_after=config.loop_stack_millis / 1000)
        self.hold: PullRequestHoldService
        self.schedule: ScheduleMessageService
        self.transactions: TransactionService
        #: POP consumption (5.x): the remoting POP codes and the gRPC front share it.
        self.pop: PopService
        #: Their pops waiting for messages, by connection and by host (bounded as held pulls are).
        self.polls = PollBudget()
        #: The gRPC front's open Telemetry streams, by connection and host (daemon.grpc.service).
        self.streams = PollBudget(
            "Telemetry streams are open",
            ("streams per connection", "TELEMETRY_PER_HOST", "grpcMaxTelemetryStreams"),
            limit=config.grpc_max_telemetry_streams,
        )
        self.timers: TimerMessageService
        self.boot_timestamp = int(time.time() * 1000)
        self.metrics_port: int | None = None
        #: Replication: the HA listener, and on a slave the client of its master.
        self.ha_master: HAMaster | None = None
        self.ha_slave: HASlave | None = None
        #: A slave's master broker address as the NameServer last answered it.
        self.master_addr: str | None = None
        #: DLedger mode: this broker's member of its Raft group; its role decides this broker's.
        self.dledger: DLedgerServer | None = None
        self._role_task: asyncio.Task[None] | None = None
        #: (DLedger mode) the codes a slave refuses: (the master's processor, the slave's refusal) of each,
        #: the one for the role registered at each change of it (`_register_role`)
        self._role_processors: dict[int, tuple[Processor, Processor]] = {}
        #: The master services' stop after a lost leadership: a new election waits for it to finish.
        self._stopping: asyncio.Task[None] | None = None
        #: Offsets clients committed to this slave (group, topic, queue id): the master gets them at the
        #: next metadata sync (4.9.8 overwrites them with the master's older ones, see sync_metadata).
        self.slave_commits: dict[tuple[str, str, int], int] = {}
        #: A slave's (or DLedger follower's) replicated topics with no config yet (topic -> queues seen), and
        #: those it derived (the config it put in the table, until the master's replaces it).
        self._unconfigured: dict[str, int] = {}
        self._unconfigured_lock = threading.Lock()
        self._derived_topics: dict[str, TopicConfig] = {}
        #: (DLedger mode) whether the follower's note of unconfigured topics is on (see _note_as_follower)
        self._noting = False
        self._tasks: list[asyncio.Task[None]] = []
        #: Registration with every NameServer, shared by the topic changes that ask for it meanwhile.
        self.registration = Coalesced(self.register_all, "namesrv-register-now")
        #: Topics created or changed since their registration: registered alone, O(1) each (4.9.8's
        #: registerIncrementBrokerData), not with the whole table, which makes N creations O(N^2).
        self.register_topics = Coalesced(self._register_changed, "namesrv-register-topics")
        self._changed_topics: set[str] = set()
        #: Whether topics were registered alone since the whole table last was, over another connection
        #: than the whole table's (see _register_all).
        self._registered_alone = False
        #: Per NameServer, the connection the last whole table it took came over.
        self._table_links: dict[str, Connection | None] = {}
        #: The last whole-table registration body, the table's DataVersion object it was made at, and what
        #: else it was made from (see _registration_body): while those stay, registrations send it again;
        #: and its CRC32 (computed once per body, on the loop).
        self._table_body: tuple[DataVersion, tuple[int, int, int, int, bool], bytes, int] | None = None
        #: The whole table's entries as its last JSON body wrote them (each topic re-encoded only after it
        #: changed: with 10,000 topics a whole encoding is tens of ms of the loop, in slices).
        self._table_text = TableText()
        #: What the whole table registered was made from (`_table_key`), when every NameServer took it.
        self._registered_table: tuple[int, int, int, int, bool] | None = None
        #: One registration at a time, as 4.9.8's synchronized registerBrokerAll: a single topic's must not
        #: reach a NameServer before a whole table snapshotted earlier, which would bring back its old route.
        self._registering = asyncio.Lock()
        #: Topic creations made durable together (each answered after its write): one journal line each
        #: beside topics.json, not a rewrite of the whole table (see store.config_files).
        self.persist_topics = Coalesced(
            lambda: asyncio.to_thread(self.topics.file.persist_changes), "persist-topics"
        )
        #: Groups created on use, written together (see SubscriptionGroupManager.persist_created).
        self.persist_groups = Coalesced(lambda: asyncio.to_thread(self.groups.persist_now), "persist-groups")
        self._flush_pool: ThreadPoolExecutor | None = None
        self.offloads_puts = False  # (BrokerContext's): SYNC_FLUSH puts that wait run in the flush pool
        self._metrics_stop: Callable[[], None] | None = None
        self._started = False
        #: "starting" until the store is recovered and the port accepts, then "serving" (/healthz).
        self.state = "starting"
        #: The ACL files when `aclEnable` is on (codes 50-54 edit them); None: no ACL.
        self.acl_files: AclFiles | None = None
        #: `haWhiteRemoteAddresses` as matchers (see _ha_counts).
        self._ha_white = config.ha_white_matchers()
        #: The VIP port's listener (its connections are the main server's).
        #: The gRPC front for 5.x clients (daemon.grpc) once started; None: off, or not installed here.
        self.grpc: GrpcFront | None = None
        #: why the gRPC front cannot run here (a module missing), as its load at start found
        self._grpc_missing: str | None = None

    # ------------------------------------------------------------------ lifecycle

    @property
    def addr(self) -> str:
        return self.config.broker_addr

    @property
    def protection(self) -> Protection:
        c = self.config
        return protection(enabled=c.protected_mode, acl_enable=c.acl_enable, hosts=[c.listen_host])

    def trusted(self, conn: Connection, request: RemotingCommand) -> bool:
        """Whether a request may do an operator's act (lower retention): admin-signed with ACL on (a
        whitelist does not count), from this machine with ACL off."""
        guard = self.server.dispatcher.guard
        if isinstance(guard, PlainAccessValidator):
            return guard.admin_signed(conn.address[0], request)
        return is_local(conn.address[0], conn.local_ip())

    def creation_refusal(self, peer: Peer, what: str) -> str | None:
        """Why ``peer`` may not create topic or group ``what`` on use (a send, heartbeat, pull or pop
        naming one that does not exist): protected mode and a peer off this machine; else None."""
        if not isinstance(self.server.dispatcher.guard, ProtectedModeGuard):
            return None
        return creation_refusal(peer, what)

    def parking_refusal(self, peer: Peer, topic: str) -> str | None:
        """Why ``peer`` may not pull or query ``topic``: protected mode, a peer off this machine, and one
        of the topics the broker parks others' messages in; else None."""
        if not is_parking_topic(topic) or not isinstance(self.server.dispatcher.guard, ProtectedModeGuard):
            return None
        return parking_refusal(peer, topic)

    def lock_refusal(self, conn: Connection, group: str, client_id: str) -> str | None:
        """Why ``conn`` may not lock or unlock ``group``'s queues as ``client_id``: protected mode, a peer
        off this machine, and no consumer of the group with that id registered on the connection."""
        if not isinstance(self.server.dispatcher.guard, ProtectedModeGuard):
            return None
        info = self.consumers.get(group)
        channel = info.channels.get(conn) if info is not None else None
        return lock_refusal(conn, group, client_id, channel.client_id if channel is not None else None)

    def view_refusal(self, conn: Connection, topic: str) -> str | None:
        """Why ``conn`` may not read a record of ``topic`` by its offset (VIEW_MESSAGE_BY_ID):
        `parking_refusal`, except for the host of a slave streaming from this master (it holds every
        record already, and checks its tail against the master's records by offset)."""
        refused = self.parking_refusal(conn, topic)
        master = self.ha_master
        if refused is None or master is None:
            return refused
        host = peer_host(conn.address[0])
        streaming = any(peer_host(split_addr(s.addr)[0]) == host for s in master.slaves)
        return None if streaming else refused

    def lock_host(self, conn: Connection) -> str | None:
        """The host ``conn``'s locks are bound to (`RebalanceLockManager.try_lock_batch`): its peer's, in
        protected mode and off this machine; else None (this machine unlocks and renews any)."""
        ip = conn.address[0]
        if not isinstance(self.server.dispatcher.guard, ProtectedModeGuard) or is_local(ip, conn.local_ip()):
            return None
        return peer_host(ip)

    def listening(self) -> str:
        """Where the broker listens, why there, and whether protected mode is on (the start-up line)."""
        where = listening(self.config.listen_host, self.server.port, self.config.listen_why, self.protection)
        if self.grpc is not None:
            where += f"; gRPC (5.x clients) on {self.config.listen_host}:{self.grpc.port}"
            where += " (TLS)" if self.grpc.tls else ""
        return where

    def _set_slice(self) -> None:
        """``schedSliceMicros``: a short EEVDF slice for the event loop's thread (the one that starts the
        broker) alone: the threads it starts begin with the kernel's default; a kernel or sandbox that
        refuses it leaves the default."""
        if not self.config.sched_slice_micros:
            return
        try:
            log.info("%s", set_loop_slice(self.config.sched_slice_micros))
        except SliceRefused as exc:
            log.warning("schedSliceMicros=%d not applied: %s", self.config.sched_slice_micros, exc)

    async def start(self) -> None:
        """Bind the port (connections are refused: nothing listens yet), recover the store, then accept.

        Like the Java broker, the port opens only once the broker can serve: a TCP readiness probe and
        the first client requests see a refused connection while the store recovers, never a request
        that times out. `/healthz` answers meanwhile with `starting` (503).
        """
        self._set_slice()
        if self.config.acl_enable:  # before the port opens: no request is ever served unchecked
            self.acl_files = AclFiles(self.config.rocketmq_home, self.config.acl_file_path)
            self.server.dispatcher.guard = PlainAccessValidator(
                self.acl_files, topic_at=self._topic_at, freshness=self.config.acl_admin_freshness
            )
        elif self.protection.active:
            self.server.dispatcher.guard = ProtectedModeGuard("broker")
        await self.server.start(serve=False)
        ephemeral = self.config.listen_port == 0
        self.config.listen_port = self.server.port  # port 0: the bound one is what we register
        if not ephemeral:
            await self._bind_vip()
        self._start_metrics()
        try:
            # in threads: the loop stays free (signals, /healthz's state) while the gRPC front's modules load
            # and a big store recovers. The modules load before the broker takes part in anything: imported
            # on the loop later, their CPU (seconds of it on a busy host) stalled a DLedger member its group
            # already counted on, its heartbeats or its answers missing meanwhile
            if self._grpc_wanted():
                self._grpc_missing = await asyncio.to_thread(self._load_grpc)
            await asyncio.to_thread(self._open_store)
        except BaseException:
            await self.server.stop(grace=0)
            self._stop_metrics()
            raise
        try:
            if self.config.enable_dleger_commit_log:
                await self._start_dledger()
            else:
                await self._start_ha(ephemeral)
        except BaseException:
            await self.server.stop(grace=0)
            self.store.shutdown()
            raise
        self._register_processors()
        self.loop_watch.start()
        self.server.on_connection_closed(self._connection_closed)
        self.hold.start()
        if not is_slave(
            self.config
        ):  # a slave writes nothing of its own: delays and checks run on the master
            if not getattr(self.store, "last_exit_ok", True):  # delivery progress written before the crash
                self.schedule.take_over()
            self.schedule.start()
            self.timers.start()
            self.transactions.start()
            self.pop.start()
        offsets_period = self.config.flush_consumer_offset_interval / 1000
        self._tasks += [
            supervise(lambda: every(CLIENT_SCAN_INTERVAL, self._scan_clients), "client-scan"),
            supervise(lambda: every(offsets_period, self._persist_offsets), "offset-persist"),
            supervise(self._registration_loop, "namesrv-register"),
            supervise(lambda: every(SAMPLE_PERIOD, self._sample_stats), "stats-sample"),
        ]
        acl_files = self.acl_files
        if acl_files is not None:
            self._tasks.append(
                supervise(lambda: every(RELOAD_CHECK_INTERVAL, acl_files.maybe_reload), "acl-watch")
            )
        await self._check_replica_before_serving()
        serving_collector()  # before the first request, not when start() returns (see there)
        await self.server.serve()
        await self._start_grpc()
        self.state = "serving"
        self._started = True
        await self.register_all()  # at start, like Java; then every registerNameServerPeriod
        if self.ha_slave is not None or self.dledger is not None:
            self._tasks.append(supervise(self._metadata_sync_loop, "slave-metadata-sync"))
        log.info(
            "broker %s (cluster %s) serving at %s (tls.server.mode=%s%s), store %s, %s%s; %s",
            self.config.broker_name,
            self.config.broker_cluster_name,
            self.addr,
            self.tls_settings.mode,
            ", haTls" if self.config.ha_tls else "",
            self.config.store_path_root_dir,
            native.describe_build(),
            f", ACL on (HMAC-SHA1: {hmac_backend()})" if self.acl_files is not None else "",
            self.listening(),
        )

    async def _start_grpc(self) -> None:
        """The gRPC front (masters only: 5.x clients read and write masters; and every DLedger member, whose
        role follows the election: a follower's front answers as the send processor refuses a slave).
        Optional: without the `grpc` extra, or on a taken port, the broker serves remoting as before and
        says so once."""
        c = self.config
        if not self._grpc_wanted():
            return
        if self._grpc_missing is not None:
            log.info("gRPC front for 5.x clients off: %s", self._grpc_missing)
            return
        from daemon.grpc.server import GrpcFront  # (loaded at start, in a thread)

        front = GrpcFront(self)
        try:
            c.grpc_listen_port = await front.start()  # port 0: the bound one (GET_BROKER_CONFIG tells it)
        except (OSError, RuntimeError) as exc:
            log.error("gRPC port %d not opened, 5.x clients cannot connect: %s", c.grpc_listen_port, exc)
            return
        self.grpc = front

    def _grpc_wanted(self) -> bool:
        c = self.config
        return c.grpc_enable and (not is_slave(c) or c.enable_dleger_commit_log)

    @staticmethod
    def _load_grpc() -> str | None:
        """Import the gRPC front's modules (at start, in a thread): why the front cannot run here, or None."""
        from daemon.grpc import missing

        why = missing()
        if why is None:
            import daemon.grpc.server  # noqa: F401
        return why

    async def _bind_vip(self) -> None:
        """The VIP port (``listenPort - 2``): the same connections, processors, ACL guard and TLS mode as
        the main port, accepting from when the main port does. A taken port is logged, not fatal: clients
        use it only when told to (``vipChannelEnabled``), a 4.9.8 slave for its metadata sync."""
        port = self.config.vip_port
        if port is None:
            return
        try:
            await self.server.bind_also(self.config.listen_host, port)
        except OSError as exc:
            log.error("VIP port %d (listenPort - 2) not opened: %s", port, exc)
            return
        log.info("VIP port listening on %s:%d", self.config.listen_host, port)

    def _start_metrics(self) -> None:
        if not self.config.metrics_enable:
            return
        from daemon.broker.metrics import start_metrics_server

        try:
            self.metrics_port, self._metrics_stop = start_metrics_server(
                self, self.config.metrics_port, self.config.metrics_host or self.config.listen_host
            )
            # port 0: report the bound one (mqctl top reads it)
            self.config.metrics_port = self.metrics_port
        except OSError as exc:  # metrics are an aid: a taken port must not keep the broker down
            log.error("metrics endpoint not started on port %d: %s", self.config.metrics_port, exc)

    def _stop_metrics(self) -> None:
        if self._metrics_stop is not None:
            self._metrics_stop()
            self._metrics_stop = None

    async def _start_ha(self, ephemeral: bool) -> None:
        """The HA listener (every broker, as 4.9.8) and, on a slave, the client of the master; any store
        the broker runs on replicates (``MessageStore`` is a ``ReplicaStore``), so this never asks which.

        With an ephemeral listen port and no ``haListenPort`` the HA port is ephemeral too."""
        c = self.config
        derived = c.ha_listen_port < 0
        port = 0 if ephemeral and derived else c.ha_port
        gate = SlaveGate(self.registered_slave_hosts)
        ha_tls = self.ha_tls_settings
        self.ha_master = HAMaster(
            c,
            self.store,
            c.listen_host,
            port,
            self.hold.wakers,
            gate,
            ssl=ha_tls.server_context(require_client=True) if ha_tls else None,
            refuse=self._ha_acl_refusal if c.acl_enable and not c.ha_tls else None,
            identify=self.registered_slave_at,
            counts=self._ha_counts if self.protection.active and not c.ha_tls else None,
        )
        try:
            bound = await self.ha_master.start()
        except OSError as exc:
            if not derived:
                raise
            # listenPort + 1 is only a convention: slaves learn the real port from the NameServer
            log.error(
                "HA port %d (listenPort + 1) is taken (%s); listening on a free port instead", port, exc
            )
            self.ha_master.port = 0
            bound = await self.ha_master.start()
        c.ha_listen_port = bound  # what registers as haServerAddr
        if self.tls_settings.mode == "enforcing" and not c.ha_tls and binds_beyond_loopback(c.listen_host):
            log.warning(
                "HA: tls.server.mode=enforcing covers the remoting ports only: the HA stream to slaves is "
                "plaintext on %s:%d (every message, to anyone on the path); set haTls=true for mutual TLS",
                c.listen_host,
                bound,
            )
        self._say_which_slaves_count()
        if is_slave(c):
            # the master's records are asked of its broker address, which only a NameServer tells
            records = (
                MasterRecords(self.client, lambda: self.master_addr, self._find_master)
                if c.namesrv_addrs
                else None
            )
            if records is None:
                log.warning(
                    "no NameServer: this slave cannot ask its master's records, its tail is not checked"
                )
            self.ha_slave = HASlave(
                c,
                self.store,
                records,
                ssl=ha_tls.client_context(verify=True) if ha_tls else None,
                after_registration=bool(c.namesrv_addrs),
                ask_master=self._ask_master_ha if c.namesrv_addrs else None,
                source_host=c.ip1,
            )
            self.store.add_arrival_listener(self._note_replicated)
            self.ha_slave.on_dispatched = self._derive_replicated_topics
            self.ha_slave.start()

    @property
    def _dledger_hosts(self) -> str | None:
        """The addresses of this DLedger member's group (as its peer gate resolved `dLegerPeers`)."""
        if self.dledger is None:
            return None
        return ",".join(sorted(set().union(*self.dledger.gate.hosts.values())))

    def _ha_counts(self, host: str, local_ip: str) -> bool:
        """In protected mode without haTls, whether a SYNC_MASTER counts the acknowledgements of a slave
        the HA gate admitted: one on this machine (loopback, or from any address of this machine: no
        other host completes a TCP handshake from one), or at `haWhiteRemoteAddresses`. The gate trusts
        the NameServers, which take anyone's registration then: a peer registered as a slave, connected
        and acknowledged every byte storing none, and this master answered SEND_OK for data only it held."""
        if is_local(host, local_ip) or any(match(host) for match in self._ha_white):
            return True
        return is_own_address(host)

    def _say_which_slaves_count(self) -> None:
        """At start, on a master in protected mode without haTls: whose acknowledgements a SYNC_MASTER
        counts, or that an ASYNC_MASTER streams to whoever the NameServers list as its slave."""
        c = self.config
        if is_slave(c) or not self.protection.active or c.ha_tls or self.dledger is not None:
            return
        if c.broker_role == "SYNC_MASTER":
            log.warning(
                "HA: protected mode (ACL off, listening on %s) and haTls off: this SYNC_MASTER counts the "
                "acknowledgements of slaves on this machine%s only; another slave the NameServers list is "
                "streamed to, but a send waits for none of its acknowledgements (SLAVE_NOT_AVAILABLE "
                "without a counted slave); set haWhiteRemoteAddresses to the slaves' hosts, or haTls=true",
                c.listen_host,
                f" and at haWhiteRemoteAddresses={c.ha_white_remote_addresses}"
                if c.ha_white_remote_addresses.strip()
                else "",
            )
        else:
            log.warning(
                "HA: protected mode (ACL off, listening on %s) and haTls off: this master streams its "
                "CommitLog to any host the NameServers list as a slave of %s, and a NameServer with ACL "
                "off lists whoever registers; set haTls=true, or aclEnable=true with the slaves' hosts in "
                "globalWhiteRemoteAddresses",
                c.listen_host,
                c.broker_name,
            )

    def _ha_acl_refusal(self, host: str, local_ip: str) -> str | None:
        """With ACL on and the HA stream not on mutual TLS, a slave beyond this machine must also be in
        globalWhiteRemoteAddresses, as its metadata sync must be: the gate trusts the NameServers'
        registrations, and one with ACL off takes anyone's, which would hand whoever registered as a
        slave the whole CommitLog, every topic the ACL guards included."""
        files = self.acl_files
        if files is None or is_local(host, local_ip):
            return None
        if any(match(host) for match in files.table.white_matchers):
            return None
        return (
            "this broker has ACL on and the HA stream is not on mutual TLS: a slave beyond this machine must "
            "also be in globalWhiteRemoteAddresses (as its metadata sync must), or set haTls=true"
        )

    async def _start_dledger(self) -> None:
        """DLedger mode (4.9.8's ``DLedgerCommitLog``): no HA service; a Raft member on the port `dLegerPeers`
        names for this broker, whose elections decide the role. The broker starts as a slave (brokerId
        = the member's number + 1, as 4.9.8's ``DLedgerCommitLog#getId``) until it is elected."""
        c = self.config
        store = self.store
        if not isinstance(store, DefaultMessageStore) or not isinstance(store.commit_log, DLedgerCommitLog):
            raise StoreError(f"{c.store_path_root_dir}: DLedger mode needs the DLedger CommitLog")
        self._dledger_store = store
        commit_log = store.commit_log
        peers = check_dledger(c)
        timings = Timings(
            heart_beat_time_interval_ms=c.heart_beat_time_interval_ms,
            max_heart_beat_leak=c.max_heart_beat_leak,
            min_vote_interval_ms=c.min_vote_interval_ms,
            max_vote_interval_ms=c.max_vote_interval_ms,
            max_wait_ack_time_ms=c.max_wait_ack_time_ms,
        )
        settings = DLedgerSettings(
            c.dleger_group or c.broker_name,
            c.dleger_self_id,
            peers,
            commit_log.directory,
            timings,
            c.preferred_leader_id or None,
            c.vote_when_emptied,
        )
        # haTls puts the DLedger channel on mutual TLS with the keys the HA stream would use: TLS-only
        # whatever tls.server.mode says (a member is no client that may need plaintext)
        ha_tls = self.ha_tls_settings
        mutual = dataclasses.replace(ha_tls, mode="enforcing") if ha_tls is not None else None
        self.dledger = DLedgerServer(
            settings,
            commit_log.dlog,
            on_role=self._dledger_role,
            on_commit=store.dispatch_committed,  # (a follower's: see _note_as_follower)
            on_peer_back=self._dledger_peer_back,
            tls=ServerTls(mutual, require_client=True, why="haTls") if mutual is not None else None,
            client_ssl=mutual.client_context(verify=True) if mutual is not None else None,
            idle_timeout=c.server_channel_max_idle_time_seconds,
        )
        # a member whose store refuses writes (a full disk) would be elected and never take sends
        self.dledger.node.can_lead = lambda: not store.disk_full
        # while it hands the leadership over it appends nothing (DLedger's appendAsLeader refuses with
        # LEADER_TRANSFERRING, answered as OS_PAGECACHE_BUSY): else, under steady sends, the transferee
        # stands with a shorter log than the other members, loses the vote, and the transfer fails
        member = self.dledger.node.m
        store.put_refusal = lambda: None if member.transferee is None else PutMessageStatus.OS_PAGECACHE_BUSY
        self._set_role(master=False)
        self._note_as_follower(True)
        await self.dledger.start()

    def _note_as_follower(self, following: bool) -> None:
        """A DLedger follower serves what it holds, as a slave does: a topic made on the leader since the last
        metadata sync (10 s) has committed entries here and no config, and the member elected after the
        leader's loss would refuse its pulls and sends. While following, its dispatches note such topics and
        each dispatch batch derives their configs (:meth:`_derive_replicated_topics`); a leader's dispatch
        runs neither (its send path calls nothing more)."""
        group = self.dledger
        assert group is not None
        if following == self._noting:
            return
        self._noting = following
        store = self._dledger_store
        if following:
            store.add_arrival_listener(self._note_replicated)
            group.on_commit = self._dispatch_as_follower
        else:
            store.remove_arrival_listener(self._note_replicated)
            group.on_commit = store.dispatch_committed

    def _dispatch_as_follower(self) -> int:
        """A follower's dispatch of committed entries, then the configs of the topics it noted."""
        n = self._dledger_store.dispatch_committed()
        self._derive_replicated_topics()
        return n

    def _set_role(self, master: bool) -> None:
        """4.9.8's ``changeToMaster(SYNC_MASTER)`` / ``changeToSlave(id)``: the id registered and whether
        the store takes puts (a slave's refuses them with SERVICE_NOT_AVAILABLE)."""
        c = self.config
        role = "SYNC_MASTER" if master else SLAVE
        c.broker_role = role
        self._dledger_store.config.broker_role = role
        c.broker_id = 0 if master else int(c.dleger_self_id[1:] or 0) + 1
        self._register_role()  # (nothing yet while the processors are not registered)

    def _dledger_role(self, term: int, role: Role) -> None:
        """``DLedgerRoleChangeHandler#handle``: called on the loop as the member's role changes. Losing the
        leadership stops sends at once; the new leader takes them once its log is committed and dispatched."""
        was_master = self.config.broker_role != SLAVE
        if self._role_task is not None:
            self._role_task.cancel()
            self._role_task = None
        if role is Role.LEADER:
            # fatal: a leader half made master holds the leadership while it serves wrong or nothing
            self._role_task = supervise(lambda: self._become_master(term), "dledger-to-master", fatal=True)
            return
        if role is Role.FOLLOWER or was_master:
            self._set_role(master=False)
            self._note_as_follower(True)
            if was_master:
                log.warning(
                    "broker %s is no longer the master (term %d, %s)",
                    self.config.broker_name,
                    term,
                    role.value,
                )
                # fatal: a master's services left running beside the next leader's deliver twice
                self._stopping = supervise(self._stop_master_services, "dledger-to-slave", fatal=True)
                self._tasks.append(self._stopping)
            self.registration.request()
            if role is Role.FOLLOWER:
                before = self.master_addr
                follow = lambda: self._follow_new_master(term, before)  # noqa: E731
                self._role_task = supervise(follow, "dledger-follow-master")

    async def _follow_new_master(self, term: int, before: str | None) -> None:
        """A follower syncs topics and groups from the master its NameServers list, learnt from its
        registration's answer (as 4.9.8's ``changeToSlave``); but a new leader registers only once its log
        is committed, usually after that answer, and the next registration is a period (30 s) away, during
        which a topic made since the last sync is served by no follower. So, for one such period, it asks
        the NameServers every heartbeat, and syncs from a master other than ``before`` (the one it had)
        as soon as one is listed."""
        group = self.dledger
        assert group is not None
        c = self.config
        loop = asyncio.get_running_loop()
        deadline = loop.time() + c.register_name_server_period / 1000
        while loop.time() < deadline:
            if group.node.is_leader or group.node.m.term != term:
                return
            listed = await self._listed_masters()
            master = min(listed - {before, self.addr}, default=None)
            if master is not None and len(listed) == 1:
                self.master_addr = master
                try:
                    await self.sync_from_master()
                except Exception as exc:  # the 10 s sync loop tries again
                    log.warning("metadata sync from the new master %s failed: %s", master, exc)
                return
            await asyncio.sleep(c.heart_beat_time_interval_ms / 1000)

    async def _find_master(self) -> str | None:
        """A slave's master's broker address from the NameServers, when its last registration's answer
        named none (it came while the master was down): without it the slave could not check its tail
        and so not replicate again until the next registration, a period (30 s) after the master's
        return, and a SYNC_MASTER answers SLAVE_NOT_AVAILABLE to every send meanwhile."""
        listed = await self._listed_masters()
        if len(listed) == 1 and self.master_addr is None:
            self.master_addr = listed.pop()
            log.info("HA: the NameServers list %s as this slave's master", self.master_addr)
        return self.master_addr

    async def _ask_master_ha(self) -> None:
        """A slave's HA connect refused at the master's HA address it knows (the master restarted on
        another HA port, or is down) asks its NameServers where it is: a registration, whose answer names
        the master's haServerAddr as the master registered it (no other request does). Without topics,
        which a NameServer reads of a master only: light enough for every refused connect."""
        await self.register_all(())

    async def _listed_masters(self) -> set[str]:
        """The addresses the NameServers that answered list as this group's master (brokerId 0)."""
        return {g[0] for g in await self._registered_groups("DLedger follower: master") if 0 in g}

    def _dledger_peer_back(self, peer: str) -> None:
        """A member answers the leader again: if it was a master that ran on unaware (paused, cut off), it may
        have registered as brokerId 0 over this one before stepping down. The master registers again now
        and once more a little later (the other's step-down registration may land in between)."""
        if self.config.broker_role == SLAVE:
            return
        log.info("DLedger member %s answers again: registering as the master again", peer)
        self.registration.request()
        asyncio.get_running_loop().call_later(
            2 * self.config.heart_beat_time_interval_ms / 1000, self.registration.request
        )

    async def _become_master(self, term: int) -> None:
        group = self.dledger
        assert group is not None
        if self._stopping is not None:  # else its stops could land after this start (services not running)
            await asyncio.wait([self._stopping])  # (neither cancels it nor raises what it raised)
        dlog = group.log
        store = self._dledger_store
        assert isinstance(store.commit_log, DLedgerCommitLog)
        store.commit_log.term = term
        recorded, tries = False, 0
        # a leader that cannot write its term record takes no sends: another member must lead
        c = self.config
        give_up_at = time.monotonic() + c.max_heart_beat_leak * c.heart_beat_time_interval_ms / 1000
        while True:
            if not group.node.is_leader or group.node.m.term != term:
                return
            if not recorded:  # (retried while the disk refuses it, said once)
                recorded = self._append_term_record(term, report=tries == 0)
                tries += 1
                if not recorded and time.monotonic() >= give_up_at:
                    group.node.give_up_leadership("its store refuses its term record")
                    return
            if recorded and dlog.committed_index == dlog.last_index:
                break
            await asyncio.sleep(0.1)
        store.dispatch_committed()  # (noted as a follower's yet)
        # before it serves as master: a topic its dispatches noted gets its derived config now (the old
        # leader's last sync, where it has one, wins); its own dispatches note nothing more
        self._note_as_follower(False)
        self._derive_replicated_topics()
        store.recover_topic_queue_table()
        # topics are no part of the log: one made since this member's last metadata sync has messages here
        # and no config; without one it is registered nowhere, and the members syncing from this one drop
        # theirs too
        self.topics.recreate_lost_topics(store.topic_queue_table())
        # progress files are local: another leader may have delivered timers since they were written
        timers = TimerMessageService(self)
        await asyncio.to_thread(timers.load, takeover=True)
        await self.transactions.catch_up()  # the op records its leaders wrote (start reads what is left)
        # POP records are local: lent again from the synced offset table, less what the revive log says
        self.pop.take_over()
        await self.pop.catch_up()
        if not group.node.is_leader or group.node.m.term != term:
            timers.progress.close()
            return
        self.timers = timers
        self._set_role(master=True)
        self.schedule.take_over()  # its delivery progress is the last synced copy: others delivered since
        self.schedule.start()
        self.transactions.start()
        self.timers.start()
        self.pop.start()
        log.info("broker %s is the master (DLedger leader of term %d)", self.config.broker_name, term)
        # A NameServer refuses brokerId 0 while the old master's connection to it is open (a paused or cut
        # off master that has not stepped down yet): asked again every heartbeat until each one took it.
        while len(await self.register_all()) < len(self.config.namesrv_addrs):
            await asyncio.sleep(self.config.heart_beat_time_interval_ms / 1000)
            if not group.node.is_leader or group.node.m.term != term:
                return

    def _append_term_record(self, term: int, report: bool = True) -> bool:
        """Raft's empty entry at the start of a term, as a CommitLog record (a CommitLog has no empty entry):
        a message to the term topic saying the term and this member. It commits the predecessor's tail with
        it, which Raft's rule commits only with an entry of the leader's own term. False: not appended."""
        group = self.dledger
        assert group is not None
        c = self.config
        host = (c.ip1, c.listen_port)
        record = Message(
            DLEDGER_TERM_TOPIC,
            f"term={term} leader={c.dleger_self_id}".encode(),
            properties={PROPERTY_DLEDGER_TERM: str(term), PROPERTY_DLEDGER_LEADER: c.dleger_self_id},
            born_timestamp=int(time.time() * 1000),
            born_host=host,
            store_host=host,
            wait_store_msg_ok=False,
        )
        result = self._dledger_store.put_leader_record(record)
        if not result.ok:
            if report:
                log.error(
                    "DLedger leader of term %d cannot append its term record (retried): %s",
                    term,
                    result.status.value,
                )
            return False
        group.wait_committed(group.log.last_index)  # (pushed at once; the caller waits for the commit)
        return True

    async def _stop_master_services(self) -> None:
        """What only a master runs, stopped on losing the leadership (the store refuses puts already)."""
        await self.schedule.stop()
        await self.transactions.stop()
        await self.timers.stop()
        await self.pop.stop()

    async def _check_replica_before_serving(self) -> None:
        """A restarted slave's store may end in records its master does not hold (it ran apart from it, or
        the master came back from an older disk): when the master answers within a few seconds they are
        set aside before the port accepts, so no client is ever served them. A master that does not
        answer keeps the slave from nothing it knows to be the master's: it serves up to its replica mark,
        the rest once the master is back and the check passed or cut it. So does a check that fails (a cut's
        incarnation on a full disk, a peer's bad answer): logged at ERROR once, made again by the HA loop;
        it stopped the broker's start, which left a slave serving nothing at all. One that found the cut
        first holds back from it (:meth:`ReplicaStore.hold_back`): the mark, stale, served what its master
        replaced."""
        slave = self.ha_slave
        if slave is None or slave.master_records is None or self.store.max_phy_offset == 0:
            return

        async def first_check() -> bool:
            await self.register_all()  # the answer names the master's broker and HA addresses
            return await slave.check_tail()

        try:
            async with asyncio.timeout(FIRST_CHECK_TIMEOUT):
                checked = await first_check()
        except TimeoutError:
            checked = False
        except Exception as exc:  # (nothing cut that is not kept: checked again before replicating)
            log.error(
                "this slave's first check of its last record against its master failed: %s: %s; serving up "
                "to its replica mark (offset %d) meanwhile, checked again before replication resumes",
                type(exc).__name__,
                exc,
                slave.store.replica_mark,
            )
            return
        if not checked:
            log.warning(
                "serving before this slave's last record is checked against its master (not answering): "
                "%s; it is checked before replication resumes",
                f"{plural(slave.store.held_back, 'byte')} past offset {slave.store.replica_mark}, where its log is known "
                "to be its master's, are held back until then"
                if slave.store.held_back
                else "its whole log is known to be its master's",
            )

    async def _registered_groups(self, why: str) -> list[dict[int, str]]:
        """This broker's group as each NameServer that answered lists it: brokerId → address (empty: the
        group is not listed there). ``why`` names the look-up in a failure's warning."""
        c = self.config

        async def one(addr: str) -> dict[int, str] | None:
            request = RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO)
            try:
                response = await self.client.invoke(addr, request, 3.0)
                if response.code != ResponseCode.SUCCESS or not response.body:
                    return None
                group = ClusterInfo.loads(response.body).broker_addr_table.get(c.broker_name)
                if group is None or group.cluster != c.broker_cluster_name:
                    return {}
                return {int(i): a for i, a in group.broker_addrs.items()}
            except (RemotingError, ValueError, TypeError) as exc:
                log.warning("%s: no answer from name server %s: %s", why, addr, exc)
                return None

        return [a for a in await asyncio.gather(*(one(a) for a in c.namesrv_addrs)) if a is not None]

    async def registered_slave_hosts(self) -> set[str] | None:
        """The hosts the NameServers list as slaves (brokerId >= 1) of this broker's group (the HA gate's
        look-up); None when none answered (no NameServer configured included: no slave can be told)."""
        answers = await self._registered_groups("HA gate: slave list")
        if not answers:
            return None
        return {split_addr(a)[0] for group in answers for i, a in group.items() if i >= 1}

    async def registered_slave_at(self, ha_client: str) -> tuple[str, int] | None:
        """The registered slave (broker address, brokerId) whose HA connection comes from ``ha_client``:
        the one slave of this group on that host, else the one whose runtime info shows that end of its
        connection (``haClientAddress``: slaves sharing a host); None when that cannot be told."""
        host = peer_host(split_addr(ha_client)[0])
        slaves = {
            (a, i)
            for group in await self._registered_groups("HA: slave list")
            for i, a in group.items()
            if i >= 1 and peer_host(split_addr(a)[0]) == host
        }
        if len(slaves) <= 1:
            return next(iter(slaves), None)

        async def shows(addr: str) -> bool:
            request = RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO)
            try:
                response = await self.client.invoke(addr, request, 3.0)
                table = KVTable.loads(response.body).table if response.code == ResponseCode.SUCCESS else {}
            except (RemotingError, ValueError, TypeError):
                return False
            return table.get("haClientAddress") == ha_client

        ordered = sorted(slaves)
        answers = await asyncio.gather(*(shows(a) for a, _ in ordered))
        found = [s for s, ok in zip(ordered, answers, strict=True) if ok]
        return found[0] if len(found) == 1 else None

    async def sync_from_master(self) -> list[str]:
        """A slave's metadata sync now (also run at start and every 10 s); returns what changed. A DLedger
        member stops taking it in once elected: its config says slave until it is made master, and its POP
        lends again from its own offset table from the moment it takes over (see ``sync_metadata``)."""
        if self.master_addr is None:
            return []
        asked: dict[str, TopicConfig] = {}  # the configs derived when the master's topic table was asked for

        def asking(code: int) -> None:
            if code == RequestCode.GET_ALL_TOPIC_CONFIG:
                asked.update(self._derived_topics)

        changed = await sync_metadata(
            self.client,
            self.master_addr,
            self.store.configs,
            self.slave_commits,
            asking=asking,
            may_apply=self._not_leading,
            held=self.store.queue_keys,
        )
        if changed:
            log.info("synced %s from master %s", ", ".join(changed), self.master_addr)
        if type(self.store.configs.topics).__name__ in changed:
            # the master's table replaced the derived configs, but one derived after it was asked for may
            # be missing from it: derived while the request was under way (the master read its table before
            # the topic was made there), it is put back; derived after the table was taken (the sync's
            # other steps still under way), it is still there. Either stays derived.
            derived = self._derived_topics
            late = [c for t, c in derived.items() if asked.get(t) is not c and self.topics.get(t) is None]
            for config in late:
                self.topics.file.update(config, persist=False)
            if late:
                self.topics.file.persist()
            self._derived_topics = {t: c for t, c in derived.items() if self.topics.get(t) is c}
        return changed

    def _not_leading(self) -> bool:
        """Whether this broker's DLedger member does not lead (a member elected may still say slave)."""
        return self.dledger is None or not self.dledger.node.is_leader

    def _note_replicated(self, topic: str, queue_id: int, _max_offset: int) -> None:
        """(The dispatch thread's arrival listener on a slave.) A queue of a topic this slave has no config
        for, or more queues than one it derived: noted for :meth:`_derive_replicated_topics`."""
        config = self.topics.get(topic)
        if config is None or (topic in self._derived_topics and queue_id >= config.read_queue_nums):
            if topic == DLEDGER_TERM_TOPIC or topic.startswith(REVIVE_TOPIC_PREFIX):
                return  # (a store's own records, never routed: as recreate_lost_topics skips them)
            with self._unconfigured_lock:
                queues = min(queue_id + 1, MAX_HELD_QUEUE_NUMS)  # (a foreign master's queue id: unbounded)
                self._unconfigured[topic] = max(self._unconfigured.get(topic, 0), queues)

    def holds_unconfigured_queue(self, topic: str, queue_id: int) -> bool:
        """Whether a queue past a derived config's count is one this broker answers as empty: the config
        counts the queues that held data, a reader routed by the master's (more queues) pulls them all,
        and a queue with nothing here is empty, not illegal (asked on the refusal's path only)."""
        return topic in self._derived_topics and queue_id < MAX_HELD_QUEUE_NUMS

    def _derive_replicated_topics(self) -> None:
        """A slave serves what it holds: a replicated topic without a config (the master was down at each
        metadata sync since it was created) gets one derived from its queues, as recovery gives one to a
        topic with data; the next successful sync replaces it with the master's."""
        if not self._unconfigured:
            return
        with self._unconfigured_lock:
            pending, self._unconfigured = self._unconfigured, {}
        derived = []
        for topic, queues in sorted(pending.items()):
            config = self.topics.get(topic)
            if config is None or (topic in self._derived_topics and config.read_queue_nums < queues):
                config = TopicConfig(topic, queues, queues)
                self.topics.file.update(config, persist=False)
                self._derived_topics[topic] = config
                derived.append(f"{topic} ({queues} queues)")
        if derived:
            self.topics.file.persist()
            log.warning(
                "serving %s with no config from the master yet, with configs derived from "
                "their queues until the next metadata sync: %s",
                plural(len(derived), "replicated topic"),
                ", ".join(derived),
            )

    async def _metadata_sync_loop(self) -> None:
        while True:
            try:
                if is_slave(self.config) and self._not_leading():  # (DLedger mode: while not elected)
                    if self.master_addr is None and self.dledger is not None:
                        # a registration answered while no master was listed (a leader stepping down,
                        # elected again) names none, and the next one is a period (30 s) away
                        listed = await self._listed_masters() - {self.addr}
                        self.master_addr = listed.pop() if len(listed) == 1 else None
                    await self.sync_from_master()
            except Exception:
                log.exception("slave metadata sync failed")
            await asyncio.sleep(METADATA_SYNC_INTERVAL)

    def indexed_message(self, offset: int) -> StoredMessage | None:
        """The message stored at CommitLog `offset`, or None unless its ConsumeQueue unit points there:
        a record forged inside another message's body (its CRC is the sender's to compute) must not
        pass for a message where a request names an offset (VIEW_MESSAGE_BY_ID, END_TRANSACTION...)."""
        try:
            found = self.store.look_message_by_offset(offset)
            if found is None:
                return None
            msg = found.stored
            unit = self.store.get_messages("", msg.topic, msg.queue_id, msg.queue_offset, 1)
        except StoreError:  # a corrupt record
            return None
        indexed = unit.messages[0] if unit.messages else None
        return msg if indexed is not None and indexed.phys_offset == offset else None

    def _topic_at(self, offset: int) -> str | None:
        """For the ACL of codes that name an offset: the topic of the message there, a half or
        delayed or timer message's real topic."""
        msg = self.indexed_message(offset)
        if msg is None:
            return None
        if msg.topic in _PARKING_TOPICS:
            return msg.properties.get(PROPERTY_REAL_TOPIC, msg.topic)
        return msg.topic

    def _open_store(self) -> None:
        """Open and start the store and everything kept in it; on failure the store is closed again."""
        self.store = self._store_factory(self.config)
        commit_log = getattr(self.store, "commit_log", None)
        if isinstance(
            commit_log, DLedgerCommitLog
        ):  # before open: a Raft member commits what a quorum holds,
            commit_log.auto_commit = False  # not every entry its log kept (an old leader's tail is not)
        self.store.open()
        try:
            if not self.config.enable_dleger_commit_log:
                # before the log's first change (a put, an append from a master): records past this point
                # are this incarnation's, and a store restored from an older copy does not know it; in every
                # role, as a log recovered shorter than it was (a power loss) ends the earlier ones where it
                # writes again. A start that writes nothing begins none (docs/replication.md §incarnations)
                self.store.begin_incarnation(at_first_change=True)
            configs = self.store.configs
            self.topics = TopicConfigManager(self.config, configs.topics)
            self.groups = SubscriptionGroupManager(configs.subscription_groups, self.config)
            self.groups.refuse = self.creation_refusal
            self.groups.persist_created = self.persist_groups.request
            self.offsets = configs.consumer_offsets
            self.topics.create_system_topics()
            self.groups.create_builtin_groups()
            self.topics.on_change = self.schedule_register
            self.consumers.on_ids_changed = self._notify_ids_changed
            self.hold = PullRequestHoldService(
                self.store.get_max_offset,
                5.0 if self.config.long_polling_enable else self.config.short_polling_time_mills / 1000,
            )
            self.store.add_arrival_listener(self.hold.on_arrival)
            self.schedule = ScheduleMessageService(self)
            self.transactions = TransactionService(self)
            self.store.start()
            # once started the store's queues are complete: a table written before creations checked its
            # counts is clamped above them, and a topic holding messages without a config gets one
            self.topics.clamp_queue_counts(self.store.queue_keys)
            self.topics.recreate_lost_topics(self.store.topic_queue_table())
            self.transactions.load()
            self.pop = PopService(self)
            self.pop.load()
            self.timers = TimerMessageService(self)
            # a slave keeps no timer progress: its master delivers; a DLedger member loads it when elected
            if not is_slave(self.config) and not self.config.enable_dleger_commit_log:
                self.timers.load()
        except BaseException:
            self.store.shutdown()
            raise
        # (a DLedger member's sends are answered by the quorum, never by a flush: see DefaultMessageStore)
        if self.config.flush_disk_type == "SYNC_FLUSH" and not self.config.enable_dleger_commit_log:
            self._flush_pool = ThreadPoolExecutor(max_workers=32, thread_name_prefix="broker-sync-put")
            self.offloads_puts = True

    async def stop(self) -> None:
        """Unregister, stop serving, flush offsets and the store (the store writes its checkpoint)."""
        if not self._started:
            return
        self._started = False
        self.state = "stopping"
        await cancel_tasks(self._tasks)
        self._tasks = []
        if self.grpc is not None:  # first: no 5.x request reaches a service being stopped
            await self.grpc.stop()
        self.loop_watch.stop()
        await self.registration.aclose()
        await self.register_topics.aclose()
        await self.persist_topics.aclose()
        await self.persist_groups.aclose()
        await self._unregister_all()
        await self.schedule.stop()
        await self.timers.stop()
        await self.transactions.stop()
        await self.pop.stop()
        await self.hold.stop()
        await cancel_tasks([self._role_task])
        if self.dledger is not None:
            await self.dledger.stop()
        if self.ha_slave is not None:
            await self.ha_slave.stop()
        if self.ha_master is not None:
            await self.ha_master.stop()
        await self.server.stop(grace=2.0)
        await self.client.close()
        self._stop_metrics()
        if self._flush_pool is not None:
            self._flush_pool.shutdown(wait=True)
        if self.groups.unsaved:  # groups created on use since the last write (nothing serves now)
            self.groups.persist_now()
        try:
            self.topics.file.fold()  # the journaled topic creations into topics.json: what Java reads
        except OSError as e:  # (still in the journal: our next start replays and folds them)
            log.error("could not fold the topic journal into %s: %s", self.topics.file.path, e)
        self.store.shutdown()  # persists offsets and delay offsets too
        log.info("broker %s stopped", self.config.broker_name)

    async def __aenter__(self) -> Broker:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def _register_processors(self) -> None:
        from daemon.acl import admin as acl
        from daemon.broker.processors import (
            admin,
            heartbeat,
            lock,
            offset,
            pop,
            pull,
            query,
            send,
            transaction,
        )

        table: dict[int, Processor] = {}
        for module in (send, pull, heartbeat, offset, query, admin, lock, transaction, acl, pop):
            table.update(module.processors(self))
        if self.dledger is not None:  # the role changes with the elections: refused while a slave
            self._role_processors = {
                code: (table[code], refusal) for code, refusal in slave_refusals().items()
            }
        elif is_slave(self.config):
            table.update(slave_refusals())
        for code, processor in table.items():
            self.server.register(code, processor)
        self._register_role()

    def _register_role(self) -> None:
        """(DLedger mode) The processors of the codes a slave refuses, for the role the broker has now:
        registered again at each change of role (:meth:`_set_role`), so that a master's sends reach their
        processor directly, not through an interpreted wrapper asking the role at every send."""
        slave = self.config.broker_role == SLAVE
        for code, (processor, refusal) in self._role_processors.items():
            self.server.register(code, refusal if slave else processor)

    async def _persist_offsets(self) -> None:
        """consumerOffset.json and delayOffset.json, each when an offset in it changed."""
        configs = self.store.configs
        await persist_sliced(configs.consumer_offsets, OFFSETS_SLICE)
        await asyncio.to_thread(configs.delay_offsets.persist_if_changed)  # (18 levels at most)

    async def _sample_stats(self) -> None:
        """A stats tick, then the items counted into since the last one rolled to it `STATS_ROLL_SLICE`
        at a time with requests served between (idle items are not visited: their windows catch up when
        next counted into or read). Rolled on the send instead, at each item's first count after a tick,
        it cost a send to one of thousands of topics the item's cold windows."""
        stats = self.stats
        stats.sample()
        while stats.roll(STATS_ROLL_SLICE):
            await asyncio.sleep(0)

    def _table_size(self) -> int:
        """Entries of the tables that grow with topics (LoopWatch freezes them after a growth): topic
        configs, stats items and the committed offsets' ``topic@group`` maps."""
        return len(self.topics.table) + self.stats.item_count() + len(self.offsets.table)

    def _scan_clients(self) -> None:
        self.consumers.scan_expired()
        self.producers.scan_expired()
        self.locks.sweep()

    def _connection_closed(self, conn: Connection) -> None:
        self.hold.drop(conn)  # its held pulls: nobody to answer
        self.consumers.connection_closed(conn)
        self.producers.connection_closed(conn)

    # ------------------------------------------------------------------ store access

    async def offload(self, put: Callable[[_T], PutResult], arg: _T) -> PutResult:
        """Run a blocking put in the flush pool, where concurrent puts share one fsync."""
        return await asyncio.get_running_loop().run_in_executor(self._flush_pool, put, arg)

    async def put(self, msg: Message) -> PutResult:
        """Store one message (internal re-puts: retries, delay delivery, transaction commits, timers). In
        DLedger mode the result is PUT_OK only once a quorum holds it: a service that logs the re-put as
        done must not lose the copy to the truncation of a deposed leader's tail."""
        if msg.wait_store_msg_ok and self.offloads_puts:
            result = await self.offload(self.store.put_message, msg)
        else:
            result = self.store.put_message(msg)
        return await self.held(result)

    def leased(self) -> bool:
        """Whether this broker may lend POP messages now: always, but a DLedger member only on a fresh
        leadership lease (:meth:`~daemon.dledger.server.DLedgerServer.lease_fresh`). A leader cut off its
        peers steps down when a round of heartbeats finds no majority, counted from the answers it last
        had: up to a round after its peers may have elected another, which lends the same messages. The
        old one's lendings would hand each message to a second consumer, and no ack could end them (an
        ack needs the majority); a FIFO lending needs the majority too, before it is answered."""
        return self.dledger is None or self.dledger.lease_fresh()

    async def held(self, result: PutResult) -> PutResult:
        """A put's result once a DLedger quorum holds it (and everything appended before it); as it is
        outside DLedger mode."""
        group = self.dledger
        if group is not None and result.ok:
            from daemon.broker.processors.send import quorum_status

            # the put appended its entry: waiting for the log's last index covers it
            result.status = quorum_status(await group.wait_committed(group.log.last_index))
        return result

    def runtime_info(self) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO: every key 4.9.8 returns (BrokerController's thread pools and totals,
        DefaultMessageStore's and StoreStatsService's figures). mqadmin needs at least `putTps` and
        `getTransferedTps`. Pools we do not have report an empty queue and their configured capacity."""
        store, stats, config = self.store, self.stats, self.config
        settings = {**config.ROCKETMQ_DEFAULTS, **config.inert_keys()}
        # the ratio the store's watermarks act on (a test's simulated disk level shows here too)
        usage = store.disk_ratio()
        put_times = stats.put.total
        send_queue = self._flush_pool._work_queue.qsize() if self._flush_pool is not None else 0
        info = {
            "brokerVersionDesc": "V4_9_8",
            "brokerVersion": str(int(Version.V4_9_8)),
            "msgPutTotalYesterdayMorning": str(stats.put_yesterday_morning),
            "msgPutTotalTodayMorning": str(stats.put_today_morning),
            "msgPutTotalTodayNow": str(put_times),
            "msgGetTotalYesterdayMorning": str(stats.get_yesterday_morning),
            "msgGetTotalTodayMorning": str(stats.get_today_morning),
            "msgGetTotalTodayNow": str(stats.get.total),
            "sendThreadPoolQueueSize": str(send_queue),
            "sendThreadPoolQueueCapacity": settings["sendThreadPoolQueueCapacity"],
            "pullThreadPoolQueueSize": str(self.hold.parked),
            "pullThreadPoolQueueCapacity": settings["pullThreadPoolQueueCapacity"],
            "queryThreadPoolQueueSize": "0",
            "queryThreadPoolQueueCapacity": settings["queryThreadPoolQueueCapacity"],
            "EndTransactionQueueSize": "0",
            "EndTransactionThreadPoolQueueCapacity": settings["endTransactionPoolQueueCapacity"],
            "dispatchBehindBytes": "0",  # the store dispatches each put before answering it
            "pageCacheLockTimeMills": "0",
            "sendThreadPoolQueueHeadWaitTimeMills": "0",
            "pullThreadPoolQueueHeadWaitTimeMills": "0",
            "queryThreadPoolQueueHeadWaitTimeMills": "0",
            "earliestMessageTimeStamp": str(store.get_earliest_message_time()),
            "startAcceptSendRequestTimeStamp": settings["startAcceptSendRequestTimeStamp"],
            "remainTransientStoreBufferNumbs": str(2**31 - 1),  # no transient pool: Integer.MAX_VALUE
            "remainHowManyDataToFlush": human_bytes(max(0, store.max_phy_offset - store.flushed_phy_offset)),
            "commitLogDirCapacity": _capacity(config.commit_log_dir),
            # StoreStatsService
            "bootTimestamp": str(self.boot_timestamp),
            "runtime": _uptime(self.boot_timestamp),
            "putMessageEntireTimeMax": str(stats.put_latency.max_us // 1000),
            "putMessageTimesTotal": str(put_times),
            "putMessageSizeTotal": str(stats.put_size_total),
            "putMessageDistributeTime": stats.put_latency.distribution(),
            "putMessageAverageSize": str(stats.put_size_total / put_times if put_times else 0.0),
            "putMessageFailedTimes": str(stats.put_failed),
            "dispatchMaxBuffer": "0",
            "getMessageEntireTimeMax": str(stats.get_max_us // 1000),
            "putTps": stats.tps_triplet(stats.put),
            "getFoundTps": stats.tps_triplet(stats.get_found),
            "getMissTps": stats.tps_triplet(stats.get_miss),
            "getTotalTps": stats.tps_triplet(stats.get_found, stats.get_miss),
            "getTransferedTps": stats.tps_triplet(stats.get),
            "putLatency99": f"{stats.put_latency.percentile_ms(0.99):.2f}",
            "putLatency999": f"{stats.put_latency.percentile_ms(0.999):.2f}",
            # DefaultMessageStore
            f"commitLogDiskRatio_{config.commit_log_dir}": str(usage),
            "commitLogDiskRatio": str(usage),  # Java prints the double as is: "0.35"
            "consumeQueueDiskRatio": str(usage),
            "commitLogMinOffset": str(store.min_phy_offset),
            # (read before haNextIncarnation: while that one is due, this is where it begins)
            "commitLogMaxOffset": str(store.max_phy_offset),
            # mqctl's additions: the role and the replication state
            **ha_runtime_info(
                config.broker_role,
                self.ha_master,
                self.ha_slave,
                list_quarantines(config.store_path_root_dir),
                store,
            ),
            **(dledger_runtime_info(self.dledger) if self.dledger is not None else {}),
            # and the event loop's lag and the GC's pauses
            **self.loop_watch.runtime_info(),
            # POP (5.x): messages popped and not yet acked, per group
            **pop_runtime_info(self.pop.in_flight()),
        }
        for level, offset in sorted(self.schedule.offsets.offsets().items()):
            queue_max = store.get_max_offset(SCHEDULE_TOPIC, level - 1)
            info[f"scheduleMessageOffset_{level}"] = f"{offset},{queue_max}"
        info.update(self.timers.runtime_info())  # mqctl's: timer messages waiting, per real topic
        refusal = store.write_refusal()
        if refusal is not None:  # mqctl's: a store that refuses puts says why (4.9.8 says nothing)
            info[WRITE_REFUSED_RUNTIME_KEY] = refusal
        info[CLOCK_RUNTIME_KEY] = str(store.clock.now_ms())  # last: the nearest to the answer's sending
        return info

    # ------------------------------------------------------------------ client notifications

    def _notify_ids_changed(self, info: ConsumerGroupInfo) -> None:
        if not self.config.notify_consumer_ids_changed_enable:
            return
        group = self.groups.get(info.group)
        if group is not None and not group.notify_consumer_ids_changed_enable:
            return
        header = NotifyConsumerIdsChangedRequestHeader(info.group).to_ext_fields()
        for channel in list(info.channels.values()):
            try:
                channel.conn.invoke_oneway(
                    RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, dict(header))
                )
            except RemotingError as exc:
                log.debug("cannot notify %s: %s", channel.client_id, exc)

    # ------------------------------------------------------------------ NameServer registration

    def registration_wrapper(self, topics: Iterable[str] | None = None) -> TopicConfigSerializeWrapper:
        """The topic table (or those topics) as registered; a non-RW broker permission caps every topic's perm."""
        wrapper = self.topics.wrapper(topics)
        perm = self.config.broker_permission
        if perm & PermName.READ_WRITE != PermName.READ_WRITE:
            wrapper.topic_config_table = {
                name: dataclasses.replace(t, perm=t.perm & perm)
                for name, t in wrapper.topic_config_table.items()
            }
        return wrapper

    async def register_all(self, topics: Iterable[str] | None = None) -> list[str]:
        """Register with every NameServer concurrently, with the whole topic table or only ``topics``;
        returns the addresses that accepted."""
        if not self.config.namesrv_addrs:
            return []
        async with self._registering:
            try:
                return await self._register_all(topics)
            finally:
                if self.ha_slave is not None:
                    self.ha_slave.registered()

    async def _register_all(self, topics: Iterable[str] | None) -> list[str]:
        addrs = self.config.namesrv_addrs
        if topics is None and self._registered_alone:
            self._registered_alone = False
            self.topics.new_version()
        c = self.config
        compressed = c.compressed_register
        body = await self._registration_body(topics, compressed)
        table = self._table_body
        crc = table[3] if table is not None and table[2] is body else _crc32(body)
        header = RegisterBrokerRequestHeader(
            c.broker_name,
            self.addr,
            c.broker_cluster_name,
            c.ha_server_addr,
            c.broker_id,
            compressed,
            crc,
            # a newer leader's term lets our NameServers give it brokerId 0 from a live, stale master, and
            # the group's hosts let them refuse that to anyone else claiming a term
            d_ledger_term=self.dledger.node.m.term if self.dledger is not None else None,
            d_ledger_hosts=self._dledger_hosts,
        ).to_ext_fields()
        timeout = c.register_broker_timeout_mills / 1000

        async def one(addr: str) -> str | None:
            request = RemotingCommand.request(RequestCode.REGISTER_BROKER, dict(header), body)
            try:
                response = await self.client.invoke(addr, request, timeout)
            except RemotingError as exc:
                log.warning("register to name server %s failed: %s", addr, exc)
                return None
            if response.code != ResponseCode.SUCCESS:
                log.warning(
                    "name server %s refused registration: %s %s", addr, response.code, response.remark
                )
                return None
            if self.ha_slave is not None or self.dledger is not None:
                answer = RegisterBrokerResponseHeader.from_ext_fields(response.ext_fields or {})
                self.master_addr = answer.master_addr or None if is_slave(c) else None
                if self.ha_slave is not None:
                    self.ha_slave.set_master(answer.ha_server_addr)
            return addr

        done = await asyncio.gather(*(one(a) for a in addrs))
        accepted = [a for a in done if a is not None]
        links = {a: self.client.open_connection(a) for a in accepted}
        if topics is None:
            self._table_links = links
        elif any(links.get(a) is None or links.get(a) is not self._table_links.get(a) for a in addrs):
            # A NameServer that took these topics over a new connection may have restarted since the
            # whole table: it knows these alone, at the table's version, and would leave the next whole
            # table unread at that version. Over the same connection it holds the table, and these topics
            # changed nothing else: the next whole table keeps the version (4.9.8's does too) and a
            # NameServer that already took it reads no table (a megabyte with 10,000 topics).
            self._registered_alone = True
        if topics is None and table is not None and body is table[2]:
            # what forceRegister=false's query may stand in for: the table every NameServer took
            self._registered_table = table[1] if len(accepted) == len(addrs) else None
        return accepted

    async def _registration_body(self, topics: Iterable[str] | None, compressed: bool) -> bytes:
        """REGISTER_BROKER's body. The whole table is slow to encode with 10,000 topics: it is encoded only
        when the table (its data version: entries are replaced, never changed in place), the permission
        or the form changed, and then in slices (`encode_sliced`)."""
        if topics is not None:
            wrapper = self.registration_wrapper(topics)
            if not compressed:
                self._table_text.note(wrapper.topic_config_table)
            return RegisterBrokerBody(wrapper, []).encode(compressed)
        # The version object too (a slave's sync replaces it with the master's), and the table's size (the
        # system topics made at start bump no version).
        version = self.topics.file.data_version
        made_from = self._table_key(compressed)
        cached = self._table_body
        if cached is not None and cached[0] is version and cached[1] == made_from:
            return cached[2]
        wrapper = self.registration_wrapper()  # (no await since `made_from`: it describes this snapshot)
        body = await encode_sliced(RegisterBrokerBody(wrapper, []), compressed, self._table_text)
        self._table_body = (version, made_from, body, _crc32(body))
        return body

    def _table_key(self, compressed: bool) -> tuple[int, int, int, int, bool]:
        """What the whole table's body depends on: its version, its size (the system topics made at start
        bump no version), the broker's permission and the form."""
        version = self.topics.file.data_version
        size = len(self.topics.file.table)
        return (version.counter, version.timestamp, size, self.config.broker_permission, compressed)

    async def _register_changed(self) -> None:
        topics, self._changed_topics = self._changed_topics, set()
        if topics:  # empty when a creation's own run already took its topic
            await self.register_all(topics)

    def schedule_register(self, topic: str | None = None) -> None:
        """Re-register soon: ``topic`` alone when only it changed, else the whole table; a burst of
        changes costs one or two registrations."""
        if not self._started:
            return
        if topic is None:
            self.registration.request()
        else:
            self._changed_topics.add(topic)
            self.register_topics.request()

    async def _registration_loop(self) -> None:
        period = min(max(self.config.register_name_server_period, 10_000), 60_000) / 1000
        while True:
            await asyncio.sleep(period)
            try:
                await self.periodic_registration()
            except Exception:
                log.exception("name server registration failed")

    async def periodic_registration(self) -> bool:
        """The registration every ``registerNameServerPeriod``: the whole table, or with
        ``forceRegister=false`` (4.9.8's ``BrokerController#needRegister``) first QUERY_DATA_VERSION, which
        refreshes this broker's liveness, and the table only when a NameServer does not hold its version.
        With 10,000 topics the table is a megabyte each NameServer parses again every period. Unlike 4.9.8,
        a query that fails, or a body the last whole registration did not carry (a single topic's since,
        a new permission), registers the table; a slave always does (the answer names its master).
        True: the table was sent."""
        c = self.config
        if c.force_register or is_slave(c) or self._registered_alone:
            await self.register_all()
            return True
        async with self._registering:
            unchanged = self._registered_table == self._table_key(c.compressed_register)
            if unchanged and await self._namesrvs_hold_version():
                return False
        await self.register_all()
        return True

    async def _namesrvs_hold_version(self) -> bool:
        """Every NameServer answered QUERY_DATA_VERSION unchanged for the topic table's version."""
        c = self.config
        header = QueryDataVersionRequestHeader(c.broker_name, self.addr, c.broker_cluster_name, c.broker_id)
        version = self.topics.file.data_version
        body = DataVersion(version.counter, version.timestamp).dumps()

        async def one(addr: str) -> bool:
            request = RemotingCommand.request(RequestCode.QUERY_DATA_VERSION, header.to_ext_fields(), body)
            try:
                response = await self.client.invoke(addr, request, c.register_broker_timeout_mills / 1000)
            except RemotingError as exc:
                log.warning("data version query to name server %s failed: %s", addr, exc)
                return False
            if response.code != ResponseCode.SUCCESS:
                return False
            answer = QueryDataVersionResponseHeader.from_ext_fields(response.ext_fields or {})
            return answer.changed is False

        return all(await asyncio.gather(*(one(a) for a in c.namesrv_addrs)))

    async def _unregister_all(self) -> None:
        c = self.config
        header = UnregisterBrokerRequestHeader(c.broker_name, self.addr, c.broker_cluster_name, c.broker_id)

        async def one(addr: str) -> None:
            request = RemotingCommand.request(RequestCode.UNREGISTER_BROKER, header.to_ext_fields())
            try:
                await self.client.invoke(addr, request, 3.0)
            except RemotingError as exc:
                log.warning("unregister from name server %s failed: %s", addr, exc)

        await asyncio.gather(*(one(a) for a in c.namesrv_addrs))


def check_dledger(config: BrokerConfig) -> dict[str, str]:
    """DLedger mode's keys, checked before anything starts: the peers, and this broker one of them."""
    try:
        peers = parse_peers(config.dleger_peers)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    for node, addr in peers.items():
        port = addr.rpartition(":")[2]
        if not port.isascii() or not port.isdigit() or not 0 < int(port) <= MAX_PORT:
            raise ConfigError(f"dLegerPeers: {node}-{addr}: the port is 1..{MAX_PORT}, not {port!r}")
    if config.dleger_self_id not in peers:
        raise ConfigError(
            f"dLegerSelfId={config.dleger_self_id!r} is not one of dLegerPeers={config.dleger_peers!r}"
        )
    by_family: dict[int, list[str]] = {}
    for peer, addr in peers.items():
        try:
            by_family.setdefault(ipaddress.ip_address(parse_addr(addr)[0]).version, []).append(peer)
        except ValueError:
            continue  # a host name: its family is the resolver's
    if len(by_family) > 1:
        raise ConfigError(
            f"dLegerPeers={config.dleger_peers!r} mixes IPv4 members ({', '.join(by_family[4])}) and IPv6 "
            f"members ({', '.join(by_family[6])}): a member connects from its own address, so it cannot "
            "reach a member of the other family; give every member an address of one family"
        )
    return peers


def _crc32(body: bytes) -> int:
    return zlib.crc32(body) & 0x7FFFFFFF


def human_bytes(n: int) -> str:
    """Java's `MixAll.humanReadableByteCount(n, false)`: `1134` -> `1.1 KiB`, `0` -> `0 B` (the text
    exporters parse in `remainHowManyDataToFlush` and `commitLogDirCapacity`)."""
    if n < 1024:
        return f"{n} B"
    exp = min(int(math.log(n) / math.log(1024)), 6)
    return f"{n / 1024**exp:.1f} {'KMGTPE'[exp - 1]}iB"


def _capacity(path: str) -> str:
    """`Total : 252.0 GiB, Free : 66.6 GiB.` of the file system holding `path`."""
    try:
        usage = shutil.disk_usage(path)
    except OSError:
        return f"Total : {human_bytes(0)}, Free : {human_bytes(0)}."
    return f"Total : {human_bytes(usage.total)}, Free : {human_bytes(usage.free)}."


def _uptime(boot_ms: int) -> str:
    """Java's `[ d days, h hours, m minutes, s seconds ]` uptime text."""
    secs = max(0, int(time.time() * 1000) - boot_ms) // 1000
    d, rem = divmod(secs, 86400)
    h, rem = divmod(rem, 3600)
    m, s = divmod(rem, 60)
    return f"[ {d} days, {h} hours, {m} minutes, {s} seconds ]"


def _default_store(config: BrokerConfig) -> MessageStore:
    return DefaultMessageStore(
        config.store_config(),
        store_host=(config.ip1, config.listen_port),
        broker_name=config.broker_name,
    )
