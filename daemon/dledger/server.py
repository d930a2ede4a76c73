"""A DLedger member over our remoting layer, on the broker's event loop (``DLedgerServer`` +
``DLedgerRpcNettyService``): its own listener on the port `dLegerPeers` gives this member, a client to each
peer, and a 10 ms tick driving the machines (`daemon.dledger.machines.Node`).

Sockets and files only move bytes here: every decision is the machine's, but who may speak at all: the
listener admits connections and requests through the :class:`~daemon.dledger.gate.PeerGate` (members,
from their own hosts), and with `haTls` runs mutual TLS, as each member's connections to its peers do.
Requests are answered as they arrive (a PUSH appends to the log before the next frame of that connection
is read, so entries arrive in order); each outgoing request runs as its own task, so a slow or dead peer
holds up nobody.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import random
import ssl as _ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

from daemon.dledger import trace
from daemon.dledger.gate import PeerGate
from daemon.dledger.machines import (
    CATCHING_UP,
    CHECKING,
    PROBING,
    MemberState,
    Node,
    Out,
    Role,
    Timings,
    keep_wait_ms,
)
from daemon.dledger.protocol import (
    BEANS,
    BINARY_ANSWER_KEY,
    BINARY_PUSH_ADVERT,
    BINARY_PUSH_CODE,
    BINARY_PUSH_KEY,
    BINARY_PUSH_VERSION,
    FRAME_PREFIX,
    PUSH_ANSWER,
    PUSH_ANSWER_TAG,
    REMOTING_RESPONSE_CODE,
    BinaryPushFields,
    BinaryPushFrames,
    DLedgerRequestCode,
    DLedgerResponseCode,
    HeartBeatRequest,
    LeadershipTransferRequest,
    LeadershipTransferResponse,
    MetadataResponse,
    PushEntryRequest,
    PushEntryResponse,
    RequestOrResponse,
    VoteRequest,
    binary_push_fields,
    decode_push_answer,
    is_push_answer,
    push_answer_frame,
    read_answer_header,
    read_binary_push,
)
from daemon.lifecycle import cancel_tasks, supervise
from daemon.remoting.client import RemotingClient, parse_addr
from daemon.remoting.codes import FLAG_ONEWAY, ResponseCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.connection import Connection, error_response
from daemon.remoting.errors import RemotingError
from daemon.remoting.limits import WarningGate
from daemon.remoting.server import RemotingServer
from daemon.remoting.tls import ServerTls
from store.clock import boot_id, boot_ms
from store.dledger import (
    RaftLog,
    encode_heard,
    keep_heard,
    load_abstention,
    load_heard,
    load_term,
    persist_abstention,
    persist_term,
    term_kept,
)

log = logging.getLogger(__name__)

Code = DLedgerResponseCode
#: read once (compiled, ``Code.SUCCESS`` is an attribute lookup on the enum's class): once a send
_SUCCESS: Final = Code.SUCCESS
_FOLLOWER: Final = Role.FOLLOWER

#: DLedgerRpcNettyService's timeout of every request (ms).
RPC_TIMEOUT_MS = 3000
TICK_SECONDS = 0.01
#: A follower's tick: it only watches for its leader's silence (``maxHeartBeatLeak`` heartbeats: seconds) and
#: dispatches what pushes committed (`FOLLOWER_DISPATCH_ENTRIES`), so it need not wake a hundred times a
#: second; when pushes come less often than ticks, each tick is a wake-up of its own. A role taken from a
#: read (a transferee's candidacy) ends the wait at once: candidates and leaders tick every `TICK_SECONDS`.
FOLLOWER_TICK_SECONDS = 0.05
#: How long a take-leadership request may stay pending before it is answered TIMEOUT.
TAKE_LEADERSHIP_WAIT_S = 10.0
#: A follower dispatches what its pushes commit once this many entries wait, else at its next tick: each
#: dispatch pays a set-up (the put lock, the walk, each touched queue's listeners) that a push of a few
#: entries paid whole. Only reads from a follower wait for it (``slaveReadEnable``; 4.9.8's reput thread
#: runs every millisecond), and a follower that becomes the master dispatches everything first.
FOLLOWER_DISPATCH_ENTRIES = 64


def parse_peers(peers: str) -> dict[str, str]:
    """``dLegerPeers``: ``n0-host:port;n1-host:port`` -> ``{"n0": "host:port", ...}`` (in order)."""
    out: dict[str, str] = {}
    for part in peers.split(";"):
        part = part.strip()
        if not part:
            continue
        node_id, sep, addr = part.partition("-")
        if not sep or not node_id or ":" not in addr:
            raise ValueError(f"dLegerPeers: {part!r} is not <id>-<host>:<port>")
        out[node_id] = addr
    return out


def now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


@dataclass(slots=True)
class DLedgerSettings:
    group: str
    self_id: str
    peers: dict[str, str]
    directory: str
    timings: Timings
    preferred_leader: str | None = None
    #: (voteWhenEmptied) vote and stand at once though the store was lost: the operator's word that what
    #: the group's other members hold is all there is (see `Node.abstain`)
    vote_when_emptied: bool = False


def channel_idle_timeout(idle_timeout: float, timings: Timings) -> float:
    """How long a channel connection may stay silent before it is closed: the remoting server's
    ``serverChannelMaxIdleTimeSeconds`` (0 or less: never), but never under twice the silence that
    deposes a leader, so a member's heartbeats always come well within it. A connection a member opens
    to vote and then leaves idle is closed, and opened again at the next vote; a process on a member's
    host holds no descriptor for ever."""
    if idle_timeout <= 0:
        return 0.0
    leak = timings.heart_beat_time_interval_ms * max(timings.max_heart_beat_leak, 1) / 1000
    return max(float(idle_timeout), 2 * leak)


class DLedgerServer:
    """One member of a DLedger group. `on_role(term, role)` is called on the loop as the role changes;
    `on_commit()` after the committed index moved (the CommitLog dispatches what it may now serve).

    `tls` (haTls) makes the listener TLS-only and demand a client certificate its trust file verifies;
    `client_ssl` is what this member presents to its peers and verifies them with. Without them the
    channel is plaintext, guarded by the peer gate alone."""

    def __init__(
        self,
        settings: DLedgerSettings,
        raft_log: RaftLog,
        *,
        on_role: Callable[[int, Role], None] = lambda term, role: None,
        on_commit: Callable[[], object] = lambda: None,
        on_peer_back: Callable[[str], None] = lambda peer: None,
        listen_host: str | None = None,
        tls: ServerTls | None = None,
        client_ssl: _ssl.SSLContext | None = None,
        idle_timeout: float = 120.0,
    ) -> None:
        self.settings = settings
        if settings.self_id not in settings.peers:
            raise ValueError(f"dLegerSelfId {settings.self_id} is not in dLegerPeers")
        term, vote = load_term(settings.directory)

        def persist(t: int, v: str | None) -> None:
            persist_term(settings.directory, t, v)

        member = MemberState(settings.group, settings.self_id, dict(settings.peers), persist, term, vote)
        self.node = Node(member, raft_log, settings.timings, random.Random(), settings.preferred_leader)
        self._abstain_at_start(raft_log, term_kept(settings.directory))
        #: this boot's id: the promises its acknowledgements make are kept on disk (`_keep`); None where the
        #: system says none (not Linux), and then a restart keeps none
        self._boot = boot_id()
        #: (keeping) the promise to write next, the acknowledgements waiting for it, the task writing, and
        #: the thread it writes on (its own: a busy shared executor would hold the heartbeats' answers up)
        self._to_keep: tuple[str, int] | None = None
        self._keeping: list[asyncio.Future[bool | None]] = []
        self._keeper: asyncio.Task[None] | None = None
        self._keep_thread: concurrent.futures.ThreadPoolExecutor | None = None
        self._keep_failures = WarningGate(log)
        #: how long an acknowledgement waits at most for its promise's write (`_reply_once_kept`), seconds
        self._keep_wait = keep_wait_ms(settings.timings) / 1000
        if self._boot is not None:
            self.node.keeps_promises = True
            self._remember_at_start(self._boot)
        self.on_role = on_role
        self.on_commit = on_commit
        self.on_peer_back = on_peer_back
        #: (leader) the peers that answered last: one answering again after a silence is reported
        self._live: set[str] = set()
        #: the machine's liveness map as `_live` was last worked out from it (most answers change nothing)
        self._live_seen: dict[str, bool] = {}
        host, port = parse_addr(settings.peers[settings.self_id])
        self.gate = PeerGate(settings.self_id, settings.peers)
        #: the gate's admitted senders, looked up by the push read itself (compiled: no interpreted call)
        self._admitted = self.gate.admitted_senders
        #: `trace.ENABLED`, read once (a module attribute: looked up on every read of it)
        self._tracing = trace.ENABLED
        #: Whether the channel runs mutual TLS (haTls): the listener's and the peer connections' contexts.
        self.mutual_tls = tls is not None
        self.server = RemotingServer(
            host=listen_host or host,
            port=port,
            idle_timeout=channel_idle_timeout(idle_timeout, settings.timings),
            tls=tls,
            admit=self.gate.admits,
            batch_replies=False,  # the leader waits on each push's answer: written as the push is read
        )
        for code in DLedgerRequestCode:
            self.server.register(int(code), self._serve)
        self.server.register(BINARY_PUSH_CODE, self._serve_binary)
        #: (leader) per peer, the connection on which it last said it reads binary pushes: they go on that
        #: connection only (a peer restarted meanwhile, maybe as a 4.9.8 member, is asked again)
        self._binary: dict[str, Connection] = {}
        #: (leader) per peer, its binary pushes' frames for the term they were last made in
        self._push_frames: dict[str, BinaryPushFrames] = {}
        #: (follower) what the peer gate is shown of each binary push (its senders), filled in per push
        self._gate_view = PushEntryRequest()
        #: (follower) the layout of the binary pushes of the leader and term last pushed from, and its senders
        #: (group, leaderId, localId, remoteId, term): what `_read_push` reads them by
        self._push_layout: (
            tuple[BinaryPushFrames, tuple[str | None, str | None, str | None, str | None, int]] | None
        ) = None
        # from this member's own address, which its peers' gates look for (the listener binds it too)
        self.client = RemotingClient(connect_timeout=1.0, ssl=client_ssl, local_host=listen_host or host)
        self._peer_refusals = WarningGate(log)
        self._task: asyncio.Task[None] | None = None
        self._inflight: set[asyncio.Task[None]] = set()
        self._committed = raft_log.committed_index
        self._push_soon = False
        #: (follower) what the tick waits on between ticks, woken early when the role changes
        self._tick_wait: asyncio.Future[None] | None = None
        #: (leader) the log's last index when the push queued last looked whether to wait for another poll
        self._push_seen = -1
        self._dispatching = False
        #: the last dispatch raised (a full disk): retried every heartbeat until one succeeds
        self._dispatch_failing = False
        self._stopped = False
        if trace.ENABLED:
            trace.member(settings.self_id)

    def _abstain_at_start(self, raft_log: RaftLog, voted_kept: bool) -> None:
        """A member started without its vote file (a new member, or its store lost), or one that kept an
        abstention it had not ended, abstains (`Node.abstain`) unless the operator said voteWhenEmptied;
        one restarted on its store asks its peers first whether the store is older than they saw it."""
        directory, node = self.settings.directory, self.node
        kept = load_abstention(directory)
        if self.settings.vote_when_emptied:
            if kept or not voted_kept:
                log.warning(
                    "[%s] voteWhenEmptied: votes at once though %s; a leader it elects may lack entries "
                    "the group acknowledged (remove the key once a leader is elected)",
                    self.settings.self_id,
                    "it had not caught up" if kept else "its vote file is missing",
                )
                persist_abstention(directory, "")
            return

        def keep(state: str) -> None:
            try:
                persist_abstention(directory, state)
            except OSError as exc:  # (a full disk) held in memory: a restart now would vote at once
                log.error("[%s] cannot keep its abstention (%s): %s", self.settings.self_id, state, exc)

        node.keep_abstention = keep
        if kept == CATCHING_UP:
            node.abstain(CATCHING_UP, "restarted before it caught up")
        elif raft_log.last_index < 0:
            node.abstain(PROBING, "started with an empty log")
        elif not voted_kept:
            node.abstain(PROBING, "started without its vote file (currterm)")
        elif kept:
            node.abstain(PROBING, "restarted before it knew whether the group had a history")
        else:
            node.abstain(CHECKING, "restarted on its store")

    def _remember_at_start(self, boot: str) -> None:
        """The promise its last start kept (`Node.remember`), if made in this boot by this member of this
        group and not over: it may have acknowledged a leader's heartbeats until its restart, and that
        leader may lend on them. Another boot's (a reboot takes longer than a lease at the usual timings),
        another group's or member's (a directory reused), or a file missing or damaged: none."""
        kept = load_heard(self.settings.directory)
        if kept is None or kept[0] != boot:
            return
        _boot, group, self_id, leader, until_boot = kept
        if (group, self_id) != (self.settings.group, self.settings.self_id):
            log.info(
                "[%s] its heard file is member %r's of group %r: keeps no promise from it",
                self.settings.self_id,
                self_id,
                group,
            )
            return
        now = now_ms()
        self.node.remember(leader, now + until_boot - boot_ms(), now)

    def _keep(self, promise: tuple[str, int]) -> None:
        """`promise` (`Node.unkept`, `Node.ahead`) written next on the member's own thread; a later one
        covers an earlier (the same leader, or one elected since), so only the last asked is written."""
        self._to_keep = promise
        if self._keeper is None and not self._stopped:
            self._keeper = asyncio.create_task(self._keep_promises())

    def _kept(self, promise: tuple[str, int]) -> asyncio.Future[bool | None]:
        """:meth:`_keep`, and done once `promise` or a later one is written (True), or could not be
        (False); cancelled when the member stops first."""
        fut: asyncio.Future[bool | None] = asyncio.get_running_loop().create_future()
        if self._stopped:
            fut.cancel()
            return fut
        self._keeping.append(fut)
        self._keep(promise)
        return fut

    async def _keep_promises(self) -> None:
        loop = asyncio.get_running_loop()
        if self._keep_thread is None:
            self._keep_thread = concurrent.futures.ThreadPoolExecutor(1, "dledger-heard")
        waiting: list[asyncio.Future[bool | None]] = []
        settings = self.settings
        try:
            while self._to_keep is not None and self._boot is not None:
                (leader, until), waiting = self._to_keep, self._keeping
                self._to_keep, self._keeping = None, []
                kept = False
                try:
                    # on this boot's clock (the machine's is the process's), a millisecond over for the
                    # two clocks' roundings
                    until_boot = until - now_ms() + boot_ms() + 1
                    record = encode_heard(self._boot, settings.group, settings.self_id, leader, until_boot)
                    await loop.run_in_executor(self._keep_thread, keep_heard, settings.directory, record)
                except (OSError, ValueError) as exc:
                    # (acknowledged all the same: a member that refused them would cost the group its
                    # leader, for a file that only matters should it restart within the lease)
                    self._keep_failures.warning(
                        "[%s] cannot keep until when it refuses candidates (a restart now would vote at "
                        "once): %s",
                        settings.self_id,
                        exc,
                    )
                except Exception as broke:  # (any other: the acknowledgements are answered all the same)
                    self._keep_failures.warning(
                        "[%s] cannot keep until when it refuses candidates (a restart now would vote at "
                        "once): its writer failed: %r",
                        settings.self_id,
                        broke,
                    )
                else:
                    self.node.promise_kept(leader, until)
                    kept = True
                for fut in waiting:
                    if not fut.done():
                        fut.set_result(kept)
                waiting = []
        except asyncio.CancelledError:
            for fut in waiting:  # (the member stops: acknowledgements never sent)
                fut.cancel()
            raise
        finally:
            self._keeper = None

    async def _reply_once_kept(
        self, request: RemotingCommand, resp: RequestOrResponse, promise: tuple[str, int]
    ) -> RemotingCommand:
        """A heartbeat's acknowledgement, sent once the promise it makes is kept on disk (`Node.unkept`),
        or sent all the same, and said, after `keep_wait_ms` (a stalled disk must not cost the leader its
        quorum: restarted then, the member votes at once, as after a failed write)."""
        kept = self._kept(promise)
        timer = asyncio.get_running_loop().call_later(self._keep_wait, _wake, kept)
        try:
            await kept
        finally:
            timer.cancel()
        if kept.result() is None:
            self._keep_failures.warning(
                "[%s] acknowledges leader %s before it kept until when it refuses candidates (a restart now "
                "would vote at once): its write took longer than %d ms",
                self.settings.self_id,
                promise[0],
                keep_wait_ms(self.settings.timings),
            )
        return self._reply(request, resp)

    @property
    def log(self) -> RaftLog:
        return self.node.log

    @property
    def port(self) -> int:
        return self.server.port

    async def start(self) -> None:
        await asyncio.to_thread(self.gate.resolve)  # before the port opens: nobody is admitted unchecked
        await self.server.start()
        self.node._now = now_ms()
        self._task = supervise(self._run, f"dledger-{self.settings.self_id}")
        log.info(
            "DLedger member %s of group %s listening on %s (peers %s); %s",
            self.settings.self_id,
            self.settings.group,
            self.server.address,
            ";".join(f"{k}-{v}" for k, v in self.settings.peers.items()),
            self.channel(),
        )
        if self.exposed:
            log.warning(
                "DLedger: dLegerPeers names hosts beyond loopback and the channel is not on mutual TLS: any "
                "process on a member's host can send this member a VOTE (deposing the leader) or a PUSH "
                "TRUNCATE (cutting a follower's log), and anyone on the path reads the log; set haTls=true "
                "with tls.server.trustCertPath and the members' certificates"
            )

    def lease_fresh(self) -> bool:
        """Whether this member leads on a fresh lease now (:meth:`Node.lease_fresh`): no other member can
        have been elected since a quorum last acknowledged its heartbeats."""
        return self.node.lease_fresh(now_ms())

    @property
    def exposed(self) -> bool:
        """Beyond loopback without mutual TLS: the peer gate is the channel's only guard."""
        return self.gate.beyond_loopback and not self.mutual_tls

    def channel(self) -> str:
        """How the channel is guarded, in words (the start-up line, ``broker status``)."""
        if self.mutual_tls:
            return "mutual TLS (haTls), members' hosts only"
        if self.exposed:
            return "plaintext beyond loopback: any process on a member's host can depose or truncate"
        return "plaintext on loopback: members' hosts only (as strong as this host's user separation)"

    async def stop(self) -> None:
        self._stopped = True
        if self._task is not None:
            await cancel_tasks([self._task])
            self._task = None
        for task in list(self._inflight):
            task.cancel()
        await asyncio.gather(*self._inflight, return_exceptions=True)
        if self._keeper is not None:
            await cancel_tasks([self._keeper])
        for waiting in self._keeping:  # (acknowledgements never sent: the member stops)
            waiting.cancel()
        self._keeping = []
        if self._keep_thread is not None:
            self._keep_thread.shutdown(wait=False)
        self.node.fail_waiting(Code.TERM_CHANGED)
        self._answer_waits()
        await self.server.stop(grace=0)
        await self.client.close()

    # ------------------------------------------------------------------ driving the machine

    async def _run(self) -> None:
        while True:
            try:
                self._send(self.node.tick(now_ms()))
                self._effects()
            except Exception:
                log.exception("DLedger tick failed")
            if self.node.m.role is not _FOLLOWER:
                await asyncio.sleep(TICK_SECONDS)
                continue
            loop = asyncio.get_running_loop()
            waking = self._tick_wait = loop.create_future()
            timer = loop.call_later(FOLLOWER_TICK_SECONDS, _wake, waking)
            try:
                await waking
            finally:
                timer.cancel()
                self._tick_wait = None

    def _send(self, outs: list[Out]) -> None:
        """Each request written now on its peer's open connection, its answer handled in the read that
        brings it (no task per request: a push and the quorum it completes each cost no loop round);
        a peer not connected yet is connected to by a task of its own."""
        for out in outs:
            conn = self.client.open_connection(self.settings.peers[out.peer])
            if out.raw is not None and (conn is None or self._binary.get(out.peer) is not conn):
                out = self._as_json(out)  # (binary only where the peer said it reads it)
            if trace.ENABLED and isinstance(out.request, PushEntryRequest):
                first, count = self._push_range(out)
                trace.mark_range(f"push-write {out.peer}", first, count)
            if conn is not None:
                try:
                    on_answer = _Answer(self, out, conn)
                    if out.raw is not None:
                        opaque = conn.expect(BINARY_PUSH_CODE, RPC_TIMEOUT_MS / 1000, on_answer)
                        conn.send_frames(self._push_head(out, opaque), out.raw)
                        if conn.frame_reader is None:
                            conn.frame_reader = self._read_answer
                    else:
                        conn.request(self._request(out), RPC_TIMEOUT_MS / 1000, on_answer)
                    continue
                except RemotingError:  # closed meanwhile: the task reconnects
                    pass
                if out.raw is not None:
                    out = self._as_json(out)
            task = asyncio.create_task(self._call(out))
            self._inflight.add(task)
            task.add_done_callback(self._inflight.discard)

    def _push_head(self, out: Out, opaque: int) -> bytes:
        """A binary push's frame up to its body (``out.raw``), its header from the peer's template for the
        push's term (with the body, the same bytes as :meth:`_request`'s command encoded)."""
        req = out.request
        assert isinstance(req, PushEntryRequest) and out.raw is not None
        frames = self._push_frames.get(out.peer)
        if frames is None or frames.term != req.term:
            frames = self._push_frames[out.peer] = BinaryPushFrames(req)
        return frames.head(opaque, req.commit_index, out.first, out.count, len(out.raw))

    def _as_json(self, out: Out) -> Out:
        """A binary push whose connection is not the one its peer said it on: JSON, and the peer's pushes
        JSON until it says so again on a new connection."""
        self._binary.pop(out.peer, None)
        self.node.binary_lost(out.peer)
        return self.node.as_json(out)

    @staticmethod
    def _push_range(out: Out) -> tuple[int, int]:
        """(first index, count) of a push, binary or JSON."""
        if out.raw is not None:
            return out.first, out.count
        req = out.request
        assert isinstance(req, PushEntryRequest)
        return req.first_entry_index, req.count

    def _answered(self, out: Out, conn: Connection, answer: RemotingCommand | Exception) -> None:
        if self._stopped:
            return
        if isinstance(answer, RemotingCommand):
            body = answer.body
            if (
                out.raw is not None
                and answer.code == REMOTING_RESPONSE_CODE
                and len(body) == PUSH_ANSWER.size
                and body[0] == PUSH_ANSWER_TAG
                and self._binary.get(out.peer) is conn
            ):
                # a binary push's binary answer (on the connection its peer said it on): its numbers go
                # to the machine as they are, no bean
                _tag, code, term, index, count, _begin, _end = PUSH_ANSWER.unpack(body)
                self._binary_answered(out, code, term, index, count)
                return
            if (
                answer.ext_fields.get(BINARY_PUSH_KEY) == BINARY_PUSH_VERSION
                and self._binary.get(out.peer) is not conn
            ):
                # said on this connection: binary pushes may go on it (the machine asks for them as leader)
                self._binary[out.peer] = conn
            if self._binary.get(out.peer) is conn:
                self.node.speaks_binary(out.peer)
            resp = self._decode(out, answer)
        else:
            log.debug("DLedger %s to %s: %s", out.code.name, out.peer, answer)
            resp = None
        self._handle(out, resp)

    def _binary_answered(self, out: Out, code: int, term: int, index: int, count: int) -> None:
        """A binary push's binary answer, on the connection its peer said it reads them on."""
        node = self.node
        node.speaks_binary(out.peer)
        if trace.ENABLED:
            trace.mark_range(f"ack-read {out.peer}", out.first, out.count)
        try:
            node.raw_push_answered(out, code, term, index, count, now_ms())
            self._effects()
        except Exception:
            log.exception("DLedger: handling the answer of %s to %s failed", out.peer, out.code.name)

    def _read_answer(self, conn: Connection, buf: bytearray, pos: int) -> int:
        """``Connection.frame_reader`` of a connection binary pushes go on: the whole frame at ``pos`` when it is
        the binary answer (:func:`push_answer_frame`'s layout) to a binary push still waited for on it,
        handled as :meth:`_answered` handles it (no JSON decode, no command); 0 for anything else, which the
        generic read takes."""
        have = len(buf) - pos
        if have < 8:
            return 0
        length, header_len = FRAME_PREFIX.unpack_from(buf, pos)
        total = 4 + length
        if have < total or length != 4 + header_len + PUSH_ANSWER.size:
            return 0
        end = pos + 8 + header_len
        opaque = read_answer_header(buf, pos + 8, end)
        if opaque is None or buf[end] != PUSH_ANSWER_TAG:
            return 0
        waiting = conn.expecting(opaque)
        if not isinstance(waiting, _Answer) or waiting.conn is not conn or self._stopped:
            return 0
        out = waiting.out
        if out.raw is None or self._binary.get(out.peer) is not conn:
            return 0
        conn.answered(opaque)
        _tag, code, term, index, count, _begin, _end = PUSH_ANSWER.unpack_from(buf, end)
        self._binary_answered(out, code, term, index, count)
        return total

    async def _call(self, out: Out) -> None:
        self._handle(out, await self.rpc(out))

    def _handle(self, out: Out, resp: RequestOrResponse | None) -> None:
        if trace.ENABLED and resp is not None and isinstance(out.request, PushEntryRequest):
            first, count = self._push_range(out)
            trace.mark_range(f"ack-read {out.peer}", first, count)
        try:
            self.node.on_response(out, resp, now_ms())
            self._effects()
        except Exception:
            log.exception("DLedger: handling the answer of %s to %s failed", out.peer, out.code.name)

    @staticmethod
    def _request(out: Out) -> RemotingCommand:
        if out.raw is not None:
            req = out.request
            assert isinstance(req, PushEntryRequest)
            fields = binary_push_fields(req, out.first, out.count)
            return RemotingCommand.request(BINARY_PUSH_CODE, fields, out.raw)
        body = out.body if out.body is not None else out.request.encode()
        return RemotingCommand.request(int(out.code), body=body)

    async def rpc(self, out: Out) -> RequestOrResponse | None:
        """Send one request; its answer, or None when the peer did not answer in time."""
        try:
            response = await self.client.invoke(
                self.settings.peers[out.peer], self._request(out), RPC_TIMEOUT_MS / 1000
            )
        except RemotingError as exc:
            log.debug("DLedger %s to %s: %s", out.code.name, out.peer, exc)
            return None
        except Exception:  # a bug must not leave the peer's request unanswered (its pushes would stop)
            log.exception(
                "DLedger %s to %s failed unexpectedly; taken as unanswered", out.code.name, out.peer
            )
            return None
        return self._decode(out, response)

    def _decode(self, out: Out, response: RemotingCommand) -> RequestOrResponse | None:
        """The peer's answer as its bean; None when it refused (its gate: NO_PERMISSION, or a failure) or
        wrote something unreadable."""
        if response.code != REMOTING_RESPONSE_CODE:
            self._peer_refusals.warning(
                "DLedger %s to %s (%s) refused: code %d, %s",
                out.code.name,
                out.peer,
                self.settings.peers[out.peer],
                response.code,
                response.remark,
            )
            return None
        try:
            if out.raw is not None and is_push_answer(response.body):  # (asked for by the binary push)
                return decode_push_answer(response.body, self.node.m.group)
            return BEANS[out.code][1].decode(response.body)
        except ValueError as bad:  # (compiled, a name holds one exception type)
            log.warning("DLedger %s answer from %s unreadable: %s", out.code.name, out.peer, bad)
            return None

    def _effects(self, after_replies: bool = False) -> None:
        node = self.node
        if node.role_changes:
            changes, node.role_changes = node.role_changes, []
            for term, role in changes:
                log.info("[%s] role %s in term %d", self.settings.self_id, role.value, term)
                self.on_role(term, role)
            if node.m.role is not _FOLLOWER and self._tick_wait is not None:
                _wake(self._tick_wait)  # (a follower's long tick: the new role's runs now)
        if node.is_leader:
            if node.m.live != self._live_seen:
                live = {p for p, up in node.m.live.items() if up}
                for peer in sorted(live - self._live):
                    self.on_peer_back(peer)
                self._live, self._live_seen = live, dict(node.m.live)
        elif self._live_seen or self._live:
            self._live, self._live_seen = set(), {}
        if node.answered or node.failed:
            self._answer_waits()
        committed = self.log.committed_index
        if committed != self._committed:
            if (
                after_replies
                and not node.is_leader
                and committed - self._committed < FOLLOWER_DISPATCH_ENTRIES
            ):
                return  # (a follower answering a push: at the tick, or with what the next pushes commit)
            self._committed = committed
            # after the sends just answered have written their replies (their tasks were woken first),
            # still before this loop reads another request: a consumer's next pull finds them dispatched
            self._dispatch_soon(after_replies)

    def _dispatch_soon(self, after_replies: bool) -> None:
        if not self._dispatching:
            self._dispatching = True
            loop = asyncio.get_running_loop()
            if after_replies:  # the replies of this round of reads go out at its end (ReplyBatch): after them
                loop.call_later(0, self._dispatch)
            else:
                loop.call_soon(self._dispatch)

    def _dispatch(self) -> None:
        self._dispatching = False
        if self._stopped:
            return
        try:
            self.on_commit()
        except Exception:
            # what is committed must be served once it can be (a full disk freed), whether or not another
            # commit comes to trigger a dispatch: tried again every heartbeat, reported once
            if not self._dispatch_failing:
                log.exception("DLedger dispatch of committed entries failed; retried every heartbeat")
            self._dispatch_failing = True
            self._dispatching = True
            delay = self.settings.timings.heart_beat_time_interval_ms / 1000
            asyncio.get_running_loop().call_later(delay, self._dispatch)
            return
        if self._dispatch_failing:
            self._dispatch_failing = False
            log.info("DLedger dispatch of committed entries succeeded again")

    # ------------------------------------------------------------------ what the broker asks

    def _answer_waits(self) -> None:
        """Each wait the machine answered since the last pass handed its outcome, in one pass: those a
        commit answered (in index order), then the others."""
        node = self.node
        answered, failed = node.answered, node.failed
        tracing = trace.ENABLED  # (read once a pass, not once a send)
        if answered:
            node.answered = []
            for index, _deadline, done in answered:
                if tracing:
                    trace.mark("commit", index)
                if done is not None:
                    try:
                        done(_SUCCESS)
                    except Exception:  # one failing answer must not strand the others
                        log.exception("DLedger: answering the append of entry %d failed", index)
        if failed:
            node.failed = []
            for waiter, code in failed:
                done = waiter[2]
                if done is not None:
                    try:
                        done(code)
                    except Exception:
                        log.exception("DLedger: answering the append of entry %d failed", waiter[0])

    def wait_committed(self, index: int) -> asyncio.Future[Code]:
        """Code.SUCCESS once a quorum holds entry `index` (appended by the CommitLog), else the failure."""
        fut: asyncio.Future[Code] = asyncio.get_running_loop().create_future()
        self.when_committed(index, fut.set_result)
        return fut

    def when_committed(self, index: int, done: Callable[[Code], object]) -> None:
        """:meth:`wait_committed` without a future: ``done(code)`` is called in the pass that learns the
        outcome (the read of the follower's answer that commits the entry), each waiting send answered
        there in turn, none woken later as a task of its own."""
        node = self.node
        if not node.is_leader:
            done(Code.NOT_LEADER)
            return
        node.track(index, now_ms(), done)
        if not self._push_soon:
            # pushed after the other requests this loop iteration read: the sends that arrived together go
            # to each follower in one push (and, while every follower is busy, those of the next polls too)
            self._push_soon = True
            self._push_seen = index - 1
            asyncio.get_running_loop().call_soon(self._push_now)

    def _push_now(self) -> None:
        if self._stopped:
            self._push_soon = False
            return
        node = self.node
        if node.hold_push(self._push_seen):
            # queued again: it runs after the loop's next poll, which does not sleep (its ready queue is not
            # empty), and the sends that poll brings go in the same push (`Node.hold_push`)
            self._push_seen = node.log.last_index
            asyncio.get_running_loop().call_soon(self._push_now)
            return
        self._push_soon = False
        try:
            self._send(node.tick(now_ms()))
            self._effects()
        except Exception:
            log.exception("DLedger push failed")

    async def transfer(self, transferee: str) -> LeadershipTransferResponse:
        """``handleLeadershipTransfer`` on the leader: hand leadership to `transferee`."""
        term = self.node.m.term
        code, out = self.node.transfer_request(transferee)
        if out is None:
            return self._transfer_answer(code)
        resp = await self.rpc(out)
        assert resp is None or isinstance(resp, LeadershipTransferResponse)
        self.node.transfer_answered(term, resp)
        self._effects()
        return resp if resp is not None else self._transfer_answer(Code.NETWORK_ERROR)

    def _transfer_answer(self, code: Code) -> LeadershipTransferResponse:
        m = self.node.m
        return LeadershipTransferResponse(code=int(code), term=m.term, group=m.group, leader_id=m.leader_id)

    def status(self) -> dict[str, object]:
        """Role, term, leader, indexes and each peer's match index (``broker ha status``, /metrics)."""
        node, m = self.node, self.node.m
        peers = {}
        pushes = dict(node.pushes) if node.is_leader else {}  # (also read from the metrics thread)
        for peer, addr in m.peers.items():
            if peer == m.self_id:
                continue
            push = pushes.get(peer)
            peers[peer] = {
                "addr": addr,
                "matchIndex": push.water_mark if push else -1,
                "lag": max(0, self.log.last_index - push.water_mark) if push else -1,
                "live": m.live.get(peer, False) if node.is_leader else None,
            }
        return {
            "selfId": m.self_id,
            "group": m.group,
            "role": m.role.value,
            "term": m.term,
            "leaderId": m.leader_id,
            "lastIndex": self.log.last_index,
            "committedIndex": self.log.committed_index,
            "peers": peers,
            "channel": self.channel(),
            "abstains": node.abstention(),
        }

    # ------------------------------------------------------------------ serving the peers

    def _serve(
        self, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand | Awaitable[RemotingCommand]:
        """Answered on the spot (the reply written as the request is read: no task per push), but for a
        leadership transfer, which waits for the transferee."""
        try:
            code = DLedgerRequestCode(request.code)
            bean = BEANS[code][0].decode(request.body)
        except ValueError as exc:
            log.warning("bad DLedger request %d from %s: %s", request.code, conn.address, exc)
            return self._reply(request, RequestOrResponse(code=int(Code.UNEXPECTED_ARGUMENT)))
        refusal = self.gate.refusal(bean, conn.address[0])
        if refusal is not None:
            return request.make_response(ResponseCode.NO_PERMISSION, refusal)
        if isinstance(bean, LeadershipTransferRequest) and bean.group == self.node.m.group:
            return self._transfer_reply(request, bean)
        if trace.ENABLED and isinstance(bean, PushEntryRequest):
            return self._traced_push(request, code, bean)
        resp = self._answer(code, bean)
        # (a follower answers a push before it dispatches what the push committed: the leader waits)
        self._effects(after_replies=True)
        node = self.node
        ahead = node.ahead
        if ahead is not None:  # (the next answers' need: written now, nobody waiting for it)
            node.ahead = None
            self._keep(ahead)
        unkept = node.unkept
        if unkept is not None:
            node.unkept = None
            return self._reply_once_kept(request, resp, unkept)
        return self._reply(request, resp)

    def _traced_push(
        self, request: RemotingCommand, code: DLedgerRequestCode, bean: PushEntryRequest
    ) -> RemotingCommand:
        """:meth:`_serve` of a push, its steps marked (the reply is written as this read ends)."""
        first, count = bean.first_entry_index, bean.count
        trace.mark_range("push-read", first, count)
        resp = self._answer(code, bean)
        trace.mark_range("appended", first, count)
        self._effects(after_replies=True)
        reply = self._reply(request, resp)
        trace.mark_range("ack-write", first, count)
        return reply

    def _serve_binary(self, conn: Connection, request: RemotingCommand) -> RemotingCommand | None:
        """A binary push from the leader (mqctl members only): the same gate and checks as a PUSH, its
        entries appended from the frame's body as they are. Its fields are read straight from the extFields
        and, when the push asks for it, the answer's frame written with only its numbers filled in: no
        request bean, answer bean or answer command per push (a follower's fixed cost of every push)."""
        try:
            fields = read_binary_push(request.ext_fields)
        except ValueError as exc:
            log.warning("bad DLedger binary push from %s: %s", conn.address, exc)
            return self._reply(request, RequestOrResponse(code=int(Code.UNEXPECTED_ARGUMENT)))
        group, leader_id, local_id, remote_id, term, commit_index, first, count = fields
        seen = self._gate_view  # (the gate reads the senders a push names: one bean reused for it)
        seen.group, seen.leader_id, seen.local_id, seen.remote_id = group, leader_id, local_id, remote_id
        seen.term, seen.commit_index = term, commit_index
        refusal = self.gate.refusal(seen, conn.address[0])
        if refusal is not None:
            return request.make_response(ResponseCode.NO_PERMISSION, refusal)
        node = self.node
        if group != node.m.group:
            return self._reply(request, RequestOrResponse(code=int(Code.UNKNOWN_GROUP), term=node.m.term))
        binary_answer = request.ext_fields.get(BINARY_ANSWER_KEY) == BINARY_PUSH_VERSION
        if binary_answer and not request.flag & FLAG_ONEWAY:
            self._learn_push_layout(conn, group, leader_id, local_id, remote_id, term)
        code = self._append_push(fields, request.body)
        dlog = self.log
        if binary_answer:
            # asked for: the answer's fields in a fixed layout, no JSON, no extFields (the push itself says
            # its leader knows this member reads binary pushes)
            conn.reply_frame(
                request,
                push_answer_frame(
                    request.opaque, code, term, first, count, dlog.begin_index, dlog.last_index
                ),
            )
            reply = None
        else:
            resp = PushEntryResponse(code=code, term=term, group=group, index=first, count=count)
            resp.begin_index, resp.end_index = dlog.begin_index, dlog.last_index
            reply = self._reply(request, resp)
        if trace.ENABLED:
            trace.mark_range("ack-write", first, count)
        return reply

    def _append_push(self, push: BinaryPushFields, body: bytes) -> int:
        """A binary push's entries appended (:meth:`Node.take_raw_push`), ``push`` its fields as
        :func:`read_binary_push` reads them: its answer's code."""
        group, leader_id, _local_id, remote_id, term, commit_index, first, count = push
        tracing = self._tracing
        if tracing:
            trace.mark_range("push-read", first, count)
        code = self.node.take_raw_push(
            group, leader_id, remote_id, term, commit_index, first, count, body, now_ms()
        )
        if tracing:
            trace.mark_range("appended", first, count)
        self._effects(after_replies=True)
        return code

    def _learn_push_layout(
        self,
        conn: Connection,
        group: str | None,
        leader_id: str | None,
        local_id: str | None,
        remote_id: str | None,
        term: int,
    ) -> None:
        """After a binary push that asked for a binary answer: the layout its leader writes such pushes in
        for this term (:class:`BinaryPushFrames`, the leader's own template), by which :meth:`_read_push`
        reads the next ones on this connection. Made once per leader and term: a leader whose pushes do not
        match it (another version's) has them read as before."""
        key = (group, leader_id, local_id, remote_id, term)
        if self._push_layout is None or self._push_layout[1] != key:
            req = PushEntryRequest(
                group=group, leader_id=leader_id, local_id=local_id, remote_id=remote_id, term=term
            )
            self._push_layout = (BinaryPushFrames(req), key)
        if conn.frame_reader is None:
            conn.frame_reader = self._read_push

    def _read_push(self, conn: Connection, buf: bytearray, pos: int) -> int:
        """``Connection.frame_reader`` of a connection binary pushes came on: the whole frame at ``pos`` when
        it is a push in the layout learnt (:meth:`_learn_push_layout`) from senders the peer gate admitted
        before, to this member's group, taken as :meth:`_serve_binary` takes it, its binary answer written;
        0 for anything else (a frame not whole yet, another request, another layout, a sender or group to
        check), which the generic read takes."""
        layout = self._push_layout
        have = len(buf) - pos
        if layout is None or have < 8:
            return 0
        length, mixed = FRAME_PREFIX.unpack_from(buf, pos)
        header_len = mixed & 0xFFFFFF
        total = 4 + length
        if (
            mixed >> 24  # (not a JSON header)
            or have < total
            or total > conn.max_frame_length
            or header_len > length - 4
            or header_len > conn.max_header_length
        ):
            return 0
        start = pos + 8
        end = start + header_len
        numbers = layout[0].read(buf, start, end)
        if numbers is None:
            return 0
        group, leader_id, local_id, remote_id, term = layout[1]
        if group != self.node.m.group or (leader_id, local_id, conn.address[0]) not in self._admitted:
            return 0
        commit_index, first, count, opaque = numbers
        with memoryview(buf) as view:
            body = bytes(view[end : pos + total])
        try:
            code = self._append_push(
                (group, leader_id, local_id, remote_id, term, commit_index, first, count), body
            )
        except Exception as exc:  # (as the dispatcher answers a processor that raised)
            request = RemotingCommand.request(BINARY_PUSH_CODE)
            request.opaque = opaque
            log.exception("DLedger binary push from %s failed", conn.peer)
            conn.reply(request, error_response(request, exc))
            return total
        dlog = self.log
        conn.send_frame(
            push_answer_frame(opaque, code, term, first, count, dlog.begin_index, dlog.last_index)
        )
        if self._tracing:
            trace.mark_range("ack-write", first, count)
        return total

    async def _transfer_reply(
        self, request: RemotingCommand, req: LeadershipTransferRequest
    ) -> RemotingCommand:
        resp = await self._leadership_transfer(req)
        self._effects()
        return self._reply(request, resp)

    @staticmethod
    def _reply(request: RemotingCommand, resp: RequestOrResponse) -> RemotingCommand:
        # every answer says this member reads binary pushes (DLedger reads an answer's body only)
        return request.make_response(REMOTING_RESPONSE_CODE, None, dict(BINARY_PUSH_ADVERT), resp.encode())

    def _answer(self, code: DLedgerRequestCode, req: RequestOrResponse) -> RequestOrResponse:
        node, m, now = self.node, self.node.m, now_ms()
        if req.group != m.group and code is not DLedgerRequestCode.METADATA:
            return RequestOrResponse(code=int(Code.UNKNOWN_GROUP), term=m.term)
        if isinstance(req, VoteRequest):
            node._now = now
            return node.on_vote(req)
        if isinstance(req, HeartBeatRequest):
            return node.on_heartbeat(req, now)
        if isinstance(req, PushEntryRequest):
            return node.on_push(req, now)
        if code is DLedgerRequestCode.METADATA:
            return MetadataResponse(group=m.group, leader_id=m.leader_id, term=m.term, peers=dict(m.peers))
        # APPEND: a body that is not a CommitLog record would break the CommitLog; PULL: not in 0.3.1.2;
        # GET (DLedger's client reading an entry): members never send it, and it would hand every
        # message of the log, past the broker's ACL, to whoever the gate admits
        return RequestOrResponse(code=int(Code.UNSUPPORTED), term=m.term, leader_id=m.leader_id)

    async def _leadership_transfer(self, req: LeadershipTransferRequest) -> RequestOrResponse:
        m = self.node.m
        if req.remote_id != m.self_id:
            return self._transfer_answer(Code.UNKNOWN_MEMBER)
        if req.transfer_id == m.self_id:  # the leader, asked to hand over
            if req.term != m.term:
                return self._transfer_answer(Code.INCONSISTENT_TERM)
            return await self.transfer(req.transferee_id or "")
        if req.transferee_id != m.self_id:
            return self._transfer_answer(Code.UNEXPECTED_ARGUMENT)
        code = self.node.on_take_leadership(req)
        deadline = time.monotonic() + TAKE_LEADERSHIP_WAIT_S
        while code is None:
            pending = self.node.take_leadership
            if pending is not None and pending[1] is not None:
                code = pending[1]
                self.node.take_leadership = None
            elif time.monotonic() > deadline:
                code = Code.TIMEOUT
            else:
                await asyncio.sleep(TICK_SECONDS)
        return self._transfer_answer(code)


def _wake(waiting: asyncio.Future[None] | asyncio.Future[bool | None]) -> None:
    if not waiting.done():
        waiting.set_result(None)


class _Answer:
    """What a request's answer goes to (``Connection.expect``'s callback): ``server._answered(out, conn, ...)``;
    :meth:`DLedgerServer._read_answer` finds a binary push's own here."""

    def __init__(self, server: DLedgerServer, out: Out, conn: Connection) -> None:
        self.server = server
        self.out = out
        self.conn = conn

    def __call__(self, answer: RemotingCommand | Exception) -> None:
        self.server._answered(self.out, self.conn, answer)


def dledger_runtime_info(server: DLedgerServer) -> dict[str, str]:
    """mqctl's DLedger keys in GET_BROKER_RUNTIME_INFO: the member's role, term, leader and indexes, and on
    the leader each follower as ``id/matchIndex/lag/up`` (``down`` when its last heartbeat or push went
    unanswered: its lag stops growing only because nothing new reaches it) joined by ``;``."""
    st = server.status()
    peers = st["peers"]
    assert isinstance(peers, dict)
    info = {
        "dledgerSelfId": str(st["selfId"]),
        "dledgerGroup": str(st["group"]),
        "dledgerRole": str(st["role"]),
        "dledgerTerm": str(st["term"]),
        "dledgerLeaderId": str(st["leaderId"] or ""),
        "dledgerLastIndex": str(st["lastIndex"]),
        "dledgerCommittedIndex": str(st["committedIndex"]),
        "dledgerPeerAddrs": ";".join(f"{k}-{v}" for k, v in server.settings.peers.items()),
        "dledgerChannel": str(st["channel"]),
        "dledgerChannelRefused": str(server.gate.refused + server.server.tls_refused),
        "dledgerAbstains": str(st["abstains"]),
    }
    if server.node.is_leader:
        info["dledgerPeers"] = ";".join(
            f"{p}/{v['matchIndex']}/{v['lag']}/{'up' if v['live'] else 'down'}" for p, v in peers.items()
        )
    return info
