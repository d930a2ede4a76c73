"""Running a client program as a subprocess with a bound: a test that drives one never waits on it past
its deadline. A program past its bound is killed (never left running, holding connections to the
daemons the test then stops) and the test fails with the end of its stderr, which says what it waited for.

The interop scripts also know their deadline (``DEADLINE_ENV``, in milliseconds): they stop themselves a
little before the kill and print what they are waiting for (tests/interop/watchdog.js for the Node
scripts). That also bounds them when the test itself is torn down without reaching the kill (pytest's
timeout interrupts the event loop)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

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
