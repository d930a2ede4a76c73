"""What one remoting server may spend on its clients: buffered partial frames and connections.

A frame's length prefix announces up to 16 MiB; a client that sends the prefix and then trickles the
body makes the server hold what has arrived until the frame completes. Unchecked, forty such clients
cost a daemon 600 MB before any of them authenticated anything. The caps here bound that memory for
the whole server, per connection, and in the number of connections, so one flood closes the
flooding connections and leaves everyone else's latency alone.

The NameServer's and the broker's configs both inherit `RemotingLimits`, so the keys
(`remotingMaxBufferedBytes`, `remotingMaxConnectionBufferedBytes`, `remotingMaxConnections`) load
from either daemon's properties file, and the server reads them live from that config.
"""

from __future__ import annotations

import logging
import resource
import time
from dataclasses import dataclass

from daemon.remoting.frame import MAX_FRAME_LENGTH

log = logging.getLogger(__name__)

#: Closing a connection over a cap logs at most this often; the next warning counts the ones skipped.
WARNING_INTERVAL = 1.0
#: The longest JSON body a client's request may carry where a daemon parses it on its loop (a heartbeat,
#: a lock's queue set, a batch of acks: `RequestDispatcher.limit_bodies`). A heartbeat of a consumer
#: subscribing several thousand topics fits.
MAX_JSON_BODY = 1024 * 1024
#: The characters of a client's name (a group, a topic, an AccessKey) a remark or a log line shows.
SHOWN_CHARS = 64


def shown(name: str) -> str:
    """A name a client sent as a daemon's remarks and log lines show it: a refused one may be 1 MiB, and
    was written back whole in the answer and again into each WARNING line."""
    if len(name) <= SHOWN_CHARS:
        return name
    return f"{name[:SHOWN_CHARS]}... ({len(name)} characters)"


@dataclass
class RemotingLimits:
    """The config keys of the caps (see module docstring); mixed into both daemons' configs."""

    #: Bytes of incomplete frames all connections together may hold.
    remoting_max_buffered_bytes: int = 256 * 1024 * 1024
    #: Bytes of incomplete frame one connection may hold (a frame is at most 16 MiB anyway).
    remoting_max_connection_buffered_bytes: int = MAX_FRAME_LENGTH
    #: Open client connections; further ones are closed on accept. Also at most half the fd limit.
    remoting_max_connections: int = 10_000

    def connection_cap(self) -> int:
        """`remotingMaxConnections`, lowered to half the open-file limit so the daemon's own files
        (store, logs) never compete with clients for descriptors."""
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY:
            return self.remoting_max_connections
        return min(self.remoting_max_connections, soft // 2)


class WarningGate:
    """Logs at most one warning per `interval` seconds: a flood of refused connections must not
    become a flood of log lines. The first warning after a quiet spell says how many it skipped."""

    def __init__(self, logger: logging.Logger, interval: float = WARNING_INTERVAL) -> None:
        self._log = logger
        self._interval = interval
        self._next = 0.0
        self._skipped = 0

    def warning(self, msg: str, *args: object) -> None:
        now = time.monotonic()
        if now < self._next:
            self._skipped += 1
            return
        self._next = now + self._interval
        if self._skipped:
            msg += " (%d similar warnings skipped)"
            args = (*args, self._skipped)
            self._skipped = 0
        self._log.warning(msg, *args)


class BufferBudget:
    """The bytes of incomplete frames a server's connections hold, against `RemotingLimits`.

    `used` never exceeds the global cap: a connection whose next holding would pass either cap is
    refused (the caller closes it) and its holding released. `peak` and `refused` are for metrics.
    """

    def __init__(self, limits: RemotingLimits) -> None:
        self.limits = limits
        self.used = 0
        self.peak = 0
        self.refused = 0
        self._warnings = WarningGate(log)

    def charge(self, peer: str, held: int, wanted: int) -> bool:
        """Move `peer`'s holding from `held` to `wanted` bytes; False (logged) when over a cap."""
        self.used -= held
        limits = self.limits
        if wanted > limits.remoting_max_connection_buffered_bytes:
            self._refuse(
                peer,
                wanted,
                "remotingMaxConnectionBufferedBytes",
                limits.remoting_max_connection_buffered_bytes,
            )
            return False
        if self.used + wanted > limits.remoting_max_buffered_bytes:
            self._refuse(peer, wanted, "remotingMaxBufferedBytes", limits.remoting_max_buffered_bytes)
            return False
        self.used += wanted
        self.peak = max(self.peak, self.used)
        return True

    def _refuse(self, peer: str, wanted: int, key: str, cap: int) -> None:
        self.refused += 1
        self._warnings.warning(
            "closing connection from %s: %d bytes of incomplete frames would pass %s=%d (%d held in all)",
            peer,
            wanted,
            key,
            cap,
            self.used,
        )
