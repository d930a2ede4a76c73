"""``mqctl bench``: the load generators against our real daemons (counts, not speed: speed lives in benchmarks/)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from daemon.remoting.frame import decode_frame
from mqctl.admin.client import Admin
from mqctl.errors import NotFoundError
from mqctl.services.bench import (
    BenchResult,
    Slot,
    Streams,
    close_streams,
    count_records,
    produce_slots,
    produce_to,
    send_frame,
    split_frame,
    topic_names,
)
from tests.daemons import LocalCluster, local_cluster
from tests.support.bounded import finish
from tests.support.cli import RunCli
from tests.support.paths import ROOT


@pytest.fixture(scope="module")
def daemons(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with local_cluster(tmp_path_factory.mktemp("bench")) as cluster:
        yield cluster


@pytest.mark.slow
def test_produce_over_several_topics_then_consume_them(cli: RunCli, daemons: LocalCluster) -> None:
    env = {"NAMESRV_ADDR": daemons.namesrv_addr}
    produced = cli(
        "bench",
        "produce",
        "-t",
        "BenchT",
        "--topics",
        "3",
        "--threads",
        "4",
        "--size",
        "128",
        "--count",
        "600",
        "-o",
        "json",
        env=env,
    )
    assert produced.code == 0, produced.stderr
    result = produced.json()
    assert result["messages"] == 600 and result["failures"] == 0 and result["tps"] > 0
    assert result["max_rt_ms"] >= result["avg_rt_ms"] > 0
    store = daemons.broker.store
    per_topic = [sum(store.get_max_offset(t, q) for q in range(4)) for t in topic_names("BenchT", 3)]
    assert per_topic == [200, 200, 200]

    drained = cli(
        "bench", "consume", "-t", "BenchT-1", "-g", "BenchG", "--idle", "0.5", "-o", "json", env=env
    ).json()
    assert drained["messages"] == 200 and drained["tps"] > 0
    assert [daemons.broker.offsets.query_offset("BenchG", "BenchT-1", q) for q in range(4)] == [
        50,
        50,
        50,
        50,
    ]
    again = cli(
        "bench", "consume", "-t", "BenchT-1", "-g", "BenchG", "--idle", "0.3", "-o", "json", env=env
    ).json()
    assert again["messages"] == 0


def test_topics_it_creates_get_the_asked_queue_count(cli: RunCli, daemons: LocalCluster) -> None:
    env = {"NAMESRV_ADDR": daemons.namesrv_addr}
    produced = cli(
        "bench", "produce", "-t", "Narrow", "--topics", "2", "-w", "2", "--count", "40", "-o", "json", env=env
    )
    assert produced.code == 0, produced.stderr
    topics = daemons.broker.topics
    assert [topics.get(t).write_queue_nums for t in topic_names("Narrow", 2)] == [2, 2]  # type: ignore[union-attr]
    assert [
        daemons.broker.store.get_max_offset(t, q) for t in topic_names("Narrow", 2) for q in range(2)
    ] == [10] * 4


def test_a_run_outlasts_a_reads_deadline(
    cli: RunCli, daemons: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bench run is a workload (its sends change the cluster), not a read: a --duration past a read's
    deadline (4 x --timeout here, its floor lowered) runs to its end, where a read would exit 6."""
    import mqctl.admin.client

    monkeypatch.setattr(mqctl.admin.client, "READ_DEADLINE_FLOOR", 0.0, raising=False)
    env = {"NAMESRV_ADDR": daemons.namesrv_addr}
    produced = cli(
        "bench", "produce", "-t", "Outlast", "--threads", "1", "--size", "16", "--duration", "5",
        "--timeout", "1", "-o", "json", env=env,
    )  # fmt: skip
    assert produced.code == 0, produced.stderr
    result = produced.json()
    assert result["messages"] > 0 and result["failures"] == 0
    consumed = cli(
        "bench", "consume", "-t", "Outlast", "-g", "OutlastG", "--idle", "5", "--timeout", "1", "-o", "json",
        env=env,
    )  # fmt: skip
    assert consumed.code == 0, consumed.stderr
    assert consumed.json()["messages"] == result["messages"]


def test_count_records_walks_total_sizes() -> None:
    from store.record import encode_blank

    assert count_records(b"") == 0
    assert count_records(encode_blank(40) + bytes(32) + encode_blank(60) + bytes(52)) == 2


@pytest.mark.slow
def test_percentiles_exact_count_and_duration(cli: RunCli, daemons: LocalCluster) -> None:
    env = {"NAMESRV_ADDR": daemons.namesrv_addr}
    produced = cli(
        "bench", "produce", "-t", "Pct", "--threads", "4", "--count", "300", "-o", "json", env=env
    ).json()
    assert produced["messages"] == 300
    assert (
        0 < produced["rt_p50_ms"] <= produced["rt_p90_ms"] <= produced["rt_p99_ms"] <= produced["rt_p999_ms"]
    )
    assert produced["rt_p999_ms"] <= produced["max_rt_ms"] and produced["interrupted"] is False
    drained = cli(
        "bench", "consume", "-t", "Pct", "-g", "PctG", "--count", "101", "--idle", "1", "-o", "json", env=env
    )
    assert drained.json()["messages"] == 101  # exactly, not a multiple of the pull batch
    assert sum(daemons.broker.offsets.query_offset("PctG", "Pct", q) for q in range(4)) == 101
    timed = cli(
        "bench",
        "produce",
        "-t",
        "Pct",
        "--threads",
        "2",
        "--duration",
        "1",
        "--rate",
        "50",
        "-o",
        "json",
        env=env,
    )
    result = timed.json()
    assert 0.9 <= result["seconds"] < 5 and 10 <= result["messages"] <= 80  # about 50/s for about 1 s


@pytest.mark.slow
def test_ctrl_c_keeps_the_statistics(cli_env: dict[str, str], daemons: LocalCluster) -> None:
    def stored() -> int:
        return sum(daemons.broker.store.get_max_offset("Pct", q) for q in range(4))

    before = stored()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mqctl",
            "bench",
            "produce",
            "-t",
            "Pct",
            "--duration",
            "60",
            "--rate",
            "100",
            "-o",
            "json",
        ],
        env={**cli_env, "NAMESRV_ADDR": daemons.namesrv_addr},
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while stored() == before and time.monotonic() < deadline:  # Ctrl-C once it is sending
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        out, err = finish(proc, 30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err  # interrupted, and says so...
    assert err.count("mqctl: error: interrupted") == 1
    result = json.loads(out)  # ...with the statistics of the run so far
    assert result["interrupted"] is True and result["messages"] > 0 and result["seconds"] < 30


def test_produce_slots_share_one_body_and_keep_each_frame_whole(daemons: LocalCluster) -> None:
    """Over 10,000 topics each send copies its slot's frame: the heads alone differ, so the body is one
    object (cached while sent again and again), and head + body is the frame ``send_frame`` encodes."""

    async def slots() -> list[Slot]:
        async with Admin([daemons.namesrv_addr]) as admin:
            while True:
                try:
                    return await produce_slots(admin, "BenchSlots", topics=3, size=64, queues=2)
                except NotFoundError:  # the broker registers its new topics
                    await asyncio.sleep(0.1)

    made = asyncio.run(slots())
    assert len(made) == 6 and len({id(body) for _, _, body, _ in made}) == 1
    # one address object per broker (each route answer decodes its own): a sender hashes and compares
    # a slot's address with its connections' on every send, and 10,000 copies would all be cold
    assert len({id(addr) for addr, _, _, _ in made}) == 1
    for _, head, body, signed in made:
        assert signed is None  # no ACL credentials: the key is written into the head
        decoded = decode_frame(head + body, 0)
        assert decoded is not None and decoded[0].body == body
        assert decoded[0].ext_fields["b"].startswith("BenchSlots-")  # (SEND_MESSAGE_V2: b is the topic)


def test_refused_sends_are_not_counted_as_sent_and_say_why(cli: RunCli, daemons: LocalCluster) -> None:
    """Sends the broker refused counted as messages: a bench whose every send an ACL refused printed
    "tps 6430.2" and exited 0. A refused send is a failure only; the first one's reason is kept, and
    with nothing accepted the run fails with it (exit 8 here, 9 for an ACL refusal)."""

    async def mixed() -> BenchResult:
        slots, oversized = await slots_and_oversized(daemons, "BenchRefused", topics=2)
        return await produce_to([slots[0], oversized], threads=1, count=4)

    partly = asyncio.run(mixed())
    assert (partly.messages, partly.failures) == (2, 2)
    assert partly.first_failure is not None and "(response code 13)" in partly.first_failure

    refused = cli("bench", "produce", "-t", "BenchRefused-1", "--size", str(5 << 20), "--count", "2",
                  env={"NAMESRV_ADDR": daemons.namesrv_addr})  # fmt: skip
    assert refused.code == 8 and refused.stdout == "", refused.stdout
    assert (
        refused.stderr.startswith("mqctl: error: 2 sends refused, the first to ")
        and "code 13" in refused.stderr
    )


def test_each_bench_message_has_its_own_client_id_that_msg_query_finds(
    cli: RunCli, daemons: LocalCluster
) -> None:
    """A bench message had no UNIQ_KEY: no client message id to query it by, unlike a real client's (the
    Java benchmark's messages have one each). Each send now writes its own key into its frame."""
    env = {"NAMESRV_ADDR": daemons.namesrv_addr}
    sent = cli("bench", "produce", "-t", "BenchKeys", "--threads", "2", "--count", "6", "-o", "json", env=env)
    assert sent.code == 0 and sent.json()["messages"] == 6, sent
    tail = cli("msg", "tail", "-t", "BenchKeys", "--from", "earliest", "--exit", "-o", "json", env=env)
    assert tail.code == 0, tail
    keys = [json.loads(line)["unique_key"] for line in tail.stdout.splitlines()]
    assert len(keys) == 6 and len(set(keys)) == 6
    assert all(len(k) == 32 and int(k, 16) >= 0 for k in keys)
    found = cli("msg", "query", "--id", keys[3], "-o", "json", env=env)
    assert found.code == 0, found
    [row] = found.json() if isinstance(found.json(), list) else [found.json()]
    assert (row["unique_key"], row["found_by"]) == (keys[3], "unique_key")


def test_pieces_go_on_round_the_slots_on_kept_connections(daemons: LocalCluster) -> None:
    """A benchmark timing short pieces (bench_broker_topics) passes each piece's start and one connection
    map per sender: each piece began at the first slot, so pieces shorter than the slots sent to the same
    few queues again and again, and each opened its senders' connections anew."""

    async def pieces() -> tuple[list[tuple[int, int]], bool, bool]:
        slots, oversized = await slots_and_oversized(daemons, "BenchPieces", topics=1)
        ring = [slots[0], slots[0], oversized]
        pool: list[Streams] = [{}]
        seen = []
        for start in range(3):
            piece = await produce_to(ring, threads=1, count=2, start=start, pool=pool)
            seen.append((piece.messages, piece.failures))
        writer_kept = pool[0][slots[0][0]][1]
        still_open = not writer_kept.is_closing()
        close_streams(pool[0])
        return seen, still_open, writer_kept.is_closing()

    seen, still_open, closed = asyncio.run(pieces())
    assert seen == [(2, 0), (1, 1), (1, 1)]  # slots 0 and 1, 1 and 2, 2 and 0
    assert still_open and closed


async def slots_and_oversized(daemons: LocalCluster, prefix: str, *, topics: int) -> tuple[list[Slot], Slot]:
    """``prefix``'s slots (one queue a topic, created and routed), and a slot of its first topic whose
    body is over maxMessageSize: a send to it is refused with code 13."""
    async with Admin([daemons.namesrv_addr]) as admin:
        while True:
            try:
                slots = await produce_slots(admin, prefix, topics=topics, size=64, queues=1)
                break
            except NotFoundError:  # the broker registers its new topics
                await asyncio.sleep(0.1)
    big = os.urandom(5 * 1024 * 1024)
    return slots, (slots[0][0], *split_frame(send_frame(f"{prefix}-0", 0, big), big), None)
