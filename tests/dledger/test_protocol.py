"""DLedger's wire beans: vectors written from the Java classes (fastjson writes every getter's property,
sorted, nulls left out, enums by name, ``byte[]`` as base64) and round trips of arbitrary beans."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import orjson
import pytest
from hypothesis import given, strategies as st

from daemon.dledger.protocol import (
    BEANS,
    BINARY_PUSH_CODE,
    REMOTING_RESPONSE_CODE,
    BinaryPushFrames,
    DLedgerEntry,
    DLedgerRequestCode,
    DLedgerResponseCode,
    HeartBeatRequest,
    LeadershipTransferRequest,
    MetadataResponse,
    PushEntryRequest,
    PushEntryResponse,
    PushType,
    VoteRequest,
    VoteResponse,
    VoteResult,
    WireBean,
    bean_from_json,
    binary_push_fields,
    decode_push_answer,
    encode_push_answer,
    entry_json,
    is_push_answer,
    push_answer_frame,
    read_binary_push,
)
from daemon.remoting.codes import FLAG_RESPONSE
from daemon.remoting.command import RemotingCommand
from daemon.remoting.frame import decode_frame, encode_command
from store import fastjson


def test_request_codes_and_response_codes_are_dledgers() -> None:
    assert {c.name: int(c) for c in DLedgerRequestCode} == {
        "METADATA": 50000,
        "APPEND": 50001,
        "GET": 50002,
        "VOTE": 51001,
        "HEART_BEAT": 51002,
        "PULL": 51003,
        "PUSH": 51004,
        "LEADERSHIP_TRANSFER": 51005,
    }
    assert DLedgerResponseCode.WAIT_QUORUM_ACK_TIMEOUT == 502
    assert DLedgerResponseCode.LEADER_TRANSFERRING == 506
    assert REMOTING_RESPONSE_CODE == 200  # handleResponse: createResponseCommand(SUCCESS.getCode())
    assert set(BEANS) == set(DLedgerRequestCode)


def test_vote_request_vector() -> None:
    req = VoteRequest(
        group="broker-a",
        remote_id="n1",
        local_id="n0",
        leader_id="n0",
        term=3,
        ledger_end_index=9,
        ledger_end_term=2,
    )
    assert req.encode() == (
        b'{"code":200,"group":"broker-a","leaderId":"n0","ledgerEndIndex":9,"ledgerEndTerm":2,'
        b'"localId":"n0","remoteId":"n1","term":3}'
    )
    assert VoteRequest.decode(req.encode()) == req


def test_vote_response_vector_with_enum_by_name() -> None:
    resp = VoteResponse(term=4, vote_result=VoteResult.REJECT_ALREADY_VOTED)
    assert resp.encode() == b'{"code":200,"term":4,"voteResult":"REJECT_ALREADY_VOTED"}'


def test_heartbeat_defaults_leave_out_nulls() -> None:
    assert HeartBeatRequest().encode() == b'{"code":200,"term":-1}'


def test_push_vector_has_the_getter_properties_and_a_base64_body() -> None:
    entry = DLedgerEntry(
        body=b"\x00\x01abc", index=6, term=3, pos=1024, size=53, magic=1, body_crc=7, chain_crc=-5
    )
    req = PushEntryRequest(
        group="g", remote_id="n2", local_id="n0", leader_id="n0", term=3, commit_index=5, entry=entry
    )
    assert req.encode() == (
        b'{"batch":false,"batchEntry":[],"code":200,"commitIndex":5,"count":1,'
        b'"entry":{"body":"AAFhYmM=","bodyCrc":7,"chainCrc":-5,"channel":0,"index":6,"magic":1,"pos":1024,'
        b'"size":53,"term":3},"firstEntryIndex":6,"group":"g","lastEntryIndex":6,"leaderId":"n0",'
        b'"localId":"n0","remoteId":"n2","term":3,"totalSize":0,"type":"APPEND"}'
    )
    back = PushEntryRequest.decode(req.encode())
    assert back == req and back.type is PushType.APPEND and back.entry is not None
    assert back.entry.body == b"\x00\x01abc"


def test_push_response_leaves_out_a_null_index() -> None:
    resp = PushEntryResponse(code=406, term=3, begin_index=0, end_index=-1)
    assert resp.encode() == b'{"beginIndex":0,"code":406,"count":0,"endIndex":-1,"term":3}'


def test_leadership_transfer_vector() -> None:
    req = LeadershipTransferRequest(
        group="g", remote_id="n0", leader_id="n0", term=2, transfer_id="n0", transferee_id="n1"
    )
    assert req.encode() == (
        b'{"code":200,"group":"g","leaderId":"n0","remoteId":"n0","takeLeadershipLedgerIndex":0,'
        b'"term":2,"transferId":"n0","transfereeId":"n1"}'
    )


def test_unknown_and_computed_properties_are_ignored_when_reading() -> None:
    body = b'{"batch":true,"count":9,"firstEntryIndex":3,"term":2,"type":"COMMIT","commitIndex":4,"x":1}'
    req = PushEntryRequest.decode(body)
    assert (req.term, req.type, req.commit_index, req.entry) == (2, PushType.COMMIT, 4, None)


ids = st.one_of(st.none(), st.text(max_size=5))
longs = st.integers(-(2**63), 2**63 - 1)
entries = st.builds(
    DLedgerEntry,
    body=st.one_of(st.none(), st.binary(max_size=64)),
    body_crc=st.integers(-(2**31), 2**31 - 1),
    index=longs,
    term=longs,
    pos=longs,
    size=st.integers(0, 2**31 - 1),
    magic=st.integers(-(2**31), 2**31 - 1),
)


def beans(cls: type[WireBean], **fields: Any) -> st.SearchStrategy[Any]:
    """Beans of `cls` with arbitrary group and member ids (any of them null)."""
    return st.builds(cls, group=ids, leader_id=ids, local_id=ids, remote_id=ids, **fields)


pushes = beans(
    PushEntryRequest,
    term=longs,
    code=st.sampled_from([int(c) for c in DLedgerResponseCode]),
    commit_index=longs,
    entry=st.one_of(st.none(), entries),
    type=st.sampled_from(PushType),
)


@given(pushes)
def test_push_round_trip(req: PushEntryRequest) -> None:
    assert PushEntryRequest.decode(req.encode()) == req


@given(pushes, st.lists(entries, max_size=4), st.integers(0, 2**31 - 1))
def test_a_push_with_its_entries_json_made_apart_is_the_bean_as_fastjson_writes_it(
    req: PushEntryRequest, batch: list[DLedgerEntry], total_size: int
) -> None:
    """A leader writes each entry's JSON once for all followers and splices it into each push: byte for byte
    what the generic bean walk writes (the group and ids may hold the stand-ins' text)."""
    req.batch_entry, req.total_size = batch, total_size
    walked = fastjson.dumps(WireBean.to_json(req))
    assert req.encode() == walked
    made = [entry_json(e) for e in req.batch_entry]
    assert req.encode_with(made, entry_json(req.entry) if req.entry is not None else None) == walked


@given(
    st.one_of(
        st.builds(
            VoteRequest, group=st.text(), local_id=ids, remote_id=ids, term=longs, ledger_end_index=longs
        ),
        st.builds(
            PushEntryResponse, group=st.text(), code=longs, term=longs, index=st.one_of(st.none(), longs)
        ),
        st.builds(MetadataResponse, group=ids, peers=st.dictionaries(st.text(), st.text(), max_size=3)),
    )
)
def test_every_bean_is_written_as_fastjson_writes_it(bean: WireBean) -> None:
    """orjson writes what it can (its bytes are fastjson's for these beans), fastjson's own writer the rest
    (lone surrogates become '?', as Java's encoder writes them; ints past 64 bits)."""
    assert bean.encode() == fastjson.dumps(WireBean.to_json(bean))


def test_what_orjson_refuses_is_written_by_fastjsons_writer() -> None:
    for bean in (VoteRequest(group="\ud800"), PushEntryResponse(term=2**70)):
        assert bean.encode() == fastjson.dumps(WireBean.to_json(bean))
    assert (
        VoteRequest(group="\ud800").encode()
        == b'{"code":200,"group":"?","ledgerEndIndex":-1,"ledgerEndTerm":-1,"term":-1}'
    )


def test_stand_ins_in_a_pushs_strings_are_left_alone() -> None:
    entry = DLedgerEntry(body=b"x", index=1, term=1, size=49, magic=1)
    req = PushEntryRequest(group='"entry":0', leader_id='"batchEntry":0', entry=entry, batch_entry=[entry])
    assert req.encode() == fastjson.dumps(WireBean.to_json(req))


@given(st.builds(VoteResponse, term=longs, group=ids, vote_result=st.sampled_from(VoteResult)))
def test_vote_response_round_trip(resp: VoteResponse) -> None:
    assert VoteResponse.decode(resp.encode()) == resp


@given(entries)
def test_an_entry_is_written_and_read_as_every_bean_is(entry: DLedgerEntry) -> None:
    """DLedgerEntry's own fast JSON walk writes and reads exactly what the generic bean walk does."""
    as_bean = WireBean.to_json(entry)
    assert list(entry.to_json().items()) == list(as_bean.items())
    assert DLedgerEntry.from_json(as_bean) == bean_from_json(DLedgerEntry, as_bean)


push_answers = beans(
    PushEntryResponse,
    code=longs,
    term=longs,
    begin_index=longs,
    count=longs,
    end_index=longs,
    index=st.one_of(st.none(), longs),
)


@given(push_answers)
def test_a_push_answer_is_written_and_read_as_every_bean_is(resp: PushEntryResponse) -> None:
    """PushEntryResponse's own writer and reader (every push is answered with one) against the generic
    bean walk and fastjson's writer, with every optional property present or null."""
    assert resp.encode() == fastjson.dumps(WireBean.to_json(resp))
    as_json = orjson.loads(resp.encode())
    assert PushEntryResponse.from_json(as_json) == bean_from_json(PushEntryResponse, as_json) == resp


java_ints = st.integers(-(2**31), 2**31 - 1)


@given(
    beans(
        PushEntryResponse,
        code=java_ints,
        term=longs,
        begin_index=longs,
        count=java_ints,
        end_index=longs,
        index=st.one_of(st.none(), st.integers(0, 2**63 - 1)),
    )
)
def test_a_binary_push_answer_reads_back_as_its_json_does(resp: PushEntryResponse) -> None:
    """The answer a binary push asks for carries every field a leader reads from DLedger's JSON one: read
    either way, the same bean; and it is never taken for JSON, nor JSON for it."""
    # (a follower's answer names no member; the leader reads its own group into it)
    resp.group, resp.leader_id, resp.local_id, resp.remote_id = "broker-a", None, None, None
    binary, as_json = encode_push_answer(resp), resp.encode()
    assert is_push_answer(binary) and not is_push_answer(as_json)
    assert decode_push_answer(binary, "broker-a") == PushEntryResponse.decode(as_json) == resp
    for cut in (binary[:-1], binary + b"\0", b""):
        with pytest.raises(ValueError):
            decode_push_answer(cut, "broker-a")


@given(
    st.integers(0, 2**31 - 1),
    st.sampled_from([int(c) for c in DLedgerResponseCode]),
    longs,
    st.integers(-1, 2**63 - 1),
    java_ints,
    longs,
    longs,
)
def test_a_binary_push_answer_frame_is_the_response_encode_command_writes(
    opaque: int, code: int, term: int, index: int, count: int, begin: int, end: int
) -> None:
    """The follower's answer frame, its numbers packed into a fixed layout, is byte for byte the response
    frame of the generic path (the request's opaque, the response flag, DLedger's 200, the binary body),
    and reads back as that response."""
    push = RemotingCommand.request(51904, {"term": "1"}, b"entries")
    push.opaque = opaque
    body = encode_push_answer(
        PushEntryResponse(
            code=code,
            term=term,
            index=index if index >= 0 else None,
            count=count,
            begin_index=begin,
            end_index=end,
        )
    )
    reply = push.make_response(REMOTING_RESPONSE_CODE, None, None, body)
    reply.flag |= FLAG_RESPONSE
    frame = push_answer_frame(opaque, code, term, index, count, begin, end)
    assert frame == encode_command(reply)
    read = decode_frame(frame)
    assert read is not None and read[1] == len(frame)
    assert (read[0].opaque, read[0].code, read[0].is_response, read[0].body) == (opaque, 200, True, body)


@given(pushes, st.lists(entries, max_size=3))
def test_a_push_is_read_as_every_bean_is(req: PushEntryRequest, batch: list[DLedgerEntry]) -> None:
    """PushEntryRequest's own reader (a follower reads every push through it) against the generic walk,
    and without the properties a sender may leave out."""
    req.batch_entry = batch
    as_json = orjson.loads(req.encode())
    assert PushEntryRequest.from_json(as_json) == bean_from_json(PushEntryRequest, as_json) == req
    for key in ("batchEntry", "entry", "type", "code", "term", "commitIndex", "group"):
        as_json.pop(key, None)
        assert PushEntryRequest.from_json(as_json) == bean_from_json(PushEntryRequest, as_json)


def test_a_pushed_body_must_be_strict_base64() -> None:
    """A body that is not base64 as Java writes it (a stray space, a bad padding, a non-ASCII letter) makes
    the push unreadable: answered UNEXPECTED_ARGUMENT, never appended as some other bytes."""
    entry = DLedgerEntry(body=b"foo!", index=1, term=1, size=52, magic=1)
    good = PushEntryRequest(group="g", entry=entry).encode()
    assert PushEntryRequest.decode(good).entry == entry
    for bad in (b"Zm9v IQ==", b"Zm9vIQ=", b"Zm9vI\xc3\xa9==", b"Zm9vIQ==Zg=="):
        body = good.replace(b"Zm9vIQ==", bad)
        with pytest.raises(ValueError, match="bad PushEntryRequest body"):
            PushEntryRequest.decode(body)


def _sample(name: str, i: int) -> Any:
    """A value for the field `name` of a hot bean other than its default (an int unless named here)."""
    return {
        "group": f"s{i}",
        "leader_id": f"s{i}",
        "local_id": f"s{i}",
        "remote_id": f"s{i}",
        "body": b"b%d" % i,
        "batch_entry": [DLedgerEntry(index=i)],
        "entry": DLedgerEntry(index=i),
        "type": PushType.COMPARE,
        "code": 418,
    }.get(name, 7 + i)


@pytest.mark.parametrize("cls", [PushEntryRequest, PushEntryResponse])
def test_a_written_out_init_takes_every_field_with_its_default(cls: type) -> None:
    """The PUSH beans' __init__ is written out (compiled, dataclass's own stays interpreted), keyword-only
    over fields partly inherited (which tests/test_native.py's check of ``init=False`` classes does not
    read): it must take every field by name and set it, and leave each one not given at its default."""
    fields = dataclasses.fields(cls)
    given_all = {f.name: _sample(f.name, i) for i, f in enumerate(fields)}
    made = cls(**given_all)
    assert {f.name: getattr(made, f.name) for f in fields} == given_all
    required = {
        f.name: given_all[f.name]
        for f in fields
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    made = cls(**required)
    for f in fields:
        if f.default is not dataclasses.MISSING:
            assert getattr(made, f.name) == f.default, f.name
        elif f.default_factory is not dataclasses.MISSING:
            assert getattr(made, f.name) == f.default_factory(), f.name
    if not hasattr(cls, "__mypyc_attrs__"):  # (compiled, a keyword-only __init__ shows no signature)
        assert [p for p in inspect.signature(cls).parameters] == [f.name for f in fields]


@given(
    st.text(max_size=12),
    st.text(max_size=8),
    st.text(max_size=8),
    longs,
    longs,
    st.integers(-1, 2**63 - 1),
    java_ints,
    st.integers(0, 2**31 - 1),
    st.binary(max_size=64),
)
def test_a_binary_push_frame_from_its_template_is_the_request_encode_command_writes(
    group: str,
    leader: str,
    follower: str,
    term: int,
    commit: int,
    first: int,
    count: int,
    opaque: int,
    raw: bytes,
) -> None:
    """The leader's binary push, its header encoded once per follower and term with the numbers written in
    per push, is byte for byte the frame of the generic path (``binary_push_fields`` as a request's
    extFields, written by ``Connection.request``), whatever the names hold (quotes, commas, keys' text,
    characters JSON escapes), and reads back as that request."""
    req = PushEntryRequest(group=group, leader_id=leader, local_id=leader, remote_id=follower, term=term)
    req.commit_index = commit
    push = RemotingCommand.request(BINARY_PUSH_CODE, binary_push_fields(req, first, count), raw)
    push.opaque = opaque
    frame = BinaryPushFrames(req).frame(opaque, commit, first, count, raw)
    assert frame == encode_command(push)
    read = decode_frame(frame)
    assert read is not None and read[1] == len(frame)
    assert read_binary_push(read[0].ext_fields) == (
        group or None,
        leader or None,
        leader or None,
        follower or None,
        term,
        commit,
        first,
        count,
    )


def test_a_binary_push_frame_keeps_the_keys_of_names_that_look_like_them() -> None:
    """A group named like the numbers' keys does not move where the numbers are written."""
    name = ',"commitIndex":"0","index":"0","count":"0","opaque":0,'
    req = PushEntryRequest(group=name, leader_id=name, local_id=name, remote_id=name, term=3)
    req.commit_index = 5
    push = RemotingCommand.request(BINARY_PUSH_CODE, binary_push_fields(req, 7, 2), b"xy")
    push.opaque = 11
    assert BinaryPushFrames(req).frame(11, 5, 7, 2, b"xy") == encode_command(push)
