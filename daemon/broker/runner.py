"""Running a broker as a process: foreground until SIGINT/SIGTERM, or daemonized, with a pid file.

The pid file lives in the store root (one broker per store, which the store lock enforces anyway) and
holds the pid and the broker's address, so `stop` and `status` find the process from the same
`broker.conf` or `--store` the operator started it with.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from daemon.broker.broker import Broker
from daemon.broker.config import BrokerConfig

log = logging.getLogger(__name__)

PID_FILE_NAME = "broker.pid"


@dataclass(frozen=True, slots=True)
class PidInfo:
    pid: int
    addr: str


def pid_file(store_root: str | Path) -> Path:
    return Path(store_root) / PID_FILE_NAME


def read_pid(path: Path) -> PidInfo | None:
    """The running broker recorded in `path`, or None if there is none (stale files are ignored)."""
    try:
        pid_text, _, addr = path.read_text().partition("\n")
        pid = int(pid_text)
    except (OSError, ValueError):
        return None
    return PidInfo(pid, addr.strip()) if is_alive(pid) else None


def is_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


async def serve_until_signal(start: Callable[[], Awaitable[None]], stop: Callable[[], Awaitable[None]]) -> None:
    """Start, wait for SIGINT or SIGTERM, stop. Used by `mqctl broker start` and `mqctl up`."""
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopping.set)
    try:
        await start()
        await stopping.wait()
        log.info("signal received, shutting down")
    finally:
        await stop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


def run_broker(config: BrokerConfig) -> None:
    """Run a broker in this process until a signal arrives, keeping the pid file up to date."""
    broker = Broker(config)
    path = pid_file(config.store_path_root_dir)

    async def start() -> None:
        await broker.start()
        path.write_text(f"{os.getpid()}\n{broker.addr}\n")

    async def stop() -> None:
        try:
            await broker.shutdown()
        finally:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    # Not remoting.loop.run: uvloop transports fail Connection's asyncio.Transport check (reported).
    asyncio.run(serve_until_signal(start, stop))


def daemonize(log_path: Path) -> bool:
    """Detach (double fork, new session, stdio to `log_path`). Returns True in the daemon, False in the caller."""
    child = os.fork()
    if child > 0:
        os.waitpid(child, 0)  # the intermediate child exits at once; the daemon is its child
        return False
    os.setsid()
    if os.fork() > 0:
        os._exit(0)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    sys.stderr = os.fdopen(2, "w", buffering=1)
    return True


def wait_for(predicate: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def stop_process(pid: int, timeout: float = 30.0) -> bool:
    """SIGTERM `pid` and wait for it to exit; True if it did."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    return wait_for(lambda: not is_alive(pid), timeout)
