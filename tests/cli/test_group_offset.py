"""``mqctl group`` and ``mqctl offset`` against our real NameServer and Broker over TCP."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from daemon.broker.bodies import MessageQueue
from daemon.remoting.codes import RequestCode, ResponseCode
from mqctl.errors import ConflictError, NotFoundError, UsageError
from mqctl.services import metadata
from mqctl.services.groups import allocate_averagely
from store import SubscriptionGroupConfig
from tests.daemons import LocalCluster, handle, local_cluster
from tests.support.cli import CliResult, RunCli

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
    created = mq(
        "group", "create", "-g", "CG_Admin", "--retry-queues", "2", "--max-retries", "3", "-o", "json"
    )
    assert created.code == 0, created.stderr
    change = created.json()["brokers"][0]
    assert change["action"] == "created" and change["changes"]["max_retries"] == [None, 3]
    assert "extra" not in change["changes"]  # empty: nothing to create (the table read "extra=, ")
    stored = loaded.broker.groups.table.get("CG_Admin")
    assert stored is not None and stored.retry_queue_nums == 2 and stored.retry_max_times == 3
    assert mq("group", "create", "-g", "CG_Admin").code == ConflictError.exit_code

    updated = mq("group", "update", "-g", "CG_Admin", "--max-retries", "5", "-o", "json").json()
    assert updated["brokers"][0]["changes"] == {"max_retries": [3, 5]}
    assert loaded.broker.groups.table.get("CG_Admin").retry_max_times == 5

    names = [row["group"] for row in mq("group", "list", "-o", "json").json()]
    assert "CG_Admin" in names and "TOOLS_CONSUMER" not in names
    assert "TOOLS_CONSUMER" in [row["group"] for row in mq("group", "list", "--system", "-o", "json").json()]

    shown = mq("group", "show", "-g", "CG_Admin", "-o", "json").json()
    assert mq("group", "connections", "-g", "CG_Admin", "-o", "json").json()["clients"] == []  # no client
    # and the table says so, not a KEY/VALUE table of empty rows alone
    none = mq("group", "connections", "-g", "CG_Admin")
    assert none.code == 0 and "no online clients of group CG_Admin" in none.stderr, none.stderr
    assert shown["group"] == "CG_Admin" and shown["max_retries"] == 5 and shown["online_clients"] == 0
    # one name per setting: the flags', the metadata file's, the changes' and group show's (show and the
    # changes said retry_max_times where --max-retries and the file's max_retries are one setting)
    assert set(change["changes"]) - {"extra"} <= set(metadata.GROUP_KEYS) and "group_name" not in shown
    assert set(metadata.GROUP_KEYS) <= set(shown)

    assert mq("group", "delete", "-g", "CG_Admin", "--yes").code == 0
    assert "CG_Admin" not in loaded.broker.groups.table
    assert mq("group", "show", "-g", "CG_Admin").code == NotFoundError.exit_code
    # a group that does not exist has no connections to list: not found, as show says (it was exit 0)
    assert mq("group", "connections", "-g", "CG_Admin").code == NotFoundError.exit_code


def test_group_create_and_update_set_where_consumers_read(mq: RunCli, loaded: LocalCluster) -> None:
    """mqadmin updateSubGroup's -i, -w and -a: which broker a group's consumers read from, which one when
    they fall behind, and whether they hear of membership changes."""
    created = mq("group", "create", "-g", "CG_Slave", "--broker-id", "1", "--no-notify-ids-changed")
    assert created.code == 0, created.stderr
    stored = loaded.broker.groups.table.get("CG_Slave")
    assert stored is not None and (stored.broker_id, stored.notify_consumer_ids_changed_enable) == (1, False)
    updated = mq("group", "update", "-g", "CG_Slave", "--slow-broker-id", "2", "-o", "json").json()
    assert updated["brokers"][0]["changes"] == {"slow_broker_id": [1, 2]}
    stored = loaded.broker.groups.table.get("CG_Slave")
    assert (stored.broker_id, stored.which_broker_when_consume_slowly) == (1, 2)  # the rest as it was


@pytest.mark.parametrize("name", ["%RETRY%CG_Orders", "%DLQ%CG_Orders"])
def test_a_group_named_as_a_groups_own_topic_is_refused(mq: RunCli, loaded: LocalCluster, name: str) -> None:
    """%RETRY%G and %DLQ%G are group G's retry and dead-letter topics: a group of that name would have
    %RETRY%%RETRY%G, and tools telling a group's topics by the prefix would take it for one. The CLI
    refuses it as a bad argument (exit 2) before asking a broker, and the broker refuses it on the wire."""
    for command in ("create", "update"):
        result = mq("group", command, "-g", name)
        assert result.code == UsageError.exit_code, result.stderr
        assert "prefix of every group's" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert loaded.broker.groups.table.get(name) is None

    wire = handle(loaded)

    async def create() -> tuple[int, str | None]:
        try:
            response = await wire.call(
                RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                {},
                body=SubscriptionGroupConfig(name).dumps(),
            )
            return response.code, response.remark
        finally:
            await wire.client.close()

    code, remark = loaded.loop.run(create())
    assert code == ResponseCode.SYSTEM_ERROR and remark is not None and "starts with %" in remark
    assert loaded.broker.groups.table.get(name) is None
    # a group of that name left by an older broker is still shown and deleted: only creation is refused
    assert mq("group", "delete", "-g", name, "--if-exists", "--yes").code == 0


@pytest.mark.parametrize(
    "name", ["TOOLS_CONSUMER", "CID_RMQ_SYS_TRANS", "CID_RMQ_SYS_Mine", "DEFAULT_CONSUMER"]
)
def test_a_system_group_is_not_created(mq: RunCli, loaded: LocalCluster, name: str) -> None:
    """A broker's own groups and their CID_RMQ_SYS_ prefix (5.x's "cannot use system consumer group") and
    4.9.8's DEFAULT_CONSUMER placeholder are refused by 'group create' as a bad argument (exit 2), one
    line, before any broker is asked; before, each was created (or "updated" over the broker's own)."""
    before = loaded.broker.groups.table.get(name)
    result = mq("group", "create", "-g", name, "--max-retries", "3")
    assert result.code == UsageError.exit_code, result.stderr
    assert name in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert loaded.broker.groups.table.get(name) == before


def test_group_list_progress_sums_each_groups_lag(mq: RunCli) -> None:
    """mqadmin consumerProgress without -g (every group's clients, TPS and lag): group list named the
    groups and their brokers only, so finding the lagging one took a command per group."""
    reset = ("offset", "reset", "-g", "CG_Listed", "-t", TOPIC, "--to-offset", "3", "--create-group")
    assert mq(*reset, "--execute", "--yes").code == 0  # 10 messages in each of 2 queues, 3 consumed
    rows = {row["group"]: row for row in mq("group", "list", "--progress", "-o", "json").json()}
    listed = rows["CG_Listed"]
    assert (listed["lag"], listed["clients"], listed["consume_type"]) == (14, 0, None)
    table = mq("group", "list", "--progress")
    assert table.code == 0 and "LAG" in table.stdout and "CLIENTS" in table.stdout, table.stderr


def test_offset_reset_from_group_copies_its_offsets(mq: RunCli) -> None:
    """mqadmin cloneGroupOffset: a renamed group starts where the old one stopped."""
    args = ("offset", "reset", "-g", "CG_Clone", "-t", TOPIC, "--create-group", "-o", "json")
    done = mq(*args, "--from-group", GROUP, "--execute", "--yes")
    assert done.code == 0, done.stderr
    assert [(q["queue_id"], q["new"]) for q in done.json()["queues"]] == [(0, 4), (1, 10)]
    shown = mq("offset", "show", "-g", "CG_Clone", "-t", TOPIC, "-o", "json").json()
    assert [r["consumer_offset"] for r in shown] == [4, 10]
    typo = mq(*args, "--from-group", f"{GROUP}_typo")
    assert typo.code == NotFoundError.exit_code and "--from-group" in typo.stderr, typo.stderr
    # its own offsets: a plan of nothing (it planned and executed a no-op)
    itself = mq("offset", "reset", "-g", GROUP, "-t", TOPIC, "--from-group", GROUP, "--execute", "--yes")
    assert itself.code == 2 and itself.stderr.count("\n") == 1, itself
    assert f"--from-group '{GROUP}' is the group being reset" in itself.stderr, itself.stderr


def test_progress_shows_lag_and_filters(mq: RunCli) -> None:
    rows = mq("group", "progress", "-g", GROUP, "-t", TOPIC, "-o", "json").json()
    assert [(r["queue_id"], r["max_offset"], r["consumer_offset"], r["lag"]) for r in rows] == [
        (0, 10, 4, 6),
        (1, 10, 10, 0),
    ]
    assert rows[0]["last_consumed_store_time_ms"] > 0 and rows[0]["client_id"] is None
    assert rows[0]["last_consumed_store_time"].endswith("Z")  # ISO in JSON, with its _ms twin
    lagging = mq("group", "progress", "-g", GROUP, "-t", TOPIC, "--lag-over", "0", "-o", "json").json()
    assert [r["queue_id"] for r in lagging] == [0]


def test_progress_of_a_group_no_broker_knows_says_it_is_not_found(mq: RunCli) -> None:
    """A typo'd group was said to have "no offsets and no online consumer", as if it existed and had not
    consumed yet (mqadmin consumerProgress says such a group is not there); one that exists and has not
    committed yet has no rows, and no error."""
    typo = mq("group", "progress", "-g", "CG_Progres")
    assert typo.code == NotFoundError.exit_code
    assert typo.stderr.count("\n") == 1 and "group 'CG_Progres' not found" in typo.stderr, typo.stderr
    assert "no offsets" not in typo.stderr
    assert mq("group", "create", "-g", "CG_NotYet").code == 0
    fresh = mq("group", "progress", "-g", "CG_NotYet", "-o", "json")
    assert (fresh.code, fresh.json()) == (0, []), fresh


def test_deleting_a_group_that_does_not_exist_says_so_before_asking(mq: RunCli, loaded: LocalCluster) -> None:
    """It asked first, and off a terminal refused for want of --yes (exit 2), before saying the group
    was not there; a group that exists is still asked about."""
    typo = mq("group", "delete", "-g", "CG_NoSuch")
    assert typo.code == NotFoundError.exit_code, typo.stderr
    assert "group 'CG_NoSuch' not found" in typo.stderr and "--yes" not in typo.stderr
    assert mq("group", "create", "-g", "CG_Kept").code == 0
    asked = mq("group", "delete", "-g", "CG_Kept")
    assert asked.code == UsageError.exit_code and "--yes" in asked.stderr, asked.stderr
    assert loaded.broker.groups.table.get("CG_Kept") is not None


def test_deleting_a_group_with_members_online_says_how_many(mq: RunCli, loaded: LocalCluster) -> None:
    """The question named the brokers alone: a group was deleted with a member online, unsaid. It is still
    deleted (mqadmin deletes regardless); the question and the result say how many were online."""
    assert mq("group", "create", "-g", "CG_Busy").code == 0
    wire = handle(loaded)
    reply = loaded.loop.run(wire.heartbeat("busy-client@1", "CG_Busy", [TOPIC]))
    try:
        assert reply.code == ResponseCode.SUCCESS
        asked = mq("group", "delete", "-g", "CG_Busy")
        assert asked.code == UsageError.exit_code, asked.stderr
        assert ", with 1 consumer of it online?" in asked.stderr, asked.stderr
        deleted = mq("group", "delete", "-g", "CG_Busy", "--yes", "-o", "json")
        assert deleted.code == 0, deleted.stderr
        assert (deleted.json()["action"], deleted.json()["online_consumers"]) == ("deleted", 1)
    finally:
        loaded.loop.run(wire.client.close())
    assert loaded.broker.groups.table.get("CG_Busy") is None


def test_offset_reset_plans_then_executes(mq: RunCli, loaded: LocalCluster, tmp_path: Path) -> None:
    shown = mq("offset", "show", "-g", GROUP, "-t", TOPIC, "-o", "json").json()
    assert [(r["consumer_offset"], r["lag"]) for r in shown] == [(4, 6), (10, 0)]
    # a group no broker knows: the broker answers 0 for it, which read as "committed 0" for a typo
    typo = mq("offset", "show", "-g", f"{GROUP}_typo", "-t", TOPIC)
    assert typo.code == NotFoundError.exit_code and "does not exist on the brokers" in typo.stderr

    plan = mq("offset", "reset", "-g", GROUP, "-t", TOPIC, "--shift-by", "-3", "-o", "json").json()
    assert plan["executed"] is False
    assert [(q["consumer_offset"], q["new"]) for q in plan["queues"]] == [(4, 1), (10, 7)]
    offsets = loaded.broker.offsets
    assert [offsets.query_offset(GROUP, TOPIC, q) for q in (0, 1)] == [4, 10]

    saved = tmp_path / "plan.json"
    exported = mq(
        "offset", "reset", "-g", GROUP, "-t", TOPIC, "--to-earliest", "--export", str(saved), "-o", "json"
    )
    # the next step is that very file, not another plan made at --execute's moment
    assert f"--from-file {saved} --execute" in exported.json()["applied"]
    doc = json.loads(saved.read_text())
    assert (doc["kind"], doc["group"], doc["topic"]) == ("offset-reset", GROUP, TOPIC)
    assert doc["cluster"] == loaded.broker.config.broker_cluster_name and doc["created"].endswith("Z")
    assert [row["new"] for row in doc["queues"]] == [0, 0]

    done = mq(
        "offset", "reset", "-g", GROUP, "-t", TOPIC, "--to-offset", "8", "--execute", "--yes", "-o", "json"
    ).json()
    assert done["executed"] is True and "committed" in done["applied"]
    assert [offsets.query_offset(GROUP, TOPIC, q) for q in (0, 1)] == [8, 8]

    mq("offset", "reset", "-g", GROUP, "-t", TOPIC, "--from-file", str(saved), "--execute", "--yes")
    assert [offsets.query_offset(GROUP, TOPIC, q) for q in (0, 1)] == [0, 0]

    mq("offset", "reset", "-g", GROUP, "-t", TOPIC, "--to-latest", "--execute", "--yes")
    assert [offsets.query_offset(GROUP, TOPIC, q) for q in (0, 1)] == [10, 10]
    # as the export's line says (and the README): the plan names its group and topic, -g/-t may be left out
    applied = mq("offset", "reset", "--from-file", str(saved), "--execute", "--yes", "-o", "json")
    assert applied.code == 0 and applied.json()["group"] == GROUP, applied.stderr
    assert [offsets.query_offset(GROUP, TOPIC, q) for q in (0, 1)] == [0, 0]
    mq("offset", "reset", "-g", GROUP, "-t", TOPIC, "--to-latest", "--execute", "--yes")
    no_group = mq("offset", "reset", "-t", TOPIC, "--to-latest")
    assert no_group.code == UsageError.exit_code and "-g/--group" in no_group.stderr, no_group.stderr
    an_hour_ago = str(int(time.time() * 1000) - 3_600_000)
    by_time = mq("offset", "reset", "-g", GROUP, "-t", TOPIC, "--to-time", an_hour_ago, "-o", "json").json()
    by_duration = mq(
        "offset", "reset", "-g", GROUP, "-t", TOPIC, "--by-duration", "1h", "--execute", "--yes", "-o", "json"
    ).json()
    assert [q["new"] for q in by_time["queues"]] == [q["new"] for q in by_duration["queues"]] == [0, 0]
    assert [offsets.query_offset(GROUP, TOPIC, q) for q in (0, 1)] == [0, 0]

    mq(
        "offset", "reset", "-g", GROUP, "-t", TOPIC, "--to-offset", "4", "--execute", "--yes"
    )  # restore for other tests


def test_a_time_after_the_newest_message_plans_the_newest_message_as_rocketmq_does(mq: RunCli) -> None:
    """RocketMQ's search by time (``ConsumeQueue#getOffsetInQueueByTime``) answers the nearest message, so
    a time after the newest one gives the newest (consumed again), not the queue's end: the help says so."""
    tomorrow = mq("offset", "reset", "-g", GROUP, "-t", TOPIC, "--to-time", "+1d", "-o", "json").json()
    assert [q["new"] for q in tomorrow["queues"]] == [9, 9]  # 10 messages a queue: offsets 0-9
    helped = mq("offset", "reset", "--help").stdout
    assert "nearest" in helped and "at/after" not in helped, helped


def test_offset_reset_needs_exactly_one_target(mq: RunCli) -> None:
    assert mq("offset", "reset", "-g", GROUP, "-t", TOPIC).code == UsageError.exit_code
    both = mq("offset", "reset", "-g", GROUP, "-t", TOPIC, "--to-earliest", "--to-latest")
    assert both.code == UsageError.exit_code and "--to-earliest, --to-latest" in both.stderr
    assert (
        mq("offset", "reset", "-g", GROUP, "-t", TOPIC, "--to-time", "yesterday").code == UsageError.exit_code
    )


def test_allocate_averagely_matches_rocketmq() -> None:
    queues = [MessageQueue("T", "b", i) for i in range(5)]
    owners = allocate_averagely(queues, ["c2", "c1"])
    assert [owners[q] for q in queues] == ["c1", "c1", "c1", "c2", "c2"]
    few = allocate_averagely(queues[:1], ["c1", "c2"])
    assert few == {queues[0]: "c1"}


def test_a_plan_file_applies_only_to_what_it_planned(
    mq: RunCli, loaded: LocalCluster, tmp_path: Path
) -> None:
    """Another group's plan, a legacy plan without its target, or one matching no queue: exit 2, nothing changes."""
    saved = tmp_path / "plan.json"
    assert mq("offset", "reset", "-g", GROUP, "-t", TOPIC, "--to-earliest", "--export", str(saved)).code == 0
    offsets = loaded.broker.offsets
    before = [offsets.query_offset(GROUP, TOPIC, q) for q in (0, 1)]
    other = mq(
        "offset", "reset", "-g", "CG_Other", "-t", TOPIC, "--from-file", str(saved), "--execute", "--yes"
    )
    assert other.code == UsageError.exit_code, other.stderr
    assert "group 'CG_Progress'" in other.stderr
    assert offsets.query_offset("CG_Other", TOPIC, 0) == -1
    legacy = tmp_path / "legacy.json"
    legacy.write_text(json.dumps(json.loads(saved.read_text())["queues"]))
    refused = mq(
        "offset", "reset", "-g", GROUP, "-t", TOPIC, "--from-file", str(legacy), "--execute", "--yes"
    )
    assert refused.code == UsageError.exit_code and "not an offset reset plan" in refused.stderr
    doc = json.loads(saved.read_text())
    for row in doc["queues"]:
        row["broker_name"] = "broker-gone"
    nowhere = tmp_path / "nowhere.json"
    nowhere.write_text(json.dumps(doc))
    none = mq("offset", "reset", "-g", GROUP, "-t", TOPIC, "--from-file", str(nowhere), "--execute", "--yes")
    assert none.code == UsageError.exit_code and "matches no queue" in none.stderr
    assert [offsets.query_offset(GROUP, TOPIC, q) for q in (0, 1)] == before


def test_a_reset_plan_is_a_table_of_queues(mq: RunCli, loaded: LocalCluster) -> None:
    result = mq("offset", "reset", "-g", GROUP, "-t", TOPIC, "--shift-by", "-3")
    assert result.code == 0, result.stderr
    rows = [[c.strip() for c in line.split("│")] for line in result.stdout.splitlines() if "│" in line]
    assert ["group", GROUP] in rows
    queue_rows = [r for r in rows if r[0] == "broker-a"]
    committed = [loaded.broker.offsets.query_offset(GROUP, TOPIC, q) for q in (0, 1)]
    assert [r[1:] for r in queue_rows] == [
        [str(q), str(c), str(c - 3), "-3"] for q, c in enumerate(committed)
    ]
    assert "{" not in result.stdout


def test_executing_a_reset_needs_yes_off_a_terminal(mq: RunCli, loaded: LocalCluster) -> None:
    offsets = loaded.broker.offsets
    before = [offsets.query_offset(GROUP, TOPIC, q) for q in (0, 1)]
    refused = mq("offset", "reset", "-g", GROUP, "-t", TOPIC, "--to-earliest", "--execute")
    assert refused.code == UsageError.exit_code and "--yes" in refused.stderr
    assert [offsets.query_offset(GROUP, TOPIC, q) for q in (0, 1)] == before


def test_offset_reset_refuses_a_group_that_does_not_exist(mq: RunCli, loaded: LocalCluster) -> None:
    """A typo'd group is refused, plan or --execute, instead of getting offsets committed; --create-group
    creates it first."""
    offsets = loaded.broker.offsets
    for extra in ([], ["--execute", "--yes"]):
        typo = mq("offset", "reset", "-g", "CG_Progres", "-t", TOPIC, "--to-earliest", *extra)
        assert typo.code == NotFoundError.exit_code, typo.stderr
        assert "'CG_Progres' does not exist" in typo.stderr and "--create-group" in typo.stderr
    assert offsets.query_offset("CG_Progres", TOPIC, 0) < 0
    assert loaded.broker.groups.table.get("CG_Progres") is None

    made = mq(
        "offset",
        "reset",
        "-g",
        "CG_Fresh",
        "-t",
        TOPIC,
        "--to-offset",
        "3",
        "--create-group",
        "--execute",
        "--yes",
    )
    assert made.code == 0, made.stderr
    assert loaded.broker.groups.table.get("CG_Fresh") is not None
    assert [offsets.query_offset("CG_Fresh", TOPIC, q) for q in (0, 1)] == [3, 3]
    again = mq("offset", "reset", "-g", "CG_Fresh", "-t", TOPIC, "--to-earliest", "-o", "json")
    assert again.code == 0, again.stderr  # it exists now


def test_a_reset_to_where_a_new_group_reads_from_commits_it(mq: RunCli, loaded: LocalCluster) -> None:
    """A group that never committed reads as offset 0 (QUERY_CONSUMER_OFFSET answers 0 while a queue's
    first message is in memory, as 4.9.8's does): a reset to the earliest planned "0 -> 0, change 0",
    committed nothing, and said "offsets committed"; a consumer from the last offset skipped the lot."""
    offsets = loaded.broker.offsets
    assert mq("group", "create", "-g", "CG_Replay").code == 0
    assert [offsets.query_offset("CG_Replay", TOPIC, q) for q in (0, 1)] == [-1, -1]
    done = mq("offset", "reset", "-g", "CG_Replay", "-t", TOPIC, "--to-earliest", "--execute", "--yes")
    assert done.code == 0, done.stderr
    assert [offsets.query_offset("CG_Replay", TOPIC, q) for q in (0, 1)] == [0, 0]


def test_an_empty_csv_still_has_its_header_row(mq: RunCli) -> None:
    """A filter that matches nothing gives the header alone, so a script's CSV reader sees the columns."""
    empty = mq("group", "progress", "-g", GROUP, "--lag-over", "1000000", "-o", "csv")
    assert empty.code == 0, empty.stderr
    assert empty.stdout.splitlines() == [
        "topic,broker_name,queue_id,max_offset,consumer_offset,lag,last_consumed_store_time,"
        "last_consumed_store_time_ms,client_id"
    ]


def test_pop_group_shows_lag_and_in_flight(mq: RunCli, loaded: LocalCluster) -> None:
    """A POP (5.x) group on the same topic as a 4.x group: its lag counts from its first unacked
    message (the offset table holds the ack watermark), its in-flight what it popped and has not acked;
    the 4.x group's offsets are untouched."""
    from tests.support.pop import PopClient

    wire = handle(loaded)

    async def pop_some() -> None:
        c = PopClient(wire, "CG_Pop")
        got = await c.pop(TOPIC, queue_id=0, max_nums=6)
        assert len(got) == 6
        for p in got[:2]:
            assert (await c.ack(TOPIC, p)).code == 0
        await wire.client.close()

    def offsets_4x() -> object:
        rows = mq("group", "progress", "-g", GROUP, "-o", "json").json()
        return [(q["queue_id"], q["consumer_offset"]) for q in rows]

    before = offsets_4x()
    loaded.loop.run(pop_some())
    shown = mq("group", "show", "-g", "CG_Pop", "-o", "json").json()
    assert (shown["total_lag"], shown["pop_in_flight"]) == (20 - 2, 4)  # m0, m2 acked; m4 is not
    assert shown["uncounted_queues"] == 0
    assert offsets_4x() == before
    assert [b["pop_in_flight"] for b in mq("cluster", "status", "-o", "json").json()] == [4]


def test_resetting_a_pop_groups_offsets_moves_its_next_pop(mq: RunCli, loaded: LocalCluster) -> None:
    """`offset reset` of a POP group (no 4.x client online): its next pop reads at the new offset, forward
    (what was lent before is skipped as asked) and back (lent again), and the table keeps what was set."""
    from tests.support.pop import PopClient

    wire = handle(loaded)
    c = PopClient(wire, "CG_PopReset")

    async def pop_offsets() -> list[int]:
        got = await c.pop(TOPIC, queue_id=1, max_nums=32)
        return [p.message.queue_offset for p in got]

    def committed() -> int:
        rows = mq("offset", "show", "-g", "CG_PopReset", "-t", TOPIC, "-o", "json").json()
        return next(r["consumer_offset"] for r in rows if r["queue_id"] == 1)

    def reset(offset: int) -> None:
        done = mq(
            "offset",
            "reset",
            "-g",
            "CG_PopReset",
            "-t",
            TOPIC,
            "--to-offset",
            str(offset),
            "--execute",
            "--yes",
        )
        assert done.code == 0, done.stderr

    assert loaded.loop.run(pop_offsets()) == list(range(10))
    assert committed() == 0  # all ten lent, none acked
    reset(7)
    assert loaded.loop.run(pop_offsets()) == [7, 8, 9]
    assert committed() == 7
    reset(3)
    assert loaded.loop.run(pop_offsets()) == list(range(3, 10))
    assert committed() == 3
    loaded.loop.run(wire.client.close())


#: Names one concept had in different group and offset commands: only the first may appear in their output.
OFFSET_SYNONYMS = (
    ("max_offset", "broker_offset", "brokerOffset"),
    ("consumer_offset", "committed", "current", "consumerOffset"),
    ("client_id", "client", "clientId"),
)


def test_group_and_offset_commands_name_each_concept_once(mq: RunCli, tmp_path: Path) -> None:
    """group progress called a queue's end ``broker_offset`` and the group's offset ``consumer_offset``;
    offset show called them ``max_offset`` and ``committed``, offset reset ``current``; progress's owner
    was ``client`` where group connections say ``client_id``. One name each, in JSON, YAML and CSV, every
    one in the glossary."""
    import re

    import yaml

    from tests.cli.test_msg import GLOSSARY, _fields

    group = "CG_Names"
    reset = ("offset", "reset", "-g", group, "-t", TOPIC)
    made = mq(*reset, "--to-offset", "2", "--create-group", "--execute", "--yes")
    assert made.code == 0, made.stderr
    plan = str(tmp_path / "p.json")
    commands = [
        ("group", "progress", "-g", group, "-t", TOPIC),
        ("group", "list", "--progress"),
        ("group", "show", "-g", group),
        ("group", "connections", "-g", group),
        ("offset", "show", "-g", group, "-t", TOPIC),
        (*reset, "--shift-by", "-1", "--export", plan),
    ]
    found: dict[str, list[object]] = {}
    headers: set[str] = set()
    for args in commands:
        for fmt in ("json", "yaml", "csv"):
            result = mq(*args, "-o", fmt)
            assert result.code == 0, (args, fmt, result.stderr)
            if fmt == "csv":
                headers.update(re.findall(r"[a-z_]+", result.stdout.splitlines()[0]))
            else:
                _fields(yaml.safe_load(result.stdout) if fmt == "yaml" else result.json(), found)
    _fields(json.loads((tmp_path / "p.json").read_text())["queues"], found)
    for preferred, *old in OFFSET_SYNONYMS:
        assert not set(old) & (set(found) | headers), f"{sorted(set(old) & set(found))}: call it {preferred}"
        assert preferred in found and preferred in headers
    first_cells = (line.split("|")[1] for line in GLOSSARY.read_text().splitlines() if line.startswith("| `"))
    documented = {name for cell in first_cells for name in re.findall(r"`([a-z_]+)`", cell)}
    assert not set(found) - documented, f"not in {GLOSSARY.name}: {sorted(set(found) - documented)}"
