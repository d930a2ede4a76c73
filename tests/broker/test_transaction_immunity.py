"""A half's own CHECK_IMMUNITY_TIME_IN_SECONDS as 4.9.8's `TransactionalMessageServiceImpl#check` reads
it: a half still immune is put back at the half queue's end (`putImmunityMsgBackToHalfQueue`) and the check
moves on; the copy stands for its half, whose offsets the producer is asked about and answers with."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from daemon.broker import transaction
from daemon.broker.bodies import HeartbeatData, ProducerData
from daemon.broker.broker import Broker
from daemon.broker.headers import CheckTransactionStateRequestHeader, EndTransactionRequestHeader
from daemon.broker.transaction import committed_copy, immunity_ms
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.connection import Connection
from store.names import TRANS_CHECK_GROUP, TRANS_HALF_TOPIC
from store.record import decode_msg_id, decode_records
from tests.support.broker import BrokerHandle, start_broker

TX = {"TRAN_MSG": "true", "PGROUP": "TxPG"}
COMMIT, ROLLBACK = 8, 12


def test_immunity_is_read_as_javas_get_immunity_time() -> None:
    """-1, or no Java long, is `transactionTimeOut`; any other long is seconds."""
    timeout = 60_000
    for text in ("-1", "soon", " 5", "5\n", "1e3", "9223372036854775808", "", "-"):
        assert immunity_ms(text, timeout) == timeout, text
    assert immunity_ms(None, timeout) == timeout
    assert immunity_ms("0", timeout) == 0
    assert immunity_ms("+5", timeout) == immunity_ms("0005", timeout) == 5000
    assert immunity_ms("-5", timeout) == -5000  # (checked at once, as in Java)
    assert immunity_ms("9223372036854775807", timeout) == (2**63 - 1) * 1000


class Producer:
    """A 4.x transactional producer of group TxPG that records the checks it is sent."""

    def __init__(self, broker: Broker) -> None:
        self.checks: list[tuple[CheckTransactionStateRequestHeader, bytes]] = []
        self.arrived = asyncio.Event()
        self.client = RemotingClient({RequestCode.CHECK_TRANSACTION_STATE: self._on_check})
        self.handle = BrokerHandle(broker.addr, self.client, broker)

    def _on_check(self, conn: Connection, request: RemotingCommand) -> None:
        header = CheckTransactionStateRequestHeader.from_ext_fields(request.ext_fields)
        self.checks.append((header, decode_records(request.body)[0].body))
        self.arrived.set()

    async def join(self) -> None:
        beat = HeartbeatData("tx-1", [ProducerData("TxPG")], []).dumps()
        assert (await self.handle.call(RequestCode.HEART_BEAT, body=beat)).code == ResponseCode.SUCCESS

    async def half(self, body: bytes, immunity: str | None, key: str = "") -> int:
        """Send a half; its CommitLog offset."""
        props = dict(TX)
        if immunity is not None:
            props["CHECK_IMMUNITY_TIME_IN_SECONDS"] = immunity
        if key:
            props["UNIQ_KEY"] = key
        sent = await self.handle.send("TxI", body, props=props)
        assert sent.code == ResponseCode.SUCCESS, sent.remark
        return decode_msg_id(sent.ext_fields["msgId"])[1]

    async def end(self, phys: int, resolution: int) -> None:
        h = EndTransactionRequestHeader("TxPG", 0, phys, resolution, "id", True)
        answer = await self.handle.call(RequestCode.END_TRANSACTION, h.to_ext_fields())
        assert answer.code == ResponseCode.SUCCESS, answer.remark

    async def committed(self) -> list[bytes]:
        pulled = await self.handle.pull("G", "TxI", 0, 0)
        return [] if pulled.code != ResponseCode.SUCCESS else [m.body for m in decode_records(pulled.body)]


@asynccontextmanager
async def broker_with_producer(root: Path, **config: int) -> AsyncIterator[tuple[Broker, Producer]]:
    b = await start_broker(root, transaction_time_out=60_000, transaction_check_interval=3_600_000, **config)
    producer = Producer(b)
    try:
        await producer.join()
        yield b, producer
    finally:
        await producer.client.close()
        await b.stop()


def progress(b: Broker) -> int:
    return b.offsets.query_offset(TRANS_CHECK_GROUP, TRANS_HALF_TOPIC, 0)


def half_queue_end(b: Broker) -> int:
    return b.store.get_max_offset(TRANS_HALF_TOPIC, 0)


@pytest.fixture
def later(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    """The check loop's clock, moved on by the seconds the test adds to it."""
    ahead = [0.0]

    class Clock:
        @staticmethod
        def time() -> float:
            return time.time() + ahead[0]

    monkeypatch.setattr(transaction, "time", Clock)
    yield ahead


async def test_a_half_immune_for_ages_holds_back_no_progress(tmp_path: Path) -> None:
    """Before, the check's progress stayed at the immune half for as long as it was immune, and every pass
    read every half after it again (a backlog of resolved ones too)."""
    async with broker_with_producer(tmp_path / "s") as (b, producer):
        await producer.half(b"forever", "999999999999")
        due = [await producer.half(b"due %d" % i, "0") for i in range(3)]
        assert await b.transactions.check_once() == 3
        for phys in due:
            await producer.end(phys, ROLLBACK)
        for _ in range(3):
            assert await b.transactions.check_once() == 0
        assert [body for _, body in producer.checks] == [b"due 0", b"due 1", b"due 2"]
        # the immune half was put back at the end at each pass: the progress is past every other half
        assert progress(b) == half_queue_end(b) - 1 >= 4
        assert b.store.get_messages("", TRANS_HALF_TOPIC, 0, progress(b), 1).messages[0].stored.body == (
            b"forever"
        )


async def test_a_half_put_back_is_asked_about_with_its_own_offsets_and_committed_once(
    tmp_path: Path, later: list[float]
) -> None:
    """Its copy stands for it: the producer is asked about the half it sent (its offsets, the ones its
    END_TRANSACTION names), and its commit resolves every copy."""
    async with broker_with_producer(tmp_path / "s") as (b, producer):
        phys = await producer.half(b"once", "600")
        await producer.half(b"also", "600")
        assert await b.transactions.check_once() == 0
        assert await b.transactions.check_once() == 0  # put back again
        assert progress(b) == 4 and half_queue_end(b) == 6
        later[0] = 601
        assert await b.transactions.check_once() == 2
        await asyncio.wait_for(producer.arrived.wait(), 10)
        while len(producer.checks) < 2:
            await asyncio.sleep(0.01)
        header, body = producer.checks[0]
        assert (body, header.commit_log_offset, header.tran_state_table_offset) == (b"once", phys, 0)
        await producer.end(header.commit_log_offset, COMMIT)
        await producer.end(producer.checks[1][0].commit_log_offset, ROLLBACK)
        await producer.end(phys, COMMIT)  # (a second answer changes nothing)
        assert await b.transactions.check_once() == 0
        assert progress(b) == half_queue_end(b) == 6
        assert await producer.committed() == [b"once"]


async def test_a_put_back_half_committed_without_its_op_record_is_not_committed_again(
    tmp_path: Path, later: list[float]
) -> None:
    """The exactly-once lookup of a half stored before the start finds its committed copy through the
    copy put back: the next start's check writes the missing op record and asks nothing."""
    root = tmp_path / "s"
    async with broker_with_producer(root) as (b, producer):
        phys = await producer.half(b"once", "600", key="U-IMMUNE")
        assert await b.transactions.check_once() == 0
        assert progress(b) == 1  # its copy is at 1
        half = b.indexed_message(phys)
        assert half is not None
        assert (await b.put(committed_copy(half))).ok  # the commit's first put; its op record lost
    async with broker_with_producer(root) as (b, producer):
        later[0] = 601
        assert await b.transactions.check_once() == 0
        assert 0 in b.transactions.resolved
        await producer.end(phys, COMMIT)  # a late answer
        assert await producer.committed() == [b"once"]


async def test_a_producers_own_prepared_queue_offset_names_no_half(tmp_path: Path) -> None:
    """TRAN_PREPARED_QUEUE_OFFSET is a copy's mark; in a producer's half it makes no copy of the half
    it names (one resolved, here), which would leave it unchecked."""
    async with broker_with_producer(tmp_path / "s") as (b, producer):
        first = await producer.half(b"first", "0")
        await producer.end(first, ROLLBACK)
        props = {**TX, "CHECK_IMMUNITY_TIME_IN_SECONDS": "0", "TRAN_PREPARED_QUEUE_OFFSET": "0"}
        assert (await producer.handle.send("TxI", b"second", props=props)).code == ResponseCode.SUCCESS
        assert await b.transactions.check_once() == 1
        await asyncio.wait_for(producer.arrived.wait(), 10)
        assert [body for _, body in producer.checks] == [b"second"]


async def test_a_pass_held_behind_an_earlier_half_puts_no_copy_back(
    tmp_path: Path, later: list[float]
) -> None:
    """An old half nobody answers for (its producer group is gone) holds the progress: a copy of an immune half
    after it would not move it, so none is put back, and the half queue does not grow pass by pass."""
    async with broker_with_producer(tmp_path / "s") as (b, producer):
        props = {"TRAN_MSG": "true", "PGROUP": "GoneGroup"}
        assert (await producer.handle.send("TxI", b"orphan", props=props)).code == ResponseCode.SUCCESS
        await producer.half(b"immune", "600")
        later[0] = 61
        for _ in range(5):
            await b.transactions.check_once()
        assert progress(b) == 0
        assert half_queue_end(b) == 2


async def test_an_end_naming_a_put_back_copy_ends_its_half_once(tmp_path: Path) -> None:
    """An END_TRANSACTION naming the copy (as a check about a copy does once its half's file is gone, and as
    4.9.8's checks ask about its own copies) ends the half it stands for: a later END of the half commits
    nothing more."""
    async with broker_with_producer(tmp_path / "s") as (b, producer):
        phys = await producer.half(b"once", "600", key="UK1")
        assert await b.transactions.check_once() == 0
        (copy,) = b.store.get_messages(TRANS_CHECK_GROUP, TRANS_HALF_TOPIC, 0, 1, 1).messages
        await producer.end(copy.phys_offset, COMMIT)
        await producer.end(phys, COMMIT)
        assert await producer.committed() == [b"once"]
