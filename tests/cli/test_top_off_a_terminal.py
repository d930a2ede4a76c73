"""``mqctl top`` draws a full-screen view: off a terminal (``mqctl top | head``, ``> file``, cron) it would
write the screen's escape sequences into the pipe and wait for keys that never come."""

from __future__ import annotations

from tests.support.cli import RunCli


def test_top_with_stdout_not_a_terminal_is_refused_at_once_with_one_line(cli: RunCli) -> None:
    result = cli("top", "-n", "127.0.0.1:1")
    assert result.code == 2, result
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert "terminal" in line and "--once" in line, line


def test_mqctl_output_in_the_environment_is_no_output_flag_for_the_live_screen(cli: RunCli) -> None:
    """``MQCTL_OUTPUT=json`` (a scripting default in a profile) made every ``mqctl top`` exit 2 with "-o
    applies to a printed frame": only an -o on the command line asks for a frame."""
    from_env = cli("top", "-n", "127.0.0.1:1", env={"MQCTL_OUTPUT": "json"})
    assert from_env.code == 2 and "stdout is not a terminal" in from_env.stderr, from_env.stderr
    for args in (("top", "-o", "json"), ("-o", "json", "top")):
        given = cli(*args, "-n", "127.0.0.1:1", env={"MQCTL_OUTPUT": "table"})
        assert given.code == 2 and "-o applies to a printed frame" in given.stderr, (args, given.stderr)
