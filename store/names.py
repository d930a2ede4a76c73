"""RocketMQ's system names, spelled once: the topics and groups a broker owns and the prefixes that mark them.

Everything else imports them from here (a test keeps each literal in this one file). Property keys and
sysflag bits, which belong to the message format, live in :mod:`store.message`.
"""

from __future__ import annotations

import re
from typing import Final

# --- name rules (Java's TopicValidator and Validators.checkGroup) ---
#: The longest topic name a broker accepts (TOPICLEN, one byte in a record, stays below 128).
MAX_TOPIC_LENGTH: Final = 127
MAX_GROUP_LENGTH: Final = 255
#: The characters topic and group names may have; `legal_name` is what Java's regex `matches()` says.
NAME_CHARS: Final = "^[%|a-zA-Z0-9_-]+$"
_NAME_CHARS: Final = re.compile(NAME_CHARS[1:-1])


#: The most read or write queues a topic may have (docs/operations.md §queue-counts): far above any
#: topic a RocketMQ operator runs (the broker's own largest, BenchmarkTest, has 1,024), low enough that a
#: loop or table over a topic's queues stays small. 4.9.8 and 5.x check no bound at all.
MAX_QUEUE_NUMS: Final = 16384
#: The most queues a topic keeps when its table is loaded from disk or taken from a master, unless the
#: store holds a queue past it (docs/operations.md §queue-counts): 4.9.8 creates any count and fills those
#: queues, so a table above :data:`MAX_QUEUE_NUMS` may describe data this broker holds and must serve;
#: a topic's per-queue answers (consume stats) still fit a frame at this count.
MAX_HELD_QUEUE_NUMS: Final = 1 << 16


def queue_nums_problem(
    read_queue_nums: int, write_queue_nums: int, names: tuple[str, str] = ("readQueueNums", "writeQueueNums")
) -> str | None:
    """Why a topic's queue counts (called ``names``) are refused, or None: below 0 or above
    :data:`MAX_QUEUE_NUMS`. A 0 is taken, as 4.9.8 takes ``-w 0`` to stop a topic's writes."""
    for what, n in zip(names, (read_queue_nums, write_queue_nums), strict=True):
        if not 0 <= n <= MAX_QUEUE_NUMS:
            return f"{what} {n} is out of range: a topic has 0 to {MAX_QUEUE_NUMS} queues"
    return None


def legal_name(name: str) -> bool:
    """Whether every character of ``name`` (not blank) is one topic and group names may have: a whole
    match, as Java's ``matches()`` ("a\\n" is refused; a ``^...$`` search would take it)."""
    return _NAME_CHARS.fullmatch(name) is not None


# --- topics (Java's TopicValidator / MixAll) ---
#: The template topic a producer's first send to an unknown topic auto-creates it from.
AUTO_CREATE_TOPIC: Final = "TBW102"
SELF_TEST_TOPIC: Final = "SELF_TEST_TOPIC"
BENCHMARK_TOPIC: Final = "BenchmarkTest"
OFFSET_MOVED_EVENT: Final = "OFFSET_MOVED_EVENT"
#: Where delayed messages wait, queue ``level - 1`` per delay level.
SCHEDULE_TOPIC: Final = "SCHEDULE_TOPIC_XXXX"
#: Where timer messages (any delivery time) wait, queue 0 (5.x's ``TimerMessageStore.TIMER_TOPIC``).
TIMER_TOPIC: Final = "rmq_sys_wheel_timer"
#: Where an elected DLedger leader appends its term record (queue 0), whose commit commits its
#: predecessor's tail (Raft's rule counts only entries of the leader's own term). It has no topic config:
#: never routed, no client sends, pulls or pops it.
DLEDGER_TERM_TOPIC: Final = "rmq_sys_dledger_term"
TRANS_HALF_TOPIC: Final = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC: Final = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC: Final = "TRANS_CHECK_MAX_TIME_TOPIC"
#: The default ``msgTraceTopicName``.
TRACE_TOPIC: Final = "RMQ_SYS_TRACE_TOPIC"
#: ``<cluster>`` + this names the cluster's request-reply topic.
REPLY_TOPIC_SUFFIX: Final = "_REPLY_TOPIC"
#: ``<this><cluster>``: where a DLedger leader logs POP acks and changes of invisibility, queue 0 (5.x's
#: revive topic, ``PopAckConstants.REVIVE_TOPIC``); no client sends to it (a forged ack would be taken).
REVIVE_TOPIC_PREFIX: Final = "rmq_sys_REVIVE_LOG_"
#: Topics of this prefix are system topics (Java's ``TopicValidator.SYSTEM_TOPIC_PREFIX``).
SYSTEM_TOPIC_PREFIX: Final = "rmq_sys_"
#: The prefix of the broker's transaction and trace topics.
INTERNAL_TOPIC_PREFIX: Final = "RMQ_SYS_"
RETRY_GROUP_TOPIC_PREFIX: Final = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX: Final = "%DLQ%"

#: Topics no client may send to (docs/wire-protocol.md §send-processing step 2).
NOT_ALLOWED_SEND_TOPICS: Final = frozenset(
    {
        SCHEDULE_TOPIC,
        TRANS_HALF_TOPIC,
        TRANS_OP_HALF_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
        SELF_TEST_TOPIC,
        OFFSET_MOVED_EVENT,
        TIMER_TOPIC,  # (5.x's TopicValidator: a forged parked record would deliver anywhere)
        DLEDGER_TERM_TOPIC,
    }
)

#: Java's ``TopicValidator`` system topics (4.9.8's set); a broker adds its cluster's and its own name, the
#: cluster's reply topic and its trace topic (:func:`system_topic` with ``own``).
SYSTEM_TOPICS: Final = frozenset(
    {
        AUTO_CREATE_TOPIC,
        SCHEDULE_TOPIC,
        BENCHMARK_TOPIC,
        TRANS_HALF_TOPIC,
        TRACE_TOPIC,
        TRANS_OP_HALF_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
        SELF_TEST_TOPIC,
        OFFSET_MOVED_EVENT,
    }
)


def system_topic(topic: str, own: frozenset[str] | set[str] = frozenset()) -> bool:
    """4.9.8's ``TopicValidator.isSystemTopic``, with ``own`` the cluster and broker names (the topics a
    broker creates after them, and the reply topic ``<cluster>_REPLY_TOPIC``)."""
    if topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX) or topic in own:
        return True
    return topic.endswith(REPLY_TOPIC_SUFFIX) and topic.removesuffix(REPLY_TOPIC_SUFFIX) in own


# --- groups (Java's MixAll) ---
#: The consumer group admin tools read as: built into every broker, never commits.
TOOLS_CONSUMER_GROUP: Final = "TOOLS_CONSUMER"
#: The group whose offset tracks the broker's progress through the transaction half queue.
TRANS_CHECK_GROUP: Final = "CID_RMQ_SYS_TRANS"
#: The group the broker reads the timer topic as (never commits: its progress has files of its own).
TIMER_GROUP: Final = "CID_RMQ_SYS_TIMER"
#: The group whose offset is where a DLedger leader's POP ack log (``REVIVE_TOPIC_PREFIX``) is still live
#: (5.x's ``PopAckConstants.REVIVE_GROUP``).
REVIVE_GROUP: Final = "CID_RMQ_SYS_REVIVE_GROUP"
#: Groups of this prefix are created on use even when auto-creation is off.
SYS_GROUP_PREFIX: Final = "CID_RMQ_SYS_"
#: The subscription groups a broker creates at start (docs/wire-protocol.md §built-in-topics-and-groups).
BUILTIN_GROUPS: Final = (
    TOOLS_CONSUMER_GROUP,
    "FILTERSRV_CONSUMER",
    "SELF_TEST_C_GROUP",
    "CID_ONS-HTTP-PROXY",
    "CID_ONSAPI_PULL",
    "CID_ONSAPI_PERMISSION",
    "CID_ONSAPI_OWNER",
)
#: Every group a broker uses for itself.
SYSTEM_GROUPS: Final = frozenset({*BUILTIN_GROUPS, TRANS_CHECK_GROUP, REVIVE_GROUP})


def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_GROUP_TOPIC_PREFIX + group


def reserved_group_prefix(group: str) -> str | None:
    """The retry or dead-letter topic prefix ``group`` starts with, or None. A new group must not: those
    prefixes name a group's own topics, so such a group's retry topic would be ``%RETRY%%RETRY%...`` and
    every tool that tells a group's topics from plain ones by the prefix would take the group for a topic
    of another. 4.9.8 takes any name; its own tools never make one."""
    for prefix in (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX):
        if group.startswith(prefix):
            return prefix
    return None


def new_group_problem(group: str) -> str | None:
    """Why ``group`` cannot name a new or updated subscription group on the wire (5.x's ``validateGroup``
    remarks, then :func:`reserved_group_prefix`), or None."""
    if not group or group.isspace():
        return "The specified group is blank."
    if not legal_name(group):
        return f"The specified group: {group}, contains illegal characters, allowing only {NAME_CHARS}"
    if len(group) > MAX_GROUP_LENGTH:
        return f"The specified group: {group}, is longer than group max length: {MAX_GROUP_LENGTH}"
    prefix = reserved_group_prefix(group)
    if prefix is not None:
        return f"The specified group: {group}, starts with {prefix}, the prefix of groups' own topics"
    return None
