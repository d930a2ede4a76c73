"""Query by key on a store of 1,000,000 messages: latency per lookup (target p99 <= 1 ms) and the
ratio to a full CommitLog scan for the same key.

Each message has a UNIQ_KEY and one KEYS value, default store sizes (1 GiB CommitLog files, index
with 5,000,000 slots). Lookups go through ``query_message`` (index → read record → verify key).

    python benchmarks/bench_store_query.py [--count N] [--lookups N] [--dir PATH]

With ``--dir`` the store is kept there and reused by later runs.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time

from bench_store_append import make_messages
from benchlib import summary  # run as a script: benchmarks/ is on sys.path

from store import DefaultMessageStore, StoreConfig
from store.record import RecordInfo


def build(store: DefaultMessageStore, count: int) -> None:
    done = sum(store.topic_queue_table().values())
    chunk = 100_000
    for start in range(done, count, chunk):
        for m in make_messages(min(chunk, count - start), 100, keys=True, start=start):
            store.put_message(m)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--count", type=int, default=1_000_000)
    ap.add_argument("--lookups", type=int, default=2_000)
    ap.add_argument("--dir", default=None, help="store directory to build once and reuse")
    args = ap.parse_args()
    tmp = None if args.dir else tempfile.TemporaryDirectory()
    root = args.dir or tmp.name  # type: ignore[union-attr]
    os.makedirs(root, exist_ok=True)
    store = DefaultMessageStore(StoreConfig(store_path_root_dir=root))
    store.open()
    store.start()
    t0 = time.perf_counter()
    build(store, args.count)
    print(
        f"store ready: {sum(store.topic_queue_table().values()):,} messages ({time.perf_counter() - t0:.1f} s to build)"
    )

    rng = random.Random(7)
    picks = [rng.randrange(args.count) for _ in range(args.lookups)]
    lat = []
    for i, n in enumerate(picks):
        key = f"order-{n}" if i % 2 else f"0A0000029C406D06D69C{n:012X}"
        t = time.perf_counter_ns()
        res = store.query_message("BenchTopic", key, 32, 0, 2**62)
        lat.append(time.perf_counter_ns() - t)
        assert len(res.messages) == 1, key
    lat.sort()
    p50 = statistics.median(lat) / 1e6
    p99 = lat[int(len(lat) * 0.99) - 1] / 1e6
    print(f"query by key: {len(lat)} lookups, p50 {p50:.3f} ms, p99 {p99:.3f} ms, max {lat[-1] / 1e6:.3f} ms")

    wanted = f"order-{picks[0]}"
    hits: list[int] = []

    def check(info: RecordInfo) -> None:
        if info.topic == "BenchTopic" and wanted in (info.keys or "").split(" "):
            hits.append(info.commit_log_offset)

    t = time.perf_counter()
    store.commit_log.scan(0, check_crc=False, on_record=check)
    scan = time.perf_counter() - t
    assert len(hits) == 1
    print(
        f"full CommitLog scan for one key: {scan:.2f} s = {scan * 1000 / p50:,.0f}x the p50 lookup, {scan * 1000 / p99:,.0f}x p99"
    )
    store.shutdown()
    if tmp is not None:
        tmp.cleanup()
    summary(__file__, f"p99 {p99:.3f} ms", f"target 1 ms; p50 {p50:.3f} ms, {args.count:,} messages")


if __name__ == "__main__":
    main()
