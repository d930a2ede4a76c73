"""Where the repository and its test fixtures live; everything a test reads is inside the repository."""

from __future__ import annotations

import json
import lzma
from functools import cache
from pathlib import Path
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
