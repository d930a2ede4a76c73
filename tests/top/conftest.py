"""Fixtures of the ``mqctl top`` tests."""

from __future__ import annotations

import socket

import pytest


@pytest.fixture
def metrics_port() -> int:
    """A free loopback port for the broker's /metrics: a configured 0 would hide the bound port from
    GET_BROKER_CONFIG, which is how ``mqctl top`` finds the endpoint."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
