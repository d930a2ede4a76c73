"""Subscription groups on top of the store's `subscriptionGroup.json` manager, auto-created on use
(docs/wire-protocol.md §built-in-topics-and-groups)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from daemon.broker.bodies import SubscriptionGroupWrapper
from daemon.broker.config import BrokerConfig
from daemon.remoting.limits import WarningGate
from store.config_files import SubscriptionGroupFile
from store.models import DataVersion, SubscriptionGroupConfig
from store.names import BUILTIN_GROUPS, SYS_GROUP_PREFIX

if TYPE_CHECKING:
    from daemon.protect import Peer

log = logging.getLogger(__name__)


class SubscriptionGroupManager:
    def __init__(self, file: SubscriptionGroupFile, config: BrokerConfig) -> None:
        self.file = file
        self.config = config  # read on use: UPDATE_BROKER_CONFIG may switch auto-creation
        #: Protected mode's say on a peer creating a group on use (:func:`daemon.protect.creation_refusal`);
        #: None: every peer may.
        self.refuse: Callable[[Peer, str], str | None] | None = None
        #: Writes the table after groups were created on use (None: at once, here). The broker's writes
        #: once for a burst: a heartbeat naming N new groups rewrote the whole file N times.
        self.persist_created: Callable[[], object] | None = None
        #: Groups were created on use since the table was last written by :meth:`persist_now`.
        self.unsaved = False
        self._refusals = WarningGate(log)

    @property
    def table(self) -> dict[str, SubscriptionGroupConfig]:
        return self.file.table

    def create_builtin_groups(self) -> None:
        with self.file.lock:
            for name in BUILTIN_GROUPS:
                self.table.setdefault(name, SubscriptionGroupConfig(name))
            self.file.generation += 1
        self.file.persist()

    def wrapper(self) -> SubscriptionGroupWrapper:
        """A snapshot of the table and its version (entries are replaced, never changed in place)."""
        with self.file.lock:
            version = DataVersion(self.file.data_version.counter, self.file.data_version.timestamp)
            return SubscriptionGroupWrapper(dict(self.table), version)

    def all_json(self) -> bytes:
        """GET_ALL_SUBSCRIPTIONGROUP_CONFIG's body, kept while the table and its version stand."""
        body = self.file.kept_body("all", lambda: self.wrapper().dumps())
        assert body is not None
        return body

    def get(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config if it exists (never auto-created: see :meth:`find`)."""
        return self.table.get(group)

    def find(self, group: str, peer: Peer | None = None) -> SubscriptionGroupConfig | None:
        """The group's config, created with defaults when auto-creation allows it (and protected mode,
        for a request's ``peer``)."""
        config = self.table.get(group)
        if config is None and (
            self.config.auto_create_subscription_group or group.startswith(SYS_GROUP_PREFIX)
        ):
            if peer is not None and self.refuse is not None:
                why = self.refuse(peer, f"subscription group {group}")
                if why is not None:
                    self._refusals.warning("%s", why)
                    return None
            with self.file.lock:
                config = self.table.get(group)
                if config is None:
                    config = SubscriptionGroupConfig(group)
                    log.info("auto-created subscription group %s", group)
                    self.file.update(config, persist=False)
                    self.unsaved = True
            if self.persist_created is not None:
                self.persist_created()
            else:
                self.persist_now()
        return config

    def persist_now(self) -> None:
        """Write the table after auto-creations; a full disk must not fail the pull or heartbeat that
        named a group (the group lives on in memory, and is written with the next change)."""
        self.unsaved = False
        try:
            self.file.persist()
        except OSError as e:
            self.unsaved = True
            log.error("auto-created subscription groups are not saved yet: %s", e)

    def put(self, config: SubscriptionGroupConfig) -> None:
        self.file.update(config)

    def delete(self, group: str) -> bool:
        return self.file.delete(group)
