"""A DLedger group of three brokers in this process (fast timings): a leader left alone answers its sends
with a failure, never SEND_OK; restarted after the others elected a new leader, its unreplicated tail is
found in a few round trips, cut, set aside in quarantine and never served, and it follows the new leader's
log. An elected leader commits (and serves) its predecessor's tail with its term record, no send needed."""

from __future__ import annotations

import asyncio
import functools
import math
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from daemon.broker import broker as broker_module
from daemon.broker.broker import Broker
from daemon.broker.headers import QueryMessageRequestHeader
from daemon.namesrv.controller import NamesrvController
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode, ResponseCode
from store.dledger_commitlog import DLedgerCommitLog
from store.dledger_log import DLedgerLog
from store.engine import DefaultMessageStore
from store.names import DLEDGER_TERM_TOPIC
from store.quarantine import list_quarantines
from store.record import decode_msg_id, decode_records
from tests.broker.test_ha import pull_all
from tests.support.broker import BrokerClient, broker_config, start_broker
from tests.support.cli import RunCli
from tests.support.namesrv import namesrv_config
from tests.support.pop import PopClient
from tests.support.ports import free_port
from tests.support.waiting import wait_until

#: Sends made to the leader left alone (none reaches a majority): most make the tail it rejoins with.
LONE = 2000
FAST = {"heart_beat_time_interval_ms": 200, "max_heart_beat_leak": 3, "max_wait_ack_time_ms": 1000}
#: FAST's heartbeats with a loaded host's patience, for a test that needs the leader it elected to keep
#: leading and each send acknowledged: a follower stands after twenty missed heartbeats (a loop held that
#: long by the host is no dead leader), and a send waits a minute for its quorum rather than a second.
STEADY = {"max_heart_beat_leak": 20, "max_wait_ack_time_ms": 60_000}


def members(tmp_path: Path) -> list[dict[str, Any]]:
    peers = ";".join(f"n{i}-127.0.0.1:{free_port()}" for i in range(3))
    return [
        {
            "store_path_root_dir": str(tmp_path / f"n{i}"),
            "enable_dleger_commit_log": True,
            "dleger_group": "g",
            "dleger_peers": peers,
            "dleger_self_id": f"n{i}",
            "metrics_enable": False,
            **FAST,
        }
        for i in range(3)
    ]


def leader_of(brokers: Sequence[Broker | None]) -> Broker | None:
    found = [b for b in brokers if b is not None and b.config.broker_role == "SYNC_MASTER"]
    return found[0] if len(found) == 1 else None


@asynccontextmanager
async def running(keys: list[dict[str, Any]]) -> AsyncIterator[tuple[list[Broker | None], RemotingClient]]:
    """The members of `keys` started (a test sets a stopped one to None), and a client; all stopped after."""
    brokers: list[Broker | None] = [await start_broker(Path(k["store_path_root_dir"]), **k) for k in keys]
    client = RemotingClient()
    try:
        yield brokers, client
    finally:
        await client.close()
        for b in brokers:
            if b is not None:
                await b.stop()


async def led(
    brokers: list[Broker | None], client: RemotingClient, topic: str, acked: int
) -> tuple[Broker, BrokerClient]:
    """The elected leader, after it acknowledged `acked` sends (``acked-i``) to queue 0 of `topic`."""
    leader = await elected(brokers)
    on = BrokerClient(leader.addr, client)
    await on.create_topic(topic, 1)
    for i in range(acked):
        assert (await on.send(topic, f"acked-{i}".encode(), queue_id=0)).code == ResponseCode.SUCCESS
    return leader, on


async def stop_followers(brokers: list[Broker | None], leader: Broker, count: int = 2) -> list[int]:
    """Stop `count` members other than `leader` (set to None in `brokers`): their indexes."""
    followers = [i for i, b in enumerate(brokers) if b is not None and b is not leader][:count]
    for i in followers:
        b = brokers[i]
        assert b is not None
        await b.stop()
        brokers[i] = None
    return followers


async def commit_known(brokers: list[Broker | None], leader: Broker) -> None:
    """Wait until every running member's commit index is the leader's last entry: a follower learns it
    from the leader's next push or idle commit push, which a loaded host may bring late."""
    assert leader.dledger is not None
    last = leader.dledger.log.last_index
    logs = [b.dledger.log for b in brokers if b is not None and b.dledger is not None]
    await wait_until(lambda: all(lg.committed_index == last for lg in logs), 30)


async def elected(brokers: list[Broker | None]) -> Broker:
    """The group's master once one is elected and has taken the role."""
    await wait_until(lambda: leader_of(brokers) is not None, 60)
    leader = leader_of(brokers)
    assert leader is not None
    return leader


@pytest.mark.slow
async def test_an_isolated_leader_acks_nothing_and_its_tail_is_quarantined_on_rejoin(tmp_path: Path) -> None:
    keys = members(tmp_path)
    async with running(keys) as (brokers, client):
        old, on_old = await led(brokers, client, "R", 10)
        await commit_known(brokers, old)  # (idle commit pushes)
        # the followers go: what the leader takes now reaches no majority
        followers = await stop_followers(brokers, old)
        # (each is answered within max_wait_ack_time_ms of its append, but the appends of thousands queue
        # behind one another on a loaded host: the client waits for the answers, whatever they take)
        lone = await asyncio.gather(
            *(on_old.send("R", f"lone-{i}".encode(), queue_id=0, timeout=120) for i in range(LONE))
        )
        assert all(r.code != ResponseCode.SUCCESS for r in lone)  # SYSTEM_ERROR (no majority) or 14
        assert old.dledger is not None
        # (the sends that came after it stepped down were refused unappended: the tail holds the rest)
        tail = old.dledger.log.last_index - old.dledger.log.committed_index
        assert tail >= 100, tail
        old_index = brokers.index(old)
        await old.stop()
        brokers[old_index] = None
        # the two come back and elect one of them
        for i in followers:
            brokers[i] = await start_broker(Path(keys[i]["store_path_root_dir"]), **keys[i])
        new = await elected(brokers)
        on_new = BrokerClient(new.addr, client)
        for i in range(10):
            assert (await on_new.send("R", f"new-{i}".encode(), queue_id=0)).code == ResponseCode.SUCCESS
        # the tail was not committed: read from the stopped member's files, as it loads them (once it
        # runs, the new leader may cut that tail before any look at it here)
        committed, last = on_disk(keys[old_index])
        assert committed < last, (committed, last)
        # the old leader returns: the majority's log wins, its tail goes to quarantine
        back = await start_broker(Path(keys[old_index]["store_path_root_dir"]), **keys[old_index])
        brokers[old_index] = back
        assert back.dledger is not None and new.dledger is not None
        back_log, new_log = back.dledger.log, new.dledger.log
        await wait_until(lambda: back_log.last_index == new_log.last_index, 20)
        # where the logs part was found by bisection: about log2(LONE) compares, not one per entry
        compares = new.dledger.node.pushes[keys[old_index]["dleger_self_id"]].compares
        assert 1 <= compares <= math.log2(LONE) + 3, compares
        expected = [f"acked-{i}".encode() for i in range(10)] + [f"new-{i}".encode() for i in range(10)]
        assert await pull_all(on_new, "R", 0) == expected
        quarantined = list_quarantines(keys[old_index]["store_path_root_dir"])
        assert quarantined and sum(q.records for q in quarantined) >= 100, quarantined
        on_back = BrokerClient(back.addr, client)
        await wait_until(lambda: back_log.committed_index == new_log.committed_index, 20)
        served = await pull_all(on_back, "R", 0)
        assert not any(b.startswith(b"lone") for b in served)
        assert served == expected[: len(served)]


@pytest.mark.slow
async def test_leadership_goes_to_the_preferred_member(tmp_path: Path) -> None:
    """preferredLeaderId: n0 and n1 elect one of them; n2 starts later, catches up, and the leader hands
    over to it (DLedgerServer#checkPreferredLeader); sends then go through n2 as the master."""
    keys = [{**k, "preferred_leader_id": "n2"} for k in members(tmp_path)]
    # (two of three members of a new group: the operator's word that it is new, else each waits for n2)
    keys[:2] = [{**k, "vote_when_emptied": True} for k in keys[:2]]
    async with running(keys[:2]) as (brokers, client):
        first = await elected(brokers)
        await BrokerClient(first.addr, client).create_topic("P", 1)
        for _ in range(5):
            assert (await BrokerClient(first.addr, client).send("P", b"before", queue_id=0)).code == 0
        n2 = await start_broker(Path(keys[2]["store_path_root_dir"]), **keys[2])
        brokers.append(n2)
        await wait_until(lambda: leader_of(brokers) is n2, 30)
        assert n2.config.broker_id == 0 and first.config.broker_role == "SLAVE"
        await BrokerClient(n2.addr, client).create_topic("P", 1)
        r = await BrokerClient(n2.addr, client).send("P", b"via n2", queue_id=0)
        assert r.code == ResponseCode.SUCCESS and r.ext_fields["queueOffset"] == "5"


async def test_a_follower_left_without_a_master_address_asks_the_nameserver_at_its_next_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A follower's registration answered while no master was listed (the leader had stepped down and was
    elected again in a later term, a full-disk member's vote requests deposing it) leaves it no master
    address. Its metadata sync then did nothing until the next registration, a period (30 s) away: a topic
    made on the leader meanwhile was served by no follower. It asks the NameServer at its next sync."""
    monkeypatch.setattr(broker_module, "METADATA_SYNC_INTERVAL", 0.2)
    namesrv = NamesrvController(namesrv_config(tmp_path))
    await namesrv.start()
    keys = [{**k, "namesrv_addr": f"127.0.0.1:{namesrv.port}"} for k in members(tmp_path)]
    try:
        async with running(keys) as (brokers, client):
            leader = await elected(brokers)
            follower = next(b for b in brokers if b is not None and b is not leader)
            await wait_until(lambda: follower.master_addr == leader.addr, 20)  # (its first follow synced)
            follower.master_addr = None  # what that registration's answer leaves
            await BrokerClient(leader.addr, client).create_topic("MadeSince", 4)
            await wait_until(lambda: follower.topics.get("MadeSince") is not None, 5)
            assert follower.master_addr == leader.addr
    finally:
        await namesrv.stop()


@pytest.mark.slow
async def test_an_elected_leader_serves_its_predecessors_tail_without_a_send(tmp_path: Path) -> None:
    """The leader answers sends and is stopped at once: the followers hold the last entries but not the
    commit index that covers them (it comes with the next push). Raft's rule commits them only with an
    entry of the new leader's term: its term record, appended on election, so the new leader serves every
    acknowledged message and takes the master role though no client sends anything."""
    keys = members(tmp_path)
    async with running(keys) as (brokers, client):
        old = await elected(brokers)
        on_old = BrokerClient(old.addr, client)
        await on_old.create_topic("T", 1)
        acked = await asyncio.gather(*(on_old.send("T", f"m-{i}".encode(), queue_id=0) for i in range(20)))
        assert all(r.code == ResponseCode.SUCCESS for r in acked)
        old_index = brokers.index(old)
        await old.stop()
        brokers[old_index] = None
        rest = [b for b in brokers if b is not None]
        # a follower holds the tail uncommitted: its leader's last commit index has not reached it
        assert any(
            b.dledger is not None and b.dledger.log.committed_index < b.dledger.log.last_index for b in rest
        )
        new = await elected(brokers)
        assert new.dledger is not None
        await BrokerClient(new.addr, client).create_topic("T", 1)  # (configs reach slaves every 10 s)
        assert await pull_all(BrokerClient(new.addr, client), "T", 0) == [
            f"m-{i}".encode() for i in range(20)
        ]
        # its term record is the newest committed entry of a topic no client reaches
        term_queue = new.store.get_max_offset(DLEDGER_TERM_TOPIC, 0)
        assert term_queue >= 2  # (the first leader's and this one's)
        assert new.topics.get(DLEDGER_TERM_TOPIC) is None  # (never registered, never routed)
        assert new.runtime_info()["msgPutTotalTodayNow"] == "0"  # a record of its own, not a put counted
        sent = await BrokerClient(new.addr, client).send(DLEDGER_TERM_TOPIC, b"forged", queue_id=0)
        assert sent.code == ResponseCode.NO_PERMISSION, sent.remark
        r = await BrokerClient(new.addr, client).pull("G", DLEDGER_TERM_TOPIC, 0, 0)
        assert r.code == ResponseCode.TOPIC_NOT_EXIST, r.remark
        popped = await PopClient(BrokerClient(new.addr, client), "G").pop_raw(DLEDGER_TERM_TOPIC)
        assert popped.code == ResponseCode.TOPIC_NOT_EXIST, popped.remark


def on_disk(key: dict[str, Any]) -> tuple[int, int]:
    """A stopped member's DLedger log as its next start loads it: (committed index, last index)."""
    config = broker_config(Path(key["store_path_root_dir"]), **key)
    directory = Path(config.store_path_root_dir) / f"dledger-{config.dleger_self_id}"
    log = DLedgerLog(str(directory), data_file_size=config.mapped_file_size_commit_log, read_only=True)
    try:
        return log.committed_index, log.last_index
    finally:
        log.close()


def dispatched(b: Broker) -> bool:
    """Every committed record dispatched (its ConsumeQueue and IndexFile written)."""
    assert isinstance(b.store, DefaultMessageStore)
    return b.store.reput_from_offset >= b.store.commit_log.max_offset


async def _served(on: BrokerClient, topic: str, key: str, msg_id: str) -> tuple[list[bytes], list[bytes]]:
    """What a member serves of one message: by its key (the IndexFile) and by its msgId (its offset)."""
    query = QueryMessageRequestHeader(topic, key, 64, 0, 2**62).to_ext_fields()
    by_key = await on.call(RequestCode.QUERY_MESSAGE, query)
    _, phys = decode_msg_id(msg_id)
    by_id = await on.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(phys)})
    return (
        [m.body for m in decode_records(by_key.body)] if by_key.code == ResponseCode.SUCCESS else [],
        [m.body for m in decode_records(by_id.body)] if by_id.code == ResponseCode.SUCCESS else [],
    )


@pytest.mark.slow
@pytest.mark.pure_python
async def test_a_deposed_leader_never_dispatches_the_tail_its_puts_parsed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: RunCli
) -> None:
    """The leader's puts keep what they parsed of each record for dispatch. Deposed in this process (cut
    off, never restarted) with an unacknowledged tail, it follows the new leader, whose entries replace the
    tail at the same offsets: it serves each acknowledged message once (pull, key, msgId), none of the tail,
    and every member's store verifies clean offline."""
    keys = members(tmp_path)
    async with running(keys) as (brokers, client):
        old, on_old = await led(brokers, client, "Q", 0)
        acked = [await on_old.send("Q", f"acked-{i}".encode(), queue_id=0, keys=f"a{i}") for i in range(5)]
        await commit_known(brokers, old)
        followers = await stop_followers(brokers, old)
        lone = await asyncio.gather(
            *(on_old.send("Q", f"lone-{i}".encode(), queue_id=0, keys=f"l{i}") for i in range(50))
        )
        assert all(r.code != ResponseCode.SUCCESS for r in lone)
        assert old.dledger is not None and isinstance(old.store, DefaultMessageStore)
        assert isinstance(old.store.commit_log, DLedgerCommitLog) and old.store.commit_log.parsed
        # cut off (it sends nothing) while the two come back and elect one of them
        monkeypatch.setattr(old.dledger, "_send", lambda outs: None)
        for i in followers:
            brokers[i] = await start_broker(Path(keys[i]["store_path_root_dir"]), **keys[i])
        others = [b for b in brokers if b is not old]
        await wait_until(lambda: leader_of(others) is not None, 20)
        new = leader_of(others)
        assert new is not None and new.dledger is not None
        on_new = BrokerClient(new.addr, client)
        acked += [await on_new.send("Q", f"new-{i}".encode(), queue_id=0, keys=f"n{i}") for i in range(60)]
        assert all(r.code == ResponseCode.SUCCESS for r in acked)
        monkeypatch.undo()
        old_log, new_log = old.dledger.log, new.dledger.log
        await wait_until(lambda: old_log.last_index == new_log.last_index == old_log.committed_index, 30)
        # every member's commit index at the end too: a follower learns it from the leader's next push or
        # heartbeat, and dispatches (and serves) up to it only
        logs = [b.dledger.log for b in brokers if b is not None and b.dledger is not None]
        await wait_until(lambda: all(lg.committed_index == new_log.last_index for lg in logs), 30)
        assert new.dledger.node.pushes[keys[brokers.index(old)]["dleger_self_id"]].binary  # (after the cut)
        expected = [f"acked-{i}".encode() for i in range(5)] + [f"new-{i}".encode() for i in range(60)]
        sent = [
            (k, r.ext_fields["msgId"])
            for k, r in zip([f"a{i}" for i in range(5)] + [f"n{i}" for i in range(60)], acked, strict=True)
        ]
        for b in brokers:
            assert b is not None
            on = BrokerClient(b.addr, client)
            await wait_until(functools.partial(dispatched, b), 10)
            assert await pull_all(on, "Q", 0) == expected, b.config.dleger_self_id
            for (key, msg_id), body in zip(sent, expected, strict=True):
                assert await _served(on, "Q", key, msg_id) == ([body], [body]), key
            assert await _served(on, "Q", "l0", sent[-1][1]) == ([], [expected[-1]])
    for k in keys:
        report = cli("store", "verify", "--store", k["store_path_root_dir"], "-o", "json")
        assert report.code == 0, report.stdout + report.stderr
