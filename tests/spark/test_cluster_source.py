"""``spark.read.format("rocketmq")`` over a running cluster: two broker groups, two topics of four queues
each, a few thousand messages with known bodies, read back through the shared local Spark session."""

from __future__ import annotations

import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from daemon.acl.signature import Signer
from daemon.broker.broker import Broker
from daemon.remoting.tls import write_local_ca
from mqctl.admin.client import Admin
from mqctl.auth import write_secret
from mqctl.errors import AuthError, NotFoundError, UsageError
from mqctl.spark.cluster import QueueRange, connection_of, plan_read, read_range, read_spec
from store.config import SLAVE
from tests.daemons import LocalCluster, local_cluster, tls_only
from tests.support.acl import ADMIN_AK, ADMIN_SK, write_acl
from tests.support.broker import replicated, start_broker
from tests.support.cluster_data import QUEUES, Sent, create_topics, send_known, sha

pytestmark = [pytest.mark.spark, pytest.mark.slow]

TOPICS = ("SparkSrcA", "SparkSrcB")
PER_QUEUE = 200  # 2 topics x 2 brokers x 4 queues: 3,200 messages
FILE = 1 << 20  # CommitLog files of 1 MiB: each broker's messages span three, so the file column varies


@dataclass
class Cluster:
    local: LocalCluster
    second: Broker
    sent: Sent = field(default_factory=dict)
    #: epoch ms between the first and the second half of every queue's messages
    middle_ms: int = 0

    @property
    def namesrv(self) -> str:
        return self.local.namesrv_addr

    @property
    def brokers(self) -> dict[str, Broker]:
        return {"broker-a": self.local.broker, "broker-b": self.second}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A NameServer with broker-a and broker-b (each its own group), both topics on both, every queue
    holding PER_QUEUE messages: the first half sent before ``middle_ms``, the second after."""
    root = tmp_path_factory.mktemp("cluster")
    with local_cluster(root / "a", mapped_file_size_commit_log=FILE) as local:
        second = local.loop.run(
            start_broker(
                root / "b",
                broker_name="broker-b",
                namesrv_addr=local.namesrv_addr,
                mapped_file_size_commit_log=FILE,
            )
        )
        try:
            c = Cluster(local, second)
            local.loop.run(create_topics(c.namesrv, [local.broker_addr, second.addr], TOPICS))
            local.loop.run(send_known(c.brokers, TOPICS, range(PER_QUEUE // 2), c.sent), timeout=120)
            time.sleep(0.05)
            c.middle_ms = int(time.time() * 1000)
            time.sleep(0.05)
            local.loop.run(
                send_known(c.brokers, TOPICS, range(PER_QUEUE // 2, PER_QUEUE), c.sent), timeout=120
            )
            yield c
        finally:
            local.loop.run(second.stop())


def read(spark: Any, options: dict[str, str]) -> list[dict[str, Any]]:
    """The rows of one ``rocketmq`` read, through Arrow."""
    reader = spark.read.format("rocketmq")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load().toArrow().to_pylist()


def keyed(rows: list[dict[str, Any]]) -> dict[tuple[str, str, int, int], str]:
    out = {(r["topic"], r["store_host"], r["queue_id"], r["queue_offset"]): sha(r["body"]) for r in rows}
    assert len(out) == len(rows), "a message was read twice"
    return out


def test_a_batch_read_returns_exactly_the_sent_messages(spark: Any, cluster: Cluster) -> None:
    rows = read(
        spark, {"namesrv": cluster.namesrv, "topic": ",".join(TOPICS), "maxMessagesPerPartition": "64"}
    )
    assert len(cluster.sent) == len(TOPICS) * 2 * QUEUES * PER_QUEUE
    assert keyed(rows) == cluster.sent
    per_queue = Counter((r["topic"], r["store_host"], r["queue_id"]) for r in rows)
    for (topic, host, queue), n in per_queue.items():
        offsets = sorted(
            r["queue_offset"]
            for r in rows
            if (r["topic"], r["store_host"], r["queue_id"]) == (topic, host, queue)
        )
        assert offsets == list(range(n)) and n == PER_QUEUE
    assert all(r["body_inflated_size"] is None and r["body_size"] == len(r["body"]) for r in rows)


def test_the_rows_are_the_store_exports_rows(spark: Any, cluster: Cluster, tmp_path: Path) -> None:
    """Every column, through Parquet both ways: the pulled records decode exactly as the CommitLog files do."""
    from mqctl.spark.export import export

    ours = tmp_path / "cluster"
    spark.read.format("rocketmq").option("namesrv", cluster.namesrv).option(
        "topic", ",".join(TOPICS)
    ).load().write.parquet(str(ours))
    got = pq.read_table(ours).to_pylist()
    theirs: list[dict[str, Any]] = []
    for name, broker in cluster.brokers.items():
        out = tmp_path / name
        export(spark, broker.config.store_path_root_dir, out, with_body=True, topics=TOPICS)
        theirs.extend(pq.read_table(out).to_pylist())

    def key(r: dict[str, Any]) -> tuple[str, int]:
        return r["store_host"], r["physical_offset"]

    assert len(got) == len(theirs) == len(cluster.sent)
    assert sorted(got, key=key) == sorted(theirs, key=key)
    assert pq.read_table(ours).schema == pq.read_table(tmp_path / "broker-a").schema
    assert len({r["file"] for r in got}) >= 3


def test_starting_offsets_by_timestamp_reads_what_was_stored_since(spark: Any, cluster: Cluster) -> None:
    rows = read(
        spark, {"namesrv": cluster.namesrv, "topic": TOPICS[0], "startingOffsets": str(cluster.middle_ms)}
    )
    expected = {k: v for k, v in cluster.sent.items() if k[0] == TOPICS[0] and k[3] >= PER_QUEUE // 2}
    assert keyed(rows) == expected
    assert min(r["store_timestamp"].timestamp() * 1000 for r in rows) >= cluster.middle_ms


def test_per_queue_json_offsets_bound_each_queue(spark: Any, cluster: Cluster) -> None:
    a, b = cluster.local.broker_addr, cluster.second.addr
    starting = f'{{"{TOPICS[1]}": {{"broker-a:0": 10, "broker-b:3": -1, "broker-b:1": -2}}}}'
    ending = f'{{"{TOPICS[1]}": {{"broker-a:0": 25, "broker-b:1": 7}}}}'
    rows = read(
        spark,
        {
            "namesrv": cluster.namesrv,
            "topic": TOPICS[1],
            "startingOffsets": starting,
            "endingOffsets": ending,
        },
    )

    def wanted(key: tuple[str, str, int, int]) -> bool:
        topic, host, queue, offset = key
        if topic != TOPICS[1] or (host, queue) == (b, 3):
            return False
        if (host, queue) == (a, 0):
            return 10 <= offset < 25
        if (host, queue) == (b, 1):
            return offset < 7
        return True

    assert keyed(rows) == {k: v for k, v in cluster.sent.items() if wanted(k)}


# ------------------------------------------------------------------------ planning, without Spark


def plan(cluster: Cluster, **options: str) -> list[QueueRange]:
    return plan_read(read_spec({"namesrv": cluster.namesrv, **options}))


def test_ranges_longer_than_the_limit_are_cut_and_cover_every_queue_once(cluster: Cluster) -> None:
    ranges = plan(cluster, topic=TOPICS[0], maxMessagesPerPartition="64")
    assert len(ranges) == 2 * QUEUES * 4  # 200 messages: 64 + 64 + 64 + 8
    by_queue: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for r in ranges:
        by_queue.setdefault((r.broker_name, r.queue_id), []).append((r.start, r.end))
        assert r.file_size == FILE  # what each broker says, for the file column
    assert all(spans == [(0, 64), (64, 128), (128, 192), (192, 200)] for spans in by_queue.values())
    assert {r.addrs for r in ranges} == {(cluster.local.broker_addr,), (cluster.second.addr,)}


def test_a_group_starts_at_its_committed_offsets(cluster: Cluster) -> None:
    """Where the broker answers an offset for the group; a 4.9.8 broker answers 0 for a queue the group
    never committed while the queue still starts at 0 (its clients start there too)."""

    async def commit() -> dict[tuple[str, int], int | None]:
        async with Admin([cluster.namesrv]) as admin:
            await admin.commit_offset(cluster.local.broker_addr, "SparkSrcGroup", TOPICS[0], 2, 150)
            return {
                (name, q): await admin.consumer_offset(broker.addr, "SparkSrcGroup", TOPICS[0], q)
                for name, broker in cluster.brokers.items()
                for q in range(QUEUES)
            }

    answered = cluster.local.loop.run(commit())
    assert answered[("broker-a", 2)] == 150
    ranges = plan(cluster, topic=TOPICS[0], group="SparkSrcGroup", startingOffsets="latest")
    starts = {(r.broker_name, r.queue_id): r.start for r in ranges}
    expected = {q: n for q, n in answered.items() if n is not None and n >= 0 and n < PER_QUEUE}
    assert starts == expected and starts[("broker-a", 2)] == 150
    assert all(r.end == PER_QUEUE for r in ranges)


def test_a_topic_pattern_matches_user_topics_only(cluster: Cluster) -> None:
    assert {r.topic for r in plan(cluster, topicPattern="SparkSrc.*")} == set(TOPICS)
    assert {r.topic for r in plan(cluster, topicPattern=".*")} == set(TOPICS)
    with pytest.raises(NotFoundError):
        plan(cluster, topicPattern="Nothing.*")


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"topic": TOPICS[0], "startingOffsets": '{"SparkSrcA": {"broker-c:0": 1}}'}, "broker-c:0"),
        ({"topic": TOPICS[0], "startingOffsets": '{"Other": {"broker-a:0": 1}}'}, "Other"),
        ({"topic": TOPICS[0], "endingOffsets": '{"SparkSrcA": {"broker-a:0": "x"}}'}, "BROKER:QUEUE"),
        ({"topic": "Sp.*"}, "topicPattern"),
        ({}, "topic or topicPattern"),
        ({"topic": TOPICS[0], "maxMessagesPerPartition": "0"}, "maxMessagesPerPartition"),
        ({"topic": TOPICS[0], "timeout": "soon"}, "timeout"),
        ({"topic": TOPICS[0], "startingOffsets": "yesterday"}, "yesterday"),
        ({"topic": TOPICS[0], "accessKey": "only-the-key"}, "secret"),
    ],
)
def test_bad_options_are_refused_before_any_read(
    cluster: Cluster, options: dict[str, str], says: str
) -> None:
    with pytest.raises(UsageError, match=says):
        plan(cluster, **options)


def test_a_context_names_the_namesrv_credentials_and_tls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mqctl.auth import write_secret
    from mqctl.config import ContextFile
    from mqctl.tls import TlsOptions

    monkeypatch.setenv("MQCTL_CONFIG_DIR", str(tmp_path))
    write_secret(tmp_path / "prod.secret", "prod-secret")
    contexts = ContextFile.load()
    contexts.add(
        "prod", "10.0.0.1:9876;10.0.0.2:9876", overwrite=False, access_key="prod-ak",
        secret_key_file=str(tmp_path / "prod.secret"), timeout=7.0, tls=TlsOptions(insecure=True),
    )  # fmt: skip
    contexts.save()
    conn = connection_of({"context": "prod"})
    assert conn.namesrv == ("10.0.0.1:9876", "10.0.0.2:9876") and conn.timeout == 7.0
    assert conn.credentials is not None and conn.credentials.secret_key == "prod-secret"
    assert conn.tls == TlsOptions(insecure=True)
    explicit = connection_of({"namesrv": "127.0.0.1:1", "accesskey": "a", "secretkey": "s", "tls": "true"})
    assert explicit.credentials is not None and explicit.credentials.access_key == "a"
    assert explicit.tls == TlsOptions()


def test_the_namesrv_option_is_mqctls_n_the_context_s_key_only_where_it_vouches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``namesrv`` ignored the context: no TLS, no credentials, its timeout neither. It is ``-n`` now:
    the context's TLS and timeout, and its key for its own NameServers or over its own CA's TLS only."""
    from mqctl.auth import write_secret
    from mqctl.config import ContextFile
    from mqctl.tls import TlsOptions

    monkeypatch.setenv("MQCTL_CONFIG_DIR", str(tmp_path))
    write_secret(tmp_path / "prod.secret", "prod-secret")
    contexts = ContextFile.load()
    plain = {"access_key": "prod-ak", "secret_key_file": str(tmp_path / "prod.secret"), "timeout": 7.0}
    contexts.add("prod", "10.0.0.1:9876;10.0.0.2:9876", overwrite=False, **plain)  # type: ignore[arg-type]
    ca = TlsOptions(ca=str(tmp_path / "ca.pem"))
    contexts.add("secure", "10.0.0.3:9876", overwrite=False, tls=ca, **plain)  # type: ignore[arg-type]
    contexts.save()
    own = connection_of({"namesrv": "10.0.0.2:9876"})
    assert own.namesrv == ("10.0.0.2:9876",) and own.timeout == 7.0
    assert own.credentials is not None and own.credentials.access_key == "prod-ak"
    assert "not signing" not in capsys.readouterr().err
    stranger = connection_of({"namesrv": "10.9.9.9:9876"})
    assert stranger.credentials is None and stranger.timeout == 7.0
    assert "not signing with context prod's access key prod-ak: 10.9.9.9:9876" in capsys.readouterr().err
    assert connection_of({"namesrv": "10.9.9.9:9876", "sign": "true"}).credentials is not None
    assert connection_of({"namesrv": "10.9.9.9:9876"}).credentials is None  # the option was that read's
    monkeypatch.setenv("MQCTL_NAMESRV", "10.9.9.9:9876")
    assert connection_of({}).credentials is None
    vouched = connection_of({"namesrv": "10.9.9.9:9876", "context": "secure"})
    assert vouched.tls == ca and vouched.credentials is not None
    monkeypatch.delenv("MQCTL_NAMESRV")
    (tmp_path / "contexts.json").unlink()  # a worker's next read, where no context is in force
    bare = connection_of({"namesrv": "10.9.9.9:9876"})
    assert bare.tls is None and bare.credentials is None and bare.timeout == 5.0


def test_a_missing_topic_is_not_found(cluster: Cluster) -> None:
    with pytest.raises(NotFoundError, match="NoSuchTopic"):
        plan(cluster, topic="NoSuchTopic")


# ----------------------------------------------------------------------------------------------- ACL

READER_AK, READER_SK = "sparkreader", "spark-secret-1"
ACL = f"""\
accounts:
  - accessKey: {READER_AK}
    secretKey: {READER_SK}
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - SparkAcl=SUB
  - accessKey: {ADMIN_AK}
    secretKey: {ADMIN_SK}
    admin: true
"""


def test_acl_the_right_secret_reads_and_a_wrong_one_is_refused(spark: Any, tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_acl(home, ACL)
    admin = Signer(ADMIN_AK, ADMIN_SK)
    with local_cluster(tmp_path, acl_enable=True, rocketmq_home=str(home)) as local:
        local.loop.run(create_topics(local.namesrv_addr, [local.broker_addr], ("SparkAcl",), admin))
        sent: Sent = {}
        local.loop.run(send_known({"broker-a": local.broker}, ("SparkAcl",), range(5), sent, admin))
        options = {"namesrv": local.namesrv_addr, "topic": "SparkAcl", "accessKey": READER_AK}
        rows = read(spark, {**options, "secretKey": READER_SK})
        assert keyed(rows) == sent
        with pytest.raises(Exception, match=f"signature check failed for accessKey={READER_AK}") as refused:
            read(spark, {**options, "secretKey": "not-the-secret"})
        assert READER_SK not in str(refused.value)


NO_TOOLS_GROUP = """\
  - accessKey: nogroup
    secretKey: nogroup-secret
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - SparkAcl=SUB
"""


def test_spark_export_reads_over_the_root_s_tls_and_key_and_shows_no_secret(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``mqctl --ca CA --access-key AK --secret-key SK spark-export --cluster``: the driver planned with
    the root's flags, and Spark's planning worker, which knows none, read in plaintext and unsigned. The
    tasks get what the driver resolved; the secret reaches them by an owner-only file, gone after."""
    from mqctl.cli.app import main

    certs = write_local_ca(tmp_path / "certs")
    server = tls_only(certs)
    write_acl(tmp_path / "home", ACL + NO_TOOLS_GROUP)
    private = tmp_path / "tmp"
    private.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    monkeypatch.setenv("MQCTL_CONFIG_DIR", str(tmp_path / "config"))
    with local_cluster(
        tmp_path, namesrv_overrides=server, tls_enable=True, tls_client_trust_cert_path=str(certs["ca"]),
        acl_enable=True, rocketmq_home=str(tmp_path / "home"), **server,
    ) as local:  # fmt: skip
        root = ["--ca", str(certs["ca"]), "-n", local.namesrv_addr]
        admin = [*root, "--access-key", ADMIN_AK, "--secret-key", ADMIN_SK]
        assert main([*admin, "topic", "create", "-t", "SparkAcl", "-r", "2", "-w", "2"]) == 0
        for i in range(3):
            assert main([*admin, "msg", "send", "-t", "SparkAcl", f"secure {i}"]) == 0
        capsys.readouterr()
        reader = [*root, "--access-key", READER_AK]
        secret = tmp_path / "reader.secret"
        write_secret(secret, READER_SK)
        for key in (["--secret-key", READER_SK], ["--secret-key-file", str(secret)]):
            out = tmp_path / f"out{len(key[1])}"
            code = main([*reader, *key, "spark-export", "--cluster", "-t", "SparkAcl", "--with-body",
                         "--out", str(out), "-o", "json"])  # fmt: skip
            shown = capsys.readouterr()
            assert code == 0, shown.err
            assert sorted(r["body"] for r in pq.read_table(out).to_pylist()) == [
                b"secure 0",
                b"secure 1",
                b"secure 2",
            ]
            assert READER_SK not in shown.out + shown.err
            assert list(private.iterdir()) == []  # the secret's file lived as long as the command
        # planned on the driver, refused in the tasks (no SUB on the tools group): the command's exit and
        # one line saying why, not exit 1 ("a bug") and the first line of a worker's traceback
        code = main([*root, "--access-key", "nogroup", "--secret-key", "nogroup-secret", "spark-export",
                     "--cluster", "-t", "SparkAcl", "--out", str(tmp_path / "refused")])  # fmt: skip
        refused = capsys.readouterr().err
        assert code == AuthError.exit_code, refused
        assert refused.count("\n") == 1 and "TOOLS_CONSUMER" in refused and "Traceback" not in refused


# ------------------------------------------------------------------------------- master down: slave


@pytest.fixture
def replicated_group(tmp_path: Path) -> Iterator[tuple[LocalCluster, Broker, Sent]]:
    """broker-a's master and its slave, a topic of four queues on it, every message on the slave too."""
    ha = {"ha_listen_port": 0, "ha_send_heartbeat_interval": 500, "mapped_file_size_commit_log": FILE}
    with local_cluster(tmp_path / "master", **ha) as local:
        slave = local.loop.run(
            start_broker(
                tmp_path / "slave", broker_id=1, broker_role=SLAVE, namesrv_addr=local.namesrv_addr, **ha
            )
        )
        try:
            sent: Sent = {}
            local.loop.run(create_topics(local.namesrv_addr, [local.broker_addr], ("SparkHa",)))
            local.loop.run(send_known({"broker-a": local.broker}, ("SparkHa",), range(60), sent))
            local.loop.run(replicated(local.broker, slave))
            yield local, slave, sent
        finally:
            local.loop.run(slave.stop())


def test_a_task_whose_master_stops_after_planning_reads_from_the_slave(
    replicated_group: tuple[LocalCluster, Broker, Sent],
) -> None:
    local, slave, sent = replicated_group
    spec = read_spec({"namesrv": local.namesrv_addr, "topic": "SparkHa", "maxMessagesPerPartition": "25"})
    ranges = plan_read(spec)
    assert {r.addrs for r in ranges} == {(local.broker_addr, slave.addr)}
    local.loop.run(local.broker.stop())
    rows = [
        row for r in ranges for b in read_range(r, spec.connection, with_body=True) for row in b.to_pylist()
    ]
    assert keyed(rows) == sent


def test_a_read_planned_while_the_master_is_down_completes_from_the_slave(
    spark: Any, replicated_group: tuple[LocalCluster, Broker, Sent]
) -> None:
    local, slave, sent = replicated_group
    local.loop.run(local.broker.stop())
    ranges = plan_read(read_spec({"namesrv": local.namesrv_addr, "topic": "SparkHa"}))
    assert {r.addrs for r in ranges} == {(slave.addr,)}
    assert keyed(read(spark, {"namesrv": local.namesrv_addr, "topic": "SparkHa"})) == sent


# ------------------------------------------------------------------------------ spark-export --cluster


def test_spark_export_cluster_writes_the_topics_messages_and_report_counts_them(
    spark: Any, cluster: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CLI over the source (in-process, on the shared session): the same rows as the data source,
    a window by store time, and the report's totals."""
    import json

    from mqctl.cli.app import main

    out = tmp_path / "out"
    args = ["spark-export", "--cluster", "-n", cluster.namesrv, "-t", TOPICS[0], "--with-body"]
    assert main([*args, "--out", str(out), "-o", "json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    rows = pq.read_table(out).to_pylist()
    assert keyed(rows) == {k: v for k, v in cluster.sent.items() if k[0] == TOPICS[0]}
    assert summary["rows"] == len(rows) and summary["data_bytes"] == sum(r["record_size"] for r in rows) > 0
    assert summary["store"] == f"cluster {cluster.namesrv}"
    since = ["--since", str(cluster.middle_ms)]
    assert main([*args, *since, "--out", str(tmp_path / "since")]) == 0
    later = pq.read_table(tmp_path / "since").to_pylist()
    assert keyed(later) == {
        k: v for k, v in cluster.sent.items() if k[0] == TOPICS[0] and k[3] >= PER_QUEUE // 2
    }
    capsys.readouterr()
    report = ["spark-export", "report", "--cluster", "-n", cluster.namesrv, "-o", "json"]
    assert main(report) == 0
    totals = json.loads(capsys.readouterr().out)["totals"]
    assert totals["records"] == len(cluster.sent)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--cluster", "--store", "{tmp}", "--out", "{tmp}/o"], "either --store DIR or --cluster"),
        (["--out", "{tmp}/o", "-n", "127.0.0.1:1"], "--store DIR (or --cluster)"),
        (["--cluster", "-n", "{ns}", "--out", "{tmp}/o", "--partitions", "3"], "--partitions is for --store"),
    ],
)
def test_spark_export_cluster_usage_errors(
    cluster: Cluster, tmp_path: Path, args: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from mqctl.cli.app import main

    (tmp_path / "commitlog").mkdir()
    filled = [a.replace("{tmp}", str(tmp_path)).replace("{ns}", cluster.namesrv) for a in args]
    assert main(["spark-export", *filled]) == 2
    assert says in capsys.readouterr().err
