"""A time limit and a count limit on gRPC requests still arriving.

grpc reads a call's request whole before it hands it to a unary handler, and waits for it without a time
limit: a peer that sent a call's headers and a few bytes of its message held the call (its stream, grpc's
call state and a task on the loop) for as long as the connection lived, a thousand of them a connection,
as many connections as `grpcMaxConnections` lets in. So the front's calls with one request (all but
Telemetry) are served as request-streaming ones, whose handler starts with the headers: it waits for the
one message at most REQUEST_ARRIVAL_S, else the call ends DEADLINE_EXCEEDED (its stream is reset), and a
host has ARRIVING_PER_HOST calls waiting for their request at most, all hosts ARRIVING: a further call
is ended RESOURCE_EXHAUSTED at once. The wire is the same: a unary call is a stream of one message.
"""

from __future__ import annotations

import asyncio
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


class Arrivals:
    """The front's calls waiting for their request, by host; wraps the service's method handlers."""

    def __init__(self) -> None:
        self.hosts: Counter[str] = Counter()
        self.waiting = 0
        #: Calls ended because their request came too late, and because too many were waiting.
        self.expired = 0
        self.refused = 0
        self._warnings = WarningGate(log)

    def handler(self, inner: grpc.GenericRpcHandler) -> grpc.GenericRpcHandler:
        """`inner`'s methods, those with one request served as request-streaming ones (see module)."""
        return _Bounded(inner, self)

    async def request(self, context: Any) -> Any:
        """The call's one request, once it has arrived whole (the call ends if it does not in time)."""
        host = budget_host(parse_peer(context.peer())[0])
        if self.hosts[host] >= ARRIVING_PER_HOST or self.waiting >= ARRIVING:
            self.refused += 1
            self._warnings.warning(
                "gRPC front: %s has %d calls waiting for their requests (all hosts %d): one more is refused",
                host,
                self.hosts[host],
                self.waiting,
            )
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED, "too many calls waiting for their requests"
            )
        self.hosts[host] += 1
        self.waiting += 1
        expired = False
        try:
            # (a timer, not a task and a wait: this is every call's path, and cancelling a read grpc has
            # under way is what a client's cancellation does too)
            async with asyncio.timeout(REQUEST_ARRIVAL_S):
                request = await context.read()
        except TimeoutError:
            expired = True
        finally:
            self.waiting -= 1
            left = self.hosts[host] - 1
            if left:
                self.hosts[host] = left
            else:
                del self.hosts[host]
        if expired:
            self.expired += 1
            self._warnings.warning(
                "gRPC front: a call from %s sent no whole request within %g s: ended", host, REQUEST_ARRIVAL_S
            )
            await context.abort(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"the request did not arrive within {REQUEST_ARRIVAL_S:g} s",
            )
        if request is grpc.aio.EOF:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the call carried no request")
        return request


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
