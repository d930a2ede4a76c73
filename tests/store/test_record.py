"""Record, properties, msgId and hash codecs against known byte vectors
(docs/store-format.md §commitlog-records) and round trips."""

from __future__ import annotations

import ipaddress
import zlib

import pytest
from hypothesis import given, strategies as st

from store.errors import CorruptRecordError
from store.javahash import index_key_hash, java_hash, tags_code
from store.message import BORNHOST_V6_FLAG, COMPRESSED_FLAG, STOREHOST_V6_FLAG, Message
from store.record import (
    body_crc,
    create_msg_id,
    decode_msg_id,
    decode_properties,
    decode_record,
    decode_uniq_key,
    encode_blank,
    encode_properties,
    encode_record,
    read_record_info,
    record_size,
)

VECTOR_15_1 = bytes.fromhex(
    "000000c6daa320a769c865ed000000010000000000000000000000030000000000000400000000000000018bcfe568"
    "00c0a801640000c3500000018bcfe5687bc0a8010a00002a9f0000000000000000000000000000000e48656c6c6f20"
    "526f636b65744d5109546f706963546573740054554e49515f4b455901433041383031363431463930364430364436"
    "394330413142324333443030303102434c55535445520144656661756c74436c7573746572024b455953016b657931"
    "02544147530154616741"
)
PROPS_15_1 = {
    "UNIQ_KEY": "C0A801641F906D06D69C0A1B2C3D0001",
    "CLUSTER": "DefaultCluster",
    "KEYS": "key1",
    "TAGS": "TagA",
}
VECTOR_15_10 = bytes.fromhex(
    "0000007fdaa320a70cdc1683000000000000000000000000000000000000000000000000000000300000018bcfe568"
    "0020010db80000000000000000000000010000c3500000018bcfe5687b20010db800000000000000000000000a0000"
    "2a9f00000000000000000000000000000001780254360009544147530154616742"
)
VECTOR_15_11_R0 = bytes.fromhex(
    "00000072daa320a71561fc75000000000000000000000000000000000000000000000000000000000000018bcfe568"
    "000a00000200009c400000018bcfe568640a00000100002a9f000000000000000000000000000000056d73672d3009"
    "546f706963546573740009544147530154616741"
)


def _msg_15_1() -> Message:
    return Message(
        topic="TopicTest",
        body=b"Hello RocketMQ",
        queue_id=1,
        born_timestamp=1_700_000_000_000,
        born_host=("192.168.1.100", 50000),
        properties=dict(PROPS_15_1),
    )


def test_encode_matches_vector_15_1() -> None:
    rec = encode_record(
        _msg_15_1(),
        queue_offset=3,
        physical_offset=1024,
        store_timestamp=1_700_000_000_123,
        store_host=("192.168.1.10", 10911),
    )
    assert rec == VECTOR_15_1
    assert record_size(14, 9, 84) == 198


def test_decode_vector_15_1_from_memoryview_at_offset() -> None:
    buf = memoryview(b"\x00" * 7 + VECTOR_15_1 + b"\xff" * 5)
    m = decode_record(buf, 7, 7 + 198)
    assert (m.topic, m.queue_id, m.queue_offset, m.commit_log_offset) == ("TopicTest", 1, 3, 1024)
    assert m.body == b"Hello RocketMQ" and m.body_crc == 1774740973 == body_crc(b"Hello RocketMQ")
    assert m.born_host == ("192.168.1.100", 50000) and m.store_host == ("192.168.1.10", 10911)
    assert (m.born_timestamp, m.store_timestamp) == (1_700_000_000_000, 1_700_000_000_123)
    assert m.properties == PROPS_15_1
    assert m.msg_id == "C0A8010A00002A9F0000000000000400"
    assert m.tags == "TagA" and m.keys == ["key1"] and m.uniq_key == PROPS_15_1["UNIQ_KEY"]
    info = read_record_info(buf, 7, 7 + 198)
    assert (info.size, info.store_timestamp, info.tags) == (198, 1_700_000_000_123, "TagA")


def test_ipv6_vector_15_10() -> None:
    msg = Message(
        topic="T6",
        body=b"x",
        born_timestamp=1_700_000_000_000,
        born_host=("2001:db8::1", 50000),
        properties={"TAGS": "TagB"},
    )
    rec = encode_record(
        msg,
        queue_offset=0,
        physical_offset=0,
        store_timestamp=1_700_000_000_123,
        store_host=("2001:db8::a", 10911),
    )
    assert rec == VECTOR_15_10
    m = decode_record(rec)
    assert m.sys_flag == BORNHOST_V6_FLAG | STOREHOST_V6_FLAG == 0x30
    assert m.born_host == ("2001:db8::1", 50000) and m.store_host == ("2001:db8::a", 10911)
    assert m.store_timestamp == 1_700_000_000_123 and m.body_crc == 215750275
    assert m.msg_id == "20010DB800000000000000000000000A00002A9F0000000000000000"


def test_tiny_log_record_0_vector_15_11() -> None:
    msg = Message(
        topic="TopicTest",
        body=b"msg-0",
        born_timestamp=1_700_000_000_000,
        born_host=("10.0.0.2", 40000),
        properties={"TAGS": "TagA"},
    )
    rec = encode_record(
        msg,
        queue_offset=0,
        physical_offset=0,
        store_timestamp=1_700_000_000_100,
        store_host=("10.0.0.1", 10911),
    )
    assert rec == VECTOR_15_11_R0 and len(rec) == 114
    assert encode_blank(56) == bytes.fromhex("00000038cbd43194")


def test_msg_id_vector_15_2_and_decode() -> None:
    assert create_msg_id(("192.168.1.10", 10911), 1024) == "C0A8010A00002A9F0000000000000400"
    assert decode_msg_id("C0A8010A00002A9F0000000000000400") == (("192.168.1.10", 10911), 1024)
    assert decode_msg_id("20010DB800000000000000000000000A00002A9F0000000000000000") == (
        ("2001:db8::a", 10911),
        0,
    )
    with pytest.raises(ValueError):
        decode_msg_id("C0A8")


def test_uniq_key_vector_15_3() -> None:
    u = decode_uniq_key("C0A801641F906D06D69C0A1B2C3D0001")
    assert (u.ip, u.pid, u.class_loader_hash & 0xFFFFFFFF, u.time_in_month_ms, u.counter) == (
        "192.168.1.100",
        8080,
        0x6D06D69C,
        169_552_957,
        1,
    )
    assert decode_uniq_key("FD000000000000000000000000000002725730946E0968F685BF0000").ip == "fd00::2"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"A\x01x\x02B\x01y\x02", {"A": "x", "B": "y"}),
        (b"A\x01x\x02B\x01y", {"A": "x", "B": "y"}),
        (b"A\x01\x02B\x01y\x02\x02C\x01z", {"B": "y", "C": "z"}),
        (b"", {}),
    ],
)
def test_properties_vector_15_4(raw: bytes, expected: dict[str, str]) -> None:
    assert decode_properties(raw) == expected


def test_properties_reject_separators() -> None:
    with pytest.raises(ValueError):
        encode_properties({"A": "x\x01y"})


@pytest.mark.parametrize(
    ("s", "h", "ik"),
    [
        ("", 0, 0),
        ("a", 97, 97),
        ("TagA", 2_598_919, 2_598_919),
        ("TagB", 2_598_920, 2_598_920),
        ("TopicTest", -1_902_610_879, 1_902_610_879),
        ("TopicTest#key1", -1_655_984_460, 1_655_984_460),
        ("TopicTest#OrderID001", -1_231_272_886, 1_231_272_886),
        ("TopicTest#C0A801641F906D06D69C0A1B2C3D0001", -1_508_412_762, 1_508_412_762),
        ("ORDER_CREATED", -394_906_953, 394_906_953),
        ("hello world", 1_794_106_052, 1_794_106_052),
        ("polygenelubricants", -2_147_483_648, 0),
        ("日本", 835_047, 835_047),
        ("😀", 1_772_899, 1_772_899),
        ("Tag-é", 80_566_102, 80_566_102),
    ],
)
def test_java_hash_vector_15_6(s: str, h: int, ik: int) -> None:
    assert java_hash(s) == h
    assert index_key_hash(s) == ik


def test_tags_code_sign_extension_and_none() -> None:
    assert tags_code("ORDER_CREATED").to_bytes(8, "big", signed=True).hex() == "ffffffffe87632b7"
    assert tags_code(None) == 0 and tags_code("") == 0
    assert tags_code("null") == 3392903


def _reference_java_hash(s: str) -> int:
    h = 0
    b = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(b), 2):
        h = (31 * h + ((b[i] << 8) | b[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


@given(st.text(max_size=200))
def test_java_hash_matches_reference_loop(s: str) -> None:
    assert java_hash(s) == _reference_java_hash(s)


def test_java_hash_of_a_lone_surrogate_is_its_code_unit() -> None:
    """Java hashes UTF-16 code units, paired or not: a JSON subscription may carry a lone surrogate."""
    assert java_hash("\ud800") == 0xD800
    assert java_hash("a\udfffb") == (31 * (31 * 97 + 0xDFFF) + 98)


@given(st.text(st.characters(categories=["Cs", "Ll", "Lo"]), max_size=50))
def test_java_hash_with_lone_surrogates_matches_reference_loop(s: str) -> None:
    assert java_hash(s) == _reference_java_hash(s)


@given(st.text(st.characters(max_codepoint=127), max_size=700))
def test_java_hash_of_ascii_matches_reference_loop(s: str) -> None:
    """ASCII takes its own loop (one byte per code unit), short strings and long ones alike."""
    assert java_hash(s) == _reference_java_hash(s)
    assert java_hash("\x7f" * 639 + s) == _reference_java_hash("\x7f" * 639 + s)


@pytest.mark.parametrize(
    "bad",
    [
        lambda r: r[:4] + b"\x12\x34\x56\x78" + r[8:],  # magic
        lambda r: r[:100] + bytes([r[100] ^ 0xFF]) + r[101:],  # body byte -> CRC
        lambda r: r[:150],  # truncated
        lambda r: (len(r) + 3).to_bytes(4, "big") + r[4:] + b"\x00\x00\x00",  # size mismatch
    ],
)
def test_corrupt_records_are_rejected(bad) -> None:  # type: ignore[no-untyped-def]
    rec = bad(VECTOR_15_1)
    with pytest.raises(CorruptRecordError) as ei:
        decode_record(rec, 0, len(rec), check_crc=True)
    assert ei.value.offset == 0


def test_compressed_body_is_inflated() -> None:
    plain = b"x" * 5000
    msg = Message(topic="T", body=zlib.compress(plain), sys_flag=COMPRESSED_FLAG | 0x300)
    rec = encode_record(
        msg, queue_offset=0, physical_offset=0, store_timestamp=1, store_host=("127.0.0.1", 10911)
    )
    m = decode_record(rec)
    assert m.body == plain and m.stored_body == msg.body and m.compressed


prop_text = st.text(
    st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), min_size=1, max_size=20
)
hosts = st.one_of(
    st.tuples(st.ip_addresses(v=4).map(str), st.integers(0, 65535)),
    st.tuples(st.ip_addresses(v=6).map(lambda a: str(a)), st.integers(0, 65535)),
)


@given(
    topic=st.text("abcXYZ09_-%|", min_size=1, max_size=127),
    body=st.binary(max_size=300),
    props=st.dictionaries(prop_text, prop_text, max_size=6),
    qid=st.integers(0, 2**31 - 1),
    qoff=st.integers(0, 2**62),
    phys=st.integers(0, 2**62),
    ts=st.integers(0, 2**50),
    born=hosts,
    store=hosts,
    flag=st.integers(-(2**31), 2**31 - 1),
)
def test_record_round_trip(topic, body, props, qid, qoff, phys, ts, born, store, flag) -> None:  # type: ignore[no-untyped-def]
    msg = Message(
        topic=topic, body=body, queue_id=qid, flag=flag, properties=props, born_timestamp=ts, born_host=born
    )
    rec = encode_record(
        msg, queue_offset=qoff, physical_offset=phys, store_timestamp=ts + 1, store_host=store
    )
    m = decode_record(memoryview(rec))
    assert m.store_size == len(rec)
    assert (m.topic, m.body, m.queue_id, m.flag, m.queue_offset, m.commit_log_offset) == (
        topic,
        body,
        qid,
        flag,
        qoff,
        phys,
    )
    assert m.properties == props
    assert m.born_host[1] == born[1] and m.store_host[1] == store[1]
    assert m.born_timestamp == ts and m.store_timestamp == ts + 1
    assert decode_msg_id(m.msg_id)[1] == phys


@given(st.dictionaries(prop_text, prop_text, max_size=8), st.booleans())
def test_properties_round_trip_with_and_without_trailing_separator(props, trailing) -> None:  # type: ignore[no-untyped-def]
    raw = encode_properties(props)
    if trailing and raw:
        raw += b"\x02"
    # segments shorter than 3 characters are dropped by the 4.9.1+ rule
    assert decode_properties(raw) == {k: v for k, v in props.items() if len(k) + len(v) + 1 >= 3}


def test_reads_a_v2_record_with_a_two_byte_topic_length() -> None:
    """5.x writes magic 0xDAA320AB with an i16 TOPIC LENGTH for long topics
    (docs/store-format.md §rocketmq-5x); we read it."""
    topic = "t" * 200
    msg = Message(topic="x", body=b"hello", properties={"TAGS": "a"})
    v1 = encode_record(
        msg, queue_offset=0, physical_offset=0, store_timestamp=5, store_host=("127.0.0.1", 10911)
    )
    body_end = 88 + 5
    props = v1[body_end + 2 :]
    rest = topic.encode() + props
    v2 = bytearray(v1[:body_end] + len(topic).to_bytes(2, "big") + rest)
    v2[0:4] = len(v2).to_bytes(4, "big")
    v2[4:8] = bytes.fromhex("daa320ab")
    m = decode_record(bytes(v2))
    assert m.topic == topic and m.body == b"hello" and m.properties == {"TAGS": "a"}
    assert m.magic == -626843477


@pytest.mark.slow
@given(hosts, st.integers(0, 2**63 - 1))
def test_msg_id_round_trip(host: tuple[str, int], offset: int) -> None:
    msg_id = create_msg_id(host, offset)
    assert len(msg_id) == (56 if ":" in host[0] else 32) and msg_id == msg_id.upper()
    (ip, port), back = decode_msg_id(msg_id)
    assert back == offset and port == host[1]
    assert ipaddress.ip_address(ip) == ipaddress.ip_address(host[0])
