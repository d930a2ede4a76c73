"""Timer properties as a hostile producer writes them: every value is a Java long in decimal or the
send is refused with MESSAGE_ILLEGAL; none parks a message beyond timerMaxDelaySec; no client parks
a record of its own in the timer topic."""

from __future__ import annotations

import asyncio

import pytest

from daemon.remoting.codes import ResponseCode
from store.names import TIMER_TOPIC
from tests.support.broker import BrokerHandle
from tests.support.waiting import wait_until

PROPERTIES = ("TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS")


@pytest.mark.parametrize("prop", PROPERTIES)
async def test_a_timer_value_that_is_no_java_long_is_refused(broker: BrokerHandle, prop: str) -> None:
    # Long.parseLong refuses all but the last (which no client writes); int() takes " 5", "1_000" too
    for value in ("soon", "1e3", "0x10", str(2**63), " 5", "1_000", "--5", "\u0661\u0662"):
        r = await broker.send("Timed", b"x", props={prop: value})
        assert r.code == ResponseCode.MESSAGE_ILLEGAL, (prop, value, r.code, r.remark)
    assert broker.broker.timers.pending == 0


@pytest.mark.parametrize("prop", PROPERTIES)
async def test_a_far_future_through_any_property_is_refused(broker: BrokerHandle, prop: str) -> None:
    far = {
        "TIMER_DELIVER_MS": str(2**63 - 1),
        "TIMER_DELAY_SEC": str(2**62),
        "TIMER_DELAY_MS": str(2**63 - 1),
    }
    r = await broker.send("Timed", b"x", props={prop: far[prop]})
    assert r.code == ResponseCode.MESSAGE_ILLEGAL and "max delay" in (r.remark or ""), r.remark
    assert broker.broker.timers.pending == 0


async def test_no_client_sends_to_the_timer_topic(broker: BrokerHandle) -> None:
    """A record forged into the timer topic (due now, real topic of the forger's choice) would be
    delivered to any topic, past its permissions."""
    forged = {"TIMER_OUT_MS": "1", "REAL_TOPIC": "Victim", "REAL_QID": "0"}
    r = await broker.send(TIMER_TOPIC, b"x", props=forged)
    assert r.code == ResponseCode.NO_PERMISSION, r.remark


@pytest.mark.slow
async def test_a_timer_whose_topic_was_deleted_is_not_served_by_a_topic_made_later(
    broker: BrokerHandle,
) -> None:
    """The operator deleted the topic (and its messages) while the timer waited: a topic of the same
    name created afterwards must not serve the old message."""
    from daemon.remoting.codes import RequestCode

    await broker.create_topic("Gone", 1)
    assert (await broker.send("Gone", b"ghost", queue_id=0, props={"TIMER_DELAY_MS": "500"})).code == 0
    assert (await broker.call(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "Gone"})).code == 0
    await asyncio.sleep(1.5)  # due after 0.5 s, delivered within 1 s of it
    await wait_until(lambda: broker.broker.timers.pending == 0, 10)
    await broker.create_topic("Gone", 1)
    assert broker.broker.store.get_max_offset("Gone", 0) == 0
