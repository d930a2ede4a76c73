"""Rough edges an operator met on a running cluster and on its store: each command says what it means in
the form the others use (flags named in errors, exact integers, nothing committed shown as such)."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mqctl.errors import UsageError
from tests.daemons import LocalCluster, handle, local_cluster
from tests.support.cli import CliResult, RunCli
from tests.support.waiting import wait_for

TOPIC = "EdgeOrders"
HUGE_MS = "9" * 20


@pytest.fixture(scope="module")
def daemons(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with local_cluster(tmp_path_factory.mktemp("edges")) as cluster:
        yield cluster


@pytest.fixture
def mq(cli: RunCli, daemons: LocalCluster) -> RunCli:
    """``cli`` pointed at the module's NameServer."""
    return functools.partial(cli, env={"NAMESRV_ADDR": daemons.namesrv_addr})


def cells(table: str) -> list[list[str]]:
    """A printed table's rows, cell by cell."""
    return [[c.strip() for c in line.split("│")] for line in table.splitlines() if "│" in line]


def store_dir(daemons: LocalCluster) -> str:
    return str(Path(daemons.broker.config.store_path_root_dir))


@pytest.fixture(scope="module")
def keyed(daemons: LocalCluster) -> str:
    """A topic holding a text and a binary message under one key; returns the key."""
    wire = handle(daemons)

    async def fill() -> None:
        from daemon.broker.headers import CreateTopicRequestHeader
        from daemon.remoting.codes import RequestCode

        create = CreateTopicRequestHeader(TOPIC, "TBW102", 2, 2, 6, "SINGLE_TAG")
        assert (await wire.call(RequestCode.UPDATE_AND_CREATE_TOPIC, create.to_ext_fields())).code == 0
        for body in (b"paid order", b"\xff\x00binary"):
            assert (await wire.send(TOPIC, body, queue_id=0, keys="ord-7")).code == 0
        await wire.client.close()

    daemons.loop.run(fill())
    return "ord-7"


# ------------------------------------------------------------------------- store msg query --no-body


def offline(mq: RunCli, daemons: LocalCluster, *args: str, count: int = 1) -> Any:
    """``store msg query ... -o json`` on the running broker's store, once it finds ``count`` messages: the
    broker writes its index files as it flushes them, so a read right after a send may find fewer."""
    found: list[CliResult] = []

    def answered() -> bool:
        found[:] = [mq("store", "msg", "query", "--store", store_dir(daemons), *args, "-o", "json")]
        return found[0].code == 0 and len(found[0].json() if "--id" not in args else [1]) == count

    wait_for(answered, "the store on disk to hold the messages sent", timeout=60)
    return found[0].json()


@pytest.mark.parametrize("no_body", [(), ("--no-body",)], ids=["body", "no-body"])
def test_offline_query_by_key_has_the_online_rows(
    mq: RunCli, daemons: LocalCluster, keyed: str, no_body: tuple[str, ...]
) -> None:
    """``store msg query`` had no --no-body and printed its key rows without the body that the online
    ``msg query`` carries: the same flag now, the same rows."""
    online = mq("msg", "query", "-t", TOPIC, "-k", keyed, *no_body, "-o", "json")
    assert online.code == 0, online
    rows = offline(mq, daemons, "-t", TOPIC, "-k", keyed, *no_body, count=2)
    assert rows == online.json()
    assert all(("body" in row) is not bool(no_body) for row in rows)


@pytest.mark.parametrize("no_body", [(), ("--no-body",)], ids=["body", "no-body"])
def test_offline_query_by_id_has_the_online_record(
    mq: RunCli, daemons: LocalCluster, keyed: str, no_body: tuple[str, ...]
) -> None:
    [first, _] = mq("msg", "query", "-t", TOPIC, "-k", keyed, "-o", "json").json()
    online = mq("msg", "query", "--id", first["msg_id"], *no_body, "-o", "json")
    assert online.code == 0, online
    record = offline(mq, daemons, "--id", first["msg_id"], *no_body)
    assert record == online.json()
    assert ("body" in record) is not bool(no_body)


# ------------------------------------------------------------------------------ msg send --delay


@pytest.mark.parametrize("value", ["5min", "soon", "-5m"])
def test_a_delay_the_parser_rejects_names_the_flag_and_its_forms(mq: RunCli, value: str) -> None:
    """``--delay 5min`` said "bad duration '5min'" without naming the flag (``--delay 99`` did)."""
    result = mq("msg", "send", "-t", TOPIC, "--delay", value, "x")
    assert result.code == UsageError.exit_code, result
    [line] = result.stderr.splitlines()
    assert f"bad --delay {value!r}" in line, line
    assert "90s" in line and "2h30m" in line, line  # what it takes


@pytest.mark.parametrize(
    ("flag", "value"), [("--delay", "4d"), ("--delay", "72h1s"), ("--deliver-at", "+3d1m")]
)
def test_a_delay_beyond_the_brokers_max_is_refused_before_sending(mq: RunCli, flag: str, value: str) -> None:
    """``--delay 4d`` went to the broker and came back a wire error (exit 8): refused here, by the limit the
    broker applies (timerMaxDelaySec's default), on one line naming the flag; nothing is sent."""
    result = mq("msg", "send", "-t", "EdgeFar", flag, value, "x")
    assert result.code == UsageError.exit_code, result
    [line] = result.stderr.splitlines()
    assert f"bad {flag} {value!r}" in line and "timerMaxDelaySec" in line and "3 days" in line, line
    assert mq("topic", "show", "-t", "EdgeFar").code == 3  # never auto-created: nothing went out


@pytest.mark.parametrize(
    "args",
    [
        ("msg", "send", "-t", TOPIC, "x", "--deliver-at", "tomorrow"),
        ("msg", "tail", "-t", TOPIC, "--since", "+5min"),
        ("msg", "query", "-t", TOPIC, "-k", "k", "--until", "yesterday"),
        ("offset", "reset", "-g", "G", "-t", TOPIC, "--by-duration", "5min"),
        ("offset", "reset", "-g", "G", "-t", TOPIC, "--to-time", "noon"),
        # epoch ms past the year 9999: an OSError from the date's formatting, exit 1, where a bad time is 2
        ("msg", "tail", "-t", TOPIC, "--exit", "--since", HUGE_MS),
        ("msg", "query", "-t", TOPIC, "-k", "k", "--since", HUGE_MS),
        ("msg", "query", "-t", TOPIC, "-k", "k", "--since", "-1h", "--until", HUGE_MS),
        ("offset", "reset", "-g", "G", "-t", TOPIC, "--to-time", HUGE_MS),
    ],
    ids=lambda args: args[-2],
)
def test_every_time_flag_names_itself_when_its_value_is_refused(mq: RunCli, args: tuple[str, ...]) -> None:
    result = mq(*args)
    assert result.code == UsageError.exit_code, result
    [line] = result.stderr.splitlines()
    assert f"bad {args[-2]} {args[-1]!r}" in line, line


# ------------------------------------------------------------------------------- top --once lag

LAG_TOPIC = "EdgeLag"
LAG_GROUP = "EdgeLagGroup"
#: Messages on queue 0 (a lag with thousands to separate) and on queue 1.
FIRST, SECOND = 1234, 3


@pytest.fixture(scope="module")
def lagging(daemons: LocalCluster) -> str:
    """A group that committed offset 0 on queue 0 of a topic holding FIRST messages there and SECOND on
    queue 1, and nothing on queue 1; returns the group."""
    import asyncio

    wire = handle(daemons)

    async def fill() -> None:
        from daemon.broker.headers import UpdateConsumerOffsetRequestHeader
        from daemon.remoting.codes import RequestCode

        await wire.create_topic(LAG_TOPIC, 2)
        for queue_id, n in ((0, FIRST), (1, SECOND)):
            for start in range(0, n, 200):
                sends = (
                    wire.send(LAG_TOPIC, b"m", queue_id=queue_id) for _ in range(start, min(n, start + 200))
                )
                assert all(r.code == 0 for r in await asyncio.gather(*sends))
        commit = UpdateConsumerOffsetRequestHeader(LAG_GROUP, LAG_TOPIC, 0, 0)
        assert (await wire.call(RequestCode.UPDATE_CONSUMER_OFFSET, commit.to_ext_fields())).code == 0
        await wire.client.close()

    daemons.loop.run(fill(), timeout=120)
    return LAG_GROUP


@pytest.mark.slow
def test_top_once_prints_lag_as_every_other_table(mq: RunCli, lagging: str) -> None:
    """``top --once`` printed the group's lag as 1,237 where every other table prints 1237: a figure
    copied from it was not one the other commands or a script take. JSON, YAML and CSV carry the integer."""
    total = FIRST + SECOND
    assert mq("group", "create", "-g", lagging, "--if-not-exists").code == 0
    table = mq("top", "--once", "--screen", "groups")
    assert table.code == 0, table
    [line] = [line for line in table.stdout.splitlines() if lagging in line]
    assert str(total) in line.split() and f"{total:,}" not in line, line
    [row] = [
        g
        for g in mq("top", "--once", "--screen", "groups", "-o", "json").json()["groups"]
        if g["group"] == lagging
    ]
    assert row["lag"] == total
    import yaml

    doc = yaml.safe_load(mq("top", "--once", "--screen", "groups", "-o", "yaml").stdout)
    assert [g["lag"] for g in doc["groups"] if g["group"] == lagging] == [total]
    csv_text = mq("top", "--once", "--screen", "groups", "-o", "csv").stdout
    assert f"{lagging},{total}," in csv_text, csv_text


# ------------------------------------------------------------------- offsets nothing committed on


@pytest.mark.slow
def test_offset_show_says_nothing_is_committed_where_nothing_is(mq: RunCli, lagging: str) -> None:
    """A queue the group never committed on read as committed 0 (the broker answers 0 on a young queue):
    no committed offset now, in every form; the lag still counts from 0, where the broker starts it."""
    rows = {
        r["queue_id"]: r for r in mq("offset", "show", "-g", lagging, "-t", LAG_TOPIC, "-o", "json").json()
    }
    assert (rows[0]["consumer_offset"], rows[0]["lag"]) == (0, FIRST)  # committed 0: a real 0
    assert (rows[1]["consumer_offset"], rows[1]["lag"]) == (None, SECOND)
    import yaml

    doc = yaml.safe_load(mq("offset", "show", "-g", lagging, "-t", LAG_TOPIC, "-o", "yaml").stdout)
    assert [r["consumer_offset"] for r in doc] == [0, None]
    table = mq("offset", "show", "-g", lagging, "-t", LAG_TOPIC).stdout
    assert [LAG_TOPIC, "broker-a", "1", "0", str(SECOND), "-", str(SECOND)] in cells(table), table


@pytest.mark.slow
def test_group_progress_says_nothing_is_committed_where_nothing_is(mq: RunCli, lagging: str) -> None:
    """``group progress`` took ConsumeStats' 0 for a committed offset (as mqadmin consumerProgress does)."""
    rows = mq("group", "progress", "-g", lagging, "-t", LAG_TOPIC, "-o", "json").json()
    found = {r["queue_id"]: (r["consumer_offset"], r["lag"]) for r in rows}
    assert found == {0: (0, FIRST), 1: (None, SECOND)}
    table = mq("group", "progress", "-g", lagging, "-t", LAG_TOPIC).stdout
    assert [LAG_TOPIC, "broker-a", "1", str(SECOND), "-", str(SECOND), "never", ""] in cells(table), table


# ------------------------------------------------------------------- store verify, damaged copies


@pytest.mark.slow
def test_store_verify_lists_the_damaged_copies_beside_the_store(cli: RunCli, tmp_path: Path) -> None:
    """A broker that finds its incarnations file damaged keeps a copy beside it (``incarnations.damaged-
    <UTC>``) before writing it again; ``store verify`` did not mention it. Listed now, in table and JSON,
    and said on stderr as a warning: the copy means something damaged the file."""
    store = tmp_path / "broker"
    store.mkdir()
    (store / "incarnations").write_bytes(b"not an incarnation\n")
    with local_cluster(tmp_path):
        pass
    [copy] = [p for p in store.iterdir() if p.name.startswith("incarnations.damaged-")]
    report = cli("store", "verify", "--store", str(store), "-o", "json")
    assert report.code == 0, report
    [listed] = report.json()["damaged_copies"]
    assert (listed["file"], listed["size"]) == (copy.name, copy.stat().st_size)
    assert listed["time_ms"] == copy.stat().st_mtime_ns // 1_000_000 and listed["time"].endswith("Z")
    table = cli("store", "verify", "--store", str(store))
    assert table.code == 0 and copy.name in table.stdout, table
    assert "damaged copies" in table.stdout
    [warning] = [line for line in table.stderr.splitlines() if copy.name in line]
    assert warning.startswith("warning: 1 damaged copy beside the store"), warning


# ----------------------------------------------------------------------------- an operator's pass


def test_a_negative_to_offset_is_refused_and_names_shift_by(mq: RunCli, lagging: str) -> None:
    """``offset reset --to-offset -5`` planned every queue to its start (clamped), as --to-earliest: a
    --shift-by -5 typed as the other flag would have rewound the group to the beginning."""
    result = mq("offset", "reset", "-g", lagging, "-t", LAG_TOPIC, "--to-offset", "-5", "--execute", "--yes")
    assert result.code == UsageError.exit_code, result
    [line] = result.stderr.splitlines()
    assert "--to-offset -5" in line and "--shift-by -5" in line, line
    rows = mq("offset", "show", "-g", lagging, "-t", LAG_TOPIC, "-o", "json").json()
    assert [r["consumer_offset"] for r in rows] == [0, None]  # nothing was changed


def test_store_cq_show_of_a_missing_queue_names_the_queues_there(
    mq: RunCli, daemons: LocalCluster, keyed: str
) -> None:
    """``store cq show -q 5`` said only that there was no such ConsumeQueue; the online ``msg show`` names
    the topic's queues, and so does this now."""
    del keyed
    result = mq("store", "cq", "show", "--store", store_dir(daemons), "-t", TOPIC, "-q", "5")
    assert result.code == 3, result
    assert "(its queues here: 0" in result.stderr, result.stderr


@pytest.mark.slow
def test_a_reset_plan_says_nothing_is_committed_where_nothing_is(mq: RunCli, lagging: str) -> None:
    """The plan's current offset of a queue never committed on read 0, as offset show did."""
    plan = mq("offset", "reset", "-g", lagging, "-t", LAG_TOPIC, "--to-latest", "-o", "json").json()
    assert [(q["queue_id"], q["consumer_offset"], q["new"]) for q in plan["queues"]] == [
        (0, 0, FIRST),
        (1, None, SECOND),
    ]
    assert [q["change"] for q in plan["queues"]] == [FIRST, SECOND]


def test_tail_of_a_missing_topic_with_a_window_prints_one_line(mq: RunCli) -> None:
    """``msg tail -t Missing --since -1h`` printed its window, then the error: two lines for one failure."""
    result = mq("msg", "tail", "-t", "NoSuchTopic", "--since", "-1h")
    assert result.code == 3, result
    assert result.stderr.splitlines() == [
        "mqctl: error: topic 'NoSuchTopic' not found (see 'mqctl topic list')"
    ]


def test_tail_with_a_window_still_says_it(mq: RunCli, keyed: str) -> None:
    del keyed
    result = mq("msg", "tail", "-t", TOPIC, "--since", "-1h", "--until", "now", "-o", "json")
    assert result.code == 0, result
    assert result.stderr.startswith("window: ") and "tailing " + TOPIC in result.stderr, result.stderr
