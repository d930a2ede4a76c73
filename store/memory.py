"""``InMemoryMessageStore``: the :class:`store.api.MessageStore` seam without files, for broker tests.

Records are encoded exactly as on disk (same codec) into one growing buffer, so raw bytes, msgIds,
offsets and statuses match :class:`store.engine.DefaultMessageStore`; ConsumeQueues are lists of
units and the index a dict of ``topic#key`` → offsets. Nothing is flushed, nothing survives
``shutdown()``. It replicates like the file store (:class:`store.ha.ReplicaStore`) as one unbounded
CommitLog file: as a slave it copies a master's bytes from offset 0 and dispatches them with the same
codec. A file-store slave cannot follow it (its records ignore file boundaries, so that slave's dispatch
stops at ERROR).
"""

from __future__ import annotations

import bisect
import itertools
import logging
import threading
from collections.abc import Container

from store.api import ArrivalListener, batch_is_legal, search_by_timestamp
from store.checkpoint import Incarnation
from store.cleanup import (
    CleanPlan,
    LogFile,
    committed_offsets,
    is_delete_hour,
    make_plan,
    unconsumed_per_file,
)
from store.clock import Clock, SystemClock
from store.commitlog import IllegalMessage, PutMessageStatus, apply_delay, encode_checked
from store.config import SLAVE, StoreConfig
from store.config_files import ConfigFiles
from store.consumequeue import QueueHandle, unit_tags_code
from store.engine import dispatch_rules
from store.errors import CorruptRecordError, DamagedUnitError
from store.ha import DISPATCH_CHUNK, Buffer
from store.indexfile import index_keys
from store.message import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
    HostAddress,
    Message,
)
from store.reads import check_offset, select_units
from store.record import (
    BLANK_MAGIC_CODE,
    create_msg_id,
    decode_msg_id,
    encode_record_parts,
    read_header,
    read_record_info,
)
from store.results import GetMessageStatus, GetResult, PutResult, QueryResult, SelectedMessage
from store.words import plural

log = logging.getLogger(__name__)

_MEMORY = "<memory>"
_NO_FILE_LIMIT = 2**62  # records never have to fit a CommitLog file here


class InMemoryMessageStore:
    """Same behaviour as the file store for puts, pulls, key queries and offsets; no durability. Retention
    has the file store's shapes over one log that, as the newest file, is never deleted."""

    def __init__(
        self,
        config: StoreConfig | None = None,
        *,
        clock: Clock | None = None,
        store_host: HostAddress = ("127.0.0.1", 10911),
    ) -> None:
        self.config = config or StoreConfig(store_path_root_dir=_MEMORY)
        self.clock: Clock = clock or SystemClock()
        self.store_host = store_host
        self.configs = ConfigFiles(None, clock=self.clock)
        self._delay_ms = self.config.delay_levels_ms()
        self._log = bytearray()
        self._queues: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
        self._index: dict[str, list[tuple[int, int]]] = {}  # key → (phys offset, store time)
        self._lock = threading.Lock()
        self._listeners: list[ArrivalListener] = []
        self._running = False
        self._mtime_ms = 0  # when the log was last written (a file's mtime)
        self._dispatched = 0  # the log's bytes below this are in the queues and the index (reput)
        self._held_from = -1  # a tail a check found not the master's starts here (-1: none): not served
        self._mark = -1  # the replica mark, where a hold-back lowered it (-1: the log's end, as it grows)
        #: Records a slave took from its master whose only fault is their body CRC: offset -> why (never read).
        self._set_aside: dict[int, str] = {}

    # ------------------------------------------------------------------ lifecycle

    def open(self) -> None:
        """Nothing to load."""

    def start(self) -> None:
        self._running = True

    def shutdown(self) -> None:
        self._running = False

    def __enter__(self) -> InMemoryMessageStore:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # ------------------------------------------------------------------ puts

    def queue_handle(self, topic: str, queue_id: int) -> QueueHandle:
        return QueueHandle(topic, queue_id)  # (its queues are looked up every put: nothing to spare)

    def put_message(self, msg: Message, handle: QueueHandle | None = None) -> PutResult:
        return self._put([apply_delay(msg, self._delay_ms)])

    def put_messages(self, batch: list[Message], handle: QueueHandle | None = None) -> PutResult:
        if not batch_is_legal(batch):
            return PutResult(PutMessageStatus.MESSAGE_ILLEGAL)
        return self._put(batch)

    def _put(self, msgs: list[Message]) -> PutResult:
        if not self._running or self.config.broker_role == SLAVE:
            return PutResult(PutMessageStatus.SERVICE_NOT_AVAILABLE)  # a slave only replicates
        try:
            encoded = [
                encode_checked(m, self.store_host, self.config.max_message_size, _NO_FILE_LIMIT) for m in msgs
            ]
        except IllegalMessage as e:
            return PutResult(e.status)
        ids = []
        with self._lock:
            now = self.clock.now_ms()
            first_phys = len(self._log)
            first_qoff = -1
            for m, (props, born, store, topic, _size) in zip(msgs, encoded, strict=True):
                tran = m.sys_flag & TRANSACTION_TYPE_MASK
                counted = tran in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE)
                queue = self._queues.setdefault((m.topic, m.queue_id), []) if counted else None
                qoff = len(queue) if queue is not None else 0
                phys = len(self._log)
                rec = encode_record_parts(m, props, born, store, topic, qoff, phys, now)
                self._log += rec
                if queue is not None:
                    queue.append((phys, len(rec), unit_tags_code(m.topic, m.properties, now, self._delay_ms)))
                if tran != TRANSACTION_ROLLBACK_TYPE:
                    for key in index_keys(m.topic, m.properties):
                        self._index.setdefault(key, []).append((phys, now))
                first_qoff = qoff if first_qoff < 0 else first_qoff
                ids.append(phys)
            end = self._dispatched = len(self._log)
            self._mtime_ms = now
        first = msgs[0]
        prefix_host = first.store_host or self.store_host
        msg_ids = [create_msg_id(prefix_host, p) for p in ids]
        for listener in self._listeners:
            listener(first.topic, first.queue_id, self.get_max_offset(first.topic, first.queue_id))
        return PutResult(
            PutMessageStatus.PUT_OK,
            first_phys,
            first_qoff,
            ",".join(msg_ids),
            end - first_phys,
            now,
            len(msgs),
        )

    def add_arrival_listener(self, listener: ArrivalListener) -> None:
        self._listeners.append(listener)

    def remove_arrival_listener(self, listener: ArrivalListener) -> None:
        self._listeners = [each for each in self._listeners if each != listener]

    # ------------------------------------------------------------------ replication (store.ha.ReplicaStore)

    @property
    def commit_log_file_size(self) -> int:
        """One unbounded file: frames never stop at a boundary, an empty slave is sent the log from 0."""
        return _NO_FILE_LIMIT

    def read_commit_log(self, offset: int, size: int) -> bytes | None:
        if offset < 0 or offset + size > len(self._log):
            return None
        return bytes(self._log[offset : offset + size])

    def append_replica(self, offset: int, data: Buffer) -> bool:
        """Only at the log's end: without a base offset, an empty store starts at 0."""
        with self._lock:
            if offset != len(self._log):
                return False
            if self._mark == offset:  # (the records after the mark are the master's as it was)
                self._mark = -1
            self._log += data
            self._mtime_ms = self.clock.now_ms()
        return True

    def dispatch_replica(self, max_bytes: int = DISPATCH_CHUNK) -> bool:
        """As the file store's dispatch: whole records only (a record starting below ``max_bytes`` from the
        cursor completes), a file master's end-of-file filler skipped, a record that does not parse stops
        dispatch at ERROR."""
        touched: set[tuple[str, int]] = set()
        with self._lock:
            data = self._log
            start = pos = self._dispatched
            limit = min(len(data), start + max_bytes)
            if self._held_from >= 0:
                limit = min(limit, self._held_from)
            while pos < limit and pos + 8 <= len(data):
                size, magic = read_header(data, pos)
                if pos + size > len(data):
                    break  # still arriving
                if magic == BLANK_MAGIC_CODE and size >= 8:
                    pos += size
                    continue
                try:
                    info = read_record_info(data, pos)
                except CorruptRecordError as e:
                    log.error("dispatch stops at %s", e.located(_MEMORY, pos))
                    break
                code, keys = dispatch_rules(info, self._delay_ms, True)  # indexed as its puts are
                if code is not None:
                    self._queues.setdefault((info.topic, info.queue_id), []).append((pos, info.size, code))
                    touched.add((info.topic, info.queue_id))
                for key in keys:
                    self._index.setdefault(key, []).append((pos, info.store_timestamp))
                pos += info.size
            self._dispatched = pos
        for topic, queue_id in touched:
            max_offset = self.get_max_offset(topic, queue_id)
            for listener in self._listeners:
                listener(topic, queue_id, max_offset)
        return pos != start

    def set_aside_replica_records(self, records: list[tuple[int, int, str]]) -> str:
        """Reads skip them from here on (kept nowhere else: no files)."""
        with self._lock:
            self._set_aside.update((offset, why) for offset, _size, why in records)
        return ""

    def replica_checked(self, end: int) -> None:
        """As the file store's: the mark up to ``end`` (never down, nor past the log's end), nothing held."""
        with self._lock:
            self._held_from = -1
            if self._mark >= 0:
                mark = max(self._mark, min(end, len(self._log)))
                self._mark = -1 if mark >= len(self._log) else mark

    def hold_back(self, cut: int) -> None:
        """Its queue units and index entries from ``cut`` on dropped, dispatch stopped there, the log kept, the
        mark down to it (:attr:`replica_mark`); held from lower already, nothing changes."""
        with self._lock:
            cut = max(min(cut, len(self._log)), 0)
            self._mark = cut if self._mark < 0 else min(self._mark, cut)
            if 0 <= self._held_from <= cut:
                return
            self._held_from = cut
            self._drop_derived_from(cut)

    def _drop_derived_from(self, cut: int) -> None:
        """Under the lock: the queue units and index entries of the records from ``cut`` on."""
        for queue, units in self._queues.items():
            self._queues[queue] = [u for u in units if u[0] < cut]
        # (a key left with no entry goes: a query reads every key's newest entry)
        index = ((key, [e for e in entries if e[0] < cut]) for key, entries in self._index.items())
        self._index = {key: kept for key, kept in index if kept}
        self._dispatched = min(self._dispatched, cut)

    @property
    def held_back(self) -> int:
        held = self._held_from
        return 0 if held < 0 else max(len(self._log) - held, 0)

    def name_replica_master(self, identity: str, incarnation: str = "", following: str = "") -> None:
        pass

    def begin_incarnation(self, *, at_first_change: bool = False, at: int = -1) -> None:
        pass

    #: Nothing outlives the process: no identity to keep, no master's to remember.
    identity = ""
    replica_master = ""
    replica_incarnation = ""
    replica_following = ""
    next_incarnation = ""

    @property
    def incarnations(self) -> list[Incarnation]:
        return []

    def serve_unchecked(self) -> None:
        """Nothing is held back but a tail a check found not the master's, which stays so."""

    def restart_replica_log(self, start: int) -> int:
        """Never needed: this store keeps everything, so a master of its kind retains its whole log."""
        raise NotImplementedError("an in-memory store's log starts at offset 0")

    def set_aside_replica_tail(self, cut: int, why: str) -> tuple[int, str]:
        """Drop the log from ``cut`` on with its queue units and index entries (no files: kept nowhere)."""
        with self._lock:
            records = 0
            pos = cut
            while pos + 8 <= len(self._log):
                size, magic = read_header(self._log, pos)
                if size <= 0:
                    break
                records += magic != BLANK_MAGIC_CODE
                pos += size
            del self._log[cut:]
            self._set_aside = {o: why for o, why in self._set_aside.items() if o < cut}
            self._drop_derived_from(cut)
            if self._held_from >= cut:
                self._held_from = -1
            if self._mark >= cut:
                self._mark = -1
        log.error(
            "set aside %s from offset %d (an in-memory store keeps none): %s",
            plural(records, "record"),
            cut,
            why,
        )
        return records, ""

    # ------------------------------------------------------------------ retention

    def delete_expired_files_manually(self, up_to: int | None = None) -> None:
        """No files, nothing expires."""

    def cleanup_plan(self, *, manual: bool = True, config: StoreConfig | None = None) -> CleanPlan:
        """The file store's plan over the one in-memory log, which as the newest "file" is always kept;
        the groups' unconsumed messages in it are counted as in a real plan."""
        cfg = config or self.config
        now = self.clock.now_ms()
        with self._lock:
            end, mtime = len(self._log), self._mtime_ms
        files = [LogFile(_MEMORY, 0, end, mtime)] if end else []
        offsets = committed_offsets(self.configs.consumer_offsets.snapshot())
        return make_plan(
            files,
            now_ms=now,
            ratio=self.disk_ratio(),
            config=cfg,
            delete_hour=is_delete_hour(now, cfg.delete_when),
            manual=manual,
            unconsumed=unconsumed_per_file(files, offsets, self._first_offset_at),
        )

    def _first_offset_at(self, topic: str, queue_id: int, phys: int) -> int:
        queue = self._queues.get((topic, queue_id), [])
        return bisect.bisect_left(queue, phys, key=lambda unit: unit[0])

    def clean_expired_consume_queues(self) -> int:
        """Nothing expires: every queue's messages stay in the log."""
        return 0

    def delete_topics(self, topics: Container[str]) -> int:
        """Drop the topics' queues (their records stay in the log, as the file store keeps CommitLog files);
        returns the number of queues dropped."""
        with self._lock:
            doomed = [key for key in self._queues if key[0] in topics]
            for key in doomed:
                del self._queues[key]
        return len(doomed)

    def disk_ratio(self) -> float:
        """No disk used."""
        return 0.0

    @property
    def disk_full(self) -> bool:
        return False

    def write_refusal(self) -> str | None:
        return None if self._running else "the store is not running"

    # ------------------------------------------------------------------ reads

    def _read(self, phys: int, size: int, _queue_offset: int = -1) -> tuple[memoryview, str] | None:
        if phys < 0 or phys + size > len(self._log):
            return None
        if phys in self._set_aside:
            raise CorruptRecordError(_MEMORY, phys, self._set_aside[phys])
        # a copy: a view into the bytearray would stop it from growing while a reader holds it
        return memoryview(bytes(self._log[phys : phys + size])), _MEMORY

    def get_messages(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        tag_filter: Container[int] | None = None,
        *,
        defer_heal: bool = False,  # nothing derived here can be damaged: never raises DamagedUnitError
    ) -> GetResult:
        queue = self._queues.get((topic, queue_id))
        if queue is None:
            return GetResult(GetMessageStatus.NO_MATCHED_LOGIC_QUEUE)
        res = GetResult(GetMessageStatus.NO_MATCHED_MESSAGE, min_offset=0, max_offset=len(queue))
        bad = check_offset(offset, 0, len(queue))
        if bad is not None:
            res.status, res.next_begin_offset = bad
            return res
        select_units(
            res,
            itertools.islice(queue, offset, None),
            offset,
            max_count,
            tag_filter,
            self._read,
            lambda phys: phys,
            max_bytes=self.config.max_transfer_bytes_on_message_in_memory,
            max_messages=self.config.max_transfer_count_on_message_in_memory,
        )
        return res

    def heal(self, damage: DamagedUnitError) -> None:
        """Nothing to heal: the queues are lists in memory (never called: reads do not raise)."""

    def get_min_offset(self, topic: str, queue_id: int) -> int:
        return 0

    def get_max_offset(self, topic: str, queue_id: int) -> int:
        return len(self._queues.get((topic, queue_id), ()))

    def nothing_at(self, topic: str, queue_id: int, offset: int) -> bool:
        return offset == len(self._queues.get((topic, queue_id), ()))

    def consume_queue_units(
        self, topic: str, queue_id: int, index: int, count: int
    ) -> tuple[int, int, list[tuple[int, int, int]] | None] | None:
        queue = self._queues.get((topic, queue_id))
        if queue is None:
            return None
        if not 0 <= index < len(queue):
            return 0, len(queue), None
        return 0, len(queue), list(itertools.islice(queue, index, index + max(count, 0)))

    def get_store_timestamp(self, topic: str, queue_id: int, offset: int) -> int:
        queue = self._queues.get((topic, queue_id))
        if queue is None or not 0 <= offset < len(queue):
            return -1
        return read_record_info(self._log, queue[offset][0]).store_timestamp

    def search_offset_by_timestamp(self, topic: str, queue_id: int, timestamp: int) -> int:
        n = self.get_max_offset(topic, queue_id)
        return search_by_timestamp(
            0, n - 1, lambda q: self.get_store_timestamp(topic, queue_id, q), timestamp
        )

    def get_earliest_message_time(self, topic: str | None = None, queue_id: int = 0) -> int:
        if topic is not None:
            return self.get_store_timestamp(topic, queue_id, 0)
        return read_record_info(self._log, 0).store_timestamp if self._log else -1

    def look_message_by_offset(self, phys_offset: int) -> SelectedMessage | None:
        if not 0 <= phys_offset < len(self._log) or 0 <= self._held_from <= phys_offset:
            return None
        size, _magic = read_header(self._log, phys_offset)
        found = self._read(phys_offset, size)
        if found is None:
            raise CorruptRecordError(_MEMORY, phys_offset, "no record here")
        sel = SelectedMessage(phys_offset, size, found[0], path=_MEMORY)
        _ = sel.message
        return sel

    def look_message_by_msg_id(self, msg_id: str) -> SelectedMessage | None:
        return self.look_message_by_offset(decode_msg_id(msg_id)[1])

    def query_message(self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int) -> QueryResult:
        max_num = min(max_num, self.config.max_msgs_num_batch)
        hits = [p for p, ts in reversed(self._index.get(f"{topic}#{key}", [])) if begin_ms <= ts <= end_ms]
        out = []
        for phys in sorted(hits[:max_num]):
            sel = self.look_message_by_offset(phys)
            if sel is not None:
                out.append(sel)
        last = max((entries[-1] for entries in self._index.values()), key=lambda e: e[0], default=(0, 0))
        return QueryResult(out, last[1], last[0])

    @property
    def flushed_phy_offset(self) -> int:
        return len(self._log)

    @property
    def max_phy_offset(self) -> int:
        return len(self._log)

    @property
    def replica_mark(self) -> int:
        """Nothing outlives the process: whatever this store holds it took from its master, up to a tail a check
        found not the master's (:meth:`hold_back`), where the mark comes down as the file store's does."""
        mark = self._mark
        return len(self._log) if mark < 0 else min(mark, len(self._log))

    @property
    def min_phy_offset(self) -> int:
        return 0

    def topic_queue_table(self) -> dict[tuple[str, int], int]:
        return {k: len(v) for k, v in self._queues.items()}

    def queue_keys(self) -> list[tuple[str, int]]:
        return list(self._queues)
