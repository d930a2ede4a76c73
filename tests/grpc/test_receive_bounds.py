"""The gRPC front's waiting receives are bounded as held pulls are (daemon.broker.polls): a connection holds
`maxHeldPullsPerConnection` of them, a host beyond loopback `maxHeldPullsPerHost`. Past either a receive
reads once and, finding nothing, is answered TOO_MANY_REQUESTS "polling full", as the Proxy answers when its
broker's polling is full (the 5.x clients retry it after a pause). Before, only a connection's thousand
streams bounded them, and a host opened hundreds of connections: a waiting receive of a topic of 8 queues
holds about 35 KiB, and one host's receives held gigabytes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
from google.protobuf import duration_pb2

from daemon.protect import budget_host
from tests.support.bounded import finish, read_line
from tests.support.grpc5 import (
    MessagingServiceStub,
    create_group,
    create_topic,
    endpoint,
    grpc_cluster,
    pb,
    spb,
)
from tests.support.netns import peer_namespace
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

META = (("x-mq-client-id", "bounded@1"), ("x-mq-language", "PYTHON"))


def _receive(group: str, topic: str, poll_s: int = 20) -> spb.ReceiveMessageRequest:
    request = spb.ReceiveMessageRequest(
        group=pb.Resource(name=group),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=-1),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
        batch_size=8,
        auto_renew=False,
    )
    request.invisible_duration.CopyFrom(duration_pb2.Duration(seconds=30))
    request.long_polling_timeout.CopyFrom(duration_pb2.Duration(seconds=poll_s))
    return request


def _statuses(call: object) -> list[tuple[int, str]]:
    return [(r.status.code, r.status.message) for r in call if r.HasField("status")]  # type: ignore[attr-defined]


def _refused(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    found = re.findall(r'rocketmq_remoting_requests_refused_total\{[^}]*limit="(\w+)"\} (\S+)', text)
    return {limit: float(value) for limit, value in found}


def test_a_connections_receives_past_its_bound_are_answered_polling_full(tmp_path: Path) -> None:
    with grpc_cluster(tmp_path) as cluster, grpc.insecure_channel(endpoint(cluster)) as channel:
        broker = cluster.broker
        broker.config.max_held_pulls_per_connection = 3
        create_topic(cluster, "Waited", 2)
        create_group(cluster, "G")
        s = MessagingServiceStub(channel)
        calls = [s.ReceiveMessage(_receive("G", "Waited"), metadata=META, timeout=60) for _ in range(5)]
        readers = ThreadPoolExecutor(len(calls))
        read = [readers.submit(_statuses, c) for c in calls]
        try:
            wait_for(
                lambda: broker.polls.waiting == 3 and sum(r.done() for r in read) == 2, "3 wait, 2 answered"
            )
            assert broker.polls.refused_owner == 2
            for answer in (r.result() for r in read if r.done()):
                assert answer == [(pb.TOO_MANY_REQUESTS, "polling full")]
            assert broker.polls.refused_host == 0  # (loopback: no host budget)
            counts = _refused(broker.metrics_port)
            assert counts["held_pops_connection"] == 2 and counts["held_pops_host"] == 0
        finally:
            for c in calls:
                c.cancel()
            readers.shutdown(cancel_futures=True)
        wait_for(lambda: broker.polls.waiting == 0, "the cancelled receives' places given back")
        # room again: a receive waits out its poll and is answered MESSAGE_NOT_FOUND
        again = s.ReceiveMessage(_receive("G", "Waited", poll_s=1), metadata=META, timeout=30)
        assert [code for code, _ in _statuses(again)] == [pb.MESSAGE_NOT_FOUND]


#: In the namespace: argv[2] connections to argv[1], each with argv[3] receive streams of group G, topic
#: Waited; prints "opened", then on a line from stdin the status codes of the streams answered so far (JSON).
_FLOOD = """
import asyncio, json, sys
import grpc
from google.protobuf import duration_pb2
from rocketmq.grpc_protocol import definition_pb2 as pb, service_pb2 as spb
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub

async def main():
    target, conns, per = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    request = spb.ReceiveMessageRequest(
        group=pb.Resource(name="G"), message_queue=pb.MessageQueue(topic=pb.Resource(name="Waited"), id=-1),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"), batch_size=8)
    request.invisible_duration.CopyFrom(duration_pb2.Duration(seconds=30))
    request.long_polling_timeout.CopyFrom(duration_pb2.Duration(seconds=20))
    options = [("grpc.use_local_subchannel_pool", 1)]  # (a connection each)
    channels = [grpc.aio.insecure_channel(target, options=options) for _ in range(conns)]
    codes = []

    async def receive(stub):
        try:
            async for reply in stub.ReceiveMessage(request, metadata=(("x-mq-client-id", "flood"),), timeout=60):
                if reply.HasField("status"):
                    codes.append(reply.status.code)
        except (grpc.aio.AioRpcError, asyncio.CancelledError):
            pass

    tasks = [asyncio.create_task(receive(MessagingServiceStub(c))) for c in channels for _ in range(per)]
    print("opened", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    print(json.dumps(codes), flush=True)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for c in channels:
        await c.close()

asyncio.run(main())
"""


def test_a_hosts_receives_over_many_connections_are_bounded(tmp_path: Path) -> None:
    """A peer off loopback with receive streams on several connections waits `maxHeldPullsPerHost` of
    them; the rest are answered polling full, and a client of another host still waits its receive."""
    conns, per, bound = 3, 4, 6
    with peer_namespace() as peer:
        overrides = {"listen_host": peer.host_ip, "broker_ip1": peer.host_ip, "metrics_host": "127.0.0.1"}
        with grpc_cluster(tmp_path, **overrides) as cluster:
            broker = cluster.broker
            assert broker.grpc is not None
            broker.config.max_held_pulls_per_host = bound
            create_topic(cluster, "Waited", 2)
            create_group(cluster, "G")
            target = f"{peer.host_ip}:{broker.grpc.port}"
            argv = [
                "ip",
                "netns",
                "exec",
                peer.name,
                sys.executable,
                "-c",
                _FLOOD,
                target,
                str(conns),
                str(per),
            ]
            flood = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            try:
                assert read_line(flood, timeout=120).strip() == "opened"
                host = budget_host(peer.peer_ip)
                wait_for(
                    lambda: (
                        broker.polls.held_by(host) == bound
                        and broker.polls.refused_host == conns * per - bound
                    ),
                    "the host's bound waiting, the rest refused",
                    timeout=120,
                )
                # this machine's client (another host) still waits its receive
                with grpc.insecure_channel(target) as channel:
                    mine = MessagingServiceStub(channel).ReceiveMessage(
                        _receive("G", "Waited", poll_s=2), metadata=META, timeout=30
                    )
                    assert [code for code, _ in _statuses(mine)] == [pb.MESSAGE_NOT_FOUND]
                assert flood.stdin is not None
                flood.stdin.write("\n")
                flood.stdin.flush()
                codes = json.loads(read_line(flood, timeout=60))
            finally:
                finish(flood)
            counts = _refused(broker.metrics_port)
    assert codes == [pb.TOO_MANY_REQUESTS] * (conns * per - bound)
    assert counts["held_pops_host"] == conns * per - bound


#: In the namespace: argv[2] connections to argv[1], each with argv[3] Telemetry streams that send nothing;
#: prints "opened", then on a line from stdin the status codes of the streams ended so far (JSON).
_TELEMETRY_FLOOD = """
import asyncio, json, sys
import grpc
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub

async def main():
    target, conns, per = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    options = [("grpc.use_local_subchannel_pool", 1)]  # (a connection each)
    channels = [grpc.aio.insecure_channel(target, options=options) for _ in range(conns)]
    codes = []

    async def silent():
        await asyncio.sleep(3600)
        yield spb.TelemetryCommand()

    async def stream(stub, i):
        try:
            async for reply in stub.Telemetry(silent(), metadata=(("x-mq-client-id", f"flood-{i}"),)):
                codes.append(reply.status.code)
        except (grpc.aio.AioRpcError, asyncio.CancelledError):
            pass

    tasks = [asyncio.create_task(stream(MessagingServiceStub(c), i)) for c in channels for i in range(per)]
    print("opened", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    print(json.dumps(codes), flush=True)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for c in channels:
        await c.close()

asyncio.run(main())
"""


def test_a_hosts_telemetry_streams_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A peer off loopback holding silent Telemetry streams on several connections keeps its host's bound
    of them open; a further one is answered TOO_MANY_REQUESTS and ended. Before, each stream held about
    23 KiB for as long as its connection lived, a thousand on each of a host's connections."""
    import daemon.grpc.service

    conns, per, bound = 2, 4, 5
    monkeypatch.setattr(daemon.grpc.service, "TELEMETRY_PER_HOST", bound)
    with peer_namespace() as peer:
        overrides = {"listen_host": peer.host_ip, "broker_ip1": peer.host_ip, "metrics_host": "127.0.0.1"}
        with grpc_cluster(tmp_path, **overrides) as cluster:
            broker = cluster.broker
            assert broker.grpc is not None
            target = f"{peer.host_ip}:{broker.grpc.port}"
            argv = ["ip", "netns", "exec", peer.name, sys.executable, "-c", _TELEMETRY_FLOOD, target]
            flood = subprocess.Popen(
                [*argv, str(conns), str(per)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
            )
            try:
                assert read_line(flood, timeout=120).strip() == "opened"
                host = budget_host(peer.peer_ip)
                wait_for(
                    lambda: (
                        broker.streams.held_by(host) == bound
                        and broker.streams.refused_host == conns * per - bound
                    ),
                    "the host's bound of streams open, the rest refused",
                    timeout=120,
                )
                assert flood.stdin is not None
                flood.stdin.write("\n")
                flood.stdin.flush()
                codes = json.loads(read_line(flood, timeout=60))
            finally:
                finish(flood)
            wait_for(lambda: broker.streams.held_by(host) == 0, "the flood's streams given back")
            counts = _refused(broker.metrics_port)
    assert codes == [pb.TOO_MANY_REQUESTS] * (conns * per - bound)
    assert counts["telemetry_streams_host"] == conns * per - bound
