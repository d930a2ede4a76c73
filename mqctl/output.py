"""The output layer: one ``render(result, fmt)`` for every command, and one ``RowStream`` for streams.

Data goes to stdout, diagnostics to stderr. A result is a mapping (one record), a sequence
of mappings (rows) or dataclasses of either shape. Tables use rich and colour only on a
terminal; JSON is stable (keys in column order, ISO timestamps) for scripts; CSV has a header.

Every table cell is data: it is a rich ``Text``, never parsed as markup, so a key ``[urgent]``
or a body holding ``[/b]`` shows as typed, and control characters in it (ESC, TAB, CR, BEL, DEL, C1,
bidi overrides) are shown escaped (``\x1b``, ``\t``), so user data cannot move the cursor, recolour
or retitle the operator's terminal; so are CSV fields written to a terminal (a file or pipe gets them as
they are); ``--raw`` (``msg show``/``msg tail``) prints them as they are. Nested values never appear as JSON in a cell: a list of
records inside a record (a plan's queues, a create's brokers) renders as a table of its own under
the record's summary, a list of values as ``a, b``, a mapping as ``name=value`` pairs and a change
``[old, new]`` as ``old → new``. Off a terminal a table is as wide as its content (no wrapping
mid-token when piped).
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import enum
import functools
import io
import json
import logging
import os
import re
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, TextIO

from mqctl import units
from mqctl.interrupts import whole_output

if TYPE_CHECKING:  # rich loads when something is rendered, not when the CLI is built
    from rich.console import Console

#: ``wide``: a table of every column; ``table`` leaves out the ones a result does not show by default.
FORMATS = ("table", "wide", "json", "yaml", "csv")

_state: dict[str, bool] = {"no_color": False, "verbose": False, "utc": False, "raw": False, "wide": False}

# Every C0 control but newline, DEL, C1, and the bidi overrides and isolates that reorder what is shown.
_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\t": "\\t", "\r": "\\r", "\n": "\\n"}


def _escape(char: str) -> str:
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}")


def printable(text: str, *, newlines: bool = True) -> str:
    """``text`` with every control character written as an escape (``\x1b``, ``\t``), and newlines too
    unless ``newlines``: what a terminal then shows is what the data holds, and it cannot be driven."""
    text = _CONTROL.sub(lambda m: _escape(m.group()), text)
    return text if newlines else text.replace("\n", "\\n")


class PrintableFormatter(logging.Formatter):
    """The CLI's log lines (WARNINGs on stderr) with control characters escaped as :func:`printable` does:
    they carry what servers said (a broker's name, an address, a remark), and a server's word must not
    drive the terminal."""

    def __init__(self, fmt: str, *, plain: bool = False) -> None:
        super().__init__(fmt)
        #: mqctl's own warnings as the CLI's other diagnostics (``mqctl: warning: ...``), one line each;
        #: the daemons' records, and every record under --debug, keep the time and logger.
        self.plain = plain

    def format(self, record: logging.LogRecord) -> str:
        if self.plain and record.name.split(".", 1)[0] == "mqctl" and record.levelno == logging.WARNING:
            return printable(f"mqctl: warning: {record.getMessage()}", newlines=False)
        return printable(super().format(record))


def json_text(data: Any, *, indent: int | None = None) -> str:
    """``data`` as JSON with the characters :data:`_CONTROL` names written as ``\\uXXXX`` escapes: JSON
    escapes C0 itself but leaves DEL, C1 and the bidi controls raw. The same value to any JSON reader, and
    a terminal showing it cannot be driven or have its text reordered (its own newlines are not matched)."""
    return _escaped(json.dumps(data, ensure_ascii=False, indent=indent))


def yaml_text(data: Any) -> str:
    """``data`` as YAML with the characters :data:`_CONTROL` names written as ``\\uXXXX`` escapes, as
    :func:`json_text`: PyYAML escapes C0, DEL and most of C1 itself, but with ``allow_unicode`` leaves the
    bidi controls raw. A string holding one is written double-quoted (the one YAML style with escapes),
    so every such character left in the text is inside one and its escape reads back as the same value."""
    import yaml

    return _escaped(yaml.dump(data, Dumper=_yaml_dumper(), sort_keys=False, allow_unicode=True))


def _escaped(text: str) -> str:
    """``text`` with each character :data:`_CONTROL` names as a ``\\uXXXX`` escape."""
    return _CONTROL.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


@functools.cache
def _yaml_dumper() -> type:
    """PyYAML's safe dumper writing a string that holds a :data:`_CONTROL` character double-quoted (made
    once: ``RowStream`` dumps a document per row)."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def string(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        style = '"' if _CONTROL.search(value) else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, string)
    return Dumper


def set_raw(raw: bool) -> None:
    """``--raw``: user data reaches the terminal as it is (control characters included)."""
    _state["raw"] = raw


def configure(*, no_color: bool, verbose: bool = False, utc: bool = False) -> None:
    """Set once by the CLI's root callback from ``--no-color``, ``--verbose`` and ``--utc``."""
    _state["no_color"] = no_color
    _state["verbose"] = verbose
    _state["utc"] = utc
    _state["raw"] = False
    _state["wide"] = False


def table_format(fmt: str) -> str:
    """``-o``'s value as commands see it: ``wide`` is a ``table`` of every column (kubectl's ``-o wide``),
    remembered here, so that a command telling tables from documents needs to know one table."""
    if fmt == "wide":
        _state["wide"] = True
        return "table"
    return fmt


def note(text: str) -> None:
    """A line on stderr with ``-v`` only (where a command connects, what it chose)."""
    if _state["verbose"]:
        stderr_console().print(text, style="dim")


def _color_allowed(stream: TextIO) -> bool:
    return not _state["no_color"] and "NO_COLOR" not in os.environ and stream.isatty()


def _console(stream: TextIO, *, soft_wrap: bool) -> Console:
    from rich.console import Console

    return Console(
        file=stream, no_color=not _color_allowed(stream), highlight=False, soft_wrap=soft_wrap, markup=False
    )


def stdout_console() -> Console:
    return _console(sys.stdout, soft_wrap=False)


def stderr_console(*, soft_wrap: bool = True) -> Console:
    """Diagnostics, progress bars and prompts go here; progress is shown only on a terminal. Messages
    carry names and user data, so nothing printed is parsed as markup (style with ``style=``).

    A line is written whole (``soft_wrap``) and the terminal wraps it: a command to copy (``up --tls``'s
    ``context add`` line), a URL or a log line never gets a newline of rich's in it. Progress bars, laid
    out to the terminal's width, pass False."""
    return _console(sys.stderr, soft_wrap=soft_wrap)


class Rows(list[Any]):
    """A list of rows that knows its columns, so that an empty one still has a CSV header row (and a
    table its column names)."""

    def __init__(
        self,
        items: Any = (),
        *,
        columns: Sequence[str],
        narrow: Sequence[str] | None = None,
        footer: str | None = None,
    ) -> None:
        super().__init__(items)
        self.columns = list(columns)
        #: The columns a table shows by default, those empty in every row left out (``-o wide``: all).
        self.narrow = list(narrow) if narrow is not None else None
        #: A line under a table on a terminal (what a list left out); never in a pipe or a document.
        self.footer = footer

    @classmethod
    def of(cls, row_type: type, items: Any = (), *, narrow: Sequence[str] | None = None) -> Rows:
        """Rows of a dataclass or ``TypedDict`` ``row_type``: its fields (or keys, in order) are the columns."""
        if dataclasses.is_dataclass(row_type):
            return cls(items, columns=[f.name for f in dataclasses.fields(row_type)], narrow=narrow)
        return cls(items, columns=list(row_type.__annotations__), narrow=narrow)


def plain(value: Any) -> Any:
    """Reduce a result to JSON-compatible builtins, keeping key order."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, list | tuple | set | frozenset):
        return [plain(v) for v in value]
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def _is_records(value: Any) -> bool:
    """A non-empty list whose items are all records: rendered as a table of its own."""
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def _rows(data: Any) -> tuple[list[str], list[dict[str, Any]]]:
    if isinstance(data, Mapping):
        return ["key", "value"], [{"key": k, "value": v} for k, v in data.items()]
    rows = [r if isinstance(r, dict) else {"value": r} for r in data]
    columns: list[str] = []
    for row in rows:
        columns.extend(k for k in row if k not in columns)
    return columns, rows


def cell_text(value: Any) -> str:
    """A value as one table cell's text, without JSON: see the module docstring."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(cell_text(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(_pair(k, v) for k, v in value.items())
    return str(value)


def _pair(name: str, value: Any) -> str:
    """``name=value``, or for a change ``[old, new]`` (a diff) ``name: old → new``."""
    if isinstance(value, list) and len(value) == 2 and not any(isinstance(v, list) for v in value):
        return f"{name}: {cell_text(value[0]) or '-'} → {cell_text(value[1]) or '-'}"
    return f"{name}={cell_text(value)}"


def _csv_cell(value: Any, *, terminal: bool = False) -> str:
    """A CSV field; on a ``terminal`` (and not ``--raw``) its control characters escaped as in a table,
    as ``ls`` quotes names only there: a file or pipe gets the data as it is."""
    if isinstance(value, dict | list):
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    else:
        text = "" if value is None else cell_text(value)
    return printable(text) if terminal and not _state["raw"] else text


def _is_terminal(stream: TextIO) -> bool:
    return bool(getattr(stream, "isatty", lambda: False)())


def _header(column: str) -> str:
    return column.upper().replace("_", " ")


def _named(column: str, values: Iterable[Any]) -> str:
    """A column's (or a key's) name as a table shows it: without ``_ms`` where its numbers show as
    durations (``37m 59s`` carries its unit: "uptime_ms 37m 59s" read as a count of milliseconds), with
    it over values shown as they are (a latency ``1.5``, a split ``gc=1.5`` are in milliseconds)."""
    if column.endswith("_ms") and all(
        v is None or (isinstance(v, int) and not isinstance(v, bool)) for v in values
    ):
        return column.removesuffix("_ms")
    return column


def _shown(column: str, row: dict[str, Any]) -> str:
    """A cell as people read it (:func:`_cell`), control characters escaped unless ``--raw``."""
    text = _cell(column, row)
    return text if _state["raw"] else printable(text)


#: Times whose 0 is no "never": a message with no delivery time (no timer) is delivered at once.
_AT_ZERO = {"deliver_time": "at once"}
#: Cells whose null is a fact to show, not a blank: no offset committed, and so no lag to count; no
#: deadline (``--deadline 0``, which --print-config showed as a blank).
_AT_NONE = {"consumer_offset": "-", "lag": "-", "deadline": "none"}


def _cell(column: str, row: dict[str, Any]) -> str:
    """Sizes in KiB/MiB, times in local time (``--utc``: UTC) or "never" for 0, durations as ``3d 04h``
    (see :mod:`mqctl.units`), a value whose ``_encoding`` twin is base64 (a binary body) as ``base64:…``
    so it is not read as text; JSON keeps the raw values."""
    value = row.get(column)
    if row.get(f"{column}_encoding") == "base64" and isinstance(value, str):
        return f"base64:{value}"
    twin = row.get(f"{column}_ms")
    if value is None and twin == 0:
        return _AT_ZERO.get(column, "never")
    if value is None:
        return _AT_NONE.get(column, "")
    if isinstance(twin, int) and twin and isinstance(value, str):
        try:
            return units.table_time(twin, utc=_state["utc"])
        except (ValueError, OverflowError, OSError):  # a damaged header's time: past any calendar
            return value
    if isinstance(value, int) and not isinstance(value, bool):
        if units.is_size(column):
            return units.size_text(value)
        if column.endswith("_ms"):
            return units.duration_text(value)
    stamp = value.get("timestamp") if isinstance(value, dict) else None
    if isinstance(stamp, int) and not isinstance(stamp, bool) and stamp >= 0:
        # a RocketMQ DataVersion (``acl show``'s version): its epoch-ms timestamp as a time, as every time
        with contextlib.suppress(ValueError, OverflowError, OSError):
            shown = units.table_time(stamp, utc=_state["utc"]) if stamp else "never"
            value = {**value, "timestamp": shown}
    return cell_text(value)


#: Rows from which a table's rows are laid out here, not by rich: rich builds and measures objects for
#: every cell (a ``topic list`` of a broker with a hundred thousand topics took minutes); this joins
#: strings (``benchmarks/bench_big_table.py``). The lines are the ones rich draws for a table as wide as
#: its content (a test compares the two); rich still draws the title and the header, its styles kept.
FAST_TABLE_ROWS = 500
#: Characters ``str.splitlines`` ends a line at and rich's text wrapping does not: a cell holding one is
#: measured and drawn differently by rich, so its table is left to rich.
_RICH_ONLY = re.compile("[\u2028\u2029]")


def _table(columns: list[str], rows: list[dict[str, Any]], title: str | None) -> Any:
    twins = {c for c in columns if c.endswith("_ms") and c.removesuffix("_ms") in columns}
    shown = [c for c in columns if c not in twins]  # a time shows once, as ISO (or "never")
    headers = [printable(_header(_named(column, (row.get(column) for row in rows)))) for column in shown]
    cells = [[_shown(c, row) for c in shown] for row in rows]
    if len(rows) >= FAST_TABLE_ROWS and not _state["raw"]:
        fast = PlainTable.of(title, headers, cells)
        if fast is not None:
            return fast
    return _rich_table(title, headers, cells)


def _rich_table(title: str | None, headers: list[str], cells: list[list[str]], widths: Any = None) -> Any:
    """The rich ``Table`` of ``cells`` (escaped already); ``widths``: each column's, fixed."""
    from rich.table import Table
    from rich.text import Text

    table = Table(
        title=_title(title) if title else None,
        show_edge=False,
        pad_edge=False,
        header_style="bold",
        title_justify="left",
    )
    for i, header in enumerate(headers):
        table.add_column(Text(header), overflow="fold", width=widths[i] if widths else None)
    for row in cells:
        table.add_row(*(Text(cell) for cell in row))
    return table


def _title(title: str) -> Any:
    from rich.text import Text

    return Text(printable(title))


def _cell_width(text: str) -> int | None:
    """The cells ``text``'s widest line takes on a terminal (rich's measure), or None for a text whose
    lines rich draws otherwise (:data:`_RICH_ONLY`)."""
    if text.isascii():
        return max(map(len, text.split("\n"))) if "\n" in text else len(text)
    if _RICH_ONLY.search(text):
        return None
    from rich.cells import cell_len

    return max((cell_len(line) for line in text.splitlines()), default=0)


class PlainTable:
    """A table of :data:`FAST_TABLE_ROWS` rows or more: rich draws its title and header (one row), each
    row here is joined as rich would draw it (each line of a cell padded to its column's width, the
    columns joined by `` │ ``, a cell's further lines under it): the same text, at a fraction of the cost."""

    def __init__(
        self, title: str | None, headers: list[str], cells: list[list[str]], widths: list[int]
    ) -> None:
        self.title = title
        self.headers = headers
        self.cells = cells
        self.widths = widths

    @classmethod
    def of(cls, title: str | None, headers: list[str], cells: list[list[str]]) -> PlainTable | None:
        """The table, or None when a cell is one rich must draw (:func:`_cell_width`)."""
        widths = []
        for i, header in enumerate(headers):
            width = _cell_width(header)
            for row in cells:
                cell = _cell_width(row[i])
                if cell is None or width is None:
                    return None
                if cell > width:
                    width = cell
            if width is None:
                return None
            widths.append(width)
        return cls(title or None, headers, cells, widths)

    @property
    def width(self) -> int:
        return sum(self.widths) + 3 * (len(self.widths) - 1)

    def head(self) -> Any:
        """The title and the header as rich draws them, over one row of empty cells (the last line)."""
        return _rich_table(self.title, self.headers, [[""] * len(self.headers)], self.widths)

    def rows(self) -> Iterator[str]:
        """Each row's lines, ``\n``-ended, as rich draws them under :meth:`head`."""
        widths = self.widths
        from rich.cells import cell_len

        def pad(text: str, width: int) -> str:
            return text + " " * (width - (len(text) if text.isascii() else cell_len(text)))

        for row in self.cells:
            if not any("\n" in cell for cell in row):
                yield " │ ".join([pad(cell, w) for cell, w in zip(row, widths, strict=True)]) + "\n"
                continue
            parts = [cell.split("\n") for cell in row]
            for i in range(max(map(len, parts))):
                line = [
                    pad(lines[i] if i < len(lines) else "", w) for lines, w in zip(parts, widths, strict=True)
                ]
                yield " │ ".join(line) + "\n"


def _tables(data: Any, title: str | None, known: Sequence[str] = ()) -> list[Any]:
    """A record's scalars as one key/value table, then each of its record lists as a table of its own;
    an empty list whose columns are ``known`` (:class:`Rows`) is its header line."""
    if not isinstance(data, Mapping):
        columns, rows = _rows(data if isinstance(data, Sequence) else [data])
        columns = columns or list(known)
        if not columns:  # an empty list: no table to draw (rich printed a blank line), but its title
            from rich.text import Text

            return [Text(printable(title))] if title else []
        return [_table(columns, rows, title)]
    summary = {k: v for k, v in data.items() if not _is_records(v)}
    pairs = [
        {"key": _named(k, [summary[k]]), "value": _shown(k, summary)}
        for k in summary
        if k.removesuffix("_ms") not in summary or not k.endswith("_ms")
    ]
    out = [_table(["key", "value"], pairs, title)] if summary else []
    for key, value in data.items():
        if _is_records(value):
            out.append(_table(*_rows(value), key.replace("_", " ")))
    return out


def _cuts_a_word(table: Any, width: int) -> bool:
    """Whether drawing ``table`` ``width`` columns wide splits a word of a cell or a header (a number,
    an address, a time) over two lines: rich folds what it cannot fit, and a reader sees two numbers."""
    from rich.console import Console
    from rich.text import Text

    probe = Console(file=io.StringIO(), width=width, no_color=True, highlight=False, markup=False)
    with probe.capture() as drawn:
        probe.print(table)
    shown = drawn.get()
    cells = [cell for column in table.columns for cell in (column.header, *column.cells)]
    return any(word not in shown for cell in cells if isinstance(cell, Text) for word in cell.plain.split())


def _print_tables(tables: list[Any], stream: TextIO, *, terminal: bool) -> None:
    """On a terminal: the terminal's width, unless that would cut a word (a number, an address) in two:
    then as wide as its content, and the terminal wraps the lines, as kubectl's; elsewhere: as wide as
    its content. A :class:`PlainTable` (many rows) is as wide as its content everywhere."""
    from rich.console import Console
    from rich.measure import Measurement

    if terminal:
        console = stdout_console()
        for table in tables:
            if isinstance(table, PlainTable):
                wide = stdout_console()
                wide.width = max(table.width, console.width)
                _print_plain(table, wide, stream)
                continue
            needs = Measurement.get(console, console.options.update_width(1 << 20), table).maximum
            # 13 columns on 80 columns: CommitLog offset 7684562 read 768 / 456 / 2 on three lines
            if needs > console.width and _cuts_a_word(table, console.width):
                whole = stdout_console()
                whole.width = needs
                whole.print(table)
            else:
                console.print(table)
        return
    from rich.table import Table

    probe = Console(file=io.StringIO(), width=1 << 20, no_color=True)
    for table in tables:
        if isinstance(table, PlainTable):
            width = table.width
        else:
            width = Measurement.get(probe, probe.options, table).maximum
        console = Console(
            file=stream, width=max(width, 20), no_color=True, highlight=False, soft_wrap=False, markup=False
        )
        if isinstance(table, Table | PlainTable) and table.title is not None:  # one line, not wrapped
            title = table.title
            console.print(_title(title) if isinstance(title, str) else title, soft_wrap=True)
            table.title = None
        if isinstance(table, PlainTable):
            _print_plain(table, console, stream)
        else:
            console.print(table)


def _print_plain(table: PlainTable, console: Console, stream: TextIO) -> None:
    """``table``'s head drawn by rich on ``console`` (its row of empty cells left out), then its rows."""
    with console.capture() as drawn:
        console.print(table.head())
    head = drawn.get()
    stream.write(head[: head.rstrip("\n").rfind("\n") + 1])
    batch: list[str] = []
    for line in table.rows():
        batch.append(line)
        if len(batch) == 1024:
            stream.write("".join(batch))
            batch.clear()
    stream.write("".join(batch))


def render(result: Any, fmt: str = "table", *, out: TextIO | None = None, title: str | None = None) -> None:
    """Write ``result`` to stdout (or ``out``) in ``fmt``: one of :data:`FORMATS`."""
    stream = out or sys.stdout
    data = plain(result)
    with whole_output:  # a Ctrl-C while a slow reader holds the write still gets the whole document
        _render(data, result, fmt, stream, title=title, tty=out is None and stream.isatty())
        stream.flush()


def _render(data: Any, result: Any, fmt: str, stream: TextIO, *, title: str | None, tty: bool) -> None:
    if fmt == "json":
        stream.write(json_text(data, indent=2) + "\n")
    elif fmt == "yaml":
        stream.write(yaml_text(data))
    elif fmt == "csv":
        columns, rows = _rows(data if isinstance(data, Sequence | Mapping) else [data])
        if not columns and isinstance(result, Rows):
            columns = result.columns
        writer = csv.writer(stream, lineterminator="\n")
        writer.writerow(columns)
        terminal = _is_terminal(stream)
        writer.writerows([_csv_cell(row.get(c), terminal=terminal) for c in columns] for row in rows)
    elif fmt in ("table", "wide"):
        known = result.columns if isinstance(result, Rows) else ()
        if isinstance(result, Rows) and result.narrow is not None and fmt == "table" and not _state["wide"]:
            data, known = _narrowed(data, result.narrow)
        _print_tables(_tables(data, title, known), stream, terminal=tty)
        if tty and isinstance(result, Rows) and result.footer:
            stdout_console().print(result.footer, style="dim")
    else:
        raise ValueError(f"unknown output format {fmt!r}; choose one of {', '.join(FORMATS)}")


def _narrowed(rows: list[dict[str, Any]], narrow: list[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """``rows`` with the ``narrow`` columns only, less those no row has a value in (an empty result: all
    of them, its header)."""
    shown = [c for c in narrow if any(row.get(c) not in (None, "", []) for row in rows)] or narrow
    return [{c: row.get(c) for c in shown} for row in rows], shown


class RowStream:
    """Rows as they come (``msg tail``, ``--watch``): JSON lines, YAML documents, CSV with one header,
    or one plain line per row (cells as in a table, newlines escaped, ``-`` for empty); each row flushed at once."""

    def __init__(self, fmt: str, out: TextIO | None = None, *, columns: Sequence[str] | None = None) -> None:
        if fmt not in FORMATS:
            raise ValueError(f"unknown output format {fmt!r}; choose one of {', '.join(FORMATS)}")
        self.fmt = fmt
        self.out = out or sys.stdout
        self.columns = list(columns) if columns else None
        self._csv: Any = None

    def __call__(self, row: Any) -> None:
        data = plain(row)
        with whole_output:  # a Ctrl-C while a slow reader holds the write still gets the whole row
            self._write(data)
            self.out.flush()

    def _write(self, data: Any) -> None:
        if self.fmt == "json":
            self.out.write(json_text(data) + "\n")
        elif self.fmt == "yaml":
            self.out.write("---\n" + yaml_text(data))
        elif self.fmt == "csv":
            if self._csv is None:
                self._csv = csv.writer(self.out, lineterminator="\n")
                self.columns = self.columns or list(data)
                self._csv.writerow(self.columns)
            terminal = _is_terminal(self.out)
            self._csv.writerow([_csv_cell(data.get(c), terminal=terminal) for c in self.columns or []])
        else:
            self.columns = self.columns or list(data)
            cells = (_shown(c, data).replace("\n", "\\n") or "-" for c in self.columns)
            self.out.write(" ".join(cells) + "\n")

    def rows(self, result: Any, *, taken_at_ms: int | None = None) -> None:
        """One refresh of ``--watch``: each row of a list (one line per row), or the record itself; with
        ``taken_at_ms`` each row starts with the refresh's time (``taken_at``, ``taken_at_ms``)."""
        data = plain(result)
        stamp = {} if taken_at_ms is None else units.time_fields("taken_at", taken_at_ms)
        for row in data if isinstance(data, list) else [data]:
            self(stamp | (row if isinstance(row, dict) else {"value": row}))


def shown_time(ms: int) -> str:
    """A time as tables show it: local time, or UTC with ``--utc``."""
    return units.table_time(ms, utc=_state["utc"])
