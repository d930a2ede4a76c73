"""Typed configuration loaded once: properties file -> ``MQCTL_*`` environment -> flags.

Config objects are dataclasses whose field names are the snake_case of RocketMQ's own
camelCase keys, so an operator's existing ``broker.conf`` or ``namesrv.properties`` loads as
it is (``mappedFileSizeCommitLog`` fills ``mapped_file_size_commit_log``). A field may name
its RocketMQ key explicitly with ``field(metadata={"key": "brokerIP1"})`` when the
mechanical conversion would not round-trip.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from store.durability import replace_durably
from store.models import camel_case

log = logging.getLogger(__name__)

T = TypeVar("T")

_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


class ConfigError(ValueError):
    """A configuration file, variable or flag holds a value that cannot be used."""


#: The highest TCP port.
MAX_PORT = 65535


def check_port(key: str, value: int, *, unset: int | None = None, why: str = "") -> None:
    """ConfigError unless ``value`` is a port (0..65535; ``unset`` too when the key has an unset mark):
    a socket takes ``value`` modulo 65536, so 70000 would listen on 4464 unsaid."""
    if value == unset or 0 <= value <= MAX_PORT:
        return
    raise ConfigError(f"{key} is a port, 0..{MAX_PORT}, not {value}{why}")


def snake_case(key: str) -> str:
    """``mappedFileSizeCommitLog`` -> ``mapped_file_size_commit_log``; ``brokerIP1`` -> ``broker_ip1``."""
    return _CAMEL_BOUNDARY.sub("_", key).lower()


def property_key(f: dataclasses.Field[Any]) -> str:
    """The RocketMQ key a field is read from and printed as."""
    return str(f.metadata.get("key") or camel_case(f.name))


@dataclasses.dataclass
class RocketMQKeys:
    """Mixin of a daemon config that knows RocketMQ's whole key set.

    ``ROCKETMQ_DEFAULTS`` (data, set by the subclass) lists every key RocketMQ 4.9.8 defines for the
    daemon with its default. Keys a field implements take the field's value; the others are accepted
    but inert: a file or UPDATE_*_CONFIG may set them (kept as text in ``rocketmq_inert``, persisted
    and reported back), they load without a warning, and GET_*_CONFIG reports them, so tools that
    export or diff configs see RocketMQ's set.
    """

    ROCKETMQ_DEFAULTS: ClassVar[Mapping[str, str]] = {}
    rocketmq_inert: dict[str, str] = dataclasses.field(default_factory=dict, metadata={"internal": True})

    def inert_keys(self) -> dict[str, str]:
        """Every accepted-but-inert key with its value (set, else RocketMQ's default)."""
        implemented = {property_key(f) for f in dataclasses.fields(self)}
        return {
            key: self.rocketmq_inert.get(key, default)
            for key, default in self.ROCKETMQ_DEFAULTS.items()
            if key not in implemented
        }


def _fields(cls_or_obj: Any) -> list[dataclasses.Field[Any]]:
    """The fields that are settings (not the inert-key store)."""
    return [f for f in dataclasses.fields(cls_or_obj) if not f.metadata.get("internal")]


def _inert_defaults(cls_or_obj: Any) -> Mapping[str, str]:
    return getattr(cls_or_obj, "ROCKETMQ_DEFAULTS", {})


def read_properties_file(path: Path) -> str:
    """``path``'s text, each line decoded as UTF-8, else as ISO-8859-1 (as Java's ``Properties.load``
    reads a stream: a 4.9.8 broker.conf with a Latin-1 comment loads there) with a WARNING naming the line:
    one Latin-1 byte does not turn the file's other UTF-8 lines into mojibake. OSError when unreadable."""
    lines = path.read_bytes().splitlines(keepends=True)
    out: list[str] = []
    for number, line in enumerate(lines, 1):
        try:
            out.append(line.decode("utf-8"))
        except UnicodeDecodeError:
            log.warning("%s:%d is not UTF-8: read as ISO-8859-1", path, number)
            out.append(line.decode("iso-8859-1"))
    return "".join(out)


def edit_properties_file(path: Path, updates: Mapping[str, str]) -> bytes:
    """``path`` (empty when missing) with ``updates`` set, as bytes: the lines not updated stay byte for
    byte whatever their encoding, the updated ones UTF-8. OSError when unreadable."""
    raw = path.read_bytes() if path.exists() else b""
    text = raw.decode("utf-8", "surrogateescape")  # a Latin-1 byte comes back as it was
    return update_properties(text, updates).encode("utf-8", "surrogateescape")


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java ``.properties`` text as ``java.util.Properties.load`` does (``\\uXXXX`` and other
    escapes, escaped separators in keys, continuations after an odd number of backslashes); a
    repeated key keeps its last value. Unlike Java, unescaped blanks ending a line are dropped: an
    invisible ``brokerName=broker-a `` is a typo, ``broker-a\\ `` a choice. A malformed ``\\u``
    escape raises :class:`ConfigError`."""
    import javaproperties  # lazy: imports that `mqctl --help` must not pay

    result: dict[str, str] = {}
    try:
        for element in javaproperties.parse(text):
            if isinstance(element, javaproperties.KeyValue):
                line = element.source.rstrip("\r\n")
                kept = line.rstrip(" \t\f")
                blanks = len(line) - len(kept) - (len(kept) - len(kept.rstrip("\\"))) % 2
                result[element.key] = (
                    element.value[: len(element.value) - blanks] if blanks > 0 else element.value
                )
    except javaproperties.InvalidUEscapeError as exc:
        raise ConfigError(f"malformed properties text: {exc}") from None
    return result


_VALUE_NEEDS_ESCAPE = re.compile(r"^ | \Z|[\\\x00-\x1f\x7f-\U0010ffff]")


def property_line(key: str, value: str) -> str:
    """``key=value`` that :func:`parse_properties` (and Java) reads back as exactly ``key`` and ``value``.

    Keys are escaped fully; a value only where it must be (backslashes, control and non-ASCII
    characters, a leading or trailing blank), so ``namesrvAddr=127.0.0.1:9876`` stays as RocketMQ prints it."""
    import javaproperties

    value = _VALUE_NEEDS_ESCAPE.sub(lambda m: javaproperties.escape(m.group()), value)
    return f"{javaproperties.escape(key)}={value}"


def update_properties(text: str, updates: Mapping[str, str]) -> str:
    """``text`` with each updated key's entry (all its continuation lines) replaced by ``key=value``;
    comments, blank lines, order and the other entries stay byte for byte as the operator wrote
    them, and keys the file lacks are appended."""
    import javaproperties

    out: list[str] = []
    pending = dict(updates)
    try:
        for element in javaproperties.parse(text):
            if isinstance(element, javaproperties.KeyValue) and element.key in updates:
                if element.key in pending:
                    out.append(property_line(element.key, pending.pop(element.key)) + "\n")
                continue  # a repeated key: Java keeps the last, we keep one line
            out.append(element.source if element.source.endswith(("\n", "\r")) else element.source + "\n")
    except javaproperties.InvalidUEscapeError as exc:
        raise ConfigError(f"malformed properties text: {exc}") from None
    out.extend(property_line(key, value) + "\n" for key, value in pending.items())
    return "".join(out)


def coerce(value: object, annotation: Any, *, source: str) -> object:
    """Convert a string (or already typed value) to ``annotation`` the way RocketMQ's loader does."""
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        if value is None or value == "":
            return None
        annotation = next(a for a in typing.get_args(annotation) if a is not type(None))
        origin = typing.get_origin(annotation)
    if origin in (list, tuple):
        (item_type, *_) = typing.get_args(annotation) or (str,)
        items = (
            value
            if isinstance(value, list | tuple)
            else [p for p in re.split(r"[;,]", str(value)) if p.strip()]
        )
        return [
            coerce(item.strip() if isinstance(item, str) else item, item_type, source=source)
            for item in items
        ]
    try:
        if annotation is bool:
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in _TRUE:
                return True
            if text in _FALSE:
                return False
            raise ValueError(f"expected true or false, got {value!r}")
        if annotation is int:
            if isinstance(value, int):
                return value
            try:
                return int(str(value).strip())
            except ValueError:
                raise ValueError(f"{value!r} is not a whole number") from None
        if annotation is float:
            try:
                return float(value)  # type: ignore[arg-type]
            except ValueError:
                raise ValueError(f"{value!r} is not a number") from None
        if annotation is Path:
            return Path(str(value)).expanduser()
        if annotation is str:
            return str(value)
    except ValueError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    return value


def _did_you_mean(key: str, keys: list[str]) -> str:
    """' (did you mean fileReservedTime?)' for a typo of a key this config has: RocketMQ ignores an
    unknown key silently, so a misspelt setting would otherwise run at its default unnoticed."""
    import difflib

    close = difflib.get_close_matches(key, list(dict.fromkeys(keys)), n=2, cutoff=0.8)  # a key once
    return f" (did you mean {' or '.join(close)}?)" if close else ""


def load_config(
    cls: type[T],
    file: Path | str | None = None,
    *,
    env_prefix: str = "MQCTL_",
    overrides: Mapping[str, object] | None = None,
    environ: Mapping[str, str] | None = None,
) -> T:
    """Build ``cls`` from defaults, then ``file``, then ``MQCTL_<FIELD>`` variables, then ``overrides``.

    ``overrides`` are flag values keyed by field name; ``None`` means "flag not given".
    Unknown keys in the file are ignored with a warning, as RocketMQ ignores them silently.
    """
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in _fields(cls) if f.init}
    by_key = {property_key(f): f.name for f in fields.values()}
    known = _inert_defaults(cls)
    values: dict[str, object] = {}
    inert: dict[str, str] = {}
    if file is not None:
        path = Path(file)
        try:
            text = read_properties_file(path)
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
        try:
            props = parse_properties(text)
        except ConfigError as exc:
            raise ConfigError(f"{path}: {exc}") from None
        for key, raw in props.items():
            name = by_key.get(key) or (snake_case(key) if snake_case(key) in fields else None)
            if name is None:
                if key in known:
                    inert[key] = raw  # RocketMQ's key, not acted on: kept and reported back
                else:
                    log.warning(
                        "%s: ignoring unknown key %r%s", path, key, _did_you_mean(key, [*by_key, *known])
                    )
                continue
            values[name] = coerce(raw, hints[name], source=f"{path}: {key}")
    if inert:
        values["rocketmq_inert"] = inert
    env = os.environ if environ is None else environ
    for name in fields:
        var = env_prefix + name.upper()
        if var in env:
            values[name] = coerce(env[var], hints[name], source=var)
    for name, flag in (overrides or {}).items():
        if flag is None:
            continue
        if name not in fields:
            raise TypeError(f"{cls.__name__} has no field {name!r}")
        values[name] = coerce(flag, hints[name], source=f"--{name.replace('_', '-')}")
    return cls(**values)


def coerce_properties(config: object, props: Mapping[str, str], *, ignore_unknown: bool) -> dict[str, object]:
    """``{field: typed value}`` for the RocketMQ keys in ``props`` (UPDATE_BROKER_CONFIG and
    UPDATE_NAMESRV_CONFIG). Unknown keys are skipped with ``ignore_unknown`` (the broker, as Java's
    does) or refused; either refusal and a bad value raise :class:`ConfigError`."""
    hints = typing.get_type_hints(type(config))
    by_key = {property_key(f): f.name for f in _fields(config)}
    known = _inert_defaults(config)
    values: dict[str, object] = {}
    for key, raw in props.items():
        name = by_key.get(key)
        if name is None:
            if key in known:  # accepted and kept, though nothing acts on it
                inert = values.setdefault("rocketmq_inert", dict(getattr(config, "rocketmq_inert", {})))
                inert[key] = raw  # type: ignore[index]
                continue
            if ignore_unknown:
                continue
            raise ConfigError(f"unknown config key {key!r}")
        values[name] = coerce(raw, hints[name], source=key)
    return values


def write_atomically(path: Path, data: bytes, mode: int | None = None) -> None:
    """Replace ``path`` so that readers and crashes see either the old or the new content; with
    ``mode`` (a secret's file) the new content is never readable by more than that, not even briefly."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666 if mode is None else mode)
    with open(fd, "wb") as fh:
        if mode is not None:  # a .tmp left over by a crash keeps its old mode through O_CREAT
            os.fchmod(fd, mode)
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    replace_durably(str(tmp), str(path))


def config_file_mode(path: Path, obj: object) -> int | None:
    """The mode a config file rewritten over the wire gets: never wider than the file had (an operator's
    0600 broker.conf may hold a key password), and 0600 while ``obj`` holds a set secret; None: the
    default (a new file, no secret)."""
    try:
        mode: int | None = path.stat().st_mode & 0o777
    except FileNotFoundError:
        mode = None
    if dataclasses.is_dataclass(obj) and any(
        f.metadata.get("secret") and getattr(obj, f.name) for f in dataclasses.fields(obj)
    ):
        mode = 0o600 if mode is None else mode & 0o600
    return mode


INERT_HEADER = "# accepted for RocketMQ compatibility, inert: mqctl does not act on the keys below"


#: What GET_BROKER_CONFIG / GET_NAMESRV_CONFIG show for a secret that is set (a field with ``secret`` metadata).
MASKED = "******"


#: extFields marker with which mqctl asks GET_BROKER_CONFIG / GET_NAMESRV_CONFIG for its own keys too (a
#: RocketMQ server ignores it); without it the answer holds RocketMQ 4.9.8's key set only.
ALL_KEYS_FIELD = "mqctlAllKeys"


def wire_properties(obj: object, ext_fields: Mapping[str, str], effective: Mapping[str, str]) -> bytes:
    """A GET_*_CONFIG answer. As 4.9.8's ``Configuration#getAllConfigsFormatString`` prints its config
    objects: RocketMQ's keys only, and ``effective`` values where our field's empty default means "derive
    it" (4.9.8 prints the derived value); every key of ours too when the request carries ``ALL_KEYS_FIELD``."""
    if ext_fields.get(ALL_KEYS_FIELD) == "true":
        return to_properties(obj, mask_secrets=True).encode()
    return to_properties(obj, mask_secrets=True, rocketmq_only=True, effective=effective).encode()


def to_properties(
    obj: object,
    *,
    mark_inert: bool = False,
    mask_secrets: bool = False,
    rocketmq_only: bool = False,
    effective: Mapping[str, str] | None = None,
    derived: Mapping[str, tuple[str, str]] | None = None,
) -> str:
    """Render a config object as a RocketMQ properties file: every setting, then RocketMQ's keys that
    are accepted but inert (``--print-config`` heads them with ``INERT_HEADER`` when ``mark_inert``).
    ``mask_secrets`` (an answer over the wire) shows a set secret (a key's password) as ``MASKED``;
    ``rocketmq_only`` leaves out the keys RocketMQ 4.9.8 does not define; ``effective`` replaces values;
    ``derived`` (key -> value, from what) shows an unset key's derived value under a comment saying so."""
    if not dataclasses.is_dataclass(obj) or isinstance(obj, type):
        raise TypeError(f"{obj!r} is not a dataclass instance")
    known = _inert_defaults(obj)
    effective = effective or {}
    lines = []
    for f in _fields(obj):
        if rocketmq_only and property_key(f) not in known:
            continue
        value = getattr(obj, f.name)
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, list | tuple):
            text = ";".join(str(v) for v in value)
        elif value is None:
            text = ""
        else:
            text = str(value)
        if mask_secrets and text and f.metadata.get("secret"):
            text = MASKED
        key = property_key(f)
        if derived and key in derived:
            text, source = derived[key]
            lines.append(f"# {key} unset: the daemon uses {source}")
        lines.append(property_line(key, effective.get(key, text)))
    if isinstance(obj, RocketMQKeys):
        inert = obj.inert_keys()
        if inert and mark_inert:
            lines.append(INERT_HEADER)
        lines.extend(property_line(key, value) for key, value in inert.items())
    return "\n".join(lines) + "\n"
