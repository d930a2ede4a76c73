"""Shell completion of topic and group names, from a per-cluster cache that never blocks the shell.

Completing ``--topic``/``--group`` reads the cache of the NameServers the command would use; when
the cache is missing or older than :data:`FRESH_SECONDS` it starts a detached refresh
(``python -m mqctl.completion NAMESRV``) and answers from what it has, so a TAB costs no network
round trip.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

FRESH_SECONDS = 60.0


def cache_path(namesrv: list[str]) -> Path:
    import os

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
    try:
        cached = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        cached = {}
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


async def _fetch(namesrv: list[str]) -> dict[str, Any]:
    from mqctl.admin.client import Admin
    from mqctl.services.groups import list_groups

    async with Admin(namesrv, timeout=3.0) as admin:
        topics = await admin.topic_list()
        groups = [row["group"] for row in await list_groups(admin, cluster=None, system=False)]
    return {"updated": time.time(), "topics": topics, "groups": groups}


def refresh(namesrv: list[str]) -> None:
    """Fetch topic and group names and replace the cache atomically."""
    from daemon.remoting.loop import run

    data = run(_fetch(namesrv))
    path = cache_path(namesrv)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    tmp.replace(path)


if __name__ == "__main__":
    refresh(sys.argv[1].split(";"))
