"""LOCK_BATCH_MQ (41) / UNLOCK_BATCH_MQ (42) for orderly consumers (docs/wire-protocol.md §orderly-locks)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from daemon.broker.bodies import LockBatchRequestBody, LockBatchResponseBody
from daemon.broker.processors import system_error
from daemon.remoting.codes import RequestCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.connection import Connection, Processor

if TYPE_CHECKING:
    from daemon.broker.context import BrokerContext


def processors(broker: BrokerContext) -> dict[int, Processor]:
    locks = broker.locks

    def body(request: RemotingCommand) -> LockBatchRequestBody:
        try:
            return LockBatchRequestBody.loads(request.body)
        except (ValueError, TypeError, KeyError) as exc:
            raise system_error(f"bad lock body: {exc}") from None

    def lock(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        b = body(request)
        granted = locks.try_lock_batch(b.consumer_group, b.mq_set, b.client_id)
        return request.make_response(body=LockBatchResponseBody(granted).dumps())

    def unlock(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        b = body(request)
        locks.unlock_batch(b.consumer_group, b.mq_set, b.client_id)
        return request.make_response()

    return {RequestCode.LOCK_BATCH_MQ: lock, RequestCode.UNLOCK_BATCH_MQ: unlock}
