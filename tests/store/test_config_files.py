"""fastjson-compatible config files (spec §9, vector §15.13) and their managers."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from store.clock import FakeClock, SystemClock
from store.config_files import (
    ConfigFiles,
    ConsumerOffsetManager,
    DelayOffsetManager,
    SubscriptionGroupConfig,
    TopicConfig,
    TopicConfigManager,
    dumps_fastjson,
    loads_fastjson,
)
from store.errors import ConfigFileError

OFFSETS_15_13 = '{\n\t"offsetTable":{\n\t\t"TopicTest@GroupA":{0:250,1:251\n\t\t},\n\t\t"%RETRY%GroupA@GroupA":{0:0\n\t\t}\n\t}\n}'


def test_vector_15_13() -> None:
    assert loads_fastjson(OFFSETS_15_13) == {
        "offsetTable": {"TopicTest@GroupA": {0: 250, 1: 251}, "%RETRY%GroupA@GroupA": {0: 0}}
    }
    assert dumps_fastjson(loads_fastjson(OFFSETS_15_13)) == OFFSETS_15_13
    assert loads_fastjson('{\n\t"offsetTable":{1:15,3:127\n\t}\n}') == {"offsetTable": {1: 15, 3: 127}}
    assert dumps_fastjson({"offsetTable": {}}) == '{\n\t"offsetTable":{}\n}'
    assert len(dumps_fastjson({"offsetTable": {}})) == 21


def test_reader_tolerates_quoted_keys_and_keeps_numeric_strings_inside_values() -> None:
    data = loads_fastjson('{"offsetTable":{"T@G":{"0":5}}, "note":"{1:2,3:4}", "123":{7:1}}')
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
    text = dumps_fastjson({"offsetTable": table})
    assert loads_fastjson(text) == {"offsetTable": table}


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
    topics = TopicConfigManager(str(tmp_path / "topics.json"), clock)
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
    again = TopicConfigManager(str(tmp_path / "topics.json"), clock)
    again.load()
    assert set(again.table) == {"A"} and again.table["A"].read_queue_nums == 4
    (tmp_path / "topics.json.bak").write_text("{also broken")
    with pytest.raises(ConfigFileError):
        TopicConfigManager(str(tmp_path / "topics.json"), clock).load()


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
    assert topics.text() == dumps_fastjson(topics.encode())  # empty table
    for i in range(5):
        topics.update(TopicConfig(f"T{i}", 4, 4))
    odd = TopicConfig('Ü"x', 1, 1)
    odd.extra = {"zz": {"a": [1, {"b": None}], "c": "é"}, "aa": [], "q": {1: "bare int key"}}
    topics.update(odd)
    table = topics.table["T3"]
    table.perm = 2  # changed in place, not replaced
    text = topics.text()
    assert text == dumps_fastjson(topics.encode())
    assert '"perm":2' in text and "1:" in text
    topics.delete("T1")
    assert topics.text() == dumps_fastjson(topics.encode()) == (tmp_path / "topics.json").read_text()


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


def test_concurrent_persists_leave_a_whole_file(tmp_path: Path) -> None:
    """The loop and worker threads persist the same file: every write is a whole snapshot, never two interleaved."""
    path = tmp_path / "topics.json"
    topics = TopicConfigManager(str(path), SystemClock())
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
    again = TopicConfigManager(str(path), SystemClock())
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
