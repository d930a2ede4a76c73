"""``mqctl store ...`` on the real RocketMQ 4.9.8 store ``store-a``: the manifest's answers, read-only."""

from __future__ import annotations

import csv
import fcntl
import hashlib
import io
import os
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.cli import RunCli
from tests.support.paths import store_a_manifest
from tests.support.ports import free_port
from tests.support.stores import keyed_store, unpack_store_a


@pytest.fixture(scope="module")
def store_a(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return unpack_store_a(tmp_path_factory.mktemp("store-a-cli"))


@pytest.fixture(scope="module")
def manifest() -> dict[str, Any]:
    return store_a_manifest()


def snapshot(root: Path) -> dict[str, tuple[int, int, str]]:
    """Every file under ``root`` with its size, mtime and SHA-256 (to prove nothing changed)."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            st = path.stat()
            out[str(path.relative_to(root))] = (
                st.st_size,
                st.st_mtime_ns,
                hashlib.sha256(path.read_bytes()).hexdigest(),
            )
    return out


def ok(result: Any) -> Any:
    assert result.code == 0, result.stderr
    return result.json()


def stored_copy(m: dict[str, Any]) -> tuple[str, int, int, str]:
    """Where the record carrying a sent message's topic and keys lives (delayed: the delivered copy)."""
    if m["delayed"]:
        c = m["deliveredCopy"]
        return c["topic"], c["queueId"], c["queueOffset"], c["offsetMsgId"]
    return m["topic"], m["queueId"], m["queueOffset"], m["offsetMsgId"]


# ------------------------------------------------------------------------------------ commitlog


def test_commitlog_ls_gives_the_manifest_files_records_and_topics(
    cli: RunCli, store_a: Path, manifest: dict[str, Any]
) -> None:
    rows = ok(cli("store", "commitlog", "ls", "--store", str(store_a), "-o", "json"))
    expected = manifest["verification"]["summary"]["commitlog"]["files"]
    assert [(r["file"], r["size"], r["data_bytes"], r["tail"]) for r in rows] == [
        (f["file"], f["size"], f["dataEnd"], f["tail"]) for f in expected
    ]
    assert [r["from_offset"] for r in rows] == [int(f["file"]) for f in expected]
    assert (
        sum(r["records"] for r in rows) == manifest["verification"]["summary"]["commitlog"]["records"] == 5612
    )
    topics: Counter[str] = Counter()
    for r in rows:
        topics.update(r["topics"])
    assert dict(topics) == manifest["counts"]["recordsInCommitLogPerTopic"]
    assert rows[0]["first_store_time"] == "2026-11-21T09:09:46.575Z"  # the index file's begin timestamp
    assert rows[-1]["last_store_time"] == "2026-11-21T09:10:14.169Z"  # the checkpoint's physicMsgTimestamp


def test_commitlog_and_index_ls_show_local_time_and_carry_ms_twins(cli: RunCli, store_a: Path) -> None:
    """As every other command: JSON has each time as ISO plus its _ms twin; a table shows local time."""
    env = {"TZ": "Asia/Tokyo"}
    files = ok(cli("store", "commitlog", "ls", "--store", str(store_a), "-o", "json"))
    assert files[0]["first_store_time"] == "2026-11-21T09:09:46.575Z"
    assert files[0]["first_store_time_ms"] == 1795252186575
    assert all(isinstance(r["last_store_time_ms"], int) for r in files)
    (index,) = ok(cli("store", "index", "ls", "--store", str(store_a), "-o", "json"))
    assert isinstance(index["begin_time_ms"], int) and index["begin_time_ms"] > 0
    assert index["begin_time"].endswith("Z")
    table = cli("store", "commitlog", "ls", "--store", str(store_a), env=env)
    assert table.code == 0, table.stderr
    assert "2026-11-21T18:09:46.575+09:00" in table.stdout and "09:09:46.575Z" not in table.stdout
    indexed = cli("store", "index", "ls", "--store", str(store_a), env=env)
    assert indexed.code == 0 and "+09:00" in indexed.stdout, indexed.stderr


def test_index_show_prints_times_as_every_other_table(cli: RunCli, store_a: Path) -> None:
    """A key's chain printed its store times in UTC with Z whatever the zone, while every other table
    (its own header view included) prints local time with the offset: its rows had no _ms twin."""
    env = {"TZ": "Asia/Tokyo"}
    chain = ["store", "index", "show", "--store", str(store_a), "-t", "FixA_Events", "-k", "sess-07"]
    rows = ok(cli(*chain, "-o", "json"))
    assert all(r["store_time"].endswith("Z") and r["store_time_ms"] > 0 for r in rows)
    table = cli(*chain, env=env)
    assert table.code == 0, table.stderr
    assert "+09:00" in table.stdout and "Z " not in table.stdout, table.stdout
    header = cli("store", "index", "show", "--store", str(store_a), env=env)
    assert header.code == 0 and "+09:00" in header.stdout, header.stderr


@pytest.mark.slow
def test_commitlog_ls_csv_and_yaml_carry_the_same_rows(cli: RunCli, store_a: Path) -> None:
    as_csv = cli("store", "commitlog", "ls", "--store", str(store_a), "-o", "csv")
    assert as_csv.code == 0, as_csv.stderr
    rows = list(csv.DictReader(io.StringIO(as_csv.stdout)))
    assert [int(r["records"]) for r in rows] == [2147, 1694, 1250, 521]
    as_yaml = cli("store", "commitlog", "ls", "--store", str(store_a), "-o", "yaml")
    assert [r["records"] for r in yaml.safe_load(as_yaml.stdout)] == [2147, 1694, 1250, 521]


# --------------------------------------------------------------------------------- consume queue


def test_cq_ls_counts_every_queue(cli: RunCli, store_a: Path, manifest: dict[str, Any]) -> None:
    rows = ok(cli("store", "cq", "ls", "--store", str(store_a), "-o", "json"))
    per_queue = {(r["topic"], r["queue_id"]): r for r in rows}
    for q in range(4):
        assert per_queue[("FixA_Orders", q)]["messages"] == 700
        assert per_queue[("FixA_Orders", q)]["files"] == 3
        assert per_queue[("FixA_Events", q)]["messages"] == 500
        assert per_queue[("FixA_Mixed", q)]["messages"] == 200
    assert {q for t, q in per_queue if t == "SCHEDULE_TOPIC_XXXX"} == {0, 2}
    assert per_queue[("%RETRY%FixA_CG_Retry", 0)]["max_offset"] == 2
    assert sum(r["messages"] for r in rows) == manifest["verification"]["summary"]["consumequeue"]["units"]
    only = ok(cli("store", "cq", "ls", "--store", str(store_a), "-t", "FixA_Mixed", "-o", "json"))
    assert [(r["topic"], r["queue_id"]) for r in only] == [("FixA_Mixed", q) for q in range(4)]


def test_cq_show_points_at_the_manifest_messages(
    cli: RunCli, store_a: Path, manifest: dict[str, Any]
) -> None:
    rows = ok(
        cli(
            "store",
            "cq",
            "show",
            "--store",
            str(store_a),
            "-t",
            "FixA_Orders",
            "-q",
            "1",
            "--offset",
            "650",
            "--max",
            "60",
            "-o",
            "json",
        )
    )
    assert [r["queue_offset"] for r in rows] == list(range(650, 700))  # stops at the queue's end
    expected = {
        m["queueOffset"]: m for m in manifest["messages"] if m["topic"] == "FixA_Orders" and m["queueId"] == 1
    }
    for row in rows:
        m = expected[row["queue_offset"]]
        assert row["msg_id"] == m["offsetMsgId"]
        assert row["commit_log_offset"] == m["commitLogOffset"]
        assert (row["keys"] or "").split() == m["keys"]
        assert row["tags"] == m["storedTags"]


def test_cq_show_of_the_schedule_queue_has_delivery_times_as_tags_codes(
    cli: RunCli, store_a: Path, manifest: dict[str, Any]
) -> None:
    rows = ok(
        cli(
            "store",
            "cq",
            "show",
            "--store",
            str(store_a),
            "-t",
            "SCHEDULE_TOPIC_XXXX",
            "-q",
            "0",
            "-o",
            "json",
        )
    )
    delayed = [m for m in manifest["messages"] if m["delayed"]]
    assert sorted(r["msg_id"] for r in rows) == sorted(m["offsetMsgId"] for m in delayed)
    for row in rows:
        stored_ms = round(datetime.fromisoformat(row["store_time"]).timestamp() * 1000)
        assert row["tags_code"] == stored_ms + 1000  # level 1 = 1 s


# ------------------------------------------------------------------------------------- index


def test_index_ls_and_show_give_the_manifest_header(
    cli: RunCli, store_a: Path, manifest: dict[str, Any]
) -> None:
    (expected,) = manifest["verification"]["summary"]["index"]["files"]
    (row,) = ok(cli("store", "index", "ls", "--store", str(store_a), "-o", "json"))
    assert (
        row["name"],
        row["begin_phy_offset"],
        row["end_phy_offset"],
        row["hash_slot_count"],
        row["index_count"],
    ) == (
        expected["name"],
        expected["beginPhyOffset"],
        expected["endPhyOffset"],
        expected["hashSlotCount"],
        expected["indexCount"],
    )
    assert (row["hash_slots"], row["max_index_count"], row["size"], row["full"], row["problem"]) == (
        5000,
        20000,
        420_040,
        False,
        None,
    )
    shown = ok(cli("store", "index", "show", "--store", str(store_a), expected["name"], "-o", "json"))
    assert shown["entries"] == expected["indexCount"] - 1
    assert shown["used_slots"] == expected["hashSlotCount"]
    assert shown["slots_pointing_past_count"] == 0


def test_index_show_walks_one_keys_chain(cli: RunCli, store_a: Path, manifest: dict[str, Any]) -> None:
    rows = ok(
        cli(
            "store",
            "index",
            "show",
            "--store",
            str(store_a),
            "-t",
            "FixA_Events",
            "-k",
            "sess-07",
            "-o",
            "json",
        )
    )
    expected = {
        stored_copy(m)[3]
        for m in manifest["messages"]
        if m["topic"] == "FixA_Events" and "sess-07" in m["keys"]
    }
    assert expected
    assert {r["msg_id"] for r in rows if r["record_has_key"]} == expected


# ----------------------------------------------------------------------------------- messages


@pytest.mark.parametrize(
    ("topic", "key"),
    [
        ("FixA_Orders", "cust-013"),
        ("FixA_Events", "evt-00077"),
        ("FixA_Mixed", "shared-4"),
        ("FixA_Mixed", "mix-j-0010"),
    ],
)
def test_msg_query_by_key_finds_exactly_the_records_with_that_key(
    cli: RunCli, store_a: Path, manifest: dict[str, Any], topic: str, key: str
) -> None:
    result = cli("store", "msg", "query", "--store", str(store_a), "-t", topic, "-k", key, "-o", "json")
    rows = ok(result)
    expected = {
        stored_copy(m)[3] for m in manifest["messages"] if stored_copy(m)[0] == topic and key in m["keys"]
    }
    assert {r["msg_id"] for r in rows} == expected
    assert all(key in r["keys"].split() and r["topic"] == topic for r in rows)
    assert "window:" not in result.stderr  # no time given: no "1970 .. now" line


def test_msg_query_window_excludes_later_messages(
    cli: RunCli, store_a: Path, manifest: dict[str, Any]
) -> None:
    first_orders_phase_done = next(
        s["at"] for s in manifest["steps"] if s["name"] == "orders phase 1 sent (java)"
    )
    # ord-02000 was sent in phase 2, after the end of this window
    result = cli(
        "store",
        "msg",
        "query",
        "--store",
        str(store_a),
        "-t",
        "FixA_Orders",
        "-k",
        "ord-02000",
        "--until",
        str(first_orders_phase_done),
        "-o",
        "json",
    )
    assert result.code == 3, result.stderr
    assert "window: 1970-01-01T00:00:00.000Z .. 2026-11-21T09:09:48.669Z" in result.stderr
    found = ok(
        cli(
            "store",
            "msg",
            "query",
            "--store",
            str(store_a),
            "-t",
            "FixA_Orders",
            "-k",
            "ord-02000",
            "--since",
            "2026-11-21T09:09:48.669Z",
            "-o",
            "json",
        )
    )
    assert len(found) == 1


def test_msg_query_by_id_decodes_compressed_bodies(
    cli: RunCli, store_a: Path, manifest: dict[str, Any]
) -> None:
    for m in [x for x in manifest["messages"] if x["compressed"]][:3] + manifest["messages"][:2]:
        shown = ok(
            cli("store", "msg", "query", "--store", str(store_a), "--id", m["offsetMsgId"], "-o", "json")
        )
        assert shown["topic"] == m["topic"] and shown["queue_offset"] == m["queueOffset"]
        assert hashlib.sha256(shown["body"].encode()).hexdigest() == m["bodySha256"]
        assert shown["body_size"] == m["bodyLength"]
        assert shown["sys_flag"] == m["sysFlag"]


# ------------------------------------------------------------------------------------- verify


def test_verify_reports_a_consistent_store(cli: RunCli, store_a: Path, manifest: dict[str, Any]) -> None:
    report = ok(cli("store", "verify", "--store", str(store_a), "-o", "json"))
    summary = manifest["verification"]["summary"]
    assert report["ok"] is True and report["problems"] == []
    assert report["records"] == summary["commitlog"]["records"]
    assert report["units"] == summary["consumequeue"]["units"]
    assert report["records_without_unit"] == summary["consumequeue"]["recordsWithoutUnit"] == 0
    assert report["index_entries"] == summary["index"]["files"][0]["indexCount"] - 1
    assert (report["crc_errors"], report["unit_errors"], report["index_errors"]) == (0, 0, 0)


def test_verify_finds_a_flipped_body_byte_and_a_bad_unit(
    cli: RunCli, tmp_path: Path, manifest: dict[str, Any]
) -> None:
    root = unpack_store_a(tmp_path)
    victim = manifest["messages"][10]  # in commitlog/00000000000000000000
    with open(root / "commitlog" / "00000000000000000000", "r+b") as f:
        f.seek(victim["commitLogOffset"] + 200)  # inside the body of a 64+ byte message
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x01]))
    with open(root / "consumequeue" / "FixA_Events" / "0" / "00000000000000000000", "r+b") as f:
        f.seek(8)  # size of unit 0
        f.write((123).to_bytes(4, "big"))
    result = cli("store", "verify", "--store", str(root), "-o", "json")
    assert result.code == 10
    report = result.json()
    assert report["ok"] is False
    assert report["crc_errors"] == 1 and report["unit_errors"] == 1
    assert any(f"{victim['commitLogOffset']}" in p and "CRC" in p for p in report["problems"])
    assert any("consumequeue/FixA_Events/0 offset 0" in p for p in report["problems"])
    assert "has problems" in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize(("byte", "field"), [(0, "beginTimestamp"), (27, "endPhyOffset"), (38, "indexCount")])
def test_index_ls_and_verify_report_a_bad_index_header(
    cli: RunCli, tmp_path: Path, byte: int, field: str
) -> None:
    """A flipped header byte: ``index ls`` shows the file with what is wrong (no ValueError on a timestamp
    past any calendar) and ``verify`` fails naming it; neither changes the store."""
    root = unpack_store_a(tmp_path)
    (path,) = (root / "index").iterdir()
    with open(path, "r+b") as f:
        f.seek(byte)
        value = f.read(1)[0]
        f.seek(byte)
        f.write(bytes([value ^ 0x40]))
    before = snapshot(root)
    (row,) = ok(cli("store", "index", "ls", "--store", str(root), "-o", "json"))
    assert row["name"] == path.name and field in row["problem"]
    table = cli("store", "index", "ls", "--store", str(root))
    assert table.code == 0 and path.name in table.stdout, table.stderr
    result = cli("store", "verify", "--store", str(root), "-o", "json")
    assert result.code == 10
    report = result.json()
    assert report["index_errors"] >= 1 and report["ok"] is False
    assert any(f"index/{path.name}: bad header" in p and field in p for p in report["problems"])
    assert snapshot(root) == before


@pytest.mark.slow
def test_verify_goes_on_past_bad_files_and_reports_each(cli: RunCli, tmp_path: Path) -> None:
    """A record with a bad magic code, a short CommitLog file, a short ConsumeQueue file and a damaged
    index header: each is reported and the walk goes on (the queue after the bad one, the CommitLog
    files after the corrupt and the short one)."""
    root = unpack_store_a(tmp_path)
    with open(root / "commitlog" / "00000000000000000000", "r+b") as f:
        f.seek(4513 + 4)  # the magic code of a record in the first file (manifest message 10)
        f.write(b"\x00\x00\x00\x01")
    os.truncate(root / "commitlog" / "00000000000002097152", 1000)
    os.truncate(root / "consumequeue" / "FixA_Events" / "0" / "00000000000000000000", 100)
    (index,) = (root / "index").iterdir()
    with open(index, "r+b") as f:
        f.seek(38)  # indexCount
        value = f.read(1)[0]
        f.seek(38)
        f.write(bytes([value ^ 0x40]))
    result = cli("store", "verify", "--store", str(root), "-o", "json")
    assert result.code == 10, result.stderr
    report = result.json()
    problems = report["problems"]
    assert report["bad_files"] == 2 and report["commitlog_files"] == 3 and report["corrupt_files"] == 1
    assert any("@4513" in p and "bad magic code" in p for p in problems)
    assert any("commitlog/00000000000002097152: size 1000" in p and "skipped" in p for p in problems)
    assert any("FixA_Events/0/00000000000000000000: size 100" in p and "skipped" in p for p in problems)
    assert any(f"index/{index.name}: bad header" in p for p in problems)
    assert report["records"] > 0 and report["units"] > 0  # the other files were read
    assert len(problems) == report["problems_found"] > 50 and report["problems_not_listed"] == 0
    assert f"({report['problems_found']} found" in result.stderr


@pytest.mark.slow
def test_verify_lists_every_problem_and_max_problems_counts_the_rest(
    cli: RunCli, tmp_path: Path, manifest: dict[str, Any]
) -> None:
    """60 flipped body bytes: JSON lists all 60; ``--max-problems 5`` lists 5 and says 55 more, in JSON
    and in a table."""
    root = unpack_store_a(tmp_path)
    victims = [
        m for m in manifest["messages"] if m["bodyLength"] >= 300 and not m["compressed"] and not m["delayed"]
    ][:60]
    assert len(victims) == 60
    for victim in victims:
        cl_file = root / "commitlog" / f"{victim['commitLogOffset'] // 1_048_576 * 1_048_576:020d}"
        with open(cl_file, "r+b") as f:
            f.seek(victim["commitLogOffset"] % 1_048_576 + 200)  # inside the body
            byte = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([byte[0] ^ 0x01]))
    args = ("store", "verify", "--store", str(root))
    result = cli(*args, "-o", "json")
    assert result.code == 10, result.stderr
    report = result.json()
    assert report["crc_errors"] == report["problems_found"] == len(report["problems"]) == 60
    for victim in victims:
        assert sum(f"@{victim['commitLogOffset']}:" in p for p in report["problems"]) == 1, victim
    five = cli(*args, "-o", "json", "--max-problems", "5")
    assert five.code == 10
    short = five.json()
    assert short["problems"] == report["problems"][:5]
    assert (short["problems_found"], short["problems_not_listed"]) == (60, 55)
    assert "55 more problems" in five.stderr
    table = cli(*args, "--max-problems", "5")
    assert table.code == 10
    assert sum(p in table.stdout for p in report["problems"]) == 5
    assert "55 more problems" in table.stderr


def test_msg_query_skips_a_bad_index_header_and_finds_older_keys(cli: RunCli, tmp_path: Path) -> None:
    """The newest index file's header is damaged: keys of the older files are still found offline."""
    root = tmp_path / "store"
    keys = keyed_store(root, max_hash_slot_num=100)  # 4 entries per slot, as ``layout`` reads them
    newest = sorted((root / "index").iterdir())[-1]
    with open(newest, "r+b") as f:
        f.seek(2)  # beginTimestamp minus 2**40 ms (~35 years): the walk would stop at this file
        value = f.read(1)[0]
        f.seek(2)
        f.write(bytes([value ^ 0x01]))
    args = ("store", "msg", "query", "--store", str(root), "-t", "K", "--since", "-1d", "-o", "json")
    for key in (keys[0], keys[250]):  # in the oldest and the middle file
        result = cli(*args, "-k", key)
        assert result.code == 0, result.stderr
        assert [r["keys"] for r in result.json()] == [key]


# -------------------------------------------------------------------------- read-only, errors


@pytest.mark.slow
def test_commands_change_nothing_and_ignore_the_brokers_lock(cli: RunCli, tmp_path: Path) -> None:
    root = unpack_store_a(tmp_path)
    before = snapshot(root)
    fd = os.open(root / "lock", os.O_RDWR)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)  # as a running broker holds it
        for args in (
            ["commitlog", "ls"],
            ["cq", "ls"],
            ["cq", "show", "-t", "FixA_Orders", "-q", "0"],
            ["index", "ls"],
            ["index", "show"],
            ["msg", "query", "-t", "FixA_Orders", "-k", "ord-00001"],
            ["msg", "query", "--id", "7F00000100002A9F0000000000000000"],
            ["verify"],
        ):
            result = cli("store", *args, "--store", str(root), "-o", "json")
            assert result.code == 0, (args, result.stderr)
    finally:
        os.close(fd)
    assert snapshot(root) == before
    assert not (root / "abort").exists()


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["cq", "show", "-t", "NoSuchTopic", "-q", "0"], 3),
        (["cq", "show", "-t", "FixA_Orders", "-q", "0", "--offset", "700"], 3),
        (["msg", "query", "-t", "FixA_Orders", "-k", "no-such-key"], 3),
        (["msg", "query", "--id", "7F00000100002A9F00000000FFFFFFFF"], 3),
        (["index", "show", "20990101000000000"], 3),
        (["msg", "query", "-k", "ord-00001"], 2),
        (["msg", "query", "--id", "not-hex"], 2),
        (["msg", "query", "-t", "FixA_Orders", "-k", "k", "--since", "yesterday"], 2),
        (["index", "show", "-t", "FixA_Orders"], 2),
    ],
)
def test_exit_codes(cli: RunCli, store_a: Path, args: list[str], code: int) -> None:
    result = cli("store", *args, "--store", str(store_a))
    assert result.code == code, result.stderr
    assert result.stderr.startswith("mqctl: error:") or "window:" in result.stderr


@pytest.mark.slow
def test_a_directory_that_is_not_a_store(cli: RunCli, tmp_path: Path) -> None:
    result = cli("store", "commitlog", "ls", "--store", str(tmp_path))
    assert result.code == 3
    assert "not a store directory" in result.stderr
    assert (
        cli("store", "cq", "ls", "--store", str(tmp_path / "missing")).code == 3
    )  # not found, as a missing file is everywhere


@pytest.mark.parametrize("phase", ["_verify_queues", "_verify_index"])
def test_ctrl_c_in_verify_prints_the_partial_report_and_one_line(
    cli: RunCli, store_a: Path, monkeypatch: pytest.MonkeyPatch, phase: str
) -> None:
    """Ctrl-C (here: at the start of a later phase) ends the walk: what was checked is reported, the report
    says where it stopped, and one line says it was interrupted; exit 130."""
    from store import inspect

    def interrupted(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(inspect, phase, interrupted)
    result = cli("store", "verify", "--store", str(store_a), "-o", "json")
    assert result.code == 130, result.stderr
    report = result.json()
    assert report["records"] == 5612 and report["ok"] is False
    assert report["interrupted"] == (
        "during the ConsumeQueue check" if phase == "_verify_queues" else "during the IndexFile check"
    )
    (line,) = result.stderr.strip().splitlines()
    assert line == f"mqctl: error: interrupted {report['interrupted']}: the report covers what was checked"
    table = cli("store", "verify", "--store", str(store_a))
    assert table.code == 130 and "interrupted" in table.stdout


def test_ctrl_c_in_verify_does_not_go_on_to_compare_with_a_broker(
    cli: RunCli, store_a: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An interrupted verify with --against reports and exits 130 at once: the comparison (minutes of
    requests on a large store) is not started after the operator asked to stop."""
    from store import inspect

    def interrupted(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(inspect, "_verify_queues", interrupted)
    result = cli(
        "store", "verify", "--store", str(store_a), "--against", f"127.0.0.1:{free_port()}", "-o", "json"
    )
    assert result.code == 130, result.stderr
    assert "against" not in result.json()
