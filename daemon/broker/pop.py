"""POP consumption (RocketMQ 5.x): messages lent out with an invisibility, acked by receipt handle.

The design follows 5.x's KV pop (``PopConsumerService``), not its revive log: one in-flight record per
popped message, the group's pop offset (where its next pop reads) kept by this broker, and a revive
loop that re-puts every record whose invisibility ran out into the group's retry topic (``%RETRY%group``,
the topic 4.x retries use too) with ``reconsumeTimes + 1``, or into ``%DLQ%group`` after the group's
``retryMaxTimes``. Popping reads the topic's queues and the group's retry topic, as
``PopMessageProcessor`` does.

Why a journal of our own (``<store>/pop/inflight.journal``) and not ``rmq_sys_REVIVE_LOG_<cluster>``:
the revive log needs the checkpoint/ack pairing, a merge buffer and per-queue revive offsets to be
read back (thousands of Java lines) for the same guarantee, and a 5.x broker opening our store would
only lose in-flight handles (their messages come back as the offsets say), never acked state. Each pop,
ack or change is written with one ``write`` before it is answered, so a SIGKILL loses nothing the
page cache holds; a pop's new queue offsets go in the same write, so an offset table older than the
journal (it is written every few seconds) never makes an acked message come back.

Unlike 5.x, which commits the pop offset at pop time, the consumer offset table holds each queue's ack
watermark: the lowest offset still lent and not acked, or the pop offset when none is. The table is the
state a slave and the other members of a DLedger group take from this broker (every 10 s), and a member
elected leader starts popping there (:meth:`PopService.take_over`): what the old leader lent and nobody
acked is lent again, with the acked ones above it (duplicates, never a loss). An offset someone else
writes into the table (an operator's reset) wins at the next pop or ack of that queue.

In a DLedger group the POP state is the leader's alone, so what a client was told has to be held by the
group too: an ack, a change of invisibility (a renewal included) and the end of a lending by a revive are
logged as 5.x's revive records (``AckMsg`` tagged ``ack``, ``BatchAckMsg`` tagged ``bAck`` for the acks of
one turn of one pop's queue, ``PopCheckPoint`` tagged ``ck``) in queue 0 of
``rmq_sys_REVIVE_LOG_<cluster>``, and an ack or change is answered only once a quorum holds its record.
A member elected leader reads them (:meth:`PopService.catch_up`, a batch at a time) before it lends: an
acked message above the offset table's watermark is skipped, a changed one is lent as the change said
(its handle stays valid). A FIFO lending is logged too (one checkpoint per queue and pop, held before
the pop answers): the member keeps the queue's order lock as it was. A lending ended by a copy into the
retry topic or the DLQ is logged before the copy, naming it: a member taking over looks for the copy and
puts it when the log lacks it (:meth:`PopService._make_copies`). Records of a message below the watermark
are superseded: the offset of group ``CID_RMQ_SYS_REVIVE_GROUP`` on that queue is the first record still
live (5.x's revive offset), taken by the followers with the rest of the table, and the CommitLog's
retention removes the rest.

FIFO pop (``order=true``) is 5.x's order lock per queue (``ConsumerOrderInfoManager``): while a popped
message of a queue is neither acked nor expired the queue gives the group nothing more; once expired
the same messages come back in order with their attempt counted up, and past ``retryMaxTimes`` they go
to the DLQ. ``pop`` is synchronous between its reads and its records, so nothing interleaves on the loop.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import heapq
import json
import logging
import os
import random
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Protocol

from daemon.broker.filter import build_subscription, is_tag_type, tag_codes
from daemon.broker.long_poll import ANY_QUEUE
from daemon.broker.retry import retry_copy
from daemon.lifecycle import supervise
from daemon.remoting.bodies import PermName
from daemon.remoting.codes import INVALID_PARAMETER, ResponseCode
from daemon.remoting.errors import RemotingCommandError
from store.config import SLAVE
from store.errors import StoreError
from store.message import (
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TAGS,
    Message,
    StoredMessage,
)
from store.names import RETRY_GROUP_TOPIC_PREFIX, REVIVE_GROUP, REVIVE_TOPIC_PREFIX, dlq_topic, retry_topic
from store.results import GetMessageStatus, PutMessageStatus, PutResult, SelectedMessage
from store.words import plural

if TYPE_CHECKING:
    from daemon.broker.config import BrokerConfig
    from daemon.broker.long_poll import PullRequestHoldService
    from daemon.broker.managers.groups import SubscriptionGroupManager
    from daemon.broker.managers.topics import TopicConfigManager
    from daemon.broker.stats import BrokerStats
    from daemon.protect import Peer
    from store.api import MessageStore
    from store.config_files import ConsumerOffsetManager

log = logging.getLogger(__name__)

#: ``ReceiptHandle``'s topic types: a queue of the topic itself, of a retry topic (v1), of a v2 one.
NORMAL_TOPIC: Final = "0"
RETRY_TOPIC: Final = "1"
RETRY_TOPIC_V2: Final = "2"
#: The revive queue id 5.x gives order pops (``KeyBuilder.POP_ORDER_REVIVE_QUEUE``); handles carry it.
ORDER_REVIVE_QUEUE: Final = 999
#: ``ConsumeInitMode``: where a group with no offset starts.
INIT_MODE_MIN: Final = 0
INIT_MODE_MAX: Final = 1
#: 5.x reads the retry topic first on this share of pops (``popFromRetryProbability``), else after.
RETRY_FIRST_PROBABILITY: Final = 0.2
#: The message property 5.x puts a popped message's handle in (``MessageConst.PROPERTY_POP_CK``).
PROPERTY_POP_CK: Final = "POP_CK"
#: 5.x ``NO_MESSAGE``: an ack or change whose handle is not (or no longer) the message's current one.
NO_MESSAGE: Final = 208
#: How often a pop waiting for a DLedger member's leadership lease looks again (see PopHost.leased).
LEASE_RETRY_S: Final = 0.05
#: The journal is rewritten to its live records at start and when it grows past this.
COMPACT_BYTES: Final = 32 << 20
#: The longest lending a pop or a change of invisibility may ask for (the 5.x Proxy's
#: `maxInvisibleTimeMills`): a longer one hides an unacked message for good.
MAX_INVISIBLE_MS: Final = 12 * 3600 * 1000
#: The most messages one pop lends (5.x refuses a POP_MESSAGE asking for more).
MAX_POP_BATCH: Final = 32
#: The longest a pop waits for messages, whatever its pollTime asks: the time is the peer's word, and a pop
#: asking days was held (its coroutine, its connection's place) that long.
MAX_POLL_MS: Final = 60_000
#: The characters of a bad receipt handle a refusal shows (a real one is some hundred): a forged one of
#: 200 KiB was written back whole, and its int() error quoted it once more.
SHOWN_HANDLE_CHARS: Final = 256
#: Revived messages between two yields of the loop.
REVIVE_SLICE: Final = 256
#: How often the revive loop looks when nothing is due sooner.
REVIVE_IDLE: Final = 1.0
#: The tags of 5.x's revive records (``PopAckConstants``): an ack, a checkpoint (a lending), a batch ack.
ACK_TAG: Final = "ack"
CK_TAG: Final = "ck"
BATCH_ACK_TAG: Final = "bAck"
#: Revive records read between two yields of the loop when a member takes over.
CATCH_UP_BATCH: Final = 256
#: Queue offsets one pass of a pop reads over all its queues while it finds nothing to lend (messages of
#: other tags, or acked or lent on an earlier DLedger leader) before it yields the loop and reads on.
READ_ON_LIMIT: Final = 1024
#: Messages of each queue of a retry topic or DLQ read, from a second before an earlier leader logged the
#: end of a lending by a copy into it, to find that copy (it is put right after the record).
COPY_SEARCH: Final = 4096
#: A revive record still needed this far (in records) behind the end of the log is logged again at the
#: end, at most ``RELOG_PER_CALL`` per record written.
RELOG_LAG = 10_000
RELOG_PER_CALL: Final = 2

_S = GetMessageStatus


class PopError(RemotingCommandError):
    """A POP request refused with a RocketMQ response code (``NO_MESSAGE`` for a stale handle)."""


@dataclass(frozen=True)
class ReceiptHandle:
    """5.x's receipt handle (``ReceiptHandle#encode``, the ``ExtraInfoUtil`` fields plus the CommitLog
    offset): ``ckQueueOffset popTime invisibleTime reviveQid topicType brokerName queueId queueOffset
    commitLogOffset``, space-separated. ``popTime`` and ``invisibleTime`` identify one lending of the
    message: a change of invisibility makes a new pair, so the older handle stops working."""

    ck_queue_offset: int
    pop_time: int
    invisible_ms: int
    revive_qid: int
    topic_type: str
    broker_name: str
    queue_id: int
    queue_offset: int
    commit_log_offset: int = -1

    def encode(self) -> str:
        return " ".join(
            str(v)
            for v in (
                self.ck_queue_offset,
                self.pop_time,
                self.invisible_ms,
                self.revive_qid,
                self.topic_type,
                self.broker_name,
                self.queue_id,
                self.queue_offset,
                self.commit_log_offset,
            )
        )

    @property
    def extra_info(self) -> str:
        """The handle without the CommitLog offset: what 5.x remoting clients send as ``extraInfo``."""
        return self.encode().rsplit(" ", 1)[0]

    @classmethod
    def decode(cls, text: str) -> ReceiptHandle:
        """A handle (9 fields) or an ``extraInfo`` (8); raises :class:`PopError` on anything else."""
        parts = (text or "").split(" ")
        try:
            if len(parts) not in (8, 9):
                raise ValueError(f"{len(parts)} fields")
            return cls(
                int(parts[0]),
                int(parts[1]),
                int(parts[2]),
                int(parts[3]),
                parts[4],
                parts[5],
                int(parts[6]),
                int(parts[7]),
                int(parts[8]) if len(parts) == 9 else -1,
            )
        except ValueError as exc:
            shown = text if len(text or "") <= SHOWN_HANDLE_CHARS else f"{text[:SHOWN_HANDLE_CHARS]}..."
            raise PopError(ResponseCode.MESSAGE_ILLEGAL, f"bad receipt handle {shown!r}: {exc}") from None

    @property
    def is_order(self) -> bool:
        return self.revive_qid == ORDER_REVIVE_QUEUE


@dataclass(frozen=True)
class PoppedMessage:
    """One popped message. ``record`` is the CommitLog record as stored: for a message popped from the
    group's retry topic its topic is ``%RETRY%group`` and the original topic is its ``RETRY_TOPIC``
    property (as 4.x retries are). ``delivery_attempt`` is 1 on first delivery."""

    record: bytes
    receipt_handle: str
    delivery_attempt: int
    queue_id: int
    queue_offset: int
    #: The topic the message was sent to: the popped topic's, or a retry's ``RETRY_TOPIC``.
    topic: str = ""
    #: ``receipt_handle`` decoded (a POP response's offset infos are built from its fields).
    handle: ReceiptHandle | None = field(default=None, compare=False, repr=False)


@dataclass(slots=True)
class InFlight:
    """A popped, not yet acked message. ``topic`` is the queue's topic (the retry topic for a retry)."""

    group: str
    topic: str
    queue_id: int
    queue_offset: int
    phys_offset: int
    pop_time: int
    invisible_ms: int
    attempt: int
    fifo: bool
    ck_offset: int
    #: The pop's attempt id (FIFO): the same id asking again while the lending lasts gets it again.
    attempt_id: str = ""

    @property
    def key(self) -> tuple[str, str, int, int]:
        return (self.group, self.topic, self.queue_id, self.queue_offset)

    @property
    def queue_key(self) -> tuple[str, str, int]:
        return (self.group, self.topic, self.queue_id)

    @property
    def visible_at(self) -> int:
        return self.pop_time + self.invisible_ms


# ---------------------------------------------------------------------- journal codec (pure)

_Key = tuple[str, str, int, int]
_QueueKey = tuple[str, str, int]
#: A revive record to store: the message, and the queue and queue offsets it is about.
Logged = tuple["Message", _QueueKey, tuple[int, ...]]


#: A name as a JSON string (groups and topics recur on every line; ``json.dumps`` escapes any name).
_quoted = functools.lru_cache(maxsize=4096)(json.dumps)


def record_line(r: InFlight) -> str:
    """A lending as a journal line (JSON; written by hand: one per popped message)."""
    at = f',"at":{_quoted(r.attempt_id)}' if r.attempt_id else ""
    return (
        f'{{"op":"p","g":{_quoted(r.group)},"t":{_quoted(r.topic)},"q":{r.queue_id},"o":{r.queue_offset},'
        f'"c":{r.phys_offset},"pt":{r.pop_time},"it":{r.invisible_ms},"a":{r.attempt},'
        f'"f":{"true" if r.fifo else "false"},"ck":{r.ck_offset}{at}}}'
    )


def gone_line(key: _Key) -> str:
    """The end of a lending (acked, revived or sent to the DLQ)."""
    g, t, q, o = key
    return f'{{"op":"x","g":{_quoted(g)},"t":{_quoted(t)},"q":{q},"o":{o}}}'


def offset_line(g: str, t: str, q: int, o: int) -> str:
    """A queue's next pop offset for the group."""
    return f'{{"op":"o","g":{_quoted(g)},"t":{_quoted(t)},"q":{q},"o":{o}}}'


def encode_lines(lines: Iterable[str]) -> bytes:
    return "".join(line + "\n" for line in lines).encode()


# ---------------------------------------------------------------------- revive records (pure)


def ack_body(r: InFlight, broker_name: str, offsets: list[int] | None = None, *, copy_to: str = "") -> bytes:
    """5.x's ``AckMsg`` of a lending: its queue offset (``ao``), the pop's start (``so``), its popTime; with
    ``offsets``, its ``BatchAckMsg`` of lendings of one pop of one queue (the same popTime and start):
    their queue offsets (``aol``), ``ao`` -1. With ``copy_to``, the end of a lending by a copy of its
    message into that topic (a retry topic or the DLQ), logged before the copy is put: the topic (``to``)
    and the message's CommitLog offset (``co``), fields a 5.x reader ignores."""
    fields: dict[str, object] = {
        "ao": r.queue_offset if offsets is None else -1,
        "so": r.ck_offset,
        "c": r.group,
        "t": r.topic,
        "q": r.queue_id,
        "pt": r.pop_time,
        "bn": broker_name,
    }
    if offsets is not None:
        fields["aol"] = offsets
    if copy_to:
        fields["to"] = copy_to
        fields["co"] = r.phys_offset
    return json.dumps(fields, separators=(",", ":")).encode()


def ck_body(r: InFlight, broker_name: str, batch: list[InFlight] | None = None) -> bytes:
    """5.x's ``PopCheckPoint`` of one lending (``so`` + ``d[0]`` its queue offset), with what a member
    taking over needs to lend it on as it is: the CommitLog offset (``co``), the attempt (``a``), FIFO
    (``f``) and the FIFO attempt id (``at``), fields a 5.x reader ignores. With ``batch`` (``r`` first), the
    lendings of one pop of one queue (the same start, popTime, invisibility and attempt id): ``n`` of them,
    ``so`` + each ``d`` their queue offsets, ``co`` and ``a`` lists in the same order."""
    same = batch or [r]
    return json.dumps(
        {
            "so": r.ck_offset,
            "pt": r.pop_time,
            "it": r.invisible_ms,
            "bm": 0,
            "n": len(same),
            "q": r.queue_id,
            "t": r.topic,
            "c": r.group,
            "ro": -1,
            "d": [x.queue_offset - r.ck_offset for x in same],
            "bn": broker_name,
            "rp": r.attempt - 1,
            "co": r.phys_offset if batch is None else [x.phys_offset for x in same],
            "a": r.attempt if batch is None else [x.attempt for x in same],
            "f": r.fifo,
            "at": r.attempt_id,
        },
        separators=(",", ":"),
    ).encode()


@dataclass(frozen=True, slots=True)
class Copied:
    """A lending ended by a copy of its message into ``topic`` (a retry topic or the DLQ), as its revive
    record says: the message's CommitLog offset (``phys_offset``)."""

    topic: str
    phys_offset: int


def read_record(
    tag: str | None, body: bytes
) -> tuple[str, _QueueKey, list[int], list[InFlight], Copied | None] | None:
    """A revive record back: (tag, queue, queue offsets it names, the lendings of a ``ck``, the copy an
    ``ack`` ends its lending with); None for anything else (unknown tag, bad JSON, missing fields)."""
    try:
        e = json.loads(body)
        queue = (str(e["c"]), str(e["t"]), int(e["q"]))
        if tag == ACK_TAG:
            copied = Copied(str(e["to"]), int(e["co"])) if "to" in e else None
            return tag, queue, [int(e["ao"])], [], copied
        if tag == BATCH_ACK_TAG:
            return tag, queue, [int(o) for o in e["aol"]], [], None
        if tag == CK_TAG:
            start = int(e["so"])
            offsets = [start + int(d) for d in e["d"]]
            phys, attempts = e["co"], e["a"]
            if not isinstance(phys, list):
                phys, attempts = [phys], [attempts]
            if not offsets or len(phys) != len(offsets) or len(attempts) != len(offsets):
                return None
            lent = [
                InFlight(
                    *queue,
                    offset,
                    int(co),
                    int(e["pt"]),
                    int(e["it"]),
                    int(a),
                    bool(e["f"]),
                    start,
                    str(e.get("at") or ""),
                )
                for offset, co, a in zip(offsets, phys, attempts, strict=True)
            ]
            return tag, queue, offsets, lent, None
    except (ValueError, KeyError, TypeError, IndexError):
        pass
    return None


def replay(data: bytes) -> tuple[dict[_Key, InFlight], dict[_QueueKey, int]]:
    """The live records and the pop offsets a journal leaves. A torn last line (a write cut short by
    a crash) is ignored: its pop was never answered."""
    records: dict[_Key, InFlight] = {}
    offsets: dict[_QueueKey, int] = {}
    for line in data.split(b"\n"):
        if not line:
            continue
        try:
            e = json.loads(line)
            op = e["op"]
            key = (e["g"], e["t"], int(e["q"]), int(e["o"]))
        except (ValueError, KeyError, TypeError):
            log.warning("pop journal: skipped an unreadable line (%d bytes)", len(line))
            continue
        if op == "p":
            records[key] = InFlight(
                key[0],
                key[1],
                key[2],
                key[3],
                e["c"],
                e["pt"],
                e["it"],
                e["a"],
                bool(e["f"]),
                e["ck"],
                e.get("at", ""),
            )
        elif op == "x":  # acked, revived or sent to the DLQ
            records.pop(key, None)
        elif op == "o":  # the queue's next pop offset (the last line is the latest pop's)
            offsets[key[:3]] = key[3]
    return records, offsets


class PopJournal:
    """The append-only file of :func:`replay`'s lines; one ``os.write`` per answered request."""

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, "pop", "inflight.journal")
        self._fd = -1
        self.size = 0

    def load(self) -> tuple[dict[_Key, InFlight], dict[_QueueKey, int]]:
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            data = b""
        return replay(data)

    def rewrite(self, records: Iterable[InFlight], offsets: dict[_QueueKey, int]) -> None:
        """Replace the journal by its live state (written aside, fsynced, renamed)."""
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        lines = [record_line(r) for r in records]
        lines += [offset_line(g, t, q, o) for (g, t, q), o in offsets.items() if o >= 0]
        data = encode_lines(lines)
        tmp = self.path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        self.close()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.size = len(data)

    @property
    def exists(self) -> bool:
        return self._fd >= 0 or os.path.exists(self.path)

    def append(self, lines: list[str]) -> None:
        if self._fd < 0:  # made on first use: a broker nobody pops from has no pop/ directory
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        data = encode_lines(lines)
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]
        self.size += len(data)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


# ---------------------------------------------------------------------- the service


@dataclass(frozen=True, slots=True)
class _Ask:
    """One pop request, as each of its reads sees it."""

    group: str
    topic: str
    queue_id: int
    max_messages: int
    invisible_ms: int
    fifo: bool
    codes: frozenset[int] | None
    init_mode: int
    attempt_id: str


class PopHost(Protocol):
    """What POP uses of the broker (a part of ``BrokerContext``, which names this service in turn)."""

    config: BrokerConfig
    store: MessageStore
    topics: TopicConfigManager
    groups: SubscriptionGroupManager
    offsets: ConsumerOffsetManager
    stats: BrokerStats
    hold: PullRequestHoldService

    async def put(self, msg: Message) -> PutResult: ...
    async def held(self, result: PutResult) -> PutResult: ...
    def leased(self) -> bool: ...


class PopService:
    """POP on one broker: ``pop``/``ack``/``change_invisible``/``forward_to_dlq`` and the revive loop.

    Everything runs on the broker's event loop; the remoting processors and the gRPC front call it.
    """

    def __init__(self, broker: PopHost) -> None:
        self.broker = broker
        self.journal = PopJournal(broker.config.store_path_root_dir)
        self.records: dict[_Key, InFlight] = {}
        #: FIFO records per queue: the order lock.
        self._held: dict[_QueueKey, dict[int, InFlight]] = {}
        #: (visible at, key, pop time) of every non-FIFO record; stale entries are skipped.
        self._due: list[tuple[int, _Key, int]] = []
        #: Each queue's next pop offset per group (where the next pop reads): this member's own.
        self._next: dict[_QueueKey, int] = {}
        #: Each queue's ack watermark as last committed into the offset table (the replicated state).
        self._marks: dict[_QueueKey, int] = {}
        #: The queue offsets lent out per queue (a heap; entries of ended lendings skipped when on top).
        self._lent: dict[_QueueKey, list[int]] = {}
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        #: FIFO pops parked per group: a released order lock wakes them (no message arrives to do it).
        self._unheld: dict[str, set[asyncio.Future[None]]] = {}
        #: Set by a pass of a pop that stopped at READ_ON_LIMIT: the pop reads on instead of parking.
        self._read_on = False
        #: DLedger: acks and changes are logged as revive records, held by the quorum before answered.
        self.replicated = broker.config.enable_dleger_commit_log
        self.revive_topic = REVIVE_TOPIC_PREFIX + broker.config.broker_cluster_name
        #: Queue offsets above a queue's watermark acked on an earlier leader (see catch_up): not lent.
        self._acked: dict[_QueueKey, set[int]] = {}
        #: (revive queue offset, queue, queue offset, an ack?) of each revive record maybe still live, in
        #: log order.
        self._logged: collections.deque[tuple[int, _QueueKey, int, bool]] = collections.deque()
        #: The revive queue offset after the last record written or read.
        self._log_end = 0
        #: The revive queue offset below which every record is known held by the DLedger quorum.
        self._held_end = 0
        #: A still needed record logged again at the end: its revive queue offset -> the new one's. The
        #: revive offset passes the old one only once the new one is held.
        self._moved: dict[int, int] = {}
        #: Lendings acked this turn of the loop, logged at its end (see log_acks), and the future of that.
        self._ending: list[InFlight] = []
        self._acking: asyncio.Future[None] | None = None
        #: The queue offsets of lendings acked here whose ack records the quorum does not hold yet: the
        #: watermark stays below them (a follower takes the offset table; the ack may still fail).
        self._acks_unheld: dict[_QueueKey, collections.Counter[int]] = {}
        self._logging: set[asyncio.Task[None]] = set()  # (the loop keeps only weak references to tasks)
        #: Whether this broker lends (DLedger: a member not leading answers every handle NO_MESSAGE).
        self._serving = False
        #: Copies an earlier leader logged the end of a lending for (see _make_copies): (the record's
        #: CommitLog offset, its store time, the group, the copy).
        self._copies: list[tuple[int, int, str, Copied]] = []
        #: Lendings whose end a revive (or a send to the DLQ) began: their handles change and ack nothing
        #: more. The value is the CommitLog offset of the copy it appended and did not see stored as asked
        #: (its wait for a DLedger quorum, or for the disk, ran out), -1 before: a retry waits for that
        #: copy, never puts another.
        self._reviving: dict[_Key, int] = {}
        #: The tables' generation, moved on each time :meth:`take_over` drops them (a DLedger leadership
        #: ended or begun): work begun under an earlier one leaves the tables alone when it ends, or it
        #: would count an ack, lend a message or refuse a handle of the next leadership.
        self._generation = 0

    # ------------------------------------------------------------------ lifecycle

    def load(self) -> None:
        """Replay the journal, set the offset table to each queue's ack watermark, compact. A DLedger
        member's journal is from a lending that another leader may have moved past: dropped, and the
        member takes over from the offset table when elected (:meth:`take_over`)."""
        if self.broker.config.enable_dleger_commit_log:
            self.take_over()
            return
        records, offsets = self.journal.load()
        for r in records.values():
            self._add(r)
        for r in records.values():  # (a queue without an offset line: its next pop reads after it)
            offsets.setdefault(
                r.queue_key, max(r.queue_offset + 1, self.broker.offsets.query_offset(*r.queue_key))
            )
        for queue, offset in offsets.items():
            if offset >= 0:
                self._next[queue] = offset
                self._mark(queue, [])
        if self.journal.exists:
            self.journal.rewrite(self.records.values(), self._pop_offsets())
        if self.records:
            log.info("POP: %s back from the journal", plural(len(self.records), "in-flight message"))

    def take_over(self) -> None:
        """Start from the offset table, as a member elected DLedger leader does: the table (taken from the
        old leader every few seconds) never stands past a message lent and not acked, so the next pops
        lend those again (with the acked ones above them: duplicates, never a loss). Records and pop
        offsets of this member's own earlier lendings are dropped; a later leader may have moved on."""
        if self.records:
            log.info("POP: %s of an earlier lending dropped", plural(len(self.records), "in-flight record"))
        self._generation += 1
        if self._acking is not None:  # acks ended here whose records were not put yet: not logged now
            self._acking.set_exception(
                PopError(ResponseCode.SYSTEM_ERROR, "the acks were not logged: stopped")
            )
            self._acking.exception()  # (retrieved: a caller gone leaves no warning)
            self._acking, self._ending = None, []
        self.records.clear()
        self._held.clear()
        self._due.clear()
        self._next.clear()
        self._marks.clear()
        self._lent.clear()
        self._acked.clear()
        self._acks_unheld.clear()
        self._logged.clear()
        self._moved.clear()
        self._copies.clear()
        self._reviving.clear()
        self._held_end = 0
        try:
            if self.journal.exists:
                self.journal.rewrite((), {})
        except OSError as exc:
            log.error("POP journal not emptied (a DLedger member drops it at its next start): %s", exc)

    async def catch_up(self) -> None:
        """Rebuild what the group's earlier leaders logged (:meth:`take_over` first): read the revive
        queue from the first live record on, a batch at a time with requests served between, before this
        member lends anything."""
        store = self.broker.store
        topic = self.revive_topic
        offset = max(
            0, store.get_min_offset(topic, 0), self.broker.offsets.query_offset(REVIVE_GROUP, topic, 0)
        )
        read = 0
        generation = self._generation
        while True:
            result = store.get_messages(REVIVE_GROUP, topic, 0, offset, CATCH_UP_BATCH)
            for selected in result.messages:
                try:
                    msg = selected.message
                except StoreError as exc:
                    log.error("POP: a damaged revive record at %d skipped: %s", selected.queue_offset, exc)
                    continue
                self._replay(selected.queue_offset, msg.properties.get(PROPERTY_TAGS), msg.body, selected)
                read += 1
            if not result.messages or result.next_begin_offset <= offset:
                break
            offset = result.next_begin_offset
            await asyncio.sleep(0)
            if self._generation != generation:  # taken over again meanwhile: the tables are not its own
                return
        self._log_end = self._held_end = max(offset, store.get_max_offset(topic, 0))  # (committed only)
        if read:
            log.info(
                "POP: %s read: %s and %s above the watermarks kept",
                plural(read, "revive record"),
                plural(len(self.records), "lending"),
                plural(sum(len(s) for s in self._acked.values()), "ack"),
            )
        self._compact_log()

    def _replay(self, at: int, tag: str | None, body: bytes, where: SelectedMessage | None = None) -> None:
        """One revive record: an ack marks its offsets done, a checkpoint lends the messages as it says.
        A record below its queue's watermark is superseded; one of a message this member does not hold
        (gone with retention, or never stored) is dropped, and so is a checkpoint of an acked message. An
        ack logged before a copy of its message (``where`` the record) is kept to check that the copy
        was stored (:meth:`_make_copies`)."""
        read = read_record(tag, body)
        if read is None:
            log.warning("POP: an unreadable revive record at %d skipped", at)
            return
        tag, queue, offsets, lent, copied = read
        mark = self.broker.offsets.query_offset(*queue)
        store = self.broker.store
        low, high = store.get_min_offset(queue[1], queue[2]), store.get_max_offset(queue[1], queue[2])
        live = {o for o in offsets if o >= max(mark, low) and o < high}
        if not live:
            return
        if not lent:
            acked = self._acked.setdefault(queue, set())
            for o in sorted(live):
                self._logged.append((at, queue, o, True))
                acked.add(o)
                r = self.records.get((*queue, o))
                if r is not None:
                    self._drop(r)
            if copied is not None and where is not None:
                self._copies.append((where.phys_offset, where.message.store_timestamp, queue[0], copied))
            return
        acked = self._acked.get(queue, set())
        for r in lent:
            if r.queue_offset not in live or r.queue_offset in acked:
                continue
            self._logged.append((at, queue, r.queue_offset, False))
            old = self.records.get(r.key)
            if old is not None:
                self._drop(old)
            self._add(r)

    def start(self) -> None:
        self._serving = True
        self._wake = asyncio.Event()
        self._task = supervise(self._revive_loop, "pop-revive")

    async def stop(self) -> None:
        self._serving = False
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self.broker.config.enable_dleger_commit_log:
            # leadership lost (or a stop): the next leader lends again what this one lent, and a late
            # ack reaching this member must not move its offset table (taken from the leader now)
            self.take_over()
        try:  # the journal to the live records and pop offsets (an operator's reset included)
            if self.journal.exists and not self.broker.config.enable_dleger_commit_log:
                self.journal.rewrite(self.records.values(), self._pop_offsets())
        except OSError as exc:
            log.error("POP journal not compacted at stop (replayed as it is at the next start): %s", exc)
        self.journal.close()

    # ------------------------------------------------------------------ the interface

    async def pop(
        self,
        *,
        group: str,
        topic: str,
        queue_id: int,
        max_messages: int,
        invisible_ms: int,
        poll_ms: int,
        fifo: bool,
        expression_type: str,
        expression: str,
        attempt_id: str | None = None,
        init_mode: int = INIT_MODE_MAX,
        peer: Peer | None = None,
        gone: asyncio.Future[None] | None = None,
    ) -> list[PoppedMessage]:
        """Pop up to ``max_messages`` (queue_id -1: any readable queue), waiting up to ``poll_ms`` for
        one to arrive. A FIFO pop asked again with the same ``attempt_id`` while its lending lasts (the
        client did not get the answer) gets the same messages and handles again, as in 5.x. Once ``gone``
        (the asking connection's end) is done, a waiting pop ends with nothing lent: kept waiting, a closed
        connection's pops held their coroutines and their parked waiters for their whole poll time."""
        self._check(group, topic, peer)
        _check_invisible(invisible_ms)
        sub = build_subscription(topic, expression, expression_type)
        if not is_tag_type(sub.expression_type):
            raise PopError(
                ResponseCode.SYSTEM_ERROR,
                f"The broker does not support consumer to filter message by {sub.expression_type}",
            )
        count = max(1, min(max_messages, MAX_POP_BATCH))
        ask = _Ask(
            group, topic, queue_id, count, invisible_ms, fifo, tag_codes(sub), init_mode, attempt_id or ""
        )
        deadline = time.monotonic() + max(0, min(poll_ms, MAX_POLL_MS)) / 1000
        while True:
            if not self.broker.leased():  # maybe cut off, another member elected: it lends nothing meanwhile
                left = deadline - time.monotonic()
                if left <= 0:
                    return []
                await asyncio.sleep(min(left, LEASE_RETRY_S))
                continue
            dead: list[InFlight] = []
            lent: list[InFlight] = []
            generation = self._generation
            found = self._pop_once(ask, dead, lent)
            read_on, self._read_on = self._read_on, False
            if dead:  # FIFO messages past their retries: to the DLQ before the answer, their queue freed
                await self._forward_dead(dead)
                if lent and self._generation != generation:  # (its lendings' tables are gone: not logged
                    # in the next leadership's log, where they would stand beside its own lendings)
                    raise PopError(ResponseCode.SYSTEM_ERROR, "the leadership changed meanwhile: pop again")
            if lent:  # a FIFO lending held by the DLedger quorum before it is answered
                await self.hold(self.lending_records(lent))
            if dead and not found and time.monotonic() < deadline:
                continue
            left = deadline - time.monotonic()
            if found or left <= 0:
                return found
            if gone is not None and gone.done():
                return []  # its connection is gone: nobody to answer, nothing lent
            if read_on:  # skipped messages passed, more above them: not parked for arrivals
                await asyncio.sleep(0)
                continue
            await self._wait_for_messages(ask, left, gone)

    def lending_records(self, lent: list[InFlight]) -> list[Logged]:
        """The checkpoint records of FIFO lendings (none outside a DLedger group): one per queue and pop
        (the same start, popTime, invisibility and attempt id), as 5.x's ``PopCheckPoint`` of several
        messages. 5.x keeps a FIFO queue's lending in its ``ConsumerOrderInfoManager`` alone, a file no
        other member takes, so a member taking over lends it again at once; logged, the member elected
        keeps the queue's order lock until the lending runs out, and lends it again then, in order, with
        its attempts counted."""
        if not self.replicated:
            return []
        name = self.broker.config.broker_name
        pops: dict[tuple[_QueueKey, int, int, int, str], list[InFlight]] = {}
        for r in lent:
            pops.setdefault((r.queue_key, r.pop_time, r.ck_offset, r.invisible_ms, r.attempt_id), []).append(
                r
            )
        out = []
        for same in pops.values():
            same.sort(key=lambda x: x.queue_offset)
            r = same[0]
            offsets = tuple(x.queue_offset for x in same)
            out.append(self._record(CK_TAG, r, ck_body(r, name, same), offsets))
        return out

    async def _forward_dead(self, dead: list[InFlight]) -> None:
        """FIFO lendings past their retries, sent to the DLQ as :meth:`_reput` does (the copy held by a
        DLedger quorum, then the lending's end logged as 5.x acks a message it forwarded to the DLQ). Until
        then the lending holds its queue's order lock; one that fails stays lent and is tried again when
        it expires."""
        for r in dead:
            try:
                await self._reput(r, dlq=True)
            except (StoreError, PopError) as exc:
                log.error(
                    "POP: %s:%d at %d not sent to the DLQ; tried again when its lending expires: %s",
                    r.topic,
                    r.queue_id,
                    r.queue_offset,
                    exc,
                )

    async def ack(self, *, group: str, topic: str, receipt_handle: str) -> None:
        """End the lending; in a DLedger group answered once the group's quorum holds its record."""
        logged = self.log_acks([self.ack_one(group=group, topic=topic, receipt_handle=receipt_handle)])
        if logged is not None:
            await logged

    def ack_one(self, *, group: str, topic: str, receipt_handle: str | ReceiptHandle) -> InFlight:
        """End the lending here; returns it, for :meth:`log_acks` (the handle as text, or decoded: a batch
        ack's, built from its fields)."""
        r = self._current(group, topic, receipt_handle)
        if self.replicated:  # (before the watermark moves: it waits for the record, see log_acks)
            self._acks_unheld.setdefault(r.queue_key, collections.Counter())[r.queue_offset] += 1
        self._finish(r)
        return r

    def log_acks(self, ended: list[InFlight]) -> asyncio.Future[None] | None:
        """Log the ends of lendings acked here (:meth:`ack_one`): None outside a DLedger group, else a
        future done once the group's quorum holds their records (raising :class:`PopError` when it does
        not). The acks of one turn of the loop (the requests read together) are logged together at its
        end, merged per queue and pop (:meth:`ack_records`); each caller awaits its own shield of it.

        The offset table's watermark passes an acked message only once its record is held, as a send
        answers SEND_OK only then: the other members take the table from this one, and one elected
        lends again from it. An ack not held (its client told it failed) puts the lending back: the
        message is lent again when it runs out, here or by the next leader."""
        if not self.replicated or not ended:
            return None
        if self._acking is None:
            loop = asyncio.get_running_loop()
            self._acking = loop.create_future()
            loop.call_soon(self._flush_acks)
        self._ending += ended
        return asyncio.shield(self._acking)

    def _flush_acks(self) -> None:
        done, ended = self._acking, self._ending
        if done is None:  # (failed by a take-over, or flushed with an earlier turn's)
            return
        self._acking, self._ending = None, []
        generation = self._generation
        task = asyncio.ensure_future(self.hold(self.ack_records(ended)))
        self._logging.add(task)

        def settle(task: asyncio.Task[None]) -> None:
            self._logging.discard(task)
            held = not task.cancelled() and task.exception() is None
            self._settle_acks(ended, held=held, generation=generation)
            if task.cancelled():
                done.set_exception(PopError(ResponseCode.SYSTEM_ERROR, "the acks were not logged: stopped"))
            elif (exc := task.exception()) is not None:
                done.set_exception(exc)
            else:
                done.set_result(None)
            done.exception()  # retrieved: a caller gone (its connection closed) leaves no warning

        task.add_done_callback(settle)

    def _settle_acks(self, ended: list[InFlight], *, held: bool, generation: int) -> None:
        """The acks' records held or not: their watermarks move on, or the lendings are back (unless this
        member stopped lending meanwhile, the same message was lent again, or it is a FIFO lending). Acks
        of an earlier generation touch nothing: the counts and lendings here are the next leadership's
        (an ack of its own of the same message counted, which this one's end would pass)."""
        if generation != self._generation:
            return
        queues = set()
        lines = []
        for r in ended:
            unheld = self._acks_unheld.get(r.queue_key)
            # (a guard, not reached: ack_one counted each of these once, an operator's reset leaves the
            # counts alone, and only take_over clears them, which moved the generation, returned above)
            if unheld is None or unheld[r.queue_offset] <= 0:
                continue
            unheld[r.queue_offset] -= 1
            if unheld[r.queue_offset] <= 0:
                del unheld[r.queue_offset]
                if not unheld:
                    del self._acks_unheld[r.queue_key]
            queues.add(r.queue_key)
            # (a FIFO lending is not put back: the ack released its queue's order, and the next messages
            # may be lent already; back, it would come after them and they would be lent twice at once)
            if not held and self._serving and r.key not in self.records and not r.fifo:
                self._acked.get(r.queue_key, set()).discard(r.queue_offset)
                self._add(r)
                lines.append(record_line(r))
        for queue in queues:
            self._mark(queue, lines)
        if lines:
            self.journal.append(lines)
        if held and queues:  # the records the watermarks passed now: the revive offset passes them too
            self._compact_log()

    def ack_records(self, ended: list[InFlight]) -> list[Logged]:
        """The revive records of lendings ended by acks, for :meth:`hold` (none outside a DLedger group):
        5.x's ``AckMsg`` of one, its ``BatchAckMsg`` of several lent by one pop of one queue (the same
        queue, popTime and start), as 5.x writes a ``BatchAck`` (one record put and held for them)."""
        if not self.replicated or not ended:
            return []
        name = self.broker.config.broker_name
        pops: dict[tuple[_QueueKey, int, int], list[InFlight]] = {}
        for r in ended:
            pops.setdefault((r.queue_key, r.pop_time, r.ck_offset), []).append(r)
        out = []
        for same in pops.values():
            r = same[0]
            if len(same) == 1:
                out.append(self._record(ACK_TAG, r, ack_body(r, name)))
            else:
                offsets = sorted(x.queue_offset for x in same)
                out.append(self._record(BATCH_ACK_TAG, r, ack_body(r, name, offsets), tuple(offsets)))
        return out

    async def change_invisible(
        self, *, group: str, topic: str, receipt_handle: str, invisible_ms: int
    ) -> str:
        """Lend the message again for ``invisible_ms`` from now; returns its new handle, once a DLedger
        group's quorum holds the change."""
        handle, records = self.change_now(
            group=group, topic=topic, receipt_handle=receipt_handle, invisible_ms=invisible_ms
        )
        await self.hold(records)
        return handle

    def renew(self, *, group: str, topic: str, receipt_handle: str, invisible_ms: int) -> str:
        """A change nobody waits for (a PushConsumer's lease renewal): its record stored, not awaited."""
        handle, records = self.change_now(
            group=group, topic=topic, receipt_handle=receipt_handle, invisible_ms=invisible_ms
        )
        for record in records:
            self._put_record(record)
        return handle

    def change_now(
        self, *, group: str, topic: str, receipt_handle: str, invisible_ms: int
    ) -> tuple[str, list[Logged]]:
        """The change here: the new handle and the revive record :meth:`hold` must store."""
        _check_invisible(invisible_ms)
        record = self._current(group, topic, receipt_handle)
        record.pop_time = max(_now_ms(), record.pop_time + 1)  # a new (popTime, invisibleTime) pair
        record.invisible_ms = max(0, invisible_ms)
        self.journal.append([record_line(record)])
        if not record.fifo:
            self._schedule(record)
        name = self.broker.config.broker_name
        return self.handle(record).encode(), [
            self._record(CK_TAG, record, ck_body(record, name))
        ] if self.replicated else []

    async def hold(self, records: list[Logged]) -> None:
        """Store revive records, returning once the DLedger quorum holds them (and all before them);
        raises :class:`PopError` (SYSTEM_ERROR) when one was not stored or not held."""
        if not records:
            return
        last = None
        for record in records:
            last = self._put_record(record)
        assert last is not None
        self._compact_log(relog=True)  # what it logs again is held by the same wait
        end, generation = self._log_end, self._generation
        _refused(await self.broker.held(last))
        if self._generation == generation:  # (else `end` is an offset of a log the tables no longer track)
            self._held_end = max(self._held_end, end)
            self._compact_log()

    def _record(self, tag: str, r: InFlight, body: bytes, offsets: tuple[int, ...] = ()) -> Logged:
        msg = Message(
            self.revive_topic,
            body,
            0,
            properties={PROPERTY_TAGS: tag},
            born_timestamp=_now_ms(),
            wait_store_msg_ok=False,
        )
        return msg, r.queue_key, offsets or (r.queue_offset,)

    def _put_record(self, record: Logged) -> PutResult:
        """Append a revive record (not waiting for the quorum) and track it as live."""
        msg, queue, offsets = record
        result = _refused(self.broker.store.put_message(msg))
        if result.queue_offset >= 0:
            is_ack = msg.tags != CK_TAG
            for offset in offsets:
                self._logged.append((result.queue_offset, queue, offset, is_ack))
            self._log_end = max(self._log_end, result.queue_offset + 1)
        return result

    def _compact_log(self, *, relog: bool = False) -> None:
        """Move the revive group's offset to the first record that may still be needed: one whose
        message is at or above its queue's watermark (or of a queue without one). With ``relog``, a needed
        record more than ``RELOG_LAG`` records behind the end (an ack above a message lent for hours, a long
        change) is logged again at the end, a few per call, so a member taking over never reads far back;
        the offset passes the old record only once the new one is held (``_held_end``): moved sooner, a
        failover in between could hand the next leader an offset past a record its log lacks."""
        offsets = self.broker.offsets
        logged = self._logged
        relogged = 0
        while logged:
            at, queue, offset, is_ack = logged[0]
            mark = self._marks.get(queue, offsets.query_offset(*queue))
            if mark < 0 or offset >= mark:
                moved = self._moved.get(at)
                if moved is None:
                    if not relog or not self._serving or relogged >= RELOG_PER_CALL:
                        break
                    if self._log_end - at <= RELOG_LAG:
                        break
                    relogged += 1
                    moved = self._relog(queue, offset, is_ack)
                    if moved < 0:
                        break
                    if moved > 0:
                        self._moved[at] = moved
                if moved > 0 and moved >= self._held_end:
                    break  # its new copy not held yet
            logged.popleft()
            self._moved.pop(at, None)
        live = logged[0][0] if logged else self._log_end
        if live > max(0, offsets.query_offset(REVIVE_GROUP, self.revive_topic, 0)):
            offsets.commit_offset(REVIVE_GROUP, self.revive_topic, 0, live)

    def _relog(self, queue: _QueueKey, offset: int, is_ack: bool) -> int:
        """A still needed record again at the end of the log (a lending: as it stands now): the new
        record's revive queue offset; 0 when none is needed (the lending ended: its end is logged), -1
        when the put failed."""
        name = self.broker.config.broker_name
        try:
            if is_ack:
                ended = InFlight(*queue, offset, -1, 0, 0, 0, False, offset)
                return self._put_record(self._record(ACK_TAG, ended, ack_body(ended, name))).queue_offset
            if (r := self.records.get((*queue, offset))) is not None:
                return self._put_record(self._record(CK_TAG, r, ck_body(r, name))).queue_offset
            return 0
        except PopError as exc:
            log.warning("POP: a revive record not logged again: %s", exc)
            return -1

    async def forward_to_dlq(self, *, group: str, topic: str, receipt_handle: str) -> None:
        """Send the message to ``%DLQ%group`` now and end its lending (5.x: send-back with level -1),
        answered once the copy is held (by a DLedger quorum)."""
        await self._reput(self._current(group, topic, receipt_handle), dlq=True)

    def pop_offset(self, group: str, topic: str, queue_id: int) -> int:
        """Where the group's next pop of the queue reads: this member's own offset, else the offset
        table's (which holds the ack watermark); -1 for a queue the group never popped."""
        offset = self._next.get((group, topic, queue_id), -1)
        return offset if offset >= 0 else self.broker.offsets.query_offset(group, topic, queue_id)

    def in_flight(self) -> dict[str, int]:
        """Popped and not yet acked messages per group."""
        counts: dict[str, int] = {}
        for group, *_ in self.records:
            counts[group] = counts.get(group, 0) + 1
        return counts

    # ------------------------------------------------------------------ handles

    def handle(self, r: InFlight) -> ReceiptHandle:
        is_retry = r.topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
        return ReceiptHandle(
            r.ck_offset,
            r.pop_time,
            r.invisible_ms,
            ORDER_REVIVE_QUEUE if r.fifo else 0,
            RETRY_TOPIC if is_retry else NORMAL_TOPIC,
            self.broker.config.broker_name,
            r.queue_id,
            r.queue_offset,
            r.phys_offset,
        )

    def _current(self, group: str, topic: str, text: str | ReceiptHandle) -> InFlight:
        """The record a handle lends, if the handle is still its current one (not changed, not expired
        into a redelivery, not acked)."""
        h = text if isinstance(text, ReceiptHandle) else ReceiptHandle.decode(text)
        name = self.broker.config.broker_name
        if h.broker_name != name:  # (a handle this broker lent names it: 5.x's proxy routes by it)
            shown = h.broker_name[:SHOWN_HANDLE_CHARS]
            raise PopError(
                NO_MESSAGE, f"receipt handle is not valid here: it names broker {shown}, not {name}"
            )
        if self.replicated and not self._serving:  # a member not leading (or still taking over)
            raise PopError(NO_MESSAGE, "receipt handle is no longer valid (this member does not lend)")
        real = topic if h.topic_type == NORMAL_TOPIC else retry_topic(group)
        key = (group, real, h.queue_id, h.queue_offset)
        record = self.records.get(key)
        if (
            record is None
            or (record.pop_time, record.invisible_ms) != (h.pop_time, h.invisible_ms)
            or key in self._reviving  # (its copy on its way: a change or an ack would not stop it)
        ):
            raise PopError(NO_MESSAGE, "receipt handle is no longer valid (acked, changed or redelivered)")
        if record.fifo and record.visible_at <= _now_ms():
            raise PopError(NO_MESSAGE, "invisible time expired")
        return record

    # ------------------------------------------------------------------ popping

    def _check(self, group: str, topic: str, peer: Peer | None) -> None:
        """``PopMessageProcessor``'s checks, in its order (a slave lends nothing: POP state is the
        master's)."""
        broker = self.broker
        ip = broker.config.broker_ip1
        if not broker.config.broker_permission & PermName.READ:
            raise PopError(ResponseCode.NO_PERMISSION, f"the broker[{ip}] pop message is forbidden")
        if broker.config.broker_role == SLAVE:
            raise PopError(ResponseCode.SYSTEM_ERROR, f"the broker[{ip}] is a slave: pop from its master")
        topic_config = broker.topics.get(topic)
        if topic_config is None:
            raise PopError(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!")
        if not topic_config.perm & PermName.READ:
            raise PopError(ResponseCode.NO_PERMISSION, f"the topic[{topic}] peeking message is forbidden")
        config = broker.groups.find(group, peer)
        if config is None:
            raise PopError(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group [{group}] does not exist"
            )
        if not config.consume_enable:
            raise PopError(ResponseCode.NO_PERMISSION, f"subscription group no permission, {group}")

    def _sources(self, group: str, topic: str, queue_id: int, fifo: bool) -> list[tuple[str, int, bool]]:
        """(topic, queue, filtered) to read in turn: the topic's queues (from a random start), and for
        a non-FIFO pop the group's retry queues, first on a fifth of pops as 5.x."""
        config = self.broker.topics.get(topic)
        count = config.read_queue_nums if config is not None else 0
        if queue_id >= 0:
            if queue_id >= count:
                raise PopError(INVALID_PARAMETER, f"queueId[{queue_id}] is illegal, topic:[{topic}]")
            mains = [queue_id]
        else:  # a random start, as 5.x: a counter shared by every pop can start a topic's pops at the same
            # queue each time (a consumer popping several topics in turn), leaving the others to wait
            start = random.randrange(count) if count else 0
            mains = [(start + i) % count for i in range(count)]
        out = [(topic, q, True) for q in mains]
        if fifo:
            return out
        retry = self.broker.topics.get(retry_topic(group))
        if retry is not None and retry.perm & PermName.READ:
            retries = [(retry.topic_name, q, False) for q in range(retry.read_queue_nums)]
            out = retries + out if random.random() < RETRY_FIRST_PROBABILITY else out + retries
        return out

    def _start_offset(self, group: str, topic: str, queue_id: int, init_mode: int) -> int:
        """The group's pop offset: this member's own, else the offset table's (a member taking over); a
        group new to the queue starts at its first message when the queue still has it (5.x
        ``initPopOffsetByCheckMsgInMem``) or with MIN, else at its end."""
        offset = self.pop_offset(group, topic, queue_id)
        if offset >= 0:
            return offset
        store = self.broker.store
        low = store.get_min_offset(topic, queue_id)
        if init_mode == INIT_MODE_MIN or low == 0 or topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return low
        return store.get_max_offset(topic, queue_id)

    def _pop_once(self, ask: _Ask, dead: list[InFlight], lent: list[InFlight]) -> list[PoppedMessage]:
        """One pass over the queues the pop reads; FIFO lendings past their retries are put in ``dead``
        for :meth:`_forward_dead` (their queue stays held until then), and in a DLedger group the FIFO
        lendings answered in ``lent``, for :meth:`lending_records`."""
        group, topic, queue_id, max_messages, fifo = (
            ask.group,
            ask.topic,
            ask.queue_id,
            ask.max_messages,
            ask.fifo,
        )
        invisible_ms, codes = ask.invisible_ms, ask.codes
        now = _now_ms()
        out: list[PoppedMessage] = []
        journal: list[str] = []
        store = self.broker.store
        replicated = self.replicated
        passed = 0  # queue offsets read in this pass, over all its queues (READ_ON_LIMIT)
        for source, q, filtered in self._sources(group, topic, queue_id, fifo):
            if len(out) >= max_messages:
                break
            if passed >= READ_ON_LIMIT:  # (the loop is not held longer: the pop reads on at once)
                self._read_on = True
                break
            queue = (group, source, q)
            self._follow_table(queue, journal)
            if fifo:
                held = self._held.get(queue)
                if held:
                    if min(r.visible_at for r in held.values()) > now:  # the order lock: still out
                        if ask.attempt_id and all(r.attempt_id == ask.attempt_id for r in held.values()):
                            out += self._lent_again(held, lent)
                        continue
                    out += self._redeliver_held(held, now, ask, journal, dead, lent)
                    continue
            offset = self._start_offset(group, source, q, ask.init_mode)
            if offset == store.get_max_offset(source, q) and queue in self._next:
                continue  # read to its end before, nothing since: no read (a pop passes every queue)
            acked = self._acked.get(queue)
            nxt, read = offset, False
            # read on past messages skipped (acked or lent before a DLedger failover) and past reads that
            # matched none of the tags (a read looks at a bounded window): what waits above them is lent
            # now, as 5.x's pop moves the offset past such a read and runs again while there is more
            while True:
                try:
                    result = store.get_messages(
                        group, source, q, nxt, max_messages - len(out), codes if filtered else None
                    )
                except StoreError as exc:
                    log.error("POP read of %s:%d at %d failed: %s", source, q, nxt, exc)
                    break
                read, skipped = True, False
                for found in result.messages:
                    if replicated and (
                        (group, source, q, found.queue_offset) in self.records
                        or (acked is not None and found.queue_offset in acked)
                    ):
                        skipped = True
                        continue  # lent on or acked before a DLedger failover (see catch_up)
                    try:
                        msg = found.stored
                    except StoreError as exc:
                        log.error("POP skipped a damaged record of %s:%d: %s", source, q, exc)
                        continue
                    record = InFlight(
                        group,
                        source,
                        q,
                        found.queue_offset,
                        found.phys_offset,
                        now,
                        invisible_ms,
                        msg.reconsume_times + 1,
                        fifo,
                        offset,
                        ask.attempt_id if fifo else "",
                    )
                    self._add(record)
                    journal.append(record_line(record))
                    out.append(self._popped(record, found))
                    if fifo and replicated:
                        lent.append(record)
                at = nxt
                if result.status is not _S.NO_MATCHED_LOGIC_QUEUE:
                    nxt = result.next_begin_offset
                passed += nxt - at
                more = skipped or (not result.messages and nxt < result.max_offset)
                if not more or len(out) >= max_messages or nxt <= at:
                    break
                if passed >= READ_ON_LIMIT:
                    self._read_on = True
                    break
            if not read:
                continue
            if acked is not None:
                acked.difference_update([o for o in acked if o < nxt])
                if not acked:
                    del self._acked[queue]
            if nxt != offset or queue not in self._next:
                self._next[queue] = nxt
                journal.append(offset_line(group, source, q, nxt))
                self._mark(queue, journal)
        if journal:
            self._write(journal)
        if out:
            self.broker.stats.on_get(
                group, topic, max(queue_id, 0), len(out), sum(len(m.record) for m in out), 0
            )
        return out

    def _redeliver_held(
        self,
        held: dict[int, InFlight],
        now: int,
        ask: _Ask,
        journal: list[str],
        dead: list[InFlight],
        lent: list[InFlight],
    ) -> list[PoppedMessage]:
        """A FIFO queue whose lent messages expired: the same ones again, in order, one attempt more
        (those past the group's retry limit into ``dead``, for the DLQ, and so those whose copy into it
        was begun: see :meth:`_reput`)."""
        out = []
        for r in sorted(held.values(), key=lambda r: r.queue_offset):
            r.attempt += 1
            r.pop_time = max(now, r.pop_time + 1)
            r.invisible_ms = ask.invisible_ms
            r.attempt_id = ask.attempt_id
            found = self._look(r)
            journal.append(record_line(r))
            if found is None or r.attempt > self._max_reconsume(r.group) + 1 or r.key in self._reviving:
                dead.append(r)
                continue
            out.append(self._popped(r, found))
            if self.replicated:
                lent.append(r)
        return out

    def _lent_again(self, held: dict[int, InFlight], lent: list[InFlight]) -> list[PoppedMessage]:
        """A retried FIFO pop (same attempt id): its lending as it was, same handles (in a DLedger group
        its records logged again: the first answer may have failed for want of the quorum)."""
        out = []
        for r in sorted(held.values(), key=lambda r: r.queue_offset):
            found = self._look(r)
            if found is not None:
                out.append(self._popped(r, found))
                if self.replicated:
                    lent.append(r)
        return out

    def _popped(self, r: InFlight, found: SelectedMessage) -> PoppedMessage:
        msg = found.stored
        retry = msg.topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
        topic = msg.properties.get(PROPERTY_RETRY_TOPIC, msg.topic) if retry else msg.topic
        handle = self.handle(r)
        return PoppedMessage(
            bytes(found.raw), handle.encode(), r.attempt, r.queue_id, r.queue_offset, topic, handle
        )

    async def _wait_for_messages(self, ask: _Ask, left: float, gone: asyncio.Future[None] | None) -> None:
        """Park on every queue the pop reads until one grows, a FIFO lock can expire, ``gone`` is done (never
        cancelled here: it is the connection's), or ``left`` s."""
        group, fifo = ask.group, ask.fifo
        hold = self.broker.hold
        store = self.broker.store
        queues: dict[tuple[str, int], int] = {}
        for source, q, _ in self._sources(group, ask.topic, ask.queue_id, fifo):
            # (a topic whose every queue the pop reads is parked on once: any arrival wakes it)
            every = source != ask.topic or ask.queue_id < 0
            queues[(source, ANY_QUEUE) if every else (source, q)] = (
                -1 if every else store.get_max_offset(source, q)
            )
            held = self._held.get((group, source, q)) if fifo else None
            if held:
                left = min(left, max(0.0, (min(r.visible_at for r in held.values()) - _now_ms()) / 1000))
        waits = [hold.park_all([(t, q, o) for (t, q), o in queues.items()], left)] if queues else []
        released: asyncio.Future[None] | None = None
        if fifo:
            released = asyncio.get_running_loop().create_future()
            self._unheld.setdefault(group, set()).add(released)
            waits.append(released)
        if not waits and gone is None:
            await asyncio.sleep(left)
            return
        try:
            watched = waits if gone is None else [*waits, gone]
            await asyncio.wait(watched, timeout=left + 0.001, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
            if released is not None:
                self._unheld.get(group, set()).discard(released)

    # ------------------------------------------------------------------ records

    def _add(self, r: InFlight) -> None:
        self.records[r.key] = r
        lent = self._lent.setdefault(r.queue_key, [])
        heapq.heappush(lent, r.queue_offset)
        if len(lent) > 2 * len(self.records) + 1024:  # ended lendings above a long-lent one: rebuilt
            self._lent[r.queue_key] = lent = [
                x.queue_offset for x in self.records.values() if x.queue_key == r.queue_key
            ]
            heapq.heapify(lent)
        if r.fifo:
            self._held.setdefault((r.group, r.topic, r.queue_id), {})[r.queue_offset] = r
        else:
            self._schedule(r)

    def _schedule(self, r: InFlight) -> None:
        """Put a lending on the revive heap; wake the loop only when it is now the first due. Entries of
        acked or changed lendings stay until due (skipped then), unless they outnumber the live ones."""
        if len(self._due) > 4 * len(self.records) + 4096:
            self._due = [(x.visible_at, x.key, x.pop_time) for x in self.records.values() if not x.fifo]
            heapq.heapify(self._due)
        entry = (r.visible_at, r.key, r.pop_time)
        heapq.heappush(self._due, entry)
        if self._due[0] is entry:
            self._poke()

    def _drop(self, r: InFlight) -> None:
        self.records.pop(r.key, None)
        if r.fifo:
            queue = (r.group, r.topic, r.queue_id)
            held = self._held.get(queue)
            if held is not None:
                held.pop(r.queue_offset, None)
                if not held:
                    del self._held[queue]
                    for waiter in self._unheld.pop(r.group, ()):
                        if not waiter.done():
                            waiter.set_result(None)

    def _write(self, lines: list[str]) -> None:
        self.journal.append(lines)
        if self.journal.size > COMPACT_BYTES:
            self.journal.rewrite(self.records.values(), self._pop_offsets())

    def _pop_offsets(self) -> dict[_QueueKey, int]:
        """Every queue's next pop offset, for a journal rewrite (an offset table change nobody popped
        since, such as an operator's reset, taken first)."""
        for queue in list(self._marks):
            self._follow_table(queue, [])
        return dict(sorted(self._next.items()))

    # ------------------------------------------------------------------ the ack watermark

    def _watermark(self, queue: _QueueKey) -> int:
        """The lowest offset of the queue still lent out (or acked, its record not held yet), or its next
        pop offset when none is: the group has every message below it acked (or revived into the retry
        topic, or sent to the DLQ)."""
        nxt = self._next[queue]
        unheld = self._acks_unheld.get(queue)
        if unheld:  # (an ack whose record is not held yet: as if still lent)
            nxt = min(nxt, min(unheld))
        lent = self._lent.get(queue)
        group, topic, queue_id = queue
        while lent and (group, topic, queue_id, lent[0]) not in self.records:
            heapq.heappop(lent)
        if not lent:
            self._lent.pop(queue, None)
            return nxt
        return min(lent[0], nxt)

    def _mark(self, queue: _QueueKey, journal: list[str]) -> None:
        """Commit the queue's ack watermark into the offset table when it moved. The table, not the
        journal, is what the other members of a DLedger group (and a slave) take from this one: it must
        never stand past a message that is lent and not acked, or a member taking over would skip it."""
        self._follow_table(queue, journal)
        if queue not in self._next:
            return
        mark = self._watermark(queue)
        if mark != self._marks.get(queue):
            self._marks[queue] = mark
            self.broker.offsets.commit_offset(*queue, mark)

    def _follow_table(self, queue: _QueueKey, journal: list[str]) -> None:
        """An offset this service did not put into the table wins: an operator's reset (or a 4.x consumer
        of the same group committing; the group or topic deleted: none). The queue starts over there,
        its lendings end (the same messages are lent again from a reset back; one forward skips them as
        asked) and its FIFO lock is released, as 5.x's ``clearBlock`` on a reset."""
        mark = self._marks.get(queue)
        if mark is None:
            return
        table = self.broker.offsets.query_offset(*queue)
        if table == mark:
            return
        log.info(
            "POP: %s/%s/%d moved from %d to %d in the offset table: popping from there",
            queue[0],
            queue[1],
            queue[2],
            mark,
            table,
        )
        for r in [r for r in self.records.values() if r.queue_key == queue]:
            self._drop(r)
            journal.append(gone_line(r.key))
        self._lent.pop(queue, None)
        journal.append(offset_line(*queue, table))
        if table >= 0:
            self._next[queue] = self._marks[queue] = table
        else:
            del self._next[queue], self._marks[queue]

    def _look(self, r: InFlight) -> SelectedMessage | None:
        """The lent message's record, decoded once (None: gone with retention, or damaged)."""
        return self._look_at(r.phys_offset, f"{r.topic}:{r.queue_id} at {r.queue_offset}")

    def _look_at(self, phys_offset: int, what: str = "") -> SelectedMessage | None:
        try:
            found = self.broker.store.look_message_by_offset(phys_offset)
            if found is not None:
                found.stored  # noqa: B018 - decodes and checks it (its body as stored)
            return found
        except StoreError as exc:
            log.error("POP: the message of %s is unreadable: %s", what or f"CommitLog {phys_offset}", exc)
            return None

    def _max_reconsume(self, group: str) -> int:
        config = self.broker.groups.get(group)
        return config.retry_max_times if config is not None else 16

    # ------------------------------------------------------------------ revive

    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    async def _revive_loop(self) -> None:
        assert self._wake is not None
        while True:
            self._wake.clear()
            if self._copies:
                await self._make_copies()
            now = _now_ms()
            while self._due and self._due[0][0] <= now:
                due: list[InFlight] = []  # a slice: a mass expiry must not hold the loop
                while self._due and self._due[0][0] <= now and len(due) < REVIVE_SLICE:
                    _, key, pop_time = heapq.heappop(self._due)
                    r = self.records.get(key)
                    if r is None or r.fifo or r.pop_time != pop_time or r.visible_at > now:
                        continue  # acked, changed (a newer entry), or FIFO
                    due.append(r)
                # the slice's puts in turn, their waits for a DLedger quorum together
                generation = self._generation
                results = await asyncio.gather(*(self._reput(r) for r in due), return_exceptions=True)
                if self._generation != generation:
                    break  # taken over meanwhile: its lendings (and their retries) are gone with the tables
                failed = [(r, x) for r, x in zip(due, results, strict=True) if isinstance(x, Exception)]
                for r, exc in failed:
                    log.error(
                        "POP revive of %s:%d at %d failed; retried: %s",
                        r.topic,
                        r.queue_id,
                        r.queue_offset,
                        exc,
                    )
                    heapq.heappush(self._due, (now + 1000, r.key, r.pop_time))
                if failed:
                    break
                now = _now_ms()
            delay = (
                REVIVE_IDLE
                if not self._due
                else min(REVIVE_IDLE, max(0.0, (self._due[0][0] - _now_ms()) / 1000))
            )
            # not wait_for: on Python 3.11 it returns a wake that came with a cancel and drops the cancel,
            # so a stop right after a pop (which wakes this loop) waited for ever
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._wake.wait()

    async def _reput(self, r: InFlight, *, dlq: bool | None = None) -> None:
        """Re-put a lending's message into the DLQ (``dlq``), or for an expired one (None) into the retry
        topic unless the group's retries are used up, then end the lending. The put is awaited until a
        DLedger quorum holds it (``Broker.put``): ended sooner, the watermark could pass a message whose
        only new copy is in a deposed leader's truncated tail. In a DLedger group the end is logged
        first, naming the copy's topic and the message: a member taking over after the record and
        before the copy puts the copy itself, and one taking over after both finds the copy and lends
        nothing again (logged after the copy, a failover between the two lent it once more).

        Meanwhile the lending's handle is refused (a change or an ack would not stop the copy). A copy
        appended and not seen stored as asked (a DLedger quorum's wait ran out, or a SYNC_FLUSH disk's)
        is kept (in DLedger, it commits unless this leadership ends), as 5.x's revive counts an appended
        copy done: it stays refused and the retry waits for that copy, where a second put was a second
        copy, the message lent twice at once. Once a take-over moved the generation on, what is left of
        it touches no table (the caller still gets its failure) and puts no copy: the member elected
        puts one itself when the log names it."""
        pop_time, key, generation = r.pop_time, r.key, self._generation
        if self.records.get(key) is not r:  # ended since it was found (acked, or the tables taken over: a
            return  # FIFO pop's next dead lending, a revive slice's next put), so nothing to end or copy
        appended = self._reviving.get(key)
        if appended == -1:  # (the revive loop tries again later)
            raise PopError(ResponseCode.SYSTEM_ERROR, "its copy is being put already")
        self._reviving[key] = appended = -1 if appended is None else appended
        try:
            found = self._look(r)
            copy = None
            if found is not None:
                msg = found.stored
                if dlq is None:
                    dlq = msg.reconsume_times >= self._max_reconsume(r.group)
                copy = self._retry_copy(r.group, msg, dlq=dlq)
            if self.replicated and appended < 0:  # a member taking over must not lend (or revive) it again
                name = self.broker.config.broker_name
                end = ack_body(r, name, copy_to=copy.topic if copy is not None else "")
                await self.hold([self._record(ACK_TAG, r, end)])
                if self._generation != generation:
                    raise PopError(ResponseCode.SYSTEM_ERROR, "the leadership changed meanwhile: not copied")
            if copy is not None:
                if appended >= 0:
                    result = await self.broker.held(PutResult(PutMessageStatus.PUT_OK, appended))
                else:
                    result = await self.broker.put(copy)
                    mine = self._generation == generation and self.records.get(key) is r
                    if not result.ok and result.phys_offset >= 0 and mine:
                        self._reviving[key] = result.phys_offset
                self._check_put(copy.topic, result)
            if self._generation == generation and self.records.get(key) is r and r.pop_time == pop_time:
                self._finish(r)  # (else taken over or lent anew meanwhile: one more delivery, never one less)
                self._reviving.pop(key, None)
        finally:
            mine = self._generation == generation
            if mine and self._reviving.get(key) == -1:  # nothing appended: the handle as it was
                del self._reviving[key]

    async def _make_copies(self) -> None:
        """The copies earlier leaders logged the end of a lending for, put where they are missing. One
        that fails stays for the next turn of the revive loop. A take-over meanwhile ends it: the copies
        to put are the next leadership's to find."""
        left = []
        generation = self._generation
        for at, stored_ms, group, copied in self._copies:
            found = self._look_at(copied.phys_offset)
            if found is None:
                continue  # gone with retention: nothing left to copy
            msg = found.stored
            if await self._copied(msg, copied.topic, at, stored_ms):
                continue
            if self._generation != generation:
                return
            copy = self._retry_copy(group, msg, dlq=copied.topic == dlq_topic(group))
            try:
                self._check_put(copy.topic, await self.broker.put(copy))
            except (StoreError, PopError) as exc:
                log.error(
                    "POP: a copy an earlier leader logged not put into %s; retried: %s", copy.topic, exc
                )
                left.append((at, stored_ms, group, copied))
                continue
            log.info("POP: a copy into %s an earlier leader logged and did not store, put now", copy.topic)
        if self._generation == generation:
            self._copies = left

    async def _copied(self, msg: StoredMessage, topic: str, at: int, stored_ms: int) -> bool:
        """Whether ``topic`` holds a copy of ``msg`` stored after CommitLog offset ``at`` (its record's,
        stored at ``stored_ms``): the same first message id (``ORIGIN_MESSAGE_ID``) and one delivery more,
        among the first ``COPY_SEARCH`` messages of each queue stored from a second before the record on."""
        store = self.broker.store
        config = self.broker.topics.get(topic)
        origin = msg.properties.get(PROPERTY_ORIGIN_MESSAGE_ID, msg.msg_id)
        for queue_id in range(config.write_queue_nums if config is not None else 1):
            offset = store.search_offset_by_timestamp(topic, queue_id, stored_ms - 1000)
            end = min(store.get_max_offset(topic, queue_id), offset + COPY_SEARCH)
            while offset < end:
                result = store.get_messages(
                    REVIVE_GROUP, topic, queue_id, offset, min(CATCH_UP_BATCH, end - offset)
                )
                for selected in result.messages:
                    if selected.phys_offset <= at:
                        continue
                    try:
                        m = selected.message
                    except StoreError:
                        continue
                    if (
                        m.properties.get(PROPERTY_ORIGIN_MESSAGE_ID) == origin
                        and m.reconsume_times == msg.reconsume_times + 1
                    ):
                        return True
                if result.next_begin_offset <= offset:
                    break
                offset = result.next_begin_offset
                await asyncio.sleep(0)
        return False

    def _finish(self, r: InFlight) -> None:
        """A lending ended (acked, revived, sent to the DLQ): its record gone, the watermark moved, one
        journal write."""
        lines = [gone_line(r.key)]
        self._drop(r)
        if r.queue_key not in self._next and self.replicated:
            # a lending taken over from the revive log, ended before this member popped its queue: the
            # next pop starts at the offset table's watermark, below it
            self._acked.setdefault(r.queue_key, set()).add(r.queue_offset)
        self._mark(r.queue_key, lines)
        self.journal.append(lines)

    def _check_put(self, topic: str, result: PutResult) -> None:
        if not result.ok:
            raise StoreError(f"POP re-put to {topic} failed: {result.status.value}")
        self.broker.stats.on_put(topic, 1, result.wrote_bytes)

    def _retry_copy(self, group: str, old: StoredMessage, *, dlq: bool) -> Message:
        """A message re-put as 5.x's revive does (``PopReviveService#reviveRetry``): its properties, the
        original topic in ``RETRY_TOPIC``, ``reconsumeTimes + 1``, no delay level (the invisibility was
        the wait)."""
        broker = self.broker
        if dlq:
            topic = dlq_topic(group)
            broker.topics.create_system_like(topic, 1, PermName.READ_WRITE)
            queue_id = 0
        else:
            config = broker.groups.get(group)
            nums = config.retry_queue_nums if config is not None and config.retry_queue_nums > 0 else 1
            retry = broker.topics.create_system_like(retry_topic(group), nums, PermName.READ_WRITE)
            topic = retry.topic_name
            queue_id = random.randrange(max(1, retry.write_queue_nums))
        return retry_copy(old, topic, queue_id, old.store_host, None)


#: The keys mqctl adds to GET_BROKER_RUNTIME_INFO for POP (4.9.8 has none).
POP_RUNTIME_KEYS: Final = frozenset({"popInFlightTotal", "popInFlight"})


def pop_runtime_info(in_flight: dict[str, int]) -> dict[str, str]:
    """GET_BROKER_RUNTIME_INFO's POP keys: the total in flight, and ``group:count,...`` by group."""
    return {
        "popInFlightTotal": str(sum(in_flight.values())),
        "popInFlight": ",".join(f"{g}:{n}" for g, n in sorted(in_flight.items())),
    }


def parse_pop_in_flight(text: str | None) -> dict[str, int]:
    """``popInFlight`` back into counts by group (empty for a broker without POP)."""
    out: dict[str, int] = {}
    for item in (text or "").split(","):
        group, sep, count = item.rpartition(":")
        if sep and count.isdigit():
            out[group] = int(count)
    return out


def _refused(result: PutResult) -> PutResult:
    """A revive record's put result, raising SYSTEM_ERROR when it was not stored or not held."""
    if not result.ok:
        raise PopError(
            ResponseCode.SYSTEM_ERROR,
            f"not held by the DLedger group ({result.status.value}): ask the leader again",
        )
    return result


def _check_invisible(invisible_ms: int) -> None:
    if not 0 <= invisible_ms <= MAX_INVISIBLE_MS:
        raise PopError(
            INVALID_PARAMETER, f"invisibleTime {invisible_ms} ms is not within 0 and {MAX_INVISIBLE_MS} ms"
        )


def _now_ms() -> int:
    return int(time.time() * 1000)
