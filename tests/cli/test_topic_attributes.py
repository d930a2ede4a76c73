"""5.x topic types and FIFO groups through ``mqctl``: ``topic create|update --message-type`` and
``--attribute`` (5.x ``mqadmin updateTopic -a``), ``topic show``, ``group create|update --orderly``
(``consumeMessageOrderly``), and ``export`` → ``apply`` → ``export`` keeping both, against real daemons."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.daemons import LocalCluster, local_cluster
from tests.support.cli import CliResult, RunCli


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with local_cluster(tmp_path / "one") as running:
        yield running


def run(cli: RunCli, cluster: LocalCluster, *args: str) -> CliResult:
    return cli(*args, env={"NAMESRV_ADDR": cluster.namesrv_addr})


def ok(result: CliResult) -> str:
    assert result.code == 0, result.stderr
    return result.stdout


def show(cli: RunCli, cluster: LocalCluster, topic: str) -> dict[str, object]:
    (row,) = json.loads(ok(run(cli, cluster, "topic", "show", "-t", topic, "-o", "json")))
    return row  # type: ignore[no-any-return]


def test_a_topic_created_fifo_is_fifo_on_the_broker_and_in_topic_show(
    cli: RunCli, cluster: LocalCluster
) -> None:
    created = json.loads(
        ok(run(cli, cluster, "topic", "create", "-t", "Seq", "--message-type", "fifo", "-o", "json"))
    )
    assert created["brokers"][0]["changes"]["attributes"] == [None, {"message.type": "FIFO"}]
    assert cluster.broker.topics.get("Seq").message_type == "FIFO"
    row = show(cli, cluster, "Seq")
    assert (row["message_type"], row["attributes"], row["broker_name"]) == (
        "FIFO",
        {"message.type": "FIFO"},
        "broker-a",
    )

    ok(run(cli, cluster, "topic", "create", "-t", "Plain"))
    assert (show(cli, cluster, "Plain")["message_type"], show(cli, cluster, "Plain")["attributes"]) == (
        "NORMAL",
        {},
    )


def test_attributes_are_changed_and_removed_as_5x_mqadmin_takes_them(
    cli: RunCli, cluster: LocalCluster
) -> None:
    ok(run(cli, cluster, "topic", "create", "-t", "Later", "-a", "reserve.time=3600"))
    assert show(cli, cluster, "Later")["attributes"] == {"reserve.time": "3600"}

    changed = json.loads(
        ok(
            run(
                cli,
                cluster,
                *(
                    "topic",
                    "update",
                    "-t",
                    "Later",
                    "--message-type",
                    "DELAY",
                    "-a",
                    "-reserve.time",
                    "-o",
                    "json",
                ),
            )
        )
    )
    assert changed["brokers"][0]["changes"] == {
        "attributes": [{"reserve.time": "3600"}, {"message.type": "DELAY"}]
    }
    assert cluster.broker.topics.get("Later").attributes == {"message.type": "DELAY"}

    # an update that names no attribute keeps them (and changes nothing else)
    same = json.loads(ok(run(cli, cluster, "topic", "update", "-t", "Later", "-r", "8", "-o", "json")))
    assert same["brokers"][0]["action"] == "unchanged"
    assert show(cli, cluster, "Later")["message_type"] == "DELAY"

    ok(run(cli, cluster, "topic", "update", "-t", "Later", "-a", "-message.type"))
    assert show(cli, cluster, "Later")["attributes"] == {}


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("create", "-t", "Bad", "-a", "+queue.type=BatchCQ"), "not supported by this broker"),
        (("create", "-t", "Bad", "-a", "colour=red"), "unsupported key: colour"),
        (("create", "-t", "Bad", "-a", "-message.type"), "only add attribute is supported while creating"),
        (("create", "-t", "Bad", "-a", "reserve.time=soon"), 'For input string: "soon"'),
        (("create", "-t", "Bad", "-a", "message.type=MIXED"), "MIXED message type is not supported"),
        (("create", "-t", "Bad", "-a", "a=1,b=2"), "one attribute per --attribute"),
        (("create", "-t", "Bad", "-a", "message.type="), "add/alter attribute format is wrong"),
        (("update", "-t", "Fixed", "-a", "+queue.type=SimpleCQ"), "unchangeable attribute. key: queue.type"),
    ],
)
def test_refused_attributes_are_a_usage_error_and_change_nothing(
    cli: RunCli, cluster: LocalCluster, args: tuple[str, ...], said: str
) -> None:
    ok(run(cli, cluster, "topic", "create", "-t", "Fixed"))
    result = run(cli, cluster, "topic", *args)
    assert result.code == 2, result.stderr
    assert said in result.stderr and result.stderr.count("\n") == 1
    assert cluster.broker.topics.get("Bad") is None
    assert cluster.broker.topics.get("Fixed").attributes == {}


def test_a_group_made_orderly_is_a_5x_fifo_group_and_back(cli: RunCli, cluster: LocalCluster) -> None:
    ok(run(cli, cluster, "group", "create", "-g", "GFifo", "--orderly"))
    config = cluster.broker.groups.get("GFifo")
    assert config.orderly and config.extra == {"consumeMessageOrderly": True}
    shown = json.loads(ok(run(cli, cluster, "group", "show", "-g", "GFifo", "-o", "json")))
    assert shown["extra"] == {"consumeMessageOrderly": True}

    ok(run(cli, cluster, "group", "update", "-g", "GFifo", "--max-retries", "3"))  # kept when not named
    assert cluster.broker.groups.get("GFifo").orderly
    ok(run(cli, cluster, "group", "update", "-g", "GFifo", "--no-orderly"))
    assert not cluster.broker.groups.get("GFifo").orderly

    ok(run(cli, cluster, "group", "create", "-g", "GPlain", "--no-orderly"))  # the default: nothing written
    assert cluster.broker.groups.get("GPlain").extra == {}


@pytest.mark.slow  # two clusters
def test_export_apply_export_keeps_topic_types_and_fifo_groups(cli: RunCli, tmp_path: Path) -> None:
    with local_cluster(tmp_path / "source") as source, local_cluster(tmp_path / "target") as target:
        for args in (
            ("topic", "create", "-t", "Seq", "--message-type", "FIFO", "--order"),
            ("topic", "create", "-t", "Later", "-a", "message.type=DELAY", "-a", "reserve.time=60"),
            ("topic", "create", "-t", "Plain"),
            ("group", "create", "-g", "GFifo", "--orderly"),
            ("group", "create", "-g", "GPlain"),
        ):
            ok(run(cli, source, *args))
        exported = ok(run(cli, source, "export", "-o", "yaml"))
        doc = yaml.safe_load(exported)
        topics = {t["name"]: t for t in doc["topics"]}
        assert topics["Seq"]["attributes"] == {"message.type": "FIFO"}
        assert topics["Later"]["attributes"] == {"message.type": "DELAY", "reserve.time": "60"}
        assert "attributes" not in topics["Plain"]  # a 4.9.8 topic's entry is as it was
        assert {g["name"]: g["orderly"] for g in doc["groups"]} == {"GFifo": True, "GPlain": False}

        path = tmp_path / "cluster.yaml"
        path.write_text(exported)
        ok(run(cli, target, "apply", "-f", str(path), "--execute"))
        assert ok(run(cli, target, "export", "-o", "yaml")) == exported
        assert target.broker.topics.get("Seq").message_type == "FIFO"
        assert target.broker.groups.get("GFifo").orderly

        # the file is what the topics should be: a type changed on the target since is set back
        ok(
            run(
                cli,
                target,
                "topic",
                "update",
                "-t",
                "Seq",
                "--message-type",
                "NORMAL",
                "-a",
                "reserve.time=5",
            )
        )
        ok(run(cli, target, "group", "update", "-g", "GFifo", "--no-orderly"))
        plan = json.loads(ok(run(cli, target, "apply", "-f", str(path), "-o", "json")))
        seq = next(r for r in plan if r["name"] == "Seq")
        assert seq["changes"] == {
            "attributes": [{"message.type": "NORMAL", "reserve.time": "5"}, {"message.type": "FIFO"}]
        }
        ok(run(cli, target, "apply", "-f", str(path), "--execute"))
        assert ok(run(cli, target, "export", "-o", "yaml")) == exported


def test_a_file_attribute_of_the_wrong_type_is_refused(
    cli: RunCli, cluster: LocalCluster, tmp_path: Path
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "kind": "mqctl-metadata",
                "version": 1,
                "cluster": "DefaultCluster",
                "topics": [{"name": "T", "attributes": {"reserve.time": 60}}],
                "groups": [],
            }
        )
    )
    result = run(cli, cluster, "apply", "-f", str(path))
    assert result.code == 2 and "attributes {'reserve.time': 60} is not a mapping" in result.stderr


def test_topic_apply_files_take_attributes(cli: RunCli, cluster: LocalCluster, tmp_path: Path) -> None:
    path = tmp_path / "topics.yaml"
    path.write_text(
        yaml.safe_dump([{"name": "Seq", "attributes": {"message.type": "FIFO"}}, {"name": "Plain"}])
    )
    ok(run(cli, cluster, "topic", "apply", "-f", str(path), "--execute"))
    assert show(cli, cluster, "Seq")["attributes"] == {"message.type": "FIFO"}
    assert show(cli, cluster, "Plain")["attributes"] == {}
    again = json.loads(ok(run(cli, cluster, "topic", "apply", "-f", str(path), "-o", "json")))
    assert {r["action"] for r in again} == {"unchanged"}

    path.write_text(yaml.safe_dump([{"name": "Seq", "attributes": {"message.type": 1}}]))
    result = run(cli, cluster, "topic", "apply", "-f", str(path))
    assert result.code == 2 and "attributes must map names to strings" in result.stderr


class _Loads498:
    """SubscriptionGroupConfig as a 4.9.8 broker reads its body: fields it does not have are dropped."""

    @staticmethod
    def loads(body: bytes) -> object:
        from dataclasses import replace

        from store.models import SubscriptionGroupConfig

        return replace(SubscriptionGroupConfig.loads(body), extra={})


def test_a_broker_that_drops_the_5x_fields_is_warned_of(
    cli: RunCli, cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 4.9.8 broker answers UPDATE_AND_CREATE_TOPIC and the group body with success and keeps neither
    the `attributes` field nor consumeMessageOrderly: --message-type FIFO and --orderly said nothing, and
    5.x clients saw a NORMAL topic and a concurrent group. Read back after the write: one warning each."""
    import daemon.broker.processors.admin as processor

    monkeypatch.setattr(processor, "alter_attributes", lambda old, changes: {})  # as 4.9.8 keeps them
    monkeypatch.setattr(processor, "SubscriptionGroupConfig", _Loads498)
    made = run(cli, cluster, "topic", "create", "-t", "Fifo498", "--message-type", "FIFO", "-o", "json")
    assert made.code == 0, made.stderr
    assert json.loads(made.stdout)["not_kept"] == [f"{cluster.broker_addr} kept no message.type=FIFO"]
    [line] = made.stderr.splitlines()
    assert line.startswith(f"mqctl: warning: {cluster.broker_addr} kept no message.type=FIFO: ")
    assert "RocketMQ 4.9.x" in line and "NORMAL" in line
    group = run(cli, cluster, "group", "create", "-g", "Fifo498G", "--orderly")
    assert group.code == 0, group.stderr
    [line] = group.stderr.splitlines()
    assert f"{cluster.broker_addr} kept no consumeMessageOrderly=true" in line and "FIFO" in line
    monkeypatch.undo()  # a broker that keeps them: no warning
    kept = run(cli, cluster, "topic", "create", "-t", "Fifo5x", "--message-type", "FIFO", "-o", "json")
    assert kept.code == 0 and kept.stderr == "" and "not_kept" not in json.loads(kept.stdout), kept
    kept_group = run(cli, cluster, "group", "create", "-g", "Fifo5xG", "--orderly")
    assert kept_group.code == 0 and kept_group.stderr == "", kept_group
