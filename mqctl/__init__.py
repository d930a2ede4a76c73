"""mqctl: a RocketMQ-compatible message system and its operations suite."""

from __future__ import annotations

__version__ = "0.1.0"
