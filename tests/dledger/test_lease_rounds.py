"""The lease against two faults a review found in simulations: a member that left its leader and then voted
for that leader's next candidacy, and heartbeat answers that come back late."""

from __future__ import annotations

import pytest

from daemon.dledger.machines import Timings
from tests.dledger.test_machines import PEERS, Cluster


@pytest.mark.parametrize("seed", range(6))
def test_a_member_that_left_its_leader_acknowledges_it_again_once_re_elected_with_its_vote(seed: int) -> None:
    """One member down; the leader's requests to the other are lost a while: that member stands (in the
    leader's term, `_left`), the leader, without a quorum, steps down and stands in its term too, and asks
    it. It voted for the leader and must not then refuse that leader's heartbeats (stood aside): at
    maxHeartBeatLeak=1 the leader stepped down again before the stand-aside ended, and asked again,
    renewing it, for ever (nothing committed for minutes)."""
    c = Cluster(seed=seed, loss=0.0, timings=Timings(max_heart_beat_leak=1))
    c.run(5000, append_every=100)
    leader = c.leader()
    assert leader is not None
    lid = leader.m.self_id
    a, b = (p for p in PEERS if p != lid)
    c.crash(b)
    c.one_way.add((lid, a))
    c.run(7000 + seed * 131 % 3000, append_every=100)
    c.one_way.clear()
    acked = len(c.acked)
    c.run(15_000, append_every=100)
    assert len(c.acked) > acked + 2


@pytest.mark.parametrize("seed", range(10))
def test_a_late_heartbeat_answer_starts_no_lease_for_a_later_round(seed: int) -> None:
    """The followers' answers come back 2.9 s late (a slow return path): each was counted for the round
    open when it arrived, so the lease ran from a round they never acknowledged, past their timeouts, and
    after the leader is cut off another member led while its lease was fresh."""
    c = Cluster(seed=seed, loss=0.0, lease_check=True)
    c.run(5000, append_every=100)
    old = c.leader()
    assert old is not None
    oid = old.m.self_id
    for p in PEERS:
        if p != oid:
            c.slow[(p, oid)] = 2900
    c.run(8000 + seed * 37, append_every=100)
    c.cut |= {frozenset((oid, p)) for p in PEERS if p != oid}
    c.run(15_000)
    assert not c.overlaps, c.overlaps[:3]
