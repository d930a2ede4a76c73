"""A hostile NameServer and broker (tests/support/hostile.py) against mqctl: what a server answers is its
word, and a broken or hostile one's must end a command with one line and a documented exit code, never
a traceback's last line (exit 1, "a bug"), a number the server never could have sent shown as if it had,
or data driving the terminal."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from daemon.remoting.codes import RequestCode
from daemon.remoting.command import RemotingCommand
from mqctl.errors import ProtocolError, RequestTimeoutError
from tests.support.cli import RunCli
from tests.support.hostile import Answer, Trickle, frame, honest_with, hostile, route_body

EVIL = "\x1b]0;pwned\x07\x1b[2J[bold red]X[/]\u202e\x9b31m"


def _ok(body: bytes = b"", **fields: str) -> RemotingCommand:
    return RemotingCommand(0, body=body, ext_fields=dict(fields))


def _route(edit: Callable[[bytes], bytes]) -> Callable[[RemotingCommand, str], Answer]:
    return lambda request, addr: _ok(edit(route_body(addr)))


#: Answers to a route look-up that no RocketMQ server can send, by what is wrong with them.
BAD_ROUTES = {
    "not JSON": _route(lambda body: b"{not json"),
    "nested deep": _route(lambda body: b"[" * 100_000 + b"]" * 100_000),
    "a list for an object": _route(lambda body: b'{"brokerDatas": {"a": 1}, "queueDatas": "x"}'),
    "NaN": _route(lambda body: body.replace(b'"readQueueNums": 4', b'"readQueueNums": NaN')),
    "past 64 bits": _route(lambda body: body.replace(b'"readQueueNums": 4', b'"readQueueNums": %d' % 2**70)),
    "a string for a number": _route(lambda body: body.replace(b'"perm": 6', b'"perm": "rw"')),
}


@pytest.mark.parametrize("what", sorted(BAD_ROUTES))
def test_an_answer_no_server_can_send_is_a_protocol_error(cli: RunCli, what: str) -> None:
    """It ended the command as the traceback's last line (exit 1, documented as a bug), or, a number
    past 64 bits or NaN, went on into the command's arithmetic and tables."""
    with hostile(honest_with({RequestCode.GET_ROUTEINFO_BY_TOPIC: BAD_ROUTES[what]})) as server:
        result = cli("-n", server.addr, "--timeout", "5", "topic", "route", "-t", "T")
    assert result.code == ProtocolError.exit_code, (result.code, result.stderr)
    assert result.stderr.count("\n") == 1 and "GET_ROUTEINFO_BY_TOPIC" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and not result.stdout


@pytest.mark.parametrize("offset", ["twelve", str(2**70)])
def test_an_offset_header_that_does_not_read_is_a_protocol_error(cli: RunCli, offset: str) -> None:
    """An answer's header field was taken for the server's own error (exit 8, "response code 1"), or one
    past 64 bits was shown as an offset."""

    def offsets(request: RemotingCommand, addr: str) -> Answer:
        return _ok(offset=offset, timestamp="0")

    overrides = {code: offsets for code in (RequestCode.GET_MAX_OFFSET, RequestCode.GET_MIN_OFFSET)}
    with hostile(honest_with(overrides)) as server:
        result = cli("-n", server.addr, "--timeout", "5", "offset", "show", "-t", "T", "-g", "G")
    assert result.code == ProtocolError.exit_code, (result.code, result.stdout, result.stderr)
    assert result.stderr.count("\n") == 1 and "offset" in result.stderr, result.stderr


def test_names_and_remarks_a_server_sends_never_drive_the_terminal(cli: RunCli) -> None:
    def cluster(request: RemotingCommand, addr: str) -> Answer:
        table = {EVIL: {"cluster": EVIL, "brokerName": EVIL, "brokerAddrs": {"0": addr}}}
        return _ok(json.dumps({"brokerAddrTable": table, "clusterAddrTable": {EVIL: [EVIL]}}).encode())

    def refused(request: RemotingCommand, addr: str) -> Answer:
        return RemotingCommand(1, remark=EVIL + "\nsecond line")

    with hostile(honest_with({RequestCode.GET_BROKER_CLUSTER_INFO: cluster})) as server:
        listed = cli("-n", server.addr, "--timeout", "5", "cluster", "list")
    with hostile(refused) as server:
        failed = cli("-n", server.addr, "--timeout", "5", "topic", "list")
    assert listed.code == 0, listed.stderr
    assert "\\x1b]0;pwned\\x07" in listed.stdout and "[bold red]X[/]" in listed.stdout
    assert failed.code == 8 and failed.stderr.count("\n") == 1, failed.stderr
    for text in (listed.stdout, listed.stderr, failed.stdout, failed.stderr):
        assert not any(c in text for c in "\x1b\x07\x9b\u202e"), text


@pytest.mark.slow
@pytest.mark.parametrize("how", ["silent", "a byte at a time", "another opaque"])
def test_an_answer_that_never_comes_whole_ends_at_the_timeout(cli: RunCli, how: str) -> None:
    def answer(request: RemotingCommand, addr: str) -> Answer:
        whole = frame(RemotingCommand(0, opaque=request.opaque, flag=1, body=b'{"topicList": []}' * 100))
        if how == "silent":
            return None
        if how == "a byte at a time":
            return Trickle(whole, 0.3)
        return frame(RemotingCommand(0, opaque=request.opaque + 1, flag=1))

    with hostile(answer) as server:
        result = cli("-n", server.addr, "--timeout", "1", "topic", "list")
    assert result.code == RequestTimeoutError.exit_code, (result.code, result.stderr)
    assert result.stderr.count("\n") == 1 and "timed out" in result.stderr, result.stderr


def _runtime(value: str) -> Callable[[RemotingCommand, str], Answer]:
    keys = ("putTps", "getTransferedTps", "commitLogDiskRatio", "commitLogMinOffset", "commitLogMaxOffset")
    return lambda request, addr: _ok(json.dumps({"table": dict.fromkeys(keys, value)}).encode())


@pytest.mark.parametrize("value", ["NaN", "1e400", "x", str(2**70)])
def test_a_disk_ratio_that_is_no_usage_is_unknown_to_the_disk_check(cli: RunCli, value: str) -> None:
    """A broker reporting a NaN disk ratio was DISK OK to the monitoring plugin; words ended it with a
    traceback's last line, and an infinite ratio or one past 64 bits was CRITICAL at that percentage."""
    with hostile(honest_with({RequestCode.GET_BROKER_RUNTIME_INFO: _runtime(value)})) as server:
        result = cli("-n", server.addr, "--timeout", "5", "check", "disk")
    assert result.code == 3 and result.stdout.startswith("DISK UNKNOWN"), (result.code, result.stdout)
    assert "no commitLogDiskRatio" in result.stdout and "Traceback" not in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("value", ["NaN", "x", str(2**70)])
def test_top_once_shows_a_runtime_figure_that_is_no_number_as_none(cli: RunCli, value: str) -> None:
    """The runtime info's figures are text: ``int()`` or ``float()`` of a NaN or a word ended mqctl top
    (exit 1, "cannot convert float NaN to integer"); they are shown as unknown now."""
    overrides = {
        RequestCode.GET_BROKER_RUNTIME_INFO: _runtime(value),
        RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: lambda request, addr: _ok(b'{"topicList": []}'),
    }
    with hostile(honest_with(overrides)) as server:
        result = cli("-n", server.addr, "--timeout", "5", "top", "--once", "-o", "json")
    assert result.code == 0, (result.code, result.stderr)
    (broker,) = result.json()["brokers"]
    assert value not in json.dumps(broker), broker


def test_a_fleet_read_that_no_broker_answered_readably_blames_no_credentials(cli: RunCli) -> None:
    """Every broker's answer unreadable is exit 14 naming each, and the hint no longer sends the operator
    to check credentials, which only an ACL refusal calls for."""

    def groups(request: RemotingCommand, addr: str) -> Answer:
        return _ok(b'{"subscriptionGroupTable": [1, 2]}')

    with hostile(honest_with({RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: groups})) as server:
        result = cli("-n", server.addr, "--timeout", "5", "group", "list")
    assert result.code == 14 and result.stderr.count("\n") == 1, (result.code, result.stderr)
    assert "GET_ALL_SUBSCRIPTIONGROUP_CONFIG" in result.stderr and "credentials" not in result.stderr


def _negative_runtime(request: RemotingCommand, addr: str) -> Answer:
    keys = ("putTps", "getTransferedTps", "commitLogDiskRatio", "commitLogMaxOffset", "popInFlightTotal")
    table = {**dict.fromkeys(keys, "-5"), "dledgerRole": "FOLLOWER", "dledgerCommittedIndex": "-1"}
    return _ok(json.dumps({"table": {**table, "dledgerTerm": "-5", "loopStalls": "-5"}}).encode())


def test_negative_figures_from_a_server_are_shown_as_none_and_a_sentinel_as_sent(cli: RunCli) -> None:
    """A broker answering -5 messages in flight, a -5 max offset or -5 TPS was shown as if it had sent a
    figure; RocketMQ's own -1 ("none": DLedger's committed index before any entry) stays as it is."""
    with hostile(honest_with({RequestCode.GET_BROKER_RUNTIME_INFO: _negative_runtime})) as server:
        status = cli("-n", server.addr, "--timeout", "5", "cluster", "status", "-o", "json")
        probed = cli("--timeout", "5", "broker", "status", "-b", server.addr, "-o", "json")
        ha = cli("-n", server.addr, "--timeout", "5", "broker", "ha", "status", "-o", "json")
    assert status.code == 0, status.stderr
    (row,) = status.json()
    fields = ("put_tps", "get_tps", "disk_ratio", "commitlog_max_offset", "pop_in_flight")
    assert [row[f] for f in fields] == [None] * len(fields), row
    assert probed.code == 0, probed.stderr
    assert [probed.json()[f] for f in ("put_tps", "commitlog_max_offset", "disk_ratio", "loop_stalls")] == [
        None
    ] * 4
    assert ha.code == 0, ha.stderr
    (member,) = ha.json()
    assert (member["commit_index"], member["term"], member["commitlog_max_offset"]) == (-1, None, None), (
        member
    )


def _stats(min_offset: int) -> Callable[[RemotingCommand, str], Answer]:
    from daemon.broker.bodies import MessageQueue, TopicOffset, TopicStatsTable

    table = {MessageQueue("T", "broker-a", q): TopicOffset(min_offset, 3, 0) for q in range(4)}
    return lambda request, addr: _ok(TopicStatsTable(table).dumps())


def test_a_negative_offset_is_a_protocol_error_and_an_empty_queue_s_minus_one_is_its_start(
    cli: RunCli,
) -> None:
    """Offsets feed counts, lags and resets: a -5 one was shown as a queue's start (and 8 messages); 4.9.8
    writes the stats' offsets below 0 as 0, and GET_MIN_OFFSET's -1 (no ConsumeQueue yet) means empty."""
    with hostile(honest_with({RequestCode.GET_TOPIC_STATS_INFO: _stats(-5)})) as server:
        stats = cli("-n", server.addr, "--timeout", "5", "topic", "stats", "-t", "T")
    assert stats.code == ProtocolError.exit_code, (stats.code, stats.stdout, stats.stderr)
    assert "queue 0's minOffset -5 is below 0" in stats.stderr and stats.stderr.count("\n") == 1
    overrides = {
        RequestCode.GET_TOPIC_STATS_INFO: lambda request, addr: _ok(b'{"offsetTable": {}}'),
        RequestCode.GET_MIN_OFFSET: lambda request, addr: _ok(offset="-1"),
        RequestCode.GET_MAX_OFFSET: lambda request, addr: _ok(offset="0"),
    }
    with hostile(honest_with(overrides)) as server:
        empty = cli("-n", server.addr, "--timeout", "5", "topic", "status", "-t", "T", "-o", "json")
    assert empty.code == 0, empty.stderr
    assert {(q["min_offset"], q["max_offset"], q["messages"]) for q in empty.json()} == {(0, 0, 0)}
