"""A slave's replica work in one process, as CPU seconds per GiB: appending the master's CommitLog bytes
(32 KiB frames, as the HA stream brings them) and dispatching them into ConsumeQueues and the index.

CPU time of the working thread (``time.thread_time``) rather than wall time, so the figure holds on a
loaded machine; ``bench_ha.py`` measures the same path end to end over the HA protocol.

Usage: python benchmarks/bench_replica.py [RECORDS]   (1 KiB bodies with a UNIQ_KEY, 4 queues)
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

from benchlib import summary  # run as a script: benchmarks/ is on sys.path

from store.config import SLAVE, StoreConfig
from store.engine import DefaultMessageStore
from store.message import Message

FRAME = 32 * 1024


def main() -> None:
    records = int(sys.argv[1]) if len(sys.argv) > 1 else 60_000
    body = os.urandom(1024)
    with tempfile.TemporaryDirectory() as tmp:
        master = DefaultMessageStore(StoreConfig(store_path_root_dir=f"{tmp}/m"))
        master.open()
        master.start()
        for i in range(records):
            props = {"UNIQ_KEY": f"{i:032X}", "WAIT": "true"}
            master.put_message(Message(topic="BenchTopic", body=body, queue_id=i % 4, properties=props))
        end = master.commit_log.max_offset
        first = master.commit_log.files.find_file(0)
        assert first is not None and end <= first.file_size
        data = bytes(first.view[:end])
        master.shutdown()
        # the flush loop's dispatch retry stays out of the way: only dispatch_replica works here
        config = StoreConfig(
            store_path_root_dir=f"{tmp}/s", broker_role=SLAVE, flush_interval_consume_queue=3_600_000
        )
        slave = DefaultMessageStore(config)
        slave.open()
        slave.start()
        started = time.thread_time()
        for offset in range(0, end, FRAME):
            slave.append_replica(offset, data[offset : offset + FRAME])
        append = time.thread_time() - started
        started = time.thread_time()
        while slave.dispatch_replica():
            pass
        dispatch = time.thread_time() - started
        slave.shutdown()
    gib = end / 2**30
    print(
        f"{end / 2**20:,.0f} MiB, {records:,} records: append {append / gib:.2f} CPU s/GiB, dispatch "
        f"{dispatch / gib:.2f} CPU s/GiB ({dispatch / records * 1e6:.2f} us/record); "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    summary(
        __file__,
        f"{(append + dispatch) / gib:.2f} CPU s/GiB",
        f"append {append / gib:.2f} + dispatch {dispatch / gib:.2f}; {records:,} records",
    )


if __name__ == "__main__":
    main()
