"""``store verify`` and ``store salvage`` count and locate every damaged record: a body that fails its CRC,
a damaged TOTALSIZE (the record boundaries lost), a damaged record recovery set aside alone."""

from __future__ import annotations

from pathlib import Path

from store.engine import DefaultMessageStore
from store.message import Message
from tests.support.cli import RunCli
from tests.support.stores import small_config

FILE = 64 * 1024


def _store(root: Path) -> list[tuple[int, int]]:
    """1,200 records over 6 CommitLog files of 64 KiB: ``(offset, size)`` of each."""
    out = []
    with DefaultMessageStore(small_config(root, max_hash_slot_num=100, max_index_num=400)) as s:
        for i in range(1200):
            body = f"body-{i}-".encode() * 20
            r = s.put_message(Message("T", body, queue_id=i % 2, properties={"KEYS": f"k{i}"}))
            out.append((r.phys_offset, r.wrote_bytes))
    return out


def _patch(root: Path, offset: int, at: int, data: bytes) -> None:
    path = root / "commitlog" / f"{offset - offset % FILE:020d}"
    raw = bytearray(path.read_bytes())
    pos = offset % FILE + at
    raw[pos : pos + len(data)] = data
    path.write_bytes(bytes(raw))


def test_every_damaged_record_is_counted_and_located(cli: RunCli, tmp_path: Path) -> None:
    root = tmp_path / "store"
    recs = _store(root)
    (kept, _), (cut, cut_size), (later, _) = recs[1000], recs[1100], recs[1150]
    _patch(root, kept, 100, b"\xff")  # a body byte: its extent is known
    _patch(root, cut, 0, (cut_size + 16).to_bytes(4, "big"))  # TOTALSIZE: the boundaries are lost
    _patch(root, later, 100, b"\xee")  # a body byte after that

    # offline, before any recovery: each one is a problem naming its offset
    result = cli("store", "verify", "--store", str(root), "-o", "json")
    assert result.code == 10, result.stderr
    report = result.json()
    assert (report["crc_errors"], report["corrupt_files"]) == (2, 1)
    for offset in (kept, cut, later):
        assert any(f"@{offset}:" in p for p in report["problems"]), (offset, report["problems"])

    # recovery: the first set aside alone, the log cut at the second (the third goes with the tail)
    with DefaultMessageStore(small_config(root, max_hash_slot_num=100, max_index_num=400)):
        pass
    result = cli("store", "verify", "--store", str(root), "-o", "json")
    assert result.code == 0, result.stdout + result.stderr
    report = result.json()
    assert report["damaged_set_aside"] == 1 and any(str(kept) in n for n in report["notes"])
    assert sorted((q["cut_offset"], q["damaged_records"]) for q in report["quarantined"]) == [
        (-1, 1),
        (cut, 2),
    ]

    plan = cli("store", "salvage", "--store", str(root), "-o", "json")
    assert plan.code == 0, plan.stderr
    assert sum(r["damaged"] for r in plan.json()) == 3 and "(3 damaged, skipped)" in plan.stderr
    out = tmp_path / "salvaged.jsonl"
    result = cli("store", "salvage", "--store", str(root), "--out", str(out))
    assert result.code == 0, result.stderr
    assert f"3 damaged records skipped (CommitLog offsets {kept}, {cut}, {later})" in " ".join(
        result.stderr.split()
    )
