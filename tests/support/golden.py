"""The frames recorded from a real RocketMQ 4.9.8 NameServer and broker (tests/fixtures/golden-frames.json)."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from tests.support.paths import GOLDEN_FRAMES


@cache
def golden_frames() -> dict[str, dict[str, Any]]:
    """Every recorded exchange by its title (see tests/fixtures/README.md for the fields)."""
    frames: dict[str, dict[str, Any]] = json.loads(GOLDEN_FRAMES.read_text(encoding="utf-8"))
    return frames


def golden(title: str) -> tuple[dict[str, Any], bytes, dict[str, Any]]:
    """(request header, request body, response header) of the exchange called `title`."""
    frame = golden_frames()[title]
    request = json.loads(frame["request_header"])
    response = json.loads(frame["response_header"])
    return request, frame.get("request_body", "").encode(), response


def golden_response_body(title: str) -> str:
    """The response body the real server sent for `title`, as recorded."""
    body: str = golden_frames()[title]["response_body"]
    return body
