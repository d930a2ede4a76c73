"""fastjson compatibility layer, typed headers and shared bodies."""

from __future__ import annotations

import contextlib
import json
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, strategies as st

import daemon.remoting.bodies as bodies_module
from daemon.remoting.bodies import (
    BrokerData,
    DataVersion,
    RegisterBrokerBody,
    TableText,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicRouteData,
)
from daemon.remoting.codes import ResponseCode
from daemon.remoting.errors import HeaderFieldError
from daemon.remoting.headers import (
    CommandHeader,
    GetRouteInfoRequestHeader,
    RegisterBrokerRequestHeader,
    wire,
)
from store import fastjson


def test_loads_bare_integer_and_object_keys() -> None:
    data = fastjson.loads(
        b'{"brokerAddrs":{0:"a", 1:"b"},"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:{"o":1}}}'
    )
    assert data["brokerAddrs"] == {0: "a", 1: "b"}
    (key,) = data["offsetTable"]
    assert isinstance(key, fastjson.ObjectKey)
    assert key.as_dict() == {"brokerName": "b", "queueId": 0, "topic": "T"}


def test_dumps_both_route_forms() -> None:
    route = {"brokerAddrs": {1: "s", 0: "m"}}
    assert fastjson.dumps(route) == b'{"brokerAddrs":{"0":"m","1":"s"}}'
    assert fastjson.dumps(route, bare_int_keys=True) == b'{"brokerAddrs":{0:"m",1:"s"}}'


def test_object_keys_round_trip() -> None:
    key = fastjson.ObjectKey.of({"topic": "T", "queueId": 1, "brokerName": "b"})
    raw = fastjson.dumps({"offsetTable": {key: 5}})
    assert raw == b'{"offsetTable":{{"brokerName":"b","queueId":1,"topic":"T"}:5}}'
    assert fastjson.loads(raw) == {"offsetTable": {key: 5}}


@pytest.mark.parametrize("bad", [b"{", b'{"a":}', b"{0 1}", b'{"a":1} x', b"[1,]x", b"{{}:"])
def test_loads_rejects_garbage(bad: bytes) -> None:
    with pytest.raises(ValueError):
        fastjson.loads(bad)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20,
)


@pytest.mark.slow
@given(json_values)
def test_standard_output_is_standard_json(value: object) -> None:
    assert json.loads(fastjson.dumps(value)) == value


@given(st.dictionaries(st.integers(-(2**40), 2**40), st.text(max_size=5), max_size=5))
def test_bare_int_keys_load_back_as_ints(table: dict[int, str]) -> None:
    assert fastjson.loads(fastjson.dumps({"m": table}, bare_int_keys=True)) == {"m": table}


def test_header_parse_and_render_like_java() -> None:
    h = GetRouteInfoRequestHeader.from_ext_fields({"topic": "T", "acceptStandardJsonOnly": "TRUE", "x": "y"})
    assert (h.topic, h.accept_standard_json_only) == ("T", True)
    assert GetRouteInfoRequestHeader("T", False).to_ext_fields() == {
        "topic": "T",
        "acceptStandardJsonOnly": "false",
    }
    assert GetRouteInfoRequestHeader("T").to_ext_fields() == {"topic": "T"}


def test_missing_and_malformed_header_fields_name_the_field() -> None:
    with pytest.raises(HeaderFieldError) as info:
        GetRouteInfoRequestHeader.from_ext_fields({})
    assert info.value.code == ResponseCode.SYSTEM_ERROR
    assert info.value.remark == "header GetRouteInfoRequestHeader: field 'topic' is required but missing"
    fields = {"brokerName": "b", "brokerAddr": "a", "clusterName": "c", "haServerAddr": "h", "brokerId": "x"}
    with pytest.raises(HeaderFieldError, match="'brokerId' must be int, got 'x'"):
        RegisterBrokerRequestHeader.from_ext_fields(fields)


def test_wire_names_override_camel_case() -> None:
    @dataclass(slots=True)
    class Short(CommandHeader):
        producer_group: str = wire("a")
        queue_id: int = wire("e", 0)

    assert Short.from_ext_fields({"a": "G", "e": "3"}) == Short("G", 3)
    assert Short("G", 3).to_ext_fields() == {"a": "G", "e": "3"}


def test_beans_round_trip_with_either_key_form() -> None:
    route = TopicRouteData(broker_datas=[BrokerData("C", "b", {0: "127.0.0.1:10911"})])
    for raw in (route.dumps(), route.dumps(bare_int_keys=True)):
        assert TopicRouteData.loads(raw) == route


def test_register_body_compressed_form_round_trips() -> None:
    wrapper = TopicConfigSerializeWrapper(
        {"T": TopicConfig("T", 4, 4, 6), "U": TopicConfig("U", 8, 2, 7, "MULTI_TAG")},
        DataVersion(3, 1700000000000),
    )
    body = RegisterBrokerBody(wrapper, ["fs:1"])
    assert RegisterBrokerBody.decode(body.encode(compressed=True), compressed=True) == body
    assert RegisterBrokerBody.decode(body.encode()) == body
    with pytest.raises(ValueError):
        RegisterBrokerBody.decode(b"not zlib", compressed=True)


@pytest.mark.parametrize("topics", [0, 1, 3, 4, 7])
def test_register_body_encoded_in_parts_is_the_same_body(topics: int) -> None:
    names = ["T", 'A"\u00e9\\', "Z\n", "b\ud800", "M", "0", "zz"][:topics]
    wrapper = TopicConfigSerializeWrapper({n: TopicConfig(n, 4, 2) for n in names}, DataVersion(3, 17))
    body = RegisterBrokerBody(wrapper, ["fs:1"])
    assert b"".join(body.encode_parts(per_part=2)) == body.dumps()
    if "b\ud800" not in names:  # (the compressed form cannot carry a lone surrogate)
        assert body.encode(compressed=True) == zlib.compress(b"".join(body.encode_parts(True, per_part=2)), 9)
        assert RegisterBrokerBody.decode(body.encode(compressed=True), compressed=True) == body


def test_register_body_parts_from_kept_text_follow_every_change_of_the_table() -> None:
    """`TableText` keeps each entry's text between encodings: the body is the same as one encoded anew
    through additions, replacements, removals, and a run cut short before its end."""
    names = ['A"\u00e9\\', "Z\n", "b\ud800", "M", "0", "zz", "T"]
    table = {n: TopicConfig(n, 4, 2) for n in [*names[:5], *(f"N{i:02d}" for i in range(40))]}
    kept = TableText()  # (40 more: a change of a few is merged into the sorted names, not sorted again)

    def same() -> bool:
        body = RegisterBrokerBody(TopicConfigSerializeWrapper(dict(table), DataVersion(3, 17)), ["fs:1"])
        return b"".join(body.encode_parts(per_part=2, kept=kept)) == body.dumps()

    assert same() and same()
    table["zz"] = TopicConfig("zz", 1, 1)
    table["M"] = TopicConfig("M", 8, 8)
    del table["0"]
    assert same()
    table["T"] = TopicConfig("T", 1, 1)
    cut = kept.parts(dict(table), 2)
    next(cut)  # the first two entries' text only: "T" is among the names, its text not kept
    del cut
    del table["Z\n"]
    assert same()
    table.clear()
    assert same()


def test_register_body_parts_sort_the_topic_names_not_the_pairs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The broker encodes a 10,000-topic table on its loop: sorting the names alone takes a quarter of the
    time the (name, config) pairs took, in one piece of work the loop cannot serve between."""
    sorted_items: list[object] = []
    real = sorted

    def spy(items: Iterable[Any]) -> list[Any]:
        listed = list(items)
        sorted_items.extend(listed)
        return real(listed)

    monkeypatch.setattr(bodies_module, "sorted", spy, raising=False)
    wrapper = TopicConfigSerializeWrapper(
        {n: TopicConfig(n, 4, 2) for n in ("T", "A", "M")}, DataVersion(3, 17)
    )
    body = RegisterBrokerBody(wrapper, [])
    assert b"".join(body.encode_parts(per_part=2)) == body.dumps()
    assert sorted_items and all(isinstance(item, str) for item in sorted_items)


@given(st.text(alphabet='{}[]:,"0123456789-.eE tfnrulas\\', max_size=40))
def test_loads_raises_only_value_errors(text: str) -> None:
    with contextlib.suppress(ValueError):
        fastjson.loads(text)


@pytest.mark.parametrize("text", ["[" * 5000, "{0:" * 600, "{0:" * 150 + "1" + "}" * 150])
def test_deep_nesting_is_a_value_error_or_parses(text: str) -> None:
    try:
        fastjson.loads(text)
    except ValueError:
        return
    assert text.endswith("}")
