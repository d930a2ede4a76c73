"""The per-request loops of typed headers (:class:`daemon.remoting.headers.CommandHeader`), apart from
the dataclass introspection that plans them so that they can be compiled (store/native.py): every request
parses its extFields and every response renders its own, ~15 fields each.

Values are read as Java's header decoding reads them: strings as they are, numbers with ``int`` after
trimming (``Long.parseLong`` of the trimmed text), booleans true only for ``true`` in any case
(``Boolean.parseBoolean``); rendered as Java's ``String.valueOf`` writes them.
"""

from __future__ import annotations

from typing import Final, TypeVar

_H = TypeVar("_H")

#: Field kinds of a plan.
STR: Final = 0
INT: Final = 1
BOOL: Final = 2
FLOAT: Final = 3

#: The default of a field that has none.
REQUIRED: Final = object()

#: Per field, in constructor order: wire name, kind, default (:data:`REQUIRED` when it has none).
Plan = tuple[tuple[str, int, object], ...]


def parse(plan: Plan, ext: dict[str, str]) -> list[object] | None:
    """The constructor arguments for ``plan`` from ``ext``; None when a field is missing or malformed,
    for the caller to name it (the rare path stays out of the loop)."""
    args: list[object] = []
    for wire_name, kind, default in plan:
        raw = ext.get(wire_name)
        if raw is None:
            if default is REQUIRED:
                return None
            args.append(default)
        elif kind == STR:
            args.append(raw)
        elif kind == INT:
            try:
                args.append(int(raw))  # (int() skips surrounding whitespace itself)
            except ValueError:
                return None
        elif kind == BOOL:
            args.append(raw.lower() == "true")
        else:
            try:
                args.append(float(raw))
            except ValueError:
                return None
    return args


def build(cls: type[_H], attrs: tuple[str, ...], args: list[object]) -> _H:
    """An instance of the slotted header dataclass ``cls`` with its fields ``attrs`` (every field, in
    order) set to ``args``, as ``cls(*args)`` would set them but without calling its ``__init__``: a
    dataclass's generated ``__init__`` runs interpreted, a frame on the path of every send and pull."""
    obj: _H = object.__new__(cls)
    for i in range(len(attrs)):
        setattr(obj, attrs[i], args[i])
    return obj


def parse_header(cls: type[_H], plan: Plan, attrs: tuple[str, ...], ext: dict[str, str]) -> _H | None:
    """:func:`parse` then :func:`build`: the header of a request's extFields, or None when a field is
    missing or malformed (``cls._field_error(ext)`` names it)."""
    args = parse(plan, ext)
    return None if args is None else build(cls, attrs, args)


def render_value(value: object) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    return str(value)


def render(names: tuple[tuple[str, str], ...], header: object) -> dict[str, str]:
    """The non-None fields (attribute, wire name) of ``header`` as Java-style strings."""
    out: dict[str, str] = {}
    for attr, wire_name in names:
        value = getattr(header, attr)
        if value is not None:
            out[wire_name] = value if type(value) is str else render_value(value)
    return out
