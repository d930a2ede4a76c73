"""The Jepsen harness on DLedger broker groups: three brokers on loopback, producers sending with
retries (ours; for the leader's faults the real clients too, ali-ons and the C++ client), one fault each
(the leader killed, frozen past the election timeout, cut off its peers; a follower restarted empty,
with a damaged entry, on a full disk; a member emptied or restored from an older copy and the leader lost
before it caught up), then the history checked against what the group serves: every
SEND_OK readable exactly once from the leader, no two leaders in one term, no SEND_OK from a leader cut
off its quorum, the old leader's unreplicated tail not served, writes resumed.

Each test skips (with the reason) where the broker has no DLedger mode yet."""

from __future__ import annotations

import asyncio
import math
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest

from store import dledger as dl
from store.quarantine import list_quarantines
from tests.broker.test_broker_disk_full import fill, small_tmpfs
from tests.jepsen.checker import Read, check, check_leaders, check_places, check_resumed
from tests.jepsen.client import Producer, read_topic
from tests.jepsen.harness import running
from tests.jepsen.history import Op
from tests.jepsen.logs import check_terms, logged
from tests.jepsen.nodes import stop_all
from tests.jepsen.proxy import Mode
from tests.jepsen.raft import QUEUES, TOPIC, RaftGroup, activity, raft_group
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

#: Who sends during the leader's faults: our producers, and the real clients (their own retries, and a
#: moved master seen only at their next route look-up).
CLIENTS = ["ours", *(pytest.param(c, marks=pytest.mark.interop) for c in ("ali-ons", "cpp"))]


async def writes_resume(g: RaftGroup, after: Op, more: int = 30) -> None:
    """A send is acknowledged after ``after``, and ``more`` in all since then (the real clients' too)."""
    await wait_until(lambda: check_resumed(g.history.ops, after.time).valid, 30 + g.route_refresh, g.evidence)
    await g.acked_at_least(g.acked() + more)


async def assert_consistent(g: RaftGroup) -> int:
    """The group's final state against the history: the leader serves every SEND_OK exactly once, in
    order, nothing foreign; one leader per term; every other running node serves exactly what the
    leader does (an old leader's unreplicated tail is not among it). Returns the leader."""
    leader = await g.leader()
    result = await g.settled(leader)
    assert result.valid, f"leader n{leader}: {result.summary()}"
    leaders = check_leaders(g.history)
    assert leaders.valid, leaders.summary()
    expected: list[Read] = []
    for i, node in enumerate(g.nodes):
        if i == leader or not node.running:
            continue
        served: list[Read] = []

        async def same(i: int = i, served: list[Read] = served) -> bool:
            # the leader is read again each time: an entry of a send whose outcome its producer never
            # learned (timed out) commits when its quorum acknowledges, which may be after a first look
            expected[:] = sorted(await read_topic(g.client, g.nodes[leader].addr, TOPIC, QUEUES), key=_place)
            served[:] = sorted(await read_topic(g.client, g.nodes[i].addr, TOPIC, QUEUES), key=_place)
            return served == expected

        def differs(i: int = i, served: list[Read] = served) -> str:
            return (
                f"n{i} serves {_per_queue(served)}, leader n{leader} {_per_queue(expected)}\n{g.evidence()}"
            )

        # a member that rejoins with a divergent tail: the leader bisects for where they agree (a few
        # round trips), cuts the tail and pushes the rest; generous for a loaded host
        await wait_until(same, 30, differs)
    if expected:  # what the leader serves at the end, the history's check again
        final = check(g.history.ops, expected).merge(check_places(expected))
        assert final.valid, f"leader n{leader}: {final.summary()}"
    assert_bisected(g)
    return leader


async def assert_terms(g: RaftGroup) -> None:
    """Election safety from the members' files (:mod:`tests.jepsen.logs`), once they are stopped: every
    entry of a term stored by one member, every SEND_OK's copy in a term the broker that answered led.
    Where the clients say which broker answered, some SEND_OK must have been placed so."""
    await stop_all(g.nodes)
    result = check_terms([e for n in g.nodes for e in logged(n.name, n.store)], g.history)
    assert result.valid, result.summary()
    named = any(op.f == "send" and op.type == "ok" and op.addr for op in g.history.ops)
    assert result.counts["acked-placed"] or not named, result.summary()


def assert_bisected(g: RaftGroup) -> int:
    """Every divergent tail a leader found took about log2(its log's length) compares (bisection), not one
    per entry: read from each leader's INFO line as it truncated. Returns how many it found."""
    found = [
        (int(m[1]), int(m[3]) - int(m[2]) + 1)
        for node in g.nodes
        for m in TRUNCATED.finditer(node.log_tail(10**6))
    ]
    for compares, length in found:
        # (the follower's end and the entry before it may be probed first)
        assert compares <= math.log2(max(length, 2)) + 4, (compares, length)
    return len(found)


TRUNCATED = re.compile(r"found in (\d+) compares: truncating after entry -?\d+ \(this log: (-?\d+)-(-?\d+)\)")


def acked_by_deposed(g: RaftGroup, old: int, fault: Op, until: float | None = None) -> list[Op]:
    """SEND_OKs that node ``old``, the leader when ``fault`` struck, answered for sends invoked after it
    and completed before ``until`` (or before it is seen leading a later term): a deposed leader must
    acknowledge nothing. Only clients that say which broker answered (ours, ali-ons) are checked."""
    ops = g.history.ops
    name, addr = g.nodes[old].name, g.nodes[old].addr
    led = [op for op in ops if op.f == "role" and op.value == name and op.role == "LEADER"]
    term = max((op.term or 0 for op in led if op.index < fault.index), default=-1)
    later = [op.time for op in led if (op.term or 0) > term]
    end = min([*later, *([] if until is None else [until])], default=float("inf"))
    return [
        op
        for op in ops
        if op.f == "send"
        and op.type == "ok"
        and op.addr == addr
        and op.time < end
        and g.history.invoked_after(op, fault)
    ]


def _place(read: Read) -> tuple[int, int]:
    return (read.queue, read.offset)


def _per_queue(reads: list[Read]) -> str:
    """How many messages each queue serves, as ``{queue: count}`` (a node without the topic serves none)."""
    return str(dict(sorted(Counter(r.queue for r in reads).items())))


@pytest.mark.parametrize("clients", CLIENTS)
async def test_sigkill_of_the_leader_then_its_restart_on_the_old_log(
    tmp_path: Path, cli_env: dict[str, str], clients: str
) -> None:
    async with raft_group(tmp_path, cli_env, clients=clients) as g:
        old = await g.leader()
        async with running(activity(g)):
            await g.acked_at_least(60)
            g.nemesis.kill(g.nodes[old])
            killed = g.history.last("kill")
            await g.leader(other_than=old)
            await writes_resume(g, killed)
            g.nemesis.restart(g.nodes[old])
            await g.nodes[old].ready(g.client)
            await writes_resume(g, g.history.last("restart"))
        await assert_consistent(g)
        await assert_terms(g)


@pytest.mark.parametrize("clients", CLIENTS)
async def test_the_leader_frozen_past_the_election_timeout(
    tmp_path: Path, cli_env: dict[str, str], clients: str
) -> None:
    """SIGSTOP for longer than the election timeout: another leader takes over; after SIGCONT the old one
    steps down (no term with two leaders), answers no SEND_OK to what reached it meanwhile, and what it
    held unacknowledged is not served."""
    async with raft_group(tmp_path, cli_env, clients=clients) as g:
        old = await g.leader()
        async with running(activity(g)):
            await g.acked_at_least(60)
            paused = g.nemesis.pause(g.nodes[old])
            await g.leader(other_than=old)
            await writes_resume(g, paused)
            g.nemesis.resume(g.nodes[old])
            await writes_resume(g, g.history.last("resume"))
        from_old = acked_by_deposed(g, old, paused)
        assert not from_old, f"SEND_OK from the deposed leader: {from_old[:3]}"
        await assert_consistent(g)
        await assert_terms(g)


@pytest.mark.parametrize(
    ("clients", "mode"),
    [
        ("ours", "stall"),
        ("ours", "refuse"),
        pytest.param("ali-ons", "stall", marks=pytest.mark.interop),
        pytest.param("cpp", "refuse", marks=pytest.mark.interop),
    ],
)
async def test_the_leader_cut_off_its_peers_acknowledges_nothing(
    tmp_path: Path, cli_env: dict[str, str], clients: str, mode: Mode
) -> None:
    """The proxy cuts the leader off both followers (clients still reach it): the two elect a leader and
    take writes; the old one answers no SEND_OK (it has no quorum); after the heal it follows, its
    unreplicated tail set aside (logged at ERROR) and never served. Where a client does not say which
    broker answered (the C++ client), a SEND_OK from the old leader shows as lost: its entry is cut."""
    async with raft_group(tmp_path, cli_env, clients=clients) as g:
        old = await g.leader()
        old_addr = g.nodes[old].addr
        async with running(activity(g)):
            await g.acked_at_least(60)
            cut = g.isolate(old, mode)
            await g.leader(other_than=old)
            await writes_resume(g, cut)
            await asyncio.sleep(2.0)  # producers with a stale route keep trying the old leader meanwhile
            healed = g.heal(old)
            await writes_resume(g, healed)
        ops = g.history.ops
        from_old = acked_by_deposed(g, old, cut, healed.time)
        assert not from_old, f"SEND_OK from the cut-off leader: {from_old[:3]}"
        tried_old = [  # a real client's failures do not say where they went: maybe the old leader
            op
            for op in ops
            if op.f == "send" and op.type == "info" and op.addr in (old_addr, None) and op.time > cut.time
        ]
        await assert_consistent(g)
        # What it appended and could not commit was set aside when it rejoined, said at ERROR. (A send the
        # client gave up on may have reached it only after it stepped down, refused unappended: the
        # client's view alone does not tell whether there was a tail.)
        set_aside = [p for p in (g.nodes[old].store / "quarantine").rglob("*") if p.is_file()]
        errors = [line for line in g.nodes[old].log_tail(10**6).splitlines() if " ERROR " in line]
        if set_aside:
            assert any("quarantine" in line for line in errors), (set_aside, errors)
            assert assert_bisected(g), "a tail set aside, but no leader said where the logs part"
            assert tried_old, "a tail set aside though no send reached the cut-off leader"
        await assert_terms(g)


async def test_a_follower_serves_a_topic_of_the_killed_leader_soon(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """The leader dies before its followers' first metadata sync: the follower left learns the new master
    from the NameServers within a few heartbeats (not at its next registration, 30 s later) and, its topic
    config synced from it, serves what the new leader serves."""
    async with raft_group(tmp_path, cli_env) as g:
        old = await g.leader()
        async with running(g.producers):
            await g.acked_at_least(30)
            g.nemesis.kill(g.nodes[old])
            new = await g.leader(other_than=old)
            await writes_resume(g, g.history.last("kill"), more=10)
        follower = g.nodes[3 - old - new]
        expected = sorted(await read_topic(g.client, g.nodes[new].addr, TOPIC, QUEUES), key=_place)

        async def same() -> bool:
            return sorted(await read_topic(g.client, follower.addr, TOPIC, QUEUES), key=_place) == expected

        await wait_until(same, 10)


@pytest.mark.parametrize("harm", ["emptied", "damaged"])
async def test_a_follower_restarted_emptied_or_damaged_and_the_group_serves(
    tmp_path: Path, cli_env: dict[str, str], harm: str
) -> None:
    """A follower restarted on an empty store catches up; one restarted with a damaged entry finds it at
    recovery, every time (its body CRC), sets it aside with what follows and reports it at ERROR, then
    catches up. Either way the group keeps taking writes and the leader serves every SEND_OK."""
    async with raft_group(tmp_path, cli_env) as g:
        leader = await g.leader()
        f = g.nodes[(leader + 1) % 3]
        async with running(activity(g)):
            await g.acked_at_least(60)
            await wait_until(lambda: _written(f.store) > 4096)  # the follower holds entries to harm
            await g.nemesis.stop(f)
            if harm == "emptied":
                shutil.rmtree(f.store)
                g.history.nemesis("empty", f.name)
            else:
                damaged = _damage_last_entry(f.store)
                g.history.nemesis("damage", f"{f.name}:entry {damaged.index}@{damaged.pos}")
            g.nemesis.restart(f)
            await f.ready(g.client)
            await writes_resume(g, g.history.last("restart"), more=60)
        await assert_consistent(g)  # an emptied follower serves all the leader does once it caught up
        if harm == "damaged":  # found by the follower itself, not only if the leader happens to compare it
            errors = [line for line in f.log_tail(10**6).splitlines() if " ERROR " in line]
            named = f"entry {damaged.index}: body crc"
            assert any(named in line for line in errors), errors
            cuts = [q.cut_offset for q in list_quarantines(str(f.store))]
            assert damaged.pos in cuts, cuts  # set aside from the damaged entry on, not served


async def test_an_emptied_member_helps_elect_no_leader_that_lacks_committed_entries(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """Raft's safety assumes stable storage. The leader A and C commit sends while B is cut off; C's
    store is wiped and C restarts empty, cut off A, and A is killed before C catches up. B (behind) and
    C (empty) are a majority: had C voted (its empty log is no longer than B's, its vote forgotten), B
    would lead without what A and C acknowledged, and B's entries would take their indexes. C abstains
    until it has caught up with a leader, so no leader is elected until A is back; then A leads, C
    catches up from it, and every SEND_OK is served."""
    async with raft_group(tmp_path, cli_env) as g:
        a = await g.leader()
        b, c = (a + 1) % 3, (a + 2) % 3
        A, C = g.nodes[a], g.nodes[c]
        async with running(activity(g)):
            await g.acked_at_least(30)
            g.isolate(b, "refuse")  # (frozen, it would read what its socket buffers hold on waking)
            await g.acked_at_least(g.acked() + 30)  # committed on A and C only
            g.nemesis.kill(C)
            shutil.rmtree(C.store)
            g.history.nemesis("empty", C.name)
            links = [f"n{a}->n{c}", f"n{c}->n{a}"]
            for link in links:
                g.nemesis.partition(g.proxy, link, "refuse")
            g.nemesis.restart(C)
            await C.ready(g.client)
            await leader_lost_before_it_caught_up(g, a, b, c, links)
        await assert_consistent(g)  # every SEND_OK, and C serves what the leader does once caught up
        await assert_terms(g)
        said = C.log_tail(10**6)
        assert "abstains from elections until it holds, committed, an entry of its leader's term" in said
        assert f"votes: caught up with leader {A.name}" in said


async def test_a_member_restored_from_an_older_copy_helps_elect_no_leader_that_lacks_committed_entries(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """A VM snapshot put back: C's whole store is copied (stopped, then restarted), the leader A and C
    commit sends while B is cut off, then C's store is restored from the copy (its log, term and vote as
    they were, consistent but older) and C restarts, A's requests to it refused (its own to A pass). A is
    killed before C catches up and B healed: had C voted (its log is no shorter than B's, nothing on it
    says it is old), B would lead without what A and C acknowledged. A answers C's probe with the last
    entry C acknowledged, so C abstains: no leader until A is back, then every SEND_OK is served."""
    async with raft_group(tmp_path, cli_env) as g:
        a = await g.leader()
        b, c = (a + 1) % 3, (a + 2) % 3
        A, C = g.nodes[a], g.nodes[c]
        backup = tmp_path / "backup"
        async with running(activity(g)):
            await g.acked_at_least(30)
            await g.nemesis.stop(C)
            shutil.copytree(C.store, backup)
            g.nemesis.restart(C)
            await C.ready(g.client)
            g.isolate(b, "refuse")
            await g.acked_at_least(g.acked() + 30)  # committed on A and C only
            g.nemesis.kill(C)
            shutil.rmtree(C.store)
            shutil.copytree(backup, C.store)
            g.history.nemesis("restore", C.name)
            pushes = f"n{a}->n{c}"
            g.nemesis.partition(g.proxy, pushes, "refuse")
            g.nemesis.restart(C)
            await C.ready(g.client)
            await wait_until(
                lambda: "its store is older than its peers saw it" in C.log_tail(10**6), 30, g.evidence
            )
            await leader_lost_before_it_caught_up(g, a, b, c, [pushes])
        await assert_consistent(g)  # every SEND_OK, and C serves what the leader does once caught up
        await assert_terms(g)
        assert f"votes: caught up with leader {A.name}" in C.log_tail(10**6)


async def leader_lost_before_it_caught_up(g: RaftGroup, a: int, b: int, c: int, links: list[str]) -> None:
    """The leader A killed before C (which lost what it acknowledged) caught up, and B (behind) healed:
    B stands for election again and again, C refusing it each round, or leads. Then `links` heal and A
    restarts; writes resume."""
    A, B, C = g.nodes[a], g.nodes[b], g.nodes[c]
    g.nemesis.kill(A)
    g.heal(b)
    refused = f"[{C.name}] abstains: no vote for {B.name}"

    async def stood_or_led() -> bool:
        if C.log_tail(10**6).count(refused) >= 2:
            return True
        meta = await g.metadata(b)
        return meta is not None and meta.get("leaderId") == B.name

    await wait_until(stood_or_led, 30, g.evidence)
    for link in links:
        g.nemesis.heal(g.proxy, link)
    g.nemesis.restart(A)
    await A.ready(g.client)
    await g.leader()
    await writes_resume(g, g.history.last("restart"))


def _data_files(store: Path) -> list[Path]:
    """The node's DLedger data files, oldest first."""
    return sorted(p for p in store.rglob("*") if p.is_file() and p.parent.name == "data" and p.name.isdigit())


def _written(store: Path) -> int:
    """Bytes written to the node's newest DLedger data file (its preallocated rest is zeros)."""
    files = _data_files(store)
    return len(files[-1].read_bytes().rstrip(b"\0")) if files else 0


def _damage_last_entry(store: Path) -> dl.Entry:
    """Flip a byte 8 before the end of the last entry of the node's newest DLedger data file: inside its
    CommitLog record's properties, which the record's own BODYCRC does not cover. Returns that entry."""
    path = _data_files(store)[-1]
    data = bytearray(path.read_bytes())
    at, last = 0, None
    while at + dl.BODY_OFFSET <= len(data) and dl.decode_header(data, at)[0] == dl.CURRENT_MAGIC:
        last = dl.decode_entry(data, at)
        at += last.size
    assert last is not None, f"no entry in {path}"
    data[at - 8] ^= 0xFF
    path.write_bytes(data)
    return last


async def test_a_follower_on_a_full_disk_and_the_group_serves(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """A follower's file system fills: the leader and the other follower still make a quorum, so writes go
    on; once space is back the follower catches up."""
    with small_tmpfs(tmp_path / "mnt", "16m") as mnt:
        async with raft_group(tmp_path, cli_env, stores={2: mnt / "store"}) as g:
            leader = await g.leader()
            if leader == 2:  # the full disk must be a follower's
                g.nemesis.kill(g.nodes[2])
                await g.leader(other_than=2)
                g.nemesis.restart(g.nodes[2])
                await g.nodes[2].ready(g.client)
            async with running(activity(g)):
                await g.acked_at_least(50)
                filler = mnt / "filler"
                written = await asyncio.to_thread(fill, filler)
                full = g.history.nemesis("disk-full", f"n2:{written}")
                await writes_resume(g, full, more=100)
                filler.unlink()
                await writes_resume(g, g.history.nemesis("disk-freed", "n2"))
            await assert_consistent(g)


async def test_a_sync_flush_leader_cut_off_acknowledges_nothing_the_new_leader_replaced(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """flushDiskType=SYNC_FLUSH: the leader is cut off its peers while three patient producers (a long
    send timeout) each have a send in hand there, two quick ones move to the new leader, and the link
    heals before the sends' flush wait runs out. The old leader's tail is cut and the new leader's
    entries take its place in the data files, so the end the flush wait waited for is passed by
    other messages; a send answered by that wait was answered SEND_OK for a cut entry (each one lost).
    A send is answered by the quorum, as in ASYNC_FLUSH."""
    async with raft_group(tmp_path, cli_env, flushDiskType="SYNC_FLUSH", syncFlushTimeout=20_000) as g:
        for p in g.producers:
            await p.close()
        g.producers = [
            Producer(g.history, f"p{i}", g.namesrv, TOPIC, queues=QUEUES, timeout=30.0 if i < 3 else 2.0)
            for i in range(5)
        ]
        old = await g.leader()
        async with running(activity(g)):
            await g.acked_at_least(30)
            cut = g.isolate(old)
            await g.leader(other_than=old)
            await g.acked_at_least(g.acked() + 10)  # the quick producers write on the new leader
            healed = g.heal(old)
            await writes_resume(g, healed)
        from_old = acked_by_deposed(g, old, cut)
        assert not from_old, f"SEND_OK from the deposed leader: {from_old[:3]}"
        await assert_consistent(g)
        await assert_terms(g)


async def test_every_member_killed_at_once_then_restarted(tmp_path: Path, cli_env: dict[str, str]) -> None:
    """SIGKILL of all three together, mid-send, then all restarted on their logs: a leader is elected,
    and before any client sends again it serves every SEND_OK (its term record commits what the old
    leader's quorum held, with no send needed); then writes resume and the members agree."""
    async with raft_group(tmp_path, cli_env) as g:
        async with running(activity(g)):
            await g.acked_at_least(60)
            for p in g.producers:  # each ends the send in hand, then waits
                p.resumed.clear()
            for node in g.nodes:
                g.nemesis.kill(node)
            for node in reversed(g.nodes):
                g.nemesis.restart(node)
            for node in g.nodes:
                await node.ready(g.client)
            quiet = await g.settled(await g.leader())
            assert quiet.valid, f"before any send after the restart: {quiet.summary()}"
            for p in g.producers:
                p.resumed.set()
            await writes_resume(g, g.history.last("restart"))
        await assert_consistent(g)
        await assert_terms(g)


async def test_a_topic_younger_than_the_followers_first_sync_survives_a_new_leader(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """The topic was made on the leader after its followers' last metadata sync (every 10 s): no follower
    holds its config, only the log holds its messages. Every member is killed and the two followers
    restart first, so that one of them leads: it must route the topic and take sends again, and serve
    every SEND_OK. Without a config it registered none, clients found no route, and the old leader, back
    as a follower, dropped its own config at its first sync from the new one."""
    async with raft_group(tmp_path, cli_env) as g:
        old = await g.leader()
        async with running(activity(g)):
            await g.acked_at_least(20)
            for node in g.nodes:
                g.nemesis.kill(node)
            for node in [n for i, n in enumerate(g.nodes) if i != old]:
                g.nemesis.restart(node)
                await node.ready(g.client)
            await g.leader(other_than=old)
            await writes_resume(g, g.history.last("kill"))
            g.nemesis.restart(g.nodes[old])
            await g.nodes[old].ready(g.client)
            await writes_resume(g, g.history.last("restart"))
        await assert_consistent(g)
        await assert_terms(g)
