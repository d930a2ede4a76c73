"""Process lifecycle shared by every daemon (NameServer, broker, `mqctl up`).

Like uvicorn: start → serve → graceful stop on the first SIGINT/SIGTERM, immediate exit on the second.
Also the pieces of running in the background: a pidfile that refuses a second live instance, a
double-fork `daemonize` that reports the child's start-up outcome back to the parent, `terminate`
for `stop` commands, and `supervise` for a daemon's long-lived tasks (none ends silently).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Iterable
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Protocol

from store.supervise import Restarts

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)

#: A serving daemon's collector thresholds. CPython's (700, 10, 10) has a broker collect the youngest
#: generation every few dozen requests, a visible share of its CPU per send; garbage without cycles is
#: freed by reference counting either way, so the rarer collections only delay freeing cycles. But a
#: young collection walks every object of the youngest generation at once, holding the loop for a time
#: that grows with the first threshold: a few thousand keeps each under a millisecond, where 20,000 made
#: them the largest part of the loop's tail once periodic work (stats windows of 10,000 topics, their
#: registration body) allocates tens of thousands of objects; the total time collecting stayed the same
#: (docs/performance.md).
SERVING_GC_THRESHOLD = (3_000, 20, 20)


#: True while :func:`serve` runs a daemon's service (in its task): the process is the daemon's, whose
#: collector :func:`serving_collector` tunes. A service started in another process's code (a test's) leaves
#: that process's collector alone.
_DAEMON: ContextVar[bool] = ContextVar("mqctl_daemon", default=False)


def serving_collector() -> None:
    """Tune a daemon's collector for serving: what start-up built (modules, configs, recovered queues),
    which lives as long as the process, frozen out of every collection from now on, and the per-request
    garbage collected in larger, rarer sweeps (`SERVING_GC_THRESHOLD`). :func:`serve` does it once the
    service's ``start()`` returned; a service whose ``start()`` goes on after it accepts requests (the
    broker then starts its gRPC front and registers with its NameServers, up to the registration's timeout
    when one does not answer) calls it as it opens its port too, or its first requests meet CPython's
    default thresholds and the unfrozen start-up heap, whose full collection takes tens of milliseconds
    (docs/performance.md). Calling it again freezes what was built since. Outside :func:`serve` it does
    nothing."""
    if _DAEMON.get():
        gc.freeze()
        gc.set_threshold(*SERVING_GC_THRESHOLD)


class LifecycleError(Exception):
    """A daemon could not be started, found or stopped."""


class AlreadyRunningError(LifecycleError):
    def __init__(self, pid_file: Path, pid: int) -> None:
        super().__init__(f"already running as pid {pid} (pidfile {pid_file})")
        self.pid = pid


class TaskFailedError(LifecycleError):
    """A task the daemon cannot go on without failed: the daemon stopped (see :func:`supervise`)."""


#: What :func:`serve` does with a :class:`TaskFailedError` (stop the daemon), innermost last.
_fatal_handlers: list[Callable[[TaskFailedError], None]] = []


class Service(Protocol):
    """Anything with an async start and stop (NamesrvController, the broker, ...)."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


async def every(period: float, action: Callable[[], Awaitable[object] | None]) -> None:
    """Run `action` every `period` seconds until cancelled: a daemon's periodic task (an error is logged
    with its traceback, and the next period runs as usual). An awaitable it returns (say
    ``asyncio.to_thread(...)`` for work that blocks, such as a write that fsyncs) is awaited before the
    next period starts; cancelled meanwhile, the task ends when it has finished (a thread cannot be
    stopped: a shutdown that writes the same file next must not race it)."""
    while True:
        await asyncio.sleep(period)
        try:
            pending = action()
            if pending is not None:
                running = asyncio.ensure_future(pending)
                try:
                    await asyncio.shield(running)
                except asyncio.CancelledError:
                    await asyncio.wait([running])
                    raise
        except Exception:
            log.exception("periodic task %s failed", getattr(action, "__name__", action))


def supervise(run: Callable[[], Awaitable[object]], name: str, *, fatal: bool = False) -> asyncio.Task[None]:
    """A daemon's background task that never ends silently: ``run()`` in a task named ``name``; when it
    raises, the exception is logged at ERROR with its traceback and ``run()`` starts again after a delay
    (:class:`store.supervise.Restarts`). ``fatal``: a task whose failure would have the daemon go on
    serving wrong data or none (half a role change): the daemon stops instead, and :func:`serve` raises
    :class:`TaskFailedError` (a non-zero exit). A ``run()`` that returns ends the task."""
    return asyncio.create_task(_supervised(run, name, fatal), name=name)


async def _supervised(run: Callable[[], Awaitable[object]], name: str, fatal: bool) -> None:
    loop = asyncio.get_running_loop()
    restarts = Restarts(f"task {name}")
    while True:
        started = loop.time()
        try:
            await run()
            return
        except Exception as exc:
            if fatal:
                _fail(TaskFailedError(f"task {name} failed: {type(exc).__name__}: {exc}"))
                return
            delay = restarts.failed(loop.time() - started)
        await asyncio.sleep(delay)


def _fail(error: TaskFailedError) -> None:
    """Log the exception being handled and stop the serving daemon (none: a test's, say: logged alone)."""
    if not _fatal_handlers:
        log.error("%s; no daemon serves here to stop", error, exc_info=True)
        return
    log.error("%s; stopping the daemon: going on without it would serve wrong data", error, exc_info=True)
    _fatal_handlers[-1](error)


async def cancel_tasks(tasks: Iterable[asyncio.Task[Any] | None]) -> None:
    """Cancel a service's background tasks, then wait until each has finished (each ends with the
    CancelledError it was sent; other errors propagate)."""
    pending = [task for task in tasks if task is not None]
    for task in pending:
        task.cancel()
    for task in pending:
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def serve(service: Service, on_started: Callable[[], None] | None = None) -> None:
    """Start `service`, run until SIGINT/SIGTERM, then stop it; a second signal exits at once. A fatal
    task's failure (:func:`supervise`) stops it too, and then raises :class:`TaskFailedError`."""
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    received: list[int] = []
    failed: list[TaskFailedError] = []

    def on_failure(error: TaskFailedError) -> None:
        failed.append(error)
        stopping.set()

    def on_signal(signum: int) -> None:
        received.append(signum)
        name = signal.Signals(signum).name
        if len(received) == 1:
            log.info("received %s: shutting down gracefully (send it again to force)", name)
            stopping.set()
        else:
            log.warning("received %s again: exiting immediately", name)
            os._exit(128 + signum)

    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, on_signal, sig)
    _fatal_handlers.append(on_failure)
    daemon = _DAEMON.set(True)
    try:
        await service.start()
        serving_collector()
        try:
            if on_started is not None:
                on_started()
            await stopping.wait()
        finally:
            await service.stop()
    finally:
        _DAEMON.reset(daemon)
        _fatal_handlers.remove(on_failure)
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)
    if failed:
        raise failed[0]


# ------------------------------------------------------------------------------------------- pidfiles


def read_pid(pid_file: Path) -> int | None:
    """The pid recorded in `pid_file`, or None if there is no readable pid."""
    try:
        text = pid_file.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def pid_alive(pid: int) -> bool:
    """Whether `pid` runs; a zombie (exited, not yet reaped by its parent) does not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def running_pid(pid_file: Path) -> int | None:
    """The pid of a live process recorded in `pid_file` (stale files count as not running)."""
    pid = read_pid(pid_file)
    return pid if pid is not None and pid_alive(pid) else None


class PidFile:
    """Holds `path` with our pid while the daemon runs; refuses to overwrite a live one."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __enter__(self) -> PidFile:
        other = running_pid(self.path)
        if other is not None and other != os.getpid():
            raise AlreadyRunningError(self.path, other)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(f"{os.getpid()}\n")
        os.replace(tmp, self.path)
        return self

    def __exit__(self, *exc: object) -> None:
        if read_pid(self.path) == os.getpid():
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()


def terminate(pid_file: Path, timeout: float = 15.0) -> int | None:
    """SIGTERM the daemon recorded in `pid_file` and wait for it to exit.

    Returns the pid that was stopped, None if nothing was running; raises LifecycleError if it is
    still alive after `timeout` seconds.
    """
    pid = running_pid(pid_file)
    if pid is None:
        return None
    terminate_pid(pid, timeout)
    return pid


def terminate_pid(pid: int, timeout: float = 15.0) -> None:
    """SIGTERM `pid` (a daemon found without our pid file, e.g. a Java broker) and wait for it to exit;
    raises LifecycleError if it is still alive after `timeout` seconds."""
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        if time.monotonic() > deadline:
            raise LifecycleError(
                f"pid {pid} still running {timeout:g}s after SIGTERM (send it again to force)"
            )
        time.sleep(0.05)


# ------------------------------------------------------------------------------------------- daemonize


class Daemon:
    """Handle the detached child uses to tell the waiting parent how start-up went."""

    def __init__(self, write_fd: int) -> None:
        self._fd: int | None = write_fd

    def report(self, message: str) -> None:
        """Send one line to the parent (first call only) and let it exit."""
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            os.write(self._fd, (message.replace("\n", " ") + "\n").encode())
        os.close(self._fd)
        self._fd = None


def daemonize(log_file: Path, timeout: float = 30.0) -> Daemon | str:
    """Detach into the background (double fork, new session, stdio to `log_file`).

    In the original process this returns the first line the daemon reports (or a failure text if it
    died before reporting) and the caller should exit; in the daemon it returns a `Daemon` handle.
    """
    log_file.parent.mkdir(parents=True, exist_ok=True)
    read_fd, write_fd = os.pipe()
    if os.fork() > 0:
        os.close(write_fd)
        return _await_report(read_fd, timeout, log_file)
    os.close(read_fd)
    os.setsid()
    if os.fork() > 0:
        os._exit(0)
    sys.stdout.flush()
    sys.stderr.flush()
    out = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)
    os.close(devnull)
    return Daemon(write_fd)


def _await_report(read_fd: int, timeout: float, log_file: Path) -> str:
    deadline = time.monotonic() + timeout
    chunks = b""
    with os.fdopen(read_fd, "rb", buffering=0) as pipe:
        import select

        while b"\n" not in chunks:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([pipe], [], [], left)[0]:
                return f"error: daemon did not report within {timeout:g}s; see {log_file}"
            data = pipe.read(4096)
            if not data:
                return f"error: daemon exited during start-up; see {log_file}"
            chunks += data
    return chunks.decode(errors="replace").splitlines()[0]
