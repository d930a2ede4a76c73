"""Exceptions raised by the storage engine.

The CLI maps these onto its own error tree at one boundary; nothing here knows about it.
"""

from __future__ import annotations


class StoreError(Exception):
    """Base class of every error the store raises on purpose."""


class CorruptRecordError(StoreError):
    """A CommitLog record (or a unit pointing at one) failed validation.

    ``path`` is the file holding the record (``None`` when a pure codec decoded a detached buffer) and
    ``offset`` the record's position: the absolute CommitLog offset when ``path`` is a CommitLog file,
    else the position inside the buffer that was decoded.
    """

    def __init__(self, path: str | None, offset: int, reason: str) -> None:
        self.path = path
        self.offset = offset
        self.reason = reason
        where = f"{path}@{offset}" if path else f"offset {offset}"
        super().__init__(f"corrupt record at {where}: {reason}")

    def located(self, path: str, offset: int) -> CorruptRecordError:
        """Return a copy that names the file and absolute offset (codecs only know buffer positions)."""
        return CorruptRecordError(path, offset, self.reason)


class DamagedRecordError(CorruptRecordError):
    """A lookup by offset (a msgId, an index hit) found a record there whose contents are damaged (its
    body CRC fails), or one already set aside: never served. ``quarantined`` says whether the record is in
    a quarantine (set aside now or earlier), else its extent is unknown and nothing could be set aside."""

    def __init__(self, path: str | None, offset: int, reason: str, *, quarantined: bool) -> None:
        super().__init__(path, offset, reason)
        self.quarantined = quarantined


class DamagedUnitError(StoreError):
    """A ConsumeQueue unit does not point at the record it stands for: the store heals its queue from the
    CommitLog (:meth:`store.api.MessageStore.heal`)."""

    def __init__(
        self, topic: str, queue_id: int, queue_offset: int, phys: int, size: int, reason: str
    ) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.queue_offset = queue_offset
        super().__init__(
            f"{topic}/{queue_id}: unit at queue offset {queue_offset} (offset {phys}, size {size}) {reason}"
        )


class StoreLockedError(StoreError):
    """The store directory is locked by another process (a running broker) or another store object."""


class StoreFormatError(StoreError):
    """The directory cannot be loaded as a RocketMQ store (wrong file sizes, bad names, ...)."""


class StoreClosedError(StoreError):
    """An operation needs an open (and for writes, writable) store."""


class UnsupportedCompressionError(StoreError):
    """A body uses a compression codec (LZ4, ZSTD) whose library is not installed, or inflates past
    ``store.record.MAX_INFLATED_BODY`` (a decompression bomb)."""


class ConfigFileError(StoreError):
    """A config JSON file and its ``.bak`` are both unreadable."""
