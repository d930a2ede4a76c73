"""POP state across a SIGKILL of a real broker process: a recorded history of pops and acks, checked
after the restart (nothing acked comes back, nothing popped and unacked is lost, and nothing comes back
before its invisibility ran out), and a FIFO group's order lock kept through it."""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.errors import RemotingError
from tests.support.bounded import Daemon
from tests.support.broker import BrokerClient
from tests.support.pop import PopClient
from tests.support.ports import free_port

TOPIC = "PopKill"
INVISIBLE_MS = 2_000


@dataclass
class History:
    """What the consumer saw: each delivery (body, wall time, handle), and the acks the broker confirmed."""

    delivered: list[tuple[bytes, float, str]] = field(default_factory=list)
    acked: dict[bytes, float] = field(default_factory=dict)  # body -> when the ack's answer came
    unsure: set[bytes] = field(default_factory=set)  # an ack sent without an answer (the kill)


async def _consume(c: PopClient, history: History, rounds: int | None) -> None:
    """Pop four at a time and ack every other one, until ``rounds`` pops or the connection fails."""
    n = 0
    try:
        while rounds is None or n < rounds:
            n += 1
            got = await c.pop(TOPIC, max_nums=4, invisible_ms=INVISIBLE_MS, poll_ms=200)
            for i, p in enumerate(got):
                history.delivered.append((p.body, time.time(), p.handle))
                if i % 2 == 0:
                    history.unsure.add(p.body)
                    r = await c.ack(TOPIC, p)
                    history.unsure.discard(p.body)
                    if r.code == ResponseCode.SUCCESS:
                        history.acked[p.body] = time.time()
    except (RemotingError, OSError):
        return


@pytest.mark.slow
async def test_sigkill_keeps_pop_state(tmp_path: Path, cli_env: dict[str, str]) -> None:
    port = free_port()
    conf = tmp_path / "broker.conf"
    conf.write_text(
        f"brokerName=broker-a\nbrokerIP1=127.0.0.1\nlistenPort={port}\nstorePathRootDir={tmp_path / 'store'}\n"
        "mappedFileSizeCommitLog=4194304\nflushConsumerOffsetInterval=60000\nmetricsEnable=false\n"
    )
    argv = [sys.executable, "-m", "mqctl", "broker", "start", "-c", str(conf)]
    client = RemotingClient()
    b = BrokerClient(f"127.0.0.1:{port}", client)
    c = PopClient(b, "GK")

    async def up() -> bool:
        try:
            r = await b.call(RequestCode.GET_BROKER_RUNTIME_INFO, timeout=1.0)
        except Exception:
            return False
        return r.code == ResponseCode.SUCCESS

    broker = Daemon(argv, cli_env, tmp_path / "broker.log")
    broker.start()
    history = History()
    try:
        await broker.serving(up)
        await b.create_topic(TOPIC, 4)
        bodies = [f"k{i}".encode() for i in range(60)]
        for i, body in enumerate(bodies):
            assert (await b.send(TOPIC, body, queue_id=i % 4)).code == 0
        await _consume(c, history, rounds=6)  # 24 popped, 12 acked
        # a FIFO group holds queue 0: k0 acked, k4 out
        fifo = PopClient(b, "GKF")
        held = await fifo.pop(TOPIC, queue_id=0, max_nums=2, order=True, invisible_ms=INVISIBLE_MS)
        assert [p.body for p in held] == [b"k0", b"k4"]
        assert (await fifo.ack(TOPIC, held[0])).code == 0
        consumer = asyncio.ensure_future(_consume(c, history, rounds=None))
        await asyncio.sleep(0.05)
        broker.kill()  # mid-traffic, offsets not persisted since the start
        await consumer
        killed_at = time.time()
        assert len(history.acked) >= 12

        broker.start()
        await broker.serving(up)
        # the FIFO lock outlived the kill: nothing of queue 0 until k4's invisibility ends, then k4 again
        k4_due = int(held[1].handle.split(" ")[1]) + INVISIBLE_MS
        back = await fifo.pop(TOPIC, queue_id=0, max_nums=2, order=True)
        early = [(p.body, p.attempt, p.handle) for p in back]
        bound = time.monotonic() + 60
        while not back:
            assert time.monotonic() < bound, f"k4 not lent again; broker:\n{broker.log_tail()}"
            back = await fifo.pop(TOPIC, queue_id=0, max_nums=2, order=True, poll_ms=500)
        answered = time.time() * 1000
        seen = (early, [(p.body, p.attempt, p.handle) for p in back], k4_due, answered)
        assert [(p.body, p.attempt) for p in back] == [(b"k4", 2)], seen
        assert int(back[0].handle.split(" ")[1]) >= k4_due, seen  # lent again only once it was due
        assert (await fifo.ack(TOPIC, back[0])).code == 0
        nxt = await fifo.pop(TOPIC, queue_id=0, max_nums=1, order=True)
        assert [(p.body, p.attempt) for p in nxt] == [(b"k8", 1)]

        after = History()
        deadline = time.time() + 15
        lent = {body: handle for body, _, handle in history.delivered}
        while time.time() < deadline:
            got = await c.pop(TOPIC, max_nums=16, invisible_ms=60_000, poll_ms=300)
            for p in got:
                after.delivered.append((p.body, time.time(), p.handle))
                assert (await c.ack(TOPIC, p)).code == 0
            seen = {d[0] for d in after.delivered}
            if seen >= set(bodies) - set(history.acked) - history.unsure and not got:
                break
    finally:
        broker.stop()
        await client.close()

    again = [d[0] for d in after.delivered]
    # nothing acked is delivered again
    assert not set(again) & set(history.acked), sorted(set(again) & set(history.acked))
    # nothing unacked is lost (an ack that got no answer may have landed either way)
    missing = set(bodies) - set(history.acked) - set(again) - history.unsure
    assert not missing, sorted(missing)
    # a message lent before the kill comes back only after its invisibility
    for body, when, _ in after.delivered:
        if body in lent:
            pop_time, invisible = (int(x) for x in lent[body].split(" ")[1:3])
            assert when * 1000 >= pop_time + invisible - 50, body
    assert len(again) == len(set(again)), "a message delivered twice after the restart"
    assert killed_at < time.time()
