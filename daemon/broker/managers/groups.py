"""Subscription groups on top of the store's `subscriptionGroup.json` manager, auto-created on use (§13.1)."""

from __future__ import annotations

import dataclasses
import logging

from daemon.broker import bodies
from daemon.broker.config import BrokerConfig
from store.config_files import SubscriptionGroupConfig
from store.config_files import SubscriptionGroupManager as SubscriptionGroupFile

log = logging.getLogger(__name__)

BUILTIN_GROUPS = (
    "TOOLS_CONSUMER",
    "FILTERSRV_CONSUMER",
    "SELF_TEST_C_GROUP",
    "CID_ONS-HTTP-PROXY",
    "CID_ONSAPI_PULL",
    "CID_ONSAPI_PERMISSION",
    "CID_ONSAPI_OWNER",
)
SYS_GROUP_PREFIX = "CID_RMQ_SYS_"
_WIRE_FIELDS = tuple(f.name for f in dataclasses.fields(bodies.SubscriptionGroupConfig))


def to_wire(config: SubscriptionGroupConfig) -> bodies.SubscriptionGroupConfig:
    return bodies.SubscriptionGroupConfig(**{name: getattr(config, name) for name in _WIRE_FIELDS})


def from_wire(config: bodies.SubscriptionGroupConfig) -> SubscriptionGroupConfig:
    return SubscriptionGroupConfig(**{name: getattr(config, name) for name in _WIRE_FIELDS})


class SubscriptionGroupManager:
    def __init__(self, file: SubscriptionGroupFile, config: BrokerConfig) -> None:
        self.file = file
        self.config = config  # read on use: UPDATE_BROKER_CONFIG may switch auto-creation

    @property
    def table(self) -> dict[str, SubscriptionGroupConfig]:
        return self.file.table

    def create_builtin_groups(self) -> None:
        with self.file.lock:
            for name in BUILTIN_GROUPS:
                self.table.setdefault(name, SubscriptionGroupConfig(name))
        self.file.persist()

    def wrapper(self) -> bodies.SubscriptionGroupWrapper:
        with self.file.lock:
            version = bodies.DataVersion(self.file.data_version.counter, self.file.data_version.timestamp)
            return bodies.SubscriptionGroupWrapper({k: to_wire(v) for k, v in self.table.items()}, version)

    def get(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config if it exists (never auto-created: see :meth:`find`)."""
        return self.table.get(group)

    def find(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config, created with defaults when auto-creation allows it."""
        config = self.table.get(group)
        if config is None and (
            self.config.auto_create_subscription_group or group.startswith(SYS_GROUP_PREFIX)
        ):
            with self.file.lock:
                config = self.table.get(group)
                if config is None:
                    config = SubscriptionGroupConfig(group)
                    log.info("auto-created subscription group %s", group)
                    self.file.update(config, persist=False)
            try:
                self.file.persist()
            except OSError as e:  # a full disk must not fail the pull or heartbeat that named the group
                log.error("auto-created subscription group %s is not saved yet: %s", group, e)
        return config

    def put(self, config: SubscriptionGroupConfig) -> None:
        self.file.update(config)

    def delete(self, group: str) -> bool:
        return self.file.delete(group)
