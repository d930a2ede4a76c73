"""``BrokerContext``: what a request processor, the delay and transaction services and the metrics
endpoint may use of the broker.

They depend on this protocol, not on :class:`daemon.broker.broker.Broker`, which satisfies it
structurally: the broker module imports them, nothing imports the broker back, and a test can hand a
processor a narrower fake. Everything named here is a store, a manager or a figure the processors
already share; lifecycle (start, stop, registration loops) stays the broker's own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from daemon.acl.plain import AclFiles
from daemon.broker.config import BrokerConfig
from daemon.broker.ha import HAMaster, HASlave
from daemon.broker.headers import EndTransactionRequestHeader
from daemon.broker.long_poll import PullRequestHoldService
from daemon.broker.loopwatch import LoopWatch
from daemon.broker.managers.consumers import ConsumerManager
from daemon.broker.managers.groups import SubscriptionGroupManager
from daemon.broker.managers.locks import RebalanceLockManager
from daemon.broker.managers.producers import ProducerManager
from daemon.broker.managers.topics import TopicConfigManager
from daemon.broker.polls import PollBudget
from daemon.broker.pop import PopService
from daemon.broker.stats import BrokerStats
from daemon.coalesce import Coalesced
from daemon.dledger.server import DLedgerServer
from daemon.protect import Peer
from daemon.remoting.client import Transport
from daemon.remoting.command import RemotingCommand
from daemon.remoting.connection import Connection
from daemon.remoting.server import RemotingServer
from daemon.remoting.tls import TlsSettings
from store.api import MessageStore
from store.config_files import ConsumerOffsetManager
from store.message import Message, StoredMessage
from store.results import PutResult

_T = TypeVar("_T")


class Transactions(Protocol):
    """END_TRANSACTION's way into the transaction service (which itself depends on the context)."""

    async def end(self, h: EndTransactionRequestHeader) -> None: ...


class Backlog(Protocol):
    """One real topic's pending timer messages (daemon.broker.timer.TopicBacklog)."""

    @property
    def topic(self) -> str: ...
    @property
    def pending(self) -> int: ...
    @property
    def next_due_ms(self) -> int: ...


class Timers(Protocol):
    """The send path's and the admin views' way into the timer service (daemon.broker.timer)."""

    delivered: int

    def park(self, topic: str, queue_id: int, props: dict[str, str]) -> tuple[str, int]: ...
    async def recall(self, topic: str, unique_key: str) -> bool: ...
    def backlog(self, *, fresh: bool = False) -> Sequence[Backlog]: ...


class BrokerContext(Protocol):
    config: BrokerConfig
    store: MessageStore
    topics: TopicConfigManager
    groups: SubscriptionGroupManager
    offsets: ConsumerOffsetManager
    consumers: ConsumerManager
    producers: ProducerManager
    locks: RebalanceLockManager
    stats: BrokerStats
    loop_watch: LoopWatch
    hold: PullRequestHoldService
    #: POP consumption (5.x): in-flight messages per group, their handles and their revive.
    pop: PopService
    #: The pops waiting for messages (remoting POP_MESSAGE, gRPC ReceiveMessage), by connection and host.
    polls: PollBudget
    #: The gRPC front's open Telemetry streams, by connection and host.
    streams: PollBudget
    server: RemotingServer
    #: The transport to NameServers and other brokers; the TLS settings every listener takes.
    client: Transport
    tls_settings: TlsSettings
    #: Replication: the HA listener, and on a slave the client of its master.
    ha_master: HAMaster | None
    ha_slave: HASlave | None
    #: DLedger mode: this broker's member of its Raft group (None: master/slave replication).
    dledger: DLedgerServer | None
    #: On a slave: offsets clients committed to it (group, topic, queue id -> offset), handed on to the
    #: master at the next metadata sync.
    slave_commits: dict[tuple[str, str, int], int]
    #: The ACL files when ``aclEnable`` is on; None: no ACL.
    acl_files: AclFiles | None
    #: A put whose producer waits for its fsync (SYNC_FLUSH) runs in the flush pool (:meth:`offload`), where
    #: concurrent puts share one fsync. (An attribute: the compiled send path reads it on every send.)
    offloads_puts: bool
    #: "starting", "serving" or "stopping" (``/healthz``).
    state: str
    #: topics.json written once for a burst of creations; their registration with the NameServers.
    persist_topics: Coalesced
    register_topics: Coalesced

    @property
    def addr(self) -> str: ...
    @property
    def transactions(self) -> Transactions: ...
    @property
    def timers(self) -> Timers: ...
    def schedule_register(self, topic: str | None = None) -> None: ...
    def runtime_info(self) -> dict[str, str]: ...
    def trusted(self, conn: Connection, request: RemotingCommand) -> bool: ...
    def creation_refusal(self, peer: Peer, what: str) -> str | None: ...
    def parking_refusal(self, peer: Peer, topic: str) -> str | None: ...
    def holds_unconfigured_queue(self, topic: str, queue_id: int) -> bool: ...
    def lock_refusal(self, conn: Connection, group: str, client_id: str) -> str | None: ...
    def lock_host(self, conn: Connection) -> str | None: ...
    def view_refusal(self, conn: Connection, topic: str) -> str | None: ...
    def indexed_message(self, offset: int) -> StoredMessage | None: ...
    async def offload(self, put: Callable[[_T], PutResult], arg: _T) -> PutResult: ...
    async def put(self, msg: Message) -> PutResult: ...
    async def held(self, result: PutResult) -> PutResult: ...
