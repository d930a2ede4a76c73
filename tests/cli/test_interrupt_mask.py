"""A write's SIGINT block never outlives the write, whatever a signal handler raises around it.

CPython runs pending signal handlers inside ``signal.pthread_sigmask`` (after the mask has changed) and
between bytecodes, and a handler may raise (the default SIGINT one, a timeout's SIGALRM one). If that
happened while :data:`mqctl.interrupts.whole_output` blocked SIGINT, the block stayed: every later
Ctrl-C of the process was held pending for ever, and every program it started inherited SIGINT blocked
(a ``msg tail`` started by such a process ignored Ctrl-C). These tests raise where a handler would."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
import types
from collections.abc import Iterator
from typing import Any

import pytest

from mqctl import interrupts
from mqctl.interrupts import WholeOutput

pytestmark = pytest.mark.skipif(not interrupts.BLOCKS, reason="no thread signal masks here")


def blocked() -> bool:
    return signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, ())


@pytest.fixture
def whole() -> Iterator[WholeOutput]:
    assert not blocked()
    yield WholeOutput()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # a failed test leaves no block behind


class Interrupted(KeyboardInterrupt):
    """What the default handler raises: here raised by a stand-in for a handler that ran at that point."""


def raising_after(monkeypatch: pytest.MonkeyPatch, how: int) -> list[int]:
    """``signal.pthread_sigmask`` as CPython runs it when a handler is pending and raises: the mask is
    changed, then the handler's exception leaves the call (once, at the first call with ``how``)."""
    calls: list[int] = []

    def pthread_sigmask(h: int, mask: Any) -> set[int | signal.Signals]:
        previous = signal.pthread_sigmask(h, mask)
        calls.append(h)
        if h == how and calls.count(how) == 1:
            raise Interrupted
        return previous

    proxy = types.SimpleNamespace(**{n: getattr(signal, n) for n in dir(signal) if not n.startswith("__")})
    proxy.pthread_sigmask = pthread_sigmask
    monkeypatch.setattr(interrupts, "signal", proxy)
    return calls


def test_a_handler_raising_as_the_write_blocks_sigint_leaves_it_unblocked(
    whole: WholeOutput, monkeypatch: pytest.MonkeyPatch
) -> None:
    raising_after(monkeypatch, signal.SIG_BLOCK)
    with pytest.raises(Interrupted), whole:
        pytest.fail("the body runs only when the entry succeeded")
    assert not blocked()
    with whole:  # and the next write still blocks and unblocks
        assert blocked()
    assert not blocked()


def test_a_handler_raising_as_the_write_ends_leaves_sigint_unblocked(
    whole: WholeOutput, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Raising:
        """The lock ``__exit__`` takes: a pending handler runs (and raises) as a call returns."""

        def __init__(self) -> None:
            self.lock = threading.Lock()
            self.armed = False

        def __enter__(self) -> None:
            self.lock.acquire()

        def __exit__(self, *exc: object) -> None:
            self.lock.release()
            if self.armed:
                self.armed = False
                raise Interrupted

    lock = Raising()
    monkeypatch.setattr(whole, "_lock", lock)
    with pytest.raises(Interrupted), whole:
        assert blocked()
        lock.armed = True
    assert not blocked()


def test_a_program_started_after_an_interrupted_write_gets_ctrl_c(
    whole: WholeOutput, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The symptom: a child inherits its parent thread's signal mask across exec."""
    raising_after(monkeypatch, signal.SIG_BLOCK)
    with pytest.raises(Interrupted), whole:
        pass
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; sys.stdout.write('up\\n'); sys.stdout.flush(); time.sleep(30)",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "up\n"
        child.send_signal(signal.SIGINT)
        child.communicate(timeout=10)
    finally:
        child.kill()
    assert child.returncode == -signal.SIGINT  # ended by the press (Python re-raises it), not still sleeping


#: A command on the event loop (as ``msg tail``) writing rows with a slow write inside ``whole_output``
#: and, optionally, a watcher slow to act on the press it took: ``SLOW`` and ``LATE`` seconds.
LOOP_CHILD = """
import asyncio, os, sys, time, signal
from daemon.remoting.loop import run
from mqctl import interrupts
from mqctl.output import RowStream

slow, late, rows = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])

class Signals:
    def __getattr__(self, name):
        return getattr(signal, name)
    def sigwait(self, wanted):
        number = signal.sigwait(wanted)
        os.write(2, b"taken\\n")
        time.sleep(late)
        return number

class Slow:
    def write(self, text):
        os.write(2, b"writing\\n")
        time.sleep(slow)
        return sys.stdout.write(text)
    def flush(self):
        sys.stdout.flush()

interrupts.signal = Signals()

async def main():
    stream = RowStream("json", out=Slow())
    for i in range(rows):
        stream({"row": i})
    os.write(2, b"idle\\n")
    await asyncio.sleep(30)

try:
    run(main())
except KeyboardInterrupt:
    os.write(2, b"interrupted\\n")
    sys.exit(130)
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("slow", "late", "rows", "press_at"),
    [
        (0.3, 0.0, 1, "writing"),  # taken while writing: raised again after it
        (0.3, 0.6, 1, "writing"),  # taken while writing, acted on after the write: sent on to the loop
        (0.0, 0.0, 1, "idle"),  # idle in the loop after a write: the loop's own
        (0.0, 0.0, 3, "idle"),
    ],
)
def test_a_press_reaches_a_loop_whenever_it_comes(slow: float, late: float, rows: int, press_at: str) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", LOOP_CHILD, str(slow), str(late), str(rows)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stderr is not None
        while (line := child.stderr.readline()) and press_at not in line:
            pass
        time.sleep(0.1)
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=10)
    finally:
        child.kill()
    assert child.returncode == 130, err
    assert err.endswith("interrupted\n") and out.count("\n") == rows
