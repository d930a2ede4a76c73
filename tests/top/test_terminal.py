"""Smoke test: the real ``mqctl top`` in a real terminal, driven by keys, read off the screen.

tmux gives a true screen (``capture-pane``); where tmux is missing the same test runs on a bare
pseudo-terminal and reads the text out of the output stream, so the test never needs skipping.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import shutil
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import pytest

from tests.daemons import LocalCluster, handle, local_cluster
from tests.support.paths import ROOT

COLS, ROWS = 120, 36
KEYS = {"tab": ("Tab", b"\t"), "enter": ("Enter", b"\r"), "escape": ("Escape", b"\x1b")}
_ANSI = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][0-9A-B]|\x1b[=>]|\x1b\][^\x07]*\x07")


class Terminal(Protocol):
    def screen(self) -> str: ...

    def send(self, key: str) -> None: ...

    def alive(self) -> bool: ...

    def close(self) -> None: ...


class Tmux:
    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.name = f"mqctl-top-{os.getpid()}-{time.monotonic_ns()}"
        exports = " ".join(f"{k}={_quote(v)}" for k, v in env.items() if k.startswith(("MQCTL_", "PYTHON")))
        command = f"cd {_quote(str(ROOT))} && env {exports} {' '.join(map(_quote, argv))}"
        subprocess.run(
            ["tmux", "new-session", "-d", "-s", self.name, "-x", str(COLS), "-y", str(ROWS), command],
            check=True,
            env=env,
        )

    def screen(self) -> str:
        out = subprocess.run(["tmux", "capture-pane", "-p", "-t", self.name], capture_output=True, text=True)
        return out.stdout

    def send(self, key: str) -> None:
        subprocess.run(["tmux", "send-keys", "-t", self.name, KEYS.get(key, (key, b""))[0]], check=True)

    def alive(self) -> bool:
        return subprocess.run(["tmux", "has-session", "-t", self.name], capture_output=True).returncode == 0

    def close(self) -> None:
        subprocess.run(["tmux", "kill-session", "-t", self.name], capture_output=True)


class Pty:
    """A pseudo-terminal of COLS x ROWS; the screen is the text of everything written so far."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
        self.proc = subprocess.Popen(
            argv, stdin=slave, stdout=slave, stderr=slave, cwd=ROOT, env=env, start_new_session=True
        )
        os.close(slave)
        self.master = master
        self.output = bytearray()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:
                return
            if not chunk:
                return
            self.output += chunk

    def screen(self) -> str:
        return _ANSI.sub(b"", bytes(self.output)).decode("utf-8", "replace")

    def send(self, key: str) -> None:
        os.write(self.master, KEYS.get(key, (key, key.encode()))[1])

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        os.close(self.master)


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def wait_for(term: Terminal, needle: str, *, after: int = 0, limit: float = 30) -> str:
    """Poll the screen until ``needle`` shows (a wait, not a timing assertion: the limit only ends a hang)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        screen = term.screen()
        if needle in screen[after:]:
            return screen
        time.sleep(0.1)
    raise AssertionError(f"{needle!r} never appeared; screen:\n{term.screen()[-3000:]}")


@pytest.fixture(params=["tmux", "pty"])
def terminal_kind(request: pytest.FixtureRequest) -> str:
    if request.param == "tmux" and shutil.which("tmux") is None:
        pytest.skip("tmux is not installed; the pty variant covers the same path")
    return str(request.param)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with local_cluster(tmp_path) as running:
        client = handle(running)
        for i in range(3):
            running.loop.run(client.send("smoke-orders", b"hello", queue_id=i))
        yield running


@pytest.mark.slow
def test_top_in_a_real_terminal(cluster: LocalCluster, cli_env: dict[str, str], terminal_kind: str) -> None:
    env = {**cli_env, "TERM": "xterm-256color", "COLUMNS": str(COLS), "LINES": str(ROWS)}
    argv = [sys.executable, "-m", "mqctl", "top", "-n", cluster.namesrv_addr, "--interval", "1"]
    term: Terminal = Tmux(argv, env) if terminal_kind == "tmux" else Pty(argv, env)
    try:
        wait_for(term, "broker-a")
        mark = len(term.screen()) if terminal_kind == "pty" else 0
        term.send("2")
        screen = wait_for(term, "smoke-orders", after=mark)
        assert "not available without" not in screen  # the metrics endpoint was found
        term.send("/")
        wait_for(term, "filter by name", after=mark)
        for ch in "smoke":
            term.send(ch)
        term.send("enter")
        wait_for(term, "1 of 1 topic matching 'smoke'", after=mark)  # RocketMQ's own topics hidden
        term.send("q")
        deadline = time.monotonic() + 15
        while term.alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not term.alive()
    finally:
        term.close()
