"""One refusing broker does not break everyone's commands: a second, ACL-enabled cluster registers with
the same NameServer, and every multi-broker read answers with what it could read, naming that broker."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from daemon.broker.broker import Broker
from daemon.broker.headers import CreateTopicRequestHeader, UpdateConsumerOffsetRequestHeader
from daemon.remoting.codes import RequestCode
from mqctl.errors import AuthError, NothingReadError
from mqctl.tracedata import TraceRecord, encode_trace, trace_keys
from store import TRACE_TOPIC
from tests.daemons import LocalCluster, handle, local_cluster
from tests.support.acl import write_acl
from tests.support.broker import start_broker
from tests.support.cli import CliResult, RunCli

SHARED = "SharedT"
GROUP = "PartialG"
KEY = "k-shared"  # the key of a message of SharedT on broker-a, traced there too
UNIQ = "7F0000014A2C18B4AAC2155C3E1A0009"  # its client id


@pytest.fixture(scope="module")
def two_clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, Broker]]:
    """broker-a (DefaultCluster, open) and broker-b (AclCluster, aclEnable=true) on one NameServer; topic
    SharedT on both, group PartialG with a committed offset on broker-a."""
    root = tmp_path_factory.mktemp("partial")
    with local_cluster(root) as cluster:
        home = root / "home"
        write_acl(home)
        locked = cluster.loop.run(
            start_broker(
                root / "broker-b",
                broker_name="broker-b",
                broker_cluster_name="AclCluster",
                namesrv_addr=cluster.namesrv_addr,
                acl_enable=True,
                rocketmq_home=str(home),
            )
        )
        client = handle(cluster)

        async def fill() -> None:
            create = CreateTopicRequestHeader(SHARED, "TBW102", 2, 2, 6, "SINGLE_TAG")
            assert (await client.call(RequestCode.UPDATE_AND_CREATE_TOPIC, create.to_ext_fields())).code == 0
            assert (await client.send(SHARED, b"one", queue_id=0)).code == 0
            commit = UpdateConsumerOffsetRequestHeader(GROUP, SHARED, 0, 1)
            assert (await client.call(RequestCode.UPDATE_CONSUMER_OFFSET, commit.to_ext_fields())).code == 0
            body = json.dumps({"groupName": GROUP}).encode()
            assert (await client.call(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body)).code == 0
            keyed = await client.send(SHARED, b"keyed", queue_id=1, keys=KEY, props={"UNIQ_KEY": UNIQ})
            assert keyed.code == 0
            for broker in (cluster.broker, locked):  # as traceTopicEnable makes it on each broker
                broker.topics.create_system_like(TRACE_TOPIC, 1, 6)
            pub = TraceRecord(
                "Pub",
                UNIQ,
                timestamp_ms=int(time.time() * 1000),
                region_id="DefaultRegion",
                group="PG",
                topic=SHARED,
                keys=KEY,
                store_host=cluster.broker_addr,
                body_size=5,
                cost_ms=1,
                msg_type="Normal_Msg",
                msg_id=keyed.ext_fields["msgId"],
                success=True,
            )
            traced = await client.send(
                TRACE_TOPIC,
                encode_trace([pub]),
                keys=" ".join(trace_keys([pub])),
                group="_INNER_TRACE_PRODUCER",
            )
            assert traced.code == 0
            locked.topics.create_system_like(SHARED, 2, 6)
            await locked.register_all()
            await cluster.broker.register_all()
            await client.client.close()

        cluster.loop.run(fill())
        try:
            yield cluster, locked
        finally:
            cluster.loop.run(locked.stop())


@pytest.fixture
def mq(cli: RunCli, two_clusters: tuple[LocalCluster, Broker]) -> Callable[..., CliResult]:
    def run(*args: str) -> CliResult:
        return cli(*args, env={"NAMESRV_ADDR": two_clusters[0].namesrv_addr})

    return run


def _refused(result: CliResult, locked: Broker) -> None:
    """Exit 0, and one warning line on stderr naming the broker that refused and why."""
    assert result.code == 0, result.stderr
    (line,) = [line for line in result.stderr.splitlines() if locked.addr in line]
    assert "broker-b" in line and "ACL denied" in line, line


def _errors(doc: dict[str, Any], locked: Broker) -> None:
    ((error),) = doc["errors"]
    assert (error["broker"], error["broker_name"], error["reason"]) == (locked.addr, "broker-b", "ACL denied")


@pytest.mark.parametrize(
    "args",
    [
        ["group", "list"],
        ["group", "show", "-g", GROUP],
        ["group", "connections", "-g", GROUP],
        ["group", "progress", "-g", GROUP],
        ["topic", "status", "-t", SHARED],
    ],
)
def test_reads_answer_with_what_they_could_and_name_the_refusing_broker(
    mq: Callable[..., CliResult], two_clusters: tuple[LocalCluster, Broker], args: list[str]
) -> None:
    _, locked = two_clusters
    table = mq(*args)
    _refused(table, locked)
    as_json = mq(*args, "-o", "json")
    _refused(as_json, locked)
    doc = as_json.json()
    if isinstance(doc, dict):
        _errors(doc, locked)
    text = json.dumps(doc)
    assert GROUP in text or "broker-a" in text  # what the open broker answered


@pytest.mark.parametrize(
    "args", [["msg", "query", "-t", SHARED, "-k", KEY, "--since", "-1h"], ["msg", "trace", "-k", KEY]]
)
def test_message_reads_by_key_find_it_on_the_broker_that_answers(
    mq: Callable[..., CliResult], two_clusters: tuple[LocalCluster, Broker], args: list[str]
) -> None:
    """A key is looked up in the index of every broker group of the topic (the trace topic for msg
    trace): one that refuses (or is down) is named, and what the others hold is still found."""
    _, locked = two_clusters
    result = mq(*args, "-o", "json")
    _refused(result, locked)
    assert KEY in result.stdout


def test_shown_records_carry_an_empty_errors_list_when_every_broker_answered(
    mq: Callable[..., CliResult], two_clusters: tuple[LocalCluster, Broker]
) -> None:
    shown = mq("group", "show", "-g", GROUP, "-c", "DefaultCluster", "-o", "json")
    assert shown.code == 0 and shown.json()["errors"] == [], shown.stderr


def test_a_refusal_names_the_broker_and_cluster_and_suggests_c(
    mq: Callable[..., CliResult], two_clusters: tuple[LocalCluster, Broker]
) -> None:
    """With two clusters, ``group delete -g G --yes`` exited 9 on "request failed: ..." though G lived on
    the open cluster: the one line names the broker and cluster that refused, and suggests -c."""
    _, locked = two_clusters
    result = mq("group", "delete", "-g", "NoSuchG", "--yes")
    assert result.code == AuthError.exit_code, result.stderr
    (line,) = result.stderr.splitlines()
    assert f"broker broker-b ({locked.addr}) of cluster AclCluster refused it: " in line, line
    assert "-c CLUSTER keeps to one" in line, line
    scoped = mq("group", "delete", "-g", "NoSuchG", "--yes", "-c", "AclCluster")
    assert scoped.code == AuthError.exit_code and "of cluster AclCluster refused it" in scoped.stderr
    assert "-c CLUSTER" not in scoped.stderr
    open_one = mq("group", "delete", "-g", "NoSuchG", "--yes", "--if-exists", "-c", "DefaultCluster")
    assert open_one.code == 0, open_one.stderr


def test_nothing_readable_exits_with_its_own_code(
    mq: Callable[..., CliResult], two_clusters: tuple[LocalCluster, Broker]
) -> None:
    _, locked = two_clusters
    result = mq("group", "list", "-c", "AclCluster")
    assert result.code == NothingReadError.exit_code == 14, result.stderr
    assert locked.addr in result.stderr and "ACL denied" in result.stderr


def test_completion_answers_from_the_brokers_that_answer_within_a_second(
    two_clusters: tuple[LocalCluster, Broker], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mqctl import completion

    cluster, _ = two_clusters
    monkeypatch.setenv("MQCTL_CACHE_DIR", str(tmp_path))
    started = time.monotonic()
    completion.refresh([cluster.namesrv_addr])
    assert time.monotonic() - started <= 1.0
    cached = json.loads(completion.cache_path([cluster.namesrv_addr]).read_text())
    assert GROUP in cached["groups"] and SHARED in cached["topics"]


def test_completion_refresh_never_dies_and_keeps_the_names_it_had(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A NameServer that is down: the refresh keeps the cached names and marks them fresh (no respawn on
    every TAB), with no traceback."""
    from mqctl import completion

    monkeypatch.setenv("MQCTL_CACHE_DIR", str(tmp_path))
    nowhere = ["127.0.0.1:1"]
    path = completion.cache_path(nowhere)
    path.write_text(json.dumps({"updated": 0, "topics": ["KeptT"], "groups": ["KeptG"]}))
    started = time.monotonic()
    completion.refresh(nowhere)
    assert time.monotonic() - started <= 1.0
    cached = json.loads(path.read_text())
    assert (cached["topics"], cached["groups"]) == (["KeptT"], ["KeptG"])
    assert time.time() - cached["updated"] < 60


def test_a_broker_given_as_the_namesrv_is_named_as_not_one(
    cli: RunCli, two_clusters: tuple[LocalCluster, Broker]
) -> None:
    cluster, _ = two_clusters
    result = cli("topic", "list", "-n", cluster.broker_addr)
    assert result.code == 7, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert f"{cluster.broker_addr} is not a NameServer" in line and "a broker's port?" in line, line
    assert "(request type 206 not supported)" in line, line  # the remark's leading blank (4.9.8's) trimmed
