"""The gRPC front's waiting receives are bounded as held pulls are (daemon.broker.polls): a connection holds
`maxHeldPullsPerConnection` of them, a host beyond loopback `maxHeldPullsPerHost`. Past either a receive
reads once and, finding nothing, is answered TOO_MANY_REQUESTS "polling full", as the Proxy answers when its
broker's polling is full (the 5.x clients retry it after a pause). Before, only a connection's thousand
streams bounded them, and a host opened hundreds of connections: a waiting receive holds its stream, a task
and a waiter on each queue it reads, and one host's receives held gigabytes."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest

from daemon.protect import budget_host
from tests.broker.test_held_pull_bounds import _scrape
from tests.daemons import LocalCluster
from tests.grpc.test_attacks import receive_request
from tests.support.bounded import finish, read_line
from tests.support.grpc5 import (
    MessagingServiceStub,
    create_group,
    create_topic,
    endpoint,
    grpc_cluster,
    message,
    pb,
    producer,
    spb,
)
from tests.support.netns import PeerNamespace, peer_namespace
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

META = (("x-mq-client-id", "bounded@1"), ("x-mq-language", "PYTHON"))


def _statuses(call: object) -> list[tuple[int, str]]:
    return [(r.status.code, r.status.message) for r in call if r.HasField("status")]  # type: ignore[attr-defined]


def test_a_connections_receives_past_its_bound_are_answered_polling_full(tmp_path: Path) -> None:
    with grpc_cluster(tmp_path) as cluster, grpc.insecure_channel(endpoint(cluster)) as channel:
        broker = cluster.broker
        broker.config.max_held_pulls_per_connection = 3
        create_topic(cluster, "Waited", 2)
        create_group(cluster, "G")
        s = MessagingServiceStub(channel)
        calls = [
            s.ReceiveMessage(receive_request("G", "Waited", poll_s=20), metadata=META, timeout=60)
            for _ in range(5)
        ]
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
            counts = _scrape(broker.metrics_port)
            assert counts["held_pops_connection"] == 2 and counts["held_pops_host"] == 0
        finally:
            for c in calls:
                c.cancel()
            readers.shutdown(cancel_futures=True)
        wait_for(lambda: broker.polls.waiting == 0, "the cancelled receives' places given back")
        # room again: a receive waits out its poll and is answered MESSAGE_NOT_FOUND
        again = s.ReceiveMessage(receive_request("G", "Waited", poll_s=1), metadata=META, timeout=30)
        assert [code for code, _ in _statuses(again)] == [pb.MESSAGE_NOT_FOUND]


#: In the namespace: argv[2] connections to argv[1], each with argv[3] streams of argv[4]: "receive" (of
#: group G, topic Waited) or "telemetry" (sending nothing); prints "opened", then on a line from stdin the
#: status codes the streams were answered so far (JSON).
_FLOOD = """
import asyncio, json, sys
import grpc
from google.protobuf import duration_pb2
from rocketmq.grpc_protocol import definition_pb2 as pb, service_pb2 as spb
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub

async def main():
    target, conns, per, kind = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    request = spb.ReceiveMessageRequest(
        group=pb.Resource(name="G"), message_queue=pb.MessageQueue(topic=pb.Resource(name="Waited"), id=-1),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"), batch_size=8)
    request.invisible_duration.CopyFrom(duration_pb2.Duration(seconds=30))
    request.long_polling_timeout.CopyFrom(duration_pb2.Duration(seconds=20))
    options = [("grpc.use_local_subchannel_pool", 1)]  # (a connection each)
    channels = [grpc.aio.insecure_channel(target, options=options) for _ in range(conns)]
    codes = []

    async def silent():
        await asyncio.sleep(3600)
        yield spb.TelemetryCommand()

    async def stream(stub, i):
        meta = (("x-mq-client-id", f"flood-{i}"),)
        if kind == "receive":
            call = stub.ReceiveMessage(request, metadata=meta)
        else:
            call = stub.Telemetry(silent(), metadata=meta)
        try:
            async for reply in call:
                if reply.HasField("status"):
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


@contextmanager
def _flood(
    peer: PeerNamespace, target: str, conns: int, per: int, kind: str
) -> Iterator[Callable[[], list[int]]]:
    """The flood running in the namespace; it yields what says the codes its streams were answered so far."""
    argv = peer.python(_FLOOD, target, str(conns), str(per), kind)
    flood = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert read_line(flood, timeout=120).strip() == "opened"

        def answered() -> list[int]:
            assert flood.stdin is not None
            flood.stdin.write("\n")
            flood.stdin.flush()
            return [int(code) for code in json.loads(read_line(flood, timeout=60))]

        yield answered
    finally:
        finish(flood)


@contextmanager
def _front_off_loopback(tmp_path: Path) -> Iterator[tuple[PeerNamespace, LocalCluster, str]]:
    """A namespace, and a cluster listening on this end of its pair (G, Waited made): the front's address."""
    with peer_namespace() as peer:
        overrides = {"listen_host": peer.host_ip, "broker_ip1": peer.host_ip, "metrics_host": "127.0.0.1"}
        with grpc_cluster(tmp_path, **overrides) as cluster:
            assert cluster.broker.grpc is not None
            create_topic(cluster, "Waited", 2)
            create_group(cluster, "G")
            yield peer, cluster, f"{peer.host_ip}:{cluster.broker.grpc.port}"


def test_a_hosts_receives_over_many_connections_are_bounded(tmp_path: Path) -> None:
    """A peer off loopback with receive streams on several connections waits `maxHeldPullsPerHost` of
    them; the rest are answered polling full, and a client of another host still waits its receive."""
    conns, per, bound = 3, 4, 6
    with _front_off_loopback(tmp_path) as (peer, cluster, target):
        polls = cluster.broker.polls
        cluster.broker.config.max_held_pulls_per_host = bound
        host = budget_host(peer.peer_ip)
        with _flood(peer, target, conns, per, "receive") as answered:
            wait_for(
                lambda: polls.held_by(host) == bound and polls.refused_host == conns * per - bound,
                "the host's bound waiting, the rest refused",
                timeout=120,
            )
            # this machine's client (another host) still waits its receive
            with grpc.insecure_channel(target) as channel:
                mine = MessagingServiceStub(channel).ReceiveMessage(
                    receive_request("G", "Waited", poll_s=2), metadata=META, timeout=30
                )
                assert [code for code, _ in _statuses(mine)] == [pb.MESSAGE_NOT_FOUND]
            codes = answered()
        counts = _scrape(cluster.broker.metrics_port)
    assert codes == [pb.TOO_MANY_REQUESTS] * (conns * per - bound)
    assert counts["held_pops_host"] == conns * per - bound


def test_a_hosts_telemetry_streams_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A peer off loopback holding silent Telemetry streams on several connections keeps its host's bound
    of them open; a further one is answered TOO_MANY_REQUESTS and ended. Before, each stream held a task,
    an outbox and grpc's call for as long as its connection lived, a thousand on each of a host's connections."""
    import daemon.grpc.service

    conns, per, bound = 2, 4, 5
    monkeypatch.setattr(daemon.grpc.service, "TELEMETRY_PER_HOST", bound)
    with _front_off_loopback(tmp_path) as (peer, cluster, target):
        streams = cluster.broker.streams
        host = budget_host(peer.peer_ip)
        with _flood(peer, target, conns, per, "telemetry") as answered:
            wait_for(
                lambda: streams.held_by(host) == bound and streams.refused_host == conns * per - bound,
                "the host's bound of streams open, the rest refused",
                timeout=120,
            )
            codes = answered()
        wait_for(lambda: streams.held_by(host) == 0, "the flood's streams given back")
        counts = _scrape(cluster.broker.metrics_port)
    assert codes == [pb.TOO_MANY_REQUESTS] * (conns * per - bound)
    assert counts["telemetry_streams_host"] == conns * per - bound


def test_telemetry_streams_of_all_hosts_together_are_bounded(tmp_path: Path) -> None:
    """`grpcMaxTelemetryStreams` bounds the streams of every host together (many hosts, or one IPv6 peer
    spread over many /64s, each within its own bound, held as many as their connections carried): one
    more is answered TOO_MANY_REQUESTS naming the key and ended, counted in /metrics; an official
    Producer refused its stream still starts and sends, and once streams close another is served."""
    bound = 2
    quiet = threading.Event()

    def silent() -> Iterator[spb.TelemetryCommand]:
        quiet.wait(60)
        yield from ()

    with grpc_cluster(tmp_path) as cluster, grpc.insecure_channel(endpoint(cluster)) as channel:
        streams = cluster.broker.streams
        cluster.broker.config.grpc_max_telemetry_streams = bound
        create_topic(cluster, "Streamed", 1)
        s = MessagingServiceStub(channel)
        held = [
            s.Telemetry(silent(), metadata=(("x-mq-client-id", f"held-{i}"),), timeout=60) for i in range(2)
        ]
        try:
            wait_for(lambda: streams.waiting == bound, "the bound's streams open")
            over = s.Telemetry(iter(()), metadata=(("x-mq-client-id", "one-more"),), timeout=30)
            answers = [(r.status.code, r.status.message) for r in over]
            assert answers == [
                (pb.TOO_MANY_REQUESTS, f"{bound} Telemetry streams open (grpcMaxTelemetryStreams)")
            ]
            assert streams.refused_total == 1 and streams.refused_host == 0
            with producer(cluster, ("Streamed",)) as p:
                assert p.send(message("Streamed", b"sent without a stream")).message_id
            refused = streams.refused_total
            assert refused >= 2  # (the producer's stream, and again as its settings' write failed)
            assert _scrape(cluster.broker.metrics_port)["telemetry_streams_total"] == refused
        finally:
            quiet.set()
            for call in held:
                call.cancel()
        wait_for(lambda: streams.waiting == 0, "the held streams given back")
        settings = pb.Settings(
            client_type=pb.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name="Streamed")])
        )
        served = s.Telemetry(iter([spb.TelemetryCommand(settings=settings)]), metadata=META, timeout=30)
        assert [r.status.code for r in served] == [pb.OK]
