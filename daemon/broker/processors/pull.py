"""PULL_MESSAGE (11) with long polling (docs/wire-protocol.md §pulls-and-long-polling).

A pull that finds nothing is held with `PullRequestHoldService.hold`: a callback, no task, that reads
again when its queue grows or its time is up and answers with the request's opaque, so the connection
never blocks other requests. A long-polling pull at its queue's end (the common one: the next pull after
a held pull's answer) is held from the queue's offsets alone (`MessageStore.nothing_at`), without a read
or a result; its permissions, group, topic, queue and subscription are checked first all the same. The
response body is the raw stored records concatenated, straight from the store's mapping.

A read that meets a damaged ConsumeQueue unit is answered after the store heals the queue from the
CommitLog, which can take seconds on a large store: the heal runs in a worker thread, so the event loop
keeps serving other connections, and later pulls of that queue wait for the same heal.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import operator
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from daemon.broker.filter import SUB_ALL, build_subscription, is_tag_type, tag_codes
from daemon.broker.headers import (
    PULL_FLAG_COMMIT_OFFSET,
    PULL_FLAG_SUBSCRIPTION,
    PULL_FLAG_SUSPEND,
    PullMessageRequestHeader,
)
from daemon.broker.processors import FAQ, fail, system_error
from daemon.broker.processors.offset import _HOT_RATIO, _memory_bytes
from daemon.protect import PARKING_TOPICS
from daemon.remoting import fields
from daemon.remoting.bodies import PermName
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.connection import Connection, Processor, error_response
from daemon.remoting.errors import RemotingCommandError
from daemon.remoting.limits import WarningGate
from store.config import SLAVE
from store.errors import DamagedUnitError
from store.names import REVIVE_TOPIC_PREFIX
from store.results import GetMessageStatus, GetResult

if TYPE_CHECKING:
    from daemon.broker.bodies import SubscriptionData
    from daemon.broker.context import BrokerContext

log = logging.getLogger(__name__)
_unheld_warnings = WarningGate(log)

#: The longest a pull is held for new messages, whatever its suspendTimeoutMillis asks (the Java client
#: asks 15 s and waits 30 s for the answer).
MAX_PULL_HOLD_MS = 60_000
MAX_HEALS_PER_PULL = 8  # each heal repairs one damaged stretch; past this many the read heals inline

_S = GetMessageStatus
_CODES: dict[GetMessageStatus, int] = {
    _S.FOUND: ResponseCode.SUCCESS,
    _S.NO_MATCHED_MESSAGE: ResponseCode.PULL_RETRY_IMMEDIATELY,
    _S.MESSAGE_WAS_REMOVING: ResponseCode.PULL_RETRY_IMMEDIATELY,
    _S.OFFSET_FOUND_NULL: ResponseCode.PULL_NOT_FOUND,
    _S.OFFSET_OVERFLOW_ONE: ResponseCode.PULL_NOT_FOUND,
    _S.OFFSET_OVERFLOW_BADLY: ResponseCode.PULL_OFFSET_MOVED,
    _S.OFFSET_TOO_SMALL: ResponseCode.PULL_OFFSET_MOVED,
}
#: Each status's remark (an Enum's ``value`` is a property that runs interpreted; the status hashes by
#: identity).
_REMARKS: dict[GetMessageStatus, str] = {status: status.value for status in GetMessageStatus}
_RAW = operator.attrgetter("raw")  # (a generator's frame per pull runs interpreted)
#: The header's fields, for `fields.parse_header` (compiled, and without the dataclass's interpreted
#: ``__init__``: the classmethod `from_ext_fields` would be two interpreted frames a pull).
_PLAN = PullMessageRequestHeader._plan()
_ATTRS = PullMessageRequestHeader._attrs()
#: Tag subscriptions carried in pulls, parsed: a push consumer sends the same expression with every pull.
_KEPT_EXPRESSIONS = 256


def _failed(conn: Connection, request: RemotingCommand, exc: Exception) -> None:
    """A held pull's answer failed: answered as the dispatcher answers a processor's exception."""
    if not isinstance(exc, RemotingCommandError):
        log.exception("pull from %s failed", conn.peer)
    conn.reply(request, error_response(request, exc))


def processors(broker: BrokerContext) -> dict[int, Processor]:
    return {RequestCode.PULL_MESSAGE: PullProcessor(broker).pull}


class PullProcessor:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker
        #: A consumer further than this behind the CommitLog's end reads from disk: "consumes slowly".
        self.hot_bytes = int(_memory_bytes() * _HOT_RATIO)
        self._heals: dict[tuple[str, int], asyncio.Future[None]] = {}  # queue -> its heal, running
        #: (expression, type) of a pull's own subscription -> its tag codes, for tag expressions only (whether
        #: another type is allowed is the broker's setting of the moment, checked on every pull)
        self._expressions: dict[tuple[str | None, str | None], frozenset[int] | None] = {}

    def _codes(self, h: PullMessageRequestHeader, conn: Connection) -> frozenset[int] | None:
        """The tag codes to filter with, from the subscription :meth:`_subscription` checks; a tag
        expression the pulls carry is parsed once."""
        if h.sys_flag & PULL_FLAG_SUBSCRIPTION:
            key = (h.subscription, h.expression_type)
            try:
                return self._expressions[key]
            except KeyError:
                pass
            sub = self._subscription(h, conn)
            codes = tag_codes(sub)
            if is_tag_type(sub.expression_type):
                if len(self._expressions) >= _KEPT_EXPRESSIONS:
                    self._expressions.clear()
                self._expressions[key] = codes
            return codes
        sub = self._subscription(h, conn)
        return None if sub.sub_string == SUB_ALL else tag_codes(sub)

    def _subscription(self, h: PullMessageRequestHeader, conn: Connection) -> SubscriptionData:
        """The subscription to filter with: from the header, or from the heartbeat of the puller's own
        connection (step 4; 4.9.8 reads the group's, which any member's heartbeat may rewrite), the
        group's when that connection registered none."""
        if h.sys_flag & PULL_FLAG_SUBSCRIPTION:
            sub = build_subscription(h.topic, h.subscription, h.expression_type)
        else:
            info = self.broker.consumers.get(h.consumer_group)
            if info is None:
                raise fail(
                    ResponseCode.SUBSCRIPTION_NOT_EXIST,
                    "the consumer's group info not exist" + FAQ,
                )
            group = self.broker.groups.get(h.consumer_group)
            if (
                info.message_model == "BROADCASTING"
                and group is not None
                and not group.consume_broadcast_enable
            ):
                raise fail(
                    ResponseCode.NO_PERMISSION,
                    f"the consumer group[{h.consumer_group}] can not consume by broadcast way",
                )
            found = info.own_subscription(conn, h.topic)
            if found is None:
                raise fail(ResponseCode.SUBSCRIPTION_NOT_EXIST, "the consumer's subscription not exist" + FAQ)
            if found.sub_version < h.sub_version:
                raise fail(ResponseCode.SUBSCRIPTION_NOT_LATEST, "the consumer's subscription not latest")
            sub = found
        if not is_tag_type(sub.expression_type) and not self.broker.config.enable_property_filter:
            raise system_error(
                f"The broker does not support consumer to filter message by {sub.expression_type}"
            )
        return sub

    def _check(self, h: PullMessageRequestHeader, conn: Connection) -> None:
        """Steps 1–3: permissions, group and topic."""
        broker = self.broker
        if not broker.config.broker_permission & PermName.READ:
            raise fail(
                ResponseCode.NO_PERMISSION,
                f"the broker[{broker.config.broker_ip1}] pulling message is forbidden",
            )
        if h.topic in PARKING_TOPICS or h.topic.startswith(REVIVE_TOPIC_PREFIX):  # (no call per pull)
            parked = broker.parking_refusal(conn, h.topic)
            if parked is not None:
                raise fail(ResponseCode.NO_PERMISSION, parked)
        group = broker.groups.find(h.consumer_group, conn)
        if group is None:
            raise fail(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                f"subscription group [{h.consumer_group}] does not exist, {FAQ}",
            )
        if not group.consume_enable:
            raise fail(ResponseCode.NO_PERMISSION, f"subscription group no permission, {h.consumer_group}")
        config = broker.topics.get(h.topic)
        if config is None:
            raise fail(ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist, apply first please! {FAQ}")
        if not config.perm & PermName.READ:
            raise fail(ResponseCode.NO_PERMISSION, f"the topic[{h.topic}] pulling message is forbidden")
        if h.queue_id < 0 or (
            h.queue_id >= config.read_queue_nums and not broker.holds_unconfigured_queue(h.topic, h.queue_id)
        ):
            raise system_error(
                f"queueId[{h.queue_id}] is illegal, topic:[{h.topic}] topicConfig.readQueueNums:"
                f"[{config.read_queue_nums}] consumer:[{h.consumer_group}]"
            )

    def _read(
        self, h: PullMessageRequestHeader, codes: frozenset[int] | None, *, defer_heal: bool = True
    ) -> tuple[int, GetResult]:
        """Read the queue; raises :class:`DamagedUnitError` (``defer_heal``) for :meth:`_healed_read`."""
        result = self.broker.store.get_messages(
            h.consumer_group,
            h.topic,
            h.queue_id,
            h.queue_offset,
            h.max_msg_nums,
            codes,
            defer_heal=defer_heal,
        )
        code = _CODES.get(result.status)
        if code is None:  # NO_MESSAGE_IN_QUEUE, NO_MATCHED_LOGIC_QUEUE
            code = ResponseCode.PULL_NOT_FOUND if h.queue_offset == 0 else ResponseCode.PULL_OFFSET_MOVED
        return code, result

    async def _healed_read(
        self, h: PullMessageRequestHeader, codes: frozenset[int] | None, damage: DamagedUnitError | None
    ) -> tuple[int, GetResult]:
        """Read once the queue's heal is done: the one running, or one started for ``damage`` (or for damage
        the read meets), in a worker thread."""
        key = (h.topic, h.queue_id)
        for _ in range(MAX_HEALS_PER_PULL):
            heal = self._heals.get(key)
            if heal is None and damage is not None:
                heal = self._heals[key] = asyncio.ensure_future(
                    asyncio.to_thread(self.broker.store.heal, damage)
                )
                heal.add_done_callback(
                    lambda done: self._heals.pop(key) if self._heals.get(key) is done else None
                )
            if heal is not None:
                await asyncio.shield(heal)  # a pull whose client left does not cancel the heal
            try:
                return self._read(h, codes)
            except DamagedUnitError as e:
                damage = e
        return self._read(h, codes, defer_heal=False)

    def pull(
        self, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand | Awaitable[RemotingCommand | None] | None:
        """Synchronous unless its queue is being healed: no task per pull (None: held, answered later)."""
        h = fields.parse_header(PullMessageRequestHeader, _PLAN, _ATTRS, request.ext_fields)
        if h is None:
            raise PullMessageRequestHeader._field_error(request.ext_fields)
        self._check(h, conn)
        codes = self._codes(h, conn)
        if self._heals and (h.topic, h.queue_id) in self._heals:
            return self._after_heal(conn, request, h, codes, None)
        may_hold = True
        if h.sys_flag & PULL_FLAG_SUSPEND and self.broker.store.nothing_at(
            h.topic, h.queue_id, h.queue_offset
        ):
            # at the queue's end: what the read would find (nothing, PULL_NOT_FOUND) is known, so held now
            host = self._host(conn)
            if self._room(conn, host, h):
                self._commit(h)
                self._hold(conn, h, functools.partial(self._woken, conn, request, h, codes), host)
                return None
            may_hold = False  # over a bound: answered what the read finds, at once
        try:
            code, result = self._read(h, codes)
        except DamagedUnitError as damage:
            return self._after_heal(conn, request, h, codes, damage)
        return self._answer(conn, request, h, codes, code, result, may_hold)

    async def _after_heal(
        self,
        conn: Connection,
        request: RemotingCommand,
        h: PullMessageRequestHeader,
        codes: frozenset[int] | None,
        damage: DamagedUnitError | None,
        held: bool = False,
    ) -> RemotingCommand | None:
        """Answer after the queue's heal; a woken ``held`` pull answers itself with what the read found
        (never held again), as the dispatcher would answer, and returns None."""
        try:
            code, result = await self._healed_read(h, codes, damage)
            if not held:
                return self._answer(conn, request, h, codes, code, result)
            response = self._held_response(request, h, code, result)
        except Exception as exc:
            if not held:
                raise
            _failed(conn, request, exc)
            return None
        conn.reply(request, response)
        return None

    def _answer(
        self,
        conn: Connection,
        request: RemotingCommand,
        h: PullMessageRequestHeader,
        codes: frozenset[int] | None,
        code: int,
        result: GetResult,
        may_hold: bool = True,
    ) -> RemotingCommand | None:
        """Commit the offset the pull carries, then answer, or hold the pull when it found nothing (None:
        the held pull answers itself) unless its connection or host holds its bound already
        (:meth:`_room`; ``may_hold`` False: it was found so)."""
        self._commit(h)
        if code == ResponseCode.PULL_NOT_FOUND and h.sys_flag & PULL_FLAG_SUSPEND and may_hold:
            host = self._host(conn)
            if self._room(conn, host, h):
                self._hold(conn, h, functools.partial(self._woken, conn, request, h, codes), host)
                return None
        return self._response(request, h, code, result)

    def _host(self, conn: Connection) -> str:
        """The host whose budget ``conn``'s held pulls count against: its IP (an IPv6 peer's /64), "" on
        loopback (none)."""
        return self.broker.polls.host(conn.address[0])

    def _room(self, conn: Connection, host: str, h: PullMessageRequestHeader) -> bool:
        """Whether the pull ``h`` may be held: its connection holds fewer than maxHeldPullsPerConnection, and
        its host (beyond loopback) fewer than maxHeldPullsPerHost. Else it is answered at once, as 4.9.8
        answers a pull without the suspend flag (PULL_NOT_FOUND at the queue's end; a push consumer pulls
        again), and counted (`PullRequestHoldService.refused_owner`, `refused_host`)."""
        config = self.broker.config
        over = self.broker.hold.room(
            conn, host, config.max_held_pulls_per_connection, config.max_held_pulls_per_host
        )
        if not over:
            return True
        if over == 1:
            bound, key = config.max_held_pulls_per_connection, "maxHeldPullsPerConnection"
        else:
            bound, key = config.max_held_pulls_per_host, "maxHeldPullsPerHost"
        _unheld_warnings.warning(
            "pull of %s:%d from %s answered at once, not held: %d held pulls already (%s)",
            h.topic,
            h.queue_id,
            conn.peer,
            bound,
            key,
        )
        return False

    def _commit(self, h: PullMessageRequestHeader) -> None:
        if h.sys_flag & PULL_FLAG_COMMIT_OFFSET and self.broker.config.broker_role != SLAVE:
            self.broker.offsets.commit_offset(h.consumer_group, h.topic, h.queue_id, h.commit_offset)

    def _hold(
        self, conn: Connection, h: PullMessageRequestHeader, woken: Callable[[], None], host: str
    ) -> None:
        """Hold the pull ``h`` until its queue grows or its time is up, then call ``woken`` (:meth:`_woken`
        with the pull's connection, request and codes). It counts among the connection's requests awaiting
        an answer and on its host (:meth:`_room` checked first), and is held MAX_PULL_HOLD_MS at most (the time is the peer's word: a pull held for its
        24 days stayed held after its connection closed), or until its connection closes: the broker drops
        a closed connection's held pulls (`PullRequestHoldService.drop`)."""
        config = self.broker.config
        hold_ms = h.suspend_timeout_millis if config.long_polling_enable else config.short_polling_time_mills
        hold_ms = min(hold_ms, MAX_PULL_HOLD_MS)
        conn.holding()
        # held now, in the step of the read (or the offsets) that found nothing: a message stored after it
        # must wake it
        self.broker.hold.hold(h.topic, h.queue_id, h.queue_offset, hold_ms / 1000, woken, conn, host)

    def _woken(
        self,
        conn: Connection,
        request: RemotingCommand,
        h: PullMessageRequestHeader,
        codes: frozenset[int] | None,
    ) -> None:
        """A held pull's queue grew or its time is up: read again and answer, on the loop, without a task
        unless the queue is being healed."""
        conn.answered_later()
        if conn.is_closed:
            return  # dropped by the connection: nobody to answer
        try:
            if self._heals and (h.topic, h.queue_id) in self._heals:
                damage = None
            else:
                try:
                    code, result = self._read(h, codes)
                except DamagedUnitError as e:
                    damage = e
                else:
                    conn.reply(request, self._held_response(request, h, code, result))
                    return
            conn.track(asyncio.ensure_future(self._after_heal(conn, request, h, codes, damage, held=True)))
        except Exception as exc:
            _failed(conn, request, exc)

    def _held_response(
        self, request: RemotingCommand, h: PullMessageRequestHeader, code: int, result: GetResult
    ) -> RemotingCommand:
        if code == ResponseCode.PULL_NOT_FOUND:
            result.next_begin_offset = h.queue_offset
        return self._response(request, h, code, result)

    def _response(
        self, request: RemotingCommand, h: PullMessageRequestHeader, code: int, result: GetResult
    ) -> RemotingCommand:
        config = self.broker.config
        if code == ResponseCode.PULL_OFFSET_MOVED and config.broker_role == SLAVE:
            # a slave may lag: it never moves a consumer's offset (4.9.8, offsetCheckInSlave=false)
            code, result.next_begin_offset = ResponseCode.PULL_RETRY_IMMEDIATELY, h.queue_offset
        suggest = 0
        group = self.broker.groups.get(h.consumer_group) if config.slave_read_enable else None
        if group is not None:
            # 4.9.8: the group's broker, or whichBrokerWhenConsumeSlowly when the pulled data is cold
            cold = bool(result.messages) and (
                self.broker.store.max_phy_offset - result.messages[-1].phys_offset > self.hot_bytes
            )
            suggest = group.which_broker_when_consume_slowly if cold else group.broker_id
        # PullMessageResponseHeader's extFields, written out (its dataclass and renderer run interpreted)
        ext = {
            "suggestWhichBrokerId": str(suggest),
            "nextBeginOffset": str(result.next_begin_offset),
            "minOffset": str(result.min_offset),
            "maxOffset": str(result.max_offset),
        }
        body = b""
        if code == ResponseCode.SUCCESS:
            started = time.perf_counter_ns()
            body = b"".join(map(_RAW, result.messages))
            self.broker.stats.on_get(
                h.consumer_group,
                h.topic,
                h.queue_id,
                len(result.messages),
                len(body),
                time.perf_counter_ns() - started,
            )
        else:
            self.broker.stats.on_get_miss()
        return request.make_response(code, _REMARKS[result.status], ext, body)
