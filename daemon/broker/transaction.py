"""Transactional messages: END_TRANSACTION resolution and the CHECK_TRANSACTION_STATE service
(docs/wire-protocol.md §transactions).

A half message waits in `RMQ_SYS_TRANS_HALF_TOPIC` queue 0. END_TRANSACTION commits it (re-put into its
`REAL_TOPIC`/`REAL_QID` with the commit sysFlag) or rolls it back, and either way writes an "op" record
(body = the half's queue offset, tag `d`) to `RMQ_SYS_TRANS_OP_HALF_TOPIC`, as Java does. Every
`transactionCheckInterval` the service asks a live producer of the half's group (`PGROUP`) about halves
older than `transactionTimeOut` (or the half's own CHECK_IMMUNITY_TIME_IN_SECONDS) that have no op record,
at most `transactionCheckMax` times each. A half still immune by its own time is put back at the queue's
end, as 4.9.8's `TransactionalMessageServiceImpl#check` does, so it holds back neither the halves after it
nor the progress: the copy names its half (``TRAN_PREPARED_QUEUE_OFFSET``, and its CommitLog offset as
`prepared_transaction_offset`), which the check goes on treating as the transaction.
Progress through the half queue is kept as the offset of group `CID_RMQ_SYS_TRANS`, like Java.

The committed copy and the op record are two puts (two quorum rounds on DLedger): a leader killed between
them, or a broker SIGKILLed there, leaves a committed half with no op record, which 4.9.8 checks and commits
again. So a half stored before this service started (another leader's, or an earlier incarnation's), or
one whose commit put or op record's put failed here, is looked up before it is committed or checked: its
committed copy in the real topic (its ``UNIQ_KEY`` in the IndexFile, and ``TRAN_PREPARED_QUEUE_OFFSET``
naming the half) marks it resolved, and only the missing op record is written (at once for a copy stored
here: its index entry may lag).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from typing import TYPE_CHECKING

from daemon.broker.headers import CheckTransactionStateRequestHeader, EndTransactionRequestHeader
from daemon.broker.processors import system_error
from daemon.broker.timer import TIMER_PROPS
from daemon.lifecycle import cancel_tasks, supervise
from daemon.remoting.bodies import PermName
from daemon.remoting.codes import RequestCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.errors import RemotingError
from store.message import (
    PROPERTY_CHECK_IMMUNITY_TIME,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET,
    PROPERTY_UNIQ_KEY,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
    Message,
    StoredMessage,
)
from store.names import TIMER_TOPIC, TRANS_CHECK_GROUP, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC

if TYPE_CHECKING:
    from daemon.broker.context import BrokerContext
    from store.results import SelectedMessage

log = logging.getLogger(__name__)

OP_TAG = "d"  # Java's TransactionalMessageUtil.REMOVETAG
BATCH = 32


class TransactionService:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker
        self.resolved: set[int] = set()  # half queue offsets that have an op record
        self.check_times: dict[int, int] = {}
        #: Halves (queue offset) whose commit or rollback is being stored: a second END waits for it.
        self._ending: dict[int, asyncio.Event] = {}
        #: The op queue's offset read up to (see _read_ops).
        self._op_offset = 0
        #: CommitLog end when this service started: a half below it may have been committed by another
        #: leader or incarnation without its op record (see _committed_before).
        self._verify_below = 0
        #: Halves looked up and found not committed (nothing but this service commits them since).
        self._looked_up: set[int] = set()
        #: Halves whose commit put was made here, until their op record is written: a failed put may be
        #: stored all the same (a quorum timeout).
        self._maybe_committed: set[int] = set()
        #: Halves whose committed copy this service stored and whose op record is not written yet.
        self._committed: set[int] = set()
        self._task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ lifecycle

    def load(self) -> None:
        """Rebuild the resolved set from the op queue (small: one short record per transaction)."""
        self._read_ops()

    def _read_ops(self, limit: int | None = None) -> int:
        """Add the op records stored since the last read (at most `limit` batches) to the resolved set;
        returns how many batches were read. A DLedger follower's queue holds the ones its leader wrote:
        read again when it is elected (see catch_up and start)."""
        store = self.broker.store
        batches = 0
        while limit is None or batches < limit:
            result = store.get_messages(TRANS_CHECK_GROUP, TRANS_OP_HALF_TOPIC, 0, self._op_offset, BATCH)
            if not result.messages:
                break
            for selected in result.messages:
                with contextlib.suppress(ValueError):
                    self.resolved.add(int(selected.message.body))
            self._op_offset = result.next_begin_offset
            batches += 1
        return batches

    async def catch_up(self) -> None:
        """Read the op records stored since the last read a batch at a time, serving requests between
        batches (an elected member that followed for long has many)."""
        while self._read_ops(limit=1):
            await asyncio.sleep(0)

    def start(self) -> None:
        """Start checking, as the master: first every op record written since the load (by the leaders
        before this one), or a committed half would be committed again and a rolled back one checked."""
        self._read_ops()
        self._verify_below = self.broker.store.max_phy_offset
        self._looked_up.clear()
        self._task = supervise(self._run, "transaction-check")

    async def stop(self) -> None:
        await cancel_tasks([self._task])

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.broker.config.transaction_check_interval / 1000)
            try:
                await self.check_once()
            except Exception:
                log.exception("transaction check failed")

    # ------------------------------------------------------------------ END_TRANSACTION

    async def end(self, h: EndTransactionRequestHeader) -> None:
        """Commit or roll back the half message at `h.commit_log_offset`; 0 (unknown) changes nothing."""
        if h.commit_or_rollback not in (TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE):
            return
        half = self.broker.indexed_message(h.commit_log_offset)  # not a record forged inside a body
        if half is None or half.topic != TRANS_HALF_TOPIC:
            raise system_error(f"Find prepared transaction message failed, offset {h.commit_log_offset}")
        origin = self._origin(half)
        if origin is not None and origin[1] is not None:  # a copy put back: the transaction is its half's
            half = origin[1].stored
        elif origin is not None and origin[0] in self.resolved:
            return
        qoff = half.queue_offset
        while (ending := self._ending.get(qoff)) is not None:  # another END of it waits for its put
            await ending.wait()
        if qoff in self.resolved:
            return  # already ended (a late answer to a check)
        self._ending[qoff] = done = asyncio.Event()
        try:
            await self._end(h, half)
        finally:
            del self._ending[qoff]
            done.set()

    async def _end(self, h: EndTransactionRequestHeader, half: StoredMessage) -> None:
        if h.commit_or_rollback == TRANSACTION_COMMIT_TYPE and not self._committed_before(half):
            committed = committed_copy(half)
            # a committed timer message waits for its time (5.x parks it on commit, not as a half)
            committed.topic, committed.queue_id = self.broker.timers.park(
                committed.topic, committed.queue_id, committed.properties
            )
            # maybe stored (a failed put may be stored all the same, a quorum timeout) until its op record
            # is: a failed op put must not lead to a second copy
            self._maybe_committed.add(half.queue_offset)
            result = await self.broker.put(committed)
            if not result.ok:
                raise system_error(result.status.value)
            self._committed.add(half.queue_offset)  # stored: no lookup (its index entry may lag)
            self.broker.stats.on_put(
                half.properties.get(PROPERTY_REAL_TOPIC, half.topic), 1, result.wrote_bytes
            )
        await self._write_op(half.queue_offset)

    async def _write_op(self, half_offset: int) -> None:
        self.broker.topics.create_system_like(TRANS_OP_HALF_TOPIC, 1, PermName.READ_WRITE)
        op = Message(
            TRANS_OP_HALF_TOPIC,
            str(half_offset).encode(),
            properties={PROPERTY_TAGS: OP_TAG},
            store_host=(self.broker.config.ip1, self.broker.config.listen_port),
            wait_store_msg_ok=False,
        )
        result = await self.broker.put(op)
        if not result.ok:
            raise system_error(f"writing the transaction op record failed: {result.status.value}")
        self.resolved.add(half_offset)
        self.check_times.pop(half_offset, None)
        self._looked_up.discard(half_offset)
        self._maybe_committed.discard(half_offset)
        self._committed.discard(half_offset)

    def _committed_before(self, half: StoredMessage) -> bool:
        """Whether the half's committed copy is stored already, where it may be without this service
        knowing: the half predates its start, or a put of its copy or op record failed here. Looked up once."""
        qoff = half.queue_offset
        if qoff in self._committed:
            return True
        if qoff not in self._maybe_committed and (
            half.commit_log_offset >= self._verify_below or qoff in self._looked_up
        ):
            return False
        props = half.properties
        key = props.get(PROPERTY_UNIQ_KEY) or next(iter(half.keys), "")
        if not key:
            return False  # (no RocketMQ client sends one so: nothing to find it by)
        topics = [props.get(PROPERTY_REAL_TOPIC, half.topic)]
        if any(k in props for k in TIMER_PROPS):
            topics.append(TIMER_TOPIC)  # a committed timer message waits there
        wanted = str(qoff)
        begin = half.store_timestamp - 1000  # the copy is stored after the half; the index keeps seconds
        for topic in topics:
            for selected in self.broker.store.query_message(topic, key, 32, begin, 2**62).messages:
                m = selected.stored
                if (
                    m.properties.get(PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET) == wanted
                    and m.prepared_transaction_offset == half.commit_log_offset
                ):
                    log.info(
                        "half message %s was committed already: its op record is written now", half.msg_id
                    )
                    return True
        self._looked_up.add(qoff)
        return False

    # ------------------------------------------------------------------ CHECK_TRANSACTION_STATE

    async def check_once(self) -> int:
        """One pass over the unresolved halves stored before it began; returns how many checks were sent."""
        broker = self.broker
        config = broker.config
        offsets = broker.offsets
        progress = max(offsets.query_offset(TRANS_CHECK_GROUP, TRANS_HALF_TOPIC, 0), 0)
        sent = 0
        offset = progress
        stop = broker.store.get_max_offset(TRANS_HALF_TOPIC, 0)  # (not the copies this pass puts back)
        seen: set[int] = set()  # the halves handled in this pass (a half put back twice has two copies)
        now = int(time.time() * 1000)
        while offset < stop:
            result = broker.store.get_messages(TRANS_CHECK_GROUP, TRANS_HALF_TOPIC, 0, offset, BATCH)
            if not result.messages:
                break
            for selected in result.messages:
                qoff = selected.queue_offset
                if qoff >= stop:
                    offset = -1
                    break
                half, raw = selected.stored, selected.raw
                done = qoff in self.resolved
                origin = None if done else self._origin(half)
                if origin is not None:  # a copy put back: the transaction is its half's
                    if origin[0] in self.resolved:
                        done = True
                    elif origin[1] is not None:
                        half, raw = origin[1].stored, origin[1].raw
                hoff = half.queue_offset
                if done or hoff in seen:
                    if qoff == progress:
                        progress += 1
                    continue
                seen.add(hoff)
                immunity = half.properties.get(PROPERTY_CHECK_IMMUNITY_TIME)
                # (a copy whose half's file is deleted is checked as itself; 4.9.8 drops so old a half)
                if now - half.store_timestamp < immunity_ms(immunity, config.transaction_time_out) and (
                    origin is None or origin[1] is not None
                ):
                    if immunity is None:  # the halves after it are younger still
                        offset = -1
                        break
                    if qoff != progress:  # held behind an earlier half: a copy would not move it
                        continue
                    if not await self._put_back(half):  # tried again at the next pass
                        offset = -1
                        break
                    if qoff == progress:
                        progress += 1
                    continue
                if self._committed_before(half):  # its op record was lost: nothing to ask
                    await self._write_op(hoff)
                    if qoff == progress:
                        progress += 1
                    continue
                if self.check_times.get(hoff, 0) >= config.transaction_check_max:
                    log.warning(
                        "half message %s checked %d times: discarded",
                        half.msg_id,
                        config.transaction_check_max,
                    )
                    await self._write_op(hoff)
                    if qoff == progress:
                        progress += 1
                    continue
                if self._ask_producer(half, bytes(raw)):
                    self.check_times[hoff] = self.check_times.get(hoff, 0) + 1
                    sent += 1
            if offset < 0:
                break
            offset = result.next_begin_offset
            await asyncio.sleep(0)  # a batch at a time: after a start each old half may be looked up
        offsets.commit_offset(TRANS_CHECK_GROUP, TRANS_HALF_TOPIC, 0, progress)
        return sent

    def _origin(self, half: StoredMessage) -> tuple[int, SelectedMessage | None] | None:
        """For a copy `_put_back` stored: its half's queue offset and the half (None once its file is
        deleted); None for any other half. A producer's own ``TRAN_PREPARED_QUEUE_OFFSET`` names no half:
        its `prepared_transaction_offset` is 0, the broker's to set."""
        text = half.properties.get(PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET)
        if text is None or not (text.isascii() and text.isdigit()) or len(text) > 19:
            return None
        origin = int(text)
        if origin >= half.queue_offset:
            return None
        store = self.broker.store
        found = store.get_messages(TRANS_CHECK_GROUP, TRANS_HALF_TOPIC, 0, origin, 1).messages
        if found and found[0].queue_offset == origin:
            named = found[0].stored
            if (  # (a half stored at CommitLog offset 0 has a copy with 0 too: the copy is its twin)
                found[0].phys_offset == half.prepared_transaction_offset
                and named.born_timestamp == half.born_timestamp
                and named.properties.get(PROPERTY_UNIQ_KEY) == half.properties.get(PROPERTY_UNIQ_KEY)
            ):
                return origin, found[0]
            return None
        if half.prepared_transaction_offset > 0 and origin < store.get_min_offset(TRANS_HALF_TOPIC, 0):
            return origin, None
        return None

    async def _put_back(self, half: StoredMessage) -> bool:
        """Store a copy of an immune half at the half queue's end (4.9.8's `putImmunityMsgBackToHalfQueue`)
        naming it, so the check moves on; whether it was stored."""
        copy = committed_copy(half)  # (its fields, but for these: a half, stored as a half is)
        copy.topic, copy.queue_id, copy.sys_flag = TRANS_HALF_TOPIC, 0, half.sys_flag
        copy.properties = dict(half.properties)
        copy.properties[PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET] = str(half.queue_offset)
        copy.wait_store_msg_ok = False
        result = await self.broker.put(copy)
        if not result.ok:
            log.warning("putting immune half message %s back failed: %s", half.msg_id, result.status.value)
        return result.ok

    def _ask_producer(self, half: StoredMessage, raw: bytes) -> bool:
        group = half.properties.get(PROPERTY_PRODUCER_GROUP, "")
        channels = self.broker.producers.groups.get(group)
        if not channels:
            log.info("no live producer of group %s to check half message %s", group, half.msg_id)
            return False
        channel = next(iter(channels.values()))
        uniq = half.properties.get(PROPERTY_UNIQ_KEY, half.msg_id)
        header = CheckTransactionStateRequestHeader(
            half.queue_offset, half.commit_log_offset, uniq, uniq, half.msg_id
        )
        try:
            channel.conn.invoke_oneway(
                RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE, header.to_ext_fields(), raw)
            )
        except RemotingError as exc:
            log.info("cannot check half message %s with %s: %s", half.msg_id, channel.client_id, exc)
            return False
        return True


def immunity_ms(seconds: str | None, timeout_ms: int) -> int:
    """How long after it was stored a half is left unchecked: its producer's CHECK_IMMUNITY_TIME_IN_SECONDS,
    else (absent, -1, or not a Java long: Java's `getImmunityTime`) `transactionTimeOut`."""
    if seconds is None:
        return timeout_ms
    if _JAVA_LONG.fullmatch(seconds) is None:  # (what Java's Long.parseLong takes, in ASCII)
        return timeout_ms
    value = int(seconds)
    if value == -1 or not -(2**63) <= value < 2**63:
        return timeout_ms
    return value * 1000


#: A decimal Java long: a sign, leading zeros, then at most 19 digits (the range is checked apart).
_JAVA_LONG = re.compile(r"[+-]?0*[0-9]{1,19}")


def committed_copy(half: StoredMessage) -> Message:
    """The half message as its committed twin in the real topic and queue."""
    props = dict(half.properties)
    props.pop(PROPERTY_TRANSACTION_PREPARED, None)
    props[PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET] = str(half.queue_offset)
    return Message(
        topic=props.get(PROPERTY_REAL_TOPIC, half.topic),
        body=half.stored_body,
        queue_id=int(props.get(PROPERTY_REAL_QUEUE_ID, "0")),
        flag=half.flag,
        properties=props,
        sys_flag=(half.sys_flag & ~TRANSACTION_TYPE_MASK) | TRANSACTION_COMMIT_TYPE,
        born_timestamp=half.born_timestamp,
        born_host=half.born_host,
        store_host=half.store_host,
        reconsume_times=half.reconsume_times,
        prepared_transaction_offset=half.commit_log_offset,
        wait_store_msg_ok=True,
    )
