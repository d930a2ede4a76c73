"""Held pulls: a callback each, no task; a long-polling pull at its queue's end held from the queue's offsets
alone, after every check a read would have had (daemon/broker/processors/pull.py)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from daemon.broker.long_poll import PullRequestHoldService
from daemon.broker.processors.pull import _CODES, MAX_PULL_HOLD_MS
from daemon.remoting.codes import ResponseCode
from daemon.remoting.errors import RemotingError
from store.memory import InMemoryMessageStore
from store.record import decode_records
from tests.support.broker import BrokerHandle

SUSPEND = 0x2
SUBSCRIPTION = 0x4
COMMIT = 0x1


async def _held(handle: BrokerHandle, count: int) -> None:
    while handle.broker.hold.parked != count:
        await asyncio.sleep(0.01)


async def test_a_held_pull_runs_no_task(broker: BrokerHandle) -> None:
    broker.broker.topics.create_system_like("HeldNoTask", 1, 6)
    assert (await broker.send("HeldNoTask", b"first")).code == ResponseCode.SUCCESS  # the connection is open
    before = asyncio.all_tasks()
    pending = asyncio.create_task(
        broker.pull("G", "HeldNoTask", 0, 1, sys_flag=SUSPEND | SUBSCRIPTION, suspend_ms=20_000, timeout=30)
    )
    await _held(broker, 1)
    # the client's pull, and the group's first persist (its auto-creation): the broker holds the pull by a
    # callback, no task
    new = [t.get_coro() for t in asyncio.all_tasks() - before if t is not pending]
    assert [c for c in new if not getattr(c, "__qualname__", "").startswith("Coalesced.")] == []
    await broker.send("HeldNoTask", b"second")
    woke = await pending
    assert woke.code == ResponseCode.SUCCESS and [m.body for m in decode_records(woke.body)] == [b"second"]
    assert woke.ext_fields == {
        "suggestWhichBrokerId": "0",
        "nextBeginOffset": "2",
        "minOffset": "0",
        "maxOffset": "2",
    }
    assert broker.broker.hold.parked == 0


async def test_a_pull_at_the_end_is_checked_before_it_is_held(broker: BrokerHandle) -> None:
    """The queue's end decides the read, not the checks before it: a group with no subscription is
    refused at once, as 4.9.8 refuses it before its read, not held for its suspend time."""
    broker.broker.topics.create_system_like("HeldChecked", 1, 6)
    await broker.send("HeldChecked", b"x")
    for offset in (0, 1):
        refused = await broker.pull(
            "NoHeartbeat", "HeldChecked", 0, offset, sys_flag=SUSPEND, suspend_ms=20_000
        )
        assert refused.code == ResponseCode.SUBSCRIPTION_NOT_EXIST
    missing = await broker.pull("G", "NoSuchTopic", 0, 0, sys_flag=SUSPEND | SUBSCRIPTION, suspend_ms=20_000)
    assert missing.code == ResponseCode.TOPIC_NOT_EXIST
    assert broker.broker.hold.parked == 0


async def test_a_pull_held_at_the_end_commits_its_offset_and_answers_at_its_timeout(
    broker: BrokerHandle,
) -> None:
    broker.broker.topics.create_system_like("HeldCommit", 1, 6)
    await broker.send("HeldCommit", b"x")
    pending = asyncio.create_task(
        broker.pull(
            "GC",
            "HeldCommit",
            0,
            1,
            sys_flag=COMMIT | SUSPEND | SUBSCRIPTION,
            commit_offset=1,
            suspend_ms=300,
        )
    )
    await _held(broker, 1)
    assert broker.broker.offsets.query_offset("GC", "HeldCommit", 0) == 1
    answer = await pending
    assert answer.code == ResponseCode.PULL_NOT_FOUND and answer.remark == "OFFSET_OVERFLOW_ONE"
    assert answer.ext_fields["nextBeginOffset"] == "1" and answer.ext_fields["maxOffset"] == "1"


async def test_a_held_pull_of_a_closed_connection_is_dropped(broker: BrokerHandle) -> None:
    broker.broker.topics.create_system_like("HeldGone", 1, 6)
    pending = asyncio.create_task(
        broker.pull("G", "HeldGone", 0, 0, sys_flag=SUSPEND | SUBSCRIPTION, suspend_ms=20_000, timeout=30)
    )
    await _held(broker, 1)
    await broker.client.close()
    with pytest.raises(RemotingError):
        await pending
    held = broker.broker.hold
    held.notify("HeldGone", 0, 1)  # its callback runs on a closed connection: nothing to answer, no error
    await asyncio.sleep(0.05)
    assert held.parked == 0


def _not_found(status_code: int | None, offset: int) -> bool:
    if status_code is None:  # NO_MESSAGE_IN_QUEUE, NO_MATCHED_LOGIC_QUEUE: as the pull processor maps them
        return offset == 0
    return status_code == ResponseCode.PULL_NOT_FOUND


@pytest.mark.parametrize("head", [0, 2, 3])
async def test_nothing_at_agrees_with_a_read(broker: BrokerHandle, head: int) -> None:
    """Every offset the offsets-only decision holds a pull at is one a read answers PULL_NOT_FOUND, and no
    other: an empty queue, a queue of three, the same with its head cleaned up to ``head``, an absent one."""
    store = broker.broker.store
    broker.broker.topics.create_system_like("Ends", 2, 6)
    for body in (b"a", b"b", b"c"):
        await broker.send("Ends", body, queue_id=0)
    if head:
        cq = store._cqs[("Ends", 0)]  # type: ignore[attr-defined]
        cq.min_logic_offset = head * 20
    for topic, queue_id in (("Ends", 0), ("Ends", 1), ("Absent", 0)):
        for offset in range(-1, 6):
            read = store.get_messages("G", topic, queue_id, offset, 32, None)
            assert store.nothing_at(topic, queue_id, offset) == _not_found(_CODES.get(read.status), offset), (
                topic,
                queue_id,
                offset,
                read.status,
            )


def test_nothing_at_of_the_memory_store_agrees_with_its_read() -> None:
    from store.message import Message

    store = InMemoryMessageStore()
    for body in (b"a", b"b"):
        store.put_message(Message("M", body, queue_id=0))
    for topic in ("M", "Absent"):
        for offset in range(-1, 4):
            read = store.get_messages("G", topic, 0, offset, 32, None)
            assert store.nothing_at(topic, 0, offset) == _not_found(_CODES.get(read.status), offset)


async def test_a_held_callback_runs_once_past_its_offset_on_the_loop() -> None:
    hold = PullRequestHoldService(lambda _topic, _queue_id: 0, check_interval=3600)
    hold.start()
    runs: list[tuple[str, int]] = []
    hold.hold("T", 0, 5, 60, lambda: runs.append(("a", threading.get_ident())))
    hold.hold("T", 0, 7, 60, lambda: runs.append(("b", threading.get_ident())))
    assert hold.parked == 2
    hold.notify("T", 0, 5)  # not past either offset
    await asyncio.to_thread(hold.on_arrival, "T", 0, 6)  # past the first's, from another thread
    while not runs:
        await asyncio.sleep(0.01)
    assert runs == [("a", threading.get_ident())] and hold.parked == 1  # once, on the loop's thread
    hold.hold("T", 1, 0, 0.05, lambda: runs.append(("timed", threading.get_ident())))
    hold.notify("T", 0, 6)
    while len(runs) < 2:
        await asyncio.sleep(0.01)
    assert [name for name, _ in runs] == ["a", "timed"] and hold.parked == 1
    await hold.stop()  # what is still held is answered
    assert [name for name, _ in runs] == ["a", "timed", "b"] and hold.parked == 0


async def test_a_held_pull_woken_while_its_queue_heals_is_answered_after_the_heal(
    broker: BrokerHandle,
) -> None:
    from daemon.remoting.codes import RequestCode

    broker.broker.topics.create_system_like("HeldHeal", 1, 6)
    processor = broker.broker.server.dispatcher.processors[RequestCode.PULL_MESSAGE].__self__  # type: ignore[attr-defined]
    pending = asyncio.create_task(
        broker.pull("G", "HeldHeal", 0, 0, sys_flag=SUSPEND | SUBSCRIPTION, suspend_ms=20_000, timeout=30)
    )
    await _held(broker, 1)
    heal: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    processor._heals[("HeldHeal", 0)] = heal  # the queue is being healed when the message arrives
    await broker.send("HeldHeal", b"after the heal")
    await asyncio.sleep(0.1)
    assert not pending.done()  # the woken pull waits for the heal
    del processor._heals[("HeldHeal", 0)]
    heal.set_result(None)
    answer = await pending
    assert answer.code == ResponseCode.SUCCESS
    assert [m.body for m in decode_records(answer.body)] == [b"after the heal"]


async def test_a_held_pull_counts_on_its_connection_and_is_held_a_bounded_time(broker: BrokerHandle) -> None:
    """The hold's time is the peer's word: a pull asking 24 days was held that long, after its connection
    closed too, so a peer could pile held pulls up without bound. It is held MAX_PULL_HOLD_MS at most,
    and counts among its connection's requests awaiting an answer until it is answered."""
    broker.broker.topics.create_system_like("HeldLong", 1, 6)
    assert (await broker.send("HeldLong", b"first")).code == ResponseCode.SUCCESS
    (conn,) = broker.broker.server.connections
    loop = asyncio.get_running_loop()
    pending = asyncio.create_task(
        broker.pull("G", "HeldLong", 0, 1, sys_flag=SUSPEND | SUBSCRIPTION, suspend_ms=2**31 - 1, timeout=30)
    )
    await _held(broker, 1)
    ((held,),) = broker.broker.hold._held.values()
    assert held.timer is not None and held.timer.when() <= loop.time() + MAX_PULL_HOLD_MS / 1000
    assert conn.awaiting == 1
    await broker.send("HeldLong", b"second")
    assert (await pending).code == ResponseCode.SUCCESS
    assert conn.awaiting == 0
