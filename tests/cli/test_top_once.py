"""``mqctl top --once``: one frame of a screen printed and done, for a script, a log or a ticket (as
``top -b -n 1``): the screen's cells as plain text off a terminal, the raw figures with ``-o json``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mqctl.errors import ConnectError, UsageError
from tests.daemons import LocalCluster, local_cluster
from tests.support.cli import RunCli


@pytest.fixture(scope="module")
def daemons(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with local_cluster(tmp_path_factory.mktemp("toponce")) as cluster:
        yield cluster


def test_once_prints_the_overview_as_plain_text_off_a_terminal(cli: RunCli, daemons: LocalCluster) -> None:
    result = cli("top", "--once", "-n", daemons.namesrv_addr)
    assert result.code == 0, result
    assert "\x1b" not in result.stdout  # no screen, no colour: a file or a ticket gets text
    assert "broker-a" in result.stdout and daemons.broker_addr in result.stdout
    assert "PUT TPS" in result.stdout and "master" in result.stdout


def test_once_json_has_the_time_of_the_frame_and_each_broker(cli: RunCli, daemons: LocalCluster) -> None:
    doc = cli("top", "--once", "-o", "json", "-n", daemons.namesrv_addr).json()
    assert doc["screen"] == "overview" and doc["taken_at_ms"] > 0 and doc["taken_at"].endswith("Z")
    [broker] = doc["brokers"]
    assert (broker["broker_name"], broker["broker_id"], broker["addr"]) == (
        "broker-a",
        0,
        daemons.broker_addr,
    )
    assert broker["state"] == "up" and isinstance(broker["commitlog_bytes"], int)
    assert [n["up"] for n in doc["namesrvs"]] == [True]


def test_once_topics_and_groups_screens(cli: RunCli, daemons: LocalCluster) -> None:
    ns = ("-n", daemons.namesrv_addr)
    assert cli("topic", "create", "-t", "OnceTopic", "-r", "2", "-w", "2", *ns).code == 0
    assert cli("msg", "send", "-t", "OnceTopic", "one", *ns).code == 0
    topics = cli("top", "--once", "--screen", "topics", "--interval", "0.2", "-o", "json", *ns).json()
    [row] = [t for t in topics["topics"] if t["topic"] == "OnceTopic"]
    assert (row["queues"], row["messages"]) == (2, 1)
    assert row["put_tps"] is not None  # measured between the two reads
    text = cli("top", "--once", "--screen", "topics", "--interval", "0.2", *ns)
    assert text.code == 0 and "OnceTopic" in text.stdout, text
    groups = cli("top", "--once", "--screen", "groups", "-o", "json", *ns)
    assert groups.code == 0 and isinstance(groups.json()["groups"], list), groups


def test_once_against_no_nameserver_is_a_connect_error(cli: RunCli) -> None:
    result = cli("top", "--once", "-n", "127.0.0.1:1", "--timeout", "1")
    assert result.code == ConnectError.exit_code, result
    assert result.stdout == ""


def test_output_format_without_once_is_refused(cli: RunCli) -> None:
    result = cli("top", "-o", "json", "-n", "127.0.0.1:1")
    assert result.code == UsageError.exit_code and "--once" in result.stderr, result


@pytest.mark.parametrize("screen", ["overview", "topics", "groups", "store"])
def test_once_csv_is_one_table_without_json_in_its_cells(
    cli: RunCli, daemons: LocalCluster, screen: str
) -> None:
    """``-o csv`` wrote the frame's record as key,value lines with the brokers, topics or files as JSON
    in one cell each: a spreadsheet opened two columns of JSON. Now a row per item, led by the frame's
    time, one column per figure."""
    import csv
    import io

    ns = ("-n", daemons.namesrv_addr)
    assert cli("topic", "create", "-t", "CsvTopic", "--if-not-exists", *ns).code == 0
    assert cli("group", "create", "-g", "CsvGroup", "--if-not-exists", *ns).code == 0
    assert cli("msg", "send", "-t", "CsvTopic", "one", *ns).code == 0
    result = cli("top", "--once", "--screen", screen, "--interval", "0.2", "-o", "csv", *ns)
    assert result.code == 0, result
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert rows and all(row["taken_at_ms"].isdigit() for row in rows)
    assert not any(cell.startswith(("[", "{")) for row in rows for cell in row.values()), result.stdout
    first = next(iter(rows[0]))
    assert first == "taken_at"
    if screen == "overview":
        assert [(r["broker_name"], r["addr"]) for r in rows] == [("broker-a", daemons.broker_addr)]
    elif screen == "topics":
        assert [int(r["messages"]) > 0 for r in rows if r["topic"] == "CsvTopic"] == [True]
    elif screen == "groups":
        assert [r["never_consumed"] for r in rows if r["group"] == "CsvGroup"] == ["yes"]
    elif screen == "store":
        assert all(r["broker_name"] == "broker-a" and r["file"] for r in rows)
