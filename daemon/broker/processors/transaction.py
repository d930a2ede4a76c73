"""END_TRANSACTION (37): commit or roll back a half message (wire-protocol.md §8.4).

A commit re-puts the half message into its `REAL_TOPIC`/`REAL_QID` with the commit sysFlag, so it is
dispatched to consumers; a rollback leaves it invisible. There is no transaction check service yet
(CHECK_TRANSACTION_STATE), so half messages whose producer never ends them stay invisible forever.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from daemon.broker.headers import EndTransactionRequestHeader
from daemon.broker.managers.topics import TRANS_HALF_TOPIC
from daemon.broker.processors import system_error
from daemon.remoting.codes import RequestCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.connection import Connection, Processor
from store.message import (
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TRANSACTION_PREPARED,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
    Message,
)

if TYPE_CHECKING:
    from daemon.broker.broker import Broker

log = logging.getLogger(__name__)

PROPERTY_TRAN_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"


def processors(broker: Broker) -> dict[int, Processor]:
    async def end_transaction(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = EndTransactionRequestHeader.from_ext_fields(request.ext_fields)
        if h.commit_or_rollback not in (TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE):
            return request.make_response()  # 0 = unknown: the producer will be asked again (Java)
        found = broker.store.look_message_by_offset(h.commit_log_offset)
        if found is None or found.message.topic != TRANS_HALF_TOPIC:
            raise system_error(f"Find prepared transaction message failed, offset {h.commit_log_offset}")
        half = found.message
        if h.commit_or_rollback == TRANSACTION_ROLLBACK_TYPE:
            log.info("transaction %s rolled back by %s", h.msg_id, h.producer_group)
            return request.make_response()
        props = dict(half.properties)
        props.pop(PROPERTY_TRANSACTION_PREPARED, None)
        props[PROPERTY_TRAN_PREPARED_QUEUE_OFFSET] = str(half.queue_offset)
        msg = Message(
            props.get(PROPERTY_REAL_TOPIC, half.topic),
            half.stored_body,
            int(props.get(PROPERTY_REAL_QUEUE_ID, "0")),
            half.flag,
            props,
            (half.sys_flag & ~TRANSACTION_TYPE_MASK) | TRANSACTION_COMMIT_TYPE,
            half.born_timestamp,
            half.born_host,
            half.store_host,
            half.reconsume_times,
            half.commit_log_offset,
            True,
        )
        result = await broker.put(msg)
        if not result.ok:
            raise system_error(result.status.value)
        broker.stats.on_put(msg.topic)
        return request.make_response()

    return {RequestCode.END_TRANSACTION: end_transaction}
