"""LOCK_BATCH_MQ (41) / UNLOCK_BATCH_MQ (42) for orderly consumers (docs/wire-protocol.md §orderly-locks)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from daemon.broker.bodies import LockBatchRequestBody, LockBatchResponseBody, MessageQueue
from daemon.broker.processors import system_error
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.connection import Connection, Processor
from daemon.remoting.errors import RemotingCommandError
from daemon.remoting.limits import WarningGate

if TYPE_CHECKING:
    from daemon.broker.context import BrokerContext

log = logging.getLogger(__name__)


def processors(broker: BrokerContext) -> dict[int, Processor]:
    locks = broker.locks

    refusals = WarningGate(log)

    def body(conn: Connection, request: RemotingCommand) -> LockBatchRequestBody:
        try:
            b = LockBatchRequestBody.loads(request.body)
        except (ValueError, TypeError, KeyError) as exc:
            raise system_error(f"bad lock body: {exc}") from None
        remark = broker.lock_refusal(conn, b.consumer_group, b.client_id)
        if remark is not None:
            refusals.warning("refused request code %d from %s: %s", request.code, conn.peer, remark)
            raise RemotingCommandError(ResponseCode.NO_PERMISSION, remark)
        return b

    def lockable(group: str, mqs: list[MessageQueue]) -> list[MessageQueue]:
        """The queues of ``mqs`` a lock may name: this broker's, of an existing topic, below its queue
        count, for an existing group. 4.9.8 locks anything named: a consumer that locked invented
        queues grew the table without bound. The rest are answered as queues not locked."""
        if broker.groups.get(group) is None:
            return []
        name = broker.config.broker_name
        out = []
        for mq in mqs:
            config = broker.topics.get(mq.topic) if mq.broker_name == name else None
            if config is not None and 0 <= mq.queue_id < max(config.read_queue_nums, config.write_queue_nums):
                out.append(mq)
        return out

    def lock(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        b = body(conn, request)
        mqs = lockable(b.consumer_group, b.mq_set)
        granted = locks.try_lock_batch(b.consumer_group, mqs, b.client_id, broker.lock_host(conn))
        return request.make_response(body=LockBatchResponseBody(granted).dumps())

    def unlock(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        b = body(conn, request)
        locks.unlock_batch(b.consumer_group, b.mq_set, b.client_id, broker.lock_host(conn))
        return request.make_response()

    return {RequestCode.LOCK_BATCH_MQ: lock, RequestCode.UNLOCK_BATCH_MQ: unlock}
