"""``mqctl group`` and ``mqctl offset`` against our real NameServer and Broker over TCP."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from daemon.broker.bodies import MessageQueue
from daemon.remoting.codes import RequestCode
from mqctl.errors import ConflictError, NotFoundError, UsageError
from mqctl.services.groups import allocate_averagely
from tests.conftest import CliResult, RunCli
from tests.daemons import LocalCluster, handle, local_cluster

TOPIC = "Progress"
GROUP = "CG_Progress"


@pytest.fixture(scope="module")
def daemons(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A topic with 2 queues of 10 messages each and a group that committed 4 and 10."""
    with local_cluster(tmp_path_factory.mktemp("groups")) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def loaded(daemons: LocalCluster) -> LocalCluster:
    wire = handle(daemons)

    async def fill() -> None:
        from daemon.broker.headers import CreateTopicRequestHeader, UpdateConsumerOffsetRequestHeader

        create = CreateTopicRequestHeader(TOPIC, "TBW102", 2, 2, 6, "SINGLE_TAG")
        assert (await wire.call(RequestCode.UPDATE_AND_CREATE_TOPIC, create.to_ext_fields())).code == 0
        for i in range(20):
            response = await wire.send(TOPIC, f"m{i}".encode(), queue_id=i % 2, keys=f"k{i}")
            assert response.code == 0, response.remark
        for queue_id, offset in ((0, 4), (1, 10)):
            commit = UpdateConsumerOffsetRequestHeader(GROUP, TOPIC, queue_id, offset)
            assert (await wire.call(RequestCode.UPDATE_CONSUMER_OFFSET, commit.to_ext_fields())).code == 0
        await wire.client.close()

    daemons.loop.run(fill())
    return daemons


@pytest.fixture
def mq(cli: RunCli, loaded: LocalCluster) -> RunCli:
    def run(*args: str) -> CliResult:
        return cli(*args, env={"NAMESRV_ADDR": loaded.namesrv_addr})

    return run  # type: ignore[return-value]


def test_group_create_update_list_show_delete(mq: RunCli, loaded: LocalCluster) -> None:
    created = mq("group", "create", "-g", "CG_Admin", "--retry-queues", "2", "--max-retries", "3", "-o", "json")
    assert created.code == 0, created.stderr
    change = created.json()["brokers"][0]
    assert change["action"] == "created" and change["changes"]["retry_max_times"] == [None, 3]
    stored = loaded.broker.groups.table.get("CG_Admin")
    assert stored is not None and stored.retry_queue_nums == 2 and stored.retry_max_times == 3
    assert mq("group", "create", "-g", "CG_Admin").code == ConflictError.exit_code

    updated = mq("group", "update", "-g", "CG_Admin", "--max-retries", "5", "-o", "json").json()
    assert updated["brokers"][0]["changes"] == {"retry_max_times": [3, 5]}
    assert loaded.broker.groups.table.get("CG_Admin").retry_max_times == 5

    names = [row["group"] for row in mq("group", "list", "-o", "json").json()]
    assert "CG_Admin" in names and "TOOLS_CONSUMER" not in names
    assert "TOOLS_CONSUMER" in [row["group"] for row in mq("group", "list", "--system", "-o", "json").json()]

    shown = mq("group", "show", "-g", "CG_Admin", "-o", "json").json()
    assert shown["group_name"] == "CG_Admin" and shown["retry_max_times"] == 5 and shown["online_clients"] == 0

    assert mq("group", "delete", "-g", "CG_Admin", "--yes").code == 0
    assert "CG_Admin" not in loaded.broker.groups.table
    assert mq("group", "show", "-g", "CG_Admin").code == NotFoundError.exit_code


def test_progress_shows_lag_and_filters(mq: RunCli) -> None:
    rows = mq("group", "progress", "-g", GROUP, "-t", TOPIC, "-o", "json").json()
    assert [(r["queue_id"], r["broker_offset"], r["consumer_offset"], r["lag"]) for r in rows] == [
        (0, 10, 4, 6),
        (1, 10, 10, 0),
    ]
    assert rows[0]["last_consumed_store_time"] > 0 and rows[0]["client"] is None
    lagging = mq("group", "progress", "-g", GROUP, "-t", TOPIC, "--lag-over", "0", "-o", "json").json()
    assert [r["queue_id"] for r in lagging] == [0]


def test_offset_reset_plans_then_executes(mq: RunCli, loaded: LocalCluster, tmp_path: Path) -> None:
    shown = mq("offset", "show", "-g", GROUP, "-t", TOPIC, "-o", "json").json()
    assert [(r["committed"], r["lag"]) for r in shown] == [(4, 6), (10, 0)]

    plan = mq("offset", "reset", "-g", GROUP, "-t", TOPIC, "--shift-by", "-3", "-o", "json").json()
    assert plan["executed"] is False
    assert [(q["current"], q["new"]) for q in plan["queues"]] == [(4, 1), (10, 7)]
    offsets = loaded.broker.offsets
    assert [offsets.query_offset(GROUP, TOPIC, q) for q in (0, 1)] == [4, 10]

    saved = tmp_path / "plan.json"
    mq("offset", "reset", "-g", GROUP, "-t", TOPIC, "--to-earliest", "--export", str(saved))
    assert [row["new"] for row in json.loads(saved.read_text())] == [0, 0]

    done = mq("offset", "reset", "-g", GROUP, "-t", TOPIC, "--to-offset", "8", "--execute", "-o", "json").json()
    assert done["executed"] is True and "committed" in done["applied"]
    assert [offsets.query_offset(GROUP, TOPIC, q) for q in (0, 1)] == [8, 8]

    mq("offset", "reset", "-g", GROUP, "-t", TOPIC, "--from-file", str(saved), "--execute")
    assert [offsets.query_offset(GROUP, TOPIC, q) for q in (0, 1)] == [0, 0]

    mq("offset", "reset", "-g", GROUP, "-t", TOPIC, "--to-latest", "--execute")
    assert [offsets.query_offset(GROUP, TOPIC, q) for q in (0, 1)] == [10, 10]
    an_hour_ago = str(int(time.time() * 1000) - 3_600_000)
    by_time = mq("offset", "reset", "-g", GROUP, "-t", TOPIC, "--to-time", an_hour_ago, "-o", "json").json()
    by_duration = mq("offset", "reset", "-g", GROUP, "-t", TOPIC, "--by-duration", "1h", "--execute", "-o", "json").json()
    assert [q["new"] for q in by_time["queues"]] == [q["new"] for q in by_duration["queues"]] == [0, 0]
    assert [offsets.query_offset(GROUP, TOPIC, q) for q in (0, 1)] == [0, 0]

    mq("offset", "reset", "-g", GROUP, "-t", TOPIC, "--to-offset", "4", "--execute")  # restore for other tests


def test_offset_reset_needs_exactly_one_target(mq: RunCli) -> None:
    assert mq("offset", "reset", "-g", GROUP, "-t", TOPIC).code == UsageError.exit_code
    both = mq("offset", "reset", "-g", GROUP, "-t", TOPIC, "--to-earliest", "--to-latest")
    assert both.code == UsageError.exit_code and "--to-earliest, --to-latest" in both.stderr
    assert mq("offset", "reset", "-g", GROUP, "-t", TOPIC, "--to-time", "yesterday").code == UsageError.exit_code


def test_allocate_averagely_matches_rocketmq() -> None:
    queues = [MessageQueue("T", "b", i) for i in range(5)]
    owners = allocate_averagely(queues, ["c2", "c1"])
    assert [owners[q] for q in queues] == ["c1", "c1", "c1", "c2", "c2"]
    few = allocate_averagely(queues[:1], ["c1", "c2"])
    assert few == {queues[0]: "c1"}
