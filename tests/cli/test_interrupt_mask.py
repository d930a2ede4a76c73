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
