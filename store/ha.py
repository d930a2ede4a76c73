"""HA replication (spec §11): the master/slave byte protocol and the slave's replica append.

The protocol is two raw big-endian streams with no handshake (§11.2): the slave sends 8-byte offset
reports, the master sends frames of ``offset(8) size(4)`` followed by ``size`` raw CommitLog bytes.
The codecs here are pure functions over bytes; sockets live in the daemon.

:class:`ReplicaLog` is the slave's write path: it copies the master's bytes to the same offsets (so
the files are byte-identical, fillers included, rolled at the same boundaries) and then dispatches
only whole records through the store's reput, so a frame that ends inside a record never makes a
partial record visible to ConsumeQueues, the index or pulls.
"""

from __future__ import annotations

import struct

from store.engine import DefaultMessageStore

REPORT = struct.Struct(">q")
FRAME_HEADER = struct.Struct(">qi")
HEADER_SIZE = FRAME_HEADER.size  # 12
#: Bytes of records a slave dispatches per hold of the store's lock (a record starting below it completes).
DISPATCH_CHUNK = 1024 * 1024

Buffer = bytes | bytearray | memoryview


class HAProtocolError(Exception):
    """The peer sent something the protocol does not allow; the connection must be closed."""


# ---------------------------------------------------------------------- slave -> master


def encode_report(offset: int) -> bytes:
    """A slave's offset report: its CommitLog max offset as an i64."""
    return REPORT.pack(offset)


def latest_report(buf: Buffer) -> tuple[int | None, int]:
    """The newest complete report in ``buf`` and the bytes consumed (a multiple of 8).

    The master acts on the newest value only (4.9.8 ``ReadSocketService``); a trailing partial
    report stays in the buffer for the next read.
    """
    whole = len(buf) - len(buf) % REPORT.size
    if whole == 0:
        return None, 0
    (offset,) = REPORT.unpack_from(buf, whole - REPORT.size)
    if offset < 0:
        raise HAProtocolError(f"negative offset report {offset}")
    return offset, whole


# ---------------------------------------------------------------------- master -> slave


def encode_frame_header(offset: int, size: int) -> bytes:
    """The 12-byte header of a data frame (``size`` 0: a heartbeat)."""
    return FRAME_HEADER.pack(offset, size)


def encode_frame(offset: int, data: Buffer) -> bytes:
    return FRAME_HEADER.pack(offset, len(data)) + bytes(data)


def decode_frames(buf: Buffer, max_size: int) -> tuple[list[tuple[int, memoryview]], int]:
    """Split ``buf`` into complete frames ``(offset, data)``; returns them and the bytes consumed.

    A frame whose data has not fully arrived is left for the next read (a torn frame is never
    returned); ``max_size`` bounds the size field so a garbage header cannot make us buffer forever.
    """
    view = memoryview(buf)
    frames: list[tuple[int, memoryview]] = []
    pos = 0
    end = len(view)
    while end - pos >= HEADER_SIZE:
        offset, size = FRAME_HEADER.unpack_from(view, pos)
        if size < 0 or size > max_size or offset < 0:
            raise HAProtocolError(f"bad frame header: offset {offset}, size {size}")
        if end - pos - HEADER_SIZE < size:
            break
        start = pos + HEADER_SIZE
        frames.append((offset, view[start : start + size]))
        pos = start + size
    return frames, pos


def transfer_start(reported: int, master_max: int, file_size: int) -> int:
    """Where the master starts streaming: an empty slave (0) gets the master's last file from its
    start (4.9.8), any other slave its own end."""
    if reported == 0:
        return master_max - master_max % file_size
    return reported


def frame_extent(offset: int, available_end: int, file_size: int, batch: int) -> int:
    """Bytes the next frame carries from ``offset``: at most ``batch``, never past the written data
    (``available_end``) nor across a file boundary."""
    file_end = offset - offset % file_size + file_size
    return max(0, min(batch, available_end - offset, file_end - offset))


def slave_accepts(slave_max: int, frame_offset: int) -> bool:
    """A slave appends a frame only at its own end (or anywhere when it is empty), else reconnects."""
    return slave_max == 0 or slave_max == frame_offset


# ---------------------------------------------------------------------- slave store


class ReplicaLog:
    """Appends the master's CommitLog bytes to a slave store; :meth:`dispatch` builds its queues.

    The two steps are apart, as in 4.9.8 (``HAClient`` appends, ``ReputMessageService`` dispatches): a
    slave reports (acks) what is in its CommitLog without waiting for its ConsumeQueues and index.
    """

    def __init__(self, store: DefaultMessageStore) -> None:
        self.store = store

    @property
    def max_offset(self) -> int:
        return self.store.commit_log.max_offset

    def append(self, offset: int, data: Buffer) -> bool:
        """Write ``data`` at CommitLog ``offset``; ``False`` (nothing written) when it does not continue
        the log. Raises ``OSError`` when the disk cannot take the bytes."""
        store = self.store
        cl = store.commit_log
        files = cl.files
        size = cl.file_size
        with store._put_lock:
            if files.files:
                if offset != files.max_offset:
                    return False
            elif offset % size:
                return False  # an empty slave starts at a file boundary, as the master sends it
            view = memoryview(data)
            while view:
                mf = files.last_file_for_append(offset)
                at = mf.wrote_position
                n = min(len(view), size - at)
                mf.prepare(at + n, populate=False)
                if mf.prepared_position < at + n:
                    raise OSError(f"cannot reserve space in {mf.path}")
                # through the descriptor, not the mapping: the copy and its page faults run without the
                # GIL, so the slave's dispatch thread works meanwhile (the mapping sees the same pages)
                if mf.pwrite(view[:n], at) != n:
                    raise OSError(f"short write to {mf.path}")
                mf.wrote_position = at + n
                offset += n
                view = view[n:]
        return True

    def dispatch(self, max_bytes: int = DISPATCH_CHUNK) -> bool:
        """Dispatch the whole records after the reput cursor (up to about ``max_bytes`` of them) and tell
        the arrival listeners; whether the cursor moved.

        The records are parsed without the store's lock (bytes below the slave's end never change) and
        written in one short hold of it, so the appender is never kept waiting for a parse.
        """
        store = self.store
        cl = store.commit_log
        with store._put_lock:
            if store.reput_from_offset < cl.min_offset:
                store.reput_from_offset = cl.min_offset
            start = store.reput_from_offset
        walk = cl.walk(start, min(cl.max_offset, start + max_bytes))
        infos = list(walk)
        touched: set[tuple[str, int]] = set()
        with store._put_lock:
            if store._stop.is_set():  # shutting down (its checkpoint may be written): leave it be
                return False
            if store.reput_from_offset != start:  # another dispatch went first: look again
                return True
            store._dispatch_records(infos, touched)  # raising, it leaves the cursor at the first record
            store.reput_from_offset = walk.offset
            if store._logics_ts:
                cl.last_store_timestamp = store._logics_ts
        for topic, queue_id in touched:
            max_offset = store.get_max_offset(topic, queue_id)
            for listener in store._listeners:
                listener(topic, queue_id, max_offset)
        return walk.offset != start
