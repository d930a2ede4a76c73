"""The NameServer's namespaced key/value store, persisted as Java's `kvConfig.json` (§7.5)."""

from __future__ import annotations

import logging
from pathlib import Path

from daemon.config import write_atomically
from daemon.remoting import fastjson

log = logging.getLogger(__name__)

#: Namespace whose entries (topic → `brokerName:queueNums;…`) make topics ordered.
ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"


class KVConfigManager:
    """namespace → key → value; every change is written through to `path` at once."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.table: dict[str, dict[str, str]] = {}

    def load(self) -> None:
        """Read the file if it exists (a missing file is an empty store, as in Java)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        if not data.strip():
            return
        try:
            parsed = fastjson.loads(data)
        except ValueError as exc:
            raise ValueError(f"{self.path}: not a KV config file: {exc}") from None
        table = parsed.get("configTable") if isinstance(parsed, dict) else None
        if not isinstance(table, dict) or not all(isinstance(kv, dict) for kv in table.values()):
            raise ValueError(f"{self.path}: not a KV config file: no configTable object of objects")
        self.table = {str(ns): {str(k): str(v) for k, v in kv.items()} for ns, kv in table.items()}
        log.info("loaded %d KV namespaces from %s", len(self.table), self.path)

    def persist(self) -> None:
        write_atomically(self.path, fastjson.dumps({"configTable": self.table}))

    def put(self, namespace: str, key: str, value: str) -> None:
        self.table.setdefault(namespace, {})[key] = value
        self.persist()

    def get(self, namespace: str, key: str) -> str | None:
        return self.table.get(namespace, {}).get(key)

    def delete(self, namespace: str, key: str) -> None:
        kv = self.table.get(namespace)
        if kv is not None and kv.pop(key, None) is not None:
            if not kv:
                del self.table[namespace]
            self.persist()

    def namespace(self, namespace: str) -> dict[str, str] | None:
        kv = self.table.get(namespace)
        return dict(kv) if kv else None
