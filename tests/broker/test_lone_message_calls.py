"""A lone message's round trip on a compiled broker (a send, the held pull it wakes, the next pull parked)
runs no interpreted frame outside the pull processor and the loop's own machinery: the store's read (its
offset checks, unit walk and record check), the request headers' parse and construction, the group lookup
and the send's offload decision are compiled. Every interpreted frame is paid per message by a loop that
serves one message a turn."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from daemon.broker.headers import PullMessageRequestHeader
from daemon.remoting.codes import RequestCode, ResponseCode
from store import native
from tests.support.broker import BrokerHandle, send_fields

ROOT = Path(__file__).resolve().parents[2]
SUSPEND_AND_SUBSCRIPTION = 0x2 | 0x4

#: Sources of which no function may run interpreted on the round trip.
COMPILED_ON_THE_PATH = (
    "store/",
    "daemon/broker/headers.py",
    "daemon/remoting/headers.py",
    "daemon/broker/managers/groups.py",
    "daemon/broker/broker.py",
)


def _pull_fields(offset: int, suspend_ms: int) -> dict[str, str]:
    header = PullMessageRequestHeader(
        "G", "Lone", 0, offset, 32, SUSPEND_AND_SUBSCRIPTION, 0, suspend_ms, 0, "*", "TAG"
    )
    return header.to_ext_fields()


async def _parked(handle: BrokerHandle, count: int) -> None:
    while handle.broker.hold.parked != count:
        await asyncio.sleep(0.005)


async def test_a_lone_message_runs_no_interpreted_store_header_or_group_code(broker: BrokerHandle) -> None:
    modules = native.active()
    if not modules or "store.reads" not in modules:
        pytest.skip("the compiled build is not in use here")
    broker.broker.topics.create_system_like("Lone", 1, 6)
    # warm-up: the group's auto-creation, the subscription's parse, the queue's first read
    assert (await broker.send("Lone", b"first")).code == ResponseCode.SUCCESS
    assert (await broker.pull("G", "Lone", 0, 0)).code == ResponseCode.SUCCESS

    seen: set[tuple[str, str]] = set()

    def profile(frame: FrameType, event: str, _arg: Any) -> None:
        if event == "call":
            code = frame.f_code
            seen.add((code.co_filename, code.co_qualname))

    # the client's requests are built before the count: it shares this thread and these header classes
    send, woken_pull, next_pull = send_fields("Lone"), _pull_fields(1, 20_000), _pull_fields(2, 300)
    held = asyncio.create_task(broker.call(RequestCode.PULL_MESSAGE, woken_pull, timeout=30))
    await _parked(broker, 1)
    sys.setprofile(profile)
    try:
        assert (await broker.call(RequestCode.SEND_MESSAGE_V2, send, b"second")).code == ResponseCode.SUCCESS
        woke = await held
        after = asyncio.create_task(broker.call(RequestCode.PULL_MESSAGE, next_pull, timeout=30))
        await _parked(broker, 1)
    finally:
        sys.setprofile(None)
    assert woke.code == ResponseCode.SUCCESS and woke.ext_fields["nextBeginOffset"] == "2"
    assert (await after).code == ResponseCode.PULL_NOT_FOUND

    # a dataclass's generated __init__ (a header's, a result's) is compiled from "<string>"
    assert sorted(name for file, name in seen if file == "<string>" and name.endswith("__init__")) == []
    interpreted = sorted(
        (str(Path(file).relative_to(ROOT)), name)
        for file, name in seen
        if Path(file).is_relative_to(ROOT)
        and str(Path(file).relative_to(ROOT)).startswith(COMPILED_ON_THE_PATH)
    )
    assert interpreted == []
    # the counter saw the round trip: the pull processor (not compiled) ran interpreted
    assert any(file.endswith("processors/pull.py") for file, _ in seen)
