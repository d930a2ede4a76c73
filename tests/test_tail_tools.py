"""The busy tail's tools: ``bench_broker_tail --slices`` (arms of EEVDF slices on the broker's loop and the
benchmark's, in turn on one broker) and ``benchmarks/tools/pingpong.py`` (the scheduler's floor: two
trivial processes, the same chain of wake-ups, beside the same competitor)."""

from __future__ import annotations

import argparse
import sys

import pytest

from daemon.schedslice import SliceRefused, get_slice_ns
from tests.test_external_benchmarks import _script, _tail_module

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def _slices() -> bool:
    try:
        return get_slice_ns() > 0
    except SliceRefused:
        return False


def test_slice_arms_are_both_loops_or_broker_and_client() -> None:
    arms = _tail_module().slice_arms
    assert arms("0,100,250:0") == [(0, 0), (100, 100), (250, 0)]
    for bad in ("50", "100:x", "fast"):
        with pytest.raises(argparse.ArgumentTypeError):
            arms(bad)


@pytest.mark.slow
@pytest.mark.skipif(not _slices(), reason="no per-task EEVDF slice here (Linux 6.12+)")
def test_bench_broker_tail_runs_each_pair_of_rounds_once_per_arm() -> None:
    done = _script(
        "benchmarks/bench_broker_tail.py",
        *("--topics", "3", "--duration", "0.5", "--rate", "100", "--rounds", "1", "--slices", "0,100"),
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    rounds = [line.split(": p50")[0] for line in lines if line.startswith("round 1 ")]
    # quiet and busy of each arm, which goes first alternating, every message back
    assert rounds == [
        "round 1 slice 0:0 quiet",
        "round 1 slice 0:0 busy",
        "round 1 slice 100:100 busy",
        "round 1 slice 100:100 quiet",
    ]
    assert all("(50 msgs)" in line for line in lines if line.startswith("round 1 "))
    medians = [line for line in lines if line.startswith("median p99.9: ")]
    assert [m.split(" quiet")[0] for m in medians] == [
        "median p99.9: slice 0:0",
        "median p99.9: slice 100:100",
    ]
    assert lines[-1].startswith("bench_broker_tail: slice 0:0 p99.9 quiet ")


def test_bench_broker_tail_sets_no_slice_on_a_broker_it_did_not_start() -> None:
    done = _script(
        "benchmarks/bench_broker_tail.py",
        *("--namesrv", "127.0.0.1:1", "--broker", "127.0.0.1:2", "--broker-pid", "1", "--slices", "100"),
        timeout=60,
    )
    assert done.returncode == 2
    assert "--slices follow daemons this benchmark starts" in done.stderr


@pytest.mark.skipif(not _slices(), reason="no per-task EEVDF slice here (Linux 6.12+)")
def test_pingpong_runs_its_arms_quiet_and_busy() -> None:
    done = _script(
        "benchmarks/tools/pingpong.py",
        *("--rate", "200", "--seconds", "0.5", "--work-us", "20", "--rounds", "1", "--slices", "0,100"),
        *("--polls", "0,50"),
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    rounds = [line for line in lines if line.startswith("round 1 ")]
    assert len(rounds) == 8  # two slices by two polls, quiet and busy each
    # every arm's messages came back, each side woke and spent CPU on them
    assert all(" p99.9 " in line and "client " in line and "server " in line for line in rounds), rounds
    summaries = [line for line in lines if line.startswith("slice ")]
    assert [s.split(":")[0] for s in summaries] == [
        "slice 0 µs, poll 0 µs",
        "slice 0 µs, poll 50 µs",
        "slice 100 µs, poll 0 µs",
        "slice 100 µs, poll 50 µs",
    ]
    assert lines[-1].startswith("load ")
