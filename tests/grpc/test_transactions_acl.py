"""Transactions (commit, rollback, an orphan's check over Telemetry) and ACL 1.0 on the gRPC front."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.acl import USER_AK, USER_SK, write_acl
from tests.support.grpc5 import (
    create_topic,
    grpc_cluster,
    message,
    producer,
    receive_all,
    simple_consumer,
    stored,
    wait_for,
)

pytestmark = pytest.mark.slow

from rocketmq import TransactionChecker, TransactionResolution  # noqa: E402


class Checker(TransactionChecker):  # type: ignore[misc]
    """Answers every check with `answer`, remembering what it was asked."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.asked: list[str] = []
        self.lock = threading.Lock()

    def check(self, message: Any) -> Any:
        with self.lock:
            self.asked.append(message.message_id)
        return self.answer


def test_commit_stores_and_rollback_drops_the_half_message(tmp_path: Path) -> None:
    with grpc_cluster(tmp_path) as cluster:
        create_topic(cluster, "Tx")
        with producer(cluster, ("Tx",), checker=Checker(TransactionResolution.ROLLBACK)) as p:
            committed = p.begin_transaction()
            kept = p.send(message("Tx", b"commit me"), transaction=committed)
            rolled = p.begin_transaction()
            dropped = p.send(message("Tx", b"roll me back"), transaction=rolled)
            assert stored(cluster, "Tx") == []  # half messages are invisible
            committed.commit()
            rolled.rollback()
            found = wait_for(lambda: stored(cluster, "Tx"))
        time.sleep(0.5)
        assert [(m.uniq_key, m.body) for m in stored(cluster, "Tx")] == [(kept.message_id, b"commit me")]
        assert dropped.message_id not in {m.uniq_key for m in found}


def test_an_orphaned_half_message_is_checked_over_telemetry_and_committed(tmp_path: Path) -> None:
    checker = Checker(TransactionResolution.COMMIT)
    with grpc_cluster(tmp_path, transaction_check_interval=500, transaction_time_out=300) as cluster:
        create_topic(cluster, "Tx")
        with producer(cluster, ("Tx",), checker=checker) as p:
            orphan = p.send(message("Tx", b"orphan"), transaction=p.begin_transaction())
            # never committed by the producer: the broker's check loop asks it
            found = wait_for(lambda: stored(cluster, "Tx"), timeout=20)
        assert [(m.uniq_key, m.body) for m in found] == [(orphan.message_id, b"orphan")]
        assert checker.asked and set(checker.asked) == {orphan.message_id}


def test_acl_right_secret_passes_wrong_secret_and_missing_permission_are_refused(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_acl(home)
    with grpc_cluster(tmp_path / "c", acl_enable=True, rocketmq_home=str(home)) as cluster:
        create_topic(cluster, "TopicA")
        create_topic(cluster, "TopicDeny")
        with producer(cluster, ("TopicA",), ak=USER_AK, sk=USER_SK) as p:
            sent = p.send(message("TopicA", b"signed")).message_id
            # (refused at its route, ANY on the topic, as by the proxy: the client names the route)
            with pytest.raises(Exception, match=r"FORBIDDEN|needs PUB|TopicDeny route"):
                p.send(message("TopicDeny", b"not allowed"))
        with (
            producer(cluster, ("TopicA",), ak=USER_AK, sk="wrong-secret") as p,
            pytest.raises(Exception, match=r"UNAUTHORIZED|signature|TopicA route"),
        ):
            p.send(message("TopicA", b"forged"))
        with (
            producer(cluster, ("TopicA",)) as p,  # anonymous
            pytest.raises(Exception, match=r"UNAUTHORIZED|credential|TopicA route"),
        ):
            p.send(message("TopicA", b"anonymous"))
        with simple_consumer(cluster, "G", "TopicA", ak=USER_AK, sk=USER_SK) as c:
            got = receive_all(c, 1)
            assert [m.message_id for m in got] == [sent]
            c.ack(got[0])
        with (
            simple_consumer(cluster, "G", "TopicA", ak=USER_AK, sk="wrong-secret") as c,
            pytest.raises(Exception, match=r"UNAUTHORIZED|signature|TopicA route"),
        ):
            c.receive(32, 30)
        assert [m.body for m in stored(cluster, "TopicA")] == [b"signed"]
