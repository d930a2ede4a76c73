"""Loopback unless told otherwise, and protected mode: with ACL off and a listener beyond loopback, a
peer off loopback may send and consume but not change data or configuration."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from daemon.broker.bodies import (
    ConsumerData,
    HeartbeatData,
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageQueue,
)
from daemon.broker.config import BrokerConfig, load_broker_config
from daemon.broker.headers import (
    ConsumerSendMsgBackRequestHeader,
    PopMessageRequestHeader,
    PullMessageRequestHeader,
)
from daemon.namesrv.config import NamesrvConfig
from daemon.namesrv.controller import NamesrvController
from daemon.protect import (
    PROTECTED_CODES,
    binds_beyond_loopback,
    is_loopback,
    is_own_address,
    protection,
    refusal,
)
from daemon.remoting.bodies import DataVersion, RegisterBrokerBody, TopicConfigSerializeWrapper
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.headers import RegisterBrokerRequestHeader
from daemon.safe_config import FORCE_FIELD
from store.models import SubscriptionGroupConfig
from store.names import REVIVE_TOPIC_PREFIX, SCHEDULE_TOPIC, TIMER_TOPIC, TRANS_HALF_TOPIC
from tests.dledger.test_single import dledger_keys
from tests.support.broker import send_fields, start_broker, start_cluster, stop_cluster
from tests.support.netns import peer_namespace
from tests.support.waiting import wait_until

R = RequestCode


def test_the_decision_on_addresses() -> None:
    for ip in ("127.0.0.1", "127.8.9.10", "::1", "::ffff:127.0.0.1"):
        assert is_loopback(ip) and refusal(ip, R.UPDATE_AND_CREATE_TOPIC) is None
    for ip in ("10.0.0.2", "192.168.1.5", "::ffff:10.0.0.2", "fe80::1%eth0", "2001:db8::1", "", "?"):
        assert not is_loopback(ip)
        remark = refusal(ip, R.DELETE_TOPIC_IN_BROKER)
        assert remark is not None and "aclEnable=true" in remark and "protectedMode=false" in remark
    for code in (R.SEND_MESSAGE, R.SEND_MESSAGE_V2, R.SEND_BATCH_MESSAGE, R.PULL_MESSAGE, R.HEART_BEAT,
                 R.UPDATE_CONSUMER_OFFSET, R.REGISTER_BROKER, R.UNREGISTER_BROKER, R.QUERY_DATA_VERSION,
                 R.GET_ROUTEINFO_BY_TOPIC, R.GET_BROKER_CONFIG, R.END_TRANSACTION):  # fmt: skip
        assert refusal("10.0.0.2", code) is None, code
    for code in (R.UPDATE_BROKER_CONFIG, R.UPDATE_NAMESRV_CONFIG, R.PUT_KV_CONFIG, R.DELETE_EXPIRED_COMMITLOG,
                 R.CLEAN_EXPIRED_CONSUMEQUEUE, R.INVOKE_BROKER_TO_RESET_OFFSET, R.WIPE_WRITE_PERM_OF_BROKER,
                 R.ADD_WRITE_PERM_OF_BROKER, R.DELETE_TOPIC_IN_NAMESRV, R.UPDATE_AND_CREATE_ACL_CONFIG,
                 R.GET_BROKER_CLUSTER_ACL_CONFIG, R.DELETE_SUBSCRIPTIONGROUP):  # fmt: skip
        assert code in PROTECTED_CODES
    # this machine over another of its addresses (mqctl connecting to the address a broker registered)
    assert refusal("10.0.0.5", R.UPDATE_AND_CREATE_TOPIC, local_ip="10.0.0.5") is None
    assert refusal("10.0.0.6", R.UPDATE_AND_CREATE_TOPIC, local_ip="10.0.0.5") is not None
    assert refusal("", R.UPDATE_AND_CREATE_TOPIC, local_ip="") is not None
    assert is_own_address("127.0.0.1") and not is_own_address("192.0.2.1") and not is_own_address("")
    assert (
        binds_beyond_loopback("0.0.0.0") and binds_beyond_loopback("::") and binds_beyond_loopback("10.1.1.1")
    )
    assert not binds_beyond_loopback("127.0.0.1") and not binds_beyond_loopback("::1")
    assert protection(enabled=True, acl_enable=False, hosts=["0.0.0.0"]).active
    assert not protection(enabled=True, acl_enable=False, hosts=["127.0.0.1"]).active
    assert not protection(enabled=True, acl_enable=True, hosts=["0.0.0.0"]).active
    assert not protection(enabled=False, acl_enable=False, hosts=["0.0.0.0"]).active


def test_daemons_listen_on_loopback_unless_told_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("MQCTL_LISTEN_HOST", "MQCTL_BROKER_IP1"):
        monkeypatch.delenv(var, raising=False)
    plain = BrokerConfig(store_path_root_dir=str(tmp_path))
    assert (plain.listen_host, plain.broker_ip1) == ("127.0.0.1", "127.0.0.1")
    assert "loopback only" in plain.listen_why and "listenHost=0.0.0.0" in plain.listen_why
    assert NamesrvConfig().listen_host == "127.0.0.1"
    # a RocketMQ broker.conf has no listenHost: its brokerIP1 says clients reach it there, as 4.9.8 binds
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerClusterName=DefaultCluster\nbrokerName=broker-a\nbrokerIP1=10.1.2.3\n")
    rocketmq = load_broker_config(conf, {"store_path_root_dir": str(tmp_path)})
    assert (rocketmq.listen_host, rocketmq.broker_ip1) == ("0.0.0.0", "10.1.2.3")
    assert "brokerIP1=10.1.2.3" in rocketmq.listen_why
    told = load_broker_config(conf, {"store_path_root_dir": str(tmp_path), "listen_host": "127.0.0.1"})
    assert told.listen_host == "127.0.0.1"
    monkeypatch.setenv("MQCTL_LISTEN_HOST", "0.0.0.0")
    assert load_broker_config(None, {"store_path_root_dir": str(tmp_path)}).listen_host == "0.0.0.0"


@pytest.mark.slow
async def test_an_admin_write_from_a_peer_off_loopback_is_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The same admin write from 127.0.0.1 passes and from a network namespace's peer is refused with
    the remark; that peer's sends still go through. With protectedMode=false the peer's write passes,
    but its mqctlForce marker still does not shorten retention (only the broker's own host may)."""
    with peer_namespace() as peer:
        namesrv = NamesrvController(
            NamesrvConfig(listen_host="0.0.0.0", listen_port=0, data_dir=tmp_path / "ns-open")
        )
        await namesrv.start()
        with caplog.at_level(logging.INFO, logger="daemon.broker.broker"):
            handle = await start_cluster(tmp_path / "protected", listen_host="0.0.0.0")
        try:
            started = [r.getMessage() for r in caplog.records if "serving at" in r.getMessage()]
            assert started and "listening on 0.0.0.0:" in started[0] and "protected mode on" in started[0]
            addr = f"{peer.host_ip}:{handle.broker.server.port}"

            def create(topic: str) -> tuple[int, dict[str, str], str]:
                fields = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": "1", "writeQueueNums": "1",
                          "perm": "6", "topicFilterType": "SINGLE_TAG"}  # fmt: skip
                return (R.UPDATE_AND_CREATE_TOPIC, fields, "")

            local = await handle.call(*create("FromLoopback")[:2])
            assert local.code == ResponseCode.SUCCESS, local.remark
            # this machine through another of its addresses (the one a broker on 0.0.0.0 registers)
            own = await handle.client.invoke(addr, RemotingCommand.request(*create("FromOwnAddress")[:2]))
            assert own.code == ResponseCode.SUCCESS, own.remark
            (refused, sent, config, kv) = await peer.send(
                addr,
                [
                    create("FromPeer"),
                    (R.SEND_MESSAGE_V2, send_fields("FromLoopback"), "hello"),
                    (R.UPDATE_BROKER_CONFIG, {}, "brokerPermission=4\n"),
                    (R.PUT_KV_CONFIG, {"namespace": "N", "key": "k", "value": "v"}, ""),
                ],
            )
            assert refused[0] == ResponseCode.NO_PERMISSION and config[0] == ResponseCode.NO_PERMISSION
            assert f"from {peer.peer_ip}" in refused[1]
            assert "aclEnable=true" in refused[1] and "protectedMode=false" in refused[1]
            assert sent[0] == ResponseCode.SUCCESS, sent[1]  # client traffic is untouched
            assert kv[0] == ResponseCode.REQUEST_CODE_NOT_SUPPORTED  # (a broker code check, not the guard's)
            assert (
                handle.broker.topics.get("FromPeer") is None and handle.broker.config.broker_permission == 6
            )
            (ns_put,) = await peer.send(
                f"{peer.host_ip}:{namesrv.port}",
                [(R.PUT_KV_CONFIG, {"namespace": "N", "key": "k", "value": "v"}, "")],
            )
            assert ns_put[0] == ResponseCode.NO_PERMISSION and "protectedMode=false" in ns_put[1]
            assert namesrv.kv.get("N", "k") is None
        finally:
            await stop_cluster(handle)
            await namesrv.stop()

        opened = await start_cluster(tmp_path / "opened", listen_host="0.0.0.0", protected_mode=False)
        try:
            assert not opened.broker.protection.active
            addr = f"{peer.host_ip}:{opened.broker.server.port}"
            (created, wipe) = await peer.send(
                addr,
                [create("FromPeer"), (R.UPDATE_BROKER_CONFIG, {FORCE_FIELD: "true"}, "fileReservedTime=0\n")],
            )
            assert created[0] == ResponseCode.SUCCESS and opened.broker.topics.get("FromPeer") is not None
            assert wipe[0] == ResponseCode.NO_PERMISSION and "admin-signed" in wipe[1]
            assert opened.broker.config.file_reserved_time == 72
        finally:
            await stop_cluster(opened)


@pytest.mark.slow
async def test_a_peer_off_loopback_creates_no_topic_or_group_on_use(tmp_path: Path) -> None:
    """Auto-creation is creation: a peer in a network namespace that sends to a topic nobody made, to a
    `%RETRY%` topic of a group nobody made, or names a new group in a heartbeat or a pull creates
    nothing (one anonymous heartbeat naming thousands of groups wrote thousands of groups and retry
    topics, each persisted); the same sends from this machine still auto-create, as 4.9.8 does."""
    with peer_namespace() as peer:
        handle = await start_cluster(tmp_path, listen_host="0.0.0.0")
        try:
            addr = f"{peer.host_ip}:{handle.broker.server.port}"
            beat = HeartbeatData("peer@1", [], [ConsumerData(f"PeerGroup{i}") for i in range(3)])
            pull = PullMessageRequestHeader("PullGroup", "TBW102", 0, 0, 32, 0x4, 0, 0, 0, "*", "TAG")
            popped = PopMessageRequestHeader("PopGroup", "TBW102", -1, 1, 60_000, 0, 0, 1, "TAG", "*")
            sent, retry, beat_answer, pulled, pop_answer = await peer.send(
                addr,
                [
                    (R.SEND_MESSAGE_V2, send_fields("PeerTopic"), "hello"),
                    (R.SEND_MESSAGE_V2, send_fields("%RETRY%PeerGroup0"), "hello"),
                    (R.HEART_BEAT, {}, beat.dumps().decode()),
                    (R.PULL_MESSAGE, pull.to_ext_fields(), ""),
                    (R.POP_MESSAGE, popped.to_ext_fields(), ""),
                ],
            )
            for answer in (sent, retry):
                assert answer[0] == ResponseCode.TOPIC_NOT_EXIST, answer
                assert "protected mode" in answer[1] and f"{peer.peer_ip} may not create" in answer[1]
            assert beat_answer[0] == ResponseCode.SUCCESS  # the consumer is served, its group not made
            assert pulled[0] == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, pulled
            assert pop_answer[0] == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, pop_answer
            broker = handle.broker
            made = [t for t in ("PeerTopic", "%RETRY%PeerGroup0") if broker.topics.get(t) is not None]
            made += [g for g in ("PeerGroup0", "PullGroup", "PopGroup") if broker.groups.get(g) is not None]
            assert made == []
            local = await handle.call(R.SEND_MESSAGE_V2, send_fields("PeerTopic"), b"hello")
            assert local.code == ResponseCode.SUCCESS and broker.topics.get("PeerTopic") is not None
            local_beat = await handle.heartbeat("local@1", "PeerGroup0", ["PeerTopic"])
            assert local_beat.code == ResponseCode.SUCCESS and broker.groups.get("PeerGroup0") is not None
            (again,) = await peer.send(addr, [(R.SEND_MESSAGE_V2, send_fields("PeerTopic"), "hello")])
            assert again[0] == ResponseCode.SUCCESS, again  # made from this machine, it serves the peer
        finally:
            await stop_cluster(handle)


@pytest.mark.slow
async def test_a_peer_off_loopback_reads_no_parking_topic(tmp_path: Path) -> None:
    """The broker parks every producer's delayed, timer and half messages in topics of its own: a peer
    off the machine that pulled the timer topic learnt each pending timer message's unique key, its
    recall handle (and read every producer's parked messages). It pulls and queries none of them now;
    this machine's tools still do."""
    with peer_namespace() as peer:
        handle = await start_cluster(tmp_path, listen_host="0.0.0.0")
        try:
            addr = f"{peer.host_ip}:{handle.broker.server.port}"
            assert (await handle.heartbeat("local@1", "Reader", ["TBW102"])).code == ResponseCode.SUCCESS
            due = str(int(time.time() * 1000) + 600_000)
            timed = await handle.call(
                R.SEND_MESSAGE_V2, send_fields("Timed", props={"TIMER_DELIVER_MS": due}), b"x"
            )
            assert timed.code == ResponseCode.SUCCESS, timed.remark
            await wait_until(lambda: handle.broker.timers.pending == 1, timeout=10)
            parked = (TIMER_TOPIC, SCHEDULE_TOPIC, TRANS_HALF_TOPIC, REVIVE_TOPIC_PREFIX + "DefaultCluster")

            def pull(topic: str) -> tuple[int, dict[str, str], str]:
                header = PullMessageRequestHeader("Reader", topic, 0, 0, 32, 0x4, 0, 0, 0, "*", "TAG")
                return (R.PULL_MESSAGE, header.to_ext_fields(), "")

            query = {"topic": TIMER_TOPIC, "key": "k", "maxNum": "32", "beginTimestamp": "0",
                     "endTimestamp": str(2**62)}  # fmt: skip
            found = handle.broker.store.look_message_by_offset(0)
            assert found is not None and found.stored.topic == TIMER_TOPIC
            # by its CommitLog offset: viewed, or copied to the peer's group's retry topic to pull
            view = (R.VIEW_MESSAGE_BY_ID, {"offset": "0"}, "")
            back = (R.CONSUMER_SEND_MSG_BACK, {"offset": "0", "group": "Reader", "delayLevel": "0"}, "")
            answers = await peer.send(
                addr, [*map(pull, parked), (R.QUERY_MESSAGE, query, ""), view, back, pull("TBW102")]
            )
            for answer in answers[:-1]:
                assert answer[0] == ResponseCode.NO_PERMISSION, answer
                assert "protected mode" in answer[1] and "parks others' messages" in answer[1]
            assert answers[-1][0] == ResponseCode.PULL_NOT_FOUND, answers[-1]  # client topics: as before
            local = await handle.call(*pull(TIMER_TOPIC)[:2])
            assert local.code != ResponseCode.NO_PERMISSION, local.remark
        finally:
            await stop_cluster(handle)


@pytest.mark.slow
async def test_a_peer_off_loopback_commits_offsets_only_for_existing_groups(tmp_path: Path) -> None:
    """A commit for a group that does not exist would make one in consumerOffset.json: a peer off the
    machine may not (a consumer's group exists by its first heartbeat), and its commits of an existing
    group's queues pass as before."""
    with peer_namespace() as peer:
        handle = await start_cluster(tmp_path, listen_host="0.0.0.0")
        try:
            addr = f"{peer.host_ip}:{handle.broker.server.port}"
            await handle.create_topic("Ledger", 2)
            assert (await handle.heartbeat("local@1", "Known", ["Ledger"])).code == ResponseCode.SUCCESS

            def commit(group: str) -> tuple[int, dict[str, str], str]:
                return (R.UPDATE_CONSUMER_OFFSET, {"consumerGroup": group, "topic": "Ledger", "queueId": "1",
                                                   "commitOffset": "7"}, "")  # fmt: skip

            unknown, known = await peer.send(addr, [commit("Invented"), commit("Known")])
            assert unknown[0] == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST and "protected mode" in unknown[1]
            assert known[0] == ResponseCode.SUCCESS, known
            offsets = handle.broker.offsets
            assert (
                offsets.query_offset("Invented", "Ledger", 1) < 0
                and offsets.query_offset("Known", "Ledger", 1) == 7
            )
        finally:
            await stop_cluster(handle)


@pytest.mark.slow
async def test_a_peer_off_loopback_makes_only_an_existing_groups_retry_and_dlq_topics(tmp_path: Path) -> None:
    """What on-use creation makes for a peer off the machine: for a group that exists, its `%RETRY%` topic
    (at its heartbeat, as 4.9.8's; a 4.9.8 push consumer rebalances it, and its failed messages come back
    through it) and its `%DLQ%` topic (at a send-back past its retries); for a group that does not
    exist, nothing. Both are bounded by the groups an operator made."""
    with peer_namespace() as peer:
        handle = await start_cluster(tmp_path, listen_host="0.0.0.0")
        try:
            broker = handle.broker
            addr = f"{peer.host_ip}:{broker.server.port}"
            broker.groups.put(SubscriptionGroupConfig("Known"))
            sent = await handle.call(R.SEND_MESSAGE_V2, send_fields("Payments"), b"x")  # CommitLog offset 0
            assert sent.code == ResponseCode.SUCCESS, sent.remark
            beat = HeartbeatData("peer@1", [], [ConsumerData("Known"), ConsumerData("Invented")])

            def back(group: str) -> tuple[int, dict[str, str], str]:
                header = ConsumerSendMsgBackRequestHeader(0, group, -1, None, "Payments")
                return (R.CONSUMER_SEND_MSG_BACK, {k: str(v) for k, v in header.to_ext_fields().items()}, "")

            beaten, known, invented = await peer.send(
                addr, [(R.HEART_BEAT, {}, beat.dumps().decode()), back("Known"), back("Invented")]
            )
            assert beaten[0] == ResponseCode.SUCCESS and known[0] == ResponseCode.SUCCESS, (beaten, known)
            assert invented[0] == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, invented
            made = {t for t in broker.topics.table if "Known" in t or "Invented" in t}
            assert made == {"%RETRY%Known", "%DLQ%Known"}
            assert broker.groups.get("Invented") is None
        finally:
            await stop_cluster(handle)


@pytest.mark.slow
async def test_a_peer_off_loopback_locks_only_as_a_consumer_it_registered(tmp_path: Path) -> None:
    """4.9.8 grants LOCK_BATCH_MQ to anyone: a peer off the machine that locked every queue of an orderly
    group (or unlocked a member's, naming its client id) starved the group's consumers for the lock's
    60 s. In protected mode a peer locks and unlocks only as the consumer it registered on the same
    connection (4.9.8's rebalance heartbeats before it locks); this machine's clients as before."""
    with peer_namespace() as peer:
        handle = await start_cluster(tmp_path, listen_host="0.0.0.0")
        try:
            addr = f"{peer.host_ip}:{handle.broker.server.port}"
            queues = [MessageQueue("Orders", "broker-a", q) for q in range(4)]
            await handle.create_topic("Orders", 4)
            assert (await handle.heartbeat("local@1", "Orderly", ["Orders"])).code == ResponseCode.SUCCESS

            def lock_body(client_id: str, mqs: list[MessageQueue] = queues) -> str:
                return LockBatchRequestBody("Orderly", client_id, mqs).dumps().decode()

            beat = HeartbeatData("peer@1", [], [ConsumerData("Orderly")]).dumps().decode()
            anonymous, as_victim, beat_answer, as_itself, victims_unlock = await peer.send(
                addr,
                [
                    (R.LOCK_BATCH_MQ, {}, lock_body("peer@1")),
                    (R.LOCK_BATCH_MQ, {}, lock_body("victim@1")),
                    (R.HEART_BEAT, {}, beat),
                    (R.LOCK_BATCH_MQ, {}, lock_body("peer@1", queues[:1])),
                    (R.UNLOCK_BATCH_MQ, {}, lock_body("victim@1")),
                ],
            )
            for refused in (anonymous, as_victim, victims_unlock):
                assert refused[0] == ResponseCode.NO_PERMISSION, refused
                assert "protected mode" in refused[1] and "group Orderly" in refused[1]
            assert beat_answer[0] == ResponseCode.SUCCESS and as_itself[0] == ResponseCode.SUCCESS, as_itself
            # the peer holds the queue it locked as itself, nothing more; this machine's consumer the rest
            local = await handle.call(R.LOCK_BATCH_MQ, {}, lock_body("victim@1").encode())
            assert local.code == ResponseCode.SUCCESS, local.remark
            assert LockBatchResponseBody.loads(local.body).lock_ok_m_q_set == queues[1:]
            # a heartbeat naming the member's client id does not make its locks the peer's to release
            beat = HeartbeatData("victim@1", [], [ConsumerData("Orderly")]).dumps().decode()
            answers = await peer.send(
                addr, [(R.HEART_BEAT, {}, beat), (R.UNLOCK_BATCH_MQ, {}, lock_body("victim@1"))]
            )
            assert all(code == ResponseCode.SUCCESS for code, _ in answers), answers
            other = await handle.call(R.LOCK_BATCH_MQ, {}, lock_body("other@1").encode())
            assert LockBatchResponseBody.loads(other.body).lock_ok_m_q_set == []
            # nor does leaving under that id: a member's leave releases the locks taken from its host only
            leave = {"clientID": "victim@1", "consumerGroup": "Orderly"}
            answers = await peer.send(addr, [(R.HEART_BEAT, {}, beat), (R.UNREGISTER_CLIENT, leave, "")])
            assert all(code == ResponseCode.SUCCESS for code, _ in answers), answers
            other = await handle.call(R.LOCK_BATCH_MQ, {}, lock_body("other@1").encode())
            assert LockBatchResponseBody.loads(other.body).lock_ok_m_q_set == []
        finally:
            await stop_cluster(handle)


@pytest.mark.slow
async def test_a_peer_off_loopback_unregisters_no_live_broker_but_its_own(tmp_path: Path) -> None:
    """Registration stays open in protected mode (it is a broker's client traffic), but a live broker is
    unregistered only over its own connection: a peer's UNREGISTER_BROKER naming it (one packet taking a
    master out of every route) is refused; one naming an address nobody holds passes."""
    with peer_namespace() as peer:
        namesrv = NamesrvController(
            NamesrvConfig(listen_host="0.0.0.0", listen_port=0, data_dir=tmp_path / "ns-open")
        )
        await namesrv.start()
        broker = await start_broker(tmp_path / "b", namesrv_addr=f"127.0.0.1:{namesrv.port}")
        try:
            assert broker.addr in namesrv.routes.broker_live_table

            def unregister(addr: str) -> tuple[int, dict[str, str], str]:
                fields = {"brokerName": "broker-a", "brokerAddr": addr, "clusterName": "DefaultCluster",
                          "brokerId": "0"}  # fmt: skip
                return (R.UNREGISTER_BROKER, fields, "")

            (theirs,) = await peer.send(f"{peer.host_ip}:{namesrv.port}", [unregister(broker.addr)])
            assert theirs[0] == ResponseCode.NO_PERMISSION and "only it can unregister" in theirs[1], theirs
            assert broker.addr in namesrv.routes.broker_live_table
            (own,) = await peer.send(f"{peer.host_ip}:{namesrv.port}", [unregister(f"{peer.peer_ip}:10911")])
            assert own[0] == ResponseCode.SUCCESS, own
        finally:
            await broker.stop()
            await namesrv.stop()


@pytest.mark.slow
async def test_a_stranger_claiming_a_newer_term_takes_no_dledger_masters_place(tmp_path: Path) -> None:
    """Registration stays open in protected mode, and a newer DLedger term lets a new leader take a live
    master's place in the routes: a stranger's registration of brokerId 0 with a term of a million, from
    a network namespace, must not put the stranger in the group's routes."""
    with peer_namespace() as peer:
        namesrv = NamesrvController(
            NamesrvConfig(listen_host="0.0.0.0", listen_port=0, data_dir=tmp_path / "ns-open")
        )
        await namesrv.start()
        broker = await start_broker(
            tmp_path / "b", namesrv_addr=f"127.0.0.1:{namesrv.port}", **dledger_keys()
        )
        try:

            def master() -> str | None:
                group = namesrv.routes.broker_addr_table.get("broker-a")
                return group.broker_addrs.get(0) if group is not None else None

            await wait_until(lambda: master() == broker.addr, timeout=15)
            stranger = f"{peer.peer_ip}:10911"
            header = RegisterBrokerRequestHeader(
                "broker-a", stranger, "DefaultCluster", f"{peer.peer_ip}:10912", 0, d_ledger_term=10**6
            )
            body = RegisterBrokerBody(TopicConfigSerializeWrapper({}, DataVersion(1, 1))).encode().decode()
            fields = {k: str(v) for k, v in header.to_ext_fields().items()}
            (taken,) = await peer.send(f"{peer.host_ip}:{namesrv.port}", [(R.REGISTER_BROKER, fields, body)])
            assert taken[0] == ResponseCode.NO_PERMISSION, taken
            assert master() == broker.addr
        finally:
            await broker.stop()
            await namesrv.stop()


@pytest.mark.slow
async def test_a_peer_off_loopback_takes_no_restarting_brokers_place(tmp_path: Path) -> None:
    """A broker's restart unregisters it: a peer off the machine that registered `broker-a` id 0 in
    that moment, at the broker's address with its own HA address (or at its own address), kept the
    place while its connection lived, and the broker, back, was refused. Now the first is refused as
    not the peer's address, the second as a place another host left a moment ago; the broker returns."""
    with peer_namespace() as peer:
        namesrv = NamesrvController(
            NamesrvConfig(listen_host="0.0.0.0", listen_port=0, data_dir=tmp_path / "ns-open")
        )
        await namesrv.start()
        ns_addr = f"127.0.0.1:{namesrv.port}"
        broker = await start_broker(tmp_path / "b", namesrv_addr=ns_addr)
        real = broker.addr

        def master() -> str | None:
            group = namesrv.routes.broker_addr_table.get("broker-a")
            return group.broker_addrs.get(0) if group is not None else None

        try:
            assert master() == real
            await broker.stop()
            assert master() is None
            body = RegisterBrokerBody(TopicConfigSerializeWrapper({}, DataVersion(1, 1))).encode().decode()

            def squat(addr: str) -> tuple[int, dict[str, str], str]:
                header = RegisterBrokerRequestHeader(
                    "broker-a", addr, "DefaultCluster", f"{peer.peer_ip}:1", 0
                )
                return (R.REGISTER_BROKER, {k: str(v) for k, v in header.to_ext_fields().items()}, body)

            theirs, own = await peer.send(
                f"{peer.host_ip}:{namesrv.port}", [squat(real), squat(f"{peer.peer_ip}:1")]
            )
            assert theirs[0] == ResponseCode.NO_PERMISSION and "brokerIP1" in theirs[1], theirs
            assert own[0] == ResponseCode.NO_PERMISSION and "brokerExpireMs" in own[1], own
            assert master() is None
            broker = await start_broker(
                tmp_path / "b", namesrv_addr=ns_addr, listen_port=int(real.rpartition(":")[2])
            )
            await wait_until(lambda: master() == real, timeout=15)
        finally:
            await broker.stop()
            await namesrv.stop()


@pytest.mark.parametrize(
    ("overrides", "warned"),
    [
        ({"listen_host": "0.0.0.0"}, True),
        ({"listen_host": "0.0.0.0", "protected_mode": False}, True),
        ({"listen_host": "127.0.0.1"}, False),
        ({"listen_host": "0.0.0.0", "acl_enable": True}, False),
    ],
    ids=["protected", "open", "loopback", "acl"],
)
async def test_a_namesrv_beyond_loopback_without_acl_says_anyone_may_register(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, overrides: dict[str, object], warned: bool
) -> None:
    """Registration is a broker's client traffic, open without ACL: any peer can register a broker of its
    own with queues of existing topics and take a share of their sends. The start says so."""
    namesrv = NamesrvController(NamesrvConfig(listen_port=0, data_dir=tmp_path / "ns", **overrides))  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="daemon.namesrv.controller"):
        await namesrv.start()
    await namesrv.stop()
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("any peer that reaches it can register a broker" in line for line in lines) == warned, lines
