"""DLedger's elector and entry pusher as pure state machines (no I/O, no clock, no threads).

They follow openmessaging DLedger 0.3.1.2 (`DLedgerLeaderElector`, `DLedgerEntryPusher`, `MemberState`):
the caller hands them the time (`now`, milliseconds) and the messages that arrived, and gets back the
messages to send (`Out`) and the answers to requests. A node's role, term and vote live in `MemberState`;
`Node` routes between the elector and the pusher. Everything runs on one thread (the broker's event loop),
so there are no locks: what DLedger does under ``synchronized (memberState)`` is simply one call here.

Where DLedger blocks a thread on a round of votes or heartbeats, the machine keeps the round open and
closes it when the deciding answer arrives or its time is up (`tick`). Entries commit by Raft's rule, not
DLedger's ``QuorumAckChecker`` (a quorum holding an entry, whatever its term): a leader counts replicas of
entries of its own term only, and earlier entries commit with them. Counting an earlier term's entries
lets leaders failing in a row commit an entry and then lose it (the Raft paper's figure 8). A leader's
first entry of its term is appended by its owner as soon as it is elected (the broker's term record), so
its predecessor's tail commits without waiting for a send.

A follower's divergent tail is found by binary search over COMPARE pushes (DLedger compares back one entry
per round trip): by Raft's log-matching property, "the follower holds entry i as the leader does" holds up
to some index and never after it, and a follower answers a COMPARE of any index it is asked.
"""

from __future__ import annotations

import enum
import logging
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, TypeVar

from daemon.dledger.protocol import (
    DLedgerEntry,
    DLedgerRequestCode,
    DLedgerResponseCode,
    HeartBeatRequest,
    HeartBeatResponse,
    LeadershipTransferRequest,
    LeadershipTransferResponse,
    PushEntryRequest,
    PushEntryResponse,
    PushType,
    RequestOrResponse,
    VoteRequest,
    VoteResponse,
    VoteResult,
    entry_json,
)
from daemon.remoting.limits import WarningGate
from store.dledger import DamagedEntryError, DLedgerCode, DLedgerError, Entry, RaftLog, decode_entry

log = logging.getLogger(__name__)
#: refused out-of-order pushes: one warning in a while, not a line each (a healed stall brings hundreds)
_OUT_OF_ORDER = WarningGate(log)

_R = TypeVar("_R", bound=RequestOrResponse)

Code = DLedgerResponseCode
#: `Node.lease_start` of a leader no quorum acknowledged yet (and of every other member)
NO_LEASE: Final = -(1 << 62)
#: what a waiting append is answered, read once: compiled, each ``Code.X`` is an attribute lookup on the
#: enum's class, paid per send where the quorum's bookkeeping names one
_SUCCESS: Final = Code.SUCCESS
_ACK_TIMEOUT: Final = Code.WAIT_QUORUM_ACK_TIMEOUT
#: the codes a push's answer is compared with, as ints (an answer's code is one: no enum compare)
_OK: Final[int] = int(Code.SUCCESS)
_NETWORK_ERROR: Final[int] = int(Code.NETWORK_ERROR)
_INCONSISTENT_STATE: Final[int] = int(Code.INCONSISTENT_STATE)
_REPEATED_PUSH: Final[int] = int(Code.REPEATED_PUSH)
_UNEXPECTED_ARGUMENT: Final[int] = int(Code.UNEXPECTED_ARGUMENT)

#: what an append's outcome is handed to (its driver's; None: only counted in `Node.outcomes`)
Done = Callable[[Code], object] | None
#: an append waiting for the quorum: (its entry's index, its deadline, what its outcome is handed to)
Waiter = tuple[int, int, Done]

#: Pushes a leader keeps in flight to one follower (``EntryDispatcher.maxPendingSize``).
MAX_PENDING_PUSHES = 1000
#: At most this many entries, or bytes (past the first entry), in one push to a follower.
MAX_BATCH_ENTRIES = 256
MAX_BATCH_BYTES = 1024 * 1024
#: While every follower still has a push in flight, the sends of one pass of the event loop wait for those of
#: the next poll before they are pushed (`Node.hold_push`), up to this many entries not yet pushed to one.
PUSH_WINDOW = 32
#: A follower the quorum does not wait for (`Node.spare_followers`) is pushed once this many entries wait for
#: it, or once its last push is `SPARE_PUSH_MS` old (the leader's 10 ms tick pushes it then at the latest):
#: each push costs it a wake-up, a read and an answer, and the leader a write and an answer's read.
SPARE_PUSH_ENTRIES = 64
SPARE_PUSH_MS = 10
#: A follower the quorum waits for whose oldest push has waited this long (a paused or lost member): every
#: follower is pushed at once, and the ones waited for are chosen again from who holds the most.
QUORUM_STALL_MS = 5
#: How many pushed entries the leader keeps ready for followers that have not acknowledged them yet.
WIRE_CACHE_ENTRIES = 4096
#: How often a leader with nothing to push tells followers the commit index (``doCommit``).
COMMIT_PUSH_INTERVAL_MS = 1000
#: How long a failed compare waits before the next (``EntryDispatcher#doWork`` sleeps 500 ms).
COMPARE_RETRY_MS = 500
#: How often a leader looks whether to hand leadership to the preferred one (``checkPreferredLeader``).
PREFERRED_CHECK_MS = 1000

#: `Node.abstaining`: it votes (and stands) as Raft has it
VOTING: Final = ""
#: it started without its log or its vote file: it asks its peers whether the group has a history
PROBING: Final = "probing"
#: the group has a history this member's store lost: it waits until it holds, committed, an entry of its
#: leader's term (everything committed before is then in its log)
CATCHING_UP: Final = "catching-up"
#: it restarted on its store: before it votes it asks its peers what they last saw of it, which a store
#: restored from an older copy (a VM snapshot, a disk image) is behind; not kept across a restart
CHECKING: Final = "checking"
#: `Out.epoch` of a probe: a vote asked in term -1 with an empty log, which DLedger's ``handleVote`` (and
#: ours) refuses before it looks at any vote: REJECT_EXPIRED_LEDGER_TERM from a member holding a log, else
#: REJECT_EXPIRED_VOTE_TERM with its term. Nothing changes on the member asked; a 4.9.8 member answers it.
PROBE_EPOCH: Final = -1


@dataclass(slots=True)
class Timings:
    """DLedgerConfig's timings, with 4.9.8's defaults (4.9.8 sets none of them: DLedger's own)."""

    heart_beat_time_interval_ms: int = 2000
    max_heart_beat_leak: int = 3
    min_vote_interval_ms: int = 300
    max_vote_interval_ms: int = 1000
    max_wait_ack_time_ms: int = 2500
    max_push_time_out_ms: int = 1000
    min_take_leadership_vote_interval_ms: int = 30
    max_take_leadership_vote_interval_ms: int = 100
    max_leadership_transfer_wait_index: int = 1000
    leadership_transfer_wait_timeout: int = 1000


def keep_wait_ms(t: Timings) -> int:
    """How long a follower's acknowledgement waits at most for the write of the promise it makes (its
    `heard` file), then goes out all the same: a tenth of the heartbeat interval. The leader counts an
    answer only until its next round goes out, an interval after this one, and the network and a loaded
    host need the rest; a write takes microseconds, so one that takes longer is a stalled disk, which must
    not cost the leader its quorum (before the file, heartbeats never touched the disk)."""
    return max(1, t.heart_beat_time_interval_ms // 10)


def wire_entry(entry: Entry) -> DLedgerEntry:
    """A log entry as a PUSH carries it."""
    return DLedgerEntry(
        body=entry.body,
        body_crc=entry.body_crc,
        chain_crc=entry.chain_crc,
        channel=entry.channel,
        index=entry.index,
        magic=entry.magic,
        pos=entry.pos,
        size=entry.size,
        term=entry.term,
    )


def log_entry(wire: DLedgerEntry) -> Entry:
    """A pushed entry as the log takes it."""
    return Entry(
        wire.index,
        wire.term,
        wire.body or b"",
        wire.pos,
        wire.magic,
        wire.channel,
        wire.chain_crc,
        wire.body_crc,
    )


def same_entry(wire: DLedgerEntry, local: Entry | None) -> bool:
    """``DLedgerEntry#equals``: size, magic, index, term, channel, pos and body (not the CRCs)."""
    return local is not None and wire.same(wire_entry(local))


class Role(enum.Enum):
    CANDIDATE = "CANDIDATE"
    FOLLOWER = "FOLLOWER"
    LEADER = "LEADER"


@dataclass(slots=True, init=False)
class Out:
    """A request to send to `peer`; its answer (None when none came) goes back to `Node.on_response`."""

    peer: str
    code: DLedgerRequestCode
    request: RequestOrResponse
    #: a push: the follower's dispatch state it was made in; a vote: its round (an answer from an earlier
    #: one is stale)
    epoch: int = 0
    #: the request's encoding when the machine made it (a push: its entries' JSON is shared by every follower)
    body: bytes | None = None
    #: a binary push (code PUSH, sent as BINARY_PUSH_CODE): its entries as the data file holds them, from
    #: index `first`, `count` of them (the request bean carries no entries)
    raw: bytes | None = None
    first: int = -1
    count: int = 0

    def __init__(
        self,
        peer: str,
        code: DLedgerRequestCode,
        request: RequestOrResponse,
        epoch: int = 0,
        body: bytes | None = None,
        raw: bytes | None = None,
        first: int = -1,
        count: int = 0,
    ) -> None:
        # written out (docs/design/compiled-build.md): one per push and follower
        self.peer = peer
        self.code = code
        self.request = request
        self.epoch = epoch
        self.body = body
        self.raw = raw
        self.first = first
        self.count = count


@dataclass(slots=True)
class MemberState:
    """``MemberState``: who this node is, its peers, role, term and vote (`persist` keeps term and vote)."""

    group: str
    self_id: str
    peers: dict[str, str]
    persist: Callable[[int, str | None], None] = lambda term, vote: None
    term: int = 0
    voted_for: str | None = None
    role: Role = Role.CANDIDATE
    leader_id: str | None = None
    known_max_term: int = -1
    transferee: str | None = None
    term_to_take_leadership: int = -1
    live: dict[str, bool] = field(default_factory=dict)

    def is_quorum(self, n: int) -> bool:
        return n >= len(self.peers) // 2 + 1

    def set_vote(self, vote: str | None) -> None:
        """Kept on disk before it counts: a vote that could not be saved is not given."""
        self.persist(self.term, vote)
        self.voted_for = vote

    def next_term(self) -> int:
        """Kept on disk before it counts: a member that cannot save a term (a full disk) stays in the
        one it has, rather than raising it in memory each tick and deposing a healthy leader with it."""
        term = self.known_max_term if self.known_max_term > self.term else self.term + 1
        self.persist(term, None)
        self.term = term
        self.voted_for = None
        return term


class ParseResult(enum.Enum):
    WAIT_TO_REVOTE = "WAIT_TO_REVOTE"
    REVOTE_IMMEDIATELY = "REVOTE_IMMEDIATELY"
    PASSED = "PASSED"
    WAIT_TO_VOTE_NEXT = "WAIT_TO_VOTE_NEXT"


@dataclass(slots=True)
class _VoteRound:
    term: int
    deadline: int
    #: which round of its term: a late answer to an earlier round of the same term is not counted in this
    #: one (a peer counted twice elects a leader without a majority: two leaders in one term)
    seq: int = 0
    answered: int = 0
    valid: int = 0
    accepted: int = 0
    not_ready: int = 0
    bigger_ledger: int = 0
    has_leader: bool = False
    max_term: int = -1


@dataclass(slots=True)
class _BeatRound:
    term: int
    deadline: int
    answered: int = 1
    succeeded: int = 1
    not_ready: int = 0
    max_term: int = -1
    inconsistent_leader: bool = False
    #: when it went out: a quorum's acknowledgement starts the leader's lease then (see `lease_fresh`)
    sent: int = 0
    #: it named a transferee, whose vote its followers then let through: it starts no lease
    handover: bool = False
    #: its heartbeats' `Out.epoch`: an answer counts for the round it answers, not for the one open when
    #: it comes (a late answer to an earlier round would start the lease from a round nobody acknowledged)
    seq: int = 0


class PushState(enum.Enum):
    COMPARE = "COMPARE"
    TRUNCATE = "TRUNCATE"
    APPEND = "APPEND"


#: read once (compiled, ``Role.LEADER`` is an attribute lookup on the enum's class): each send asks
_LEADER: Final = Role.LEADER
#: (compiled, ``Role.FOLLOWER`` is a lookup through the enum class's ``__getattr__``: once a push)
_FOLLOWER: Final = Role.FOLLOWER
_APPEND: Final = PushState.APPEND


@dataclass(slots=True)
class PeerPush:
    """``EntryDispatcher`` for one follower: where it stands and what is in flight to it."""

    state: PushState = PushState.COMPARE
    compare_index: int = -1
    #: the compare's search: the highest index the follower holds as the leader does, the lowest it does not
    #: hold so (-1: none known yet); the first differing entry lies in (matched, differs]
    matched: int = -1
    differs: int = -1
    #: COMPARE pushes answered in this search (a rejoin's cost in round trips)
    compares: int = 0
    write_index: int = -1
    #: index -> when its push went out
    inflight: dict[int, int] = field(default_factory=dict)
    #: a compare or truncate is out (one at a time)
    awaiting: bool = False
    not_before: int = 0
    last_push: int = -1
    water_mark: int = -1
    #: bumped at each change of state: answers to pushes of an earlier state are ignored (a success for
    #: entries a truncation cut since must not raise the water mark)
    epoch: int = 0
    #: its APPEND pushes go binary: it said it reads them on the connection they go on (the driver's word)
    binary: bool = False
    #: it refused a binary push's body (411): JSON for the rest of this leadership, whose reads are checked
    binary_refused: bool = False


class Node:
    """One DLedger member: the elector, the pusher (leader side) and the entry handler (follower side).

    Call `tick(now)` often (every 10 ms, as DLedger's maintainer threads loop), answer requests with the
    ``on_*`` methods, and feed each answer to an `Out` back through `on_response`. `role_changes` collects
    ``(term, role)`` as they happen; the appends answered since last drained are in `answered` (SUCCESS)
    and `failed` (with their codes), their driver's to hand out (`outcomes` drains both by index).
    """

    def __init__(
        self,
        member: MemberState,
        log_: RaftLog,
        timings: Timings | None = None,
        rng: random.Random | None = None,
        preferred_leader: str | None = None,
    ) -> None:
        self.m = member
        self.log = log_
        self.t = timings or Timings()
        self.rng = rng or random.Random()
        self.preferred = preferred_leader
        self.last_parse = ParseResult.WAIT_TO_REVOTE
        self.next_vote_time = 0
        self.need_increase_term = False
        self.last_leader_beat = 0
        self.last_send_beat = -1
        self.last_success_beat = 0
        #: (leader) when the last heartbeat round a quorum acknowledged went out (see `lease_fresh`)
        self.lease_start = NO_LEASE
        #: (following) whether its leader's last heartbeat said it lends on a lease (a leader of ours), and
        #: the transferee it named: whose vote may pass although the leader is heard (`_hears_leader`)
        self._leader_leases = False
        self._handover: str | None = None
        #: (restarted) the leader it acknowledged before its restart, and until when (this clock) it refuses
        #: every other candidate, as it promised then (`remember`); None once over, or once it hears a leader
        self._remembered: tuple[str, int] | None = None
        #: whether its owner keeps each promise on disk before the acknowledgement making it goes out: then
        #: `unkept` says, after a heartbeat's answer, what to keep first, `ahead` what to start keeping
        #: without waiting (the next answers' need), and `promise_kept` what was kept
        self.keeps_promises = False
        self._kept: tuple[str, int] = ("", NO_LEASE)
        self.unkept: tuple[str, int] | None = None
        self.ahead: tuple[str, int] | None = None
        #: (term, leader) it left for that leader's silence (its follower timeout ran out)
        self._left: tuple[int, str] | None = None
        #: (term, leader, until): it answered a candidate for that leader's silence, and acknowledges none
        #: of its heartbeats in that term until then (`on_heartbeat`)
        self._stood_aside: tuple[int, str, int] | None = None
        self.vote_round: _VoteRound | None = None
        self._vote_seq = 0
        self._beat_seq = 0
        self.beat_round: _BeatRound | None = None
        self.pushes: dict[str, PeerPush] = {}
        #: (leader) the followers chosen to make the quorum, pushed every pass (`spare_followers`)
        self._quorum_peers: list[str] = []
        #: (leader) the first index of its own term: only replicas of it and later entries count to commit
        self.term_first_index = 0
        #: (leader) the appends waiting for the quorum, in index order (each send waits for the entry it
        #: just appended: added at the end), each once per wait with its own deadline: a commit answers
        #: the run at the front up to the new committed index, and the expiry the front while deadlines rise
        self.waiting: deque[Waiter] = deque()
        #: whether the deadlines in `waiting` rise with its indexes (no wait was added out of order)
        self._waiting_ordered = True
        self._last_tracked = -1
        #: the waits answered SUCCESS since last drained, in index order, and those answered otherwise
        self.answered: list[Waiter] = []
        self.failed: list[tuple[Waiter, Code]] = []
        self.role_changes: list[tuple[int, Role]] = []
        #: the answer to a take-leadership request while it is pending: (target term, code or None)
        self.take_leadership: tuple[int, Code | None] | None = None
        self.take_leadership_wait: tuple[LeadershipTransferRequest, int] | None = None
        self.next_preferred_check = 0
        self._now = 0
        #: (leader) the entries pushed lately, index -> as a push carries them and their JSON, until every
        #: follower has them
        self._wire: dict[int, tuple[DLedgerEntry, bytes]] = {}
        #: the last index every follower held when `_wire` was last trimmed
        self._wire_everywhere = -1
        #: (leader) the last binary run read from the log: (first index, the log's last index then, the run):
        #: the followers pushed from the same index in one round share it (one read and copy, not one each)
        self._raw_run: tuple[int, int, tuple[int, bytes] | None] = (-1, -1, None)
        #: an entry of this log found failing its bodyCrc when read back: it leads no more while it holds it
        self.damaged = -1
        #: whether this member may run for leader now (its owner: not while its store refuses writes)
        self.can_lead: Callable[[], bool] = lambda: True
        #: VOTING, or PROBING / CATCHING_UP: it lost (or never had) its store, and grants no vote and
        #: stands for no election until it knows it holds what the group committed (`abstain`)
        self.abstaining = VOTING
        #: what it lost, in words (`abstain`)
        self.abstain_why = ""
        #: (catching up) the leader's commit index as its first push in this term said it, and that term
        self._catch_up_to = -1
        self._catch_up_term = -1
        #: (probing) the peers that answered a probe: whether each holds a log, and its term
        self._probed: dict[str, tuple[bool, int]] = {}
        #: (checking) the peers asked, and those whose probe went unanswered (down, unreachable)
        self._asked: set[str] = set()
        self._unanswered: set[str] = set()
        #: per peer, the highest (term, index) it took part in with this member: it stood or led in that
        #: term, voted for this member or acknowledged its heartbeats in it (index -1), or acknowledged
        #: this leader's entries up to index. In memory: what a probe is answered (`seen_of`)
        self.seen: dict[str, tuple[int, int]] = {}
        self._next_probe = 0
        #: (probing) when it started, -1 before its first probe
        self._probing_since = -1
        #: (probing, catching up) whether every other peer answered its probe: it follows no leader before
        #: (`_hear`)
        self._heard = False
        #: (probing, not heard yet) the latest term whose leader's heartbeat it refused, -1 when none
        self._beaten = -1
        #: (heard) the highest term its peers answered: it votes in no term up to it (`_may_vote`)
        self._top = -1
        #: (probing, catching up) per peer that answered its probe while voting (a member of ours: abstaining,
        #: or a 4.9.8 member, it does not say), where its log ended, (-1, -1) for none (`_may_vote`)
        self._ends: dict[str, tuple[int, int]] = {}
        #: keeps the abstention across a restart (its owner's file): the state, VOTING once it ends; a
        #: member that restarts half caught up holds a log but still lacks what it acknowledged
        self.keep_abstention: Callable[[str], None] = lambda state: None

    # ------------------------------------------------------------------ state

    @property
    def is_leader(self) -> bool:
        return self.m.role is _LEADER

    def lease_fresh(self, now: int) -> bool:
        """Whether this member leads on a lease at `now`: a round of heartbeats that a quorum acknowledged
        went out less than the election timeout (``maxHeartBeatLeak`` × ``heartBeatTimeIntervalMs``) ago,
        and it hands the leadership to nobody. Each member of that quorum heard from it after the round
        went out and, for its follower timeout since (no shorter), neither votes for another member nor
        moves its term for one (`_hears_leader`), nor stands: any majority electing another member
        meanwhile holds one of them, so no other member leads while the lease is fresh. Its own step-down
        counts the silence from the answers it last had, which come late on a loaded host or a slow
        link: up to a round after its peers stood for election."""
        return (
            self.m.role is Role.LEADER
            and self.m.transferee is None
            and now - self.lease_start < self.t.max_heart_beat_leak * self.t.heart_beat_time_interval_ms
        )

    def follower_timeout(self) -> int:
        """How long a follower waits for its leader's heartbeat before it stands: ``maxHeartBeatLeak``
        intervals, and at least two (DLedger's ``maintainAsFollower``): one heartbeat a little late must
        not make it stand. Never shorter than the leader's lease (`lease_fresh`)."""
        return max(2, self.t.max_heart_beat_leak) * self.t.heart_beat_time_interval_ms

    def others(self) -> list[str]:
        return [p for p in self.m.peers if p != self.m.self_id]

    def _base(self, req: _R, peer: str) -> _R:
        req.group = self.m.group
        req.local_id = self.m.self_id
        req.remote_id = peer
        return req

    def _role(self, term: int, role: Role) -> None:
        self._wire.clear()
        self._wire_everywhere = -1
        self._raw_run = (-1, -1, None)
        self.role_changes.append((term, role))
        self._check_take_leadership(term, role)

    def to_leader(self, term: int) -> None:
        if self.m.term != term:
            return
        self.m.role, self.m.leader_id = Role.LEADER, self.m.self_id
        self.m.live.clear()
        self.last_send_beat = -1
        self.last_success_beat = self._now
        self.lease_start = NO_LEASE  # (its voters' timers are not known reset: its first round starts it)
        self.pushes = {p: PeerPush() for p in self.others()}
        self._quorum_peers = []
        self._binary_changed()
        # (terms only grow along a log, and a member leads a term once: what it holds now is all earlier)
        self.term_first_index = self.log.last_index + 1
        log.info("[%s] leader of term %d", self.m.self_id, term)
        self._role(term, Role.LEADER)

    def to_candidate(self, term: int) -> None:
        if term < self.m.term:
            return
        was_leader = self.is_leader
        self.m.known_max_term = max(self.m.known_max_term, term)
        self.m.role, self.m.leader_id, self.m.transferee = Role.CANDIDATE, None, None
        self.beat_round = None
        if was_leader:
            self._led()
            self._fail_waiting(Code.TERM_CHANGED)
        self._role(term, Role.CANDIDATE)

    def to_follower(self, term: int, leader: str) -> None:
        was_leader = self.is_leader
        self.last_parse = ParseResult.WAIT_TO_REVOTE
        self.m.role, self.m.leader_id, self.m.transferee = Role.FOLLOWER, leader, None
        self.last_leader_beat = self._now
        self.vote_round = None
        if was_leader:
            self._led()
            self._fail_waiting(Code.TERM_CHANGED)
        self._role(term, Role.FOLLOWER)

    def _led(self) -> None:
        """(leaving the leadership) What each follower acknowledged in it, kept for its probes (`seen`): a
        follower that acknowledged nothing in it (down all along) took no part in the term, and counted as
        seen in it, it would abstain on its return as if restored from an older copy."""
        for peer, push in self.pushes.items():
            if push.water_mark >= 0:
                self._saw(peer, self.m.term, push.water_mark)

    def _fail_waiting(self, code: Code) -> None:
        failed = self.failed
        for waiter in self.waiting:
            failed.append((waiter, code))
        self.waiting.clear()
        self._waiting_ordered, self._last_tracked = True, -1

    def fail_waiting(self, code: Code) -> None:
        """Answer every waiting append `code` (its driver stops)."""
        self._fail_waiting(code)

    def outcomes(self) -> dict[int, Code]:
        """The appends answered since last drained, index -> code (the last of an index waited for twice),
        drained: for drivers that hand no ``done`` to :meth:`track`."""
        out: dict[int, Code] = {}
        for waiter, code in self.failed:
            out[waiter[0]] = code
        for waiter in self.answered:
            out[waiter[0]] = _SUCCESS
        self.answered, self.failed = [], []
        return out

    def _vote_interval(self) -> int:
        if self._taking_leadership():
            lo, hi = self.t.min_take_leadership_vote_interval_ms, self.t.max_take_leadership_vote_interval_ms
        else:
            lo, hi = self.t.min_vote_interval_ms, self.t.max_vote_interval_ms
        return self._now + lo + self.rng.randrange(max(1, hi - lo))

    def _taking_leadership(self) -> bool:
        """A transferee in the term it was handed (DLedger asks it of preferred members only: a transfer
        to another, ``broker ha transfer``'s, then waited a whole vote interval and gave its vote to the
        first to ask, the old leader standing again among them)."""
        return self.m.term_to_take_leadership == self.m.term

    # ------------------------------------------------------------------ the maintainer

    def tick(self, now: int) -> list[Out]:
        """What DLedger's state maintainer and entry dispatchers do at `now`: the requests to send."""
        probing = (
            self.abstaining == PROBING
            or self.abstaining == CHECKING
            or self._unheard()
            or self._ends_pending()
        )
        if probing and now >= self._next_probe:
            return self._probe(now) + self._tick(now)
        return self._tick(now)

    def _tick(self, now: int) -> list[Out]:
        self._now = now
        if self.take_leadership_wait is not None:
            req, deadline = self.take_leadership_wait
            if self.log.last_index >= req.take_leadership_ledger_index:
                self._take_leadership(req)
            elif now >= deadline:
                self.take_leadership_wait = None
                self.take_leadership = (req.term + 1, Code.TAKE_LEADERSHIP_FAILED)
        if self.m.role is _LEADER:
            out = self._maintain_leader(now)
            if self.m.role is _LEADER:
                out += self._push(now)
                self._expire_waiting(now)
            return out
        if self.m.role is _FOLLOWER:
            if now - self.last_leader_beat > self.follower_timeout():
                self._leave_silent_leader()
            return []
        return self._maintain_candidate(now)

    def _leave_silent_leader(self) -> None:
        """(following) Its follower timeout ran out: it stands, in its leader's term (DLedger's rule)."""
        m = self.m
        log.info(
            "[%s] no heartbeat from leader %s for %d ms", m.self_id, m.leader_id, self.follower_timeout()
        )
        self._left = (m.term, m.leader_id or "")
        self.to_candidate(m.term)

    def _maintain_leader(self, now: int) -> list[Out]:
        if self.beat_round is not None:
            if now >= self.beat_round.deadline:
                self._parse_beats(now)
            return []
        if now - self.last_send_beat <= self.t.heart_beat_time_interval_ms and self.last_send_beat != -1:
            return self._check_preferred(now)
        self.last_send_beat = now
        transferee = self.m.transferee
        deadline = now + self.t.heart_beat_time_interval_ms
        self._beat_seq += 1
        handover = transferee is not None
        self.beat_round = _BeatRound(self.m.term, deadline, sent=now, handover=handover, seq=self._beat_seq)
        out = []
        for peer in self.others():
            req = self._base(HeartBeatRequest(), peer)
            req.leader_id, req.term = self.m.self_id, self.m.term
            req.mqctl_lease, req.mqctl_transferee = True, transferee
            out.append(Out(peer, DLedgerRequestCode.HEART_BEAT, req, epoch=self._beat_seq))
        if not out:  # a group of one
            self._parse_beats(now)
        return out

    def _parse_beats(self, now: int) -> None:
        r = self.beat_round
        self.beat_round = None
        if r is None or r.term != self.m.term or not self.is_leader:
            return
        if r.max_term > r.term:
            # a member of a later term: DLedger steps down only without a quorum, which leaves that member
            # a candidate for ever once this leader's log is ahead of it (Raft steps down here, into that
            # term: standing again in its own, it is elected in it again by the votes it had)
            self.to_candidate(r.max_term)
            self.need_increase_term = True
        elif self.m.is_quorum(r.succeeded):
            self.last_success_beat = now
            if not r.handover:  # (its followers let the transferee's vote through: no lease from it)
                self.lease_start = max(self.lease_start, r.sent)
        elif self.m.is_quorum(r.succeeded + r.not_ready):
            self.last_send_beat = -1
        elif r.inconsistent_leader:
            self.to_candidate(r.term)
        elif now - self.last_success_beat > self.t.max_heart_beat_leak * self.t.heart_beat_time_interval_ms:
            log.warning("[%s] leader without a quorum of heartbeats: stepping down", self.m.self_id)
            self.to_candidate(r.term)

    def _maintain_candidate(self, now: int) -> list[Out]:
        if self.vote_round is not None:
            if not self.need_increase_term:
                if now >= self.vote_round.deadline:
                    self._parse_votes()
                return []
            # a later term is known (a vote or heartbeat of it came): this round's term is over, and waiting
            # out its deadline (DLedger's maintainer thread sits in it) only has the candidate of the later
            # term revote at once, again and again, each answered REJECT_TERM_NOT_READY meanwhile
            self.vote_round = None
        if now < self.next_vote_time and not self.need_increase_term:
            return []
        if self.last_parse is ParseResult.WAIT_TO_VOTE_NEXT or self.need_increase_term:
            try:
                self.m.next_term()
            except OSError as exc:
                # (a full disk) tried again after a vote interval, not at every tick: the term stays
                log.warning("[%s] cannot save a new term (stays %d): %s", self.m.self_id, self.m.term, exc)
                self.need_increase_term = False
                self.last_parse = ParseResult.WAIT_TO_VOTE_NEXT
                self.next_vote_time = self._vote_interval()
                return []
            self.last_parse = ParseResult.WAIT_TO_REVOTE
        if self.need_increase_term:
            self.next_vote_time = self._vote_interval()
            self.need_increase_term = False
            return []
        if self._holds_damage() or not self.can_lead():
            return []  # (it votes for others still, and follows whoever is elected)
        remembered = self._remembered
        if remembered is not None and now < remembered[1]:
            return []  # (as a follower that hears a leader: `remember`)
        if self.abstaining:
            return []  # (it follows whoever is elected)
        term = self.m.term
        self._vote_seq += 1
        deadline = now + 2000 + self.rng.randrange(self.t.max_vote_interval_ms)
        self.vote_round = _VoteRound(term, deadline, seq=self._vote_seq)
        out = []
        for peer in self.m.peers:
            req = self._base(VoteRequest(), peer)
            req.leader_id, req.term = self.m.self_id, term
            req.ledger_end_index, req.ledger_end_term = self.log.last_index, self.log.last_term
            if peer == self.m.self_id:
                self._count_vote(self.on_vote(req, self_vote=True))
            else:
                out.append(Out(peer, DLedgerRequestCode.VOTE, req, epoch=self._vote_seq))
        return out

    def _count_vote(self, resp: VoteResponse | None) -> None:
        r = self.vote_round
        if r is None:
            return
        r.answered += 1
        if resp is not None and resp.vote_result is not VoteResult.UNKNOWN:
            r.valid += 1
        result = resp.vote_result if resp is not None else VoteResult.UNKNOWN
        if result is VoteResult.ACCEPT:
            r.accepted += 1
        elif result is VoteResult.REJECT_ALREADY_HAS_LEADER:
            r.has_leader = True
        elif result in (VoteResult.REJECT_TERM_SMALL_THAN_LEDGER, VoteResult.REJECT_EXPIRED_VOTE_TERM):
            assert resp is not None
            r.max_term = max(r.max_term, resp.term)
        elif result in (VoteResult.REJECT_EXPIRED_LEDGER_TERM, VoteResult.REJECT_SMALL_LEDGER_END_INDEX):
            r.bigger_ledger += 1
        elif result is VoteResult.REJECT_TERM_NOT_READY:
            r.not_ready += 1
        q = self.m.is_quorum
        if r.has_leader or q(r.accepted) or q(r.accepted + r.not_ready) or r.answered == len(self.m.peers):
            self._parse_votes()

    def _parse_votes(self) -> None:
        r = self.vote_round
        self.vote_round = None
        if r is None or self.m.role is not Role.CANDIDATE or r.term != self.m.term:
            return
        q = self.m.is_quorum
        if r.max_term > r.term:
            result = ParseResult.WAIT_TO_VOTE_NEXT
            self.next_vote_time = self._vote_interval()
            self.to_candidate(r.max_term)
        elif r.has_leader:
            result = ParseResult.WAIT_TO_REVOTE
            beat_leak = self.t.heart_beat_time_interval_ms * self.t.max_heart_beat_leak
            if self._taking_leadership():
                # a follower that had not yet heard the leader's heartbeat naming this member refused it:
                # asked again after the short interval, by when it has
                beat_leak = 0
            self.next_vote_time = self._vote_interval() + beat_leak
        elif not q(r.valid):
            result = ParseResult.WAIT_TO_REVOTE
            self.next_vote_time = self._vote_interval()
        elif not q(r.valid - r.bigger_ledger):
            result = ParseResult.WAIT_TO_REVOTE
            self.next_vote_time = self._vote_interval() + self.t.max_vote_interval_ms
        elif q(r.accepted):
            result = ParseResult.PASSED
        elif q(r.accepted + r.not_ready):
            result = ParseResult.REVOTE_IMMEDIATELY
            self.next_vote_time = 0
        else:
            result = ParseResult.WAIT_TO_VOTE_NEXT
            self.next_vote_time = self._vote_interval()
        self.last_parse = result
        if result is ParseResult.PASSED:
            self.to_leader(r.term)

    # ------------------------------------------------------------------ elector requests

    def on_vote(self, req: VoteRequest, self_vote: bool = False) -> VoteResponse:
        """``DLedgerLeaderElector#handleVote``."""
        m = self.m

        def answer(result: VoteResult, term: int | None = None) -> VoteResponse:
            resp = VoteResponse(vote_result=result, term=m.term if term is None else term)
            resp.group, resp.local_id, resp.remote_id = req.group, req.local_id, req.remote_id
            resp.leader_id = req.leader_id
            return resp

        if req.leader_id not in m.peers:
            return answer(VoteResult.REJECT_UNKNOWN_LEADER)
        if not self_vote and req.leader_id == m.self_id:
            return answer(VoteResult.REJECT_UNEXPECTED_LEADER)
        if req.term < 0:
            # a probe: what DLedger answers it (below, before any vote is looked at), with what this member
            # last saw of the asker
            resp = self._answer_probe(req)
            resp.group, resp.local_id, resp.remote_id = req.group, req.local_id, req.remote_id
            resp.leader_id = req.leader_id
            return resp
        if not self_vote:
            self._saw(req.leader_id, req.term, -1)  # (a candidate of that term: it kept the term)
        if req.ledger_end_term < self.log.last_term:
            return answer(VoteResult.REJECT_EXPIRED_LEDGER_TERM)
        if req.ledger_end_term == self.log.last_term and req.ledger_end_index < self.log.last_index:
            return answer(VoteResult.REJECT_SMALL_LEDGER_END_INDEX)
        if req.term < m.term:
            return answer(VoteResult.REJECT_EXPIRED_VOTE_TERM)
        if req.term > m.term and self.abstaining == CHECKING:
            # (its term stays the one its store had until the check ends: a peer that saw it in a later
            # term then still tells it so; the candidate asks again a while later)
            return answer(VoteResult.REJECT_SMALL_LEDGER_END_INDEX)
        if not self_vote:
            refused = self._remembered_refusal(req)
            if refused is None:
                refused = self._hears_leader(req)
            if refused is not None:
                return answer(refused)
            left = self._left
            aside = self._stood_aside
            if (left is not None and req.leader_id == left[1]) or (
                aside is not None and req.leader_id == aside[1]
            ):
                # the left leader's own candidacy: it stepped down, its lease with it; standing aside from
                # it would refuse the heartbeats of its next leadership, won with this member's vote
                self._stood_aside = None
            elif (
                req.term == m.term
                and m.role is Role.CANDIDATE
                and left is not None
                and left[0] == m.term
                and self._leader_leases  # (a 4.9.8 leader's follower votes as DLedger's does)
            ):
                # answered for its leader's silence: a late heartbeat of that leader renews no lease now
                self._stood_aside = (m.term, left[1], self._now + self.follower_timeout())
        if req.term == m.term:
            if m.voted_for is not None and m.voted_for != req.leader_id:
                if m.leader_id is not None:
                    return answer(VoteResult.REJECT_ALREADY_HAS_LEADER)
                return answer(VoteResult.REJECT_ALREADY_VOTED)
        else:
            self.to_candidate(req.term)
            self.need_increase_term = True
            return answer(VoteResult.REJECT_TERM_NOT_READY)
        if req.term < self.log.last_term:
            return answer(VoteResult.REJECT_TERM_SMALL_THAN_LEDGER, self.log.last_term)
        if (
            not self_vote
            and self._taking_leadership()
            and req.ledger_end_term == self.log.last_term
            and self.log.last_index >= req.ledger_end_index
        ):
            return answer(VoteResult.REJECT_TAKING_LEADERSHIP)
        if self.abstaining and not self_vote and not self._may_vote(req):
            # answered as a member whose log is ahead: a candidate (4.9.8's or ours) asks again in the same
            # term a while later. (ALREADY_VOTED has it stand in a later term every round, outrunning the
            # member that could win: a group whose emptied member waits for the old leader livelocked.)
            log.info(
                "[%s] abstains: no vote for %s in term %d (%s)",
                m.self_id,
                req.leader_id,
                req.term,
                self.abstaining,
            )
            return answer(VoteResult.REJECT_SMALL_LEDGER_END_INDEX)
        m.set_vote(req.leader_id)
        return answer(VoteResult.ACCEPT)

    def _hears_leader(self, req: VoteRequest) -> VoteResult | None:
        """Why a candidate (not this member, in its term or a later one) is refused while this member hears a
        leader of ours, None when it is not (Raft's thesis, 4.2.3 and 6.4.1): its leader, and a follower
        that heard it within its follower timeout, neither vote for another member nor move their term for
        one, which is what keeps the leader's lease (`lease_fresh`). The answer is one a 4.9.8 candidate
        handles: REJECT_ALREADY_HAS_LEADER (it asks again after a vote interval and an election timeout),
        or, in the last half heartbeat interval before the follower's own timeout (it missed every heartbeat
        it may miss, and the last is overdue), REJECT_ALREADY_VOTED (the candidate moves to the next term
        after a vote interval, where this member, timed out by then, may vote for it): it then stands aside,
        acknowledging no heartbeat of that leader in its term for a follower timeout, so a late one renews
        no lease. (A whole interval before it, as a follower waiting two intervals is before each heartbeat
        comes, a candidate cut off the leader alone had a healthy follower stand aside.) Let through: the
        leader's own candidacy (it stepped down, its lease with it), and the transferee its heartbeats name
        (it lends nothing while it hands over)."""
        m = self.m
        if m.role is _LEADER:
            if req.term > m.term and req.leader_id != m.transferee:
                return VoteResult.REJECT_ALREADY_HAS_LEADER
            return None
        if m.role is not _FOLLOWER:
            return None
        silence, timeout = self._now - self.last_leader_beat, self.follower_timeout()
        if silence > timeout:
            self._leave_silent_leader()  # (as its tick would: followers tick seldom)
            return None
        if not self._leader_leases or req.leader_id == m.leader_id or req.leader_id == self._handover:
            return None
        if silence > timeout - self.t.heart_beat_time_interval_ms // 2:
            self._stood_aside = (m.term, m.leader_id or "", self._now + timeout)
            return VoteResult.REJECT_ALREADY_VOTED
        return VoteResult.REJECT_ALREADY_HAS_LEADER

    def _beat_heard(self, req: HeartBeatRequest) -> None:
        """(following) Its leader's heartbeat, acknowledged: whether it leases, and whom it hands over to.
        Acknowledging a leader of ours, it promises to refuse other candidates for its follower timeout: a
        promise its owner keeps on disk first when what is kept there does not cover it (`unkept`), with
        half a timeout to spare, so that a restart keeps it too. Within a quarter timeout of falling short,
        its owner starts the next write at once and nobody waits for it (`ahead`): the answers wait only
        for a new leader's first promise, or for a disk stalled longer than what is left to spare."""
        self._leader_leases = req.mqctl_lease is True
        self._handover = req.mqctl_transferee
        # (a leader heard since its restart: the one it promised to, or one elected once that promise ran out)
        self._remembered = None
        if self._leader_leases and self.keeps_promises:
            leader, timeout = req.leader_id or "", self.follower_timeout()
            until = self._now + timeout
            kept_leader, kept_until = self._kept
            if kept_leader != leader or kept_until < until:
                self.unkept = (leader, until + timeout // 2)
            elif kept_until < until + timeout // 4:
                self.ahead = (leader, until + timeout // 2)

    def promise_kept(self, leader: str, until: int) -> None:
        """Its owner kept on disk that it refuses every candidate but `leader` until `until` (`unkept`)."""
        self._kept = (leader, until)

    def remember(self, leader: str, until: int, now: int) -> None:
        """(at start) What it kept before its restart (`unkept`): until `until` it refuses every candidate
        but `leader` and stands for no election, as if it still heard that leader (whose lease its last
        acknowledgements may still hold up), unless it hears a leader first. A deadline further ahead than
        these timings could have kept is cut to that (its timings changed meanwhile); a leader that is
        none of its peers keeps nothing (its peers changed, or the file is another group's)."""
        timeout = self.follower_timeout()
        until = min(until, now + timeout + timeout // 2)
        if until <= now:
            return
        if leader not in self.m.peers or leader == self.m.self_id:
            log.info(
                "[%s] restarted with a promise to %r, none of its peers: keeps none", self.m.self_id, leader
            )
            return
        self._remembered = self._kept = (leader, until)
        log.info(
            "[%s] restarted within its promise to leader %s: refuses other candidates for %d ms, or until it "
            "hears a leader",
            self.m.self_id,
            leader or "(none named)",
            until - now,
        )

    def _remembered_refusal(self, req: VoteRequest) -> VoteResult | None:
        """(restarted) Why a candidate is refused for the promise kept before its restart (`remember`), None
        when it is not: its leader's own candidacy passes (it stepped down, its lease with it). As a
        follower hearing that leader answers, but ALREADY_VOTED once the deadline is nearer than a candidate
        refused ALREADY_HAS_LEADER waits (a vote interval and an election timeout): it asks again in the
        next term a vote interval later, rather than long after the deadline (its leader may be dead)."""
        remembered = self._remembered
        if remembered is None:
            return None
        leader, until = remembered
        if self._now >= until:
            self._remembered = None
            return None
        if req.leader_id == leader:
            return None
        log.info(
            "[%s] refuses %s in term %d: it restarted within its promise to leader %s (%d ms left)",
            self.m.self_id,
            req.leader_id,
            req.term,
            leader or "(none named)",
            until - self._now,
        )
        t = self.t
        if (
            until - self._now
            <= t.min_vote_interval_ms + t.max_heart_beat_leak * t.heart_beat_time_interval_ms
        ):
            return VoteResult.REJECT_ALREADY_VOTED
        return VoteResult.REJECT_ALREADY_HAS_LEADER

    def on_heartbeat(self, req: HeartBeatRequest, now: int) -> HeartBeatResponse:
        """``DLedgerLeaderElector#handleHeartBeat``."""
        self._now = now
        m = self.m

        def answer(code: Code = Code.SUCCESS, term: int | None = None) -> HeartBeatResponse:
            return HeartBeatResponse(code=int(code), term=-1 if term is None else term)

        if req.leader_id not in m.peers:
            return answer(Code.UNKNOWN_MEMBER, m.term)
        if req.leader_id == m.self_id:
            return answer(Code.UNEXPECTED_MEMBER, m.term)
        if req.term < m.term:
            return answer(Code.EXPIRED_TERM, m.term)
        self._saw(req.leader_id, req.term, -1)
        if req.term > m.term and self.abstaining == CHECKING:
            return answer(Code.TERM_NOT_READY)  # (its term stays its store's until the check ends)
        if self._unheard() and self.abstaining == PROBING:
            self._beaten = max(self._beaten, req.term)
        if req.term == m.term and self._unheard():
            # (a code a leader counts neither as an acknowledgement nor as a term not ready: DLedger's and
            # ours step down without a quorum, rather than beat again at once; the leader is up, so asked
            # again at once: a new group's leader may be gone before the next round of probes)
            self._next_probe = min(self._next_probe, now)
            return answer(Code.ILLEGAL_MEMBER_STATE)
        if req.term == m.term:
            aside = self._stood_aside
            if aside is not None and aside[0] == req.term and aside[1] == req.leader_id and now < aside[2]:
                # it answered a candidate for this leader's silence: no lease renewed by it now, and its
                # timeout runs on (a code counted neither as an acknowledgement nor as a term not ready)
                return answer(Code.ILLEGAL_MEMBER_STATE)
            if m.leader_id is None:
                self.to_follower(req.term, req.leader_id)
                self._beat_heard(req)
                if self.abstaining == PROBING:
                    self._to_catch_up(f"leader {req.leader_id} of term {req.term}")
                return answer()
            if req.leader_id == m.leader_id:
                self.last_leader_beat = now
                self._beat_heard(req)
                return answer()
            log.error(
                "[%s] term %d has leader %s, but %s beats", m.self_id, m.term, m.leader_id, req.leader_id
            )
            return answer(Code.INCONSISTENT_LEADER)
        self.to_candidate(req.term)
        self.need_increase_term = True
        return answer(Code.TERM_NOT_READY)

    # ------------------------------------------------------------------ abstention

    def abstain(self, state: str, why: str) -> None:
        """Raft's safety assumes stable storage: a member that lost its log, or its vote file (term and
        vote), may have acknowledged entries, or voted in a term, it no longer knows of. Emptied, its vote
        would elect a member lacking what it and the old leader committed. From `state` on (PROBING: it
        asks its peers whether the group has a history; CATCHING_UP: it has one) it grants no vote and
        stands for no election until it holds, committed, an entry of its leader's term. A group of one
        has nobody to ask and nothing to lose to another member: it votes."""
        if len(self.m.peers) <= 1 or state == VOTING:
            return
        self.abstaining, self.abstain_why = state, why
        if state != CHECKING:  # (checking again at the next start costs a round trip)
            self.keep_abstention(state)
        self._probed.clear()
        self._asked.clear()
        self._unanswered.clear()
        self._probing_since = self._catch_up_term = -1
        self._heard = False
        self._beaten = self._top = -1
        self._ends.clear()
        # (INFO: a new member's first start probes too; a loss found is a WARNING)
        log.info("[%s] abstains from elections (%s): %s", self.m.self_id, state, why)

    def abstention(self) -> str:
        """Why it abstains, in words ("" when it votes): ``broker ha status`` shows it."""
        if self.abstaining == PROBING:
            return f"{self.abstain_why}: asking its peers whether the group has a history"
        if self.abstaining == CATCHING_UP and not self._heard:
            return (
                f"{self.abstain_why}: until {self._needed()} of its peers answered ({len(self._probed)} so "
                "far) and it holds, committed, an entry of its leader's term"
            )
        if self.abstaining == CATCHING_UP and self._floor() is not None:
            floor_term, floor_index = self._floor() or (-1, -1)
            floor = f"a log at least as up to date as entry {floor_index} of term {floor_term}"
            if floor_index < 0:
                floor = "any log"
            return (
                f"{self.abstain_why}: until it holds, committed, an entry of its leader's term (meanwhile it "
                f"votes, in a term past {self._top}, for {floor})"
            )
        if self.abstaining == CATCHING_UP:
            return f"{self.abstain_why}: until it holds, committed, an entry of its leader's term"
        if self.abstaining == CHECKING:
            return f"{self.abstain_why}: asking its peers whether they saw it later than its store says"
        return ""

    def _probe(self, now: int) -> list[Out]:
        if self._probing_since < 0:
            self._probing_since = now
        self._next_probe = now + self.t.max_vote_interval_ms
        if self.abstaining == CHECKING:
            return self._check(now)
        if self._probed and self.abstaining == PROBING:
            self._probe_settles(now)  # (its own log kept, it waits out an election timeout for a leader)
        if self._unheard():
            return [self._probe_request(peer) for peer in self.others() if peer not in self._probed]
        if self._ends_pending():  # (asked again until they vote: `_may_vote`)
            self._next_probe = now + self.t.min_vote_interval_ms
            return [self._probe_request(peer) for peer in self.others() if peer not in self._ends]
        return []

    def _probe_request(self, peer: str) -> Out:
        req = self._base(VoteRequest(), peer)
        req.leader_id, req.term, req.ledger_end_index, req.ledger_end_term = self.m.self_id, -1, -1, -1
        return Out(peer, DLedgerRequestCode.VOTE, req, epoch=PROBE_EPOCH)

    def _answer_probe(self, req: VoteRequest) -> VoteResponse:
        """What ``handleVote`` answers a probe (its log checks, then its term's: nothing changes here), and
        what this member last saw of the asker (`seen_of`)."""
        log_ = self.log
        if req.ledger_end_term < log_.last_term:
            result = VoteResult.REJECT_EXPIRED_LEDGER_TERM
        elif req.ledger_end_term == log_.last_term and req.ledger_end_index < log_.last_index:
            result = VoteResult.REJECT_SMALL_LEDGER_END_INDEX
        else:
            result = VoteResult.REJECT_EXPIRED_VOTE_TERM
        resp = VoteResponse(vote_result=result, term=self.m.term)
        seen_term, seen_index = self.seen_of(req.leader_id or "")
        if seen_term >= 0:
            resp.mqctl_seen_term, resp.mqctl_seen_index = seen_term, seen_index
        if self.abstaining == VOTING:
            resp.mqctl_ledger_end_term, resp.mqctl_ledger_end_index = log_.last_term, log_.last_index
        return resp

    def _saw(self, peer: str, term: int, index: int) -> None:
        if (term, index) > self.seen.get(peer, (-1, -1)):
            self.seen[peer] = (term, index)

    def seen_of(self, peer: str) -> tuple[int, int]:
        """The highest (term, index) `peer` took part in with this member as far as it knows (see `seen`);
        as its leader, what it acknowledged of this term's log counts: (-1, -1) when nothing."""
        seen = self.seen.get(peer, (-1, -1))
        push = self.pushes.get(peer) if self.is_leader else None
        if push is not None and (self.m.term, push.water_mark) > seen:
            return self.m.term, push.water_mark
        return seen

    def _check(self, now: int) -> list[Out]:
        """(checking) Each peer asked once; those that did not answer within an election timeout are taken
        for unreachable (a peer that knows nothing later cannot tell it either)."""
        if now - self._probing_since >= self.t.max_heart_beat_leak * self.t.heart_beat_time_interval_ms:
            self._unanswered.update(self.others())
            self._check_settles()
            return []
        out = [self._probe_request(peer) for peer in self.others() if peer not in self._asked]
        self._asked.update(o.peer for o in out)
        return out

    def _check_settles(self) -> None:
        """(checking) Every peer answered or could not be asked, none saw it later than its store: it votes."""
        others = self.others()
        if self.abstaining != CHECKING or len(self._unanswered.union(self._probed)) < len(others):
            return
        self._stop_abstaining(
            f"{len(self._probed)} of {len(others)} peers answered, none saw it later than its store says"
        )

    def _behind_seen(self, peer: str, resp: VoteResponse) -> str:
        """What a probe's answer says this member's store lost ("" when nothing): a term it took part in,
        its own now lower (terms and votes are kept before they count), or, in its own term, an entry it
        acknowledged to that term's leader, its log now shorter (entries are held before acknowledged)."""
        term, index = resp.mqctl_seen_term, resp.mqctl_seen_index
        if term is None:
            return ""
        if term > self.m.term:
            return f"{peer} saw it in term {term}, its store says term {self.m.term}"
        if term == self.m.term and index is not None and index > self.log.last_index:
            return (
                f"{peer}, leader of term {term}, had its acknowledgement of entry {index}, its log ends "
                f"at {self.log.last_index}"
            )
        return ""

    def _restored(self, why: str, term: int) -> None:
        """Its store is older than its peers saw it (restored from an older copy, or its writes lost): it may
        have voted in any term up to `term`, and acknowledged entries it no longer holds. It grants no vote
        in that term (its vote there is its own) and abstains as an emptied member does."""
        if term > self.m.term or self.m.voted_for is None:
            self._take_term(term)
        self.abstain_why = f"its store is older than its peers saw it ({why})"
        if self.m.role is _FOLLOWER:
            self.to_candidate(self.m.term)  # (it follows no leader before it heard: `_hear`)
        self._to_catch_up("restored from an older copy, or its writes were lost")

    def _take_term(self, term: int) -> bool:
        """Moves to `term` (if later) with its own vote, kept before it counts: it may have voted there before
        its store lost it, so it grants that term to nobody. False when it could not be saved."""
        m = self.m
        floor = max(term, m.term)
        try:
            m.persist(floor, m.self_id)
        except OSError as exc:  # (a full disk) it abstains all the same
            log.error("[%s] cannot save term %d: %s", m.self_id, floor, exc)
            return False
        if floor > m.term:
            m.known_max_term = max(m.known_max_term, floor)
            m.term = floor
            self.to_candidate(floor)
        m.voted_for = m.self_id
        if floor >= m.known_max_term:
            # (a heartbeat of that term, refused before it heard or come before the probe's answer, asked
            # it to move there: it is there now, and the maintainer moving one term further would depose
            # that term's leader)
            self.need_increase_term = False
            self.last_parse = ParseResult.WAIT_TO_REVOTE
        return True

    def _probe_answered(self, peer: str, resp: VoteResponse) -> None:
        """A peer's answer to a probe: a peer that saw this member later than its store says, or (an empty
        member) a peer holding a log, tells it it lost what the group holds (it catches up with a leader)."""
        holds = resp.vote_result is VoteResult.REJECT_EXPIRED_LEDGER_TERM
        if self.abstaining == CHECKING or holds or resp.vote_result is VoteResult.REJECT_EXPIRED_VOTE_TERM:
            self._probed[peer] = (holds, resp.term)
        end_term, end_index = resp.mqctl_ledger_end_term, resp.mqctl_ledger_end_index
        if end_term is not None and end_index is not None:
            self._ends[peer] = max((end_term, end_index), self._ends.get(peer, (-1, -1)))
        lost = self._behind_seen(peer, resp)
        if lost:
            self._restored(lost, resp.mqctl_seen_term or 0)
        elif self.abstaining == CHECKING:
            self._check_settles()
            return
        elif self.abstaining == PROBING and holds and self.log.last_index < 0:
            self._to_catch_up(f"{peer} holds a log (its term {resp.term})")
        self._hear()
        if self.abstaining == PROBING:
            self._probe_settles(self._now)

    def _needed(self) -> int:
        """How many peers answer its probe before it knows every term a leader was elected in and every
        entry it acknowledged: every other one (docs/dledger.md §a-deposed-leader). A majority's answers
        are not enough past three members: a commit or an election counting this member's lost
        acknowledgement or vote can complete after they answered, with a peer that answered before it."""
        return len(self.m.peers) - 1

    def _unheard(self) -> bool:
        """(its store lost, or behind what its peers saw) It has not heard from enough peers yet (`_hear`)."""
        return (self.abstaining == PROBING or self.abstaining == CATCHING_UP) and not self._heard

    def _hear(self) -> None:
        """Once every other peer answered its probe, every leader elected so far, and any candidate holding
        this member's forgotten vote, answered in that term or a later one: it takes the highest term they
        answered, so that a leader deposed meanwhile (its later term forgotten with the store) is refused
        with it and steps down. Before, it follows no leader: its acknowledgements, with a deposed leader's,
        would be a majority, and that leader would commit its own entries where a later one committed
        others."""
        if self._heard or len(self._probed) < self._needed():
            return
        top = max(term for _, term in self._probed.values())
        # (its vote there kept as its own: a candidate of that term is refused ALREADY_VOTED and stands again
        # in the next, where it may have this member's vote). Not saved (a full disk): not heard, so it
        # follows no leader of an earlier term; the next answer tries again
        behind = top > self.m.term or (top == self.m.term and self.m.voted_for is None)
        if behind and not self._take_term(top):
            return
        self._heard = True
        self._top = top
        # (a peer that answered while it still probed, a new group's member, votes by now: asked again at
        # once, before a leader it may be is gone)
        self._next_probe = self._now
        log.info(
            "[%s] %d peers answered: term %d, it follows a leader of it or later",
            self.m.self_id,
            len(self._probed),
            self.m.term,
        )

    def _floor(self) -> tuple[int, int] | None:
        """The most up-to-date log end that every other peer answered while they voted, None before all did;
        none but empty logs answered (a new group's), any log."""
        if len(self._ends) >= self._needed():
            return max(self._ends.values())
        if len(self._probed) >= self._needed() and not any(holds for holds, _ in self._probed.values()):
            return (-1, -1)
        return None

    def _ends_pending(self) -> bool:
        """(catching up, heard) Fewer peers than it needs answered while they voted (`_may_vote`)."""
        return self.abstaining == CATCHING_UP and self._heard and self._floor() is None

    def _may_vote(self, req: VoteRequest) -> bool:
        """(abstaining) Whether it may still vote for this candidate: once it heard, in a term past every
        term its peers answered (it may have voted in those before its loss), for a log no less up to date
        than any that every other peer answered while they voted. An entry it acknowledged before its loss
        was on its leader when that leader answered (a peer abstaining then may have lost it too: it is
        asked again until it votes); a log at least as up to date as one holding a committed entry holds it
        (Raft's election rule). So a new
        group whose late member found its leader's log, or an emptied member whose leader died before it
        caught up, elects again without that leader."""
        floor = self._floor()
        return (
            self.abstaining == CATCHING_UP
            and self._heard
            and floor is not None
            and req.term > self._top
            and (req.ledger_end_term, req.ledger_end_index) >= floor
        )

    def _probe_settles(self, now: int) -> None:
        """Whether the answers so far let it vote: every other peer's (`_needed`): an entry committed on a
        majority is held by one of them besides this member, and a vote this member forgot, by its
        candidate, whose term is then among theirs. None holding a log (or, its
        own log kept, no leader heard for an election timeout: it would catch up with one): it goes past
        every term it may have voted in."""
        if len(self._probed) < self._needed():
            return
        if self._beaten >= 0:
            # a leader beat meanwhile (elected before its log reached this member's probe): going past its
            # term would depose it; this member catches up with it as with a group that holds a log
            self._to_catch_up(f"a leader of term {self._beaten} beats")
            return
        if self.log.last_index >= 0:
            timeout = self.t.max_heart_beat_leak * self.t.heart_beat_time_interval_ms
            if now - self._probing_since < timeout:
                return
        past = max(max(term for _, term in self._probed.values()), self.log.last_term, self.m.term) + 1
        try:
            self.m.persist(past, None)
        except OSError as exc:
            log.warning("[%s] cannot save term %d: %s", self.m.self_id, past, exc)
            return
        self.m.term, self.m.voted_for = past, None
        self.to_candidate(past)
        held = "none holding a log" if self.log.last_index < 0 else "no leader heard"
        self._stop_abstaining(f"{len(self._probed)} peers answered, {held}: term {past}, past any they knew")

    def _to_catch_up(self, why: str) -> None:
        if self.abstaining != CATCHING_UP:
            self.abstaining = CATCHING_UP
            self.keep_abstention(CATCHING_UP)
            log.warning(
                "[%s] abstains from elections until it holds, committed, an entry of its leader's term: %s "
                "(%s)",
                self.m.self_id,
                why,
                self.abstain_why,
            )
        self._check_caught_up()

    def _learn_target(self, commit_index: int) -> None:
        """(abstaining) A push of its leader: the first of this term says how far to catch up."""
        if self.abstaining == PROBING:
            self._to_catch_up(f"leader {self.m.leader_id} of term {self.m.term} pushes")
        if self._catch_up_term != self.m.term:
            self._catch_up_to, self._catch_up_term = commit_index, self.m.term

    def _check_caught_up(self) -> None:
        """(catching up) It follows a leader and holds, committed, the leader's log up to the commit index
        the leader's first push to it said, and an entry of the leader's term: every entry the leader had
        committed by then is in its log (this member's lost acknowledgements, which came before it lost
        them, among them), and every entry of earlier terms committed at all (leader completeness)."""
        m, committed = self.m, self.log.committed_index
        if (
            self.abstaining != CATCHING_UP
            or m.role is not _FOLLOWER
            or m.leader_id is None
            or self._catch_up_term != m.term
            or committed < max(self._catch_up_to, 0)
        ):
            return
        try:
            if self.log.term_at(committed) != m.term:
                return
            # its vote in this term is the leader's (harmless: that leader is elected); kept, so a restart
            # grants this term to no other member
            m.set_vote(m.leader_id)
        except (DLedgerError, OSError) as exc:
            log.warning("[%s] caught up, but cannot say so yet: %s", m.self_id, exc)
            return
        self._stop_abstaining(
            f"caught up with leader {m.leader_id} of term {m.term} to entry {committed} (its commit index "
            f"was {self._catch_up_to})"
        )

    def _stop_abstaining(self, why: str) -> None:
        self.abstaining, self.abstain_why = VOTING, ""
        self._probed.clear()
        self.keep_abstention(VOTING)
        log.info("[%s] votes: %s", self.m.self_id, why)

    # ------------------------------------------------------------------ leadership transfer

    def transfer_request(self, transferee: str) -> tuple[Code, Out | None]:
        """``handleLeadershipTransfer`` on the leader: the take-leadership request for `transferee`."""
        m = self.m
        if transferee not in m.peers or transferee == m.self_id:
            return Code.UNKNOWN_MEMBER, None
        if not self.is_leader:
            return Code.NOT_LEADER, None
        if m.transferee is not None:
            return Code.LEADER_TRANSFERRING, None
        behind = self.log.last_index - self.pushes[transferee].water_mark
        if behind >= self.t.max_leadership_transfer_wait_index:
            return Code.FALL_BEHIND_TOO_MUCH, None
        m.transferee = transferee
        # its followers let the transferee's vote through once a heartbeat names it: one goes out at the next
        # tick (the open round dropped, its answers counted for none, rather than waited out), and no lease
        # is taken from the rounds before, should the transfer be abandoned: only from a round naming nobody
        self.lease_start, self.last_send_beat, self.beat_round = NO_LEASE, -1, None
        req = self._base(LeadershipTransferRequest(), transferee)
        req.leader_id, req.term = m.self_id, m.term
        req.take_leadership_ledger_index = self.log.last_index
        req.transfer_id, req.transferee_id = m.self_id, transferee
        return Code.SUCCESS, Out(transferee, DLedgerRequestCode.LEADERSHIP_TRANSFER, req)

    def transfer_answered(self, term: int, resp: LeadershipTransferResponse | None) -> None:
        if (
            resp is None
            or resp.code != Code.SUCCESS
            or (self.m.term == term and self.m.transferee is not None)
        ):
            self.m.transferee = None

    def on_take_leadership(self, req: LeadershipTransferRequest) -> Code | None:
        """``handleTakeLeadership`` on the transferee: None while pending (see `take_leadership`)."""
        m = self.m
        if req.transfer_id != m.leader_id:
            return Code.INCONSISTENT_LEADER
        if m.term != req.term:
            return Code.INCONSISTENT_TERM
        if self._holds_damage() or not self.can_lead() or self.abstaining:
            return Code.TAKE_LEADERSHIP_FAILED  # (it would leave its term, deposing the leader, and not run)
        if self.log.last_index < req.take_leadership_ledger_index:
            # DLedgerServer waits (leadershipTransferWaitTimeout) for the entries still on their way
            self.take_leadership_wait = (req, self._now + self.t.leadership_transfer_wait_timeout)
            self.take_leadership = (req.term + 1, None)
            return None
        return self._take_leadership(req)

    def _take_leadership(self, req: LeadershipTransferRequest) -> Code | None:
        self.take_leadership_wait = None
        target = req.term + 1
        m = self.m
        if m.term != req.term or m.role is not _FOLLOWER or m.leader_id != req.transfer_id:
            # a request parked for its entries outlived the term it was made in (the member follows or
            # leads a later one): raising the term now would lead a term no one voted in, or leave one
            self.take_leadership = (target, Code.INCONSISTENT_TERM)
            return None
        self.m.term_to_take_leadership = target
        self.take_leadership = (target, None)
        self.to_candidate(target)
        try:
            # in that term at once, not at the next tick: the leader's heartbeat, come before it, found a
            # candidate of the leader's own term, which follows it again (the transfer failed so)
            self.m.next_term()
        except OSError as exc:
            log.warning("[%s] cannot save term %d to take the leadership in: %s", self.m.self_id, target, exc)
            self.take_leadership = (target, Code.TAKE_LEADERSHIP_FAILED)
            self.m.term_to_take_leadership = -1
            return None
        self.last_parse = ParseResult.WAIT_TO_REVOTE
        self.next_vote_time = self._vote_interval()
        return None

    def _check_take_leadership(self, term: int, role: Role) -> None:
        pending = self.take_leadership
        if pending is None or pending[1] is not None or self.take_leadership_wait is not None:
            return
        target = pending[0]
        if term > target:
            code = Code.EXPIRED_TERM
        elif term == target:
            if role is Role.LEADER:
                code = Code.SUCCESS
            elif role is Role.FOLLOWER:
                code = Code.TAKE_LEADERSHIP_FAILED
            else:
                return
        else:
            code = Code.TAKE_LEADERSHIP_FAILED if role is Role.FOLLOWER else Code.INTERNAL_ERROR
        self.take_leadership = (target, code)
        self.m.term_to_take_leadership = -1

    def _check_preferred(self, now: int) -> list[Out]:
        """``DLedgerServer#checkPreferredLeader``: hand leadership to the preferred member once it is caught up."""
        if self.preferred is None or now < self.next_preferred_check or self.m.transferee is not None:
            return []
        self.next_preferred_check = now + PREFERRED_CHECK_MS
        wanted = [p for p in self.preferred.split(";") if p]
        if self.m.self_id in wanted:
            return []
        best: tuple[int, str] | None = None
        for peer in wanted:
            if peer not in self.pushes or not self.m.live.get(peer, False):
                continue
            behind = self.log.last_index - self.pushes[peer].water_mark
            if behind < self.t.max_leadership_transfer_wait_index and (best is None or behind < best[0]):
                best = (behind, peer)
        if best is None:
            return []
        _, out = self.transfer_request(best[1])
        return [out] if out is not None else []

    # ------------------------------------------------------------------ the leader's pushes

    def append(self, body: bytes, now: int) -> tuple[Code, Entry | None]:
        """``handleAppend`` on the leader: the entry, answered in `answered` once a quorum has it."""
        self._now = now
        if not self.is_leader:
            return Code.NOT_LEADER, None
        if self.m.transferee is not None:
            return Code.LEADER_TRANSFERRING, None
        entry = self.log.append_leader(body, self.m.term)
        self.track(entry.index, now)
        return Code.SUCCESS, entry

    def track(self, index: int, now: int, done: Done = None) -> None:
        """Answer entry `index` (appended to the log by its owner, the CommitLog) once a quorum has it, or
        WAIT_QUORUM_ACK_TIMEOUT once this wait's time is up, or TERM_CHANGED when this leadership ends:
        ``(index, deadline, done)`` goes to `answered` or `failed`. Each wait is its own (an index waited
        for twice is answered twice, each by its own deadline)."""
        self._now = now
        waiter = (index, now + self.t.max_wait_ack_time_ms, done)
        waiting = self.waiting
        if index >= self._last_tracked:
            self._last_tracked = index
            waiting.append(waiter)
        else:  # (after a later index: placed by index, so its deadline may come before those ahead of it)
            at = len(waiting)
            while at > 0 and waiting[at - 1][0] > index:
                at -= 1
            waiting.insert(at, waiter)
            self._waiting_ordered = False
        # a quorum may hold it already only in a group of one, or when it was appended before (a caller
        # that waits again, or an entry a tick pushed before its put was waited for): else the followers'
        # answers commit it
        held = index <= self.log.committed_index or not self.pushes
        for p in self.pushes.values():
            held = held or p.water_mark >= index
        if held:
            self._advance_commit()

    def hold_push(self, seen: int) -> bool:
        """(leader) Whether the entries appended since the log's last index was ``seen`` may wait for the
        sends the event loop's next poll brings (a poll that does not sleep: the push is queued to run after
        it) before they are pushed, so that one push carries both: only while that poll may bring more (this
        pass appended some), every follower taking appends still has a push in flight (each would read this
        one only after answering that one, which is what the quorum waits for anyway), and none of them has
        `PUSH_WINDOW` entries not yet pushed to it. A lone send finds a follower idle and is pushed at once;
        a follower that answers ends the wait at the next pass; one that never answers has its pushes sent
        again from what it acknowledged, as without the wait (a window is pushed whatever they hold)."""
        last = self.log.last_index
        if last <= seen or not self.is_leader:
            return False
        taking = False
        spare = self.spare_followers(self._now)
        for peer, p in self.pushes.items():
            if p.state is not _APPEND or peer in spare:
                continue
            if not p.inflight or last - p.write_index + 1 >= PUSH_WINDOW:
                return False
            taking = True
        return taking

    def _get(self, index: int) -> Entry | None:
        try:
            return self.log.get(index) if index >= 0 else None
        except DLedgerError:
            return None

    def _own_entry(self, index: int) -> Entry | None:
        """(leader) Entry `index` to push or compare, or None. One read back from disk failing its bodyCrc
        (damaged after the append) ends this leadership: every follower refuses it, so the group would
        commit nothing past it while heartbeats kept this member the leader."""
        try:
            return self.log.get(index) if index >= 0 else None
        except DamagedEntryError as exc:
            self.damaged = exc.index
            self.give_up_leadership(
                f"{exc.reason} (damaged in this member's log since it was written); it asks for no votes "
                "while it holds that entry (a new leader cuts and sets it aside, or replaces it, unless it "
                "is committed here)"
            )
            return None
        except DLedgerError:
            return None

    def give_up_leadership(self, why: str) -> None:
        """(leader) Step down to candidate in the same term: this member cannot lead (``why``, at ERROR)."""
        if self.is_leader:
            log.error("[%s] giving up the leadership of term %d: %s", self.m.self_id, self.m.term, why)
            self.to_candidate(self.m.term)

    def _holds_damage(self) -> bool:
        """Whether this log still holds the entry it found damaged (cut, or pushed again whole: no more)."""
        if self.damaged == -1:
            return False
        if self.log.begin_index <= self.damaged <= self.log.last_index:  # (not cut, nor cleaned up)
            try:
                self.log.get(self.damaged)
            except DLedgerError:
                return True
        log.info("[%s] entry %d is no longer damaged here: it may lead again", self.m.self_id, self.damaged)
        self.damaged = -1
        return False

    def _expire_waiting(self, now: int) -> None:
        """Answer WAIT_QUORUM_ACK_TIMEOUT the waits whose time is up at `now` (each round): from the front
        while the deadlines rise with the indexes, else every wait looked at."""
        waiting = self.waiting
        if not waiting:
            return
        failed = self.failed
        if self._waiting_ordered:
            while waiting and waiting[0][1] <= now:
                failed.append((waiting.popleft(), _ACK_TIMEOUT))
        else:
            kept: deque[Waiter] = deque()
            for waiter in waiting:
                if waiter[1] <= now:
                    failed.append((waiter, _ACK_TIMEOUT))
                else:
                    kept.append(waiter)
            self.waiting = waiting = kept
        if not waiting:
            self._waiting_ordered, self._last_tracked = True, -1

    def _commit_waiting(self, committed: int) -> None:
        """Answer SUCCESS the waits up to `committed`: the run at the front of `waiting` (in index order)."""
        waiting = self.waiting
        if not waiting or waiting[0][0] > committed:
            return
        answered = self.answered
        while waiting and waiting[0][0] <= committed:
            answered.append(waiting.popleft())
        if not waiting:
            self._waiting_ordered, self._last_tracked = True, -1

    def _marks(self) -> list[int]:
        """Every member's last index held as this leader's log, highest first."""
        marks = [self.log.last_index]
        for p in self.pushes.values():
            marks.append(p.water_mark)
        marks.sort(reverse=True)
        return marks

    def _advance_commit(self) -> None:
        marks = self._marks()
        quorum_index = marks[len(marks) // 2]
        wire = self._wire
        everywhere = marks[-1]
        if wire and everywhere > self._wire_everywhere:
            # every follower holds these now: dropped by index (``next(iter(...))`` would step over every
            # entry deleted from the front since the dict last resized, at each answer)
            for index in range(
                max(self._wire_everywhere + 1, everywhere - WIRE_CACHE_ENTRIES), everywhere + 1
            ):
                wire.pop(index, None)
            self._wire_everywhere = everywhere
        # Raft's rule: a quorum holding an entry of an earlier term does not commit it (figure 8)
        if quorum_index > self.log.committed_index and quorum_index >= self.term_first_index:
            self.log.set_committed(quorum_index)
        # (the deadlines are the round's: the answer's read does not expire what it did not commit)
        self._commit_waiting(self.log.committed_index)

    def _push_request(self, peer: str, entry: Entry | None, kind: PushType) -> Out:
        req = self._base(PushEntryRequest(), peer)
        req.leader_id, req.term = self.m.self_id, self.m.term
        req.entry = wire_entry(entry) if entry is not None else None
        req.type, req.commit_index = kind, self.log.committed_index
        return Out(peer, DLedgerRequestCode.PUSH, req)

    def spare_followers(self, now: int) -> list[str]:
        """(leader) The followers in APPEND not pushed in this pass though entries wait for them: a quorum
        needs only ``len(peers) // 2`` followers, so those chosen to make it (`_quorum_peers`: the ones
        holding the most when chosen, kept while they keep up) are pushed every pass, the others only once
        `SPARE_PUSH_ENTRIES` wait for them or their last push is `SPARE_PUSH_MS` old. None while a chosen
        one's oldest push has waited `QUORUM_STALL_MS` (the others then make the quorum; the choice is made
        again), while leadership is handed over (the transferee must catch up), or before a follower's first
        push of this leadership. Raft's rules are untouched: any quorum's answers commit, whoever gave them."""
        pushes = self.pushes
        need = len(self.m.peers) // 2
        if self.m.transferee is not None:
            return []
        # (once or twice a pass: counted and checked in place, no list of the appending made)
        appending = 0
        for p in pushes.values():
            if p.state is _APPEND:
                appending += 1
        if appending <= need:
            return []
        chosen = self._quorum_peers
        kept = len(chosen) == need
        for peer in chosen:
            held = pushes.get(peer)
            kept = kept and held is not None and held.state is _APPEND
        if not kept:
            chosen = [peer for peer in chosen if peer in pushes and pushes[peer].state is _APPEND]
            while len(chosen) < need:
                best = ""
                for peer, p in pushes.items():
                    if (
                        p.state is _APPEND
                        and peer not in chosen
                        and (not best or p.water_mark > pushes[best].water_mark)
                    ):
                        best = peer
                chosen.append(best)
            self._quorum_peers = chosen
        for peer in chosen:
            inflight = pushes[peer].inflight
            if inflight and now - min(inflight.values()) >= QUORUM_STALL_MS:
                self._quorum_peers = []
                return []
        last = self.log.last_index
        spare: list[str] = []
        for peer, p in pushes.items():
            if (
                p.state is _APPEND
                and p.last_push >= 0
                and now - p.last_push < SPARE_PUSH_MS
                and last - p.write_index + 1 < SPARE_PUSH_ENTRIES
                and peer not in chosen
            ):
                spare.append(peer)
        return spare

    def _push(self, now: int) -> list[Out]:
        out: list[Out] = []
        spare = self.spare_followers(now)
        for peer, p in self.pushes.items():
            if p.state is _APPEND:
                if peer in spare:
                    continue
                made = self._push_append(peer, p, now)
            elif not p.awaiting and now >= p.not_before and self.log.last_index >= 0:
                made = self._push_compare(peer, p, now)
            else:
                continue
            if not self.is_leader:
                return []  # it found its own log damaged
            for o in made:
                o.epoch = p.epoch
            out += made
        return out

    def _push_append(self, peer: str, p: PeerPush, now: int) -> list[Out]:
        out = []
        if p.inflight and min(p.inflight.values()) + self.t.max_push_time_out_ms <= now:
            p.inflight.clear()  # push again from what the follower acknowledged (it skips repeats)
            p.write_index = p.water_mark + 1
        while p.write_index <= self.log.last_index and len(p.inflight) < MAX_PENDING_PUSHES:
            if p.binary:
                raw = self._raw_entries(p.write_index)
                if raw is not None:
                    out.append(self._raw_push(peer, p.write_index, raw[0], raw[1]))
                    p.inflight[p.write_index] = now
                    p.write_index += raw[0]
                    p.last_push = now
                    continue
            # what is ready goes in one push (``batchEntry``, which DLedger's EntryHandler takes too)
            batch: list[tuple[DLedgerEntry, bytes]] = []
            size = 0
            while p.write_index + len(batch) <= self.log.last_index and len(batch) < MAX_BATCH_ENTRIES:
                pushed = self._pushed_entry(p.write_index + len(batch))
                if pushed is None or (batch and size + pushed[0].size > MAX_BATCH_BYTES):
                    break
                batch.append(pushed)
                size += pushed[0].size
            if not batch:
                break
            out.append(self._push_batch(peer, batch))
            p.inflight[p.write_index] = now
            p.write_index += len(batch)
            p.last_push = now
        if not out and not p.inflight and now - p.last_push >= COMMIT_PUSH_INTERVAL_MS:
            out.append(self._push_request(peer, None, PushType.COMMIT))
            p.last_push = now
        return out

    def _raw_entries(self, first: int) -> tuple[int, bytes] | None:
        """A binary push's run from ``first`` (``RaftLog.raw_entries``), read once for the followers pushed
        from the same index while the log has not grown (a leader's log changes only by growing while it
        leads; the run is dropped at each role change)."""
        last = self.log.last_index
        held = self._raw_run
        if held[0] == first and held[1] == last:
            return held[2]
        raw = self.log.raw_entries(first, MAX_BATCH_ENTRIES, MAX_BATCH_BYTES)
        self._raw_run = (first, last, raw)
        return raw

    def _pushed_entry(self, index: int) -> tuple[DLedgerEntry, bytes] | None:
        """Entry `index` as a push carries it and its JSON, read and encoded once for all followers: each
        follower is pushed the same entries, and the leader's log does not change under them while it leads
        (cleared at each role change)."""
        pushed = self._wire.get(index)
        if pushed is None:
            entry = self._own_entry(index)
            if entry is None:
                return None
            wire = wire_entry(entry)
            pushed = self._wire[index] = (wire, entry_json(wire))
            if len(self._wire) > WIRE_CACHE_ENTRIES:
                del self._wire[next(iter(self._wire))]
        return pushed

    def _raw_push(self, peer: str, first: int, count: int, raw: bytes) -> Out:
        """A binary push of entries ``first``... (``raw``: as the data file holds them)."""
        out = self._push_request(peer, None, PushType.APPEND)
        out.raw, out.first, out.count = raw, first, count
        return out

    def speaks_binary(self, peer: str) -> None:
        """(leader) `peer` said it reads binary pushes, on the connection they go on: its next APPEND pushes
        are binary (unless it refused one's body in this leadership)."""
        p = self.pushes.get(peer)
        if p is not None and not p.binary and not p.binary_refused and self.is_leader:
            p.binary = True
            self._binary_changed()

    def binary_lost(self, peer: str) -> None:
        """(leader) The connection `peer` said it on is gone: JSON until it says so again."""
        p = self.pushes.get(peer)
        if p is not None and p.binary:
            p.binary = False
            self._binary_changed()

    def _binary_changed(self) -> None:
        """(leader) The log keeps what it appends in memory only while a follower takes JSON pushes, which
        carry entries decoded (a binary push is a slice of the data file: keeping them costs every send)."""
        pushes = self.pushes.values()
        self.log.keep_recent = not pushes or not all(p.binary for p in pushes)

    def as_json(self, out: Out) -> Out:
        """A binary push made JSON (the connection it was made for is gone): its entries decoded."""
        raw = out.raw
        if raw is None:
            return out
        batch: list[tuple[DLedgerEntry, bytes]] = []
        off = 0
        while off < len(raw):
            wire = wire_entry(decode_entry(raw, off))
            batch.append((wire, entry_json(wire)))
            off += wire.size
        made = self._push_batch(out.peer, batch)
        made.request.term, made.epoch = out.request.term, out.epoch
        assert isinstance(made.request, PushEntryRequest) and isinstance(out.request, PushEntryRequest)
        made.request.commit_index = out.request.commit_index
        made.body = made.request.encode()
        return made

    def _push_batch(self, peer: str, batch: list[tuple[DLedgerEntry, bytes]]) -> Out:
        out = self._push_request(peer, None, PushType.APPEND)
        req = out.request
        assert isinstance(req, PushEntryRequest)
        if len(batch) == 1:
            req.entry = batch[0][0]
            out.body = req.encode_with([], batch[0][1])
            return out
        req.batch_entry = [wire for wire, _ in batch]
        req.total_size = sum(wire.size for wire in req.batch_entry)
        out.body = req.encode_with([json for _, json in batch])
        return out

    def _push_compare(self, peer: str, p: PeerPush, now: int) -> list[Out]:
        if p.state is PushState.TRUNCATE:
            entry = self._own_entry(p.compare_index)
            kind = PushType.TRUNCATE
        else:
            if p.compare_index == -1 or not (self.log.begin_index <= p.compare_index <= self.log.last_index):
                p.compare_index = self.log.last_index
            entry = self._own_entry(p.compare_index)
            kind = PushType.COMPARE
        if entry is None:
            return []
        p.awaiting = True
        return [self._push_request(peer, entry, kind)]

    def _to_append(self, p: PeerPush, index: int) -> None:
        p.epoch += 1
        p.state, p.compare_index = PushState.APPEND, -1
        p.water_mark = max(p.water_mark, index)
        p.write_index = index + 1
        p.inflight.clear()
        self._advance_commit()

    def _to_compare(self, p: PeerPush, now: int, delay: int = 0) -> None:
        p.epoch += 1
        p.state, p.compare_index, p.awaiting = PushState.COMPARE, -1, False
        p.matched = p.differs = -1
        p.compares = 0
        p.inflight.clear()
        p.not_before = now + delay

    def _on_push_response(
        self,
        peer: str,
        req: PushEntryRequest,
        resp: PushEntryResponse | None,
        epoch: int,
        raw: bool = False,
        first: int = -1,
        count: int = 0,
    ) -> None:
        """``EntryDispatcher``'s handling of a push's answer; `first`/`count`: a binary push's entries (a
        JSON push's are its bean's)."""
        p = self.pushes.get(peer)
        if not self.is_leader or p is None or req.term != self.m.term or epoch != p.epoch:
            return
        now = self._now
        if resp is not None:
            self.m.live[peer] = resp.code != _NETWORK_ERROR
        if req.type is PushType.APPEND:
            if p.state is not _APPEND or resp is None:
                return  # a timed-out push is pushed again from tick
            if not raw:
                first, count = req.first_entry_index, req.count
            self._append_answered(
                peer, p, req.term, first, count, raw, resp.code, resp.term, resp.index, resp.count
            )
            return
        if req.type is PushType.COMMIT:
            if resp is not None and resp.code == Code.SUCCESS and p.state is _APPEND and not p.inflight:
                self._check_follower_end(peer, p, resp.end_index, now)
            return
        if p.state is _APPEND:
            return
        p.awaiting = False
        if resp is None or resp.code not in (Code.SUCCESS, Code.INCONSISTENT_STATE):
            self._to_compare(p, now, COMPARE_RETRY_MS)
            return
        index = req.entry.index if req.entry is not None else -1
        if req.type is PushType.TRUNCATE:
            if resp.code == Code.SUCCESS:
                self._to_append(p, index)
            else:
                self._to_compare(p, now, COMPARE_RETRY_MS)
            return
        p.compares += 1
        self._compared(peer, p, index, resp)

    def raw_push_answered(self, out: Out, code: int, term: int, index: int, count: int, now: int) -> None:
        """:meth:`on_response` of a binary push (``out.raw``) answered in the binary layout, from the
        answer's numbers (``index`` below 0: none, as :func:`decode_push_answer` reads it), no bean made:
        the leader's every answer of a follower."""
        self._now = now
        peer = out.peer
        p = self.pushes.get(peer)
        req = out.request
        if not self.is_leader or p is None or req.term != self.m.term or out.epoch != p.epoch:
            return
        self.m.live[peer] = code != _NETWORK_ERROR
        if p.state is _APPEND:  # (a binary push is an APPEND)
            at = index if index >= 0 else None  # (as decode_push_answer reads it)
            self._append_answered(peer, p, req.term, out.first, out.count, True, code, term, at, count)

    def _append_answered(
        self,
        peer: str,
        p: PeerPush,
        push_term: int,
        first: int,
        pushed: int,
        raw: bool,
        code: int,
        term: int,
        index: int | None,
        count: int,
    ) -> None:
        """An APPEND push of ``pushed`` entries from ``first`` answered (``code``, ``term``, ``index``,
        ``count``), the follower's push state in APPEND."""
        if code == _OK and index is not None:
            if index != first or term != push_term:
                # not this push's answer (DLedger's follower echoes its term and first index): its
                # entries are pushed again when it times out, no water mark moved by what it claims
                log.warning("[%s] push answer of %s does not match its push: ignored", self.m.self_id, peer)
                return
            p.inflight.pop(first, None)
            last = first + max(min(count, pushed), 1) - 1  # (no further than the push carried)
            if last > p.water_mark:
                p.water_mark = last
                self._advance_commit()
        elif code == _INCONSISTENT_STATE:
            self._to_compare(p, self._now)
        elif code != _REPEATED_PUSH:
            if code == _UNEXPECTED_ARGUMENT and raw:
                # a body refused: from its data file unchecked; JSON reads check what leaves the memory
                p.binary, p.binary_refused = False, True
                self._binary_changed()
            self._to_compare(p, self._now, COMPARE_RETRY_MS)

    def _check_follower_end(self, peer: str, p: PeerPush, end: int, now: int) -> None:
        """A COMMIT push's answer (the leader's only push while it takes no sends; DLedger sets endIndex in
        every answer): a follower whose log ends before what it acknowledged lost its store (emptied, or
        restored from an older copy). The
        appends from its water mark would wait for the next send, and an emptied member abstains until
        it holds the leader's log: compared now, and its water mark is what it holds."""
        if end >= p.water_mark:
            return
        log.warning(
            "[%s] %s holds entries up to %d, though it acknowledged up to %d: it lost its store; comparing",
            self.m.self_id,
            peer,
            end,
            p.water_mark,
        )
        p.water_mark = max(end, -1)
        self._to_compare(p, now)

    def _compared(self, peer: str, p: PeerPush, index: int, resp: PushEntryResponse) -> None:
        """``EntryDispatcher#doCompare``'s answer, but the next index to compare is chosen by bisection (the
        wire is DLedger's: the leader may compare any index). Ends in APPEND (the follower's log is a prefix
        of the leader's) or TRUNCATE at the last index both hold alike."""
        begin, last = self.log.begin_index, self.log.last_index
        if resp.code == Code.SUCCESS:
            if index == resp.end_index:
                self._to_append(p, index)
                return
            p.matched = max(p.matched, index)
        elif resp.end_index < begin or resp.begin_index > last or index < resp.begin_index:
            self._to_truncate(p, begin)  # nothing in common to compare (DLedger's cases, as there)
            return
        else:
            p.differs = index if p.differs == -1 else min(p.differs, index)
        # the first entry the follower does not hold as the leader does lies in (lower, upper]
        upper = min(last + 1, resp.end_index + 1, *([p.differs] if p.differs != -1 else []))
        lower = max(p.matched, begin - 1, resp.begin_index - 1)
        if upper - lower <= 1:
            at = lower if lower == p.matched and lower >= begin else begin
            log.info(
                "[%s] %s holds entries %d-%d; where the logs part found in %d compares: truncating after "
                "entry %d (this log: %d-%d)",
                self.m.self_id,
                peer,
                resp.begin_index,
                resp.end_index,
                p.compares,
                at,
                begin,
                last,
            )
            self._to_truncate(p, at)
        elif upper == resp.end_index + 1:
            p.compare_index = resp.end_index  # a follower only behind holds its end as the leader does
        elif index == resp.end_index == upper and p.matched == -1:
            p.compare_index = index - 1  # only its last entry differs, most often (torn, or never replicated)
        else:
            p.compare_index = (lower + upper) // 2

    def _to_truncate(self, p: PeerPush, index: int) -> None:
        p.epoch += 1
        p.state, p.compare_index = PushState.TRUNCATE, index

    # ------------------------------------------------------------------ the follower's entry handler

    def on_push(self, req: PushEntryRequest, now: int) -> PushEntryResponse:
        """``EntryHandler#handlePush``: entries arrive in order (one connection, handled as they come)."""
        self._now = now
        m = self.m
        refused = self._push_refusal(req)
        if refused is not None:
            return self._push_answer(req, refused)
        if self.abstaining:
            self._learn_target(req.commit_index)
        if req.type is PushType.COMMIT:
            self._follow_commit(req.commit_index)
            return self._push_answer(req, Code.SUCCESS)
        if req.type is PushType.APPEND and req.batch_entry:
            return self._push_answer(req, self._append_batch(req))
        entry = req.entry
        if entry is None:
            return self._push_answer(req, Code.UNEXPECTED_ARGUMENT)
        local = self._get(entry.index)
        if req.type is PushType.COMPARE:
            return self._push_answer(
                req, Code.SUCCESS if same_entry(entry, local) else Code.INCONSISTENT_STATE
            )
        if req.type is PushType.TRUNCATE:
            keep = entry.index if same_entry(entry, local) else entry.index - 1
            if keep < self.log.committed_index:
                log.error(
                    "[%s] leader %s asks to cut committed entries after %d (committed %d): refused",
                    m.self_id,
                    req.leader_id,
                    keep,
                    self.log.committed_index,
                )
                return self._push_answer(req, Code.INCONSISTENT_STATE)
            if keep < self.log.last_index:
                log.error(
                    "[%s] setting aside entries %d-%d: leader %s of term %d does not hold them",
                    m.self_id,
                    keep + 1,
                    self.log.last_index,
                    req.leader_id,
                    req.term,
                )
                try:
                    self.log.truncate_after(keep)
                except (DLedgerError, OSError) as exc:
                    log.error("[%s] cannot cut after entry %d: %s", m.self_id, keep, exc)
                    return self._push_answer(req, Code.DISK_ERROR)
            if keep < entry.index and (code := self._append_follower(entry, Code.DISK_ERROR)) != Code.SUCCESS:
                return self._push_answer(req, code)
            self._follow_commit(req.commit_index)
            return self._push_answer(req, Code.SUCCESS)
        # APPEND
        if entry.index == self.log.last_index + 1:
            if (code := self._append_follower(entry, Code.INCONSISTENT_STATE)) != Code.SUCCESS:
                return self._push_answer(req, code)
            self._follow_commit(req.commit_index)
            return self._push_answer(req, Code.SUCCESS)
        if entry.index <= self.log.last_index and same_entry(entry, local):
            return self._push_answer(req, Code.SUCCESS)  # a repeat (our answer was lost)
        return self._push_answer(req, Code.INCONSISTENT_STATE)

    def _push_refusal(self, req: PushEntryRequest) -> Code | None:
        """Why a push is not this member's to take (``EntryHandler#handlePush``'s checks), or None."""
        return self._refusal(req.group, req.leader_id, req.remote_id, req.term)

    def _refusal(
        self, group: str | None, leader_id: str | None, remote_id: str | None, term: int
    ) -> Code | None:
        """:meth:`_push_refusal` from a push's fields as they are (a binary push has no bean)."""
        m = self.m
        if remote_id != m.self_id:
            return Code.UNKNOWN_MEMBER
        if group != m.group:
            return Code.UNKNOWN_GROUP
        if m.role is not _FOLLOWER:
            return Code.NOT_FOLLOWER
        if term != m.term:
            return Code.INCONSISTENT_TERM
        if leader_id != m.leader_id:
            return Code.INCONSISTENT_LEADER
        return None

    def on_raw_push(
        self, req: PushEntryRequest, first: int, count: int, raw: bytes, now: int
    ) -> PushEntryResponse:
        """A binary push (APPEND of entries ``first``... as the leader's data file holds them): checked and
        appended as a batch push is (repeats skipped, the rest continuing the log, bodies against their
        ``bodyCrc``), in one pass over the bytes and one copy into the data file."""
        code = self.take_raw_push(
            req.group, req.leader_id, req.remote_id, req.term, req.commit_index, first, count, raw, now
        )
        resp = PushEntryResponse(code=code, term=req.term, group=req.group, index=first, count=count)
        resp.begin_index, resp.end_index = self.log.begin_index, self.log.last_index
        return resp

    def take_raw_push(
        self,
        group: str | None,
        leader_id: str | None,
        remote_id: str | None,
        term: int,
        commit_index: int,
        first: int,
        count: int,
        raw: bytes,
        now: int,
    ) -> int:
        """:meth:`on_raw_push` from the push's fields as they are, no bean either way: the answer's code
        (its other fields are the push's ``term``, ``first`` and ``count`` and this log's extent)."""
        self._now = now
        m = self.m
        refused = self._refusal(group, leader_id, remote_id, term)
        if refused is not None:
            return int(refused)
        if self.abstaining:
            self._learn_target(commit_index)
        if first > self.log.last_index + 1:
            # a gap, as a batch push's: a push queued on a connection that stalled, arriving after the new
            # connection's (the leader compares and pushes again); the protocol at work, not a fault here
            _OUT_OF_ORDER.warning(
                "[%s] a push of entries %d-%d does not continue this log (last %d): refused, the leader "
                "compares again",
                m.self_id,
                first,
                first + count - 1,
                self.log.last_index,
            )
            return int(Code.INCONSISTENT_STATE)
        try:
            shown = self.log.append_raw(raw)
            if shown[0] != first or shown[1] != first + count - 1:
                # the fields claim entries the body does not show: nothing committed on their word
                raise DLedgerError(
                    DLedgerCode.UNEXPECTED_ARGUMENT,
                    f"the body holds entries {shown[0]}-{shown[1]}, its fields say {count} from {first}",
                )
        except (DLedgerError, OSError) as exc:
            log.error("[%s] cannot append entries %d-%d: %s", m.self_id, first, first + count - 1, exc)
            if isinstance(exc, DLedgerError) and exc.code is DLedgerCode.UNEXPECTED_ARGUMENT:
                return int(Code.UNEXPECTED_ARGUMENT)  # a body failing its bodyCrc: pushed again after a pause
            return int(Code.INCONSISTENT_STATE)
        # (only what the leader just showed this log holds: past the run it may hold another's tail)
        self._follow_commit(commit_index if commit_index < shown[1] else shown[1])
        return _OK

    def _append_batch(self, req: PushEntryRequest) -> Code:
        """A batch push: entries already held (a repeat) are skipped, the rest must continue the log (appended
        together: the log writes them in one go)."""
        last = self.log.last_index
        fresh: list[Entry] = []
        gap = False
        for wire in req.batch_entry:
            if wire.index <= last:
                if not same_entry(wire, self._get(wire.index)):
                    return Code.INCONSISTENT_STATE
            elif wire.index != last + 1 + len(fresh):
                gap = True  # (what continues the log before it is appended still)
                break
            else:
                fresh.append(log_entry(wire))
        if fresh:
            try:
                self.log.append_followers(fresh)
            except (DLedgerError, OSError) as exc:  # a full or failing disk: the leader compares again later
                log.error(
                    "[%s] cannot append entries %d-%d: %s",
                    self.m.self_id,
                    fresh[0].index,
                    fresh[-1].index,
                    exc,
                )
                if isinstance(exc, DLedgerError) and exc.code is DLedgerCode.UNEXPECTED_ARGUMENT:
                    return Code.UNEXPECTED_ARGUMENT  # a body failing its bodyCrc: pushed again after a pause
                return Code.INCONSISTENT_STATE
        if gap:
            return Code.INCONSISTENT_STATE
        # (only what the leader just showed this log holds: past the batch it may hold another's tail)
        self._follow_commit(min(req.commit_index, req.batch_entry[-1].index))
        return Code.SUCCESS

    def _append_follower(self, wire: DLedgerEntry, failed: Code) -> Code:
        """SUCCESS, or ``failed`` (a full or failing disk: the leader compares again later); a body that
        does not match its ``bodyCrc`` is UNEXPECTED_ARGUMENT: nothing appended, the leader pushes it
        again after a pause."""
        try:
            self.log.append_follower(log_entry(wire))
        except (DLedgerError, OSError) as exc:
            log.error("[%s] cannot append entry %d: %s", self.m.self_id, wire.index, exc)
            if isinstance(exc, DLedgerError) and exc.code is DLedgerCode.UNEXPECTED_ARGUMENT:
                return Code.UNEXPECTED_ARGUMENT
            return failed
        return Code.SUCCESS

    def _follow_commit(self, commit_index: int) -> None:
        if commit_index > self.log.committed_index:
            self.log.set_committed(min(commit_index, self.log.last_index))
        if self.abstaining:
            self._check_caught_up()

    def _push_answer(self, req: PushEntryRequest, code: Code) -> PushEntryResponse:
        resp = PushEntryResponse(code=int(code), term=req.term, group=req.group)
        if req.type is not PushType.COMMIT:
            resp.index, resp.count = req.first_entry_index, req.count
        resp.begin_index = self.log.begin_index
        resp.end_index = self.log.last_index
        return resp

    # ------------------------------------------------------------------ answers to our requests

    def on_response(self, out: Out, resp: RequestOrResponse | None, now: int) -> None:
        """The answer (None: none in time, or the peer unreachable) to a request `tick` asked to send."""
        self._now = now
        if out.code is DLedgerRequestCode.VOTE:
            assert resp is None or isinstance(resp, VoteResponse)
            if out.epoch == PROBE_EPOCH:
                if self.abstaining == CHECKING or self._unheard() or self._ends_pending():
                    if resp is not None:
                        self._probe_answered(out.peer, resp)
                    elif self.abstaining == CHECKING:
                        self._unanswered.add(out.peer)
                        self._check_settles()
            elif self.vote_round is not None and out.epoch == self.vote_round.seq:
                if resp is not None and resp.vote_result is VoteResult.ACCEPT:
                    self._saw(out.peer, self.vote_round.term, -1)
                self._count_vote(resp)
        elif out.code is DLedgerRequestCode.HEART_BEAT:
            self._count_beat(out.peer, resp, out.epoch)
        elif out.code is DLedgerRequestCode.PUSH:
            assert isinstance(out.request, PushEntryRequest)
            assert resp is None or isinstance(resp, PushEntryResponse)
            self._on_push_response(
                out.peer, out.request, resp, out.epoch, out.raw is not None, out.first, out.count
            )
        elif out.code is DLedgerRequestCode.LEADERSHIP_TRANSFER:
            assert resp is None or isinstance(resp, LeadershipTransferResponse)
            self.transfer_answered(out.request.term, resp)

    def _count_beat(self, peer: str, resp: RequestOrResponse | None, epoch: int) -> None:
        r = self.beat_round
        if r is not None and epoch != r.seq:
            r = None
        if r is None:
            if (
                resp is not None
                and resp.code == Code.EXPIRED_TERM
                and resp.term > self.m.term
                and self.is_leader
            ):
                self.to_candidate(resp.term)  # came after the round closed on a quorum
                self.need_increase_term = True
            return
        r.answered += 1
        code = resp.code if resp is not None else Code.NETWORK_ERROR
        self.m.live[peer] = code != Code.NETWORK_ERROR
        if code == Code.SUCCESS:
            r.succeeded += 1
            self._saw(peer, r.term, -1)
        elif code == Code.EXPIRED_TERM:
            assert resp is not None
            r.max_term = max(r.max_term, resp.term)
        elif code == Code.INCONSISTENT_LEADER:
            r.inconsistent_leader = True
        elif code == Code.TERM_NOT_READY:
            r.not_ready += 1
        q = self.m.is_quorum
        if q(r.succeeded) or q(r.succeeded + r.not_ready) or r.answered == len(self.m.peers):
            self._parse_beats(self._now)
