"""What the store's reads and puts return: statuses and result objects, built on every put and pull.

A module of its own so that the compiled build (``scripts/build_native.py``) covers them: the
``MessageStore`` protocol beside them in :mod:`store.api` cannot be compiled (``runtime_checkable``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from store.commitlog import PutMessageStatus
from store.errors import CorruptRecordError
from store.message import COMPRESSED_FLAG, StoredMessage
from store.record import decode_record

__all__ = ["GetMessageStatus", "GetResult", "PutResult", "QueryResult", "SelectedMessage"]


class GetMessageStatus(Enum):
    """RocketMQ's ``GetMessageStatus``."""

    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"

    #: Identity, as an Enum's equality is: Enum's own ``__hash__`` runs interpreted, and the broker looks
    #: every put's and pull's status up in a dict.
    __hash__ = object.__hash__


@dataclass(slots=True, init=False)
class PutResult:
    """Outcome of a put. For a batch, offsets are those of the first message and ``msg_id`` joins all ids."""

    status: PutMessageStatus
    phys_offset: int = -1
    queue_offset: int = -1
    msg_id: str = ""
    wrote_bytes: int = 0
    store_timestamp: int = 0
    msg_num: int = 0

    def __init__(  # written out: mypyc compiles it (a dataclass's generated one runs interpreted)
        self,
        status: PutMessageStatus,
        phys_offset: int = -1,
        queue_offset: int = -1,
        msg_id: str = "",
        wrote_bytes: int = 0,
        store_timestamp: int = 0,
        msg_num: int = 0,
    ) -> None:
        self.status = status
        self.phys_offset = phys_offset
        self.queue_offset = queue_offset
        self.msg_id = msg_id
        self.wrote_bytes = wrote_bytes
        self.store_timestamp = store_timestamp
        self.msg_num = msg_num

    @property
    def ok(self) -> bool:
        return self.status is PutMessageStatus.PUT_OK


class SelectedMessage:
    """One record found by a read: raw bytes (a zero-copy view of the mapping) plus a lazy decode.

    The broker sends ``raw`` as-is in pull responses; :attr:`message` decodes on first use and
    validates the record (magic, lengths, body CRC), raising :class:`CorruptRecordError` with the
    file and CommitLog offset instead of returning a damaged message.
    """

    __slots__ = ("_decoded", "path", "phys_offset", "queue_offset", "raw", "size", "tags_code")

    def __init__(
        self,
        phys_offset: int,
        size: int,
        raw: memoryview,
        queue_offset: int = -1,
        tags_code: int = 0,
        path: str = "",
    ) -> None:
        self.phys_offset = phys_offset
        self.size = size
        self.raw = raw
        self.queue_offset = queue_offset
        self.tags_code = tags_code
        self.path = path
        self._decoded: StoredMessage | None = None

    @property
    def message(self) -> StoredMessage:
        if self._decoded is None:
            try:
                self._decoded = decode_record(self.raw, 0, self.size, check_crc=True)
            except CorruptRecordError as e:
                raise e.located(self.path, self.phys_offset) from None
        return self._decoded

    @property
    def stored(self) -> StoredMessage:
        """The message with its body as stored (a compressed one not inflated): what a lending or a copy
        needs, without inflating a body (up to 64 MiB, or refused: a bomb, a codec not installed)."""
        if self._decoded is not None:
            return self._decoded
        try:
            msg = decode_record(self.raw, 0, self.size, check_crc=True, inflate=False)
        except CorruptRecordError as e:
            raise e.located(self.path, self.phys_offset) from None
        if not msg.sys_flag & COMPRESSED_FLAG:
            self._decoded = msg  # the same as `message`
        return msg

    def __repr__(self) -> str:
        return f"SelectedMessage(phys_offset={self.phys_offset}, size={self.size}, queue_offset={self.queue_offset})"


@dataclass(slots=True, init=False)
class GetResult:
    """A pull: the messages found, where the next pull starts and the queue's offset range."""

    status: GetMessageStatus
    messages: list[SelectedMessage] = field(default_factory=list)
    next_begin_offset: int = 0
    min_offset: int = 0
    max_offset: int = 0

    def __init__(  # written out: mypyc compiles it (a dataclass's generated one runs interpreted)
        self,
        status: GetMessageStatus,
        messages: list[SelectedMessage] | None = None,
        next_begin_offset: int = 0,
        min_offset: int = 0,
        max_offset: int = 0,
    ) -> None:
        self.status = status
        self.messages = [] if messages is None else messages
        self.next_begin_offset = next_begin_offset
        self.min_offset = min_offset
        self.max_offset = max_offset

    @property
    def buffer_total_size(self) -> int:
        return sum(m.size for m in self.messages)


@dataclass(slots=True)
class QueryResult:
    """Messages found by key, oldest first, plus the newest index file's end time and offset, and the
    CommitLog offsets of the damaged records the key's index entries led to (never served)."""

    messages: list[SelectedMessage]
    index_last_update_timestamp: int
    index_last_update_phy_offset: int
    damaged: list[int] = field(default_factory=list)
