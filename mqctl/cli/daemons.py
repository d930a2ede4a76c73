"""The one start path of ``mqctl namesrv start`` and ``mqctl broker start``.

Refuse a second instance on the same state dir, optionally detach (the original process reports
what the detached one said, then exits), hold a pidfile, and serve until SIGINT/SIGTERM.
"""

from __future__ import annotations

import errno
import logging
import os
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def busy_ports(flags: Mapping[str, int | None]) -> Iterator[None]:
    """Turn "address already in use" into exit 4 naming the flag that moves the listener.

    ``flags`` maps each port flag of the command to the port it asked for (None: its default).
    """
    from mqctl.errors import ConflictError

    try:
        yield
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        found = re.search(r"(\d+)\)", str(exc))
        port = int(found.group(1)) if found else None
        named = [flag for flag, wanted in flags.items() if wanted is not None and wanted == port]
        where = f"port {port}" if port is not None else "a port"
        raise ConflictError(
            f"{where} is already in use by another process",
            hint=f"choose another with {' or '.join(named or list(flags))}",
        ) from None


def start_service(
    service: Callable[[], Any],
    *,
    what: str,
    state_dir: Path,
    pid_name: str,
    log_name: str,
    detach: bool,
    describe: Callable[[Any], str],
    cleanup: Callable[[], None] | None = None,
    port_flags: Mapping[str, int | None] | None = None,
) -> None:
    """Run ``service()`` (an object with async start/stop) in the foreground or, with ``detach``, in the background.

    ``describe(service)`` is called once it listens; its text is logged and, when detached, is what
    the original process prints before returning. ``cleanup`` runs in the serving process once the
    service has stopped. A busy port exits 4 naming the flag of ``port_flags`` that moves it.
    """
    from daemon.lifecycle import PidFile, daemonize, running_pid, serve
    from daemon.remoting.loop import run
    from mqctl.errors import ConflictError, MqctlError
    from mqctl.output import stderr_console

    pid = running_pid(state_dir / pid_name)
    if pid is not None:
        raise ConflictError(f"a {what} is already running from {state_dir} (pid {pid})")
    handle = None
    if detach:
        outcome = daemonize(state_dir / log_name)
        if isinstance(outcome, str):  # the original process: report what the daemon said
            if outcome.startswith("error"):
                raise MqctlError(outcome.removeprefix("error: "))
            stderr_console().print(outcome)
            return
        handle = outcome
    root = logging.getLogger()
    if root.level > logging.INFO:
        root.setLevel(logging.INFO)
    instance = service()

    def started() -> None:
        message = f"{describe(instance)} (pid {os.getpid()})"
        logging.getLogger("mqctl.daemon").info("%s", message)
        if handle is not None:
            handle.report(f"{what} started in the background: {message}, log {state_dir / log_name}")

    try:
        with PidFile(state_dir / pid_name), busy_ports(port_flags or {}):
            run(serve(instance, on_started=started))
    except BaseException as exc:
        if handle is not None:
            handle.report(f"error: {type(exc).__name__}: {exc}")
        raise
    finally:
        if cleanup is not None:
            cleanup()
