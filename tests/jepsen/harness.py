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
from tests.jepsen.nodes import Nemesis, Node
from tests.jepsen.proxy import Proxy
from tests.support.namesrv import namesrv_config
from tests.support.waiting import wait_until


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

    def members(self) -> list[Node]:
        """The broker processes of the run (a group's richer form says which)."""
        return []

    def acked(self) -> int:
        """SEND_OKs the run's producers received (a group's richer form counts them)."""
        raise NotImplementedError

    def evidence(self, chars: int = 1500) -> str:
        """What a failed wait of this run shows: the history's outcomes and the tail of each member's log."""
        tails = "".join(f"\n--- {n.name} ({n.addr}):\n{n.log_tail(chars)}" for n in self.members())
        return self.history.outcomes() + tails

    async def acked_at_least(self, count: int, timeout: float = 30.0) -> None:
        """Wait for ``count`` SEND_OKs in all; a failure shows the :meth:`evidence`."""
        await wait_until(lambda: self.acked() >= count, timeout, self.evidence)


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
