"""What every Jepsen run shares: a NameServer in this process, the history, the nemesis, the proxy and
an admin client; the history is written to ``history.jsonl`` in the test's directory at the end."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from daemon.namesrv.controller import NamesrvController
from daemon.remoting.client import RemotingClient
from tests.jepsen.history import History
from tests.jepsen.nodes import Nemesis
from tests.jepsen.proxy import Proxy
from tests.support.namesrv import namesrv_config


@dataclass
class Run:
    history: History
    nemesis: Nemesis
    proxy: Proxy
    client: RemotingClient
    namesrv: str

    def parts(self) -> tuple[History, Nemesis, Proxy, RemotingClient, str]:
        """The fields in order, to build a run's richer form (a group of brokers) from."""
        return self.history, self.nemesis, self.proxy, self.client, self.namesrv


@contextlib.asynccontextmanager
async def jepsen_run(tmp_path: Path) -> AsyncIterator[Run]:
    namesrv = NamesrvController(namesrv_config(tmp_path))
    await namesrv.start()
    history = History()
    run = Run(history, Nemesis(history), Proxy(), RemotingClient(), f"127.0.0.1:{namesrv.port}")
    try:
        yield run
    finally:
        history.dump(tmp_path / "history.jsonl")
        await run.proxy.close()
        await run.client.close()
        await namesrv.stop()


class Client(Protocol):
    async def run(self, stop: asyncio.Event) -> None: ...


@contextlib.asynccontextmanager
async def running(clients: Iterable[Client]) -> AsyncIterator[None]:
    """The clients (producers, observers: anything with ``run(stop)``) run inside the block and are
    stopped, their operations in hand completed, at its end."""
    stop = asyncio.Event()
    tasks = [asyncio.create_task(c.run(stop)) for c in clients]
    try:
        yield
    finally:
        stop.set()
        await asyncio.gather(*tasks)
