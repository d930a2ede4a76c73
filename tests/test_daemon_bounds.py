"""The bounds of a process a test runs (``tests.support.bounded``): a daemon that dies before it serves
fails the wait at once with its log, one that never serves or ignores SIGTERM is killed with its process
group, and the test fails with its log; a line a command never writes, or a Ctrl-C it ignores, fails the
test with its stderr, the command killed. None outlives its test."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import bounded
from tests.support.bounded import Daemon, finish, read_line


async def never() -> bool:
    return False


def started(tmp_path: Path, program: str) -> Daemon:
    """``program`` as a daemon, started, its log in ``tmp_path``."""
    daemon = Daemon([sys.executable, "-c", program], dict(os.environ), tmp_path / "d.log")
    daemon.start()
    return daemon


def gone(pid: int) -> bool:
    """``pid`` is reaped, or a zombie its parent has yet to reap."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1].startswith("Z")
    except FileNotFoundError:
        return True


async def test_a_daemon_that_exits_before_it_serves_fails_the_wait_at_once(tmp_path: Path) -> None:
    program = "import sys; print('broker.conf: no such key: lisenPort', file=sys.stderr); sys.exit(2)"
    daemon = started(tmp_path, program)
    with pytest.raises(pytest.fail.Exception) as failed:
        await daemon.serving(never, timeout=120)
    assert "exited (2) before it served" in str(failed.value)  # its exit ended the wait, not the bound
    assert "no such key: lisenPort" in str(failed.value)


async def test_a_daemon_that_never_serves_is_killed_at_its_bound(tmp_path: Path) -> None:
    program = "import time; print('recovering', flush=True); time.sleep(120)"
    daemon = started(tmp_path, program)
    with pytest.raises(pytest.fail.Exception) as failed:
        await daemon.serving(never, timeout=1)
    assert "not serving 1 s after its start: killed" in str(failed.value) and "recovering" in str(
        failed.value
    )
    assert gone(daemon.pid)


async def test_a_daemon_deaf_to_sigterm_is_killed_with_its_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bounded, "GRACE", 5.0)
    pids = tmp_path / "pids"
    program = (
        "import os, signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}')\n"
        "print('deaf', flush=True)\n"
        "time.sleep(120)\n"
    )
    daemon = started(tmp_path, program)

    async def written() -> bool:
        return pids.exists() and len(pids.read_text().split()) == 2

    await daemon.serving(written, timeout=60)
    with pytest.raises(pytest.fail.Exception) as failed:
        daemon.stop(timeout=1)
    assert "still running 1 s after SIGTERM: killed" in str(failed.value)
    for pid in map(int, pids.read_text().split()):
        for _ in range(100):
            if gone(pid):
                break
            await asyncio.sleep(0.05)
        assert gone(pid), pid


def test_a_line_that_never_comes_fails_with_the_stderr_and_the_process_killed() -> None:
    program = (
        "import sys, time; print('stuck before its first line', file=sys.stderr, flush=True); time.sleep(120)"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", program], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    with pytest.raises(pytest.fail.Exception) as failed:
        read_line(proc, timeout=1)
    assert "no line in 1 s: killed" in str(failed.value)
    assert "stuck before its first line" in str(failed.value)
    assert proc.poll() is not None


def test_a_command_deaf_to_ctrl_c_is_killed_and_fails() -> None:
    program = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "print('up', flush=True); print('ignoring Ctrl-C', file=sys.stderr, flush=True)\n"
        "time.sleep(120)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", program], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert read_line(proc) == "up\n"
    proc.send_signal(signal.SIGINT)
    with pytest.raises(pytest.fail.Exception) as failed:
        finish(proc, 1)
    assert "still running 1 s on: killed" in str(failed.value) and "ignoring Ctrl-C" in str(failed.value)
    assert proc.poll() is not None
