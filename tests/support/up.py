"""One `mqctl up` subprocess runner: start it, wait for its "ready:" line, drain its log, stop it with Ctrl-C."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.paths import ROOT

#: Bounds, each well inside pytest's timeout: `mqctl up` printing its "ready:" line (its members start
#: one after another, slowly on a loaded host), exiting after Ctrl-C, and one command against it.
READY_WITHIN = 120.0
STOP_WITHIN = 30.0
COMMAND_WITHIN = 60.0


@dataclass
class Up:
    """A running `mqctl up`: its process, its "ready:" line (the last of ``said``, its log up to there),
    and (once stopped) its exit code and the rest of its log."""

    proc: subprocess.Popen[str]
    said: list[str]
    env: dict[str, str]
    code: int | None = None
    after: str = ""

    @property
    def ready(self) -> str:
        return self.said[-1]

    def mq(self, *args: str) -> Any:
        """Run `mqctl ARGS -o json` against this NameServer; it must exit 0. Returns the parsed output."""
        done = subprocess.run(
            [sys.executable, "-m", "mqctl", *args, "-o", "json"],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=COMMAND_WITHIN,  # (killed past it: a command's own timeouts are shorter)
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def text(self, *args: str) -> str:
        """Run `mqctl ARGS` against this NameServer as given (its table, off a terminal); it must exit 0."""
        done = subprocess.run(
            [sys.executable, "-m", "mqctl", *args],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=COMMAND_WITHIN,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout


@asynccontextmanager
async def mqctl_up(data: Path | None, cli_env: dict[str, str], ns_port: int, *args: str) -> AsyncIterator[Up]:
    """`mqctl up --data DATA --namesrv-port NS_PORT ARGS` (no ``--data`` for None: the default data
    directory of ``cli_env``), ready on entry; SIGINT and reaped on exit, unless it exited already.

    The caller asserts on ``Up.code`` after the block, so a failure inside it is not masked."""
    argv = [sys.executable, "-m", "mqctl", "up", "--namesrv-port", str(ns_port), *args]
    if data is not None:
        argv[4:4] = ["--data", str(data)]
    # its own process group: a kill past STOP_WITHIN reaches the members it started too
    proc = subprocess.Popen(
        argv, cwd=ROOT, env=cli_env, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    drain: asyncio.Task[str] | None = None
    failed = False
    try:
        assert proc.stderr is not None
        line = ""
        seen: list[str] = []
        try:
            async with asyncio.timeout(READY_WITHIN):
                while "ready:" not in line:
                    line = await asyncio.to_thread(proc.stderr.readline)
                    assert line, "mqctl up exited before it was ready:\n" + "".join(seen[-40:])
                    seen.append(line)
        except TimeoutError:
            raise AssertionError(
                f"mqctl up not ready in {READY_WITHIN:g} s; its log so far:\n" + "".join(seen[-40:])
            ) from None
        drain = asyncio.create_task(asyncio.to_thread(proc.stderr.read))  # its log must not fill the pipe
        up = Up(proc, seen, {**cli_env, "NAMESRV_ADDR": f"127.0.0.1:{ns_port}"})
        yield up
    except BaseException:
        failed = True
        raise
    finally:
        if proc.poll() is None:  # (the test may have stopped it: `broker stop`)
            os.kill(proc.pid, signal.SIGINT)
        try:
            code = await asyncio.to_thread(proc.wait, STOP_WITHIN)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # never left running; the test fails on the code
            code = await asyncio.to_thread(proc.wait)
            print(f"mqctl up still running {STOP_WITHIN:g} s after Ctrl-C: killed")
            failed = True
        log = await drain if drain is not None else ""
        if failed:  # the logs go with the tmp dir: shown with the failure (pytest prints captured output)
            print_logs(log, data if data is not None else Path(cli_env["MQCTL_DATA_DIR"]))
    up.code, up.after = code, log


def print_logs(up_log: str, data: Path, lines: int = 80) -> None:
    """The last ``lines`` of `mqctl up`'s own log and of each member's broker.log under ``data``."""
    logs = [("mqctl up", up_log)] + [
        (str(path.relative_to(data)), path.read_text(errors="replace"))
        for path in sorted(data.glob("*/broker.log"))
    ]
    for name, text in logs:
        print(f"----- {name} (last {lines} lines)")
        print("\n".join(text.splitlines()[-lines:]))
