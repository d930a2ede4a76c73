"""Ctrl-C and output: what is being written to stdout is written whole.

A report goes to a pipe or a file whose reader may be slow (``| jq``, a pager not yet scrolled, a test
that reads only at the end): once the pipe holds 64 KiB the write blocks. A Ctrl-C then cut the
document mid-record twice over: Python's ``KeyboardInterrupt`` raised inside the write dropped the
rest, and even a handler that returns (asyncio's runner's) left the write short: CPython's buffered
writer returns a partial count when a signal interrupts a large write, and ``TextIOWrapper`` ignores
it, so the rest is lost without an error. ``mqctl msg resend ... -o json > report.json`` interrupted
left a file that was not JSON, just when it was needed to know what was re-sent.

So inside :data:`whole_output` the main thread blocks SIGINT: no write of it is interrupted. A watcher
thread takes the presses meanwhile (``sigwait``). When the write is done (the reader read, the file
took it) the mask is put back and a press is raised again, in the main thread, to the handler it was
meant for: the default one raises ``KeyboardInterrupt`` between two records, asyncio's runner cancels
the work at its next ``await``, ``bench`` stops its workers. Every writer of stdout (``render``,
``RowStream``, the JSON lines of ``dlq export`` and ``store salvage``, ``check``'s lines) writes one
record, row or document inside it, so a Ctrl-C leaves a closed JSON document, whole lines, whole CSV
and table rows, then one line on stderr and exit 130.

A second Ctrl-C while the write is still blocked (a reader that never reads) ends the process at once
from the watcher, as a second Ctrl-C forces uvicorn's exit: one line on stderr (if it can take it
without blocking), exit 130, the output cut where the reader stopped reading. Python's own exit is
skipped (``os._exit``): it would block again flushing what is left.
"""

from __future__ import annotations

import os
import select
import signal
import threading
from collections.abc import Callable
from types import TracebackType

#: Whether threads have signal masks here (POSIX): elsewhere a write is as Python leaves it.
BLOCKS = hasattr(signal, "pthread_sigmask") and hasattr(signal, "sigwait")
FORCED = b"mqctl: error: interrupted twice while writing output: exiting now, output cut short\n"


class WholeOutput:
    """A reentrant context in which a Ctrl-C waits for the output being written (see the module)."""

    def __init__(self) -> None:
        self._depth = 0
        self._presses = 0
        self._mask: set[int | signal.Signals] | None = None  # the main thread's, before the outermost entry
        self._lock = threading.Lock()
        self._watcher: threading.Thread | None = None

    def __enter__(self) -> None:
        if threading.current_thread() is not threading.main_thread():  # a signal reaches the main thread only
            return
        # engaged only under a Python handler: an ignored SIGINT (SIG_IGN) stays ignored, SIG_DFL kills
        if self._depth == 0 and BLOCKS and callable(signal.getsignal(signal.SIGINT)):
            # CPython runs pending handlers inside pthread_sigmask once the mask has changed, and one may
            # raise (KeyboardInterrupt, a timeout's SIGALRM): the block must not outlive this call then, or
            # every later press is held for ever and each program this process starts inherits it
            before = signal.pthread_sigmask(signal.SIG_BLOCK, ())  # a query: nothing changed if it raises
            if signal.SIGINT in before:  # blocked already: not ours to count or to lift
                self._depth += 1
                return
            try:
                signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
                self._mask = before
                if self._watcher is None:  # started with SIGINT blocked, as its sigwait needs
                    self._watcher = threading.Thread(target=self._watch, name="mqctl-sigint", daemon=True)
                    self._watcher.start()
            except BaseException:  # already leaving: what the watcher counted meanwhile goes with it
                try:
                    with self._lock:
                        self._mask, self._presses = None, 0
                finally:
                    signal.pthread_sigmask(signal.SIG_SETMASK, before)
                raise
        self._depth += 1

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        self._depth -= 1
        if self._depth or self._mask is None:
            return
        mask = self._mask  # only the main thread sets it: a handler raising below cannot skip the restore
        presses = 0
        try:
            with self._lock:
                self._mask = None
                presses, self._presses = self._presses, 0
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        if presses and kind is None:
            signal.raise_signal(signal.SIGINT)  # the write is done: the press goes where it was meant to

    def _watch(self) -> None:
        main = threading.main_thread().ident
        assert main is not None
        while True:
            signal.sigwait({signal.SIGINT})
            with self._lock:
                writing = self._mask is not None
                if writing:
                    self._presses += 1
                presses = self._presses
            if not writing:  # taken as the main thread was leaving its write: it is the main thread's
                signal.pthread_kill(main, signal.SIGINT)
            elif presses >= 2:
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
