"""The root command: version, help, the usage-error contract and lazy imports."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

import click
import pytest
from typer.models import DefaultPlaceholder

from mqctl import __version__
from mqctl.cli.app import NOUNS, command
from mqctl.errors import NotFoundError, UsageError
from tests.support.cli import RunCli, run_in_process
from tests.support.paths import ROOT


@pytest.fixture
def cli(cli_process: RunCli) -> RunCli:
    """The entry point itself is under test: a real ``mqctl`` process per call (end to end)."""
    return cli_process


@pytest.mark.slow
def test_version(cli: RunCli) -> None:
    result = cli("--version")
    assert result.code == 0
    # the version, then which build runs (store.native.describe_build)
    assert result.stdout.strip().startswith(f"mqctl {__version__} (")


def test_help_lists_every_registered_noun(cli: RunCli) -> None:
    result = cli("--help")
    assert result.code == 0
    for name, _, _ in NOUNS:
        assert name in result.stdout


@pytest.mark.slow
def test_bad_flag_is_one_line_on_stderr_with_usage_code(cli: RunCli) -> None:
    result = cli("--no-such-flag")
    assert result.code == UsageError.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("mqctl: error:") and "--no-such-flag" in lines[0]


@pytest.mark.slow
def test_bad_flag_on_a_subcommand_names_its_help(cli: RunCli) -> None:
    result = cli("context", "ls", "--bogus")
    assert result.code == UsageError.exit_code
    assert result.stderr.splitlines() == [result.stderr.strip()]
    assert "mqctl context ls --help" in result.stderr


@pytest.mark.slow
def test_unknown_command_and_bad_choice_are_usage_errors(cli: RunCli) -> None:
    assert cli("no-such-noun").code == UsageError.exit_code
    bad_format = cli("context", "ls", "-o", "xml")
    assert bad_format.code == UsageError.exit_code
    assert "xml" in bad_format.stderr


@pytest.mark.slow
def test_not_found_exit_code(cli: RunCli) -> None:
    result = cli("context", "use", "missing")
    assert result.code == NotFoundError.exit_code
    assert "missing" in result.stderr and len(result.stderr.splitlines()) == 1


@pytest.mark.slow  # an interpreter of its own
def test_cli_import_stays_light() -> None:
    """``mqctl --help`` must stay fast: building the CLI never imports textual or pyspark."""
    code = (
        "import sys; from mqctl.cli.app import command; dict(command().commands); "
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'pyspark', 'pyarrow', 'numpy')); "
        "print(','.join(heavy))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == ""


@pytest.mark.slow
def test_help_renders_without_rich_or_markdown() -> None:
    """Typer's rich help imported markdown_it and rich (0.3 s of 'mqctl --help'); click's plain help needs neither."""
    code = (
        "import sys, contextlib, io; from mqctl.cli.app import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out: main(['--help'])\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('markdown_it', 'rich'))\n"
        "print(','.join(heavy)); print('Commands:' in out.getvalue())"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.split() == ["True"], proc.stdout


def test_a_command_builds_only_its_own_noun() -> None:
    """Converting every noun's Typer app was half the start-up of any command: a run builds one."""
    from mqctl.cli.app import _noun, command

    assert (
        _noun(["--no-color", "topic", "list"]) == "topic" and _noun(["topci"]) is None and _noun([]) is None
    )
    root = command()
    assert list(root.commands) == [name for name, _, _ in NOUNS] and root.commands.built() == []
    assert "topic" in root.commands and "topci" not in root.commands and root.commands.built() == []
    assert (
        root.get_command(click.Context(root), "topic") is not None
        and root.get_command(click.Context(root), "topci") is None
    )
    assert root.commands.built() == ["topic"]


#: Run the CLI in a fresh interpreter and print its exit code and the noun modules it imported.
NOUNS_IMPORTED = """
import contextlib, io, json, sys
from mqctl.cli.app import NOUNS, main
with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(io.StringIO()):
    try:
        code = main(json.loads(sys.argv[1]))
    except SystemExit as exc:  # a completion answers and exits inside click
        code = exc.code
ours = sorted(m for m in sys.modules if m.split(".")[0] in ("mqctl", "daemon", "store"))
print(json.dumps([code, [m for m in ours if m in {module for _, module, _ in NOUNS}], out.getvalue(), ours]))
"""


def _run_fresh(args: list[str], env: dict[str, str] | None = None) -> tuple[int, list[str], str, list[str]]:
    """Exit code, noun modules imported, stdout, every module of ours imported."""
    proc = subprocess.run(
        [sys.executable, "-c", NOUNS_IMPORTED, json.dumps(args)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **(env or {})},
    )
    code, imported, out, ours = json.loads(proc.stdout)
    return code, imported, out, ours


def _nouns_imported(args: list[str], env: dict[str, str] | None = None) -> tuple[int, list[str], str]:
    return _run_fresh(args, env)[:3]


def test_the_root_help_loads_only_the_root_of_ours() -> None:
    """No logging set-up, error tree, store or daemon package for a help that needs none of them."""
    code, _, out, ours = _run_fresh(["--help"])
    assert code == 0 and out.startswith("Usage: mqctl [OPTIONS] COMMAND")
    assert ours == ["mqctl", "mqctl.cli", "mqctl.cli.app", "mqctl.interrupts"]


@pytest.mark.parametrize(
    ("args", "code", "imported"),
    [
        (["--help"], 0, []),
        (["-h"], 0, []),
        ([], 2, []),
        (["--version"], 0, []),
        (["no-such-noun"], 2, []),
        (["topic", "--help"], 0, ["mqctl.cli.topic"]),
        (["--no-color", "-o", "json", "up", "--help"], 0, ["mqctl.cli.up"]),
    ],
)
def test_the_root_help_imports_no_noun_and_a_nouns_help_only_its_own(
    args: list[str], code: int, imported: list[str]
) -> None:
    assert _nouns_imported(args)[:2] == (code, imported)


def test_completing_a_noun_imports_none_and_its_commands_that_noun_alone() -> None:
    nouns = {"_MQCTL_COMPLETE": "complete_bash", "COMP_WORDS": "mqctl t", "COMP_CWORD": "1"}
    assert _nouns_imported([], nouns) == (0, [], "topic\ntimer\ntls\ntop\n")
    commands = {"_MQCTL_COMPLETE": "complete_bash", "COMP_WORDS": "mqctl topic cr", "COMP_CWORD": "2"}
    assert _nouns_imported([], commands) == (0, ["mqctl.cli.topic"], "create\n")
    line = {"_MQCTL_COMPLETE": "complete_bash", "_MQCTL_COMPLETE_LINE": "mqctl topic cr"}  # the script's
    assert _nouns_imported([], line) == (0, ["mqctl.cli.topic"], "create\n")


def test_each_noun_has_the_registrys_help_and_no_other() -> None:
    """A noun's one-liner is written once, in NOUNS: its own help is that text, its module's app has none."""
    root = command()
    for name, module, text in NOUNS:
        assert root.commands[name].help == text, name
        assert isinstance(importlib.import_module(module).app.info.help, DefaultPlaceholder), module


@pytest.mark.parametrize(("args", "code"), [((), 2), (("topic",), 2), (("store", "cq"), 2), (("check",), 3)])
def test_a_group_without_its_command_prints_its_help(
    cli_env: dict[str, str], args: tuple[str, ...], code: int
) -> None:
    """``mqctl`` or ``mqctl topic`` alone shows the help as help: its lines, not one escaped error line."""
    result = run_in_process(cli_env, *args)
    assert result.code == code  # 'check' is a monitoring plugin: UNKNOWN
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines[0].startswith(f"Usage: mqctl {' '.join(args)}".rstrip() + " [OPTIONS] COMMAND")
    assert "Commands:" in lines and "\\n" not in result.stderr


@pytest.mark.parametrize("noun", ["up", "top", "export", "apply"])
def test_a_noun_that_is_one_command_offers_no_command(cli_env: dict[str, str], noun: str) -> None:
    """``mqctl up --help`` read "Usage: mqctl up [OPTIONS] [COMMAND] [ARGS]..." and ``mqctl up foo`` said
    "No such command 'foo'": these nouns take options only."""
    shown = run_in_process(cli_env, noun, "--help")
    assert shown.code == 0 and shown.stdout.splitlines()[0] == f"Usage: mqctl {noun} [OPTIONS]"
    required = ["-f", str(ROOT / "README.md")] if noun == "apply" else []  # checked before extra arguments
    extra = run_in_process(cli_env, noun, *required, "foo")
    assert extra.code == 2 and "unexpected extra argument (foo)" in extra.stderr, extra.stderr


def test_the_root_help_lists_the_nouns_in_their_order(cli_env: dict[str, str]) -> None:
    listed = run_in_process(cli_env, "--help").stdout.split("Commands:\n")[1].splitlines()
    assert [line.split()[0] for line in listed] == [name for name, _, _ in NOUNS]
