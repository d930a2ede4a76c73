"""The bound on long-polling POPs waiting for messages: the remoting POP_MESSAGE (5.x's remoting clients) and
the gRPC front's ReceiveMessage (the 5.x SDKs), as `maxHeldPullsPerConnection` and `maxHeldPullsPerHost` bound
held pulls (daemon.broker.processors.pull).

A waiting pop holds its request, a coroutine, and a parked waiter on every queue it reads for up to its poll
time; a connection may have thousands of requests awaiting answers, a gRPC connection a thousand streams, and
a host hundreds of connections: one host's receives held gigabytes. Past a bound a pop reads once and does not wait: when it finds nothing it is answered as 5.x's broker answers a pop
when its polling is full (remoting POLLING_FULL, 209; gRPC TOO_MANY_REQUESTS "polling full"), which the 5.x
clients retry after a pause, not at once.

A host is an IPv4 address or an IPv6 /64 (:func:`daemon.protect.budget_host`); loopback has no host budget.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable
from typing import Final

from daemon.protect import budget_host, is_loopback
from daemon.remoting.limits import WarningGate

log = logging.getLogger(__name__)

#: 5.x ``ResponseCode.POLLING_FULL``: the remoting answer of a pop that found nothing and could not wait.
POLLING_FULL: Final = 209
#: Pops waiting at once from every host together (5.x's ``maxPopPollingSize``): many hosts, each within its
#: bound, still held as many as their connections carried.
MAX_WAITING_POPS: Final = 100_000


class PollBudget:
    """Waiting pops (or other held calls: the gRPC front's Telemetry streams) by owner (a connection) and by
    host; :meth:`take` before one is held, :meth:`give` after."""

    def __init__(
        self,
        held: str = "pops wait",
        bounds: tuple[str, str, str] = (
            "maxHeldPullsPerConnection",
            "maxHeldPullsPerHost",
            "all hosts together",
        ),
        limit: int = MAX_WAITING_POPS,
    ) -> None:
        #: What the warning says is held, and the names of the three bounds.
        self._held_text = held
        self._bound_names = bounds
        #: How many may be held at once from all hosts together (0: no bound), and how many are.
        self.limit = limit
        self.waiting = 0
        self._owners: dict[Hashable, int] = {}
        self._hosts: dict[str, int] = {}
        self._budgets: dict[str, str] = {}
        #: Pops that could not wait, over their connection's bound, their host's, and all hosts'.
        self.refused_owner = 0
        self.refused_host = 0
        self.refused_total = 0
        self._warnings = WarningGate(log)

    def host(self, ip: str) -> str:
        """The budget ``ip`` counts against ("" on loopback: none)."""
        host = self._budgets.get(ip)
        if host is None:
            if len(self._budgets) >= 4096:
                self._budgets.clear()
            host = self._budgets[ip] = "" if is_loopback(ip) else budget_host(ip)
        return host

    def take(self, owner: Hashable, ip: str, per_owner: int, per_host: int, what: str) -> str | None:
        """Count one more waiting pop of ``owner`` from ``ip``: the host key to :meth:`give` back, or None
        (nothing counted) when the owner holds ``per_owner``, its host ``per_host`` or all hosts :attr:`limit`
        already (a bound of 0 or less is none). ``what`` names the pop in the warning."""
        host = self.host(ip)
        owned = self._owners.get(owner, 0)
        if per_owner > 0 and owned >= per_owner:
            self.refused_owner += 1
            bound, key = per_owner, self._bound_names[0]
        elif per_host > 0 and host and self._hosts.get(host, 0) >= per_host:
            self.refused_host += 1
            bound, key = per_host, self._bound_names[1]
        elif self.limit > 0 and self.waiting >= self.limit:
            self.refused_total += 1
            bound, key = self.limit, self._bound_names[2]
        else:
            self.waiting += 1
            self._owners[owner] = owned + 1
            if host:
                self._hosts[host] = self._hosts.get(host, 0) + 1
            return host
        self._warnings.warning(
            "%s from %s not held: %d %s already (%s)", what, ip, bound, self._held_text, key
        )
        return None

    def give(self, owner: Hashable, host: str) -> None:
        self.waiting -= 1
        left = self._owners.get(owner, 0) - 1
        if left > 0:
            self._owners[owner] = left
        else:
            self._owners.pop(owner, None)
        if host:
            held = self._hosts.get(host, 0) - 1
            if held > 0:
                self._hosts[host] = held
            else:
                self._hosts.pop(host, None)

    def held_by(self, host: str) -> int:
        """Pops waiting for ``host`` (a :func:`budget_host` key)."""
        return self._hosts.get(host, 0)
