"""Request handlers of the NameServer, one per request code (docs/wire-protocol.md §nameserver-requests).

Handlers are plain functions over the route tables and the KV store: they parse a typed header,
act, and build the response. REGISTER_BROKER may await (to decode a large body off the loop), and
KV changes await their write to kvConfig.json, done off the loop.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import logging
import os
import socket
import time
import zlib
from dataclasses import dataclass

from daemon.config import (
    ConfigError,
    coerce_properties,
    config_file_mode,
    parse_properties,
    to_properties,
    wire_properties,
    write_atomically,
)
from daemon.namesrv.config import NamesrvConfig
from daemon.namesrv.kvconfig import ORDER_TOPIC_CONFIG, KVConfigManager, KVLimitError
from daemon.namesrv.places import Places, PlacesFile
from daemon.namesrv.routes import CLOCK_FIELD, RouteInfoManager
from daemon.protect import WAYS_OUT, budget_host, is_local, protection
from daemon.remoting.bodies import DataVersion, KVTable, RegisterBrokerBody, TopicConfigSerializeWrapper
from daemon.remoting.client import parse_addr, peer_host
from daemon.remoting.codes import RequestCode, ResponseCode, Version
from daemon.remoting.command import RemotingCommand
from daemon.remoting.connection import Connection, Processor
from daemon.remoting.errors import RemotingCommandError
from daemon.remoting.headers import (
    AddWritePermOfBrokerRequestHeader,
    AddWritePermOfBrokerResponseHeader,
    DeleteKVConfigRequestHeader,
    DeleteTopicFromNamesrvRequestHeader,
    GetKVConfigRequestHeader,
    GetKVConfigResponseHeader,
    GetKVListByNamespaceRequestHeader,
    GetRouteInfoRequestHeader,
    GetTopicsByClusterRequestHeader,
    PutKVConfigRequestHeader,
    QueryDataVersionRequestHeader,
    QueryDataVersionResponseHeader,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    UnregisterBrokerRequestHeader,
    WipeWritePermOfBrokerRequestHeader,
    WipeWritePermOfBrokerResponseHeader,
)
from daemon.remoting.limits import WarningGate
from daemon.safe_config import refuse_unsafe
from store.models import TOPIC_SYS_FLAG_UNIT, TOPIC_SYS_FLAG_UNIT_SUB

log = logging.getLogger(__name__)

#: Registration bodies above this size are decoded in a worker thread so lookups keep flowing.
LARGE_BODY = 256 * 1024
_FAQ = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."


@dataclass(frozen=True, slots=True)
class _AcceptedBody:
    """A registration body a broker address last registered: its length and digest (`body_digest`), the
    header fields that say how to read it, and what the routes took from it besides the topic table. Not
    its bytes: registration is open to any peer, and a slave's body (its topic table is not taken, so
    `routeMaxQueueDatas` does not count it) of 16 MiB under each of a flood of invented addresses was
    held whole, per address, for as long as that address kept registering."""

    form: tuple[str, str, int, bool, int, int]
    size: int
    digest: bytes
    data_version: DataVersion
    filter_server_list: tuple[str, ...]


#: Filter servers a registration may list, and the longest name of one: a broker lists the few it
#: starts (4.9.8's ``filterServerNums``, 0 by default), each ``host:port``. The NameServer keeps the list
#: per address and answers it in routes: a peer listing 16 MiB of them under each invented address had
#: them held and sent back in every route of its topics.
MAX_FILTER_SERVERS = 64
MAX_FILTER_SERVER_CHARS = 255


#: The hosts a DLedger member's registration may name for its group (``dLedgerHosts``), and the longest
#: one: a Raft group has a handful of members (3 or 5; each name in ``dLegerPeers`` resolved to its
#: addresses), and an IP literal, an IPv6 one with its zone, is under 64 characters. The list is kept per
#: address: invented brokers naming a header's worth of hosts each held it all (docs/security.md).
MAX_DLEDGER_HOSTS = 16
MAX_DLEDGER_HOST_CHARS = 64
#: The hosts a registration from this machine, or with protected mode off, may name for its group: a
#: large or multi-homed group's, still a bound on what each address holds.
MAX_DLEDGER_HOSTS_UNGUARDED = 256
#: How far above the term its holder registered with a DLedger term claim may be and still take a live
#: master's place (`_takes_over_by_term`): elections add one at a time, and a claim of 2^62 won for ever.
MAX_TERM_STEP = 1 << 20
#: Places (broker name, id) remembered for a while after their holder left (see `_Departed`), per
#: registering host (an IPv6 peer's /64) and in all: past either, the oldest is forgotten first.
MAX_DEPARTED_PER_HOST = 256
MAX_DEPARTED = 65_536


@dataclass(frozen=True, slots=True)
class _Holder:
    """Who registered a broker address: the place it took, the host it registered from, its DLedger
    group's hosts (empty without any), and whether that host was off this machine in protected mode."""

    name: str
    broker_id: int
    host: str
    group: frozenset[str]
    guarded: bool = False


@dataclass(frozen=True, slots=True)
class _Departed:
    """A place (broker name, id) whose holder left (unregistered, expired, its connection closed), kept
    for `brokerExpireMs` after: in protected mode another host may not take it meanwhile (a restarting
    broker's window), but a DLedger member of its group registering with a term may."""

    host: str
    left_ms: int
    group: frozenset[str]


def _same_host(a: str, b: str) -> bool:
    """Whether two IP addresses are the same host's, whatever their spelling (``::ffff:10.0.0.2`` and
    ``10.0.0.2``, IPv6 abbreviated or not); anything that is no IP (a name, ``""``) only as the same text."""
    try:
        one, two = (ipaddress.ip_address(x.split("%", 1)[0]) for x in (a, b))
    except ValueError:
        return a == b and a != ""
    folded = [
        x.ipv4_mapped if isinstance(x, ipaddress.IPv6Address) and x.ipv4_mapped is not None else x
        for x in (one, two)
    ]
    return folded[0] == folded[1]


def _is_name(host: str) -> bool:
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host != ""
    return False


#: How long a name's addresses (or its not resolving) are kept, how many names are, how long a look-up
#: may take and how many run at once: a peer naming a new name each registration costs a bounded share.
NAME_TTL_S = 30.0
MAX_NAMES = 1024
NAME_LOOKUP_S = 2.0
NAME_LOOKUPS = 4


class NameCache:
    """A broker's `brokerIP1` given as a host name (k8s, compose), resolved without blocking the loop
    and kept for `NAME_TTL_S`: its addresses, or None when it does not resolve."""

    def __init__(self) -> None:
        self._known: dict[str, tuple[float, frozenset[str] | None]] = {}
        self._lookups = asyncio.Semaphore(NAME_LOOKUPS)

    async def resolve(self, name: str) -> frozenset[str] | None:
        now = time.monotonic()
        held = self._known.get(name)
        if held is not None and now - held[0] < NAME_TTL_S:
            return held[1]
        found: frozenset[str] | None = None
        try:
            async with asyncio.timeout(NAME_LOOKUP_S), self._lookups:
                infos = await asyncio.get_running_loop().getaddrinfo(name, None, type=socket.SOCK_STREAM)
            found = frozenset(str(info[4][0]) for info in infos) or None
        except (OSError, TimeoutError, UnicodeError):
            found = None
        self._known.pop(name, None)
        self._known[name] = (time.monotonic(), found)
        if len(self._known) > MAX_NAMES:
            del self._known[next(iter(self._known))]
        return found


def _dledger_hosts(
    h: RegisterBrokerRequestHeader, cap: int = MAX_DLEDGER_HOSTS
) -> tuple[frozenset[str] | None, str | None]:
    """The hosts a registration names for its DLedger group (at most ``cap``), or why they are refused."""
    raw = h.d_ledger_hosts
    if raw is None:
        return None, None
    named = raw.count(",") + 1
    if len(raw) <= cap * (MAX_DLEDGER_HOST_CHARS + 1):  # (else refused unsplit)
        hosts = frozenset(x for x in raw.split(",") if x)
        if len(hosts) <= cap and all(len(x) <= MAX_DLEDGER_HOST_CHARS for x in hosts):
            return hosts, None
        named = len(hosts)
    return None, (
        f"broker {h.broker_name} at {h.broker_addr} names {named} hosts of its DLedger group "
        f"(dLedgerHosts): at most {cap} are taken, each of {MAX_DLEDGER_HOST_CHARS} characters "
        "at most (a DLedger group has a handful of members)"
    )


def _filter_server_refusal(h: RegisterBrokerRequestHeader, servers: list[str]) -> str | None:
    if len(servers) <= MAX_FILTER_SERVERS and all(len(one) <= MAX_FILTER_SERVER_CHARS for one in servers):
        return None
    return (
        f"broker {h.broker_name} at {h.broker_addr} lists {len(servers)} filter servers: at most "
        f"{MAX_FILTER_SERVERS} are taken, each of {MAX_FILTER_SERVER_CHARS} characters at most"
    )


async def body_digest(body: bytes) -> bytes:
    """A registration body's BLAKE2b digest: equal digests are the same bytes (a CRC-32 is not: a peer
    could make another body match). A large body is hashed in a thread (hashlib lets go of the GIL)."""
    if len(body) > LARGE_BODY:
        return await asyncio.to_thread(_blake2b, body)
    return _blake2b(body)


def _blake2b(body: bytes) -> bytes:
    return hashlib.blake2b(body, digest_size=32).digest()


def _body_form(h: RegisterBrokerRequestHeader, req: RemotingCommand) -> tuple[str, str, int, bool, int, int]:
    return (h.cluster_name, h.broker_name, h.broker_id, h.compressed, req.version, h.body_crc32)


class NamesrvProcessor:
    """Owns nothing but references: the route tables, the KV store and the live config."""

    def __init__(self, config: NamesrvConfig, routes: RouteInfoManager, kv: KVConfigManager) -> None:
        self.config = config
        self.routes = routes
        self.kv = kv
        self._kv_refusals = WarningGate(log)
        self._route_cap_warnings = WarningGate(log)
        #: The DLedger term each broker address last registered with (see _takes_over_by_term).
        self._terms: dict[str, int] = {}
        #: The hosts of its group a DLedger member last registered with: who may take its place by term.
        self._member_hosts: dict[str, frozenset[str]] = {}
        #: The body each broker address last registered (see _unchanged_body).
        self._bodies: dict[str, _AcceptedBody] = {}
        #: Who registered each listed broker address (see _Holder), and the places whose holder left
        #: lately, oldest first, also by registering host (`budget_host`): see _taken_from_elsewhere.
        self._holders: dict[str, _Holder] = {}
        self._departed: dict[tuple[str, int], _Departed] = {}
        self._departed_of: dict[str, dict[tuple[str, int], None]] = {}
        #: The DLedger group's hosts of each broker name whose brokerId 0 registered with a term, while the
        #: name is listed: who may take that place from a holder that registered with none (see
        #: _takes_over_by_term).
        self._group_hosts: dict[str, frozenset[str]] = {}
        self._place_refusals = WarningGate(log)
        self._names = NameCache()
        #: The places and their hosts, kept across restarts (see reserve_known_places).
        self.places = PlacesFile(config.home / "brokerPlaces.json", self._place_hosts)
        routes.on_removed.append(self._forget)

    def table(self) -> dict[int, Processor]:
        """The processor table for RemotingServer."""
        return {
            RequestCode.PUT_KV_CONFIG: self.put_kv_config,
            RequestCode.GET_KV_CONFIG: self.get_kv_config,
            RequestCode.DELETE_KV_CONFIG: self.delete_kv_config,
            RequestCode.GET_KVLIST_BY_NAMESPACE: self.get_kv_list_by_namespace,
            RequestCode.REGISTER_BROKER: self.register_broker,
            RequestCode.UNREGISTER_BROKER: self.unregister_broker,
            RequestCode.QUERY_DATA_VERSION: self.query_data_version,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self.get_route_info,
            RequestCode.GET_BROKER_CLUSTER_INFO: self.get_cluster_info,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.get_all_topics,
            RequestCode.GET_TOPICS_BY_CLUSTER: self.get_topics_by_cluster,
            RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS: self.get_system_topics,
            RequestCode.GET_UNIT_TOPIC_LIST: self.get_unit_topics,
            RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST: self.get_has_unit_sub_topics,
            RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST: self.get_has_unit_sub_ununit_topics,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self.delete_topic,
            RequestCode.WIPE_WRITE_PERM_OF_BROKER: self.wipe_write_perm,
            RequestCode.ADD_WRITE_PERM_OF_BROKER: self.add_write_perm,
            RequestCode.UPDATE_NAMESRV_CONFIG: self.update_config,
            RequestCode.GET_NAMESRV_CONFIG: self.get_config,
        }

    # ----------------------------------------------------------- KV config (docs/wire-protocol.md §kv-config)

    async def put_kv_config(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        h = PutKVConfigRequestHeader.from_ext_fields(req.ext_fields)
        try:
            await self.kv.put(h.namespace, h.key, h.value)
        except KVLimitError as exc:
            self._kv_refusals.warning("refused KV put from %s: %s", conn.peer, exc)
            return req.make_response(ResponseCode.SYSTEM_ERROR, str(exc))
        return req.make_response()

    def get_kv_config(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        h = GetKVConfigRequestHeader.from_ext_fields(req.ext_fields)
        value = self.kv.get(h.namespace, h.key)
        if value is None:
            return req.make_response(
                ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {h.namespace} Key: {h.key}"
            )
        return req.make_response(ext_fields=GetKVConfigResponseHeader(value).to_ext_fields())

    async def delete_kv_config(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        h = DeleteKVConfigRequestHeader.from_ext_fields(req.ext_fields)
        await self.kv.delete(h.namespace, h.key)
        return req.make_response()

    def get_kv_list_by_namespace(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        h = GetKVListByNamespaceRequestHeader.from_ext_fields(req.ext_fields)
        table = self.kv.namespace(h.namespace)
        if table is None:
            return req.make_response(
                ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {h.namespace}"
            )
        return req.make_response(body=KVTable(table).dumps())

    # --------------------------------------------------- brokers (docs/wire-protocol.md §broker-registration)

    async def register_broker(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        h = RegisterBrokerRequestHeader.from_ext_fields(req.ext_fields)
        peer = peer_host(conn.address[0])
        local = is_local(peer, conn.local_ip())
        guarded = not local and self._protected()
        group, refusal = _dledger_hosts(h, MAX_DLEDGER_HOSTS if guarded else MAX_DLEDGER_HOSTS_UNGUARDED)
        if refusal is not None:
            self._route_cap_warnings.warning("refused REGISTER_BROKER from %s: %s", conn.peer, refusal)
            return req.make_response(ResponseCode.SYSTEM_ERROR, refusal)
        refusal = await self._not_its_own_address(h, peer) if guarded else None
        if refusal is not None:
            self._place_refusals.warning("refused REGISTER_BROKER from %s: %s", conn.peer, refusal)
            return req.make_response(ResponseCode.NO_PERMISSION, refusal)
        digest = await body_digest(req.body)
        topics = self._unchanged_body(h, req, digest)
        decoded = False
        if topics is None:
            if h.body_crc32 and zlib.crc32(req.body) & 0x7FFFFFFF != h.body_crc32:
                return req.make_response(ResponseCode.SYSTEM_ERROR, "crc32 not match")
            topics = self._held_version(h, req)
        if topics is None:
            decoded = True
            try:
                refusal = self._over_route_cap_unread(h, req)
                if refusal is not None and h.broker_addr not in self.routes.broker_live_table:
                    self._route_cap_warnings.warning(
                        "refused REGISTER_BROKER from %s: %s", conn.peer, refusal
                    )
                    return req.make_response(ResponseCode.SYSTEM_ERROR, refusal)
                if refusal is not None:  # a listed broker stays listed, its table unread
                    self._route_cap_warnings.warning(
                        "REGISTER_BROKER from %s: its topic table left unread: %s", conn.peer, refusal
                    )
                    topics = self._listed_without_table(h)
                    decoded = False
                else:
                    topics = await self._decode_topics(req, h.compressed, h.broker_id == 0)
            except ValueError as exc:
                return req.make_response(ResponseCode.SYSTEM_ERROR, f"bad registration body: {exc}")
        holder = self._live_holder(conn, h.broker_name, h.broker_id, h.broker_addr)
        if holder is not None and self._takes_over_by_term(h, holder, peer):
            log.warning(
                "%s takes %s id 0 from %s (live, DLedger term %s) with the term %d",
                h.broker_addr,
                h.broker_name,
                holder,
                self._terms.get(holder),
                h.d_ledger_term,
            )
            holder = None
        if holder is not None and local and self._off_host_holder(holder):
            log.warning(
                "%s (from this machine) takes %s id %d from %s, registered from %s off this machine "
                "(protected mode: this machine's broker wins its place)",
                h.broker_addr,
                h.broker_name,
                h.broker_id,
                holder,
                self._holders[holder].host,
            )
            holder = None
        if holder is not None:
            self._place_refusals.warning(
                "refused REGISTER_BROKER of %s as %s id %d from %s: %s holds that place over a live connection",
                h.broker_addr,
                h.broker_name,
                h.broker_id,
                conn.peer,
                holder,
            )
            return req.make_response(
                ResponseCode.NO_PERMISSION,
                f"broker {h.broker_name} id {h.broker_id} at {h.broker_addr}: {holder} is registered over "
                "another live connection; its place and address can be taken once that broker is gone",
            )
        refusal = self._taken_from_elsewhere(h, peer, group) if guarded else None
        if refusal is not None:
            return req.make_response(ResponseCode.NO_PERMISSION, refusal)
        refusal = _filter_server_refusal(h, topics.filter_server_list)
        if refusal is not None:  # (refused whole, a listed broker too: its list is replaced whole)
            self._route_cap_warnings.warning("refused REGISTER_BROKER from %s: %s", conn.peer, refusal)
            return req.make_response(ResponseCode.SYSTEM_ERROR, refusal)
        refusal = self._over_route_cap(h, topics)
        if refusal is not None and h.broker_addr not in self.routes.broker_live_table:
            self._route_cap_warnings.warning("refused REGISTER_BROKER from %s: %s", conn.peer, refusal)
            return req.make_response(ResponseCode.SYSTEM_ERROR, refusal)
        if refusal is not None:  # a listed broker stays listed: its new topics wait for room
            self._route_cap_warnings.warning(
                "REGISTER_BROKER from %s: new topics left out: %s", conn.peer, refusal
            )
            topics = self._held_topics_only(h.broker_name, topics)
            decoded = False  # (its next registration is read whole again: the left-out topics retried)
        result = self.routes.register_broker(
            h.cluster_name,
            h.broker_addr,
            h.broker_name,
            h.broker_id,
            h.ha_server_addr,
            topics.topic_config_serialize_wrapper,
            topics.filter_server_list,
            conn,
        )
        if h.d_ledger_term is None:
            self._terms.pop(h.broker_addr, None)
        else:
            self._terms[h.broker_addr] = h.d_ledger_term
        if group is None:
            self._member_hosts.pop(h.broker_addr, None)
        else:
            self._member_hosts[h.broker_addr] = group
        self._took(h, peer, group, guarded)
        if decoded:
            self._remember_body(h, req, topics, digest)
        order = self.kv.namespace(ORDER_TOPIC_CONFIG)
        return req.make_response(
            ext_fields=RegisterBrokerResponseHeader(
                result.ha_server_addr, result.master_addr
            ).to_ext_fields(),
            body=KVTable(order).dumps() if order else b"",
        )

    def _over_route_cap(self, h: RegisterBrokerRequestHeader, topics: RegisterBrokerBody) -> str | None:
        """Why a registration may not add its address or a master's topics to the routes: the entries it
        adds (a topic on a broker, or a broker address not listed yet) would pass `routeMaxQueueDatas`.
        Registration is open to any peer (protected mode leaves it open), and one peer registering
        thousands of invented brokers of thousands of topics each (a few KiB compressed per broker)
        filled the NameServer's memory without bound; so did invented slaves, and masters of no topic,
        an address each, when only topics counted."""
        table = topics.topic_config_serialize_wrapper
        cap = self.config.route_max_queue_datas
        routes = self.routes
        new_address = int(h.broker_addr not in routes.broker_live_table)
        held = routes.queue_datas + len(routes.broker_live_table)
        topics_taken = h.broker_id == 0 and bool(table.topic_config_table)
        if held + new_address + (len(table.topic_config_table) if topics_taken else 0) <= cap:
            return None  # (the common case: no count)
        added = new_address + (routes.added_queue_datas(h.broker_name, table) if topics_taken else 0)
        if held + added <= cap:
            return None
        return _cap_refusal(h, added, held, cap)

    def _over_route_cap_unread(self, h: RegisterBrokerRequestHeader, req: RemotingCommand) -> str | None:
        """Why a registration is refused by its topic count alone, before its table is parsed (a table of
        invented topics, small compressed, kept the NameServer's CPU for seconds and every other answer
        waiting, only to be refused by the cap afterwards). For an address the routes do not list: more
        topics than `routeMaxQueueDatas` never fit, nor does a new master's table (a broker name the routes
        do not hold either: none of its topics is held yet) that would pass it. A table past the cap is
        refused from a listed address too (it stays listed with what it holds, its table unread: a listed
        slave's was parsed whole, only to be left unused). Any other registration is parsed, then
        counted exactly."""
        routes = self.routes
        count = RegisterBrokerBody.topic_count(req.body, h.compressed and req.version >= Version.V3_0_11)
        cap = self.config.route_max_queue_datas
        held = routes.queue_datas + len(routes.broker_live_table)
        if count > cap:
            return _cap_refusal(h, count, held, cap)
        if h.broker_addr in routes.broker_live_table:
            return None
        if h.broker_id != 0 or h.broker_name in routes.broker_addr_table:
            return None
        return _cap_refusal(h, 1 + count, held, cap) if held + 1 + count > cap else None

    def _listed_without_table(self, h: RegisterBrokerRequestHeader) -> RegisterBrokerBody:
        """A listed broker's registration refreshed without its table or filter servers (both as held), at
        a data version no broker sends (so its next registration is read whole, when there may be room)."""
        servers = self.routes.filter_server_table.get(h.broker_addr, [])
        return RegisterBrokerBody(TopicConfigSerializeWrapper({}, DataVersion()), list(servers))

    def _held_topics_only(self, broker_name: str, topics: RegisterBrokerBody) -> RegisterBrokerBody:
        """``topics`` without those the routes do not hold for ``broker_name`` yet, at a data version no
        broker sends (so the next registration is applied whole, when there may be room)."""
        table = self.routes.topic_queue_table
        held = {
            name: config
            for name, config in topics.topic_config_serialize_wrapper.topic_config_table.items()
            if broker_name in table.get(name, {})
        }
        return RegisterBrokerBody(TopicConfigSerializeWrapper(held, DataVersion()), topics.filter_server_list)

    def _takes_over_by_term(self, h: RegisterBrokerRequestHeader, holder: str, peer: str) -> bool:
        """A DLedger leader elected while the old master still holds brokerId 0 over a live connection
        (paused, cut off from its group but not from us): 4.9.8's RouteInfoManager takes the newer
        registration; here only one whose Raft term is above the one the holder registered with, so no
        broker without a term, or with a stale one, can take a live master's place. A term is only the
        registrant's word: when the holder named its group's hosts, the registration must also come
        from one of them (`peer`), or anyone reaching this port could put itself in the group's routes.
        A holder registered without a term takes it from a member of the group whose brokerId 0 last
        registered with one (from one of the hosts that master named): a peer that registered that
        place in an election's gap, term-less, kept it from the group's new leader for as long as its
        connection lived. A master/slave group's master (no term, no DLedger master before it) keeps it."""
        if h.broker_id != 0 or h.d_ledger_term is None or holder == h.broker_addr:
            return False
        broker = self.routes.broker_addr_table.get(h.broker_name)
        if broker is None or broker.broker_addrs.get(0) != holder:
            return False
        held = self._terms.get(holder)
        if held is None:
            return peer in self._known_group(h.broker_name)
        members = self._member_hosts.get(holder)
        if members is not None and peer not in members:
            return False
        return held < h.d_ledger_term <= held + MAX_TERM_STEP

    def _off_host_holder(self, holder: str) -> bool:
        """Whether address ``holder`` was registered from off this machine in protected mode: a place a
        registration from this machine takes from it (a peer that registered a restarting broker's place
        first kept it from the real broker for as long as its connection lived)."""
        took = self._holders.get(holder)
        return took is not None and took.guarded and self._protected()

    def _held_elsewhere(self, conn: Connection, addr: str) -> bool:
        """Whether the broker at `addr` registered over another connection that is still open."""
        live = self.routes.broker_live_table.get(addr)
        owner = live.connection if live is not None else None
        return isinstance(owner, Connection) and owner is not conn and not owner.is_closed

    def _live_holder(self, conn: Connection, name: str, broker_id: int, addr: str) -> str | None:
        """Who holds the place a REGISTER_BROKER asks for over another connection still open, if
        anyone: the address registered as (name, id), or `addr` itself. A live broker's place in the
        route must not be taken (hijack), nor its address: re-registered under another id it would
        leave its slot, and the channel that owns an address is the one whose close drops it."""
        broker = self.routes.broker_addr_table.get(name)
        current = broker.broker_addrs.get(broker_id) if broker is not None else None
        for held in (addr, current):
            if held is not None and self._held_elsewhere(conn, held):
                return held
        return None

    def _protected(self) -> bool:
        c = self.config
        return protection(enabled=c.protected_mode, acl_enable=c.acl_enable, hosts=[c.listen_host]).active

    async def _not_its_own_address(self, h: RegisterBrokerRequestHeader, peer: str) -> str | None:
        """Why a peer off this machine may not register ``h`` in protected mode: a broker registers its
        own address (`brokerIP1`, the host it connects from, or a name resolving to it). A peer
        registering a broker at another's address took that broker's place whenever it was briefly not
        listed."""
        try:
            host = parse_addr(h.broker_addr)[0]
        except ValueError:
            host = h.broker_addr
        if _same_host(host, peer):
            return None
        why = "not an address of that peer"
        if _is_name(host):
            resolved = await self._names.resolve(host)
            if resolved is not None and any(_same_host(a, peer) for a in resolved):
                return None
            why = "a name that does not resolve" if resolved is None else "a name not resolving to that peer"
        return (
            f"protected mode: REGISTER_BROKER from {peer or '?'} registers broker {h.broker_name} id "
            f"{h.broker_id} with brokerAddr {h.broker_addr}, {why}: a broker off this daemon's machine "
            "registers its own (brokerIP1, the address it connects from; a broker behind NAT, or leaving "
            f"from another address, does not); this daemon has ACL off and listens beyond loopback; {WAYS_OUT}"
        )

    def _taken_from_elsewhere(
        self, h: RegisterBrokerRequestHeader, peer: str, group: frozenset[str] | None
    ) -> str | None:
        """Why a peer off this machine may not take (name, id) in protected mode: its holder left it
        from another host less than `brokerExpireMs` ago. A broker's restart unregisters it; a peer
        registering that place at once kept it over its live connection, the real broker refused on
        its return and its topics gone from the routes. A DLedger member registering with a term from a
        host of its group may (its group's new leader, on another host than the old)."""
        key = (h.broker_name, h.broker_id)
        left = self._departed.get(key)
        if left is None or left.host == peer:
            return None
        now = self.routes.clock()
        if now - left.left_ms >= self.config.broker_expire_ms:
            return None
        if h.d_ledger_term is not None and peer in self._known_group(h.broker_name):
            return None
        self._place_refusals.warning(
            "refused REGISTER_BROKER of %s as %s id %d from %s: that place was held from %s until %d ms ago "
            "(protected mode: another host may take it %d ms after it left)",
            h.broker_addr,
            h.broker_name,
            h.broker_id,
            peer,
            left.host,
            now - left.left_ms,
            self.config.broker_expire_ms,
        )
        return (
            f"protected mode: broker {h.broker_name} id {h.broker_id} was registered from another host "
            f"{(now - left.left_ms) // 1000} s ago; a host off this daemon's machine may take that place "
            f"{self.config.broker_expire_ms // 1000} s after its holder left (brokerExpireMs); {WAYS_OUT}"
        )

    def _known_group(self, name: str) -> frozenset[str]:
        """The hosts of broker ``name``'s DLedger group, as its brokerId 0 named them with a term: the one
        registered now, or one that left less than `brokerExpireMs` ago."""
        group = self._group_hosts.get(name, frozenset())
        left = self._departed.get((name, 0))
        if left is not None and self.routes.clock() - left.left_ms < self.config.broker_expire_ms:
            group = group | left.group
        return group

    def reserve_known_places(self) -> None:
        """At start: reserve each place the last run knew for its host for `brokerExpireMs`, as if its
        holder had just left (`_taken_from_elsewhere`). A restart forgot them, and a peer off the machine
        that registered a place first kept it from the real broker, whose host is elsewhere."""
        now = self.routes.clock()
        for key, host in self.places.load().items():
            if key not in self._departed and len(self._departed) < MAX_DEPARTED:
                self._departed[key] = _Departed(host, now, frozenset())
                self._departed_of.setdefault(budget_host(host), {})[key] = None

    def _place_hosts(self) -> Places:
        """Each place held or left lately, and its host (what `places` writes)."""
        out = {key: left.host for key, left in self._departed.items()}
        out.update({(h.name, h.broker_id): h.host for h in self._holders.values()})
        return out

    def _took(
        self, h: RegisterBrokerRequestHeader, peer: str, group: frozenset[str] | None, guarded: bool
    ) -> None:
        """Remember who registered ``h`` (see _Holder), and a DLedger master's group's hosts."""
        termed = group if group is not None and h.d_ledger_term is not None else frozenset()
        before = self._holders.get(h.broker_addr)
        self._holders[h.broker_addr] = _Holder(h.broker_name, h.broker_id, peer, termed, guarded)
        if before is None or (before.name, before.broker_id, before.host) != (
            h.broker_name,
            h.broker_id,
            peer,
        ):
            self.places.changed()
        self._drop_departed((h.broker_name, h.broker_id))
        if h.broker_id == 0 and h.d_ledger_term is not None and group:
            self._group_hosts[h.broker_name] = group

    def _forget(self, addr: str) -> None:
        """The routes dropped ``addr``: forget what was kept for it, and remember the place it held."""
        self._terms.pop(addr, None)
        self._member_hosts.pop(addr, None)
        self._bodies.pop(addr, None)
        holder = self._holders.pop(addr, None)
        now = self.routes.clock()
        self._expire_departed(now)
        if holder is None:
            return
        self.places.changed()
        broker = self.routes.broker_addr_table.get(holder.name)
        now_held = broker.broker_addrs.get(holder.broker_id) if broker is not None else None
        if now_held is not None and now_held != addr:  # its place was taken from it (`_off_host_holder`)
            return
        if holder.name not in self.routes.broker_addr_table:
            self._group_hosts.pop(holder.name, None)
        key = (holder.name, holder.broker_id)
        self._drop_departed(key)
        self._departed[key] = _Departed(
            holder.host, now, holder.group if holder.broker_id == 0 else frozenset()
        )
        mine = self._departed_of.setdefault(budget_host(holder.host), {})
        mine[key] = None
        if len(mine) > MAX_DEPARTED_PER_HOST:
            self._drop_departed(next(iter(mine)))
        if len(self._departed) > MAX_DEPARTED:
            self._drop_departed(next(iter(self._departed)))

    def _drop_departed(self, key: tuple[str, int]) -> None:
        left = self._departed.pop(key, None)
        if left is None:
            return
        host = budget_host(left.host)
        mine = self._departed_of.get(host)
        if mine is not None:
            mine.pop(key, None)
            if not mine:
                del self._departed_of[host]

    def _expire_departed(self, now: int) -> None:
        """Forget the places left longer ago than `brokerExpireMs` (the oldest first)."""
        expire = self.config.broker_expire_ms
        while self._departed:
            key, left = next(iter(self._departed.items()))
            if now - left.left_ms < expire:
                return
            self._drop_departed(key)

    def _unchanged_body(
        self, h: RegisterBrokerRequestHeader, req: RemotingCommand, digest: bytes
    ) -> RegisterBrokerBody | None:
        """What the body decodes to, without decoding it, when it is the very bytes this address last
        registered (same header form and CRC) and the routes still hold that broker at that data version:
        then the routes take nothing from its topic table (4.9.8's ``RouteInfoManager#registerBroker``
        reads it only for a new broker or a changed version) and the registration refreshes liveness. A
        broker's periodic registration repeats its whole table every 30 s: with 10,000 topics a megabyte
        this NameServer parsed again each time, for nothing. A restarted NameServer, an
        expired broker or any other byte gets the full parse."""
        last = self._bodies.get(h.broker_addr)
        if (
            last is None
            or last.form != _body_form(h, req)
            or (last.size, last.digest) != (len(req.body), digest)
        ):
            return None
        if not self.routes.holds(h.broker_name, h.broker_id, h.broker_addr, last.data_version):
            return None
        wrapper = TopicConfigSerializeWrapper({}, last.data_version)
        return RegisterBrokerBody(wrapper, list(last.filter_server_list))

    def _held_version(
        self, h: RegisterBrokerRequestHeader, req: RemotingCommand
    ) -> RegisterBrokerBody | None:
        """The body without its topic table when the routes hold this broker at the data version it
        carries (read from the JSON before the table): a table changed since the last registration but
        whose version the NameServer already took, from the registration of the changed topics alone
        (4.9.8's ``registerIncrementBrokerData``). 4.9.8 parses the table and then leaves it unread."""
        if h.compressed or req.version < Version.V3_0_11:
            return None
        head = RegisterBrokerBody.peek(req.body)
        if head is None:
            return None
        version = head.topic_config_serialize_wrapper.data_version
        return head if self.routes.holds(h.broker_name, h.broker_id, h.broker_addr, version) else None

    def _remember_body(
        self, h: RegisterBrokerRequestHeader, req: RemotingCommand, topics: RegisterBrokerBody, digest: bytes
    ) -> None:
        """Remember the accepted body by its digest (one per broker address: dropped with the broker)."""
        wrapper = topics.topic_config_serialize_wrapper
        for addr in [a for a in self._bodies if a not in self.routes.broker_live_table]:
            del self._bodies[addr]
        self._bodies[h.broker_addr] = _AcceptedBody(
            _body_form(h, req), len(req.body), digest, wrapper.data_version, tuple(topics.filter_server_list)
        )

    @staticmethod
    async def _decode_topics(req: RemotingCommand, compressed: bool, master: bool) -> RegisterBrokerBody:
        """The body parsed, its topic table too for a master only: the routes take none of a slave's."""
        if req.version < Version.V3_0_11:  # pre-3.0.11 brokers send a bare wrapper
            wrapper = (
                TopicConfigSerializeWrapper.loads(req.body) if req.body else TopicConfigSerializeWrapper()
            )
            return RegisterBrokerBody(wrapper)
        decode = RegisterBrokerBody.decode if master else RegisterBrokerBody.decode_without_table
        if len(req.body) > LARGE_BODY:
            return await asyncio.to_thread(decode, req.body, compressed)
        return decode(req.body, compressed)

    def unregister_broker(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        h = UnregisterBrokerRequestHeader.from_ext_fields(req.ext_fields)
        if self._held_elsewhere(conn, h.broker_addr):
            return req.make_response(
                ResponseCode.NO_PERMISSION,
                f"broker {h.broker_addr} is registered over another live connection; only it can unregister",
            )
        self.routes.unregister_broker(h.cluster_name, h.broker_addr, h.broker_name, h.broker_id)
        return req.make_response()

    def query_data_version(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        h = QueryDataVersionRequestHeader.from_ext_fields(req.ext_fields)
        try:
            version = DataVersion.loads(req.body) if req.body else DataVersion()
        except ValueError as exc:
            return req.make_response(ResponseCode.SYSTEM_ERROR, f"bad DataVersion body: {exc}")
        if self._held_elsewhere(conn, h.broker_addr):
            # only the broker's own connection keeps it listed: anyone's query (a wrong version answers the
            # right one) would keep a hung broker, whose connection stays open, in the routes for good
            return req.make_response(ext_fields=QueryDataVersionResponseHeader(True).to_ext_fields())
        changed, stored = self.routes.query_data_version(h.broker_addr, version)
        return req.make_response(
            ext_fields=QueryDataVersionResponseHeader(changed).to_ext_fields(),
            body=stored.dumps() if stored is not None else b"",
        )

    # ----------------------------------------------- routes and topics (docs/wire-protocol.md §route-queries)

    def get_route_info(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        h = GetRouteInfoRequestHeader.from_ext_fields(req.ext_fields)
        standard = req.version >= Version.V4_9_4 or bool(h.accept_standard_json_only)
        order = self.kv.get(ORDER_TOPIC_CONFIG, h.topic) if self.config.order_message_enable else None
        body = self.routes.route_body(h.topic, standard, order)
        if body is None:
            return req.make_response(
                ResponseCode.TOPIC_NOT_EXIST,
                f"No topic route info in name server for the topic: {h.topic}{_FAQ}",
            )
        return req.make_response(body=body)

    def get_cluster_info(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        # Java writes this one with default fastjson whatever the version: bare brokerId keys.
        body = self.routes.cluster_info().dumps(bare_int_keys=True)
        if CLOCK_FIELD in req.ext_fields:  # mqctl asks for the clock; a Java client's answer stays 4.9.8's
            return req.make_response(ext_fields={CLOCK_FIELD: str(self.routes.clock())}, body=body)
        return req.make_response(body=body)

    def get_all_topics(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        return req.make_response(body=self.routes.all_topics().dumps())

    def get_topics_by_cluster(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        h = GetTopicsByClusterRequestHeader.from_ext_fields(req.ext_fields)
        return req.make_response(body=self.routes.topics_by_cluster(h.cluster).dumps())

    def get_system_topics(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        return req.make_response(body=self.routes.system_topics().dumps())

    def get_unit_topics(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        topics = self.routes.unit_topics(lambda flag: bool(flag & TOPIC_SYS_FLAG_UNIT))
        return req.make_response(body=topics.dumps())

    def get_has_unit_sub_topics(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        topics = self.routes.unit_topics(lambda flag: bool(flag & TOPIC_SYS_FLAG_UNIT_SUB))
        return req.make_response(body=topics.dumps())

    def get_has_unit_sub_ununit_topics(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        topics = self.routes.unit_topics(
            lambda flag: bool(flag & TOPIC_SYS_FLAG_UNIT_SUB) and not flag & TOPIC_SYS_FLAG_UNIT
        )
        return req.make_response(body=topics.dumps())

    def delete_topic(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        h = DeleteTopicFromNamesrvRequestHeader.from_ext_fields(req.ext_fields)
        self.routes.delete_topic(h.topic, h.cluster_name)
        return req.make_response()

    def wipe_write_perm(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        h = WipeWritePermOfBrokerRequestHeader.from_ext_fields(req.ext_fields)
        count = self.routes.wipe_write_perm(h.broker_name)
        return req.make_response(ext_fields=WipeWritePermOfBrokerResponseHeader(count).to_ext_fields())

    def add_write_perm(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        h = AddWritePermOfBrokerRequestHeader.from_ext_fields(req.ext_fields)
        count = self.routes.add_write_perm(h.broker_name)
        return req.make_response(ext_fields=AddWritePermOfBrokerResponseHeader(count).to_ext_fields())

    # ------------------------------------------------------ config (docs/wire-protocol.md §nameserver-config)

    def update_config(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        try:
            props = parse_properties(req.body.decode())
        except (UnicodeDecodeError, ConfigError):
            return req.make_response(ResponseCode.SYSTEM_ERROR, "string2Properties error")
        if self.config.black_list() & props.keys():
            return req.make_response(ResponseCode.NO_PERMISSION, "Can not update config in black list.")
        refuse_unsafe(props, req.ext_fields)
        apply_properties(self.config, props)
        path = self.config.config_store_file
        write_atomically(path, to_properties(self.config).encode(), config_file_mode(path, self.config))
        log.info("namesrv config updated from %s: %s", conn.peer, sorted(props))
        return req.make_response()

    def get_config(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        effective = {"rocketmqHome": self.config.rocketmq_home or os.getcwd()}
        return req.make_response(body=wire_properties(self.config, req.ext_fields, effective))


def apply_properties(config: NamesrvConfig, props: dict[str, str]) -> None:
    """Set the fields named by RocketMQ keys; unknown keys and bad values raise RemotingCommandError."""
    try:
        updates = coerce_properties(config, props, ignore_unknown=False)
    except ConfigError as exc:
        raise RemotingCommandError(ResponseCode.SYSTEM_ERROR, str(exc)) from None
    for name, value in updates.items():
        setattr(config, name, value)


def _cap_refusal(h: RegisterBrokerRequestHeader, added: int, held: int, cap: int) -> str:
    return (
        f"broker {h.broker_name} at {h.broker_addr} would add {added} route entries (topics on brokers "
        f"and broker addresses) to the {held} held, over routeMaxQueueDatas={cap}; raise it in "
        "namesrv.properties"
    )
