"""Reading messages by (topic, queue, offset) in batches of 32 (target: >= 200,000 msgs/s).

Reads what a pull needs: ``get_messages`` returns the ConsumeQueue walk plus a zero-copy view of
each stored record (the broker sends those bytes as they are). ``--decode`` also decodes every
message (what a local consumer or the CLI would do).

    python benchmarks/bench_store_read.py [--count N] [--body BYTES] [--decode]
"""

from __future__ import annotations

import argparse
import tempfile
import time

from bench_store_append import make_messages
from benchlib import summary  # run as a script: benchmarks/ is on sys.path

from store import DefaultMessageStore, GetMessageStatus, StoreConfig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--count", type=int, default=400_000)
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument("--queues", type=int, default=4)
    ap.add_argument("--decode", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as root:
        store = DefaultMessageStore(StoreConfig(store_path_root_dir=root))
        store.open()
        store.start()
        for m in make_messages(args.count, args.body, keys=False, queues=args.queues):
            store.put_message(m)
        read = 0
        nbytes = 0
        t0 = time.perf_counter()
        for q in range(args.queues):
            offset = 0
            while True:
                res = store.get_messages("bench", "BenchTopic", q, offset, 32)
                if res.status is not GetMessageStatus.FOUND:
                    break
                for sel in res.messages:
                    nbytes += len(sel.raw)
                    if args.decode:
                        assert sel.message.queue_offset == sel.queue_offset
                read += len(res.messages)
                offset = res.next_begin_offset
        elapsed = time.perf_counter() - t0
        assert read == args.count
        store.shutdown()
    what = "raw + decoded" if args.decode else "raw records"
    print(
        f"read by (topic, queue, offset), batches of 32, {what}: {read:,} msgs ({nbytes / 2**20:.0f} MiB)"
        f" in {elapsed:.2f} s = {read / elapsed:,.0f} msgs/s"
    )
    summary(__file__, f"{read / elapsed:,.0f} msgs/s", f"target 200,000/s; {what}, {read:,} messages")


if __name__ == "__main__":
    main()
