"""The DLedger machines on a simulated clock and network: deterministic runs over many seeds with lost and
late messages, partitions and crashes (a restarted node keeps its log, term and vote, as on disk).

Safety is checked throughout: at most one leader per term, a committed entry never changes or goes, every
acknowledged append is in the log of every later leader. Liveness once the faults stop: a leader, and
appends acknowledged again.
"""

from __future__ import annotations

import dataclasses
import heapq
import random
from dataclasses import dataclass, field
from typing import Any

import pytest

from daemon.dledger.machines import MemberState, Node, Out, Role, Timings
from daemon.dledger.protocol import (
    DLedgerResponseCode,
    HeartBeatRequest,
    LeadershipTransferRequest,
    LeadershipTransferResponse,
    PushEntryRequest,
    PushEntryResponse,
    PushType,
    RequestOrResponse,
    VoteRequest,
)
from store.dledger import MemoryRaftLog

PEERS = {f"n{i}": f"127.0.0.1:{40911 + i}" for i in range(3)}
STEP = 10


@dataclass
class Disk:
    log: MemoryRaftLog = field(default_factory=MemoryRaftLog)
    term: int = 0
    vote: str | None = None


class Cluster:
    def __init__(self, seed: int, peers: dict[str, str] = PEERS, loss: float = 0.05) -> None:
        self.rng = random.Random(seed)
        self.peers = peers
        self.loss = loss
        self.disks = {p: Disk() for p in peers}
        self.nodes: dict[str, Node | None] = {}
        self.now = 0
        self.queue: list[tuple[int, int, str, Any]] = []
        self.seq = 0
        self.cut: set[frozenset[str]] = set()
        self.link: dict[tuple[str, str], int] = {}
        self.checked: dict[str, int] = {}
        self.leaders: dict[int, str] = {}
        self.committed: dict[int, tuple[int, bytes | None]] = {}
        self.acked: list[tuple[int, bytes]] = []
        self.pending: dict[tuple[str, int], bytes] = {}
        for p in peers:
            self.start(p)

    def start(self, p: str) -> None:
        disk = self.disks[p]

        def persist(term: int, vote: str | None) -> None:
            disk.term, disk.vote = term, vote

        m = MemberState("g", p, dict(self.peers), persist, term=disk.term, voted_for=disk.vote)
        self.nodes[p] = Node(m, disk.log, Timings(), random.Random(self.rng.random()))
        self.nodes[p]._now = self.now  # type: ignore[union-attr]

    def crash(self, p: str) -> None:
        node = self.nodes[p]
        if node is not None:
            # what was only in memory goes: the pending answers of a crashed leader never come
            for index in node.waiting:
                self.pending.pop((p, index), None)
        self.nodes[p] = None

    def reachable(self, a: str, b: str) -> bool:
        return frozenset((a, b)) not in self.cut

    def send(self, at: int, kind: str, payload: Any) -> None:
        self.seq += 1
        heapq.heappush(self.queue, (at, self.seq, kind, payload))

    def latency(self, src: str, dst: str) -> int:
        """A delay that keeps each direction of a link in order (one TCP connection)."""
        delay = self.rng.randint(1, 30) if self.rng.random() > 0.02 else self.rng.randint(100, 1500)
        at = max(self.now + delay, self.link.get((src, dst), 0))
        self.link[(src, dst)] = at
        return at - self.now

    def dispatch(self, src: str, outs: list[Out]) -> None:
        for out in outs:
            if self.rng.random() < self.loss or not self.reachable(src, out.peer):
                self.send(self.now + 3000, "answer", (src, out, None))  # the remoting timeout
                continue
            self.send(self.now + self.latency(src, out.peer), "request", (src, out))

    def handle(self, dst: str, req: RequestOrResponse) -> RequestOrResponse | None:
        node = self.nodes[dst]
        if node is None:
            return None
        if isinstance(req, VoteRequest):
            return node.on_vote(req)
        if isinstance(req, HeartBeatRequest):
            return node.on_heartbeat(req, self.now)
        if isinstance(req, PushEntryRequest):
            return node.on_push(req, self.now)
        if isinstance(req, LeadershipTransferRequest):
            code = node.on_take_leadership(req)
            return LeadershipTransferResponse(code=int(code or DLedgerResponseCode.SUCCESS))
        raise AssertionError(req)

    def step(self) -> None:
        self.now += STEP
        while self.queue and self.queue[0][0] <= self.now:
            _, _, kind, payload = heapq.heappop(self.queue)
            if kind == "request":
                src, out = payload
                resp = self.handle(out.peer, out.request)
                self.note(out.peer)
                lost = resp is None or self.rng.random() < self.loss or not self.reachable(src, out.peer)
                if lost:
                    self.send(self.now + 3000 - STEP, "answer", (src, out, None))
                else:
                    self.send(self.now + self.latency(out.peer, src), "answer", (src, out, resp))
            else:
                src, out, resp = payload
                node = self.nodes[src]
                if node is not None:
                    node.on_response(out, resp, self.now)
                    self.note(src)
        for p, node in self.nodes.items():
            if node is not None:
                self.dispatch(p, node.tick(self.now))
                self.note(p)

    def note(self, p: str) -> None:
        """Record what `p` decided and check it against everything recorded so far."""
        node = self.nodes[p]
        if node is None:
            return
        for term, role in node.role_changes:
            if role is Role.LEADER:
                assert self.leaders.setdefault(term, p) == p, f"two leaders in term {term}"
        node.role_changes.clear()
        log = node.log
        # (the log refuses to cut committed entries, so each index is checked once it is committed)
        for i in range(self.checked.get(p, -1) + 1, log.committed_index + 1):
            entry = log.get(i)
            seen = self.committed.setdefault(i, (entry.term, entry.body))
            assert seen == (entry.term, entry.body), f"{p}: committed entry {i} changed"
        self.checked[p] = max(self.checked.get(p, -1), log.committed_index)
        for index, code in node.completed.items():
            body = self.pending.pop((p, index), None)
            if body is not None and code == DLedgerResponseCode.SUCCESS:
                self.acked.append((index, body))
        node.completed.clear()

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
        """Once the followers caught up (a divergent tail is compared back one entry a round trip, as
        DLedger does: give them a minute): every acknowledged append in every member's log."""
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
@pytest.mark.parametrize("seed", range(30))
def test_safety_under_faults(seed: int) -> None:
    c = Cluster(seed=seed)
    rng = random.Random(seed * 7919)
    names = list(PEERS)
    for _ in range(12):
        fault = rng.choice(["crash", "partition", "isolate", "none"])
        victim = rng.choice(names)
        if fault == "crash":
            c.crash(victim)
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


def test_divergent_follower_tail_is_truncated_and_quarantined() -> None:
    c = Cluster(seed=5, loss=0.0)
    c.run(5000, append_every=100)
    old = c.leader()
    assert old is not None
    old_id = old.m.self_id
    # the leader is cut off; what it appends now reaches nobody
    c.cut |= {frozenset((old_id, n)) for n in PEERS if n != old_id}
    for i in range(5):
        old.append(f"lost{i}".encode(), c.now)
    c.run(12_000, append_every=100)
    new = c.leader()
    assert new is not None and new.m.self_id != old_id
    c.cut.clear()
    c.run(8000, append_every=100)
    disk = c.disks[old_id].log
    assert any(e.body.startswith(b"lost") for e in disk.quarantined)
    assert not any(e.body.startswith(b"lost") for e in disk._entries)
    c.check_acked_in(new)


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


def test_a_pushed_body_failing_its_crc_is_refused_then_pushed_again(caplog: pytest.LogCaptureFixture) -> None:
    c = Garbling(seed=3)
    c.run(5000, append_every=100)
    c.armed = True
    with caplog.at_level("ERROR"):
        c.run(3000, append_every=100)
    assert c.garbled is not None
    follower, index, code = c.garbled
    assert code == DLedgerResponseCode.UNEXPECTED_ARGUMENT
    assert f"cannot append entry {index}: UNEXPECTED_ARGUMENT: entry {index}: body crc" in caplog.text
    c.check_acked_everywhere()  # the leader pushed it again, whole
    node, leader = c.nodes[follower], c.leader()
    assert node is not None and leader is not None
    assert node.log.get(index) == leader.log.get(index)
