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
