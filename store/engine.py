"""``DefaultMessageStore``: the file-backed, RocketMQ-compatible :class:`store.api.MessageStore`.

Threading model (why threads, not asyncio): an append is CPU-bound work (encode, copy into the
mapping, a few struct writes), so the broker can call :meth:`DefaultMessageStore.put_message`
directly from its event loop in ASYNC_FLUSH mode. SYNC_FLUSH needs group commit: a
put must wait for an fsync that many puts share, so a flush thread does the ``fdatasync`` (which
releases the GIL) while putting threads wait on a condition; the broker runs those puts in a
thread pool (``loop.run_in_executor``) so concurrent sends share one fsync.

Dispatch (ConsumeQueue unit + index entries) runs inside the put, under the same lock, from the
fields the append just wrote, so a message is pullable when ``put_message`` returns and arrival
listeners (long polling) fire at once. The CommitLog-parsing reput (:meth:`DefaultMessageStore.dispatch`)
rebuilds whatever the ConsumeQueues miss at start-up and during abnormal recovery.

Background threads: CommitLog flush (periodic or group commit), ConsumeQueue/checkpoint flush,
CommitLog page warm-up (ASYNC only) and file cleanup.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import itertools
import logging
import os
import struct
import sys
import threading
import time
import zlib
from collections.abc import Callable, Container, Iterator, Sequence
from typing import Final, TypeVar

from store.api import (
    ArrivalListener,
    MessageStore,
    batch_is_legal,
    search_by_timestamp,
)
from store.checkpoint import (
    IDENTITY_SIZE,
    Incarnation,
    RecoveryPoint,
    StoreCheckpoint,
    begin_incarnation,
    read_incarnations,
    store_identity,
)
from store.cleanup import (
    Cleaner,
    CleanPlan,
    CommittedOffset,
    DiskUsage,
    LogFile,
    committed_offsets,
    consume_queue_expired,
    unconsumed_per_file,
)
from store.clock import Clock, SystemClock
from store.commitlog import (
    CommitLog,
    IllegalMessage,
    KeyedRecords,
    PartlyAppended,
    PutMessageStatus,
    ScanResult,
    UnitRuns,
    apply_delay,
)
from store.config import SLAVE, StoreConfig
from store.config_files import ConfigFiles
from store.consumequeue import UNIT, ConsumeQueue, QueueHandle, unit_tags_code
from store.dledger_commitlog import DLedgerCommitLog
from store.durability import is_no_space, sync_directory
from store.errors import (
    CorruptRecordError,
    DamagedRecordError,
    DamagedUnitError,
    StoreClosedError,
    StoreLockedError,
)
from store.ha import DISPATCH_CHUNK, Buffer
from store.heal import Healer
from store.indexfile import IndexFile, IndexService, has_index_keys, index_keys, record_keys
from store.mapped_file import sync_filesystem
from store.message import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
    HostAddress,
    Message,
)
from store.quarantine import READ, REPLICATED, kept_in_place, list_quarantines, set_aside, set_aside_records
from store.reads import UnitReader, check_offset, select_units
from store.record import (
    RECORD_IDENTITY,
    RecordInfo,
    decode_msg_id,
    msg_id_prefix,
)
from store.results import GetMessageStatus, GetResult, PutResult, QueryResult, SelectedMessage
from store.supervise import supervised
from store.words import plural

log = logging.getLogger(__name__)

__all__ = [
    "DefaultMessageStore",
    "GetMessageStatus",
    "GetResult",
    "MessageStore",
    "PutMessageStatus",
    "PutResult",
    "QueryResult",
    "SelectedMessage",
]


_PUT_OK: Final = PutMessageStatus.PUT_OK  # read on every put (store/native.py: enum members as Final names)
_WARM_AHEAD_BYTES = 8 * 1024 * 1024
#: The warm-up thread's shortest and longest sleep between two looks at the writer (``warm_delay``).
WARM_MIN_DELAY_S = 0.005
WARM_MAX_DELAY_S = 0.05
_RETRY_CHUNK = 1024 * 1024  # CommitLog bytes the flush loop's dispatch retry takes per hold of the put lock
#: The least time between two writes of a replicating slave's replica mark: what a slave that crashed holds
#: back, at most, until its master answers again.
MARK_WRITE_INTERVAL_MS = 1000
_SYNCFS_QUEUES = 64  # a flush due on this many ConsumeQueues syncs their file system once instead
#: ConsumeQueues a flush looks at between two pauses: the scan is compiled code that never lets another
#: thread have the GIL, so a checkpoint over 10,000 queues would otherwise hold the event loop for all of it.
#: Generations of the stores' queue tables, unique in the process (see ``_queues_replaced``).
_GENERATIONS: Final = itertools.count(1)
_FLUSH_SCAN_CHUNK = 256
_FLUSH_SCAN_PAUSE_S = 0.0002
#: First cleanup run after start, as the broker schedules it (docs/store-format.md §cleanup).
CLEAN_START_DELAY_MS = 60_000
DISK_CHECK_START_DELAY_MS, DISK_CHECK_INTERVAL_MS = 1_000, 10_000
_LOCKED_ROOTS: set[str] = set()
_LOCKED_ROOTS_GUARD = threading.Lock()


_T = TypeVar("_T")


def _paced(items: list[_T]) -> Iterator[_T]:
    """``items`` with a pause every :data:`_FLUSH_SCAN_CHUNK` of them, the GIL released for it: a waiting
    thread (the broker's event loop) runs then, not after the whole scan."""
    for i, item in enumerate(items):
        if i and not i % _FLUSH_SCAN_CHUNK:
            _pause()
        yield item


def _pause() -> None:
    time.sleep(_FLUSH_SCAN_PAUSE_S)


def _take_lock(root: str, flags: int) -> int:
    """Open ``root/lock`` with ``flags`` and take the broker's lock: a POSIX record lock on byte 0
    (docs/store-format.md §lock-and-abort).

    Call under ``_LOCKED_ROOTS_GUARD``. Raises :class:`StoreLockedError` when this process or another
    holds it; ``FileNotFoundError`` when the file is missing and ``flags`` do not create it.
    """
    key = os.path.realpath(root)
    if key in _LOCKED_ROOTS:  # fcntl locks do not exclude the same process
        raise StoreLockedError(f"{key} is already open in this process")
    fd = os.open(os.path.join(root, "lock"), flags, 0o644)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
    except OSError as e:
        os.close(fd)
        raise StoreLockedError(f"{key} is locked by another process (a running broker?)") from e
    return fd


def _drop_lock(fd: int) -> None:
    fcntl.lockf(fd, fcntl.LOCK_UN, 1, 0)
    os.close(fd)


def ensure_unlocked(root: str) -> None:
    """Raise :class:`StoreLockedError` when a broker holds the store's lock (what an offline change must
    check even when it only plans); takes and drops the lock, writes nothing."""
    with _LOCKED_ROOTS_GUARD:
        try:
            fd = _take_lock(root, os.O_RDWR)
        except FileNotFoundError:
            return
        _drop_lock(fd)


_FLOCK = struct.Struct("@hhqqi4x")  # struct flock on Linux (64-bit off_t): type, whence, start, len, pid


def lock_holder(root: str) -> int | None:
    """Pid of the process holding the store's lock (any broker, ours or Java's: both lock byte 0 of
    ``root/lock`` with a POSIX record lock); None when the store is free or has no lock file.
    Reads the lock table only (F_GETLK): takes nothing, writes nothing."""
    try:
        fd = os.open(os.path.join(root, "lock"), os.O_RDONLY)
    except OSError:
        return None
    try:
        query = _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, 1, 0)
        lock_type, _, _, _, pid = _FLOCK.unpack(fcntl.fcntl(fd, fcntl.F_GETLK, query))
    except OSError:
        return None
    finally:
        os.close(fd)
    return pid if lock_type != fcntl.F_UNLCK else None


@contextlib.contextmanager
def held_lock(root: str) -> Iterator[None]:
    """Hold the store's lock for an offline change made without opening the store read-write (no broker
    can start meanwhile, and no recovery runs); raises :class:`StoreLockedError` like a broker would."""
    key = os.path.realpath(root)
    with _LOCKED_ROOTS_GUARD:
        fd = _take_lock(root, os.O_RDWR | os.O_CREAT)
        _LOCKED_ROOTS.add(key)
    try:
        yield
    finally:
        with _LOCKED_ROOTS_GUARD:
            _drop_lock(fd)
            _LOCKED_ROOTS.discard(key)


def dispatch_rules(
    info: RecordInfo, delay_ms: list[int], index_enabled: bool
) -> tuple[int | None, list[str]]:
    """What dispatch writes for one record (docs/store-format.md §dispatch): its ConsumeQueue unit's tags code
    (None: no unit, a prepared or rolled-back transaction message) and its index keys (none for a
    rollback)."""
    tran = info.sys_flag & TRANSACTION_TYPE_MASK
    if tran == TRANSACTION_NOT_TYPE or tran == TRANSACTION_COMMIT_TYPE:  # noqa: SIM109 (hot path)
        code: int | None = unit_tags_code(info.topic, info.properties, info.store_timestamp, delay_ms)
    else:
        code = None
    keys = (
        index_keys(info.topic, info.properties) if index_enabled and tran != TRANSACTION_ROLLBACK_TYPE else []
    )
    return code, keys


def warm_delay(ahead: int, rate: float) -> float:
    """How long the warm-up thread may sleep with ``ahead`` bytes zero-filled before a writer going at
    ``rate`` bytes a second: half the time the writer takes to reach their end, within
    `WARM_MIN_DELAY_S` and `WARM_MAX_DELAY_S` (an idle store: the longest; a writer faster than the window
    is wide: as often as before, every `WARM_MIN_DELAY_S`)."""
    if rate <= 0:
        return WARM_MAX_DELAY_S
    return min(WARM_MAX_DELAY_S, max(WARM_MIN_DELAY_S, ahead / rate / 2))


class DefaultMessageStore:
    """The RocketMQ-compatible engine. ``open()`` loads and recovers, ``start()`` makes it live.

    With ``read_only=True`` nothing on disk changes: no lock, no ``abort``, no truncation, no
    dispatch; use it to inspect a store (even one a broker is running on).
    """

    def __init__(
        self,
        config: StoreConfig,
        *,
        clock: Clock | None = None,
        store_host: HostAddress = ("127.0.0.1", 10911),
        read_only: bool = False,
        disk_usage: DiskUsage | None = None,
        clean_start_delay_ms: int = CLEAN_START_DELAY_MS,
        broker_name: str = "",
        keep_replica_mark: bool = False,
    ) -> None:
        self.config = config
        #: The broker name the replica mark is bound to ("": none known; the mark's owner stays as read).
        self.broker_name = broker_name
        #: An offline tool that knows not the broker's role: the checkpoint's mark stays as it was found
        #: (a master's open would write that none of the records are anyone's, a slave's that all are).
        self.keep_replica_mark = keep_replica_mark
        self.clock: Clock = clock or SystemClock()
        self.store_host = store_host
        self.read_only = read_only
        root = config.store_path_root_dir
        self._abort_path = os.path.join(root, "abort")
        self._delay_ms = config.delay_levels_ms()
        self.commit_log: CommitLog
        if config.enable_dleger_commit_log:
            self.commit_log = DLedgerCommitLog(
                root,
                config.dleger_self_id or "n0",
                data_dir=config.store_path_dledger_commit_log,
                file_size=config.mapped_file_size_commit_log,
                max_message_size=config.max_message_size,
                read_only=read_only,
                # Every member appends through the data file's mapping (a follower its pushed entries
                # too, where an HA slave writes with pwrite): each fresh page faulted there is zeroed by
                # the file system on the event loop, several times what zeros written ahead by a thread
                # cost. Not when every put waits for an fsync, which would write the zeros too.
                prefault=not config.sync_flush,
            )
        else:
            self.commit_log = CommitLog(
                config.commit_log_dir,
                config.mapped_file_size_commit_log,
                max_message_size=config.max_message_size,
                read_only=read_only,
                # Pre-faulting saves the appender its page faults but the zero pages it dirties are
                # written to disk too; worth it in ASYNC mode, not when every put waits for an fsync, nor on
                # a slave, whose replica appends with pwrite (store.ha): zeros first would write every page
                # twice.
                prefault=config.warm_maped_file_enable
                and not config.sync_flush
                and config.broker_role != SLAVE,
            )
        self.index = IndexService(
            config.index_dir, config.max_hash_slot_num, config.max_index_num, read_only=read_only
        )
        self.configs = ConfigFiles(config.config_dir, clock=self.clock, read_only=read_only)
        self.checkpoint: StoreCheckpoint | None = None
        self._cqs: dict[tuple[str, int], ConsumeQueue] = {}
        #: Changes whenever a queue object leaves the table (see :meth:`_queues_replaced`).
        self._cq_generation = next(_GENERATIONS)
        #: The queues given units since the thorough flush last took this list (under the put lock): it visits
        #: them, not every queue of the table (thousands of topics, a few written at a time). Each is in it
        #: once, by its own ``dirty`` flag: a put reads the flag of the queue it just wrote, where a set of
        #: thousands of queues was one more cold hash lookup per send.
        self._dirty_cqs: list[ConsumeQueue] = []
        #: The queues a put left with more than ``flushConsumeQueueLeastPages`` unflushed (their ``due``
        #: flag): all the flushes between two thorough ones visit. The put compares the file it just wrote,
        #: so thousands of topics written a few times a second each (never due) cost these flushes nothing.
        self._due_cqs: list[ConsumeQueue] = []
        #: The least pages in bytes, as the flush loop last read the config.
        self._cq_least_bytes = config.flush_consume_queue_least_pages * 4096
        self._put_lock = threading.Lock()
        self._set_aside_lock = threading.Lock()  # reads that find damage set it aside one at a time
        self._stop = threading.Event()
        self.cleaner = Cleaner(
            config,
            self.commit_log,
            lambda: list(self._cqs.values()),
            self.index,
            self._put_lock,
            disk_usage=disk_usage,
            stop=self._stop,
            unconsumed=self._unconsumed_per_file,
        )
        self._clean_start_delay_ms = clean_start_delay_ms
        self.reput_from_offset = 0
        self._listeners: list[ArrivalListener] = []
        self._index_enabled = config.message_index_enable
        # A DLedger put is answered once a quorum holds it, as 4.9.8's DLedgerCommitLog (flushDiskType
        # holds no answer there). A flush wait would end once the committed end passed the record's end,
        # which a deposed leader's cut tail reaches again with the new leader's entries in its place.
        self._sync_flush = config.sync_flush and not config.enable_dleger_commit_log
        self._msg_id_prefix = msg_id_prefix(store_host)
        self.last_exit_ok = True
        self.recovery_corruption: CorruptRecordError | None = None
        self._lock_fd: int | None = None
        self._opened = False
        self._running = False
        #: (DLedger mode) why a put is refused before anything is appended, or None to take it: a leader
        #: handing its leadership over takes no sends (``DLedgerServer#handleAppend``).
        self.put_refusal: Callable[[], PutMessageStatus | None] | None = None
        self._threads: list[threading.Thread] = []
        self._index_flushers: list[threading.Thread] = []
        self._gc_cond = threading.Condition()
        self._gc_pending = False
        self._flushed_offset = 0
        self.flush_count = 0  # CommitLog flushes done by the flush thread (shows group commit at work)
        self._logics_ts = 0
        self._crc_checked_from = 0  # records below this offset were not CRC-checked by recovery
        self.healer = Healer(self)
        self._no_space = False  # the last put failed for want of space (logged once)
        #: Why the last put failed to allocate or write its files (a full disk, a file system remounted
        #: read-only after an I/O error), until a put succeeds again: :meth:`write_refusal`'s.
        self._put_error: str | None = None
        #: The replica mark (docs/replication.md §the-replica-mark): the CommitLog is known to hold its
        #: master's records below it. Records a slave appends from its master's stream right at it move it;
        #: a master's own puts never do.
        self.replica_mark = 0
        #: A slave's reads stop here until its log is checked against its master's (-1: they do not):
        #: dispatch builds no ConsumeQueue unit nor index entry past it, and a lookup by offset finds nothing.
        self.held_from = -1
        #: Where a check found a slave's log not its master's (-1: nowhere, or cut since): held back from there
        #: until a check cuts it or finds it the master's, also once connected to a master it cannot ask.
        self._diverged_from = -1
        #: The mark as the checkpoint last wrote it (the flush loop writes it again when it moved).
        self._mark_on_disk = -1
        #: This store's identity (hex), made once and kept beside it: a slave's mark names its master's.
        self.identity = ""
        #: The identity of the master's store whose records the mark counts ("": not known).
        self.replica_master = ""
        #: That master's incarnation the mark's records were last copied from (hex; "": not known).
        self.replica_incarnation = ""
        #: This store's incarnations as a master, oldest first (docs/replication.md §incarnations).
        self.incarnations: list[Incarnation] = []
        #: Started: the next change of the log (a put, an append from the master) begins an incarnation first,
        #: this one (hex; "": none due), which a master shows its slaves beforehand (their marks name it too).
        self.next_incarnation = ""
        #: The master's next incarnation when the mark's was named ("": none): if it began, the mark's records
        #: past its start are its own.
        self.replica_following = ""

    # ================================================================== lifecycle

    def __enter__(self) -> DefaultMessageStore:
        self.open()
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def open(self) -> None:
        """Lock, load every file, recover CommitLog and ConsumeQueues (docs/store-format.md §start-up)."""
        root = self.config.store_path_root_dir
        if not self.read_only:
            os.makedirs(root, exist_ok=True)
            self._acquire_lock()
            # DefaultMessageStore's constructor makes both (ensureDirOK): the disk ratios the watermarks,
            # runtime info and health checks read measure them, -1 while either is missing
            os.makedirs(self.commit_log.files.directory, exist_ok=True)
            os.makedirs(self.config.consume_queue_dir, exist_ok=True)
        try:
            self.last_exit_ok = not os.path.exists(self._abort_path)
            self.commit_log.load()
            self._load_consume_queues()
            self.checkpoint = StoreCheckpoint(os.path.join(root, "checkpoint"), read_only=self.read_only)
            self.identity = store_identity(root, create=not self.read_only).hex()
            self.incarnations = read_incarnations(root, keep_damaged=not self.read_only)
            point = None if self.last_exit_ok or self.read_only else self._usable_recovery_point()
            if self.config.message_index_enable:
                self.index.load(
                    self.last_exit_ok or self.read_only,
                    self.checkpoint.index_msg_timestamp,
                    point.index if point is not None else None,
                )
            self._recover(point)
            self._load_replica_mark()
            self.configs.load()
        except BaseException:
            self._release_lock()
            raise
        self._opened = True

    def start(self) -> None:
        """Dispatch what the ConsumeQueues miss, create ``abort`` and start the flush threads
        (docs/store-format.md §start-up)."""
        if not self._opened:
            raise StoreClosedError("open() the store first")
        if self.read_only or self._running:
            return
        index_from = self.healer.check_on_start()
        if self.held_from >= 0:  # units a master or an unchecked tail dispatched: built again when checked
            self._drop_units_from(self.held_from)
        self.reput_from_offset = max(self._max_cq_phy_offset(), self.commit_log.min_offset)
        if index_from is not None:
            self.reput_from_offset = min(self.reput_from_offset, index_from)
        self.dispatch()
        if self.reput_from_offset >= self.commit_log.max_offset:  # every record is in its ConsumeQueue
            self._logics_ts = max(self._logics_ts, self.commit_log.last_store_timestamp)
        with open(self._abort_path, "wb"):
            pass
        sync_directory(self.config.store_path_root_dir)  # a power loss must not forget the crash marker
        # A crash from now on recovers from here, not from the start of the CommitLog's last files
        # (RocketMQ writes the logics timestamp first 60 s after start).
        self._checkpoint()
        self._flushed_offset = self.commit_log.max_offset
        self._stop.clear()
        self._running = True
        # supervised: a loop that raised what it does not handle runs again, logged (flushes must go on)
        self._threads = [
            supervised("store-flush-commitlog", self._commit_log_flush_loop, self._stop),
            supervised("store-flush-cq", self._cq_flush_loop, self._stop),
            supervised("store-clean", self._clean_loop, self._stop),
            supervised("store-disk-check", self._disk_check_loop, self._stop),
        ]
        if self.commit_log.prefault:
            self._threads.append(supervised("store-warm-commitlog", self._warm_loop, self._stop))
        for t in self._threads:
            t.start()

    def shutdown(self) -> None:
        """Stop threads, flush everything, write the checkpoint, delete ``abort``, release the lock."""
        if not self._opened:
            return
        self._stop.set()
        with self._gc_cond:
            self._gc_cond.notify_all()
        for t in self._threads + self._index_flushers:
            t.join()
        self._threads = []
        self._index_flushers = []
        if not self.read_only and self.checkpoint is not None:
            with self._put_lock:
                self._checkpoint(locked=True)
                self.configs.persist_offsets()
                if self._running and self.reput_from_offset >= self.commit_log.max_offset:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(self._abort_path)
        self._running = False
        self.commit_log.close()
        for cq in self._cqs.values():
            cq.close()
        self.index.close()
        if self.checkpoint is not None:
            self.checkpoint.close()
        self._release_lock()
        self._opened = False

    def _acquire_lock(self) -> None:
        """Take the broker's lock on the store (docs/store-format.md §lock-and-abort) and hold it until
        :meth:`_release_lock`."""
        with _LOCKED_ROOTS_GUARD:
            fd = _take_lock(self.config.store_path_root_dir, os.O_RDWR | os.O_CREAT)
            os.pwrite(fd, b"lock", 0)
            _LOCKED_ROOTS.add(os.path.realpath(self.config.store_path_root_dir))
            self._lock_fd = fd

    def _release_lock(self) -> None:
        if self._lock_fd is None:
            return
        with _LOCKED_ROOTS_GUARD:
            _drop_lock(self._lock_fd)
            self._lock_fd = None
            _LOCKED_ROOTS.discard(os.path.realpath(self.config.store_path_root_dir))

    # ================================================================== recovery

    def _load_consume_queues(self) -> None:
        root = self.config.consume_queue_dir
        if not os.path.isdir(root):
            return
        for topic in sorted(os.listdir(root)):
            tdir = os.path.join(root, topic)
            if not os.path.isdir(tdir):
                continue
            for qdir in sorted(os.listdir(tdir)):
                if not qdir.isdigit():
                    continue
                cq = self._new_cq(topic, int(qdir))
                cq.load()
                self._cqs[(cq.topic, cq.queue_id)] = cq
        self._queues_replaced()

    def _new_cq(self, topic: str, queue_id: int) -> ConsumeQueue:
        """A queue object, its topic interned like the broker's topic names (see ``TopicConfig``)."""
        cq = ConsumeQueue(
            self.config.consume_queue_dir,
            sys.intern(topic),
            queue_id,
            self.config.consume_queue_file_size,
            read_only=self.read_only,
        )
        cq.fill_gap = self._fill_set_aside_gap
        return cq

    def _fill_set_aside_gap(self, cq: ConsumeQueue, first: int, queue_offset: int) -> None:
        """Dispatch steps over a record recovery set aside without being able to parse it, so its queue
        misses that unit when the next record arrives: put a unit for each missing queue offset whose
        set-aside record's header still names this queue and that offset (reads skip it), keeping the
        later units at their own queue offsets."""
        cl = self.commit_log
        found: dict[int, tuple[int, int]] = {}
        # a copy: the HA slave adds to it on the event loop while this runs in the dispatch thread
        for phys, size in list(cl.set_aside.items()):
            mf = cl.files.find_file(phys)
            if mf is None or phys - mf.file_from_offset + RECORD_IDENTITY.size > mf.file_size:
                continue
            total, _magic, qid, qoff, _phys = RECORD_IDENTITY.unpack_from(mf.view, phys - mf.file_from_offset)
            if qid == cq.queue_id and first <= qoff < queue_offset and total == size:
                found[qoff] = (phys, size)
        for qoff in range(first, queue_offset):
            unit = found.get(qoff)
            if unit is None:
                return
            cq.put_unit(unit[0], unit[1], 0, qoff)

    def _load_replica_mark(self) -> None:
        """The mark as the checkpoint has it, never past the recovered log's end (see
        docs/replication.md §the-replica-mark). A store without one (older, or RocketMQ's) opened as a
        slave is taken as its master's to its end, as it was served before the mark; opened as a master,
        as nobody's (its own records are not its future master's). A void one (a broker that knows no mark
        rewrote the checkpoint since, or a torn write) takes nothing as matched. A slave serves nothing
        past the mark until it is checked."""
        cp = self.checkpoint
        assert cp is not None
        cl = self.commit_log
        end = cl.max_offset
        slave = self.config.broker_role == SLAVE and not self.config.enable_dleger_commit_log
        mark = cp.replica_mark
        if self.broker_name:
            owner = zlib.crc32(self.broker_name.encode())
            if mark is not None and cp.replica_owner is not None and cp.replica_owner != owner:
                mark = 0
                cp.replica_master = b""
                cp.replica_incarnation = b""
                cp.replica_following = b""
                if end > cl.min_offset:
                    log.warning(
                        "the checkpoint's replica mark was written while this store was another broker name's: "
                        "none of its records is taken as %s's master's until a slave checks them",
                        self.broker_name,
                    )
            cp.replica_owner = owner
        if mark is None:
            mark = end if slave and not cp.replica_mark_found else 0
            if cp.replica_mark_found and end > cl.min_offset:
                log.warning(
                    "the checkpoint's replica mark is void (a broker that does not keep it wrote the "
                    "checkpoint since, or a torn write): none of this store's records is taken as its master's "
                    "until a slave checks them"
                )
        self.replica_mark = max(min(mark, end), cl.min_offset)
        self.replica_master = cp.replica_master.hex() if mark else ""
        self.replica_incarnation = cp.replica_incarnation.hex() if mark and cp.replica_master else ""
        self.replica_following = cp.replica_following.hex() if self.replica_incarnation else ""
        if not self.keep_replica_mark:
            cp.replica_mark = self.replica_mark
        if slave and not self.read_only and self.replica_mark < end:
            self.held_from = self.replica_mark
            log.warning(
                "this slave's CommitLog is known to be its master's up to offset %d: the %s after it "
                "are not served until they are checked against the master",
                self.replica_mark,
                plural(end - self.replica_mark, "byte"),
            )

    def _read_end(self) -> int:
        """Where dispatch stops: the CommitLog's end, or where a slave's unchecked records start."""
        held = self.held_from
        end = self.commit_log.max_offset
        return end if held < 0 or held > end else held

    def _max_cq_phy_offset(self) -> int:
        return max((cq.max_physic_offset for cq in self._cqs.values()), default=0)

    def _usable_recovery_point(self) -> RecoveryPoint | None:
        """The checkpoint's recovery point when it lies within the CommitLog files (cleanup may have
        deleted the file it is in; an older store or RocketMQ leaves none)."""
        assert self.checkpoint is not None
        point = self.checkpoint.recovery_point
        files = self.commit_log.files.files
        if (
            point is None
            or not files
            or not files[0].file_from_offset <= point.offset <= files[-1].end_offset
        ):
            return None
        return point

    def _recover(self, point: RecoveryPoint | None = None) -> None:
        for cq in self._cqs.values():
            cq.recover()
        max_cq_phy = self._max_cq_phy_offset()
        files = self.commit_log.files.files
        check_crc = self.config.check_crc_on_recover
        root = self.config.store_path_root_dir
        self.commit_log.set_aside = (
            kept_in_place(list_quarantines(root), self.commit_log.files) if files else {}
        )
        damaged: list[tuple[CorruptRecordError, int]] = []

        def on_damaged(error: CorruptRecordError, size: int) -> None:
            damaged.append((error, size))

        if not files:
            for cq in self._cqs.values():
                if not self.read_only:
                    cq.destroy()
            if not self.read_only:
                self._cqs.clear()
                self._queues_replaced()
            result = ScanResult(0, None, 0, 0)
            checked_from = 0
        elif self.last_exit_ok or self.read_only:
            checked_from = files[max(0, len(files) - 3)].file_from_offset
            result = self.commit_log.scan(max(0, len(files) - 3), check_crc=check_crc, on_damaged=on_damaged)
        else:
            assert self.checkpoint is not None
            limit = self.checkpoint.recovery_limit(
                index_safe=self.config.message_index_enable and self.config.message_index_safe
            )
            start = self.commit_log.abnormal_start_index(limit)
            checked_from = files[start].file_from_offset
            if point is not None and self._sound_below_point(
                point, checked_from, check_crc=check_crc, on_damaged=on_damaged
            ):
                checked_from = min(checked_from, point.offset)
                result = self._recover_from_point(point, check_crc=check_crc, on_damaged=on_damaged)
            else:
                damaged.clear()  # the scan from the start meets them again
                log.info("abnormal recovery from %s (checkpoint limit %d)", files[start].path, limit)
                result = self.commit_log.scan(
                    start, check_crc=check_crc, on_record=self._dispatch_one, on_damaged=on_damaged
                )
        self.recovery_corruption = result.corruption
        end = result.process_offset
        self._set_aside_in_place(damaged)
        if not self.read_only:  # what the truncation would destroy is moved aside first
            set_aside(
                root,
                self.commit_log.files,
                list(self._cqs.values()),
                end,
                corruption=result.corruption,
                recovery="normal" if self.last_exit_ok else "abnormal",
                now_ms=self.clock.now_ms(),
                queue_cut=lambda cq: cq.dirty_from(end),
            )
        self.commit_log.truncate(end)
        self.commit_log.last_store_timestamp = result.last_store_timestamp
        # Records from here on were CRC-checked by this scan or are written by this process: reads check
        # only those below (a pull pays a body CRC only for data no one has checked since start-up).
        self._crc_checked_from = checked_from if files and check_crc else end
        if max_cq_phy >= end or not self.last_exit_ok:
            for cq in self._cqs.values():
                cq.truncate_dirty(end)
        self._rebuild_queue_table()

    def _set_aside_in_place(
        self,
        damaged: list[tuple[CorruptRecordError, int]],
        recovery: str | None = None,
        who: str = "recovery",
    ) -> str:
        """Recovery met damaged records whose extent it knew and went on past them: each one not in a
        quarantine yet is copied into a new one (logged at ERROR); all of them stay in the CommitLog, where
        walks step over them and reads skip them. Returns the new quarantine ("" when none).
        A replicating slave sets aside its master's set-aside records through here too (``recovery``,
        ``who``: what the manifest and the ERROR say)."""
        held = self.commit_log.set_aside
        new = [(e, n) for e, n in damaged if e.offset not in held]
        again = len(damaged) - len(new)
        for e, n in damaged:
            held[e.offset] = n
        if again:
            log.warning(
                "the CommitLog still holds %s set aside earlier (never served)",
                plural(again, "damaged record"),
            )
        if new and not self.read_only:
            manifest = set_aside_records(
                self.config.store_path_root_dir,
                self.commit_log.files,
                new,
                recovery=recovery or ("normal" if self.last_exit_ok else "abnormal"),
                now_ms=self.clock.now_ms(),
                who=who,
            )
            return manifest.path if manifest is not None else ""
        return ""

    def _sound_below_point(
        self,
        point: RecoveryPoint,
        start: int,
        *,
        check_crc: bool,
        on_damaged: Callable[[CorruptRecordError, int], None],
    ) -> bool:
        """Abnormal recovery checks, as 4.9.8's does, every record from ``start`` (the first record of the
        file its checkpoint timestamps pick) with the body CRC, also those below our recovery point that it
        need not dispatch again: a disk that lost or damaged bytes in a crash is found here, not by a pull.
        A damaged record whose extent is known goes to ``on_damaged`` (set aside in place); False when the
        records end before the point (a torn header, zeros): the log is then recovered from ``start``
        with the cut and quarantine 4.9.8's rule makes."""
        if start >= point.offset:
            return True
        walk = self.commit_log.verify(start, point.offset, check_crc=check_crc, on_damaged=on_damaged)
        if walk.corruption is None and walk.offset >= point.offset:
            return True
        log.error(
            "the CommitLog below the checkpoint's recovery point (offset %d) ends at %d (%s): recovering "
            "from offset %d instead",
            point.offset,
            walk.offset,
            walk.corruption or walk.stop,
            start,
        )
        return False

    def _recover_from_point(
        self,
        point: RecoveryPoint,
        *,
        check_crc: bool,
        on_damaged: Callable[[CorruptRecordError, int], None] | None = None,
    ) -> ScanResult:
        """Abnormal recovery from our recovery point: validate and dispatch again what follows it.

        Everything below the point was on disk before the crash (CommitLog, units, index entries), so it
        need not be dispatched again (:meth:`_sound_below_point` has checked it from where RocketMQ's
        recovery would start). Units past the point may never have reached the disk: they are dropped
        first."""
        for cq in self._cqs.values():
            cq.truncate_dirty(point.offset)
        log.info("abnormal recovery from the checkpoint's recovery point, CommitLog offset %d", point.offset)
        return self.commit_log.scan_from(
            point.offset, check_crc=check_crc, on_record=self._dispatch_one, on_damaged=on_damaged
        )

    def recover_topic_queue_table(self) -> None:
        """``DefaultMessageStore#recoverTopicQueueTable``: a DLedger member becoming leader continues each
        queue from what was dispatched (its own uncommitted puts of an earlier term counted nothing)."""
        with self._put_lock:
            self._rebuild_queue_table()

    def _drop_units_from(self, offset: int) -> None:
        """Drop the ConsumeQueue units pointing at or past ``offset`` and continue each queue from what is
        left (under the put lock, or before the store serves)."""
        for cq in self._cqs.values():
            cq.truncate_dirty(offset)
        self._rebuild_queue_table()

    def _rebuild_queue_table(self) -> None:
        """Each queue's next offset from its units; fix min offsets (docs/store-format.md §start-up)."""
        min_phy = self.commit_log.min_offset
        for cq in self._cqs.values():
            cq.next_offset = cq.max_offset
            cq.correct_min_offset(min_phy)

    # ================================================================== dispatch

    def _queues_replaced(self) -> None:
        """A queue object of the table was replaced or removed (under the put lock, or before the store
        serves): every :class:`QueueHandle` looks its queue up again at its next put. Generations are
        unique in the process, so a handle of another store never passes for current."""
        self._cq_generation = next(_GENERATIONS)

    def _find_cq(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = self._cqs.get((topic, queue_id))
        if cq is None:
            cq = self._new_cq(topic, queue_id)
            self._cqs[(cq.topic, queue_id)] = cq
        return cq

    def _dispatch_one(self, info: RecordInfo, cq: ConsumeQueue | None = None) -> None:
        """Build the ConsumeQueue unit and the index entries of one record (docs/store-format.md §dispatch);
        ``cq`` is the record's queue when the caller has it already."""
        code, keys = dispatch_rules(info, self._delay_ms, self._index_enabled)
        if code is not None:
            if cq is None:
                cq = self._find_cq(info.topic, info.queue_id)
            cq.put_unit(info.commit_log_offset, info.size, code, info.queue_offset)
            self._mark_written(cq)
            self._logics_ts = info.store_timestamp
        if keys:
            full = self.index.build_index(
                keys, info.commit_log_offset, info.store_timestamp, self.clock.now_ms
            )
            if full is not None:  # (checked here: a call per record costs on the put path)
                self._flush_full_index_later(full)

    def _dispatch_records(self, infos: Sequence[RecordInfo], touched: set[tuple[str, int]]) -> None:
        """Dispatch consecutive records as :meth:`_dispatch_one` does each, with every queue's units written
        in one copy and the index entries after them (a replicating slave's catch-up); the files come out
        the same. ``touched`` collects the queues. Raises like :meth:`_dispatch_one`: a retry from the first
        record rewrites nothing (units and entries already there are skipped)."""
        units: UnitRuns = {}
        indexed: list[tuple[list[str], int, int]] = []
        index_enabled = self._index_enabled
        delay_ms = self._delay_ms
        logics_ts = 0
        for info in infos:
            code, keys = dispatch_rules(info, delay_ms, index_enabled)
            if code is not None:
                unit = (info.commit_log_offset, info.size, code, info.queue_offset)
                run = units.get((info.topic, info.queue_id))
                if run is None:
                    units[(info.topic, info.queue_id)] = [unit]
                else:
                    run.append(unit)
                logics_ts = info.store_timestamp
            if keys:
                indexed.append((keys, info.commit_log_offset, info.store_timestamp))
        self._write_units(units, indexed, logics_ts, touched)

    def _write_units(
        self,
        units: UnitRuns,
        indexed: list[tuple[list[str], int, int]],
        logics_ts: int,
        touched: set[tuple[str, int]],
    ) -> None:
        """Each queue's units of a dispatch (in one copy), then the index entries."""
        cqs = self._cqs
        for key, run in units.items():
            cq = cqs.get(key)  # (the key as it is: no tuple made, no call by star-arguments)
            if cq is None:
                cq = self._find_cq(key[0], key[1])
            if len(run) == 1:  # (a leader's commit of a few sends over several queues: most often one each)
                unit = run[0]
                cq.put_unit(unit[0], unit[1], unit[2], unit[3])
            else:
                cq.put_units(run)
            self._mark_written(cq)
            touched.add(key)
        if logics_ts:
            self._logics_ts = logics_ts
        for keys, offset, timestamp in indexed:
            full = self.index.build_index(keys, offset, timestamp, self.clock.now_ms)
            if full is not None:
                self._flush_full_index_later(full)

    def _flush_full_index_later(self, full: IndexFile) -> None:
        """Flush an index file that just filled up in the background (see :meth:`_flush_full_index`)."""
        t = supervised("store-flush-index", functools.partial(self._flush_full_index, full), self._stop)
        self._index_flushers.append(t)
        t.start()

    def _flush_full_index(self, full: IndexFile) -> None:
        """Flush an index file that filled up, then record its end time in the checkpoint
        (docs/store-format.md §new-index-files)."""
        full.flush()
        if self.checkpoint is not None:
            self.checkpoint.index_msg_timestamp = max(self.checkpoint.index_msg_timestamp, full.end_timestamp)
            self.checkpoint.flush()

    def dispatch(self) -> int:
        """Parse the CommitLog from the dispatch cursor to its end and dispatch every record (reput).

        Puts dispatch their own records, so this only has work after recovery or when records were
        written without going through :meth:`put_message`; each queue's next offset then follows its
        units. Returns the number of records dispatched.
        """
        if self.read_only:
            return 0
        with self._put_lock:
            n = self._reput_until(self._read_end())
            self._rebuild_queue_table()
            return n

    def dispatch_committed(self) -> int:
        """Dispatch what a DLedger CommitLog committed since (a Raft driver calls it after advancing the
        committed index); arrival listeners hear of each queue that grew. Queue offsets already handed to
        uncommitted puts stay as they are. Returns the number of records dispatched."""
        if self.read_only:
            return 0
        touched: set[tuple[str, int]] = set()
        n = 0
        cl = self.commit_log
        with self._put_lock:
            # parsed a chunk at a time and dispatched as a replicating slave's records are (each queue's units
            # in one copy): a push commits a batch of entries at once
            while self.reput_from_offset < cl.max_offset:
                start = self.reput_from_offset
                end = min(cl.max_offset, start + DISPATCH_CHUNK)
                units: UnitRuns = {}
                keyed: KeyedRecords = []
                # units straight from a follower's pushed runs, else from the data file (a leader's)
                wanted = keyed if self._index_enabled else None
                taken, offset, ts = cl.pushed_units(start, end, units, wanted)
                if not taken:
                    taken, offset, ts = cl.file_units(start, end, units, wanted)
                if taken:
                    indexed = [(record_keys(t, u, k), o, stamp) for t, u, k, o, stamp in keyed]
                    self._write_units(units, indexed, ts, touched)  # (raising: the cursor stays, as below)
                    self.reput_from_offset = offset
                    n += taken
                    continue
                infos, offset = cl.parsed_run(start, end)  # (a pure build's leader's own records: no walk)
                if not infos:
                    walk = cl.walk(start, end)
                    infos = []
                    for info in walk:
                        infos.append(info)
                        if cl.walks_in_c:  # the one record the C walk did not take: it goes on after it
                            break
                    offset = walk.offset
                    if cl.walks_in_c and infos:  # (the walk stands before the record it handed over)
                        offset = infos[-1].commit_log_offset + infos[-1].size
                self._dispatch_records(infos, touched)  # raising, it leaves the cursor at the first record
                self.reput_from_offset = offset
                n += len(infos)
                if offset == start:
                    break
        for topic, queue_id in touched:  # (in no set order: each listener hears of its own queue)
            cq = self._cqs[(topic, queue_id)]
            for listener in self._listeners:
                listener(topic, queue_id, cq.max_offset)
        return n

    def _reput_until(self, end: int, touched: set[tuple[str, int]] | None = None) -> int:
        """Dispatch the whole records that start below ``end``; stops before a record whose bytes have not
        all arrived (a replicating slave receives records split across frames). ``touched`` collects the
        queues."""
        n = 0
        walk = self.commit_log.walk(self.reput_from_offset, end)
        try:
            for info in walk:
                self._dispatch_one(info)
                if touched is not None:
                    touched.add((info.topic, info.queue_id))
                n += 1
        finally:  # a dispatch that raised leaves the cursor at its record
            self.reput_from_offset = walk.offset
        return n

    def _retry_dispatch(self, end: int | None = None) -> None:
        """Dispatch the records a put stored but could not dispatch (its ERROR said so), up to ``end``;
        quiet while the disk is still full. Call under the put lock."""
        limit = self._read_end()
        try:
            self._reput_until(limit if end is None else min(end, limit))
        except OSError as e:
            if not is_no_space(e):
                raise

    def _retry_dispatch_in_chunks(self, last_seen: int) -> int:
        """The flush loop's retry: :data:`_RETRY_CHUNK` at a time with the put lock dropped in between, so
        a replicating slave that appended far ahead of its dispatch never waits long for the lock. A slave's
        replica dispatch (:meth:`dispatch_replica`) is left alone while it moves (``last_seen``: the cursor
        at the previous call); returns the cursor for the next call. A DLedger CommitLog under a Raft driver
        (not :attr:`~store.commitlog.CommitLog.dispatch_on_put`) is never dispatched here: the driver's
        :meth:`dispatch_committed` takes what it committed, tells the arrival listeners of each queue that
        grew, and is called again after it failed; taken here between the commit and that call, records
        would reach their queues with no waiting pull told (and the call would count none of them)."""
        cursor = self.reput_from_offset
        if not self.commit_log.dispatch_on_put or (self.config.broker_role == SLAVE and cursor != last_seen):
            return cursor
        while not self._stop.is_set() and self.reput_from_offset < self._read_end():
            with self._put_lock:
                before = self.reput_from_offset
                self._retry_dispatch(before + _RETRY_CHUNK)
                moved = self.reput_from_offset != before
            if not moved:  # (outside the ``with``: mypyc cannot compile a break out of it)
                break
        return self.reput_from_offset

    def add_arrival_listener(self, listener: ArrivalListener) -> None:
        """Register ``callback(topic, queue_id, max_offset)``, called after a put's records are dispatched.

        It runs on the putting thread; an asyncio broker should hop to its loop with
        ``loop.call_soon_threadsafe``.
        """
        self._listeners.append(listener)

    def remove_arrival_listener(self, listener: ArrivalListener) -> None:
        """Unregister ``listener`` (a DLedger member's follower-only one, as it is elected): a new list, so a
        dispatch iterating the old one on another thread misses none of the others; compared by equality,
        as each access to a bound method makes a new one."""
        self._listeners = [each for each in self._listeners if each != listener]

    # ================================================================== puts

    def queue_handle(self, topic: str, queue_id: int) -> QueueHandle:
        """A handle for puts to one queue (see :class:`QueueHandle`); the queue need not exist yet."""
        return QueueHandle(sys.intern(topic), queue_id)

    def put_message(self, msg: Message, handle: QueueHandle | None = None) -> PutResult:
        """Append, dispatch and (SYNC_FLUSH with ``wait_store_msg_ok``) wait for the fsync; ``handle``, the
        message's queue's, spares the lookup of the queue."""
        return self._put([apply_delay(msg, self._delay_ms)], msg.wait_store_msg_ok, False, handle)

    def put_messages(self, batch: list[Message], handle: QueueHandle | None = None) -> PutResult:
        """Append a batch for one (topic, queue): consecutive queue offsets, all in one file
        (docs/store-format.md §batches)."""
        if not batch_is_legal(batch):
            return PutResult(PutMessageStatus.MESSAGE_ILLEGAL)
        return self._put(batch, batch[0].wait_store_msg_ok, False, handle)

    def put_leader_record(self, msg: Message) -> PutResult:
        """A DLedger leader's own record (its term record), appended before the broker takes the master
        role: the store still refuses puts then. Its queue continues past the entries of that queue the
        log holds uncommitted (they commit with it), not just past what was dispatched. Not dispatched
        until committed, like every entry of a Raft driver's log."""
        with self._put_lock:
            cq = self._find_cq(msg.topic, msg.queue_id)
            cq.next_offset = max(cq.max_offset, self.commit_log.tail_queue_end(msg.topic, msg.queue_id))
        return self._put([msg], False, leader=True)

    def _handle_cq(self, handle: QueueHandle | None, topic: str, queue_id: int) -> ConsumeQueue:
        """The queue of ``topic``/``queue_id`` through ``handle`` when it names that queue and is current
        (one int compared), else from the table, refreshing the handle. Call under the put lock."""
        if handle is None or handle.queue_id != queue_id or handle.topic != topic:
            return self._find_cq(topic, queue_id)
        cq = handle.cq
        if cq is None or handle.generation != self._cq_generation:
            cq = handle.cq = self._find_cq(topic, queue_id)
            handle.generation = self._cq_generation
        return cq

    def _put(
        self, msgs: list[Message], wait: bool, leader: bool = False, handle: QueueHandle | None = None
    ) -> PutResult:
        if not self._running or self.cleaner.disk_full or (self.config.broker_role == SLAVE and not leader):
            return PutResult(PutMessageStatus.SERVICE_NOT_AVAILABLE)  # a slave only replicates
        if self.put_refusal is not None and not leader and (refused := self.put_refusal()) is not None:
            return PutResult(refused)
        with self._put_lock:
            head = msgs[0]
            cq = None  # every message of a put goes to one queue: found once, not once per step
            try:
                if self.next_incarnation:  # (the first put since the start)
                    self._begin_incarnation()
                # Space for the record's unit and index entries first: a full disk refuses the put
                # before anything is appended (and never meets a store into an unallocated page).
                if head.sys_flag & TRANSACTION_TYPE_MASK in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE):
                    cq = self._handle_cq(handle, head.topic, head.queue_id)
                    cq.reserve(cq.next_offset, len(msgs))
                if self._index_enabled and (
                    has_index_keys(head.properties)
                    if len(msgs) == 1
                    else any(has_index_keys(m.properties) for m in msgs)
                ):
                    full = self.index.reserve(self.clock.now_ms)
                    if full is not None:
                        self._flush_full_index_later(full)
                infos = self.commit_log.append(
                    msgs, self.store_host, self.clock.now_ms(), cq.next_offset if cq is not None else 0
                )
            except IllegalMessage as e:
                log.warning("message refused: %s", e)
                return PutResult(e.status)
            except PartlyAppended as partly:
                if cq is not None:  # (stored: they are served, their queue offsets taken)
                    cq.next_offset = max(i.queue_offset for i in partly.appended) + 1
                return PutResult(self._put_failed(partly.cause))
            except OSError as err:  # (not ``e`` again: compiled, one name holds one type)
                return PutResult(self._put_failed(err))
            if self._put_error is not None:
                self._put_error = None
                if self._no_space:
                    self._no_space = False
                    log.warning("store writable again: space could be allocated")
            last = infos[-1]
            if cq is not None:
                cq.next_offset = last.queue_offset + 1
            end = last.commit_log_offset + last.size
            # where the first record's bytes start: a DLedger entry header comes before its record
            start = infos[0].commit_log_offset - self.commit_log.entry_header
            if self.commit_log.dispatch_on_put:
                behind = False  # an earlier put's records wait for their units: dispatched first
                try:
                    if self.reput_from_offset < start:
                        behind = True
                        self._reput_until(start)
                        behind = False
                    for info in infos:
                        self._dispatch_one(info, cq)
                except OSError as err:  # only a batch crossing into a new ConsumeQueue file or many keys
                    # The dispatch cursor stays below the undispatched records: the next put or flush
                    # retries them, the recovery point stays below them, and shutdown keeps the abort file.
                    if not behind:  # (else still the records the ERROR below named, still no space)
                        self.reput_from_offset = start
                        log.error(
                            "records from CommitLog offset %d are stored but not all dispatched "
                            "(ConsumeQueue unit or index entries), dispatched when space returns: %s",
                            self.reput_from_offset,
                            err,
                        )
                else:
                    self.reput_from_offset = end
        first = infos[0]
        host = msgs[0].store_host
        prefix = msg_id_prefix(host) if host else self._msg_id_prefix
        if len(infos) == 1:
            msg_id = prefix + format(first.commit_log_offset, "016X")
        else:
            msg_id = ",".join(prefix + format(i.commit_log_offset, "016X") for i in infos)
        result = PutResult(  # positional: status, phys_offset, queue_offset, msg_id, wrote_bytes, store_timestamp, msg_num
            _PUT_OK,
            first.commit_log_offset,
            first.queue_offset,
            msg_id,
            end - first.commit_log_offset,
            first.store_timestamp,
            len(infos),
        )
        if cq is not None and self.commit_log.dispatch_on_put:
            if handle is not None and handle.cq is cq:
                handle.remember(cq)
            for listener in self._listeners:
                listener(first.topic, first.queue_id, last.queue_offset + 1)
        if wait and self._sync_flush and not self._wait_flushed(end):
            result.status = PutMessageStatus.FLUSH_DISK_TIMEOUT
        return result

    def _put_failed(self, error: OSError) -> PutMessageStatus:
        """The status of a put whose files could not be created or allocated: ``SERVICE_NOT_AVAILABLE``
        (what a disk over the warning watermark gets, its remark names a full disk) when the disk or quota
        is full, logged at ERROR once until a put succeeds again; ``CREATE_MAPEDFILE_FAILED`` otherwise
        (no descriptor left, ...)."""
        self._put_error = f"{error.strerror or error}" + (f" ({error.filename})" if error.filename else "")
        if is_no_space(error):
            if not self._no_space:
                self._no_space = True
                log.error("store full: puts refused until space can be allocated again (%s)", error)
            return PutMessageStatus.SERVICE_NOT_AVAILABLE
        log.error("append failed", exc_info=error)
        return PutMessageStatus.CREATE_MAPEDFILE_FAILED

    # ================================================================== flushing

    def _wait_flushed(self, end: int) -> bool:
        """Group commit: wake the flusher and wait until ``end`` is on disk."""
        timeout = self.config.sync_flush_timeout / 1000
        with self._gc_cond:
            if self._flushed_offset >= end:
                return True
            self._gc_pending = True
            self._gc_cond.notify_all()
            return self._gc_cond.wait_for(
                lambda: self._flushed_offset >= end or self._stop.is_set(), timeout
            ) and (self._flushed_offset >= end)

    def _commit_log_flush_loop(self) -> None:
        cfg = self.config
        cl = self.commit_log
        last_thorough = last_mark = self.clock.now_ms()
        while not self._stop.is_set():
            if cfg.sync_flush:
                with self._gc_cond:
                    self._gc_cond.wait_for(lambda: self._gc_pending or self._stop.is_set(), 0.01)
                    self._gc_pending = False
            elif self._stop.wait(cfg.flush_interval_commit_log / 1000):
                break
            mark = self.replica_mark  # (read before the end: never past it)
            target = cl.max_offset
            ts = cl.last_store_timestamp
            dirty = target - cl.files.flushed_offset
            now = self.clock.now_ms()
            thorough = now - last_thorough >= cfg.flush_commit_log_thorough_interval
            # a replicating slave's mark: written once the CommitLog is flushed past it, at most this often
            # (a checkpoint sync per CommitLog flush would double a SYNC_FLUSH slave's syncs)
            mark_due = (
                mark != self._mark_on_disk
                and now - last_mark >= MARK_WRITE_INTERVAL_MS
                and not self.keep_replica_mark
            )
            if dirty <= 0:
                if target > self._flushed_offset:  # e.g. the start-up position; nothing to sync
                    with self._gc_cond:
                        self._flushed_offset = target
                        self._gc_cond.notify_all()
                if mark_due:
                    self._write_mark(mark)
                    last_mark = now
                continue
            if cfg.sync_flush or thorough or mark_due or dirty >= cfg.flush_commit_log_least_pages * 4096:
                try:
                    cl.flush()
                except (OSError, ValueError):
                    log.exception("commit log flush failed")
                    continue
                if thorough:
                    last_thorough = now
                if self.checkpoint is not None and ts:
                    self.checkpoint.physic_msg_timestamp = ts
                if mark_due:
                    self._write_mark(mark)
                    last_mark = now
                with self._gc_cond:
                    self._flushed_offset = max(self._flushed_offset, target)
                    self.flush_count += 1
                    self._gc_cond.notify_all()

    def _clean_loop(self) -> None:
        delay = self._clean_start_delay_ms
        while not self._stop.wait(delay / 1000):
            delay = self.config.clean_resource_interval
            try:
                self.cleaner.run_once(self.clock.now_ms())
            except (OSError, ValueError):
                log.exception("file cleanup failed")

    def _disk_check_loop(self) -> None:
        delay = DISK_CHECK_START_DELAY_MS
        while not self._stop.wait(delay / 1000):
            delay = DISK_CHECK_INTERVAL_MS
            self.cleaner.check_disk_space()

    def delete_expired_files_manually(self, up_to: int | None = None) -> None:
        """The admin ``DELETE_EXPIRED_COMMITLOG`` request: expired files go at the next runs, those ending
        at or below ``up_to`` only when given (docs/store-format.md §manual-deletion)."""
        self.cleaner.request_manual_delete(up_to)

    @property
    def disk_full(self) -> bool:
        """Usage above the warning watermark: puts are refused until cleanup frees space
        (docs/store-format.md §disk-watermarks)."""
        return self.cleaner.disk_full

    def disk_ratio(self) -> float:
        """Usage of the CommitLog partition as the watermarks see it (runtime info ``commitLogDiskRatio``)."""
        return self.cleaner.commit_log_ratio()

    def write_refusal(self) -> str | None:
        """Why this store refuses puts now, or None: stopped, disk full past the warning watermark, the
        last put's files could not be allocated or written (until one is), or ``put_refusal``'s status. A
        slave's refusal (it only replicates) is its role, not a fault: not counted."""
        if not self._running:
            return "the store is not running"
        if self.cleaner.disk_full:
            return (
                f"disk full: the CommitLog partition is {self.cleaner.commit_log_ratio():.0%} used, above "
                f"diskSpaceWarningLevelRatio {self.config.disk_space_warning_level_ratio}%"
            )
        if self._put_error is not None:
            return f"its files cannot be written: {self._put_error}"
        refused = self.put_refusal() if self.put_refusal is not None else None
        return None if refused is None else f"puts answered {refused.value}"

    def committed_offsets(self) -> list[CommittedOffset]:
        """Every group's committed offset on every queue (``consumerOffset.json``)."""
        return committed_offsets(self.configs.consumer_offsets.snapshot())

    def first_offset_at(self, topic: str, queue_id: int, phys: int) -> int:
        """First queue offset whose message is at CommitLog offset ``phys`` or later (binary search of the
        ConsumeQueue; its max offset when none is, 0 for an unknown queue)."""
        cq = self._cqs.get((topic, queue_id))
        if cq is None:
            return 0
        lo, hi = cq.min_offset, cq.max_offset
        while lo < hi:
            mid = (lo + hi) // 2
            unit = cq.get_unit(mid)
            if unit is not None and unit[0] < phys:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def cleanup_plan(self, *, manual: bool = True, config: StoreConfig | None = None) -> CleanPlan:
        """What a cleanup run would delete now and whose unconsumed messages go with it (``manual``: as
        after ``DELETE_EXPIRED_COMMITLOG``; ``config`` overrides the retention settings). Changes nothing."""

        return self.cleaner.plan(
            self.clock.now_ms(), manual=manual, unconsumed=self._unconsumed_per_file, config=config
        )

    def _unconsumed_per_file(self, files: Sequence[LogFile]) -> list[dict[str, int]]:
        return unconsumed_per_file(files, self.committed_offsets(), self.first_offset_at)

    def apply_cleanup_plan(self, plan: CleanPlan) -> int:
        """Delete every file of ``plan`` now (offline ``mqctl store clean``: no batch limit, no pauses), then
        the ConsumeQueue and index files below the new minimum. Returns the CommitLog files deleted."""
        if self.read_only:
            raise StoreClosedError("the store is open read-only")
        deleted = self.cleaner.delete(plan)
        self.cleaner.delete_logic_files()
        return deleted

    def clean_expired_consume_queues(self) -> int:
        """``CLEAN_EXPIRED_CONSUMEQUEUE``: destroy queues whose every message is below the CommitLog
        minimum. Returns the number destroyed."""
        if self.read_only:
            return 0
        candidates = self.cleaner.expired_consume_queues()
        with self._put_lock:  # a put may have reached a candidate since: check again
            min_offset = self.commit_log.min_offset
            doomed = [cq for cq in candidates if consume_queue_expired(cq, min_offset)]
            for cq in doomed:
                self._cqs.pop((cq.topic, cq.queue_id), None)
                cq.destroy()
            if doomed:
                self._queues_replaced()
        for cq in doomed:
            log.info("destroyed expired consume queue %s/%d", cq.topic, cq.queue_id)
        return len(doomed)

    def _warm_loop(self) -> None:
        """Keep zeroed page-cache pages ahead of the CommitLog writer (see ``MappedFile.prepare``), waking as
        the writer's pace asks (:func:`warm_delay`): each wake takes the GIL from a busy event loop, and most
        find the window still wide."""
        cl = self.commit_log
        delay = WARM_MIN_DELAY_S
        written, at = cl.max_offset, time.monotonic()
        while not self._stop.wait(delay):
            try:
                ahead = cl.warm_ahead(_WARM_AHEAD_BYTES)
            except OSError as e:
                if not is_no_space(e):
                    log.exception("commit log warm-up failed")
                delay = 1.0  # a full disk: the put path reports it (once); try again later
                continue
            except ValueError:
                log.exception("commit log warm-up failed")
                ahead = 0
            end, now = cl.max_offset, time.monotonic()
            delay = warm_delay(ahead, (end - written) / max(now - at, WARM_MIN_DELAY_S))
            written, at = end, now

    def _write_mark(self, mark: int) -> None:
        """Write the replica mark, ``mark`` being flushed in the CommitLog already. Composed under the put
        lock, whose holder is the only one to lower the mark (a cut tail): a value taken before a cut is
        never written after it."""
        cp = self.checkpoint
        if cp is None or self.keep_replica_mark:
            return
        with self._put_lock:
            cp.replica_mark = min(mark, self.replica_mark)
            self._mark_on_disk = cp.replica_mark
            cp.write()
        cp.sync()

    def _checkpoint(self, *, locked: bool = False, every_queue: bool = True) -> None:
        """Flush CommitLog, ConsumeQueues and index files, then write the checkpoint: its timestamps and
        our recovery point (the dispatch cursor and the active index file's header, taken first under
        the put lock, which ``locked`` says the caller holds). The flush loop's periodic checkpoint
        flushes only the queues written since its last flush (``every_queue=False``); start, stop and a
        cut tail flush them all."""
        cp = self.checkpoint
        if cp is None:
            return
        with contextlib.nullcontext() if locked else self._put_lock:
            self.index.write_header()
            point = RecoveryPoint(self.reput_from_offset, self.index.snapshot())
            mark = self.replica_mark
            physic_ts = self.commit_log.last_store_timestamp
            logics_ts = self._logics_ts
            dirty = self._take_dirty()
        # everything below the point reaches the disk first; then the checkpoint says so
        try:
            self.commit_log.flush()
            self._flush_consume_queues(list(self._cqs.values()) if every_queue else dirty, 0)
        except BaseException:  # still dirty: the next checkpoint must not skip them
            self._redirty(dirty, locked=locked)
            raise
        self.index.sync()
        if physic_ts:
            cp.physic_msg_timestamp = max(cp.physic_msg_timestamp, physic_ts)
        if logics_ts:
            cp.logics_msg_timestamp = logics_ts
        with contextlib.nullcontext() if locked else self._put_lock:
            cp.recovery_point = point
            if not self.keep_replica_mark:
                cp.replica_mark = min(mark, self.replica_mark)  # (see _write_mark)
                self._mark_on_disk = cp.replica_mark
            cp.write()
        cp.sync()

    def _take_dirty(self) -> list[ConsumeQueue]:
        """The queues written since the last call, the list emptied (call under the put lock)."""
        dirty = self._dirty_cqs
        self._dirty_cqs = []
        for cq in dirty:
            cq.dirty = False
        return dirty

    def _take_due(self) -> list[ConsumeQueue]:
        """The queues past the least pages since the last call, the list emptied (call under the put lock)."""
        due = self._due_cqs
        self._due_cqs = []
        for cq in due:
            cq.due = False
        return due

    def _redirty(self, queues: list[ConsumeQueue], *, locked: bool, due: bool = False) -> None:
        """Put queues taken by :meth:`_take_dirty` (or, ``due``, :meth:`_take_due`) back for a later flush."""
        with contextlib.nullcontext() if locked else self._put_lock:
            for cq in queues:
                if due:
                    if not cq.due:
                        cq.due = True
                        self._due_cqs.append(cq)
                elif not cq.dirty:
                    self._mark_dirty(cq)

    def _mark_dirty(self, cq: ConsumeQueue) -> None:
        """Into the thorough flush's list (call under the put lock, for a queue not in it: ``cq.dirty`` false)."""
        cq.dirty = True
        self._dirty_cqs.append(cq)

    def _mark_written(self, cq: ConsumeQueue) -> None:
        """After a put to ``cq`` (under the put lock): into the thorough flush's list, and into the list every
        flush takes once it holds more than the least pages unflushed or filled a file (see ``flush_due``)."""
        if not cq.dirty:
            self._mark_dirty(cq)
        if not cq.due and cq.flush_due(self._cq_least_bytes):
            cq.due = True
            self._due_cqs.append(cq)

    def _flush_consume_queues(self, queues: list[ConsumeQueue], least: int) -> list[ConsumeQueue]:
        """Flush those of ``queues`` with more than ``least`` bytes unflushed; returns the others that
        still hold unflushed bytes."""
        due: list[ConsumeQueue] = []
        rest: list[ConsumeQueue] = []
        for cq in _paced(queues):
            dirty = cq.files.dirty_bytes()
            if dirty > least:
                due.append(cq)
            elif dirty:
                rest.append(cq)
        if len(due) >= _SYNCFS_QUEUES:
            # before the sync: what it covers
            ends = [end for cq in _paced(due) for end in cq.files.dirty_ends()]
            if sync_filesystem(self.config.consume_queue_dir):
                for mf, end in _paced(ends):
                    mf.mark_flushed(end)
                due = []
        for cq in due:
            cq.flush()
        return rest

    def _cq_flush_loop(self) -> None:
        cfg = self.config
        last_thorough = self.clock.now_ms()
        seen = -1  # the dispatch cursor at the previous retry check
        while not self._stop.wait(cfg.flush_interval_consume_queue / 1000):
            now = self.clock.now_ms()
            thorough = now - last_thorough >= cfg.flush_consume_queue_thorough_interval
            if thorough:
                last_thorough = now
            due: list[ConsumeQueue] = []
            least = cfg.flush_consume_queue_least_pages * 4096
            self._cq_least_bytes = least  # (a config update reaches the puts within a flush interval)
            try:
                seen = self._retry_dispatch_in_chunks(seen)
                if thorough:
                    self._checkpoint(every_queue=False)
                    continue
                with self._put_lock:  # header fields are updated by puts; write a consistent snapshot
                    self.index.write_header()
                    due = self._take_due()
                # a queue found below the least pages (flushed by a thorough flush since it was due) waits
                # for the thorough flush, which takes every queue written since the last one
                self._flush_consume_queues(due, least)
            except (OSError, ValueError):
                log.exception("consume queue flush failed")
                self._redirty(due, locked=False, due=True)

    # ================================================================== replication (store.ha.ReplicaStore)

    @property
    def commit_log_file_size(self) -> int:
        return self.commit_log.file_size

    def read_commit_log(self, offset: int, size: int) -> bytes | None:
        """A copy, not a view: the file may be cleaned up while the master sends it. Never past the written
        data nor a file's end, where the mapping would answer zeros."""
        mf = self.commit_log.files.find_file(offset)
        if mf is None or offset + size > self.commit_log.max_offset:
            return None
        pos = offset - mf.file_from_offset
        return bytes(mf.view[pos : pos + size]) if pos + size <= mf.file_size else None

    def append_replica(self, offset: int, data: Buffer) -> bool:
        """Copy the master's bytes to the same offsets, so the files are byte-identical (fillers included,
        rolled at the same boundaries); ``False`` (nothing written) when they do not continue the log."""
        cl = self.commit_log
        files = cl.files
        size = cl.file_size
        with self._put_lock:
            if files.files:
                if offset != files.max_offset:
                    return False
            elif offset % size:
                return False  # an empty slave starts at a file boundary, as the master sends it
            else:
                self.replica_mark = offset  # (nothing below it to be anyone's)
            if self.next_incarnation:  # (the first append since the start)
                self._begin_incarnation()
            # the master's bytes at its offsets: matched, when all before them is
            follows = offset == self.replica_mark
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
                if follows:
                    self.replica_mark = offset
        return True

    def dispatch_replica(self, max_bytes: int = DISPATCH_CHUNK) -> bool:
        """The records are parsed without the put lock (bytes below the slave's end never change) and
        written in one short hold of it, so the appender is never kept waiting for a parse."""
        cl = self.commit_log
        with self._put_lock:
            if self.reput_from_offset < cl.min_offset:
                self.reput_from_offset = cl.min_offset
            start = self.reput_from_offset
        walk = cl.walk(start, min(self._read_end(), start + max_bytes))
        infos = list(walk)
        touched: set[tuple[str, int]] = set()
        with self._put_lock:
            if self._stop.is_set():  # shutting down (its checkpoint may be written): leave it be
                return False
            if self.reput_from_offset != start:  # another dispatch went first: look again
                return True
            self._dispatch_records(infos, touched)  # raising, it leaves the cursor at the first record
            self.reput_from_offset = walk.offset
            if self._logics_ts:
                cl.last_store_timestamp = self._logics_ts
        for topic, queue_id in touched:
            max_offset = self.get_max_offset(topic, queue_id)
            for listener in self._listeners:
                listener(topic, queue_id, max_offset)
        return walk.offset != start

    def set_aside_replica_records(self, records: list[tuple[int, int, str]]) -> str:
        """Recovery's in-place set-aside (:meth:`_set_aside_in_place`), for records a slave took from its
        master: reads skip them from here on (their offsets are in ``commit_log.set_aside``), and dispatch
        gives each its ConsumeQueue unit as recovery's walk does, so later queue offsets stay right."""
        damaged = []
        for offset, size, why in records:
            mf = self.commit_log.files.find_file(offset)
            damaged.append((CorruptRecordError(mf.path if mf else "", offset, why), size))
        return self._set_aside_in_place(
            damaged, recovery=REPLICATED, who="replication (the master set it aside)"
        )

    def set_aside_read(self, path: str, offset: int, size: int, why: str) -> None:
        """A read found the record at ``offset`` damaged (its body CRC fails) where recovery did not check
        it: recovery's in-place set-aside (:meth:`_set_aside_in_place`) then and there, so the damage is
        in a quarantine (logged at ERROR, counted by runtime info and ``check cluster``, salvageable) and
        every later read skips the record without checking it again."""
        with self._set_aside_lock:
            if offset in self.commit_log.set_aside:
                return
            try:
                self._set_aside_in_place(
                    [(CorruptRecordError(path, offset, why), size)], recovery=READ, who="a read"
                )
            except OSError as e:  # the read skips it all the same; the next read tries again
                self.commit_log.set_aside.pop(offset, None)
                log.error("could not set aside the damaged record at CommitLog offset %d: %s", offset, e)

    def set_aside_replica_tail(self, cut: int, why: str) -> tuple[int, str]:
        """See :func:`store.replica_tail.set_aside_replica_tail` (a slave's divergent tail)."""
        from store.replica_tail import set_aside_replica_tail  # (it reaches into this class)

        return set_aside_replica_tail(self, cut, why)

    def restart_replica_log(self, start: int) -> int:
        """See :func:`store.replica_tail.restart_replica_log` (a slave behind its master's retention)."""
        from store.replica_tail import restart_replica_log

        return restart_replica_log(self, start)

    def name_replica_master(self, identity: str, incarnation: str = "", following: str = "") -> None:
        """The mark counts the records of the master's store ``identity`` (hex; "": not known), copied from
        its ``incarnation`` (hex; "": not known) or, once it began, the one ``following`` it (the master's
        next then; "": none), from now on, written with the mark's next write."""
        incarnation = incarnation if identity else ""
        following = following if incarnation else ""
        with self._put_lock:
            self.replica_master = identity
            self.replica_incarnation = incarnation
            self.replica_following = following
            if self.checkpoint is not None:
                self.checkpoint.replica_master = bytes.fromhex(identity)
                self.checkpoint.replica_incarnation = bytes.fromhex(incarnation)
                self.checkpoint.replica_following = bytes.fromhex(following)

    def begin_incarnation(self, *, at_first_change: bool = False, at: int = -1) -> None:
        """A new incarnation at the log's end, on disk before the log changes: now (a slave is to cut its
        log at ``at``: begun there before the cut, so a cut whose incarnation could not be written is not
        made, and is made again with it at the next check), or, ``at_first_change`` (the store starts),
        before its first put or append from the master, and now only when it has none: a start that writes
        nothing (a crash loop) leaves the history as it was, so a slave's mark still finds its incarnation
        (docs/replication.md §incarnations)."""
        if self.read_only:
            return
        with self._put_lock:
            if at_first_change and self.incarnations:
                self.next_incarnation = os.urandom(IDENTITY_SIZE).hex()
            else:
                self._begin_incarnation(at)

    def _begin_incarnation(self, at: int = -1) -> None:
        """Under the put lock: the incarnation begins at the log's end, or at ``at`` below it (raises OSError
        when its file cannot be written: the change waits)."""
        ident = bytes.fromhex(self.next_incarnation)
        end = self.commit_log.max_offset
        self.incarnations = begin_incarnation(
            self.config.store_path_root_dir, end if at < 0 else min(at, end), ident
        )
        self.next_incarnation = ""

    def replica_checked(self, end: int) -> None:
        """The divergence check found this log its master's up to ``end`` (its end then, or where it cut):
        the mark moves there, written at once, and reads are no longer held back."""
        with self._put_lock:
            self.replica_mark = max(self.replica_mark, min(end, self.commit_log.max_offset))
            self.held_from = self._diverged_from = -1
            mark = self.replica_mark
        if self.read_only or self.checkpoint is None:
            return
        self.commit_log.flush()  # (the mark never claims what the disk may not hold)
        self._write_mark(mark)

    def hold_back(self, cut: int) -> None:
        """A check found this slave's log not its master's from ``cut`` on: nothing from there is served
        until a check cuts it or finds it the master's, whatever fails first (the cut's incarnation or its
        quarantine on a full disk). The units dispatched past it go and dispatch goes back to it, as at a
        start past the mark; no CommitLog byte changes. The mark comes down to it, on disk too (it only
        vouches for less): restarted before the cut, the slave holds the tail back from there."""
        if self.read_only:
            return
        with self._put_lock:
            cut = max(min(cut, self.commit_log.max_offset), self.commit_log.min_offset)
            if not 0 <= self.held_from <= cut:
                self.held_from = cut
                self._drop_units_from(cut)
                self.reput_from_offset = min(self.reput_from_offset, cut)
            self._diverged_from = cut if self._diverged_from < 0 else min(self._diverged_from, cut)
            lowered = self.replica_mark > cut
            self.replica_mark = min(self.replica_mark, cut)
            mark = self.replica_mark
        if lowered and self.checkpoint is not None:
            self._write_mark(mark)

    def serve_unchecked(self) -> None:
        """Serve past the mark without a check (a master that refuses to be asked; a slave with no
        NameServer to name it): what was served before the mark. The mark stays where it is. A tail a check
        found not the master's (:meth:`hold_back`) stays held back."""
        with self._put_lock:
            self.held_from = self._diverged_from

    @property
    def held_back(self) -> int:
        """The CommitLog bytes a slave holds and does not serve until they are checked."""
        held = self.held_from
        return 0 if held < 0 else max(self.commit_log.max_offset - held, 0)

    # ================================================================== reads

    @property
    def flushed_phy_offset(self) -> int:
        """CommitLog offset known to be on disk (SYNC_FLUSH puts wait for this to pass their end)."""
        return self._flushed_offset

    @property
    def max_phy_offset(self) -> int:
        return self.commit_log.max_offset

    @property
    def min_phy_offset(self) -> int:
        return self.commit_log.min_offset

    def topic_queue_table(self) -> dict[tuple[str, int], int]:
        """``(topic, queue_id) → next queue offset`` for every queue the store has."""
        return {k: cq.max_offset for k, cq in list(self._cqs.items())}

    def queue_keys(self) -> list[tuple[str, int]]:
        return list(self._cqs)

    def get_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self._cqs.get((topic, queue_id))

    def delete_topics(self, topics: Container[str]) -> int:
        """``DELETE_TOPIC_IN_BROKER``: destroy the topics' ConsumeQueues and forget their next offsets, so a
        re-created topic starts at offset 0. Their CommitLog records stay until they expire. Returns
        the number of queues destroyed."""
        if self.read_only:
            return 0
        with self._put_lock:
            doomed = [key for key in self._cqs if key[0] in topics]
            for key in doomed:
                self._cqs.pop(key).destroy()
            if doomed:
                self._queues_replaced()
        for topic in {key[0] for key in doomed}:
            with contextlib.suppress(OSError):
                os.rmdir(os.path.join(self.config.consume_queue_dir, topic))
        return len(doomed)

    def get_min_offset(self, topic: str, queue_id: int) -> int:
        cq = self._cqs.get((topic, queue_id))
        return cq.min_offset if cq is not None else 0

    def get_max_offset(self, topic: str, queue_id: int) -> int:
        cq = self._cqs.get((topic, queue_id))
        return cq.max_offset if cq is not None else 0

    def nothing_at(self, topic: str, queue_id: int, offset: int) -> bool:
        """Whether :meth:`get_messages` from ``offset`` would find nothing there yet, and say so with a
        status a pull answers PULL_NOT_FOUND for: the queue's end (``OFFSET_OVERFLOW_ONE``), or offset 0 of
        an empty or absent queue. Decided from the queue's offsets alone, as :func:`check_offset` decides
        it first, so a long-polling pull at its queue's end is parked without a read."""
        cq = self._cqs.get((topic, queue_id))
        if cq is None:
            return offset == 0
        max_offset = cq.max_offset
        if max_offset == 0:
            return offset == 0
        return offset == max_offset and offset >= cq.min_offset

    def consume_queue_units(
        self, topic: str, queue_id: int, index: int, count: int
    ) -> tuple[int, int, list[tuple[int, int, int]] | None] | None:
        cq = self._cqs.get((topic, queue_id))
        if cq is None:
            return None
        min_off, max_off = cq.min_offset, cq.max_offset
        view = cq.units_from(index) if min_off <= index < max_off else None
        if view is None:
            return min_off, max_off, None
        return min_off, max_off, list(itertools.islice(UNIT.iter_unpack(view), max(count, 0)))

    def get_messages(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        tag_filter: Container[int] | None = None,
        *,
        defer_heal: bool = False,
        healing: bool = True,
    ) -> GetResult:
        """Read up to ``max_count`` messages from ``offset``, as RocketMQ's ``getMessage`` does.

        ``tag_filter`` holds the tag hash codes a subscription accepts (``None``: all). ``group`` is
        accepted for API parity (the broker's stats); the store does not use it. A unit that does not
        point at its record makes the queue rebuild from the CommitLog before the read is answered
        (``healing=False``: skip such units, logged at ERROR; the read after a rebuild). With
        ``defer_heal`` the read raises :class:`DamagedUnitError` instead, so a caller on an event loop can
        run :meth:`heal` (which may walk the CommitLog for seconds) in a worker thread and read again.
        """
        cq = self._cqs.get((topic, queue_id))
        if cq is None:
            return GetResult(GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, next_begin_offset=0)
        min_off, max_off = cq.min_offset, cq.max_offset
        res = GetResult(GetMessageStatus.NO_MATCHED_MESSAGE, min_offset=min_off, max_offset=max_off)
        bad = check_offset(offset, min_off, max_off)
        if bad is not None:
            res.status, res.next_begin_offset = bad
            return res
        units = cq.units_from(offset)
        if units is None:
            res.status = GetMessageStatus.OFFSET_FOUND_NULL
            res.next_begin_offset = cq.roll_next_file(offset)
            return res
        try:
            select_units(
                res,
                UNIT.iter_unpack(units),
                offset,
                max_count,
                tag_filter,
                # (built here, not by Healer.reader: an interpreted call per read)
                UnitReader(
                    self.commit_log,
                    cq,
                    not self.read_only and healing and (topic, queue_id) not in self.healer.unhealable,
                    self._crc_checked_from,
                    self.set_aside_read,
                ),
                self.commit_log.roll_next_file,
                max_bytes=self.config.max_transfer_bytes_on_message_in_memory,
                max_messages=self.config.max_transfer_count_on_message_in_memory,
            )
        except DamagedUnitError as e:  # rebuild the queue from the CommitLog, then read again
            if defer_heal:
                raise
            self.heal(e)
            return self.get_messages(group, topic, queue_id, offset, max_count, tag_filter, healing=False)
        return res

    def heal(self, damage: DamagedUnitError) -> None:
        """Heal the queue a read found damaged, from the CommitLog, under the put lock (puts wait; reads of
        other queues do not). Safe from any thread; see :meth:`store.heal.Healer.heal_read`."""
        self.healer.heal_read(damage)

    def get_store_timestamp(self, topic: str, queue_id: int, offset: int) -> int:
        """Store time of the message at a queue offset; -1 if there is none."""
        cq = self._cqs.get((topic, queue_id))
        unit = cq.get_unit(offset) if cq is not None else None
        if unit is None:
            return -1
        try:
            return self.commit_log.store_timestamp_at(unit[0])
        except CorruptRecordError:
            return -1

    def search_offset_by_timestamp(self, topic: str, queue_id: int, timestamp: int) -> int:
        """Queue offset of the first message stored at ``timestamp``, else the nearest one (see
        :func:`store.api.search_by_timestamp`)."""
        cq = self._cqs.get((topic, queue_id))
        if cq is None:
            return 0
        return search_by_timestamp(
            cq.min_offset,
            cq.max_offset - 1,
            lambda q: self.get_store_timestamp(topic, queue_id, q),
            timestamp,
        )

    def get_earliest_message_time(self, topic: str | None = None, queue_id: int = 0) -> int:
        """Store time of the oldest message in the store (or in one queue); -1 if empty."""
        if topic is not None:
            return self.get_store_timestamp(topic, queue_id, self.get_min_offset(topic, queue_id))
        try:
            return self.commit_log.store_timestamp_at(self.commit_log.min_offset)
        except CorruptRecordError:
            return -1

    def look_message_by_offset(self, phys_offset: int) -> SelectedMessage | None:
        """The record at a CommitLog offset (size from its TOTALSIZE); ``None`` outside the log.

        Raises :class:`CorruptRecordError` when no valid record starts there, and its
        :class:`DamagedRecordError` for a record that does but is damaged: one set aside, or one whose body
        CRC fails, which is set aside here as a pull's read does (:meth:`set_aside_read`: a quarantine, an
        ERROR) when its extent is known (:meth:`CommitLog.damaged_extent_at`; a damaged TOTALSIZE may not
        be trusted to say what to copy).
        """
        cl = self.commit_log
        if 0 <= self.held_from <= phys_offset:  # a slave's unchecked record: not served (nor looked into)
            return None
        mf = cl.files.find_file(phys_offset)
        path = mf.path if mf is not None else ""
        if cl.set_aside and phys_offset in cl.set_aside:
            raise DamagedRecordError(path, phys_offset, "set aside earlier", quarantined=True)
        raw = cl.read_record(phys_offset)
        if raw is None:
            return None
        sel = SelectedMessage(phys_offset, len(raw), raw, path=path)
        try:
            _ = sel.stored  # validate now (its body as stored): a corrupt record raises, not returned
        except CorruptRecordError as e:
            size = cl.damaged_extent_at(phys_offset)
            if size is None:  # no record starts here
                raise
            if size:
                self.set_aside_read(path, phys_offset, size, e.reason)
            else:
                log.error(
                    "a lookup found the record at CommitLog offset %d damaged (%s) but not its extent: "
                    "not set aside (store verify reports it)",
                    phys_offset,
                    e,
                )
            raise DamagedRecordError(
                path, phys_offset, e.reason, quarantined=phys_offset in cl.set_aside
            ) from None
        return sel

    def look_message_by_msg_id(self, msg_id: str) -> SelectedMessage | None:
        """The record an offset msgId points at (the address part is not checked against this store)."""
        _host, offset = decode_msg_id(msg_id)
        return self.look_message_by_offset(offset)

    def query_message(self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int) -> QueryResult:
        """Messages of ``topic`` whose KEYS contain ``key`` or whose UNIQ_KEY is ``key``
        (docs/store-format.md §index-query).

        The index only stores hashes, so every hit is read back and its topic and keys compared.
        """
        max_num = min(max_num, self.config.max_msgs_num_batch)
        offsets = sorted(set(self.index.query(f"{topic}#{key}", max_num, begin_ms, end_ms)))
        out: list[SelectedMessage] = []
        damaged: list[int] = []
        for off in offsets:
            try:
                sel = self.look_message_by_offset(off)
            except DamagedRecordError:  # set aside (an ERROR said so): the hash may be the key's
                damaged.append(off)
                continue
            except CorruptRecordError as e:
                log.warning("index entry points at a bad record: %s", e)
                continue
            if sel is None:
                continue
            m = sel.message
            if m.topic == topic and (key in m.keys or m.uniq_key == key):
                out.append(sel)
        ts, phy = self.index.last_update
        return QueryResult(out, ts, phy, damaged)
