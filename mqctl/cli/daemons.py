"""The one start path of ``mqctl namesrv start`` and ``mqctl broker start``.

Refuse a second instance on the same state dir, optionally detach (the original process reports
what the detached one said, then exits), hold a pidfile, and serve until SIGINT/SIGTERM.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import logging
import os
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mqctl.services.processes import Running


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
    from mqctl.errors import ConflictError, reported, translate
    from mqctl.output import stderr_console

    pid = running_pid(state_dir / pid_name)
    if pid is not None:
        raise ConflictError(f"a {what} is already running from {state_dir} (pid {pid})")
    handle = None
    if detach:
        outcome = daemonize(state_dir / log_name)
        if isinstance(outcome, str):  # the original process: report what the daemon said
            if outcome.startswith("error"):
                raise reported(outcome.removeprefix("error: "))
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
        if handle is not None:  # the original process exits with this error's code (mqctl.errors.reported)
            error = translate(exc)
            handle.report(f"error: {type(error).__name__}: {error}")
        raise
    finally:
        if cleanup is not None:
            cleanup()


#: In ``mqctl up``'s data dir while it runs: its pid, then one line per daemon it hosts (its stores and
#: NameServer dir are beside it), so that stopping one of them does not stop the others unsaid.
UP_FILE = "up.hosts"


def note_up(root: Path, daemons: list[str]) -> Path:
    """Record this process as the ``mqctl up`` hosting ``daemons`` under ``root``; the file's path."""
    path = root / UP_FILE
    path.write_text(f"{os.getpid()}\n" + "".join(f"{line}\n" for line in daemons))
    return path


def is_up(pid: int | None) -> bool:
    """Whether process ``pid`` is an ``mqctl up`` (its command line's command), whatever it was found by."""
    from mqctl.cli.app import VALUED_OPTIONS
    from mqctl.services.processes import command_line, mqctl_words

    args = command_line(pid) if pid is not None else None
    return args is not None and mqctl_words(args, VALUED_OPTIONS)[:1] == ("up",)


def hosted_by_up(state_dir: Path, running: Running, *, what: str, whole: bool) -> list[str] | None:
    """The daemons of the ``mqctl up`` that ``running`` is (None: it is no up), by its pid, however it was
    found (a store reached through a link, another store's config naming up's port); refuses
    (ConflictError) to stop one of them, which stops them all, unless ``whole`` says so."""
    from mqctl.errors import ConflictError

    if not is_up(running.pid):
        return None
    daemons = _up_daemons(state_dir, running.pid) or ["its NameServer and every broker it runs"]
    if not whole:
        raise ConflictError(
            f"the {what} {state_dir} is served by 'mqctl up' (pid {running.pid}, found by "
            f"{running.detected_by}), which would stop with all it runs: {', '.join(daemons)}; not stopping it",
            hint=f"stop it all with --whole-up, kill -INT {running.pid}, or Ctrl-C where it runs",
        )
    return daemons


def _up_daemons(state_dir: Path, pid: int | None) -> list[str]:
    """What up ``pid`` runs, from its :data:`UP_FILE`: beside ``state_dir`` (links resolved) or in the
    ``--data`` dir of its command line; [] when neither is that up's."""
    from mqctl.services.processes import command_line

    places = [state_dir.resolve().parent, state_dir.parent]
    args = command_line(pid) if pid is not None else None
    given = [b for a, b in itertools.pairwise(args or []) if a == "--data"]
    given += [a.removeprefix("--data=") for a in args or [] if a.startswith("--data=")]
    for data in given[:1]:
        with contextlib.suppress(OSError):
            places.append(Path(os.readlink(f"/proc/{pid}/cwd")) / data)
    for place in places:
        try:
            first, *daemons = (place / UP_FILE).read_text().splitlines()
        except (OSError, ValueError):
            continue
        if first.strip() == str(pid):
            return daemons
    return []


def local_host(listen_host: str) -> str:
    """Where a local client reaches a listener bound to ``listen_host``."""
    return listen_host if listen_host not in ("0.0.0.0", "::", "") else "127.0.0.1"


def terminate(running: Running, port: int, *, main_class: str, name: str, what: str, timeout: float) -> None:
    """SIGTERM the daemon ``running`` found (by pid file, store lock or ``port``) and wait for its exit;
    refuses a process found only by the port unless its command line runs the daemon (``main_class``,
    Java's, or ``mqctl NAME start``, or an ``mqctl up``, which :func:`hosted_by_up` has let through)."""
    from daemon.lifecycle import terminate_pid
    from mqctl.errors import ConflictError, DaemonError

    if running.pid is None:
        raise DaemonError(
            f"port {port} is open but its process cannot be identified",
            hint="stop it as the user that started it",
        )
    from mqctl.cli.app import VALUED_OPTIONS

    if not running.stoppable(main_class, [(name, "start"), ("up",)], VALUED_OPTIONS):
        raise ConflictError(
            f"port {port} is held by pid {running.pid} ({running.process}), which does not look "
            f"like a {what}: not stopping it"
        )
    terminate_pid(running.pid, timeout)  # a LifecycleError is translated at the boundary (mqctl.errors)
