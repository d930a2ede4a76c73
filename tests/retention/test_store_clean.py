"""``mqctl store clean`` and the retention columns of ``mqctl store commitlog ls`` on copies of the real
RocketMQ 4.9.8 store ``store-a``, through the real entry point; losses are checked against the manifest."""

from __future__ import annotations

import fcntl
import json
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import RunCli
from tests.support.paths import store_a_manifest
from tests.support.stores import unpack_store_a

FILE = 1_048_576
HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS


@pytest.fixture
def store_a(tmp_path: Path) -> Path:
    return unpack_store_a(tmp_path)


@pytest.fixture(scope="module")
def manifest() -> dict[str, Any]:
    return store_a_manifest()


def _json(result: Any) -> Any:
    assert result.code == 0, result.stderr
    return json.loads(result.stdout)


def _expected_losses(manifest: dict[str, Any], below: int) -> dict[str, int]:
    """From the manifest alone: per group, messages at or after its committed offset stored below ``below``."""
    committed = {
        (topic, int(q)): (group, off)
        for group, topics in manifest["consumerOffsets"].items()
        for topic, queues in topics.items()
        for q, off in queues.items()
    }
    out: dict[str, int] = {}
    for m in manifest["messages"]:
        hit = committed.get((m["topic"], m["queueId"]))
        if hit and m["queueOffset"] >= hit[1] and m["commitLogOffset"] < below:
            out[hit[0]] = out.get(hit[0], 0) + 1
    return out


def _age(root: Path, hours: float) -> None:
    when = time.time() - hours * 3600
    for p in (root / "commitlog").iterdir():
        os.utime(p, (when, when))


def test_plan_only_changes_nothing_and_names_the_losers(
    cli: RunCli, store_a: Path, manifest: dict[str, Any]
) -> None:
    _age(store_a, 100)
    before = {p.name: p.stat().st_mtime for p in (store_a / "commitlog").iterdir()}
    plan = _json(cli("store", "clean", "--store", str(store_a), "-o", "json"))
    assert [f["action"] for f in plan["files"]] == ["delete", "delete", "delete", "keep"]
    assert {f["why"] for f in plan["files"][:3]} == {"expired"}
    assert (
        plan["reserved_hours"] == 72
        and plan["files"][0]["expired"]
        and 4 * DAY_MS <= plan["files"][0]["age_ms"] < 5 * DAY_MS  # a number in JSON; "4d04h" in tables
    )
    assert plan["reclaimable_bytes"] == 3 * FILE and plan["min_offset_after"] == 3 * FILE
    table = cli("store", "clean", "--store", str(store_a))  # the newest is expired too: why it stays
    assert "1 expired file kept: the newest file (being written) is never deleted" in table.stdout
    assert plan["losses"] == _expected_losses(manifest, 3 * FILE)
    assert plan["losses"]  # FixA_CG_Orders has not consumed everything in those files
    assert not plan["executed"]
    assert {p.name: p.stat().st_mtime for p in (store_a / "commitlog").iterdir()} == before

    below = _json(cli("store", "clean", "--store", str(store_a), "--watermark", "95", "-o", "json"))
    assert below["trigger"].endswith(
        "waits for deleteWhen or 'mqctl broker clean --execute')"
    )  # not "or 329"

    young = _json(cli("store", "clean", "--store", str(store_a), "--reserved-hours", "200", "-o", "json"))
    assert young["delete_files"] == 0 and [f["expired"] for f in young["files"]] == [False] * 4


def test_reserved_hours_0_execute_keeps_only_the_newest_and_the_store_verifies(
    cli: RunCli, store_a: Path, manifest: dict[str, Any]
) -> None:
    res = cli("store", "clean", "--store", str(store_a), "--reserved-hours", "0", "--execute", "--yes")
    assert res.code == 0, res.stderr
    assert "deleted 3 CommitLog files" in res.stderr
    assert (
        "FixA_CG_Orders" in res.stdout
    )  # the plan printed before deleting names the group that loses messages
    assert sorted(os.listdir(store_a / "commitlog")) == [f"{3 * FILE:020d}"]
    verify = cli("store", "verify", "--store", str(store_a), "-o", "json")
    assert verify.code == 0, verify.stdout + verify.stderr
    assert json.loads(verify.stdout)["ok"] is True
    queues = {
        (q["topic"], q["queue_id"]): q
        for q in _json(cli("store", "cq", "ls", "--store", str(store_a), "-o", "json"))
    }
    orders = queues[("FixA_Orders", 0)]
    assert orders["first_phys_offset"] >= 3 * FILE  # the queue's min offset moved past the deleted files
    expected = min(
        m["queueOffset"]
        for m in manifest["messages"]
        if m["topic"] == "FixA_Orders" and m["queueId"] == 0 and m["commitLogOffset"] >= 3 * FILE
    )
    assert orders["min_offset"] == expected


@pytest.mark.slow
def test_refuses_while_a_broker_holds_the_lock(cli_process: RunCli, store_a: Path) -> None:
    """A lock another process holds (a lock is per process): the CLI runs as a subprocess here."""
    fd = os.open(store_a / "lock", os.O_RDWR)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
        for args in ([], ["--execute"]):
            res = cli_process("store", "clean", "--store", str(store_a), "--reserved-hours", "0", *args)
            assert res.code == 4 and "locked" in res.stderr
            # the running broker's own plan is one command away: the line names it
            assert "'mqctl broker clean'" in res.stderr, res.stderr
    finally:
        os.close(fd)
    assert len(os.listdir(store_a / "commitlog")) == 4


def test_force_watermark_plans_unexpired_files(cli: RunCli, store_a: Path) -> None:
    # every real disk is fuller than 1 %: young files become deletable, never the newest
    plan = _json(
        cli(
            "store",
            "clean",
            "--store",
            str(store_a),
            "--reserved-hours",
            "9999",
            "--force-watermark",
            "1",
            "-o",
            "json",
        )
    )
    assert [f["why"] for f in plan["files"]] == ["watermark", "watermark", "watermark", None]


def test_commitlog_ls_retention_columns(cli: RunCli, store_a: Path) -> None:
    _age(store_a, 50)
    rows = _json(
        cli("store", "commitlog", "ls", "--store", str(store_a), "--reserved-hours", "48", "-o", "json")
    )
    assert [r["expired"] for r in rows] == [True] * 4
    assert [r["reclaimable"] for r in rows] == [FILE, FILE, FILE, 0]  # never the newest
    assert all(50 * HOUR_MS <= r["age_ms"] < 51 * HOUR_MS for r in rows)
    table = cli("store", "commitlog", "ls", "--store", str(store_a), "--reserved-hours", "48")
    assert table.stdout.count("2d02h") == 4 and table.stdout.count("1.0 MiB") >= 3  # sizes for people
    assert "{" not in table.stdout and "FixA_" in table.stdout  # topics as 'name=count', never JSON
    plan = cli("store", "clean", "--store", str(store_a), "--reserved-hours", "48")
    assert plan.code == 0, plan.stderr
    assert "{" not in plan.stdout and "FixA_CG_Orders=" in plan.stdout  # unconsumed per group, as data
    # FixA_CG_Orders committed 400 of 700 per queue: the files holding its tail are not consumed by all
    assert [r["consumed_by_all_groups"] for r in rows] == [True, True, False, False]
    default = _json(cli("store", "commitlog", "ls", "--store", str(store_a), "-o", "json"))
    assert [r["expired"] for r in default] == [False] * 4 and {r["reclaimable"] for r in default} == {0}


def _commitlog_state(cli: RunCli, root: Path) -> tuple[dict[str, bytes], int]:
    """Every CommitLog file's bytes and the records ``store commitlog ls`` counts."""
    files = {p.name: p.read_bytes() for p in sorted((root / "commitlog").iterdir())}
    return files, sum(
        r["records"] for r in _json(cli("store", "commitlog", "ls", "--store", str(root), "-o", "json"))
    )


def _damage_second_file(root: Path) -> None:
    """Garbage over several records: the record boundaries after the first one hit are lost, so recovery
    cuts the log there (a record whose body alone is hit is set aside alone instead)."""
    with open(root / "commitlog" / f"{FILE:020d}", "r+b") as f:
        f.seek(5000)
        f.write(b"\xde\xad\xbe\xef" * 1024)


@pytest.mark.slow
def test_execute_refuses_a_store_that_needs_recovery(cli: RunCli, store_a: Path) -> None:
    _damage_second_file(store_a)
    files_before, records_before = _commitlog_state(cli, store_a)
    cq_before = sorted(p.relative_to(store_a) for p in (store_a / "consumequeue").rglob("*") if p.is_file())
    args = ("store", "clean", "--store", str(store_a), "--reserved-hours", "0")
    plan = _json(cli(*args, "-o", "json"))
    assert plan["delete_files"] == 1 and plan["recovery"] is None  # the recovery step is not part of it

    res = cli(*args, "--execute", "--yes")
    assert res.code == 10, res.stderr
    error = [line for line in res.stderr.splitlines() if line.startswith("mqctl: error:")]
    assert len(error) == 1
    bad = re.search(rf"bad record at offset (\d+) in {FILE:020d}", error[0])
    assert bad and FILE < int(bad[1]) <= FILE + 5000  # the record the damage hit
    assert f"delete 2 later files ({2 * FILE:020d}, {3 * FILE:020d}" in error[0]
    assert "--allow-recovery" in error[0]
    assert _commitlog_state(cli, store_a) == (files_before, records_before)
    assert (
        sorted(p.relative_to(store_a) for p in (store_a / "consumequeue").rglob("*") if p.is_file())
        == cq_before
    )

    with_recovery = _json(cli(*args, "--allow-recovery", "-o", "json"))
    assert with_recovery["recovery"] and f"cut the CommitLog at offset {bad[1]}" in with_recovery["recovery"]
    assert not with_recovery["executed"] and _commitlog_state(cli, store_a)[0] == files_before

    done = _json(cli(*args, "--allow-recovery", "--execute", "--yes", "-o", "json"))
    why = {r["file"]: r["why"] for r in done["removed"]}
    assert done["executed"] and why[f"commitlog/{0:020d}"] == "expired"
    assert why[f"commitlog/{2 * FILE:020d}"] == why[f"commitlog/{3 * FILE:020d}"] == "recovery"
    assert sorted(os.listdir(store_a / "commitlog")) == [f"{FILE:020d}"]
    assert not (store_a / "abort").exists()


def test_execute_removes_exactly_the_planned_files_and_lists_them(cli: RunCli, store_a: Path) -> None:
    now = time.time()
    for p in (store_a / "commitlog").iterdir():  # only the first file expired: a plan deleting one file
        os.utime(p, (now, now))
    old = now - 100 * 3600
    os.utime(store_a / "commitlog" / f"{0:020d}", (old, old))
    args = ("store", "clean", "--store", str(store_a))
    plan = _json(cli(*args, "-o", "json"))
    assert [f["action"] for f in plan["files"]] == ["delete", "keep", "keep", "keep"]
    planned = [r["file"] for r in plan["removes"]]
    assert planned[0] == f"commitlog/{0:020d}" and len(planned) > 1  # its ConsumeQueue files are named too
    before = {str(p.relative_to(store_a)) for p in store_a.rglob("*") if p.is_file()}

    res = cli(*args, "--execute", "-o", "json")  # not a terminal: no --yes, nothing happens
    assert res.code == 2 and "--yes" in res.stderr
    assert {str(p.relative_to(store_a)) for p in store_a.rglob("*") if p.is_file()} == before

    done = _json(cli(*args, "--execute", "--yes", "-o", "json"))
    assert done["executed"] and [r["file"] for r in done["removed"]] == planned
    assert done["deleted"] == [f"{0:020d}"]
    after = {str(p.relative_to(store_a)) for p in store_a.rglob("*") if p.is_file()}
    assert before - after == set(planned) and after <= before
    table = cli(*args, "--execute", "--yes", "--reserved-hours", "0")  # table output: one row per file
    assert table.code == 0, table.stderr
    assert "removed" in table.stdout and f"commitlog/{FILE:020d}" in table.stdout
