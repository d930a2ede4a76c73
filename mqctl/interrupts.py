"""Ctrl-C and output: what is being written to stdout is written whole, and Ctrl-C still stops the command.

A report goes to a pipe or a file whose reader may be slow (``| jq``, a pager not yet scrolled, a test
that reads only at the end): once the pipe holds 64 KiB the write blocks. A Ctrl-C then cut the
document mid-record: Python's ``KeyboardInterrupt`` raised inside the write dropped the rest.
``mqctl msg resend ... -o json > report.json`` interrupted left a file that was not JSON, just when it was
needed to know what was re-sent.

So inside :data:`whole_output` (the main thread only: Python runs signal handlers there) SIGINT's Python
handler is one that only counts the press. The blocked write is resumed once it returns (CPython retries
a write a handler interrupted, and a buffered writer writes the rest of a short one) and the record, row
or document is finished; then the handler that was there is put back and called once for the press: the
default one raises ``KeyboardInterrupt`` between two records, asyncio's runner cancels the work at its
next ``await``, and a loop's ``add_signal_handler`` callback (``bench``) was already told through the
loop's wake-up fd, which CPython writes whatever Python handler is installed. Every writer of stdout
(``render``, ``RowStream``, the JSON lines of ``dlq export`` and ``store salvage``, ``check``'s lines) writes
one record, row or document inside it, so a Ctrl-C leaves a closed JSON document, whole lines, whole CSV
and table rows, then one line on stderr and exit 130.

No signal mask is ever changed, so none can be left behind: a mask set from Python cannot be made safe
against a handler raising between two statements (a timeout's SIGALRM), and a thread that kept SIGINT
blocked lost every later press and passed the block to each program it started (``msg tail`` spawned by
it ignored Ctrl-C). A handler left installed by such a raise heals itself: a press it takes outside a
write goes straight to the handler it replaced, which is put back.

A press whose write then fails (Ctrl-C at ``mqctl ... | jq`` kills the reader too, and the waiting write
meets EPIPE) is not dropped with the write: :attr:`WholeOutput.pressed` tells the CLI's boundary, which
exits as interrupted (130), not as a reader that left (0).

A second Ctrl-C while the write is still blocked (a reader that never reads) ends the process at once,
as a second Ctrl-C forces uvicorn's exit: one line on stderr (if it can take it without blocking), exit
130, the output cut where the reader stopped reading. Python's own exit is skipped (``os._exit``): it
would block again flushing what is left.

PYTHONUNBUFFERED (``python -u``) leaves stdout without a buffer: its ``TextIOWrapper`` writes to the file
itself and ignores the short count a signal makes a large pipe write return, so the rest of the text was
lost without an error even under a handler that returns. :func:`buffered_stdout` puts a buffered writer
under it (flushed at each newline, as unbuffered output is seen).
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import select
import signal
import stat
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator
from types import FrameType, TracebackType
from typing import Any, TypeVar

FORCED = b"mqctl: error: interrupted twice while writing output: exiting now, output cut short\n"

Handler = Callable[[int, FrameType | None], Any]
T = TypeVar("T")

#: ``signal``'s C functions: its Python wrappers try to turn every handler into an enum member (a
#: ValueError raised and caught per call), most of the cost of a row written inside ``whole_output``.
_signal: Any = getattr(signal, "_signal", signal)


class WholeOutput:
    """A reentrant context in which a Ctrl-C waits for the output being written (see the module)."""

    def __init__(self) -> None:
        self._depth = 0
        self._owner: FrameType | None = None  # the frame running the outermost ``with``
        self._presses = 0
        self._previous: Handler | None = None  # the handler the outermost entry replaced
        self._handler: Handler = self._press  # one bound method: ``getsignal`` is compared with it
        #: A press taken while a write waited that then failed (the reader gone: EPIPE): the command ends
        #: with that error, and the CLI's boundary reports the interrupt, not the closed pipe.
        self.pressed = False

    def __enter__(self) -> None:
        if threading.current_thread() is not threading.main_thread():  # handlers run in the main thread only
            return
        caller = sys._getframe(1)
        if self._depth and not self._inside(caller):  # an exit a raise skipped: that write is over
            self._depth = 0
        if self._depth == 0:
            installed = _signal.getsignal(signal.SIGINT)
            # only over a Python handler: an ignored SIGINT (SIG_IGN) stays ignored, SIG_DFL kills
            if callable(installed):
                if installed is not self._handler:  # ours left behind by a raise: ``_previous`` still holds
                    self._previous = installed
                self._presses = 0
                _signal.signal(signal.SIGINT, self._handler)  # a pending press runs the old handler first
            self._owner = caller
        self._depth += 1

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        self._depth = max(self._depth - 1, 0)
        if self._depth:
            return
        self._owner = None
        previous = self._previous
        if previous is None or _signal.getsignal(signal.SIGINT) is not self._handler:
            return
        presses, self._presses = self._presses, 0
        # a press pending here runs ``_press`` outside the write: passed on to ``previous`` as it comes
        _signal.signal(signal.SIGINT, previous)
        if presses and kind is None:
            previous(signal.SIGINT, None)  # the write is done: the press goes where it was meant to
        elif presses:
            self.pressed = True  # the write failed (``| jq`` killed by the same Ctrl-C): kept, not dropped

    def _inside(self, frame: FrameType | None) -> bool:
        """Whether ``frame`` runs inside the outermost ``with``: the bookkeeping a raise (a handler's, at
        any bytecode) may have left behind is never trusted alone."""
        while frame is not None and frame is not self._owner:
            frame = frame.f_back
        return frame is not None

    def _press(self, signum: int, frame: FrameType | None) -> None:
        previous = self._previous
        if not (self._depth and self._inside(frame)):  # left installed by a raise: no write is under way
            self._depth, self._owner = 0, None
            if previous is not None:
                _signal.signal(signal.SIGINT, previous)
                previous(signum, frame)
            return
        self._presses += 1
        if self._presses >= 2:
            if select.select([], [2], [], 0)[1]:  # a stalled stderr must not hold the exit
                os.write(2, FORCED)
            os._exit(130)


#: ``with whole_output:`` around each write (and flush) of a record, a row or a document to stdout.
whole_output = WholeOutput()


def whole(write: Callable[[str], object]) -> Callable[[str], None]:
    """``write`` (a stream's) with each call written whole: for a command writing JSON lines itself."""

    def written(text: str) -> None:
        with whole_output:
            write(text)

    return written


@contextlib.contextmanager
def ctrl_c_raises() -> Iterator[None]:
    """Python's own SIGINT handler while a command waits for a person inside its event loop: asyncio's
    runner only cancels the work at its next ``await``, and a prompt blocked reading the terminal has
    none, so Ctrl-C at "Delete topic 'T' ...? [y/N]" was ignored (a second one ended it). Only over a
    Python handler, in the main thread (the only one signal handlers run in)."""
    installed = _signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or not callable(installed):
        yield
        return
    _signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        _signal.signal(signal.SIGINT, installed)


def buffered_stdout() -> None:
    """Give the process's stdout a buffered writer where PYTHONUNBUFFERED left it none (see the module)."""
    stream = sys.stdout
    raw = getattr(stream, "buffer", None)
    if stream is None or stream is not sys.__stdout__ or not isinstance(raw, io.RawIOBase):
        return
    assert isinstance(stream, io.TextIOWrapper)
    sys.stdout = io.TextIOWrapper(
        io.BufferedWriter(raw),
        encoding=stream.encoding,
        errors=stream.errors,
        line_buffering=True,
        write_through=True,
    )


async def unless_reader_leaves(work: Awaitable[T], every: float = 0.5) -> T:
    """``work``, or BrokenPipeError once the reader of a piped stdout has closed it: ``msg tail | head -1``
    waited, after the line ``head`` took, for another message to write before it learnt that, and on a
    quiet topic never did. A terminal or a file has no reader to leave: ``work`` alone then."""
    import asyncio

    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_reader_gone(every))
    try:
        await asyncio.wait((task, gone), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for pending in (task, gone):
            pending.cancel()
        await asyncio.gather(task, gone, return_exceptions=True)
    if task.done() and not task.cancelled():
        return task.result()
    if gone.done() and not gone.cancelled():
        raise BrokenPipeError(errno.EPIPE, "the reader of stdout has gone")
    return task.result()  # ``work`` was cancelled from within: that, not a reader gone (a quiet exit 0)


async def _reader_gone(every: float) -> None:
    """Return once stdout is a pipe whose reader has closed it (poll() then reports POLLERR on our end),
    looking every ``every`` seconds; never for anything else."""
    import asyncio

    try:
        fd = sys.stdout.fileno()
        piped = stat.S_ISFIFO(os.fstat(fd).st_mode)
    except (AttributeError, OSError, ValueError):  # no real stdout (a test's StringIO, closed)
        piped = False
    if not piped:
        await asyncio.Event().wait()
    poller = select.poll()
    poller.register(fd, 0)  # no event asked for: POLLERR and POLLHUP are reported whatever the mask
    while not poller.poll(0):
        await asyncio.sleep(every)
