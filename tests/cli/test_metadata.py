"""``mqctl export`` and ``mqctl apply -f``: a cluster's metadata recreated on another, real cluster.

Two clusters (a NameServer and broker-a each) on loopback: export the first, apply the file to the
second, export that: the same file. mqadmin's ``exportMetadata`` JSON is applied too.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from daemon.broker.broker import Broker
from mqctl.admin.client import Admin
from mqctl.admin.member import GroupMember
from mqctl.errors import ConflictError, NotFoundError, UsageError
from tests.daemons import LocalCluster, local_cluster
from tests.support.acl import ADMIN_AK, ADMIN_SK, USER_AK, USER_SK, write_acl
from tests.support.broker import broker_config
from tests.support.cli import CliResult, RunCli


@pytest.fixture
def source(tmp_path: Path) -> Iterator[LocalCluster]:
    with local_cluster(tmp_path / "source") as cluster:
        yield cluster


@pytest.fixture
def target(tmp_path: Path) -> Iterator[LocalCluster]:
    with local_cluster(tmp_path / "target") as cluster:
        yield cluster


def run(cli: RunCli, ns: str, *args: str) -> CliResult:
    """``mqctl ARGS`` against the NameServer ``ns`` (through $NAMESRV_ADDR, as an operator would)."""
    return cli(*args, env={"NAMESRV_ADDR": ns})


def _ok(result: object) -> str:
    assert result.code == 0, result.stderr  # type: ignore[attr-defined]
    return result.stdout  # type: ignore[attr-defined, no-any-return]


def _populate(cli: RunCli, ns: str) -> None:
    for args in (
        ("topic", "create", "-t", "Orders", "-r", "4", "-w", "4"),
        ("topic", "create", "-t", "Sequenced", "-r", "2", "-w", "2", "--order"),
        ("topic", "create", "-t", "Frozen", "--perm", "r"),
        ("group", "create", "-g", "Billing", "--max-retries", "3", "--retry-queues", "2", "--no-broadcast"),
        ("group", "create", "-g", "Audit", "--disable"),
        ("msg", "send", "-t", "Orders", "one"),
        ("msg", "send", "-t", "Orders", "two"),
        ("offset", "reset", "-g", "Billing", "-t", "Orders", "--to-latest", "--execute", "--yes"),
    ):
        _ok(run(cli, ns, *args))


@pytest.mark.slow  # two clusters and a dozen commands
def test_export_apply_export_is_a_fixed_point(
    cli: RunCli, source: LocalCluster, target: LocalCluster, tmp_path: Path
) -> None:
    _populate(cli, source.namesrv_addr)
    exported = _ok(run(cli, source.namesrv_addr, "export", "--offsets", "-o", "yaml"))
    assert exported == _ok(run(cli, source.namesrv_addr, "export", "--offsets", "-o", "yaml"))  # no timestamp
    doc = yaml.safe_load(exported)
    by_name = {t["name"]: t for t in doc["topics"]}
    assert set(by_name) == {"Orders", "Sequenced", "Frozen"}  # no system, retry or DLQ topic
    assert by_name["Orders"] == {
        "name": "Orders",
        "brokers": ["broker-a"],
        "read_queues": 4,
        "write_queues": 4,
        "perm": "rw",
        "order": False,
        "sysflag": 0,
        "filter_type": "SINGLE_TAG",
    }
    assert by_name["Sequenced"]["read_queues"] == 2 and by_name["Frozen"]["perm"] == "r"
    billing = next(g for g in doc["groups"] if g["name"] == "Billing")
    assert (billing["max_retries"], billing["retry_queues"], billing["broadcast"]) == (3, 2, False)
    assert next(g for g in doc["groups"] if g["name"] == "Audit")["enabled"] is False
    assert {g["name"] for g in doc["groups"]} == {"Billing", "Audit"}  # no broker's own group
    (offsets,) = doc["offsets"]
    assert (
        offsets["group"] == "Billing"
        and offsets["topic"] == "Orders"
        and sum(offsets["queues"].values()) == 2
    )

    path = tmp_path / "cluster.yaml"
    path.write_text(exported)
    ns = target.namesrv_addr
    plan = json.loads(_ok(run(cli, ns, "apply", "-f", str(path), "--offsets", "-o", "json")))
    assert {(r["kind"], r["name"], r["action"].split(";")[0]) for r in plan} >= {
        ("topic", "Orders", "would create"),
        ("group", "Billing", "would create"),
        ("offsets", "Billing@Orders", "would commit"),
    }
    assert all(r["broker"] == "broker-a" for r in plan)
    assert yaml.safe_load(_ok(run(cli, ns, "export", "-o", "yaml")))["topics"] == []  # a plan changes nothing

    applied = json.loads(
        _ok(run(cli, ns, "apply", "-f", str(path), "--offsets", "--execute", "--yes", "-o", "json"))
    )
    assert {r["action"].split(";")[0] for r in applied} == {"created", "committed"}
    # the target holds none of the source's messages: the offsets are clamped to its queues' ends (0),
    # where its consumers start reading what is sent there
    assert "beyond the queue's end (max 0)" in next(r for r in applied if r["kind"] == "offsets")["action"]
    clamped = {**doc, "offsets": [{**o, "queues": dict.fromkeys(o["queues"], 0)} for o in doc["offsets"]]}
    assert yaml.safe_load(_ok(run(cli, ns, "export", "--offsets", "-o", "yaml"))) == clamped
    assert _ok(run(cli, ns, "export", "-o", "yaml")) == _ok(
        run(cli, source.namesrv_addr, "export", "-o", "yaml")
    )

    again = json.loads(
        _ok(run(cli, ns, "apply", "-f", str(path), "--offsets", "--execute", "--yes", "-o", "json"))
    )
    assert {r["action"].split(";")[0] for r in again} == {"unchanged"}  # idempotent


def test_mqadmin_export_metadata_json_is_applied_to_every_master(
    cli: RunCli, target: LocalCluster, tmp_path: Path
) -> None:
    """4.9.8 ``ExportMetadataCommand`` with -c: fastjson's bean properties, queue counts added up over the
    masters it read, an exportTime; the file is fastjson's pretty print (``JSON.toJSONString(result,
    true)``), indented with tabs, which a YAML reader refuses."""
    mqadmin = {
        "exportTime": 1764355200000,
        "subscriptionGroupTable": {
            "PayGroup": {
                "brokerId": 0,
                "consumeBroadcastEnable": True,
                "consumeEnable": True,
                "consumeFromMinEnable": True,
                "groupName": "PayGroup",
                "notifyConsumerIdsChangedEnable": True,
                "retryMaxTimes": 5,
                "retryQueueNums": 1,
                "whichBrokerWhenConsumeSlowly": 1,
            }
        },
        "topicConfigTable": {
            "Payments": {
                "order": False,
                "perm": 6,
                "readQueueNums": 8,
                "topicFilterType": "SINGLE_TAG",
                "topicName": "Payments",
                "topicSysFlag": 0,
                "writeQueueNums": 8,
            }
        },
    }
    path = tmp_path / "metadata.json"
    path.write_text(json.dumps(mqadmin, indent="\t", separators=(",", ":")))
    ns = target.namesrv_addr
    result = run(cli, ns, "apply", "-f", str(path), "--execute", "-o", "json")
    assert result.code == 0, result.stderr
    assert "adds up queue counts" in result.stderr
    assert {(r["kind"], r["name"], r["action"]) for r in result.json()} == {
        ("topic", "Payments", "created"),
        ("group", "PayGroup", "created"),
    }
    doc = yaml.safe_load(_ok(run(cli, ns, "export", "-o", "yaml")))
    assert [(t["name"], t["read_queues"], t["write_queues"]) for t in doc["topics"]] == [("Payments", 8, 8)]
    assert [(g["name"], g["max_retries"]) for g in doc["groups"]] == [("PayGroup", 5)]
    # a per-broker export (-b -t: topic.json) carries its dataVersion and no sums
    per_broker = {
        "dataVersion": {"counter": 3, "timestamp": 1},
        "topicConfigTable": mqadmin["topicConfigTable"],
    }
    path.write_text(json.dumps(per_broker))
    plan = _ok(run(cli, ns, "apply", "-f", str(path), "-o", "json"))
    assert [r["action"] for r in json.loads(plan)] == ["unchanged"]


def test_files_it_cannot_apply(cli: RunCli, target: LocalCluster, tmp_path: Path) -> None:
    ns = target.namesrv_addr
    path = tmp_path / "cluster.yaml"
    path.write_text(
        "kind: mqctl-metadata\nversion: 1\ntopics:\n- {name: T, brokers: [broker-z], read_queues: 2}\n"
    )
    missing = run(cli, ns, "apply", "-f", str(path))
    assert (
        missing.code == NotFoundError.exit_code
        and "broker-z" in missing.stderr
        and "--map-broker" in missing.stderr
    )
    mapped = run(cli, ns, "apply", "-f", str(path), "--map-broker", "broker-z=broker-a", "-o", "json")
    assert [(r["name"], r["broker"], r["action"]) for r in mapped.json()] == [
        ("T", "broker-a", "would create")
    ]
    for text, why in (
        ("topics: []\n", "kind"),
        ("kind: mqctl-metadata\nversion: 1\ntopics:\n- {name: 'bad name'}\n", "characters"),
        ("kind: mqctl-metadata\nversion: 1\ntopics:\n- {name: T, queues: 3}\n", "unknown keys"),
        ("kind: mqctl-metadata\nversion: 1\ntopics:\n- {name: T, perm: x}\n", "T': perm 'x' is not r, w, rw"),
        ("kind: mqctl-metadata\nversion: 1\ntopics:\n- {name: T, perm: 99}\n", "perm 99 is not r, w, rw"),
        (
            "kind: mqctl-metadata\nversion: 1\ntopics:\n- {name: T, filter_type: FOO}\n",
            "SINGLE_TAG or MULTI_TAG",
        ),
        ("kind: mqctl-metadata\nversion: 1\ntopics:\n- {name: T, read_queues: eight}\n", "whole number"),
        ("kind: mqctl-metadata\nversion: 1\ngroups:\n- {name: G, enabled: 1}\n", "true or false"),
        (
            "kind: mqctl-metadata\nversion: 1\ngroups:\n- {name: '%RETRY%G'}\n",
            "prefix of every group's retry",
        ),
        ("- a\n", "mapping"),
        # a cut mqadmin file: JSON's error, not YAML's on the tab
        ('{\n\t"topicConfigTable":{\n', "Expecting"),
        *(
            (
                f"kind: mqctl-metadata\nversion: 1\noffsets:\n- {{group: G, topic: T, broker: b, queues: {q}}}\n",
                why,
            )
            for q, why in (
                ("null", "queues must map"),
                ("[1, 2]", "queues must map"),
                ("{0: -5}", "queue 0 offset -5 is not a whole number"),
                ("{0: 2.7}", "queue 0 offset 2.7 is not a whole number"),
                ("{0: true}", "queue 0 offset True is not a whole number"),
                ("{-1: 2}", "queue id -1 is not a whole number"),
                ("{x: 1}", "queue id 'x' is not a whole number"),
            )
        ),
    ):
        path.write_text(text)
        refused = run(cli, ns, "apply", "-f", str(path))
        assert refused.code == UsageError.exit_code and why in refused.stderr, (text, refused.stderr)
    # YAML's flow style, not JSON, is still YAML
    path.write_text("{kind: mqctl-metadata, version: 1, topics: [{name: T}]}\n")
    assert [r["action"] for r in run(cli, ns, "apply", "-f", str(path), "-o", "json").json()] == [
        "would create"
    ]


def test_a_system_topic_in_the_file_is_skipped_in_the_plan_and_the_run(
    cli: RunCli, target: LocalCluster, tmp_path: Path
) -> None:
    """A hand-made (or another tool's) file naming a topic the broker keeps itself: the plan said 'would
    create' and --execute created the topics before it, then failed on it (exit 8) and left the rest."""
    ns = target.namesrv_addr
    path = tmp_path / "cluster.yaml"
    path.write_text(
        "kind: mqctl-metadata\nversion: 1\ntopics:\n"
        + "".join(f"- {{name: {t}, read_queues: 2, write_queues: 2}}\n" for t in ("A1", "TBW102", "Z9"))
    )
    for args in ((), ("--execute", "--yes")):
        plan = run(cli, ns, "apply", "-f", str(path), *args, "-o", "json")
        assert plan.code == 0, plan.stderr
        assert [(r["name"], r["action"]) for r in plan.json()] == [
            ("A1", "created" if args else "would create"),
            ("TBW102", "skipped: a system topic of this broker"),
            ("Z9", "created" if args else "would create"),
        ]


def test_offsets_are_not_applied_under_a_live_consumer(
    cli: RunCli, target: LocalCluster, tmp_path: Path
) -> None:
    ns = target.namesrv_addr
    _ok(run(cli, ns, "topic", "create", "-t", "Orders", "-r", "2", "-w", "2"))
    path = tmp_path / "cluster.yaml"
    path.write_text(
        "kind: mqctl-metadata\nversion: 1\n"
        "offsets:\n- {group: Live, topic: Orders, broker: broker-a, queues: {0: 1, 1: 1}}\n"
    )
    addr = target.broker_addr

    async def scenario() -> tuple[object, object, dict[tuple[str, str, int], int]]:
        async with (
            Admin([ns]) as admin,
            GroupMember(admin, "Live", "Orders", {"broker-a": addr}, commit_on_exit=False),
        ):
            plan = await asyncio.to_thread(run, cli, ns, "apply", "-f", str(path), "--offsets", "-o", "json")
            refused = await asyncio.to_thread(
                run, cli, ns, "apply", "-f", str(path), "--offsets", "--execute", "--yes"
            )
            return plan, refused, await admin.all_consumer_offsets(addr)

    plan, refused, offsets = asyncio.run(scenario())
    assert plan.code == 0 and plan.json()[0]["action"].startswith("blocked: live consumers")  # type: ignore[attr-defined]
    assert refused.code == ConflictError.exit_code and "Live" in refused.stderr  # type: ignore[attr-defined]
    assert not any(group == "Live" for group, _, _ in offsets)  # nothing committed


@contextmanager
def two_masters(root: Path) -> Iterator[tuple[LocalCluster, str]]:
    """A cluster with broker-a and broker-b (both masters); yields it and broker-b's address."""
    with local_cluster(root) as cluster:
        second = Broker(
            broker_config(root / "broker-b", namesrv_addr=cluster.namesrv_addr, broker_name="broker-b")
        )
        cluster.loop.run(second.start())
        try:
            yield cluster, second.addr
        finally:
            cluster.loop.run(second.stop())


@pytest.mark.slow  # four brokers
def test_topics_that_differ_between_masters_round_trip(cli: RunCli, tmp_path: Path) -> None:
    with (
        two_masters(tmp_path / "source") as (source, b_addr),
        two_masters(tmp_path / "target") as (target, _),
    ):
        ns = source.namesrv_addr
        _ok(run(cli, ns, "topic", "create", "-t", "Orders", "-r", "4", "-w", "4"))
        _ok(run(cli, ns, "topic", "update", "-t", "Orders", "-b", b_addr, "-r", "8", "-w", "8"))
        _ok(run(cli, ns, "topic", "create", "-t", "OnlyA", "-b", source.broker_addr))
        exported = _ok(run(cli, ns, "export", "-o", "yaml"))
        topics = [(t["name"], t["brokers"], t["read_queues"]) for t in yaml.safe_load(exported)["topics"]]
        assert topics == [
            ("OnlyA", ["broker-a"], 8),
            ("Orders", ["broker-a"], 4),
            ("Orders", ["broker-b"], 8),
        ]
        path = tmp_path / "cluster.yaml"
        path.write_text(exported)
        _ok(run(cli, target.namesrv_addr, "apply", "-f", str(path), "--execute"))
        assert _ok(run(cli, target.namesrv_addr, "export", "-o", "yaml")) == exported

        # mqadmin's cluster export adds queue counts up over the masters: 16 on two masters is 8 each
        summed = {
            "exportTime": 1,
            "topicConfigTable": {
                "Sum": {"topicName": "Sum", "readQueueNums": 16, "writeQueueNums": 16, "perm": 6}
            },
        }
        path.write_text(json.dumps(summed))
        plan = run(cli, target.namesrv_addr, "apply", "-f", str(path), "-o", "json").json()
        assert [(r["broker"], r["changes"]["read_queues"]) for r in plan] == [
            ("broker-a", [None, 8]),
            ("broker-b", [None, 8]),
        ]


def test_acl_accounts_are_exported_without_secrets_and_compared(cli: RunCli, tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_acl(home)
    with local_cluster(tmp_path / "acl", acl_enable=True, rocketmq_home=str(home)) as cluster:
        env = {
            "NAMESRV_ADDR": cluster.namesrv_addr,
            "MQCTL_ACCESS_KEY": ADMIN_AK,
            "MQCTL_SECRET_KEY": ADMIN_SK,
        }
        exported = cli("export", "--acl", "-o", "yaml", env=env)
        assert exported.code == 0, exported.stderr
        assert USER_SK not in exported.stdout and ADMIN_SK not in exported.stdout
        accounts = {a["name"]: a for a in yaml.safe_load(exported.stdout)["acl"]}
        assert accounts[USER_AK]["topic_perms"] == ["TopicA=PUB|SUB", "TopicDeny=DENY"]
        assert accounts[USER_AK]["default_topic_perm"] == "DENY" and accounts[ADMIN_AK]["admin"] is True
        doc = yaml.safe_load(exported.stdout)
        doc["acl"] = [
            {**a, "default_topic_perm": "PUB"} if a["name"] == USER_AK else a for a in doc["acl"]
        ] + [{"name": "newcomer", "admin": False}]
        path = tmp_path / "cluster.yaml"
        path.write_text(yaml.safe_dump(doc))
        plan = cli("apply", "-f", str(path), "--execute", "-o", "json", env=env)
        assert plan.code == 0, plan.stderr
        actions = {r["name"]: r["action"] for r in plan.json() if r["kind"] == "acl"}
        assert actions[ADMIN_AK] == "unchanged"
        assert actions[USER_AK].startswith("differs") and actions["newcomer"].startswith("missing")


def test_export_acl_on_a_cluster_with_acl_off_leaves_the_acl_part_out(
    cli: RunCli, source: LocalCluster
) -> None:
    _ok(run(cli, source.namesrv_addr, "topic", "create", "-t", "Orders"))
    exported = run(cli, source.namesrv_addr, "export", "--acl", "--offsets", "-o", "yaml")
    assert exported.code == 0, exported.stderr
    doc = yaml.safe_load(exported.stdout)
    assert "acl" not in doc and [t["name"] for t in doc["topics"]] == ["Orders"] and "offsets" in doc
    warnings = exported.stderr.strip().splitlines()
    assert len(warnings) == 1 and warnings[0].startswith("mqctl: warning: ACL is off on cluster")


def test_offsets_past_a_queue_end_or_for_a_missing_queue_are_flagged(
    cli: RunCli, target: LocalCluster, tmp_path: Path
) -> None:
    ns = target.namesrv_addr
    _ok(run(cli, ns, "topic", "create", "-t", "Orders", "-r", "2", "-w", "2"))  # empty: both queues end at 0
    path = tmp_path / "cluster.yaml"
    path.write_text(
        "kind: mqctl-metadata\nversion: 1\n"
        "offsets:\n- {group: Billing, topic: Orders, broker: broker-a, queues: {0: 0, 1: 5, 7: 3}}\n"
    )
    plan = run(cli, ns, "apply", "-f", str(path), "--offsets", "-o", "json")
    assert plan.code == 0, plan.stderr
    (row,) = plan.json()
    assert "queue 1 beyond the queue's end (max 0): 0, not 5" in row["action"]
    assert "queue 7: no such queue" in row["action"] and row["action"].startswith("would commit")
    assert row["changes"] == {"0": [None, 0], "1": [None, 0]}
    done = run(cli, ns, "apply", "-f", str(path), "--offsets", "--execute", "--yes", "-o", "json")
    assert done.code == 0, done.stderr
    assert done.json()[0]["action"].startswith("committed")

    async def committed() -> dict[tuple[str, str, int], int]:
        async with Admin([ns]) as admin:
            return await admin.all_consumer_offsets(target.broker_addr)

    # clamped to the end, as 4.9.8's offset reset does: committed at 5, the lag read -5
    offsets = asyncio.run(committed())
    assert {q: o for (g, t, q), o in offsets.items() if g == "Billing"} == {0: 0, 1: 0}


def _file(tmp_path: Path, body: str) -> Path:
    """A metadata file of ``body`` (its YAML after the kind and version lines)."""
    path = tmp_path / "f.yaml"
    path.write_text(f"kind: mqctl-metadata\nversion: 1\n{body}")
    return path


def _committed(target: LocalCluster, group: str) -> dict[tuple[str, int], int]:
    async def read() -> dict[tuple[str, str, int], int]:
        async with Admin([target.namesrv_addr]) as admin:
            return await admin.all_consumer_offsets(target.broker_addr)

    return {(t, q): o for (g, t, q), o in asyncio.run(read()).items() if g == group}


def test_offsets_of_queues_the_same_apply_adds_are_committed(
    cli: RunCli, target: LocalCluster, tmp_path: Path
) -> None:
    """The queue ends were read before the topic grew from 2 to 4 queues: queues 2 and 3 'no such queue'."""
    ns = target.namesrv_addr
    _ok(run(cli, ns, "topic", "create", "-t", "Grow", "-r", "2", "-w", "2"))
    path = _file(
        tmp_path,
        "topics:\n- {name: Grow, read_queues: 4, write_queues: 4}\n"
        "offsets:\n- {group: G, topic: Grow, broker: broker-a, queues: {0: 0, 1: 0, 2: 0, 3: 0}}\n",
    )
    done = run(cli, ns, "apply", "-f", str(path), "--offsets", "--execute", "--yes", "-o", "json")
    assert done.json()[-1]["action"] == "committed", done.stdout
    assert _committed(target, "G") == {("Grow", q): 0 for q in range(4)}


def test_a_topic_without_queue_counts_plans_the_queues_it_gets(
    cli: RunCli, target: LocalCluster, tmp_path: Path
) -> None:
    """The plan counted 16 queues (TopicConfig's default), the apply creates 8: queue 12 'would commit',
    and --execute failed part-way (queueId[12] is illegal) after committing queue 0."""
    ns = target.namesrv_addr
    path = _file(
        tmp_path,
        "topics:\n- {name: NoCount}\noffsets:\n- {group: G, topic: NoCount, broker: broker-a, queues: {0: 3, 12: 3}}\n",
    )
    plan = run(cli, ns, "apply", "-f", str(path), "--offsets", "-o", "json")
    assert "queue 12: no such queue" in plan.json()[-1]["action"], plan.stdout
    done = run(cli, ns, "apply", "-f", str(path), "--offsets", "--execute", "--yes", "-o", "json")
    assert done.code == 0, done.stderr
    assert _committed(target, "G") == {("NoCount", 0): 0}


def test_offsets_for_a_topic_the_target_lacks_are_skipped_and_said(
    cli: RunCli, target: LocalCluster, tmp_path: Path
) -> None:
    """The plan said 'would commit'; --execute wrote the topics, then failed: topic[%RETRY%G] not exist."""
    ns = target.namesrv_addr
    path = _file(
        tmp_path,
        "topics:\n- {name: T1, read_queues: 1, write_queues: 1}\n"
        "offsets:\n- {group: G, topic: '%RETRY%G', broker: broker-a, queues: {0: 500}}\n",
    )
    plan = run(cli, ns, "apply", "-f", str(path), "--offsets", "-o", "json")
    assert plan.json()[-1]["action"] == "skipped: no such topic on the target", plan.stdout
    done = run(cli, ns, "apply", "-f", str(path), "--offsets", "--execute", "--yes", "-o", "json")
    assert done.code == 0, done.stderr
    assert done.json()[-1]["action"] == "skipped: no such topic on the target"
    assert _committed(target, "G") == {}


def test_acl_off_on_the_target_is_a_plan_row_and_nothing_is_written_first(
    cli: RunCli, target: LocalCluster, tmp_path: Path
) -> None:
    """A file of 'export --acl' on a target with ACL off: the plan was never shown, and --execute wrote
    the topics, then exited 8 on the ACL comparison without saying what it had written."""
    ns = target.namesrv_addr
    path = tmp_path / "cluster.yaml"
    path.write_text(
        "kind: mqctl-metadata\nversion: 1\ntopics:\n- {name: TNEW, read_queues: 2, write_queues: 2}\n"
        "acl:\n- {name: app, brokers: [broker-a], admin: false}\n"
    )
    for args, topic_action in (((), "would create"), (("--execute",), "created")):
        result = run(cli, ns, "apply", "-f", str(path), *args, "-o", "json")
        assert result.code == 0, result.stderr
        assert [(r["kind"], r["name"], r["action"]) for r in result.json()] == [
            ("topic", "TNEW", topic_action),
            ("acl", "app", "ACL off on the target (aclEnable=false): not compared"),
        ]


@pytest.mark.parametrize("lost", [False, True])
def test_a_failure_part_way_says_what_was_applied(
    cli: RunCli, target: LocalCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lost: bool
) -> None:
    """The rows written before a refusal, then the refusal's message and exit code; a connection lost
    (not a broker's refusal) escaped without the rows."""
    from daemon.remoting.errors import RemotingConnectError
    from mqctl.errors import BrokerError
    from mqctl.services import groups

    async def refused(*args: object, **kwargs: object) -> list[object]:
        if lost:
            raise RemotingConnectError("127.0.0.1:1", "connection closed")
        raise BrokerError("request failed: no", code=1)

    monkeypatch.setattr(groups, "apply_on", refused)
    path = _file(
        tmp_path, "topics:\n- {name: TNEW, read_queues: 2, write_queues: 2}\ngroups:\n- {name: GNEW}\n"
    )
    result = run(cli, target.namesrv_addr, "apply", "-f", str(path), "--execute", "-o", "json")
    assert result.code != 0 if lost else result.code == BrokerError.exit_code
    assert [(r["name"], r["action"]) for r in result.json()] == [("TNEW", "created")], result
    said = "connection closed" if lost else "request failed: no"
    assert "applied before the failure" in result.stderr and said in result.stderr


@pytest.mark.slow  # two clusters
def test_offsets_of_queues_only_read_are_applied(cli: RunCli, target: LocalCluster, tmp_path: Path) -> None:
    """A topic scaling in (-w below -r): its read-only queues are real queues consumers read, but
    GET_TOPIC_STATS_INFO answers for write queues alone, so their offsets were 'no such queue, skipped'."""
    ns = target.namesrv_addr
    _ok(run(cli, ns, "topic", "create", "-t", "Draining", "-r", "4", "-w", "4"))
    _ok(run(cli, ns, "msg", "send", "-t", "Draining", "-q", "3", "held"))
    _ok(run(cli, ns, "topic", "update", "-t", "Draining", "-w", "2"))
    path = tmp_path / "cluster.yaml"
    path.write_text(
        "kind: mqctl-metadata\nversion: 1\n"
        "offsets:\n- {group: Billing, topic: Draining, broker: broker-a, queues: {1: 0, 3: 1}}\n"
    )
    plan = run(cli, ns, "apply", "-f", str(path), "--offsets", "-o", "json")
    assert plan.code == 0, plan.stderr
    (row,) = plan.json()
    assert row["action"] == "would commit", row
