"""An outsider on loopback against the ACL: what must keep holding beyond the happy paths."""

from __future__ import annotations

import json
import logging
import os
import stat
import struct
from pathlib import Path

import pytest

from daemon.acl.admin import CreateAccessConfigRequestHeader
from daemon.broker.bodies import MessageQueue
from daemon.broker.broker import Broker
from daemon.remoting.codes import RequestCode, ResponseCode
from store.message import Message
from store.record import encode_record
from tests.support.acl import ADMIN_AK, ADMIN_SK, USER_AK, USER_SK, as_account, write_acl
from tests.support.broker import BrokerClient, BrokerHandle, ClusterHandle, start_cluster, stop_cluster


async def test_acl_edits_keep_the_file_owner_only(acl_cluster: ClusterHandle, acl_home: Path) -> None:
    """The yml holds every secret key: an edit over the wire must not leave it readable by others."""
    path = acl_home / "conf" / "plain_acl.yml"
    os.chmod(path, 0o600)
    admin = await as_account(acl_cluster, ADMIN_AK, ADMIN_SK)
    try:
        header = CreateAccessConfigRequestHeader("newuser1", "newsecret1", default_topic_perm="PUB")
        r = await admin.call(RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, dict(header.to_ext_fields()))
        assert r.code == ResponseCode.SUCCESS, r.remark
        assert "newsecret1" in path.read_text()
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    finally:
        await admin.client.close()


async def test_a_new_acl_file_is_owner_only(acl_cluster: ClusterHandle, acl_home: Path) -> None:
    path = acl_home / "conf" / "plain_acl.yml"
    text = path.read_text()
    path.unlink()
    (acl_home / "conf" / "acl").mkdir()
    (acl_home / "conf" / "acl" / "admins.yml").write_text(text)  # the admin's account lives on here
    admin = await as_account(acl_cluster, ADMIN_AK, ADMIN_SK)
    try:
        header = CreateAccessConfigRequestHeader("newuser1", "newsecret1")
        r = await admin.call(RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, dict(header.to_ext_fields()))
        assert r.code == ResponseCode.SUCCESS, r.remark
        assert stat.S_IMODE(path.stat().st_mode) == 0o600  # created for the new account
    finally:
        await admin.client.close()


async def test_no_message_read_by_offset_from_a_topic_without_sub(acl_cluster: ClusterHandle) -> None:
    """VIEW_MESSAGE_BY_ID and CONSUMER_SEND_MSG_BACK name a CommitLog offset, not a topic: an account
    with SUB on its own group only must not read (or copy into its retry topic) a DENY topic's message."""
    broker = acl_cluster.broker
    broker.topics.create_system_like("TopicA", 1, 6)
    broker.topics.create_system_like("TopicDeny", 1, 6)
    admin = await as_account(acl_cluster, ADMIN_AK, ADMIN_SK)
    user = await as_account(acl_cluster, USER_AK, USER_SK)
    try:
        secret_at = broker.store.max_phy_offset
        assert (await admin.send("TopicDeny", b"top-secret")).code == ResponseCode.SUCCESS
        mine_at = broker.store.max_phy_offset
        assert (await user.send("TopicA", b"mine")).code == ResponseCode.SUCCESS

        view = await user.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(secret_at)})
        assert view.code == ResponseCode.NO_PERMISSION and b"top-secret" not in view.body, view.remark
        assert "TopicDeny" in (view.remark or "")
        back = {"offset": str(secret_at), "group": "GroupA", "delayLevel": "-1", "originTopic": "TopicA"}
        sent_back = await user.call(RequestCode.CONSUMER_SEND_MSG_BACK, back)
        assert sent_back.code == ResponseCode.NO_PERMISSION, sent_back.remark
        assert broker.store.get_max_offset("%DLQ%GroupA", 0) == 0

        own = await user.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(mine_at)})
        assert own.code == ResponseCode.SUCCESS and b"mine" in own.body, own.remark
        back["offset"] = str(mine_at)
        assert (await user.call(RequestCode.CONSUMER_SEND_MSG_BACK, back)).code == ResponseCode.SUCCESS
        admin_view = await admin.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(secret_at)})
        assert admin_view.code == ResponseCode.SUCCESS and b"top-secret" in admin_view.body
    finally:
        await admin.client.close()
        await user.client.close()


async def test_a_record_forged_inside_a_body_does_not_pass_for_a_message(acl_cluster: ClusterHandle) -> None:
    """A body holding a record header that names TopicA (body-less: no CRC to match) and whose size
    runs on into the next message: viewed at its offset, it would serve that message's bytes."""
    broker = acl_cluster.broker
    broker.topics.create_system_like("TopicA", 1, 6)
    broker.topics.create_system_like("TopicDeny", 1, 6)
    admin = await as_account(acl_cluster, ADMIN_AK, ADMIN_SK)
    user = await as_account(acl_cluster, USER_AK, USER_SK)

    def forge(at: int, extra: int) -> bytes:
        record = bytearray(
            encode_record(
                Message("TopicA", b""),
                queue_offset=0,
                physical_offset=at,
                store_timestamp=0,
                store_host=("127.0.0.1", 1),
            )
        )
        struct.pack_into(">i", record, 0, len(record) + extra)  # TOTALSIZE
        struct.pack_into(">h", record, len(record) - 2, extra)  # the properties run on
        return b"\xff" * 8 + bytes(record)

    try:
        decoy_at = broker.store.max_phy_offset  # the same shape first: where the body lands, the size
        assert (await user.send("TopicA", forge(0, 0))).code == ResponseCode.SUCCESS
        decoy = bytes(broker.store.look_message_by_offset(decoy_at).raw)  # type: ignore[union-attr]
        body_pos = decoy.index(forge(0, 0))
        mine_at = broker.store.max_phy_offset
        at = mine_at + body_pos + 8
        tail = len(decoy) - body_pos - len(forge(0, 0))
        assert (await user.send("TopicA", forge(at, tail + 120))).code == ResponseCode.SUCCESS
        assert (await admin.send("TopicDeny", b"top-secret")).code == ResponseCode.SUCCESS
        view = await user.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(at)})
        assert view.code == ResponseCode.NO_PERMISSION and b"top-secret" not in view.body, view.remark
    finally:
        await admin.client.close()
        await user.client.close()


STRANGER_ACL = f"""\
accounts:
  - accessKey: {ADMIN_AK}
    secretKey: {ADMIN_SK}
    admin: true
  - accessKey: stranger
    secretKey: stranger-secret
    defaultTopicPerm: SUB
    defaultGroupPerm: DENY
    groupPerms: [GroupMine=SUB]
"""


async def test_queue_locks_and_direct_consumption_need_the_group_or_admin(
    tmp_path: Path, acl_home: Path
) -> None:
    """UNLOCK_BATCH_MQ of another group's queues breaks its orderly consumption; CONSUME_MESSAGE_DIRECTLY
    makes its client process a message again: neither is for an account outside the group."""
    write_acl(acl_home, STRANGER_ACL)
    handle = await start_cluster(tmp_path, acl_enable=True, rocketmq_home=str(acl_home))
    stranger = await as_account(handle, "stranger", "stranger-secret")
    try:
        handle.broker.topics.create_system_like("TopicO", 1, 6)
        mqs = [{"brokerName": "broker-a", "queueId": 0, "topic": "TopicO"}]
        owner = {"consumerGroup": "GroupOther", "clientId": "owner@1", "mqSet": mqs}
        assert handle.broker.locks.try_lock_batch(
            "GroupOther", [MessageQueue("TopicO", "broker-a", 0)], "owner@1"
        )
        for code in (RequestCode.UNLOCK_BATCH_MQ, RequestCode.LOCK_BATCH_MQ):
            r = await stranger.call(code, body=json.dumps(owner).encode())
            assert r.code == ResponseCode.NO_PERMISSION and "GroupOther" in (r.remark or ""), r.remark
        assert (
            handle.broker.locks.try_lock_batch(
                "GroupOther", [MessageQueue("TopicO", "broker-a", 0)], "other@2"
            )
            == []
        )
        mine = {"consumerGroup": "GroupMine", "clientId": "me@1", "mqSet": mqs}
        locked = await stranger.call(RequestCode.LOCK_BATCH_MQ, body=json.dumps(mine).encode())
        assert locked.code == ResponseCode.SUCCESS, locked.remark
        direct = {"consumerGroup": "GroupOther", "clientId": "owner@1", "msgId": "00" * 16}
        r = await stranger.call(RequestCode.CONSUME_MESSAGE_DIRECTLY, direct)
        assert r.code == ResponseCode.NO_PERMISSION and "admin" in (r.remark or ""), r.remark
    finally:
        await stranger.client.close()
        await stop_cluster(handle)


def forged_half(at: int) -> bytes:
    """A half-message record for TopicDeny as it would sit at CommitLog offset `at` (valid CRC)."""
    half = Message(
        "RMQ_SYS_TRANS_HALF_TOPIC", b"forged", properties={"REAL_TOPIC": "TopicDeny", "REAL_QID": "0"}
    )
    return encode_record(
        half, queue_offset=0, physical_offset=at, store_timestamp=0, store_host=("127.0.0.1", 1)
    )


async def send_forged_half(client: BrokerClient, broker: Broker) -> int:
    """Send it as a TopicA body (a same-shaped decoy first shows where the body lands); its offset."""
    decoy_at = broker.store.max_phy_offset
    assert (await client.send("TopicA", forged_half(0))).code == ResponseCode.SUCCESS
    body_pos = bytes(broker.store.look_message_by_offset(decoy_at).raw).index(forged_half(0))  # type: ignore[union-attr]
    at = broker.store.max_phy_offset + body_pos
    assert (await client.send("TopicA", forged_half(at))).code == ResponseCode.SUCCESS
    return at


def end_transaction(at: int) -> dict[str, str]:
    return {
        "producerGroup": "PG",
        "tranStateTableOffset": "0",
        "commitLogOffset": str(at),
        "commitOrRollback": "8",
        "msgId": "00" * 16,
        "fromTransactionCheck": "false",
    }


async def test_end_transaction_commits_only_a_real_half_message_of_a_topic_one_may_publish_to(
    acl_cluster: ClusterHandle,
) -> None:
    """END_TRANSACTION names a CommitLog offset: a half-message record forged inside one's own message
    body (REAL_TOPIC=TopicDeny, its CRC is the sender's to compute) must not commit into TopicDeny."""
    broker = acl_cluster.broker
    broker.topics.create_system_like("TopicA", 1, 6)
    broker.topics.create_system_like("TopicDeny", 1, 6)
    user = await as_account(acl_cluster, USER_AK, USER_SK)
    try:
        at = await send_forged_half(user, broker)
        r = await user.call(RequestCode.END_TRANSACTION, end_transaction(at))
        assert r.code == ResponseCode.NO_PERMISSION, r.remark
        assert broker.store.get_max_offset("TopicDeny", 0) == 0

        half_at = broker.store.max_phy_offset  # a real half message of TopicA: its producer commits it
        sent = await user.send("TopicA", b"real", props={"TRAN_MSG": "true"})
        assert sent.code == ResponseCode.SUCCESS, sent.remark
        r = await user.call(RequestCode.END_TRANSACTION, end_transaction(half_at))
        assert r.code == ResponseCode.SUCCESS, r.remark
        assert broker.store.get_max_offset("TopicA", 0) == 3
    finally:
        await user.client.close()


async def test_a_forged_half_message_is_not_committed_with_acl_off(broker: BrokerHandle) -> None:
    broker.broker.topics.create_system_like("TopicA", 1, 6)
    broker.broker.topics.create_system_like("TopicDeny", 1, 6)
    at = await send_forged_half(broker, broker.broker)
    r = await broker.call(RequestCode.END_TRANSACTION, end_transaction(at))
    assert r.code == ResponseCode.SYSTEM_ERROR and "prepared transaction" in (r.remark or ""), r.remark
    assert broker.broker.store.get_max_offset("TopicDeny", 0) == 0


async def test_a_non_ascii_signature_is_an_ordinary_denial(
    acl_cluster: ClusterHandle, caplog: pytest.LogCaptureFixture
) -> None:
    """hmac.compare_digest raises TypeError on non-ASCII str: each such unsigned request became a
    SYSTEM_ERROR and an ERROR traceback in the log (a flood no WarningGate limits)."""
    client = await as_account(acl_cluster, None)
    try:
        with caplog.at_level(logging.WARNING):
            for signature in ("é", "\udcff"):
                fields = {"AccessKey": USER_AK, "Signature": signature, "topic": "TopicA"}
                r = await client.call(RequestCode.QUERY_CONSUMER_OFFSET, fields)
                assert r.code == ResponseCode.NO_PERMISSION and "signature" in (r.remark or ""), r.remark
        assert "Traceback" not in caplog.text and not [
            rec for rec in caplog.records if rec.levelno >= logging.ERROR
        ]
    finally:
        await client.client.close()


@pytest.mark.parametrize("signature", ["", "x" * 40])
async def test_a_giant_access_key_is_not_echoed_or_logged_whole(
    acl_cluster: ClusterHandle, caplog: pytest.LogCaptureFixture, signature: str
) -> None:
    """An anonymous peer naming a 1 MiB AccessKey (no such account) had it written back in the answer's
    remark and twice into the WARNING line (the field and the remark), a line a second: 2 MiB a second of
    log for a request a second, a full disk within the day. The key is shown cut to its start. (A header
    past MAX_REQUEST_HEADER never reaches the ACL: its connection is closed at its length.)"""
    client = await as_account(acl_cluster, None)
    giant = "K" * 200_000
    try:
        with caplog.at_level(logging.WARNING):
            fields = {"AccessKey": giant, "Signature": signature, "topic": "TopicA"}
            r = await client.call(RequestCode.QUERY_CONSUMER_OFFSET, fields)
        assert r.code == ResponseCode.NO_PERMISSION, r.remark
        assert "no account for accessKey=KKKK" in (r.remark or "") and "200000 characters" in (r.remark or "")
        assert len(r.remark or "") < 300
        lines = [rec.getMessage() for rec in caplog.records if "ACL refused" in rec.getMessage()]
        assert lines and all(len(line) < 1000 for line in lines)
    finally:
        await client.client.close()
