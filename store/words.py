"""Counts in log lines and messages: ``1 record``, ``3 records``, never a count with its plural in brackets.

The lowest layer that writes counts holds the helper, so the daemons and mqctl import this one.
"""

from __future__ import annotations


def plural(n: int, noun: str, nouns: str | None = None) -> str:
    """``1 broker``, ``3 brokers``: a count with its noun in the number it takes (``nouns`` when the
    plural is not the noun and an s)."""
    return f"{n:,} {noun if n == 1 else nouns or noun + 's'}"
