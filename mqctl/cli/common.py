"""Options shared by every command, so that each flag has one meaning across the tool."""

from __future__ import annotations

import functools
import inspect
import os
import re
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import click
import typer

from mqctl.completion import (
    complete_broker,
    complete_cluster,
    complete_context,
    complete_group,
    complete_topic,
)
from mqctl.output import FORMATS
from store import (
    MAX_GROUP_LENGTH,
    MAX_TOPIC_LENGTH,
    RETRY_GROUP_TOPIC_PREFIX,
    SYS_GROUP_PREFIX,
    SYSTEM_GROUPS,
    legal_name,
    reserved_group_prefix,
)

if TYPE_CHECKING:
    from mqctl.admin.client import Admin
    from mqctl.config import Target
    from mqctl.services.messages import Window


def _global(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """A global option's value: the command's own flag, else the same flag given before the noun
    (``mqctl -o json topic list``), else its environment variable or default."""
    from click.core import ParameterSource

    name = param.name or ""
    if ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE:
        return value
    root = ctx.find_root()
    if root is not ctx and root.get_parameter_source(name) is ParameterSource.COMMANDLINE:
        return root.params[name]
    return value


def _global_output(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """``-o`` as :func:`_global` reads it, ``wide`` passed on as ``table`` (:func:`mqctl.output.table_format`)."""
    from mqctl.output import table_format

    value = _global(ctx, param, value)
    return table_format(value) if isinstance(value, str) else value


class ExistingPath(click.Path):
    """``click.Path(exists=True)`` whose missing path is a ``NotFoundError`` (exit 3), as a missing file is
    wherever else mqctl reads one: click's own check would make it a usage error (2)."""

    def __init__(self, *, file_okay: bool = True, dir_okay: bool = True) -> None:
        super().__init__(exists=True, file_okay=file_okay, dir_okay=dir_okay, path_type=Path)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str | os.PathLike) and not os.path.exists(value):
            from mqctl.errors import NotFoundError

            flag = param.opts[0] if param is not None and param.opts else "path"
            raise NotFoundError(f"{flag} {os.fsdecode(value)}: no such file or directory")
        return super().convert(value, param, ctx)


OutputOpt = Annotated[
    str,
    typer.Option(
        "--output",
        "-o",
        help=f"Output format: {', '.join(FORMATS)} (wide: a table of every column).",
        envvar="MQCTL_OUTPUT",
        click_type=click.Choice(FORMATS),
        callback=_global_output,
    ),
]
NamesrvOpt = Annotated[
    str | None,
    typer.Option(
        "--namesrv",
        "-n",
        help="NameServer list HOST:PORT[;HOST:PORT] (beats context and env).",
        callback=_global,
    ),
]
ContextOpt = Annotated[
    str | None,
    typer.Option(
        "--context",
        help="Use this saved context instead of the current one.",
        callback=_global,
        autocompletion=complete_context,
    ),
]
YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")]
# RocketMQ's TopicValidator / Validators.checkGroup: the rule a broker applies, checked before any request.
_MAX_LENGTH = {"topic": MAX_TOPIC_LENGTH, "group": MAX_GROUP_LENGTH}


def name_problem(kind: str, name: str) -> str | None:
    """Why ``name`` is not a valid topic or group name (``kind``), or None when it is."""
    if not name:
        return f"the {kind} name is blank"
    if not legal_name(name):
        return f"{kind} {name!r} has characters RocketMQ refuses: use letters, digits, '%', '|', '_' and '-'"
    if len(name) > _MAX_LENGTH[kind]:
        return f"{kind} {name[:20]!r}... is {len(name)} characters; the most RocketMQ allows is {_MAX_LENGTH[kind]}"
    return None


def _checked(kind: str) -> Callable[[str | None], str | None]:
    def check(value: str | None) -> str | None:
        problem = None if value is None else name_problem(kind, value)
        if problem is not None:
            raise typer.BadParameter(problem)
        return value

    return check


check_topic = _checked("topic")
check_group = _checked("group")


def new_group_problem(name: str) -> str | None:
    """Why ``name`` cannot name a group to create or update: :func:`name_problem`, and not a prefix of
    groups' own topics (a group of that name can still be shown and deleted)."""
    problem = name_problem("group", name)
    prefix = None if problem is not None else reserved_group_prefix(name)
    if prefix is not None:
        kind = "retry" if prefix == RETRY_GROUP_TOPIC_PREFIX else "dead-letter"
        problem = (
            f"group {name!r} starts with {prefix}, the prefix of every group's {kind} topic "
            f"(group G has {prefix}G): choose a name without it"
        )
    return problem


def _refusing(problem_of: Callable[[str], str | None]) -> Callable[[str], str]:
    """An option callback refusing a value ``problem_of`` finds a problem with, as a bad parameter."""

    def check(value: str) -> str:
        problem = problem_of(value)
        if problem is not None:
            raise typer.BadParameter(problem)
        return value

    return check


check_new_group = _refusing(new_group_problem)


#: 4.9.8's consumers refuse it as their group (``MixAll.DEFAULT_CONSUMER_GROUP``): a client's placeholder.
DEFAULT_CONSUMER_GROUP = "DEFAULT_CONSUMER"


def created_group_problem(name: str) -> str | None:
    """Why ``name`` cannot name a group to create: :func:`new_group_problem`, and not a broker's own
    group nor of its ``CID_RMQ_SYS_`` prefix (5.x's ``GrpcValidator``: "cannot use system consumer group"),
    nor 4.9.8's client placeholder ``DEFAULT_CONSUMER``. Such a group can still be updated and deleted."""
    problem = new_group_problem(name)
    if problem is None and (name in SYSTEM_GROUPS or name.startswith(SYS_GROUP_PREFIX)):
        problem = f"group {name!r} is a system consumer group (a broker's own): choose another name"
    if problem is None and name == DEFAULT_CONSUMER_GROUP:
        problem = f"group {name!r} is RocketMQ clients' placeholder, which their consumers refuse: choose another name"
    return problem


check_created_group = _refusing(created_group_problem)


TopicOpt = Annotated[
    str,
    typer.Option("--topic", "-t", help="Topic name.", autocompletion=complete_topic, callback=check_topic),
]
GroupOpt = Annotated[
    str,
    typer.Option(
        "--group", "-g", help="Consumer group name.", autocompletion=complete_group, callback=check_group
    ),
]
NewGroupOpt = Annotated[
    str,
    typer.Option(
        "--group", "-g", help="Consumer group name.", autocompletion=complete_group, callback=check_new_group
    ),
]
CreatedGroupOpt = Annotated[
    str,
    typer.Option(
        "--group",
        "-g",
        help="Consumer group name (not a system group's).",
        autocompletion=complete_group,
        callback=check_created_group,
    ),
]
ClusterOpt = Annotated[
    str | None, typer.Option("--cluster", "-c", help="Cluster name.", autocompletion=complete_cluster)
]


def check_broker_addr(value: str | None) -> str | None:
    """A broker name given where an address is wanted failed as "cannot talk to broker-a ... is it
    running?" (exit 5): a typo is a usage error, said before anything connects."""
    from daemon.remoting.client import parse_addr

    if value is None:
        return None
    try:
        parse_addr(value)
    except ValueError:
        raise typer.BadParameter(
            f"{value!r} is not HOST:PORT; a broker's address is in 'mqctl cluster list' (ADDR)"
        ) from None
    return value


BrokerAddrOpt = Annotated[
    str | None,
    typer.Option(
        "--broker",
        "-b",
        help="Broker address HOST:PORT (beats --cluster).",
        callback=check_broker_addr,
        autocompletion=complete_broker,
    ),
]
#: A queue's broker where no --cluster applies (msg send, msg show): by address or by broker name.
QueueBrokerOpt = Annotated[
    str | None, typer.Option("--broker", "-b", help="Only this broker's queues: HOST:PORT or broker name.")
]
QueueOpt = Annotated[int | None, typer.Option("--queue", "-q", min=0, help="Queue id.")]
#: The dead-letter filters of 'msg resend' and 'dlq export' (with --since/--until and --key).
DlqIdsOpt = Annotated[
    list[str] | None, typer.Option("--id", help="Only this message (offset id or UNIQ_KEY; repeatable).")
]
DlqTagOpt = Annotated[str | None, typer.Option("--tag", help="Only dead letters with this tag.")]


def one_key(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """Refuse a blank key or one holding a space: KEYS is the keys joined by spaces (RocketMQ's
    ``MessageConst#KEY_SEPARATOR``) and the IndexFile splits it there, so 'a b' is stored as 'a' and 'b'."""
    for key in [value] if isinstance(value, str) else value or ():
        if not key.strip():
            raise click.BadParameter("a key cannot be blank", ctx, param)
        if " " in key:
            raise click.BadParameter(
                f"key {key!r} holds a space, RocketMQ's key separator: it would be (or was) stored as the "
                f"keys {' and '.join(repr(k) for k in key.split())}; give each key on its own",
                ctx,
                param,
            )
    return value


KeyOpt = Annotated[
    str | None, typer.Option("--key", "-k", help="Message key (an entry of KEYS).", callback=one_key)
]
NoBodyOpt = Annotated[
    bool,
    typer.Option("--no-body", help="Leave the body out (it is UTF-8 text, or base64 per body_encoding)."),
]
SinceOpt = Annotated[
    str | None,
    typer.Option("--since", help="Store time from: ISO 8601 (UTC default), epoch ms or relative like -2h."),
]
UntilOpt = Annotated[
    str | None, typer.Option("--until", help="Store time until, same forms as --since (default now).")
]
ExecuteOpt = Annotated[bool, typer.Option("--execute", help="Apply the plan; without it nothing changes.")]


def key_window(since: str | None, until: str | None) -> Window:
    """A key query's store-time window, said on stderr when the operator gave one (without: all of time
    until now, which goes without saying)."""
    from mqctl.output import stderr_console
    from mqctl.services.messages import Window

    window = Window.of(since, until)
    if since or until:
        stderr_console().print(f"window: {window.describe()} (store time, UTC)")
    return window


def check_port_flags(ports: Mapping[str, int | None]) -> None:
    """UsageError (exit 2) for a ``--*-port`` flag's value outside 0..65535 (a socket would take it
    modulo 65536: 70000 listening on 4464)."""
    from daemon.config import MAX_PORT
    from mqctl.errors import UsageError

    for flag, port in ports.items():
        if port is not None and not 0 <= port <= MAX_PORT:
            raise UsageError(f"bad {flag} {port}: a port is 0..{MAX_PORT} (0 picks a free one)")


def parse_listen(value: str) -> tuple[str, int]:
    """``--listen HOST:PORT`` (``[v6]:PORT``; an empty host means every interface) -> (host, port)."""
    from daemon.config import MAX_PORT
    from mqctl.errors import UsageError

    host, sep, port_text = value.rpartition(":")
    if not sep or not port_text.isdigit() or int(port_text) > MAX_PORT:
        raise UsageError(f"bad --listen {value!r}: expected HOST:PORT (port 0 picks a free one)")
    return bindable(host.strip("[]") or "0.0.0.0"), int(port_text)


def bindable(host: str, flag: str = "--listen") -> str:
    """``host`` when a listener can bind it (an address of this machine, or a name resolving to one;
    ``0.0.0.0``/``::``: every interface), else the UsageError that names ``flag``: a typo'd host is bad
    input, found before any daemon starts, not a failure of the daemon."""
    import socket

    from mqctl.errors import UsageError

    if host in ("", "0.0.0.0", "::"):
        return host
    try:
        found = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError):
        raise UsageError(
            f"bad {flag} host {host!r}: not an IP address or a name this machine resolves"
        ) from None
    for family, kind, proto, _, address in found:
        try:
            with socket.socket(family, kind, proto) as probe:
                probe.bind(address)  # port 0: nothing is held
            return host
        except OSError:
            continue
    raise UsageError(
        f"bad {flag} host {host!r}: not an address of this machine",
        hint="use 127.0.0.1, 0.0.0.0 (every interface) or one of this machine's addresses",
    )


def confirm(question: str, *, yes: bool) -> None:
    """Ask before a destructive action on a terminal; off a terminal require --yes."""
    import sys

    from mqctl.errors import Interrupted, UsageError

    if yes:
        return
    if not sys.stdin.isatty():
        raise UsageError(f"{question} needs confirmation: pass --yes")
    from mqctl.interrupts import ctrl_c_raises

    with ctrl_c_raises():  # (asked inside a command's event loop too, once what it deletes is found)
        answered = typer.confirm(question, default=False, err=True)
    if not answered:
        raise Interrupted("not confirmed; nothing changed")


WatchOpt = Annotated[
    float | None, typer.Option("--watch", min=0.1, help="Refresh every N seconds until Ctrl-C.")
]
TimeoutOpt = Annotated[
    float | None,
    typer.Option(
        "--timeout",
        min=0.1,
        help="Seconds to wait for each answer (else $MQCTL_TIMEOUT, else the context's timeout, else 5 "
        "for most commands); a read ends in all after 4 times it, at least 30.",
        callback=_global,
    ),
]

DeadlineOpt = Annotated[
    float | None,
    typer.Option(
        "--deadline",
        min=0,
        help="Seconds a read may take in all (else $MQCTL_DEADLINE, else 4 times --timeout, at least 30); "
        "past it exit 6 naming what had not answered; 0: none.",
        callback=_global,
    ),
]


@dataclass(frozen=True)
class ClusterFlags:
    """What the shared options of an online command said in this invocation (see :func:`cluster_options`)."""

    namesrv: str | None = None
    context: str | None = None
    output: str = "table"
    timeout: float | None = None
    deadline: float | None = None
    watch: float | None = None


# The one declaration of each shared option: (type with its typer.Option, default).
_SHARED: dict[str, tuple[Any, Any]] = {
    "namesrv": (NamesrvOpt, None),
    "context": (ContextOpt, None),
    "output": (OutputOpt, "table"),
    "timeout": (TimeoutOpt, None),
    "deadline": (DeadlineOpt, None),
    "watch": (WatchOpt, None),
}
# Set for the length of one command, so an in-process run never sees another's flags.
_flags: ContextVar[ClusterFlags | None] = ContextVar("mqctl_cluster_flags", default=None)
F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


def flags() -> ClusterFlags:
    """The shared options of the command running now."""
    return _flags.get() or ClusterFlags()


def output_given() -> bool:
    """Whether ``-o`` was given on the command line (the command's own or before the noun), not only
    ``$MQCTL_OUTPUT``: a scripting default in the environment, which asks nothing of a live screen."""
    from click.core import ParameterSource

    ctx = click.get_current_context(silent=True)
    return ctx is not None and any(
        c.get_parameter_source("output") is ParameterSource.COMMANDLINE for c in (ctx, ctx.find_root())
    )


def cluster_options(*, output: bool = True, watch: bool = False) -> Callable[[F], F]:
    """Give an online command ``--namesrv/-n``, ``--context``, ``-o/--output``, ``--timeout``,
    ``--deadline`` (and with ``watch`` ``--watch``), declared here once: the command does not list them; :func:`online`,
    :func:`cluster_target` and :func:`flags` read what they said. Without ``output`` (``top``) no ``-o``."""
    names = ["namesrv", "context", *(["output"] * output), "timeout", "deadline", *(["watch"] * watch)]

    def decorate(func: F) -> F:
        signature = inspect.signature(func, eval_str=True)
        keyword = inspect.Parameter.KEYWORD_ONLY
        shared = [
            inspect.Parameter(name, keyword, annotation=_SHARED[name][0], default=_SHARED[name][1])
            for name in names
        ]

        @functools.wraps(func)
        def command(**kwargs: Any) -> Any:
            token = _flags.set(ClusterFlags(**{name: kwargs.pop(name) for name in names}))
            try:
                return func(**kwargs)
            finally:
                _flags.reset(token)

        params = [*signature.parameters.values(), *shared]
        command.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params} | {
            "return": signature.return_annotation
        }
        return command  # type: ignore[return-value]

    return decorate


def request_timeout(default: float, target: Target | None = None) -> float:
    """Seconds to wait for each answer: ``--timeout``, ``$MQCTL_TIMEOUT``, the context's, else ``default``."""
    from mqctl.config import resolve_timeout
    from mqctl.output import note

    timeout = resolve_timeout(default, flag=flags().timeout, target=target)
    note(f"timeout {timeout.seconds:g}s per answer (from {timeout.source})")
    return timeout.seconds


def command_deadline(timeout: float) -> float | None:
    """A read's deadline in all (None: none): ``--deadline``, ``$MQCTL_DEADLINE``, else the default for
    ``timeout`` seconds a answer."""
    from mqctl.config import resolve_deadline
    from mqctl.output import note

    deadline = resolve_deadline(timeout, flag=flags().deadline)
    shown = "none" if deadline.seconds is None else f"{deadline.seconds:g}s"
    note(f"deadline {shown} in all (from {deadline.source})")
    return deadline.seconds


def cluster_target() -> Target:
    """Where this online command connects (``--namesrv``, ``--context``, env, current context)."""
    from mqctl.config import resolve_target

    return resolve_target(namesrv_flag=flags().namesrv, context_flag=flags().context)


def online(work: Callable[[Admin], Awaitable[Any]], *, timeout: float = 5.0, changes: bool = False) -> None:
    """Run ``work`` against the resolved NameServers and render its result, once or every ``--watch`` s.
    A read (``changes`` false) has one deadline in all (each refresh its own), :func:`command_deadline`:
    past it the command exits 6 naming what had not answered. A command that changes
    the cluster is never stopped between its writes: each answer has its wait, each failure is named."""
    from mqctl.admin.client import Refused, run_admin

    where = cluster_target()
    seconds = request_timeout(timeout, where)
    deadline = None if changes else command_deadline(seconds)
    shared = flags()
    try:
        render_every(
            lambda: read_all(lambda: run_admin(where.namesrv, work, timeout=seconds, deadline=deadline)),
            shared.output,
            shared.watch,
        )
    except Refused as refused:
        ctx = click.get_current_context(silent=True)
        refused.unscoped = ctx is not None and "cluster" in ctx.params and ctx.params["cluster"] is None
        raise


def warn_not_kept(result: Any, why: str) -> Any:
    """``result``, after a warning line for each setting a broker took without keeping it (its
    ``not_kept``: a 4.9.x broker answers success to 5.x fields it drops), saying what follows."""
    import sys

    from mqctl.output import printable

    for line in result.get("not_kept", []) if isinstance(result, dict) else []:
        sys.stderr.write(f"mqctl: warning: {printable(line, newlines=False)}: {why}\n")
    return result


def read_all(produce: Callable[[], T]) -> T:
    """``produce()``, then one warning line on stderr per broker its reads could not read (ACL denied,
    timed out, down): the result holds what the others answered."""
    import sys

    from mqctl.output import printable
    from mqctl.services.fanout import collecting

    with collecting() as failed:
        result = produce()
    for failure in failed:
        sys.stderr.write(f"mqctl: warning: could not read {printable(failure.describe(), newlines=False)}\n")
    return result


def render_every(produce: Callable[[], Any], output: str, watch: float | None = None) -> None:
    """Render ``produce()`` once, or (``--watch``) every ``watch`` seconds until Ctrl-C.

    A watched table is redrawn (the screen cleared on a terminal); every other format goes through
    the same :class:`~mqctl.output.RowStream` as ``msg tail``: ``-o json`` prints JSON lines.

    A refresh's warnings (a broker not read, a group without a master) are said when they change, not
    at every refresh: a redrawn screen shows them under its time line each time, a stream or a log
    once, then what no longer holds (``resolved: ...``).
    """
    from mqctl.output import RowStream, render, stderr_console, stdout_console

    if watch is None:
        render(produce(), output)
        return
    import sys
    import time

    console = stdout_console()
    stream = None if output == "table" else RowStream(output)
    said: dict[str, str] = {}
    said_every = False
    try:
        while True:
            taken_at_ms = int(time.time() * 1000)  # when this refresh's reads began
            result, warned = _warnings_of(produce)
            redrawn = stream is None and console.is_terminal
            if redrawn:
                console.clear()
            if redrawn or not said_every:  # under each redrawn screen; in a stream or a log, once
                stderr_console().print(
                    f"{time.strftime('%H:%M:%S')} every {watch:g}s, Ctrl-C to stop", style="dim"
                )
                said_every = True
            if redrawn or warned.keys() != said.keys():
                for key in said:
                    if key not in warned and not redrawn:
                        sys.stderr.write(f"mqctl: resolved: {key}\n")
                for key, line in warned.items():
                    if redrawn or key not in said:
                        sys.stderr.write(line + "\n")
                sys.stderr.flush()
            said = warned
            if stream is not None:
                stream.rows(result, taken_at_ms=taken_at_ms)
            else:
                render(result, output)
            time.sleep(watch)
    except KeyboardInterrupt:
        return


#: A log line's time (the handler's format begins with it): not part of what a warning says.
_LOG_TIME = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ")
_WARNING = re.compile(r"^(mqctl: warning: |WARNING \S+: )")


def _warnings_of(produce: Callable[[], T]) -> tuple[T, dict[str, str]]:
    """``produce()`` and what it wrote on stderr (warning lines, log records), each line by what it
    says without its time or prefix, in order."""
    import contextlib
    import io
    import logging

    buffer = io.StringIO()
    handlers = [h for h in logging.getLogger().handlers if isinstance(h, logging.StreamHandler)]
    streams = [h.stream for h in handlers]
    for handler in handlers:
        handler.setStream(buffer)
    try:
        with contextlib.redirect_stderr(buffer):
            result = produce()
    finally:
        for handler, stream in zip(handlers, streams, strict=True):
            handler.setStream(stream)
    lines = [line for line in buffer.getvalue().splitlines() if line.strip()]
    return result, {_WARNING.sub("", _LOG_TIME.sub("", line)): line for line in lines}


@contextmanager
def progress(total: int, description: str, *, unit: str = "items") -> Iterator[Callable[[int], None] | None]:
    """A rich progress bar on stderr for a long operation, yielding ``advance(n)``; ``None`` (no bar)
    when stderr is not a terminal, so pipes and logs stay clean."""
    from mqctl.output import stderr_console

    console = stderr_console(soft_wrap=False)
    if not console.is_terminal:
        yield None
        return
    from rich.progress import BarColumn, DownloadColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    counter = DownloadColumn() if unit == "bytes" else MofNCompleteColumn()
    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        counter,
        TimeRemainingColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n: bar.advance(task, n)
