"""DLedger format codecs: vectors derived by hand from the Java coders, and round-trips."""

from __future__ import annotations

import os
import zlib

import pytest
from hypothesis import given, strategies as st

from store import dledger as dl


def test_sizes_match_dledger_entry_constants() -> None:
    # DLedgerEntry: POS_OFFSET = 4+4+8+8, HEADER_SIZE = POS_OFFSET+8+4+4+4, BODY_OFFSET = HEADER_SIZE+4
    assert (dl.POS_OFFSET, dl.HEADER_SIZE, dl.BODY_OFFSET, dl.INDEX_UNIT_SIZE) == (24, 44, 48, 32)
    # DLedgerConfig defaults: 1 GiB data files, 32 * 5 Mi index records per index file
    assert (dl.DATA_FILE_SIZE, dl.INDEX_FILE_SIZE) == (1 << 30, 167772160)


def test_entry_vector() -> None:
    # DLedgerEntryCoder#encode: magic, size, index, term, pos, channel, chainCrc, bodyCrc, body length, body
    e = dl.Entry(index=3, term=2, body=b"ab", pos=0x1234)
    want = bytes.fromhex(
        "00000001"  # magic MAGIC_1
        "00000032"  # size 48 + 2
        "0000000000000003"  # index
        "0000000000000002"  # term
        "0000000000001234"  # pos
        "00000000"  # channel
        "00000000"  # chain crc (never computed by 0.3.1.2)
        "00000000"  # body crc (likewise)
        "00000002"  # body length
        "6162"
    )
    assert dl.encode_entry(e) == want
    assert dl.decode_entry(want) == e


def test_index_vector() -> None:
    # DLedgerEntryCoder#encodeIndex: magic, pos, size, index, term
    e = dl.Entry(index=3, term=2, body=b"ab", pos=0x1234)
    want = bytes.fromhex("0000000100000000000012340000003200000000000000030000000000000002")
    assert dl.encode_index(e) == want
    into = bytearray(b"\xee" * 40)
    dl.pack_index(into, 4, e)  # (in place, as the log writes a leader's record into its mapped index file)
    assert into == b"\xee" * 4 + want + b"\xee" * 4
    assert dl.decode_index(want) == dl.IndexRecord(1, 0x1234, 50, 3, 2)
    assert dl.index_matches(dl.decode_index(want), e)


def test_blank_vector_and_roll_rule() -> None:
    # MmapFileList#preAppend: magic -1 then the remaining length; the rest of the file stays zero
    assert dl.encode_blank(12) == bytes.fromhex("ffffffff0000000c00000000")
    with pytest.raises(ValueError):
        dl.encode_blank(7)
    # an entry rolls when it and MIN_BLANK_LEN no longer fit
    assert not dl.needs_roll(100, 42, 50)
    assert dl.needs_roll(100, 43, 50)


def test_checkpoint_and_term_vectors() -> None:
    # IOUtils#properties2String over a Java 8 Properties (Hashtable of 11 buckets, iterated high to low):
    # "endIndex" hashes to bucket 3, "committedIndex" to 1; "voteLeader" to 8, "currTerm" to 1
    assert dl.encode_checkpoint(7, 5) == "endIndex=7\ncommittedIndex=5\n"
    assert dl.decode_checkpoint("committedIndex=5\nendIndex=7\n") == (7, 5)
    assert dl.decode_checkpoint("#x\nendIndex=\n") == (None, None)
    assert dl.encode_term(4, None) == "voteLeader=\ncurrTerm=4\n"
    assert dl.decode_term("voteLeader=n1\ncurrTerm=4\n") == (4, "n1")
    assert dl.decode_term("voteLeader=\ncurrTerm=4\n") == (4, None)


def test_term_file_round_trip_and_bak(tmp_path: object) -> None:
    d = str(tmp_path)
    assert dl.load_term(d) == (0, None)
    dl.persist_term(d, 3, "n2")
    dl.persist_term(d, 4, None)
    assert dl.load_term(d) == (4, None)

    os.remove(os.path.join(d, dl.TERM_FILE))  # a crash between IOUtils#string2File's delete and rename
    assert dl.load_term(d) == (3, "n2")


@pytest.mark.parametrize(
    "mutate,reason",
    [
        (lambda b: b"\x00\x00\x00\x02" + b[4:], "unknown magic"),
        (lambda b: b[:4] + b"\x00\x00\x00\x33" + b[8:], "size"),
        (lambda b: b[:-1], "cut"),
        (lambda b: b[:20], "header needs"),
    ],
)
def test_decode_rejects_damage(mutate: object, reason: str) -> None:
    good = dl.encode_entry(dl.Entry(0, 1, b"ab", 0))
    with pytest.raises(dl.CorruptEntryError, match=reason):
        dl.decode_entry(mutate(good))  # type: ignore[operator]


entries = st.builds(
    dl.Entry,
    index=st.integers(0, 2**63 - 1),
    term=st.integers(0, 2**63 - 1),
    body=st.binary(max_size=300),
    pos=st.integers(-1, 2**63 - 1),
    channel=st.integers(-(2**31), 2**31 - 1),
    chain_crc=st.integers(-(2**31), 2**31 - 1),
    body_crc=st.integers(-(2**31), 2**31 - 1),
)


@given(entries, st.binary(max_size=20))
def test_entry_round_trip(e: dl.Entry, prefix: bytes) -> None:
    data = prefix + dl.encode_entry(e) + b"trailing"
    assert dl.decode_entry(data, len(prefix)) == e
    assert dl.decode_index(dl.encode_index(e)) == dl.IndexRecord(e.magic, e.pos, e.size, e.index, e.term)


@given(st.integers(-1, 2**62), st.integers(-1, 2**62), st.integers(0, 2**62), st.text(alphabet="n0123456789"))
def test_properties_round_trip(end: int, committed: int, term: int, vote: str) -> None:
    assert dl.decode_checkpoint(dl.encode_checkpoint(end, committed)) == (end, committed)
    assert dl.decode_term(dl.encode_term(term, vote)) == (term, vote or None)


#: What a `heard` record's boot id and leader may hold: any text on one line.
one_line = st.text(st.characters(blacklist_characters="\n\r", blacklist_categories=("Cs",)), max_size=40)


@given(one_line, one_line, one_line, one_line, st.integers(-(2**63), 2**63 - 1))
def test_heard_round_trip(boot: str, group: str, self_id: str, leader: str, until: int) -> None:
    record = dl.encode_heard(boot, group, self_id, leader, until)
    assert dl.decode_heard(record) == (boot, group, self_id, leader, until)
    assert len(record) >= dl.HEARD_SIZE  # (padded: a rewrite in place leaves nothing of the last)


@given(one_line, one_line, st.integers(0, 2**62), st.data())
def test_a_heard_record_short_or_damaged_keeps_no_promise(
    boot: str, leader: str, until: int, data: st.DataObject
) -> None:
    """Torn, cut short or a byte changed anywhere (its padding too): read as no record, as after a reboot."""
    record = dl.encode_heard(boot, "g", "n1", leader, until)
    cut = data.draw(st.integers(0, len(record) - 1))
    assert dl.decode_heard(record[:cut]) is None or record[cut:].strip(b"\n") == b""
    at = data.draw(st.integers(0, len(record) - 1))
    flipped = bytearray(record)
    flipped[at] ^= data.draw(st.integers(1, 255))
    assert dl.decode_heard(bytes(flipped)) is None


def test_a_heard_record_of_another_form_keeps_no_promise() -> None:
    good = dl.encode_heard("b", "g", "n1", "n0", 5)
    assert dl.decode_heard(b"") is None
    assert dl.decode_heard(good.replace(b"mqctl-heard 2", b"mqctl-heard 3")) is None
    # (version 1 named no group nor member: a record of it is none)
    head = b"mqctl-heard 1\nbootId=b\nleader=n0\nuntilBootMs=5\n"
    assert dl.decode_heard((head + b"crc=%d\n" % zlib.crc32(head)).ljust(160, b"\n")) is None
    for fields in (("b", "g", "n1", "n\n0"), ("b", "g\r", "n1", "n0"), ("b", "g", "n\n1", "n0")):
        with pytest.raises(ValueError, match="line break"):
            dl.encode_heard(*fields, 5)


def test_heard_file_written_in_place_and_read_back(tmp_path: object) -> None:
    """Rewritten over itself (never grown past its first size, nothing of a longer record left), read back;
    missing or damaged it reads as none."""
    d = str(tmp_path)
    assert dl.load_heard(d) is None
    dl.keep_heard(d, dl.encode_heard("boot", "g", "n2", "n" * 300, 7))
    assert dl.load_heard(d) == ("boot", "g", "n2", "n" * 300, 7)
    dl.keep_heard(d, dl.encode_heard("boot", "g", "n2", "n1", 9))
    path = os.path.join(d, dl.HEARD_FILE)
    assert dl.load_heard(d) == ("boot", "g", "n2", "n1", 9) and os.path.getsize(path) == dl.HEARD_SIZE
    with open(path, "r+b") as f:
        f.truncate(30)
    assert dl.load_heard(d) is None
