"""``Admin``: the standard 4.x request codes that mqadmin uses, as typed async calls.

Only the request codes of RocketMQ 4.x are used, so every call works against a real RocketMQ
cluster as well as against ours. NameServer requests go to the first NameServer that answers,
as RocketMQ's clients do; broker requests go to the address they name.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import math
import types
import typing
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

from daemon.broker import bodies as bb, headers as bh
from daemon.remoting import headers as h
from daemon.remoting.bodies import (
    ClusterInfo,
    KVTable,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicList,
    TopicRouteData,
)
from daemon.remoting.client import RemotingClient, Transport
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.errors import (
    RemotingCommandError,
    RemotingConnectError,
    RemotingProtocolError,
    is_acl_refusal,
)
from store import AUTO_CREATE_TOPIC, fastjson

log = logging.getLogger(__name__)

T = TypeVar("T")
H = TypeVar("H", bound=h.CommandHeader)

#: Answers meaning "not done, try later" (the retriable errors of docs/operations.md minus the flush and slave
#: timeouts, which come after the broker stored a message: sending again would duplicate it).
RETRIED_CODES = frozenset(
    {ResponseCode.SYSTEM_BUSY, ResponseCode.FLOW_CONTROL, ResponseCode.SERVICE_NOT_AVAILABLE}
)
#: Attempts after the first one's retriable answer.
RETRIES = 2
#: A read command's deadline in all (:func:`run_admin`): this many times the wait for each answer, and at
#: least READ_DEADLINE_FLOOR seconds. Each answer has its own wait, so a read of many brokers (asked a
#: bounded number at a time, some of its reads one after another) took as many waits as a slow or
#: hostile fleet made it.
READ_DEADLINE_ANSWERS = 4
READ_DEADLINE_FLOOR = 30.0
#: Addresses the deadline's error line names; the rest are counted.
NAMED_LATE = 20
#: What to check when the NameServer address answers as something else.
NOT_A_NAMESRV = " (-n/--namesrv wants a NameServer's HOST:PORT, 9876 by default; see 'mqctl context current')"


class Refused(RemotingCommandError):
    """NO_PERMISSION, and who answered it (``peer``; ``cluster``, a broker's): with several clusters on
    one NameServer an account may hold on one of them only, and an error naming nobody hid which."""

    def __init__(self, code: int, remark: str | None, *, peer: str, cluster: str | None) -> None:
        super().__init__(code, remark)
        self.peer = peer
        self.cluster = cluster
        #: Set by a command with ``-c`` that was not given one: its error suggests it.
        self.unscoped = False


class BrokerUnreachable(RemotingConnectError):
    """A broker (not a NameServer) that could not be reached: its hint is about the broker, not about
    which NameServers the context names."""


def _session_signer() -> Callable[[RemotingCommand], None] | None:
    """The invocation's ACL signer (mqctl.auth), or None: requests go unsigned."""
    from mqctl import auth

    credentials = auth.current()
    return credentials.signer() if credentials is not None else None


class Admin:
    """One admin session: a transport (a pooled TCP `RemotingClient` unless given) plus the NameServer list."""

    def __init__(self, namesrv: list[str], *, timeout: float = 5.0, client: Transport | None = None) -> None:
        self.namesrv = list(namesrv)
        self.timeout = timeout
        if client is None:
            from mqctl import tls

            client = RemotingClient(signer=_session_signer(), ssl=tls.session_context())
        self.client: Transport = client
        #: Requests asked and not answered yet, by address (a request stopped by the command's deadline
        #: stays counted: the deadline names its address).
        self.asking: Counter[str] = Counter()
        #: Broker address -> name, from the last cluster_info answer (the deadline's error line).
        self.broker_names: dict[str, str] = {}
        #: Broker name -> its cluster, from the same answer (a refusal's error line).
        self.broker_clusters: dict[str, str] = {}

    @contextlib.contextmanager
    def waiting_for(self, addr: str) -> Iterator[None]:
        """Count a request to ``addr`` as asked until it is answered (or fails)."""
        self.asking[addr] += 1
        try:
            yield
        except asyncio.CancelledError:
            raise  # (stopped unanswered: still counted)
        except BaseException:
            self._answered(addr)
            raise
        self._answered(addr)

    @contextlib.contextmanager
    def _naming_brokers(self, addr: str) -> Iterator[None]:
        """A connect failure to an address that is no NameServer of ours is a :class:`BrokerUnreachable`
        (a TLS failure stays what it is)."""
        try:
            yield
        except RemotingConnectError as exc:
            if type(exc) is not RemotingConnectError or addr in self.namesrv:
                raise
            raise BrokerUnreachable(exc.addr, exc.reason) from None

    def _answered(self, addr: str) -> None:
        self.asking[addr] -= 1
        if self.asking[addr] <= 0:
            del self.asking[addr]

    async def __aenter__(self) -> Admin:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.client.close()

    # ------------------------------------------------------------------------------------ plumbing

    async def call(
        self,
        addr: str,
        code: int,
        header: h.CommandHeader | None = None,
        body: bytes = b"",
        *,
        expect: tuple[int, ...] = (ResponseCode.SUCCESS,),
        extra: dict[str, str] | None = None,
    ) -> RemotingCommand:
        """Send one request to ``addr`` (``extra``: fields beside the header's); a response code outside
        ``expect`` raises RemotingCommandError.

        An answer that says the broker did not do it and may later (:data:`RETRIED_CODES`) is retried
        twice with jittered backoff (at most ~1 s in all); what the broker may have done (a flush or
        slave timeout after storing) is never sent again.

        An ACL refusal raises :class:`Refused` even where ``expect`` takes its code: a RocketMQ 4.x
        broker refuses with SYSTEM_ERROR, which some requests expect for "none there"."""
        fields = header.to_ext_fields() if header else {}
        if extra:
            fields.update(extra)
        try:
            with self.waiting_for(addr), self._naming_brokers(addr):
                return self._not_refused(
                    addr,
                    await self.client.invoke_checked(
                        addr, RemotingCommand.request(code, dict(fields), body), self.timeout, expect
                    ),
                )
        except RemotingCommandError as exc:
            if is_acl_refusal(exc.code, exc.remark):
                raise self._refused(addr, exc) from None
            if exc.code not in RETRIED_CODES:
                raise
            log.debug("%s answered code %d (%s): trying again", addr, exc.code, exc.remark)
        import tenacity  # only on this rare path: mqctl's start-up stays light

        retrying = tenacity.AsyncRetrying(
            retry=tenacity.retry_if_exception(
                lambda e: isinstance(e, RemotingCommandError) and e.code in RETRIED_CODES
            ),
            stop=tenacity.stop_after_attempt(RETRIES),
            wait=tenacity.wait_random_exponential(multiplier=0.1, max=0.5),
            reraise=True,
        )
        async for attempt in retrying:
            with attempt, self.waiting_for(addr), self._naming_brokers(addr):
                return self._not_refused(
                    addr,
                    await self.client.invoke_checked(
                        addr, RemotingCommand.request(code, dict(fields), body), self.timeout, expect
                    ),
                )
        raise AssertionError("unreachable: tenacity re-raises the last error")

    def _not_refused(self, addr: str, response: RemotingCommand) -> RemotingCommand:
        if response.code != ResponseCode.SUCCESS and is_acl_refusal(response.code, response.remark):
            raise self._refused(addr, RemotingCommandError(response.code, response.remark))
        return response

    def _refused(self, addr: str, exc: RemotingCommandError) -> Refused:
        if addr in self.namesrv:
            return Refused(exc.code, exc.remark, peer=f"NameServer {addr}", cluster=None)
        name = self.broker_names.get(addr)
        cluster = self.broker_clusters.get(name) if name is not None else None
        peer = f"broker {name} ({addr})" if name is not None else f"broker {addr}"
        return Refused(
            exc.code, exc.remark, peer=peer + (f" of cluster {cluster}" if cluster else ""), cluster=cluster
        )

    async def _namesrv(self, send: Callable[[str], Awaitable[T]]) -> T:
        """Try each NameServer in turn until one answers; raise the last connection error."""
        last: RemotingConnectError | None = None
        for addr in self.namesrv:
            try:
                return await send(addr)
            except RemotingConnectError as exc:
                log.debug("NameServer %s unreachable: %s", addr, exc)
                last = exc
            except RemotingProtocolError as exc:
                http = "; an HTTP server: a broker's /metrics port?" if "it sent b'HTTP/" in str(exc) else ""
                raise RemotingProtocolError(
                    f"{addr} is not a NameServer: {exc}{http}{NOT_A_NAMESRV}"
                ) from None
            except RemotingCommandError as exc:
                if exc.code != ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                    raise
                raise RemotingProtocolError(
                    f"{addr} is not a NameServer: it answers RocketMQ but not NameServer requests "
                    f"({(exc.remark or '').strip()}); a broker's port?{NOT_A_NAMESRV}"
                ) from None
        assert last is not None
        raise last

    async def namesrv_call(
        self,
        code: int,
        header: h.CommandHeader | None = None,
        body: bytes = b"",
        *,
        expect: tuple[int, ...] = (0,),
    ) -> RemotingCommand:
        return await self._namesrv(lambda addr: self.call(addr, code, header, body, expect=expect))

    # ---------------------------------------------------------------------------------- NameServer

    async def cluster_info(self) -> ClusterInfo:
        response = await self.namesrv_call(RequestCode.GET_BROKER_CLUSTER_INFO)
        info = read_answer(ClusterInfo.loads, response, RequestCode.GET_BROKER_CLUSTER_INFO)
        for data in info.broker_addr_table.values():
            self.broker_names.update(dict.fromkeys(data.broker_addrs.values(), data.broker_name))
        for cluster, names in info.cluster_addr_table.items():
            self.broker_clusters.update(dict.fromkeys(names, cluster))
        return info

    async def topic_route(self, topic: str) -> TopicRouteData:
        header = h.GetRouteInfoRequestHeader(topic=topic)
        response = await self.namesrv_call(RequestCode.GET_ROUTEINFO_BY_TOPIC, header)
        return read_answer(TopicRouteData.loads, response, RequestCode.GET_ROUTEINFO_BY_TOPIC)

    async def topic_list(self, cluster: str | None = None) -> list[str]:
        if cluster is None:
            code = RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER
            response = await self.namesrv_call(code)
        else:
            code = RequestCode.GET_TOPICS_BY_CLUSTER
            response = await self.namesrv_call(code, h.GetTopicsByClusterRequestHeader(cluster=cluster))
        return sorted(read_answer(TopicList.loads, response, code).topic_list)

    async def own_topic_names(self) -> set[str]:
        """The cluster and broker names, each a topic its brokers create (GET_SYSTEM_TOPIC_LIST_FROM_NS)."""
        response = await self.namesrv_call(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS)
        return (
            set(read_answer(TopicList.loads, response, RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS).topic_list)
            if response.body
            else set()
        )

    async def kv_get(self, namespace: str, key: str) -> str | None:
        header = h.GetKVConfigRequestHeader(namespace=namespace, key=key)
        response = await self.namesrv_call(
            RequestCode.GET_KV_CONFIG, header, expect=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND)
        )
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        return h.GetKVConfigResponseHeader.from_ext_fields(response.ext_fields).value

    async def kv_list(self, namespace: str) -> dict[str, str]:
        header = h.GetKVListByNamespaceRequestHeader(namespace=namespace)
        response = await self.namesrv_call(
            RequestCode.GET_KVLIST_BY_NAMESPACE,
            header,
            expect=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND),
        )
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return {}
        return read_answer(KVTable.loads, response, RequestCode.GET_KVLIST_BY_NAMESPACE).table

    async def kv_put(self, namespace: str, key: str, value: str) -> None:
        """Write to every NameServer: they never talk to each other (mqadmin does the same)."""
        header = h.PutKVConfigRequestHeader(namespace=namespace, key=key, value=value)
        for addr in self.namesrv:
            await self.call(addr, RequestCode.PUT_KV_CONFIG, header)

    async def kv_delete(self, namespace: str, key: str) -> None:
        header = h.DeleteKVConfigRequestHeader(namespace=namespace, key=key)
        for addr in self.namesrv:
            await self.call(addr, RequestCode.DELETE_KV_CONFIG, header)

    async def write_perm_of_broker(self, broker_name: str, *, allow: bool) -> dict[str, int]:
        """ADD_WRITE_PERM_OF_BROKER (``allow``) or WIPE_WRITE_PERM_OF_BROKER on every NameServer, which never
        talk to each other (mqadmin addWritePerm/wipeWritePerm does the same): the topics changed on each."""
        out: dict[str, int] = {}
        for addr in self.namesrv:
            if allow:
                add = h.AddWritePermOfBrokerRequestHeader(broker_name=broker_name)
                response = await self.call(addr, RequestCode.ADD_WRITE_PERM_OF_BROKER, add)
                out[addr] = h.AddWritePermOfBrokerResponseHeader.from_ext_fields(
                    response.ext_fields
                ).add_topic_count
            else:
                wipe = h.WipeWritePermOfBrokerRequestHeader(broker_name=broker_name)
                response = await self.call(addr, RequestCode.WIPE_WRITE_PERM_OF_BROKER, wipe)
                reply = h.WipeWritePermOfBrokerResponseHeader.from_ext_fields(response.ext_fields)
                out[addr] = reply.wipe_topic_count
        return out

    async def delete_topic_in_namesrv(self, topic: str, cluster: str | None = None) -> None:
        header = h.DeleteTopicFromNamesrvRequestHeader(topic=topic, cluster_name=cluster)
        for addr in self.namesrv:
            await self.call(addr, RequestCode.DELETE_TOPIC_IN_NAMESRV, header)

    # -------------------------------------------------------------------------------------- broker

    async def broker_runtime_info(self, addr: str) -> dict[str, str]:
        response = await self.call(addr, RequestCode.GET_BROKER_RUNTIME_INFO)
        return read_answer(KVTable.loads, response, RequestCode.GET_BROKER_RUNTIME_INFO).table

    async def broker_config(self, addr: str) -> dict[str, str]:
        """The broker's effective configuration (GET_BROKER_CONFIG answers a properties text)."""
        from daemon.config import ALL_KEYS_FIELD, parse_properties

        # ours answers mqctl's own keys too when asked (a 4.9.8 broker ignores the field)
        response = await self.call(addr, RequestCode.GET_BROKER_CONFIG, extra={ALL_KEYS_FIELD: "true"})
        return parse_properties(response.body.decode("utf-8"))

    async def update_broker_config(self, addr: str, changes: dict[str, str], *, force: bool = False) -> None:
        """``force`` adds mqctl's marker that lets fileReservedTime go under an hour (daemon.safe_config)."""
        from daemon.config import property_line
        from daemon.safe_config import FORCE_FIELD

        body = "".join(property_line(key, value) + "\n" for key, value in changes.items()).encode("utf-8")
        extra = {FORCE_FIELD: "true"} if force else None
        await self.call(addr, RequestCode.UPDATE_BROKER_CONFIG, body=body, extra=extra)

    async def create_topic(self, addr: str, config: TopicConfig, attributes: str | None = None) -> None:
        """UPDATE_AND_CREATE_TOPIC; ``attributes``: 5.x's changes of the topic's attributes
        (``+message.type=FIFO,-reserve.time``; a 4.9.8 broker ignores them), none: kept as they are."""
        header = bh.CreateTopicRequestHeader(
            topic=config.topic_name,
            default_topic=AUTO_CREATE_TOPIC,
            read_queue_nums=config.read_queue_nums,
            write_queue_nums=config.write_queue_nums,
            perm=config.perm,
            topic_filter_type=config.topic_filter_type,
            topic_sys_flag=config.topic_sys_flag,
            order=config.order,
            attributes=attributes,
        )
        await self.call(addr, RequestCode.UPDATE_AND_CREATE_TOPIC, header)

    async def delete_topic_in_broker(self, addr: str, topic: str) -> None:
        await self.call(addr, RequestCode.DELETE_TOPIC_IN_BROKER, bh.TopicHeader(topic=topic))

    async def topic_configs(self, addr: str) -> dict[str, TopicConfig]:
        response = await self.call(addr, RequestCode.GET_ALL_TOPIC_CONFIG)
        return read_answer(
            TopicConfigSerializeWrapper.loads, response, RequestCode.GET_ALL_TOPIC_CONFIG
        ).topic_config_table

    async def broker_stats(self, addr: str, name: str, key: str) -> dict[str, dict[str, float]] | None:
        """VIEW_BROKER_STATS_DATA: one stats item's `statsMinute/Hour/Day` `{sum, tps, avgpt}`; None when
        the broker has no such item (no traffic yet) or does not serve the code."""
        header = bh.ViewBrokerStatsDataRequestHeader(stats_name=name, stats_key=key)
        expect = (ResponseCode.SUCCESS, ResponseCode.SYSTEM_ERROR, ResponseCode.REQUEST_CODE_NOT_SUPPORTED)
        response = await self.call(addr, RequestCode.VIEW_BROKER_STATS_DATA, header, expect=expect)
        if response.code != ResponseCode.SUCCESS:
            return None
        return read_answer(fastjson.loads, response, RequestCode.VIEW_BROKER_STATS_DATA)  # type: ignore[no-any-return]

    async def topic_stats(self, addr: str, topic: str) -> bb.TopicStatsTable:
        response = await self.call(addr, RequestCode.GET_TOPIC_STATS_INFO, bh.TopicHeader(topic=topic))
        table = read_answer(bb.TopicStatsTable.loads, response, RequestCode.GET_TOPIC_STATS_INFO)
        for mq, off in table.offset_table.items():  # 4.9.8 writes an offset below 0 as 0
            for name in ("minOffset", "maxOffset", "lastUpdateTimestamp"):
                value = getattr(off, _snake(name))
                not_negative(value, f"queue {mq.queue_id}'s {name}", RequestCode.GET_TOPIC_STATS_INFO)
        return table

    async def create_group(self, addr: str, config: bb.SubscriptionGroupConfig) -> None:
        await self.call(addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=fastjson.dumps(config))

    async def group_configs(self, addr: str) -> dict[str, bb.SubscriptionGroupConfig]:
        response = await self.call(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        return read_answer(
            bb.SubscriptionGroupWrapper.loads, response, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG
        ).subscription_group_table

    async def delete_group(self, addr: str, group: str, *, remove_offsets: bool) -> None:
        header = bh.DeleteSubscriptionGroupRequestHeader(group_name=group, remove_offset=remove_offsets)
        await self.call(addr, RequestCode.DELETE_SUBSCRIPTIONGROUP, header)

    async def consume_stats(self, addr: str, group: str, topic: str | None = None) -> bb.ConsumeStats:
        header = bh.GetConsumeStatsRequestHeader(consumer_group=group, topic=topic)
        response = await self.call(addr, RequestCode.GET_CONSUME_STATS, header)
        stats = read_answer(bb.ConsumeStats.loads, response, RequestCode.GET_CONSUME_STATS)
        not_negative(stats.consume_tps, "consumeTps", RequestCode.GET_CONSUME_STATS)
        for mq, off in stats.offset_table.items():  # 4.9.8 writes a consumer offset below 0 as 0
            for name in ("brokerOffset", "consumerOffset", "lastTimestamp"):
                not_negative(
                    getattr(off, _snake(name)),
                    f"{mq.topic} queue {mq.queue_id}'s {name}",
                    RequestCode.GET_CONSUME_STATS,
                )
        return stats

    async def consumer_connections(self, addr: str, group: str) -> bb.ConsumerConnection | None:
        """The group's online clients on ``addr``, or None when none is online."""
        response = await self.call(
            addr,
            RequestCode.GET_CONSUMER_CONNECTION_LIST,
            bh.ConsumerGroupHeader(consumer_group=group),
            expect=(ResponseCode.SUCCESS, ResponseCode.CONSUMER_NOT_ONLINE),
        )
        return (
            None
            if response.code == ResponseCode.CONSUMER_NOT_ONLINE
            else read_answer(bb.ConsumerConnection.loads, response, RequestCode.GET_CONSUMER_CONNECTION_LIST)
        )

    async def producer_connections(self, addr: str, group: str) -> bb.ProducerConnection | None:
        """GET_PRODUCER_CONNECTION_LIST (204): the group's producers connected to ``addr``, or None when
        none is (AdminBrokerProcessor#getProducerConnectionList answers SYSTEM_ERROR "not exist")."""
        response = await self.call(
            addr,
            RequestCode.GET_PRODUCER_CONNECTION_LIST,
            bh.ProducerGroupHeader(producer_group=group),
            expect=(ResponseCode.SUCCESS, ResponseCode.SYSTEM_ERROR),
        )
        if response.code != ResponseCode.SUCCESS:
            if "not exist" in (response.remark or ""):
                return None
            raise RemotingCommandError(response.code, response.remark)
        return read_answer(bb.ProducerConnection.loads, response, RequestCode.GET_PRODUCER_CONNECTION_LIST)

    async def consumer_offset(self, addr: str, group: str, topic: str, queue_id: int) -> int | None:
        """The committed offset, or None when the group never committed one for the queue."""
        header = bh.QueryConsumerOffsetRequestHeader(consumer_group=group, topic=topic, queue_id=queue_id)
        response = await self.call(
            addr,
            RequestCode.QUERY_CONSUMER_OFFSET,
            header,
            expect=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND),
        )
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        offset = answer_header(bh.OffsetResponseHeader, response).offset
        return not_negative(offset, "offset", RequestCode.QUERY_CONSUMER_OFFSET)

    async def all_consumer_offsets(self, addr: str) -> dict[tuple[str, str, int], int]:
        """GET_ALL_CONSUMER_OFFSET (43): every committed offset on ``addr``, by (group, topic, queue id)."""
        response = await self.call(addr, RequestCode.GET_ALL_CONSUMER_OFFSET)

        def offsets(body: bytes) -> dict[tuple[str, str, int], int]:
            table: dict[str, dict[str, int]] = fastjson.loads(body)["offsetTable"]
            out = {}
            for key, queues in table.items():
                topic, _, group = key.partition("@")
                out.update({(group, topic, int(q)): int(offset) for q, offset in queues.items()})
            return out

        return read_answer(offsets, response, RequestCode.GET_ALL_CONSUMER_OFFSET)

    async def commit_offset(self, addr: str, group: str, topic: str, queue_id: int, offset: int) -> None:
        header = bh.UpdateConsumerOffsetRequestHeader(
            consumer_group=group, topic=topic, queue_id=queue_id, commit_offset=offset
        )
        await self.call(addr, RequestCode.UPDATE_CONSUMER_OFFSET, header)

    async def max_offset(self, addr: str, topic: str, queue_id: int) -> int:
        """GET_MAX_OFFSET (30): the queue offset the next message will get."""
        response = await self.call(
            addr, RequestCode.GET_MAX_OFFSET, bh.QueueHeader(topic=topic, queue_id=queue_id)
        )
        offset = answer_header(bh.OffsetResponseHeader, response).offset
        return not_negative(offset, "offset", RequestCode.GET_MAX_OFFSET)  # an empty queue's is 0

    async def min_offset(self, addr: str, topic: str, queue_id: int) -> int:
        """GET_MIN_OFFSET (31): the oldest queue offset still stored."""
        response = await self.call(
            addr, RequestCode.GET_MIN_OFFSET, bh.QueueHeader(topic=topic, queue_id=queue_id)
        )
        offset = answer_header(bh.OffsetResponseHeader, response).offset
        # 4.9.8's store answers -1 for a queue it has no ConsumeQueue of: empty, its start 0
        return max(0, not_negative(offset, "offset", RequestCode.GET_MIN_OFFSET, least=-1))

    async def earliest_time(self, addr: str, topic: str, queue_id: int) -> int:
        """GET_EARLIEST_MSG_STORETIME (32): the store time (ms) of the queue's oldest stored message."""
        response = await self.call(
            addr, RequestCode.GET_EARLIEST_MSG_STORETIME, bh.QueueHeader(topic=topic, queue_id=queue_id)
        )
        return answer_header(bh.TimestampResponseHeader, response).timestamp

    async def search_offset(self, addr: str, topic: str, queue_id: int, timestamp_ms: int) -> int:
        header = bh.SearchOffsetRequestHeader(topic=topic, queue_id=queue_id, timestamp=timestamp_ms)
        response = await self.call(addr, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, header)
        offset = answer_header(bh.OffsetResponseHeader, response).offset
        return not_negative(offset, "offset", RequestCode.SEARCH_OFFSET_BY_TIMESTAMP)

    async def reset_offset_by_time(
        self, addr: str, topic: str, group: str, timestamp_ms: int
    ) -> dict[bb.MessageQueue, int]:
        """INVOKE_BROKER_TO_RESET_OFFSET: the broker moves its online consumers to ``timestamp_ms``."""
        header = bh.ResetOffsetRequestHeader(topic=topic, group=group, timestamp=timestamp_ms, is_force=True)
        response = await self.call(addr, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, header)
        if not response.body:
            return {}
        return read_answer(
            bb.ResetOffsetBody.loads, response, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET
        ).offset_table


#: The exceptions a reader of a peer's body raises on what does not read as the bean it should be.
_UNREADABLE = (ValueError, TypeError, KeyError, AttributeError, IndexError, OverflowError, RecursionError)


def read_answer(read: Callable[[bytes], T], response: RemotingCommand, code: int) -> T:
    """``read(response.body)`` (a bean's ``loads``), checked against what a RocketMQ server can send: each
    field of the type its hint names, numbers within Java's long and finite. A body that is not raises
    RemotingProtocolError (exit 7) naming the request: a hostile or broken server's answer of a list where
    an object belongs, a number past 64 bits or NaN, reached the commands' arithmetic and tables and ended
    them with a traceback's last line (exit 1, "a bug")."""
    try:
        value = read(response.body)
        problem = _misshapen(value)
        problem = None if problem is None else f"body{problem}"
    except _UNREADABLE as exc:
        problem = str(exc) or type(exc).__name__
    if problem is not None:
        raise RemotingProtocolError(f"the answer to {_code_name(code)} does not read: {problem}")
    return value


N = TypeVar("N", int, float)


def _snake(java: str) -> str:
    """A Java bean field's name as the Python bean spells it (``minOffset``: ``min_offset``)."""
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in java)


def not_negative(value: N, what: str, code: int, *, least: int = 0) -> N:
    """``value``, an offset, a time or a rate a server answered, when it is one a RocketMQ server can send
    (``least`` or more: 4.9.8 answers an empty queue's offsets as 0, and -1 only where ``least`` says);
    else RemotingProtocolError (exit 7) naming the request. Offsets feed plans and arithmetic (a reset,
    a lag, a count of messages): one of ``-5`` is no figure to show or act on."""
    if value < least:
        raise RemotingProtocolError(
            f"the answer to {_code_name(code)} does not read: {what} {value} is below {least}"
        )
    return value


def answer_header(kind: type[H], response: RemotingCommand) -> H:
    """``kind`` read from the answer's fields, its numbers within Java's long (see :func:`read_answer`)."""
    header = kind.from_ext_fields(response.ext_fields)
    problem = _misshapen(header)
    problem = None if problem is None else f"{kind.__name__}{problem}"
    if problem is not None:
        raise RemotingProtocolError(f"an answer's header does not read: {problem}")
    return header


def _code_name(code: int) -> str:
    try:
        return f"{RequestCode(code).name} ({code})"
    except ValueError:
        return f"request code {code}"


def _misshapen(value: Any, hint: Any = Any, depth: int = 0) -> str | None:
    """What in ``value`` (decoded JSON, or beans made of it) is not of ``hint``, as ``path: problem``
    (the path relative to ``value``), or None. Written for a 10,000-topic table: the common values
    return on their first test and a path is built only for a problem."""
    kind: Any = type(value)  # (Any: mypy takes a class for no Hashable)
    hint, origin, args = _shape(hint)
    if kind is str:
        return None if hint is str or hint is Any else f": a string where a {_hint_name(hint)} belongs"
    if kind is int:
        if hint is not int and hint is not Any and hint is not float:
            return f": {value!r} where a {_hint_name(hint)} belongs"
        return None if _MIN_LONG <= value <= _MAX_LONG else f": {value} is past 64 bits"
    if value is None:
        return None
    if depth > 64:
        return ": nested too deep"
    if hasattr(kind, "__dataclass_fields__"):
        for name, item_hint in _field_hints(kind):
            problem = _misshapen(getattr(value, name), item_hint, depth + 1)
            if problem is not None:
                return f".{name}{problem}"
        return None
    if kind is bool:
        return None if hint is bool or hint is Any else f": {value!r} where a {_hint_name(hint)} belongs"
    if kind is float:
        if hint is not float and hint is not Any:
            return f": {value!r} where a {_hint_name(hint)} belongs"
        return None if math.isfinite(value) else f": {value!r} is no number"
    if kind is dict:
        if hint is not Any and origin is not dict:
            return f": an object where a {_hint_name(hint)} belongs"
        key_hint, item_hint = args if args else (Any, Any)
        for key, item in value.items():
            problem = _misshapen(key, key_hint, depth + 1)
            if problem is not None:
                return f" key{problem}"
            problem = _misshapen(item, item_hint, depth + 1)
            if problem is not None:
                return f"[{key!r:.60}]{problem}"
        return None
    if kind in (list, set, frozenset, tuple):
        if hint is not Any and origin not in (list, set, frozenset, tuple):
            return f": a list where a {_hint_name(hint)} belongs"
        item_hint = args[0] if args else Any
        for item in value:
            problem = _misshapen(item, item_hint, depth + 1)
            if problem is not None:
                return f"[]{problem}"
    return None


_MIN_LONG, _MAX_LONG = -(2**63), 2**63 - 1


@functools.cache
def _shape(hint: Any) -> tuple[Any, Any, tuple[Any, ...]]:
    """``hint`` without its ``| None``, with its origin and arguments."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        hint = inner[0] if len(inner) == 1 else Any
        origin, args = typing.get_origin(hint), typing.get_args(hint)
    return hint, origin, args


@functools.cache
def _field_hints(kind: type) -> tuple[tuple[str, Any], ...]:
    hints = typing.get_type_hints(kind)
    return tuple((item.name, hints[item.name]) for item in dataclasses.fields(kind))


def _hint_name(hint: Any) -> str:
    origin = typing.get_origin(hint)
    if origin is dict:
        return "JSON object"
    if origin in (list, set, frozenset, tuple):
        return "list"
    return {int: "number", float: "number", str: "string", bool: "boolean"}.get(
        hint, getattr(hint, "__name__", str(hint))
    )


def read_deadline(timeout: float) -> float:
    """A read command's deadline in all for ``timeout`` seconds a answer (READ_DEADLINE_ANSWERS)."""
    return max(READ_DEADLINE_FLOOR, READ_DEADLINE_ANSWERS * timeout)


def run_admin(
    namesrv: list[str],
    work: Callable[[Admin], Awaitable[T]],
    *,
    timeout: float = 5.0,
    deadline: float | None = None,
) -> T:
    """Run one admin session to completion from synchronous CLI code; ``timeout`` is each answer's wait.
    With a ``deadline`` (seconds, in all) the session is stopped there, and RequestTimeoutError names the
    addresses still asked."""
    from daemon.remoting.loop import run

    async def session() -> T:
        async with Admin(namesrv, timeout=timeout) as admin:
            if deadline is None:
                return await work(admin)
            scope = asyncio.timeout(deadline)
            try:
                async with scope:
                    return await work(admin)
            except TimeoutError:
                if not scope.expired():
                    raise
                raise _late(admin, deadline) from None

    return run(session())


def _late(admin: Admin, deadline: float) -> Exception:
    from mqctl.errors import RequestTimeoutError
    from mqctl.output import printable

    def named(addr: str) -> str:
        name = admin.broker_names.get(addr)
        return printable(f"{name} ({addr})" if name else addr, newlines=False)

    late = sorted(admin.asking)
    said = "; no answer yet from " + "; ".join(named(addr) for addr in late[:NAMED_LATE]) if late else ""
    if len(late) > NAMED_LATE:
        said += f"; and {len(late) - NAMED_LATE} more"
    return RequestTimeoutError(
        f"the command's deadline of {deadline:g}s passed{said}",
        hint=f"--timeout is each answer's wait; a read's deadline is --deadline, else {READ_DEADLINE_ANSWERS} "
        f"times --timeout, at least {READ_DEADLINE_FLOOR:g}s: raise --timeout or --deadline (0: none), or "
        "narrow the read",
    )
