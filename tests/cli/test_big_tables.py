"""Tables of many rows (a ``topic list`` of a broker with a hundred thousand topics) are laid out by mqctl
itself, not by rich, which builds and measures objects for every cell: the text must be the one rich
draws, piped and on a terminal, whatever the cells hold (wide characters, combining marks, newlines,
spaces at either end, markup, control characters), and user data stays data."""

from __future__ import annotations

import io
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

import mqctl.output as output
from mqctl.output import PlainTable, render


def drawn(result: Any, *, fast: bool, monkeypatch: pytest.MonkeyPatch, title: str | None = None) -> str:
    """``render(result)`` as a table into a pipe, laid out by mqctl (``fast``) or by rich."""
    monkeypatch.setattr(output, "FAST_TABLE_ROWS", 1 if fast else 1 << 40)
    out = io.StringIO()
    render(result, "table", out=out, title=title)
    return out.getvalue()


def on_terminal(result: Any, *, fast: bool, monkeypatch: pytest.MonkeyPatch, width: int, color: bool) -> str:
    """``render(result)`` to a terminal ``width`` columns wide (its styles included where ``color``)."""
    from rich.console import Console

    monkeypatch.setattr(output, "FAST_TABLE_ROWS", 1 if fast else 1 << 40)
    screen = io.StringIO()

    def console() -> Console:
        return Console(
            file=screen,
            width=width,
            force_terminal=True,
            color_system="standard" if color else None,
            no_color=not color,
            highlight=False,
            soft_wrap=False,
            markup=False,
        )

    monkeypatch.setattr(output, "stdout_console", console)
    columns, rows = output._rows(output.plain(result))
    output._print_tables([output._table(columns, rows, "T")], screen, terminal=True)
    return screen.getvalue()


CELL = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**12), max_value=10**12),
    st.text(
        alphabet=st.one_of(
            st.sampled_from(" \n\t\x1b[]/b寿司é\u0301\u200b\u202e\u3000|│"),
            st.characters(codec="utf-8", exclude_categories=("Cs",)),
        ),
        max_size=12,
    ),
)
ROWS = st.lists(
    st.fixed_dictionaries({"name": CELL, "value": CELL, "size_bytes": st.integers(0, 1 << 40), "note": CELL}),
    min_size=1,
    max_size=8,
)


@settings(max_examples=150)
@given(rows=ROWS, title=st.one_of(st.none(), st.text(max_size=8)))
def test_a_big_table_is_the_text_rich_draws_into_a_pipe(
    rows: list[dict[str, Any]], title: str | None
) -> None:
    with pytest.MonkeyPatch.context() as mp:
        assert drawn(rows, fast=True, monkeypatch=mp, title=title) == drawn(
            rows, fast=False, monkeypatch=mp, title=title
        )


@settings(max_examples=60)
@given(rows=ROWS, color=st.booleans())
def test_a_big_table_that_fits_a_terminal_is_the_text_rich_draws_there(
    rows: list[dict[str, Any]], color: bool
) -> None:
    with pytest.MonkeyPatch.context() as mp:
        fast = on_terminal(rows, fast=True, monkeypatch=mp, width=1000, color=color)
        assert fast == on_terminal(rows, fast=False, monkeypatch=mp, width=1000, color=color)


def test_a_big_table_wider_than_the_terminal_is_as_wide_as_its_content(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Not folded to the terminal's width, cell by cell, as rich would: its lines are whole and the
    terminal wraps them (as a table that would cut a word already is)."""
    rows = [{"topic": f"Topic-{i:04d}-" + "x" * 60, "queues": i} for i in range(3)]
    shown = on_terminal(rows, fast=True, monkeypatch=monkeypatch, width=40, color=False)
    assert f"Topic-0002-{'x' * 60} │ 2     " in shown.splitlines()


def test_many_rows_take_the_fast_path_and_keep_user_data_as_data(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ``FAST_TABLE_ROWS`` rows the table is a ``PlainTable``; a name holding markup or terminal
    controls shows as typed, escaped, as in any table."""
    rows = [{"topic": f"T{i}", "keys": "[b]x[/b]\x1b]0;owned\x07"} for i in range(output.FAST_TABLE_ROWS)]
    columns, plain_rows = output._rows(rows)
    assert isinstance(output._table(columns, plain_rows, None), PlainTable)
    text = drawn(rows, fast=False, monkeypatch=monkeypatch)
    monkeypatch.undo()
    out = io.StringIO()
    render(rows, "table", out=out)
    assert out.getvalue() == text
    assert "[b]x[/b]\\x1b]0;owned\\x07" in text and "\x1b" not in text


def test_a_cell_rich_draws_otherwise_leaves_the_table_to_rich() -> None:
    """A line separator (U+2028) ends a line where rich measures, not where it draws: not laid out here."""
    assert PlainTable.of(None, ["A"], [["a\u2028b"]]) is None
    assert PlainTable.of(None, ["A"], [["ab"]]) is not None
