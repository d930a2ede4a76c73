"""Our real NameServer and Broker on 127.0.0.1, port 0, running in a background event loop.

CLI tests run ``mqctl`` in a subprocess against them over TCP; the daemons live in the test
process so a test can also look at their state directly.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from daemon.broker.broker import Broker
from daemon.broker.config import BrokerConfig
from daemon.namesrv.config import NamesrvConfig
from daemon.namesrv.controller import NamesrvController
from daemon.remoting.client import RemotingClient
from store.api import MessageStore
from tests.support.broker import BrokerHandle, broker_config

T = TypeVar("T")


class LoopThread:
    """An asyncio loop in a daemon thread; ``run`` executes a coroutine on it and waits."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="daemons", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


@dataclass
class LocalCluster:
    loop: LoopThread
    namesrv: NamesrvController
    broker: Broker

    @property
    def namesrv_addr(self) -> str:
        return f"127.0.0.1:{self.namesrv.port}"

    @property
    def broker_addr(self) -> str:
        return self.broker.addr


@contextmanager
def local_cluster(
    root: Path,
    store_factory: Callable[[BrokerConfig], MessageStore] | None = None,
    namesrv_overrides: dict[str, Any] | None = None,
    **broker_overrides: Any,
) -> Iterator[LocalCluster]:
    """A NameServer and one registered Broker (cluster DefaultCluster, broker-a) under ``root``;
    ``store_factory`` is the broker's test hook for another store (e.g. a simulated disk);
    ``namesrv_overrides`` are NameServer settings (by field name)."""
    loop = LoopThread()
    namesrv = NamesrvController(
        NamesrvConfig(
            listen_host="127.0.0.1", listen_port=0, data_dir=root / "namesrv", **(namesrv_overrides or {})
        )
    )
    loop.run(namesrv.start())
    config = broker_config(root / "broker", namesrv_addr=f"127.0.0.1:{namesrv.port}", **broker_overrides)
    broker = Broker(config, store_factory=store_factory)
    try:
        loop.run(broker.start())
        yield LocalCluster(loop, namesrv, broker)
    finally:
        loop.run(broker.stop())
        loop.run(namesrv.stop())
        loop.close()


def tls_only(certs: dict[str, Path]) -> dict[str, Any]:
    """A listener's settings (by field name) to serve TLS alone on ``write_local_ca``'s server certificate."""
    return {
        "tls_server_mode": "enforcing",
        "tls_server_cert_path": str(certs["server_cert"]),
        "tls_server_key_path": str(certs["server_key"]),
        "tls_test_mode_enable": False,
    }


@contextmanager
def namesrv_alone(root: Path, certs: dict[str, Path] | None = None, **overrides: Any) -> Iterator[str]:
    """A NameServer with no broker under ``root``, on a loop thread of its own; its address. ``certs``
    (``write_local_ca``'s): its listener serves their server certificate (``tls_server_mode`` enforcing
    unless ``overrides`` say otherwise); ``overrides``: more settings by field name."""
    if certs is not None:
        overrides = {**tls_only(certs), **overrides}
    loop = LoopThread()
    namesrv = NamesrvController(
        NamesrvConfig(listen_host="127.0.0.1", listen_port=0, data_dir=root / "namesrv", **overrides)
    )
    loop.run(namesrv.start())
    try:
        yield f"127.0.0.1:{namesrv.port}"
    finally:
        loop.run(namesrv.stop())
        loop.close()


def handle(cluster: LocalCluster) -> BrokerHandle:
    """A wire-protocol client to the cluster's broker, living on the daemons' loop."""
    client = cluster.loop.run(_new_client())
    return BrokerHandle(cluster.broker.addr, client, cluster.broker)


async def _new_client() -> RemotingClient:
    return RemotingClient()
