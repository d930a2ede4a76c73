"""The NameServers' KV config; writes go to every NameServer since they never talk to each other."""

from __future__ import annotations

from typing import TypedDict

from mqctl.admin.client import Admin
from mqctl.errors import NotFoundError
from mqctl.output import Rows


class KvValue(TypedDict):
    """``kv get``: one value."""

    namespace: str
    key: str
    value: str


class KvItem(TypedDict):
    """A row of ``kv list``."""

    key: str
    value: str


class KvWrite(TypedDict):
    """``kv set``: the value before (None: new key) and after, and the NameServers written."""

    namespace: str
    key: str
    previous: str | None
    value: str
    namesrv: list[str]


class KvDeleted(TypedDict):
    """``kv delete``: the value removed (None: already gone, with --if-exists)."""

    namespace: str
    key: str
    deleted: str | None
    namesrv: list[str]


async def get(admin: Admin, namespace: str, key: str) -> KvValue:
    value = await admin.kv_get(namespace, key)
    if value is None:
        raise NotFoundError(f"no key {key!r} in namespace {namespace!r}")
    return {"namespace": namespace, "key": key, "value": value}


async def list_namespace(admin: Admin, namespace: str) -> list[KvItem]:
    return Rows.of(
        KvItem, ({"key": k, "value": v} for k, v in sorted((await admin.kv_list(namespace)).items()))
    )


async def put(admin: Admin, namespace: str, key: str, value: str) -> KvWrite:
    previous = await admin.kv_get(namespace, key)
    await admin.kv_put(namespace, key, value)
    return {
        "namespace": namespace,
        "key": key,
        "previous": previous,
        "value": value,
        "namesrv": admin.namesrv,
    }


async def delete(admin: Admin, namespace: str, key: str, *, if_exists: bool = False) -> KvDeleted:
    previous = await admin.kv_get(namespace, key)
    if previous is None and if_exists:
        return {"namespace": namespace, "key": key, "deleted": None, "namesrv": admin.namesrv}
    if previous is None:
        raise NotFoundError(f"no key {key!r} in namespace {namespace!r}")
    await admin.kv_delete(namespace, key)
    return {"namespace": namespace, "key": key, "deleted": previous, "namesrv": admin.namesrv}
