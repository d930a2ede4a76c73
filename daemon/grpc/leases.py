"""Server-side renewal of a PushConsumer's received messages (the Java Proxy's
`DefaultReceiptHandleManager`).

A PushConsumer receives with `auto_renew` and no invisible duration: the server lends each message for a
while and, as long as the client lives and has neither acked nor nacked it, lends it again before that
runs out, so a slow listener is not handed the same message twice. The client keeps the handle it was
given; each renewal makes a new one, so the client's later ack or change of invisibility is applied to
the current handle.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from daemon.remoting.errors import RemotingCommandError

log = logging.getLogger(__name__)

#: Renewal gives up after this long (the Proxy's `renewMaxTimeMillis`): a stuck listener's message then
#: comes back after its last lending.
RENEW_MAX_S: Final = 3 * 3600.0


@dataclass(slots=True)
class Lease:
    client_id: str
    group: str
    topic: str
    current: str
    lent_until: float
    given_up_at: float


class Leases:
    """Leases by the handle the client holds. `renew(group, topic, handle, invisible_ms)` is the POP
    service's change of invisibility (it returns the new handle)."""

    def __init__(self, renew: Callable[..., str], invisible_ms: int, ahead_ms: int) -> None:
        self._renew = renew
        self.invisible_ms = invisible_ms
        #: Renew when less than this is left of a lending.
        self.ahead_ms = ahead_ms
        self.by_handle: dict[str, Lease] = {}

    def add(self, client_id: str, group: str, topic: str, handle: str) -> None:
        now = time.monotonic()
        self.by_handle[handle] = Lease(
            client_id, group, topic, handle, now + self.invisible_ms / 1000, now + RENEW_MAX_S
        )

    def current(self, handle: str, group: str, topic: str) -> str:
        """The handle to act on for the one the client holds, when it acts as the group and topic it
        received as (a caller naming another group gets its own handle back, to be refused)."""
        lease = self.by_handle.get(handle)
        if lease is None or (lease.group, lease.topic) != (group, topic):
            return handle
        return lease.current

    def end(self, handle: str) -> None:
        """The client acked, changed or forwarded the message: no more renewals."""
        self.by_handle.pop(handle, None)

    def drop_client(self, client_id: str) -> None:
        """A client gone: its messages come back after their current lending."""
        for handle in [h for h, lease in self.by_handle.items() if lease.client_id == client_id]:
            del self.by_handle[handle]

    def renew_due(self) -> None:
        """Lend again every message whose lending ends within `ahead_ms`."""
        now = time.monotonic()
        due = [
            (h, lease) for h, lease in self.by_handle.items() if lease.lent_until - now < self.ahead_ms / 1000
        ]
        for handle, lease in due:
            if now >= lease.given_up_at:
                del self.by_handle[handle]
                continue
            try:
                lease.current = self._renew(
                    group=lease.group,
                    topic=lease.topic,
                    receipt_handle=lease.current,
                    invisible_ms=self.invisible_ms,
                )
            except RemotingCommandError as exc:  # acked meanwhile by another path, or gone to the DLQ
                log.debug("no renewal of %s: %s", handle, exc)
                del self.by_handle[handle]
                continue
            lease.lent_until = now + self.invisible_ms / 1000
