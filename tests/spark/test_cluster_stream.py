"""``spark.readStream.format("rocketmq")``: a query writing Parquet with a checkpoint, its driver
SIGKILLed in the middle of a micro-batch and started again, while messages keep coming and a new topic
appears; then every message is in the output exactly once, and a message sent to the running query is
in a committed file within two trigger intervals. The offsets arithmetic is checked without Spark."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from mqctl.spark.cluster import QueueRange, read_spec
from mqctl.spark.stream import FROM, ClusterStreamReader, pack, rate_limit, starts_of
from tests.daemons import LocalCluster, local_cluster
from tests.support.cluster_data import Sent, create_topics, send_known, sha
from tests.support.spark_stream import Sink, log_tail, start

TRIGGER = 1.0  # seconds between micro-batches, as the issue asks; arrival is checked in batches, not seconds


def test_rate_limit_shares_the_limit_by_what_each_queue_has_waiting() -> None:
    starts = {"T": {"a:0": 0, "a:1": 100, "a:2": 5}}
    latest = {"T": {"a:0": 900, "a:1": 190, "a:2": 5}}
    assert rate_limit(starts, latest, 100) == {"T": {"a:0": 90, "a:1": 109, "a:2": 5}}
    assert rate_limit(starts, latest, 10_000) == latest
    # a queue with little waiting still gets one message, as Kafka's source does
    assert rate_limit({"T": {"a:0": 0, "a:1": 0}}, {"T": {"a:0": 1000, "a:1": 1}}, 10) == {
        "T": {"a:0": 9, "a:1": 1}
    }


def test_a_micro_batch_is_a_task_per_broker_group_of_at_most_max_messages() -> None:
    def r(broker: str, queue: int, n: int) -> QueueRange:
        return QueueRange("T", broker, queue, 0, n, (broker,), 1 << 30)

    ranges = [r("a", 0, 5), r("a", 1, 5), r("a", 2, 5), r("b", 0, 3), r("b", 1, 20)]
    assert [[(x.broker_name, x.queue_id) for x in p.ranges] for p in pack(ranges, 10)] == [
        [("a", 0), ("a", 1)], [("a", 2)], [("b", 0)], [("b", 1)],
    ]  # fmt: skip


def test_a_batch_starts_where_the_previous_ended_or_where_its_end_pinned_a_new_queue() -> None:
    start = {"T": {"a:0": 4}, FROM: {"T": {"a:0": 0}}}
    end = {"T": {"a:0": 9, "a:1": 3}, "U": {"b:0": 2}, FROM: {"T": {"a:1": 1}, "U": {"b:0": 0}}}
    assert starts_of(start, end) == {"T": {"a:0": 4, "a:1": 1}, "U": {"b:0": 0}}


@pytest.fixture(scope="module")
def one_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with local_cluster(tmp_path_factory.mktemp("stream")) as local:
        yield local


@pytest.mark.spark
def test_offsets_pin_the_first_start_and_follow_new_messages(one_broker: LocalCluster) -> None:
    """Without Spark: the first end pins startingOffsets under @from, a replayed first batch reads the
    pinned range however far the queues have moved, and a quiet cluster answers the start unchanged."""
    local = one_broker
    local.loop.run(create_topics(local.namesrv_addr, [local.broker_addr], ("StreamPin",)))
    sent: Sent = {}
    local.loop.run(send_known({"broker-a": local.broker}, ("StreamPin",), range(3), sent))
    spec = read_spec({"namesrv": local.namesrv_addr, "topic": "StreamPin"}, streaming=True)
    reader = ClusterStreamReader(spec, None)  # startingOffsets latest, a stream's default
    first = reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
    at_3 = {f"broker-a:{q}": 3 for q in range(4)}
    assert first == {"StreamPin": at_3, FROM: {"StreamPin": at_3}}
    assert reader.latestOffset(first, ReadAllAvailable()) == first  # nothing new: no batch
    earliest = read_spec(
        {"namesrv": local.namesrv_addr, "topic": "StreamPin", "startingOffsets": "earliest"}, streaming=True
    )
    from_zero = ClusterStreamReader(earliest, None).latestOffset({}, ReadAllAvailable())
    assert from_zero == {"StreamPin": at_3, FROM: {"StreamPin": {f"broker-a:{q}": 0 for q in range(4)}}}
    local.loop.run(send_known({"broker-a": local.broker}, ("StreamPin",), range(3, 5), sent))
    second = reader.latestOffset(first, ReadMaxRows(5))
    # 8 waiting, at most 5: 1.25 a queue, rounded down as Kafka's source does
    assert second == {"StreamPin": {f"broker-a:{q}": 4 for q in range(4)}}
    ranges = [r for p in reader.partitions(first, second) for r in p.ranges]
    assert sorted((r.queue_id, r.start, r.end) for r in ranges) == [(q, 3, 4) for q in range(4)]
    # a restarted driver replays a first batch from initialOffset() ({}) again: the pinned range still,
    # however far the queues (and "latest") have moved since
    replay = ClusterStreamReader(spec, None)
    assert replay.partitions(replay.initialOffset(), first) == []
    ranges = [r for p in replay.partitions({}, from_zero) for r in p.ranges]
    assert sorted((r.queue_id, r.start, r.end) for r in ranges) == [(q, 0, 3) for q in range(4)]


@pytest.mark.spark
def test_available_now_reads_up_to_what_was_stored_when_the_query_started(one_broker: LocalCluster) -> None:
    local = one_broker
    local.loop.run(create_topics(local.namesrv_addr, [local.broker_addr], ("StreamNow",)))
    sent: Sent = {}
    local.loop.run(send_known({"broker-a": local.broker}, ("StreamNow",), range(4), sent))
    options = {"namesrv": local.namesrv_addr, "topic": "StreamNow", "startingOffsets": "earliest"}
    reader = ClusterStreamReader(read_spec(options, streaming=True), 6)
    reader.prepareForTriggerAvailableNow()
    local.loop.run(send_known({"broker-a": local.broker}, ("StreamNow",), range(4, 6), sent))
    start: dict[str, Any] = reader.initialOffset()
    ends = []
    while (end := reader.latestOffset(start, reader.getDefaultReadLimit())) != start:
        ends.append(end["StreamNow"])
        start = end
    # at most 6 a batch: 1.5 a queue, rounded down; and not the 2 a queue sent after it started
    assert ends == [{f"broker-a:{q}": n for q in range(4)} for n in (1, 2, 3, 4)]


def test_endingoffsets_is_refused_for_a_stream() -> None:
    from mqctl.errors import UsageError

    with pytest.raises(UsageError, match="endingOffsets"):
        read_spec({"namesrv": "127.0.0.1:1", "topic": "T", "endingOffsets": "latest"}, streaming=True)


# ---------------------------------------------------------------------------------- a real query


class Sender:
    """Sends one message to every queue of every topic in ``topics`` each ``every`` seconds, in a thread."""

    def __init__(self, local: LocalCluster, topics: list[str], every: float = 0.2) -> None:
        self.local, self.topics, self.every = local, topics, every
        self.sent: Sent = {}
        self.rounds: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def one_round(self) -> None:
        for topic in list(self.topics):
            n = self.rounds.get(topic, 0)
            self.local.loop.run(
                send_known({"broker-a": self.local.broker}, (topic,), range(n, n + 1), self.sent)
            )
            self.rounds[topic] = n + 1

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.one_round()

    def __enter__(self) -> Sender:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


def batches(checkpoint: Path, log: str) -> set[int]:
    d = checkpoint / log
    return {int(p.name) for p in d.iterdir() if p.name.isdigit()} if d.is_dir() else set()


def wait_for(predicate: Any, timeout: float, what: str, why: Callable[[], str] = str) -> float:
    """Seconds until ``predicate()``; fails after ``timeout`` with ``why()`` (the driver's state and log)."""
    started = time.monotonic()
    while not predicate():
        assert time.monotonic() - started < timeout, f"not in {timeout} s: {what}; {why()}"
        time.sleep(0.02)
    return time.monotonic() - started


def kill(driver: Any) -> None:
    if driver.poll() is None:
        os.killpg(driver.pid, signal.SIGKILL)
    driver.wait(30)


def keys(sink: Sink) -> Counter[tuple[str, str, int, int]]:
    table = sink.poll()
    if table is None:
        return Counter()
    rows = table.select(["topic", "store_host", "queue_id", "queue_offset"]).to_pylist()
    return Counter((r["topic"], r["store_host"], r["queue_id"], r["queue_offset"]) for r in rows)


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_exactly_once_into_parquet_across_a_driver_sigkill(one_broker: LocalCluster, tmp_path: Path) -> None:
    from mqctl.spark.session import find_java

    if find_java() is None:
        pytest.skip("Spark needs Java")
    local = one_broker
    local.loop.run(create_topics(local.namesrv_addr, [local.broker_addr], ("StreamA",)))
    checkpoint, out = tmp_path / "checkpoint", tmp_path / "out"
    sink = Sink(out)
    topics = ["StreamA"]
    args = (local.namesrv_addr, "Stream[A-Z]", checkpoint, out, TRIGGER)
    options = {"startingOffsets": "earliest", "maxOffsetsPerTrigger": "1000"}
    with Sender(local, topics) as sender:
        driver = start(*args, **options)
        try:
            wait_for(
                lambda: len(batches(checkpoint, "commits")) >= 2,
                300,
                "two committed batches",
                lambda: log_tail(checkpoint, driver),
            )
            # SIGKILL while a batch is planned (its offsets written) and not committed
            mid = wait_for(
                lambda: batches(checkpoint, "offsets") - batches(checkpoint, "commits"),
                15,
                "a batch in flight",
                lambda: log_tail(checkpoint, driver),
            )
            kill(driver)
            in_flight = batches(checkpoint, "offsets") - batches(checkpoint, "commits")
            local.loop.run(create_topics(local.namesrv_addr, [local.broker_addr], ("StreamB",)))
            topics.append("StreamB")  # a new topic the pattern matches, while the driver is down
            driver = start(*args, **options)
            wait_for(
                lambda: bool(batches(checkpoint, "commits") & in_flight),
                240,
                "the replayed batch committed",
                lambda: log_tail(checkpoint, driver),
            )
        except BaseException:
            kill(driver)
            raise
    try:
        wait_for(lambda: set(keys(sink)) >= set(sender.sent), 120, "every message sent in the output")
        # a message sent now reaches a committed file within two trigger intervals: counted in micro-batches
        # (the one planned at the send may miss it, the next must take it), not in seconds on a shared host
        before, planned = set(sender.sent), max(batches(checkpoint, "offsets"))
        sender.one_round()
        fresh = set(sender.sent) - before
        wait_for(lambda: set(keys(sink)) >= fresh, 120, "the last message in the output")
        taken_by = max(batches(checkpoint, "offsets"))
    finally:
        kill(driver)
    seen = keys(sink)
    assert in_flight and mid >= 0
    assert {k for k, n in seen.items() if n > 1} == set()
    assert set(seen) == set(sender.sent)
    assert {k[0] for k in seen} == {"StreamA", "StreamB"}
    table = sink.poll()
    assert table is not None
    bodies = {
        (r["topic"], r["store_host"], r["queue_id"], r["queue_offset"]): sha(r["body"])
        for r in table.to_pylist()
    }
    assert bodies == sender.sent
    assert taken_by - planned <= 2, f"planned batch {planned} at the send, taken by batch {taken_by}"
