"""Each shared concept has one home, so a change is made once: a scan of the product tree keeps it so.

The models, the codec, the clock and the naming helper are defined once; every RocketMQ system name
(topics, groups, prefixes, property keys) is spelled in its home module and imported everywhere else.
Docstrings may mention a name; code may not spell it again.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

import store.message
import store.names
from tests.support.sources import parse

pytestmark = pytest.mark.xdist_group("sources")

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("store", "daemon", "mqctl")

#: Definitions that must exist exactly once in product code, and where.
ONE_DEFINITION = {
    "TopicConfig": "store/models.py",
    "SubscriptionGroupConfig": "store/models.py",
    "DataVersion": "store/models.py",
    "PermName": "store/models.py",
    "Bean": "store/models.py",
    "camel_case": "store/models.py",
    "Clock": "store/clock.py",
    "SystemClock": "store/clock.py",
    "ObjectKey": "store/fastjson.py",
    "retry_topic": "store/names.py",
    "dlq_topic": "store/names.py",
    "gather_limited": "mqctl/services/fanout.py",
    "plural": "store/words.py",
}
#: Names that once had two meanings or two spellings; now bound at module level in one file only.
ONE_BINDING = {
    "VIEWS",
    "BUILTIN_GROUPS",
    "SYSTEM_GROUPS",
    "NOT_ALLOWED_SEND_TOPICS",
    "PULL_FLAG_SUBSCRIPTION",
}


def _modules() -> dict[str, ast.Module]:
    """Parsed when a test asks, not at import: every pytest-xdist worker collects this module."""
    return {
        str(path.relative_to(ROOT)): parse(path)
        for top in PRODUCT
        for path in sorted((ROOT / top).rglob("*.py"))
    }


def _docstrings(tree: ast.Module) -> set[int]:
    """ids of the docstring constants of a module and its classes and functions."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def _system_names() -> dict[str, str]:
    """Every system string and its home module."""
    out = {}
    for module, home in ((store.names, "store/names.py"), (store.message, "store/message.py")):
        for name, value in vars(module).items():
            if name.isupper() and isinstance(value, str) and len(value) > 1:
                if module is store.message and not name.startswith("PROPERTY_"):
                    continue
                out[value] = home
            elif name.isupper() and isinstance(value, tuple):
                out.update({v: home for v in value if isinstance(v, str)})
    return out


SYSTEM_NAMES = _system_names()
#: Names distinctive enough that no other string of the product may even contain them.
DISTINCTIVE = ("TBW102", "%RETRY%", "%DLQ%", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_", "rmq_sys_", "CID_RMQ_SYS_")


def _overload(node: ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A typing overload: a signature stated, not a second definition."""
    return any(isinstance(d, ast.Name) and d.id == "overload" for d in node.decorator_list)


def test_models_codec_and_clock_are_defined_once() -> None:
    found: dict[str, list[str]] = defaultdict(list)
    for path, tree in _modules().items():
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                and node.name in ONE_DEFINITION
                and not _overload(node)
            ):
                found[node.name].append(path)
    assert {name: paths for name, paths in found.items()} == {
        name: [home] for name, home in ONE_DEFINITION.items()
    }
    assert [p for p in _modules() if p.endswith("fastjson.py")] == ["store/fastjson.py"]


def test_ambiguous_names_are_bound_once() -> None:
    found: dict[str, list[str]] = defaultdict(list)
    for path, tree in _modules().items():
        for node in tree.body:
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AnnAssign)
                else []
            )
            for target in targets:
                if isinstance(target, ast.Name) and target.id in ONE_BINDING:
                    found[target.id].append(path)
    assert {name: len(paths) for name, paths in found.items()} == dict.fromkeys(ONE_BINDING, 1), found


def test_system_names_are_spelled_in_their_home_only() -> None:
    assert {"TBW102", "%RETRY%", "%DLQ%", "SCHEDULE_TOPIC_XXXX", "TOOLS_CONSUMER", "UNIQ_KEY", "WAIT"} <= set(
        SYSTEM_NAMES
    )
    elsewhere = []
    for path, tree in _modules().items():
        docstrings = _docstrings(tree)
        for node in ast.walk(tree):
            if (
                not isinstance(node, ast.Constant)
                or not isinstance(node.value, str)
                or id(node) in docstrings
            ):
                continue
            text = node.value
            home = SYSTEM_NAMES.get(text)
            respelled = home is not None and home != path
            contains = path not in ("store/names.py", "store/message.py") and any(
                t in text for t in DISTINCTIVE
            )
            if respelled or contains:
                elsewhere.append(f"{path}:{node.lineno}: {text!r}")
    assert not elsewhere, "import these from store.names / store.message:\n" + "\n".join(elsewhere)


def test_store_imports_nothing_of_ours() -> None:
    """The homes are in the lowest layer: store/ imports neither daemon/ nor mqctl/."""
    bad = []
    for path, tree in _modules().items():
        if not path.startswith("store/"):
            continue
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.module.split(".")[0] in ("daemon", "mqctl")
            ):
                bad.append(f"{path}:{node.lineno}")
    assert not bad
