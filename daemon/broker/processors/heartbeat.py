"""HEART_BEAT (34), UNREGISTER_CLIENT (35), GET_CONSUMER_LIST_BY_GROUP (38), CHECK_CLIENT_CONFIG (46)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from daemon.broker.bodies import GetConsumerListByGroupResponseBody, HeartbeatData
from daemon.broker.filter import is_tag_type
from daemon.broker.headers import ConsumerGroupHeader, UnregisterClientRequestHeader
from daemon.broker.managers.consumers import ClientChannel, client_overflow
from daemon.broker.processors import system_error
from daemon.remoting.bodies import PermName
from daemon.remoting.codes import RequestCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.connection import Connection, Processor
from daemon.remoting.limits import WarningGate
from store import fastjson
from store.names import retry_topic

if TYPE_CHECKING:
    from daemon.broker.context import BrokerContext

log = logging.getLogger(__name__)


def processors(broker: BrokerContext) -> dict[int, Processor]:
    p = ClientProcessor(broker)
    return {
        RequestCode.HEART_BEAT: p.heartbeat,
        RequestCode.UNREGISTER_CLIENT: p.unregister,
        RequestCode.GET_CONSUMER_LIST_BY_GROUP: p.consumer_list,
        RequestCode.CHECK_CLIENT_CONFIG: p.check_client_config,
    }


class ClientProcessor:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker
        self._refusals = WarningGate(log)

    def heartbeat(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        try:
            data = HeartbeatData.loads(request.body)
        except (ValueError, TypeError, KeyError) as exc:
            raise system_error(f"bad heartbeat body: {exc}") from None
        broker = self.broker
        overflow = client_overflow(
            conn,
            {p.group_name for p in data.producer_data_set},
            {c.group_name: len(c.subscription_data_set) for c in data.consumer_data_set},
        )
        if overflow is not None:
            self._refusals.warning("refused a heartbeat from %s: %s", conn.peer, overflow)
            raise system_error(f"heartbeat refused: {overflow}")
        language = request.language.name
        for consumer in data.consumer_data_set:
            group = broker.groups.find(consumer.group_name, conn)
            if group is not None:
                # creating %RETRY%<group> re-registers the broker, which gives the retry topic a route
                broker.topics.create_system_like(
                    retry_topic(consumer.group_name),
                    max(group.retry_queue_nums, 1),
                    PermName.READ_WRITE,
                    2 if consumer.unit_mode else 0,
                )
            channel = ClientChannel(conn, data.client_id, language, request.version)
            broker.consumers.register(channel, consumer)
        for producer in data.producer_data_set:
            broker.producers.register(
                producer.group_name, ClientChannel(conn, data.client_id, language, request.version)
            )
        return request.make_response()

    def unregister(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = UnregisterClientRequestHeader.from_ext_fields(request.ext_fields)
        if h.producer_group:
            self.broker.producers.unregister(conn, h.producer_group)
        if h.consumer_group:
            self.broker.consumers.unregister(conn, h.consumer_group)
        return request.make_response()

    def consumer_list(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = ConsumerGroupHeader.from_ext_fields(request.ext_fields)
        info = self.broker.consumers.get(h.consumer_group)
        if info is None or not info.channels:
            raise system_error(f"no consumer for this group, {h.consumer_group}")
        body = GetConsumerListByGroupResponseBody(info.client_ids()).dumps()
        return request.make_response(body=body)

    def check_client_config(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        try:
            sub = (fastjson.loads(request.body) or {}).get("subscriptionData") or {}
        except ValueError as exc:
            raise system_error(f"bad body: {exc}") from None
        kind = sub.get("expressionType")
        if not is_tag_type(kind) and not self.broker.config.enable_property_filter:
            raise system_error(f"The broker does not support consumer to filter message by {kind}")
        return request.make_response()
