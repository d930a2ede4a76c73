"""Pidfiles and termination helpers shared by the daemons (daemon/lifecycle.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from daemon.lifecycle import AlreadyRunningError, PidFile, read_pid, running_pid, terminate


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
