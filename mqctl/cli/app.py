"""The root ``mqctl`` command: global flags, the noun registry, and the one error boundary."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterator, MutableMapping
from typing import TYPE_CHECKING, Annotated, Any

import click
import typer

from mqctl import __version__

if TYPE_CHECKING:
    from click.shell_completion import CompletionItem

# A bounded number (``min=``/``max=``) is a number: click names its type "integer range", so ``-r eight``
# said "'eight' is not a valid integer range" and the help wrote "--timeout FLOAT RANGE", as if a range
# were asked for; the bounds are said beside it ("[x>=0.1]", "not in the range 0<=x<=18").
click.IntRange.name, click.FloatRange.name = "integer", "float"

#: ``mqctl -o json topic list``: what the root's -o takes (mqctl.output.FORMATS; importing it here
#: would load the output layer for every ``--help``; a test keeps the two equal).
FORMATS = ("table", "wide", "json", "yaml", "csv")
#: The root's options that take a value: the word after one is not the noun.
VALUED_OPTIONS = frozenset(
    {
        "--namesrv",
        "-n",
        "--context",
        "--output",
        "-o",
        "--timeout",
        "--deadline",
        "--access-key",
        "--secret-key",
        "--secret-key-file",
        "--ca",
        "--cert",
        "--key",
        "--sched-slice-micros",
    }
)

# Every noun of the CLI, registered here and only here: (name, module holding ``app``, its one-line help).
# The help lives here, not in the noun's module, so that the root lists the nouns without importing one.
NOUNS: tuple[tuple[str, str, str], ...] = (
    (
        "up",
        "mqctl.cli.up",
        "Run a local NameServer and broker groups on embedded defaults (Ctrl-C stops them all).",
    ),
    ("namesrv", "mqctl.cli.namesrv", "Run, stop and inspect a NameServer (the route registry)."),
    ("broker", "mqctl.cli.broker", "Run and manage a broker (RocketMQ broker.conf files work as they are)."),
    ("cluster", "mqctl.cli.cluster", "Clusters and their brokers."),
    ("topic", "mqctl.cli.topic", "Create, inspect and delete topics."),
    ("group", "mqctl.cli.group", "Subscription groups: config, online clients, lag."),
    ("offset", "mqctl.cli.offset", "Consumer offsets: show, and reset with a plan first."),
    ("msg", "mqctl.cli.msg", "Send, find, show, tail, trace and re-send messages."),
    ("dlq", "mqctl.cli.dlq", "Dead-letter queues: list them, export their messages."),
    ("timer", "mqctl.cli.timer", "Timer messages waiting for their delivery time."),
    (
        "store",
        "mqctl.cli.store",
        "Inspect a store directory offline (read-only; safe while a broker runs on it). "
        "'store clean --execute' deletes expired CommitLog files of a stopped broker's store.",
    ),
    ("bench", "mqctl.cli.bench", "Measure a cluster: send or drain messages and report TPS and latency."),
    ("context", "mqctl.cli.context", "Save and switch between NameServer contexts."),
    ("acl", "mqctl.cli.acl", "Manage ACL accounts and whitelists on brokers (plain_acl.yml)."),
    ("tls", "mqctl.cli.tls", "Make, show and renew the certificates of a TLS cluster."),
    (
        "spark-export",
        "mqctl.cli.spark_export",
        "Export a store's CommitLog or a running cluster's messages with Spark (Parquet, JSON, CSV), "
        "or report on them.",
    ),
    ("top", "mqctl.cli.top", "Live view of clusters, topics, groups and the store (q quits, ? help)."),
    (
        "check",
        "mqctl.cli.check",
        "Health checks as monitoring plugins: one line with perfdata; exit 0 OK, 1 WARNING, 2 CRITICAL, "
        "3 UNKNOWN.",
    ),
    (
        "export",
        "mqctl.cli.export",
        "Export a cluster's metadata (topics, groups; offsets, ACL) for 'mqctl apply -f'.",
    ),
    (
        "apply",
        "mqctl.cli.apply",
        "Make a cluster's topics and groups (and offsets) what an exported file says.",
    ),
    ("completion", "mqctl.cli.completion", "Print the shell completion script for bash, zsh or fish."),
)

COMPLETE_VAR = "_MQCTL_COMPLETE"

_debug = {"on": False}


def _version(value: bool) -> None:
    if value:
        from store import describe_build

        typer.echo(f"mqctl {__version__} ({describe_build()})")
        raise typer.Exit()


def _print_config(
    namesrv: str | None,
    context: str | None,
    timeout: float | None,
    deadline: float | None,
    output: str | None,
) -> None:
    """``--print-config``, after every root flag is read: ``-n``, ``--context``, ``--timeout``, ``--deadline``,
    ``--tls``/``--ca`` and ``-o`` change the answer (an eager option printed the current context's whatever
    they said)."""
    from mqctl.config import ContextFile, effective_settings
    from mqctl.errors import UsageError
    from mqctl.output import FORMATS, render

    fmt = output or os.environ.get("MQCTL_OUTPUT") or "table"
    if fmt not in FORMATS:
        raise UsageError(f"$MQCTL_OUTPUT {fmt!r}: choose one of {', '.join(FORMATS)}")
    settings = effective_settings(
        namesrv_flag=namesrv, context_flag=context, timeout_flag=timeout, deadline_flag=deadline
    )
    render({**settings, "contexts_file": str(ContextFile.path())}, fmt)
    raise typer.Exit()


def _complete_context(ctx: click.Context, incomplete: str) -> list[str]:
    from mqctl.completion import complete_context  # (not at import: 'mqctl --help' stays light)

    return complete_context(ctx, incomplete)


def _root(
    ctx: typer.Context,
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_version,
            is_eager=True,
            help="Print the version and which build runs (compiled or pure Python), then exit.",
        ),
    ] = False,
    print_config: Annotated[
        bool,
        typer.Option(
            "--print-config",
            help="Print where online commands connect and how long they wait (and why), then exit; "
            "-n, --context, --timeout, --deadline, --tls/--ca and -o count.",
        ),
    ] = False,
    debug: Annotated[
        bool, typer.Option("--debug", envvar="MQCTL_DEBUG", help="Log debug output and show tracebacks.")
    ] = False,
    no_color: Annotated[
        bool, typer.Option("--no-color", help="Never use colour (NO_COLOR is honoured too).")
    ] = False,
    verbose: Annotated[
        bool,
        typer.Option("--verbose", "-v", help="Say on stderr which NameServers a command talks to, and why."),
    ] = False,
    utc: Annotated[
        bool, typer.Option("--utc", envvar="MQCTL_UTC", help="Times in tables in UTC (default: local time).")
    ] = False,
    access_key: Annotated[
        str | None,
        typer.Option("--access-key", help="ACL access key: sign every request (beats env and context)."),
    ] = None,
    secret_key: Annotated[
        str | None,
        typer.Option("--secret-key", help="ACL secret key (seen in ps: prefer --secret-key-file)."),
    ] = None,
    secret_key_file: Annotated[
        str | None,
        typer.Option(
            "--secret-key-file",
            help="File whose first line is the ACL secret key, mode 600: out of ps and the shell's history "
            "(env MQCTL_SECRET_KEY_FILE).",
        ),
    ] = None,
    sign: Annotated[
        bool,
        typer.Option(
            "--sign",
            help="Sign with the context's access key even for a -n/$MQCTL_NAMESRV it does not list and its "
            "own --ca does not vouch for (else such requests go unsigned, with a warning).",
        ),
    ] = False,
    tls: Annotated[
        bool | None,
        typer.Option(
            "--tls/--no-tls",
            envvar="MQCTL_TLS",
            help="Connect over TLS, or (--no-tls) in plaintext, whatever the context says.",
        ),
    ] = None,
    ca: Annotated[
        str | None,
        typer.Option(
            "--ca", envvar="MQCTL_TLS_CA", help="PEM file of the CA that signed the servers (implies --tls)."
        ),
    ] = None,
    cert: Annotated[
        str | None,
        typer.Option(
            "--cert", envvar="MQCTL_TLS_CERT", help="Client certificate PEM for mutual TLS (with --key)."
        ),
    ] = None,
    key: Annotated[
        str | None, typer.Option("--key", envvar="MQCTL_TLS_KEY", help="Private key PEM of --cert.")
    ] = None,
    insecure: Annotated[
        bool,
        typer.Option(
            "--insecure",
            envvar="MQCTL_TLS_INSECURE",
            help="TLS without checking the server's certificate (test-mode certificates only).",
        ),
    ] = False,
    sched_slice_micros: Annotated[
        int,
        typer.Option(
            "--sched-slice-micros",
            envvar="MQCTL_CLIENT_SCHED_SLICE_MICROS",
            help="EEVDF slice in µs (100-100000, Linux 6.12+) for this process's event-loop thread, so that "
            "its wake-ups preempt a busy neighbour sooner; 0: the kernel's.",
        ),
    ] = 0,
    # Global options also taken after the noun; a command reads them through mqctl.cli.common's
    # option callback, which prefers its own flag (so the root only declares and validates them).
    namesrv: Annotated[
        str | None,
        typer.Option(
            "--namesrv",
            "-n",
            help="NameServer list HOST:PORT[;HOST:PORT] of online commands (also after the noun; beats "
            "context and env).",
        ),
    ] = None,
    context: Annotated[
        str | None,
        typer.Option(
            "--context",
            help="Use this saved context (also after the noun).",
            autocompletion=_complete_context,
        ),
    ] = None,
    output: Annotated[
        str | None,
        typer.Option(
            "--output",
            "-o",
            help="Output format: table, wide (a table of every column), json, yaml, csv (also after the noun).",
            click_type=click.Choice(FORMATS),
        ),
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option(
            "--timeout",
            min=0.1,
            help="Seconds to wait for each answer; a read ends in all after --deadline (also after the noun).",
        ),
    ] = None,
    deadline: Annotated[
        float | None,
        typer.Option(
            "--deadline",
            min=0,
            help="Seconds a read may take in all (else $MQCTL_DEADLINE, else 4 times --timeout, at least 30); "
            "past it exit 6; 0: none (also after the noun).",
        ),
    ] = None,
) -> None:
    """mqctl: run and operate RocketMQ-compatible NameServers and Brokers."""
    # context, output and timeout are read by each command (mqctl.cli.common), which may override them
    import logging

    from mqctl import auth, tls as session_tls
    from mqctl.output import PrintableFormatter, configure

    auth.set_flags(access_key, secret_key, secret_key_file, sign=sign)
    session_tls.set_flags(tls, ca, cert, key, insecure)
    _debug["on"] = debug
    configure(no_color=no_color, verbose=verbose, utc=utc)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        PrintableFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s", plain=not debug)
    )
    logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING, handlers=[handler])
    if sched_slice_micros:
        _loop_slice(sched_slice_micros)
    if print_config:
        _print_config(namesrv, context, timeout, deadline, output)
    if ctx.invoked_subcommand is None:  # the root runs without a command only for --print-config
        raise click.UsageError("Missing command.", ctx=ctx)


def _loop_slice(micros: int) -> None:
    """``--sched-slice-micros``: the slice on the calling thread, the one every command runs its event
    loop on (threads it starts later keep the kernel's default). A kernel or sandbox that refuses it
    leaves the default and says so once: the command works the same, only its wake-ups wait longer."""
    import logging

    from daemon.schedslice import MAX_SLICE_US, MIN_SLICE_US, SliceRefused, set_loop_slice
    from mqctl.errors import UsageError

    if not MIN_SLICE_US <= micros <= MAX_SLICE_US:
        raise UsageError(f"--sched-slice-micros is 0 or {MIN_SLICE_US}-{MAX_SLICE_US}, not {micros}")
    try:
        logging.getLogger("mqctl").debug("%s", set_loop_slice(micros))
    except SliceRefused as exc:
        sys.stderr.write(f"mqctl: warning: --sched-slice-micros not applied: {exc}\n")


def _typer(**settings: Any) -> typer.Typer:
    """A Typer app with the CLI's settings (a noun's commands take them from the app they are built in)."""
    return typer.Typer(
        add_completion=False,
        pretty_exceptions_enable=False,
        suggest_commands=False,  # click already says "Did you mean ...": say it once
        rich_markup_mode=None,  # click's plain help: rich's help imports rich and markdown_it
        **settings,
    )


def _keep_argument_help() -> None:
    """Click 8.5's Parameter sets ``help`` in its ``__init__``, after typer (before 0.26) set its
    TyperArgument's own and without passing it on: every positional argument's help (a message's BODY,
    a context's NAME, ...) was blank in --help and the man pages. Set it again after the constructor."""
    from typer.core import TyperArgument

    init = TyperArgument.__init__
    if getattr(init, "keeps_help", False):
        return

    def keeping_help(self: TyperArgument, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        if self.help is None:
            self.help = kwargs.get("help")

    keeping_help.keeps_help = True  # type: ignore[attr-defined]
    TyperArgument.__init__ = keeping_help  # type: ignore[method-assign]
    # Click 8.5 also lists the arguments under "Positional arguments" (format_arguments), and typer's
    # format_options still lists them under "Arguments": every BODY, NAME or ID was shown twice
    from typer.core import TyperCommand, TyperGroup

    for cls in (TyperCommand, TyperGroup):
        if hasattr(click.Command, "format_arguments") and "format_arguments" not in vars(cls):
            cls.format_arguments = _typer_lists_them  # type: ignore[method-assign]


def _typer_lists_them(self: click.Command, ctx: click.Context, formatter: click.HelpFormatter) -> None:
    """No "Positional arguments" section: typer's format_options lists them under "Arguments"."""


def _build_noun(name: str) -> click.Command:
    """One noun's Click command: its module imported, its Typer app converted, the registry's help its own."""
    _keep_argument_help()
    module, help_text = next((module, text) for noun, module, text in NOUNS if noun == name)
    app = importlib.import_module(module).app
    holder = _typer()
    if app.registered_commands or app.registered_groups or app.registered_callback is None:
        holder.add_typer(app, name=name, help=help_text)
        group = typer.main.get_command(holder)
        assert isinstance(group, click.Group)
        return group.commands[name]
    # one command (up, top, export, apply): its usage must not offer a COMMAND it lacks
    holder.command(name, help=help_text)(app.registered_callback.callback)
    return typer.main.get_command(holder)


class Nouns(MutableMapping[str, click.Command]):
    """The root's commands: every registered noun by name, each built the first time it is looked up.
    A run, ``mqctl NOUN --help`` or completing a noun's words imports that noun alone; walking the whole
    tree (the docs generator) builds them all."""

    def __init__(self) -> None:
        self._names = [name for name, _, _ in NOUNS]
        self._built: dict[str, click.Command] = {}

    def built(self) -> list[str]:
        """The nouns built so far."""
        return list(self._built)

    def __getitem__(self, name: str) -> click.Command:
        if name not in self._built:
            if name not in self._names:
                raise KeyError(name)
            self._built[name] = _build_noun(name)
        return self._built[name]

    def __contains__(self, name: object) -> bool:  # Mapping's would build the noun to answer
        return name in self._names

    def __setitem__(self, name: str, command: click.Command) -> None:
        if name not in self._names:
            self._names.append(name)
        self._built[name] = command

    def __delitem__(self, name: str) -> None:
        if name not in self._names:
            raise KeyError(name)
        self._names.remove(name)
        self._built.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def _summary(help_text: str, limit: int = 45) -> str:
    """A noun's one-liner as click shortens a command's help to list it."""
    return click.Command(None, help=help_text).get_short_help_str(limit)


class Root(typer.core.TyperGroup):
    """The root group. Its nouns are built when looked up (:class:`Nouns`); its help and the completion of
    a noun list them from the registry, as asking each noun for its help would build them all.

    A Ctrl-C that ends a command is the one ``Interrupted`` line on stderr and exit 130 (Typer makes a
    ``KeyboardInterrupt`` a silent exit 130, which :func:`main` could not tell from a code)."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self.commands = Nouns()

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)  # Typer's reads every item, which builds every noun

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        limit = formatter.width - 6 - max(len(name) for name, _, _ in NOUNS)  # as click's
        with formatter.section("Commands"):
            formatter.write_dl([(name, _summary(text, limit)) for name, _, text in NOUNS])

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list[CompletionItem]:
        from click.shell_completion import CompletionItem

        nouns = [
            CompletionItem(name, help=_summary(text))
            for name, _, text in NOUNS
            if name.startswith(incomplete)
        ]
        return nouns + click.Command.shell_complete(self, ctx, incomplete)  # and the root's options

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            from mqctl.errors import Interrupted

            raise Interrupted("interrupted") from None


def command() -> Root:
    """The root command. No noun is built until it is looked up: ``mqctl --help`` imports none, a run or
    ``mqctl NOUN --help`` the one it names, the docs generator (which walks the tree) all of them."""
    app = _typer(
        cls=Root,
        name="mqctl",
        help="Run and operate RocketMQ-compatible NameServers and Brokers.",
        no_args_is_help=True,
        invoke_without_command=True,  # for --print-config, which needs the other root flags read first
        subcommand_metavar="COMMAND [ARGS]...",  # still required: the root alone only prints its config
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    app.callback()(_root)
    root = typer.main.get_command(app)
    assert isinstance(root, Root)
    return root


def _noun(argv: list[str]) -> str | None:
    """The registered noun a command line runs (skipping the root's options and their values), or None."""
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg.startswith("-"):
            skip = arg in VALUED_OPTIONS
        else:
            return arg if any(arg == name for name, _, _ in NOUNS) else None
    return None


#: What a group run without its command raises: click ≥ 8.2 only (8.1 prints the help and exits 0 itself).
NO_ARGS_IS_HELP: tuple[type[click.UsageError], ...] = tuple(
    cls for cls in (getattr(click.exceptions, "NoArgsIsHelpError", None),) if cls is not None
)


def _plugin_unknown(exc: click.UsageError) -> None:
    """``mqctl check lag --bogus``: the plugin's UNKNOWN line on stdout (Nagios shows stdout, not stderr)."""
    from mqctl.output import printable

    ctx = exc.ctx
    service = (
        ctx.info_name
        if ctx is not None and ctx.parent is not None and ctx.parent.info_name == "check"
        else None
    )
    line = f"{(service or 'check').upper()} UNKNOWN - {printable(exc.format_message(), newlines=False)}"
    sys.stdout.write(line.replace("|", "/") + "\n")  # '|' would start the perfdata


def _fail(message: str, code: int) -> int:
    from mqctl.output import printable

    _flush_output()
    sys.stderr.write(f"mqctl: error: {printable(message, newlines=False)}\n")
    return code


def _reader_gone() -> int:
    """``mqctl topic list | head -1``: the reader has what it wanted; exit 0 without a word. A Ctrl-C
    taken while the failed write waited (``| jq`` killed by it) is the interrupt: one line, exit 130.

    stdout is pointed at /dev/null so that the interpreter's final flush does not fail again.
    """
    from mqctl.interrupts import whole_output

    _stdout_to_devnull()
    if whole_output.pressed:
        from mqctl.errors import Interrupted

        return _fail("interrupted", Interrupted.exit_code)
    return 0


def _stdout_to_devnull() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _flush_output() -> None:
    """What a command wrote goes out whole before its error line: a Ctrl-C meanwhile waits for a slow
    reader (see :mod:`mqctl.interrupts`) and is no second error; a reader that left is none either."""
    from mqctl.interrupts import whole_output

    try:
        with whole_output:
            sys.stdout.flush()
    except BrokenPipeError:
        _stdout_to_devnull()  # the error line still follows
    except KeyboardInterrupt:
        pass


def _usage_code(noun: str | None) -> int:
    """'check' is a monitoring plugin: a bad flag is UNKNOWN (3) by that convention, not mqctl's 2."""
    from mqctl.errors import UsageError

    return 3 if noun == "check" else UsageError.exit_code


#: Words of other tools (kubectl, mqadmin, git) for commands named otherwise here: an unknown one is
#: answered with ours when click's close-spelling guess found none ('context show' got no suggestion).
SYNONYMS: dict[str, tuple[str, ...]] = {
    "show": ("current", "ls", "get"),
    "list": ("ls",),
    "get": ("show", "current"),
    "describe": ("show", "current"),
    "delete": ("rm",),
    "remove": ("rm",),
    "create": ("add",),
    "switch": ("use",),
    "select": ("use",),
}


def _synonym(exc: click.UsageError) -> str:
    """`` Did you mean 'current'?`` for an unknown command that is another tool's word for one of ours."""
    message = exc.format_message()
    group = exc.ctx.command if exc.ctx is not None else None
    if not message.startswith("No such command") or "Did you mean" in message:
        return ""
    if not isinstance(group, click.Group) or exc.ctx is None:
        return ""
    name = message.split("'")[1] if message.count("'") >= 2 else ""
    ours = [c for c in SYNONYMS.get(name, ()) if c in group.list_commands(exc.ctx)]
    return f" Did you mean {' or '.join(repr(c) for c in ours)}?" if ours else ""


def main(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code; every error leaves as one line on stderr. Its imports are
    the help's: what a command needs its noun imports, what a failure needs is imported when one comes."""
    from mqctl.interrupts import buffered_stdout, whole_output

    buffered_stdout()  # a Ctrl-C in a write to an unbuffered stdout (python -u) lost the rest of it
    noun = _noun(sys.argv[1:] if argv is None else argv)
    if COMPLETE_VAR in os.environ:
        from mqctl.completion import install_shells

        install_shells()  # answer the committed completion scripts
    cli = command()
    try:
        result = cli.main(args=argv, prog_name="mqctl", complete_var=COMPLETE_VAR, standalone_mode=False)
        with whole_output:  # a closed pipe or a Ctrl-C shows here, inside the boundary, not at exit
            sys.stdout.flush()
    except BrokenPipeError:
        return _reader_gone()
    except click.exceptions.Abort:
        return _fail("aborted", 130)
    except NO_ARGS_IS_HELP as exc:
        # 'mqctl' or 'mqctl topic' alone: the help, as it is (click ≥ 8.2 raises it as a usage error,
        # whose message is the whole help text; one escaped line of it helps nobody)
        sys.stderr.write(exc.format_message().rstrip("\n") + "\n")
        return _usage_code(noun)
    except click.UsageError as exc:
        where = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
        if noun == "check":  # a monitoring plugin: its caller reads the one line on stdout
            _plugin_unknown(exc)
        return _fail(f"{exc.format_message()}{_synonym(exc)}{where}", _usage_code(noun))
    except click.ClickException as exc:
        return _fail(exc.format_message(), exc.exit_code)
    except BaseException as exc:  # the one translation boundary
        from mqctl.errors import Interrupted, translate

        if isinstance(exc, BrokenPipeError) or isinstance(exc.__context__, BrokenPipeError):
            if not isinstance(exc, KeyboardInterrupt | Interrupted):
                return _reader_gone()  # rich answers a closed pipe with SystemExit(1): not a failure here
            _stdout_to_devnull()  # a Ctrl-C while the closed pipe unwound the command: the interrupt
        if isinstance(exc, SystemExit):
            raise
        error = translate(exc)
        if _debug["on"] or os.environ.get("MQCTL_DEBUG"):
            import logging

            logging.getLogger("mqctl").exception("command failed")
        return _fail(str(error), error.exit_code)
    return result if isinstance(result, int) else 0


def run() -> None:
    sys.exit(main())
