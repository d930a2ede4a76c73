"""Generate the committed shell completions and man pages from the Click command tree.

``make docs`` runs ``python -m mqctl.docs``; a test regenerates into a temporary directory and
fails when the committed files differ, so they never go stale.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click
from click.shell_completion import get_completion_class

from mqctl import __version__
from mqctl.errors import EXIT_CODES

SHELLS = {"bash": "mqctl.bash", "zsh": "_mqctl", "fish": "mqctl.fish"}

ENVIRONMENT = (
    (
        "NAMESRV_ADDR",
        "RocketMQ's own NameServer list; used when no flag, context flag or MQCTL_NAMESRV is given.",
    ),
    ("MQCTL_NAMESRV", "NameServer list HOST:PORT[;HOST:PORT]; beats NAMESRV_ADDR and the current context."),
    ("MQCTL_OUTPUT", "Default output format for -o: table, wide, json, yaml or csv."),
    ("MQCTL_TIMEOUT", "Seconds to wait for each answer; --timeout beats it, it beats the context's."),
    (
        "MQCTL_DEADLINE",
        "Seconds a read may take in all (default 4 x the timeout, at least 30); 0: none; --deadline beats it.",
    ),
    (
        "MQCTL_ACCESS_KEY",
        "ACL access key, with MQCTL_SECRET_KEY_FILE or MQCTL_SECRET_KEY: signs every request unless "
        "--access-key is given; beats the context's credentials.",
    ),
    ("MQCTL_SECRET_KEY_FILE", "File whose first line is the ACL secret key (mode 600, else refused)."),
    (
        "MQCTL_SECRET_KEY",
        "The ACL secret key itself (every child process sees it: prefer MQCTL_SECRET_KEY_FILE).",
    ),
    ("MQCTL_CONFIG_DIR", "Where contexts.json lives (default: the user config dir)."),
    ("MQCTL_DATA_DIR", "Default data dir of mqctl up (default: the user data dir)."),
    ("MQCTL_DEBUG", "Same as --debug."),
    ("NO_COLOR", "Never use colour."),
)


def _roff(text: str) -> str:
    escaped = text.replace("\\", "\\e").replace("-", "\\-")
    return "\n".join("\\&" + line if line[:1] in (".", "'") else line for line in escaped.splitlines())


def _options(command: click.Command, ctx: click.Context) -> list[str]:
    lines: list[str] = []
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx)
        if record is None:
            continue
        names, help_text = record
        lines += [".TP", f"\\fB{_roff(names)}\\fR", _roff(help_text or "")]
    return lines


def _usage(command: click.Command, ctx: click.Context) -> str:
    return " ".join(command.collect_usage_pieces(ctx))


def _walk(command: click.Command, ctx: click.Context, lines: list[str]) -> None:
    """Describe ``command`` and, for a group, each of its sub-commands in turn."""
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is None or sub.hidden:
                continue
            sub_ctx = click.Context(sub, info_name=name, parent=ctx)
            _walk(sub, sub_ctx, lines)
        return
    lines += [".SS", f'"{_roff(ctx.command_path)} {_roff(_usage(command, ctx))}"']
    lines.append(_roff(command.help or command.short_help or ""))
    lines += _options(command, ctx)


def _header(name: str, summary: str) -> list[str]:
    return [
        f'.TH "{name.upper()}" "1" "" "mqctl {__version__}" "mqctl manual"',
        ".SH NAME",
        f"{_roff(name)} \\- {_roff(summary)}",
    ]


def root_page(cli: click.Group) -> str:
    ctx = click.Context(cli, info_name="mqctl", **cli.context_settings)
    lines = _header("mqctl", cli.help or "")
    lines += [
        ".SH SYNOPSIS",
        f"\\fBmqctl\\fR {_roff(_usage(cli, ctx))}",
        ".SH DESCRIPTION",
        _roff(cli.help or ""),
    ]
    lines += [".SH OPTIONS", *_options(cli, ctx), ".SH COMMANDS"]
    for name in cli.list_commands(ctx):
        sub = cli.get_command(ctx, name)
        if sub is not None:
            lines += [
                ".TP",
                f"\\fBmqctl {_roff(name)}\\fR",
                f"{_roff(sub.get_short_help_str(200))} See \\fBmqctl\\-{_roff(name)}\\fR(1).",
            ]
    lines += [".SH EXIT STATUS", "Every failure prints one line on standard error and exits with:"]
    for code, cls, meaning in EXIT_CODES:
        lines += [".TP", f"\\fB{code}\\fR", f"{_roff(meaning)} ({_roff(cls)})"]
    lines.append(".SH ENVIRONMENT")
    for var, meaning in ENVIRONMENT:
        lines += [".TP", f"\\fB{var}\\fR", _roff(meaning)]
    see_also = ", ".join(f"\\fBmqctl\\-{_roff(n)}\\fR(1)" for n in cli.list_commands(ctx))
    lines += [".SH SEE ALSO", see_also]
    return "\n".join(lines) + "\n"


def noun_page(cli: click.Group, name: str) -> str:
    parent = click.Context(cli, info_name="mqctl")
    command = cli.get_command(parent, name)
    assert command is not None
    ctx = click.Context(command, info_name=name, parent=parent)
    lines = _header(f"mqctl-{name}", command.get_short_help_str(200))
    lines += [".SH SYNOPSIS", f"\\fBmqctl {_roff(name)}\\fR {_roff(_usage(command, ctx))}"]
    lines += [".SH DESCRIPTION", _roff(command.help or "")]
    if isinstance(command, click.Group) and command.list_commands(ctx):
        lines.append(".SH COMMANDS")
        _walk(command, ctx, lines)
    else:  # a noun that is one command (up, top): its options
        lines += [".SH OPTIONS", *_options(command, ctx)]
    lines += [".SH SEE ALSO", "\\fBmqctl\\fR(1)"]
    return "\n".join(lines) + "\n"


def generate(root: Path) -> dict[Path, str]:
    """Every generated file, by path under ``root``."""
    from mqctl.cli.app import command

    cli = command()
    assert isinstance(cli, click.Group)
    files: dict[Path, str] = {}
    for shell, filename in SHELLS.items():
        files[root / "completions" / filename] = completion_script(shell, cli)
    files[root / "man" / "mqctl.1"] = root_page(cli)
    ctx = click.Context(cli, info_name="mqctl", **cli.context_settings)
    for name in cli.list_commands(ctx):
        files[root / "man" / f"mqctl-{name}.1"] = noun_page(cli, name)
    return files


def completion_script(shell: str, cli: click.Group | None = None) -> str:
    """The completion script for ``shell``, as ``completions/`` holds it and ``mqctl completion`` prints it
    (an installed mqctl has no repository to read it from)."""
    from mqctl.cli.app import COMPLETE_VAR, command
    from mqctl.completion import install_shells

    install_shells()  # the classes mqctl answers the scripts with
    root = cli if cli is not None else command()
    completion = get_completion_class(shell)
    assert completion is not None
    return completion(root, {}, "mqctl", COMPLETE_VAR).source()


def main(argv: list[str] | None = None) -> int:
    root = Path(argv[0] if argv else ".")
    files = generate(root)  # first: a CLI that fails to build leaves the old pages in place
    for stale in [*root.glob("man/mqctl*.1"), *(root / "completions" / f for f in SHELLS.values())]:
        stale.unlink(missing_ok=True)
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
