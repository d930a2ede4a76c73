"""Times and durations as operators type them: ISO 8601, epoch milliseconds, or relative (``-2h``).

Every time flag of the CLI (``--since``, ``--until``, ``--to-time``) goes through
:func:`parse_time`, and every duration flag (``--by-duration``) through :func:`parse_duration`,
so they accept the same forms everywhere.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from mqctl.errors import UsageError
from mqctl.units import iso

__all__ = ["iso", "parse_duration", "parse_time"]

_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")


def parse_duration(text: str) -> int:
    """``90s``, ``2h30m``, ``1d`` -> milliseconds."""
    compact = text.strip().lower().replace(" ", "")
    if not _is_duration(compact):
        raise UsageError(f"bad duration {text!r}: use forms like 90s, 15m, 2h30m, 7d")
    return round(sum(float(n) * _UNITS_MS[u] for n, u in _DURATION.findall(compact)))


def _is_duration(text: str) -> bool:
    compact = text.lower().replace(" ", "")
    return bool(compact) and "".join(n + u for n, u in _DURATION.findall(compact)) == compact


def parse_time(text: str, *, now_ms: int) -> int:
    """An instant in epoch ms: ``now``, ``-2h``/``+5m`` (relative to now), epoch ms, or ISO 8601 (UTC if no zone)."""
    value = text.strip()
    if value == "now":
        return now_ms
    if value[:1] in "+-":
        delta = parse_duration(value[1:])
        return now_ms - delta if value[0] == "-" else now_ms + delta
    if value.isdigit():
        return int(value)
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        if _is_duration(value):  # kubectl logs --since 10m's form: a duration, read here as a time
            raise UsageError(
                f"bad time {text!r}: a duration, not a time: {value} ago is -{value}, {value} from now +{value}"
            ) from None
        raise UsageError(
            f"bad time {text!r}: use ISO 8601, epoch milliseconds, 'now' or a relative form like -2h"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return round(moment.timestamp() * 1000)
