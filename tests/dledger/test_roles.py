"""Services that follow the election in a real DLedger group (``mqctl up --dledger 3``): timer delivery on
whichever member leads, nothing lost or delivered twice across a failover, and the gRPC front of every
member routing 5.x clients to the leader."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import IO

import pytest

from daemon.config import ALL_KEYS_FIELD, parse_properties
from daemon.remoting.bodies import TopicConfigSerializeWrapper
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from tests.broker.test_ha import pull_all
from tests.dledger.test_group import elected_master, master_of, member_pid
from tests.support.bounded import finish, read_line
from tests.support.broker import BrokerClient
from tests.support.paths import ROOT
from tests.support.pop import PopClient
from tests.support.ports import free_port
from tests.support.up import mqctl_up
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

ARGS = ("--dledger", "3", "--broker-port", "0", "--no-metrics")


def quick(cli_env: dict[str, str]) -> dict[str, str]:
    """500 ms heartbeats: an election within a few seconds of the leader's death."""
    return {**cli_env, "MQCTL_HEART_BEAT_TIME_INTERVAL_MS": "500"}


def member_addrs(data: Path) -> list[str]:
    return [
        "127.0.0.1:" + parse_properties(conf.read_text())["listenPort"]
        for conf in sorted(data.glob("store-broker-a-n*/broker.conf"))
    ]


async def topic_everywhere(client: RemotingClient, data: Path, topic: str) -> None:
    """Wait until every member holds `topic` (followers take the leader's topics every 10 s), so the
    member elected next serves it."""

    async def held() -> bool:
        for addr in member_addrs(data):
            r = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG))
            if topic not in TopicConfigSerializeWrapper.loads(r.body).topic_config_table:
                return False
        return True

    await wait_until(held, 60)


async def new_master(client: RemotingClient, ns: str, old: str) -> str:
    async def elected() -> bool:
        return await master_of(client, ns) not in (None, old)

    await wait_until(elected, 60)
    master = await master_of(client, ns)
    assert master is not None
    return master


@contextlib.asynccontextmanager
async def raft_group(
    tmp_path: Path, cli_env: dict[str, str]
) -> AsyncIterator[tuple[Path, str, RemotingClient]]:
    """`up --dledger 3` with quick heartbeats: its data directory, NameServer address and a client."""
    ns_port = free_port()
    data = tmp_path / "data"
    async with mqctl_up(data, quick(cli_env), ns_port, *ARGS):
        client = RemotingClient()
        try:
            yield data, f"127.0.0.1:{ns_port}", client
        finally:
            await client.close()


async def test_timers_are_delivered_once_by_the_leader_across_a_failover(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """Three timers sent to the leader: one delivered before its SIGKILL (not again after), one falling due
    in the failover gap and one due well after it: each is in its topic exactly once, from the new leader."""
    async with raft_group(tmp_path, cli_env) as (data, ns, client):
        old = await elected_master(client, ns)
        on_old = BrokerClient(old, client)
        await on_old.create_topic("Tm", 1)
        await topic_everywhere(client, data, "Tm")
        sent = {}
        for body, delay in ((b"before", 200), (b"gap", 1500), (b"after", 9000)):
            r = await on_old.send(
                "Tm",
                body,
                queue_id=0,
                props={"TIMER_DELAY_MS": str(delay), "UNIQ_KEY": f"{body.decode()}-key"},
            )
            assert r.code == ResponseCode.SUCCESS, r.remark
            sent[body] = time.time() + delay / 1000

        async def delivered_before() -> bool:
            return await pull_all(on_old, "Tm", 0) == [b"before"]

        await wait_until(delivered_before, 10)
        await asyncio.sleep(0.3)  # the delivered copy reaches the followers' logs and index
        os.kill(member_pid(data, old), signal.SIGKILL)
        on_new = BrokerClient(await new_master(client, ns, old), client)
        assert time.time() > sent[b"gap"]  # it fell due while no member led

        async def all_delivered() -> bool:
            return len(await pull_all(on_new, "Tm", 0)) >= 3

        await wait_until(all_delivered, 30)
        await asyncio.sleep(1.5)  # time for a second copy, were one to come
        assert sorted(await pull_all(on_new, "Tm", 0)) == [b"after", b"before", b"gap"]
        assert time.time() >= sent[b"after"]
        # POP runs on the new leader too (its revive service with it)
        popped = await PopClient(on_new, "PopAfterFailover").pop("Tm", queue_id=0, invisible_ms=30_000)
        assert sorted(p.body for p in popped) == [b"after", b"before", b"gap"]


async def grpc_port(client: RemotingClient, addr: str) -> int:
    request = RemotingCommand.request(RequestCode.GET_BROKER_CONFIG, {ALL_KEYS_FIELD: "true"})
    response = await client.invoke(addr, request)
    return int(parse_properties(response.body.decode())["grpcListenPort"])


async def test_a_5x_producer_keeps_sending_after_the_leader_is_killed(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """The official 5.x Producer, given a follower's gRPC front, finds the leader through QueryRoute; after
    the leader's SIGKILL it sends through the new leader (at its next route refresh); every receipt is
    read back from the new leader."""
    from tests.support.grpc5 import ClientConfiguration, Credentials, Producer, message, pb, spb

    def ask_follower(port: int) -> tuple[int, int]:
        """QueryRoute and a raw SendMessage on a follower's front: the route's port, the send's status."""
        import grpc

        from tests.support.grpc5 import MessagingServiceStub

        meta = (("x-mq-client-id", "roles@1"), ("x-mq-language", "PYTHON"), ("x-mq-client-version", "5.1.2"))
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = MessagingServiceStub(channel)
            topic = pb.Resource(name="G5")
            route = stub.QueryRoute(spb.QueryRouteRequest(topic=topic), metadata=meta, timeout=10)
            props = pb.SystemProperties(
                message_id="0123456789ABCDEF0123456789ABCDEF01", message_type=pb.NORMAL
            )
            one = pb.Message(topic=topic, body=b"to a follower", system_properties=props)
            sent = stub.SendMessage(spb.SendMessageRequest(messages=[one]), metadata=meta, timeout=10)
        print("follower's answer to a send:", pb.Code.Name(sent.status.code), sent.status.message)
        return route.message_queues[0].broker.endpoints.addresses[0].port, sent.status.code

    async with raft_group(tmp_path, cli_env) as (data, ns, client):
        old = await elected_master(client, ns)
        await BrokerClient(old, client).create_topic("G5", 2)
        await topic_everywhere(client, data, "G5")
        follower = next(a for a in member_addrs(data) if a != old)
        port = await grpc_port(client, follower)
        assert port > 0
        route, refused = await asyncio.to_thread(ask_follower, port)
        assert route == await grpc_port(client, old)  # the follower's front routes to the leader's
        assert (
            refused == pb.INTERNAL_SERVER_ERROR
        )  # and refuses a send as a slave does (SERVICE_NOT_AVAILABLE)
        config = ClientConfiguration(f"127.0.0.1:{port}", Credentials("", ""), request_timeout=3)
        producer = Producer(config, ("G5",))
        await asyncio.to_thread(producer.startup)
        receipts: dict[str, bytes] = {}

        def send(body: bytes) -> bool:
            try:
                receipts[producer.send(message("G5", body)).message_id] = body
                return True
            except Exception:
                return False

        try:
            for i in range(10):
                assert await asyncio.to_thread(send, f"before-{i}".encode())
            os.kill(member_pid(data, old), signal.SIGKILL)
            killed = time.monotonic()
            after = 0
            i = 0
            while after < 10:
                assert time.monotonic() - killed < 90, f"{after} sends acknowledged since the kill"
                ok = await asyncio.to_thread(send, f"after-{i}".encode())
                if ok and not after:
                    print(f"5.x Producer: first SEND_OK {time.monotonic() - killed:.1f} s after the SIGKILL")
                after += ok
                i += 1
                if not after:
                    await asyncio.sleep(0.2)
        finally:
            await asyncio.to_thread(producer.shutdown)
        on_new = BrokerClient(await new_master(client, ns, old), client)
        held = [b for q in range(2) for b in await pull_all(on_new, "G5", q)]
        assert sorted(held) == sorted(receipts.values())


def member_id(data: Path, addr: str) -> str:
    """The DLedger id (n0, n1, ...) of the member serving at ``addr``."""
    for conf in data.glob("store-broker-a-n*/broker.conf"):
        keys = parse_properties(conf.read_text())
        if addr.endswith(f":{keys['listenPort']}"):
            return keys["dLegerSelfId"]
    raise AssertionError(f"no member at {addr}")


def runner(env: dict[str, str]) -> Callable[..., subprocess.CompletedProcess[str]]:
    """``mqctl ARGS`` in a subprocess with ``env``, run to its end."""

    def mq(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "mqctl", *args]
        return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)

    return mq


async def hand_over(mq: Callable[..., subprocess.CompletedProcess[str]], data: Path, to: str) -> None:
    """``broker ha transfer --to`` the member serving at ``to``, through ``mq`` (an mqctl runner); asked
    again while an election racing the handover (a loaded host) refuses it, or while the member has not
    copied the leader's topics and groups within the transfer's wait (its copy every 10 s, late on a
    loaded host)."""
    for _ in range(5):
        done = await asyncio.to_thread(mq, "broker", "ha", "transfer", "--to", member_id(data, to))
        if done.returncode == 0:
            return
        refused = "leadership transfer" in done.stderr and "refused:" in done.stderr
        assert refused or "has not copied" in done.stderr, done.stderr
        await asyncio.sleep(1)
    assert done.returncode == 0, done.stderr


async def test_transfer_right_after_a_topic_is_made_waits_until_the_new_master_holds_it(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """Topic and group configs are no part of the Raft log: a follower copies the master's every 10 s
    (4.9.8's SlaveSynchronize). A transfer right after 'topic create' handed the master role to a member
    that did not hold the topic yet: the new master refused it ('topic not exist') and the other members
    dropped it at their next copy. The transfer now waits until the member holds the leader's topics."""
    async with raft_group(tmp_path, cli_env) as (data, ns, client):
        env = {**quick(cli_env), "NAMESRV_ADDR": ns}
        mq = runner(env)

        leader = await new_master(client, ns, "")
        follower = next(a for a in member_addrs(data) if a != leader)
        made = await asyncio.to_thread(mq, "topic", "create", "-t", "JustMade", "-r", "2", "-w", "2")
        assert made.returncode == 0, made.stderr
        await hand_over(mq, data, follower)
        r = await client.invoke(follower, RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG))
        assert "JustMade" in TopicConfigSerializeWrapper.loads(r.body).topic_config_table


async def test_check_ha_warns_when_a_member_of_the_group_is_gone(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """A DLedger group of 3 with a member killed serves on, but one more loss stops it: 'check ha' said
    OK (its slave rules count the slaves registered, and a Raft group's leader is connected to the rest)."""
    async with raft_group(tmp_path, cli_env) as (data, ns, client):
        env = {**quick(cli_env), "NAMESRV_ADDR": ns}

        def check() -> subprocess.CompletedProcess[str]:
            argv = [sys.executable, "-m", "mqctl", "check", "ha"]
            return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)

        leader = await new_master(client, ns, "")
        follower = next(a for a in member_addrs(data) if a != leader)

        async def both_followers_registered() -> bool:
            return (await asyncio.to_thread(check)).stdout.startswith("HA OK - 2 slaves")

        await wait_until(both_followers_registered, 60)
        await BrokerClient(leader, client).create_topic("Lagged", 1)
        assert (await BrokerClient(leader, client).send("Lagged", b"x" * 4096, queue_id=0)).code == 0

        async def followers_lag_measured() -> bool:
            """A follower's lag is its log end against the leader's, in bytes, as a slave's (it was
            never measured: a DLedger follower far behind passed 'check ha' as OK)."""
            argv = [sys.executable, "-m", "mqctl", "broker", "ha", "status", "-o", "json"]
            shown = await asyncio.to_thread(
                subprocess.run, argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
            )
            rows = json.loads(shown.stdout or "[]")
            return [r["lag_bytes"] for r in rows if r["raft_role"] == "FOLLOWER"] == [0, 0]

        await wait_until(followers_lag_measured, 30)
        os.kill(member_pid(data, follower), signal.SIGKILL)

        async def warned() -> bool:
            return (await asyncio.to_thread(check)).returncode != 0

        await wait_until(warned, 30)
        done = await asyncio.to_thread(check)

        async def leader_says_down() -> bool:
            """The leader's row named the dead follower 'match 812 lag 0': no new entry reached it to count
            as lag, and nothing said it did not answer."""
            argv = [sys.executable, "-m", "mqctl", "broker", "ha", "status", "-o", "json"]
            shown = await asyncio.to_thread(
                subprocess.run, argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
            )
            rows = json.loads(shown.stdout or "[]")
            peers = next((r["peers"] or "" for r in rows if r["raft_role"] == "LEADER"), "")
            return peers.count("DOWN (no answer)") == 1 and peers.count(" lag ") == 1

        await wait_until(leader_says_down, 30)
    assert done.returncode == 1 and done.stdout.startswith("HA WARNING"), done.stdout
    assert "2 of its 3 DLedger members" in done.stdout, done.stdout


async def test_a_tail_reads_on_through_a_failover_of_the_leader(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """'msg tail' follows a topic as kcat -C does: the leader's SIGKILL closed its connection and the tail
    exited 5 ('connection closed'). It now asks the route again and reads on from where it was, from the
    new master or meanwhile a follower, saying so once on stderr."""
    async with raft_group(tmp_path, cli_env) as (data, ns, client):
        env = {**quick(cli_env), "NAMESRV_ADDR": ns}
        leader = await new_master(client, ns, "")
        await BrokerClient(leader, client).create_topic("Followed", 1)
        await topic_everywhere(client, data, "Followed")
        argv = [sys.executable, "-m", "mqctl", "msg", "tail", "-t", "Followed", "-o", "json"]
        tail = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            assert tail.stderr is not None and tail.stdout is not None
            assert "tailing Followed" in await asyncio.to_thread(read_line, tail, tail.stderr)
            assert (await BrokerClient(leader, client).send("Followed", b"before", queue_id=0)).code == 0
            first = json.loads(await asyncio.to_thread(read_line, tail, tail.stdout))
            assert first["body"] == "before"
            os.kill(member_pid(data, leader), signal.SIGKILL)
            master = await new_master(client, ns, leader)
            assert (await BrokerClient(master, client).send("Followed", b"after", queue_id=0)).code == 0
            line = await asyncio.to_thread(read_line, tail, tail.stdout, timeout=60)
            assert line, f"the tail exited: {(await asyncio.to_thread(finish, tail, 10))[1]}"
            assert json.loads(line)["body"] == "after" and tail.poll() is None
        finally:
            tail.kill()
            tail.wait()


async def test_a_group_tail_is_a_member_on_the_new_master_after_a_leadership_transfer(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """'msg tail -g' heartbeated only the master it started on: after a transfer it read on, but the new
    master's 'group connections' did not list it (invisible to the operator and to rebalancing). It now
    heartbeats every broker of the topic's current route, as MQClientInstance#sendHeartbeatToAllBroker does."""
    async with raft_group(tmp_path, cli_env) as (data, ns, client):
        env = {**quick(cli_env), "NAMESRV_ADDR": ns}
        mq = runner(env)

        def listed() -> list[str]:
            done = mq("group", "connections", "-g", "GTail", "-o", "json")
            if done.returncode != 0:
                return []
            return [row["client_id"] for row in json.loads(done.stdout)["clients"]]

        leader = await new_master(client, ns, "")
        await BrokerClient(leader, client).create_topic("Watched", 1)
        await topic_everywhere(client, data, "Watched")
        argv = [sys.executable, "-m", "mqctl", "msg", "tail", "-t", "Watched", "-g", "GTail", "-o", "json"]
        tail = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            assert tail.stderr is not None
            assert "tailing Watched" in await asyncio.to_thread(read_line, tail, tail.stderr)

            async def joined() -> bool:
                return bool(await asyncio.to_thread(listed))

            await wait_until(joined, 30)
            follower = next(a for a in member_addrs(data) if a != leader)
            await hand_over(mq, data, follower)
            assert await new_master(client, ns, leader) == follower
            # well inside the 30 s heartbeat interval: the new master knew the tail before it led
            deadline = time.monotonic() + 10
            while not (clients := await asyncio.to_thread(listed)) and time.monotonic() < deadline:
                await asyncio.sleep(0.5)
            assert clients, "the new master lists no client of the tail's group"
            assert (await BrokerClient(follower, client).send("Watched", b"after", queue_id=0)).code == 0
            assert tail.stdout is not None
            line = await asyncio.to_thread(read_line, tail, tail.stdout, timeout=60)
            assert line and json.loads(line)["body"] == "after", line  # and it reads on
        finally:
            tail.kill()
            tail.wait()


async def test_a_tail_moves_to_the_new_master_after_a_leadership_transfer_without_an_error(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """After 'broker ha transfer' the deposed leader still answers, so 'msg tail' pulled from it until a
    connection error: a member paused or cut off from the group then held the tail silent for its whole
    request timeout. The tail now asks the route again as it reads, moves to the new master (saying so on
    stderr) and reads on from each queue's position: the old one can stop, nothing is missed or doubled."""
    async with raft_group(tmp_path, cli_env) as (data, ns, client):
        env = {**quick(cli_env), "NAMESRV_ADDR": ns}
        mq = runner(env)

        leader = await new_master(client, ns, "")
        await BrokerClient(leader, client).create_topic("Moved", 2)
        await topic_everywhere(client, data, "Moved")
        # a long request timeout: a pull left on a paused member would hold the tail for all of it
        argv = [sys.executable, "-m", "mqctl", "msg", "tail", "-t", "Moved", "-o", "json", "--timeout", "900"]
        tail = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        paused: int | None = None
        try:
            assert tail.stderr is not None and tail.stdout is not None

            async def line(stream: IO[str]) -> str:
                text = await asyncio.to_thread(read_line, tail, stream, timeout=60)
                assert text, f"the tail exited: {(await asyncio.to_thread(finish, tail, 10))[1]}"
                return text

            assert "tailing Moved" in await line(tail.stderr)
            for queue in (0, 1):
                assert (await BrokerClient(leader, client).send("Moved", b"before", queue_id=queue)).code == 0
            read = [json.loads(await line(tail.stdout)) for _ in range(2)]
            follower = next(a for a in member_addrs(data) if a != leader)
            await hand_over(mq, data, follower)
            assert await new_master(client, ns, leader) == follower
            on_new = BrokerClient(follower, client)
            for queue in (0, 1, 0):  # while the tail may still read the deposed leader
                assert (await on_new.send("Moved", b"between", queue_id=queue)).code == 0
            # the tail says where it reads now (a gap in the route may name another member on the way)
            while (
                not (said := await line(tail.stderr)).rstrip().endswith(f" to {follower}; reading on there")
            ):
                assert "WARNING" in said, said
            paused = member_pid(data, leader)
            os.kill(paused, signal.SIGSTOP)  # the deposed leader answers nothing more
            for queue in (1, 0):
                assert (await on_new.send("Moved", b"after", queue_id=queue)).code == 0
            read += [json.loads(await line(tail.stdout)) for _ in range(5)]
            assert tail.poll() is None
        finally:
            if paused is not None:
                os.kill(paused, signal.SIGCONT)
            tail.kill()
            tail.wait()
    by_queue = {q: [(r["queue_offset"], r["body"]) for r in read if r["queue_id"] == q] for q in (0, 1)}
    assert by_queue == {
        0: [(0, "before"), (1, "between"), (2, "between"), (3, "after")],
        1: [(0, "before"), (1, "between"), (2, "after")],
    }
