"""Typed store configuration; field names are the snake_case of RocketMQ's MessageStoreConfig keys."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Final

ASYNC_FLUSH = "ASYNC_FLUSH"
SYNC_FLUSH = "SYNC_FLUSH"
ASYNC_MASTER: Final = "ASYNC_MASTER"
SYNC_MASTER: Final = "SYNC_MASTER"
SLAVE: Final = "SLAVE"
DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


@dataclass
class StoreConfig:
    """Store settings with RocketMQ 4.9.8 defaults (docs/store-format.md §defaults).

    Deliberate difference: ``message_index_safe`` defaults to ``True`` so that abnormal recovery
    re-indexes everything after the last full index file; RocketMQ's ``false`` loses key lookups of
    messages written shortly before a crash (docs/store-format.md §index-recovery).
    """

    store_path_root_dir: str = os.path.join(os.path.expanduser("~"), "store")
    store_path_commit_log: str = ""  # empty: <root>/commitlog
    mapped_file_size_commit_log: int = 1024 * 1024 * 1024
    mapped_file_size_consume_queue: int = 300_000 * 20
    max_hash_slot_num: int = 5_000_000
    max_index_num: int = 5_000_000 * 4
    max_msgs_num_batch: int = 64
    message_index_enable: bool = True
    message_index_safe: bool = True
    max_message_size: int = 1024 * 1024 * 4
    #: RocketMQ spells the key checkCRCOnRecover (a camelCase of the name would be checkCrcOnRecover).
    check_crc_on_recover: bool = field(default=True, metadata={"key": "checkCRCOnRecover"})
    flush_disk_type: str = ASYNC_FLUSH
    # 4.9.8's key and default. On, a thread writes zeros into the CommitLog ahead of the writer so that its
    # first stores into each page do not fault with the GIL held; measured under ali-ons, those zeros cost
    # more CPU per message than the faults they save the loop thread (docs/performance.md), so it is off
    # unless asked for (blocks are reserved with fallocate either way: a full disk is no SIGBUS).
    warm_maped_file_enable: bool = False
    flush_interval_commit_log: int = 500
    flush_commit_log_least_pages: int = 4
    flush_commit_log_thorough_interval: int = 10_000
    sync_flush_timeout: int = 5_000
    flush_interval_consume_queue: int = 1_000
    flush_consume_queue_least_pages: int = 2
    flush_consume_queue_thorough_interval: int = 60_000
    max_transfer_bytes_on_message_in_memory: int = 256 * 1024
    max_transfer_count_on_message_in_memory: int = 32
    message_delay_level: str = DEFAULT_DELAY_LEVELS
    # Cleanup (docs/store-format.md §cleanup). The two ratios are JVM system properties in 4.x and config keys
    # in 5.x (percent).
    file_reserved_time: int = 72
    delete_when: str = "04"
    disk_max_used_space_ratio: int = 75
    disk_space_warning_level_ratio: int = 90
    # Above it, unexpired files are deleted too (and the unconsumed messages lost are logged at ERROR).
    # Two ways to turn that off: ``cleanFileForciblyEnable=false`` (4.9.8's key), or a ratio of 100 or more
    # (never exceeded: 4.9.8 takes the JVM property as given, 5.x clamps its key to 30..85; we do not).
    disk_space_clean_forcibly_ratio: int = 85
    clean_file_forcibly_enable: bool = True
    clean_resource_interval: int = 10_000
    delete_commit_log_files_interval: int = 100
    # HA (docs/replication.md §roles-and-ports); Java keeps these in MessageStoreConfig too. haListenPort -1:
    # listenPort + 1.
    broker_role: str = ASYNC_MASTER
    ha_listen_port: int = -1
    ha_master_address: str = ""
    ha_send_heartbeat_interval: int = 5_000
    ha_housekeeping_interval: int = 20_000
    ha_transfer_batch_size: int = 32 * 1024
    ha_slave_fallbehind_max: int = 256 * 1024 * 1024
    slave_timeout: int = 3_000
    # DLedger mode (4.9.8's MessageStoreConfig keys): the CommitLog lives in DLedger's files under
    # <root>/dledger-<dLegerSelfId>/ (data/ there unless storePathDLedgerCommitLog names another place).
    enable_dleger_commit_log: bool = field(default=False, metadata={"key": "enableDLegerCommitLog"})
    store_path_dledger_commit_log: str = field(default="", metadata={"key": "storePathDLedgerCommitLog"})
    dleger_group: str = field(default="", metadata={"key": "dLegerGroup"})
    dleger_peers: str = field(default="", metadata={"key": "dLegerPeers"})
    dleger_self_id: str = field(default="", metadata={"key": "dLegerSelfId"})

    @property
    def commit_log_dir(self) -> str:
        return self.store_path_commit_log or os.path.join(self.store_path_root_dir, "commitlog")

    @property
    def consume_queue_dir(self) -> str:
        return os.path.join(self.store_path_root_dir, "consumequeue")

    @property
    def index_dir(self) -> str:
        return os.path.join(self.store_path_root_dir, "index")

    @property
    def config_dir(self) -> str:
        return os.path.join(self.store_path_root_dir, "config")

    @property
    def consume_queue_file_size(self) -> int:
        """Effective ConsumeQueue file size: rounded up to whole 20-byte units
        (docs/store-format.md §file-names-and-sizes)."""
        return -(-self.mapped_file_size_consume_queue // 20) * 20

    @property
    def sync_flush(self) -> bool:
        return self.flush_disk_type == SYNC_FLUSH

    def delay_levels_ms(self) -> list[int]:
        """``message_delay_level`` parsed: index ``L - 1`` holds the delay of level ``L`` in ms
        (docs/store-format.md §delay-levels)."""
        out = []
        for item in self.message_delay_level.split():
            out.append(int(item[:-1]) * _UNIT_MS[item[-1]])
        return out
