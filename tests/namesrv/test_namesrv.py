"""The NameServer driven over TCP like brokers, clients and mqadmin drive a real one."""

from __future__ import annotations

import asyncio
import tracemalloc
import zlib
from pathlib import Path
from typing import Any

import pytest

import daemon.remoting.bodies as bodies
import store.supervise as supervise_module
from daemon.config import parse_properties
from daemon.namesrv.config import NamesrvConfig
from daemon.namesrv.controller import NamesrvController
from daemon.remoting.bodies import (
    ClusterInfo,
    DataVersion,
    KVTable,
    RegisterBrokerBody,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicList,
    TopicRouteData,
)
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.frame import decode_frame, encode_command
from store import fastjson
from tests.support.namesrv import Namesrv, count_decodes, namesrv_config

ROUTE_V121 = (
    b'{"brokerDatas":[{"brokerAddrs":{0:"127.0.0.1:10911"},"brokerName":"broker-a","cluster":"DefaultCluster"}],'
    b'"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,'
    b'"writeQueueNums":4}]}'
)
ROUTE_V401 = ROUTE_V121.replace(b'{0:"', b'{"0":"')
NOT_EXIST = (
    "No topic route info in name server for the topic: GoldenTopic\n"
    "See http://rocketmq.apache.org/docs/faq/ for further details."
)


async def test_route_in_both_json_forms_like_golden_frames(namesrv: Namesrv) -> None:
    missing = await namesrv.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "GoldenTopic"})
    assert (missing.code, missing.remark) == (ResponseCode.TOPIC_NOT_EXIST, NOT_EXIST)
    assert (await namesrv.register({"GoldenTopic": 4})).code == ResponseCode.SUCCESS

    v121 = await namesrv.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "GoldenTopic"}, version=121)
    v401 = await namesrv.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "GoldenTopic"}, version=401)
    std = await namesrv.call(
        RequestCode.GET_ROUTEINFO_BY_TOPIC,
        {"topic": "GoldenTopic", "acceptStandardJsonOnly": "true"},
        version=121,
    )
    assert (v121.code, v121.body) == (0, ROUTE_V121)
    assert (v401.body, std.body) == (ROUTE_V401, ROUTE_V401)
    assert TopicRouteData.loads(v121.body) == TopicRouteData.loads(v401.body)


async def test_cluster_info_and_topic_lists(namesrv: Namesrv) -> None:
    await namesrv.register({"T1": 4, "broker-a": 1, "DefaultCluster": 16})
    await namesrv.register({"T2": 8}, broker_name="broker-b", broker_addr="127.0.0.2:10911", cluster="Other")
    info = await namesrv.call(RequestCode.GET_BROKER_CLUSTER_INFO)
    assert b'"brokerAddrs":{0:"127.0.0.1:10911"}' in info.body  # Java always writes bare keys here
    cluster = ClusterInfo.loads(info.body)
    assert cluster.cluster_addr_table == {"DefaultCluster": {"broker-a"}, "Other": {"broker-b"}}
    assert cluster.broker_addr_table["broker-b"].broker_addrs == {0: "127.0.0.2:10911"}

    all_topics = TopicList.loads((await namesrv.call(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)).body)
    assert sorted(all_topics.topic_list) == ["DefaultCluster", "T1", "T2", "broker-a"]
    by_cluster = await namesrv.call(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "Other"})
    assert TopicList.loads(by_cluster.body).topic_list == ["T2"]
    unknown = await namesrv.call(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "Nope"})
    assert TopicList.loads(unknown.body).topic_list == []
    system = TopicList.loads((await namesrv.call(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS)).body)
    assert sorted(system.topic_list) == ["DefaultCluster", "Other", "broker-a", "broker-b"]
    assert system.broker_addr in {"127.0.0.1:10911", "127.0.0.2:10911"}


async def test_slave_registration_learns_master_and_keeps_routes(namesrv: Namesrv) -> None:
    await namesrv.register({"T": 4})
    slave = await namesrv.register({"T": 2}, broker_addr="127.0.0.3:10911", broker_id=1)
    assert slave.ext_fields == {"masterAddr": "127.0.0.1:10911", "haServerAddr": "127.0.0.1:10912"}
    route = TopicRouteData.loads(
        (await namesrv.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})).body
    )
    assert route.broker_datas[0].broker_addrs == {0: "127.0.0.1:10911", 1: "127.0.0.3:10911"}
    assert route.queue_datas[0].write_queue_nums == 4  # slaves never change routes


async def test_reregistration_applies_topics_only_when_data_version_changes(namesrv: Namesrv) -> None:
    await namesrv.register({"T": 4}, version=DataVersion(1, 1))
    await namesrv.register({"T": 8}, version=DataVersion(1, 1))
    route = TopicRouteData.loads(
        (await namesrv.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})).body
    )
    assert route.queue_datas[0].read_queue_nums == 4
    await namesrv.register({"T": 8, "U": 1}, version=DataVersion(2, 2))
    route = TopicRouteData.loads(
        (await namesrv.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})).body
    )
    assert route.queue_datas[0].read_queue_nums == 8


async def test_an_unchanged_body_refreshes_liveness_without_a_parse(
    namesrv: Namesrv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broker's periodic registration repeats the same bytes: the NameServer keeps the broker alive and
    parses nothing; a new version, another address, or a broker the routes dropped gets the full parse."""
    decoded = count_decodes(monkeypatch)
    routes = namesrv.controller.routes
    table = {"T": 4, "U": 2}
    for compressed in (False, True):
        decoded.clear()
        assert (await namesrv.register(table, compressed=compressed)).code == 0
        assert len(decoded) == 1
        routes.broker_live_table["127.0.0.1:10911"].last_update_ms = 0
        assert (await namesrv.register(table, compressed=compressed)).code == 0
        assert len(decoded) == 1  # the same bytes: no parse
        assert routes.broker_live_table["127.0.0.1:10911"].last_update_ms > 0  # but alive again
    assert (await namesrv.register({**table, "V": 1}, version=DataVersion(2, 2))).code == 0
    assert len(decoded) == 2 and "V" in routes.topic_queue_table
    other = await namesrv.register(
        {**table, "V": 1}, version=DataVersion(2, 2), broker_addr="127.0.0.2:10911", broker_name="broker-b"
    )
    assert other.code == 0 and len(decoded) == 3  # the same bytes from another broker
    fields = {"brokerName": "broker-a", "brokerAddr": "127.0.0.1:10911", "clusterName": "DefaultCluster"}
    assert (await namesrv.call(RequestCode.UNREGISTER_BROKER, {**fields, "brokerId": "0"})).code == 0
    assert (await namesrv.register({**table, "V": 1}, version=DataVersion(2, 2))).code == 0
    assert len(decoded) == 4  # routes dropped it: its topics are read again
    route = await namesrv.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "V"})
    assert len(TopicRouteData.loads(route.body).queue_datas) == 2


async def test_a_table_at_a_version_already_held_is_not_parsed(
    namesrv: Namesrv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A topic registered alone carries the table's new version; the whole table at that version then
    changes nothing in the routes (4.9.8 reads its table only at a new version): its table is not
    parsed, only the data version before it. A new version is parsed whole."""
    decoded = count_decodes(monkeypatch)
    routes = namesrv.controller.routes
    assert (await namesrv.register({"T": 4}, version=DataVersion(1, 1))).code == 0
    assert (await namesrv.register({"V": 2}, version=DataVersion(2, 2))).code == 0  # V alone
    assert len(decoded) == 2 and "V" in routes.topic_queue_table
    routes.broker_live_table["127.0.0.1:10911"].last_update_ms = 0
    assert (await namesrv.register({"T": 4, "V": 2}, version=DataVersion(2, 2))).code == 0
    assert len(decoded) == 2 and routes.broker_live_table["127.0.0.1:10911"].last_update_ms > 0
    assert (await namesrv.register({"T": 8, "V": 2}, version=DataVersion(3, 3))).code == 0
    assert len(decoded) == 3 and routes.topic_queue_table["T"]["broker-a"].read_queue_nums == 8


def test_peek_reads_the_version_and_filter_servers_before_the_table() -> None:
    wrapper = TopicConfigSerializeWrapper({"T": TopicConfig("T", 4, 4)}, DataVersion(7, 77))
    body = RegisterBrokerBody(wrapper, ["10.0.0.1:1"]).encode()
    head = RegisterBrokerBody.peek(body)
    assert head == RegisterBrokerBody(TopicConfigSerializeWrapper({}, DataVersion(7, 77)), ["10.0.0.1:1"])
    # laid out otherwise (the version after the table, or no table): read whole instead
    assert (
        RegisterBrokerBody.peek(b'{"topicConfigSerializeWrapper":{"topicConfigTable":{},"dataVersion":{}}}')
        is None
    )
    assert RegisterBrokerBody.peek(b'{"filterServerList":[]}') is None
    assert RegisterBrokerBody.peek(b'{"dataVersion":{"counter":1},"topicConfigTable":{}}') is None


async def test_compressed_registration_and_crc_check(namesrv: Namesrv) -> None:
    assert (await namesrv.register({"Z": 2}, compressed=True)).code == 0
    assert (await namesrv.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Z"})).code == 0
    fields = {
        "brokerName": "b",
        "brokerAddr": "127.0.0.9:1",
        "clusterName": "C",
        "haServerAddr": "x",
        "brokerId": "0",
        "bodyCrc32": str((zlib.crc32(b"{}") & 0x7FFFFFFF) ^ 1),
    }
    bad = await namesrv.call(RequestCode.REGISTER_BROKER, fields, b"{}")
    assert (bad.code, bad.remark) == (ResponseCode.SYSTEM_ERROR, "crc32 not match")
    garbage = await namesrv.call(RequestCode.REGISTER_BROKER, {**fields, "bodyCrc32": "0"}, b"[oops")
    assert garbage.code == ResponseCode.SYSTEM_ERROR and (garbage.remark or "").startswith(
        "bad registration body"
    )


async def test_a_compressed_registration_bomb_is_refused_before_it_inflates(
    namesrv: Namesrv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Anyone may register a broker (protected mode leaves it open): a compressed body of zeros inflated
    whole, so one request of a few hundred KiB made the NameServer hold gigabytes. It stops at the cap
    (lowered here, so that the bomb stays small)."""
    cap = 1024 * 1024
    monkeypatch.setattr(bodies, "MAX_INFLATED_REGISTRATION", cap, raising=False)
    bomb = zlib.compress(b"\0" * (64 * cap), 9)
    fields = {"brokerName": "b", "brokerAddr": "127.0.0.9:1", "clusterName": "C", "haServerAddr": "x",
              "brokerId": "0", "compressed": "true"}  # fmt: skip
    tracemalloc.start()
    try:
        refused = await namesrv.call(RequestCode.REGISTER_BROKER, fields, bomb)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert refused.code == ResponseCode.SYSTEM_ERROR and "inflates past" in (refused.remark or "")
    assert peak < 8 * cap, peak  # about the cap, not the bomb's 64
    assert (await namesrv.register({"Z": 2}, compressed=True)).code == 0


async def test_unregister_removes_broker_and_its_topics(namesrv: Namesrv) -> None:
    await namesrv.register({"T": 4})
    fields = {"brokerName": "broker-a", "brokerAddr": "127.0.0.1:10911", "clusterName": "DefaultCluster"}
    r = await namesrv.call(RequestCode.UNREGISTER_BROKER, {**fields, "brokerId": "0"})
    assert r.code == 0
    assert (await namesrv.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})).code == 17
    assert ClusterInfo.loads((await namesrv.call(RequestCode.GET_BROKER_CLUSTER_INFO)).body) == ClusterInfo()


async def test_silent_brokers_expire(tmp_path: Path) -> None:
    controller = NamesrvController(namesrv_config(tmp_path, scan_interval_ms=20, broker_expire_ms=150))
    await controller.start()
    try:
        async with RemotingClient() as client, RemotingClient() as broker_side:
            ns = Namesrv(controller, client)
            await ns.register({"T": 4}, client=broker_side)  # expiry closes the broker's connection
            assert (await ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})).code == 0
            for _ in range(200):
                await asyncio.sleep(0.02)
                if (await ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})).code != 0:
                    break
            assert (await ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})).code == 17
            assert controller.routes.broker_live_table == {}
    finally:
        await controller.stop()


async def test_a_scan_that_raised_is_logged_and_silent_brokers_still_expire(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A bug in one scan ended the scan task for good, silently: every broker that went silent since
    stayed routed. It is logged with its traceback and the scans go on."""
    monkeypatch.setattr(supervise_module, "RESTART_DELAY", 0.02)
    controller = NamesrvController(namesrv_config(tmp_path, scan_interval_ms=20, broker_expire_ms=150))
    scan = controller.routes.scan_not_active_brokers
    raised: list[bool] = []

    def fails_once() -> list[Any]:
        if not raised:
            raised.append(True)
            raise KeyError("a bug in the scan")
        return scan()

    monkeypatch.setattr(controller.routes, "scan_not_active_brokers", fails_once)
    await controller.start()
    try:
        async with RemotingClient() as client, RemotingClient() as broker_side:
            ns = Namesrv(controller, client)
            await ns.register({"T": 4}, client=broker_side)
            for _ in range(200):
                await asyncio.sleep(0.02)
                if (await ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})).code != 0:
                    break
            assert raised
            assert (await ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})).code == 17
    finally:
        await controller.stop()
    failures = [
        r for r in caplog.records if r.levelname == "ERROR" and "namesrv-broker-scan" in r.getMessage()
    ]
    assert [r.exc_info[0] for r in failures if r.exc_info] == [KeyError]


async def test_broker_connection_close_removes_it(namesrv: Namesrv) -> None:
    async with RemotingClient() as broker_side:
        await namesrv.register({"T": 4}, client=broker_side)
        assert (await namesrv.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})).code == 0
    for _ in range(100):
        if (await namesrv.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})).code != 0:
            break
        await asyncio.sleep(0.01)
    assert (await namesrv.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})).code == 17


async def test_delete_topic_whole_or_per_cluster(namesrv: Namesrv) -> None:
    await namesrv.register({"T": 4, "U": 4})
    await namesrv.register({"T": 4}, broker_name="broker-b", broker_addr="127.0.0.2:10911", cluster="Other")
    assert (
        await namesrv.call(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "T", "clusterName": "Other"})
    ).code == 0
    route = TopicRouteData.loads(
        (await namesrv.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})).body
    )
    assert [q.broker_name for q in route.queue_datas] == ["broker-a"]
    assert (await namesrv.call(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "T"})).code == 0
    assert (await namesrv.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})).code == 17
    assert (await namesrv.call(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "never"})).code == 0
    assert (await namesrv.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "U"})).code == 0


async def test_wipe_and_add_write_perm(namesrv: Namesrv) -> None:
    await namesrv.register({"T": 4, "U": 4})
    wiped = await namesrv.call(RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"})
    assert wiped.ext_fields == {"wipeTopicCount": "2"}
    route = TopicRouteData.loads(
        (await namesrv.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})).body
    )
    assert route.queue_datas[0].perm == 4
    added = await namesrv.call(RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"})
    assert added.ext_fields == {"addTopicCount": "2"}
    route = TopicRouteData.loads(
        (await namesrv.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})).body
    )
    assert route.queue_datas[0].perm == 6


async def test_kv_config_and_persistence_across_restart(tmp_path: Path) -> None:
    config = namesrv_config(tmp_path)
    controller = NamesrvController(config)
    await controller.start()
    async with RemotingClient() as client:
        ns = Namesrv(controller, client)
        put = {"namespace": "NS", "key": "k", "value": "v"}
        assert (await ns.call(RequestCode.PUT_KV_CONFIG, put)).code == 0
        assert (await ns.call(RequestCode.PUT_KV_CONFIG, {**put, "key": "gone"})).code == 0
        assert (await ns.call(RequestCode.DELETE_KV_CONFIG, {"namespace": "NS", "key": "gone"})).code == 0
        got = await ns.call(RequestCode.GET_KV_CONFIG, {"namespace": "NS", "key": "k"})
        assert (got.code, got.ext_fields) == (0, {"value": "v"})
        missing = await ns.call(RequestCode.GET_KV_CONFIG, {"namespace": "NS", "key": "nope"})
        assert (missing.code, missing.remark) == (22, "No config item, Namespace: NS Key: nope")
        no_ns = await ns.call(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "X"})
        assert (no_ns.code, no_ns.remark) == (22, "No config item, Namespace: X")
    await controller.stop()
    assert fastjson.loads(config.kv_config_file.read_bytes()) == {"configTable": {"NS": {"k": "v"}}}

    controller = NamesrvController(namesrv_config(tmp_path))
    await controller.start()
    async with RemotingClient() as client:
        listing = await Namesrv(controller, client).call(
            RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "NS"}
        )
    await controller.stop()
    assert KVTable.loads(listing.body).table == {"k": "v"}


async def test_order_topic_conf(tmp_path: Path) -> None:
    controller = NamesrvController(namesrv_config(tmp_path, order_message_enable=True))
    await controller.start()
    async with RemotingClient() as client:
        ns = Namesrv(controller, client)
        await ns.register({"T": 4})
        put = {"namespace": "ORDER_TOPIC_CONFIG", "key": "T", "value": "broker-a:4"}
        await ns.call(RequestCode.PUT_KV_CONFIG, put)
        route = TopicRouteData.loads((await ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})).body)
        registered = await ns.register({"T": 4})
    await controller.stop()
    assert route.order_topic_conf == "broker-a:4"
    assert KVTable.loads(registered.body).table == {"T": "broker-a:4"}


async def test_query_data_version(namesrv: Namesrv) -> None:
    await namesrv.register({"T": 4}, version=DataVersion(5, 55))
    fields = {
        "brokerName": "broker-a",
        "brokerAddr": "127.0.0.1:10911",
        "clusterName": "DefaultCluster",
        "brokerId": "0",
    }
    same = await namesrv.call(RequestCode.QUERY_DATA_VERSION, fields, DataVersion(5, 55).dumps())
    other = await namesrv.call(RequestCode.QUERY_DATA_VERSION, fields, DataVersion(6, 66).dumps())
    assert (same.ext_fields, other.ext_fields) == ({"changed": "false"}, {"changed": "true"})
    assert DataVersion.loads(other.body) == DataVersion(5, 55)


async def test_namesrv_config_get_and_update(namesrv: Namesrv) -> None:
    before = (await namesrv.call(RequestCode.GET_NAMESRV_CONFIG)).body.decode()
    assert "orderMessageEnable=false" in before.splitlines() and "listenPort=0" in before.splitlines()
    ok = await namesrv.call(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"orderMessageEnable=true\n")
    assert ok.code == 0 and namesrv.controller.config.order_message_enable is True
    assert "orderMessageEnable=true" in namesrv.controller.config.config_store_file.read_text()
    denied = await namesrv.call(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"kvConfigPath=/etc/passwd\n")
    assert (denied.code, denied.remark) == (
        ResponseCode.NO_PERMISSION,
        "Can not update config in black list.",
    )
    bad = await namesrv.call(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"brokerExpireMs=abc\n")
    assert bad.code == ResponseCode.SYSTEM_ERROR and "brokerExpireMs" in (bad.remark or "")
    # keys that move data or listeners are refused in every spelling the loader accepts: a remote
    # config change must not point the daemon at another directory or address
    for key in (b"listenPort=1", b"dataDir=/tmp/x", b"data_dir=/tmp/x", b"listenHost=0.0.0.0"):
        moved = await namesrv.call(RequestCode.UPDATE_NAMESRV_CONFIG, body=key + b"\n")
        assert moved.code == ResponseCode.NO_PERMISSION and "move data or listeners" in (moved.remark or "")
    assert namesrv.controller.config.listen_port == 0 and namesrv.controller.config.data_dir != Path("/tmp/x")


async def test_bad_requests_get_clear_errors(namesrv: Namesrv) -> None:
    unknown = await namesrv.call(9999)
    assert (unknown.code, unknown.remark) == (
        ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
        " request type 9999 not supported",
    )
    missing = await namesrv.call(RequestCode.GET_ROUTEINFO_BY_TOPIC)
    assert missing.code == ResponseCode.SYSTEM_ERROR
    assert missing.remark == "header GetRouteInfoRequestHeader: field 'topic' is required but missing"
    kv = await namesrv.call(RequestCode.PUT_KV_CONFIG, {"namespace": "NS"})
    assert kv.code == ResponseCode.SYSTEM_ERROR and "'key'" in (kv.remark or "")


async def test_bad_frames_close_only_their_connection(namesrv: Namesrv) -> None:
    port = namesrv.controller.port
    garbage = [
        "000000230000001f7b22636f6465223a3130362c226f7061717565223a312c626164206a736f6e",
        "7ffffff0000000707b22",
        "fffffffb00000070",
        "474554202f20485454502f312e310d0a486f73743a20780d0a0d0a",
    ]
    for raw in garbage:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(bytes.fromhex(raw))
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()
    # '{}' is request code 0: not supported, and the connection stays usable (like the real broker).
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(bytes.fromhex("00000006000000027b7d"))
    good = RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO)
    good.opaque = 101
    writer.write(encode_command(good))
    data = b""
    replies: list[RemotingCommand] = []
    while len(replies) < 2:
        data += await asyncio.wait_for(reader.read(4096), 5)
        while (decoded := decode_frame(data)) is not None:
            replies.append(decoded[0])
            data = data[decoded[1] :]
    writer.close()
    assert [(r.code, r.opaque) for r in replies] == [(3, 0), (0, 101)]
    assert (await namesrv.call(RequestCode.GET_BROKER_CLUSTER_INFO)).code == 0


async def test_loads_a_java_written_kv_config(tmp_path: Path) -> None:
    config = namesrv_config(tmp_path)
    config.kv_config_file.parent.mkdir(parents=True)
    config.kv_config_file.write_text(
        '{\n\t"configTable":{\n\t\t"ORDER_TOPIC_CONFIG":{\n\t\t\t"T":"broker-a:4"\n\t\t}\n\t}\n}'
    )
    controller = NamesrvController(config)
    await controller.start()
    async with RemotingClient() as client:
        got = await Namesrv(controller, client).call(
            RequestCode.GET_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "T"}
        )
    await controller.stop()
    assert got.ext_fields == {"value": "broker-a:4"}


async def test_corrupt_kv_config_stops_start_up_with_its_path(tmp_path: Path) -> None:
    config = namesrv_config(tmp_path)
    config.kv_config_file.parent.mkdir(parents=True)
    config.kv_config_file.write_text('{"configTable":')
    with pytest.raises(ValueError, match=r"kvConfig\.json: not a KV config file"):
        await NamesrvController(config).start()


def golden(prefix: str, header: str, body: bytes = b"") -> bytes:
    return bytes.fromhex(prefix) + header.encode() + body


async def exchange(port: int, request: bytes) -> bytes:
    """Send raw request bytes, return the raw bytes of one response frame."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    head = await asyncio.wait_for(reader.readexactly(4), 5)
    rest = await asyncio.wait_for(reader.readexactly(int.from_bytes(head, "big")), 5)
    writer.close()
    return head + rest


async def test_byte_for_byte_golden_route_exchanges(namesrv: Namesrv) -> None:
    await namesrv.register({"GoldenTopic": 4})
    port = namesrv.controller.port
    for version, opaque, prefix, body in (
        (121, 3, "0000014c0000005f", ROUTE_V121),
        (401, 4, "0000014e0000005f", ROUTE_V401),
    ):
        request = golden(
            "0000008900000085",
            f'{{"code":105,"extFields":{{"topic":"GoldenTopic"}},"flag":0,"language":"JAVA","opaque":{opaque},'
            f'"serializeTypeCurrentRPC":"JSON","version":{version}}}',
        )
        expected = golden(
            prefix,
            f'{{"code":0,"flag":1,"language":"JAVA","opaque":{opaque},"serializeTypeCurrentRPC":"JSON","version":409}}',
            body,
        )
        assert await exchange(port, request) == expected
    cluster = golden(
        "0000007400000070",
        '{"code":106,"extFields":{},"flag":0,"language":"JAVA","opaque":1,"serializeTypeCurrentRPC":"JSON","version":409}',
    )
    assert await exchange(port, cluster) == golden(
        "0000010f0000005f",
        '{"code":0,"flag":1,"language":"JAVA","opaque":1,"serializeTypeCurrentRPC":"JSON","version":409}',
        b'{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"127.0.0.1:10911"},"brokerName":"broker-a",'
        b'"cluster":"DefaultCluster"}},"clusterAddrTable":{"DefaultCluster":["broker-a"]}}',
    )
    delete = golden(
        "0000008900000085",
        '{"code":216,"extFields":{"topic":"GoldenTopic"},"flag":0,"language":"JAVA","opaque":8,'
        '"serializeTypeCurrentRPC":"JSON","version":409}',
    )
    assert await exchange(port, delete) == golden(
        "000000630000005f",
        '{"code":0,"flag":1,"language":"JAVA","opaque":8,"serializeTypeCurrentRPC":"JSON","version":409}',
    )


async def test_large_registration_while_lookups_continue(namesrv: Namesrv) -> None:
    await namesrv.register({"Hot": 4})
    big = {f"Topic{i:05d}": 8 for i in range(4000)}  # > LARGE_BODY: decoded off the event loop
    async with RemotingClient() as broker_side:
        registration = asyncio.ensure_future(
            namesrv.register(big, broker_name="broker-b", broker_addr="127.0.0.2:10911", client=broker_side)
        )
        lookups = [
            await namesrv.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Hot"}) for _ in range(20)
        ]
        assert (await registration).code == 0
        assert {r.code for r in lookups} == {0}
        route = await namesrv.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Topic03999"})
        assert TopicRouteData.loads(route.body).queue_datas[0].broker_name == "broker-b"


async def test_namesrv_config_has_rocketmq_keys_and_keeps_inert_ones(namesrv: Namesrv) -> None:
    config = namesrv.controller.config
    got = parse_properties((await namesrv.call(RequestCode.GET_NAMESRV_CONFIG)).body.decode())
    assert set(NamesrvConfig.ROCKETMQ_DEFAULTS) <= set(got)  # NamesrvConfig + NettyServerConfig
    assert got["kvConfigPath"] == str(config.kv_config_file) and got["configStorePath"] == str(
        config.config_store_file
    )
    assert got["serverWorkerThreads"] == "8"  # RocketMQ's default for a key we do not act on
    ok = await namesrv.call(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"serverWorkerThreads=16\n")
    assert ok.code == ResponseCode.SUCCESS  # a RocketMQ key: accepted, not refused as unknown
    assert (
        parse_properties((await namesrv.call(RequestCode.GET_NAMESRV_CONFIG)).body.decode())[
            "serverWorkerThreads"
        ]
        == "16"
    )
    assert "serverWorkerThreads=16" in config.config_store_file.read_text().splitlines()
    unknown = await namesrv.call(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"noSuchKey=1\n")
    assert unknown.code == ResponseCode.SYSTEM_ERROR and "noSuchKey" in (unknown.remark or "")


async def test_the_start_line_names_a_listen_host_the_file_set(tmp_path: Path) -> None:
    """A NameServer on 127.0.0.4 (standing in for another host) said it listened there "by the default:
    loopback only", as if the file's listenHost had not been read."""
    controller = NamesrvController(namesrv_config(tmp_path, listen_host="127.0.0.4"))
    await controller.start()
    try:
        line = controller.listening()
        assert f"127.0.0.4:{controller.port} (listenHost=127.0.0.4)" in line and "default" not in line, line
    finally:
        await controller.stop()
    assert "the default" in NamesrvController(namesrv_config(tmp_path / "plain")).listening()
