"""Our real broker (and NameServer) with a simulated disk: the store's ``DiskUsage`` seam is swapped for a
:class:`FakeDiskUsage` through the broker's ``store_factory`` test hook, never through configuration."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from daemon.broker.config import BrokerConfig
from store.api import MessageStore
from store.cleanup import FakeDiskUsage
from store.engine import DefaultMessageStore
from tests.daemons import LocalCluster, handle, local_cluster
from tests.support.broker import BrokerHandle

FILE_SIZE = 64 * 1024
HOUR_MS = 3_600_000

#: Small files and a fast clean service; deleteWhen set to an hour that is never now (tests run well
#: inside one hour, so only the watermarks and manual triggers can start a deletion).
RETENTION_OVERRIDES: dict[str, Any] = {
    "mapped_file_size_commit_log": FILE_SIZE,
    "mapped_file_size_consume_queue": 20 * 100,
    "clean_resource_interval": 100,
    "delete_commit_log_files_interval": 0,
}


def other_hour() -> str:
    return f"{(time.localtime().tm_hour + 12) % 24:02d}"


def simulated_store(disk: FakeDiskUsage) -> Callable[[BrokerConfig], DefaultMessageStore]:
    """The test hook: the broker's real store, with the simulated disk and its first cleanup run at once."""

    def factory(config: BrokerConfig) -> DefaultMessageStore:
        return DefaultMessageStore(
            config.store_config(),
            store_host=(config.broker_ip1, config.listen_port),
            disk_usage=disk,
            clean_start_delay_ms=0,
        )

    return factory


@dataclass
class RetentionCluster:
    cluster: LocalCluster
    disk: FakeDiskUsage
    client: BrokerHandle
    runs: list[int] = field(default_factory=lambda: [0])  # cleanup runs completed since the start

    def count_cleanup_runs(self) -> None:
        """Count the broker cleaner's runs (its loop looks ``run_once`` up on each pass)."""
        cleaner = getattr(self.cluster.broker.store, "cleaner", None)
        if cleaner is None:  # another store (the in-memory one) runs no cleaner
            return
        run_once = cleaner.run_once

        def counted(now_ms: int) -> int:
            try:
                return run_once(now_ms)
            finally:
                self.runs[0] += 1

        cleaner.run_once = counted  # type: ignore[method-assign]

    def after_cleanup_runs(self, n: int = 3) -> None:
        """Return once the cleaner has finished ``n`` more runs: "several runs changed nothing" is then
        an event the test waits for, not a sleep a loaded machine can cut short."""
        target = self.runs[0] + n
        wait_until(lambda: self.runs[0] >= target)

    @property
    def store(self) -> DefaultMessageStore:
        store = self.cluster.broker.store
        assert isinstance(store, DefaultMessageStore)
        return store

    @property
    def root(self) -> Path:
        return Path(self.store.config.store_path_root_dir)

    def run(self, coro: Any) -> Any:
        return self.cluster.loop.run(coro)

    def send(self, topic: str, n: int, *, size: int = 1000, keys: str | None = None) -> None:
        for i in range(n):
            resp = self.run(self.client.send(topic, bytes([65 + i % 26]) * size, queue_id=i % 2, keys=keys))
            assert resp.code == 0, resp.remark

    def commitlog_files(self) -> list[str]:
        return sorted(os.listdir(self.root / "commitlog"))

    def age_all_but_last(self, hours: float) -> None:
        """Flush, then set the mtime of every full CommitLog file ``hours`` into the past."""
        store = self.store
        wait_until(lambda: store.flushed_phy_offset >= store.max_phy_offset)
        when = time.time() - hours * 3600
        for name in self.commitlog_files()[:-1]:
            os.utime(self.root / "commitlog" / name, (when, when))


def wait_until(cond: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.02)


@contextmanager
def retention_cluster(
    root: Path,
    disk: FakeDiskUsage,
    store_factory: Callable[[BrokerConfig], MessageStore] | None = None,
    **overrides: Any,
) -> Iterator[RetentionCluster]:
    """NameServer + broker like :func:`tests.daemons.local_cluster`, on the simulated disk (or another store)."""
    values = {**RETENTION_OVERRIDES, "delete_when": other_hour(), **overrides}
    with local_cluster(root, store_factory or simulated_store(disk), **values) as cluster:
        client = handle(cluster)
        rc = RetentionCluster(cluster, disk, client)
        rc.count_cleanup_runs()
        try:
            yield rc
        finally:
            cluster.loop.run(client.client.close())
