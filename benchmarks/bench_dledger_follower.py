"""A DLedger follower's store-side CPU per entry: append a push's entries, commit them, dispatch them.

What a follower's store does for each PUSH of a produce load (`mqctl bench produce --size 1024`'s records,
``TAGS`` and a ``UNIQ_KEY`` indexed): the pushed entries (as the wire hands them over: an
:class:`store.dledger.Entry` each) appended with :meth:`DLedgerLog.append_followers` (index, term, position
and body-CRC checks, the entry and index files), the committed index advanced, and
:meth:`DefaultMessageStore.dispatch_committed` (ConsumeQueue units, IndexFile entries). A leader store
written first makes the entries; the follower's store then takes them PUSHES at a time, BATCH a push.
CPU is this thread's (``time.thread_time``) over the replay, per entry; best of ROUNDS fresh followers.
``--wire json|binary``: from the push's body instead of built entries, as the follower's read hands it
over: a JSON PUSH (``PushEntryRequest.decode``, each entry made a log entry, ``append_followers``) or a
binary push (the entries as the leader's data file holds them, ``append_raw``); ``--append-only`` leaves
commit and dispatch out, which both forms share. ``--leader``: the leader's side instead, a Raft driver's store putting BATCH messages, then committing and
dispatching them (what its puts parsed is dispatched without parsing the records back).

    python benchmarks/bench_dledger_follower.py [--pushes N] [--batch N] [--rounds N] [--keys] [--leader]
        [--wire json|binary] [--append-only]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from bench_store_append import make_messages  # run as a script: benchmarks/ is on sys.path
from benchlib import summary

from daemon.dledger.machines import log_entry, wire_entry
from daemon.dledger.protocol import PushEntryRequest
from store import DefaultMessageStore, StoreConfig
from store.dledger import Entry, encode_entry
from store.dledger_commitlog import DLedgerCommitLog
from store.native import describe_build


def dledger_store(root: str, self_id: str) -> tuple[DefaultMessageStore, DLedgerCommitLog]:
    store = DefaultMessageStore(
        StoreConfig(store_path_root_dir=root, enable_dleger_commit_log=True, dleger_self_id=self_id)
    )
    assert isinstance(store.commit_log, DLedgerCommitLog)
    return store, store.commit_log


def leader_entries(root: str, count: int, body: int, keys: bool, batch: int) -> list[Entry]:
    """``count`` entries as a leader's store writes them (record stamped, ``bodyCrc`` set)."""
    store, cl = dledger_store(root, "n0")
    store.open()
    store.start()
    msgs = make_messages(count, body, keys=keys, queues=8)
    for i in range(0, count, batch):
        for m in msgs[i : i + batch]:
            assert store.put_message(m).ok
    dlog = cl.dlog
    entries = [dlog.get(i) for i in range(dlog.last_index + 1)]
    store.shutdown()
    return entries


def push_bodies(entries: list[Entry], batch: int, wire: str) -> list[bytes]:
    """Each push's body as the leader writes it: a JSON PUSH, or the entries as its data file holds them."""
    out = []
    for i in range(0, len(entries), batch):
        run = entries[i : i + batch]
        if wire == "binary":
            out.append(b"".join(encode_entry(e) for e in run))
        else:
            req = PushEntryRequest(group="g", leader_id="n0", local_id="n0", remote_id="n1", term=1)
            req.batch_entry = [wire_entry(e) for e in run]
            out.append(req.encode())
    return out


def follower_round(
    root: str, entries: list[Entry], batch: int, wire: str = "entries", dispatch: bool = True
) -> float:
    """CPU seconds a fresh follower's store spends taking ``entries`` in pushes of ``batch``."""
    store, cl = dledger_store(root, "n1")
    cl.auto_commit = False
    store.open()
    store.start()
    dlog = cl.dlog
    # as a push hands them over: each entry built from the wire's fields, in the timed loop
    fields = [(e.index, e.term, e.body, e.pos, e.magic, e.channel, e.chain_crc, e.body_crc) for e in entries]
    bodies = push_bodies(entries, batch, wire) if wire != "entries" else []
    cpu0 = time.thread_time()
    for n, i in enumerate(range(0, len(fields), batch)):
        if wire == "binary":
            dlog.append_raw(bodies[n])
        elif wire == "json":
            dlog.append_followers([log_entry(w) for w in PushEntryRequest.decode(bodies[n]).batch_entry])
        else:
            dlog.append_followers([Entry(*f) for f in fields[i : i + batch]])
        if dispatch:
            dlog.set_committed(dlog.last_index)
            store.dispatch_committed()
    cpu = time.thread_time() - cpu0
    if not dispatch:
        dlog.set_committed(dlog.last_index)
        store.dispatch_committed()
    assert dlog.committed_index == len(entries) - 1
    assert sum(store.topic_queue_table().values()) == len(entries)
    store.shutdown()
    return cpu


def leader_round(root: str, count: int, body: int, keys: bool, batch: int) -> float:
    """CPU seconds a leader's store spends putting ``count`` messages, committing and dispatching each batch."""
    store, cl = dledger_store(root, "n0")
    cl.auto_commit = False
    store.open()
    store.start()
    msgs = make_messages(count, body, keys=keys, queues=8)
    dlog = cl.dlog
    cpu0 = time.thread_time()
    for i in range(0, count, batch):
        for m in msgs[i : i + batch]:
            store.put_message(m)
        dlog.set_committed(dlog.last_index)
        store.dispatch_committed()
    cpu = time.thread_time() - cpu0
    assert sum(store.topic_queue_table().values()) == count
    store.shutdown()
    return cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pushes", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=16, help="entries a push carries")
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--keys", action="store_true", help="also one KEYS value (a second index entry)")
    ap.add_argument("--leader", action="store_true", help="the leader's put + commit + dispatch instead")
    ap.add_argument(
        "--wire", choices=("entries", "json", "binary"), default="entries", help="what a push hands over"
    )
    ap.add_argument("--append-only", action="store_true", help="without the commit and dispatch")
    args = ap.parse_args()
    count = args.pushes * args.batch
    with tempfile.TemporaryDirectory() as tmp:
        if args.leader:
            cpus = [
                leader_round(os.path.join(tmp, f"leader{r}"), count, args.body, args.keys, args.batch)
                for r in range(args.rounds)
            ]
        else:
            entries = leader_entries(os.path.join(tmp, "leader"), count, args.body, args.keys, args.batch)
            cpus = [
                follower_round(
                    os.path.join(tmp, f"follower{r}"), entries, args.batch, args.wire, not args.append_only
                )
                for r in range(args.rounds)
            ]
    per = [c / count * 1e6 for c in cpus]
    side = "leader put+commit+dispatch" if args.leader else f"follower append+commit+dispatch, {args.wire}"
    if args.append_only and not args.leader:
        side = f"follower append, {args.wire}"
    print(
        f"{side} ({describe_build()}): {args.pushes:,} pushes x {args.batch} x "
        f"{args.body} B: CPU {min(per):.1f} us/entry best of {args.rounds} "
        f"({', '.join(f'{p:.1f}' for p in per)})"
    )
    summary(
        __file__,
        f"{min(per):.1f} us/entry",
        f"{'leader, ' if args.leader else ''}{args.batch} x {args.body} B a push, {describe_build()}",
    )


if __name__ == "__main__":
    main()
