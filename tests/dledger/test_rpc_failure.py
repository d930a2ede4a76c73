"""A request to a peer that fails with an error the remoting layer does not expect (a bug, or a transport
library raising something new) is taken as unanswered, as a timeout is: the machine then asks again. Were
it to escape, the request's task would die with it, its answer never handled, and the leader would push
nothing more to that peer."""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon.dledger.machines import Timings
from daemon.dledger.server import DLedgerServer, DLedgerSettings
from store.dledger_log import DLedgerLog

PEERS = {"n0": "127.0.0.1:1", "n1": "127.0.0.1:2", "n2": "127.0.0.1:3"}


class _Failing:
    """A remoting client whose request raises what the remoting layer never raises."""

    async def invoke(self, *_: object, **__: object) -> object:
        raise ValueError("negative file descriptor")


async def test_a_request_that_fails_unexpectedly_is_taken_as_unanswered_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = DLedgerServer(
        DLedgerSettings("g", "n0", dict(PEERS), str(tmp_path / "n0"), Timings()),
        DLedgerLog(str(tmp_path / "n0")),
        on_commit=lambda: None,
    )
    server.client = _Failing()  # type: ignore[assignment]
    outs = [o for o in server.node.tick(server.node._now + 10**7) if o.peer == "n1"]
    assert outs, "the candidate asks n1 for its vote"
    with caplog.at_level("ERROR"):
        assert await server.rpc(outs[0]) is None
    assert "failed unexpectedly" in caplog.text and "n1" in caplog.text
