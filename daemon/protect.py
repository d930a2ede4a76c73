"""Protected mode: an unauthenticated daemon reachable beyond loopback refuses what can hurt.

A broker or NameServer with ACL off trusts every peer. On loopback that is the machine's own users; on
0.0.0.0 it is the whole network. Like Redis's protected mode, the daemon then refuses the requests that
change or delete data or configuration (topic and group writes, config updates, admin offset resets,
manual cleanups, KV writes, the ACL codes, write-permission changes, route deletes) from every peer that
is not on loopback, and says how to open it: turn ACL on (`aclEnable=true`) or opt out
(`protectedMode=false`). Client traffic (sends, pulls, heartbeats, offset commits, broker registration)
is not touched, so applications keep working. The decision is a pure function of the peer's address and
the request code; `protection` decides at start whether a daemon needs the guard at all.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Protocol

from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.errors import RemotingCommandError
from daemon.remoting.limits import WarningGate
from store.names import (
    REVIVE_TOPIC_PREFIX,
    SCHEDULE_TOPIC,
    TIMER_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
)

if TYPE_CHECKING:
    from daemon.remoting.command import RemotingCommand
    from daemon.remoting.connection import Connection

log = logging.getLogger(__name__)

R = RequestCode
#: 5.x's RECALL_MESSAGE: what a gRPC RecallMessage is checked as. It cancels a pending timer message,
#: anyone's: it deletes data (4.9.8 has no such request).
RECALL_MESSAGE: Final = 370
#: What a non-loopback peer may not send to a daemon in protected mode: every request that changes or
#: deletes data or configuration. Registration (103/104, 322) is a broker's client traffic and stays open.
PROTECTED_CODES: Final = frozenset(
    int(c)
    for c in (
        R.UPDATE_AND_CREATE_TOPIC,
        R.DELETE_TOPIC_IN_BROKER,
        R.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        R.DELETE_SUBSCRIPTIONGROUP,
        R.UPDATE_BROKER_CONFIG,
        R.INVOKE_BROKER_TO_RESET_OFFSET,
        R.RESET_CONSUMER_OFFSET_IN_BROKER,
        R.CLONE_GROUP_OFFSET,
        R.CLEAN_UNUSED_TOPIC,
        R.CLEAN_EXPIRED_CONSUMEQUEUE,
        R.DELETE_EXPIRED_COMMITLOG,
        R.TRIGGER_DELETE_FILES,
        R.CONSUME_MESSAGE_DIRECTLY,
        R.UPDATE_AND_CREATE_ACL_CONFIG,
        R.DELETE_ACL_CONFIG,
        R.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
        R.GET_BROKER_CLUSTER_ACL_CONFIG,
        R.PUT_KV_CONFIG,
        R.DELETE_KV_CONFIG,
        R.DELETE_KV_CONFIG_BY_VALUE,
        R.DELETE_TOPIC_IN_NAMESRV,
        R.WIPE_WRITE_PERM_OF_BROKER,
        R.ADD_WRITE_PERM_OF_BROKER,
        R.UPDATE_NAMESRV_CONFIG,
        RECALL_MESSAGE,
    )
)

#: The two ways out, named in every refusal and in the start-up line.
WAYS_OUT: Final = "set aclEnable=true (and sign requests) or protectedMode=false in the config file"


def is_loopback(ip: str) -> bool:
    """Whether a peer address is this machine's loopback (127.0.0.0/8, ::1, ::ffff:127.x). A peer
    without an IP (``""``) is not: a socket whose peer is unknown gets no trust."""
    try:
        address = ipaddress.ip_address(ip.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


#: The prefix an IPv6 peer's per-host budgets count against: a host is handed a /64 (SLAAC, one
#: subnet) and may speak from any of its 2^64 addresses, each of which counted as a host of its own.
IPV6_HOST_PREFIX: Final = 64


def budget_host(ip: str) -> str:
    """The key a peer's per-host budgets (held pulls and receives, TLS handshakes, a fair share of the
    connections) count against: an IPv4 address as it is (an IPv4-mapped one folded to it), an IPv6
    address as its /64 (``2001:db8:1:2::/64``), anything else (``""``, a name) as it is."""
    if ":" not in ip:
        return ip
    try:
        address = ipaddress.IPv6Address(ip.split("%", 1)[0])
    except ValueError:
        return ip
    if address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    network = ipaddress.IPv6Address(
        address.packed[: IPV6_HOST_PREFIX // 8] + bytes(16 - IPV6_HOST_PREFIX // 8)
    )
    return f"{network}/{IPV6_HOST_PREFIX}"


def binds_beyond_loopback(host: str) -> bool:
    """Whether a listener bound to ``host`` can be reached from other machines (a wildcard, a name, or
    an address that is not loopback)."""
    if host in ("", "0.0.0.0", "::"):
        return True
    if host == "localhost":
        return False
    return not is_loopback(host)


def is_local(ip: str, local_ip: str) -> bool:
    """Whether peer ``ip`` is this machine: loopback, or the very address it connected to (``local_ip``,
    the socket's own): `mqctl` on a broker's host reaches it at the address it registered. A remote
    host cannot complete a TCP handshake from an address of ours."""
    return is_loopback(ip) or (ip != "" and ip == local_ip)


def is_own_address(ip: str) -> bool:
    """Whether ``ip`` is an address of this machine: the kernel routes to it from itself (a UDP
    "connect" sends nothing). A configured address (``brokerIP1``) may be a NAT's or a load balancer's,
    and every client that device forwards arrives from it: that one is no local address."""
    try:
        family = socket.AF_INET6 if ":" in ip else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect((ip, 9))
            return bool(probe.getsockname()[0] == ip)
    except (OSError, ValueError, UnicodeError):
        return False


def refusal(ip: str, code: int, local_ip: str = "") -> str | None:
    """The remark refusing request ``code`` from peer ``ip`` in protected mode, or None: allowed."""
    if code not in PROTECTED_CODES or is_local(ip, local_ip):
        return None
    return (
        f"protected mode: request code {code} from {ip or '?'} changes data or configuration, and this "
        f"daemon has ACL off and listens beyond loopback; send it from 127.0.0.1, or {WAYS_OUT}"
    )


#: Where the broker parks every producer's messages until it delivers them (delay levels, timers,
#: half and op messages) or logs POP acks: no client reads them (a slave copies them over HA). Their
#: messages carry each one's unique key, a timer message's recall handle.
PARKING_TOPICS: Final = frozenset({SCHEDULE_TOPIC, TIMER_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC})


def is_parking_topic(topic: str) -> bool:
    """Whether ``topic`` is one the broker parks others' messages in (`PARKING_TOPICS`, the revive topics)."""
    return topic in PARKING_TOPICS or topic.startswith(REVIVE_TOPIC_PREFIX)


class Peer(Protocol):
    """Whoever sent a request: a remoting connection, or a 5.x client's channel."""

    address: tuple[str, int]

    def local_ip(self) -> str: ...


def _off_host(peer: Peer, refused: Callable[[str], str], fix: str) -> str | None:
    """The protected-mode remark ``refused(peer's ip)`` says, then how to do it instead; None for a peer
    on this machine."""
    ip = peer.address[0]
    if is_local(ip, peer.local_ip()):
        return None
    return (
        f"protected mode: {refused(ip or '?')} (this daemon has ACL off and listens beyond loopback); "
        f"{fix} from 127.0.0.1, or {WAYS_OUT}"
    )


def creation_refusal(peer: Peer, what: str) -> str | None:
    """Why ``peer`` may not auto-create ``what`` (a topic or a subscription group) at a daemon in protected
    mode, or None: it is this machine. Creating one on use is creating it as the admin codes do, so a peer
    beyond loopback sees `autoCreateTopicEnable` and `autoCreateSubscriptionGroup` off."""
    return _off_host(peer, lambda ip: f"{what} does not exist and {ip} may not create it on use", "create it")


def parking_refusal(peer: Peer, topic: str) -> str | None:
    """Why ``peer`` may not read parking topic ``topic`` (`is_parking_topic`) at a daemon in protected
    mode, or None: it is this machine. A peer that pulled the timer topic learnt every pending timer
    message's recall handle, and read every producer's delayed and half messages."""
    return _off_host(
        peer, lambda ip: f"{ip} may not read {topic}, where this broker parks others' messages", "read it"
    )


def lock_refusal(peer: Peer, group: str, client_id: str, member: str | None) -> str | None:
    """Why ``peer`` may not lock or unlock ``group``'s queues as ``client_id`` at a daemon in protected
    mode, or None. ``member`` is the client id ``peer``'s connection registered as a consumer of the
    group (a HEART_BEAT on it, as 4.9.8's rebalance sends before it locks), None when it did not. A
    peer off this machine that locked every queue of an orderly group (or unlocked a member's, naming
    its client id) would starve the group's consumers for the lock's 60 s, again and again."""
    ip = peer.address[0]
    if is_local(ip, peer.local_ip()) or (member is not None and member == client_id):
        return None
    return (
        f"protected mode: {ip or '?'} may lock or unlock queues of group {group} only as the consumer it "
        f"registered on this connection (a heartbeat naming the group, client id {client_id}): this daemon "
        f"has ACL off and listens beyond loopback; {WAYS_OUT} to open it"
    )


@dataclass(frozen=True, slots=True)
class Protection:
    """What a daemon's start decided: whether the guard runs and why (the start-up line says it)."""

    active: bool
    why: str

    def describe(self) -> str:
        return f"protected mode {'on' if self.active else 'off'} ({self.why})"


def protection(*, enabled: bool, acl_enable: bool, hosts: list[str]) -> Protection:
    """Whether protected mode guards a daemon with ``protectedMode=enabled``, ``aclEnable=acl_enable``
    and listeners bound to ``hosts``."""
    if acl_enable:
        return Protection(False, "ACL on: requests are authenticated")
    beyond = [h for h in hosts if binds_beyond_loopback(h)]
    if not beyond:
        return Protection(False, "listening on loopback only")
    if not enabled:
        return Protection(
            False, f"protectedMode=false: ACL off on {beyond[0]}, anyone there may change anything"
        )
    return Protection(
        True,
        f"ACL off and listening on {beyond[0]}: peers off loopback cannot change data or configuration; "
        f"{WAYS_OUT} to open it",
    )


#: Why a daemon listens on loopback when nothing said otherwise, and how to open it.
LOOPBACK_WHY: Final = "the default: loopback only; listenHost=0.0.0.0 or --listen 0.0.0.0:PORT opens it"


def listening(host: str, port: int, why: str, mode: Protection) -> str:
    """The start-up line's part on where a daemon listens, why there, and which mode is in force."""
    return f"listening on {host}:{port} ({why}); {mode.describe()}"


class ProtectedModeGuard:
    """The dispatcher guard of a daemon in protected mode: one set lookup per request."""

    def __init__(self, daemon: str) -> None:
        self.daemon = daemon
        self.refused = 0
        self._warnings = WarningGate(log)

    def __call__(self, conn: Connection, request: RemotingCommand) -> None:
        if request.code not in PROTECTED_CODES:
            return
        remark = refusal(conn.address[0], request.code, conn.local_ip())
        if remark is None:
            return
        self.refused += 1
        self._warnings.warning(
            "%s refused request code %d from %s: %s", self.daemon, request.code, conn.peer, remark
        )
        raise RemotingCommandError(ResponseCode.NO_PERMISSION, remark)
