"""``Admin``: the standard 4.x request codes that mqadmin uses, as typed async calls.

Only the request codes of RocketMQ 4.x are used, so every call works against a real RocketMQ
cluster as well as against ours. NameServer requests go to the first NameServer that answers,
as RocketMQ's clients do; broker requests go to the address they name.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from daemon.remoting import headers as h
from daemon.remoting.bodies import ClusterInfo, KVTable, TopicList, TopicRouteData
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.errors import RemotingConnectError

log = logging.getLogger(__name__)

T = TypeVar("T")


class Admin:
    """One admin session: a pooled remoting client plus the NameServer list."""

    def __init__(self, namesrv: list[str], *, timeout: float = 5.0, client: RemotingClient | None = None) -> None:
        self.namesrv = list(namesrv)
        self.timeout = timeout
        self.client = client or RemotingClient()

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
    ) -> RemotingCommand:
        """Send one request to ``addr``; a response code outside ``expect`` raises RemotingCommandError."""
        request = RemotingCommand.request(code, header.to_ext_fields() if header else {}, body)
        return await self.client.invoke_checked(addr, request, self.timeout, expect)

    async def _namesrv(self, send: Callable[[str], Awaitable[T]]) -> T:
        """Try each NameServer in turn until one answers; raise the last connection error."""
        last: RemotingConnectError | None = None
        for addr in self.namesrv:
            try:
                return await send(addr)
            except RemotingConnectError as exc:
                log.debug("NameServer %s unreachable: %s", addr, exc)
                last = exc
        assert last is not None
        raise last

    async def namesrv_call(
        self, code: int, header: h.CommandHeader | None = None, body: bytes = b"", *, expect: tuple[int, ...] = (0,)
    ) -> RemotingCommand:
        return await self._namesrv(lambda addr: self.call(addr, code, header, body, expect=expect))

    # ---------------------------------------------------------------------------------- NameServer

    async def cluster_info(self) -> ClusterInfo:
        response = await self.namesrv_call(RequestCode.GET_BROKER_CLUSTER_INFO)
        return ClusterInfo.loads(response.body)

    async def topic_route(self, topic: str) -> TopicRouteData:
        header = h.GetRouteInfoRequestHeader(topic=topic)
        response = await self.namesrv_call(RequestCode.GET_ROUTEINFO_BY_TOPIC, header)
        return TopicRouteData.loads(response.body)

    async def topic_list(self, cluster: str | None = None) -> list[str]:
        if cluster is None:
            response = await self.namesrv_call(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        else:
            header = h.GetTopicsByClusterRequestHeader(cluster=cluster)
            response = await self.namesrv_call(RequestCode.GET_TOPICS_BY_CLUSTER, header)
        return sorted(TopicList.loads(response.body).topic_list)

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
            RequestCode.GET_KVLIST_BY_NAMESPACE, header, expect=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND)
        )
        return {} if response.code == ResponseCode.QUERY_NOT_FOUND else KVTable.loads(response.body).table

    async def kv_put(self, namespace: str, key: str, value: str) -> None:
        """Write to every NameServer: they never talk to each other (mqadmin does the same)."""
        header = h.PutKVConfigRequestHeader(namespace=namespace, key=key, value=value)
        for addr in self.namesrv:
            await self.call(addr, RequestCode.PUT_KV_CONFIG, header)

    async def kv_delete(self, namespace: str, key: str) -> None:
        header = h.DeleteKVConfigRequestHeader(namespace=namespace, key=key)
        for addr in self.namesrv:
            await self.call(addr, RequestCode.DELETE_KV_CONFIG, header)

    async def delete_topic_in_namesrv(self, topic: str, cluster: str | None = None) -> None:
        header = h.DeleteTopicFromNamesrvRequestHeader(topic=topic, cluster_name=cluster)
        for addr in self.namesrv:
            await self.call(addr, RequestCode.DELETE_TOPIC_IN_NAMESRV, header)

    # -------------------------------------------------------------------------------------- broker

    async def broker_runtime_info(self, addr: str) -> dict[str, str]:
        response = await self.call(addr, RequestCode.GET_BROKER_RUNTIME_INFO)
        return KVTable.loads(response.body).table


def run_admin(namesrv: list[str], work: Callable[[Admin], Awaitable[T]], *, timeout: float = 5.0) -> T:
    """Run one admin session to completion from synchronous CLI code."""
    from daemon.remoting.loop import run

    async def session() -> T:
        async with Admin(namesrv, timeout=timeout) as admin:
            return await work(admin)

    return run(session())
