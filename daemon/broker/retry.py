"""The copy of a consumed message that goes back to a group's retry topic or DLQ: one shape for a 4.x
consumer's send-back (CONSUMER_SEND_MSG_BACK) and a 5.x POP lending that ran out (the revive)."""

from __future__ import annotations

from store.message import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_WAIT_STORE_MSG_OK,
    HostAddress,
    Message,
    StoredMessage,
)


def retry_copy(
    old: StoredMessage, topic: str, queue_id: int, store_host: HostAddress, delay_level: int | None
) -> Message:
    """``old`` for ``topic``: its body and properties, the topic it was first consumed from in
    ``RETRY_TOPIC``, its first message id in ``ORIGIN_MESSAGE_ID``, ``reconsumeTimes + 1``, and the delay
    level it waits for (None: none, as a DLQ copy or a POP revive, whose invisibility was the wait)."""
    props = dict(old.properties)
    props.setdefault(PROPERTY_RETRY_TOPIC, old.topic)
    if delay_level is None:
        props.pop(PROPERTY_DELAY_TIME_LEVEL, None)
    else:
        props[PROPERTY_DELAY_TIME_LEVEL] = str(delay_level)
    props.setdefault(PROPERTY_ORIGIN_MESSAGE_ID, old.msg_id)
    props[PROPERTY_WAIT_STORE_MSG_OK] = "false"
    # 4.9.8's send-back copy has no prepared-transaction offset (a committed message's is dropped)
    times = old.reconsume_times + 1
    return copy_of(old, topic, queue_id, props, store_host=store_host, reconsume_times=times, prepared=0)


def copy_of(
    old: StoredMessage,
    topic: str,
    queue_id: int,
    properties: dict[str, str],
    *,
    store_host: HostAddress | None = None,
    reconsume_times: int | None = None,
    prepared: int | None = None,
    delay_time_level: int | None = None,
) -> Message:
    """A stored message as a new one for ``topic``/``queue_id`` with ``properties``: the rest as stored
    (its store host, reconsume times and prepared-transaction offset unless given), not waiting for a
    flush; ``delay_time_level=0`` keeps a ``DELAY`` property from delaying the copy again."""
    return Message(
        topic=topic,
        body=old.stored_body,
        queue_id=queue_id,
        flag=old.flag,
        properties=properties,
        sys_flag=old.sys_flag,
        born_timestamp=old.born_timestamp,
        born_host=old.born_host,
        store_host=old.store_host if store_host is None else store_host,
        reconsume_times=old.reconsume_times if reconsume_times is None else reconsume_times,
        prepared_transaction_offset=old.prepared_transaction_offset if prepared is None else prepared,
        wait_store_msg_ok=False,
        delay_time_level=delay_time_level,
    )
