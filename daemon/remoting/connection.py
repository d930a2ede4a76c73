"""One remoting connection, usable from both ends.

RocketMQ multiplexes both directions over one TCP connection: a client sends requests to a broker,
and the broker sends requests (callbacks such as NOTIFY_CONSUMER_IDS_CHANGED) back over the same
connection. So a single `Connection` class decodes frames, hands requests to a `RequestDispatcher`,
and matches responses to its own outstanding requests by opaque. Servers and clients only differ in
who opens the connection.

It is an `asyncio.Protocol` rather than a stream pair: one `data_received` may carry many pipelined
frames, and decoding them in a tight loop without per-frame awaits is what makes lookups cheap. The
replies to one read go out in one write; on a server, those of all the reads of one loop round wait
for the end of the round (`ReplyBatch`), so a client with one request per connection is woken once.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import itertools
import logging
import typing
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Protocol

from daemon.remoting.codes import FLAG_ONEWAY, FLAG_RESPONSE, ResponseCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.errors import (
    HeaderTooLongError,
    RemotingCommandError,
    RemotingConnectError,
    RemotingProtocolError,
    RemotingTimeoutError,
)
from daemon.remoting.frame import MAX_FRAME_LENGTH, decode_frame, encode_command
from daemon.remoting.limits import BufferBudget, WarningGate

#: How early a loop's timer may fire by its own clock (uvloop: a millisecond).
_TIMER_GRAIN: Final = 0.001
#: Bytes of replies one read may make before the rest of its requests wait: a peer that pipelined a
#: thousand VIEW_MESSAGE_BY_ID of a 4 MiB message in one write (130 KiB) had all their replies made and
#: held at once (4 GiB). Past it the requests left wait in the buffer until the replies are written out.
MAX_REPLY_BYTES_PER_READ: Final = 4 * 1024 * 1024
#: Requests of one connection whose answers come later (a long-polling pull held, an async send's or a
#: task's answer): past it the rest of its requests wait in its buffer until one is answered. A peer
#: that pipelined long-polling pulls and read nothing had every one held, without bound; a consumer
#: holds one pull per queue it owns on the broker.
MAX_AWAITING_REPLIES: Final = 16384
#: Bytes of replies a connection's peer may leave unread (those answered later, once its requests stopped
#: being read): past it the connection is dropped, its replies with it. Replies made while the requests are
#: read stop at the transport's high-water mark; answers that come later were appended without bound.
MAX_UNREAD_REPLY_BYTES: Final = 64 * 1024 * 1024

log = logging.getLogger(__name__)
_unread_warnings = WarningGate(log)

#: Opaques are unique per process, like Java's static AtomicInteger in RemotingCommand.
_opaques = itertools.count(1)


def next_opaque() -> int:
    """Allocate a request id (wraps within Java's int range)."""
    return next(_opaques) & 0x7FFFFFFF


class Processor(Protocol):
    """Handles one request code. May be a coroutine function or a plain function.

    Return the response (built with `request.make_response`) or None to send nothing. Raise
    `RemotingCommandError(code, remark)` to answer with an error code; any other exception is
    answered as SYSTEM_ERROR and logged. Nothing is ever sent for one-way requests.
    """

    def __call__(
        self, conn: Connection, request: RemotingCommand, /
    ) -> Awaitable[RemotingCommand | None] | RemotingCommand | None: ...


def peer_name(transport: asyncio.BaseTransport) -> str:
    """`host:port` (`[v6]:port`) of the other end, for logs; "?" when the transport has none."""
    peer = transport.get_extra_info("peername")
    if isinstance(peer, tuple) and len(peer) >= 2:
        host = peer[0]
        return f"[{host}]:{peer[1]}" if ":" in host else f"{host}:{peer[1]}"
    return "?"


def peer_address(transport: asyncio.BaseTransport) -> tuple[str, int]:
    """(ip, port) of the other end, an IPv4-mapped IPv6 address folded to its IPv4 form (ali-ons reads
    born hosts as v4 only; ACL whitelists name v4); ("", 0) when it has no IP peer (a Unix socket, or
    one reset before `getpeername` answered)."""
    return ip_port(transport.get_extra_info("peername"))


def ip_port(name: object) -> tuple[str, int]:
    """A socket name as (ip, port), an IPv4-mapped IPv6 address folded to IPv4; ("", 0) when it has no IP."""
    if isinstance(name, tuple) and len(name) >= 2:
        host = str(name[0])
        if host.startswith("::ffff:") and "." in host:
            host = host[7:]
        return host, int(name[1])
    return "", 0


def error_response(request: RemotingCommand, exc: BaseException) -> RemotingCommand:
    """The response a failed processor produces (RemotingCommandError keeps its code and remark)."""
    if isinstance(exc, RemotingCommandError):
        return request.make_response(exc.code, exc.remark)
    return request.make_response(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")


class RequestDispatcher:
    """Routes incoming requests to processors by code (Java's processor table)."""

    def __init__(
        self, processors: Mapping[int, Processor] | None = None, default: Processor | None = None
    ) -> None:
        self.processors: dict[int, Processor] = dict(processors or {})
        self.default = default
        #: Runs before every processor with (connection, request); raising RemotingCommandError answers
        #: that code instead (the ACL validator: Java's RPC hook `doBeforeRequest`).
        self.guard: Callable[[Connection, RemotingCommand], None] | None = None
        #: Request codes whose JSON body is parsed on the loop (by the guard or the processor), with the
        #: longest body each may carry: a longer one is refused before either reads it (`limit_bodies`).
        self.body_limits: dict[int, int] = {}
        #: The smallest of `body_limits`: a body no longer than it (every send's) costs one comparison.
        self._body_floor = MAX_FRAME_LENGTH
        self._body_refusals = WarningGate(log)
        #: What this server's connections refused, for metrics: requests whose body passed `body_limits`;
        #: connections closed on a header over its cap, on any other bad frame, and for leaving more than
        #: MAX_UNREAD_REPLY_BYTES of replies unread (a client's own dispatcher counts nothing).
        self.bodies_refused = 0
        self.headers_refused = 0
        self.bad_frames = 0
        self.unread_dropped = 0

    def limit_bodies(self, limits: Mapping[int, int]) -> None:
        """Refuse (SYSTEM_ERROR, as 4.9.8 answers a body it cannot read) a request of one of these codes
        whose body is longer than its limit, before the guard or the processor parses it: a 16 MiB
        HEART_BEAT of invented subscriptions held an unauthenticated peer's loop for seconds, parsed
        whole before the heartbeat's own caps refused it."""
        self.body_limits.update(limits)
        self._body_floor = min(self.body_limits.values(), default=MAX_FRAME_LENGTH)

    def register(self, code: int, processor: Processor) -> None:
        self.processors[code] = processor

    def dispatch(self, conn: Connection, request: RemotingCommand) -> None:
        processor = self.processors.get(request.code, self.default)
        if processor is None:
            log.debug("request code %d from %s is not supported", request.code, conn.peer)
            conn.reply(
                request,
                request.make_response(
                    ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {request.code} not supported"
                ),
            )
            return
        if len(request.body) > self._body_floor and self._body_too_long(conn, request):
            return
        try:
            if self.guard is not None:
                self.guard(conn, request)
            result = processor(conn, request)
        except Exception as exc:
            self._failed(conn, request, exc)
            return
        # (a response or nothing is the common case: no isawaitable() protocol walk for it)
        if result is None or type(result) is RemotingCommand:
            conn.reply(request, result)
        elif isinstance(result, asyncio.Future):  # answered from its done callback: no task to run
            conn.track(result)
            result.add_done_callback(functools.partial(self._answered, conn, request))
        elif not inspect.isawaitable(result):
            conn.reply(request, result)
        else:
            conn.track(asyncio.ensure_future(self._finish(conn, request, result)))

    def _body_too_long(self, conn: Connection, request: RemotingCommand) -> bool:
        limit = self.body_limits.get(request.code)
        if limit is None or len(request.body) <= limit:
            return False
        remark = (
            f"request code {request.code}: its body of {len(request.body)} bytes is longer than the "
            f"{limit} bytes this request may carry"
        )
        self.bodies_refused += 1
        self._body_refusals.warning("refused a request from %s: %s", conn.peer, remark)
        conn.reply(request, request.make_response(ResponseCode.SYSTEM_ERROR, remark))
        return True

    def _answered(
        self, conn: Connection, request: RemotingCommand, done: asyncio.Future[RemotingCommand | None]
    ) -> None:
        if done.cancelled():
            return
        exc = done.exception()
        if exc is None:
            conn.reply(request, done.result())
        elif isinstance(exc, Exception):
            self._failed(conn, request, exc)

    async def _finish(
        self, conn: Connection, request: RemotingCommand, pending: Awaitable[RemotingCommand | None]
    ) -> None:
        try:
            response = await pending
        except Exception as exc:
            self._failed(conn, request, exc)
        else:
            conn.reply(request, response)

    @staticmethod
    def _failed(conn: Connection, request: RemotingCommand, exc: Exception) -> None:
        if not isinstance(exc, RemotingCommandError):
            log.exception("processor for request code %d from %s failed", request.code, conn.peer)
        conn.reply(request, error_response(request, exc))


class ReplyBatch:
    """Holds the replies a server makes while its loop handles one round of reads, and writes them after it.

    A client that does not pipeline (`mqctl bench`'s 16 connections, the C++ client's threads) has one
    request in flight per connection, so every read holds one request. Writing each reply at once woke
    the client for each one: it took the reply, sent the next request and slept again before the next
    reply came, and each wake-up is an inter-processor interrupt the writer pays in its send (perf shows
    it). Written together after the round (the loop's ready queue runs before it polls again), the replies
    wake the client once. A reply waits at most for the other requests of its round (the replies of one
    connection keep their order).
    """

    __slots__ = ("_waiting", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._waiting: list[Connection] = []

    def hold(self, conn: Connection) -> None:
        if not self._waiting:
            self.loop.call_soon(self._release)
        self._waiting.append(conn)

    def _release(self) -> None:
        waiting, self._waiting = self._waiting, []
        for conn in waiting:
            try:
                conn.release()
            except Exception:  # one broken transport must not strand the others' replies
                log.exception("closing connection from %s: writing its replies failed", conn.peer)
                conn.close()  # (release() let go of them before it wrote)


class Connection(asyncio.Protocol):
    """Frames in, frames out, over one transport (see module docstring)."""

    def __init__(
        self,
        dispatcher: RequestDispatcher,
        *,
        max_frame_length: int = MAX_FRAME_LENGTH,
        max_header_length: int = MAX_FRAME_LENGTH,
        on_close: Callable[[Connection], None] | None = None,
        budget: BufferBudget | None = None,
        batch: ReplyBatch | None = None,
        requester: bool = False,
    ) -> None:
        self.dispatcher = dispatcher
        #: The end that connected (a client): a peer that sends no RocketMQ frame fails our requests with a
        #: RemotingProtocolError instead of being logged as a misbehaving client.
        self.requester = requester
        self._broken: RemotingProtocolError | None = None
        self.max_frame_length = max_frame_length
        #: A server's cap on its peers' headers (MAX_REQUEST_HEADER); a client reads its servers' whole.
        self.max_header_length = max_header_length
        self.on_close = on_close
        #: A server's cap on incomplete frames (clients trust their servers and have none).
        self.budget = budget
        self.peer = "?"
        #: The other end's (ip, port), read once: every send stores it and every ACL check matches it.
        self.address: tuple[str, int] = ("", 0)
        self.last_active = 0.0
        #: Free-form per-connection state for applications (client id, language, version, ...).
        self.attributes: dict[str, Any] = {}
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        #: Bytes of `_buffer` charged to `budget`: the incomplete frame left after each read.
        self._held = 0
        #: While a read is being dispatched, replies made synchronously wait here for one write.
        self._corked: list[bytes] | None = None
        #: Bytes in `_corked` (see MAX_REPLY_BYTES_PER_READ).
        self._corked_bytes = 0
        #: The transport's write buffer is over its high-water mark: requests wait unread.
        self._writing_paused = False
        #: A server's batch, which writes `_outbox` after the loop's round of reads (see ReplyBatch).
        self.batch = batch
        self._outbox: list[bytes] = []
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        #: requests sent by `request`: opaque -> (what to call with the answer or the failure, its deadline
        #: on the loop's clock, its timeout, its code); expired by one timer for them all (`_sweep`)
        self._callbacks: dict[
            int, tuple[Callable[[RemotingCommand | Exception], None], float, float, int]
        ] = {}
        #: the timer that expires `_callbacks` due by its time (`_sweep_at`), while any may be waiting
        self._sweep: asyncio.TimerHandle | None = None
        self._sweep_at = 0.0
        self._tasks: set[asyncio.Future[Any]] = set()
        #: Reads a frame its owner knows the layout of, before the generic decode: ``(self, buffer, position)``
        #: -> the bytes it took and handled (its answer written), or 0 for the generic decode and dispatch
        #: (a frame not whole yet, or not in that layout). A DLedger follower's binary pushes, whose header
        #: the leader writes from one template per term, are read without a JSON decode or a command.
        self.frame_reader: Callable[[Connection, bytearray, int], int] | None = None
        #: Requests answered later: tasks and futures (`track`) and held requests (`holding`).
        self.awaiting = 0
        self._loop = asyncio.get_running_loop()
        self._closed = self._loop.create_future()

    # ------------------------------------------------------------------ asyncio.Protocol callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = typing.cast(asyncio.Transport, transport)  # uvloop's are not subclasses
        self.peer = peer_name(transport)
        self.address = peer_address(transport)
        self.last_active = self._loop.time()

    def local_ip(self) -> str:
        """The address of ours this connection reached (folded as `address`; "" unknown): read on
        demand, for the rare request that asks whether its peer is this machine."""
        transport = self._transport
        return ip_port(transport.get_extra_info("sockname"))[0] if transport is not None else ""

    def data_received(self, data: bytes) -> None:
        if self.is_closed:
            return  # closing after a bad frame: the rest of the stream is meaningless
        buf = self._buffer
        # a frame must arrive whole within the idle timeout: the bytes of one already begun are no
        # activity (below), or a peer sending its header a byte at a time held the connection for ever
        begun = bool(buf)
        buf += data
        pos = 0
        # A client that pipelines (ali-ons: one connection, many sends in flight) delivers a dozen
        # requests in one read; their synchronous replies go out in one write instead of a dozen.
        corked: list[bytes] = []
        self._corked = corked
        self._corked_bytes = 0
        held_back = False
        reader = self.frame_reader
        try:
            while True:
                if (
                    self._writing_paused
                    or self._corked_bytes >= MAX_REPLY_BYTES_PER_READ
                    or self.awaiting >= MAX_AWAITING_REPLIES
                ):
                    held_back = True  # the rest waits until the replies are out (`_read_on`)
                    break
                if reader is not None:
                    taken = reader(self, buf, pos)
                    if taken > 0:
                        pos += taken
                        continue
                decoded = decode_frame(buf, pos, self.max_frame_length, self.max_header_length)
                if decoded is None:
                    break
                cmd, consumed = decoded
                pos += consumed
                if cmd.is_response:
                    self._on_response(cmd)
                else:
                    self.dispatcher.dispatch(self, cmd)
        except RemotingProtocolError as exc:
            if self.requester:  # our requests fail with it: the caller reports it, not a log line
                log.debug("closing connection to %s: bad frame: %s", self.peer, exc)
                self._broken = RemotingProtocolError(
                    f"{self.peer} does not speak the RocketMQ remoting protocol ({exc}; it sent {bytes(buf[:24])!r})"
                )
                for fut in self._pending.values():
                    if not fut.done():
                        fut.set_exception(self._broken)
                self._fail_callbacks(self._broken)
            else:
                if isinstance(exc, HeaderTooLongError):
                    self.dispatcher.headers_refused += 1
                else:
                    self.dispatcher.bad_frames += 1
                log.warning("closing connection from %s: bad frame: %s", self.peer, exc)
            buf.clear()
            pos = 0
            self._outbox += corked  # the answers to the good frames before it: close() writes them first
            corked.clear()
            self.close()
        finally:
            self._uncork(corked)
        if pos:
            del buf[:pos]
        if pos or not begun:
            self.last_active = self._loop.time()
        if self.budget is not None and len(buf) != self._held:
            self._charge(self.budget, len(buf))
        if held_back and buf and not self._writing_paused and self.awaiting < MAX_AWAITING_REPLIES:
            self._loop.call_soon(self._read_on)  # (after a batch's replies went out)

    def _read_on(self) -> None:
        """Dispatch the requests a read held back, once their turn came (see MAX_REPLY_BYTES_PER_READ)."""
        if self._buffer and not self._writing_paused and not self.is_closed:
            self.data_received(b"")

    def _charge(self, budget: BufferBudget, wanted: int) -> None:
        """Account for the incomplete frame this connection now holds; over a cap, drop it and close."""
        if budget.charge(self.peer, self._held, wanted):
            self._held = wanted
        else:
            self._held = 0
            self._buffer.clear()
            self.close()

    def _uncork(self, corked: list[bytes]) -> None:
        self._corked = None
        if not corked:
            return
        if self.batch is not None and not self._outbox:
            self.batch.hold(self)
            self._outbox = corked  # (the caller's list, which it drops)
        else:
            self._write(corked[0] if len(corked) == 1 else b"".join(corked))
            corked.clear()

    def release(self) -> None:
        """Write what the batch held (a connection gone meanwhile drops it, as `send` does)."""
        outbox, self._outbox = self._outbox, []
        if outbox and self._transport is not None and not self._transport.is_closing():
            self._transport.write(outbox[0] if len(outbox) == 1 else b"".join(outbox))
            if self._writing_paused:
                self._check_unread(self._transport)

    def _check_unread(self, transport: asyncio.Transport) -> None:
        """Drop the connection when its peer left more than MAX_UNREAD_REPLY_BYTES of replies unread (an
        abort: a close would keep them until written, and this peer reads nothing)."""
        unread = transport.get_write_buffer_size()
        if unread > MAX_UNREAD_REPLY_BYTES:
            self.dispatcher.unread_dropped += 1
            _unread_warnings.warning(
                "closing connection from %s: it left %d bytes of replies unread (at most %d)",
                self.peer,
                unread,
                MAX_UNREAD_REPLY_BYTES,
            )
            transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        if self.budget is not None and self._held:
            self._charge(self.budget, 0)
        error = self._broken or RemotingConnectError(self.peer, "connection closed")
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(error)
        self._pending.clear()
        self._fail_callbacks(error)
        if not self._closed.done():
            self._closed.set_result(None)
        if self.on_close is not None:
            self.on_close(self)

    def pause_writing(self) -> None:
        # The peer is not reading its responses: stop reading its requests until it catches up (and
        # dispatching those already read: `data_received`)
        self._writing_paused = True
        if self._transport is not None:
            self._transport.pause_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False
        if self._transport is not None:
            self._transport.resume_reading()
            if self._buffer:
                self._loop.call_soon(self._read_on)

    # ------------------------------------------------------------------ sending

    @property
    def is_closed(self) -> bool:
        return self._transport is None or self._transport.is_closing()

    def send(self, cmd: RemotingCommand) -> None:
        """Write one command; silently dropped if the connection is already gone."""
        self._write(encode_command(cmd))

    def _write(self, frame: bytes) -> None:
        if self._corked is not None:
            self._corked.append(frame)
            self._corked_bytes += len(frame)
        elif self._outbox:  # after what the batch holds, in order
            self._outbox.append(frame)
        elif self._transport is not None and not self._transport.is_closing():
            self._transport.write(frame)
            if self._writing_paused:  # (a reply that came later, to a peer not reading: counted)
                self._check_unread(self._transport)

    def reply(self, request: RemotingCommand, response: RemotingCommand | None) -> None:
        """Send `response` to `request` unless the request was one-way or there is nothing to send."""
        if response is None or request.flag & FLAG_ONEWAY:
            return
        response.opaque = request.opaque
        response.flag |= FLAG_RESPONSE
        response.serialize_type = request.serialize_type
        try:
            frame = encode_command(response)
        except RemotingProtocolError as exc:  # e.g. a body over the frame limit: tell the requester
            log.error("cannot send response to request code %d from %s: %s", request.code, self.peer, exc)
            frame = encode_command(error_response(request, exc))
        self._write(frame)

    def reply_frame(self, request: RemotingCommand, frame: bytes) -> None:
        """:meth:`reply` with the response already encoded (its opaque the request's): a processor whose
        answer is a fixed layout writes its numbers in and returns None."""
        if not request.flag & FLAG_ONEWAY:
            self._write(frame)

    async def invoke(self, request: RemotingCommand, timeout: float) -> RemotingCommand:
        """Send a request over this connection and wait for the response with the same opaque."""
        if self.is_closed:
            raise self._broken or RemotingConnectError(self.peer, "connection closed")
        request.opaque = next_opaque()
        request.flag &= ~(FLAG_RESPONSE | FLAG_ONEWAY)
        fut: asyncio.Future[RemotingCommand] = self._loop.create_future()
        self._pending[request.opaque] = fut
        timer = self._loop.call_later(timeout, self._expire, request.opaque)
        try:
            self.send(request)
            return await fut
        except TimeoutError:
            raise RemotingTimeoutError(self.peer, timeout, request.code) from None
        finally:
            timer.cancel()
            self._pending.pop(request.opaque, None)

    def request(
        self,
        request: RemotingCommand,
        timeout: float,
        on_answer: Callable[[RemotingCommand | Exception], None],
    ) -> None:
        """`invoke` without a task: the request is written now and `on_answer` is called with the response
        from the read that brings it (or with the RemotingError that ends the wait: a timeout, the
        connection's loss), so that a caller on a latency-bound path (a DLedger push and its quorum) is
        not woken one loop round later, twice."""
        request.opaque = self.expect(request.code, timeout, on_answer)
        request.flag &= ~(FLAG_RESPONSE | FLAG_ONEWAY)
        self.send(request)

    def expect(
        self, code: int, timeout: float, on_answer: Callable[[RemotingCommand | Exception], None]
    ) -> int:
        """The first half of :meth:`request`, for a caller that encodes its request's frame itself: the
        opaque to write in it, whose response (or the RemotingError that ends the wait) goes to
        `on_answer`. The frame goes at once through :meth:`send_frame`."""
        if self.is_closed:
            raise self._broken or RemotingConnectError(self.peer, "connection closed")
        opaque = next_opaque()
        deadline = self._loop.time() + timeout
        self._callbacks[opaque] = (on_answer, deadline, timeout, code)
        # one timer for every waiting request, not one each (a DLedger leader makes one per push and
        # follower, and nearly all are answered long before it): set for the earliest deadline
        if self._sweep is None or deadline < self._sweep_at:
            self._expire_at(deadline)
        return opaque

    def expecting(self, opaque: int) -> Callable[[RemotingCommand | Exception], None] | None:
        """What :meth:`expect` hands the answer to `opaque` to, while it is waited for (else None): a frame
        reader that reads such an answer itself finds its request's caller so, then calls :meth:`answered`."""
        waiting = self._callbacks.get(opaque)
        return waiting[0] if waiting is not None else None

    def answered(self, opaque: int) -> None:
        """The answer to `opaque` was read and handed on by a frame reader: no longer waited for."""
        self._callbacks.pop(opaque, None)

    def send_frame(self, frame: bytes) -> None:
        """Write one frame already encoded (:meth:`expect`'s request); dropped if the connection is gone."""
        self._write(frame)

    def send_frames(self, head: bytes, body: bytes) -> None:
        """:meth:`send_frame` of the frame ``head + body`` without joining them: one write of two buffers
        (a DLedger leader's push: its body, the entries, is most of the frame and is not copied into it)."""
        if self._corked is not None or self._outbox:
            self._write(head)  # (after what waits to be written, in order: joined with it)
            self._write(body)
        elif self._transport is not None and not self._transport.is_closing():
            self._transport.writelines((head, body))
            if self._writing_paused:
                self._check_unread(self._transport)

    def _expire_at(self, when: float) -> None:
        if self._sweep is not None:
            self._sweep.cancel()
        self._sweep = self._loop.call_at(when, self._expire_callbacks)
        self._sweep_at = when

    def _expire_callbacks(self) -> None:
        """The requests whose time is up answered with a RemotingTimeoutError; the timer set again for the
        earliest of those still waiting."""
        self._sweep = None
        # (uvloop's timers have a millisecond's grain and fire up to that early by its clock: a deadline
        # within it counts as due, or the timer would be set again for it at once, round after round)
        now = self._loop.time() + _TIMER_GRAIN
        due = [opaque for opaque, waiting in self._callbacks.items() if waiting[1] <= now]
        for opaque in due:
            on_answer, _, timeout, code = self._callbacks.pop(opaque)
            try:
                on_answer(RemotingTimeoutError(self.peer, timeout, code))
            except Exception:  # one failing caller must not strand the others
                log.exception("answering a request to %s failed", self.peer)
        if self._callbacks and self._sweep is None:
            self._expire_at(min(waiting[1] for waiting in self._callbacks.values()))

    def _fail_callbacks(self, error: Exception) -> None:
        waiting, self._callbacks = self._callbacks, {}
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        for on_answer, _, _, _ in waiting.values():
            try:
                on_answer(error)
            except Exception:  # one failing caller must not strand the others
                log.exception("answering a request to %s failed", self.peer)

    def invoke_oneway(self, request: RemotingCommand) -> None:
        """Send a request that the peer must not answer."""
        if self.is_closed:
            raise self._broken or RemotingConnectError(self.peer, "connection closed")
        request.opaque = next_opaque()
        request.flag = (request.flag | FLAG_ONEWAY) & ~FLAG_RESPONSE
        self.send(request)

    def _expire(self, opaque: int) -> None:
        fut = self._pending.get(opaque)
        if fut is not None and not fut.done():
            fut.set_exception(TimeoutError())

    def _on_response(self, cmd: RemotingCommand) -> None:
        if self._callbacks:
            waiting = self._callbacks.pop(cmd.opaque, None)
            if waiting is not None:  # (its deadline stays with the timer: checked when that fires)
                waiting[0](cmd)
                return
        fut = self._pending.get(cmd.opaque)
        if fut is None or fut.done():
            log.debug("dropping response with unknown opaque %d from %s", cmd.opaque, self.peer)
            return
        fut.set_result(cmd)

    # ------------------------------------------------------------------ lifecycle

    def track(self, task: asyncio.Future[Any]) -> None:
        """Keep a reference to an in-flight processor task (or answer's future) until it finishes; it
        counts among the requests awaiting their answers (MAX_AWAITING_REPLIES)."""
        self._tasks.add(task)
        self.awaiting += 1
        task.add_done_callback(self._tracked_done)

    def _tracked_done(self, task: asyncio.Future[Any]) -> None:
        self._tasks.discard(task)
        self.answered_later()

    def holding(self) -> None:
        """A request of this connection is held to be answered later without a task (a long-polling
        pull): it counts as `track`'s do until `answered_later`."""
        self.awaiting += 1

    def answered_later(self) -> None:
        """A request `holding` counted (or a tracked one) is answered: under MAX_AWAITING_REPLIES again,
        the requests its buffer held back are read on."""
        self.awaiting -= 1
        if self.awaiting == MAX_AWAITING_REPLIES - 1 and self._buffer:
            self._loop.call_soon(self._read_on)

    def close(self) -> None:
        """Close after writing what a batch holds (a transport sends what it buffered before it closes),
        the write side shut first where the transport can (plain TCP): bytes of the peer's that arrived
        unread (a request in the turn of an idle close, the rest after a bad frame) make the kernel answer
        a close with a reset alone, and the peer's read failed with ECONNRESET; after a FIN it reads the
        end of the stream."""
        self.release()
        transport = self._transport
        if transport is not None and not transport.is_closing():
            if transport.can_write_eof():
                with contextlib.suppress(OSError):  # the peer is gone already: the close alone is left
                    transport.write_eof()
            transport.close()

    async def wait_closed(self) -> None:
        await asyncio.shield(self._closed)

    @property
    def lost(self) -> asyncio.Future[None]:
        """Done once the connection is gone: what a request waiting for something else (a pop for messages)
        waits on beside it, so it ends with its connection. Wait on it, never cancel it."""
        return self._closed

    async def drain_tasks(self) -> None:
        """Wait for in-flight processor tasks (used for graceful shutdown)."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


__all__ = [
    "Connection",
    "Processor",
    "ReplyBatch",
    "RequestDispatcher",
    "error_response",
    "next_opaque",
    "peer_address",
    "peer_name",
]
