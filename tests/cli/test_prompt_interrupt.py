"""Ctrl-C at the question a delete asks once it has found what it deletes (topic delete, group delete):
the question is asked inside the command's event loop, where asyncio's runner only cancels the work at
its next ``await``, and a prompt reading the terminal has none. The first Ctrl-C was ignored (a second
one ended it); it now ends the command at once, nothing deleted, exit 130."""

from __future__ import annotations

import os
import platform
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.daemons import local_cluster
from tests.support.cli import RunCli
from tests.support.paths import ROOT

#: Generous bounds for a loaded host: the question showing, and the exit after the press.
ASKED_WITHIN = 60.0
EXITED_WITHIN = 30.0
#: The number of read(2) in /proc/PID/syscall, where it is known.
READ_SYSCALL = {"x86_64": "0", "aarch64": "63"}


def _read_until(master: int, text: str, seen: bytearray, timeout: float) -> bool:
    """Read the terminal into ``seen`` until ``text`` shows or it closes; whether it showed."""
    end = time.monotonic() + timeout
    while text.encode() not in seen and time.monotonic() < end:
        if select.select([master], [], [], 0.2)[0]:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the terminal's other end closed: the program exited
                break
            if not chunk:
                break
            seen += chunk
    return text.encode() in seen


def _wait_reading(pid: int, timeout: float) -> None:
    """Wait until ``pid`` sleeps reading its stdin, as it does while a person reads the question: a press
    between the prompt's write and that read is a race of its own (the signal comes before the read
    that it would interrupt), which no person's Ctrl-C, seconds later, meets."""
    number = READ_SYSCALL.get(platform.machine())
    end = time.monotonic() + timeout
    while number is not None and time.monotonic() < end:
        try:
            if Path(f"/proc/{pid}/syscall").read_text().split()[:2] == [number, "0x0"]:
                return
        except OSError:
            return  # not shown here: the prompt's own write, seen, is as near as can be told
        time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.parametrize("noun", ["topic", "group"])
def test_ctrl_c_at_a_delete_s_question_ends_it_at_once(
    noun: str, cli: RunCli, cli_env: dict[str, str], tmp_path: Path
) -> None:
    flag = "-t" if noun == "topic" else "-g"
    with local_cluster(tmp_path) as cluster:
        env = {**cli_env, "NAMESRV_ADDR": cluster.namesrv_addr}
        assert cli(noun, "create", flag, "Asked", env=env).code == 0
        master, slave = pty.openpty()
        argv = [sys.executable, "-m", "mqctl", noun, "delete", flag, "Asked"]
        proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, cwd=ROOT, env=env)
        os.close(slave)
        seen = bytearray()
        try:
            assert _read_until(master, "[y/N]", seen, ASKED_WITHIN), seen.decode(errors="replace")
            _wait_reading(proc.pid, ASKED_WITHIN)
            proc.send_signal(signal.SIGINT)  # what the terminal sends for Ctrl-C
            try:
                code = proc.wait(timeout=EXITED_WITHIN)
            except subprocess.TimeoutExpired:
                raise AssertionError(f"still asking after Ctrl-C: {seen.decode(errors='replace')}") from None
            _read_until(master, "\n\n", seen, 1.0)  # (what is left of its output)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            os.close(master)
        shown = seen.decode(errors="replace")
        assert code == 130 and "mqctl: error: aborted" in shown, shown
        assert cli(noun, "show", flag, "Asked", env=env).code == 0  # nothing deleted
