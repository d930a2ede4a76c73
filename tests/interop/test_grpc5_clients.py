"""The official 5.x clients next to 4.x ones: the Node 5.x client round trip, and a 4.x client (ali-ons)
with a 5.x Python client on one topic, each way."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import pytest

from tests.support.ali_ons import INTEROP, expected_body, node
from tests.support.grpc5 import (
    create_group,
    create_topic,
    endpoint,
    grpc_cluster,
    message,
    producer,
    receive_all,
    simple_consumer,
)

pytestmark = [pytest.mark.interop, pytest.mark.slow]

COUNT = 30


def test_the_node_5x_client_produces_and_consumes(tmp_path: Path) -> None:
    with grpc_cluster(tmp_path) as cluster:
        create_topic(cluster, "NodeTopic")
        result = asyncio.run(
            node(
                endpoint(cluster),
                "NodeTopic",
                "NodeGroup",
                str(COUNT),
                script=INTEROP / "grpc5_node_roundtrip.js",
                package="rocketmq-client-nodejs",
                deadline=120,  # its consumer receives for up to 60 s
            )
        )
    sent, received = result["sent"], result["received"]
    assert isinstance(sent, list) and isinstance(received, list)
    assert len(sent) == COUNT and all(len(i) == 34 for i in sent)
    assert sorted(r["id"] for r in received) == sorted(sent)  # each once
    assert sorted(r["body"] for r in received) == sorted(f"node-{i}" for i in range(COUNT))
    assert result["acked"] == COUNT


def test_ali_ons_produces_and_a_5x_simple_consumer_receives(tmp_path: Path) -> None:
    with grpc_cluster(tmp_path) as cluster:
        create_topic(cluster, "Mixed")
        sent = asyncio.run(node("produce", cluster.namesrv_addr, "Mixed", str(COUNT)))["sent"]
        assert isinstance(sent, list) and len(sent) == COUNT
        with simple_consumer(cluster, "FiveGroup", "Mixed") as c:
            got = receive_all(c, COUNT)
            for m in got:
                c.ack(m)
    by_key = {k: m for m in got for k in m.keys if k.startswith("key-")}  # keys "key-i alt-i": a set here
    assert len(got) == COUNT and len(by_key) == COUNT
    for i in range(COUNT):
        m = by_key[f"key-{i}"]
        assert m.body == expected_body(i, COUNT)  # ali-ons deflates the larger ones: inflated here
        assert m.tag == f"Tag{i % 3}"
        assert m.delivery_attempt == 1 and not m.corrupted


def test_a_5x_producer_sends_and_ali_ons_consumes(tmp_path: Path) -> None:
    with grpc_cluster(tmp_path) as cluster:
        create_topic(cluster, "Mixed")
        create_group(cluster, "CID_ONS_MIXED")
        with producer(cluster, ("Mixed",)) as p:
            for i in range(COUNT):
                p.send(message("Mixed", expected_body(i, COUNT), tag=f"Tag{i % 3}", keys=f"key-{i}"))
        consumed = asyncio.run(
            node(
                "consume",
                cluster.namesrv_addr,
                "Mixed",
                "CID_ONS_MIXED",
                str(COUNT),
                "0",
                "1000",
                "60000",
                deadline=90,
            )
        )
    received = consumed["received"]
    assert isinstance(received, list) and len(received) == COUNT
    by_key = {r["key"]: r for r in received}
    assert len(by_key) == COUNT
    for i in range(COUNT):
        r = by_key[f"key-{i}"]
        assert r["tags"] == f"Tag{i % 3}"
        assert r["sha1"] == hashlib.sha1(expected_body(i, COUNT)).hexdigest()
