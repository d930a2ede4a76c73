"""The benchmarks that measure a broker they did not start (a real RocketMQ 4.9.8 one, say): run here
against our own NameServer and broker, living in this test's process, as the external cluster.
``bench_broker_tail --namesrv --broker --broker-pid`` and ``benchmarks/tools/produce_external.py``."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.daemons import LocalCluster, local_cluster
from tests.support.paths import ROOT, script_module

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def _script(*argv: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


def _topic_exists(cluster: LocalCluster, topic: str) -> bool:
    return cluster.broker.topics.get(topic) is not None


def test_bench_broker_tail_runs_its_rounds_on_a_broker_it_did_not_start(tmp_path: Path) -> None:
    with local_cluster(tmp_path) as cluster:
        done = _script(
            "benchmarks/bench_broker_tail.py",
            "--namesrv",
            cluster.namesrv_addr,
            "--broker",
            cluster.broker_addr,
            "--broker-pid",
            str(os.getpid()),
            "--topics",
            "3",
            "--duration",
            "0.5",
            "--rate",
            "100",
            "--rounds",
            "1",
        )
        assert done.returncode == 0, done.stderr
        # the fill's topics and each round's were created on this broker (no other was started), the
        # rounds' named for this run: a later run's consumers do not read this one's messages
        rounds_topics = sorted(t for t in cluster.broker.topics.names() if t.startswith("TailBench"))
        assert len(rounds_topics) == 2 and rounds_topics[0].endswith("x00mqctlbusy"), rounds_topics
        assert rounds_topics[1] == rounds_topics[0].replace("busy", "quiet")
        assert _topic_exists(cluster, "TailMany-2")
    lines = done.stdout.splitlines()
    assert lines[0].startswith("3 topics created")
    rounds = [line for line in lines if line.startswith("round 1 ")]
    assert len(rounds) == 2
    # every message after the 2 s warm-up came back (0.5 s at 100 msgs/s), and the broker is counted as a
    # whole process
    assert all("(50 msgs)" in line for line in rounds), rounds
    assert sum("per message: broker process " in line for line in lines) == 2
    assert lines[-1].startswith("bench_broker_tail: p99.9 quiet ")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--namesrv", "127.0.0.1:1", "--broker", "127.0.0.1:2"], "go together"),
        (
            ["--namesrv", "127.0.0.1:1", "--broker", "127.0.0.1:2", "--broker-pid", "1", "--timeline", "t"],
            "follow daemons this benchmark starts",
        ),
    ],
)
def test_bench_broker_tail_refuses_a_half_named_external_broker(args: list[str], says: str) -> None:
    done = _script("benchmarks/bench_broker_tail.py", *args, timeout=60)
    assert done.returncode == 2
    assert says in done.stderr


def test_produce_external_alternates_the_sides_and_counts_their_processes(tmp_path: Path) -> None:
    with local_cluster(tmp_path) as cluster:
        addr = cluster.broker_addr
        me = os.getpid()
        done = _script(
            "benchmarks/tools/produce_external.py",
            "--side",
            f"a={addr}@{me}",
            "--side",
            f"b={addr}@{me},{me}",
            "--seconds",
            "0.5",
            "--producers",
            "2",
            "--rounds",
            "2",
        )
        assert done.returncode == 0, done.stderr
        assert _topic_exists(cluster, "BenchTopic")
        stored = sum(cluster.broker.store.get_max_offset("BenchTopic", q) for q in range(4))
    lines = done.stdout.splitlines()
    # round 0 runs a then b, round 1 b then a
    assert [line.split(":")[1].strip() for line in lines[:4]] == ["a", "b", "b", "a"]
    assert all(" 0 failures, CPU per send " in line for line in lines[:4])
    # side b counts the same process twice: each round's CPU printed for both pids
    assert "µs (" in lines[1] and "µs (" not in lines[0]
    assert lines[4].startswith("a: median ") and lines[4].endswith("100% of a")
    assert lines[5].startswith("b: median ")
    assert stored > 0


def test_produce_external_names_a_bad_side() -> None:
    done = _script("benchmarks/tools/produce_external.py", "--side", "single=127.0.0.1", timeout=60)
    assert done.returncode == 2
    assert "a side is NAME=HOST:PORT[@PID,PID...]" in done.stderr


def _tail_module() -> ModuleType:
    for folder in ("benchmarks", "benchmarks/tools"):  # as when run as a script: its harness beside it
        if str(ROOT / folder) not in sys.path:
            sys.path.insert(0, str(ROOT / folder))
    return script_module("benchmarks/bench_broker_tail.py")


class _Behind:
    """An Admin whose broker reports ``dispatchBehindBytes`` from ``reports`` in turn, then "0"."""

    def __init__(self, reports: list[dict[str, str]]) -> None:
        self.reports = reports
        self.asked = 0

    def __call__(self, namesrvs: list[str]) -> _Behind:
        return self

    async def __aenter__(self) -> _Behind:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def broker_runtime_info(self, addr: str) -> dict[str, str]:
        self.asked += 1
        return self.reports.pop(0) if self.reports else {"dispatchBehindBytes": "0"}


@pytest.mark.parametrize(
    ("reports", "asked"),
    [
        # a 4.9.8 broker still dispatching the fill: asked until it has caught up
        ([{"dispatchBehindBytes": "1048576"}, {"dispatchBehindBytes": "2048"}], 3),
        # ours (dispatches in the put), or a broker that does not report it: one look
        ([{}], 1),
    ],
)
def test_the_rounds_wait_for_the_fill_to_be_dispatched(
    monkeypatch: pytest.MonkeyPatch, reports: list[dict[str, str]], asked: int
) -> None:
    tail = _tail_module()
    admin = _Behind(reports)
    monkeypatch.setattr(tail, "Admin", admin)
    asyncio.run(tail.dispatched("127.0.0.1:1", "127.0.0.1:2", poll=0.01))
    assert admin.asked == asked
