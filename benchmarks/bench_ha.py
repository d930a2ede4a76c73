"""Replication cost and speed: produce throughput with an ASYNC_MASTER/SYNC_MASTER + 1 slave against the same
run without a slave, the slave's lag under that load, and how fast an empty slave catches up.

Every broker is a `mqctl broker start` subprocess on a temporary store (ports free on 127.0.0.1), so the
load generator shares no event loop with them. The load is `bench_broker_produce`'s: PRODUCERS synchronous
senders of 1 KiB bodies for DURATION s. Lag is sampled every 20 ms from both brokers' runtime info
(master CommitLog end minus the slave's) and shown in bytes and as time at the measured produce rate.
Catch-up: the master alone takes CATCHUP_MB of messages, then an empty slave starts (it begins at the
master's last file, so the master's files are 1 GiB) and the time until its end equals the master's counts.

Usage: python benchmarks/bench_ha.py [DURATION] [PRODUCERS] [CATCHUP_MB] [--catch-up-only]
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

from bench_broker_produce import (  # run as a script: benchmarks/ is on sys.path
    BODY,
    bench,
    free_port,
    start_broker,
    wait_ready,
)
from benchlib import summary

from daemon.remoting.bodies import KVTable
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.loop import run
from mqctl.services.bench import Run, send_frame, sender, split_frame

PIDS: dict[str, int] = {}  # broker address -> process id, for the CPU time it used


def cpu_seconds(addr: str) -> float:
    """User + system CPU time the broker process at ``addr`` has used so far (Linux /proc)."""
    with open(f"/proc/{PIDS[addr]}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def namesrv(data: str) -> Iterator[str]:
    """A NameServer process; yields its address. Master and slave register with it: a master admits an
    HA connection only from a host its NameServers list as a slave of its own broker group."""
    addr = f"127.0.0.1:{free_port()}"
    argv = [sys.executable, "-m", "mqctl", "namesrv", "start", "--data", data, "--listen", addr]
    proc = subprocess.Popen(argv, stderr=subprocess.DEVNULL)
    try:
        yield addr
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)


@contextmanager
def broker(store: str, port: int, **settings: str) -> Iterator[str]:
    """A broker process with ``settings`` as MQCTL_* variables; yields its address once it answers."""
    proc = start_broker(store, port, **settings)
    addr = f"127.0.0.1:{port}"
    PIDS[addr] = proc.pid
    try:
        run(wait_ready(addr, time.perf_counter()))
        yield addr
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)


async def max_offset(client: RemotingClient, addr: str) -> int:
    r = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), 2.0)
    return int(KVTable.loads(r.body).table["commitLogMaxOffset"])


async def produce_with_lag(
    master: str, slave: str | None, duration: float, producers: int
) -> tuple[float, list[int]]:
    lags: list[int] = []
    done = asyncio.Event()

    async def sample() -> None:
        async with RemotingClient() as client:
            while not done.is_set():
                m = await max_offset(client, master)
                if slave is not None:
                    lags.append(max(0, m - await max_offset(client, slave)))
                await asyncio.sleep(0.02)

    sampler = asyncio.create_task(sample())
    result = await bench(master, duration, producers)
    done.set()
    await sampler
    return result.tps, lags


def pct(values: list[int], p: float) -> int:
    if not values:
        return 0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))]


def scenario(tmp: str, role: str | None, duration: float, producers: int) -> tuple[float, list[int]]:
    """Produce against a master (``role``), with one slave unless ``role`` is None."""
    port, ha = free_port(), free_port()
    name = role or "alone"
    with (
        namesrv(f"{tmp}/{name}-ns") as ns,
        broker(
            f"{tmp}/{name}-m",
            port,
            broker_role=role or "ASYNC_MASTER",
            ha_listen_port=str(ha),
            namesrv_addr=ns,
        ) as master,
    ):
        if role is None:
            return run(produce_with_lag(master, None, duration, producers))
        with broker(f"{tmp}/{name}-s", free_port(), **slave_of(ha, ns)) as slave:
            run(wait_connected(master, slave))
            return run(produce_with_lag(master, slave, duration, producers))


def slave_of(ha: int, ns: str) -> dict[str, str]:
    """A slave's settings: its master's HA port, and the NameServer both register with."""
    return {
        "broker_role": "SLAVE",
        "broker_id": "1",
        "ha_master_address": f"127.0.0.1:{ha}",
        "ha_listen_port": str(free_port()),
        "namesrv_addr": ns,
    }


async def wait_connected(master: str, slave: str, timeout: float = 30.0) -> None:
    """Until the master counts the slave (it registered and the HA gate admitted it), else an error: a
    measurement with no slave connected would measure nothing."""
    async with RemotingClient() as client:
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            r = await client.invoke(master, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), 2.0)
            if int(KVTable.loads(r.body).table.get("haSlaveCount", "0")) > 0:
                return
            await asyncio.sleep(0.1)
    raise SystemExit(f"bench_ha: slave {slave} never connected to master {master}")


async def fill(master: str, megabytes: int, producers: int) -> None:
    slot = (master, *split_frame(send_frame("BenchTopic", 0, BODY), BODY), None)
    per_sender = megabytes * 1024 * 1024 // len(BODY) // producers + 1
    run = Run()
    await asyncio.gather(*(sender((slot for _ in range(per_sender)), run) for _ in range(producers)))


async def wait_caught_up(master: str, slave: str) -> tuple[float, float, float]:
    """Seconds until the slave's CommitLog ends where the master's does, and the CPU seconds master
    and slave used meanwhile (on a loaded machine the wall time mostly says how busy it is)."""
    async with RemotingClient() as client:
        target = await max_offset(client, master)
        start = time.perf_counter()
        cpu = cpu_seconds(master), cpu_seconds(slave)
        while await max_offset(client, slave) < target:
            await asyncio.sleep(0.02)  # runtime info is ~60 keys: polled faster, it costs the slave CPU
        seconds = time.perf_counter() - start
        return seconds, cpu_seconds(master) - cpu[0], cpu_seconds(slave) - cpu[1]


def catch_up(tmp: str, megabytes: int, producers: int) -> tuple[int, tuple[float, float, float]]:
    port, ha = free_port(), free_port()
    with (
        namesrv(f"{tmp}/cu-ns") as ns,
        broker(f"{tmp}/cu-m", port, ha_listen_port=str(ha), namesrv_addr=ns) as master,
    ):
        run(fill(master, megabytes, producers))
        size = run(_offset(master))
        with broker(f"{tmp}/cu-s", free_port(), **slave_of(ha, ns)) as slave:
            return size, run(wait_caught_up(master, slave))


async def _offset(addr: str) -> int:
    async with RemotingClient() as client:
        return await max_offset(client, addr)


def main() -> None:
    args = [a for a in sys.argv[1:] if a != "--catch-up-only"]
    duration = float(args[0]) if len(args) > 0 else 5.0
    producers = int(args[1]) if len(args) > 1 else 16
    megabytes = int(args[2]) if len(args) > 2 else 64
    with tempfile.TemporaryDirectory() as tmp:
        if len(args) < len(sys.argv) - 1:
            catch_up_report(tmp, megabytes, producers)
            return
        alone, _ = scenario(tmp, None, duration, producers)
        print(f"no slave:            {alone:,.0f} sends/s ({producers} producers, 1 KiB, {duration:g} s)")
        ratios = {}
        for role in ("ASYNC_MASTER", "SYNC_MASTER"):
            tps, lags = scenario(tmp, role, duration, producers)
            ratios[role] = tps / alone
            rate = tps * (len(BODY) + 200)  # bytes/s, ~200 bytes of record header and properties
            p99 = pct(lags, 0.99)
            print(
                f"{role} + 1 slave: {tps:,.0f} sends/s = {tps / alone:.0%} of no slave; lag p50 {pct(lags, 0.5):,} B, "
                f"p99 {p99:,} B (~{p99 / rate * 1000 if rate else 0:.1f} ms at that rate), {len(lags)} samples"
            )
        catch_up_rate = catch_up_report(tmp, megabytes, producers)
    summary(
        __file__,
        f"SYNC_MASTER {ratios['SYNC_MASTER']:.2f} of no slave",
        f"ASYNC_MASTER {ratios['ASYNC_MASTER']:.2f}; {alone:,.0f} sends/s alone; catch-up {catch_up_rate:,.0f} MiB/s",
    )


def catch_up_report(tmp: str, megabytes: int, producers: int) -> float:
    """Print the catch-up of an empty slave; its rate in MiB/s."""
    size, (seconds, master_cpu, slave_cpu) = catch_up(tmp, megabytes, producers)
    print(
        f"catch-up of an empty slave: {size / 2**20:,.0f} MiB in {seconds:.2f} s = {size / 2**20 / seconds:,.0f} MiB/s"
        f" ({size / 1e6 / seconds:,.0f} MB/s; load average {os.getloadavg()[0]:.2f}); CPU s per GiB: master"
        f" {master_cpu / size * 2**30:.2f}, slave {slave_cpu / size * 2**30:.2f} (rate at one core each:"
        f" {size / 1e6 / max(master_cpu, slave_cpu, 1e-9):,.0f} MB/s)"
    )
    return size / 2**20 / seconds


if __name__ == "__main__":
    main()
