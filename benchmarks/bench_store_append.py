"""Append + dispatch throughput of 1 KiB messages, ASYNC flush, in-process (issue 3 target: >= 100,000 msgs/s).

Each message looks like a Java producer's: TAGS, one KEYS value and a UNIQ_KEY, so every append
writes one CommitLog record, one ConsumeQueue unit and two index entries.

    python benchmarks/bench_store_append.py [--count N] [--dir PATH]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from store.config import StoreConfig
from store.engine import DefaultMessageStore
from store.message import Message


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--count", type=int, default=300_000)
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument("--dir", default=None, help="store directory (default: a temporary one)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as root:
        cfg = StoreConfig(store_path_root_dir=root)
        store = DefaultMessageStore(cfg)
        store.open()
        store.start()
        body = os.urandom(args.body // 2).hex().encode()
        msgs = [
            Message(
                topic="BenchTopic",
                body=body,
                queue_id=i % 8,
                born_timestamp=1_700_000_000_000 + i,
                born_host=("10.0.0.2", 40000),
                properties={
                    "KEYS": f"order-{i}",
                    "UNIQ_KEY": f"0A0000029C40000000006D06D69C{i:04X}"[-32:],
                    "TAGS": f"Tag{i % 4}",
                },
            )
            for i in range(args.count)
        ]
        put = store.put_message
        t0 = time.perf_counter()
        for m in msgs:
            put(m)
        elapsed = time.perf_counter() - t0
        assert store.get_max_offset("BenchTopic", 0) == (args.count + 7) // 8
        store.shutdown()
    print(f"append+dispatch: {args.count} x {args.body} B in {elapsed:.2f} s = {args.count / elapsed:,.0f} msgs/s")


if __name__ == "__main__":
    main()
