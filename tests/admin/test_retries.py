"""Admin retries the answers that mean "not done, try later", within a bounded budget, and nothing else."""

from __future__ import annotations

import time
from collections.abc import Iterable

import pytest

from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.errors import RemotingCommandError
from mqctl.admin.client import Admin


class ScriptedTransport:
    """A Transport answering each request with the next code of ``codes`` (then SUCCESS)."""

    signer = None

    def __init__(self, codes: Iterable[int]) -> None:
        self.codes = list(codes)
        self.sent: list[RemotingCommand] = []

    async def invoke_checked(
        self,
        addr: str,
        request: RemotingCommand,
        timeout: float = 3.0,
        expect: Iterable[int] = (ResponseCode.SUCCESS,),
    ) -> RemotingCommand:
        self.sent.append(request)
        code = self.codes.pop(0) if self.codes else ResponseCode.SUCCESS
        if code not in tuple(expect):
            raise RemotingCommandError(code, f"scripted {code}")
        return request.make_response(code)

    async def close(self) -> None:
        return None


async def _call(transport: ScriptedTransport) -> RemotingCommand:
    admin = Admin(["127.0.0.1:9876"], client=transport)  # type: ignore[arg-type]
    return await admin.call("127.0.0.1:10911", RequestCode.GET_BROKER_RUNTIME_INFO)


async def test_busy_answers_are_sent_again_until_one_succeeds() -> None:
    transport = ScriptedTransport([ResponseCode.SYSTEM_BUSY, ResponseCode.FLOW_CONTROL])
    response = await _call(transport)
    assert response.code == ResponseCode.SUCCESS and len(transport.sent) == 3
    assert len({id(r) for r in transport.sent}) == 3  # a request of its own each time (the client numbers it)


async def test_the_budget_is_bounded_and_the_last_answer_is_the_error() -> None:
    transport = ScriptedTransport([ResponseCode.SERVICE_NOT_AVAILABLE] * 10)
    started = time.monotonic()
    with pytest.raises(RemotingCommandError) as raised:
        await _call(transport)
    assert raised.value.code == ResponseCode.SERVICE_NOT_AVAILABLE and len(transport.sent) == 3
    assert time.monotonic() - started < 2.0


@pytest.mark.parametrize(
    "code",
    [
        ResponseCode.FLUSH_DISK_TIMEOUT,
        ResponseCode.FLUSH_SLAVE_TIMEOUT,
        ResponseCode.SLAVE_NOT_AVAILABLE,
        ResponseCode.TOPIC_NOT_EXIST,
    ],
)
async def test_answers_after_which_the_broker_may_have_acted_are_not_sent_again(code: int) -> None:
    transport = ScriptedTransport([code])
    with pytest.raises(RemotingCommandError):
        await _call(transport)
    assert len(transport.sent) == 1
