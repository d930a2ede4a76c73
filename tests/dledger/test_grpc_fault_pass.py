"""The official 5.x Python client as an application uses it, against ``mqctl up --dledger 3`` while the
leader is SIGKILLed, the killed member restarted, then the next leader paused (SIGSTOP) past the
election timeout and resumed. A Producer sends normal messages, FIFO ones in message groups (each after
the previous one of its group was answered), timers and transactions (committed, rolled back, or left
open for its checker); two SimpleConsumers of a group and two of a FIFO group receive, change invisible
durations, and ack (or leave a message to run out). Every call is recorded with its times, and the
history is checked afterwards (tests/jepsen/pop_checker.py): no acknowledged send lost, no rolled-back
message delivered, FIFO order kept within each message group, no message lent to two consumers at once
(a FIFO one never; a normal one only across a fault or a term it explains, as 5.x's next master lends it
again, and a couple of terms nothing explains: more excuse nothing), every timer
delivered once and not before its time."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from daemon.remoting.codes import RequestCode
from store.inspect import layout, raw_records
from store.models import SubscriptionGroupConfig
from store.names import DLEDGER_TERM_TOPIC
from store.record import decode_record
from tests.broker.test_ha import pull_all
from tests.dledger.test_group import elected_master, member_pid
from tests.dledger.test_grpc_failover import restart_member
from tests.dledger.test_roles import grpc_port, member_addrs, new_master, raft_group, topic_everywhere
from tests.jepsen.pop_checker import Delivery, early, lent_twice_at_once, lost, out_of_order
from tests.support.bounded import Daemon
from tests.support.broker import BrokerClient
from tests.support.waiting import wait_until

# The faults and the drain after them take 3.5-5 minutes on a quiet host, and the drain may go on to
# DRAIN_LIMIT_S while the backlog shrinks: pytest's 300 s default would cut a run that is still making
# progress, so the bound is the drain's own (plus the faults and the set-up).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

NORMAL, FIFO, TIMED, TX = "Fn", "Ff", "Fd", "Ft"
GROUP, FIFO_GROUP = "GFn", "GFf"
MESSAGE_GROUPS = 4
INVISIBLE_S = 10
CALL_TIMEOUT_S = 3  # the clients' request timeout: an ack failed by a fault in it may have been held
STALL_S = 45  # longer than a lending (INVISIBLE_S and its change) and a receive's turn over three topics
DRAIN_LIMIT_S = 600
# Sent and not acked yet, past which the producer slows down to a round of sends each PACED_S (a fault
# still meets sends under way). Each message is acked alone (a quorum round trip each), so the consumers
# take less than the producer sends, and once it stops they drain what is left at about one receive of 16
# for each of three topics in turn (the idle ones long-polling): a few messages a second. Unbounded, the
# backlog left at the stop is the difference of the two rates over two minutes, which depends on the
# host: some thousands here, and on another more than the drain's limit let them take, the newest
# messages of a queue still waiting at the limit.
MAX_BACKLOG = 1000
PACED_S = 0.5


class App:
    """The application: what it sent and what its consumers did, with times."""

    def __init__(self) -> None:
        self.stop_sending = threading.Event()
        self.stop_consuming = threading.Event()
        self.lock = threading.Lock()
        self.sent: list[str] = []  # SEND_OK (normal, FIFO, timers)
        self.sent_at: dict[str, float] = {}  # when each send (or transaction) began, for the evidence
        self.acked: set[str] = set()  # acked OK (see MAX_BACKLOG)
        self.sequence: dict[str, tuple[str, int]] = {}  # FIFO body -> (message group, number)
        self.due: dict[str, float] = {}  # timer body -> delivery time (s, whole)
        self.committed: list[str] = []  # transactional messages to be delivered (committed or checked so)
        self.rolled_back: list[str] = []
        self.deliveries: list[Delivery] = []
        self.calls = itertools.count()
        self.errors: dict[str, int] = {}
        self.last_errors: dict[str, str] = {}  # the last error of each kind, for the evidence

    def backlog(self) -> int:
        """Sent (or committed) and not yet acked: what the consumers have still to take."""
        return len(self.sent) + len(self.committed) - len(self.acked)

    def error(self, what: str, exc: Exception | None = None) -> None:
        with self.lock:
            self.errors[what] = self.errors.get(what, 0) + 1
            if exc is not None:
                self.last_errors[what] = f"{time.time():.1f} {type(exc).__name__}: {str(exc)[:300]}"


def produce(app: App, producer: Any) -> None:
    from tests.support.grpc5 import message

    numbers = [0] * MESSAGE_GROUPS
    for i in itertools.count():
        paced = time.monotonic() + PACED_S
        while app.backlog() > MAX_BACKLOG and time.monotonic() < paced and not app.stop_sending.is_set():
            time.sleep(0.05)
        if app.stop_sending.is_set():
            return
        try:
            k = i % MESSAGE_GROUPS  # FIFO: the group's next number once the previous one was answered
            body = f"g{k}-{numbers[k]}"
            app.sent_at[body] = time.time()
            producer.send(message(FIFO, body.encode(), message_group=f"g{k}"))
            app.sequence[body] = (f"g{k}", numbers[k])
            app.sent.append(body)
            numbers[k] += 1
            body = f"n-{i}"
            app.sent_at[body] = time.time()
            producer.send(message(NORMAL, body.encode()))
            app.sent.append(body)
            if i % 10 == 0:
                due = int(time.time()) + 5 + i % 20  # (the client sends whole seconds)
                body = f"d-{i}"
                app.sent_at[body] = time.time()
                producer.send(message(TIMED, body.encode(), delivery_timestamp=due))
                app.due[body] = due
                app.sent.append(body)
            if i % 10 == 5:
                transact(app, producer, i)
        except Exception as exc:
            app.error("send", exc)
            time.sleep(0.2)


def transact(app: App, producer: Any, i: int) -> None:
    """A committed, a rolled back and an open transaction (its checker commits it)."""
    from tests.support.grpc5 import message

    for end in ("commit", "rollback", "open"):
        body = f"t-{i}-{end}"
        app.sent_at[body] = time.time()
        tx = producer.begin_transaction()
        producer.send(message(TX, body.encode()), transaction=tx)
        if end == "rollback":
            app.rolled_back.append(body)
        else:
            app.committed.append(body)  # sent: committed now, or by the checker's answer
        if end == "commit":
            tx.commit()
        elif end == "rollback":
            tx.rollback()


def consume(app: App, consumer: Any, name: str, fifo: bool) -> None:
    """Receive, then in order: change a few messages' invisible duration, leave a few to run out, ack the
    rest; a FIFO consumer stops at a failed ack or a message it leaves (the rest comes back after it)."""
    seen = 0
    while not app.stop_consuming.is_set():
        call = next(app.calls)
        start = time.time()
        try:
            got = consumer.receive(16, INVISIBLE_S)
        except Exception as exc:
            app.error(f"receive {name}", exc)
            time.sleep(0.5)
            continue
        end = time.time()
        batch = []
        for m in got or []:
            d = Delivery(name, m.message_id, m.body.decode(), start, end, INVISIBLE_S, call)
            d.handle, d.via = m.receipt_handle, str(m.endpoints)
            batch.append((d, m))
        with app.lock:
            app.deliveries += [d for d, _ in batch]
        for d, m in batch:
            seen += 1
            if d.body in app.due or d.body.startswith("t-"):
                pass  # timers and transactions: acked at once
            elif seen % 13 == 0 and not app.stop_sending.is_set():  # left to run out: lent again later
                if fifo:
                    break
                continue
            elif seen % 7 == 0:
                at = time.time()
                try:
                    consumer.change_invisible_duration(m, INVISIBLE_S + 5)
                    d.changes.append((at, True, INVISIBLE_S + 5))
                except Exception:
                    d.changes.append((at, False, INVISIBLE_S + 5))
                    app.error("change")
            at = time.time()
            try:
                consumer.ack(m)
                d.acks.append((at, True))
                app.acked.add(d.body)
            except Exception:
                d.acks.append((at, False))
                app.error("ack")
                if fifo:
                    break


def unsettled(app: App, expected: set[str], faults: list[float]) -> str:
    """What a drain that stopped shrinking left: the messages not acked (the oldest first), each with
    when it was sent and its last lending, and the errors the application met."""
    with app.lock:
        missing = lost(expected, app.deliveries, faults, CALL_TIMEOUT_S)
        seen = {d.body: d for d in app.deliveries}
    sent_at = dict(app.sent_at)  # (a send may still be ending)
    lines = [
        f"{len(missing)} of {len(expected)} sent and not acked at {time.time():.1f}, the last sent"
        f" at {max(sent_at.values()):.1f}; errors {app.errors}"
    ]
    lines += [f"last {what}: {text}" for what, text in app.last_errors.items()]
    for body in sorted(missing, key=lambda b: sent_at.get(b, 0))[:30]:  # the oldest first
        d = seen.get(body)
        sent = f"sent at {sent_at.get(body, 0):.1f}, "
        lines.append(f"{body}: {sent}" + (f"last lent {d}" if d else "never received"))
    return "\n".join(lines)


async def drained(app: App, expected: set[str], faults: list[float], unsettled: Callable[[], str]) -> None:
    """Wait until every message sent is acked, for as long as the consumers keep acking more: how fast
    they drain the backlog left when the producer stops is theirs (a receive of 16 for each of three topics
    in turn, the idle ones long-polling), but a backlog that stops shrinking is a stall."""
    loop = asyncio.get_running_loop()
    least, since, deadline = len(expected) + 1, loop.time(), loop.time() + DRAIN_LIMIT_S
    while True:
        with app.lock:
            missing = len(lost(expected, app.deliveries, faults, CALL_TIMEOUT_S))
        if not missing:
            return
        if missing < least:
            least, since = missing, loop.time()
        assert loop.time() - since < STALL_S, f"no more acked for {STALL_S} s:\n{unsettled()}"
        assert loop.time() < deadline, f"not drained in {DRAIN_LIMIT_S} s:\n{unsettled()}"
        await asyncio.sleep(0.5)


async def groups_everywhere(client: Any, data: Path, on: BrokerClient) -> None:
    """GROUP, and FIFO_GROUP with 5.x's consumeMessageOrderly, made on the leader and held by every member
    (followers take the leader's groups every 10 s): the member elected next serves them alike."""
    for group, extra in ((GROUP, {}), (FIFO_GROUP, {"consumeMessageOrderly": True})):
        body = json.dumps({**json.loads(SubscriptionGroupConfig(group).dumps()), **extra}).encode()
        r = await on.call(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body)
        assert r.code == 0, r.remark

    async def held() -> bool:
        for addr in member_addrs(data):
            r = await BrokerClient(addr, client).call(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
            if r.code != 0 or b'"consumeMessageOrderly":true' not in r.body.replace(b" ", b""):
                return False
        return True

    await wait_until(held, 60)


def takeovers(stores: Iterable[Path]) -> list[tuple[float, str]]:
    """Each leader's start, from its term record in the members' stores (read once they stopped): when it
    was stored, and what it says."""
    terms: dict[str, float] = {}
    for root in stores:
        for _offset, raw in raw_records(layout(root)):
            m = decode_record(raw, check_crc=False, inflate=False)
            if m.topic == DLEDGER_TERM_TOPIC:
                terms[m.body.decode()] = m.store_timestamp / 1000
    return sorted((at, term) for term, at in terms.items())


#: The broker's transaction checks, quick enough for a fault pass.
CHECK_QUICKLY = {"MQCTL_TRANSACTION_CHECK_INTERVAL": "2000", "MQCTL_TRANSACTION_TIME_OUT": "2000"}


class Running:
    """The application's clients and threads, started on a front: :meth:`stop` ends them."""

    def __init__(
        self, app: App, producer: Any, consumers: list[Any], threads: list[threading.Thread]
    ) -> None:
        self.app, self.producer, self.consumers, self.threads = app, producer, consumers, threads

    def stop(self) -> None:
        self.app.stop_sending.set()
        self.app.stop_consuming.set()
        for t in self.threads:
            t.join(30)
        for consumer in self.consumers:
            consumer.shutdown()
        self.producer.shutdown()


def start_app(app: App, port: int) -> Running:
    """The application on the gRPC front at ``port`` (it finds the leader through QueryRoute): a Producer
    whose transaction checker commits or rolls back as each message's body says, two SimpleConsumers of
    GROUP (normal, timer and transactional topics) and two of FIFO_GROUP, each in a thread of its own."""
    from rocketmq import FilterExpression, SimpleConsumer, TransactionChecker, TransactionResolution

    from tests.support.grpc5 import ClientConfiguration, Credentials, Producer

    class Checker(TransactionChecker):  # type: ignore[misc]
        def check(self, msg: Any) -> Any:
            rolled_back = msg.body.decode().endswith("-rollback")
            return TransactionResolution.ROLLBACK if rolled_back else TransactionResolution.COMMIT

    config = ClientConfiguration(f"127.0.0.1:{port}", Credentials("", ""), request_timeout=CALL_TIMEOUT_S)
    producer = Producer(config, (NORMAL, FIFO, TIMED, TX), checker=Checker())
    subscriptions = {
        GROUP: {t: FilterExpression("*") for t in (NORMAL, TIMED, TX)},
        FIFO_GROUP: {FIFO: FilterExpression("*")},
    }
    consumers = [
        (f"{group}-{i}", SimpleConsumer(config, group, subscriptions[group], await_duration=2), group)
        for group in (GROUP, FIFO_GROUP)
        for i in range(2)
    ]
    producer.startup()
    for _, consumer, _ in consumers:
        consumer.startup()
    threads = [threading.Thread(target=produce, args=(app, producer), daemon=True)]
    threads += [
        threading.Thread(target=consume, args=(app, c, name, group == FIFO_GROUP), daemon=True)
        for name, c, group in consumers
    ]
    for t in threads:
        t.start()
    return Running(app, producer, [c for _, c, _ in consumers], threads)


def check_app(
    app: App,
    faults: list[float],
    timed: list[str],
    leaders: str,
    starts: list[float],
    induced: list[float] | None = None,
) -> None:
    """The recorded history's checks (``faults``: when each fault came; ``starts``: each leader's start,
    which lends a normal message again as a fault does when a fault, or an ``induced`` event such as a
    member's restart, explains it, or as one of the few a loaded host's elections make); ``timed``: the
    timer topic's bodies as the last leader holds them."""
    deliveries = app.deliveries
    fifo = [d for d in deliveries if d.body in app.sequence]
    others = [d for d in deliveries if d.body not in app.sequence]
    print(
        f"{len(app.sent)} sent, {len(app.committed)} transactions to deliver, {len(deliveries)} deliveries;"
        f" {leaders}; errors {app.errors}"
    )
    assert lost(set(app.sent) | set(app.committed), deliveries, faults, CALL_TIMEOUT_S) == []
    assert [d.body for d in deliveries if d.body in app.rolled_back] == []
    assert out_of_order(fifo, app.sequence) == []
    assert lent_twice_at_once(fifo) == []  # a FIFO lending is held by the next leader
    assert lent_twice_at_once(others, faults, starts, induced=induced or []) == []
    assert early(deliveries, app.due) == []
    assert sorted(b for b in timed if b in app.due) == sorted(app.due)  # each timer delivered once


async def test_5x_producer_and_simple_consumers_across_a_kill_a_restart_and_a_pause(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    env = {**cli_env, **CHECK_QUICKLY}
    app = App()
    faults: list[float] = []
    async with raft_group(tmp_path, env) as (data, ns, client):
        first = await elected_master(client, ns)
        on = BrokerClient(first, client)
        for topic in (NORMAL, FIFO, TIMED, TX):
            await on.create_topic(topic, 2)
        for topic in (NORMAL, FIFO, TIMED, TX):
            await topic_everywhere(client, data, topic)
        await groups_everywhere(client, data, on)
        access = next(a for a in member_addrs(data) if a != first)
        running = await asyncio.to_thread(start_app, app, await grpc_port(client, access))
        back: Daemon | None = None
        try:
            await asyncio.sleep(10)
            # the leader killed; the next one lends on
            faults.append(time.time())
            first_grpc = await grpc_port(client, first)
            os.kill(member_pid(data, first), signal.SIGKILL)
            second = await new_master(client, ns, first)
            await asyncio.sleep(35)  # the clients' route refresh (30 s) finds it
            # the killed member back; then the leader paused past the election timeout
            restarted = time.time()  # (it may start a term: an election it stood in)
            back = restart_member(data, first, first_grpc, env)
            await asyncio.sleep(15)
            pid = member_pid(data, second)
            faults.append(time.time())
            os.kill(pid, signal.SIGSTOP)
            try:
                third = await new_master(client, ns, second)
                await asyncio.sleep(5)
            finally:
                os.kill(pid, signal.SIGCONT)
            faults.append(time.time())
            await asyncio.sleep(35)
            app.stop_sending.set()
            print(f"faults at {faults}, sending stopped at {time.time():.1f}")
            expected = set(app.sent) | set(app.committed)

            await drained(app, expected, faults, lambda: unsettled(app, expected, faults))
            await asyncio.sleep(INVISIBLE_S + 5)  # what should not come back, were it to come
        finally:
            await asyncio.to_thread(running.stop)
            if back is not None:
                await asyncio.to_thread(back.stop)
        # (the restarted member may have been the leader: its stop makes the other two elect one)
        leader = await elected_master(client, ns)
        timed = [b.decode() for q in (0, 1) for b in await pull_all(BrokerClient(leader, client), TIMED, q)]
    # every leader's start: one the faults (or the restart) did not make (a member's loop held past its
    # followers' patience on a busy host) lends a normal message again as a fault's does, a couple at most
    terms = takeovers(sorted(data.glob("store-broker-a-n*")))

    print("terms:", ", ".join(f"{term} at {at:.1f}" for at, term in terms))
    starts = [at for at, _ in terms]
    check_app(app, faults, timed, f"leaders {first} {second} {third}", starts, [restarted])
