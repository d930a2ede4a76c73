"""Broker state tables: topics, subscription groups, consumer offsets, live clients, order locks."""

from __future__ import annotations
