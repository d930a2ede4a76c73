"""The DLedger machines on a simulated clock and network: deterministic runs over many seeds with lost and
late messages, partitions and crashes (a restarted node keeps its log, term and vote, as on disk).

Safety is checked throughout: at most one leader per term, a committed entry never changes or goes, every
acknowledged append is in the log of every later leader. Liveness once the faults stop: a leader, and
appends acknowledged again.
"""

from __future__ import annotations

import dataclasses
import heapq
import logging
import math
import random
from dataclasses import dataclass, field
from typing import Any

import pytest

from daemon.dledger.machines import (
    CATCHING_UP,
    CHECKING,
    NO_LEASE,
    PROBE_EPOCH,
    PROBING,
    QUORUM_STALL_MS,
    SPARE_PUSH_ENTRIES,
    SPARE_PUSH_MS,
    VOTING,
    MemberState,
    Node,
    Out,
    Role,
    Timings,
    keep_wait_ms,
)
from daemon.dledger.protocol import (
    DLedgerRequestCode,
    DLedgerResponseCode,
    HeartBeatRequest,
    LeadershipTransferRequest,
    LeadershipTransferResponse,
    PushEntryRequest,
    PushEntryResponse,
    PushType,
    RequestOrResponse,
    VoteRequest,
    VoteResponse,
    VoteResult,
)
from store import dledger as dl
from store.dledger import MemoryRaftLog

PEERS = {f"n{i}": f"127.0.0.1:{40911 + i}" for i in range(3)}
STEP = 10


@dataclass
class Disk:
    log: MemoryRaftLog = field(default_factory=MemoryRaftLog)
    term: int = 0
    vote: str | None = None
    #: whether the vote file was ever written (a new disk has none)
    voted: bool = False
    #: the abstention the member kept (its `abstain` file)
    abstain: str = VOTING
    #: (leader, until) it kept before acknowledging that leader's heartbeats (its `heard` file)
    heard: tuple[str, int] | None = None

    def copy(self) -> Disk:
        """The same store, apart (entries are never changed in place; compiled, they do not deepcopy)."""
        log = MemoryRaftLog()
        log._entries, log._committed = list(self.log._entries), self.log._committed
        return dataclasses.replace(self, log=log)


class Cluster:
    def __init__(
        self,
        seed: int,
        peers: dict[str, str] = PEERS,
        loss: float = 0.05,
        term_entries: bool = True,
        binary: bool = False,
        timings: Timings | None = None,
        careful: bool = False,
        refuse: bool = False,
        lease_check: bool = False,
        keeps: bool = False,
        keep_wait: int | None = None,
    ) -> None:
        self.rng = random.Random(seed)
        #: members keep their promises on disk as the server does (`Node.unkept`, `Node.ahead`): a
        #: heartbeat's answer goes out once the write is done, or after `keep_wait` ms all the same (the
        #: server's `keep_wait_ms` by default), and a member restarted remembers what it kept (`Node.remember`)
        self.keeps = keeps
        self.keep_wait = keep_wait_ms(timings or Timings()) if keep_wait is None else keep_wait
        #: per member, when its writer is done with what it was given (a stalled disk: set it ahead)
        self.writes: dict[str, int] = {}
        #: every step, whether two members lead on a fresh lease at once (`overlaps`: when, and who)
        self.lease_check = lease_check
        self.overlaps: list[tuple[int, list[str]]] = []
        self.timings = timings or Timings()
        #: a cut link refuses connections (answered at once, as a peer's closed port) rather than stalls
        self.refuse = refuse
        #: every member says it reads binary pushes (as mqctl's members do in their answers)
        self.binary = binary
        #: an elected leader appends an entry of its term at once, as the broker its term record
        self.term_entries = term_entries
        #: members abstain as the server has them: a store without its vote file or log, or an abstention
        #: kept, at start
        self.careful = careful
        self.peers = peers
        self.loss = loss
        self.disks = {p: Disk() for p in peers}
        self.nodes: dict[str, Node | None] = {}
        self.now = 0
        self.queue: list[tuple[int, int, str, Any]] = []
        self.seq = 0
        self.cut: set[frozenset[str]] = set()
        #: links cut one way: (a, b) loses a's requests to b (b's own requests to a, and their answers, pass)
        self.one_way: set[tuple[str, str]] = set()
        self.link: dict[tuple[str, str], int] = {}
        #: extra delay, ms, of what goes one way over a link (a slow link, a loaded host)
        self.slow: dict[tuple[str, str], int] = {}
        self.checked: dict[str, int] = {}
        self.leaders: dict[int, str] = {}
        self.committed: dict[int, tuple[int, bytes | None]] = {}
        self.acked: list[tuple[int, bytes]] = []
        self.pending: dict[tuple[str, int], bytes] = {}
        #: take-leadership requests not answered yet, by transferee: (the leader, its request)
        self.transfers: dict[str, tuple[str, Out]] = {}
        for p in peers:
            self.start(p)

    def start(self, p: str) -> None:
        disk = self.disks[p]

        def persist(term: int, vote: str | None) -> None:
            disk.term, disk.vote, disk.voted = term, vote, True

        def keep(state: str) -> None:
            disk.abstain = state

        m = MemberState("g", p, dict(self.peers), persist, term=disk.term, voted_for=disk.vote)
        node = self.nodes[p] = Node(m, disk.log, self.timings, random.Random(self.rng.random()))
        node._now = self.now
        if self.keeps:
            node.keeps_promises = True
            if disk.heard is not None:
                node.remember(*disk.heard, self.now)
        if self.careful:
            node.keep_abstention = keep
            if disk.abstain == CATCHING_UP:
                node.abstain(CATCHING_UP, "restarted before it caught up")
            elif disk.log.last_index < 0 or not disk.voted or disk.abstain:
                node.abstain(PROBING, "started without its store")
            else:
                node.abstain(CHECKING, "restarted on its store")

    def wipe(self, p: str) -> None:
        """The member's store lost (a disk replaced): it restarts empty, its log, term and vote forgotten."""
        self.crash(p)
        self.disks[p] = Disk()
        self.checked.pop(p, None)  # (its committed entries are checked again as it commits them anew)
        self.start(p)

    def backup(self, p: str) -> Disk:
        """A copy of the member's whole store as it is now."""
        return self.disks[p].copy()

    def restore(self, p: str, backup: Disk) -> None:
        """The member's whole store put back from an older copy (a VM snapshot, a disk image): its log,
        term, vote and abstention as they were then, consistent, and it restarts on them."""
        self.crash(p)
        self.disks[p] = backup.copy()
        self.checked.pop(p, None)
        self.start(p)

    def crash(self, p: str) -> None:
        node = self.nodes[p]
        if node is not None:
            # what was only in memory goes: the pending answers of a crashed leader never come
            for index, _deadline, _done in node.waiting:
                self.pending.pop((p, index), None)
        self.nodes[p] = None

    def reachable(self, a: str, b: str) -> bool:
        """Whether `a`'s requests reach `b` (and their answers come back)."""
        return frozenset((a, b)) not in self.cut and (a, b) not in self.one_way

    def send(self, at: int, kind: str, payload: Any) -> None:
        self.seq += 1
        heapq.heappush(self.queue, (at, self.seq, kind, payload))

    def latency(self, src: str, dst: str) -> int:
        """A delay that keeps each direction of a link in order (one TCP connection)."""
        delay = self.rng.randint(1, 30) if self.rng.random() > 0.02 else self.rng.randint(100, 1500)
        delay += self.slow.get((src, dst), 0)
        at = max(self.now + delay, self.link.get((src, dst), 0))
        self.link[(src, dst)] = at
        return at - self.now

    def dispatch(self, src: str, outs: list[Out]) -> None:
        for out in outs:
            if not self.reachable(src, out.peer) and self.refuse:
                self.send(self.now + STEP, "answer", (src, out, None))
                continue
            if self.rng.random() < self.loss or not self.reachable(src, out.peer):
                self.send(self.now + 3000, "answer", (src, out, None))  # the remoting timeout
                continue
            self.send(self.now + self.latency(src, out.peer), "request", (src, out))

    def handle(self, dst: str, req: RequestOrResponse) -> RequestOrResponse | None:
        node = self.nodes[dst]
        if node is None:
            return None
        if isinstance(req, VoteRequest):
            node._now = self.now  # (as the server hands it the time)
            return node.on_vote(req)
        if isinstance(req, HeartBeatRequest):
            return node.on_heartbeat(req, self.now)
        if isinstance(req, PushEntryRequest):
            return node.on_push(req, self.now)
        if isinstance(req, LeadershipTransferRequest):
            code = node.on_take_leadership(req)
            if code is None:  # answered once decided, as DLedgerServer#handleLeadershipTransfer waits
                return None
            return LeadershipTransferResponse(code=int(code))
        raise AssertionError(req)

    def handle_raw(self, out: Out) -> RequestOrResponse | None:
        node = self.nodes[out.peer]
        if node is None:
            return None
        assert isinstance(out.request, PushEntryRequest) and out.raw is not None
        return node.on_raw_push(out.request, out.first, out.count, out.raw, self.now)

    def answer_transfers(self) -> None:
        """The take-leadership requests decided since: answered now (until then the leader takes no sends)."""
        for key, (src, out) in list(self.transfers.items()):
            node = self.nodes[key]
            pending = node.take_leadership if node is not None else None
            if node is None or (pending is not None and pending[1] is not None):
                code = pending[1] if pending is not None and node is not None else None
                if node is not None:
                    node.take_leadership = None
                resp = None if code is None else LeadershipTransferResponse(code=int(code))
                self.send(self.now + self.latency(key, src), "answer", (src, out, resp))
                del self.transfers[key]

    def step(self) -> None:
        self.now += STEP
        while self.queue and self.queue[0][0] <= self.now:
            _, _, kind, payload = heapq.heappop(self.queue)
            if kind == "request":
                src, out = payload
                resp = self.handle_raw(out) if out.raw is not None else self.handle(out.peer, out.request)
                self.note(out.peer)
                held = isinstance(out.request, LeadershipTransferRequest) and self.nodes[out.peer] is not None
                if resp is None and held:
                    self.transfers[out.peer] = (src, out)
                    continue
                node = self.nodes[out.peer]
                if node is not None and node.ahead is not None:
                    promise, node.ahead = node.ahead, None
                    self.send(self.write(out.peer), "kept", (node, out.peer, promise))  # (nobody waits)
                if node is not None and node.unkept is not None:
                    # its answer waits for the write, or `keep_wait` at most
                    promise, node.unkept = node.unkept, None
                    at = self.write(out.peer)
                    self.send(at, "kept", (node, out.peer, promise))
                    self.send(min(at, self.now + self.keep_wait), "reply", (node, src, out, resp))
                    continue
                self.answer(src, out, resp)
            elif kind == "kept":
                node, p, promise = payload
                if self.nodes[p] is node:  # (crashed meanwhile: not written)
                    self.disks[p].heard = promise
                    node.promise_kept(*promise)
            elif kind == "reply":
                node, src, out, resp = payload
                if self.nodes[out.peer] is node:  # (crashed meanwhile: not answered)
                    self.answer(src, out, resp)
            else:
                src, out, resp = payload
                node = self.nodes[src]
                if node is not None:
                    node.on_response(out, resp, self.now)
                    self.note(src)
        for p, node in self.nodes.items():
            if node is not None:
                if self.binary and node.is_leader:
                    for peer in node.pushes:
                        node.speaks_binary(peer)
                self.dispatch(p, node.tick(self.now))
                self.note(p)
        self.answer_transfers()
        if self.lease_check:
            fresh = [p for p, n in self.nodes.items() if n is not None and n.lease_fresh(self.now)]
            if len(fresh) > 1:
                self.overlaps.append((self.now, fresh))

    def write(self, p: str) -> int:
        """When `p`'s writer, handed a promise now, has it on disk: a few ms, at times more, after what it
        was given before (one write after another, as the server's one thread does them)."""
        took = self.rng.randint(1, 5) if self.rng.random() > 0.05 else self.rng.randint(50, 500)
        at = self.writes[p] = max(self.now + took, self.writes.get(p, 0))
        return at

    def answer(self, src: str, out: Out, resp: RequestOrResponse | None) -> None:
        """`out.peer`'s answer to `src`'s request, on its way back (or lost)."""
        lost = resp is None or self.rng.random() < self.loss or not self.reachable(src, out.peer)
        if lost:
            self.send(self.now + 3000 - STEP, "answer", (src, out, None))
        else:
            self.send(self.now + self.latency(out.peer, src), "answer", (src, out, resp))

    def note(self, p: str) -> None:
        """Record what `p` decided and check it against everything recorded so far."""
        node = self.nodes[p]
        if node is None:
            return
        changes = list(node.role_changes)
        node.role_changes.clear()
        for term, role in changes:
            if role is Role.LEADER:
                assert self.leaders.setdefault(term, p) == p, f"two leaders in term {term}"
                if self.term_entries and node.is_leader and node.m.term == term:
                    node.append(f"term {term} {p}".encode(), self.now)
        log = node.log
        # (the log refuses to cut committed entries, so each index is checked once it is committed)
        for i in range(self.checked.get(p, -1) + 1, log.committed_index + 1):
            entry = log.get(i)
            seen = self.committed.setdefault(i, (entry.term, entry.body))
            assert seen == (entry.term, entry.body), f"{p}: committed entry {i} changed"
        self.checked[p] = max(self.checked.get(p, -1), log.committed_index)
        for index, code in node.outcomes().items():
            body = self.pending.pop((p, index), None)
            if body is not None and code == DLedgerResponseCode.SUCCESS:
                self.acked.append((index, body))

    def leader(self) -> Node | None:
        live = [n for n in self.nodes.values() if n is not None and n.is_leader]
        return max(live, key=lambda n: n.m.term) if live else None

    def client_append(self, n: int) -> None:
        node = self.leader()
        if node is None:
            return
        body = f"m{n}".encode()
        code, entry = node.append(body, self.now)
        if code == DLedgerResponseCode.SUCCESS:
            assert entry is not None
            self.pending[(node.m.self_id, entry.index)] = body
            self.note(node.m.self_id)

    def run(self, ms: int, append_every: int = 0) -> None:
        for _ in range(ms // STEP):
            self.step()
            if append_every and self.now % append_every == 0:
                self.client_append(self.now)

    def check_acked_everywhere(self) -> None:
        """Once the followers caught up (up to a minute): every acknowledged append in every member's log."""
        for _ in range(60):
            self.run(1000)
            leader = self.leader()
            if leader is not None and all(
                n is not None and n.log.last_index == leader.log.last_index for n in self.nodes.values()
            ):
                break
        for node in self.nodes.values():
            assert node is not None
            self.check_acked_in(node)

    def check_acked_in(self, node: Node) -> None:
        for index, body in self.acked:
            assert index <= node.log.last_index and node.log.get(index).body == body, (
                f"acked entry {index} lost on {node.m.self_id}"
            )


def test_one_leader_elected_and_appends_commit() -> None:
    c = Cluster(seed=1, loss=0.0)
    c.run(5000)
    leaders = [n for n in c.nodes.values() if n is not None and n.is_leader]
    assert len(leaders) == 1
    c.run(3000, append_every=50)
    assert len(c.acked) >= 40
    c.check_acked_everywhere()


def test_the_leader_keeps_pushed_entries_only_until_every_follower_has_them() -> None:
    """Entries made once for all followers' pushes are dropped as the last follower acknowledges them, in a
    later leadership too (the trim's cursor starts again with the new term's marks)."""
    c = Cluster(seed=3, loss=0.0)
    for _ in range(2):
        c.run(5000)
        c.run(2000, append_every=20)
        c.run(1000)  # every follower caught up
        leader = c.leader()
        assert leader is not None and leader.log.last_index >= 50
        assert {p.water_mark for p in leader.pushes.values()} == {leader.log.last_index}
        assert not leader._wire
        c.crash(leader.m.self_id)
        c.start(leader.m.self_id)


def test_default_timings_elect_within_seconds_after_leader_crash() -> None:
    c = Cluster(seed=2, loss=0.0)
    c.run(5000, append_every=100)
    old = c.leader()
    assert old is not None
    c.crash(old.m.self_id)
    start = c.now
    while c.now - start < 20_000:
        c.run(STEP)
        new = c.leader()
        if new is not None and new.m.self_id != old.m.self_id:
            break
    took = c.now - start
    # 3 missed heartbeats (6 s); a follower asked while the other still had the leader waits those again
    # before its next vote (DLedger's REJECT_ALREADY_HAS_LEADER), then a vote round
    assert took <= 6000 + 6000 + 1000 + 3000, took
    acked = len(c.acked)
    c.run(3000, append_every=100)
    assert len(c.acked) > acked
    new = c.leader()
    assert new is not None
    c.check_acked_in(new)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("seed", "binary", "careful"),
    [(s, False, False) for s in range(30)]
    + [(s, True, False) for s in range(10)]
    + [(s, False, True) for s in range(10)],
)
def test_safety_under_faults(seed: int, binary: bool, careful: bool) -> None:
    """Careful, members abstain as the broker has them and a member's store may be lost (one at a time:
    two lost at once may hold the only copies of an entry)."""
    c = Cluster(seed=seed, binary=binary, careful=careful)
    rng = random.Random(seed * 7919)
    names = list(PEERS)
    for _ in range(12):
        fault = rng.choice(["crash", "partition", "isolate", "none", *(["wipe"] if careful else [])])
        victim = rng.choice(names)
        if fault == "crash":
            c.crash(victim)
        elif fault == "wipe" and all(
            c.nodes[p] is not None and c.disks[p].abstain == VOTING for p in names if p != victim
        ):
            c.wipe(victim)
        elif fault == "partition":
            other = rng.choice([n for n in names if n != victim])
            c.cut.add(frozenset((victim, other)))
        elif fault == "isolate":
            c.cut |= {frozenset((victim, n)) for n in names if n != victim}
        c.run(rng.randint(1000, 8000), append_every=rng.choice([20, 50, 200]))
        # heal
        c.cut.clear()
        for p in names:
            if c.nodes[p] is None:
                c.start(p)
        c.run(rng.randint(0, 3000), append_every=100)
    # faults over: the group must elect and commit again
    c.loss = 0.0
    c.run(15_000)
    acked = len(c.acked)
    c.run(5000, append_every=100)
    assert len(c.acked) > acked, "no append acknowledged after the faults stopped"
    assert c.leader() is not None
    c.check_acked_everywhere()


def test_leadership_transfer_moves_the_leader() -> None:
    c = Cluster(seed=9, loss=0.0)
    c.run(5000, append_every=100)
    leader = c.leader()
    assert leader is not None
    target = next(p for p in PEERS if p != leader.m.self_id)
    code, out = leader.transfer_request(target)
    assert code == DLedgerResponseCode.SUCCESS and out is not None
    node = c.nodes[target]
    assert node is not None
    assert node.on_take_leadership(out.request) is None  # type: ignore[arg-type]
    c.run(3000)
    assert node.take_leadership is not None and node.take_leadership[1] == DLedgerResponseCode.SUCCESS
    assert c.leader() is node


def test_a_transfer_to_a_member_that_cannot_lead_is_refused_and_the_leader_stays() -> None:
    """A member whose store refuses writes asks for no votes; asked to take the leadership it says so at
    once, rather than leaving its term (which deposes the leader) for an election it will not run in."""
    c = Cluster(seed=9, loss=0.0)
    c.run(5000, append_every=100)
    leader = c.leader()
    assert leader is not None
    target = next(p for p in PEERS if p != leader.m.self_id)
    node = c.nodes[target]
    assert node is not None
    node.can_lead = lambda: False
    code, out = leader.transfer_request(target)
    assert code == DLedgerResponseCode.SUCCESS and out is not None
    assert node.on_take_leadership(out.request) == DLedgerResponseCode.TAKE_LEADERSHIP_FAILED  # type: ignore[arg-type]
    leader.transfer_answered(
        leader.m.term, LeadershipTransferResponse(code=int(DLedgerResponseCode.TAKE_LEADERSHIP_FAILED))
    )
    term = leader.m.term
    c.run(3000, append_every=100)
    assert c.leader() is leader and leader.m.term == term


def _handing_over(seed: int) -> tuple[Cluster, Node, Node, Out]:
    """A group at 500 ms heartbeats whose leader was asked to hand over to a follower that holds its whole
    log: the group, the leader, the transferee and the leader's take-leadership request (not sent yet)."""
    c = Cluster(seed=seed, loss=0.0, timings=Timings(heart_beat_time_interval_ms=500))
    c.run(5000, append_every=100)
    c.run(1000)
    leader = c.leader()
    assert leader is not None
    transferee = c.nodes[next(p for p in PEERS if p != leader.m.self_id)]
    assert transferee is not None
    code, out = leader.transfer_request(transferee.m.self_id)
    assert code == DLedgerResponseCode.SUCCESS and out is not None
    return c, leader, transferee, out


@pytest.mark.parametrize("seed", range(8))
def test_a_transferee_is_elected_though_the_old_leaders_heartbeat_reaches_it_before_it_asks(
    seed: int,
) -> None:
    """The transferee stands in the next term; the leader's next heartbeat reaches it before it asks for
    votes (it waits a vote interval), and the answer tells the leader of that term. The leader steps down
    into that term and the transferee is elected in it. (Standing again in its own term, the old leader
    was elected there again by the votes it had, appended its term entry past the transferee's log, and
    the transfer failed: TAKE_LEADERSHIP_FAILED.)"""
    c, leader, transferee, out = _handing_over(seed)
    term, old, target = leader.m.term, leader.m.self_id, transferee.m.self_id
    c.dispatch(old, [out])
    while transferee.m.term == term:
        c.step()
    assert transferee.m.term == term + 1 and transferee.vote_round is None
    leader.last_send_beat, leader.beat_round = -1, None
    beats = [o for o in leader.tick(c.now) if o.code is DLedgerRequestCode.HEART_BEAT]
    for beat in beats:
        if beat.peer == target:  # (at once: before the transferee asks)
            assert isinstance(beat.request, HeartBeatRequest)
            leader.on_response(beat, transferee.on_heartbeat(beat.request, c.now), c.now)
        else:
            c.dispatch(old, [beat])
    stepped_down = False
    for _ in range(300):
        c.step()
        stepped_down = stepped_down or not leader.is_leader
        assert not (stepped_down and leader.is_leader and leader.m.term == term), "it led its term again"
    assert stepped_down
    assert c.leader() is transferee and transferee.m.term == term + 1


def test_a_transferee_follows_no_heartbeat_of_the_leaders_term_once_it_takes_the_leadership() -> None:
    """The leader's heartbeat reaches the transferee after it took the leadership and before its next tick:
    it is in the next term already and refuses it (a candidate still in the leader's term followed it
    again, and the transfer failed: TAKE_LEADERSHIP_FAILED)."""
    c, leader, transferee, out = _handing_over(9)
    term, old, target = leader.m.term, leader.m.self_id, transferee.m.self_id
    assert isinstance(out.request, LeadershipTransferRequest)
    assert transferee.on_take_leadership(out.request) is None
    beat = HeartBeatRequest(group="g", local_id=old, remote_id=target, leader_id=old, term=term)
    assert transferee.on_heartbeat(beat, c.now).code == DLedgerResponseCode.EXPIRED_TERM
    assert transferee.m.role is Role.CANDIDATE and transferee.m.term == term + 1
    c.run(3000)
    assert transferee.take_leadership == (term + 1, DLedgerResponseCode.SUCCESS)
    assert c.leader() is transferee


def test_a_transfer_parked_for_its_entries_is_refused_once_the_member_is_in_a_later_term() -> None:
    """The transferee lacks entries the request names, so it parks the request; meanwhile another member
    leads a later term and the transferee follows it. Once its log reaches the index, the parked request
    is answered INCONSISTENT_TERM and the member stays where it is (it moved one term further, a term no
    one voted in, while following or leading: two leaders of one term could follow)."""
    c, leader, transferee, out = _handing_over(9)
    term, old, target = leader.m.term, leader.m.self_id, transferee.m.self_id
    assert isinstance(out.request, LeadershipTransferRequest)
    ahead = dataclasses.replace(out.request, take_leadership_ledger_index=transferee.log.last_index + 1)
    assert transferee.on_take_leadership(ahead) is None and transferee.take_leadership_wait is not None
    other = next(p for p in PEERS if p not in (old, target))
    beat = HeartBeatRequest(group="g", local_id=other, remote_id=target, leader_id=other, term=term + 2)
    for _ in range(10):
        transferee.on_heartbeat(beat, c.now)
        transferee.tick(c.now)
        if transferee.m.role is Role.FOLLOWER and transferee.m.leader_id == other:
            break
    assert transferee.m.role is Role.FOLLOWER and transferee.m.term == term + 2
    parked, deadline = transferee.take_leadership_wait
    caught_up = dataclasses.replace(parked, take_leadership_ledger_index=transferee.log.last_index)
    transferee.take_leadership_wait = (caught_up, deadline)
    transferee.tick(c.now)
    assert transferee.m.term == term + 2 and transferee.m.role is Role.FOLLOWER
    assert transferee.m.leader_id == other and transferee.m.term_to_take_leadership != term + 1
    assert transferee.take_leadership == (term + 1, DLedgerResponseCode.INCONSISTENT_TERM)


def test_preferred_leader_takes_over() -> None:
    c = Cluster(seed=11, loss=0.0)
    for node in c.nodes.values():
        assert node is not None
        node.preferred = "n2"
    c.run(5000, append_every=100)
    c.run(5000, append_every=100)
    leader = c.leader()
    assert leader is not None and leader.m.self_id == "n2"
    c.check_acked_in(leader)


PEERS5 = {f"n{i}": f"127.0.0.1:{40921 + i}" for i in range(5)}


def test_figure_8_an_earlier_terms_entry_on_a_quorum_is_not_committed() -> None:
    """The Raft paper's figure 8 on five members (n0..n4 for S1..S5), from its state (b): n0 led term 2 and
    got entry 1 to n1 only; n4 led term 3 and appended its own entry 1 alone. (c) n4 is down, n0 or n1
    leads term 4 and copies entry 1 of term 2 to a quorum. Counting those replicas would commit it, yet
    (d) n4, back with its later-term entry 1, is elected by the others and replaces it. So the leader of
    term 4 must not commit it: the committed entries never change, and n4's group takes appends again."""
    c = Cluster(seed=8, peers=PEERS5, loss=0.0, term_entries=False)
    for p in PEERS5:
        c.crash(p)
    logs = {p: c.disks[p].log for p in PEERS5}
    for p, log_ in logs.items():
        log_.append_leader(b"a", 1)
        if p in ("n0", "n1"):
            log_.append_leader(b"b", 2)
        elif p == "n4":
            log_.append_leader(b"c", 3)
        log_.set_committed(0)
        c.disks[p].term, c.disks[p].vote = (2, "n0") if p in ("n0", "n1") else (3, "n4")
    # (c) n4 down: n0 or n1 (the longest logs) leads term 4 and pushes entry 1 of term 2 everywhere
    for p in ("n0", "n1", "n2", "n3"):
        c.start(p)
    for _ in range(30):
        c.run(1000)
        if all(logs[p].last_index == 1 and logs[p].get(1).body == b"b" for p in ("n0", "n1", "n2", "n3")):
            break
    else:
        raise AssertionError("entry 1 of term 2 never reached the four")
    c.run(2000)  # (the followers hear the commit index)
    leader = c.leader()
    assert leader is not None and leader.m.self_id in ("n0", "n1") and leader.m.term >= 4
    # (d) that leader goes; n4 returns and only it can gather votes (the others cannot reach each other)
    c.crash(leader.m.self_id)
    rest = [p for p in ("n0", "n1", "n2", "n3") if p != leader.m.self_id]
    c.cut |= {frozenset((a, b)) for a in rest for b in rest if a != b}
    c.start("n4")
    for _ in range(30):
        c.run(1000)
        new = c.leader()
        if new is not None and new.m.self_id == "n4":
            break
    assert c.leader() is c.nodes["n4"]
    c.run(5000, append_every=100)
    assert c.acked, "the group elected n4 and commits nothing"
    c.cut.clear()
    c.start(leader.m.self_id)
    c.check_acked_everywhere()
    assert all(log_.get(1).body == b"c" for log_ in logs.values())


@pytest.mark.parametrize("divergent", [1, 2000])
def test_a_divergent_tail_is_found_in_logarithmic_round_trips(divergent: int) -> None:
    """A leader cut off takes appends no one else holds; the others elect a leader, which appends its
    own. When the old leader is back, the new one bisects for where they agree (each COMPARE answered
    counted), then cuts the tail once: about log2 of the shorter log's length round trips (at most
    log2(2,000) + 3 for 2,000 entries here), not one per entry. The tail goes to quarantine and the member
    follows the leader."""
    c = Cluster(seed=21, loss=0.0)
    c.run(5000, append_every=100)
    old = c.leader()
    assert old is not None
    old_id = old.m.self_id
    c.cut |= {frozenset((old_id, n)) for n in PEERS if n != old_id}
    for i in range(divergent):
        assert old.append(f"lost{i}".encode(), c.now)[0] == DLedgerResponseCode.SUCCESS
    c.run(12_000)  # (no appends: the old leader takes none but these)
    new = c.leader()
    assert new is not None and new.m.self_id != old_id
    c.run(2000, append_every=100)
    assert new.pushes[old_id].compares == 0  # (nothing answered while cut off)
    shorter = min(old.log.last_index, new.log.last_index) + 1
    c.cut.clear()
    c.run(8000, append_every=100)
    compares = new.pushes[old_id].compares
    # (at most the leader's end, the follower's end, the entry before it, then the bisection)
    assert 1 <= compares <= math.log2(shorter) + 4, (compares, shorter)
    assert compares <= math.log2(max(divergent, 2000)) + 3
    disk = c.disks[old_id].log
    assert sum(e.body.startswith(b"lost") for e in disk.quarantined) == divergent
    assert not any(e.body.startswith(b"lost") for e in disk._entries)
    assert disk.last_index >= new.log.committed_index and disk.get(disk.last_index) == new.log.get(
        disk.last_index
    )
    c.check_acked_in(new)
    c.check_acked_in(c.nodes[old_id])  # type: ignore[arg-type]


class Garbling(Cluster):
    """The network flips a body byte of the first entry pushed once :attr:`armed` (its bodyCrc kept)."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed, loss=0.0)
        self.armed = False
        self.garbled: tuple[str, int, int] | None = None  # (follower, entry index, the code it answered)

    def handle(self, dst: str, req: RequestOrResponse) -> RequestOrResponse | None:
        if not (self.armed and self.garbled is None and isinstance(req, PushEntryRequest)):
            return super().handle(dst, req)
        wires = req.entries()
        if req.type is not PushType.APPEND or not wires or not wires[0].body:
            return super().handle(dst, req)
        first = wires[0]
        assert first.body is not None and first.body_crc != 0  # our leader fills it
        bad = dataclasses.replace(first, body=bytes([first.body[0] ^ 1]) + first.body[1:])
        if req.batch_entry:
            req = dataclasses.replace(req, batch_entry=[bad, *wires[1:]])
        else:
            req = dataclasses.replace(req, entry=bad)
        resp = super().handle(dst, req)
        assert isinstance(resp, PushEntryResponse)
        self.garbled = (dst, first.index, resp.code)
        return resp


def garbled_then_healed(
    c: Garbling | GarblingRaw, caplog: pytest.LogCaptureFixture, refused: str
) -> tuple[str, Node]:
    """Run `c`, arm its garbling, and check that the garbled push was refused (411, logged as `refused` says
    with the entry's index), and that every acknowledged entry reached every member after: the follower
    garbled, and the leader."""
    c.run(5000, append_every=100)
    c.armed = True
    with caplog.at_level("ERROR"):
        c.run(3000, append_every=100)
    assert c.garbled is not None
    follower, index, code = c.garbled
    assert code == DLedgerResponseCode.UNEXPECTED_ARGUMENT
    assert refused.format(index=index) in caplog.text
    c.check_acked_everywhere()  # the leader pushed it again, whole
    node, leader = c.nodes[follower], c.leader()
    assert node is not None and leader is not None
    assert node.log.get(index) == leader.log.get(index)
    return follower, leader


def test_a_pushed_body_failing_its_crc_is_refused_then_pushed_again(caplog: pytest.LogCaptureFixture) -> None:
    garbled_then_healed(
        Garbling(seed=3), caplog, "cannot append entry {index}: UNEXPECTED_ARGUMENT: entry {index}: body crc"
    )


class GarblingRaw(Cluster):
    """Binary pushes, the network flipping a body byte of the first one pushed once :attr:`armed`."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed, loss=0.0, binary=True)
        self.armed = False
        self.garbled: tuple[str, int, int] | None = None  # (follower, first index, the code it answered)
        self.raw_pushes = self.json_appends = 0
        self.json_before_garbling = -1  # APPEND pushes as JSON before the garbled one

    def handle(self, dst: str, req: RequestOrResponse) -> RequestOrResponse | None:
        if isinstance(req, PushEntryRequest) and req.type is PushType.APPEND and req.entries():
            self.json_appends += 1
        return super().handle(dst, req)

    def handle_raw(self, out: Out) -> RequestOrResponse | None:
        self.raw_pushes += 1
        if not self.armed or self.garbled is not None or out.raw is None:
            return super().handle_raw(out)
        self.json_before_garbling = self.json_appends
        at = dl.BODY_OFFSET + 3  # a byte of the first entry's body (its bodyCrc kept)
        out.raw = out.raw[:at] + bytes([out.raw[at] ^ 1]) + out.raw[at + 1 :]
        resp = super().handle_raw(out)
        assert isinstance(resp, PushEntryResponse)
        self.garbled = (out.peer, out.first, resp.code)
        return resp


def test_a_binary_push_failing_a_crc_is_refused_and_pushed_again_as_json(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The follower refuses it (411) as a JSON push's; the leader pushes that follower JSON for the rest of
    its leadership (whose reads of its own log are checked), and every acknowledged entry gets there."""
    c = GarblingRaw(seed=3)
    follower, leader = garbled_then_healed(c, caplog, "UNEXPECTED_ARGUMENT: entry {index}: body crc")
    assert c.raw_pushes > 0 and c.json_before_garbling == 0  # (the first compare is JSON: no entries)
    assert leader.pushes[follower].binary_refused and c.json_appends > 0


def a_leader(entries: int) -> Node:
    """n0 of PEERS, leader of term 1 over a log of `entries` entries of its own term."""
    node = Node(MemberState("g", "n0", dict(PEERS), term=1), MemoryRaftLog(), Timings())
    node.to_leader(1)
    for i in range(entries):
        node.log.append_leader(b"e%d" % i, 1)
    return node


def test_a_leader_keeps_its_entries_in_memory_only_while_a_follower_takes_json_pushes() -> None:
    """JSON pushes carry entries decoded, from memory; binary ones are slices of the data file: once every
    follower said it reads binary pushes the log stops keeping what it appends, and keeps it again as soon
    as one is back to JSON (its connection lost, or a binary body refused)."""
    node = a_leader(0)
    assert node.log.keep_recent
    node.speaks_binary("n1")
    assert node.log.keep_recent  # (n2 still takes JSON)
    node.speaks_binary("n2")
    assert not node.log.keep_recent
    node.binary_lost("n1")
    assert node.log.keep_recent
    node.speaks_binary("n1")
    assert not node.log.keep_recent
    node.to_candidate(2)
    node.m.term = 2
    node.to_leader(2)  # a new leadership: every follower is pushed JSON until it says otherwise
    assert node.log.keep_recent


def test_followers_pushed_from_the_same_index_share_one_read_of_the_run() -> None:
    """A round's binary pushes to followers at the same index carry one run read from the log (not one read
    and copy each); once the log grows, or for a follower elsewhere, the run is read again."""
    node = a_leader(3)
    for peer in ("n1", "n2"):
        node.speaks_binary(peer)
        node._to_append(node.pushes[peer], -1)  # (compared: both hold nothing)
    first = [o for o in node.tick(0) if o.raw is not None]
    assert [(o.peer, o.first, o.count) for o in first] == [("n1", 0, 3), ("n2", 0, 3)]
    assert first[0].raw is first[1].raw
    node.log.append_leader(b"e3", 1)
    node.pushes["n2"].write_index = 1  # (n2 behind: pushed again from 1)
    node.pushes["n2"].inflight.clear()
    # (n2 is not the follower the quorum waits for: pushed once its last push is SPARE_PUSH_MS old)
    again = [o for o in node.tick(SPARE_PUSH_MS) if o.raw is not None]
    assert [(o.peer, o.first, o.count) for o in again] == [("n1", 3, 1), ("n2", 1, 3)]
    assert again[0].raw == dl.encode_entry(node.log.get(3))
    assert again[1].raw == b"".join(dl.encode_entry(node.log.get(i)) for i in (1, 2, 3))


def test_waiting_appends_are_answered_whatever_order_they_were_tracked_in() -> None:
    """The commit and the expiry look at the front of the waiting appends while they were tracked in order
    (each send waits for the entry it just appended); one tracked out of order, or tracked again, is
    still answered as its own index and deadline say: each wait once, by its own deadline."""
    node = a_leader(4)
    node.track(3, 0)
    node.track(1, 0)  # after a later index
    node.pushes["n1"].water_mark = 1
    node._advance_commit()
    assert node.outcomes() == {1: DLedgerResponseCode.SUCCESS}
    assert [w[0] for w in node.waiting] == [3]

    node = a_leader(3)
    node.track(0, 0, "first")  # type: ignore[arg-type]
    node.track(1, 100, "one")  # type: ignore[arg-type]
    node.track(0, 200, "again")  # type: ignore[arg-type]  # its deadline comes after 1's
    node.tick(2499)
    assert node.failed == [] and node.answered == []
    node.tick(2500)
    assert node.failed == [((0, 2500, "first"), DLedgerResponseCode.WAIT_QUORUM_ACK_TIMEOUT)]
    node.tick(2650)
    assert node.failed[1:] == [((1, 2600, "one"), DLedgerResponseCode.WAIT_QUORUM_ACK_TIMEOUT)]
    node.pushes["n2"].water_mark = 0
    node._advance_commit()
    assert node.answered == [(0, 2700, "again")] and not node.waiting


def test_waits_are_answered_in_index_order_by_the_commit_that_reaches_them() -> None:
    """A commit answers the run of waits up to the committed index, in order, and no further; an index
    waited for twice is answered twice; the rest wait for a later commit or their deadline."""
    node = a_leader(5)
    for index in (0, 1, 1, 2, 3, 4):
        node.track(index, 10 * index, index)  # type: ignore[arg-type]
    node.pushes["n1"].water_mark = 2
    node._advance_commit()
    assert node.log.committed_index == 2
    assert [(i, d) for i, _deadline, d in node.answered] == [(0, 0), (1, 1), (1, 1), (2, 2)]
    assert [w[0] for w in node.waiting] == [3, 4]
    node.answered.clear()
    node.pushes["n2"].water_mark = 3
    node._advance_commit()
    assert [w[0] for w in node.answered] == [3] and [w[0] for w in node.waiting] == [4]
    node.tick(2540)
    assert node.failed == [((4, 2540, 4), DLedgerResponseCode.WAIT_QUORUM_ACK_TIMEOUT)]
    assert not node.waiting


def test_a_leader_stepping_down_answers_every_wait_term_changed() -> None:
    node = a_leader(3)
    for index in (0, 1, 2):
        node.track(index, 0)
    node.to_follower(2, "n1")
    assert node.outcomes() == dict.fromkeys((0, 1, 2), DLedgerResponseCode.TERM_CHANGED)
    assert not node.waiting


def test_a_group_of_one_commits_what_it_tracks_at_once() -> None:
    node = Node(MemberState("g", "n0", {"n0": PEERS["n0"]}, term=1), MemoryRaftLog(), Timings())
    node.to_leader(1)
    node.log.append_leader(b"x", 1)
    node.track(0, 0)
    assert node.outcomes() == {0: DLedgerResponseCode.SUCCESS} and node.log.committed_index == 0


def a_follower(leader: str = "n0") -> Node:
    """n1 of PEERS, following `leader` in term 1 over an empty log."""
    node = Node(MemberState("g", "n1", dict(PEERS), term=1), MemoryRaftLog(), Timings())
    node.to_follower(1, leader)
    return node


def test_a_binary_push_made_json_carries_the_same_entries() -> None:
    """A binary push whose connection is gone goes as JSON (its driver calls `as_json`): a follower appends
    the same entries from either form, and a peer that did not say it reads binary is pushed JSON."""
    leader = a_leader(3)
    for peer in ("n1", "n2"):
        leader._to_append(leader.pushes[peer], -1)
    leader.speaks_binary("n1")
    outs = {o.peer: o for o in leader.tick(0)}
    raw, plain = outs["n1"], outs["n2"]
    assert raw.raw is not None and (raw.first, raw.count) == (0, 3)
    assert plain.raw is None and plain.body is not None
    made = leader.as_json(raw)
    assert made.raw is None and made.body is not None and made.epoch == raw.epoch
    req = PushEntryRequest.decode(made.body)
    assert req.remote_id == "n1" and req.batch_entry == PushEntryRequest.decode(plain.body).batch_entry
    assert isinstance(raw.request, PushEntryRequest)
    by_raw, by_json = a_follower(), a_follower()
    assert by_raw.on_raw_push(raw.request, 0, 3, raw.raw, 0).code == DLedgerResponseCode.SUCCESS
    assert by_json.on_push(req, 0).code == DLedgerResponseCode.SUCCESS
    for follower in (by_raw, by_json):
        assert [follower.log.get(i) for i in range(3)] == [leader.log.get(i) for i in range(3)]


@pytest.mark.parametrize(
    ("first", "count", "body"),
    [(0, 5, "entry 0"), (0, 5, "empty"), (3, 2, "entry 0")],
    ids=["count-beyond-the-body", "empty-body", "index-not-the-bodys"],
)
def test_a_binary_push_commits_no_further_than_its_body_whatever_its_fields_claim(
    first: int, count: int, body: str
) -> None:
    """A follower holds entries 0-4 of a deposed leader, 0-1 committed. A binary push of the new leader
    whose extFields claim more than its body shows (its count, its first index; an empty body) must not
    commit the tail the body never showed to be the new leader's: refused, the committed index unmoved."""
    old = a_leader(5)
    follower = a_follower()
    run = old.log.raw_entries(0, 5, 1 << 20)
    assert run is not None and run[0] == 5
    push = PushEntryRequest(group="g", leader_id="n0", local_id="n0", remote_id="n1", term=1, commit_index=1)
    assert follower.on_raw_push(push, 0, 5, run[1], 0).code == DLedgerResponseCode.SUCCESS
    assert (follower.log.last_index, follower.log.committed_index) == (4, 1)
    follower.m.term = 2
    follower.to_follower(2, "n2")
    one = old.log.raw_entries(0, 1, 0)
    assert one is not None
    lie = PushEntryRequest(group="g", leader_id="n2", local_id="n2", remote_id="n1", term=2, commit_index=4)
    resp = follower.on_raw_push(lie, first, count, one[1] if body == "entry 0" else b"", 0)
    assert (follower.log.last_index, follower.log.committed_index) == (4, 1)
    assert resp.code == DLedgerResponseCode.UNEXPECTED_ARGUMENT


def test_pushes_arriving_out_of_order_are_refused_without_an_error_flood(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """After a stalled link heals, the pushes still queued on the old connection arrive after the new
    one's: each is refused (the leader compares and pushes again), which is the protocol at work, not a
    fault of this member. Logged at ERROR each, one healed stall made a thousand ERROR lines."""
    leader = a_leader(5)
    follower = a_follower()
    late = leader.log.raw_entries(2, 3, 1 << 20)
    assert late is not None
    push = PushEntryRequest(group="g", leader_id="n0", local_id="n0", remote_id="n1", term=1, commit_index=1)
    with caplog.at_level(logging.INFO, logger="daemon.dledger.machines"):
        for _ in range(50):
            resp = follower.on_raw_push(push, 2, 3, late[1], 0)
            assert resp.code == DLedgerResponseCode.INCONSISTENT_STATE
    assert follower.log.last_index == -1
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) <= 1


def test_a_term_or_vote_that_cannot_be_saved_does_not_count() -> None:
    """A member whose disk is full must not raise its term in memory each tick (its vote requests would
    depose a healthy leader with terms no one can recover after a restart) nor give an unsaved vote."""

    def full_disk(term: int, vote: str | None) -> None:
        raise OSError(28, "No space left on device")

    m = MemberState("g", "n0", dict(PEERS), full_disk, term=2, voted_for=None)
    for _ in range(3):
        with pytest.raises(OSError):
            m.next_term()
    assert (m.term, m.voted_for) == (2, None)
    with pytest.raises(OSError):
        m.set_vote("n1")
    assert m.voted_for is None


def test_an_emptied_member_that_cannot_save_the_term_its_peers_answered_has_not_heard_them() -> None:
    """Its peers answered term 3, and the disk refuses to keep it: counted heard in its own term 2, it
    would follow a leader of term 2 (one deposed while it was away) and help it commit. Not heard, it
    refuses that leader's heartbeat; heard once the term is kept."""
    disk_full = [True]

    def persist(term: int, vote: str | None) -> None:
        if disk_full[0]:
            raise OSError(28, "No space left on device")

    node = Node(MemberState("g", "n0", dict(PEERS), persist, term=2), MemoryRaftLog(), Timings())
    node.abstain(PROBING, "started without its store")
    answer = VoteResponse(vote_result=VoteResult.REJECT_EXPIRED_VOTE_TERM, term=3)
    for peer in ("n1", "n2"):
        node._probe_answered(peer, answer)
    assert not node._heard and node.m.term == 2
    beat = HeartBeatRequest(group="g", local_id="n1", remote_id="n0", leader_id="n1", term=2)
    assert node.on_heartbeat(beat, 0).code == DLedgerResponseCode.ILLEGAL_MEMBER_STATE
    disk_full[0] = False
    node._probe_answered("n1", answer)
    assert node._heard and node.m.term == 3


def test_a_member_that_cannot_save_its_term_waits_a_vote_interval_before_it_tries_again() -> None:
    """A full disk must not turn the candidate's maintainer into a loop that tries to save a new term (and
    fails, with a logged traceback) at every 10 ms tick: it waits a vote interval, as after a lost vote."""
    calls: list[int] = []

    def full_disk(term: int, vote: str | None) -> None:
        calls.append(term)
        raise OSError(28, "No space left on device")

    timings = Timings()
    node = Node(MemberState("g", "n0", dict(PEERS), full_disk, term=2), MemoryRaftLog(), timings)
    node.need_increase_term = True  # (as a vote request of a higher term leaves it)
    failures = 0
    window = 1000
    for now in range(0, window, STEP):
        try:
            node.tick(now)
        except OSError:
            failures += 1
    assert node.m.term == 2
    # a try, then one at most every vote interval (random, never under its minimum); every tick would be
    # window // STEP tries
    most = 1 + window // timings.min_vote_interval_ms
    assert len(calls) <= most, f"{len(calls)} attempts to save a term within {window} ms, not {most} at most"
    assert failures == 0, "a full disk is the machine's to wait out, not the tick's caller's"


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
@pytest.mark.parametrize(
    ("term", "index", "count"),
    [(1, 0, 3), (1, 1, 2), (2, 0, 1)],
    ids=["more-entries-than-pushed", "another-first-index", "another-term"],
)
def test_a_push_answer_moves_the_water_mark_no_further_than_the_push_it_answers(
    binary: bool, term: int, index: int, count: int
) -> None:
    """The water mark a SUCCESS moves counts only the entries that push carried, in its own term
    (DLedger's follower echoes the push's term, first index and count): an answer whose fields say more
    (a forged or mismatched one, a binary answer's bytes that lie) must not commit entries the follower
    was never sent."""
    leader = a_leader(1)
    leader._to_append(leader.pushes["n1"], -1)
    if binary:
        leader.speaks_binary("n1")
    (push,) = [o for o in leader.tick(0) if o.peer == "n1" and o.code is DLedgerRequestCode.PUSH]
    assert (push.raw is not None) is binary
    for i in (1, 2):  # appended after that push left: n1 holds none of them
        leader.log.append_leader(b"e%d" % i, 1)
    lie = PushEntryResponse(
        code=int(DLedgerResponseCode.SUCCESS), term=term, group="g", index=index, count=count
    )
    leader.on_response(push, lie, 1)
    held = 0 if (term, index) == (1, 0) else -1  # (what the answer may stand for: the push's one entry)
    assert leader.pushes["n1"].water_mark <= held
    assert leader.log.committed_index <= held


def test_a_candidate_told_of_a_later_term_leaves_its_open_round_at_the_next_tick() -> None:
    """Both followers of a leader gone stand again in its term first (DLedger's revote), where each voted
    for it already; the first to move to the next term asks the other, whose round of the old term is still
    open (it waits for the silent leader's answer until its deadline). Told of the later term, the other
    leaves that round at its next tick and takes the term: the revote that follows is accepted, not refused
    with REJECT_TERM_NOT_READY until the stale round's deadline."""
    n1 = Node(MemberState("g", "n1", dict(PEERS), term=1, voted_for="n2"), MemoryRaftLog(), Timings())
    asked = n1.tick(0)  # its revote in term 1 (n2, the leader gone, never answers)
    assert n1.vote_round is not None and {o.peer for o in asked} == {"n0", "n2"}

    def vote_of_n0() -> VoteResponse:
        req = VoteRequest(group="g", local_id="n0", remote_id="n1", leader_id="n0", term=2)
        req.ledger_end_index, req.ledger_end_term = n1.log.last_index, n1.log.last_term
        return n1.on_vote(req)

    assert vote_of_n0().vote_result is VoteResult.REJECT_TERM_NOT_READY
    n1.tick(STEP)
    assert vote_of_n0().vote_result is VoteResult.ACCEPT
    assert (n1.m.term, n1.m.voted_for, n1.vote_round) == (2, "n0", None)


#: Short rounds and quick votes (the fault tests' timings): a follower stands, and is elected, sooner
#: after the leader's last heartbeat than that leader's rounds find themselves alone.
QUICK = Timings(
    heart_beat_time_interval_ms=1000, max_heart_beat_leak=2, min_vote_interval_ms=50, max_vote_interval_ms=150
)


def _cut_off_leader(
    seed: int, timings: Timings | None, refuse: bool = False
) -> tuple[Cluster, Node, list[tuple[int, bool, bool]]]:
    """A group whose leader is then cut off both followers, run until one of them leads and 3 s more:
    per step, (time, the old leader's lease fresh, another member leading meanwhile)."""
    c = Cluster(seed=seed, loss=0.0, timings=timings, refuse=refuse)
    c.run(5000, append_every=100)
    old = c.leader()
    assert old is not None
    c.cut |= {frozenset((old.m.self_id, p)) for p in PEERS if p != old.m.self_id}
    seen: list[tuple[int, bool, bool]] = []
    elected = None
    while elected is None or c.now < elected + 3000:
        c.run(STEP)
        another = any(n is not None and n is not old and n.is_leader for n in c.nodes.values())
        seen.append((c.now, old.lease_fresh(c.now), another and old.is_leader))
        if another and elected is None:
            elected = c.now
        assert c.now < 30_000, "no leader elected after the cut"
    return c, old, seen


@pytest.mark.parametrize("refuse", [False, True], ids=["stall", "refuse"])
@pytest.mark.parametrize("timings", [None, QUICK], ids=["defaults", "quick"])
@pytest.mark.parametrize("seed", range(8))
def test_a_leader_cut_off_has_no_lease_once_another_can_be_elected(
    seed: int, timings: Timings | None, refuse: bool
) -> None:
    """Its lease (the last round of heartbeats a quorum acknowledged, plus the election timeout) ends before
    either follower can stand for election, so no step finds it fresh while another member leads."""
    c, old, seen = _cut_off_leader(seed, timings, refuse)
    fresh_with_another = [(at, two) for at, fresh, two in seen if fresh and two]
    assert not fresh_with_another, fresh_with_another[:3]
    assert not old.lease_fresh(c.now)


def test_a_leader_cut_off_leads_on_after_another_is_elected_but_without_a_lease() -> None:
    """What the lease is for: a leader alone steps down only when a round of heartbeats finds no quorum
    for the election timeout, a round after its followers may stand, so for a while two members lead
    (different terms): the old one's is_leader is not enough to lend on."""
    overlaps = [at for seed in range(8) for at, _, two in _cut_off_leader(seed, QUICK, refuse=True)[2] if two]
    assert overlaps


def test_a_leader_has_its_lease_from_its_first_acknowledged_heartbeats_and_not_while_handing_over() -> None:
    c = Cluster(seed=4, loss=0.0)
    c.run(5000)
    leader = c.leader()
    assert leader is not None and leader.lease_fresh(c.now)
    follower = next(n for n in c.nodes.values() if n is not None and n is not leader)
    assert not follower.lease_fresh(c.now)
    code, _ = leader.transfer_request(follower.m.self_id)
    assert code == DLedgerResponseCode.SUCCESS and leader.is_leader
    assert not leader.lease_fresh(c.now)  # the transferee may be elected at any moment now
    leader.m.transferee = None  # (the transfer abandoned)
    assert not leader.lease_fresh(c.now)  # (a follower may have heard the name: `test_a_transfer_takes_...`)
    c.run(3000)
    assert leader.lease_fresh(c.now)
    leader.to_candidate(leader.m.term)
    leader.to_leader(leader.m.term)  # a leader anew: no round of heartbeats acknowledged yet
    assert leader.is_leader and not leader.lease_fresh(c.now)


def _lease_faults(
    seed: int, peers: dict[str, str], timings: Timings | None, restarts: bool = False
) -> Cluster:
    """A group run through faults, checked at every step for two members leading on a fresh lease: links
    cut both ways or one way, a member cut off, a link slow, heartbeats and answers lost or late; with
    `restarts`, members also crash and start again at once or a moment later, as the server starts them
    (checking first, keeping their promises: `Node.remember`)."""
    c = Cluster(
        seed=seed,
        peers=peers,
        loss=0.05,
        timings=timings,
        lease_check=True,
        refuse=seed % 2 == 1,
        careful=restarts,
        keeps=restarts,
    )
    rng = random.Random(seed * 104729)
    names = list(peers)
    faults = ["partition", "one-way", "isolate", "slow", "slow", "none"]
    for _ in range(10):
        fault = rng.choice([*faults, "restart", "restart", "restart"] if restarts else faults)
        leader = c.leader()
        victim = leader.m.self_id if leader is not None and rng.random() < 0.5 else rng.choice(names)
        other = rng.choice([n for n in names if n != victim])
        if fault == "partition":
            c.cut.add(frozenset((victim, other)))
        elif fault == "one-way":
            c.one_way.add((victim, other))
        elif fault == "isolate":
            c.cut |= {frozenset((victim, n)) for n in names if n != victim}
        elif fault == "slow":
            for n in names:
                if n != victim:
                    c.slow[(victim, n)] = rng.randint(200, 2500)
        elif fault == "restart" and leader is not None:
            # followers restarted while another, cut off the leader, stands and asks them
            lead = leader.m.self_id
            followers = [n for n in names if n != lead]
            rng.shuffle(followers)
            candidate, restarted = followers[0], followers[1 : 1 + len(names) // 2]
            c.cut.add(frozenset((lead, candidate)))
            c.run(rng.randint(3000, 12_000))  # (no sends: the candidate's log stays as long as theirs)
            for victim in restarted:
                c.crash(victim)
            c.run(rng.choice([0, 0, rng.randint(10, 500)]))
            for victim in restarted:
                c.start(victim)
        c.run(rng.randint(500, 15_000), append_every=100)
        c.cut.clear()
        c.one_way.clear()
        c.slow.clear()
        c.run(rng.randint(0, 3000), append_every=100)
    return c


#: One heartbeat missed is all a follower may miss: the lease is one interval.
LEAK1 = Timings(max_heart_beat_leak=1)


@pytest.mark.slow
@pytest.mark.parametrize("restarts", [False, True], ids=["running", "restarts"])
@pytest.mark.parametrize(
    ("peers", "timings"),
    [(PEERS, None), (PEERS, QUICK), (PEERS, LEAK1), (PEERS5, None), (PEERS5, QUICK), (PEERS5, LEAK1)],
    ids=["3-defaults", "3-quick", "3-leak1", "5-defaults", "5-quick", "5-leak1"],
)
@pytest.mark.parametrize("seed", range(16))
def test_no_two_members_lead_on_a_fresh_lease_at_once(
    seed: int, peers: dict[str, str], timings: Timings | None, restarts: bool
) -> None:
    """A member that hears its leader neither votes for a candidate nor moves its term for one, and one that
    answered a candidate for its leader's silence acknowledges no late heartbeat of it: a majority that
    acknowledged a round refuses every candidate until the lease from that round has run out. (Following
    DLedger's `handleVote`, a follower that reached its leader's term through a heartbeat voted for a
    candidate of that term, whose next term then took every follower from its leader at once; and at
    ``maxHeartBeatLeak=1`` a follower stood one interval after the last heartbeat.) With `restarts`,
    followers are also restarted while another, cut off the leader, stands: each kept until when it
    refuses other candidates, so one restarted while a lease runs still refuses them (forgetting it, a
    member voted for the candidate as soon as its restart check ended: docs/dledger.md)."""
    c = _lease_faults(seed, peers, timings, restarts)
    assert not c.overlaps, c.overlaps[:3]


@pytest.mark.parametrize("timings", [None, QUICK, LEAK1], ids=["defaults", "quick", "leak1"])
@pytest.mark.parametrize("seed", range(6))
def test_a_follower_that_took_its_leaders_term_from_a_heartbeat_lets_no_candidate_depose_it(
    seed: int, timings: Timings | None
) -> None:
    """The leader was elected with one follower's vote; the other took the term from a heartbeat (no vote
    of its own there). The voter is then cut off the leader alone: it stands in the term, and, following
    DLedger's ``handleVote``, the other follower gave it its vote, its round found no leader, it asked in
    the next term, and the other left its leader at once for it: elected while the old leader's lease (that
    follower's acknowledgement) was fresh. Now the follower refuses it, and the leader leads on."""
    c = Cluster(seed=seed, loss=0.0, timings=timings, refuse=True, lease_check=True)
    c.run(5000, append_every=100)
    c.run(1000)
    leader = c.leader()
    assert leader is not None
    voter, heard = (n for n in c.nodes.values() if n is not None and n is not leader)
    voter.m.voted_for, heard.m.voted_for = leader.m.self_id, None
    c.disks[voter.m.self_id].vote, c.disks[heard.m.self_id].vote = leader.m.self_id, None
    c.cut.add(frozenset((leader.m.self_id, voter.m.self_id)))
    c.run(20_000)  # (no sends: the voter's log stays as up to date as the other's)
    assert not c.overlaps, c.overlaps[:3]
    assert c.leader() is leader


def _follower(lease: bool = True, voted: str | None = None, timings: Timings | None = None) -> Node:
    """n1, following n0 in term 3 from a heartbeat at 1000 ms (a leader of ours: `lease`)."""
    node = Node(MemberState("g", "n1", dict(PEERS), term=3, voted_for=voted), MemoryRaftLog(), timings)
    assert node.on_heartbeat(_beat("n0", 3, lease), 1000).code == DLedgerResponseCode.SUCCESS
    assert (node.m.role, node.m.leader_id) == (Role.FOLLOWER, "n0")
    return node


def _beat(leader: str, term: int, lease: bool = True, transferee: str | None = None) -> HeartBeatRequest:
    return HeartBeatRequest(
        group="g",
        local_id=leader,
        remote_id="n1",
        leader_id=leader,
        term=term,
        mqctl_lease=True if lease else None,
        mqctl_transferee=transferee,
    )


def _ask(node: Node, candidate: str, term: int, now: int) -> VoteResult:
    """`candidate`'s vote request in `term`, its log as `node`'s, answered at `now`."""
    req = VoteRequest(group="g", local_id=candidate, remote_id=node.m.self_id, leader_id=candidate, term=term)
    req.ledger_end_index, req.ledger_end_term = node.log.last_index, node.log.last_term
    node._now = now
    return node.on_vote(req).vote_result


def test_a_follower_that_hears_its_leader_neither_votes_nor_moves_its_term_for_a_candidate() -> None:
    """It reached its leader's term through a heartbeat, with no vote of its own there: DLedger's
    ``handleVote`` gives a candidate of that term its vote, and leaves the leader for a candidate of a
    later term at once."""
    node = _follower()
    assert _ask(node, "n2", 3, 2000) is VoteResult.REJECT_ALREADY_HAS_LEADER
    assert _ask(node, "n2", 4, 2000) is VoteResult.REJECT_ALREADY_HAS_LEADER
    assert (node.m.term, node.m.voted_for, node.m.role, node.m.leader_id) == (3, None, Role.FOLLOWER, "n0")
    # its timeout run out (as its tick would find it), it votes
    assert _ask(node, "n2", 3, 1000 + node.follower_timeout() + 1) is VoteResult.ACCEPT
    assert node.m.role is Role.CANDIDATE


def test_a_follower_lets_its_own_leaders_candidacy_and_the_named_transferee_through() -> None:
    """Its leader stood (it stepped down, its lease with it); a transferee its leader's heartbeat names
    takes the leadership while the leader lends nothing."""
    node = _follower()
    assert _ask(node, "n0", 4, 2000) is VoteResult.REJECT_TERM_NOT_READY
    node = _follower()
    assert _ask(node, "n2", 4, 2000) is VoteResult.REJECT_ALREADY_HAS_LEADER
    assert node.on_heartbeat(_beat("n0", 3, transferee="n2"), 2100).code == DLedgerResponseCode.SUCCESS
    assert _ask(node, "n2", 4, 2200) is VoteResult.REJECT_TERM_NOT_READY
    node = _follower()
    assert node.on_heartbeat(_beat("n0", 3, transferee="n2"), 2100).code == DLedgerResponseCode.SUCCESS
    assert node.on_heartbeat(_beat("n0", 3), 2200).code == DLedgerResponseCode.SUCCESS  # (abandoned)
    assert _ask(node, "n2", 4, 2300) is VoteResult.REJECT_ALREADY_HAS_LEADER


def test_a_follower_of_a_leader_without_a_lease_votes_as_dledger_does() -> None:
    """A 4.9.8 leader's heartbeat says nothing of a lease: its follower of ours keeps DLedger's rule, so a
    transfer to a member of ours (which such a leader names to nobody) still takes the leadership."""
    node = _follower(lease=False)
    assert _ask(node, "n2", 3, 2000) is VoteResult.ACCEPT
    node = _follower(lease=False)
    assert _ask(node, "n2", 4, 2000) is VoteResult.REJECT_TERM_NOT_READY


def test_a_leader_neither_votes_nor_moves_its_term_for_a_candidate_but_its_transferee() -> None:
    c = Cluster(seed=4, loss=0.0)
    c.run(5000)
    leader = c.leader()
    assert leader is not None
    term, other = leader.m.term, next(p for p in PEERS if p != leader.m.self_id)
    assert _ask(leader, other, term + 1, c.now) is VoteResult.REJECT_ALREADY_HAS_LEADER
    assert leader.is_leader and leader.m.term == term
    code, _ = leader.transfer_request(other)
    assert code == DLedgerResponseCode.SUCCESS
    assert _ask(leader, other, term + 1, c.now) is VoteResult.REJECT_TERM_NOT_READY
    assert not leader.is_leader


def test_a_follower_whose_timeout_is_near_stands_aside_for_a_candidate() -> None:
    """Its leader last heard less than half a heartbeat interval short of its timeout ago: a candidate of
    its term (or a later one) is refused ALREADY_VOTED, which has it move to the next term after a vote
    interval, and the member acknowledges no heartbeat of that leader in its term for a while: its timeout
    runs on, and a late heartbeat renews no lease, since the candidate's next term will have its vote."""
    node = _follower(voted="n0")
    timeout, half = node.follower_timeout(), node.t.heart_beat_time_interval_ms // 2
    window = 1000 + timeout - half
    assert _ask(node, "n2", 3, window - 10) is VoteResult.REJECT_ALREADY_HAS_LEADER
    assert node.on_heartbeat(_beat("n0", 3), window - 5).code == DLedgerResponseCode.SUCCESS  # (as before)
    beat_at = window - 5
    asked = beat_at + timeout - half + 10
    assert _ask(node, "n2", 3, asked) is VoteResult.REJECT_ALREADY_VOTED
    assert (node.m.role, node.m.term) == (Role.FOLLOWER, 3)
    late = node.on_heartbeat(_beat("n0", 3), asked + 50)
    assert late.code == DLedgerResponseCode.ILLEGAL_MEMBER_STATE
    node.tick(beat_at + timeout + 1)
    assert node.m.role is Role.CANDIDATE
    assert _ask(node, "n2", 4, beat_at + timeout + 100) is VoteResult.REJECT_TERM_NOT_READY
    # it stood aside for a while only: a leader heard again once that is over is followed again
    node = _follower(voted="n0")
    _ask(node, "n2", 3, 1000 + timeout - 500)
    assert node.on_heartbeat(_beat("n0", 3), 1000 + 2 * timeout).code == DLedgerResponseCode.SUCCESS
    assert (node.m.role, node.m.leader_id) == (Role.FOLLOWER, "n0")


def test_a_follower_stands_after_two_heartbeat_intervals_at_least() -> None:
    """At ``maxHeartBeatLeak=1`` it stood one interval after the last heartbeat, as the next was due."""
    node = _follower(timings=LEAK1)
    interval = LEAK1.heart_beat_time_interval_ms
    node.tick(1000 + interval + 50)
    assert node.m.role is Role.FOLLOWER
    node.tick(1000 + 2 * interval + 1)
    assert node.m.role is Role.CANDIDATE


def test_a_transfer_takes_no_lease_from_rounds_that_named_the_transferee() -> None:
    """Its followers let the transferee's vote through once a heartbeat names it; abandoned (no answer came),
    the leader lends again only on a round its followers acknowledged without the name."""
    c = Cluster(seed=4, loss=0.0)
    c.run(5000)
    leader = c.leader()
    assert leader is not None and leader.lease_fresh(c.now)
    target = next(p for p in PEERS if p != leader.m.self_id)
    other = next(n for n in c.nodes.values() if n is not None and n is not leader and n.m.self_id != target)
    code, _ = leader.transfer_request(target)
    assert code == DLedgerResponseCode.SUCCESS
    c.run(3000)  # (the request never sent: the transferee does nothing)
    assert other._handover == target and leader.lease_start == NO_LEASE
    leader.transfer_answered(leader.m.term, None)
    assert not leader.lease_fresh(c.now)
    c.run(3000)
    assert other._handover is None and leader.lease_fresh(c.now)


@pytest.mark.parametrize("seed", range(12))
def test_followers_timing_out_moments_apart_elect_without_a_second_election_timeout(seed: int) -> None:
    """The leader dies (its port refuses); its followers, both of which voted for it, time out tens of
    milliseconds apart, the later one an entry behind, so only the first can be elected. The first asks
    the second while it still follows: ALREADY_VOTED (its own timeout is less than half an interval
    away), so the first moves to the next term after a vote interval, where the second, timed out by then,
    votes for it. (Answered ALREADY_HAS_LEADER, the first waited a vote interval and a whole election
    timeout more before it stood again.)"""
    c = Cluster(seed=seed, loss=0.0, refuse=True)
    c.run(5000, append_every=100)
    c.run(1000)
    old = c.leader()
    assert old is not None
    old_id = old.m.self_id
    first, second = (n for n in c.nodes.values() if n is not None and n is not old)
    sent = old.last_send_beat
    while old.last_send_beat == sent or old.beat_round is not None:  # a round of heartbeats answered
        c.run(STEP)
    c.one_way.add((old_id, second.m.self_id))
    c.client_append(c.now)
    c.run(100)
    assert first.log.last_index == second.log.last_index + 1
    c.crash(old_id)
    c.cut |= {frozenset((old_id, p)) for p in PEERS if p != old_id}
    gap = random.Random(seed).randint(40, 100)
    first.last_leader_beat, second.last_leader_beat = c.now - gap, c.now
    for node in (first, second):
        node.m.voted_for = old_id
    start = c.now
    while c.leader() is old or c.leader() is None:
        c.run(STEP)
        assert c.now - start < 30_000, "no leader elected"
    took = c.now - start
    assert c.leader() is first
    timings = Timings()
    timeout = timings.max_heart_beat_leak * timings.heart_beat_time_interval_ms
    assert took < timeout + 2 * timings.max_vote_interval_ms, took


def _keeping_follower(timings: Timings | None = None) -> Node:
    """`_follower` whose owner keeps its promises (as the server does), the first one kept."""
    node = Node(MemberState("g", "n1", dict(PEERS), term=3), MemoryRaftLog(), timings)
    node.keeps_promises = True
    assert node.on_heartbeat(_beat("n0", 3), 1000).code == DLedgerResponseCode.SUCCESS
    assert node.unkept is not None
    node.promise_kept(*node.unkept)
    node.unkept = None
    return node


def test_an_acknowledgement_waits_for_its_promise_to_be_kept_only_when_what_is_kept_falls_short() -> None:
    """A follower that acknowledges a leader of ours promises to refuse other candidates for its follower
    timeout. Its owner keeps that on disk before the acknowledgement goes out, with half a timeout to
    spare: the next writes come no oftener than that, and a new leader, or a 4.9.8 one, asks its own."""
    node = Node(MemberState("g", "n1", dict(PEERS), term=3), MemoryRaftLog())
    timeout = node.follower_timeout()
    assert node.on_heartbeat(_beat("n0", 3), 1000).code == DLedgerResponseCode.SUCCESS
    assert node.unkept is None  # (an owner keeping nothing is asked nothing)
    node = _keeping_follower()
    assert node._kept == ("n0", 1000 + timeout + timeout // 2)
    beats = [1000 + i * 500 for i in range(1, 17)]
    asked = []
    for at in beats:
        assert node.on_heartbeat(_beat("n0", 3), at).code == DLedgerResponseCode.SUCCESS
        if node.unkept is not None:
            asked.append(at)
            assert node.unkept == ("n0", at + timeout + timeout // 2)
            node.promise_kept(*node.unkept)
            node.unkept = None
    assert asked == [1000 + timeout // 2 + 500, 1000 + timeout + 1000], asked
    # a later leader's acknowledgement is covered by nothing kept of another
    assert node.on_heartbeat(_beat("n2", 4), 10000).code == DLedgerResponseCode.TERM_NOT_READY
    node.m.next_term()
    assert node.on_heartbeat(_beat("n2", 4), 10010).code == DLedgerResponseCode.SUCCESS
    assert node.unkept == ("n2", 10010 + timeout + timeout // 2)
    node = Node(MemberState("g", "n1", dict(PEERS), term=3), MemoryRaftLog())
    node.keeps_promises = True
    assert node.on_heartbeat(_beat("n2", 3, lease=False), 2000).code == DLedgerResponseCode.SUCCESS
    assert node.unkept is None  # (a 4.9.8 leader's follower votes as DLedger's does: it promises nothing)


def test_a_follower_starts_keeping_its_next_promise_ahead_so_that_no_acknowledgement_waits() -> None:
    """Within a quarter timeout of falling short, the next promise is started (`ahead`), nobody waiting for
    it: with its writer keeping up, no acknowledgement waits (a write every heartbeat at the default
    timings). Its writer stalled, the acknowledgements wait once what is kept falls short."""
    node = _keeping_follower()
    timeout = node.follower_timeout()
    started = []
    for at in [1000 + i * 500 for i in range(1, 25)]:
        assert node.on_heartbeat(_beat("n0", 3), at).code == DLedgerResponseCode.SUCCESS
        assert node.unkept is None, at
        if node.ahead is not None:
            started.append(at)
            assert node.ahead == ("n0", at + timeout + timeout // 2)
            node.promise_kept(*node.ahead)
            node.ahead = None
    assert started == [3000, 5000, 7000, 9000, 11000, 13000], started
    node = _keeping_follower()  # (its writer stalled: nothing it starts is kept)
    for at in [1500, 2000, 2500, 3000, 3500, 4000]:
        node.on_heartbeat(_beat("n0", 3), at)
        assert node.unkept is None and (node.ahead is not None) == (at >= 3000), at
    node.on_heartbeat(_beat("n0", 3), 4500)
    assert node.unkept == ("n0", 4500 + timeout + timeout // 2)


def test_a_follower_whose_disk_stalls_keeps_its_leader_s_lease() -> None:
    """Both followers' writers stalled for longer than a follower timeout (a hung device): each
    acknowledgement waits `keep_wait_ms` at most, so the leader keeps its quorum and its lease throughout
    (waiting for the writes, the leader lost it and elections churned until the disks came back)."""
    for seed in range(3):
        c = Cluster(seed=seed, loss=0.0, keeps=True, lease_check=True)
        c.run(8000, append_every=100)
        old = c.leader()
        assert old is not None
        for p in PEERS:
            if p != old.m.self_id:
                c.writes[p] = c.now + 20_000
        for _ in range(25_000 // STEP):
            c.run(STEP)
            assert c.leader() is old and old.lease_fresh(c.now), (seed, c.now)


def _restarted(until: int, now: int, leader: str = "n0", timings: Timings | None = None) -> Node:
    """n1 started again in term 3 at `now`, having kept that it refuses candidates but `leader` until then."""
    node = Node(MemberState("g", "n1", dict(PEERS), term=3, voted_for="n0"), MemoryRaftLog(), timings)
    node.keeps_promises = True
    node._now = now
    node.remember(leader, until, now)
    return node


def test_a_member_restarted_within_its_promise_refuses_other_candidates_until_its_deadline() -> None:
    """As a follower that still hears its leader: ALREADY_HAS_LEADER, its term unchanged, then ALREADY_VOTED
    once the deadline is nearer than a candidate refused so waits before it asks again (its leader may be
    dead: the candidate asks in the next term a vote interval later); it stands for no election meanwhile.
    Its leader's own candidacy passes (it stepped down, its lease with it), and past the deadline it votes."""
    node = _restarted(10**9, now=5000)
    t = node.t
    until = node._remembered[1] if node._remembered is not None else 0
    backoff = t.min_vote_interval_ms + t.max_heart_beat_leak * t.heart_beat_time_interval_ms
    assert until > 5100 + backoff
    assert _ask(node, "n2", 4, 5100) is VoteResult.REJECT_ALREADY_HAS_LEADER
    assert _ask(node, "n2", 3, 5100) is VoteResult.REJECT_ALREADY_HAS_LEADER
    assert (node.m.term, node.m.voted_for, node.m.role) == (3, "n0", Role.CANDIDATE)
    assert _ask(node, "n2", 4, until - backoff - 1) is VoteResult.REJECT_ALREADY_HAS_LEADER
    assert _ask(node, "n2", 4, until - backoff) is VoteResult.REJECT_ALREADY_VOTED
    assert node.m.term == 3
    for now in range(5000, until, STEP):
        assert node.tick(now) == [], now  # (it stands for no election)
    assert node.vote_round is None and node.m.term == 3
    assert _ask(node, "n2", 4, until) is VoteResult.REJECT_TERM_NOT_READY  # (over: as DLedger answers)
    node.m.next_term()
    assert _ask(node, "n2", 4, until + 10) is VoteResult.ACCEPT
    node = _restarted(until, now=5000)
    assert _ask(node, "n0", 4, 5100) is VoteResult.REJECT_TERM_NOT_READY  # (its leader's own candidacy)
    node = _restarted(until, now=5000)
    assert node.tick(until - 1) == []
    outs = node.tick(until)
    assert node.vote_round is not None and {o.peer for o in outs} == {"n0", "n2"}  # (it stands)


def test_a_member_restarted_within_its_promise_follows_a_leader_it_hears_as_before() -> None:
    """The promise kept was for the leader it then followed: once it hears a leader (that one, or one elected
    after that promise ran out) it follows it and refuses what a follower refuses."""
    node = _restarted(12_000, now=5000)
    assert node.on_heartbeat(_beat("n0", 3), 5200).code == DLedgerResponseCode.SUCCESS
    assert node.unkept is None  # (what it kept still covers the acknowledgement)
    assert node._remembered is None and node.m.leader_id == "n0"
    timeout = node.follower_timeout()
    assert _ask(node, "n2", 4, 5200 + timeout - 1000) is VoteResult.REJECT_ALREADY_HAS_LEADER
    node = _restarted(9000, now=5000)
    node.m.term = 4
    assert node.on_heartbeat(_beat("n2", 4), 5200).code == DLedgerResponseCode.SUCCESS
    assert node.unkept == ("n2", 5200 + timeout + timeout // 2)
    assert _ask(node, "n0", 5, 5300) is VoteResult.REJECT_ALREADY_HAS_LEADER  # (n2's follower now)


def test_a_member_restarted_remembers_no_deadline_further_than_its_timings_could_have_kept() -> None:
    """A deadline already past keeps nothing; one further ahead than its own timings write (changed
    meanwhile, or a damaged clock) is cut to what they write: the first election waits no longer."""
    node = _restarted(5000, now=5000)
    assert node._remembered is None
    timeout = node.follower_timeout()
    node = _restarted(10**12, now=5000)
    assert node._remembered == ("n0", 5000 + timeout + timeout // 2)


@pytest.mark.parametrize("leader", ["n9", "n1", ""], ids=["not-a-peer", "itself", "none"])
def test_a_member_restarted_with_a_promise_to_none_of_its_peers_keeps_none(leader: str) -> None:
    """A leader its peers do not name (dLegerPeers changed, or another group's file): it waits for nobody,
    rather than hold a whole group's election up for a leader that cannot come."""
    node = _restarted(10**9, now=5000, leader=leader)
    assert node._remembered is None
    assert _ask(node, "n2", 4, 5100) is VoteResult.REJECT_TERM_NOT_READY


def _restarted_during_a_lease(seed: int, keeps: bool) -> Cluster:
    """A group whose leader lends on a lease acknowledged by one follower (A) while the other (B), cut off
    the leader, stands and asks A, which hears the leader and refuses; A then crashes just after
    acknowledging a round, B's next question a moment away, and starts again at once (kill -9 and its
    supervisor), as the server starts it: checking with its peers first."""
    c = Cluster(seed=seed, loss=0.0, careful=True, refuse=True, lease_check=True, keeps=keeps)
    c.run(5000, append_every=100)
    c.run(1000)
    leader = c.leader()
    assert leader is not None
    a, b = (p for p in PEERS if p != leader.m.self_id)
    c.cut.add(frozenset((leader.m.self_id, b)))  # (no sends meanwhile: B's log stays as long as A's)
    c.run(7000)
    while True:
        na, nb = c.nodes[a], c.nodes[b]
        assert na is not None and nb is not None
        asks_soon = nb.m.role is Role.CANDIDATE and 200 <= nb.next_vote_time - c.now <= 1500
        if na.last_leader_beat == c.now and asks_soon:
            break
        c.run(STEP)
        assert c.now < 60_000, "B never asked A again"
    c.crash(a)
    c.start(a)
    c.run(15_000)
    return c


@pytest.mark.parametrize("seed", range(12))
def test_a_member_restarted_during_a_lease_votes_no_second_leader_in_while_it_is_fresh(seed: int) -> None:
    """It kept until when it refuses candidates but its leader: started again, it refuses B until then (or
    until it hears its leader again), so the leader's lease runs out before B can be elected."""
    c = _restarted_during_a_lease(seed, keeps=True)
    assert not c.overlaps, c.overlaps[:3]


def test_without_its_promise_kept_a_member_restarted_during_a_lease_votes_a_second_leader_in() -> None:
    """What the kept promise is for: a member that forgot when it last heard its leader votes for B once
    its restart check ends, and B leads while the old leader's lease is fresh: in nearly every seed."""
    overlapping = [seed for seed in range(12) if _restarted_during_a_lease(seed, keeps=False).overlaps]
    assert len(overlapping) >= 11, overlapping


def test_a_group_restarted_whole_within_a_lease_elects_its_old_leader_at_once() -> None:
    """Every member restarts at once (a host's brokers restarted together): the followers refuse every
    candidate but the leader they kept, whose candidacy passes, so the first election waits for nothing
    more than a restart's check; killed too, it waits at most for the kept deadlines."""
    c = Cluster(seed=5, loss=0.0, careful=True, refuse=True, lease_check=True, keeps=True)
    c.run(6000, append_every=100)
    old = c.leader()
    assert old is not None
    old_id = old.m.self_id
    for p in PEERS:
        c.crash(p)
    for p in PEERS:
        c.start(p)
    start = c.now
    while c.leader() is None:
        c.run(STEP)
        assert c.now - start < 30_000, "no leader elected"
    assert c.leader() is c.nodes[old_id]
    assert c.now - start < 3 * Timings().max_vote_interval_ms, c.now - start
    # the leader gone for good: the followers wait out what they kept, and elect one of them
    c.run(3000)
    kept = max(d.heard[1] for p, d in c.disks.items() if p != old_id and d.heard is not None)
    for p in PEERS:
        c.crash(p)
    c.cut |= {frozenset((old_id, p)) for p in PEERS if p != old_id}
    for p in PEERS:
        if p != old_id:
            c.start(p)
    start = c.now
    while c.leader() is None:
        c.run(STEP)
        assert c.now - start < 30_000, "no leader elected"
    timings = Timings()
    assert c.now <= kept + 3 * timings.max_vote_interval_ms + timings.heart_beat_time_interval_ms, (
        c.now - kept
    )
    assert not c.overlaps, c.overlaps[:3]


def a_loaded_leader(entries: int, *, busy: tuple[str, ...] = ("n1", "n2")) -> Node:
    """`a_leader` whose followers both took every entry so far by appends, those in `busy` with a push of
    the last one still in flight."""
    node = a_leader(entries)
    for peer in ("n1", "n2"):
        p = node.pushes[peer]
        node._to_append(p, entries - 1)
        if peer in busy:
            p.inflight[entries - 1] = 0
    return node


def appends(outs: list[Out], peer: str) -> list[tuple[int, int]]:
    """(first index, count) of each APPEND push to `peer` among `outs`."""
    return [
        (o.request.first_entry_index, o.request.count)
        for o in outs
        if o.peer == peer and isinstance(o.request, PushEntryRequest) and o.request.type is PushType.APPEND
    ]


def test_a_lone_send_is_pushed_at_once() -> None:
    """No push in flight: the entry a send appended is pushed in the pass that appended it, whatever the
    loop's next poll may bring."""
    node = a_loaded_leader(3, busy=())
    node.log.append_leader(b"lone", 1)
    assert not node.hold_push(2)
    outs = node.tick(0)
    assert appends(outs, "n1") == appends(outs, "n2") == [(3, 1)]


def test_a_round_of_sends_waits_for_the_next_poll_only_while_every_follower_is_busy() -> None:
    """Under load (each follower still has a push in flight, so it reads the next one after answering that
    one) the sends of a pass wait one zero-timeout poll for the sends it brings, as long as each poll
    brings some; pushed once a poll brings none, or as soon as one follower is idle (it would take them
    now: the quorum needs only it)."""
    node = a_loaded_leader(3)
    node.log.append_leader(b"a", 1)
    assert node.hold_push(2)  # (this pass appended 3)
    assert not node.hold_push(3)  # the next poll brought nothing: pushed
    node.log.append_leader(b"b", 1)
    assert node.hold_push(3)
    node.pushes["n2"].inflight.clear()  # n2 answered: idle
    assert not node.hold_push(3)
    assert not a_loaded_leader(3, busy=("n1",)).hold_push(1)


def test_a_full_window_is_pushed_at_once() -> None:
    """However busy the followers, a follower with `PUSH_WINDOW` entries not yet pushed to it is pushed at
    once (in one push, up to the batch's limits)."""
    from daemon.dledger.machines import PUSH_WINDOW

    node = a_loaded_leader(1)
    for i in range(PUSH_WINDOW - 1):
        node.log.append_leader(b"w%d" % i, 1)
        assert node.hold_push(node.log.last_index - 1)
    node.log.append_leader(b"full", 1)
    assert not node.hold_push(node.log.last_index - 1)
    assert appends(node.tick(0), "n1") == [(1, PUSH_WINDOW)]


def test_a_held_round_of_a_cut_off_leader_still_times_out_as_before() -> None:
    """Followers that never answer keep their pushes in flight, so a round waits for polls that bring more
    sends (never for a timer): its waits still fail at their own deadline, and the pushes are sent again
    from what the followers acknowledged once they time out."""
    node = a_loaded_leader(2)
    node.log.append_leader(b"unanswered", 1)
    node.track(2, 0)
    assert node.hold_push(1)
    node.tick(10)  # (the held round goes out with the next pass that pushes)
    node.tick(node.t.max_wait_ack_time_ms - 1)
    assert node.failed == []
    node.tick(node.t.max_wait_ack_time_ms)
    assert node.failed == [
        ((2, node.t.max_wait_ack_time_ms, None), DLedgerResponseCode.WAIT_QUORUM_ACK_TIMEOUT)
    ]
    again = node.tick(node.t.max_wait_ack_time_ms + node.t.max_push_time_out_ms)
    assert appends(again, "n1") == [(2, 1)]


def a_leader_pushing(entries: int) -> Node:
    """`a_loaded_leader` whose followers both took every entry by a push answered at time 0."""
    node = a_loaded_leader(entries, busy=())
    for p in node.pushes.values():
        p.last_push = 0
    return node


def test_only_the_follower_the_quorum_waits_for_is_pushed_every_pass() -> None:
    """A group of three commits on one follower's answer: the one holding the most (n1 at a tie) is pushed
    each pass; the other takes the same entries in fewer, larger pushes, once `SPARE_PUSH_ENTRIES` wait for
    it or its last push is `SPARE_PUSH_MS` old. Each answer commits as before, whoever gives it."""
    node = a_leader_pushing(3)
    node.log.append_leader(b"a", 1)
    outs = node.tick(1)
    assert appends(outs, "n1") == [(3, 1)] and appends(outs, "n2") == []
    assert node.spare_followers(1) == ["n2"]
    node.pushes["n1"].inflight.clear()  # (n1 answered)
    node.log.append_leader(b"b", 1)
    outs = node.tick(2)
    assert appends(outs, "n1") == [(4, 1)] and appends(outs, "n2") == []
    outs = node.tick(SPARE_PUSH_MS)  # n2's last push is old enough: what waits goes in one push
    assert appends(outs, "n2") == [(3, 2)] and appends(outs, "n1") == []

    node = a_leader_pushing(3)
    for i in range(SPARE_PUSH_ENTRIES):
        node.pushes["n1"].inflight.clear()
        node.log.append_leader(b"w%d" % i, 1)
        pushed = appends(node.tick(1), "n2")
        assert pushed == ([] if i < SPARE_PUSH_ENTRIES - 1 else [(3, SPARE_PUSH_ENTRIES)])


def test_every_follower_is_pushed_while_the_one_waited_for_lags() -> None:
    """A push to the follower the quorum waits for unanswered `QUORUM_STALL_MS` (a paused or lost member):
    the other is pushed at once, so its answer commits; and the one holding the most is waited for next."""
    node = a_leader_pushing(3)
    node.log.append_leader(b"a", 1)
    node.track(3, 1)
    assert appends(node.tick(1), "n1") == [(3, 1)]
    node.log.append_leader(b"b", 1)
    assert appends(node.tick(QUORUM_STALL_MS), "n2") == []
    (push,) = [o for o in node.tick(QUORUM_STALL_MS + 1) if o.peer == "n2"]
    assert appends([push], "n2") == [(3, 2)]
    held = PushEntryResponse(code=int(DLedgerResponseCode.SUCCESS), term=1, group="g", index=3, count=2)
    node.on_response(push, held, QUORUM_STALL_MS + 2)
    assert node.log.committed_index == 4 and [w[0] for w in node.answered] == [3]
    node.log.append_leader(b"c", 1)
    outs = node.tick(QUORUM_STALL_MS + 3)
    assert appends(outs, "n2") == [(5, 1)] and appends(outs, "n1") == []  # (n1 still lags)


def test_every_follower_is_pushed_while_leadership_is_handed_over() -> None:
    """The transferee has to catch up before it stands: no follower waits for its push then."""
    node = a_leader_pushing(3)
    node.m.transferee = "n2"
    node.log.append_leader(b"a", 1)
    outs = node.tick(1)
    assert appends(outs, "n1") == appends(outs, "n2") == [(3, 1)]


# ------------------------------------------------------------------ members that lost their store


def _a_member_lags_while_two_commit(c: Cluster) -> tuple[str, str, str]:
    """A leads, B is cut off while A and C commit appends: A, B (behind, still cut off) and C."""
    c.run(5000)
    leader = c.leader()
    assert leader is not None
    a = leader.m.self_id
    b, c_ = [p for p in PEERS if p != a]
    c.run(1000, append_every=50)
    c.cut |= {frozenset((b, a)), frozenset((b, c_))}
    c.run(2000, append_every=50)
    c.run(500)
    assert c.acked and c.acked[-1][0] > c.disks[b].log.last_index, "B lags nothing"
    return a, b, c_


def _elect_none_while_down(c: Cluster, a: str) -> None:
    """A crashes and every link heals: none is elected for a while (nor a committed entry changed)."""
    c.crash(a)
    c.cut.clear()
    c.one_way.clear()
    c.run(20_000, append_every=100)  # (the checker raises should a committed entry change)
    elected = c.leader()
    assert elected is None, f"{elected.m.self_id} elected while A is down"


def _lose_a_store_while_the_lagging_member_is_cut_off(c: Cluster) -> tuple[str, str, str]:
    """A leads, B is cut off while A and C commit appends, C's store is lost and C restarts cut off A,
    A crashes before C caught up, and B's links heal: B (behind) and C (empty) are a majority."""
    a, b, c_ = _a_member_lags_while_two_commit(c)
    c.cut.add(frozenset((a, c_)))
    c.wipe(c_)
    c.run(500)
    c.crash(a)
    c.cut.clear()
    return a, b, c_


@pytest.mark.parametrize("careful", [True, False])
def test_an_emptied_member_helps_elect_no_leader_that_lacks_committed_entries(careful: bool) -> None:
    """Careless (DLedger's way), C votes for B and an acknowledged entry is gone; careful, C abstains
    until it caught up with a leader, so none is elected until A is back, and nothing is lost."""
    c = Cluster(seed=11, loss=0.0, careful=careful)
    a, b, c_ = _lose_a_store_while_the_lagging_member_is_cut_off(c)
    if not careful:
        with pytest.raises(AssertionError, match=r"committed entry .* changed"):  # (the checker's)
            c.run(20_000, append_every=100)
        elected = c.leader()
        assert elected is not None and elected.m.self_id == b
        return
    c.run(20_000, append_every=100)
    elected = c.leader()
    assert elected is None, f"{elected.m.self_id} elected while A is down"
    emptied = c.nodes[c_]
    assert emptied is not None and emptied.abstaining == CATCHING_UP and c.disks[c_].abstain == CATCHING_UP
    assert "its leader's term" in emptied.abstention()
    c.start(a)
    c.run(10_000, append_every=100)
    assert emptied.abstaining == VOTING and c.disks[c_].abstain == VOTING
    c.check_acked_everywhere()
    # now that C caught up, A may go: B and C elect and lose nothing
    acked = len(c.acked)
    c.crash(a)
    c.run(15_000, append_every=100)
    assert len(c.acked) > acked
    for p in (b, c_):
        node = c.nodes[p]
        assert node is not None
        c.check_acked_in(node)


def test_an_emptied_member_that_heard_its_leader_votes_for_no_member_behind_that_leader() -> None:
    """As above, but C's probes reach A and B (A's requests to C are lost, B is still cut off A): C hears
    both peers before A crashes and may vote again without catching up, but only for a log no less up to
    date than the most up to date they answered (A's): B lacks what A and C committed and is refused, so
    none is elected until A is back."""
    c = Cluster(seed=11, loss=0.0, careful=True)
    a, b, c_ = _a_member_lags_while_two_commit(c)
    c.cut = {frozenset((b, a))}
    c.one_way.add((a, c_))
    c.wipe(c_)
    emptied = c.nodes[c_]
    assert emptied is not None
    while not emptied._heard:
        assert c.now < 60_000, emptied.abstention()
        c.run(STEP)
    _elect_none_while_down(c, a)
    assert emptied.abstaining == CATCHING_UP
    c.start(a)
    c.run(10_000, append_every=100)
    assert emptied.abstaining == VOTING
    c.check_acked_everywhere()


def test_a_group_that_lost_a_majority_of_its_stores_elects_nobody_on_its_own() -> None:
    """X lags (cut off) while the leader and Y commit; then the stores of both are lost at once. Each
    emptied member hears X, which holds a log, and the other, abstaining (it may have lost the same
    entries): it waits for that one to vote before it votes itself, so X, which lacks what they committed,
    is not elected; the operator's word is needed (docs/dledger.md)."""
    c = Cluster(seed=11, loss=0.0, careful=True)
    a, _x, y = _a_member_lags_while_two_commit(c)
    c.cut.clear()
    c.wipe(a)
    c.wipe(y)
    c.run(30_000, append_every=100)  # (the checker raises should a committed entry change)
    assert c.leader() is None
    for p in (a, y):
        node = c.nodes[p]
        assert node is not None and node.abstaining == CATCHING_UP and node._heard


def _careful_group_with_a_log() -> tuple[Cluster, Node, str]:
    """A careful group whose leader appended for a while: the group, its leader and a follower."""
    c = Cluster(seed=5, loss=0.0, careful=True)
    c.run(5000)
    leader = c.leader()
    assert leader is not None
    follower = next(p for p in PEERS if p != leader.m.self_id)
    c.run(3000, append_every=20)
    return c, leader, follower


def test_an_emptied_member_catches_up_to_the_commit_index_its_leader_first_pushed() -> None:
    """An entry of the leader's term is not enough: C acknowledged, before it lost its store, entries the
    leader committed in the same term, after its term record."""
    c, leader, c_ = _careful_group_with_a_log()
    c.wipe(c_)
    target = leader.log.committed_index
    node = c.nodes[c_]
    assert node is not None
    while node.abstaining != VOTING:
        assert c.now < 60_000, node.abstention()
        c.run(STEP)
    assert node.log.committed_index >= target > 0


def test_an_emptied_member_whose_leaders_heartbeat_came_before_its_probes_answer_deposes_nobody() -> None:
    """C, emptied, hears the leader's heartbeat first (a term past its own: it leaves its term for that one)
    and then the leader's answer to its probe, which saw it in that term: it takes the term with its own
    vote and catches up. It stays in that term and the leader leads on (it moved one term further, the
    leader's next heartbeat was answered with it, and the leader was deposed for an election the emptied
    member could not vote in)."""
    c, leader, c_ = _careful_group_with_a_log()
    term, a = leader.m.term, leader.m.self_id
    c.wipe(c_)
    node = c.nodes[c_]
    assert node is not None and node.abstaining == PROBING
    probe = next(o for o in node.tick(c.now) if o.epoch == PROBE_EPOCH and o.peer == a)
    assert isinstance(probe.request, VoteRequest)
    beat = HeartBeatRequest(group="g", local_id=a, remote_id=c_, leader_id=a, term=term)
    assert node.on_heartbeat(beat, c.now).code == DLedgerResponseCode.TERM_NOT_READY
    node.on_response(probe, leader.on_vote(probe.request), c.now)
    assert node.abstaining == CATCHING_UP and node.m.term == term
    for _ in range(1000):
        c.step()
        assert leader.is_leader and leader.m.term == term, "the leader was deposed"
        if node.abstaining == VOTING:
            break
    assert node.abstaining == VOTING and node.m.term == term


def test_a_new_group_elects_once_more_members_answer_than_a_majority_could_leave_out() -> None:
    """Every member starts empty: none can tell a new group from its own loss but by its peers, and two
    of three answering empty settle it; one member with the other two away waits."""
    c = Cluster(seed=7, loss=0.0, careful=True)
    c.crash("n2")
    c.run(10_000)
    assert c.leader() is None
    assert all(n is not None and n.abstaining == PROBING for p, n in c.nodes.items() if p != "n2")
    c.start("n2")
    c.run(5000)
    assert c.leader() is not None
    assert all(n is not None and n.abstaining == VOTING for n in c.nodes.values())
    c.run(3000, append_every=50)
    c.check_acked_everywhere()


def test_a_new_groups_late_member_that_found_a_log_votes_once_its_leader_is_gone() -> None:
    """Two members of a new group elect with the third's answers to their probes while its own probes are
    lost; once answered, it finds the leader's log and catches up, but the leader dies before it could (its
    heartbeats never reached it). It votes for the member holding the log the leader answered with: the
    group elects again without the dead leader (a real group's failover stalled so)."""
    c = Cluster(seed=7, loss=0.0, careful=True)
    late = "n2"
    c.one_way |= {(late, "n0"), (late, "n1")}
    while (leader := c.leader()) is None:
        assert c.now < 30_000, "the first two elected nobody"
        c.run(100)
    a = leader.m.self_id
    b = next(p for p in PEERS if p not in (a, late))
    c.run(1000, append_every=50)
    c.run(1000)
    c.one_way = {
        (a, late)
    }  # (its probes reach the leader now; the leader's heartbeats still do not reach it)
    node = c.nodes[late]
    assert node is not None
    while not node._heard:
        assert c.now < 60_000, node.abstention()
        c.run(STEP)
    assert node.abstaining == CATCHING_UP and node.log.last_index < 0
    c.crash(a)
    c.one_way.clear()
    while (elected := c.leader()) is None:
        assert c.now < 60_000, f"no leader without {a}: {node.abstention()}"
        c.run(100, append_every=50)
    assert elected.m.self_id == b
    c.run(5000, append_every=50)
    assert node.abstaining == VOTING
    c.check_acked_in(node)


def test_a_member_without_its_vote_file_follows_the_leader_and_votes_again() -> None:
    """Its log kept, its vote file lost: it abstains until it caught up with the leader (the leader stays:
    no term of its own deposes it), its vote in that term recorded for the leader."""
    c = Cluster(seed=9, loss=0.0, careful=True)
    c.run(5000)
    leader = c.leader()
    assert leader is not None
    c.run(1000, append_every=50)
    p = next(q for q in PEERS if q != leader.m.self_id)
    c.crash(p)
    c.disks[p].term, c.disks[p].vote, c.disks[p].voted = 0, None, False
    c.start(p)
    node = c.nodes[p]
    assert node is not None and node.abstaining == PROBING
    c.run(5000, append_every=50)
    assert node.abstaining == VOTING and c.leader() is leader
    assert (c.disks[p].term, c.disks[p].vote) == (leader.m.term, leader.m.self_id)


def test_an_abstaining_member_grants_no_vote_and_stands_for_none() -> None:
    m = MemberState("g", "n1", dict(PEERS))
    node = Node(m, MemoryRaftLog(), Timings(), random.Random(1))
    node.abstain(PROBING, "started with an empty log")
    req = VoteRequest(group="g", local_id="n0", remote_id="n1", leader_id="n0", term=0)
    assert node.on_vote(req).vote_result is VoteResult.REJECT_SMALL_LEDGER_END_INDEX
    assert m.voted_for is None
    outs = [o for t in range(0, 5000, 10) for o in node.tick(t)]
    assert outs and {(o.code, o.epoch) for o in outs} == {(DLedgerRequestCode.VOTE, PROBE_EPOCH)}


def test_a_leader_leaving_its_term_counts_no_follower_seen_in_it_that_acknowledged_nothing() -> None:
    """A follower down for the whole term took no part in it: counted as seen in it, it abstains on its
    return (its store older than its peers saw it) while the group may need its vote to elect anyone."""
    m = MemberState("g", "n0", dict(PEERS), term=4)
    node = Node(m, MemoryRaftLog(), Timings(), random.Random(1))
    node.to_leader(4)
    node.to_follower(5, "n1")
    assert node.seen_of("n2") == (-1, -1)


def test_a_probe_changes_nothing_on_the_member_asked() -> None:
    """A vote asked in term -1 with an empty log: refused for the log where there is one, else for the
    term (saying it), before any vote is looked at; DLedger's ``handleVote`` checks in the same order."""
    voted = MemberState("g", "n1", dict(PEERS), term=3, voted_for="n2")
    held = MemoryRaftLog()
    held.append_leader(b"x", 2)
    probe = VoteRequest(group="g", local_id="n0", remote_id="n1", leader_id="n0", term=-1)
    answer = Node(voted, held, Timings()).on_vote(probe)
    assert (answer.vote_result, answer.term) == (VoteResult.REJECT_EXPIRED_LEDGER_TERM, 3)
    empty = MemberState("g", "n1", dict(PEERS), term=2)
    answer = Node(empty, MemoryRaftLog(), Timings()).on_vote(probe)
    assert (answer.vote_result, answer.term) == (VoteResult.REJECT_EXPIRED_VOTE_TERM, 2)
    assert (voted.term, voted.voted_for, voted.role, empty.term, empty.voted_for) == (
        3,
        "n2",
        Role.CANDIDATE,
        2,
        None,
    )


def test_every_member_restarted_one_without_its_vote_file_and_the_group_elects() -> None:
    """It abstains while the other two elect (or, no leader heard for an election timeout, moves past every
    term they answered): it votes in no term it may have voted in before, and the group serves on."""
    c = Cluster(seed=13, loss=0.0, careful=True)
    c.run(5000)
    c.run(1000, append_every=50)
    before = max(d.term for d in c.disks.values())
    for p in PEERS:
        c.crash(p)
    c.disks["n0"].term, c.disks["n0"].vote, c.disks["n0"].voted = 0, None, False
    for p in PEERS:
        c.start(p)
    node = c.nodes["n0"]
    assert node is not None and node.abstaining == PROBING
    c.run(15_000, append_every=100)
    assert node.abstaining == VOTING and c.disks["n0"].term > before
    assert c.leader() is not None
    c.check_acked_everywhere()


def test_an_emptied_member_of_an_idle_group_is_pushed_the_log_and_votes_again() -> None:
    """The leader counted the follower as holding everything it acknowledged before it lost its store; with
    no send to push, it pushed it only COMMIT pushes, whose answers it read nothing from, so the emptied
    member (abstaining until it held the leader's log) stayed empty for as long as the group took no sends
    (a Jepsen schedule found it: the group idle, the member empty and abstaining, the leader showing it
    caught up). An answer saying the follower's log ends before what it acknowledged sends the leader back
    to compare."""
    c, leader, c_ = _careful_group_with_a_log()
    c.run(3000)  # idle: every follower holds the leader's log
    last = leader.log.last_index
    assert last > 0 and leader.pushes[c_].water_mark == last
    c.wipe(c_)
    node = c.nodes[c_]
    assert node is not None and node.abstaining
    while node.abstaining != VOTING:
        assert c.now < 60_000, (node.abstention(), node.log.last_index, leader.pushes[c_].water_mark)
        c.run(STEP)
    assert node.log.last_index >= last
    c.run(1000)  # (the last acknowledgements reach the leader)
    assert leader.pushes[c_].water_mark >= last


@pytest.mark.parametrize("seed", [6, 8, 9, 11])
def test_an_emptied_member_helps_no_deposed_leader_commit(seed: int) -> None:
    """B leads and is frozen and cut off; A and C elect A in a later term and commit; C is emptied and A
    crashes; B wakes still leading. Had C followed B (the first leader to reach it, its later term
    forgotten) and acknowledged its pushes, B would commit its own entries where A committed others. C
    follows no leader before it heard from more peers than a majority could leave out (both, here): no
    leader while A is down, and once A is back C takes its term, catches up and votes."""
    c = Cluster(seed=seed, loss=0.0, careful=True)
    c.run(5000, append_every=50)
    old = c.leader()
    assert old is not None
    b = old.m.self_id
    c.run(500)
    c.nodes[b] = None  # frozen: what it holds in memory stays
    c.cut |= {frozenset((b, p)) for p in PEERS if p != b}
    while (elected := c.leader()) is None:
        assert c.now < 60_000, "A and C elected nobody"
        c.run(100, append_every=50)
    a = elected.m.self_id
    c_ = next(p for p in PEERS if p not in (a, b))
    c.run(2000, append_every=50)
    c.wipe(c_)
    c.crash(a)
    c.cut.clear()
    c.nodes[b] = old  # wakes, still leading its term
    c.run(15_000, append_every=50)  # (the checker raises should a committed entry change)
    assert c.leader() is None and not old.is_leader
    emptied = c.nodes[c_]
    assert emptied is not None and emptied.abstaining
    c.start(a)
    c.run(15_000, append_every=50)
    assert emptied.abstaining == VOTING and emptied.m.term >= elected.m.term
    c.check_acked_everywhere()


def test_an_emptied_member_of_five_helps_elect_no_leader_without_an_entry_committed_after_a_majority_answered() -> (
    None
):
    """Five members: A leads and appends e, which only C acknowledges; C's store is lost and C restarts cut off
    A; B, D and E (without e) answer its probes; then A's push reaches D, and A commits e with D and C's
    acknowledgement from before the loss; A and D go down. Had C heard enough with three answers (more than a
    majority could leave out, the first rule), it would vote for a log as up to date as theirs, and B or E
    would lead without e. Heard only once every other peer answered, A among them, it votes for nobody
    until A (or D) is back, and e stays."""
    c = Cluster(seed=5, peers=PEERS5, loss=0.0, careful=True)
    while c.leader() is None:
        assert c.now < 30_000, "the new group elected nobody"
        c.run(100)
    c.run(2000, append_every=100)
    c.run(2000)
    leader = c.leader()
    assert leader is not None
    a = leader.m.self_id
    b, c_, d, e = [p for p in PEERS5 if p != a]
    c.one_way |= {(a, b), (a, d), (a, e)}
    c.client_append(c.now)
    index = leader.log.last_index
    while leader.pushes[c_].water_mark < index:
        assert c.now < 60_000
        c.run(STEP)
    assert leader.log.committed_index < index
    c.cut.add(frozenset((a, c_)))
    c.wipe(c_)
    c.run(500)  # (its probes answered by B, D and E)
    c.one_way.discard((a, d))
    while leader.log.committed_index < index:
        assert c.now < 60_000, "A never committed e"
        c.run(STEP)
    assert all(c.disks[p].log.last_index < index for p in (b, c_, e))
    c.crash(a)
    c.crash(d)
    c.cut.clear()
    c.one_way.clear()
    c.run(20_000, append_every=100)  # (the checker raises should a committed entry change)
    assert c.leader() is None
    c.start(a)
    c.start(d)
    c.run(15_000, append_every=100)
    c.check_acked_everywhere()


def _deliver(c: Cluster, src: str, out: Out) -> None:
    """`out` of `src` handled by its peer now, and the answer handed back at once: the schedule's order."""
    resp = c.handle(out.peer, out.request)
    c.note(out.peer)
    node = c.nodes[src]
    assert node is not None
    node.on_response(out, resp, c.now)
    c.note(src)


def test_an_emptied_member_of_five_gives_no_second_leader_the_vote_it_forgot() -> None:
    """Five members hold the same log of term 1; A and C are in term 2 (a round of term 1 found no leader), B,
    D and E in term 1. A stands in term 2 and C votes for it; its requests to the others are late. C's store
    is lost and B, D and E answer its probes in term 1. E, moved to term 2 by A's late request, stands there;
    D, moved there by E's, takes A's late request and A leads term 2. Had C heard enough with those three
    answers (the first rule), it would vote in any term past 1, and E would lead term 2 too with B's vote and
    C's second. Heard only once A answered too (in term 2), C votes in no term up to 2."""
    c = Cluster(seed=1, peers=PEERS5, loss=0.0)
    a, b, c_, d, e = PEERS5
    for p in PEERS5:
        c.crash(p)
        disk = c.disks[p]
        disk.log.append_leader(b"x", 1)
        disk.log.set_committed(0)
        disk.term, disk.vote, disk.voted = (2, None, True) if p in (a, c_) else (1, b, True)
    for p in PEERS5:
        c.start(p)
    nodes = {p: n for p, n in c.nodes.items() if n is not None}

    def asked(p: str) -> dict[str, Out]:
        return {o.peer: o for o in nodes[p].tick(c.now)}

    from_a = asked(a)
    assert nodes[a].m.term == 2 and set(from_a) == {b, c_, d, e}
    _deliver(c, a, from_a[c_])
    assert nodes[a].vote_round is not None and nodes[a].vote_round.accepted == 2
    c.careful = True
    c.wipe(c_)
    emptied = c.nodes[c_]
    assert emptied is not None
    nodes[c_] = emptied
    probes = asked(c_)
    for p in (b, d, e):
        _deliver(c, c_, probes[p])
    assert emptied.abstaining == CATCHING_UP
    e_node = nodes[e]
    assert c.handle(e, from_a[e].request).vote_result is VoteResult.REJECT_TERM_NOT_READY  # type: ignore[union-attr]
    c.now += STEP
    asked(e)
    assert e_node.m.term == 2
    c.now = e_node.next_vote_time
    from_e = asked(e)
    _deliver(c, e, from_e[d])
    c.now += STEP
    asked(d)
    assert nodes[d].m.term == 2 and nodes[d].m.voted_for is None
    _deliver(c, a, from_a[d])
    assert nodes[a].is_leader and nodes[a].m.term == 2
    _deliver(c, e, from_e[b])
    _deliver(c, e, from_e[c_])
    c.now += STEP
    for p in (b, c_):
        asked(p)
    again = asked(e)
    for p in (b, c_, d, a):
        _deliver(c, e, again[p])  # (the checker raises on two leaders in term 2)
    assert not e_node.is_leader
    c.run(15_000, append_every=100)
    assert c.leader() is not None and emptied.abstaining == VOTING
    c.check_acked_everywhere()


# ------------------------------------------------------------------ members restored from an older copy


def test_a_member_restored_from_an_older_copy_helps_elect_no_leader_that_lacks_committed_entries() -> None:
    """A leads; R's store is copied; B is cut off while A and R commit appends; R is restored from the
    copy (its term and vote as they were, its log without what it acknowledged since) and restarts, A's
    requests to it lost but its own to A answered; A crashes and B's links heal. Had R voted (its log is
    no shorter than B's), B would lead without what A and R acknowledged. A answers R's probe with the
    last entry R acknowledged in its term: R abstains until it caught up, and nothing is lost."""
    c = Cluster(seed=11, loss=0.0, careful=True)
    c.run(5000, append_every=50)
    leader = c.leader()
    assert leader is not None
    a = leader.m.self_id
    b, r = [p for p in PEERS if p != a]
    c.run(500)
    backup = c.backup(r)
    c.cut |= {frozenset((b, a)), frozenset((b, r))}
    c.run(2000, append_every=50)
    c.run(500)
    assert c.acked and c.acked[-1][0] > max(c.disks[b].log.last_index, backup.log.last_index)
    c.one_way.add((a, r))
    c.restore(r, backup)
    c.run(1000)
    _elect_none_while_down(c, a)
    restored = c.nodes[r]
    assert restored is not None and restored.abstaining == CATCHING_UP
    assert f"{a}, leader of term" in restored.abstention()
    c.start(a)
    c.run(10_000, append_every=100)
    assert restored.abstaining == VOTING
    c.check_acked_everywhere()


def test_a_member_restored_to_an_earlier_term_votes_in_no_term_it_may_have_voted_in() -> None:
    """A leads term t; R's store is copied; A crashes and L (R's vote) leads term t + 1; R is restored from
    the copy (term t) and restarts with A, A cut off L and L's requests to R lost. Had R voted, A would lead
    term t + 1 too. L answers R's probe with term t + 1: R votes for nobody up to it and abstains until it
    caught up with a leader."""
    c = Cluster(seed=3, loss=0.0, careful=True)
    c.run(5000, append_every=50)
    leader = c.leader()
    assert leader is not None
    a, t = leader.m.self_id, leader.m.term
    backups = {p: c.backup(p) for p in PEERS}
    c.crash(a)
    c.run(15_000, append_every=50)
    new = c.leader()
    assert new is not None and new.m.term == t + 1, "the schedule needs the next term's leader"
    el, r = new.m.self_id, next(p for p in PEERS if p not in (a, new.m.self_id))
    c.cut.add(frozenset((a, el)))
    c.one_way.add((el, r))
    c.restore(r, backups[r])
    c.start(a)
    c.run(20_000, append_every=100)  # (the checker raises on two leaders in one term)
    restored = c.nodes[r]
    assert restored is not None and restored.abstaining == CATCHING_UP
    assert f"{el} saw it in term {t + 1}" in restored.abstention()
    c.cut.clear()
    c.one_way.clear()
    c.run(10_000, append_every=100)
    assert restored.abstaining == VOTING
    c.check_acked_everywhere()


def test_a_probe_is_answered_what_the_asker_took_part_in_after_the_leadership_too() -> None:
    """A leader answers a restarted follower's probe with the last entry it acknowledged in its term, and
    still does once it stepped down (cut off the others, it does before the follower is back); a member
    answers a candidate's probe with the term it stood in. A member that votes says where its log ends."""
    node = a_loaded_leader(5, busy=())
    probe = VoteRequest(group="g", local_id="n1", remote_id="n0", leader_id="n1", term=-1)
    answer = node.on_vote(probe)
    assert (answer.vote_result, answer.mqctl_seen_term, answer.mqctl_seen_index) == (
        VoteResult.REJECT_EXPIRED_LEDGER_TERM,
        1,
        4,
    )
    assert (answer.mqctl_ledger_end_term, answer.mqctl_ledger_end_index) == (1, node.log.last_index)
    node.to_candidate(1)
    assert (node.on_vote(probe).mqctl_seen_term, node.on_vote(probe).mqctl_seen_index) == (1, 4)
    node.on_vote(VoteRequest(group="g", local_id="n2", remote_id="n0", leader_id="n2", term=3))
    to_n2 = VoteRequest(group="g", local_id="n2", remote_id="n0", leader_id="n2", term=-1)
    assert (node.on_vote(to_n2).mqctl_seen_term, node.on_vote(to_n2).mqctl_seen_index) == (3, -1)
    fresh = Node(MemberState("g", "n0", dict(PEERS), term=1), MemoryRaftLog(), Timings())
    dledgers = {
        "code": 200,
        "group": "g",
        "leaderId": "n1",
        "localId": "n1",
        "remoteId": "n0",
        "term": 1,
        "voteResult": "REJECT_EXPIRED_VOTE_TERM",
    }
    assert fresh.on_vote(probe).to_json() == {**dledgers, "mqctlLedgerEndIndex": -1, "mqctlLedgerEndTerm": -1}
    fresh.abstain(PROBING, "started with an empty log")
    assert fresh.on_vote(probe).to_json() == dledgers  # (what DLedger answers: nothing of ours)
