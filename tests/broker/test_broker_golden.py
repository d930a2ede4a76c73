"""Our broker answers the requests recorded from a real RocketMQ 4.9.8 broker as that broker did
(tests/fixtures/golden-frames.json): codes, remarks and response header fields."""

from __future__ import annotations

from typing import Any

from daemon.remoting.command import RemotingCommand
from tests.support.broker import BrokerHandle
from tests.support.golden import golden


async def replay(broker: BrokerHandle, title: str) -> tuple[RemotingCommand, dict[str, Any]]:
    request, body, expected = golden(title)
    ext = {k: str(v) for k, v in request.get("extFields", {}).items()}
    return await broker.call(request["code"], ext, body), expected


async def test_golden_exchanges(broker: BrokerHandle) -> None:
    got, want = await replay(broker, "17 UPDATE_AND_CREATE_TOPIC")
    assert (got.code, got.remark) == (want["code"], want["remark"])

    got, want = await replay(broker, "310 SEND_MESSAGE_V2 (message 0)")
    assert got.code == want["code"] and got.ext_fields.keys() == want["extFields"].keys()
    assert got.ext_fields["queueOffset"] == want["extFields"]["queueOffset"]
    assert got.ext_fields["MSG_REGION"] == "DefaultRegion" and got.ext_fields["TRACE_ON"] == "true"

    got, want = await replay(
        broker, "310 SEND_MESSAGE_V2 to a topic that does not exist (auto-create via TBW102)"
    )
    assert got.code == want["code"] and got.ext_fields["queueOffset"] == "0"

    for title in (
        "11 PULL_MESSAGE without subscription flag, group has no live consumer",
        "11 PULL_MESSAGE (topic does not exist)",
        "12 QUERY_MESSAGE (key not found)",
        "9999 unknown request code (broker)",
        "14 QUERY_CONSUMER_OFFSET (group never committed, empty queue)",
        "36 CONSUMER_SEND_MSG_BACK",
    ):
        got, want = await replay(broker, title)
        assert (got.code, got.remark) == (want["code"], want.get("remark")), title
        assert got.ext_fields.keys() == want.get("extFields", {}).keys(), title
