"""POP on a DLedger leader that another member has replaced before it noticed: three brokers on loopback
(the Jepsen harness), the leader cut off its peers by the proxy or frozen past the election timeout, and a
POP consumer that keeps asking it. A member lends only while its leadership lease is fresh (a quorum
acknowledged its heartbeats within the election timeout, docs/dledger.md), so no pop asked of it once
another member claims the leadership is answered with a message: two members lending at once would hand
each message to two consumers, the old one's lending never to be acked (an ack needs the quorum)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from daemon.remoting.codes import ResponseCode
from daemon.remoting.errors import RemotingError
from tests.jepsen.proxy import Mode
from tests.jepsen.raft import GROUP, QUEUES, TOPIC, RaftGroup, raft_group
from tests.support.broker import BrokerClient
from tests.support.pop import PopClient, parse_pop
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

#: Short heartbeat rounds and quick votes: the followers stand and elect soon after the last heartbeat.
TIMINGS = {
    "heartBeatTimeIntervalMs": 1000,
    "maxHeartBeatLeak": 2,
    "minVoteIntervalMs": 50,
    "maxVoteIntervalMs": 150,
}
CONSUMER = "GLeaseC"


async def lent(consumer: PopClient, poll_ms: int = 0) -> int:
    """How many messages one pop lent (none: nothing, refused, or no answer)."""
    try:
        response = await consumer.pop_raw(TOPIC, max_nums=1, invisible_ms=120_000, poll_ms=poll_ms)
    except RemotingError:
        return 0
    return len(parse_pop(response, GROUP)) if response.code == ResponseCode.SUCCESS else 0


async def claimed(g: RaftGroup, other_than: int) -> bool:
    """Whether a member other than ``other_than`` says it leads (DLedger METADATA)."""
    for i in range(len(g.nodes)):
        if i != other_than:
            answer = await g.metadata(i)
            if answer is not None and answer.get("leaderId") == f"n{i}":
                return True
    return False


async def filled(g: RaftGroup, leader: int) -> PopClient:
    """Messages on the leader for the pops to come, and a consumer that has popped from it."""
    on = BrokerClient(g.nodes[leader].addr, g.client)
    for i in range(400):
        r = await on.send(TOPIC, f"m{i}".encode(), queue_id=i % QUEUES)
        assert r.code == ResponseCode.SUCCESS, r.remark
    consumer = PopClient(on, CONSUMER, broker_name=GROUP)
    assert await lent(consumer, poll_ms=5000) == 1  # it lends while it leads on its quorum
    return consumer


@pytest.mark.parametrize("mode", ["stall", "refuse"])
async def test_a_leader_cut_off_lends_nothing_once_another_claims_the_leadership(
    tmp_path: Path, cli_env: dict[str, str], mode: Mode
) -> None:
    """Cut off its followers (the links stalled or refusing): they stand once their timeout runs out and
    elect one of them; the old leader hears of it at its next round of heartbeats only."""
    async with raft_group(tmp_path, cli_env, **TIMINGS) as g:
        old = await g.leader()
        consumer = await filled(g, old)
        answers: list[tuple[float, int]] = []  # (when asked, messages lent)
        done = asyncio.Event()

        async def keep_popping() -> None:
            while not done.is_set():
                asked = time.monotonic()
                answers.append((asked, await lent(consumer)))
                await asyncio.sleep(0.02)  # (its 400 messages last the test)

        # its heartbeats and their answers 100 ms late each way (the links it opened; the followers' to each
        # other as they are): it counts its silence from the answers, they count theirs from its heartbeats,
        # and it steps down a round after they may have elected one of them
        for j in range(len(g.nodes)):
            if j != old:
                g.nemesis.slow(g.proxy, f"n{old}->n{j}", 0.1)
        await asyncio.sleep(2.5)
        popping = asyncio.create_task(keep_popping())
        try:
            g.isolate(old, mode)
            await wait_until(lambda: claimed(g, old), 30, g.evidence)
            elected = time.monotonic()
            await asyncio.sleep(2.0)  # the old one is asked on meanwhile, until and after it steps down
        finally:
            done.set()
            await popping
        late = [asked - elected for asked, n in answers if n and asked > elected]
        assert not late, f"lent by the cut-off leader after another claimed the leadership: {late[:5]}"
        assert sum(n for _, n in answers) < 399, "the messages ran out: the test saw nothing"


async def test_a_leader_frozen_past_the_election_lends_nothing_when_it_wakes(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """A pop that reaches a leader frozen (a long pause) while another is elected is read as it wakes,
    before its first round of heartbeats tells it it leads no more."""
    async with raft_group(tmp_path, cli_env, **TIMINGS) as g:
        old = await g.leader()
        consumer = await filled(g, old)
        g.nemesis.pause(g.nodes[old])
        try:
            await wait_until(lambda: claimed(g, old), 30, g.evidence)
            asked = [asyncio.create_task(lent(consumer)) for _ in range(8)]  # they wait in its sockets
            await asyncio.sleep(0.5)
        finally:
            g.nemesis.resume(g.nodes[old])
        answered = await asyncio.gather(*asked)
        assert sum(answered) == 0, f"the woken leader lent {answered}"
