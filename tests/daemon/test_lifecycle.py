"""Pidfiles, termination helpers and periodic tasks shared by the daemons (daemon/lifecycle.py)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import store.supervise as supervise_module
from daemon.lifecycle import (
    AlreadyRunningError,
    PidFile,
    TaskFailedError,
    cancel_tasks,
    every,
    read_pid,
    running_pid,
    supervise,
    terminate,
)
from store.supervise import Restarts, supervised
from tests.support.serving import serve_here
from tests.support.waiting import wait_for, wait_until


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


def errors_with_traceback(caplog: pytest.LogCaptureFixture, name: str) -> list[logging.LogRecord]:
    """The ERROR records that name ``name`` and carry a traceback."""
    return [
        r
        for r in caplog.records
        if r.levelno == logging.ERROR and name in r.getMessage() and r.exc_info is not None
    ]


async def test_a_supervised_task_that_raised_is_logged_and_runs_again(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(supervise_module, "RESTART_DELAY", 0.01)
    runs: list[int] = []

    async def loop() -> None:
        runs.append(len(runs))
        if len(runs) < 3:
            raise KeyError(f"bug {len(runs)}")
        await asyncio.sleep(3600)

    task = supervise(loop, "test-loop")
    try:
        await wait_until(lambda: len(runs) == 3, 10)
        assert not task.done()
        assert [r.exc_info[0] for r in errors_with_traceback(caplog, "test-loop") if r.exc_info] == [
            KeyError,
            KeyError,
        ]
    finally:
        await cancel_tasks([task])
    assert task.cancelled()


async def test_a_supervised_task_that_returns_ends() -> None:
    done: list[bool] = []

    async def once() -> None:
        done.append(True)

    task = supervise(once, "test-once")
    await task
    assert done == [True]


def test_restarts_wait_longer_while_a_loop_fails_at_once_and_from_the_first_delay_after_a_long_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    restarts = Restarts("test-loop")
    delays = []
    for ran_for in (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, supervise_module.MAX_RESTART_DELAY + 1, 0.0):
        try:
            raise RuntimeError("bug")
        except RuntimeError:
            delays.append(restarts.failed(ran_for))
    assert delays == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 1.0, 2.0]
    assert len(errors_with_traceback(caplog, "test-loop")) == 9


class FatalAtStart:
    """A service whose task it cannot go on without fails as soon as it starts."""

    def __init__(self) -> None:
        self.stopped = False
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        async def role_change() -> None:
            raise KeyError("half a role change")

        self.task = supervise(role_change, "role-change", fatal=True)

    async def stop(self) -> None:
        self.stopped = True


async def test_a_fatal_task_s_failure_stops_the_daemon_with_a_non_zero_exit(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from mqctl.errors import DaemonError, translate

    service = FatalAtStart()
    with pytest.raises(TaskFailedError) as info:
        await serve_here(service, 10)
    assert service.stopped  # stopped gracefully: its store flushed, its NameServers told
    assert "role-change" in str(info.value) and "half a role change" in str(info.value)
    (record,) = errors_with_traceback(caplog, "role-change")
    assert "stopping the daemon" in record.getMessage()
    error = translate(info.value)
    assert isinstance(error, DaemonError) and error.exit_code != 0


def test_a_store_thread_that_raised_is_logged_and_runs_again(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(supervise_module, "RESTART_DELAY", 0.01)
    runs: list[int] = []
    stop = threading.Event()

    def loop() -> None:
        runs.append(len(runs))
        if len(runs) < 3:
            raise KeyError(f"bug {len(runs)}")
        stop.wait(10)

    thread = supervised("test-thread", loop, stop)
    thread.start()
    try:
        wait_for(lambda: len(runs) == 3, "the third run")
        assert thread.is_alive()
        assert len(errors_with_traceback(caplog, "test-thread")) == 2
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive()
