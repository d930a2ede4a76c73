"""Master/slave replication on the HA port (docs/replication.md §replication): 4.9.8's HAService, HAConnection
and HAClient.

The master accepts on its HA listener only the hosts its NameServers list as slaves of its group
(:class:`SlaveGate`) and streams raw CommitLog bytes from each slave's reported offset (within its log;
inside a record too, as 4.9.8 does for a 4.9.8 slave that kept a partial record); acks advance ``push2slave_max_offset``, which SYNC_MASTER sends wait for
(a group commit: every waiting send whose record ends at or below an ack is answered at once). The
slave first checks its last record against the master's (:func:`common_end`) and sets aside a tail the
master does not hold, then connects to the master's HA address, reports its CommitLog end, and appends
only whole records that pass :class:`store.ha.ReplicaRecords` through its store's
:class:`store.ha.ReplicaStore` side. Everything runs on the broker's event loop; the byte formats are
the pure codecs of :mod:`store.ha`. What is checked, and where it stops: docs/replication.md.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import heapq
import itertools
import logging
import math
import socket
import ssl as _ssl
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from daemon.broker.headers import (
    DAMAGED_FIELD,
    OffsetResponseHeader,
    QueueHeader,
    UpdateConsumerOffsetRequestHeader,
    ViewMessageRequestHeader,
)
from daemon.broker.managers.topics import clamp_queue_counts
from daemon.lifecycle import cancel_tasks, supervise
from daemon.protect import budget_host, is_loopback
from daemon.remoting.bodies import KVTable
from daemon.remoting.client import Transport, connected_to_itself, peer_host
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.connection import Connection, Processor
from daemon.remoting.errors import RemotingError, is_acl_refusal
from daemon.remoting.limits import WarningGate
from daemon.remoting.server import TLS_HANDSHAKE_TIMEOUT, bind_listener
from store import fastjson
from store.checkpoint import (
    IDENTITY_SIZE,
    UNKNOWN_FOLLOWING,
    UNPROVEN_INCARNATION,
    Incarnation,
    incarnation_end,
    keep_master_history,
    master_history,
    parse_incarnations,
)
from store.commitlog import PutMessageStatus
from store.config import SLAVE, SYNC_MASTER, StoreConfig
from store.config_files import (
    ConfigFiles,
    ConsumerOffsetManager,
    DelayOffsetManager,
    JsonConfigFile,
    SubscriptionGroupFile,
    TopicConfigFile,
)
from store.ha import (
    DESCRIBE,
    DESCRIPTION_MAX,
    FRAME_HEADER,
    HAProtocolError,
    ReplicaRecordError,
    ReplicaRecords,
    ReplicaStore,
    decode_frames,
    encode_frame_header,
    encode_report,
    frame_extent,
    is_record_boundary,
    latest_report,
    max_record_size,
    record_spans,
    set_aside_in_place,
    transfer_start,
)
from store.quarantine import DIVERGED, Manifest
from store.words import plural

log = logging.getLogger(__name__)

_SYNC_OUTCOMES = (
    PutMessageStatus.PUT_OK,
    PutMessageStatus.SLAVE_NOT_AVAILABLE,
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
)
#: Delay before a slave reconnects after losing its master (Java waits 5 s; a second is plenty).
RECONNECT_DELAY = 1.0
#: The longest a master transfer loop sleeps before looking at the CommitLog again without a wake-up.
IDLE_POLL = 0.1
_READ_CHUNK = 256 * 1024
#: Connections of one host (an IPv6 peer's /64) that may wait at once for the gate's decision, which
#: waits for a NameServer look-up: seconds when one of them is silent. A slave opens one; past the
#: bound a connection is closed as it is accepted, so a stranger's flood holds a few descriptors, not
#: one a connection (the remoting port counts its own against `remotingMaxConnections`).
GATE_WAITING_PER_HOST = 16
#: The same for every host together.
GATE_WAITING = 1024
#: Tries at telling which registered slave a new HA connection is, and the seconds between them.
IDENTIFY_TRIES = 10
IDENTIFY_RETRY = 1.0
#: The seconds a slave waits for its master's HA port to accept a describe connection, and then for the
#: description; past them it is taken as describing nothing (see `HASlave._ha_port_runs`).
DESCRIBE_TIMEOUT = 3.0
#: At most one WARNING in this many seconds of a master whose HA port does not name the run its broker
#: port named: the slave asks again a reconnect delay later, for as long as it lasts.
TIE_WARNING_INTERVAL = 60.0


def _now() -> float:
    return time.monotonic()


def is_slave(config: StoreConfig) -> bool:
    return config.broker_role == SLAVE


def split_addr(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host.removeprefix("[").removesuffix("]"), int(port)  # (4.9.8 registers an IPv6 one bracketed)


def _endpoint(peer: tuple[str, int]) -> str:
    """HOST:PORT of a socket's name, as a master lists its slaves."""
    return f"{peer[0]}:{peer[1]}"


#: 4.9.8's answer to topic and group changes on a slave (docs/wire-protocol.md §admin-requests).
SLAVE_ADMIN_REMARK = (
    "Can't modify topic or subscription group from slave broker, please execute it from master broker."
)
_SLAVE_ADMIN_CODES = (
    RequestCode.UPDATE_AND_CREATE_TOPIC,
    RequestCode.DELETE_TOPIC_IN_BROKER,
    RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
    RequestCode.DELETE_SUBSCRIPTIONGROUP,
)
_SLAVE_SEND_CODES = (
    RequestCode.SEND_MESSAGE,
    RequestCode.SEND_MESSAGE_V2,
    RequestCode.SEND_BATCH_MESSAGE,
    RequestCode.CONSUMER_SEND_MSG_BACK,
)


def slave_refusals() -> dict[int, Processor]:
    """Processors a slave answers writes with, as 4.9.8 does: sends fail in its store (14), topic and
    group changes with SYSTEM_ERROR, END_TRANSACTION with SLAVE_NOT_AVAILABLE."""
    from daemon.broker.processors.send import _PUT_CODES

    def refuse(code: int, remark: str | None) -> Processor:
        def processor(conn: Connection, request: RemotingCommand) -> RemotingCommand:
            return request.make_response(code, remark)

        return processor

    send_code, send_remark = _PUT_CODES[PutMessageStatus.SERVICE_NOT_AVAILABLE]
    out: dict[int, Processor] = {
        c: refuse(ResponseCode.SYSTEM_ERROR, SLAVE_ADMIN_REMARK) for c in _SLAVE_ADMIN_CODES
    }
    out.update({code: refuse(send_code, send_remark) for code in _SLAVE_SEND_CODES})
    out[RequestCode.END_TRANSACTION] = refuse(
        ResponseCode.SLAVE_NOT_AVAILABLE, "Message store is slave mode, so end transaction is forbidden. "
    )
    return out


@dataclass(slots=True)
class SlaveState:
    """What ``mqctl broker ha status`` shows of one connected slave."""

    addr: str
    acked_offset: int
    transfer_offset: int
    connected_ms: int
    #: Seconds since the oldest byte the slave has not acked was sent to it (0 when it has everything).
    lag_seconds: float
    #: The broker address and brokerId the slave registered, once the master told which slave this is.
    registered: tuple[str, int] | None = None


class SlaveConnection:
    """One connected slave: a reader of its offset reports and a writer of CommitLog frames."""

    def __init__(
        self,
        master: HAMaster,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        counted: bool = True,
    ) -> None:
        self.master = master
        #: Whether a SYNC_MASTER counts its acknowledgements (see `HAMaster.counts`).
        self.counted = counted
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername")
        self.addr = _endpoint(peer) if peer else "?"
        self.acked = -1  # no report yet
        self.transfer_offset = -1
        #: (broker address, brokerId) as the slave registered them, once known (see `HAMaster.identify`).
        self.registered: tuple[str, int] | None = None
        self.connected_ms = int(time.time() * 1000)
        self.wake = asyncio.Event()
        self._started = asyncio.Event()
        self._sent: collections.deque[tuple[int, float]] = collections.deque()  # (frame end, sent at)

    async def run(self) -> None:
        tasks = [
            asyncio.create_task(self._read_loop(), name=f"ha-read-{self.addr}"),
            asyncio.create_task(self._write_loop(), name=f"ha-write-{self.addr}"),
        ]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                exc = None if t.cancelled() else t.exception()
                if isinstance(exc, OSError | HAProtocolError | RuntimeError):  # (RuntimeError: uvloop's)
                    log.warning("HA connection %s closed: %s", self.addr, exc)
                elif exc is not None:  # a bug: its traceback, and the slave connects again
                    log.error("HA connection %s failed: closing it", self.addr, exc_info=exc)
        finally:
            for t in tasks:
                t.cancel()
            for t in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t
            self.writer.close()
            with contextlib.suppress(Exception):
                await self.writer.wait_closed()

    async def _read_loop(self) -> None:
        buf = bytearray()
        housekeeping = self.master.config.ha_housekeeping_interval / 1000
        # a report must arrive whole within haHousekeepingInterval, as a remoting frame within the idle
        # timeout: the bytes of one begun are no activity, or a process on a slave's host sending a
        # report a byte at a time held the connection (and with it a transfer) for ever
        deadline = _now() + housekeeping
        while True:
            try:
                async with asyncio.timeout(max(deadline - _now(), 0.0)):
                    data = await self.reader.read(_READ_CHUNK)
            except TimeoutError:
                log.warning("HA slave %s sent no whole report for %.0f s: closing", self.addr, housekeeping)
                return
            if not data:
                log.info("HA slave %s disconnected", self.addr)
                return
            begun = bool(buf)
            buf += data
            if self.acked < 0 and buf[:8] == _DESCRIBE_REPORT:
                await self._describe()
                return
            offset, used = latest_report(buf)
            del buf[:used]
            if used or not begun:
                deadline = _now() + housekeeping
            if offset is None:
                continue
            end = self.master.store.max_phy_offset
            if offset > end:
                log.error(
                    "HA slave %s reports offset %d, beyond this master's end %d (a master restored from an "
                    "older disk, or not its master): closing",
                    self.addr,
                    offset,
                    end,
                )
                return
            first = self.master.store.min_phy_offset
            if self.acked < 0 and 0 < offset < first:
                # (4.9.8 sends such a slave heartbeats for ever: nothing it could append follows its end)
                log.error(
                    "HA slave %s reports offset %d, below this master's first retained offset %d (its retention "
                    "deleted the records between): a slave of ours begins its log again there once it has "
                    "asked this master where that is, any other needs an empty store: closing",
                    self.addr,
                    offset,
                    first,
                )
                return
            if self.acked < 0:
                if not is_record_boundary(self.master.store, offset):
                    # 4.9.8's HAClient appends frames raw, so after a lost connection it reports where the
                    # last frame cut a record: stream from there as 4.9.8's WriteSocketService does
                    log.warning(
                        "HA slave %s reports offset %d, where no record of this master's CommitLog starts (it "
                        "ends at %d): streaming from there, as 4.9.8 does for a slave that kept a partial record",
                        self.addr,
                        offset,
                        end,
                    )
                self.transfer_offset = transfer_start(offset, end, self.master.store.commit_log_file_size)
                log.info(
                    "HA slave %s requests offset %d, transfer starts at %d",
                    self.addr,
                    offset,
                    self.transfer_offset,
                )
                self.master.began(self)
                self._started.set()
            elif offset > self.transfer_offset:
                log.warning(
                    "HA slave %s acknowledges offset %d, beyond the %d sent to it: closing",
                    self.addr,
                    offset,
                    self.transfer_offset,
                )
                return
            self.acked = offset
            sent = self._sent
            while sent and sent[0][0] <= offset:
                sent.popleft()
            if self.counted:
                self.master.on_ack(offset)

    @property
    def lag_seconds(self) -> float:
        return _now() - self._sent[0][1] if self._sent else 0.0

    async def _describe(self) -> None:
        """The slave asks what its check relies on before it deletes (docs/replication.md §who-says-so)
        over this channel, which under haTls proves this master a member: one frame, then closed."""
        store = self.master.store
        table = ha_runtime_info(self.master.config.broker_role, None, None, None, store)
        table["commitLogMinOffset"] = str(store.min_phy_offset)
        table["commitLogMaxOffset"] = str(store.max_phy_offset)
        body = KVTable(table).dumps()
        self.writer.write(encode_frame_header(DESCRIBE, len(body)) + body)
        await self.writer.drain()
        log.info("HA: described this master's log to %s", self.addr)

    async def _write_loop(self) -> None:
        await self._started.wait()
        cfg = self.master.config
        store = self.master.store
        file_size = store.commit_log_file_size
        # at most one heartbeat per IDLE_POLL, as 4.9.8's WriteSocketService waits 100 ms between checks:
        # haSendHeartbeatInterval=0 made this loop send heartbeats back to back
        heartbeat = max(cfg.ha_send_heartbeat_interval / 1000, IDLE_POLL)
        last_write = _now()
        while True:
            self.wake.clear()
            offset = self.transfer_offset
            n = frame_extent(offset, store.max_phy_offset, file_size, cfg.ha_transfer_batch_size)
            if n > 0:
                data = store.read_commit_log(offset, n)
                if data is None:
                    raise HAProtocolError(f"offset {offset} is not in the master's CommitLog")
                self.writer.write(encode_frame_header(offset, n))
                self.writer.write(data)
                self.transfer_offset = offset + n
                self._sent.append((offset + n, _now()))
                await self.writer.drain()
                last_write = _now()
                continue
            if _now() - last_write >= heartbeat:
                self.writer.write(encode_frame_header(offset, 0))
                await self.writer.drain()
                last_write = _now()
            # not wait_for: on Python 3.11 it can return a wake that came with a cancel and drop the cancel
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(IDLE_POLL, heartbeat)):
                    await self.wake.wait()


class SlaveGate:
    """Who may replicate from this master: a peer whose address the NameServers list as a slave
    (brokerId >= 1) of this broker's group. Slaves register before they connect (ours and 4.9.8's learn
    the master's HA address from their registration answer), so one look-up at accept finds them.

    The match is on the host alone: a slave registers ``brokerIP1:listenPort`` and connects from an
    ephemeral port. ``lookup`` answers the registered hosts, or None when no NameServer answered (the
    last answer then stands). The answer is trusted for ``refresh`` seconds: a connection after that asks
    again, whoever it comes from, so a slave the NameServers stopped listing is not admitted on an old
    answer. A host the answer lacks is asked for once more before it is refused: the answer may predate
    its registration (a second slave registering right after the first was admitted). Refused on that
    answer, the host is not asked for again until the answer is refreshed, at most :attr:`MISSES_ASKED`
    misses a period ask at all, and one look-up runs at a time, serving every connection that arrived
    before it began: a flood of connections stays a few NameServer requests per ``refresh``.
    """

    #: Look-ups that misses may ask for between two refreshes (a group has a slave or two).
    MISSES_ASKED = 4

    def __init__(self, lookup: Callable[[], Awaitable[set[str] | None]], refresh: float = 1.0) -> None:
        self._lookup = lookup
        self._refresh = refresh
        self._hosts: set[str] = set()
        self._looked_at = -math.inf
        #: Hosts refused on the current answer, and the look-ups misses asked for since the last refresh.
        self._refused: set[str] = set()
        self._misses_asked = 0
        self._asking = asyncio.Lock()

    async def admits(self, host: str) -> bool:
        host = peer_host(host)
        arrived = _now()
        if arrived - self._looked_at >= self._refresh:
            await self._ask(arrived, refresh=True)
        elif host not in self._hosts and host not in self._refused and self._misses_asked < self.MISSES_ASKED:
            await self._ask(arrived, refresh=False)
        if host in self._hosts:
            return True
        self._refused.add(host)
        return False

    async def _ask(self, arrived: float, *, refresh: bool) -> None:
        """Look the slaves up, unless a look-up that began after ``arrived`` answered while this waited."""
        async with self._asking:
            if self._looked_at >= arrived:
                return
            if refresh:
                self._misses_asked = 0
            else:
                self._misses_asked += 1
            self._looked_at = _now()
            hosts = await self._lookup()
            if hosts is not None:
                self._hosts = {peer_host(h) for h in hosts}
                self._refused = set()


class HAMaster:
    """The master side: the HA listener, its slave connections and the SYNC_MASTER waiters.

    Every connection passes the :class:`SlaveGate` first, so every acknowledgement a SYNC_MASTER counts
    comes from a slave the NameServers list for this broker group; with ``counts``, only from one it
    also vouches for (a NameServer that takes anyone's registration lists anyone as a slave)."""

    def __init__(
        self,
        config: StoreConfig,
        store: ReplicaStore,
        host: str,
        port: int,
        wakers: list[Callable[[], None]],
        gate: SlaveGate,
        *,
        ssl: _ssl.SSLContext | None = None,
        refuse: Callable[[str, str], str | None] | None = None,
        identify: Callable[[str], Awaitable[tuple[str, int] | None]] | None = None,
        counts: Callable[[str, str], bool] | None = None,
    ) -> None:
        self.config = config
        #: Whether the acknowledgements of a slave the gate admitted count for SYNC_MASTER, given its host
        #: and the address it connected to (None: every admitted slave's do); see `Broker._ha_counts`.
        self.counts = counts
        self._uncounted = WarningGate(log)
        #: Which registered slave (broker address, brokerId) is at the far end of an HA connection, given
        #: that end's address, or None when it cannot be told yet: what /metrics labels a slave by, for
        #: its source port changes with every reconnect.
        self.identify = identify
        #: haTls: the listener's mutual-TLS context (a slave without a trusted certificate never gets in).
        self.ssl = ssl
        #: Why a host the gate admits is closed all the same, given it and the address it connected to
        #: (None: it is not); see `Broker._ha_acl_refusal`.
        self.refuse = refuse
        self.store = store
        self.host = host
        self.port = port
        self.gate = gate
        #: Connections the gate closed (what /metrics and the tests count).
        self.refused = 0
        self._refusals = WarningGate(log)
        #: Every send reads it (brokerRole is no runtime setting: UPDATE_BROKER_CONFIG refuses it).
        self.sync = config.broker_role == SYNC_MASTER
        self.connections: set[SlaveConnection] = set()
        #: The connections that reported an offset (a slave's first report): only those are slaves, shown
        #: and counted for SYNC_MASTER. A connection that has said nothing yet, or asks for a description
        #: (:data:`store.ha.DESCRIBE`, then closed), is none.
        self.slaves: set[SlaveConnection] = set()
        #: How many of ``slaves`` a SYNC_MASTER counts (``counted``): kept as they come and go, for every
        #: send asks (:meth:`slave_ok`).
        self.counted_slaves = 0
        #: Called on the loop after every arrival (the long-poll service's): :meth:`notify` is in it
        #: while a slave is connected, so a master without slaves pays nothing per send.
        self._wakers = wakers
        self.push2slave_max_offset = 0
        self._listener: socket.socket | None = None
        self._acceptor: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[object]] = set()
        #: Per host (`budget_host`), its connections waiting for the gate's decision.
        self._gating: dict[str, int] = {}
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()
        #: SYNC_MASTER figures for /metrics: outcomes of waits and the seconds waited in all.
        self.sync_outcomes: dict[str, int] = {s.value: 0 for s in _SYNC_OUTCOMES}
        self.sync_wait_seconds = 0.0

    async def start(self) -> int:
        """Listen; returns the bound port (the one to register when the configured one is 0)."""
        # our own accept loop, not start_server(ssl=): the gate decides on the bare socket, before a
        # TLS handshake is spent on a stranger (a flood of them would spend the loop on handshakes)
        listener = bind_listener(self.host, self.port)
        listener.listen(128)
        self._listener = listener
        self.port = listener.getsockname()[1]
        self._acceptor = supervise(functools.partial(self._accept_loop, listener), "ha-accept")
        log.info("HA service listening on %s:%d", self.host, self.port)
        return self.port

    async def stop(self) -> None:
        if self._acceptor is not None:
            self._acceptor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._acceptor
            self._acceptor = None
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        await cancel_tasks(list(self._tasks))
        for _end, _seq, fut in self._waiters:
            if not fut.done():
                fut.cancel()
        self._waiters = []

    async def _accept_loop(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, peer = await loop.sock_accept(listener)
            except OSError as exc:  # EMFILE and friends: the listener stays
                log.warning("accept on the HA port %d failed: %s", self.port, exc)
                await asyncio.sleep(0.1)
                continue
            sock.setblocking(False)
            host = budget_host(str(peer[0]))
            waiting = self._gating.get(host, 0)
            if waiting >= GATE_WAITING_PER_HOST or sum(self._gating.values()) >= GATE_WAITING:
                self._refused(sock, str(peer[0]), peer[1], f"{waiting} of its connections wait for the gate")
                continue
            self._gating[host] = waiting + 1
            task = asyncio.create_task(self._accept(sock, host), name="ha-connection")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _refused(self, sock: socket.socket, host: str, port: object, why: str) -> None:
        self.refused += 1
        self._refusals.warning("HA: closing the connection from %s:%s: %s", host, port, why)
        with contextlib.suppress(OSError):  # what it sent so far: closed unread, it would be a reset
            sock.recv(_READ_CHUNK)
        sock.close()

    async def _accept(self, sock: socket.socket, gating: str) -> None:
        try:
            try:
                peer, own = sock.getpeername(), sock.getsockname()
            except OSError:  # reset before we looked
                sock.close()
                return
            host = str(peer[0])
            why: str | None = "the NameServers list no slave of this broker group at that address"
            if await self.gate.admits(host):
                why = self.refuse(peer_host(host), peer_host(str(own[0]))) if self.refuse else None
        finally:
            left = self._gating.pop(gating) - 1
            if left:
                self._gating[gating] = left
        if why is not None:
            self._refused(sock, host, peer[1], why)
            return
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(loop=loop)
        protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
        try:
            transport, _ = await loop.connect_accepted_socket(
                lambda: protocol,
                sock,
                ssl=self.ssl,
                ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT if self.ssl is not None else None,
            )
        except (OSError, TimeoutError) as exc:  # ssl.SSLError and ConnectionError included
            self._refused(sock, host, peer[1], f"TLS handshake failed (haTls): {exc or type(exc).__name__}")
            return
        writer = asyncio.StreamWriter(transport, protocol, reader, loop)
        counted = self.counts is None or self.counts(peer_host(host), peer_host(str(own[0])))
        conn = SlaveConnection(self, reader, writer, counted)
        log.info("HA slave connected from %s", conn.addr)
        if not counted and self.sync:
            self._uncounted.warning(
                "HA: slave %s is streamed to, but this SYNC_MASTER counts none of its acknowledgements: in "
                "protected mode only a slave on this machine, at haWhiteRemoteAddresses or under haTls is "
                "counted (the NameServers list whoever registers)",
                conn.addr,
            )
        self.connections.add(conn)
        if self.notify not in self._wakers:
            self._wakers.append(self.notify)
        try:
            await conn.run()
        finally:
            self.connections.discard(conn)
            if conn in self.slaves:
                self.slaves.discard(conn)
                self.counted_slaves -= int(conn.counted)
            if not self.connections:
                self._wakers.remove(self.notify)

    def began(self, conn: SlaveConnection) -> None:
        """``conn`` made its first report: a slave from now on, counted and shown, and told which registered
        one it is. Not before: a connection that only asks for a description is none, and telling it
        asked every NameServer for nothing (a slave asks once at each of its connections)."""
        if conn not in self.slaves:
            self.slaves.add(conn)
            self.counted_slaves += int(conn.counted)
        if self.identify is not None:
            task = asyncio.create_task(self._identify(conn, self.identify), name=f"ha-identify-{conn.addr}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _identify(
        self, conn: SlaveConnection, identify: Callable[[str], Awaitable[tuple[str, int] | None]]
    ) -> None:
        """Tell which registered slave ``conn`` is, asking again a few times while it stays connected (a
        slave may not yet show its end of the connection, or the NameServers not yet list it)."""
        for attempt in range(IDENTIFY_TRIES):
            if attempt:
                await asyncio.sleep(IDENTIFY_RETRY)
            if conn not in self.connections:
                return
            try:
                conn.registered = await identify(conn.addr)
            except Exception:  # an aid to labels: never a reason to drop the slave
                log.exception("HA: telling which slave is at %s failed", conn.addr)
                return
            if conn.registered is not None:
                log.info("HA slave at %s is %s (brokerId %d)", conn.addr, *conn.registered)
                return

    def notify(self) -> None:
        """New CommitLog data: wake every transfer loop (call on the loop)."""
        for conn in self.connections:
            conn.wake.set()

    def on_ack(self, offset: int) -> None:
        if offset > self.push2slave_max_offset:
            self.push2slave_max_offset = offset
        waiters = self._waiters
        while waiters and waiters[0][0] <= offset:
            _end, _seq, fut = heapq.heappop(waiters)
            if not fut.done():
                fut.set_result(None)

    def slave_ok(self, end: int) -> bool:
        """4.9.8 ``isSlaveOK``: a slave is connected and lags behind ``end`` by less than the max. A slave
        from its first report on (4.9.8 counts a connection from its accept): a connection asking for a
        description never acknowledges, and counted it made a send wait ``slaveTimeout`` for nothing. A
        slave whose acknowledgements do not count (`counts`) is none either."""
        return (
            self.counted_slaves > 0 and end - self.push2slave_max_offset < self.config.ha_slave_fallbehind_max
        )

    async def wait_replicated(self, end: int) -> PutMessageStatus:
        """SYNC_MASTER: wait until a slave acked ``end`` (PUT_OK), else SLAVE_NOT_AVAILABLE at once or
        FLUSH_SLAVE_TIMEOUT after ``slaveTimeout``."""
        started = _now()
        status = await self._wait_replicated(end)
        self.sync_outcomes[status.value] += 1
        self.sync_wait_seconds += _now() - started
        return status

    async def _wait_replicated(self, end: int) -> PutMessageStatus:
        if not self.slave_ok(end):
            return PutMessageStatus.SLAVE_NOT_AVAILABLE
        if self.push2slave_max_offset >= end:
            return PutMessageStatus.PUT_OK
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (end, next(self._seq), fut))
        self.notify()
        try:
            async with asyncio.timeout(self.config.slave_timeout / 1000):
                await fut
        except TimeoutError:
            return PutMessageStatus.FLUSH_SLAVE_TIMEOUT
        return PutMessageStatus.PUT_OK

    def status(self) -> list[SlaveState]:
        return [
            SlaveState(
                c.addr, c.acked, c.transfer_offset, c.connected_ms, round(c.lag_seconds, 3), c.registered
            )
            for c in sorted(self.slaves, key=lambda c: c.addr)
        ]


_DESCRIBE_REPORT = encode_report(DESCRIBE)
#: A mark's incarnation that cannot be proven (hex), as a store and a promoted master's runtime info show it.
_UNPROVEN = UNPROVEN_INCARNATION.hex()
_UNKNOWN = UNKNOWN_FOLLOWING.hex()
#: ``haReplicaNextIncarnation`` of a mark that names no next one (the key absent: it cannot be told, as from
#: an older mqctl or an RM4 mark)
_NO_FOLLOWING = bytes(IDENTITY_SIZE).hex()


class TailUnknown(Exception):
    """The master cannot be asked now (no broker address yet, unreachable): decide nothing, ask again."""


class TailUncheckable(Exception):
    """The master refuses to show its records (an ACL that does not admit the slave, a peer that does
    not speak VIEW_MESSAGE_BY_ID): the slave cannot check its tail against it at all."""


@dataclass(frozen=True, slots=True)
class MasterLog:
    """What a master says of its CommitLog besides its records: ``first_offset``, where it starts (its
    retention deleted what was before; 0 when it does not say), and ``identity``, its store's (ours,
    ``haStoreIdentity``; "" from a master that carries none, 4.9.8's). A master that was a slave (promoted)
    also says whose records its own replica mark counts, and up to where (``replica_master``,
    ``replica_mark``): its log holds that store's records there."""

    first_offset: int
    identity: str = ""
    replica_master: str = ""
    replica_mark: int = 0
    #: Where it ends (``commitLogMaxOffset``); -1 when it does not say.
    end: int = -1
    #: Its store's incarnations as a master, oldest first (``haIncarnations``; none: a master that keeps
    #: none, 4.9.8's or an older mqctl's), and, a promoted slave, the incarnation its own mark was copied from.
    incarnations: tuple[Incarnation, ...] = ()
    replica_incarnation: str = ""
    #: The broker address that answered (its remoting port; "": its HA port under haTls).
    addr: str = ""
    #: The incarnation it begins at its log's next change (``haNextIncarnation``; "": none due), and, a
    #: promoted slave, the one its own mark names with its ``replica_incarnation``.
    following: str = ""
    replica_following: str = ""
    #: It shows a history that does not parse (a damaged one, a broken peer): which run it is cannot be told.
    damaged: bool = False

    @property
    def incarnation(self) -> str:
        """The incarnation it runs in now (hex; "": it shows none; unproven: its history does not parse, and
        a mark naming it vouches for nothing until a check names one again)."""
        if self.damaged:
            return _UNPROVEN
        return self.incarnations[-1].id.hex() if self.incarnations else ""


def _is_identity(value: str) -> bool:
    """A store identity as a broker shows it: hex, of :data:`store.checkpoint.IDENTITY_SIZE` bytes."""
    try:
        return len(bytes.fromhex(value)) == IDENTITY_SIZE
    except ValueError:
        return False


def master_log(table: dict[str, str], addr: str) -> MasterLog:
    """What a master's runtime info (or its description over the HA channel) says of its log; raises
    ValueError when its offsets are no numbers."""
    first = max(0, int(table.get("commitLogMinOffset", "0")))
    end = int(table.get("commitLogMaxOffset", "-1"))
    identity = table.get("haStoreIdentity", "")
    lineage = table.get("haReplicaMaster", "")
    mark = table.get("haReplicaMark", "")
    incarnation = table.get("haReplicaIncarnation", "")
    replica_following = table.get("haReplicaNextIncarnation", _UNKNOWN)
    if not (_is_identity(lineage) and mark.isascii() and mark.isdigit()):
        lineage, mark, incarnation = "", "0", ""
    incarnation = incarnation if _is_identity(incarnation) else ""
    shown = table.get("haIncarnations", "") if _is_identity(identity) else ""
    history = tuple(parse_incarnations(shown))
    following = table.get("haNextIncarnation", "")
    return MasterLog(
        first,
        identity if _is_identity(identity) else "",
        lineage,
        int(mark),
        end,
        history,
        incarnation,
        addr,
        following if history and _is_identity(following) else "",
        _replica_following(replica_following) if incarnation else "",
        bool(shown.strip(" ;")) and not history,
    )


def _replica_following(shown: str) -> str:
    """A promoted master's ``haReplicaNextIncarnation``: the id, "" for none (zeros), or, absent or not an id,
    :data:`_UNKNOWN`."""
    if shown == _NO_FOLLOWING:
        return ""
    return shown if _is_identity(shown) else _UNKNOWN


def _run(incarnation: str, following: str) -> str:
    """The run of its master a mark's records were copied from: the next incarnation that run announced, else
    the one it ran in ("": it cannot be told, an RM4 mark's). Two marks that name one run hold the same
    records up to the lower of them."""
    return "" if following == _UNKNOWN else following or incarnation


class MasterRecords:
    """The record the master stores at a CommitLog offset, by VIEW_MESSAGE_BY_ID (33): the body of its
    answer is the stored record, byte for byte (4.9.8's ``selectOneMessageByOffset``; ours the same),
    and SYSTEM_ERROR says no record is there, unless it names the record damaged (ours: ``mqctlDamaged``),
    which leaves the slave's copy nothing to be checked against, or carries a 4.x ACL refusal. ``addr`` is the master's broker (not HA)
    address; when it is not known, ``find`` asks for it (the NameServers, rather than wait for the next
    registration's answer: one that came while no master was listed leaves it unknown for a period)."""

    def __init__(
        self,
        client: Transport,
        addr: Callable[[], str | None],
        find: Callable[[], Awaitable[str | None]] | None = None,
    ) -> None:
        self._client = client
        self._addr = addr
        self._find = find

    async def _ask(self, request: RemotingCommand) -> tuple[str, RemotingCommand]:
        addr = self._addr()
        if addr is None and self._find is not None:
            addr = await self._find()
        if addr is None:
            raise TailUnknown("the master's broker address is not known yet")
        try:
            return addr, await self._client.invoke(addr, request, 3.0)
        except RemotingError as exc:
            raise TailUnknown(f"master {addr}: {exc}") from None

    async def log(self) -> MasterLog:
        """Where the master's CommitLog starts and whose store it is, from its GET_BROKER_RUNTIME_INFO
        (``commitLogMinOffset``, 4.9.8's key too; ``haStoreIdentity``, ours). A master whose ACL refuses it
        (and admits the slave's records check) says nothing: the check is made by the records alone, as
        before. Any other failure (a busy or failing master) raises TailUnknown, asked again: read as "no
        store named", the mark stopped naming its master's store and vouched for all it counted."""
        addr, response = await self._ask(RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO))
        if is_acl_refusal(response.code, response.remark):
            return MasterLog(0, addr=addr)
        if response.code != ResponseCode.SUCCESS:
            raise TailUnknown(
                f"master {addr} answered its runtime info with {response.code} {response.remark}"
            )
        try:
            return master_log(KVTable.loads(response.body or b"").table, addr)
        except ValueError:
            return MasterLog(0, addr=addr)

    async def at(self, offset: int) -> bytes | None:
        fields = ViewMessageRequestHeader(offset).to_ext_fields()
        addr, response = await self._ask(RemotingCommand.request(RequestCode.VIEW_MESSAGE_BY_ID, fields))
        if response.code == ResponseCode.SUCCESS:
            return response.body or b""
        refused = is_acl_refusal(response.code, response.remark)
        if response.code == ResponseCode.SYSTEM_ERROR and not refused:
            if DAMAGED_FIELD in response.ext_fields:  # a record is there, damaged: nothing to compare with
                raise TailUncheckable(
                    f"master {addr}: its record at offset {offset} is damaged ({response.remark})"
                )
            return None
        hint = ""
        # an ACL master's refusal (a 4.9.8 one answers SYSTEM_ERROR with its AclException: taken for "no
        # record there", every record the check asked of would have counted as divergent, and been cut)
        if refused:
            hint = (
                "; a slave's requests reach an ACL master signed (innerClientAuthenticationCredentials) or "
                "from an address in its globalWhiteRemoteAddresses, as its metadata sync needs too"
            )
        raise TailUncheckable(f"master {addr} answered {response.code} {response.remark}{hint}")


async def common_end(
    store: ReplicaStore,
    master_at: Callable[[int], Awaitable[bytes | None]],
    retained_from: int = 0,
    vouched: int = 0,
) -> int:
    """Where the slave's CommitLog stops agreeing with its master's: its end when its last record is
    byte for byte the master's record at the same offset, else the end of the last record they share
    (its start when none is shared). Walks back a file at a time by each file's first record, then
    searches the file whose first record is shared (a tail that differs differs from where it starts).

    Below ``retained_from`` (the master's first offset) the master holds nothing to compare with: its
    retention deleted those files, which is no divergence. A record there counts as shared when it ends
    at or below ``vouched`` (the replica mark: the master's records, taken from its stream), else not.

    A record set aside in place (taken from the master, which serves it to no one) cannot be compared:
    the master answers no record there. The record after it decides for it (both logs agree past it, so
    at it), and when it is the last one it counts as not shared: cut and taken again, never served."""
    end = store.max_phy_offset
    if end == 0:
        return 0
    file_size = store.commit_log_file_size

    async def same(spans: list[tuple[int, int]], i: int) -> bool:
        while True:
            if spans[i][0] < retained_from:
                return spans[i][0] + spans[i][1] <= vouched
            mine = store.read_commit_log(*spans[i])
            if mine is None:
                return False
            theirs = await master_at(spans[i][0])
            if theirs == mine:
                return True
            if theirs is not None or i + 1 == len(spans) or not set_aside_in_place(mine, spans[i][0]):
                return False
            i += 1

    first = store.min_phy_offset
    file_start = (end - 1) - (end - 1) % file_size
    while file_start >= first - first % file_size:
        spans = await asyncio.to_thread(record_spans, store, max(file_start, first), end)
        if spans and await same(spans, 0):
            if await same(spans, len(spans) - 1):
                return min(end, file_start + file_size)  # (with the file's end-of-file filler)
            lo, hi = 0, len(spans) - 1  # spans[lo] is shared, spans[hi] is not
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if await same(spans, mid) else (lo, mid)
            return spans[lo][0] + spans[lo][1]
        file_start -= file_size
    return first


def connect_source(registered: str, master_host: str) -> str | None:
    """The address a slave connects to its master from: the one it registered, when that is an address
    of this machine the master can be reached from (the same family, loopback only to loopback). The
    master's gate admits the host the NameServers list: a slave on 127.0.0.3 left from 127.0.0.1, the
    kernel's choice, and was refused at every connection, as a multi-homed host's other address would be."""
    if not registered or registered in ("0.0.0.0", "::") or (":" in registered) != (":" in master_host):
        return None
    if is_loopback(registered) != is_loopback(master_host):
        return None
    try:  # an address of this machine binds (a NAT's or a name does not)
        with socket.socket(socket.AF_INET6 if ":" in registered else socket.AF_INET) as probe:
            probe.bind((registered, 0))
    except (OSError, ValueError, UnicodeError):
        return None
    return registered


def describe_connect_failure(exc: BaseException) -> str:
    """What a failed connect says, never blank: a connection the master closed during the TLS handshake
    (its gate refusing this host, or its certificate check) raises errors whose text is empty."""
    text = str(exc)
    if isinstance(exc, TimeoutError) and not text:
        return "no answer within 3 s"
    if isinstance(exc, (ConnectionResetError, _ssl.SSLEOFError, EOFError)) or not text:
        return (
            f"{text or type(exc).__name__}: the master closed the connection (its HA gate admits only the "
            "hosts the NameServers list as slaves of its group, and under haTls a member's certificate; "
            "its log names the reason)"
        )
    return text


class HASlave:
    """The slave side (4.9.8 ``HAClient``): check its tail against the master's, connect, report,
    append checked records, reconnect.

    Before each connection the slave compares its last record with the master's at the same offset
    (``master_records``; None: not checked, as without a NameServer to name the master's broker
    address). Records the master does not hold at the same offsets are set aside
    (:meth:`ReplicaStore.set_aside_replica_tail`) and the slave reports the end of what they share. The
    check moves the store's replica mark to that end and releases what the store held back past the mark
    (:meth:`ReplicaStore.replica_checked`); a master that cannot be asked releases it at connection.

    ``after_registration``: the first connection waits for :meth:`registered`. The master admits only the
    slaves its NameServers list (:class:`SlaveGate`), and ``haMasterAddress`` names the master before this
    slave has registered: connecting at once was refused, and replication began a reconnect delay later.

    ``ask_master``: a connect refused at the HA address the slave knows asks the NameServers again (their
    answer comes to :meth:`set_master`) before the next try, a reconnect delay later. A master restarted on
    another HA port was otherwise learnt from the next registration's answer only, a period (30 s) later,
    a SYNC_MASTER answering SLAVE_NOT_AVAILABLE to every send meanwhile."""

    def __init__(
        self,
        config: StoreConfig,
        store: ReplicaStore,
        master_records: MasterRecords | None = None,
        *,
        ssl: _ssl.SSLContext | None = None,
        after_registration: bool = False,
        ask_master: Callable[[], Awaitable[object]] | None = None,
        source_host: str = "",
    ) -> None:
        self.config = config
        self.ask_master = ask_master
        #: The address this slave registered (brokerIP1), which the master's gate looks for.
        self.source_host = source_host
        #: haTls: the client context that presents this broker's certificate and verifies the master's.
        self.ssl = ssl
        self.store = store
        self.master_addr = config.ha_master_address
        self.master_records = master_records
        self.connected = False
        #: This end of the connection to the master (HOST:PORT), as the master lists it among its slaves;
        #: None while not connected.
        self.local_addr: str | None = None
        self.last_read_ms = 0
        self.reconnects = 0
        self._tasks: list[asyncio.Task[None]] = []
        self._wake = asyncio.Event()
        self._registered = asyncio.Event()
        if not after_registration:
            self._registered.set()
        self._appended = asyncio.Event()
        #: Held while dispatch runs in its thread, and while a divergent tail is set aside.
        self._dispatching = asyncio.Lock()
        self._checking = asyncio.Lock()
        #: The master's store and run the last check named (None: none), which the connection must find.
        self._named_run: tuple[str, str] | None = None
        self._tie_warnings = WarningGate(log, TIE_WARNING_INTERVAL)
        #: Where the last cut was to be and the incarnation begun for it (None: none yet).
        self._cut_begun: tuple[int, bytes] | None = None
        #: Called on the loop after each round of dispatch (the broker derives configs of new topics).
        self.on_dispatched: Callable[[], None] | None = None

    def start(self) -> None:
        self._tasks = [supervise(self._run, "ha-client"), supervise(self._dispatch_loop, "ha-dispatch")]

    async def stop(self) -> None:
        await cancel_tasks(self._tasks)
        self._tasks = []

    async def _dispatch_loop(self) -> None:
        """Build ConsumeQueues and index from what arrived, in a worker thread, apart from the acks."""
        while True:
            await self._appended.wait()
            self._appended.clear()
            try:
                async with self._dispatching:
                    while await asyncio.to_thread(self.store.dispatch_replica):
                        pass
            except Exception:  # a bug here must not end dispatch for good: the next arrival tries again
                log.exception("slave dispatch failed")
            if self.on_dispatched is not None:
                self.on_dispatched()

    def registered(self) -> None:
        """The broker's first registration was answered (or failed: the master may know this slave from
        before): connections may begin."""
        self._registered.set()

    def set_master(self, addr: str | None) -> None:
        """The master's HA address as the NameServer tells it (unless ``haMasterAddress`` is set)."""
        if self.config.ha_master_address or not addr or addr == self.master_addr:
            return
        log.info("HA master address is now %s", addr)
        self.master_addr = addr
        self._wake.set()

    async def _run(self) -> None:
        await self._registered.wait()
        while True:
            addr = self.master_addr
            if not addr:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):  # (not wait_for, as above)
                    async with asyncio.timeout(RECONNECT_DELAY):
                        await self._wake.wait()
                if not self.master_addr:
                    # (a slave that started while its master was down learnt no HA address: asked of the
                    # NameServers, not at the next registration a period away, while it holds records back)
                    await self._ask_again()
                continue
            if not await self.check_tail():
                await asyncio.sleep(RECONNECT_DELAY)
                continue
            if self.master_addr != addr:  # (a registration's answer moved it during the check)
                log.info("HA master address moved to %s during the check: checking again", self.master_addr)
                continue
            try:
                host, port = split_addr(addr)
                source = connect_source(self.source_host, host)
                async with asyncio.timeout(3.0):
                    reader, writer = await asyncio.open_connection(
                        host, port, ssl=self.ssl, local_addr=(source, 0) if source else None
                    )
                if connected_to_itself(writer.transport):
                    writer.close()
                    raise ConnectionRefusedError(f"connect to {addr} met itself: nobody listens")
            except (OSError, ValueError, TimeoutError) as exc:
                log.warning("HA connect to master %s failed: %s", addr, describe_connect_failure(exc))
                if isinstance(exc, ConnectionRefusedError):
                    await self._ask_again()
                await asyncio.sleep(RECONNECT_DELAY)
                continue
            same = False
            try:
                same = await self._same_run(addr, writer.get_extra_info("peername"))
            finally:  # (closed whatever the question raised)
                if not same:
                    writer.close()
                    with contextlib.suppress(Exception):
                        await writer.wait_closed()
            if not same:
                await asyncio.sleep(RECONNECT_DELAY)
                continue
            log.info("HA connected to master %s, reporting offset %d", addr, self.store.max_phy_offset)
            self.connected = True
            self._serve_unchecked()
            local = writer.get_extra_info("sockname")
            self.local_addr = f"{local[0]}:{local[1]}" if local else None
            try:
                await self._session(reader, writer)
            except ReplicaRecordError as exc:
                log.error("HA: closing the connection to master %s, nothing of it appended: %s", addr, exc)
            # RuntimeError: uvloop's on a write to a transport the master reset; the loop must go on
            except (OSError, HAProtocolError, RuntimeError) as exc:
                log.warning("HA connection to master %s lost: %s", addr, exc)
            finally:
                self.connected = False
                self.local_addr = None
                self.reconnects += 1
                writer.close()
                with contextlib.suppress(Exception):
                    await writer.wait_closed()
            await asyncio.sleep(RECONNECT_DELAY)

    async def _ask_again(self) -> None:
        """Where the master's HA port is now, asked of the NameServers (nothing to ask where
        ``haMasterAddress`` fixes it); a failure to ask leaves the address as it was, for the next try."""
        if self.ask_master is None or self.config.ha_master_address:
            return
        try:
            await self.ask_master()
        except Exception:  # the loop must go on: the next refused connect asks again
            log.exception("HA: asking the NameServers for the master's HA address failed")

    async def _same_run(self, addr: str, peer: tuple[str, int] | None) -> bool:
        """Whether the master still runs as the check named it (its broker port asked again, now that the HA
        connection is made): a master restarted between the check and the connection is another run, whose
        records the mark would count as the named one's (checked again first). A connection to a run
        that ended before the question is closed and copies nothing of the next. Then whether the HA port
        the connection reached (``addr``, connected to ``peer``) names that run too (:meth:`_ha_port_runs`).
        True when the check named no run (a master that shows none: 4.9.8's, an older mqctl's)."""
        named = self._named_run
        if not named or self.master_records is None:
            return True
        try:
            master = await self.master_records.log()
        except TailUnknown as exc:
            log.warning("HA: master %s: not known to run as it was checked, checked again: %s", addr, exc)
            return False
        now = master.identity, _run(master.incarnation, master.following)
        if now == named:
            return await self._ha_port_runs(named, addr, peer)
        if not master.identity:
            log.warning(
                "HA: master %s no longer names its store (checked as store %s, run %s): checked again before "
                "anything is copied",
                addr,
                *named,
            )
            return False
        log.warning(
            "HA: master %s restarted between this slave's check and its connection (run %s, checked in %s): "
            "checked again before anything is copied",
            addr,
            now[1] or "(none shown)",
            named[1],
        )
        return False

    async def _ha_port_runs(self, named: tuple[str, str], addr: str, peer: tuple[str, int] | None) -> bool:
        """Whether the HA port, asked to describe its log (:data:`store.ha.DESCRIBE`), names the store and run
        the broker port named (``named``): the check asks one port, the records come from the other, and
        two processes may answer them (a stale registration, an ``haMasterAddress`` naming another broker).
        Asked at the endpoint the connection reached (``peer``, the IP and port of ``addr`` it connected to),
        not at the address the slave holds now (a registration's answer may have moved it since) nor at
        ``addr`` resolved again (round-robin DNS, a v4 and a v6 listener). Its answer comes after the
        connection was made, and a run holds its HA port from its start to its end, so finding the named
        run there proves the connection is to it. Under haTls a member says so; without it, any process
        that reads the broker port could say the same (docs/replication.md §who-says-so). True when the
        HA port describes nothing (an older mqctl's, or no answer within :data:`DESCRIBE_TIMEOUT`): the
        WARNING says the slave copies from it all the same, as asking again for ever would stop
        replication for as long as the master stays old or slow."""
        if not peer:
            self._tie_warnings.warning("HA: the connection to %s closed before its HA port was asked", addr)
            return False
        try:
            described = await self._describe_master(
                addr,
                (str(peer[0]), int(peer[1])),
                then=": copied from all the same, not known to be the run its broker port named",
            )
        except TailUnknown as exc:
            self._tie_warnings.warning(
                "HA: not known which run the master's HA port is, checked again: %s", exc
            )
            return False
        if described is None:
            return True
        there = described.identity, _run(described.incarnation, described.following)
        if there == named:
            return True
        self._tie_warnings.warning(
            "HA: the master's HA port %s (%s) names store %s, run %s, its broker port store %s, run %s: another "
            "process (a stale registration, a wrong haMasterAddress, a restart); checked again before anything "
            "is copied",
            addr,
            _endpoint(peer),
            there[0] or "(none)",
            there[1] or "(none)",
            *named,
        )
        return False

    def _name(self, master: MasterLog) -> None:
        """The mark counts ``master``'s records from now on, of the run it showed (none: a master that
        cannot be asked, or does not name its store)."""
        self.store.name_replica_master(master.identity, master.incarnation, master.following)
        run = _run(master.incarnation, master.following) if master.identity else ""
        self._named_run = (master.identity, run) if run else None

    async def check_tail(self) -> bool:
        """Whether the slave may report its end now: its last record is the master's, or what is not was
        set aside. False when the master cannot be asked yet (the caller tries again). One at a time: the
        broker checks once before it serves, the connection loop before each connection."""
        async with self._checking:
            return await self._check_tail()

    async def _check_tail(self) -> bool:
        store = self.store
        end = store.max_phy_offset
        if self.master_records is None:
            self._name(MasterLog(0))  # (what it appends at its mark is a master's it cannot name)
            return True
        if end == 0:  # nothing to check: the master's store is named, if it says, for what follows
            with contextlib.suppress(TailUnknown, TailUncheckable):
                master = await self.master_records.log()
                self._name(master)
                await self._keep_history(master)
                return True
            self._name(MasterLog(0))
            return True
        try:
            master = await self.master_records.log()
            if master.first_offset % store.commit_log_file_size or 0 <= master.end < master.first_offset:
                # (no CommitLog starts there: a broken or hostile peer, whose word deletes and sets aside nothing)
                raise TailUnknown(
                    f"the master's first offset {master.first_offset} (its end {master.end}) is no CommitLog's start"
                )
            cut = await common_end(store, self.master_records.at, master.first_offset, self._vouched(master))
            if cut < end and (await self.master_records.log()).first_offset != master.first_offset:
                # its retention deleted files while the check asked of them: "no record" there was no
                # divergence; asked again, from where its log starts now
                raise TailUnknown("the master's first offset moved while its records were compared")
            # records left below the master's first offset go as its expired ones only on its word
            refusal = (
                await self._why_not_delete(master) if store.min_phy_offset < cut < master.first_offset else ""
            )
        except TailUnknown as exc:
            log.warning("HA: this slave's last record is not checked against its master yet: %s", exc)
            return False
        except TailUncheckable as exc:
            log.warning("HA: this slave's last record cannot be checked against its master: %s", exc)
            self._name(MasterLog(0))
            return True
        if cut < end:
            # held back first: whatever fails after (the incarnation, the quarantine on a full disk), nothing
            # from the cut on is served (a stale mark past it vouched for records the master replaced), and
            # the next check cuts it
            async with self._dispatching:
                store.hold_back(cut)
            # this store's own earlier incarnations end at the cut: promoted later, its history must not
            # vouch for what another slave copied of them past it (docs/replication.md §incarnations). Begun
            # before the cut: one that cannot be written (a full disk) leaves the tail uncut, held back, and
            # the next check cuts it with its incarnation (cut first, a retry found nothing left to cut); one
            # begun for this cut by a check whose set-aside failed is not begun again at each retry
            newest = store.incarnations[-1] if store.incarnations else None
            if newest is None or (cut, newest.id) != self._cut_begun:
                store.begin_incarnation(at=cut)
                newest = store.incarnations[-1] if store.incarnations else None
                self._cut_begun = (cut, newest.id) if newest is not None else None
            await self._set_aside_tail(cut, end, master.first_offset)
            self._cut_begun = None
        if cut < master.first_offset:
            if store.min_phy_offset < cut and refusal:
                await self._set_aside_unconfirmed(cut, master.first_offset, refusal)
            await self._restart_log(cut, master.first_offset)
            cut = master.first_offset
        self._name(master)
        await self._keep_history(master)
        await self._checked(cut)
        return True

    async def _keep_history(self, master: MasterLog) -> None:
        """The master's history as this check read it, kept beside the store when the mark names it, with
        the next incarnation it announced where that begins: its log's end now (no change moved it before
        that one began; the master shows its end before it), which ends every earlier one there, however
        far past it they began (a log back shorter). Nothing is kept for a run whose end is not shown.
        Written when it changed; a failure to keep it leaves the copy of another run, which vouches for
        none of this one's records (:meth:`_shared_end`), and the check goes on."""
        if not (self.store.replica_incarnation and master.incarnations) or (
            master.following and master.end < 0
        ):
            return
        history = list(master.incarnations)
        if master.following:
            history.append(Incarnation(bytes.fromhex(master.following), master.end))
        root = self.config.store_path_root_dir

        def keep() -> None:
            if master_history(root) != (master.identity, history):
                keep_master_history(root, master.identity, history)

        try:
            await asyncio.to_thread(keep)
        except OSError as exc:
            log.warning(
                "HA: this slave could not keep its master's incarnations as this check read them (%s): a master "
                "restored from an older copy vouches for none of the records copied from this run",
                exc,
            )

    def _vouched(self, master: MasterLog) -> int:
        """Up to where the replica mark vouches for this master's records: all of it, unless the mark
        counts another master's store (the slave was switched to another master of its broker name). A
        master that was a slave of that store (promoted in its place) holds its records up to its own mark."""
        store = self.store
        mine = store.replica_master
        if not (master.identity and mine):
            return store.replica_mark
        if mine == master.identity:
            return min(store.replica_mark, self._incarnation_end(master))
        if master.replica_master == mine:
            copied = store.replica_incarnation
            theirs = master.replica_incarnation
            # one mark naming none was written against that store when it showed no incarnation (before an
            # upgrade, or by an older mqctl), the other after: which run each copied cannot be told, so
            # neither vouches; both naming none is the time before incarnations, vouched as it was
            unproven = _UNPROVEN in (copied, theirs) or bool(copied) != bool(theirs)
            run = _run(copied, store.replica_following)
            other = not run or run != _run(theirs, master.replica_following)
            if unproven or (copied and theirs and other):
                log.warning(
                    "HA: this slave's replica mark counts what it copied from incarnation %s of store %s, the "
                    "master promoted in its place from incarnation %s: none is taken as this master's unless "
                    "it holds the same",
                    copied or "(none named)",
                    mine,
                    theirs or "(none named)",
                )
                return 0
            return min(store.replica_mark, master.replica_mark)
        log.warning(
            "HA: this slave's replica mark counts the records of another master's store (%s) than its "
            "master's now (%s): none is taken as this master's unless it holds the same",
            mine,
            master.identity,
        )
        return 0

    def _incarnation_end(self, master: MasterLog) -> int:
        """Where the master's history says the incarnation the mark's records were copied from ended: the
        earliest start of those after it, or nowhere (the one it runs in now), and no further than where the
        next one the mark names was to begin, when the master does not hold that one (it has not begun, or
        a restore lost it: the records past its start were its). A mark from before incarnations, or naming
        none, vouches as far as it reaches, and no further than the lowest start in the master's history; one
        the master does not know (its store restored from an older copy, a copy of it started as another
        master, a history that dropped it), or whose run cannot be told (an RM4 mark), vouches for nothing."""
        store = self.store
        copied, following = store.replica_incarnation, store.replica_following
        if master.damaged:
            log.warning(
                "HA: master's store %s shows an incarnation history that does not parse: which run it is cannot "
                "be told, none of this slave's records below its first offset is taken as its own",
                master.identity,
            )
            return 0
        if not copied:
            # (copied while the master showed no history: its log changed nowhere below where its history,
            # begun since, first began; past that, a log back shorter at the start that began it, or a
            # restore then, holds other records than the slave's)
            return min([store.replica_mark, *(i.start for i in master.incarnations)])
        if copied == _UNPROVEN or following == _UNKNOWN:
            log.warning(
                "HA: this slave's replica mark cannot prove which run of its master's store %s its records "
                "were copied from (an mqctl that does not keep it wrote the mark since, or one that named "
                "only the newest incarnation begun): none below the master's first offset is taken as its own",
                master.identity,
            )
            return 0
        history = list(master.incarnations)
        ids = [i.id.hex() for i in history]
        # the master's next one then, once begun, holds every record the slave copied from that run
        for named in (following, copied):
            if named and named in ids:
                ended = incarnation_end(history, ids.index(named))
                vouched = store.replica_mark if ended is None else ended
                return min(vouched, self._announced_start()) if named != following and following else vouched
        shared = self._shared_end(master)
        if shared is not None:
            return shared
        log.warning(
            "HA: this slave's replica mark counts what it copied from incarnation %s of its master's store %s, "
            "which the master's history does not hold (a store restored from an older copy, or a copy of it "
            "started as another master): none is taken as this master's unless it holds the same",
            copied,
            master.identity,
        )
        return 0

    def _announced_start(self) -> int:
        """Where the next incarnation the mark names was to begin, as the slave's copy of its master's history
        keeps it (:meth:`_keep_history`); 0 when it does not."""
        kept = self._kept()
        return kept[-1].start if kept else 0

    def _kept(self) -> list[Incarnation]:
        """The slave's copy of its master's history when it was kept for the run the mark names (its newest
        the next one the mark names, else its incarnation), of the store it names; else none."""
        identity, kept = master_history(self.config.store_path_root_dir)
        store = self.store
        run = _run(store.replica_incarnation, store.replica_following)
        if identity != store.replica_master or not (run and kept) or kept[-1].id.hex() != run:
            return []  # (a copy kept for another run, or none)
        return kept

    def _shared_end(self, master: MasterLog) -> int | None:
        """Where the last incarnation that both the master's history and the slave's copy of it (as its
        last check read it, the one its mark names the newest) hold ended, in either: the slave's records
        below it were that incarnation's, and the master's log still is (a restore or a copy lost only
        what came after). None when they share none."""
        kept = self._kept()
        if not kept:
            return None
        store = self.store
        history = list(master.incarnations)
        held = {(h.id, h.start): i for i, h in enumerate(history)}
        for j in range(len(kept) - 2, -1, -1):
            i = held.get((kept[j].id, kept[j].start))
            if i is None:
                continue
            ends = [e for e in (incarnation_end(kept, j), incarnation_end(history, i)) if e is not None]
            vouched = min(store.replica_mark, *ends)
            log.warning(
                "HA: this slave's replica mark counts what it copied from incarnation %s of its master's store "
                "%s, which the master's history no longer holds (a store restored from an older copy, or a "
                "copy of it started as another master): the last incarnation both hold, %s, vouches for its "
                "records up to offset %d, none past it below the master's first offset is taken as its own",
                store.replica_incarnation,
                master.identity,
                kept[j],
                vouched,
            )
            return vouched
        return None

    async def _why_not_delete(self, master: MasterLog) -> str:
        """Why the slave's records below ``master``'s first offset may not be deleted as its expired ones
        ("": they may). Only the store the mark names may say so (:meth:`_names_my_master`), and only a
        master something authenticates: under haTls its HA port, whose mutual-TLS handshake proves it a
        member, must describe the same log as its broker port did (an impostor an open NameServer lists
        shows the real master's identity and a large first offset as easily); without haTls only a master
        on this machine's loopback is taken at its word. Raises TailUnknown when no member answers at its
        HA port, or describes another log (asked again, nothing decided)."""
        start = master.first_offset
        if not self._names_my_master(master):
            return (
                f"below the first offset {start} of a master its replica mark does not name (no store "
                "identity shown, or another store's)"
            )
        if self.ssl is None:
            host, _ = split_addr(master.addr) if master.addr else ("", 0)
            if is_loopback(host):
                return ""
            log.warning(
                "HA: nothing authenticates master %s (haTls is off): its word that its log starts past this "
                "slave's whole log sets those records aside, it does not delete them",
                master.addr,
            )
            return (
                f"below the first offset {start} that master {master.addr} gave, which nothing authenticates "
                "(haTls is off, and it is not on this machine)"
            )
        described = await self._describe_master(then=": the records below its first offset are set aside")
        if described is None:
            return (
                f"below the first offset {start} that the master's broker port gave and its HA port (mutual "
                "TLS) did not confirm"
            )
        if (described.first_offset, described.identity, described.incarnations) != (
            master.first_offset,
            master.identity,
            master.incarnations,
        ):
            raise TailUnknown(
                f"master {master.addr} and its HA port {self.master_addr} (mutual TLS) describe different logs "
                f"(first offsets {master.first_offset} and {described.first_offset})"
            )
        return ""

    async def _describe_master(
        self, addr: str = "", peer: tuple[str, int] | None = None, *, then: str = ""
    ) -> MasterLog | None:
        """The master's log as its HA port ``addr`` (by default the one the slave holds now) describes it
        (:data:`store.ha.DESCRIBE`), under haTls a member's word; None when a member does not (an older
        mqctl, which closes; no answer in time), at a WARNING that ends with ``then`` (what the slave does
        now). ``peer``: the endpoint to connect to, the one a connection to ``addr`` reached (TLS is told
        ``addr``'s host as that connection told it). Raises TailUnknown when no member's handshake
        completes there (no member, or none now: its gate, its port): nothing is decided on a peer that
        proved nothing, the slave asks again."""
        addr = addr or self.master_addr
        if not addr:
            raise TailUnknown("the master's HA address is not known yet")
        name, port = split_addr(addr)
        host, port = peer if peer else (name, port)
        where = f"{addr} ({_endpoint(peer)})" if peer else addr
        source = connect_source(self.source_host, host)
        try:
            async with asyncio.timeout(DESCRIBE_TIMEOUT):
                reader, writer = await asyncio.open_connection(
                    host,
                    port,
                    ssl=self.ssl,
                    server_hostname=name if self.ssl is not None else None,
                    local_addr=(source, 0) if source else None,
                )
        except (OSError, ValueError, TimeoutError) as exc:  # (ssl.SSLError too: no member's certificate)
            raise TailUnknown(
                f"no member's handshake completed at its HA port {where} (haTls): {describe_connect_failure(exc)}"
                if self.ssl is not None
                else f"its HA port {where} cannot be reached: {describe_connect_failure(exc)}"
            ) from None
        try:
            async with asyncio.timeout(DESCRIBE_TIMEOUT):
                writer.write(_DESCRIBE_REPORT)
                await writer.drain()
                offset, size = FRAME_HEADER.unpack(await reader.readexactly(FRAME_HEADER.size))
                if offset != DESCRIBE or not 0 < size <= DESCRIPTION_MAX:
                    raise ValueError(f"a frame at offset {offset} of {size} bytes")
                return master_log(KVTable.loads(await reader.readexactly(size)).table, "")
        except (OSError, ValueError, TimeoutError, asyncio.IncompleteReadError) as exc:
            log.warning(
                "HA: the master's HA port %s did not describe its log (%s)%s",
                where,
                exc or type(exc).__name__,
                then,
            )
            return None
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def _names_my_master(self, master: MasterLog) -> bool:
        """Whether ``master`` is the store the replica mark names: only then is its first offset its
        retention's word on records the mark counts as its own. A master that shows no identity (4.9.8's,
        an impostor an open NameServer lists) or another store's says nothing of them, a slave promoted in
        its place neither: its log may start where it began copying (an empty slave begins at its master's
        last file), not where a retention deleted them. They may be the group's only copy."""
        mine = self.store.replica_master
        return bool(mine and master.identity == mine)

    async def _set_aside_unconfirmed(self, end: int, start: int, refusal: str) -> None:
        """The log ends at ``end``, below the first offset ``start`` of a master not known to be the one
        whose records it holds, or whose word nothing authenticates (``refusal``): set aside (a quarantine
        keeps them), not deleted as expired."""
        first = self.store.min_phy_offset
        why = (
            f"the slave's CommitLog from offset {first} to {end} is {refusal}: not known "
            "to be that master's expired records, so kept here rather than deleted"
        )
        async with self._dispatching:
            records, where = self.store.set_aside_replica_tail(first, why)
        log.error(
            "HA: %s of this slave, offsets %d to %d, are %s: set aside%s, not deleted; replicating "
            "from offset %d",
            plural(records, "record"),
            first,
            end,
            refusal,
            f" in {where}" if where else "",
            start,
        )

    async def _set_aside_tail(self, cut: int, end: int, retained_from: int) -> None:
        """Take the records from ``cut`` to ``end`` out of service: they are not the master's or, below the
        master's first offset ``retained_from`` and past the replica mark, not known to be and never to be
        checked."""
        if cut < retained_from:
            why = (
                f"the slave's CommitLog from offset {cut} to its end {end} is past its replica mark (not known "
                f"to be its master's) and below its master's first retained offset {retained_from}: the "
                "master's retention deleted what it could have been checked against"
            )
        else:
            why = (
                f"the slave's CommitLog differs from its master's from offset {cut} to its end {end} (a store "
                "that ran apart from this master, or a master restored from an older disk)"
            )
        async with self._dispatching:
            # on the loop, not in a worker: pulls are served on the loop, so none reads the tail while it
            # is copied away and truncated (a rare stall, and never a cut record served or a read of a
            # file being cut)
            records, where = self.store.set_aside_replica_tail(cut, why)
        log.error(
            "HA: %s of this slave, offsets %d to %d, are not %s: set aside%s; replicating from offset %d",
            plural(records, "record"),
            cut,
            end,
            "known to be its master's" if cut < retained_from else "its master's",
            f" in {where}" if where else "",
            max(cut, retained_from),
        )

    async def _restart_log(self, end: int, start: int) -> None:
        """The slave's log ends at ``end``, below its master's first offset ``start``: its records were its
        master's, which its retention deleted with those up to ``start``. They go here as they went there,
        and the log begins again at ``start``, where the master has records to send."""
        async with self._dispatching:
            files = self.store.restart_replica_log(start)
        log.warning(
            "HA: this slave's CommitLog ends at offset %d, below its master's first retained offset %d: the "
            "master's retention deleted those records and the ones after them; the slave's %s "
            "of them are deleted as the master's were, with their ConsumeQueue and index files; "
            "replicating from offset %d",
            end,
            start,
            plural(files, "CommitLog file"),
            start,
        )

    async def _checked(self, end: int) -> None:
        """The log is the master's up to ``end``: the replica mark moves there and what was held back is
        served (dispatched now)."""
        store = self.store
        held = store.held_back
        await asyncio.to_thread(store.replica_checked, end)
        if held:
            log.info(
                "HA: this slave's log checked against its master: serving the %s held back",
                plural(held, "byte"),
            )
            self._appended.set()

    def _serve_unchecked(self) -> None:
        """Connected to a master that cannot be asked for its records: serve what the mark held back, as
        before the mark (the WARNING that the tail is unchecked was given)."""
        store = self.store
        held = store.held_back
        if held:
            store.serve_unchecked()
            log.warning(
                "HA: serving the %s of this slave's log past its replica mark (offset %d) unchecked: "
                "its master cannot be asked for its records",
                plural(held, "byte"),
                store.replica_mark,
            )
            self._appended.set()

    def _set_aside(self, damaged: list[tuple[int, int, str]]) -> None:
        """Records whose only fault is their body CRC: the master's recovery set them aside in place (it
        never serves them), so the slave keeps them byte for byte and sets them aside as well."""
        where = self.store.set_aside_replica_records(damaged)
        log.error(
            "HA: %s from master %s (the master set them aside), at CommitLog "
            "%s: appended byte for byte and set aside in place, never served%s",
            plural(len(damaged), "damaged record"),
            self.master_addr,
            ", ".join(f"offset {offset} ({why})" for offset, _size, why in damaged),
            f"; copied under {where}" if where else "",
        )

    async def _session(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        cfg = self.config
        heartbeat = cfg.ha_send_heartbeat_interval / 1000
        housekeeping = cfg.ha_housekeeping_interval / 1000
        max_frame = max(cfg.ha_transfer_batch_size, cfg.mapped_file_size_commit_log)
        store = self.store
        reported = store.max_phy_offset
        records = ReplicaRecords(reported, store.commit_log_file_size, max_record_size(cfg))
        writer.write(encode_report(reported))  # at once: 4.9.8 waits a heartbeat, a master does not mind
        await writer.drain()
        last_report = last_read = _now()
        buf = bytearray()
        while True:
            timeout = max(0.01, min(last_report + heartbeat, last_read + housekeeping) - _now())
            try:
                async with asyncio.timeout(timeout):
                    data = await reader.read(_READ_CHUNK)
            except TimeoutError:
                data = None
            if data == b"":
                raise HAProtocolError("master closed the connection")
            now = _now()
            if data:
                last_read = now
                self.last_read_ms = int(time.time() * 1000)
                buf += data
                frames, used = decode_frames(buf, max_frame)
                for offset, body in frames:
                    if records.start == 0 and not records.pending and offset % records.file_size == 0:
                        records.start = offset  # an empty slave starts where the master's file does
                    records.feed(offset, body)
                buf = buf[used:]  # a copy (the frames are views of buf); a torn frame stays for now
                at, whole = records.take()  # raises, appending nothing, unless every record checks
                if whole:
                    if not store.append_replica(at, whole):
                        raise HAProtocolError(f"frame at {at} does not continue the slave's CommitLog")
                    if records.damaged:  # (before the loop serves a pull: none of them is ever served)
                        self._set_aside(records.damaged)
                    self._appended.set()
            elif now - last_read >= housekeeping:
                raise HAProtocolError(f"nothing from the master for {housekeeping:.0f} s")
            current = store.max_phy_offset  # only whole, checked, appended records are acknowledged
            if writer.is_closing():  # reset while its last bytes were read: uvloop raises on a write now
                raise HAProtocolError("master closed the connection")
            if current != reported or now - last_report >= heartbeat:
                writer.write(encode_report(current))
                await writer.drain()
                reported, last_report = current, now


#: The keys :func:`ha_runtime_info` may add to 4.9.8's GET_BROKER_RUNTIME_INFO table.
HA_RUNTIME_KEYS = frozenset(
    {
        "brokerRole",
        "haSlaveCount",
        "haPush2SlaveMaxOffset",
        "haSlaves",
        "haMasterAddress",
        "haMasterConnected",
        "haClientAddress",
        "haMasterLastReadTimestamp",
        "haDivergedRecords",
        "haDivergedQuarantine",
        "haReplicaMark",
        "haReplicaMaster",
        "haStoreIdentity",
        "haIncarnations",
        "haReplicaIncarnation",
        "haNextIncarnation",
        "haReplicaNextIncarnation",
        "haHeldBackBytes",
        "storeQuarantines",
        "storeQuarantinedRecords",
    }
)


def ha_runtime_info(
    role: str,
    master: HAMaster | None,
    slave: HASlave | None,
    quarantines: list[Manifest] | None = None,
    store: ReplicaStore | None = None,
) -> dict[str, str]:
    """mqctl's additions to GET_BROKER_RUNTIME_INFO: the role and the replication state.

    A master lists its slaves as ``addr/ackedOffset/lagSeconds`` joined by ``;`` (``addr``: the slave's end of
    its HA connection); a slave shows its master's HA address, whether it is connected and its own end of
    that connection (``haClientAddress``), by which a reader of both finds which registered slave is which,
    and its replica mark with the bytes past it held back unchecked (``haReplicaMark``, ``haHeldBackBytes``).
    Offsets are CommitLog offsets; lag is the reader's sum. A store holding ``quarantines`` (data recovery
    or replication set aside, until the operator removes it) says how many and the records in them; of a
    divergent tail set aside, how many records and the newest one. Of the ``store``: its identity, and
    the identity of the master's store whose records its mark counts, with the mark (a slave learns its
    master's here: ``haStoreIdentity``, ``haReplicaMaster``, ``haReplicaMark``; a promoted slave keeps them).
    """
    info = {"brokerRole": role}
    if store is not None and store.identity:
        info["haStoreIdentity"] = store.identity
        # the announced id before the history: a first put between the two reads (it runs off the loop)
        # then finds the id begun already, not a history without it and nothing announced
        following = store.next_incarnation
        incarnations = store.incarnations
        if incarnations:
            info["haIncarnations"] = ";".join(map(str, incarnations))
            if following and all(i.id.hex() != following for i in incarnations):
                info["haNextIncarnation"] = following
    if store is not None and store.replica_master:
        info["haReplicaMaster"] = store.replica_master
        info["haReplicaMark"] = str(store.replica_mark)
        if store.replica_incarnation:
            info["haReplicaIncarnation"] = store.replica_incarnation
            if store.replica_following != _UNKNOWN:
                info["haReplicaNextIncarnation"] = store.replica_following or _NO_FOLLOWING
    if quarantines:
        info["storeQuarantines"] = str(len(quarantines))
        info["storeQuarantinedRecords"] = str(sum(max(0, m.records) + max(0, m.damaged) for m in quarantines))
    diverged = [m for m in quarantines or [] if m.recovery == DIVERGED]
    if diverged:
        info["haDivergedRecords"] = str(sum(m.records + m.damaged for m in diverged))
        info["haDivergedQuarantine"] = diverged[-1].path
    if master is not None:
        slaves = master.status()
        info["haSlaveCount"] = str(len(slaves))
        info["haPush2SlaveMaxOffset"] = str(master.push2slave_max_offset)
        info["haSlaves"] = ";".join(f"{s.addr}/{s.acked_offset}/{s.lag_seconds}" for s in slaves)
    if slave is not None:
        info["haMasterAddress"] = slave.master_addr
        info["haMasterConnected"] = "true" if slave.connected else "false"
        if slave.local_addr:
            info["haClientAddress"] = slave.local_addr
        info["haMasterLastReadTimestamp"] = str(slave.last_read_ms)
        info["haReplicaMark"] = str(slave.store.replica_mark)
        info["haHeldBackBytes"] = str(slave.store.held_back)
    return info


# ---------------------------------------------------------------------- slave metadata (SlaveSynchronize)

#: How often a slave pulls topics, groups and offsets from its master (4.9.8: every 10 s).
METADATA_SYNC_INTERVAL = 10.0


async def sync_metadata(
    client: Transport,
    master_addr: str,
    configs: ConfigFiles,
    slave_commits: dict[tuple[str, str, int], int] | None = None,
    *,
    asking: Callable[[int], None] | None = None,
    may_apply: Callable[[], bool] | None = None,
    held: Callable[[], Iterable[tuple[str, int]]] | None = None,
) -> list[str]:
    """4.9.8 ``SlaveSynchronize.syncAll``: topic configs (21), subscription groups (201), consumer offsets
    (43) and delay offsets (45) from the master, each persisted when it changed. Returns what changed.

    Topic and group tables are replaced when the master's ``dataVersion`` differs; consumer offsets are
    merged per ``topic@group`` (Java's ``putAll``), so a slave keeps offsets only it has seen, but unlike
    Java an entry an earlier sync took that the master no longer holds is dropped when the master no longer
    has its group or its topic either (deleted there: a failover would bring it back); one whose group and
    topic the master still has is kept (the master lost its offsets: restored from an older copy, or its
    offset files unreadable), each logged at WARNING. Java asks for the groups last; here they are asked
    for before the offsets, which are judged by this sync's topic and group tables (without both, nothing
    is dropped). Since this process started only: a deletion made while it was down stays here.

    ``slave_commits`` (group, topic, queue id -> offset) are what clients committed to this slave, which
    they do when they find no master. 4.9.8 (``SlaveSynchronize.syncConsumerOffset``) overwrites them
    with the master's older offsets once the master is back, and the master learns them only from a
    client that still holds them in memory (its next pull with the commit flag or its 5 s persist,
    ``RemoteBrokerOffsetStore``), so a consumer that restarted meanwhile re-consumes. Here the slave hands
    each one that is ahead of the master's to the master first (UPDATE_CONSUMER_OFFSET) and keeps it.

    ``asking(code)`` is called right before each request: what the slave holds then is what the answer
    may already know of.

    ``may_apply()`` is asked right before each table is taken in (nothing awaited between): once it says
    no, the sync stops there. A DLedger member elected meanwhile must take nothing more from the member it
    synced from, which may be a deposed leader still answering: its offset table can carry a POP ack that
    the quorum never held, and the new leader, which lends again from its own table, would skip the
    message that ack failed for.

    ``held()`` gives the store's queues (``(topic, queue id)``): no topic's count is clamped below them.
    """
    changed: list[str] = []
    steps: list[tuple[int, JsonConfigFile]] = [
        (RequestCode.GET_ALL_TOPIC_CONFIG, configs.topics),
        (RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, configs.subscription_groups),
        (RequestCode.GET_ALL_CONSUMER_OFFSET, configs.consumer_offsets),
        (RequestCode.GET_ALL_DELAY_OFFSET, configs.delay_offsets),
    ]
    masters: dict[int, set[str]] = {}  # this sync's answers: the master's topic and group names
    for code, manager in steps:
        if asking is not None:
            asking(code)
        try:
            response = await client.invoke(master_addr, RemotingCommand.request(code), 3.0)
        except RemotingError as exc:
            log.warning("slave metadata sync (%d) from %s failed: %s", code, master_addr, exc)
            continue
        if response.code != ResponseCode.SUCCESS or not response.body:
            log.warning(
                "slave metadata sync (%d) from %s: %s %s", code, master_addr, response.code, response.remark
            )
            continue
        try:
            data = fastjson.loads(response.body)
            if isinstance(manager, TopicConfigFile | SubscriptionGroupFile):
                masters[code] = set(data.get(manager.TABLE) or ())
            if slave_commits and isinstance(manager, ConsumerOffsetManager):
                await _hand_on_commits(client, master_addr, data, slave_commits)
            if may_apply is not None and not may_apply():
                log.info(
                    "slave metadata sync from %s stopped: this member may no longer take it", master_addr
                )
                return changed
            if not _apply(manager, data, held or tuple, _deleted_on(master_addr, masters)):
                continue
        except (ValueError, TypeError, AttributeError) as exc:
            log.warning("slave metadata sync (%d) from %s: bad body: %s", code, master_addr, exc)
            continue
        await asyncio.to_thread(manager.persist)
        changed.append(type(manager).__name__)
    return changed


#: Seconds all of one sync's GET_MAX_OFFSET lookups may take together (asked at once, a few at a time).
END_LOOKUP_BUDGET = 3.0
END_LOOKUPS_AT_ONCE = 16


async def _hand_on_commits(
    client: Transport,
    master_addr: str,
    data: dict[str, Any],
    slave_commits: dict[tuple[str, str, int], int],
) -> None:
    """Commit to the master each offset committed to this slave that is ahead of the master's (never one
    behind it, nor one past the end of the master's queue), and put it into the master's table ``data``
    so the sync keeps it; each is handed on once (a refusal, such as an ACL denial of the slave's unsigned
    request, is logged and dropped). One the master did not answer about is kept for the next sync."""
    table = data.setdefault("offsetTable", {})
    ahead: list[tuple[str, str, int, int]] = []
    for (group, topic, queue_id), offset in list(slave_commits.items()):
        queues = table.setdefault(f"{topic}@{group}", {})
        key = str(queue_id) if str(queue_id) in queues else queue_id  # as the JSON decoder gave it
        if offset > int(queues.get(key, -1)):
            ahead.append((group, topic, queue_id, offset))
        elif slave_commits.get((group, topic, queue_id)) == offset:
            del slave_commits[(group, topic, queue_id)]
    ends = await _queue_ends(client, master_addr, {(topic, queue_id) for _, topic, queue_id, _ in ahead})
    for group, topic, queue_id, offset in ahead:
        queues = table[f"{topic}@{group}"]
        key = str(queue_id) if str(queue_id) in queues else queue_id
        where = f"offset {group}/{topic}/{queue_id} = {offset}"
        if (topic, queue_id) not in ends:
            log.warning(
                "not handing %s to master %s yet: it did not tell its queue's end", where, master_addr
            )
            queues[key] = offset  # kept here, handed on at the next sync
            continue
        end = ends[(topic, queue_id)]
        if end is not None and offset > end:
            # a master restored from an older copy: its queue ends before what the slave's consumers
            # acknowledged, and the messages it takes next would be skipped up to this offset
            log.warning(
                "not handing %s to master %s: past its queue's end %d (restored from an older copy?);"
                " the master's offset stands",
                where,
                master_addr,
                end,
            )
        else:
            header = UpdateConsumerOffsetRequestHeader(group, topic, queue_id, offset)
            request = RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, header.to_ext_fields())
            try:
                response = await client.invoke(master_addr, request, 3.0)
            except RemotingError as exc:
                log.warning("handing %s to master %s failed: %s", where, master_addr, exc)
                queues[key] = offset  # kept here, handed on at the next sync
                continue
            if response.code != ResponseCode.SUCCESS:
                log.warning("master %s refused %s: %s %s", master_addr, where, response.code, response.remark)
            else:
                log.info("handed %s, committed to this slave, to master %s", where, master_addr)
                queues[key] = offset
        if slave_commits.get((group, topic, queue_id)) == offset:  # (not committed again meanwhile)
            del slave_commits[(group, topic, queue_id)]


async def _queue_ends(
    client: Transport, master_addr: str, wanted: set[tuple[str, int]]
) -> dict[tuple[str, int], int | None]:
    """The master's GET_MAX_OFFSET of each queue ``wanted``: asked at once (at most
    ``END_LOOKUPS_AT_ONCE`` in flight), all within ``END_LOOKUP_BUDGET`` seconds, so that a slow master
    does not stretch the sync by a timeout per queue. ``None`` where the master refused to tell (handed
    on unchecked, as before the check); a queue it did not answer about in time is left out."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + END_LOOKUP_BUDGET
    slots = asyncio.Semaphore(END_LOOKUPS_AT_ONCE)
    ends: dict[tuple[str, int], int | None] = {}

    async def end_of(topic: str, queue_id: int) -> None:
        async with slots:
            left = deadline - loop.time()
            if left <= 0:
                return
            request = RemotingCommand.request(
                RequestCode.GET_MAX_OFFSET, QueueHeader(topic, queue_id).to_ext_fields()
            )
            try:
                response = await client.invoke(master_addr, request, left)
            except RemotingError:
                return
            end: int | None = None
            if response.code == ResponseCode.SUCCESS:
                with contextlib.suppress(ValueError, TypeError, KeyError):
                    end = OffsetResponseHeader.from_ext_fields(response.ext_fields).offset
            ends[(topic, queue_id)] = end

    await asyncio.gather(*(end_of(topic, queue_id) for topic, queue_id in sorted(wanted)))
    return ends


def _deleted_on(
    master_addr: str, masters: dict[int, set[str]]
) -> Callable[[ConsumerOffsetManager, set[str]], set[str]]:
    """Of the offset keys a master's table no longer holds, the ones it deleted: their group or topic is
    gone there too (``group delete``, ``topic delete``). The others are kept (a master that lost its
    offsets would otherwise wipe the only copy left); both are logged at WARNING, a kept key once."""

    def deleted(manager: ConsumerOffsetManager, unheld: set[str]) -> set[str]:
        topics = masters.get(RequestCode.GET_ALL_TOPIC_CONFIG)
        groups = masters.get(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        if topics is None or groups is None:
            return set()  # not judged without both tables: kept for the next sync
        gone: set[str] = set()
        for key in unheld:
            topic, at, group = key.partition("@")
            if at and (topic not in topics or group not in groups):
                gone.add(key)
        if gone:
            log.warning(
                "dropped %d consumer offset entries master %s no longer holds, nor their group or topic"
                " (deleted there): %s",
                len(gone),
                master_addr,
                _some(gone),
            )
        kept = unheld - gone
        if kept - manager.kept:  # (said once: the master may never take them again)
            log.warning(
                "keeping %d consumer offset entries master %s no longer holds although it has their group"
                " and topic (restored from an older copy, or its offset files unreadable?): %s",
                len(kept),
                master_addr,
                _some(kept),
            )
        return gone

    return deleted


def _some(keys: set[str], shown: int = 5) -> str:
    """Up to ``shown`` of ``keys``, sorted, and how many more."""
    first = sorted(keys)[:shown]
    more = f" and {len(keys) - shown} more" if len(keys) > shown else ""
    return ", ".join(first) + more


def _apply(
    manager: JsonConfigFile,
    data: dict[str, object],
    held: Callable[[], Iterable[tuple[str, int]]] = tuple,
    deleted: Callable[[ConsumerOffsetManager, set[str]], set[str]] | None = None,
) -> bool:
    """Take the master's table into ``manager``, a topic table's counts clamped above the queues ``held``,
    an offset table's entries dropped that ``deleted`` picks of the ones the master no longer holds;
    whether anything changed."""
    if isinstance(manager, ConsumerOffsetManager):
        incoming = ConsumerOffsetManager(None)
        incoming.decode(data)
        unheld = manager.unheld(incoming.table)
        drop = deleted(manager, unheld) if deleted is not None and unheld else set()
        return manager.merge(incoming.table, drop)
    if isinstance(manager, DelayOffsetManager):
        incoming_delay = DelayOffsetManager(None)
        incoming_delay.decode(data)
        return manager.replace(incoming_delay.table)
    with manager.lock:
        before_encoded = manager.encode()
        manager.decode(data)
        clamped = clamp_queue_counts(manager.table, held) if isinstance(manager, TopicConfigFile) else []
        changed = manager.encode() != before_encoded
    if clamped and changed:
        log.error("the master's topics hold queue counts out of range; clamped here: %s", "; ".join(clamped))
    return changed
