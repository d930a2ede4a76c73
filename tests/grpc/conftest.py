"""Fixtures of the gRPC front's tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.daemons import LocalCluster
from tests.support.acl import write_acl


@pytest.fixture
def acl(tmp_path: Path) -> Iterator[tuple[LocalCluster, Any]]:
    """ACL on (tests.support.acl's accounts), TopicA and TopicDeny created, a raw stub. (The gRPC modules
    are imported here: without the grpc extra the tests that use it are skipped, not this file.)"""
    import grpc

    from tests.support.grpc5 import MessagingServiceStub, create_topic, endpoint, grpc_cluster

    home = tmp_path / "home"
    write_acl(home)
    with (
        grpc_cluster(tmp_path / "c", acl_enable=True, rocketmq_home=str(home)) as cluster,
        grpc.insecure_channel(endpoint(cluster)) as channel,
    ):
        create_topic(cluster, "TopicA")
        create_topic(cluster, "TopicDeny")
        yield cluster, MessagingServiceStub(channel)
