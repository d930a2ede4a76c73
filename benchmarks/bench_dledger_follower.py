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
commit and dispatch out, which both forms share. ``--server``: the follower's whole path instead, as its
broker runs it: each binary push a frame handed to its DLedger server's listener connection (the frame's
read, the peer gate, the append, the commit, the answer written), the loop turns that run what a push
scheduled, its tick every ``--tick`` pushes, and the dispatch (CPU of the thread, per entry). ``--leader``: the leader's side instead, a Raft driver's store putting BATCH messages, then committing and
dispatching them (what its puts parsed is dispatched without parsing the records back).

    python benchmarks/bench_dledger_follower.py [--pushes N] [--batch N] [--rounds N] [--keys|--plain] [--leader]
        [--wire json|binary] [--append-only] [--server [--tick N]]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time

from bench_store_append import make_messages  # run as a script: benchmarks/ is on sys.path
from benchlib import summary

from daemon.dledger.machines import Timings, log_entry, wire_entry
from daemon.dledger.protocol import BINARY_PUSH_CODE, PushEntryRequest, binary_push_fields
from daemon.dledger.server import DLedgerServer, DLedgerSettings, now_ms
from daemon.remoting.command import RemotingCommand
from daemon.remoting.connection import Connection
from daemon.remoting.frame import encode_command
from store import DefaultMessageStore, StoreConfig
from store.dledger import Entry, encode_entry
from store.dledger_commitlog import DLedgerCommitLog
from store.native import describe_build
from tests.support.transport import RecordingTransport

#: whether the records carry a UNIQ_KEY (``--plain``: none, as ``mqctl bench produce``'s)
UNIQ = [True]

#: ``--server``'s group: the follower n1, pushed by n0 (the gate admits both from loopback)
PEERS = {"n0": "127.0.0.1:1", "n1": "127.0.0.1:2", "n2": "127.0.0.1:3"}


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
    msgs = make_messages(count, body, keys=keys, queues=8, uniq=UNIQ[0])
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


def push_frames(entries: list[Entry], batch: int) -> list[bytes]:
    """Each binary push of ``batch`` entries as the leader writes it, committing what the one before carried
    (a leader's commit index lags its pushes by an answer)."""
    frames = []
    for n, i in enumerate(range(0, len(entries), batch)):
        run = entries[i : i + batch]
        req = PushEntryRequest(group="g", leader_id="n0", local_id="n0", remote_id="n1", term=1)
        req.commit_index = run[0].index - 1
        fields = binary_push_fields(req, run[0].index, len(run))
        cmd = RemotingCommand.request(BINARY_PUSH_CODE, fields, b"".join(encode_entry(e) for e in run))
        cmd.opaque = n + 1
        frames.append(encode_command(cmd))
    return frames


async def server_round(root: str, frames: list[bytes], batch: int, tick: int) -> float:
    """CPU seconds a fresh follower spends on ``frames`` through its DLedger server, as its broker runs it."""
    store, cl = dledger_store(root, "n1")
    cl.auto_commit = False
    store.open()
    store.start()
    server = DLedgerServer(
        DLedgerSettings("g", "n1", dict(PEERS), cl.directory, Timings()),
        cl.dlog,
        on_commit=store.dispatch_committed,
    )
    server.gate.resolve()
    node = server.node
    node.m.term, node._now = 1, now_ms()
    node.to_follower(1, "n0")
    conn = server.server.accept()
    assert isinstance(conn, Connection)
    transport = RecordingTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    cpu0 = time.thread_time()
    for n, frame in enumerate(frames):
        conn.data_received(frame)
        await asyncio.sleep(0)  # (the loop turns that run what the push scheduled)
        await asyncio.sleep(0)
        if n % tick == tick - 1 or n == len(frames) - 1:
            node.last_leader_beat = node._now = now_ms()  # (its leader's heartbeats)
            server._effects()  # the tick's pass
            await asyncio.sleep(0)
    cpu = time.thread_time() - cpu0
    assert len(transport.writes) == len(frames)
    # all committed but the last push's entries (the next push would say so), and all that dispatched
    committed = (len(frames) - 1) * batch - 1
    assert cl.dlog.committed_index == committed
    assert sum(store.topic_queue_table().values()) == committed + 1
    await server.server.stop(grace=0)
    store.shutdown()
    return cpu


def leader_round(root: str, count: int, body: int, keys: bool, batch: int) -> float:
    """CPU seconds a leader's store spends putting ``count`` messages, committing and dispatching each batch."""
    store, cl = dledger_store(root, "n0")
    cl.auto_commit = False
    store.open()
    store.start()
    msgs = make_messages(count, body, keys=keys, queues=8, uniq=UNIQ[0])
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
    ap.add_argument("--plain", action="store_true", help="no UNIQ_KEY either (mqctl bench produce's records)")
    ap.add_argument("--leader", action="store_true", help="the leader's put + commit + dispatch instead")
    ap.add_argument(
        "--wire", choices=("entries", "json", "binary"), default="entries", help="what a push hands over"
    )
    ap.add_argument("--append-only", action="store_true", help="without the commit and dispatch")
    ap.add_argument("--server", action="store_true", help="the follower's whole path, through its server")
    ap.add_argument("--tick", type=int, default=8, help="--server: pushes between two of its ticks")
    args = ap.parse_args()
    UNIQ[0] = not args.plain
    count = args.pushes * args.batch
    with tempfile.TemporaryDirectory() as tmp:
        if args.leader:
            cpus = [
                leader_round(os.path.join(tmp, f"leader{r}"), count, args.body, args.keys, args.batch)
                for r in range(args.rounds)
            ]
        elif args.server:
            entries = leader_entries(os.path.join(tmp, "leader"), count, args.body, args.keys, args.batch)
            frames = push_frames(entries, args.batch)
            cpus = [
                asyncio.run(server_round(os.path.join(tmp, f"follower{r}"), frames, args.batch, args.tick))
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
    if args.server and not args.leader:
        side = f"follower through its server (binary pushes, a tick every {args.tick})"
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
