"""JSON as Java's fastjson 1.2 reads and writes it (docs/wire-protocol.md §fastjson).

fastjson writes non-string map keys without quotes: Long/Integer keys as bare numbers
(`{"brokerAddrs":{0:"a"}}`) and object keys as whole JSON objects (`{{"brokerName":..}:{..}}`).
`loads` accepts both besides standard JSON; `dumps` writes standard JSON (what 4.9.4+ servers send
and every client parses) or, with `bare_int_keys=True`, the legacy form older clients received.

Python shapes: bare-number keys load as `int`, object keys as an `ObjectKey` (a hashable, sorted
tuple of items). For output, map keys and values may be anything JSON-able, `int` keys, `ObjectKey`s,
or objects with a `to_json()` method (a "bean", written with its keys sorted as fastjson does).

The broker's ``config/*.json`` files (docs/store-format.md §config-files) use fastjson's pretty format
instead, which `dumps_pretty` reproduces byte for byte: tabs, integer-keyed maps on one line, no trailing
newline.
"""

from __future__ import annotations

import json
import re
from json.decoder import scanstring  # type: ignore[attr-defined]
from typing import Any, Protocol

__all__ = ["JsonBean", "ObjectKey", "dumps", "dumps_pretty", "loads"]


class JsonBean(Protocol):
    """An object that serializes as the JSON object `to_json()` returns (like a Java bean)."""

    def to_json(self) -> dict[str, Any]: ...


class ObjectKey(tuple):  # type: ignore[type-arg]
    """A JSON object used as a map key, as (key, value) pairs sorted by key; hashable."""

    __slots__ = ()

    @classmethod
    def of(cls, mapping: dict[str, Any]) -> ObjectKey:
        return cls(sorted(mapping.items()))

    def as_dict(self) -> dict[str, Any]:
        return dict(self)


# ----------------------------------------------------------------------------------------------- loads

_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)?")
_LITERALS = {"true": True, "false": False, "null": None}
_MAX_DEPTH = 200  # well below the interpreter's recursion limit


class _Parser:
    """Recursive-descent parser for the superset; only used when `json.loads` refuses the text."""

    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0

    def fail(self, what: str) -> ValueError:
        return ValueError(f"fastjson: {what} at offset {self.i}")

    def ws(self) -> None:
        self.i = _WS.match(self.s, self.i).end()  # type: ignore[union-attr]

    def value(self, depth: int = 0) -> Any:
        if depth > _MAX_DEPTH:
            raise self.fail("nesting too deep")
        self.ws()
        if self.i >= len(self.s):
            raise self.fail("unexpected end")
        c = self.s[self.i]
        if c == "{":
            return self.obj(depth)
        if c == "[":
            return self.arr(depth)
        if c == '"':
            text, self.i = scanstring(self.s, self.i + 1)
            return text
        m = _NUMBER.match(self.s, self.i)
        if m:
            self.i = m.end()
            return float(m.group()) if m.group(1) or m.group(2) else int(m.group())
        for word, val in _LITERALS.items():
            if self.s.startswith(word, self.i):
                self.i += len(word)
                return val
        raise self.fail(f"unexpected {c!r}")

    def key(self, depth: int) -> Any:
        self.ws()
        c = self.s[self.i : self.i + 1]
        if c == '"':
            text, self.i = scanstring(self.s, self.i + 1)
            return text
        if c == "{":
            return ObjectKey.of(self.obj(depth))
        m = _NUMBER.match(self.s, self.i)
        if m and not (m.group(1) or m.group(2)):
            self.i = m.end()
            return int(m.group())
        raise self.fail("bad object key")

    def obj(self, depth: int) -> dict[Any, Any]:
        self.i += 1
        out: dict[Any, Any] = {}
        self.ws()
        if self.s.startswith("}", self.i):
            self.i += 1
            return out
        while True:
            k = self.key(depth + 1)
            self.ws()
            if not self.s.startswith(":", self.i):
                raise self.fail("expected ':'")
            self.i += 1
            out[k] = self.value(depth + 1)
            self.ws()
            c = self.s[self.i : self.i + 1]
            self.i += 1
            if c == "}":
                return out
            if c != ",":
                raise self.fail("expected ',' or '}'")

    def arr(self, depth: int) -> list[Any]:
        self.i += 1
        out: list[Any] = []
        self.ws()
        if self.s.startswith("]", self.i):
            self.i += 1
            return out
        while True:
            out.append(self.value(depth + 1))
            self.ws()
            c = self.s[self.i : self.i + 1]
            self.i += 1
            if c == "]":
                return out
            if c != ",":
                raise self.fail("expected ',' or ']'")


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """Parse JSON written by fastjson; raises ValueError for anything else."""
    text = data if isinstance(data, str) else bytes(data).decode()
    try:
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            pass
        parser = _Parser(text)
        result = parser.value()
        parser.ws()
        if parser.i != len(text):
            raise parser.fail("trailing data")
        return result
    except RecursionError:
        raise ValueError("fastjson: nesting too deep") from None


# ----------------------------------------------------------------------------------------------- dumps


def _bean_json(obj: Any) -> dict[str, Any] | None:
    """``obj.to_json()`` for a JsonBean, else None: a class attribute lookup, because ``isinstance``
    against a runtime-checkable Protocol costs microseconds per value (it dominated encoding 10,000 topics)."""
    to_json = getattr(type(obj), "to_json", None)
    return None if to_json is None else to_json(obj)  # type: ignore[no-any-return]


def _bean_default(obj: Any) -> Any:
    as_json = _bean_json(obj)
    if as_json is not None:
        return as_json
    if isinstance(obj, set | frozenset):
        return list(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


def _sort_key(k: Any) -> tuple[int, Any]:
    return (0, k) if isinstance(k, int) else (1, str(k))


#: The order `dumps` writes a map's keys in (ints first, then by their text): for a caller that writes
#: a map's entries itself, a slice at a time.
key_order = _sort_key


class _Writer:
    """Encoder for what `json.dumps` cannot express: bare int keys and object keys."""

    def __init__(self, bare_int_keys: bool, ensure_ascii: bool) -> None:
        self.bare_int_keys = bare_int_keys
        self.ensure_ascii = ensure_ascii
        self.parts: list[str] = []

    def string(self, s: str) -> None:
        self.parts.append(json.dumps(s, ensure_ascii=self.ensure_ascii))

    def key(self, k: Any) -> None:
        if isinstance(k, bool):
            self.string("true" if k else "false")
        elif isinstance(k, int):
            self.parts.append(str(k) if self.bare_int_keys else f'"{k}"')
        elif isinstance(k, ObjectKey):
            self.value(k.as_dict())
        elif (as_json := _bean_json(k)) is not None:
            self.value(as_json)
        else:
            self.string(str(k))

    def value(self, v: Any) -> None:
        as_json = _bean_json(v)
        if as_json is not None:
            v = as_json
        if isinstance(v, dict):
            self.parts.append("{")
            for n, k in enumerate(sorted(v, key=_sort_key)):
                if n:
                    self.parts.append(",")
                self.key(k)
                self.parts.append(":")
                self.value(v[k])
            self.parts.append("}")
        elif isinstance(v, list | tuple | set | frozenset):
            self.parts.append("[")
            for n, item in enumerate(v):
                if n:
                    self.parts.append(",")
                self.value(item)
            self.parts.append("]")
        elif isinstance(v, str):
            self.string(v)
        else:
            self.parts.append(json.dumps(v, default=_bean_default))


def dumps(obj: Any, *, bare_int_keys: bool = False, ensure_ascii: bool = False) -> bytes:
    """Serialize like fastjson: sorted keys, no nulls dropped for you (beans omit them themselves).

    Lone surrogates become '?' in the UTF-8 output, as Java's encoder writes them.
    `bare_int_keys=True` gives the legacy default-fastjson form; otherwise int keys are quoted as
    with `BrowserCompatible`. `ensure_ascii=True` escapes non-ASCII (`BrowserCompatible` does).
    """
    if not bare_int_keys:
        try:
            return json.dumps(
                obj, default=_bean_default, sort_keys=True, separators=(",", ":"), ensure_ascii=ensure_ascii
            ).encode("utf-8", "replace")
        except TypeError:
            pass  # object keys, or int and str keys mixed in one map: use the general writer
    writer = _Writer(bare_int_keys, ensure_ascii)
    writer.value(obj)
    return "".join(writer.parts).encode("utf-8", "replace")


def _int_keyed(obj: Any) -> bool:
    """Whether a map with int keys (written bare by fastjson) occurs anywhere in ``obj``."""
    if isinstance(obj, dict):
        return any(isinstance(k, int) for k in obj) or any(_int_keyed(v) for v in obj.values())
    if isinstance(obj, list | tuple):
        return any(_int_keyed(v) for v in obj)
    return False


def dumps_pretty(obj: Any, indent: int = 0) -> str:
    """Serialise like fastjson's pretty format (the shape the broker writes its config files in), keys in
    the order given.

    Without int-keyed maps that format is exactly ``json.dumps`` with tab indents, which writes a
    10,000-topic topics.json far faster than walking it here.
    """
    if not _int_keyed(obj):
        text = json.dumps(obj, indent="\t", separators=(",", ":"), ensure_ascii=False)
        return text.replace("\n", "\n" + "\t" * indent) if indent else text
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        pad = "\t" * indent
        if all(isinstance(k, int) and not isinstance(k, bool) for k in obj):
            if all(type(v) is int for v in obj.values()):  # consumerOffset.json's {queue: offset}: 10,000 of
                return "{" + ",".join(f"{k}:{v}" for k, v in obj.items()) + f"\n{pad}}}"  # them every 5 s
            return "{" + ",".join(f"{k}:{dumps_pretty(v, indent + 1)}" for k, v in obj.items()) + f"\n{pad}}}"
        inner = "\t" * (indent + 1)
        items = ",\n".join(
            f"{inner}{json.dumps(str(k), ensure_ascii=False)}:{dumps_pretty(v, indent + 1)}"
            for k, v in obj.items()
        )
        return "{\n" + items + f"\n{pad}}}"
    if isinstance(obj, list | tuple):
        if not obj:
            return "[]"
        pad = "\t" * indent
        inner = "\t" * (indent + 1)
        return "[\n" + ",\n".join(inner + dumps_pretty(v, indent + 1) for v in obj) + f"\n{pad}]"
    return json.dumps(obj, ensure_ascii=False)
