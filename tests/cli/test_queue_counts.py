"""Queue counts out of range (docs/operations.md §queue-counts): refused before anything is sent, and never
read queue by queue past the maximum when a broker reports more."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import cast

import pytest

from daemon.broker.bodies import MessageQueue, TopicOffset, TopicStatsTable
from daemon.remoting.bodies import BrokerData, QueueData, TopicConfig, TopicRouteData
from daemon.remoting.command import RemotingCommand
from mqctl.admin.client import Admin
from mqctl.errors import UsageError
from mqctl.services import metadata
from mqctl.services.messages import queues
from mqctl.services.topics import TopicSpec, topic_offsets
from store import MAX_HELD_QUEUE_NUMS, MAX_QUEUE_NUMS
from tests.support.cli import RunCli

#: Nothing listens there: a refusal said before connecting is all these runs can give.
NOWHERE = {"NAMESRV_ADDR": "127.0.0.1:9"}


def test_topic_commands_refuse_counts_out_of_range_before_sending(cli: RunCli, tmp_path: Path) -> None:
    listed = tmp_path / "t.yaml"
    listed.write_text("- {name: T, read_queues: -3}\n")
    metadata = tmp_path / "m.yaml"
    metadata.write_text("kind: mqctl-metadata\nversion: 1\ntopics:\n- {name: T, read_queues: 99999999999}\n")
    for args, why in (
        (("topic", "create", "-t", "T", "-r", "99999999999"), "read_queues 99999999999 is out of range"),
        (("topic", "update", "-t", "D1", "-w", "2147483648", "--yes"), "write_queues 2147483648 is out"),
        (("topic", "apply", "-f", str(listed), "--execute"), "read_queues -3 is out of range"),
        (("apply", "-f", str(metadata)), "read_queues 99999999999 is out of range"),
    ):
        refused = cli(*args, env=NOWHERE)
        assert refused.code == UsageError.exit_code, (args, refused.stderr)
        assert why in refused.stderr and len(refused.stderr.splitlines()) == 1, refused.stderr


class _Broker:
    """A broker that does not check counts: it reports read queues by the billion, written ones by eight."""

    def __init__(self) -> None:
        self.asked: list[int] = []

    async def topic_stats(self, addr: str, topic: str) -> TopicStatsTable:
        return TopicStatsTable({MessageQueue(topic, "b", q): TopicOffset(0, 1, 0) for q in range(8)})

    async def min_offset(self, addr: str, topic: str, queue_id: int) -> int:
        self.asked.append(queue_id)
        return 0

    async def max_offset(self, addr: str, topic: str, queue_id: int) -> int:
        return 0


async def test_a_broker_reporting_billions_of_queues_is_read_up_to_the_max(
    caplog: pytest.LogCaptureFixture,
) -> None:
    broker = _Broker()
    with caplog.at_level(logging.WARNING):
        stats = await topic_offsets(cast(Admin, broker), "b:1", "T", 99999999999)
    # (the most a broker holds, not creation's bound: a 4.9.8 topic of 20000 queues is read whole)
    assert len(stats.offset_table) == MAX_HELD_QUEUE_NUMS and max(broker.asked) == MAX_HELD_QUEUE_NUMS - 1
    assert "reports 99999999999 read queues of topic T" in caplog.text


def test_a_route_reporting_billions_of_queues_lists_at_most_the_max() -> None:
    route = TopicRouteData(
        queue_datas=[QueueData("b", 99999999999, 2147483648, 6, 0)],
        broker_datas=[BrokerData("c", "b", {0: "b:1"})],
    )
    assert len(queues(route, write=True)) == len(queues(route, write=False)) == MAX_HELD_QUEUE_NUMS


def test_a_count_of_zero_is_taken_as_4_9_8_takes_it(tmp_path: Path) -> None:
    """A topic whose writes were stopped with ``-w 0``: exported, its file is applied again, and a change of
    its perm alone sends the stored 0 back."""
    assert TopicSpec("Stopped", perm="r").apply_to(TopicConfig("Stopped", 8, 0)).write_queue_nums == 0
    assert TopicSpec("Stopped", read_queues=0, write_queues=0).write_queues == 0
    exported = tmp_path / "m.yaml"
    exported.write_text(
        "kind: mqctl-metadata\nversion: 1\ntopics:\n- {name: Stopped, read_queues: 8, write_queues: 0}\n"
    )
    [(spec, _)] = metadata.load(exported, lambda kind, name: None).topics
    assert (spec.read_queues, spec.write_queues) == (8, 0)
    with pytest.raises(UsageError, match="write_queues -1 is out of range: a topic has 0 to"):
        TopicSpec("T", write_queues=-1)
    with pytest.raises(UsageError, match="read_queues '8' is not a whole number"):
        TopicSpec("T", read_queues="8")  # type: ignore[arg-type]  (a topic apply file's string)


class _Masters:
    """Twenty empty masters that take every topic written to them."""

    def __init__(self) -> None:
        self.written: dict[str, dict[str, TopicConfig]] = {f"m{i}:1": {} for i in range(20)}

    async def topic_configs(self, addr: str) -> dict[str, TopicConfig]:
        return dict(self.written[addr])

    async def group_configs(self, addr: str) -> dict[str, object]:
        return {}

    async def call(self, addr: str, code: int) -> RemotingCommand:
        return RemotingCommand.request(code).make_response(0)

    async def create_topic(self, addr: str, config: TopicConfig, attributes: str | None = None) -> None:
        self.written[addr][config.topic_name] = config


async def test_a_cluster_export_is_checked_after_its_sums_are_divided(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mqadmin's cluster export sums each topic's counts over its masters: 1,024 queues on each of 20 is
    20,480 in the file, and a topic stopped with -w 0 sums to 0."""
    masters = _Masters()

    async def by_name(admin: Admin, cluster: str | None) -> tuple[str, dict[str, str]]:
        return "c", {f"b{i}": addr for i, addr in enumerate(masters.written)}

    monkeypatch.setattr(metadata, "masters_by_name", by_name)
    topics = {"Wide": (20480, 20480), "Stopped": (160, 0)}
    path = tmp_path / "export.json"

    def export(**more: tuple[int, int]) -> metadata.Metadata:
        table = {
            name: {"topicName": name, "readQueueNums": r, "writeQueueNums": w, "perm": 6}
            for name, (r, w) in {**topics, **more}.items()
        }
        path.write_text(json.dumps({"exportTime": 1, "topicConfigTable": table}))
        return metadata.load(path, lambda kind, name: None)

    meta = export()
    await metadata.apply(cast(Admin, masters), meta, cluster=None, renames={}, offsets=False, dry_run=False)
    for table in masters.written.values():
        assert (table["Wide"].read_queue_nums, table["Wide"].write_queue_nums) == (1024, 1024)
        assert (table["Stopped"].read_queue_nums, table["Stopped"].write_queue_nums) == (8, 0)
    # a sum still out of range once divided: refused before anything is written
    masters.written = {addr: {} for addr in masters.written}
    meta = export(Huge=(20 * MAX_QUEUE_NUMS + 1, 20))
    with pytest.raises(UsageError, match="read_queues 16385 is out of range"):
        await metadata.apply(
            cast(Admin, masters), meta, cluster=None, renames={}, offsets=False, dry_run=False
        )
    assert masters.written == {addr: {} for addr in masters.written}
