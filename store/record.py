"""Pure codecs for CommitLog records, properties, offset message ids and UNIQ_KEY
(docs/store-format.md §commitlog-records).

Every decoder takes a bytes-like buffer and a position, so callers can pass a ``memoryview`` of a
whole memory-mapped file without copying it; only the body, topic and properties are copied out.
Encoders return ``bytes`` ready to be written at the record's physical offset.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from store.errors import CorruptRecordError, UnsupportedCompressionError
from store.message import (
    BLANK_MAGIC_CODE,
    BORNHOST_V6_FLAG,
    COMPRESSED_FLAG,
    COMPRESSION_LZ4,
    COMPRESSION_TYPE_MASK,
    COMPRESSION_ZSTD,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    STOREHOST_V6_FLAG,
    HostAddress,
    Message,
    StoredMessage,
)
from store.names import MAX_TOPIC_LENGTH

Buffer = bytes | bytearray | memoryview
"""Anything the decoders read from: a record, or a whole mapped file viewed without copying."""

NAME_VALUE_SEPARATOR: Final = "\x01"
PROPERTY_SEPARATOR: Final = "\x02"

MAX_PROPERTIES_LENGTH: Final = 32767
#: TOTALSIZE + BLANK magic, written at the end of a full file (docs/store-format.md §end-of-file-filler).
BLANK_HEADER_SIZE: Final = 8

# TOTALSIZE(4) MAGIC(4) BODYCRC(4) QUEUEID(4) FLAG(4) QUEUEOFFSET(8) PHYSICALOFFSET(8) SYSFLAG(4) BORN(8)
_FIXED: Final = struct.Struct(">iiiiiqqiq")
_FIXED_SIZE: Final = _FIXED.size  # 48: BORNHOST starts here
_HEADER: Final = struct.Struct(">ii")
_I64: Final = struct.Struct(">q")
_I32: Final = struct.Struct(">i")
_I16: Final = struct.Struct(">h")
# After BORNHOST: STORETIMESTAMP(8), then STOREHOST; after STOREHOST: RECONSUMETIMES(4) PREPARED(8) BODYLEN(4)
_AFTER_STOREHOST: Final = struct.Struct(">iqi")
# BORNHOST(4s+i) STORETIMESTAMP(q) STOREHOST(4s+i) RECONSUMETIMES(i) PREPARED(q) when both hosts are IPv4
_V4_HOSTS: Final = struct.Struct(">4siq4siiq")
# TOTALSIZE through BODYLEN of a record whose hosts are both IPv4, in one unpack: the nine fixed fields,
# STORETIMESTAMP (9), RECONSUMETIMES (10), PREPARED (11), BODYLEN (12)
_V4_HEAD: Final = struct.Struct(">iiiiiqqiq8xq8xiqi")
_V4_FIELDS: Final = 13

_ENCODERS: dict[tuple[int, int], struct.Struct] = {}

_V4Info = tuple[int, int, str, int, int, int, int, int, dict[str, str]]
_c_v4_info: Callable[[Buffer, int, int], _V4Info | None] | None


def _zlib_crc31(data: Buffer) -> int:
    return zlib.crc32(data) & 0x7FFFFFFF


_crc31: Callable[[Buffer], int]
try:  # the compiled build's parse of an all-IPv4 record and its CRC-32 (_cparse.c); Python's and zlib's without
    from store import _cparse

    _c_v4_info = _cparse.v4_info
    _crc31 = _cparse.crc31
except ImportError:
    _c_v4_info = None
    _crc31 = _zlib_crc31


def _encoder(born_len: int, store_len: int) -> struct.Struct:
    """Struct packing every field from TOTALSIZE through BODY LENGTH for the given host field sizes."""
    s = _ENCODERS.get((born_len, store_len))
    if s is None:
        s = _ENCODERS[(born_len, store_len)] = struct.Struct(f">iiiiiqqiq{born_len}sq{store_len}siqi")
    return s


def record_size(body_len: int, topic_len: int, props_len: int, sys_flag: int = 0, *, v2: bool = False) -> int:
    """TOTALSIZE of a record (docs/store-format.md §commitlog-records length formula; v2 has a 2-byte topic
    length)."""
    born = 20 if sys_flag & BORNHOST_V6_FLAG else 8
    store = 20 if sys_flag & STOREHOST_V6_FLAG else 8
    return 75 + (1 if v2 else 0) + born + store + body_len + topic_len + props_len


def body_crc(body: bytes | memoryview) -> int:
    """BODYCRC: CRC-32 of the stored body bytes masked to 31 bits
    (docs/store-format.md §commitlog-records). The compiled build folds it by PCLMULQDQ where the CPU has it
    (store/_cparse.c: zlib's result, bit for bit, at a fraction of the instructions a byte)."""
    return _crc31(body)


# ---------------------------------------------- properties (docs/store-format.md §properties-and-message-ids)


def encode_properties(props: dict[str, str]) -> bytes:
    """Serialise properties the 4.9.1+ way: ``name\\x01value`` joined by ``\\x02``, no trailing separator.

    ``None`` values are skipped as Java does. Separators inside names or values cannot be represented
    and raise ``ValueError``.
    """
    parts = [f"{k}\x01{v}" for k, v in props.items() if v is not None]
    text = "\x02".join(parts)
    if text.count("\x01") != len(parts) or text.count("\x02") != len(parts) - (1 if parts else 0):
        raise ValueError("a property name or value contains a separator byte (\\x01 or \\x02)")
    return text.encode("utf-8")


def decode_properties(data: Buffer | str) -> dict[str, str]:
    """Parse a properties string by the 4.9.1+ rule, accepting both trailing-separator styles
    (docs/store-format.md §properties-and-message-ids)."""
    text = data if isinstance(data, str) else str(data, "utf-8", "replace")
    out: dict[str, str] = {}
    for seg in text.split(PROPERTY_SEPARATOR):
        if len(seg) < 3:
            continue
        name, sep, value = seg.partition(NAME_VALUE_SEPARATOR)
        if sep and name and value:
            out[name] = value
    return out


# ------------------------------------------- hosts and message ids (docs/store-format.md §offset-message-ids)


#: Hosts encoded and msgId prefixes, memoised: every put encodes its born and store hosts and names its
#: msgId, and a broker sees one store host and one born host per client connection. Dicts, not
#: lru_cache: compiled, a lookup is a dict probe, while an lru_cache call goes through tp_call and its
#: linked list, three of them per send.
_HOSTS: Final[dict[HostAddress, bytes]] = {}
_PREFIXES: Final[dict[HostAddress, str]] = {}
_HOSTS_MAX: Final = 1024


def encode_host(host: HostAddress) -> bytes:
    """4+4 bytes for IPv4, 16+4 for IPv6: address then i32 port."""
    packed = _HOSTS.get(host)
    if packed is None:
        packed = ipaddress.ip_address(host[0]).packed + _I32.pack(host[1])
        if len(_HOSTS) >= _HOSTS_MAX:
            _HOSTS.clear()
        _HOSTS[host] = packed
    return packed


def decode_host(buf: Buffer, pos: int, v6: bool) -> HostAddress:
    """Inverse of :func:`encode_host` at ``pos`` in ``buf``."""
    if v6:
        return socket.inet_ntop(socket.AF_INET6, bytes(buf[pos : pos + 16])), _I32.unpack_from(buf, pos + 16)[
            0
        ]
    return socket.inet_ntoa(bytes(buf[pos : pos + 4])), _I32.unpack_from(buf, pos + 4)[0]


def create_msg_id(store_host: HostAddress, physical_offset: int) -> str:
    """Offset message id: upper-case hex of store address, port and physical offset."""
    return (encode_host(store_host) + _I64.pack(physical_offset)).hex().upper()


def msg_id_prefix(store_host: HostAddress) -> str:
    """The constant hex prefix of every msgId of one store host (appending uses it per message)."""
    prefix = _PREFIXES.get(store_host)
    if prefix is None:
        prefix = encode_host(store_host).hex().upper()
        if len(_PREFIXES) >= _HOSTS_MAX:
            _PREFIXES.clear()
        _PREFIXES[store_host] = prefix
    return prefix


def decode_msg_id(msg_id: str) -> tuple[HostAddress, int]:
    """``msgId`` → ``((ip, port), physical_offset)``: 32 hex chars mean IPv4, otherwise IPv6."""
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError as e:
        raise ValueError(f"not a message id: {msg_id!r}") from e
    if len(raw) not in (16, 28):
        raise ValueError(f"not a message id (length {len(msg_id)}): {msg_id!r}")
    v6 = len(raw) == 28
    host = decode_host(raw, 0, v6)
    return host, _I64.unpack_from(raw, 20 if v6 else 8)[0]


@dataclass(frozen=True, slots=True)
class UniqKey:
    """The parts of a client-generated UNIQ_KEY (docs/store-format.md §uniq_key)."""

    ip: str
    pid: int
    class_loader_hash: int
    time_in_month_ms: int
    counter: int


def decode_uniq_key(key: str) -> UniqKey:
    """Split a UNIQ_KEY into ip, pid, class-loader hash, ms since month start and counter."""
    raw = bytes.fromhex(key)
    if len(raw) not in (16, 28):
        raise ValueError(f"not a UNIQ_KEY (length {len(key)}): {key!r}")
    n = len(raw) - 12
    ip = str(ipaddress.ip_address(raw[:n]))
    pid, clh, t, counter = struct.unpack_from(">HiIH", raw, n)
    return UniqKey(ip, pid, clh, t, counter)


# ---------------------------------------------------------------- bodies (docs/store-format.md §compression)


#: The most a compressed body may inflate to. A producer checks maxMessageSize (4 MiB by default) on the
#: body before compressing it, so a real one is far below; a few MiB of zeros would inflate to gigabytes
#: in whoever opens the message (a 5.x consumer's receive and a send-back in the broker, mqctl's tools).
MAX_INFLATED_BODY: Final = 64 * 1024 * 1024


def inflate_body(body: bytes, sys_flag: int, limit: int = MAX_INFLATED_BODY) -> bytes:
    """The application body: inflated when sysFlag bit 0 is set (type 0 and 3 are zlib), never past
    ``limit`` bytes (raises UnsupportedCompressionError)."""
    if not sys_flag & COMPRESSED_FLAG:
        return body
    kind = sys_flag & COMPRESSION_TYPE_MASK
    if kind == COMPRESSION_LZ4:
        try:
            import lz4.frame  # type: ignore[import-not-found]
        except ImportError as e:
            raise UnsupportedCompressionError("LZ4 body needs the 'lz4' package") from e
        raw = bytes(lz4.frame.LZ4FrameDecompressor().decompress(body, max_length=limit + 1))
    elif kind == COMPRESSION_ZSTD:
        try:
            import zstandard  # type: ignore[import-not-found]
        except ImportError as e:
            raise UnsupportedCompressionError("ZSTD body needs the 'zstandard' package") from e
        raw = bytes(zstandard.ZstdDecompressor().stream_reader(body).read(limit + 1))
    else:
        inflater = zlib.decompressobj()
        raw = inflater.decompress(body, limit + 1)
        if len(raw) <= limit and not inflater.eof:  # as zlib.decompress says of a cut stream
            raise zlib.error("Error -5 while decompressing data: incomplete or truncated stream")
    if len(raw) > limit:
        raise UnsupportedCompressionError(
            f"a compressed body of {len(body)} bytes inflates past {limit} bytes (a decompression bomb?)"
        )
    return raw


# ---------------------------------------------------------- records (docs/store-format.md §commitlog-records)


def topic_field(topic: str) -> bytes:
    """TOPIC LENGTH (i8) + TOPIC bytes of a v1 record.

    Not cached: a cache hit costs more than the encoding once sends go round thousands of topics, the
    cache's entry being one more cold read per send.
    """
    raw = topic.encode("utf-8")
    if not 0 < len(raw) <= MAX_TOPIC_LENGTH:
        raise ValueError(f"topic length {len(raw)} is outside 1..{MAX_TOPIC_LENGTH}")
    return bytes((len(raw),)) + raw


def encode_record(
    msg: Message,
    *,
    queue_offset: int,
    physical_offset: int,
    store_timestamp: int,
    store_host: HostAddress,
    properties: bytes | None = None,
) -> bytes:
    """Encode ``msg`` as a v1 CommitLog record.

    The store assigns ``queue_offset``, ``physical_offset`` and ``store_timestamp`` at append time;
    ``properties`` may be passed pre-encoded. The IPv6 sysFlag bits are set from the host
    addresses, as the broker does.
    """
    return encode_record_parts(
        msg,
        encode_properties(msg.properties) if properties is None else properties,
        encode_host(msg.born_host),
        encode_host(msg.store_host or store_host),
        topic_field(msg.topic),
        queue_offset,
        physical_offset,
        store_timestamp,
    )


def encode_record_parts(
    msg: Message,
    props: bytes,
    born: bytes,
    store: bytes,
    topic: bytes,
    queue_offset: int,
    physical_offset: int,
    store_timestamp: int,
) -> bytes:
    """:func:`encode_record` with the variable fields already encoded (the append hot path).

    ``born``/``store`` come from :func:`encode_host`, ``topic`` from :func:`topic_field`.
    """
    sys_flag = msg.sys_flag & ~(BORNHOST_V6_FLAG | STOREHOST_V6_FLAG)
    born_len = len(born)
    store_len = len(store)
    if born_len == 20:
        sys_flag |= BORNHOST_V6_FLAG
    if store_len == 20:
        sys_flag |= STOREHOST_V6_FLAG
    body = msg.body
    head = _encoder(born_len, store_len).pack(
        74 + born_len + store_len + len(body) + len(topic) + len(props),
        MESSAGE_MAGIC_CODE,
        _crc31(body),
        msg.queue_id,
        msg.flag,
        queue_offset,
        physical_offset,
        sys_flag,
        msg.born_timestamp,
        born,
        store_timestamp,
        store,
        msg.reconsume_times,
        msg.prepared_transaction_offset,
        len(body),
    )
    return b"".join((head, body, topic, _I16.pack(len(props)), props))


def encode_blank(size: int) -> bytes:
    """The 8-byte end-of-file filler header (TOTALSIZE = bytes left in the file, BLANK magic)."""
    return _HEADER.pack(size, BLANK_MAGIC_CODE)


def read_header(buf: Buffer, pos: int) -> tuple[int, int]:
    """``(TOTALSIZE, MAGICCODE)`` at ``pos``."""
    return _HEADER.unpack_from(buf, pos)  # type: ignore[return-value]


@dataclass(slots=True, init=False)
class RecordInfo:
    """What dispatch needs from a record, parsed without decoding hosts or copying the body."""

    commit_log_offset: int
    size: int
    topic: str
    queue_id: int
    queue_offset: int
    sys_flag: int
    store_timestamp: int
    prepared_transaction_offset: int
    properties: dict[str, str]

    def __init__(  # written out: mypyc compiles it (a dataclass's generated one runs interpreted)
        self,
        commit_log_offset: int,
        size: int,
        topic: str,
        queue_id: int,
        queue_offset: int,
        sys_flag: int,
        store_timestamp: int,
        prepared_transaction_offset: int,
        properties: dict[str, str],
    ) -> None:
        self.commit_log_offset = commit_log_offset
        self.size = size
        self.topic = topic
        self.queue_id = queue_id
        self.queue_offset = queue_offset
        self.sys_flag = sys_flag
        self.store_timestamp = store_timestamp
        self.prepared_transaction_offset = prepared_transaction_offset
        self.properties = properties

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> str | None:
        return self.properties.get(PROPERTY_KEYS)

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(PROPERTY_UNIQ_KEY)


_Layout = tuple[tuple[int, ...], int, int, int, int, int, int, int]


def _layout(buf: Buffer, pos: int, limit: int, check_crc: bool) -> _Layout:
    """Validate the record at ``pos`` (docs/store-format.md §validating-records) and return its fixed fields
    and section positions.

    Returns ``(fixed, store_ts_pos, reconsume_pos, body_pos, body_len, topic_pos, topic_len,
    props_pos)``; the properties length sits just before ``props_pos``. ``fixed`` holds the nine fixed
    fields, and for a record whose hosts are both IPv4 (:data:`_V4_FIELDS` long) STORETIMESTAMP,
    RECONSUMETIMES, PREPARED and BODYLEN after them. Raises :class:`CorruptRecordError` (with the
    buffer position) for anything a Java broker would stop at.
    """
    if pos + _FIXED_SIZE > limit:
        raise CorruptRecordError(None, pos, "record header runs past the end of the file")
    # the common all-IPv4 layout read through BODYLEN at once (the extra fields are dropped otherwise)
    fixed = _V4_HEAD.unpack_from(buf, pos) if pos + _V4_HEAD.size <= limit else _FIXED.unpack_from(buf, pos)
    total, magic = fixed[0], fixed[1]
    if magic != MESSAGE_MAGIC_CODE and magic != MESSAGE_MAGIC_CODE_V2:
        raise CorruptRecordError(None, pos, f"bad magic code 0x{magic & 0xFFFFFFFF:08X}")
    if total <= 0 or pos + total > limit:
        raise CorruptRecordError(None, pos, f"total size {total} does not fit in the file")
    sys_flag = fixed[7]
    if sys_flag & (BORNHOST_V6_FLAG | STOREHOST_V6_FLAG) and len(fixed) == _V4_FIELDS:
        fixed = fixed[:9]
    born_len = 20 if sys_flag & BORNHOST_V6_FLAG else 8
    store_len = 20 if sys_flag & STOREHOST_V6_FLAG else 8
    store_ts_pos = pos + _FIXED_SIZE + born_len
    p = store_ts_pos + 8 + store_len
    end = pos + total
    if p + 16 > end:
        raise CorruptRecordError(None, pos, "record too short for its host fields")
    body_len = fixed[12] if len(fixed) == _V4_FIELDS else _I32.unpack_from(buf, p + 12)[0]
    body_pos = p + 16
    if body_len < 0 or body_pos + body_len + 1 > end:
        raise CorruptRecordError(None, pos, f"body length {body_len} does not fit in the record")
    tp = body_pos + body_len
    if magic == MESSAGE_MAGIC_CODE:
        topic_len = buf[tp]
        if topic_len > 127:  # the field is a signed byte
            topic_len -= 256
        topic_pos = tp + 1
    else:
        topic_len = _I16.unpack_from(buf, tp)[0]
        topic_pos = tp + 2
    if topic_len < 0 or topic_pos + topic_len + 2 > end:
        raise CorruptRecordError(None, pos, f"topic length {topic_len} does not fit in the record")
    props_len = _I16.unpack_from(buf, topic_pos + topic_len)[0]
    props_pos = topic_pos + topic_len + 2
    if props_len < 0 or props_pos + props_len != end:
        raise CorruptRecordError(None, pos, f"total size {total} does not match the field lengths")
    if check_crc and body_len > 0:
        crc = _crc31(buf[body_pos : body_pos + body_len])
        if crc != fixed[2]:
            raise CorruptRecordError(None, pos, f"body CRC {crc} != stored {fixed[2]}")
    return fixed, store_ts_pos, p, body_pos, body_len, topic_pos, topic_len, props_pos


def check_record(buf: Buffer, pos: int, limit: int, *, check_crc: bool) -> tuple[int, int]:
    """Validate the record at ``pos`` as recovery does (docs/store-format.md §validating-records) without
    decoding it: ``(TOTALSIZE, STORETIMESTAMP)``. Normal recovery checks every record of the last files and
    needs nothing else; not decoding topic and properties makes it far faster."""
    fixed, ts_pos, *_ = _layout(buf, pos, limit, check_crc)
    return fixed[0], fixed[9] if len(fixed) == _V4_FIELDS else _I64.unpack_from(buf, ts_pos)[0]


def body_crc_problem(buf: Buffer, pos: int, size: int) -> str | None:
    """Why the ``size``-byte record at ``pos`` must not be served as good (its body fails BODYCRC, or the
    body does not fit), else ``None``. The read path's check: a pull sends records as they are, and
    this costs a fraction of :func:`check_record` (which a pull of thousands per second cannot pay)."""
    if size < _FIXED_SIZE:
        return f"record size {size} is too small"
    sys_flag = _I32.unpack_from(buf, pos + 36)[0]
    hosts = (20 if sys_flag & BORNHOST_V6_FLAG else 8) + (20 if sys_flag & STOREHOST_V6_FLAG else 8)
    p = pos + _FIXED_SIZE + hosts + 8  # STORETIMESTAMP sits between the hosts
    end = pos + size
    if p + 16 > end:
        return "record too short for its host fields"
    body_len = _I32.unpack_from(buf, p + 12)[0]
    if body_len < 0 or p + 16 + body_len > end:
        return f"body length {body_len} does not fit in the record"
    if body_len == 0:
        return None
    crc = _crc31(buf[p + 16 : p + 16 + body_len])
    stored = _I32.unpack_from(buf, pos + 8)[0]
    return None if crc == stored else f"body CRC {crc} != stored {stored}"


RECORD_IDENTITY: Final = struct.Struct(">ii4xi4xqq")
"""TOTALSIZE, MAGICCODE, QUEUEID, QUEUEOFFSET, PHYSICALOFFSET in one unpack (36 bytes from the record
start): what a pull checks against the unit it serves (topic and lengths: :func:`record_identity`)."""


def record_identity(buf: Buffer, pos: int, limit: int) -> tuple[int, int, int, int, int, bytes]:
    """``(TOTALSIZE, QUEUEID, QUEUEOFFSET, PHYSICALOFFSET, STORETIMESTAMP, topic)`` of the record at ``pos``,
    validated as recovery does but without the CRC: what a ConsumeQueue unit or an IndexFile header is
    checked against (the topic as stored, UTF-8 bytes)."""
    fixed, ts_pos, _rc, _bp, _bl, topic_pos, topic_len, _pp = _layout(buf, pos, limit, False)
    topic = bytes(buf[topic_pos : topic_pos + topic_len])
    return fixed[0], fixed[3], fixed[5], fixed[6], _I64.unpack_from(buf, ts_pos)[0], topic


def read_record_info(
    buf: Buffer, pos: int, limit: int | None = None, *, check_crc: bool = False
) -> RecordInfo:
    """Validate and parse what dispatch and recovery need from the record at ``pos``."""
    lim = len(buf) if limit is None else limit
    if _c_v4_info is not None and not check_crc:
        # (None: not a plain all-IPv4 record, or damaged: the parse below takes it, or says why not)
        got = _c_v4_info(buf, pos, lim)
        if got is not None:
            return RecordInfo(got[0], got[1], got[2], got[3], got[4], got[5], got[6], got[7], got[8])
    fixed, ts_pos, rc_pos, _bp, _bl, topic_pos, topic_len, props_pos = _layout(buf, pos, lim, check_crc)
    props_len = fixed[0] - (props_pos - pos)
    if len(fixed) == _V4_FIELDS:
        store_ts, prepared = fixed[9], fixed[11]
    else:
        store_ts, prepared = _I64.unpack_from(buf, ts_pos)[0], _I64.unpack_from(buf, rc_pos + 4)[0]
    return RecordInfo(
        fixed[6],
        fixed[0],
        str(buf[topic_pos : topic_pos + topic_len], "utf-8", "replace"),
        fixed[3],
        fixed[5],
        fixed[7],
        store_ts,
        prepared,
        decode_properties(buf[props_pos : props_pos + props_len]) if props_len else {},
    )


def decode_record(
    buf: Buffer, pos: int = 0, limit: int | None = None, *, check_crc: bool = True, inflate: bool = True
) -> StoredMessage:
    """Decode the whole record at ``pos`` into a :class:`StoredMessage` (body inflated if compressed,
    unless ``inflate`` is false: then ``body`` is the stored one, for whoever needs only the rest)."""
    lim = len(buf) if limit is None else limit
    fixed, ts_pos, rc_pos, body_pos, body_len, topic_pos, topic_len, props_pos = _layout(
        buf, pos, lim, check_crc
    )
    size, magic, crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts = fixed[:9]
    if sys_flag & (BORNHOST_V6_FLAG | STOREHOST_V6_FLAG):
        born_host = decode_host(buf, pos + _FIXED_SIZE, bool(sys_flag & BORNHOST_V6_FLAG))
        store_ts = _I64.unpack_from(buf, ts_pos)[0]
        store_host = decode_host(buf, ts_pos + 8, bool(sys_flag & STOREHOST_V6_FLAG))
        reconsume, prepared, _ = _AFTER_STOREHOST.unpack_from(buf, rc_pos)
    else:  # the common all-IPv4 layout in one unpack
        born_ip, born_port, store_ts, store_ip, store_port, reconsume, prepared = _V4_HOSTS.unpack_from(
            buf, pos + _FIXED_SIZE
        )
        born_host = (socket.inet_ntoa(born_ip), born_port)
        store_host = (socket.inet_ntoa(store_ip), store_port)
    stored_body = bytes(buf[body_pos : body_pos + body_len])
    props_len = size - (props_pos - pos)
    return StoredMessage(
        size,
        magic,
        crc,
        queue_id,
        flag,
        queue_offset,
        phys,
        sys_flag,
        born_ts,
        born_host,
        store_ts,
        store_host,
        reconsume,
        prepared,
        stored_body,
        inflate_body(stored_body, sys_flag) if inflate and sys_flag & COMPRESSED_FLAG else stored_body,
        bytes(buf[topic_pos : topic_pos + topic_len]).decode("utf-8", "replace"),
        decode_properties(buf[props_pos : props_pos + props_len]) if props_len else {},
        msg_id_prefix(store_host) + format(phys & 0xFFFFFFFFFFFFFFFF, "016X"),
    )


def decode_records(buf: Buffer) -> list[StoredMessage]:
    """Decode concatenated records, as a pull or query response body carries them."""
    out = []
    pos = 0
    while pos < len(buf):
        msg = decode_record(buf, pos)
        out.append(msg)
        pos += msg.store_size
    return out


__all__ = [
    "BLANK_HEADER_SIZE",
    "BLANK_MAGIC_CODE",
    "MAX_PROPERTIES_LENGTH",
    "RECORD_IDENTITY",
    "RecordInfo",
    "UniqKey",
    "body_crc",
    "body_crc_problem",
    "check_record",
    "create_msg_id",
    "decode_host",
    "decode_msg_id",
    "decode_properties",
    "decode_record",
    "decode_records",
    "decode_uniq_key",
    "encode_blank",
    "encode_host",
    "encode_properties",
    "encode_record",
    "encode_record_parts",
    "inflate_body",
    "read_header",
    "read_record_info",
    "record_identity",
    "record_size",
    "topic_field",
]
