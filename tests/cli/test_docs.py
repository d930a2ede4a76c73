"""The committed completions and man pages are what the CLI generates now."""

from __future__ import annotations

from pathlib import Path

from mqctl.cli.app import NOUNS
from mqctl.docs import generate

ROOT = Path(__file__).resolve().parents[2]


def test_completions_and_man_pages_are_fresh() -> None:
    stale = [
        str(path.relative_to(ROOT))
        for path, text in generate(ROOT).items()
        if not path.exists() or path.read_text(encoding="utf-8") != text
    ]
    assert stale == [], f"run 'make docs' and commit: {stale}"


def test_one_man_page_per_noun_and_exit_status_section() -> None:
    pages = {p.name for p in (ROOT / "man").glob("*.1")}
    assert pages == {"mqctl.1"} | {f"mqctl-{name}.1" for name, _ in NOUNS}
    root_page = (ROOT / "man" / "mqctl.1").read_text()
    assert ".SH EXIT STATUS" in root_page and "ConnectError" in root_page
