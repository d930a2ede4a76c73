"""Vectorized CommitLog decoder: a byte buffer in, Arrow record batches out.

A per-record ``struct`` loop is too slow under Spark (docs/performance.md), so only the part that is
inherently sequential stays in Python: following the TOTALSIZE chain from one record start to
the next (one ``unpack_from`` per record). Every field is then gathered for all records of a
batch at once with numpy, and properties, tags and keys are parsed with Arrow compute kernels.

The decoder is a pure function over a buffer and the buffer's base physical offset; it knows
nothing about files, splits or Spark (``mqctl.spark.source`` does). Its results are checked
against ``store.record.decode_record``, the per-record reference codec, in the tests.

Column meanings worth stating:

* ``body_size`` is the BODY LENGTH field: the **stored** size (what the BODYCRC covers), which is
  the compressed size when ``sys_flag & 1``. ``body`` (only with ``with_body``) is the
  application body, zlib-inflated when compressed, and ``body_inflated_size`` (with ``body``) its
  length where that differs from ``body_size`` (null otherwise): one meaning of ``body_size``
  across mqctl, the stored size.
* ``record_size`` is TOTALSIZE, the bytes the record takes in the CommitLog.
* ``keys`` is never null: the ``KEYS`` property split on spaces, empty pieces dropped.
* Timestamps are UTC instants (Arrow ``timestamp[us, tz=UTC]``, Spark ``TIMESTAMP``).
"""

from __future__ import annotations

import itertools
import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from store import (
    BLANK_MAGIC_CODE,
    BORNHOST_V6_FLAG,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    STOREHOST_V6_FLAG,
    CorruptRecordError,
    dledger,
    inflate_body,
)

# Column order and types. The Arrow types are exactly what Spark derives from SPARK_DDL
# (``to_arrow_schema(..., timezone="UTC")``); a test holds the two together.
_UTC_US = pa.timestamp("us", tz="UTC")
_KEYS_TYPE = pa.list_(pa.field("element", pa.string()))
_PROPS_TYPE = pa.map_(pa.string(), pa.string())
_FIELDS: tuple[tuple[str, pa.DataType, str], ...] = (
    ("topic", pa.string(), "STRING"),
    ("queue_id", pa.int32(), "INT"),
    ("queue_offset", pa.int64(), "BIGINT"),
    ("physical_offset", pa.int64(), "BIGINT"),
    ("msg_id", pa.string(), "STRING"),
    ("unique_key", pa.string(), "STRING"),
    ("keys", _KEYS_TYPE, "ARRAY<STRING>"),
    ("tags", pa.string(), "STRING"),
    ("flag", pa.int32(), "INT"),
    ("sys_flag", pa.int32(), "INT"),
    ("born_timestamp", _UTC_US, "TIMESTAMP"),
    ("born_host", pa.string(), "STRING"),
    ("store_timestamp", _UTC_US, "TIMESTAMP"),
    ("store_host", pa.string(), "STRING"),
    ("reconsume_times", pa.int32(), "INT"),
    ("body_size", pa.int32(), "INT"),
    ("record_size", pa.int32(), "INT"),
    ("properties", _PROPS_TYPE, "MAP<STRING, STRING>"),
    ("file", pa.string(), "STRING"),
)
_BODY_FIELDS = (("body", pa.binary(), "BINARY"), ("body_inflated_size", pa.int32(), "INT"))


def columns(with_body: bool) -> tuple[tuple[str, pa.DataType, str], ...]:
    """``(name, arrow type, Spark SQL type)`` of every output column; the body columns sit before ``file``."""
    return (*_FIELDS[:-1], *_BODY_FIELDS, _FIELDS[-1]) if with_body else _FIELDS


def arrow_schema(with_body: bool) -> pa.Schema:
    return pa.schema([pa.field(name, typ) for name, typ, _ in columns(with_body)])


def spark_ddl(with_body: bool) -> str:
    return ", ".join(f"{name} {sql}" for name, _, sql in columns(with_body))


@dataclass(frozen=True)
class RecordFilter:
    """Row filters applied before the expensive columns are built (what Spark pushes down).

    ``topics`` is the allowed set (``None``: all); the store-time bounds are inclusive and in
    microseconds since the epoch, the unit of Spark timestamps, so ``>`` and ``<`` map exactly.
    """

    topics: frozenset[str] | None = None
    store_from_us: int | None = None
    store_to_us: int | None = None

    @property
    def active(self) -> bool:
        return self.topics is not None or self.store_from_us is not None or self.store_to_us is not None


@dataclass(frozen=True)
class Scan:
    """The record starts found by :func:`scan` and why the walk stopped.

    ``stop`` is the buffer position where the walk ended; ``reason`` is ``"end"`` (the last record
    ends exactly at the end of the buffer), ``"blank"`` (end-of-file filler: its TOTALSIZE reaches the
    end of the buffer, which a file's last split ends with), ``"eod"`` (anything that is not a
    record: never-written zeros or a torn write, the broker's end of valid data) or ``"invalid"``
    (a record whose field lengths do not add up to its TOTALSIZE, or a blank filler short of the end).
    """

    layout: _Layout
    stop: int
    reason: str
    detail: str = field(default="")

    @property
    def positions(self) -> np.ndarray:
        return self.layout.pos


_HEADER = struct.Struct(">ii")
_MAGICS = (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2)
_MIN_RECORD = 91  # TOTALSIZE with IPv4 hosts and empty body, topic and properties
_HEAD_SIZE = 48


def scan(buf: np.ndarray, entry_header: int = 0) -> Scan:
    """Follow the TOTALSIZE chain from the record at ``buf[0]`` to the end of the buffer.

    This is the only per-record Python loop; it reads 8 bytes per record. Records are then validated in bulk
    (docs/store-format.md §validating-records length rule) and the scan is cut at the first invalid one.
    ``entry_header``: a DLedger CommitLog, each record the body of an entry whose header
    (:mod:`store.dledger`) comes first and is stepped over; DLedger's blank (-1, the rest) ends a file.
    """
    limit = len(buf)
    mv = buf.data
    unpack = _HEADER.unpack_from
    positions: list[int] = []
    append = positions.append
    pos = 0
    reason = "end"
    total = 0
    while pos < limit:
        if pos + 8 > limit:
            reason = "eod"
            break
        rec = pos
        if entry_header:
            dmagic, dsize = unpack(mv, pos)
            if dmagic == dledger.BLANK_MAGIC_CODE:
                reason, total = ("blank" if dsize == limit - pos else "invalid"), dsize
                break
            if dmagic != dledger.CURRENT_MAGIC or dsize <= entry_header or pos + dsize > limit:
                reason = "eod"
                break
            rec = pos + entry_header
        total, magic = unpack(mv, rec)
        if entry_header and (magic not in _MAGICS or total != dsize - entry_header):
            reason = "eod"
            break
        if magic not in _MAGICS or total < _MIN_RECORD or rec + total > limit:
            if magic != BLANK_MAGIC_CODE:
                reason = "eod"
            # the writer's filler fills the rest of its file (docs/store-format.md §end-of-file-filler)
            elif total == limit - pos:
                reason = "blank"
            else:
                reason = "invalid"
            break
        append(rec)
        pos = rec + total
    layout = _Layout.of(buf, np.fromiter(positions, dtype=np.int64, count=len(positions)))
    bad = np.flatnonzero(~layout.valid)
    if bad.size:
        first = int(bad[0])
        cut = layout.take(slice(0, first))
        return Scan(cut, int(layout.pos[first]), "invalid", "field lengths do not match TOTALSIZE")
    if reason == "invalid":
        return Scan(layout, pos, reason, f"blank filler of {total} bytes does not reach the file end")
    return Scan(layout, pos, reason)


def _be(buf: np.ndarray, idx: np.ndarray, width: int, dtype: str) -> np.ndarray:
    """Big-endian integers of ``width`` bytes at each index (indexes are clipped into the buffer)."""
    return np.ascontiguousarray(_rows(buf, idx, width)).view(dtype).ravel()


def _rows(buf: np.ndarray, idx: np.ndarray, width: int) -> np.ndarray:
    """``buf[i : i + width]`` for every index, as an ``(n, width)`` array (one gather, no index matrix)."""
    if len(buf) < width:
        return np.zeros((len(idx), width), dtype=np.uint8)
    windows = np.lib.stride_tricks.sliding_window_view(buf, width)
    return windows[np.clip(idx, 0, len(buf) - width)]


def _field(head: np.ndarray, offset: int, dtype: str) -> np.ndarray:
    """A big-endian field of the fixed record head gathered by :meth:`_Layout.of`."""
    width = np.dtype(dtype).itemsize
    return np.ascontiguousarray(head[:, offset : offset + width]).view(dtype).ravel()


def _gather(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate ``buf[s:s+n]`` for every (s, n): returns (int32 Arrow offsets, bytes)."""
    offsets = np.zeros(len(starts) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    idx = np.repeat(starts - offsets[:-1], lengths) + np.arange(total, dtype=np.int64)
    return offsets.astype(np.int32), buf[idx]


def _strings(offsets: np.ndarray, data: np.ndarray) -> pa.Array:
    """A UTF-8 string array over gathered bytes; invalid UTF-8 is decoded with U+FFFD like the codec."""
    arr = pa.Array.from_buffers(
        pa.string(), len(offsets) - 1, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )
    try:
        arr.validate(full=True)
    except pa.ArrowInvalid:
        raw = data.tobytes()
        bounds = offsets.tolist()
        return pa.array([raw[a:b].decode("utf-8", "replace") for a, b in itertools.pairwise(bounds)])
    return arr


_HEX = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8)


def _hex(offsets: np.ndarray, data: np.ndarray) -> pa.Array:
    """Upper-case hex of each gathered byte string (msgId encoding)."""
    out = np.empty(len(data) * 2, dtype=np.uint8)
    out[0::2] = _HEX[data >> 4]
    out[1::2] = _HEX[data & 0xF]
    return pa.Array.from_buffers(
        pa.string(), len(offsets) - 1, [None, pa.py_buffer(offsets * 2), pa.py_buffer(out)]
    )


def _hosts(buf: np.ndarray, pos: np.ndarray, v6: np.ndarray) -> pa.Array:
    """``ip:port`` strings; each distinct address is formatted once (a store has few producers)."""
    raw = np.zeros((len(pos), 21), dtype=np.uint8)
    raw[:, :8] = _rows(buf, pos, 8)
    if v6.any():
        raw[v6, :20] = _rows(buf, pos[v6], 20)
        raw[v6, 20] = 1
    keys = raw.view("V21").ravel()
    uniq, inverse = np.unique(keys, return_inverse=True)
    text = []
    for key in uniq:
        b = bytes(key)
        if b[20]:
            text.append(
                f"{socket.inet_ntop(socket.AF_INET6, b[:16])}:{int.from_bytes(b[16:20], 'big', signed=True)}"
            )
        else:
            text.append(f"{socket.inet_ntoa(b[:4])}:{int.from_bytes(b[4:8], 'big', signed=True)}")
    return pa.array(text, pa.string()).take(pa.array(inverse.ravel().astype(np.int32)))


@dataclass
class _Layout:
    """Fixed fields and section positions of many records, computed together
    (docs/store-format.md §commitlog-records)."""

    pos: np.ndarray
    head: np.ndarray
    """The first 48 bytes of every record (TOTALSIZE .. BORNTIMESTAMP: fixed positions in every layout)."""
    total: np.ndarray
    sys_flag: np.ndarray
    born_v6: np.ndarray
    store_v6: np.ndarray
    store_ts_pos: np.ndarray
    reconsume_pos: np.ndarray
    body_pos: np.ndarray
    body_len: np.ndarray
    topic_pos: np.ndarray
    topic_len: np.ndarray
    props_pos: np.ndarray
    props_len: np.ndarray
    valid: np.ndarray

    @classmethod
    def of(cls, buf: np.ndarray, pos: np.ndarray) -> _Layout:
        head = _rows(buf, pos, _HEAD_SIZE)
        total = _field(head, 0, ">i4").astype(np.int64)
        magic = _field(head, 4, ">i4")
        sys_flag = _field(head, 36, ">i4")
        born_v6 = (sys_flag & BORNHOST_V6_FLAG) != 0
        store_v6 = (sys_flag & STOREHOST_V6_FLAG) != 0
        store_ts_pos = pos + 48 + np.where(born_v6, 20, 8)
        reconsume_pos = store_ts_pos + 8 + np.where(store_v6, 20, 8)
        end = pos + total
        body_len = _be(buf, reconsume_pos + 12, 4, ">i4").astype(np.int64)
        body_pos = reconsume_pos + 16
        tp = body_pos + body_len
        v2 = magic == MESSAGE_MAGIC_CODE_V2
        topic_len = np.where(v2, _be(buf, tp, 2, ">i2"), _be(buf, tp, 1, "i1")).astype(np.int64)
        topic_pos = tp + np.where(v2, 2, 1)
        props_len = _be(buf, topic_pos + topic_len, 2, ">i2").astype(np.int64)
        props_pos = topic_pos + topic_len + 2
        valid = (
            (body_pos <= end)
            & (body_len >= 0)
            & (tp + 1 <= end)
            & (topic_len >= 0)
            & (props_pos <= end)
            & (props_len >= 0)
            & (props_pos + props_len == end)
        )
        return cls(
            pos, head, total, sys_flag, born_v6, store_v6, store_ts_pos, reconsume_pos, body_pos, body_len,
            topic_pos, topic_len, props_pos, props_len, valid,
        )  # fmt: skip

    def take(self, mask: np.ndarray | slice) -> _Layout:
        return _Layout(*(getattr(self, f)[mask] for f in self.__dataclass_fields__))


def _property(names: pa.Array, values: pa.Array, parent: np.ndarray, n: int, name: str) -> pa.Array:
    """The value of property ``name`` per record (null when absent; the last one wins, like a dict)."""
    hits = np.flatnonzero(pc.equal(names, name).to_numpy(zero_copy_only=False))
    sel = np.full(n, -1, dtype=np.int64)
    sel[parent[hits]] = hits
    return values.take(pa.array(sel, mask=sel < 0))


def _split_keys(keys: pa.Array, n: int) -> pa.Array:
    """``KEYS`` split on single spaces with empty pieces dropped (``store.message.split_keys``)."""
    parts = pc.split_pattern(keys, " ")
    flat = pc.list_flatten(parts)
    parent = pc.list_parent_indices(parts).to_numpy()
    keep = pc.not_equal(flat, "").to_numpy(zero_copy_only=False)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.bincount(parent[keep], minlength=n), out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), flat.filter(pa.array(keep)), type=_KEYS_TYPE)


def _properties(buf: np.ndarray, lay: _Layout) -> tuple[pa.Array, pa.Array, pa.Array, pa.Array]:
    """Properties map plus the TAGS, KEYS (split) and UNIQ_KEY columns, all by Arrow kernels.

    Same rule as ``store.record.decode_properties``: split on ``\\x02``, then on the first
    ``\\x01``; a segment without a name or a value is dropped.
    """
    n = len(lay.pos)
    text = _strings(*_gather(buf, lay.props_pos, lay.props_len))
    segments = pc.split_pattern(text, "\x02")
    parent = pc.list_parent_indices(segments).to_numpy()
    pairs = pc.split_pattern(pc.list_flatten(segments), "\x01", max_splits=1)
    ok = pc.equal(pc.list_value_length(pairs), 2)
    pairs = pairs.filter(ok)
    parent = parent[ok.to_numpy(zero_copy_only=False)]
    names = pc.list_element(pairs, 0)
    values = pc.list_element(pairs, 1)
    ok = pc.and_(pc.not_equal(names, ""), pc.not_equal(values, ""))
    names, values = names.filter(ok), values.filter(ok)
    parent = parent[ok.to_numpy(zero_copy_only=False)]
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.bincount(parent, minlength=n), out=offsets[1:])
    props = pa.MapArray.from_arrays(pa.array(offsets), names, values, type=_PROPS_TYPE)
    tags = _property(names, values, parent, n, PROPERTY_TAGS)
    keys = _split_keys(_property(names, values, parent, n, PROPERTY_KEYS), n)
    uniq = _property(names, values, parent, n, PROPERTY_UNIQ_KEY)
    return props, tags, keys, uniq


def _bodies(buf: np.ndarray, lay: _Layout) -> pa.Array:
    """Application bodies (inflated when compressed); per record, since inflation is per record."""
    mv = buf.data
    out = []
    for start, length, flag in zip(
        lay.body_pos.tolist(), lay.body_len.tolist(), lay.sys_flag.tolist(), strict=True
    ):
        out.append(inflate_body(bytes(mv[start : start + length]), flag))
    return pa.array(out, pa.binary())


def _timestamps(ms: np.ndarray) -> pa.Array:
    return pa.array(ms * 1000, _UTC_US)


def _topics(buf: np.ndarray, lay: _Layout) -> pa.Array:
    return _strings(*_gather(buf, lay.topic_pos, lay.topic_len))


def _file_names(phys: np.ndarray, file_size: int) -> pa.Array:
    """The CommitLog file name (its 20-digit start offset) of each physical offset."""
    starts, inverse = np.unique(phys - phys % file_size, return_inverse=True)
    names = pa.array([f"{int(s):020d}" for s in starts], pa.string())
    return names.take(pa.array(inverse.ravel().astype(np.int32)))


def decode_batch(
    buf: np.ndarray,
    lay: _Layout,
    base_offset: int | None,
    file_name: str | int,
    *,
    with_body: bool = False,
    record_filter: RecordFilter | None = None,
) -> pa.RecordBatch:
    """Decode the records of ``lay`` (a slice of a :class:`Scan`'s layout).

    ``base_offset`` is the physical offset of ``buf[0]``; it is only used to check that each
    record's PHYSICALOFFSET field names its own position (a torn or foreign record does not).
    ``None``: the records were not contiguous in the CommitLog (a pull answer), nothing to check.
    ``file_name`` is the ``file`` column; an int is the broker's CommitLog file size, from which
    each record's file name follows.
    """
    store_ms = _be(buf, lay.store_ts_pos, 8, ">i8")
    topics = _topics(buf, lay)
    if record_filter is not None and record_filter.active:
        keep = np.ones(len(lay.pos), dtype=bool)
        if record_filter.topics is not None:
            keep &= pc.is_in(topics, pa.array(sorted(record_filter.topics), pa.string())).to_numpy(
                zero_copy_only=False
            )
        if record_filter.store_from_us is not None:
            keep &= store_ms * 1000 >= record_filter.store_from_us
        if record_filter.store_to_us is not None:
            keep &= store_ms * 1000 <= record_filter.store_to_us
        if not keep.all():
            lay, store_ms = lay.take(keep), store_ms[keep]
            topics = topics.filter(pa.array(keep))
    pos = lay.pos
    phys = _field(lay.head, 28, ">i8")
    if base_offset is not None and (wrong := np.flatnonzero(phys != pos + base_offset)).size:
        at = int(pos[wrong[0]]) + base_offset
        raise CorruptRecordError(None, at, f"PHYSICALOFFSET field says {int(phys[wrong[0]])}")
    store_host_pos = lay.store_ts_pos + 8
    host_offsets, host_bytes = _gather(buf, store_host_pos, np.where(lay.store_v6, 20, 8))
    phys_hex = _hex(np.arange(0, 8 * len(pos) + 1, 8, dtype=np.int32), phys.astype(">i8").view(np.uint8))
    msg_id = pc.binary_join_element_wise(_hex(host_offsets, host_bytes), phys_hex, "")
    props, tags, keys, uniq = _properties(buf, lay)
    arrays: dict[str, pa.Array] = {
        "topic": topics,
        "queue_id": pa.array(_field(lay.head, 12, ">i4").astype(np.int32)),
        "queue_offset": pa.array(_field(lay.head, 20, ">i8").astype(np.int64)),
        "physical_offset": pa.array(phys.astype(np.int64)),
        "msg_id": msg_id,
        "unique_key": uniq,
        "keys": keys,
        "tags": tags,
        "flag": pa.array(_field(lay.head, 16, ">i4").astype(np.int32)),
        "sys_flag": pa.array(lay.sys_flag.astype(np.int32)),
        "born_timestamp": _timestamps(_field(lay.head, 40, ">i8").astype(np.int64)),
        "born_host": _hosts(buf, pos + 48, lay.born_v6),
        "store_timestamp": _timestamps(store_ms.astype(np.int64)),
        "store_host": _hosts(buf, store_host_pos, lay.store_v6),
        "reconsume_times": pa.array(_be(buf, lay.reconsume_pos, 4, ">i4").astype(np.int32)),
        "body_size": pa.array(lay.body_len.astype(np.int32)),
        "record_size": pa.array(lay.total.astype(np.int32)),
        "properties": props,
        "file": (
            _file_names(phys, file_name)
            if isinstance(file_name, int)
            else pa.repeat(pa.scalar(file_name, pa.string()), len(pos))
        ),
    }
    if with_body:
        body = _bodies(buf, lay)
        inflated = pc.binary_length(body).cast(pa.int32())
        arrays["body"] = body
        arrays["body_inflated_size"] = pc.if_else(
            pc.not_equal(inflated, arrays["body_size"]), inflated, pa.scalar(None, pa.int32())
        )
    schema = arrow_schema(with_body)
    return pa.RecordBatch.from_arrays([arrays[name] for name in schema.names], schema=schema)


def batches(
    buf: np.ndarray,
    found: Scan,
    base_offset: int | None,
    file_name: str | int,
    *,
    with_body: bool = False,
    record_filter: RecordFilter | None = None,
    batch_rows: int = 32768,
    batch_bytes: int = 64 << 20,
) -> Iterator[pa.RecordBatch]:
    """The records of ``found`` as non-empty batches of at most ``batch_rows`` rows and about
    ``batch_bytes`` of records (Arrow's 32-bit offsets cap a batch's bodies at 2 GiB)."""
    ends = np.cumsum(found.layout.total)
    start, n = 0, len(ends)
    while start < n:
        budget = (int(ends[start - 1]) if start else 0) + batch_bytes
        stop = max(start + 1, min(start + batch_rows, int(np.searchsorted(ends, budget, side="right"))))
        batch = decode_batch(
            buf, found.layout.take(slice(start, stop)), base_offset, file_name,
            with_body=with_body, record_filter=record_filter,
        )  # fmt: skip
        if batch.num_rows:
            yield batch
        start = stop


__all__ = [
    "RecordFilter",
    "Scan",
    "arrow_schema",
    "batches",
    "columns",
    "decode_batch",
    "scan",
    "spark_ddl",
]
