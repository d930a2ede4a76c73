"""Making new directory entries durable, and telling a full disk from other I/O errors.

``fsync`` of a file writes its data and inode, not the directory entry that names it: after a power
loss a file created (or renamed into place) but whose directory was never synced may be gone, data
and all. Every store file that is created or renamed goes through :func:`sync_directory` (at once, or
with the file's first flush, see ``FileMapping``); quarantine moves use it too.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable

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


#: Directories `prepare_dirs` made ahead of their first `make_dirs`, with the directories whose entries
#: that changed (not synced yet): that call returns them, so its caller syncs them as if it had made them.
_prepared: dict[str, list[str]] = {}


def make_dirs(path: str) -> list[str]:
    """``os.makedirs(path, exist_ok=True)``, returning the directories whose entries changed (the parent of
    each directory created, outermost first) for the caller to pass to :func:`sync_directory`; for a
    directory `prepare_dirs` made, the ones its making changed (once)."""
    missing: list[str] = []
    p = os.path.abspath(path)
    if _prepared:
        prepared = _prepared.pop(p, None)
        if prepared is not None:  # every directory missing when it was kept: made now, if not yet
            if not os.path.isdir(p):
                os.makedirs(p, exist_ok=True)
            return prepared
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


def prepare_dirs(paths: Iterable[str]) -> int:
    """Make the missing ones of ``paths`` ahead of their first :func:`make_dirs` (from a worker thread: the
    first put to each of a burst of new topics' queues makes its directories on the event loop otherwise,
    in a directory of thousands of entries). Nothing is synced here: that first ``make_dirs`` returns the
    directories whose entries changed, as if it had made them, and the file it is called for syncs them
    before its data counts as written, as before. Safe beside a ``make_dirs`` of the same path in another
    thread: what a path will change is kept before it is made, so whichever call makes it, that first
    ``make_dirs`` returns it. Returns how many of ``paths`` it made."""
    made = 0
    for path in paths:
        p = os.path.abspath(path)
        missing: list[str] = []
        q = p
        while not os.path.isdir(q):
            missing.append(q)
            parent = os.path.dirname(q)
            if parent == q:
                break
            q = parent
        if not missing:
            continue
        _prepared[p] = [os.path.dirname(d) for d in reversed(missing)]
        os.makedirs(p, exist_ok=True)
        made += 1
    return made
