"""What UPDATE_BROKER_CONFIG and UPDATE_NAMESRV_CONFIG may never change, ACL or not.

A config update over the wire must not move data or listeners: store paths and directories, file
sizes (a new `mappedFileSizeCommitLog` makes the store unreadable), listen addresses and the
broker's identity stay as the config file says until an operator edits it and restarts. 4.9.x's
`configBlackList` holds three of these keys; this list is complete. Nor may it lower a daemon's
defences or point it elsewhere: protected mode and replay checks, the remoting and KV caps, where a
broker registers (`namesrvAddr`), and `diskSpaceWarningLevelRatio` (a system property in 4.9.8: at 1 %
the broker refuses every send).

A config update that lets the next cleanup delete messages sooner (a shorter `fileReservedTime`, a
lower `diskSpaceCleanForciblyRatio` or `diskMaxUsedSpaceRatio`) is an operator's act: it is accepted
only from a trusted sender, an admin-signed request with ACL on or a peer on the daemon's own machine
with ACL off (loopback, or the address it connected to).
Values that let the next cleanup delete young CommitLog files, read or not, or that refuse nearly every
send, need mqctl's `--force` marker besides: `fileReservedTime` below one hour,
`diskSpaceCleanForciblyRatio` below RocketMQ's 85 % (a system property in 4.9.8, a key here: at 20 on a
disk 30 % full, every file but the newest goes at once), `maxMessageSize` below 1 KiB. The marker is
no authority: anyone can add a field, so it only counts from a trusted sender.
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
        "vipListenEnable",  # read at start: whether listenPort - 2 opens
        "haTls",
        "haWhiteRemoteAddresses",  # whose acknowledgements a SYNC_MASTER counts
        "metricsEnable",
        "metricsPort",
        "metricsHost",
        "grpcEnable",
        "grpcListenPort",
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
        # a daemon's defences and where it registers: a remote request must not lower or move them
        "protectedMode",
        "aclAdminFreshness",
        "innerClientAuthenticationCredentials",
        "namesrvAddr",
        "diskSpaceWarningLevelRatio",
        "kvConfigMaxValueBytes",
        "kvConfigMaxNamespaceBytes",
        "kvConfigMaxTotalBytes",
        "routeMaxQueueDatas",
        "remotingMaxBufferedBytes",
        "remotingMaxConnectionBufferedBytes",
        "remotingMaxConnections",
        "grpcMaxConnections",
        "grpcMaxTelemetryStreams",
        "maxHeldPullsPerConnection",
        "maxHeldPullsPerHost",
    )
)
#: (`tls.*`: who may connect, and with which certificate, changes only in the file)
LOCKED_PREFIXES = ("store_path", "mapped_file_size", "tls.", "tls_")
MIN_FILE_RESERVED_HOURS = 1
#: snake_case key -> (lowest value allowed without --force, what a lower one does)
FORCE_FLOORS = {
    "file_reserved_time": (
        MIN_FILE_RESERVED_HOURS,
        " h would let the next cleanup delete every CommitLog file, read or not",
    ),
    "disk_space_clean_forcibly_ratio": (
        85,
        " % would let the next cleanup delete young CommitLog files once the disk is that full, read or not",
    ),
    "max_message_size": (1024, " bytes would refuse nearly every send"),
}
#: Keys whose lower value lets the next cleanup delete messages sooner: only a trusted sender lowers them.
SHORTENING_KEYS = ("file_reserved_time", "disk_space_clean_forcibly_ratio", "disk_max_used_space_ratio")
#: What a refusal for want of trust says.
UNTRUSTED = "only an admin-signed request (ACL on) or one from the broker's own host (ACL off) may do that"


def locked_keys(updates: Mapping[str, str]) -> list[str]:
    """The keys of `updates` a remote update must not change (in any spelling the loader accepts)."""
    return sorted(
        k for k in updates if (s := snake_case(k.strip())) in LOCKED_KEYS or s.startswith(LOCKED_PREFIXES)
    )


def _number(value: str) -> int | None:
    try:
        return int(value.strip())
    except ValueError:
        return None  # the config loader answers the bad number


def refuse_unsafe(
    updates: Mapping[str, str],
    ext_fields: Mapping[str, str],
    *,
    current: object = None,
    trusted: bool = False,
) -> None:
    """Raise NO_PERMISSION naming the locked keys of `updates`; from a sender not `trusted`, for a
    value lower than `current`'s of a SHORTENING_KEYS key; and for a value under its floor
    (FORCE_FLOORS) unless trusted and marked --force."""
    locked = locked_keys(updates)
    if locked:
        raise RemotingCommandError(
            ResponseCode.NO_PERMISSION,
            f"Can not update config in black list: {', '.join(locked)} (keys that move data or listeners, "
            "or lower a daemon's defences, change only in the config file, with a restart)",
        )
    forced = trusted and ext_fields.get(FORCE_FIELD) == "true"
    for key, value in updates.items():
        name = snake_case(key.strip())
        number = _number(value)
        if number is None:
            continue
        if not trusted and name in SHORTENING_KEYS and current is not None:
            now = getattr(current, name, None)
            if isinstance(now, int) and number < now:
                raise RemotingCommandError(
                    ResponseCode.NO_PERMISSION,
                    f"{key.strip()}={number}: lower than {now}, it lets the next cleanup delete messages "
                    f"sooner; {UNTRUSTED}",
                )
        under = None if forced else under_floor(key, value)
        if under is not None:
            raise RemotingCommandError(
                ResponseCode.NO_PERMISSION,
                f"{under}; such values need 'mqctl broker config set --force', and {UNTRUSTED}",
            )


def under_floor(key: str, value: str) -> str | None:
    """Why ``key=value`` is under its floor (FORCE_FLOORS: it needs --force), or None when it is not."""
    floor_why = FORCE_FLOORS.get(snake_case(key.strip()))
    number = _number(value)
    if floor_why is None or number is None or number >= floor_why[0]:
        return None
    floor, why = floor_why
    return f"{key.strip()}={number}: under {floor}{why}"
