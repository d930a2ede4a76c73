"""The broker's CPU per send in-process, to one topic against round-robin over many (the send path alone).

A broker runs in this process on a temporary store (no NameServer); TOPICS one-queue topics are created in
its table and each sent one message (their ConsumeQueue files made, as on a broker that has served them).
Then ROUNDS rounds, alternately to one topic and round-robin over the TOPICS, each COUNT sends through
``SendProcessor.send_from`` on the loop thread, every request decoded from its own frame as a socket read
gives it (made just before, off the clock), with one shared 1 KiB body. A round's figure is the loop
thread's CPU per send (``time.thread_time_ns``): what `bench_broker_topics` measures end to end without the sockets, the
senders and the scheduler, whose spread on a shared host hides differences of a microsecond. Prints each
round, the median per side and the gap, and the load average.

    python benchmarks/bench_send_path.py [--topics 10000] [--count 50000] [--rounds 5] [--pause] [--only one|many]
        [--writeback]

Each round also counts the loop thread's minor page faults per send. ``--writeback`` writes the store's
file system back (``syncfs``) before every round, as the kernel's writeback does every half minute: the
kernel write-protects each page it wrote, so the round's first store into each page the other side's
round did not touch since faults again (ConsumeQueue pages, index slots, CommitLog pages).

To compare two trees, run it with each tree's ``PYTHONPATH`` (a tree extracted with ``git archive`` and
its own ``scripts/build_native.py``), interleaved. ``--pause`` waits for a line on stdin after the fill,
so a profiler (``perf record -g -p PID``) can be attached for the rounds alone.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

from benchlib import summary  # run as a script: benchmarks/ is on sys.path

from daemon.broker.broker import Broker
from daemon.broker.config import BrokerConfig
from daemon.broker.processors.send import SendProcessor
from daemon.remoting.command import RemotingCommand
from daemon.remoting.frame import decode_frame
from mqctl.admin.messaging import new_uniq_key
from mqctl.services.bench import send_frame, with_key
from store.mapped_file import sync_filesystem
from store.models import TopicConfig
from store.native import describe_build

_HOST = ("127.0.0.1", 40000)


def _config(root: str) -> BrokerConfig:
    return BrokerConfig(
        broker_name="bench-a",
        broker_ip1="127.0.0.1",
        listen_host="127.0.0.1",
        listen_port=0,
        namesrv_addr="",
        store_path_root_dir=root,
        metrics_port=0,
        grpc_enable=False,
    )


#: Sends timed in one piece: their frames are made right before it, off the clock (see :func:`_send_round`).
_CHUNK = 1000


def _send_round(processor: SendProcessor, heads: list[bytes], body: bytes, count: int) -> tuple[float, float]:
    """``count`` sends over ``heads`` in turn, each with its own UNIQ_KEY as a client's (the broker indexes
    ``topic#key``: consecutive keys of one topic hash to neighbouring slots, those of topics in turn
    anywhere); the loop thread's CPU µs and minor page faults per send. The frames are made a chunk at a
    time before its clock starts: the client's work, and a frame the broker decodes is hot in cache as a
    socket read leaves it (made inside the clock, each send read its topic's head, one of thousands and
    cold, and the many-topic side paid the client's misses)."""
    n = len(heads)
    keys = [new_uniq_key() for _ in range(count)]
    cpu_ns = 0
    faults = 0
    for start in range(0, count, _CHUNK):
        frames = [with_key(heads[i % n], keys[i]) for i in range(start, min(start + _CHUNK, count))]
        faults -= resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
        started = time.thread_time_ns()
        for frame in frames:
            decoded = decode_frame(frame, 0)
            assert decoded is not None
            request = decoded[0]
            request.body = body
            answer = processor.send_from(_HOST, request)
            assert isinstance(answer, RemotingCommand) and answer.code == 0, answer
        cpu_ns += time.thread_time_ns() - started
        faults += resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    return cpu_ns / count / 1000, faults / count


@contextlib.asynccontextmanager
async def filled(
    topics: int, count: int
) -> AsyncIterator[tuple[SendProcessor, list[bytes], list[bytes], bytes]]:
    """A started broker on a temporary store whose ``topics`` one-queue topics were each sent a message and
    then ``count`` sends more round-robin (and ``count`` to one topic of its own): its send processor, the
    frame heads of the one topic and of the many, and the body every send carries."""
    with tempfile.TemporaryDirectory(prefix="bench-send-path-") as root:
        broker = Broker(_config(root))
        await broker.start()
        try:
            names = [f"BenchPath{i:05d}" for i in range(topics)]
            for name in ["BenchPathOne", *names]:
                broker.topics.put(TopicConfig(name, 1, 1), persist=False)
            processor = SendProcessor(broker)
            body = os.urandom(1024)
            one = [send_frame("BenchPathOne", 0, b"")]
            many = [send_frame(name, 0, b"") for name in names]
            _send_round(processor, many, body, topics)  # each queue's file made
            _send_round(processor, one, body, count)
            _send_round(processor, many, body, count)
            gc.freeze()  # what the broker's LoopWatch does with the tables it grew
            yield processor, one, many, body
        finally:
            await broker.stop()


async def bench(topics: int, count: int, rounds: int, pause: bool, only: str | None, writeback: bool) -> None:
    async with filled(topics, count) as (processor, one, many, body):
        store_dir = processor.broker.store.config.store_path_root_dir
        if pause:
            print(f"pid {os.getpid()}: filled; press enter", flush=True)
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        load = os.getloadavg()[0]
        sides: dict[str, list[tuple[float, float]]] = {"one": [], "many": []}
        for r in range(rounds):
            order = [("one", one), ("many", many)] if r % 2 == 0 else [("many", many), ("one", one)]
            for side, heads in order:
                if only is not None and side != only:
                    continue
                if writeback:
                    sync_filesystem(store_dir)
                sides[side].append(_send_round(processor, heads, body, count))
            print(
                f"round {r + 1}: "
                + ", ".join(
                    f"{side} {took[-1][0]:.2f} µs, {took[-1][1]:.3f} faults"
                    for side, took in sides.items()
                    if took
                )
            )
        one_median, many_median = (
            statistics.median(us for us, _ in sides[s]) if sides[s] else 0.0 for s in ("one", "many")
        )
        one_faults, many_faults = (
            statistics.median(f for _, f in sides[s]) if sides[s] else 0.0 for s in ("one", "many")
        )
        root_dir = Path(sys.modules["store"].__file__ or ".").parent.parent
        print(f"load at the rounds' start {load:.1f}; {describe_build()}; from {root_dir}")
        summary(
            __file__,
            f"gap {many_median - one_median:.2f} µs a send",
            f"one topic {one_median:.2f} µs, {topics} topics {many_median:.2f} µs, loop-thread CPU; faults a send "
            f"{one_faults:.3f} / {many_faults:.3f}{' after a writeback' if writeback else ''}",
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, default=10_000)
    parser.add_argument("--count", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--pause", action="store_true", help="wait for enter after the fill (to attach perf)")
    parser.add_argument(
        "--only", choices=("one", "many"), help="time one side's rounds alone (for a profile)"
    )
    parser.add_argument(
        "--writeback", action="store_true", help="write the store's file system back before every round"
    )
    args = parser.parse_args()
    asyncio.run(bench(args.topics, args.count, args.rounds, args.pause, args.only, args.writeback))


if __name__ == "__main__":
    main()
