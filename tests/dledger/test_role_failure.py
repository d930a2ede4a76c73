"""A DLedger role change that fails half-way stops the broker loudly: a leader that could not become master
would hold the leadership and take no sends (or run half its master services), so the group is better
off electing another member."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from daemon.broker.broker import Broker
from daemon.broker.timer import TimerMessageService
from daemon.lifecycle import TaskFailedError
from tests.dledger.test_single import dledger_keys
from tests.support.broker import broker_config
from tests.support.serving import serve_here


async def test_a_leader_whose_takeover_raised_stops_its_broker_with_an_error(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def load(self: TimerMessageService, *, takeover: bool = False) -> None:
        raise KeyError("a bug in the takeover")

    monkeypatch.setattr(TimerMessageService, "load", load)
    broker = Broker(broker_config(tmp_path / "store", **dledger_keys()))
    with pytest.raises(TaskFailedError, match="dledger-to-master") as info:
        await serve_here(broker)
    assert "a bug in the takeover" in str(info.value)
    assert broker.state == "stopping" and broker.config.broker_role == "SLAVE"  # never took a send
    (record,) = [
        r
        for r in caplog.records
        if r.levelno == logging.ERROR and "dledger-to-master" in r.getMessage() and r.exc_info
    ]
    assert "stopping the daemon" in record.getMessage()
