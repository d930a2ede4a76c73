"""A group's offsets deleted on a DLedger leader, then a failover: the members take the offset table from
the leader by the metadata sync only (no NameServer here: each is pointed at the leader), and 4.9.8's
``putAll`` kept a deleted group's offsets on them, so the member elected served them again."""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon.remoting.codes import RequestCode, ResponseCode
from tests.dledger.test_rejoin import elected, members, running
from tests.support.broker import BrokerClient

TOPIC = "Off"


@pytest.mark.slow
async def test_offsets_deleted_on_the_leader_do_not_come_back_at_a_failover(tmp_path: Path) -> None:
    async with running(members(tmp_path)) as (brokers, client):
        old = await elected(brokers)
        on_old = BrokerClient(old.addr, client)
        await on_old.create_topic(TOPIC, 1)
        assert (await on_old.send(TOPIC, b"m", queue_id=0)).code == ResponseCode.SUCCESS
        for group in ("DG", "KG"):
            commit = {"consumerGroup": group, "topic": TOPIC, "queueId": "0", "commitOffset": "1"}
            assert (
                await on_old.call(RequestCode.UPDATE_CONSUMER_OFFSET, commit)
            ).code == ResponseCode.SUCCESS
        rest = [b for b in brokers if b is not None and b is not old]
        for b in rest:
            b.master_addr = old.addr
            await b.sync_from_master()
            assert b.offsets.query_offset("DG", TOPIC, 0) == 1
        delete = {"groupName": "DG", "removeOffset": "true"}
        assert (await on_old.call(RequestCode.DELETE_SUBSCRIPTIONGROUP, delete)).code == ResponseCode.SUCCESS
        for b in rest:
            await b.sync_from_master()
        await old.stop()
        brokers[brokers.index(old)] = None
        new = await elected(brokers)
        assert new.offsets.query_offset("DG", TOPIC, 0) == -1
        assert new.offsets.query_offset("KG", TOPIC, 0) == 1
