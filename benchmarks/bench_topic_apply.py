"""Creating N topics one request at a time with `mqctl topic apply -f FILE --execute` (target: 1,000 in <= 10 s).

    python benchmarks/bench_topic_apply.py [--topics 1000]

Starts a NameServer and a broker (benchmarks/bench_ali_ons.py's cluster, temporary store), writes a file of
N topics (4 queues each), and times the CLI applying it (creations go one at a time, as mqadmin
updateTopic sends them). Prints the wall time, the broker's CPU over it and the load average.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_ali_ons import cluster, cpu_seconds  # run as a script: benchmarks/ is on sys.path
from benchlib import summary  # run as a script: benchmarks/ is on sys.path

from daemon.remoting.errors import RemotingError
from daemon.remoting.loop import run
from mqctl.admin.client import Admin


async def registered(ns: str) -> None:
    """Wait until the NameServer lists a master for `topic apply` to target."""
    async with Admin([ns]) as admin:
        while True:
            try:
                if (await admin.cluster_info()).broker_addr_table:
                    return
            except RemotingError:  # the NameServer not listening yet
                pass
            await asyncio.sleep(0.1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--topics", type=int, default=1000)
    a = parser.parse_args()
    print(f"load average before: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with cluster() as (ns, pid), tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "topics.json"
        spec.write_text(
            json.dumps(
                [{"name": f"Apply{i:05d}", "read_queues": 4, "write_queues": 4} for i in range(a.topics)]
            )
        )
        run(registered(ns))
        cpu, wall = cpu_seconds(pid), time.perf_counter()
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "mqctl",
                "topic",
                "apply",
                "-f",
                str(spec),
                "--execute",
                "-n",
                ns,
                "-o",
                "json",
            ],
            capture_output=True,
            text=True,
        )
        wall, cpu = time.perf_counter() - wall, cpu_seconds(pid) - cpu
        if done.returncode != 0:
            raise SystemExit(f"topic apply failed ({done.returncode}): {done.stderr.strip()}")
        created = sum(row["action"] == "created" for row in json.loads(done.stdout))
    print(
        f"{created} topics created in {wall:.2f} s, broker CPU {cpu:.2f} s ({cpu / created * 1e3:.2f} ms/topic)"
    )
    summary(
        __file__,
        f"{created / wall:,.0f} topics/s",
        f"{created:,} topics in {wall:.2f} s; broker CPU {cpu:.2f} s",
    )


if __name__ == "__main__":
    main()
