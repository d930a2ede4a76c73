"""The output layer: one ``render(result, fmt)`` for every command.

Data goes to stdout, diagnostics to stderr. A result is a mapping (one record), a sequence
of mappings (rows) or dataclasses of either shape. Tables use rich and colour only on a
terminal; JSON is stable (keys in column order, ISO timestamps) for scripts; CSV has a header.
"""

from __future__ import annotations

import csv
import dataclasses
import enum
import io
import json
import os
import sys
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, TextIO

from rich.console import Console

FORMATS = ("table", "json", "yaml", "csv")

_state: dict[str, bool] = {"no_color": False}


def configure(*, no_color: bool) -> None:
    """Set once by the CLI's root callback from ``--no-color``."""
    _state["no_color"] = no_color


def _color_allowed(stream: TextIO) -> bool:
    return not _state["no_color"] and "NO_COLOR" not in os.environ and stream.isatty()


def stdout_console() -> Console:
    return Console(file=sys.stdout, no_color=not _color_allowed(sys.stdout), highlight=False, soft_wrap=False)


def stderr_console() -> Console:
    """Diagnostics, progress bars and prompts go here; progress is shown only on a terminal."""
    return Console(file=sys.stderr, no_color=not _color_allowed(sys.stderr), highlight=False)


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


def _rows(data: Any) -> tuple[list[str], list[dict[str, Any]]]:
    if isinstance(data, Mapping):
        return ["key", "value"], [{"key": k, "value": v} for k, v in data.items()]
    rows = [r if isinstance(r, dict) else {"value": r} for r in data]
    columns: list[str] = []
    for row in rows:
        columns.extend(k for k in row if k not in columns)
    return columns, rows


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return str(value)


def render(result: Any, fmt: str = "table", *, out: TextIO | None = None, title: str | None = None) -> None:
    """Write ``result`` to stdout (or ``out``) in ``fmt``: one of :data:`FORMATS`."""
    stream = out or sys.stdout
    data = plain(result)
    if fmt == "json":
        json.dump(data, stream, ensure_ascii=False, indent=2)
        stream.write("\n")
    elif fmt == "yaml":
        import yaml

        yaml.safe_dump(data, stream, sort_keys=False, allow_unicode=True)
    elif fmt == "csv":
        columns, rows = _rows(data if isinstance(data, Sequence | Mapping) else [data])
        writer = csv.writer(stream, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows([_cell(row.get(c)) for c in columns] for row in rows)
    elif fmt == "table":
        from rich.table import Table

        columns, rows = _rows(data if isinstance(data, Sequence | Mapping) else [data])
        table = Table(title=title, show_edge=False, pad_edge=False, header_style="bold")
        for column in columns:
            table.add_column(column.upper().replace("_", " "), overflow="fold")
        for row in rows:
            table.add_row(*(_cell(row.get(c)) for c in columns))
        console = Console(file=io.StringIO(), width=200, no_color=True) if out is not None else stdout_console()
        console.print(table)
        if out is not None:
            stream.write(console.file.getvalue())  # type: ignore[attr-defined]
    else:
        raise ValueError(f"unknown output format {fmt!r}; choose one of {', '.join(FORMATS)}")
