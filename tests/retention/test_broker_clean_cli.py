"""``mqctl broker clean`` (real entry point, subprocess) against our real broker on a simulated disk."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from daemon.broker.clean import CLEAN_PLAN, PlanBody
from daemon.broker.headers import UpdateConsumerOffsetRequestHeader
from daemon.remoting.codes import RequestCode
from mqctl.admin.client import Admin
from mqctl.errors import RetriableBrokerError
from mqctl.services.retention import estimated_plan, report
from store.cleanup import FakeDiskUsage
from tests.support.cli import RunCli
from tests.support.retention import retention_cluster, wait_until


@pytest.mark.slow
def test_broker_clean_plans_then_executes_through_329(cli: RunCli, tmp_path: Path) -> None:
    with retention_cluster(tmp_path, FakeDiskUsage(0.40)) as rc:
        rc.send("TC", 300)
        header = UpdateConsumerOffsetRequestHeader("G-late", "TC", 1, 3)
        assert rc.run(rc.client.call(RequestCode.UPDATE_CONSUMER_OFFSET, header.to_ext_fields())).code == 0
        files = rc.commitlog_files()
        assert len(files) >= 4
        rc.age_all_but_last(80)
        young = rc.root / "commitlog" / files[2]
        os.utime(young, (time.time(), time.time()))
        ns = ["-n", rc.cluster.namesrv_addr]

        dry = cli("broker", "clean", *ns, "-o", "json")
        assert dry.code == 0, dry.stderr
        plan = json.loads(dry.stdout)
        assert plan["target"] == rc.cluster.broker_addr and plan["disk_ratio"] == 0.4
        assert [f["action"] for f in plan["files"]] == ["delete", "delete"] + ["keep"] * (len(files) - 2)
        assert plan["losses"]["G-late"] == rc.store.first_offset_at("TC", 1, int(files[2])) - 3
        assert not plan["executed"] and rc.commitlog_files() == files

        table = cli("broker", "clean", *ns)
        assert table.code == 0 and "G-late" in table.stdout, table.stderr
        # the broker's plan lists no files for mqctl to remove: it said '--execute removes the 0 file(s) listed'
        assert (
            "dry run: nothing deleted; --execute has the broker delete the 2 CommitLog files" in table.stderr
        )

        refused = cli("broker", "clean", *ns, "--execute")  # off a terminal, executing needs --yes
        assert refused.code == 2 and "--yes" in refused.stderr and rc.commitlog_files() == files

        done = cli("broker", "clean", *ns, "--execute", "--yes", "--wait", "20", "-o", "json")
        assert done.code == 0, done.stderr
        result = json.loads(done.stdout)
        assert result["executed"] and result["deleted"] == files[:2]
        assert result["min_offset_after"] == int(files[2]) == rc.store.min_phy_offset
        assert rc.commitlog_files() == files[2:]  # the young file stops the deletion, as in RocketMQ


def test_the_trigger_deletes_no_file_past_the_plan_it_executed(cli: RunCli, tmp_path: Path) -> None:
    """329 makes the next 20 runs (about 200 s) delete every expired file: one that expired after the plan
    was shown went too, though the operator never saw it. 'broker clean --execute' bounds them to the plan."""
    with retention_cluster(tmp_path, FakeDiskUsage(0.40)) as rc:
        rc.send("TC", 300)
        files = rc.commitlog_files()
        assert len(files) >= 4
        rc.age_all_but_last(80)
        young = rc.root / "commitlog" / files[2]
        os.utime(young, (time.time(), time.time()))  # the plan deletes files 0 and 1
        done = cli("broker", "clean", "-n", rc.cluster.namesrv_addr, "--execute", "--yes", "--wait", "15")
        assert done.code == 0, done.stderr
        # the broker removed its queues' files itself: no '0 file(s) in all' of an offline clean
        assert f"deleted 2 CommitLog files; min offset now {int(files[2])}" in done.stderr, done.stderr
        assert rc.commitlog_files() == files[2:]
        os.utime(young, (time.time() - 80 * 3600, time.time() - 80 * 3600))  # expires after the plan
        rc.after_cleanup_runs(3)  # runs of the same trigger
        assert rc.commitlog_files() == files[2:]


def test_broker_without_a_plan_still_gets_the_trigger(cli: RunCli, tmp_path: Path) -> None:
    """A broker that does not answer the plan request (as RocketMQ answers an unknown code): the plan is
    estimated from standard requests, and --execute still sends 329."""
    with retention_cluster(tmp_path, FakeDiskUsage()) as rc:
        # what a RocketMQ broker has: no processor for the plan request (it answers "not supported")
        del rc.cluster.broker.server.dispatcher.processors[CLEAN_PLAN]
        rc.send("TC", 3)
        res = cli("broker", "clean", "-n", rc.cluster.namesrv_addr, "--execute", "--yes", "-o", "json")
        assert res.code == 0, res.stderr
        report = json.loads(res.stdout)
        assert [f["action"] for f in report["files"]] == ["keep"]  # one file, the newest
        assert report["executed"] and report["deleted"] == []
        assert report["note"].startswith("estimated: this broker does not answer")


def test_estimate_from_standard_requests_matches_the_brokers_plan(tmp_path: Path) -> None:
    """The estimate (what a RocketMQ broker exposes) and our broker's exact plan go through the same
    function; with every file expired they name the same files and the same losses."""
    with retention_cluster(tmp_path, FakeDiskUsage(0.40), file_reserved_time=0) as rc:
        rc.send("TC", 260)
        for group, qid, off in (("G-a", 0, 7), ("G-b", 1, 100), ("G-c", 0, 130)):
            header = UpdateConsumerOffsetRequestHeader(group, "TC", qid, off)
            assert (
                rc.run(rc.client.call(RequestCode.UPDATE_CONSUMER_OFFSET, header.to_ext_fields())).code == 0
            )

        async def both() -> tuple[PlanBody, PlanBody]:
            async with Admin([rc.cluster.namesrv_addr]) as admin:
                info = await admin.broker_runtime_info(rc.cluster.broker_addr)
                estimate = await estimated_plan(admin, rc.cluster.broker_addr, info)
                exact = PlanBody.loads((await admin.call(rc.cluster.broker_addr, CLEAN_PLAN)).body)
            return estimate, exact

        estimate, exact = rc.run(both())
        assert [f.name for f in estimate.files] == [f.name for f in exact.files] == rc.commitlog_files()
        assert [f.reason for f in estimate.files] == [f.reason for f in exact.files]
        assert len([f for f in exact.files if f.reason]) == len(exact.files) - 1
        est, ex = report("b", estimate), report("b", exact)
        assert ex.losses["G-a"] > 0 and ex.losses["G-b"] > 0 and "G-c" not in ex.losses
        assert est.losses == ex.losses
        assert (est.delete_files, est.reclaimable_bytes, est.min_offset_after) == (
            ex.delete_files,
            ex.reclaimable_bytes,
            ex.min_offset_after,
        )


def test_mqctl_msg_send_is_refused_at_91_and_accepted_below(cli: RunCli, tmp_path: Path) -> None:
    disk = FakeDiskUsage(0.50)
    with retention_cluster(tmp_path, disk) as rc:
        rc.send("TF", 1)  # the topic exists and has a route
        ns = ["-n", rc.cluster.namesrv_addr]
        disk.level = 0.91
        wait_until(lambda: rc.store.disk_full)
        refused = cli("msg", "send", *ns, "-t", "TF", "while full")
        assert refused.code == RetriableBrokerError.exit_code and "disk is full" in refused.stderr
        [line] = refused.stderr.splitlines()  # which broker, and where to look: not 'request failed'
        assert f"broker broker-a at {rc.cluster.broker_addr} refused it: " in line, line
        assert "'mqctl check disk'" in line, line
        disk.level = 0.70
        wait_until(lambda: not rc.store.disk_full)
        assert cli("msg", "send", *ns, "-t", "TF", "space again").code == 0
