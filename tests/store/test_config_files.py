"""fastjson-compatible config files (docs/store-format.md §config-files) and their managers."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from store import fastjson
from store.clock import FakeClock, SystemClock
from store.config_files import (
    ConfigFiles,
    ConsumerOffsetManager,
    DelayOffsetManager,
    JsonConfigFile,
    TopicConfigFile,
)
from store.errors import ConfigFileError
from store.fastjson import dumps_pretty, loads
from store.models import SubscriptionGroupConfig, TopicConfig

OFFSETS_15_13 = '{\n\t"offsetTable":{\n\t\t"TopicTest@GroupA":{0:250,1:251\n\t\t},\n\t\t"%RETRY%GroupA@GroupA":{0:0\n\t\t}\n\t}\n}'


def test_vector_15_13() -> None:
    assert loads(OFFSETS_15_13) == {
        "offsetTable": {"TopicTest@GroupA": {0: 250, 1: 251}, "%RETRY%GroupA@GroupA": {0: 0}}
    }
    assert dumps_pretty(loads(OFFSETS_15_13)) == OFFSETS_15_13
    assert loads('{\n\t"offsetTable":{1:15,3:127\n\t}\n}') == {"offsetTable": {1: 15, 3: 127}}
    assert dumps_pretty({"offsetTable": {}}) == '{\n\t"offsetTable":{}\n}'
    assert len(dumps_pretty({"offsetTable": {}})) == 21


def test_offset_maps_are_written_without_a_call_per_offset(monkeypatch: pytest.MonkeyPatch) -> None:
    """consumerOffset.json of 10,000 queues is written every 5 s in a worker thread that shares the GIL
    with the event loop: its {queue: offset} maps are formatted at once, not one call per offset."""
    real = fastjson.dumps_pretty
    values: list[object] = []

    def spy(obj: object, indent: int = 0) -> str:
        values.append(obj)
        return real(obj, indent)

    monkeypatch.setattr(fastjson, "dumps_pretty", spy)
    table = {"offsetTable": {"T@G": {0: 5, 1: -7, 2: 2**40}, "U@G": {3: True, 4: 0}}}
    assert spy(table) == (
        '{\n\t"offsetTable":{\n\t\t"T@G":{0:5,1:-7,2:1099511627776\n\t\t},\n\t\t"U@G":{3:true,4:0\n\t\t}\n\t}\n}'
    )
    assert 5 not in values and True in values  # plain ints at once; a map holding anything else as before


def test_reader_tolerates_quoted_keys_and_keeps_numeric_strings_inside_values() -> None:
    data = loads('{"offsetTable":{"T@G":{"0":5}}, "note":"{1:2,3:4}", "123":{7:1}}')
    assert data["note"] == "{1:2,3:4}"
    assert data["123"] == {7: 1}  # a numeric-looking topic name stays a string key
    mgr = ConsumerOffsetManager("/nonexistent")
    mgr.decode(data)
    assert mgr.query_offset("G", "T", 0) == 5


@given(
    st.dictionaries(
        st.text("abcXYZ_%|-0123456789", min_size=1, max_size=12).map(lambda s: f"{s}@g"),
        st.dictionaries(st.integers(0, 1023), st.integers(0, 2**62), max_size=5),
        max_size=5,
    )
)
@pytest.mark.slow
def test_offset_table_round_trip(table: dict[str, dict[int, int]]) -> None:
    text = dumps_pretty({"offsetTable": table})
    assert loads(text) == {"offsetTable": table}


def test_fixture_files_are_rewritten_byte_for_byte(store_a_root: Path, tmp_path: Path) -> None:
    src = store_a_root / "config"
    files = ConfigFiles(str(tmp_path), clock=FakeClock())
    for name, mgr in (
        ("topics.json", files.topics),
        ("subscriptionGroup.json", files.subscription_groups),
        ("consumerOffset.json", files.consumer_offsets),
        ("delayOffset.json", files.delay_offsets),
    ):
        (tmp_path / name).write_bytes((src / name).read_bytes())
        mgr.load()
        mgr.persist()
        assert (tmp_path / name).read_bytes() == (src / name).read_bytes(), name
        assert (tmp_path / f"{name}.bak").read_bytes() == (src / name).read_bytes()


def test_persist_keeps_bak_and_load_falls_back_to_it(tmp_path: Path) -> None:
    clock = FakeClock(1_700_000_000_000)
    topics = TopicConfigFile(str(tmp_path / "topics.json"), clock)
    topics.update(TopicConfig("A", read_queue_nums=4, write_queue_nums=4))
    clock.advance(5)
    topics.update(TopicConfig("B"))
    assert topics.data_version.counter == 2 and topics.data_version.timestamp == 1_700_000_000_005
    assert (
        "A" in (tmp_path / "topics.json.bak").read_text()
        and '"B"' not in (tmp_path / "topics.json.bak").read_text()
    )
    assert not (tmp_path / "topics.json.tmp").exists()
    text = (tmp_path / "topics.json").read_text()
    assert text.startswith('{\n\t"dataVersion":{\n\t\t"counter":2,') and '\t\t\t"order":false,' in text
    (tmp_path / "topics.json").write_text("{broken")
    again = TopicConfigFile(str(tmp_path / "topics.json"), clock)
    again.load()
    assert set(again.table) == {"A"} and again.table["A"].read_queue_nums == 4
    (tmp_path / "topics.json.bak").write_text("{also broken")
    with pytest.raises(ConfigFileError):
        TopicConfigFile(str(tmp_path / "topics.json"), clock).load()


def test_a_value_of_the_wrong_type_damages_the_file_like_bad_json(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A hand-edited ``"readQueueNums":"abc"`` is not a crash at start-up: the file falls back to its .bak
    (logged at ERROR naming the entry), and with a bad .bak too the error names the file."""
    clock = FakeClock(1_700_000_000_000)
    topics = TopicConfigFile(str(tmp_path / "topics.json"), clock)
    topics.update(TopicConfig("A", read_queue_nums=4, write_queue_nums=4))
    topics.update(TopicConfig("B"))
    path = tmp_path / "topics.json"
    path.write_text(path.read_text().replace('"readQueueNums":4', '"readQueueNums":"abc"'))
    again = TopicConfigFile(str(path), clock)
    with caplog.at_level(logging.ERROR):
        again.load()
    assert set(again.table) == {"A"} and again.table["A"].read_queue_nums == 4
    assert "entry 'A'" in caplog.text and "readQueueNums abc -> 4" in caplog.text
    (tmp_path / "topics.json.bak").write_text(path.read_text())
    with pytest.raises(ConfigFileError, match=r"topics\.json and its \.bak are unreadable"):
        TopicConfigFile(str(path), clock).load()


def test_unknown_fields_survive(tmp_path: Path) -> None:
    path = tmp_path / "subscriptionGroup.json"
    path.write_text(
        '{"subscriptionGroupTable":{"G":{"groupName":"G","consumeTimeoutMinute":15,"retryMaxTimes":3}}}'
    )
    files = ConfigFiles(str(tmp_path))
    files.load()
    g = files.subscription_groups.get("G")
    assert g is not None and g.retry_max_times == 3 and g.extra == {"consumeTimeoutMinute": 15}
    files.subscription_groups.update(SubscriptionGroupConfig("H"))
    assert '"consumeTimeoutMinute":15' in path.read_text()


def test_rewrites_reuse_unchanged_entries_and_write_what_a_full_encode_writes(tmp_path: Path) -> None:
    """Entries are rendered once and reused while unchanged; edits in place and unknown fields show."""
    topics = ConfigFiles(str(tmp_path)).topics
    assert topics.text() == dumps_pretty(topics.encode())  # empty table
    for i in range(5):
        topics.update(TopicConfig(f"T{i}", 4, 4))
    odd = TopicConfig('Ü"x', 1, 1)
    odd.extra = {"zz": {"a": [1, {"b": None}], "c": "é"}, "aa": [], "q": {1: "bare int key"}}
    topics.update(odd)
    table = topics.table["T3"]
    table.perm = 2  # changed in place, not replaced
    text = topics.text()
    assert text == dumps_pretty(topics.encode())
    assert '"perm":2' in text and "1:" in text
    topics.delete("T1")
    assert topics.text() == dumps_pretty(topics.encode()) == (tmp_path / "topics.json").read_text()


def test_offsets_persist(tmp_path: Path) -> None:
    files = ConfigFiles(str(tmp_path))
    files.consumer_offsets.commit_offset("G", "T", 2, 41)
    files.delay_offsets.table[3] = 9
    files.persist_offsets()
    assert (
        tmp_path / "consumerOffset.json"
    ).read_text() == '{\n\t"offsetTable":{\n\t\t"T@G":{2:41\n\t\t}\n\t}\n}'
    assert (tmp_path / "delayOffset.json").read_text() == '{\n\t"offsetTable":{3:9\n\t}\n}'
    fresh = DelayOffsetManager(str(tmp_path / "delayOffset.json"))
    fresh.load()
    assert fresh.table == {3: 9}
    assert ConfigFiles(str(tmp_path)).consumer_offsets.groups_of("T") == set()
    loaded = ConfigFiles(str(tmp_path))
    loaded.load()
    assert loaded.consumer_offsets.groups_of("T") == {"G"} and loaded.consumer_offsets.topics_of("G") == {"T"}


def test_periodic_offset_persists_write_only_after_an_offset_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every path that changes an offset makes the next periodic persist write, and nothing else does: an
    idle consumer committing the same offsets, or a master's unchanged table, writes nothing."""
    files = ConfigFiles(str(tmp_path))
    written: list[str] = []
    for manager in (files.consumer_offsets, files.delay_offsets):
        real = manager._write

        def recorded(text: str, real: Callable[[str], None] = real) -> None:
            written.append(text)
            real(text)

        monkeypatch.setattr(manager, "_write", recorded)

    def writes() -> int:
        written.clear()
        files.persist_offsets()
        return len(written)

    offsets, delays = files.consumer_offsets, files.delay_offsets
    assert writes() == 2  # the first writes what load found
    assert writes() == 0
    offsets.commit_offset("G", "T", 0, 5)
    assert writes() == 1 and "5" in written[0]
    offsets.commit_offset("G", "T", 0, 5)
    assert writes() == 0
    delays.set_offset(3, 9)
    assert writes() == 1
    delays.set_offset(3, 9)
    assert writes() == 0
    assert offsets.merge({"T@G": {0: 5}}) is False and writes() == 0
    assert offsets.merge({"T@G": {0: 6}}) is True and writes() == 1
    assert delays.replace({3: 9}) is False and writes() == 0
    assert delays.replace({3: 10}) is True and writes() == 1
    assert offsets.delete_group("H") == 0 and writes() == 0
    assert offsets.delete_topic("T") == 1 and writes() == 1
    offsets.commit_offset("G", "T", 1, 1)
    offsets.delete_group("G")
    assert writes() == 1
    offsets.commit_offset("G", "T", 1, 2)

    def full(text: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(offsets, "_write", full)
    with pytest.raises(OSError):
        files.persist_offsets()
    monkeypatch.undo()
    files.persist_offsets()  # a failed write is tried again at the next period
    loaded = ConfigFiles(str(tmp_path))
    loaded.load()
    assert loaded.consumer_offsets.query_offset("G", "T", 1) == 2


@given(
    st.dictionaries(
        st.text(min_size=1, max_size=8),
        st.dictionaries(st.integers(0, 64), st.integers(-1, 2**62), max_size=3),
        max_size=12,
    ),
    st.integers(1, 5),
)
def test_offsets_text_in_slices_is_the_text(table: dict[str, dict[int, int]], size: int) -> None:
    offsets = ConsumerOffsetManager(None)
    offsets.table = table
    assert "".join(offsets.text_slices(size)) == offsets.text()


def test_a_text_made_in_slices_never_replaces_a_newer_one(tmp_path: Path) -> None:
    offsets = ConsumerOffsetManager(str(tmp_path / "consumerOffset.json"))
    offsets.commit_offset("G", "T", 0, 1)
    changes = offsets.unwritten_changes()
    assert changes is not None
    old = "".join(offsets.text_slices(10))
    offsets.commit_offset("G", "T", 0, 2)
    offsets.persist()  # (the shutdown's persist, while the slices were made)
    assert offsets.unwritten_changes() is None
    offsets.write_text(old, changes)
    assert "{0:2" in (tmp_path / "consumerOffset.json").read_text()


def test_concurrent_persists_leave_a_whole_file(tmp_path: Path) -> None:
    """The loop and worker threads persist the same file: every write is a whole snapshot, never two interleaved."""
    path = tmp_path / "topics.json"
    topics = TopicConfigFile(str(path), SystemClock())
    for i in range(300):
        topics.update(TopicConfig(f"T{i}", 4, 4), persist=False)

    errors: list[BaseException] = []

    def persist_many() -> None:
        try:
            for _ in range(20):
                topics.persist()
        except BaseException as exc:  # e.g. another writer's os.replace took our .tmp away
            errors.append(exc)

    workers = [threading.Thread(target=persist_many) for _ in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert errors == []
    again = TopicConfigFile(str(path), SystemClock())
    again.load()
    assert set(again.table) == {f"T{i}" for i in range(300)}


def test_offsets_that_fall_back_to_the_bak_are_logged_at_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    offsets = ConsumerOffsetManager(str(tmp_path / "consumerOffset.json"))
    offsets.table = {"T@G": {0: 300, 1: 500}, "U@H": {0: 7}}
    offsets.persist()  # the .bak to be: older offsets
    offsets.table = {"T@G": {0: 400, 1: 500}, "U@H": {0: 9}}
    offsets.persist()
    text = (tmp_path / "consumerOffset.json").read_text()
    cut = text.index('"U@H"') + 8  # the last entry torn: its offset unreadable
    (tmp_path / "consumerOffset.json").write_text(text[:cut])
    caplog.set_level(logging.ERROR)
    again = ConsumerOffsetManager(str(tmp_path / "consumerOffset.json"))
    again.load()
    assert again.table == {"T@G": {0: 300, 1: 500}, "U@H": {0: 7}}
    (error,) = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert "consumerOffset.json is unreadable" in error
    assert "G/T/0 = 300 (was 400)" in error and "H/U/0 = 7 (unreadable)" in error
    assert "G/T/1" not in error  # the same in both: nothing falls back


def test_offset_managers_own_their_tables() -> None:
    """Deleting a topic's or a group's offsets, and snapshots that later commits do not change."""
    offsets = ConsumerOffsetManager(None)
    for group, topic, qid in (("G1", "T1", 0), ("G1", "T2", 1), ("G2", "T1", 0), ("G2", "T1", 3)):
        offsets.commit_offset(group, topic, qid, 7)
    snap = offsets.snapshot()
    offsets.commit_offset("G1", "T1", 0, 8)
    assert snap["T1@G1"] == {0: 7} and offsets.query_offset("G1", "T1", 0) == 8
    assert offsets.groups() == {"G1", "G2"}
    assert offsets.delete_topic("T1") == 2 and offsets.snapshot() == {"T2@G1": {1: 7}}
    assert offsets.delete_group("G2") == 0 and offsets.delete_group("G1") == 1 and offsets.groups() == set()
    delays = DelayOffsetManager(None)
    assert delays.offset(3) == 0
    delays.set_offset(3, 9)
    copy = delays.offsets()
    delays.set_offset(3, 10)
    assert copy == {3: 9} and delays.offset(3) == 10


def _journal_lines(tmp_path: Path) -> list[str]:
    journal = tmp_path / "topics.json.journal"
    return journal.read_text().splitlines() if journal.exists() else []


def test_changes_persisted_alone_go_to_the_journal_and_are_replayed_and_folded_at_load(
    tmp_path: Path,
) -> None:
    """A creation appends one line instead of rewriting topics.json; a load after a crash (no fold) replays
    it over the file, writes it into the file and empties the journal."""
    topics = TopicConfigFile(str(tmp_path / "topics.json"), FakeClock(1_700_000_000_000))
    topics.update(TopicConfig("Base", 2, 2))  # a whole-file write
    before = (tmp_path / "topics.json").read_text()
    odd = TopicConfig('Ü"x', 1, 1)
    odd.extra = {"q": {1: "bare int key"}}
    topics.update(TopicConfig("Z", 4, 4), persist=False)
    for config in (TopicConfig("A", 4, 4), odd):  # one write of two lines (Z, A), then one of one
        topics.update(config, persist=False)
        topics.persist_changes()
    topics.update(TopicConfig("A", 8, 8), persist=False)
    topics.delete("Base")  # whole-file write: takes every change so far and empties the journal
    assert _journal_lines(tmp_path) == []
    topics.update(TopicConfig("C", 3, 3), persist=False)
    topics.update(TopicConfig("D", 3, 3), persist=False)
    topics.persist_changes()
    assert len(_journal_lines(tmp_path)) == 2 and '"C"' not in (tmp_path / "topics.json").read_text()
    assert before != (tmp_path / "topics.json").read_text()

    again = TopicConfigFile(str(tmp_path / "topics.json"), SystemClock(), read_only=True)
    again.load()  # read-only (inspection): replayed in memory, nothing written
    assert again.encode() == topics.encode() and len(_journal_lines(tmp_path)) == 2
    recovered = TopicConfigFile(str(tmp_path / "topics.json"), SystemClock())
    recovered.load()
    assert recovered.encode() == topics.encode()
    assert recovered.table['Ü"x'].extra == {"q": {1: "bare int key"}}
    assert _journal_lines(tmp_path) == [] and (tmp_path / "topics.json").read_text() == topics.text()


def test_journal_lines_older_than_the_file_or_torn_are_not_replayed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash between a whole-file write and the journal's reset leaves lines the file holds already (a
    later delete must not be undone by them); a line cut short by a crash is ignored, as is what follows."""
    topics = TopicConfigFile(str(tmp_path / "topics.json"), FakeClock(1_700_000_000_000))
    topics.update(TopicConfig("Gone", 1, 1), persist=False)
    topics.persist_changes()
    reset = TopicConfigFile._reset_journal
    monkeypatch.setattr(TopicConfigFile, "_reset_journal", lambda self, journal: None)  # the crash
    topics.delete("Gone")
    stale = (tmp_path / "topics.json.journal").read_text()  # the line and the fold line before the file
    assert len(stale.splitlines()) == 2
    monkeypatch.setattr(TopicConfigFile, "_reset_journal", reset)
    topics._reset_journal(str(tmp_path / "topics.json.journal"))
    topics.update(TopicConfig("Kept", 1, 1), persist=False)
    topics.persist_changes()
    kept = (tmp_path / "topics.json.journal").read_text()
    (tmp_path / "topics.json.journal").write_text(stale + kept + kept[: len(kept) // 2])
    recovered = TopicConfigFile(str(tmp_path / "topics.json"), SystemClock())
    recovered.load()
    assert set(recovered.table) == {"Kept"} and recovered.data_version.counter == topics.data_version.counter
    assert _journal_lines(tmp_path) == []


def test_the_journal_folds_once_it_is_as_long_as_the_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Folding when the journal holds as many lines as the table has entries keeps creating N topics at
    O(N) written in all (each whole-file write pays for as many appends); fold() writes what is left."""
    monkeypatch.setattr("store.config_files.JOURNAL_FOLD_MIN", 4)
    topics = TopicConfigFile(str(tmp_path / "topics.json"), FakeClock(1_700_000_000_000))
    for name in ("A", "B", "C"):
        topics.update(TopicConfig(name), persist=False)
        topics.persist_changes()
    assert len(_journal_lines(tmp_path)) == 3 and not (tmp_path / "topics.json").exists()
    topics.update(TopicConfig("D"), persist=False)
    topics.persist_changes()  # the fourth line: folded instead
    assert _journal_lines(tmp_path) == [] and '"D"' in (tmp_path / "topics.json").read_text()
    topics.update(TopicConfig("E"), persist=False)
    topics.persist_changes()
    topics.fold()
    assert _journal_lines(tmp_path) == [] and (tmp_path / "topics.json").read_text() == topics.text()


def test_a_damaged_journal_line_is_reported_at_error_and_the_journal_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    topics = TopicConfigFile(str(tmp_path / "topics.json"), FakeClock(1_700_000_000_000))
    for name in ("A", "B"):
        topics.update(TopicConfig(name), persist=False)
        topics.persist_changes()
    first, second = _journal_lines(tmp_path)
    (tmp_path / "topics.json.journal").write_text(f"{first}\n{{garbled\n{second}\n")
    recovered = TopicConfigFile(str(tmp_path / "topics.json"), SystemClock())
    with caplog.at_level(logging.ERROR):
        recovered.load()
    assert set(recovered.table) == {"A"}
    kept = list(tmp_path.glob("topics.json.journal.damaged.*"))
    assert "line 2 of 3 unreadable" in caplog.text and len(kept) == 1 and str(kept[0]) in caplog.text
    assert kept[0].read_text() == f"{first}\n{{garbled\n{second}\n"
    # a second incident keeps its own copy: the first one's is not overwritten
    (tmp_path / "topics.json.journal").write_text("{garbled again\n")
    TopicConfigFile(str(tmp_path / "topics.json"), SystemClock()).load()
    assert len(list(tmp_path.glob("topics.json.journal.damaged.*"))) == 2
    assert kept[0].read_text() == f"{first}\n{{garbled\n{second}\n"


def test_journaled_topics_a_java_broker_rewrote_the_file_without_are_restored_and_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """After a SIGKILL the journal's topics are not in topics.json; a Java broker started on the store reads
    only the file and rewrites it with versions of its own, as high as the journal's lines or higher. Our
    next start must still fold the journaled creations in (they were answered as created), and say so."""
    path = tmp_path / "topics.json"
    topics = TopicConfigFile(str(path), FakeClock(1_700_000_000_000))
    topics.update(TopicConfig("Base", 2, 2))  # the file at version 1
    for name in ("J1", "J2"):
        topics.update(TopicConfig(name, 4, 4), persist=False)
        topics.persist_changes()  # journal lines at versions 2 and 3; SIGKILL: no fold
    java = TopicConfigFile(str(path), FakeClock(1_700_000_500_000))
    JsonConfigFile.load(java)  # what Java reads: topics.json alone
    for name in ("JavaA", "JavaB", "JavaC"):
        java.table[name] = TopicConfig(name, 1, 1)
        java.data_version.next_version(java.clock.now_ms())
    JsonConfigFile.persist(java)  # Java's ConfigManager.persist: the journal untouched
    assert java.data_version.counter > topics.data_version.counter
    recovered = TopicConfigFile(str(path), SystemClock())
    with caplog.at_level(logging.ERROR):
        recovered.load()
    assert set(recovered.table) == {"Base", "J1", "J2", "JavaA", "JavaB", "JavaC"}
    assert recovered.data_version.counter > java.data_version.counter
    assert "J1" in caplog.text and "J2" in caplog.text
    assert _journal_lines(tmp_path) == [] and '"J2"' in path.read_text()
