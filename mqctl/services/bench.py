"""Load generators like RocketMQ's benchmark Producer and Consumer.

``produce`` runs T synchronous senders, each on its own connection with one SEND_MESSAGE_V2 in
flight (as T producer threads calling ``send()``); frames are encoded once per queue so the figure
is the broker's, not the generator's. ``consume`` drains a topic with one PULL_MESSAGE in flight
per queue (as a push consumer does) and counts records without decoding them; it commits
the group's offsets, so it is a live member of the group while it runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import math
import os
import signal
import struct
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass
from ssl import SSLContext

from daemon.broker.bodies import MessageQueue
from daemon.broker.headers import (
    PULL_FLAG_COMMIT_OFFSET,
    PULL_FLAG_SUBSCRIPTION,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    SendMessageRequestHeaderV2,
)
from daemon.remoting.client import parse_addr
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.frame import decode_frame, encode_command
from daemon.remoting.tls import TlsReadBuffer
from mqctl.admin.client import Admin
from mqctl.admin.member import GroupMember
from mqctl.admin.messaging import new_uniq_key
from mqctl.errors import MqctlError, NotFoundError, from_response_code
from mqctl.services.fanout import gather_limited
from mqctl.services.messages import QueueRef, queues, writable_queues
from mqctl.services.topics import TopicSpec, create_missing, route_or_not_found
from mqctl.units import plural
from store import (
    AUTO_CREATE_TOPIC,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT_STORE_MSG_OK,
    encode_properties,
    read_header,
)

_LENGTH = struct.Struct(">i")
PRODUCER_GROUP = "mqctl_bench_producer"
#: Where a frame's UNIQ_KEY goes: 32 characters no topic name has, replaced by each send's own key.
UNIQ_KEY_SLOT = "#" * 32


@dataclass
class BenchResult:
    kind: str
    messages: int
    failures: int
    seconds: float
    tps: float
    avg_rt_ms: float
    rt_p50_ms: float
    rt_p90_ms: float
    rt_p99_ms: float
    rt_p999_ms: float
    max_rt_ms: float
    interrupted: bool = False
    #: Why the first refused send was refused; ``messages``, ``tps`` and the RTs count accepted sends only.
    first_failure: str | None = None


@dataclass
class Run:
    """What a running benchmark shares with its workers and its reporter: when to stop, what it saw."""

    started: float = dataclasses.field(default_factory=time.perf_counter)
    rts: list[float] = dataclasses.field(default_factory=list)
    messages: int = 0
    failures: int = 0
    deadline: float | None = None  # perf_counter time to stop at (--duration)
    interval: float = 0.0  # seconds between one worker's sends (--rate)
    stop: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    interrupted: bool = False
    #: The first refused send: (broker address, response code, remark).
    first_failure: tuple[str, int, str | None] | None = None

    def failure(self, action: str) -> MqctlError | None:
        """The first refusal as the error it is (an ACL refusal an AuthError), for ``action``."""
        if self.first_failure is None:
            return None
        addr, code, remark = self.first_failure
        return from_response_code(code, remark, action=f"{action}, the first to {addr}")

    def over(self) -> bool:
        return self.stop.is_set() or (self.deadline is not None and time.perf_counter() >= self.deadline)


Ticker = Callable[[BenchResult], None]


@contextlib.asynccontextmanager
async def running(kind: str, run: Run, tick: Ticker | None) -> AsyncIterator[Run]:
    """Ctrl-C stops the workers (the statistics are kept and reported, flagged ``interrupted``);
    ``tick`` gets a snapshot every second (the CLI's progress line on a terminal)."""
    loop = asyncio.get_running_loop()

    def interrupt() -> None:
        run.interrupted = True
        run.stop.set()

    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGINT, interrupt)

    async def report() -> None:
        while True:
            await asyncio.sleep(1.0)
            if tick is not None:
                tick(
                    result(kind, run.messages, run.failures, time.perf_counter() - run.started, list(run.rts))
                )

    reporter = asyncio.create_task(report())
    try:
        yield run
    finally:
        reporter.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reporter
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.remove_signal_handler(signal.SIGINT)


def topic_names(prefix: str, topics: int) -> list[str]:
    """PREFIX alone, or PREFIX-0 ... PREFIX-(N-1) to spread the load over N topics."""
    return [prefix] if topics == 1 else [f"{prefix}-{i}" for i in range(topics)]


def send_frame(
    topic: str,
    queue_id: int,
    body: bytes,
    signer: Callable[[RemotingCommand], None] | None = None,
    uniq_key: str = UNIQ_KEY_SLOT,
) -> bytes:
    """One SEND_MESSAGE_V2 frame, signed when ACL credentials are in force. Its properties are a Java
    client's: UNIQ_KEY (the client message id a send answers and ``msg query --id`` finds; by default
    :data:`UNIQ_KEY_SLOT`, each send's key written over it) and WAIT=true, so a SYNC_FLUSH broker
    answers after the fsync."""
    properties = encode_properties({PROPERTY_UNIQ_KEY: uniq_key, PROPERTY_WAIT_STORE_MSG_OK: "true"})
    header = SendMessageRequestHeaderV2(
        PRODUCER_GROUP,
        topic,
        AUTO_CREATE_TOPIC,
        4,
        queue_id,
        0,
        int(time.time() * 1000),
        0,
        properties.decode(),
    )
    request = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, dict(header.to_ext_fields()), body)
    if signer is not None:
        signer(request)
    return encode_command(request)


async def _read_response(reader: asyncio.StreamReader) -> RemotingCommand:
    head = await reader.readexactly(4)
    (length,) = _LENGTH.unpack(head)
    decoded = decode_frame(head + await reader.readexactly(length), 0)
    assert decoded is not None
    return decoded[0]


async def _open(addr: str, ssl: SSLContext | None) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A stream pair to ``addr``; over TLS, reading through one reusable buffer (see TlsReadBuffer)."""
    host, port = parse_addr(addr)
    if ssl is None:
        return await asyncio.open_connection(host, port)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(loop=loop)
    protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
    transport, _ = await loop.create_connection(lambda: TlsReadBuffer(protocol), host, port, ssl=ssl)
    return reader, asyncio.StreamWriter(transport, protocol, reader, loop)


#: A queue slot of :func:`produce`: the broker, and its frame as the part before the body (the header,
#: the queue's own, with :data:`UNIQ_KEY_SLOT` where each send writes its key) and the body (one object
#: shared by every slot, so 10,000 topics' sends copy 10,000 headers in turn, not 10,000 whole frames,
#: each cold when its turn comes); with ACL credentials, what makes the head of a key, signed (the
#: signature covers the key: no head is sent twice).
Slot = tuple[str, bytes, bytes, Callable[[str], bytes] | None]


def with_key(head: bytes, key: str) -> bytes:
    """``head`` with ``key`` (32 characters) in its :data:`UNIQ_KEY_SLOT`."""
    at = head.find(_KEY_SLOT)
    return head[:at] + key.encode() + head[at + 32 :]


_KEY_SLOT = UNIQ_KEY_SLOT.encode()


def split_frame(frame: bytes, body: bytes) -> tuple[bytes, bytes]:
    """``frame`` (which ends with ``body``) as its head and the shared ``body``."""
    assert frame.endswith(body)
    return frame[: len(frame) - len(body)], body


#: A sender's connections by broker address.
Streams = dict[str, tuple[asyncio.StreamReader, asyncio.StreamWriter]]


async def sender(
    sends: Iterable[Slot], run: Run, ssl: SSLContext | None = None, streams: Streams | None = None
) -> None:
    """Send each slot's frame in turn, one in flight, on this sender's own connections (TLS with
    ``ssl``), until the run is over; paced to ``run.interval`` when a rate is set. Given ``streams``,
    the connections are the caller's: opened into it as needed and left open."""
    own = streams is None
    if streams is None:
        streams = {}
    next_at = time.perf_counter()
    try:
        for addr, head, body, signed in sends:
            if run.over():
                return
            if run.interval:
                next_at += run.interval
                delay = next_at - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
            if addr not in streams:
                streams[addr] = await _open(addr, ssl)
            reader, writer = streams[addr]
            started = time.perf_counter()
            key = new_uniq_key()
            writer.writelines((with_key(head, key) if signed is None else signed(key), body))  # one writev
            response = await _read_response(reader)
            if response.code == ResponseCode.SUCCESS:  # a refused send is no message sent, nor its RT
                run.rts.append(time.perf_counter() - started)
                run.messages += 1
            else:
                run.failures += 1
                if run.first_failure is None:
                    run.first_failure = (addr, response.code, response.remark)
    finally:
        if own:
            close_streams(streams)


def close_streams(streams: Streams) -> None:
    for _, writer in streams.values():
        writer.close()


async def produce(
    admin: Admin,
    prefix: str,
    *,
    topics: int,
    threads: int,
    size: int,
    count: int | None,
    queues: int = 4,
    duration: float | None = None,
    rate: float | None = None,
    tick: Ticker | None = None,
) -> BenchResult:
    """Send ``count`` messages (or for ``duration`` seconds, or both: whichever ends first) of ``size``
    bytes from ``threads`` senders, at most ``rate`` messages/s in all when given.

    Message k goes to queue slot k mod S, where the slots interleave the topics (topic 0 queue 0,
    topic 1 queue 0, ...), so the load is spread round-robin over topics and then queues. Topics
    that ``topics > 1`` creates get ``queues`` queues (4, RocketMQ's defaultTopicQueueNums).
    """
    slots = await produce_slots(admin, prefix, topics=topics, size=size, queues=queues)
    ssl = getattr(admin.client, "ssl", None)  # the session's TLS (a RemotingClient's context)
    return await produce_to(
        slots, threads=threads, count=count, duration=duration, rate=rate, tick=tick, ssl=ssl
    )


async def produce_slots(admin: Admin, prefix: str, *, topics: int, size: int, queues: int = 4) -> list[Slot]:
    """:func:`produce`'s queue slots (:data:`Slot`: broker, frame head, shared body): the topics created
    (``topics > 1``) and routed, each queue's frame encoded. Apart from the timed sends, so that a benchmark repeating rounds
    over 10,000 topics asks for their routes once."""
    names = topic_names(prefix, topics)
    if topics > 1:
        await create_missing(admin, [TopicSpec(name, queues, queues) for name in names])
    body = os.urandom(size)
    routes = await gather_limited((writable_queues(admin, name) for name in names), 32)
    # one string per broker address, not one per route answer: a sender looks each slot's address up in
    # its connections, and 10,000 copies of it would be 10,000 more cold objects to hash and compare
    addrs: dict[str, str] = {}
    signer = admin.client.signer
    per_topic = [
        [
            (
                addrs.setdefault(ref.addr, ref.addr),
                *split_frame(send_frame(name, ref.queue_id, body), body),
                None if signer is None else _signed_head(name, ref.queue_id, body, signer),
            )
            for ref in refs
        ]
        for name, refs in zip(names, routes, strict=True)
    ]
    slots = [slot for column in itertools.zip_longest(*per_topic) for slot in column if slot is not None]
    if not slots:
        raise NotFoundError(f"no writable queue for {prefix!r}")
    return slots


def _signed_head(
    topic: str, queue_id: int, body: bytes, signer: Callable[[RemotingCommand], None]
) -> Callable[[str], bytes]:
    """What makes a signed send's head of its key (ACL: the signature covers the properties)."""
    return lambda key: split_frame(send_frame(topic, queue_id, body, signer, key), body)[0]


async def produce_to(
    slots: list[Slot],
    *,
    threads: int,
    count: int | None,
    duration: float | None = None,
    rate: float | None = None,
    tick: Ticker | None = None,
    ssl: SSLContext | None = None,
    start: int = 0,
    pool: list[Streams] | None = None,
) -> BenchResult:
    """The timed part of :func:`produce`: message k to ``slots[(start + k) % len(slots)]``. A benchmark
    timing many short pieces passes each piece's ``start`` (so that they go on round the slots rather
    than each begin at the first) and a ``pool`` of one connection map per sender, kept open between
    pieces (closed by its owner, :func:`close_streams`)."""
    run = Run(interval=threads / rate if rate else 0.0)
    run.deadline = run.started + duration if duration else None

    def sends(i: int) -> Iterator[Slot]:
        return (
            slots[(start + k) % len(slots)]
            for k in (range(i, count, threads) if count else itertools.count(i, threads))
        )

    async with running("produce", run, tick):
        await asyncio.gather(
            *(sender(sends(i), run, ssl, None if pool is None else pool[i]) for i in range(threads))
        )
    refused = run.failure(f"{plural(run.failures, 'send')} refused")
    if refused is not None and not run.messages and not run.interrupted:
        raise refused  # nothing was measured: why, with its exit code (an ACL refusal: 9)
    return result(
        "produce",
        run.messages,
        run.failures,
        time.perf_counter() - run.started,
        run.rts,
        interrupted=run.interrupted,
        first_failure=None if refused is None else str(refused),
    )


def count_records(body: bytes) -> int:
    """Records in a pull body, walking TOTALSIZE only."""
    pos = count = 0
    while pos < len(body):
        size, _ = read_header(body, pos)
        pos += size
        count += 1
    return count


async def consume(
    admin: Admin, topic: str, *, group: str, count: int | None, idle_s: float, tick: Ticker | None = None
) -> BenchResult:
    """Drain ``topic`` from the group's committed offsets (earliest when none), until exactly ``count``
    messages (each pull asks for no more than is left to claim) or ``idle_s`` without a message.

    It commits, so it runs as a member of the group (see :class:`GroupMember`): each pull carries
    the queue's position for the broker to commit, as a push consumer's do, and a reset of the
    group moves its positions instead of being overwritten by them.
    """
    refs = queues(await route_or_not_found(admin, topic), write=False)
    run = Run()
    rts = run.rts
    claimed = 0  # messages asked for by pulls in flight or done: never more than count
    last_progress = time.perf_counter()
    done = run.stop
    member = GroupMember(admin, group, topic, {ref.broker_name: ref.addr for ref in refs})

    async def drain(ref: QueueRef) -> None:
        nonlocal last_progress
        mq = MessageQueue(topic, ref.broker_name, ref.queue_id)
        committed = await admin.consumer_offset(ref.addr, group, topic, ref.queue_id)
        member.offsets[mq] = (
            committed if committed is not None else await admin.min_offset(ref.addr, topic, ref.queue_id)
        )
        nonlocal claimed
        while not done.is_set():
            want = 32 if count is None else min(32, count - claimed)
            if want <= 0:  # the rest is claimed by pulls in flight: wait for them to land or give back
                await asyncio.sleep(0.01)
                continue
            claimed += want
            offset = member.offsets[mq]
            header = PullMessageRequestHeader(
                group,
                topic,
                ref.queue_id,
                offset,
                want,
                PULL_FLAG_SUBSCRIPTION | PULL_FLAG_COMMIT_OFFSET,
                offset,
                0,
                0,
                "*",
                "TAG",
            )
            started = time.perf_counter()
            response = await admin.call(
                ref.addr,
                RequestCode.PULL_MESSAGE,
                header,
                expect=(
                    ResponseCode.SUCCESS,
                    ResponseCode.PULL_NOT_FOUND,
                    ResponseCode.PULL_RETRY_IMMEDIATELY,
                    ResponseCode.PULL_OFFSET_MOVED,
                ),
            )
            rts.append(time.perf_counter() - started)
            reply = PullMessageResponseHeader.from_ext_fields(response.ext_fields)
            got = count_records(response.body) if response.code == ResponseCode.SUCCESS else 0
            claimed -= want - got
            if got:
                run.messages += got
                last_progress = time.perf_counter()
                if count is not None and run.messages >= count:
                    done.set()
            elif response.code == ResponseCode.PULL_NOT_FOUND:
                if time.perf_counter() - last_progress > idle_s:
                    done.set()
                await asyncio.sleep(0.01)
            member.advance(mq, offset, reply.next_begin_offset)

    async with running("consume", run, tick), member:  # on exit: commits where each queue stopped, leaves
        await asyncio.gather(*(drain(ref) for ref in refs))
    seconds = max(last_progress - run.started, 1e-9)
    # an unexpected answer raises instead of counting as a failure
    return result("consume", run.messages, 0, seconds, rts, interrupted=run.interrupted)


def percentile(ordered: list[float], q: float) -> float:
    """The nearest-rank ``q`` percentile (0-100) of sorted values: exact, from every sample kept."""
    if not ordered:
        return 0.0
    return ordered[max(0, min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1))]


def result(
    kind: str,
    messages: int,
    failures: int,
    seconds: float,
    rts: list[float],
    *,
    interrupted: bool = False,
    first_failure: str | None = None,
) -> BenchResult:
    ordered = sorted(rts)

    def ms(value: float) -> float:
        return round(1000 * value, 3)

    return BenchResult(
        kind=kind,
        messages=messages,
        failures=failures,
        seconds=round(seconds, 3),
        tps=round(messages / seconds, 1) if seconds else 0.0,
        avg_rt_ms=ms(sum(ordered) / len(ordered)) if ordered else 0.0,
        rt_p50_ms=ms(percentile(ordered, 50)),
        rt_p90_ms=ms(percentile(ordered, 90)),
        rt_p99_ms=ms(percentile(ordered, 99)),
        rt_p999_ms=ms(percentile(ordered, 99.9)),
        max_rt_ms=ms(ordered[-1]) if ordered else 0.0,
        interrupted=interrupted,
        first_failure=first_failure,
    )
