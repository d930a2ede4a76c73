"""`mqctl up`: NameServer + broker in one foreground process; the broker registers; Ctrl-C stops both."""

from __future__ import annotations

import asyncio
import functools
import json
import re
import stat
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
from tests.support.waiting import wait_until

#: Whether brokers here open a gRPC port (the grpc extra installed).
GRPC = int(missing() is None)


@pytest.mark.slow
async def test_up_serves_registered_broker_and_stops_on_sigint(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    ports = [free_port() for _ in range(3)]
    args = ["--broker-port", str(ports[1]), "--metrics-port", str(ports[2])]
    async with mqctl_up(tmp_path / "data", cli_env, ports[0], *args) as up:
        # the broker's start-up line says which build it runs (store/native.py), as this process finds it
        said = [line for line in up.said if "serving at" in line and native.describe_build() in line]
        assert said, up.said
        async with RemotingClient() as client:
            request = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"})
            response = await client.invoke(f"127.0.0.1:{ports[0]}", request)
        assert response.code == ResponseCode.SUCCESS
        route = TopicRouteData.loads(response.body)
        assert route.broker_datas[0].broker_addrs[0] == f"127.0.0.1:{ports[1]}"
    assert up.code == 0
    assert not (tmp_path / "data" / "store" / "abort").exists()  # clean shutdown


@pytest.mark.slow
async def test_up_listens_on_loopback_only(tmp_path: Path, cli_env: dict[str, str]) -> None:
    async with mqctl_up(tmp_path / "data", cli_env, 0, "--broker-port", "0", "--metrics-port", "0") as up:
        sockets = listening(up.proc.pid)
    assert up.code == 0
    # the line to paste names the port the NameServer bound (--namesrv-port 0 printed none: no other line
    # than the ready line's said where the cluster is)
    [ns] = re.findall(r"NameServer (127\.0\.0\.1:\d+),", up.ready)
    assert ns in {f"{addr}:{port}" for addr, port in sockets}
    assert f"connect with: mqctl context add local -n {ns} --use --force" in up.after.splitlines(), up.after
    # NameServer, broker, its HA port, metrics, and gRPC where the extra is installed
    assert len(sockets) == 4 + GRPC
    # (gRPC's socket is IPv6 bound to the IPv4-mapped loopback: 127.0.0.1 only as well)
    assert {addr.removeprefix("::ffff:") for addr, _ in sockets} == {"127.0.0.1"}


def run_mqctl(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``mqctl ARGS`` in a subprocess with ``env``, as given (its exit code and output to check)."""
    return subprocess.run(
        [sys.executable, "-m", "mqctl", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.slow
async def test_broker_and_namesrv_status_find_what_up_started(cli_env: dict[str, str]) -> None:
    """One default data dir: 'broker status|stop' and 'namesrv status' without flags find 'mqctl up'."""
    ns_port, broker_port = free_port(), free_port()

    mqctl = functools.partial(run_mqctl, cli_env)

    async with mqctl_up(None, cli_env, ns_port, "--broker-port", str(broker_port), "--no-metrics") as up:
        broker = await asyncio.to_thread(mqctl, "broker", "status", "-o", "json")
        assert broker.returncode == 0, broker.stderr
        assert (
            json.loads(broker.stdout)["state"] == "running"
            and json.loads(broker.stdout)["pid"] == up.proc.pid
        )
        # the port 'up --broker-port' gave it, not broker.conf's default 10911
        assert json.loads(broker.stdout)["address"] == f"127.0.0.1:{broker_port}"
        assert json.loads(broker.stdout)["reachable"] is True
        namesrv = await asyncio.to_thread(mqctl, "namesrv", "status", "-o", "json")
        assert namesrv.returncode == 0, namesrv.stderr
        assert json.loads(namesrv.stdout)["address"] == f"127.0.0.1:{ns_port}"
        # the pid is up's, which hosts the NameServer too: 'broker stop' stopped it all and said
        # "stopped broker"; now it refuses, naming what would stop and how
        for stop in (("broker", "stop"), ("namesrv", "stop")):
            refused = await asyncio.to_thread(mqctl, *stop)
            assert refused.returncode == 4, refused.stderr
            assert f"NameServer 127.0.0.1:{ns_port}" in refused.stderr and "--whole-up" in refused.stderr
            assert f"kill -INT {up.proc.pid}" in refused.stderr
        assert up.proc.returncode is None
        stopped = await asyncio.to_thread(mqctl, "broker", "stop", "--whole-up")
        assert stopped.returncode == 0, stopped.stderr
        assert f"stopped mqctl up (pid {up.proc.pid}): NameServer" in stopped.stderr
    assert up.code == 0  # 'broker stop --whole-up' ended the whole of 'mqctl up'
    assert (await asyncio.to_thread(mqctl, "broker", "status")).returncode == 3


@pytest.mark.slow
async def test_up_is_refused_by_its_pid_however_its_store_is_named(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """The guard looked for up.hosts beside the path given: a link to up's store, or a config naming up's
    slave port with another store, stopped the whole up (and 'broker' in up's --broker-port argument made
    the port's process pass for a broker)."""
    ns_port, broker_port = free_port(), free_port()
    mqctl = functools.partial(run_mqctl, cli_env)
    data = tmp_path / "data"
    async with mqctl_up(data, cli_env, ns_port, "--broker-port", str(broker_port), "--no-metrics") as up:
        (tmp_path / "alias").mkdir()
        (tmp_path / "alias" / "store2").symlink_to(data / "store")
        by_port = tmp_path / "byport.conf"
        by_port.write_text(f"listenPort={broker_port}\nstorePathRootDir={tmp_path / 'other'}\n")
        for stop in (("--store", str(tmp_path / "alias" / "store2")), ("-c", str(by_port))):
            refused = await asyncio.to_thread(mqctl, "broker", "stop", *stop)
            assert refused.returncode == 4, (stop, refused.stderr)
            assert f"NameServer 127.0.0.1:{ns_port}" in refused.stderr and "--whole-up" in refused.stderr
        assert up.proc.returncode is None
        stopped = await asyncio.to_thread(mqctl, "broker", "stop", "-c", str(by_port), "--whole-up")
        assert stopped.returncode == 0, stopped.stderr
    assert up.code == 0


@pytest.mark.slow
async def test_up_acl_starts_an_acl_cluster_and_says_how_to_sign(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """`--acl`: ACL on, one admin account whose generated secret is alone in an owner-only file under the
    data dir; the ready line names the account and the file, and the `context add` line it prints makes
    the next commands sign. A second run keeps the account."""
    data, ns_port = tmp_path / "data", free_port()
    secret, accounts = data / "acl" / "admin.secret", data / "acl" / "plain_acl.yml"

    mqctl = functools.partial(run_mqctl, cli_env)

    ns = f"127.0.0.1:{ns_port}"
    async with mqctl_up(data, cli_env, ns_port, "--broker-port", "0", "--no-metrics", "--acl") as up:
        assert f"ACL on: access key mqctl-admin, secret in {secret}" in up.ready
        assert {stat.S_IMODE(p.stat().st_mode) for p in (secret, accounts)} == {0o600}
        refused = await asyncio.to_thread(mqctl, "topic", "create", "-t", "AclT", "-n", ns)
        assert refused.returncode == 9, refused.stderr
        sign = ["--access-key", "mqctl-admin", "--secret-key-file", str(secret)]
        added = await asyncio.to_thread(mqctl, "context", "add", "local-acl", "-n", ns, *sign, "--use")
        assert added.returncode == 0, added.stderr
        created = await asyncio.to_thread(mqctl, "topic", "create", "-t", "AclT")
        assert created.returncode == 0, created.stderr
    assert up.code == 0
    hint = f"ACL on; connect with: mqctl context add local-acl -n {ns} {' '.join(sign)} --use --force"
    assert hint in up.after, up.after
    kept = secret.read_text()
    async with mqctl_up(data, cli_env, ns_port, "--broker-port", "0", "--no-metrics", "--acl"):
        assert secret.read_text() == kept
        listed = await asyncio.to_thread(mqctl, "topic", "list", "-o", "json")
        assert {"topic": "AclT"} in json.loads(listed.stdout), listed.stderr


@pytest.mark.slow
async def test_up_acl_runs_slaves_that_sign_their_requests(tmp_path: Path, cli_env: dict[str, str]) -> None:
    """`--acl --slaves 1` was refused: a slave signs nothing, so the ACL master refused its metadata sync
    and its tail check. The slave signs them with the admin account now: a topic created on the master
    reaches the slave's topic table, and nothing is refused or left unchecked."""
    data, ns_port = tmp_path / "data", free_port()
    secret = data / "acl" / "admin.secret"
    args = ("--broker-port", "0", "--no-metrics", "--acl", "--slaves", "1")
    async with mqctl_up(data, cli_env, ns_port, *args) as up:
        assert "slave 127.0.0.1:" in up.ready and "ACL on" in up.ready
        up.env.update(MQCTL_ACCESS_KEY="mqctl-admin", MQCTL_SECRET_KEY_FILE=str(secret))
        await asyncio.to_thread(up.mq, "topic", "create", "-t", "AclSlaveT")
        slave_topics = data / "store-slave1" / "config" / "topics.json"

        async def synced() -> bool:
            return slave_topics.exists() and "AclSlaveT" in slave_topics.read_text()

        await wait_until(synced, timeout=60)  # (a slave syncs every 10 s)
    assert up.code == 0
    log = "".join(up.said) + up.after
    assert "slave metadata sync" not in log and "not checked against its master" not in log, log
    assert "synced TopicConfigFile from master" in log


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
        # every broker's metrics URL, not the first one's alone
        for a, who in zip(addr, ("broker-a", "slave", "broker-b", "slave"), strict=True):
            assert re.search(rf"http://127\.0\.0\.1:\d+/metrics \({who} {a}\)", up.ready), up.ready
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
