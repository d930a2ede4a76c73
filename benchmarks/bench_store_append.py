"""Append + dispatch throughput of 1 KiB messages, ASYNC flush, in-process (target: >= 100,000 msgs/s).

Messages look like the Java producer's: ``TAGS`` and a ``UNIQ_KEY`` (indexed), and with ``--keys``
also one business key in ``KEYS`` (a second index entry). Each append writes the CommitLog record,
its ConsumeQueue unit and the index entries before returning.

    python benchmarks/bench_store_append.py [--count N] [--keys] [--batch N] [--sync THREADS] [--body BYTES]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from benchlib import summary  # run as a script: benchmarks/ is on sys.path

from store import DefaultMessageStore, Message, StoreConfig


def make_messages(
    count: int,
    body_size: int,
    *,
    keys: bool,
    start: int = 0,
    topic: str = "BenchTopic",
    queues: int = 8,
    uniq: bool = True,
) -> list[Message]:
    """Producer-like messages numbered from ``start``; the UNIQ_KEY has the Java client's 32-hex-digit shape
    (``uniq=False``: none, as ``mqctl bench produce`` sends them)."""
    body = os.urandom(body_size // 2 + 1).hex().encode()[:body_size]
    out = []
    for i in range(start, start + count):
        props = {"TAGS": f"Tag{i % 4}"}
        if uniq:
            props["UNIQ_KEY"] = f"0A0000029C406D06D69C{i:012X}"
        if keys:
            props["KEYS"] = f"order-{i}"
        out.append(
            Message(
                topic=topic,
                body=body,
                queue_id=i % queues,
                born_timestamp=1_700_000_000_000 + i,
                born_host=("10.0.0.2", 40000),
                properties=props,
            )
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--count", type=int, default=300_000)
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument(
        "--keys", action="store_true", help="also set one KEYS value (two index entries per message)"
    )
    ap.add_argument("--batch", type=int, default=1, help="messages per put (put_messages) for one queue")
    ap.add_argument(
        "--sync", type=int, default=0, metavar="THREADS", help="SYNC_FLUSH with this many putting threads"
    )
    ap.add_argument("--dir", default=None, help="parent of the temporary store directory")
    args = ap.parse_args()
    msgs = make_messages(args.count, args.body, keys=args.keys, queues=1 if args.batch > 1 else 8)
    with tempfile.TemporaryDirectory(dir=args.dir) as root:
        flush = "SYNC_FLUSH" if args.sync else "ASYNC_FLUSH"
        store = DefaultMessageStore(StoreConfig(store_path_root_dir=root, flush_disk_type=flush))
        store.open()
        store.start()
        t0 = time.perf_counter()
        cpu0 = time.thread_time()
        if args.sync:
            with ThreadPoolExecutor(args.sync) as pool:
                assert all(r.ok for r in pool.map(store.put_message, msgs, chunksize=64))
        elif args.batch > 1:
            put_batch = store.put_messages
            for i in range(0, len(msgs), args.batch):
                put_batch(msgs[i : i + args.batch])
        else:
            put = store.put_message
            for m in msgs:
                put(m)
        cpu = time.thread_time() - cpu0
        elapsed = time.perf_counter() - t0
        assert sum(store.topic_queue_table().values()) == args.count
        fsyncs = store.flush_count
        store.shutdown()
    kind = "UNIQ_KEY+KEYS" if args.keys else "UNIQ_KEY"
    how = f"batches of {args.batch}" if args.batch > 1 else "single puts"
    if args.sync:
        print(
            f"append+dispatch ({kind} indexed, SYNC_FLUSH, {args.sync} threads): {args.count:,} x {args.body} B"
            f" in {elapsed:.2f} s = {args.count / elapsed:,.0f} msgs/s; {fsyncs:,} group commits"
            f" ({args.count / max(fsyncs, 1):.1f} puts per fsync)"
        )
        summary(__file__, f"{args.count / elapsed:,.0f} msgs/s", f"SYNC_FLUSH, {args.sync} threads")
        return
    print(
        f"append+dispatch ({kind} indexed, ASYNC_FLUSH, {how}): {args.count:,} x {args.body} B in {elapsed:.2f} s"
        f" = {args.count / elapsed:,.0f} msgs/s wall; writer thread CPU {cpu / args.count * 1e6:.2f} us/msg"
        f" = {args.count / cpu:,.0f} msgs/s per core"
    )
    summary(
        __file__,
        f"{args.count / elapsed:,.0f} msgs/s",
        f"target 100,000/s; {args.count:,} x {args.body} B, {how}",
    )


if __name__ == "__main__":
    main()
