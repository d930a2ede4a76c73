"""JSON bodies shared by the NameServer, the broker and mqctl (docs/wire-protocol.md §json-bodies).

Each body is a `store.models.Bean` dataclass (see there for the JSON mapping); the beans the store's
config files hold too (`TopicConfig`, `DataVersion`) are the store's, carried here as they are.
"""

from __future__ import annotations

import bisect
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field

from store import fastjson
from store.models import Bean, DataVersion, PermName, TopicConfig

__all__ = [
    "Bean",
    "BrokerData",
    "ClusterInfo",
    "DataVersion",
    "KVTable",
    "PermName",
    "QueueData",
    "RegisterBrokerBody",
    "TopicConfig",
    "TopicConfigSerializeWrapper",
    "TopicList",
    "TopicRouteData",
]


# --------------------------------------------------------------------------------------------- bodies


@dataclass(slots=True)
class QueueData(Bean):
    """One broker group's queues of a topic (docs/wire-protocol.md §route-bodies)."""

    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0


@dataclass(slots=True)
class BrokerData(Bean):
    """A broker group: brokerId → address, id 0 being the master (docs/wire-protocol.md §route-bodies)."""

    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = field(default_factory=dict)

    def master_addr(self) -> str | None:
        return self.broker_addrs.get(0)


@dataclass(slots=True)
class TopicRouteData(Bean):
    """GET_ROUTEINFO_BY_TOPIC body (docs/wire-protocol.md §route-bodies)."""

    queue_datas: list[QueueData] = field(default_factory=list)
    broker_datas: list[BrokerData] = field(default_factory=list)
    filter_server_table: dict[str, list[str]] = field(default_factory=dict)
    order_topic_conf: str | None = None


@dataclass(slots=True)
class ClusterInfo(Bean):
    """GET_BROKER_CLUSTER_INFO body (docs/wire-protocol.md §route-bodies)."""

    broker_addr_table: dict[str, BrokerData] = field(default_factory=dict)
    cluster_addr_table: dict[str, set[str]] = field(default_factory=dict)


@dataclass(slots=True)
class TopicList(Bean):
    """docs/wire-protocol.md §route-bodies."""

    topic_list: list[str] = field(default_factory=list)
    broker_addr: str | None = None


@dataclass(slots=True)
class KVTable(Bean):
    """docs/wire-protocol.md §route-bodies."""

    table: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class TopicConfigSerializeWrapper(Bean):
    """A broker's whole topic table with its version (docs/wire-protocol.md §registration-bodies); also
    `topics.json`."""

    topic_config_table: dict[str, TopicConfig] = field(default_factory=dict)
    data_version: DataVersion = field(default_factory=DataVersion)

    def dumps_kept(self, kept: TableText) -> bytes:
        """:meth:`dumps`'s bytes, the table's entries taken from ``kept`` (each re-encoded only after it
        changed): with 10,000 topics a whole encoding held the event loop for tens of milliseconds."""
        empty = TopicConfigSerializeWrapper({}, self.data_version).dumps()
        at = empty.rindex(_EMPTY_TABLE) + len(_EMPTY_TABLE) - 1
        table = self.topic_config_table
        return empty[:at] + b"".join(kept.parts(table, max(len(table), 1))) + empty[at:]


_INT = struct.Struct(">i")
#: The most a compressed registration body may inflate to: a broker of a million topics sends less; a
#: few hundred KiB of zeros (anyone may register a broker in protected mode) would inflate to gigabytes.
MAX_INFLATED_REGISTRATION = 64 * 1024 * 1024
_EMPTY_TABLE = b'"topicConfigTable":{}'
_TABLE_KEY = b'"topicConfigTable":'
_TOPIC_NAME_KEY = b'"topicName"'
#: What the compressed form's head (its data version and topic count) may take, inflated.
_MAX_HEAD = 64 * 1024
_VERSION_KEY = b'"dataVersion":'
_FILTERS_KEY = b'"filterServerList":'


class TableText:
    """A topic table's entries as REGISTER_BROKER's JSON writes them, kept between encodings: entries are
    replaced, never changed in place, so one that is the same object as last time has the same text, and
    the names stay sorted from one encoding to the next. After one topic changed in a table of 10,000 the
    next encoding re-encodes that entry alone, and sorts nothing."""

    def __init__(self) -> None:
        self._names: list[str] = []
        self._listed: set[str] = set()  # the names in ``_names``
        #: Two maps, not one of pairs: this one holds only strings and bytes, which the cyclic GC leaves
        #: alone, where 10,000 pairs would be 10,000 objects more for its every full collection to walk.
        self._texts: dict[str, bytes] = {}
        self._made_of: dict[str, TopicConfig] = {}

    def note(self, table: dict[str, TopicConfig]) -> None:
        """Keep the text of these entries now (topics registered alone as they are created), so that the
        next whole body encodes none of them: after a burst of 10,000 creations that body re-encoded them
        all on the loop, in slices it did not sleep between (docs/performance.md)."""
        texts, made_of = self._texts, self._made_of
        for name, config in table.items():
            if made_of.get(name) is not config:
                texts[name] = fastjson.dumps({name: config})[1:-1]
                made_of[name] = config

    def parts(self, table: dict[str, TopicConfig], per_part: int) -> Iterator[bytes]:
        """``table``'s entries in name order, comma-separated, ``per_part`` at a time (the first without
        the comma): joined, the inside of the JSON object ``sort_keys`` writes."""
        texts, made_of, names, listed = self._texts, self._made_of, self._names, self._listed
        gone = [name for name in names if name not in table]
        new = [name for name in table if name not in listed]
        for name in gone:
            texts.pop(name, None)
            made_of.pop(name, None)
        resort = len(gone) + len(new) > len(table) // 16
        if resort or len(texts) > len(table):  # texts of topics noted, then deleted before being listed
            for name in [name for name in texts if name not in table]:
                del texts[name]
                made_of.pop(name, None)
        if resort:
            names = self._names = sorted(table)
            listed = self._listed = set(names)
        else:
            for name in gone:
                del names[bisect.bisect_left(names, name)]
                listed.discard(name)
            for name in new:
                names.insert(bisect.bisect_left(names, name), name)
                listed.add(name)
        for start in range(0, len(names), per_part):
            out = []
            for name in names[start : start + per_part]:
                config = table[name]
                if made_of.get(name) is not config:
                    texts[name] = fastjson.dumps({name: config})[1:-1]
                    made_of[name] = config
                out.append(texts[name])
            piece = b",".join(out)
            yield piece if start == 0 else b"," + piece


@dataclass(slots=True)
class RegisterBrokerBody(Bean):
    """REGISTER_BROKER body (docs/wire-protocol.md §registration-bodies), in its JSON or its compressed
    form."""

    topic_config_serialize_wrapper: TopicConfigSerializeWrapper = field(
        default_factory=TopicConfigSerializeWrapper
    )
    filter_server_list: list[str] = field(default_factory=list)

    def encode(self, compressed: bool = False) -> bytes:
        raw = b"".join(self.encode_parts(compressed))
        return zlib.compress(raw, 9) if compressed else raw

    def encode_parts(
        self, compressed: bool = False, per_part: int = 100, kept: TableText | None = None
    ) -> Iterator[bytes]:
        """The body in pieces of ``per_part`` topics (before compression in the compressed form): for a
        caller that encodes a large table a little at a time between other work (the broker, on its event
        loop). Joined, the JSON form is :meth:`dumps`'s bytes. ``kept``: the JSON form's entries kept from
        the last encoding, re-encoded only where they changed."""
        wrapper = self.topic_config_serialize_wrapper
        table = wrapper.topic_config_table
        if compressed:
            version = wrapper.data_version.dumps()
            yield _INT.pack(len(version)) + version + _INT.pack(len(table))
            configs = list(table.values())
            for start in range(0, len(configs), per_part):
                out = bytearray()
                for config in configs[start : start + per_part]:
                    text = config.to_text().encode()
                    out += _INT.pack(len(text)) + text
                yield bytes(out)
            servers = fastjson.dumps(self.filter_server_list)
            yield _INT.pack(len(servers)) + servers
            return
        # the JSON around an empty table, then the table's entries in key order (as ``sort_keys`` writes
        # them), each piece a JSON object of its entries without the braces
        empty = RegisterBrokerBody(
            TopicConfigSerializeWrapper({}, wrapper.data_version), self.filter_server_list
        ).dumps()
        at = empty.rindex(_EMPTY_TABLE) + len(_EMPTY_TABLE) - 1
        yield empty[:at]
        if kept is not None:
            yield from kept.parts(table, per_part)
            yield empty[at:]
            return
        names = sorted(table)  # the names alone: sorting (name, config) pairs took ~4x as long on the loop
        for start in range(0, len(names), per_part):
            piece = fastjson.dumps({name: table[name] for name in names[start : start + per_part]})[1:-1]
            yield piece if start == 0 else b"," + piece
        yield empty[at:]

    @classmethod
    def peek(cls, body: bytes) -> RegisterBrokerBody | None:
        """The JSON form without its topic table: the data version and filter servers that come before
        it (keys sorted, as 4.9.8's fastjson and :meth:`encode` write them), with an empty table; None
        when the body is not laid out so (then decode it whole). For a NameServer that already holds
        that version and so reads no table: with 10,000 topics the table is a megabyte."""
        at = body.find(_TABLE_KEY)
        if at < 0:
            return None
        head = body[: at + len(_TABLE_KEY)]
        if _VERSION_KEY not in head or _FILTERS_KEY not in head:
            return None  # (a filter server list after the table would be lost: not the sorted layout)
        try:
            out = cls.loads(head + b"{}}}")
        except ValueError:
            return None
        return out if not out.topic_config_serialize_wrapper.topic_config_table else None

    @staticmethod
    def topic_count(body: bytes, compressed: bool = False) -> int:
        """How many topics the body carries, without parsing any: the compressed form says so before its
        table (only its head is inflated); the JSON form names each topic once (`"topicName"`, which no
        topic name or escaped string contains). For a NameServer that refuses a table past its cap before
        it spends a parse on it. Raises ValueError on a head that does not read."""
        if not body:
            return 0
        if not compressed:
            return body.count(_TOPIC_NAME_KEY)
        try:
            head = zlib.decompressobj().decompress(body, _MAX_HEAD)
        except zlib.error as exc:
            raise ValueError(f"bad compressed registration body: {exc}") from None
        if len(head) < 4:
            raise ValueError("truncated compressed registration body")
        (size,) = _INT.unpack_from(head, 0)
        if size < 0 or 8 + size > len(head):
            raise ValueError(f"compressed registration body: no topic count in its first {_MAX_HEAD} bytes")
        return int(_INT.unpack_from(head, 4 + size)[0])

    @classmethod
    def decode(cls, body: bytes, compressed: bool = False) -> RegisterBrokerBody:
        """Parse either form; raises ValueError on malformed input."""
        if not body:
            return cls()
        if not compressed:
            return cls.loads(body)
        return cls._decode_compressed(body, True)

    @classmethod
    def decode_without_table(cls, body: bytes, compressed: bool = False) -> RegisterBrokerBody:
        """Either form's data version and filter servers, its topic table left unparsed (empty): for a
        NameServer reading a slave's registration, whose topics the routes never take (4.9.8 parses them
        all the same, and a peer registering as a slave with a table of a million invented topics cost
        it seconds of CPU each time). The compressed form's entries are stepped over by their lengths; a
        JSON body not laid out as :meth:`peek` reads is parsed whole. Raises ValueError on malformed input."""
        if not body:
            return cls()
        if compressed:
            return cls._decode_compressed(body, False)
        head = cls.peek(body)
        if head is not None:
            return head
        whole = cls.loads(body)
        whole.topic_config_serialize_wrapper.topic_config_table = {}
        return whole

    @classmethod
    def _decode_compressed(cls, body: bytes, with_table: bool) -> RegisterBrokerBody:
        inflater = zlib.decompressobj()
        try:
            raw = inflater.decompress(body, MAX_INFLATED_REGISTRATION + 1)
        except zlib.error as exc:
            raise ValueError(f"bad compressed registration body: {exc}") from None
        if len(raw) > MAX_INFLATED_REGISTRATION:
            raise ValueError(
                f"compressed registration body of {len(body)} bytes inflates past {MAX_INFLATED_REGISTRATION} "
                "bytes (a decompression bomb?)"
            )
        pos = 0

        def chunk() -> bytes:
            nonlocal pos
            if pos + 4 > len(raw):
                raise ValueError("truncated compressed registration body")
            (size,) = _INT.unpack_from(raw, pos)
            start, pos = pos + 4, pos + 4 + size
            if size < 0 or pos > len(raw):
                raise ValueError("truncated compressed registration body")
            return raw[start:pos]

        version = DataVersion.loads(chunk())
        if pos + 4 > len(raw):
            raise ValueError("truncated compressed registration body")
        (count,) = _INT.unpack_from(raw, pos)
        pos += 4
        table = {}
        if with_table:
            for _ in range(count):
                config = TopicConfig.from_text(chunk().decode())
                table[config.topic_name] = config
        else:
            unpack = _INT.unpack_from
            for _ in range(count):  # each entry's length alone
                if pos + 4 > len(raw):
                    raise ValueError("truncated compressed registration body")
                (size,) = unpack(raw, pos)
                pos += 4 + size
                if size < 0 or pos > len(raw):
                    raise ValueError("truncated compressed registration body")
        servers = fastjson.loads(chunk())
        return cls(TopicConfigSerializeWrapper(table, version), list(servers or []))
