"""``mqctl msg ...`` against our real NameServer and Broker on port 0, checked on the broker's store."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from daemon.broker.headers import CreateTopicRequestHeader, UpdateConsumerOffsetRequestHeader
from daemon.remoting.codes import RequestCode
from daemon.remoting.errors import RemotingCommandError
from mqctl.admin import messaging as wire
from mqctl.admin.client import Admin
from mqctl.units import plural
from store.message import StoredMessage
from store.names import SCHEDULE_TOPIC, TOOLS_CONSUMER_GROUP
from store.record import create_msg_id, decode_msg_id
from tests.daemons import LocalCluster, handle, local_cluster
from tests.support.bounded import finish, read_line
from tests.support.cli import CliResult, RunCli, blocked_writing, run_process, spawn
from tests.support.paths import ROOT

T = TypeVar("T")
TOPIC = "MsgT"
OTHER = "MsgOther"
LATER = "MsgLater"  # its own topic: the delayed message lands ~10 s later, inside other tests' counts
DLQ_GROUP = "CG_Dead"


async def _wait_for_route(namesrv: str, topic: str) -> None:
    async with Admin([namesrv]) as admin:
        for _ in range(200):
            try:
                await admin.topic_route(topic)
                return
            except RemotingCommandError:
                await asyncio.sleep(0.05)
    raise AssertionError(f"{topic} never got a route")


@pytest.fixture(scope="module")
def daemons(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Topics MsgT (4 queues, 8 messages keyed seed-<i>), MsgOther (2 queues, empty) and MsgLater (1 queue)."""
    with local_cluster(tmp_path_factory.mktemp("msg")) as cluster:
        client = handle(cluster)

        async def fill() -> None:
            for topic, queues in ((TOPIC, 4), (OTHER, 2), (LATER, 1)):
                create = CreateTopicRequestHeader(topic, "TBW102", queues, queues, 6, "SINGLE_TAG")
                assert (
                    await client.call(RequestCode.UPDATE_AND_CREATE_TOPIC, create.to_ext_fields())
                ).code == 0
            for i in range(8):
                sent = await client.send(
                    TOPIC, f"seed {i}".encode(), queue_id=i % 4, keys=f"seed-{i} seeds", tags="S"
                )
                assert sent.code == 0, sent.remark
            await client.client.close()
            for topic in (TOPIC, OTHER, LATER):
                await _wait_for_route(cluster.namesrv_addr, topic)

        cluster.loop.run(fill())
        yield cluster


@pytest.fixture
def mq(cli: RunCli, daemons: LocalCluster) -> Callable[..., CliResult]:
    def run(*args: str, input: str | None = None) -> CliResult:
        return cli(*args, env={"NAMESRV_ADDR": daemons.namesrv_addr}, input=input)

    return run


def on_broker(daemons: LocalCluster, fn: Callable[[], T]) -> T:
    """Run ``fn`` on the daemons' loop (the broker's thread), so store reads never race a put."""

    async def call() -> T:
        return fn()

    return daemons.loop.run(call())


def stored(daemons: LocalCluster, msg_id: str) -> StoredMessage:
    _host, offset = decode_msg_id(msg_id)
    found = on_broker(daemons, lambda: daemons.broker.store.look_message_by_offset(offset))
    assert found is not None
    return found.message


def refused_storing_nothing(mq: Callable[..., CliResult], daemons: LocalCluster, *args: str) -> str:
    """Run a command that must be refused before it sends anything: exit 2, the CommitLog as it was. Its
    stderr."""
    before = on_broker(daemons, lambda: daemons.broker.store.max_phy_offset)
    result = mq(*args)
    assert result.code == 2, result.stderr
    assert on_broker(daemons, lambda: daemons.broker.store.max_phy_offset) == before
    return result.stderr


def ok(result: CliResult) -> Any:
    assert result.code == 0, result.stderr
    return result.json()


# ---------------------------------------------------------------------------------------- send


def test_send_stores_tag_keys_properties_on_the_chosen_queue(
    mq: Callable[..., CliResult], daemons: LocalCluster
) -> None:
    sent = ok(
        mq(
            "msg",
            "send",
            "-t",
            OTHER,
            "--tag",
            "TagA",
            "-k",
            "order-1",
            "-k",
            "cust-9",
            "--property",
            "color=red",
            "-q",
            "1",
            "hello world",
            "-o",
            "json",
        )
    )
    assert (sent["status"], sent["topic"], sent["queue_id"], sent["broker"]) == (
        "SEND_OK",
        OTHER,
        1,
        "broker-a",
    )
    m = stored(daemons, sent["msg_id"])
    assert (m.topic, m.queue_id, m.queue_offset) == (OTHER, 1, sent["queue_offset"])
    assert m.body == b"hello world"
    assert (m.tags, m.keys, m.properties["color"]) == ("TagA", ["order-1", "cust-9"], "red")
    assert m.uniq_key == sent["unique_key"]


SEPARATOR = "holds a \\x01 or \\x02 byte: RocketMQ separates a message's properties with them"


@pytest.mark.parametrize(
    ("flag", "value", "said"),
    [
        (
            "--property",
            "TRAN_MSG=true",
            "--property TRAN_MSG is a system property, not a user one (RocketMQ's",
        ),
        ("--property", "DELAY=3", "--property DELAY is a system property, not a user one: use --delay-level"),
        ("--property", "UNIQ_KEY=x", "--property UNIQ_KEY is a system property"),
        ("--tag", "x\x02TRAN_MSG\x01true", f"--tag {SEPARATOR}"),
        ("-k", "a\x01b", f"--key {SEPARATOR}"),
        ("--property", "u=v\x02DELAY\x013", f"--property u {SEPARATOR}"),
    ],
)
def test_send_refuses_what_rocketmq_clients_refuse_and_stores_nothing(
    mq: Callable[..., CliResult], daemons: LocalCluster, flag: str, value: str, said: str
) -> None:
    """``--property TRAN_MSG=true`` stored the message as a transaction's half message (SEND_OK, never
    delivered): a system name is refused before anything is sent, as Java's ``Message#putUserProperty``
    does. A \\x01 or \\x02 in a tag, key or property cannot be encoded: it ended in exit 1 with the
    encoder's ValueError, now a usage error naming the flag."""
    assert said in refused_storing_nothing(mq, daemons, "msg", "send", "-t", OTHER, flag, value, "body")


def test_send_reads_the_body_from_a_file_or_stdin(
    mq: Callable[..., CliResult], daemons: LocalCluster, tmp_path: Path
) -> None:
    payload = bytes(range(256)) * 4
    (tmp_path / "body.bin").write_bytes(payload)
    from_file = ok(mq("msg", "send", "-t", OTHER, "--file", str(tmp_path / "body.bin"), "-o", "json"))
    assert stored(daemons, from_file["msg_id"]).body == payload
    from_stdin = ok(mq("msg", "send", "-t", OTHER, "-o", "json", input="piped body\n"))
    assert stored(daemons, from_stdin["msg_id"]).body == b"piped body\n"


def test_send_lines_sends_each_line_as_a_message(mq: Callable[..., CliResult], daemons: LocalCluster) -> None:
    """``echo hi | mqctl msg send`` sends "hi\\n", the input as it is; -l sends each line without its
    "\\n" (a "\\r" is data), skips empty lines as kcat -P does, and ends with a summary."""
    summary = mq("msg", "send", "-t", OTHER, "-l", "-k", "lined", "-o", "json", input="one\n\ntwo\r\nthree")
    assert ok(summary) == {
        "topic": OTHER,
        "sent": 3,
        "empty_lines_skipped": 1,
        "bytes": len(b"one" + b"two\r" + b"three"),
        "brokers": {"broker-a": 3},
    }
    rows = ok(mq("msg", "query", "-t", OTHER, "-k", "lined", "-o", "json"))
    assert sorted(r["body"] for r in rows) == ["one", "three", "two\r"]
    assert "--lines reads stdin" in refused_storing_nothing(
        mq, daemons, "msg", "send", "-t", OTHER, "-l", "x"
    )
    long = mq("msg", "send", "-t", OTHER, "-l", "-k", "capped", "--max-size", "3", input="abc\nabcd\nab\n")
    assert long.code == 2 and "line 2 is over 3 bytes" in long.stderr and "(1 sent before it)" in long.stderr
    assert [r["body"] for r in ok(mq("msg", "query", "-t", OTHER, "-k", "capped", "-o", "json"))] == ["abc"]


def test_send_with_a_delay_level_goes_through_the_schedule_topic(
    mq: Callable[..., CliResult], daemons: LocalCluster
) -> None:
    sent = ok(mq("msg", "send", "-t", LATER, "--delay-level", "3", "-k", "later", "tick", "-o", "json"))
    assert sent["delay_level"] == 3
    m = stored(daemons, sent["msg_id"])
    assert (m.topic, m.queue_id) == (SCHEDULE_TOPIC, 2)
    assert (m.properties["REAL_TOPIC"], m.properties["DELAY"]) == (LATER, "3")


def test_send_table_output_says_what_changed(mq: Callable[..., CliResult]) -> None:
    result = mq("msg", "send", "-t", OTHER, "plain")
    assert result.code == 0, result.stderr
    assert "SEND_OK" in result.stdout and OTHER in result.stdout


# --------------------------------------------------------------------------------------- query


def test_query_by_key_returns_verified_hits_and_prints_the_window(
    mq: Callable[..., CliResult], daemons: LocalCluster
) -> None:
    result = mq("msg", "query", "-t", TOPIC, "-k", "seeds", "--since", "-1h", "-o", "json")
    rows = ok(result)
    assert sorted(r["keys"] for r in rows) == sorted(f"seed-{i} seeds" for i in range(8))
    for row in rows:
        assert "seeds" in stored(daemons, row["msg_id"]).keys
    assert result.stderr.startswith("window: ")
    assert "(store time, UTC)" in result.stderr
    one = mq("msg", "query", "-t", TOPIC, "-k", "seed-3", "-o", "json")
    assert [r["queue_id"] for r in ok(one)] == [3]
    assert one.stderr == ""  # no time given: no "window: 1970 .. now" line


def test_query_by_key_in_csv_and_yaml(mq: Callable[..., CliResult]) -> None:
    as_csv = mq("msg", "query", "-t", TOPIC, "-k", "seed-1", "-o", "csv")
    assert as_csv.code == 0, as_csv.stderr
    (row,) = list(csv.DictReader(io.StringIO(as_csv.stdout)))
    assert (row["topic"], row["keys"], row["tags"]) == (TOPIC, "seed-1 seeds", "S")
    import yaml

    (doc,) = yaml.safe_load(mq("msg", "query", "-t", TOPIC, "-k", "seed-1", "-o", "yaml").stdout)
    assert doc["msg_id"] == row["msg_id"]


def test_query_and_show_carry_the_body_in_every_format(mq: Callable[..., CliResult], tmp_path: Path) -> None:
    import base64

    import yaml

    ok(mq("msg", "send", "-t", OTHER, "-q", "1", "-k", "bodytext", "héllo text", "-o", "json"))
    (row,) = ok(mq("msg", "query", "-t", OTHER, "-k", "bodytext", "-o", "json"))
    assert (row["body"], row["body_encoding"]) == ("héllo text", "utf-8")
    (as_csv,) = list(
        csv.DictReader(io.StringIO(mq("msg", "query", "-t", OTHER, "-k", "bodytext", "-o", "csv").stdout))
    )
    assert as_csv["body"] == "héllo text"
    (as_yaml,) = yaml.safe_load(mq("msg", "query", "-t", OTHER, "-k", "bodytext", "-o", "yaml").stdout)
    assert as_yaml["body"] == "héllo text"
    assert "héllo text" in mq("msg", "query", "-t", OTHER, "-k", "bodytext").stdout
    (bare,) = ok(mq("msg", "query", "-t", OTHER, "-k", "bodytext", "--no-body", "-o", "json"))
    assert "body" not in bare and "body_encoding" not in bare

    binary = bytes([0xFF, 0xFE, 0x00, 0x80]) * 8
    (tmp_path / "body.bin").write_bytes(binary)
    sent = ok(mq("msg", "send", "-t", OTHER, "-q", "1", "--file", str(tmp_path / "body.bin"), "-o", "json"))
    shown = ok(mq("msg", "show", "-t", OTHER, "-q", "1", "--offset", str(sent["queue_offset"]), "-o", "json"))
    assert shown["body_encoding"] == "base64" and base64.b64decode(shown["body"]) == binary
    by_id = ok(mq("msg", "query", "--id", sent["msg_id"], "-o", "json"))
    assert base64.b64decode(by_id["body"]) == binary
    no_body = ok(
        mq(
            "msg",
            "show",
            "-t",
            OTHER,
            "-q",
            "1",
            "--offset",
            str(sent["queue_offset"]),
            "--no-body",
            "-o",
            "json",
        )
    )
    assert "body" not in no_body


def test_query_by_key_outside_the_window_is_not_found(mq: Callable[..., CliResult]) -> None:
    result = mq("msg", "query", "-t", TOPIC, "-k", "seed-1", "--until", "1000000000000")
    assert result.code == 3
    assert "window: 1970-01-01T00:00:00.000Z .. 2001-09-09T01:46:40.000Z" in result.stderr
    assert "no message with key 'seed-1'" in result.stderr


def test_a_duration_given_for_a_time_says_how_to_write_it(mq: Callable[..., CliResult]) -> None:
    """``--since 10m`` (kubectl logs' form) said "bad time '10m'" and listed every form but the one meant:
    the one line now says it is a duration and writes the time it stands for, -10m, and +10m."""
    for args in (
        ("msg", "tail", "-t", TOPIC, "--since", "10m"),
        ("msg", "query", "-t", TOPIC, "-k", "k", "--until", "2h"),
    ):
        result = mq(*args)
        given = args[-1]
        assert result.code == 2 and result.stderr.count("\n") == 1, result.stderr
        assert (
            f"'{given}': a duration, not a time: {given} ago is -{given}, {given} from now +{given}"
            in result.stderr
        )


def test_query_by_id_and_by_unique_key(mq: Callable[..., CliResult], daemons: LocalCluster) -> None:
    sent = ok(mq("msg", "send", "-t", OTHER, "-k", "by-id", "find me", "-o", "json"))
    shown = ok(mq("msg", "query", "--id", sent["msg_id"], "-o", "json"))
    assert (shown["body"], shown["keys"], shown["topic"]) == ("find me", "by-id", OTHER)
    assert shown["store_host"] == daemons.broker_addr
    by_uniq = ok(mq("msg", "query", "-t", OTHER, "--unique-key", sent["unique_key"], "-o", "json"))
    assert by_uniq["msg_id"] == sent["msg_id"]
    # one shape: --unique-key printed a list (a row) where --id printed the record (key/value pairs)
    by_id = ok(mq("msg", "query", "--id", sent["unique_key"], "-o", "json"))
    assert by_uniq == by_id and by_uniq["found_by"] == "unique_key"
    assert (
        ok(mq("msg", "query", "--unique-key", sent["unique_key"].lower(), "-o", "json")) == by_id
    )  # any topic
    table = mq("msg", "query", "-t", OTHER, "--unique-key", sent["unique_key"])
    assert table.code == 0 and "KEY" in table.stdout and "VALUE" in table.stdout, table.stdout


def test_query_by_id_takes_the_client_id_send_prints_and_says_which_kind_it_found(
    mq: Callable[..., CliResult],
) -> None:
    """``msg send`` prints both ids; ``--id`` finds the message by either, with or without --topic."""
    sent = ok(mq("msg", "send", "-t", OTHER, "-k", "either-id", "either way", "-o", "json"))
    assert len(sent["unique_key"]) == len(sent["msg_id"]) == 32
    for args in (["--id", sent["unique_key"]], ["--id", sent["unique_key"].lower(), "-t", OTHER]):
        result = mq("msg", "query", *args, "-o", "json")
        found = ok(result)
        assert (found["found_by"], found["msg_id"], found["unique_key"]) == (
            "unique_key",
            sent["msg_id"],
            sent["unique_key"],
        )
        assert found["body"] == "either way"
        assert "is a client id (unique_key)" in result.stderr
    by_offset = mq("msg", "query", "--id", sent["msg_id"], "-o", "json")
    assert ok(by_offset)["found_by"] == "msg_id"
    assert "is an offset id (msg_id)" in by_offset.stderr
    elsewhere = mq("msg", "query", "--id", sent["unique_key"], "-t", TOPIC)
    assert elsewhere.code == 3, elsewhere.stderr
    for bad in ("Z" * 32, "nonsense", "Z" * 34):  # the lengths of both ids: --id takes either
        not_an_id = mq("msg", "query", "--id", bad)
        assert not_an_id.code == 2 and not_an_id.stderr.count("\n") == 1, not_an_id.stderr
        assert "offset id (msg_id) is 32 hex digits (56 from an IPv6 broker)" in not_an_id.stderr
        assert "client id (unique_key) 32 (34 from a 5.x client)" in not_an_id.stderr


def test_query_by_id_of_a_missing_offset_or_an_unreachable_broker(
    mq: Callable[..., CliResult], daemons: LocalCluster
) -> None:
    host, port = daemons.broker_addr.rsplit(":", 1)
    beyond = create_msg_id((host, int(port)), 1 << 40)
    assert mq("msg", "query", "--id", beyond).code == 3
    unreachable = mq("msg", "query", "--id", create_msg_id(("127.0.0.1", 1), 0))
    assert unreachable.code == 5, unreachable.stderr
    # not the NameServer nor a broker it lists: the line says where the address came from
    assert "holds the address of the broker that stored the message: 127.0.0.1:1, and it does not answer" in (
        unreachable.stderr
    )
    assert "client id (unique_key)" in unreachable.stderr


# ---------------------------------------------------------------------------------------- show


def test_show_a_queue_offset(mq: Callable[..., CliResult], daemons: LocalCluster) -> None:
    shown = ok(mq("msg", "show", "-t", TOPIC, "-q", "2", "--offset", "1", "-o", "json"))
    assert (shown["queue_id"], shown["queue_offset"], shown["body"]) == (2, 1, "seed 6")
    assert shown["properties"]["KEYS"] == "seed-6 seeds"
    assert stored(daemons, shown["msg_id"]).body == b"seed 6"
    table = mq("msg", "show", "-t", TOPIC, "-q", "2", "--offset", "1")
    assert table.code == 0 and "seed 6" in table.stdout


def test_user_data_is_shown_as_data_never_as_markup(mq: Callable[..., CliResult]) -> None:
    """A key ``[urgent]``, tag ``[vip]`` and a body holding ``[/b]`` show as typed (no empty cell, no crash)."""
    body = "alert [/b] [bold]not bold[/bold]"
    sent = ok(
        mq("msg", "send", "-t", OTHER, "-q", "0", "--tag", "[vip]", "-k", "[urgent]", body, "-o", "json")
    )
    by_id = mq("msg", "query", "--id", sent["msg_id"])
    assert by_id.code == 0, by_id.stderr
    for text in ("[urgent]", "[vip]", "[/b]", "[bold]not bold[/bold]"):
        assert text in by_id.stdout
    shown = mq("msg", "show", "-t", OTHER, "-q", "0", "--offset", str(sent["queue_offset"]))
    assert shown.code == 0, shown.stderr
    assert "alert [/b] [bold]not bold[/bold]" in shown.stdout and "[urgent]" in shown.stdout
    listed = mq("msg", "query", "-t", OTHER, "-k", "[urgent]")
    assert listed.code == 0, listed.stderr
    assert "[urgent]" in listed.stdout and "[vip]" in listed.stdout


HOSTILE = "\x1b[31mred\x1b[0m\ttab\x07bell\rback\x7fdel\x9b2J\u202eevil"


def test_control_characters_in_user_data_never_reach_the_terminal_raw(mq: Callable[..., CliResult]) -> None:
    """ESC, TAB, BEL, CR, DEL, a C1 CSI and a bidi override in a body, key and tag are shown escaped in
    tables and tail lines; --raw prints them as they are; JSON keeps the exact text."""
    hostile_tag_and_key = ["--tag", "t\x1b[2J", "-k", "k\x1b]0;title\x07"]
    sent = ok(mq("msg", "send", "-t", OTHER, "-q", "0", *hostile_tag_and_key, HOSTILE, "-o", "json"))
    at = ["-t", OTHER, "-q", "0", "--offset", str(sent["queue_offset"])]
    views = {
        "show": mq("msg", "show", *at),
        "query": mq("msg", "query", "--id", sent["msg_id"]),
        "query -k": mq("msg", "query", "-t", OTHER, "-k", "k\x1b]0;title\x07"),
        "tail": mq("msg", "tail", "-t", OTHER, "--from", "earliest", "--exit"),
    }
    for name, result in views.items():
        assert result.code == 0, (name, result.stderr)
        bad = [
            c
            for c in result.stdout
            if (ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) <= 0x9F or c == "\u202e"
        ]
        assert not bad, (name, bad)
    shown = views["show"].stdout
    for escaped in (
        "\\x1b[31mred",
        "\\ttab",
        "\\x07bell",
        "\\rback",
        "\\x7fdel",
        "\\x9b2J",
        "\\u202eevil",
        "t\\x1b[2J",
    ):
        assert escaped in shown, escaped
    assert "\\x1b[31mred" in views["tail"].stdout
    raw = mq("msg", "show", *at, "--raw")
    assert raw.code == 0 and "\x1b[31mred\x1b[0m" in raw.stdout
    assert ok(mq("msg", "show", *at, "-o", "json"))["body"] == HOSTILE


def test_an_error_line_never_carries_control_characters(capsys: pytest.CaptureFixture[str]) -> None:
    """A server's remark goes into the error line as it came: its escape sequences must not."""
    from mqctl.cli.app import _fail
    from mqctl.errors import from_response_code

    error = from_response_code(1, "busy \x1b]0;pwned\x07\x1b[2J\ttry later", action="request failed")
    assert _fail(str(error), error.exit_code) == 8
    line = capsys.readouterr().err
    assert "\x1b" not in line and "\x07" not in line and line.count("\n") == 1
    assert "busy \\x1b]0;pwned\\x07\\x1b[2J\\ttry later" in line


def test_times_are_local_in_tables_utc_with_flag_and_iso_in_json(cli: RunCli, daemons: LocalCluster) -> None:
    env = {"NAMESRV_ADDR": daemons.namesrv_addr, "TZ": "Asia/Tokyo"}
    shown = cli("msg", "show", "-t", TOPIC, "-q", "1", "--offset", "0", "-o", "json", env=env).json()
    assert shown["store_time"].endswith("Z") and isinstance(shown["store_time_ms"], int)
    local = cli("msg", "show", "-t", TOPIC, "-q", "1", "--offset", "0", env=env).stdout
    rows = {
        r[0]: r[1]
        for r in ([c.strip() for c in line.split("│")] for line in local.splitlines())
        if len(r) == 2
    }
    assert rows["store_time"].endswith("+09:00") and "store_time_ms" not in rows
    utc = cli("--utc", "msg", "show", "-t", TOPIC, "-q", "1", "--offset", "0", env=env).stdout
    rows = {
        r[0]: r[1] for r in ([c.strip() for c in line.split("│")] for line in utc.splitlines()) if len(r) == 2
    }
    assert rows["store_time"] == shown["store_time"]


def test_show_never_commits_an_offset(mq: Callable[..., CliResult], daemons: LocalCluster) -> None:
    ok(mq("msg", "show", "-t", TOPIC, "-q", "0", "--offset", "0", "-o", "json"))
    offsets = on_broker(daemons, lambda: daemons.broker.offsets.query_offset(TOOLS_CONSUMER_GROUP, TOPIC, 0))
    assert offsets == -1


# ---------------------------------------------------------------------------------------- tail


def test_tail_from_earliest_until_the_end_as_json_lines(mq: Callable[..., CliResult]) -> None:
    result = mq("msg", "tail", "-t", TOPIC, "--from", "earliest", "--exit", "-o", "json")
    assert result.code == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert sorted(m["body"] for m in lines) == sorted(f"seed {i}" for i in range(8))
    assert "8 messages" in result.stderr
    table = mq("msg", "tail", "-t", TOPIC, "--from", "earliest", "--exit")
    assert table.code == 0, table.stderr
    assert len(table.stdout.splitlines()) == 8  # one line per message, whatever the body holds
    assert all(line.split(" ")[1] == TOPIC for line in table.stdout.splitlines())


def test_tail_from_a_groups_committed_offsets(mq: Callable[..., CliResult], daemons: LocalCluster) -> None:
    client = handle(daemons)

    async def commit() -> None:
        for queue_id in range(4):
            header = UpdateConsumerOffsetRequestHeader("CG_Tail", TOPIC, queue_id, 1)  # each queue holds 2
            assert (await client.call(RequestCode.UPDATE_CONSUMER_OFFSET, header.to_ext_fields())).code == 0
        await client.client.close()

    daemons.loop.run(commit())
    result = mq("msg", "tail", "-t", TOPIC, "-g", "CG_Tail", "--exit", "-o", "json")
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert sorted(m["body"] for m in lines) == [f"seed {i}" for i in range(4, 8)]
    assert all(m["queue_offset"] == 1 for m in lines)


def test_tail_reads_a_store_time_window(mq: Callable[..., CliResult], daemons: LocalCluster) -> None:
    """--since/--until: the dashboard's search by topic and time, mqadmin printMsg."""
    topic = "MsgWindow"
    client = handle(daemons)

    async def fill() -> None:
        create = CreateTopicRequestHeader(topic, "TBW102", 2, 2, 6, "SINGLE_TAG")
        assert (await client.call(RequestCode.UPDATE_AND_CREATE_TOPIC, create.to_ext_fields())).code == 0
        for i in range(6):
            assert (await client.send(topic, f"w{i}".encode(), queue_id=i % 2)).code == 0
            await asyncio.sleep(0.005)  # store times apart
        await client.client.close()
        await _wait_for_route(daemons.namesrv_addr, topic)

    daemons.loop.run(fill())
    every = mq("msg", "tail", "-t", topic, "--from", "earliest", "--exit", "-o", "json")
    stored = [(m["store_time_ms"], m["body"]) for m in map(json.loads, ok_lines(every))]
    times = sorted(t for t, _ in stored)

    def bodies(*args: str) -> list[str]:
        return sorted(json.loads(line)["body"] for line in ok_lines(mq("msg", "tail", "-t", topic, *args)))

    since, until = times[1], times[4]
    inside = sorted(b for t, b in stored if since <= t <= until)
    assert 0 < len(inside) < 6
    assert bodies("--since", str(since), "--until", str(until), "-o", "json") == inside  # --until ends it
    assert bodies("--until", str(times[2]), "-o", "json") == sorted(b for t, b in stored if t <= times[2])
    assert bodies("--since", str(times[3]), "--exit", "-o", "json") == sorted(
        b for t, b in stored if t >= times[3]
    )
    assert bodies("--since", "+1h", "--exit", "-o", "json") == []  # a time to come: nothing yet, no error
    for refused in (("-g", "CG_Window"), ("--from", "earliest")):
        result = mq("msg", "tail", "-t", topic, "--since", str(since), *refused)
        assert result.code == 2 and "not with" in result.stderr, result.stderr
    by_time = mq("msg", "query", "-t", topic, "--since", "-1h")
    assert by_time.code == 2 and "msg tail -t TOPIC --since" in by_time.stderr, by_time.stderr


def _tail(cli_env: dict[str, str], daemons: LocalCluster, *args: str) -> subprocess.Popen[str]:
    """``msg tail -t MsgT ARGS -o json``, running."""
    return spawn(
        cli_env, "msg", "tail", "-t", TOPIC, *args, "-o", "json", env={"NAMESRV_ADDR": daemons.namesrv_addr}
    )


@pytest.mark.slow
def test_tail_streams_new_messages(
    cli_env: dict[str, str], daemons: LocalCluster, mq: Callable[..., CliResult]
) -> None:
    proc = _tail(cli_env, daemons, "--max-messages", "2")
    try:
        assert proc.stderr is not None
        started = read_line(proc, proc.stderr)
        assert "tailing MsgT: 4 queues" in started
        for body in ("live 1", "live 2"):
            ok(mq("msg", "send", "-t", TOPIC, body, "-o", "json"))
        out, _ = finish(proc, 30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0
    assert sorted(json.loads(line)["body"] for line in out.splitlines()) == ["live 1", "live 2"]


# -------------------------------------------------------------------------------------- resend


@pytest.fixture(scope="module")
def dead_letters(daemons: LocalCluster) -> list[str]:
    """Two messages of MsgOther sent to %DLQ%CG_Dead (send-back with delay level -1); their DLQ msgIds."""
    client = handle(daemons)

    async def kill() -> list[str]:
        ids = []
        async with Admin([daemons.namesrv_addr]) as admin:
            for i in range(2):
                sent = await wire.send(
                    admin,
                    daemons.broker_addr,
                    OTHER,
                    f"dead {i}".encode(),
                    queue_id=0,
                    properties={"KEYS": f"dead-{i}", "TAGS": "D", "color": "blue"},
                )
                _host, offset = decode_msg_id(sent.offset_msg_id)
                await wire.send_back(
                    admin, daemons.broker_addr, group=DLQ_GROUP, phys_offset=offset, delay_level=-1
                )
            await _wait_for_route(daemons.namesrv_addr, f"%DLQ%{DLQ_GROUP}")
            for m in (await wire.pull(admin, daemons.broker_addr, f"%DLQ%{DLQ_GROUP}", 0, 0)).messages:
                ids.append(m.msg_id)
        await client.client.close()
        return ids

    ids = daemons.loop.run(kill())
    assert len(ids) == 2
    return ids


MANY = "MsgMany"
MANY_GROUP = "CG_Many"
MANY_COUNT = 4000  # enough that the run is still sending when Ctrl-C comes (else the test says so)


def _kv(daemons: LocalCluster, namespace: str, key: str) -> str | None:
    async def get() -> str | None:
        async with Admin([daemons.namesrv_addr]) as admin:
            return await admin.kv_get(namespace, key)

    return daemons.loop.run(get())


@pytest.mark.slow
def test_ctrl_c_during_a_resend_reports_what_it_did_and_loses_and_duplicates_nothing(
    cli_env: dict[str, str], daemons: LocalCluster
) -> None:
    """Ctrl-C mid-run: exit 130, one line, the outcomes so far on stdout; every copy the broker stored is
    in the record, so the next run sends exactly the rest."""
    client = handle(daemons)

    async def kill() -> None:
        create = CreateTopicRequestHeader(MANY, "TBW102", 1, 1, 6, "SINGLE_TAG")
        assert (await client.call(RequestCode.UPDATE_AND_CREATE_TOPIC, create.to_ext_fields())).code == 0
        async with Admin([daemons.namesrv_addr]) as admin:
            await _wait_for_route(daemons.namesrv_addr, MANY)

            async def dead_letter(i: int) -> None:
                body = f"many {i}".encode()
                sent = await wire.send(admin, daemons.broker_addr, MANY, body, queue_id=0, properties={})
                _host, offset = decode_msg_id(sent.offset_msg_id)
                await wire.send_back(
                    admin, daemons.broker_addr, group=MANY_GROUP, phys_offset=offset, delay_level=-1
                )

            for start in range(0, MANY_COUNT, 100):
                await asyncio.gather(*(dead_letter(i) for i in range(start, min(start + 100, MANY_COUNT))))
        await _wait_for_route(daemons.namesrv_addr, f"%DLQ%{MANY_GROUP}")
        await client.client.close()

    daemons.loop.run(kill(), timeout=120)
    argv = ["msg", "resend", "-g", MANY_GROUP, "--execute", "--yes", "-o", "json"]
    env = {"NAMESRV_ADDR": daemons.namesrv_addr}
    proc = spawn(cli_env, *argv, env=env)
    try:
        deadline = time.monotonic() + 60
        while not _kv(daemons, "MQCTL_DLQ_RESENT", MANY_GROUP) and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        proc.send_signal(2)
        out, err = finish(proc, 30)
    assert proc.returncode == 130, err
    (line,) = err.strip().splitlines()
    assert line.startswith("mqctl: error: interrupted after re-sending ") and f"of {MANY_COUNT:,}" in line, (
        line
    )
    report = json.loads(out)
    resent = [o for o in report if o["outcome"] == "RESENT"]
    assert 0 < len(resent) < MANY_COUNT, "the run ended before Ctrl-C: raise MANY_COUNT"
    assert f"re-sending {len(resent)} of" in line

    def copies() -> int:
        return on_broker(daemons, lambda: daemons.broker.store.get_max_offset(MANY, 0)) - MANY_COUNT

    assert copies() == len(resent)  # nothing sent that the report (and the record) does not hold
    rest = run_process(cli_env, *argv, env=env, timeout=120)
    assert rest.code == 0, rest.stderr
    outcomes = rest.json()
    assert sum(o["outcome"] == "ALREADY RESENT" for o in outcomes) == len(resent)
    assert sum(o["outcome"] == "RESENT" for o in outcomes) == MANY_COUNT - len(resent)
    assert copies() == MANY_COUNT  # each dead letter re-sent exactly once over the two runs


def other_total(daemons: LocalCluster) -> int:
    return on_broker(
        daemons,
        lambda: daemons.broker.store.get_max_offset(OTHER, 0) + daemons.broker.store.get_max_offset(OTHER, 1),
    )


def forget_resent(daemons: LocalCluster) -> None:
    """Drop the group's record of re-sent dead letters, as an operator may to send them again."""

    async def drop() -> None:
        async with Admin([daemons.namesrv_addr]) as admin:
            await admin.kv_delete("MQCTL_DLQ_RESENT", DLQ_GROUP)

    daemons.loop.run(drop())


def test_resend_previews_by_default_and_filters(
    mq: Callable[..., CliResult], daemons: LocalCluster, dead_letters: list[str]
) -> None:
    forget_resent(daemons)
    before = other_total(daemons)
    preview = mq("msg", "resend", "-g", DLQ_GROUP, "-o", "json")
    assert preview.code == 0, preview.stderr
    assert sorted((o["dlq_msg_id"], o["outcome"]) for o in preview.json()) == sorted(
        (i, "WOULD RESEND") for i in dead_letters
    )
    assert "add --execute" in preview.stderr and other_total(daemons) == before
    (by_key,) = ok(mq("msg", "resend", "-g", DLQ_GROUP, "-k", "dead-1", "-o", "json"))
    assert by_key["dlq_msg_id"] == dead_letters[1]
    assert ok(mq("msg", "resend", "-g", DLQ_GROUP, "--tag", "Other", "-o", "json")) == []
    assert ok(mq("msg", "resend", "-g", DLQ_GROUP, "--until", "1000000000000", "-o", "json")) == []
    refused = mq("msg", "resend", "-g", DLQ_GROUP, "--execute")
    assert refused.code == 2 and "--yes" in refused.stderr and other_total(daemons) == before


def test_resend_sends_dead_letters_back_once(
    mq: Callable[..., CliResult], daemons: LocalCluster, dead_letters: list[str]
) -> None:
    forget_resent(daemons)
    before = other_total(daemons)
    one = ok(
        mq("msg", "resend", "-g", DLQ_GROUP, "--id", dead_letters[0], "--execute", "--yes", "-o", "json")
    )
    assert [(o["dlq_msg_id"], o["outcome"], o["to_topic"]) for o in one] == [
        (dead_letters[0], "RESENT", OTHER)
    ]
    everything = ok(mq("msg", "resend", "-g", DLQ_GROUP, "--execute", "--yes", "-o", "json"))
    assert sorted((o["dlq_msg_id"], o["outcome"]) for o in everything) == sorted(
        [(dead_letters[0], "ALREADY RESENT"), (dead_letters[1], "RESENT")]
    )
    again = ok(mq("msg", "resend", "-g", DLQ_GROUP, "--execute", "--yes", "-o", "json"))
    assert {o["outcome"] for o in again} == {"ALREADY RESENT"}  # a second run sends nothing twice
    assert other_total(daemons) - before == 2
    for outcome in one + [o for o in everything if o["outcome"] == "RESENT"]:
        m = stored(daemons, outcome["new_msg_id"])
        assert m.topic == OTHER and m.body.decode().startswith("dead ")
        assert m.tags == "D" and m.properties["color"] == "blue" and m.keys[0].startswith("dead-")
        assert "RETRY_TOPIC" not in m.properties and "ORIGIN_MESSAGE_ID" not in m.properties
        assert m.properties["MQCTL_DLQ_MSG_ID"] == outcome["dlq_msg_id"]  # marked as a re-sent copy


def test_dlq_ls_counts_and_export_writes_json_lines_with_bodies(
    mq: Callable[..., CliResult], daemons: LocalCluster, dead_letters: list[str], tmp_path: Path
) -> None:
    forget_resent(daemons)
    ok(mq("msg", "resend", "-g", DLQ_GROUP, "--id", dead_letters[0], "--execute", "--yes", "-o", "json"))
    (row,) = [r for r in ok(mq("dlq", "ls", "-o", "json")) if r["group"] == DLQ_GROUP]
    assert (row["topic"], row["messages"], row["resent"]) == (f"%DLQ%{DLQ_GROUP}", 2, 1)
    out = tmp_path / "dead.jsonl"
    written = mq("dlq", "export", "-g", DLQ_GROUP, "--out", str(out))
    assert written.code == 0 and "2 dead letters" in written.stderr, written.stderr
    lines = {line["msg_id"]: line for line in map(json.loads, out.read_text().splitlines())}
    assert sorted(lines) == sorted(dead_letters)  # the DLQ is left as is: the re-sent one too
    assert lines[dead_letters[0]]["resent"] and not lines[dead_letters[1]]["resent"]
    one = lines[dead_letters[1]]
    assert (one["body"], one["body_encoding"], one["tags"]) == ("dead 1", "utf-8", "D")
    assert one["properties"]["color"] == "blue" and one["properties"]["RETRY_TOPIC"] == OTHER
    by_key = mq("dlq", "export", "-g", DLQ_GROUP, "--out", "-", "-k", "dead-1")
    assert [json.loads(line)["msg_id"] for line in by_key.stdout.splitlines()] == [dead_letters[1]]
    missing = mq("dlq", "export", "-g", "CG_NoDead", "--out", str(tmp_path / "none.jsonl"))
    assert missing.code == 3 and not list(tmp_path.glob("*none.jsonl*"))  # nothing half-written


def test_resend_to_another_topic(
    mq: Callable[..., CliResult], daemons: LocalCluster, dead_letters: list[str]
) -> None:
    forget_resent(daemons)
    (outcome,) = ok(
        mq(
            "msg",
            "resend",
            "-g",
            DLQ_GROUP,
            "--id",
            dead_letters[1],
            "--to-topic",
            TOPIC,
            "--execute",
            "--yes",
            "-o",
            "json",
        )
    )
    assert outcome["outcome"] == "RESENT" and outcome["to_topic"] == TOPIC
    assert stored(daemons, outcome["new_msg_id"]).topic == TOPIC


def test_a_failed_resend_exits_non_zero_and_is_not_recorded(
    mq: Callable[..., CliResult], daemons: LocalCluster, dead_letters: list[str]
) -> None:
    forget_resent(daemons)
    args = ("msg", "resend", "-g", DLQ_GROUP, "--id", dead_letters[0], "--execute", "--yes")
    failed = mq(*args, "--to-topic", "NoSuchTopic", "-o", "json")
    assert failed.code == 8, failed.stderr
    assert [o["outcome"] for o in failed.json()] == ["FAILED"] and "could not be re-sent" in failed.stderr
    assert [o["outcome"] for o in ok(mq(*args, "-o", "json"))] == [
        "RESENT"
    ]  # a failure is not marked re-sent


def test_resend_unknown_ids_and_groups_are_not_found(
    mq: Callable[..., CliResult], dead_letters: list[str]
) -> None:
    assert mq("msg", "resend", "-g", DLQ_GROUP, "--id", "7F00000100002A9F00000000DEADBEEF").code == 3
    assert mq("msg", "resend", "-g", "CG_NeverDied", "--execute", "--yes").code == 3


# -------------------------------------------------------------------------------- errors, codes


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["msg", "show", "-t", TOPIC, "-q", "0", "--offset", "99"], 3),
        (["msg", "show", "-t", TOPIC, "-q", "9", "--offset", "0"], 3),
        (["msg", "show", "-t", "NoSuchTopic", "-q", "0", "--offset", "0"], 3),
        (["msg", "query", "-t", "NoSuchTopic", "-k", "x"], 3),
        (["msg", "query", "-t", TOPIC, "-k", "x", "--id", "7F00000100002A9F0000000000000000"], 2),
        (["msg", "query", "-k", "x"], 2),
        (["msg", "query", "--id", "xyz"], 2),
        (["msg", "query", "-t", TOPIC, "-k", "x", "--since", "last tuesday"], 2),
        (["msg", "query", "-t", TOPIC, "-k", "x", "--since", "-1h", "--until", "-2h"], 2),
        (["msg", "send", "-t", TOPIC, "--property", "novalue", "b"], 2),
        (["msg", "send", "-t", TOPIC, ""], 2),
    ],
)
def test_exit_codes(mq: Callable[..., CliResult], args: list[str], code: int) -> None:
    result = mq(*args)
    assert result.code == code, result.stderr
    assert "mqctl: error:" in result.stderr


def test_a_queue_or_broker_the_topic_lacks_is_named_with_what_it_has(
    mq: Callable[..., CliResult], daemons: LocalCluster
) -> None:
    """``-b`` at a broker that does not serve the topic read "has no a queue on broker ...", a read-only
    topic "has no a queue" (now a refusal of its own), an empty queue "holds offsets 0..-1"."""
    cases = (
        (
            ["msg", "send", "-t", OTHER, "-b", "127.0.0.1:1", "x"],
            f"is not on broker 127.0.0.1:1 (it is on: broker-a {daemons.broker_addr})",
        ),
        (
            ["msg", "show", "-t", OTHER, "-b", "127.0.0.1:1", "-q", "0", "--offset", "0"],
            "is not on broker 127.0.0.1:1",
        ),
        (["msg", "send", "-t", OTHER, "-q", "7", "x"], f"topic '{OTHER}' has no queue 7 (queues 0..1)"),
        (["msg", "show", "-t", "MsgEmpty", "-q", "0", "--offset", "5"], "queue 0 (the queue is empty)"),
    )
    assert mq("topic", "create", "-t", "MsgEmpty", "-r", "1", "-w", "1").code == 0
    assert mq("topic", "create", "-t", "MsgReadOnly", "-r", "1", "-w", "1", "--perm", "r").code == 0
    for args, said in cases:
        result = mq(*args)
        assert result.code == 3 and said in result.stderr, result.stderr
    # a read-only topic is there: its refusal is the broker's to such a send (NO_PERMISSION), exit 9
    refused = mq("msg", "send", "-t", "MsgReadOnly", "x")
    assert refused.code == 9 and "takes no sends: its permission is read-only" in refused.stderr, (
        refused.stderr
    )


def test_an_unreachable_namesrv_exits_5(cli: RunCli) -> None:
    for args in (
        ["msg", "query", "-t", TOPIC, "-k", "x"],
        ["msg", "send", "-t", TOPIC, "b"],
        ["msg", "tail", "-t", TOPIC],
    ):
        result = cli(*args, "-n", "127.0.0.1:1")
        assert result.code == 5, (args, result.stderr)


@pytest.mark.slow
def test_watch_repeats_a_query_until_interrupted(cli_env: dict[str, str], daemons: LocalCluster) -> None:
    env = {"NAMESRV_ADDR": daemons.namesrv_addr}
    proc = spawn(
        cli_env, "msg", "query", "-t", TOPIC, "-k", "seed-0", "--watch", "0.2", "-o", "json", env=env
    )
    try:
        assert proc.stderr is not None
        assert "every 0.2s" in read_line(proc, proc.stderr, timeout=30)  # said once, not per refresh
        read: list[str] = []
        deadline = time.monotonic() + 30
        while len({json.loads(line)["taken_at_ms"] for line in read}) < 2 and time.monotonic() < deadline:
            read.append(read_line(proc, timeout=30))
    finally:
        proc.send_signal(2)
        out, err = finish(proc, 10)
    assert len({json.loads(line)["taken_at_ms"] for line in read}) == 2
    assert "every 0.2s" not in err  # (the rest of stderr, after the first line)
    lines = read + out.splitlines()  # JSON lines: one object per message per refresh, never an array
    assert lines
    assert all(json.loads(line)["keys"] == "seed-0 seeds" for line in lines)


@pytest.mark.slow
def test_ctrl_c_stops_tail_with_exit_130_and_one_line(cli_env: dict[str, str], daemons: LocalCluster) -> None:
    proc = _tail(cli_env, daemons, "--from", "earliest")
    try:
        assert "tailing" in read_line(proc, proc.stderr)
        assert json.loads(read_line(proc))["topic"] == TOPIC
    finally:
        proc.send_signal(2)
        _, err = finish(proc, 10)
    assert proc.returncode == 130, err
    (line,) = err.strip().splitlines()
    assert re.fullmatch(r"mqctl: error: interrupted after [0-9,]+ messages?", line), line


BIG = "MsgBig"  # its own topic: rows larger than the stdout buffer, for Ctrl-C mid-write


@pytest.mark.slow
def test_ctrl_c_while_tail_waits_for_its_reader_prints_whole_lines(
    cli_env: dict[str, str], daemons: LocalCluster
) -> None:
    """Ctrl-C while ``msg tail -o json`` is stuck writing to a reader that has not read yet: every line
    it printed is whole (the press lands in the write, under asyncio's handler), and the one stderr line
    counts exactly those."""
    client = handle(daemons)
    body = "b" * 300_000  # a row in one large write: a signal cut one short, silently (CPython 3.11)
    unbuffered = {"PYTHONUNBUFFERED": "1"}  # where it did: a TextIOWrapper straight over the file

    async def fill() -> None:
        create = CreateTopicRequestHeader(BIG, "TBW102", 1, 1, 6, "SINGLE_TAG")
        assert (await client.call(RequestCode.UPDATE_AND_CREATE_TOPIC, create.to_ext_fields())).code == 0
        for i in range(4):
            assert (await client.send(BIG, f"{i:02d}{body}".encode(), queue_id=0)).code == 0
        await client.client.close()
        await _wait_for_route(daemons.namesrv_addr, BIG)

    daemons.loop.run(fill())
    proc = spawn(
        cli_env, "msg", "tail", "-t", BIG, "--from", "earliest", "-o", "json",
        env={"NAMESRV_ADDR": daemons.namesrv_addr, **unbuffered},
    )  # fmt: skip
    try:
        blocked_writing(proc)
        proc.send_signal(2)
        out, err = finish(proc, 30)
    finally:
        proc.kill()  # a no-op once it exited
    assert proc.returncode == 130, err
    (line,) = err.strip().splitlines()[1:]  # after 'tailing MsgBig: ...'
    bodies = [json.loads(row)["body"] for row in out.splitlines()]
    assert out.endswith("\n") and line == f"mqctl: error: interrupted after {plural(len(bodies), 'message')}"
    assert bodies == [f"{i:02d}{body}" for i in range(len(bodies))]


def test_store_commands_read_the_running_brokers_store(
    mq: Callable[..., CliResult], daemons: LocalCluster
) -> None:
    """The offline commands open files read-only and take no lock, so they work beside a live broker."""
    root = daemons.broker.config.store_path_root_dir
    rows = ok(mq("store", "cq", "ls", "--store", root, "-t", TOPIC, "-o", "json"))
    live = on_broker(daemons, lambda: {q: daemons.broker.store.get_max_offset(TOPIC, q) for q in range(4)})
    assert {r["queue_id"]: r["max_offset"] for r in rows} == live
    sent = ok(mq("msg", "send", "-t", OTHER, "seen offline", "-o", "json"))
    shown = ok(mq("store", "msg", "query", "--store", root, "--id", sent["msg_id"], "-o", "json"))
    assert shown["body"] == "seen offline"


def test_client_ids_have_the_java_clients_layout() -> None:
    import os
    from datetime import datetime

    from store.record import decode_uniq_key

    now = int(datetime(2026, 11, 21, 10, 30).timestamp() * 1000)
    first, second = wire.new_uniq_key(now), wire.new_uniq_key(now)
    assert len(first) == 32 and first != second
    parts = decode_uniq_key(first)
    assert parts.pid == os.getpid() & 0xFFFF
    assert parts.time_in_month_ms == ((20 * 24 + 10) * 60 + 30) * 60_000  # since Nov 1, 00:00 local
    assert decode_uniq_key(second).counter == (parts.counter + 1) & 0xFFFF


def test_a_uniq_key_counts_from_its_own_months_start_across_month_changes() -> None:
    """The month's bounds are kept between keys: each key still counts from the start of the local month
    its time falls in, on either side of a month's end and with the clock set back."""
    from datetime import datetime

    from mqctl.admin import messaging as wire
    from store.record import decode_uniq_key

    def since(ms: int) -> int:
        return decode_uniq_key(wire.new_uniq_key(ms)).time_in_month_ms

    dec_1 = int(datetime(2026, 12, 1).timestamp() * 1000)
    jan_1 = int(datetime(2027, 1, 1).timestamp() * 1000)
    nov_1 = int(datetime(2026, 11, 1).timestamp() * 1000)
    for ms, expected in [
        (dec_1 + 5_000, 5_000),
        (dec_1 - 1, dec_1 - 1 - nov_1),  # the last millisecond of November, after a December key
        (dec_1, 0),
        (jan_1 - 1, jan_1 - 1 - dec_1),
        (jan_1 + 7, 7),  # December to January: the year changes too
        (dec_1 + 9, 9),  # the clock set back a month
    ]:
        assert since(ms) == expected, ms


def test_send_to_an_unknown_topic_auto_creates_it_through_tbw102(
    mq: Callable[..., CliResult], daemons: LocalCluster
) -> None:
    refused = mq("msg", "send", "-t", "AutoCreated", "--no-create", "never")
    assert refused.code == 3 and "'AutoCreated' does not exist" in refused.stderr, refused.stderr
    assert daemons.broker.topics.get("AutoCreated") is None
    result = mq("msg", "send", "-t", "AutoCreated", "first", "-o", "json")
    sent = ok(result)
    assert sent["topic"] == "AutoCreated" and sent["queue_id"] < 4 and sent["auto_created"] is True
    assert result.stderr.startswith("mqctl: topic 'AutoCreated' did not exist: broker broker-a created it")
    lined = mq("msg", "send", "-t", "AutoLined", "-l", "-o", "json", input="a\nb\nc\n")
    assert ok(lined)["sent"] == 3 and lined.stderr.count("did not exist") == 1, lined.stderr
    config = daemons.broker.topics.get("AutoCreated")
    assert config is not None and config.write_queue_nums == 4
    again = mq("msg", "send", "-t", "AutoCreated", "--no-create", "second", "-o", "json")
    assert ok(again)["auto_created"] is False and again.stderr == ""


# ------------------------------------------------------------------------ one name per concept

#: Names one concept has had in different commands: only the first of each may appear in JSON output.
SYNONYMS = (
    ("msg_id", "offset_msg_id", "offsetMsgId", "msgId"),
    ("unique_key", "uniq_key", "uniqKey", "client_id"),
    ("store_time", "store_timestamp", "storeTimestamp"),
    ("born_time", "born_timestamp", "bornTimestamp"),
    ("read_queues", "read_queue_nums", "readQueueNums"),
    ("write_queues", "write_queue_nums", "writeQueueNums"),
)
GLOSSARY = ROOT / "docs" / "json-fields.md"


def _fields(value: Any, found: dict[str, list[Any]]) -> None:
    """Every key of every object in ``value``, with the values it had."""
    if isinstance(value, dict):
        for name, item in value.items():
            found.setdefault(name, []).append(item)
            if name != "properties":  # message properties are user data, not fields
                _fields(item, found)
    elif isinstance(value, list):
        for item in value:
            _fields(item, found)


def test_json_outputs_use_one_documented_name_per_concept(
    mq: Callable[..., CliResult], daemons: LocalCluster, dead_letters: list[str], tmp_path: Path
) -> None:
    """Scan the ``-o json`` of the message, topic and DLQ commands: no known synonym, every field in the
    glossary, one form for perms (the ``--perm`` form), keys as one string, every time with its _ms twin."""
    sent = ok(mq("msg", "send", "-t", OTHER, "-k", "gloss-1", "-k", "gloss-2", "glossary", "-o", "json"))
    outputs: list[Any] = [
        sent,
        ok(mq("msg", "query", "-t", OTHER, "-k", "gloss-1", "-o", "json")),
        ok(mq("msg", "query", "--id", sent["msg_id"], "-o", "json")),
        ok(mq("msg", "query", "--id", sent["unique_key"], "-o", "json")),
        ok(mq("msg", "query", "-t", OTHER, "--unique-key", sent["unique_key"], "-o", "json")),
        ok(mq("msg", "show", "-t", TOPIC, "-q", "0", "--offset", "0", "-o", "json")),
        ok(mq("topic", "route", "-t", TOPIC, "-o", "json")),
        ok(mq("topic", "show", "-t", TOPIC, "-o", "json")),
        ok(mq("topic", "create", "-t", "GlossaryT", "-r", "2", "-w", "2", "-o", "json")),
        ok(mq("msg", "resend", "-g", DLQ_GROUP, "-o", "json")),
        ok(mq("dlq", "ls", "-o", "json")),
        ok(
            mq(
                "store",
                "msg",
                "query",
                "--store",
                daemons.broker.config.store_path_root_dir,
                "--id",
                sent["msg_id"],
                "-o",
                "json",
            )
        ),
    ]
    tail = mq("msg", "tail", "-t", TOPIC, "--from", "earliest", "--exit", "--max-messages", "2", "-o", "json")
    outputs += [json.loads(line) for line in ok_lines(tail)]
    out = tmp_path / "dead.jsonl"
    assert mq("dlq", "export", "-g", DLQ_GROUP, "--out", str(out)).code == 0
    outputs += [json.loads(line) for line in out.read_text().splitlines()]

    found: dict[str, list[Any]] = {}
    _fields(outputs, found)
    for preferred, *others in SYNONYMS:
        assert not set(others) & set(found), f"{sorted(set(others) & set(found))}: call it {preferred}"
    first_cells = (line.split("|")[1] for line in GLOSSARY.read_text().splitlines() if line.startswith("| `"))
    documented = {name for cell in first_cells for name in re.findall(r"`([a-z_]+)`", cell)}
    assert not set(found) - documented, f"not in {GLOSSARY.name}: {sorted(set(found) - documented)}"
    assert all(re.fullmatch(r"r?w?x?|-", p) for p in found["perm"] if isinstance(p, str))
    changes = [c for c in found.get("changes", []) if "perm" in c]
    assert changes and all(isinstance(c["perm"][1], str) for c in changes)
    assert all(k is None or isinstance(k, str) for k in found["keys"])
    for name in found:
        if name.endswith("_time") and name not in ("last_updated",):
            assert f"{name}_ms" in found, f"{name} has no _ms twin"


def ok_lines(result: CliResult) -> list[str]:
    assert result.code == 0, result.stderr
    return result.stdout.splitlines()


def test_tail_lines_mark_a_binary_body_as_base64(mq: Callable[..., CliResult], tmp_path: Path) -> None:
    """A plain tail line printed a non-UTF-8 body as bare base64: a text body that reads as base64 and
    a binary one looked the same. The binary one's cell now says ``base64:``, as body_encoding does in
    JSON (kept as it was)."""
    import base64

    binary = bytes([0xFF, 0x00, 0xFE, 0x42]) * 4
    (tmp_path / "tail.bin").write_bytes(binary)
    encoded = base64.b64encode(binary).decode()
    ok(mq("msg", "send", "-t", OTHER, "-q", "0", "--file", str(tmp_path / "tail.bin"), "-o", "json"))
    ok(mq("msg", "send", "-t", OTHER, "-q", "0", encoded.lower(), "-o", "json"))  # text that reads as base64
    lines = mq("msg", "tail", "-t", OTHER, "--from", "earliest", "--exit").stdout.splitlines()
    bodies = [line.rsplit(" ", 1)[-1] for line in lines]
    assert f"base64:{encoded}" in bodies and encoded.lower() in bodies, lines
    rows = [
        json.loads(line)
        for line in mq(
            "msg", "tail", "-t", OTHER, "--from", "earliest", "--exit", "-o", "json"
        ).stdout.splitlines()
    ]
    assert {"body_encoding": "base64", "body": encoded}.items() <= next(
        r for r in rows if r["body"] == encoded
    ).items()
