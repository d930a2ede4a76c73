"""The repository stands alone: nothing it ships names a path outside itself, product code and tests say
why rather than which ticket, and every ``§`` citation names a section of a document in ``docs/``.

Citations read ``docs/<file>.md §<slug>``, where the slug is the heading's text in lower case with spaces
as hyphens and other punctuation dropped (GitHub's anchor rule): ``docs/store-format.md §consumequeue``
cites ``## ConsumeQueue``. The slug must equal a heading's slug exactly, so a typo fails."""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

from tests.support.paths import FIXTURES, ROOT

#: Trees and top-level files that ship: product, tests, tools, docs and the build.
SHIPPED = ["mqctl", "daemon", "store", "tests", "scripts", "benchmarks", "docs", "completions", "man"]
TOP_FILES = ("Makefile", "README.md", "pyproject.toml", ".ci/run", ".gitignore")
TEXT_SUFFIXES = {
    ".py",
    ".md",
    ".js",
    ".c",
    ".h",
    ".sh",
    ".toml",
    ".txt",
    ".yaml",
    ".yml",
    ".1",
    ".bash",
    ".fish",
}
SKIP_DIRS = {"node_modules", "__pycache__", "__snapshots__"}
#: Trees whose text must not name a ticket.
CODE_TREES = ["mqctl", "daemon", "store", "tests", "scripts", "benchmarks"]

OUTSIDE_PATH = re.compile(
    r"""\.\./shared\b            # the steering checkout's folder beside the repository
      | \bshared/(?:spec|fixtures)\b
      | /work/                   # this machine's absolute paths
      | (?<![\w.])/root/
      | (?<![\w.])/home/\w
      | \bROOT\.parent\b         # climbing out of the repository root
      | /\s*["']shared["']       # pathlib joins onto a "shared" folder
    """,
    re.X,
)
ISSUE_REF = re.compile(
    r"""(?i)\b(?:issue|ticket)s?\s*\#?\s*\d+\b   # "issue 12", "issue #12", "issues 3"
      | \(\#\d+\)                              # "(#12)"
      | (?:^|(?<=\s))\#\d+\b(?=[\s).,:;]|$)    # " #12 " in prose
    """,
    re.X | re.M,
)
CITATION = re.compile(r"(docs/[\w/.-]+\.md) §([\w-]+)")
HEADING = re.compile(r"^#{1,6} +(.+?) *#* *$")


def shipped_files(trees: list[str], tops: tuple[str, ...] = ()) -> Iterator[Path]:
    """Every text file under ``trees`` (fixtures, snapshots and installed packages left out), then ``tops``."""
    for tree in trees:
        for path in sorted((ROOT / tree).rglob("*")):
            rel = path.relative_to(ROOT)
            if not path.is_file() or SKIP_DIRS & set(rel.parts) or path.is_relative_to(FIXTURES):
                continue
            if path.suffix in TEXT_SUFFIXES or path.name in ("_mqctl",):
                yield path
    for name in tops:
        if (ROOT / name).is_file():
            yield ROOT / name


def hits(pattern: re.Pattern[str], paths: Iterator[Path]) -> list[str]:
    """``path:line: match`` for every match of ``pattern`` in ``paths`` (this file excepted: it holds samples)."""
    found = []
    for path in paths:
        if path == Path(__file__):
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            found += [f"{path.relative_to(ROOT)}:{n}: {m.group(0)!r}" for m in pattern.finditer(line)]
    return found


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@cache
def sections(doc: Path) -> frozenset[str]:
    """The slugs of every heading of ``doc`` (headings inside code fences are not headings)."""
    found, fenced = set(), False
    for line in doc.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := HEADING.match(line)):
            found.add(slug(m.group(1)))
    return frozenset(found)


def citation_problems(path: Path, text: str) -> list[str]:
    """Why each ``§`` in ``text`` does not cite an existing section of an existing file in docs/."""
    problems = []
    cited = {m.start(2) - 1: m for m in CITATION.finditer(text)}
    for pos in (i for i, c in enumerate(text) if c == "§"):
        line = text.count("\n", 0, pos) + 1
        where = f"{path}:{line}"
        m = cited.get(pos)
        if m is None:
            problems.append(
                f"{where}: '§' not written as 'docs/FILE.md §section': {text[pos - 30 : pos + 20]!r}"
            )
            continue
        doc = ROOT / m.group(1)
        if not doc.is_file():
            problems.append(f"{where}: {m.group(1)} does not exist")
        elif m.group(2).lower() not in sections(doc):
            problems.append(f"{where}: {m.group(1)} has no section {m.group(2)!r}")
    return problems


# ---------------------------------------------------------------- the scanners catch what they are for


@pytest.mark.parametrize(
    "text",
    [
        'FIXTURES = ROOT.parent / "shared" / "fixtures"',
        "see ../shared/spec/wire-protocol.md",
        'Path(__file__).parent.parent.parent / "shared"',
        "store = Path('/work/shared/fixtures/store-a.tar.xz')",
        "the frames in shared/spec/golden-frames.md",
        "cd /home/dev/mqctl",
    ],
)
def test_outside_paths_are_caught(text: str) -> None:
    assert OUTSIDE_PATH.search(text), text


@pytest.mark.parametrize(
    "text", ["ROOT / 'tests' / 'fixtures'", "parent.parent.parent", "a shared session", "store/commitlog"]
)
def test_inside_paths_pass(text: str) -> None:
    assert not OUTSIDE_PATH.search(text), text


@pytest.mark.parametrize(
    "text",
    ["(issue 14, point 3)", "issue #18", "Issue12", "in contexts (#17).", "see #16 for why", "issues 3"],
)
def test_issue_numbers_are_caught(text: str) -> None:
    assert ISSUE_REF.search(text), text


@pytest.mark.parametrize(
    "text", ['"brokerName": " lead #1\\nx"', "topic#12", "a known issue with zlib", "Trace\\#1"]
)
def test_other_hashes_pass(text: str) -> None:
    assert not ISSUE_REF.search(text), text


def test_citation_checker_catches_typos_and_bare_sections(tmp_path: Path) -> None:
    doc = next(iter(sorted((ROOT / "docs").glob("*.md"))))
    good = f"{doc.relative_to(ROOT)} §{sorted(sections(doc))[0]}"
    assert citation_problems(tmp_path, f"x ({good}) y") == []
    assert citation_problems(tmp_path, f"x ({good}x) y"), "a misspelt section passes"
    assert citation_problems(tmp_path, "x (docs/no-such-file.md §frames)"), "a missing file passes"
    assert citation_problems(tmp_path, "x (spec §2.6)"), "a bare section number passes"
    assert citation_problems(tmp_path, f"x ({good}, §8.3)"), "a second, bare section passes"


# ---------------------------------------------------------------- the repository


def test_nothing_names_a_path_outside_the_repository() -> None:
    assert hits(OUTSIDE_PATH, shipped_files(SHIPPED, TOP_FILES)) == []


def test_product_code_and_tests_name_no_issue() -> None:
    assert hits(ISSUE_REF, shipped_files(CODE_TREES)) == []


def test_every_section_citation_resolves_into_docs() -> None:
    problems = []
    for path in shipped_files(SHIPPED, TOP_FILES):
        if path != Path(__file__):
            problems += citation_problems(path.relative_to(ROOT), path.read_text(encoding="utf-8"))
    assert problems == []


def test_markdown_links_stay_inside_the_repository() -> None:
    """A relative link in a shipped Markdown file resolves to a file or folder of the repository, and its
    ``#anchor``, if any, to a heading of the Markdown file it names."""
    broken = []
    for path in shipped_files(SHIPPED, TOP_FILES):
        if path.suffix != ".md":
            continue
        for target, anchor in re.findall(
            r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)", path.read_text(encoding="utf-8")
        ):
            if re.match(r"[a-z]+:", target):
                continue  # a URL
            resolved = (path.parent / target).resolve() if target else path
            where = f"{path.relative_to(ROOT)}: {target}{'#' + anchor if anchor else ''}"
            outside = not resolved.is_relative_to(ROOT) or not resolved.exists()
            if outside or (anchor and resolved.suffix == ".md" and anchor not in sections(resolved)):
                broken.append(where)
    assert broken == []
