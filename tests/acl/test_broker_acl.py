"""Our broker with aclEnable=true: signed requests pass, everything else is NO_PERMISSION (16)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from daemon.acl.signature import hmac_backend
from daemon.broker.headers import CreateTopicRequestHeader
from daemon.remoting.codes import RequestCode, ResponseCode
from tests.support.acl import ADMIN_AK, ADMIN_SK, PLAIN_ACL, USER_AK, USER_SK, as_account, write_acl
from tests.support.broker import ClusterHandle, start_broker


def create_topic(name: str) -> dict[str, str]:
    return dict(CreateTopicRequestHeader(name, "TBW102", 1, 1, 6, "SINGLE_TAG").to_ext_fields())


async def test_signed_send_and_pull_pass_and_denials_say_why(
    acl_cluster: ClusterHandle, caplog: pytest.LogCaptureFixture
) -> None:
    acl_cluster.broker.topics.create_system_like("TopicA", 1, 6)
    acl_cluster.broker.topics.create_system_like("TopicDeny", 1, 6)
    user = await as_account(acl_cluster, USER_AK, USER_SK)
    wrong = await as_account(acl_cluster, USER_AK, "not-the-secret")
    anonymous = await as_account(acl_cluster, None)
    try:
        ok = await user.send("TopicA", b"hello")
        assert ok.code == ResponseCode.SUCCESS, ok.remark
        pulled = await user.pull("GroupA", "TopicA", 0, 0)
        assert pulled.code == ResponseCode.SUCCESS, pulled.remark
        caplog.set_level(logging.WARNING, logger="daemon.acl.plain")
        for client, topic, words in (
            (anonymous, "TopicA", "no AccessKey"),
            (wrong, "TopicA", "signature check failed"),
            (user, "TopicDeny", "needs PUB on topic TopicDeny, has DENY"),
            (user, "TopicElse", "needs PUB on topic TopicElse, has DENY"),
        ):
            denied = await client.send(topic, b"x")
            assert denied.code == ResponseCode.NO_PERMISSION and words in (denied.remark or ""), denied.remark
        created = await user.call(RequestCode.UPDATE_AND_CREATE_TOPIC, create_topic("NewT"))
        assert created.code == ResponseCode.NO_PERMISSION and "not admin" in (created.remark or "")
        assert "NewT" not in acl_cluster.broker.topics.table
        assert USER_SK not in caplog.text and "not-the-secret" not in caplog.text
        assert "ACL refused" in caplog.text
    finally:
        for c in (user, wrong, anonymous):
            await c.client.close()


async def test_unsigned_config_update_changes_nothing(acl_cluster: ClusterHandle) -> None:
    anonymous = await as_account(acl_cluster, None)
    user = await as_account(acl_cluster, USER_AK, USER_SK)
    admin = await as_account(acl_cluster, ADMIN_AK, ADMIN_SK)
    try:
        before = acl_cluster.broker.config.file_reserved_time
        for client in (anonymous, user):
            r = await client.call(RequestCode.UPDATE_BROKER_CONFIG, body=b"fileReservedTime=0\n")
            assert r.code == ResponseCode.NO_PERMISSION
        assert acl_cluster.broker.config.file_reserved_time == before
        r = await admin.call(RequestCode.UPDATE_BROKER_CONFIG, body=b"fileReservedTime=96\n")
        assert r.code == ResponseCode.SUCCESS, r.remark
        assert acl_cluster.broker.config.file_reserved_time == 96
    finally:
        for c in (anonymous, user, admin):
            await c.client.close()


@pytest.mark.slow
async def test_editing_the_file_takes_effect_without_restart(
    acl_cluster: ClusterHandle, acl_home: Path
) -> None:
    acl_cluster.broker.topics.create_system_like("TopicB", 1, 6)
    user = await as_account(acl_cluster, USER_AK, USER_SK)
    try:
        assert (await user.send("TopicB", b"x")).code == ResponseCode.NO_PERMISSION
        write_acl(acl_home, PLAIN_ACL.replace("TopicDeny=DENY", "TopicB=PUB"))
        deadline = asyncio.get_running_loop().time() + 15
        while (code := (await user.send("TopicB", b"x")).code) != ResponseCode.SUCCESS:
            assert code == ResponseCode.NO_PERMISSION
            assert asyncio.get_running_loop().time() < deadline, "the edited ACL file never took effect"
            await asyncio.sleep(0.3)
    finally:
        await user.client.close()


async def test_whitelisted_address_needs_no_credentials(tmp_path: Path, acl_home: Path) -> None:
    write_acl(acl_home, PLAIN_ACL.replace("10.10.103.*", "127.0.0.*"))
    broker = await start_broker(tmp_path / "store", acl_enable=True, rocketmq_home=str(acl_home))
    from daemon.remoting.client import RemotingClient
    from tests.support.broker import BrokerClient

    client = BrokerClient(broker.addr, RemotingClient())
    try:
        r = await client.call(RequestCode.UPDATE_AND_CREATE_TOPIC, create_topic("W"))
        assert r.code == ResponseCode.SUCCESS, r.remark
    finally:
        await client.client.close()
        await broker.stop()


async def test_the_start_up_line_says_acl_is_on_and_which_hmac_checks(
    tmp_path: Path, acl_home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An operator reads there whether signatures are checked in C (the compiled build) or by hashlib."""
    write_acl(acl_home)
    with caplog.at_level(logging.INFO, logger="daemon.broker.broker"):
        broker = await start_broker(tmp_path / "store", acl_enable=True, rocketmq_home=str(acl_home))
    try:
        assert f"ACL on (HMAC-SHA1: {hmac_backend()})" in caplog.text
    finally:
        await broker.stop()


async def test_acl_off_ignores_credentials(cluster: ClusterHandle) -> None:
    """The C++ client always sends AccessKey "" and a signature: without aclEnable nothing checks them."""
    r = await cluster.call(
        RequestCode.UPDATE_AND_CREATE_TOPIC, {**create_topic("Free"), "AccessKey": "", "Signature": "x"}
    )
    assert r.code == ResponseCode.SUCCESS, r.remark


async def test_acl_writes_are_refused_while_acl_is_off(cluster: ClusterHandle) -> None:
    """Otherwise anyone could plant an admin account for the day ACL gets switched on."""
    r = await cluster.call(
        RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, {"accessKey": "planted1", "secretKey": "planted1"}
    )
    assert r.code == ResponseCode.SYSTEM_ERROR and "aclEnable=false" in (r.remark or "")
