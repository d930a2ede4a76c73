"""Senders for the SIGKILL tests: keep sending until the broker dies, recording what it acknowledged."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from daemon.remoting.codes import ResponseCode

#: (queue id, queue offset, body) of every send answered SUCCESS.
Acked = list[tuple[int, int, bytes]]


async def send_until_dead(
    handle: Any, topic: str, n: int, body: Callable[[int, int], bytes], acked: Acked
) -> None:
    """Sender ``n``: send ``body(n, i)`` to queue ``n % 4`` of ``topic`` until the broker stops answering."""
    i = 0
    while True:
        data = body(n, i)
        try:
            r = await handle.send(topic, data, queue_id=n % 4)
        except Exception:
            return  # the broker died under us
        if r.code == ResponseCode.SUCCESS:
            acked.append((int(r.ext_fields["queueId"]), int(r.ext_fields["queueOffset"]), data))
        i += 1
