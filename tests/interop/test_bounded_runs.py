"""The interop harness' bounds: a client script that waits on a server that never answers stops at its
deadline and says what it waited for; a program that ignores its deadline is killed, never left running."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from tests.jepsen import client
from tests.jepsen.history import History
from tests.support import bounded
from tests.support.ali_ons import node
from tests.support.bounded import run_bounded
from tests.support.silent import silent_server
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.interop, pytest.mark.slow]


async def test_a_script_waiting_on_a_silent_namesrv_says_what_it_waits_for() -> None:
    """The NameServer accepts and reads, never answers: ali-ons' first route request is pending when the
    script's deadline passes, and the failure names it, with its address."""
    async with silent_server() as addr:
        with pytest.raises(AssertionError) as failed:
            await node("consume", addr, "SilentTopic", "CID_SILENT", "1", "0", "0", "60000", deadline=8)
    report = str(failed.value)
    assert "ali-ons script failed (3)" in report  # the watchdog's own exit, before any kill
    assert "interop watchdog: deadline of 8000 ms passed" in report
    assert f"code 105 to {addr}" in report  # GET_ROUTEINFO_BY_TOPIC, unanswered
    assert '"received":0' in report  # the consumer's state


async def test_a_program_past_its_deadline_is_killed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """One that ignores the deadline it is told (and a child of its own) is killed with its process group,
    and the failure shows its stderr."""
    monkeypatch.setattr(bounded, "GRACE", 1.0)
    pids = tmp_path / "pids"
    program = (
        "import os, subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}')\n"
        "print('waiting on nothing', file=sys.stderr, flush=True)\n"
        "time.sleep(120)\n"
    )
    with pytest.raises(pytest.fail.Exception) as failed:
        await run_bounded([sys.executable, "-c", program], deadline=1.0, what="the sleeper")
    assert "the sleeper still running" in str(failed.value) and "waiting on nothing" in str(failed.value)
    for pid in map(int, pids.read_text().split()):
        with pytest.raises(ProcessLookupError):
            await _gone(pid)


async def _gone(pid: int) -> None:
    """Raise ProcessLookupError once ``pid`` is gone (reaped, or a zombie until its parent's end)."""
    for _ in range(100):
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(") ")[1].startswith("Z"):
                    raise ProcessLookupError(pid)
        except FileNotFoundError:
            raise ProcessLookupError(pid) from None
        await asyncio.sleep(0.05)
    os.kill(pid, 0)  # still there: no error, and the test fails


@pytest.mark.parametrize("how", ["told-to-stop", "at-its-deadline"])
async def test_a_jepsen_client_script_that_outstays_its_run_says_what_it_waits_for(
    monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """ali-ons as a Jepsen producer whose NameServer never answers: told to stop, it cannot finish the
    send in hand, and is ended (SIGTERM, then SIGKILL with its group); never stopped, it stops itself at
    its deadline. Either way the run fails with the script's report: the send it was in and the route
    request it waited for (each send fails on its timeout, and the next one waits the same)."""
    monkeypatch.setattr(client, "STOP_GRACE", 2.0)
    monkeypatch.setattr(client, "SCRIPT_DEADLINE", 60.0 if how == "told-to-stop" else 8.0)
    history = History()
    stop = asyncio.Event()
    async with silent_server() as addr:
        producer = client.ScriptProducer.ali_ons(history, "ons0", addr, "SilentTopic", route_refresh=1.0)
        run = asyncio.create_task(producer.run(stop))
        await wait_until(lambda: any(op.type == "invoke" for op in history.ops), 60)
        if how == "told-to-stop":
            stop.set()
        with pytest.raises(AssertionError) as failed:
            await run
    report = str(failed.value)
    if how == "told-to-stop":
        assert "ended: still running 2 s after it was told to stop" in report
        assert "interop watchdog: ended by the harness (SIGTERM)" in report
    else:
        assert "ons0 exited 3" in report  # the watchdog's own exit
        assert "interop watchdog: deadline of 8000 ms passed" in report
    assert 'step "producer.send of message ' in report
    assert f"code 105 to {addr}" in report  # GET_ROUTEINFO_BY_TOPIC, unanswered
    assert producer.proc is not None and producer.proc.returncode is not None
