"""The gRPC front under tls.server.mode=enforcing: TLS only, with the remoting listener's certificate."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from daemon.remoting.tls import write_local_ca
from tests.support.grpc5 import MessagingServiceStub, create_topic, grpc_cluster, pb, spb

pytestmark = pytest.mark.slow


def test_enforcing_mode_serves_grpc_over_tls_only(tmp_path: Path) -> None:
    certs = write_local_ca(tmp_path / "certs")
    tls = {
        "tls_server_mode": "enforcing",
        "tls_server_cert_path": str(certs["server_cert"]),
        "tls_server_key_path": str(certs["server_key"]),
    }
    with grpc_cluster(tmp_path / "c", **tls) as cluster:
        create_topic(cluster, "Secure")
        front = cluster.broker.grpc
        assert front is not None and front.tls
        target = f"127.0.0.1:{front.port}"
        request = spb.QueryRouteRequest(topic=pb.Resource(name="Secure"))
        trusted = grpc.ssl_channel_credentials(root_certificates=certs["ca"].read_bytes())
        with grpc.secure_channel(target, trusted) as channel:
            reply = MessagingServiceStub(channel).QueryRoute(request, timeout=10)
        assert reply.status.code == pb.OK and len(reply.message_queues) == 4
        with grpc.insecure_channel(target) as channel, pytest.raises(grpc.RpcError):
            MessagingServiceStub(channel).QueryRoute(request, timeout=3)
        untrusted = grpc.ssl_channel_credentials(
            root_certificates=write_local_ca(tmp_path / "x")["ca"].read_bytes()
        )
        with grpc.secure_channel(target, untrusted) as channel, pytest.raises(grpc.RpcError):
            MessagingServiceStub(channel).QueryRoute(request, timeout=3)
