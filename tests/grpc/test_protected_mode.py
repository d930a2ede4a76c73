"""Protected mode on the gRPC front: a peer off this machine creates no group on use, whatever address the
broker registers as its own."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from daemon.protect import is_own_address
from tests.grpc.test_attacks import call, send_request
from tests.support.grpc5 import create_topic, grpc_cluster, pb, spb
from tests.support.netns import peer_namespace
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

#: In the namespace: one ReceiveMessage of group argv[2] on topic argv[3] at argv[1]; prints its statuses.
_RECEIVE = """
import json, sys
import grpc
from google.protobuf import duration_pb2
from rocketmq.grpc_protocol import definition_pb2 as pb, service_pb2 as spb
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub

request = spb.ReceiveMessageRequest(
    group=pb.Resource(name=sys.argv[2]), message_queue=pb.MessageQueue(topic=pb.Resource(name=sys.argv[3]), id=-1),
    filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"), batch_size=8)
request.invisible_duration.CopyFrom(duration_pb2.Duration(seconds=30))
request.long_polling_timeout.CopyFrom(duration_pb2.Duration(seconds=1))
with grpc.insecure_channel(sys.argv[1]) as channel:
    call = MessagingServiceStub(channel).ReceiveMessage(request, metadata=(("x-mq-client-id", "peer@1"),), timeout=30)
    print(json.dumps([[r.status.code, r.status.message] for r in call if r.HasField("status")]))
"""


def test_a_peer_whose_address_the_broker_registers_is_not_this_machine(tmp_path: Path) -> None:
    """`brokerIP1` is where clients are told to connect: behind a NAT or a load balancer that forwards
    the port it is that device's address, not one of this machine's, and every client the device
    forwards arrives from it. The front took a peer at `brokerIP1` for this machine (the remoting port
    asks the socket which address of ours it reached), so every such client created groups on use."""
    with peer_namespace() as peer:
        assert is_own_address(peer.host_ip) and not is_own_address(peer.peer_ip)
        # the namespace's address stands for the device's: this broker registers it, and it is not ours
        with grpc_cluster(tmp_path, listen_host="0.0.0.0", broker_ip1=peer.peer_ip) as cluster:
            broker = cluster.broker
            assert broker.grpc is not None and broker.protection.active
            create_topic(cluster, "Waited", 2)
            target = f"{peer.host_ip}:{broker.grpc.port}"
            argv = peer.python(_RECEIVE, target, "PeerGroup", "Waited")
            done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
            assert done.returncode == 0, done.stderr
            statuses = json.loads(done.stdout)
            assert statuses and all("PeerGroup" in message for _, message in statuses), statuses
            assert broker.groups.get("PeerGroup") is None


def test_a_peer_off_this_machine_recalls_no_timer_message(tmp_path: Path) -> None:
    """A recall cancels a pending timer message, anyone's, by its unique key (readable in the timer
    topic): it was checked as a send, which protected mode leaves open, and an off-host peer cancelled
    another producer's message. Now it is refused off this machine; from this machine it still recalls."""
    with grpc_cluster(tmp_path, listen_host="0.0.0.0") as cluster:
        assert cluster.broker.protection.active
        create_topic(cluster, "Timed", 1)
        timed = send_request("Timed")
        at = int(time.time() * 1000) + 60_000
        timed.messages[0].system_properties.delivery_timestamp.FromMilliseconds(at)
        sent = call(cluster, "SendMessage", timed, "127.0.0.1", "producer@1")
        assert sent.status.code == pb.OK, sent.status
        recall = spb.RecallMessageRequest(
            topic=pb.Resource(name="Timed"), recall_handle=sent.entries[0].recall_handle
        )
        # (the timer service takes the stored message from its topic a moment after the send answers)
        wait_for(lambda: cluster.broker.timers.pending == 1, "the timer message pending")
        refused = call(cluster, "RecallMessage", recall, "10.9.8.7", "peer@1")
        assert refused.status.code == pb.FORBIDDEN, refused.status
        assert "protected mode" in refused.status.message and "10.9.8.7" in refused.status.message
        assert cluster.broker.timers.pending == 1
        recalled = call(cluster, "RecallMessage", recall, "127.0.0.1", "producer@1")
        assert recalled.status.code == pb.OK, recalled.status
        assert cluster.broker.timers.pending == 0
