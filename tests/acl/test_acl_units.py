"""The pure parts of ACL: signature vectors from ali-ons, address patterns, permission rules."""

from __future__ import annotations

import collections
import logging
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from daemon.acl import signature as signature_module
from daemon.acl.plain import (
    ADMIN_CODES,
    ANY,
    DENY,
    MAX_SENDABLE,
    PUB,
    QUERY_ROUTE,
    SERVER_EXCLUDED,
    SUB,
    AclConfigError,
    AclDenied,
    AclFiles,
    PlainAccessValidator,
    address_matcher,
    check_permission,
    needed_resources,
    parse_perm,
    read_yaml,
)
from daemon.acl.signature import Signer, Verifier, calculate, signing_content
from daemon.broker.bodies import ConsumerData, HeartbeatData, SubscriptionData
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.connection import Connection, RequestDispatcher
from daemon.remoting.frame import decode_frame, encode_command
from tests.support.transport import RecordingTransport

# Produced by ali-ons 3.x's own Channel.beforeRequest (lib/channel.js) with onsChannel ALIYUN: the
# extFields it sends, Signature included. Header values are what ali-ons stringifies.
ONS_VECTORS = [
    (
        "12345678",
        {
            "topic": "TopicTest",
            "consumerGroup": "CID_A",
            "queueId": "3",
            "queueOffset": "0",
            "maxMsgNums": "32",
            "sysFlag": "3",
            "commitOffset": "0",
            "suspendTimeoutMillis": "20000",
            "subscription": "*",
            "subVersion": "1",
            "AccessKey": "RocketMQ",
            "OnsChannel": "ALIYUN",
        },
        b"",
        "fLIBW19HMwiba/uqGHt6oWbCMPM=",
    ),
    (
        "12345678",
        {
            "a": "PID_X",
            "b": "TopicTest",
            "c": "TBW102",
            "d": "4",
            "e": "1",
            "f": "0",
            "g": "1700000000000",
            "h": "0",
            "i": "TAGS\x01TagA\x02WAIT\x01true\x02",
            "j": "0",
            "k": "false",
            "m": "false",
            "AccessKey": "rocketmq2",
            "OnsChannel": "ALIYUN",
        },
        "Hello RocketMQ é".encode(),
        "7b5Rgr6rI6K1UpFGSdTdtVenxL8=",
    ),
    (
        "secret-ünïcode",
        {"AccessKey": "RocketMQ", "OnsChannel": "ALIYUN"},
        b"",
        "KscOsA0cG6/zNHnvGYncrQmMziY=",
    ),
]


@pytest.mark.parametrize(("secret", "fields", "body", "signature"), ONS_VECTORS)
def test_signature_matches_ali_ons(secret: str, fields: dict[str, str], body: bytes, signature: str) -> None:
    assert calculate(secret, signing_content({**fields, "Signature": "ignored"}, body)) == signature


def test_sign_adds_access_key_and_signature_over_them() -> None:
    fields = {k: v for k, v in ONS_VECTORS[1][1].items() if k != "AccessKey"}
    Signer("rocketmq2", "12345678").sign(fields, ONS_VECTORS[1][2])
    assert fields["AccessKey"] == "rocketmq2"
    assert fields["Signature"] == "7b5Rgr6rI6K1UpFGSdTdtVenxL8="


@pytest.mark.parametrize(
    ("pattern", "yes", "no"),
    [
        ("*", ["1.2.3.4", "::1"], []),
        ("", [], ["127.0.0.1"]),
        ("127.0.0.1", ["127.0.0.1"], ["127.0.0.2"]),
        ("10.1.1.1,10.1.1.2", ["10.1.1.2"], ["10.1.1.3"]),
        ("192.168.1.{1,2,3}", ["192.168.1.3"], ["192.168.1.4"]),
        ("192.168.1-10.*", ["192.168.5.200"], ["192.168.11.1", "192.169.1.1"]),
        ("10.*", ["10.9.9.9"], ["11.0.0.1"]),
    ],
)
def test_address_patterns(pattern: str, yes: list[str], no: list[str]) -> None:
    match = address_matcher(pattern)
    assert all(match(ip) for ip in yes)
    assert not any(match(ip) for ip in no)


@pytest.mark.parametrize("pattern", ["10.1.1", "300.1.1.*", "a.b.c.d", "1.2.3.4,nope"])
def test_bad_patterns_are_refused(pattern: str) -> None:
    with pytest.raises(AclConfigError):
        address_matcher(pattern)


def test_permissions() -> None:
    assert parse_perm("PUB|SUB") == PUB | SUB and parse_perm("garbage") == DENY and parse_perm(None) == DENY
    assert (
        check_permission(PUB, PUB | SUB)
        and not check_permission(SUB, PUB)
        and not check_permission(PUB, DENY)
    )


def test_resources_per_code() -> None:
    send = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"a": "PG", "b": "T"})
    assert needed_resources(send) == [("T", PUB)]
    retry = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"a": "PG", "b": "%RETRY%G"})
    assert needed_resources(retry) == [("%RETRY%G", SUB)]
    pull = RemotingCommand.request(RequestCode.PULL_MESSAGE, {"topic": "T", "consumerGroup": "G"})
    assert needed_resources(pull) == [("T", SUB), ("%RETRY%G", SUB)]
    data = HeartbeatData("c1", [], [ConsumerData("G", subscription_data_set=[SubscriptionData("T", "*")])])
    beat = RemotingCommand.request(RequestCode.HEART_BEAT, body=data.dumps())
    assert needed_resources(beat) == [("%RETRY%G", SUB), ("T", SUB)]
    assert needed_resources(RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})) == []
    assert needed_resources(RemotingCommand.request(QUERY_ROUTE, {"topic": "T"})) == [("T", ANY)]  # a 5.x one


ACL_YAML = """
globalWhiteRemoteAddresses:
  - 10.10.*
accounts:
  - accessKey: rocketmq2
    secretKey: "12345678"
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms: [TopicA=PUB|SUB, TopicD=DENY]
    groupPerms: [GroupX=DENY]
  - accessKey: RocketMQ
    secretKey: "12345678"
    admin: true
  - accessKey: trusted1
    secretKey: "whatever1"
    whiteRemoteAddress: 192.168.0.*
"""


def _signed(code: int, fields: dict[str, str], ak: str, sk: str, body: bytes = b"") -> RemotingCommand:
    fields = dict(fields)
    Signer(ak, sk).sign(fields, body)
    return RemotingCommand.request(code, fields, body)


async def test_the_guard_matches_the_connection_address(tmp_path: Path) -> None:
    """The dispatcher hands the validator the connection: its whitelist sees the socket's IP, an
    IPv4-mapped IPv6 peer as IPv4, and a peer without an IP is no whitelisted address."""
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "plain_acl.yml").write_text(ACL_YAML)  # globalWhiteRemoteAddresses: 10.10.*
    dispatcher = RequestDispatcher(
        {RequestCode.UPDATE_AND_CREATE_TOPIC: lambda conn, req: req.make_response()}
    )
    dispatcher.guard = PlainAccessValidator(AclFiles(str(tmp_path)))
    answers = {}
    for peername in (("::ffff:10.10.3.4", 5555, 0, 0), ("10.11.3.4", 5555), None):
        transport = RecordingTransport(peername)
        conn = Connection(dispatcher)
        conn.connection_made(transport)  # type: ignore[arg-type]
        conn.data_received(encode_command(RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC)))
        decoded = decode_frame(b"".join(transport.writes), 0)
        assert decoded is not None
        answers[peername] = (decoded[0].code, decoded[0].remark or "")
    assert answers[("::ffff:10.10.3.4", 5555, 0, 0)] == (0, "")
    assert answers[("10.11.3.4", 5555)][0] == ResponseCode.NO_PERMISSION
    assert "from 10.11.3.4 carries no AccessKey" in answers[("10.11.3.4", 5555)][1]
    assert answers[None][0] == ResponseCode.NO_PERMISSION
    assert "from ? carries no AccessKey" in answers[None][1]


def test_validator_rules(tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "plain_acl.yml").write_text(ACL_YAML)
    check = PlainAccessValidator(AclFiles(str(tmp_path))).check
    send = {"a": "PG", "b": "TopicA", "c": "TBW102"}
    check("127.0.0.1", _signed(RequestCode.SEND_MESSAGE_V2, send, "rocketmq2", "12345678", b"body"))
    check(
        "10.10.3.4", RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "X"})
    )  # whitelist
    # an account's whiteRemoteAddress skips only its signature: trusted1 (no admin, DENY by default)
    # may not create a topic unsigned, as 4.9.8 lets it
    with pytest.raises(AclDenied, match="trusted1 is not admin"):
        check(
            "192.168.0.9",
            RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {"AccessKey": "trusted1"}),
        )
    with pytest.raises(AclDenied, match="trusted1 needs PUB on topic TopicA, has DENY"):
        check(
            "192.168.0.9",
            RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {**send, "AccessKey": "trusted1"}),
        )
    with pytest.raises(AclDenied, match="signature check failed"):  # off its whitelist, it signs
        check(
            "192.168.1.9",
            RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {**send, "AccessKey": "trusted1"}),
        )
    check("127.0.0.1", _signed(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "X"}, "RocketMQ", "12345678"))
    denials = {
        "no AccessKey": RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, send),
        "no account for accessKey=nobody": _signed(RequestCode.SEND_MESSAGE_V2, send, "nobody", "12345678"),
        "signature check failed": _signed(RequestCode.SEND_MESSAGE_V2, send, "rocketmq2", "wrong-secret"),
        "needs PUB on topic TopicD, has DENY": _signed(
            RequestCode.SEND_MESSAGE_V2, {**send, "b": "TopicD"}, "rocketmq2", "12345678"
        ),
        "needs PUB on topic Other, has DENY": _signed(
            RequestCode.SEND_MESSAGE_V2, {**send, "b": "Other"}, "rocketmq2", "12345678"
        ),
        "needs SUB on group GroupX": _signed(
            RequestCode.PULL_MESSAGE, {"topic": "TopicA", "consumerGroup": "GroupX"}, "rocketmq2", "12345678"
        ),
        "is not admin": _signed(RequestCode.UPDATE_BROKER_CONFIG, {}, "rocketmq2", "12345678", b"a=b"),
    }
    for remark, request in denials.items():
        with pytest.raises(AclDenied, match=remark) as caught:
            check("127.0.0.1", request)
        assert "12345678" not in str(caught.value.remark)
    unique = {"topic": "TopicA", "key": "k", "_UNIQUE_KEY_QUERY": "true"}
    check(
        "127.0.0.1", _signed(RequestCode.QUERY_MESSAGE, unique, "rocketmq2", "12345678")
    )  # as Java signs it
    tampered = _signed(RequestCode.SEND_MESSAGE_V2, send, "rocketmq2", "12345678", b"body")
    tampered.body = b"other"
    with pytest.raises(AclDenied, match="signature"):
        check("127.0.0.1", tampered)


def test_files_merge_conf_acl_dir_and_keep_accounts_when_an_edit_does_not_parse(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    (conf / "acl").mkdir(parents=True)
    (conf / "plain_acl.yml").write_text(ACL_YAML)
    (conf / "acl" / "team.yml").write_text("accounts:\n  - accessKey: teamkey1\n    secretKey: teamsecret\n")
    files = AclFiles(str(tmp_path))
    assert set(files.table.accounts) == {"rocketmq2", "RocketMQ", "trusted1", "teamkey1"}
    assert files.table.accounts["teamkey1"].source == conf / "acl" / "team.yml"

    (conf / "acl" / "team.yml").write_text("accounts: [ {accessKey: teamkey1")  # broken mid-edit
    files.maybe_reload()
    assert "teamkey1" in files.table.accounts  # the accounts in force stay
    (conf / "acl" / "team.yml").write_text("accounts:\n  - accessKey: teamkey2\n    secretKey: teamsecret\n")
    files.maybe_reload()
    assert "teamkey2" in files.table.accounts and "teamkey1" not in files.table.accounts

    single = tmp_path / "elsewhere.yml"
    single.write_text("accounts:\n  - accessKey: onlyme1\n    secretKey: onlysecret\n")
    assert set(AclFiles(str(tmp_path), str(single)).table.accounts) == {"onlyme1"}
    assert AclFiles(str(tmp_path / "nowhere")).table.accounts == {}  # no file: nobody gets in


@pytest.mark.parametrize(("secret", "fields", "body", "signature"), ONS_VECTORS)
def test_verifier_matches_ali_ons(secret: str, fields: dict[str, str], body: bytes, signature: str) -> None:
    assert Verifier(secret).signature({**fields, "Signature": "x"}, body) == signature


@pytest.mark.parametrize("secret", ["k", "12345678", "é" * 40, "x" * 64, "y" * 200])
def test_verifier_is_hmac_sha1_for_any_key_length(secret: str) -> None:
    fields, body = {"b": "2", "a": "1", "Signature": "x"}, bytes(range(256)) * 5
    assert Verifier(secret).signature(fields, body) == calculate(secret, signing_content(fields, body))


@given(
    st.text(min_size=1, max_size=80),
    st.dictionaries(st.text(max_size=12), st.text(max_size=1500), max_size=6),
    st.binary(max_size=3000),
)
def test_verifier_is_the_plain_rule_for_any_fields(secret: str, fields: dict[str, str], body: bytes) -> None:
    """Any text (values longer than the C helper's gathering buffer included) and any body."""
    expected = calculate(secret, signing_content(fields, body))
    assert Verifier(secret).signature(fields, body) == expected


def test_the_compiled_hmac_and_hashlib_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    """The broker uses the C HMAC-SHA1 where the build has it (_hmacsha1.c) and hashlib elsewhere."""
    if signature_module._c_signature is None:
        pytest.skip("no compiled build with OpenSSL's headers here: hashlib is the only path")
    fields = {"b": "2", "a": "é中", "Signature": "x", "z": "v" * 2000}
    with_c = Verifier("secret1").signature(fields, b"body" * 300)
    lone = {"a": "\ud800", "Signature": "x"}  # encode() refuses a lone surrogate; so does the C path
    with pytest.raises(UnicodeEncodeError):
        Verifier("secret1").signature(lone, b"")
    from daemon.acl import _hmacsha1  # (importable: the compiled signature module imported it)

    with pytest.raises(ValueError):  # states not from keyed(): SHA1_Update would write past its block
        _hmacsha1.signature(b"\xff" * len(_hmacsha1.keyed(b"k")), ("a",), b"")
    monkeypatch.setattr(signature_module, "_c_signature", None)
    assert Verifier("secret1").signature(fields, b"body" * 300) == with_c
    with pytest.raises(UnicodeEncodeError):
        Verifier("secret1").signature(lone, b"")


def test_a_broken_file_is_logged_without_its_secrets(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """YAML's error text quotes the offending line, which is often a secretKey being edited."""
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "plain_acl.yml").write_text(ACL_YAML)
    files = AclFiles(str(tmp_path))
    for broken in (
        "accounts:\n  - accessKey: rocketmq2\n    secretKey: sup3rs3cret: x\n",
        'accounts:\n  - accessKey: rocketmq2\n    secretKey: "sup3rs3cret\n',
    ):
        (conf / "plain_acl.yml").write_text(broken)
        caplog.clear()
        with caplog.at_level(logging.ERROR, logger="daemon.acl.plain"):
            files.maybe_reload()
        assert "not reloaded" in caplog.text and "line 3" in caplog.text, caplog.text
        assert "sup3rs3cret" not in caplog.text
        with pytest.raises(AclConfigError) as refused:  # what codes 50-53 answer when the file is broken
            read_yaml(conf / "plain_acl.yml")
        assert "sup3rs3cret" not in str(refused.value)


@pytest.mark.parametrize(
    "body",
    [
        b'{"consumerDataSet": [1, {"groupName": 5, "subscriptionDataSet": 7}]}',
        b'{"consumerDataSet": {"groupName": "G"}}',
        b'{"consumerGroup": "G", "mqSet": 5}',
        b"[1, 2]",
    ],
)
def test_odd_bodies_never_raise_from_the_rules(body: bytes) -> None:
    """Each rule error became a SYSTEM_ERROR with an ERROR traceback; the processors refuse such bodies."""
    for code in (RequestCode.HEART_BEAT, RequestCode.LOCK_BATCH_MQ):
        for resource, perm in needed_resources(RemotingCommand.request(code, {}, body)):
            assert isinstance(resource, str) and perm == SUB


@pytest.mark.parametrize("fields", [{}, {"Signature": "x"}, {"a": "1"}, {"a": "1", "Signature": "s"}])
@pytest.mark.parametrize("body", [b"", b"body"])
def test_verifier_signs_zero_and_one_field_as_the_plain_rule(fields: dict[str, str], body: bytes) -> None:
    """The cached value picker has two special shapes: no field at all, and one field (a bare value)."""
    assert Verifier("secret1").signature(fields, body) == calculate("secret1", signing_content(fields, body))


@pytest.fixture(params=["compiled", "hashlib"])
def verifier_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each Verifier test runs on both paths: the C check of the compiled build, and hashlib."""
    if request.param == "hashlib":
        monkeypatch.setattr(signature_module, "_c_signature", None)
    elif signature_module._c_signature is None:
        pytest.skip("no compiled build with OpenSSL's headers here: hashlib is the only path")


@pytest.mark.usefixtures("verifier_path")
def test_verifier_remembers_no_order_for_another_set_of_fields() -> None:
    """The order is remembered per field count: a request with as many fields but other names, or with a
    field where an excluded one was, is signed over its own fields (the extra one included)."""
    verifier = Verifier("secret1", SERVER_EXCLUDED)
    sequence = [
        {"b": "2", "a": "1", "Signature": "s", "_UNIQUE_KEY_QUERY": "true"},
        {"b": "2", "a": "1", "Signature": "s", "X": "injected"},  # X where the excluded field was
        {"b": "2", "a": "1", "Signature": "s", "_UNIQUE_KEY_QUERY": "true"},
        {"b": "2", "c": "3", "Signature": "s", "_UNIQUE_KEY_QUERY": "true"},  # same size, other names
        {"a": "1", "b": "2", "X": "injected", "Y": "too"},  # no excluded field at all
        {"b": "2", "a": "1", "Signature": "s", "_UNIQUE_KEY_QUERY": "true"},
        {
            "b": "2",
            "c": "3",
            "Signature": "s",
            "_UNIQUE_KEY_QUERY": "true",
        },  # two orders of one count, in turn
        {"b": "2", "a": "1", "Signature": "s", "_UNIQUE_KEY_QUERY": "true"},
        *(
            {f"k{i}": "1", f"k{i + 1}": "2", "Signature": "s"} for i in [*range(6), *range(6)]
        ),  # more than kept
    ]
    for fields in sequence:
        expected = calculate("secret1", signing_content(fields, b"body", SERVER_EXCLUDED))
        assert verifier.signature(fields, b"body") == expected, fields
        assert verifier.verify(fields, b"body", expected), fields
    for fields in sequence:  # the same again, every order now remembered, and checked before it is signed
        expected = calculate("secret1", signing_content(fields, b"body", SERVER_EXCLUDED))
        assert verifier.verify(fields, b"body", expected), fields
        assert not verifier.verify(fields, b"body!", expected), fields
    assert verifier.signature(sequence[1], b"body") != verifier.signature(sequence[0], b"body")
    # X in the excluded field's place is signed: what signs the other fields alone does not pass
    without_x = {k: v for k, v in sequence[1].items() if k != "X"}
    assert not verifier.verify(sequence[1], b"body", verifier.signature(without_x, b"body"))
    # a dict subclass that answers missing keys never raises KeyError: it is read as a plain dict
    verifier.signature({"a": "1", "b": "2", "Signature": "s"}, b"body")
    injected = collections.defaultdict(str, {"a": "1", "c": "EVIL", "Signature": "s"})
    expected = calculate("secret1", signing_content(dict(injected), b"body", SERVER_EXCLUDED))
    assert verifier.signature(injected, b"body") == expected
    assert verifier.verify(injected, b"body", expected)
    assert not verifier.verify(injected, b"body", verifier.signature({"a": "1", "Signature": "s"}, b"body"))


@pytest.mark.usefixtures("verifier_path")
@pytest.mark.parametrize(
    "given",
    ["", "x", "é" * 28, "\ud800" * 28, "=" * 28, "0" * 29],
)
def test_verify_refuses_any_other_text_without_raising(given: str) -> None:
    """A signature is whatever text the client sent: non-ASCII, a lone surrogate, any length. Each is a
    plain mismatch (compare_digest raises TypeError on non-ASCII str: that was a SYSTEM_ERROR once)."""
    fields = {"a": "1", "b": "2", "Signature": given}
    verifier = Verifier("secret1", SERVER_EXCLUDED)
    right = verifier.signature(fields, b"body")
    assert verifier.verify(fields, b"body", right)
    assert not verifier.verify(fields, b"body", given)
    assert not verifier.verify(fields, b"body", right.swapcase())
    assert not verifier.verify(fields, b"body", right[:-1])


def test_a_remembered_send_permission_ends_with_its_file(tmp_path: Path) -> None:
    """An account remembers the topics it may send to: a denial is never remembered, and an edit of the
    file takes a remembered topic away (a reload makes new accounts)."""
    acl = tmp_path / "conf" / "plain_acl.yml"
    acl.parent.mkdir()
    acl.write_text(ACL_YAML)
    files = AclFiles(str(tmp_path))
    check = PlainAccessValidator(files).check
    v2 = RequestCode.SEND_MESSAGE_V2
    for _ in range(2):
        check("127.0.0.1", _signed(v2, {"b": "TopicA"}, "rocketmq2", "12345678", b"x"))
        with pytest.raises(AclDenied, match="needs PUB on topic TopicD, has DENY"):
            check("127.0.0.1", _signed(v2, {"b": "TopicD"}, "rocketmq2", "12345678", b"x"))
    assert files.table.accounts["rocketmq2"].sendable == {"TopicA"}
    acl.write_text(ACL_YAML.replace("TopicA=PUB|SUB", "TopicA=SUB"))
    files.maybe_reload()
    with pytest.raises(AclDenied, match="needs PUB on topic TopicA, has SUB"):
        check("127.0.0.1", _signed(v2, {"b": "TopicA"}, "rocketmq2", "12345678", b"x"))


def test_sends_skip_the_admin_test_and_remember_a_bounded_number_of_topics(tmp_path: Path) -> None:
    """`check` sends a send code straight to its topic rule: none may be an admin code. An account
    sending to ever-new topics remembers MAX_SENDABLE of them, and its sends to the others still pass."""
    sends = {RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE}
    assert not sends & ADMIN_CODES
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "plain_acl.yml").write_text(ACL_YAML)
    files = AclFiles(str(tmp_path))
    check = PlainAccessValidator(files).check
    for i in range(MAX_SENDABLE + 3):  # RocketMQ: an admin without perms, whose sends pass any topic
        check("127.0.0.1", _signed(RequestCode.SEND_MESSAGE_V2, {"b": f"T{i}"}, "RocketMQ", "12345678"))
    assert (
        len(files.table.accounts["RocketMQ"].sendable) == MAX_SENDABLE
    )  # the last three passed unremembered


def test_send_rules_on_the_send_path(tmp_path: Path) -> None:
    """Sends take their own path through `check`: retry topics need SUB on the group, the trace topic
    is open to PUB, SEND_MESSAGE names its topic in `topic`, and any other topic follows its perms."""
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "plain_acl.yml").write_text(ACL_YAML)
    check = PlainAccessValidator(AclFiles(str(tmp_path))).check
    v2 = RequestCode.SEND_MESSAGE_V2
    check("127.0.0.1", _signed(v2, {"b": "%RETRY%GroupY"}, "rocketmq2", "12345678", b"x"))
    check("127.0.0.1", _signed(v2, {"b": "RMQ_SYS_TRACE_TOPIC"}, "rocketmq2", "12345678", b"x"))
    check("127.0.0.1", _signed(RequestCode.SEND_BATCH_MESSAGE, {"b": "TopicA"}, "rocketmq2", "12345678"))
    check("127.0.0.1", _signed(RequestCode.SEND_MESSAGE, {"topic": "TopicA"}, "rocketmq2", "12345678"))
    denials = {
        "needs SUB on group GroupX, has DENY": _signed(v2, {"b": "%RETRY%GroupX"}, "rocketmq2", "12345678"),
        "needs PUB on topic TopicD, has DENY": _signed(
            RequestCode.SEND_MESSAGE, {"topic": "TopicD", "b": "TopicA"}, "rocketmq2", "12345678"
        ),
        "needs PUB on topic , has DENY": _signed(v2, {"a": "PG"}, "rocketmq2", "12345678"),
    }
    for remark, request in denials.items():
        with pytest.raises(AclDenied, match=remark):
            check("127.0.0.1", request)
