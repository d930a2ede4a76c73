"""Byte-level checks of the files the engine writes, against known byte vectors
(docs/store-format.md §consumequeue, docs/store-format.md §indexfile, docs/store-format.md §checkpoint)."""

from __future__ import annotations

import datetime
import os
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from store.checkpoint import CHECKPOINT_FILE_SIZE, StoreCheckpoint
from store.clock import FakeClock
from store.config import StoreConfig
from store.consumequeue import PREFILL_UNIT, decode_unit, encode_unit, unit_location
from store.engine import DefaultMessageStore
from store.indexfile import ENTRY, IndexFile, index_file_name, index_file_size
from store.javahash import index_key_hash
from store.mapped_file import offset_to_file_name
from store.message import Message

from .test_record import VECTOR_15_11_R0

UNIQ = "TopicTest#C0A801641F906D06D69C0A1B2C3D0001"


def test_consume_queue_units_15_5() -> None:
    assert encode_unit(1024, 198, 2_598_919).hex() == "0000000000000400000000c6000000000027a807"
    assert encode_unit(2048, 230, 1_700_000_010_123).hex() == "0000000000000800000000e60000018bcfe58f8b"
    assert encode_unit(0, 0, -394_906_953)[12:].hex() == "ffffffffe87632b7"
    assert PREFILL_UNIT.hex() == "0000000000000000" + "7fffffff" + "0000000000000000"
    assert decode_unit(encode_unit(1024, 198, -1)) == (1024, 198, -1)
    f = 6_000_000
    assert unit_location(0, f) == ("00000000000000000000", 0)
    assert unit_location(299_999, f) == ("00000000000000000000", 5_999_980)
    assert unit_location(300_000, f) == ("00000000000006000000", 0)
    assert unit_location(1_234_567, f) == ("00000000000024000000", 691_340)


def test_index_default_sizes_15_7(tmp_path: Path) -> None:
    f = IndexFile(str(tmp_path / "20231114221320123"), 5_000_000, 20_000_000)
    assert os.path.getsize(f.path) == index_file_size(5_000_000, 20_000_000) == 420_000_040
    assert f.put_key(UNIQ, 1024, 1_700_000_000_123)
    assert f.put_key("TopicTest#key1", 1024, 1_700_000_000_123)
    f.write_header()
    mm = f.mm
    assert mm[0:40].hex() == (
        "0000018bcfe5687b0000018bcfe5687b0000000000000400000000000000040000000002" + "00000003"
    )
    assert mm[3_937_880:3_937_884].hex() == "00000002"
    assert mm[13_651_088:13_651_092].hex() == "00000001"
    assert mm[20_000_040:20_000_060] == bytes(20)
    assert mm[20_000_060:20_000_080].hex() == "59e88d5a00000000000004000000000000000000"
    assert mm[20_000_080:20_000_100].hex() == "62b4514c00000000000004000000000000000000"
    f.destroy()


SMALL_INDEX_15_8 = (
    "0000018bcfe5687b0000018bcfe587400000000000000400000000000000064000000003000000060000000000000000"
    "000000050000000400000003000000000000000000000000000000000000000000000000000000000000000059e88d5a"
    "0000000000000400000000000000000062b4514c0000000000000400000000000000000062b4514c00000000000004c6"
    "000000050000000262b4514b0000000000000578000000060000000062b4514a00000000000006400000000700000001"
)


def test_small_index_full_dump_15_8(tmp_path: Path) -> None:
    f = IndexFile(str(tmp_path / "idx"), 8, 6)
    inserts = [
        (UNIQ, 1024, 1_700_000_000_123),
        ("TopicTest#key1", 1024, 1_700_000_000_123),
        ("TopicTest#key1", 1222, 1_700_000_005_999),
        ("TopicTest#key2", 1400, 1_700_000_007_000),
        ("TopicTest#key3", 1600, 1_700_000_008_000),
    ]
    for key, phy, ts in inserts:
        assert f.put_key(key, phy, ts)
    assert not f.put_key("TopicTest#key4", 1800, 1_700_000_009_000)  # capacity is indexNum - 1
    f.write_header()
    assert bytes(f.mm[:]).hex() == SMALL_INDEX_15_8
    out: list[int] = []
    f.select_phy_offsets("TopicTest#key1", 64, 0, 2**62, out)
    assert out == [1222, 1024]
    out = []
    f.select_phy_offsets("TopicTest#key1", 64, 1_700_000_004_000, 2**62, out)
    assert out == [1222]
    out = []
    f.select_phy_offsets("TopicTest#key3", 64, 0, 2**62, out)
    assert out == [1600]
    f.close()
    reopened = IndexFile(str(tmp_path / "idx"), 8, 6)
    assert (reopened.index_count, reopened.hash_slot_count, reopened.end_phy_offset) == (6, 3, 1600)
    reopened.close()


def test_checkpoint_15_9(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint"
    cp = StoreCheckpoint(str(path))
    cp.physic_msg_timestamp = cp.logics_msg_timestamp = 1_700_000_000_123
    cp.index_msg_timestamp = 1_699_999_990_000
    cp.flush()
    cp.close()
    data = path.read_bytes()
    assert len(data) == CHECKPOINT_FILE_SIZE
    assert data[:24].hex() == "0000018bcfe5687b0000018bcfe5687b0000018bcfe540f0"
    assert data[24:] == bytes(4072)
    again = StoreCheckpoint(str(path), read_only=True)
    assert again.recovery_limit(index_safe=False) == 1_699_999_997_123
    assert again.recovery_limit(index_safe=True) == 1_699_999_990_000


def test_tiny_log_roll_15_11(tmp_path: Path) -> None:
    clock = FakeClock()
    cfg = StoreConfig(store_path_root_dir=str(tmp_path), mapped_file_size_commit_log=512)
    with DefaultMessageStore(cfg, clock=clock, store_host=("10.0.0.1", 10911)) as store:
        for i in range(5):
            clock.set(1_700_000_000_100 + i)
            r = store.put_message(
                Message(
                    topic="TopicTest",
                    body=f"msg-{i}".encode(),
                    born_timestamp=1_700_000_000_000 + i,
                    born_host=("10.0.0.2", 40000),
                    properties={"TAGS": "TagA"},
                )
            )
            assert r.ok and r.queue_offset == i and r.wrote_bytes == 114
            assert r.phys_offset == [0, 114, 228, 342, 512][i]
    cl = tmp_path / "commitlog"
    assert sorted(os.listdir(cl)) == ["00000000000000000000", "00000000000000000512"]
    first = (cl / "00000000000000000000").read_bytes()
    second = (cl / "00000000000000000512").read_bytes()
    assert len(first) == len(second) == 512
    assert first[:114] == VECTOR_15_11_R0
    assert first[456:464].hex() == "00000038cbd43194" and first[464:] == bytes(48)
    assert second[28:36] == (512).to_bytes(8, "big") and second[20:28] == (4).to_bytes(8, "big")
    cq = (tmp_path / "consumequeue" / "TopicTest" / "0" / "00000000000000000000").read_bytes()
    assert len(cq) == 6_000_000
    expected = b"".join(encode_unit(off, 114, 2_598_919) for off in (0, 114, 228, 342, 512))
    assert cq[:100] == expected and cq[100:120] == bytes(20)
    assert not (tmp_path / "index").exists() or os.listdir(tmp_path / "index") == []
    assert (tmp_path / "lock").read_bytes() == b"lock"
    assert len((tmp_path / "checkpoint").read_bytes()) == 4096
    assert not (tmp_path / "abort").exists()


def test_file_names_15_12() -> None:
    gib = 1_073_741_824
    assert offset_to_file_name(0) == "00000000000000000000"
    assert offset_to_file_name(gib) == "00000000001073741824"
    off = 5_000_000_000
    assert offset_to_file_name(off - off % gib) == "00000000004294967296" and off % gib == 705_032_704
    local = datetime.datetime(2023, 11, 14, 22, 13, 20, 123000)  # naive = the machine's local time
    assert index_file_name(int(local.timestamp() * 1000)) == "20231114221320123"


@given(st.integers(-(2**63), 2**63 - 1), st.integers(-(2**31), 2**31 - 1), st.integers(-(2**63), 2**63 - 1))
def test_unit_round_trip(phys: int, size: int, tags: int) -> None:
    raw = encode_unit(phys, size, tags)
    assert len(raw) == 20 and decode_unit(memoryview(b"\x00" * 3 + raw), 3) == (phys, size, tags)


@given(
    st.integers(0, 2**31 - 1), st.integers(0, 2**63 - 1), st.integers(0, 2**31 - 1), st.integers(0, 2**31 - 1)
)
def test_index_entry_round_trip(key_hash: int, phy: int, diff: int, prev: int) -> None:
    assert ENTRY.unpack(ENTRY.pack(key_hash, phy, diff, prev)) == (key_hash, phy, diff, prev)


@settings(max_examples=30)
@given(
    st.lists(
        st.tuples(st.sampled_from([f"T#k{i}" for i in range(12)]), st.integers(0, 50)),
        min_size=1,
        max_size=60,
    )
)
def test_index_lookups_match_a_model(
    tmp_path_factory: pytest.TempPathFactory, inserts: list[tuple[str, int]]
) -> None:
    """Every key finds exactly the offsets inserted for it (modulo hash collisions, filtered by hash)."""
    f = IndexFile(str(tmp_path_factory.mktemp("idx") / "i"), 4, 100)  # 4 slots: chains collide a lot
    model: dict[str, list[int]] = {}
    phy = 0
    for key, gap in inserts:
        phy += gap + 1
        assert f.put_key(key, phy, 1_700_000_000_000 + phy)
        model.setdefault(key, []).append(phy)
    same_hash: dict[int, list[int]] = {}
    for key, offsets in model.items():
        same_hash.setdefault(index_key_hash(key), []).extend(offsets)
    for key in model:
        out: list[int] = []
        f.select_phy_offsets(key, 1000, 0, 2**62, out)
        assert sorted(out) == sorted(same_hash[index_key_hash(key)])
    f.destroy()
