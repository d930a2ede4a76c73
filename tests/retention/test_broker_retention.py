"""The broker's clean service on a simulated disk: watermarks, refused writes, manual trigger (329),
the plan extension, CLEAN_EXPIRED_CONSUMEQUEUE (306), and a consistent store after deletion."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from daemon.broker.clean import CLEAN_PLAN, PlanBody
from daemon.broker.headers import QueryMessageRequestHeader, UpdateConsumerOffsetRequestHeader
from daemon.remoting.codes import RequestCode, ResponseCode
from store.cleanup import EXPIRED, WATERMARK, FakeDiskUsage
from store.record import decode_records
from tests.support.retention import RetentionCluster, retention_cluster, wait_until


def _commit(rc: RetentionCluster, group: str, topic: str, queue_id: int, offset: int) -> None:
    header = UpdateConsumerOffsetRequestHeader(group, topic, queue_id, offset)
    assert rc.run(rc.client.call(RequestCode.UPDATE_CONSUMER_OFFSET, header.to_ext_fields())).code == 0


def _plan(rc: RetentionCluster) -> PlanBody:
    resp = rc.run(rc.client.call(CLEAN_PLAN))
    assert resp.code == 0, resp.remark
    return PlanBody.loads(resp.body)


def test_watermarks_refuse_writes_at_91_and_accept_again_below(tmp_path: Path) -> None:
    disk = FakeDiskUsage(0.50)
    with retention_cluster(tmp_path, disk) as rc:
        rc.send("TR", 3)
        disk.level = 0.91
        wait_until(lambda: rc.store.disk_full)
        refused = rc.run(rc.client.send("TR", b"while full"))
        assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE
        assert "disk is full" in (refused.remark or "")
        info = rc.run(rc.client.call(RequestCode.GET_BROKER_RUNTIME_INFO))
        assert b'"commitLogDiskRatio":"0.91"' in info.body
        disk.level = 0.80  # below the warning watermark: the next cleanup run or disk check clears the flag
        wait_until(lambda: not rc.store.disk_full)
        assert rc.run(rc.client.send("TR", b"space again")).code == 0


@pytest.mark.slow
def test_76_deletes_only_expired_86_deletes_young_files_too(tmp_path: Path) -> None:
    disk = FakeDiskUsage(0.50)
    with retention_cluster(tmp_path, disk) as rc:
        rc.send("TR", 400)
        files = rc.commitlog_files()
        assert len(files) >= 6
        rc.age_all_but_last(0)  # flushed; mtimes now, i.e. young
        old = rc.root / "commitlog" / files[0]
        when = time.time() - 73 * 3600
        os.utime(old, (when, when))
        os.utime(rc.root / "commitlog" / files[1], (when, when))
        rc.after_cleanup_runs()  # several cleanup runs at 50 %: nothing, it is not deleteWhen
        assert rc.commitlog_files() == files
        disk.level = 0.76  # space trigger: expired files only, stops at the first young one
        wait_until(lambda: rc.commitlog_files() == files[2:])
        rc.after_cleanup_runs()
        assert rc.commitlog_files() == files[2:]
        disk.level = 0.86  # clean immediately: young files go too, never the newest
        wait_until(lambda: rc.commitlog_files() == files[-1:])
        assert not rc.store.disk_full
        assert rc.store.min_phy_offset == int(files[-1])
        assert rc.run(rc.client.send("TR", b"still writable at 86")).code == 0


@pytest.mark.slow
def test_manual_trigger_plan_losses_and_consistency_after_deletion(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    disk = FakeDiskUsage(0.30)
    with retention_cluster(tmp_path, disk) as rc:
        # Queues' min offsets follow the CommitLog at the end of the cleanup run that deleted its files, as
        # in RocketMQ (a pull in between skips the units below the CommitLog's minimum). Hold that step
        # until the files are seen gone, so the test meets the window every time, not only under load.
        cleaner = rc.store.cleaner
        logic_step = cleaner.delete_logic_files
        files_gone = threading.Event()

        def held_logic_step() -> None:
            if cleaner.commit_log.min_offset > 0:
                files_gone.wait(15)
            logic_step()

        monkeypatch.setattr(cleaner, "delete_logic_files", held_logic_step)
        rc.send("TR", 300, keys="k-old")
        rc.send("TGONE", 4)
        rc.send("TR", 200, keys="k-new")  # the two files kept hold only these
        files = rc.commitlog_files()
        assert len(files) >= 6
        _commit(rc, "G-behind", "TR", 0, 10)  # far behind: loses messages
        _commit(rc, "G-done", "TR", 0, rc.store.get_max_offset("TR", 0))
        rc.age_all_but_last(100)
        young = rc.root / "commitlog" / files[-2]
        now = time.time()
        os.utime(young, (now, now))

        plan = _plan(rc)
        assert [f.name for f in plan.files] == files
        assert [f.reason for f in plan.files] == [EXPIRED] * (len(files) - 2) + [None, None]
        assert plan.files[0].expired and not plan.files[-2].expired
        assert plan.files[0].age_ms >= 100 * 3_600_000
        doomed = plan.files[: len(files) - 2]
        lost = sum(f.unconsumed.get("G-behind", 0) for f in doomed)
        new_min = int(files[-2])
        cq = rc.store.get_consume_queue("TR", 0)
        assert cq is not None
        first_kept = rc.store.first_offset_at("TR", 0, new_min)  # before deletion: not read off the new min
        assert lost == first_kept - 10 > 0
        assert all(f.unconsumed.get("G-done", 0) == 0 for f in plan.files)
        assert rc.commitlog_files() == files  # the plan changed nothing

        assert rc.run(rc.client.call(RequestCode.DELETE_EXPIRED_COMMITLOG)).code == 0
        wait_until(lambda: rc.commitlog_files() == files[-2:])
        assert rc.store.min_phy_offset == new_min
        files_gone.set()
        wait_until(lambda: rc.store.get_min_offset("TR", 0) > 0)  # the run's last step has moved it
        min_q = rc.store.get_min_offset("TR", 0)
        assert min_q == first_kept
        cq_files = sorted(os.listdir(rc.root / "consumequeue" / "TR" / "0"))  # 100 units per file
        assert 0 < int(cq_files[0]) // 20 <= min_q < int(cq_files[0]) // 20 + 100  # wholly-older files gone

        moved = rc.run(rc.client.pull("G-behind", "TR", 0, 10))
        assert moved.code == ResponseCode.PULL_OFFSET_MOVED
        assert int(moved.ext_fields["nextBeginOffset"]) == min_q
        found = rc.run(rc.client.pull("G-behind", "TR", 0, min_q, max_nums=1))
        assert found.code == ResponseCode.SUCCESS
        assert decode_records(found.body)[0].commit_log_offset >= new_min

        def query(key: str) -> list[int]:
            header = QueryMessageRequestHeader("TR", key, 64, 0, 2**62)
            resp = rc.run(rc.client.call(RequestCode.QUERY_MESSAGE, header.to_ext_fields()))
            return [m.commit_log_offset for m in decode_records(resp.body)] if resp.code == 0 else []

        assert query("k-old") == []  # every index hit points below the minimum: skipped
        kept = query("k-new")
        assert kept and all(off >= new_min for off in kept)

        assert rc.store.get_consume_queue("TGONE", 0) is not None
        assert rc.run(rc.client.call(RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE)).code == 0
        assert rc.store.get_consume_queue("TGONE", 0) is None  # all its messages were in deleted files
        assert rc.store.get_consume_queue("TR", 0) is not None


def test_plan_reports_watermark_reason(tmp_path: Path) -> None:
    disk = FakeDiskUsage(0.88)
    with retention_cluster(tmp_path, disk, clean_resource_interval=3_600_000) as rc:
        rc.send("TR", 200)
        plan = _plan(rc)
        assert plan.forcibly and plan.disk_ratio == 0.88
        assert [f.reason for f in plan.files] == [WATERMARK] * (len(plan.files) - 1) + [None]
