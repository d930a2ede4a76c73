"""What a closed connection's requests waiting for messages leave behind: nothing. Its held long-polling
pulls and its waiting pops end with it, not at the end of their hold (a peer that opened connections, held
thousands of pulls on each and closed them had the broker keep every one for up to a minute after)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from daemon.broker.headers import PopMessageRequestHeader, PullMessageRequestHeader
from daemon.broker.processors.pull import MAX_PULL_HOLD_MS
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.frame import encode_command
from store.record import decode_records
from tests.support.broker import BrokerHandle

SUSPEND_AND_SUBSCRIPTION = 0x2 | 0x4
#: Connections a flooder opens, and the requests each pipelines in one write before it closes.
CONNECTIONS = 4
PER_CONNECTION = 1000  # (under maxHeldPullsPerConnection)


def _pull(topic: str, queue_id: int) -> bytes:
    header = PullMessageRequestHeader(
        "GHeld", topic, queue_id, 0, 32, SUSPEND_AND_SUBSCRIPTION, 0, MAX_PULL_HOLD_MS, 0, "*", "TAG"
    )
    return encode_command(RemotingCommand.request(RequestCode.PULL_MESSAGE, header.to_ext_fields()))


def _pop(topic: str) -> bytes:
    header = PopMessageRequestHeader(
        "GPopHeld", topic, -1, 32, 60_000, 60_000, int(time.time() * 1000), 1, "TAG", "*", False, None
    )
    return encode_command(RemotingCommand.request(RequestCode.POP_MESSAGE, header.to_ext_fields()))


async def _until(what: str, done: Callable[[], bool], timeout: float = 60.0) -> None:
    """Poll ``done()`` (a liveness bound for a loaded machine, not a measure of speed)."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"never: {what}"
        await asyncio.sleep(0.01)


async def _turns(n: int) -> None:
    """Let the loop run ``n`` rounds of its ready callbacks (no time passes for a timer)."""
    for _ in range(n):
        await asyncio.sleep(0)


async def _flood_and_close(handle: BrokerHandle, frames: bytes, requests: int) -> None:
    """Open CONNECTIONS raw connections, pipeline ``frames`` on each, wait until the broker holds
    ``requests`` of them in all, then close every one and wait until the broker saw them go."""
    server = handle.broker.server
    before = len(server.connections)
    host, port = handle.addr.rsplit(":", 1)
    writers = []
    for _ in range(CONNECTIONS):
        _, writer = await asyncio.open_connection(host, int(port))
        writer.write(frames)
        writers.append(writer)
    hold = handle.broker.hold
    await _until(f"{requests} requests held", lambda: hold.parked >= requests)
    for writer in writers:
        writer.close()
    await _until("the flooders' connections closed", lambda: len(server.connections) == before)


async def test_held_pulls_of_closed_connections_are_dropped_when_they_close(broker: BrokerHandle) -> None:
    hold = broker.broker.hold
    broker.broker.topics.create_system_like("HeldFlood", 4, 6)
    live = asyncio.create_task(
        broker.pull(
            "GLive", "HeldFlood", 0, 0, sys_flag=SUSPEND_AND_SUBSCRIPTION, suspend_ms=50_000, timeout=90
        )
    )
    await _until("the live pull held", lambda: hold.parked == 1)
    frames = b"".join(_pull("HeldFlood", i % 4) for i in range(PER_CONNECTION))
    await _flood_and_close(broker, frames, 1 + CONNECTIONS * PER_CONNECTION)
    # dropped in the close itself, their timers and callbacks (each its request) with them: none waits
    # for its queue to grow or its minute to end
    assert hold.parked == 1
    assert sum(len(one) for one in hold._held.values()) == 1
    assert len(hold._owned) == 1  # the live pull's connection's
    # the live pull, held on a queue the flood held on too, is still answered when its queue grows
    assert (await broker.send("HeldFlood", b"for the live one", queue_id=0)).code == ResponseCode.SUCCESS
    answer = await live
    assert answer.code == ResponseCode.SUCCESS
    assert [m.body for m in decode_records(answer.body)] == [b"for the live one"]
    assert hold.parked == 0 and hold._owned == {}


async def test_a_held_pull_answered_or_timed_out_leaves_nothing_of_its_connection(
    broker: BrokerHandle,
) -> None:
    """A long-lived consumer's connection holds pull after pull: each one's bookkeeping goes with its
    answer, woken or at its time."""
    hold = broker.broker.hold
    broker.broker.topics.create_system_like("HeldOwned", 1, 6)
    await broker.send("HeldOwned", b"first")
    for offset in (1, 2):
        pending = asyncio.create_task(
            broker.pull("G", "HeldOwned", 0, offset, sys_flag=SUSPEND_AND_SUBSCRIPTION, suspend_ms=30_000)
        )
        await _until("the pull held", lambda: hold.parked == 1)
        assert len(hold._owned) == 1
        await broker.send("HeldOwned", b"next")
        assert (await pending).code == ResponseCode.SUCCESS
        assert hold._owned == {}
    timed = await broker.pull("G", "HeldOwned", 0, 3, sys_flag=SUSPEND_AND_SUBSCRIPTION, suspend_ms=50)
    assert timed.code == ResponseCode.PULL_NOT_FOUND
    assert hold.parked == 0 and hold._owned == {}


async def test_waiting_pops_of_closed_connections_end_when_they_close(broker: BrokerHandle) -> None:
    hold = broker.broker.hold
    await broker.create_topic("PopFlood", 4)
    per_connection = 200  # a pop of any queue parks on each of the topic's queues and its retry topic's
    frames = b"".join(_pop("PopFlood") for _ in range(per_connection))
    await _flood_and_close(broker, frames, CONNECTIONS * per_connection)
    await _turns(20)  # the connection's end wakes each pop, which unparks (no timer involved)
    assert hold.parked == 0
    # they lent nothing: a message sent now goes to the next pop
    assert (await broker.send("PopFlood", b"after", queue_id=1)).code == ResponseCode.SUCCESS
    assert broker.broker.pop.in_flight() == {}
