"""A follower's tick: it waits `FOLLOWER_TICK_SECONDS` between ticks (it only watches for its leader's
silence and dispatches what pushes committed), and a role taken from a read (a transferee's candidacy)
ends that wait at once, so the new role ticks as often as it needs. In this process: a follower's DLedger
server over a real log, its tick task run on the test's loop."""

from __future__ import annotations

import asyncio
from pathlib import Path

from daemon.dledger.machines import Role, Timings
from daemon.dledger.server import DLedgerServer, DLedgerSettings, now_ms
from store.dledger_log import DLedgerLog

PEERS = {"n0": "127.0.0.1:1", "n1": "127.0.0.1:2", "n2": "127.0.0.1:3"}


async def test_a_follower_waits_its_long_tick_and_a_new_role_ends_the_wait(tmp_path: Path) -> None:
    follower_log = DLedgerLog(str(tmp_path / "n1"))
    server = DLedgerServer(
        DLedgerSettings("g", "n1", dict(PEERS), str(tmp_path / "n1"), Timings()), follower_log
    )
    server.gate.resolve()
    server.node.m.term = 1
    server.node._now = now_ms()  # (its leader's last heartbeat: now)
    server.node.to_follower(1, "n0")
    server._effects()
    server._task = asyncio.create_task(server._run())
    try:
        for _ in range(3):
            await asyncio.sleep(0)
        waiting = server._tick_wait
        assert waiting is not None and not waiting.done()  # a follower's wait, not the 10 ms sleep
        server.node.to_candidate(1)  # as a transferee's take-leadership does, from a read
        server._effects()
        assert waiting.done()  # the candidate's tick runs now, not at the follower's next
        for _ in range(3):
            await asyncio.sleep(0)
        assert server.node.m.role is Role.CANDIDATE and server._tick_wait is None
    finally:
        await server.stop()
        follower_log.close()
