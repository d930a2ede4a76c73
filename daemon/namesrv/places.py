"""Who held each broker place (broker name, id) at a NameServer, kept across its restarts: a restart
forgot it, and a peer off the machine that registered a place first then kept it from the real broker
(docs/security.md §protected-mode)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from pathlib import Path

from daemon.config import write_atomically

log = logging.getLogger(__name__)

#: How long a change waits for others before the file is written: at most one write a second.
WRITE_DELAY_S = 1.0

Places = dict[tuple[str, int], str]


class PlacesFile:
    """The place -> registering host map in ``path`` (a JSON list), written atomically at most once a
    second after a change, from ``snapshot``."""

    def __init__(self, path: Path, snapshot: Callable[[], Places]) -> None:
        self.path = path
        self._snapshot = snapshot
        self._timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None

    def load(self) -> Places:
        """The places the file names; none when it is missing or unreadable (a WARNING says which)."""
        try:
            rows = json.loads(self.path.read_bytes())
            return {(str(r["brokerName"]), int(r["brokerId"])): str(r["host"]) for r in rows}
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, TypeError, KeyError) as exc:
            log.warning("%s: broker places not read (%s); none reserved at start", self.path, exc)
            return {}

    def changed(self) -> None:
        """Write the file about a second from now, with whatever changed meanwhile (no loop: no write)."""
        if self._timer is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._timer = loop.call_later(WRITE_DELAY_S, self._start_write)

    def _start_write(self) -> None:
        self._timer = None
        self._task = asyncio.get_running_loop().create_task(self._write())

    async def _write(self) -> None:
        rows = [{"brokerName": n, "brokerId": i, "host": h} for (n, i), h in self._snapshot().items()]
        try:
            await asyncio.to_thread(write_atomically, self.path, json.dumps(rows).encode())
        except OSError as exc:
            log.warning("%s: broker places not written: %s", self.path, exc)

    async def close(self) -> None:
        """Write what is pending now (the NameServer stops)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
            await self._write()
        if self._task is not None:
            await self._task
