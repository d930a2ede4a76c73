"""One formatting rule for times, sizes and durations across the tool.

Results keep raw values (scripts get bytes, ISO times with an ``_ms`` twin, numbers for ratios);
tables show them for people through :mod:`mqctl.output`, which applies these helpers by column
name: ``size``/``*_size``/``*_bytes``/``reclaimable`` as KiB/MiB/GiB, a time with an ``_ms`` twin in
local time (UTC with ``--utc``) or "never" when the twin is 0, and an ``_ms`` column without an ISO
twin as a duration (``3d 04h``).
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from typing import Any

from store import plural as plural  # the store's (its log lines count too): one home for the rule

_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB")
#: Java's long: a number a RocketMQ server writes as text lies within it.
_LONG = range(-(2**63), 2**63)
_JAVA_LONG_TEXT = re.compile(r"[+-]?[0-9]{1,19}")


def server_int(text: str | int | None, *, least: int | None = None) -> int | None:
    """A number a server wrote as text (a runtime info or config value), or None when it is none, as a
    Java server's ``Long.parseLong`` reads it: digits with an optional sign, within 64 bits. What a broken
    or hostile server sends there (``x``, ``1e400``, ``NaN``, 2^70) is no number: a command's
    ``int()`` of it ended with a traceback's last line (exit 1) or showed a figure no broker can hold.

    ``least`` is the smallest value the field can hold, decided per field: 0 for a count, an offset, a
    size or a time (a broker answering ``-5`` messages was shown as if it had sent a figure), -1 where
    RocketMQ writes -1 for "none" (DLedger's committed index before any entry); below it the number is
    none too, shown empty in tables and null in JSON. A number a JSON body carried (an int) is bounded
    the same way."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    elif not text or not isinstance(text, str) or not _JAVA_LONG_TEXT.fullmatch(text):
        return None  # (not ``isdigit``: ``²`` is a digit int() refuses)
    else:
        value = int(text)
    if value not in _LONG or (least is not None and value < least):
        return None
    return value


def server_float(text: str | None, *, least: float | None = None) -> float | None:
    """A finite number a server wrote as text, or None (NaN, infinities and words are none: a NaN disk
    ratio was a monitoring plugin's DISK OK); ``least`` as for :func:`server_int` (0 for a TPS, a
    latency or a ratio: a disk ratio of -1 is RocketMQ's "cannot measure", not a usage)."""
    try:
        value = float(text) if text else None
    except ValueError:
        return None
    if value is None or not math.isfinite(value) or (least is not None and value < least):
        return None
    return value


def size_text(n: int) -> str:
    """``512 B``, ``1.5 KiB``, ``4.0 MiB``: binary units, one decimal."""
    if abs(n) < 1024:
        return f"{n} B"
    value = float(n)
    for unit in _UNITS:
        value /= 1024
        if abs(value) < 1024 or unit == _UNITS[-1]:
            break
    return f"{value:.1f} {unit}"


def duration_text(ms: int) -> str:
    """``3d04h``, ``5h12m``, ``12m05s``, ``42s``, ``850ms``: a duration or an age at a glance, in the form
    the duration flags take (``--since 2h30m``); the one form of every table and of ``top``."""
    if ms < 0:
        return f"-{duration_text(-ms)}"
    if 0 < ms < 1000:
        return f"{ms}ms"
    s = ms // 1000
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    if d:
        return f"{d}d{h:02d}h"
    if h:
        return f"{h}h{m:02d}m"
    if m:
        return f"{m}m{s:02d}s"
    return f"{s}s"


def iso(ms: int) -> str:
    """Epoch ms as ISO 8601 UTC with milliseconds, the form every output uses."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def table_time(ms: int, *, utc: bool) -> str:
    """A time for people: local ISO 8601 with its offset, or (``--utc``) UTC with ``Z``."""
    if utc:
        return iso(ms)
    return datetime.fromtimestamp(ms / 1000).astimezone().isoformat(timespec="milliseconds")


def when(ms: int | None) -> str | None:
    """A point in time as ISO 8601, or None for 0 (RocketMQ's "never"; tables say so)."""
    return iso(ms) if ms else None


def time_fields(name: str, ms: int | None) -> dict[str, Any]:
    """``{name: ISO or None, name_ms: epoch ms}``: the pair every time in a result is made of."""
    return {name: when(ms), f"{name}_ms": ms or 0}


def is_size(column: str) -> bool:
    return column in ("size", "reclaimable") or column.endswith(("_size", "_bytes"))
