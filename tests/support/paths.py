"""Where the repository and the shared spec and fixtures live."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
SHARED = ROOT.parent / "shared"
FIXTURES = SHARED / "fixtures"
STORE_A_TAR = FIXTURES / "store-a.tar.xz"
STORE_A_MANIFEST = FIXTURES / "store-a.manifest.json"
