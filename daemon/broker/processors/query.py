"""QUERY_MESSAGE (12) by key or unique key and VIEW_MESSAGE_BY_ID (33) (docs/wire-protocol.md §queries)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from daemon.broker.headers import (
    DAMAGED_FIELD,
    QueryMessageRequestHeader,
    QueryMessageResponseHeader,
    ViewMessageRequestHeader,
)
from daemon.broker.processors import system_error
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.connection import Connection, Processor
from daemon.remoting.frame import MAX_FRAME_LENGTH
from store.errors import CorruptRecordError, DamagedRecordError
from store.record import record_identity

#: The bytes of messages one QUERY_MESSAGE answer carries: a frame, less room for its header. Its hits
#: past that are left out (the first ones by offset are answered): 64 hits of 4 MiB messages under one
#: key (anyone may send them) made a 256 MiB answer on the loop, refused whole as over a frame, and the
#: key's query answered nothing.
QUERY_BODY_BYTES = MAX_FRAME_LENGTH - 64 * 1024

if TYPE_CHECKING:
    from daemon.broker.context import BrokerContext


def processors(broker: BrokerContext) -> dict[int, Processor]:
    store = broker.store
    config = broker.config

    def query(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = QueryMessageRequestHeader.from_ext_fields(request.ext_fields)
        parked = broker.parking_refusal(conn, h.topic)
        if parked is not None:
            return request.make_response(ResponseCode.NO_PERMISSION, parked)
        max_num = min(h.max_num, config.max_msgs_num_batch)
        if request.ext_fields.get("_UNIQUE_KEY_QUERY") == "true":
            max_num = config.default_query_max_num
        result = store.query_message(h.topic, h.key, max_num, h.begin_timestamp, h.end_timestamp)
        header = QueryMessageResponseHeader(
            result.index_last_update_timestamp, result.index_last_update_phy_offset
        ).to_ext_fields()
        if result.damaged:
            header[DAMAGED_FIELD] = ",".join(map(str, result.damaged))
        if not result.messages:
            return request.make_response(
                ResponseCode.QUERY_NOT_FOUND, "can not find message, maybe time range not correct", header
            )
        room, parts = QUERY_BODY_BYTES, []
        for m in result.messages:
            if len(m.raw) > room:
                break
            room -= len(m.raw)
            parts.append(m.raw)
        return request.make_response(ext_fields=header, body=b"".join(parts))

    def view(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = ViewMessageRequestHeader.from_ext_fields(request.ext_fields)
        try:
            found = store.look_message_by_offset(h.offset)
        except DamagedRecordError as e:  # 4.9.8's code for no message there, and what it is
            where = "in a quarantine" if e.quarantined else "its extent unknown, not set aside"
            return request.make_response(
                ResponseCode.SYSTEM_ERROR,
                f"can not find message by the offset, {h.offset}: the record there is damaged ({e.reason}), "
                f"{where}, never served",
                {DAMAGED_FIELD: str(h.offset)},
            )
        except CorruptRecordError as e:  # no record starts there: an answer, not a fault
            raise system_error(f"can not find message by the offset, {h.offset}: {e.reason}") from None
        if found is None:
            slave = broker.ha_slave
            replica = slave.store if slave is not None else None
            if (
                replica is not None
                and replica.held_back
                and h.offset >= replica.max_phy_offset - replica.held_back
            ):
                raise system_error(
                    f"can not find message by the offset, {h.offset}: this slave holds back what lies past its "
                    f"replica mark ({replica.replica_mark}) until its master has checked it"
                )
            raise system_error(f"can not find message by the offset, {h.offset}")
        try:  # (the topic as stored, its body unchecked: a damaged body is served as stored, for the
            # caller's own check to find, as 4.9.8 serves it)
            topic = record_identity(found.raw, 0, len(found.raw))[5].decode("utf-8", "replace")
        except CorruptRecordError:
            topic = ""
        parked = broker.view_refusal(conn, topic)
        if parked is not None:  # a peer walking the CommitLog by offset read the timers' recall handles
            return request.make_response(ResponseCode.NO_PERMISSION, parked)
        return request.make_response(body=bytes(found.raw))

    return {RequestCode.QUERY_MESSAGE: query, RequestCode.VIEW_MESSAGE_BY_ID: view}
