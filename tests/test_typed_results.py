"""The services hand the CLI typed results (TypedDicts or dataclasses), not ``dict[str, Any]``: mypy then
checks every key the renderers read and every row a service builds, so a renamed or missing field fails
``make lint`` instead of printing an empty column."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.sources import parse

pytestmark = pytest.mark.xdist_group("sources")

SERVICES = Path(__file__).resolve().parents[1] / "mqctl" / "services"

# ``module:function`` → why it may still return an untyped mapping.
EXCEPTIONS: dict[str, str] = {}


def untyped(annotation: ast.expr | None) -> bool:
    """Whether a return annotation is, or holds, ``dict[str, Any]`` (a list of them, an optional one, ...)."""
    if annotation is None:
        return False
    text = ast.unparse(annotation).replace("'", "").replace('"', "").replace("Dict[", "dict[")
    return "dict[str, Any]" in text


def public_functions(tree: ast.Module) -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """The module's public functions and the public methods of its public classes, by qualified name."""
    found: list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not node.name.startswith("_"):
            found.append((node.name, node))
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            found += [
                (f"{node.name}.{item.name}", item)
                for item in node.body
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and not item.name.startswith("_")
            ]
    return found


def offenders() -> list[str]:
    """``module:function (line)`` for each public service function annotated to return ``dict[str, Any]``."""
    found = []
    for path in sorted(SERVICES.glob("*.py")):
        for name, func in public_functions(parse(path)):
            key = f"{path.stem}:{name}"
            if untyped(func.returns) and key not in EXCEPTIONS:
                found.append(f"{key} (line {func.lineno}): -> {ast.unparse(func.returns)}")  # type: ignore[arg-type]
    return found


def test_the_scan_sees_the_annotations() -> None:
    tree = ast.parse(
        "from typing import Any\n"
        "def a() -> dict[str, Any]: ...\n"
        "async def b() -> list[dict[str, Any]]: ...\n"
        "def c() -> 'dict[str, Any] | None': ...\n"
        "def _d() -> dict[str, Any]: ...\n"
        "class E:\n    def f(self) -> dict[str, Any]: ...\n"
        "def g() -> dict[str, int]: ...\n"
        "def h() -> Dict[str, Any]: ...\n"
    )
    flagged = [name for name, func in public_functions(tree) if untyped(func.returns)]
    assert flagged == ["a", "b", "c", "E.f", "h"]


def test_services_return_typed_results() -> None:
    assert len(list(SERVICES.glob("*.py"))) > 10  # the scan sees the package
    assert offenders() == [], (
        "type these results (a TypedDict or a dataclass) or list the exception with its reason"
    )


def test_every_exception_still_exists() -> None:
    names = {
        f"{path.stem}:{name}" for path in SERVICES.glob("*.py") for name, _ in public_functions(parse(path))
    }
    assert sorted(set(EXCEPTIONS) - names) == []


def _renamed(fields: list[str], times: dict[str, str]) -> list[str]:
    """A dataclass's field names as a row names them: each ms timestamp as its ISO name and ``_ms`` twin."""
    out: list[str] = []
    for name in fields:
        out += [times[name], f"{times[name]}_ms"] if name in times else [name]
    return out


def _rows_that_copy_a_class() -> list[tuple[str, list[str], list[str]]]:
    """(what, the TypedDict's keys, the keys of what it is built from), for every typed row that copies a
    dataclass or a key table field by field: a field added there must be added to the row too."""
    from dataclasses import fields

    from mqctl.services import fanout, groups, metadata, store_inspect
    from store import SubscriptionGroupConfig, inspect

    def names(cls: type) -> list[str]:
        return [f.name for f in fields(cls)]

    def keys(typed: type) -> list[str]:
        return list(typed.__annotations__)

    return [
        ("FailureRow", keys(fanout.FailureRow), names(fanout.BrokerFailure)),
        # group show names the settings as the flags and files do (GROUP_FIELDS), every field of the config
        (
            "GroupConfigFields",
            keys(groups.GroupConfigFields),
            ["group", *groups.GROUP_FIELDS, "orderly", "extra"],
        ),
        (
            "GROUP_FIELDS",
            sorted(["group_name", *groups.GROUP_FIELDS.values(), "extra"]),
            sorted(names(SubscriptionGroupConfig)),
        ),
        (
            "CommitLogFile",
            keys(store_inspect.CommitLogFile),
            _renamed(
                names(inspect.FileStats),
                {"first_store_timestamp": "first_store_time", "last_store_timestamp": "last_store_time"},
            ),
        ),
        (
            "IndexFileRow",
            keys(store_inspect.IndexFileRow),
            _renamed(
                names(inspect.IndexHeader), {"begin_timestamp": "begin_time", "end_timestamp": "end_time"}
            ),
        ),
        ("TopicEntry", keys(metadata.TopicEntry), list(metadata.TOPIC_KEYS)),
        ("GroupEntry", keys(metadata.GroupEntry), list(metadata.GROUP_KEYS)),
        ("AclEntry", keys(metadata.AclEntry), list(metadata.ACL_KEYS)),
    ]


@pytest.mark.parametrize(
    "what, typed, source", _rows_that_copy_a_class(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_typed_rows_keep_every_field_in_order(what: str, typed: list[str], source: list[str]) -> None:
    assert typed == source, f"{what} no longer matches what it is built from"
