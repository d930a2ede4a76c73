"""A damaged ``topics.json`` whose ``.bak`` lacks a topic that holds messages: the real broker starts on the
``.bak``, says so at ERROR naming the topic, and re-creates it from the store so nothing vanishes."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from daemon.broker.headers import CreateTopicRequestHeader
from daemon.remoting.bodies import TopicRouteData
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from store.fastjson import dumps_pretty, loads
from store.record import decode_records
from tests.support.broker import ClusterHandle, start_cluster, stop_cluster

TOPIC = "LostInBak"
QUEUES = 3
MESSAGES = 30


async def _route(cluster: ClusterHandle, topic: str) -> RemotingCommand:
    request = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    return await cluster.client.invoke(cluster.namesrv_addr, request)


async def _read_all(cluster: ClusterHandle, topic: str, queues: int) -> list[bytes]:
    bodies = []
    for queue_id in range(queues):
        offset = 0
        while True:
            pulled = await cluster.pull("G", topic, queue_id, offset)
            if pulled.code != ResponseCode.SUCCESS:
                break
            msgs = decode_records(pulled.body)
            bodies += [m.body for m in msgs]
            offset = int(pulled.ext_fields["nextBeginOffset"])
    return bodies


@pytest.mark.parametrize("garbage", [b"#" * 256, b"\xde\xad\xbe\xef" * 64], ids=["text", "not-utf8"])
async def test_a_topic_missing_from_the_bak_stays_routable_and_readable(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, garbage: bytes
) -> None:
    cluster = await start_cluster(tmp_path)
    try:
        header = CreateTopicRequestHeader(TOPIC, "TBW102", QUEUES, QUEUES, 6, "SINGLE_TAG").to_ext_fields()
        assert (await cluster.call(RequestCode.UPDATE_AND_CREATE_TOPIC, header)).code == ResponseCode.SUCCESS
        for i in range(MESSAGES):
            sent = await cluster.send(TOPIC, b"m%02d" % i, queue_id=i % QUEUES)
            assert sent.code == ResponseCode.SUCCESS, sent.remark
    finally:
        await stop_cluster(cluster)

    config = tmp_path / "store" / "config"
    topics = loads((config / "topics.json").read_text())
    del topics["topicConfigTable"][TOPIC]  # an older .bak, from before the topic was created
    (config / "topics.json.bak").write_text(dumps_pretty(topics))
    damaged = bytearray((config / "topics.json").read_bytes())
    damaged[len(damaged) // 2 : len(damaged) // 2 + len(garbage)] = garbage
    (config / "topics.json").write_bytes(bytes(damaged))

    caplog.set_level(logging.ERROR)
    cluster = await start_cluster(tmp_path)
    try:
        route = await _route(cluster, TOPIC)
        assert route.code == ResponseCode.SUCCESS, route.remark
        assert TopicRouteData.loads(route.body).queue_datas[0].read_queue_nums == QUEUES
        assert sorted(await _read_all(cluster, TOPIC, QUEUES)) == [b"m%02d" % i for i in range(MESSAGES)]
    finally:
        await stop_cluster(cluster)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any("topics.json is unreadable" in e for e in errors), errors
    assert any(TOPIC in e and "re-created" in e for e in errors), errors
