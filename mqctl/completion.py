"""Shell completion of topic and group names, from a per-cluster cache that never blocks the shell.

Completing ``--topic``/``--group`` reads the cache of the NameServers the command would use; when
the cache is missing or older than :data:`FRESH_SECONDS` it starts a detached refresh
(``python -m mqctl.completion NAMESRV``) and answers from what it has, so a TAB costs no network
round trip.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

FRESH_SECONDS = 60.0


def cache_path(namesrv: list[str]) -> Path:
    from platformdirs import user_cache_dir

    root = Path(os.environ.get("MQCTL_CACHE_DIR") or user_cache_dir("mqctl"))
    digest = hashlib.sha1(";".join(sorted(namesrv)).encode()).hexdigest()[:16]
    return root / f"names-{digest}.json"


def _target(params: dict[str, Any]) -> list[str]:
    from mqctl.config import resolve_target

    return resolve_target(namesrv_flag=params.get("namesrv"), context_flag=params.get("context")).namesrv


def _names(kind: str, params: dict[str, Any], incomplete: str) -> list[str]:
    try:
        namesrv = _target(params)
    except Exception:  # a half-typed command line must never break the shell
        return []
    path = cache_path(namesrv)
    cached = _read(path)
    if time.time() - float(cached.get("updated", 0)) > FRESH_SECONDS:
        subprocess.Popen(
            [sys.executable, "-m", "mqctl.completion", ";".join(namesrv)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    return [name for name in cached.get(kind, []) if name.startswith(incomplete)]


def complete_topic(ctx: Any, incomplete: str) -> list[str]:
    return _names("topics", ctx.params, incomplete)


def complete_group(ctx: Any, incomplete: str) -> list[str]:
    return _names("groups", ctx.params, incomplete)


#: Seconds a refresh waits for each answer: a hung broker costs a TAB's cache one second, not a shell.
FETCH_TIMEOUT = 1.0


async def _fetch(namesrv: list[str], cached: dict[str, Any]) -> dict[str, Any]:
    """Topic names from the NameServer, group names from the brokers that answer (one that refuses, as
    another cluster's ACL does, or is down, is left out); what cannot be read keeps its cached names."""
    from daemon.remoting.client import RemotingClient
    from daemon.remoting.errors import RemotingError
    from mqctl.admin.client import Admin
    from mqctl.errors import MqctlError
    from mqctl.services.groups import list_groups

    data = {"topics": cached.get("topics", []), "groups": cached.get("groups", [])}
    async with Admin(namesrv, timeout=FETCH_TIMEOUT) as admin:
        if isinstance(admin.client, RemotingClient):
            admin.client.connect_timeout = FETCH_TIMEOUT
        try:
            data["topics"] = await admin.topic_list()
            data["groups"] = [row["group"] for row in await list_groups(admin, cluster=None, system=False)]
        except (RemotingError, MqctlError):
            pass
    return data


def _read(path: Path) -> dict[str, Any]:
    try:
        cached = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return cached if isinstance(cached, dict) else {}


def refresh(namesrv: list[str]) -> None:
    """Fetch topic and group names and replace the cache atomically. It never fails: names it cannot read
    stay as cached, and the cache is marked fresh either way, so the next TABs do not start another
    refresh at once."""
    from daemon.remoting.loop import run

    path = cache_path(namesrv)
    cached = _read(path)
    try:
        data = run(_fetch(namesrv, cached))
    except Exception:  # a broken refresh must never cost the shell anything
        data = {"topics": cached.get("topics", []), "groups": cached.get("groups", [])}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"updated": time.time(), **data}), encoding="utf-8")
    tmp.replace(path)


if __name__ == "__main__":
    refresh(sys.argv[1].split(";"))
