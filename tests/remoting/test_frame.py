"""Frame codec against the golden frames of a real 4.9.8 NameServer, plus fuzzing of the decoder."""

from __future__ import annotations

import contextlib
import json
import struct

import pytest
from hypothesis import given, strategies as st

from daemon.remoting.codes import LanguageCode, RequestCode, ResponseCode, SerializeType
from daemon.remoting.command import RemotingCommand
from daemon.remoting.errors import RemotingProtocolError
from daemon.remoting.frame import MAX_FRAME_LENGTH, coerce_ext_fields, decode_frame, encode_command


def frame(prefix_hex: str, header: str, body: bytes = b"") -> bytes:
    return bytes.fromhex(prefix_hex) + header.encode() + body


# Requests and responses copied from tests/fixtures/golden-frames.json (prefix, header).
GOLDEN_106_REQ = frame(
    "0000007400000070",
    '{"code":106,"extFields":{},"flag":0,"language":"JAVA","opaque":1,"serializeTypeCurrentRPC":"JSON","version":409}',
)
GOLDEN_105_REQ = frame(
    "0000008900000085",
    '{"code":105,"extFields":{"topic":"GoldenTopic"},"flag":0,"language":"JAVA","opaque":2,'
    '"serializeTypeCurrentRPC":"JSON","version":409}',
)
GOLDEN_105_NOT_EXIST = frame(
    "000000ec000000e8",
    '{"code":17,"flag":1,"language":"JAVA","opaque":2,"remark":"No topic route info in name server for the topic: '
    'GoldenTopic\\nSee http://rocketmq.apache.org/docs/faq/ for further details.","serializeTypeCurrentRPC":"JSON",'
    '"version":409}',
)
GOLDEN_CLUSTER_BODY = (
    b'{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"127.0.0.1:10911"},"brokerName":"broker-a",'
    b'"cluster":"DefaultCluster"}},"clusterAddrTable":{"DefaultCluster":["broker-a"]}}'
)
GOLDEN_106_RESP = frame(
    "0000010f0000005f",
    '{"code":0,"flag":1,"language":"JAVA","opaque":1,"serializeTypeCurrentRPC":"JSON","version":409}',
    GOLDEN_CLUSTER_BODY,
)


def test_decodes_golden_request() -> None:
    decoded = decode_frame(GOLDEN_105_REQ)
    assert decoded is not None
    cmd, consumed = decoded
    assert consumed == len(GOLDEN_105_REQ)
    assert (cmd.code, cmd.opaque, cmd.flag, cmd.version) == (RequestCode.GET_ROUTEINFO_BY_TOPIC, 2, 0, 409)
    assert cmd.ext_fields == {"topic": "GoldenTopic"}
    assert cmd.language is LanguageCode.JAVA and not cmd.is_response and not cmd.is_oneway


def test_encodes_golden_request_byte_for_byte() -> None:
    cmd = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "GoldenTopic"})
    cmd.opaque = 2
    assert encode_command(cmd) == GOLDEN_105_REQ


def test_response_matches_golden_error_frame() -> None:
    request, _ = decode_frame(GOLDEN_105_REQ) or pytest.fail("incomplete")
    response = request.make_response(
        ResponseCode.TOPIC_NOT_EXIST,
        "No topic route info in name server for the topic: GoldenTopic\n"
        "See http://rocketmq.apache.org/docs/faq/ for further details.",
    )
    assert encode_command(response) == GOLDEN_105_NOT_EXIST


def test_response_with_body_matches_golden_frame() -> None:
    request, _ = decode_frame(GOLDEN_106_REQ) or pytest.fail("incomplete")
    assert encode_command(request.make_response(body=GOLDEN_CLUSTER_BODY)) == GOLDEN_106_RESP


def test_incremental_decoding_of_pipelined_frames() -> None:
    stream = GOLDEN_106_REQ + GOLDEN_105_REQ
    for cut in range(len(GOLDEN_106_REQ)):
        assert decode_frame(stream[:cut]) is None
    first, n1 = decode_frame(stream) or pytest.fail("incomplete")
    second, n2 = decode_frame(stream, n1) or pytest.fail("incomplete")
    assert (first.code, second.code, n1 + n2) == (106, 105, len(stream))


def test_ali_ons_style_values_are_coerced_like_java() -> None:
    header = json.dumps(
        {
            "code": 15,
            "extFields": {"queueId": 3, "unitMode": False, "x": None, "f": 1.5, "t": True, "n": -(2**63)},
            "opaque": 1,
        }
    ).encode()
    raw = struct.pack(">ii", 4 + len(header), len(header)) + header
    cmd, _ = decode_frame(raw) or pytest.fail("incomplete")
    assert cmd.ext_fields == {
        "queueId": "3",
        "unitMode": "false",
        "f": "1.5",
        "t": "true",
        "n": str(-(2**63)),
    }
    assert coerce_ext_fields({"a": "b"}) == {"a": "b"}


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        # orjson reads integers beyond 64 bits as floats; json keeps them exact, and so must we
        ('{"code":15,"opaque":123456789012345678901234}', {"opaque": 123456789012345678901234}),
        (
            '{"code":15,"extFields":{"a":123456789012345678901234}}',
            {"ext": {"a": "123456789012345678901234"}},
        ),
        ('{"code":15,"language":123456789012345678901234}', {"language": LanguageCode.OTHER}),
        ('{"code":15,"language":"CPP"}', {"language": LanguageCode.CPP}),
        ('{"code":15,"language":"COBOL"}', {"language": LanguageCode.OTHER}),
        ('{"code":15,"language":1}', {"language": LanguageCode(1)}),
        ('{"code":15,"remark":{"n":123456789012345678901234}}', {"remark": '{"n":123456789012345678901234}'}),
        ('{"code":15,"remark":1.5,"extFields":{"f":1.5}}', {"remark": "1.5", "ext": {"f": "1.5"}}),
        ('{"code":15,"extFields":{"n":NaN}}', {"ext": {"n": "nan"}}),  # json's NaN; orjson refuses it
        ('{"code":15,"opaque":"7","unread":[1.5]}', {"opaque": 7}),
    ],
)
def test_json_headers_read_as_json_reads_them(header: str, expected: dict[str, object]) -> None:
    """The fast JSON reader (orjson) is only trusted where it agrees with json: values beyond its range
    fall back to json, so no number is truncated."""
    raw = struct.pack(">ii", 4 + len(header), len(header)) + header.encode()
    cmd, _ = decode_frame(raw) or pytest.fail("incomplete")
    actual = {
        "opaque": cmd.opaque,
        "ext": cmd.ext_fields,
        "language": cmd.language,
        "remark": cmd.remark,
    }
    assert {k: actual[k] for k in expected} == expected


def test_empty_json_header_is_request_code_zero() -> None:
    cmd, consumed = decode_frame(bytes.fromhex("00000006000000027b7d")) or pytest.fail("incomplete")
    assert (cmd.code, cmd.opaque, cmd.flag, consumed) == (0, 0, 0, 10)


def test_binary_header_round_trip_and_layout() -> None:
    cmd = RemotingCommand(
        code=105,
        language=LanguageCode.CPP,
        version=401,
        opaque=7,
        flag=0,
        remark="r",
        ext_fields={"topic": "T"},
        serialize_type=SerializeType.ROCKETMQ,
        body=b"xyz",
    )
    raw = encode_command(cmd)
    header_len = struct.unpack_from(">I", raw, 4)[0]
    assert header_len >> 24 == 1
    header = raw[8 : 8 + (header_len & 0xFFFFFF)]
    expected = (
        struct.pack(">hBhiii", 105, 1, 401, 7, 0, 1)
        + b"r"
        + struct.pack(">i", 2 + 5 + 4 + 1)
        + struct.pack(">h", 5)
        + b"topic"
        + struct.pack(">i", 1)
        + b"T"
    )
    assert header == expected
    assert decode_frame(raw) == (cmd, len(raw))


# Raw byte strings of tests/fixtures/golden-frames.json that the real server answers by closing the
# connection.
GOLDEN_GARBAGE = {
    "bad json": "000000230000001f7b22636f6465223a3130362c226f7061717565223a312c626164206a736f6e",
    "absurd length": "7ffffff0000000707b22636f6465223a",
    "16 MiB + 1": "01000001000000707b22636f6465223a",
    "negative length": "fffffffb000000707b22636f6465223a",
    "header longer than frame": "00000074000004587b22636f6465223a3130362c" + "00" * 112,
    "binary type with json header": GOLDEN_106_REQ[:4].hex() + "01" + GOLDEN_106_REQ[5:].hex(),
    "unknown serialize type": GOLDEN_106_REQ[:4].hex() + "05" + GOLDEN_106_REQ[5:].hex(),
    "http": "474554202f20485454502f312e310d0a486f73743a20780d0a0d0a",
}


@pytest.mark.parametrize("name", sorted(GOLDEN_GARBAGE))
def test_garbage_that_java_rejects_is_a_protocol_error(name: str) -> None:
    with pytest.raises(RemotingProtocolError):
        decode_frame(bytes.fromhex(GOLDEN_GARBAGE[name]))


# The first bytes of peers that are not RocketMQ, answering a request with a frame that is not whole yet:
# refused at once rather than waited for until the peer's or the request's timeout.
FOREIGN_PREFIXES = {
    "http/2 settings (a gRPC port)": "00001e0400000000000000030000",
    "empty json header": "0000100000000000",
    "binary header shorter than its fixed fields": "0000100001000005",
    "unknown serialize type": "0000100005000010",
    "header longer than frame": "0000001000000100",
}


@pytest.mark.parametrize("name", sorted(FOREIGN_PREFIXES))
def test_a_foreign_prefix_is_a_protocol_error_before_the_frame_is_whole(name: str) -> None:
    with pytest.raises(RemotingProtocolError):
        decode_frame(bytes.fromhex(FOREIGN_PREFIXES[name]))


def test_truncated_frame_waits_for_more() -> None:
    assert decode_frame(bytes.fromhex("000003e8000000707b22636f6465223a3130362c")) is None


def test_size_cap_is_the_whole_frame() -> None:
    at_limit = struct.pack(">i", MAX_FRAME_LENGTH - 4)
    assert decode_frame(at_limit) is None  # acceptable: waits for the body
    with pytest.raises(RemotingProtocolError):
        decode_frame(struct.pack(">i", MAX_FRAME_LENGTH - 3))
    with pytest.raises(RemotingProtocolError):
        encode_command(RemotingCommand(code=1, body=b"\0" * MAX_FRAME_LENGTH))


# ------------------------------------------------------------------------------------------ hypothesis

text = st.text(max_size=20)
commands = st.builds(
    RemotingCommand,
    code=st.integers(-32768, 32767),
    language=st.sampled_from(LanguageCode),
    version=st.integers(-32768, 32767),
    opaque=st.integers(-(2**31), 2**31 - 1),
    flag=st.integers(0, 3),
    remark=st.one_of(st.none(), text.filter(bool)),
    ext_fields=st.dictionaries(text.filter(bool), text.filter(bool), max_size=5),
    body=st.binary(max_size=64),
    serialize_type=st.sampled_from(SerializeType),
)


@given(commands)
def test_encode_decode_round_trip(cmd: RemotingCommand) -> None:
    raw = encode_command(cmd)
    assert decode_frame(raw) == (cmd, len(raw))


@given(st.binary(max_size=300), st.integers(0, 8))
def test_decoder_only_ever_raises_protocol_errors(data: bytes, offset: int) -> None:
    try:
        result = decode_frame(data, min(offset, len(data)))
    except RemotingProtocolError:
        return
    if result is not None:
        _, consumed = result
        assert 8 <= consumed <= len(data)


@given(commands, st.binary(min_size=1, max_size=40), st.integers(0, 200))
def test_corrupted_frames_never_crash_the_decoder(cmd: RemotingCommand, junk: bytes, at: int) -> None:
    raw = bytearray(encode_command(cmd))
    pos = min(at, len(raw) - 1)
    raw[pos : pos + len(junk)] = junk
    with contextlib.suppress(RemotingProtocolError):
        decode_frame(raw)


def test_deeply_nested_header_is_a_protocol_error() -> None:
    header = b"[" * 100_000
    with pytest.raises(RemotingProtocolError):
        decode_frame(struct.pack(">ii", 4 + len(header), len(header)) + header)


def test_unencodable_values_never_escape_as_other_errors() -> None:
    lone = RemotingCommand(code=0, remark="a\ud800b", ext_fields={"k": "\udfff"})
    decoded, _ = decode_frame(encode_command(lone)) or pytest.fail("incomplete")
    assert (decoded.remark, decoded.ext_fields) == ("a?b", {"k": "?"})
    with pytest.raises(RemotingProtocolError):
        encode_command(RemotingCommand(code=70000, serialize_type=SerializeType.ROCKETMQ))
