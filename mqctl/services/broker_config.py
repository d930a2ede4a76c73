"""Broker configuration over the wire (GET_BROKER_CONFIG 26 / UPDATE_BROKER_CONFIG 25)."""

from __future__ import annotations

from typing import TypedDict

from mqctl.admin.client import Admin
from mqctl.errors import NotFoundError, UsageError
from mqctl.services.topics import target_masters


class ConfigValue(TypedDict):
    """A row of ``broker config get``."""

    broker: str
    key: str
    value: str


class ConfigChange(TypedDict):
    """A row of ``broker config set``: the value before and as the broker reports it after."""

    broker: str
    key: str
    old: str
    new: str | None


async def get(admin: Admin, *, cluster: str | None, broker: str | None, keys: list[str]) -> list[ConfigValue]:
    """One row per broker and key; all keys when none are named (unknown names are an error)."""
    rows: list[ConfigValue] = []
    for addr in await target_masters(admin, cluster, broker):
        config = await admin.broker_config(addr)
        for key in keys:
            if key not in config:
                raise no_setting(addr, key, config)
        rows.extend({"broker": addr, "key": k, "value": config[k]} for k in (keys or sorted(config)))
    return rows


def parse_assignments(pairs: list[str]) -> dict[str, str]:
    """``key=value`` arguments, as RocketMQ's property keys spell them."""
    changes = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"bad setting {pair!r}: use key=value, e.g. fileReservedTime=48")
        changes[key.strip()] = value.strip()
    return changes


def _kind(current: str) -> str | None:
    """What a setting holds, judged by its current value as the broker reports it (so it works against
    any broker, 4.9.8's included): a whole number, a number, a flag, or text (None)."""
    if current.lower() in ("true", "false"):
        return "flag"
    try:
        int(current)
        return "whole number"
    except ValueError:
        pass
    try:
        float(current)
        return "number"
    except ValueError:
        return None


def no_setting(addr: str, key: str, config: dict[str, str]) -> NotFoundError:
    """A key the broker does not have, with the closest names it has: a typo, most likely."""
    import difflib

    close = difflib.get_close_matches(key, list(config), n=3, cutoff=0.75)
    hint = f"did you mean {' or '.join(close)}?" if close else "see 'mqctl broker config get'"
    return NotFoundError(f"broker {addr} has no setting {key!r}", hint=hint)


def check_value(addr: str, key: str, value: str, config: dict[str, str]) -> None:
    """Refuse before sending what the broker would refuse with a parser's message: a key it does not
    have (with the closest names it has) or a value of the wrong kind for its current one."""
    if key not in config:
        raise no_setting(addr, key, config)
    kind = _kind(config[key])
    if kind == "flag" and value.lower() not in ("true", "false"):
        raise UsageError(f"bad value for {key}: {value!r} is not true or false (now {config[key]})")
    if kind == "whole number":
        try:
            int(value)
        except ValueError:
            raise UsageError(
                f"bad value for {key}: {value!r} is not a whole number (now {config[key]})"
            ) from None
    if kind == "number":
        try:
            float(value)
        except ValueError:
            raise UsageError(f"bad value for {key}: {value!r} is not a number (now {config[key]})") from None


async def set_(
    admin: Admin, *, cluster: str | None, broker: str | None, changes: dict[str, str], force: bool = False
) -> list[ConfigChange]:
    """Apply ``changes`` on each target broker; rows say old -> new as the broker reports afterwards."""
    from daemon.safe_config import under_floor

    for key, value in changes.items():
        under = None if force else under_floor(key, value)
        if under is not None:  # as the broker would refuse it (NO_PERMISSION): no permission is missing
            raise UsageError(
                under,
                hint="--force sets it anyway, from the broker's host (ACL off) or admin-signed (ACL on)",
            )
    rows: list[ConfigChange] = []
    for addr in await target_masters(admin, cluster, broker):
        before = await admin.broker_config(addr)
        for key, value in changes.items():
            check_value(addr, key, value, before)
        await admin.update_broker_config(addr, changes, force=force)
        after = await admin.broker_config(addr)
        rows.extend({"broker": addr, "key": k, "old": before[k], "new": after.get(k)} for k in changes)
    return rows
