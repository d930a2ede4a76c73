"""``store verify`` after ``topic delete``: the records a deleted topic leaves in the CommitLog (its
ConsumeQueue and config gone) are a note, not damage; a topic still configured that lacks its units stays
a problem."""

from __future__ import annotations

import shutil
from pathlib import Path

from store import fastjson
from tests.support.cli import RunCli
from tests.support.stores import unpack_store_a


def _delete_topic(root: Path, topic: str, *, config_too: bool) -> None:
    """What DELETE_TOPIC_IN_BROKER leaves: the topic's ConsumeQueue removed, its config entry too."""
    shutil.rmtree(root / "consumequeue" / topic)
    if config_too:
        for name in ("topics.json", "topics.json.bak"):
            path = root / "config" / name
            data = fastjson.loads(path.read_text())
            del data["topicConfigTable"][topic]
            path.write_bytes(fastjson.dumps(data))


def test_records_of_a_deleted_topic_are_a_note(cli: RunCli, tmp_path: Path) -> None:
    root = unpack_store_a(tmp_path / "deleted")
    _delete_topic(root, "FixA_Mixed", config_too=True)
    result = cli("store", "verify", "--store", str(root), "-o", "json")
    assert result.code == 0, result.stderr
    report = result.json()
    assert report["ok"] is True and report["problems"] == [] and report["records_without_unit"] == 0
    (note,) = [n for n in report["notes"] if "deleted topic" in n]
    assert note.startswith("records of deleted topic FixA_Mixed: ") and int(note.rsplit(" ", 1)[1]) > 0


def test_a_configured_topic_without_its_units_is_still_a_problem(cli: RunCli, tmp_path: Path) -> None:
    root = unpack_store_a(tmp_path / "lost")
    _delete_topic(root, "FixA_Mixed", config_too=False)
    result = cli("store", "verify", "--store", str(root), "-o", "json")
    assert result.code == 10
    report = result.json()
    assert report["records_without_unit"] > 0
    assert any("FixA_Mixed/" in p and "has no unit" in p for p in report["problems"])
