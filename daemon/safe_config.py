"""What UPDATE_BROKER_CONFIG and UPDATE_NAMESRV_CONFIG may never change, ACL or not.

A config update over the wire must not move data or listeners: store paths and directories, file
sizes (a new `mappedFileSizeCommitLog` makes the store unreadable), listen addresses and the
broker's identity stay as the config file says until an operator edits it and restarts. 4.9.x's
`configBlackList` holds three of these keys; this list is complete. `fileReservedTime` below one
hour (the next cleanup would delete every CommitLog file) needs mqctl's `--force` marker.
"""

from __future__ import annotations

from collections.abc import Mapping

from daemon.config import snake_case
from daemon.remoting.codes import ResponseCode
from daemon.remoting.errors import RemotingCommandError

#: extFields marker mqctl adds for `broker config set --force`.
FORCE_FIELD = "mqctlForce"

LOCKED_KEYS = frozenset(
    snake_case(k)
    for k in (
        "dataDir",
        "kvConfigPath",
        "configStorePath",
        "rocketmqHome",
        "aclFilePath",
        "aclEnable",
        "configBlackList",
        "brokerConfigPath",
        "maxHashSlotNum",
        "maxIndexNum",
        "listenPort",
        "listenHost",
        "haListenPort",
        "metricsEnable",
        "metricsPort",
        "metricsHost",
        "brokerIP1",
        "brokerIP2",
        "brokerName",
        "brokerId",
        "brokerClusterName",
        "brokerRole",
    )
)
LOCKED_PREFIXES = ("store_path", "mapped_file_size")
MIN_FILE_RESERVED_HOURS = 1


def locked_keys(updates: Mapping[str, str]) -> list[str]:
    """The keys of `updates` a remote update must not change (in any spelling the loader accepts)."""
    return sorted(
        k for k in updates if (s := snake_case(k.strip())) in LOCKED_KEYS or s.startswith(LOCKED_PREFIXES)
    )


def refuse_unsafe(updates: Mapping[str, str], ext_fields: Mapping[str, str]) -> None:
    """Raise NO_PERMISSION for a locked key, or for a `fileReservedTime` under an hour without --force."""
    locked = locked_keys(updates)
    if locked:
        raise RemotingCommandError(
            ResponseCode.NO_PERMISSION,
            f"Can not update config in black list: {', '.join(locked)} (keys that move data or listeners change "
            "only in the config file, with a restart)",
        )
    for key, value in updates.items():
        if snake_case(key.strip()) != "file_reserved_time" or ext_fields.get(FORCE_FIELD) == "true":
            continue
        try:
            hours = int(value.strip())
        except ValueError:
            continue  # the config loader answers the bad number
        if hours < MIN_FILE_RESERVED_HOURS:
            raise RemotingCommandError(
                ResponseCode.NO_PERMISSION,
                f"fileReservedTime={hours} would let the next cleanup delete every CommitLog file, read or not; "
                f"values under {MIN_FILE_RESERVED_HOURS} h need 'mqctl broker config set --force'",
            )
