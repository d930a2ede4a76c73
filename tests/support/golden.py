"""The frames recorded from a real RocketMQ 4.9.8 broker (shared/spec/golden-frames.md)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.support.paths import SHARED

GOLDEN = SHARED / "spec" / "golden-frames.md"
_JSON_BLOCK = re.compile(r"```json\n(.*?)\n```", re.S)
_BODY = re.compile(r"Request body:\n```\n(.*?)\n```", re.S)


def golden(title: str) -> tuple[dict[str, Any], bytes, dict[str, Any]]:
    """(request header, request body, response header) of the section called `title`."""
    text = Path(GOLDEN).read_text()
    section = text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]
    request, response = (json.loads(block) for block in _JSON_BLOCK.findall(section)[:2])
    body = _BODY.search(section)
    return request, (body.group(1).encode() if body else b""), response
