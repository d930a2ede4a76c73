"""The compiled build's HMAC-SHA1 (daemon/acl/_hmacsha1.c) against Python's hmac, on anything a request
can carry: keys of any length, values of any text (lone surrogates, more than its gathering buffer),
bodies of any bytes-like type, and hostile arguments (states not from keyed(), values not str, a given
signature of the wrong length, not ASCII, or a str subclass). Skipped without the build."""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Callable

import pytest
from hypothesis import given, strategies as st

from tests.support.fuzz import FUZZ, exact, leaked, outcome

h = pytest.importorskip("daemon.acl._hmacsha1")


class Text(str):
    """A str subclass: not a compact object, so its characters are not where a plain str keeps them."""


def reference(key: bytes, values: str | tuple[str, ...], body: bytes | memoryview) -> str:
    text = values if isinstance(values, str) else "".join(values)
    return base64.b64encode(hmac.new(key, text.encode("utf-8") + bytes(body), hashlib.sha1).digest()).decode()


def same_as_hmac(key: bytes, values: tuple[str, ...], body: bytes) -> None:
    """signature() is hmac's for these values (a bare str for one, as an itemgetter of one key answers), or
    raises as encoding them raises; verify() finds that signature right and any other one wrong."""
    states = h.keyed(key)
    picked: str | tuple[str, ...] = values[0] if len(values) == 1 else values
    want = outcome(reference, key, values, body)
    for kind in (bytes, bytearray, exact):
        got = outcome(h.signature, states, picked, kind(body))
        # (an error's text names the character's place in the value C encodes, hmac's in them all joined)
        assert got[:2] == want[:2] if want[0] == "raised" else got == outcome(reference, key, picked, body)
    fields = {f"k{i:02}": v for i, v in enumerate(values)} | {"Signature": "x"}
    keys, excluded = tuple(sorted(k for k in fields if k != "Signature")), ("AccessKey", "Signature")
    verify = outcome(
        h.verify, states, fields, keys, excluded, exact(body), want[1] if want[0] == "value" else ""
    )
    if want[0] == "raised":
        assert verify[:2] == want[:2]
        return
    signed = str(want[1])
    assert h.verify(states, fields, keys, excluded, body, signed) is True
    assert h.verify(states, fields, keys, excluded, body, Text(signed)) is True
    for wrong in (signed[:-1], signed + "=", signed[:-2] + "A=", "\u00e9" + signed[1:], "", "\ud800" * 28):
        assert h.verify(states, fields, keys, excluded, body, wrong) is (wrong == signed)
    assert h.verify(states, fields, (*keys[1:], "other"), excluded, body, signed) is None  # not its names
    assert h.verify(states, {**fields, "X": "y"}, keys, excluded, body, signed) is None  # a field unsigned


_CHARS = st.characters(exclude_categories=())  # lone surrogates too
#: Short values, and long ones (repeated: past the C side's 1024-byte gathering buffer without the cost of
#: drawing thousands of characters).
ANY_TEXT = st.text(_CHARS, max_size=40) | st.builds(
    lambda part, times: part * times, st.text(_CHARS, min_size=1, max_size=8), st.integers(100, 600)
)


@FUZZ
@given(st.binary(max_size=150), st.lists(ANY_TEXT, max_size=5).map(tuple), st.binary(max_size=2000))
def test_the_c_hmac_is_pythons_for_any_key_values_and_body(
    key: bytes, values: tuple[str, ...], body: bytes
) -> None:
    same_as_hmac(key, values, body)


def test_hostile_arguments_raise_and_never_read_past_what_they_hold() -> None:
    states = h.keyed(b"k")
    size = len(states)
    for bad_states, error in [
        (b"", TypeError),
        (states[:-1], TypeError),
        (states + b"\0", TypeError),
        (bytearray(states), TypeError),
        (b"\xff" * size, ValueError),  # a block count past the block: SHA1_Update would write past it
        (states[: size // 2] + b"\xff" * (size // 2), ValueError),
    ]:
        with pytest.raises(error):
            h.signature(bad_states, ("a",), b"")
        with pytest.raises(error):
            h.verify(bad_states, {"a": "1"}, ("a",), (), b"", "x" * 28)
    for values in [1, None, ("a", 1), ("a", b"b"), ["a"]]:
        with pytest.raises(TypeError):
            h.signature(states, values, b"")
    assert h.signature(states, (Text("a"), "b"), b"") == reference(b"k", "ab", b"")
    for body in ["text", None, 5, memoryview(b"abcdef")[::2]]:
        with pytest.raises((TypeError, BufferError)):
            h.signature(states, "a", body)
    with pytest.raises(TypeError):  # a value not str in the fields
        h.verify(states, {"a": b"1"}, ("a",), (), b"", "x" * 28)
    for args in [
        ({"a": "1"}, ["a"], (), b"", "s"),
        ({"a": "1"}, ("a",), (), b"", b"s"),
        ([], (), (), b"", "s"),
    ]:
        with pytest.raises(TypeError):
            h.verify(states, *args)
    with pytest.raises(TypeError):
        h.signature(states, "a")
    with pytest.raises(TypeError):
        h.keyed("str key")
    assert h.keyed(memoryview(b"k" * 200)) == h.keyed(hashlib.sha1(b"k" * 200).digest())


def test_keys_of_every_length_and_values_around_the_gathering_buffer() -> None:
    """Keys either side of SHA-1's block (hashed first past it), each in a buffer of its exact size, and
    values whose UTF-8 fills the C side's 1024-byte gathering buffer to a byte or two either side."""
    for n in range(0, 140):
        key = bytes(range(256))[:n]
        assert h.signature(h.keyed(exact(key)), "v", b"b") == reference(key, "v", b"b"), n
    states = h.keyed(b"k")
    for total in range(1016, 1034):
        for first in {0, 1, 7, total // 2, total - 1, total}:
            for values in [
                ("a" * first, "b" * (total - first)),
                ("\u00e9" * (first // 2), "c" * (total - first)),
            ]:
                assert h.signature(states, values, exact(b"body")) == reference(b"k", values, b"body")
                assert h.signature(states, (*values, "x" * 30), b"") == reference(
                    b"k", (*values, "x" * 30), b""
                )


def test_no_path_keeps_a_reference_or_a_buffer() -> None:
    """Each way out of the three calls, the errors included, thousands of times: nothing stays allocated
    (each call's buffers new objects, so that one kept by an unreleased view shows)."""
    states = h.keyed(b"k")
    calls: list[Callable[[], object]] = [
        lambda: h.keyed(bytearray(100)),
        lambda: h.keyed("str"),
        lambda: h.signature(states, ("a", "b" * 2000), bytearray(b"body")),
        lambda: h.signature(states, ("a", "\ud800"), b""),
        lambda: h.signature(states, ("a", 1), b""),
        lambda: h.signature(b"x", "a", b""),
        lambda: h.signature(states, "a", "body"),
        lambda: h.verify(states, {"a": "1", "b": "2"}, ("a", "b"), (), bytearray(4), "x" * 28),
        lambda: h.verify(states, {"a": "1", "b": "2"}, ("a", "c"), (), b"", "x" * 28),
        lambda: h.verify(states, {"a": "1", "b": 2}, ("a", "b"), (), b"", "x" * 28),
        lambda: h.verify(states, {"a": "\ud800"}, ("a",), (), b"", "x" * 28),
        lambda: h.verify(states, {"a": "1"}, ("a",), ([],), b"", "x"),
        lambda: h.verify(states, {"a": "1"}, ("a",), (), "body", "x"),
    ]
    assert leaked(calls) < 2000
