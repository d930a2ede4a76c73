"""``mqctl msg trace`` against our real NameServer and Broker on port 0: traces written by our own tracing
producer/consumer (tests/support/tracing.py) and recorded 4.9.8 Java client trace bodies (tests/fixtures/trace)."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from mqctl.admin import messaging as wire
from mqctl.admin.client import Admin
from mqctl.tracedata import TraceRecord, decode_trace, encode_trace, trace_keys
from store import TRACE_TOPIC, TopicConfig
from store.record import create_msg_id
from tests.daemons import LocalCluster, local_cluster
from tests.support.cli import CliResult, RunCli
from tests.support.paths import ROOT
from tests.support.ports import free_port
from tests.support.tracing import Sent, TracingClient, send_trace_body
from tests.support.waiting import wait_until

TOPIC = "TraceOrders"
JAVA_TRACES = "JavaTraces"  # the recorded bodies go here, as a client with customizedTraceTopic sends them
FIXTURES = ROOT / "tests" / "fixtures" / "trace"
U1, U3 = "7F0000014A2C18B4AAC2155C3E1A0000", "7F0000014A2C18B4AAC2155C40020002"


@dataclass
class World:
    cluster: LocalCluster
    paid: Sent  # traced: produced, consumed by CG_Billing (failed once, then OK) and CG_Audit
    shipped: Sent  # traced: produced, consumed by CG_Audit; shares the key cust-9 with paid
    untraced: Sent
    solo: Sent  # produced without trace; consumed with trace by CG_Audit, and by CG_Slow whose handler hung
    moved: Sent  # its Pub names a broker the NameServer no longer knows (a DLedger leader since failed over)
    trap: socket.socket  # a listener a forged trace record names as the store host


async def _routed(admin: Admin, topic: str) -> None:
    async def has_route() -> bool:
        try:
            await admin.topic_route(topic)
        except Exception:
            return False
        return True

    await wait_until(has_route, timeout=10)


async def _plain_send(admin: Admin, cluster: LocalCluster, body: bytes, keys: str) -> Sent:
    result = await wire.send(admin, cluster.broker_addr, TOPIC, body, queue_id=1, properties={"KEYS": keys})
    return Sent(result.msg_id, result.offset_msg_id, TOPIC, cluster.broker_addr, 1, result.queue_offset)


def _pub_at(
    port: int, unique_key: str, *, group: str, tags: str | None = None, keys: str | None = None
) -> TraceRecord:
    """A Pub record of a message of TOPIC that names 127.0.0.1:``port`` as the broker that stored it."""
    return TraceRecord(
        "Pub",
        unique_key,
        timestamp_ms=1,
        region_id="DefaultRegion",
        group=group,
        topic=TOPIC,
        tags=tags,
        keys=keys,
        store_host=f"127.0.0.1:{port}",
        body_size=1,
        cost_ms=1,
        msg_type="Normal_Msg",
        msg_id=create_msg_id(("127.0.0.1", port), 0),
        success=True,
    )


async def _fill(cluster: LocalCluster, trap_port: int) -> tuple[Sent, ...]:
    async with Admin([cluster.namesrv_addr]) as admin:
        for name in (TOPIC, JAVA_TRACES):
            await admin.create_topic(cluster.broker_addr, TopicConfig(name, 2, 2, 6))
            await _routed(admin, name)
        client = TracingClient(admin)
        paid = await client.send(TOPIC, b"order paid", group="PG_Orders", tags="paid", keys="ord-1 cust-9")
        shipped = await client.send(
            TOPIC, b"order shipped", group="PG_Orders", tags="shipped", keys="ord-2 cust-9"
        )
        await client.flush()  # the producer's batch
        await client.consume(paid, group="CG_Billing", ok=False)
        await client.consume(paid, group="CG_Billing", ok=True, retry_times=1)
        await client.consume(paid, group="CG_Audit")
        await client.consume(shipped, group="CG_Audit")
        await client.flush()  # the consumers' batch
        untraced = await _plain_send(admin, cluster, b"no trace", "ord-3")
        solo = await _plain_send(admin, cluster, b"solo", "ord-4")
        await client.consume(solo, group="CG_Audit")
        await client.consume(solo, group="CG_Slow", finished=False)
        await client.flush()
        moved = await _plain_send(admin, cluster, b"moved", "ord-5")
        pub = _pub_at(free_port(), moved.unique_key, group="PG_Orders", keys="ord-5")
        await send_trace_body(admin, encode_trace([pub]), trace_keys([pub]))
        await send_trace_body(admin, b"Pub\x01not a time\x02", ["broken-trace"])
        for name in ("java-4.9.8-pub.bin", "java-4.9.8-sub.bin", "java-4.9.8-transaction.bin"):
            body = (FIXTURES / name).read_bytes()
            await send_trace_body(admin, body, trace_keys(decode_trace(body)), JAVA_TRACES)
        forged = _pub_at(
            trap_port, "F0E6ED0000000000000000000000000A", group="PG_\x1b[31mRed", tags="\x1b]0;owned\x07"
        )
        await send_trace_body(admin, encode_trace([forged]), trace_keys([forged]), JAVA_TRACES)
    return paid, shipped, untraced, solo, moved


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    trap = socket.create_server(("127.0.0.1", 0))
    trap.setblocking(False)
    with local_cluster(tmp_path_factory.mktemp("trace"), trace_topic_enable=True) as cluster:
        paid, shipped, untraced, solo, moved = cluster.loop.run(_fill(cluster, trap.getsockname()[1]))
        yield World(cluster, paid, shipped, untraced, solo, moved, trap)
    trap.close()


@pytest.fixture
def mq(cli: RunCli, world: World) -> Callable[..., CliResult]:
    def run(*args: str) -> CliResult:
        return cli(*args, env={"NAMESRV_ADDR": world.cluster.namesrv_addr})

    return run


def ok(result: CliResult) -> Any:
    assert result.code == 0, result.stderr
    return result.json()


def consumes(timeline: dict[str, Any], group: str) -> list[tuple[Any, ...]]:
    return [
        (e["details"]["attempt"], e["status"], e["details"]["result"])
        for e in timeline["events"]
        if e["event"] == "consume" and e["group"] == group
    ]


# ----------------------------------------------------------------------------- our own tracing client


def test_a_traced_message_shows_who_produced_it_where_it_is_stored_and_every_attempt(
    mq: Callable[..., CliResult], world: World
) -> None:
    t = ok(mq("msg", "trace", world.paid.unique_key, "-o", "json"))
    assert t["found_by"] == "unique_key"
    assert (t["unique_key"], t["msg_id"], t["topic"], t["tags"], t["keys"]) == (
        world.paid.unique_key,
        world.paid.msg_id,
        TOPIC,
        "paid",
        "ord-1 cust-9",
    )
    assert (t["broker_name"], t["store_host"], t["queue_id"], t["queue_offset"]) == (
        "broker-a",
        world.cluster.broker_addr,
        world.paid.queue_id,
        world.paid.queue_offset,
    )
    assert [e["event"] for e in t["events"]][:2] == ["produce", "store"]
    produce = t["events"][0]
    assert (produce["group"], produce["status"], produce["details"]["msg_type"]) == (
        "PG_Orders",
        "OK",
        "Normal_Msg",
    )
    assert produce["client_host"].startswith("127.0.0.1:")
    assert t["consumer_groups"] == ["CG_Audit", "CG_Billing"]
    assert consumes(t, "CG_Billing") == [(1, "FAILED", "FAILED"), (2, "OK", "SUCCESS")]
    assert consumes(t, "CG_Audit") == [(1, "OK", "SUCCESS")]
    times = [e["time_ms"] for e in t["events"]]
    assert times == sorted(times)


def test_the_offset_id_finds_the_same_trace(mq: Callable[..., CliResult], world: World) -> None:
    by_key = ok(mq("msg", "trace", world.paid.unique_key, "-o", "json"))
    by_offset = ok(mq("msg", "trace", world.paid.msg_id.lower(), "-o", "json"))
    assert by_offset["found_by"] == "msg_id"
    assert {k: v for k, v in by_offset.items() if k != "found_by"} == {
        k: v for k, v in by_key.items() if k != "found_by"
    }


def test_a_key_traces_every_message_that_has_it(mq: Callable[..., CliResult], world: World) -> None:
    both = ok(mq("msg", "trace", "-k", "cust-9", "-o", "json"))
    assert {t["unique_key"] for t in both} == {world.paid.unique_key, world.shipped.unique_key}
    [shipped] = ok(mq("msg", "trace", "-k", "ord-2", "-t", TOPIC, "-o", "json"))
    assert consumes(shipped, "CG_Audit") == [(1, "OK", "SUCCESS")] and consumes(shipped, "CG_Billing") == []
    other = mq("msg", "trace", "-k", "cust-9", "-t", "Elsewhere")
    assert other.code == 3 and "topic 'Elsewhere'" in other.stderr


def test_a_message_without_trace_is_not_found_with_a_reason(
    mq: Callable[..., CliResult], world: World
) -> None:
    for ident in (world.untraced.unique_key, world.untraced.msg_id):
        result = mq("msg", "trace", ident)
        assert result.code == 3, result.stderr
        assert "no trace" in result.stderr
        assert "'mqctl msg query --id ID'" in result.stderr, result.stderr  # where it is, untraced
    assert "enableMsgTrace" not in mq("msg", "trace", world.untraced.msg_id).stdout
    untraced = mq("msg", "trace", world.untraced.unique_key, "--trace-topic", "NoTracesHere")
    assert untraced.code == 3 and "'NoTracesHere' does not exist" in untraced.stderr, untraced
    assert "'mqctl msg query --id ID'" in untraced.stderr, untraced.stderr


def test_a_malformed_id_is_a_usage_error_as_msg_query_says(
    mq: Callable[..., CliResult], world: World
) -> None:
    """``msg trace ZZ`` looked the id up and exited 3 (no trace, or the trace topic missing) where ``msg
    query --id ZZ`` refused it with exit 2: an id of neither form is refused first, the same way."""
    for args in (("msg", "trace", "ZZ"), ("msg", "trace", "ZZ", "--trace-topic", "NoTracesHere")):
        result = mq(*args)
        assert result.code == 2 and result.stderr.count("\n") == 1, result
        assert "not a message id: 'ZZ'" in result.stderr, result.stderr
    assert mq("msg", "query", "--id", "ZZ").code == 2


def test_the_table_and_the_tree_show_the_timeline(
    cli: RunCli, mq: Callable[..., CliResult], world: World
) -> None:
    ns = world.cluster.namesrv_addr
    table = mq("msg", "trace", world.paid.unique_key)
    assert table.code == 0, table.stderr
    for text in ("events", "produce", "store", "consume", "CG_Billing", "FAILED", "queue_offset="):
        assert text in table.stdout
    # piped with no $COLUMNS (a shell does not export it), as 'msg trace ID --tree > file' runs
    tree = cli("msg", "trace", world.paid.unique_key, "--tree", env={"NAMESRV_ADDR": ns, "COLUMNS": ""})
    assert tree.code == 0, tree.stderr
    lines = tree.stdout.splitlines()
    assert lines[0].startswith(f"message {world.paid.unique_key}  topic {TOPIC}")
    assert any("produced by PG_Orders" in line for line in lines)
    # piped, each event is one line, as wide as it is (rich wrapped the tree at 80 columns, 'offset N' and a
    # consume attempt's result on lines of their own)
    assert any(
        f"stored on broker-a ({world.cluster.broker_addr}) queue {world.paid.queue_id} "
        f"offset {world.paid.queue_offset}" in line
        for line in lines
    )
    assert all(line.startswith(("message ", "├── ", "└── ", "│   ", "    ")) for line in lines), lines
    assert all(line.lstrip("│ ").startswith(("├── ", "└── ")) for line in lines[1:]), lines
    billing = lines.index(next(line for line in lines if "consumer group CG_Billing" in line))
    assert "attempt 1" in lines[billing + 1] and "FAILED" in lines[billing + 1]
    assert "attempt 2" in lines[billing + 2] and "OK" in lines[billing + 2]
    both = mq("msg", "trace", world.paid.unique_key, "--tree", "-o", "json")
    assert both.code == 2 and "--tree" in both.stderr
    # $MQCTL_OUTPUT is a default, no -o: --tree on the command line wins (it was refused, exit 2)
    env_json = cli(
        "msg", "trace", world.paid.unique_key, "--tree", env={"NAMESRV_ADDR": ns, "MQCTL_OUTPUT": "json"}
    )
    assert env_json.code == 0 and env_json.stdout.splitlines() == lines, env_json.stderr


def test_msg_query_and_show_decode_the_trace_records(mq: Callable[..., CliResult], world: World) -> None:
    rows = ok(mq("msg", "query", "-t", TRACE_TOPIC, "-k", world.shipped.unique_key, "-o", "json"))
    decoded = [r for row in rows for r in row["trace"]]
    assert {r["type"] for r in decoded} == {"Pub", "SubBefore", "SubAfter"}
    pub = next(r for r in decoded if r["type"] == "Pub" and r["unique_key"] == world.shipped.unique_key)
    assert (pub["msg_id"], pub["keys"], pub["group"]) == (world.shipped.msg_id, "ord-2 cust-9", "PG_Orders")
    shown = ok(mq("msg", "show", "-t", TRACE_TOPIC, "-q", "0", "--offset", "0", "-o", "json"))
    assert [r["type"] for r in shown["trace"]] == ["Pub", "Pub"]
    plain = ok(
        mq(
            "msg",
            "show",
            "-t",
            TOPIC,
            "-q",
            str(world.paid.queue_id),
            "--offset",
            str(world.paid.queue_offset),
            "-o",
            "json",
        )
    )
    assert "trace" not in plain


def test_a_consumer_only_trace_finds_its_message_through_the_topic(
    mq: Callable[..., CliResult], world: World
) -> None:
    bare = ok(mq("msg", "trace", world.solo.unique_key, "-o", "json"))
    assert (bare["topic"], bare["queue_id"], bare["producer_group"]) == (None, None, None)
    assert consumes(bare, "CG_Audit") == [(1, "OK", "SUCCESS")]
    assert consumes(bare, "CG_Slow") == [(1, "NO RESULT", None)]  # its handler never returned
    t = ok(mq("msg", "trace", world.solo.unique_key, "-t", TOPIC, "-o", "json"))
    assert (t["topic"], t["msg_id"], t["queue_id"], t["queue_offset"], t["keys"]) == (
        TOPIC,
        world.solo.msg_id,
        1,
        world.solo.queue_offset,
        "ord-4",
    )
    assert t["events"][0]["event"] == "store"


def test_a_message_whose_pub_names_a_broker_gone_is_found_through_its_topic(
    mq: Callable[..., CliResult], world: World
) -> None:
    """The Pub names the broker that stored the message (say a DLedger leader that has failed over since,
    its address gone from the NameServer): the trace showed no store event and no queue; the message is
    where the topic's brokers' index says, on the member now serving it."""
    t = ok(mq("msg", "trace", world.moved.unique_key, "-o", "json"))
    assert (t["topic"], t["msg_id"], t["queue_id"], t["queue_offset"], t["producer_group"]) == (
        TOPIC,
        world.moved.msg_id,
        1,
        world.moved.queue_offset,
        "PG_Orders",
    )
    assert [e["event"] for e in t["events"]] == ["produce", "store"]


def test_a_trace_body_that_does_not_decode_says_why(mq: Callable[..., CliResult], world: World) -> None:
    [row] = ok(mq("msg", "query", "-t", TRACE_TOPIC, "-k", "broken-trace", "-o", "json"))
    assert "trace" not in row and "fewer than 12" in row["trace_error"]


# ------------------------------------------------------------------------- recorded Java client bodies


def test_recorded_java_traces_in_a_custom_trace_topic(mq: Callable[..., CliResult], world: World) -> None:
    default = mq("msg", "trace", U1)
    assert default.code == 3  # they are in JavaTraces, not RMQ_SYS_TRACE_TOPIC
    t = ok(mq("msg", "trace", U1, "--trace-topic", JAVA_TRACES, "-o", "json"))
    assert (t["topic"], t["tags"], t["keys"], t["producer_group"]) == (
        "TraceOrders",
        "TagA",
        "order-1001 cust-7",
        "PG_Orders",
    )
    # its broker (127.0.0.1:10911 in the recording) is none the NameServer knows: where, but no queue
    assert (t["store_host"], t["broker_name"], t["queue_id"]) == ("127.0.0.1:10911", None, None)
    assert t["msg_id"] == "7F00000100002A9F0000000000001F40"
    assert consumes(t, "CG_Billing") == [(1, "FAILED", "FAILED"), (2, "OK", "SUCCESS")]
    first = next(e for e in t["events"] if e["event"] == "consume")
    assert (first["cost_ms"], first["details"]["finished_ms"]) == (7, 1764365400055)


def test_a_recorded_transaction_shows_its_commit(mq: Callable[..., CliResult], world: World) -> None:
    t = ok(mq("msg", "trace", U3, "--trace-topic", JAVA_TRACES, "-o", "json"))
    assert t["transaction_state"] == "COMMIT_MESSAGE"
    assert [(e["event"], e["status"]) for e in t["events"]] == [
        ("produce", "OK"),
        ("end_transaction", "COMMIT_MESSAGE"),
    ]
    assert t["events"][0]["details"]["msg_type"] == "Trans_Msg_Half"


def test_trace_data_never_sends_us_to_an_address_or_a_terminal_sequence(
    mq: Callable[..., CliResult], world: World
) -> None:
    forged = "F0E6ED0000000000000000000000000A"
    t = ok(mq("msg", "trace", forged, "--trace-topic", JAVA_TRACES, "-o", "json"))
    assert t["queue_id"] is None  # the store host it names is not a broker of this cluster
    with pytest.raises(BlockingIOError):
        world.trap.accept()  # and nothing connected to it
    tree = mq("msg", "trace", forged, "--trace-topic", JAVA_TRACES, "--tree")
    assert tree.code == 0, tree.stderr
    assert "\x1b" not in tree.stdout and "\x07" not in tree.stdout
    assert "\\x1b[31mRed" in tree.stdout
