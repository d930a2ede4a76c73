"""The beans the store's config files and the remoting bodies share: one definition each.

Each model is a dataclass deriving from :class:`Bean`: field names are the snake_case of the Java bean
properties. ``to_json()`` yields the camelCase object fastjson sends on the wire (None omitted);
``to_file_json()`` the entry the broker's config files hold (every property, in alphabetical order, plus
the unknown properties it was read with); ``from_json()`` rebuilds a bean from what
:func:`store.fastjson.loads` returns, converting nested beans, lists, sets and numeric map keys (which
arrive as ``0`` or ``"0"`` depending on the writer) from the type hints. A model with an ``extra`` field
keeps the properties it does not know there, so a file written by a newer broker loses nothing.
"""

from __future__ import annotations

import dataclasses
import sys
import types
import typing
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Self

from store import fastjson

__all__ = [
    "TOPIC_SYS_FLAG_UNIT",
    "TOPIC_SYS_FLAG_UNIT_SUB",
    "Bean",
    "DataVersion",
    "PermName",
    "SubscriptionGroupConfig",
    "TopicConfig",
    "camel_case",
]


def camel_case(name: str) -> str:
    """``read_queue_nums`` -> ``readQueueNums`` (Java's property name of a snake_case field)."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _convert(hint: Any, value: Any) -> Any:
    """Shape a decoded JSON value according to a type hint (best effort, unknown shapes pass)."""
    if value is None:
        return None
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return _convert(inner[0], value) if len(inner) == 1 else value
    if isinstance(hint, type) and issubclass(hint, Bean):
        return hint.from_json(value)
    if origin in (list, set, frozenset) and isinstance(value, list):
        return origin(_convert(args[0], v) for v in value) if args else origin(value)
    if origin is dict and isinstance(value, dict) and args:
        key_type, value_type = args
        return {(int(k) if key_type is int else k): _convert(value_type, v) for k, v in value.items()}
    if hint is int and isinstance(value, str):
        return int(value)
    if hint is str and not isinstance(value, str):
        return str(value)
    return value


_EXTRA = "extra"  # the field that keeps a bean's unknown properties


class Bean:
    """Mixin for dataclass beans; see the module docstring."""

    __slots__ = ()

    @classmethod
    @cache
    def _json_fields(cls) -> tuple[tuple[str, str, Any], ...]:
        hints = typing.get_type_hints(cls)
        return tuple(
            (f.name, camel_case(f.name), hints[f.name])
            for f in dataclasses.fields(cls)  # type: ignore[arg-type]
            if f.name != _EXTRA
        )

    @classmethod
    @cache
    def _keeps_unknown(cls) -> bool:
        return any(f.name == _EXTRA for f in dataclasses.fields(cls))  # type: ignore[arg-type]

    def to_json(self) -> dict[str, Any]:
        out = {}
        for attr, key, _ in self._json_fields():
            value = getattr(self, attr)
            if value is not None:
                out[key] = value
        return out

    def to_file_json(self) -> dict[str, Any]:
        """The bean as the broker's config files hold it: every property in alphabetical order, nulls
        included, and the unknown properties it was read with."""
        out = {key: getattr(self, attr) for attr, key, _ in self._json_fields()}
        out.update(getattr(self, _EXTRA, {}))
        return dict(sorted(out.items()))

    @classmethod
    def from_json(cls, obj: Any) -> Self:
        if not isinstance(obj, dict):
            raise ValueError(f"{cls.__name__}: expected a JSON object, got {type(obj).__name__}")
        fields = cls._json_fields()
        kwargs = {attr: _convert(hint, obj[key]) for attr, key, hint in fields if key in obj}
        if cls._keeps_unknown():
            known = {key for _, key, _ in fields}
            kwargs[_EXTRA] = {k: v for k, v in obj.items() if k not in known}
        return cls(**kwargs)

    def dumps(self, *, bare_int_keys: bool = False) -> bytes:
        return fastjson.dumps(self, bare_int_keys=bare_int_keys)

    @classmethod
    def loads(cls, data: bytes) -> Self:
        return cls.from_json(fastjson.loads(data))


class PermName:
    """Permission bits of topics and brokers (docs/wire-protocol.md §permissions)."""

    PRIORITY = 8
    READ = 4
    WRITE = 2
    INHERIT = 1
    READ_WRITE = READ | WRITE

    @staticmethod
    def to_string(perm: int) -> str:
        """mqadmin's display form, e.g. `RW-`/`RWX`."""
        return "".join(c if perm & bit else "-" for c, bit in (("R", 4), ("W", 2), ("X", 1)))


# TopicConfig.topicSysFlag bits (Java's TopicSysFlag): a unit topic, and one with unit subscriptions.
TOPIC_SYS_FLAG_UNIT = 0x1
TOPIC_SYS_FLAG_UNIT_SUB = 0x2


@dataclass(slots=True)
class DataVersion(Bean):
    """Version of a broker's topic or group table: changes on every edit
    (docs/wire-protocol.md §topic-and-group-configs)."""

    counter: int = 0
    timestamp: int = 0
    #: Unknown properties (5.x's ``stateVersion``) are kept but, as in Java's ``equals``, not compared.
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def next_version(self, now_ms: int) -> None:
        self.counter += 1
        self.timestamp = now_ms


#: 5.x's SubscriptionGroupConfig property of a FIFO group (not Final: compiled modules import this one, and
#: mypyc would write a Final's value into them, see build_native's INLINED).
CONSUME_MESSAGE_ORDERLY = "consumeMessageOrderly"


def _with_extra(bean: Bean, extra: dict[str, Any]) -> dict[str, Any]:
    """``bean``'s JSON object with the properties it was read with that it has no field for."""
    out = Bean.to_json(bean)
    for key, value in extra.items():
        out.setdefault(key, value)
    return out


@dataclass(slots=True)
class TopicConfig(Bean):
    """One entry of ``topicConfigTable`` (docs/wire-protocol.md §topic-and-group-configs; class defaults as
    RocketMQ's ``TopicConfig``).

    The name is interned, as the store interns its queues' topics: a broker with thousands of topics
    then finds a send's topic in each per-topic table by identity, without reading the stored key.
    """

    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = PermName.READ_WRITE
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.topic_name, str):  # a hand-edited topics.json may hold null
            self.topic_name = sys.intern(self.topic_name)

    def to_json(self) -> dict[str, Any]:
        """The wire's object, with the 5.x properties the topic was given (``attributes``: its
        ``message.type``...), as a 5.x broker sends them: a slave, or a DLedger member that takes the
        table and is elected later, keeps a FIFO topic FIFO (4.9.8's readers ignore them)."""
        return _with_extra(self, self.extra)

    @property
    def attributes(self) -> dict[str, str]:
        """5.x's ``attributes`` (``message.type``, ``reserve.time``...): kept in ``extra`` as a 5.x table
        or UPDATE_AND_CREATE_TOPIC's ``attributes`` field gave them; 4.9.8 has none."""
        found = self.extra.get("attributes")
        return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}

    @property
    def message_type(self) -> str:
        """5.x's ``getTopicMessageType``: the ``message.type`` attribute, NORMAL without one."""
        return self.attributes.get("message.type", "NORMAL")

    def to_text(self) -> str:
        """The space-separated form used inside compressed registrations
        (docs/wire-protocol.md §registration-bodies)."""
        return f"{self.topic_name} {self.read_queue_nums} {self.write_queue_nums} {self.perm} {self.topic_filter_type}"

    @classmethod
    def from_text(cls, text: str) -> TopicConfig:
        parts = text.split(" ")
        if len(parts) != 5:
            raise ValueError(f"bad topic config text {text!r}")
        name, read, write, perm, filter_type = parts
        return cls(name, int(read), int(write), int(perm), filter_type)


@dataclass(slots=True)
class SubscriptionGroupConfig(Bean):
    """One entry of ``subscriptionGroupTable`` (docs/wire-protocol.md §topic-and-group-configs, with
    RocketMQ's defaults)."""

    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The wire's object, with the 5.x properties the group was given (``consumeMessageOrderly``,
        ``groupRetryPolicy``...), as a 5.x broker sends them: a slave, or a DLedger member that takes the
        table and is elected later, keeps a FIFO group FIFO (4.9.8's readers ignore them)."""
        return _with_extra(self, self.extra)

    @property
    def orderly(self) -> bool:
        """5.x's ``consumeMessageOrderly`` (``mqadmin updateSubGroup -o true``): its consumers receive FIFO;
        false without one, as in 4.9.8's configs."""
        return str(self.extra.get(CONSUME_MESSAGE_ORDERLY)).lower() == "true"
