"""The one output layer: every format from the same result."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest
import yaml

from mqctl.output import FORMATS, render


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


def rendered(result: object, fmt: str) -> str:
    out = io.StringIO()
    render(result, fmt, out=out)
    return out.getvalue()


def test_json_is_stable_and_machine_readable() -> None:
    text = rendered(ROWS, "json")
    data = json.loads(text)
    assert data[0] == {"topic": "orders", "queues": 4, "tags": ["a", "b"], "created": "2026-01-02T03:04:05+00:00"}
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
    assert set(FORMATS) == {"table", "json", "yaml", "csv"}
