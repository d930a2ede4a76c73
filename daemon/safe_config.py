"""What UPDATE_BROKER_CONFIG and UPDATE_NAMESRV_CONFIG may never change, ACL or not.

A config update over the wire must not move data or listeners: store paths and directories, file
sizes (a new `mappedFileSizeCommitLog` makes the store unreadable), listen addresses and the
broker's identity stay as the config file says until an operator edits it and restarts. 4.9.x's
`configBlackList` holds three of these keys; this list is complete. Values that let the next cleanup
delete young CommitLog files, read or not, need mqctl's `--force` marker: `fileReservedTime` below
one hour, and `diskSpaceCleanForciblyRatio` below RocketMQ's 85 % (a system property in 4.9.8, a key
here: at 20 on a disk 30 % full, every file but the newest goes at once).
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
        "haTls",
        "metricsEnable",
        "metricsPort",
        "metricsHost",
        "brokerIP1",
        "brokerIP2",
        "brokerName",
        "brokerId",
        "brokerClusterName",
        "brokerRole",
        "flushDiskType",  # read at start only: persisted, SYNC_FLUSH -> ASYNC would drop acknowledged puts' fsync
        "messageDelayLevel",  # read at start only: fewer levels strand the delayed messages (retries) of the rest
        # inert today, but each names where or how the store is kept or copied from
        "haMasterAddress",
        "readOnlyCommitLogStorePaths",
        "messageStorePlugIn",
        "transientStorePoolEnable",
        "enableDLegerCommitLog",
        "dLegerGroup",
        "dLegerPeers",
        "dLegerSelfId",
    )
)
#: (`tls.*`: who may connect, and with which certificate, changes only in the file)
LOCKED_PREFIXES = ("store_path", "mapped_file_size", "tls.", "tls_")
MIN_FILE_RESERVED_HOURS = 1
#: snake_case key -> (lowest value allowed without --force, what a lower one does)
FORCE_FLOORS = {
    "file_reserved_time": (
        MIN_FILE_RESERVED_HOURS,
        " h would let the next cleanup delete every CommitLog file",
    ),
    "disk_space_clean_forcibly_ratio": (
        85,
        " % would let the next cleanup delete young CommitLog files once the disk is that full",
    ),
}


def locked_keys(updates: Mapping[str, str]) -> list[str]:
    """The keys of `updates` a remote update must not change (in any spelling the loader accepts)."""
    return sorted(
        k for k in updates if (s := snake_case(k.strip())) in LOCKED_KEYS or s.startswith(LOCKED_PREFIXES)
    )


def refuse_unsafe(updates: Mapping[str, str], ext_fields: Mapping[str, str]) -> None:
    """Raise NO_PERMISSION for a locked key, or for a value under its floor (FORCE_FLOORS) without --force."""
    locked = locked_keys(updates)
    if locked:
        raise RemotingCommandError(
            ResponseCode.NO_PERMISSION,
            f"Can not update config in black list: {', '.join(locked)} (keys that move data or listeners change "
            "only in the config file, with a restart)",
        )
    if ext_fields.get(FORCE_FIELD) == "true":
        return
    for key, value in updates.items():
        floor_why = FORCE_FLOORS.get(snake_case(key.strip()))
        if floor_why is None:
            continue
        try:
            number = int(value.strip())
        except ValueError:
            continue  # the config loader answers the bad number
        floor, why = floor_why
        if number < floor:
            raise RemotingCommandError(
                ResponseCode.NO_PERMISSION,
                f"{key.strip()}={number}: under {floor}{why}, read or not; "
                "such values need 'mqctl broker config set --force'",
            )
