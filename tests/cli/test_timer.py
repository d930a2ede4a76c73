"""``mqctl msg send --deliver-at/--delay`` and ``mqctl timer ls`` against our real daemons."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from store.names import TIMER_TOPIC
from store.record import decode_msg_id
from tests.daemons import LocalCluster, local_cluster
from tests.support.cli import CliResult, RunCli


@pytest.fixture(scope="module")
def daemons(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with local_cluster(tmp_path_factory.mktemp("timer")) as cluster:
        yield cluster


@pytest.fixture
def mq(cli: RunCli, daemons: LocalCluster) -> Callable[..., CliResult]:
    def run(*args: str) -> CliResult:
        return cli(*args, env={"NAMESRV_ADDR": daemons.namesrv_addr})

    return run


def ok(result: CliResult) -> Any:
    assert result.code == 0, result.stderr
    return result.json()


def parked_topic(daemons: LocalCluster, msg_id: str) -> str:
    offset = decode_msg_id(msg_id)[1]

    async def look() -> str:
        found = daemons.broker.store.look_message_by_offset(offset)
        assert found is not None
        return found.message.topic

    return daemons.loop.run(look())


def test_send_with_a_delay_is_listed_pending_until_due(
    mq: Callable[..., CliResult], daemons: LocalCluster
) -> None:
    before = int(time.time() * 1000)
    sent = ok(mq("msg", "send", "-t", "TmDelay", "--delay", "1h", "-k", "later", "tick", "-o", "json"))
    assert parked_topic(daemons, sent["msg_id"]) == TIMER_TOPIC
    assert before + 3_600_000 <= sent["deliver_time_ms"] <= int(time.time() * 1000) + 3_600_000
    assert sent["deliver_time"].endswith("Z") and sent["delay_level"] == 0
    at = ok(mq("msg", "send", "-t", "TmAt", "--deliver-at", "+2h", "tock", "-o", "json"))
    assert parked_topic(daemons, at["msg_id"]) == TIMER_TOPIC
    rows = ok(mq("timer", "ls", "-o", "json"))
    by_topic = {r["topic"]: r for r in rows}
    assert set(by_topic) == {"TmDelay", "TmAt"}
    row = by_topic["TmDelay"]
    assert row["pending"] == 1 and row["broker_name"] == "broker-a"
    assert before + 3_600_000 <= row["next_due_ms"] <= int(time.time() * 1000) + 3_600_000
    assert row["next_due"].endswith("Z")
    only = ok(mq("timer", "ls", "-t", "TmAt", "-o", "json"))
    assert [r["topic"] for r in only] == ["TmAt"]
    table = mq("timer", "ls")
    assert table.code == 0 and "TmDelay" in table.stdout


def test_a_send_past_due_is_stored_in_its_topic(mq: Callable[..., CliResult], daemons: LocalCluster) -> None:
    sent = ok(mq("msg", "send", "-t", "TmPast", "--deliver-at", "-1m", "x", "-o", "json"))
    assert parked_topic(daemons, sent["msg_id"]) == "TmPast"
    assert sent["held_by"] is None


def test_a_held_send_says_its_position_is_the_timers(
    mq: Callable[..., CliResult], daemons: LocalCluster
) -> None:
    """A timer put is answered with the timer record's id and offset (as 5.x answers it): the result says
    where it is held and how to find the delivered message, not a position in its topic."""
    result = mq("msg", "send", "-t", "TmHeld", "--delay", "1h", "later", "-o", "json")
    sent = ok(result)
    assert sent["held_by"] == TIMER_TOPIC == parked_topic(daemons, sent["msg_id"])
    assert f"held in {TIMER_TOPIC} until {sent['deliver_time']}" in result.stderr
    assert f"msg query -t TmHeld --id {sent['unique_key']}" in result.stderr
    table = mq("msg", "send", "-t", "TmHeld", "--delay-level", "3", "later")
    assert table.code == 0 and "SCHEDULE_TOPIC_XXXX" in table.stdout + table.stderr


def test_a_message_without_a_delivery_time_goes_at_once(mq: Callable[..., CliResult]) -> None:
    """An ordinary send's table said 'deliver_time never', as if the message would never be delivered."""
    table = mq("msg", "send", "-t", "TmNow", "now")
    assert table.code == 0, table.stderr
    (line,) = [line for line in table.stdout.splitlines() if line.startswith("deliver_time")]
    assert line.split("│")[1].strip() == "at once" and "never" not in table.stdout
    sent = ok(mq("msg", "send", "-t", "TmNow", "now", "-o", "json"))
    assert (sent["deliver_time"], sent["deliver_time_ms"]) == (None, 0)  # JSON keeps the raw values


def test_delay_flags_exclude_each_other(mq: Callable[..., CliResult]) -> None:
    result = mq("msg", "send", "-t", "TmX", "--delay", "1m", "--delay-level", "2", "x")
    assert result.code == 2 and "one of --deliver-at" in result.stderr


def test_a_delay_without_a_unit_points_at_the_level_flag(mq: Callable[..., CliResult]) -> None:
    """``--delay 99`` said "bad duration '99'" alone: a RocketMQ user means a delay level there (DELAY=3),
    or seconds. One line names the units, the range, and --delay-level with its levels; nothing is sent."""
    for given in ("99", "3"):
        result = mq("msg", "send", "-t", "TmNoUnit", "--delay", given, "x")
        assert result.code == 2 and result.stderr.count("\n") == 1, result.stderr
        assert f"--delay {given} has no unit" in result.stderr and "3 days" in result.stderr
        assert "--delay-level" in result.stderr and "1-18" in result.stderr
    assert mq("topic", "show", "-t", "TmNoUnit").code == 3  # never auto-created: nothing went out


def test_a_broker_set_below_the_default_max_delay_refuses_on_the_wire(mq: Callable[..., CliResult]) -> None:
    """Beyond the default max the CLI refuses (test_operator_edges); a broker set lower still says so."""
    result = mq("broker", "config", "set", "timerMaxDelaySec=3600")
    assert result.code == 0, result.stderr
    try:
        result = mq("msg", "send", "-t", "TmFar", "--delay", "2h", "x")
        assert result.code == 8, result.stderr
        assert "max delay" in result.stderr
    finally:
        mq("broker", "config", "set", "timerMaxDelaySec=259200")


def test_a_broker_set_above_the_default_max_delay_takes_a_delay_beyond_it(
    mq: Callable[..., CliResult],
) -> None:
    """The CLI refused beyond the default (3 days) although the broker was set to hold 10 days."""
    result = mq("broker", "config", "set", "timerMaxDelaySec=864000")
    assert result.code == 0, result.stderr
    try:
        sent = ok(mq("msg", "send", "-t", "TmFarther", "--delay", "5d", "x", "-o", "json"))
        assert sent["status"] == "SEND_OK", sent
        result = mq("msg", "send", "-t", "TmFarther", "--delay", "11d", "x")
        assert result.code == 2, result.stderr
        [line] = result.stderr.splitlines()
        assert "bad --delay '11d'" in line and "timerMaxDelaySec, 10 days" in line, line
    finally:
        mq("broker", "config", "set", "timerMaxDelaySec=259200")


def test_the_unique_key_finds_the_delivered_copy(mq: Callable[..., CliResult], daemons: LocalCluster) -> None:
    sent = ok(mq("msg", "send", "-t", "TmSoon", "--delay", "300ms", "soon", "-o", "json"))
    deadline = time.monotonic() + 10
    while True:  # exit 3 until it is delivered
        found = mq("msg", "query", "-t", "TmSoon", "--id", sent["unique_key"], "-o", "json")
        if found.code != 3 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    message = ok(found)
    assert (message["topic"], message["unique_key"], message["found_by"]) == (
        "TmSoon",
        sent["unique_key"],
        "unique_key",
    )
    assert message["properties"]["TIMER_OUT_MS"]
