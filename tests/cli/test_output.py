"""The one output layer: every format from the same result."""

from __future__ import annotations

import io
import json
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from mqctl import units
from mqctl.output import FORMATS, RowStream, render
from mqctl.units import server_int


@dataclass
class Row:
    topic: str
    queues: int
    tags: list[str]
    created: datetime


ROWS = [
    Row("orders", 4, ["a", "b"], datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
    Row("events", 8, [], datetime(2026, 1, 2, 3, 4, 6, tzinfo=UTC)),
]


def rendered(result: object, fmt: str, *, streamed: bool = False) -> str:
    """``result`` in ``fmt``, by ``render`` or (``streamed``) as one row of a ``RowStream``."""
    out = io.StringIO()
    if streamed:
        RowStream(fmt, out)(result)
    else:
        render(result, fmt, out=out)
    return out.getvalue()


def test_json_is_stable_and_machine_readable() -> None:
    text = rendered(ROWS, "json")
    data = json.loads(text)
    assert data[0] == {
        "topic": "orders",
        "queues": 4,
        "tags": ["a", "b"],
        "created": "2026-01-02T03:04:05+00:00",
    }
    assert list(data[0]) == ["topic", "queues", "tags", "created"]
    assert text == rendered(ROWS, "json")


def test_yaml_matches_json() -> None:
    assert yaml.safe_load(rendered(ROWS, "yaml")) == json.loads(rendered(ROWS, "json"))


def test_csv_has_a_header_row() -> None:
    lines = rendered(ROWS, "csv").splitlines()
    assert lines[0] == "topic,queues,tags,created"
    assert lines[1] == 'orders,4,"[""a"",""b""]",2026-01-02T03:04:05+00:00'
    assert len(lines) == 3


def test_table_has_headers_and_cells() -> None:
    text = rendered(ROWS, "table")
    assert "TOPIC" in text and "QUEUES" in text
    assert "orders" in text and "events" in text
    assert "\x1b[" not in text


def test_single_record_renders_as_key_value() -> None:
    assert rendered({"a": 1, "b": None}, "csv") == "key,value\na,1\nb,\n"
    assert json.loads(rendered({"a": 1}, "json")) == {"a": 1}


def test_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown output format"):
        rendered(ROWS, "xml")
    assert set(FORMATS) == {"table", "wide", "json", "yaml", "csv"}


def test_table_cells_are_data_not_markup() -> None:
    text = rendered([{"keys": "[urgent]", "tags": "[vip]", "body": "a [/b] b [bold]c[/bold]"}], "table")
    assert "[urgent]" in text and "[vip]" in text and "a [/b] b [bold]c[/bold]" in text


def test_a_piped_table_is_as_wide_as_its_content() -> None:
    token = "x" * 250
    text = rendered([{"id": token, "topic": "t" * 40}], "table")
    assert token in text  # one unbroken line, not folded at 80 (or 200) columns
    assert len(text.splitlines()) == 3  # header, rule, row


def test_nested_values_are_never_json_in_a_cell() -> None:
    text = rendered(
        [
            {
                "broker": "b1",
                "changes": {"read_queue_nums": [None, 8], "perm": [6, 7]},
                "brokers": ["a:1", "b:2"],
            }
        ],
        "table",
    )
    assert "read_queue_nums: - → 8" in text and "perm: 6 → 7" in text
    assert "a:1, b:2" in text
    # a map-valued field's change (a group's extra fields) is a change too, not "extra=, "
    extra = rendered({"changes": {"extra": [{}, {"a": 1}], "attrs": [None, {}]}}, "table")
    assert "extra: - → a=1" in extra and "attrs: - → -" in extra and "=," not in extra
    assert "{" not in text and '"' not in text


def test_a_record_with_a_list_of_records_renders_them_as_rows() -> None:
    plan = {
        "group": "G",
        "topic": "T",
        "queues": [{"broker_name": "b", "queue_id": q, "current": 1, "new": 5} for q in range(3)],
    }
    rows = [[c.strip() for c in line.split("│")] for line in rendered(plan, "table").splitlines()]
    assert ["group", "G"] in rows and ["topic", "T"] in rows
    assert [r for r in rows if r[0] == "b"] == [["b", str(q), "1", "5"] for q in range(3)]
    assert not any("{" in cell for r in rows for cell in r)


def test_row_stream_writes_json_lines_and_one_csv_header() -> None:

    out = io.StringIO()
    stream = RowStream("json", out)
    stream.rows([{"a": 1}, {"a": 2}])
    stream.rows({"a": 3})
    assert [json.loads(line) for line in out.getvalue().splitlines()] == [{"a": 1}, {"a": 2}, {"a": 3}]
    out = io.StringIO()
    stream = RowStream("csv", out)
    stream.rows([{"a": 1, "b": "x"}])
    stream.rows([{"a": 2, "b": "y"}])
    assert out.getvalue() == "a,b\n1,x\n2,y\n"
    out = io.StringIO()
    RowStream("table", out, columns=["a", "b"])({"a": "[x]", "b": "l1\nl2"})
    assert out.getvalue() == "[x] l1\\nl2\n"


def test_one_rule_for_sizes_times_and_durations() -> None:
    from mqctl.timespec import parse_duration
    from mqctl.units import duration_text, size_text, time_fields

    assert [size_text(n) for n in (512, 1536, 4 * 1024 * 1024, 3 * 1024**3)] == [
        "512 B",
        "1.5 KiB",
        "4.0 MiB",
        "3.0 GiB",
    ]
    # one form, the duration flags': a few seconds read as such, not "0m 03s" (store commitlog ls's age)
    assert [duration_text(ms) for ms in (850, 0, 3_000, 59_999, 60_000, 185_000, 7_260_000)] == [
        "850ms",
        "0s",
        "3s",
        "59s",
        "1m00s",
        "3m05s",
        "2h01m",
    ]
    assert duration_text(2 * 86_400_000 + 6 * 3_600_000) == "2d06h"
    assert parse_duration(duration_text(2 * 86_400_000 + 6 * 3_600_000)) == 2 * 86_400_000 + 6 * 3_600_000
    assert time_fields("t", 0) == {"t": None, "t_ms": 0}
    assert time_fields("t", 1_000) == {"t": "1970-01-01T00:00:01.000Z", "t_ms": 1_000}
    rows = [{"file": "f", "size": 1048576, "age_ms": 90_000, **time_fields("last", 0)}]
    assert json.loads(rendered(rows, "json")) == [
        {"file": "f", "size": 1048576, "age_ms": 90_000, "last": None, "last_ms": 0}
    ]
    table = rendered(rows, "table")
    assert "1.0 MiB" in table and "1m30s" in table and "never" in table
    assert "LAST MS" not in table and "AGE MS" not in table and "AGE" in table
    record = rendered({"size": 2048, **time_fields("created", 0)}, "table")
    assert "2.0 KiB" in record and "never" in record and "created_ms" not in record


def test_an_empty_list_prints_no_blank_line_and_keeps_its_title() -> None:
    """``dlq ls`` with no dead letters printed a blank line, and ``broker clean`` of a broker with no
    CommitLog file a blank line instead of its summary (the table's title)."""
    assert rendered([], "table") == ""
    out = io.StringIO()
    render([], "table", out=out, title="127.0.0.1:10911: disk 38%; 0 files deletable")
    assert out.getvalue() == "127.0.0.1:10911: disk 38%; 0 files deletable\n"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_csv_on_a_terminal_escapes_control_characters_and_elsewhere_keeps_them() -> None:
    """``msg query -o csv`` and ``msg tail -o csv`` wrote a body's ESC and BEL raw to the terminal (OSC 0
    retitled it): escaped there as in a table; a pipe or file still gets the data as it is."""
    row = {"tags": "t\x1b[31mred", "body": "b\x1b]0;TITLE\x07ody"}
    screen = _Terminal()
    render([row], "csv", out=screen)
    RowStream("csv", screen)(row)
    assert "\x1b" not in screen.getvalue() and "\x07" not in screen.getvalue()
    assert screen.getvalue().count("b\\x1b]0;TITLE\\x07ody") == 2
    assert rendered([row], "csv") == "tags,body\nt\x1b[31mred,b\x1b]0;TITLE\x07ody\n"


def test_a_diagnostic_line_is_written_whole(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """rich broke stderr lines at 80 columns (the terminal's, or 80 off one): ``up --tls``'s "connect with:
    mqctl context add ... --ca PATH --use" came out in two lines, so pasting it ran half a command."""
    from mqctl.output import stderr_console

    monkeypatch.setenv("COLUMNS", "40")
    line = "TLS only; connect with: mqctl context add local-tls -n 127.0.0.1:9876 --ca /a/long/dir/ca.pem --use --force"
    stderr_console().print(line)
    assert capsys.readouterr().err == line + "\n"


def test_a_table_on_a_narrow_terminal_never_cuts_a_number_in_two(monkeypatch: pytest.MonkeyPatch) -> None:
    """'cluster status' on 80 columns folded every cell: CommitLog offset 7684562 read 768, 456 and 2 on
    three lines. A table that would cut a word is drawn as wide as its content (the terminal wraps its
    lines, as kubectl's); one that fits keeps the terminal's width."""
    screen = _Terminal()
    monkeypatch.setattr("sys.stdout", screen)
    monkeypatch.setenv("COLUMNS", "40")
    wide = {f"column_{i}": f"127.0.0.{i}:10911" for i in range(6)} | {"commitlog_max_offset": 7684562}
    render([wide], "table")
    assert "7684562" in screen.getvalue() and all(f"127.0.0.{i}:10911" in screen.getvalue() for i in range(6))
    screen.seek(0)
    screen.truncate()
    render([{"name": "a", "value": 1}], "table")
    plain_lines = re.sub(r"\x1b\[[0-9;]*m", "", screen.getvalue()).splitlines()  # without the colours
    assert max(len(line) for line in plain_lines) <= 40


@pytest.mark.parametrize("streamed", [False, True])
def test_json_writes_the_controls_a_terminal_acts_on_as_escapes_and_keeps_the_value(streamed: bool) -> None:
    """JSON itself escapes only C0: DEL, C1 (a lone U+009B is a CSI to some terminals) and the bidi
    overrides would reach the terminal raw. Escaped as \\uXXXX, the value a JSON reader gets is unchanged."""
    data = {"body": "pay\u202e0001\u202c \x9b2J\x7f \x1b[31m", "big": 2**64 + 1}
    text = rendered(data, "json", streamed=streamed)
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]", text), repr(text)
    assert "\\u202e" in text and "\\u009b" in text and "\\u007f" in text
    assert json.loads(text) == data


@pytest.mark.parametrize("streamed", [False, True])
def test_yaml_writes_the_controls_a_terminal_acts_on_as_escapes_and_keeps_the_value(streamed: bool) -> None:
    """PyYAML escapes C0, DEL and most of C1 itself, but with ``allow_unicode`` leaves the bidi overrides
    and isolates, the marks and NEL (U+0085) raw: each is written as an escape (\\uXXXX; NEL as \\N) in a
    double-quoted scalar, in values and keys alike, and a YAML reader gets the same data back."""
    data = {
        "body": "pay\u202e0001\u202c \u2066x\u2069\u200e \x85next \x9b2J\x7f \x1b[31m\ttab",
        "k\u202eey": ["\u202d", "plain", "multi\nline \u2067"],
        "folded": " ".join(["word\u202e"] * 40),  # longer than a line: PyYAML folds it
        "n": 7,
    }
    text = rendered(data, "yaml", streamed=streamed)
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]", text), repr(
        text
    )
    assert "\\u202e" in text and "\\u2066" in text and "\\N" in text  # NEL: YAML's own escape
    loaded = list(yaml.safe_load_all(text))[-1] if streamed else yaml.safe_load(text)
    assert loaded == data


def test_a_piped_tables_title_is_one_line_whatever_the_tables_width() -> None:
    """A title was wrapped to its table's width: under a narrow table, a word or less a line (padded with
    blanks), which no grep finds and no reader follows."""
    title = "broker 127.0.0.1:10911: disk 31%, fileReservedTime 72 h, 0 files deletable"
    out = io.StringIO()
    render([{"a": "x"}], "table", out=out, title=title)
    assert out.getvalue().splitlines()[0] == title, out.getvalue()


def test_watch_json_lines_carry_the_time_of_their_refresh(capsys: pytest.CaptureFixture[str]) -> None:
    from mqctl.cli.common import render_every

    calls = iter([[{"group": "G", "lag": 3}, {"group": "H", "lag": 0}], {"group": "G", "lag": 1}])

    def produce() -> object:
        try:
            return next(calls)
        except StopIteration:
            raise KeyboardInterrupt from None

    before = int(time.time() * 1000)
    render_every(produce, "json", watch=0.1)
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["group"], r["lag"]) for r in lines] == [("G", 3), ("H", 0), ("G", 1)]
    assert all(list(r)[:2] == ["taken_at", "taken_at_ms"] for r in lines)
    first, _, second = (r["taken_at_ms"] for r in lines)
    assert before <= first == lines[1]["taken_at_ms"] < second  # one time per refresh, the sleep between
    assert lines[0]["taken_at"] == units.iso(first)


@pytest.mark.parametrize("output", ["json", "table"])
def test_watch_says_its_period_once_off_a_redrawn_screen(
    capsys: pytest.CaptureFixture[str], output: str
) -> None:
    """'HH:MM:SS every 1s, Ctrl-C to stop' was repeated on stderr at every refresh, into a pipe or a log
    too, where no screen is redrawn under it."""
    from mqctl.cli.common import render_every

    calls = iter([{"group": "G", "lag": n} for n in range(3)])

    def produce() -> object:
        try:
            return next(calls)
        except StopIteration:
            raise KeyboardInterrupt from None

    render_every(produce, output, watch=0.01)
    err = capsys.readouterr().err
    assert err.count("every 0.01s, Ctrl-C to stop") == 1, err


def test_a_lists_footer_shows_under_a_table_on_a_terminal_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """``topic list`` and ``group list`` say under a table how many rows they hid; a pipe, a file or a
    document gets the rows alone (a script counts lines, a parser reads JSON)."""
    from mqctl.output import Rows

    def listed() -> Rows:
        return Rows([{"topic": "Orders"}], columns=["topic"], footer="hidden: 3 system topics")

    screen = _Terminal()
    monkeypatch.setattr("sys.stdout", screen)
    render(listed(), "table")
    text = re.sub(r"\x1b\[[0-9;]*m", "", screen.getvalue())
    assert text.rstrip("\n").splitlines()[-1] == "hidden: 3 system topics" and "Orders" in text
    screen.seek(0)
    screen.truncate()
    render(listed(), "json")
    assert json.loads(screen.getvalue()) == [{"topic": "Orders"}]
    piped = rendered(listed(), "table")
    assert "Orders" in piped and "hidden" not in piped


def test_up_context_hint_quotes_its_paths(capsys: pytest.CaptureFixture[str]) -> None:
    """`up --data 'my data'` printed `--ca /tmp/my data/tls/ca.pem` unquoted: pasted, the shell split it."""
    import shlex

    from mqctl.cli.up import _context_hint

    root = Path("/tmp/my data")
    _context_hint(root, "127.0.0.1:9876", tls=True, acl=True, member=True)
    line = capsys.readouterr().err.strip()
    words = shlex.split(line.split("connect with: ", 1)[1])
    assert words[:5] == ["mqctl", "context", "add", "local-tls-acl", "-n"]
    flags = dict(zip(words[6:-2:2], words[7:-2:2], strict=True))
    assert flags == {
        "--ca": "/tmp/my data/tls/ca.pem",
        "--cert": "/tmp/my data/tls/server.pem",
        "--key": "/tmp/my data/tls/server.key",
        "--access-key": "mqctl-admin",
        "--secret-key-file": "/tmp/my data/acl/admin.secret",
    }
    assert words[-2:] == ["--use", "--force"]


def test_a_count_takes_the_number_of_its_noun() -> None:
    """'1 masters', '1 files': a count's noun agrees with it in human output."""
    from mqctl.units import plural

    assert [plural(n, "master") for n in (0, 1, 2)] == ["0 masters", "1 master", "2 masters"]
    assert plural(1_000, "entry", "entries") == "1,000 entries" and plural(1, "entry", "entries") == "1 entry"


def test_no_message_of_the_cli_or_the_daemons_writes_a_plural_in_brackets() -> None:
    """'1 quarantine(s) hold 3 record(s)': every count the CLI, the daemons and the store write (their
    log lines too) goes through ``plural()``."""
    import ast

    from tests.support.paths import ROOT

    bracketed = re.compile(r"[A-Za-z]\(s\)")
    found = []
    for path in sorted(p for tree in ("mqctl", "daemon", "store") for p in (ROOT / tree).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and bracketed.search(node.value)
            ):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value.strip()[:60]}")
    assert not found, "\n".join(found)


def test_mqctl_s_own_warnings_read_as_its_other_diagnostics() -> None:
    """A warning of mqctl's (a group without its master in 'cluster list') came out as a timestamped
    log record among 'mqctl: warning:' lines; a daemon's record, and every one under --debug, keeps it."""
    import logging

    from mqctl.output import PrintableFormatter

    def record(name: str, level: int) -> logging.LogRecord:
        return logging.LogRecord(name, level, __file__, 1, "broker-a: no %s\x1b", ("master",), None)

    plain = PrintableFormatter("%(levelname)s %(name)s: %(message)s", plain=True)
    assert (
        plain.format(record("mqctl.services.cluster", logging.WARNING))
        == "mqctl: warning: broker-a: no master\\x1b"
    )
    assert plain.format(record("daemon.broker.ha", logging.WARNING)).startswith("WARNING daemon.broker.ha: ")
    assert plain.format(record("mqctl.cli.up", logging.ERROR)).startswith("ERROR mqctl.cli.up: ")
    debug = PrintableFormatter("%(levelname)s %(name)s: %(message)s")
    assert debug.format(record("mqctl.services.cluster", logging.WARNING)).startswith(
        "WARNING mqctl.services"
    )


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("42", 42),
        ("-7", -7),
        ("+7", 7),
        (str(2**63 - 1), 2**63 - 1),
        (str(2**63), None),
        ("²", None),
        ("+-5", None),
        ("1_000", None),
        (" 5", None),
        ("NaN", None),
        ("", None),
        (None, None),
    ],
)
def test_a_server_number_is_read_as_javas_long_parse_reads_it(text: str | None, value: int | None) -> None:
    """A hostile server's text is no number rather than an exception: ``²`` passes ``isdigit`` and ``+-5`` a
    sign strip, and int() refuses both."""
    assert server_int(text) == value
