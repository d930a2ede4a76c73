"""The gRPC front as the 5.x proxy checks a request: ACL before anything else (QueryRoute and
NotifyClientTermination too), the proxy's codes for a message it refuses (control characters, system
properties), a producer's transaction recovery time honoured, and a client forgotten while its Telemetry
stream stays open registered whole again by its next Settings."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.daemons import LocalCluster
from tests.grpc.test_attacks import META, Metadatum, _authorization, send_request, signed
from tests.grpc.test_transactions_acl import Checker
from tests.support.acl import PLAIN_ACL, USER_AK, USER_SK, write_acl
from tests.support.grpc5 import (
    MessagingServiceStub,
    create_topic,
    endpoint,
    grpc_cluster,
    joined,
    message,
    pb,
    producer,
    simple_consumer,
    spb,
    stored,
    wait_for,
)

pytestmark = pytest.mark.slow

from rocketmq import TransactionResolution  # noqa: E402


def wrong_secret() -> tuple[tuple[str, str], ...]:
    return tuple((k, v.replace("Signature=", "Signature=00")) for k, v in signed())


def test_query_route_is_checked_as_the_proxy_checks_it(
    acl: tuple[LocalCluster, MessagingServiceStub],
) -> None:
    """Signature, then PUB or SUB on the topic: before, anyone learnt a route and whether a topic exists."""
    _cluster, s = acl

    def route(topic: str, metadata: Any) -> str:
        answer = s.QueryRoute(
            spb.QueryRouteRequest(topic=pb.Resource(name=topic)), metadata=metadata, timeout=10
        )
        return str(pb.Code.Name(answer.status.code))

    assert route("TopicA", signed()) == "OK"
    assert route("TopicA", META) == route("NoSuchTopic", META) == "UNAUTHORIZED"
    assert route("TopicA", wrong_secret()) == "UNAUTHORIZED"
    assert route("TopicDeny", signed()) == "FORBIDDEN"
    assert route("NoSuchTopic", signed()) == "FORBIDDEN"  # (its default topic permission is DENY)


def test_an_unsigned_termination_does_not_forget_a_signed_client(
    acl: tuple[LocalCluster, MessagingServiceStub],
) -> None:
    """5.x's PlainAccessResource checks SUB on the request's group; before, any peer of the same host
    naming a client's id made the broker forget it (its heartbeats then failed, its leases stopped)."""
    cluster, s = acl
    with simple_consumer(cluster, "GA", "TopicA", listed=True, ak=USER_AK, sk=USER_SK) as consumer:
        request = spb.NotifyClientTerminationRequest(group=pb.Resource(name="GA"))
        for metadata in (META, wrong_secret()):
            named = (
                *[m for m in metadata if m[0] != "x-mq-client-id"],
                ("x-mq-client-id", consumer.client_id),
            )
            answer = s.NotifyClientTermination(request, metadata=named, timeout=10)
            assert answer.status.code == pb.UNAUTHORIZED, answer.status
        assert joined(cluster, "GA", consumer.client_id)
        as_it = (*[m for m in signed() if m[0] != "x-mq-client-id"], ("x-mq-client-id", consumer.client_id))
        assert s.NotifyClientTermination(request, metadata=as_it, timeout=10).status.code == pb.OK
        assert not joined(cluster, "GA", consumer.client_id)


OUTSIDER_ACL = (
    PLAIN_ACL
    + """  - accessKey: outsider
    secretKey: outsider-secret
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    groupPerms:
      - GOther=SUB
"""
)


def test_another_accounts_termination_forgets_no_client_it_names_no_group_of(tmp_path: Path) -> None:
    """A producer names no group, and a request may name another group than its client's: the signature
    alone was checked then, and any account of the client's host made the broker forget another
    account's consumer or producer. Now the client's own group and topics are checked as well."""
    home = tmp_path / "home"
    write_acl(home, OUTSIDER_ACL)
    with (
        grpc_cluster(tmp_path / "c", acl_enable=True, rocketmq_home=str(home)) as cluster,
        grpc.insecure_channel(endpoint(cluster)) as channel,
    ):
        create_topic(cluster, "TopicA")
        s = MessagingServiceStub(channel)
        now = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())

        def end(client_id: str, group: str = "", ak: str = "outsider", sk: str = "outsider-secret") -> str:
            metadata = (*_authorization(ak, sk, now).items(), ("x-mq-client-id", client_id))
            request = spb.NotifyClientTerminationRequest(group=pb.Resource(name=group) if group else None)
            answer = s.NotifyClientTermination(request, metadata=metadata, timeout=10)
            return str(pb.Code.Name(answer.status.code))

        with (
            simple_consumer(cluster, "GA", "TopicA", listed=True, ak=USER_AK, sk=USER_SK) as consumer,
            producer(cluster, ("TopicA",), ak=USER_AK, sk=USER_SK) as made,
        ):
            wait_for(lambda: joined(cluster, "TopicA", made.client_id, producer=True))
            assert end(consumer.client_id, "GA") == end(consumer.client_id) == "FORBIDDEN"
            assert end(consumer.client_id, "GOther") == "FORBIDDEN"  # (it may SUB on GOther)
            assert joined(cluster, "GA", consumer.client_id)
            assert end(made.client_id) == "FORBIDDEN"
            assert joined(cluster, "TopicA", made.client_id, producer=True)
            assert end(made.client_id, ak=USER_AK, sk=USER_SK) == "OK"
            assert not joined(cluster, "TopicA", made.client_id, producer=True)
            assert end(consumer.client_id, ak=USER_AK, sk=USER_SK) == "OK"
            assert not joined(cluster, "GA", consumer.client_id)


class StreamContext:
    """A Telemetry stream's context whose commands the test hands in (the service's seam)."""

    def __init__(self, client_id: str) -> None:
        self.commands: asyncio.Queue[Any] = asyncio.Queue()
        self.written: list[Any] = []
        self._metadata = (Metadatum("x-mq-client-id", client_id), Metadatum("x-mq-language", "PYTHON"))

    def peer(self) -> str:
        return "ipv4:127.0.0.1:40001"

    def invocation_metadata(self) -> tuple[Metadatum, ...]:
        return self._metadata

    def time_remaining(self) -> float:
        return 10.0

    async def read(self) -> Any:
        return await self.commands.get()

    async def write(self, message: Any) -> None:
        self.written.append(message)


def test_settings_reaching_a_forgotten_client_register_it_whole(tmp_path: Path) -> None:
    """Settings read on a client's stream as the client is forgotten: the broker registered the forgotten
    object as a producer while its registry held none, so the client was listed and its heartbeats were
    answered UNRECOGNIZED_CLIENT_TYPE. Now both agree."""
    with grpc_cluster(tmp_path) as cluster:
        create_topic(cluster, "Raced", 1)
        assert cluster.broker.grpc is not None
        service = cluster.broker.grpc.service
        settings = spb.TelemetryCommand(
            settings=pb.Settings(
                client_type=pb.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name="Raced")])
            )
        )

        async def race() -> tuple[int, bool]:
            context = StreamContext("raced@1")
            stream = asyncio.ensure_future(service.Telemetry(iter(()), context))
            context.commands.put_nowait(settings)
            while not context.written:
                await asyncio.sleep(0.01)
            client = service.clients.known("raced@1", ("127.0.0.1", 40001))
            assert client is not None
            context.commands.put_nowait(settings)  # its Settings come in ...
            service.clients.forget(client)  # ... as it is forgotten
            await asyncio.sleep(0.2)
            context.commands.put_nowait(grpc.aio.EOF)
            await asyncio.gather(stream)
            beat = await service.Heartbeat(spb.HeartbeatRequest(), context)
            return beat.status.code, bool(cluster.broker.producers.groups.get("Raced"))

        code, listed = cluster.loop.run(race())
        assert (pb.Code.Name(code), listed) in {("OK", True), ("UNRECOGNIZED_CLIENT_TYPE", False)}


@pytest.mark.parametrize(
    ("user", "system", "code"),
    [
        ({"k": "v\x02TAGS\x01evil"}, {}, pb.ILLEGAL_MESSAGE_PROPERTY_KEY),
        ({"k\x01": "v"}, {}, pb.ILLEGAL_MESSAGE_PROPERTY_KEY),
        ({}, {"tag": "t\x02KEYS\x01k1"}, pb.ILLEGAL_MESSAGE_TAG),
        ({}, {"message_group": "g\x02TRAN_MSG\x01true", "message_type": pb.FIFO}, pb.ILLEGAL_MESSAGE_GROUP),
        ({"__BORNHOST": "10.1.1.1"}, {}, pb.ILLEGAL_MESSAGE_PROPERTY_KEY),
        ({"DLQ_ORIGIN_TOPIC": "Payments"}, {}, pb.ILLEGAL_MESSAGE_PROPERTY_KEY),
    ],
)
def test_control_characters_and_system_properties_get_the_proxys_codes_after_acl(
    acl: tuple[LocalCluster, MessagingServiceStub],
    caplog: pytest.LogCaptureFixture,
    user: dict[str, str],
    system: dict[str, Any],
    code: int,
) -> None:
    """Before, a separator byte was a gRPC UNKNOWN with an ERROR traceback, ahead of the signature check,
    and a system property was stored as the user's."""
    cluster, s = acl
    request = send_request("TopicA", user=user)
    for name, value in system.items():
        setattr(request.messages[0].system_properties, name, value)
    with caplog.at_level(logging.ERROR):
        for metadata in (META, wrong_secret()):
            assert s.SendMessage(request, metadata=metadata, timeout=10).status.code == pb.UNAUTHORIZED
        answer = s.SendMessage(request, metadata=signed(), timeout=10)
    assert pb.Code.Name(answer.status.code) == pb.Code.Name(code), answer.status
    assert stored(cluster, "TopicA") == []
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_the_official_client_sees_the_proxys_code_and_no_system_property(tmp_path: Path) -> None:
    with grpc_cluster(tmp_path) as cluster:
        create_topic(cluster, "Props")
        with producer(cluster, ("Props",)) as p:
            bad = message("Props", b"separator")
            bad.add_property("k", "v\x02x")
            with pytest.raises(Exception, match=r"ILLEGAL_MESSAGE_PROPERTY_KEY|control character"):
                p.send(bad)
            good = message("Props", b"fine")
            good.add_property("mine", "kept")
            p.send(good)
        with simple_consumer(cluster, "GP", "Props") as c:
            got = wait_for(lambda: c.receive(32, 30))
        assert [(m.body, m.properties) for m in got] == [(b"fine", {"mine": "kept"})]


def half(recovery_s: int = 0) -> spb.SendMessageRequest:
    request = send_request("Tx")
    sys = request.messages[0].system_properties
    sys.message_id = "01" + uuid.uuid4().hex.upper()
    sys.message_type = pb.TRANSACTION
    if recovery_s:
        sys.orphaned_transaction_recovery_duration.FromSeconds(recovery_s)
    return request


def test_a_5x_halfs_orphaned_transaction_recovery_duration_is_honoured(tmp_path: Path) -> None:
    """The proxy stores it as CHECK_IMMUNITY_TIME_IN_SECONDS, which the check loop read nowhere: the
    producer was asked at `transactionTimeOut`. A user property of that name is a user's to set."""
    checker = Checker(TransactionResolution.ROLLBACK)
    with (
        grpc_cluster(tmp_path, transaction_check_interval=300, transaction_time_out=200) as cluster,
        grpc.insecure_channel(endpoint(cluster)) as channel,
    ):
        create_topic(cluster, "Tx")
        s = MessagingServiceStub(channel)
        with producer(cluster, ("Tx",), checker=checker):
            immune, plain = half(600), half()
            for request in (immune, plain):
                assert s.SendMessage(request, metadata=META, timeout=10).status.code == pb.OK
            wait_for(lambda: plain.messages[0].system_properties.message_id in checker.asked)
            time.sleep(2)  # (several more passes of the check loop)
        assert immune.messages[0].system_properties.message_id not in checker.asked
        user = s.SendMessage(send_request("Tx", user={"CHECK_IMMUNITY_TIME_IN_SECONDS": "5"}), metadata=META)
        assert user.status.code == pb.OK, user.status


def test_a_batch_failing_one_way_answers_that_code(tmp_path: Path) -> None:
    """As `AckMessageActivity#setAckResponseStatus`: one code shared by every entry is the batch's."""
    with grpc_cluster(tmp_path) as cluster, grpc.insecure_channel(endpoint(cluster)) as channel:
        create_topic(cluster, "Acked")
        s = MessagingServiceStub(channel)
        entries = [
            spb.AckMessageEntry(message_id=f"01{i:032X}", receipt_handle=f"forged-{i}") for i in range(2)
        ]
        request = spb.AckMessageRequest(
            group=pb.Resource(name="GA"), topic=pb.Resource(name="Acked"), entries=entries
        )
        answer = s.AckMessage(request, metadata=META, timeout=10)
        assert [e.status.code for e in answer.entries] == [pb.INVALID_RECEIPT_HANDLE] * 2
        assert answer.status.code == pb.INVALID_RECEIPT_HANDLE, answer.status
