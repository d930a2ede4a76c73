"""NameServer settings: RocketMQ's `namesrv.properties` keys, snake_cased, plus mqctl's own."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from daemon.remoting.limits import RemotingLimits

#: Keys UPDATE_NAMESRV_CONFIG may never change remotely (they name files on the server).
BUILTIN_BLACK_LIST = ("configBlackList", "configStorePath", "kvConfigPath", "rocketmqHome")


@dataclass
class NamesrvConfig(RemotingLimits):
    """Every field loads from its camelCase key, `MQCTL_<FIELD>` or a flag (see daemon.config);
    the `remotingMax*` keys come from `RemotingLimits`."""

    # RocketMQ NamesrvConfig
    rocketmq_home: str = ""
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
    listen_host: str = "0.0.0.0"
    data_dir: Path | None = None  # default: ~/namesrv, RocketMQ's home of kvConfig.json
    scan_interval_ms: int = field(default=10_000, metadata={"key": "scanNotActiveBrokerInterval"})
    broker_expire_ms: int = 120_000
    #: KV caps (PUT_KV_CONFIG over one answers SYSTEM_ERROR): one value, one namespace, everything.
    kv_config_max_value_bytes: int = 64 * 1024
    kv_config_max_namespace_bytes: int = 4 * 1024 * 1024
    kv_config_max_total_bytes: int = 16 * 1024 * 1024
    #: ACL on the write codes (daemon.acl.plain.NAMESRV_WRITE_CODES); reads stay open to every client.
    acl_enable: bool = False
    acl_file_path: str = ""

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
