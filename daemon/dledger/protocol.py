"""DLedger's RPC messages as openmessaging DLedger 0.3.1.2 (what RocketMQ 4.9.8 ships) puts them on the wire.

Every DLedger call is one RemotingCommand whose request code is a `DLedgerRequestCode`, with no header
fields and a body that is the request bean as ``JSON.toJSONBytes`` writes it; the answer is a response
command with remoting code 200 and the response bean as its body (``DLedgerRpcNettyService#handleResponse``).
The outcome travels inside the body, in the bean's ``code`` (`DLedgerResponseCode`).

fastjson writes a bean's properties, not its fields: every ``getX``/``isX`` getter (``PushEntryRequest``'s
``getFirstEntryIndex``, ``getCount``, ``isBatch`` included), sorted by name, nulls left out, enums by
name, ``byte[]`` as base64. Reading, it calls setters only, so the computed properties are ignored.
Pure functions: bytes in, beans out.
"""

from __future__ import annotations

import dataclasses
import enum
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Self, TypeVar

import orjson
import pybase64

from daemon.remoting.codes import CURRENT_VERSION, FLAG_RESPONSE
from daemon.remoting.command import RemotingCommand
from daemon.remoting.errors import RemotingProtocolError
from daemon.remoting.frame import MAX_FRAME_LENGTH, encode_command
from store import fastjson
from store.models import camel_case


class DLedgerRequestCode(enum.IntEnum):
    METADATA = 50000
    APPEND = 50001
    GET = 50002
    VOTE = 51001
    HEART_BEAT = 51002
    PULL = 51003
    PUSH = 51004
    LEADERSHIP_TRANSFER = 51005


class DLedgerResponseCode(enum.IntEnum):
    UNKNOWN = -1
    SUCCESS = 200
    TIMEOUT = 300
    METADATA_ERROR = 301
    NETWORK_ERROR = 302
    UNSUPPORTED = 303
    UNKNOWN_GROUP = 400
    UNKNOWN_MEMBER = 401
    UNEXPECTED_MEMBER = 402
    EXPIRED_TERM = 403
    NOT_LEADER = 404
    NOT_FOLLOWER = 405
    INCONSISTENT_STATE = 406
    INCONSISTENT_TERM = 407
    INCONSISTENT_INDEX = 408
    INCONSISTENT_LEADER = 409
    INDEX_OUT_OF_RANGE = 410
    UNEXPECTED_ARGUMENT = 411
    REPEATED_REQUEST = 412
    REPEATED_PUSH = 413
    DISK_ERROR = 414
    DISK_FULL = 415
    TERM_NOT_READY = 416
    FALL_BEHIND_TOO_MUCH = 417
    TAKE_LEADERSHIP_FAILED = 418
    INDEX_LESS_THAN_LOCAL_BEGIN = 419
    REQUEST_WITH_EMPTY_BODYS = 420
    PUSH_REQUEST_IS_FULL = 421
    INTERNAL_ERROR = 500
    TERM_CHANGED = 501
    WAIT_QUORUM_ACK_TIMEOUT = 502
    LEADER_PENDING_FULL = 503
    ILLEGAL_MEMBER_STATE = 504
    LEADER_NOT_READY = 505
    LEADER_TRANSFERRING = 506


#: The remoting-level code of every DLedger answer (``createResponseCommand(SUCCESS.getCode())``).
REMOTING_RESPONSE_CODE = int(DLedgerResponseCode.SUCCESS)

#: mqctl's binary push between its own members: an APPEND push whose body is the entries as the leader's
#: data file holds them (no JSON, no base64), its other fields in the request's extFields. A request code
#: of its own, outside `DLedgerRequestCode`: a 4.9.8 member registers its processor for DLedger's codes
#: only (``DLedgerRpcNettyService#registerProcessor``), so it would answer REQUEST_CODE_NOT_SUPPORTED, never
#: misread it; and a leader sends it only to a member that said it reads it (:data:`BINARY_PUSH_KEY`).
BINARY_PUSH_CODE = 51904
#: The extFields key by which a member says, in each of its DLedger answers, that it reads binary pushes
#: (value :data:`BINARY_PUSH_VERSION`). DLedger reads an answer's body only (``JSON.parseObject(
#: responseCommand.getBody(), ...)``), so a 4.9.8 leader ignores it.
BINARY_PUSH_KEY = "mqctlBinaryPush"
BINARY_PUSH_VERSION = "1"
#: What every mqctl member's DLedger answer carries in its extFields.
BINARY_PUSH_ADVERT: dict[str, str] = {BINARY_PUSH_KEY: BINARY_PUSH_VERSION}
#: The extFields key by which a binary push asks for its answer in :data:`PUSH_ANSWER` (value
#: :data:`BINARY_PUSH_VERSION`). A member that does not know it answers DLedger's JSON, as before; the
#: leader tells the two apart by the body's first byte (a JSON answer's is ``{``).
BINARY_ANSWER_KEY = "mqctlAnswer"
#: A binary push's answer, when the push asks for it: its first byte :data:`PUSH_ANSWER_TAG`, then the
#: ``PushEntryResponse`` fields a leader reads (code, term, index, count, beginIndex, endIndex), big-endian.
PUSH_ANSWER = struct.Struct(">Biqqiqq")
PUSH_ANSWER_TAG = 1


class VoteResult(enum.Enum):
    """``VoteResponse.RESULT``, written by name."""

    UNKNOWN = "UNKNOWN"
    ACCEPT = "ACCEPT"
    REJECT_UNKNOWN_LEADER = "REJECT_UNKNOWN_LEADER"
    REJECT_UNEXPECTED_LEADER = "REJECT_UNEXPECTED_LEADER"
    REJECT_EXPIRED_VOTE_TERM = "REJECT_EXPIRED_VOTE_TERM"
    REJECT_ALREADY_VOTED = "REJECT_ALREADY_VOTED"
    REJECT_ALREADY_HAS_LEADER = "REJECT_ALREADY_HAS_LEADER"
    REJECT_TERM_NOT_READY = "REJECT_TERM_NOT_READY"
    REJECT_TERM_SMALL_THAN_LEDGER = "REJECT_TERM_SMALL_THAN_LEDGER"
    REJECT_EXPIRED_LEDGER_TERM = "REJECT_EXPIRED_LEDGER_TERM"
    REJECT_SMALL_LEDGER_END_INDEX = "REJECT_SMALL_LEDGER_END_INDEX"
    REJECT_TAKING_LEADERSHIP = "REJECT_TAKING_LEADERSHIP"


class PushType(enum.Enum):
    """``PushEntryRequest.Type``, written by name."""

    APPEND = "APPEND"
    COMMIT = "COMMIT"
    COMPARE = "COMPARE"
    TRUNCATE = "TRUNCATE"


def _out(value: Any) -> Any:
    if value.__class__ in _PLAIN:
        return value
    if isinstance(value, bytes):
        return pybase64.b64encode(value).decode("ascii")
    if isinstance(value, enum.Enum):
        return value.value if isinstance(value.value, str) else int(value.value)
    if isinstance(value, WireBean):
        return value.to_json()
    if isinstance(value, list):
        return [_out(v) for v in value]
    if isinstance(value, dict):
        return {k: _out(v) for k, v in value.items()}
    return value


_PLAIN = frozenset({int, str, bool, float})
#: per bean class: its properties as (attribute, JSON name), sorted by JSON name as fastjson writes them
_WRITE_KEYS: dict[type, tuple[tuple[str, str], ...]] = {}
#: per bean class: its setter-backed properties as (attribute, JSON name, parser or None)
_READ_KEYS: dict[type, tuple[tuple[str, str, Any], ...]] = {}


def _write_keys(cls: type[WireBean]) -> tuple[tuple[str, str], ...]:
    keys = _WRITE_KEYS.get(cls)
    if keys is None:
        names = [f.name for f in dataclasses.fields(cls)] + list(_COMPUTED.get(cls, ()))
        keys = _WRITE_KEYS[cls] = tuple(sorted(((n, camel_case(n)) for n in names), key=lambda k: k[1]))
    return keys


def _read_keys(cls: type[WireBean]) -> tuple[tuple[str, str, Any], ...]:
    keys = _READ_KEYS.get(cls)
    if keys is None:
        fields = dataclasses.fields(cls)
        parsers = _PARSERS.get(cls, {})
        keys = _READ_KEYS[cls] = tuple((f.name, camel_case(f.name), parsers.get(f.name)) for f in fields)
    return keys


_B = TypeVar("_B", bound="WireBean")


@dataclass(slots=True)
class WireBean:
    """A DLedger message as a Java bean (unlike `store.models.Bean`: nested beans, base64, getter-only
    properties): its dataclass fields are its setter-backed properties (snake_case of the Java names);
    :data:`_COMPUTED` and :data:`_PARSERS` say what else each class writes and how it reads its fields (tables
    beside the classes, not class attributes: compiled, ``dataclass`` took those for fields)."""

    def to_json(self) -> dict[str, Any]:
        # the property names are worked out once per class: a push is encoded per follower per batch
        out: dict[str, Any] = {}
        for name, key in _write_keys(type(self)):
            value = getattr(self, name)
            if value is not None:
                out[key] = _out(value)
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Self:
        return bean_from_json(cls, data)

    def encode(self) -> bytes:
        return _dumps(self.to_json())

    @classmethod
    def decode(cls, body: bytes) -> Self:
        try:
            try:
                data = orjson.loads(body)  # several times json's speed over a push's base64 bodies
            except orjson.JSONDecodeError:
                data = fastjson.loads(
                    body
                )  # what fastjson writes and orjson refuses (ints past 64 bits, ...)
            return cls.from_json(data)
        except (ValueError, TypeError, UnicodeDecodeError) as exc:
            raise ValueError(f"bad {cls.__name__} body: {exc}") from None


def bean_from_json(cls: type[_B], data: dict[str, Any]) -> _B:
    """The generic walk of :meth:`WireBean.from_json` (which a bean may replace with its own, unrolled)."""
    if not isinstance(data, dict):
        raise ValueError(f"{cls.__name__}: a JSON object expected")
    kwargs: dict[str, Any] = {}
    for name, key, parse in _read_keys(cls):
        value = data.get(key)
        if value is not None:
            kwargs[name] = parse(value) if parse else value
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ValueError(f"{cls.__name__}: {exc}") from None


def _dumps(data: dict[str, Any]) -> bytes:
    """``fastjson.dumps(data)``, by orjson where it writes the same bytes (sorted keys, no spaces, UTF-8 unescaped:
    what every bean of ours is), several times faster on each push and its answer; fastjson's own writer for
    what orjson refuses (a lone surrogate, which fastjson writes as '?'; an int past 64 bits)."""
    try:
        return orjson.dumps(data, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return fastjson.dumps(data)


#: strings already written by :func:`json_str` (a member's group and ids, in every push and answer)
_JSON_STRS: dict[str, bytes] = {}


def json_str(text: str) -> bytes:
    """A JSON string as fastjson writes it (orjson's bytes where they are the same; fastjson's writer for
    what orjson refuses, a lone surrogate), remembered: the few a group uses recur in every message."""
    made = _JSON_STRS.get(text)
    if made is None:
        try:
            made = orjson.dumps(text)
        except TypeError:
            made = fastjson.dumps(text)
        if len(_JSON_STRS) >= 64:
            _JSON_STRS.clear()
        _JSON_STRS[text] = made
    return made


def _ids_json(bean: RequestOrResponse) -> bytes:
    """``,"leaderId":...,"localId":...,"remoteId":...`` as a bean writes them (nulls left out): in both
    PUSH beans these keys come together, after ``lastEntryIndex`` / ``index`` and before ``term``."""
    out = b""
    if bean.leader_id is not None:
        out += b',"leaderId":' + json_str(bean.leader_id)
    if bean.local_id is not None:
        out += b',"localId":' + json_str(bean.local_id)
    if bean.remote_id is not None:
        out += b',"remoteId":' + json_str(bean.remote_id)
    return out


def _or(value: Any, default: Any) -> Any:
    return default if value is None else value


def _read_base(bean: RequestOrResponse, data: dict[str, Any]) -> None:
    """``RequestOrResponse``'s properties read into `bean` as the generic walk reads them (a null or
    missing one keeps its default): the unrolled readers of the PUSH beans share it."""
    get = data.get
    bean.code = _or(get("code"), bean.code)
    bean.group = get("group")
    bean.leader_id = get("leaderId")
    bean.local_id = get("localId")
    bean.remote_id = get("remoteId")
    bean.term = _or(get("term"), bean.term)


def _b64(text: str) -> bytes:
    # every pushed body: pybase64's SIMD decoder, strict as ``binascii.a2b_base64(strict_mode=True)`` (the
    # alphabet, the padding) at several times its speed; a bad body raises binascii.Error, a ValueError
    return pybase64.b64decode(text, validate=True)


@dataclass(slots=True, init=False)
class DLedgerEntry(WireBean):
    """``DLedgerEntry`` (its body base64 in JSON); ``size`` is the stored size, header included."""

    body: bytes | None = None
    body_crc: int = 0
    chain_crc: int = 0
    channel: int = 0
    index: int = 0
    magic: int = 0
    pos: int = 0
    size: int = 0
    term: int = 0

    def __init__(
        self,
        body: bytes | None = None,
        body_crc: int = 0,
        chain_crc: int = 0,
        channel: int = 0,
        index: int = 0,
        magic: int = 0,
        pos: int = 0,
        size: int = 0,
        term: int = 0,
    ) -> None:
        # written out (docs/design/compiled-build.md): one per entry on both sides of a push
        self.body = body
        self.body_crc = body_crc
        self.chain_crc = chain_crc
        self.channel = channel
        self.index = index
        self.magic = magic
        self.pos = pos
        self.size = size
        self.term = term

    def to_json(self) -> dict[str, Any]:
        # WireBean's walk, unrolled: every entry of every push goes through here
        out: dict[str, Any] = (
            {} if self.body is None else {"body": pybase64.b64encode(self.body).decode("ascii")}
        )
        out["bodyCrc"], out["chainCrc"], out["channel"] = self.body_crc, self.chain_crc, self.channel
        out["index"], out["magic"], out["pos"] = self.index, self.magic, self.pos
        out["size"], out["term"] = self.size, self.term
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Self:
        # WireBean's walk, unrolled: a follower reads every pushed entry through here
        if not isinstance(data, dict):
            raise ValueError(f"{cls.__name__}: a JSON object expected")
        body, get = data.get("body"), data.get
        return cls(
            None if body is None else _b64(body),
            get("bodyCrc") or 0,
            get("chainCrc") or 0,
            get("channel") or 0,
            get("index") or 0,
            get("magic") or 0,
            get("pos") or 0,
            get("size") or 0,
            get("term") or 0,
        )

    def same(self, other: DLedgerEntry | None) -> bool:
        """``DLedgerEntry#equals``: size, magic, index, term, channel, pos and body (not the CRCs)."""
        return other is not None and (
            self.size,
            self.magic,
            self.index,
            self.term,
            self.channel,
            self.pos,
            self.body,
        ) == (other.size, other.magic, other.index, other.term, other.channel, other.pos, other.body)


def entry_json(entry: DLedgerEntry) -> bytes:
    """``entry.encode()`` written directly (base64 needs no escaping): a leader makes each pushed entry's
    once and writes it into every follower's push (:meth:`PushEntryRequest.encode_with`)."""
    fields = (
        b'"bodyCrc":%d,"chainCrc":%d,"channel":%d,"index":%d,"magic":%d,"pos":%d,"size":%d,"term":%d}'
        % (
            entry.body_crc,
            entry.chain_crc,
            entry.channel,
            entry.index,
            entry.magic,
            entry.pos,
            entry.size,
            entry.term,
        )
    )
    if entry.body is None:
        return b"{" + fields
    return b'{"body":"' + pybase64.b64encode(entry.body) + b'",' + fields


def _entry(data: dict[str, Any]) -> DLedgerEntry:
    return DLedgerEntry.from_json(data)


def _entries(data: list[Any]) -> list[DLedgerEntry]:
    if not isinstance(data, list):
        raise ValueError("entries: a JSON array expected")
    return [DLedgerEntry.from_json(e) for e in data]


@dataclass(slots=True, kw_only=True)
class RequestOrResponse(WireBean):
    """``RequestOrResponse``: what every DLedger message carries."""

    code: int = int(DLedgerResponseCode.SUCCESS)
    group: str | None = None
    leader_id: str | None = None
    local_id: str | None = None
    remote_id: str | None = None
    term: int = -1


@dataclass(slots=True, kw_only=True)
class VoteRequest(RequestOrResponse):
    ledger_end_index: int = -1
    ledger_end_term: int = -1


@dataclass(slots=True, kw_only=True)
class VoteResponse(RequestOrResponse):
    vote_result: VoteResult = VoteResult.UNKNOWN
    #: (ours, in the answer to a probe only: a vote asked in term -1, which only our members ask) what the
    #: answering member last saw of the asker: the highest term it took part in with it, and, where the
    #: answerer led that term, the last entry the asker acknowledged in it. A store restored from an older
    #: copy is behind them (`Node.abstain`). Absent from every other answer (DLedger's JSON unchanged), and
    #: from a 4.9.8 member's: fastjson leaves nulls out, and reading it ignores unknown properties.
    mqctl_seen_term: int | None = None
    mqctl_seen_index: int | None = None
    #: (ours, likewise) where the answering member's log ends (its last entry's term and index), when it
    #: holds one: an emptied member votes only for a candidate whose log is no less up to date
    mqctl_ledger_end_term: int | None = None
    mqctl_ledger_end_index: int | None = None


@dataclass(slots=True, kw_only=True)
class HeartBeatRequest(RequestOrResponse):
    #: (ours, as `VoteResponse`'s) this leader lends on a lease, so its followers of ours refuse candidates
    #: while they hear it (`Node.on_vote`); a 4.9.8 leader's heartbeat has none, and its followers vote as
    #: DLedger's do. 4.9.8's ``handleHeartBeat`` reads neither field (fastjson ignores unknown properties).
    mqctl_lease: bool | None = None
    #: (ours) the member this leader hands its leadership over to: its followers let that member's vote
    #: through, and the leader lends nothing meanwhile
    mqctl_transferee: str | None = None


@dataclass(slots=True, kw_only=True)
class HeartBeatResponse(RequestOrResponse):
    pass


@dataclass(slots=True, kw_only=True)
class PushEntryRequest(RequestOrResponse):
    """One entry per push (4.9.8 leaves ``isEnableBatchPush`` off), ``batchEntry`` always written."""

    batch_entry: list[DLedgerEntry] = field(default_factory=list)
    commit_index: int = -1
    entry: DLedgerEntry | None = None
    total_size: int = 0
    type: PushType = PushType.APPEND

    def __init__(
        self,
        *,
        code: int = int(DLedgerResponseCode.SUCCESS),
        group: str | None = None,
        leader_id: str | None = None,
        local_id: str | None = None,
        remote_id: str | None = None,
        term: int = -1,
        batch_entry: list[DLedgerEntry] | None = None,
        commit_index: int = -1,
        entry: DLedgerEntry | None = None,
        total_size: int = 0,
        type: PushType = PushType.APPEND,
    ) -> None:
        # written out (as DLedgerEntry's; keyword-only and partly inherited, so not under init=False, whose
        # test reads a class's own fields): one per push and follower
        self.code, self.group, self.leader_id, self.local_id = code, group, leader_id, local_id
        self.remote_id, self.term = remote_id, term
        self.batch_entry = [] if batch_entry is None else batch_entry
        self.commit_index, self.entry, self.total_size, self.type = commit_index, entry, total_size, type

    @property
    def batch(self) -> bool:
        return bool(self.batch_entry)

    @property
    def count(self) -> int:
        return len(self.batch_entry) if self.batch_entry else (1 if self.entry is not None else 0)

    @property
    def first_entry_index(self) -> int:
        if self.batch_entry:
            return self.batch_entry[0].index
        return self.entry.index if self.entry is not None else -1

    @property
    def last_entry_index(self) -> int:
        if self.batch_entry:
            return self.batch_entry[-1].index
        return self.entry.index if self.entry is not None else -1

    def encode(self) -> bytes:
        return self.encode_with([entry_json(e) for e in self.batch_entry])

    def encode_with(self, batch: list[bytes], entry: bytes | None = None) -> bytes:
        """:meth:`encode` with the JSON of ``batch_entry`` (in order) and of ``entry`` made already
        (:func:`entry_json`), written straight in the order fastjson sorts the properties: no dict, no
        second pass over the entries' bytes (a leader writes one per follower per batch)."""
        entries, one = self.batch_entry, self.entry
        if entries:
            count, first, last = len(entries), entries[0].index, entries[-1].index
        elif one is not None:
            count, first, last = 1, one.index, one.index
        else:
            count, first, last = 0, -1, -1
        head = b'{"batch":true,"batchEntry":[' if entries else b'{"batch":false,"batchEntry":['
        out = [
            head,
            b",".join(batch),
            b'],"code":%d,"commitIndex":%d,"count":%d' % (self.code, self.commit_index, count),
        ]
        if one is not None:
            out.append(b',"entry":')
            out.append(entry if entry is not None else entry_json(one))
        out.append(b',"firstEntryIndex":%d' % first)
        if self.group is not None:
            out.append(b',"group":' + json_str(self.group))
        out.append(b',"lastEntryIndex":%d' % last)
        out.append(_ids_json(self))
        out.append(b',"term":%d,"totalSize":%d,"type":' % (self.term, self.total_size))
        out.append(_TYPE_JSON[self.type])
        return b"".join(out)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Self:
        # the generic walk, unrolled: a follower reads every push through here
        if not isinstance(data, dict):
            raise ValueError(f"{cls.__name__}: a JSON object expected")
        get = data.get
        batch, one, kind = get("batchEntry"), get("entry"), get("type")
        bean = cls(
            batch_entry=[] if batch is None else _entries(batch),
            commit_index=_or(get("commitIndex"), -1),
            entry=None if one is None else _entry(one),
            total_size=_or(get("totalSize"), 0),
            type=PushType.APPEND if kind is None else PushType(kind),
        )
        _read_base(bean, data)
        return bean

    def entries(self) -> list[DLedgerEntry]:
        """The pushed entries, batched or single."""
        if self.batch_entry:
            return list(self.batch_entry)
        return [self.entry] if self.entry is not None else []


@dataclass(slots=True, kw_only=True)
class PushEntryResponse(RequestOrResponse):
    begin_index: int = 0
    count: int = 0
    end_index: int = 0
    index: int | None = None

    def __init__(
        self,
        *,
        code: int = int(DLedgerResponseCode.SUCCESS),
        group: str | None = None,
        leader_id: str | None = None,
        local_id: str | None = None,
        remote_id: str | None = None,
        term: int = -1,
        begin_index: int = 0,
        count: int = 0,
        end_index: int = 0,
        index: int | None = None,
    ) -> None:
        # written out (as PushEntryRequest's): every push is answered with one
        self.code, self.group, self.leader_id, self.local_id = code, group, leader_id, local_id
        self.remote_id, self.term = remote_id, term
        self.begin_index, self.count, self.end_index, self.index = begin_index, count, end_index, index

    def encode(self) -> bytes:
        # the generic walk, unrolled (keys in fastjson's order): every push is answered with one
        out = b'{"beginIndex":%d,"code":%d,"count":%d,"endIndex":%d' % (
            self.begin_index,
            self.code,
            self.count,
            self.end_index,
        )
        if self.group is not None:
            out += b',"group":' + json_str(self.group)
        if self.index is not None:
            out += b',"index":%d' % self.index
        return out + _ids_json(self) + b',"term":%d}' % self.term

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Self:
        # the generic walk, unrolled: a leader reads every follower's answer through here
        if not isinstance(data, dict):
            raise ValueError(f"{cls.__name__}: a JSON object expected")
        get = data.get
        bean = cls(
            begin_index=_or(get("beginIndex"), 0),
            count=_or(get("count"), 0),
            end_index=_or(get("endIndex"), 0),
            index=get("index"),
        )
        _read_base(bean, data)
        return bean


@dataclass(slots=True, kw_only=True)
class AppendEntryRequest(RequestOrResponse):
    body: bytes | None = None


@dataclass(slots=True, kw_only=True)
class AppendEntryResponse(RequestOrResponse):
    index: int = -1
    pos: int = -1


@dataclass(slots=True, kw_only=True)
class GetEntriesRequest(RequestOrResponse):
    begin_index: int | None = None
    index_list: list[int] | None = None
    max_size: int = 0


@dataclass(slots=True, kw_only=True)
class GetEntriesResponse(RequestOrResponse):
    entries: list[DLedgerEntry] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class MetadataRequest(RequestOrResponse):
    pass


@dataclass(slots=True, kw_only=True)
class MetadataResponse(RequestOrResponse):
    peers: dict[str, str] | None = None


@dataclass(slots=True, kw_only=True)
class LeadershipTransferRequest(RequestOrResponse):
    take_leadership_ledger_index: int = 0
    transfer_id: str | None = None
    transferee_id: str | None = None


@dataclass(slots=True, kw_only=True)
class LeadershipTransferResponse(RequestOrResponse):
    pass


@dataclass(slots=True, kw_only=True)
class PullEntriesRequest(RequestOrResponse):
    begin_index: int | None = None
    node_id: str | None = None


@dataclass(slots=True, kw_only=True)
class PullEntriesResponse(RequestOrResponse):
    entries: list[DLedgerEntry] = field(default_factory=list)


#: Each push type as its JSON value and the bean's closing brace (``type`` is a push's last property).
_TYPE_JSON: dict[PushType, bytes] = {t: b'"%s"}' % t.value.encode() for t in PushType}
#: Properties fastjson writes from getters without a field (computed from the fields), per bean class.
_COMPUTED: dict[type, tuple[str, ...]] = {
    PushEntryRequest: ("batch", "count", "first_entry_index", "last_entry_index"),
}
#: Fields whose JSON value is parsed by a function (nested beans, enums, base64), per bean class.
_PARSERS: dict[type, dict[str, Any]] = {
    DLedgerEntry: {"body": _b64},
    VoteResponse: {"vote_result": VoteResult},
    PushEntryRequest: {"entry": _entry, "batch_entry": _entries, "type": PushType},
    AppendEntryRequest: {"body": _b64},
    GetEntriesResponse: {"entries": _entries},
    PullEntriesResponse: {"entries": _entries},
}

#: Each request code's request and response beans (``DLedgerRpcNettyService#processRequest``).
BEANS: dict[DLedgerRequestCode, tuple[type[RequestOrResponse], type[RequestOrResponse]]] = {
    DLedgerRequestCode.METADATA: (MetadataRequest, MetadataResponse),
    DLedgerRequestCode.APPEND: (AppendEntryRequest, AppendEntryResponse),
    DLedgerRequestCode.GET: (GetEntriesRequest, GetEntriesResponse),
    DLedgerRequestCode.VOTE: (VoteRequest, VoteResponse),
    DLedgerRequestCode.HEART_BEAT: (HeartBeatRequest, HeartBeatResponse),
    DLedgerRequestCode.PULL: (PullEntriesRequest, PullEntriesResponse),
    DLedgerRequestCode.PUSH: (PushEntryRequest, PushEntryResponse),
    DLedgerRequestCode.LEADERSHIP_TRANSFER: (LeadershipTransferRequest, LeadershipTransferResponse),
}


def binary_push_fields(req: PushEntryRequest, first: int, count: int) -> dict[str, str]:
    """The extFields of a binary push: the PUSH bean's fields but the entries (its body)."""
    fields = {
        "group": req.group or "",
        "leaderId": req.leader_id or "",
        "localId": req.local_id or "",
        "remoteId": req.remote_id or "",
        "term": str(req.term),
        "commitIndex": str(req.commit_index),
        "index": str(first),
        "count": str(count),
        BINARY_ANSWER_KEY: BINARY_PUSH_VERSION,
    }
    return fields


#: A frame's length and its header's (a JSON header: no serialize type bits).
FRAME_PREFIX: Final = struct.Struct(">iI")
#: The numbers of a binary push that change from push to push, in the order its header holds them.
_PUSH_NUMBERS = b',"commitIndex":"0","index":"0","count":"0",'
_PUSH_OPAQUE = b',"opaque":0,'


class BinaryPushFrames:
    """The frames of one leader's binary pushes to one follower in one term: the frame
    ``encode_command`` makes of a :func:`binary_push_fields` request, its JSON header encoded once here
    with only the commit index, the first index, the count and the opaque written in per push (a push's
    request, extFields and header made by ``encode_command`` was the leader's largest cost of making it).
    `term` says which term it was made for."""

    def __init__(self, req: PushEntryRequest) -> None:
        # the header of such a request with every changing number 0, as the connection writes it
        # (``Connection.request``'s flag: a request, not one-way)
        fields = binary_push_fields(req, 0, 0)
        fields["commitIndex"] = "0"
        sample = RemotingCommand.request(BINARY_PUSH_CODE, fields)
        header = encode_command(sample)[FRAME_PREFIX.size :]
        # a JSON string holds no unescaped quote: a key's ``,"`` is the key's, wherever the names put one
        numbers = header.index(_PUSH_NUMBERS)
        opaque = header.index(_PUSH_OPAQUE, numbers)
        self.term = req.term
        #: the header up to the commit index's value; from the count's to the opaque's; the rest
        self._head = header[:numbers] + b',"commitIndex":"'
        self._middle = header[numbers + len(_PUSH_NUMBERS) - 1 : opaque] + b',"opaque":'
        self._tail = header[opaque + len(_PUSH_OPAQUE) - 1 :]
        #: what a header of this layout holds around its numbers (:func:`split_numbers`)
        self._parts = (self._head, b'","index":"', b'","count":"', b'"' + self._middle, self._tail)

    def frame(self, opaque: int, commit_index: int, first: int, count: int, raw: bytes) -> bytes:
        """The whole frame of the push of `raw` (entries `first`... of it, `count` of them)."""
        return self.head(opaque, commit_index, first, count, len(raw)) + raw

    def head(self, opaque: int, commit_index: int, first: int, count: int, body_length: int) -> bytes:
        """The frame up to its body (a body of `body_length` bytes): the leader writes it and the body as
        two buffers of one write (``Connection.send_frames``), the body not copied into the frame."""
        header = b'%s%d","index":"%d","count":"%d"%s%d%s' % (
            self._head,
            commit_index,
            first,
            count,
            self._middle,
            opaque,
            self._tail,
        )
        length = 4 + len(header) + body_length
        if length + 4 > MAX_FRAME_LENGTH:
            raise RemotingProtocolError(
                f"frame of {length + 4} bytes exceeds the {MAX_FRAME_LENGTH} byte limit"
            )
        return FRAME_PREFIX.pack(length, len(header)) + header

    def read(self, buf: bytearray, start: int, end: int) -> tuple[int, int, int, int] | None:
        """``(commit index, first index, count, opaque)`` of the push header ``buf[start:end]`` when it is this
        template's, byte for byte but for those numbers (each an optional minus and ASCII digits, as
        :meth:`head` writes them), else None: what a follower reads a push by without decoding its JSON (its
        other fields are the template's)."""
        numbers = split_numbers(buf, start, end, self._parts)
        if numbers is None or len(numbers) != 4:
            return None
        return numbers[0], numbers[1], numbers[2], numbers[3]


def split_numbers_py(
    buf: bytes | bytearray, start: int, end: int, parts: tuple[bytes, ...]
) -> tuple[int, ...] | None:
    """``store._cparse.split_numbers`` without the compiled build: the integers between the byte strings of
    ``parts`` when ``buf[start:end]`` is exactly ``parts[0]``, an integer, ``parts[1]``, ... ``parts[-1]``,
    each written as ``%d`` writes a 64-bit integer (no leading zero, no "-0"), else None."""
    if not 0 <= start <= end <= len(buf) or not buf.startswith(parts[0], start, end):
        return None
    at = start + len(parts[0])
    out = []
    for after in parts[1:]:
        negative = at < end and buf[at] == 45  # "-"
        first = at + 1 if negative else at
        stop = first
        while stop < end and stop - first < 20 and 48 <= buf[stop] <= 57:  # digits
            stop += 1
        digits = stop - first
        if digits == 0 or digits > 19 or (buf[first] == 48 and (digits > 1 or negative)):  # (48: "0")
            return None
        value = int(buf[at:stop])
        if not -(2**63) <= value < 2**63 or not buf.startswith(after, stop, end):
            return None
        out.append(value)
        at = stop + len(after)
    return tuple(out) if at == end else None


split_numbers: Callable[[bytes | bytearray, int, int, tuple[bytes, ...]], tuple[int, ...] | None]
try:  # the compiled build's (store/_cparse.c): no slice, search or int() a number
    from store import _cparse

    split_numbers = _cparse.split_numbers
except ImportError:
    split_numbers = split_numbers_py


def encode_push_answer(resp: PushEntryResponse) -> bytes:
    """The answer to a binary push that asked for it (:data:`PUSH_ANSWER`): the same fields as the JSON
    ``PushEntryResponse`` a leader reads, without the JSON (its group is the leader's own)."""
    index = resp.index if resp.index is not None else -1
    return PUSH_ANSWER.pack(
        PUSH_ANSWER_TAG, resp.code, resp.term, index, resp.count, resp.begin_index, resp.end_index
    )


#: The JSON header of a binary push's answer as ``encode_command`` writes a response's (fastjson's key order,
#: no extFields, no remark), the opaque left to fill in: the only part of it that changes.
_ANSWER_HEADER = (
    b'{"code":%d,"flag":%d,"language":"JAVA","opaque":%%d,"serializeTypeCurrentRPC":"JSON","version":%d}'
    % (REMOTING_RESPONSE_CODE, FLAG_RESPONSE, CURRENT_VERSION)
)
#: By the header's length (the opaque's digits): the whole answer frame's layout, the frame's length and
#: header length words, the header, then :data:`PUSH_ANSWER`.
_ANSWER_FRAMES: dict[int, struct.Struct] = {}


def push_answer_frame(
    opaque: int, code: int, term: int, index: int, count: int, begin: int, end: int
) -> bytes:
    """The whole response frame of a binary push that asked for :data:`PUSH_ANSWER` (a JSON header, as such a
    push's own always is: its code does not fit a binary header's short): one pack of its numbers, the
    same bytes as ``encode_command`` of the response :func:`encode_push_answer`'s body makes."""
    header = _ANSWER_HEADER % opaque
    size = len(header)
    layout = _ANSWER_FRAMES.get(size)
    if layout is None:
        layout = _ANSWER_FRAMES[size] = struct.Struct(f">iI{size}s{PUSH_ANSWER.format[1:]}")
    return layout.pack(
        4 + size + PUSH_ANSWER.size, size, header, PUSH_ANSWER_TAG, code, term, index, count, begin, end
    )


#: The answer header before its opaque's digits, and after them.
_ANSWER_PARTS: Final = tuple(_ANSWER_HEADER.split(b"%d"))


def read_answer_header(buf: bytearray, start: int, end: int) -> int | None:
    """The opaque of the header ``buf[start:end]`` when it is :func:`push_answer_frame`'s byte for byte but for
    the opaque's digits, else None: a leader reads its followers' answers so, without decoding their JSON."""
    numbers = split_numbers(buf, start, end, _ANSWER_PARTS)
    return numbers[0] if numbers is not None and len(numbers) == 1 else None


def is_push_answer(body: bytes) -> bool:
    """Whether an answer's body is :data:`PUSH_ANSWER` (a JSON bean starts with ``{``)."""
    return len(body) > 0 and body[0] == PUSH_ANSWER_TAG


def decode_push_answer(body: bytes, group: str | None) -> PushEntryResponse:
    """:func:`encode_push_answer`'s bytes as the bean; ValueError when they are not its layout."""
    if len(body) != PUSH_ANSWER.size:
        raise ValueError(f"a binary push answer of {len(body)} bytes, not {PUSH_ANSWER.size}")
    _tag, code, term, index, count, begin, end = PUSH_ANSWER.unpack(body)
    return PushEntryResponse(
        code=code,
        group=group,
        term=term,
        begin_index=begin,
        count=count,
        end_index=end,
        index=index if index >= 0 else None,
    )


#: A binary push's fields (:func:`read_binary_push`): group, leaderId, localId, remoteId, term, commitIndex,
#: its first index and its count.
BinaryPushFields = tuple[str | None, str | None, str | None, str | None, int, int, int, int]


def read_binary_push(ext: dict[str, str]) -> BinaryPushFields:
    """A binary push's extFields as its PUSH fields (an APPEND, no entries): ``group``, ``leaderId``,
    ``localId``, ``remoteId`` (None when empty), ``term``, ``commitIndex``, its first index and its count,
    as they are (no bean: a follower reads one per push); ValueError when one is missing or not a number."""
    get = ext.get
    try:
        return (
            get("group") or None,
            get("leaderId") or None,
            get("localId") or None,
            get("remoteId") or None,
            int(ext["term"]),
            int(ext["commitIndex"]),
            int(ext["index"]),
            int(ext["count"]),
        )
    except (KeyError, TypeError) as exc:
        raise ValueError(f"binary push without {exc}") from None
