"""Faults against a member that lost its store while it abstains (docs/dledger.md, "A member that lost
its store"): three brokers as processes, peer links through the proxy, our producers recording every send.
The emptied member's link from the leader is slowed, so that its catch-up (a bisection of round trips,
then the pushes) spans the fault: it is cut off, killed and restarted, handed the leadership, or its only
source dies, while it catches up. After each: every SEND_OK served once by the leader, one leader per
term (from the observer and from the members' files), writes resumed once a majority could, and the
emptied member neither led nor granted a vote before its log says it votes."""

from __future__ import annotations

import asyncio
import re
import shutil
from pathlib import Path

import pytest

from mqctl.admin.client import Admin
from mqctl.errors import MqctlError
from mqctl.services.ha import transfer
from store.dledger import ABSTAIN_FILE
from tests.jepsen.harness import running
from tests.jepsen.nodes import Node
from tests.jepsen.raft import RaftGroup, activity, raft_group
from tests.jepsen.test_dledger import acked_by_deposed, assert_consistent, assert_terms, writes_resume
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

#: Latency each way on the leader's link to the emptied member: its catch-up takes many round trips.
SLOW_LINK_S = 2.5


async def abstains(g: RaftGroup, node: Node) -> str:
    """What the member says of its abstention in its runtime info ("" when it votes or does not answer)."""
    try:
        table = await Admin([g.namesrv], client=g.client).broker_runtime_info(node.addr)
    except Exception:
        return ""
    return table.get("dledgerAbstains", "")


async def empty_and_restart(g: RaftGroup, i: int, slow_from: int | None, slow: float = SLOW_LINK_S) -> Node:
    """Stop member ``i``, wipe its store, restart it, the link from ``slow_from`` (its leader) slowed by
    ``slow`` each way."""
    node = g.nodes[i]
    await g.nemesis.stop(node)
    shutil.rmtree(node.store)
    g.history.nemesis("empty", node.name)
    if slow_from is not None:
        g.nemesis.slow(g.proxy, f"n{slow_from}->n{i}", slow)
    g.nemesis.restart(node)
    await node.ready(g.client)
    return node


def abstention_dir(node: Node) -> Path:
    """The member's DLedger directory (where ``currterm`` and ``abstain`` live)."""
    found = [p.parent for p in node.store.rglob("currterm")] + [
        p.parent for p in node.store.rglob(ABSTAIN_FILE)
    ]
    assert found, f"{node.name}: no DLedger directory under {node.store}"
    return found[0]


#: What a member logs at each start without a store (the group's first among them).
EMPTY_START = "abstains from elections (probing): started with an empty log"


def votes(node: Node) -> int:
    """How many times the member's log says it ended an abstention since it last started emptied. (The log
    is appended to across restarts; a new group's member that found a leader's log ends its first only
    once it caught up, so one emptied before then never said it.)"""
    text = node.log_tail(10**7)
    since = max(text.rfind(f"[{node.name}] {EMPTY_START}"), 0)
    return text[since:].count(f"[{node.name}] votes:")


def assert_abstained_until_it_voted(node: Node) -> None:
    """From the member's log: after each start that abstained, no term it led (nor any vote it stood for)
    before its ``votes:`` line. (The log is appended to across restarts.)"""
    text = node.log.read_text(errors="replace")
    abstaining = False
    for line in text.splitlines():
        if f"[{node.name}] abstains from elections" in line:
            abstaining = True
        elif f"[{node.name}] votes:" in line:
            abstaining = False
        elif abstaining and re.search(rf"\[{node.name}\] leader of term", line):
            raise AssertionError(f"{node.name} led while it abstained: {line}")


async def no_leader_while(g: RaftGroup, abstainer: Node, candidate: Node, rounds: int = 2) -> None:
    """The candidate stands again and again, the abstainer refusing it (``rounds`` refusals logged), and
    nobody leads meanwhile."""
    refused = f"[{abstainer.name}] abstains: no vote for {candidate.name}"
    start = abstainer.log_tail(10**7).count(refused)

    async def refused_enough() -> bool:
        assert await g.observe() is None, f"a leader was elected:\n{g.evidence()}"
        return abstainer.log_tail(10**7).count(refused) >= start + rounds

    await wait_until(refused_enough, 60, g.evidence)


async def catching_up(g: RaftGroup, node: Node) -> None:
    """Wait until the member says it follows a leader and catches up (it found the group's history)."""

    async def says() -> bool:
        return "until it holds, committed" in await abstains(g, node)

    await wait_until(says, 30, g.evidence)


async def emptied_behind_a_slow_link(g: RaftGroup) -> tuple[int, int, int]:
    """(the clients running) Sends acknowledged, then member c emptied and restarted behind a slow link
    from the leader a, and catching up; returns a, the third member b, and c."""
    a = await g.leader()
    b, c = (a + 1) % 3, (a + 2) % 3
    await g.acked_at_least(200)
    await empty_and_restart(g, c, slow_from=a)
    await catching_up(g, g.nodes[c])
    return a, b, c


def cut(g: RaftGroup, i: int, j: int) -> None:
    """Refuse both links between members ``i`` and ``j`` (each still reaches the third)."""
    for link in (f"n{i}->n{j}", f"n{j}->n{i}"):
        g.nemesis.partition(g.proxy, link, "refuse")


def mend(g: RaftGroup, i: int, j: int) -> None:
    for link in (f"n{i}->n{j}", f"n{j}->n{i}"):
        g.nemesis.heal(g.proxy, link)
    g.nemesis.slow(g.proxy, f"n{i}->n{j}", 0)
    g.nemesis.slow(g.proxy, f"n{j}->n{i}", 0)


async def test_an_emptied_member_cut_off_then_killed_mid_catch_up_then_its_source_killed(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """A leads, B follows; C is emptied and restarted behind a slow link from A. While C catches up, A and
    C are cut apart (B still reaches both): A and B commit on; C, holding part of A's log, is SIGKILLed and
    restarted (its kept ``abstain`` file says it has not caught up, though its log and vote file are
    there), then A, its only source, is killed. B and C are a majority, but C abstains: B stands again and
    again and nobody leads, until A is back; then every SEND_OK is served and C catches up and votes."""
    async with raft_group(tmp_path, cli_env) as g:
        async with running(activity(g)):
            a, b, c = await emptied_behind_a_slow_link(g)
            A, B, C = g.nodes[a], g.nodes[b], g.nodes[c]
            cut(g, a, c)
            await g.acked_at_least(g.acked() + 30)  # A and B commit without C
            assert "until it holds, committed" in await abstains(g, C), g.evidence()
            g.nemesis.kill(C)
            kept = (abstention_dir(C) / ABSTAIN_FILE).read_text().strip()
            assert kept == "catching-up", kept
            g.nemesis.restart(C)
            await C.ready(g.client)
            said = await abstains(g, C)
            assert "restarted before it caught up" in said, said
            g.nemesis.kill(A)
            await no_leader_while(g, C, B)
            mend(g, a, c)
            g.nemesis.restart(A)
            await A.ready(g.client)
            await g.leader()
            await writes_resume(g, g.history.last("restart"))
            await wait_until(lambda: votes(C) >= 1, 60, g.evidence)
        await assert_consistent(g)
        assert_abstained_until_it_voted(C)
        await assert_terms(g)


async def test_two_members_emptied_one_after_the_other(tmp_path: Path, cli_env: dict[str, str]) -> None:
    """C is emptied and catches up over a slow link from the leader A, having heard A and B while they
    voted; B is emptied before C caught up. A, its heartbeats answered by neither in time (B down, C's
    answers late), steps down. Two of three stores are lost, but C's vote is safe for a log as up to date as
    A and B answered it (docs/dledger.md), which A's is; B, having heard an abstaining C, votes for nobody
    before it caught up. Once the link is mended A is elected again with C's vote and no operator's word,
    every SEND_OK is served, and B and C catch up and vote."""
    async with raft_group(tmp_path, cli_env) as g:
        async with running(activity(g)):
            a, b, c = await emptied_behind_a_slow_link(g)
            B, C = g.nodes[b], g.nodes[c]

            async def votes_meanwhile() -> bool:
                return "meanwhile it votes" in await abstains(g, C)

            await wait_until(votes_meanwhile, 30, g.evidence)
            # B stays down until A, without a quorum in time, stepped down: back at once, B (emptied but
            # answering its heartbeats) would keep A leading, which is as safe but not this schedule
            await g.nemesis.stop(B)
            shutil.rmtree(B.store)
            g.history.nemesis("empty", B.name)

            async def deposed() -> bool:
                return await g.observe() is None

            await wait_until(deposed, 60, g.evidence)
            g.nemesis.restart(B)
            await B.ready(g.client)
            mend(g, a, c)
            assert await g.leader(timeout=60) == a
            await writes_resume(g, g.history.last("restart"))
            await wait_until(lambda: votes(B) >= 1 and votes(C) >= 1, 60, g.evidence)
        await assert_consistent(g)
        for n in (B, C):
            assert_abstained_until_it_voted(n)
        await assert_terms(g)


async def test_a_transfer_to_an_abstaining_member_is_refused_and_sends_resume(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """``broker ha transfer --to C --force`` again and again while C, emptied, catches up over a slow link
    (the sends held, so that its log is short): C may not lead before it holds what the group committed,
    so each transfer is refused (saying why) or finds C caught up; A leads on and takes sends again. Once
    C votes and is close behind, a transfer to it succeeds."""
    async with raft_group(tmp_path, cli_env) as g:
        a = await g.leader()
        c = (a + 2) % 3
        C = g.nodes[c]
        admin = Admin([g.namesrv], client=g.client)
        refusals: list[str] = []
        async with running(activity(g)):
            await g.acked_at_least(60)
            # the log held short: the leader finds the emptied member close enough to ask it (else it
            # answers FALL_BEHIND_TOO_MUCH itself), and the member's abstention is what refuses
            for p in g.producers:
                p.resumed.clear()
            # (a round trip within the leader's request timeout: each transfer is answered)
            await empty_and_restart(g, c, slow_from=a, slow=1.0)
            for _attempt in range(200):
                if votes(C) >= 1:
                    break
                try:
                    done = await transfer(admin, C.name, force=True)
                except MqctlError as exc:
                    refusals.append(str(exc))
                    g.history.nemesis("transfer-refused", str(exc))
                    await asyncio.sleep(0.5)  # (the leader takes no sends while it hands over)
                    continue
                g.history.nemesis("transferred", f"{done.from_id}->{done.to_id} term {done.term}")
                break
            for p in g.producers:
                p.resumed.set()
            await writes_resume(g, g.history.ops[-1])
            mend(g, a, c)
            await wait_until(lambda: votes(C) >= 1, 60, g.evidence)
            if await g.leader() != c:

                async def close_behind() -> bool:
                    """C within a few entries of the leader (else FALL_BEHIND_TOO_MUCH refuses it rightly)."""
                    table = await admin.broker_runtime_info(g.nodes[a].addr)
                    peers = [p.split("/") for p in table.get("dledgerPeers", "").split(";")]
                    return any(p[0] == C.name and len(p) >= 3 and int(p[2]) <= 50 for p in peers)

                await wait_until(close_behind, 30, g.evidence)
                done = await transfer(admin, C.name, force=True)
                assert done.result == "SUCCESS", done
                assert await g.leader() == c
                await writes_resume(g, g.history.nemesis("transferred", f"n{a}->n{c}"))
        print(f"{len(refusals)} transfers refused: {refusals[:1]}")
        abstaining = [r for r in refusals if "TAKE_LEADERSHIP_FAILED" in r]
        assert abstaining, refusals  # (it caught up no sooner than the first transfer reached it)
        assert all("abstains" in r for r in abstaining), abstaining
        await assert_consistent(g)
        assert_abstained_until_it_voted(C)
        await assert_terms(g)


async def test_an_emptied_member_helps_no_deposed_leader_commit(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """B leads term t and is frozen (and cut off, so that nothing of a later term waits in its sockets); A
    and C elect A in a later term and commit what B lacks. C is emptied
    (its vote and its acknowledgements of that term forgotten) and A killed; C restarts, then B wakes still
    leading term t. B's heartbeats reach C, which no longer knows a later term: had C followed B and
    acknowledged its pushes, B (with C a majority) would commit and answer SEND_OK for entries at the
    places of A's committed ones, which A cuts when it is back (or B serves the topic without them
    meanwhile)."""
    async with raft_group(tmp_path, cli_env) as g:
        old = await g.leader()
        B = g.nodes[old]
        async with running(activity(g)):
            await g.acked_at_least(60)
            paused = g.nemesis.pause(B)
            g.isolate(old, "refuse")  # (what A tells B of its term is reset with the links, never read)
            a = await g.leader(other_than=old)
            A, C = g.nodes[a], g.nodes[3 - old - a]
            await writes_resume(g, paused)  # committed on A and C only
            g.nemesis.kill(C)
            shutil.rmtree(C.store)
            g.history.nemesis("empty", C.name)
            g.nemesis.kill(A)
            g.heal(old)
            g.nemesis.restart(C)
            await C.ready(g.client)
            woke = g.nemesis.resume(B)
            # B's first rounds of heartbeats and pushes reach C
            await wait_until(lambda: C.log_tail(10**7).count(f"[{C.name}] role") >= 2, 30, g.evidence)
            await asyncio.sleep(8)  # (time for B to take sends through C, were it able to)
            g.nemesis.restart(A)
            await A.ready(g.client)
            await g.leader(other_than=old)
            back = g.history.last("restart")
            await writes_resume(g, back)
        from_deposed = acked_by_deposed(g, old, woke, back.time)
        assert not from_deposed, f"SEND_OK from the deposed leader B: {from_deposed[:3]}"
        await assert_consistent(g)
        await assert_terms(g)
