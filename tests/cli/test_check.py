"""``mqctl check`` against our real NameServer and Broker over TCP: every state of every check, the plugin
line with its perfdata, the plugin exit codes, JSON, and ``--watch``."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from daemon.acl.signature import Signer
from daemon.broker.broker import Broker
from daemon.broker.headers import UpdateConsumerOffsetRequestHeader
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode
from mqctl.admin import messaging as wire
from mqctl.admin.client import Admin
from mqctl.services.checks import Perf, State, Watermarks, threshold, worst, write_refusal
from store.commitlog import PutMessageStatus
from store.engine import DefaultMessageStore
from store.record import decode_msg_id, decode_records
from tests.broker.test_ha import master_and_slave, start_slave
from tests.daemons import LocalCluster, handle, local_cluster
from tests.support.acl import ADMIN_AK, ADMIN_SK, PLAIN_ACL, USER_AK, USER_SK, write_acl
from tests.support.bounded import read_line
from tests.support.broker import start_broker
from tests.support.cli import CliResult, RunCli
from tests.support.namesrv import Namesrv
from tests.support.ports import free_port
from tests.support.waiting import wait_until

TOPIC = "Checked"
GROUP = "CG_Checked"
DEAD = "CG_Dead_Checked"
#: A Nagios plugin line: SERVICE STATE - text | perfdata (the plugin development guidelines' form).
LINE = re.compile(r"^[A-Z]+ (OK|WARNING|CRITICAL|UNKNOWN) - [^|\n]+( \| \S+=\S+( \S+=\S+)*)?\n$")


@pytest.fixture(scope="module")
def daemons(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A topic of 2 queues with 10 messages each; GROUP committed 4 and 10 (lag 6); DEAD has 2 dead letters."""
    with local_cluster(tmp_path_factory.mktemp("check")) as cluster:
        wire_client = handle(cluster)

        async def fill() -> None:
            await wire_client.create_topic(TOPIC, 2)
            for i in range(20):
                assert (await wire_client.send(TOPIC, f"m{i}".encode(), queue_id=i % 2)).code == 0
            for queue_id, offset in ((0, 4), (1, 10)):
                commit = UpdateConsumerOffsetRequestHeader(GROUP, TOPIC, queue_id, offset)
                r = await wire_client.call(RequestCode.UPDATE_CONSUMER_OFFSET, commit.to_ext_fields())
                assert r.code == 0
            async with Admin([cluster.namesrv_addr]) as admin:
                for _ in range(2):
                    sent = await wire.send(
                        admin, cluster.broker_addr, f"{TOPIC}Dead", b"dead", queue_id=0, properties={}
                    )
                    _host, offset = decode_msg_id(sent.offset_msg_id)
                    await wire.send_back(
                        admin, cluster.broker_addr, group=DEAD, phys_offset=offset, delay_level=-1
                    )
            await wire_client.client.close()

        cluster.loop.run(fill())
        yield cluster


@pytest.fixture
def mq(cli: RunCli, daemons: LocalCluster) -> RunCli:
    def run(*args: str) -> CliResult:
        return cli(*args, env={"NAMESRV_ADDR": daemons.namesrv_addr})

    return run  # type: ignore[return-value]


def plugin(result: CliResult, state: str) -> str:
    """The one line a check printed, checked for the plugin form, its state and the matching exit code."""
    assert LINE.match(result.stdout), result.stdout + result.stderr
    assert result.stdout.split(" ")[1] == state, result.stdout
    assert result.code == {"OK": 0, "WARNING": 1, "CRITICAL": 2, "UNKNOWN": 3}[state]
    return result.stdout.strip()


def test_lag_in_every_state(mq: RunCli) -> None:
    ok = plugin(mq("check", "lag", "-g", GROUP, "--warn", "10", "--crit", "20"), "OK")
    assert ok.startswith(f"LAG OK - group {GROUP} lag 6 ") and ok.endswith(
        "| lag=6;10;20;0 queues=2;;;0 uncounted_queues=0;;;0 uncounted_holding=0;0;;0"
    )
    warning = plugin(mq("check", "lag", "-g", GROUP, "--warn", "5", "--crit", "20"), "WARNING")
    assert "lag=6;5;20;0" in warning and f"on {TOPIC} broker-a:0: 6" in warning
    plugin(mq("check", "lag", "-g", GROUP, "-w", "1", "--crit", "5"), "CRITICAL")
    missing = plugin(mq("check", "lag", "-g", "CG_Nobody"), "UNKNOWN")
    assert "group 'CG_Nobody' not found" in missing  # not "has no offsets": no broker knows it
    other = plugin(
        mq("check", "lag", "-g", GROUP, "-t", "NotItsTopic"), "UNKNOWN"
    )  # it has offsets elsewhere, and no topic has that name
    assert "topic 'NotItsTopic' not found" in other


def test_a_group_created_and_never_consumed_has_no_lag_not_no_group(mq: RunCli) -> None:
    """A group the brokers hold that no consumer ever used read as not found: group progress exited 3 and
    check lag was UNKNOWN, the codes of a group no master holds."""
    assert mq("group", "create", "-g", "CG_Fresh").code == 0
    shown = mq("group", "progress", "-g", "CG_Fresh", "-o", "json")
    assert (shown.code, shown.json()) == (0, []), shown
    ok = plugin(mq("check", "lag", "-g", "CG_Fresh"), "OK")
    assert "group CG_Fresh lag 0 (no offsets yet)" in ok and "lag=0;" in ok, ok
    assert mq("group", "progress", "-g", "CG_Fresh_typo").code == 3
    assert "not found" in plugin(mq("check", "lag", "-g", "CG_Fresh_typo"), "UNKNOWN")


def test_lag_json_for_scripts(mq: RunCli) -> None:
    result = mq("check", "lag", "-g", GROUP, "--warn", "5", "--crit", "20", "-o", "json")
    assert result.code == 1
    data = result.json()
    assert (data["check"], data["state"], data["exit_code"]) == ("lag", "WARNING", 1)
    assert data["perfdata"][0] == {"label": "lag", "value": 6, "warn": 5, "crit": 20, "min": 0}


def test_unreachable_nameserver_and_bad_flags_are_unknown(cli: RunCli) -> None:
    down = cli("check", "cluster", env={"NAMESRV_ADDR": f"127.0.0.1:{free_port()}"})
    assert "cannot talk to" in plugin(down, "UNKNOWN")
    bogus = cli("check", "lag", "-g", GROUP, "--bogus")  # UNKNOWN (3), not mqctl's usage code 2
    line = plugin(bogus, "UNKNOWN")  # the one line a monitoring system reads is on stdout, bad flags too
    assert line.startswith("LAG UNKNOWN - ") and "--bogus" in line, line
    assert "--warn 9 is above --crit 1" in plugin(
        cli("check", "lag", "-g", GROUP, "-w", "9", "--crit", "1"), "UNKNOWN"
    )


def test_dlq_in_every_state(mq: RunCli) -> None:
    ok = plugin(mq("check", "dlq", "-g", GROUP), "OK")
    assert "0 dead letters" in ok and "dead_letters=0;0;100;0" in ok
    warning = plugin(mq("check", "dlq", "-g", DEAD, "--crit", "5"), "WARNING")
    assert "2 dead letters not re-sent" in warning and "held=2" in warning
    plugin(mq("check", "dlq", "-g", DEAD, "--crit", "1"), "CRITICAL")
    typo = plugin(mq("check", "dlq", "-g", GROUP + "_typo"), "UNKNOWN")  # not an OK forever
    assert f"group '{GROUP}_typo' is not known" in typo


def test_disk_against_the_watermarks(mq: RunCli, daemons: LocalCluster) -> None:
    used = daemons.broker.store.disk_ratio()
    assert 0.10 < used < 0.75, f"this test needs a disk between 10 % and 75 % used, not {used:.0%}"
    ok = plugin(mq("check", "disk"), "OK")
    assert re.search(r"broker-a/0=[\d.]+%;75;85;0;100", ok)
    plugin(mq("check", "disk", "--warn", "0.01", "--crit", "0.99"), "WARNING")
    critical = plugin(mq("check", "disk", "--warn", "0.005", "--crit", "0.01"), "CRITICAL")
    assert "> 1%" in critical
    # the broker's own watermark: retention deletes unexpired files above diskMaxUsedSpaceRatio
    assert mq("broker", "config", "set", "diskMaxUsedSpaceRatio=10", "--force").code == 0
    try:
        assert "> 10%" in plugin(mq("check", "disk"), "WARNING")
    finally:
        assert mq("broker", "config", "set", "diskMaxUsedSpaceRatio=75").code == 0
    assert "no broker" in plugin(mq("check", "disk", "-b", "127.0.0.1:1"), "UNKNOWN")


def test_disk_thresholds_are_percent_as_its_perfdata(mq: RunCli, daemons: LocalCluster) -> None:
    """``--warn 90`` was refused (UNKNOWN: not in 0<=x<=1) while the output, the perfdata and the broker's
    watermarks are percent; a ratio up to 1 is still read as one (``--crit 1``: full, as it meant)."""
    used = daemons.broker.store.disk_ratio()
    assert 0.10 < used < 0.75, f"this test needs a disk between 10 % and 75 % used, not {used:.0%}"
    ok = plugin(mq("check", "disk", "--warn", "80", "--crit", "90%"), "OK")
    assert re.search(r"broker-a/0=[\d.]+%;80;90;0;100", ok), ok
    assert "> 5%" in plugin(mq("check", "disk", "--warn", "5%", "--crit", "99"), "WARNING")
    assert "> 1%" in plugin(mq("check", "disk", "--warn", "0.5%", "--crit", "1%"), "CRITICAL")
    assert "OK" in plugin(mq("check", "disk", "-w", "0.99", "--crit", "1"), "OK")
    assert "--warn 0.5 (50%) is above --crit 1% (1%)" in plugin(
        mq("check", "disk", "-w", "0.5", "--crit", "1%"), "UNKNOWN"
    )
    assert "--warn 90 (90%) is above --crit 80 (80%)" in plugin(
        mq("check", "disk", "--warn", "90", "--crit", "80"), "UNKNOWN"
    )
    assert "bad --crit '101'" in plugin(mq("check", "disk", "--crit", "101"), "UNKNOWN")


def test_a_store_that_refuses_writes_is_critical_whatever_the_thresholds(
    mq: RunCli, daemons: LocalCluster
) -> None:
    """A store past diskSpaceWarningLevelRatio or answering OS_PAGECACHE_BUSY takes no send: check disk and
    check cluster say CRITICAL and why, though the ratio is under --crit (and check cluster reads no ratio at
    all). The watermark is lowered under the real usage rather than the verdict set by hand: the store's
    periodic disk check and retention run both recompute the verdict from the disk and would undo it."""
    store = daemons.broker.store
    assert isinstance(store, DefaultMessageStore)
    warning_level = store.config.disk_space_warning_level_ratio
    store.config.disk_space_warning_level_ratio = 1
    try:
        assert store.cleaner.check_disk_space(), "the disk this test runs on must be more than 1 % used"
        disk = plugin(mq("check", "disk", "--warn", "0.99", "--crit", "0.99"), "CRITICAL")
        assert "refuses writes: disk full: the CommitLog partition is" in disk
        cluster = plugin(mq("check", "cluster", "--clock-warn", "0"), "CRITICAL")
        assert "broker-a/0@" in cluster and "refuses writes: disk full" in cluster
        assert "refusing_writes=1;;;0" in cluster
    finally:
        store.config.disk_space_warning_level_ratio = warning_level
        store.cleaner.check_disk_space()
    store.put_refusal = lambda: PutMessageStatus.OS_PAGECACHE_BUSY
    try:
        busy = plugin(mq("check", "cluster", "--clock-warn", "0"), "CRITICAL")
        assert "refuses writes: puts answered OS_PAGECACHE_BUSY" in busy
    finally:
        store.put_refusal = None
    plugin(mq("check", "disk"), "OK")


def test_a_rocketmq_broker_s_busy_page_cache_is_a_write_refusal() -> None:
    assert write_refusal({"pageCacheLockTimeMills": "0"}) is None
    assert write_refusal({"pageCacheLockTimeMills": "999"}) is None
    said = write_refusal({"pageCacheLockTimeMills": "1500"})
    assert said is not None and "OS_PAGECACHE_BUSY" in said and "1500 ms" in said
    assert write_refusal({"storeWriteRefused": "the store is not running"}) == "the store is not running"


def test_cluster_down_broker_is_critical(mq: RunCli, daemons: LocalCluster) -> None:
    ok = plugin(mq("check", "cluster"), "OK")
    assert "1 of 1 broker answering" in ok and "answering=1;;;0;1" in ok
    dead = f"127.0.0.1:{free_port()}"

    async def register() -> RemotingClient:
        client = RemotingClient()
        ns = Namesrv(daemons.namesrv, client)
        assert (await ns.register({}, broker_name="broker-z", broker_addr=dead)).code == 0
        return client

    client = daemons.loop.run(register())  # registered while this connection stays open
    try:
        critical = plugin(mq("check", "cluster"), "CRITICAL")
        assert f"broker-z/0@{dead} down" in critical and "1 of 2 brokers" in critical
    finally:
        daemons.loop.run(client.close())


def test_cluster_with_quarantined_data_is_a_warning(cli: RunCli, tmp_path: Path) -> None:
    """A broker that set damaged data aside at start serves on; until the operator removes the quarantine,
    check cluster says so (it said OK: the records were only in the broker's log)."""
    from tests.cli.test_quarantine_cmd import STORE_A_SIZES, damage_a_total_size

    root, recs, victim = damage_a_total_size(tmp_path)
    later = sum(1 for off, _, _ in recs if off > victim)
    with local_cluster(tmp_path, store_path_root_dir=str(root), **STORE_A_SIZES) as c:
        warning = plugin(cli("check", "cluster", env={"NAMESRV_ADDR": c.namesrv_addr}), "WARNING")
    assert f"broker-a/0@{c.broker_addr} holds 1 quarantine with {later + 1} records set aside" in warning
    assert f"quarantined_records={later + 1};;;0" in warning


def test_a_record_damaged_across_an_unclean_stop_is_set_aside_and_a_warning(
    cli: RunCli, tmp_path: Path
) -> None:
    """10 messages, a clean stop (the checkpoint's recovery point past them all), one body byte of the
    seventh flipped and the abort file touched: the restart sets that record aside (never served, every
    other one is) and check cluster says so; it said OK while only a pull's ERROR knew."""
    from tests.cli.test_quarantine_cmd import records_of

    root = tmp_path / "broker"
    with local_cluster(tmp_path) as c:
        h = handle(c)
        c.loop.run(h.create_topic("Unclean", 1))
        for i in range(10):
            assert c.loop.run(h.send("Unclean", f"message-{i}".encode(), queue_id=0)).code == 0
        c.loop.run(h.client.close())
    recs = records_of(root / "commitlog")
    victim, _m, body_at = next(r for r in recs if r[1].body == b"message-6")
    with open(root / "commitlog" / f"{0:020d}", "r+b") as f:
        f.seek(body_at + 3)
        byte = f.read(1)
        f.seek(body_at + 3)
        f.write(bytes([byte[0] ^ 0x01]))
    (root / "abort").touch()

    with local_cluster(tmp_path) as c:
        [qdir] = (root / "quarantine").iterdir()  # by the start, before any read met it
        manifest = json.loads((qdir / "manifest.json").read_text())
        assert (manifest["recovery"], manifest["files"][0]["from_offset"]) == ("abnormal", victim)
        h = handle(c)
        pulled = c.loop.run(h.pull("G", "Unclean", 0, 0))
        bodies = [m.body for m in decode_records(pulled.body)]
        assert bodies == [f"message-{i}".encode() for i in range(10) if i != 6]
        c.loop.run(h.client.close())
        warning = plugin(cli("check", "cluster", env={"NAMESRV_ADDR": c.namesrv_addr}), "WARNING")
    assert "holds 1 quarantine with 1 record set aside" in warning
    assert len(list((root / "quarantine").iterdir())) == 1  # the pull that skipped it made no second one


@pytest.mark.slow
def test_watch_repeats_and_exits_with_the_last_state(cli_env: dict[str, str], daemons: LocalCluster) -> None:
    import signal
    import subprocess
    import sys
    import time

    from tests.support.paths import ROOT

    env = {**cli_env, "NAMESRV_ADDR": daemons.namesrv_addr}
    argv = [sys.executable, "-m", "mqctl", "check", "lag", "-g", GROUP, "-w", "5", "--watch", "0.2"]
    proc = subprocess.Popen(
        argv, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        first, second = read_line(proc), read_line(proc)
        assert first.startswith("LAG WARNING - ") and second.startswith("LAG WARNING - ")
        time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 1
    finally:
        proc.kill()  # a no-op once it exited
        proc.wait()


def test_cluster_acl_refusal_is_unknown_not_down(mq: RunCli, daemons: LocalCluster, tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_acl(home)

    async def start() -> Broker:
        return await start_broker(
            tmp_path / "acl",
            broker_name="broker-acl",
            acl_enable=True,
            rocketmq_home=str(home),
            namesrv_addr=daemons.namesrv_addr,
        )

    guarded = daemons.loop.run(start())
    try:
        unknown = plugin(mq("check", "cluster"), "UNKNOWN")
        assert f"broker-acl/0@{guarded.addr} refused (ACL)" in unknown and "2 brokers" in unknown
        partial = plugin(mq("check", "lag", "-g", GROUP, "--warn", "10", "--crit", "20"), "UNKNOWN")
        assert "lag 6" in partial and "not read: broker-acl" in partial and "ACL denied" in partial
    finally:
        daemons.loop.run(guarded.stop())


async def test_ha_a_sync_master_whose_slave_stopped_is_critical(cli: RunCli, tmp_path: Path) -> None:
    """A slave stopped cleanly unregisters, so its SYNC_MASTER listed no slave to miss and check ha said
    OK, while every send answered SLAVE_NOT_AVAILABLE; an ASYNC_MASTER alone is a valid set-up."""
    async with master_and_slave(tmp_path, broker_role="SYNC_MASTER") as g:

        async def check() -> CliResult:
            return await asyncio.to_thread(cli, "check", "ha", env={"NAMESRV_ADDR": g.ns_addr})

        async def caught_up() -> bool:
            return (await check()).code == 0

        await wait_until(caught_up)
        await g.slave.stop()  # unregisters; the fixture's stop at the end is a no-op
        alone = plugin(await check(), "CRITICAL")
        assert f"broker-a master {g.master.addr} is a SYNC_MASTER with no slave" in alone, alone


async def test_ha_slaves_connected_and_missing(cli: RunCli, tmp_path: Path) -> None:
    async with master_and_slave(tmp_path) as g:

        async def check(*args: str) -> CliResult:
            return await asyncio.to_thread(cli, "check", "ha", *args, env={"NAMESRV_ADDR": g.ns_addr})

        async def caught_up() -> bool:
            return (await check("--min-slaves", "1")).code == 0

        await wait_until(caught_up)
        ok = plugin(await check("--min-slaves", "1"), "OK")
        assert "1 slave in 1 broker group, max lag 0 bytes" in ok and "slaves=1;;;0" in ok
        assert "lag_bytes=0B;16777216;268435456;0" in ok
        wanted = plugin(await check("--min-slaves", "2"), "CRITICAL")
        assert "broker-a has 1 slave registered, 2 wanted" in wanted
        await g.master.stop()
        headless = plugin(await check(), "CRITICAL")
        assert "broker-a has no master registered" in headless
        assert f"slave {g.slave.addr} not connected to its master" in headless
        # its lag is not known (it said 0 bytes, as the slave stopped there): U, for graphs and thresholds
        assert "max lag unknown (a slave not connected)" in headless and "lag_bytes=U;" in headless
        assert "lag_seconds=U;" in headless
        await g.master.start()  # the fixture stops it again


async def test_cluster_warns_when_the_members_acl_differ(cli: RunCli, tmp_path: Path) -> None:
    """A master and its slave with ACL files that differ: the client the master admits is refused by the
    slave it reads from when the master is down (or the reverse). 'check cluster' said OK."""
    home, other = tmp_path / "home", tmp_path / "other"
    write_acl(home)
    other_file = write_acl(other, PLAIN_ACL.replace("TopicA=PUB|SUB", "TopicA=SUB"))
    signer = Signer(ADMIN_AK, ADMIN_SK)
    async with master_and_slave(tmp_path, signer=signer, acl_enable=True, rocketmq_home=str(home)) as g:
        await g.slave.stop()
        g.slave = await start_slave(tmp_path / "slave", g.ns_addr, acl_enable=True, rocketmq_home=str(other))
        env = {"NAMESRV_ADDR": g.ns_addr, "MQCTL_ACCESS_KEY": ADMIN_AK, "MQCTL_SECRET_KEY": ADMIN_SK}

        async def check() -> CliResult:
            return await asyncio.to_thread(cli, "check", "cluster", env=env)

        async def both_answer() -> bool:
            return "2 of 2 brokers answering" in (await check()).stdout

        await wait_until(both_answer)
        warning = plugin(await check(), "WARNING")
        assert f"broker-a: ACL differs between its members ({g.master.addr}, {g.slave.addr})" in warning
        assert f"account {USER_AK}" in warning and f"account {ADMIN_AK}" not in warning
        assert USER_SK not in warning and ADMIN_SK not in warning
        other_file.write_text((home / "conf" / "plain_acl.yml").read_text())  # taken within a second

        async def same() -> bool:
            return (await check()).code == 0

        await wait_until(same)


def test_perfdata_thresholds_and_the_worst_state() -> None:
    assert Perf("lag", 1234, "", 1000, 5000, 0).text() == "lag=1234;1000;5000;0"
    assert Perf("broker a/0", 24.5, "%", 75, 85, 0, 100).text() == "'broker a/0'=24.5%;75;85;0;100"
    assert Perf("slaves", 2, min=0).text() == "slaves=2;;;0" and Perf("n", 3).text() == "n=3"
    assert [threshold(v, 10, 20) for v in (10, 11, 21)] == [State.OK, State.WARNING, State.CRITICAL]
    assert worst([State.OK, State.UNKNOWN, State.WARNING]) is State.WARNING
    assert worst([State.UNKNOWN, State.CRITICAL]) is State.CRITICAL and worst([]) is State.OK
    # a 4.9.8 broker has no disk watermark keys but diskMaxUsedSpaceRatio, clamped to 10..95
    assert Watermarks.of({"diskMaxUsedSpaceRatio": "99"}) == Watermarks(0.95, 0.85, 0.90)
    assert Watermarks.of({"diskSpaceCleanForciblyRatio": "80", "diskSpaceWarningLevelRatio": "0.95"}) == (
        Watermarks(0.75, 0.80, 0.95)
    )


def test_plugin_line_stays_one_line_whatever_a_broker_says() -> None:
    """A summary carries brokers' remarks: their control characters must not reach the operator's terminal
    or the monitoring system, a newline must not start a second plugin line, and a `|` must not start the
    perfdata early."""
    from mqctl.services.checks import Verdict

    remark = "denied\x1b[2J\nOK - all fine | fake=1"
    line = Verdict("cluster", State.CRITICAL, f"broker-a refused (ACL): {remark}", [Perf("up", 0)]).line()
    assert LINE.match(line + "\n"), line
    assert "\x1b" not in line and line.endswith(" | up=0")
    assert "\\x1b[2J\\nOK - all fine" in line


def test_disk_a_broker_cannot_measure_is_unknown(cli: RunCli, tmp_path: Path) -> None:
    """commitLogDiskRatio -1 (RocketMQ's "cannot measure that path") read "DISK OK - fullest CommitLog disk
    -100%", with -100% in the perfdata: it is UNKNOWN, naming the broker."""
    with local_cluster(tmp_path) as cluster:
        (Path(cluster.broker.store.config.store_path_root_dir) / "commitlog").rmdir()  # no message yet
        unknown = plugin(cli("check", "disk", "-n", cluster.namesrv_addr), "UNKNOWN")
        assert f"{cluster.broker_addr} reports commitLogDiskRatio -1" in unknown and "-100" not in unknown


def test_a_watched_json_verdict_starts_with_the_time_of_its_reads(capsys: pytest.CaptureFixture[str]) -> None:
    """'check lag --watch 5 -o json' printed lines that did not say when each was read."""
    from mqctl.cli.check import _emit
    from mqctl.services.checks import Verdict

    _emit(Verdict("lag", State.WARNING, "lag 12"), "json", 1_764_523_000_000)
    _emit(Verdict("lag", State.OK, "lag 0"), "json", None)  # once (no --watch): the document alone
    watched, *once = capsys.readouterr().out.splitlines()
    line = json.loads(watched)
    assert list(line)[:3] == ["taken_at", "taken_at_ms", "check"]
    assert (line["taken_at"], line["taken_at_ms"], line["state"]) == (
        "2025-11-30T17:16:40.000Z",
        1_764_523_000_000,
        "WARNING",
    )
    assert "taken_at" not in json.loads("\n".join(once))


async def test_ha_warns_of_a_dledger_member_that_abstains(monkeypatch: pytest.MonkeyPatch) -> None:
    """It would help elect no leader: the group is one loss nearer to electing none."""
    from mqctl.output import Rows
    from mqctl.services import checks, ha

    def member(i: int, role: str, abstains: str | None = None) -> ha.HAStatus:
        return ha.HAStatus(
            "c",
            "g",
            i,
            f"10.0.0.{i}:10911",
            connected=True,
            member=f"n{i}",
            raft_role=role,
            abstains=abstains,
        )

    states = [
        member(0, "LEADER"),
        member(1, "FOLLOWER"),
        member(2, "FOLLOWER", "started with an empty log: until it holds, committed, ..."),
    ]
    states[0].members = 3

    async def status(admin: Admin, cluster: str | None = None) -> Rows:
        return Rows.of(ha.HAStatus, states)

    monkeypatch.setattr(ha, "ha_status", status)
    limits = {"warn_bytes": 1, "crit_bytes": 2, "warn_seconds": 1.0, "crit_seconds": 2.0}
    verdict = await checks.ha(Admin([]), cluster_name=None, min_slaves=0, **limits)
    assert verdict.state is State.WARNING, verdict
    assert (
        "g member n2 (10.0.0.2:10911) abstains from elections: started with an empty log" in verdict.summary
    )
    states[2].abstains = None
    assert (await checks.ha(Admin([]), cluster_name=None, min_slaves=0, **limits)).state is State.OK


async def test_cluster_warns_of_a_dledger_member_gone_from_the_route(monkeypatch: pytest.MonkeyPatch) -> None:
    """'OK - 2 of 2 brokers' while a member of a 3-member DLedger group was dead (check ha warned): a dead
    member expires from the route, so the registered brokers alone never missed it; the leader's view of
    its group counts it."""
    from mqctl.services import checks
    from mqctl.services.cluster import BrokerRow

    rows = [BrokerRow("c", "g", 0, "10.0.0.1:10911"), BrokerRow("c", "g", 1, "10.0.0.2:10911")]
    leader = {"dledgerRole": "LEADER", "dledgerPeers": "n1/812/0;n2/790/22/down"}
    tables = {"10.0.0.1:10911": leader, "10.0.0.2:10911": {"dledgerRole": "FOLLOWER"}}

    async def brokers(admin: Admin, cluster: str | None, *, known: bool) -> list[BrokerRow]:
        return list(rows)

    async def runtime(admin: Admin, row: BrokerRow) -> tuple[dict[str, str], float, float]:
        return tables[row.addr], 0.0, 0.0

    async def acl_view(admin: Admin, addr: str) -> None:
        return None

    monkeypatch.setattr(checks, "brokers", brokers)
    monkeypatch.setattr(checks, "_runtime", runtime)
    monkeypatch.setattr(checks, "_acl_view", acl_view)
    verdict = await checks.cluster(Admin([]), cluster_name=None, clock_warn=0)
    assert verdict.state is State.WARNING, verdict
    assert "g: 2 of its 3 DLedger members registered" in verdict.summary, verdict.summary
    rows.append(BrokerRow("c", "g", 2, "10.0.0.3:10911"))
    tables["10.0.0.3:10911"] = {"dledgerRole": "FOLLOWER"}
    assert (await checks.cluster(Admin([]), cluster_name=None, clock_warn=0)).state is State.OK
