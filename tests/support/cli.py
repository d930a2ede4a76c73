"""Running ``mqctl``: in this process (the default: no interpreter start-up per call) or as a real subprocess.

Both take the same arguments and return the same :class:`CliResult`, so a module switches between them by
which fixture it asks for (``cli`` in-process, ``cli_process`` a subprocess). The in-process run calls the
entry point's own ``main`` against real daemons on loopback, so it checks what a user sees; only what a
process boundary changes is left to the true end-to-end tests, which stay few and marked slow:
the entry point itself (tests/cli/test_root.py), daemons the CLI starts, finds and stops
(tests/namesrv/test_cli.py, tests/broker/test_broker_cli.py, tests/broker/test_broker_up.py), a lock held
by another process, Ctrl-C and closed pipes (the ``Popen`` tests), and Spark in a fresh process
(tests/spark/test_cli.py, test_standalone.py, test_connect.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import importlib
import io
import json
import logging
import os
import pkgutil
import platform
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.paths import ROOT


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


RunCli = Callable[..., CliResult]


def clean_env(config_root: os.PathLike[str] | str) -> dict[str, str]:
    """A clean environment: own config and data dirs, no inherited NameServer or colour settings."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("MQCTL_") and k not in ("NAMESRV_ADDR", "NO_COLOR")
    }
    # which build runs is the suite's choice, not a user setting: a pure run (MQCTL_NATIVE=0) starts
    # pure daemons and CLIs too, so what it tests is what its own process imports
    if "MQCTL_NATIVE" in os.environ:
        env["MQCTL_NATIVE"] = os.environ["MQCTL_NATIVE"]
    env["MQCTL_CONFIG_DIR"] = os.path.join(config_root, "config")
    env["MQCTL_DATA_DIR"] = os.path.join(config_root, "data")
    env["COLUMNS"] = "200"
    # brokers started by tests serve gRPC on a free port, not on 8081 that parallel tests would contend for
    env["MQCTL_GRPC_LISTEN_PORT"] = "0"
    return env


def run_process(
    base_env: dict[str, str],
    *args: str,
    env: dict[str, str] | None = None,
    input: str | None = None,
    timeout: float = 60,
) -> CliResult:
    """The real ``python -m mqctl`` entry point in a subprocess."""
    proc = subprocess.run(
        [sys.executable, "-m", "mqctl", *args],
        capture_output=True,
        text=True,
        env={**base_env, **(env or {})},
        input=input,
        timeout=timeout,
        cwd=ROOT,
    )
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


def sigint_blocked() -> bool:
    """Whether this thread blocks SIGINT: a program it starts inherits that and never sees a Ctrl-C."""
    return hasattr(signal, "pthread_sigmask") and signal.SIGINT in signal.pthread_sigmask(
        signal.SIG_BLOCK, ()
    )


def spawn(base_env: dict[str, str], *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """The real ``python -m mqctl`` entry point, running: for tests that read its output as it comes and
    press Ctrl-C (``send_signal(2)``)."""
    assert not sigint_blocked(), "SIGINT is blocked here: the command would ignore Ctrl-C (an earlier leak)"
    return subprocess.Popen(
        [sys.executable, "-m", "mqctl", *args],
        env={**base_env, **(env or {})},
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


#: The number of write(2) in /proc/PID/syscall, where it is known.
WRITE_SYSCALL = {"x86_64": "1", "aarch64": "64"}


def blocked_writing(proc: subprocess.Popen[str], timeout: float = 60) -> None:
    """Wait until ``proc`` (from :func:`spawn`) is stuck writing its stdout: the pipe holds all it can
    take (up to 64 KiB) and nothing has read it yet, as a slow ``| jq`` or a test that reads only at the
    end. Where /proc does not show the system call a process sleeps in, a pipe that stays full is."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    capacity = fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ)
    number = WRITE_SYSCALL.get(platform.machine())
    queued = 0
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"exited ({proc.returncode}) before its output filled the pipe"
        time.sleep(0.05)
        before, queued = queued, struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0" * 4))[0]
        if not queued or queued != before:  # a write that did not fill a page of the pipe goes through
            continue
        try:
            call = Path(f"/proc/{proc.pid}/syscall").read_text().split()[:2]
        except OSError:
            call = None
        if call == [number, "0x1"] or ((call is None or number is None) and queued > capacity // 2):
            return  # write(1, ...)
    raise AssertionError("the command's output never filled its pipe")


def _text(stream: io.TextIOWrapper) -> str:
    """What a reader with universal newlines (``subprocess.run(text=True)``) gets from ``stream``."""
    stream.flush()
    raw = stream.buffer.getvalue()  # type: ignore[attr-defined]
    return io.TextIOWrapper(io.BytesIO(raw), encoding="utf-8", errors="replace").read()


def _stream(data: bytes = b"") -> io.TextIOWrapper:
    """A text stream with a binary ``.buffer`` (commands write and read raw bodies there), not a tty."""
    return io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", write_through=True)


@contextlib.contextmanager
def _process_state(
    env: dict[str, str], stdin: io.TextIOWrapper, stdout: io.TextIOWrapper, stderr: io.TextIOWrapper
) -> Iterator[None]:
    """Swap in the environment, standard streams and working directory a subprocess would have, and put
    back everything a run changes process-wide (the root logger ``basicConfig`` sets up on each run)."""
    saved_env = dict(os.environ)
    saved_streams = sys.stdin, sys.stdout, sys.stderr
    saved_cwd = os.getcwd()
    root = logging.getLogger()
    saved_handlers, saved_level = list(root.handlers), root.level
    os.environ.clear()
    os.environ.update(env)
    time.tzset()  # a test's TZ, as a new process would read it
    sys.stdin, sys.stdout, sys.stderr = stdin, stdout, stderr
    os.chdir(ROOT)
    try:
        yield
    finally:
        os.chdir(saved_cwd)
        sys.stdin, sys.stdout, sys.stderr = saved_streams
        os.environ.clear()
        os.environ.update(saved_env)
        time.tzset()
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)


def _in_main_thread(fn: Callable[[], int]) -> int:
    """Commands call ``asyncio.run``: inside a running loop (an async test) they get a thread of their own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return fn()
    box: list[int | BaseException] = []

    def target() -> None:
        try:
            box.append(fn())
        except BaseException as exc:
            box.append(exc)

    thread = threading.Thread(target=target, name="mqctl-in-process")
    thread.start()
    thread.join()
    if isinstance(box[0], BaseException):
        raise box[0]
    return box[0]


_pristine: list[tuple[dict[Any, Any], dict[Any, Any]]] = []


def reset_module_state() -> None:
    """Put every private module-level dict of ``mqctl`` (the flags, credentials and output settings one
    invocation records) back as a fresh interpreter has it, so no run sees an earlier run's choices."""
    if not _pristine:
        import mqctl

        for info in pkgutil.walk_packages(mqctl.__path__, "mqctl."):
            if not info.name.startswith(("mqctl.spark", "mqctl.top")):  # heavy, and they keep no such state
                importlib.import_module(info.name)
        for name, module in list(sys.modules.items()):
            if name == "mqctl" or name.startswith("mqctl."):
                for attr, value in vars(module).items():
                    if attr.startswith("_") and not attr.startswith("__") and type(value) is dict:
                        _pristine.append((value, dict(value)))
    for live, fresh in _pristine:
        live.clear()
        live.update(fresh)


_lock = threading.Lock()  # the process state is one: one in-process command at a time


def run_in_process(
    base_env: dict[str, str],
    *args: str,
    env: dict[str, str] | None = None,
    input: str | None = None,
    timeout: float = 60,
) -> CliResult:
    """The same ``mqctl.cli.app.main`` the entry point calls, with this process's state swapped for a
    subprocess's: own environment, stdin from ``input``, stdout and stderr captured. ``timeout`` is
    accepted for the subprocess runner's signature; pytest-timeout bounds a stuck command."""
    from mqctl.cli.app import main

    del timeout
    stdin = _stream((input or "").encode())
    stdout, stderr = _stream(), _stream()

    def call() -> int:
        try:
            return main(list(args))
        except SystemExit as exc:
            return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)

    blocked = sigint_blocked()
    with _lock, _process_state({**base_env, **(env or {})}, stdin, stdout, stderr):
        reset_module_state()
        try:
            code = _in_main_thread(call)
        finally:
            reset_module_state()  # nor does a later test's own client see this run's (TLS, credentials)
    if sigint_blocked() and not blocked:  # this process's later Ctrl-Cs and every program it starts
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        raise AssertionError(f"mqctl {' '.join(args)} left SIGINT blocked in the test process")
    return CliResult(code, _text(stdout), _text(stderr))
