"""``offset reset`` against a group whose offsets a running mqctl command commits.

A committing command must be a live member of its group, so that a reset either reaches it
through the broker (which tells members to follow) or is refused naming it, never silently undone
by its next commit. Real daemons on 127.0.0.1; the consumer is a real ``mqctl bench consume``.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from daemon.broker.bodies import MessageQueue
from daemon.broker.headers import CreateTopicRequestHeader
from daemon.remoting.codes import RequestCode
from mqctl.admin.client import Admin
from mqctl.admin.member import GroupMember
from mqctl.errors import ConflictError, Interrupted
from tests.daemons import LocalCluster, handle, local_cluster
from tests.support.bounded import finish, read_line
from tests.support.cli import CliResult, RunCli
from tests.support.paths import ROOT
from tests.support.waiting import wait_for

TOPIC = "Replay"
PER_QUEUE = 5


@pytest.fixture(scope="module")
def daemons(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A topic with 2 queues of 5 messages each."""
    with local_cluster(tmp_path_factory.mktemp("members")) as cluster:
        wire = handle(cluster)

        async def fill() -> None:
            create = CreateTopicRequestHeader(TOPIC, "TBW102", 2, 2, 6, "SINGLE_TAG")
            assert (await wire.call(RequestCode.UPDATE_AND_CREATE_TOPIC, create.to_ext_fields())).code == 0
            for i in range(2 * PER_QUEUE):
                assert (await wire.send(TOPIC, f"m{i}".encode(), queue_id=i % 2)).code == 0
            await wire.client.close()

        cluster.loop.run(fill())
        yield cluster


def committed(cluster: LocalCluster, group: str) -> list[int]:
    return [cluster.broker.offsets.query_offset(group, TOPIC, q) for q in (0, 1)]


@pytest.fixture
def consumer(
    cli_env: dict[str, str], daemons: LocalCluster
) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """Start ``mqctl bench consume`` in the background; whatever is still running at teardown is killed."""
    started: list[subprocess.Popen[str]] = []

    def start(group: str, *args: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mqctl",
                "bench",
                "consume",
                "-t",
                TOPIC,
                "-g",
                group,
                "-o",
                "json",
                *args,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**cli_env, "NAMESRV_ADDR": daemons.namesrv_addr},
            cwd=ROOT,
        )
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.kill()  # a no-op once it exited
        finish(proc, 30)


def drained_as_member(daemons: LocalCluster, group: str) -> None:
    """Wait until the consumer is a member of ``group`` and the broker holds it at the end of both queues."""
    wait_for(
        lambda: (
            daemons.broker.consumers.get(group) is not None and committed(daemons, group) == [PER_QUEUE] * 2
        ),
        f"bench consume to join {group} and drain {TOPIC}",
    )


@pytest.mark.slow
def reset_to_earliest(cli: RunCli, group: str, env: dict[str, str]) -> CliResult:
    """``offset reset --to-earliest --execute`` while the group's member runs: the broker tells it to follow."""
    reset = cli(
        "offset",
        "reset",
        "-g",
        group,
        "-t",
        TOPIC,
        "--to-earliest",
        "--execute",
        "--yes",
        "-o",
        "json",
        env=env,
    )
    assert reset.code == 0, reset.stderr
    assert "told to follow" in reset.json()["applied"]
    return reset


@pytest.mark.slow
def test_time_reset_reaches_a_running_consumer(cli: RunCli, daemons: LocalCluster, consumer: Any) -> None:
    group = "CG_Follow"
    env = {"NAMESRV_ADDR": daemons.namesrv_addr}
    proc = consumer(
        group, "--count", str(4 * PER_QUEUE), "--idle", "60"
    )  # ends once it has read everything twice
    drained_as_member(daemons, group)

    connections = cli("group", "connections", "-g", group, "-o", "json", env=env)
    assert connections.code == 0, connections.stderr
    [client] = connections.json()["clients"]
    assert client["client_id"].endswith(f"@mqctl-{proc.pid}") and client["addr"].startswith("127.0.0.1:")

    reset = reset_to_earliest(cli, group, env)
    assert [q["new"] for q in reset.json()["queues"]] == [0, 0]

    out, err = finish(proc, 30)
    assert proc.returncode == 0, err
    assert json.loads(out)["messages"] == 4 * PER_QUEUE  # it read the topic again from the reset point
    assert committed(daemons, group) == [PER_QUEUE] * 2  # and committed where it really stopped
    assert daemons.broker.consumers.get(group) is None  # it left the group on exit


@pytest.mark.slow
def test_per_queue_reset_is_refused_while_a_consumer_runs(
    cli: RunCli, daemons: LocalCluster, consumer: Any
) -> None:
    group = "CG_Busy"
    env = {"NAMESRV_ADDR": daemons.namesrv_addr}
    proc = consumer(group, "--idle", "60")
    drained_as_member(daemons, group)

    refused = cli(
        "offset", "reset", "-g", group, "-t", TOPIC, "--to-offset", "1", "--execute", "--yes", env=env
    )
    assert refused.code == ConflictError.exit_code
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mqctl: error: ")
    assert f"@mqctl-{proc.pid} (127.0.0.1:" in lines[0]
    assert committed(daemons, group) == [PER_QUEUE] * 2

    proc.send_signal(signal.SIGINT)  # Ctrl-C: it still commits where it stopped and leaves the group
    _, err = finish(proc, 30)
    assert proc.returncode == Interrupted.exit_code, err
    assert committed(daemons, group) == [PER_QUEUE] * 2
    assert daemons.broker.consumers.get(group) is None


def test_a_member_adopts_a_reset_and_commits_it_not_its_old_offsets(daemons: LocalCluster) -> None:
    group = "CG_Adopt"
    addr = daemons.broker_addr
    name = daemons.broker.config.broker_name
    queues = [MessageQueue(TOPIC, name, q) for q in (0, 1)]

    async def scenario() -> None:
        async with (
            Admin([daemons.namesrv_addr]) as admin,
            Admin([daemons.namesrv_addr]) as operator,
            GroupMember(admin, group, TOPIC, {name: addr}) as member,
        ):
            member.offsets.update(dict.fromkeys(queues, PER_QUEUE))
            await member.commit(member.offsets)
            applied = await operator.reset_offset_by_time(addr, TOPIC, group, 0)
            assert applied == dict.fromkeys(queues, 0)
            async with asyncio.timeout(10):
                while not member.resets:
                    await asyncio.sleep(0.01)
            assert member.offsets == dict.fromkeys(queues, 0)
            member.advance(queues[0], PER_QUEUE, PER_QUEUE + 3)  # a pull begun before the reset ends
            assert member.offsets[queues[0]] == 0

    daemons.loop.run(scenario())
    assert committed(daemons, group) == [0, 0]
    assert daemons.broker.consumers.get(group) is None


@pytest.mark.slow
def test_tail_of_a_group_is_a_member_that_follows_a_reset_and_commits_nothing_itself(
    cli: RunCli, cli_env: dict[str, str], daemons: LocalCluster
) -> None:
    group = "CG_Tail"
    env = {"NAMESRV_ADDR": daemons.namesrv_addr}

    async def commit_one() -> None:  # the group's consumers have read one message of each queue
        async with Admin([daemons.namesrv_addr]) as admin:
            for q in (0, 1):
                await admin.commit_offset(daemons.broker_addr, group, TOPIC, q, 1)

    daemons.loop.run(commit_one())
    proc = subprocess.Popen(
        [sys.executable, "-m", "mqctl", "msg", "tail", "-t", TOPIC, "-g", group, "-o", "json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**cli_env, **env},
        cwd=ROOT,
    )
    try:
        first = [json.loads(read_line(proc)) for _ in range(2 * (PER_QUEUE - 1))]
        assert sorted(m["queue_offset"] for m in first) == sorted(list(range(1, PER_QUEUE)) * 2)  # committed
        wait_for(lambda: daemons.broker.consumers.get(group) is not None, "msg tail -g to join its group")
        connections = cli("group", "connections", "-g", group, "-o", "json", env=env)
        assert connections.code == 0, connections.stderr
        [client] = connections.json()["clients"]
        assert client["client_id"].endswith(f"@mqctl-{proc.pid}")

        reset_to_earliest(cli, group, env)
        again = [json.loads(read_line(proc)) for _ in range(2 * PER_QUEUE)]  # from 0
        assert sorted(m["queue_offset"] for m in again) == sorted(list(range(PER_QUEUE)) * 2)
        assert committed(daemons, group) == [0, 0]  # the reset is committed; where tail read to is not
    finally:
        proc.send_signal(signal.SIGINT)
        finish(proc, 30)
    assert committed(daemons, group) == [0, 0]
    wait_for(lambda: daemons.broker.consumers.get(group) is None, "msg tail -g to leave its group")


@pytest.mark.slow
def test_a_live_member_that_never_committed_is_reset_and_so_is_a_time_plan_file(
    cli: RunCli, cli_env: dict[str, str], daemons: LocalCluster, tmp_path: Any
) -> None:
    """'msg tail -g' is a live member that commits nothing: the broker alone answers a reset with 'the
    consumer group does not exist' (4.9.8's Broker2Client#resetOffset wants a committed offset), so the
    plan's offsets are committed first. A --to-time plan file applies to live members as --to-time does."""
    from tests.support.cli import spawn

    group = "CG_NeverCommitted"
    env = {"NAMESRV_ADDR": daemons.namesrv_addr}
    tail = spawn(cli_env, "msg", "tail", "-t", TOPIC, "-g", group, "--from", "latest", "-o", "json", env=env)
    try:
        wait_for(lambda: daemons.broker.consumers.get(group) is not None, "msg tail -g to join its group")
        assert committed(daemons, group) == [-1, -1]
        reset_to_earliest(cli, group, env)
        assert committed(daemons, group) == [0, 0]

        def reset(*args: str) -> CliResult:
            return cli("offset", "reset", "-g", group, "-t", TOPIC, *args, env=env)

        plan = tmp_path / "plan.json"
        an_hour_ahead = str(int(time.time() * 1000) + 3_600_000)
        exported = reset("--to-time", an_hour_ahead, "--export", str(plan))
        assert exported.code == 0, exported.stderr
        applied = reset("--from-file", str(plan), "--execute", "--yes", "-o", "json")
        assert applied.code == 0, applied.stderr
        assert "told to follow" in applied.json()["applied"]
        planned = [q["new"] for q in applied.json()["queues"]]
        assert planned != [0, 0]  # the time is after every message: the plan moves the group forward
        wait_for(lambda: committed(daemons, group) == planned, "the time plan to be committed")
    finally:
        tail.send_signal(signal.SIGINT)
        finish(tail, 30)
