"""The options every online command shares, declared once, and ``--timeout`` in contexts,
so no command drifts from the others."""

from __future__ import annotations

import json
import re
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import click
import pytest

from mqctl.cli.app import command, main
from mqctl.errors import RequestTimeoutError

CLI = Path(__file__).resolve().parents[2] / "mqctl" / "cli"
Run = Callable[..., tuple[int, str, str]]
SHARED = {
    "namesrv": "--namesrv",
    "context": "--context",
    "output": "--output",
    "timeout": "--timeout",
    "deadline": "--deadline",
}


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Run:
    """Run the CLI in this process with a clean environment: (exit code, stdout, stderr)."""
    for name in ("MQCTL_NAMESRV", "MQCTL_TIMEOUT", "MQCTL_DEADLINE", "MQCTL_OUTPUT", "NAMESRV_ADDR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MQCTL_CONFIG_DIR", str(tmp_path / "config"))

    def call(*args: str) -> tuple[int, str, str]:
        code = main(list(args))
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return call


@pytest.fixture
def silent() -> Iterator[str]:
    """A loopback listener that never answers: every request to it times out."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield f"127.0.0.1:{sock.getsockname()[1]}"


def _commands(cmd: click.Command, path: str) -> Iterator[tuple[str, click.Command]]:
    if isinstance(cmd, click.Group):
        for name, sub in cmd.commands.items():
            yield from _commands(sub, f"{path} {name}")
    else:
        yield path, cmd


def test_no_cli_module_declares_the_shared_options_itself() -> None:
    """One declaration (mqctl.cli.common.cluster_options), not one per command."""
    spelled = {
        f"{path.name}:{n}": line.strip()
        for path in sorted(CLI.glob("*.py"))
        if path.name != "common.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\b(namesrv: NamesrvOpt|context: ContextOpt|context=context)\b", line)
    }
    assert spelled == {}


def test_every_online_command_has_the_same_shared_options() -> None:
    from mqctl.cli.app import command

    seen = 0
    for path, cmd in _commands(command(), "mqctl"):
        params = {p.name: p for p in cmd.params if isinstance(p, click.Option)}
        if "context" not in params:
            continue
        seen += 1
        # a terminal UI and a command writing its own file format (--out) render no -o
        wanted = set(SHARED) - ({"output"} if path in ("mqctl top", "mqctl dlq export") else set())
        assert wanted <= set(params), path
        assert params["namesrv"].opts == ["--namesrv", "-n"], path
        assert params["timeout"].envvar is None, (
            path
        )  # $MQCTL_TIMEOUT is resolved with the context, in config
        if "output" in params:
            assert params["output"].envvar == "MQCTL_OUTPUT" and params["output"].default == "table", path
    assert seen >= 30


@pytest.mark.slow  # waits out request timeouts against a silent listener
def test_context_timeout_and_its_precedence(run: Run, silent: str) -> None:
    code, out, _ = run("context", "add", "slow", "-n", silent, "--timeout", "0.3", "-o", "json")
    assert code == 0 and json.loads(out)["timeout"] == 0.3
    code, out, _ = run("--print-config")
    assert code == 0 and re.search(r"timeout_source +│ context slow", out) and "0.3" in out
    code, _, err = run("-v", "topic", "list")
    assert code == RequestTimeoutError.exit_code, err
    assert "timeout 0.3s per answer (from context slow)" in err
    code, _, err = run("-v", "topic", "list", "--timeout", "0.4")
    assert code == RequestTimeoutError.exit_code and "timeout 0.4s per answer (from --timeout)" in err
    # -n replaces the NameServers only: the context's timeout stays, as its TLS and credentials do
    code, _, err = run("-v", "topic", "list", "-n", silent)
    assert "timeout 0.3s per answer (from context slow)" in err


def test_env_timeout_beats_the_context_and_a_bad_one_is_a_usage_error(
    run: Run, silent: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    run("context", "add", "slow", "-n", silent, "--timeout", "9")
    monkeypatch.setenv("MQCTL_TIMEOUT", "0.3")
    code, _, err = run("-v", "group", "list")
    assert code == RequestTimeoutError.exit_code and "timeout 0.3s per answer (from $MQCTL_TIMEOUT)" in err
    monkeypatch.setenv("MQCTL_TIMEOUT", "soon")
    code, _, err = run("group", "list")
    assert code == 2 and "$MQCTL_TIMEOUT 'soon'" in err


@pytest.mark.slow  # waits out a deadline against a silent listener
def test_a_reads_deadline_is_set_by_flag_or_env_and_0_is_none(
    run: Run, silent: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read's deadline in all was 4 x --timeout (at least 30 s) with no way to set it: a slow but
    working fleet could not be read whole, nor a check be held to less than 30 s. --deadline (before or
    after the noun) and $MQCTL_DEADLINE set it, 0 is none; --print-config and -v say which and why."""
    code, _, err = run("-v", "--timeout", "5", "topic", "list", "-n", silent, "--deadline", "0.5")
    assert code == RequestTimeoutError.exit_code, err
    assert "deadline 0.5s in all (from --deadline)" in err and "deadline of 0.5s passed" in err
    monkeypatch.setenv("MQCTL_DEADLINE", "0.4")
    code, _, err = run("-v", "--timeout", "5", "group", "list", "-n", silent)
    assert code == RequestTimeoutError.exit_code and "deadline 0.4s in all (from $MQCTL_DEADLINE)" in err
    code, out, _ = run("--deadline", "0", "--print-config", "-n", silent, "-o", "json")
    assert code == 0 and (json.loads(out)["deadline"], json.loads(out)["deadline_source"]) == (
        None,
        "--deadline",
    )
    code, out, _ = run("--print-config", "-n", silent, "-o", "json")
    assert code == 0 and json.loads(out)["deadline"] == 0.4
    monkeypatch.setenv("MQCTL_DEADLINE", "soon")
    code, _, err = run("topic", "list", "-n", silent)
    assert code == 2 and "$MQCTL_DEADLINE 'soon'" in err
    monkeypatch.delenv("MQCTL_DEADLINE")
    code, out, _ = run("--timeout", "10", "--print-config", "-n", silent, "-o", "json")
    assert json.loads(out)["deadline"] == 40.0  # the default: 4 x --timeout


def test_context_set_changes_only_what_it_is_given(run: Run) -> None:
    run("context", "add", "dev", "-n", "127.0.0.1:1111", "--spark-remote", "sc://spark:15002")
    code, out, _ = run("context", "set", "dev", "--timeout", "12.5", "-o", "json")
    assert code == 0
    assert json.loads(out) == {
        "set": "dev",
        "namesrv": "127.0.0.1:1111",
        "spark_remote": "sc://spark:15002",
        "timeout": 12.5,
        "tls": False,
    }
    _, out, _ = run("context", "current", "-o", "json")
    assert json.loads(out)["timeout"] == 12.5 and json.loads(out)["timeout_source"] == "context dev"
    code, _, err = run("context", "set", "nope", "--timeout", "1")
    assert code == 3 and "nope" in err


def test_a_bad_timeout_in_the_contexts_file_is_a_usage_error(run: Run, tmp_path: Path) -> None:
    contexts = tmp_path / "config" / "contexts.json"
    contexts.parent.mkdir()
    contexts.write_text(
        json.dumps({"current": "x", "contexts": {"x": {"namesrv": "127.0.0.1:1", "timeout": "soon"}}})
    )
    code, _, err = run("context", "ls")
    assert code == 2 and str(contexts) in err and "soon" in err and len(err.splitlines()) == 1
    contexts.write_text(json.dumps({"contexts": {"x": {"timeout": 1}}}))
    code, _, err = run("context", "ls")
    assert code == 2 and "not a contexts file" in err and "namesrv" in err


def _slice_after(run: Run, *args: str) -> tuple[int, int, str]:
    """Run the CLI on a thread of its own (pytest's keeps its slice): (exit code, that thread's slice in
    ns after the command, stderr)."""
    from daemon.schedslice import get_slice_ns

    seen: list[tuple[int, int, str]] = []

    def command() -> None:
        code, _, err = run(*args)
        seen.append((code, get_slice_ns(), err))

    thread = threading.Thread(target=command)
    thread.start()
    thread.join()
    return seen[0]


def test_sched_slice_micros_puts_the_command_s_loop_thread_on_that_slice(
    run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--sched-slice-micros`` (or ``$MQCTL_CLIENT_SCHED_SLICE_MICROS``) gives the thread the command's
    event loop runs on that EEVDF slice; a value outside the kernel's bounds is a usage error."""
    from daemon.schedslice import SliceRefused, get_slice_ns

    try:
        default = get_slice_ns()
    except SliceRefused as exc:
        pytest.skip(f"no sched_getattr here: {exc}")
    if not default:
        pytest.skip("no per-task EEVDF slice here (Linux 6.12+)")
    assert _slice_after(run, "context", "ls")[:2] == (0, default)
    assert _slice_after(run, "--sched-slice-micros", "150", "context", "ls")[:2] == (0, 150_000)
    monkeypatch.setenv("MQCTL_CLIENT_SCHED_SLICE_MICROS", "200")
    assert _slice_after(run, "context", "ls")[:2] == (0, 200_000)
    code, _, err = run("--sched-slice-micros", "50", "context", "ls")
    assert code == 2 and "--sched-slice-micros is 0 or 100-100000, not 50" in err


def test_an_options_help_names_only_flags_its_command_has() -> None:
    """``msg send -b`` said "(beats --cluster)" where msg send has no --cluster. A flag an option's help
    names is the command's own or the root's (another command's is quoted: 'namesrv start --listen')."""
    root = command()
    known = {opt for param in root.params for opt in param.opts}
    wrong = []
    for path, cmd in _commands(root, "mqctl"):
        own = known | {opt for param in cmd.params for opt in (*param.opts, *param.secondary_opts)}
        for param in cmd.params:
            named = re.findall(r"(?<![\w'-])--[a-z][a-z-]*[a-z]", getattr(param, "help", None) or "")
            wrong += [f"{path} {param.name}: {flag}" for flag in named if flag not in own]
    # spark-export's --remote is shared with its report (no --out) and names a context's setting
    assert [w for w in wrong if not w.startswith("mqctl spark-export")] == []


def test_print_config_answers_for_the_root_flags_given_with_it(run: Run) -> None:
    """``mqctl --context dr --print-config`` printed the current context's NameServers (an eager option
    ran before --context, --timeout, --ca and -o were read): it answers for those flags now."""
    run("context", "add", "prod", "-n", "127.0.0.1:1111", "--use")
    run("context", "add", "dr", "-n", "127.0.0.1:2222")
    code, out, _ = run("--context", "dr", "--timeout", "9", "--print-config", "-o", "json")
    shown = json.loads(out)
    assert code == 0 and (shown["namesrv"], shown["source"]) == ("127.0.0.1:2222", "context dr")
    assert (shown["timeout"], shown["timeout_source"]) == (9.0, "--timeout")
    code, out, _ = run("--print-config", "--ca", "ca.pem", "-o", "yaml")
    assert code == 0 and "tls_source: --tls" in out and "ca: ca.pem" in out
    assert run("--context", "nope", "--print-config")[0] == 3
    code, _, err = run("--debug")  # without a command or --print-config the root still wants a command
    assert code == 2 and "Missing command" in err


def test_namesrv_before_the_noun_as_after_it(run: Run, silent: str) -> None:
    """``mqctl -n NS cluster list`` (an alias such as ``mqctl -n prod:9876``) was 'No such option -n';
    the command's own -n still beats it."""
    code, _, err = run("-n", silent, "--timeout", "0.2", "cluster", "list")
    assert code == RequestTimeoutError.exit_code and silent in err, err
    code, _, err = run("-n", "127.0.0.1:1", "cluster", "list", "-n", silent, "--timeout", "0.2")
    assert code == RequestTimeoutError.exit_code and silent in err, err
    code, out, _ = run("-n", silent, "--print-config", "-o", "json")
    assert code == 0 and (json.loads(out)["namesrv"], json.loads(out)["source"]) == (silent, "--namesrv")
