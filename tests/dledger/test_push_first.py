"""A leader's round writes the push of its new sends before the rest of what it writes: the replies of the
sends an earlier answer committed, and the dispatch of what it committed. In this process: a leader's DLedger
server over a real log, its followers' and a producer's connections on recording transports."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest

from daemon.broker.processors.send import SendProcessor
from daemon.dledger.machines import PushState, Timings
from daemon.dledger.protocol import DLedgerRequestCode
from daemon.dledger.server import DLedgerServer, DLedgerSettings, now_ms
from daemon.remoting.codes import RequestCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.connection import Connection, RequestDispatcher
from daemon.remoting.frame import decode_frame
from store.dledger_log import DLedgerLog
from tests.store.test_dledger_log import _fill
from tests.support.transport import RecordingTransport

PEERS = {"n0": "127.0.0.1:1", "n1": "127.0.0.1:2", "n2": "127.0.0.1:3"}


class Ordered(RecordingTransport):
    """Records each write as (who, request code or "reply") in one list shared by every transport."""

    def __init__(self, who: str, order: list[tuple[str, object]]) -> None:
        super().__init__()
        self.who, self.order = who, order

    def write(self, data: bytes) -> None:
        super().write(data)
        decoded = decode_frame(data, 0)
        assert decoded is not None
        cmd = decoded[0]
        self.order.append((self.who, "reply" if cmd.is_response else cmd.code))


def leader(tmp_path: Path, order: list[tuple[str, object]]) -> tuple[DLedgerServer, DLedgerLog]:
    """Member n0 leading term 1, its followers' connections recorded, both pushed to from entry 0."""
    log_ = DLedgerLog(str(tmp_path / "leader"))
    server = DLedgerServer(DLedgerSettings("g", "n0", dict(PEERS), str(tmp_path / "leader"), Timings()), log_)
    server.gate.resolve()
    node = server.node
    node.m.term = 1
    node._now = now_ms()
    node.to_leader(1)
    node.last_send_beat = now_ms()  # (no heartbeat round in the way)
    for peer in ("n1", "n2"):
        conn = Connection(RequestDispatcher(), requester=True)
        conn.connection_made(Ordered(peer, order))  # type: ignore[arg-type]
        server.client._connections[PEERS[peer]] = conn
        push = node.pushes[peer]
        push.state, push.write_index = PushState.APPEND, 0
    return server, log_


async def close(server: DLedgerServer, log_: DLedgerLog) -> None:
    server._stopped = True
    for conn in server.client._connections.values():
        conn.connection_lost(None)  # (a recording transport never reports it)
    await server.server.stop(grace=0)
    await server.client.close()
    log_.close()


@pytest.mark.pure_python  # (a stand-in for the broker the compiled processor would refuse)
async def test_the_rounds_push_is_written_before_the_replies_queued_ahead_of_it(tmp_path: Path) -> None:
    order: list[tuple[str, object]] = []
    server, log_ = leader(tmp_path, order)
    config = SimpleNamespace(broker_ip1="127.0.0.1", listen_port=10911)
    processor = SendProcessor(SimpleNamespace(config=config, dledger=server))  # type: ignore[arg-type]
    producer = Connection(RequestDispatcher())
    producer.connection_made(Ordered("producer", order))  # type: ignore[arg-type]
    try:
        # the round's reads: an answer that committed an earlier send (its reply queued first), then new
        # sends appended and waiting for the quorum (their push asked for second)
        request = RemotingCommand.request(RequestCode.SEND_MESSAGE)
        request.opaque = 7
        processor.reply_soon(producer, request, request.make_response())
        _fill(log_, 3)
        outcomes: list[object] = []
        server.when_committed(log_.last_index, outcomes.append)
        await asyncio.sleep(0)
        push = int(DLedgerRequestCode.PUSH)
        assert order == [("n1", push), ("n2", push), ("producer", "reply")]
        await asyncio.sleep(0)  # the push's own turn finds it made: nothing pushed twice
        assert order == [("n1", push), ("n2", push), ("producer", "reply")]
        assert {p: server.node.pushes[p].write_index for p in ("n1", "n2")} == {"n1": 3, "n2": 3}
        assert outcomes == []  # (no quorum yet: nothing answered)
    finally:
        producer.connection_lost(None)
        await close(server, log_)


async def test_the_rounds_push_is_written_before_the_dispatch_queued_ahead_of_it(tmp_path: Path) -> None:
    order: list[tuple[str, object]] = []
    server, log_ = leader(tmp_path, order)
    pushes_at_dispatch: list[int] = []
    server.on_commit = lambda: pushes_at_dispatch.append(len(order))
    try:
        server._dispatch_soon(False)  # (what an answer that moved the commit index queues)
        _fill(log_, 2)
        server.when_committed(log_.last_index, lambda code: None)
        await asyncio.sleep(0)
        assert pushes_at_dispatch == [2]  # both followers' pushes written before the dispatch ran
        await asyncio.sleep(0)
        assert len(order) == 2 and pushes_at_dispatch == [2]
    finally:
        await close(server, log_)
