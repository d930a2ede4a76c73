"""Making new directory entries durable, and telling a full disk from other I/O errors.

``fsync`` of a file writes its data and inode, not the directory entry that names it: after a power
loss a file created (or renamed into place) but whose directory was never synced may be gone, data
and all. Every store file that is created or renamed goes through :func:`sync_directory` (at once, or
with the file's first flush, see ``FileMapping``); quarantine moves use it too.
"""

from __future__ import annotations

import errno
import os

#: ``errno`` values that mean "no space": the disk (or the user's quota) is full.
NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})


def is_no_space(error: BaseException) -> bool:
    """Whether ``error`` is an ``OSError`` saying the disk or quota is full."""
    return isinstance(error, OSError) and error.errno in NO_SPACE


def sync_directory(path: str) -> None:
    """``fsync`` the directory ``path``: entries created, renamed or removed in it survive a power loss."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs(path: str) -> list[str]:
    """``os.makedirs(path, exist_ok=True)``, returning the directories whose entries changed (the parent of
    each directory created, outermost first) for the caller to pass to :func:`sync_directory`."""
    missing: list[str] = []
    p = os.path.abspath(path)
    while not os.path.isdir(p):
        missing.append(p)
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    if not missing:
        return []
    os.makedirs(path, exist_ok=True)
    return [os.path.dirname(d) for d in reversed(missing)]


def replace_durably(tmp: str, path: str) -> None:
    """``os.replace(tmp, path)`` and sync the directory, so the new name survives a power loss (``tmp``
    must have been fsynced by the caller)."""
    os.replace(tmp, path)
    sync_directory(os.path.dirname(os.path.abspath(path)))


def write_durably(path: str, data: bytes, tmp: str = "") -> None:
    """Write ``data`` to ``tmp`` (default ``path`` + ".tmp"), fsync it and rename it over ``path`` durably:
    a crash leaves the old file or the new one, whole."""
    tmp = tmp or path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    replace_durably(tmp, path)
