"""A damaged record in a real RocketMQ store: the broker quarantines what recovery cuts, serves the intact
prefix, and ``mqctl store verify`` / ``store salvage`` list, extract and re-send the set-aside records."""

from __future__ import annotations

import base64
import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from mqctl.units import plural
from store.config import StoreConfig
from store.engine import DefaultMessageStore
from store.errors import CorruptRecordError
from store.indexfile import HASH_SLOT_SIZE, INDEX_ENTRY_SIZE, INDEX_HEADER_SIZE, IndexFile
from store.message import MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2, Message, StoredMessage
from store.record import decode_msg_id, decode_record, read_header
from tests.daemons import local_cluster
from tests.support.cli import RunCli
from tests.support.stores import unpack_store_a

STORE_A_SIZES = {
    "mapped_file_size_commit_log": 1_048_576,
    "mapped_file_size_consume_queue": 6000,
    "max_hash_slot_num": 5000,
    "max_index_num": 20000,
}


def records_of(commitlog: Path) -> list[tuple[int, StoredMessage, int]]:
    """Every record of the CommitLog read file by file with the plain codec: (offset, message, body position
    in its file)."""
    out = []
    for name in sorted(os.listdir(commitlog)):
        data = (commitlog / name).read_bytes()
        pos = 0
        while pos + 8 <= len(data):
            _size, magic = read_header(data, pos)
            if magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2):
                break
            m = decode_record(data, pos)
            out.append((int(name) + pos, m, data.index(m.stored_body, pos + 60)))
            pos += m.store_size
    return out


def identity(m: StoredMessage) -> tuple[Any, ...]:
    return (m.commit_log_offset, m.topic, m.queue_id, m.queue_offset, m.body, m.tags, m.keys, m.properties)


def ok(result: Any) -> Any:
    assert result.code == 0, result.stderr
    return result.json()


def damage_a_total_size(tmp_path: Path) -> tuple[Path, list[tuple[int, StoredMessage, int]], int]:
    """Store-a with the TOTALSIZE of a record of the second-to-last CommitLog file damaged (the record
    boundaries after it are lost) and an unclean stop (abnormal recovery): the store, its records and the
    damaged record's offset."""
    root = unpack_store_a(tmp_path)
    recs = records_of(root / "commitlog")
    second = 2 * 1_048_576
    victim, vm, _body_at = [r for r in recs if second <= r[0] < second + 1_048_576][-40]
    path = root / "commitlog" / f"{second:020d}"
    with open(path, "r+b") as f:
        f.seek(victim - second)
        f.write((vm.store_size + 16).to_bytes(4, "big"))
    (root / "abort").touch()
    return root, recs, victim


@pytest.mark.slow
def test_a_damaged_total_size_is_quarantined_served_around_verified_and_salvaged(
    cli: RunCli, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root, recs, victim = damage_a_total_size(tmp_path)
    before = [m for off, m, _ in recs if off < victim]
    later = [m for off, m, _ in recs if off > victim]

    with (
        caplog.at_level(logging.ERROR),
        local_cluster(tmp_path, store_path_root_dir=str(root), **STORE_A_SIZES) as c,
    ):
        store = c.broker.store
        # the later file is in the quarantine, not deleted
        assert not (root / "commitlog" / f"{3 * 1_048_576:020d}").exists()
        [qdir] = list((root / "quarantine").iterdir())
        manifest = json.loads((qdir / "manifest.json").read_text())
        assert (manifest["cut_offset"], manifest["records"], manifest["damaged"]) == (victim, len(later), 1)
        assert (qdir / "commitlog" / f"{3 * 1_048_576:020d}").is_file()
        errors = [r.getMessage() for r in caplog.records if r.name == "store.quarantine"]
        assert any(f"set aside {plural(len(later), 'intact record')}" in e for e in errors), errors
        # every intact record before the damage is served
        served = {}
        for (topic, qid), end in store.topic_queue_table().items():
            offset = store.get_min_offset(topic, qid)
            while offset < end:
                res = store.get_messages("g", topic, qid, offset, 32)
                served.update(
                    {m.phys_offset: identity(m.message) for m in res.messages if m.phys_offset < victim}
                )
                offset = max(res.next_begin_offset, offset + 1)
        assert served == {m.commit_log_offset: identity(m) for m in before}

        # store verify lists the quarantine (it reads the live store read-only: safe next to the broker)
        result = cli("store", "verify", "--store", str(root), "-o", "json")
        assert result.code in (0, 10), result.stderr
        [q] = result.json()["quarantined"]
        assert (q["name"], q["records_set_aside"], q["damaged_records"], q["cut_offset"]) == (
            qdir.name,
            len(later),
            1,
            victim,
        )
        assert "total size" in q["why"] and q["recovery"] == "abnormal"
        assert "1 quarantine " in result.stderr

        # the plan, then the records as JSON lines: every intact record set aside, the damaged one skipped
        plan = ok(cli("store", "salvage", "--store", str(root), "-o", "json"))
        assert (sum(r["intact"] for r in plan), sum(r["damaged"] for r in plan)) == (len(later), 1)
        out = tmp_path / "salvaged.jsonl"
        result = cli("store", "salvage", "--store", str(root), "--out", str(out))
        assert result.code == 0, result.stderr
        assert (
            f"salvaged {plural(len(later), 'intact record')}" in result.stderr
            and str(victim) in result.stderr
        )
        lines = [json.loads(line) for line in out.read_text().splitlines()]
        got = []
        for d in lines:
            body = d["body"].encode() if d["body_encoding"] == "utf-8" else base64.b64decode(d["body"])
            got.append(
                (
                    d["commit_log_offset"],
                    d["topic"],
                    d["queue_id"],
                    d["queue_offset"],
                    body,
                    d["tags"],
                    (d["keys"] or "").split(),
                    d["properties"],
                )
            )
        assert got == [identity(m) for m in later]

        # --resend sends them through the broker again (a delayed one to its real topic)
        result = cli(
            "store", "salvage", "--store", str(root), "--resend", "--yes", "-n", c.namesrv_addr, "-o", "json"
        )
        assert result.code == 0, result.stderr
        outcomes = result.json()
        assert [o["outcome"] for o in outcomes] == ["RESENT"] * len(later)
        for o, m in zip(outcomes, later, strict=True):
            assert o["commit_log_offset"] == m.commit_log_offset
            again = store.look_message_by_offset(decode_msg_id(o["new_msg_id"])[1])
            assert again is not None
            new = again.message
            assert (new.body, new.tags, new.keys) == (m.body, m.tags, m.keys)
            assert m.uniq_key is None or new.uniq_key == m.uniq_key  # a client id is kept (consumers dedup)
            assert new.topic == m.properties.get("REAL_TOPIC", m.topic)
            assert new.properties["MQCTL_SALVAGED_MSG_ID"] == m.msg_id  # the copy names its original
        # the manifest remembers the re-send; doing it again warns (and, off a terminal, needs --yes)
        [q] = cli("store", "verify", "--store", str(root), "-o", "json").json()["quarantined"]
        assert q["resent"] is not None
        again = cli("store", "salvage", "--store", str(root), "--resend", "-n", c.namesrv_addr)
        assert again.code == 2 and "already re-sent" in again.stderr
        # ... and with --yes sends nothing twice: every record is in the NameServer's record of re-sends
        end = store.max_phy_offset
        again = cli(
            "store", "salvage", "--store", str(root), "--resend", "--yes", "-n", c.namesrv_addr, "-o", "json"
        )
        assert again.code == 0, again.stderr
        assert [(o["outcome"], o["new_msg_id"]) for o in again.json()] == [
            ("ALREADY RESENT", o["new_msg_id"]) for o in outcomes
        ]
        assert store.max_phy_offset == end and f"0 re-sent, {len(later)} already re-sent" in again.stderr
        # the original msgId (its offset holds another message now) finds the copy, and says so
        original, copy = later[5], outcomes[5]
        try:
            there = store.look_message_by_offset(original.commit_log_offset)
        except CorruptRecordError:  # the middle of a record now
            there = None
        assert there is None or there.message.body != original.body
        found = ok(cli("msg", "query", "--id", original.msg_id, "-n", c.namesrv_addr, "-o", "json"))
        [found] = found if isinstance(found, list) else [found]
        assert (found["copy_of"], found["msg_id"], found["body"]) == (
            original.msg_id,
            copy["new_msg_id"],
            original.body.decode(),
        )
        assert "store salvage --resend" in found["note"]


def test_salvage_of_a_healthy_store_succeeds_with_nothing_to_do(cli: RunCli, tmp_path: Path) -> None:
    """A store recovery never cut has nothing to salvage: that is success (exit 0, said on stderr), not
    'not found' (exit 3), which a script read as a failure; a directory that is no store, or a quarantine
    name that is not there, is still not found."""
    root = unpack_store_a(tmp_path)
    result = cli("store", "salvage", "--store", str(root))
    assert result.code == 0 and "nothing needed salvaging" in result.stderr, result.stderr
    result = cli("store", "salvage", "--store", str(root), "-o", "json")
    assert result.code == 0 and result.json() == []
    result = cli("store", "salvage", "--store", str(root), "--out", str(tmp_path / "x.jsonl"))
    assert result.code == 0 and (tmp_path / "x.jsonl").read_text() == ""
    result = cli("store", "salvage", "--store", str(root), "--resend", "--yes")
    assert result.code == 0 and "nothing needed salvaging" in result.stderr, result.stderr
    result = cli("store", "salvage", "--store", str(root), "--quarantine", "nope")
    assert result.code == 3 and "no quarantine nope" in result.stderr, result.stderr
    (tmp_path / "empty").mkdir()
    result = cli("store", "salvage", "--store", str(tmp_path / "empty"))
    assert result.code == 3 and "not a store directory" in result.stderr, result.stderr
    result = cli("store", "salvage", "--store", str(root), "--out", "x", "--resend")
    assert result.code == 2


def test_a_damaged_record_no_broker_met_yet_says_where_salvage_comes_in(cli: RunCli, tmp_path: Path) -> None:
    """A body whose CRC fails in a stopped broker's store: verify finds it and salvage has nothing yet
    (no broker has set it aside); both lines say what sets it aside, so that the operator is not left
    between 'store has problems' and 'nothing needed salvaging'."""
    root = unpack_store_a(tmp_path)
    path = root / "commitlog" / "00000000000001048576"
    with path.open("r+b") as f:
        f.seek(5000)
        f.write(b"\xff\xff\xff\xff")
    result = cli("store", "verify", "--store", str(root), "-o", "json")
    assert result.code == 10 and result.json()["crc_errors"] == 1, result
    assert "its start (or the first read of one) sets them aside" in result.stderr, result.stderr
    result = cli("store", "salvage", "--store", str(root))
    assert result.code == 0 and "is set aside when a broker meets it" in result.stderr, result.stderr


def test_a_pull_over_a_record_whose_body_crc_fails_skips_it(
    cli: RunCli, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "broker"
    config = StoreConfig(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=64 * 1024,
        mapped_file_size_consume_queue=20 * 10_000,
        max_hash_slot_num=1000,
        max_index_num=4000,
    )
    store = DefaultMessageStore(config)
    store.open()
    store.start()
    bodies = [f"message-{i}-".encode() * 12 for i in range(1500)]
    offsets = [
        store.put_message(Message(topic="T", body=b, properties={"TAGS": "x"})).phys_offset for b in bodies
    ]
    store.shutdown()
    assert len(os.listdir(root / "commitlog")) >= 4  # the first file is one a normal start does not re-check
    path = root / "commitlog" / f"{0:020d}"
    data = bytearray(path.read_bytes())
    data[offsets[3] + 88 + 7] ^= 0x20  # a byte of the body of queue offset 3
    path.write_bytes(bytes(data))

    with caplog.at_level(logging.ERROR), local_cluster(tmp_path, mapped_file_size_commit_log=64 * 1024) as c:
        ns = c.namesrv_addr
        shown = cli("msg", "show", "-t", "T", "-q", "0", "--offset", "3", "-n", ns, "-o", "json")
        assert shown.code == 3, shown.stdout  # the pull skipped it: the broker never serves it as good
        after = ok(cli("msg", "show", "-t", "T", "-q", "0", "--offset", "4", "-n", ns, "-o", "json"))
        assert after["body"] == bodies[4].decode()
    errors = [r.getMessage() for r in caplog.records if r.name == "store.api"]
    assert errors and all(f"{path}@{offsets[3]}" in e and "CRC" in e for e in errors), errors


@pytest.mark.slow
def test_verify_counts_index_entries_into_a_quarantine_as_stale_not_as_errors(
    cli: RunCli, tmp_path: Path
) -> None:
    """The index as a build without index healing left it after the quarantine (the entries of the set-aside
    records still there, 1,225 of them): verify counts them as stale, names the quarantine, exits 0; an
    entry pointing at no record outside the quarantine is still an error."""
    root, _recs, victim = damage_a_total_size(tmp_path)
    old_index = tmp_path / "old-index"
    shutil.copytree(root / "index", old_index)
    with local_cluster(tmp_path, store_path_root_dir=str(root), **STORE_A_SIZES):
        pass
    [qdir] = list((root / "quarantine").iterdir())
    shutil.rmtree(root / "index")
    shutil.copytree(old_index, root / "index")
    [name] = os.listdir(root / "index")
    f = IndexFile(str(root / "index" / name), 5000, 20000, read_only=True)
    try:
        stale = sum(1 for _n, _h, phy, _d, _p in f.entries() if phy >= victim)
        last_good = max(n for n, _h, phy, _d, _p in f.entries() if phy < victim)
    finally:
        f.close()
    assert stale > 1000

    result = cli("store", "verify", "--store", str(root), "-o", "json")
    assert result.code == 0, result.stdout + result.stderr
    report = result.json()
    assert (report["ok"], report["index_errors"], report["stale_index_entries"]) == (True, 0, stale)
    assert report["problems"] == []
    assert report["notes"] == [f"{stale} stale index entries (point into quarantine {qdir})"]
    assert [q["name"] for q in report["quarantined"]] == [qdir.name]  # the quarantine itself is still listed
    assert f"{stale} stale index entries" in result.stderr

    entry = INDEX_HEADER_SIZE + 5000 * HASH_SLOT_SIZE + last_good * INDEX_ENTRY_SIZE + 4
    with open(root / "index" / name, "r+b") as fh:  # the last entry before the cut: into a record's middle
        fh.seek(entry)
        phy = int.from_bytes(fh.read(8), "big")
        fh.seek(entry)
        fh.write((phy + 1).to_bytes(8, "big"))
    result = cli("store", "verify", "--store", str(root), "-o", "json")
    assert result.code == 10
    report = result.json()
    assert (report["index_errors"], report["stale_index_entries"]) == (1, stale)
    assert report["problems"] == [
        f"index/{name} entry {last_good}: no record starts at CommitLog offset {phy + 1}"
    ]
