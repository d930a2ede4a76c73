"""A topic younger than one metadata sync, at a DLedger leader's loss: its members take the topic table
from the leader by that sync only (no NameServer here, so never), yet each holds the topic's committed
entries. A follower derives the topic's config from its queues as it dispatches them, as a slave does,
so the members left serve the topic's pulls and the one elected takes its sends, with the topic's queue
count as the data says."""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon.remoting.codes import ResponseCode
from store.names import DLEDGER_TERM_TOPIC, MAX_HELD_QUEUE_NUMS
from tests.broker.test_ha import pull_all
from tests.dledger.test_rejoin import commit_known, elected, members, running
from tests.support.broker import BrokerClient
from tests.support.waiting import wait_until

TOPIC = "Young"


@pytest.mark.slow
async def test_the_members_left_serve_a_topic_made_since_the_last_metadata_sync(tmp_path: Path) -> None:
    async with running(members(tmp_path)) as (brokers, client):
        old = await elected(brokers)
        on_old = BrokerClient(old.addr, client)
        await on_old.create_topic(TOPIC, 8)
        sent = [f"m-{i}".encode() for i in range(5)]
        for body in sent:
            assert (await on_old.send(TOPIC, body, queue_id=5)).code == ResponseCode.SUCCESS
        await commit_known(brokers, old)
        rest = [b for b in brokers if b is not None and b is not old]
        for b in rest:  # (derived once dispatched: a dispatch batch's end)
            await wait_until(lambda b=b: b.store.get_max_offset(TOPIC, 5) == len(sent), 10)
            await wait_until(lambda b=b: b.topics.get(TOPIC) is not None, 10)
            assert b.topics.get(DLEDGER_TERM_TOPIC) is None  # (a store's own records: never routed)
            # before the takeover already: a tail falls back to a follower while the master is down
            assert await pull_all(BrokerClient(b.addr, client), TOPIC, 5) == sent
        await old.stop()  # (no metadata sync ever reached the others)
        brokers[brokers.index(old)] = None
        new = await elected(brokers)
        assert new.dledger is not None  # its dispatches as the leader note nothing (a send calls no more)
        assert new.dledger.on_commit == new.store.dispatch_committed
        assert new._note_replicated not in new.store._listeners  # type: ignore[attr-defined]
        assert all(b._note_replicated in b.store._listeners for b in rest if b is not new)  # type: ignore[attr-defined]
        config = new.topics.get(TOPIC)
        assert config is not None and config.read_queue_nums == config.write_queue_nums == 6  # (queue 5 + 1)
        on_new = BrokerClient(new.addr, client)
        assert await pull_all(on_new, TOPIC, 5) == sent
        # a reader routed by the old leader's 8 queues: those past the derived count are empty, not illegal
        past = await on_new.pull("G", TOPIC, 7, 0)
        assert past.code == ResponseCode.PULL_NOT_FOUND, past.remark
        beyond = await on_new.pull("G", TOPIC, MAX_HELD_QUEUE_NUMS, 0)
        assert beyond.code == ResponseCode.SYSTEM_ERROR, beyond.remark
        r = await on_new.send(TOPIC, b"after", queue_id=5)
        assert r.code == ResponseCode.SUCCESS, r.remark
        follower = next(b for b in brokers if b is not None and b is not new)
        await commit_known(brokers, new)
        await wait_until(lambda: follower.store.get_max_offset(TOPIC, 5) == len(sent) + 1, 10)
        assert await pull_all(BrokerClient(follower.addr, client), TOPIC, 5) == [*sent, b"after"]
