"""Broker state tables: topics, subscription groups, consumer offsets, live clients, order locks."""

from __future__ import annotations

from store.native import extend

extend(__name__, __path__)  # the compiled build of the hot modules, when it is fresh (store/native.py)
