"""The README is read in a minute: it fits on two screens and sends everything else to ``docs/``, whose
links must lead somewhere (a moved or renamed page breaks them silently otherwise)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.paths import ROOT

#: Two screens of a terminal or a rendered page (a tall terminal's 55 lines each).
MAX_README_LINES = 110

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_readme_fits_on_two_screens() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines: move detail to docs/"


def test_readme_links_the_docs() -> None:
    readme = (ROOT / "README.md").read_text()
    for page in ("docs/operations.md", "docs/performance.md", "docs/security.md", "docs/compatibility.md"):
        assert f"]({page}" in readme, page


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_lead_to_files(page: Path) -> None:
    targets = [
        t.split("#")[0] for t in LINK.findall(page.read_text()) if "://" not in t and not t.startswith("#")
    ]
    missing = [t for t in targets if t and not (page.parent / t).exists()]
    assert not missing, missing
