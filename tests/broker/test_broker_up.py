"""`mqctl up`: NameServer + broker in one foreground process; the broker registers; Ctrl-C stops both."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from daemon.grpc import missing
from daemon.remoting.bodies import TopicRouteData
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from store import native
from tests.listeners import listening
from tests.support.paths import ROOT
from tests.support.ports import free_block, free_port
from tests.support.up import mqctl_up

#: Whether brokers here open a gRPC port (the grpc extra installed).
GRPC = int(missing() is None)


@pytest.mark.slow
async def test_up_serves_registered_broker_and_stops_on_sigint(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    ports = [free_port() for _ in range(3)]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mqctl",
            "up",
            "--data",
            str(tmp_path / "data"),
            "--namesrv-port",
            str(ports[0]),
            "--broker-port",
            str(ports[1]),
            "--metrics-port",
            str(ports[2]),
        ],
        cwd=ROOT,
        env=cli_env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        said = [""]
        while "ready:" not in said[-1]:
            said.append(await asyncio.to_thread(proc.stderr.readline))
            assert said[-1], "mqctl up exited before it was ready"
        # the broker's start-up line says which build it runs (store/native.py), as this process finds it
        assert [line for line in said if "serving at" in line and native.describe_build() in line], said
        async with RemotingClient() as client:
            request = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"})
            response = await client.invoke(f"127.0.0.1:{ports[0]}", request)
        assert response.code == ResponseCode.SUCCESS
        route = TopicRouteData.loads(response.body)
        assert route.broker_datas[0].broker_addrs[0] == f"127.0.0.1:{ports[1]}"
    finally:
        os.kill(proc.pid, signal.SIGINT)
        code = await asyncio.to_thread(proc.wait, 30)
    assert code == 0
    assert not (tmp_path / "data" / "store" / "abort").exists()  # clean shutdown


@pytest.mark.slow
async def test_up_listens_on_loopback_only(tmp_path: Path, cli_env: dict[str, str]) -> None:
    ports = ["--namesrv-port", "0", "--broker-port", "0", "--metrics-port", "0"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "mqctl", "up", "--data", str(tmp_path / "data"), *ports],
        cwd=ROOT,
        env=cli_env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        line = ""
        while "ready:" not in line:
            line = await asyncio.to_thread(proc.stderr.readline)
            assert line, "mqctl up exited before it was ready"
        sockets = listening(proc.pid)
    finally:
        os.kill(proc.pid, signal.SIGINT)
        code = await asyncio.to_thread(proc.wait, 30)
    assert code == 0
    # NameServer, broker, its HA port, metrics, and gRPC where the extra is installed
    assert len(sockets) == 4 + GRPC
    # (gRPC's socket is IPv6 bound to the IPv4-mapped loopback: 127.0.0.1 only as well)
    assert {addr.removeprefix("::ffff:") for addr, _ in sockets} == {"127.0.0.1"}


@pytest.mark.slow
async def test_broker_and_namesrv_status_find_what_up_started(cli_env: dict[str, str]) -> None:
    """One default data dir: 'broker status|stop' and 'namesrv status' without flags find 'mqctl up'."""
    ports = ["--namesrv-port", str(free_port()), "--broker-port", str(free_port()), "--no-metrics"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "mqctl", "up", *ports],
        cwd=ROOT,
        env=cli_env,
        stderr=subprocess.PIPE,
        text=True,
    )

    def mqctl(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "mqctl", *args],
            cwd=ROOT,
            env=cli_env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    try:
        assert proc.stderr is not None
        line = ""
        while "ready:" not in line:
            line = await asyncio.to_thread(proc.stderr.readline)
            assert line, "mqctl up exited before it was ready"
        drain = asyncio.create_task(asyncio.to_thread(proc.stderr.read))  # its log must not fill the pipe
        broker = await asyncio.to_thread(mqctl, "broker", "status", "-o", "json")
        assert broker.returncode == 0, broker.stderr
        assert (
            json.loads(broker.stdout)["state"] == "running" and json.loads(broker.stdout)["pid"] == proc.pid
        )
        # the port 'up --broker-port' gave it, not broker.conf's default 10911
        assert json.loads(broker.stdout)["address"] == f"127.0.0.1:{ports[3]}"
        assert json.loads(broker.stdout)["reachable"] is True
        namesrv = await asyncio.to_thread(mqctl, "namesrv", "status", "-o", "json")
        assert namesrv.returncode == 0, namesrv.stderr
        assert json.loads(namesrv.stdout)["address"] == f"127.0.0.1:{ports[1]}"
        reaped = asyncio.create_task(asyncio.to_thread(proc.wait, 60))  # else our child lingers as a zombie
        stopped = await asyncio.to_thread(mqctl, "broker", "stop")
        assert stopped.returncode == 0, stopped.stderr
        code = await reaped
        await drain
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGINT)
            proc.wait(30)
    assert code == 0
    assert (await asyncio.to_thread(mqctl, "broker", "status")).returncode == 3


@pytest.mark.slow
async def test_up_runs_broker_groups_with_slaves_on_loopback(tmp_path: Path, cli_env: dict[str, str]) -> None:
    """`--brokers 2 --slaves 1`: broker-a and broker-b, each a master and a slave, ports in one sequence."""
    # 4 brokers, each with its VIP port two below and its HA port one above
    ns_port, broker_port = free_port(), free_block(16) + 2
    args = ["--brokers", "2", "--slaves", "1", "--broker-port", str(broker_port), "--metrics-port", "0"]
    args += ["--grpc-port", "0"]
    async with mqctl_up(tmp_path / "data", cli_env, ns_port, *args) as up:
        addr = [f"127.0.0.1:{broker_port + 4 * k}" for k in range(4)]
        assert f"slave {addr[1]}, broker-b {addr[2]}, slave {addr[3]}" in up.ready
        listed = await asyncio.to_thread(up.mq, "cluster", "list")
        assert sorted((r["broker_name"], r["broker_id"], r["addr"], r["role"]) for r in listed) == [
            ("broker-a", 0, addr[0], "MASTER"),
            ("broker-a", 1, addr[1], "SLAVE"),
            ("broker-b", 0, addr[2], "MASTER"),
            ("broker-b", 1, addr[3], "SLAVE"),
        ]
        await asyncio.to_thread(up.mq, "topic", "create", "-t", "Spread", "-c", "DefaultCluster", "-w", "4")
        route = await asyncio.to_thread(up.mq, "topic", "route", "-t", "Spread")
        assert [(r["broker_name"], r["write_queues"], r["master"], r["slaves"]) for r in route] == [
            ("broker-a", 4, addr[0], [addr[1]]),
            ("broker-b", 4, addr[2], [addr[3]]),
        ]
        sockets = listening(up.proc.pid)
    assert up.code == 0
    # NameServer; each of 4 brokers, its VIP port, its HA port and its metrics; each master's gRPC port
    assert len(sockets) == 17 + 2 * GRPC
    assert {a.removeprefix("::ffff:") for a, _ in sockets} == {"127.0.0.1"}
    data = tmp_path / "data"
    for store in ("store", "store-slave1", "store-broker-b", "store-broker-b-slave1"):  # one store each
        assert (data / store / "checkpoint").is_file(), store
    for master in ("store", "store-broker-b"):
        assert (
            "Spread" in json.loads((data / master / "config" / "topics.json").read_text())["topicConfigTable"]
        )
