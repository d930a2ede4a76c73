"""A slave's divergent tail, set aside: the CommitLog from a cut on, and what was dispatched from it.

Apart from recovery's cut (:func:`store.engine.DefaultMessageStore._recover`) because this one runs on a
live store: a slave that finds its last records differ from its master's (it ran as a master on its own
for a while, or its master was restored from an older disk) takes them out of service before it
replicates again. What is taken goes into a quarantine like recovery's (:mod:`store.quarantine`), with a
manifest saying why, so ``mqctl store verify`` and ``store salvage`` find it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from store.checkpoint import store_identity
from store.quarantine import DIVERGED, Manifest, list_quarantines, set_aside

if TYPE_CHECKING:
    from store.engine import DefaultMessageStore

log = logging.getLogger(__name__)


def set_aside_replica_tail(store: DefaultMessageStore, cut: int, why: str) -> tuple[int, str]:
    """Move the CommitLog from ``cut`` on and the ConsumeQueue units pointing there into a new quarantine,
    then truncate both, move the dispatch cursor back and write a checkpoint that no longer names what was
    cut. Index entries stay: they cannot be unlinked from their hash chains, and a query reads every hit
    back and compares its topic and key, so one left pointing at a later record matches nothing wrong.
    Returns the records set aside and the quarantine directory ("" when there was nothing to set aside)."""
    with store._put_lock:
        cqs = list(store._cqs.values())
        manifest = set_aside(
            store.config.store_path_root_dir,
            store.commit_log.files,
            cqs,
            cut,
            corruption=None,
            recovery=DIVERGED,
            now_ms=store.clock.now_ms(),
            queue_cut=lambda cq: cq.dirty_from(cut),
        )
        if manifest is not None:
            manifest.why = why
            manifest.save()
        store.commit_log.truncate(cut)
        store.replica_mark = min(store.replica_mark, cut)
        if store.held_from > cut:
            store.held_from = cut
        if store._diverged_from >= cut:  # (the tail a check held back is what goes)
            store._diverged_from = -1
        held = store.commit_log.set_aside  # records set aside in place that were cut go with the cut
        for offset in [o for o in held if o >= cut]:
            del held[offset]
        for cq in cqs:
            cq.truncate_dirty(cut)
        store._rebuild_queue_table()
        store.reput_from_offset = min(store.reput_from_offset, cut)
        store._checkpoint(locked=True)
    if manifest is None:
        return 0, ""
    return manifest.records + manifest.damaged, manifest.path


def diverged_quarantines(store_root: str) -> list[Manifest]:
    """The quarantines holding a slave's divergent tails (not recovery's), oldest first."""
    return [m for m in list_quarantines(store_root) if m.recovery == DIVERGED]


def restart_replica_log(store: DefaultMessageStore, start: int) -> int:
    """Begin a slave's CommitLog again, empty, at ``start``: its master's first retained offset (a file's
    start), past the slave's whole log. The master's retention deleted the files that held the slave's
    records, and with them the records between the slave's end and ``start``: its log cannot continue
    where it ends, and its master has nothing older to send. What it holds is its master's expired
    records (the caller knows them to be: the replica mark counted them), so they go as they went on
    the master: the CommitLog files, and the ConsumeQueue and index files built from them (every one
    points below ``start``), deleted. The store takes a new identity: its log no longer holds what the old
    one's vouched for. Returns the CommitLog files deleted."""
    with store._put_lock:
        cl = store.commit_log
        old = list(cl.files.files)
        if (old and old[-1].file_from_offset + cl.file_size > start) or start % cl.file_size:
            raise ValueError(f"offset {start} is not a file's start past the end of the log")
        cl.files.create_file(start)  # first: a full disk leaves the log as it was
        # a store is named by the records it vouches for: a slave whose mark named it, were it promoted
        # again, would take this log's start for its retention's and delete what it holds below it (made
        # before anything is deleted: a crash then leaves the old log under a new name, never the reverse)
        store.identity = store_identity(store.config.store_path_root_dir, create=True, renew=True).hex()
        store.incarnations = []  # (the old identity's: renewed with it)
        cl.files.files = cl.files.files[-1:]
        cl.set_aside.clear()
        cqs = list(store._cqs.values())
        store._cqs.clear()
        store._dirty_cqs = []
        store._due_cqs = []
        store._queues_replaced()
        indexes = store.index.files
        store.index.files = []
        store.reput_from_offset = start
        store.replica_mark = start
        store.held_from = store._diverged_from = -1
    for mf in old:
        log.info("deleting commit log file %s (its master's retention deleted it)", mf.path)
        mf.destroy()
    cl.first_files_deleted()
    for cq in cqs:
        cq.destroy()
    for f in indexes:
        f.destroy()
    store._checkpoint()
    return len(old)
