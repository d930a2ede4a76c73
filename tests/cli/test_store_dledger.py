"""``mqctl store ...`` offline on a DLedger-mode store (4.9.8's DLedgerCommitLog layout) our engine wrote."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from store import dledger as dl
from store.dledger_log import DLedgerLog
from store.message import Message
from tests.support.cli import RunCli
from tests.support.stores import dledger_store

COUNT = 400


@pytest.fixture
def dstore(tmp_path: Path) -> tuple[Path, list[Message]]:
    root = tmp_path / "store"
    return root, dledger_store(root, COUNT)


def ok(result: Any) -> Any:
    assert result.code == 0, result.stdout + result.stderr
    return json.loads(result.stdout)


def test_commitlog_ls_reads_the_dledger_data_files(cli: RunCli, dstore: tuple[Path, list[Message]]) -> None:
    root, _msgs = dstore
    rows = ok(cli("store", "commitlog", "ls", "--store", str(root), "-o", "json"))
    names = sorted(os.listdir(root / "dledger-n0" / "data"))
    assert [r["file"] for r in rows] == names and len(names) >= 2
    assert sum(r["records"] for r in rows) == COUNT
    assert rows[0]["tail"] == "blank-filler" and rows[0]["topics"] == {"D": rows[0]["records"]}


def test_verify_finds_the_store_consistent(cli: RunCli, dstore: tuple[Path, list[Message]]) -> None:
    root, _msgs = dstore
    report = ok(cli("store", "verify", "--store", str(root), "-o", "json"))
    assert report["ok"] is True, report["problems"]
    assert (report["records"], report["units"], report["records_without_unit"]) == (COUNT, COUNT, 0)
    assert report["index_entries"] >= COUNT


def test_verify_reports_a_damaged_record_in_an_entry(cli: RunCli, dstore: tuple[Path, list[Message]]) -> None:
    root, _msgs = dstore
    data = root / "dledger-n0" / "data" / "00000000000000000000"
    raw = bytearray(data.read_bytes())
    raw[dl.BODY_OFFSET + 100] ^= 0xFF  # a body byte of the first record (its entry header intact)
    data.write_bytes(bytes(raw))
    result = cli("store", "verify", "--store", str(root), "-o", "json")
    assert result.code != 0
    assert json.loads(result.stdout)["crc_errors"] == 1


@pytest.mark.parametrize("which", ["first", "last"])  # before the files recovery reads, and among them
def test_verify_reports_an_entry_failing_its_body_crc(cli: RunCli, tmp_path: Path, which: str) -> None:
    root = tmp_path / "store"
    dledger_store(root, 3 * COUNT)
    files = sorted((root / "dledger-n0" / "data").iterdir())
    assert len(files) > 3  # recovery walks the last three
    data = files[0 if which == "first" else -1]
    raw = bytearray(data.read_bytes())
    at, entry = 0, dl.decode_entry(raw, 0)
    while which == "last" and at + entry.size < len(raw) and dl.decode_header(raw, at + entry.size)[0] == 1:
        at += entry.size
        entry = dl.decode_entry(raw, at)
    raw[at + entry.size - 2] ^= 0xFF  # in the record's properties: its own BODYCRC does not cover them
    data.write_bytes(bytes(raw))
    result = cli("store", "verify", "--store", str(root), "-o", "json")
    assert result.code != 0
    report = json.loads(result.stdout)
    assert report["crc_errors"] == 1
    assert any(f"entry {entry.index}: body crc" in p for p in report["problems"]), report["problems"]


def test_cq_and_msg_query_point_into_the_entries(cli: RunCli, dstore: tuple[Path, list[Message]]) -> None:
    root, _msgs = dstore
    queues = ok(cli("store", "cq", "ls", "--store", str(root), "-o", "json"))
    assert sorted((q["topic"], q["queue_id"], q["max_offset"]) for q in queues) == [
        ("D", 0, 200),
        ("D", 1, 200),
    ]
    shown = ok(cli("store", "cq", "show", "--store", str(root), "-t", "D", "-q", "1", "-o", "json"))
    first_entry = dl.decode_entry((root / "dledger-n0" / "data" / "00000000000000000000").read_bytes())
    # queue 1's first message is the second entry: its record starts BODY_OFFSET bytes into it
    assert shown[0]["commit_log_offset"] == first_entry.size + dl.BODY_OFFSET
    assert shown[0]["msg_id"].endswith(format(first_entry.size + dl.BODY_OFFSET, "016X"))
    [hit] = ok(cli("store", "msg", "query", "--store", str(root), "-t", "D", "-k", "dk-123", "-o", "json"))
    assert hit["keys"] == "dk-123"
    by_id = ok(cli("store", "msg", "query", "--store", str(root), "--id", hit["msg_id"], "-o", "json"))
    rows = by_id if isinstance(by_id, list) else [by_id]
    assert rows[0]["msg_id"] == hit["msg_id"] and rows[0]["keys"] == "dk-123"


def test_clean_plans_and_executes_retention(cli: RunCli, dstore: tuple[Path, list[Message]]) -> None:
    root, _msgs = dstore
    data = root / "dledger-n0" / "data"
    before = sorted(os.listdir(data))
    plan = ok(cli("store", "clean", "--store", str(root), "--reserved-hours", "0", "-o", "json"))
    assert sorted(os.listdir(data)) == before  # the plan changes nothing
    assert plan
    res = cli("store", "clean", "--store", str(root), "--reserved-hours", "0", "--execute", "--yes")
    assert res.code == 0, res.stderr
    after = sorted(os.listdir(data))
    assert after == before[-1:]  # every file but the newest
    report = ok(cli("store", "verify", "--store", str(root), "-o", "json"))
    assert report["ok"] is True, report["problems"]


@pytest.mark.parametrize(
    "command",
    [("commitlog", "ls"), ("verify",), ("cq", "ls"), ("clean", "--reserved-hours", "0"), ("salvage",)],
)
def test_a_running_members_own_files_change_nothing_offline(
    cli: RunCli, dstore: tuple[Path, list[Message]], command: tuple[str, ...]
) -> None:
    """Its vote file, abstention and heard file (ours) beside the data and index dirs: every store command
    reads past them, as a 4.9.8 member opening the dir does (it reads only its data, index, checkpoint and
    currterm)."""
    root, _msgs = dstore
    before = _ageless(ok(cli("store", *command, "--store", str(root), "-o", "json")))
    member = root / "dledger-n0"
    dl.persist_term(str(member), 3, "n1")
    dl.persist_abstention(str(member), "catching-up")
    dl.keep_heard(str(member), dl.encode_heard("boot", "broker-a", "n0", "n1", 123))
    assert _ageless(ok(cli("store", *command, "--store", str(root), "-o", "json"))) == before


def _ageless(out: Any) -> Any:
    """`out` without its files' ages (they grow between two runs)."""
    if isinstance(out, dict):
        return {k: _ageless(v) for k, v in out.items() if k != "age_ms"}
    if isinstance(out, list):
        return [_ageless(v) for v in out]
    return out


def test_a_cut_tail_is_salvaged_record_by_record(
    cli: RunCli, dstore: tuple[Path, list[Message]], tmp_path: Path
) -> None:
    root, _msgs = dstore
    # a follower's uncommitted tail, cut when a new leader disagreed (dispatch never saw it)
    (root / "dledger-n0" / dl.CHECKPOINT_FILE).write_text(
        f"endIndex={COUNT - 1}\ncommittedIndex={COUNT - 11}\n"
    )
    log_ = DLedgerLog(str(root / "dledger-n0"), data_file_size=64 * 1024)
    assert log_.truncate_after(COUNT - 11) == 10
    log_.close()
    [plan] = ok(cli("store", "salvage", "--store", str(root), "-o", "json"))
    assert (plan["intact"], plan["damaged"]) == (10, 0)  # entry headers between the records are no damage
    out = tmp_path / "tail.jsonl"
    assert cli("store", "salvage", "--store", str(root), "--out", str(out)).code == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["keys"] for r in rows] == [f"dk-{i}" for i in range(COUNT - 10, COUNT)]


@pytest.mark.parametrize("command", [("commitlog", "ls"), ("verify",)])
def test_a_member_missing_committed_entries_is_logged_once(
    cli_process: RunCli, dstore: tuple[Path, list[Message]], command: tuple[str, ...]
) -> None:
    root, _msgs = dstore
    data = root / "dledger-n0" / "data"
    (data / sorted(os.listdir(data))[-1]).unlink()  # the member lost its newest file: the checkpoint is ahead
    result = cli_process("store", *command, "--store", str(root), "-o", "json")
    errors = [line for line in result.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and "the checkpoint says entries up to" in errors[0], result.stderr
