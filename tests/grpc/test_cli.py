"""mqctl on 5.x traffic: 34-character message ids, 5.x clients in the connection listings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import RunCli
from tests.support.grpc5 import (
    create_topic,
    grpc_cluster,
    joined,
    message,
    producer,
    receive_all,
    simple_consumer,
    stored,
    wait_for,
)

pytestmark = pytest.mark.slow


def test_msg_query_finds_a_5x_message_by_its_34_character_id(cli: RunCli, tmp_path: Path) -> None:
    with grpc_cluster(tmp_path) as cluster:
        create_topic(cluster, "Orders")
        with producer(cluster, ("Orders",)) as p:
            sent = p.send(message("Orders", b"five", tag="t", keys="k-5")).message_id
        env = {"NAMESRV_ADDR": cluster.namesrv_addr}
        for given in (sent, sent.lower()):
            found = cli("msg", "query", "--id", given, "-o", "json", env=env)
            assert found.code == 0, found.stderr
            row = json.loads(found.stdout)
            assert (row["found_by"], row["unique_key"], row["topic"]) == ("unique_key", sent, "Orders")
        wrong = cli("msg", "query", "--id", sent[:-2] + "ZZ", env=env)
        assert wrong.code == 2 and "hex" in wrong.stderr


def test_group_connections_and_producers_list_5x_clients(cli: RunCli, tmp_path: Path) -> None:
    with grpc_cluster(tmp_path) as cluster:
        create_topic(cluster, "Jobs")
        env = {"NAMESRV_ADDR": cluster.namesrv_addr}
        with producer(cluster, ("Jobs",)) as p, simple_consumer(cluster, "Workers", "Jobs", listed=True) as c:
            p.send(message("Jobs", b"x"))
            receive_all(c, 1)
            shown = cli("group", "connections", "-g", "Workers", "-o", "json", env=env)
            assert shown.code == 0, shown.stderr
            group = json.loads(shown.stdout)
            clients = group["clients"]
            assert len(clients) == 1, group
            assert clients[0]["language"] == "PYTHON" and clients[0]["version_name"] == "V5_1_2", clients
            assert group["consume_type"] == "CONSUME_ACTIVELY"  # a SimpleConsumer (5.x Proxy's naming)
            wait_for(lambda: joined(cluster, "Jobs", p.client_id, producer=True))  # (its Settings came)
            producers = cli("group", "producers", "-g", "Jobs", "-o", "json", env=env)
            assert producers.code == 0, producers.stderr
            assert "PYTHON" in producers.stdout


def test_bench_produce_and_consume_through_the_grpc_front(cli: RunCli, tmp_path: Path) -> None:
    with grpc_cluster(tmp_path) as cluster:
        create_topic(cluster, "BenchFive")
        env = {"NAMESRV_ADDR": cluster.namesrv_addr}
        produced = cli(
            "bench",
            "produce",
            "-t",
            "BenchFive",
            "--grpc",
            "--threads",
            "4",
            "--count",
            "60",
            "-o",
            "json",
            env=env,
        )
        assert produced.code == 0, produced.stderr
        assert (produced.json()["messages"], produced.json()["failures"]) == (60, 0)
        assert len(stored(cluster, "BenchFive")) == 60 and all(
            len(m.uniq_key or "") == 34 for m in stored(cluster, "BenchFive")
        )
        drained = cli(
            "bench",
            "consume",
            "-t",
            "BenchFive",
            "-g",
            "BenchG",
            "--grpc",
            "--count",
            "45",
            "--idle",
            "2",
            "-o",
            "json",
            env=env,
        )
        assert drained.code == 0, drained.stderr
        assert drained.json()["messages"] == 45  # exactly: each receive asks for no more than is left
        assert cluster.broker.pop.in_flight().get("BenchG", 0) == 0  # every one acked


def test_group_show_lists_its_5x_clients(cli: RunCli, tmp_path: Path) -> None:
    with grpc_cluster(tmp_path) as cluster:
        create_topic(cluster, "Jobs")
        env = {"NAMESRV_ADDR": cluster.namesrv_addr}
        with simple_consumer(cluster, "Workers", "Jobs", listed=True):
            shown = cli("group", "show", "-g", "Workers", "-o", "json", env=env)
            assert shown.code == 0, shown.stderr
            group = shown.json()
            assert group["online_clients"] == 1 and group["consume_type"] == "CONSUME_ACTIVELY"
            [client] = group["clients"]
            assert (client["language"], client["version_name"]) == ("PYTHON", "V5_1_2")
            table = cli("group", "show", "-g", "Workers", env=env)
            assert table.code == 0 and "V5_1_2" in table.stdout, table.stdout


def test_group_show_of_a_group_without_config_says_its_5x_clients_are_online(
    cli: RunCli, tmp_path: Path
) -> None:
    """A broker that creates no group on use still registers its consumers: 'not found' alone sent the
    operator looking for a typo while the group's clients were online."""
    with grpc_cluster(tmp_path, auto_create_subscription_group=False) as cluster:
        create_topic(cluster, "Jobs")
        env = {"NAMESRV_ADDR": cluster.namesrv_addr}
        with simple_consumer(cluster, "Workers", "Jobs", listed=True):
            shown = cli("group", "show", "-g", "Workers", env=env)
            assert shown.code == 3, shown.stderr
            assert "no subscription config on any master, yet 1 of its clients are online" in shown.stderr
            assert "mqctl group create -g Workers" in shown.stderr
        gone = cli("group", "show", "-g", "Workers", env=env)  # its client left: a group nowhere
        assert gone.code == 3 and "group 'Workers' not found" in gone.stderr, gone.stderr
