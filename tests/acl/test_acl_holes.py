"""ACL 1.0's holes, tried from an attacker's side: replays under another code, a whitelisted account
that is no admin, the secrets code 54 answered, malformed permissions, and the NameServer's keep-alive."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from daemon.acl.admin import CreateAccessConfigRequestHeader
from daemon.acl.plain import AclDenied, AclFiles, PlainAccessValidator, ReplayGuard
from daemon.acl.signature import (
    FRESH_CODE,
    FRESH_NONCE,
    FRESH_TIMESTAMP,
    SIGNATURE,
    Signer,
    Verifier,
    fresh_code,
)
from daemon.namesrv.controller import NamesrvController
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from mqctl.auth import Credentials
from tests.support.acl import ADMIN_AK, ADMIN_SK, PLAIN_ACL, USER_AK, USER_SK, write_acl
from tests.support.broker import BrokerClient, ClusterHandle, start_cluster, stop_cluster
from tests.support.namesrv import Namesrv, namesrv_config

WHITELISTED = f"""{PLAIN_ACL}  - accessKey: whitelisted1
    secretKey: whitelisted-secret
    whiteRemoteAddress: 127.0.0.1
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
"""


def captured(code: int, fields: dict[str, str], signer: Signer, body: bytes = b"") -> RemotingCommand:
    """A request as an eavesdropper saw it: signed fields and body, ready to be sent again."""
    request = RemotingCommand.request(code, dict(fields), body)
    signer(request)
    return request


def replayed(request: RemotingCommand, code: int) -> RemotingCommand:
    """The captured request's fields and body under another (or the same) request code."""
    return RemotingCommand.request(code, dict(request.ext_fields), request.body)


async def _secrets_answered(handle: ClusterHandle, request: RemotingCommand) -> tuple[int, bytes]:
    answer = await handle.client.invoke(handle.addr, request)
    return answer.code, answer.body


async def test_code_54_never_carries_a_secret_even_to_a_replayed_admin_request(tmp_path: Path) -> None:
    """An admin's captured GET_BROKER_RUNTIME_INFO, replayed as 54, returned every secret key."""
    home = tmp_path / "home"
    write_acl(home)
    handle = await start_cluster(tmp_path, acl_enable=True, rocketmq_home=str(home))
    try:
        runtime = captured(RequestCode.GET_BROKER_RUNTIME_INFO, {}, Signer(ADMIN_AK, ADMIN_SK))
        code, body = await _secrets_answered(
            handle, replayed(runtime, RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG)
        )
        assert code == ResponseCode.SUCCESS  # 4.9.8 signs no code: the replay itself passes without freshness
        assert ADMIN_SK.encode() not in body and USER_SK.encode() not in body
        assert b'"secretKey":"******"' in body
    finally:
        await stop_cluster(handle)


async def test_with_admin_freshness_replays_are_refused(tmp_path: Path) -> None:
    """With aclAdminFreshness: a captured non-admin request replayed as DELETE_TOPIC_IN_BROKER, an
    admin request replayed under another code or again, and a stale one are refused; mqctl's fresh
    admin request passes once."""
    home = tmp_path / "home"
    write_acl(home)
    handle = await start_cluster(tmp_path, acl_enable=True, rocketmq_home=str(home), acl_admin_freshness=30)
    handle.broker.topics.create_system_like("Victim", 1, 6)
    mqctl = Credentials(ADMIN_AK, ADMIN_SK, "test").signer()  # what every mqctl command signs with
    try:
        max_offset = captured(RequestCode.GET_MAX_OFFSET, {"topic": "Victim", "queueId": "0"}, mqctl)
        assert (await handle.client.invoke(handle.addr, max_offset)).code == ResponseCode.SUCCESS
        as_delete = await handle.client.invoke(
            handle.addr, replayed(max_offset, RequestCode.DELETE_TOPIC_IN_BROKER)
        )
        assert as_delete.code == ResponseCode.NO_PERMISSION and FRESH_TIMESTAMP in (as_delete.remark or "")
        assert handle.broker.topics.get("Victim") is not None

        create = captured(
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {
                "topic": "Victim",
                "defaultTopic": "TBW102",
                "readQueueNums": "1",
                "writeQueueNums": "1",
                "perm": "6",
                "topicFilterType": "SINGLE_TAG",
            },
            mqctl,
        )
        as_delete = await handle.client.invoke(
            handle.addr, replayed(create, RequestCode.DELETE_TOPIC_IN_BROKER)
        )
        assert as_delete.code == ResponseCode.NO_PERMISSION and "another request code" in (
            as_delete.remark or ""
        )
        assert handle.broker.topics.get("Victim") is not None

        delete = captured(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "Victim"}, mqctl)
        assert (await handle.client.invoke(handle.addr, delete)).code == ResponseCode.SUCCESS
        handle.broker.topics.create_system_like("Victim", 1, 6)
        again = await handle.client.invoke(handle.addr, replayed(delete, RequestCode.DELETE_TOPIC_IN_BROKER))
        assert again.code == ResponseCode.NO_PERMISSION and "nonce already used" in (again.remark or "")
        assert handle.broker.topics.get("Victim") is not None

        stale = RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "Victim"})
        mqctl(stale)
        stale.ext_fields[FRESH_TIMESTAMP] = str(int(time.time() * 1000) - 120_000)
        Signer(ADMIN_AK, ADMIN_SK).sign(
            stale.ext_fields, b""
        )  # signed again, as the admin did two minutes ago
        old = await handle.client.invoke(handle.addr, stale)
        assert old.code == ResponseCode.NO_PERMISSION and "over aclAdminFreshness=30 s" in (old.remark or "")
        plain = captured(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "Victim"}, Signer(ADMIN_AK, ADMIN_SK))
        assert (
            await handle.client.invoke(handle.addr, plain)
        ).code == ResponseCode.NO_PERMISSION  # as mqadmin
        assert handle.broker.topics.get("Victim") is not None
    finally:
        await stop_cluster(handle)


async def test_a_whitelisted_account_keeps_its_permissions_and_admin_flag(tmp_path: Path) -> None:
    """whiteRemoteAddress with admin: false and DENY perms created topics unsigned and read 54 (4.9.8 too)."""
    home = tmp_path / "home"
    write_acl(home, WHITELISTED)
    handle = await start_cluster(tmp_path, acl_enable=True, rocketmq_home=str(home))
    try:
        unsigned = {"AccessKey": "whitelisted1"}
        create = await handle.call(
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {**unsigned, "topic": "ByWhitelisted", "defaultTopic": "TBW102", "readQueueNums": "1",
             "writeQueueNums": "1", "perm": "6", "topicFilterType": "SINGLE_TAG"},
        )  # fmt: skip
        assert create.code == ResponseCode.NO_PERMISSION and "not admin" in (create.remark or "")
        assert handle.broker.topics.get("ByWhitelisted") is None
        secrets = await handle.call(RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG, dict(unsigned))
        assert secrets.code == ResponseCode.NO_PERMISSION
        as_it = BrokerClient(handle.addr, RemotingClient(signer=lambda r: r.ext_fields.update(unsigned)))
        try:
            send = await as_it.send("TopicA", b"x")
            assert send.code == ResponseCode.NO_PERMISSION and "needs PUB on topic TopicA" in (
                send.remark or ""
            )
        finally:
            await as_it.client.close()
        read = await handle.call(RequestCode.GET_BROKER_RUNTIME_INFO, dict(unsigned))
        assert read.code == ResponseCode.SUCCESS  # the signature is what its whitelist skips
    finally:
        await stop_cluster(handle)


async def test_a_malformed_permission_is_refused_with_209_not_stored(tmp_path: Path) -> None:
    home = tmp_path / "home"
    path = write_acl(home)
    handle = await start_cluster(tmp_path, acl_enable=True, rocketmq_home=str(home))
    try:
        async with RemotingClient(signer=Signer(ADMIN_AK, ADMIN_SK)) as admin:
            for bad in (
                CreateAccessConfigRequestHeader("newuser1", "newsecret1", topic_perms="AclT=PUB;AclDeny=SUB"),
                CreateAccessConfigRequestHeader("newuser1", "newsecret1", default_topic_perm="ALL"),
                CreateAccessConfigRequestHeader("newuser1", "newsecret1", group_perms="G1"),
            ):
                request = RemotingCommand.request(
                    RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, dict(bad.to_ext_fields())
                )
                answer = await admin.invoke(handle.addr, request)
                assert answer.code == ResponseCode.UPDATE_AND_CREATE_ACL_CONFIG_FAILED == 209, answer.remark
            assert "newuser1" not in path.read_text()
            good = CreateAccessConfigRequestHeader(
                "newuser1", "newsecret1", topic_perms="AclT=PUB,AclDeny=SUB"
            )
            request = RemotingCommand.request(
                RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, dict(good.to_ext_fields())
            )
            assert (await admin.invoke(handle.addr, request)).code == ResponseCode.SUCCESS
            # an update that carries the mask 54 answers keeps the account's secret
            masked = CreateAccessConfigRequestHeader("newuser1", "******", admin=True)
            request = RemotingCommand.request(
                RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, dict(masked.to_ext_fields())
            )
            assert (await admin.invoke(handle.addr, request)).code == ResponseCode.SUCCESS
            assert handle.broker.acl_files is not None
            handle.broker.acl_files.maybe_reload()
            assert handle.broker.acl_files.table.accounts["newuser1"].secret_key == "newsecret1"
    finally:
        await stop_cluster(handle)


async def test_query_data_version_is_checked_by_the_namesrv_acl(tmp_path: Path) -> None:
    """An anonymous QUERY_DATA_VERSION kept a hung broker listed: with ACL on it is a write."""
    home = tmp_path / "home"
    write_acl(home)
    controller = NamesrvController(namesrv_config(tmp_path, acl_enable=True, rocketmq_home=str(home)))
    await controller.start()
    try:
        async with RemotingClient(signer=Signer(ADMIN_AK, ADMIN_SK)) as admin, RemotingClient() as anonymous, \
                RemotingClient(signer=Signer(USER_AK, USER_SK)) as user:  # fmt: skip
            ns = Namesrv(controller, admin)
            assert (await ns.register({"T": 1}, broker_addr="127.0.0.1:10911")).code == ResponseCode.SUCCESS
            live = controller.routes.broker_live_table["127.0.0.1:10911"]
            live.last_update_ms = 1  # hung long ago
            header = {"brokerName": "broker-a", "brokerAddr": "127.0.0.1:10911", "clusterName": "DefaultCluster",
                      "brokerId": "0"}  # fmt: skip
            for client in (anonymous, user):
                kept = await client.invoke(
                    ns.addr, RemotingCommand.request(RequestCode.QUERY_DATA_VERSION, dict(header))
                )
                assert kept.code == ResponseCode.NO_PERMISSION, kept.remark
            assert controller.routes.broker_live_table["127.0.0.1:10911"].last_update_ms == 1
            signed = await admin.invoke(
                ns.addr, RemotingCommand.request(RequestCode.QUERY_DATA_VERSION, dict(header))
            )
            assert signed.code == ResponseCode.SUCCESS
    finally:
        await controller.stop()


def test_the_replay_guard_forgets_a_nonce_only_once_its_timestamp_refuses_it() -> None:
    guard = ReplayGuard(10)
    fields = {
        FRESH_TIMESTAMP: "100000",
        FRESH_NONCE: "n" * 32,
        FRESH_CODE: fresh_code(RequestCode.DELETE_TOPIC_IN_BROKER),
    }
    request = RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_BROKER, fields)
    guard.check("ak", request, now_ms=100_000)
    for now in (100_001, 109_999, 110_000):  # the nonce is remembered while the timestamp passes
        with pytest.raises(AclDenied, match="nonce already used"):
            guard.check("ak", request, now_ms=now)
    with pytest.raises(AclDenied, match="over aclAdminFreshness=10 s"):
        guard.check("ak", request, now_ms=110_001)
    ahead = RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_BROKER, {**fields, FRESH_TIMESTAMP: "115000"})
    guard.check("ak", ahead, now_ms=110_001)  # a clock 5 s ahead: within the window
    assert guard._seen == {"n" * 32: 115_000}  # the first use was forgotten: its timestamp refuses it
    with pytest.raises(AclDenied, match="nonce already used"):
        guard.check("ak", ahead, now_ms=124_000)


def _forged(
    request: RemotingCommand,
    code: int,
    moved: tuple[str, str],
    nonce: str,
    stamp: str,
    code_field: str | None = None,
) -> RemotingCommand:
    """The captured request with characters moved across the boundaries of its signed concatenation
    (field values in key order, no separators): `moved[1]` appended to field `moved[0]`, the fresh
    fields rewritten (mqctlCode as `code_field`, else as mqctl writes `code`). The signature still holds."""
    fields = dict(request.ext_fields)
    fields[moved[0]] += moved[1]
    signed_code = fresh_code(code) if code_field is None else code_field
    fields.update({FRESH_CODE: signed_code, FRESH_NONCE: nonce, FRESH_TIMESTAMP: stamp})
    forged = RemotingCommand.request(code, fields, request.body)
    assert Verifier(ADMIN_SK).verify(fields, forged.body, fields[SIGNATURE])
    return forged


def _fresh_admin(code: int, fields: dict[str, str], nonce_edit: Callable[[str], str]) -> RemotingCommand:
    """An admin request as mqctl signs it under aclAdminFreshness, its nonce edited (a capture an
    attacker waited for) and signed again."""
    request = RemotingCommand.request(code, dict(fields))
    Signer(ADMIN_AK, ADMIN_SK, fresh_codes=frozenset({code}))(request)
    request.ext_fields[FRESH_NONCE] = nonce_edit(request.ext_fields[FRESH_NONCE])
    Signer(ADMIN_AK, ADMIN_SK).sign(request.ext_fields, request.body)
    return request


def _fresh_validator(tmp_path: Path) -> PlainAccessValidator:
    home = tmp_path / "home"
    write_acl(home)
    return PlainAccessValidator(AclFiles(str(home), ""), freshness=60)


def test_a_fresh_admin_request_cannot_move_its_code_into_the_nonce(tmp_path: Path) -> None:
    """INVOKE_BROKER_TO_RESET_OFFSET (222) whose nonce starts with 15 (one capture in 256): `c22` moves
    into the field signed just before mqctlCode (isForce), `15` comes from the nonce, and the same
    signed bytes read as code 215 with a shorter, unseen nonce."""
    fields = {"topic": "Victim", "group": "G", "timestamp": "0", "isForce": "false"}
    request = _fresh_admin(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, fields, lambda n: "15" + n[2:])
    fresh = request.ext_fields
    forged = _forged(
        request,
        RequestCode.DELETE_TOPIC_IN_BROKER,
        ("isForce", "c22"),
        fresh[FRESH_NONCE][2:],
        fresh[FRESH_TIMESTAMP],
        code_field="215",
    )
    with pytest.raises(AclDenied, match=FRESH_CODE):  # no letter before the code (and a short nonce)
        _fresh_validator(tmp_path).check("10.0.0.7", forged)


def test_a_fresh_admin_request_cannot_lend_its_nonce_a_leading_zero_of_the_timestamp(tmp_path: Path) -> None:
    """A nonce ending in 0 lends that digit to the timestamp (int("0" + ts) is ts), so the nonce takes a
    character from the code while keeping its length: the code's end moves (DELETE_ACL_CONFIG 51 reads
    as 5). A timestamp is refused unless written as mqctl writes it."""
    request = _fresh_admin(RequestCode.DELETE_ACL_CONFIG, {"accessKey": "app"}, lambda n: n[:-1] + "0")
    fresh = request.ext_fields
    forged = _forged(
        request, 5, ("accessKey", ""), "1" + fresh[FRESH_NONCE][:-1], "0" + fresh[FRESH_TIMESTAMP]
    )
    guard = _fresh_validator(tmp_path).replays
    assert guard is not None
    with pytest.raises(AclDenied, match=FRESH_TIMESTAMP):
        guard.check(ADMIN_AK, forged)


def test_a_fresh_admin_request_cannot_give_its_code_s_leading_digit_to_the_field_before(
    tmp_path: Path,
) -> None:
    """An admin's ADD_WRITE_PERM_OF_BROKER (327) to the NameServer, dropped on the way and sent to a broker
    sharing its ACL file. Signed as bare digits, `3` could join brokerName and the same bytes read as
    TRIGGER_DELETE_FILES (27) with the same nonce; behind its letter the code can only lose the letter."""
    request = _fresh_admin(RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"}, lambda n: n)
    fresh = request.ext_fields
    forged = _forged(
        request,
        RequestCode.TRIGGER_DELETE_FILES,
        ("brokerName", "c3"),
        fresh[FRESH_NONCE],
        fresh[FRESH_TIMESTAMP],
        code_field="27",
    )
    with pytest.raises(AclDenied):
        _fresh_validator(tmp_path).check("10.0.0.7", forged)


def test_a_fresh_admin_request_cannot_take_its_code_from_a_field_under_a_new_key(tmp_path: Path) -> None:
    """ACL 1.0 signs the values, not the keys: a captured admin request keeps its signature under keys the
    attacker names. A group `orders_c215_v2`, deleted by an admin: `c215` inside its name becomes the
    mqctlCode, and the characters up to the timestamp are split between mqctlNonce (32 of them, unseen)
    and an invented `mqctlNonceX` signed between the nonce and the timestamp, so the same signed bytes,
    within the freshness window, read as DELETE_TOPIC_IN_BROKER of topic `true`."""
    request = _fresh_admin(
        RequestCode.DELETE_SUBSCRIPTIONGROUP,
        {"groupName": "orders_c215_v2", "removeOffset": "true"},
        lambda n: n,
    )
    validator = _fresh_validator(tmp_path)
    validator.check("10.0.0.7", request)  # the admin's own request, delivered
    fresh = request.ext_fields
    group = fresh["groupName"]
    cut = group.index("c215")
    between = group[cut + 4 :] + fresh[FRESH_CODE] + fresh[FRESH_NONCE]  # what lies before the timestamp
    fields = {
        "AccessKey": fresh["AccessKey"],
        "groupName": group[:cut],
        FRESH_CODE: "c215",
        FRESH_NONCE: between[:32],
        FRESH_NONCE + "X": between[32:],
        FRESH_TIMESTAMP: fresh[FRESH_TIMESTAMP],
        "topic": fresh["removeOffset"],
        SIGNATURE: fresh[SIGNATURE],
    }
    assert Verifier(ADMIN_SK).verify(dict(fields), b"", fields[SIGNATURE])  # the signature still holds
    forged = RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_BROKER, fields)
    with pytest.raises(AclDenied, match="between"):
        validator.check("10.0.0.7", forged)
