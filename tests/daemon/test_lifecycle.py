"""Pidfiles, termination helpers and periodic tasks shared by the daemons (daemon/lifecycle.py)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from daemon.lifecycle import AlreadyRunningError, PidFile, every, read_pid, running_pid, terminate
from tests.support.waiting import wait_until


def test_pidfile_holds_our_pid_and_removes_it(tmp_path: Path) -> None:
    path = tmp_path / "x.pid"
    with PidFile(path):
        assert read_pid(path) == os.getpid()
    assert not path.exists()


def test_stale_pidfile_is_replaced_and_live_one_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.pid"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    path.write_text(f"{dead.pid}\n")
    assert running_pid(path) is None
    with PidFile(path):
        assert read_pid(path) == os.getpid()

    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        path.write_text(f"{sleeper.pid}\n")
        with pytest.raises(AlreadyRunningError) as info, PidFile(path):
            pass
        assert info.value.pid == sleeper.pid
        reaper = threading.Thread(target=sleeper.wait)  # a real daemon is not our child: reap it
        reaper.start()
        assert terminate(path, timeout=10) == sleeper.pid
        reaper.join()
    finally:
        sleeper.kill()
        sleeper.wait()
    assert terminate(path) is None  # nothing left to stop


async def test_every_awaits_what_the_action_returns_and_outlives_its_failures(
    caplog: pytest.LogCaptureFixture,
) -> None:
    events: list[object] = []

    async def slow() -> None:
        await asyncio.sleep(0.05)  # five periods: no call may start meanwhile
        events.append("slow done")

    async def failing() -> None:
        raise RuntimeError("boom in the awaitable")

    def action() -> object:
        calls = events.count("call")
        events.append("call")
        if calls == 0:
            return slow()
        if calls == 1:
            return failing()
        if calls == 2:
            raise RuntimeError("boom in the call")
        return asyncio.to_thread(lambda: events.append(threading.get_ident()))

    task = asyncio.create_task(every(0.01, action))
    try:
        await wait_until(lambda: any(isinstance(e, int) for e in events), timeout=10)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert events[:4] == ["call", "slow done", "call", "call"]
    assert next(e for e in events if isinstance(e, int)) != threading.get_ident()  # ran in a worker thread
    assert "boom in the awaitable" in caplog.text and "boom in the call" in caplog.text


async def test_every_cancelled_ends_after_the_work_it_awaits() -> None:
    """A thread cannot be stopped: the periodic write a shutdown cancels finishes before the task ends."""
    started, release = threading.Event(), threading.Event()
    finished: list[bool] = []

    def write() -> None:
        started.set()
        release.wait(10)
        finished.append(True)

    task = asyncio.create_task(every(0.001, lambda: asyncio.to_thread(write)))
    try:
        await asyncio.to_thread(started.wait, 10)
        task.cancel()
        await asyncio.sleep(0.05)
        assert not task.done()  # still waiting for the write
    finally:
        release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert finished == [True]
