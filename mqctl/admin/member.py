"""Live membership of a consumer group, for the mqctl commands that commit a group's offsets.

A command that commits offsets without being a member is invisible to ``offset reset``: the reset
sees no consumer online, rewrites the offsets directly, and the command's next commit silently
undoes it. So such a command joins the group as a RocketMQ client does: HEART_BEAT (34) at start
and every 30 s, UNREGISTER_CLIENT (35) at exit, and it obeys RESET_CONSUMER_CLIENT_OFFSET (220),
which a broker pushes to the group's members when it resets the group (INVOKE_BROKER_TO_RESET_OFFSET).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from types import TracebackType

from daemon.broker.bodies import ConsumerData, HeartbeatData, MessageQueue, ResetOffsetBody
from daemon.broker.filter import build_subscription
from daemon.broker.headers import ResetOffsetRequestHeader, UnregisterClientRequestHeader
from daemon.remoting.codes import RequestCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.connection import Connection
from daemon.remoting.errors import RemotingError
from mqctl.admin.client import Admin
from mqctl.units import plural

log = logging.getLogger(__name__)

#: RocketMQ clients heartbeat every 30 s (heartbeatBrokerInterval); brokers expire members after 120 s.
HEARTBEAT_INTERVAL_S = 30.0


def client_id() -> str:
    """``ip@instance`` like a RocketMQ client id; the instance names mqctl so operators can tell it apart."""
    try:
        ip = socket.gethostbyname(socket.gethostname())
    except OSError:
        ip = "127.0.0.1"
    return f"{ip}@mqctl-{os.getpid()}"


class GroupMember:
    """One topic's queue positions of a group, held by a live member of that group.

    ``offsets`` is where the member reads next on each queue. The broker may move them at any time
    (a reset, committed at once); readers advance them with :meth:`advance`, which leaves a moved queue
    alone. On exit the member commits its positions (unless ``commit_on_exit`` is false: a reader that
    never commits, like ``msg tail -g``), then leaves the group.
    """

    def __init__(
        self,
        admin: Admin,
        group: str,
        topic: str,
        brokers: dict[str, str],
        *,
        consume_type: str = "CONSUME_ACTIVELY",
        consume_from_where: str = "CONSUME_FROM_FIRST_OFFSET",
        commit_on_exit: bool = True,
    ) -> None:
        self.admin = admin
        self.commit_on_exit = commit_on_exit
        self.group = group
        self.topic = topic
        self.brokers = dict(brokers)  # broker name -> address
        self.client_id = client_id()
        self.offsets: dict[MessageQueue, int] = {}
        self.resets = 0
        self._data = ConsumerData(
            group, consume_type, "CLUSTERING", consume_from_where, [build_subscription(topic, "*")], False
        )
        self._data.subscription_data_set[0].sub_version = int(time.time() * 1000)
        self._commits: set[asyncio.Future[None]] = set()
        self._beating: asyncio.Task[None] | None = None

    async def __aenter__(self) -> GroupMember:
        self.admin.client.dispatcher.register(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, self._on_reset)
        try:
            await self.heartbeat()
        except BaseException:
            self._stop_listening()
            raise
        self._beating = asyncio.create_task(self._beat(), name=f"heartbeat-{self.group}")
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._beating is not None:
            self._beating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._beating
        # Still listening while it commits and leaves: a reset the broker makes before it sees us
        # leave reaches us, and its commit (awaited last) lands after our own.
        try:
            try:
                if self.commit_on_exit:
                    await self.commit(self.offsets)
            finally:
                await self._leave()
            await asyncio.gather(*self._commits)
        except (RemotingError, OSError) as error:
            if exc_type is None:
                raise
            log.warning("group %s: cannot commit where it stopped: %s", self.group, error)
        finally:
            self._stop_listening()

    def advance(self, mq: MessageQueue, before: int, after: int) -> None:
        """Move ``mq`` from ``before`` (where a pull started) to ``after``, unless a reset moved it since."""
        if self.offsets.get(mq) == before:
            self.offsets[mq] = after

    async def heartbeat(self) -> None:
        """Beat to every broker of the topic's current route, slaves too, as
        ``MQClientInstance#sendHeartbeatToAllBroker`` does for a consumer: the member a failover or a
        leadership transfer makes master already knows us. Every broker is tried whatever the others
        answer (a hung master mid-failover must not keep the others, or the slave about to be elected,
        from hearing of us); then the first master that did not answer raises (the caller tries again
        next time); a slave that does not is only logged."""
        body = HeartbeatData(self.client_id, [], [self._data]).dumps()
        slaves = await self._follow_route()
        masters = set(self.brokers.values())
        failed: RemotingError | OSError | None = None
        for addr in [*sorted(masters), *sorted(slaves - masters)]:
            try:
                await self.admin.call(addr, RequestCode.HEART_BEAT, body=body)
            except (RemotingError, OSError) as exc:
                if addr in masters:
                    failed = failed or exc
                else:
                    log.debug("group %s: heartbeat to slave %s failed: %s", self.group, addr, exc)
        if failed is not None:
            raise failed

    async def _follow_route(self) -> set[str]:
        """Point :attr:`brokers` at each broker group's current master (commits and heartbeats follow a
        failover) and return its other members' addresses; an unreadable route changes nothing."""
        try:
            route = await self.admin.topic_route(self.topic)
        except (RemotingError, OSError) as exc:
            log.debug("group %s: route of %s not read: %s", self.group, self.topic, exc)
            return set()
        slaves: set[str] = set()
        for data in route.broker_datas:
            if data.broker_name not in self.brokers:
                continue
            master = data.master_addr()
            if master is not None:
                self.brokers[data.broker_name] = master
            slaves.update(addr for bid, addr in data.broker_addrs.items() if bid != 0)
        return slaves

    async def commit(self, offsets: dict[MessageQueue, int]) -> None:
        for mq, offset in list(offsets.items()):
            await self.admin.commit_offset(
                self.brokers[mq.broker_name], self.group, mq.topic, mq.queue_id, offset
            )

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_INTERVAL_S)
            try:
                await self.heartbeat()
            except (RemotingError, OSError) as exc:  # as RocketMQ clients do: try again next time
                log.warning("group %s: heartbeat failed: %s", self.group, exc)

    def _stop_listening(self) -> None:
        self.admin.client.dispatcher.processors.pop(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, None)

    async def _leave(self) -> None:
        header = UnregisterClientRequestHeader(self.client_id, None, self.group)
        for addr in set(self.brokers.values()):
            try:
                await self.admin.call(addr, RequestCode.UNREGISTER_CLIENT, header)
            except (RemotingError, OSError) as exc:  # the broker drops us with the connection anyway
                log.debug("group %s: unregister from %s failed: %s", self.group, addr, exc)

    def _on_reset(self, conn: Connection, request: RemotingCommand) -> None:
        """Adopt the broker's new offsets and commit them at once, after any older commit in flight.

        Commits and pulls share this connection and the broker handles them in order, so a pull
        that carried an old position before the reset arrived is overwritten by this commit.
        """
        h = ResetOffsetRequestHeader.from_ext_fields(request.ext_fields)
        if h.group != self.group or h.topic != self.topic:
            return
        adopted = {
            mq: off
            for mq, off in ResetOffsetBody.loads(request.body).offset_table.items()
            if mq in self.offsets
        }
        self.offsets.update(adopted)
        self.resets += 1
        log.info(
            "group %s: broker %s reset %s of %s",
            self.group,
            conn.peer,
            plural(len(adopted), "queue"),
            self.topic,
        )
        task = asyncio.ensure_future(self.commit(adopted))
        self._commits.add(task)
        task.add_done_callback(self._commits.discard)
