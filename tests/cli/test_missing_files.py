"""A file or directory that is not there exits 3 (NotFoundError) whichever command names it, as README's
exit-code table says: a script tells a missing input from a mistyped flag (2) by the code alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import RunCli


@pytest.mark.parametrize(
    "args",
    [
        ("store", "verify", "--store", "{missing}"),
        ("store", "clean", "--store", "{missing}"),
        ("store", "commitlog", "ls", "--store", "{missing}"),
        ("spark-export", "--store", "{missing}", "--out", "{out}"),
        ("apply", "-f", "{missing}", "-n", "127.0.0.1:1"),
        ("topic", "apply", "-f", "{missing}", "-n", "127.0.0.1:1"),
        ("offset", "reset", "-g", "G", "-t", "T", "--from-file", "{missing}", "-n", "127.0.0.1:1"),
        ("broker", "start", "-c", "{missing}"),
        ("namesrv", "start", "-c", "{missing}"),
        ("msg", "send", "-t", "T", "-f", "{missing}", "-n", "127.0.0.1:1"),
    ],
    ids=lambda args: " ".join(a for a in args if not a.startswith(("{", "-", "127."))),
)
def test_a_missing_file_or_directory_exits_3_with_one_line(
    cli: RunCli, tmp_path: Path, args: tuple[str, ...]
) -> None:
    missing = tmp_path / "not-here"
    result = cli(*(a.format(missing=missing, out=tmp_path / "out") for a in args))
    assert result.code == 3, result
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("mqctl: error: ") and str(missing) in line, line


def test_an_export_into_a_missing_directory_names_the_out_path_not_its_temporary_file(
    cli: RunCli, tmp_path: Path
) -> None:
    """dlq export writes a temporary file beside --out, then renames it: the error named that file
    ('.x.jsonl.oytjcnj7'), a name the user never gave."""
    out = tmp_path / "no-dir" / "x.jsonl"
    result = cli("dlq", "export", "-g", "G", "--out", str(out), "-n", "127.0.0.1:1")
    assert result.code == 3, result
    [line] = result.stderr.splitlines()
    assert line.endswith(f": {out}"), line
