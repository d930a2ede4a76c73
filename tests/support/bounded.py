"""Running a client program as a subprocess with a bound: a test that drives one never waits on it past
its deadline. A program past its bound is killed (never left running, holding connections to the
daemons the test then stops) and the test fails with the end of its stderr, which says what it waited for.

The interop scripts also know their deadline (``DEADLINE_ENV``, in milliseconds): they stop themselves a
little before the kill and print what they are waiting for (tests/interop/watchdog.js for the Node
scripts). That also bounds them when the test itself is torn down without reaching the kill (pytest's
timeout interrupts the event loop).

A daemon a test starts and stops itself (a broker it SIGKILLs and restarts) is a :class:`Daemon`: the
same bounds on its start and its stop, and its log shown when one fails."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, NoReturn

import pytest

from tests.support.paths import ROOT

DEADLINE_ENV = "MQCTL_INTEROP_DEADLINE_MS"
# A script stopped by its own deadline exits with this (watchdog.js' EXIT_DEADLINE).
EXIT_DEADLINE = 3
# How long after its own deadline a program has to report and exit before it is killed.
GRACE = 10.0
STDERR_SHOWN = 10000


@dataclass
class Finished:
    """A program that exited: its exit code and both outputs."""

    returncode: int
    stdout: str
    stderr: str

    def stderr_tail(self) -> str:
        return self.stderr[-STDERR_SHOWN:]


async def _drain(stream: asyncio.StreamReader | None, into: bytearray) -> None:
    if stream is None:
        return
    while chunk := await stream.read(65536):
        into += chunk


async def run_bounded(
    argv: Sequence[str | Path],
    *,
    deadline: float,
    what: str,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> Finished:
    """Run ``argv`` (told its ``deadline`` in seconds through ``DEADLINE_ENV``) and return how it exited.
    Past ``deadline`` + ``GRACE`` it is killed and the test fails, showing its stderr. Whatever ends the
    wait (the test's own timeout or cancellation too), the program does not outlive it."""
    proc = await asyncio.create_subprocess_exec(
        *map(str, argv),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=cwd,
        env={**os.environ, **(env or {}), **deadline_env(deadline)},
        start_new_session=True,  # its own group: a kill reaches any child it started too
    )
    out, err = bytearray(), bytearray()
    readers = asyncio.gather(_drain(proc.stdout, out), _drain(proc.stderr, err))
    try:
        try:
            await asyncio.wait_for(proc.wait(), deadline + GRACE)
        except TimeoutError:
            kill_group(proc)
            await proc.wait()
            await asyncio.wait_for(readers, GRACE)
            pytest.fail(
                f"{what} still running {deadline + GRACE:.0f} s after its start: killed. Its stderr ends:\n"
                + err.decode(errors="replace")[-STDERR_SHOWN:]
            )
        try:
            await asyncio.wait_for(readers, GRACE)  # the outputs' ends, once it exited
        except TimeoutError:
            kill_group(proc)  # something it started still holds its output open
            pytest.fail(f"{what} exited ({proc.returncode}) but its output stayed open: its group killed")
    finally:
        if proc.returncode is None:
            kill_group(proc)
            await proc.wait()
        readers.cancel()
    return Finished(proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"))


def deadline_env(deadline: float) -> dict[str, str]:
    """The environment that tells an interop script its deadline of ``deadline`` seconds."""
    return {DEADLINE_ENV: str(int(deadline * 1000))}


def kill_group(proc: asyncio.subprocess.Process) -> None:
    """SIGKILL the program's process group (its session, started for it: ``start_new_session=True``)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


async def end_reporting(proc: asyncio.subprocess.Process, grace: float = GRACE) -> bool:
    """End a program that outstayed its welcome: SIGTERM its group (after SIGCONT, should it be frozen),
    on which an interop script reports what it is waiting for and exits as at its deadline; SIGKILL the
    group if it still runs ``grace`` seconds later. Returns whether it had to be killed."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGCONT)
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        async with asyncio.timeout(grace):
            await proc.wait()
        return False
    except TimeoutError:
        kill_group(proc)
        await proc.wait()
        return True


class Daemon:
    """A daemon a test runs as a process (``mqctl broker start -c ...``): its output goes to ``log`` (shown
    when a wait on it fails), it runs in a process group of its own, and every wait on it is bounded: a
    start that never serves, or a stop that does not end it, fails the test with the log's end, the
    process group killed. ``start`` again restarts it (the log goes on)."""

    def __init__(
        self, argv: Sequence[str | Path], env: dict[str, str], log: Path, *, cwd: Path = ROOT
    ) -> None:
        self.argv = [str(a) for a in argv]
        self.env = env
        self.log = log
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None, "not started"
        return self.proc.pid

    def start(self) -> None:
        assert self.proc is None or self.proc.poll() is not None, "still running"
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.argv, cwd=self.cwd, env=self.env, stdout=out, stderr=out, start_new_session=True
            )

    def log_tail(self, chars: int = STDERR_SHOWN) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""

    def _failed(self, what: str) -> NoReturn:
        pytest.fail(f"{' '.join(self.argv[-3:])}: {what}. Its log ends:\n{self.log_tail()}")

    async def serving(self, up: Callable[[], Awaitable[bool]], timeout: float = 60.0) -> None:
        """Wait until ``up()`` holds; a daemon that exits meanwhile fails the test at once."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            assert self.proc is not None, "not started"
            if self.proc.poll() is not None:
                self._failed(f"exited ({self.proc.returncode}) before it served")
            if await up():
                return
            if loop.time() > deadline:
                self._killpg(signal.SIGKILL)
                self.proc.wait(GRACE)
                self._failed(f"not serving {timeout:g} s after its start: killed")
            await asyncio.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL (a crash: no shutdown hook, no flush), and reap it."""
        assert self.proc is not None, "not started"
        self._killpg(signal.SIGKILL)
        self.proc.wait(GRACE)

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (after SIGCONT, should it be frozen) and wait for its exit; one still running after
        ``timeout`` s is killed with its group and fails the test."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self._killpg(signal.SIGCONT)
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._killpg(signal.SIGKILL)
            self.proc.wait(GRACE)
            self._failed(f"still running {timeout:g} s after SIGTERM: killed")

    def _killpg(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, sig)


def read_line(proc: subprocess.Popen[str], stream: IO[str] | None = None, *, timeout: float = 60.0) -> str:
    """The next line ``proc`` writes on ``stream`` (its stdout unless told), waited for ``timeout`` s at
    most: past that the process is killed (its group, where it leads one) and the test fails with the end
    of its stderr. A line that never comes otherwise holds the test until pytest's timeout, and the
    process after it."""
    stream = stream if stream is not None else proc.stdout
    assert stream is not None, "the process' output is not a pipe"
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    if not got:
        with contextlib.suppress(ProcessLookupError):
            if os.getpgid(proc.pid) == proc.pid:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.kill()
        proc.wait(GRACE)
        reader.join(GRACE)  # the kill closed the pipe: its readline returns
        said = ""
        err = proc.stderr
        if err is not None and stream is not err:
            tail: list[str] = []
            rest = threading.Thread(target=lambda: tail.append(err.read()), daemon=True)
            rest.start()
            rest.join(GRACE)
            said = "".join(tail)[-STDERR_SHOWN:]
        pytest.fail(
            f"{' '.join(map(str, proc.args))}: no line in {timeout:g} s: killed. Its stderr ends:\n{said}"
        )
    return got[0]


def finish(proc: subprocess.Popen[str], timeout: float = 30.0) -> tuple[str, str]:
    """``proc.communicate()`` bounded: its outputs once it exits; one still running after ``timeout`` s
    (it ignored the Ctrl-C it was sent, say) is killed and the test fails with the end of its stderr,
    rather than leave it running as ``communicate``'s own TimeoutExpired does."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        _out, err = proc.communicate(timeout=GRACE)
        pytest.fail(
            f"{' '.join(map(str, proc.args))}: still running {timeout:g} s on: killed. Its stderr ends:\n"
            + (err or "")[-STDERR_SHOWN:]
        )
