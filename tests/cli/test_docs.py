"""The committed completions and man pages are what the CLI generates now."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from mqctl.cli.app import NOUNS, command
from mqctl.docs import SHELLS, generate
from tests.support.cli import RunCli

ROOT = Path(__file__).resolve().parents[2]


def test_completions_and_man_pages_are_fresh() -> None:
    stale = [
        str(path.relative_to(ROOT))
        for path, text in generate(ROOT).items()
        if not path.exists() or path.read_text(encoding="utf-8") != text
    ]
    assert stale == [], f"run 'make docs' and commit: {stale}"


def test_one_man_page_per_noun_and_exit_status_section() -> None:
    pages = {p.name for p in (ROOT / "man").glob("*.1")}
    assert pages == {"mqctl.1"} | {f"mqctl-{name}.1" for name, _, _ in NOUNS}
    root_page = (ROOT / "man" / "mqctl.1").read_text()
    assert ".SH EXIT STATUS" in root_page and "ConnectError" in root_page


def _commands(cmd: click.Command, path: str) -> Iterator[tuple[str, click.Command]]:
    """Every command and group of the tree (a group such as spark-export runs as a command too)."""
    yield path, cmd
    if isinstance(cmd, click.Group):
        for name, sub in cmd.commands.items():
            yield from _commands(sub, f"{path} {name}")


def _flags(cmd: click.Command) -> set[str]:
    return {o for p in cmd.params if isinstance(p, click.Option) for o in (*p.opts, *p.secondary_opts)}


def test_an_options_help_names_only_flags_its_command_takes() -> None:
    """A flag an option's help names is one that command (or the root) takes: 'spark-export report
    --remote' once spoke of --out, which only the export takes. Another command's flag is quoted with
    that command ('context add --spark-remote')."""
    root = command()
    named = {
        f"{path} {param.name}: {flag}"
        for path, cmd in _commands(root, "mqctl")
        for param in cmd.params
        for flag in re.findall(
            r"(?<![\w-])--[a-z][\w-]*", re.sub(r"'[^']*'", "", getattr(param, "help", "") or "")
        )
        if flag not in _flags(cmd) | _flags(root)
    }
    assert named == set()


def test_every_positional_argument_has_its_help() -> None:
    """Click 8.5 dropped the help typer gave each argument: 'msg send --help' listed [BODY] with nothing."""
    root = command()
    blank = [
        f"{path} {param.name}"
        for path, cmd in _commands(root, "mqctl")
        for param in cmd.params
        if isinstance(param, click.Argument) and not getattr(param, "help", None)
    ]
    assert blank == []
    ctx = click.Context(root.commands["msg"].commands["send"], info_name="send")
    # once: Click 8.5's "Positional arguments" section came before typer's "Arguments", both listing it
    assert ctx.get_help().count("Message body") == 1


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_prints_the_script_completions_holds(cli: RunCli, shell: str) -> None:
    """An installed mqctl has no repository: ``mqctl completion SHELL`` prints what completions/ holds."""
    printed = cli("completion", shell)
    assert printed.code == 0, printed.stderr
    assert printed.stdout == (ROOT / "completions" / SHELLS[shell]).read_text()


def test_completion_refuses_an_unknown_shell(cli: RunCli) -> None:
    refused = cli("completion", "tcsh")
    assert refused.code == 2 and "tcsh" in refused.stderr and refused.stdout == ""
