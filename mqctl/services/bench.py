"""Load generators like RocketMQ's benchmark Producer and Consumer.

``produce`` runs T synchronous senders, each on its own connection with one SEND_MESSAGE_V2 in
flight (as T producer threads calling ``send()``); frames are encoded once per queue so the figure
is the broker's, not the generator's. ``consume`` drains a topic with one PULL_MESSAGE in flight
per queue (as a push consumer does) and counts records without decoding them; it commits
the group's offsets, so it is a live member of the group while it runs.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import struct
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from daemon.broker.bodies import MessageQueue
from daemon.broker.headers import (
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    SendMessageRequestHeaderV2,
)
from daemon.remoting.client import parse_addr
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.frame import decode_frame, encode_command
from mqctl.admin.client import Admin
from mqctl.admin.member import GroupMember
from mqctl.admin.messaging import PULL_FLAG_COMMIT_OFFSET, PULL_FLAG_SUBSCRIPTION
from mqctl.errors import NotFoundError
from mqctl.services.messages import QueueRef, queues, writable_queues
from mqctl.services.topics import TopicSpec, create_missing, gather_limited
from store.record import read_header

_LENGTH = struct.Struct(">i")
PRODUCER_GROUP = "mqctl_bench_producer"


@dataclass
class BenchResult:
    kind: str
    messages: int
    failures: int
    seconds: float
    tps: float
    avg_rt_ms: float
    max_rt_ms: float


def topic_names(prefix: str, topics: int) -> list[str]:
    """PREFIX alone, or PREFIX-0 ... PREFIX-(N-1) to spread the load over N topics."""
    return [prefix] if topics == 1 else [f"{prefix}-{i}" for i in range(topics)]


def send_frame(
    topic: str, queue_id: int, body: bytes, signer: Callable[[RemotingCommand], None] | None = None
) -> bytes:
    """One SEND_MESSAGE_V2 frame, signed once when ACL credentials are in force (then resent as is)."""
    header = SendMessageRequestHeaderV2(
        PRODUCER_GROUP, topic, "TBW102", 4, queue_id, 0, int(time.time() * 1000), 0, "WAIT\x01true"
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


async def sender(sends: Iterable[tuple[str, bytes]], rts: list[float]) -> int:
    """Send each (broker, frame) in turn, one in flight, on this sender's own connections; returns failures."""
    streams: dict[str, tuple[asyncio.StreamReader, asyncio.StreamWriter]] = {}
    failures = 0
    try:
        for addr, frame in sends:
            if addr not in streams:
                streams[addr] = await asyncio.open_connection(*parse_addr(addr))
            reader, writer = streams[addr]
            started = time.perf_counter()
            writer.write(frame)
            response = await _read_response(reader)
            rts.append(time.perf_counter() - started)
            failures += response.code != ResponseCode.SUCCESS
    finally:
        for _, writer in streams.values():
            writer.close()
    return failures


async def produce(
    admin: Admin, prefix: str, *, topics: int, threads: int, size: int, count: int, queues: int = 4
) -> BenchResult:
    """Send ``count`` messages of ``size`` bytes from ``threads`` senders.

    Message k goes to queue slot k mod S, where the slots interleave the topics (topic 0 queue 0,
    topic 1 queue 0, ...), so the load is spread round-robin over topics and then queues. Topics
    that ``topics > 1`` creates get ``queues`` queues (4, RocketMQ's defaultTopicQueueNums).
    """
    names = topic_names(prefix, topics)
    if topics > 1:
        await create_missing(admin, [TopicSpec(name, queues, queues) for name in names])
    body = os.urandom(size)
    routes = await gather_limited((writable_queues(admin, name) for name in names), 32)
    per_topic = [
        [(ref.addr, send_frame(name, ref.queue_id, body, admin.client.signer)) for ref in refs]
        for name, refs in zip(names, routes, strict=True)
    ]
    slots = [slot for column in itertools.zip_longest(*per_topic) for slot in column if slot is not None]
    if not slots:
        raise NotFoundError(f"no writable queue for {prefix!r}")
    rts: list[float] = []
    started = time.perf_counter()
    failures = await asyncio.gather(
        *(sender([slots[k % len(slots)] for k in range(i, count, threads)], rts) for i in range(threads))
    )
    return result("produce", len(rts), sum(failures), time.perf_counter() - started, rts)


def count_records(body: bytes) -> int:
    """Records in a pull body, walking TOTALSIZE only."""
    pos = count = 0
    while pos < len(body):
        size, _ = read_header(body, pos)
        pos += size
        count += 1
    return count


async def consume(admin: Admin, topic: str, *, group: str, count: int | None, idle_s: float) -> BenchResult:
    """Drain ``topic`` from the group's committed offsets (earliest when none), until ``count`` or idle.

    It commits, so it runs as a member of the group (see :class:`GroupMember`): each pull carries
    the queue's position for the broker to commit, as a push consumer's do, and a reset of the
    group moves its positions instead of being overwritten by them.
    """
    refs = queues(await admin.topic_route(topic), write=False)
    rts: list[float] = []
    received = 0
    last_progress = time.perf_counter()
    done = asyncio.Event()
    member = GroupMember(admin, group, topic, {ref.broker_name: ref.addr for ref in refs})

    async def drain(ref: QueueRef) -> None:
        nonlocal received, last_progress
        mq = MessageQueue(topic, ref.broker_name, ref.queue_id)
        committed = await admin.consumer_offset(ref.addr, group, topic, ref.queue_id)
        member.offsets[mq] = (
            committed if committed is not None else await admin.min_offset(ref.addr, topic, ref.queue_id)
        )
        while not done.is_set():
            offset = member.offsets[mq]
            header = PullMessageRequestHeader(
                group,
                topic,
                ref.queue_id,
                offset,
                32,
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
            if response.code == ResponseCode.SUCCESS:
                received += count_records(response.body)
                last_progress = time.perf_counter()
                if count is not None and received >= count:
                    done.set()
            elif response.code == ResponseCode.PULL_NOT_FOUND:
                if time.perf_counter() - last_progress > idle_s:
                    done.set()
                await asyncio.sleep(0.01)
            member.advance(mq, offset, reply.next_begin_offset)

    started = time.perf_counter()
    async with member:  # on exit: commits where each queue stopped, then leaves the group
        await asyncio.gather(*(drain(ref) for ref in refs))
    seconds = max(last_progress - started, 1e-9)
    return result("consume", received, 0, seconds, rts)  # an unexpected answer raises instead


def result(kind: str, messages: int, failures: int, seconds: float, rts: list[float]) -> BenchResult:
    return BenchResult(
        kind=kind,
        messages=messages,
        failures=failures,
        seconds=round(seconds, 3),
        tps=round(messages / seconds, 1) if seconds else 0.0,
        avg_rt_ms=round(1000 * sum(rts) / len(rts), 3) if rts else 0.0,
        max_rt_ms=round(1000 * max(rts), 3) if rts else 0.0,
    )
