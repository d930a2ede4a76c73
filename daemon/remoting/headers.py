"""Typed request/response headers: the `extFields` of a command as dataclasses.

Java decodes extFields into `CommandCustomHeader` classes and supports only str, int, long, bool and
double fields. `CommandHeader` does the same in both directions: `from_ext_fields` parses the strings
(a missing required field or a bad number raises `HeaderFieldError`, which servers answer as
SYSTEM_ERROR with a clear remark instead of Java's NullPointerException text) and `to_ext_fields`
renders values as Java would (`true`/`false`, decimal numbers). Wire names are the camelCase of the
field names unless a field says otherwise with `wire("name")`.

A field is required when it has no default. Subclasses are plain `@dataclass(slots=True)` classes.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any, ClassVar, Self

from daemon.remoting import fields
from daemon.remoting.errors import HeaderFieldError
from store.models import camel_case


def wire(name: str, default: Any = dataclasses.MISSING) -> Any:
    """Declare a header field whose wire name is not the camelCase of its Python name."""
    return dataclasses.field(default=default, metadata={"wire": name})


_KINDS: dict[Any, int] = {str: fields.STR, int: fields.INT, float: fields.FLOAT, bool: fields.BOOL}


@dataclass(frozen=True, slots=True)
class _FieldSpec:
    attr: str
    wire: str
    kind: int
    required: bool
    type_name: str


def _base_type(hint: Any) -> Any:
    """`int | None` → int; plain types unchanged."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if args else hint


class CommandHeader:
    """Base of every typed header; see the module docstring."""

    __slots__ = ()
    #: Java class name, used in error remarks so operators can look the header up.
    JAVA_NAME: ClassVar[str] = ""

    @classmethod
    @cache
    def _specs(cls) -> tuple[_FieldSpec, ...]:
        hints = typing.get_type_hints(cls)
        specs = []
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            base = _base_type(hints[f.name])
            required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            specs.append(
                _FieldSpec(
                    f.name,
                    f.metadata.get("wire", camel_case(f.name)),
                    _KINDS[base],
                    required,
                    base.__name__,
                )
            )
        return tuple(specs)

    @classmethod
    @cache
    def _plan(cls) -> fields.Plan:
        """Per field, in constructor order: wire name, kind and default (`fields.REQUIRED`)."""
        plan = []
        for f, spec in zip(dataclasses.fields(cls), cls._specs(), strict=True):  # type: ignore[arg-type]
            if f.default_factory is not dataclasses.MISSING:
                raise TypeError(f"{cls.__name__}.{f.name}: header fields take plain defaults")
            plan.append((spec.wire, spec.kind, fields.REQUIRED if spec.required else f.default))
        return tuple(plan)

    @classmethod
    @cache
    def _attrs(cls) -> tuple[str, ...]:
        """The attribute of each field, in the plan's order (`fields.build`)."""
        return tuple(spec.attr for spec in cls._specs())

    @classmethod
    def from_ext_fields(cls, ext: Mapping[str, str]) -> Self:
        """Parse a request's extFields; raises HeaderFieldError naming the offending field.

        Every request runs this (SEND_MESSAGE_V2's header has 13 fields): positional arguments from a
        precomputed plan, filled by the (compiled) loop of `fields.parse`."""
        args = fields.parse(cls._plan(), ext if type(ext) is dict else dict(ext))
        if args is None:
            raise cls._field_error(ext)
        return cls(*args)

    @classmethod
    def _field_error(cls, ext: Mapping[str, str]) -> HeaderFieldError:
        """The first field, in plan order, that `fields.parse` could not read, named."""
        name = cls.JAVA_NAME or cls.__name__
        for spec in cls._specs():
            raw = ext.get(spec.wire)
            if raw is None:
                if spec.required:
                    return HeaderFieldError(name, spec.wire, "is required but missing")
            elif fields.parse(((spec.wire, spec.kind, None),), {spec.wire: raw}) is None:
                return HeaderFieldError(name, spec.wire, f"must be {spec.type_name}, got {raw!r}")
        raise AssertionError(f"{name}: fields.parse refused {ext!r} but every field reads")

    @classmethod
    @cache
    def _wire_names(cls) -> tuple[tuple[str, str], ...]:
        """(attribute, wire name) per field, for `to_ext_fields`."""
        return tuple((spec.attr, spec.wire) for spec in cls._specs())

    def to_ext_fields(self) -> dict[str, str]:
        """Render the non-None fields as Java-style strings (every send's response runs this)."""
        return fields.render(self._wire_names(), self)


# ------------------------------------------------------------------------------------- namesrv headers


@dataclass(slots=True)
class RegisterBrokerRequestHeader(CommandHeader):
    JAVA_NAME = "RegisterBrokerRequestHeader"
    broker_name: str
    broker_addr: str
    cluster_name: str
    ha_server_addr: str
    broker_id: int
    compressed: bool = False
    body_crc32: int = 0
    #: mqctl's: a DLedger member's Raft term, so a NameServer lets a newer leader take brokerId 0 from a
    #: live but stale master (4.9.8's NameServers decode known fields only and ignore it).
    d_ledger_term: int | None = None
    #: mqctl's: the hosts of that member's group (`dLegerPeers`, resolved, comma-separated): the term is
    #: the registrant's word, so only a connection from one of them may take this master's place by it.
    d_ledger_hosts: str | None = None


@dataclass(slots=True)
class RegisterBrokerResponseHeader(CommandHeader):
    JAVA_NAME = "RegisterBrokerResponseHeader"
    ha_server_addr: str | None = None
    master_addr: str | None = None


@dataclass(slots=True)
class UnregisterBrokerRequestHeader(CommandHeader):
    JAVA_NAME = "UnRegisterBrokerRequestHeader"
    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: int


@dataclass(slots=True)
class QueryDataVersionRequestHeader(CommandHeader):
    JAVA_NAME = "QueryDataVersionRequestHeader"
    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: int


@dataclass(slots=True)
class QueryDataVersionResponseHeader(CommandHeader):
    JAVA_NAME = "QueryDataVersionResponseHeader"
    changed: bool | None = None


@dataclass(slots=True)
class GetRouteInfoRequestHeader(CommandHeader):
    JAVA_NAME = "GetRouteInfoRequestHeader"
    topic: str
    accept_standard_json_only: bool | None = None


@dataclass(slots=True)
class DeleteTopicFromNamesrvRequestHeader(CommandHeader):
    JAVA_NAME = "DeleteTopicFromNamesrvRequestHeader"
    topic: str
    cluster_name: str | None = None


@dataclass(slots=True)
class GetTopicsByClusterRequestHeader(CommandHeader):
    JAVA_NAME = "GetTopicsByClusterRequestHeader"
    cluster: str


@dataclass(slots=True)
class PutKVConfigRequestHeader(CommandHeader):
    JAVA_NAME = "PutKVConfigRequestHeader"
    namespace: str
    key: str
    value: str


@dataclass(slots=True)
class GetKVConfigRequestHeader(CommandHeader):
    JAVA_NAME = "GetKVConfigRequestHeader"
    namespace: str
    key: str


@dataclass(slots=True)
class GetKVConfigResponseHeader(CommandHeader):
    JAVA_NAME = "GetKVConfigResponseHeader"
    value: str | None = None


@dataclass(slots=True)
class DeleteKVConfigRequestHeader(CommandHeader):
    JAVA_NAME = "DeleteKVConfigRequestHeader"
    namespace: str
    key: str


@dataclass(slots=True)
class GetKVListByNamespaceRequestHeader(CommandHeader):
    JAVA_NAME = "GetKVListByNamespaceRequestHeader"
    namespace: str


@dataclass(slots=True)
class WipeWritePermOfBrokerRequestHeader(CommandHeader):
    JAVA_NAME = "WipeWritePermOfBrokerRequestHeader"
    broker_name: str


@dataclass(slots=True)
class WipeWritePermOfBrokerResponseHeader(CommandHeader):
    JAVA_NAME = "WipeWritePermOfBrokerResponseHeader"
    wipe_topic_count: int


@dataclass(slots=True)
class AddWritePermOfBrokerRequestHeader(CommandHeader):
    JAVA_NAME = "AddWritePermOfBrokerRequestHeader"
    broker_name: str


@dataclass(slots=True)
class AddWritePermOfBrokerResponseHeader(CommandHeader):
    JAVA_NAME = "AddWritePermOfBrokerResponseHeader"
    add_topic_count: int
