"""The ``rocketmq-commitlog`` PySpark data source: byte-range splits of CommitLog files.

Split boundaries. A split must start at a record start, and none is recorded anywhere for
every record (ConsumeQueues miss records that were never dispatched, such as a crashed
broker's tail, and a first pass over the data would read every byte twice). Every record
carries its own PHYSICALOFFSET at byte 28, so the driver *probes*: from each target cut
point it searches forward for the message magic code at ``p + 4`` whose PHYSICALOFFSET equals
``file start + p`` and whose TOTALSIZE leads to another record header (or the file end). That
costs a few KiB of reading per split. Each task then walks the TOTALSIZE chain of its range
and must land exactly on the next split's start; if it does not, the boundary was not a real
record and the task fails with :class:`~store.errors.CorruptRecordError` instead of
returning wrong rows. Only the last split of a file may end early (blank filler or the end of
the written data).

Whole-file readers (``binaryFiles``) hold a 1 GiB file as one value; here a task maps its
file and touches only its own range.

Pushdown. ``topic = / IN`` and ``store_timestamp`` comparisons are taken by the reader and
applied per batch right after the fixed fields are gathered, before properties, keys, hosts and
bodies are built. Files are not skipped by time: store timestamps only rise while the broker's
clock does, and a stepped-back clock would make such pruning drop records silently.
"""

from __future__ import annotations

import itertools
import logging
import mmap
import os
import re
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)

from mqctl.spark import FORMAT_NAME
from mqctl.spark.decode import RecordFilter, batches, scan, spark_ddl
from store import BLANK_MAGIC_CODE, CorruptRecordError, dledger, inspect

log = logging.getLogger(__name__)

DEFAULT_SPLIT_BYTES = 64 << 20
_PROBE_CHUNK = 1 << 20
_MAGIC = re.compile(rb"\xda\xa3\x20[\xa7\xab]")
_RECORD_HEAD = struct.Struct(">ii")
_PHYS = struct.Struct(">q")
_NAME = re.compile(r"^\d{20}$")
_DLEDGER_ENTRY = dledger.CURRENT_MAGIC.to_bytes(4, "big")  # a DLedger data file starts with an entry


@dataclass(frozen=True)
class CommitLogFile:
    path: str
    base_offset: int
    size: int
    data_estimate: int
    """Bytes up to the first hole of a sparse, preallocated file (its size where holes are unknown)."""
    entry_header: int = 0
    """A DLedger data file's entry header before each record (:data:`store.dledger.BODY_OFFSET`)."""


@dataclass(frozen=True)
class Split(InputPartition):
    """Bytes ``[start, end)`` of one CommitLog file; ``start`` is a verified record start."""

    path: str
    base_offset: int
    start: int
    end: int
    last_in_file: bool
    data_end: int
    """Where the file's written data probably ends (first hole); only bounds the prefault."""
    entry_header: int = 0

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class ReadTask(InputPartition):
    """The splits one Spark task reads in order: small files share a task, so a store of a few
    MiB is one task (one Python worker) instead of one per file."""

    splits: tuple[Split, ...]

    @property
    def size(self) -> int:
        return sum(s.size for s in self.splits)


def commitlog_dir(store: str | os.PathLike[str]) -> Path:
    """The CommitLog directory of a store root (or the CommitLog directory itself)."""
    root = Path(store)
    if root.is_dir() and inspect.dledger_member(root) is not None:  # a DLedger-mode store
        return inspect.layout(root).commitlog_dir
    if (root / "commitlog").is_dir():
        return root / "commitlog"
    if root.is_dir() and any(_NAME.match(p.name) for p in root.iterdir()):
        return root
    raise FileNotFoundError(2, "no CommitLog under this store directory", str(root))


def _data_estimate(fd: int, size: int) -> int:
    try:
        return min(size, os.lseek(fd, 0, os.SEEK_HOLE))
    except OSError:  # no sparse-file support: assume the whole file holds data
        return size


def list_files(store: str | os.PathLike[str]) -> list[CommitLogFile]:
    """CommitLog files in offset order, skipping preallocated files that hold no record yet."""
    out = []
    for path in sorted(p for p in commitlog_dir(store).iterdir() if _NAME.match(p.name)):
        with open(path, "rb") as f:
            head = f.read(8)
            size = os.fstat(f.fileno()).st_size
            estimate = _data_estimate(f.fileno(), size)
        entry_header = dledger.BODY_OFFSET if head[:4] == _DLEDGER_ENTRY else 0
        if entry_header:
            with open(path, "rb") as f:
                f.seek(entry_header)
                head = f.read(8)
        if len(head) < 8 or not _MAGIC.match(head[4:]):
            if head.strip(b"\0"):  # a never-written (preallocated) file is all zeros; anything else is odd
                log.warning("skipping %s: it does not start with a record", path)
            continue
        out.append(CommitLogFile(str(path), int(path.name), size, estimate, entry_header))
    return out


def _is_record_start(mm: mmap.mmap, base: int, pos: int, size: int) -> bool:
    """Magic at +4, own offset at +28, and TOTALSIZE leading to a plausible next header."""
    if pos + 36 > size or not _MAGIC.match(mm, pos + 4):
        return False
    total = _RECORD_HEAD.unpack_from(mm, pos)[0]
    if total < 91 or pos + total > size or _PHYS.unpack_from(mm, pos + 28)[0] != base + pos:
        return False
    nxt = pos + total
    if nxt + 8 > size:
        return True
    next_total, next_magic = _RECORD_HEAD.unpack_from(mm, nxt)
    if next_magic == BLANK_MAGIC_CODE:
        return next_total == size - nxt
    if _MAGIC.match(mm, nxt + 4):
        return nxt + 36 <= size and _PHYS.unpack_from(mm, nxt + 28)[0] == base + nxt
    return next_total == 0 and next_magic == 0  # the end of the written data


def _probe(mm: mmap.mmap, base: int, start: int, stop: int, size: int) -> int | None:
    """The first verified record start in ``[start, stop)``, reading ``_PROBE_CHUNK`` at a time."""
    pos = start
    while pos < stop:
        chunk_end = min(pos + _PROBE_CHUNK, stop)
        for m in _MAGIC.finditer(mm, pos + 4, min(chunk_end + 4, size)):
            candidate = m.start() - 4
            if candidate >= chunk_end:
                break
            if _is_record_start(mm, base, candidate, size):
                return candidate
        pos = chunk_end
    return None


def plan_splits(files: Sequence[CommitLogFile], *, partitions: int | None = None,
                split_bytes: int = DEFAULT_SPLIT_BYTES) -> list[Split]:  # fmt: skip
    """Cut every file into ranges of about ``split_bytes`` (or ``partitions`` ranges in all)."""
    split_bytes = split_target(files, partitions, split_bytes)
    out: list[Split] = []
    for f in files:
        cuts = [0]
        if f.entry_header:  # records in DLedger entries: a file is one split (no probing for entry starts)
            out.append(Split(f.path, f.base_offset, 0, f.size, True, f.data_estimate, f.entry_header))
            continue
        with open(f.path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            target = split_bytes
            while target < f.data_estimate:
                found = _probe(mm, f.base_offset, target, min(target + split_bytes, f.data_estimate), f.size)
                if found is not None and found > cuts[-1]:
                    cuts.append(found)
                target += split_bytes
        cuts.append(f.size)
        out.extend(
            Split(f.path, f.base_offset, a, b, last_in_file=i == len(cuts) - 2, data_end=f.data_estimate)
            for i, (a, b) in enumerate(itertools.pairwise(cuts))
        )
    return out


def split_target(files: Sequence[CommitLogFile], partitions: int | None, split_bytes: int) -> int:
    """Bytes per task: ``split_bytes``, or the data divided into ``partitions`` tasks."""
    return max(4096, -(-sum(f.data_estimate for f in files) // partitions)) if partitions else split_bytes


def plan_tasks(files: Sequence[CommitLogFile], *, partitions: int | None = None,
               split_bytes: int = DEFAULT_SPLIT_BYTES) -> list[ReadTask]:  # fmt: skip
    """The splits packed in offset order into tasks of about ``split_bytes`` of data each: a split
    joins the task its data's midpoint falls in, so ``partitions`` tasks come out as asked."""
    target = split_target(files, partitions, split_bytes)
    tasks: dict[int, list[Split]] = {}
    done = 0
    for split in plan_splits(files, partitions=partitions, split_bytes=split_bytes):
        data = max(0, min(split.end, split.data_end) - split.start)  # a preallocated tail costs nothing
        tasks.setdefault((done + data // 2) // target, []).append(split)
        done += data
    return [ReadTask(tuple(t)) for t in tasks.values()]


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _micros(value: Any) -> int | None:
    """Exact epoch microseconds of a pushed timestamp literal (PySpark passes naive local time)."""
    if not isinstance(value, datetime):
        return None
    return (value.astimezone(UTC) - _EPOCH) // timedelta(microseconds=1)


_MADV_POPULATE_READ = 22  # Linux 5.14+; not exported by the mmap module of Python 3.11


def _prefault(mm: mmap.mmap, start: int, length: int) -> None:
    """Map the split's pages in one call: the decoder's gathers would otherwise fault page by page."""
    aligned = start - start % mmap.PAGESIZE
    try:
        mm.madvise(_MADV_POPULATE_READ, aligned, length + start - aligned)
    except OSError:  # older kernel: fall back to read-ahead hints
        mm.madvise(mmap.MADV_SEQUENTIAL)


def read_split(
    split: Split, *, with_body: bool = False, record_filter: RecordFilter | None = None,
    batch_rows: int = 32768,
) -> Iterator[pa.RecordBatch]:  # fmt: skip
    """Decode one split; fails if its record chain does not end where the next split starts."""
    name = Path(split.path).name
    with open(split.path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        _prefault(mm, split.start, max(0, min(split.end, split.data_end) - split.start))
        buf = np.frombuffer(mm, dtype=np.uint8, count=split.end - split.start, offset=split.start)
        try:
            found = scan(buf, split.entry_header)
            if found.reason != "end" and not split.last_in_file:
                raise CorruptRecordError(
                    split.path, split.base_offset + split.start + found.stop,
                    f"record chain stops ({found.reason}) before the next split at {split.end}",
                )  # fmt: skip
            if found.reason == "invalid":
                log.warning("%s: data ends at %d: %s", split.path, split.start + found.stop, found.detail)
            base = split.base_offset + split.start
            try:
                yield from batches(
                    buf, found, base, name, with_body=with_body, record_filter=record_filter,
                    batch_rows=batch_rows,
                )  # fmt: skip
            except CorruptRecordError as exc:
                raise exc.located(split.path, exc.offset) from None
        finally:
            del buf  # release the export before the map closes


class CommitLogReader(DataSourceReader):
    """Plans splits on the driver and decodes them in the tasks; pushes topic and store-time filters."""

    def __init__(self, store: str, *, with_body: bool, partitions: int | None, split_bytes: int) -> None:
        self.store = store
        self.with_body = with_body
        self.partitions_wanted = partitions
        self.split_bytes = split_bytes
        self.record_filter = RecordFilter()

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        """Take ``topic = / IN`` and ``store_timestamp`` comparisons; hand the rest back to Spark."""
        topics = self.record_filter.topics
        lo, hi = self.record_filter.store_from_us, self.record_filter.store_to_us
        for flt in filters:
            column = getattr(flt, "attribute", ("",))
            if column == ("topic",) and isinstance(flt, EqualTo | In):
                values = (flt.value,) if isinstance(flt, EqualTo) else tuple(flt.value)
                if all(isinstance(v, str) for v in values):
                    wanted = frozenset(values)
                    topics = wanted if topics is None else topics & wanted
                    continue
            elif column == ("store_timestamp",) and (us := _micros(getattr(flt, "value", None))) is not None:
                if isinstance(flt, GreaterThan | GreaterThanOrEqual):
                    bound = us + 1 if isinstance(flt, GreaterThan) else us
                    lo = bound if lo is None else max(lo, bound)
                    continue
                if isinstance(flt, LessThan | LessThanOrEqual):
                    bound = us - 1 if isinstance(flt, LessThan) else us
                    hi = bound if hi is None else min(hi, bound)
                    continue
            yield flt
        self.record_filter = RecordFilter(topics, lo, hi)

    def partitions(self) -> list[InputPartition]:
        files = list_files(self.store)
        return list(plan_tasks(files, partitions=self.partitions_wanted, split_bytes=self.split_bytes))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, ReadTask):  # Spark's single placeholder when there are no splits
            return iter(())
        return itertools.chain.from_iterable(
            read_split(s, with_body=self.with_body, record_filter=self.record_filter)
            for s in partition.splits
        )


def _flag(options: dict[str, str], name: str) -> bool:
    return options.get(name, "false").strip().lower() in ("1", "true", "yes")


class CommitLogDataSource(DataSource):
    """``spark.read.format("rocketmq-commitlog").option("with_body", "true").load(STORE_DIR)``.

    Options (case-insensitive, as Spark passes them lower-cased): ``path`` (store root or its
    ``commitlog`` directory), ``with_body`` (default false), ``partitions`` (total number of
    splits) or ``split_bytes`` (default 64 MiB).
    """

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def _options(self) -> dict[str, str]:
        return {k.lower(): v for k, v in self.options.items()}

    def schema(self) -> str:
        return spark_ddl(_flag(self._options(), "with_body"))

    def reader(self, schema: Any) -> DataSourceReader:
        opts = self._options()
        if "path" not in opts:
            raise ValueError(f"the {FORMAT_NAME} data source needs a path: .load(STORE_DIR)")
        partitions = int(opts["partitions"]) if opts.get("partitions") else None
        return CommitLogReader(
            opts["path"],
            with_body=_flag(opts, "with_body"),
            partitions=partitions,
            split_bytes=int(opts.get("split_bytes", DEFAULT_SPLIT_BYTES)),
        )
