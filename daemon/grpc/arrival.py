"""A time limit and a count limit on gRPC requests still arriving.

grpc reads a call's request whole before it hands it to a unary handler, and waits for it without a time
limit: a peer that sent a call's headers and a few bytes of its message held the call (its stream, grpc's
call state and a task on the loop) for as long as the connection lived, a thousand of them a connection,
as many connections as `grpcMaxConnections` lets in. So the front's calls with one request (all but
Telemetry) are served as request-streaming ones, whose handler starts with the headers: it waits for the
one message REQUEST_ARRIVAL_S (and up to a second more), else the call ends DEADLINE_EXCEEDED (its stream is
reset), and a host has ARRIVING_PER_HOST calls waiting for their request at most, all hosts ARRIVING: a
further call is ended RESOURCE_EXHAUSTED at once. The wire is the same: a unary call is a stream of one
message.

A call waiting for its message buffers what has come of it, and grpc opens the stream's flow-control
window to the whole message its 5-byte prefix announces (up to the largest request the front takes, some
4 MiB): a host's thousand calls each announcing 4 MiB and sending all but a byte held gigabytes for their
10 s. So a call still waiting at the second sweep after it began is *slow*: a host keeps SLOW_PER_HOST
slow calls at most and all hosts SLOW, the heaviest host's oldest ended first (RESOURCE_EXHAUSTED). A
real client's request arrives with its headers, or within a second unless its link is saturated.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from daemon.grpc.clients import parse_peer
from daemon.protect import budget_host
from daemon.remoting.limits import WarningGate

log = logging.getLogger(__name__)

#: Seconds a call's request may take to arrive whole after its headers (the remoting listener's TLS
#: handshake and the front's HTTP/2 preface have as long).
REQUEST_ARRIVAL_S = 10.0
#: Calls one host may have waiting for their request at once: a connection's stream cap and then some, so
#: a client's burst on its one connection is never refused.
ARRIVING_PER_HOST = 1024
#: Calls all hosts together may have waiting for their request.
ARRIVING = 8192
#: Calls one host may have waiting for their request past a sweep (see the module), and all hosts together.
SLOW_PER_HOST = 32
SLOW = 256


class _Waiting:
    """A call waiting for its request: the sweep it started at, and its host once it is counted."""

    __slots__ = ("context", "crowded", "expired", "host", "sweep")

    def __init__(self, context: Any, sweep: int) -> None:
        self.context = context
        self.sweep = sweep
        self.host = ""
        self.expired = False
        #: Ended as one slow call too many (see the module).
        self.crowded = False


class Arrivals:
    """The front's calls waiting for their request, by host; wraps the service's method handlers.

    Every call passes here, so its path is two dict operations: no timer a call (one sweep a second
    for them all; the calls waiting are in the order of their deadlines) and no host a call until
    ARRIVING_PER_HOST calls wait at once, which no host can exceed with fewer; from then until none
    waits, each call's host is counted."""

    def __init__(self) -> None:
        #: The calls waiting, by their task, oldest first.
        self.calls: dict[asyncio.Task[Any], _Waiting] = {}
        #: Calls waiting by host while they are counted (see the class), else empty.
        self.hosts: Counter[str] = Counter()
        self._counting = False
        #: Calls ended because their request came too late, because too many were waiting, and because
        #: too many were slow.
        self.expired = 0
        self.refused = 0
        self.crowded = 0
        self._sweeps = 0
        self._sweeper: asyncio.TimerHandle | None = None
        self._warnings = WarningGate(log)

    @property
    def waiting(self) -> int:
        return len(self.calls)

    def handler(self, inner: grpc.GenericRpcHandler) -> grpc.GenericRpcHandler:
        """`inner`'s methods, those with one request served as request-streaming ones (see module)."""
        return _Bounded(inner, self)

    async def request(self, context: Any) -> Any:
        """The call's one request, once it has arrived whole (the call ends if it does not in time)."""
        calls = self.calls
        host = ""
        if self._counting or len(calls) >= ARRIVING_PER_HOST:
            host = self._admit(context)
            if not host:
                await context.abort(
                    grpc.StatusCode.RESOURCE_EXHAUSTED, "too many calls waiting for their requests"
                )
            self.hosts[host] += 1
        task = asyncio.current_task()
        assert task is not None
        waiting = calls[task] = _Waiting(context, self._sweeps)
        waiting.host = host
        if self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().call_later(1.0, self._sweep)
        try:
            request = await context.read()
        except asyncio.CancelledError:
            if not (waiting.expired or waiting.crowded):
                raise  # the client's cancellation, or the server's stop
            task.uncancel()
        finally:
            del calls[task]
            if waiting.host:
                self._uncount(waiting.host)
        if waiting.crowded:
            self.crowded += 1
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"too many calls from this host whose requests are still arriving ({SLOW_PER_HOST} at most)",
            )
        if waiting.expired:
            self.expired += 1
            await context.abort(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"the request did not arrive within {REQUEST_ARRIVAL_S:g} s",
            )
        if request is grpc.aio.EOF:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the call carried no request")
        return request

    def _admit(self, context: Any) -> str:
        """The host of a call that may wait (its calls are counted from now), or "" if it may not."""
        if not self._counting:
            self._counting = True
            for call in self.calls.values():
                call.host = _host(call.context)
                self.hosts[call.host] += 1
        host = _host(context)
        if self.hosts[host] >= ARRIVING_PER_HOST or len(self.calls) >= ARRIVING:
            self.refused += 1
            self._warnings.warning(
                "gRPC front: %s has %d calls waiting for their requests (all hosts %d): one more is refused",
                host,
                self.hosts[host],
                len(self.calls),
            )
            return ""
        return host

    def _uncount(self, host: str) -> None:
        left = self.hosts[host] - 1
        if left:
            self.hosts[host] = left
        else:
            del self.hosts[host]
        if not self.calls:
            self._counting = False

    def _sweep(self) -> None:
        """Ends the calls whose request has had REQUEST_ARRIVAL_S (up to a second more)."""
        self._sweeps += 1
        oldest = self._sweeps - int(REQUEST_ARRIVAL_S) - 1
        for task, call in self.calls.items():
            if call.sweep > oldest:
                break
            if not call.expired:
                call.expired = True
                task.cancel()
                self._warnings.warning(
                    "gRPC front: a call from %s sent no whole request within %g s: ended",
                    _host(call.context),
                    REQUEST_ARRIVAL_S,
                )
        self._end_slow()
        self._sweeper = asyncio.get_running_loop().call_later(1.0, self._sweep) if self.calls else None

    def _end_slow(self) -> None:
        """Ends the slow calls (see the module) past SLOW_PER_HOST of a host and past SLOW of all hosts,
        the oldest of the heaviest host first."""
        began = self._sweeps - 1  # a call that began before the last sweep has waited a second at least
        slow: dict[str, list[tuple[asyncio.Task[Any], _Waiting]]] = {}
        total = 0
        for task, call in self.calls.items():
            if call.sweep >= began:
                break
            if not (call.expired or call.crowded):
                slow.setdefault(call.host or _host(call.context), []).append((task, call))
                total += 1
        if total <= SLOW_PER_HOST:
            return  # (the common case: none, or too few to matter)
        ended: Counter[str] = Counter()
        for host, calls in slow.items():
            ended[host] = max(0, len(calls) - SLOW_PER_HOST)
        total -= sum(ended.values())
        heaviest = [(-min(len(calls), SLOW_PER_HOST), host) for host, calls in slow.items()]
        heapq.heapify(heaviest)
        while total > SLOW:  # the heaviest host gives up its oldest, one call at a time
            left, host = heapq.heappop(heaviest)
            ended[host] += 1
            total -= 1
            if left < -1:
                heapq.heappush(heaviest, (left + 1, host))
        for host, count in ended.items():
            for task, call in slow[host][:count]:
                call.crowded = True
                task.cancel()
        ended = +ended
        if ended:
            host, count = ended.most_common(1)[0]
            self._warnings.warning(
                "gRPC front: %d calls whose requests were still arriving after a second ended, %d of them "
                "%s's (%d such calls a host at most, %d in all)",
                sum(ended.values()),
                count,
                host,
                SLOW_PER_HOST,
                SLOW,
            )


def _host(context: Any) -> str:
    return budget_host(parse_peer(context.peer())[0]) or "?"


class _Bounded(grpc.GenericRpcHandler):
    def __init__(self, inner: grpc.GenericRpcHandler, arrivals: Arrivals) -> None:
        self._inner = inner
        self._arrivals = arrivals
        self._handlers: dict[str, grpc.RpcMethodHandler] = {}

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        method = handler_call_details.method  # type: ignore[attr-defined]
        handler = self._handlers.get(method)
        if handler is None:
            inner = self._inner.service(handler_call_details)
            if inner is None:
                return None  # UNIMPLEMENTED; a peer's invented names are not kept
            handler = self._handlers[method] = _bounded(inner, self._arrivals)
        return handler


def _bounded(handler: grpc.RpcMethodHandler, arrivals: Arrivals) -> grpc.RpcMethodHandler:
    """`handler` with its one request read under `arrivals`' limits (a streaming one as it is)."""
    if handler.request_streaming:
        return handler
    if handler.response_streaming:
        streaming: Callable[[Any, Any], Awaitable[None]] = handler.unary_stream

        async def respond_streaming(_requests: AsyncIterator[Any], context: Any) -> None:
            await streaming(await arrivals.request(context), context)  # it writes with context.write

        return grpc.stream_stream_rpc_method_handler(
            respond_streaming, handler.request_deserializer, handler.response_serializer
        )
    unary: Callable[[Any, Any], Awaitable[Any]] = handler.unary_unary

    async def respond(_requests: AsyncIterator[Any], context: Any) -> Any:
        return await unary(await arrivals.request(context), context)

    return grpc.stream_unary_rpc_method_handler(
        respond, handler.request_deserializer, handler.response_serializer
    )
