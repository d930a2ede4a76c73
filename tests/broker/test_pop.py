"""POP consumption (RocketMQ 5.x) through the remoting POP codes on our real broker."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from daemon.broker import pop as pop_module
from daemon.broker.headers import AckMessageRequestHeader
from daemon.broker.pop import MAX_POLL_MS, READ_ON_LIMIT, PoppedMessage, ReceiptHandle
from daemon.broker.processors.pop import POLLING_TIMEOUT
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode, ResponseCode
from store.record import decode_records
from tests.support.broker import BrokerClient, BrokerHandle, start_broker
from tests.support.pop import PopClient, first_put_answered, parse_pop
from tests.support.waiting import wait_until

T = "PopTopic"


async def _fill(b: BrokerHandle, n: int, queues: int = 4, topic: str = T, **options: object) -> None:
    await b.create_topic(topic, queues)
    for i in range(n):
        r = await b.send(topic, f"m{i}".encode(), queue_id=i % queues, **options)  # type: ignore[arg-type]
        assert r.code == 0, r.remark


async def test_pop_ack_and_change_invisible(broker: BrokerHandle) -> None:
    await _fill(broker, 8)
    c = PopClient(broker, "G1")
    got = await c.pop(T, max_nums=32, invisible_ms=60_000)
    assert sorted(p.body for p in got) == sorted(f"m{i}".encode() for i in range(8))
    assert {p.attempt for p in got} == {1}
    assert broker.broker.pop.in_flight() == {"G1": 8}
    # everything is out: a second pop finds nothing
    assert await c.pop(T) == []
    # a handle acks once
    first, second = got[0], got[1]
    assert (await c.ack(T, first)).code == 0
    assert (await c.ack(T, first)).code == 208
    # change-invisible: a new handle, the old one stops working
    old = second.handle
    assert (await c.change_invisible(T, second, 30_000)).code == 0
    assert second.handle != old
    stale = type(second)(second.message, old, 0)
    assert (await c.ack(T, stale)).code == 208
    assert (await c.ack(T, second)).code == 0
    assert broker.broker.pop.in_flight() == {"G1": 6}
    # the receipt handle a gRPC front gets is the same, plus the CommitLog offset
    h = ReceiptHandle.decode(got[2].handle)
    assert (h.topic_type, h.broker_name, h.revive_qid) == ("0", "broker-a", 0)


async def _pop_until(c: PopClient, topic: str, want: int, timeout: float = 10.0, **options: object) -> list:
    """Pop (long-polling) until ``want`` messages came back or ``timeout`` s passed."""
    got: list = []
    deadline = asyncio.get_running_loop().time() + timeout
    while len(got) < want and asyncio.get_running_loop().time() < deadline:
        got += await c.pop(topic, poll_ms=500, **options)
    return got


@pytest.mark.slow
async def test_redelivery_through_retry_topic_then_dlq(broker: BrokerHandle) -> None:
    """An unacked message comes back after its invisibility from %RETRY%group with its properties
    and a growing attempt; after the group's retryMaxTimes it goes to %DLQ%group."""
    from store.models import SubscriptionGroupConfig

    broker.broker.groups.put(SubscriptionGroupConfig("G2", retry_max_times=2))
    await _fill(broker, 1, tags="paid", keys="order-1")
    c = PopClient(broker, "G2")
    attempts = []
    for _ in range(3):
        got = await _pop_until(c, T, 1, invisible_ms=300)
        assert len(got) == 1
        m = got[0].message
        assert m.body == b"m0" and m.properties["TAGS"] == "paid" and m.properties["KEYS"] == "order-1"
        attempts.append((got[0].attempt, m.topic, m.properties.get("RETRY_TOPIC")))
    # a retry comes back with the topic it was sent to (5.x re-encodes it so), its own in RETRY_TOPIC
    assert attempts == [(1, T, None), (2, T, T), (3, T, T)]
    # the third lending expires too: retries used up, to the DLQ and not delivered again
    assert await _pop_until(c, T, 1, timeout=1.5, invisible_ms=300) == []
    store = broker.broker.store
    assert store.get_max_offset("%DLQ%G2", 0) == 1
    dead = store.get_messages("", "%DLQ%G2", 0, 0, 1).messages[0].message
    assert dead.body == b"m0" and dead.properties["RETRY_TOPIC"] == T and dead.reconsume_times == 3
    assert broker.broker.pop.in_flight() == {}


@pytest.mark.slow
async def test_a_revive_copy_appended_and_not_seen_flushed_counts_and_is_not_put_again(
    broker: BrokerHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A single broker too: the revive's copy stored and its wait for the disk run out (a SYNC_FLUSH
    broker's FLUSH_DISK_TIMEOUT) counts, as 5.x's revive counts an appended copy done. The revive is
    tried again (the put did not say OK) and waits for that copy: a second put was a second copy, the
    message lent to two consumers at once."""
    from store.results import PutMessageStatus

    await _fill(broker, 1, queues=1)
    b = broker.broker
    puts = first_put_answered(b, monkeypatch, PutMessageStatus.FLUSH_DISK_TIMEOUT)
    c = PopClient(broker, "GFlush")
    [lent] = await c.pop(T, max_nums=1, invisible_ms=100)
    await wait_until(lambda: not b.pop.in_flight(), 10)
    assert puts == ["%RETRY%GFlush"]
    assert b.store.get_max_offset("%RETRY%GFlush", 0) == 1
    again = await c.pop(T, max_nums=32, invisible_ms=60_000)
    assert [(p.body, p.attempt) for p in again] == [(b"m0", 2)]
    assert (await c.ack(T, lent)).code == 208


@pytest.mark.slow
async def test_acked_is_not_redelivered(broker: BrokerHandle) -> None:
    await _fill(broker, 4)
    c = PopClient(broker, "G3")
    got = await c.pop(T, invisible_ms=1_000)
    for p in got[:2]:
        assert (await c.ack(T, p)).code == 0
    back = await _pop_until(c, T, 2, timeout=5, invisible_ms=60_000)
    assert sorted(p.body for p in back) == sorted(p.body for p in got[2:])
    assert {p.attempt for p in back} == {2}
    assert all(p.message.properties["POP_CK"] == p.handle for p in back)
    # the service (what the gRPC front calls) hands over the record as stored, and the sent-to topic
    for p in back:
        broker.broker.pop.renew(group="G3", topic=T, receipt_handle=p.handle, invisible_ms=0)
    again: list[PoppedMessage] = []
    while len(again) < 2:
        again += await broker.broker.pop.pop(
            group="G3",
            topic=T,
            queue_id=-1,
            max_messages=8,
            invisible_ms=60_000,
            poll_ms=3_000,
            fifo=False,
            expression_type="TAG",
            expression="*",
        )
        assert again, "the revived messages did not come back"
    assert [(m.topic, m.delivery_attempt) for m in again] == [(T, 3)] * 2
    assert decode_records(again[0].record)[0].topic == "%RETRY%G3"


@pytest.mark.slow
async def test_fifo_holds_the_queue_until_acked_or_expired(broker: BrokerHandle) -> None:
    await _fill(broker, 6, queues=1)
    c = PopClient(broker, "GF")
    first = await c.pop(T, max_nums=2, order=True, invisible_ms=1_500, attempt_id="a1")
    assert [p.body for p in first] == [b"m0", b"m1"]
    assert all(ReceiptHandle.decode(p.handle).is_order for p in first)
    # held: nothing more of the queue while m0/m1 are out
    assert await c.pop(T, max_nums=2, order=True) == []
    assert await c.pop(T, max_nums=2, order=True, attempt_id="a2") == []
    # but a pop retried with its attempt id (its answer was lost) gets the same lending again
    retried = await c.pop(T, max_nums=2, order=True, invisible_ms=1_500, attempt_id="a1")
    assert [(p.body, p.handle, p.attempt) for p in retried] == [(p.body, p.handle, 1) for p in first]
    # expiry brings the same messages back, in order, one attempt more
    again = await _pop_until(c, T, 2, timeout=5, max_nums=2, order=True, invisible_ms=60_000)
    assert [(p.body, p.attempt) for p in again] == [(b"m0", 2), (b"m1", 2)]
    assert (await c.ack(T, again[0])).code == 0
    assert await c.pop(T, max_nums=2, order=True) == []  # m1 still out
    assert (await c.ack(T, again[1])).code == 0
    nxt = await c.pop(T, max_nums=2, order=True)
    assert [(p.body, p.attempt) for p in nxt] == [(b"m2", 1), (b"m3", 1)]


async def test_long_poll_wakes_on_arrival(broker: BrokerHandle) -> None:
    """A pop parked on an empty topic lends the message sent while it waits, woken by that arrival and not
    by the end of its poll: the broker lent it (its own popTime) before the longest poll it grants could
    have run out, after the message was stored (its own store time)."""
    await broker.create_topic(T, 2)
    c = PopClient(broker, "GL")
    asked_ms = int(time.time() * 1000)
    waiting = asyncio.ensure_future(c.pop_raw(T, poll_ms=MAX_POLL_MS))
    await wait_until(lambda: broker.broker.hold.parked > 0)  # read the empty queues, now waits on them
    assert not waiting.done()
    assert (await broker.send(T, b"late", queue_id=1)).code == 0
    answer = await waiting
    got = parse_pop(answer, "broker-a")
    assert [p.body for p in got] == [b"late"]
    lent_ms = int(answer.ext_fields["popTime"])
    assert got[0].message.store_timestamp <= lent_ms < asked_ms + MAX_POLL_MS
    assert broker.broker.hold.parked == 0  # its waits went with it
    empty = await c.pop_raw(T, poll_ms=200)
    assert empty.code == 210 and empty.ext_fields["restNum"] == "0"


def test_runtime_info_keys_round_trip() -> None:
    from daemon.broker.pop import parse_pop_in_flight, pop_runtime_info

    info = pop_runtime_info({"G-1": 3, "%SYS_G": 10})
    assert info == {"popInFlightTotal": "13", "popInFlight": "%SYS_G:10,G-1:3"}
    assert parse_pop_in_flight(info["popInFlight"]) == {"G-1": 3, "%SYS_G": 10}
    assert parse_pop_in_flight("") == {} and parse_pop_in_flight(None) == {}


def test_receipt_handle_is_5x_format() -> None:
    text = "12 1700000000000 30000 0 1 broker-a 3 17 4096"
    h = ReceiptHandle.decode(text)
    assert (h.ck_queue_offset, h.pop_time, h.invisible_ms, h.topic_type, h.queue_id, h.queue_offset) == (
        12,
        1700000000000,
        30000,
        "1",
        3,
        17,
    )
    assert h.encode() == text and h.extra_info == text.rsplit(" ", 1)[0]
    assert ReceiptHandle.decode(h.extra_info).commit_log_offset == -1


async def test_slave_and_bad_requests_are_refused(broker: BrokerHandle, tmp_path: Path) -> None:
    await broker.create_topic(T, 2)
    c = PopClient(broker, "GB")
    assert (await c.pop_raw(T, max_nums=33)).code == 29  # INVALID_PARAMETER, as 5.x
    assert (await c.pop_raw(T, queue_id=2)).code == 29
    assert (await c.pop_raw("NoSuchTopic")).code == ResponseCode.TOPIC_NOT_EXIST
    bad = AckMessageRequestHeader("GB", T, 0, "not a handle", 0)
    assert (
        await broker.call(RequestCode.ACK_MESSAGE, bad.to_ext_fields())
    ).code == ResponseCode.MESSAGE_ILLEGAL
    slave = await start_broker(tmp_path / "slave", broker_id=1, broker_role="SLAVE")
    client = RemotingClient()
    try:
        slave.topics.create_system_like(T, 2, 6)
        r = await PopClient(BrokerClient(slave.addr, client), "GB").pop_raw(T)
        assert r.code == ResponseCode.SYSTEM_ERROR and "slave" in (r.remark or "")
    finally:
        await client.close()
        await slave.stop()


async def test_batch_ack_acks_the_bits_of_its_checkpoint(broker: BrokerHandle) -> None:
    """BATCH_ACK_MESSAGE as a 5.x Proxy sends it: one BatchAck per (queue, pop) with a Java BitSet of
    offsets after the start (fastjson: Base64); a stale popTime acks nothing."""
    import base64
    import json

    await _fill(broker, 4, queues=1)
    c = PopClient(broker, "GBA")
    got = await c.pop(T, max_nums=4)
    h = ReceiptHandle.decode(got[0].handle)
    assert h.ck_queue_offset == 0 and [p.message.queue_offset for p in got] == [0, 1, 2, 3]

    def batch(pop_time: int, bits: int) -> bytes:
        ack = {"c": "GBA", "t": T, "r": "0", "so": 0, "q": 0, "rq": 0, "pt": pop_time, "it": h.invisible_ms}
        ack["b"] = base64.b64encode(bytes([bits])).decode()
        return json.dumps({"brokerName": "broker-a", "acks": [ack]}).encode()

    r = await broker.call(RequestCode.BATCH_ACK_MESSAGE, body=batch(h.pop_time - 1, 0b0101))
    assert r.code == 0 and broker.broker.pop.in_flight() == {"GBA": 4}
    r = await broker.call(RequestCode.BATCH_ACK_MESSAGE, body=batch(h.pop_time, 0b0101))
    assert r.code == 0 and broker.broker.pop.in_flight() == {"GBA": 2}
    assert (await c.ack(T, got[0])).code == 208 and (await c.ack(T, got[1])).code == 0


@pytest.mark.slow
async def test_fifo_message_goes_to_dlq_after_max_attempts(broker: BrokerHandle) -> None:
    from store.models import SubscriptionGroupConfig

    broker.broker.groups.put(SubscriptionGroupConfig("GFD", retry_max_times=1))
    await _fill(broker, 2, queues=1)
    c = PopClient(broker, "GFD")
    seen = []
    for _ in range(2):
        got = await _pop_until(c, T, 1, timeout=3, max_nums=1, order=True, invisible_ms=200)
        seen.append([(p.body, p.attempt) for p in got])
    assert seen == [[(b"m0", 1)], [(b"m0", 2)]]
    # the second lending expires: m0 is dead-lettered and the queue moves on to m1
    nxt = await _pop_until(c, T, 1, timeout=3, max_nums=1, order=True, invisible_ms=60_000)
    assert [(p.body, p.attempt) for p in nxt] == [(b"m1", 1)]
    dead = broker.broker.store.get_messages("", "%DLQ%GFD", 0, 0, 1).messages[0].message
    assert dead.body == b"m0" and dead.properties["RETRY_TOPIC"] == T


@pytest.mark.slow
async def test_mass_expiry_revives_everything_in_slices(broker: BrokerHandle) -> None:
    """More lendings expire at once than the revive loop handles between two yields: all come back."""
    from tests.support.broker import batch_entry

    await broker.create_topic(T, 2)
    for i in range(0, 600, 100):
        body = b"".join(batch_entry(f"b{j}".encode(), {"WAIT": "true"}) for j in range(i, i + 100))
        r = await broker.send(T, body, code=RequestCode.SEND_BATCH_MESSAGE, queue_id=i // 100 % 2, batch=True)
        assert r.code == 0, r.remark
    c = PopClient(broker, "GM")
    lent = await _pop_until(c, T, 600, max_nums=32, invisible_ms=2_000)
    assert len(lent) == 600
    back = await _pop_until(c, T, 600, timeout=20, max_nums=32, invisible_ms=60_000)
    assert sorted(p.body for p in back) == sorted(p.body for p in lent)
    assert {p.attempt for p in back} == {2} and broker.broker.pop.in_flight() == {"GM": 600}


async def test_forward_to_dlq_ends_the_lending(broker: BrokerHandle) -> None:
    """What the gRPC front's ForwardMessageToDeadLetterQueue calls: the message goes to %DLQ%group
    at once with its properties, and its handle stops working."""
    await _fill(broker, 1, tags="t1")
    pop = broker.broker.pop
    got = await pop.pop(
        group="GD", topic=T, queue_id=-1, max_messages=1, invisible_ms=60_000, poll_ms=0,
        fifo=True, expression_type="TAG", expression="t1",
    )  # fmt: skip
    assert [(m.topic, m.delivery_attempt) for m in got] == [(T, 1)]
    await pop.forward_to_dlq(group="GD", topic=T, receipt_handle=got[0].receipt_handle)
    assert pop.in_flight() == {}
    dead = broker.broker.store.get_messages("", "%DLQ%GD", 0, 0, 1).messages[0].message
    assert (dead.body, dead.properties["TAGS"], dead.properties["RETRY_TOPIC"]) == (b"m0", "t1", T)
    c = PopClient(broker, "GD")
    r = await broker.call(
        RequestCode.ACK_MESSAGE,
        AckMessageRequestHeader("GD", T, 0, got[0].receipt_handle, 0).to_ext_fields(),
    )
    assert r.code == 208 and await c.pop(T, order=True) == []


async def test_a_single_broker_logs_no_revive_record_and_refuses_sends_to_the_revive_topic(
    broker: BrokerHandle,
) -> None:
    """Outside a DLedger group an ack and a change are the journal's alone (nothing more to write per
    ack); the revive topic takes no client's send, as a forged ack record would be read as one by a
    DLedger member taking over."""
    await _fill(broker, 2, queues=1)
    c = PopClient(broker, "GRev")
    first, second = await c.pop(T, max_nums=2, invisible_ms=60_000)
    assert (await c.ack(T, first)).code == 0
    assert (await c.change_invisible(T, second, 30_000)).code == 0
    revive = broker.broker.pop.revive_topic
    assert revive == "rmq_sys_REVIVE_LOG_DefaultCluster"
    assert broker.broker.store.get_max_offset(revive, 0) == 0
    forged = await broker.send(revive, b'{"ao":1,"so":0,"c":"GRev","t":"PopTopic","q":0}', tags="ack")
    assert forged.code == ResponseCode.NO_PERMISSION, forged.remark
    assert broker.broker.store.get_max_offset(revive, 0) == 0


async def test_a_pop_of_any_queue_does_not_start_at_the_same_queue_each_time(broker: BrokerHandle) -> None:
    """A consumer of two topics pops them in turn (a 5.x SimpleConsumer does): a pop of any queue (-1)
    starts at a random one, as 5.x's ``PopMessageProcessor`` does, so neither queue of a topic with a
    backlog in both waits until the other is drained, whatever the other pops between them."""
    await _fill(broker, 170, queues=2)
    await broker.create_topic("PopOther", 1)
    c = PopClient(broker, "GTurns")
    queues = set()
    for _ in range(20):
        got = await c.pop(T, queue_id=-1, max_nums=4)
        assert len(got) == 4
        queues |= {p.message.queue_id for p in got}
        assert await c.pop("PopOther", queue_id=-1, max_nums=4) == []
    assert queues == {0, 1}


async def test_a_tag_filtered_pop_reads_on_past_other_tags_within_its_poll(broker: BrokerHandle) -> None:
    """A consumer subscribed to one tag behind a backlog of others gets its messages in its first poll, as
    in 5.x (a read that matched nothing moves the group's offset past what it read, and a pop with more
    to read does not park): a read matches within a bounded window, so the pop used to wait out its whole
    long poll, one window per poll. It reads on in bounded passes, yielding the loop between them."""
    from tests.support.broker import batch_entry

    await broker.create_topic(T, 1)
    others = 3000
    for i in range(0, others, 250):
        body = b"".join(
            batch_entry(f"o{j}".encode(), {"TAGS": "other", "WAIT": "true"}) for j in range(i, i + 250)
        )
        r = await broker.send(T, body, code=RequestCode.SEND_BATCH_MESSAGE, queue_id=0, batch=True)
        assert r.code == 0, r.remark
    for i in range(2):
        assert (await broker.send(T, f"mine{i}".encode(), queue_id=0, tags="mine")).code == 0
    pop = broker.broker.pop
    passes = 0
    one_pass = pop._pop_once

    def counted(*args: object) -> list[PoppedMessage]:
        nonlocal passes
        passes += 1
        return one_pass(*args)  # type: ignore[arg-type]

    pop._pop_once = counted  # type: ignore[method-assign]
    c = PopClient(broker, "GTag")
    got = await c.pop(T, exp="mine", poll_ms=20_000)
    assert [p.body for p in got] == [b"mine0", b"mine1"]
    assert others > 2 * READ_ON_LIMIT and passes > 1  # bounded passes, not one read through it all
    assert pop.pop_offset("GTag", T, 0) == others + 2
    # nothing left that matches: the next pop finds nothing, and no other tag is lent
    assert await c.pop(T, exp="mine", poll_ms=300) == []
    assert pop.in_flight() == {"GTag": 2}


async def test_a_pops_wait_is_bounded_whatever_its_poll_time(
    broker: BrokerHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pollTime is the peer's word: a pop asking days was held (its coroutine, a place among its
    connection's requests awaiting answers) that long. It waits MAX_POLL_MS at most, then answers as a
    pop that found nothing (POLLING_TIMEOUT)."""
    monkeypatch.setattr(pop_module, "MAX_POLL_MS", 300)
    await broker.create_topic("PopBounded", 1)
    c = PopClient(broker, "GBounded")
    answer = await asyncio.wait_for(c.pop_raw("PopBounded", poll_ms=2**31 - 1), 20)
    assert answer.code == POLLING_TIMEOUT and answer.remark == "no new message", answer.remark


async def test_forged_receipt_handles_end_no_lending(broker: BrokerHandle) -> None:
    """A handle is the only key an ack carries: another group's handle, one naming another broker or
    another offset, acks nothing of the lender's (NO_MESSAGE, 208), and a huge one is refused
    (MESSAGE_ILLEGAL) with the handle shown cut, not written back whole."""
    await _fill(broker, 1, queues=1)
    owner = PopClient(broker, "GOwner")
    (lent,) = await owner.pop(T)
    thief = PopClient(broker, "GThief")
    assert (await thief.ack(T, lent)).code == 208  # the owner's handle, another group
    parts = lent.handle.split(" ")
    for forged in (
        [*parts[:5], "broker-z", *parts[6:]],  # another broker's name
        [*parts[:6], str(int(parts[6]) + 1), *parts[7:]],  # another offset
    ):
        assert (await owner.ack(T, type(lent)(lent.message, " ".join(forged), 0))).code == 208
    huge = " ".join([*parts[:7], "9" * 100_000])
    refused = await owner.ack(T, type(lent)(lent.message, huge, 0))
    assert refused.code == ResponseCode.MESSAGE_ILLEGAL and len(refused.remark or "") < 1000
    assert broker.broker.pop.in_flight() == {"GOwner": 1}
    assert (await owner.ack(T, lent)).code == 0
