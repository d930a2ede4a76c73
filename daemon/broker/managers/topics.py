"""The broker's topic rules on top of the store's `topics.json` manager
(docs/wire-protocol.md §send-processing).

System topics are created at start, user topics from the TBW102 template when auto-creation is on,
`%RETRY%`/`%DLQ%` topics on demand. Every change bumps the table's DataVersion, is persisted by the
store's manager, and calls `on_change` so the broker re-registers with the NameServers.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping, MutableMapping

from daemon.broker.config import BrokerConfig
from daemon.remoting.bodies import TableText, TopicConfigSerializeWrapper
from store.config import SLAVE
from store.config_files import TopicConfigFile
from store.models import DataVersion, PermName, TopicConfig
from store.names import (
    AUTO_CREATE_TOPIC,
    BENCHMARK_TOPIC,
    DLEDGER_TERM_TOPIC,
    MAX_HELD_QUEUE_NUMS,
    MAX_QUEUE_NUMS,
    MAX_TOPIC_LENGTH,
    NAME_CHARS,
    OFFSET_MOVED_EVENT,
    REPLY_TOPIC_SUFFIX,
    REVIVE_TOPIC_PREFIX,
    SCHEDULE_TOPIC,
    SELF_TEST_TOPIC,
    SYSTEM_TOPIC_PREFIX,
    SYSTEM_TOPICS,
    TRANS_HALF_TOPIC,
    legal_name,
)
from store.words import plural

log = logging.getLogger(__name__)


def _topic_problem(topic: str) -> str | None:
    if not topic:
        return "The specified topic is blank."
    if not legal_name(topic):
        return f"The specified topic contains illegal characters, allowing only {NAME_CHARS}"
    if len(topic) > MAX_TOPIC_LENGTH:
        return "The specified topic is longer than topic max length."
    return None


#: The names found valid: every send checks its topic, and a set lookup costs a third of the regular
#: expression. A plain set, not an LRU: a hit then touches one entry, not the LRU's linked list too
#: (with 10,000 topics sent to round-robin those are cache misses on every send). It holds only valid
#: names (at most 127 characters) and empties itself at 65,536 of them: ~10 MB at most.
_valid: set[str] = set()
_VALID_MAX = 1 << 16


def topic_problem(topic: str) -> str | None:
    """Why a topic name is invalid (the broker's remarks, in 4.9.8's order), or None when it is fine."""
    if topic in _valid:
        return None
    problem = _topic_problem(topic)
    if problem is None:
        if len(_valid) >= _VALID_MAX:
            _valid.clear()
        _valid.add(topic)
    return problem


def held_queue_counts(keys: Iterable[tuple[str, int]]) -> dict[str, int]:
    """Each topic's highest queue id + 1 among the store's queues ``keys`` (``(topic, queue id)``)."""
    held: dict[str, int] = {}
    for topic, queue_id in keys:
        if queue_id >= held.get(topic, 0):
            held[topic] = queue_id + 1
    return held


def clamp_queue_counts(
    table: MutableMapping[str, TopicConfig], held: Callable[[], Iterable[tuple[str, int]]] = tuple
) -> list[str]:
    """Bring every queue count of ``table`` into 0..MAX_HELD_QUEUE_NUMS, or up to the highest queue id + 1
    the store holds of the topic (``held()``: its queues' ``(topic, queue id)``, asked only then),
    replacing the entries changed; the changes, as "topic (readQueueNums 99999999999 -> 65536)". A
    table written before creation checked the counts, or a master that does not, may hold one in the
    billions, which each loop over the topic's queues would take: clamped, not refused, as one topic's
    count must not keep the others from being served. The bound is far above creation's
    :data:`MAX_QUEUE_NUMS`: 4.9.8 fills the queues of any count it created, and a slave of it must serve
    them (docs/operations.md §queue-counts)."""
    most: dict[str, int] | None = None
    changes = []
    for name, config in list(table.items()):
        if (
            0 <= config.read_queue_nums <= MAX_HELD_QUEUE_NUMS
            and 0 <= config.write_queue_nums <= MAX_HELD_QUEUE_NUMS
        ):
            continue
        if most is None:
            most = held_queue_counts(held())
        bound = max(MAX_HELD_QUEUE_NUMS, most.get(name, 0))
        read = min(max(config.read_queue_nums, 0), bound)
        write = min(max(config.write_queue_nums, 0), bound)
        if (read, write) == (config.read_queue_nums, config.write_queue_nums):
            continue
        table[name] = dataclasses.replace(config, read_queue_nums=read, write_queue_nums=write)
        moved = [
            f"{what} {old} -> {new}"
            for what, old, new in (
                ("readQueueNums", config.read_queue_nums, read),
                ("writeQueueNums", config.write_queue_nums, write),
            )
            if old != new
        ]
        changes.append(f"{name} ({', '.join(moved)})")
    return changes


class TopicConfigManager:
    def __init__(self, config: BrokerConfig, file: TopicConfigFile) -> None:
        self.config = config
        self.file = file
        #: Called after every change with the topic changed, or None when a topic was deleted.
        self.on_change: Callable[[str | None], None] = lambda topic: None
        #: The table's entries as GET_ALL_TOPIC_CONFIG last wrote them (the registration keeps its own:
        #: it encodes in slices between other work, this in one call).
        self._all_text = TableText()
        self.system_topics: set[str] = {
            *SYSTEM_TOPICS,
            config.msg_trace_topic_name,
            config.broker_cluster_name,
            config.broker_name,
            config.broker_cluster_name + REPLY_TOPIC_SUFFIX,
        }

    @property
    def table(self) -> dict[str, TopicConfig]:
        return self.file.table

    def create_system_topics(self) -> None:
        """The topics a 4.9.8 broker creates at start-up (docs/wire-protocol.md §built-in-topics-and-groups);
        existing entries are kept."""
        c = self.config
        rw = PermName.READ_WRITE
        specs: list[tuple[str, int, int]] = [(SELF_TEST_TOPIC, 1, rw)]
        if c.auto_create_topic_enable:
            specs.append((AUTO_CREATE_TOPIC, c.default_topic_queue_nums, rw | PermName.INHERIT))
        specs += [
            (BENCHMARK_TOPIC, 1024, rw),
            (
                c.broker_cluster_name,
                16,
                rw | PermName.INHERIT if c.cluster_topic_enable else PermName.INHERIT,
            ),
            (c.broker_name, 1, rw | PermName.INHERIT if c.broker_topic_enable else PermName.INHERIT),
            (OFFSET_MOVED_EVENT, 1, rw),
            (SCHEDULE_TOPIC, 18, rw),
            (c.broker_cluster_name + REPLY_TOPIC_SUFFIX, 1, rw),
        ]
        if c.trace_topic_enable:
            specs.append((c.msg_trace_topic_name, 1, rw))
        if c.broker_role != SLAVE:
            # 4.9.8's TransactionalMessageCheckService (masters only) makes it on its first pass, through
            # TransactionalMessageBridge#selectTopicConfig: tools see it on an idle broker too
            specs.append((TRANS_HALF_TOPIC, 1, rw))
        with self.file.lock:
            for name, queues, perm in specs:
                self.table.setdefault(name, TopicConfig(name, queues, queues, perm))
            self.file.generation += 1
        self.file.persist()

    def clamp_queue_counts(self, held: Callable[[], Iterable[tuple[str, int]]] = tuple) -> list[str]:
        """:func:`clamp_queue_counts` over the table loaded at start (the store's queues ``held()``),
        persisted and logged at ERROR."""
        with self.file.lock:
            changes = clamp_queue_counts(self.table, held)
            if changes:
                self.file.data_version.next_version(self.file.clock.now_ms())
                self.file.generation += 1
        if changes:
            self.file.persist()
            log.error(
                "%s holds queue counts out of range (0 to %d, or the queues held); clamped: %s",
                self.file.path,
                MAX_HELD_QUEUE_NUMS,
                "; ".join(changes),
            )
        return changes

    def recreate_lost_topics(self, queue_table: Mapping[tuple[str, int], int]) -> list[str]:
        """Give a config back to every topic the store holds messages of but the table lacks (topics.json
        lost, or fallen back to an older .bak): as many queues as its highest queue id + 1, at most
        MAX_HELD_QUEUE_NUMS (a foreign master's queue id is unbounded, and this runs after the start's clamp),
        default perms, logged at ERROR. No topic with data vanishes from routing. Returns the topics
        re-created."""
        with_data = {topic for (topic, _), next_offset in queue_table.items() if next_offset > 0}
        with_data = {  # (a store's own records, never routed)
            t for t in with_data if t != DLEDGER_TERM_TOPIC and not t.startswith(REVIVE_TOPIC_PREFIX)
        }
        lost = held_queue_counts([k for k in queue_table if k[0] in with_data and k[0] not in self.table])
        queues = {topic: min(n, MAX_HELD_QUEUE_NUMS) for topic, n in lost.items()}
        if not queues:
            return []
        for topic, n in sorted(queues.items()):
            self.file.update(TopicConfig(topic, n, n), persist=False)
        self.file.persist()
        log.error(
            "%s lacks %s that hold messages; re-created with their queues and default perms: %s",
            self.file.path,
            plural(len(queues), "topic"),
            ", ".join(f"{topic} ({n} queues)" for topic, n in sorted(queues.items())),
        )
        return sorted(queues)

    def is_system_topic(self, topic: str) -> bool:
        return topic in self.system_topics or topic.startswith(SYSTEM_TOPIC_PREFIX)

    def wrapper(self, topics: Iterable[str] | None = None) -> TopicConfigSerializeWrapper:
        """The table (or the named topics that exist) as GET_ALL_TOPIC_CONFIG and REGISTER_BROKER carry it: a
        snapshot of the table and its version (entries are replaced, never changed in place)."""
        with self.file.lock:
            version = DataVersion(self.file.data_version.counter, self.file.data_version.timestamp)
            table = self.table
            configs = dict(table) if topics is None else {t: table[t] for t in topics if t in table}
            return TopicConfigSerializeWrapper(configs, version)

    def all_json(self) -> bytes | None:
        """GET_ALL_TOPIC_CONFIG's body (the whole table and its version), None when there is no topic;
        each entry re-encoded only after it changed since the last call, the whole kept while the table
        and its version stand."""
        return self.file.kept_body("all", self._all_json)

    def _all_json(self) -> bytes | None:
        wrapper = self.wrapper()
        return wrapper.dumps_kept(self._all_text) if wrapper.topic_config_table else None

    def new_version(self) -> None:
        """Bump the data version without a change: NameServers re-read the whole table at the next
        registration (after registrations of single topics, one of which a restarted NameServer may
        have taken for the whole table)."""
        with self.file.lock:
            self.file.data_version.next_version(self.file.clock.now_ms())

    @property
    def generation(self) -> int:
        """Moves on every change of the table (see ``TopicConfigFile.generation``): a send's kept topic
        state is current while it has not moved."""
        return self.file.generation

    def get(self, topic: str) -> TopicConfig | None:
        return self.file.table.get(topic)  # (every send: not through the property)

    def names(self) -> set[str]:
        """Every topic with a config."""
        return set(self.table)

    def put(self, config: TopicConfig, *, persist: bool = True) -> None:
        """Create or replace a topic; ``persist=False`` when the caller group-commits topics.json itself."""
        self.file.update(config, persist=persist)
        self.on_change(config.topic_name)

    def revert(self, config: TopicConfig, old: TopicConfig | None) -> None:
        """Undo ``put(config, persist=False)`` whose write failed (see :meth:`TopicConfigFile.revert`)."""
        if self.file.revert(config, old):
            self.on_change(config.topic_name if old is not None else None)

    def delete(self, topic: str) -> bool:
        if not self.file.delete(topic):
            return False
        self.on_change(None)
        return True

    def create_in_send(
        self, topic: str, default_topic: str, queue_nums: int, topic_sys_flag: int
    ) -> TopicConfig | None:
        """Auto-create `topic` from the template `default_topic` when it carries INHERIT
        (docs/wire-protocol.md §send-processing step 3)."""
        with self.file.lock:
            existing = self.table.get(topic)
            if existing is not None:
                return existing
            template = self.table.get(default_topic)
            if template is None or not template.perm & PermName.INHERIT:
                return None
            if default_topic == AUTO_CREATE_TOPIC and not self.config.auto_create_topic_enable:
                return None
            nums = max(1, min(queue_nums, template.write_queue_nums, MAX_QUEUE_NUMS))
            config = TopicConfig(
                topic,
                nums,
                nums,
                template.perm & ~PermName.INHERIT,
                template.topic_filter_type,
                topic_sys_flag,
            )
            self.file.update(config, persist=False)
        log.info("auto-created topic %s from %s with %d queues", topic, default_topic, nums)
        self._made_durable(config)
        return config

    def create_system_like(
        self, topic: str, queue_nums: int, perm: int, topic_sys_flag: int = 0
    ) -> TopicConfig:
        """Get or create a broker-owned topic (`%RETRY%`, `%DLQ%`, transaction topics)."""
        with self.file.lock:
            existing = self.table.get(topic)
            if existing is not None:
                return existing
            queue_nums = max(1, min(queue_nums, MAX_QUEUE_NUMS))  # (a group's retryQueueNums is unchecked)
            config = TopicConfig(topic, queue_nums, queue_nums, perm, topic_sys_flag=topic_sys_flag)
            self.file.update(config, persist=False)
        log.info("created topic %s with %d queues", topic, queue_nums)
        self._made_durable(config)
        return config

    def _made_durable(self, config: TopicConfig) -> None:
        """A topic created on the way of a send is journaled (one line, one fdatasync) before the send goes
        on, not a rewrite of the whole topics.json; outside the table's lock, which a writer of the file
        takes after its own write lock (taking them the other way round could deadlock with a
        group-committed ``topic apply`` persisting at the same moment)."""
        self.file.persist_changes()
        self.on_change(config.topic_name)
