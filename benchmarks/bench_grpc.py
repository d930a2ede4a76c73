"""The gRPC front as the official 5.x Python client sees it, next to ali-ons on remoting in the same run.

Starts `mqctl namesrv start` and `mqctl broker start` (gRPC on a free port) as subprocesses, creates the
topics (8 queues), then for each of --runs:
- grpc: one official Python Producer (PyPI rocketmq-python-client) shared by N threads, each sending a
  1 KiB body synchronously in turn (RocketMQ's benchmark Producer with N threads), SECONDS timed;
- remoting: the same with ali-ons (benchmarks/tools/ons_bench.js, N async loops on one Producer);
- drain: COUNT 1 KiB messages pre-loaded, received and acked by one official SimpleConsumer (batches of
  32, each batch's acks async), timed from the first receive to the last ack.
Each figure comes with the broker's CPU per message (its CPU seconds over the window / messages) and the
load average, since clients and broker share the cores.
Usage: python benchmarks/bench_grpc.py [--runs 1] [--threads 16] [--seconds 5] [--count 10000] [--tree DIR]
``--tree DIR`` runs the NameServer and broker of another source tree (see bench_broker_latency.py).
(needs the grpc extra, node and scripts/install-interop-clients.sh).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from pathlib import Path

from bench_ali_ons import cpu_seconds, create_topics, ons  # run as a script: benchmarks/ is on sys.path
from bench_broker_produce import ROOT, free_port, local_cluster
from benchlib import summary

from daemon.remoting.loop import run

BODY = b"x" * 1024


def grpc_sends(endpoint: str, topic: str, threads: int, seconds: float, broker_pid: int) -> dict[str, float]:
    """N threads sending through one started Producer; 1 s warm-up, then `seconds` timed."""
    from rocketmq import ClientConfiguration, Credentials, Message, Producer
    from rocketmq.v5.util.misc import Misc

    Misc._Misc__LOCAL_IP = "127.0.0.1"  # (else it asks the kernel for a route to a public address)
    producer = Producer(ClientConfiguration(endpoint, Credentials(), request_timeout=10), (topic,))
    producer.startup()
    counts = [0] * threads
    failures = [0]
    timing = threading.Event()
    stop = threading.Event()

    def loop(i: int) -> None:
        while not stop.is_set():
            message = Message()
            message.topic, message.body = topic, BODY
            try:
                producer.send(message)
            except Exception:  # counted; the run goes on
                failures[0] += 1
                continue
            if timing.is_set():
                counts[i] += 1

    workers = [threading.Thread(target=loop, args=(i,), daemon=True) for i in range(threads)]
    for w in workers:
        w.start()
    time.sleep(1.0)
    cpu, own, wall = cpu_seconds(broker_pid), time.process_time(), time.perf_counter()
    timing.set()
    time.sleep(seconds)
    timing.clear()
    elapsed = time.perf_counter() - wall
    broker, client = cpu_seconds(broker_pid) - cpu, time.process_time() - own
    stop.set()
    for w in workers:
        w.join(15)
    producer.shutdown()
    return {
        "count": sum(counts),
        "seconds": elapsed,
        "brokerCpu": broker,
        "clientCpu": client,
        "failures": failures[0],
    }


def grpc_drain(endpoint: str, topic: str, count: int, broker_pid: int) -> dict[str, float]:
    from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer

    consumer = SimpleConsumer(
        ClientConfiguration(endpoint, Credentials(), request_timeout=10),
        "GRPC_DRAIN_BENCH",
        {topic: FilterExpression("*")},
        await_duration=5,
    )
    consumer.startup()
    got = 0
    cpu, wall = cpu_seconds(broker_pid), time.perf_counter()
    idle = 0
    while got < count and idle < 3:
        batch = consumer.receive(32, 60)
        idle = 0 if batch else idle + 1
        for m in batch:
            consumer.ack_async(m)
        got += len(batch)
    elapsed = time.perf_counter() - wall
    broker = cpu_seconds(broker_pid) - cpu
    consumer.shutdown()
    return {"count": got, "seconds": elapsed, "brokerCpu": broker}


def per_message(r: dict[str, float]) -> str:
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    cpu_ms = 1000 * r["brokerCpu"] / max(1, r["count"])
    return (
        f"broker {cpu_ms:.3f} CPU ms per message ({r['brokerCpu'] / r['seconds']:.0%} of a core), load {load}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--count", type=int, default=10_000, help="messages pre-loaded and drained")
    parser.add_argument(
        "--tree", type=Path, default=ROOT, help="source tree of the daemons (default: this one)"
    )
    a = parser.parse_args()
    grpc_port = free_port()
    endpoint = f"127.0.0.1:{grpc_port}"
    best: dict[str, float] = {"grpc": 0.0, "ons": 0.0, "drain": 0.0}
    with (
        tempfile.TemporaryDirectory() as tmp,
        local_cluster(Path(tmp), env={"MQCTL_GRPC_LISTEN_PORT": str(grpc_port)}, cwd=a.tree.resolve()) as (
            ns,
            pid,
        ),
    ):
        run(
            create_topics(
                ns, ["GrpcSendBench", "OnsSendBench", "GrpcDrainBench"], {"GrpcDrainBench": a.count}
            )
        )
        for _ in range(a.runs):
            r = grpc_sends(endpoint, "GrpcSendBench", a.threads, a.seconds, pid)
            rate = r["count"] / r["seconds"]
            best["grpc"] = max(best["grpc"], rate)
            print(
                f"5.x Python Producer over gRPC, {a.threads} threads: {rate:,.0f} sends/s, {r['failures']:.0f} "
                f"failures (client {r['clientCpu'] / r['seconds']:.0%} of a core; {per_message(r)})",
                flush=True,
            )
            o = ons(pid, "produce", ns, "OnsSendBench", str(a.threads), str(a.seconds))
            o["brokerCpu"] *= o["seconds"]  # ons() gives the share of a core
            rate = o["count"] / o["seconds"]
            best["ons"] = max(best["ons"], rate)
            print(f"ali-ons over remoting, N={a.threads}: {rate:,.0f} sends/s ({per_message(o)})", flush=True)
        d = grpc_drain(endpoint, "GrpcDrainBench", a.count, pid)
        best["drain"] = d["count"] / d["seconds"]
        print(f"5.x SimpleConsumer drain: {best['drain']:,.0f} msgs/s of {d['count']:,} ({per_message(d)})")
    summary(
        __file__,
        f"5.x Python Producer {best['grpc']:,.0f} sends/s over gRPC",
        f"{a.threads} threads, 1 KiB, best of {a.runs} x {a.seconds:g} s; ali-ons on remoting "
        f"{best['ons']:,.0f} sends/s; SimpleConsumer drain {best['drain']:,.0f} msgs/s",
    )


if __name__ == "__main__":
    main()
