"""Replication state of broker groups (``mqctl broker ha status``), from each broker's runtime info."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

from daemon.remoting.errors import RemotingError
from mqctl.admin.client import Admin
from mqctl.output import Rows
from mqctl.services.cluster import BrokerRow, brokers
from mqctl.units import server_float, server_int

if TYPE_CHECKING:
    from daemon.remoting.command import RemotingCommand
    from mqctl.tls import TlsOptions


@dataclass
class HAStatus:
    """One broker's replication state. ``acked_offset``: on a master the highest offset a slave acked,
    on a slave its own CommitLog end; ``lag_bytes``: how far that is behind the group's master."""

    cluster: str
    broker_name: str
    broker_id: int
    addr: str
    role: str | None = None
    connected: bool | None = None
    #: A master's slaves and a slave's master by broker address as registered (``ADDR (id N)``), else by
    #: the HA connection's address; DLedger mode: the members (``n1 match 812 lag 0``) or the leader.
    peers: str | None = None
    #: Master/slave: the HA connections' addresses behind ``peers`` (a master's: each slave's end, a
    #: source port; a slave's: its master's HA port), in the same order.
    peer_ha_addrs: str | None = None
    commitlog_max_offset: int | None = None
    acked_offset: int | None = None
    lag_bytes: int | None = None
    #: On a master, the slowest slave's age of its oldest unacked byte (as the master sent it).
    lag_seconds: float | None = None
    #: Records this broker set aside because they were not its master's (a divergent tail), and where.
    diverged_records: int | None = None
    quarantine: str | None = None
    #: A slave's replica mark: the CommitLog offset up to which its log is known to be its master's.
    replica_mark: int | None = None
    #: A slave's: the identity of the master's store whose records its mark counts (None: not known).
    replica_master: str | None = None
    #: A slave's: that master's incarnation its mark's records were last copied from (None: not known).
    replica_incarnation: str | None = None
    #: The broker's store's identity (ours: a slave's mark names its master's by it).
    store_identity: str | None = None
    #: A master's: the incarnation its store runs in (``ID@START``'s id: a new one at each start as a
    #: master, kept in its history; docs/replication.md §incarnations).
    incarnation: str | None = None
    #: The bytes past the mark a slave holds and does not serve until its master answers the divergence
    #: check (it restarted while its master was down); None when it holds none back.
    held_back_bytes: int | None = None
    #: DLedger mode: the member's id in ``dLegerPeers`` (n0, n1...): what ``peers`` and ``ha transfer --to``
    #: name it by.
    member: str | None = None
    #: DLedger mode: the member's Raft role (LEADER, FOLLOWER, CANDIDATE), term and committed entry index.
    raft_role: str | None = None
    term: int | None = None
    commit_index: int | None = None
    #: DLedger mode: why the member grants no vote and stands for no election (it started without its
    #: log or its vote file, and has not caught up with a leader yet); None while it votes.
    abstains: str | None = None
    #: DLedger mode: how the member's peer channel is guarded (mutual TLS, or plaintext and where).
    channel: str | None = None
    #: DLedger mode, on the leader: the group's size (itself and every peer it replicates to).
    members: int | None = None
    error: str | None = None

    def __post_init__(self) -> None:
        #: A slave's end of its HA connection (``haClientAddress``), to match its master's list; not shown.
        self._ha_client: str | None = None


#: The columns a table shows by default (kubectl's, mqadmin's: what tells whether replication is well);
#: the rest with ``-o wide``, and all of them in JSON and YAML.
NARROW = (
    "broker_name",
    "broker_id",
    "addr",
    "role",
    "raft_role",
    "abstains",
    "connected",
    "peers",
    "lag_bytes",
    "lag_seconds",
    "diverged_records",
    "held_back_bytes",
    "error",
)


def _int(text: str | None) -> int | None:
    """An offset, count or size of the runtime info: below 0 none."""
    return server_int(text, least=0)


def _peer(fields: list[str]) -> str:
    """A leader's follower: ``n1 match 812 lag 0``, or ``n2 DOWN (no answer), match 790`` for one that does
    not answer (its lag in entries stays where it stopped: nothing new reaches it to count)."""
    name, match, lag = fields[:3]
    if fields[3:4] == ["down"]:
        return f"{name} DOWN (no answer), match {match}"
    return f"{name} match {match} lag {lag}"


def _leader_peers(table: dict[str, str]) -> list[list[str]]:
    """The other members a DLedger leader reports in its runtime info (``dledgerPeers``); none elsewhere."""
    return [p.split("/") for p in table.get("dledgerPeers", "").split(";") if p]


def dledger_members(table: dict[str, str]) -> int | None:
    """How many members a DLedger group is configured with, from its leader's runtime info; None from any
    other broker (a follower, a master/slave one): a dead member is no longer registered to be counted."""
    peers = _leader_peers(table)
    return 1 + len(peers) if peers else None


def members_missing(name: str, registered: int, configured: int) -> str:
    """``check cluster``'s and ``check ha``'s words for a DLedger group with members unregistered."""
    return f"{name}: {registered} of its {configured} DLedger members registered"


async def _one(admin: Admin, row: BrokerRow) -> HAStatus:
    out = HAStatus(row.cluster, row.broker_name, row.broker_id, row.addr)
    try:
        table = await admin.broker_runtime_info(row.addr)
    except RemotingError as exc:
        out.error = str(exc)
        return out
    out.role = table.get("brokerRole")
    out.commitlog_max_offset = _int(table.get("commitLogMaxOffset"))
    out.diverged_records = _int(table.get("haDivergedRecords"))
    out.quarantine = table.get("haDivergedQuarantine")
    out.store_identity = table.get("haStoreIdentity") or None
    if table.get("haIncarnations") and table.get("brokerRole") != "SLAVE":
        out.incarnation = table["haIncarnations"].rsplit(";", 1)[-1].split("@", 1)[0] or None
    if "dledgerRole" in table:  # DLedger mode: peers, their match index and lag in entries (leader)
        out.member = table.get("dledgerSelfId") or None
        out.raft_role = table["dledgerRole"]
        out.term = _int(table.get("dledgerTerm"))
        # -1 before any entry is committed, as DLedger writes it
        out.commit_index = server_int(table.get("dledgerCommittedIndex"), least=-1)
        out.channel = table.get("dledgerChannel")
        out.abstains = table.get("dledgerAbstains") or None
        peers = _leader_peers(table)
        if peers:
            out.peers = ", ".join(_peer(p) for p in peers if len(p) >= 3)
            out.lag_bytes = None
            out.members = dledger_members(table)
        else:
            leader = table.get("dledgerLeaderId")
            out.peers = f"leader {leader}" if leader else None
            # a follower's log end against the leader's: its lag in bytes, as a slave's (check ha's rules)
            out.acked_offset = out.commitlog_max_offset
        out.connected = bool(table.get("dledgerLeaderId"))
    elif "haMasterAddress" in table:  # a slave
        out.connected = table.get("haMasterConnected") == "true"
        out.peer_ha_addrs = table.get("haMasterAddress") or None
        out.peers = out.peer_ha_addrs  # its master's broker address once the group is read (_name_peers)
        out.acked_offset = out.commitlog_max_offset
        out._ha_client = table.get("haClientAddress") or None
        out.replica_mark = _int(table.get("haReplicaMark"))
        out.replica_master = table.get("haReplicaMaster") or None
        out.replica_incarnation = table.get("haReplicaIncarnation") or None
        out.held_back_bytes = _int(table.get("haHeldBackBytes")) or None
    elif "haSlaveCount" in table:
        slaves = [s.split("/") for s in table.get("haSlaves", "").split(";") if s]
        out.connected = bool(slaves)
        out.peer_ha_addrs = ", ".join(s[0] for s in slaves) or None
        out.peers = out.peer_ha_addrs
        out.acked_offset = _int(table.get("haPush2SlaveMaxOffset")) if slaves else None
        lags = [lag for s in slaves if len(s) > 2 and (lag := server_float(s[2], least=0)) is not None]
        out.lag_seconds = max(lags) if lags else None
    return out


async def ha_status(admin: Admin, cluster: str | None = None, broker: str | None = None) -> Rows:
    """Every broker of the cluster (or the group of ``broker``, an address), master first in each group."""
    rows = await brokers(admin, cluster)
    if broker is not None:
        names = {r.broker_name for r in rows if r.addr == broker}
        rows = [r for r in rows if r.broker_name in names] or [BrokerRow("", "", 0, broker)]
    states = list(await asyncio.gather(*(_one(admin, r) for r in rows)))
    master_end = {s.broker_name: s.commitlog_max_offset for s in states if s.broker_id == 0}
    for s in states:
        end = master_end.get(s.broker_name)
        if end is not None and s.acked_offset is not None:
            s.lag_bytes = max(0, end - s.acked_offset)
    _name_peers(states)
    return Rows.of(HAStatus, states, narrow=NARROW)


def _registered(state: HAStatus) -> str:
    return f"{state.addr} (id {state.broker_id})"


def _name_peers(states: list[HAStatus]) -> None:
    """Name a master's slaves, and a slave's master, by the broker address each registered (what every
    other command takes), not by the HA connection's: a master sees a slave's source port. A slave's
    ``haClientAddress`` is its end of that connection; else (a RocketMQ slave, an address rewritten on
    the way) the one slave of the group on the connection's host. One not found keeps the HA address.
    A master with none connected says why in ``peers``: no slave connected, or none registered."""
    for master in states:
        if master.broker_id != 0 or master.member is not None or master.error is not None:
            continue
        slaves = [s for s in states if s.broker_name == master.broker_name and s.broker_id != 0]
        for slave in slaves:
            if slave.member is None and slave.peer_ha_addrs is not None:
                slave.peers = _registered(master)
        named = []
        for ha_addr in master.peer_ha_addrs.split(", ") if master.peer_ha_addrs else ():
            found = [s for s in slaves if s._ha_client == ha_addr]
            if not found:
                host = ha_addr.rpartition(":")[0]
                found = [s for s in slaves if s._ha_client is None and s.addr.rpartition(":")[0] == host]
            named.append(_registered(found[0]) if len(found) == 1 else f"HA client {ha_addr}")
        master.peers = ", ".join(named) or None
        if master.connected is False:  # no slave connected: say so, and whether one is registered
            master.peers = "no slave connected" if slaves else "no slave registered"
            # a master has no connection of its own to show: "no" read as one cut off from its group
            master.connected = False if slaves else None


@dataclass
class TransferResult:
    """``broker ha transfer``: who led before, who was asked to lead, and the DLedger answer."""

    broker_name: str
    from_id: str
    to_id: str
    term: int
    code: int
    result: str


#: How long a transfer waits for its member to copy the leader's topics and groups: a member copies them
#: from the master every 10 s (4.9.8's SlaveSynchronize), plus a margin for a slow copy.
COPY_WAIT_S = 15.0


async def _not_copied(admin: Admin, leader: str, member: str) -> list[str]:
    """The topics and groups the leader holds and ``member`` does not (yet)."""
    topics = set(await admin.topic_configs(leader)) - set(await admin.topic_configs(member))
    groups = set(await admin.group_configs(leader)) - set(await admin.group_configs(member))
    return sorted(topics) + [f"group {g}" for g in sorted(groups)]


async def _wait_for_copies(admin: Admin, leader: BrokerRow, to: str, cluster: str | None) -> None:
    """Wait until member ``to`` holds the leader's topics and groups: they are no part of the Raft log, so a
    member that becomes master without one refuses it, and the others drop it at their next copy."""
    from mqctl.errors import ConflictError

    members = [
        r for r in await brokers(admin, cluster) if r.broker_name == leader.broker_name and r.broker_id
    ]
    infos = await asyncio.gather(*(admin.broker_runtime_info(r.addr) for r in members))
    addr = next((r.addr for r, t in zip(members, infos, strict=True) if t.get("dledgerSelfId") == to), None)
    if addr is None:
        return  # not registered as a slave (yet): nothing to compare, DLedger answers for it
    deadline = asyncio.get_running_loop().time() + COPY_WAIT_S
    while missing := await _not_copied(admin, leader.addr, addr):
        if asyncio.get_running_loop().time() > deadline:
            shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
            raise ConflictError(
                f"{to} has not copied {shown} from the leader in {COPY_WAIT_S:g} s: as master it would lack them",
                hint="members copy topics and groups from the master every 10 s; --force hands over anyway",
            )
        await asyncio.sleep(0.5)


def _refusal_hint(code: int, to: str, addr: str) -> str | None:
    """What a refused transfer's DLedger code means for the operator: NETWORK_ERROR and TIMEOUT are the
    leader not reaching ``to`` (a member down, as after a kill), which the code's name alone did not say."""
    from daemon.dledger.protocol import DLedgerResponseCode

    if code in (DLedgerResponseCode.NETWORK_ERROR, DLedgerResponseCode.TIMEOUT):
        return (
            f"the leader could not reach {to} (DLedger port {addr}): is it running? "
            "'mqctl broker ha status' shows each member"
        )
    if code == DLedgerResponseCode.FALL_BEHIND_TOO_MUCH:
        return f"{to} is too far behind the leader's log: try again once 'mqctl broker ha status' shows it caught up"
    if code == DLedgerResponseCode.TAKE_LEADERSHIP_FAILED:
        return (
            f"{to} may not lead now: it abstains from elections (it lost its store and has not caught up), "
            "holds an entry it found damaged, or its store refuses writes; 'mqctl broker ha status' says "
            "which member abstains and why"
        )
    return None


async def _on_the_channel(
    admin: Admin, addr: str, command: RemotingCommand, channel: TlsOptions | None
) -> RemotingCommand:
    """Send ``command`` to a member's DLedger port: under haTls that channel admits a member's certificate
    only, often of a CA of the members' own (``channel``), which the NameServers and brokers do not serve."""
    from daemon.remoting.client import RemotingClient
    from daemon.remoting.errors import RemotingTlsError
    from mqctl.errors import TlsError

    client = RemotingClient(ssl=channel.context()) if channel is not None else admin.client
    try:
        return await client.invoke(addr, command, max(admin.timeout, 15.0))
    except RemotingTlsError as exc:
        raise TlsError(
            f"DLedger channel {addr}: {exc}",
            hint="it admits its members' hosts only (run this on one) and, under haTls, a member's "
            "certificate: --member-cert server.pem --member-key server.key (mqctl tls init's), or with "
            "tls.member.trustCertPath --member-ca member-ca.pem --member-cert member.pem --member-key member.key",
        ) from None
    finally:
        if client is not admin.client:
            await client.close()


async def transfer(
    admin: Admin,
    to: str,
    cluster: str | None = None,
    broker: str | None = None,
    *,
    force: bool = False,
    channel: TlsOptions | None = None,
) -> TransferResult:
    """Hand the leadership of a DLedger group to member ``to`` (DLedger's LEADERSHIP_TRANSFER, 51005, sent
    to the leader's DLedger port, as DLedger's ``LeadershipTransferCommand`` does)."""
    from daemon.dledger.protocol import (
        DLedgerRequestCode,
        DLedgerResponseCode,
        LeadershipTransferRequest,
        LeadershipTransferResponse,
    )
    from daemon.dledger.server import parse_peers
    from daemon.remoting.command import RemotingCommand
    from mqctl.errors import BrokerError, NotFoundError, UsageError, translate

    rows = [
        r for r in await brokers(admin, cluster) if r.broker_id == 0 and (broker is None or r.addr == broker)
    ]
    infos = [(r, await admin.broker_runtime_info(r.addr)) for r in rows]
    groups = [(r, t) for r, t in infos if t.get("dledgerRole") == "LEADER"]
    if not groups:
        raise NotFoundError("no DLedger group leader found" + (f" at {broker}" if broker else ""))
    if len(groups) > 1:
        raise UsageError("several DLedger groups: name the leader with --broker ADDR")
    row, table = groups[0]
    peers = parse_peers(table.get("dledgerPeerAddrs", ""))
    leader = table["dledgerSelfId"]
    if to not in peers:
        raise UsageError(f"--to {to}: not a member of {row.broker_name} ({', '.join(peers)})")
    term = int(table["dledgerTerm"])
    if to == leader:  # DLedger answers UNKNOWN_MEMBER (a leader is not its own peer): read as a typo in --to
        return TransferResult(
            row.broker_name, leader, to, term, int(DLedgerResponseCode.SUCCESS), "ALREADY_LEADER"
        )
    if not force:
        await _wait_for_copies(admin, row, to, cluster)
    # no leaderId/localId, as DLedger's LeadershipTransferCommand: mqctl is no member, and the leader's peer
    # gate refuses a request that names one as its sender from another host
    req = LeadershipTransferRequest(
        group=table.get("dledgerGroup"),
        remote_id=leader,
        term=term,
        transfer_id=leader,
        transferee_id=to,
    )
    command = RemotingCommand.request(int(DLedgerRequestCode.LEADERSHIP_TRANSFER), {}, req.encode())
    try:
        response = await _on_the_channel(admin, peers[leader], command, channel)
    except RemotingError as exc:  # the leader went away mid-transfer: the outcome is the group's to tell
        error = translate(exc)
        error.message = f"leadership transfer {leader} -> {to}: no answer from the leader: {error.message}"
        error.hint = (
            f"the leader ({peers[leader]}) may have gone down mid-transfer and the group elects again; "
            "'mqctl broker ha status' shows who leads"
        )
        raise error from None
    answer = LeadershipTransferResponse.decode(response.body)
    code = DLedgerResponseCode(answer.code) if answer.code in DLedgerResponseCode._value2member_map_ else None
    name = code.name if code is not None else str(answer.code)
    if answer.code != DLedgerResponseCode.SUCCESS:
        raise BrokerError(
            f"leadership transfer {leader} -> {to} refused: {name}",
            code=answer.code,
            hint=_refusal_hint(answer.code, to, peers[to]),
        )
    return TransferResult(row.broker_name, leader, to, answer.term, answer.code, name)
