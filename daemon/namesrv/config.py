"""NameServer settings: RocketMQ's `namesrv.properties` keys, snake_cased, plus mqctl's own."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from daemon.config import RocketMQKeys, check_port
from daemon.remoting.limits import RemotingLimits
from daemon.remoting.tls import TlsConfig
from daemon.rocketmq_keys import NETTY_SERVER_KEYS

#: Keys UPDATE_NAMESRV_CONFIG may never change remotely (they name files on the server).
BUILTIN_BLACK_LIST = ("configBlackList", "configStorePath", "kvConfigPath", "rocketmqHome")


#: RocketMQ 4.9.8's NamesrvConfig keys and defaults; every one is implemented by a field below.
NAMESRV_KEYS: dict[str, str] = {
    "rocketmqHome": os.environ.get("ROCKETMQ_HOME", ""),
    "kvConfigPath": str(Path.home() / "namesrv" / "kvConfig.json"),
    "configStorePath": str(Path.home() / "namesrv" / "namesrv.properties"),
    "productEnvName": "center",
    "clusterTest": "false",
    "orderMessageEnable": "false",
    "configBlackList": "configBlackList;configStorePath;kvConfigPath",
}


@dataclass
class NamesrvConfig(RemotingLimits, TlsConfig, RocketMQKeys):
    """Every field loads from its camelCase key, `MQCTL_<FIELD>` or a flag (see daemon.config);
    the `remotingMax*` keys come from `RemotingLimits`, the `tls.*` keys from `TlsConfig`. RocketMQ's NettyServerConfig keys we do not
    act on load and report as accepted-but-inert."""

    ROCKETMQ_DEFAULTS: ClassVar[Mapping[str, str]] = {
        **NAMESRV_KEYS,
        **NETTY_SERVER_KEYS,
        "listenPort": "9876",
    }

    # RocketMQ NamesrvConfig
    rocketmq_home: str = field(default_factory=lambda: os.environ.get("ROCKETMQ_HOME", ""))
    kv_config_path: Path | None = None  # default: <data_dir>/kvConfig.json
    config_store_path: Path | None = None  # default: <data_dir>/namesrv.properties
    product_env_name: str = "center"
    cluster_test: bool = False
    order_message_enable: bool = False
    config_black_list: str = "configBlackList;configStorePath;kvConfigPath"
    # RocketMQ NettyServerConfig
    listen_port: int = 9876
    server_channel_max_idle_time_seconds: int = 120
    # mqctl
    #: Loopback unless told otherwise (RocketMQ's NameServer binds every interface).
    listen_host: str = "127.0.0.1"
    #: With ACL off and a listener beyond loopback, refuse writes from other machines (daemon.protect).
    protected_mode: bool = True
    data_dir: Path | None = None  # default: ~/namesrv, RocketMQ's home of kvConfig.json
    scan_interval_ms: int = field(default=10_000, metadata={"key": "scanNotActiveBrokerInterval"})
    broker_expire_ms: int = 120_000
    #: KV caps (PUT_KV_CONFIG over one answers SYSTEM_ERROR): one value, one namespace, everything.
    kv_config_max_value_bytes: int = 64 * 1024
    kv_config_max_namespace_bytes: int = 4 * 1024 * 1024
    kv_config_max_total_bytes: int = 16 * 1024 * 1024
    #: Route entries (a topic on a broker, or a broker address) registrations may make the NameServer
    #: hold: past it, a registration adding entries is refused (SYSTEM_ERROR). About 120 bytes each.
    route_max_queue_datas: int = 2_000_000
    #: ACL on the write codes (daemon.acl.plain.NAMESRV_WRITE_CODES); reads stay open to every client.
    acl_enable: bool = False
    acl_file_path: str = ""
    #: Seconds an admin request's signed timestamp may be old; each nonce is taken once (0: not asked,
    #: as mqadmin signs none). Against replayed admin requests (daemon.acl.plain).
    acl_admin_freshness: int = 0

    def __post_init__(self) -> None:
        check_port("listenPort", self.listen_port)
        # report the files in use, as Java does (`${user.home}/namesrv/kvConfig.json`), not an empty key
        self.kv_config_path = self.kv_config_file
        self.config_store_path = self.config_store_file

    @property
    def home(self) -> Path:
        """Directory of the state files (KV store, pidfile, log)."""
        return self.data_dir or Path.home() / "namesrv"

    @property
    def kv_config_file(self) -> Path:
        return self.kv_config_path or self.home / "kvConfig.json"

    @property
    def config_store_file(self) -> Path:
        return self.config_store_path or self.home / "namesrv.properties"

    def black_list(self) -> set[str]:
        return set(BUILTIN_BLACK_LIST) | {k.strip() for k in self.config_black_list.split(";") if k.strip()}
