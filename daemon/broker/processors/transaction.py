"""END_TRANSACTION (37): the producer's commit or rollback of a half message
(docs/wire-protocol.md §transactions)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from daemon.broker.headers import EndTransactionRequestHeader
from daemon.remoting.codes import RequestCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.connection import Connection, Processor

if TYPE_CHECKING:
    from daemon.broker.context import BrokerContext


def processors(broker: BrokerContext) -> dict[int, Processor]:
    async def end_transaction(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        await broker.transactions.end(EndTransactionRequestHeader.from_ext_fields(request.ext_fields))
        return request.make_response()

    return {RequestCode.END_TRANSACTION: end_transaction}
