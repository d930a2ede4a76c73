"""Ctrl-C around a ``whole_output`` write, with real signals: the press waits for the write and then
reaches the handler it was meant for, once; a second one while the write is still blocked ends the
process; and nothing a handler raises around the write can leave a later Ctrl-C unheard.

A design that blocked SIGINT with a thread mask around each write lost that last guarantee: a handler
raising between two Python statements (here a SIGALRM timer's, as pytest-timeout's) left the mask up,
every later press was held pending for ever, and each program the process started inherited the block
(a ``msg tail`` spawned by it ignored Ctrl-C). :func:`test_a_raising_handler_storm_leaves_ctrl_c_heard`
found such a leak within a second there; each press test runs a real child process."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from tests.support.bounded import finish, read_line
from tests.support.paths import ROOT

#: The main thread enters and leaves ``whole_output`` while a SIGALRM every 0.3 ms raises wherever it
#: lands, for ``argv[1]`` seconds; then SIGINT must be unblocked, reach the default handler, and reach a
#: program started afterwards (a child inherits its parent thread's signal mask across exec).
STORM_CHILD = """
import os, signal, subprocess, sys, time
from mqctl.interrupts import whole_output
from tests.support.cli import sigint_blocked

class Alarm(Exception):
    pass

def alarm(signum, frame):
    # raised wherever it lands in a write's entry or exit (their frames), never in this loop's own code
    if frame is not None and frame.f_code.co_name in ("one_write", "__enter__", "__exit__", "_press"):
        raise Alarm

def one_write():
    with whole_output:
        pass

signal.signal(signal.SIGALRM, alarm)
signal.setitimer(signal.ITIMER_REAL, 0.0003, 0.0003)
rounds = raised = 0
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    rounds += 1
    try:
        one_write()
    except Alarm:
        raised += 1
    if sigint_blocked():
        print("blocked after", rounds, "rounds", flush=True)
        break
signal.setitimer(signal.ITIMER_REAL, 0)
assert raised, "no alarm ever raised around a write"
assert not sigint_blocked(), "SIGINT left blocked"
try:
    signal.raise_signal(signal.SIGINT)
    print("press lost", flush=True)
except KeyboardInterrupt:
    pass
child = subprocess.Popen([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(30)"],
                         stdout=subprocess.PIPE, text=True)
assert child.stdout.readline() == "up\\n"
child.send_signal(signal.SIGINT)
child.wait(timeout=10)
print("ok", rounds, raised, child.returncode, flush=True)
"""


def _child(source: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", source, *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
def test_a_raising_handler_storm_leaves_ctrl_c_heard() -> None:
    child = _child(STORM_CHILD, "1.0")
    out, err = finish(child, 60)
    assert child.returncode == 0, out + err
    ok, _rounds, raised, code = out.split()
    assert ok == "ok" and int(raised) > 0 and int(code) == -signal.SIGINT, out + err


#: A command on the event loop (as ``msg tail``) writing rows with a slow write inside ``whole_output``,
#: then idle in a long wait: ``argv`` is the write's seconds, the rows, and whether the loop takes SIGINT
#: with ``add_signal_handler`` (as ``bench``) instead of asyncio's runner.
LOOP_CHILD = """
import asyncio, os, sys, time, signal
from daemon.remoting.loop import run
from mqctl.output import RowStream

slow, rows, own = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "own"
told = []

class Slow:
    def write(self, text):
        os.write(2, b"writing\\n")
        time.sleep(slow)
        return sys.stdout.write(text)
    def flush(self):
        sys.stdout.flush()

async def main():
    if own:
        asyncio.get_running_loop().add_signal_handler(signal.SIGINT, lambda: told.append(1))
    stream = RowStream("json", out=Slow())
    for i in range(rows):
        stream({"row": i})
    os.write(2, b"idle\\n")
    for _ in range(300):
        await asyncio.sleep(0.1)
        if told:
            os.write(2, f"told {len(told)}\\n".encode())
            return

try:
    run(main())
except KeyboardInterrupt:
    os.write(2, b"interrupted\\n")
    sys.exit(130)
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("slow", "rows", "press_at", "handler"),
    [
        (0.5, 1, "writing", "runner"),  # taken while writing: handed to the runner after it
        (0.5, 3, "writing", "runner"),  # the rows after the press are still whole ones
        (0.0, 1, "idle", "runner"),  # idle in the loop after a write: the runner's own
        (0.0, 3, "idle", "runner"),
        (0.5, 1, "writing", "own"),  # a loop's add_signal_handler: told once, after the write
        (0.0, 1, "idle", "own"),
    ],
)
def test_a_press_reaches_a_loop_whenever_it_comes(
    slow: float, rows: int, press_at: str, handler: str
) -> None:
    child = _child(LOOP_CHILD, str(slow), str(rows), handler)
    try:
        while press_at not in (line := read_line(child, child.stderr)):
            assert line, f"exited ({child.wait(10)}) before it said {press_at!r}"
        time.sleep(0.1)
        child.send_signal(signal.SIGINT)
        out, err = finish(child, 20)
    finally:
        child.kill()  # a no-op once it exited
    assert "".join(f'{{"row": {i}}}\n' for i in range(rows)).startswith(out) and out.endswith("\n"), out
    if handler == "runner":
        assert child.returncode == 130 and err.endswith("interrupted\n"), err
    else:
        assert child.returncode == 0 and err.endswith("told 1\n"), err
        assert out.count("\n") == rows


#: ``argv[1]`` presses (``signal.raise_signal``, delivered at once) inside one write under Python's own
#: handler: one press is a ``KeyboardInterrupt`` after the write, two end the process there.
PRESSES_CHILD = """
import os, signal, sys
from mqctl.interrupts import whole_output

presses = int(sys.argv[1])
try:
    with whole_output:
        for _ in range(presses):
            signal.raise_signal(signal.SIGINT)
        os.write(1, b"written whole\\n")
except KeyboardInterrupt:
    os.write(1, b"interrupted after\\n")
assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
"""


@pytest.mark.parametrize("presses", [0, 1, 2])
def test_one_press_waits_for_the_write_and_two_end_the_process(presses: int) -> None:
    child = _child(PRESSES_CHILD, str(presses))
    out, err = finish(child, 30)
    if presses == 2:
        assert (child.returncode, out) == (130, "")
        assert err == "mqctl: error: interrupted twice while writing output: exiting now, output cut short\n"
    else:
        assert (child.returncode, err) == (0, "")
        assert out == "written whole\n" + ("interrupted after\n" if presses else "")


async def test_a_work_cancelled_from_within_is_not_a_reader_gone() -> None:
    """A tail whose own task was cancelled (a queue's reader cancelled by a route watch, a cancel nothing
    caught) read as stdout's reader gone: BrokenPipeError, a quiet exit 0, with nothing said."""
    import asyncio

    from mqctl.interrupts import unless_reader_leaves

    async def cancelled_within() -> int:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        await asyncio.sleep(0)
        return 1

    with pytest.raises(asyncio.CancelledError):
        await unless_reader_leaves(cancelled_within())
