"""Who may speak on a DLedger member's channel: the members of its group, from their own hosts.

DLedger's requests change the log and the election (a PUSH TRUNCATE cuts a follower's tail and appends
what it carries, a VOTE of a far term deposes a leader), and 4.9.8's DLedger serves them to whoever
connects. The gate admits a connection only from a host `dLegerPeers` lists (as the HA gate admits only
registered slaves, on host alone: a peer connects from an ephemeral port), and a request only when every
member id it names as its sender is a member whose `dLegerPeers` host is the connecting one. Members
connect from their own `dLegerPeers` address, so on a multi-homed host the match is exact.

On loopback every member is 127.0.0.1 and every local process passes: the gate is then as strong as the
host's user separation. Mutual TLS (`haTls`) is what authenticates the members themselves.
"""

from __future__ import annotations

import ipaddress
import logging
import socket

from daemon.dledger.protocol import LeadershipTransferRequest, RequestOrResponse
from daemon.protect import is_loopback
from daemon.remoting.client import parse_addr
from daemon.remoting.limits import WarningGate

log = logging.getLogger(__name__)


def resolve(host: str) -> set[str]:
    """The IP addresses `host` stands for (itself when it is one); empty when it does not resolve."""
    try:
        return {str(ipaddress.ip_address(host))}
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError as exc:
        log.warning("DLedger: peer host %s does not resolve (%s): nobody is admitted from it", host, exc)
        return set()
    return {str(info[4][0]) for info in infos}


class PeerGate:
    """The member hosts of one group, as `dLegerPeers` names them, resolved once when the member starts
    (:meth:`resolve`, in a thread: a name lookup may block)."""

    def __init__(self, self_id: str, peers: dict[str, str]) -> None:
        self.self_id = self_id
        self.peers = peers
        #: member id -> its host's IP addresses (a name may stand for several)
        self.hosts: dict[str, set[str]] = {p: set() for p in peers}
        #: Connections and requests refused (what /metrics and the tests count).
        self.refused = 0
        self._warnings = WarningGate(log)
        #: (leaderId, localId, ip) of requests admitted: a leader's every push names the same pair. One set for
        #: the gate's life (:meth:`resolve` clears it in place): a follower's compiled push read holds it and
        #: looks a push's senders up itself, with no interpreted call a push
        self.admitted_senders: set[tuple[str | None, str | None, str]] = set()

    def resolve(self) -> None:
        for peer, addr in self.peers.items():
            self.hosts[peer] = resolve(parse_addr(addr)[0])
        self.admitted_senders.clear()

    @property
    def beyond_loopback(self) -> bool:
        """Whether a member's host is off loopback (or unresolved): then other machines reach the channel."""
        return any(not ips or not all(is_loopback(ip) for ip in ips) for ips in self.hosts.values())

    def admits(self, ip: str) -> bool:
        """A new connection from `ip`: only from a member's host; the refusal is logged (rate-limited)."""
        if any(ip in ips for ips in self.hosts.values()):
            return True
        self.refused += 1
        self._warnings.warning(
            "DLedger: closing the connection from %s: not the host of any member in dLegerPeers (%s)",
            ip,
            ";".join(f"{k}-{v}" for k, v in self.peers.items()),
        )
        return False

    def admitted(self, leader_id: str | None, local_id: str | None, ip: str) -> bool:
        """Whether a request naming these senders from `ip` passed :meth:`refusal` before (nothing counted or
        logged either way): a follower's push read by its fast path passes only so, else the full check."""
        return (leader_id, local_id, ip) in self.admitted_senders

    def refusal(self, request: RequestOrResponse, ip: str) -> str | None:
        """Why a request from `ip` is refused (logged, rate-limited), or None: every member id it gives as
        its sender (``leaderId``, ``localId``, a take-leadership's ``transferId``) must be another member
        whose host is `ip`. An admin's LEADERSHIP_TRANSFER to the leader names no sender and passes."""
        transfer = isinstance(request, LeadershipTransferRequest)
        seen = (request.leader_id, request.local_id, ip)
        if not transfer and seen in self.admitted_senders:
            return None
        senders = {request.leader_id, request.local_id}
        if isinstance(request, LeadershipTransferRequest) and request.transfer_id != self.self_id:
            senders.add(request.transfer_id)
        for sender in sorted(s for s in senders if s is not None):
            why = None
            if sender == self.self_id:
                why = f"names member {sender}, this member itself, as its sender"
            elif sender not in self.hosts:
                why = f"names member {sender}, which dLegerPeers does not list"
            elif ip not in self.hosts[sender]:
                why = (
                    f"names member {sender}, whose host in dLegerPeers is {parse_addr(self.peers[sender])[0]}"
                )
            if why is not None:
                self.refused += 1
                self._warnings.warning("DLedger: refusing a request from %s: it %s", ip, why)
                return f"DLedger peer gate: a request from {ip} {why}"
        if not transfer and len(self.admitted_senders) < 64:
            self.admitted_senders.add(seen)
        return None
