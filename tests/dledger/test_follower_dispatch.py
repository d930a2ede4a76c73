"""A follower's dispatch of what its pushes commit: once enough entries wait, else at its next tick, not
once per push (each dispatch pays its set-up whatever it carries). In this process: a follower's DLedger
server over a real log, binary pushes handed to its listener's connection as frames, its dispatch counted."""

from __future__ import annotations

import asyncio
from pathlib import Path

from daemon.dledger.machines import Timings
from daemon.dledger.protocol import (
    BINARY_PUSH_CODE,
    PushEntryRequest,
    binary_push_fields,
    decode_push_answer,
)
from daemon.dledger.server import FOLLOWER_DISPATCH_ENTRIES, DLedgerServer, DLedgerSettings, now_ms
from daemon.remoting.command import RemotingCommand
from daemon.remoting.connection import Connection
from daemon.remoting.frame import decode_frame, encode_command
from store.dledger_log import DLedgerLog
from tests.store.test_dledger_log import _fill
from tests.support.transport import RecordingTransport

PEERS = {"n0": "127.0.0.1:1", "n1": "127.0.0.1:2", "n2": "127.0.0.1:3"}


def _push(leader: DLedgerLog, first: int, count: int, opaque: int) -> bytes:
    """The leader's binary push of entries ``first``.. (committed up to the one before), as a frame."""
    got = leader.raw_entries(first, count, 1 << 20)
    assert got is not None and got[0] == count
    req = PushEntryRequest(group="g", leader_id="n0", local_id="n0", remote_id="n1", term=1)
    req.commit_index = first + count - 1
    cmd = RemotingCommand.request(BINARY_PUSH_CODE, binary_push_fields(req, first, count), got[1])
    cmd.opaque = opaque
    return encode_command(cmd)


async def test_a_follower_dispatches_at_its_tick_or_once_enough_entries_wait(tmp_path: Path) -> None:
    leader = DLedgerLog(str(tmp_path / "leader"))
    total = 2 * FOLLOWER_DISPATCH_ENTRIES
    _fill(leader, total)
    follower_log = DLedgerLog(str(tmp_path / "follower"))
    dispatched: list[int] = []
    server = DLedgerServer(
        DLedgerSettings("g", "n1", dict(PEERS), str(tmp_path / "follower"), Timings()),
        follower_log,
        on_commit=lambda: dispatched.append(follower_log.committed_index),
    )
    server.gate.resolve()
    server.node.m.term = 1
    server.node._now = now_ms()  # (its leader's last heartbeat: now)
    server.node.to_follower(1, "n0")
    conn = server.server.accept()
    assert isinstance(conn, Connection)
    transport = RecordingTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    try:
        # pushes of 2 entries each, every one committing what it carries: answered at once, nothing dispatched
        pushes = (FOLLOWER_DISPATCH_ENTRIES - 2) // 2
        for n in range(pushes):
            conn.data_received(_push(leader, 2 * n, 2, n + 1))
            await asyncio.sleep(0)  # (a loop turn: what a push scheduled runs)
            await asyncio.sleep(0)
        assert len(transport.writes) == pushes and dispatched == []
        for n, frame in enumerate(transport.writes):
            cmd, _ = decode_frame(frame, 0)  # type: ignore[misc]
            answer = decode_push_answer(cmd.body, "g")
            assert (answer.code, answer.index, answer.count) == (200, 2 * n, 2)
        assert follower_log.committed_index == 2 * pushes - 1
        # the tick dispatches what waits, in one call
        server._send(server.node.tick(now_ms()))
        server._effects()
        await asyncio.sleep(0)
        assert dispatched == [2 * pushes - 1]
        # the push that leaves FOLLOWER_DISPATCH_ENTRIES committed entries waiting dispatches them at once
        first = 2 * pushes
        for n in range(FOLLOWER_DISPATCH_ENTRIES // 2):
            assert dispatched == [first - 1]
            conn.data_received(_push(leader, first + 2 * n, 2, pushes + n + 1))
            await asyncio.sleep(0)
            await asyncio.sleep(0)
        assert dispatched == [first - 1, first + FOLLOWER_DISPATCH_ENTRIES - 1]
        assert server.node.m.leader_id == "n0"  # (still following: every push was taken)
    finally:
        await server.server.stop(grace=0)
        await server.client.close()
        leader.close()
        follower_log.close()
