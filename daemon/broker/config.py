"""Broker settings: the snake_case of RocketMQ's `broker.conf` keys, so an existing file loads as it is."""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import logging
import os
import socket
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from daemon.config import ConfigError, RocketMQKeys, check_port, load_config, property_key
from daemon.remoting.limits import RemotingLimits
from daemon.remoting.tls import TlsConfig
from daemon.rocketmq_keys import CPUS, NETTY_CLIENT_KEYS, NETTY_SERVER_KEYS
from daemon.schedslice import MAX_SLICE_US, MIN_SLICE_US
from store.config import ASYNC_FLUSH, ASYNC_MASTER, SLAVE, SYNC_FLUSH, SYNC_MASTER, StoreConfig
from store.names import TRACE_TOPIC

#: 5.x's ``timerMaxDelaySec`` default: the furthest a timer message may be due, in seconds from its send;
#: ``msg send --delay/--deliver-at`` refuses beyond it before sending.
TIMER_MAX_DELAY_SEC = 3 * 24 * 3600

#: Default port of the Prometheus endpoint (`metricsPort`); RocketMQ 5's exporter uses the same.
DEFAULT_METRICS_PORT = 5557

#: RocketMQ 4.9.8's BrokerConfig keys and defaults (those a field implements report the field's value).
BROKER_KEYS: dict[str, str] = {
    "rocketmqHome": os.environ.get("ROCKETMQ_HOME", ""),
    "namesrvAddr": "",
    "brokerIP1": "",
    "brokerIP2": "",
    "brokerName": "",
    "brokerClusterName": "DefaultCluster",
    "brokerId": "0",
    "brokerPermission": "6",
    "defaultTopicQueueNums": "8",
    "autoCreateTopicEnable": "true",
    "clusterTopicEnable": "true",
    "brokerTopicEnable": "true",
    "autoCreateSubscriptionGroup": "true",
    "messageStorePlugIn": "",
    "msgTraceTopicName": TRACE_TOPIC,
    "traceTopicEnable": "false",
    "sendMessageThreadPoolNums": str(min(CPUS, 4)),
    "putMessageFutureThreadPoolNums": str(min(CPUS, 4)),
    "pullMessageThreadPoolNums": str(16 + CPUS * 2),
    "processReplyMessageThreadPoolNums": str(16 + CPUS * 2),
    "queryMessageThreadPoolNums": str(8 + CPUS),
    "adminBrokerThreadPoolNums": "16",
    "clientManageThreadPoolNums": "32",
    "consumerManageThreadPoolNums": "32",
    "heartbeatThreadPoolNums": str(min(32, CPUS)),
    "endTransactionThreadPoolNums": str(max(8 + CPUS * 2, min(CPUS, 4) * 4)),
    "flushConsumerOffsetInterval": "5000",
    "flushConsumerOffsetHistoryInterval": "60000",
    "rejectTransactionMessage": "false",
    "fetchNamesrvAddrByAddressServer": "false",
    "sendThreadPoolQueueCapacity": "10000",
    "putThreadPoolQueueCapacity": "10000",
    "pullThreadPoolQueueCapacity": "100000",
    "replyThreadPoolQueueCapacity": "10000",
    "queryThreadPoolQueueCapacity": "20000",
    "clientManagerThreadPoolQueueCapacity": "1000000",
    "consumerManagerThreadPoolQueueCapacity": "1000000",
    "heartbeatThreadPoolQueueCapacity": "50000",
    "endTransactionPoolQueueCapacity": "100000",
    "filterServerNums": "0",
    "longPollingEnable": "true",
    "shortPollingTimeMills": "1000",
    "notifyConsumerIdsChangedEnable": "true",
    "highSpeedMode": "false",
    "commercialEnable": "true",
    "commercialTimerCount": "1",
    "commercialTransCount": "1",
    "commercialBigCount": "1",
    "commercialBaseCount": "1",
    "transferMsgByHeap": "true",
    "maxDelayTime": "40",
    "regionId": "DefaultRegion",
    "registerBrokerTimeoutMills": "6000",
    "slaveReadEnable": "false",
    "disableConsumeIfConsumerReadSlowly": "false",
    "consumerFallbehindThreshold": "17179869184",
    "brokerFastFailureEnable": "true",
    "waitTimeMillsInSendQueue": "200",
    "waitTimeMillsInPullQueue": "5000",
    "waitTimeMillsInHeartbeatQueue": "31000",
    "waitTimeMillsInTransactionQueue": "3000",
    "startAcceptSendRequestTimeStamp": "0",
    "traceOn": "true",
    "enableCalcFilterBitMap": "false",
    "expectConsumerNumUseFilter": "32",
    "maxErrorRateOfBloomFilter": "20",
    "filterDataCleanTimeSpan": "86400000",
    "filterSupportRetry": "false",
    "enablePropertyFilter": "false",
    "compressedRegister": "false",
    "forceRegister": "true",
    "registerNameServerPeriod": "30000",
    "transactionTimeOut": "6000",
    "transactionCheckMax": "15",
    "transactionCheckInterval": "60000",
    "aclEnable": "false",
    "storeReplyMessageEnable": "true",
    "autoDeleteUnusedStats": "false",
    "enableDetailStat": "true",
    "isolateLogEnable": "false",
    "configBlackList": "configBlackList;brokerConfigPath",
}

#: RocketMQ 4.9.8's MessageStoreConfig keys and defaults (the store's fields implement the ones it uses).
STORE_KEYS: dict[str, str] = {
    "storePathRootDir": os.path.join(os.path.expanduser("~"), "store"),
    "storePathCommitLog": os.path.join(os.path.expanduser("~"), "store", "commitlog"),
    "storePathDLedgerCommitLog": "",
    "readOnlyCommitLogStorePaths": "",
    "mappedFileSizeCommitLog": "1073741824",
    "mappedFileSizeConsumeQueue": "6000000",
    "enableConsumeQueueExt": "false",
    "mappedFileSizeConsumeQueueExt": "50331648",
    "bitMapLengthConsumeQueueExt": "64",
    "flushIntervalCommitLog": "500",
    "commitIntervalCommitLog": "200",
    "useReentrantLockWhenPutMessage": "true",
    "flushCommitLogTimed": "true",
    "flushIntervalConsumeQueue": "1000",
    "cleanResourceInterval": "10000",
    "deleteCommitLogFilesInterval": "100",
    "deleteConsumeQueueFilesInterval": "100",
    "destroyMapedFileIntervalForcibly": "120000",
    "redeleteHangedFileInterval": "120000",
    "deleteWhen": "04",
    "diskMaxUsedSpaceRatio": "75",
    "fileReservedTime": "72",
    "putMsgIndexHightWater": "600000",
    "maxMessageSize": "4194304",
    "checkCRCOnRecover": "true",
    "flushCommitLogLeastPages": "4",
    "commitCommitLogLeastPages": "4",
    "flushLeastPagesWhenWarmMapedFile": "4096",
    "warmMapedFileEnable": "false",
    "flushConsumeQueueLeastPages": "2",
    "flushCommitLogThoroughInterval": "10000",
    "commitCommitLogThoroughInterval": "200",
    "flushConsumeQueueThoroughInterval": "60000",
    "maxTransferBytesOnMessageInMemory": "262144",
    "maxTransferCountOnMessageInMemory": "32",
    "maxTransferBytesOnMessageInDisk": "65536",
    "maxTransferCountOnMessageInDisk": "8",
    "accessMessageInMemoryMaxRatio": "40",
    "messageIndexEnable": "true",
    "maxHashSlotNum": "5000000",
    "maxIndexNum": "20000000",
    "maxMsgsNumBatch": "64",
    "messageIndexSafe": "false",
    "haListenPort": "10912",
    "haSendHeartbeatInterval": "5000",
    "haHousekeepingInterval": "20000",
    "haTransferBatchSize": "32768",
    "haMasterAddress": "",
    "haSlaveFallbehindMax": "268435456",
    "brokerRole": "ASYNC_MASTER",
    "flushDiskType": "ASYNC_FLUSH",
    "syncFlushTimeout": "5000",
    "slaveTimeout": "3000",
    "messageDelayLevel": "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h",
    "flushDelayOffsetInterval": "10000",
    "cleanFileForciblyEnable": "true",
    "offsetCheckInSlave": "false",
    "debugLockEnable": "false",
    "duplicationEnable": "false",
    "diskFallRecorded": "true",
    "osPageCacheBusyTimeOutMills": "1000",
    "defaultQueryMaxNum": "32",
    "transientStorePoolEnable": "false",
    "transientStorePoolSize": "5",
    "fastFailIfNoBufferInStorePool": "false",
    "enableDLegerCommitLog": "false",
    "dLegerGroup": "",
    "dLegerPeers": "",
    "dLegerSelfId": "",
    "preferredLeaderId": "",
    "isEnableBatchPush": "false",
    "enableScheduleMessageStats": "true",
    "enableLmq": "false",
    "enableMultiDispatch": "false",
    "maxLmqConsumeQueueNum": "20000",
    "enableScheduleAsyncDeliver": "false",
    "scheduleAsyncDeliverMaxPendingLimit": "2000",
    "scheduleAsyncDeliverMaxResendNum2Blocked": "3",
}


@dataclass(frozen=True)
class Interface:
    """One address of one network interface: what `pick_local_address` chooses among."""

    name: str
    address: str
    #: A Linux bridge (``/sys/class/net/<name>/bridge`` exists): 4.9.8 skips its addresses, and those of
    #: its alias labels (``br0:1``).
    bridge: bool = False


def pick_local_address(interfaces: Iterable[Interface], routed: str | None = None) -> str | None:
    """The address a broker listening on every interface advertises, from the interfaces alone (no DNS).

    Bridges (and their aliases), loopback and link-local addresses (169.254/16, fe80::/10: their scope
    means nothing to another host) are skipped. Of the rest, ``routed`` (the default route's source
    address) when it is one: a service IP, a VPN's or an overlay's address is not where other hosts reach
    this one. Otherwise 4.9.8's ``RemotingUtil.getLocalAddress`` rule over the kernel's order (Java
    enumerates the interfaces in another order, so where several qualify a Java broker may pick another):
    the first IPv4 address not in 127.0 or 192.168, else the last IPv4 address, else the first IPv6
    address, in brackets. None when nothing is left (4.9.8 then asks DNS for the host name).
    """
    listed = list(interfaces)
    bridges = {i.name for i in listed if i.bridge}
    ipv4: list[str] = []
    ipv6: list[str] = []
    for iface in listed:
        if iface.bridge or iface.name.split(":", 1)[0] in bridges:
            continue
        try:
            addr = ipaddress.ip_address(iface.address.split("%")[0])
        except ValueError:
            continue
        if addr.is_loopback or addr.is_link_local:
            continue
        if addr.version == 4:
            ipv4.append(str(addr))
        else:
            ipv6.append(f"[{addr}]")
    if routed is not None:
        with contextlib.suppress(ValueError):
            bare = str(ipaddress.ip_address(routed.split("%")[0]))
            if bare in ipv4 or f"[{bare}]" in ipv6:
                return bare if bare in ipv4 else f"[{bare}]"
    for ip in ipv4:
        if not ip.startswith(("127.0", "192.168")):
            return ip
    if ipv4:
        return ipv4[-1]
    return ipv6[0] if ipv6 else None


def host_interfaces() -> list[Interface]:
    """This host's interface addresses (Linux: the kernel's IPv4 list and ``/proc/net/if_inet6``); elsewhere
    the source address of an unconnected UDP socket's route, which sends nothing."""
    if not os.path.isdir("/sys/class/net"):
        return _routed_address()
    out: list[Interface] = []
    with contextlib.suppress(OSError):
        out.extend(_ipv4_interfaces())
    try:
        with open("/proc/net/if_inet6", encoding="utf-8", errors="surrogateescape") as f:
            for line in f:
                fields = line.split()
                if len(fields) >= 6 and len(fields[0]) == 32:
                    raw = bytes.fromhex(fields[0])
                    out.append(Interface(fields[5], socket.inet_ntop(socket.AF_INET6, raw)))
    except (OSError, ValueError):
        pass
    return [
        dataclasses.replace(i, bridge=os.path.exists(f"/sys/class/net/{i.name.split(':', 1)[0]}/bridge"))
        for i in out
        if "/" not in i.name
    ]


def _ipv4_interfaces() -> list[Interface]:
    """Every IPv4 address with its interface's name (``SIOCGIFCONF``)."""
    import array
    import fcntl
    import struct

    siocgifconf = 0x8912
    size = 40 if struct.calcsize("P") == 8 else 32  # struct ifreq
    buf = array.array("B", bytes(size * 256))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        req = struct.pack("iL", len(buf), buf.buffer_info()[0])
        used = struct.unpack("iL", fcntl.ioctl(sock.fileno(), siocgifconf, req))[0]
    data = buf.tobytes()[:used]
    return [
        Interface(
            os.fsdecode(data[i : i + 16].split(b"\0", 1)[0]),  # a name is bytes: undecodable ones kept
            socket.inet_ntoa(data[i + 20 : i + 24]),
        )
        for i in range(0, used, size)
    ]


def _routed_address() -> list[Interface]:
    routed = routed_source() or routed_source(ipv6=True)
    return [Interface("route", routed)] if routed is not None else []


def routed_source(*, ipv6: bool = False) -> str | None:
    """The source address of this host's default IPv4 (IPv6) route: an unconnected UDP socket's
    "connect" to a documentation address picks the route and sends nothing. None: no such route."""
    family, target = (socket.AF_INET6, "2001:db8::1") if ipv6 else (socket.AF_INET, "192.0.2.1")
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.connect((target, 9))
            return str(sock.getsockname()[0])
    except OSError:
        return None


def local_ip(*, ipv6: bool = False) -> str:
    """The address a broker listening on every interface advertises (:func:`pick_local_address`), of the
    family its wildcard serves: 0.0.0.0 IPv4, ``::`` IPv6 (bound IPv6-only). Loopback with a WARNING when
    this host has no other address of that family, as other hosts then cannot reach it there."""
    ip = pick_local_address(
        [i for i in host_interfaces() if (":" in i.address) == ipv6], routed_source(ipv6=ipv6)
    )
    if ip is None:
        loopback, wildcard = ("[::1]", "::") if ipv6 else ("127.0.0.1", "0.0.0.0")
        logging.getLogger(__name__).warning(
            "listening on every interface (%s), but this host has no address of its family beyond loopback: "
            "advertising %s, which other hosts cannot reach; set brokerIP1 to the address clients connect "
            "to (an IPv6 one needs listenHost=::)",
            wildcard,
            loopback,
        )
        return loopback
    return ip


def resolve_listen(listen_host: str, broker_ip1: str) -> tuple[str, str, str]:
    """``(listenHost, brokerIP1, why)``: loopback unless told otherwise.

    No ``listenHost`` binds 127.0.0.1, except when ``brokerIP1`` names an address off loopback: a
    RocketMQ broker.conf has no ``listenHost`` (4.9.8 binds every interface) and its ``brokerIP1`` says
    clients reach the broker there, so it binds every interface as 4.9.8 does. No ``brokerIP1``
    registers where a client can reach the listener: the host's address on a wildcard, 127.0.0.1 for
    ``localhost``, else the listen address itself (a broker on 127.0.0.3 is not reached at 127.0.0.1).
    """
    host = listen_host.strip()
    ip = broker_ip1.strip()
    if host:
        why = f"listenHost={host}"
    elif ip.removeprefix("[").removesuffix("]") == "::1":
        host, why = "::1", f"brokerIP1={ip} and no listenHost: IPv6 loopback"
    elif ip and not ip.startswith("127.") and ip != "localhost":
        host = "::" if ":" in ip else "0.0.0.0"  # an IPv6 brokerIP1 is reached over IPv6
        why = f"brokerIP1={ip} and no listenHost: every interface, as RocketMQ binds"
    else:
        host, why = (
            "127.0.0.1",
            "the default: loopback only; listenHost=0.0.0.0 or --listen 0.0.0.0:PORT opens it",
        )
    if not ip:
        if host in ("0.0.0.0", "::"):
            ip = local_ip(ipv6=host == "::")
        elif host in ("localhost", "::1"):
            ip = "127.0.0.1"
        else:
            ip = host
    return host, ip, why


@dataclass
class BrokerConfig(StoreConfig, RemotingLimits, TlsConfig, RocketMQKeys):
    """RocketMQ 4.9.8 broker defaults (docs/wire-protocol.md §broker-settings).

    It extends the store's settings because RocketMQ keeps both in one `broker.conf`: every store key
    (`storePathRootDir`, `flushDiskType`, `mappedFileSizeCommitLog`, `fileReservedTime`, ...) loads here
    and `store_config()` hands exactly those to the store. The `remotingMax*` keys come from
    `RemotingLimits`, RocketMQ's `tls.*` keys from `TlsConfig`. RocketMQ's other keys (`ROCKETMQ_DEFAULTS`: BrokerConfig, MessageStoreConfig,
    NettyServerConfig and NettyClientConfig, as Java's broker registers them) load and report as
    accepted-but-inert.
    """

    ROCKETMQ_DEFAULTS: ClassVar[Mapping[str, str]] = {
        **NETTY_SERVER_KEYS,
        "listenPort": "10911",
        **NETTY_CLIENT_KEYS,
        **BROKER_KEYS,
        **STORE_KEYS,
    }

    #: Where UPDATE_BROKER_CONFIG changes are written: the ``-c`` file; see ``config_path``.
    broker_config_path: str = ""
    # identity and cluster
    broker_cluster_name: str = "DefaultCluster"
    broker_name: str = field(default_factory=socket.gethostname)
    broker_id: int = 0
    namesrv_addr: str = field(default_factory=lambda: os.environ.get("NAMESRV_ADDR", ""))
    #: The registered address; empty: 127.0.0.1 on a loopback listener, else this host's address.
    broker_ip1: str = field(default="", metadata={"key": "brokerIP1"})
    broker_ip2: str = field(default="", metadata={"key": "brokerIP2"})
    listen_port: int = 10911
    server_channel_max_idle_time_seconds: int = 120
    broker_permission: int = 6
    # topics and groups
    auto_create_topic_enable: bool = True
    auto_create_subscription_group: bool = True
    default_topic_queue_nums: int = 8
    cluster_topic_enable: bool = True
    broker_topic_enable: bool = True
    trace_topic_enable: bool = False
    msg_trace_topic_name: str = TRACE_TOPIC
    # consumers
    long_polling_enable: bool = True
    short_polling_time_mills: int = 1000
    #: mqctl's: long-polling pulls one connection may have held (a consumer holds one per queue it reads,
    #: every group of its process sharing the connection); past it a pull that finds nothing is answered
    #: at once, as a pull without the suspend flag is (0: no bound). Waiting pops and 5.x receives have
    #: the same bound, counted apart (daemon.broker.polls).
    max_held_pulls_per_connection: int = 4096
    #: mqctl's: held pulls of all one host's connections beyond loopback, an IPv6 host being its /64
    #: (0: no bound); a host behind which many consumers share an address (NAT) may need more. Waiting
    #: pops and 5.x receives, counted apart, too.
    max_held_pulls_per_host: int = 16384
    notify_consumer_ids_changed_enable: bool = True
    slave_read_enable: bool = False
    enable_property_filter: bool = False
    filter_support_retry: bool = False
    reject_transaction_message: bool = False
    transaction_time_out: int = 6000
    transaction_check_max: int = 15
    transaction_check_interval: int = 60000
    default_query_max_num: int = 32
    flush_consumer_offset_interval: int = 5000
    flush_delay_offset_interval: int = 10000
    # timer messages (RocketMQ 5.x's MessageStoreConfig keys; daemon.broker.timer)
    #: The furthest a timer message may be due, in seconds from its send (5.x: 3 days); beyond: refused.
    timer_max_delay_sec: int = TIMER_MAX_DELAY_SEC
    #: False refuses every timer message still to come, as 5.x does (WHEEL_TIMER_NOT_ENABLE).
    timer_wheel_enable: bool = True
    #: mqctl's: ms between snapshots of the pending timers, which a start reads instead of the timer queue.
    timer_snapshot_interval: int = 10_000
    #: mqctl's: a timer parked this many seconds and not yet due is re-put into the timer topic, so CommitLog
    #: retention (`fileReservedTime`) never removes it first (5.x rolls after `timerRollWindowSlots`).
    timer_roll_window_sec: int = 24 * 3600
    # name server registration
    register_name_server_period: int = 30000
    register_broker_timeout_mills: int = 6000
    compressed_register: bool = False
    force_register: bool = True
    # mqctl additions
    metrics_enable: bool = True
    metrics_port: int = DEFAULT_METRICS_PORT
    #: Where /metrics and /healthz listen; empty: `listenHost`, like every other listener.
    metrics_host: str = ""
    #: The gRPC front for the official RocketMQ 5.x clients (daemon.grpc; needs the `grpc` extra).
    grpc_enable: bool = True
    #: Its port (the 5.x Proxy's default); 0: a free one, reported in the start-up line.
    grpc_listen_port: int = 8081
    #: Connections the gRPC front holds at once (grpc core's connection quota): one more is closed as it
    #: is accepted, before any byte of it is read, so a peer opening connections without end (none of
    #: them authenticated yet) cannot grow the broker's memory and descriptors without bound.
    grpc_max_connections: int = 1000
    #: Telemetry streams the gRPC front holds open at once from every host together (a host beyond
    #: loopback holds 4096 at most): one more is answered TOO_MANY_REQUESTS and ended, and its client opens
    #: it again later. Many hosts (or an IPv6 peer spread over many /64s) each within its own bound held
    #: as many as their connections carried, about 23 KiB each while idle.
    grpc_max_telemetry_streams: int = 16384
    #: Empty: 127.0.0.1, or every interface when `brokerIP1` names another address (see resolve_listen).
    listen_host: str = ""
    #: µs of EEVDF slice for the event loop's thread (daemon.schedslice; Linux 6.12+): a wake-up preempts a
    #: CPU-bound neighbour with a longer slice instead of waiting for its turn; helper threads keep the
    #: kernel's default. 0: the kernel's default.
    sched_slice_micros: int = 0
    #: ms a stall probe of the event loop may be overdue before a watchdog thread takes the loop thread's
    #: stack, then every as many ms while it stays overdue (runtime key ``loopStallStacks``, DEBUG log:
    #: what ran when the loop ran). 0: no watchdog (it wakes 50 times a second and takes the GIL to look).
    loop_stack_millis: int = 0
    #: With ACL off and a listener beyond loopback, refuse writes from other machines (daemon.protect).
    protected_mode: bool = True
    #: The VIP port, ``listenPort - 2``, serving what ``listenPort`` serves (4.9.8's BrokerController
    #: always opens it as its ``fastRemotingServer``; a 4.9.8 slave syncs its metadata there). 4.9.8 has
    #: no key for it: false keeps it closed; an ephemeral ``listenPort`` (0) opens none.
    vip_listen_enable: bool = True
    # access control (RocketMQ ACL 1.0, daemon.acl)
    acl_enable: bool = False
    #: One ACL file instead of `<rocketmqHome>/conf/plain_acl.yml` + `conf/acl/*.yml`.
    acl_file_path: str = ""
    #: Seconds an admin request's signed timestamp may be old; each nonce is taken once (0: not asked,
    #: as mqadmin signs none). Against replayed admin requests (daemon.acl.plain).
    acl_admin_freshness: int = 0
    #: The account this broker signs its own requests with (a slave's metadata sync and tail check, a
    #: DLedger member's copy of the master's metadata, its registrations): RocketMQ 5.x's key, a JSON
    #: ``{"accessKey": "...", "secretKey": "..."}``. Empty: unsigned, as a 4.9.8 broker's (an ACL master
    #: then lets a slave in only from a white-listed address). A secret: masked over the wire.
    inner_client_authentication_credentials: str = field(default="", metadata={"secret": True}, repr=False)
    rocketmq_home: str = field(default_factory=lambda: os.environ.get("ROCKETMQ_HOME", ""))
    # DLedger mode (enableDLegerCommitLog, with dLegerGroup, dLegerPeers, dLegerSelfId in the store's
    # keys): the member to hand leadership to, and DLedger's timings (DLedgerConfig's defaults, which
    # 4.9.8 leaves as they are; keys of ours, named as DLedgerConfig names them)
    preferred_leader_id: str = ""
    heart_beat_time_interval_ms: int = 2000
    max_heart_beat_leak: int = 3
    min_vote_interval_ms: int = 300
    max_vote_interval_ms: int = 1000
    max_wait_ack_time_ms: int = 2500
    #: A member started without its DLedger store (or vote file) votes and stands at once rather than
    #: abstaining until it caught up with a leader: for a group that lost a majority's stores, the
    #: operator's word that what the others hold is all there is (docs/dledger.md)
    vote_when_emptied: bool = False
    #: Replication on mutual TLS: the HA listener demands a client certificate its trust file verifies,
    #: and a slave presents one (`tls.client.*`, else the `tls.server.*` pair) and verifies the master's.
    ha_tls: bool = False
    #: In protected mode (ACL off, listening beyond loopback) without haTls, the hosts whose HA
    #: acknowledgements a SYNC_MASTER counts besides this machine's: RocketMQ address patterns as in
    #: ``globalWhiteRemoteAddresses`` (``10.0.0.7``, ``10.0.1.*``, ``10.0.2.{5,6}``), ``;``-separated.
    #: Empty: only slaves on this machine are counted (docs/replication.md §the-ha-gate).
    ha_white_remote_addresses: str = ""
    #: Why the broker listens where it does (the start-up line says it); not a setting.
    listen_why: str = field(default="", metadata={"internal": True}, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_sched_slice(self.sched_slice_micros)
        if self.loop_stack_millis < 0:
            raise ConfigError(f"loopStackMillis is 0 (off) or more, not {self.loop_stack_millis}")
        if self.grpc_max_connections < 1:
            raise ConfigError(
                f"grpcMaxConnections is at least 1, not {self.grpc_max_connections} "
                "(grpcEnable=false turns the gRPC front off)"
            )
        if self.grpc_max_telemetry_streams < 1:
            raise ConfigError(
                f"grpcMaxTelemetryStreams is at least 1, not {self.grpc_max_telemetry_streams} "
                "(grpcEnable=false turns the gRPC front off)"
            )
        check_choices(self.broker_role, self.flush_disk_type, self.delete_when)
        self.check_ports()  # at every read: a port past 65535 is no address for status to probe either
        self.listen_host, self.broker_ip1, why = resolve_listen(self.listen_host, self.broker_ip1)
        self.listen_why = self.listen_why or why
        self.inner_credentials()  # a malformed value fails the start, not the first signed request
        self.ha_white_matchers()

    def check_ports(self) -> None:
        """Every port key, and the HA port derived from ``listenPort``, within 0..65535."""
        check_port("listenPort", self.listen_port)
        check_port("haListenPort", self.ha_listen_port, unset=-1)
        check_port("metricsPort", self.metrics_port)
        check_port("grpcListenPort", self.grpc_listen_port)
        if self.ha_listen_port < 0 and self.listen_port:
            check_port("the HA port", self.ha_port, why=" (listenPort + 1): set haListenPort")

    def check_store_roles(self) -> None:
        """4.9.8's start-up rules (BrokerStartup, MessageStoreConfig): a slave's id is above 0, a master's
        is 0 (4.9.8 sets it; said in a WARNING here), ``diskMaxUsedSpaceRatio`` within 10..95 (4.9.8's
        getter clamps it; said too). A negative ``fileReservedTime``, which 4.9.8 takes as every file
        expired, is refused. DLedger members take their roles from the group, not from these keys.
        Checked by ``broker start`` and the broker, not at every read: ``broker status|stop`` reach a
        broker whose file an earlier version took (a slave with id 0), and a CLI read says no WARNING."""
        log = logging.getLogger(__name__)
        if not self.enable_dleger_commit_log:
            if self.broker_role == SLAVE and self.broker_id <= 0:
                raise ConfigError(
                    f"Slave's brokerId must be > 0 (brokerRole=SLAVE, brokerId={self.broker_id}), as 4.9.8 "
                    "refuses: 0 is the master's"
                )
            if self.broker_role != SLAVE and self.broker_id != 0:
                log.warning(
                    "brokerId=%d with brokerRole=%s: 0, as 4.9.8 sets every master's",
                    self.broker_id,
                    self.broker_role,
                )
                self.broker_id = 0
        check_reserved_time(self.file_reserved_time)
        self.disk_max_used_space_ratio = clamped_disk_ratio(self.disk_max_used_space_ratio)

    def ha_white_matchers(self) -> list[Callable[[str], bool]]:
        """`haWhiteRemoteAddresses` as matchers of a peer's IP; ConfigError for a malformed pattern."""
        from daemon.acl.plain import AclConfigError, address_matcher

        try:
            return [address_matcher(p) for p in self.ha_white_remote_addresses.split(";") if p.strip()]
        except AclConfigError as exc:
            raise ConfigError(f"haWhiteRemoteAddresses: {exc}") from None

    def inner_credentials(self) -> tuple[str, str] | None:
        """(access key, secret key) of :attr:`inner_client_authentication_credentials`; None when unset."""
        import json

        text = self.inner_client_authentication_credentials.strip()
        if not text:
            return None
        try:
            parsed = json.loads(text)
            access, secret = parsed["accessKey"], parsed["secretKey"]
        except (ValueError, KeyError, TypeError):
            parsed = access = secret = None
        if not isinstance(access, str) or not isinstance(secret, str) or not access or not secret:
            raise ConfigError(
                'innerClientAuthenticationCredentials is a JSON {"accessKey": "...", "secretKey": "..."}'
            )
        return access, secret

    @property
    def ip1(self) -> str:
        """``brokerIP1`` as a bare IP (``[fd00::2]`` -> ``fd00::2``): the store host of every message, the
        gRPC endpoints and the own-address checks take it so. 4.9.8 registers an IPv6 ``brokerIP1`` in
        brackets (``broker_addr``, ``ha_server_addr``), and a bracketed ``brokerIP1`` is accepted."""
        return self.broker_ip1.strip().removeprefix("[").removesuffix("]")

    @property
    def broker_addr(self) -> str:
        """The registered address (an IPv6 ``brokerIP1`` bracketed, as 4.9.8 registers it); the store host
        of every message is :attr:`ip1` with the port (docs/wire-protocol.md §message-ids)."""
        return f"{self.broker_ip1}:{self.listen_port}"

    @property
    def vip_port(self) -> int | None:
        """``listenPort - 2`` when the VIP port opens (see ``vip_listen_enable``), else None."""
        if not self.vip_listen_enable or self.listen_port <= 2:
            return None
        return self.listen_port - 2

    @property
    def ha_port(self) -> int:
        """The HA listener's port: ``haListenPort``, or ``listenPort + 1`` when unset (-1) as in 4.9.8."""
        return self.listen_port + 1 if self.ha_listen_port < 0 else self.ha_listen_port

    def derived(self) -> dict[str, tuple[str, str]]:
        """The settings left unset that the broker derives at start: key -> (the value it uses, from
        what). ``--print-config`` shows these values, not the unset marks (``haListenPort=-1`` read as a
        port), each under a comment saying it is derived."""
        out: dict[str, tuple[str, str]] = {}
        if self.ha_listen_port < 0:
            out["haListenPort"] = (
                ("0", "a free port, as listenPort is 0")
                if self.listen_port == 0
                else (str(self.ha_port), "listenPort + 1, as 4.9.8 does")
            )
        if not self.broker_ip2:
            out["brokerIP2"] = (self.broker_ip1, "brokerIP1's address")
        if not self.store_path_commit_log and not self.enable_dleger_commit_log:
            out["storePathCommitLog"] = (self.commit_log_dir, "commitlog under storePathRootDir")
        if not self.metrics_host and self.metrics_enable:
            out["metricsHost"] = (self.listen_host, "listenHost's address")
        return out

    @property
    def ha_server_addr(self) -> str:
        """``haServerAddr`` as registered: ``brokerIP2`` (else ``brokerIP1``) and the HA port."""
        return f"{self.broker_ip2 or self.broker_ip1}:{self.ha_port}"

    @property
    def config_path(self) -> str:
        """The file UPDATE_BROKER_CONFIG writes to: ``brokerConfigPath`` (the ``-c`` file), else
        ``<storePathRootDir>/config/broker.properties``, which the next start reads when given no ``-c``."""
        return self.broker_config_path or os.path.join(self.config_dir, "broker.properties")

    @property
    def namesrv_addrs(self) -> list[str]:
        return [a.strip() for a in self.namesrv_addr.split(";") if a.strip()]

    def store_config(self) -> StoreConfig:
        """The store's settings, taken from the keys both configs share."""
        return StoreConfig(**{f.name: getattr(self, f.name) for f in dataclasses.fields(StoreConfig)})


def check_choices(role: str, flush: str, delete_when: str) -> None:
    """brokerRole and flushDiskType are one of 4.9.8's enum names, spelt as they are (its valueOf refuses
    the start on any other); a typo ran on as a master ('slave') or as ASYNC_MASTER ('SYNC_MASTERR').
    deleteWhen is hours of the day separated by ';': 4.9.8 throws on any other at each cleanup, so time
    never came to delete."""
    if role not in (ASYNC_MASTER, SYNC_MASTER, SLAVE):
        raise ConfigError(f"brokerRole is ASYNC_MASTER, SYNC_MASTER or SLAVE, not {role!r}")
    if flush not in (ASYNC_FLUSH, SYNC_FLUSH):
        raise ConfigError(f"flushDiskType is ASYNC_FLUSH or SYNC_FLUSH, not {flush!r}")
    hours = [h.strip() for h in delete_when.rstrip(";").split(";")]  # Java's split drops trailing empties
    if not all(h.isdigit() and int(h) < 24 for h in hours):
        raise ConfigError(
            f"deleteWhen is hours of the day (0-23) separated by ';', like 04;16, not {delete_when!r}"
        )


def check_reserved_time(hours: int) -> None:
    """A negative ``fileReservedTime``, which 4.9.8 takes as every CommitLog file expired, is refused (at
    a start, and by an update that the next start would read)."""
    if hours < 0:
        raise ConfigError(f"fileReservedTime is hours to keep CommitLog files, 0 or more, not {hours}")


def clamped_disk_ratio(ratio: int) -> int:
    """``diskMaxUsedSpaceRatio`` within 10..95, as 4.9.8's getter clamps it, a WARNING saying so."""
    clamped = min(max(ratio, 10), 95)
    if clamped != ratio:
        logging.getLogger(__name__).warning(
            "diskMaxUsedSpaceRatio=%d: %d, as 4.9.8 clamps it to 10..95", ratio, clamped
        )
    return clamped


def check_sched_slice(micros: int) -> None:
    """``schedSliceMicros`` within the kernel's bounds, or 0; a start, or an update that the next start
    would read, refuses any other value."""
    if micros and not MIN_SLICE_US <= micros <= MAX_SLICE_US:
        raise ConfigError(
            f"schedSliceMicros is 0 or {MIN_SLICE_US}-{MAX_SLICE_US} (the kernel's bounds), not {micros}"
        )


def _true(raw: str) -> bool:
    """Java's ``Boolean.parseBoolean``."""
    return raw.strip().lower() == "true"


def _future_ms(raw: str) -> bool:
    try:
        return int(raw.strip()) > time.time() * 1000
    except ValueError:
        return False


#: Accepted-but-inert keys that, away from 4.9.8's default, change where data lives or who takes writes
#: key -> (is the value one that matters, what 4.9.8 would do that this broker would not). Ignoring one
#: would run another system than the file describes, so the broker refuses to start instead. Keys with
#: no effect unless another is set (``dLegerGroup``, ``dLegerPeers``, ``dLegerSelfId``,
#: ``storePathDLedgerCommitLog``, ``preferredLeaderId``, ``isEnableBatchPush``: DLedger mode) are
#: inert in 4.9.8 too without it.
SEMANTIC_INERT_KEYS: dict[str, tuple[Callable[[str], bool], str]] = {
    "readOnlyCommitLogStorePaths": (
        lambda raw: bool(raw.strip()),
        "the CommitLog directories named there would not be read",
    ),
    "messageStorePlugIn": (lambda raw: bool(raw.strip()), "the store plug-ins named there would not run"),
    "enableConsumeQueueExt": (
        _true,
        "ConsumeQueue units would not point into consumequeue_ext, as 4.9.8's do with it on",
    ),
    "enableLmq": (_true, "light message queues would get no units"),
    "enableMultiDispatch": (
        _true,
        "messages would not be dispatched to the queues named in INNER_MULTI_DISPATCH",
    ),
    "fetchNamesrvAddrByAddressServer": (
        _true,
        "the NameServers would not be fetched from the address server: clients would not find this broker",
    ),
    "startAcceptSendRequestTimeStamp": (_future_ms, "sends would be taken before that time"),
}


def refuse_inert_semantics(config: RocketMQKeys) -> None:
    """Raise :class:`ConfigError` naming each key of ``SEMANTIC_INERT_KEYS`` set to a value that matters."""
    values = dict(config.inert_keys())
    for f in dataclasses.fields(config):  # a key the store implements (the DLedger CommitLog) counts too
        if property_key(f) in SEMANTIC_INERT_KEYS:
            value = getattr(config, f.name)
            values[property_key(f)] = str(value).lower() if isinstance(value, bool) else str(value)
    bad = [
        f"{key}={values[key]} ({why})"
        for key, (matters, why) in SEMANTIC_INERT_KEYS.items()
        if key in values and matters(values[key])
    ]
    if bad:
        raise ConfigError(
            "refusing to start: mqctl accepts but does not act on "
            + "; ".join(bad)
            + ". Remove each or set it to RocketMQ's default"
        )


def load_broker_config(file: Path | None, overrides: Mapping[str, object]) -> BrokerConfig:
    """Defaults -> ``file`` (else the store's own broker.properties, if UPDATE_BROKER_CONFIG wrote one)
    -> ``MQCTL_*`` environment -> ``overrides`` (flags)."""
    if file is not None:
        return load_config(
            BrokerConfig, file, overrides={**overrides, "broker_config_path": str(file.resolve())}
        )
    config = load_config(BrokerConfig, overrides=overrides)
    saved = Path(config.config_path)
    return load_config(BrokerConfig, saved, overrides=overrides) if saved.is_file() else config
