"""JSON bodies shared by the NameServer, the broker and mqctl (wire-protocol.md §4).

Each body is a dataclass deriving from `Bean`: field names are the snake_case of the Java bean
properties, `to_json()` yields the camelCase object fastjson would write (None omitted), and
`from_json()` rebuilds it from what `fastjson.loads` returns, converting nested beans, lists, sets and
numeric map keys (which arrive as `0` or `"0"` depending on the writer) from the type hints.
"""

from __future__ import annotations

import dataclasses
import struct
import types
import typing
import zlib
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Self

from daemon.config import camel_case
from daemon.remoting import fastjson


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


class Bean:
    """Mixin for dataclass bodies; see the module docstring."""

    __slots__ = ()

    @classmethod
    @cache
    def _json_fields(cls) -> tuple[tuple[str, str, Any], ...]:
        hints = typing.get_type_hints(cls)
        return tuple((f.name, camel_case(f.name), hints[f.name]) for f in dataclasses.fields(cls))  # type: ignore[arg-type]

    def to_json(self) -> dict[str, Any]:
        out = {}
        for attr, key, _ in self._json_fields():
            value = getattr(self, attr)
            if value is not None:
                out[key] = value
        return out

    @classmethod
    def from_json(cls, obj: Any) -> Self:
        if not isinstance(obj, dict):
            raise ValueError(f"{cls.__name__}: expected a JSON object, got {type(obj).__name__}")
        kwargs = {attr: _convert(hint, obj[key]) for attr, key, hint in cls._json_fields() if key in obj}
        return cls(**kwargs)

    def dumps(self, *, bare_int_keys: bool = False) -> bytes:
        return fastjson.dumps(self, bare_int_keys=bare_int_keys)

    @classmethod
    def loads(cls, data: bytes) -> Self:
        return cls.from_json(fastjson.loads(data))


# --------------------------------------------------------------------------------------------- constants


class PermName:
    """Permission bits of topics and brokers (§14.1)."""

    PRIORITY = 8
    READ = 4
    WRITE = 2
    INHERIT = 1
    READ_WRITE = READ | WRITE

    @staticmethod
    def to_string(perm: int) -> str:
        """mqadmin's display form, e.g. `RW-`/`RWX`."""
        return "".join(c if perm & bit else "-" for c, bit in (("R", 4), ("W", 2), ("X", 1)))


# --------------------------------------------------------------------------------------------- bodies


@dataclass(slots=True)
class DataVersion(Bean):
    """Version of a broker's topic table: changes on every edit (§4.2)."""

    counter: int = 0
    timestamp: int = 0


@dataclass(slots=True)
class TopicConfig(Bean):
    """§4.3."""

    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = PermName.READ_WRITE
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False

    def to_text(self) -> str:
        """The space-separated form used inside compressed registrations (§4.12)."""
        return f"{self.topic_name} {self.read_queue_nums} {self.write_queue_nums} {self.perm} {self.topic_filter_type}"

    @classmethod
    def from_text(cls, text: str) -> TopicConfig:
        parts = text.split(" ")
        if len(parts) != 5:
            raise ValueError(f"bad topic config text {text!r}")
        name, read, write, perm, filter_type = parts
        return cls(name, int(read), int(write), int(perm), filter_type)


@dataclass(slots=True)
class QueueData(Bean):
    """One broker group's queues of a topic (§4.4)."""

    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0


@dataclass(slots=True)
class BrokerData(Bean):
    """A broker group: brokerId → address, id 0 being the master (§4.5)."""

    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = field(default_factory=dict)

    def master_addr(self) -> str | None:
        return self.broker_addrs.get(0)


@dataclass(slots=True)
class TopicRouteData(Bean):
    """GET_ROUTEINFO_BY_TOPIC body (§4.6)."""

    queue_datas: list[QueueData] = field(default_factory=list)
    broker_datas: list[BrokerData] = field(default_factory=list)
    filter_server_table: dict[str, list[str]] = field(default_factory=dict)
    order_topic_conf: str | None = None


@dataclass(slots=True)
class ClusterInfo(Bean):
    """GET_BROKER_CLUSTER_INFO body (§4.7)."""

    broker_addr_table: dict[str, BrokerData] = field(default_factory=dict)
    cluster_addr_table: dict[str, set[str]] = field(default_factory=dict)


@dataclass(slots=True)
class TopicList(Bean):
    """§4.8."""

    topic_list: list[str] = field(default_factory=list)
    broker_addr: str | None = None


@dataclass(slots=True)
class KVTable(Bean):
    """§4.9."""

    table: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class TopicConfigSerializeWrapper(Bean):
    """A broker's whole topic table with its version (§4.11); also `topics.json`."""

    topic_config_table: dict[str, TopicConfig] = field(default_factory=dict)
    data_version: DataVersion = field(default_factory=DataVersion)


_INT = struct.Struct(">i")


@dataclass(slots=True)
class RegisterBrokerBody(Bean):
    """REGISTER_BROKER body (§4.12), in its JSON or its compressed form."""

    topic_config_serialize_wrapper: TopicConfigSerializeWrapper = field(
        default_factory=TopicConfigSerializeWrapper
    )
    filter_server_list: list[str] = field(default_factory=list)

    def encode(self, compressed: bool = False) -> bytes:
        if not compressed:
            return self.dumps()
        wrapper = self.topic_config_serialize_wrapper
        out = bytearray()
        version = wrapper.data_version.dumps()
        out += _INT.pack(len(version)) + version
        out += _INT.pack(len(wrapper.topic_config_table))
        for config in wrapper.topic_config_table.values():
            text = config.to_text().encode()
            out += _INT.pack(len(text)) + text
        servers = fastjson.dumps(self.filter_server_list)
        out += _INT.pack(len(servers)) + servers
        return zlib.compress(bytes(out), 9)

    @classmethod
    def decode(cls, body: bytes, compressed: bool = False) -> RegisterBrokerBody:
        """Parse either form; raises ValueError on malformed input."""
        if not body:
            return cls()
        if not compressed:
            return cls.loads(body)
        try:
            raw = zlib.decompress(body)
        except zlib.error as exc:
            raise ValueError(f"bad compressed registration body: {exc}") from None
        pos = 0

        def chunk() -> bytes:
            nonlocal pos
            if pos + 4 > len(raw):
                raise ValueError("truncated compressed registration body")
            (size,) = _INT.unpack_from(raw, pos)
            start, pos = pos + 4, pos + 4 + size
            if size < 0 or pos > len(raw):
                raise ValueError("truncated compressed registration body")
            return raw[start:pos]

        version = DataVersion.loads(chunk())
        if pos + 4 > len(raw):
            raise ValueError("truncated compressed registration body")
        (count,) = _INT.unpack_from(raw, pos)
        pos += 4
        table = {}
        for _ in range(count):
            config = TopicConfig.from_text(chunk().decode())
            table[config.topic_name] = config
        servers = fastjson.loads(chunk())
        return cls(TopicConfigSerializeWrapper(table, version), list(servers or []))
