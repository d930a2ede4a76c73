"""``mqctl cluster`` and ``mqctl topic`` against our real NameServer and Broker over TCP."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from daemon.remoting.client import RemotingClient
from mqctl.errors import ConflictError, ConnectError, NotFoundError, UsageError
from tests.daemons import LocalCluster, local_cluster
from tests.support.bounded import finish, read_line
from tests.support.cli import RunCli, spawn
from tests.support.namesrv import Namesrv
from tests.support.ports import free_port


@pytest.fixture(scope="module")
def daemons(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with local_cluster(tmp_path_factory.mktemp("cluster")) as cluster:
        yield cluster


@pytest.fixture
def mq(cli: RunCli, daemons: LocalCluster) -> RunCli:
    """``mqctl`` pointed at the local cluster through $NAMESRV_ADDR, as an operator would."""

    def run(*args: str, **kwargs: object) -> object:
        env = {"NAMESRV_ADDR": daemons.namesrv_addr, **kwargs.pop("env", {})}  # type: ignore[dict-item]
        return cli(*args, env=env, **kwargs)

    return run  # type: ignore[return-value]


def test_cluster_list_and_status(mq: RunCli, daemons: LocalCluster) -> None:
    listed = mq("cluster", "list", "-o", "json").json()
    assert listed == [
        {
            "cluster": daemons.broker.config.broker_cluster_name,
            "broker_name": "broker-a",
            "broker_id": 0,
            "addr": daemons.broker_addr,
            "role": "MASTER",
        }
    ]
    status = mq("cluster", "status", "-o", "json").json()
    assert status[0]["addr"] == daemons.broker_addr
    assert status[0]["error"] is None
    assert status[0]["version"] == "V4_9_8"
    assert isinstance(status[0]["commitlog_max_offset"], int)
    assert status[0]["broker_role"] == "ASYNC_MASTER" and status[0]["ha_lag_bytes"] is None


def test_a_cluster_the_namesrv_does_not_list_is_not_found(mq: RunCli, daemons: LocalCluster) -> None:
    """``-c`` with a typo printed an empty table and exited 0 (group list, cluster status, timer ls, ...):
    it is not found, and the error names the clusters there are. The health check still calls it CRITICAL."""
    cluster = daemons.broker.config.broker_cluster_name
    for args in (
        ["cluster", "list"],
        ["cluster", "status"],
        ["group", "list"],
        ["timer", "ls"],
        ["topic", "list"],
    ):
        result = mq(*args, "-c", "NoSuchCluster")
        assert result.code == NotFoundError.exit_code, (args, result.stdout, result.stderr)
        assert f"cluster 'NoSuchCluster' not found (the NameServer lists: {cluster})" in result.stderr
    assert mq("check", "cluster", "-c", "NoSuchCluster").code == 2  # CRITICAL: no broker registered


def test_topic_list_hides_system_topics_as_group_list_hides_system_groups(
    mq: RunCli, daemons: LocalCluster
) -> None:
    """``topic list`` listed TBW102, SCHEDULE_TOPIC_XXXX, the cluster's and broker's own topics and every
    group's %RETRY% and %DLQ% topic among the operator's; ``group list`` hides its system groups. Both
    hide them now (JSON too); --system lists every topic with its kind."""
    created = mq("topic", "create", "-t", "Listed")
    assert created.code == 0, created.stderr

    async def group_topics() -> None:
        for name in ("%RETRY%ListedG", "%DLQ%ListedG"):
            daemons.broker.topics.create_system_like(name, 1, 6)
        await daemons.broker.register_all()

    daemons.loop.run(group_topics())
    cluster = daemons.broker.config.broker_cluster_name
    kinds = {row["topic"]: row["kind"] for row in mq("topic", "list", "--system", "-o", "json").json()}
    assert kinds["Listed"] == "normal" and (kinds["%RETRY%ListedG"], kinds["%DLQ%ListedG"]) == (
        "retry",
        "dlq",
    )
    system = ["TBW102", "SCHEDULE_TOPIC_XXXX", "SELF_TEST_TOPIC", "BenchmarkTest", "OFFSET_MOVED_EVENT"]
    system += ["broker-a", cluster, f"{cluster}_REPLY_TOPIC"]
    assert {kinds[name] for name in system} == {"system"}, kinds
    listed = mq("topic", "list", "-o", "json")
    assert listed.code == 0 and listed.stderr == "", listed.stderr
    assert listed.json() == [{"topic": t} for t, kind in kinds.items() if kind == "normal"]
    assert "Listed" in mq("topic", "list").stdout  # off a terminal: no footer
    assert "hidden" not in mq("topic", "list").stdout


def test_topic_lifecycle(mq: RunCli, daemons: LocalCluster) -> None:
    created = mq("topic", "create", "-t", "Orders", "-r", "4", "-w", "4", "-o", "json")
    assert created.code == 0, created.stderr
    body = created.json()
    assert body["brokers"] == [
        {
            "broker": daemons.broker_addr,
            "action": "created",
            "changes": {
                "read_queues": [None, 4],
                "write_queues": [None, 4],
                "perm": [None, "rw"],
                "order": [None, False],
            },
        }
    ]
    config = daemons.broker.topics.get("Orders")
    assert config is not None and config.read_queue_nums == 4 and config.write_queue_nums == 4

    again = mq("topic", "create", "-t", "Orders")
    assert again.code == ConflictError.exit_code and "already exists" in again.stderr
    soft = mq("topic", "create", "-t", "Orders", "--if-not-exists", "-o", "json")
    assert soft.code == 0 and soft.json()["action"] == "exists"

    updated = mq("topic", "update", "-t", "Orders", "-w", "2", "-o", "json").json()
    assert updated["brokers"][0]["changes"] == {"write_queues": [4, 2]}
    assert daemons.broker.topics.get("Orders").write_queue_nums == 2

    route = mq("topic", "route", "-t", "Orders", "-o", "json").json()
    assert route == [
        {
            "broker_name": "broker-a",
            "read_queues": 4,
            "write_queues": 2,
            "perm": "rw",
            "master": daemons.broker_addr,
            "slaves": [],
        }
    ]
    assert {"topic": "Orders"} in mq("topic", "list", "-o", "json").json()
    assert {"topic": "Orders"} in mq("topic", "list", "-c", "DefaultCluster", "-o", "json").json()

    status = mq("topic", "status", "-t", "Orders", "-o", "json").json()
    # every queue consumers read (4 read queues), not only the write queues GET_TOPIC_STATS_INFO answers for
    assert [row["queue_id"] for row in status] == [0, 1, 2, 3]
    assert all(row["messages"] == 0 for row in status)

    refused = mq("topic", "delete", "-t", "Orders")
    assert refused.code == UsageError.exit_code and "--yes" in refused.stderr
    assert daemons.broker.topics.get("Orders") is not None
    deleted = mq("topic", "delete", "-t", "Orders", "--yes", "-o", "json").json()
    assert deleted == {"topic": "Orders", "action": "deleted", "brokers": [daemons.broker_addr]}
    assert daemons.broker.topics.get("Orders") is None
    assert mq("topic", "route", "-t", "Orders").code == NotFoundError.exit_code
    assert (
        mq("topic", "delete", "-t", "Orders", "--yes", "--if-exists", "-o", "json").json()["action"]
        == "missing"
    )


def test_deleting_a_missing_topic_says_so_before_asking(mq: RunCli) -> None:
    """mqadmin deleteTopic's question comes after the route lookup: a topic no NameServer routes is one
    line and exit 3, not a question (off a terminal: 'pass --yes') about deleting it."""
    missing = mq("topic", "delete", "-t", "NoSuchTopic")
    assert missing.code == NotFoundError.exit_code, missing.stderr
    assert "NoSuchTopic" in missing.stderr and "--yes" not in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1


def test_write_queues_beyond_the_read_queues_are_warned_of(mq: RunCli, daemons: LocalCluster) -> None:
    """Producers send to every write queue and consumers read the read queues: -w above -r leaves the queues
    between them unread. mqadmin updateTopic says nothing; the message of a sent order then waits for no one."""
    created = mq("topic", "create", "-t", "Skewed", "-r", "2", "-w", "4", "-o", "json")
    assert created.code == 0, created.stderr
    assert created.json()["unread_queues"] == [f"{daemons.broker_addr}: queues 2..3"]
    assert f"mqctl: warning: {daemons.broker_addr}: queues 2..3 take messages that no consumer reads" in (
        created.stderr
    )
    evened = mq("topic", "update", "-t", "Skewed", "-r", "4", "-o", "json")
    assert evened.code == 0 and "unread_queues" not in evened.json() and "warning" not in evened.stderr
    scaled_out = mq("topic", "update", "-t", "Skewed", "-w", "6")  # a scale-out that forgot -r
    assert scaled_out.code == 0 and "queues 4..5 take messages" in scaled_out.stderr
    perm_only = mq("topic", "update", "-t", "Skewed", "--perm", "r", "-o", "json")  # no queue count changed
    assert perm_only.code == 0 and "warning" not in perm_only.stderr


def test_update_missing_topic(mq: RunCli) -> None:
    assert mq("topic", "update", "-t", "Nope", "-w", "2").code == NotFoundError.exit_code
    assert (
        mq("topic", "update", "-t", "Nope", "-w", "2", "--if-exists", "-o", "json").json()["action"]
        == "missing"
    )


def test_apply_is_idempotent(mq: RunCli, daemons: LocalCluster, tmp_path: Path) -> None:
    spec = tmp_path / "topics.yaml"
    spec.write_text("topics:\n  - {name: A1, read_queues: 2, write_queues: 2}\n  - {name: A2, perm: r}\n")
    first = mq("topic", "apply", "-f", str(spec), "--execute", "-o", "json").json()
    assert [(row["topic"], row["action"]) for row in first] == [("A1", "created"), ("A2", "created")]
    assert daemons.broker.topics.get("A2").perm == 4
    second = mq("topic", "apply", "-f", str(spec), "--execute", "-o", "json").json()
    assert [row["action"] for row in second] == ["unchanged", "unchanged"]
    tabbed = tmp_path / "topics.json"  # JSON indented with tabs (jq --tab, fastjson): YAML refuses the tabs
    tabbed.write_text(
        json.dumps({"topics": [{"name": "A1", "read_queues": 2, "write_queues": 2}]}, indent="\t")
    )
    assert [row["action"] for row in mq("topic", "apply", "-f", str(tabbed), "-o", "json").json()] == [
        "unchanged"
    ]
    spec.write_text("- {name: A1, read_queues: 3, write_queues: 2}\n")
    planned = mq("topic", "apply", "-f", str(spec), "-o", "json")
    assert planned.json()[0]["action"] == "would update" and planned.json()[0]["changes"] == {
        "read_queues": [2, 3]
    }
    assert "add --execute" in planned.stderr
    assert daemons.broker.topics.get("A1").read_queue_nums == 2
    bad = tmp_path / "bad.yaml"
    bad.write_text("- {name: X, colour: red}\n")
    assert mq("topic", "apply", "-f", str(bad)).code == UsageError.exit_code


def test_apply_plans_by_default_and_says_would_create(
    mq: RunCli, daemons: LocalCluster, tmp_path: Path
) -> None:
    spec = tmp_path / "topics.yaml"
    spec.write_text("- {name: Planned1, read_queues: 2, write_queues: 2}\n")
    plan = mq("topic", "apply", "-f", str(spec))
    assert plan.code == 0, plan.stderr
    assert "would create" in plan.stdout and "read_queues: - → 2" in plan.stdout
    assert daemons.broker.topics.get("Planned1") is None
    alias = mq("topic", "apply", "-f", str(spec), "--dry-run", "-o", "json")
    assert alias.code == 0 and "--dry-run is the default now" in alias.stderr
    assert alias.json()[0]["action"] == "would create" and daemons.broker.topics.get("Planned1") is None
    bad_name = tmp_path / "bad-name.yaml"
    bad_name.write_text("- {name: 'a b'}\n")
    assert mq("topic", "apply", "-f", str(bad_name)).code == UsageError.exit_code


def test_group_delete_if_exists(mq: RunCli) -> None:
    missing = mq("group", "delete", "-g", "CG_Never", "--yes")
    assert missing.code == NotFoundError.exit_code
    soft = mq("group", "delete", "-g", "CG_Never", "--yes", "--if-exists", "-o", "json")
    assert soft.code == 0 and soft.json()["action"] == "missing"
    # not found before any question (off a terminal: before --yes is asked for)
    assert mq("group", "delete", "-g", "CG_Never").code == NotFoundError.exit_code


def test_unreachable_namesrv_is_a_connect_error(cli: RunCli) -> None:
    result = cli("topic", "list", "-n", "127.0.0.1:1")
    assert result.code == ConnectError.exit_code
    assert len(result.stderr.splitlines()) == 1


@pytest.mark.slow  # completion processes and a refresh behind them
def test_topic_names_complete_from_a_background_refreshed_cache(
    mq: RunCli, daemons: LocalCluster, tmp_path: Path
) -> None:
    import time

    assert mq("topic", "create", "-t", "Completion1", "--if-not-exists").code == 0
    env = {
        "MQCTL_CACHE_DIR": str(tmp_path / "cache"),
        "_MQCTL_COMPLETE": "complete_bash",
        "COMP_WORDS": "mqctl topic route -t Completio",
        "COMP_CWORD": "4",
    }
    first = mq(env=env)
    # cold cache: the first TAB waits a moment for the refresh (FIRST_WAIT), else answers nothing and the
    # refresh goes on behind it
    assert first.code == 0 and first.stdout.split() in ([], ["Completion1"])
    deadline = time.monotonic() + 20
    while not list((tmp_path / "cache").glob("names-*.json")) and time.monotonic() < deadline:
        time.sleep(0.1)
    second = mq(env=env)
    assert second.stdout.split() == ["Completion1"]


def test_namesrv_kv(mq: RunCli, daemons: LocalCluster) -> None:
    ns = ["-N", "ORDER_TOPIC_CONFIG"]
    assert mq("namesrv", "kv", "get", *ns, "OrderT").code == NotFoundError.exit_code
    put = mq("namesrv", "kv", "set", *ns, "OrderT", "broker-a:4", "-o", "json").json()
    assert put["previous"] is None and put["value"] == "broker-a:4"
    assert daemons.namesrv.kv.get("ORDER_TOPIC_CONFIG", "OrderT") == "broker-a:4"
    assert mq("namesrv", "kv", "get", *ns, "OrderT", "-o", "json").json()["value"] == "broker-a:4"
    assert mq("namesrv", "kv", "list", *ns, "-o", "json").json() == [{"key": "OrderT", "value": "broker-a:4"}]
    assert mq("namesrv", "kv", "delete", *ns, "OrderT").code == UsageError.exit_code  # needs --yes off a TTY
    assert (
        mq("namesrv", "kv", "delete", *ns, "OrderT", "--yes", "-o", "json").json()["deleted"] == "broker-a:4"
    )
    assert daemons.namesrv.kv.get("ORDER_TOPIC_CONFIG", "OrderT") is None
    assert mq("namesrv", "kv", "delete", *ns, "OrderT", "--yes").code == NotFoundError.exit_code
    gone = mq("namesrv", "kv", "delete", *ns, "OrderT", "--yes", "--if-exists", "-o", "json")
    assert gone.code == 0 and gone.json()["deleted"] is None


def test_broker_config_get_and_set(mq: RunCli, daemons: LocalCluster) -> None:
    got = mq("broker", "config", "get", "fileReservedTime", "brokerName", "-o", "json").json()
    assert got == [
        {
            "broker": daemons.broker_addr,
            "key": "fileReservedTime",
            "value": str(daemons.broker.config.file_reserved_time),
        },
        {"broker": daemons.broker_addr, "key": "brokerName", "value": "broker-a"},
    ]
    changed = mq(
        "broker", "config", "set", "fileReservedTime=48", "-b", daemons.broker_addr, "-o", "json"
    ).json()
    assert changed == [
        {"broker": daemons.broker_addr, "key": "fileReservedTime", "old": got[0]["value"], "new": "48"}
    ]
    assert daemons.broker.config.file_reserved_time == 48
    assert mq("broker", "config", "get", "noSuchKey").code == NotFoundError.exit_code
    typo = mq("broker", "config", "get", "fileReservedTim")  # as 'set' does, 'get' names the key meant
    assert typo.code == NotFoundError.exit_code and "(did you mean fileReservedTime?)" in typo.stderr, typo
    assert mq("broker", "config", "set", "fileReservedTime").code == UsageError.exit_code
    bad = mq("broker", "config", "set", "fileReservedTime=abc", "-b", daemons.broker_addr)
    assert bad.code == UsageError.exit_code, bad.stderr
    assert "fileReservedTime" in bad.stderr and "'abc' is not a whole number" in bad.stderr
    assert "int()" not in bad.stderr and daemons.broker.config.file_reserved_time == 48
    # fileReservedTime=0 lets the next cleanup delete every CommitLog file: the broker's rule wants --force;
    # it exited 9 (permission denied) on the broker's NO_PERMISSION, though nothing was missing but --force
    wipe = mq("broker", "config", "set", "fileReservedTime=0", "-b", daemons.broker_addr)
    assert wipe.code == UsageError.exit_code, wipe.stderr
    [line] = wipe.stderr.splitlines()
    assert "fileReservedTime=0: under 1 h would let the next cleanup delete every CommitLog file" in line
    assert "--force" in line and daemons.broker.config.file_reserved_time == 48
    flag = mq("broker", "config", "set", "autoCreateTopicEnable=maybe", "-b", daemons.broker_addr)
    assert flag.code == UsageError.exit_code and "true or false" in flag.stderr, flag.stderr
    typo = mq("broker", "config", "set", "fileReservedTim=24", "-b", daemons.broker_addr)
    assert typo.code == NotFoundError.exit_code and "did you mean fileReservedTime?" in typo.stderr, (
        typo.stderr
    )


def test_topic_stats_reads_the_brokers_put_rates(mq: RunCli, daemons: LocalCluster) -> None:
    assert mq("topic", "create", "-t", "Rates", "-w", "2", "-r", "2").code == 0
    before = mq("topic", "stats", "-t", "Rates", "-o", "json").json()
    assert (before["in_tps"], before["in_msgs_24h"]) == (0, 0)  # no TOPIC_PUT_NUMS item yet
    for i in range(3):
        assert mq("msg", "send", "-t", "Rates", f"m{i}").code == 0
    stats = mq("topic", "stats", "-t", "Rates", "-o", "json").json()
    assert stats["in_msgs_24h"] == 3 and stats["messages"] == 3 and stats["in_tps"] > 0


def cells(text: str) -> list[list[str]]:
    """A table's rows as lists of cell texts."""
    return [[c.strip() for c in line.split("│")] for line in text.splitlines() if "│" in line]


def test_create_shows_its_diff_values_as_rows(mq: RunCli, daemons: LocalCluster) -> None:
    created = mq("topic", "create", "-t", "Shown", "-r", "2", "-w", "2")
    assert created.code == 0, created.stderr
    rows = cells(created.stdout)
    (broker_row,) = [r for r in rows if r[0] == daemons.broker_addr]
    assert broker_row[1] == "created"
    assert "read_queues: - → 2" in broker_row[2] and "perm: - → rw" in broker_row[2]
    assert ["topic", "Shown"] in rows
    assert "{" not in created.stdout and "[" not in created.stdout


def test_times_are_iso_with_an_ms_twin_and_never_for_zero(mq: RunCli, daemons: LocalCluster) -> None:
    assert mq("topic", "create", "-t", "Quiet", "-r", "1", "-w", "1").code == 0
    (row,) = mq("topic", "status", "-t", "Quiet", "-o", "json").json()
    assert (row["last_updated"], row["last_updated_ms"]) == (None, 0)
    stats = mq("topic", "stats", "-t", "Quiet", "-o", "json").json()
    assert (stats["last_updated"], stats["last_updated_ms"]) == (None, 0)
    table = mq("topic", "status", "-t", "Quiet")
    (cells_row,) = [r for r in cells(table.stdout) if r[0] == "broker-a"]
    assert cells_row[-1] == "never" and "LAST UPDATED MS" not in table.stdout
    assert ["last_updated", "never"] in cells(mq("topic", "stats", "-t", "Quiet").stdout)


@pytest.mark.slow
def test_cluster_list_watch_says_a_warning_once_and_when_it_no_longer_holds(
    cli_env: dict[str, str], daemons: LocalCluster
) -> None:
    """``cluster list --watch`` wrote the same 'no master registered' warning at every refresh, a line a
    refresh in a log; it is said once, then 'resolved' when the master registers."""
    dead = f"127.0.0.1:{free_port()}"
    client = RemotingClient()
    ns = Namesrv(daemons.namesrv, client)
    reg = daemons.loop.run(ns.register({}, broker_name="broker-z", broker_addr=dead, broker_id=1))
    assert reg.code == 0
    proc = spawn(
        cli_env, "cluster", "list", "--watch", "0.2", "-o", "json", env={"NAMESRV_ADDR": daemons.namesrv_addr}
    )
    rest = ""
    try:
        assert proc.stderr is not None
        lines: list[str] = []
        stamps: set[int] = set()  # one per refresh: its JSON lines' taken_at_ms (its period is said once)

        def refreshes(n: int) -> None:
            wanted = len(stamps) + n
            while len(stamps) < wanted:
                stamps.add(json.loads(read_line(proc, timeout=30))["taken_at_ms"])

        refreshes(4)
        assert (
            daemons.loop.run(ns.register({}, broker_name="broker-z", broker_addr=dead, broker_id=0)).code == 0
        )
        while not any(line.startswith("mqctl: resolved: broker-z: no master registered") for line in lines):
            lines.append(read_line(proc, proc.stderr, timeout=30))
        refreshes(2)
    finally:
        proc.send_signal(2)
        _, rest = finish(proc, 10)
        daemons.loop.run(client.close())
    lines += rest.splitlines()
    assert sum("every 0.2s" in line for line in lines) == 1, lines
    warned = [line for line in lines if "broker-z: no master registered" in line]
    assert len(warned) == 2 and warned[1].startswith("mqctl: resolved: "), lines
