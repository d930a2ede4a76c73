"""Where the repository and its test fixtures live; everything a test reads is inside the repository."""

from __future__ import annotations

import importlib.util
import json
import lzma
import sys
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
STORE_A_TAR = FIXTURES / "store-a.tar.xz"
STORE_A_MANIFEST = FIXTURES / "store-a.manifest.json.xz"
GOLDEN_FRAMES = FIXTURES / "golden-frames.json"


@cache
def store_a_manifest() -> dict[str, Any]:
    """The store-a manifest (kept xz-compressed: the JSON is 2.9 MB); callers must not change it."""
    with lzma.open(STORE_A_MANIFEST, "rt", encoding="utf-8") as f:
        result: dict[str, Any] = json.load(f)
    return result


def script_module(relative: str) -> ModuleType:
    """A script of the repository that is not in a package (``benchmarks/timeline.py``, ``scripts/...``)
    loaded by its path, under its file's name, which it is also registered as in ``sys.modules`` unless a
    module of that name is there (a dataclass looks its module up there)."""
    path = ROOT / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module
