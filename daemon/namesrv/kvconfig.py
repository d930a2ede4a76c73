"""The NameServer's namespaced key/value store, persisted as Java's `kvConfig.json`
(docs/wire-protocol.md §kv-persistence).

Java rewrites the whole file on the request thread after every put, so a flood of large puts made
each write longer and stalled route lookups behind it (p99 from 8 ms to 1.4 s). Here puts are
capped (`kvConfigMaxValueBytes`, `kvConfigMaxNamespaceBytes`, `kvConfigMaxTotalBytes`; a namespace's
name and every key count, and no remote request can raise a cap: see daemon.safe_config), and the
file is written in a worker thread, group-committed: a burst of puts costs a couple of writes, and
each put is answered only once a write that includes it has reached the disk.
"""

from __future__ import annotations

import asyncio
import logging

from daemon.coalesce import Coalesced
from daemon.config import write_atomically
from daemon.namesrv.config import NamesrvConfig
from store import fastjson

log = logging.getLogger(__name__)

#: Namespace whose entries (topic → `brokerName:queueNums;…`) make topics ordered.
ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"

Table = dict[str, dict[str, str]]


class KVLimitError(ValueError):
    """A put that would pass one of the KV caps; nothing was changed."""


def _size(text: str) -> int:
    """The bytes `text` takes in kvConfig.json (quotes aside): a control character is one byte in memory
    and six in the file (\\u0001), so the caps count the file's."""
    return len(fastjson.dumps(text)) - 2


#: What the caps count for each entry and namespace beyond its text: the objects and the table slot that
#: hold it in memory, so a flood of tiny entries is held by the caps as a flood of long ones is.
ENTRY_OVERHEAD = 64


def _entry_size(key: str, value: str) -> int:
    return _size(key) + _size(value) + ENTRY_OVERHEAD


def _namespace_size(namespace: str, kv: dict[str, str]) -> int:
    """A namespace's count: its name (held once, however many keys) and every entry, each with its
    overhead."""
    return _size(namespace) + ENTRY_OVERHEAD + sum(_entry_size(k, v) for k, v in kv.items())


def encode_table(table: Table) -> bytes:
    """`{"configTable":{...}}` exactly as `fastjson.dumps` writes it, one namespace at a time: each
    piece returns to the interpreter, so the event loop gets the GIL between namespaces."""
    parts = [fastjson.dumps(ns) + b":" + fastjson.dumps(table[ns]) for ns in sorted(table)]
    return b'{"configTable":{' + b",".join(parts) + b"}}"


class KVConfigManager:
    """namespace → key → value; changes are answered once written (see module docstring)."""

    def __init__(self, config: NamesrvConfig) -> None:
        self.config = config
        self.table: Table = {}
        #: Bytes of names, keys and values (and ENTRY_OVERHEAD each) per namespace and in all, what the
        #: caps are checked against.
        self._sizes: dict[str, int] = {}
        self._total = 0
        self._writer = Coalesced(self._write, "persist-kv-config")

    def load(self) -> None:
        """Read the file if it exists (a missing file is an empty store, as in Java)."""
        path = self.config.kv_config_file
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return
        if not data.strip():
            return
        try:
            parsed = fastjson.loads(data)
        except ValueError as exc:
            raise ValueError(f"{path}: not a KV config file: {exc}") from None
        table = parsed.get("configTable") if isinstance(parsed, dict) else None
        if not isinstance(table, dict) or not all(isinstance(kv, dict) for kv in table.values()):
            raise ValueError(f"{path}: not a KV config file: no configTable object of objects")
        self.table = {str(ns): {str(k): str(v) for k, v in kv.items()} for ns, kv in table.items()}
        self._sizes = {ns: _namespace_size(ns, kv) for ns, kv in self.table.items()}
        self._total = sum(self._sizes.values())
        log.info("loaded %d KV namespaces from %s", len(self.table), path)

    async def _write(self) -> None:
        # The copy is taken on the loop, so the worker never sees a table being changed.
        snapshot = {ns: dict(kv) for ns, kv in self.table.items()}
        await asyncio.to_thread(self._persist, snapshot)

    def _persist(self, table: Table) -> None:
        write_atomically(self.config.kv_config_file, encode_table(table))

    async def put(self, namespace: str, key: str, value: str) -> None:
        """Store and write; raises KVLimitError (and changes nothing) when over a cap."""
        kv = self.table.get(namespace, {})
        old = kv.get(key)
        growth = _size(value) - _size(old) if old is not None else _entry_size(key, value)
        if namespace not in self.table:  # a new namespace's name is held too (a flood of names)
            growth += _size(namespace) + ENTRY_OVERHEAD
        self._check(namespace, key, value, growth)
        self.table.setdefault(namespace, kv)[key] = value
        self._sizes[namespace] = self._sizes.get(namespace, 0) + growth
        self._total += growth
        await self._writer()

    def _check(self, namespace: str, key: str, value: str, growth: int) -> None:
        config = self.config
        if _size(value) > config.kv_config_max_value_bytes:
            raise KVLimitError(
                f"KV value of {_size(value)} bytes is over kvConfigMaxValueBytes={config.kv_config_max_value_bytes}"
            )
        for what, text in (("namespace name", namespace), ("key", key)):
            if _size(text) > config.kv_config_max_value_bytes:
                raise KVLimitError(
                    f"KV {what} of {_size(text)} bytes is over kvConfigMaxValueBytes="
                    f"{config.kv_config_max_value_bytes}"
                )
        if growth <= 0:
            return  # a smaller value is always welcome, even in a store loaded over its caps
        held = self._sizes.get(namespace, 0)
        if held + growth > config.kv_config_max_namespace_bytes:
            raise KVLimitError(
                f"KV namespace {namespace} would hold {held + growth} bytes, over "
                f"kvConfigMaxNamespaceBytes={config.kv_config_max_namespace_bytes}"
            )
        total = self._total
        if total + growth > config.kv_config_max_total_bytes:
            raise KVLimitError(
                f"KV store would hold {total + growth} bytes, over "
                f"kvConfigMaxTotalBytes={config.kv_config_max_total_bytes}"
            )

    def get(self, namespace: str, key: str) -> str | None:
        return self.table.get(namespace, {}).get(key)

    async def delete(self, namespace: str, key: str) -> None:
        kv = self.table.get(namespace)
        if kv is None or key not in kv:
            return
        freed = _entry_size(key, kv.pop(key))
        self._sizes[namespace] -= freed
        self._total -= freed
        if not kv:
            del self.table[namespace]
            self._total -= self._sizes.pop(namespace)  # its name
        await self._writer()

    async def close(self) -> None:
        """Shutdown: wait until the last change is on disk."""
        await self._writer()

    def namespace(self, namespace: str) -> dict[str, str] | None:
        kv = self.table.get(namespace)
        return dict(kv) if kv else None
