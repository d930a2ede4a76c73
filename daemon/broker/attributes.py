"""A topic's 5.x attributes as UPDATE_AND_CREATE_TOPIC's ``attributes`` field changes them (5.x ``mqadmin
updateTopic -a +message.type=FIFO``): RocketMQ 5.x's ``AttributeParser`` and
``AttributeUtil.alterCurrentAttributes`` with its ``TopicAttributes``, their refusals worded as 5.x's.

The topic keeps them in ``TopicConfig.extra["attributes"]`` (a 5.x ``topics.json`` holds them there too)
and GET_ALL_TOPIC_CONFIG carries them. ``message.type`` is what the gRPC front routes and checks sends by;
the store serves one kind of queue and deletes by time, so ``queue.type=BatchCQ`` and
``cleanup.policy=COMPACTION`` are refused here rather than accepted and not honoured.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from daemon.remoting.codes import INVALID_PARAMETER, ResponseCode

__all__ = ["MESSAGE_TYPE", "MESSAGE_TYPES", "AttributeRefused", "alter_attributes"]

MESSAGE_TYPE: Final = "message.type"
#: 5.x's ``TopicMessageType`` values (one string: "DELAY" alone is the name of a message property).
MESSAGE_TYPES: Final = tuple("UNSPECIFIED NORMAL FIFO DELAY TRANSACTION MIXED".split())  # noqa: SIM905


class AttributeRefused(Exception):
    """A change refused, with the response code and remark a 5.x broker answers."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


@dataclass(frozen=True, slots=True)
class _Attribute:
    changeable: bool
    values: tuple[str, ...] = ()  # an enum's values; none: a long in [0 or -1, max]
    served: tuple[str, ...] = ()  # the values this broker honours (all when empty)

    def verify(self, value: str) -> None:
        if self.values:
            if value not in self.values:
                raise _refused(f"value is not in set: [{', '.join(self.values)}]")
            if self.served and value not in self.served:
                raise AttributeRefused(INVALID_PARAMETER, f"value {value} is not supported by this broker")
            return
        try:
            number = int(value)
        except ValueError:
            raise _refused(f'For input string: "{value}"') from None
        if not -1 <= number <= 2**63 - 1:
            raise _refused(f"value is not in range(-1, {2**63 - 1})")


#: 5.x's ``TopicAttributes.ALL``.
_ALL: Final = {
    "queue.type": _Attribute(False, ("BatchCQ", "SimpleCQ"), ("SimpleCQ",)),
    "cleanup.policy": _Attribute(False, ("DELETE", "COMPACTION"), ("DELETE",)),
    MESSAGE_TYPE: _Attribute(True, MESSAGE_TYPES),
    "reserve.time": _Attribute(True),
}


def _refused(remark: str) -> AttributeRefused:
    return AttributeRefused(ResponseCode.SYSTEM_ERROR, remark)


def parse_changes(text: str) -> dict[str, str]:
    """``+key=value,-key`` → {"+key": value, "-key": ""} (5.x ``AttributeParser.parseToMap``)."""
    changes: dict[str, str] = {}
    for kv in text.split(",") if text else ():
        if "=" in kv:
            key, _, value = kv.partition("=")
            if "+" not in key or not value or "=" in value:
                raise _refused(f"add/alter attribute format is wrong: {key}")
        else:
            key, value = kv, ""
            if "-" not in key:
                raise _refused(f"delete attribute format is wrong: {key}")
        if key in changes:
            raise _refused(f"key duplication: {key}")
        changes[key] = value
    return changes


def alter_attributes(current: dict[str, str] | None, text: str | None) -> dict[str, str]:
    """The attributes after the changes ``text`` asks of a topic holding ``current`` (None: the topic is
    being created, which takes additions only). Raises :class:`AttributeRefused`."""
    if not text:
        return dict(current or {})
    changes = parse_changes(text)
    if changes.get("+" + MESSAGE_TYPE) == "MIXED":  # 5.x's enableMixedMessageType is off by default
        raise AttributeRefused(INVALID_PARAMETER, "MIXED message type is not supported.")
    out = dict(current or {})
    seen: set[str] = set()
    for key, value in changes.items():
        name = key[1:]
        if not name or "+" in name or "-" in name:
            raise _refused("kv string format wrong.")
        if name in seen:
            raise _refused(f"alter duplication key. key: {name}")
        seen.add(name)
        attribute = _ALL.get(name)
        if current is None and not key.startswith("+"):
            raise _refused(f"only add attribute is supported while creating topic. key: {name}")
        if key.startswith("-"):
            if name not in out:
                raise _refused(f"attempt to delete a nonexistent key: {name}")
        elif not key.startswith("+"):
            raise _refused(f"wrong format key: {name}")
        if attribute is None:
            raise _refused(f"unsupported key: {name}")
        if current is not None and not attribute.changeable:
            raise _refused(f"attempt to update an unchangeable attribute. key: {name}")
        if key.startswith("-"):
            del out[name]
        else:
            attribute.verify(value)
            out[name] = value
    return out
