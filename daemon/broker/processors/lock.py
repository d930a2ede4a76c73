"""LOCK_BATCH_MQ (41) / UNLOCK_BATCH_MQ (42) for orderly consumers (docs/wire-protocol.md §orderly-locks)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from daemon.broker.bodies import LockBatchRequestBody, LockBatchResponseBody
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

    def lock(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        b = body(conn, request)
        granted = locks.try_lock_batch(b.consumer_group, b.mq_set, b.client_id)
        return request.make_response(body=LockBatchResponseBody(granted).dumps())

    def unlock(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        b = body(conn, request)
        locks.unlock_batch(b.consumer_group, b.mq_set, b.client_id)
        return request.make_response()

    return {RequestCode.LOCK_BATCH_MQ: lock, RequestCode.UNLOCK_BATCH_MQ: unlock}
