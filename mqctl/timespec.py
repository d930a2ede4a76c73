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

__all__ = ["DURATION_FORMS", "iso", "parse_duration", "parse_time"]

_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")


#: The last instant a time flag takes (9999-12-31T23:59:59.999Z): past it, a date cannot be shown.
LATEST_MS = 253_402_300_799_999

#: What a duration flag takes, for its error.
DURATION_FORMS = "a duration such as 90s, 15m, 2h30m or 7d (units ms, s, m, h, d, w)"


def parse_duration(text: str, *, flag: str | None = None) -> int:
    """``90s``, ``2h30m``, ``1d`` -> milliseconds; ``flag`` names the option in the error, as the user
    typed it: the one line says which of a command's flags is wrong."""
    compact = text.strip().lower().replace(" ", "")
    if not _is_duration(compact):
        raise UsageError(f"bad {flag or 'duration'} {text!r}: give {DURATION_FORMS}")
    return round(sum(float(n) * _UNITS_MS[u] for n, u in _DURATION.findall(compact)))


def _is_duration(text: str) -> bool:
    compact = text.lower().replace(" ", "")
    return bool(compact) and "".join(n + u for n, u in _DURATION.findall(compact)) == compact


def parse_time(text: str, *, now_ms: int, flag: str | None = None) -> int:
    """An instant in epoch ms: ``now``, ``-2h``/``+5m`` (relative to now), epoch ms, or ISO 8601 (UTC if no
    zone), from 1970 to the year 9999; ``flag`` names the option in the error."""
    what = flag or "time"
    ms = _instant(text, now_ms, what)
    if not 0 <= ms <= LATEST_MS:
        raise UsageError(
            f"bad {what} {text!r}: a time from 1970 to the year 9999 (epoch ms 0 to {LATEST_MS})"
        )
    return ms


def _instant(text: str, now_ms: int, what: str) -> int:
    value = text.strip()
    if value == "now":
        return now_ms
    if value[:1] in "+-":
        if not _is_duration(value[1:].strip()):
            raise UsageError(
                f"bad {what} {text!r}: a relative time is -DURATION (ago) or +DURATION (from now), "
                f"with {DURATION_FORMS}"
            )
        delta = parse_duration(value[1:])
        return now_ms - delta if value[0] == "-" else now_ms + delta
    if value.isdigit():
        return int(value)
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        if _is_duration(value):  # kubectl logs --since 10m's form: a duration, read here as a time
            raise UsageError(
                f"bad {what} {text!r}: a duration, not a time: {value} ago is -{value}, {value} from now +{value}"
            ) from None
        raise UsageError(
            f"bad {what} {text!r}: use ISO 8601, epoch milliseconds, 'now' or a relative form like -2h"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return round(moment.timestamp() * 1000)
