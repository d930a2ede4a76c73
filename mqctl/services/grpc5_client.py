"""The official RocketMQ 5.x Python client (the `grpc` extra) as mqctl drives it (`bench --grpc`), and the
tests do.

The client (5.1.x) sends its requests from a loop of its own, in its own thread, and handles a route reply
in a callback. It adds that callback to the reply's future after sending the request: when the reply came
first (a busy host, a broker in the same process), the future runs the callback at once in the caller's
thread: the application's at startup or a send or receive, the client's own scheduler thread at its route
refresh. The callback opens the client's Telemetry stream to an endpoint new to it, which grpc's asyncio API
can do only on the client's loop: in any other thread it fails and the route is not kept. The client then
has no route ("failed to fetch topic route" at its next send or receive) and sends no Settings (a
consumer's group is never joined), or keeps the old route after a failover (its receives go to a slave)
until a later refresh. :func:`guard_callbacks` runs those callbacks on the client's loop, as they run when
the reply comes later.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from mqctl.errors import UsageError

#: The client's methods whose futures' callbacks open its Telemetry stream (the route reply's
#: handling, and a failed Settings write's, which reopens it).
GUARDED = ("query_topic_route_async", "telemetry_write_async")
_GUARD = "_mqctl_callbacks_on_loop"


def official_client() -> Any:
    """The official 5.x client's module, its callbacks guarded (a UsageError naming the extra when it is
    not installed)."""
    try:
        import rocketmq
    except ImportError:
        rocketmq = None
    if rocketmq is None or not hasattr(rocketmq, "SimpleConsumer"):
        raise UsageError("--grpc drives the official 5.x Python client: pip install 'mqctl[grpc]'")
    from rocketmq.v5.client.connection.rpc_client import RpcClient

    guard_callbacks(RpcClient)
    return rocketmq


def guard_callbacks(rpc_client: Any) -> None:
    """Make the futures of ``rpc_client``'s :data:`GUARDED` methods run their callbacks on the client's
    loop (once per class: the guard is not stacked)."""
    if getattr(rpc_client, _GUARD, False):
        return
    for name in GUARDED:
        setattr(rpc_client, name, on_client_loop(getattr(rpc_client, name), rpc_client.get_channel_io_loop))
    setattr(rpc_client, _GUARD, True)


def on_client_loop(method: Callable[..., Future[Any]], loop: Callable[[], Any]) -> Callable[..., Future[Any]]:
    """``method`` whose returned future hands each callback to the loop ``loop()`` names, unless it runs
    in that loop's thread already."""

    @functools.wraps(method)
    def wrapped(*args: Any, **kwargs: Any) -> Future[Any]:
        future = method(*args, **kwargs)
        add = future.add_done_callback
        io_loop = loop()

        def deliver(callback: Callable[[Future[Any]], object], done: Future[Any]) -> None:
            if io_loop is None or io_loop.is_closed() or _runs_in(io_loop):
                callback(done)
            else:
                io_loop.call_soon_threadsafe(callback, done)

        def add_on_loop(fn: Callable[[Future[Any]], object]) -> None:
            add(functools.partial(deliver, fn))

        future.add_done_callback = add_on_loop  # type: ignore[method-assign]
        return future

    return wrapped


def _runs_in(loop: Any) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:  # no loop runs in this thread
        return False
